//! The ARC: one cache of decompressed, verified blocks for the whole
//! process, shared by every pool (as ZFS's ARC is one per kernel).
//!
//! Invariants:
//! - What the cache holds, weighed as the bytes each block really occupies
//!   (the buffer's capacity, the allocator's slack, a per-entry overhead:
//!   `block_weight`), never passes its
//!   capacity, which is the target `c` less the memory of other caches
//!   charged to the ARC (`charge_meta`: dnode handles). `c` is `arc_max`,
//!   lowered toward `arc_min` while the machine runs short of memory
//!   (`set_target`).
//! - A block is keyed by the `BlockIo` that read it (a process-unique id),
//!   its first DVA and its birth txg: blocks of different pools never meet,
//!   and a pool's blocks leave the cache when its `BlockIo` is dropped
//!   (export), so an exported pool holds no cache memory.
//!
//! Counters (hits, misses, prefetch reads) are relaxed atomics for
//! `tarn arcstat`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Bytes counted for one cached block beyond its buffer: the entry in the
/// cache's table, the `Arc` and `Vec` headers, the allocator's own header.
pub const ENTRY_OVERHEAD: u64 = 128;
/// A cached buffer is charged 1/8 more than its size (`block_weight`).
pub const ALLOCATOR_SLACK_DIVISOR: u64 = 8;
/// Default `arc_max` (1 GiB).
pub const ARC_MAX_DEFAULT: u64 = 1 << 30;
/// Default `arc_min` (32 MiB).
pub const ARC_MIN_DEFAULT: u64 = 32 << 20;
/// Smallest `arc_max` accepted (16 MiB).
pub const ARC_MAX_FLOOR: u64 = 16 << 20;
/// Other caches charged to the ARC may take at most this share of `c`
/// (1/4): past it they prune themselves (`meta_over_budget`).
const META_SHARE_DIVISOR: u64 = 4;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct CacheKey {
    pub io: u64,
    pub vdev: u32,
    pub offset: u64,
    pub birth: u64,
}

#[derive(Clone)]
struct ByteWeighter;
impl quick_cache::Weighter<CacheKey, Arc<Vec<u8>>> for ByteWeighter {
    fn weight(&self, _k: &CacheKey, v: &Arc<Vec<u8>>) -> u64 {
        block_weight(v.capacity() as u64)
    }
}

/// What a cached buffer of `capacity` bytes costs in resident memory: the
/// buffer, the allocator's slack around buffers freed in eviction order
/// rather than allocation order (1/8: bench/memory.sh measured the
/// daemon's RSS growing by 1.125 bytes per byte of `arc_max`,
/// docs/tuning.md), and the entry's bookkeeping.
pub fn block_weight(capacity: u64) -> u64 {
    capacity + capacity / ALLOCATOR_SLACK_DIVISOR + ENTRY_OVERHEAD
}

type BlockCache = quick_cache::sync::Cache<CacheKey, Arc<Vec<u8>>, ByteWeighter>;

/// The process-wide block cache and its counters.
pub struct ArcCache {
    cache: BlockCache,
    arc_max: AtomicU64,
    arc_min: AtomicU64,
    /// The target size `c` (between `arc_min` and `arc_max`).
    target: AtomicU64,
    /// Bytes of other caches charged to the ARC (dnode handles).
    meta_bytes: AtomicU64,
    /// `meta_bytes` as last subtracted from the cache's capacity.
    meta_applied: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    prefetch_reads: AtomicU64,
    next_io: AtomicU64,
}

/// A snapshot of the ARC's sizes and counters (`tarn arcstat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArcStats {
    /// Bytes held: cached blocks plus other caches charged to the ARC.
    pub size: u64,
    /// Bytes of cached blocks alone.
    pub data_size: u64,
    /// Bytes of dnode handles charged to the ARC.
    pub meta_size: u64,
    pub target: u64,
    pub arc_max: u64,
    pub arc_min: u64,
    pub blocks: u64,
    pub hits: u64,
    pub misses: u64,
    pub prefetch_reads: u64,
}

static ARC: OnceLock<ArcCache> = OnceLock::new();

/// The process's ARC (created on first use with the default `arc_max`).
pub fn arc() -> &'static ArcCache {
    ARC.get_or_init(|| ArcCache::new(ARC_MAX_DEFAULT, ARC_MIN_DEFAULT))
}

impl ArcCache {
    fn new(arc_max: u64, arc_min: u64) -> ArcCache {
        // The item estimate only sizes the tables up front; they grow.
        let items = (arc_max / (64 << 10)).clamp(1024, 1 << 16) as usize;
        ArcCache {
            cache: quick_cache::sync::Cache::with_weighter(items, arc_max, ByteWeighter),
            arc_max: AtomicU64::new(arc_max),
            arc_min: AtomicU64::new(arc_min),
            target: AtomicU64::new(arc_max),
            meta_bytes: AtomicU64::new(0),
            meta_applied: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            prefetch_reads: AtomicU64::new(0),
            next_io: AtomicU64::new(1),
        }
    }

    /// A fresh id for a `BlockIo` (its blocks' key prefix).
    pub(crate) fn new_io_id(&self) -> u64 {
        self.next_io.fetch_add(1, Ordering::Relaxed)
    }

    /// Sets `arc_max` and `arc_min` (bytes); `c` becomes `arc_max` and the
    /// cache gives back at once whatever exceeds it.
    pub fn set_limits(&self, arc_max: u64, arc_min: u64) {
        let arc_max = arc_max.max(ARC_MAX_FLOOR);
        let arc_min = arc_min.min(arc_max);
        self.arc_max.store(arc_max, Ordering::Relaxed);
        self.arc_min.store(arc_min, Ordering::Relaxed);
        self.set_target(arc_max);
    }

