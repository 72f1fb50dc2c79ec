//! Trim: telling the devices which of their space holds nothing, so a
//! sparse file vdev gives the space back to its file system (hole punch)
//! and an SSD or thin volume can erase or unmap it (discard).
//!
//! Big theory:
//! - Only the allocator's free tree is ever trimmed. Space in the defer
//!   window (recently freed blocks that `import -F` may still need), space
//!   a checkpoint holds, allocated space and space a scan may still read
//!   (a scan reads only live blocks; freed space reaches the free tree only
//!   through `release_deferred`, which takes the reader gate exclusively)
//!   are not in it; labels and uberblock rings are outside the vdevs'
//!   address spaces altogether.
//! - A piece of free space is taken out of the free tree for as long as
//!   its trim is in flight (`Allocator::begin_trim`/`end_trim`), so nothing
//!   is allocated and written there while the device is told it is empty.
//!   A trim in flight is free on disk: a condensed space map, a crash or an
//!   export loses nothing. In-flight bytes are capped well below the slop
//!   the write throttle keeps free, so a txg never runs out of space
//!   because of a trim.
//! - Manual trim (`pool trim`): one background thread walks each top-level
//!   vdev's address space in order, trimming the free pieces of at least
//!   `TRIM_EXTENT_MIN` bytes (as ZFS, smaller fragments are not worth a
//!   command) in chunks, on the leaves asked for, throttled by `-r`. Each
//!   leaf's state (active, suspended, canceled, complete), position and
//!   counters are kept in MOS object 5 (JSON), saved at every change of
//!   state and every few seconds, so export or a crash resumes it.
//! - Autotrim (`autotrim=on`): extents leaving the defer window are queued
//!   by the allocator; a background thread takes the queue every
//!   `AUTOTRIM_INTERVAL`, merges neighbours and trims what is still free,
//!   in the same way (batched: one command per merged range and leaf, not
//!   one per freed block).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tarn_block::Extent;

use crate::pool::Shared;
use crate::{ObjError, ObjPool, ObjType, ObjectId, ObjectSet, Result, BONUS_LEN};

/// MOS object holding the trim state (length-prefixed JSON).
pub const MOS_TRIM_STATE: ObjectId = ObjectId(5);
const OT_TRIM_STATE: u8 = 43;
/// Free pieces smaller than this are not trimmed.
pub const TRIM_EXTENT_MIN: u64 = 32 << 10;
/// Largest range trimmed by one command per leaf.
const CHUNK_MAX: u64 = 8 << 20;
/// How often autotrim takes what left the defer window.
const AUTOTRIM_INTERVAL: Duration = Duration::from_millis(500);
/// How often a running manual trim saves its position.
const SAVE_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrimState {
    Active,
    Suspended,
    Canceled,
    Complete,
}

/// One leaf's manual trim (`pool status` shows it beside the device).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LeafTrim {
    pub guid: u64,
    pub path: String,
    pub top: u32,
    pub state: TrimState,
    /// Unix seconds: when it started, was suspended, or completed.
    pub action_time: u64,
    /// Everything of the top-level vdev's address space below this has
    /// been trimmed in this pass.
    pub offset: u64,
    /// Size of the top-level vdev's address space.
    pub asize: u64,
    /// Bytes trimmed on this leaf in this pass.
    pub bytes_done: u64,
    /// Bytes per second (0: as fast as the device goes).
    pub rate: u64,
}

impl LeafTrim {
    pub fn percent(&self) -> u64 {
        if self.state == TrimState::Complete {
            return 100;
        }
        (self.offset.min(self.asize) as u128 * 100 / self.asize.max(1) as u128) as u64
    }
}

