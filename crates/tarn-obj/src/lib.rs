//! Objects: sparse arrays of blocks behind trees of block pointers, grouped
//! in object sets, changed only inside transaction groups.
//!
//! See `api_spec.md` beside this file for the contract upper layers use.

use std::sync::Arc;

pub use tarn_block::{ChecksumKind, Compression, DEFER_TXGS};
pub use tarn_dev::Device;

pub mod zap;

pub type Txg = u64;
pub type Result<T> = std::result::Result<T, ObjError>;

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId(pub u64);
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjsetId(pub u64);
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjType(pub u8);

pub const BONUS_LEN: usize = 96;
pub const MAX_BLOCK_SIZE: u32 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ObjError {
    #[error("no such object {0}")]
    NotFound(u64),
    #[error("already exists")]
    Exists,
    #[error("out of space")]
    NoSpace,
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("read-only")]
    ReadOnly,
    #[error("corrupt: {0}")]
    Corrupt(String),
    #[error("I/O error: {0}")]
    Io(String),
    #[error(transparent)]
    Vdev(#[from] tarn_vdev::VdevError),
    /// The object set is encrypted and its key is not loaded.
    #[error("encryption key not loaded")]
    KeyNotLoaded,
}

impl ObjError {
    pub fn errno(&self) -> i32 {
        match self {
            ObjError::NotFound(_) => libc_errno::ENOENT,
            ObjError::Exists => libc_errno::EEXIST,
            ObjError::NoSpace => libc_errno::ENOSPC,
            ObjError::Invalid(_) => libc_errno::EINVAL,
            ObjError::ReadOnly => libc_errno::EROFS,
            ObjError::Corrupt(_) | ObjError::Io(_) | ObjError::Vdev(_) => libc_errno::EIO,
            ObjError::KeyNotLoaded => libc_errno::EACCES,
        }
    }
}

mod libc_errno {
    pub const ENOENT: i32 = 2;
    pub const EACCES: i32 = 13;
    pub const EIO: i32 = 5;
    pub const EEXIST: i32 = 17;
    pub const EINVAL: i32 = 22;
    pub const ENOSPC: i32 = 28;
    pub const EROFS: i32 = 30;
}

/// An object set's per-dataset settings for how its blocks are written
/// and cached.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct WriteProps {
    pub compression: Compression,
    pub checksum: ChecksumKind,
    pub copies: u8,
    /// `primarycache`: which of its blocks the ARC keeps.
    pub primarycache: CachePolicy,
    /// `secondarycache`: which of its blocks the ARC may hand to the
    /// L2ARC when it evicts them.
    pub secondarycache: CachePolicy,
}

/// `primarycache` and `secondarycache`: all blocks, metadata only
/// (blocks of maps and dnodes, indirect blocks), or none. Under `none`,
/// indirect blocks are still cached (every read needs them to find the
/// data), unlike ZFS; a block already cached is still served from the
/// cache.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum CachePolicy {
    #[default]
    All,
    Metadata,
    None,
}

impl CachePolicy {
    /// Whether a level-0 block (of a map or metadata object if `metadata`)
    /// is kept in the cache.
    pub fn keeps(self, metadata: bool) -> bool {
        match self {
            CachePolicy::All => true,
            CachePolicy::Metadata => metadata,
            CachePolicy::None => false,
        }
    }
}

/// `logbias`: what a sync write of whole blocks optimizes. `Latency`
/// (the default) copies blocks of at most `zil::IMMEDIATE_WRITE_MAX` bytes
/// into the intent log and writes larger ones once, as the blocks the txg
/// adopts; `Throughput` writes every whole block that way, so the log
/// (and a SLOG) carries only pointers. Parts of blocks are always copied.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum LogBias {
    #[default]
    Latency,
    Throughput,
}

pub struct ObjInfo {
    pub otype: ObjType,
    pub block_size: u32,
    pub length: u64,
    pub used_bytes: u64,
    pub bonus: [u8; BONUS_LEN],
}

/// A hold on the open txg. Short-lived: never create one while holding one.
pub struct Tx {
    pub(crate) txg: Txg,
    pub(crate) _hold: Option<parking_lot::lock_api::ArcRwLockReadGuard<parking_lot::RawRwLock, ()>>,
    /// Notes of the changes to one object set, for its intent log
    /// ([`Tx::logged`], redo.rs).
    pub(crate) redo: Option<Box<redo::Capture>>,
}
impl Tx {
    pub fn txg(&self) -> Txg {
        self.txg
    }
}

mod check;
pub mod checkpoint;
pub mod crypt;
mod deadlist_cache;
pub mod diff;
mod dnode_prefetch;
pub mod format;
mod handles;
mod cache_vdevs;
pub mod l2arc;
mod log_vdevs;
mod objset;
mod par;
mod pool;
pub mod raw;
pub mod redo;
pub mod scan;
mod seek;
mod snap;
pub mod space;
mod tree;
mod vdev_space;
pub mod trim;
mod vdevs;
pub mod zil;

pub use dnode_prefetch::DNODE_PREFETCH_BLOCKS_MAX;
pub use objset::{ObjectSet, Segment};
pub use pool::{ObjPool, MOS_OBJSET_TABLE};
pub use space::{deflate_ratio, slop_bytes};

pub use tarn_vdev::{DevState, TopKind};

/// A top-level vdev to create: its kind and the opened devices with the
/// paths users gave.
pub type TopDevices = (TopKind, Vec<(String, Arc<dyn Device>)>);

/// What `ObjPool::create` needs.
pub struct PoolCreate {
    pub name: String,
    /// Top-level vdevs in order: kind and the opened devices with the paths users gave.
    pub tops: Vec<TopDevices>,
    pub ashift: u8,
    /// Pool properties recorded in the label config (e.g. "comment").
    pub properties: std::collections::BTreeMap<String, String>,
    pub hostname: String,
}

