//! Changing a pool's devices while it serves: offline/online, attach and
//! detach, replace, hot spares, adding top-level vdevs, clearing errors;
//! and starting, pausing and stopping scrubs.
//!
//! Every change runs under the sync lock (no txg is being written), swaps
//! the affected top-level vdev whole (`BlockIo::replace_top`), and rewrites
//! the labels of every device in service with the next config generation,
//! so import always finds the newest layout. A leaf that joins a pool
//! (attach, replace, spare) starts with a DTL covering every txg synced so
//! far; a resilver then copies exactly what it lacks.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tarn_dev::Device;
use tarn_vdev::{LeafConfig, LeafRole, LeafStatus, LeafVdev, PoolState, TopClass, TopConfig, TopKind, TopVdev, CACHE_TOP_ID, SPARE_TOP_ID};

use crate::pool::Shared;
use crate::scan::{self, ScanFunc, ScanPhase, ScanStats};
use crate::{ObjError, ObjPool, Result};

fn invalid(msg: impl Into<String>) -> ObjError {
    ObjError::Invalid(msg.into())
}

/// Rewrites the labels of every device in service (and of available
/// spares) with the current layout as the next config generation.
pub(crate) fn write_labels(s: &Shared, state: Option<PoolState>) -> Result<()> {
    let tops = s.io.tops();
    for leaf in tops.iter().flat_map(|t| t.leaves()) {
        leaf.take_dtl_dirty();
    }
    let spares = s.spares.lock().clone();
    let mut cfg = s.config.lock().clone();
    cfg.top = tops.iter().map(|t| t.config()).collect();
    cfg.spares = spares
        .iter()
        .map(|l| LeafConfig { role: LeafRole::Spare, ..LeafConfig::new(l.guid, l.path.clone()) })
        .collect();
    let cache = s.l2.leaves();
    cfg.cache = cache.iter().map(|l| LeafConfig::new(l.guid, l.path.clone())).collect();
    if let Some(st) = state {
        cfg.state = st;
    }
    cfg.generation += 1;
    let mut targets: Vec<(u32, Arc<LeafVdev>)> = Vec::new();
    for t in tops.iter() {
        for l in t.leaves() {
            targets.push((t.id(), l));
        }
    }
    for l in &spares {
        targets.push((SPARE_TOP_ID, l.clone()));
    }
    for l in &cache {
        targets.push((CACHE_TOP_ID, l.clone()));
    }
    let mut written = 0;
    let mut last_err = None;
    for (top_id, leaf) in targets {
        let Some(dev) = leaf.device() else { continue };
        if !leaf.usable() {
            continue;
        }
        let label = tarn_vdev::Label { config: cfg.clone(), top_id, leaf_guid: leaf.guid };
        match tarn_vdev::write_label(dev.as_ref(), &label) {
            Ok(()) => written += 1,
            Err(e) => last_err = Some(e),
        }
    }
    *s.config.lock() = cfg;
    match (written, last_err) {
        (0, Some(e)) => Err(e.into()),
        _ => Ok(()),
    }
}

/// Devices that get uberblocks: every leaf in service.
pub(crate) fn uberblock_devices(s: &Shared) -> Vec<Arc<dyn Device>> {
    s.io.tops().iter().flat_map(|t| t.leaves()).filter(|l| l.usable()).filter_map(|l| l.device()).collect()
}

/// Whether a top-level vdev still serves every block if `without` is gone:
/// a slot is complete when a leaf in service holds all its txgs.
fn survives_without(top: &TopVdev, without: u64) -> bool {
    let complete = |slot: &Vec<Arc<LeafVdev>>| slot.iter().any(|l| l.guid != without && l.usable() && l.dtl().is_empty());
    let incomplete = top.slots().iter().filter(|s| !complete(s)).count();
    match top.kind() {
        TopKind::Disk | TopKind::Hole => incomplete == 0,
        TopKind::Mirror => incomplete < top.slots().len(),
        TopKind::Raidz { parity } => incomplete <= usize::from(*parity),
    }
}

fn find_leaf(s: &Shared, path: &str) -> Result<(Arc<TopVdev>, Arc<LeafVdev>)> {
    for t in s.io.tops().iter() {
        for l in t.leaves() {
            if l.path == path || l.guid.to_string() == path {
                return Ok((t.clone(), l));
            }
        }
    }
    Err(invalid(format!("no such device in pool: {path}")))
}

