//! Procedures that change nothing: GETATTR, LOOKUP, ACCESS, READLINK,
//! READ, FSSTAT, FSINFO, PATHCONF.

use nfs3_types::nfs3::{
    nfsstat3, nfstime3, ACCESS3resfail, ACCESS3resok, FSINFO3resfail, FSINFO3resok,
    FSSTAT3resfail, FSSTAT3resok, GETATTR3resok, LOOKUP3resfail, LOOKUP3resok, Nfs3Option,
    Nfs3Result, PATHCONF3resfail, PATHCONF3resok, READ3resfail, READ3resok, READLINK3resfail,
    READLINK3resok, ACCESS3_DELETE, ACCESS3_EXECUTE, ACCESS3_EXTEND, ACCESS3_LOOKUP,
    ACCESS3_MODIFY, ACCESS3_READ, FSF3_CANSETTIME, FSF3_HOMOGENEOUS, FSF3_LINK, FSF3_SYMLINK,
};
use nfs3_types::nfs3::{fattr3, nfs_fh3, nfspath3};
use nfs3_types::xdr_codec::{Opaque, Pack, Void};

use crate::exports::Node;
use crate::handle::Kind;
use crate::nfs::{fattr, fh, status, Ctx, NfsResult, Target};
use crate::rpc::PackDyn;
use crate::xdr::{self, Reader};
use tarn_fs::Segment;

/// rtmax and wtmax: the largest READ and WRITE (1 MiB, what NAS clients ask for).
pub const MAX_IO: u32 = 1 << 20;

pub type Reply = xdr::Result<Box<dyn PackDyn>>;

fn ok<T: PackDyn + 'static>(v: T) -> Reply {
    Ok(Box::new(v))
}

pub fn getattr(ctx: &Ctx, r: &mut Reader) -> Reply {
    let fh = r.fh()?;
    let res: Nfs3Result<GETATTR3resok, Void> =
        match ctx.resolve(&fh).and_then(|t| t.attr()) {
            Ok(a) => Nfs3Result::Ok(GETATTR3resok { obj_attributes: a }),
            Err(s) => Nfs3Result::Err((s, Void)),
        };
    ok(res)
}

/// GETATTR from memory alone (`Ctx::resolve_cached`), or None.
pub fn getattr_cached(ctx: &Ctx, r: &mut Reader) -> Option<Reply> {
    let fh = r.fh().ok()?;
    let (t, a) = ctx.resolve_cached(&fh)?;
    let res: Nfs3Result<GETATTR3resok, Void> = Nfs3Result::Ok(GETATTR3resok { obj_attributes: fattr(&t.entry, 0, &a) });
    Some(ok(res))
}

/// `name` in directory `dir`: its handle and attributes.
pub fn lookup_in(dir: &Target, name: &[u8]) -> NfsResult<(nfs_fh3, fattr3)> {
    let entry = &dir.entry;
    let root_fh = || -> NfsResult<(nfs_fh3, fattr3)> {
        let fs = &entry.export.fs;
        let a = fs.getattr(fs.root_ino()).map_err(|e| status(&e))?;
        Ok((fh(&entry.root_handle()), fattr(entry, 0, &a)))
    };
    let virt = |kind: Kind| -> NfsResult<(nfs_fh3, fattr3)> {
        let fileid = if kind == Kind::Ctl { crate::nfs::CTL_FILEID } else { crate::nfs::SNAPDIR_FILEID };
        Ok((fh(&entry.virtual_handle(kind)), crate::nfs::virtual_attr(entry, fileid)?))
    };
    match &dir.node {
        Node::Inode { fs, ino, snapshot } => {
            let is_root = *ino == fs.root_ino();
            if is_root && *snapshot == 0 && name == b".zfs" && entry.export.snapshots.is_some() {
                return virt(Kind::Ctl);
            }
            if is_root && *snapshot != 0 && name == b".." {
                return virt(Kind::SnapDir);
            }
            let a = crate::caller::lookup(fs, *ino, name, &dir.creds).map_err(|e| status(&e))?;
            Ok((dir.fh_of(&a), fattr(entry, *snapshot, &a)))
        }
        Node::Ctl => match name {
            b"." => virt(Kind::Ctl),
            b".." => root_fh(),
            b"snapshot" => virt(Kind::SnapDir),
            _ => Err(nfsstat3::NFS3ERR_NOENT),
        },
        Node::SnapDir => match name {
            b"." => virt(Kind::SnapDir),
            b".." => virt(Kind::Ctl),
            _ => {
                let name = std::str::from_utf8(name).map_err(|_| nfsstat3::NFS3ERR_NOENT)?;
                let (id, fs) = entry.snapshot_by_name(name).ok_or(nfsstat3::NFS3ERR_NOENT)?;
                let a = fs.getattr(fs.root_ino()).map_err(|e| status(&e))?;
                Ok((fh(&entry.handle_of(id, a.ino, a.generation)), fattr(entry, id, &a)))
            }
        },
    }
}

