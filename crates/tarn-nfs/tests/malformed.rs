//! Bad input on the wire: garbage and truncated records, random handles,
//! wrong programs and versions, an oversized record, a client that goes
//! away mid-request. The server answers with an RPC or NFS error or
//! closes that connection; it never panics, and another client keeps
//! working throughout.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use nfs3_client::nfs3_types::nfs3::{ftype3, nfs_fh3, READ3args};
use rand::{Rng, RngCore};
use support::*;

fn call(xid: u32, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    for w in [xid, 0, 2, prog, vers, proc_] {
        b.extend_from_slice(&w.to_be_bytes());
    }
    // AUTH_SYS: stamp, machine "t", uid 0, gid 0, no groups; verifier AUTH_NONE.
    let body = [0u32, 1].iter().flat_map(|w| w.to_be_bytes()).chain(*b"t\0\0\0").chain([0u32, 0, 0].iter().flat_map(|w| w.to_be_bytes())).collect::<Vec<u8>>();
    b.extend_from_slice(&1u32.to_be_bytes());
    b.extend_from_slice(&(body.len() as u32).to_be_bytes());
    b.extend_from_slice(&body);
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(args);
    b
}

fn framed(record: &[u8]) -> Vec<u8> {
    let mut b = ((record.len() as u32) | 0x8000_0000).to_be_bytes().to_vec();
    b.extend_from_slice(record);
    b
}

