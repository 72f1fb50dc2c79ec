//! Datasets: the dataset tree of a pool, properties with inheritance, and
//! space accounting, on top of `tarn-obj`'s object sets.
//!
//! - [`props`]: property names, validation, defaults, inheritance, `SOURCE`
//!   (pure functions; the daemon and the CLI share them).
//! - [`size`]: sizes as users type and as ZFS prints them.
//! - [`pool`]: [`Pool`], the dataset tree of one imported pool, stored in the
//!   MOS (layout documented there).
//! - [`own_props`]: a dataset's own property values (local, received,
//!   masked) and the verbs that change them (`set`, `inherit [-S]`, what a
//!   receive does).
//!
//! Invariants:
//! - A pool's root dataset is named after the pool; every other dataset's
//!   parent exists.
//! - Every change to the tree or to a property is on disk (synced) when the
//!   call returns.
//! - The effective write properties (compression, checksum, copies) of every
//!   dataset are applied to its object set handle, which is shared by every
//!   user of the dataset.
//!
//! API Boundary: mounting and the POSIX layer are above this crate; the
//! daemon passes the POSIX layer's formatter in as a callback.

pub mod bookmarks;
pub mod claim;
pub mod clones;
pub mod encryption;
pub mod history;
pub mod own_props;
pub mod pool;
pub mod props;
pub mod quota;
pub mod rename;
pub mod reservation;
pub mod replication;
pub mod size;
pub mod snapshots;
pub mod time;
pub mod volumes;

pub use pool::{validate_dataset_name, DatasetRecord, Pool, PropValue};
pub use props::{Mountpoint, PropError, Settings, Source};

pub type Result<T> = std::result::Result<T, DsError>;

#[derive(Debug, thiserror::Error)]
pub enum DsError {
    #[error("dataset does not exist: '{0}'")]
    NotFound(String),
    #[error("dataset already exists: '{0}'")]
    Exists(String),
    #[error("no such pool '{0}'")]
    NoSuchPool(String),
    #[error("cannot create '{0}': parent does not exist (use -p to create parents)")]
    NoParent(String),
    #[error("cannot destroy '{0}': filesystem has children (use -r to destroy them too)")]
    HasChildren(String),
    #[error("cannot destroy '{0}': filesystem has snapshots (use -r to destroy them too)")]
    HasSnapshots(String),
    #[error("{0}")]
    Snapshot(String),
    #[error("cannot destroy '{0}': it is the pool's root dataset (use 'tarn pool destroy')")]
    IsPoolRoot(String),
    #[error("invalid dataset name '{name}': {why}")]
    BadName { name: String, why: String },
    #[error("{0}")]
    Prop(#[from] PropError),
    #[error("{0}")]
    BadValue(String),
    #[error("cannot initialize the dataset: {0}")]
    Init(String),
    #[error("dataset metadata is corrupt: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Obj(#[from] tarn_obj::ObjError),
    #[error("{0}")]
    Key(#[from] tarn_keys::KeyError),
    #[error("{0}")]
    Recv(String),
    /// `recv -s` stopped: `dataset` keeps the partial state and `token`.
    #[error("cannot receive into '{dataset}': {cause}; partial state saved (resume with: tarn send -t {token})")]
    RecvInterrupted { dataset: String, snapshots: Vec<String>, cause: String, token: String },
}
