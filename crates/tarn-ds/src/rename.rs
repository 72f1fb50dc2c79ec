//! Renaming datasets and snapshots (`zfs rename`).
//!
//! Names live only in the datasets ZAP (name → record) and in the records
//! of clones (`origin`); object sets are found by id. A rename re-keys
//! every record under the old name — the dataset, its descendants, their
//! snapshots and bookmarks — and rewrites the `origin` of every clone of a
//! renamed snapshot, all in one txg, synced before the call returns. Snapshot
//! guids, holds and space are untouched, so incremental sends keep working
//! across a rename, as in ZFS.

use std::collections::BTreeMap;

use tarn_obj::zap::Zap;

use crate::pool::{validate_dataset_name, DatasetRecord, InitObjset, Pool};
use crate::props::parent_name;
use crate::snapshots::validate_snapshot_name;
use crate::{DsError, Result};

fn rename_err(msg: String) -> DsError {
    DsError::Snapshot(msg)
}

/// `name` with the prefix `old` replaced by `new` (`old` names a dataset:
/// the prefix ends at `/`, `@`, `#` or the end).
fn moved(name: &str, old: &str, new: &str) -> Option<String> {
    let rest = name.strip_prefix(old)?;
    (rest.is_empty() || rest.starts_with(['/', '@', '#'])).then(|| format!("{new}{rest}"))
}

/// The records one rename rewrites, with their new keys.
#[derive(Default)]
struct Rekey {
    datasets: Vec<(String, String, DatasetRecord)>,
    snapshots: Vec<(String, String, DatasetRecord)>,
    bookmarks: Vec<(String, String, crate::bookmarks::BookmarkRecord)>,
    /// Clones whose origin was renamed (name, record with the new origin);
    /// a clone renamed itself is updated in `datasets`.
    origins: Vec<(String, DatasetRecord)>,
}

impl Pool {
    /// Renames dataset `old` — with its descendants, snapshots and
    /// bookmarks — to `new` in the same pool. With `parents`, missing
    /// ancestors of `new` are created first (`init` lays them out).
    /// Returns the (old, new) names of every renamed dataset, parents
    /// first; the caller unmounts them before and mounts them after.
    pub fn rename_dataset(&self, old: &str, new: &str, parents: bool, init: InitObjset) -> Result<Vec<(String, String)>> {
        let fail = |why: String| rename_err(format!("cannot rename '{old}': {why}"));
        validate_dataset_name(new)?;
        if !self.exists(old) {
            return Err(DsError::NotFound(old.to_string()));
        }
        let pool = self.name();
        if parent_name(old).is_none() {
            return Err(fail("the pool's root dataset cannot be renamed (export and import the pool under another name)".into()));
        }
        if new.split('/').next() != Some(pool.as_str()) || parent_name(new).is_none() {
            return Err(fail(format!("'{new}' is not a dataset below pool '{pool}' (datasets stay in their pool)")));
        }
        if new == old {
            return Err(fail("the new name is the old one".into()));
        }
        if moved(new, old, "").is_some() {
            return Err(fail(format!("'{new}' is inside '{old}' (a dataset cannot become its own descendant)")));
        }
        if self.exists(new) {
            return Err(fail(format!("dataset '{new}' already exists")));
        }
        let parent = parent_name(new).unwrap_or(&pool).to_string();
        if !self.exists(&parent) {
            if !parents {
                return Err(fail(format!("parent '{parent}' does not exist (use -p to create it)")));
            }
            self.create_dataset(&parent, &[], true, init)?;
        }
        let _change = self.change.lock();
        let subtree = self.subtree(old);
        if let Some(busy) = subtree.iter().find(|d| self.record(d).is_ok_and(|r| r.recv.is_some())) {
            return Err(fail(format!("'{busy}' holds a partially received stream (resume it or abort it with 'tarn recv -A')")));
        }
        let rekey = self.rekey(|name| moved(name, old, new), &subtree)?;
        self.apply_rekey(&rekey)?;
        Ok(rekey.datasets.iter().map(|(o, n, _)| (o.clone(), n.clone())).collect())
    }

    /// Renames snapshot `old` (`fs@a`) to `fs@new_short`; with `recursive`,
    /// the snapshot of that name of every descendant of `fs` too (those
    /// without one are skipped). Returns the (old, new) names renamed.
    pub fn rename_snapshot(&self, old: &str, new_short: &str, recursive: bool) -> Result<Vec<(String, String)>> {
        let (dataset, short) = validate_snapshot_name(old)?;
        validate_snapshot_name(&format!("{dataset}@{new_short}"))?;
        let fail = |why: String| rename_err(format!("cannot rename '{old}': {why}"));
        let _change = self.change.lock();
        if self.snapshot_record(old).is_err() {
            return Err(DsError::NotFound(old.to_string()));
        }
        let datasets = if recursive { self.subtree(&dataset) } else { vec![dataset.clone()] };
        let mut pairs: BTreeMap<String, String> = BTreeMap::new();
        for d in &datasets {
            let from = format!("{d}@{short}");
            if self.snapshot_record(&from).is_err() {
                continue;
            }
            let to = format!("{d}@{new_short}");
            if self.snapshot_record(&to).is_ok() {
                return Err(fail(format!("snapshot '{to}' already exists")));
            }
            pairs.insert(from, to);
        }
        let rekey = self.rekey(|name| pairs.get(name).cloned(), &[])?;
        self.apply_rekey(&rekey)?;
        Ok(rekey.snapshots.iter().map(|(o, n, _)| (o.clone(), n.clone())).collect())
    }

