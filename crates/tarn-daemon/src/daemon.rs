//! The daemon's state and its command handlers.
//!
//! Lock order: `pools` before `cache`. Handlers run on the client's thread;
//! each is wrapped in `catch_unwind` by the server, so a failing command
//! answers with an error and the daemon (and every other pool) carries on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::json;
use tarn_ds::props::{self, Mountpoint};
use tarn_ds::size::format_number;
use tarn_obj::{ImportOptions, ObjPool, PoolCreate, TopKind};

use crate::cache::{CachedPool, PoolCache};
use crate::mount::{self, Mounted};
use crate::proto::*;
use crate::scan;

pub struct Imported {
    pub ds: Arc<tarn_ds::Pool>,
    pub devices: Vec<String>,
    pub altroot: Option<String>,
    pub mounts: BTreeMap<String, Mounted>,
    /// Open volumes (volumes.rs), as mounts are for file systems.
    pub volumes: BTreeMap<String, Arc<tarn_vol::Volume>>,
    /// Datasets being rolled back or received: unmounted, and not to be mounted,
    /// snapshotted or destroyed until the rollback is done.
    pub busy: BTreeSet<String>,
}

pub struct Daemon {
    pub state_dir: PathBuf,
    pub socket: PathBuf,
    /// Tunables, set at run time by `tunable set` (tunables.rs).
    pub tuning: crate::tunables::Tuning,
    pub(crate) pools: Mutex<BTreeMap<String, Imported>>,
    pub(crate) cache: Mutex<PoolCache>,
    pub events: crate::events::EventLog,
    pub alerter: crate::alerts::Alerter,
    /// What the monitor saw last, per pool (to report changes once).
    pub(crate) watch: Mutex<BTreeMap<String, crate::health::PoolWatch>>,
    /// What is shared over NFS and SMB (shares.rs).
    pub shares: Arc<crate::shares::Shares>,
    /// Volumes over NBD (volumes.rs).
    pub nbd: crate::volumes::Nbd,
}

type HandlerResult = Result<Response, String>;

pub(crate) fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let len = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

/// zpool's pool name rules.
pub fn validate_pool_name(name: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("invalid pool name '{name}': {why}"));
    if name.is_empty() {
        return bad("empty name");
    }
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return bad("must begin with a letter");
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || "_.:-".contains(*c))) {
        return bad(&format!("invalid character '{c}'"));
    }
    if ["mirror", "raidz", "spare", "log", "cache", "draid"].iter().any(|w| name.starts_with(w)) {
        return bad("name is reserved");
    }
    if name.len() > 200 {
        return bad("name is too long");
    }
    Ok(())
}

fn state_name(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.to_ascii_uppercase(),
        serde_json::Value::Object(map) => map.keys().next().map(|k| k.to_ascii_uppercase()).unwrap_or_default(),
        other => other.to_string().to_ascii_uppercase(),
    }
}

fn top_kind_name(kind: &TopKind) -> (String, bool) {
    match kind {
        TopKind::Disk => ("disk".into(), false),
        TopKind::Mirror => ("mirror".into(), true),
        TopKind::Raidz { parity } => (format!("raidz{parity}"), true),
        TopKind::Hole => ("hole".into(), false),
    }
}

impl Daemon {
    pub fn new(state_dir: PathBuf, socket: PathBuf, mut config: crate::config::DaemonConfig) -> Result<Daemon, String> {
        // `dirty_data_max` not in the config: a tenth of the machine's
        // memory (docs/tuning.md), as OpenZFS sizes it.
        if !config.tunables_given.iter().any(|n| n == "dirty_data_max") {
            if let Some(total) = crate::memory::mem_total() {
                config.tunables.dirty_data_max = tarn_obj::dirty_data_max_for(total);
            }
        }
        let cache = PoolCache::load(&state_dir.join("pools.json"))?;
        let events = crate::events::EventLog::open(Some(state_dir.join("events.jsonl")));
        mount::set_writeback_cache(config.fuse_writeback_cache);
        Ok(Daemon {
            state_dir,
            socket,
            tuning: crate::tunables::Tuning::new(config.tunables, &config.tunables_given, None),
            pools: Mutex::new(BTreeMap::new()),
            cache: Mutex::new(cache),
            events,
            alerter: crate::alerts::Alerter::new(config.alerts),
            watch: Mutex::new(BTreeMap::new()),
            shares: crate::shares::Shares::new(config.nfs, config.smb),
            nbd: crate::volumes::Nbd::new(config.nbd),
        })
    }

    /// The `--config` file (`tunable set --persist` writes it).
    pub fn with_config_path(mut self, path: Option<PathBuf>) -> Daemon {
        self.tuning.config_path = path;
        self
    }

    fn cache_path(&self) -> PathBuf {
        self.state_dir.join("pools.json")
    }

    pub(crate) fn save_cache(&self, cache: &PoolCache) -> String {
        match cache.save(&self.cache_path()) {
            Ok(()) => String::new(),
            Err(e) => format!("warning: cannot record imported pools: {e}\n"),
        }
    }

    /// The names of the pools the cache says to re-import at start.
    pub fn cached_pool_names(&self) -> Vec<String> {
        self.cache.lock().pools.iter().map(|p| p.name.clone()).collect()
    }

    /// Re-import the pools recorded in pools.json (at start). Returns log lines.
    pub fn reimport_cached(&self) -> Vec<String> {
        let cached = self.cache.lock().pools.clone();
        let mut log = Vec::new();
        for pool in cached {
            let request = Request::PoolImport {
                dirs: Vec::new(),
                force: true,
                rewind: false,
                altroot: pool.altroot.clone(),
                pool: Some(pool.guid.to_string()),
                missing_log: pool.missing_log,
                // As a boot does (OpenZFS's zfs-load-key service): keys kept
                // in files are loaded, prompted ones wait for load-key.
                load_keys: true,
            };
            let paths = pool.devices.clone();
            match self.import_from(&paths, request) {
                Ok(response) => {
                    log.push(format!("re-imported pool '{}'", pool.name));
                    if !response.stderr.is_empty() {
                        log.push(response.stderr.trim_end().to_string());
                    }
                }
                Err(e) => log.push(format!("cannot re-import pool '{}': {e}", pool.name)),
            }
        }
        log
    }

