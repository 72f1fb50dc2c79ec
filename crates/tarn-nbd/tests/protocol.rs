//! Issue 13, test 6: bad input over a raw socket. Malformed handshakes,
//! unknown options and commands, requests past the end, writes to a
//! read-only export, garbage, a client vanishing mid-write: the protocol's
//! errors or a closed connection, never a panic; nothing of a cut-off
//! write is applied; another client, busy all along, is unaffected; and
//! the server still serves afterwards.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, RngCore};
use tarn_nbd::proto::*;
use tarn_nbd::Export;

struct Client {
    s: TcpStream,
}

impl Client {
    /// Connects and reads the greeting; sends `cflags`.
    fn connect(addr: SocketAddr, cflags: u32) -> Client {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut g = [0u8; 18];
        s.read_exact(&mut g).unwrap();
        assert_eq!(&g[..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        assert_eq!(u16::from_be_bytes([g[16], g[17]]), FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
        s.write_all(&cflags.to_be_bytes()).unwrap();
        Client { s }
    }
    fn ok(addr: SocketAddr) -> Client {
        Client::connect(addr, FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES)
    }
    fn option(&mut self, option: u32, data: &[u8]) {
        let mut m = IHAVEOPT.to_be_bytes().to_vec();
        m.extend_from_slice(&option.to_be_bytes());
        m.extend_from_slice(&(data.len() as u32).to_be_bytes());
        m.extend_from_slice(data);
        self.s.write_all(&m).unwrap();
    }
    /// One option reply: (type, data).
    fn reply(&mut self, option: u32) -> (u32, Vec<u8>) {
        let mut h = [0u8; 20];
        self.s.read_exact(&mut h).unwrap();
        assert_eq!(u64::from_be_bytes(h[..8].try_into().unwrap()), REPLY_MAGIC);
        assert_eq!(u32::from_be_bytes(h[8..12].try_into().unwrap()), option);
        let mut d = vec![0u8; u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize];
        self.s.read_exact(&mut d).unwrap();
        (u32::from_be_bytes(h[12..16].try_into().unwrap()), d)
    }
    /// Replies up to the final one (ACK or an error): all of them.
    fn replies(&mut self, option: u32) -> Vec<(u32, Vec<u8>)> {
        let mut out = Vec::new();
        loop {
            let r = self.reply(option);
            let last = r.0 == REP_ACK || r.0 & (1 << 31) != 0;
            out.push(r);
            if last {
                return out;
            }
        }
    }
    fn go_data(name: &str) -> Vec<u8> {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&0u16.to_be_bytes());
        d
    }
    /// OPT_GO `name`: (size, transmission flags).
    fn go(&mut self, name: &str) -> (u64, u16) {
        self.option(OPT_GO, &Client::go_data(name));
        let r = self.replies(OPT_GO);
        assert_eq!(r.last().unwrap().0, REP_ACK, "{r:?}");
        let info = r.iter().find(|(t, d)| *t == REP_INFO && d[..2] == [0, 0]).expect("NBD_INFO_EXPORT");
        (u64::from_be_bytes(info.1[2..10].try_into().unwrap()), u16::from_be_bytes(info.1[10..12].try_into().unwrap()))
    }
    fn send(&mut self, rtype: u16, flags: u16, cookie: u64, offset: u64, len: u32, payload: &[u8]) {
        let mut m = REQUEST_MAGIC.to_be_bytes().to_vec();
        m.extend_from_slice(&flags.to_be_bytes());
        m.extend_from_slice(&rtype.to_be_bytes());
        m.extend_from_slice(&cookie.to_be_bytes());
        m.extend_from_slice(&offset.to_be_bytes());
        m.extend_from_slice(&len.to_be_bytes());
        m.extend_from_slice(payload);
        self.s.write_all(&m).unwrap();
    }
    /// A simple reply: (error, cookie); `data` bytes follow on success.
    fn simple(&mut self, data: usize) -> (u32, u64, Vec<u8>) {
        let mut h = [0u8; 16];
        self.s.read_exact(&mut h).unwrap();
        assert_eq!(u32::from_be_bytes(h[..4].try_into().unwrap()), SIMPLE_REPLY_MAGIC);
        let err = u32::from_be_bytes(h[4..8].try_into().unwrap());
        let mut d = vec![0u8; if err == 0 { data } else { 0 }];
        self.s.read_exact(&mut d).unwrap();
        (err, u64::from_be_bytes(h[8..16].try_into().unwrap()), d)
    }
    fn request(&mut self, rtype: u16, flags: u16, offset: u64, len: u32, payload: &[u8]) -> (u32, Vec<u8>) {
        self.send(rtype, flags, 42, offset, len, payload);
        let data = if rtype == CMD_READ { len as usize } else { 0 };
        let (e, cookie, d) = self.simple(data);
        assert_eq!(cookie, 42);
        (e, d)
    }
    /// Whether the server closed the connection (EOF or reset).
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.s.read(&mut b), Ok(0) | Err(_))
    }
}

