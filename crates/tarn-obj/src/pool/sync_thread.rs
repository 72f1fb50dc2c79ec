//! The sync thread: wakes on `txg_timeout`, a kick (fsync, dirty data,
//! the throttle) or shutdown, quiesces the open txg and syncs it; a failed
//! sync suspends the pool.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::Shared;
use crate::*;

pub(super) fn sync_thread(weak: Weak<Shared>) {
    loop {
        let Some(s) = weak.upgrade() else { return };
        if s.shutdown.load(Ordering::Relaxed) {
            return;
        }
        let timeout = Duration::from_millis(s.tunables.txg_timeout_ms().max(10));
        let deadline = Instant::now() + timeout;
        {
            let mut g = s.cv_lock.lock();
            while !s.shutdown.load(Ordering::Relaxed) && g.wanted < s.open_txg.load(Ordering::Acquire) && Instant::now() < deadline {
                s.cv_sync.wait_until(&mut g, deadline);
            }
        }
        if s.shutdown.load(Ordering::Relaxed) {
            return;
        }
        let has_work = !s.dirty_objsets.lock().is_empty() || s.cv_lock.lock().wanted >= s.open_txg.load(Ordering::Acquire);
        if !has_work {
            continue;
        }
        if s.suspended.is_set() {
            let mut g = s.cv_lock.lock();
            s.cv_done.notify_all();
            s.cv_sync.wait_for(&mut g, Duration::from_millis(500));
            continue;
        }
        let result = sync_once(&s);
        match result {
            Ok(_) => {
                *s.last_error.lock() = None;
                // Writers were delayed during this sync: go on with the next
                // txg at once while the sync trigger is still passed, so a
                // writer faster than the disks meets a sync running all the
                // time, not one waiting for the next trigger while the
                // writer runs unthrottled.
                if s.behind.swap(false, Ordering::Relaxed) && s.dirty_total() > s.tunables.dirty_sync_bytes() {
                    s.kick(0);
                }
            }
            Err(e) => {
                let msg = format!("pool '{}' suspended: txg sync failed: {e}", s.config.lock().name);
                eprintln!("tarn: {msg}");
                *s.last_error.lock() = Some(msg.clone());
                s.suspended.suspend(msg);
            }
        }
        let _g = s.cv_lock.lock();
        s.cv_done.notify_all();
    }
}

/// Quiesce the open txg and write it out. Returns the synced txg.
pub(crate) fn sync_once(s: &Arc<Shared>) -> Result<Txg> {
    let sync_lock = s.sync_lock.lock();
    let txg = {
        let _w = s.txg_lock.write();
        let t = s.open_txg.load(Ordering::Acquire);
        s.open_txg.store(t + 1, Ordering::Release);
        // Before the next txg takes any charge (space.rs, `sync_credit`).
        s.sync_space_begin();
        t
    };
    // On failure the caller suspends the pool; nothing of this txg is on disk.
    let stx = super::SyncTx::begin(s, &sync_lock, txg);
    super::syncing::sync_txg(s, &stx)
}