    /// Unmount everything, sync every pool, leave them active (they are
    /// re-imported at the next start).
    pub fn shutdown(&self) {
        self.alerter.flush(std::time::Duration::from_secs(10));
        self.shares.stop();
        self.nbd.stop();
        let mut pools = self.pools.lock();
        for (name, imported) in pools.iter_mut() {
            unmount_all(imported);
            if let Err(e) = imported.ds.obj().sync() {
                eprintln!("tarn daemon: sync of pool '{name}' failed: {e}");
            }
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    pub fn handle(&self, request: Request) -> Response {
        let refresh = crate::shares::may_change_shares(&request);
        let response = self.dispatch(request);
        if refresh {
            self.refresh_shares();
        }
        response
    }

    fn dispatch(&self, request: Request) -> Response {
        let result = match request {
            Request::Ping => Ok(Response::data(json!({
                "version": env!("CARGO_PKG_VERSION"),
                "protocol": PROTOCOL_VERSION,
                "pid": std::process::id(),
                "state_dir": self.state_dir,
            }))),
            Request::Shutdown => Ok(Response::text("")),
            request @ Request::PoolCreate { .. } => self.pool_create(request),
            request @ Request::PoolImport { .. } => self.pool_import(request),
            Request::PoolExport { pool, force } => self.pool_export(&pool, false, force),
            Request::PoolDestroy { pool, force } => self.pool_export(&pool, true, force),
            Request::PoolList { pools, parsable } => self.pool_list(&pools, parsable),
            Request::PoolStatus { pools, verbose } => self.pool_status(&pools, verbose),
            Request::PoolSet { prop, value, pool } => self.pool_set(&prop, &value, &pool),
            Request::Create { dataset, parents, props, key, volume } => self.create(&dataset, parents, &props, key.as_ref().map(KeyBytes::expose), volume.as_ref()),
            Request::KeyRoots { datasets, recursive, all } => self.key_roots(&datasets, recursive, all),
            Request::LoadKey { dataset, noop, location, key } => self.load_key(&dataset, noop, location.as_deref(), key.as_ref().map(KeyBytes::expose)),
            Request::UnloadKey { dataset } => self.unload_key(&dataset),
            Request::ChangeKey { dataset, props, key, inherit } => self.change_key(&dataset, &props, key.as_ref().map(KeyBytes::expose), inherit),
            Request::Destroy { dataset, recursive, force, dry_run, dependents } => {
                if dataset.contains('@') {
                    self.destroy_snapshots(&dataset, recursive, dry_run, dependents, force)
                } else if dataset.contains('#') {
                    self.destroy_bookmark(&dataset, dry_run)
                } else {
                    self.destroy(&dataset, recursive, force, dry_run, dependents)
                }
            }
            Request::Props { datasets, recursive, props, parsable } => {
                let query = crate::listing::Query { datasets, recursive, props, parsable, types: vec!["filesystem".into()], depth: None, sort: vec![] };
                self.dataset_props(&query)
            }
            Request::TypedProps { datasets, recursive, props, parsable, types, depth, sort } => {
                self.dataset_props(&crate::listing::Query { datasets, recursive, props, parsable, types, depth, sort })
            }
            Request::Snapshot { names, recursive } => self.snapshot(&names, recursive),
            Request::Bookmark { source, target } => self.bookmark(&source, &target),
            Request::Rollback { snapshot, destroy_later, force } => self.rollback(&snapshot, destroy_later, force),
            Request::Clone { snapshot, target, properties } => self.clone_snapshot(&snapshot, &target, &properties),
            Request::Promote { dataset } => self.promote(&dataset),
            Request::Hold { tag, snapshots, release, recursive } => self.hold(&tag, &snapshots, release, recursive),
            Request::Holds { snapshots, recursive } => self.holds(&snapshots, recursive),
            Request::Set { assignments, dataset, force } => self.set(&assignments, &dataset, force),
            Request::Inherit { prop, datasets, recursive, received } => self.inherit(&prop, &datasets, recursive, received),
            Request::Rename { source, target, parents, recursive, force, no_mount } => {
                self.rename(&source, &target, parents, recursive, force, no_mount)
            }
            Request::MountAll => self.mount_all(),
            Request::UnmountAll { force } => self.unmount_all(force),
            Request::Mount { dataset } => self.mount(dataset.as_deref()),
            Request::Unmount { target, force } => self.unmount(&target, force),
            Request::DebugCheck { pool } => self.debug_check(&pool),
            Request::PoolIostat { pools } => self.pool_iostat(&pools),
            Request::PoolHistory { pools } => self.pool_history(&pools),
            Request::Diff { from, to } => self.diff(&from, to.as_deref()),
            request @ (Request::PoolTrim { .. } | Request::PoolCheckpoint { .. } | Request::PoolImportCheckpoint { .. }) => {
                self.handle_trim(request)
            }
            Request::TunableGet { name } => Ok(self.tunable_get(name.as_deref())),
            Request::TunableSet { assignments, persist } => Ok(self.tunable_set(&assignments, persist)),
            Request::Arcstat => Ok(self.arcstat()),
            Request::Share { dataset } => self.share(dataset.as_deref()),
            Request::Unshare { target } => self.unshare(target.as_deref()),
            Request::ShareList => Ok(self.share_list()),
            Request::SmbUser { action, user, password } => self.smb_user(&action, user.as_deref(), password.as_deref()),
            other => self.handle_health(other),
        };
        result.unwrap_or_else(Response::error)
    }

    fn pool_create(&self, request: Request) -> HandlerResult {
        let Request::PoolCreate { pool, vdevs, force, dry_run, mountpoint, altroot, ashift, pool_props, fs_props, cache, key } =
            request
        else {
            unreachable!()
        };
        let fail = |why: String| format!("cannot create '{pool}': {why}");
        validate_pool_name(&pool).map_err(fail)?;
        let ashift = ashift.unwrap_or(12);
        if !(9..=16).contains(&ashift) {
            return Err(fail(format!("ashift {ashift} is out of range (9..16)")));
        }
        for (prop, value) in &pool_props {
            props::validate_pool_prop(prop, value).map_err(|e| fail(e.to_string()))?;
        }
        let mut root_props = Vec::new();
        for (prop, value) in &fs_props {
            // The encryption properties are checked where the key is made.
            if !tarn_ds::encryption::CREATE_PROPS.contains(&prop.as_str()) {
                props::validate(prop, value).map_err(|e| fail(e.to_string()))?;
            }
            root_props.push((prop.clone(), value.clone()));
        }
        if let Some(mountpoint) = &mountpoint {
            props::validate("mountpoint", mountpoint).map_err(|e| fail(e.to_string()))?;
            root_props.push(("mountpoint".to_string(), mountpoint.clone()));
        }
        if let Some(root) = &altroot {
            if !root.starts_with('/') {
                return Err(fail(format!("altroot '{root}' must be an absolute path")));
            }
        }
        if vdevs.is_empty() {
            return Err(fail("no devices given".into()));
        }
        if vdevs.iter().all(|g| g.log) {
            return Err(fail("at least one top-level vdev that is not a log must be given".into()));
        }
        if let Some(group) = vdevs.iter().find(|g| g.log && matches!(g.kind, VdevKind::Raidz { .. })) {
            return Err(fail(format!("{} cannot be a log vdev: a log vdev is a disk or a mirror", describe_group(group))));
        }
        let mut seen = Vec::new();
        for group in &vdevs {
            let needed = match group.kind {
                VdevKind::Disk => 1,
                VdevKind::Mirror => 2,
                VdevKind::Raidz { parity } => parity as usize + 1,
            };
            if group.devices.len() < needed {
                return Err(fail(format!("{} needs at least {needed} devices", describe_group(group))));
            }
            for device in &group.devices {
                if seen.contains(device) {
                    return Err(fail(format!("device '{device}' is given more than once")));
                }
                seen.push(device.clone());
            }
        }
        for device in &cache {
            if seen.contains(device) {
                return Err(fail(format!("device '{device}' is given more than once")));
            }
            seen.push(device.clone());
        }
        let mut pools = self.pools.lock();
        if pools.contains_key(&pool) {
            return Err(fail("a pool with that name already exists".into()));
        }
        // Open and inspect every device.
        let mut tops = Vec::new();
        let mut logs = Vec::new();
        for group in &vdevs {
            let mut opened = Vec::new();
            for path in &group.devices {
                let device = scan::open_new_device(path, force).map_err(fail)?;
                opened.push((path.clone(), device));
            }
            if !force && opened.len() > 1 {
                let sizes: Vec<u64> = opened.iter().map(|(_, d)| d.size()).collect();
                let (min, max) = (*sizes.iter().min().unwrap_or(&0), *sizes.iter().max().unwrap_or(&0));
                if max - min > max / 100 {
                    return Err(fail(format!(
                        "{} contains devices of different sizes (use -f to override)",
                        describe_group(group)
                    )));
                }
            }
            let kind = match group.kind {
                VdevKind::Disk => TopKind::Disk,
                VdevKind::Mirror => TopKind::Mirror,
                VdevKind::Raidz { parity } => TopKind::Raidz { parity },
            };
            if group.log {
                logs.push((kind, opened));
            } else {
                tops.push((kind, opened));
            }
        }
        let mut cache_devs = Vec::new();
        for path in &cache {
            cache_devs.push((path.clone(), scan::open_new_device(path, force).map_err(fail)?));
        }
        if !force {
            let redundancy = |g: &VdevGroup| match g.kind {
                VdevKind::Disk => "no redundancy".to_string(),
                VdevKind::Mirror => format!("{}-way mirror", g.devices.len()),
                VdevKind::Raidz { parity } => format!("raidz{parity}"),
            };
            // Log vdevs have a redundancy of their own.
            let normal: Vec<&VdevGroup> = vdevs.iter().filter(|g| !g.log).collect();
            let first = normal.first().map(|g| redundancy(g)).unwrap_or_default();
            if let Some(other) = normal.iter().map(|g| redundancy(g)).find(|r| *r != first) {
                return Err(fail(format!(
                    "mismatched replication level: both {first} and {other} are present (use -f to override)"
                )));
            }
        }
        if dry_run {
            let mut out = format!("would create '{pool}' with the following layout:\n\n\t{pool}\n");
            let normal = vdevs.iter().filter(|g| !g.log);
            let log = vdevs.iter().filter(|g| g.log);
            for (i, group) in normal.chain(log).enumerate() {
                if group.log && vdevs.iter().filter(|g| !g.log).count() == i {
                    out.push_str("\tlogs\n");
                }
                match group.kind {
                    VdevKind::Disk => out.push_str(&format!("\t  {}\n", group.devices[0])),
                    _ => {
                        out.push_str(&format!("\t  {}\n", describe_group(group)));
                        for device in &group.devices {
                            out.push_str(&format!("\t    {device}\n"));
                        }
                    }
                }
            }
            if !cache.is_empty() {
                out.push_str("\tcache\n");
            }
            for device in &cache {
                out.push_str(&format!("\t  {device}\n"));
            }
            return Ok(Response::text(out));
        }
        let all_paths: Vec<String> = seen;
        let obj = ObjPool::create_with_devices(
            PoolCreate { name: pool.clone(), tops, ashift, properties: pool_props.iter().cloned().collect(), hostname: hostname() },
            logs,
            cache_devs,
        )
        .map_err(|e| fail(e.to_string()))?;
        obj.set_tunables(self.tuning.get());
        let material = match crate::keys::creation_material(&root_props, key.as_ref().map(KeyBytes::expose)) {
            Ok(m) => m,
            Err(e) => {
                let _ = obj.export();
                drop(obj);
                clear_labels(&all_paths);
                return Err(fail(e));
            }
        };
        let ds = match tarn_ds::Pool::create_keyed(obj.clone(), &root_props, &mount::format, material.as_ref()) {
            Ok(ds) => ds,
            Err(e) => {
                let _ = obj.export();
                drop(obj);
                clear_labels(&all_paths);
                return Err(fail(e.to_string()));
            }
        };
        let mut warnings = String::new();
        for (prop, value) in &pool_props {
            if let Err(e) = ds.set_pool_property(prop, value) {
                warnings.push_str(&format!("warning: {e}\n"));
            }
        }
        let mut imported = Imported { ds, devices: all_paths.clone(), altroot, mounts: BTreeMap::new(), volumes: BTreeMap::new(), busy: BTreeSet::new() };
        let mount_failures = mount_all(&mut imported);
        let exit = if mount_failures.is_empty() { 0 } else { 1 };
        warnings.push_str(&mount_failures);
        let guid = imported.ds.obj().guid();
        let cached = CachedPool { name: pool.clone(), guid, devices: all_paths, altroot: imported.altroot.clone(), missing_log: false };
        pools.insert(pool, imported);
        let mut cache = self.cache.lock();
        cache.remember(cached);
        warnings.push_str(&self.save_cache(&cache));
        // Like zpool: the pool exists, but a dataset that did not mount is a failure.
        Ok(Response { stderr: warnings, exit, ..Response::text("") })
    }

    pub(crate) fn pool_import(&self, request: Request) -> HandlerResult {
        let (Request::PoolImport { dirs, .. } | Request::PoolImportCheckpoint { dirs, .. }) = &request else { unreachable!() };
        let mut extra = Vec::new();
        let dirs = if dirs.is_empty() {
            extra = self.cache.lock().known_devices.clone();
            vec!["/dev".to_string()]
        } else {
            dirs.clone()
        };
        let paths = scan::candidate_paths(&dirs, &extra);
        self.import_from(&paths, request)
    }

    pub(crate) fn import_from(&self, paths: &[String], request: Request) -> HandlerResult {
        let (force, rewind, altroot, target, to_checkpoint, missing_log, load_keys) = match request {
            Request::PoolImport { force, rewind, altroot, pool, missing_log, load_keys, .. } => (force, rewind, altroot, pool, false, missing_log, load_keys),
            Request::PoolImportCheckpoint { force, altroot, pool, .. } => (force, false, altroot, Some(pool), true, false, false),
            _ => unreachable!(),
        };
        // Hold the pool table while scanning so no create/import races us.
        let mut pools = self.pools.lock();
        let mut candidates = scan::scan(paths);
        let Some(target) = target else {
            return Ok(Response::text(describe_candidates(&candidates)));
        };
        let fail = |why: String| format!("cannot import '{target}': {why}");
        if let Some(root) = &altroot {
            if !root.starts_with('/') {
                return Err(fail(format!("altroot '{root}' must be an absolute path")));
            }
        }
        let matching: Vec<u64> = candidates
            .iter()
            .filter(|(guid, c)| c.config.name == target || guid.to_string() == target)
            .map(|(guid, _)| *guid)
            .collect();
        let guid = match matching.as_slice() {
            [] => {
                if pools.contains_key(&target) {
                    return Err(fail("a pool with that name is already imported".into()));
                }
                return Err(fail("no such pool available".into()));
            }
            [guid] => *guid,
            _ => return Err(fail("more than one matching pool; import by numeric id".into())),
        };
        let candidate = candidates.remove(&guid).expect("matched candidate");
        let name = candidate.config.name.clone();
        if pools.contains_key(&name) {
            return Err(fail(format!("a pool named '{name}' is already imported")));
        }
        let device_paths: Vec<String> = candidate.devices.iter().map(|d| d.path.clone()).collect();
        let devices = candidate.devices.into_iter().map(|d| d.device).collect();
        let options = ImportOptions { rewind, force, hostname: hostname(), readonly: false };
        let obj = if to_checkpoint {
            ObjPool::import_rewind_to_checkpoint(devices, options)
        } else if missing_log {
            ObjPool::import_missing_log(devices, options)
        } else {
            ObjPool::import(devices, options)
        }
        .map_err(|e| match e {
            tarn_obj::ObjError::Invalid(m) if to_checkpoint => fail(m),
            e => fail(e.to_string()),
        })?;
        obj.set_tunables(self.tuning.get());
        let ds = tarn_ds::Pool::open(obj).map_err(|e| fail(e.to_string()))?;
        let mut imported = Imported { ds, devices: device_paths.clone(), altroot, mounts: BTreeMap::new(), volumes: BTreeMap::new(), busy: BTreeSet::new() };
        let key_warnings = if load_keys { crate::keys::load_file_keys(&imported) } else { String::new() };
        let mut warnings = mount_all(&mut imported);
        warnings.push_str(&key_warnings);
        let exit = if warnings.is_empty() { 0 } else { 1 };
        // `-m`: what the missing log device cost (not a failure).
        for note in obj_notes(&imported) {
            warnings.push_str(&format!("warning: {note}\n"));
        }
        let cached = CachedPool { name: name.clone(), guid, devices: device_paths, altroot: imported.altroot.clone(), missing_log };
        pools.insert(name.clone(), imported);
        let mut cache = self.cache.lock();
        cache.remember(cached);
        warnings.push_str(&self.save_cache(&cache));
        Ok(Response { stderr: warnings, exit, data: Some(json!({ "name": name })), ..Response::text("") })
    }

    fn pool_export(&self, pool: &str, destroy: bool, force: bool) -> HandlerResult {
        let verb = if destroy { "destroy" } else { "export" };
        let mut pools = self.pools.lock();
        let Some(imported) = pools.get_mut(pool) else {
            return Err(format!("cannot {verb} '{pool}': no such pool"));
        };
        if let Some(busy) = imported.busy.first() {
            return Err(format!("cannot {verb} '{pool}': '{busy}' is busy (a rollback or receive is in progress); try again when it is done"));
        }
        if let Some(sent) = imported.ds.snapshots_being_sent().first() {
            return Err(format!("cannot {verb} '{pool}': '{sent}' is being sent; try again when the send is done"));
        }
        unmount_pool(imported, force).map_err(|e| format!("cannot {verb} '{pool}': {e}"))?;
        let Some(imported) = pools.remove(pool) else {
            return Err(format!("cannot {verb} '{pool}': no such pool"));
        };
        if let Err(e) = imported.ds.obj().export() {
            let message = format!("cannot {verb} '{pool}': {e}");
            pools.insert(pool.to_string(), imported);
            return Err(message);
        }
        let devices = imported.devices.clone();
        drop(imported);
        if destroy {
            clear_labels(&devices);
        }
        let mut cache = self.cache.lock();
        cache.forget(pool);
        let warnings = self.save_cache(&cache);
        drop(pools);
        // The pool's cached blocks, handles and buffers are freed: give
        // the memory back (memory.rs).
        crate::memory::release_memory();
        Ok(Response { stderr: warnings, ..Response::text("") })
    }

    pub(crate) fn selected_pools<'a>(
        pools: &'a BTreeMap<String, Imported>,
        names: &[String],
    ) -> Result<Vec<(&'a String, &'a Imported)>, String> {
        if names.is_empty() {
            return Ok(pools.iter().collect());
        }
        names
            .iter()
            .map(|n| pools.get_key_value(n).ok_or_else(|| format!("cannot open '{n}': no such pool")))
            .collect()
    }

    fn pool_list(&self, names: &[String], parsable: bool) -> HandlerResult {
        let pools = self.pools.lock();
        let mut rows = Vec::new();
        for (name, imported) in Self::selected_pools(&pools, names)? {
            let obj = imported.ds.obj();
            let space = obj.space();
            let status = obj.status();
            let health = state_name(&serde_json::to_value(status.state).unwrap_or_default());
            let config = obj.config();
            let n = |v: u64| if parsable { v.to_string() } else { format_number(v) };
            let capacity = (space.alloc as u128 * 100).checked_div(space.size as u128).unwrap_or(0) as u64;
            let fixed = |property: &str, value: String| PropCell {
                property: property.into(),
                value,
                source: "-".into(),
                source_type: "NONE".into(),
                source_data: "-".into(),
                received: None,
            };
            let stored = |property: &str| {
                let (value, source) = imported.ds.pool_property(property);
                PropCell {
                    property: property.into(),
                    value,
                    source: source.display(),
                    source_type: source.json_type().into(),
                    source_data: source.json_data(),
                    received: None,
                }
            };
            let altroot = match &imported.altroot {
                Some(root) => PropCell {
                    property: "altroot".into(),
                    value: root.clone(),
                    source: "local".into(),
                    source_type: "LOCAL".into(),
                    source_data: "-".into(),
                    received: None,
                },
                None => PropCell {
                    property: "altroot".into(),
                    value: "-".into(),
                    source: "default".into(),
                    source_type: "DEFAULT".into(),
                    source_data: "-".into(),
                    received: None,
                },
            };
            let ashift = config.top.first().map(|t| t.ashift).unwrap_or(12);
            let mut props = vec![
                fixed("name", name.clone()),
                fixed("size", n(space.size)),
                fixed("allocated", n(space.alloc)),
                fixed("free", n(space.free)),
                crate::trim::checkpoint_cell(obj, parsable),
                fixed("capacity", if parsable { capacity.to_string() } else { format!("{capacity}%") }),
                fixed("health", health.clone()),
                fixed("guid", obj.guid().to_string()),
                fixed("ashift", ashift.to_string()),
                altroot,
                stored("comment"),
                stored("failmode"),
                stored("autoreplace"),
                stored("autotrim"),
            ];
            for feature in tarn_vdev::KNOWN_FEATURES {
                let state = if config.features.contains(feature) { "active" } else { "enabled" };
                props.push(fixed(&format!("feature@{feature}"), state.into()));
            }
            rows.push(PoolRow { name: name.clone(), guid: obj.guid(), state: health, txg: status.txg, props });
        }
        Ok(Response::data(serde_json::to_value(rows).map_err(|e| e.to_string())?))
    }

    fn pool_status(&self, names: &[String], verbose: bool) -> HandlerResult {
        let pools = self.pools.lock();
        let mut out = Vec::new();
        for (name, imported) in Self::selected_pools(&pools, names)? {
            out.push(crate::health::status_data(name, imported, verbose));
        }
        Ok(Response::data(serde_json::to_value(out).map_err(|e| e.to_string())?))
    }

    fn pool_set(&self, prop: &str, value: &str, pool: &str) -> HandlerResult {
        let pools = self.pools.lock();
        let imported = pools.get(pool).ok_or_else(|| format!("cannot set property for '{pool}': no such pool"))?;
        imported.ds.set_pool_property(prop, value).map_err(|e| format!("cannot set property for '{pool}': {e}"))?;
        Ok(Response::text(""))
    }

    fn create(&self, dataset: &str, parents: bool, properties: &[(String, String)], key: Option<&[u8]>, volume: Option<&crate::proto::VolumeSpec>) -> HandlerResult {
        let fail = |why: String| format!("cannot create '{dataset}': {why}");
        tarn_ds::validate_dataset_name(dataset).map_err(|e| fail(e.to_string()))?;
        let pool_name = dataset.split('/').next().unwrap_or_default();
        let mut pools = self.pools.lock();
        let imported = pools.get_mut(pool_name).ok_or_else(|| fail(format!("no such pool '{pool_name}'")))?;
        if !dataset.contains('/') {
            return Err(fail("a pool's root dataset is created with 'tarn pool create'".into()));
        }
        if imported.busy.contains(dataset) {
            return Err(fail("dataset is busy (a receive is in progress)".into()));
        }
        let material = crate::keys::creation_material(properties, key).map_err(fail)?;
        let created = match volume {
            None => imported.ds.create_dataset_keyed(dataset, properties, parents, &mount::format, material.as_ref()),
            Some(spec) => {
                let geometry = crate::volumes::geometry(spec).map_err(fail)?;
                // Not sparse: the volume's size is set aside (as zfs).
                let mut properties = properties.to_vec();
                if !spec.sparse && !properties.iter().any(|(p, _)| p == "refreservation") {
                    properties.push(("refreservation".into(), geometry.volsize.to_string()));
                }
                let init = move |os: &tarn_obj::ObjectSet, tx: &tarn_obj::Tx| tarn_vol::Volume::format(os, tx, geometry.volblocksize).map_err(|e| e.to_string());
                imported.ds.create_volume(dataset, &properties, parents, &mount::format, &init, material.as_ref(), geometry)
            }
        }
        .map_err(|e| match e {
            tarn_ds::DsError::NoParent(_) => fail("parent does not exist (use -p to create parents)".into()),
            tarn_ds::DsError::Exists(_) => fail("dataset already exists".into()),
            other => fail(other.to_string()),
        })?;
        let mut warnings = String::new();
        for name in &created {
            if let Err(e) = mount_dataset(imported, name) {
                warnings.push_str(&format!("tarn: filesystem '{name}' created, but not mounted: {e}\n"));
            }
        }
        // As in zfs: created, but a dataset that did not mount is a failure.
        let exit = if warnings.is_empty() { 0 } else { 1 };
        Ok(Response { stderr: warnings, exit, ..Response::text("") })
    }

    /// `destroy [-r|-R] [-f] [-n] DATASET`; with `dependents` (-R) the
    /// clones of its snapshots (and theirs, in turn) go first.
    fn destroy(&self, dataset: &str, recursive: bool, force: bool, dry_run: bool, dependents: bool) -> HandlerResult {
        let fail = |why: String| format!("cannot destroy '{dataset}': {why}");
        let recursive = recursive || dependents;
        let mut pools = self.pools.lock();
        let imported = pools.get_mut(pool_of(dataset)).ok_or_else(|| fail("dataset does not exist".into()))?;
        let plan_error = |e: tarn_ds::DsError| match e {
            tarn_ds::DsError::NotFound(_) => fail("dataset does not exist".into()),
            tarn_ds::DsError::HasChildren(_) => fail("filesystem has children (use -r to destroy them too)".into()),
            tarn_ds::DsError::HasSnapshots(_) => fail("filesystem has snapshots (use -r to destroy them too)".into()),
            tarn_ds::DsError::IsPoolRoot(_) => fail("it is the pool's root dataset (use 'tarn pool destroy')".into()),
            other => fail(other.to_string()),
        };
        imported.ds.destroy_plan_with(dataset, recursive, dependents).map_err(plan_error)?;
        // What goes, in order: each top (dependent clones first, then the
        // dataset) with its subtree, deepest first, snapshots before their
        // dataset.
        let mut tops = if dependents { crate::dataset_ops::dependents(&imported.ds, &[dataset.to_string()]) } else { vec![] };
        tops.push(dataset.to_string());
        let mut plan: Vec<String> = Vec::new();
        let mut doomed = Vec::new();
        for top in &tops {
            for name in imported.ds.destroy_plan_with(top, recursive, dependents).map_err(plan_error)? {
                if imported.busy.contains(&name) {
                    return Err(fail(format!("'{name}' is busy (a rollback is in progress)")));
                }
                for snap in imported.ds.snapshots(Some(&name)).into_iter().rev() {
                    // As in zfs, a held snapshot stops a recursive destroy too.
                    let holds = imported.ds.snapshot_record(&snap).map(|r| r.holds).unwrap_or_default();
                    if !holds.is_empty() {
                        return Err(fail(format!(
                            "snapshot '{snap}' is held ({}); release it with 'tarn release'",
                            holds.join(", ")
                        )));
                    }
                    doomed.push(snap);
                }
                doomed.push(name.clone());
                plan.push(name);
            }
        }
        if dry_run {
            return Ok(Response::data(json!(doomed)));
        }
        crate::volumes::close_volumes(imported, &plan);
        // Deepest mounts first; a busy mount stops the destroy unless forced.
        for name in plan.iter() {
            if let Some(mut mounted) = imported.mounts.remove(name) {
                if force {
                    mounted.unmount();
                } else if let Err(e) = mounted.try_unmount() {
                    imported.mounts.insert(name.clone(), mounted);
                    return Err(fail(e));
                }
            }
        }
        for top in &tops {
            imported.ds.destroy_dataset(top, recursive).map_err(|e| fail(e.to_string()))?;
        }
        Ok(Response::data(json!(doomed)))
    }

    fn mount(&self, dataset: Option<&str>) -> HandlerResult {
        let mut pools = self.pools.lock();
        let Some(dataset) = dataset else {
            let mut out = String::new();
            let rows: Vec<(String, String)> = pools
                .values()
                .flat_map(|p| p.mounts.iter().map(|(n, m)| (n.clone(), m.path.display().to_string())))
                .collect();
            let width = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
            for (name, path) in rows {
                out.push_str(&format!("{name:<width$}  {path}\n"));
            }
            return Ok(Response::text(out));
        };
        let fail = |why: String| format!("cannot mount '{dataset}': {why}");
        let pool_name = dataset.split('/').next().unwrap_or_default();
        let imported = pools
            .get_mut(pool_name)
            .filter(|p| p.ds.exists(dataset))
            .ok_or_else(|| fail("dataset does not exist".into()))?;
        if imported.mounts.contains_key(dataset) {
            return Err(fail("filesystem already mounted".into()));
        }
        match imported.ds.settings(dataset).map_err(|e| fail(e.to_string()))?.mountpoint {
            Mountpoint::None => return Err(fail("no mountpoint set (mountpoint=none)".into())),
            Mountpoint::Legacy => return Err(fail("legacy mountpoint: not mounted by tarn".into())),
            Mountpoint::Path(_) => {}
        }
        mount_dataset(imported, dataset).map_err(fail)?;
        Ok(Response::text(""))
    }

    fn unmount(&self, target: &str, force: bool) -> HandlerResult {
        let mut pools = self.pools.lock();
        let fail = |why: &str| format!("cannot unmount '{target}': {why}");
        for imported in pools.values_mut() {
            let found = if target.starts_with('/') {
                let wanted = Path::new(target);
                imported.mounts.iter().find(|(_, m)| m.path == wanted).map(|(n, _)| n.clone())
            } else {
                imported.mounts.contains_key(target).then(|| target.to_string())
            };
            if let Some(name) = found {
                let Some(mut mounted) = imported.mounts.remove(&name) else { break };
                if force {
                    mounted.unmount();
                } else if let Err(e) = mounted.try_unmount() {
                    imported.mounts.insert(name, mounted);
                    return Err(e);
                }
                return Ok(Response::text(""));
            }
        }
        Err(fail("not currently mounted"))
    }

    fn debug_check(&self, pool: &str) -> HandlerResult {
        let pools = self.pools.lock();
        let imported = pools.get(pool).ok_or_else(|| format!("cannot open '{pool}': no such pool"))?;
        let ds = imported.ds.clone();
        drop(pools);
        let report = ds.check().map_err(|e| format!("cannot check '{pool}': {e}"))?;
        let mut out = format!(
            "pool {pool}:\n\tobject sets:          {}\n\tblocks:               {}\n\tallocated bytes:      {}\n\tleaked bytes:         {}\n\tdouble-allocated:     {}\n\tdamaged blocks:       {}\n",
            report.objsets,
            report.blocks,
            report.allocated_bytes,
            report.leaked_bytes,
            report.double_allocated_bytes,
            report.damaged.len()
        );
        for damage in &report.damaged {
            out.push_str(&format!("\tdamaged: {damage}\n"));
        }
        for orphan in &report.orphans {
            out.push_str(&format!("\tleaked: {orphan}\n"));
        }
        if report.ok() {
            out.push_str("no damage, leaks or double allocations found\n");
            let mut response = Response::text(out);
            response.data = serde_json::to_value(&report).ok();
            Ok(response)
        } else {
            Ok(Response {
                ok: false,
                exit: 1,
                stdout: out,
                error: Some(format!("pool '{pool}' failed the check")),
                data: serde_json::to_value(&report).ok(),
                ..Response::default()
            })
        }
    }
}

/// The pool of a dataset or snapshot name (`tank/a@s` → `tank`).
pub(crate) fn pool_of(name: &str) -> &str {
    name.split(['/', '@']).next().unwrap_or_default()
}

pub(crate) fn describe_group(group: &VdevGroup) -> String {
    match group.kind {
        VdevKind::Disk => "stripe".into(),
        VdevKind::Mirror => "mirror".into(),
        VdevKind::Raidz { parity } => format!("raidz{parity}"),
    }
}

fn clear_labels(paths: &[String]) {
    for path in paths {
        if let Ok(device) = scan::open_device(path) {
            let _ = tarn_vdev::clear_labels(&*device);
        }
    }
}

fn mount_path(imported: &Imported, name: &str) -> Result<Option<PathBuf>, String> {
    let settings = imported.ds.settings(name).map_err(|e| e.to_string())?;
    Ok(match settings.mountpoint {
        Mountpoint::Path(path) => Some(match imported.altroot.as_deref() {
            Some(root) if root != "/" => PathBuf::from(format!("{}{}", root.trim_end_matches('/'), path)),
            _ => PathBuf::from(path),
        }),
        Mountpoint::None | Mountpoint::Legacy => None,
    })
}

/// Mount one dataset at its effective mountpoint (no-op for none/legacy).
pub(crate) fn mount_dataset(imported: &mut Imported, name: &str) -> Result<(), String> {
    if imported.busy.contains(name) {
        return Err("dataset is busy (a rollback is in progress)".into());
    }
    // A dataset holding a partially received stream stays unmounted until
    // the receive is resumed or aborted.
    if imported.ds.record(name).is_ok_and(|r| r.recv.as_ref().is_some_and(|p| !p.inner.is_empty())) {
        return Ok(());
    }
    if imported.ds.is_volume(name) {
        return crate::volumes::open_volume(imported, name);
    }
    let Some(path) = mount_path(imported, name)? else { return Ok(()) };
    if !imported.ds.key_available(name) {
        return Err("encryption key not loaded".into());
    }
    let settings = imported.ds.settings(name).map_err(|e| e.to_string())?;
    let os = imported.ds.objset(name).map_err(|e| e.to_string())?;
    let snapshots = mount::snapshot_source(&imported.ds, name, &settings);
    let limit = mount::space_limit(&imported.ds, &os);
    let mounted = Mounted::mount(imported.ds.obj().clone(), os, &settings, name, &path, Some(snapshots), Some(limit))?;
    imported.mounts.insert(name.to_string(), mounted);
    Ok(())
}

/// Mount every dataset of a pool, parents first; returns warning lines.
pub(crate) fn mount_all(imported: &mut Imported) -> String {
    let mut warnings = String::new();
    // Datasets whose key is not loaded wait for load-key (as zfs mount -a).
    let names: Vec<String> = imported.ds.list().into_iter().filter(|n| imported.ds.key_available(n)).collect();
    for name in names {
        if let Err(e) = mount_dataset(imported, &name) {
            warnings.push_str(&format!("warning: cannot mount '{name}': {e}\n"));
        }
    }
    warnings
}

/// Forced: unmount every dataset of a pool, deepest mountpoints first.
pub(crate) fn unmount_all(imported: &mut Imported) {
    let _ = unmount_pool(imported, true);
}

/// Unmount every dataset of a pool, deepest mountpoints first. Unforced, a
/// busy mount stops it with an error (mounts already undone stay undone).
pub(crate) fn unmount_pool(imported: &mut Imported, force: bool) -> Result<(), String> {
    crate::volumes::close_all(imported);
    let mut names: Vec<String> = imported.mounts.keys().cloned().collect();
    names.sort_by_key(|n| std::cmp::Reverse(imported.mounts.get(n).map_or(0, |m| m.path.components().count())));
    for name in names {
        let Some(mut mounted) = imported.mounts.remove(&name) else { continue };
        if force {
            mounted.unmount();
        } else if let Err(e) = mounted.try_unmount() {
            imported.mounts.insert(name, mounted);
            return Err(e);
        }
    }
    Ok(())
}

/// What the import had to give up, and which log devices are missing.
fn obj_notes(imported: &Imported) -> Vec<String> {
    let obj = imported.ds.obj();
    let mut notes = Vec::new();
    for top in obj.status().logs.iter().filter(|t| !t.state.usable()) {
        let paths: Vec<&str> = top.children.iter().filter(|l| !l.state.usable()).map(|l| l.path.as_str()).collect();
        notes.push(format!("log device {} is missing; intent log records on it are lost", paths.join(", ")));
    }
    notes.extend(obj.import_notes());
    // Receives the last run left in the middle, settled by the import.
    notes.extend(imported.ds.recovered_receives());
    notes
}

fn describe_candidates(candidates: &BTreeMap<u64, scan::Candidate>) -> String {
    if candidates.is_empty() {
        return "no pools available to import\n".into();
    }
    let mut out = String::new();
    for (guid, candidate) in candidates {
        let config = &candidate.config;
        let mut lines = Vec::new();
        let mut log_lines = Vec::new();
        let mut missing_tops = 0;
        let mut missing_logs = 0;
        for top in config.top.iter().filter(|t| t.kind != TopKind::Hole) {
            let index = top.id;
            let lines = if top.is_log() { &mut log_lines } else { &mut lines };
            let (kind, grouped) = top_kind_name(&top.kind);
            let present: Vec<bool> =
                top.children.iter().map(|c| candidate.devices.iter().any(|d| d.leaf_guid == c.guid)).collect();
            let missing = present.iter().filter(|p| !**p).count();
            let tolerated = match top.kind {
                TopKind::Disk | TopKind::Hole => 0,
                TopKind::Mirror => top.children.len().saturating_sub(1),
                TopKind::Raidz { parity } => parity as usize,
            };
            let top_state = if missing == 0 {
                "ONLINE"
            } else if missing <= tolerated {
                "DEGRADED"
            } else if top.is_log() {
                missing_logs += 1;
                "UNAVAIL"
            } else {
                missing_tops += 1;
                "UNAVAIL"
            };
            if grouped {
                lines.push((format!("  {kind}-{index}"), top_state.to_string()));
            }
            for (child, present) in top.children.iter().zip(&present) {
                let path = candidate
                    .devices
                    .iter()
                    .find(|d| d.leaf_guid == child.guid)
                    .map(|d| d.path.clone())
                    .unwrap_or_else(|| child.path.clone());
                let indent = if grouped { "    " } else { "  " };
                lines.push((format!("{indent}{path}"), if *present { "ONLINE" } else { "UNAVAIL" }.to_string()));
            }
        }
        let degraded = lines.iter().chain(&log_lines).any(|(_, s)| s != "ONLINE");
        // Cache devices: listed, UNAVAIL when missing, never a reason not
        // to import.
        let cache_lines: Vec<(String, String)> = config
            .cache
            .iter()
            .map(|c| match candidate.devices.iter().find(|d| d.leaf_guid == c.guid) {
                Some(d) => (format!("  {}", d.path), "ONLINE".to_string()),
                None => (format!("  {}", c.path), "UNAVAIL".to_string()),
            })
            .collect();
        let state = if missing_tops > 0 {
            "UNAVAIL"
        } else if degraded {
            "DEGRADED"
        } else {
            "ONLINE"
        };
        let action = if missing_tops > 0 {
            "The pool cannot be imported: too many devices are missing."
        } else if missing_logs > 0 {
            "The pool can be imported with -m: a log device is missing (log records on it are lost)."
        } else if config.state == tarn_vdev::PoolState::Active {
            "The pool was not exported; import it with -f."
        } else {
            "The pool can be imported using its name or numeric identifier."
        };
        out.push_str(&format!("   pool: {}\n     id: {guid}\n  state: {state}\n action: {action}\n config:\n\n", config.name));
        let width = lines.iter().chain(&log_lines).chain(&cache_lines).map(|(n, _)| n.len()).max().unwrap_or(0).max(config.name.len()) + 2;
        out.push_str(&format!("\t{:<width$}{state}\n", config.name));
        for (name, state) in lines {
            out.push_str(&format!("\t{name:<width$}{state}\n"));
        }
        if !log_lines.is_empty() {
            out.push_str("\tlogs\n");
            for (name, state) in log_lines {
                out.push_str(&format!("\t{name:<width$}{state}\n"));
            }
        }
        if !cache_lines.is_empty() {
            out.push_str("\tcache\n");
            for (name, state) in cache_lines {
                out.push_str(&format!("\t{name:<width$}{state}\n"));
            }
        }
        out.push('\n');
    }
    out
}

// ---------------------------------------------------------------------------
// Snapshots: snapshot, destroy of snapshots, rollback, holds.
//
// The slow parts (each change is a synced txg) run with the pools mutex
// released: the handlers take what they need under it (and, for rollback,
// unmount and mark the dataset busy), then let go.

/// The one-line reason for a bad snapshot name.
pub(crate) fn bad_snapshot_name(e: tarn_ds::DsError) -> String {
    match e {
        tarn_ds::DsError::BadName { why, .. } => why,
        other => other.to_string(),
    }
}

/// The message of a failed snapshot operation (the dataset layer's
/// snapshot errors are complete sentences already).
pub(crate) fn snapshot_error(e: tarn_ds::DsError, fail: impl Fn(String) -> String) -> String {
    match e {
        tarn_ds::DsError::Snapshot(message) => message,
        tarn_ds::DsError::NotFound(name) if name.contains('@') => fail(format!("snapshot '{name}' does not exist")),
        tarn_ds::DsError::NotFound(name) => fail(format!("dataset '{name}' does not exist")),
        other => fail(other.to_string()),
    }
}

/// Unmounts `dataset` and everything mounted at or below its mountpoint,
/// deepest first; returns the names unmounted (deepest first). A busy
/// mount stops it (what was unmounted is mounted again) unless `force`:
/// then the mount is made read-only and detached lazily, so processes
/// still using it can write nothing to the tree being rolled back.
pub(crate) fn unmount_for_rollback(imported: &mut Imported, dataset: &str, force: bool) -> Result<Vec<String>, String> {
    let volumes = crate::volumes::close_volumes(imported, &[dataset.to_string()]);
    if !volumes.is_empty() {
        return Ok(volumes);
    }
    let Some(top) = imported.mounts.get(dataset).map(|m| m.path.clone()) else { return Ok(vec![]) };
    let mut names: Vec<String> =
        imported.mounts.iter().filter(|(_, m)| m.path.starts_with(&top)).map(|(n, _)| n.clone()).collect();
    names.sort_by_key(|n| std::cmp::Reverse(imported.mounts.get(n).map_or(0, |m| m.path.components().count())));
    let mut done: Vec<String> = Vec::new();
    for name in names {
        let Some(mut mounted) = imported.mounts.remove(&name) else { continue };
        match mounted.try_unmount() {
            Ok(()) => done.push(name),
            Err(_) if force => {
                if let Ok(mut settings) = imported.ds.settings(&name) {
                    settings.readonly = true;
                    mounted.set_options(&settings);
                }
                mounted.unmount();
                done.push(name);
            }
            Err(_) => {
                let path = mounted.path.display().to_string();
                imported.mounts.insert(name.clone(), mounted);
                for undone in done.iter().rev() {
                    let _ = mount_dataset(imported, undone);
                }
                return Err(format!("dataset is busy ('{path}' is in use; use -f to force)"));
            }
        }
    }
    Ok(done)
}

impl Daemon {
    fn snapshot(&self, names: &[String], recursive: bool) -> HandlerResult {
        let Some(first) = names.first() else { return Err("cannot create snapshots: no snapshot named".into()) };
        let mut full: Vec<String> = Vec::new();
        let (ds, flush) = {
            let pools = self.pools.lock();
            let pool_name = pool_of(first);
            for name in names {
                let fail = |why: String| format!("cannot create snapshot '{name}': {why}");
                let (dataset, snap) = tarn_ds::snapshots::validate_snapshot_name(name).map_err(|e| fail(bad_snapshot_name(e)))?;
                if pool_of(&dataset) != pool_name {
                    return Err(fail(format!("not in pool '{pool_name}' (the snapshots of one command are taken in one pool)")));
                }
                let imported = pools
                    .get(pool_name)
                    .filter(|p| p.ds.exists(&dataset))
                    .ok_or_else(|| fail("dataset does not exist".into()))?;
                let datasets = if recursive { imported.ds.subtree(&dataset) } else { vec![dataset] };
                for dataset in datasets {
                    if imported.busy.contains(&dataset) {
                        return Err(fail(format!("'{dataset}' is busy (a rollback is in progress)")));
                    }
                    let one = format!("{dataset}@{snap}");
                    if !full.contains(&one) {
                        full.push(one);
                    }
                }
            }
            let imported = pools.get(pool_name).ok_or_else(|| format!("cannot create snapshot '{first}': no such pool"))?;
            let flush: Vec<PathBuf> = full
                .iter()
                .filter_map(|n| imported.mounts.get(n.split('@').next().unwrap_or_default()))
                .map(|m| m.path.clone())
                .collect();
            (imported.ds.clone(), flush)
        };
        // What the kernel still holds for these mounts (writeback cache,
        // mmap stores) was written before the snapshot: it belongs in it.
        for path in &flush {
            mount::flush_mount(path);
        }
        let fail = |why: String| format!("cannot create snapshot '{first}': {why}");
        ds.snapshot(&full).map_err(|e| match e {
            tarn_ds::DsError::BadName { name, why } => format!("cannot create snapshot '{name}': {why}"),
            other => snapshot_error(other, fail),
        })?;
        Ok(Response::data(json!(full)))
    }

