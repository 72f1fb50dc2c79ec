//! The only place that touches the POSIX layer and FUSE: formatting a new
//! dataset, mounting, changing options of a mounted file system, unmounting.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tarn_ds::Settings;
use tarn_obj::{ObjPool, ObjectSet, Tx};

/// Lay out an empty file system in a fresh object set.
pub fn format(os: &ObjectSet, tx: &Tx) -> Result<(), String> {
    tarn_fs::Fs::format(os, tx).map_err(|e| e.to_string())
}

fn fs_options(settings: &Settings) -> tarn_fs::FsOptions {
    tarn_fs::FsOptions {
        recordsize: settings.recordsize,
        atime: settings.atime,
        readonly: settings.readonly,
        quota: settings.quota,
    }
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
    ) -> Result<Mounted, String> {
        std::fs::create_dir_all(path).map_err(|e| format!("cannot create mountpoint {}: {e}", path.display()))?;
        let fs = tarn_fs::Fs::open(pool, os, fs_options(settings)).map_err(|e| e.to_string())?;
        let options = tarn_fuse::MountOptions {
            fsname: dataset.to_string(),
            readonly: settings.readonly,
            allow_other: false,
        };
        let handle = tarn_fuse::mount(fs.clone(), path, options).map_err(|e| e.to_string())?;
        Ok(Mounted { path: path.to_path_buf(), fs, handle })
    }

    /// The path of object `ino` in this mount, if it is a reachable file.
    pub fn path_of(&self, ino: u64) -> Option<String> {
        let rel = self.fs.path_of(ino)?;
        Some(format!("{}{}", self.path.display().to_string().trim_end_matches('/'), rel))
    }

    pub fn set_options(&self, settings: &Settings) {
        self.fs.set_options(fs_options(settings));
    }

    /// Forced unmount: a busy mount is detached lazily.
    pub fn unmount(self) {
        let Mounted { handle, fs, .. } = self;
        #[allow(clippy::let_unit_value)]
        let _ = handle.unmount();
        drop(fs);
    }

    /// Unmount unless busy; a busy mount stays as it was.
    pub fn try_unmount(&mut self) -> Result<(), String> {
        self.handle.try_unmount().map_err(|e| {
            if e.raw_os_error() == Some(libc::EBUSY) {
                format!("cannot unmount '{}': target is busy (use -f to force)", self.path.display())
            } else {
                format!("cannot unmount '{}': {e}", self.path.display())
            }
        })
    }
}
