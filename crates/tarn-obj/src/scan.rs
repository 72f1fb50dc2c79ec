//! Scrub and resilver: one background walk of every allocated block.
//!
//! The walk visits object sets in id order (the MOS first), objects in id
//! order, and every block pointer of each object's tree. Block pointers are
//! not read where they are found: they go into a queue sorted by device
//! address, and when the queue is full (`scan_mem_max`) or the walk is done,
//! the queue is issued in address order, so the devices see long
//! sequential runs instead of the random order of the tree. Each block goes
//! through `BlockIo::scan_block`: a scrub reads every copy (every mirror
//! side, every raidz column including parity) and rewrites bad ones; a
//! resilver reads the block once and writes it to the leaves whose dirty
//! time log (DTL) says they lack it, and prunes every subtree born before
//! the oldest txg any DTL names.
//!
//! Safety against concurrent frees: the walk and each issued batch hold
//! the pool's reader gate, so no freed space is reused under them, and a
//! block freed while it waits in the queue is dropped from the queue by the
//! block layer's free hook.
//!
//! Persistence: whenever the queue has been fully issued, the walk position
//! (object set, next object) and the counters are written to MOS object 3
//! in an ordinary txg. Export, a daemon restart or a crash loses at most
//! the work since then; import resumes from it.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};
use tarn_block::{BlockPtr, BP_SIZE};
use tarn_vdev::Dtl;

use crate::format::{DnodePhys, ObjsetPhys, DNODES_PER_BLOCK, DNODE_SIZE};
use crate::pool::{Shared, MOS_OBJSET_TABLE};
use crate::tree::{self, block_err};
use crate::{ObjError, ObjType, ObjectId, Result, BONUS_LEN};

/// MOS object holding the scan state (length-prefixed JSON).
pub const MOS_SCAN_STATE: ObjectId = ObjectId(3);
const OT_SCAN_STATE: u8 = 40;
/// Damaged blocks remembered for `status -v` (beyond that, only counted).
const DAMAGED_MAX: usize = 1000;
/// Queue memory per block pointer (the pointer, its key and map overhead).
const ENTRY_COST: u64 = 200;
/// Object id recorded for blocks of an object set's own metadata.
pub const META_OBJECT: u64 = u64::MAX;
/// Object set id recorded for pool metadata outside any object set.
pub const POOL_META: u64 = u64::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScanFunc {
    Scrub,
    Resilver,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScanPhase {
    Scanning,
    Finished,
    Canceled,
}

/// A block no copy of which could be read back correctly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DamagedBlock {
    pub objset: u64,
    pub object: u64,
    /// A dnode block of the object set: `object` is the first of the
    /// [`DNODES_PER_BLOCK`] objects it holds, every one of them lost (which
    /// are in use cannot be told: their dnodes are in the block).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dnode_block: bool,
}

