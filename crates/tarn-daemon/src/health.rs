//! Keeping pools healthy: device commands (offline, online, replace,
//! attach, detach, add, remove, clear), scrubs and waits, `pool status`,
//! and the monitor.
//!
//! The monitor wakes every [`MONITOR_INTERVAL`], probes every device of
//! every pool with a small read (so a disk that vanished while idle is
//! noticed within seconds, not at the next write), and compares what it
//! sees with what it saw last: each change becomes one event in the event
//! log and, if it matters, one alert. It also puts a hot spare in for a
//! device that failed, replaces a device that reappears blank at the same
//! path when `autoreplace=on`, and warns once when the pool passes the
//! capacity threshold.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tarn_obj::scan::{ScanFunc, ScanPhase, ScanStats};
use tarn_obj::{DevState, ObjPool, TopKind};
use tarn_vdev::{LeafRole, LeafStatus};

use crate::cache::CachedPool;
use crate::daemon::{describe_group, hostname, unmount_all, Daemon, Imported};
use crate::events::{Event, Severity};
use crate::proto::*;
use crate::scan;

pub const MONITOR_INTERVAL: Duration = Duration::from_secs(2);

type HandlerResult = Result<Response, String>;

/// What the monitor saw last of one pool.
#[derive(Default)]
pub(crate) struct PoolWatch {
    leaves: BTreeMap<u64, (String, DevState)>,
    state: Option<String>,
    scan: Option<(ScanFunc, u64, ScanPhase)>,
    capacity_warned: bool,
}

fn scan_data(st: &ScanStats) -> ScanStatusData {
    ScanStatusData {
        function: match st.func {
            ScanFunc::Scrub => "scrub",
            ScanFunc::Resilver => "resilver",
        }
        .into(),
        state: match st.phase {
            ScanPhase::Scanning => "scanning",
            ScanPhase::Finished => "finished",
            ScanPhase::Canceled => "canceled",
        }
        .into(),
        paused: st.paused,
        start_time: st.start_time,
        end_time: st.end_time,
        to_examine: st.to_examine,
        examined: st.examined,
        issued: st.issued,
        read_bytes: st.read_bytes,
        repaired: st.repaired,
        resilvered: st.resilvered,
        errors: st.errors,
        rate: st.rate(),
        eta_secs: st.eta_secs(),
        percent: st.percent(),
    }
}

fn leaf_row(l: &LeafStatus, resilvering: bool) -> VdevStatus {
    VdevStatus {
        name: l.path.clone(),
        vdev_type: "file".into(),
        guid: l.guid,
        state: l.state.word().into(),
        read_errors: l.read_errors,
        write_errors: l.write_errors,
        checksum_errors: l.checksum_errors,
        children: vec![],
        reason: l.reason.clone(),
        resilvering: resilvering && l.state.usable() && !l.dtl.is_empty(),
    }
}

fn sum_row(name: String, vdev_type: &str, guid: u64, state: &str, children: Vec<VdevStatus>) -> VdevStatus {
    VdevStatus {
        name,
        vdev_type: vdev_type.into(),
        guid,
        state: state.into(),
        read_errors: children.iter().map(|c| c.read_errors).sum(),
        write_errors: children.iter().map(|c| c.write_errors).sum(),
        checksum_errors: children.iter().map(|c| c.checksum_errors).sum(),
        children,
        reason: None,
        resilvering: false,
    }
}

