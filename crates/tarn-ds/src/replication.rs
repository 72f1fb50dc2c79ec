//! Replication of datasets: `tarn send` / `tarn recv` at the dataset level.
//!
//! `tarn-send` moves one object set's snapshots as a verified stream; it
//! knows object sets, txgs and guids but no names. This layer adds what a
//! user names: datasets, snapshot names, properties and dataset trees. A
//! stream as `tarn send` writes it is a *package* (`docs/send-stream.md`,
//! "Package"):
//!
//! ```text
//! package := "TARNPKG1" | version u32 | header length u32 | header (JSON)
//!            | blake3(magic..header)[0..16] | stream*
//! ```
//!
//! The header lists the datasets sent (names relative to the sent dataset,
//! "" for itself), for each the snapshots its stream creates (name, guid,
//! creation time) and the base it applies to, and with `-p`/`-R` their
//! local properties. One `tarn-send` stream follows per dataset, in header
//! order (parents before children).
//!
//! Resumable receive (`recv -s`): when a stream stops, the dataset being
//! received keeps its partial state (unmounted) and a `receive_resume_token`
//! that names the original send (snapshot, base, flags), the dataset's
//! position in the package and the inner stream's own token. `send -t`
//! rebuilds the same package from the token and continues at that dataset,
//! inside its stream — in the middle of a `-I` series or an `-R` tree.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use serde::{Deserialize, Serialize};
use tarn_obj::zap::Zap;
use tarn_obj::{ObjsetId, WriteProps};
use tarn_send::{RecvOptions, RecvTarget, SendBase, SendError, SnapRef};

use crate::pool::{now_unix, new_guid, validate_dataset_name, DatasetRecord, Pool};
use crate::props;
use crate::snapshots::validate_snapshot_name;
use crate::{DsError, Result};

const PACKAGE_MAGIC: &[u8; 8] = b"TARNPKG1";
const PACKAGE_VERSION: u32 = 1;
const MAX_HEADER: u32 = 16 << 20;
const TOKEN_PREFIX: &str = "tarn1-";
/// Marks an error where the stream ended (or could not be read) before a
/// dataset's stream began.
const STREAM_STOPPED: &str = "the stream stopped";

/// A snapshot as the package names it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PackageSnap {
    /// The part after `@`.
    pub name: String,
    pub guid: u64,
    /// Unix seconds on the sender.
    pub creation: u64,
    /// A volume's snapshot: its geometry then (the received snapshot keeps
    /// it, the received volume takes the newest's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<crate::volumes::VolumeRecord>,
}

/// One dataset of a package.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PackageDataset {
    /// Relative to the sent dataset: "" for itself, `a/b` for a descendant.
    pub name: String,
    /// The snapshot (or bookmark) the stream applies to; `None`: full.
    pub base: Option<PackageSnap>,
    /// The snapshots the stream creates, oldest first.
    pub snapshots: Vec<PackageSnap>,
    /// Local properties (`-p`, `-R`), stored form.
    #[serde(default)]
    pub props: BTreeMap<String, String>,
    /// Sent raw (an encrypted dataset with `-w` or `-R`): how it is
    /// encrypted and its master key as stored, wrapped (never a key in
    /// the clear). Its stream is a raw one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crypt: Option<PackageCrypt>,
}

/// An encrypted dataset of a raw package.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PackageCrypt {
    /// `aes-128-gcm` or `aes-256-gcm`.
    pub cipher: String,
    pub key_guid: u64,
    /// The wrapped master key (hex; its KDF and parameters inside), as
    /// the sender's record holds it: the sender's passphrase or key opens
    /// it on the receiver.
    pub wrapped: String,
    /// The relative name, in this package, of the dataset's encryption
    /// root when that is another dataset of the package (its master key is
    /// wrapped by that root's wrapping key): the receiver keeps the
    /// hierarchy, so one `load-key` of the root opens both. Absent: the
    /// dataset arrives as an encryption root of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
}

/// Where a resumed package starts.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PackageResume {
    /// Index into `datasets` of the dataset whose stream is resumed; the
    /// ones before it were received already and have no stream.
    pub index: usize,
    /// The inner stream's token.
    pub inner: String,
    /// The relative name of dataset `index` (must match on the receiver).
    #[serde(default)]
    pub name: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PackageHeader {
    pub version: u32,
    /// The sent dataset's full name on the sender (informational).
    pub source: String,
    /// The send as it was asked for (a resume token repeats it).
    pub send: SendSpec,
    pub recursive: bool,
    pub props: bool,
    pub datasets: Vec<PackageDataset>,
    #[serde(default)]
    pub resume: Option<PackageResume>,
}

