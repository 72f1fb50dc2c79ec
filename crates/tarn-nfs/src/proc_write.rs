//! Procedures that change the file system: SETATTR, WRITE, COMMIT,
//! CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK.
//!
//! Durability (DESIGN invariant 4): an UNSTABLE write is tarn-fs's
//! ordinary dirty data; COMMIT returns after `Fs::fsync` made it durable;
//! FILE_SYNC and DATA_SYNC writes are made durable before the reply (and
//! answered FILE_SYNC). WRITE and COMMIT carry this server's verifier,
//! which changes at every daemon start and pool import, so a client
//! resends what it wrote UNSTABLE before a restart.
//!
//! wcc data is read before and after the operation without a lock held
//! across it, so a concurrent change can fall between (clients then just
//! drop their cache).

use nfs3_types::nfs3::{
    createhow3, mknoddata3, nfsstat3, sattr3, set_atime, set_mtime, stable_how, Nfs3Option,
    Nfs3Result, COMMIT3resfail, COMMIT3resok, CREATE3resfail, CREATE3resok, LINK3resfail,
    LINK3resok, MKDIR3resfail, MKDIR3resok, MKNOD3resfail, MKNOD3resok, REMOVE3resfail,
    REMOVE3resok, RENAME3resfail, RENAME3resok, RMDIR3resfail, RMDIR3resok, SETATTR3resfail,
    SETATTR3resok, SYMLINK3resfail, SYMLINK3resok, WRITE3resfail, WRITE3resok, wcc_data,
    writeverf3,
};
use tarn_fs::{Attr, SetAttr, TimeSet};

use crate::caller;
use crate::nfs::{fattr, status, Ctx, NfsResult, Target};
use crate::proc_read::{Reply, MAX_IO};
use crate::xdr::{Garbage, Reader};

fn reply<T: crate::rpc::PackDyn + 'static>(v: T) -> Reply {
    Ok(Box::new(v))
}

fn settime_a(t: set_atime) -> Option<TimeSet> {
    match t {
        set_atime::DONT_CHANGE => None,
        set_atime::SET_TO_SERVER_TIME => Some(TimeSet::Now),
        set_atime::SET_TO_CLIENT_TIME(t) => Some(TimeSet::Ns(t.seconds as i64 * 1_000_000_000 + t.nseconds as i64)),
    }
}

fn settime_m(t: set_mtime) -> Option<TimeSet> {
    match t {
        set_mtime::DONT_CHANGE => None,
        set_mtime::SET_TO_SERVER_TIME => Some(TimeSet::Now),
        set_mtime::SET_TO_CLIENT_TIME(t) => Some(TimeSet::Ns(t.seconds as i64 * 1_000_000_000 + t.nseconds as i64)),
    }
}

fn opt<T: Copy + nfs3_types::xdr_codec::Pack + nfs3_types::xdr_codec::Unpack>(o: &Nfs3Option<T>) -> Option<T> {
    match o {
        Nfs3Option::Some(v) => Some(*v),
        Nfs3Option::None => None,
    }
}

fn setattr_of(s: &sattr3) -> SetAttr {
    SetAttr {
        mode: opt(&s.mode),
        uid: opt(&s.uid),
        gid: opt(&s.gid),
        size: opt(&s.size),
        atime: settime_a(s.atime),
        mtime: settime_m(s.mtime),
    }
}

fn is_empty(sa: &SetAttr) -> bool {
    *sa == SetAttr::default()
}