    /// `destroy [-r] [-n] fs@spec` where spec is `name`, `a%c` or a comma
    /// list of those.
    fn destroy_snapshots(&self, spec: &str, recursive: bool, dry_run: bool, dependents: bool, force: bool) -> HandlerResult {
        let fail = |why: String| format!("cannot destroy '{spec}': {why}");
        let (dataset, list) = spec.split_once('@').ok_or_else(|| fail("not a snapshot".into()))?;
        tarn_ds::validate_dataset_name(dataset).map_err(|e| fail(bad_snapshot_name(e)))?;
        let ds = {
            let pools = self.pools.lock();
            let imported = pools
                .get(pool_of(dataset))
                .filter(|p| p.ds.exists(dataset))
                .ok_or_else(|| fail(format!("dataset '{dataset}' does not exist")))?;
            if let Some(busy) = imported.ds.subtree(dataset).iter().find(|d| imported.busy.contains(*d)) {
                return Err(fail(format!("'{busy}' is busy (a rollback is in progress)")));
            }
            imported.ds.clone()
        };
        let datasets = if recursive { ds.subtree(dataset) } else { vec![dataset.to_string()] };
        let mut doomed: Vec<String> = Vec::new();
        for item in list.split(',') {
            if item.is_empty() {
                return Err(fail("empty snapshot name".into()));
            }
            for (i, dataset) in datasets.iter().enumerate() {
                let one = format!("{dataset}@{item}");
                if !item.contains('%') {
                    tarn_ds::snapshots::validate_snapshot_name(&one).map_err(|e| fail(bad_snapshot_name(e)))?;
                }
                match ds.expand_snapshot_spec(&one) {
                    Ok(names) => {
                        for name in names {
                            if !doomed.contains(&name) {
                                doomed.push(name);
                            }
                        }
                    }
                    // -r: descendants need not have the snapshots.
                    Err(_) if recursive && i > 0 => {}
                    Err(tarn_ds::DsError::NotFound(_)) if recursive => {}
                    Err(tarn_ds::DsError::NotFound(name)) if name == spec => {
                        return Err(fail("snapshot does not exist".into()))
                    }
                    Err(tarn_ds::DsError::NotFound(name)) => {
                        return Err(fail(format!("snapshot '{name}' does not exist")))
                    }
                    Err(tarn_ds::DsError::Snapshot(message)) => {
                        let prefix = format!("'{one}' ");
                        return Err(fail(message.strip_prefix(&prefix).unwrap_or(&message).to_string()));
                    }
                    Err(e) => return Err(fail(e.to_string())),
                }
            }
        }
        if doomed.is_empty() {
            return Err(fail("could not find any snapshots to destroy; check snapshot names".into()));
        }
        // All or nothing: a held snapshot stops the whole destroy.
        let mut records = Vec::new();
        for name in &doomed {
            let record = ds.snapshot_record(name).map_err(|e| snapshot_error(e, fail))?;
            if !record.holds.is_empty() {
                return Err(format!(
                    "cannot destroy snapshot '{name}': it is held ({}); release it with 'tarn release'",
                    record.holds.join(", ")
                ));
            }
            if !dependents {
                ds.check_no_clones(name).map_err(|e| snapshot_error(e, fail))?;
            }
            records.push((name.clone(), record.createtxg));
        }
        // -R: the clones of these snapshots (and theirs) go first, each
        // with its descendants and snapshots.
        let clones = if dependents { crate::dataset_ops::dependents(&ds, &doomed) } else { vec![] };
        if !clones.is_empty() {
            let mut listed = Vec::new();
            for clone in &clones {
                for name in ds.destroy_plan_with(clone, true, true).map_err(|e| fail(e.to_string()))? {
                    listed.extend(ds.snapshots(Some(&name)).into_iter().rev());
                    listed.push(name);
                }
            }
            listed.extend(doomed);
            doomed = listed;
        }
        if dry_run {
            return Ok(Response::data(json!(doomed)));
        }
        if !clones.is_empty() {
            let mut pools = self.pools.lock();
            let imported = pools
                .get_mut(pool_of(dataset))
                .filter(|p| Arc::ptr_eq(&p.ds, &ds))
                .ok_or_else(|| fail("the pool went away".into()))?;
            for clone in &clones {
                let subtree = imported.ds.subtree(clone);
                crate::dataset_ops::unmount_names(imported, &subtree, force).map_err(fail)?;
                imported.ds.destroy_dataset(clone, true).map_err(|e| fail(e.to_string()))?;
            }
        }
        // Newest first.
        records.sort_by_key(|(_, txg)| std::cmp::Reverse(*txg));
        for (name, _) in &records {
            ds.destroy_snapshot(name, false).map_err(|e| {
                snapshot_error(e, |why| format!("cannot destroy snapshot '{name}': {why}"))
            })?;
        }
        Ok(Response::data(json!(doomed)))
    }