#[derive(Default)]
pub(crate) struct Trimmer {
    leaves: Mutex<Vec<LeafTrim>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    running: AtomicBool,
    /// Export or shutdown: stop, keeping the state for a resume.
    stop: AtomicBool,
    /// Serializes start, cancel and suspend.
    op: Mutex<()>,
    autotrim: Mutex<Option<std::thread::JoinHandle<()>>>,
    autotrim_on: AtomicBool,
    /// Bytes autotrim trimmed on leaves since import.
    autotrim_bytes: AtomicU64,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn mos(s: &Arc<Shared>) -> ObjectSet {
    ObjectSet { shared: s.clone(), inner: s.mos.clone() }
}

/// In-flight trim bytes per trimmer: an eighth of the slop the write
/// throttle keeps free (max(pool/32, 1 MiB)), at most `CHUNK_MAX`.
fn chunk_cap(s: &Shared) -> u64 {
    let total = s.io.alloc.lock().total_bytes();
    (total / 32).max(1 << 20).div_ceil(8).clamp(64 << 10, CHUNK_MAX)
}

fn load(s: &Arc<Shared>) -> Option<Vec<LeafTrim>> {
    let m = mos(s);
    let info = m.info(MOS_TRIM_STATE).ok()?;
    let mut len = [0u8; 8];
    m.read(MOS_TRIM_STATE, 0, &mut len).ok()?;
    let len = u64::from_le_bytes(len);
    if len == 0 || len > info.length.saturating_sub(8) || len > 16 << 20 {
        return None;
    }
    let mut json = vec![0u8; len as usize];
    m.read(MOS_TRIM_STATE, 8, &mut json).ok()?;
    serde_json::from_slice(&json).ok()
}

/// Writes the trim state in the open txg.
fn save(s: &Arc<Shared>) -> Result<()> {
    if s.readonly || s.suspended.is_set() {
        return Ok(());
    }
    let leaves = s.trim.leaves.lock().clone();
    let json = serde_json::to_vec(&leaves).map_err(|e| ObjError::Invalid(e.to_string()))?;
    let mut data = (json.len() as u64).to_le_bytes().to_vec();
    data.extend_from_slice(&json);
    let tx = crate::pool::begin_tx(s);
    let m = mos(s);
    if m.info(MOS_TRIM_STATE).is_err() {
        m.create_with_id(&tx, MOS_TRIM_STATE, ObjType(OT_TRIM_STATE), 16384, &[0; BONUS_LEN])?;
    }
    m.free_range(&tx, MOS_TRIM_STATE, 0, None)?;
    m.write(&tx, MOS_TRIM_STATE, 0, &data)
}

/// After import: a manual trim that was active goes on where it was.
pub(crate) fn resume(s: &Arc<Shared>) {
    let Some(mut leaves) = load(s) else { return };
    let present: Vec<u64> = s.io.tops().iter().flat_map(|t| t.leaves()).map(|l| l.guid).collect();
    leaves.retain(|l| present.contains(&l.guid));
    let active = leaves.iter().any(|l| l.state == TrimState::Active);
    *s.trim.leaves.lock() = leaves;
    if active {
        spawn(s);
    }
}

/// Export or shutdown: stops both trimmers (the manual trim's state is
/// saved for a resume).
pub(crate) fn stop(s: &Shared) {
    s.trim.stop.store(true, Ordering::Relaxed);
    s.trim.autotrim_on.store(false, Ordering::Relaxed);
    let threads = [s.trim.thread.lock().take(), s.trim.autotrim.lock().take()];
    for t in threads.into_iter().flatten() {
        let _ = t.join();
    }
}

fn spawn(s: &Arc<Shared>) {
    if s.trim.running.swap(true, Ordering::AcqRel) {
        return;
    }
    if let Some(t) = s.trim.thread.lock().take() {
        let _ = t.join();
    }
    let weak = Arc::downgrade(s);
    match std::thread::Builder::new().name("tarn-trim".into()).spawn(move || run(weak)) {
        Ok(h) => *s.trim.thread.lock() = Some(h),
        Err(_) => s.trim.running.store(false, Ordering::Release),
    }
}

/// Takes the free pieces of `[start, start + len)` of top `top` out of the
/// free tree, trims them on the leaves in `only` (all, if None), and puts
/// them back. Returns the bytes trimmed per leaf.
fn trim_range(s: &Shared, top: u32, start: u64, len: u64, only: Option<&[u64]>) -> Vec<(u64, u64)> {
    let Some(vdev) = s.io.tops().get(top as usize).cloned() else { return vec![] };
    let pieces = s.io.alloc.lock().begin_trim(top, start, len, TRIM_EXTENT_MIN);
    let mut done: Vec<(u64, u64)> = Vec::new();
    for &(offset, piece) in &pieces {
        let (per_leaf, error) = vdev.trim(offset, piece, only);
        if let Some(e) = error {
            eprintln!("tarn: trim of [{offset}, +{piece}) on vdev {top}: {e}");
        }
        for (guid, n) in per_leaf {
            match done.iter_mut().find(|(g, _)| *g == guid) {
                Some((_, total)) => *total += n,
                None => done.push((guid, n)),
            }
        }
    }
    s.io.alloc.lock().end_trim(top, &pieces);
    done
}

fn run(weak: Weak<Shared>) {
    let mut last_save = Instant::now();
    loop {
        let Some(s) = weak.upgrade() else { return };
        if s.trim.stop.load(Ordering::Relaxed) || s.shutdown.load(Ordering::Relaxed) {
            let _ = save(&s);
            s.trim.running.store(false, Ordering::Release);
            return;
        }
        // The first top-level vdev with an active leaf; its active leaves.
        let work = {
            let leaves = s.trim.leaves.lock();
            leaves.iter().filter(|l| l.state == TrimState::Active).map(|l| l.top).min().map(|top| {
                let active: Vec<(u64, u64, u64, u64)> = leaves
                    .iter()
                    .filter(|l| l.state == TrimState::Active && l.top == top)
                    .map(|l| (l.guid, l.offset, l.asize, l.rate))
                    .collect();
                (top, active)
            })
        };
        let Some((top, active)) = work else {
            // Nothing active is left: the state is saved and the thread
            // ends (a start after this spawns a new one).
            s.trim.running.store(false, Ordering::Release);
            let _ = save(&s);
            // A start may have slipped in between: pick it up.
            if s.trim.leaves.lock().iter().any(|l| l.state == TrimState::Active) && !s.trim.running.swap(true, Ordering::AcqRel) {
                continue;
            }
            return;
        };
        let asize = active.iter().map(|a| a.2).max().unwrap_or(0);
        let pos = active.iter().map(|a| a.1).min().unwrap_or(0);
        let rate = active.iter().map(|a| a.3).filter(|&r| r > 0).min().unwrap_or(0);
        let next = s.io.alloc.lock().next_free(top, pos).filter(|&p| p < asize);
        let started = Instant::now();
        let (reached, done) = match next {
            None => (asize, vec![]),
            Some(start) => {
                let len = chunk_cap(&s).min(asize - start);
                // Leaves that resumed past this chunk skip it; one that
                // resumed inside it gets all of it (again, for the part
                // it had done: harmless).
                let only: Vec<u64> = active.iter().filter(|a| a.1 < start + len).map(|a| a.0).collect();
                (start + len, trim_range(&s, top, start, len, Some(&only)))
            }
        };
        {
            let mut leaves = s.trim.leaves.lock();
            for l in leaves.iter_mut().filter(|l| l.state == TrimState::Active && l.top == top) {
                if l.offset < reached {
                    l.offset = reached;
                }
                if let Some((_, n)) = done.iter().find(|(g, _)| *g == l.guid) {
                    l.bytes_done += n;
                }
                if l.offset >= l.asize {
                    l.state = TrimState::Complete;
                    l.action_time = now_secs();
                }
            }
        }
        let completed = reached >= asize;
        if completed || last_save.elapsed() >= SAVE_INTERVAL {
            let _ = save(&s);
            last_save = Instant::now();
        }
        if rate > 0 {
            let trimmed = done.iter().map(|(_, n)| *n).max().unwrap_or(0);
            let want = Duration::from_secs_f64(trimmed as f64 / rate as f64);
            let spent = started.elapsed();
            if want > spent {
                // In short naps, so suspend, cancel and export act promptly.
                let end = Instant::now() + (want - spent);
                while Instant::now() < end && !s.trim.stop.load(Ordering::Relaxed) {
                    std::thread::sleep((end - Instant::now()).min(Duration::from_millis(50)));
                }
            }
        }
    }
}

/// Autotrim's thread: what left the defer window, merged, trimmed.
fn autotrim_run(weak: Weak<Shared>) {
    loop {
        std::thread::sleep(AUTOTRIM_INTERVAL);
        let Some(s) = weak.upgrade() else { return };
        if !s.trim.autotrim_on.load(Ordering::Relaxed) || s.shutdown.load(Ordering::Relaxed) {
            return;
        }
        let mut extents = s.io.alloc.lock().take_autotrim();
        if extents.is_empty() {
            continue;
        }
        extents.sort();
        let mut merged: Vec<Extent> = Vec::new();
        for e in extents {
            match merged.last_mut() {
                Some(m) if m.vdev == e.vdev && m.offset + m.len >= e.offset => m.len = m.len.max(e.offset + e.len - m.offset),
                _ => merged.push(e),
            }
        }
        let cap = chunk_cap(&s);
        for e in merged {
            let mut at = e.offset;
            while at < e.offset + e.len {
                if !s.trim.autotrim_on.load(Ordering::Relaxed) {
                    return;
                }
                let len = cap.min(e.offset + e.len - at);
                let done = trim_range(&s, e.vdev, at, len, None);
                s.trim.autotrim_bytes.fetch_add(done.iter().map(|(_, n)| n).sum(), Ordering::Relaxed);
                at += len;
            }
        }
    }
}

type Chosen = (Arc<tarn_vdev::LeafVdev>, u32, u64);

/// Leaves named by path or guid (all leaves in service if none), with
/// their top-level vdev's id and size.
fn select(s: &Shared, names: &[String]) -> Result<Vec<Chosen>> {
    let tops = s.io.tops();
    let all: Vec<Chosen> = tops.iter().flat_map(|t| t.leaves().into_iter().map(move |l| (l, t.id(), t.asize()))).collect();
    if names.is_empty() {
        return Ok(all.into_iter().filter(|(l, _, _)| l.usable()).collect());
    }
    let mut out: Vec<Chosen> = Vec::new();
    for n in names {
        let Some(found) = all.iter().find(|(l, _, _)| &l.path == n || &l.guid.to_string() == n) else {
            return Err(ObjError::Invalid(format!("no such device in pool: {n}")));
        };
        if !out.iter().any(|(l, _, _)| l.guid == found.0.guid) {
            out.push(found.clone());
        }
    }
    Ok(out)
}

impl ObjPool {
    /// `pool trim [-r RATE] POOL [DEVICE...]`: starts (or resumes a
    /// suspended) trim of the named leaves, or of every leaf in service.
    pub fn trim_start(&self, devices: &[String], rate: u64) -> Result<()> {
        let s = &self.shared;
        let _op = s.trim.op.lock();
        if s.readonly {
            return Err(ObjError::ReadOnly);
        }
        if let Some(m) = s.suspended.why() {
            return Err(ObjError::Io(m));
        }
        let chosen = select(s, devices)?;
        if chosen.is_empty() {
            return Err(ObjError::Invalid("no device in service to trim".into()));
        }
        {
            let mut leaves = s.trim.leaves.lock();
            for (leaf, _, _) in &chosen {
                if !leaf.usable() {
                    return Err(ObjError::Invalid(format!("cannot trim {}: device is {}", leaf.path, leaf.state().word())));
                }
                if leaves.iter().any(|l| l.guid == leaf.guid && l.state == TrimState::Active) {
                    return Err(ObjError::Invalid(format!("cannot trim {}: currently trimming", leaf.path)));
                }
            }
            for (leaf, top, asize) in chosen {
                let resumed = leaves.iter().find(|l| l.guid == leaf.guid && l.state == TrimState::Suspended).cloned();
                leaves.retain(|l| l.guid != leaf.guid);
                let (offset, bytes_done) = resumed.map_or((0, 0), |r| (r.offset, r.bytes_done));
                leaves.push(LeafTrim {
                    guid: leaf.guid,
                    path: leaf.path.clone(),
                    top,
                    state: TrimState::Active,
                    action_time: now_secs(),
                    offset,
                    asize,
                    bytes_done,
                    rate,
                });
            }
        }
        s.trim.stop.store(false, Ordering::Relaxed);
        save(s)?;
        spawn(s);
        Ok(())
    }

