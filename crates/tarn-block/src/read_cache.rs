//! The read cache seam: what `BlockIo::read` asks before it reads from the
//! vdevs, and what it gives the cache after.
//!
//! `BlockIo` holds an `Arc<dyn ReadCache>`: the process's ARC (arc.rs) by
//! default, any other implementation through `BlockIo::with_cache` (tests
//! give each pipeline its own ARC). A cache sees only verified,
//! decompressed blocks; it never reads a device itself.
//!
//! A second level (the L2ARC, on `cache` vdevs) sits behind the ARC, not
//! beside it: the ARC consults it on a miss and feeds it the blocks it
//! evicts ([`SecondLevel`], `ArcCache::set_second_level`). `BlockIo` does
//! not know whether there is one.
//!
//! Invariants:
//! - A key names one block for good: the `BlockIo` (a process-unique id),
//!   the block's first DVA and its birth txg. Space reused after a free
//!   gets a new birth, so a stale entry can never answer for new data; a
//!   freed block is removed anyway (`BlockIo::free` calls `remove`), so
//!   the cache does not spend memory on it.
//! - After `drop_io(id)` no entry of that `BlockIo` remains (export).

use std::sync::Arc;

use crate::BlockPtr;

/// Names a cached block: the `BlockIo` that read it, its first DVA and its
/// birth txg.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    pub io: u64,
    pub vdev: u32,
    pub offset: u64,
    pub birth: u64,
}

/// A cache of verified, decompressed blocks in front of the vdev reads.
pub trait ReadCache: Send + Sync {
    /// The cached block, if any. A demand read (`prefetch` false) counts a
    /// hit or a miss; a read ahead counts apart (`prefetch_reads`). `bp` is
    /// the block being read: a second level verifies what it returns
    /// against it.
    fn get(&self, key: &CacheKey, bp: &BlockPtr, prefetch: bool) -> Option<Arc<Vec<u8>>>;

    /// Whether the block is cached (no counter, no change of recency).
    fn contains(&self, key: &CacheKey) -> bool;

    /// The block if this level holds it (a demand hit counted); None,
    /// with nothing counted and nothing asked of a second level, if not.
    fn get_resident(&self, key: &CacheKey) -> Option<Arc<Vec<u8>>>;

    /// A block just read and verified. `l2`, when the block may go to a
    /// second level once evicted (the dataset's `secondarycache`), is its
    /// block pointer's checksum, which the second level records with it
    /// (and checks a reader's `bp` against); the cache keeps it with the
    /// block.
    fn insert(&self, key: CacheKey, data: Arc<Vec<u8>>, l2: Option<[u8; 32]>);

    /// The block was freed: forget it.
    fn remove(&self, key: &CacheKey);

    /// Forget every block of the `BlockIo` with this id (it is going away).
    fn drop_io(&self, io: u64);
}

/// A cache behind the ARC (the L2ARC's seam). Calls come from the ARC's
/// own paths, some under its locks: none may block on I/O (queue writes
/// to the device, answer `get` from the index) or call back into the ARC.
pub trait SecondLevel: Send + Sync {
    /// The block, on an ARC miss; only data that verifies against `bp`.
    fn get(&self, key: &CacheKey, bp: &BlockPtr) -> Option<Arc<Vec<u8>>>;

    /// A block the ARC is evicting, eligible for the second level (its
    /// dataset's `secondarycache` allows it): keep it if it is worth
    /// keeping. Never blocks, never does I/O.
    fn offer(&self, key: CacheKey, bp_checksum: [u8; 32], data: Arc<Vec<u8>>);

    /// The block was freed.
    fn remove(&self, key: &CacheKey);

    /// Every block of the `BlockIo` with this id is gone.
    fn drop_io(&self, io: u64);
}
