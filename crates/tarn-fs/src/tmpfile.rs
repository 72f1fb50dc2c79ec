//! Unnamed files (`open(2)` with `O_TMPFILE`).
//!
//! A tmpfile is a regular file created with no name: nlink 0, in the
//! unlinked set from its first transaction, with one reference (the open
//! file's). Like any unlinked file it is freed by its last `forget`, or at
//! the next mount if the daemon stopped first. `link` may give it a name
//! (`linkat(fd, "", dir, name, AT_EMPTY_PATH)` or through
//! `/proc/self/fd`): it then leaves the unlinked set. Linux lets only a
//! tmpfile opened without `O_EXCL` be linked (`I_LINKABLE`, checked by the
//! VFS before the request reaches us); this layer relinks any unlinked
//! regular file it is asked to.

use tarn_obj::zap::Zap;

use crate::format::{InodePhys, FLAG_UNLINKED};
use crate::{now_ns, otype, Attr, Cred, Fs, FsError, Result, MIN_BLOCK};

impl Fs {
    /// Create an unnamed regular file for directory `dir`; adds one
    /// reference (see `forget`).
    pub fn create_tmpfile(&self, dir: u64, perm: u32, cred: Cred) -> Result<Attr> {
        self.committed(self.create_tmpfile_uncommitted(dir, perm, cred))
    }

    fn create_tmpfile_uncommitted(&self, dir: u64, perm: u32, cred: Cred) -> Result<Attr> {
        self.writable()?;
        self.make_room(4096)?;
        self.ensure_epoch()?;
        let tx = self.begin();
        let _g = self.lock_set(&tx, &[dir]);
        let dp = self.dir(dir)?;
        if dp.nlink == 0 {
            return Err(FsError::NotFound);
        }
        let now = now_ns();
        let gid = if dp.mode & libc::S_ISGID != 0 { dp.gid } else { cred.gid };
        let p = InodePhys {
            mode: libc::S_IFREG | (perm & 0o7777),
            nlink: 0,
            uid: cred.uid,
            gid,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            crtime_ns: now,
            parent: dir,
            generation: self.new_generation(&tx),
            flags: FLAG_UNLINKED,
            ..Default::default()
        };
        let o = self.os.create(&tx, otype::FILE, MIN_BLOCK, &p.encode())?;
        Zap::update(&self.os, &tx, self.unlinked, &o.0.to_le_bytes(), b"")?;
        let a = self.attr_of(o.0, &p)?;
        self.add_ref(o.0);
        Ok(a)
    }

    /// `link` of an inode with no name left: out of the unlinked set,
    /// nlink 0 → 1 (the caller adds the entry). Caller holds its lock.
    pub(crate) fn relink(&self, tx: &tarn_obj::Tx, ino: u64, p: &mut InodePhys) -> Result<()> {
        if p.flags & FLAG_UNLINKED == 0 || !crate::is_reg(p) {
            return Err(FsError::NotFound);
        }
        Zap::remove(&self.os, tx, self.unlinked, &ino.to_le_bytes())?;
        p.flags &= !FLAG_UNLINKED;
        Ok(())
    }
}