#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// `-F`: if the newest uberblock's tree does not verify, rewind to an older txg.
    pub rewind: bool,
    /// `-f`: import even if the pool looks active on another host or was not exported.
    pub force: bool,
    pub hostname: String,
    pub readonly: bool,
}

/// Raw bytes (all copies, raidz parity included); `ObjPool::deflate`
/// turns them into bytes of user data.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct PoolSpace {
    pub size: u64,
    pub alloc: u64,
    /// Free, frees still in the defer window included.
    pub free: u64,
    /// What users may still fill: `free` less the slop (see `space.rs`).
    pub available: u64,
}

/// Where the pool's ENOSPC answers came from (`ObjPool::nospace_refusals`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoSpaceRefusals {
    pub in_txg: u64,
    pub reserve: u64,
    pub reserve_waited_out: u64,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct PoolStatus {
    pub name: String,
    pub guid: u64,
    pub state: DevState,
    pub txg: Txg,
    pub tops: Vec<tarn_vdev::TopStatus>,
    /// Log vdevs (zpool's `logs` section), in vdev order.
    pub logs: Vec<tarn_vdev::TopStatus>,
    /// Available hot spares.
    pub spares: Vec<tarn_vdev::LeafStatus>,
    /// Cache devices (L2ARC; zpool's `cache` section).
    pub cache: Vec<tarn_vdev::LeafStatus>,
    /// Blocks that could not be read back correctly from any copy.
    pub data_errors: u64,
    pub scan: Option<scan::ScanStats>,
    /// Why the pool is suspended, if it is.
    pub suspended: Option<String>,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CheckReport {
    pub objsets: u64,
    pub blocks: u64,
    pub allocated_bytes: u64,
    /// Of `allocated_bytes`: blocks of dataset object sets' trees (heads,
    /// snapshots, clones; all copies; object set roots excluded), each
    /// counted once however many object sets share it. The sum of the
    /// datasets' raw `used` must equal it.
    pub dataset_bytes: u64,
    /// The rest of `allocated_bytes`: the MOS (dataset tables, dead lists,
    /// ZAPs), object set roots, the space map log.
    pub metadata_bytes: u64,
    pub damaged: Vec<String>,
    pub leaked_bytes: u64,
    pub double_allocated_bytes: u64,
    /// Object sets of the MOS's table that the caller's list of named ones
    /// ([`ObjPool::check_named`]) does not hold: each with the bytes only
    /// it references, which are counted in `leaked_bytes` too.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub orphans: Vec<String>,
}
impl CheckReport {
    pub fn ok(&self) -> bool {
        self.damaged.is_empty() && self.leaked_bytes == 0 && self.double_allocated_bytes == 0 && self.orphans.is_empty()
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Tunables {
    /// Cap of the process's ARC (one for all pools; tarn-block's arc.rs).
    pub arc_max: u64,
    /// Floor the ARC's target `c` never goes below under memory pressure.
    pub arc_min: u64,
    pub dirty_data_max: u64,
    /// A txg sync starts once changes not yet written pass this share (in
    /// percent) of `dirty_data_max` (besides `txg_timeout`): OpenZFS's
    /// `zfs_dirty_data_sync_percent`. Larger txgs absorb more rewrites of
    /// the same records; smaller ones write in shorter bursts.
    pub dirty_data_sync_percent: u64,
    pub txg_timeout_ms: u64,
    /// Memory for block pointers a scan sorts before issuing them.
    pub scan_mem_max: u64,
    /// Bytes per second a scan may issue (0: as fast as the devices go).
    pub scan_rate_max: u64,
    /// Bytes per second the L2ARC feed writes to the cache devices (one
    /// rate for the process; l2arc/).
    pub l2arc_write_max: u64,
    /// Added to `l2arc_write_max` while a pool's cache devices have not
    /// yet been filled once.
    pub l2arc_write_boost: u64,
}
/// `dirty_data_max` for a machine with `mem_total` bytes of RAM: a tenth
/// of it, at most 4 GiB, at least 64 MiB (OpenZFS's default, without its
/// floor). The daemon starts from this unless its config names a value;
/// [`Tunables::default`] keeps a fixed 512 MiB, so tests and embedders do
/// not depend on the machine.
pub fn dirty_data_max_for(mem_total: u64) -> u64 {
    (mem_total / 10).clamp(DIRTY_DATA_MAX_FLOOR, DIRTY_DATA_MAX_CAP)
}

/// `dirty_data_sync_percent` unless set (bench/writepath.sh's rows with
/// 25, 40, 50 and 60 in docs/benchmarks.md: from 50 on the fsync rows
/// fell by up to half).
pub const DIRTY_DATA_SYNC_PERCENT_DEFAULT: u64 = 25;

/// Largest `dirty_data_max` [`dirty_data_max_for`] picks.
pub const DIRTY_DATA_MAX_CAP: u64 = 4 << 30;
/// Smallest `dirty_data_max` [`dirty_data_max_for`] picks.
pub const DIRTY_DATA_MAX_FLOOR: u64 = 64 << 20;

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            arc_max: tarn_block::arc::default_arc_max(),
            arc_min: tarn_block::arc::ARC_MIN_DEFAULT,
            dirty_data_max: 512 << 20, dirty_data_sync_percent: DIRTY_DATA_SYNC_PERCENT_DEFAULT, txg_timeout_ms: 5000, scan_mem_max: 64 << 20, scan_rate_max: 0,
            l2arc_write_max: l2arc::WRITE_MAX_DEFAULT, l2arc_write_boost: l2arc::WRITE_BOOST_DEFAULT }
    }
}

