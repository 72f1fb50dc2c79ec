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
//! - It is one implementation of the read cache seam (`ReadCache`,
//!   read_cache.rs); a second level (the L2ARC) plugs in behind it
//!   (`set_second_level`): asked on a miss, offered every block evicted.
//!
//! Counters (hits, misses, prefetch reads) are relaxed atomics for
//! `tarn arcstat`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

pub use crate::read_cache::CacheKey;
use crate::read_cache::{ReadCache, SecondLevel};
use crate::BlockPtr;

/// Bytes counted for one cached block beyond its buffer: the entry in the
/// cache's table, the `Arc` and `Vec` headers, the allocator's own header.
pub const ENTRY_OVERHEAD: u64 = 128;
/// A cached buffer is charged 1/8 more than its size (`block_weight`).
pub const ALLOCATOR_SLACK_DIVISOR: u64 = 8;
/// `arc_max` where the machine's memory is not known (1 GiB).
pub const ARC_MAX_DEFAULT: u64 = 1 << 30;

/// The default `arc_max`: half of the machine's memory (`MemTotal`), as
/// OpenZFS on Linux defaults it, at least 64 MiB; [`ARC_MAX_DEFAULT`] if
/// /proc/meminfo cannot be read. A NAS's memory is there to cache its
/// pools; the daemon lowers the ARC's target when the machine runs short
/// (tarn-daemon memory.rs).
pub fn default_arc_max() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        let line = t.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    });
    match total {
        Some(bytes) => (bytes / 2).max(4 * ARC_MAX_FLOOR),
        None => ARC_MAX_DEFAULT,
    }
}
/// Default `arc_min` (32 MiB).
pub const ARC_MIN_DEFAULT: u64 = 32 << 20;
/// Smallest `arc_max` accepted (16 MiB).
pub const ARC_MAX_FLOOR: u64 = 16 << 20;
/// Other caches charged to the ARC may take at most this share of `c`
/// (1/4): past it they prune themselves (`meta_over_budget`).
const META_SHARE_DIVISOR: u64 = 4;

/// A cached block and, if it may go to the second level when evicted (its
/// dataset's `secondarycache`), its block pointer's checksum.
#[derive(Clone)]
struct Cached {
    data: Arc<Vec<u8>>,
    l2: Option<[u8; 32]>,
}

#[derive(Clone)]
struct ByteWeighter;
impl quick_cache::Weighter<CacheKey, Cached> for ByteWeighter {
    fn weight(&self, _k: &CacheKey, v: &Cached) -> u64 {
        block_weight(v.data.capacity() as u64)
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

/// The second level, if any, shared by the ARC and its eviction hook.
type SecondSlot = Arc<RwLock<Option<Arc<dyn SecondLevel>>>>;

/// Hands evicted blocks to the second level, after the cache's shard lock
/// is released (collected during the request, offered at its end).
#[derive(Clone, Default)]
struct Evictions {
    second: SecondSlot,
}

impl quick_cache::Lifecycle<CacheKey, Cached> for Evictions {
    type RequestState = Vec<(CacheKey, [u8; 32], Arc<Vec<u8>>)>;

    fn begin_request(&self) -> Self::RequestState {
        Vec::new()
    }

    fn on_evict(&self, state: &mut Self::RequestState, key: CacheKey, val: Cached) {
        if let (Some(sum), true) = (val.l2, self.second.read().is_some()) {
            state.push((key, sum, val.data));
        }
    }

    fn end_request(&self, state: Self::RequestState) {
        if state.is_empty() {
            return;
        }
        if let Some(l2) = self.second.read().clone() {
            for (k, sum, v) in state {
                l2.offer(k, sum, v);
            }
        }
    }
}

type BlockCache = quick_cache::sync::Cache<CacheKey, Cached, ByteWeighter, quick_cache::DefaultHashBuilder, Evictions>;

/// The process-wide block cache and its counters.
pub struct ArcCache {
    cache: BlockCache,
    second: SecondSlot,
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

static ARC: OnceLock<Arc<ArcCache>> = OnceLock::new();

/// The process's ARC (created on first use with the default `arc_max`).
pub fn arc() -> &'static ArcCache {
    shared_arc().as_ref()
}

/// The process's ARC as a read cache for `BlockIo`.
pub fn shared_arc() -> &'static Arc<ArcCache> {
    ARC.get_or_init(|| Arc::new(ArcCache::new(default_arc_max(), ARC_MIN_DEFAULT)))
}

impl ArcCache {
    /// An ARC of its own (the process's is `arc()`): for tests, and for
    /// pipelines that must not share.
    pub fn new(arc_max: u64, arc_min: u64) -> ArcCache {
        // The item estimate only sizes the tables up front; they grow.
        let items = (arc_max / (64 << 10)).clamp(1024, 1 << 16) as usize;
        let evictions = Evictions::default();
        ArcCache {
            second: evictions.second.clone(),
            cache: quick_cache::sync::Cache::with(items, arc_max, ByteWeighter, quick_cache::DefaultHashBuilder::default(), evictions),
            arc_max: AtomicU64::new(arc_max),
            arc_min: AtomicU64::new(arc_min),
            target: AtomicU64::new(arc_max),
            meta_bytes: AtomicU64::new(0),
            meta_applied: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            prefetch_reads: AtomicU64::new(0),
        }
    }

