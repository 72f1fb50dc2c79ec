//! Summaries of dead lists, so a snapshot's `used` costs a binary search
//! instead of a read of its successor's whole dead list.
//!
//! A snapshot's `used` is the part of the next object set's dead list born
//! after the previous snapshot's txg, and a clone's `usedbysnapshots`
//! splits its chain's dead lists at the origin's txg (snap.rs). Both are
//! answered from a [`Summary`] of the dead list: its distinct birth txgs,
//! sorted, with the allocated bytes born at or before each (a prefix sum),
//! so any split is one binary search. Listing a thousand snapshots of a
//! busy dataset reads each dead list once, not once per listing.
//!
//! Invariants:
//! - A summary is served only for the dead list (MOS object id) it was
//!   built from, and only while that list's entry count and bytes (its
//!   bonus) are what they were when it was built.
//! - Dead lists change only in syncing context, inside
//!   [`DeadlistCache::changing`]: the list's summary is dropped when the
//!   change is done, and a summary built while any change was in progress
//!   (or began during the build) is returned but not kept. So a kept
//!   summary never describes a half-changed list, nor a list replaced by
//!   one with the same count and bytes, nor a freed object whose id was
//!   reused.
//! - Memory is bounded: at most [`SUMMARY_BIRTHS_MAX`] (birth, bytes)
//!   pairs per pool; the least recently used summaries go first.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_block::BlockPtr;

use crate::pool::Shared;
use crate::snap::{deadlist_read, deadlist_totals};
use crate::{Result, Txg};

/// Most (birth txg, bytes) pairs the summaries of one pool hold: 8 MiB.
pub const SUMMARY_BIRTHS_MAX: usize = 1 << 19;

/// What a dead list holds, by birth txg.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// The distinct birth txgs of the entries, ascending.
    births: Vec<Txg>,
    /// `cumulative[i]`: allocated bytes of the entries born at or before
    /// `births[i]`.
    cumulative: Vec<u64>,
}

impl Summary {
    pub fn of(entries: &[BlockPtr]) -> Summary {
        Summary::from_pairs(entries.iter().map(|bp| (bp.birth, bp.asize())).collect())
    }

    fn from_pairs(mut pairs: Vec<(Txg, u64)>) -> Summary {
        pairs.sort_unstable_by_key(|p| p.0);
        let mut summary = Summary::default();
        let mut total = 0u64;
        for (birth, bytes) in pairs {
            total += bytes;
            if summary.births.last() == Some(&birth) {
                if let Some(last) = summary.cumulative.last_mut() {
                    *last = total;
                }
            } else {
                summary.births.push(birth);
                summary.cumulative.push(total);
            }
        }
        summary
    }

    /// Allocated bytes of the whole list.
    pub fn total(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }

    /// Allocated bytes born at or before `txg`, and after it.
    pub fn split(&self, txg: Txg) -> (u64, u64) {
        let at_or_before = match self.births.partition_point(|&b| b <= txg) {
            0 => 0,
            n => self.cumulative.get(n - 1).copied().unwrap_or(0),
        };
        (at_or_before, self.total() - at_or_before)
    }

    fn pairs(&self) -> usize {
        self.births.len()
    }
}

struct Entry {
    /// The list's bonus (entry count, bytes) when the summary was built.
    count: u64,
    bytes: u64,
    summary: Arc<Summary>,
    last_used: u64,
}

#[derive(Default)]
struct Entries {
    by_list: HashMap<u64, Entry>,
    pairs: usize,
    tick: u64,
}

/// The summaries of one pool's dead lists, by MOS object id.
#[derive(Default)]
pub(crate) struct DeadlistCache {
    entries: Mutex<Entries>,
    /// Changes in progress (syncing context; they may nest).
    changing: AtomicU64,
    /// Bumped when a change begins and when it ends.
    generation: AtomicU64,
    hits: AtomicU64,
    builds: AtomicU64,
}

impl DeadlistCache {
    /// Runs `change` of dead list `obj` (syncing context: an append, a
    /// replacement, its free, its creation); the list's summary goes.
    pub(crate) fn changing<T>(&self, obj: u64, change: impl FnOnce() -> T) -> T {
        self.changing.fetch_add(1, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
        let out = change();
        {
            let mut entries = self.entries.lock();
            if let Some(gone) = entries.by_list.remove(&obj) {
                entries.pairs -= gone.summary.pairs();
            }
        }
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.changing.fetch_sub(1, Ordering::SeqCst);
        out
    }

    /// (summaries served from the cache, summaries built by reading a list).
    pub(crate) fn counters(&self) -> (u64, u64) {
        (self.hits.load(Ordering::Relaxed), self.builds.load(Ordering::Relaxed))
    }
}

/// The summary of dead list `obj` (0: none, empty).
pub(crate) fn summary(s: &Arc<Shared>, obj: u64) -> Result<Arc<Summary>> {
    if obj == 0 {
        return Ok(Arc::default());
    }
    let cache = &s.deadlists;
    let generation = cache.generation.load(Ordering::SeqCst);
    let quiet = cache.changing.load(Ordering::SeqCst) == 0;
    let (count, bytes) = deadlist_totals(s, obj);
    {
        let mut entries = cache.entries.lock();
        entries.tick += 1;
        let tick = entries.tick;
        if let Some(entry) = entries.by_list.get_mut(&obj) {
            if entry.count == count && entry.bytes == bytes {
                entry.last_used = tick;
                cache.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(entry.summary.clone());
            }
        }
    }
    let summary = Arc::new(Summary::of(&deadlist_read(s, obj)?));
    cache.builds.fetch_add(1, Ordering::Relaxed);
    if !quiet || summary.pairs() > SUMMARY_BIRTHS_MAX {
        return Ok(summary);
    }
    let mut entries = cache.entries.lock();
    // Kept only if no change began or ended since the totals were read.
    if cache.generation.load(Ordering::SeqCst) != generation {
        return Ok(summary);
    }
    if let Some(old) = entries.by_list.remove(&obj) {
        entries.pairs -= old.summary.pairs();
    }
    while entries.pairs + summary.pairs() > SUMMARY_BIRTHS_MAX {
        let Some(oldest) = entries.by_list.iter().min_by_key(|(_, e)| e.last_used).map(|(id, _)| *id) else { break };
        if let Some(gone) = entries.by_list.remove(&oldest) {
            entries.pairs -= gone.summary.pairs();
        }
    }
    entries.tick += 1;
    let last_used = entries.tick;
    entries.pairs += summary.pairs();
    entries.by_list.insert(obj, Entry { count, bytes, summary: summary.clone(), last_used });
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn splits_match_a_recount() {
        let seeded = tarn_testkit::seeded!(200);
        for round in 0..seeded.count {
            let mut rng = seeded.rng(round);
            let n = rng.gen_range(0..300);
            let pairs: Vec<(Txg, u64)> = (0..n).map(|_| (rng.gen_range(1..60), rng.gen_range(1..40) * 512)).collect();
            let summary = Summary::from_pairs(pairs.clone());
            assert!(summary.births.windows(2).all(|w| w[0] < w[1]));
            for txg in 0..62 {
                let before: u64 = pairs.iter().filter(|p| p.0 <= txg).map(|p| p.1).sum();
                let after: u64 = pairs.iter().filter(|p| p.0 > txg).map(|p| p.1).sum();
                assert_eq!(summary.split(txg), (before, after), "txg {txg}, round {round}");
            }
            assert_eq!(summary.total(), pairs.iter().map(|p| p.1).sum::<u64>());
        }
        assert_eq!(Summary::default().split(5), (0, 0));
    }
}