    /// `pool trim -c` (cancel) or `-s` (suspend) of the named leaves' (or
    /// every leaf's) trim.
    pub fn trim_stop(&self, devices: &[String], suspend: bool) -> Result<()> {
        let s = &self.shared;
        let _op = s.trim.op.lock();
        if s.readonly {
            return Err(ObjError::ReadOnly);
        }
        let named: Option<Vec<u64>> = if devices.is_empty() { None } else { Some(select(s, devices)?.iter().map(|(l, _, _)| l.guid).collect()) };
        {
            let mut leaves = s.trim.leaves.lock();
            let stoppable = |l: &LeafTrim| l.state == TrimState::Active || (!suspend && l.state == TrimState::Suspended);
            let hits: Vec<u64> = leaves
                .iter()
                .filter(|l| stoppable(l) && named.as_ref().is_none_or(|n| n.contains(&l.guid)))
                .map(|l| l.guid)
                .collect();
            let missing = named.as_ref().and_then(|n| n.iter().find(|g| !hits.contains(g)));
            if hits.is_empty() || missing.is_some() {
                return Err(ObjError::Invalid("there is no active trim".into()));
            }
            for l in leaves.iter_mut().filter(|l| hits.contains(&l.guid)) {
                l.state = if suspend { TrimState::Suspended } else { TrimState::Canceled };
                l.action_time = now_secs();
            }
        }
        save(s)
    }