    /// Puts a second level (the L2ARC) behind this ARC, or takes it away.
    pub fn set_second_level(&self, second: Option<Arc<dyn SecondLevel>>) {
        *self.second.write() = second;
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

impl ReadCache for ArcCache {
    fn get(&self, key: &CacheKey, bp: &BlockPtr, prefetch: bool) -> Option<Arc<Vec<u8>>> {
        let mut found = self.cache.get(key).map(|c| c.data);
        if !prefetch {
            let counter = if found.is_some() { &self.hits } else { &self.misses };
            counter.fetch_add(1, Ordering::Relaxed);
        } else if found.is_none() {
            self.prefetch_reads.fetch_add(1, Ordering::Relaxed);
        }
        if found.is_none() {
            // A miss here may be a hit one level down: back into the ARC.
            let l2 = self.second.read().clone();
            if let Some(data) = l2.and_then(|l2| l2.get(key, bp)) {
                self.cache.insert(*key, Cached { data: data.clone(), l2: Some(bp.checksum) });
                found = Some(data);
            }
        }
        found
    }

    fn contains(&self, key: &CacheKey) -> bool {
        self.cache.peek(key).is_some()
    }

    fn get_resident(&self, key: &CacheKey) -> Option<Arc<Vec<u8>>> {
        let found = self.cache.get(key).map(|c| c.data);
        if found.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    fn insert(&self, key: CacheKey, data: Arc<Vec<u8>>, l2: Option<[u8; 32]>) {
        self.cache.insert(key, Cached { data, l2 });
    }

    fn remove(&self, key: &CacheKey) {
        self.cache.remove(key);
        if let Some(l2) = self.second.read().as_ref() {
            l2.remove(key);
        }
    }

    fn drop_io(&self, io: u64) {
        self.cache.retain(|k, _| k.io != io);
        if let Some(l2) = self.second.read().as_ref() {
            l2.drop_io(io);
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
            arc.insert(key(1, i), Arc::new(vec![7u8; 128 << 10]), Some([0; 32]));
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
            arc.insert(key(1, i), Arc::new(vec![1u8; 4096]), Some([0; 32]));
            arc.insert(key(2, i), Arc::new(vec![2u8; 4096]), Some([0; 32]));
        }
        arc.drop_io(1);
        assert!(arc.get(&key(1, 3), &BlockPtr::HOLE, false).is_none());
        assert_eq!(arc.get(&key(2, 3), &BlockPtr::HOLE, false).map(|v| v[0]), Some(2));
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

    /// Hit and miss through the trait, as `BlockIo` sees the cache.
    #[test]
    fn a_block_inserted_is_a_hit_and_one_never_seen_a_miss() {
        let arc = ArcCache::new(32 << 20, 1 << 20);
        let cache: &dyn ReadCache = &arc;
        assert!(cache.get(&key(1, 0), &BlockPtr::HOLE, false).is_none());
        cache.insert(key(1, 0), Arc::new(vec![9u8; 4096]), Some([0; 32]));
        assert!(cache.contains(&key(1, 0)));
        assert_eq!(cache.get(&key(1, 0), &BlockPtr::HOLE, false).map(|v| v[4095]), Some(9));
        assert!(cache.get(&CacheKey { birth: 2, ..key(1, 0) }, &BlockPtr::HOLE, false).is_none(), "another birth is another block");
        assert!(cache.get(&key(1, 0), &BlockPtr::HOLE, true).is_some());
        assert!(cache.get(&key(1, 1), &BlockPtr::HOLE, true).is_none());
        let s = arc.stats();
        assert_eq!((s.hits, s.misses, s.prefetch_reads), (1, 2, 1), "prefetch reads count apart from demand hits and misses");
        cache.remove(&key(1, 0));
        assert!(!cache.contains(&key(1, 0)));
        assert!(cache.get(&key(1, 0), &BlockPtr::HOLE, false).is_none());
    }

    /// At its cap the ARC evicts: a stream twice the cap leaves the weight
    /// at or under the cap, and a block read again survives blocks read
    /// once (scan resistance: a one-pass stream does not flush the cache).
    #[test]
    fn a_full_arc_evicts_at_its_cap_and_keeps_what_is_read_again() {
        let cap = ARC_MAX_FLOOR;
        let arc = ArcCache::new(cap, 1 << 20);
        let cache: &dyn ReadCache = &arc;
        let hot = key(2, 0);
        cache.insert(hot, Arc::new(vec![1u8; 64 << 10]), Some([0; 32]));
        let blocks = 2 * cap / block_weight(64 << 10);
        for i in 0..blocks {
            cache.insert(key(1, i), Arc::new(vec![i as u8; 64 << 10]), Some([0; 32]));
            assert!(arc.stats().data_size <= cap, "over the cap after {i} inserts");
            if i % 8 == 0 {
                assert!(cache.get(&hot, &BlockPtr::HOLE, false).is_some(), "the block read again was evicted after {i} inserts");
            }
        }
        let held = (0..blocks).filter(|&i| cache.contains(&key(1, i))).count() as u64;
        assert!(held < blocks, "nothing evicted");
        assert!(held * block_weight(64 << 10) <= cap);
        assert!(cache.contains(&hot));
    }

    /// A stand-in for the L2ARC's seam that keeps what it is offered in
    /// memory: what the ARC's side of the contract does is under test.
    #[derive(Default)]
    struct Recorder {
        kept: parking_lot::Mutex<std::collections::HashMap<CacheKey, Arc<Vec<u8>>>>,
        asked: AtomicU64,
    }

    impl SecondLevel for Recorder {
        fn get(&self, key: &CacheKey, _bp: &BlockPtr) -> Option<Arc<Vec<u8>>> {
            self.asked.fetch_add(1, Ordering::Relaxed);
            self.kept.lock().get(key).cloned()
        }
        fn offer(&self, key: CacheKey, _bp_checksum: [u8; 32], data: Arc<Vec<u8>>) {
            self.kept.lock().insert(key, data);
        }
        fn remove(&self, key: &CacheKey) {
            self.kept.lock().remove(key);
        }
        fn drop_io(&self, io: u64) {
            self.kept.lock().retain(|k, _| k.io != io);
        }
    }

    /// Blocks the ARC evicts go to the second level; a miss in the ARC is
    /// answered from it (and the block is back in the ARC); frees and
    /// exports reach it too.
    #[test]
    fn a_second_level_is_fed_by_evictions_and_asked_on_misses() {
        let arc = ArcCache::new(ARC_MAX_FLOOR, 1 << 20);
        let l2 = Arc::new(Recorder::default());
        arc.set_second_level(Some(l2.clone()));
        let cache: &dyn ReadCache = &arc;
        let blocks = 2 * ARC_MAX_FLOOR / block_weight(64 << 10);
        for i in 0..blocks {
            cache.insert(key(1, i), Arc::new(vec![i as u8; 64 << 10]), Some([0; 32]));
        }
        let evicted: Vec<u64> = (0..blocks).filter(|&i| !cache.contains(&key(1, i))).collect();
        assert!(!evicted.is_empty());
        for &i in &evicted {
            assert!(l2.kept.lock().contains_key(&key(1, i)), "evicted block {i} was not offered");
        }
        let i = evicted[0];
        let misses = arc.stats().misses;
        assert_eq!(cache.get(&key(1, i), &BlockPtr::HOLE, false).map(|v| v[0]), Some(i as u8));
        assert_eq!(arc.stats().misses, misses + 1, "an L2 hit is an ARC miss");
        assert!(cache.contains(&key(1, i)), "a block found below is back in the ARC");
        cache.remove(&key(1, evicted[1]));
        assert!(!l2.kept.lock().contains_key(&key(1, evicted[1])), "a freed block leaves the second level too");
        cache.drop_io(1);
        assert!(l2.kept.lock().is_empty());
        let asked = l2.asked.load(Ordering::Relaxed);
        arc.set_second_level(None);
        assert!(cache.get(&key(1, 0), &BlockPtr::HOLE, false).is_none());
        assert_eq!(l2.asked.load(Ordering::Relaxed), asked, "no second level is asked once taken away");
    }

    /// A block inserted as not eligible for the second level
    /// (`secondarycache` leaves it out) is evicted without being offered.
    #[test]
    fn blocks_kept_out_of_the_second_level_are_not_offered() {
        let arc = ArcCache::new(ARC_MAX_FLOOR, 1 << 20);
        let l2 = Arc::new(Recorder::default());
        arc.set_second_level(Some(l2.clone()));
        let cache: &dyn ReadCache = &arc;
        let blocks = 2 * ARC_MAX_FLOOR / block_weight(64 << 10);
        for i in 0..blocks {
            cache.insert(key(1, i), Arc::new(vec![i as u8; 64 << 10]), (i % 2 == 0).then_some([0; 32]));
        }
        let evicted: Vec<u64> = (0..blocks).filter(|&i| !cache.contains(&key(1, i))).collect();
        assert!(evicted.len() > 4);
        for &i in &evicted {
            assert_eq!(l2.kept.lock().contains_key(&key(1, i)), i % 2 == 0, "block {i}");
        }
    }
}
