//! The share table: which mounted dataset is served over NFS and SMB, how,
//! and to whom.
//!
//! For every mounted dataset the table holds its effective (inherited)
//! `sharenfs` and `sharesmb`, minus the datasets `tarn unshare` took out.
//! It is recomputed from the pools after every request that can change it
//! (create, destroy, rename, mount, unmount, import, export, set, inherit,
//! …) and every two seconds (for receives and the monitor's changes), and
//! applied only when it differs: smbd gets a new smb.conf and a reload; the
//! NFS server (when `[nfs]` is configured) gets the new export list.
//!
//! Invariants:
//! - A share never outlives its mount: before a mount goes away
//!   ([`before_unmount`], called by mount.rs) its SMB share is taken out of
//!   smb.conf and its connections closed, and its NFS export dropped, so
//!   the unmount does not find smbd inside it.
//! - Lock order: the daemon's `pools`, then `table`, then smbd's state.
//! - SMB and NFS share the dataset's one mounted file system: SMB through
//!   its FUSE mountpoint, NFS through the same `tarn_fs::Fs`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tarn_share::nfs::{HostList, NfsRules};
use tarn_share::smb::SmbShare;

use crate::daemon::{Daemon, Imported};
use crate::proto::Request;
use crate::share_config::{NfsConfig, SmbConfig};
use crate::smbd::Smbd;

/// One dataset exported over NFS.
#[derive(Clone)]
pub struct NfsEntry {
    pub dataset: String,
    /// The mountpoint (what SMB and local users see).
    pub mountpoint: PathBuf,
    pub rules: NfsRules,
    pub fs: Arc<tarn_fs::Fs>,
    pub pool_guid: u64,
    pub objset: u64,
    /// `.zfs/snapshot` (not compared: a new one each refresh).
    pub snapshots: Arc<dyn tarn_fs::SnapshotSource>,
}

impl NfsEntry {
    fn export(&self) -> tarn_nfs::Export {
        tarn_nfs::Export {
            path: format!("/{}", self.dataset),
            mountpoint: Some(self.mountpoint.display().to_string()),
            fs: self.fs.clone(),
            pool_guid: self.pool_guid,
            objset: self.objset,
            rules: self.rules.clone(),
            snapshots: Some(self.snapshots.clone()),
        }
    }
}

impl PartialEq for NfsEntry {
    fn eq(&self, other: &NfsEntry) -> bool {
        self.dataset == other.dataset
            && self.mountpoint == other.mountpoint
            && self.rules == other.rules
            && Arc::ptr_eq(&self.fs, &other.fs)
            && self.pool_guid == other.pool_guid
            && self.objset == other.objset
    }
}

/// A row of `tarn share -l`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareRow {
    pub dataset: String,
    /// `nfs` or `smb`.
    pub protocol: String,
    /// NFS: the export path (`/tank/media`); SMB: the share name.
    pub share: String,
    pub mountpoint: String,
    /// Who may reach it and how (`rw=192.168.1.0/24,root_squash`; SMB:
    /// `hosts allow=...`, `everyone` …).
    pub clients: String,
    pub read_only: bool,
}

#[derive(Default)]
struct Table {
    nfs: Vec<NfsEntry>,
    smb: Vec<SmbShare>,
}

pub struct Shares {
    nfs_config: Option<NfsConfig>,
    smb_config: SmbConfig,
    smbd: Mutex<Option<Arc<Smbd>>>,
    /// Datasets `tarn unshare` took out (until `tarn share` or unmount).
    unshared: Mutex<BTreeSet<String>>,
    table: Mutex<Table>,
    /// The NFS server, when `[nfs]` is enabled.
    nfs_server: Mutex<Option<tarn_nfs::NfsServer>>,
    /// Pools (by guid) seen imported at the last refresh: a pool that
    /// appears gets the NFS server a new write verifier.
    pools_seen: Mutex<BTreeSet<u64>>,
}

