//! The txg switch: opening transactions (with the write throttle) and
//! waiting for a txg to reach disk.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::{ObjPool, Shared};
use crate::*;

impl Shared {
    /// While the pool is suspended, new changes wait (`failmode=wait`, the
    /// default, until the pool is cleared or exported) or fail at once
    /// (`failmode=continue`).
    pub fn check_suspended(&self) -> Result<()> {
        loop {
            let Some(m) = self.suspended.why() else { return Ok(()) };
            let wait = self.failmode_wait.load(Ordering::Relaxed);
            if !wait || self.shutdown.load(Ordering::Relaxed) {
                return Err(ObjError::Io(m));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Ask the sync thread to sync up to `txg` (0: whatever is open).
    pub(crate) fn kick(&self, txg: Txg) {
        let mut s = self.cv_lock.lock();
        let want = if txg == 0 { self.open_txg.load(Ordering::Relaxed) } else { txg };
        if want > s.wanted {
            s.wanted = want;
        }
        self.cv_sync.notify_all();
    }
}

impl ObjPool {
    /// Open a transaction in the open txg (may wait: write throttle).
    pub fn begin(&self) -> Tx {
        begin_tx(&self.shared)
    }

    /// Sync the open txg now and wait until it is on disk.
    pub fn sync(&self) -> Result<Txg> {
        sync_and_wait(&self.shared)
    }
}

/// From this share of `dirty_data_max` on, every new transaction is
/// delayed, the more the closer to the cap; at the cap it waits for a sync.
pub(crate) const DELAY_DIRTY_PERCENT: u64 = 60;

/// Open a transaction in the open txg (may wait: write throttle).
pub(crate) fn begin_tx(s: &Arc<Shared>) -> Tx {
    s.client_ops.fetch_add(1, Ordering::Relaxed);
    let max = s.tunables.dirty_data_max().max(1 << 20);
    let mut waited = 0;
    // A txg never grows past the space it can be written to.
    let mut waited_for_space = 0;
    while s.space_full() && waited_for_space < 100 && !s.shutdown.load(Ordering::Relaxed) && !s.suspended.is_set() {
        let target = s.open_txg.load(Ordering::Acquire);
        s.kick(target);
        let mut g = s.cv_lock.lock();
        if s.synced_txg.load(Ordering::Acquire) < target {
            s.cv_done.wait_for(&mut g, Duration::from_millis(100));
        }
        waited_for_space += 1;
    }
    let delay_from = max / 100 * DELAY_DIRTY_PERCENT;
    loop {
        let dirty = s.dirty_total();
        if dirty < delay_from || s.shutdown.load(Ordering::Relaxed) || s.suspended.is_set() {
            break;
        }
        s.behind.store(true, Ordering::Relaxed);
        s.kick(0);
        if dirty >= max {
            let mut g = s.cv_lock.lock();
            s.cv_done.wait_for(&mut g, Duration::from_millis(10));
        } else {
            // Smooth delay growing as dirty data approaches the cap.
            let frac = (dirty - delay_from) as f64 / (max - delay_from).max(1) as f64;
            std::thread::sleep(Duration::from_micros((10.0 + 990.0 * frac * frac) as u64));
            break;
        }
        waited += 1;
        if waited > 6000 {
            break;
        }
    }
    let guard = s.txg_lock.read_arc();
    Tx { txg: s.open_txg.load(Ordering::Acquire), _hold: Some(guard), redo: None }
}

pub(crate) use tarn_block::DEFER_TXGS;

/// Syncs the open txg and waits until it is on disk (a no-op on a
/// read-only pool). Never call it while holding a `Tx`.
pub(crate) fn sync_and_wait(s: &Arc<Shared>) -> Result<Txg> {
    if s.readonly {
        return Ok(s.synced_txg.load(Ordering::Acquire));
    }
    let target = s.open_txg.load(Ordering::Acquire);
    s.kick(target);
    let mut g = s.cv_lock.lock();
    loop {
        if s.synced_txg.load(Ordering::Acquire) >= target {
            return Ok(target);
        }
        if let Some(e) = s.last_error.lock().clone() {
            return Err(ObjError::Io(e));
        }
        if s.shutdown.load(Ordering::Relaxed) {
            return Err(ObjError::Io("pool is shutting down".into()));
        }
        s.cv_done.wait_for(&mut g, Duration::from_millis(100));
    }
}
