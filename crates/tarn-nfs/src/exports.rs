//! The export table: which datasets are served, to whom, and how a file
//! handle becomes a file system and an inode again.
//!
//! Rules are checked on every call by the client's address, not only at
//! MOUNT: handles can be guessed or kept from an earlier mount, so a
//! client refused now gets NFS3ERR_ACCES whatever handle it presents.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_fs::{Fs, SnapshotSource};
use tarn_share::nfs::{ClientAccess, NfsRules, Squash};

use crate::handle::{Handle, Kind};
use crate::rpc::Auth;

/// One exported dataset, as the daemon describes it.
#[derive(Clone)]
pub struct Export {
    /// "/" + dataset name, e.g. "/tank/media": what MNT is asked for.
    pub path: String,
    /// The dataset's mountpoint, if it has one: MNT answers it too.
    pub mountpoint: Option<String>,
    pub fs: Arc<Fs>,
    pub pool_guid: u64,
    /// Object set id of the dataset (what handles name).
    pub objset: u64,
    pub rules: NfsRules,
    /// `.zfs/snapshot` of the dataset; None: no `.zfs` over NFS.
    pub snapshots: Option<Arc<dyn SnapshotSource>>,
}

/// An export as `NfsServer::exports` reports it (for `tarn share -l`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportInfo {
    pub path: String,
    pub mountpoint: Option<String>,
    pub pool_guid: u64,
    pub objset: u64,
    /// Clients that mounted it (MNT without UMNT since this server started).
    pub clients: Vec<IpAddr>,
}

/// An export and the snapshots opened through it so far.
pub struct Entry {
    pub export: Export,
    /// Snapshot object set id → its read-only file system.
    snaps: Mutex<HashMap<u64, (String, Arc<Fs>)>>,
}

/// Which file system a handle's inode lives in.
#[derive(Clone)]
pub enum Node {
    /// An inode of the dataset (`snapshot` 0) or of one of its snapshots.
    Inode { fs: Arc<Fs>, ino: u64, snapshot: u64 },
    /// `.zfs`
    Ctl,
    /// `.zfs/snapshot`
    SnapDir,
}

impl Entry {
    pub fn new(export: Export) -> Entry {
        Entry { export, snaps: Mutex::new(HashMap::new()) }
    }

    pub fn root_handle(&self) -> Handle {
        let fs = &self.export.fs;
        let generation = fs.getattr(fs.root_ino()).map_or(0, |a| a.generation);
        self.handle_of(0, fs.root_ino(), generation)
    }

    /// The handle of `ino` (generation `generation`) in the dataset
    /// (`snapshot` 0) or in snapshot `snapshot`.
    pub fn handle_of(&self, snapshot: u64, ino: u64, generation: u64) -> Handle {
        Handle {
            kind: if snapshot == 0 { Kind::Node } else { Kind::SnapNode },
            pool_guid: self.export.pool_guid,
            objset: self.export.objset,
            snapshot,
            ino,
            generation,
        }
    }

    pub fn virtual_handle(&self, kind: Kind) -> Handle {
        Handle { kind, pool_guid: self.export.pool_guid, objset: self.export.objset, snapshot: 0, ino: 0, generation: 0 }
    }

    /// The snapshot named `name`, opened (and remembered) on first use:
    /// (object set id, file system).
    pub fn snapshot_by_name(&self, name: &str) -> Option<(u64, Arc<Fs>)> {
        let cached = self.snaps.lock().iter().find(|(_, (n, _))| n == name).map(|(id, (_, fs))| (*id, fs.clone()));
        if let Some((id, fs)) = cached {
            if self.still_there(id, &fs) {
                return Some((id, fs));
            }
        }
        let source = self.export.snapshots.as_ref()?;
        let fs = source.open(name)?;
        let id = fs.objset().id().0;
        self.snaps.lock().insert(id, (name.to_string(), fs.clone()));
        Some((id, fs))
    }

