//! The sending half of replication: a `tarn send` resolved into a plan
//! (which datasets, which snapshots, from which base) and the package
//! written from it.

use std::collections::BTreeMap;
use std::io::Write;

use tarn_send::{SendBase, SnapRef};
use tarn_obj::ObjsetId;

use super::*;
use crate::pool::{DatasetRecord, Pool};
use crate::snapshots::validate_snapshot_name;
use crate::{props, Result};

impl Pool {
    pub(super) fn snap_ref(&self, full: &str) -> Result<SnapRef> {
        let r = self.snapshot_record(full)?;
        Ok(SnapRef { objset: ObjsetId(r.objset), txg: r.createtxg, guid: r.guid })
    }

    fn package_snap(&self, full: &str) -> Result<PackageSnap> {
        let r = self.snapshot_record(full)?;
        let name = full.split_once('@').map(|(_, s)| s.to_string()).unwrap_or_default();
        Ok(PackageSnap { name, guid: r.guid, creation: r.creation, volume: r.volume })
    }

    /// Resolves `tarn send` arguments into a plan.
    pub fn send_plan(&self, spec: &SendSpec) -> Result<SendPlan> {
        let (top, snap) = validate_snapshot_name(&spec.snapshot)?;
        let top_rec = self.snapshot_record(&spec.snapshot)?;
        if let Some(mark) = spec.from.as_deref().filter(|f| f.contains('#')) {
            return self.send_plan_from_bookmark(spec, mark, &top, &top_rec);
        }
        // `send -i origin@snap clone@x`: one clone, from its origin.
        let mut from_origin: Option<String> = None;
        let from_name = match spec.from.as_deref() {
            None => None,
            Some(f) => {
                let (fds, fsnap) = f
                    .split_once('@')
                    .ok_or_else(|| recv_err(format!("'{f}': the base of an incremental send is a snapshot (@name or fs@name)")))?;
                if !fds.is_empty() && fds != top {
                    if spec.recursive || self.record(&top)?.origin.as_deref() != Some(f) {
                        return Err(recv_err(format!("'{f}' is not a snapshot of '{top}' (nor its origin)")));
                    }
                    from_origin = Some(f.to_string());
                    None
                } else {
                    let full = format!("{top}@{fsnap}");
                    let base = self.snapshot_record(&full).map_err(|_| recv_err(format!("snapshot '{full}' does not exist")))?;
                    if base.createtxg >= top_rec.createtxg {
                        return Err(recv_err(format!("'{full}' is not earlier than '{}'", spec.snapshot)));
                    }
                    Some(fsnap.to_string())
                }
            }
        };
        let datasets = if spec.recursive { self.send_order(&top, &snap) } else { vec![(top.clone(), from_origin)] };
        let series = spec.series || spec.recursive;
        let mut header = PackageHeader {
            version: PACKAGE_VERSION,
            source: top.clone(),
            send: spec.clone(),
            recursive: spec.recursive,
            props: spec.props || spec.recursive,
            datasets: vec![],
            resume: None,
            sender_datasets: spec.recursive.then(|| self.subtree(&top).iter().map(|d| relative(&top, d)).collect()),
        };
        let mut streams = Vec::new();
        // Dataset guid -> relative name, of the datasets in the package
        // (parents come first: a root is known before its children).
        let mut in_package: BTreeMap<u64, String> = BTreeMap::new();
        for (ds, origin) in datasets {
            let target = format!("{ds}@{snap}");
            let Ok(target_rec) = self.snapshot_record(&target) else { continue };
            let chain = self.snapshots(Some(&ds));
            let base = from_name.as_ref().map(|f| format!("{ds}@{f}")).filter(|b| chain.contains(b));
            // A clone the receiver does not have yet goes from its origin.
            let origin = origin.filter(|_| base.is_none());
            let base = base.or_else(|| origin.clone());
            let base_txg = match &base {
                Some(b) => self.snapshot_record(b)?.createtxg,
                None => 0,
            };
            let mut names: Vec<String> = if series {
                chain
                    .iter()
                    .filter(|n| {
                        self.snapshot_record(n).is_ok_and(|r| r.createtxg > base_txg && r.createtxg <= target_rec.createtxg)
                    })
                    .cloned()
                    .collect()
            } else {
                vec![target.clone()]
            };
            if names.last() != Some(&target) {
                names.push(target.clone());
            }
            let snaps = names.iter().map(|n| self.snap_ref(n)).collect::<Result<Vec<_>>>()?;
            let from = base.as_deref().map(|b| self.snap_ref(b).map(SendBase::Snapshot)).transpose()?;
            let ds_rec = self.record(&ds)?;
            let props = if header.props { ds_rec.own_props() } else { BTreeMap::new() };
            let sender_snapshots = spec.recursive.then(|| chain.iter().filter_map(|n| self.snapshot_record(n).ok()).map(|r| r.guid).collect());
            header.datasets.push(PackageDataset {
                name: relative(&top, &ds),
                base: base.as_deref().map(|b| self.package_snap(b)).transpose()?,
                snapshots: names.iter().map(|n| self.package_snap(n)).collect::<Result<Vec<_>>>()?,
                props,
                crypt: self.package_crypt(&ds, spec.raw || spec.recursive)?.map(|mut c| {
                    c.root = ds_rec.crypt.as_ref().filter(|k| k.root != ds_rec.guid).and_then(|k| in_package.get(&k.root).cloned());
                    c
                }),
                origin: origin.as_deref().map(|o| PackageOrigin {
                    dataset: spec.recursive.then(|| relative(&top, o.split('@').next().unwrap_or_default())),
                }),
                sender_snapshots,
            });
            in_package.insert(ds_rec.guid, relative(&top, &ds));
            names.extend(base);
            streams.push(PlannedStream { index: header.datasets.len() - 1, names, snaps, from, resume: None });
        }
        if header.datasets.is_empty() {
            return Err(recv_err(format!("snapshot '{}' does not exist", spec.snapshot)));
        }
        Ok(SendPlan { header, streams })
    }

