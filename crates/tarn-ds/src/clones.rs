//! Clones and promote, and the space accounting that spans an origin and
//! its clones.
//!
//! A clone is a dataset whose object set started as a snapshot's (its
//! *origin*, kept by name in the clone's record): the object layer gives it
//! the snapshot's trees, `prev_snap_txg` = the origin's creation txg and an
//! empty dead list, so the clone's frees of the origin's blocks go to its
//! dead list and the origin keeps them. A snapshot with clones cannot be
//! destroyed.
//!
//! A dataset's *chain* runs from its origin (if any) through its own
//! snapshots, oldest first, to its head; each dead list holds what was live
//! in its predecessor in the chain and died before it. So the first
//! snapshot of a clone has the origin's txg as its previous txg.
//!
//! Promote swaps the roles of a clone and its origin's dataset without
//! touching a block: the origin snapshot and every earlier snapshot of the
//! origin's dataset move to the clone's chain (renamed, guids kept), the
//! former origin dataset becomes a clone of the moved origin snapshot, and
//! the clone takes over the former origin's own origin. Every dead list
//! keeps its meaning, because every object set keeps its predecessor.
//!
//! Space (as in ZFS; raw allocated bytes, deflated at the end), for a
//! dataset D whose origin was taken in txg o (0 if none):
//! - `usedbysnapshots` = the chain's dead-list entries (D's snapshots' and
//!   head's) born after o: entries born at or before o are the origin's;
//! - `usedbydataset` = `referenced(D)` − the bytes D still shares with its
//!   origin = `referenced(D)` − (`referenced(origin)` − the chain's dead-list
//!   entries born at or before o);
//! - `used` = `usedbydataset` + `usedbysnapshots` + `usedbychildren`.
//!
//! Summed over the pool's root dataset, `used` counts every block of every
//! dataset tree exactly once (the pool checker proves it in the random
//! clone test).

use std::collections::BTreeMap;

use tarn_obj::zap::Zap;
use tarn_obj::ObjsetId;

use crate::pool::{new_guid, now_unix, validate_dataset_name, DatasetRecord, Pool};
use crate::snapshots::validate_snapshot_name;
use crate::{props, DsError, Result};

fn clone_err(msg: String) -> DsError {
    DsError::Snapshot(msg)
}

impl Pool {
    /// `clone fs@snap target`: a new dataset `target` (its parent must
    /// exist) starting as the snapshot. `properties` are set locally.
    /// Nothing is formatted: the clone's trees are the snapshot's.
    pub fn clone_snapshot(
        &self,
        snapshot: &str,
        target: &str,
        properties: &[(String, String)],
    ) -> Result<()> {
        let fail = |why: String| clone_err(format!("cannot create '{target}': {why}"));
        validate_snapshot_name(snapshot)?;
        validate_dataset_name(target)?;
        let pool_name = self.name();
        if target.split('/').next() != Some(pool_name.as_str())
            || snapshot.split(['/', '@']).next() != Some(pool_name.as_str())
        {
            return Err(fail("source and target must be in the same pool".into()));
        }
        let mut local = BTreeMap::new();
        for (prop, value) in properties {
            let (prop, stored) = props::validate(prop, value)?;
            local.insert(prop.to_string(), stored);
        }
        let _change = self.change.lock();
        let origin = self.snapshot_record(snapshot)?;
        if self.exists(target) {
            return Err(DsError::Exists(target.to_string()));
        }
        match props::parent_name(target) {
            Some(parent) if self.exists(parent) => {}
            Some(_) => return Err(DsError::NoParent(target.to_string())),
            None => return Err(fail("a pool's root dataset cannot be a clone".into())),
        }
        // A clone of an encrypted snapshot shares its key (and encryption
        // root), as in OpenZFS; an unencrypted clone under an encrypted
        // parent is refused as any unencrypted child is.
        let origin_dataset = snapshot.split('@').next().unwrap_or(snapshot);
        let crypt = self.record(origin_dataset)?.crypt.map(|c| crate::encryption::CryptRecord { keylocation: None, ..c });
        let parent_encrypted = props::parent_name(target).and_then(|p| self.record(p).ok()).is_some_and(|r| r.crypt.is_some());
        if crypt.is_none() && parent_encrypted {
            return Err(fail("an unencrypted clone cannot be created under an encrypted parent".into()));
        }
        let tx = self.obj.begin();
        let objset = self
            .obj
            .clone_objset(&tx, ObjsetId(origin.objset), origin.createtxg)?;
        let record = DatasetRecord {
            objset: objset.0,
            guid: new_guid(),
            creation: now_unix(),
            createtxg: tx.txg(),
            props: local,
            holds: vec![],
            origin: Some(snapshot.to_string()),
            crypt,
            volume: origin.volume,
            ..Default::default()
        };
        let encoded = serde_json::to_vec(&record).map_err(|e| DsError::Corrupt(e.to_string()))?;
        Zap::insert(
            &self.obj.mos(),
            &tx,
            self.datasets_zap,
            target.as_bytes(),
            &encoded,
        )?;
        drop(tx);
        self.obj.sync()?;
        let os = self.obj.open_objset(objset)?;
        {
            let mut state = self.state.write();
            state.datasets.insert(target.to_string(), record);
            state.objsets.insert(target.to_string(), os);
        }
        self.reapply_write_props(target)?;
        Ok(())
    }