    /// Sets the target `c`, clamped to `arc_min..=arc_max` (the memory
    /// monitor lowers it while the machine is short of memory).
    pub fn set_target(&self, target: u64) {
        let max = self.arc_max.load(Ordering::Relaxed);
        let min = self.arc_min.load(Ordering::Relaxed).min(max);
        self.target.store(target.clamp(min, max), Ordering::Relaxed);
        self.apply_capacity();
    }

    fn apply_capacity(&self) {
        let target = self.target.load(Ordering::Relaxed);
        let meta = self.meta_bytes.load(Ordering::Relaxed).min(target / META_SHARE_DIVISOR);
        self.meta_applied.store(meta, Ordering::Relaxed);
        self.cache.set_capacity(target.saturating_sub(meta).max(1 << 20));
    }

    /// Charges (`delta` > 0) or gives back memory of another cache to the
    /// ARC: the block cache shrinks by as much (in 1 MiB steps).
    pub fn charge_meta(&self, delta: i64) {
        let now = if delta >= 0 {
            self.meta_bytes.fetch_add(delta as u64, Ordering::Relaxed) + delta as u64
        } else {
            let d = delta.unsigned_abs();
            let prev = self.meta_bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(d)));
            prev.unwrap_or(0).saturating_sub(d)
        };
        if now.abs_diff(self.meta_applied.load(Ordering::Relaxed)) >= 1 << 20 {
            self.apply_capacity();
        }
    }

    /// True when other caches hold more than their share of `c`: they
    /// should drop what they can.
    pub fn meta_over_budget(&self) -> bool {
        self.meta_bytes.load(Ordering::Relaxed) > self.target.load(Ordering::Relaxed) / META_SHARE_DIVISOR
    }

    pub(crate) fn get(&self, key: &CacheKey, prefetch: bool) -> Option<Arc<Vec<u8>>> {
        let found = self.cache.get(key);
        if !prefetch {
            let counter = if found.is_some() { &self.hits } else { &self.misses };
            counter.fetch_add(1, Ordering::Relaxed);
        } else if found.is_none() {
            self.prefetch_reads.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// Whether the block is cached (no hit or miss counted, no recency change).
    pub(crate) fn contains(&self, key: &CacheKey) -> bool {
        self.cache.peek(key).is_some()
    }

    pub(crate) fn insert(&self, key: CacheKey, data: Arc<Vec<u8>>) {
        self.cache.insert(key, data);
    }

    pub(crate) fn remove(&self, key: &CacheKey) {
        self.cache.remove(key);
    }

    /// Drops every block read through the `BlockIo` with this id.
    pub(crate) fn drop_io(&self, io: u64) {
        self.cache.retain(|k, _| k.io != io);
    }

    pub fn stats(&self) -> ArcStats {
        let data_size = self.cache.weight();
        let meta_size = self.meta_bytes.load(Ordering::Relaxed);
        ArcStats {
            size: data_size + meta_size,
            data_size,
            meta_size,
            target: self.target.load(Ordering::Relaxed),
            arc_max: self.arc_max.load(Ordering::Relaxed),
            arc_min: self.arc_min.load(Ordering::Relaxed),
            blocks: self.cache.len() as u64,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            prefetch_reads: self.prefetch_reads.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(io: u64, offset: u64) -> CacheKey {
        CacheKey { io, vdev: 0, offset, birth: 1 }
    }

    #[test]
    fn weight_stays_under_the_target_and_shrinks_with_it() {
        let arc = ArcCache::new(32 << 20, 1 << 20);
        for i in 0..1000u64 {
            arc.insert(key(1, i), Arc::new(vec![7u8; 128 << 10]));
            assert!(arc.stats().data_size <= 32 << 20, "over arc_max after {i} inserts");
        }
        assert!(arc.stats().data_size > 16 << 20, "the cache fills up to its capacity");
        arc.set_limits(16 << 20, 1 << 20);
        assert!(arc.stats().data_size <= 16 << 20);
        arc.charge_meta(4 << 20);
        assert!(arc.stats().data_size <= 12 << 20, "charged memory comes out of the block cache");
        assert!(!arc.meta_over_budget());
        arc.charge_meta(1 << 20);
        assert!(arc.meta_over_budget());
        arc.charge_meta(-(5 << 20));
        assert_eq!(arc.stats().meta_size, 0);
    }

    #[test]
    fn dropping_an_io_empties_its_blocks_only() {
        let arc = ArcCache::new(32 << 20, 1 << 20);
        for i in 0..8 {
            arc.insert(key(1, i), Arc::new(vec![1u8; 4096]));
            arc.insert(key(2, i), Arc::new(vec![2u8; 4096]));
        }
        arc.drop_io(1);
        assert!(arc.get(&key(1, 3), false).is_none());
        assert_eq!(arc.get(&key(2, 3), false).map(|v| v[0]), Some(2));
        let s = arc.stats();
        assert_eq!((s.hits, s.misses, s.blocks), (1, 1, 8));
    }

    #[test]
    fn limits_are_clamped() {
        let arc = ArcCache::new(64 << 20, 1 << 20);
        arc.set_limits(1, 0);
        assert_eq!(arc.stats().arc_max, ARC_MAX_FLOOR);
        arc.set_limits(64 << 20, 128 << 20);
        assert_eq!(arc.stats().arc_min, 64 << 20);
        arc.set_limits(64 << 20, 8 << 20);
        arc.set_target(1);
        assert_eq!(arc.stats().target, 8 << 20);
    }
}