/// What `tarn send` was asked for.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct SendSpec {
    /// `fs@snap`.
    pub snapshot: String,
    /// `-i`/`-I` base: `fs@a`, `@a` or `fs#bookmark`.
    pub from: Option<String>,
    /// `-I`: every snapshot between the base and `snapshot`.
    pub series: bool,
    /// `-R`: the dataset tree, all snapshots, properties.
    pub recursive: bool,
    /// `-p`: properties.
    pub props: bool,
    /// `-w`: encrypted datasets as stored (raw); `-R` implies it for them.
    #[serde(default)]
    pub raw: bool,
}

/// `receive_resume_token`'s contents.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
struct SendToken {
    spec: SendSpec,
    index: usize,
    /// The relative name of dataset `index` (checked on both sides).
    #[serde(default)]
    name: String,
    inner: String,
}

/// A send, resolved: the header and, per dataset with a stream, what to send.
pub struct SendPlan {
    pub header: PackageHeader,
    streams: Vec<PlannedStream>,
}

struct PlannedStream {
    index: usize,
    /// Full names of `snaps` and of the base snapshot (kept while sending).
    names: Vec<String>,
    snaps: Vec<SnapRef>,
    from: Option<SendBase>,
    resume: Option<String>,
}

/// One line of `send -nv`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Estimate {
    /// Full name of the dataset on the sender.
    pub dataset: String,
    /// Base: `@snapshot` or `#bookmark`; `None` for a full stream.
    pub from: Option<String>,
    /// Snapshot names, oldest first.
    pub snapshots: Vec<String>,
    pub bytes: u64,
}

/// What `tarn recv` was asked for.
#[derive(Clone, Debug, Default)]
pub struct RecvSpec {
    /// The dataset the package's top dataset becomes.
    pub target: String,
    /// `-F`: roll back to the base (destroying later snapshots), or replace
    /// an existing dataset with a full stream.
    pub force: bool,
    /// `-s`: keep partial state on interruption.
    pub resumable: bool,
    /// `-o prop=value` (top dataset; descendants inherit).
    pub set: Vec<(String, String)>,
    /// `-x prop`: received values of these are ignored.
    pub exclude: Vec<String>,
    /// Where a stream is spooled to be verified before `-F` destroys
    /// anything (default: the system's temporary directory).
    pub spool_dir: Option<std::path::PathBuf>,
}

/// What a receive did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RecvReport {
    /// Datasets created or changed, parents first.
    pub datasets: Vec<String>,
    /// Snapshots received (full names).
    pub snapshots: Vec<String>,
    pub bytes: u64,
    /// Properties not applied (one line each).
    pub warnings: Vec<String>,
}

/// A partially received stream kept by `recv -s` (in the dataset record).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RecvPartial {
    /// `receive_resume_token`.
    pub token: String,
    /// The inner stream's token.
    pub inner: String,
    /// The dataset was created by the interrupted receive (abort destroys it
    /// unless a snapshot of it was completed).
    pub fresh: bool,
}

fn recv_err(m: impl Into<String>) -> DsError {
    DsError::Recv(m.into())
}

fn send_err(e: SendError) -> DsError {
    match e {
        SendError::Obj(o) => DsError::Obj(o),
        other => DsError::Recv(other.to_string()),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()).collect()
}

fn encode_token(t: &SendToken) -> String {
    let json = serde_json::to_vec(t).unwrap_or_default();
    let sum = blake3::hash(&json);
    format!("{TOKEN_PREFIX}{}-{}", hex(&json), hex(&sum.as_bytes()[..8]))
}

fn decode_token(s: &str) -> Result<SendToken> {
    let bad = || recv_err("invalid resume token (it is the receive_resume_token property of the receiving dataset)");
    let body = s.trim().strip_prefix(TOKEN_PREFIX).ok_or_else(bad)?;
    let (json, sum) = body.rsplit_once('-').ok_or_else(bad)?;
    let json = unhex(json).ok_or_else(bad)?;
    if unhex(sum).as_deref() != Some(&blake3::hash(&json).as_bytes()[..8]) {
        return Err(bad());
    }
    serde_json::from_slice(&json).map_err(|_| bad())
}