pub fn lookup(ctx: &Ctx, r: &mut Reader) -> Reply {
    let what = r.diropargs()?;
    let dir = match ctx.resolve(&what.dir) {
        Ok(d) => d,
        Err(s) => return ok(Nfs3Result::<LOOKUP3resok, _>::Err((s, LOOKUP3resfail::default()))),
    };
    let res = match lookup_in(&dir, what.name.as_ref()) {
        Ok((object, a)) => Nfs3Result::Ok(LOOKUP3resok {
            object,
            obj_attributes: Nfs3Option::Some(a),
            dir_attributes: dir.post_op(),
        }),
        Err(s) => Nfs3Result::Err((s, LOOKUP3resfail { dir_attributes: dir.post_op() })),
    };
    ok(res)
}

pub fn access(ctx: &Ctx, r: &mut Reader) -> Reply {
    let fh = r.fh()?;
    let asked = r.u32()?;
    let t = match ctx.resolve(&fh) {
        Ok(t) => t,
        Err(s) => return ok(Nfs3Result::<ACCESS3resok, _>::Err((s, ACCESS3resfail::default()))),
    };
    let attr = match t.attr() {
        Ok(a) => a,
        Err(s) => return ok(Nfs3Result::<ACCESS3resok, _>::Err((s, ACCESS3resfail::default()))),
    };
    let inode_attr = match t.inode().map(|(fs, ino)| fs.getattr(ino)).transpose() {
        Ok(a) => a,
        Err(e) => return ok(Nfs3Result::<ACCESS3resok, _>::Err((status(&e), ACCESS3resfail::default()))),
    };
    let granted = granted(&t, inode_attr.as_ref(), asked);
    ok(Nfs3Result::<_, ACCESS3resfail>::Ok(ACCESS3resok { obj_attributes: Nfs3Option::Some(attr), access: granted }))
}

/// The bits of `asked` ACCESS grants `t`'s caller, `a` the inode's
/// attributes (None for the `.zfs` directories: read and search for
/// everyone).
fn granted(t: &Target, a: Option<&tarn_fs::Attr>, asked: u32) -> u32 {
    let mut granted = asked
        & (ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE | ACCESS3_EXECUTE);
    if t.writable().is_err() {
        granted &= !(ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE);
    }
    match (t.inode(), a) {
        (Some((fs, _)), Some(a)) => crate::caller::access_mask(fs, a, &t.creds, granted),
        _ => granted & (ACCESS3_READ | ACCESS3_LOOKUP),
    }
}

/// ACCESS from memory alone, or None (the same grant as `access`).
pub fn access_cached(ctx: &Ctx, r: &mut Reader) -> Option<Reply> {
    let fh = r.fh().ok()?;
    let asked = r.u32().ok()?;
    let (t, a) = ctx.resolve_cached(&fh)?;
    let granted = granted(&t, Some(&a), asked);
    let attr = fattr(&t.entry, 0, &a);
    Some(ok(Nfs3Result::<_, ACCESS3resfail>::Ok(ACCESS3resok { obj_attributes: Nfs3Option::Some(attr), access: granted })))
}

