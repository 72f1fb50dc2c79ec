//! ONC RPC over TCP: record framing, AUTH_SYS calls, and the MOUNT call.
//! A connection can be used call-by-call (setup) or split into a sending and
//! a receiving half so that many calls are in flight (the workloads).

use std::io::{Cursor, Read, Write};
use std::net::{SocketAddr, TcpStream};

use nfs3_types::mount::{dirpath, mountres3};
use nfs3_types::nfs3::nfs_fh3;
use nfs3_types::rpc::{
    accept_stat_data, auth_unix, call_body, msg_body, opaque_auth, reply_body, rpc_msg, RPC_VERSION_2,
};
use nfs3_types::xdr_codec::{Opaque, Pack, Unpack};

pub type Result<T> = std::result::Result<T, String>;

/// Connects from a reserved port (as the Linux client and libnfs do when
/// run as root, and as servers with `secure` exports require), falling back
/// to any port when not allowed to bind one.
pub fn connect(addr: SocketAddr) -> Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let start = 600 + (std::process::id() % 300) as u16;
    for i in 0..400u16 {
        let port = 300 + (start + i * 7) % 723;
        let sock = Socket::new(Domain::IPV4, Type::STREAM, None).map_err(|e| e.to_string())?;
        match sock.bind(&SocketAddr::from(([0, 0, 0, 0], port)).into()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
            Err(_) => break, // not root: use an ordinary port
        }
        match sock.connect(&addr.into()) {
            Ok(()) => {
                let s: TcpStream = sock.into();
                s.set_nodelay(true).map_err(|e| e.to_string())?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable || e.kind() == std::io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(format!("connect {addr}: {e}")),
        }
    }
    let s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    Ok(s)
}

/// The AUTH_SYS credential of the caller (root by default, as benchmarks
/// run as root against exports with no_root_squash).
pub fn credential(uid: u32, gid: u32) -> opaque_auth<'static> {
    opaque_auth::auth_unix(&auth_unix {
        stamp: 0,
        machinename: Opaque::borrowed(b"nfsload"),
        uid,
        gid,
        gids: vec![gid],
    })
}

/// Appends one call record (fragment header, call header, arguments) to `out`.
pub fn encode_call(out: &mut Vec<u8>, xid: u32, prog: u32, vers: u32, proc_: u32, cred: &opaque_auth<'static>, args: &impl Pack) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    let msg = rpc_msg {
        xid,
        body: msg_body::CALL(call_body {
            rpcvers: RPC_VERSION_2,
            prog,
            vers,
            proc: proc_,
            cred: cred.borrow(),
            verf: opaque_auth::default(),
        }),
    };
    msg.pack(out).expect("packing into a Vec cannot fail");
    args.pack(out).expect("packing into a Vec cannot fail");
    let len = u32::try_from(out.len() - start - 4).expect("record fits u32");
    out[start..start + 4].copy_from_slice(&(0x8000_0000 | len).to_be_bytes());
}

/// Reads one whole reply record (all fragments) into `buf`.
pub fn read_record(r: &mut impl Read, buf: &mut Vec<u8>) -> Result<()> {
    buf.clear();
    loop {
        let mut h = [0u8; 4];
        r.read_exact(&mut h).map_err(|e| format!("reading a reply: {e}"))?;
        let h = u32::from_be_bytes(h);
        let len = (h & 0x7FFF_FFFF) as usize;
        let at = buf.len();
        buf.resize(at + len, 0);
        r.read_exact(&mut buf[at..]).map_err(|e| format!("reading a reply: {e}"))?;
        if h & 0x8000_0000 != 0 {
            return Ok(());
        }
    }
}

/// Parses the reply header of `record`; returns its xid and a cursor at the
/// procedure's results, or the RPC-level error.
pub fn parse_reply(record: &[u8]) -> Result<(u32, Cursor<&[u8]>)> {
    let mut cur = Cursor::new(record);
    let (msg, _) = rpc_msg::unpack(&mut cur).map_err(|e| format!("bad reply header: {e}"))?;
    match msg.body {
        msg_body::REPLY(reply_body::MSG_ACCEPTED(a)) => match a.reply_data {
            accept_stat_data::SUCCESS => Ok((msg.xid, cur)),
            other => Err(format!("call {} not accepted: {other:?}", msg.xid)),
        },
        msg_body::REPLY(reply_body::MSG_DENIED(r)) => Err(format!("call {} denied: {r:?}", msg.xid)),
        msg_body::CALL(_) => Err("got a call where a reply was expected".into()),
    }
}

/// A connection used one call at a time.
pub struct Client {
    pub stream: TcpStream,
    pub cred: opaque_auth<'static>,
    pub xid: u32,
    buf: Vec<u8>,
}

impl Client {
    pub fn new(stream: TcpStream, cred: opaque_auth<'static>, xid: u32) -> Client {
        Client { stream, cred, xid, buf: Vec::new() }
    }

    /// One call, waiting for its reply.
    pub fn call<R: Unpack>(&mut self, prog: u32, vers: u32, proc_: u32, args: &impl Pack) -> Result<R> {
        self.xid = self.xid.wrapping_add(1);
        let mut out = Vec::new();
        encode_call(&mut out, self.xid, prog, vers, proc_, &self.cred, args);
        self.stream.write_all(&out).map_err(|e| format!("sending a call: {e}"))?;
        read_record(&mut self.stream, &mut self.buf)?;
        let (xid, mut cur) = parse_reply(&self.buf)?;
        if xid != self.xid {
            return Err(format!("reply to xid {xid}, expected {}", self.xid));
        }
        let (r, _) = R::unpack(&mut cur).map_err(|e| format!("bad reply to procedure {proc_}: {e}"))?;
        Ok(r)
    }
}

/// MOUNT3 MNT of `path`: the export's root handle.
pub fn mount(addr: SocketAddr, path: &str, cred: &opaque_auth<'static>) -> Result<nfs_fh3> {
    let mut c = Client::new(connect(addr)?, cred.clone(), 1);
    let res: mountres3 = c.call(
        nfs3_types::mount::PROGRAM,
        nfs3_types::mount::VERSION,
        1,
        &dirpath(Opaque::borrowed(path.as_bytes())),
    )?;
    match res {
        mountres3::Ok(ok) => Ok(nfs_fh3 { data: Opaque::owned(ok.fhandle.0.to_vec()) }),
        mountres3::Err(e) => Err(format!("mount of {path} refused: {e:?}")),
    }
}