/// The snapshot a resume token continues (to find its pool).
pub fn token_snapshot(token: &str) -> Result<String> {
    Ok(decode_token(token)?.spec.snapshot)
}

/// Writes the package header.
fn write_header(h: &PackageHeader, out: &mut dyn Write) -> Result<()> {
    let json = serde_json::to_vec(h).map_err(|e| DsError::Corrupt(e.to_string()))?;
    let mut buf = Vec::with_capacity(json.len() + 32);
    buf.extend_from_slice(PACKAGE_MAGIC);
    buf.extend_from_slice(&PACKAGE_VERSION.to_le_bytes());
    buf.extend_from_slice(&(json.len() as u32).to_le_bytes());
    buf.extend_from_slice(&json);
    let sum = blake3::hash(&buf);
    buf.extend_from_slice(&sum.as_bytes()[..16]);
    out.write_all(&buf).map_err(|e| recv_err(format!("cannot write the stream: {e}")))
}

fn read_exact(input: &mut dyn Read, buf: &mut [u8], what: &str) -> Result<()> {
    input.read_exact(buf).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            recv_err(format!("stream truncated inside the {what}"))
        } else {
            recv_err(format!("cannot read the stream: {e}"))
        }
    })
}

/// Reads and verifies a package header.
pub fn read_header(input: &mut dyn Read) -> Result<PackageHeader> {
    let mut fixed = [0u8; 16];
    read_exact(input, &mut fixed, "package header")?;
    if &fixed[0..8] != PACKAGE_MAGIC {
        if &fixed[0..8] == b"TARNSND1" {
            return Err(recv_err("this is a bare object-set stream, not a 'tarn send' stream"));
        }
        return Err(recv_err("not a tarn send stream (bad magic)"));
    }
    let version = u32::from_le_bytes([fixed[8], fixed[9], fixed[10], fixed[11]]);
    if version != PACKAGE_VERSION {
        return Err(recv_err(format!("unsupported stream version {version}")));
    }
    let len = u32::from_le_bytes([fixed[12], fixed[13], fixed[14], fixed[15]]);
    if len > MAX_HEADER {
        return Err(recv_err(format!("corrupt stream: header length {len}")));
    }
    let mut json = vec![0u8; len as usize];
    read_exact(input, &mut json, "package header")?;
    let mut sum = [0u8; 16];
    read_exact(input, &mut sum, "package header")?;
    let mut hasher = blake3::Hasher::new();
    hasher.update(&fixed);
    hasher.update(&json);
    if hasher.finalize().as_bytes()[..16] != sum {
        return Err(recv_err("corrupt stream: the header checksum does not match"));
    }
    let h: PackageHeader =
        serde_json::from_slice(&json).map_err(|e| recv_err(format!("corrupt stream: header does not decode: {e}")))?;
    check_header(&h)?;
    Ok(h)
}

fn check_header(h: &PackageHeader) -> Result<()> {
    let bad = |m: String| recv_err(format!("corrupt stream: {m}"));
    if h.datasets.is_empty() {
        return Err(bad("no datasets".into()));
    }
    if !h.datasets[0].name.is_empty() {
        return Err(bad("the first dataset is not the sent one".into()));
    }
    let mut seen = std::collections::BTreeSet::new();
    for d in &h.datasets {
        if !d.name.is_empty() {
            validate_dataset_name(&format!("x/{}", d.name)).map_err(|e| bad(format!("dataset name '{}': {e}", d.name)))?;
        }
        if !seen.insert(d.name.clone()) {
            return Err(bad(format!("dataset '{}' listed twice", d.name)));
        }
        if d.snapshots.is_empty() {
            return Err(bad(format!("dataset '{}' has no snapshots", d.name)));
        }
        for s in d.snapshots.iter().chain(d.base.iter()) {
            validate_snapshot_name(&format!("x@{}", s.name)).map_err(|e| bad(e.to_string()))?;
        }
        let mut names: Vec<&str> = d.snapshots.iter().map(|s| s.name.as_str()).collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err(bad(format!("dataset '{}' lists a snapshot name twice", d.name)));
        }
        for k in d.props.keys() {
            props::check_name(k).map_err(|e| bad(e.to_string()))?;
        }
        if let Some(c) = &d.crypt {
            crate::encryption::check_package_crypt(&c.cipher, c.key_guid, &c.wrapped).map_err(|e| bad(format!("dataset '{}': {e}", d.name)))?;
        }
    }
    if let Some(r) = &h.resume {
        if r.index >= h.datasets.len() {
            return Err(bad("resume position past the last dataset".into()));
        }
    }
    Ok(())
}

