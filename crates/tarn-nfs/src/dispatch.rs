//! One call, from its record to its reply record: the RPC checks
//! (program, version, procedure, credentials) and the procedure table.

use nfs3_types::xdr_codec::Void;

use crate::nfs::Ctx;
use crate::rpc::{parse_call, reply, Header, Record, Status};
use crate::{mount, proc_dir, proc_read as rd, proc_write as wr};

pub const NFS_PROGRAM: u32 = 100_003;
pub const MOUNT_PROGRAM: u32 = 100_005;
pub const PMAP_PROGRAM: u32 = 100_000;

/// The reply record for `record`, or None when it cannot be answered
/// (not a call; the connection is then closed).
pub fn handle(record: &[u8], table: &crate::exports::Table, client: std::net::IpAddr, verifier: [u8; 8], port: u16) -> Option<Record> {
    let call = match parse_call(record) {
        Header::Call(c) => c,
        Header::RpcMismatch { xid } => return Some(reply(xid, Status::RpcMismatch, None)),
        Header::Garbage { xid: Some(xid) } => return Some(reply(xid, Status::GarbageArgs, None)),
        Header::Garbage { xid: None } => return None,
    };
    let xid = call.xid;
    let auth = match call.auth {
        Ok(a) => a,
        Err(s) => return Some(reply(xid, Status::AuthError(s), None)),
    };
    let mut args = call.args;
    let ctx = Ctx { table, client, auth: &auth, verifier };
    let result = match (call.prog, call.vers) {
        (NFS_PROGRAM, 3) => match call.proc_ {
            0 => Some(Ok(Box::new(Void) as Box<dyn crate::rpc::PackDyn>)),
            1 => Some(rd::getattr(&ctx, &mut args)),
            2 => Some(wr::setattr(&ctx, &mut args)),
            3 => Some(rd::lookup(&ctx, &mut args)),
            4 => Some(rd::access(&ctx, &mut args)),
            5 => Some(rd::readlink(&ctx, &mut args)),
            6 => Some(rd::read(&ctx, &mut args)),
            7 => Some(wr::write(&ctx, &mut args)),
            8 => Some(wr::create(&ctx, &mut args)),
            9 => Some(wr::mkdir(&ctx, &mut args)),
            10 => Some(wr::symlink(&ctx, &mut args)),
            11 => Some(wr::mknod(&ctx, &mut args)),
            12 => Some(wr::remove(&ctx, &mut args, false)),
            13 => Some(wr::remove(&ctx, &mut args, true)),
            14 => Some(wr::rename(&ctx, &mut args)),
            15 => Some(wr::link(&ctx, &mut args)),
            16 => Some(proc_dir::readdir(&ctx, &mut args)),
            17 => Some(proc_dir::readdirplus(&ctx, &mut args)),
            18 => Some(rd::fsstat(&ctx, &mut args)),
            19 => Some(rd::fsinfo(&ctx, &mut args)),
            20 => Some(rd::pathconf(&ctx, &mut args)),
            21 => Some(wr::commit(&ctx, &mut args)),
            _ => None,
        },
        (NFS_PROGRAM, _) => return Some(reply(xid, Status::ProgMismatch { low: 3, high: 3 }, None)),
        (MOUNT_PROGRAM, 3) => mount::dispatch(&ctx, call.proc_, &mut args),
        (MOUNT_PROGRAM, _) => return Some(reply(xid, Status::ProgMismatch { low: 3, high: 3 }, None)),
        (PMAP_PROGRAM, 2) => pmap(call.proc_, &mut args, port),
        (PMAP_PROGRAM, _) => return Some(reply(xid, Status::ProgMismatch { low: 2, high: 2 }, None)),
        _ => return Some(reply(xid, Status::ProgUnavail, None)),
    };
    Some(match result {
        None => reply(xid, Status::ProcUnavail, None),
        Some(Err(_)) => reply(xid, Status::GarbageArgs, None),
        Some(Ok(mut body)) => reply(xid, Status::Success, Some(body.as_mut())),
    })
}

