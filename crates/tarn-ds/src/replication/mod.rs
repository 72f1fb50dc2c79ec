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
use tarn_send::{SendBase, SendError, SnapRef};

use crate::pool::validate_dataset_name;
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
    /// The dataset's own properties (`-p`, `-R`): local values over the
    /// unmasked received ones, stored form; the receiver keeps them as its
    /// received values (own_props.rs).
    #[serde(default)]
    pub props: BTreeMap<String, String>,
    /// Sent raw (an encrypted dataset with `-w` or `-R`): how it is
    /// encrypted and its master key as stored, wrapped (never a key in
    /// the clear). Its stream is a raw one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crypt: Option<PackageCrypt>,
    /// A clone sent as one: its stream is an incremental from its origin
    /// snapshot (`base`), which the receiver holds, and the receiver makes
    /// the dataset a clone of that snapshot (sharing its blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<PackageOrigin>,
    /// `-R`: the guids of every snapshot the dataset has on the sender; a
    /// receive with `-F` destroys the dataset's other snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_snapshots: Option<Vec<u64>>,
}

/// Where a clone of a package comes from.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PackageOrigin {
    /// The origin's dataset, relative to the sent one, when it is in the
    /// package (`-R`); absent (`send -i origin@snap clone@x`): the
    /// receiver finds the snapshot by its guid (`base`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
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
    /// `-R`: every dataset under the sent one on the sender (relative
    /// names; those without the snapshot too): a receive with `-F`
    /// destroys the target's descendants that are not listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_datasets: Option<Vec<String>>,
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
    /// `-R -F`: the datasets the caller claimed (unmounted) for pruning
    /// ([`Pool::receive_prunes`] before the receive); no other is pruned.
    /// `None`: those the package leads to when it ends.
    pub prunable: Option<Vec<String>>,
}

/// What a receive did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RecvReport {
    /// Datasets created or changed, parents first.
    pub datasets: Vec<String>,
    /// Snapshots received (full names).
    pub snapshots: Vec<String>,
    pub bytes: u64,
    /// Properties not applied, snapshots and datasets `-R -F` kept (one
    /// line each).
    pub warnings: Vec<String>,
    /// Snapshots and datasets `-R -F` destroyed (the sender no longer has
    /// them).
    #[serde(default)]
    pub destroyed: Vec<String>,
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
    check_tree_fields(h).map_err(bad)
}

/// The fields of `-R` packages that make the receiver destroy or clone
/// (`sender_datasets`, `sender_snapshots`, `origin`) must agree with the
/// rest of the header: a forged list never names the datasets and
/// snapshots the package itself brings as gone, and a clone's origin is a
/// dataset received before it.
fn check_tree_fields(h: &PackageHeader) -> std::result::Result<(), String> {
    let lists = h.sender_datasets.is_some() || h.datasets.iter().any(|d| d.sender_snapshots.is_some());
    if lists && !h.recursive {
        return Err("lists of what the sender has in a package that is not a replication (-R) package".into());
    }
    if let Some(all) = &h.sender_datasets {
        for n in all.iter().filter(|n| !n.is_empty()) {
            validate_dataset_name(&format!("x/{n}")).map_err(|e| format!("sender dataset '{n}': {e}"))?;
        }
        if let Some(d) = h.datasets.iter().find(|d| !all.contains(&d.name)) {
            return Err(format!("the sender's dataset list does not name '{}', which the package sends", d.name));
        }
    }
    for (i, d) in h.datasets.iter().enumerate() {
        if let Some(guids) = &d.sender_snapshots {
            let base = d.base.as_ref().filter(|_| d.origin.is_none());
            if let Some(s) = d.snapshots.iter().chain(base).find(|s| !guids.contains(&s.guid)) {
                return Err(format!("dataset '{}': the sender's snapshot list does not name '{}', which the package uses", d.name, s.name));
            }
        }
        if let Some(o) = &d.origin {
            if d.base.is_none() {
                return Err(format!("dataset '{}' is sent as a clone but names no origin snapshot", d.name));
            }
            if let Some(rel) = &o.dataset {
                if !h.datasets[..i].iter().any(|e| &e.name == rel) {
                    return Err(format!("dataset '{}' is a clone of a dataset ('{rel}') the package does not send before it", d.name));
                }
            }
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

pub(crate) mod journal;
mod recv;
mod send;

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
                origin: None,
                sender_snapshots: None,
            }],
            resume: None,
            sender_datasets: None,
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