pub(crate) fn new_guid() -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    u64::from_le_bytes(b).max(1)
}

fn leaf_config(l: &LeafVdev) -> LeafConfig {
    LeafConfig { role: l.role(), ..LeafConfig::new(l.guid, l.path.clone()) }
}

/// A new leaf that lacks every txg synced so far.
fn joining_leaf(s: &Shared, path: String, dev: Arc<dyn Device>, role: LeafRole) -> Arc<LeafVdev> {
    let leaf = Arc::new(LeafVdev::new(new_guid(), path, Some(dev)));
    leaf.set_role(role);
    let synced = s.synced_txg.load(Ordering::Acquire);
    leaf.fill_dtl(1, synced.max(1));
    leaf
}

/// Puts `top` rebuilt for `cfg` (with `new_leaves` joining) in place.
fn swap_top(s: &Shared, top: &TopVdev, cfg: TopConfig, new_leaves: &[Arc<LeafVdev>]) -> Result<()> {
    s.io.replace_top(Arc::new(top.reconfigure(cfg, new_leaves)?));
    Ok(())
}

fn check_leaf_size(top: &TopVdev, dev: &Arc<dyn Device>) -> Result<()> {
    let need = TopVdev::leaf_size_needed(&top.config());
    let have = tarn_vdev::data_region_size(dev.size());
    if have < need {
        return Err(invalid(format!(
            "{} is too small: {} bytes of data space, the vdev needs {need}",
            dev.path(),
            have
        )));
    }
    Ok(())
}

