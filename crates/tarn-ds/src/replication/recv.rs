//! The receiving half of replication: a package applied to the pool,
//! dataset by dataset, undone or kept resumable when it stops.

use std::io::{Read, Write};
use std::sync::Arc;

use tarn_obj::zap::Zap;
use tarn_obj::ObjsetId;
use tarn_send::{RecvOptions, RecvTarget, SendError, SnapRef};

use super::journal::{Before, Current, JournalHook, JournalSnap, Keep, Settled};
use super::*;
use crate::pool::{now_unix, new_guid, validate_dataset_name, DatasetRecord, Pool};
use crate::props;
use crate::{DsError, Result};

impl Pool {
    /// The datasets a package received at `target` creates or changes.
    pub fn receive_targets(&self, header: &PackageHeader, target: &str) -> Result<Vec<String>> {
        validate_dataset_name(target)?;
        if target.split('/').next() != Some(self.name().as_str()) {
            return Err(DsError::NoSuchPool(target.split('/').next().unwrap_or("").to_string()));
        }
        let start = header.resume.as_ref().map_or(0, |r| r.index);
        let names: Vec<String> = header.datasets[start..].iter().map(|d| join(target, &d.name)).collect();
        for n in &names {
            validate_dataset_name(n)?;
        }
        Ok(names)
    }

    /// Stores `record` for `name` (new or changed) and its object set handle.
    pub(super) fn put_dataset(&self, name: &str, record: DatasetRecord) -> Result<()> {
        let _change = self.change.lock();
        let tx = self.obj.begin();
        self.store_record(&tx, name, &record)?;
        drop(tx);
        self.obj.sync()?;
        let os = self.obj.open_objset(ObjsetId(record.objset))?;
        let mut state = self.state.write();
        state.datasets.insert(name.to_string(), record);
        state.objsets.insert(name.to_string(), os);
        drop(state);
        self.reapply_write_props(name)
    }