fn relative(top: &str, name: &str) -> String {
    if name == top {
        String::new()
    } else {
        name.strip_prefix(top).and_then(|r| r.strip_prefix('/')).unwrap_or(name).to_string()
    }
}

fn join(top: &str, rel: &str) -> String {
    if rel.is_empty() {
        top.to_string()
    } else {
        format!("{top}/{rel}")
    }
}

impl Pool {
    fn snap_ref(&self, full: &str) -> Result<SnapRef> {
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
        let from_name = match spec.from.as_deref() {
            None => None,
            Some(f) => {
                let (fds, fsnap) = f
                    .split_once('@')
                    .ok_or_else(|| recv_err(format!("'{f}': the base of an incremental send is a snapshot (@name or fs@name)")))?;
                if !fds.is_empty() && fds != top {
                    return Err(recv_err(format!("'{f}' is not a snapshot of '{top}'")));
                }
                let full = format!("{top}@{fsnap}");
                let base = self.snapshot_record(&full).map_err(|_| recv_err(format!("snapshot '{full}' does not exist")))?;
                if base.createtxg >= top_rec.createtxg {
                    return Err(recv_err(format!("'{full}' is not earlier than '{}'", spec.snapshot)));
                }
                Some(fsnap.to_string())
            }
        };
        let datasets = if spec.recursive { self.subtree(&top) } else { vec![top.clone()] };
        let series = spec.series || spec.recursive;
        let mut header = PackageHeader {
            version: PACKAGE_VERSION,
            source: top.clone(),
            send: spec.clone(),
            recursive: spec.recursive,
            props: spec.props || spec.recursive,
            datasets: vec![],
            resume: None,
        };
        let mut streams = Vec::new();
        // Dataset guid -> relative name, of the datasets in the package
        // (parents come first: a root is known before its children).
        let mut in_package: BTreeMap<u64, String> = BTreeMap::new();
        for ds in datasets {
            let target = format!("{ds}@{snap}");
            let Ok(target_rec) = self.snapshot_record(&target) else { continue };
            let chain = self.snapshots(Some(&ds));
            let base = from_name.as_ref().map(|f| format!("{ds}@{f}")).filter(|b| chain.contains(b));
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
            let props = if header.props { ds_rec.props.clone() } else { BTreeMap::new() };
            header.datasets.push(PackageDataset {
                name: relative(&top, &ds),
                base: base.as_deref().map(|b| self.package_snap(b)).transpose()?,
                snapshots: names.iter().map(|n| self.package_snap(n)).collect::<Result<Vec<_>>>()?,
                props,
                crypt: self.package_crypt(&ds, spec.raw || spec.recursive)?.map(|mut c| {
                    c.root = ds_rec.crypt.as_ref().filter(|k| k.root != ds_rec.guid).and_then(|k| in_package.get(&k.root).cloned());
                    c
                }),
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
                props: if spec.props { self.record(top)?.props } else { BTreeMap::new() },
                crypt: self.package_crypt(top, spec.raw)?,
            }],
            resume: None,
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

    fn register_snapshots(&self, dataset: &str, entry: &PackageDataset, made: &[tarn_send::ReceivedSnap]) -> Result<Vec<String>> {
        let _change = self.change.lock();
        let mos = self.obj.mos();
        let tx = self.obj.begin();
        let mut names = Vec::new();
        let mut records = Vec::new();
        for s in made {
            let (short, creation, volume) = match entry.snapshots.iter().find(|p| p.guid == s.guid) {
                Some(p) => (p.name.clone(), p.creation, p.volume),
                None => (format!("recv-{:016x}", s.guid), now_unix(), None),
            };
            let name = format!("{dataset}@{short}");
            let record = DatasetRecord {
                objset: s.objset.0,
                guid: s.guid,
                creation,
                createtxg: s.txg,
                props: Default::default(),
                holds: vec![],
                volume,
                ..Default::default()
            };
            let encoded = serde_json::to_vec(&record).map_err(|e| DsError::Corrupt(e.to_string()))?;
            Zap::update(&mos, &tx, self.datasets_zap, name.as_bytes(), &encoded)?;
            records.push((name.clone(), record));
            names.push(name);
        }
        drop(tx);
        self.obj.sync()?;
        let mut state = self.state.write();
        for (n, r) in records {
            state.snapshots.insert(n, r);
        }
        Ok(names)
    }

    /// Stores `record` for `name` (new or changed) and its object set handle.
    fn put_dataset(&self, name: &str, record: DatasetRecord) -> Result<()> {
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

    /// Write properties of `name` if its local properties were `local`.
    fn write_props_with(&self, name: &str, local: &BTreeMap<String, String>) -> WriteProps {
        let state = self.state.read();
        let lookup = |ds: &str, prop: &str| -> Option<String> {
            if ds == name {
                local.get(prop).cloned().or_else(|| state.datasets.get(ds).and_then(|r| r.props.get(prop).cloned()))
            } else {
                state.datasets.get(ds).and_then(|r| r.props.get(prop).cloned())
            }
        };
        let s = props::settings(name, &lookup);
        WriteProps { compression: s.compression, checksum: s.checksum, copies: s.copies, primarycache: s.primarycache, secondarycache: s.secondarycache }
    }

    fn refresh_objset(&self, name: &str) -> Result<()> {
        let record = self.record(name)?;
        let os = self.obj.open_objset(ObjsetId(record.objset))?;
        self.state.write().objsets.insert(name.to_string(), os);
        self.reapply_write_props(name)
    }

    /// Local properties a received dataset gets: the sent ones (minus
    /// `-x`), then `-o` for the top one.
    fn received_props(
        &self,
        spec: &RecvSpec,
        header: &PackageHeader,
        entry: &PackageDataset,
        warnings: &mut Vec<String>,
        dst: &str,
    ) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        if header.props {
            for (k, v) in &entry.props {
                if spec.exclude.iter().any(|x| props::canonical_name(x) == *k) {
                    continue;
                }
                match props::validate(k, v) {
                    Ok((p, stored)) => {
                        out.insert(p.to_string(), stored);
                    }
                    Err(e) => warnings.push(format!("property '{k}' of '{dst}' not received: {e}")),
                }
            }
        }
        if entry.name.is_empty() {
            for (k, v) in &spec.set {
                if let Ok((p, stored)) = props::validate(k, v) {
                    out.insert(p.to_string(), stored);
                }
            }
        }
        out
    }

    /// Receives a package whose header was read by [`read_header`]; the
    /// rest of it is `input`. The caller keeps the target datasets
    /// unmounted ([`Pool::receive_targets`]) and mounts them afterwards.
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
        let mut report = RecvReport::default();
        let mut done: Vec<(Undo, Vec<String>)> = Vec::new();
        let result = self.receive_entries(spec, header, input, targets, start, restart, &top, &mut report, &mut done);
        if let Err(e) = result {
            // Without -s a failed package leaves nothing behind: what it
            // received of earlier datasets is undone, newest first.
            if !spec.resumable {
                for (undo, snaps) in done.into_iter().rev() {
                    if let Err(u) = self.undo(undo, &snaps) {
                        return Err(recv_err(format!("{e}; and undoing the datasets received before failed: {u}")));
                    }
                }
            } else {
                self.finish(done)?;
            }
            return Err(e);
        }
        self.finish(done)?;
        if restart {
            let mut rec = self.record(&top)?;
            rec.recv = None;
            self.put_dataset(&top, rec)?;
        }
        Ok(report)
    }

    /// Drops the object sets that replaced datasets gave up.
    fn finish(&self, done: Vec<(Undo, Vec<String>)>) -> Result<()> {
        for (undo, _) in done {
            if let Undo::Replaced(_, old) = undo {
                let _change = self.change.lock();
                let tx = self.obj.begin();
                self.obj.destroy_objset(&tx, ObjsetId(old.objset))?;
                drop(tx);
                self.obj.sync()?;
            }
        }
        Ok(())
    }

    fn undo(&self, undo: Undo, snaps: &[String]) -> Result<()> {
        match undo {
            Undo::Nothing => Ok(()),
            Undo::Created(dst) => self.destroy_dataset(&dst, true).map(|_| ()),
            Undo::RolledForward(dst, base, old) => {
                for s in snaps.iter().rev() {
                    self.destroy_snapshot(s, true)?;
                }
                self.rollback(&base, false)?;
                self.put_dataset(&dst, DatasetRecord { objset: self.record(&dst)?.objset, ..old })
            }
            Undo::Replaced(dst, old) => {
                for s in snaps.iter().rev() {
                    self.destroy_snapshot(s, true)?;
                }
                let new = self.record(&dst)?.objset;
                self.put_dataset(&dst, old)?;
                let _change = self.change.lock();
                let tx = self.obj.begin();
                self.obj.destroy_objset(&tx, ObjsetId(new))?;
                drop(tx);
                self.obj.sync()?;
                Ok(())
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn receive_entries(
        &self,
        spec: &RecvSpec,
        header: &PackageHeader,
        input: &mut dyn Read,
        targets: Vec<String>,
        start: usize,
        restart: bool,
        top: &str,
        report: &mut RecvReport,
        done: &mut Vec<(Undo, Vec<String>)>,
    ) -> Result<()> {
        for (i, dst) in (start..header.datasets.len()).zip(targets) {
            let entry = &header.datasets[i];
            let resume = header.resume.as_ref().filter(|r| r.index == i && !r.inner.is_empty()).map(|r| r.inner.clone());
            let resumed = resume.is_some();
            match self.receive_one(spec, header, i, entry, &dst, resume, input, &mut report.warnings) {
                Ok((bytes, snaps, undo)) => {
                    report.bytes += bytes;
                    report.snapshots.extend(snaps.iter().cloned());
                    report.datasets.push(dst);
                    done.push((undo, snaps));
                }
                // Nothing of this dataset arrived, but earlier ones did: the
                // top dataset keeps a token that restarts the package here.
                Err(DsError::Recv(cause))
                    if spec.resumable && !resumed && i > 0 && (i > start || restart) && cause.contains(STREAM_STOPPED) =>
                {
                    let token = encode_token(&SendToken {
                        spec: header.send.clone(),
                        index: i,
                        name: entry.name.clone(),
                        inner: String::new(),
                    });
                    let mut rec = self.record(top)?;
                    rec.recv = Some(RecvPartial { token: token.clone(), inner: String::new(), fresh: false });
                    self.put_dataset(top, rec)?;
                    let snapshots = report.snapshots.clone();
                    return Err(DsError::RecvInterrupted { dataset: top.to_string(), snapshots, cause, token });
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

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
        warnings: &mut Vec<String>,
    ) -> Result<(u64, Vec<String>, Undo)> {
        let fail = |m: String| recv_err(format!("cannot receive into '{dst}': {m}"));
        let existing = self.record(dst).ok();
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
            (None, Some(_), None) => return Err(fail("dataset does not exist (an incremental stream needs its base)".into())),
            (None, Some(_), Some(rec)) => Plan::Incremental(rec),
        };
        // A raw stream goes onto a dataset of the same key (whose key is
        // not loaded here: tarn-send checks), a plain one onto a dataset
        // whose key is loaded if it is encrypted.
        if let Plan::Incremental(rec) | Plan::Resume(rec, _) = &plan {
            match (&entry.crypt, &rec.crypt) {
                (Some(p), Some(c)) if p.key_guid == c.key_guid => {}
                (Some(_), _) => return Err(fail("the raw stream's dataset is encrypted with another key (or the destination is not encrypted)".into())),
                (None, Some(c)) if self.obj.keys_loaded(c.key_guid) => {}
                (None, Some(_)) => return Err(fail("the destination is encrypted and its key is not loaded (load-key, or send raw with -w)".into())),
                (None, None) => {}
            }
        }
        // The data is written with the properties the dataset will have.
        let received = self.received_props(spec, header, entry, warnings, dst);
        let mut opts = RecvOptions {
            resumable: spec.resumable,
            props: Some(self.write_props_with(dst, &received)),
            raw: entry.crypt.as_ref().map(|c| crate::encryption::package_crypt_of(&c.cipher, c.key_guid)).transpose()?,
        };
        let mut base_name: Option<String> = None;
        // -F's destruction (newer snapshots, the head's own changes) waits
        // until the stream is known to be whole: it is spooled and verified.
        let mut doomed: Vec<String> = Vec::new();
        let mut spool = false;
        let target = match &plan {
            Plan::New => RecvTarget::New,
            Plan::Replace(_) => {
                // A replacement is all or nothing.
                opts.resumable = false;
                RecvTarget::New
            }
            Plan::Incremental(rec) => {
                let base = entry.base.as_ref().map(|b| b.guid).unwrap_or(0);
                let chain = self.snapshots(Some(dst));
                let Some(pos) = chain.iter().position(|n| self.snapshot_record(n).is_ok_and(|r| r.guid == base)) else {
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
                        let r = self.snapshot_record(s)?;
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
                base_name = Some(chain[pos].clone());
                let base = self.snap_ref(&chain[pos])?;
                let modified = self.obj.open_objset(ObjsetId(rec.objset)).is_ok_and(|os| os.changed_since(base.txg));
                if modified && !spec.force {
                    return Err(fail("destination has been modified since its most recent snapshot (use -F to roll it back first)".into()));
                }
                spool = spec.force && (modified || !doomed.is_empty());
                RecvTarget::Existing { head: ObjsetId(rec.objset), base, force: spec.force }
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
            if let Some(b) = &base_name {
                // -F may roll the head back to the base: a bookmark of a
                // later state would no longer describe this dataset.
                let txg = self.snapshot_record(b)?.createtxg;
                self.forget_bookmarks_after(dst, txg)?;
            }
        }
        let source: &mut dyn Read = match spooled.as_mut() {
            Some(f) => f,
            None => input,
        };
        let result = tarn_send::receive(&self.obj, source, target, &opts);
        // A receive onto an existing head may have rolled it back or
        // forward in place (the object layer then drops its in-memory
        // state): hand out a fresh handle whatever the outcome.
        if self.exists(dst) {
            self.refresh_objset(dst)?;
        }
        match result {
            Ok(outcome) => {
                let props = received;
                // A volume arrives with the geometry of its newest snapshot.
                let volume = entry.snapshots.last().and_then(|s| s.volume);
                let undo = match plan {
                    Plan::New => {
                        let guid = new_guid();
                        let record = DatasetRecord {
                            objset: outcome.head.0,
                            guid,
                            creation: now_unix(),
                            createtxg: outcome.snapshots.first().map_or(0, |s| s.txg),
                            props,
                            holds: vec![],
                            crypt: self.received_crypt(spec, header, entry, guid),
                            volume,
                            ..Default::default()
                        };
                        let crypt = record.crypt.clone();
                        self.put_dataset(dst, record)?;
                        if let Some(c) = &crypt {
                            self.load_member_key(dst, c)?;
                        }
                        Undo::Created(dst.to_string())
                    }
                    Plan::Replace(mut rec) => {
                        // The old object set goes when the whole package is in.
                        let old = rec.clone();
                        self.forget_bookmarks_after(dst, 0)?;
                        rec.objset = outcome.head.0;
                        rec.crypt = self.received_crypt(spec, header, entry, rec.guid);
                        rec.props = props;
                        rec.volume = volume;
                        // A root replaced by a full stream has a new key:
                        // the old one's loaded state goes with it.
                        if rec.crypt.as_ref().map(|c| &c.wrapped) != old.crypt.as_ref().map(|c| &c.wrapped) {
                            self.forget_root_key(rec.guid);
                        }
                        let crypt = rec.crypt.clone();
                        self.put_dataset(dst, rec)?;
                        if let Some(c) = &crypt {
                            self.load_member_key(dst, c)?;
                        }
                        Undo::Replaced(dst.to_string(), old)
                    }
                    Plan::Incremental(mut rec) | Plan::Resume(mut rec, _) => {
                        let old = rec.clone();
                        rec.recv = None;
                        if volume.is_some() {
                            rec.volume = volume;
                        }
                        if header.props || !spec.set.is_empty() {
                            for (k, v) in props {
                                rec.props.insert(k, v);
                            }
                        }
                        if rec.createtxg == 0 {
                            rec.createtxg = outcome.snapshots.first().map_or(0, |s| s.txg);
                        }
                        self.put_dataset(dst, rec)?;
                        match base_name {
                            Some(base) => Undo::RolledForward(dst.to_string(), base, old),
                            None => Undo::Nothing,
                        }
                    }
                };
                let names = self.register_snapshots(dst, entry, &outcome.snapshots)?;
                Ok((outcome.bytes, names, undo))
            }
            Err(SendError::Interrupted { cause, partial }) => {
                let names = self.register_snapshots(dst, entry, &partial.snapshots)?;
                let token = encode_token(&SendToken {
                    spec: header.send.clone(),
                    index,
                    name: entry.name.clone(),
                    inner: partial.token.clone(),
                });
                let fresh = match &plan {
                    Plan::New => true,
                    Plan::Resume(_, p) => p.fresh,
                    _ => false,
                };
                let partial_state = RecvPartial { token: token.clone(), inner: partial.token.clone(), fresh };
                let mut rec = match plan {
                    Plan::New => {
                        let guid = new_guid();
                        DatasetRecord {
                            objset: partial.head.0,
                            guid,
                            creation: now_unix(),
                            createtxg: 0,
                            props: received,
                            holds: vec![],
                            crypt: self.received_crypt(spec, header, entry, guid),
                            volume: entry.snapshots.last().and_then(|s| s.volume),
                            ..Default::default()
                        }
                    }
                    Plan::Incremental(rec) | Plan::Resume(rec, _) | Plan::Replace(rec) => rec,
                };
                rec.recv = Some(partial_state);
                self.put_dataset(dst, rec)?;
                Err(DsError::RecvInterrupted {
                    dataset: dst.to_string(),
                    snapshots: names,
                    cause: cause.to_string(),
                    token,
                })
            }
            Err(SendError::Modified) => Err(fail(
                "destination has been modified since its most recent snapshot (use -F to roll it back first)".into(),
            )),
            Err(e @ (SendError::Truncated(_) | SendError::Io(_))) => Err(fail(format!("{STREAM_STOPPED}: {e}"))),
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

enum Undo {
    Nothing,
    /// The dataset was created by the receive.
    Created(String),
    /// Rolled forward from snapshot `.1`; `.2` is its record before.
    RolledForward(String, String, DatasetRecord),
    /// A full stream replaced the dataset; `.1` is its record before (its
    /// object set is destroyed only when the whole package is in).
    Replaced(String, DatasetRecord),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_round_trip_and_tamper() {
        let t = SendToken {
            spec: SendSpec { snapshot: "tank/a@b".into(), from: Some("@a".into()), series: true, recursive: false, props: true, raw: false },
            index: 2,
            name: "child".into(),
            inner: "abc".into(),
        };
        let s = encode_token(&t);
        assert_eq!(decode_token(&s).unwrap(), t);
        let mut bad = s.clone().into_bytes();
        let i = TOKEN_PREFIX.len() + 3;
        bad[i] = if bad[i] == b'0' { b'1' } else { b'0' };
        assert!(decode_token(std::str::from_utf8(&bad).unwrap()).is_err());
        assert!(decode_token("nonsense").is_err());
        assert!(decode_token("tarn1-zz-00").is_err());
    }

    #[test]
    fn header_round_trip_and_checks() {
        let h = PackageHeader {
            version: 1,
            source: "tank/a".into(),
            send: SendSpec::default(),
            recursive: false,
            props: false,
            datasets: vec![PackageDataset {
                name: String::new(),
                base: None,
                snapshots: vec![PackageSnap { name: "s".into(), guid: 5, creation: 1, volume: None }],
                props: BTreeMap::new(),
                crypt: None,
            }],
            resume: None,
        };
        let mut buf = Vec::new();
        write_header(&h, &mut buf).unwrap();
        assert_eq!(read_header(&mut &buf[..]).unwrap(), h);
        for cut in [0, 5, 15, 20, buf.len() - 1] {
            assert!(read_header(&mut &buf[..cut]).is_err(), "cut at {cut}");
        }
        let mut flipped = buf.clone();
        flipped[30] ^= 1;
        assert!(read_header(&mut &flipped[..]).is_err());
        let mut evil = h.clone();
        evil.datasets[0].snapshots[0].name = "../x".into();
        let mut buf = Vec::new();
        write_header(&evil, &mut buf).unwrap();
        assert!(read_header(&mut &buf[..]).is_err());
    }
}
