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

use tarn_obj::ObjsetId;

use crate::pool::Pool;
use crate::size::format_bytes;
use crate::{DsError, Result};

impl Pool {
    /// The refreservation of head `name` (None: none).
    pub fn refreservation(&self, name: &str) -> Option<u64> {
        self.state.read().datasets.get(name).and_then(|r| r.props.get("refreservation")).and_then(|v| v.parse().ok())
    }

    /// The part of `name`'s refreservation its data does not use yet.
    pub fn unused_refreservation(&self, name: &str) -> u64 {
        self.refreservation(name).map_or(0, |r| r.saturating_sub(self.referenced_bytes(name)))
    }

    /// Datasets with a refreservation.
    fn reserving(&self) -> Vec<String> {
        self.state.read().datasets.iter().filter(|(_, r)| r.props.contains_key("refreservation")).map(|(n, _)| n.clone()).collect()
    }

    /// What the other datasets' reservations hold back from `name`.
    pub fn reserved_elsewhere(&self, name: &str) -> u64 {
        self.reserving().iter().filter(|d| d.as_str() != name).map(|d| self.unused_refreservation(d)).sum()
    }

    /// [`Pool::reserved_elsewhere`] of the dataset whose head is `objset`
    /// (every reservation when no dataset has that head).
    pub fn reserved_elsewhere_of(&self, objset: ObjsetId) -> u64 {
        let reserving = self.reserving();
        if reserving.is_empty() {
            return 0;
        }
        let name = self.state.read().datasets.iter().find(|(_, r)| r.objset == objset.0).map(|(n, _)| n.clone()).unwrap_or_default();
        self.reserved_elsewhere(&name)
    }

    /// Unused reservations of `name` and its descendants (part of `used`).
    pub(crate) fn subtree_unused_refreservation(&self, name: &str) -> u64 {
        let prefix = format!("{name}/");
        self.reserving().iter().filter(|d| d.as_str() == name || d.starts_with(&prefix)).map(|d| self.unused_refreservation(d)).sum()
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
