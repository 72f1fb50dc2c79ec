//! The daemon's wire protocol: one JSON object per line over a Unix socket.
//!
//! A client connects, writes one [`Request`] as a single line of JSON, and
//! reads one [`Response`] line back; it may send further requests on the
//! same connection. Requests are tagged by `"cmd"`, e.g.
//!
//! ```json
//! {"cmd":"create","dataset":"tank/media","parents":false,"props":[["compression","zstd"]]}
//! {"ok":true,"exit":0,"stdout":"","stderr":"","error":null,"data":null}
//! ```
//!
//! All paths in requests are absolute (the CLI resolves them against its own
//! working directory). `data` carries the structured result of listing
//! commands (the types below); the CLI formats tables and `-j` JSON from it.

use serde::{Deserialize, Serialize};

pub use crate::key_bytes::KeyBytes;

/// Protocol version, reported by `ping`.
pub const PROTOCOL_VERSION: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum VdevKind {
    /// One plain device (a top-level vdev of a stripe).
    Disk,
    Mirror,
    Raidz { parity: u8 },
}

/// `create -V SIZE [-b BLOCKSIZE] [-s]`: a volume.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct VolumeSpec {
    /// `volsize` as the user wrote it.
    pub size: String,
    /// `volblocksize` (`-b`, or `-o volblocksize=`); 16K if absent.
    pub blocksize: Option<String>,
    /// `-s`: no reservation.
    pub sparse: bool,
}

