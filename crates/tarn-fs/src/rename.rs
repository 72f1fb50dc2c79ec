//! rename(2), with RENAME_NOREPLACE and RENAME_EXCHANGE.

use tarn_obj::zap::Zap;
use tarn_obj::ObjectId;

use crate::format::{encode_dirent, InodePhys};
use crate::{
    dir::check_name, now_ns, FileKind, Fs, FsError, Result, RENAME_EXCHANGE, RENAME_NOREPLACE,
};

/// A permission check of a rename: given the source directory, the
/// source, the target directory and the inode the target name holds.
pub(crate) type RenameCheck<'a> =
    dyn Fn(&InodePhys, &InodePhys, &InodePhys, Option<&InodePhys>) -> Result<()> + 'a;

impl Fs {
    /// Is `anc` an ancestor of (or equal to) `ino`? Walks parent pointers;
    /// stable because renames are serialised by `rename_lock`.
    pub(crate) fn is_ancestor(&self, anc: u64, mut ino: u64) -> Result<bool> {
        for _ in 0..100_000 {
            if ino == anc {
                return Ok(true);
            }
            if ino == self.root {
                return Ok(false);
            }
            let p = self.inode(ino)?;
            if p.parent == ino {
                return Ok(false);
            }
            ino = p.parent;
        }
        Err(FsError::Corrupt("directory parent chain loops".into()))
    }

    pub fn rename(
        &self,
        src_dir: u64,
        src_name: &[u8],
        dst_dir: u64,
        dst_name: &[u8],
        flags: u32,
    ) -> Result<()> {
        self.rename_checked(src_dir, src_name, dst_dir, dst_name, flags, None)
    }

    /// `rename`, with `check` (permissions) run under the locks of both
    /// directories and both inodes, after the checks Linux makes before
    /// asking for permission (missing source, `RENAME_NOREPLACE` target,
    /// same inode, a directory into its own subtree) and before the rest.
    pub(crate) fn rename_checked(
        &self,
        src_dir: u64,
        src_name: &[u8],
        dst_dir: u64,
        dst_name: &[u8],
        flags: u32,
        check: Option<&RenameCheck<'_>>,
    ) -> Result<()> {
        self.committed(self.rename_uncommitted(src_dir, src_name, dst_dir, dst_name, flags, check))
    }