/// The rows of one top-level vdev: a disk is its leaf; a mirror or raidz
/// is a row over its slots, where a slot of several leaves is a
/// replacing-N or spare-N row, as zpool shows them.
fn top_rows(top: &tarn_vdev::TopStatus, config: &tarn_vdev::PoolConfig, resilvering: bool, in_use_spares: &mut Vec<String>) -> Vec<VdevStatus> {
    let top_cfg = config.top.iter().find(|t| t.id == top.id);
    let slots = top.slot_groups();
    let mut rows = Vec::new();
    for (slot, leaves) in &slots {
        if leaves.len() == 1 {
            rows.extend(leaves.iter().map(|l| leaf_row(l, resilvering)));
            continue;
        }
        let spare = leaves.iter().any(|l| l.role == LeafRole::Spare);
        for l in leaves.iter().filter(|l| l.role == LeafRole::Spare) {
            in_use_spares.push(l.path.clone());
        }
        let kind = if spare { "spare" } else { "replacing" };
        let state = if leaves.iter().all(|l| l.state.usable()) { "ONLINE" } else { "DEGRADED" };
        let children = leaves.iter().map(|l| leaf_row(l, resilvering)).collect();
        rows.push(sum_row(format!("{kind}-{slot}"), kind, 0, state, children));
    }
    let guid = top_cfg.map_or(0, |t| t.guid);
    match top_cfg.map(|t| &t.kind) {
        Some(TopKind::Disk) | None if rows.len() == 1 => rows,
        _ => {
            let kind = match top_cfg.map(|t| &t.kind) {
                Some(TopKind::Raidz { parity }) => format!("raidz{parity}"),
                _ => "mirror".into(),
            };
            vec![sum_row(format!("{kind}-{}", top.id), kind.trim_end_matches(char::is_numeric), guid, top.state.word(), rows)]
        }
    }
}

/// `pool status` data of one pool.
pub(crate) fn status_data(name: &str, imported: &Imported, verbose: bool) -> PoolStatusData {
    let obj = imported.ds.obj();
    let status = obj.status();
    let config = obj.config();
    let resilvering = status.scan.as_ref().is_some_and(|s| s.func == ScanFunc::Resilver && s.phase == ScanPhase::Scanning);
    let mut tops = Vec::new();
    let mut in_use_spares = Vec::new();
    for top in &status.tops {
        tops.extend(top_rows(top, &config, resilvering, &mut in_use_spares));
    }
    let mut logs = Vec::new();
    for top in &status.logs {
        logs.extend(top_rows(top, &config, resilvering, &mut in_use_spares));
    }
    let state = status.state.word().to_string();
    let root = sum_row(name.to_string(), "root", status.guid, &state, tops);
    let mut spares: Vec<VdevStatus> = status
        .spares
        .iter()
        .map(|l| {
            let mut row = leaf_row(l, false);
            if l.state.usable() {
                row.state = "AVAIL".into();
            }
            row
        })
        .collect();
    for path in in_use_spares {
        spares.push(VdevStatus { state: "INUSE".into(), ..sum_row(path, "file", 0, "INUSE", vec![]) });
    }
    let error_files = if verbose { status.scan.as_ref().map(|s| crate::damage::describe_damage(imported, s)).unwrap_or_default() } else { vec![] };
    let (trims, checkpoint) = crate::trim::status_extras(obj);
    PoolStatusData {
        name: name.to_string(),
        guid: status.guid,
        state,
        txg: status.txg,
        data_errors: status.data_errors.max(status.scan.as_ref().map_or(0, |s| s.errors)),
        root,
        scan: status.scan.as_ref().map(scan_data),
        logs,
        cache: status.cache.iter().map(|l| leaf_row(l, false)).collect(),
        spares,
        error_files,
        suspended: status.suspended,
        trims,
        checkpoint,
    }
}

fn fail(verb: &str, pool: &str) -> impl Fn(String) -> String {
    let prefix = format!("cannot {verb} '{pool}'");
    move |why| format!("{prefix}: {why}")
}

/// Reopens a leaf's device by path, checking that it still carries that
/// leaf's label.
fn reopen_leaf(leaf: &LeafStatus) -> Option<Arc<dyn tarn_dev::Device>> {
    let device = scan::open_device(&leaf.path).ok()?;
    let label = tarn_vdev::read_label(&*device).ok()?;
    (label.leaf_guid == leaf.guid).then_some(device)
}

fn all_device_paths(obj: &ObjPool) -> Vec<String> {
    let config = obj.config();
    let mut paths: Vec<String> = config.leaves().into_iter().map(|(_, l)| l.path.clone()).collect();
    paths.extend(config.spares.iter().map(|l| l.path.clone()));
    paths.extend(config.cache.iter().map(|l| l.path.clone()));
    paths
}

