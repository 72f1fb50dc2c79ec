//! Pool state every change reads, readable without a lock: the tunables
//! (one atomic per field) and the suspension (an atomic flag in front of
//! the reason). Writers on many threads read these on every write; a
//! pool-wide mutex here made them queue behind each other.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::Tunables;

/// `Tunables`, a field per atomic. A reader racing a `store` may see some
/// fields of the old value and some of the new, each field whole: every
/// field is used on its own.
pub(crate) struct TunableCell {
    arc_max: AtomicU64,
    arc_min: AtomicU64,
    dirty_data_max: AtomicU64,
    dirty_data_sync_percent: AtomicU64,
    txg_timeout_ms: AtomicU64,
    scan_mem_max: AtomicU64,
    scan_rate_max: AtomicU64,
    l2arc_write_max: AtomicU64,
    l2arc_write_boost: AtomicU64,
}

impl TunableCell {
    pub fn new(t: Tunables) -> TunableCell {
        let c = TunableCell {
            arc_max: AtomicU64::new(0),
            arc_min: AtomicU64::new(0),
            dirty_data_max: AtomicU64::new(0),
            dirty_data_sync_percent: AtomicU64::new(0),
            txg_timeout_ms: AtomicU64::new(0),
            scan_mem_max: AtomicU64::new(0),
            scan_rate_max: AtomicU64::new(0),
            l2arc_write_max: AtomicU64::new(0),
            l2arc_write_boost: AtomicU64::new(0),
        };
        c.store(t);
        c
    }

    pub fn load(&self) -> Tunables {
        Tunables {
            arc_max: self.arc_max.load(Ordering::Relaxed),
            arc_min: self.arc_min.load(Ordering::Relaxed),
            dirty_data_max: self.dirty_data_max.load(Ordering::Relaxed),
            dirty_data_sync_percent: self.dirty_data_sync_percent.load(Ordering::Relaxed),
            txg_timeout_ms: self.txg_timeout_ms.load(Ordering::Relaxed),
            scan_mem_max: self.scan_mem_max.load(Ordering::Relaxed),
            scan_rate_max: self.scan_rate_max.load(Ordering::Relaxed),
            l2arc_write_max: self.l2arc_write_max.load(Ordering::Relaxed),
            l2arc_write_boost: self.l2arc_write_boost.load(Ordering::Relaxed),
        }
    }

    /// Stores `t`; returns what was there.
    pub fn store(&self, t: Tunables) -> Tunables {
        let old = self.load();
        self.arc_max.store(t.arc_max, Ordering::Relaxed);
        self.arc_min.store(t.arc_min, Ordering::Relaxed);
        self.dirty_data_max.store(t.dirty_data_max, Ordering::Relaxed);
        self.dirty_data_sync_percent.store(t.dirty_data_sync_percent, Ordering::Relaxed);
        self.txg_timeout_ms.store(t.txg_timeout_ms, Ordering::Relaxed);
        self.scan_mem_max.store(t.scan_mem_max, Ordering::Relaxed);
        self.scan_rate_max.store(t.scan_rate_max, Ordering::Relaxed);
        self.l2arc_write_max.store(t.l2arc_write_max, Ordering::Relaxed);
        self.l2arc_write_boost.store(t.l2arc_write_boost, Ordering::Relaxed);
        old
    }

    pub fn dirty_data_max(&self) -> u64 {
        self.dirty_data_max.load(Ordering::Relaxed)
    }

    /// Bytes of changes not yet written that start a txg sync.
    pub fn dirty_sync_bytes(&self) -> u64 {
        let pct = self.dirty_data_sync_percent.load(Ordering::Relaxed).clamp(1, 100);
        self.dirty_data_max() / 100 * pct
    }

    pub fn txg_timeout_ms(&self) -> u64 {
        self.txg_timeout_ms.load(Ordering::Relaxed)
    }
}

/// Whether the pool is suspended (a txg could not be written) and why.
/// Once set it stays set: the pool is exported, never resumed in place.
#[derive(Default)]
pub(crate) struct Suspension {
    set: AtomicBool,
    why: Mutex<Option<String>>,
}

impl Suspension {
    pub fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    /// Why, if suspended.
    pub fn why(&self) -> Option<String> {
        if !self.is_set() {
            return None;
        }
        self.why.lock().clone()
    }

    pub fn suspend(&self, why: String) {
        *self.why.lock() = Some(why);
        self.set.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tunables_round_trip_and_suspension_carries_its_reason() {
        let t = Tunables { arc_max: 1, arc_min: 2, dirty_data_max: 3, dirty_data_sync_percent: 9, txg_timeout_ms: 4, scan_mem_max: 5, scan_rate_max: 6, l2arc_write_max: 7, l2arc_write_boost: 8 };
        let c = TunableCell::new(Tunables::default());
        let old = c.store(t);
        assert_eq!(old.dirty_data_max, Tunables::default().dirty_data_max);
        let back = c.load();
        assert_eq!(
            (back.arc_max, back.arc_min, back.dirty_data_max, back.txg_timeout_ms, back.scan_mem_max, back.scan_rate_max, back.l2arc_write_max, back.l2arc_write_boost),
            (1, 2, 3, 4, 5, 6, 7, 8)
        );
        assert_eq!(back.dirty_data_sync_percent, 9);
        assert_eq!((c.dirty_data_max(), c.txg_timeout_ms()), (3, 4));
        let s = Suspension::default();
        assert!(!s.is_set() && s.why().is_none());
        s.suspend("txg 7 failed".into());
        assert!(s.is_set());
        assert_eq!(s.why().as_deref(), Some("txg 7 failed"));
    }
}