#[test]
fn bad_input_gets_errors_or_a_closed_connection_never_a_panic() {
    let seeded = tarn_testkit::seeded!(200);
    let mut rng = seeded.rng(6);
    let s = support::serve(16 << 20);
    let snap_vol = support::volume(&s.pool, 1 << 20, 4096);
    s.server.set_exports(vec![
        Export { name: "tank/vol".into(), volume: s.volume.clone(), readonly: false, description: String::new() },
        Export { name: "tank/ro".into(), volume: snap_vol, readonly: true, description: String::new() },
    ]);
    let addr = s.server.local_addr();

    // A client busy reading and writing all along.
    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut c = Client::ok(addr);
            c.go("tank/vol");
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let block = vec![(n % 251) as u8; 4096];
                let at = (8 << 20) + (n % 256) * 4096;
                assert_eq!(c.request(CMD_WRITE, 0, at, 4096, &block).0, 0);
                let (e, d) = c.request(CMD_READ, 0, at, 4096, &[]);
                assert_eq!((e, d), (0, block), "the busy client read other bytes");
                n += 1;
            }
            n
        })
    };

    // Handshakes: not fixed newstyle, unknown client flags, a bad option magic.
    assert!(Client::connect(addr, 0).closed());
    assert!(Client::connect(addr, 1 << 7 | FLAG_C_FIXED_NEWSTYLE).closed());
    let mut c = Client::ok(addr);
    c.s.write_all(b"NOTOPTS!\0\0\0\x07\0\0\0\0").unwrap();
    assert!(c.closed());
    // Unknown option, malformed GO, unknown export, TLS, a LIST with data:
    // errors, and the haggling goes on.
    let mut c = Client::ok(addr);
    c.option(99, b"whatever");
    assert_eq!(c.reply(99).0, REP_ERR_UNSUP);
    let mut bad = Client::go_data("tank/vol");
    bad[3] = 200; // name length past the data
    c.option(OPT_GO, &bad);
    assert_eq!(c.reply(OPT_GO).0, REP_ERR_INVALID);
    c.option(OPT_GO, &Client::go_data("tank/nope"));
    let (t, msg) = c.reply(OPT_GO);
    assert_eq!(t, REP_ERR_UNKNOWN, "{}", String::from_utf8_lossy(&msg));
    c.option(OPT_STARTTLS, &[]);
    assert_eq!(c.reply(OPT_STARTTLS).0, REP_ERR_UNSUP);
    c.option(OPT_LIST, b"x");
    assert_eq!(c.reply(OPT_LIST).0, REP_ERR_INVALID);
    c.option(OPT_LIST, &[]);
    let names: Vec<String> = c.replies(OPT_LIST).into_iter().filter(|r| r.0 == REP_SERVER).map(|r| String::from_utf8(r.1[4..].to_vec()).unwrap()).collect();
    assert_eq!(names, ["tank/ro", "tank/vol"]);
    // SET_META_CONTEXT before structured replies: invalid.
    let mut meta = Client::go_data("tank/vol")[..12].to_vec();
    meta.truncate(4 + 8);
    meta.extend_from_slice(&1u32.to_be_bytes());
    meta.extend_from_slice(&(15u32).to_be_bytes());
    meta.extend_from_slice(b"base:allocation");
    c.option(OPT_SET_META_CONTEXT, &meta);
    assert_eq!(c.reply(OPT_SET_META_CONTEXT).0, REP_ERR_INVALID);
    // An option too long to read: refused, closed.
    let mut m = IHAVEOPT.to_be_bytes().to_vec();
    m.extend_from_slice(&OPT_GO.to_be_bytes());
    m.extend_from_slice(&(1u32 << 30).to_be_bytes());
    c.s.write_all(&m).unwrap();
    assert_eq!(c.reply(OPT_GO).0, REP_ERR_TOO_BIG);
    assert!(c.closed());

    // Transmission: errors that keep the stream in step.
    let mut c = Client::ok(addr);
    let (size, flags) = c.go("tank/vol");
    assert_eq!(size, 16 << 20);
    assert_ne!(flags & FLAG_SEND_FLUSH, 0);
    assert_eq!(flags & FLAG_READ_ONLY, 0);
    assert_eq!(c.request(CMD_READ, 0, size - 10, 4096, &[]).0, EINVAL);
    assert_eq!(c.request(CMD_READ, 0, u64::MAX - 1, 4096, &[]).0, EINVAL);
    assert_eq!(c.request(CMD_WRITE, 0, size - 10, 20, &[7u8; 20]).0, ENOSPC);
    assert_eq!(c.request(CMD_TRIM, 0, size, 4096, &[]).0, EINVAL);
    assert_eq!(c.request(CMD_WRITE_ZEROES, 0, size - 1, 2, &[]).0, ENOSPC);
    assert_eq!(c.request(77, 0, 0, 0, &[]).0, EINVAL);
    assert_eq!(c.request(CMD_READ, 1 << 12, 0, 512, &[]).0, EINVAL, "unknown flags");
    assert_eq!(c.request(CMD_BLOCK_STATUS, 0, 0, 4096, &[]).0, EINVAL, "block status without a context");
    assert_eq!(c.request(CMD_READ, 0, 0, MAX_PAYLOAD_PLUS_ONE, &[]).0, EOVERFLOW);
    assert_eq!(c.request(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO, 0, 4096, &[]).0, ENOTSUP);
    // Still in step: a write and a read.
    assert_eq!(c.request(CMD_WRITE, CMD_FLAG_FUA, 4096, 5, b"hello").0, 0);
    assert_eq!(c.request(CMD_READ, 0, 4096, 5, &[]), (0, b"hello".to_vec()));
    assert_eq!(c.request(CMD_FLUSH, 0, 0, 0, &[]).0, 0);
    // Garbage instead of a request: closed.
    c.s.write_all(&[0xee; 28]).unwrap();
    assert!(c.closed());

    // A read-only export refuses every change with EPERM.
    let mut c = Client::ok(addr);
    let (_, flags) = c.go("tank/ro");
    assert_ne!(flags & FLAG_READ_ONLY, 0);
    assert_eq!(c.request(CMD_WRITE, 0, 0, 3, b"abc").0, EPERM);
    assert_eq!(c.request(CMD_TRIM, 0, 0, 4096, &[]).0, EPERM);
    assert_eq!(c.request(CMD_WRITE_ZEROES, 0, 0, 4096, &[]).0, EPERM);
    assert_eq!(c.request(CMD_READ, 0, 0, 3, &[]), (0, vec![0u8; 3]));

    // A client vanishing mid-write: nothing of that write is applied.
    let mut c = Client::ok(addr);
    c.go("tank/vol");
    c.send(CMD_WRITE, 0, 1, 1 << 20, 1 << 20, &[0x5a; 1000]);
    drop(c);
    // A write larger than the maximum payload: closed (its payload cannot be skipped).
    let mut c = Client::ok(addr);
    c.go("tank/vol");
    c.send(CMD_WRITE, 0, 1, 0, MAX_PAYLOAD_PLUS_ONE, &[]);
    assert!(c.closed());

    // Fuzz: random bytes at random points of the conversation.
    for i in 0..seeded.count {
        let mut c = Client::ok(addr);
        let mut junk = vec![0u8; rng.gen_range(1..200)];
        rng.fill_bytes(&mut junk);
        match i % 3 {
            0 => {}
            1 => {
                // A valid option header with random data.
                let opt = rng.gen_range(0..12);
                c.option(opt, &junk);
                junk.clear();
            }
            _ => {
                c.go("tank/vol");
                // A valid request header with random fields.
                let mut m = REQUEST_MAGIC.to_be_bytes().to_vec();
                m.extend_from_slice(&rng.gen::<u16>().to_be_bytes());
                m.extend_from_slice(&rng.gen_range(0u16..10).to_be_bytes());
                m.extend_from_slice(&rng.gen::<u64>().to_be_bytes());
                m.extend_from_slice(&rng.gen::<u64>().to_be_bytes());
                m.extend_from_slice(&rng.gen_range(0u32..1 << 16).to_be_bytes());
                let _ = c.s.write_all(&m);
            }
        }
        let _ = c.s.write_all(&junk);
        drop(c);
    }

    // Nothing of the vanished write; the server still serves.
    let mut c = Client::ok(addr);
    c.go("tank/vol");
    let (e, d) = c.request(CMD_READ, 0, 1 << 20, 4096, &[]);
    assert_eq!(e, 0);
    assert!(d.iter().all(|&b| b != 0x5a), "a write cut off mid-payload was applied");
    stop.store(true, Ordering::Relaxed);
    let n = busy.join().expect("the busy client failed");
    assert!(n > 0);
}

