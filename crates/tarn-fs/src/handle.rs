//! File handles: an inode named by its number and generation, without a
//! directory entry or a FUSE reference (NFS).
//!
//! Invariants:
//! - A handle names one inode for the life of the dataset. Object ids are
//!   never reused inside an object set (tarn-obj's `next_object` only
//!   grows, also across snapshots: a rollback restores an older counter but
//!   every txg after it is newer than any generation it discards), and the
//!   generation is the txg that created the inode under an epoch raised
//!   and synced before each open's first creation (so txgs a power cut lost
//!   and that are written again get new generations), so an (ino, generation)
//!   pair cannot name two inodes. `attr_by_handle` still compares the
//!   generation, so the answer stays right if ids are ever reused.
//! - A handle to an inode that is freed, has no link left (an unlinked
//!   inode kept only for open FUSE files), or to an object that is not an
//!   inode (the master node, the unlinked set, xattr objects) is `Stale`:
//!   never another object's data, never `Corrupt` for a garbage handle.

use tarn_obj::{ObjError, ObjectId};

use crate::format::InodePhys;
use crate::{otype, Attr, Fs, FsError, Result};

impl Fs {
    /// Attributes of the inode `ino` if its generation is `generation`
    /// and it still has a link; `Stale` otherwise.
    pub fn attr_by_handle(&self, ino: u64, generation: u64) -> Result<Attr> {
        let _g = self.read_lock(ino);
        let (p, info) = self.live_inode(ino)?;
        if p.generation != generation {
            return Err(FsError::Stale);
        }
        Ok(self.attr_from(ino, &p, &info))
    }

    /// `attr_by_handle` from memory alone, for a server's connection
    /// thread: None, with nothing read and nothing waited for, when the
    /// inode's dnode is not in memory, a change holds its lock, or the
    /// answer would be an error (the caller then takes the full path,
    /// which gives the same answer or the error).
    pub fn attr_by_handle_cached(&self, ino: u64, generation: u64) -> Option<Attr> {
        let _g = self.try_read_lock(ino)?;
        let (p, info) = self.live_inode_cached(ino)?;
        (p.generation == generation).then(|| self.attr_from(ino, &p, &info))
    }

    /// The inode `ino` if it is live (see the module comment), else
    /// `Stale`. Callers hold its lock when they need the answer to last.
    pub(crate) fn live_inode(&self, ino: u64) -> Result<(InodePhys, tarn_obj::ObjInfo)> {
        if !self.may_be_inode(ino) {
            return Err(FsError::Stale);
        }
        let info = match self.os.info(ObjectId(ino)) {
            Ok(i) => i,
            Err(ObjError::NotFound(_)) => return Err(FsError::Stale),
            Err(e) => return Err(e.into()),
        };
        Self::live_of(ino, info)
    }

    /// `live_inode` from memory alone: None when the dnode is not in
    /// memory or the inode is not live.
    pub(crate) fn live_inode_cached(&self, ino: u64) -> Option<(InodePhys, tarn_obj::ObjInfo)> {
        if !self.may_be_inode(ino) {
            return None;
        }
        let info = self.os.info_cached(ObjectId(ino)).ok()??;
        Self::live_of(ino, info).ok()
    }

    fn may_be_inode(&self, ino: u64) -> bool {
        ino != 0 && ino != crate::MASTER_OBJECT && ino != self.unlinked.0
    }

    fn live_of(ino: u64, info: tarn_obj::ObjInfo) -> Result<(InodePhys, tarn_obj::ObjInfo)> {
        if ![otype::DIR, otype::FILE, otype::SYMLINK, otype::SPECIAL].contains(&info.otype) {
            return Err(FsError::Stale);
        }
        let p = InodePhys::decode(ino, &info.bonus)?;
        if p.nlink == 0 {
            return Err(FsError::Stale);
        }
        Ok((p, info))
    }
}
