//! A leaf vdev: one device, its health, its error counters and its dirty
//! time log.
//!
//! Health as users know it from ZFS: ONLINE; FAULTED after repeated I/O
//! errors; REMOVED when the device itself went away (deleted file, pulled
//! disk, dead FUSE backend); OFFLINE by the administrator; UNAVAIL when it
//! could not be opened. A leaf that is not ONLINE gets no I/O at all: reads
//! go to the other copies, and every txg written while it is away is
//! recorded in its dirty time log (DTL), so that when it returns only those
//! txgs are resilvered. FAULTED and REMOVED are sticky until `clear`,
//! `online` or `replace`.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use tarn_dev::{DevError, Device};

use crate::config::{LeafConfig, LeafRole};
use crate::gather::Gather;
use crate::iostat::{CountedDevice, IoCounters, IoStats};
use crate::{data_region_size, Result, VdevError, DATA_START};

/// A leaf is FAULTED after this many consecutive failed operations (any
/// success resets the run).
const FAULT_AFTER_CONSECUTIVE_ERRORS: u64 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DevState {
    Online,
    Degraded,
    Faulted,
    Offline,
    Removed,
    Unavail,
}

impl DevState {
    /// Whether a child in this state can currently serve I/O.
    pub fn usable(self) -> bool {
        matches!(self, DevState::Online | DevState::Degraded)
    }

    /// The upper-case word `zpool status` prints.
    pub fn word(self) -> &'static str {
        match self {
            DevState::Online => "ONLINE",
            DevState::Degraded => "DEGRADED",
            DevState::Faulted => "FAULTED",
            DevState::Offline => "OFFLINE",
            DevState::Removed => "REMOVED",
            DevState::Unavail => "UNAVAIL",
        }
    }
}

const H_ONLINE: u8 = 0;
const H_FAULTED: u8 = 1;
const H_REMOVED: u8 = 2;
const H_OFFLINE: u8 = 3;

/// Txg ranges `[first, last]` (inclusive, sorted, disjoint, not adjacent).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dtl(pub Vec<(u64, u64)>);