/// One top-level vdev as given on the command line.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct VdevGroup {
    pub kind: VdevKind,
    pub devices: Vec<String>,
    /// A log vdev (`log` in the specification).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub log: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    Ping,
    Shutdown,
    PoolCreate {
        pool: String,
        vdevs: Vec<VdevGroup>,
        force: bool,
        dry_run: bool,
        mountpoint: Option<String>,
        altroot: Option<String>,
        ashift: Option<u8>,
        /// `-o` pool properties other than ashift (comment, failmode).
        pool_props: Vec<(String, String)>,
        /// `-O` root dataset properties.
        fs_props: Vec<(String, String)>,
        /// Cache devices (L2ARC).
        #[serde(default)]
        cache: Vec<String>,
        /// With `-O keyformat=… ` and keylocation prompt: the root
        /// dataset's key, as the CLI read it (never logged).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<KeyBytes>,
    },
    PoolImport {
        dirs: Vec<String>,
        force: bool,
        rewind: bool,
        altroot: Option<String>,
        pool: Option<String>,
        /// `-m`: import although a log device is missing.
        #[serde(default)]
        missing_log: bool,
        /// `-l`: load the keys kept in files before mounting (the CLI
        /// then asks for the ones whose keylocation is prompt).
        #[serde(default)]
        load_keys: bool,
    },
    PoolExport { pool: String, force: bool },
    PoolDestroy { pool: String, force: bool },
    PoolList { pools: Vec<String>, parsable: bool },
    PoolStatus {
        pools: Vec<String>,
        /// `-v`: name the files with unrecoverable errors.
        #[serde(default)]
        verbose: bool,
    },
    PoolSet { prop: String, value: String, pool: String },
    Create {
        dataset: String,
        parents: bool,
        props: Vec<(String, String)>,
        /// The key of a new encryption root whose keylocation is `prompt`
        /// (the CLI asked for it). Never logged (keys.rs).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<KeyBytes>,
        /// `-V`: a volume.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        volume: Option<VolumeSpec>,
    },
    /// The encryption roots of `datasets` (and with `recursive` their
    /// descendants), or of every pool (`all`): data `Vec<keys::KeyRoot>`.
    KeyRoots { datasets: Vec<String>, recursive: bool, all: bool },
    /// `load-key [-n] [-L LOCATION] ROOT`, with the key the CLI read when
    /// the location is `prompt`.
    LoadKey {
        dataset: String,
        noop: bool,
        location: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<KeyBytes>,
    },
    /// `unload-key ROOT` (unmounts its datasets first).
    UnloadKey { dataset: String },
    /// `change-key [-o keyformat|keylocation|pbkdf2iters=…] DATASET` (a
    /// dataset that is not an encryption root becomes one), or with
    /// `inherit` (`-i`) an encryption root joins its parent's.
    ChangeKey {
        dataset: String,
        props: Vec<(String, String)>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<KeyBytes>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        inherit: bool,
    },
    /// `destroy`: a file system (`-r`: with its descendants; with its
    /// snapshots either way, which plain destroy refuses), or snapshots:
    /// `fs@a`, `fs@a%c` (a range, oldest to newest; either end may be
    /// empty), `fs@a,b%c` (a list); `-r` takes the same names in every
    /// descendant. `dry_run` (-n) destroys nothing. Data: the names
    /// destroyed (or that would be), as a JSON array of strings.
    Destroy {
        dataset: String,
        recursive: bool,
        force: bool,
        #[serde(default)]
        dry_run: bool,
        /// `-R`: the clones of the snapshots destroyed (and theirs) too.
        #[serde(default)]
        dependents: bool,
    },
    /// `list` and `get` of file systems: properties of datasets (and of
    /// the snapshots named in `datasets`). `props` empty = all.
    Props { datasets: Vec<String>, recursive: bool, props: Vec<String>, parsable: bool },
    /// `list -t` / `get -t`: as `Props`, of the types asked for
    /// (`filesystem`, `snapshot`). A dataset's snapshots follow it, oldest
    /// first. Without `recursive`, `types == ["snapshot"]` lists the
    /// snapshots of the datasets named (as `zfs list -t snapshot fs` does).
    /// `depth` (`-d N`): with `recursive`, only datasets at most N levels
    /// below the named ones (a snapshot is one level below its dataset).
    /// `sort` (`-s`/`-S`): (property, descending) keys, in order; rows are
    /// sorted as a whole by their exact (`-p`) values, numbers as numbers.
    TypedProps {
        datasets: Vec<String>,
        recursive: bool,
        props: Vec<String>,
        parsable: bool,
        types: Vec<String>,
        #[serde(default)]
        depth: Option<u32>,
        #[serde(default)]
        sort: Vec<(String, bool)>,
    },
    /// `snapshot [-r] fs@name...`: all in one txg, consistent with every
    /// write acknowledged before the request; `recursive`: the same name in
    /// every descendant too. All names must be in one pool.
    Snapshot { names: Vec<String>, recursive: bool },
    /// `bookmark SOURCE TARGET`: `source` is `fs@snap` or `fs#mark`
    /// (copied), `target` is `fs#name` (or `#name`) of the same dataset.
    /// Data: the bookmark's full name, as a JSON array.
    Bookmark { source: String, target: String },
    /// `rollback [-r] [-f] fs@name`: unmounts the dataset (and what is
    /// mounted below it), rolls back, mounts again. `destroy_later` (-r)
    /// destroys more recent snapshots; `force` (-f) detaches a busy mount.
    /// Data: the snapshots destroyed.
    Rollback { snapshot: String, destroy_later: bool, force: bool },
    /// `clone [-o prop=value]... fs@snap target`: a new file system that
    /// starts as the snapshot (its parent must exist); mounted like a
    /// created one.
    Clone { snapshot: String, target: String, properties: Vec<(String, String)> },
    /// `promote clone`: the clone takes over its origin snapshot and the
    /// snapshots before it; the former origin's file system becomes a
    /// clone. Data: the former origin's name.
    Promote { dataset: String },
    /// `hold TAG snap...` / `release TAG snap...` (`recursive`: the same
    /// snapshot name in every descendant). All or nothing: every name is
    /// checked before any changes.
    Hold {
        tag: String,
        snapshots: Vec<String>,
        release: bool,
        #[serde(default)]
        recursive: bool,
    },
    /// `holds snap...`: data `Vec<HoldRow>`.
    Holds {
        snapshots: Vec<String>,
        #[serde(default)]
        recursive: bool,
    },
    /// `send`: writes the stream to the file descriptor passed with the
    /// request (see `fdpass`). `snapshot` is `fs@snap` (empty with `token`);
    /// `from` (`-i`/`-I`) is `@a`, `fs@a` or `fs#bookmark`; `series` is
    /// `-I`. `dry_run` (-n) sends nothing and answers with data
    /// `Vec<tarn_ds::replication::Estimate>`.
    Send {
        snapshot: String,
        from: Option<String>,
        series: bool,
        recursive: bool,
        props: bool,
        token: Option<String>,
        dry_run: bool,
        /// `-w`: encrypted datasets as stored (ciphertext, MACs and the
        /// wrapped key; no key needed); the same stream as without it for
        /// the others.
        #[serde(default)]
        raw: bool,
    },
    /// `recv`: reads a stream from the passed descriptor into `target`.
    /// Data: `tarn_ds::replication::RecvReport`.
    Receive {
        target: String,
        force: bool,
        resumable: bool,
        set: Vec<(String, String)>,
        exclude: Vec<String>,
        no_mount: bool,
        /// `-d`: below `target`, the sent dataset's name without its pool.
        #[serde(default)]
        discard_pool: bool,
        /// `-e`: below `target`, the sent dataset's last name component.
        #[serde(default)]
        last_component: bool,
    },
    /// `recv -A dataset`: gives up a partially received stream.
    ReceiveAbort { dataset: String },
    Set {
        assignments: Vec<(String, String)>,
        dataset: String,
        /// `-f`: a smaller `volsize` is applied (the data past it goes).
        #[serde(default)]
        force: bool,
    },
    /// `inherit [-r] PROP DATASET...`: drops the local setting (from every
    /// descendant too with `recursive`).
    Inherit {
        prop: String,
        datasets: Vec<String>,
        recursive: bool,
        /// `-S`: back to the received value (else the inherited one wins,
        /// masking a received value).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        received: bool,
    },
    /// `rename [-p] [-f] [-u] OLD NEW` (a dataset with its descendants,
    /// snapshots and bookmarks; remounted at the new mountpoints unless
    /// `no_mount`), `rename [-r] FS@A @B` (snapshots). Data: the (old, new)
    /// name pairs renamed.
    Rename { source: String, target: String, parents: bool, recursive: bool, force: bool, no_mount: bool },
    /// `mount -a`: every dataset that has a mountpoint and is not mounted.
    MountAll,
    /// `unmount -a [-f]`: every mounted dataset.
    UnmountAll { force: bool },
    Mount { dataset: Option<String> },
    Unmount { target: String, force: bool },
    DebugCheck { pool: String },
    /// `pool scrub` (`-p` pause, `-s` stop); `-w` is a following `PoolWait`.
    PoolScrub { pool: String, pause: bool, stop: bool },
    /// `pool wait [-t ACTIVITY,...]`: answers when none of the activities
    /// (scrub, resilver, replace; empty = all) is in progress.
    PoolWait { pool: String, activities: Vec<String>, timeout_secs: Option<u64> },
    PoolOffline { pool: String, device: String },
    PoolOnline { pool: String, device: String },
    /// `pool replace POOL OLD [NEW]` (no NEW: a new device at OLD's path).
    PoolReplace { pool: String, old: String, new: Option<String>, force: bool },
    PoolAttach { pool: String, existing: String, new: String, force: bool },
    PoolDetach { pool: String, device: String },
    /// `pool add`: top-level vdevs, spares and/or cache devices.
    PoolAdd {
        pool: String,
        vdevs: Vec<VdevGroup>,
        spares: Vec<String>,
        force: bool,
        dry_run: bool,
        #[serde(default)]
        cache: Vec<String>,
    },
    /// `pool remove` (available spares).
    PoolRemove { pool: String, device: String },
    PoolClear { pool: String, device: Option<String> },
    /// `pool sync`: a txg sync of each pool named (empty: every pool).
    PoolSync { pools: Vec<String> },
    /// `pool events`: events with sequence > `after` (`pool` None: all
    /// pools); waits up to `wait_secs` for one to arrive (for `-f`);
    /// `clear` (-c) forgets the pool's events instead.
    PoolEvents { pool: Option<String>, after: u64, wait_secs: u64, clear: bool },
    /// `alert test`: a test message through every configured channel.
    AlertTest { pool: Option<String> },
    /// `pool iostat` and `pool list -v`: the vdev tree of each pool with
    /// space and I/O counters. Data: `Vec<PoolIostatData>`.
    PoolIostat { pools: Vec<String> },
    /// `pool history`: data `Vec<PoolHistoryData>`.
    PoolHistory { pools: Vec<String> },
    /// `diff SNAPSHOT [SNAPSHOT|DATASET]`: `to` None = the live dataset of
    /// `from`. Data: `DiffData`.
    Diff { from: String, to: Option<String> },
    /// `pool trim [-r RATE] [-c|-s] POOL [DEVICE...]`: starts (or resumes a
    /// suspended), cancels or suspends the trim of the devices named (all
    /// devices if none); `rate` in bytes per second, 0 = unlimited. `-w`
    /// is a following `PoolWait` for "trim".
    PoolTrim { pool: String, devices: Vec<String>, rate: u64, cancel: bool, suspend: bool },
    /// `pool checkpoint [-d] POOL`. Data: `CheckpointData` (taken) or
    /// `{"freed": bytes}` (discarded).
    PoolCheckpoint { pool: String, discard: bool },
    /// `pool import --rewind-to-checkpoint`: as `PoolImport` of one named
    /// pool, opened as it was at its checkpoint (every later change and
    /// the checkpoint itself are discarded).
    PoolImportCheckpoint { dirs: Vec<String>, force: bool, altroot: Option<String>, pool: String },
    /// `tunable get [NAME]`: data `Vec<tunables::TunableRow>`.
    TunableGet { name: Option<String> },
    /// `tunable set NAME=VALUE... [--persist]`: all or none; `persist`
    /// also writes them into the daemon's config file.
    TunableSet { assignments: Vec<(String, String)>, persist: bool },
    /// `arcstat`: data `tunables::ArcstatData`.
    Arcstat,
    /// `share -a` (`dataset` None) / `share DATASET`: share again what
    /// `unshare` took out (shares.rs).
    Share { dataset: Option<String> },
    /// `unshare -a` (`target` None) / `unshare DATASET|MOUNTPOINT`.
    Unshare { target: Option<String> },
    /// `share -l`: data `Vec<shares::ShareRow>`.
    ShareList,
    /// `smb user add|remove|list [USER]` (smb_users.rs); `list` data: the
    /// user names.
    SmbUser { action: String, user: Option<String>, password: Option<String> },
}