/// Whether `path` holds this leaf's label, read without taking the
/// device lock (the suspended pool still holds it).
fn label_present(path: &str, guid: u64) -> bool {
    use std::io::Read;
    let Ok(mut f) = std::fs::File::open(path) else { return false };
    let Ok(meta) = f.metadata() else { return false };
    let mut head = vec![0u8; 256 << 10];
    if f.read_exact(&mut head).is_err() {
        return false;
    }
    let mem = tarn_dev::MemDevice::new(path, meta.len().max(head.len() as u64));
    use tarn_dev::Device;
    if mem.write_at(&head, 0).is_err() {
        return false;
    }
    tarn_vdev::read_label(&*mem).is_ok_and(|l| l.leaf_guid == guid)
}

/// Devices a suspended pool lacks for an import to work: per top-level
/// vdev, the slots without a present leaf beyond what it can lose.
fn missing_devices(obj: &ObjPool) -> Vec<String> {
    let config = obj.config();
    let mut out = Vec::new();
    // A missing log device does not stop the import again (it is `-m`).
    for top in config.top.iter().filter(|t| !t.is_log()) {
        let missing: Vec<&tarn_vdev::LeafConfig> = top
            .children
            .iter()
            .filter(|slot| !slot.slot_leaves().any(|l| label_present(&l.path, l.guid)))
            .collect();
        let tolerated = match top.kind {
            TopKind::Disk | TopKind::Hole => 0,
            TopKind::Mirror => top.children.len() - 1,
            TopKind::Raidz { parity } => usize::from(parity),
        };
        if missing.len() > tolerated {
            out.extend(missing.iter().map(|l| l.path.clone()));
        }
    }
    out
}

fn find_leaf_status(obj: &ObjPool, path: &str) -> Option<LeafStatus> {
    let status = obj.status();
    status.tops.iter().chain(&status.logs).flat_map(|t| t.children.iter()).find(|l| l.path == path || l.guid.to_string() == path).cloned()
}

impl Daemon {
    pub(crate) fn handle_health(&self, request: Request) -> HandlerResult {
        match request {
            Request::PoolScrub { pool, pause, stop } => self.scrub(&pool, pause, stop),
            Request::PoolWait { pool, activities, timeout_secs } => self.wait(&pool, &activities, timeout_secs),
            Request::PoolOffline { pool, device } => {
                // Like zpool: what was written before the device goes away is
                // on it (a txg, not only the intent log), so a later online
                // resilvers only what changed while it was away.
                self.device_op(&pool, "offline", |obj| {
                    obj.sync().map_err(|e| e.to_string())?;
                    obj.offline(&device).map_err(|e| e.to_string())
                })
            }
            Request::PoolOnline { pool, device } => self.device_op(&pool, "online", |obj| {
                let leaf = find_leaf_status(obj, &device).ok_or_else(|| format!("no such device in pool: {device}"))?;
                let reopened = match leaf.state {
                    DevState::Online | DevState::Degraded | DevState::Offline => None,
                    _ => Some(reopen_leaf(&leaf).ok_or_else(|| format!("cannot open '{device}' (missing, or not this pool's device)"))?),
                };
                obj.online(&device, reopened).map_err(|e| e.to_string())
            }),
            Request::PoolReplace { pool, old, new, force } => self.device_op(&pool, "replace", |obj| {
                let new_path = new.clone().unwrap_or_else(|| old.clone());
                if new.is_none() {
                    // Same path: the old device must be gone and a new one there.
                    if let Some(leaf) = find_leaf_status(obj, &old) {
                        if leaf.state.usable() {
                            return Err(format!("{old} is in use; give a new device to replace it with"));
                        }
                    }
                }
                let device = scan::open_new_device(&new_path, force)?;
                obj.replace(&old, new_path, device).map_err(|e| e.to_string())
            }),
            Request::PoolAttach { pool, existing, new, force } => self.device_op(&pool, "attach", |obj| {
                let device = scan::open_new_device(&new, force)?;
                obj.attach(&existing, new.clone(), device).map_err(|e| e.to_string())
            }),
            Request::PoolDetach { pool, device } => {
                self.device_op(&pool, "detach", |obj| obj.detach(&device).map_err(|e| e.to_string()))
            }
            Request::PoolAdd { pool, vdevs, spares, force, dry_run, cache } => self.add(&pool, &vdevs, &spares, &cache, force, dry_run),
            Request::PoolRemove { pool, device } => self.device_op(&pool, "remove", |obj| {
                let spare = obj.spares().iter().any(|l| l.path == device);
                if spare {
                    obj.remove_spare(&device).map_err(|e| e.to_string())
                } else if obj.is_cache_device(&device) {
                    obj.remove_cache(&device).map_err(|e| e.to_string())
                } else {
                    obj.remove_log(&device).map_err(|e| e.to_string())
                }
            }),
            Request::PoolClear { pool, device } => self.clear(&pool, device.as_deref()),
            Request::PoolSync { pools } => self.sync_pools(&pools),
            Request::PoolEvents { pool, after, wait_secs, clear } => self.pool_events(pool.as_deref(), after, wait_secs, clear),
            Request::AlertTest { pool } => self.alert_test(pool.as_deref()),
            other => Err(format!("unsupported request {other:?}")),
        }
    }