    /// Collects the records `rename` (old name → new name, None: unchanged)
    /// moves: the datasets in `datasets`, every snapshot and bookmark it
    /// renames, and the clones whose origin it renames.
    fn rekey(&self, rename: impl Fn(&str) -> Option<String>, datasets: &[String]) -> Result<Rekey> {
        let state = self.state.read();
        let mut out = Rekey::default();
        for name in datasets {
            let record = state.datasets.get(name).ok_or_else(|| DsError::NotFound(name.clone()))?;
            if let Some(to) = rename(name) {
                out.datasets.push((name.clone(), to, record.clone()));
            }
        }
        for (name, record) in &state.snapshots {
            if let Some(to) = rename(name) {
                if self.sending.lock().contains_key(name) {
                    return Err(rename_err(format!("cannot rename '{name}': it is being sent; try again when the send is done")));
                }
                out.snapshots.push((name.clone(), to, record.clone()));
            }
        }
        for (name, record) in &state.bookmarks {
            if let Some(to) = rename(name) {
                out.bookmarks.push((name.clone(), to, record.clone()));
            }
        }
        // Clones of a renamed snapshot follow it.
        for entry in out.datasets.iter_mut() {
            if let Some(origin) = entry.2.origin.as_deref().and_then(&rename) {
                entry.2.origin = Some(origin);
            }
        }
        for (name, record) in &state.datasets {
            if out.datasets.iter().any(|(o, _, _)| o == name) {
                continue;
            }
            if let Some(origin) = record.origin.as_deref().and_then(&rename) {
                let mut record = record.clone();
                record.origin = Some(origin);
                out.origins.push((name.clone(), record));
            }
        }
        Ok(out)
    }

    fn apply_rekey(&self, rekey: &Rekey) -> Result<()> {
        let mos = self.obj.mos();
        let encode = |r: &DatasetRecord| serde_json::to_vec(r).map_err(|e| DsError::Corrupt(e.to_string()));
        let tx = self.obj.begin();
        for (old, new, record) in rekey.datasets.iter().chain(&rekey.snapshots) {
            Zap::remove(&mos, &tx, self.datasets_zap, old.as_bytes())?;
            Zap::insert(&mos, &tx, self.datasets_zap, new.as_bytes(), &encode(record)?)?;
        }
        for (old, new, record) in &rekey.bookmarks {
            let bytes = serde_json::to_vec(record).map_err(|e| DsError::Corrupt(e.to_string()))?;
            Zap::remove(&mos, &tx, self.datasets_zap, old.as_bytes())?;
            Zap::insert(&mos, &tx, self.datasets_zap, new.as_bytes(), &bytes)?;
        }
        for (name, record) in &rekey.origins {
            Zap::update(&mos, &tx, self.datasets_zap, name.as_bytes(), &encode(record)?)?;
        }
        drop(tx);
        self.obj.sync()?;
        let mut state = self.state.write();
        for (old, new, record) in &rekey.datasets {
            state.datasets.remove(old);
            state.datasets.insert(new.clone(), record.clone());
            if let Some(os) = state.objsets.remove(old) {
                state.objsets.insert(new.clone(), os);
            }
        }
        for (old, new, record) in &rekey.snapshots {
            state.snapshots.remove(old);
            state.snapshots.insert(new.clone(), record.clone());
        }
        for (old, new, record) in &rekey.bookmarks {
            state.bookmarks.remove(old);
            state.bookmarks.insert(new.clone(), record.clone());
        }
        for (name, record) in &rekey.origins {
            state.datasets.insert(name.clone(), record.clone());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::moved;

    #[test]
    fn prefixes_end_at_a_name_boundary() {
        assert_eq!(moved("tank/a", "tank/a", "tank/b").as_deref(), Some("tank/b"));
        assert_eq!(moved("tank/a/x@s", "tank/a", "tank/b").as_deref(), Some("tank/b/x@s"));
        assert_eq!(moved("tank/a#m", "tank/a", "tank/b").as_deref(), Some("tank/b#m"));
        assert_eq!(moved("tank/ab", "tank/a", "tank/b"), None);
        assert_eq!(moved("tank", "tank/a", "tank/b"), None);
    }
}
