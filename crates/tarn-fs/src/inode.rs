//! Inodes: reading and writing attributes, space checks, freeing,
//! the unlinked set, getattr/setattr/readlink.

use tarn_obj::zap::Zap;
use tarn_obj::{ObjError, ObjectId, Tx};

use crate::format::{InodePhys, FLAG_UNLINKED};
use crate::{
    is_dir, is_reg, kind_of, now_ns, Attr, Fs, FsError, Result, SetAttr, TimeSet, MASTER_OBJECT,
    MAX_FILE_SIZE,
};

/// Waits for unwritten changes before answering "over quota" or "no
/// space": their estimates are larger than what they take once written.
const SPACE_RETRIES: u32 = 2;

impl Fs {
    pub(crate) fn writable(&self) -> Result<()> {
        if self.opts.read().readonly {
            return Err(FsError::ReadOnly);
        }
        Ok(())
    }

    /// Before a change that adds `extra` bytes, outside any transaction:
    /// the quota must leave room for them (counting unwritten changes, so
    /// one write can overshoot by at most itself), then the pool must
    /// (`ObjectSet::reserve` syncs txgs while pending work may make room).
    pub(crate) fn make_room(&self, extra: u64) -> Result<()> {
        let limit = self.limit.read().clone();
        let mut held = 0;
        if let Some(limit) = limit {
            held = limit.held_elsewhere();
            let mut tries = 0;
            while let Some((remaining, pending)) = limit.remaining() {
                if extra <= remaining {
                    break;
                }
                if !pending || tries == SPACE_RETRIES {
                    return Err(FsError::Quota);
                }
                self.pool.sync()?;
                tries += 1;
            }
        }
        // Others' reservations stay free (ENOSPC, as the pool's own limit).
        self.os.reserve(extra.saturating_add(held))?;
        Ok(())
    }

    pub(crate) fn inode(&self, ino: u64) -> Result<InodePhys> {
        if ino == MASTER_OBJECT || ino == self.unlinked.0 {
            return Err(FsError::NotFound);
        }
        let b = match self.os.bonus(ObjectId(ino)) {
            Ok(b) => b,
            Err(ObjError::NotFound(_)) => return Err(FsError::NotFound),
            Err(e) => return Err(e.into()),
        };
        InodePhys::decode(ino, &b)
    }

    pub(crate) fn put_inode(&self, tx: &Tx, ino: u64, p: &InodePhys) -> Result<()> {
        self.os.set_bonus(tx, ObjectId(ino), &p.encode())?;
        Ok(())
    }

    pub(crate) fn dir(&self, ino: u64) -> Result<InodePhys> {
        let p = self.inode(ino)?;
        if !is_dir(&p) {
            return Err(FsError::NotDir);
        }
        Ok(p)
    }

    pub(crate) fn attr_of(&self, ino: u64, p: &InodePhys) -> Result<Attr> {
        let info = self.os.info(ObjectId(ino))?;
        Ok(self.attr_from(ino, p, &info))
    }

    /// `attr_of` when the object's info is at hand already.
    pub(crate) fn attr_from(&self, ino: u64, p: &InodePhys, info: &tarn_obj::ObjInfo) -> Attr {
        Attr {
            ino,
            kind: kind_of(p),
            perm: p.mode & 0o7777,
            nlink: p.nlink,
            uid: p.uid,
            gid: p.gid,
            size: p.size,
            blocks: info.used_bytes.div_ceil(512),
            atime_ns: p.atime_ns,
            mtime_ns: p.mtime_ns,
            ctime_ns: p.ctime_ns,
            crtime_ns: p.crtime_ns,
            rdev: p.rdev,
            blksize: if is_reg(p) {
                self.opts.read().recordsize.max(info.block_size)
            } else {
                4096
            },
            generation: p.generation,
        }
    }

    /// Drop one link of `ino` (already locked, `p` its current attrs).
    /// Frees it or parks it in the unlinked set when the count reaches 0.
    pub(crate) fn drop_link(&self, tx: &Tx, ino: u64, p: &mut InodePhys, now: i64) -> Result<()> {
        p.nlink = if is_dir(p) {
            0
        } else {
            p.nlink.saturating_sub(1)
        };
        p.ctime_ns = now;
        if p.nlink > 0 {
            return self.put_inode(tx, ino, p);
        }
        if self.refs_of(ino) > 0 {
            p.flags |= FLAG_UNLINKED;
            self.put_inode(tx, ino, p)?;
            Zap::update(&self.os, tx, self.unlinked, &ino.to_le_bytes(), b"")?;
            Ok(())
        } else {
            self.free_inode(tx, ino)
        }
    }

