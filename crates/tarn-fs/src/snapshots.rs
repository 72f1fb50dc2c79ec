//! Where a front end finds `.zfs/snapshot`: the dataset's snapshots, each
//! a read-only file system. The daemon implements it; tarn-fuse and
//! tarn-nfs both serve it, so it lives here, below both.

use std::sync::Arc;

use crate::Fs;

/// Where `.zfs/snapshot` gets its contents (the daemon: the dataset's
/// snapshots, each opened read-only).
pub trait SnapshotSource: Send + Sync {
    /// Snapshot names (the part after `@`), oldest first.
    fn names(&self) -> Vec<String>;
    /// The named snapshot's file system, read-only.
    fn open(&self, name: &str) -> Option<Arc<Fs>>;
    /// `snapdir=visible`: list `.zfs` in the root directory.
    fn visible(&self) -> bool;
}
