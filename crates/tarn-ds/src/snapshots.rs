//! Snapshots of datasets: names (`pool/fs@snap`), records, destroy (one,
//! a range `@a%c`), rollback, holds, and their space accounting.
//!
//! A snapshot's record lives in the datasets ZAP under its full name, like
//! a dataset's; in memory snapshots are kept apart from datasets so every
//! user of the dataset list (mounts, listings) sees file systems only. The
//! object layer does the real work (`tarn_obj::snap`): this layer keeps the
//! order of each dataset's snapshots (by creation txg), which tells the
//! object layer a snapshot's neighbours when one is destroyed.

use tarn_obj::zap::Zap;
use tarn_obj::{ObjectSet, ObjsetId};

use crate::pool::{DatasetRecord, Pool, PropValue, State};
use crate::props::{PropDef, Source};
use crate::size::format_bytes;
use crate::{DsError, Result};

/// `pool/fs@name`: a valid dataset name, `@`, and a name of
/// `[A-Za-z0-9_.:-]` (at most 255 bytes in all).
pub fn validate_snapshot_name(name: &str) -> Result<(String, String)> {
    let bad = |why: &str| DsError::BadName { name: name.to_string(), why: why.to_string() };
    let (dataset, snap) = name.split_once('@').ok_or_else(|| bad("a snapshot name has the form dataset@name"))?;
    crate::pool::validate_dataset_name(dataset)?;
    if snap.is_empty() {
        return Err(bad("empty snapshot name"));
    }
    if name.len() > 255 {
        return Err(bad("name is too long"));
    }
    if let Some(c) = snap.chars().find(|c| !(c.is_ascii_alphanumeric() || "_.:-".contains(*c))) {
        return Err(bad(&format!("invalid character '{c}' in the snapshot name")));
    }
    Ok((dataset.to_string(), snap.to_string()))
}

fn snap_err(msg: String) -> DsError {
    DsError::Snapshot(msg)
}

impl Pool {
    /// Takes the snapshots named (`fs@snap`, several datasets at once for
    /// `-r`) atomically: all in one txg, consistent with every write
    /// acknowledged before the call.
    pub fn snapshot(&self, names: &[String]) -> Result<()> {
        let _change = self.change.lock();
        let mut planned = Vec::new();
        for name in names {
            let (dataset, _) = validate_snapshot_name(name)?;
            let record = self.record(&dataset)?;
            if self.state.read().snapshots.contains_key(name) {
                return Err(snap_err(format!("cannot create snapshot '{name}': dataset already exists")));
            }
            if planned.iter().any(|(n, _)| n == name) {
                return Err(snap_err(format!("cannot create snapshot '{name}': named twice")));
            }
            planned.push((name.clone(), record.objset));
        }
        let mos = self.obj.mos();
        let tx = self.obj.begin();
        let mut made = Vec::new();
        for (name, head) in &planned {
            let sid = self.obj.snapshot(&tx, ObjsetId(*head))?;
            let record = DatasetRecord {
                objset: sid.0,
                guid: crate::pool::new_guid(),
                creation: crate::pool::now_unix(),
                createtxg: tx.txg(),
                props: Default::default(),
                volume: self.volume_of(name.split('@').next().unwrap_or_default()),
                ..Default::default()
            };
            let encoded = serde_json::to_vec(&record).map_err(|e| DsError::Corrupt(e.to_string()))?;
            Zap::insert(&mos, &tx, self.datasets_zap, name.as_bytes(), &encoded)?;
            made.push((name.clone(), record));
        }
        drop(tx);
        self.obj.sync()?;
        let mut state = self.state.write();
        for (name, record) in made {
            state.snapshots.insert(name, record);
        }
        Ok(())
    }

    /// Snapshot names, of one dataset (oldest first) or of all.
    pub fn snapshots(&self, dataset: Option<&str>) -> Vec<String> {
        let state = self.state.read();
        let mut out: Vec<(&String, &DatasetRecord)> = match dataset {
            Some(d) => Self::chain_of(&state, d).collect(),
            None => state.snapshots.iter().collect(),
        };
        out.sort_by(|a, b| {
            let da = a.0.split_once('@').map(|x| x.0);
            let db = b.0.split_once('@').map(|x| x.0);
            da.cmp(&db).then(a.1.createtxg.cmp(&b.1.createtxg))
        });
        out.into_iter().map(|(n, _)| n.clone()).collect()
    }

