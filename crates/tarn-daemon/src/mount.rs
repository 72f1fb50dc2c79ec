//! The only place that touches the POSIX layer and FUSE: formatting a new
//! dataset, mounting, changing options of a mounted file system, unmounting.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tarn_ds::Settings;
use tarn_obj::{ObjPool, ObjectSet, Tx};

/// Lay out an empty file system in a fresh object set.
pub fn format(os: &ObjectSet, tx: &Tx) -> Result<(), String> {
    tarn_fs::Fs::format(os, tx).map_err(|e| e.to_string())
}

/// `[fuse] writeback_cache` of the daemon's config: mounts made from now on
/// use the kernel's writeback cache (tarn-fuse's notes on writes).
static WRITEBACK_CACHE: AtomicBool = AtomicBool::new(false);

pub fn set_writeback_cache(on: bool) {
    WRITEBACK_CACHE.store(on, Ordering::Relaxed);
}

/// Write what the kernel holds for the mount at `path` (dirty pages and
/// times: the writeback cache, shared mmap stores) into the pool. Before a
/// snapshot and before an unmount; never called from a FUSE worker.
pub fn flush_mount(path: &Path) {
    if let Err(e) = tarn_fuse::flush(path) {
        // Nothing is lost: the pages stay dirty and are written later.
        eprintln!("tarn daemon: flushing the mount at {}: {e}", path.display());
    }
}

fn fs_options(settings: &Settings) -> tarn_fs::FsOptions {
    tarn_fs::FsOptions {
        recordsize: settings.recordsize,
        atime: settings.atime,
        readonly: settings.readonly,
        sync: match settings.sync {
            tarn_ds::props::SyncProp::Standard => tarn_fs::SyncMode::Standard,
            tarn_ds::props::SyncProp::Always => tarn_fs::SyncMode::Always,
            tarn_ds::props::SyncProp::Disabled => tarn_fs::SyncMode::Disabled,
        },
    }
}

/// `.zfs/snapshot` of a mounted dataset: its snapshots, each opened
/// read-only (object set and file system) on first access.
struct DatasetSnapshots {
    ds: Arc<tarn_ds::Pool>,
    dataset: String,
    visible: bool,
}

impl tarn_fuse::SnapshotSource for DatasetSnapshots {
    fn names(&self) -> Vec<String> {
        let prefix = format!("{}@", self.dataset);
        self.ds.snapshots(Some(&self.dataset)).iter().filter_map(|n| n.strip_prefix(&prefix).map(str::to_string)).collect()
    }

    fn open(&self, name: &str) -> Option<Arc<tarn_fs::Fs>> {
        let os = self.ds.snapshot_objset(&format!("{}@{name}", self.dataset)).ok()?;
        let opts = tarn_fs::FsOptions { readonly: true, atime: false, ..tarn_fs::FsOptions::default() };
        tarn_fs::Fs::open(self.ds.obj().clone(), os, opts).ok()
    }

    fn visible(&self) -> bool {
        self.ds.settings(&self.dataset).map_or(self.visible, |s| s.snapdir_visible)
    }
}

/// A mounted dataset's quotas (its own and its ancestors'), asked by the
/// file system before each change that adds data. Follows the dataset by
/// object set, so a rename does not lose it.
struct DatasetLimit {
    ds: std::sync::Weak<tarn_ds::Pool>,
    objset: tarn_obj::ObjsetId,
}

impl tarn_fs::SpaceLimit for DatasetLimit {
    fn remaining(&self) -> Option<(u64, bool)> {
        self.ds.upgrade()?.quota_remaining(self.objset)
    }
    fn held_elsewhere(&self) -> u64 {
        self.ds.upgrade().map_or(0, |ds| ds.reserved_elsewhere_of(self.objset))
    }
}

pub fn space_limit(ds: &Arc<tarn_ds::Pool>, os: &ObjectSet) -> Arc<dyn tarn_fs::SpaceLimit> {
    Arc::new(DatasetLimit { ds: Arc::downgrade(ds), objset: os.id() })
}

pub fn snapshot_source(ds: &Arc<tarn_ds::Pool>, dataset: &str, settings: &Settings) -> Arc<dyn tarn_fuse::SnapshotSource> {
    Arc::new(DatasetSnapshots { ds: ds.clone(), dataset: dataset.to_string(), visible: settings.snapdir_visible })
}

/// A mounted dataset.
pub struct Mounted {
    pub path: PathBuf,
    fs: Arc<tarn_fs::Fs>,
    handle: tarn_fuse::MountHandle,
}

impl Mounted {
    pub fn mount(
        pool: Arc<ObjPool>,
        os: ObjectSet,
        settings: &Settings,
        dataset: &str,
        path: &Path,
        snapshots: Option<Arc<dyn tarn_fuse::SnapshotSource>>,
        limit: Option<Arc<dyn tarn_fs::SpaceLimit>>,
    ) -> Result<Mounted, String> {
        crate::stale::prepare_mountpoint(dataset, path)?;
        let fs = tarn_fs::Fs::open(pool, os, fs_options(settings)).map_err(|e| e.to_string())?;
        fs.set_space_limit(limit);
        let options = tarn_fuse::MountOptions {
            fsname: dataset.to_string(),
            readonly: settings.readonly,
            // A NAS is multi-user: every uid reaches what the permission bits
            // grant (the kernel checks them: default_permissions).
            allow_other: true,
            writeback_cache: WRITEBACK_CACHE.load(Ordering::Relaxed),
        };
        let handle = tarn_fuse::mount_with_snapshots(fs.clone(), path, options, snapshots).map_err(|e| e.to_string())?;
        Ok(Mounted { path: path.to_path_buf(), fs, handle })
    }

    /// The path of object `ino` in this mount, if it is a reachable file.
    pub fn path_of(&self, ino: u64) -> Option<String> {
        let rel = self.fs.path_of(ino)?;
        Some(format!("{}{}", self.path.display().to_string().trim_end_matches('/'), rel))
    }

    /// [`Mounted::path_of`] for objects whose inodes may not read: the
    /// paths of those of `inos` a directory walk finds (at most `limit`
    /// entries visited).
    pub fn paths_by_walk(&self, inos: &std::collections::BTreeSet<u64>, limit: u64) -> std::collections::BTreeMap<u64, String> {
        let base = self.path.display().to_string();
        let base = base.trim_end_matches('/');
        self.fs.paths_by_walk(inos, limit).into_iter().map(|(ino, rel)| (ino, format!("{base}{rel}"))).collect()
    }

    /// The dataset's file system (NFS serves the same one as FUSE).
    pub fn fs(&self) -> &Arc<tarn_fs::Fs> {
        &self.fs
    }

    pub fn set_options(&self, settings: &Settings) {
        self.fs.set_options(fs_options(settings));
    }

    /// Forced unmount: a busy mount is detached lazily.
    pub fn unmount(self) {
        crate::shares::before_unmount(&self.path);
        flush_mount(&self.path);
        let Mounted { handle, fs, .. } = self;
        #[allow(clippy::let_unit_value)]
        let _ = handle.unmount();
        drop(fs);
    }

    /// Unmount unless busy; a busy mount stays as it was.
    pub fn try_unmount(&mut self) -> Result<(), String> {
        crate::shares::before_unmount(&self.path);
        flush_mount(&self.path);
        self.handle.try_unmount().map_err(|e| {
            if e.raw_os_error() == Some(libc::EBUSY) {
                format!("cannot unmount '{}': target is busy (use -f to force)", self.path.display())
            } else {
                format!("cannot unmount '{}': {e}", self.path.display())
            }
        })
    }
}