    /// Free an inode, its xattrs and its unlinked-set entry. Caller holds its lock.
    pub(crate) fn free_inode(&self, tx: &Tx, ino: u64) -> Result<()> {
        if let Ok(p) = self.inode(ino) {
            if p.xattr_obj != 0 {
                let xo = ObjectId(p.xattr_obj);
                let mut big = Vec::new();
                Zap::iterate(&self.os, xo, 0, &mut |_, _, v| {
                    if v.first() == Some(&1) && v.len() >= 9 {
                        big.push(u64::from_le_bytes(v[1..9].try_into().unwrap_or([0; 8])));
                    }
                    true
                })?;
                for b in big {
                    let _ = self.os.free(tx, ObjectId(b));
                }
                self.os.free(tx, xo)?;
            }
            self.os.free(tx, ObjectId(ino))?;
        }
        Zap::remove(&self.os, tx, self.unlinked, &ino.to_le_bytes())?;
        Ok(())
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        let _g = self.read_lock(ino);
        let p = self.inode(ino)?;
        self.attr_of(ino, &p)
    }

    pub fn setattr(&self, ino: u64, sa: &SetAttr) -> Result<Attr> {
        self.committed(self.setattr_uncommitted(ino, sa))
    }

    fn setattr_uncommitted(&self, ino: u64, sa: &SetAttr) -> Result<Attr> {
        self.writable()?;
        let tx = self.begin();
        let _g = self.lock_set(&tx, &[ino]);
        let mut p = self.inode(ino)?;
        let now = now_ns();
        if let Some(size) = sa.size {
            if is_dir(&p) {
                return Err(FsError::IsDir);
            }
            if !is_reg(&p) {
                return Err(FsError::Invalid("truncate of a non-regular file"));
            }
            if size > MAX_FILE_SIZE {
                return Err(FsError::FileTooBig);
            }
            if size < p.size {
                self.os.free_range(&tx, ObjectId(ino), size, None)?;
            }
            if size != p.size {
                p.size = size;
                p.mtime_ns = now;
            }
            // POSIX: truncate updates mtime/ctime even if the size is unchanged
            // when called through ftruncate/truncate; FUSE sends the times it wants.
            p.mtime_ns = now;
        }
        if let Some(mode) = sa.mode {
            p.mode = (p.mode & libc::S_IFMT) | (mode & 0o7777);
        }
        let chown = sa.uid.is_some_and(|u| u != p.uid) || sa.gid.is_some_and(|g| g != p.gid);
        if let Some(u) = sa.uid {
            p.uid = u;
        }
        if let Some(g) = sa.gid {
            p.gid = g;
        }
        if chown && !is_dir(&p) && sa.mode.is_none() {
            // Like Linux: a change of owner clears set-user-ID, and set-group-ID
            // when group execute is set.
            p.mode &= !libc::S_ISUID;
            if p.mode & libc::S_IXGRP != 0 {
                p.mode &= !libc::S_ISGID;
            }
        }
        match sa.atime {
            Some(TimeSet::Now) => p.atime_ns = now,
            Some(TimeSet::Ns(t)) => p.atime_ns = t,
            None => {}
        }
        match sa.mtime {
            Some(TimeSet::Now) => p.mtime_ns = now,
            Some(TimeSet::Ns(t)) => p.mtime_ns = t,
            None => {}
        }
        p.ctime_ns = now;
        self.put_inode(&tx, ino, &p)?;
        self.attr_of(ino, &p)
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        let _g = self.read_lock(ino);
        let p = self.inode(ino)?;
        if p.mode & libc::S_IFMT != libc::S_IFLNK {
            return Err(FsError::Invalid("not a symlink"));
        }
        let mut buf = vec![0u8; p.size.min(64 * 1024) as usize];
        self.os.read(ObjectId(ino), 0, &mut buf)?;
        Ok(buf)
    }
}