/// The reply to `record` when it is a GETATTR, ACCESS or READ that
/// memory alone answers (no dnode or block to read, no lock to wait for,
/// no transaction): the connection's task sends it without handing the
/// call to a worker. None for every other call, and whenever the full
/// path must answer; `handle` then gives the same reply a worker would
/// have given this one.
pub fn handle_cached(record: &[u8], table: &crate::exports::Table, client: std::net::IpAddr, verifier: [u8; 8]) -> Option<Record> {
    // prog, vers and procedure are at fixed offsets: no parse for the rest.
    let word = |i: usize| record.get(i * 4..i * 4 + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    if word(3)? != NFS_PROGRAM || word(4)? != 3 || !matches!(word(5)?, 1 | 4 | 6) {
        return None;
    }
    let Header::Call(call) = parse_call(record) else { return None };
    let auth = call.auth.ok()?;
    let mut args = call.args;
    let ctx = Ctx { table, client, auth: &auth, verifier };
    let result = match call.proc_ {
        1 => rd::getattr_cached(&ctx, &mut args),
        4 => rd::access_cached(&ctx, &mut args),
        _ => rd::read_cached(&ctx, &mut args),
    }?;
    let mut body = result.ok()?;
    Some(reply(call.xid, Status::Success, Some(body.as_mut())))
}

/// PMAP v2 NULL and GETPORT on the same port, for clients that ask the
/// port mapper first: NFS v3 and MOUNT v3 over TCP are here, nothing
/// else is anywhere (port 0).
fn pmap(proc_: u32, r: &mut crate::xdr::Reader, port: u16) -> Option<crate::proc_read::Reply> {
    match proc_ {
        0 => Some(Ok(Box::new(Void))),
        3 => Some((|| {
            let prog = r.u32()?;
            let vers = r.u32()?;
            let prot = r.u32()?;
            let _port = r.u32()?;
            let ours = matches!((prog, vers), (NFS_PROGRAM, 3) | (MOUNT_PROGRAM, 3)) && prot == 6;
            Ok(Box::new(if ours { port as u32 } else { 0 }) as Box<dyn crate::rpc::PackDyn>)
        })()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::sync::Arc;

    use tarn_fs::{Cred, FsOptions};
    use tarn_obj::TopKind;

    use super::{handle, handle_cached, NFS_PROGRAM};
    use crate::exports::{Entry, Export, Table};
    use crate::fs_support as support;

    /// An RPC call with AUTH_SYS `uid`/`gid` and no groups.
    fn call(xid: u32, proc_: u32, uid: u32, gid: u32, args: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        for w in [xid, 0, 2, NFS_PROGRAM, 3, proc_, 1, 24, 1, 1] {
            b.extend_from_slice(&w.to_be_bytes()); // ... flavor AUTH_SYS, 24 bytes, stamp, name length 1
        }
        b.extend_from_slice(b"t\0\0\0");
        for w in [uid, gid, 0, 0, 0] {
            b.extend_from_slice(&w.to_be_bytes()); // uid, gid, no groups; verifier AUTH_NONE
        }
        b.extend_from_slice(args);
        b
    }

    fn fh_arg(h: &crate::handle::Handle) -> Vec<u8> {
        let data = h.encode();
        let mut b = (data.len() as u32).to_be_bytes().to_vec();
        b.extend_from_slice(&data);
        b.resize(b.len().next_multiple_of(4), 0);
        b
    }

    /// Every GETATTR, ACCESS and READ answered from memory is the reply a
    /// worker gives the same call, byte for byte; a call memory cannot
    /// answer as the full path would (a refused reader, a stale handle,
    /// a read that updates atime) is left to the worker.
    #[test]
    fn cached_replies_are_the_workers_replies() {
        let (pool, _devs) = support::mem_pool("nfscached", TopKind::Disk, 1, 256 << 20);
        let fs = support::new_fs(&pool, FsOptions::default());
        let root = fs.root_ino();
        let f = fs.create_noref(root, b"f", 0o640, Cred { uid: 1000, gid: 1000 }, true).unwrap().0;
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 253) as u8).collect();
        fs.write(f.ino, 0, &data).unwrap();
        let export = Export {
            path: "/tank/data".into(),
            mountpoint: None,
            fs: fs.clone(),
            pool_guid: fs.pool().guid(),
            objset: fs.objset().id().0,
            rules: tarn_share::nfs::parse("rw=@127.0.0.0/24,no_root_squash").unwrap().unwrap(),
            snapshots: None,
        };
        let entry = Arc::new(Entry::new(export));
        let fh = fh_arg(&entry.handle_of(0, f.ino, f.generation));
        let stale = fh_arg(&entry.handle_of(0, f.ino, f.generation + 1));
        let table = Table { entries: vec![entry], mounts: Default::default() };
        let client: IpAddr = "127.0.0.1".parse().unwrap();
        let verifier = [9; 8];
        let read = |fh: &[u8], off: u64, count: u32| {
            let mut a = fh.to_vec();
            a.extend_from_slice(&off.to_be_bytes());
            a.extend_from_slice(&count.to_be_bytes());
            a
        };
        let access = |fh: &[u8]| {
            let mut a = fh.to_vec();
            a.extend_from_slice(&0x3fu32.to_be_bytes());
            a
        };
        let same = |rec: &[u8]| -> bool {
            let Some(fast) = handle_cached(rec, &table, client, verifier) else { return false };
            let slow = handle(rec, &table, client, verifier, 2049).unwrap();
            assert_eq!(fast.to_bytes(), slow.to_bytes(), "call {:?}", &rec[..24]);
            true
        };
        assert!(same(&call(3, 1, 1000, 1000, &fh)), "getattr first");
        // Never read: READ updates atime, so the worker answers.
        assert!(!same(&call(1, 6, 1000, 1000, &read(&fh, 0, 4096))));
        handle(&call(2, 6, 1000, 1000, &read(&fh, 0, 4096)), &table, client, verifier, 2049).unwrap();
        for (i, (off, count)) in [(0u64, 4096u32), (4000, 131_072), (199_999, 1 << 20), (300_000, 10)].into_iter().enumerate() {
            assert!(same(&call(10 + i as u32, 6, 1000, 1000, &read(&fh, off, count))), "read {count} at {off}");
        }
        for (uid, gid) in [(1000, 1000), (0, 0), (3000, 1000), (3000, 3000)] {
            assert!(same(&call(20, 1, uid, gid, &fh)), "getattr as {uid}");
            assert!(same(&call(21, 4, uid, gid, &access(&fh))), "access as {uid}");
        }
        // Refused, stale, garbage, another procedure: the worker's.
        assert!(handle_cached(&call(30, 6, 3000, 3000, &read(&fh, 0, 10)), &table, client, verifier).is_none());
        assert!(handle_cached(&call(31, 1, 0, 0, &stale), &table, client, verifier).is_none());
        assert!(handle_cached(&call(32, 6, 0, 0, &[1, 2, 3]), &table, client, verifier).is_none());
        assert!(handle_cached(&call(33, 3, 0, 0, &fh), &table, client, verifier).is_none(), "LOOKUP");
        assert!(handle_cached(&call(34, 1, 0, 0, &fh), &table, "10.1.1.1".parse().unwrap(), verifier).is_none(), "a refused client");
    }
}