pub fn setattr(ctx: &Ctx, r: &mut Reader) -> Reply {
    let fh = r.fh()?;
    let new = r.sattr()?;
    let guard = if r.bool()? { Some(r.time()?) } else { None };
    let t = match ctx.resolve(&fh) {
        Ok(t) => t,
        Err(s) => return reply(Nfs3Result::<SETATTR3resok, _>::Err((s, SETATTR3resfail::default()))),
    };
    let before = t.pre_op();
    let res = (|| -> NfsResult<()> {
        t.writable()?;
        let (fs, ino) = t.inode().ok_or(nfsstat3::NFS3ERR_ROFS)?;
        if let Some(g) = guard {
            let a = t.attr()?;
            if a.ctime != g {
                return Err(nfsstat3::NFS3ERR_NOT_SYNC);
            }
        }
        caller::setattr(fs, ino, &t.creds, &setattr_of(&new)).map_err(|e| status(&e))?;
        Ok(())
    })();
    reply(match res {
        Ok(()) => Nfs3Result::Ok(SETATTR3resok { obj_wcc: t.wcc(before) }),
        Err(s) => Nfs3Result::Err((s, SETATTR3resfail { obj_wcc: t.wcc(before) })),
    })
}

pub fn write(ctx: &Ctx, r: &mut Reader) -> Reply {
    let fh = r.fh()?;
    let offset = r.u64()?;
    let count = r.u32()?;
    let stable = r.stable()?;
    let data = r.opaque(MAX_IO as usize)?;
    let data = data.get(..count as usize).ok_or(Garbage)?;
    let t = match ctx.resolve(&fh) {
        Ok(t) => t,
        Err(s) => return reply(Nfs3Result::<WRITE3resok, _>::Err((s, WRITE3resfail::default()))),
    };
    let before = t.pre_op();
    let res = (|| -> NfsResult<(u32, stable_how)> {
        t.writable()?;
        let (fs, ino) = t.inode().ok_or(nfsstat3::NFS3ERR_ROFS)?;
        let n = caller::write(fs, ino, &t.creds, offset, data).map_err(|e| status(&e))?;
        if stable == stable_how::UNSTABLE {
            return Ok((n, stable_how::UNSTABLE));
        }
        caller::fsync(fs, ino, &t.creds).map_err(|e| status(&e))?;
        Ok((n, stable_how::FILE_SYNC))
    })();
    reply(match res {
        Ok((count, committed)) => Nfs3Result::Ok(WRITE3resok { file_wcc: t.wcc(before), count, committed, verf: writeverf3(ctx.verifier) }),
        Err(s) => Nfs3Result::Err((s, WRITE3resfail { file_wcc: t.wcc(before) })),
    })
}

pub fn commit(ctx: &Ctx, r: &mut Reader) -> Reply {
    let fh = r.fh()?;
    let _offset = r.u64()?;
    let _count = r.u32()?;
    let t = match ctx.resolve(&fh) {
        Ok(t) => t,
        Err(s) => return reply(Nfs3Result::<COMMIT3resok, _>::Err((s, COMMIT3resfail { file_wcc: wcc_data::default() }))),
    };
    let before = t.pre_op();
    // A read-only client or a snapshot has nothing to commit: OK.
    let res = match t.inode() {
        Some((fs, ino)) if t.writable().is_ok() => caller::fsync(fs, ino, &t.creds).map_err(|e| status(&e)),
        _ => Ok(()),
    };
    reply(match res {
        Ok(()) => Nfs3Result::Ok(COMMIT3resok { file_wcc: t.wcc(before), verf: writeverf3(ctx.verifier) }),
        Err(s) => Nfs3Result::Err((s, COMMIT3resfail { file_wcc: t.wcc(before) })),
    })
}

/// What a creating procedure made: the new object's attributes.
type Made = NfsResult<Attr>;

/// Runs `make` in directory `dir` (resolved from the args) and builds
/// the common CREATE/MKDIR/SYMLINK/MKNOD answer parts.
fn in_dir(ctx: &Ctx, dir: &nfs3_types::nfs3::nfs_fh3, make: impl FnOnce(&Target) -> Made) -> (Option<Target>, nfs3_types::nfs3::pre_op_attr, Made) {
    let t = match ctx.resolve(dir) {
        Ok(t) => t,
        Err(s) => return (None, Nfs3Option::None, Err(s)),
    };
    let before = t.pre_op();
    let made = t.writable().and_then(|_| make(&t));
    (Some(t), before, made)
}

fn dir_wcc(t: &Option<Target>, before: nfs3_types::nfs3::pre_op_attr) -> wcc_data {
    match t {
        Some(t) => t.wcc(before),
        None => wcc_data::default(),
    }
}