    /// The stream of one dataset, verified whole into an unlinked file.
    fn spool(&self, spec: &RecvSpec, input: &mut dyn Read) -> Result<std::fs::File> {
        use std::io::Seek;
        let dir = spec.spool_dir.clone().unwrap_or_else(std::env::temp_dir);
        let path = dir.join(format!(".tarn-recv-{}-{:016x}", std::process::id(), new_guid()));
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| recv_err(format!("cannot spool the stream to {}: {e}", path.display())))?;
        let _ = std::fs::remove_file(&path);
        {
            let mut out = std::io::BufWriter::with_capacity(1 << 20, &mut file);
            tarn_send::verify_copy(input, &mut out).map_err(send_err)?;
            out.flush().map_err(|e| recv_err(format!("cannot spool the stream: {e}")))?;
        }
        file.seek(std::io::SeekFrom::Start(0)).map_err(|e| recv_err(format!("cannot spool the stream: {e}")))?;
        Ok(file)
    }

    pub(super) fn refresh_objset(&self, name: &str) -> Result<()> {
        let record = self.record(name)?;
        let os = self.obj.open_objset(ObjsetId(record.objset))?;
        self.state.write().objsets.insert(name.to_string(), os);
        self.reapply_write_props(name)
    }

    /// Receives a package whose header was read by [`read_header`]; the
    /// rest of it is `input`. The caller keeps the target datasets
    /// unmounted ([`Pool::receive_targets`]) and mounts them afterwards.
    ///
    /// Every change is journaled (`journal.rs`): a failure here, or a crash
    /// found at the next import, is settled the same way.
    pub fn receive_package(&self, spec: &RecvSpec, header: &PackageHeader, input: &mut dyn Read) -> Result<RecvReport> {
        for (k, v) in &spec.set {
            props::validate(k, v)?;
        }
        for x in &spec.exclude {
            props::check_name(x)?;
        }
        let targets = self.receive_targets(header, &spec.target)?;
        let start = header.resume.as_ref().map_or(0, |r| r.index);
        let top = join(&spec.target, "");
        // A package resumed at the start of a dataset's stream: the marker
        // is on the top dataset.
        let restart = header.resume.as_ref().is_some_and(|r| r.inner.is_empty());
        if let Some(r) = &header.resume {
            if r.name != header.datasets[r.index].name {
                return Err(recv_err("corrupt stream: the resume point names another dataset"));
            }
        }
        if restart {
            // The marker on the top dataset must name this very restart.
            let marker = self.record(&top).ok().and_then(|r| r.recv).filter(|p| p.inner.is_empty());
            let matches = marker.and_then(|p| decode_token(&p.token).ok()).is_some_and(|t| {
                Some(t.index) == header.resume.as_ref().map(|r| r.index) && t.spec == header.send && t.name == header.datasets[t.index].name
            });
            if !matches {
                return Err(recv_err(format!("cannot receive into '{top}': it has no interrupted receive that this stream continues")));
            }
        }
        let journal = self.journal_begin(spec, header, &top, restart)?;
        let mut report = RecvReport::default();
        let result = self.receive_entries(spec, header, input, targets, start, &journal, &mut report);
        if let Err(e) = result {
            let keep = match &e {
                Failure::Interrupted(_) => Keep { partial: true, marker: false },
                Failure::Stopped(_) => Keep { partial: false, marker: true },
                Failure::Refused(_) => Keep { partial: false, marker: false },
            };
            let settled = self.settle(&journal, keep);
            let e = e.into_error();
            return Err(match settled {
                Err(u) if spec.resumable => recv_err(format!("{e}; and keeping what was received failed: {u}")),
                Err(u) => recv_err(format!("{e}; and undoing the datasets received before failed: {u}")),
                Ok(Settled { resumable: Some((dataset, token)), snapshots }) => {
                    let snapshots = if dataset == top && snapshots.is_empty() { report.snapshots.clone() } else { snapshots };
                    let cause = match e {
                        DsError::Recv(m) => m,
                        other => other.to_string(),
                    };
                    DsError::RecvInterrupted { dataset, snapshots, cause, token }
                }
                Ok(_) => e,
            });
        }
        self.journal_end(&journal)?;
        if header.recursive && spec.force {
            self.prune_replica(spec, header, &mut report)?;
        }
        Ok(report)
    }

    /// The datasets under `target` that a `-R -F` receive of `header`
    /// destroys because the sender no longer has them (the daemon unmounts
    /// them with the targets).
    pub fn receive_prunes(&self, header: &PackageHeader, target: &str, force: bool) -> Vec<String> {
        let Some(kept) = header.sender_datasets.as_ref().filter(|_| header.recursive && force) else { return Vec::new() };
        let kept: std::collections::BTreeSet<String> = kept.iter().map(|r| join(target, r)).collect();
        self.subtree(target).into_iter().filter(|d| d != target && !kept.contains(d)).collect()
    }

    /// `recv -R -F`: after the package, the replica loses what the sender
    /// no longer has: snapshots of the received datasets that the sender's
    /// list does not name, and datasets under the target it does not list
    /// (as zfs; what a hold, a clone or a send keeps is left, with a
    /// warning).
    fn prune_replica(&self, spec: &RecvSpec, header: &PackageHeader, report: &mut RecvReport) -> Result<()> {
        for entry in &header.datasets {
            let Some(keep) = &entry.sender_snapshots else { continue };
            let dst = join(&spec.target, &entry.name);
            let mut snaps = self.snapshots(Some(&dst));
            snaps.reverse();
            for s in snaps {
                let Ok(r) = self.snapshot_record(&s) else { continue };
                if keep.contains(&r.guid) {
                    continue;
                }
                match self.prune_refusal(&s, &r) {
                    Some(why) => report.warnings.push(format!("'{s}' is not on the sender, but is kept: {why}")),
                    None => {
                        self.destroy_snapshot(&s, false)?;
                        report.destroyed.push(s);
                    }
                }
            }
        }
        let mut gone = self.receive_prunes(header, &spec.target, spec.force);
        if let Some(claimed) = &spec.prunable {
            gone.retain(|d| claimed.contains(d));
        }
        // Deepest first; a dataset whose descendants were kept stays too.
        gone.reverse();
        for d in gone {
            if !self.exists(&d) {
                continue;
            }
            let snaps = self.snapshots(Some(&d));
            let blocked = if self.subtree(&d).len() > 1 {
                Some("datasets under it are kept".to_string())
            } else {
                snaps.iter().find_map(|s| self.snapshot_record(s).ok().and_then(|r| self.prune_refusal(s, &r).map(|w| format!("'{s}' is {w}"))))
            };
            match blocked {
                Some(why) => report.warnings.push(format!("'{d}' is not on the sender, but is kept: {why}")),
                None => {
                    for s in snaps.iter().rev() {
                        self.destroy_snapshot(s, false)?;
                    }
                    self.destroy_dataset(&d, false)?;
                    report.destroyed.push(d);
                }
            }
        }
        Ok(())
    }

    /// Why a snapshot the sender no longer has cannot be destroyed.
    fn prune_refusal(&self, name: &str, r: &DatasetRecord) -> Option<String> {
        if !r.holds.is_empty() {
            return Some(format!("held ({})", r.holds.join(", ")));
        }
        if self.sending.lock().contains_key(name) {
            return Some("being sent".into());
        }
        let clones = self.clones_of(name);
        (!clones.is_empty()).then(|| format!("it has clones ({})", clones.join(", ")))
    }

    #[allow(clippy::too_many_arguments)]
    fn receive_entries(
        &self,
        spec: &RecvSpec,
        header: &PackageHeader,
        input: &mut dyn Read,
        targets: Vec<String>,
        start: usize,
        journal: &Arc<JournalHook>,
        report: &mut RecvReport,
    ) -> std::result::Result<(), Failure> {
        for (i, dst) in (start..header.datasets.len()).zip(targets) {
            let entry = &header.datasets[i];
            let resume = header.resume.as_ref().filter(|r| r.index == i && !r.inner.is_empty()).map(|r| r.inner.clone());
            let (bytes, snaps) = self.receive_one(spec, header, i, entry, &dst, resume, input, journal, &mut report.warnings)?;
            report.bytes += bytes;
            report.snapshots.extend(snaps);
            report.datasets.push(dst);
        }
        Ok(())
    }

    /// Receives dataset `index` of the package; returns the bytes and the
    /// snapshots received.
    #[allow(clippy::too_many_arguments)]
    fn receive_one(
        &self,
        spec: &RecvSpec,
        header: &PackageHeader,
        index: usize,
        entry: &PackageDataset,
        dst: &str,
        resume: Option<String>,
        input: &mut dyn Read,
        journal: &Arc<JournalHook>,
        warnings: &mut Vec<String>,
    ) -> std::result::Result<(u64, Vec<String>), Failure> {
        let fail = |m: String| Failure::Refused(recv_err(format!("cannot receive into '{dst}': {m}")));
        let existing = self.record(dst).ok();
        // What the receive does to the dataset's own property values
        // (own_props.rs): the data is written with the properties the
        // dataset will have.
        let recv_props = self.recv_props(spec, header, entry, existing.as_ref(), dst, warnings);
        let mut after = existing.clone().unwrap_or_default();
        recv_props.apply(&mut after);
        let write_props = self.write_props_as(dst, &after);
        if let (Some(rec), None) = (&existing, &resume) {
            if rec.recv.is_some() {
                return Err(fail(
                    "it holds a partially received stream: resume it (tarn send -t <receive_resume_token>) or abort it (tarn recv -A)".into(),
                ));
            }
        }
        // Where the stream goes.
        enum Plan {
            New,
            /// A clone of this snapshot, its origin (the stream's base).
            Clone(String),
            Replace(DatasetRecord),
            Incremental(DatasetRecord),
            Resume(DatasetRecord, RecvPartial),
        }
        let plan = match (&resume, &entry.base, existing) {
            (Some(_), _, Some(rec)) => match rec.recv.clone() {
                Some(p) => Plan::Resume(rec, p),
                None => return Err(fail("it has no partially received stream to resume".into())),
            },
            (Some(_), _, None) => return Err(fail("dataset does not exist (nothing to resume)".into())),
            (None, None, None) => {
                let parent = props::parent_name(dst).ok_or_else(|| fail("a pool's root dataset is replaced with -F".into()))?;
                if !self.exists(parent) {
                    return Err(fail(format!("parent '{parent}' does not exist")));
                }
                // A plain stream makes an unencrypted dataset: not under an
                // encrypted parent (a raw one makes its own encryption root).
                if entry.crypt.is_none() && self.record(parent).is_ok_and(|r| r.crypt.is_some()) {
                    return Err(fail(format!(
                        "parent '{parent}' is encrypted and the stream is not: send it raw (-w), or receive it elsewhere"
                    )));
                }
                Plan::New
            }
            (None, None, Some(rec)) => {
                if !spec.force {
                    return Err(fail("destination exists (a full stream replaces it only with -F)".into()));
                }
                let children = self.subtree(dst).len() > 1;
                if children && !header.recursive {
                    return Err(fail("destination has children; a full stream does not replace them".into()));
                }
                if !self.snapshots(Some(dst)).is_empty() {
                    return Err(fail(
                        "destination has snapshots; a full stream replaces only a dataset without snapshots (destroy them, or receive elsewhere)"
                            .into(),
                    ));
                }
                if let Some(origin) = &rec.origin {
                    return Err(fail(format!("destination is a clone of '{origin}'; destroy or promote it first")));
                }
                Plan::Replace(rec)
            }
            (None, Some(base), None) if entry.origin.is_some() => {
                let parent = props::parent_name(dst).ok_or_else(|| fail("a pool's root dataset cannot be a clone".into()))?;
                if !self.exists(parent) {
                    return Err(fail(format!("parent '{parent}' does not exist")));
                }
                let origin = self.received_origin(spec, entry, base.guid).ok_or_else(|| {
                    fail(format!("it is sent as a clone of snapshot '{}', which this pool does not have (guid {:#x})", base.name, base.guid))
                })?;
                Plan::Clone(origin)
            }
            (None, Some(_), None) => return Err(fail("dataset does not exist (an incremental stream needs its base)".into())),
            (None, Some(_), Some(rec)) => Plan::Incremental(rec),
        };
        // A raw stream goes onto a dataset of the same key (whose key is
        // not loaded here: tarn-send checks), a plain one onto a dataset
        // whose key is loaded if it is encrypted.
        let origin_rec = match &plan {
            Plan::Clone(o) => Some(self.record(o.split('@').next().unwrap_or_default()).map_err(Failure::Refused)?),
            _ => None,
        };
        if let Plan::Incremental(rec) | Plan::Resume(rec, _) = &plan {
            match (&entry.crypt, &rec.crypt) {
                (Some(p), Some(c)) if p.key_guid == c.key_guid => {}
                (Some(_), _) => return Err(fail("the raw stream's dataset is encrypted with another key (or the destination is not encrypted)".into())),
                (None, Some(c)) if self.obj.keys_loaded(c.key_guid) => {}
                (None, Some(_)) => return Err(fail("the destination is encrypted and its key is not loaded (load-key, or send raw with -w)".into())),
                (None, None) => {}
            }
        }
        if let Some(rec) = &origin_rec {
            // A clone shares its origin's key (or its absence).
            match (&entry.crypt, &rec.crypt) {
                (Some(p), Some(c)) if p.key_guid == c.key_guid => {}
                (None, Some(c)) if self.obj.keys_loaded(c.key_guid) => {}
                (None, None) => {}
                (None, Some(_)) => return Err(fail("its origin is encrypted and its key is not loaded (load-key, or send raw with -w)".into())),
                (Some(_), _) => return Err(fail("the raw stream's key is not its origin's here".into())),
            }
        }
        let mut opts = RecvOptions {
            resumable: spec.resumable,
            props: Some(write_props),
            raw: entry.crypt.as_ref().map(|c| crate::encryption::package_crypt_of(&c.cipher, c.key_guid)).transpose().map_err(Failure::Refused)?,
            journal: Some(journal.clone() as Arc<dyn tarn_send::RecvJournal>),
        };
        // -F's destruction (newer snapshots, the head's own changes) waits
        // until the stream is known to be whole: it is spooled and verified.
        let mut doomed: Vec<String> = Vec::new();
        let mut spool = false;
        let mut base: Option<(String, SnapRef)> = None;
        let target = match &plan {
            Plan::New => RecvTarget::New,
            // The clone is made with the journal's entry (below).
            Plan::Clone(_) => RecvTarget::New,
            Plan::Replace(_) => {
                // A replacement is all or nothing.
                opts.resumable = false;
                RecvTarget::New
            }
            Plan::Incremental(rec) => {
                let base_guid = entry.base.as_ref().map(|b| b.guid).unwrap_or(0);
                let chain = self.snapshots(Some(dst));
                let Some(pos) = chain.iter().position(|n| self.snapshot_record(n).is_ok_and(|r| r.guid == base_guid)) else {
                    return Err(fail(format!(
                        "the stream's base snapshot ({}) is not on the destination",
                        entry.base.as_ref().map(|b| b.name.as_str()).unwrap_or("?")
                    )));
                };
                let later = &chain[pos + 1..];
                if !later.is_empty() {
                    if !spec.force {
                        return Err(fail(format!(
                            "destination has snapshots newer than the stream's base ({}); use -F to destroy them",
                            later.join(", ")
                        )));
                    }
                    // Refuse now what would stop the destruction half-way.
                    for s in later {
                        let r = self.snapshot_record(s).map_err(Failure::Refused)?;
                        if !r.holds.is_empty() {
                            return Err(fail(format!("newer snapshot '{s}' is held ({}); release it first", r.holds.join(", "))));
                        }
                        if self.sending.lock().contains_key(s) {
                            return Err(fail(format!("newer snapshot '{s}' is being sent")));
                        }
                    }
                    if let Some(c) = self.state.read().datasets.iter().find(|(_, r)| r.origin.as_ref().is_some_and(|o| later.contains(o))) {
                        return Err(fail(format!("newer snapshot '{}' has a clone ('{}')", c.1.origin.clone().unwrap_or_default(), c.0)));
                    }
                    doomed = later.to_vec();
                }
                let snap = self.snap_ref(&chain[pos]).map_err(Failure::Refused)?;
                let modified = self.obj.open_objset(ObjsetId(rec.objset)).is_ok_and(|os| os.changed_since(snap.txg));
                if modified && !spec.force {
                    return Err(fail("destination has been modified since its most recent snapshot (use -F to roll it back first)".into()));
                }
                spool = spec.force && (modified || !doomed.is_empty());
                base = Some((chain[pos].clone(), snap));
                RecvTarget::Existing { head: ObjsetId(rec.objset), base: snap, force: spec.force }
            }
            Plan::Resume(rec, p) => RecvTarget::Resume { head: ObjsetId(rec.objset), token: p.inner.clone() },
        };
        // A snapshot the stream makes must not take a name in use (except by
        // one -F destroys, or one this very receive made before a resume).
        for sn in &entry.snapshots {
            let full = format!("{dst}@{}", sn.name);
            if let Ok(r) = self.snapshot_record(&full) {
                let resumed_own = matches!(plan, Plan::Resume(..)) && r.guid == sn.guid;
                if !doomed.contains(&full) && !resumed_own {
                    return Err(fail(format!("destination already has a snapshot named '{full}'")));
                }
            }
        }
        let mut spooled: Option<std::fs::File> = None;
        if spool {
            let file = self.spool(spec, input).map_err(|e| fail(format!("the stream did not verify, nothing was changed: {e}")))?;
            spooled = Some(file);
            for s in doomed.iter().rev() {
                self.destroy_snapshot(s, false).map_err(|e| fail(e.to_string()))?;
            }
        }
        if spec.force {
            if let Some((b, _)) = &base {
                // -F may roll the head back to the base: a bookmark of a
                // later state would no longer describe this dataset.
                let txg = self.snapshot_record(b).map_err(Failure::Refused)?.createtxg;
                self.forget_bookmarks_after(dst, txg).map_err(Failure::Refused)?;
            }
        }
        // What the dataset is when received whole, and what it was.
        // A volume arrives with the geometry of its newest snapshot.
        let volume = entry.snapshots.last().and_then(|s| s.volume);
        let (record, before, head, fresh, inner) = match &plan {
            Plan::New => {
                let guid = new_guid();
                let mut record = DatasetRecord {
                    guid,
                    creation: now_unix(),
                    crypt: self.received_crypt(spec, header, entry, guid),
                    volume,
                    ..Default::default()
                };
                recv_props.apply(&mut record);
                (record, Before::New, 0, true, String::new())
            }
            Plan::Clone(origin) => {
                let guid = new_guid();
                let mut record = DatasetRecord {
                    guid,
                    creation: now_unix(),
                    origin: Some(origin.clone()),
                    crypt: origin_rec.as_ref().and_then(|r| r.crypt.clone()).map(|c| crate::encryption::CryptRecord { keylocation: None, ..c }),
                    volume,
                    ..Default::default()
                };
                recv_props.apply(&mut record);
                let o = self.snapshot_record(origin).map_err(Failure::Refused)?;
                let before = Before::Clone { origin: origin.clone(), origin_objset: o.objset, origin_txg: o.createtxg };
                (record, before, 0, true, String::new())
            }
            Plan::Replace(rec) => {
                let mut new = rec.clone();
                new.crypt = self.received_crypt(spec, header, entry, rec.guid);
                recv_props.apply(&mut new);
                new.volume = volume;
                (new, Before::Replace { old: rec.clone() }, 0, false, String::new())
            }
            Plan::Incremental(rec) | Plan::Resume(rec, _) => {
                let mut new = rec.clone();
                new.recv = None;
                if volume.is_some() {
                    new.volume = volume;
                }
                recv_props.apply(&mut new);
                let (before, fresh, inner) = match (&plan, &base) {
                    (Plan::Resume(_, p), _) => (Before::Resume { old: rec.clone() }, p.fresh, p.inner.clone()),
                    (_, Some((name, snap))) => {
                        (Before::Incremental { old: rec.clone(), base: name.clone(), base_objset: snap.objset.0, base_txg: snap.txg }, false, String::new())
                    }
                    _ => unreachable!("an incremental has a base"),
                };
                (new, before, rec.objset, fresh, inner)
            }
        };
        let current = Current {
            index,
            name: entry.name.clone(),
            dst: dst.to_string(),
            before,
            record,
            entry_snaps: entry.snapshots.clone(),
            head,
            snaps: Vec::new(),
            inner,
            fresh,
        };
        let target = match &plan {
            Plan::Clone(origin) => {
                // The clone and the journal entry that names it, in one txg.
                let o = self.snapshot_record(origin).map_err(Failure::Refused)?;
                let head = {
                    let tx = self.obj.begin();
                    let head = self.obj.clone_objset(&tx, ObjsetId(o.objset), o.createtxg).map_err(|e| Failure::Refused(e.into()))?;
                    journal.update(&tx, |j| j.current = Some(Current { head: head.0, ..current })).map_err(|e| Failure::Refused(e.into()))?;
                    head
                };
                self.obj.sync().map_err(|e| Failure::Refused(e.into()))?;
                RecvTarget::Existing { head, base: SnapRef { objset: ObjsetId(o.objset), txg: o.createtxg, guid: o.guid }, force: false }
            }
            _ => {
                let tx = self.obj.begin();
                journal.update(&tx, |j| j.current = Some(current)).map_err(|e| Failure::Refused(e.into()))?;
                target
            }
        };
        let source: &mut dyn Read = match spooled.as_mut() {
            Some(f) => f,
            None => input,
        };
        let result = tarn_send::receive(&self.obj, source, target, &opts);
        // A receive onto an existing head may have rolled it back or
        // forward in place (the object layer then drops its in-memory
        // state): hand out a fresh handle whatever the outcome.
        if self.exists(dst) {
            self.refresh_objset(dst).map_err(Failure::Refused)?;
        }
        match result {
            Ok(outcome) => {
                let c = journal.snapshot().current.expect("the dataset being received");
                if let Before::Replace { old } = &c.before {
                    self.forget_bookmarks_after(dst, 0).map_err(Failure::Refused)?;
                    // A root replaced by a full stream has a new key: the
                    // old one's loaded state goes with it.
                    if c.record.crypt.as_ref().map(|k| &k.wrapped) != old.crypt.as_ref().map(|k| &k.wrapped) {
                        self.forget_root_key(old.guid);
                    }
                }
                let (names, _) = self.complete(journal, &c, &outcome.snapshots).map_err(Failure::Refused)?;
                if matches!(c.before, Before::New | Before::Replace { .. }) {
                    if let Some(k) = &c.record.crypt {
                        self.load_member_key(dst, k).map_err(Failure::Refused)?;
                    }
                }
                Ok((outcome.bytes, names))
            }
            Err(SendError::Interrupted { cause, partial }) => {
                // The stream's own position and snapshots are exact.
                let tx = self.obj.begin();
                journal
                    .update(&tx, |j| {
                        if let Some(c) = j.current.as_mut() {
                            c.inner = partial.token.clone();
                            c.head = partial.head.0;
                            c.snaps = partial.snapshots.iter().map(JournalSnap::from).collect();
                        }
                    })
                    .map_err(|e| Failure::Refused(e.into()))?;
                Err(Failure::Interrupted(recv_err(cause.to_string())))
            }
            Err(SendError::Modified) => Err(fail("destination has been modified since its most recent snapshot (use -F to roll it back first)".into())),
            Err(e @ (SendError::Truncated(_) | SendError::Io(_))) => {
                Err(Failure::Stopped(recv_err(format!("cannot receive into '{dst}': {STREAM_STOPPED}: {e}"))))
            }
            Err(e) => Err(fail(e.to_string())),
        }
    }

    /// `recv -A`: gives up the partial state of an interrupted receive.
    pub fn abort_receive(&self, dataset: &str) -> Result<()> {
        let mut rec = self.record(dataset)?;
        let Some(p) = rec.recv.clone() else {
            return Err(recv_err(format!("'{dataset}' has no partially received stream")));
        };
        if p.inner.is_empty() {
            // Only a marker: the datasets received so far are complete.
            rec.recv = None;
            return self.put_dataset(dataset, rec);
        }
        let newest = self.snapshots(Some(dataset)).pop();
        match newest {
            Some(n) => {
                let s = self.snap_ref(&n)?;
                tarn_send::abort_partial(&self.obj, ObjsetId(rec.objset), Some(&s)).map_err(send_err)?;
                rec.recv = None;
                self.put_dataset(dataset, rec)
            }
            None => {
                if !p.fresh {
                    return Err(DsError::Corrupt(format!("'{dataset}': partial receive without a base snapshot")));
                }
                if self.subtree(dataset).len() > 1 {
                    return Err(recv_err(format!("cannot abort the receive of '{dataset}': it has children")));
                }
                let _change = self.change.lock();
                let tx = self.obj.begin();
                self.obj.destroy_objset(&tx, ObjsetId(rec.objset))?;
                Zap::remove(&self.obj.mos(), &tx, self.datasets_zap, dataset.as_bytes())?;
                drop(tx);
                self.obj.sync()?;
                let mut state = self.state.write();
                state.datasets.remove(dataset);
                state.objsets.remove(dataset);
                Ok(())
            }
        }
    }
}

