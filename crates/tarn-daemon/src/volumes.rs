//! Volumes in the daemon (issue 13): a volume is *open* (its intent log
//! replayed, [`tarn_vol::Volume`] in `Imported::volumes`) whenever a file
//! system would be mounted: at import, creation, load-key, after a
//! rollback or receive. Every path that takes mounts away closes the
//! volumes among the same names first ([`close_volumes`]): no request
//! reaches an object set being destroyed, rolled back or exported.
//!
//! With `[nbd]` in the config, the NBD server (tarn-nbd) serves every open
//! volume under its dataset name, and every snapshot of one, read-only,
//! as `pool/vol@snap`. The export table is recomputed with the share
//! table (after each request that may change it, and every two seconds);
//! a connection whose volume was closed or reopened is cut.
//!
//! Lock order: the daemon's `pools`, then [`Nbd`]'s state.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_share::nfs::HostList;
use tarn_vol::{SyncMode, VolOptions, Volume};

use crate::daemon::Imported;

/// `[nbd]`: the listener and who may connect.
#[derive(Clone, Debug, PartialEq)]
pub struct NbdConfig {
    pub enable: bool,
    pub listen: SocketAddr,
    pub hosts: HostList,
    /// Microseconds a connection polls for the next request (tarn-share `poll.rs`).
    pub busy_poll_us: u64,
}

impl Default for NbdConfig {
    fn default() -> NbdConfig {
        // Localhost unless told otherwise: volumes carry whole disks.
        NbdConfig {
            enable: true,
            listen: "127.0.0.1:10809".parse().expect("literal"),
            hosts: HostList::everyone(),
            busy_poll_us: tarn_share::poll::BUSY_POLL_US,
        }
    }
}

fn sync_mode(p: tarn_ds::props::SyncProp) -> SyncMode {
    match p {
        tarn_ds::props::SyncProp::Standard => SyncMode::Standard,
        tarn_ds::props::SyncProp::Always => SyncMode::Always,
        tarn_ds::props::SyncProp::Disabled => SyncMode::Disabled,
    }
}

/// The geometry `create -V` asks for (checked).
pub(crate) fn geometry(spec: &crate::proto::VolumeSpec) -> Result<tarn_ds::volumes::VolumeRecord, String> {
    let volblocksize = match &spec.blocksize {
        Some(text) => tarn_ds::volumes::parse_volblocksize(text).map_err(|e| e.to_string())?,
        None => tarn_ds::volumes::DEFAULT_VOLBLOCKSIZE,
    };
    let volsize = tarn_ds::volumes::parse_volsize(&spec.size, volblocksize).map_err(|e| e.to_string())?;
    Ok(tarn_ds::volumes::VolumeRecord { volsize, volblocksize })
}

/// Opens the volume `name` (a no-op if it is open); its log is replayed.
pub(crate) fn open_volume(imported: &mut Imported, name: &str) -> Result<(), String> {
    if imported.volumes.contains_key(name) {
        return Ok(());
    }
    let Some(geometry) = imported.ds.volume_of(name) else { return Ok(()) };
    if !imported.ds.key_available(name) {
        return Err("encryption key not loaded".into());
    }
    let settings = imported.ds.settings(name).map_err(|e| e.to_string())?;
    let os = imported.ds.objset(name).map_err(|e| e.to_string())?;
    let opts = VolOptions { size: geometry.volsize, sync: sync_mode(settings.sync), readonly: settings.readonly };
    let objset = os.id();
    let volume = Volume::open(imported.ds.obj().clone(), os, opts).map_err(|e| e.to_string())?;
    let ds = Arc::downgrade(&imported.ds);
    volume.set_space_hold(Some(Arc::new(move || ds.upgrade().map_or(0, |ds| ds.reserved_elsewhere_of(objset)))));
    imported.volumes.insert(name.to_string(), volume);
    Ok(())
}

/// Closes the open volumes among `names` (waiting for their requests in
/// progress); returns the names closed.
pub(crate) fn close_volumes(imported: &mut Imported, names: &[String]) -> Vec<String> {
    let mut closed = Vec::new();
    for name in names {
        if let Some(v) = imported.volumes.remove(name) {
            v.close();
            closed.push(name.clone());
        }
    }
    closed
}

/// Closes every open volume of a pool.
pub(crate) fn close_all(imported: &mut Imported) {
    let names: Vec<String> = imported.volumes.keys().cloned().collect();
    close_volumes(imported, &names);
}

/// New `sync`, `readonly` and `volsize` reach the open volumes.
fn apply_settings(imported: &Imported) {
    for (name, vol) in &imported.volumes {
        let (Ok(settings), Some(geometry)) = (imported.ds.settings(name), imported.ds.volume_of(name)) else { continue };
        vol.set_options(sync_mode(settings.sync), settings.readonly);
        if vol.size() != geometry.volsize {
            if let Err(e) = vol.resize(geometry.volsize) {
                eprintln!("tarn daemon: volume '{name}': resize to {} failed: {e}", geometry.volsize);
            }
        }
    }
}