    /// Each leaf's manual trim, as last started.
    pub fn trim_status(&self) -> Vec<LeafTrim> {
        self.shared.trim.leaves.lock().clone()
    }

    /// Blocks until no leaf is being trimmed (suspended counts as not),
    /// or the timeout passes. Returns whether it is done.
    pub fn wait_trim(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            let active = self.shared.trim.leaves.lock().iter().any(|l| l.state == TrimState::Active);
            if !active {
                return true;
            }
            if Instant::now() >= end || self.shared.shutdown.load(Ordering::Relaxed) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `autotrim=on|off`.
    pub fn set_autotrim(&self, on: bool) {
        let s = &self.shared;
        s.io.alloc.lock().set_autotrim(on && !s.readonly);
        if s.readonly {
            return;
        }
        let was = s.trim.autotrim_on.swap(on, Ordering::AcqRel);
        if on && !was {
            let previous = s.trim.autotrim.lock().take();
            if let Some(t) = previous {
                let _ = t.join();
            }
            let weak = Arc::downgrade(s);
            if let Ok(h) = std::thread::Builder::new().name("tarn-autotrim".into()).spawn(move || autotrim_run(weak)) {
                *s.trim.autotrim.lock() = Some(h);
            }
        }
    }

    /// Bytes autotrim has trimmed on leaves since import.
    pub fn autotrim_bytes(&self) -> u64 {
        self.shared.trim.autotrim_bytes.load(Ordering::Relaxed)
    }
}