    /// The snapshots of `dataset` (by name: a range of the map, whatever
    /// the pool's other snapshots).
    fn chain_of<'a>(state: &'a State, dataset: &str) -> impl Iterator<Item = (&'a String, &'a DatasetRecord)> + 'a {
        let prefix = format!("{dataset}@");
        state.snapshots.range(prefix.clone()..).take_while(move |(n, _)| n.starts_with(&prefix))
    }

    pub fn snapshot_record(&self, name: &str) -> Result<DatasetRecord> {
        self.state.read().snapshots.get(name).cloned().ok_or_else(|| DsError::NotFound(name.to_string()))
    }

    /// A read-only view of a snapshot's object set (`.zfs/snapshot`).
    pub fn snapshot_objset(&self, name: &str) -> Result<ObjectSet> {
        let record = self.snapshot_record(name)?;
        let os = self.obj.open_objset(ObjsetId(record.objset))?;
        os.mark_readonly();
        Ok(os)
    }

    /// The neighbours of a snapshot: (txg of the previous one or 0, object
    /// set of the next one or of the dataset). One pass over the dataset's
    /// snapshots, no copies: listing every snapshot's `used` asks this of
    /// each.
    fn neighbours(&self, name: &str) -> Result<(u64, ObjsetId)> {
        let (dataset, _) = validate_snapshot_name(name)?;
        let (prev, next) = {
            let state = self.state.read();
            let me = state.snapshots.get(name).ok_or_else(|| DsError::NotFound(name.to_string()))?;
            // Ordered by creation txg, then name (as `snapshots` orders them).
            let mine = (me.createtxg, name);
            let mut prev: Option<(u64, &str)> = None;
            let mut next: Option<((u64, &str), u64)> = None;
            for (n, r) in Self::chain_of(&state, &dataset) {
                let k = (r.createtxg, n.as_str());
                if k < mine {
                    if prev.is_none_or(|p| p < k) {
                        prev = Some(k);
                    }
                } else if k > mine && next.is_none_or(|(q, _)| k < q) {
                    next = Some((k, r.objset));
                }
            }
            (prev.map(|p| p.0), next.map(|n| n.1))
        };
        // A clone's chain starts at its origin.
        let prev_txg = match prev {
            Some(txg) => txg,
            None => self.origin_txg(&dataset),
        };
        let next = match next {
            Some(objset) => objset,
            None => self.record(&dataset)?.objset,
        };
        Ok((prev_txg, ObjsetId(next)))
    }

    /// Destroys one snapshot; it frees exactly what only it held. Refused
    /// while it has holds (unless `ignore_holds`, for recursive destroys
    /// of whole datasets, as zfs does not — a held snapshot stops those too).
    pub fn destroy_snapshot(&self, name: &str, ignore_holds: bool) -> Result<()> {
        let _change = self.change.lock();
        let record = self.snapshot_record(name)?;
        if self.sending.lock().get(name).is_some_and(|n| *n > 0) {
            return Err(snap_err(format!("cannot destroy snapshot '{name}': it is being sent")));
        }
        if !record.holds.is_empty() && !ignore_holds {
            return Err(snap_err(format!(
                "cannot destroy snapshot '{name}': it is held ({}); release with 'tarn release'",
                record.holds.join(", ")
            )));
        }
        self.check_no_clones(name)?;
        let (prev_txg, next) = self.neighbours(name)?;
        let tx = self.obj.begin();
        self.obj.destroy_snapshot(&tx, ObjsetId(record.objset), prev_txg, next)?;
        Zap::remove(&self.obj.mos(), &tx, self.datasets_zap, name.as_bytes())?;
        drop(tx);
        self.obj.sync()?;
        self.state.write().snapshots.remove(name);
        Ok(())
    }

    /// `fs@a%c`: the snapshots of `fs` from `a` to `c` inclusive (either
    /// end may be empty: from the first / to the last); `fs@a` alone: `a`.
    pub fn expand_snapshot_spec(&self, spec: &str) -> Result<Vec<String>> {
        let (dataset, range) = spec.split_once('@').ok_or_else(|| snap_err(format!("'{spec}' is not a snapshot")))?;
        let Some((from, to)) = range.split_once('%') else {
            validate_snapshot_name(spec)?;
            self.snapshot_record(spec)?;
            return Ok(vec![spec.to_string()]);
        };
        let chain = self.snapshots(Some(dataset));
        let index = |part: &str| -> Result<Option<usize>> {
            if part.is_empty() {
                return Ok(None);
            }
            let full = format!("{dataset}@{part}");
            chain.iter().position(|n| *n == full).map(Some).ok_or(DsError::NotFound(full))
        };
        let start = index(from)?.unwrap_or(0);
        let end = match index(to)? {
            Some(e) => e,
            None => chain.len().saturating_sub(1),
        };
        if chain.is_empty() || start > end {
            return Err(snap_err(format!("'{spec}' names no snapshots (the range runs oldest to newest)")));
        }
        Ok(chain.get(start..=end).map(|s| s.to_vec()).unwrap_or_default())
    }

    /// Rolls `dataset@snap`'s dataset back to it. Later snapshots must be
    /// destroyed (`destroy_later`, zfs's -r) first. The caller unmounts the
    /// dataset before and mounts it after. Returns the snapshots destroyed.
    pub fn rollback(&self, name: &str, destroy_later: bool) -> Result<Vec<String>> {
        let (dataset, _) = validate_snapshot_name(name)?;
        let target = self.snapshot_record(name)?;
        let chain = self.snapshots(Some(&dataset));
        let later: Vec<String> =
            chain.iter().filter(|n| self.snapshot_record(n).is_ok_and(|r| r.createtxg > target.createtxg)).cloned().collect();
        if !later.is_empty() && !destroy_later {
            return Err(snap_err(format!(
                "cannot rollback to '{name}': more recent snapshots exist ({}); use -r to destroy them",
                later.join(", ")
            )));
        }
        for snap in &later {
            if let Some(why) = self.clones_reason(snap) {
                return Err(snap_err(format!("cannot rollback to '{name}': more recent snapshot '{snap}': {why}")));
            }
        }
        for snap in later.iter().rev() {
            self.destroy_snapshot(snap, false)?;
        }
        let _change = self.change.lock();
        let head = ObjsetId(self.record(&dataset)?.objset);
        // Everything written so far reaches the tree being discarded first.
        self.obj.sync()?;
        let tx = self.obj.begin();
        self.obj.rollback(&tx, head, ObjsetId(target.objset))?;
        drop(tx);
        self.obj.sync()?;
        let os = self.obj.open_objset(head)?;
        self.state.write().objsets.insert(dataset.clone(), os);
        self.reapply_write_props(&dataset)?;
        self.forget_bookmarks_after(&dataset, target.createtxg)?;
        Ok(later)
    }

    /// `tarn hold TAG snap` / `tarn release TAG snap`.
    pub fn hold(&self, name: &str, tag: &str, add: bool) -> Result<()> {
        let _change = self.change.lock();
        let mut record = self.snapshot_record(name)?;
        let has = record.holds.iter().any(|t| t == tag);
        match (add, has) {
            (true, true) => return Err(snap_err(format!("cannot hold '{name}': tag '{tag}' already exists"))),
            (false, false) => return Err(snap_err(format!("cannot release '{tag}' from '{name}': no such tag"))),
            (true, false) => record.holds.push(tag.to_string()),
            (false, true) => record.holds.retain(|t| t != tag),
        }
        let encoded = serde_json::to_vec(&record).map_err(|e| DsError::Corrupt(e.to_string()))?;
        let tx = self.obj.begin();
        Zap::update(&self.obj.mos(), &tx, self.datasets_zap, name.as_bytes(), &encoded)?;
        drop(tx);
        self.obj.sync()?;
        self.state.write().snapshots.insert(name.to_string(), record);
        Ok(())
    }

    /// Bytes written to `dataset` since its newest snapshot (all of it if none).
    pub(crate) fn written_bytes(&self, dataset: &str) -> u64 {
        let referenced = self.referenced_bytes(dataset);
        // No snapshot: since the origin, for a clone (see clones.rs).
        let origin = self.record(dataset).ok().and_then(|r| r.origin);
        let Some(newest) = self.snapshots(Some(dataset)).pop().or(origin) else { return referenced };
        let snap_ref = self.snapshot_objset(&newest).map(|os| self.obj.deflate(os.used_bytes())).unwrap_or(0);
        let head_dead = self.record(dataset).ok().and_then(|r| self.obj.snapshot_info(ObjsetId(r.objset)).ok()).map_or(0, |i| i.2);
        (referenced + self.obj.deflate(head_dead)).saturating_sub(snap_ref)
    }

    /// What destroying the snapshot would free.
    fn snapshot_used(&self, name: &str) -> Result<u64> {
        let (prev_txg, next) = self.neighbours(name)?;
        Ok(self.obj.deflate(self.obj.snapshot_unique_bytes(prev_txg, next)?))
    }

    pub(crate) fn snapshot_property(&self, def: &PropDef, name: &str, parsable: bool) -> Result<PropValue> {
        let record = self.snapshot_record(name)?;
        let number = |bytes: u64| if parsable { bytes.to_string() } else { format_bytes(bytes) };
        let referenced = || self.snapshot_objset(name).map(|os| self.obj.deflate(os.used_bytes())).unwrap_or(0);
        let value = match def.name {
            "name" => name.to_string(),
            "type" => "snapshot".to_string(),
            "creation" => crate::time::creation_value(record.creation, parsable),
            "used" => number(self.snapshot_used(name)?),
            "referenced" => number(referenced()),
            "createtxg" => record.createtxg.to_string(),
            "userrefs" => record.holds.len().to_string(),
            "logicalused" => number(self.snapshot_objset(name).map(|os| os.logical_bytes()).unwrap_or(0)),
            "clones" => self.clones_of(name).join(","),
            "guid" => record.guid.to_string(),
            _ => "-".to_string(),
        };
        Ok(PropValue::new(def.name, value, &Source::None))
    }
}