    #[allow(clippy::too_many_arguments)]
    fn rename_uncommitted(
        &self,
        src_dir: u64,
        src_name: &[u8],
        dst_dir: u64,
        dst_name: &[u8],
        flags: u32,
        check: Option<&RenameCheck<'_>>,
    ) -> Result<()> {
        self.writable()?;
        check_name(src_name)?;
        check_name(dst_name)?;
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags & (RENAME_NOREPLACE | RENAME_EXCHANGE) == (RENAME_NOREPLACE | RENAME_EXCHANGE)
        {
            return Err(FsError::Invalid("rename flags"));
        }
        let tx = self.begin();
        let _rl = self.rename_lock.lock();
        // Names cannot change under us except through unlink/create, which
        // take the directory locks: look up, lock all, verify, else retry.
        let (_g, src, dst) = loop {
            let src = self
                .dir_lookup_checked(src_dir, src_name)?
                .ok_or(FsError::NotFound)?;
            self.dir(dst_dir)?;
            let dst = self.dir_lookup(dst_dir, dst_name)?;
            let mut set = vec![src_dir, dst_dir, src.0];
            if let Some(d) = dst {
                set.push(d.0);
            }
            let g = self.lock_set(&tx, &set);
            if self.dir_lookup(src_dir, src_name)? == Some(src)
                && self.dir_lookup(dst_dir, dst_name)? == dst
            {
                break (g, src, dst);
            }
        };
        let exchange = flags & RENAME_EXCHANGE != 0;
        if exchange && dst.is_none() {
            return Err(FsError::NotFound);
        }
        if flags & RENAME_NOREPLACE != 0 && dst.is_some() {
            return Err(FsError::Exists);
        }
        if dst.is_some_and(|d| d.0 == src.0) {
            return Ok(()); // same inode: POSIX says do nothing
        }
        let mut sdp = self.dir(src_dir)?;
        if self.dir(dst_dir)?.nlink == 0 {
            return Err(FsError::NotFound);
        }
        let src_is_dir = src.1 == FileKind::Dir;
        let dst_is_dir = dst.is_some_and(|d| d.1 == FileKind::Dir);
        if src.0 == self.root || dst.is_some_and(|d| d.0 == self.root) {
            return Err(FsError::Invalid("rename of the root"));
        }
        if src_dir != dst_dir {
            if src_is_dir && self.is_ancestor(src.0, dst_dir)? {
                return Err(FsError::Invalid("directory into its own subtree"));
            }
            if let Some(d) = dst.filter(|_| dst_is_dir) {
                if self.is_ancestor(d.0, src_dir)? {
                    // The target holds the source: Linux's answer.
                    return Err(if exchange {
                        FsError::Invalid("directory into its own subtree")
                    } else {
                        FsError::NotEmpty
                    });
                }
            }
        }
        if let Some(check) = check {
            let victim = match dst {
                Some(d) => Some(self.inode(d.0)?),
                None => None,
            };
            check(&sdp, &self.inode(src.0)?, &self.dir(dst_dir)?, victim.as_ref())?;
        }
        let now = now_ns();
        let mut sp = self.inode(src.0)?;
        if exchange {
            let d = dst.ok_or(FsError::NotFound)?;
            let mut dp_ino = self.inode(d.0)?;
            Zap::update(
                &self.os,
                &tx,
                ObjectId(src_dir),
                src_name,
                &encode_dirent(d.0, d.1.dtype()),
            )?;
            Zap::update(
                &self.os,
                &tx,
                ObjectId(dst_dir),
                dst_name,
                &encode_dirent(src.0, src.1.dtype()),
            )?;
            if src_dir != dst_dir {
                let mut ddp = self.dir(dst_dir)?;
                if src_is_dir && !dst_is_dir {
                    sdp.nlink = sdp.nlink.saturating_sub(1);
                    ddp.nlink += 1;
                } else if dst_is_dir && !src_is_dir {
                    sdp.nlink += 1;
                    ddp.nlink = ddp.nlink.saturating_sub(1);
                }
                sp.parent = dst_dir;
                dp_ino.parent = src_dir;
                ddp.mtime_ns = now;
                ddp.ctime_ns = now;
                self.put_inode(&tx, dst_dir, &ddp)?;
            }
            sp.ctime_ns = now;
            dp_ino.ctime_ns = now;
            self.put_inode(&tx, src.0, &sp)?;
            self.put_inode(&tx, d.0, &dp_ino)?;
            sdp.mtime_ns = now;
            sdp.ctime_ns = now;
            self.put_inode(&tx, src_dir, &sdp)?;
            return Ok(());
        }
        // Replace an existing target per POSIX rules.
        if let Some(d) = dst {
            if src_is_dir && !dst_is_dir {
                return Err(FsError::NotDir);
            }
            if !src_is_dir && dst_is_dir {
                return Err(FsError::IsDir);
            }
            if dst_is_dir && Zap::count(&self.os, ObjectId(d.0))? != 0 {
                return Err(FsError::NotEmpty);
            }
        }
        // Remove the source entry, then write the target entry.
        Zap::remove(&self.os, &tx, ObjectId(src_dir), src_name)?;
        Zap::update(
            &self.os,
            &tx,
            ObjectId(dst_dir),
            dst_name,
            &encode_dirent(src.0, src.1.dtype()),
        )?;
        sdp.size = sdp.size.saturating_sub(1);
        sdp.mtime_ns = now;
        sdp.ctime_ns = now;
        if src_is_dir && src_dir != dst_dir {
            sdp.nlink = sdp.nlink.saturating_sub(1);
        }
        // Same dir: sdp is the destination too.
        let mut ddp = if src_dir == dst_dir {
            sdp
        } else {
            self.dir(dst_dir)?
        };
        if dst.is_none() {
            ddp.size += 1;
        }
        if src_is_dir && src_dir != dst_dir {
            ddp.nlink += 1;
        }
        if let Some(d) = dst {
            let mut victim = self.inode(d.0)?;
            if dst_is_dir {
                ddp.nlink = ddp.nlink.saturating_sub(1);
            }
            self.drop_link(&tx, d.0, &mut victim, now)?;
        }
        ddp.mtime_ns = now;
        ddp.ctime_ns = now;
        if src_dir != dst_dir {
            self.put_inode(&tx, src_dir, &sdp)?;
        }
        self.put_inode(&tx, dst_dir, &ddp)?;
        sp.parent = dst_dir;
        sp.ctime_ns = now;
        self.put_inode(&tx, src.0, &sp)?;
        Ok(())
    }

    pub(crate) fn dir_lookup_checked(
        &self,
        dir: u64,
        name: &[u8],
    ) -> Result<Option<(u64, FileKind)>> {
        self.dir(dir)?;
        self.dir_lookup(dir, name)
    }
}
