//! `refreservation` (issue 13; ZFS's name and meaning): space set aside
//! for a dataset's own data (not its snapshots' or descendants'). What it
//! has not used yet — the refreservation less `referenced` — counts as
//! used (`usedbyrefreservation`, part of `used` of the dataset and its
//! ancestors) and is held back from every other dataset: their
//! `available` is the pool's less the others' unused reservations, and
//! their writers are refused with ENOSPC before they would eat into it
//! (`reserved_elsewhere`, asked by the POSIX layer and the volume layer
//! before each change that adds data). A non-sparse volume gets
//! `refreservation = volsize` (volumes.rs).
//!
//! Setting one (or creating a dataset with one) larger than what the
//! dataset could still get is refused, as in ZFS.
//!
//! Writers ask before every change, so the unused reservations are
//! computed once per synced txg (`referenced` moves only when a txg is
//! written, and every change of a reservation, a dataset's name or its
//! existence syncs a txg before it returns), not by walking every
//! dataset record on each write.

use tarn_obj::ObjsetId;

use crate::pool::Pool;
use crate::size::format_bytes;
use crate::{DsError, Result};

/// The datasets with an unused reservation and how much, as of `txg`.
#[derive(Default)]
pub(crate) struct ReservationCache {
    txg: Option<u64>,
    unused: Vec<(String, u64)>,
}

impl Pool {
    /// The refreservation of head `name` (None: none).
    pub fn refreservation(&self, name: &str) -> Option<u64> {
        self.state.read().datasets.get(name).and_then(|r| r.own("refreservation")).and_then(|v| v.parse().ok())
    }

    /// The part of `name`'s refreservation its data does not use yet.
    pub fn unused_refreservation(&self, name: &str) -> u64 {
        self.refreservation(name).map_or(0, |r| r.saturating_sub(self.referenced_bytes(name)))
    }

    /// The sum of the unused reservations of the datasets `pick` takes,
    /// from the cache of the last synced txg.
    fn unused_reserved(&self, pick: impl Fn(&str) -> bool) -> u64 {
        let txg = self.obj.last_synced_txg();
        let mut cache = self.reservation_cache.lock();
        if cache.txg != Some(txg) {
            let reserving: Vec<String> =
                self.state.read().datasets.iter().filter(|(_, r)| r.own("refreservation").is_some()).map(|(n, _)| n.clone()).collect();
            cache.unused = reserving
                .into_iter()
                .filter_map(|d| {
                    let unused = self.unused_refreservation(&d);
                    (unused > 0).then_some((d, unused))
                })
                .collect();
            cache.txg = Some(txg);
        }
        cache.unused.iter().filter(|(d, _)| pick(d)).map(|(_, u)| u).sum()
    }

    /// What the other datasets' reservations hold back from `name`.
    pub fn reserved_elsewhere(&self, name: &str) -> u64 {
        self.unused_reserved(|d| d != name)
    }

    /// [`Pool::reserved_elsewhere`] of the dataset whose head is `objset`
    /// (every reservation when no dataset has that head).
    pub fn reserved_elsewhere_of(&self, objset: ObjsetId) -> u64 {
        if self.unused_reserved(|_| true) == 0 {
            return 0;
        }
        self.reserved_elsewhere(&self.name_of_objset(objset).unwrap_or_default())
    }

    /// Unused reservations of `name` and its descendants (part of `used`).
    pub(crate) fn subtree_unused_refreservation(&self, name: &str) -> u64 {
        let prefix = format!("{name}/");
        self.unused_reserved(|d| d == name || d.starts_with(&prefix))
    }

    /// Refuses a refreservation of `name` that would hold more than it
    /// could still get (`new` bytes; `name` may not exist yet: then its
    /// parent's available space is what it could get).
    pub(crate) fn check_refreservation(&self, name: &str, new: u64) -> Result<()> {
        let exists = self.exists(name);
        let referenced = if exists { self.referenced_bytes(name) } else { 0 };
        let wanted = new.saturating_sub(referenced);
        let held = if exists { self.unused_refreservation(name) } else { 0 };
        let basis = if exists { name } else { crate::props::parent_name(name).unwrap_or(name) };
        // A new dataset cannot use its parent's reservation (it is for the
        // parent's own data).
        let available = if exists { self.available_bytes(name) } else { self.available_bytes(basis).saturating_sub(self.unused_refreservation(basis)) };
        if wanted > held + available {
            return Err(DsError::BadValue(format!(
                "refreservation of {} does not fit: '{name}' can get {} more (out of space)",
                format_bytes(new),
                format_bytes(held + available)
            )));
        }
        Ok(())
    }
}