impl DamagedBlock {
    /// A block of `object` (or, with [`META_OBJECT`], of the object set's
    /// own metadata).
    pub fn of(objset: u64, object: u64) -> DamagedBlock {
        DamagedBlock { objset, object, dnode_block: false }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScanStats {
    pub func: ScanFunc,
    pub phase: ScanPhase,
    pub paused: bool,
    /// Unix seconds.
    pub start_time: u64,
    pub end_time: u64,
    /// Blocks born before this need no visit (resilver: the oldest DTL txg).
    pub min_txg: u64,
    /// The last txg synced when the scan began.
    pub max_txg: u64,
    /// Allocated bytes when the scan began.
    pub to_examine: u64,
    /// Bytes of blocks found by the walk.
    pub examined: u64,
    /// Bytes of blocks verified (scrub) or checked for resilver.
    pub issued: u64,
    /// Bytes read from devices.
    pub read_bytes: u64,
    /// Bytes rewritten over bad copies.
    pub repaired: u64,
    /// Bytes written to leaves that lacked them.
    pub resilvered: u64,
    /// Blocks no copy of which could be recovered.
    pub errors: u64,
    /// Walk position: everything before (objset, object) has been issued.
    pub bookmark_objset: u64,
    pub bookmark_object: u64,
    /// Resilver target: each leaf's DTL when the scan began.
    pub dtl: Vec<(u64, Vec<(u64, u64)>)>,
    pub damaged: Vec<DamagedBlock>,
    /// Issued bytes and seconds spent issuing in this pass (for the rate;
    /// a pass ends at pause or export).
    #[serde(default)]
    pub pass_issued: u64,
    #[serde(default)]
    pub pass_secs: f64,
}

impl ScanStats {
    /// Bytes per second issued in this pass.
    pub fn rate(&self) -> u64 {
        if self.pass_secs > 0.0 {
            (self.pass_issued as f64 / self.pass_secs) as u64
        } else {
            0
        }
    }

    /// Seconds left at the current rate (None while unknown).
    pub fn eta_secs(&self) -> Option<u64> {
        let rate = self.rate();
        if self.phase != ScanPhase::Scanning || rate == 0 {
            return None;
        }
        Some(self.to_examine.saturating_sub(self.issued) / rate)
    }

    pub fn percent(&self) -> f64 {
        if self.phase == ScanPhase::Finished {
            return 100.0;
        }
        (self.issued as f64 * 100.0 / self.to_examine.max(1) as f64).min(99.99)
    }
}

struct Entry {
    bp: BlockPtr,
    objset: u64,
    object: u64,
}

/// Block pointers waiting to be issued, by (vdev, offset) of the first copy.
#[derive(Default)]
pub(crate) struct ScanQueue {
    map: BTreeMap<(u32, u64), Entry>,
    /// Blocks freed lately, with their free txg, recorded always (a scan
    /// may start while a txg that freed blocks is still syncing). A walk may
    /// still find a block freed in a txg that was syncing when its step
    /// started (that txg's trees are published only at the end of its
    /// sync); such finds are dropped again before the step lets go of the
    /// gate. A step holds the gate, which stops the next txg's sync at its
    /// release of deferred frees, so frees older than the txg before the
    /// newest one recorded can no longer matter.
    recent: Vec<((u32, u64), u64, u64)>,
}

impl ScanQueue {
    fn push(&mut self, bp: &BlockPtr, objset: u64, object: u64) -> u64 {
        let d = bp.dva[0];
        if self.map.insert((d.vdev, d.offset), Entry { bp: *bp, objset, object }).is_none() {
            bp.asize()
        } else {
            0
        }
    }

    /// Called by the block layer for every freed block.
    pub fn freed(&mut self, bp: &BlockPtr, txg: u64) {
        if self.recent.last().is_some_and(|&(_, _, t)| t < txg) {
            self.recent.retain(|&(_, _, t)| t + 1 >= txg);
        }
        let d = bp.dva[0];
        let key = (d.vdev, d.offset);
        if self.map.get(&key).is_some_and(|e| e.bp.birth == bp.birth) {
            self.map.remove(&key);
        }
        self.recent.push((key, bp.birth, txg));
    }

    /// Drops queued blocks freed in txgs after `synced` (the txg synced
    /// when the walk step began) and forgets older frees: those were
    /// published before the step began, so no walk from now on sees them.
    fn drop_freed_after(&mut self, synced: u64) {
        self.recent.retain(|&(_, _, t)| t > synced);
        for &(key, birth, _) in &self.recent {
            if self.map.get(&key).is_some_and(|e| e.bp.birth == birth) {
                self.map.remove(&key);
            }
        }
    }
}

#[derive(Default)]
pub(crate) struct Control {
    pub running: bool,
    pub pause: bool,
    pub cancel: bool,
    /// Export or shutdown: stop, keeping the persisted state for resume.
    pub stop: bool,
}

pub(crate) struct Scanner {
    pub stats: Mutex<Option<ScanStats>>,
    pub ctl: Mutex<Control>,
    pub cv: Condvar,
    pub queue: Arc<Mutex<ScanQueue>>,
    pub thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Each leaf's mark when the scan began (see `LeafVdev::mark`); a leaf
    /// missing here (a scan resumed after import) never counts as having
    /// stayed in service, so its DTL is kept for another resilver.
    pub leaf_marks: Mutex<std::collections::HashMap<u64, u64>>,
    /// Serializes starting and cancelling scans.
    pub start_lock: Mutex<()>,
}

impl Scanner {
    pub fn new() -> Scanner {
        Scanner {
            stats: Mutex::new(None),
            ctl: Mutex::new(Control::default()),
            cv: Condvar::new(),
            queue: Arc::new(Mutex::new(ScanQueue::default())),
            thread: Mutex::new(None),
            leaf_marks: Mutex::new(std::collections::HashMap::new()),
            start_lock: Mutex::new(()),
        }
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Reads the persisted scan state, if any.
pub(crate) fn load(s: &Arc<Shared>) -> Option<ScanStats> {
    let mos = crate::ObjectSet { shared: s.clone(), inner: s.mos.clone() };
    let info = mos.info(MOS_SCAN_STATE).ok()?;
    if info.length < 8 {
        return None;
    }
    let mut len = [0u8; 8];
    mos.read(MOS_SCAN_STATE, 0, &mut len).ok()?;
    let len = u64::from_le_bytes(len);
    if len == 0 || len > info.length.saturating_sub(8) || len > 16 << 20 {
        return None;
    }
    let mut json = vec![0u8; len as usize];
    mos.read(MOS_SCAN_STATE, 8, &mut json).ok()?;
    serde_json::from_slice(&json).ok()
}

/// Writes the scan state in the open txg.
pub(crate) fn save(s: &Arc<Shared>, stats: &ScanStats) -> Result<()> {
    if s.readonly {
        return Ok(());
    }
    let json = serde_json::to_vec(stats).map_err(|e| ObjError::Invalid(e.to_string()))?;
    let mut data = (json.len() as u64).to_le_bytes().to_vec();
    data.extend_from_slice(&json);
    let tx = crate::pool::begin_tx(s);
    let mos = crate::ObjectSet { shared: s.clone(), inner: s.mos.clone() };
    if mos.info(MOS_SCAN_STATE).is_err() {
        mos.create_with_id(&tx, MOS_SCAN_STATE, ObjType(OT_SCAN_STATE), 16384, &[0; BONUS_LEN])?;
    }
    mos.write(&tx, MOS_SCAN_STATE, 0, &data)
}

/// Starts a new scan (the caller has checked that none is running).
pub(crate) fn start(s: &Arc<Shared>, func: ScanFunc) -> Result<()> {
    let _start = s.scanner.start_lock.lock();
    // The previous scan's thread may still be on its way out (its stats
    // already say finished or canceled): let it end first.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while s.scanner.ctl.lock().running {
        let scanning = s.scanner.stats.lock().as_ref().is_some_and(|st| st.phase == ScanPhase::Scanning);
        if scanning || std::time::Instant::now() > deadline {
            return Err(ObjError::Invalid("a scrub or resilver is already running".into()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let previous = s.scanner.thread.lock().take();
    if let Some(t) = previous {
        let _ = t.join();
    }
    // Each leaf's mark, the DTLs to resilver and the newest synced txg are
    // taken with no txg in flight, so they agree with each other.
    let sync_guard = s.sync_lock.lock();
    let tops = s.io.tops();
    {
        let mut marks = s.scanner.leaf_marks.lock();
        marks.clear();
        for l in tops.iter().flat_map(|t| t.leaves()) {
            marks.insert(l.guid, l.mark());
        }
    }
    let mut dtl = Vec::new();
    let mut min_txg = 0;
    if func == ScanFunc::Resilver {
        let mut all = Dtl::default();
        for leaf in tops.iter().flat_map(|t| t.leaves()) {
            let d = leaf.dtl();
            if leaf.usable() && !d.is_empty() {
                for &(a, b) in &d.0 {
                    all.add_range(a, b);
                }
                dtl.push((leaf.guid, d.0.clone()));
            }
        }
        min_txg = all.min().unwrap_or(0);
    }
    let max_txg = s.synced_txg.load(Ordering::Acquire);
    drop(sync_guard);
    let space = s.space();
    let stats = ScanStats {
        func,
        phase: ScanPhase::Scanning,
        paused: false,
        start_time: now_secs(),
        end_time: 0,
        min_txg,
        max_txg,
        to_examine: space.alloc,
        examined: 0,
        issued: 0,
        read_bytes: 0,
        repaired: 0,
        resilvered: 0,
        errors: 0,
        bookmark_objset: 0,
        bookmark_object: 0,
        dtl,
        damaged: vec![],
        pass_issued: 0,
        pass_secs: 0.0,
    };
    save(s, &stats)?;
    s.scanner.queue.lock().map.clear();
    *s.scanner.stats.lock() = Some(stats);
    spawn(s);
    Ok(())
}

/// Starts the scan thread for the state in `s.scanner.stats`.
pub(crate) fn spawn(s: &Arc<Shared>) {
    {
        let mut ctl = s.scanner.ctl.lock();
        if ctl.running {
            ctl.cancel = false;
            return;
        }
        *ctl = Control { running: true, ..Control::default() };
    }
    // A previous thread that finished: reap it.
    if let Some(t) = s.scanner.thread.lock().take() {
        let _ = t.join();
    }
    let weak = Arc::downgrade(s);
    let handle = std::thread::Builder::new().name("tarn-scan".into()).spawn(move || run(weak));
    match handle {
        Ok(h) => *s.scanner.thread.lock() = Some(h),
        Err(_) => s.scanner.ctl.lock().running = false,
    }
}

/// Stops the scan thread (export): the persisted state stays for resume.
pub(crate) fn stop(s: &Shared) {
    s.scanner.ctl.lock().stop = true;
    s.scanner.cv.notify_all();
    if let Some(t) = s.scanner.thread.lock().take() {
        let _ = t.join();
    }
}

/// Where the walk is between steps (not persisted: rebuilt from the bookmark).
struct Cursor {
    objset: u64,
    object: u64,
    /// The walk has passed the last object set.
    done: bool,
    /// Pool metadata (space map log) queued in this pass.
    pool_meta_done: bool,
}

enum Exit {
    /// Export or shutdown: the persisted state stays for a resume.
    Stop,
    Cancel,
    Done,
}

fn run(weak: Weak<Shared>) {
    let exit = run_loop(&weak);
    let Some(s) = weak.upgrade() else { return };
    match exit {
        Exit::Stop => {}
        Exit::Cancel => finish(&s, ScanPhase::Canceled),
        Exit::Done => finish(&s, ScanPhase::Finished),
    }
    // Only now: a new scan waits for this before it starts.
    s.scanner.ctl.lock().running = false;
}

fn run_loop(weak: &Weak<Shared>) -> Exit {
    let mut cursor: Option<Cursor> = None;
    let mut issuing = false;
    let mut last_client_ops = 0;
    loop {
        let Some(s) = weak.upgrade() else { return Exit::Stop };
        {
            let mut ctl = s.scanner.ctl.lock();
            if ctl.stop || s.shutdown.load(Ordering::Relaxed) {
                return Exit::Stop;
            }
            if ctl.cancel {
                return Exit::Cancel;
            }
            if ctl.pause {
                s.scanner.cv.wait_for(&mut ctl, Duration::from_millis(200));
                continue;
            }
        }
        if s.suspended.is_set() {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        let Some(stats) = s.scanner.stats.lock().clone() else { return Exit::Stop };
        let c = cursor.get_or_insert(Cursor {
            objset: stats.bookmark_objset,
            object: stats.bookmark_object,
            done: false,
            pool_meta_done: false,
        });
        let tunables = s.tunables.load();
        let cap = (tunables.scan_mem_max / ENTRY_COST).max(64) as usize;
        let queued = s.scanner.queue.lock().map.len();
        if !issuing && !c.done && queued < cap {
            if let Err(e) = walk_step(&s, c, stats.min_txg) {
                // The object set itself could not be read (its root or the
                // table): count it once and move on to the next one.
                let mut st = s.scanner.stats.lock();
                if let Some(st) = st.as_mut() {
                    st.errors += 1;
                    note_damage(st, DamagedBlock::of(c.objset, META_OBJECT));
                }
                drop(st);
                eprintln!("tarn: scan of object set {}: {e}", c.objset);
                c.objset += 1;
                c.object = 0;
            }
        } else if queued > 0 {
            issuing = true;
            let client_ops = s.client_ops.load(Ordering::Relaxed);
            let busy = client_ops != last_client_ops;
            last_client_ops = client_ops;
            issue_step(&s, stats.func, busy, tunables.scan_rate_max);
            if s.scanner.queue.lock().map.is_empty() {
                // Drain point: everything before the cursor is issued.
                issuing = false;
                checkpoint(&s, c);
            }
        } else {
            issuing = false;
            if c.done {
                checkpoint(&s, c);
                return Exit::Done;
            }
        }
    }
}

fn note_damage(st: &mut ScanStats, d: DamagedBlock) {
    if st.damaged.len() < DAMAGED_MAX && !st.damaged.contains(&d) {
        st.damaged.push(d);
    }
}

fn checkpoint(s: &Arc<Shared>, c: &Cursor) {
    let snapshot = {
        let mut st = s.scanner.stats.lock();
        let Some(st) = st.as_mut() else { return };
        st.bookmark_objset = c.objset;
        st.bookmark_object = c.object;
        st.clone()
    };
    if let Err(e) = save(s, &snapshot) {
        eprintln!("tarn: cannot save scan state: {e}");
    }
}

/// The committed root block pointer of object set `id` (None: no such set).
fn objset_root(s: &Shared, id: u64) -> Result<Option<BlockPtr>> {
    if id == 0 {
        return Ok(Some(*s.mos.root_bp.lock()));
    }
    let mos = s.mos.committed.lock().clone();
    let Some(table) = committed_dnode(s, &mos, MOS_OBJSET_TABLE.0)? else { return Ok(None) };
    let per_block = u64::from(table.block_size) / BP_SIZE as u64;
    if per_block == 0 {
        return Err(ObjError::Corrupt("object set table has a zero block size".into()));
    }
    let bp = tree::lookup(&s.io, &table, id / per_block)?;
    if bp.is_hole() {
        return Ok(None);
    }
    let data = s.io.read(&bp).map_err(block_err)?;
    let at = ((id % per_block) as usize) * BP_SIZE;
    let raw = data.get(at..at + BP_SIZE).ok_or_else(|| ObjError::Corrupt("short object set table block".into()))?;
    let root = BlockPtr::decode(raw).map_err(ObjError::Corrupt)?;
    Ok(if root.is_hole() { None } else { Some(root) })
}

/// The highest object set id the committed table has room for.
fn objset_limit(s: &Shared) -> Result<u64> {
    let mos = s.mos.committed.lock().clone();
    let Some(table) = committed_dnode(s, &mos, MOS_OBJSET_TABLE.0)? else { return Ok(1) };
    Ok(table.nblocks.saturating_mul(u64::from(table.block_size)) / BP_SIZE as u64)
}

fn committed_dnode(s: &Shared, os: &ObjsetPhys, object: u64) -> Result<Option<DnodePhys>> {
    let bp = tree::lookup(&s.io, &os.meta, object / DNODES_PER_BLOCK)?;
    if bp.is_hole() {
        return Ok(None);
    }
    let data = s.io.read(&bp).map_err(block_err)?;
    let at = ((object % DNODES_PER_BLOCK) as usize) * DNODE_SIZE;
    let d = DnodePhys::decode(data.get(at..at + DNODE_SIZE).ok_or_else(|| ObjError::Corrupt("short dnode block".into()))?)?;
    Ok(if d.in_use() { Some(d) } else { None })
}

/// Walks one object (or moves to the next object set) and queues what it
/// finds. Holds the reader gate throughout.
/// Walks one object (or moves to the next object set) and queues what it
/// finds; holds the reader gate throughout. Damage below an object set's
/// root is counted here, once, and walked past; an error means the object
/// set itself cannot be read (the caller moves to the next one). What was
/// found before an error is queued all the same.
fn walk_step(s: &Arc<Shared>, c: &mut Cursor, min_txg: u64) -> Result<()> {
    let _gate = s.reader_gate.read();
    // Frees of txgs up to this one are published: this walk cannot see them.
    let synced_at_start = s.synced_txg.load(Ordering::Acquire);
    let mut queue = Vec::new();
    let mut damage = Vec::new();
    let result = walk_inner(s, c, min_txg, &mut queue, &mut damage);
    let mut examined = 0u64;
    {
        let mut q = s.scanner.queue.lock();
        for (bp, objset, object) in &queue {
            examined += q.push(bp, *objset, *object);
        }
        q.drop_freed_after(synced_at_start);
    }
    if let Some(st) = s.scanner.stats.lock().as_mut() {
        st.examined += examined;
        for d in damage {
            if !d.dnode_block {
                st.errors += 1;
            }
            note_damage(st, d);
        }
    }
    result
}

type Found = Vec<(BlockPtr, u64, u64)>;

fn walk_inner(s: &Arc<Shared>, c: &mut Cursor, min_txg: u64, queue: &mut Found, damage: &mut Vec<DamagedBlock>) -> Result<()> {
    if !c.pool_meta_done {
        c.pool_meta_done = true;
        for bp in s.root.lock().spacemap_blocks.iter() {
            if !bp.is_hole() && bp.birth >= min_txg {
                queue.push((*bp, POOL_META, META_OBJECT));
            }
        }
    }
    let limit = objset_limit(s)?;
    loop {
        if c.objset >= limit.max(1) {
            c.done = true;
            return Ok(());
        }
        let Some(root) = objset_root(s, c.objset)? else {
            c.objset += 1;
            c.object = 0;
            continue;
        };
        if root.birth < min_txg {
            c.objset += 1;
            c.object = 0;
            continue;
        }
        let os = ObjsetPhys::decode(&s.io.read(&root).map_err(block_err)?)?;
        let objset = c.objset;
        if c.object == 0 {
            // Entering the set: its root and its meta-dnode tree.
            queue.push((root, objset, META_OBJECT));
            let r = tree::walk_born_after(&s.io, &os.meta, min_txg, &mut |bp, _| {
                queue.push((*bp, objset, META_OBJECT));
                Ok(())
            });
            if r.is_err() {
                damage.push(DamagedBlock::of(objset, META_OBJECT));
            }
        }
        // The next object in use at or after the cursor.
        let mut found = None;
        let mut blkid = c.object / DNODES_PER_BLOCK;
        while blkid < os.meta.nblocks && found.is_none() {
            let block = tree::lookup(&s.io, &os.meta, blkid)
                .ok()
                .filter(|bp| !bp.is_hole() && bp.birth >= min_txg)
                .map(|bp| s.io.read(&bp).map_err(block_err));
            let data = match block {
                None => None,
                Some(Ok(data)) => Some(data),
                Some(Err(_)) => {
                    // A dnode block no copy of which reads: its 32 objects
                    // are lost to this walk. Noted here with the objects it
                    // held (for `status -v`); counted as an error when the
                    // block itself is issued (it is queued with the
                    // meta-dnode's tree), not twice.
                    damage.push(DamagedBlock { objset, object: blkid * DNODES_PER_BLOCK, dnode_block: true });
                    None
                }
            };
            if let Some(data) = data {
                for i in (c.object % DNODES_PER_BLOCK)..DNODES_PER_BLOCK {
                    let at = i as usize * DNODE_SIZE;
                    let Some(raw) = data.get(at..at + DNODE_SIZE) else { break };
                    match DnodePhys::decode(raw) {
                        Ok(d) if d.in_use() => {
                            found = Some((blkid * DNODES_PER_BLOCK + i, d));
                            break;
                        }
                        Ok(_) => {}
                        Err(_) => damage.push(DamagedBlock::of(objset, blkid * DNODES_PER_BLOCK + i)),
                    }
                }
            }
            if found.is_none() {
                blkid += 1;
                c.object = blkid * DNODES_PER_BLOCK;
            }
        }
        match found {
            None => {
                c.objset += 1;
                c.object = 0;
            }
            Some((id, d)) => {
                let r = tree::walk_born_after(&s.io, &d, min_txg, &mut |bp, _| {
                    queue.push((*bp, objset, id));
                    Ok(())
                });
                if r.is_err() {
                    damage.push(DamagedBlock::of(objset, id));
                }
                c.object = id + 1;
            }
        }
        return Ok(());
    }
}

/// Issues the next run of queued blocks in address order.
fn issue_step(s: &Arc<Shared>, func: ScanFunc, busy: bool, rate_max: u64) {
    let started = Instant::now();
    // Smaller batches and a pause while clients are active keep their
    // latency low; an idle pool gets the devices' full speed.
    let (max_blocks, mut max_bytes) = if busy { (4, 1u64 << 20) } else { (32, 8u64 << 20) };
    if rate_max > 0 {
        // A tenth of a second's worth, so pause and export act promptly.
        max_bytes = max_bytes.min(rate_max / 10).max(1);
    }
    // Popped under the gate: a block freed from now on keeps its space
    // until the batch is done.
    let gate = s.reader_gate.read();
    let batch: Vec<Entry> = {
        let mut q = s.scanner.queue.lock();
        let mut out = Vec::new();
        let mut bytes = 0;
        while out.len() < max_blocks && bytes < max_bytes {
            let Some((_, e)) = q.map.pop_first() else { break };
            bytes += e.bp.asize();
            out.push(e);
        }
        out
    };
    let scrub = func == ScanFunc::Scrub;
    let results = crate::par::par_map(&batch, |e| s.io.scan_block(&e.bp, scrub));
    drop(gate);
    let issued: u64 = batch.iter().map(|e| e.bp.asize()).sum();
    {
        let mut st = s.scanner.stats.lock();
        if let Some(st) = st.as_mut() {
            for (e, r) in batch.iter().zip(&results) {
                match r {
                    Ok(o) => {
                        st.read_bytes += o.read_bytes;
                        st.repaired += o.repaired_bytes;
                        st.resilvered += o.resilvered_bytes;
                    }
                    Err(_) => {
                        st.errors += 1;
                        note_damage(st, DamagedBlock::of(e.objset, e.object));
                    }
                }
            }
            st.issued += issued;
            st.pass_issued += issued;
        }
    }
    if busy {
        std::thread::sleep(Duration::from_millis(5));
    }
    if rate_max > 0 {
        let want = Duration::from_secs_f64(issued as f64 / rate_max as f64);
        let spent = started.elapsed();
        if want > spent {
            std::thread::sleep(want - spent);
        }
    }
    if let Some(st) = s.scanner.stats.lock().as_mut() {
        st.pass_secs += started.elapsed().as_secs_f64();
    }
}

/// Ends the scan: final counters, DTLs of fully resilvered leaves cleared,
/// completed replacements settled.
fn finish(s: &Arc<Shared>, phase: ScanPhase) {
    s.scanner.queue.lock().map.clear();
    // The live intent log blocks (not in the tree), before a resilvered
    // leaf's missing txgs are forgotten.
    let func = s.scanner.stats.lock().as_ref().map(|st| st.func);
    let logs = match func {
        Some(f) if phase == ScanPhase::Finished => crate::zil::scan_live(s, f == ScanFunc::Scrub),
        _ => Default::default(),
    };
    let snapshot = {
        let mut st = s.scanner.stats.lock();
        let Some(st) = st.as_mut() else { return };
        st.read_bytes += logs.read_bytes;
        st.repaired += logs.repaired;
        st.resilvered += logs.resilvered;
        st.errors += logs.errors;
        st.phase = phase;
        st.paused = false;
        st.end_time = now_secs();
        st.clone()
    };
    if phase == ScanPhase::Finished {
        crate::vdevs::scan_done(s, &snapshot);
    }
    if let Err(e) = save(s, &snapshot) {
        eprintln!("tarn: cannot save scan state: {e}");
    }
}