fn new_object(t: &Option<Target>, a: &Attr) -> (nfs3_types::nfs3::post_op_fh3, nfs3_types::nfs3::post_op_attr) {
    match t {
        Some(t) => (Nfs3Option::Some(t.fh_of(a)), Nfs3Option::Some(fattr(&t.entry, t.snapshot(), a))),
        None => (Nfs3Option::None, Nfs3Option::None),
    }
}

fn dir_inode(t: &Target) -> NfsResult<(&std::sync::Arc<tarn_fs::Fs>, u64)> {
    t.inode().ok_or(nfsstat3::NFS3ERR_ROFS)
}

/// The EXCLUSIVE create verifier, kept as Linux's knfsd keeps it: in the
/// new file's mtime and atime seconds (31 bits each), until the client's
/// SETATTR that follows replaces them.
fn verifier_times(v: [u8; 8]) -> (i64, i64) {
    let m = u32::from_be_bytes([v[0], v[1], v[2], v[3]]) & 0x7fff_ffff;
    let a = u32::from_be_bytes([v[4], v[5], v[6], v[7]]) & 0x7fff_ffff;
    (m as i64 * 1_000_000_000, a as i64 * 1_000_000_000)
}

pub fn create(ctx: &Ctx, r: &mut Reader) -> Reply {
    let w = r.diropargs()?;
    let how = r.createhow()?;
    let name = w.name.as_ref();
    let (t, before, made) = in_dir(ctx, &w.dir, |t| {
        let (fs, dir) = dir_inode(t)?;
        let st = |e: tarn_fs::FsError| status(&e);
        let exclusive = matches!(how, createhow3::GUARDED(_));
        match how {
            createhow3::UNCHECKED(s) | createhow3::GUARDED(s) => {
                let mut sa = setattr_of(&s);
                let perm = sa.mode.take().unwrap_or(0o644);
                let (a, created) = caller::create(fs, dir, name, perm, &t.creds, exclusive).map_err(st)?;
                if !created {
                    // An existing file (UNCHECKED): only its size changes.
                    sa = SetAttr { size: sa.size, ..SetAttr::default() };
                }
                if is_empty(&sa) {
                    return Ok(a);
                }
                caller::setattr(fs, a.ino, &t.creds, &sa).map_err(st)
            }
            createhow3::EXCLUSIVE(v) => {
                let (mtime, atime) = verifier_times(v.0);
                match caller::create(fs, dir, name, 0o600, &t.creds, true) {
                    Ok((a, _)) => {
                        let sa = SetAttr { atime: Some(TimeSet::Ns(atime)), mtime: Some(TimeSet::Ns(mtime)), ..SetAttr::default() };
                        caller::setattr(fs, a.ino, &t.creds, &sa).map_err(st)
                    }
                    Err(e) if e.errno() == libc::EEXIST => {
                        // A retry of our own create finds its verifier.
                        let a = caller::lookup(fs, dir, name, &t.creds).map_err(st)?;
                        if a.kind == tarn_fs::FileKind::File && a.mtime_ns == mtime && a.atime_ns == atime {
                            Ok(a)
                        } else {
                            Err(nfsstat3::NFS3ERR_EXIST)
                        }
                    }
                    Err(e) => Err(st(e)),
                }
            }
        }
    });
    reply(match made {
        Ok(a) => {
            let (obj, obj_attributes) = new_object(&t, &a);
            Nfs3Result::Ok(CREATE3resok { obj, obj_attributes, dir_wcc: dir_wcc(&t, before) })
        }
        Err(s) => Nfs3Result::Err((s, CREATE3resfail { dir_wcc: dir_wcc(&t, before) })),
    })
}

/// After creating `a`, the attributes the client asked for that creation
/// itself did not set (owner, times; the mode was given at creation).
fn apply_rest(t: &Target, fs: &tarn_fs::Fs, a: Attr, s: &sattr3) -> Made {
    let mut sa = setattr_of(s);
    sa.mode = None;
    sa.size = None;
    if is_empty(&sa) {
        return Ok(a);
    }
    caller::setattr(fs, a.ino, &t.creds, &sa).map_err(|e| status(&e))
}