    /// The datasets `send -R top@snap` sends, in package order: parents
    /// before children, and a clone after its origin's dataset, when the
    /// clone is sent as one (its origin snapshot is sent too: the origin's
    /// dataset is in the tree and its `@snap` is no older than the origin).
    /// With each, the origin it is sent from. Where the two orders cannot
    /// both hold (a clone of a snapshot of its own descendant), the clone
    /// goes as an independent dataset.
    fn send_order(&self, top: &str, snap: &str) -> Vec<(String, Option<String>)> {
        let sent: Vec<String> = self.subtree(top).into_iter().filter(|d| self.snapshot_record(&format!("{d}@{snap}")).is_ok()).collect();
        let mut origin_of: BTreeMap<String, String> = BTreeMap::new();
        for d in &sent {
            let Some(origin) = self.record(d).ok().and_then(|r| r.origin) else { continue };
            let Some((ods, _)) = origin.split_once('@') else { continue };
            let (Ok(o), Ok(at)) = (self.snapshot_record(&origin), self.snapshot_record(&format!("{ods}@{snap}"))) else { continue };
            if sent.iter().any(|s| s == ods) && o.createtxg <= at.createtxg {
                origin_of.insert(d.clone(), origin);
            }
        }
        let mut left = sent.clone();
        let mut placed: Vec<String> = Vec::new();
        while !left.is_empty() {
            let ready = |d: &String, placed: &[String], origin_of: &BTreeMap<String, String>| {
                let parent_ok = props::parent_name(d).is_none_or(|p| !sent.iter().any(|s| s == p) || placed.iter().any(|x| x == p));
                let origin_ok = origin_of.get(d).is_none_or(|o| placed.iter().any(|x| Some(x.as_str()) == o.split('@').next()));
                parent_ok && origin_ok
            };
            match left.iter().position(|d| ready(d, &placed, &origin_of)) {
                Some(i) => placed.push(left.remove(i)),
                None => {
                    // A cycle: the first clone left goes on its own.
                    let first = left.iter().find(|d| origin_of.contains_key(*d)).cloned();
                    match first {
                        Some(d) => {
                            origin_of.remove(&d);
                        }
                        None => placed.push(left.remove(0)),
                    }
                }
            }
        }
        placed.into_iter().map(|d| {
            let o = origin_of.get(&d).cloned();
            (d, o)
        }).collect()
    }

