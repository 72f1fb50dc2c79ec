//! MOUNT v3 (RFC 1813 appendix I): MNT gives the root handle of an
//! export (by its path, "/pool/dataset", or by the dataset's mountpoint)
//! to a client its rules allow; DUMP, UMNT, UMNTALL and EXPORT keep and
//! show the list of mounts. No portmapper: clients are told the port.

use nfs3_types::mount::{dirpath, export_node, fhandle3, mountbody, mountres3, mountres3_ok, mountstat3, name};
use nfs3_types::xdr_codec::{List, Opaque, Void};

use crate::exports::{Entry, MOUNTS_MAX};
use crate::nfs::Ctx;
use crate::proc_read::Reply;
use crate::xdr::{Reader, PATH_WIRE_MAX};

/// AUTH_SYS, the only flavour served.
const AUTH_SYS: u32 = 1;

pub fn dispatch(ctx: &Ctx, proc_: u32, r: &mut Reader) -> Option<Reply> {
    Some(match proc_ {
        0 => Ok(Box::new(Void)),
        1 => mnt(ctx, r),
        2 => dump(ctx),
        3 => umnt(ctx, r),
        4 => {
            ctx.table.mounts.lock().retain(|(c, _)| *c != ctx.client);
            Ok(Box::new(Void))
        }
        5 => export(ctx),
        _ => return None,
    })
}

fn mnt(ctx: &Ctx, r: &mut Reader) -> Reply {
    let path = r.opaque(PATH_WIRE_MAX)?;
    let res = match std::str::from_utf8(path).ok().and_then(|p| ctx.table.by_path_below(p)) {
        None => mountres3::Err(mountstat3::MNT3ERR_NOENT),
        Some((e, _)) if e.export.rules.access(ctx.client).is_none() => mountres3::Err(mountstat3::MNT3ERR_ACCES),
        Some((e, rest)) => match directory_below(e, rest) {
            Err(stat) => mountres3::Err(stat),
            Ok(fhandle) => {
                let mut mounts = ctx.table.mounts.lock();
                let rec = (ctx.client, e.export.path.clone());
                if !mounts.contains(&rec) {
                    if mounts.len() >= MOUNTS_MAX {
                        mounts.remove(0);
                    }
                    mounts.push(rec);
                }
                mountres3::Ok(mountres3_ok { fhandle: fhandle3(Opaque::owned(fhandle)), auth_flavors: vec![AUTH_SYS] })
            }
        },
    };
    Ok(Box::new(res))
}

/// The handle of the directory `rest` names below the export's root
/// ("" is the root). Looked up without references, as the server; the
/// client's own rights are checked on each later call.
fn directory_below(e: &Entry, rest: &str) -> Result<Vec<u8>, mountstat3> {
    if rest.is_empty() {
        return Ok(e.root_handle().encode());
    }
    let fs = &e.export.fs;
    let mut attr = fs.getattr(fs.root_ino()).map_err(|_| mountstat3::MNT3ERR_SERVERFAULT)?;
    for part in rest.split('/').filter(|p| !p.is_empty() && *p != ".") {
        if part == ".." {
            return Err(mountstat3::MNT3ERR_NOENT);
        }
        attr = fs.lookup_noref(attr.ino, part.as_bytes()).map_err(|err| match err.errno() {
            libc::ENAMETOOLONG => mountstat3::MNT3ERR_NAMETOOLONG,
            libc::ENOTDIR => mountstat3::MNT3ERR_NOTDIR,
            _ => mountstat3::MNT3ERR_NOENT,
        })?;
        if attr.kind != tarn_fs::FileKind::Dir {
            return Err(mountstat3::MNT3ERR_NOTDIR);
        }
    }
    Ok(e.handle_of(0, attr.ino, attr.generation).encode())
}

fn umnt(ctx: &Ctx, r: &mut Reader) -> Reply {
    let path = r.opaque(PATH_WIRE_MAX)?;
    if let Some(e) = std::str::from_utf8(path).ok().and_then(|p| ctx.table.by_path(p)) {
        let p = e.export.path.clone();
        ctx.table.mounts.lock().retain(|(c, q)| !(*c == ctx.client && *q == p));
    }
    Ok(Box::new(Void))
}

fn dump(ctx: &Ctx) -> Reply {
    let list: Vec<mountbody<'static, 'static>> = ctx
        .table
        .mounts
        .lock()
        .iter()
        .map(|(c, p)| mountbody { ml_hostname: name(Opaque::owned(c.to_string().into_bytes())), ml_directory: dirpath(Opaque::owned(p.clone().into_bytes())) })
        .collect();
    Ok(Box::new(List(list)))
}

fn export(ctx: &Ctx) -> Reply {
    // Only exports this client may mount are listed, with no group names
    // (the rules can be host lists and CIDRs that EXPORT cannot express).
    let list: Vec<export_node<'static, 'static>> = ctx
        .table
        .entries
        .iter()
        .filter(|e| e.export.rules.access(ctx.client).is_some())
        .map(|e| export_node { ex_dir: dirpath(Opaque::owned(e.export.path.clone().into_bytes())), ex_groups: List(Vec::new()) })
        .collect();
    Ok(Box::new(List(list)))
}
