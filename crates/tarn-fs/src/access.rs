//! Caller credentials and the permission checks a kernel would make.
//!
//! Through FUSE the kernel checks permissions itself (`default_permissions`)
//! and tarn-fs trusts every request. A front end with no kernel in front of
//! it (NFS: the caller is an AUTH_SYS uid, gid and groups from the wire)
//! goes through `Fs::checked(&caller)`, a view whose operations first make
//! the checks Linux's VFS makes for the matching system call, with the same
//! errors: `Access` (EACCES) when the permission bits refuse, `Perm`
//! (EPERM) for what only the owner or root may do, and in the same order
//! as Linux where one request could fail in several ways. None of them
//! takes a FUSE reference (NFS has no `forget`), and an inode named by
//! number that is gone or has no link left answers `Stale`.
//!
//! The rules (no ACLs: tarn is `acltype=off`):
//! - Permission bits: the owner's class if the caller owns the inode, else
//!   the group's if the inode's group is the caller's gid or one of its
//!   supplementary groups, else the others'. Root (uid 0) passes every
//!   check except execute of a non-directory with no execute bit at all.
//! - Looking a name up needs execute on the directory; creating or
//!   removing one needs write and execute; listing needs read.
//! - Sticky directories: an entry may be removed or replaced only by the
//!   owner of the entry, the owner of the directory, or root (EPERM).
//! - Renaming a directory to another parent needs write on the directory
//!   itself (its `..` changes).
//! - New inodes belong to the caller's uid and gid, or to the directory's
//!   group when the directory is set-group-ID (new directories inherit the
//!   bit); set-group-ID is dropped from a new group-executable file whose
//!   group the caller is not in.
//! - chmod: owner or root; set-group-ID is cleared when the caller is not
//!   root and not in the file's group. chown to another uid: root only;
//!   chgrp: root, or the owner to one of his groups. Every chown of a
//!   non-directory clears set-user-ID, and set-group-ID when group execute
//!   is set or the caller is not in the group, and removes file
//!   capabilities. Times: both "now" by the owner or a writer; anything else
//!   by the owner. Truncate needs write.
//! - Writes and truncates by anyone but root clear set-user-ID and
//!   set-group-ID as `privileges.rs` describes (counting all the caller's
//!   groups); every write removes file capabilities.
//! - Hard links to another user's file follow Linux's
//!   `fs.protected_hardlinks = 1`: the file must be regular, not set-ID,
//!   and readable and writable by the caller.
//! - Extended attributes: `user.*` on files and directories by the
//!   permission bits (writes on a sticky directory by its owner); `trusted.*`
//!   by root only, and hidden from others' listings; `security.*` readable
//!   by anyone, written by root; other namespaces are not supported.

use crate::dir::{check_rmdir_name, How};
use crate::format::InodePhys;
use crate::{
    is_dir, is_reg, Attr, Cred, DirEntry, FileKind, Fs, FsError, Result, SetAttr, StatFs, TimeSet,
    RENAME_EXCHANGE,
};

pub const MAY_READ: u32 = 4;
pub const MAY_WRITE: u32 = 2;
pub const MAY_EXEC: u32 = 1;

/// Who asks: the AUTH_SYS credentials of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the primary gid need not be repeated).
    pub groups: Vec<u32>,
}

impl Caller {
    pub fn root() -> Caller {
        Caller {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        }
    }
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
    /// Is `gid` the caller's primary or one of its supplementary groups?
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
    /// The identity new inodes get.
    pub fn cred(&self) -> Cred {
        Cred {
            uid: self.uid,
            gid: self.gid,
        }
    }
    fn all_groups(&self) -> Vec<u32> {
        let mut g = self.groups.clone();
        g.push(self.gid);
        g
    }
}

/// Does the caller get `mask` (MAY_* bits) on an inode with these
/// permission bits, owner and group?
fn permits(perm: u32, uid: u32, gid: u32, dir: bool, caller: &Caller, mask: u32) -> bool {
    let mask = mask & 7;
    if caller.is_root() {
        return mask & MAY_EXEC == 0 || dir || perm & 0o111 != 0;
    }
    let bits = if caller.uid == uid {
        perm >> 6
    } else if caller.in_group(gid) {
        perm >> 3
    } else {
        perm
    } & 7;
    bits & mask == mask
}

fn may(p: &InodePhys, caller: &Caller, mask: u32) -> bool {
    permits(p.mode & 0o7777, p.uid, p.gid, is_dir(p), caller, mask)
}