impl Dtl {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, txg: u64) -> bool {
        let i = self.0.partition_point(|&(_, last)| last < txg);
        self.0.get(i).is_some_and(|&(first, _)| first <= txg)
    }

    pub fn add(&mut self, txg: u64) {
        self.add_range(txg, txg);
    }

    pub fn add_range(&mut self, first: u64, last: u64) {
        if first > last {
            return;
        }
        let (mut lo, mut hi) = (first, last);
        let mut out = Vec::with_capacity(self.0.len() + 1);
        for &(a, b) in &self.0 {
            if b.saturating_add(1) < lo || hi.saturating_add(1) < a {
                out.push((a, b));
            } else {
                lo = lo.min(a);
                hi = hi.max(b);
            }
        }
        out.push((lo, hi));
        out.sort_unstable();
        self.0 = out;
    }

    /// Removes every txg of `other`.
    pub fn subtract(&mut self, other: &Dtl) {
        let mut cur = std::mem::take(&mut self.0);
        for &(a, b) in &other.0 {
            let mut next = Vec::with_capacity(cur.len() + 1);
            for (x, y) in cur {
                if y < a || x > b {
                    next.push((x, y));
                    continue;
                }
                if x < a {
                    next.push((x, a - 1));
                }
                if y > b {
                    next.push((b + 1, y));
                }
            }
            cur = next;
        }
        self.0 = cur;
    }

    pub fn min(&self) -> Option<u64> {
        self.0.first().map(|r| r.0)
    }

    /// Whether any txg in `[first, last]` is in the log.
    pub fn overlaps(&self, first: u64, last: u64) -> bool {
        let i = self.0.partition_point(|&(_, b)| b < first);
        self.0.get(i).is_some_and(|&(a, _)| a <= last)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LeafStatus {
    pub path: String,
    pub guid: u64,
    pub state: DevState,
    pub role: LeafRole,
    pub read_errors: u64,
    pub write_errors: u64,
    pub checksum_errors: u64,
    /// Txg ranges this leaf still lacks (resilver pending or running).
    pub dtl: Vec<(u64, u64)>,
    /// Why it is not ONLINE, when it is not.
    pub reason: Option<String>,
    /// I/O statistics since the leaf was opened (`zpool iostat`).
    #[serde(default)]
    pub io: IoCounters,
    /// Size of the device in bytes (0 when missing).
    #[serde(default)]
    pub size: u64,
}

pub struct LeafVdev {
    pub guid: u64,
    pub path: String,
    role: AtomicU8,
    device: RwLock<Option<Arc<dyn Device>>>,
    health: AtomicU8,
    reason: Mutex<Option<String>>,
    read_errors: AtomicU64,
    write_errors: AtomicU64,
    checksum_errors: AtomicU64,
    consecutive_errors: AtomicU64,
    dtl: Mutex<Dtl>,
    /// Times the leaf left service or missed a write (see [`LeafVdev::mark`]).
    outages: AtomicU64,
    /// The DTL changed in a way the labels do not record yet.
    dtl_dirty: std::sync::atomic::AtomicBool,
    /// Operations, bytes and time of the I/O issued to the device.
    stats: Arc<IoStats>,
    /// Writes kept while a txg is written out (gather.rs).
    gather: Gather,
}

fn role_code(r: LeafRole) -> u8 {
    match r {
        LeafRole::Primary => 0,
        LeafRole::Replacing => 1,
        LeafRole::Spare => 2,
    }
}

impl LeafVdev {
    pub fn new(guid: u64, path: String, device: Option<Arc<dyn Device>>) -> LeafVdev {
        LeafVdev {
            guid,
            path,
            role: AtomicU8::new(0),
            device: RwLock::new(device),
            health: AtomicU8::new(H_ONLINE),
            reason: Mutex::new(None),
            read_errors: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            checksum_errors: AtomicU64::new(0),
            consecutive_errors: AtomicU64::new(0),
            dtl: Mutex::new(Dtl::default()),
            outages: AtomicU64::new(0),
            dtl_dirty: std::sync::atomic::AtomicBool::new(false),
            stats: Arc::new(IoStats::default()),
            gather: Gather::default(),
        }
    }

    /// A leaf as its config describes it (offline flag, DTL, role). An open
    /// DTL range (`last == u64::MAX`) is closed at `newest_txg`.
    pub fn from_config(cfg: &LeafConfig, device: Option<Arc<dyn Device>>, newest_txg: u64) -> LeafVdev {
        let leaf = LeafVdev::new(cfg.guid, cfg.path.clone(), device);
        leaf.set_role(cfg.role);
        if cfg.offline {
            leaf.health.store(H_OFFLINE, Ordering::Relaxed);
        }
        let mut dtl = Dtl::default();
        for &(a, b) in &cfg.dtl {
            dtl.add_range(a, b.min(newest_txg.max(a)));
        }
        *leaf.dtl.lock() = dtl;
        leaf
    }

    pub fn role(&self) -> LeafRole {
        match self.role.load(Ordering::Relaxed) {
            1 => LeafRole::Replacing,
            2 => LeafRole::Spare,
            _ => LeafRole::Primary,
        }
    }

    pub fn set_role(&self, r: LeafRole) {
        self.role.store(role_code(r), Ordering::Relaxed);
    }

    /// The device, its reads and writes counted in this leaf's statistics
    /// (labels and uberblocks are written through it).
    pub fn device(&self) -> Option<Arc<dyn Device>> {
        let raw = self.device.read().clone()?;
        Some(Arc::new(CountedDevice::new(raw, self.stats.clone())))
    }

    /// The I/O statistics since the leaf was opened.
    pub fn io_counters(&self) -> IoCounters {
        self.stats.counters()
    }

    /// Puts a (re)opened device in place and brings the leaf ONLINE.
    pub fn reopen(&self, device: Arc<dyn Device>) {
        // Gathered writes go to the device they were made for (or, if it
        // fails them, into the DTL).
        self.drain_gather();
        self.outages.fetch_add(1, Ordering::Relaxed);
        *self.device.write() = Some(device);
        self.consecutive_errors.store(0, Ordering::Relaxed);
        self.health.store(H_ONLINE, Ordering::Relaxed);
        *self.reason.lock() = None;
    }

    /// Lets go of the device (export): its lock is released even while
    /// other holders of the pool linger.
    pub fn close(&self) {
        self.drain_gather();
        *self.device.write() = None;
    }

    pub fn state(&self) -> DevState {
        if self.device.read().is_none() {
            return DevState::Unavail;
        }
        match self.health.load(Ordering::Relaxed) {
            H_FAULTED => DevState::Faulted,
            H_REMOVED => DevState::Removed,
            H_OFFLINE => DevState::Offline,
            _ => DevState::Online,
        }
    }

    pub fn usable(&self) -> bool {
        self.state() == DevState::Online
    }

    /// Whether this leaf holds a current copy of what was written in `birth`.
    pub fn has(&self, birth: u64) -> bool {
        self.usable() && !self.dtl.lock().contains(birth)
    }

    /// Changes whenever the leaf leaves service or fails a write: a
    /// resilver may forget a leaf's DTL only if its mark is the same at
    /// the end as at the start.
    pub fn mark(&self) -> u64 {
        self.outages.load(Ordering::Relaxed)
    }

    /// Adds `[first, last]` to the DTL (a leaf joining the pool lacks
    /// everything synced so far).
    pub fn fill_dtl(&self, first: u64, last: u64) {
        self.dtl.lock().add_range(first, last);
        self.dtl_dirty.store(true, Ordering::Relaxed);
    }

    pub fn set_offline(&self, offline: bool) {
        if offline {
            self.drain_gather();
            self.outages.fetch_add(1, Ordering::Relaxed);
            self.health.store(H_OFFLINE, Ordering::Relaxed);
            *self.reason.lock() = Some("taken offline by the administrator".into());
        } else if self.health.load(Ordering::Relaxed) == H_OFFLINE {
            self.health.store(H_ONLINE, Ordering::Relaxed);
            *self.reason.lock() = None;
        }
        self.dtl_dirty.store(true, Ordering::Relaxed);
    }

    pub fn is_offline(&self) -> bool {
        self.health.load(Ordering::Relaxed) == H_OFFLINE
    }

    /// Marks the leaf FAULTED (administrator or diagnosis).
    pub fn fault(&self, reason: &str) {
        if self.health.load(Ordering::Relaxed) == H_ONLINE {
            self.outages.fetch_add(1, Ordering::Relaxed);
            self.health.store(H_FAULTED, Ordering::Relaxed);
            *self.reason.lock() = Some(reason.to_string());
            self.dtl_dirty.store(true, Ordering::Relaxed);
        }
    }

    pub fn read_errors(&self) -> u64 {
        self.read_errors.load(Ordering::Relaxed)
    }
    pub fn write_errors(&self) -> u64 {
        self.write_errors.load(Ordering::Relaxed)
    }
    pub fn checksum_errors(&self) -> u64 {
        self.checksum_errors.load(Ordering::Relaxed)
    }

    pub fn dtl(&self) -> Dtl {
        self.dtl.lock().clone()
    }

    /// The DTL as labels record it: while the leaf is away its last range
    /// is open-ended, so the labels need rewriting only when it changes
    /// state, not at every txg it misses.
    pub fn dtl_for_config(&self) -> Vec<(u64, u64)> {
        let mut ranges = self.dtl.lock().0.clone();
        if !self.usable() {
            if let Some(last) = ranges.last_mut() {
                last.1 = u64::MAX;
            }
        }
        ranges
    }

    /// Records that the write of `txg` did not reach this leaf.
    pub fn note_missed(&self, txg: u64) {
        // Monotonic (unlike the error counters, which `clear` resets).
        self.outages.fetch_add(1, Ordering::Relaxed);
        let mut d = self.dtl.lock();
        if d.contains(txg) {
            return;
        }
        let extends_open_range = !self.usable() && d.0.last().is_some_and(|r| r.1.saturating_add(1) >= txg);
        d.add(txg);
        if !extends_open_range {
            self.dtl_dirty.store(true, Ordering::Relaxed);
        }
    }

    /// Forgets `done` (resilvered) from the DTL.
    pub fn dtl_resilvered(&self, done: &Dtl) {
        self.dtl.lock().subtract(done);
        self.dtl_dirty.store(true, Ordering::Relaxed);
    }

    /// Whether the labels need rewriting for this leaf (and clears the flag).
    pub fn take_dtl_dirty(&self) -> bool {
        self.dtl_dirty.swap(false, Ordering::Relaxed)
    }

    pub fn status(&self) -> LeafStatus {
        LeafStatus {
            path: self.path.clone(),
            guid: self.guid,
            state: self.state(),
            role: self.role(),
            read_errors: self.read_errors(),
            write_errors: self.write_errors(),
            checksum_errors: self.checksum_errors(),
            dtl: self.dtl.lock().0.clone(),
            reason: if self.device.read().is_none() {
                Some("cannot open".into())
            } else {
                self.reason.lock().clone()
            },
            io: self.stats.counters(),
            size: self.device.read().as_ref().map_or(0, |d| d.size()),
        }
    }

    /// Resets the error counters; a FAULTED or REMOVED leaf whose device
    /// is present is tried again (OFFLINE stays offline).
    pub fn clear_errors(&self) {
        for counter in [&self.read_errors, &self.write_errors, &self.checksum_errors, &self.consecutive_errors] {
            counter.store(0, Ordering::Relaxed);
        }
        if matches!(self.health.load(Ordering::Relaxed), H_FAULTED | H_REMOVED) {
            self.health.store(H_ONLINE, Ordering::Relaxed);
            *self.reason.lock() = None;
            self.dtl_dirty.store(true, Ordering::Relaxed);
        }
    }

    /// Data-region bytes of this leaf (0 when missing).
    pub fn data_size(&self) -> u64 {
        self.device.read().as_ref().map_or(0, |d| data_region_size(d.size()))
    }

    pub(crate) fn note_checksum_error(&self) {
        self.checksum_errors.fetch_add(1, Ordering::Relaxed);
    }

    fn dev(&self) -> Result<Arc<dyn Device>> {
        if !self.usable() {
            return Err(VdevError::Dev(DevError::Open {
                path: self.path.clone(),
                reason: format!("device is {}", self.state().word()),
            }));
        }
        self.device.read().clone().ok_or_else(|| {
            VdevError::Dev(DevError::Open { path: self.path.clone(), reason: "device is missing".into() })
        })
    }

    fn check(&self, offset: u64, len: usize) -> Result<u64> {
        let size = self.data_size();
        match offset.checked_add(len as u64) {
            Some(end) if end <= size => Ok(DATA_START + offset),
            _ => Err(VdevError::Invalid(format!(
                "{}: access [{offset}, +{len}) is past the data region ({size} bytes)",
                self.path
            ))),
        }
    }

    /// Counts a device error and decides whether the leaf must leave service.
    fn account<T>(&self, counter: &AtomicU64, result: Result<T>) -> Result<T> {
        match &result {
            Ok(_) => self.consecutive_errors.store(0, Ordering::Relaxed),
            Err(VdevError::Dev(e)) => {
                counter.fetch_add(1, Ordering::Relaxed);
                let run = self.consecutive_errors.fetch_add(1, Ordering::Relaxed) + 1;
                if e.is_gone() {
                    if self.health.swap(H_REMOVED, Ordering::Relaxed) == H_ONLINE {
                        self.outages.fetch_add(1, Ordering::Relaxed);
                        *self.reason.lock() = Some(format!("device went away: {e}"));
                        self.dtl_dirty.store(true, Ordering::Relaxed);
                    }
                } else if run >= FAULT_AFTER_CONSECUTIVE_ERRORS {
                    self.fault(&format!("too many I/O errors (last: {e})"));
                }
            }
            // Bounds errors are the caller's bug, not the device's health.
            Err(_) => {}
        }
        result
    }

    /// Reads at `offset` of the data region; failures count as read errors.
    pub(crate) fn read(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let dev = self.dev()?;
        let result = self.check(offset, buf.len()).and_then(|at| {
            self.settle(at, buf.len() as u64);
            Ok(self.stats.read(&*dev, buf, at)?)
        });
        self.account(&self.read_errors, result)
    }

    pub(crate) fn read_vec(&self, len: usize, offset: u64) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.read(&mut buf, offset)?;
        Ok(buf)
    }

    /// Writes at `offset` of the data region for txg `txg`; failures count
    /// as write errors, and a write that does not happen (failed, or the
    /// leaf is out of service) is recorded in the DTL.
    pub(crate) fn write(&self, buf: &[u8], offset: u64, txg: u64) -> Result<()> {
        self.write_as(buf, offset, txg, false)
    }

    /// As [`LeafVdev::write`]; `durable`: returns once these bytes are
    /// durable (`Device::write_durable_at`), with no flush of the rest.
    pub(crate) fn write_as(&self, buf: &[u8], offset: u64, txg: u64, durable: bool) -> Result<()> {
        let result = self.dev().and_then(|dev| {
            let r = self.check(offset, buf.len()).and_then(|at| {
                self.settle(at, buf.len() as u64);
                Ok(self.stats.write_as(&*dev, buf, at, durable)?)
            });
            self.account(&self.write_errors, r)
        });
        if result.is_err() {
            self.note_missed(txg);
        }
        result
    }

    /// As [`LeafVdev::write`], but kept with the other writes of the txg
    /// being written and sent in runs (gather.rs): on the device by the
    /// leaf's next flush, read back as written before that.
    pub(crate) fn write_gathered(&self, buf: &[u8], offset: u64, txg: u64) -> Result<()> {
        let at = match self.dev().and_then(|_| self.check(offset, buf.len())) {
            Ok(at) => at,
            Err(e) => {
                self.note_missed(txg);
                return Err(e);
            }
        };
        loop {
            match self.gather.add(at, buf, txg) {
                Some(full) => {
                    if full {
                        self.drain_gather();
                    }
                    return Ok(());
                }
                // Overlaps a gathered write: that one goes first.
                None => {
                    self.drain_gather();
                }
            }
        }
    }

    /// Writes out gathered writes overlapping `[at, at + len)` (device
    /// offsets) before an access to that range.
    fn settle(&self, at: u64, len: u64) {
        if self.gather.overlaps(at, len) {
            self.drain_gather();
        }
    }

    /// Writes out every gathered write. A run that fails counts a write
    /// error and puts its txgs in the DTL (the leaf's next flush then
    /// fails).
    pub(crate) fn drain_gather(&self) {
        let dev = self.dev().ok();
        let failed = self.gather.drain(dev.as_deref(), &self.stats);
        for f in failed {
            if dev.is_some() {
                let _ = self.account(&self.write_errors, Err::<(), _>(VdevError::Dev(f.error)));
            }
            let mut txgs = f.txgs;
            txgs.sort_unstable();
            txgs.dedup();
            for t in txgs {
                self.note_missed(t);
            }
        }
    }

    /// Reads at `offset` of the data region of a cache device (L2ARC);
    /// failures count as read errors.
    pub fn cache_read(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.read(buf, offset)
    }

    /// Writes at `offset` of the data region of a cache device: failures
    /// count as write errors; no DTL (a cache device holds no pool data).
    pub fn cache_write(&self, buf: &[u8], offset: u64) -> Result<()> {
        let dev = self.dev()?;
        let result = self.check(offset, buf.len()).and_then(|at| Ok(self.stats.write(&*dev, buf, at)?));
        self.account(&self.write_errors, result)
    }

    /// Flushes a cache device.
    pub fn cache_flush(&self) -> Result<()> {
        self.flush()
    }

    /// Writes out the gathered writes, then flushes. Fails if a gathered
    /// write failed since the last flush (its txgs are in the DTL).
    pub(crate) fn flush(&self) -> Result<()> {
        self.drain_gather();
        let dev = self.dev()?;
        let result = dev.flush().map_err(VdevError::from);
        let result = self.account(&self.write_errors, result);
        match self.gather.finish() {
            Some(why) if result.is_ok() => Err(VdevError::Invalid(format!("{}: a gathered write failed: {why}", self.path))),
            _ => result,
        }
    }

    /// Tells the device that `[offset, offset + len)` of the data region
    /// holds nothing (a hole punch or a discard). Errors are returned but
    /// not counted against the leaf's health: trim is a hint, and a device
    /// that cannot do it still serves reads and writes.
    pub fn trim(&self, offset: u64, len: u64) -> Result<()> {
        let dev = self.dev()?;
        let at = self.check(offset, usize::try_from(len).unwrap_or(usize::MAX))?;
        self.settle(at, len);
        Ok(dev.trim(at, len)?)
    }

    /// A cheap health probe (one label sector read), so a device that
    /// vanished while idle is noticed without waiting for pool I/O.
    pub fn probe(&self) -> Result<()> {
        let dev = self.dev()?;
        let mut buf = [0u8; 512];
        let result = dev.read_at(&mut buf, 0).map_err(VdevError::from);
        self.account(&self.read_errors, result)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::Dtl;

    #[test]
    fn dtl_ranges() {
        let mut d = Dtl::default();
        for t in [5, 6, 7, 10, 3] {
            d.add(t);
        }
        assert_eq!(d.0, vec![(3, 3), (5, 7), (10, 10)]);
        d.add(4);
        assert_eq!(d.0, vec![(3, 7), (10, 10)]);
        assert!(d.contains(3) && d.contains(7) && d.contains(10) && !d.contains(8) && !d.contains(11));
        assert!(d.overlaps(8, 10) && !d.overlaps(8, 9));
        let mut e = d.clone();
        e.subtract(&Dtl(vec![(5, 5), (10, 20)]));
        assert_eq!(e.0, vec![(3, 4), (6, 7)]);
        d.add_range(1, u64::MAX);
        assert_eq!(d.0, vec![(1, u64::MAX)]);
    }
}
