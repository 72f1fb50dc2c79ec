//! Bookmarks: `pool/fs#name`, the guid, creation txg and creation time of
//! a snapshot of `fs`, kept after the snapshot itself is destroyed. A
//! bookmark holds no blocks and costs no space; its one use is as the base
//! of an incremental send (`tarn send -i fs#name fs@snap`), which the
//! receiver, still holding the snapshot (same guid), applies as usual.
//!
//! On disk a bookmark is a JSON [`BookmarkRecord`] in the datasets ZAP under
//! its full name (the `#` keeps it apart from datasets and snapshots); in
//! memory bookmarks have their own map, loaded with the rest by
//! [`Pool::open`]. Every change is synced before the call returns.
//!
//! A bookmark stays valid as a send base only while its snapshot is in the
//! dataset's history: a rollback to an older snapshot discards what was
//! written after that snapshot, so it destroys the bookmarks made from
//! newer snapshots (an incremental from them would miss changes). Destroying
//! a dataset destroys its bookmarks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tarn_obj::zap::Zap;
use tarn_obj::ObjsetId;
use tarn_send::{SendBase, SnapRef};

use crate::pool::{Pool, PropValue};
use crate::props::{PropDef, Source};
use crate::snapshots::validate_snapshot_name;
use crate::{DsError, Result};

/// One bookmark as stored in the datasets ZAP (`pool/fs#name` → JSON).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BookmarkRecord {
    /// The snapshot's guid (a receiver's copy of it has the same).
    pub guid: u64,
    /// The txg the snapshot was taken in (on this pool).
    pub createtxg: u64,
    /// The snapshot's creation time, Unix seconds.
    pub creation: u64,
}

fn fail(msg: String) -> DsError {
    DsError::Snapshot(msg)
}

/// `pool/fs#name`: a valid dataset name, `#`, and a name of
/// `[A-Za-z0-9_.:-]` (at most 255 bytes in all).
pub fn validate_bookmark_name(name: &str) -> Result<(String, String)> {
    let bad = |why: &str| DsError::BadName {
        name: name.to_string(),
        why: why.to_string(),
    };
    let (dataset, mark) = name
        .split_once('#')
        .ok_or_else(|| bad("a bookmark name has the form dataset#name"))?;
    crate::pool::validate_dataset_name(dataset)?;
    if mark.is_empty() {
        return Err(bad("empty bookmark name"));
    }
    if name.len() > 255 {
        return Err(bad("name is too long"));
    }
    if let Some(c) = mark
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "_.:-".contains(*c)))
    {
        return Err(bad(&format!(
            "invalid character '{c}' in the bookmark name"
        )));
    }
    Ok((dataset.to_string(), mark.to_string()))
}

/// [`Pool::open`]: one ZAP entry whose key has a `#`. Returns whether to go
/// on; a bad entry sets `error` to its key.
pub(crate) fn load_record(
    map: &mut BTreeMap<String, BookmarkRecord>,
    key: &[u8],
    value: &[u8],
    error: &mut Option<String>,
) -> bool {
    let name = std::str::from_utf8(key)
        .ok()
        .filter(|n| validate_bookmark_name(n).is_ok());
    match (name, serde_json::from_slice::<BookmarkRecord>(value)) {
        (Some(name), Ok(record)) => {
            map.insert(name.to_string(), record);
            true
        }
        _ => {
            *error = Some(String::from_utf8_lossy(key).into_owned());
            false
        }
    }
}

impl Pool {
    /// `tarn bookmark SOURCE TARGET`: `SOURCE` is a snapshot (`fs@snap`) or
    /// a bookmark (`fs#mark`, copied); `TARGET` is `fs#name` of the same
    /// dataset (or `#name`, short for it).
    pub fn bookmark(&self, source: &str, target: &str) -> Result<()> {
        let cannot = |why: String| fail(format!("cannot create bookmark '{target}': {why}"));
        let (sds, record) = if source.contains('@') {
            let (ds, _) = validate_snapshot_name(source)?;
            let r = self
                .snapshot_record(source)
                .map_err(|_| cannot(format!("snapshot '{source}' does not exist")))?;
            (
                ds,
                BookmarkRecord {
                    guid: r.guid,
                    createtxg: r.createtxg,
                    creation: r.creation,
                },
            )
        } else if source.contains('#') {
            let (ds, _) = validate_bookmark_name(source)?;
            (ds, self.bookmark_record(source)?)
        } else {
            return Err(cannot(format!(
                "the source '{source}' is not a snapshot (fs@snap) or a bookmark (fs#name)"
            )));
        };
        let full = match target.strip_prefix('#') {
            Some(short) => format!("{sds}#{short}"),
            None => target.to_string(),
        };
        let (tds, _) = validate_bookmark_name(&full)?;
        if tds != sds {
            return Err(cannot(format!(
                "a bookmark is made in the dataset of its source ('{sds}')"
            )));
        }
        let _change = self.change.lock();
        if self.state.read().bookmarks.contains_key(&full) {
            return Err(cannot("the bookmark exists".into()));
        }
        self.record(&tds)?;
        let encoded = serde_json::to_vec(&record).map_err(|e| DsError::Corrupt(e.to_string()))?;
        let tx = self.obj.begin();
        Zap::insert(
            &self.obj.mos(),
            &tx,
            self.datasets_zap,
            full.as_bytes(),
            &encoded,
        )?;
        drop(tx);
        self.obj.sync()?;
        self.state.write().bookmarks.insert(full, record);
        Ok(())
    }

