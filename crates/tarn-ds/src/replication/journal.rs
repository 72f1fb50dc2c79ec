//! The receive journal: what a receive in progress has changed, kept in
//! the MOS in the same txgs as the changes, so that a crash (a power cut,
//! a killed daemon) in the middle of a receive leaves nothing unaccounted.
//!
//! One entry per package being received, in the *receives map* (a ZAP of
//! the MOS named by the pool directory's bonus word at byte 40; made at the
//! first receive), keyed by the package's top dataset, value JSON
//! [`Journal`]:
//! - written before the package's first change;
//! - a full stream's new object set is named in the transaction that
//!   creates it, each snapshot the stream takes in the transaction that
//!   takes it, and the position reached at the first change of every txg
//!   (through [`tarn_send::RecvJournal`]);
//! - a dataset received whole becomes, in one transaction, its dataset and
//!   snapshot records and a `done` entry (how to take it back);
//! - the end of the package removes the entry, in the transaction that
//!   drops the object sets replaced datasets gave up.
//!
//! An import that finds an entry *settles* it ([`Pool::settle`]), as a
//! receive that fails settles its own: with `-s` the dataset being received
//! keeps its partial state and a `receive_resume_token` (the position the
//! journal holds: records are idempotent, so a state at or past it resumes
//! from it), without `-s` everything the package did is taken back, the
//! datasets it completed included. Every step of settling is idempotent, so
//! a crash while settling is settled again at the next import.
//!
//! The pool checker counts every object set of the MOS; one that no
//! dataset, snapshot or journal names is an orphan and reported as a leak
//! ([`Pool::check`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tarn_obj::zap::Zap;
use tarn_obj::{ObjPool, ObjectId, ObjsetId, Tx};
use tarn_send::{ReceivedSnap, SnapRef};

use super::*;
use crate::pool::{DatasetRecord, Pool, DS_ZAP};
use crate::Result;

/// How to take back one dataset a package received whole.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Undo {
    /// Nothing to take back (a resumed dataset: its partial state came
    /// from an earlier receive).
    Nothing,
    /// The dataset was created by the receive.
    Created { dataset: String },
    /// Rolled forward from snapshot `base`; `old` is its record before,
    /// `snaps` the snapshots the receive made.
    RolledForward { dataset: String, base: String, old: DatasetRecord, snaps: Vec<String> },
    /// A full stream replaced the dataset; `old` is its record before (its
    /// object set is destroyed only when the whole package is in).
    Replaced { dataset: String, old: DatasetRecord, snaps: Vec<String> },
}

/// A snapshot a receive took (the object layer's view, as
/// [`ReceivedSnap`]).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct JournalSnap {
    pub objset: u64,
    pub txg: u64,
    pub guid: u64,
    pub source_txg: u64,
}

impl From<&ReceivedSnap> for JournalSnap {
    fn from(s: &ReceivedSnap) -> Self {
        JournalSnap { objset: s.objset.0, txg: s.txg, guid: s.guid, source_txg: s.source_txg }
    }
}

impl JournalSnap {
    pub fn received(&self) -> ReceivedSnap {
        ReceivedSnap { objset: ObjsetId(self.objset), txg: self.txg, guid: self.guid, source_txg: self.source_txg }
    }
}

/// What the dataset being received was before.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Before {
    /// It did not exist.
    New,
    /// It did not exist and is made a clone of snapshot `origin` (object
    /// set and txg: the stream is an incremental from it).
    Clone { origin: String, origin_objset: u64, origin_txg: u64 },
    /// It existed, without snapshots, and a full stream replaces it.
    Replace { old: DatasetRecord },
    /// An incremental onto its snapshot `base` (object set, txg).
    Incremental { old: DatasetRecord, base: String, base_objset: u64, base_txg: u64 },
    /// It held the partial state this receive resumes.
    Resume { old: DatasetRecord },
}

/// The dataset being received.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Current {
    /// Its index in the package and its relative name there.
    pub index: usize,
    pub name: String,
    /// Its full name here.
    pub dst: String,
    pub before: Before,
    /// The record it gets when received whole (its object set and
    /// creation txg are filled in then).
    pub record: DatasetRecord,
    /// The snapshots the package brings for it (their names, guids and
    /// times on the sender).
    pub entry_snaps: Vec<PackageSnap>,
    /// The object set receiving the stream (0: not created yet).
    pub head: u64,
    /// Snapshots taken so far, oldest first.
    pub snaps: Vec<JournalSnap>,
    /// The inner stream's resume token at the position reached ("": no
    /// change made yet).
    pub inner: String,
    /// The partial state this dataset keeps with `-s` was made by this
    /// package (a full stream: aborting it destroys the dataset).
    pub fresh: bool,
}