    /// Posts an event to the log and to the alerter.
    pub(crate) fn post_event(&self, event: Event) {
        self.alerter.notify(&event);
        eprintln!("tarn daemon: {} {} {}", event.pool, event.class, event.message);
        self.events.post(event);
    }

    fn obj_of(&self, pool: &str, verb: &str) -> Result<Arc<ObjPool>, String> {
        let pools = self.pools.lock();
        let imported = pools.get(pool).ok_or_else(|| fail(verb, pool)("no such pool".into()))?;
        Ok(imported.ds.obj().clone())
    }

    /// Runs a device change and records the new device list.
    fn device_op(&self, pool: &str, verb: &str, op: impl FnOnce(&ObjPool) -> Result<(), String>) -> HandlerResult {
        let obj = self.obj_of(pool, verb)?;
        op(&obj).map_err(fail(verb, pool))?;
        let warning = self.remember_devices(pool);
        self.post_event(Event::new(pool, "config_change", Severity::Info, format!("pool {verb} done")));
        Ok(Response { stderr: warning, ..Response::text("") })
    }

    /// Updates pools.json with the pool's current devices.
    pub(crate) fn remember_devices(&self, pool: &str) -> String {
        let mut pools = self.pools.lock();
        let Some(imported) = pools.get_mut(pool) else { return String::new() };
        let obj = imported.ds.obj().clone();
        imported.devices = all_device_paths(&obj);
        let cached =
            CachedPool { name: pool.to_string(), guid: obj.guid(), devices: imported.devices.clone(), altroot: imported.altroot.clone(), missing_log: false };
        drop(pools);
        let mut cache = self.cache.lock();
        cache.remember(cached);
        self.save_cache(&cache)
    }

    fn scrub(&self, pool: &str, pause: bool, stop: bool) -> HandlerResult {
        let obj = self.obj_of(pool, "scrub")?;
        let f = fail("scrub", pool);
        if obj.suspended().is_some() {
            return Err(f("the pool is suspended".into()));
        }
        let r = if stop {
            obj.scrub_stop()
        } else if pause {
            obj.scrub_pause()
        } else {
            obj.scrub_start()
        };
        r.map_err(|e| f(e.to_string()))?;
        Ok(Response::text(""))
    }

    fn wait(&self, pool: &str, activities: &[String], timeout: Option<u64>) -> HandlerResult {
        let obj = self.obj_of(pool, "wait for")?;
        let mut funcs = Vec::new();
        let mut trim = activities.is_empty();
        for a in activities {
            match a.as_str() {
                "scrub" => funcs.push(Some(ScanFunc::Scrub)),
                "resilver" | "replace" => funcs.push(Some(ScanFunc::Resilver)),
                "trim" => trim = true,
                other => return Err(format!("cannot wait for '{pool}': unknown activity '{other}' (replace, resilver, scrub, trim)")),
            }
        }
        if activities.is_empty() {
            funcs.push(None);
        }
        let limit = timeout.map_or(Duration::from_secs(u64::MAX / 4), Duration::from_secs);
        let start = std::time::Instant::now();
        for f in funcs {
            let left = limit.saturating_sub(start.elapsed());
            if !obj.wait_scan(f, left) {
                return Ok(Response { exit: 1, ..Response::error(format!("timed out waiting for '{pool}'")) });
            }
        }
        if trim && !obj.wait_trim(limit.saturating_sub(start.elapsed())) {
            return Ok(Response { exit: 1, ..Response::error(format!("timed out waiting for '{pool}'")) });
        }
        Ok(Response::text(""))
    }