/// After a finished scan: forget the resilvered txgs of every leaf that
/// stayed in service throughout, settle completed replacements, and start
/// another resilver if a leaf still lacks txgs (it came back meanwhile).
pub(crate) fn scan_done(s: &Arc<Shared>, stats: &ScanStats) {
    let _g = s.sync_lock.lock();
    let tops = s.io.tops();
    // A scan that met an unrecoverable block (or unreadable metadata) did
    // not copy everything: every DTL stays, no replacement completes.
    let complete = stats.errors == 0;
    // The copies written are durable before any label says so.
    let flushed = s.io.flush(s.synced_txg.load(Ordering::Acquire)).is_ok();
    for (guid, ranges) in stats.dtl.iter().filter(|_| complete && flushed) {
        let Some(leaf) = tops.iter().flat_map(|t| t.leaves()).find(|l| l.guid == *guid) else { continue };
        let unchanged = s.scanner.leaf_marks.lock().get(guid).copied() == Some(leaf.mark());
        if leaf.usable() && unchanged {
            leaf.dtl_resilvered(&tarn_vdev::Dtl(ranges.clone()));
        }
    }
    if stats.func == ScanFunc::Scrub {
        // A scrub writes every block to leaves lacking it, like a resilver.
        for leaf in tops.iter().flat_map(|t| t.leaves()) {
            let unchanged = s.scanner.leaf_marks.lock().get(&leaf.guid).copied() == Some(leaf.mark());
            if leaf.usable() && unchanged && complete && flushed {
                let upto = tarn_vdev::Dtl(vec![(0, stats.max_txg)]);
                if leaf.dtl().overlaps(0, stats.max_txg) {
                    leaf.dtl_resilvered(&upto);
                }
            }
        }
    }
    let mut returned_spares = Vec::new();
    let mut dropped = Vec::new();
    for top in tops.iter() {
        let mut cfg = top.config();
        let mut changed = false;
        for child in cfg.children.iter_mut() {
            let leaves: Vec<LeafConfig> = child.slot_leaves().cloned().collect();
            let done = leaves.iter().find(|l| {
                complete
                    && l.role == LeafRole::Replacing
                    && l.dtl.is_empty()
                    && top.leaves().iter().any(|x| x.guid == l.guid && x.usable())
            });
            if let Some(winner) = done.cloned() {
                for l in leaves.iter().filter(|l| l.guid != winner.guid) {
                    if l.role == LeafRole::Spare {
                        returned_spares.push(l.guid);
                    } else {
                        dropped.push(l.guid);
                    }
                }
                *child = LeafConfig { role: LeafRole::Primary, joined: vec![], ..winner };
                changed = true;
            }
        }
        if changed {
            let all = top.leaves();
            match top.reconfigure(cfg, &[]) {
                Ok(t) => s.io.replace_top(Arc::new(t)),
                Err(e) => {
                    eprintln!("tarn: cannot finish replacing in {}: {e}", top.name());
                    returned_spares.clear();
                    dropped.clear();
                    continue;
                }
            }
            for leaf in all {
                if returned_spares.contains(&leaf.guid) {
                    leaf.set_role(LeafRole::Spare);
                    s.spares.lock().push(leaf);
                } else if dropped.contains(&leaf.guid) {
                    if let (true, Some(dev)) = (leaf.usable(), leaf.device()) {
                        let _ = tarn_vdev::clear_labels(dev.as_ref());
                    }
                }
            }
        }
    }
    if let Err(e) = write_labels(s, None) {
        eprintln!("tarn: cannot write labels after scan: {e}");
    }
    drop(_g);
    // A leaf that lacks txgs still (it returned during the scan): again.
    let needs = s.io.tops().iter().flat_map(|t| t.leaves()).any(|l| l.usable() && !l.dtl().is_empty());
    // (Not after errors: the DTLs were kept on purpose, another pass would
    // meet the same damage.)
    if needs && stats.phase == ScanPhase::Finished && stats.errors == 0 {
        let s2 = s.clone();
        // Not from this (the scan) thread: it is about to exit.
        let _ = std::thread::Builder::new().name("tarn-resilver-start".into()).spawn(move || {
            for _ in 0..3000 {
                if !s2.scanner.ctl.lock().running {
                    let _ = start_scan(&s2, ScanFunc::Resilver);
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
    }
}

/// Starts a scan of `func`, noting each leaf's mark (so that a leaf that
/// leaves service during the scan keeps its DTL).
pub(crate) fn start_scan(s: &Arc<Shared>, func: ScanFunc) -> Result<()> {
    if s.readonly {
        return Err(ObjError::ReadOnly);
    }
    scan::start(s, func)
}

impl ObjPool {
    pub(crate) fn config_op<T>(&self, f: impl FnOnce(&Arc<Shared>) -> Result<T>) -> Result<T> {
        let s = &self.shared;
        if s.readonly {
            return Err(ObjError::ReadOnly);
        }
        if let Some(m) = s.suspended.why() {
            return Err(ObjError::Io(m));
        }
        let _g = s.sync_lock.lock();
        let r = f(s)?;
        write_labels(s, None)?;
        Ok(r)
    }

    /// Starts a resilver if a leaf in service lacks txgs (a scrub in
    /// progress gives way, as in ZFS).
    pub fn resilver_if_needed(&self) -> Result<bool> {
        let s = &self.shared;
        let needs = s.io.tops().iter().flat_map(|t| t.leaves()).any(|l| l.usable() && !l.dtl().is_empty());
        if !needs || s.readonly {
            return Ok(false);
        }
        let current = s.scanner.stats.lock().clone();
        if let Some(st) = &current {
            if st.phase == ScanPhase::Scanning {
                if st.func == ScanFunc::Resilver {
                    // Restart so the new leaf's txgs are included.
                    self.cancel_scan_and_wait();
                } else {
                    self.cancel_scan_and_wait();
                }
            }
        }
        start_scan(s, ScanFunc::Resilver)?;
        Ok(true)
    }

    fn cancel_scan_and_wait(&self) {
        let s = &self.shared;
        let _start = s.scanner.start_lock.lock();
        s.scanner.ctl.lock().cancel = true;
        s.scanner.cv.notify_all();
        if let Some(t) = s.scanner.thread.lock().take() {
            let _ = t.join();
        }
    }

    /// `pool scrub`: starts a scrub, or resumes a paused one.
    pub fn scrub_start(&self) -> Result<()> {
        let s = &self.shared;
        let current = s.scanner.stats.lock().clone();
        if let Some(st) = &current {
            if st.phase == ScanPhase::Scanning {
                if st.func == ScanFunc::Resilver {
                    return Err(invalid("currently resilvering; a scrub can start once it is done"));
                }
                if st.paused {
                    s.scanner.ctl.lock().pause = false;
                    if let Some(st) = s.scanner.stats.lock().as_mut() {
                        st.paused = false;
                    }
                    s.scanner.cv.notify_all();
                    scan::spawn(s);
                    let snap = s.scanner.stats.lock().clone();
                    if let Some(snap) = snap {
                        scan::save(s, &snap)?;
                    }
                    return Ok(());
                }
                return Err(invalid("a scrub is already in progress (use -p to pause or -s to stop it)"));
            }
        }
        start_scan(s, ScanFunc::Scrub)
    }

    /// `pool scrub -p`.
    pub fn scrub_pause(&self) -> Result<()> {
        let s = &self.shared;
        let snap = {
            let mut st = s.scanner.stats.lock();
            match st.as_mut() {
                Some(st) if st.phase == ScanPhase::Scanning && st.func == ScanFunc::Scrub => {
                    if st.paused {
                        return Err(invalid("the scrub is already paused"));
                    }
                    st.paused = true;
                    st.clone()
                }
                _ => return Err(invalid("there is no active scrub")),
            }
        };
        s.scanner.ctl.lock().pause = true;
        // The persisted state keeps the last checkpoint's position.
        let mut persisted = scan::load(s).unwrap_or(snap);
        persisted.paused = true;
        scan::save(s, &persisted)
    }

    /// `pool scrub -s`.
    pub fn scrub_stop(&self) -> Result<()> {
        let s = &self.shared;
        match s.scanner.stats.lock().as_ref() {
            Some(st) if st.phase == ScanPhase::Scanning && st.func == ScanFunc::Scrub => {}
            _ => return Err(invalid("there is no active scrub")),
        }
        let running = s.scanner.ctl.lock().running;
        if running {
            self.cancel_scan_and_wait();
        } else {
            // Paused and exported/imported: no thread; cancel directly.
            let snap = {
                let mut st = s.scanner.stats.lock();
                st.as_mut().map(|st| {
                    st.phase = ScanPhase::Canceled;
                    st.paused = false;
                    st.clone()
                })
            };
            if let Some(snap) = snap {
                scan::save(s, &snap)?;
            }
        }
        Ok(())
    }

    pub fn scan_stats(&self) -> Option<ScanStats> {
        self.shared.scanner.stats.lock().clone()
    }

    /// Blocks until no scan of `func` (any, if None) is in progress, or
    /// the timeout passes. Returns whether it is done.
    pub fn wait_scan(&self, func: Option<ScanFunc>, timeout: Duration) -> bool {
        let end = std::time::Instant::now() + timeout;
        let mut idle_since: Option<std::time::Instant> = None;
        loop {
            let active = self.shared.scanner.stats.lock().as_ref().is_some_and(|st| {
                st.phase == ScanPhase::Scanning && func.is_none_or(|f| f == st.func)
            });
            if !active {
                // A resilver that ended cleanly but could not clear every
                // DTL (a leaf's mark moved, or it was resumed after an
                // import) is followed by another: resilvering is not over
                // until that one has run too.
                let resilvering = func.is_none_or(|f| f == ScanFunc::Resilver);
                let clean = self.shared.scanner.stats.lock().as_ref().is_none_or(|st| st.errors == 0);
                // The scan thread settles DTLs after the phase says
                // finished: until it is gone, the DTLs are not final.
                let settling = self.shared.scanner.ctl.lock().running;
                let pending = resilvering
                    && (settling || clean)
                    && !self.shared.readonly
                    && self.shared.io.tops().iter().flat_map(|t| t.leaves()).any(|l| l.usable() && !l.dtl().is_empty());
                // Waiting only: the follow-up is started by the scan that
                // ended (or the monitor); if none comes, stop waiting.
                let idle = idle_since.get_or_insert_with(std::time::Instant::now).elapsed();
                if !pending || (!settling && idle > Duration::from_secs(10)) {
                    return true;
                }
            } else {
                idle_since = None;
            }
            if std::time::Instant::now() >= end || self.shared.shutdown.load(Ordering::Relaxed) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `pool offline`: the leaf gets no I/O; writes meanwhile go to its DTL.
    pub fn offline(&self, path: &str) -> Result<()> {
        self.config_op(|s| {
            let (top, leaf) = find_leaf(s, path)?;
            if leaf.is_offline() {
                return Ok(());
            }
            if !survives_without(&top, leaf.guid) {
                return Err(invalid(format!("cannot offline {path}: no valid replicas")));
            }
            leaf.set_offline(true);
            Ok(())
        })
    }

    /// `pool online` (and the reopen half of `clear`): brings the leaf back
    /// with `dev` (freshly opened, label checked by the caller) or its old
    /// device; then resilvers what it missed.
    pub fn online(&self, path: &str, dev: Option<Arc<dyn Device>>) -> Result<()> {
        self.config_op(|s| {
            let (_, leaf) = find_leaf(s, path)?;
            leaf.set_offline(false);
            match dev {
                Some(d) => leaf.reopen(d),
                None if leaf.device().is_some() => leaf.clear_errors(),
                None => return Err(invalid(format!("cannot online {path}: cannot open the device"))),
            }
            // Its DTL is exact: every txg that wrote to its vdev while it
            // was away recorded itself there, and none is in flight now
            // (the sync lock is held).
            Ok(())
        })?;
        self.resilver_if_needed()?;
        Ok(())
    }

    /// `pool attach`: `new` joins the disk or mirror holding `existing`
    /// as one more side.
    pub fn attach(&self, existing: &str, new_path: String, dev: Arc<dyn Device>) -> Result<()> {
        self.config_op(|s| {
            crate::checkpoint::refuse_layout_change(s)?;
            let (top, _) = find_leaf(s, existing)?;
            if matches!(top.kind(), TopKind::Raidz { .. }) {
                return Err(invalid("attach works on disks and mirrors only (raidz cannot be widened)"));
            }
            check_leaf_size(&top, &dev)?;
            let leaf = joining_leaf(s, new_path, dev, LeafRole::Primary);
            let mut cfg: TopConfig = top.config();
            cfg.kind = TopKind::Mirror;
            cfg.children.push(leaf_config(&leaf));
            swap_top(s, &top, cfg, std::slice::from_ref(&leaf))?;
            Ok(top.is_log())
        })
        .and_then(|log| self.settle_log_joiner(log))?;
        self.resilver_if_needed()?;
        Ok(())
    }

    /// `pool replace`: `new` joins `old`'s slot and takes it over once
    /// resilvered; `old` then leaves the pool.
    pub fn replace(&self, old: &str, new_path: String, dev: Arc<dyn Device>) -> Result<()> {
        self.config_op(|s| {
            crate::checkpoint::refuse_layout_change(s)?;
            let (top, old_leaf) = find_leaf(s, old)?;
            check_leaf_size(&top, &dev)?;
            let mut cfg = top.config();
            let child = cfg
                .children
                .iter_mut()
                .find(|c| c.slot_leaves().any(|l| l.guid == old_leaf.guid))
                .ok_or_else(|| invalid(format!("{old} is not in a slot")))?;
            if child.slot_leaves().any(|l| l.role == LeafRole::Replacing) {
                return Err(invalid(format!("{old} is already being replaced")));
            }
            let leaf = joining_leaf(s, new_path, dev, LeafRole::Replacing);
            child.joined.push(leaf_config(&leaf));
            swap_top(s, &top, cfg, std::slice::from_ref(&leaf))?;
            Ok(top.is_log())
        })
        .and_then(|log| self.settle_log_joiner(log))?;
        self.resilver_if_needed()?;
        Ok(())
    }

    /// `pool detach`: removes a mirror side, a replacing leaf (cancelling
    /// the replacement) or an in-use spare (which returns to the spares).
    pub fn detach(&self, path: &str) -> Result<()> {
        self.config_op(|s| {
            crate::checkpoint::refuse_layout_change(s)?;
            let (top, leaf) = find_leaf(s, path)?;
            let mut cfg = top.config();
            let slot_index = cfg
                .children
                .iter()
                .position(|c| c.slot_leaves().any(|l| l.guid == leaf.guid))
                .ok_or_else(|| invalid(format!("{path} is not in a slot")))?;
            let slot_len = cfg.children.get(slot_index).map_or(0, |c| c.joined.len() + 1);
            if slot_len == 1 && !matches!(top.kind(), TopKind::Mirror) {
                return Err(invalid(format!("cannot detach {path}: only mirror sides, replacing devices and spares can be detached")));
            }
            if !survives_without(&top, leaf.guid) {
                return Err(invalid(format!("cannot detach {path}: no valid replicas")));
            }
            if slot_len == 1 {
                cfg.children.remove(slot_index);
                if cfg.children.len() == 1 {
                    cfg.kind = TopKind::Disk;
                }
            } else if let Some(child) = cfg.children.get_mut(slot_index) {
                let mut leaves: Vec<LeafConfig> = child.slot_leaves().filter(|l| l.guid != leaf.guid).cloned().collect();
                let mut primary = leaves.remove(0);
                primary.joined = leaves;
                if primary.role == LeafRole::Replacing || (primary.role == LeafRole::Spare && primary.joined.is_empty()) {
                    primary.role = LeafRole::Primary;
                }
                *child = primary;
            }
            swap_top(s, &top, cfg, &[])?;
            if leaf.role() == LeafRole::Spare {
                s.spares.lock().push(leaf);
            } else if let (true, Some(dev)) = (leaf.usable(), leaf.device()) {
                let _ = tarn_vdev::clear_labels(dev.as_ref());
            }
            Ok(())
        })
    }

    /// A leaf joined a log vdev: log blocks written before it joined are
    /// not on it, and a resilver (which walks the block tree) never puts
    /// them there. One txg retires every record they hold, so none depends
    /// on them by the time the leaf may stand alone (a replacement done).
    fn settle_log_joiner(&self, log: bool) -> Result<()> {
        if log {
            crate::pool::sync_and_wait(&self.shared)?;
        }
        Ok(())
    }

    /// `pool add`: a new top-level vdev (its space is usable at once).
    pub fn add_vdev(&self, kind: TopKind, devs: Vec<(String, Arc<dyn Device>)>) -> Result<()> {
        self.add_top_vdev(kind, devs, TopClass::Normal)
    }

    /// A new top-level vdev of `class` (the next id).
    pub(crate) fn add_top_vdev(&self, kind: TopKind, devs: Vec<(String, Arc<dyn Device>)>, class: TopClass) -> Result<()> {
        self.config_op(|s| {
            let ashift = s.io.tops().first().map_or(12, |t| t.sector().trailing_zeros() as u8);
            let sizes: Vec<u64> = devs.iter().map(|(_, d)| d.size()).collect();
            let asize = TopVdev::compute_asize(&kind, ashift, &sizes)?;
            let id = s.io.tops().len() as u32;
            let children: Vec<LeafConfig> = devs.iter().map(|(p, _)| LeafConfig::new(new_guid(), p.clone())).collect();
            let cfg = TopConfig { id, guid: new_guid(), kind, ashift, asize, children, class };
            let top = TopVdev::new(cfg, devs.into_iter().map(|(_, d)| Some(d)).collect())?;
            s.io.add_top(Arc::new(top));
            Ok(())
        })
    }

    /// `pool add spare`.
    pub fn add_spare(&self, path: String, dev: Arc<dyn Device>) -> Result<()> {
        self.config_op(|s| {
            if s.spares.lock().iter().any(|l| l.path == path) {
                return Err(invalid(format!("{path} is already a spare")));
            }
            let leaf = Arc::new(LeafVdev::new(new_guid(), path, Some(dev)));
            leaf.set_role(LeafRole::Spare);
            s.spares.lock().push(leaf);
            Ok(())
        })
    }

    /// `pool remove` of an available spare.
    pub fn remove_spare(&self, path: &str) -> Result<()> {
        self.config_op(|s| {
            crate::checkpoint::refuse_layout_change(s)?;
            let mut spares = s.spares.lock();
            let i = spares.iter().position(|l| l.path == path).ok_or_else(|| {
                invalid(format!("{path} is not an available spare (a spare in use is detached with `pool detach`)"))
            })?;
            let leaf = spares.remove(i);
            if let Some(dev) = leaf.device() {
                let _ = tarn_vdev::clear_labels(dev.as_ref());
            }
            Ok(())
        })
    }

    /// Available spares (not in use).
    pub fn spares(&self) -> Vec<LeafStatus> {
        self.shared.spares.lock().iter().map(|l| l.status()).collect()
    }

    /// Puts an available spare in for a failed leaf and resilvers it.
    /// Returns the spare's path, or None if no spare fits.
    pub fn activate_spare(&self, failed: &str) -> Result<Option<String>> {
        // Cheap checks first: the monitor asks every pass while a device is down.
        {
            let s = &self.shared;
            if s.readonly || !s.spares.lock().iter().any(|l| l.usable()) {
                return Ok(None);
            }
            // A spare taking over is a replace: not while a checkpoint
            // exists (as in zpool; the monitor asks again after a discard).
            if crate::checkpoint::refuse_layout_change(s).is_err() {
                return Ok(None);
            }
            let (top, leaf) = find_leaf(s, failed)?;
            let covered = top.slots().iter().any(|slot| slot.iter().any(|l| l.guid == leaf.guid) && slot.len() > 1);
            if leaf.usable() || covered {
                return Ok(None);
            }
        }
        let used = self.config_op(|s| {
            let (top, leaf) = find_leaf(s, failed)?;
            if leaf.usable() {
                return Ok(None);
            }
            let mut cfg = top.config();
            let Some(child) = cfg.children.iter_mut().find(|c| c.slot_leaves().any(|l| l.guid == leaf.guid)) else {
                return Ok(None);
            };
            if child.slot_leaves().any(|l| l.role != LeafRole::Primary) {
                return Ok(None); // already covered or being replaced
            }
            let spare = {
                let mut spares = s.spares.lock();
                let need = TopVdev::leaf_size_needed(&top.config());
                let Some(i) = spares.iter().position(|l| l.usable() && l.data_size() >= need) else { return Ok(None) };
                spares.remove(i)
            };
            let synced = s.synced_txg.load(Ordering::Acquire);
            spare.fill_dtl(1, synced.max(1));
            spare.set_role(LeafRole::Spare);
            child.joined.push(leaf_config(&spare));
            swap_top(s, &top, cfg, std::slice::from_ref(&spare))?;
            Ok(Some(spare.path.clone()))
        })?;
        if used.is_some() {
            self.resilver_if_needed()?;
        }
        Ok(used)
    }

    /// `pool clear`: resets error counters; FAULTED and REMOVED leaves are
    /// reopened (through `reopen`, which opens the path and checks the
    /// label) and resilvered.
    pub fn clear(&self, device: Option<&str>, reopen: &dyn Fn(&LeafStatus) -> Option<Arc<dyn Device>>) -> Result<()> {
        let s = &self.shared;
        s.io.data_errors.store(0, Ordering::Relaxed);
        let mut reopened = false;
        // Under the sync lock: a device comes back between txgs, never in
        // the middle of one.
        let guard = s.sync_lock.lock();
        for leaf in s.io.tops().iter().flat_map(|t| t.leaves()) {
            if device.is_some_and(|d| d != leaf.path && d != leaf.guid.to_string()) {
                continue;
            }
            if !leaf.usable() && !leaf.is_offline() {
                if let Some(dev) = reopen(&leaf.status()) {
                    leaf.reopen(dev);
                    reopened = true;
                }
            }
            leaf.clear_errors();
        }
        drop(guard);
        if let Some(st) = s.scanner.stats.lock().as_mut() {
            if st.phase != ScanPhase::Scanning {
                st.errors = 0;
                st.damaged.clear();
            }
        }
        if !s.readonly && !s.suspended.is_set() {
            let _g = s.sync_lock.lock();
            write_labels(s, None)?;
        }
        if reopened || !s.readonly {
            self.resilver_if_needed()?;
        }
        Ok(())
    }

    /// Probes every leaf in service with a small read, so a device that
    /// vanished while idle is noticed (and faulted) promptly.
    pub fn probe_devices(&self) {
        for leaf in self.shared.io.tops().iter().flat_map(|t| t.leaves()) {
            if leaf.usable() {
                let _ = leaf.probe();
            }
        }
        let spares = self.shared.spares.lock().clone();
        for leaf in spares.into_iter().chain(self.shared.l2.leaves()) {
            if leaf.usable() {
                let _ = leaf.probe();
            }
        }
    }
}