pub fn mkdir(ctx: &Ctx, r: &mut Reader) -> Reply {
    let w = r.diropargs()?;
    let s = r.sattr()?;
    let (t, before, made) = in_dir(ctx, &w.dir, |t| {
        let (fs, dir) = dir_inode(t)?;
        let perm = opt(&s.mode).unwrap_or(0o755);
        let a = caller::mkdir(fs, dir, w.name.as_ref(), perm, &t.creds).map_err(|e| status(&e))?;
        apply_rest(t, fs, a, &s)
    });
    reply(match made {
        Ok(a) => {
            let (obj, obj_attributes) = new_object(&t, &a);
            Nfs3Result::Ok(MKDIR3resok { obj, obj_attributes, dir_wcc: dir_wcc(&t, before) })
        }
        Err(s) => Nfs3Result::Err((s, MKDIR3resfail { dir_wcc: dir_wcc(&t, before) })),
    })
}

pub fn symlink(ctx: &Ctx, r: &mut Reader) -> Reply {
    let w = r.diropargs()?;
    let s = r.sattr()?;
    let target = r.path()?;
    let (t, before, made) = in_dir(ctx, &w.dir, |t| {
        let (fs, dir) = dir_inode(t)?;
        let a = caller::symlink(fs, dir, w.name.as_ref(), target.as_ref(), &t.creds).map_err(|e| status(&e))?;
        apply_rest(t, fs, a, &s)
    });
    reply(match made {
        Ok(a) => {
            let (obj, obj_attributes) = new_object(&t, &a);
            Nfs3Result::Ok(SYMLINK3resok { obj, obj_attributes, dir_wcc: dir_wcc(&t, before) })
        }
        Err(s) => Nfs3Result::Err((s, SYMLINK3resfail { dir_wcc: dir_wcc(&t, before) })),
    })
}

pub fn mknod(ctx: &Ctx, r: &mut Reader) -> Reply {
    let w = r.diropargs()?;
    let what = r.mknoddata()?;
    let (t, before, made) = in_dir(ctx, &w.dir, |t| {
        let (fs, dir) = dir_inode(t)?;
        let (kind, s, rdev) = match &what {
            mknoddata3::NF3CHR(d) => (libc::S_IFCHR, &d.dev_attributes, libc::makedev(d.spec.specdata1, d.spec.specdata2)),
            mknoddata3::NF3BLK(d) => (libc::S_IFBLK, &d.dev_attributes, libc::makedev(d.spec.specdata1, d.spec.specdata2)),
            mknoddata3::NF3SOCK(s) => (libc::S_IFSOCK, s, 0),
            mknoddata3::NF3FIFO(s) => (libc::S_IFIFO, s, 0),
            mknoddata3::default => return Err(nfsstat3::NFS3ERR_BADTYPE),
        };
        let mode = kind | (opt(&s.mode).unwrap_or(0o644) & 0o7777);
        let a = caller::mknod(fs, dir, w.name.as_ref(), mode, rdev, &t.creds).map_err(|e| status(&e))?;
        apply_rest(t, fs, a, s)
    });
    reply(match made {
        Ok(a) => {
            let (obj, obj_attributes) = new_object(&t, &a);
            Nfs3Result::Ok(MKNOD3resok { obj, obj_attributes, dir_wcc: dir_wcc(&t, before) })
        }
        Err(s) => Nfs3Result::Err((s, MKNOD3resfail { dir_wcc: dir_wcc(&t, before) })),
    })
}