pub fn readlink(ctx: &Ctx, r: &mut Reader) -> Reply {
    let fh = r.fh()?;
    let res = (|| -> Result<READLINK3resok<'static>, (nfsstat3, READLINK3resfail)> {
        let t = ctx.resolve(&fh).map_err(|s| (s, READLINK3resfail::default()))?;
        let fail = |s| (s, READLINK3resfail { symlink_attributes: t.post_op() });
        let (fs, ino) = t.inode().ok_or_else(|| fail(nfsstat3::NFS3ERR_INVAL))?;
        let target = crate::caller::readlink(fs, ino, &t.creds).map_err(|e| fail(status(&e)))?;
        Ok(READLINK3resok { symlink_attributes: t.post_op(), data: nfspath3(Opaque::owned(target)) })
    })();
    ok(match res {
        Ok(v) => Nfs3Result::Ok(v),
        Err(e) => Nfs3Result::Err(e),
    })
}

/// A successful READ: packed like `Nfs3Result::Ok(READ3resok)`, but the
/// data (the file's blocks and runs of zeros, tarn-fs `read_segments`) is
/// the record's tail, written to the socket from the blocks' buffers
/// instead of copied into the reply.
struct ReadOk {
    file_attributes: nfs3_types::nfs3::post_op_attr,
    eof: bool,
    data: Vec<Segment>,
}

impl PackDyn for ReadOk {
    fn size(&self) -> usize {
        // status, attributes, count, eof, the opaque's length; then the data.
        4 + self.file_attributes.packed_size() + 4 + 4 + 4
    }

    fn pack_into(&self, out: &mut Vec<u8>) {
        let count = self.data.iter().map(Segment::len).sum::<usize>() as u32;
        let _ = nfsstat3::NFS3_OK.pack(out);
        let _ = self.file_attributes.pack(out);
        let _ = count.pack(out);
        let _ = self.eof.pack(out);
        let _ = count.pack(out);
    }

    fn take_tail(&mut self) -> Vec<Segment> {
        std::mem::take(&mut self.data)
    }
}

pub fn read(ctx: &Ctx, r: &mut Reader) -> Reply {
    let fh = r.fh()?;
    let offset = r.u64()?;
    let count = r.u32()?.min(MAX_IO);
    let res = (|| -> Result<ReadOk, (nfsstat3, READ3resfail)> {
        let t = ctx.resolve(&fh).map_err(|s| (s, READ3resfail::default()))?;
        let fail = |s| (s, READ3resfail { file_attributes: t.post_op() });
        let (fs, ino) = t.inode().ok_or_else(|| fail(nfsstat3::NFS3ERR_ISDIR))?;
        let data = crate::caller::read_segments(fs, ino, &t.creds, offset, count).map_err(|e| fail(status(&e)))?;
        let attr = t.attr().map_err(fail)?;
        let len: usize = data.iter().map(Segment::len).sum();
        let eof = offset.saturating_add(len as u64) >= attr.size;
        Ok(ReadOk { file_attributes: Nfs3Option::Some(attr), eof, data })
    })();
    match res {
        Ok(v) => ok(v),
        Err(e) => ok(Nfs3Result::<READ3resok, _>::Err(e)),
    }
}

/// A READ whose blocks are all in memory (tarn-fs `read_segments_cached`),
/// or None: the same reply `read` would give.
pub fn read_cached(ctx: &Ctx, r: &mut Reader) -> Option<Reply> {
    let fh = r.fh().ok()?;
    let offset = r.u64().ok()?;
    let count = r.u32().ok()?.min(MAX_IO);
    let (t, _) = ctx.resolve_cached(&fh)?;
    let (fs, ino) = t.inode()?;
    let (data, a) = crate::caller::read_segments_cached(fs, ino, &t.creds, offset, count)?;
    let len: usize = data.iter().map(Segment::len).sum();
    let eof = offset.saturating_add(len as u64) >= a.size;
    Some(ok(ReadOk { file_attributes: Nfs3Option::Some(fattr(&t.entry, 0, &a)), eof, data }))
}