/// A seed for the NFS write verifier that no earlier daemon start or
/// import used: the clock, the process and a counter, mixed.
fn fresh_seed() -> u64 {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    nanos ^ (u64::from(std::process::id()) << 40) ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The tables to tell before a mount goes away (one per daemon in the
/// process; tests run several).
static REGISTRY: Mutex<Vec<Weak<Shares>>> = Mutex::new(Vec::new());

/// Called by mount.rs before it unmounts `path`: no share may keep using it.
pub fn before_unmount(path: &Path) {
    let live: Vec<Arc<Shares>> = {
        let mut registry = REGISTRY.lock();
        registry.retain(|w| w.strong_count() > 0);
        registry.iter().filter_map(Weak::upgrade).collect()
    };
    for shares in live {
        shares.withdraw(path);
    }
}

impl Shares {
    pub fn new(nfs: Option<NfsConfig>, smb: SmbConfig) -> Arc<Shares> {
        let shares = Arc::new(Shares {
            nfs_config: nfs,
            smb_config: smb,
            smbd: Mutex::new(None),
            unshared: Mutex::new(BTreeSet::new()),
            table: Mutex::new(Table::default()),
            nfs_server: Mutex::new(None),
            pools_seen: Mutex::new(BTreeSet::new()),
        });
        REGISTRY.lock().push(Arc::downgrade(&shares));
        shares
    }

    /// Starts smbd when `[smb] enable = true` (an error when Samba is not
    /// installed). Called once by the daemon at start.
    pub fn start(&self, state_dir: &Path) -> Result<Vec<String>, String> {
        let mut log = Vec::new();
        if self.smb_config.enable {
            let smbd = Smbd::start(&self.smb_config, state_dir)?;
            log.push(format!(
                "smbd started (pid {}, port {}, config {})",
                smbd.pid().unwrap_or(0),
                self.smb_config.port,
                smbd.config_path().display()
            ));
            *self.smbd.lock() = Some(smbd);
        }
        if let Some(nfs) = self.nfs_config.as_ref().filter(|n| n.enable) {
            let server = tarn_nfs::NfsServer::start_held(nfs.listen, fresh_seed())
                .map_err(|e| format!("NFS server: cannot listen on {}: {e}", nfs.listen))?;
            server.set_busy_poll_us(nfs.busy_poll_us);
            log.push(format!("NFS server listening on {} (MOUNT and NFS v3); exports follow sharenfs", server.local_addr()));
            *self.nfs_server.lock() = Some(server);
        }
        Ok(log)
    }

    pub fn smbd(&self) -> Option<Arc<Smbd>> {
        self.smbd.lock().clone()
    }

    pub fn stop(&self) {
        if let Some(smbd) = self.smbd.lock().take() {
            smbd.stop();
        }
        if let Some(server) = self.nfs_server.lock().take() {
            server.shutdown();
        }
    }

    fn nfs_hosts(&self) -> HostList {
        self.nfs_config.as_ref().map_or_else(HostList::everyone, |n| n.hosts.clone())
    }

    /// Let NFS clients in: called once the pools found at start are
    /// imported and their exports set (clients wait in the backlog).
    pub fn serve_nfs(&self) {
        if let Some(server) = self.nfs_server.lock().as_ref() {
            server.serve_now();
        }
    }

    /// The NFS server's address (when `[nfs]` is enabled).
    pub fn nfs_addr(&self) -> Option<std::net::SocketAddr> {
        self.nfs_server.lock().as_ref().map(|s| s.local_addr())
    }

    fn apply_nfs(&self, entries: &[NfsEntry]) {
        if let Some(server) = self.nfs_server.lock().as_ref() {
            server.set_exports(entries.iter().map(NfsEntry::export).collect());
        }
    }

    fn withdraw(&self, path: &Path) {
        let mut table = self.table.lock();
        if table.nfs.iter().any(|e| e.mountpoint == path) {
            table.nfs.retain(|e| e.mountpoint != path);
            self.apply_nfs(&table.nfs);
        }
        if table.smb.iter().any(|s| s.path == path) {
            table.smb.retain(|s| s.path != path);
            if let Some(smbd) = self.smbd() {
                smbd.set_shares(table.smb.clone());
            }
        }
    }

    /// Recomputes the table from the pools and applies what changed.
    /// Returns warnings (a bad inherited value, a share name used twice).
    pub fn refresh(&self, pools: &std::collections::BTreeMap<String, Imported>) -> Vec<String> {
        let mut warnings = Vec::new();
        let unshared = self.unshared.lock().clone();
        let mut nfs = Vec::new();
        let mut smb: Vec<SmbShare> = Vec::new();
        for imported in pools.values() {
            for (dataset, mounted) in &imported.mounts {
                if unshared.contains(dataset) || imported.busy.contains(dataset) {
                    continue;
                }
                let value = |prop: &str| {
                    imported.ds.get_property(dataset, prop, true, None).map(|v| v.value).unwrap_or_else(|_| "off".into())
                };
                match tarn_share::nfs::parse_with_default(&value("sharenfs"), &self.nfs_hosts()) {
                    Ok(Some(mut rules)) => {
                        for name in rules.resolve_names() {
                            warnings.push(format!("{dataset}: sharenfs host '{name}' does not resolve"));
                        }
                        // (A dataset gone since the mount list was read is skipped.)
                        let Ok(settings) = imported.ds.settings(dataset) else { continue };
                        let snapshots = crate::mount::snapshot_source(&imported.ds, dataset, &settings);
                        nfs.push(NfsEntry {
                            dataset: dataset.clone(),
                            mountpoint: mounted.path.clone(),
                            rules,
                            fs: mounted.fs().clone(),
                            pool_guid: imported.ds.obj().guid(),
                            objset: imported.ds.objset(dataset).map(|os| os.id().0).unwrap_or(0),
                            snapshots,
                        });
                    }
                    Ok(None) => {}
                    Err(e) => warnings.push(format!("{dataset}: sharenfs: {e}")),
                }
                match tarn_share::smb::parse(&value("sharesmb")) {
                    Ok(Some(rules)) => {
                        let name = rules.name.clone().unwrap_or_else(|| tarn_share::smb::default_share_name(dataset));
                        if smb.iter().any(|s| s.name.eq_ignore_ascii_case(&name)) {
                            warnings.push(format!("{dataset}: SMB share name '{name}' is already used; not shared"));
                            continue;
                        }
                        let read_only = rules.read_only || value("readonly") == "on";
                        smb.push(SmbShare { name, path: mounted.path.clone(), dataset: dataset.clone(), rules, read_only });
                    }
                    Ok(None) => {}
                    Err(e) => warnings.push(format!("{dataset}: sharesmb: {e}")),
                }
            }
        }
        let mut table = self.table.lock();
        if table.smb != smb {
            if let Some(smbd) = self.smbd() {
                smbd.set_shares(smb.clone());
            }
            table.smb = smb;
        }
        // A pool imported since the last look: UNSTABLE writes clients
        // sent to it before may be gone, so the verifier changes.
        let guids: BTreeSet<u64> = pools.values().map(|p| p.ds.obj().guid()).collect();
        {
            let mut seen = self.pools_seen.lock();
            if guids.iter().any(|g| !seen.contains(g)) {
                if let Some(server) = self.nfs_server.lock().as_ref() {
                    server.set_verifier_seed(fresh_seed());
                }
            }
            *seen = guids;
        }
        if table.nfs != nfs {
            self.apply_nfs(&nfs);
            table.nfs = nfs;
        }
        warnings
    }

    /// What is shared now, as `tarn share -l` lists it.
    pub fn rows(&self) -> Vec<ShareRow> {
        let table = self.table.lock();
        let mut rows = Vec::new();
        if self.nfs_config.as_ref().is_some_and(|n| n.enable) {
            for entry in &table.nfs {
                rows.push(ShareRow {
                    dataset: entry.dataset.clone(),
                    protocol: "nfs".into(),
                    share: format!("/{}", entry.dataset),
                    mountpoint: entry.mountpoint.display().to_string(),
                    clients: entry.rules.describe(),
                    read_only: false,
                });
            }
        }
        if self.smbd().is_some() {
            for share in &table.smb {
                let mut clients = Vec::new();
                if !share.rules.hosts_allow.is_empty() {
                    clients.push(format!("hosts allow={}", share.rules.hosts_allow.join(" ")));
                }
                if !share.rules.hosts_deny.is_empty() {
                    clients.push(format!("hosts deny={}", share.rules.hosts_deny.join(" ")));
                }
                if share.rules.guest_ok {
                    clients.push("guest ok".into());
                }
                if clients.is_empty() {
                    clients.push("users".into());
                }
                rows.push(ShareRow {
                    dataset: share.dataset.clone(),
                    protocol: "smb".into(),
                    share: share.name.clone(),
                    mountpoint: share.path.display().to_string(),
                    clients: clients.join(","),
                    read_only: share.read_only,
                });
            }
        }
        rows.sort_by(|a, b| (&a.dataset, &a.protocol).cmp(&(&b.dataset, &b.protocol)));
        rows
    }

    /// The NFS exports of the table (for the NFS server).
    pub fn nfs_entries(&self) -> Vec<NfsEntry> {
        self.table.lock().nfs.clone()
    }

    pub fn smb_enabled(&self) -> bool {
        self.smbd().is_some()
    }

    pub fn nfs_enabled(&self) -> bool {
        self.nfs_config.as_ref().is_some_and(|n| n.enable)
    }

    pub(crate) fn mark_unshared(&self, dataset: &str, unshared: bool) {
        let mut set = self.unshared.lock();
        if unshared {
            set.insert(dataset.to_string());
        } else {
            set.remove(dataset);
        }
    }

    pub(crate) fn clear_unshared(&self) {
        self.unshared.lock().clear();
    }

    /// Forget `unshare` marks of datasets no longer mounted: a later mount
    /// shares them again, as `zfs mount` does.
    fn forget_unmounted(&self, pools: &std::collections::BTreeMap<String, Imported>) {
        self.unshared.lock().retain(|d| pools.values().any(|p| p.mounts.contains_key(d)));
    }
}

/// Whether a request can change what is shared (everything that is not a
/// pure query).
pub fn may_change_shares(request: &Request) -> bool {
    !matches!(
        request,
        Request::Ping
            | Request::Props { .. }
            | Request::TypedProps { .. }
            | Request::PoolList { .. }
            | Request::PoolStatus { .. }
            | Request::PoolEvents { .. }
            | Request::PoolSync { .. }
            | Request::PoolIostat { .. }
            | Request::PoolHistory { .. }
            | Request::Holds { .. }
            | Request::Diff { .. }
            | Request::TunableGet { .. }
            | Request::Arcstat
            | Request::ShareList
            | Request::SmbUser { .. }
    )
}

impl Daemon {
    /// Recomputes and applies the share table; warnings go to the log.
    pub fn refresh_shares(&self) {
        let pools = self.pools.lock();
        self.shares.forget_unmounted(&pools);
        for warning in self.shares.refresh(&pools) {
            eprintln!("tarn daemon: {warning}");
        }
        self.nbd.refresh(&pools);
    }

    /// `tarn share -a` / `tarn share DATASET`.
    pub(crate) fn share(&self, dataset: Option<&str>) -> Result<crate::proto::Response, String> {
        match dataset {
            None => self.shares.clear_unshared(),
            Some(name) => {
                let fail = |why: &str| format!("cannot share '{name}': {why}");
                {
                    let pools = self.pools.lock();
                    let pool = name.split('/').next().unwrap_or(name);
                    let imported = pools.get(pool).filter(|p| p.ds.exists(name)).ok_or_else(|| fail("dataset does not exist"))?;
                    if !imported.mounts.contains_key(name) {
                        return Err(fail("filesystem is not mounted"));
                    }
                    let value = |prop: &str| imported.ds.get_property(name, prop, true, None).map(|v| v.value).unwrap_or_default();
                    if value("sharenfs") == "off" && value("sharesmb") == "off" {
                        return Err(fail("'sharenfs' and 'sharesmb' are both off"));
                    }
                }
                self.shares.mark_unshared(name, false);
            }
        }
        self.refresh_shares();
        Ok(crate::proto::Response::text(""))
    }

    /// `tarn unshare -a` / `tarn unshare DATASET|MOUNTPOINT`.
    pub(crate) fn unshare(&self, target: Option<&str>) -> Result<crate::proto::Response, String> {
        let rows = self.shares.rows();
        match target {
            None => {
                for row in &rows {
                    self.shares.mark_unshared(&row.dataset, true);
                }
            }
            Some(target) => {
                let Some(row) = rows.iter().find(|r| r.dataset == target || r.mountpoint == target) else {
                    return Err(format!("cannot unshare '{target}': not currently shared"));
                };
                self.shares.mark_unshared(&row.dataset, true);
            }
        }
        self.refresh_shares();
        Ok(crate::proto::Response::text(""))
    }

    pub(crate) fn share_list(&self) -> crate::proto::Response {
        crate::proto::Response::data(serde_json::to_value(self.shares.rows()).unwrap_or_default())
    }
}

/// Refreshes the table every two seconds (receives, the health monitor).
pub fn spawn_refresher(daemon: Arc<Daemon>) {
    let weak = Arc::downgrade(&daemon);
    drop(daemon);
    let _ = std::thread::Builder::new().name("tarn-shares".into()).spawn(move || loop {
        std::thread::sleep(Duration::from_secs(2));
        let Some(daemon) = weak.upgrade() else { return };
        daemon.refresh_shares();
    });
}