/// One package being received.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Journal {
    /// The package's top dataset (the key of the entry).
    pub top: String,
    /// `recv -s`.
    pub resumable: bool,
    /// The send the package came from (resume tokens name it).
    pub send: SendSpec,
    /// Relative names of the package's datasets, in order.
    pub names: Vec<String>,
    /// The index of the next dataset to receive.
    pub next: usize,
    /// The package restarts an interrupted one at a dataset boundary (the
    /// top dataset holds the marker it continues).
    pub restart: bool,
    /// Datasets received whole, in order.
    pub done: Vec<Undo>,
    pub current: Option<Current>,
}

impl Journal {
    /// Object sets this entry names (kept by the checker).
    fn objsets(&self, out: &mut BTreeSet<u64>) {
        if let Some(c) = &self.current {
            out.insert(c.head);
            out.extend(c.snaps.iter().map(|s| s.objset));
            if let Before::Replace { old } | Before::Incremental { old, .. } | Before::Resume { old } = &c.before {
                out.insert(old.objset);
            }
        }
        for u in &self.done {
            if let Undo::Replaced { old, .. } | Undo::RolledForward { old, .. } = u {
                out.insert(old.objset);
            }
        }
        out.remove(&0);
    }
}

/// The receives map: its object (0 until the first receive makes it), and
/// what the import said of the receives it settled.
#[derive(Default)]
pub(crate) struct JournalMap(pub(crate) Mutex<u64>, pub(crate) Mutex<Vec<String>>);

/// A journal entry being written as a receive goes: the copy in memory is
/// the truth, written whole at every change (in the transaction of the
/// change it records).
pub(crate) struct JournalHook {
    obj: Arc<ObjPool>,
    map: ObjectId,
    pub(crate) state: Mutex<Journal>,
}

impl JournalHook {
    pub(crate) fn write(&self, tx: &Tx, j: &Journal) -> tarn_obj::Result<()> {
        let json = serde_json::to_vec(j).map_err(|e| tarn_obj::ObjError::Corrupt(e.to_string()))?;
        Zap::update(&self.obj.mos(), tx, self.map, j.top.as_bytes(), &json)
    }

    /// Changes the entry in memory and writes it in `tx`.
    pub(crate) fn update(&self, tx: &Tx, f: impl FnOnce(&mut Journal)) -> tarn_obj::Result<()> {
        let mut j = self.state.lock();
        f(&mut j);
        self.write(tx, &j)
    }