pub fn fsstat(ctx: &Ctx, r: &mut Reader) -> Reply {
    let fh = r.fh()?;
    let res = (|| -> Result<FSSTAT3resok, (nfsstat3, FSSTAT3resfail)> {
        let t = ctx.resolve(&fh).map_err(|s| (s, FSSTAT3resfail::default()))?;
        // Quotas are in it: tarn-fs's statfs asks the dataset's SpaceLimit.
        let s = t.entry.export.fs.statfs().map_err(|e| (status(&e), FSSTAT3resfail { obj_attributes: t.post_op() }))?;
        let bs = s.block_size as u64;
        Ok(FSSTAT3resok {
            obj_attributes: t.post_op(),
            tbytes: s.blocks.saturating_mul(bs),
            fbytes: s.blocks_free.saturating_mul(bs),
            abytes: s.blocks_avail.saturating_mul(bs),
            tfiles: s.files,
            ffiles: s.files_free,
            afiles: s.files_free,
            invarsec: 0,
        })
    })();
    ok(match res {
        Ok(v) => Nfs3Result::Ok(v),
        Err(e) => Nfs3Result::Err(e),
    })
}

pub fn fsinfo(ctx: &Ctx, r: &mut Reader) -> Reply {
    let fh = r.fh()?;
    ok(match ctx.resolve(&fh) {
        Ok(t) => Nfs3Result::<_, FSINFO3resfail>::Ok(FSINFO3resok {
            obj_attributes: t.post_op(),
            rtmax: MAX_IO,
            rtpref: MAX_IO,
            rtmult: 4096,
            wtmax: MAX_IO,
            wtpref: MAX_IO,
            wtmult: 4096,
            dtpref: 64 * 1024,
            maxfilesize: tarn_fs::MAX_FILE_SIZE,
            time_delta: nfstime3 { seconds: 0, nseconds: 1 },
            properties: FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME,
        }),
        Err(s) => Nfs3Result::Err((s, FSINFO3resfail::default())),
    })
}

pub fn pathconf(ctx: &Ctx, r: &mut Reader) -> Reply {
    let fh = r.fh()?;
    ok(match ctx.resolve(&fh) {
        Ok(t) => Nfs3Result::<_, PATHCONF3resfail>::Ok(PATHCONF3resok {
            obj_attributes: t.post_op(),
            linkmax: tarn_fs::LINK_MAX,
            name_max: tarn_fs::NAME_MAX as u32,
            no_trunc: true,
            chown_restricted: true,
            case_insensitive: false,
            case_preserving: true,
        }),
        Err(s) => Nfs3Result::Err((s, PATHCONF3resfail::default())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::{reply, Status};
    use nfs3_types::nfs3::{fattr3, ftype3};

    /// READ's data sent as the record's tail gives the bytes the codec
    /// packs for the same READ3resok, for every padding length.
    #[test]
    fn read_reply_with_the_data_as_tail_is_the_packed_reply() {
        for len in [0usize, 1, 2, 3, 4, 5, 4095, 4096, 131_073] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let t = nfstime3 { seconds: 1_700_000_000, nseconds: 5 };
            let attr = fattr3 {
                type_: ftype3::NF3REG,
                mode: 0o644,
                nlink: 1,
                uid: 1000,
                gid: 100,
                size: len as u64 + 9,
                used: 4096,
                rdev: nfs3_types::nfs3::specdata3::default(),
                fsid: 77,
                fileid: 42,
                atime: t,
                mtime: t,
                ctime: t,
            };
            for eof in [false, true] {
                let mut packed = Nfs3Result::<READ3resok, READ3resfail>::Ok(READ3resok {
                    file_attributes: Nfs3Option::Some(attr.clone()),
                    count: len as u32,
                    eof,
                    data: Opaque::owned(data.clone()),
                });
                // The data as a block's middle (what a read of a cached block hands over).
                let mut block = vec![0xEE; 3];
                block.extend_from_slice(&data);
                block.push(0xEE);
                let segs = vec![Segment::Data { block: std::sync::Arc::new(block), start: 3, len }];
                let mut tail = ReadOk { file_attributes: Nfs3Option::Some(attr.clone()), eof, data: segs };
                let want = reply(7, Status::Success, Some(&mut packed)).to_bytes();
                let rec = reply(7, Status::Success, Some(&mut tail));
                assert_eq!(rec.tail_len(), len, "the data is handed over, not copied into the head");
                assert_eq!(rec.head.len() + len + rec.pad, want.len());
                assert_eq!(rec.to_bytes(), want, "len {len} eof {eof}");
            }
        }
    }
}
