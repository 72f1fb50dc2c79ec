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

/// One top-level vdev as given on the command line.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct VdevGroup {
    pub kind: VdevKind,
    pub devices: Vec<String>,
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
    },
    PoolImport { dirs: Vec<String>, force: bool, rewind: bool, altroot: Option<String>, pool: Option<String> },
    PoolExport { pool: String, force: bool },
    PoolDestroy { pool: String, force: bool },
    PoolList { pools: Vec<String>, parsable: bool },
    PoolStatus { pools: Vec<String> },
    PoolSet { prop: String, value: String, pool: String },
    Create { dataset: String, parents: bool, props: Vec<(String, String)> },
    Destroy { dataset: String, recursive: bool, force: bool },
    /// `list` and `get`: properties of datasets. `props` empty = all.
    Props { datasets: Vec<String>, recursive: bool, props: Vec<String>, parsable: bool },
    Set { assignments: Vec<(String, String)>, dataset: String },
    Mount { dataset: Option<String> },
    Unmount { target: String, force: bool },
    DebugCheck { pool: String },
}

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
    /// OpenZFS JSON: LOCAL, DEFAULT, INHERITED, NONE.
    pub source_type: String,
    pub source_data: String,
}

/// One dataset's properties (data of `props`: `Vec<DatasetRow>`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DatasetRow {
    pub name: String,
    pub pool: String,
    pub createtxg: u64,
    pub props: Vec<PropCell>,
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
    /// root, disk, file, mirror, raidz.
    pub vdev_type: String,
    pub guid: u64,
    pub state: String,
    pub read_errors: u64,
    pub write_errors: u64,
    pub checksum_errors: u64,
    pub children: Vec<VdevStatus>,
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
}