/// The NBD server and the snapshots it has open.
pub struct Nbd {
    config: Option<NbdConfig>,
    server: Mutex<Option<tarn_nbd::NbdServer>>,
    /// Snapshots of volumes opened for serving, by (pool guid, object set).
    snapshots: Mutex<BTreeMap<(u64, u64), Arc<Volume>>>,
}

impl Nbd {
    pub fn new(config: Option<NbdConfig>) -> Nbd {
        Nbd { config, server: Mutex::new(None), snapshots: Mutex::new(BTreeMap::new()) }
    }

    /// Starts listening when `[nbd]` is enabled; the log line.
    pub fn start(&self) -> Result<Option<String>, String> {
        let Some(config) = self.config.as_ref().filter(|c| c.enable) else { return Ok(None) };
        let server = tarn_nbd::NbdServer::start(config.listen, config.hosts.clone())
            .map_err(|e| format!("NBD server: cannot listen on {}: {e}", config.listen))?;
        server.set_busy_poll_us(config.busy_poll_us);
        let line = format!("NBD server listening on {}; every volume is served under its name", server.local_addr());
        *self.server.lock() = Some(server);
        Ok(Some(line))
    }

    pub fn stop(&self) {
        if let Some(server) = self.server.lock().take() {
            server.shutdown();
        }
        for (_, v) in std::mem::take(&mut *self.snapshots.lock()) {
            v.close();
        }
    }

    pub fn addr(&self) -> Option<SocketAddr> {
        self.server.lock().as_ref().map(|s| s.local_addr())
    }

    /// Applies the pools' volume settings and recomputes the exports.
    pub fn refresh(&self, pools: &BTreeMap<String, Imported>) {
        for imported in pools.values() {
            apply_settings(imported);
        }
        let server = self.server.lock();
        let Some(server) = server.as_ref() else { return };
        let mut exports = Vec::new();
        let mut snapshots = self.snapshots.lock();
        let mut keep = BTreeMap::new();
        for imported in pools.values() {
            let guid = imported.ds.obj().guid();
            for (name, vol) in &imported.volumes {
                exports.push(tarn_nbd::Export { name: name.clone(), volume: vol.clone(), readonly: vol.is_readonly(), description: format!("tarn volume {name}") });
                for snap in imported.ds.snapshots(Some(name)) {
                    let Ok(record) = imported.ds.snapshot_record(&snap) else { continue };
                    let Some(geometry) = record.volume else { continue };
                    let key = (guid, record.objset);
                    let vol = match snapshots.remove(&key) {
                        Some(v) if !v.is_closed() => v,
                        _ => {
                            let Ok(os) = imported.ds.snapshot_objset(&snap) else { continue };
                            let opts = VolOptions { size: geometry.volsize, sync: SyncMode::Standard, readonly: true };
                            match Volume::open(imported.ds.obj().clone(), os, opts) {
                                Ok(v) => v,
                                Err(e) => {
                                    eprintln!("tarn daemon: snapshot '{snap}' not served: {e}");
                                    continue;
                                }
                            }
                        }
                    };
                    exports.push(tarn_nbd::Export { name: snap.clone(), volume: vol.clone(), readonly: true, description: format!("tarn snapshot {snap}") });
                    keep.insert(key, vol);
                }
            }
        }
        // Snapshots no longer served (destroyed, their volume closed).
        for (_, v) in std::mem::replace(&mut *snapshots, keep) {
            v.close();
        }
        server.set_exports(exports);
    }
}

/// Parses the `[nbd]` table.
pub fn parse_nbd(table: &toml::Table) -> Result<NbdConfig, String> {
    let mut config = NbdConfig::default();
    for (key, value) in table {
        match key.as_str() {
            "enable" => config.enable = value.as_bool().ok_or("[nbd] enable: must be true or false")?,
            "listen" => {
                let text = value.as_str().ok_or("[nbd] listen: must be a string such as \"127.0.0.1:10809\"")?;
                config.listen = text.parse().map_err(|_| format!("[nbd] listen: '{text}' is not ADDRESS:PORT (e.g. 127.0.0.1:10809)"))?;
            }
            "hosts" => {
                let items: Vec<String> = value
                    .as_array()
                    .ok_or("[nbd] hosts: must be a list of addresses, networks (CIDR) or names")?
                    .iter()
                    .map(|v| v.as_str().map(str::to_string).ok_or("[nbd] hosts: each item must be a string"))
                    .collect::<Result<_, _>>()?;
                config.hosts = HostList::from_items(&items).map_err(|e| format!("[nbd] hosts: {e}"))?;
            }
            "busy_poll_us" => config.busy_poll_us = crate::share_config::busy_poll_us("nbd", value)?,
            _ => return Err(format!("unknown key '{key}' in [nbd] (known: enable, listen, hosts, busy_poll_us)")),
        }
    }
    Ok(config)
}