/// Splits a request line into the request and its optional `argv` (the
/// command line the user typed, recorded in the pool's history). `argv`
/// rides beside the request's own fields, so every request may carry it
/// and a daemon that does not know it ignores it.
pub fn parse_request_line(line: &str) -> Result<(Request, Option<Vec<String>>), serde_json::Error> {
    let mut value: serde_json::Value = serde_json::from_str(line)?;
    let argv = match value.as_object_mut().and_then(|m| m.remove("argv")) {
        Some(v) => Some(serde_json::from_value(v)?),
        None => None,
    };
    Ok((serde_json::from_value(value)?, argv))
}

impl Request {
    /// Whether the request carries key material (its buffers are zeroed
    /// after it, and the stack its handling used: `server.rs`).
    pub fn carries_key(&self) -> bool {
        match self {
            Request::PoolCreate { key, .. } | Request::Create { key, .. } | Request::LoadKey { key, .. } | Request::ChangeKey { key, .. } => key.is_some(),
            _ => false,
        }
    }
}

/// The line [`parse_request_line`] reads: the request, with `argv` when
/// given. Written straight from the request (no `serde_json::Value` in
/// between) into one buffer big enough not to move: a request with a key
/// has its digits in it, and the caller zeroes it once sent.
pub fn request_line(request: &Request, argv: Option<&[String]>) -> Result<String, serde_json::Error> {
    let mut out = Vec::with_capacity(REQUEST_LINE_CAPACITY);
    serde_json::to_writer(&mut out, request)?;
    if let Some(argv) = argv {
        // A request is a JSON object: `argv` goes in before its `}`.
        if out.pop() != Some(b'}') {
            return Err(serde::ser::Error::custom("a request is not a JSON object"));
        }
        if !out.ends_with(b"{") {
            out.push(b',');
        }
        out.extend_from_slice(br#""argv":"#);
        serde_json::to_writer(&mut out, argv)?;
        out.push(b'}');
    }
    String::from_utf8(out).map_err(|_| serde::ser::Error::custom("a request line is not UTF-8"))
}

/// Room reserved for a request line, so a key-carrying one is never
/// copied while it is written (a key is at most `KEY_BYTES_MAX` bytes).
const REQUEST_LINE_CAPACITY: usize = 64 << 10;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    /// Process exit status the CLI should use (0, 1 or 2).
    pub exit: i32,
    /// Text for the CLI's stdout.
    pub stdout: String,
    /// Warnings for the CLI's stderr (each line already complete).
    pub stderr: String,
    /// One-line error when `ok` is false.
    pub error: Option<String>,
    pub data: Option<serde_json::Value>,
}

