//! The NFSv3 back end: setup calls one at a time, workloads over several
//! connections with up to `qd` calls in flight on each (a sending and a
//! receiving thread per connection, replies matched by xid).

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::sync_channel;
use std::sync::Mutex;

use nfs3_types::nfs3::{
    createhow3, diropargs3, filename3, nfs_fh3, sattr3, stable_how, COMMIT3args, COMMIT3res, CREATE3args,
    CREATE3res, GETATTR3args, GETATTR3res, LOOKUP3args, LOOKUP3res, MKDIR3args, MKDIR3res, Nfs3Option,
    Nfs3Result, READ3args, READ3res, REMOVE3args, REMOVE3res, RMDIR3args, RMDIR3res, WRITE3args, WRITE3res,
};
use nfs3_types::rpc::opaque_auth;
use nfs3_types::xdr_codec::{Opaque, Unpack, Void};

use crate::rpc::{self, encode_call, parse_reply, read_record, Client, Result};
use crate::workload::{meta_name, Op, Pattern, Source};

const PROG: u32 = nfs3_types::nfs3::PROGRAM;
const VERS: u32 = 3;
const GETATTR: u32 = 1;
const LOOKUP: u32 = 3;
const READ: u32 = 6;
const WRITE: u32 = 7;
const CREATE: u32 = 8;
const MKDIR: u32 = 9;
const REMOVE: u32 = 12;
const RMDIR: u32 = 13;
const COMMIT: u32 = 21;
/// The xid of the NULL call that tells a connection's receiver to stop.
const LAST_XID: u32 = u32::MAX;

fn name(s: &str) -> filename3<'_> {
    filename3(Opaque::borrowed(s.as_bytes()))
}

fn fh_from(o: Nfs3Option<nfs_fh3>, what: &str) -> Result<nfs_fh3> {
    match o {
        Nfs3Option::Some(fh) => Ok(fh),
        Nfs3Option::None => Err(format!("{what}: the server returned no handle")),
    }
}

/// A mounted export.
pub struct Server {
    pub addr: SocketAddr,
    pub root: nfs_fh3,
    pub cred: opaque_auth<'static>,
}

/// Handles the workload needs: the data file or the metadata directory and
/// the handles of the files created in it.
pub struct Ctx {
    pub file: nfs_fh3,
    pub dir: nfs_fh3,
    pub handles: Vec<Mutex<Option<nfs_fh3>>>,
}

impl Server {
    pub fn client(&self) -> Result<Client> {
        Ok(Client::new(rpc::connect(self.addr)?, self.cred.clone(), 1))
    }

    pub fn lookup(&self, c: &mut Client, dir: &nfs_fh3, n: &str) -> Result<Option<nfs_fh3>> {
        let r: LOOKUP3res = c.call(PROG, VERS, LOOKUP, &LOOKUP3args { what: diropargs3 { dir: dir.clone(), name: name(n) } })?;
        match r {
            Nfs3Result::Ok(ok) => Ok(Some(ok.object)),
            Nfs3Result::Err((nfs3_types::nfs3::nfsstat3::NFS3ERR_NOENT, _)) => Ok(None),
            Nfs3Result::Err((e, _)) => Err(format!("LOOKUP {n}: {e:?}")),
        }
    }

    /// Creates `n` empty (truncating it if it exists).
    pub fn create_empty(&self, c: &mut Client, dir: &nfs_fh3, n: &str) -> Result<nfs_fh3> {
        let attrs = sattr3 { mode: Nfs3Option::Some(0o644), size: Nfs3Option::Some(0), ..sattr3::default() };
        let r: CREATE3res = c.call(PROG, VERS, CREATE, &CREATE3args { where_: diropargs3 { dir: dir.clone(), name: name(n) }, how: createhow3::UNCHECKED(attrs) })?;
        match r {
            Nfs3Result::Ok(ok) => fh_from(ok.obj, "CREATE"),
            Nfs3Result::Err((e, _)) => Err(format!("CREATE {n}: {e:?}")),
        }
    }