const MAX_PAYLOAD_PLUS_ONE: u32 = tarn_nbd::MAX_PAYLOAD + 1;

/// The allow-list: a client whose address it does not name is answered
/// `ERR_POLICY` for LIST, INFO, GO and meta contexts, and EXPORT_NAME
/// closes; named again, it is served.
#[test]
fn clients_not_allowed_get_err_policy() {
    let s = support::serve(1 << 20);
    let addr = s.server.local_addr();
    s.server.set_allow(tarn_share::nfs::HostList::from_items(&["@10.9.8.0/24"]).unwrap());
    let mut c = Client::ok(addr);
    c.option(OPT_LIST, &[]);
    assert_eq!(c.reply(OPT_LIST).0, REP_ERR_POLICY);
    c.option(OPT_INFO, &Client::go_data("tank/vol"));
    assert_eq!(c.reply(OPT_INFO).0, REP_ERR_POLICY);
    c.option(OPT_GO, &Client::go_data("tank/vol"));
    let (t, msg) = c.reply(OPT_GO);
    assert_eq!(t, REP_ERR_POLICY, "{}", String::from_utf8_lossy(&msg));
    c.option(OPT_EXPORT_NAME, b"tank/vol");
    assert!(c.closed());
    s.server.set_allow(tarn_share::nfs::HostList::from_items(&["127.0.0.1"]).unwrap());
    let mut c = Client::ok(addr);
    assert_eq!(c.go("tank/vol").0, 1 << 20);
}