impl Response {
    pub fn text(stdout: impl Into<String>) -> Response {
        Response { ok: true, exit: 0, stdout: stdout.into(), ..Response::default() }
    }
    pub fn data(data: serde_json::Value) -> Response {
        Response { ok: true, exit: 0, data: Some(data), ..Response::default() }
    }
    pub fn error(message: impl Into<String>) -> Response {
        Response { ok: false, exit: 1, error: Some(message.into()), ..Response::default() }
    }
}

/// A property value as listings carry it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PropCell {
    pub property: String,
    pub value: String,
    /// `zfs get` form: local, default, inherited from X, -.
    pub source: String,
    /// OpenZFS JSON: LOCAL, RECEIVED, DEFAULT, INHERITED, NONE.
    pub source_type: String,
    pub source_data: String,
    /// The dataset's received value of the property (`get -o received`;
    /// absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received: Option<String>,
}

impl From<tarn_ds::PropValue> for PropCell {
    fn from(v: tarn_ds::PropValue) -> PropCell {
        PropCell {
            property: v.property,
            value: v.value,
            source: v.source,
            source_type: v.source_type,
            source_data: v.source_data,
            received: v.received,
        }
    }
}

/// One dataset's or snapshot's properties (data of `props` and
/// `typed_props`: `Vec<DatasetRow>`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DatasetRow {
    pub name: String,
    pub pool: String,
    pub createtxg: u64,
    pub props: Vec<PropCell>,
}