    /// The snapshot whose object set is `id`; opens the snapshots not yet
    /// opened until it is found. None: no such snapshot (any more).
    pub fn snapshot_by_id(&self, id: u64) -> Option<Arc<Fs>> {
        let cached = self.snaps.lock().get(&id).map(|(_, fs)| fs.clone());
        if let Some(fs) = cached {
            return self.still_there(id, &fs).then_some(fs);
        }
        let source = self.export.snapshots.as_ref()?;
        for name in source.names() {
            if let Some((sid, fs)) = self.snapshot_by_name(&name) {
                if sid == id {
                    return Some(fs);
                }
            }
        }
        None
    }

    /// Whether the opened snapshot `fs` (object set `id`) still exists
    /// (`Fs::objset_exists`); if not (destroyed since it was opened here),
    /// it is forgotten and its handles are STALE.
    fn still_there(&self, id: u64, fs: &Fs) -> bool {
        if fs.objset_exists() {
            return true;
        }
        self.snaps.lock().remove(&id);
        false
    }

    /// Snapshot names for `.zfs/snapshot` listings.
    pub fn snapshot_names(&self) -> Vec<String> {
        self.export.snapshots.as_ref().map(|s| s.names()).unwrap_or_default()
    }
}

/// The table the server answers from; replaced whole by `set_exports`.
#[derive(Default)]
pub struct Table {
    pub entries: Vec<Arc<Entry>>,
    /// (client, export path) of every MNT not yet UMNTed, bounded.
    pub mounts: Mutex<Vec<(IpAddr, String)>>,
}

/// Most MNT records kept for DUMP (older ones are dropped first).
pub const MOUNTS_MAX: usize = 4096;

impl Table {
    pub fn by_path(&self, path: &str) -> Option<&Arc<Entry>> {
        let path = if path.len() > 1 { path.trim_end_matches('/') } else { path };
        self.entries.iter().find(|e| e.export.path == path).or_else(|| {
            self.entries.iter().find(|e| e.export.mountpoint.as_deref().map(|m| m.trim_end_matches('/')) == Some(path))
        })
    }

    /// The export whose path or mountpoint is `path` or a directory above
    /// it (the deepest such), and the rest of `path` below that export's
    /// root: clients such as libnfs mount the directory they work in.
    pub fn by_path_below<'a>(&self, path: &'a str) -> Option<(&Arc<Entry>, &'a str)> {
        let path = if path.len() > 1 { path.trim_end_matches('/') } else { path };
        let below = |base: &str| -> Option<&'a str> {
            let base = if base.len() > 1 { base.trim_end_matches('/') } else { base };
            match path.strip_prefix(base)? {
                "" => Some(""),
                rest if rest.starts_with('/') || base == "/" => Some(rest.trim_start_matches('/')),
                _ => None,
            }
        };
        let mut best: Option<(&Arc<Entry>, &'a str)> = None;
        for e in &self.entries {
            for base in std::iter::once(e.export.path.as_str()).chain(e.export.mountpoint.as_deref()) {
                if let Some(rest) = below(base) {
                    if best.is_none_or(|(_, r)| rest.len() < r.len()) {
                        best = Some((e, rest));
                    }
                }
            }
        }
        best
    }

    pub fn by_handle(&self, h: &Handle) -> Option<&Arc<Entry>> {
        self.entries.iter().find(|e| e.export.pool_guid == h.pool_guid && e.export.objset == h.objset)
    }
}

/// Credentials after the export's squash rules: what tarn-fs is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// Applies `access`'s squash to the RPC credentials (AUTH_NONE is anon).
pub fn squash(auth: &Auth, access: &ClientAccess) -> Creds {
    let anon = Creds { uid: access.anonuid, gid: access.anongid, groups: Vec::new() };
    let Auth::Sys { uid, gid, groups } = auth else {
        return anon;
    };
    match access.squash {
        Squash::All => anon,
        Squash::None => Creds { uid: *uid, gid: *gid, groups: groups.clone() },
        Squash::Root => Creds {
            uid: if *uid == 0 { access.anonuid } else { *uid },
            gid: if *gid == 0 { access.anongid } else { *gid },
            groups: groups.iter().map(|&g| if g == 0 { access.anongid } else { g }).collect(),
        },
    }
}
