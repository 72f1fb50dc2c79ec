//! The allocator behind its lock, with its space totals published as
//! atomics: writers check free space on every write (tarn-obj's space.rs)
//! and must not queue behind the sync thread, which holds the allocator
//! while it places a txg's blocks.
//!
//! Invariant: whenever no guard is alive, the published totals equal the
//! allocator's (`AllocGuard::drop` republishes them; every change to the
//! allocator goes through a guard). While a guard is alive a reader sees
//! the totals of the last guard dropped — never torn within one total,
//! possibly one guard behind across them, as a check made just before
//! that guard was taken would have seen.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, MutexGuard};

use crate::alloc::Allocator;

/// Raw bytes: every vdev's size, free now, freed but in the defer window,
/// and of what is free, what lies in extents of at least
/// [`crate::alloc::LARGE_EXTENT`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpaceTotals {
    pub total: u64,
    pub free: u64,
    pub deferred: u64,
    pub large_free: u64,
}

pub struct AllocLock {
    allocator: Mutex<Allocator>,
    total: AtomicU64,
    free: AtomicU64,
    deferred: AtomicU64,
    large_free: AtomicU64,
}

impl AllocLock {
    pub fn new(a: Allocator) -> AllocLock {
        let l = AllocLock { allocator: Mutex::new(a), total: AtomicU64::new(0), free: AtomicU64::new(0), deferred: AtomicU64::new(0), large_free: AtomicU64::new(0) };
        drop(l.lock());
        l
    }

    /// The allocator, exclusively; its totals are republished when the
    /// guard goes.
    pub fn lock(&self) -> AllocGuard<'_> {
        AllocGuard { guard: self.allocator.lock(), owner: self }
    }

    /// The totals as of the last guard dropped, without the lock.
    pub fn totals(&self) -> SpaceTotals {
        SpaceTotals {
            total: self.total.load(Ordering::Acquire),
            free: self.free.load(Ordering::Acquire),
            deferred: self.deferred.load(Ordering::Acquire),
            large_free: self.large_free.load(Ordering::Acquire),
        }
    }
}

pub struct AllocGuard<'a> {
    guard: MutexGuard<'a, Allocator>,
    owner: &'a AllocLock,
}

impl Deref for AllocGuard<'_> {
    type Target = Allocator;
    fn deref(&self) -> &Allocator {
        &self.guard
    }
}

impl DerefMut for AllocGuard<'_> {
    fn deref_mut(&mut self) -> &mut Allocator {
        &mut self.guard
    }
}

impl Drop for AllocGuard<'_> {
    fn drop(&mut self) {
        let a = &*self.guard;
        self.owner.total.store(a.total_bytes(), Ordering::Release);
        self.owner.free.store(a.free_bytes(), Ordering::Release);
        self.owner.deferred.store(a.deferred_bytes(), Ordering::Release);
        self.owner.large_free.store(a.large_free_bytes(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every change through a guard is visible in the lock-free totals
    /// once the guard is gone, including a whole allocator swapped in.
    #[test]
    fn totals_follow_every_guard() {
        let l = AllocLock::new(Allocator::new(&[1 << 20, 1 << 20]));
        assert_eq!(l.totals(), SpaceTotals { total: 2 << 20, free: 2 << 20, deferred: 0, large_free: 0 });
        let e = {
            let mut a = l.lock();
            a.alloc_on(0, 4096, 4096, false).expect("room")
        };
        assert_eq!(l.totals().free, (2 << 20) - 4096);
        l.lock().free(e, 3, 2);
        assert_eq!(l.totals(), SpaceTotals { total: 2 << 20, free: (2 << 20) - 4096, deferred: 4096, large_free: 0 });
        *l.lock() = Allocator::new(&[8 << 20]);
        assert_eq!(l.totals(), SpaceTotals { total: 8 << 20, free: 8 << 20, deferred: 0, large_free: 8 << 20 });
    }
}