/// One user hold (data of `holds`: `Vec<HoldRow>`). Hold times are not
/// stored.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct HoldRow {
    pub name: String,
    pub tag: String,
}

/// One pool's properties (data of `pool_list`: `Vec<PoolRow>`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolRow {
    pub name: String,
    pub guid: u64,
    pub state: String,
    pub txg: u64,
    pub props: Vec<PropCell>,
}

/// One device or vdev in `pool status`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VdevStatus {
    pub name: String,
    /// root, disk, file, mirror, raidz, replacing, spare.
    pub vdev_type: String,
    pub guid: u64,
    /// ONLINE, DEGRADED, FAULTED, OFFLINE, REMOVED, UNAVAIL; for an
    /// available spare AVAIL, for one in use INUSE.
    pub state: String,
    pub read_errors: u64,
    pub write_errors: u64,
    pub checksum_errors: u64,
    pub children: Vec<VdevStatus>,
    /// Why a device is not ONLINE ("too many I/O errors", ...).
    #[serde(default)]
    pub reason: Option<String>,
    /// The device lacks txgs that a running resilver is writing to it.
    #[serde(default)]
    pub resilvering: bool,
}

/// A scrub or resilver, running or last finished (`pool status`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ScanStatusData {
    /// "scrub" or "resilver".
    pub function: String,
    /// "scanning", "finished" or "canceled".
    pub state: String,
    pub paused: bool,
    /// Unix seconds.
    pub start_time: u64,
    pub end_time: u64,
    /// Allocated bytes when it started.
    pub to_examine: u64,
    pub examined: u64,
    pub issued: u64,
    /// Bytes read from the devices.
    pub read_bytes: u64,
    /// Bytes rewritten over bad copies.
    pub repaired: u64,
    /// Bytes written to devices that lacked them.
    pub resilvered: u64,
    /// Blocks that could not be recovered.
    pub errors: u64,
    /// Bytes per second in this pass.
    pub rate: u64,
    pub eta_secs: Option<u64>,
    pub percent: f64,
}