fn need(p: &InodePhys, caller: &Caller, mask: u32) -> Result<()> {
    if may(p, caller, mask) {
        Ok(())
    } else {
        Err(FsError::Access)
    }
}

fn owns(p: &InodePhys, caller: &Caller) -> bool {
    caller.is_root() || caller.uid == p.uid
}

/// The sticky-bit rule for removing or replacing `victim` in `dir`.
fn sticky_ok(dir: &InodePhys, victim: &InodePhys, caller: &Caller) -> Result<()> {
    if dir.mode & libc::S_ISVTX == 0 || owns(victim, caller) || owns(dir, caller) {
        Ok(())
    } else {
        Err(FsError::Perm)
    }
}

/// Linux's `may_delete` without the type checks (the operation makes them).
fn may_delete(dir: &InodePhys, victim: &InodePhys, caller: &Caller) -> Result<()> {
    need(dir, caller, MAY_WRITE | MAY_EXEC)?;
    sticky_ok(dir, victim, caller)
}

/// The namespace of an xattr name, as the checks know them.
enum XattrNs {
    User,
    Trusted,
    Security,
    Other,
}

fn xattr_ns(name: &[u8]) -> XattrNs {
    if name.starts_with(b"user.") {
        XattrNs::User
    } else if name.starts_with(b"trusted.") {
        XattrNs::Trusted
    } else if name.starts_with(b"security.") {
        XattrNs::Security
    } else {
        XattrNs::Other
    }
}

impl Fs {
    /// EACCES unless `caller` gets `mask` (MAY_* bits) on `ino`.
    pub fn access(&self, ino: u64, caller: &Caller, mask: u32) -> Result<()> {
        let p = self.live(ino)?;
        need(&p, caller, mask)
    }

    /// The MAY_* bits `caller` gets on an inode with attributes `attr`
    /// (what NFS's ACCESS reports).
    pub fn access_mask(&self, attr: &Attr, caller: &Caller) -> u32 {
        [MAY_READ, MAY_WRITE, MAY_EXEC]
            .into_iter()
            .filter(|&m| {
                permits(
                    attr.perm,
                    attr.uid,
                    attr.gid,
                    attr.kind == FileKind::Dir,
                    caller,
                    m,
                )
            })
            .fold(0, |a, m| a | m)
    }

    /// A view of this file system whose operations check `caller`'s
    /// permissions first and take no references (see the module comment).
    pub fn checked(&self, caller: &Caller) -> Checked<'_> {
        Checked {
            fs: self,
            caller: caller.clone(),
        }
    }

    /// A live inode (`Stale` otherwise), read under its lock.
    fn live(&self, ino: u64) -> Result<InodePhys> {
        let _g = self.read_lock(ino);
        Ok(self.live_inode(ino)?.0)
    }
}

/// `Fs` operations on behalf of one caller, checked as Linux would check
/// them (module comment). Inodes are named by number; the front end checks
/// the generation of a handle with `Fs::attr_by_handle` first.
pub struct Checked<'a> {
    fs: &'a Fs,
    caller: Caller,
}