    fn rollback(&self, snapshot: &str, destroy_later: bool, force: bool) -> HandlerResult {
        let fail = |why: String| format!("cannot rollback to '{snapshot}': {why}");
        let (dataset, _) = tarn_ds::snapshots::validate_snapshot_name(snapshot).map_err(|e| fail(bad_snapshot_name(e)))?;
        let pool_name = pool_of(&dataset).to_string();
        let (ds, unmounted) = {
            let mut pools = self.pools.lock();
            let imported = pools
                .get_mut(&pool_name)
                .filter(|p| p.ds.exists(&dataset))
                .ok_or_else(|| fail(format!("dataset '{dataset}' does not exist")))?;
            let target = imported.ds.snapshot_record(snapshot).map_err(|_| fail("snapshot does not exist".into()))?;
            if imported.busy.contains(&dataset) {
                return Err(fail("dataset is busy (a rollback is in progress)".into()));
            }
            let later: Vec<(String, tarn_ds::DatasetRecord)> = imported
                .ds
                .snapshots(Some(&dataset))
                .into_iter()
                .filter_map(|n| imported.ds.snapshot_record(&n).ok().map(|r| (n, r)))
                .filter(|(_, r)| r.createtxg > target.createtxg)
                .collect();
            if !later.is_empty() && !destroy_later {
                let names: Vec<&str> = later.iter().map(|(n, _)| n.as_str()).collect();
                return Err(fail(format!("more recent snapshots exist ({}); use -r to destroy them", names.join(", "))));
            }
            if let Some((name, record)) = later.iter().find(|(_, r)| !r.holds.is_empty()) {
                return Err(fail(format!(
                    "more recent snapshot '{name}' is held ({}); release it with 'tarn release'",
                    record.holds.join(", ")
                )));
            }
            let unmounted = unmount_for_rollback(imported, &dataset, force).map_err(fail)?;
            imported.busy.insert(dataset.clone());
            (imported.ds.clone(), unmounted)
        };
        let result = ds.rollback(snapshot, destroy_later);
        let mut warnings = String::new();
        {
            let mut pools = self.pools.lock();
            // Unless the pool went away (exported) meanwhile.
            if let Some(imported) = pools.get_mut(&pool_name).filter(|p| Arc::ptr_eq(&p.ds, &ds)) {
                imported.busy.remove(&dataset);
                for name in unmounted.iter().rev() {
                    if let Err(e) = mount_dataset(imported, name) {
                        warnings.push_str(&format!("tarn: rolled back, but cannot mount '{name}': {e}\n"));
                    }
                }
            }
        }
        let destroyed = result.map_err(|e| snapshot_error(e, fail))?;
        let exit = if warnings.is_empty() { 0 } else { 1 };
        Ok(Response { stderr: warnings, exit, data: Some(json!(destroyed)), ..Response::text("") })
    }

