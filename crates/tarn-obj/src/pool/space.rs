//! Space and dirty-data counters as users and the write throttle see them.

use std::sync::atomic::Ordering;

use super::ObjPool;
use crate::*;

impl ObjPool {
    /// Space as users see it: frees waiting out the defer window count as
    /// free (they are reusable within a few txgs); `available` leaves out
    /// the slop.
    pub fn space(&self) -> PoolSpace {
        self.shared.space()
    }

    /// `raw` bytes of pool space expressed as space users can fill.
    pub fn deflate(&self, raw: u64) -> u64 {
        let (n, d) = crate::space::deflate_ratio(&self.shared.config.lock());
        ((raw as u128 * n as u128) / d.max(1) as u128) as u64
    }

    /// Bytes of dirty blocks not yet written out (the write throttle also
    /// counts [`ObjPool::log_pending_bytes`]).
    pub fn dirty_bytes(&self) -> u64 {
        self.shared.dirty_bytes.load(Ordering::Relaxed)
    }

    /// Bytes of intent log records waiting for a commit or for their txg.
    pub fn log_pending_bytes(&self) -> u64 {
        self.shared.logs.pending_bytes()
    }

    /// Blocks written as gang blocks since import.
    pub fn gang_blocks(&self) -> u64 {
        self.shared.io.gang_blocks.load(Ordering::Relaxed)
    }

    /// ENOSPC answers of the space checks since import: inside a txg
    /// (`check_space`), by a writer reserving ahead when nothing pending
    /// could make room, and by one that waited every txg it may wait.
    /// Tests print them when a fill stops short.
    pub fn nospace_refusals(&self) -> crate::NoSpaceRefusals {
        self.shared.nospace_refusals()
    }

    /// Raw space the changes not yet written out may take (worst case).
    pub fn dirty_asize(&self) -> u64 {
        self.shared.dirty_asize.load(Ordering::Relaxed)
    }
}