/// How to take back one dataset's part of a failed package.
impl Pool {
    /// The encryption of a dataset a raw package creates (dataset guid
    /// `guid`): under its sender's encryption root when the package brought
    /// that root too and it arrived as a root here (one `load-key` opens
    /// both, as on the sender); else an encryption root of its own, asking
    /// for the sender's key (`keylocation=prompt`), as ZFS makes a dataset
    /// received raw without its parent.
    /// (The root must be the one this package brought — the same wrapped
    /// key as its entry — never some other dataset of this pool the
    /// package names.)
    /// The snapshot a clone of the package is made from: the one with the
    /// origin's guid, in the origin's dataset of this package (`-R`), or
    /// anywhere in the pool (`send -i origin@snap clone@x`).
    fn received_origin(&self, spec: &RecvSpec, entry: &PackageDataset, guid: u64) -> Option<String> {
        let within = entry.origin.as_ref()?.dataset.as_ref().map(|rel| join(&spec.target, rel));
        let state = self.state.read();
        state
            .snapshots
            .iter()
            .filter(|(n, r)| r.guid == guid && within.as_ref().is_none_or(|d| n.split('@').next() == Some(d.as_str())))
            .map(|(n, _)| n.clone())
            .next()
    }

    fn received_crypt(&self, spec: &RecvSpec, header: &PackageHeader, entry: &PackageDataset, guid: u64) -> Option<crate::encryption::CryptRecord> {
        let c = entry.crypt.as_ref()?;
        let root = c.root.as_deref().and_then(|rel| {
            let sent = header.datasets.iter().find(|d| d.name == rel)?.crypt.as_ref()?;
            let r = self.record(&join(&spec.target, rel)).ok()?;
            let k = r.crypt.as_ref()?;
            (k.root == r.guid && k.key_guid == sent.key_guid && k.wrapped == sent.wrapped && k.wrapped_by_same_key(&c.wrapped)).then_some(r)
        });
        Some(crate::encryption::CryptRecord {
            cipher: c.cipher.clone(),
            key_guid: c.key_guid,
            root: root.as_ref().map_or(guid, |r| r.guid),
            wrapped: c.wrapped.clone(),
            keylocation: if root.is_some() { None } else { Some("prompt".into()) },
        })
    }
}

/// How a dataset's receive failed, which decides what `-s` keeps.
enum Failure {
    /// The stream stopped inside the dataset's stream (or was damaged):
    /// the receive kept what arrived.
    Interrupted(DsError),
    /// The stream stopped before the dataset's stream began.
    Stopped(DsError),
    /// Refused or failed otherwise: nothing of the dataset is kept.
    Refused(DsError),
}

impl Failure {
    fn into_error(self) -> DsError {
        match self {
            Failure::Interrupted(e) | Failure::Stopped(e) | Failure::Refused(e) => e,
        }
    }
}