    pub fn mkdir(&self, c: &mut Client, dir: &nfs_fh3, n: &str) -> Result<nfs_fh3> {
        let attrs = sattr3 { mode: Nfs3Option::Some(0o755), ..sattr3::default() };
        let r: MKDIR3res = c.call(PROG, VERS, MKDIR, &MKDIR3args { where_: diropargs3 { dir: dir.clone(), name: name(n) }, attributes: attrs })?;
        match r {
            Nfs3Result::Ok(ok) => fh_from(ok.obj, "MKDIR"),
            Nfs3Result::Err((e, _)) => Err(format!("MKDIR {n}: {e:?}")),
        }
    }

    pub fn size(&self, c: &mut Client, fh: &nfs_fh3) -> Result<u64> {
        let r: GETATTR3res = c.call(PROG, VERS, GETATTR, &GETATTR3args { object: fh.clone() })?;
        match r {
            Nfs3Result::Ok(ok) => Ok(ok.obj_attributes.size),
            Nfs3Result::Err((e, _)) => Err(format!("GETATTR: {e:?}")),
        }
    }

    /// COMMIT of the whole file: what a client does on close or fsync.
    pub fn commit(&self, c: &mut Client, fh: &nfs_fh3) -> Result<()> {
        let r: COMMIT3res = c.call(PROG, VERS, COMMIT, &COMMIT3args { file: fh.clone(), offset: 0, count: 0 })?;
        match r {
            Nfs3Result::Ok(_) => Ok(()),
            Nfs3Result::Err((e, _)) => Err(format!("COMMIT: {e:?}")),
        }
    }

    pub fn remove(&self, c: &mut Client, dir: &nfs_fh3, n: &str) -> Result<()> {
        let r: REMOVE3res = c.call(PROG, VERS, REMOVE, &REMOVE3args { object: diropargs3 { dir: dir.clone(), name: name(n) } })?;
        match r {
            Nfs3Result::Ok(_) | Nfs3Result::Err((nfs3_types::nfs3::nfsstat3::NFS3ERR_NOENT, _)) => Ok(()),
            Nfs3Result::Err((e, _)) => Err(format!("REMOVE {n}: {e:?}")),
        }
    }

    pub fn rmdir(&self, c: &mut Client, dir: &nfs_fh3, n: &str) -> Result<()> {
        let r: RMDIR3res = c.call(PROG, VERS, RMDIR, &RMDIR3args { object: diropargs3 { dir: dir.clone(), name: name(n) } })?;
        match r {
            Nfs3Result::Ok(_) | Nfs3Result::Err((nfs3_types::nfs3::nfsstat3::NFS3ERR_NOENT, _)) => Ok(()),
            Nfs3Result::Err((e, _)) => Err(format!("RMDIR {n}: {e:?}")),
        }
    }

    /// Runs the operations of `source` over `conns` connections with up to
    /// `qd` calls in flight on each; returns how many were done.
    pub fn run(&self, conns: usize, qd: usize, source: &Source, ctx: &Ctx, pattern: &Pattern) -> Result<u64> {
        let streams = (0..conns).map(|_| rpc::connect(self.addr)).collect::<Result<Vec<_>>>()?;
        std::thread::scope(|s| {
            let workers: Vec<_> = streams
                .into_iter()
                .map(|stream| s.spawn(move || self.run_connection(stream, qd, source, ctx, pattern)))
                .collect();
            let mut total = 0;
            let mut first_err = None;
            for w in workers {
                match w.join().expect("worker thread panicked") {
                    Ok(n) => total += n,
                    Err(e) => first_err = first_err.or(Some(e)),
                }
            }
            first_err.map_or(Ok(total), Err)
        })
    }

    /// One call in flight: send, wait, check, on this thread (no hand-off
    /// between a sending and a receiving thread per call, which at queue
    /// depth 1 would time the client's thread wake-ups, not the server).
    fn run_serial(&self, mut stream: TcpStream, source: &Source, ctx: &Ctx, pattern: &Pattern) -> Result<u64> {
        let (mut out, mut data, mut buf) = (Vec::new(), Vec::new(), Vec::new());
        let mut done = 0u64;
        let mut xid = 0u32;
        while let Some(op) = source.next() {
            xid = xid.wrapping_add(1) % LAST_XID;
            out.clear();
            self.encode(&mut out, xid, op, ctx, pattern, &mut data)?;
            stream.write_all(&out).map_err(|e| format!("sending: {e}"))?;
            read_record(&mut stream, &mut buf)?;
            let (got, mut cur) = parse_reply(&buf)?;
            if got != xid {
                return Err(format!("reply to xid {got}, expected {xid}"));
            }
            check_reply(op, &mut cur, ctx)?;
            done += 1;
        }
        Ok(done)
    }