/// Data of `pool_status`: `Vec<PoolStatusData>`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolStatusData {
    pub name: String,
    pub guid: u64,
    pub state: String,
    pub txg: u64,
    pub data_errors: u64,
    pub root: VdevStatus,
    #[serde(default)]
    pub scan: Option<ScanStatusData>,
    /// Log vdevs (zpool's `logs` section), in vdev order.
    #[serde(default)]
    pub logs: Vec<VdevStatus>,
    /// Cache devices (L2ARC; zpool's `cache` section).
    #[serde(default)]
    pub cache: Vec<VdevStatus>,
    /// Available (AVAIL) hot spares; spares in use appear in the tree.
    #[serde(default)]
    pub spares: Vec<VdevStatus>,
    /// With `-v`: files (or `<dataset>:<object>` where no path is known)
    /// with unrecoverable errors.
    #[serde(default)]
    pub error_files: Vec<String>,
    /// Set when the pool is suspended: why.
    #[serde(default)]
    pub suspended: Option<String>,
    /// Each device's manual trim, as last started (`pool trim`).
    #[serde(default)]
    pub trims: Vec<TrimStatusData>,
    /// The pool's checkpoint, if it has one.
    #[serde(default)]
    pub checkpoint: Option<CheckpointData>,
}

/// One device's manual trim (`pool status`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TrimStatusData {
    pub guid: u64,
    pub path: String,
    /// "active", "suspended", "canceled" or "complete".
    pub state: String,
    pub percent: u64,
    /// Unix seconds: when it started, was suspended, or completed.
    pub action_time: u64,
    /// Bytes trimmed on the device in this pass.
    pub bytes_done: u64,
    /// Bytes of the top-level vdev's address space not yet walked.
    pub bytes_left: u64,
    /// Bytes per second (0: unlimited).
    pub rate: u64,
}

/// A pool checkpoint (`pool status`, `pool list`'s CKPOINT).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CheckpointData {
    pub txg: u64,
    /// Unix seconds.
    pub created: u64,
    /// Bytes only the checkpoint still holds.
    pub held_bytes: u64,
}

/// One event of `pool events` (data: `Vec<EventRow>`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EventRow {
    pub seq: u64,
    #[serde(flatten)]
    pub event: crate::events::Event,
}

/// One channel's result of `alert test` (data: `Vec<AlertTestRow>`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AlertTestRow {
    pub channel: String,
    pub ok: bool,
    pub error: Option<String>,
}

/// One vdev in `pool iostat` / `pool list -v`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VdevIostat {
    pub name: String,
    /// root, mirror, raidz, file, replacing, spare.
    pub vdev_type: String,
    pub guid: u64,
    pub state: String,
    /// Bytes: the pool's and a top-level vdev's usable size; a device's
    /// size (0 when missing); 0 for replacing/spare groups.
    pub size: u64,
    /// The pool and top-level vdevs only: allocated and free bytes.
    pub alloc: Option<u64>,
    pub free: Option<u64>,
    /// Totals since import (a group's: the sum of its devices').
    pub io: tarn_vdev::IoCounters,
    pub children: Vec<VdevIostat>,
}

/// Data of `pool_iostat`: `Vec<PoolIostatData>`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolIostatData {
    pub name: String,
    pub guid: u64,
    pub state: String,
    pub root: VdevIostat,
    /// Log vdevs (not under the root: their space is not the pool's).
    #[serde(default)]
    pub logs: Vec<VdevIostat>,
    /// Hot spares (AVAIL or INUSE).
    pub spares: Vec<VdevIostat>,
    /// Cache devices (L2ARC; not pool space either).
    #[serde(default)]
    pub cache: Vec<VdevIostat>,
}

/// Data of `pool_history`: `Vec<PoolHistoryData>`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolHistoryData {
    pub name: String,
    pub records: Vec<tarn_ds::history::HistoryRecord>,
    /// Records dropped to keep the history within its size.
    pub dropped: u64,
}

/// One line of `diff`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DiffRow {
    /// `+`, `-`, `M` or `R`.
    pub change: char,
    /// zfs's file type letter: `F` file, `/` directory, `@` symlink, `|`
    /// fifo, `=` socket, `B` block device, `C` character device.
    pub file_type: char,
    /// Absolute path (mountpoint + path in the dataset), raw bytes.
    pub path: Vec<u8>,
    /// `R`: the path after the rename.
    pub new_path: Option<Vec<u8>>,
    /// A change of link count (printed as `(+1)`), for files still linked
    /// on both sides.
    pub link_delta: Option<i64>,
    /// Inode change time (ctime), nanoseconds since the Unix epoch.
    pub ctime_ns: i64,
}

/// Data of `diff`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DiffData {
    pub rows: Vec<DiffRow>,
}