    /// Bookmark names, of one dataset (oldest first, by creation txg) or of
    /// all (by dataset, then creation txg).
    pub fn bookmarks(&self, dataset: Option<&str>) -> Vec<String> {
        let state = self.state.read();
        let mut out: Vec<(&str, u64, &String)> = state
            .bookmarks
            .iter()
            .filter_map(|(n, r)| {
                let ds = n.split_once('#').map(|x| x.0)?;
                dataset
                    .is_none_or(|d| d == ds)
                    .then_some((ds, r.createtxg, n))
            })
            .collect();
        out.sort();
        out.into_iter().map(|(_, _, n)| n.clone()).collect()
    }

    pub fn bookmark_record(&self, name: &str) -> Result<BookmarkRecord> {
        self.state
            .read()
            .bookmarks
            .get(name)
            .cloned()
            .ok_or_else(|| fail(format!("bookmark '{name}' does not exist")))
    }

    /// `tarn destroy fs#name`.
    pub fn destroy_bookmark(&self, name: &str) -> Result<()> {
        validate_bookmark_name(name)?;
        let _change = self.change.lock();
        self.bookmark_record(name)?;
        self.remove_bookmarks(&[name.to_string()])
    }

    /// Removes bookmarks from the ZAP and the map (the caller holds `change`).
    fn remove_bookmarks(&self, names: &[String]) -> Result<()> {
        if names.is_empty() {
            return Ok(());
        }
        let mos = self.obj.mos();
        let tx = self.obj.begin();
        for name in names {
            Zap::remove(&mos, &tx, self.datasets_zap, name.as_bytes())?;
        }
        drop(tx);
        self.obj.sync()?;
        let mut state = self.state.write();
        for name in names {
            state.bookmarks.remove(name);
        }
        Ok(())
    }

    /// Destroying datasets destroys their bookmarks.
    pub(crate) fn destroy_bookmarks_of(&self, datasets: &[String]) -> Result<()> {
        let _change = self.change.lock();
        let names: Vec<String> = datasets
            .iter()
            .flat_map(|d| self.bookmarks(Some(d)))
            .collect();
        self.remove_bookmarks(&names)
    }

    /// After a rollback of `dataset` to the snapshot of txg `txg`: the
    /// bookmarks of newer snapshots no longer describe an ancestor of the
    /// dataset and are destroyed. The caller holds `change`.
    pub(crate) fn forget_bookmarks_after(&self, dataset: &str, txg: u64) -> Result<()> {
        let names: Vec<String> = self
            .bookmarks(Some(dataset))
            .into_iter()
            .filter(|n| self.bookmark_record(n).is_ok_and(|r| r.createtxg > txg))
            .collect();
        self.remove_bookmarks(&names)
    }

    /// The base of an incremental send named `fs@snap` or `fs#mark`.
    pub fn send_base(&self, name: &str) -> Result<SendBase> {
        if name.contains('#') {
            validate_bookmark_name(name)?;
            let r = self.bookmark_record(name)?;
            return Ok(SendBase::Bookmark {
                txg: r.createtxg,
                guid: r.guid,
            });
        }
        validate_snapshot_name(name)?;
        let r = self
            .snapshot_record(name)
            .map_err(|_| fail(format!("snapshot '{name}' does not exist")))?;
        Ok(SendBase::Snapshot(SnapRef {
            objset: ObjsetId(r.objset),
            txg: r.createtxg,
            guid: r.guid,
        }))
    }

    /// [`Pool::send_base`] for a send of snapshot `target`: `base` may be
    /// short (`@snap`, `#mark`: of `target`'s dataset). A bookmark must be
    /// of `target`'s dataset and older than it (a snapshot base is checked
    /// by the send itself, which can read its tree). Returns the full name
    /// and the base.
    pub fn send_base_for(&self, base: &str, target: &str) -> Result<(String, SendBase)> {
        let (tds, _) = validate_snapshot_name(target)?;
        let trec = self
            .snapshot_record(target)
            .map_err(|_| fail(format!("snapshot '{target}' does not exist")))?;
        let full = if base.starts_with('@') || base.starts_with('#') {
            format!("{tds}{base}")
        } else {
            base.to_string()
        };
        if !full.contains('@') && !full.contains('#') {
            return Err(fail(format!("'{base}': the base of an incremental send is a snapshot (fs@snap) or a bookmark (fs#name)")));
        }
        let sb = self.send_base(&full)?;
        if sb.is_bookmark() {
            let bds = full.split_once('#').map(|x| x.0).unwrap_or_default();
            if bds != tds {
                return Err(fail(format!("bookmark '{full}' is not of '{tds}'")));
            }
        }
        if sb.txg() >= trec.createtxg {
            return Err(fail(format!("'{full}' is not earlier than '{target}'")));
        }
        Ok((full, sb))
    }

    pub(crate) fn bookmark_property(
        &self,
        def: &PropDef,
        name: &str,
        parsable: bool,
    ) -> Result<PropValue> {
        let record = self.bookmark_record(name)?;
        let value = match def.name {
            "name" => name.to_string(),
            "type" => "bookmark".to_string(),
            "creation" => crate::time::creation_value(record.creation, parsable),
            "createtxg" => record.createtxg.to_string(),
            "guid" => record.guid.to_string(),
            // No space of its own.
            "used" | "referenced" | "logicalused" => {
                if parsable {
                    "0".to_string()
                } else {
                    crate::size::format_bytes(0)
                }
            }
            _ => "-".to_string(),
        };
        Ok(PropValue::new(def.name, value, &Source::None))
    }
}
