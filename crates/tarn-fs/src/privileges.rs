//! Dropping privileges on change: what a write, a truncate or a change of
//! owner takes away from a file, as Linux's VFS does.
//!
//! - the set-user-ID bit;
//! - the set-group-ID bit when group execute is set, or when the caller is
//!   not root and not in the file's group (without group execute,
//!   set-group-ID marks mandatory locking: its owners' group keeps it);
//! - the `security.capability` xattr (file capabilities), always.
//!
//! The set-ID bits are dropped only when the caller says so (`kill` is
//! the caller's identity): on a write or truncate by a process without
//! CAP_FSETID, and on every change of owner of a non-directory. Through
//! FUSE only the caller's primary group is known, so a caller whose
//! supplementary groups include the file's loses set-group-ID where Linux
//! would keep it (the safe side: a privilege dropped, never one kept);
//! `Checked` (access.rs) knows all of them. The FUSE front end negotiates
//! `FUSE_HANDLE_KILLPRIV_V2`, which hands this job to the file system so
//! the kernel need not ask for `security.capability` before every write
//! (one GETXATTR round trip per write otherwise).

use crate::format::InodePhys;
use crate::{is_dir, now_ns, Cred, Fs, FsError, Result};

/// The xattr holding file capabilities.
pub const XATTR_SECURITY_CAPABILITY: &[u8] = b"security.capability";

impl Fs {
    /// Drop what a change to `ino` takes away (see the module comment);
    /// `kill` is the identity of a caller whose change drops set-ID bits,
    /// None for one that keeps them. Costs one attribute read when there is
    /// nothing to drop. Directories keep everything.
    pub fn drop_privileges(&self, ino: u64, kill: Option<Cred>) -> Result<()> {
        let groups = kill.map(|c| [c.gid]);
        self.drop_privileges_of(ino, kill.map(|c| c.uid).zip(groups.as_ref().map(|g| &g[..])))
    }

    /// `drop_privileges` for a caller known by its uid and all its groups
    /// (`Checked`, which knows the supplementary groups too).
    pub(crate) fn drop_privileges_of(&self, ino: u64, kill: Option<(u32, &[u32])>) -> Result<()> {
        let drops = |p: &InodePhys| -> u32 {
            let Some((uid, groups)) = kill else { return 0 };
            let mut bits = p.mode & libc::S_ISUID;
            let in_group = uid == 0 || groups.contains(&p.gid);
            if p.mode & libc::S_ISGID != 0 && (p.mode & libc::S_IXGRP != 0 || !in_group) {
                bits |= libc::S_ISGID;
            }
            bits
        };
        let (setid, maybe_cap) = {
            let _g = self.read_lock(ino);
            let p = self.inode(ino)?;
            if is_dir(&p) {
                return Ok(());
            }
            (drops(&p) != 0, p.xattr_obj != 0)
        };
        if maybe_cap {
            match self.removexattr(ino, XATTR_SECURITY_CAPABILITY) {
                Ok(()) | Err(FsError::NoData) => {}
                Err(e) => return Err(e),
            }
        }
        if setid {
            self.writable()?;
            let tx = self.begin();
            let _g = self.lock_set(&tx, &[ino]);
            let mut p = self.inode(ino)?;
            p.mode &= !drops(&p);
            p.ctime_ns = now_ns();
            self.put_inode(&tx, ino, &p)?;
            drop(_g);
            drop(tx);
            return self.committed(Ok(()));
        }
        Ok(())
    }
}