    /// The snapshots `names` stand for (`recursive`: the same snapshot
    /// name in every descendant that has it), and their pool's dataset
    /// tree. Every named snapshot must exist.
    fn snapshot_set(
        &self,
        names: &[String],
        recursive: bool,
        fail: impl Fn(&str, String) -> String,
    ) -> Result<(Arc<tarn_ds::Pool>, Vec<String>), String> {
        let pools = self.pools.lock();
        let mut full: Vec<String> = Vec::new();
        let mut ds: Option<Arc<tarn_ds::Pool>> = None;
        for name in names {
            let (dataset, snap) =
                tarn_ds::snapshots::validate_snapshot_name(name).map_err(|e| fail(name, bad_snapshot_name(e)))?;
            let imported = pools
                .get(pool_of(&dataset))
                .filter(|p| p.ds.snapshot_record(name).is_ok())
                .ok_or_else(|| fail(name, "snapshot does not exist".into()))?;
            if ds.as_ref().is_some_and(|d| !Arc::ptr_eq(d, &imported.ds)) {
                return Err(fail(name, "the snapshots of one command must be in one pool".into()));
            }
            ds = Some(imported.ds.clone());
            let datasets = if recursive { imported.ds.subtree(&dataset) } else { vec![dataset] };
            for dataset in datasets {
                let one = format!("{dataset}@{snap}");
                if imported.ds.snapshot_record(&one).is_ok() && !full.contains(&one) {
                    full.push(one);
                }
            }
        }
        let ds = ds.ok_or_else(|| "no snapshot named".to_string())?;
        Ok((ds, full))
    }

