//! The one place where tarn-nfs calls tarn-fs on behalf of a client:
//! every call goes through `Fs::checked` with the squashed credentials,
//! so tarn-fs checks the permissions exactly as it does for FUSE callers
//! (tarn-nfs checks none itself), and no call takes a FUSE reference
//! (handles outlive everything; there is no FORGET in NFS).

use nfs3_types::nfs3::{ACCESS3_DELETE, ACCESS3_EXECUTE, ACCESS3_EXTEND, ACCESS3_LOOKUP, ACCESS3_MODIFY, ACCESS3_READ};
use tarn_fs::{Attr, Caller, DirEntry, FileKind, Fs, Result, SetAttr, MAY_EXEC, MAY_READ, MAY_WRITE};

use crate::exports::Creds;

fn caller(c: &Creds) -> Caller {
    Caller { uid: c.uid, gid: c.gid, groups: c.groups.clone() }
}

/// The ACCESS3 bits of `mask` that tarn-fs's permission bits grant
/// (translated from its MAY_* answer, as knfsd does).
pub fn access_mask(fs: &Fs, attr: &Attr, c: &Creds, mask: u32) -> u32 {
    let may = fs.access_mask(attr, &caller(c));
    let dir = attr.kind == FileKind::Dir;
    let mut granted = 0;
    if may & MAY_READ != 0 {
        granted |= ACCESS3_READ;
    }
    if may & MAY_WRITE != 0 {
        granted |= ACCESS3_MODIFY | ACCESS3_EXTEND | if dir { ACCESS3_DELETE } else { 0 };
    }
    if may & MAY_EXEC != 0 {
        granted |= if dir { ACCESS3_LOOKUP } else { ACCESS3_EXECUTE };
    }
    granted & mask
}

/// Attributes of the inode a handle names (`Stale` if it is gone).
pub fn by_handle(fs: &Fs, ino: u64, generation: u64) -> Result<Attr> {
    fs.attr_by_handle(ino, generation)
}

pub fn lookup(fs: &Fs, dir: u64, name: &[u8], c: &Creds) -> Result<Attr> {
    fs.checked(&caller(c)).lookup(dir, name)
}

pub fn readlink(fs: &Fs, ino: u64, c: &Creds) -> Result<Vec<u8>> {
    fs.checked(&caller(c)).readlink(ino)
}

pub fn read_segments(fs: &Fs, ino: u64, c: &Creds, offset: u64, count: u32) -> Result<Vec<tarn_fs::Segment>> {
    fs.checked(&caller(c)).read_segments(ino, offset, count)
}

pub fn read_segments_cached(fs: &Fs, ino: u64, c: &Creds, offset: u64, count: u32) -> Option<(Vec<tarn_fs::Segment>, Attr)> {
    fs.checked(&caller(c)).read_segments_cached(ino, offset, count)
}

pub fn write(fs: &Fs, ino: u64, c: &Creds, offset: u64, data: &[u8]) -> Result<u32> {
    fs.checked(&caller(c)).write(ino, offset, data)
}

/// A change of the namespace or of attributes is answered only once it is
/// on stable storage (NFSv3, RFC 1813: only WRITE may be unstable; Linux's
/// knfsd commits such changes before it replies, which on ZFS is a ZIL
/// commit): here a commit of the dataset's intent log, shared with the
/// other calls in flight. A no-op under `sync=disabled`.
fn stable<T>(fs: &Fs, r: Result<T>) -> Result<T> {
    let v = r?;
    fs.fsync(fs.root_ino())?;
    Ok(v)
}

pub fn fsync(fs: &Fs, ino: u64, c: &Creds) -> Result<()> {
    fs.checked(&caller(c)).fsync(ino)
}

pub fn setattr(fs: &Fs, ino: u64, c: &Creds, sa: &SetAttr) -> Result<Attr> {
    stable(fs, fs.checked(&caller(c)).setattr(ino, sa))
}

pub fn create(fs: &Fs, dir: u64, name: &[u8], perm: u32, c: &Creds, exclusive: bool) -> Result<(Attr, bool)> {
    stable(fs, fs.checked(&caller(c)).create(dir, name, perm, exclusive))
}

pub fn mkdir(fs: &Fs, dir: u64, name: &[u8], perm: u32, c: &Creds) -> Result<Attr> {
    stable(fs, fs.checked(&caller(c)).mkdir(dir, name, perm))
}

pub fn symlink(fs: &Fs, dir: u64, name: &[u8], target: &[u8], c: &Creds) -> Result<Attr> {
    stable(fs, fs.checked(&caller(c)).symlink(dir, name, target))
}

pub fn mknod(fs: &Fs, dir: u64, name: &[u8], mode: u32, rdev: u64, c: &Creds) -> Result<Attr> {
    stable(fs, fs.checked(&caller(c)).mknod(dir, name, mode, rdev))
}

pub fn link(fs: &Fs, ino: u64, dir: u64, name: &[u8], c: &Creds) -> Result<Attr> {
    stable(fs, fs.checked(&caller(c)).link(ino, dir, name))
}

pub fn unlink(fs: &Fs, dir: u64, name: &[u8], c: &Creds) -> Result<()> {
    stable(fs, fs.checked(&caller(c)).unlink(dir, name))
}

pub fn rmdir(fs: &Fs, dir: u64, name: &[u8], c: &Creds) -> Result<()> {
    stable(fs, fs.checked(&caller(c)).rmdir(dir, name))
}

pub fn rename(fs: &Fs, from: u64, from_name: &[u8], to: u64, to_name: &[u8], c: &Creds) -> Result<()> {
    stable(fs, fs.checked(&caller(c)).rename(from, from_name, to, to_name, 0))
}

pub fn readdir(fs: &Fs, dir: u64, offset: u64, c: &Creds, f: &mut dyn FnMut(&DirEntry) -> bool) -> Result<()> {
    fs.checked(&caller(c)).readdir(dir, offset, f)
}

pub fn readdir_plus(fs: &Fs, dir: u64, offset: u64, c: &Creds, f: &mut dyn FnMut(&DirEntry, Option<&Attr>) -> bool) -> Result<()> {
    fs.checked(&caller(c)).readdir_plus(dir, offset, f)
}