    fn add(&self, pool: &str, vdevs: &[VdevGroup], spares: &[String], cache: &[String], force: bool, dry_run: bool) -> HandlerResult {
        let f = fail("add to", pool);
        let obj = self.obj_of(pool, "add to")?;
        if vdevs.is_empty() && spares.is_empty() && cache.is_empty() {
            return Err(f("no devices given".into()));
        }
        let known = all_device_paths(&obj);
        if let Some(group) = vdevs.iter().find(|g| g.log && matches!(g.kind, VdevKind::Raidz { .. })) {
            return Err(f(format!("{} cannot be a log vdev: a log vdev is a disk or a mirror", describe_group(group))));
        }
        let mut opened = Vec::new();
        for group in vdevs {
            let mut devices = Vec::new();
            for path in &group.devices {
                if known.contains(path) {
                    return Err(f(format!("'{path}' is already in the pool")));
                }
                devices.push((path.clone(), scan::open_new_device(path, force).map_err(&f)?));
            }
            let kind = match group.kind {
                VdevKind::Disk => TopKind::Disk,
                VdevKind::Mirror => TopKind::Mirror,
                VdevKind::Raidz { parity } => TopKind::Raidz { parity },
            };
            // A log vdev's redundancy is its own (one SLOG on a raidz pool is usual).
            let current = obj.config().top.iter().find(|t| !t.is_log()).map(|t| t.kind.clone()).filter(|_| !group.log);
            let redundancy = |k: &TopKind| match k {
                TopKind::Disk => "no redundancy".to_string(),
                TopKind::Mirror => "mirror".into(),
                TopKind::Raidz { parity } => format!("raidz{parity}"),
                TopKind::Hole => "none".into(),
            };
            if let Some(cur) = &current {
                if !force && redundancy(cur) != redundancy(&kind) {
                    return Err(f(format!(
                        "mismatched replication level: pool uses {}, new vdev is {} (use -f to override)",
                        redundancy(cur),
                        describe_group(group)
                    )));
                }
            }
            opened.push((kind, devices, group.log));
        }
        let mut spare_devs = Vec::new();
        for path in spares {
            if known.contains(path) {
                return Err(f(format!("'{path}' is already in the pool")));
            }
            spare_devs.push((path.clone(), scan::open_new_device(path, force).map_err(&f)?));
        }
        let mut cache_devs = Vec::new();
        for path in cache {
            if known.contains(path) {
                return Err(f(format!("'{path}' is already in the pool")));
            }
            cache_devs.push((path.clone(), scan::open_new_device(path, force).map_err(&f)?));
        }
        if dry_run {
            let mut out = format!("would update '{pool}' to the following layout:\n");
            for group in vdevs.iter().filter(|g| !g.log) {
                out.push_str(&format!("\t  {}\n", describe_group(group)));
            }
            if vdevs.iter().any(|g| g.log) {
                out.push_str("\tlogs\n");
            }
            for group in vdevs.iter().filter(|g| g.log) {
                match group.kind {
                    VdevKind::Disk => out.push_str(&format!("\t  {}\n", group.devices.join(" "))),
                    _ => out.push_str(&format!("\t  {} {}\n", describe_group(group), group.devices.join(" "))),
                }
            }
            if !cache.is_empty() {
                out.push_str("\tcache\n");
            }
            for c in cache {
                out.push_str(&format!("\t  {c}\n"));
            }
            for s in spares {
                out.push_str(&format!("\tspare {s}\n"));
            }
            return Ok(Response::text(out));
        }
        for (kind, devices, log) in opened {
            if log {
                obj.add_log_vdev(kind, devices).map_err(|e| f(e.to_string()))?;
            } else {
                obj.add_vdev(kind, devices).map_err(|e| f(e.to_string()))?;
            }
        }
        for (path, dev) in spare_devs {
            obj.add_spare(path, dev).map_err(|e| f(e.to_string()))?;
        }
        for (path, dev) in cache_devs {
            obj.add_cache(path, dev).map_err(|e| f(e.to_string()))?;
        }
        let warning = self.remember_devices(pool);
        self.post_event(Event::new(pool, "config_change", Severity::Info, "devices added"));
        Ok(Response { stderr: warning, ..Response::text("") })
    }