    pub(crate) fn remove(&self, tx: &Tx) -> tarn_obj::Result<()> {
        let top = self.state.lock().top.clone();
        match Zap::remove(&self.obj.mos(), tx, self.map, top.as_bytes()) {
            Ok(_) | Err(tarn_obj::ObjError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn snapshot(&self) -> Journal {
        self.state.lock().clone()
    }
}

impl tarn_send::RecvJournal for JournalHook {
    fn created(&self, tx: &Tx, head: ObjsetId, token: &str) -> tarn_obj::Result<()> {
        self.update(tx, |j| {
            if let Some(c) = j.current.as_mut() {
                c.head = head.0;
                c.inner = token.to_string();
            }
        })
    }

    fn progress(&self, tx: &Tx, token: &str) -> tarn_obj::Result<()> {
        self.update(tx, |j| {
            if let Some(c) = j.current.as_mut() {
                c.inner = token.to_string();
            }
        })
    }

    fn snapshot(&self, tx: &Tx, snap: &ReceivedSnap, token: &str) -> tarn_obj::Result<()> {
        self.update(tx, |j| {
            if let Some(c) = j.current.as_mut() {
                c.snaps.push(snap.into());
                c.inner = token.to_string();
            }
        })
    }
}

/// What settling a journal keeps with `-s` (without it, nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Keep {
    /// The dataset being received keeps what arrived, if anything did.
    pub partial: bool,
    /// Else, when datasets before it arrived whole, the top dataset gets a
    /// marker that restarts the package at it.
    pub marker: bool,
}

impl Keep {
    /// A crash (found at import): as much as can be kept.
    pub const CRASH: Keep = Keep { partial: true, marker: true };
}

/// What settling a journal left.
#[derive(Debug, Default)]
pub(crate) struct Settled {
    /// The dataset holding partial state (or the marker) and its token.
    pub resumable: Option<(String, String)>,
    /// Snapshots kept of the dataset that holds partial state.
    pub snapshots: Vec<String>,
}

impl Pool {
    /// The receives map, made (and named in the pool directory) if `make`.
    fn journal_map(&self, make: bool) -> Result<Option<ObjectId>> {
        let mut id = self.journals.0.lock();
        if *id != 0 {
            return Ok(Some(ObjectId(*id)));
        }
        if !make {
            return Ok(None);
        }
        let mos = self.obj.mos();
        let tx = self.obj.begin();
        let map = Zap::create(&mos, &tx, DS_ZAP)?;
        self.set_directory_word(&tx, crate::pool::DIRECTORY_RECEIVES, map.0)?;
        *id = map.0;
        Ok(Some(map))
    }

    /// Every journal entry on disk (or in the open txgs).
    pub(crate) fn journals(&self) -> Result<Vec<Journal>> {
        let Some(map) = self.journal_map(false)? else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        let mut bad = None;
        Zap::iterate(&self.obj.mos(), map, 0, &mut |_, key, value| {
            match serde_json::from_slice::<Journal>(value) {
                Ok(j) => out.push(j),
                Err(e) => bad = Some(format!("receive journal '{}' does not decode: {e}", String::from_utf8_lossy(key))),
            }
            true
        })?;
        match bad {
            Some(b) => Err(DsError::Corrupt(b)),
            None => Ok(out),
        }
    }

    /// Starts the journal of a package received at `top` (written in the
    /// open txg: before any change the receive makes).
    pub(crate) fn journal_begin(&self, spec: &RecvSpec, header: &PackageHeader, top: &str, restart: bool) -> Result<Arc<JournalHook>> {
        let map = self.journal_map(true)?.expect("made");
        if self.journals()?.iter().any(|j| j.top == top) {
            return Err(recv_err(format!("cannot receive into '{top}': an earlier receive into it was not settled (import the pool again)")));
        }
        let j = Journal {
            top: top.to_string(),
            resumable: spec.resumable,
            send: header.send.clone(),
            names: header.datasets.iter().map(|d| d.name.clone()).collect(),
            next: header.resume.as_ref().map_or(0, |r| r.index),
            restart,
            done: Vec::new(),
            current: None,
        };
        let hook = Arc::new(JournalHook { obj: self.obj.clone(), map, state: Mutex::new(j.clone()) });
        let tx = self.obj.begin();
        hook.write(&tx, &j)?;
        Ok(hook)
    }

    /// The object sets receives in progress name.
    pub(crate) fn journal_objsets(&self) -> Result<BTreeSet<u64>> {
        let mut out = BTreeSet::new();
        for j in self.journals()? {
            j.objsets(&mut out);
        }
        Ok(out)
    }

    /// `tarn debug check`: the object layer's checker, with every object
    /// set that no dataset, snapshot or receive in progress names counted
    /// as an orphan (leaked).
    pub fn check(&self) -> Result<tarn_obj::CheckReport> {
        // Named before the walk's sync or after it: a dataset destroyed or
        // a receive started meanwhile is not taken for an orphan.
        let mut named = self.named_objsets()?;
        let mut report = self.obj.check_named(&named);
        if !report.orphans.is_empty() {
            named.extend(self.named_objsets()?);
            report = self.obj.check_named(&named);
        }
        Ok(report)
    }

    /// Every object set a dataset, snapshot or receive in progress names.
    fn named_objsets(&self) -> Result<BTreeSet<u64>> {
        let mut named = self.journal_objsets()?;
        let state = self.state.read();
        named.extend(state.datasets.values().map(|r| r.objset));
        named.extend(state.snapshots.values().map(|r| r.objset));
        Ok(named)
    }

    /// What the import said of the receives a crash had interrupted.
    pub fn recovered_receives(&self) -> Vec<String> {
        self.journals.1.lock().clone()
    }

    /// At import: settles every receive a crash interrupted (see the
    /// module documentation). A read-only import leaves them.
    pub(crate) fn recover_receives(&self) -> Result<Vec<String>> {
        if self.obj.readonly() {
            return Ok(Vec::new());
        }
        // A journal that cannot be read or settled is reported, never a
        // failed import: its object sets stay named (no leak is reported,
        // nothing is lost) until a later import settles it.
        let journals = match self.journals() {
            Ok(j) => j,
            Err(e) => return Ok(vec![format!("receives in progress were not settled: {e}")]),
        };
        let mut said = Vec::new();
        for j in journals {
            let Some(map) = self.journal_map(false)? else { break };
            let hook = Arc::new(JournalHook { obj: self.obj.clone(), map, state: Mutex::new(j.clone()) });
            said.push(match self.settle(&hook, Keep::CRASH) {
                Ok(Settled { resumable: Some((ds, _)), .. }) => {
                    format!("the receive into '{}' was interrupted; '{ds}' keeps what arrived (see its receive_resume_token)", j.top)
                }
                Ok(_) if j.resumable => format!("the receive into '{}' was interrupted before anything of it could be kept", j.top),
                Ok(_) => format!("the receive into '{}' was interrupted and taken back", j.top),
                Err(e) => format!("the receive into '{}' was interrupted and could not be settled: {e}", j.top),
            });
        }
        Ok(said)
    }

    /// Settles a package's journal (a failed receive, or at import):
    /// keeps what `-s` keeps and takes back the rest, then removes the
    /// entry. Idempotent: every step checks what is still there.
    pub(crate) fn settle(&self, hook: &JournalHook, keep: Keep) -> Result<Settled> {
        let j = hook.snapshot();
        let mut out = Settled::default();
        if let Some(c) = &j.current {
            let made: Vec<ReceivedSnap> = c.snaps.iter().map(|s| s.received()).collect();
            let whole = c.entry_snaps.last().is_some_and(|last| c.snaps.iter().any(|s| s.guid == last.guid));
            // A resumed partial state stays resumable with or without -s
            // (it is an earlier receive's, and what this one added to it is
            // consistent only with a token at or before its position).
            let resumed = matches!(c.before, Before::Resume { .. });
            let kept = (j.resumable && keep.partial) || resumed;
            if (j.resumable || resumed) && whole {
                // Every snapshot arrived: as if received whole.
                self.complete(hook, c, &made)?;
            } else if kept && !c.inner.is_empty() && c.head != 0 && !matches!(c.before, Before::Replace { .. }) {
                out = self.keep_partial(hook, &j, c)?;
            } else {
                self.take_back(c)?;
                let tx = self.obj.begin();
                hook.update(&tx, |j| j.current = None)?;
            }
        }
        let j = hook.snapshot();
        if j.resumable {
            // A marker restarts the package at the next dataset, when
            // datasets before it arrived and nothing of it is kept.
            if out.resumable.is_none() && keep.marker && j.next > 0 && j.next < j.names.len() && (!j.done.is_empty() || j.restart) {
                let token = encode_token(&SendToken { spec: j.send.clone(), index: j.next, name: j.names[j.next].clone(), inner: String::new() });
                let mut rec = self.record(&j.top)?;
                rec.recv = Some(RecvPartial { token: token.clone(), inner: String::new(), fresh: false });
                self.put_dataset(&j.top, rec)?;
                out.resumable = Some((j.top.clone(), token));
            }
        } else {
            for u in j.done.iter().rev() {
                self.undo(u)?;
                let tx = self.obj.begin();
                hook.update(&tx, |j| {
                    j.done.pop();
                })?;
            }
        }
        self.journal_end(hook)?;
        Ok(out)
    }

    /// Ends a package: the object sets replaced datasets gave up are
    /// destroyed and the entry removed, in one transaction.
    pub(crate) fn journal_end(&self, hook: &JournalHook) -> Result<()> {
        let j = hook.snapshot();
        let _change = self.change.lock();
        let tx = self.obj.begin();
        // A restarted package that is whole again: the marker it continued
        // goes.
        let cleared = self.record(&j.top).ok().filter(|r| j.restart && j.next == j.names.len() && r.recv.as_ref().is_some_and(|p| p.inner.is_empty()));
        if let Some(mut rec) = cleared {
            rec.recv = None;
            self.store_record(&tx, &j.top, &rec)?;
            self.state.write().datasets.insert(j.top.clone(), rec);
        }
        for u in &j.done {
            if let Undo::Replaced { old, .. } = u {
                if self.obj.open_objset(ObjsetId(old.objset)).is_ok() {
                    self.obj.destroy_objset(&tx, ObjsetId(old.objset))?;
                }
            }
        }
        hook.remove(&tx)?;
        drop(tx);
        self.obj.sync()?;
        Ok(())
    }

    /// The dataset being received keeps what arrived (`-s`): its record
    /// names the partial state and the token that resumes it.
    fn keep_partial(&self, hook: &JournalHook, j: &Journal, c: &Current) -> Result<Settled> {
        let token = encode_token(&SendToken { spec: j.send.clone(), index: c.index, name: c.name.clone(), inner: c.inner.clone() });
        let partial = RecvPartial { token: token.clone(), inner: c.inner.clone(), fresh: c.fresh };
        let mut rec = match &c.before {
            Before::New | Before::Clone { .. } | Before::Replace { .. } => DatasetRecord { objset: c.head, ..c.record.clone() },
            Before::Incremental { old, .. } | Before::Resume { old } => old.clone(),
        };
        rec.recv = Some(partial);
        let made: Vec<ReceivedSnap> = c.snaps.iter().map(|s| s.received()).collect();
        let snaps = self.snapshot_records(&c.dst, &c.entry_snaps, &made);
        let names: Vec<String> = snaps.iter().map(|(n, _)| n.clone()).collect();
        {
            let _change = self.change.lock();
            let tx = self.obj.begin();
            self.store_record(&tx, &c.dst, &rec)?;
            for (n, r) in &snaps {
                self.store_record(&tx, n, r)?;
            }
            // A stale restart marker on the top dataset gives way.
            let top = self.record(&j.top).ok().filter(|r| j.top != c.dst && r.recv.as_ref().is_some_and(|p| p.inner.is_empty()));
            if let Some(mut t) = top.clone() {
                t.recv = None;
                self.store_record(&tx, &j.top, &t)?;
            }
            hook.update(&tx, |j| j.current = None)?;
            drop(tx);
            self.obj.sync()?;
            let mut state = self.state.write();
            if let Some(t) = top {
                state.datasets.insert(j.top.clone(), t);
            }
            for (n, r) in snaps {
                state.snapshots.insert(n, r);
            }
        }
        self.install(&c.dst, rec)?;
        Ok(Settled { resumable: Some((c.dst.clone(), token)), snapshots: names })
    }

    /// Takes back what the receive of `c` changed (nothing of it is kept).
    fn take_back(&self, c: &Current) -> Result<()> {
        let made: Vec<ReceivedSnap> = c.snaps.iter().map(|s| s.received()).collect();
        match &c.before {
            Before::New | Before::Replace { .. } if c.head != 0 => {
                tarn_send::undo_receive(&self.obj, ObjsetId(c.head), None, &made)?;
            }
            Before::Clone { origin_objset, origin_txg, .. } if c.head != 0 => {
                // The clone's snapshots are destroyed against its origin
                // (what they share with it stays), then the clone.
                let base = SnapRef { objset: ObjsetId(*origin_objset), txg: *origin_txg, guid: 0 };
                tarn_send::undo_receive(&self.obj, ObjsetId(c.head), Some(&base), &made)?;
                let _change = self.change.lock();
                if self.obj.open_objset(ObjsetId(c.head)).is_ok() {
                    let tx = self.obj.begin();
                    self.obj.destroy_objset(&tx, ObjsetId(c.head))?;
                    drop(tx);
                    self.obj.sync()?;
                }
            }
            Before::New | Before::Clone { .. } | Before::Replace { .. } => {}
            Before::Incremental { base_objset, base_txg, .. } => {
                let base = SnapRef { objset: ObjsetId(*base_objset), txg: *base_txg, guid: 0 };
                tarn_send::undo_receive(&self.obj, ObjsetId(c.head), Some(&base), &made)?;
                if self.exists(&c.dst) {
                    self.refresh_objset(&c.dst)?;
                }
            }
            // A resumed partial state is the earlier receive's: what this
            // one added stays with it (it is resumable from there on).
            Before::Resume { .. } => {}
        }
        Ok(())
    }

    /// Takes back one dataset a package received whole.
    pub(crate) fn undo(&self, undo: &Undo) -> Result<()> {
        match undo {
            Undo::Nothing => Ok(()),
            Undo::Created { dataset } => {
                if self.exists(dataset) {
                    self.destroy_dataset(dataset, true)?;
                }
                Ok(())
            }
            Undo::RolledForward { dataset, base, old, snaps } => {
                for s in snaps.iter().rev() {
                    if self.snapshot_record(s).is_ok() {
                        self.destroy_snapshot(s, true)?;
                    }
                }
                self.rollback(base, false)?;
                let objset = self.record(dataset)?.objset;
                self.put_dataset(dataset, DatasetRecord { objset, ..old.clone() })
            }
            Undo::Replaced { dataset, old, snaps } => {
                let new = self.record(dataset)?.objset;
                if new == old.objset {
                    return Ok(());
                }
                for s in snaps.iter().rev() {
                    if self.snapshot_record(s).is_ok() {
                        self.destroy_snapshot(s, true)?;
                    }
                }
                // The old record back and the new object set gone in one
                // transaction: no txg has one without the other.
                {
                    let _change = self.change.lock();
                    let tx = self.obj.begin();
                    self.store_record(&tx, dataset, old)?;
                    if self.obj.open_objset(ObjsetId(new)).is_ok() {
                        self.obj.destroy_objset(&tx, ObjsetId(new))?;
                    }
                    drop(tx);
                    self.obj.sync()?;
                }
                self.install(dataset, old.clone())
            }
        }
    }

    /// The snapshot records of the snapshots `made` of `dataset`, named as
    /// the package names them.
    pub(crate) fn snapshot_records(&self, dataset: &str, entry_snaps: &[PackageSnap], made: &[ReceivedSnap]) -> Vec<(String, DatasetRecord)> {
        made.iter()
            .map(|s| {
                let (short, creation, volume) = match entry_snaps.iter().find(|p| p.guid == s.guid) {
                    Some(p) => (p.name.clone(), p.creation, p.volume),
                    None => (format!("recv-{:016x}", s.guid), crate::pool::now_unix(), None),
                };
                let record = DatasetRecord { objset: s.objset.0, guid: s.guid, creation, createtxg: s.txg, volume, ..Default::default() };
                (format!("{dataset}@{short}"), record)
            })
            .collect()
    }

    /// The dataset of `c` received whole: in one transaction its record,
    /// its snapshots' records and the journal's `done` entry. Returns the
    /// snapshot names and the undo.
    pub(crate) fn complete(&self, hook: &JournalHook, c: &Current, made: &[ReceivedSnap]) -> Result<(Vec<String>, Undo)> {
        let mut rec = DatasetRecord { objset: c.head, ..c.record.clone() };
        if rec.createtxg == 0 {
            rec.createtxg = made.first().map_or(0, |s| s.txg);
        }
        let snaps = self.snapshot_records(&c.dst, &c.entry_snaps, made);
        let names: Vec<String> = snaps.iter().map(|(n, _)| n.clone()).collect();
        let undo = match &c.before {
            Before::New | Before::Clone { .. } => Undo::Created { dataset: c.dst.clone() },
            Before::Replace { old } => Undo::Replaced { dataset: c.dst.clone(), old: old.clone(), snaps: names.clone() },
            Before::Incremental { old, base, .. } => {
                Undo::RolledForward { dataset: c.dst.clone(), base: base.clone(), old: old.clone(), snaps: names.clone() }
            }
            Before::Resume { .. } => Undo::Nothing,
        };
        {
            let _change = self.change.lock();
            let tx = self.obj.begin();
            self.store_record(&tx, &c.dst, &rec)?;
            for (n, r) in &snaps {
                self.store_record(&tx, n, r)?;
            }
            let index = c.index;
            hook.update(&tx, |j| {
                j.current = None;
                j.done.push(undo.clone());
                j.next = index + 1;
            })?;
            drop(tx);
            self.obj.sync()?;
            let mut state = self.state.write();
            for (n, r) in snaps {
                state.snapshots.insert(n, r);
            }
        }
        self.install(&c.dst, rec)?;
        Ok((names, undo))
    }

    /// Puts `record` of `name` (already stored) in memory, with its object
    /// set handle and write properties.
    fn install(&self, name: &str, record: DatasetRecord) -> Result<()> {
        let os = self.obj.open_objset(ObjsetId(record.objset))?;
        let mut state = self.state.write();
        state.datasets.insert(name.to_string(), record);
        state.objsets.insert(name.to_string(), os);
        drop(state);
        self.reapply_write_props(name)
    }
}
