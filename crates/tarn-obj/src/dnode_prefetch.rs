//! Dnode prefetch for directory walks.
//!
//! A dnode is 512 bytes; 32 of them share one 16 KiB block of the meta
//! object. Reading the attributes of a directory's children one by one on
//! a cold cache costs one block read per child whose block is not cached
//! yet, each waited for in turn. A walker that knows the next batch of
//! object ids (a directory listing) hands them here first: the distinct
//! dnode blocks they live in are read in parallel into the block cache,
//! and the per-object handle loads that follow are cache hits.
//!
//! Only the block cache is warmed; handles are still made one at a time
//! under the handle-map lock (`ObjsetInner::handle`), so a handle never
//! starts from a dnode older than a change made through another handle.

use std::collections::BTreeSet;

use tarn_block::BlockPtr;

use crate::format::DNODES_PER_BLOCK;
use crate::par::par_map;
use crate::{tree, ObjError, ObjInfo, ObjType, ObjectId, ObjectSet, Result};

/// At most this many dnode blocks are read in one call (a batch of a few
/// hundred directory entries spans far fewer).
pub const DNODE_PREFETCH_BLOCKS_MAX: usize = 256;

impl ObjectSet {
    /// Read the dnode blocks of `ids` into the block cache, in parallel,
    /// and return once they are there. Objects that already have a handle
    /// and blocks already cached cost nothing. Errors are not reported
    /// here: the read that needs the dnode meets them again and reports
    /// them there. Returns how many blocks were read.
    pub fn prefetch_dnodes(&self, ids: &[ObjectId]) -> usize {
        let blkids: BTreeSet<u64> = {
            ids.iter()
                .filter(|id| id.0 != 0 && !self.inner.handles.contains(**id))
                .map(|id| id.0 / DNODES_PER_BLOCK)
                .collect()
        };
        if blkids.is_empty() {
            return 0;
        }
        let io = &self.shared.io;
        // Frees are not released while the committed tree is walked.
        let _gate = self.shared.reader_gate.read();
        let meta = self.inner.committed.lock().meta.clone();
        let wanted: Vec<BlockPtr> = blkids
            .into_iter()
            .take(DNODE_PREFETCH_BLOCKS_MAX)
            .filter_map(|blkid| tree::lookup(io, &meta, blkid).ok())
            .filter(|bp| !bp.is_hole() && !io.is_cached(bp))
            .collect();
        par_map(&wanted, |bp| io.read(bp).is_ok())
            .into_iter()
            .filter(|&ok| ok)
            .count()
    }

    /// `info` for walks over many objects: an object without a handle is
    /// read from its dnode block (cached, or read now) without making one,
    /// so a walk over more objects than the handle cache holds neither
    /// evicts the handles of objects in use nor loads each dnode twice.
    ///
    /// Correct for the same reason `ObjsetInner::handle` is: the block is
    /// read under the lock of the handle map's shard of `id`, and every object with changes not
    /// yet in the committed tree has a handle.
    pub fn info_for_walk(&self, id: ObjectId) -> Result<ObjInfo> {
        let handles = self.inner.handles.read_shard(id);
        if handles.contains_key(&id) {
            drop(handles);
            return self.info(id);
        }
        let phys = self.inner.load_phys(&self.shared, id)?;
        drop(handles);
        if !phys.in_use() {
            return Err(ObjError::NotFound(id.0));
        }
        Ok(ObjInfo {
            otype: ObjType(phys.otype),
            block_size: phys.block_size,
            length: phys.nblocks * phys.block_size as u64,
            used_bytes: phys.used_bytes,
            bonus: phys.bonus,
        })
    }
}