    fn clear(&self, pool: &str, device: Option<&str>) -> HandlerResult {
        let f = fail("clear errors for", pool);
        let obj = self.obj_of(pool, "clear errors for")?;
        if obj.suspended().is_some() {
            // The txg that failed cannot be retried in place: what is on
            // disk is consistent as of the last synced txg, so bring the
            // pool back by importing it again from its devices.
            return self.reimport(pool).map_err(f);
        }
        if let Some(dev) = device {
            if find_leaf_status(&obj, dev).is_none() {
                return Err(f(format!("no such device in pool: {dev}")));
            }
        }
        obj.clear(device, &|leaf: &LeafStatus| reopen_leaf(leaf))
        .map_err(|e| f(e.to_string()))?;
        Ok(Response::text(""))
    }

    /// `pool sync`: every pool named is looked up first (an unknown name
    /// syncs nothing), then each syncs a txg and waits for it.
    fn sync_pools(&self, names: &[String]) -> HandlerResult {
        let objs: Vec<(String, Arc<ObjPool>)> = if names.is_empty() {
            let pools = self.pools.lock();
            pools.iter().map(|(n, p)| (n.clone(), p.ds.obj().clone())).collect()
        } else {
            names.iter().map(|n| Ok((n.clone(), self.obj_of(n, "sync")?))).collect::<Result<_, String>>()?
        };
        for (name, obj) in objs {
            obj.sync().map_err(|e| fail("sync", &name)(e.to_string()))?;
        }
        Ok(Response::text(""))
    }

