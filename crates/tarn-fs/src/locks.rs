//! Inode shard locks (lock order: see the crate comment) and the FUSE
//! reference counts that keep unlinked inodes alive.

use parking_lot::{RwLockReadGuard, RwLockWriteGuard};

use tarn_obj::Tx;

use crate::{FileKind, Fs, FsError, Result, REF_SHARDS, SHARDS};

/// Guard over a set of inode shard locks (taken in ascending order) for
/// the changes of one transaction: dropping it appends what the
/// transaction changed to the dataset's intent log *before* the locks go,
/// so two changes to one inode get log sequence numbers in the order they
/// were made (tarn_obj::redo).
pub(crate) struct LockSet<'a> {
    tx: &'a Tx,
    _guards: Vec<RwLockWriteGuard<'a, ()>>,
}

impl Drop for LockSet<'_> {
    fn drop(&mut self) {
        tarn_obj::redo::flush(self.tx);
    }
}

impl Fs {
    pub(crate) fn shard_of(ino: u64) -> usize {
        (ino.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as usize % SHARDS
    }
    pub(crate) fn read_lock(&self, ino: u64) -> RwLockReadGuard<'_, ()> {
        self.shards[Self::shard_of(ino)].read()
    }
    /// `read_lock` if no change holds (or waits for) the shard now.
    pub(crate) fn try_read_lock(&self, ino: u64) -> Option<RwLockReadGuard<'_, ()>> {
        self.shards[Self::shard_of(ino)].try_read()
    }
    pub(crate) fn lock_set<'a>(&'a self, tx: &'a Tx, inos: &[u64]) -> LockSet<'a> {
        let mut idx: Vec<usize> = inos.iter().map(|&i| Self::shard_of(i)).collect();
        idx.sort_unstable();
        idx.dedup();
        LockSet {
            tx,
            _guards: idx.into_iter().map(|i| self.shards[i].write()).collect(),
        }
    }

    /// Lock `dir` and the inode currently named `name` in it (retrying if
    /// the name moves between the unlocked look-up and the lock).
    pub(crate) fn lock_child<'a>(&'a self, tx: &'a Tx, dir: u64, name: &[u8]) -> Result<(LockSet<'a>, u64, FileKind)> {
        loop {
            let found = {
                let _r = self.read_lock(dir);
                self.dir(dir)?;
                self.dir_lookup(dir, name)?
            };
            let Some((ino, _)) = found else {
                return Err(FsError::NotFound);
            };
            let g = self.lock_set(tx, &[dir, ino]);
            match self.dir_lookup(dir, name)? {
                Some((i2, k)) if i2 == ino => return Ok((g, ino, k)),
                _ => continue,
            }
        }
    }

    pub(crate) fn add_ref(&self, ino: u64) {
        *self.refs[(ino % REF_SHARDS as u64) as usize]
            .lock()
            .entry(ino)
            .or_insert(0) += 1;
    }
    pub(crate) fn refs_of(&self, ino: u64) -> u64 {
        self.refs[(ino % REF_SHARDS as u64) as usize]
            .lock()
            .get(&ino)
            .copied()
            .unwrap_or(0)
    }

    /// Give back `n` references taken by entry-returning operations. The
    /// inode is freed if this was the last reference of an unlinked inode.
    pub fn forget(&self, ino: u64, n: u64) {
        let last = {
            let mut m = self.refs[(ino % REF_SHARDS as u64) as usize].lock();
            match m.get_mut(&ino) {
                Some(c) if *c > n => {
                    *c -= n;
                    false
                }
                Some(_) => {
                    m.remove(&ino);
                    true
                }
                None => false,
            }
        };
        if !last || self.opts.read().readonly {
            return;
        }
        {
            // Under the inode lock: an unlink deciding to park this inode
            // holds it while it reads the references and writes nlink 0.
            let _r = self.read_lock(ino);
            if !matches!(self.inode(ino), Ok(p) if p.nlink == 0) {
                return;
            }
        }
        let tx = self.begin();
        let _g = self.lock_set(&tx, &[ino]);
        if self.refs_of(ino) == 0 && matches!(self.inode(ino), Ok(p) if p.nlink == 0) {
            // Errors here leave the inode in the unlinked set; the next mount frees it.
            let _ = self.free_inode(&tx, ino);
        }
    }

    /// Current reference count (for tests and the front ends).
    pub fn references(&self, ino: u64) -> u64 {
        self.refs_of(ino)
    }
}