pub fn remove(ctx: &Ctx, r: &mut Reader, dir_only: bool) -> Reply {
    let w = r.diropargs()?;
    let (t, before, made) = in_dir(ctx, &w.dir, |t| {
        let (fs, dir) = dir_inode(t)?;
        let name = w.name.as_ref();
        let res = if dir_only { caller::rmdir(fs, dir, name, &t.creds) } else { caller::unlink(fs, dir, name, &t.creds) };
        res.map_err(|e| status(&e))?;
        // The directory's attributes stand in (nothing is returned).
        fs.getattr(dir).map_err(|e| status(&e))
    });
    let wcc = dir_wcc(&t, before);
    if dir_only {
        reply(match made {
            Ok(_) => Nfs3Result::Ok(RMDIR3resok { dir_wcc: wcc }),
            Err(s) => Nfs3Result::Err((s, RMDIR3resfail { dir_wcc: wcc })),
        })
    } else {
        reply(match made {
            Ok(_) => Nfs3Result::Ok(REMOVE3resok { dir_wcc: wcc }),
            Err(s) => Nfs3Result::Err((s, REMOVE3resfail { dir_wcc: wcc })),
        })
    }
}

pub fn rename(ctx: &Ctx, r: &mut Reader) -> Reply {
    let from = r.diropargs()?;
    let to = r.diropargs()?;
    let (ft, fbefore) = match ctx.resolve(&from.dir) {
        Ok(t) => {
            let b = t.pre_op();
            (Some(t), b)
        }
        Err(s) => return reply(Nfs3Result::<RENAME3resok, _>::Err((s, RENAME3resfail::default()))),
    };
    let (tt, tbefore) = match ctx.resolve(&to.dir) {
        Ok(t) => {
            let b = t.pre_op();
            (Some(t), b)
        }
        Err(s) => return reply(Nfs3Result::<RENAME3resok, _>::Err((s, RENAME3resfail { fromdir_wcc: dir_wcc(&ft, fbefore), todir_wcc: wcc_data::default() }))),
    };
    let res = (|| -> NfsResult<()> {
        let (f, t) = (ft.as_ref().ok_or(nfsstat3::NFS3ERR_STALE)?, tt.as_ref().ok_or(nfsstat3::NFS3ERR_STALE)?);
        f.writable()?;
        t.writable()?;
        let (ffs, fdir) = dir_inode(f)?;
        let (tfs, tdir) = dir_inode(t)?;
        if !std::sync::Arc::ptr_eq(ffs, tfs) {
            return Err(nfsstat3::NFS3ERR_XDEV);
        }
        caller::rename(ffs, fdir, from.name.as_ref(), tdir, to.name.as_ref(), &f.creds).map_err(|e| status(&e))
    })();
    let (fromdir_wcc, todir_wcc) = (dir_wcc(&ft, fbefore), dir_wcc(&tt, tbefore));
    reply(match res {
        Ok(()) => Nfs3Result::Ok(RENAME3resok { fromdir_wcc, todir_wcc }),
        Err(s) => Nfs3Result::Err((s, RENAME3resfail { fromdir_wcc, todir_wcc })),
    })
}

pub fn link(ctx: &Ctx, r: &mut Reader) -> Reply {
    let file = r.fh()?;
    let w = r.diropargs()?;
    let f = match ctx.resolve(&file) {
        Ok(t) => t,
        Err(s) => return reply(Nfs3Result::<LINK3resok, _>::Err((s, LINK3resfail { file_attributes: Nfs3Option::None, linkdir_wcc: wcc_data::default() }))),
    };
    let (t, before, made) = in_dir(ctx, &w.dir, |t| {
        let (fs, dir) = dir_inode(t)?;
        let (ffs, ino) = f.inode().ok_or(nfsstat3::NFS3ERR_ROFS)?;
        if !std::sync::Arc::ptr_eq(fs, ffs) || f.snapshot() != 0 {
            return Err(nfsstat3::NFS3ERR_XDEV);
        }
        caller::link(fs, ino, dir, w.name.as_ref(), &t.creds).map_err(|e| status(&e))
    });
    let linkdir_wcc = dir_wcc(&t, before);
    reply(match made {
        Ok(_) => Nfs3Result::Ok(LINK3resok { file_attributes: f.post_op(), linkdir_wcc }),
        Err(s) => Nfs3Result::Err((s, LINK3resfail { file_attributes: f.post_op(), linkdir_wcc })),
    })
}