    /// Drops a (suspended) pool without syncing and imports it again, once
    /// enough of its devices are back for the import to work.
    fn reimport(&self, pool: &str) -> Result<Response, String> {
        let obj = self.obj_of(pool, "clear errors for")?;
        let missing = missing_devices(&obj);
        if !missing.is_empty() {
            return Err(format!("the pool is suspended and devices are still missing: {}", missing.join(", ")));
        }
        drop(obj);
        let (guid, paths, altroot) = {
            let mut pools = self.pools.lock();
            let mut imported = pools.remove(pool).ok_or("no such pool")?;
            unmount_all(&mut imported);
            let obj = imported.ds.obj().clone();
            let _ = obj.export();
            (obj.guid(), imported.devices.clone(), imported.altroot.clone())
        };
        // Threads still finishing with the old pool hold its device locks
        // for a moment: retry while the import says a device is busy.
        let mut last = String::new();
        for _ in 0..20 {
            let request =
                Request::PoolImport {
                    dirs: vec![],
                    force: true,
                    rewind: false,
                    altroot: altroot.clone(),
                    pool: Some(guid.to_string()),
                    // It was running without its log device already.
                    missing_log: true,
                    load_keys: true,
                };
            match self.import_from(&paths, request) {
                Ok(response) => {
                    self.post_event(Event::new(pool, "pool_resumed", Severity::Info, "pool imported again after clear"));
                    return Ok(response);
                }
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Err(last)
    }

    fn pool_events(&self, pool: Option<&str>, after: u64, wait_secs: u64, clear: bool) -> HandlerResult {
        if let Some(p) = pool {
            if !self.pools.lock().contains_key(p) {
                return Err(format!("cannot get events for '{p}': no such pool"));
            }
        }
        if clear {
            match pool {
                Some(p) => self.events.clear(p),
                None => {
                    for p in self.pools.lock().keys() {
                        self.events.clear(p);
                    }
                }
            }
            return Ok(Response::text(""));
        }
        let mut rows = self.events.since(after, pool);
        if rows.is_empty() && wait_secs > 0 {
            let mut seq = self.events.last_seq().max(after);
            let end = std::time::Instant::now() + Duration::from_secs(wait_secs.min(60));
            while rows.is_empty() && std::time::Instant::now() < end {
                self.events.wait_newer(seq, end.saturating_duration_since(std::time::Instant::now()));
                rows = self.events.since(after, pool);
                seq = self.events.last_seq();
            }
        }
        let rows: Vec<EventRow> = rows.into_iter().map(|(seq, event)| EventRow { seq, event }).collect();
        Ok(Response::data(serde_json::to_value(rows).map_err(|e| e.to_string())?))
    }

    fn alert_test(&self, pool: Option<&str>) -> HandlerResult {
        let name = pool.map(str::to_string).unwrap_or_else(hostname);
        let results = self.alerter.send_test(&name);
        if results.is_empty() {
            return Err("no alert channels configured (see [alerts] in the daemon's config file)".into());
        }
        let rows: Vec<AlertTestRow> = results
            .into_iter()
            .map(|(channel, r)| AlertTestRow { channel, ok: r.is_ok(), error: r.err() })
            .collect();
        let failed = rows.iter().filter(|r| !r.ok).count();
        let mut response = Response::data(serde_json::to_value(&rows).map_err(|e| e.to_string())?);
        if failed > 0 {
            response.exit = 1;
        }
        Ok(response)
    }

    /// One pass of the monitor over every pool.
    pub(crate) fn monitor_once(&self) {
        let pools: Vec<(String, Arc<ObjPool>, String)> = {
            let pools = self.pools.lock();
            pools
                .iter()
                .map(|(name, imp)| (name.clone(), imp.ds.obj().clone(), imp.ds.pool_property("autoreplace").0))
                .collect()
        };
        let names: Vec<String> = pools.iter().map(|p| p.0.clone()).collect();
        self.watch.lock().retain(|name, _| names.contains(name));
        for (name, obj, autoreplace) in pools {
            obj.probe_devices();
            self.watch_pool(&name, &obj, autoreplace == "on");
        }
    }

    fn watch_pool(&self, name: &str, obj: &Arc<ObjPool>, autoreplace: bool) {
        let status = obj.status();
        let mut events = Vec::new();
        let mut failed_leaves = Vec::new();
        let mut watch = self.watch.lock();
        let first = !watch.contains_key(name);
        let w = watch.entry(name.to_string()).or_default();
        let log_leaves: Vec<u64> = status.logs.iter().flat_map(|t| t.children.iter()).map(|l| l.guid).collect();
        let leaves: Vec<&LeafStatus> = status.tops.iter().chain(&status.logs).flat_map(|t| t.children.iter()).collect();
        for leaf in &leaves {
            let before = w.leaves.get(&leaf.guid).map(|(_, s)| *s);
            let changed = match before {
                Some(s) => s != leaf.state,
                None => !first || leaf.state != DevState::Online,
            };
            if changed && !(before.is_none() && leaf.state == DevState::Online) {
                let severity = match leaf.state {
                    DevState::Online => Severity::Info,
                    DevState::Offline => Severity::Warning,
                    _ => Severity::Error,
                };
                let why = leaf.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
                events.push(
                    Event::new(name, "statechange", severity, format!("device {} is {}{why}", leaf.path, leaf.state.word()))
                        .with_vdev(leaf.path.clone())
                        .with_state(leaf.state.word()),
                );
            }
            // Every pass, not only at the change: a spare may be added, or
            // a new device appear at the path (autoreplace), later.
            // Hot spares stand in for data devices, not for log devices (as in ZFS).
            let log = log_leaves.contains(&leaf.guid);
            if !leaf.state.usable() && leaf.state != DevState::Offline && leaf.role == LeafRole::Primary && !log {
                failed_leaves.push((*leaf).clone());
            }
            w.leaves.insert(leaf.guid, (leaf.path.clone(), leaf.state));
        }
        let state = match &status.suspended {
            Some(_) => "SUSPENDED".to_string(),
            None => status.state.word().to_string(),
        };
        if w.state.as_deref() != Some(state.as_str()) && !(w.state.is_none() && state == "ONLINE") {
            let (class, severity, msg) = match state.as_str() {
                "ONLINE" => ("pool_online", Severity::Info, "pool is ONLINE".to_string()),
                "DEGRADED" => (
                    "pool_degraded",
                    Severity::Error,
                    "pool is DEGRADED: a device failed; data is intact while redundancy lasts".to_string(),
                ),
                "SUSPENDED" => (
                    "pool_suspended",
                    Severity::Error,
                    format!("pool is SUSPENDED: {}", status.suspended.clone().unwrap_or_default()),
                ),
                _ => ("pool_unavail", Severity::Error, format!("pool is {state}")),
            };
            events.push(Event::new(name, class, severity, msg).with_state(state.clone()));
            w.state = Some(state);
        }
        if let Some(st) = &status.scan {
            let key = (st.func, st.start_time, st.phase);
            if w.scan != Some(key) {
                let what = match st.func {
                    ScanFunc::Scrub => "scrub",
                    ScanFunc::Resilver => "resilver",
                };
                let was_scanning = w.scan.is_some_and(|(f, t, p)| f == st.func && t == st.start_time && p == ScanPhase::Scanning);
                match st.phase {
                    ScanPhase::Scanning if !first => {
                        events.push(Event::new(name, format!("{what}_start"), Severity::Info, format!("{what} started")))
                    }
                    ScanPhase::Finished if was_scanning || !first => {
                        let severity = if st.errors > 0 { Severity::Error } else { Severity::Info };
                        let msg = format!(
                            "{what} finished: {} repaired, {} resilvered, {} unrecoverable block(s)",
                            tarn_ds::size::format_number(st.repaired),
                            tarn_ds::size::format_number(st.resilvered),
                            st.errors
                        );
                        events.push(Event::new(name, format!("{what}_finish"), severity, msg));
                        if st.errors > 0 {
                            events.push(Event::new(
                                name,
                                "data_error",
                                Severity::Error,
                                format!("{} block(s) could not be recovered; run 'tarn pool status -v {name}'", st.errors),
                            ));
                        }
                    }
                    ScanPhase::Canceled if was_scanning => {
                        events.push(Event::new(name, format!("{what}_cancel"), Severity::Info, format!("{what} stopped")))
                    }
                    _ => {}
                }
                w.scan = Some(key);
            }
        }
        let space = obj.space();
        let percent = space.alloc.saturating_mul(100) / space.size.max(1);
        let warn = u64::from(self.alerter.capacity_warn_percent());
        if percent >= warn && !w.capacity_warned {
            w.capacity_warned = true;
            events.push(
                Event::new(name, "capacity", Severity::Warning, format!("pool is {percent}% full (warning at {warn}%)"))
                    .with_state(format!("{percent}%")),
            );
        } else if percent + 5 < warn && w.capacity_warned {
            w.capacity_warned = false;
        }
        drop(watch);
        for e in events {
            self.post_event(e);
        }
        for leaf in failed_leaves {
            self.cover_failed(name, obj, &leaf, autoreplace);
        }
    }

    /// A spare in for a failed device, or (autoreplace) a blank device
    /// that appeared at its path.
    fn cover_failed(&self, name: &str, obj: &Arc<ObjPool>, leaf: &LeafStatus, autoreplace: bool) {
        if autoreplace && leaf.state != DevState::Online {
            let blank = scan::open_device(&leaf.path).ok().filter(|d| tarn_vdev::read_label(&**d).is_err());
            if let Some(device) = blank {
                match obj.replace(&leaf.path, leaf.path.clone(), device) {
                    Ok(()) => {
                        self.post_event(
                            Event::new(name, "autoreplace", Severity::Warning, format!("replacing {} with the new device at its path", leaf.path))
                                .with_vdev(leaf.path.clone()),
                        );
                        self.remember_devices(name);
                        return;
                    }
                    Err(e) => eprintln!("tarn daemon: autoreplace of {} failed: {e}", leaf.path),
                }
            }
        }
        match obj.activate_spare(&leaf.path) {
            Ok(Some(spare)) => {
                self.post_event(
                    Event::new(name, "spare_activated", Severity::Warning, format!("hot spare {spare} is replacing failed device {}", leaf.path))
                        .with_vdev(leaf.path.clone()),
                );
                self.remember_devices(name);
            }
            Ok(None) => {}
            Err(e) => eprintln!("tarn daemon: cannot activate a spare for {}: {e}", leaf.path),
        }
    }
}

/// Starts the monitor thread.
pub fn spawn_monitor(daemon: Arc<Daemon>) {
    let _ = std::thread::Builder::new().name("tarn-monitor".into()).spawn(move || loop {
        std::thread::sleep(MONITOR_INTERVAL);
        let d = daemon.clone();
        // A panic in one pass must not end monitoring.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| d.monitor_once())).is_err() {
            eprintln!("tarn daemon: monitor pass failed; continuing");
        }
    });
}
