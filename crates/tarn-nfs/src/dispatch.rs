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