    /// `send [-I] -i fs#mark fs@snap`: one dataset, from a bookmark (the
    /// receiver holds the snapshot the bookmark was made from).
    fn send_plan_from_bookmark(&self, spec: &SendSpec, mark: &str, top: &str, top_rec: &DatasetRecord) -> Result<SendPlan> {
        if spec.recursive {
            return Err(recv_err("a replication stream (-R) is sent from a snapshot, not from a bookmark"));
        }
        let (full, base) = self.send_base_for(mark, &spec.snapshot)?;
        let bm = self.bookmark_record(&full)?;
        let names: Vec<String> = if spec.series {
            self.snapshots(Some(top))
                .into_iter()
                .filter(|n| self.snapshot_record(n).is_ok_and(|r| r.createtxg > base.txg() && r.createtxg <= top_rec.createtxg))
                .collect()
        } else {
            vec![spec.snapshot.clone()]
        };
        let snaps = names.iter().map(|n| self.snap_ref(n)).collect::<Result<Vec<_>>>()?;
        let short = full.split_once('#').map(|x| x.1.to_string()).unwrap_or_default();
        let header = PackageHeader {
            version: PACKAGE_VERSION,
            source: top.to_string(),
            send: spec.clone(),
            recursive: false,
            props: spec.props,
            datasets: vec![PackageDataset {
                name: String::new(),
                base: Some(PackageSnap { name: short, guid: bm.guid, creation: bm.creation, volume: None }),
                snapshots: names.iter().map(|n| self.package_snap(n)).collect::<Result<Vec<_>>>()?,
                props: if spec.props { self.record(top)?.own_props() } else { BTreeMap::new() },
                crypt: self.package_crypt(top, spec.raw)?,
                origin: None,
                sender_snapshots: None,
            }],
            resume: None,
            sender_datasets: None,
        };
        Ok(SendPlan { header, streams: vec![PlannedStream { index: 0, names, snaps, from: Some(base), resume: None }] })
    }

    /// How dataset `ds` travels in a raw package (`raw` asked for and
    /// `ds` encrypted), else None.
    fn package_crypt(&self, ds: &str, raw: bool) -> Result<Option<PackageCrypt>> {
        if !raw {
            return Ok(None);
        }
        Ok(self.record(ds)?.crypt.map(|c| PackageCrypt { cipher: c.cipher, key_guid: c.key_guid, wrapped: c.wrapped, root: None }))
    }

    /// The plan of the send that a `receive_resume_token` continues.
    pub fn send_plan_resume(&self, token: &str) -> Result<SendPlan> {
        let t = decode_token(token)?;
        let mut plan = self.send_plan(&t.spec)?;
        if t.index >= plan.header.datasets.len() {
            return Err(recv_err("the resume token does not match the snapshots on this pool"));
        }
        if plan.header.datasets[t.index].name != t.name {
            return Err(recv_err(format!(
                "the resume token continues dataset '{}', but the send now has '{}' there (datasets or snapshots changed since)",
                t.name, plan.header.datasets[t.index].name
            )));
        }
        if t.inner.is_empty() {
            // Restart at the beginning of dataset `index`'s stream.
            plan.streams.retain(|s| s.index >= t.index);
            plan.header.resume = Some(PackageResume { index: t.index, inner: String::new(), name: t.name });
            return Ok(plan);
        }
        let inner = tarn_send::ResumeToken::decode(&t.inner).map_err(send_err)?;
        let stream = plan
            .streams
            .iter()
            .find(|s| s.index == t.index)
            .ok_or_else(|| recv_err("the resume token does not match the snapshots on this pool"))?;
        let guids: Vec<u64> = stream.snaps.iter().map(|s| s.guid).collect();
        let from_ok = stream.from.map_or(0, |f| f.guid()) == inner.from_guid || guids.contains(&inner.from_guid);
        if !guids.contains(&inner.series_last_guid) || !from_ok {
            return Err(recv_err("the resume token names snapshots that are not on this pool (destroyed or renamed since?)"));
        }
        plan.streams.retain(|s| s.index >= t.index);
        if let Some(first) = plan.streams.first_mut() {
            first.resume = Some(t.inner.clone());
        }
        plan.header.resume = Some(PackageResume { index: t.index, inner: t.inner, name: t.name });
        Ok(plan)
    }