    /// The clones of snapshot `name` (datasets whose origin it is), sorted.
    pub fn clones_of(&self, name: &str) -> Vec<String> {
        let state = self.state.read();
        state
            .datasets
            .iter()
            .filter(|(_, r)| r.origin.as_deref() == Some(name))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The creation txg of `dataset`'s origin snapshot (0: not a clone).
    pub(crate) fn origin_txg(&self, dataset: &str) -> u64 {
        let Ok(record) = self.record(dataset) else {
            return 0;
        };
        record
            .origin
            .and_then(|o| self.snapshot_record(&o).ok())
            .map_or(0, |r| r.createtxg)
    }

    /// The object sets of `dataset`'s own chain: its snapshots, oldest
    /// first, then its head.
    fn chain_objsets(&self, dataset: &str) -> Vec<ObjsetId> {
        let mut out: Vec<ObjsetId> = self
            .snapshots(Some(dataset))
            .iter()
            .filter_map(|s| self.snapshot_record(s).ok())
            .map(|r| ObjsetId(r.objset))
            .collect();
        if let Ok(r) = self.record(dataset) {
            out.push(ObjsetId(r.objset));
        }
        out
    }

    /// Raw bytes of the chain's dead lists born at or before the origin's
    /// txg (the origin's blocks) and after it (only the chain holds them).
    fn chain_deadlists(&self, dataset: &str) -> (u64, u64) {
        let o = self.origin_txg(dataset);
        self.chain_objsets(dataset)
            .into_iter()
            .filter_map(|id| self.obj.deadlist_split(id, o).ok())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    }

    /// Raw `usedbysnapshots`.
    pub(crate) fn snapshot_space_raw(&self, dataset: &str) -> u64 {
        self.chain_deadlists(dataset).1
    }

    /// Raw `usedbydataset`: what the head references less what it still
    /// shares with its origin.
    pub(crate) fn dataset_space_raw(&self, dataset: &str) -> u64 {
        let referenced = self.objset(dataset).map_or(0, |os| os.used_bytes());
        let Some(origin) = self.record(dataset).ok().and_then(|r| r.origin) else {
            return referenced;
        };
        let origin_ref = self
            .snapshot_objset(&origin)
            .map_or(0, |os| os.used_bytes());
        let origin_dead = self.chain_deadlists(dataset).0;
        referenced.saturating_sub(origin_ref.saturating_sub(origin_dead))
    }

    /// Raw `used` of `name` and its descendants.
    pub fn used_raw(&self, name: &str) -> u64 {
        self.subtree(name)
            .iter()
            .map(|d| self.dataset_space_raw(d) + self.snapshot_space_raw(d))
            .sum()
    }

    /// `promote clone`: the clone takes over its origin snapshot and the
    /// snapshots before it; their former dataset becomes a clone of the
    /// moved origin. The caller may unmount and mount again (the datasets'
    /// `.zfs/snapshot` contents change). Returns the former origin dataset.
    pub fn promote(&self, clone: &str) -> Result<String> {
        let fail = |why: String| clone_err(format!("cannot promote '{clone}': {why}"));
        validate_dataset_name(clone)?;
        let _change = self.change.lock();
        let record = self.record(clone)?;
        let Some(origin) = record.origin.clone() else {
            return Err(fail("not a cloned filesystem".into()));
        };
        let (source, _) = validate_snapshot_name(&origin)?;
        let origin_record = self.snapshot_record(&origin)?;
        let mut source_record = self.record(&source)?;
        // The origin snapshot and every earlier one move.
        let moving: Vec<String> = self
            .snapshots(Some(&source))
            .into_iter()
            .filter(|n| {
                self.snapshot_record(n)
                    .is_ok_and(|r| r.createtxg <= origin_record.createtxg)
            })
            .collect();
        if let Some(sent) = moving.iter().find(|n| self.sending.lock().contains_key(*n)) {
            return Err(fail(format!("snapshot '{sent}' is being sent")));
        }
        let mut renames: Vec<(String, String)> = Vec::new();
        for old in &moving {
            let (_, short) = validate_snapshot_name(old)?;
            let new = format!("{clone}@{short}");
            if self.snapshot_record(&new).is_ok() {
                return Err(fail(format!("snapshot name '{short}' is used by both '{clone}' and '{source}'; rename or destroy one")));
            }
            renames.push((old.clone(), new));
        }
        let renamed = |name: &str| -> Option<String> {
            renames
                .iter()
                .find(|(o, _)| o == name)
                .map(|(_, n)| n.clone())
        };
        let new_origin = renamed(&origin)
            .ok_or_else(|| fail(format!("origin '{origin}' is not a snapshot of '{source}'")))?;
        // Every record that changes: the moved snapshots, the two datasets,
        // and the clones whose origin moved (renamed in place).
        let mut clone_record = record.clone();
        clone_record.origin = source_record.origin.clone();
        source_record.origin = Some(new_origin.clone());
        let others: Vec<(String, DatasetRecord)> = {
            let state = self.state.read();
            state
                .datasets
                .iter()
                .filter(|(n, _)| n.as_str() != clone && n.as_str() != source)
                .filter_map(|(n, r)| {
                    let moved = r.origin.as_deref().and_then(renamed)?;
                    let mut r = r.clone();
                    r.origin = Some(moved);
                    Some((n.clone(), r))
                })
                .collect()
        };
        let mos = self.obj.mos();
        let encode =
            |r: &DatasetRecord| serde_json::to_vec(r).map_err(|e| DsError::Corrupt(e.to_string()));
        let tx = self.obj.begin();
        let mut moved_records = Vec::new();
        for (old, new) in &renames {
            let r = self.snapshot_record(old)?;
            Zap::remove(&mos, &tx, self.datasets_zap, old.as_bytes())?;
            Zap::insert(&mos, &tx, self.datasets_zap, new.as_bytes(), &encode(&r)?)?;
            moved_records.push((old.clone(), new.clone(), r));
        }
        Zap::update(
            &mos,
            &tx,
            self.datasets_zap,
            clone.as_bytes(),
            &encode(&clone_record)?,
        )?;
        Zap::update(
            &mos,
            &tx,
            self.datasets_zap,
            source.as_bytes(),
            &encode(&source_record)?,
        )?;
        for (name, r) in &others {
            Zap::update(&mos, &tx, self.datasets_zap, name.as_bytes(), &encode(r)?)?;
        }
        drop(tx);
        self.obj.sync()?;
        let mut state = self.state.write();
        for (old, new, r) in moved_records {
            state.snapshots.remove(&old);
            state.snapshots.insert(new, r);
        }
        state.datasets.insert(clone.to_string(), clone_record);
        state.datasets.insert(source.clone(), source_record);
        for (name, r) in others {
            state.datasets.insert(name, r);
        }
        Ok(source)
    }

    /// Checks run before destroying snapshot `name`: one with clones stays.
    pub fn check_no_clones(&self, name: &str) -> Result<()> {
        self.clones_reason(name).map_or(Ok(()), |why| {
            Err(clone_err(format!(
                "cannot destroy snapshot '{name}': {why}"
            )))
        })
    }

    /// Why snapshot `name` cannot be destroyed because of clones, if so.
    pub(crate) fn clones_reason(&self, name: &str) -> Option<String> {
        let clones = self.clones_of(name);
        if clones.is_empty() {
            return None;
        }
        Some(format!(
            "snapshot has dependent clones ({}); destroy the clones (-R) or promote them first",
            clones.join(", ")
        ))
    }
}