    fn hold(&self, tag: &str, snapshots: &[String], release: bool, recursive: bool) -> HandlerResult {
        let fail = |name: &str, why: String| {
            if release {
                format!("cannot release hold from snapshot '{name}': {why}")
            } else {
                format!("cannot hold snapshot '{name}': {why}")
            }
        };
        let first = snapshots.first().map(String::as_str).unwrap_or("");
        if tag.is_empty() {
            return Err(fail(first, "empty tag".into()));
        }
        if tag.len() > 255 || tag.chars().any(char::is_control) {
            return Err(fail(first, format!("bad tag '{tag}' (at most 255 printable characters)")));
        }
        let (ds, full) = self.snapshot_set(snapshots, recursive, fail)?;
        // All or nothing: check every snapshot before changing any.
        for name in &full {
            let record = ds.snapshot_record(name).map_err(|_| fail(name, "snapshot does not exist".into()))?;
            let has = record.holds.iter().any(|t| t == tag);
            if has && !release {
                return Err(fail(name, format!("tag '{tag}' already exists on this snapshot")));
            }
            if !has && release {
                return Err(fail(name, format!("no such tag '{tag}' on this snapshot")));
            }
        }
        for name in &full {
            ds.hold(name, tag, !release).map_err(|e| snapshot_error(e, |why| fail(name, why)))?;
        }
        Ok(Response::data(json!(full)))
    }

    fn holds(&self, snapshots: &[String], recursive: bool) -> HandlerResult {
        let (ds, full) = self.snapshot_set(snapshots, recursive, |name, why| format!("cannot open '{name}': {why}"))?;
        let mut rows = Vec::new();
        for name in full {
            let record = ds.snapshot_record(&name).map_err(|_| format!("cannot open '{name}': snapshot does not exist"))?;
            for tag in record.holds {
                rows.push(HoldRow { name: name.clone(), tag });
            }
        }
        Ok(Response::data(serde_json::to_value(rows).map_err(|e| e.to_string())?))
    }
}