fn connect_raw(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// One reply record, or None if the server closed the connection.
fn reply(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut h = [0u8; 4];
    s.read_exact(&mut h).ok()?;
    let len = (u32::from_be_bytes(h) & 0x7fff_ffff) as usize;
    let mut b = vec![0u8; len];
    s.read_exact(&mut b).ok()?;
    Some(b)
}

fn accept_stat(r: &[u8]) -> u32 {
    assert_eq!(&r[4..12], &[0, 0, 0, 1, 0, 0, 0, 0], "accepted reply");
    u32::from_be_bytes([r[20], r[21], r[22], r[23]])
}

#[test]
fn rpc_errors() {
    let fs = fs_support::single_fs("rpcerr");
    let srv = server(&fs, "rw,no_root_squash", 1);
    let mut s = connect_raw(srv.local_addr());
    for (prog, vers, proc_, want) in [(1234, 1, 0, 1), (100_003, 4, 0, 2), (100_003, 3, 99, 3), (100_003, 3, 1, 4), (100_005, 1, 0, 2)] {
        s.write_all(&framed(&call(7, prog, vers, proc_, &[]))).unwrap();
        let r = reply(&mut s).expect("a reply");
        assert_eq!(&r[..4], &7u32.to_be_bytes(), "xid echoed");
        assert_eq!(accept_stat(&r), want, "prog {prog} vers {vers} proc {proc_}");
    }
    // RPC version 3: MSG_DENIED / RPC_MISMATCH.
    let mut c = call(8, 100_003, 3, 0, &[]);
    c[8..12].copy_from_slice(&3u32.to_be_bytes());
    s.write_all(&framed(&c)).unwrap();
    let r = reply(&mut s).unwrap();
    assert_eq!(&r[4..16], &[0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0]);
    // PMAP GETPORT for NFS v3 over TCP answers this port.
    let args: Vec<u8> = [100_003u32, 3, 6, 0].iter().flat_map(|w| w.to_be_bytes()).collect();
    s.write_all(&framed(&call(9, 100_000, 2, 3, &args))).unwrap();
    let r = reply(&mut s).unwrap();
    assert_eq!(accept_stat(&r), 0);
    assert_eq!(u32::from_be_bytes([r[24], r[25], r[26], r[27]]), srv.local_addr().port() as u32);
}

#[test]
fn fuzzed_records_and_handles_never_hurt_another_client() {
    let run = tarn_testkit::seeded!(400);
    let mut rng = run.rng(0);
    let fs = fs_support::single_fs("fuzz");
    let srv = server(&fs, "rw,no_root_squash", 1);
    let addr = srv.local_addr();
    let rt = rt();
    let (mut good, root) = rt.block_on(connect(addr, "127.0.0.1", 0, 0));
    let valid = call(1, 100_003, 3, 1, &{
        let mut a = (root.data.len() as u32).to_be_bytes().to_vec();
        a.extend_from_slice(root.data.as_ref());
        a
    });
    let mut s = connect_raw(addr);
    for step in 0..run.count {
        let record: Vec<u8> = match rng.gen_range(0..5) {
            0 => {
                let mut b = vec![0u8; rng.gen_range(0..200)];
                rng.fill_bytes(&mut b);
                b
            }
            1 => valid[..rng.gen_range(0..valid.len())].to_vec(),
            2 => {
                let mut b = valid.clone();
                let i = rng.gen_range(0..b.len());
                b[i] ^= 1 << rng.gen_range(0..8);
                b
            }
            3 => {
                // A random handle (random length, often the right one) for a random procedure.
                let len = if rng.gen_bool(0.5) { 44 } else { rng.gen_range(0..80) };
                let mut h = vec![0u8; len];
                rng.fill_bytes(&mut h);
                if len == 44 && rng.gen_bool(0.5) {
                    h[..4].copy_from_slice(&[1, rng.gen_range(0..4), 0, 0]);
                    h[4..20].copy_from_slice(&root.data.as_ref()[4..20]);
                }
                let mut a = (len as u32).to_be_bytes().to_vec();
                a.extend_from_slice(&h);
                let mut tail = vec![0u8; rng.gen_range(0..64)];
                rng.fill_bytes(&mut tail);
                a.extend_from_slice(&tail);
                call(step as u32, 100_003, 3, rng.gen_range(0..22), &a)
            }
            _ => call(step as u32, [100_003, 100_005, 100_000][rng.gen_range(0..3)], 3, rng.gen_range(0..25), &{
                let mut t = vec![0u8; rng.gen_range(0..300)];
                rng.fill_bytes(&mut t);
                t
            }),
        };
        if s.write_all(&framed(&record)).is_err() || reply(&mut s).is_none() {
            s = connect_raw(addr); // the server closed it: fine, start over
        }
        if step % 20 == 0 {
            let a = rt.block_on(getattr(&mut good, &root)).expect("the other client still works");
            assert_eq!(a.type_, ftype3::NF3DIR);
        }
    }
    assert!(rt.block_on(getattr(&mut good, &root)).is_ok());
}

#[test]
fn oversized_record_and_disconnect_mid_request() {
    let fs = fs_support::single_fs("oversize");
    let srv = server(&fs, "rw,no_root_squash", 1);
    let addr = srv.local_addr();
    let rt = rt();
    let (mut good, root) = rt.block_on(connect(addr, "127.0.0.1", 0, 0));
    // 2 GiB announced: closed at once, nothing buffered.
    let mut s = connect_raw(addr);
    s.write_all(&0xffff_ffffu32.to_be_bytes()).unwrap();
    s.write_all(&[0u8; 1000]).ok();
    let mut buf = [0u8; 16];
    assert!(matches!(s.read(&mut buf), Ok(0) | Err(_)), "oversized record closes the connection");
    // Fragments summing past the bound: closed too.
    let mut s = connect_raw(addr);
    let frag = vec![0u8; 600 * 1024];
    let mut closed = false;
    for _ in 0..4 {
        let mut f = (frag.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(&frag);
        if s.write_all(&f).is_err() {
            closed = true;
            break;
        }
    }
    assert!(closed || matches!(s.read(&mut buf), Ok(0) | Err(_)));
    // A client that sends half a record and leaves.
    for _ in 0..20 {
        let mut s = connect_raw(addr);
        s.write_all(&(1000u32 | 0x8000_0000).to_be_bytes()).unwrap();
        s.write_all(&[1u8; 10]).unwrap();
        drop(s);
    }
    // Many calls in flight on one connection, the reply never read.
    let mut slow = connect_raw(addr);
    let rec = framed(&call(5, 100_003, 3, 0, &[]));
    for _ in 0..200 {
        slow.write_all(&rec).unwrap();
    }
    assert!(rt.block_on(getattr(&mut good, &root)).is_ok(), "the other client is unaffected");
    drop(slow);
}

/// A server started held (the daemon, while it imports its pools) keeps
/// clients waiting — no answer, no refusal — and serves them once let go.
#[test]
fn a_held_server_answers_only_after_serve_now() {
    let server = tarn_nfs::NfsServer::start_held("127.0.0.1:0".parse().unwrap(), 7).unwrap();
    let mut s = TcpStream::connect(server.local_addr()).expect("the port is bound while held");
    s.write_all(&framed(&call(41, 100003, 3, 0, &[]))).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(400))).unwrap();
    let mut b = [0u8; 4];
    let early = s.read(&mut b);
    assert!(
        matches!(&early, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
        "a held server must not answer yet: {early:?}"
    );
    server.serve_now();
    server.serve_now(); // a second call changes nothing
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let r = reply(&mut s).expect("the NULL call is answered after serve_now");
    assert_eq!(u32::from_be_bytes([r[0], r[1], r[2], r[3]]), 41, "xid");
    assert_eq!(accept_stat(&r), 0, "SUCCESS");
    server.shutdown();
}

/// Many calls in one write (a client pipelining, as Linux's does at many
/// calls in flight): cached GETATTRs, ACCESSes and READs, which the
/// connection answers itself and sends in batches, mixed with calls the
/// workers answer and with READs too large to batch. Each call gets
/// exactly one reply, with its own data, and nothing waits forever
/// although there are more calls than places in flight.
#[test]
fn pipelined_calls_are_each_answered_once() {
    let fs = fs_support::single_fs("pipeline");
    let root_ino = fs.root_ino();
    let f = fs.create_noref(root_ino, b"f", 0o644, tarn_fs::Cred::ROOT, true).unwrap().0;
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 251) as u8).collect();
    fs.write(f.ino, 0, &data).unwrap();
    let srv = server(&fs, "rw,no_root_squash", 1);
    let rt = rt();
    let (mut c, root) = rt.block_on(connect(srv.local_addr(), "127.0.0.1", 0, 0));
    let (fh, _) = rt.block_on(lookup(&mut c, &root, "f")).unwrap();
    rt.block_on(c.read(&READ3args { file: fh.clone(), offset: 0, count: 10 })).unwrap(); // atime: the later reads change nothing
    let fh_arg = |fh: &nfs_fh3| {
        let mut a = (fh.data.len() as u32).to_be_bytes().to_vec();
        a.extend_from_slice(fh.data.as_ref());
        a.resize(a.len().next_multiple_of(4), 0);
        a
    };
    let read_arg = |off: u64, count: u32| {
        let mut a = fh_arg(&fh);
        a.extend_from_slice(&off.to_be_bytes());
        a.extend_from_slice(&count.to_be_bytes());
        a
    };
    // xid → (procedure, offset, count) of what was asked.
    let mut asked = std::collections::HashMap::new();
    let mut out = Vec::new();
    for xid in 1..=300u32 {
        let (proc_, args, off, count) = match xid % 7 {
            0 => (3, { let mut a = fh_arg(&root); a.extend_from_slice(&1u32.to_be_bytes()); a.extend_from_slice(b"f\0\0\0"); a }, 0, 0),
            1 => (0, Vec::new(), 0, 0),
            2 => (4, { let mut a = fh_arg(&fh); a.extend_from_slice(&0x3fu32.to_be_bytes()); a }, 0, 0),
            3 => (6, read_arg(xid as u64 * 997, 200_000), xid as u64 * 997, 200_000),
            _ => {
                let off = xid as u64 * 1013 % 290_000;
                (6, read_arg(off, 4096), off, 4096)
            }
        };
        asked.insert(xid, (proc_, off, count));
        out.extend_from_slice(&framed(&call(xid, 100_003, 3, proc_, &args)));
        if xid % 100 == 0 {
            out.extend_from_slice(&framed(&call(1000 + xid, 100_003, 3, 1, &fh_arg(&fh)))); // GETATTR
            asked.insert(1000 + xid, (1, 0, 0));
        }
    }
    let mut s = connect_raw(srv.local_addr());
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || w.write_all(&out).unwrap());
    let mut seen = std::collections::HashSet::new();
    while seen.len() < asked.len() {
        let r = reply(&mut s).expect("a reply to every call");
        let xid = u32::from_be_bytes([r[0], r[1], r[2], r[3]]);
        let &(proc_, off, count) = asked.get(&xid).unwrap_or_else(|| panic!("a reply to xid {xid}, never asked"));
        assert!(seen.insert(xid), "xid {xid} answered twice");
        assert_eq!(accept_stat(&r), 0, "xid {xid}");
        if proc_ != 0 {
            assert_eq!(&r[24..28], &[0; 4], "xid {xid} (procedure {proc_}): NFS3_OK");
        }
        if proc_ == 6 {
            // status, post_op_attr (present: 4 + 84 bytes), count, eof, length, data.
            let at = 28 + 4 + 84;
            let n = u32::from_be_bytes(r[at..at + 4].try_into().unwrap()) as usize;
            let want = &data[off as usize..(off as usize + count as usize).min(data.len())];
            assert_eq!(n, want.len(), "xid {xid}: count");
            assert!(&r[at + 12..at + 12 + n] == want, "xid {xid}: the data read at {off}");
        }
    }
    writer.join().unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    assert!(reply(&mut s).is_none(), "no reply beyond one per call");
}