    /// Snapshots a send is reading now (export waits for them).
    pub fn snapshots_being_sent(&self) -> Vec<String> {
        self.sending.lock().keys().cloned().collect()
    }

    /// Writes the package of `plan`; returns the bytes written.
    pub fn send_package(&self, plan: &SendPlan, out: &mut dyn Write) -> Result<u64> {
        // The snapshots stay until the send is over (as if held). Claimed
        // under the change lock, so a destroy either ran before (and the
        // check below sees it) or waits for the claim and is refused.
        let names: Vec<String> = plan.streams.iter().flat_map(|s| s.names.iter().cloned()).collect();
        let _claim = {
            let _change = self.change.lock();
            for n in &names {
                self.snapshot_record(n).map_err(|_| recv_err(format!("snapshot '{n}' was destroyed")))?;
            }
            SendClaim::new(self, names)
        };
        let mut counted = CountingWriter { inner: out, bytes: 0 };
        write_header(&plan.header, &mut counted)?;
        for s in &plan.streams {
            let r = match (&s.resume, plan.header.datasets[s.index].crypt.is_some()) {
                (t, true) => tarn_send::send_raw(&self.obj, &s.snaps, s.from.as_ref(), t.as_deref(), &mut counted),
                (Some(t), false) => tarn_send::send_series_resume(&self.obj, &s.snaps, s.from.as_ref(), t, &mut counted),
                (None, false) => tarn_send::send_series(&self.obj, &s.snaps, s.from.as_ref(), &mut counted),
            };
            r.map_err(send_err)?;
        }
        counted.flush().map_err(|e| recv_err(format!("cannot write the stream: {e}")))?;
        Ok(counted.bytes)
    }

    /// `send -nv`: the size of each dataset's stream, exact; the first
    /// entry's bytes include the package header's.
    pub fn send_estimate(&self, plan: &SendPlan) -> Result<Vec<Estimate>> {
        let mut header = Vec::new();
        write_header(&plan.header, &mut header)?;
        let mut extra = header.len() as u64;
        let mut out = Vec::new();
        for s in &plan.streams {
            let d = &plan.header.datasets[s.index];
            let bytes = match (&s.resume, d.crypt.is_some()) {
                (t, true) => tarn_send::estimate_raw(&self.obj, &s.snaps, s.from.as_ref(), t.as_deref()),
                (Some(t), false) => tarn_send::estimate_resume(&self.obj, &s.snaps, s.from.as_ref(), t),
                (None, false) => tarn_send::estimate_series(&self.obj, &s.snaps, s.from.as_ref()),
            }
            .map_err(send_err)?
                + std::mem::take(&mut extra);
            out.push(Estimate {
                dataset: join(&plan.header.source, &d.name),
                from: d.base.as_ref().map(|b| format!("{}{}", if s.from.is_some_and(|f| f.is_bookmark()) { '#' } else { '@' }, b.name)),
                snapshots: d.snapshots.iter().map(|s| s.name.clone()).collect(),
                bytes,
            });
        }
        Ok(out)
    }
}

/// Marks snapshots as being sent while alive.
struct SendClaim<'p> {
    pool: &'p Pool,
    names: Vec<String>,
}

impl<'p> SendClaim<'p> {
    fn new(pool: &'p Pool, names: Vec<String>) -> SendClaim<'p> {
        let mut sending = pool.sending.lock();
        for n in &names {
            *sending.entry(n.clone()).or_default() += 1;
        }
        drop(sending);
        SendClaim { pool, names }
    }
}

impl Drop for SendClaim<'_> {
    fn drop(&mut self) {
        let mut sending = self.pool.sending.lock();
        for n in &self.names {
            if let Some(count) = sending.get_mut(n) {
                *count -= 1;
                if *count == 0 {
                    sending.remove(n);
                }
            }
        }
    }
}

struct CountingWriter<'a> {
    inner: &'a mut dyn Write,
    bytes: u64,
}

impl Write for CountingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