    fn run_connection(&self, stream: TcpStream, qd: usize, source: &Source, ctx: &Ctx, pattern: &Pattern) -> Result<u64> {
        if qd == 1 {
            return self.run_serial(stream, source, ctx, pattern);
        }
        let mut reader = stream.try_clone().map_err(|e| e.to_string())?;
        let mut writer = stream;
        let pending: Mutex<HashMap<u32, Op>> = Mutex::new(HashMap::new());
        let (give, take) = sync_channel::<()>(qd);
        for _ in 0..qd {
            give.send(()).expect("the channel holds qd tokens");
        }
        std::thread::scope(|s| {
            let pending = &pending;
            let receiver = s.spawn(move || -> Result<u64> {
                let mut buf = Vec::new();
                let mut done = 0u64;
                loop {
                    read_record(&mut reader, &mut buf)?;
                    let (xid, mut cur) = parse_reply(&buf)?;
                    if xid == LAST_XID {
                        return Ok(done);
                    }
                    let op = pending.lock().unwrap().remove(&xid).ok_or_else(|| format!("reply to unknown xid {xid}"))?;
                    check_reply(op, &mut cur, ctx)?;
                    done += 1;
                    if give.send(()).is_err() {
                        return Ok(done);
                    }
                }
            });
            let sent = self.send_all(&mut writer, qd, &take, source, ctx, pattern, pending);
            if sent.is_err() {
                let _ = writer.shutdown(std::net::Shutdown::Both);
            }
            let received = receiver.join().expect("receiver thread panicked");
            if received.is_err() {
                let _ = writer.shutdown(std::net::Shutdown::Both);
            }
            sent?;
            received
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn send_all(
        &self,
        w: &mut TcpStream,
        qd: usize,
        take: &std::sync::mpsc::Receiver<()>,
        source: &Source,
        ctx: &Ctx,
        pattern: &Pattern,
        pending: &Mutex<HashMap<u32, Op>>,
    ) -> Result<()> {
        let mut xid = 0u32;
        let mut out = Vec::new();
        let mut data = Vec::new();
        let stopped = "the receiver stopped".to_string();
        let mut held = 0;
        loop {
            take.recv().map_err(|_| stopped.clone())?;
            held += 1;
            let Some(op) = source.next() else { break };
            held -= 1;
            xid += 1;
            out.clear();
            self.encode(&mut out, xid, op, ctx, pattern, &mut data)?;
            pending.lock().unwrap().insert(xid, op);
            w.write_all(&out).map_err(|e| format!("sending: {e}"))?;
        }
        // Every reply is in once all the tokens are back; then the NULL
        // call's reply tells the receiver to stop.
        while held < qd {
            take.recv().map_err(|_| stopped.clone())?;
            held += 1;
        }
        out.clear();
        encode_call(&mut out, LAST_XID, PROG, VERS, 0, &self.cred, &Void);
        w.write_all(&out).map_err(|e| format!("sending: {e}"))
    }

    fn encode(&self, out: &mut Vec<u8>, xid: u32, op: Op, ctx: &Ctx, pattern: &Pattern, data: &mut Vec<u8>) -> Result<()> {
        let cred = &self.cred;
        match op {
            Op::Write { off, len } => {
                pattern.fill(off, data, len as usize);
                let args = WRITE3args { file: ctx.file.clone(), offset: off, count: len, stable: stable_how::UNSTABLE, data: Opaque::borrowed(data) };
                encode_call(out, xid, PROG, VERS, WRITE, cred, &args);
            }
            Op::Read { off, len } => {
                encode_call(out, xid, PROG, VERS, READ, cred, &READ3args { file: ctx.file.clone(), offset: off, count: len });
            }
            Op::Create(i) => {
                let n = meta_name(i);
                let attrs = sattr3 { mode: Nfs3Option::Some(0o644), ..sattr3::default() };
                let args = CREATE3args { where_: diropargs3 { dir: ctx.dir.clone(), name: name(&n) }, how: createhow3::GUARDED(attrs) };
                encode_call(out, xid, PROG, VERS, CREATE, cred, &args);
            }
            Op::Getattr(i) => {
                let fh = ctx.handles[i as usize].lock().unwrap().clone().ok_or_else(|| format!("no handle for {}", meta_name(i)))?;
                encode_call(out, xid, PROG, VERS, GETATTR, cred, &GETATTR3args { object: fh });
            }
            Op::Remove(i) => {
                let n = meta_name(i);
                encode_call(out, xid, PROG, VERS, REMOVE, cred, &REMOVE3args { object: diropargs3 { dir: ctx.dir.clone(), name: name(&n) } });
            }
        }
        Ok(())
    }
}

fn unpack<T: Unpack>(cur: &mut std::io::Cursor<&[u8]>, what: &str) -> Result<T> {
    T::unpack(cur).map(|(t, _)| t).map_err(|e| format!("bad {what} reply: {e}"))
}

/// Checks one reply: a short write or read, wrong data or an error status
/// ends the run (a wrong result is not a number).
fn check_reply(op: Op, cur: &mut std::io::Cursor<&[u8]>, ctx: &Ctx) -> Result<()> {
    match op {
        Op::Write { off, len } => match unpack::<WRITE3res>(cur, "WRITE")? {
            Nfs3Result::Ok(ok) if ok.count == len => Ok(()),
            Nfs3Result::Ok(ok) => Err(format!("WRITE at {off}: {} of {len} bytes written", ok.count)),
            Nfs3Result::Err((e, _)) => Err(format!("WRITE at {off}: {e:?}")),
        },
        Op::Read { off, len } => check_read(off, len, cur),
        Op::Create(i) => match unpack::<CREATE3res>(cur, "CREATE")? {
            Nfs3Result::Ok(ok) => {
                *ctx.handles[i as usize].lock().unwrap() = Some(fh_from(ok.obj, "CREATE")?);
                Ok(())
            }
            Nfs3Result::Err((e, _)) => Err(format!("CREATE {}: {e:?}", meta_name(i))),
        },
        Op::Getattr(i) => match unpack::<GETATTR3res>(cur, "GETATTR")? {
            Nfs3Result::Ok(ok) if ok.obj_attributes.size == 0 => Ok(()),
            Nfs3Result::Ok(ok) => Err(format!("GETATTR {}: size {}, expected 0", meta_name(i), ok.obj_attributes.size)),
            Nfs3Result::Err((e, _)) => Err(format!("GETATTR {}: {e:?}", meta_name(i))),
        },
        Op::Remove(i) => match unpack::<REMOVE3res>(cur, "REMOVE")? {
            Nfs3Result::Ok(_) => Ok(()),
            Nfs3Result::Err((e, _)) => Err(format!("REMOVE {}: {e:?}", meta_name(i))),
        },
    }
}

/// A READ reply, checked where it lies in the record (the client shares
/// the machine with the server: copying each 1 MiB out first would be
/// time taken from the server's row).
fn check_read(off: u64, len: u32, cur: &mut std::io::Cursor<&[u8]>) -> Result<()> {
    let status = unpack::<u32>(cur, "READ")?;
    if status != 0 {
        cur.set_position(cur.position() - 4);
        let r = unpack::<READ3res>(cur, "READ")?;
        return match r {
            Nfs3Result::Err((e, _)) => Err(format!("READ at {off}: {e:?}")),
            Nfs3Result::Ok(_) => Err(format!("READ at {off}: status {status}")),
        };
    }
    let _attrs = unpack::<nfs3_types::nfs3::post_op_attr>(cur, "READ")?;
    let count = unpack::<u32>(cur, "READ")?;
    let _eof = unpack::<bool>(cur, "READ")?;
    let n = unpack::<u32>(cur, "READ")? as usize;
    let at = cur.position() as usize;
    let data = cur.get_ref().get(at..at + n).ok_or_else(|| format!("READ at {off}: reply shorter than its {n} bytes of data"))?;
    if n != len as usize || count as usize != n {
        return Err(format!("READ at {off}: {n} of {len} bytes (count {count})"));
    }
    Pattern::check(off, data)
}