impl Checked<'_> {
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// A live directory the caller may search.
    fn search(&self, dir: u64) -> Result<InodePhys> {
        let p = self.fs.live(dir)?;
        if !is_dir(&p) {
            return Err(FsError::NotDir);
        }
        need(&p, &self.caller, MAY_EXEC)?;
        Ok(p)
    }

    /// Set-ID bits a change by the caller drops: None for root.
    fn kill(&self) -> Option<(u32, Vec<u32>)> {
        (!self.caller.is_root()).then(|| (self.caller.uid, self.caller.all_groups()))
    }

    pub fn access(&self, ino: u64, mask: u32) -> Result<()> {
        self.fs.access(ino, &self.caller, mask)
    }

    pub fn lookup(&self, dir: u64, name: &[u8]) -> Result<Attr> {
        self.search(dir)?;
        self.fs.lookup_noref(dir, name)
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        let _g = self.fs.read_lock(ino);
        let (p, info) = self.fs.live_inode(ino)?;
        Ok(self.fs.attr_from(ino, &p, &info))
    }

    pub fn setattr(&self, ino: u64, sa: &SetAttr) -> Result<Attr> {
        self.fs.writable()?;
        let c = &self.caller;
        let p = self.fs.live(ino)?;
        if sa.size.is_some() {
            if is_dir(&p) {
                return Err(FsError::IsDir);
            }
            if !is_reg(&p) {
                return Err(FsError::Invalid("truncate of a non-regular file"));
            }
            need(&p, c, MAY_WRITE)?;
        }
        if let Some(uid) = sa.uid {
            if !(c.is_root() || (c.uid == p.uid && uid == p.uid)) {
                return Err(FsError::Perm);
            }
        }
        if let Some(gid) = sa.gid {
            if !(c.is_root() || (c.uid == p.uid && (gid == p.gid || c.in_group(gid)))) {
                return Err(FsError::Perm);
            }
        }
        let new_gid = sa.gid.unwrap_or(p.gid);
        let mut mode = sa.mode.map(|m| m & 0o7777);
        if let Some(m) = mode.as_mut() {
            if !owns(&p, c) {
                return Err(FsError::Perm);
            }
            if !c.is_root() && !c.in_group(new_gid) {
                *m &= !libc::S_ISGID;
            }
        }
        match (sa.atime, sa.mtime) {
            (None, None) => {}
            (Some(TimeSet::Now), Some(TimeSet::Now)) => {
                if !owns(&p, c) {
                    need(&p, c, MAY_WRITE)?;
                }
            }
            _ => {
                if !owns(&p, c) {
                    return Err(FsError::Perm);
                }
            }
        }
        let chown = sa.uid.is_some() || sa.gid.is_some();
        let mut sa = *sa;
        if chown {
            // Linux's chown_common: every chown of a non-directory kills
            // set-user-ID, and set-group-ID when group-executable or the
            // caller is not in the file's (current) group.
            let mut m = mode.unwrap_or(p.mode & 0o7777);
            if !is_dir(&p) {
                m &= !libc::S_ISUID;
                if p.mode & libc::S_ISGID != 0
                    && (p.mode & libc::S_IXGRP != 0 || !(c.is_root() || c.in_group(p.gid)))
                {
                    m &= !libc::S_ISGID;
                }
            }
            mode = Some(m);
        }
        sa.mode = mode;
        if chown {
            self.fs.drop_privileges_of(ino, None)?;
        }
        if sa.size.is_some() {
            let kill = self.kill();
            self.fs
                .drop_privileges_of(ino, kill.as_ref().map(|(u, g)| (*u, &g[..])))?;
        }
        self.fs.setattr(ino, &sa)
    }

    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let p = self.fs.live(ino)?;
        need(&p, &self.caller, MAY_READ)?;
        self.fs.read(ino, offset, size)
    }

    pub fn read_segments(&self, ino: u64, offset: u64, size: u32) -> Result<Vec<crate::Segment>> {
        let p = self.fs.live(ino)?;
        need(&p, &self.caller, MAY_READ)?;
        self.fs.read_segments(ino, offset, size)
    }

    /// `read_segments` and the file's attributes from memory alone, for a
    /// server's connection thread (`Fs::read_segments_cached_as`): None
    /// when the full path must answer.
    pub fn read_segments_cached(&self, ino: u64, offset: u64, size: u32) -> Option<(Vec<crate::Segment>, Attr)> {
        self.fs.read_segments_cached_as(ino, offset, size, &|p| need(p, &self.caller, MAY_READ).is_ok())
    }

    /// Write `data` at `offset`, then drop what a write drops.
    pub fn write(&self, ino: u64, offset: u64, data: &[u8]) -> Result<u32> {
        self.fs.writable()?;
        let p = self.fs.live(ino)?;
        if is_dir(&p) {
            return Err(FsError::IsDir); // as open(2) for writing answers, before permissions
        }
        need(&p, &self.caller, MAY_WRITE)?;
        let n = self.fs.write(ino, offset, data)?;
        let kill = self.kill();
        self.fs
            .drop_privileges_of(ino, kill.as_ref().map(|(u, g)| (*u, &g[..])))?;
        Ok(n)
    }

    /// The check of a new entry in a directory, under its lock: write on
    /// the directory, then the set-group-ID rule for the new inode.
    fn new_entry_check(
        &self,
        kind: FileKind,
    ) -> impl Fn(&InodePhys, &InodePhys, u32) -> Result<u32> + '_ {
        move |dir: &InodePhys, _: &InodePhys, perm: u32| {
            let c = &self.caller;
            need(dir, c, MAY_WRITE | MAY_EXEC)?;
            if matches!(kind, FileKind::CharDev | FileKind::BlockDev) && !c.is_root() {
                return Err(FsError::Perm);
            }
            let mut perm = perm & 0o7777;
            let sgid_x = libc::S_ISGID | libc::S_IXGRP;
            if kind != FileKind::Dir
                && perm & sgid_x == sgid_x
                && dir.mode & libc::S_ISGID != 0
                && !(c.is_root() || c.in_group(dir.gid))
            {
                perm &= !libc::S_ISGID;
            }
            Ok(perm)
        }
    }

    /// Create a regular file (see `Fs::create`). An existing file given
    /// back by a non-exclusive create is not checked further: the front
    /// end checks what it then does with it.
    pub fn create(
        &self,
        dir: u64,
        name: &[u8],
        perm: u32,
        exclusive: bool,
    ) -> Result<(Attr, bool)> {
        self.fs.writable()?;
        self.search(dir)?;
        let check = self.new_entry_check(FileKind::File);
        let how = How {
            take_ref: false,
            check: Some(&check),
        };
        self.fs
            .create_how(dir, name, perm, self.caller.cred(), exclusive, how)
    }

    pub fn mkdir(&self, dir: u64, name: &[u8], perm: u32) -> Result<Attr> {
        self.fs.writable()?;
        self.search(dir)?;
        let check = self.new_entry_check(FileKind::Dir);
        let how = How {
            take_ref: false,
            check: Some(&check),
        };
        // mkdir(2) keeps only the permission and sticky bits asked for;
        // set-group-ID comes from a set-group-ID parent.
        self.fs
            .mkdir_how(dir, name, perm & 0o1777, self.caller.cred(), how)
    }

    /// `mode` carries the file type; devices need root (EPERM).
    pub fn mknod(&self, dir: u64, name: &[u8], mode: u32, rdev: u64) -> Result<Attr> {
        self.fs.writable()?;
        self.search(dir)?;
        let kind = FileKind::from_mode(mode).unwrap_or(FileKind::File);
        let check = self.new_entry_check(kind);
        let how = How {
            take_ref: false,
            check: Some(&check),
        };
        self.fs
            .mknod_how(dir, name, mode, rdev, self.caller.cred(), how)
    }

    pub fn symlink(&self, dir: u64, name: &[u8], target: &[u8]) -> Result<Attr> {
        self.fs.writable()?;
        self.search(dir)?;
        let check = self.new_entry_check(FileKind::Symlink);
        let how = How {
            take_ref: false,
            check: Some(&check),
        };
        self.fs
            .symlink_how(dir, name, target, self.caller.cred(), how)
    }

    /// New hard link `dir/name` to `ino`.
    pub fn link(&self, ino: u64, dir: u64, name: &[u8]) -> Result<Attr> {
        self.fs.writable()?;
        self.fs.live(ino)?;
        self.search(dir)?;
        let c = &self.caller;
        let check = |dir: &InodePhys, p: &InodePhys, _: u32| -> Result<u32> {
            // fs.protected_hardlinks = 1
            if !owns(p, c) {
                let setid = p.mode & libc::S_ISUID != 0
                    || p.mode & (libc::S_ISGID | libc::S_IXGRP) == (libc::S_ISGID | libc::S_IXGRP);
                if !is_reg(p) || setid || !may(p, c, MAY_READ | MAY_WRITE) {
                    return Err(FsError::Perm);
                }
            }
            need(dir, c, MAY_WRITE | MAY_EXEC)?;
            Ok(0)
        };
        let how = How {
            take_ref: false,
            check: Some(&check),
        };
        self.fs.link_how(ino, dir, name, how)
    }

    pub fn unlink(&self, dir: u64, name: &[u8]) -> Result<()> {
        self.remove(dir, name, false)
    }

    pub fn rmdir(&self, dir: u64, name: &[u8]) -> Result<()> {
        check_rmdir_name(name)?;
        self.remove(dir, name, true)
    }

    fn remove(&self, dir: u64, name: &[u8], want_dir: bool) -> Result<()> {
        self.fs.writable()?;
        self.search(dir)?;
        let c = &self.caller;
        let check = |dp: &InodePhys, p: &InodePhys| may_delete(dp, p, c);
        self.fs.remove_entry(dir, name, want_dir, Some(&check))
    }

    pub fn rename(
        &self,
        src_dir: u64,
        src_name: &[u8],
        dst_dir: u64,
        dst_name: &[u8],
        flags: u32,
    ) -> Result<()> {
        self.fs.writable()?;
        self.search(src_dir)?;
        self.search(dst_dir)?;
        let c = &self.caller;
        let moved = src_dir != dst_dir;
        let exchange = flags & RENAME_EXCHANGE != 0;
        let check =
            |sdp: &InodePhys, sp: &InodePhys, ddp: &InodePhys, victim: Option<&InodePhys>| {
                may_delete(sdp, sp, c)?;
                match victim {
                    None => need(ddp, c, MAY_WRITE | MAY_EXEC)?,
                    Some(v) => {
                    may_delete(ddp, v, c)?;
                    // may_delete's type checks come before the check of a
                    // moved directory's own write permission.
                    if !exchange && is_dir(sp) && !is_dir(v) {
                        return Err(FsError::NotDir);
                    }
                    if !exchange && !is_dir(sp) && is_dir(v) {
                        return Err(FsError::IsDir);
                    }
                }
                }
                if moved {
                    if is_dir(sp) {
                        need(sp, c, MAY_WRITE)?;
                    }
                    if let Some(v) = victim.filter(|v| exchange && is_dir(v)) {
                        need(v, c, MAY_WRITE)?;
                    }
                }
                Ok(())
            };
        self.fs
            .rename_checked(src_dir, src_name, dst_dir, dst_name, flags, Some(&check))
    }

    pub fn readdir(
        &self,
        dir: u64,
        offset: u64,
        f: &mut dyn FnMut(&DirEntry) -> bool,
    ) -> Result<()> {
        self.list_check(dir)?;
        self.fs.readdir(dir, offset, f)
    }

    pub fn readdir_plus(
        &self,
        dir: u64,
        offset: u64,
        f: &mut dyn FnMut(&DirEntry, Option<&Attr>) -> bool,
    ) -> Result<()> {
        self.list_check(dir)?;
        self.fs.readdir_plus_noref(dir, offset, f)
    }

    fn list_check(&self, dir: u64) -> Result<()> {
        let p = self.fs.live(dir)?;
        if !is_dir(&p) {
            return Err(FsError::NotDir);
        }
        need(&p, &self.caller, MAY_READ)
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        self.fs.live(ino)?;
        self.fs.readlink(ino)
    }

    /// Linux's `xattr_permission` and the capability module's rule for
    /// `security.*` (module comment).
    fn xattr_check(&self, p: &InodePhys, name: &[u8], write: bool) -> Result<()> {
        let c = &self.caller;
        match xattr_ns(name) {
            XattrNs::Security if write && !c.is_root() => Err(FsError::Perm),
            XattrNs::Security => Ok(()),
            XattrNs::Trusted if c.is_root() => Ok(()),
            XattrNs::Trusted if write => Err(FsError::Perm),
            XattrNs::Trusted => Err(FsError::NoData),
            XattrNs::Other => Err(FsError::NotSupported("xattr namespace")),
            XattrNs::User => {
                if !is_reg(p) && !is_dir(p) {
                    return Err(if write {
                        FsError::Perm
                    } else {
                        FsError::NoData
                    });
                }
                if write && is_dir(p) && p.mode & libc::S_ISVTX != 0 && !owns(p, c) {
                    return Err(FsError::Perm);
                }
                need(p, c, if write { MAY_WRITE } else { MAY_READ })
            }
        }
    }

    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        let p = self.fs.live(ino)?;
        self.xattr_check(&p, name, false)?;
        self.fs.getxattr(ino, name)
    }

    /// Names the caller may see (`trusted.*` only for root).
    pub fn listxattr(&self, ino: u64) -> Result<Vec<Vec<u8>>> {
        self.fs.live(ino)?;
        let mut names = self.fs.listxattr(ino)?;
        if !self.caller.is_root() {
            names.retain(|n| !n.starts_with(b"trusted."));
        }
        Ok(names)
    }

    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: u32) -> Result<()> {
        self.fs.writable()?;
        let p = self.fs.live(ino)?;
        self.xattr_check(&p, name, true)?;
        self.fs.setxattr(ino, name, value, flags)
    }

    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        self.fs.writable()?;
        let p = self.fs.live(ino)?;
        self.xattr_check(&p, name, true)?;
        self.fs.removexattr(ino, name)
    }

    pub fn fsync(&self, ino: u64) -> Result<()> {
        self.fs.live(ino)?;
        self.fs.fsync(ino)
    }

    pub fn statfs(&self) -> Result<StatFs> {
        self.fs.statfs()
    }
}
