//! The pool: vdevs, the block pipeline, the MOS, and the txg machinery.
//!
//! Big theory of transaction groups:
//! - open: `begin()` returns a `Tx` holding a read lock on the txg switch;
//!   every change is tagged with the open txg.
//! - quiescing: the sync thread takes the write lock for an instant, so all
//!   holds on txg T have ended, and opens T+1.
//! - syncing: T's dirty data is written (data blocks in parallel), trees are
//!   rewritten bottom-up, object set roots land in the MOS, the MOS is
//!   written, then the space map log, then every vdev is flushed, and only
//!   then is the uberblock for T written and flushed (invariant 3).
//!
//! The sync runs every `txg_timeout`, when dirty data passes 1/4 of
//! `dirty_data_max`, or when someone calls `sync()` (fsync).
//! Writers are throttled smoothly from 60% of `dirty_data_max` and stopped
//! at 100% until a sync finishes.

use std::collections::{BTreeMap, HashMap, HashSet};

/// An object set destroyed in a txg, kept until that txg is written.
type DestroyedObjset = (ObjsetId, Arc<ObjsetInner>);
/// A level-0 block to write: item index, block id, data, object type, metadata?
type DataJob = (usize, u64, Arc<Vec<u8>>, u8, bool);
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use tarn_block::{spacemap, Allocator, BlockIo, BlockPtr, WriteSpec};
use tarn_dev::Device;
use tarn_vdev::{PoolConfig, PoolState, TopConfig, TopVdev, Uberblock};

use crate::format::{DnodePhys, ObjsetPhys, UberPayload, DNODES_PER_BLOCK, DNODE_SIZE, DN_IN_USE, DN_METADATA, META_BLOCK_SIZE, OT_OBJSET, OT_OBJSET_TABLE};
use crate::objset::{ObjectSet, ObjsetInner, SyncItem};
use crate::tree::{self, block_err, Changes, TreeCtx};
use crate::*;

/// MOS object holding one block pointer per object set (indexed by id).
pub const MOS_OBJSET_TABLE: ObjectId = ObjectId(2);
pub const MOS_OBJSET_ID: ObjsetId = ObjsetId(0);

pub(crate) struct RootState {
    pub spacemap_head: BlockPtr,
    pub spacemap_records: u64,
    pub spacemap_blocks: Vec<BlockPtr>,
}

pub(crate) struct Shared {
    pub io: BlockIo,
    pub readonly: bool,
    pub config: Mutex<PoolConfig>,
    /// Hot spares not in use.
    pub spares: Mutex<Vec<Arc<tarn_vdev::LeafVdev>>>,
    pub scanner: crate::scan::Scanner,
    /// Client operations (reads, transactions): the scanner backs off
    /// while this moves.
    pub client_ops: AtomicU64,
    /// `failmode=wait`: changes block while the pool is suspended.
    pub failmode_wait: AtomicBool,
    pub txg_lock: Arc<RwLock<()>>,
    pub open_txg: AtomicU64,
    pub synced_txg: AtomicU64,
    pub dirty_bytes: AtomicU64,
    /// Raw space the dirty data may take when written (see space.rs).
    pub dirty_asize: AtomicU64,
    pub meta_charges: Mutex<crate::space::MetaCharges>,
    pub dirty_objsets: Mutex<BTreeMap<Txg, HashSet<ObjsetId>>>,
    pub objsets: Mutex<HashMap<ObjsetId, Arc<ObjsetInner>>>,
    pub mos: Arc<ObjsetInner>,
    pub root: Mutex<RootState>,
    pub sync_lock: Mutex<()>,
    pub tunables: Mutex<Tunables>,
    /// Signals the sync thread (work to do) and waiters (a txg synced).
    pub cv_lock: Mutex<SyncSignal>,
    pub cv_sync: Condvar,
    pub cv_done: Condvar,
    pub shutdown: AtomicBool,
    pub next_objset: AtomicU64,
    pub created_objsets: Mutex<BTreeMap<Txg, Vec<ObjsetId>>>,
    pub destroyed_objsets: Mutex<BTreeMap<Txg, Vec<DestroyedObjset>>>,
    /// Snapshot operations to apply at the end of each txg (see snap.rs).
    pub snap_ops: Mutex<BTreeMap<Txg, Vec<crate::snap::SnapOp>>>,
    pub last_error: Mutex<Option<String>>,
    /// Set when a txg could not be written: the pool stops syncing and
    /// refuses changes; what is on disk stays as of the last synced txg.
    pub suspended: Mutex<Option<String>>,
    /// Background readers for prefetch (plain threads; see par.rs for why not rayon).
    pub prefetch_queue: Mutex<Option<std::sync::mpsc::Sender<PrefetchJob>>>,
    pub prefetched_blocks: AtomicU64,
    /// Readers of committed trees hold this shared; releasing deferred
    /// frees (which makes their space reusable) takes it exclusively, so no
    /// reader can follow a stale pointer into reallocated space.
    pub reader_gate: RwLock<()>,
    /// The pool checkpoint (see checkpoint.rs).
    pub ckpt: crate::checkpoint::State,
    /// Manual trim and autotrim (see trim.rs).
    pub trim: crate::trim::Trimmer,
}

pub(crate) type PrefetchJob = Box<dyn FnOnce() + Send>;
const PREFETCH_THREADS: usize = 4;

#[derive(Default)]
pub(crate) struct SyncSignal {
    pub wanted: Txg,
}

impl Shared {
    /// While the pool is suspended, new changes wait (`failmode=wait`, the
    /// default, until the pool is cleared or exported) or fail at once
    /// (`failmode=continue`).
    pub fn check_suspended(&self) -> Result<()> {
        loop {
            let Some(m) = self.suspended.lock().clone() else { return Ok(()) };
            let wait = self.failmode_wait.load(Ordering::Relaxed);
            if !wait || self.shutdown.load(Ordering::Relaxed) {
                return Err(ObjError::Io(m));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Queue a prefetch job; workers start on first use.
    pub fn prefetch(&self, job: PrefetchJob) {
        let mut q = self.prefetch_queue.lock();
        if q.is_none() {
            let (tx, rx) = std::sync::mpsc::channel::<PrefetchJob>();
            let rx = Arc::new(Mutex::new(rx));
            for i in 0..PREFETCH_THREADS {
                let rx = rx.clone();
                let _ = std::thread::Builder::new().name(format!("tarn-prefetch-{i}")).spawn(move || loop {
                    let job = rx.lock().recv();
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                });
            }
            *q = Some(tx);
        }
        if let Some(tx) = q.as_ref() {
            let _ = tx.send(job);
        }
    }

    pub fn note_dirty_objset(&self, txg: Txg, id: ObjsetId) {
        self.dirty_objsets.lock().entry(txg).or_default().insert(id);
    }

    /// Ask the sync thread to sync up to `txg` (0: whatever is open).
    pub(crate) fn kick(&self, txg: Txg) {
        let mut s = self.cv_lock.lock();
        let want = if txg == 0 { self.open_txg.load(Ordering::Relaxed) } else { txg };
        if want > s.wanted {
            s.wanted = want;
        }
        self.cv_sync.notify_all();
    }

    pub(crate) fn meta_spec(&self, copies: u8) -> WriteSpec {
        WriteSpec { compression: Compression::Lz4, checksum: ChecksumKind::Fletcher4, copies: (copies + 1).min(3), level: 0, otype: 0, metadata: true }
    }
}

pub struct ObjPool {
    pub(crate) shared: Arc<Shared>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

fn random_guid() -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    let g = u64::from_le_bytes(b) ^ now_ns();
    g.max(1)
}

pub(crate) fn default_props() -> WriteProps {
    WriteProps { compression: Compression::Lz4, checksum: ChecksumKind::Fletcher4, copies: 1 }
}

impl ObjPool {
    pub fn create(cfg: PoolCreate) -> Result<Arc<ObjPool>> {
        if !(9..=16).contains(&cfg.ashift) {
            return Err(ObjError::Invalid(format!("ashift {} is outside 9..16", cfg.ashift)));
        }
        if cfg.tops.is_empty() {
            return Err(ObjError::Invalid("a pool needs at least one vdev".into()));
        }
        let pool_guid = random_guid();
        let mut tops_cfg = Vec::new();
        let mut all_devs: Vec<(u32, u64, Arc<dyn Device>)> = Vec::new();
        for (i, (kind, devs)) in cfg.tops.iter().enumerate() {
            let sizes: Vec<u64> = devs.iter().map(|(_, d)| d.size()).collect();
            let asize = TopVdev::compute_asize(kind, cfg.ashift, &sizes)?;
            let children: Vec<tarn_vdev::LeafConfig> =
                devs.iter().map(|(p, _)| tarn_vdev::LeafConfig::new(random_guid(), p.clone())).collect();
            for (c, (_, d)) in children.iter().zip(devs) {
                all_devs.push((i as u32, c.guid, d.clone()));
            }
            tops_cfg.push(TopConfig { id: i as u32, guid: random_guid(), kind: kind.clone(), ashift: cfg.ashift, asize, children });
        }
        let config = PoolConfig {
            name: cfg.name.clone(),
            pool_guid,
            version: crate::format::FORMAT_VERSION,
            state: PoolState::Active,
            hostname: cfg.hostname.clone(),
            create_txg: 1,
            top: tops_cfg.clone(),
            properties: cfg.properties.clone(),
            spares: vec![],
            generation: 1,
        };
        for (top_id, leaf_guid, d) in &all_devs {
            tarn_vdev::write_label(d.as_ref(), &tarn_vdev::Label { config: config.clone(), top_id: *top_id, leaf_guid: *leaf_guid })?;
        }
        let mut tops = Vec::new();
        for (tc, (_, devs)) in tops_cfg.iter().zip(&cfg.tops) {
            tops.push(Arc::new(TopVdev::new(tc.clone(), devs.iter().map(|(_, d)| Some(d.clone())).collect())?));
        }
        let asizes: Vec<u64> = tops.iter().map(|t| t.asize()).collect();
        let io = BlockIo::new(tops, Allocator::new(&asizes));
        let mos = ObjsetInner::new(MOS_OBJSET_ID, ObjsetPhys::new(0), default_props(), BlockPtr::HOLE);
        let shared = Self::shared(io, config, vec![], mos, 1, RootState { spacemap_head: BlockPtr::HOLE, spacemap_records: 0, spacemap_blocks: vec![] }, false);
        let pool = Self::start(shared);
        {
            let tx = pool.begin();
            let mos = pool.mos();
            mos.create_with_id(&tx, MOS_OBJSET_TABLE, ObjType(OT_OBJSET_TABLE), 16384, &[0; BONUS_LEN])?;
        }
        pool.sync()?;
        Ok(pool)
    }

    fn shared(io: BlockIo, config: PoolConfig, spares: Vec<Arc<tarn_vdev::LeafVdev>>, mos: Arc<ObjsetInner>, open_txg: Txg, root: RootState, readonly: bool) -> Arc<Shared> {
        let next_objset = mos.committed.lock().next_objset;
        let scanner = crate::scan::Scanner::new();
        let queue = scanner.queue.clone();
        io.set_free_hook(Some(Arc::new(move |bp: &BlockPtr, txg: Txg| queue.lock().freed(bp, txg))));
        Arc::new(Shared {
            io,
            readonly,
            config: Mutex::new(config),
            spares: Mutex::new(spares),
            scanner,
            client_ops: AtomicU64::new(0),
            failmode_wait: AtomicBool::new(false),
            txg_lock: Arc::new(RwLock::new(())),
            open_txg: AtomicU64::new(open_txg),
            synced_txg: AtomicU64::new(open_txg - 1),
            dirty_bytes: AtomicU64::new(0),
            dirty_asize: AtomicU64::new(0),
            meta_charges: Mutex::new(Default::default()),
            dirty_objsets: Mutex::new(BTreeMap::new()),
            objsets: Mutex::new(HashMap::new()),
            mos,
            root: Mutex::new(root),
            sync_lock: Mutex::new(()),
            tunables: Mutex::new(Tunables::default()),
            cv_lock: Mutex::new(SyncSignal::default()),
            cv_sync: Condvar::new(),
            cv_done: Condvar::new(),
            shutdown: AtomicBool::new(false),
            next_objset: AtomicU64::new(next_objset),
            created_objsets: Mutex::new(BTreeMap::new()),
            destroyed_objsets: Mutex::new(BTreeMap::new()),
            snap_ops: Mutex::new(BTreeMap::new()),
            last_error: Mutex::new(None),
            suspended: Mutex::new(None),
            prefetch_queue: Mutex::new(None),
            prefetched_blocks: AtomicU64::new(0),
            reader_gate: RwLock::new(()),
            ckpt: crate::checkpoint::State::default(),
            trim: crate::trim::Trimmer::default(),
        })
    }

    fn start(shared: Arc<Shared>) -> Arc<ObjPool> {
        let weak: Weak<Shared> = Arc::downgrade(&shared);
        let thread = std::thread::Builder::new()
            .name("tarn-txg-sync".into())
            .spawn(move || sync_thread(weak))
            .expect("spawn sync thread");
        Arc::new(ObjPool { shared, thread: Mutex::new(Some(thread)) })
    }

    pub fn import(devices: Vec<Arc<dyn Device>>, opts: ImportOptions) -> Result<Arc<ObjPool>> {
        Self::import_at(devices, opts, None)
    }

    /// Import; with `target`, open the checkpointed state instead of the
    /// newest txg (`import --rewind-to-checkpoint`, see checkpoint.rs).
    pub(crate) fn import_at(devices: Vec<Arc<dyn Device>>, opts: ImportOptions, target: Option<&crate::checkpoint::RewindTarget>) -> Result<Arc<ObjPool>> {
        if devices.is_empty() {
            return Err(ObjError::Invalid("no devices given".into()));
        }
        // Labels: every device must belong to the same pool.
        let mut labels = Vec::new();
        for d in &devices {
            labels.push((tarn_vdev::read_label(d.as_ref())?, d.clone()));
        }
        let guid = labels[0].0.config.pool_guid;
        if let Some((l, d)) = labels.iter().find(|(l, _)| l.config.pool_guid != guid) {
            return Err(ObjError::Invalid(format!("{} belongs to pool '{}', not '{}'", d.path(), l.config.name, labels[0].0.config.name)));
        }
        // The newest config among labels wins (labels are rewritten at export/import).
        let mut config =
            labels.iter().map(|(l, _)| l.config.clone()).max_by_key(|c| (c.generation, c.create_txg)).expect("non-empty");
        if config.state == PoolState::Destroyed && !opts.force {
            return Err(ObjError::Invalid(format!("pool '{}' was destroyed (use -f to import anyway)", config.name)));
        }
        if config.state == PoolState::Active && config.hostname != opts.hostname && !opts.force {
            return Err(ObjError::Invalid(format!(
                "pool '{}' was last in use on host '{}' and not exported (use -f to import anyway)",
                config.name, config.hostname
            )));
        }
        if let Some(t) = target {
            t.restrict(&mut config)?;
        }
        // Uberblocks, newest first.
        let mut ubs: Vec<Uberblock> = Vec::new();
        for d in &devices {
            for ub in tarn_vdev::read_uberblocks(d.as_ref()) {
                if ub.pool_guid == guid && !ubs.iter().any(|u| u.txg == ub.txg) {
                    ubs.push(ub);
                }
            }
        }
        ubs.sort_by_key(|u| std::cmp::Reverse(u.txg));
        let newest_seen = ubs.first().map(|u| u.txg).ok_or_else(|| ObjError::Corrupt("no valid uberblock found".into()))?;
        // Leaves find their devices by guid; a device whose label is older
        // than the config (it was away) still belongs if the config lists it.
        let find = |l: &tarn_vdev::LeafConfig| labels.iter().find(|(lab, _)| lab.leaf_guid == l.guid).map(|(_, d)| d.clone());
        let mut tops = Vec::new();
        for tc in &config.top {
            tops.push(Arc::new(TopVdev::open(tc.clone(), &find, newest_seen)?));
        }
        let spares: Vec<Arc<tarn_vdev::LeafVdev>> =
            config.spares.iter().map(|l| Arc::new(tarn_vdev::LeafVdev::from_config(l, find(l), newest_seen))).collect();
        if let Some(t) = tops.iter().find(|t| t.state() == DevState::Unavail) {
            return Err(ObjError::Invalid(format!(
                "pool '{}' cannot be imported: vdev {} has too many missing or damaged devices",
                config.name,
                t.status().name
            )));
        }
        let asizes: Vec<u64> = tops.iter().map(|t| t.asize()).collect();
        let io = BlockIo::new(tops, Allocator::new(&asizes));
        // Slots poisoned by an earlier rewind are not candidates (but their
        // txg numbers still count in `newest_seen`).
        let rewound: Vec<Uberblock> = target.map(|t| t.uberblock(newest_seen, guid)).into_iter().collect();
        let candidates: Vec<&Uberblock> = match target {
            Some(_) => rewound.iter().collect(),
            None => ubs.iter().filter(|u| UberPayload::decode(&u.payload).is_ok()).collect(),
        };
        let tries = if opts.rewind && target.is_none() { (tarn_block::DEFER_TXGS as usize + 1).min(candidates.len()) } else { 1 };
        let mut last_err = None;
        for ub in candidates.into_iter().take(tries) {
            match Self::load_root(&io, ub, &asizes) {
                Ok((mos_phys, root, alloc, mos_root)) => {
                    *io.alloc.lock() = alloc;
                    config.state = PoolState::Active;
                    config.hostname = opts.hostname.clone();
                    let open = newest_seen.max(ub.txg) + 1;
                    let mos = ObjsetInner::new(MOS_OBJSET_ID, mos_phys, default_props(), mos_root);
                    let shared = Self::shared(io, config, spares, mos, open, root, opts.readonly);
                    shared.synced_txg.store(ub.txg, Ordering::Relaxed);
                    crate::checkpoint::load(&shared)?;
                    let devices = crate::vdevs::uberblock_devices(&shared);
                    // A rewind to the checkpoint lands on a fresh txg above
                    // every txg seen, durable before the labels change and
                    // before any slot is poisoned.
                    let rewound_to = target.map_or(ub.txg, |t| t.txg);
                    if !opts.readonly && target.is_some() {
                        tarn_vdev::write_uberblock(&devices, ub)?;
                    }
                    if !opts.readonly {
                        crate::vdevs::write_labels(&shared, Some(PoolState::Active))?;
                    }
                    if !opts.readonly && rewound_to < newest_seen {
                        // Rewound: poison the abandoned txgs' slots so a later
                        // rewind can never land on history whose freed blocks
                        // this pool is about to reuse.
                        for stale in ubs.iter().filter(|u| u.txg > rewound_to) {
                            let poison = Uberblock { txg: stale.txg, timestamp_ns: now_ns(), pool_guid: guid, payload: vec![0u8; 8] };
                            tarn_vdev::write_uberblock(&devices, &poison)?;
                        }
                    }
                    let pool = Self::start(shared);
                    if !opts.readonly {
                        pool.resume_scan();
                        crate::trim::resume(&pool.shared);
                    }
                    return Ok(pool);
                }
                Err(e) => last_err = Some(format!("txg {}: {e}", ub.txg)),
            }
        }
        let e = last_err.unwrap_or_default();
        Err(ObjError::Corrupt(if opts.rewind {
            format!("no usable uberblock in the last {tries} txgs ({e})")
        } else {
            format!("the newest txg does not verify ({e}); `import -F` may recover by rewinding to an older txg")
        }))
    }

    fn load_root(io: &BlockIo, ub: &Uberblock, asizes: &[u64]) -> Result<(ObjsetPhys, RootState, Allocator, BlockPtr)> {
        let p = UberPayload::decode(&ub.payload)?;
        let data = io.read_uncached(&p.mos_root).map_err(block_err)?;
        let mos = ObjsetPhys::decode(&data)?;
        // Verify the MOS meta tree's top blocks too.
        for bp in &mos.meta.bps {
            if !bp.is_hole() {
                io.read_uncached(bp).map_err(block_err)?;
            }
        }
        let chain = spacemap::read_chain(io, &p.spacemap_head).map_err(block_err)?;
        let mut alloc = Allocator::new(asizes);
        let mut blocks = Vec::new();
        for (bp, blk) in &chain {
            for r in &blk.records {
                alloc.replay(r, ub.txg).map_err(ObjError::Corrupt)?;
            }
            blocks.push(*bp);
        }
        Ok((mos, RootState { spacemap_head: p.spacemap_head, spacemap_records: p.spacemap_records, spacemap_blocks: blocks }, alloc, p.mos_root))
    }

    /// After import: a scan that was running goes on from its last
    /// checkpoint; otherwise leaves that missed txgs are resilvered.
    fn resume_scan(&self) {
        let s = &self.shared;
        if let Some(st) = crate::scan::load(s) {
            let running = st.phase == crate::scan::ScanPhase::Scanning;
            let paused = st.paused;
            *s.scanner.stats.lock() = Some(st);
            if running {
                s.scanner.ctl.lock().pause = paused;
                // What leaves went through before the export is not known:
                // none counts as having stayed in service (leaf_marks stays
                // empty), so no DTL is forgotten on the strength of this
                // scan; a fresh resilver follows it.
                s.scanner.leaf_marks.lock().clear();
                crate::scan::spawn(s);
                if paused {
                    s.scanner.ctl.lock().pause = true;
                }
                return;
            }
        }
        if let Err(e) = self.resilver_if_needed() {
            eprintln!("tarn: cannot start resilver: {e}");
        }
    }

    pub fn name(&self) -> String {
        self.shared.config.lock().name.clone()
    }

    pub fn guid(&self) -> u64 {
        self.shared.config.lock().pool_guid
    }

    pub fn config(&self) -> PoolConfig {
        self.shared.config.lock().clone()
    }

    pub fn readonly(&self) -> bool {
        self.shared.readonly
    }

    /// Open a transaction in the open txg (may wait: write throttle).
    pub fn begin(&self) -> Tx {
        begin_tx(&self.shared)
    }

    pub fn mos(&self) -> ObjectSet {
        ObjectSet { shared: self.shared.clone(), inner: self.shared.mos.clone() }
    }

    pub fn create_objset(&self, tx: &Tx) -> Result<ObjsetId> {
        if self.shared.readonly {
            return Err(ObjError::ReadOnly);
        }
        let id = ObjsetId(self.shared.next_objset.fetch_add(1, Ordering::Relaxed));
        let inner = ObjsetInner::new(id, ObjsetPhys::new(1), default_props(), BlockPtr::HOLE);
        self.shared.objsets.lock().insert(id, inner);
        self.shared.created_objsets.lock().entry(tx.txg()).or_default().push(id);
        self.shared.note_dirty_objset(tx.txg(), id);
        Ok(id)
    }

    pub fn open_objset(&self, id: ObjsetId) -> Result<ObjectSet> {
        if id == MOS_OBJSET_ID {
            return Ok(self.mos());
        }
        let mut map = self.shared.objsets.lock();
        if let Some(inner) = map.get(&id) {
            if inner.destroyed.load(Ordering::Relaxed) {
                return Err(ObjError::NotFound(id.0));
            }
            return Ok(ObjectSet { shared: self.shared.clone(), inner: inner.clone() });
        }
        let mut raw = [0u8; tarn_block::BP_SIZE];
        self.mos().read(MOS_OBJSET_TABLE, id.0 * tarn_block::BP_SIZE as u64, &mut raw)?;
        let bp = BlockPtr::decode(&raw).map_err(ObjError::Corrupt)?;
        if bp.is_hole() {
            return Err(ObjError::NotFound(id.0));
        }
        let data = self.shared.io.read(&bp).map_err(block_err)?;
        let phys = ObjsetPhys::decode(&data)?;
        let inner = ObjsetInner::new(id, phys, default_props(), bp);
        map.insert(id, inner.clone());
        Ok(ObjectSet { shared: self.shared.clone(), inner })
    }

    pub fn destroy_objset(&self, tx: &Tx, id: ObjsetId) -> Result<()> {
        let os = self.open_objset(id)?;
        os.inner.destroyed.store(true, Ordering::Relaxed);
        self.shared.objsets.lock().remove(&id);
        self.shared.destroyed_objsets.lock().entry(tx.txg()).or_default().push((id, os.inner.clone()));
        // The table entry is cleared by the sync of this txg (syncing context).
        self.shared.note_dirty_objset(tx.txg(), MOS_OBJSET_ID);
        Ok(())
    }

    /// Sync the open txg now and wait until it is on disk.
    pub fn sync(&self) -> Result<Txg> {
        sync_and_wait(&self.shared)
    }

    /// `failmode`: wait (true) or continue (false, the library default;
    /// the dataset layer applies the pool property, whose default is wait).
    pub fn set_failmode_wait(&self, wait: bool) {
        self.shared.failmode_wait.store(wait, Ordering::Relaxed);
    }

    /// Why the pool is suspended, if it is.
    pub fn suspended(&self) -> Option<String> {
        self.shared.suspended.lock().clone()
    }

    pub fn export(&self) -> Result<()> {
        crate::scan::stop(&self.shared);
        crate::trim::stop(&self.shared);
        if self.suspended().is_none() {
            self.sync()?;
        }
        self.stop_thread();
        let s = &self.shared;
        if !s.readonly && s.suspended.lock().is_none() {
            crate::vdevs::write_labels(s, Some(PoolState::Exported))?;
        }
        // Let go of the devices now, not when the last handle of this pool
        // (a lingering mount, a prefetch job) goes away: an import of the
        // same devices may follow at once.
        for leaf in s.io.tops().iter().flat_map(|t| t.leaves()) {
            leaf.close();
        }
        for leaf in s.spares.lock().iter() {
            leaf.close();
        }
        Ok(())
    }

    fn stop_thread(&self) {
        crate::scan::stop(&self.shared);
        crate::trim::stop(&self.shared);
        self.shared.prefetch_queue.lock().take();
        self.shared.shutdown.store(true, Ordering::Relaxed);
        self.shared.cv_sync.notify_all();
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }

    /// Space as users see it: frees waiting out the defer window count as
    /// free (they are reusable within a few txgs); `available` leaves out
    /// the slop.
    pub fn space(&self) -> PoolSpace {
        self.shared.space()
    }

    pub fn status(&self) -> PoolStatus {
        let s = &self.shared;
        let tops: Vec<tarn_vdev::TopStatus> = s.io.tops().iter().map(|t| t.status()).collect();
        let states: Vec<DevState> = s.io.tops().iter().map(|t| t.state()).collect();
        let state = if states.contains(&DevState::Unavail) {
            DevState::Unavail
        } else if states.iter().any(|st| *st != DevState::Online) {
            DevState::Degraded
        } else {
            DevState::Online
        };
        let suspended = s.suspended.lock().clone();
        PoolStatus {
            name: self.name(),
            guid: self.guid(),
            state: if suspended.is_some() { DevState::Unavail } else { state },
            txg: s.synced_txg.load(Ordering::Acquire),
            tops,
            spares: self.spares(),
            data_errors: s.io.data_errors.load(Ordering::Relaxed),
            scan: self.scan_stats(),
            suspended,
        }
    }

    pub fn clear_errors(&self) {
        for t in self.shared.io.tops().iter() {
            t.clear_errors();
        }
        self.shared.io.data_errors.store(0, Ordering::Relaxed);
    }

    pub fn set_tunables(&self, t: Tunables) {
        let old = std::mem::replace(&mut *self.shared.tunables.lock(), t);
        if (old.arc_max, old.arc_min) != (t.arc_max, t.arc_min) {
            // The ARC is one for the process (tarn-block's arc.rs).
            tarn_block::arc().set_limits(t.arc_max, t.arc_min);
        }
        self.shared.cv_sync.notify_all();
    }

    pub fn tunables(&self) -> Tunables {
        *self.shared.tunables.lock()
    }

    /// `raw` bytes of pool space expressed as space users can fill.
    pub fn deflate(&self, raw: u64) -> u64 {
        let (n, d) = crate::space::deflate_ratio(&self.shared.config.lock());
        ((raw as u128 * n as u128) / d.max(1) as u128) as u64
    }

    /// Bytes of changes not yet written out (what the write throttle counts).
    pub fn dirty_bytes(&self) -> u64 {
        self.shared.dirty_bytes.load(Ordering::Relaxed)
    }

    /// Blocks written as gang blocks since import.
    pub fn gang_blocks(&self) -> u64 {
        self.shared.io.gang_blocks.load(Ordering::Relaxed)
    }

    /// Raw space the changes not yet written out may take (worst case).
    pub fn dirty_asize(&self) -> u64 {
        self.shared.dirty_asize.load(Ordering::Relaxed)
    }

    /// Blocks read ahead of a sequential reader since import.
    pub fn prefetched_blocks(&self) -> u64 {
        self.shared.prefetched_blocks.load(Ordering::Relaxed)
    }

    pub fn last_synced_txg(&self) -> Txg {
        self.shared.synced_txg.load(Ordering::Acquire)
    }

    pub fn check(&self) -> CheckReport {
        let _ = self.sync();
        let _g = self.shared.sync_lock.lock();
        crate::check::check(&self.shared)
    }

}

impl Drop for ObjPool {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// Open a transaction in the open txg (may wait: write throttle).
pub(crate) fn begin_tx(s: &Arc<Shared>) -> Tx {
    s.client_ops.fetch_add(1, Ordering::Relaxed);
    let max = s.tunables.lock().dirty_data_max.max(1 << 20);
    let mut waited = 0;
    // A txg never grows past the space it can be written to.
    let mut waited_for_space = 0;
    while s.space_full() && waited_for_space < 100 && !s.shutdown.load(Ordering::Relaxed) && s.suspended.lock().is_none() {
        let target = s.open_txg.load(Ordering::Acquire);
        s.kick(target);
        let mut g = s.cv_lock.lock();
        if s.synced_txg.load(Ordering::Acquire) < target {
            s.cv_done.wait_for(&mut g, Duration::from_millis(100));
        }
        waited_for_space += 1;
    }
    loop {
        let dirty = s.dirty_bytes.load(Ordering::Relaxed);
        if dirty < max * 6 / 10 || s.shutdown.load(Ordering::Relaxed) || s.suspended.lock().is_some() {
            break;
        }
        s.kick(0);
        if dirty >= max {
            let mut g = s.cv_lock.lock();
            s.cv_done.wait_for(&mut g, Duration::from_millis(10));
        } else {
            // Smooth delay growing as dirty data approaches the cap.
            let frac = (dirty - max * 6 / 10) as f64 / (max * 4 / 10) as f64;
            std::thread::sleep(Duration::from_micros((10.0 + 990.0 * frac * frac) as u64));
            break;
        }
        waited += 1;
        if waited > 6000 {
            break;
        }
    }
    let guard = s.txg_lock.read_arc();
    Tx { txg: s.open_txg.load(Ordering::Acquire), _hold: Some(guard) }
}

pub(crate) use tarn_block::DEFER_TXGS;

/// Syncs the open txg and waits until it is on disk (a no-op on a
/// read-only pool). Never call it while holding a `Tx`.
pub(crate) fn sync_and_wait(s: &Arc<Shared>) -> Result<Txg> {
    if s.readonly {
        return Ok(s.synced_txg.load(Ordering::Acquire));
    }
    let target = s.open_txg.load(Ordering::Acquire);
    s.kick(target);
    let mut g = s.cv_lock.lock();
    loop {
        if s.synced_txg.load(Ordering::Acquire) >= target {
            return Ok(target);
        }
        if let Some(e) = s.last_error.lock().clone() {
            return Err(ObjError::Io(e));
        }
        if s.shutdown.load(Ordering::Relaxed) {
            return Err(ObjError::Io("pool is shutting down".into()));
        }
        s.cv_done.wait_for(&mut g, Duration::from_millis(100));
    }
}

fn sync_thread(weak: Weak<Shared>) {
    loop {
        let Some(s) = weak.upgrade() else { return };
        if s.shutdown.load(Ordering::Relaxed) {
            return;
        }
        let timeout = Duration::from_millis(s.tunables.lock().txg_timeout_ms.max(10));
        let deadline = Instant::now() + timeout;
        {
            let mut g = s.cv_lock.lock();
            while !s.shutdown.load(Ordering::Relaxed) && g.wanted < s.open_txg.load(Ordering::Acquire) && Instant::now() < deadline {
                s.cv_sync.wait_until(&mut g, deadline);
            }
        }
        if s.shutdown.load(Ordering::Relaxed) {
            return;
        }
        let has_work = !s.dirty_objsets.lock().is_empty() || s.cv_lock.lock().wanted >= s.open_txg.load(Ordering::Acquire);
        if !has_work {
            continue;
        }
        if s.suspended.lock().is_some() {
            let mut g = s.cv_lock.lock();
            s.cv_done.notify_all();
            s.cv_sync.wait_for(&mut g, Duration::from_millis(500));
            continue;
        }
        let result = sync_once(&s);
        match result {
            Ok(_) => *s.last_error.lock() = None,
            Err(e) => {
                let msg = format!("pool '{}' suspended: txg sync failed: {e}", s.config.lock().name);
                eprintln!("tarn: {msg}");
                *s.last_error.lock() = Some(msg.clone());
                *s.suspended.lock() = Some(msg);
            }
        }
        let _g = s.cv_lock.lock();
        s.cv_done.notify_all();
    }
}

/// Quiesce the open txg and write it out. Returns the synced txg.
pub(crate) fn sync_once(s: &Arc<Shared>) -> Result<Txg> {
    let _g = s.sync_lock.lock();
    let txg = {
        let _w = s.txg_lock.write();
        let t = s.open_txg.load(Ordering::Acquire);
        s.open_txg.store(t + 1, Ordering::Release);
        t
    };
    // On failure the caller suspends the pool; nothing of this txg is on disk.
    sync_txg(s, txg)
}

pub(crate) struct ObjsetSync {
    pub inner: Arc<ObjsetInner>,
    pub items: Vec<SyncItem>,
    pub new_phys: ObjsetPhys,
    pub root_bp: BlockPtr,
}

fn sync_txg(s: &Arc<Shared>, txg: Txg) -> Result<Txg> {
    // Checkpoint taken or discarded in this txg: before any free of it.
    crate::checkpoint::sync_begin(s, txg)?;
    // Earlier failed txgs leave dirty records behind; sync them with this one.
    let ids: HashSet<ObjsetId> = {
        let mut d = s.dirty_objsets.lock();
        let keys: Vec<Txg> = d.range(..=txg).map(|(&t, _)| t).collect();
        let mut out = HashSet::new();
        for k in keys {
            if let Some(set) = d.remove(&k) {
                out.extend(set);
            }
        }
        out
    };
    let mut synced: Vec<ObjsetSync> = Vec::new();
    let created: Vec<ObjsetId> = {
        let mut c = s.created_objsets.lock();
        let keys: Vec<Txg> = c.range(..=txg).map(|(&t, _)| t).collect();
        keys.into_iter().flat_map(|k| c.remove(&k).unwrap_or_default()).collect()
    };
    let destroyed: Vec<(ObjsetId, Arc<ObjsetInner>)> = {
        let mut c = s.destroyed_objsets.lock();
        let keys: Vec<Txg> = c.range(..=txg).map(|(&t, _)| t).collect();
        keys.into_iter().flat_map(|k| c.remove(&k).unwrap_or_default()).collect()
    };
    let mut ctx = TreeCtx::new(&s.io, txg, s.meta_spec(1), 0);
    // Destroyed object sets: free their whole trees.
    let mos_handle = ObjectSet { shared: s.clone(), inner: s.mos.clone() };
    for (id, inner) in &destroyed {
        let phys = inner.committed.lock().clone();
        if phys.prev_snap_txg == 0 {
            free_objset_tree(&mut ctx, &phys)?;
        } else {
            // Blocks born at or before `prev_snap_txg` are a snapshot's (or
            // a clone's origin's): only what this head wrote later is freed.
            let mut own = Vec::new();
            crate::snap::collect_born_after(s, &phys, phys.prev_snap_txg, &mut own)?;
            for bp in &own {
                ctx.free(bp);
            }
        }
        if phys.deadlist != 0 {
            // Dead-list entries born after `prev_snap_txg` were held by
            // snapshots destroyed with it; the rest stay the predecessor's.
            for bp in crate::snap::deadlist_read(s, phys.deadlist)? {
                if bp.birth > phys.prev_snap_txg {
                    ctx.free(&bp);
                }
            }
            mos_handle.free(&Tx { txg, _hold: None }, ObjectId(phys.deadlist))?;
        }
        let root = *inner.root_bp.lock();
        ctx.free(&root);
        mos_write_in_txg(&mos_handle, txg, id.0 * tarn_block::BP_SIZE as u64, &[0u8; tarn_block::BP_SIZE])?;
        // Its unsynced changes die with it: give back their dirty accounting.
        let dnodes: Vec<Arc<crate::objset::Dnode>> =
            std::mem::take(&mut *inner.dirty.lock()).into_values().flat_map(|m| m.into_values()).collect();
        for dn in dnodes {
            let mut st = dn.st.lock();
            for (_, d) in std::mem::take(&mut st.dirty) {
                inner.discharge(s, d.charge);
            }
        }
    }
    let dataset_ids: Vec<ObjsetId> = {
        let map = s.objsets.lock();
        ids.iter().chain(created.iter()).filter(|id| **id != MOS_OBJSET_ID && map.contains_key(id)).copied().collect::<HashSet<_>>().into_iter().collect()
    };
    for id in dataset_ids {
        let inner = match s.objsets.lock().get(&id) {
            Some(i) => i.clone(),
            None => continue,
        };
        let r = sync_objset(s, &inner, txg)?;
        // Record the new root in the MOS table, inside this same txg.
        let mos = ObjectSet { shared: s.clone(), inner: s.mos.clone() };
        mos_write_in_txg(&mos, txg, id.0 * tarn_block::BP_SIZE as u64, &r.root_bp.encode())?;
        synced.push(r);
    }
    // Snapshots, snapshot destroys and rollbacks asked for in this txg.
    let ops: Vec<crate::snap::SnapOp> = {
        let mut o = s.snap_ops.lock();
        let keys: Vec<Txg> = o.range(..=txg).map(|(&t, _)| t).collect();
        keys.into_iter().flat_map(|k| o.remove(&k).unwrap_or_default()).collect()
    };
    let evict = crate::snap::apply(s, txg, ops, &mut synced)?;
    // Now the MOS (it may have gained dirty records just above).
    let mos_sync = sync_objset(s, &s.mos, txg)?;
    // Space map log.
    let (sm_head, sm_blocks, sm_records) = {
        let root = s.root.lock();
        let records = s.io.alloc.lock().take_records();
        let extents = {
            let a = s.io.alloc.lock();
            a.vdevs.iter().map(|v| v.extent_count()).sum::<usize>() + a.deferred.values().map(|v| v.len()).sum::<usize>()
        };
        let condense = root.spacemap_records > 20_000 && root.spacemap_records as usize > 4 * extents;
        if condense {
            drop(root);
            condense_spacemap(s, txg, records)?
        } else {
            let n = records.len() as u64;
            let prev = root.spacemap_head;
            let mut blocks = root.spacemap_blocks.clone();
            let total = root.spacemap_records;
            drop(root);
            let (head, written) = spacemap::write_log(&s.io, txg, prev, records, false).map_err(block_err)?;
            let added: u64 = n + written.len() as u64 * spacemap::LOG_COPIES as u64;
            blocks.extend(written);
            (head, blocks, total + added)
        }
    };
    s.io.flush(txg).map_err(block_err)?;
    // Leaves that missed writes (or changed state) get it on record in the
    // labels before the txg that depends on it becomes the newest.
    let dtl_changed = s.io.tops().iter().flat_map(|t| t.leaves()).fold(false, |acc, l| l.take_dtl_dirty() | acc);
    if dtl_changed {
        crate::vdevs::write_labels(s, None)?;
    }
    let payload = UberPayload { mos_root: mos_sync.root_bp, spacemap_head: sm_head, spacemap_records: sm_records }.encode();
    let guid = s.config.lock().pool_guid;
    let ub_devices = crate::vdevs::uberblock_devices(s);
    tarn_vdev::write_uberblock(&ub_devices, &Uberblock { txg, timestamp_ns: now_ns(), pool_guid: guid, payload })?;
    // Publish: trees first, then drop the dirty records they replace.
    *s.root.lock() = RootState { spacemap_head: sm_head, spacemap_records: sm_records, spacemap_blocks: sm_blocks };
    for r in synced.into_iter().chain(std::iter::once(mos_sync)) {
        publish(s, r, txg);
    }
    for id in evict {
        s.objsets.lock().remove(&id);
    }
    {
        let _no_readers = s.reader_gate.write();
        s.io.alloc.lock().release_deferred(txg);
    }
    // Bookkeeping writes of this txg may have noted objsets dirty in it.
    {
        let mut d = s.dirty_objsets.lock();
        let done: Vec<Txg> = d.range(..=txg).map(|(&t, _)| t).collect();
        for t in done {
            d.remove(&t);
        }
    }
    s.settle_meta_charges(txg);
    s.synced_txg.store(txg, Ordering::Release);
    Ok(txg)
}

/// A write into the MOS tagged with `txg` (syncing context, no Tx).
fn mos_write_in_txg(mos: &ObjectSet, txg: Txg, offset: u64, data: &[u8]) -> Result<()> {
    let tx = Tx { txg, _hold: None };
    mos.write(&tx, MOS_OBJSET_TABLE, offset, data)
}

fn free_objset_tree(ctx: &mut TreeCtx, phys: &ObjsetPhys) -> Result<()> {
    // Every object's tree as its dnode block is read (frees are deferred, so
    // the meta tree stays readable until the walk ends), then the meta tree.
    let io = ctx.io;
    tree::walk(io, &phys.meta, &mut |bp, level| {
        if level == 0 {
            let data = io.read_uncached(bp).map_err(block_err)?;
            for chunk in data.chunks_exact(DNODE_SIZE) {
                let d = DnodePhys::decode(chunk)?;
                if d.in_use() {
                    for child in d.bps {
                        ctx.free_subtree(&child, d.nlevels - 1)?;
                    }
                }
            }
        }
        Ok(())
    })?;
    for bp in phys.meta.bps {
        ctx.free_subtree(&bp, phys.meta.nlevels - 1)?;
    }
    Ok(())
}

fn sync_objset(s: &Arc<Shared>, inner: &Arc<ObjsetInner>, txg: Txg) -> Result<ObjsetSync> {
    let props = *inner.props.lock();
    let dnodes: Vec<Arc<crate::objset::Dnode>> = {
        let mut d = inner.dirty.lock();
        let keys: Vec<Txg> = d.range(..=txg).map(|(&t, _)| t).collect();
        let mut out: HashMap<ObjectId, Arc<crate::objset::Dnode>> = HashMap::new();
        for k in keys {
            out.extend(d.remove(&k).unwrap_or_default());
        }
        out.into_values().collect()
    };
    // Snapshot every dirty record up to `txg` (merged oldest to newest).
    let mut items: Vec<SyncItem> = Vec::with_capacity(dnodes.len());
    for dn in dnodes {
        let st = dn.st.lock();
        let mut merged: Option<crate::objset::TxgDirty> = None;
        for (_, d) in st.dirty.range(..=txg) {
            merged = Some(match merged {
                None => d.clone(),
                Some(mut m) => {
                    if d.freed {
                        m.blocks.clear();
                        m.frees.clear();
                        m.freed = true;
                    }
                    for &(a, b) in &d.frees {
                        let doomed: Vec<u64> = m.blocks.range(a..b).map(|(&k, _)| k).collect();
                        for k in doomed {
                            m.blocks.remove(&k);
                        }
                        m.frees.push((a, b));
                    }
                    m.blocks.extend(d.blocks.iter().map(|(k, v)| (*k, v.clone())));
                    m.attrs = d.attrs.clone();
                    m.charge.add(d.charge);
                    m
                }
            });
        }
        let base = st.committed.clone();
        drop(st);
        if let Some(dirty) = merged {
            items.push(SyncItem { dn, dirty, base, written: BTreeMap::new() });
        }
    }
    // Level-0 data blocks, in parallel.
    let data_spec = WriteSpec { compression: props.compression, checksum: props.checksum, copies: props.copies, level: 0, otype: 0, metadata: false };
    let jobs: Vec<DataJob> = items
        .iter()
        .enumerate()
        .flat_map(|(i, it)| it.dirty.blocks.iter().map(move |(&b, d)| (i, b, d.clone(), it.dirty.attrs.otype, it.dirty.attrs.metadata)))
        .collect();
    let is_mos = inner.id == MOS_OBJSET_ID;
    let spec_for = |otype: u8, metadata: bool| {
        if is_mos {
            WriteSpec { otype, ..s.meta_spec(props.copies) }
        } else {
            // A dataset's maps (directories, attributes) keep its copies and
            // compression but are placed with metadata.
            WriteSpec { otype, metadata, ..data_spec }
        }
    };
    let results: Vec<(usize, u64, std::result::Result<BlockPtr, tarn_block::BlockError>, u64)> =
        crate::par::par_map(&jobs, |(i, b, d, ot, meta)| (*i, *b, s.io.write(d, spec_for(*ot, *meta), txg), d.len() as u64));
    let mut used_delta: i64 = 0;
    let mut logical_delta: i64 = 0;
    let mut data_logical_delta: i64 = 0;
    let mut data_delta: i64 = 0;
    for (i, b, r, lsize) in results {
        let bp = r.map_err(block_err)?;
        if !bp.is_hole() {
            used_delta += bp.asize() as i64;
            logical_delta += lsize as i64;
            if !items[i].dirty.attrs.metadata {
                data_logical_delta += lsize as i64;
                data_delta += bp.asize() as i64;
            }
        }
        items[i].written.insert(b, bp);
    }
    // Trees, bottom-up; then the new dnodes into the meta-object.
    let prev_snap_txg = inner.committed.lock().prev_snap_txg;
    let mut ctx = TreeCtx::new(&s.io, txg, s.meta_spec(props.copies), prev_snap_txg);
    let mut new_dnodes: BTreeMap<u64, DnodePhys> = BTreeMap::new();
    let mut object_delta: i64 = 0;
    for it in &mut items {
        ctx.used_delta = 0;
        let mut phys = it.base.clone();
        let mut used = phys.used_bytes as i64;
        let was_in_use = phys.in_use();
        ctx.counting_data = phys.flags & DN_METADATA == 0;
        if it.dirty.freed || !it.dirty.attrs.exists {
            for bp in phys.bps {
                ctx.free_subtree(&bp, phys.nlevels - 1)?;
            }
            phys = DnodePhys::empty();
            used = 0;
            used_delta += ctx.used_delta;
            ctx.used_delta = 0;
        }
        let a = &it.dirty.attrs;
        if a.exists {
            if !phys.in_use() {
                phys = DnodePhys::empty();
                phys.flags = DN_IN_USE;
            }
            phys.otype = a.otype;
            phys.block_size = a.block_size;
            phys.bonus = a.bonus;
            phys.flags = if a.metadata { phys.flags | DN_METADATA } else { phys.flags & !DN_METADATA };
            ctx.counting_data = !a.metadata;
            let written_used: i64 = it.written.values().map(|b| b.asize() as i64).sum();
            let ch = Changes { frees: std::mem::take(&mut it.dirty.frees), writes: std::mem::take(&mut it.written) };
            ctx.apply(&mut phys, &ch)?;
            phys.used_bytes = (used + written_used + ctx.used_delta).max(0) as u64;
        } else {
            // Created and freed before reaching disk: its fresh blocks are garbage.
            for bp in it.written.values() {
                ctx.free(bp);
            }
        }
        object_delta += phys.in_use() as i64 - was_in_use as i64;
        used_delta += ctx.used_delta;
        it.base = phys.clone();
        new_dnodes.insert(it.dn.id.0, phys);
    }
    ctx.used_delta = 0;
    // Meta-object blocks holding the changed dnodes.
    let mut committed = inner.committed.lock().clone();
    let mut meta_blocks: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for (&id, phys) in &new_dnodes {
        let blkid = id / DNODES_PER_BLOCK;
        if let std::collections::btree_map::Entry::Vacant(e) = meta_blocks.entry(blkid) {
            let bp = tree::lookup(&s.io, &committed.meta, blkid)?;
            let data = if bp.is_hole() { vec![0u8; META_BLOCK_SIZE as usize] } else { s.io.read(&bp).map_err(block_err)?.as_ref().clone() };
            e.insert(data);
        }
        let slot = (id % DNODES_PER_BLOCK) as usize * DNODE_SIZE;
        let blk = meta_blocks.get_mut(&blkid).expect("inserted");
        phys.encode(&mut blk[slot..slot + DNODE_SIZE]);
    }
    let meta_spec = WriteSpec { otype: crate::format::OT_META_DNODE, ..s.meta_spec(props.copies) };
    let meta_written: Vec<(u64, std::result::Result<BlockPtr, tarn_block::BlockError>)> =
        {
        let list: Vec<(&u64, &Vec<u8>)> = meta_blocks.iter().collect();
        crate::par::par_map(&list, |(b, d)| (**b, s.io.write(d, meta_spec, txg)))
    };
    let mut ch = Changes::default();
    for (b, r) in meta_written {
        let bp = r.map_err(block_err)?;
        ctx.used_delta += bp.asize() as i64;
        ch.writes.insert(b, bp);
    }
    ctx.apply(&mut committed.meta, &ch)?;
    committed.next_object = committed.next_object.max(inner.next_object.load(Ordering::Relaxed));
    if is_mos {
        committed.next_objset = committed.next_objset.max(s.next_objset.load(Ordering::Relaxed));
    }
    // The old root block goes in this txg; the new one is written last. A
    // root is never shared (a snapshot keeps the root it was taken from and
    // gives the head a new one), and roots are not counted in used_bytes.
    let old_root = *inner.root_bp.lock();
    if !old_root.is_hole() {
        s.io.free(&old_root, txg);
    }
    // Blocks still held by the newest snapshot: onto the dead list.
    let dead = std::mem::take(&mut ctx.dead);
    if !dead.is_empty() {
        if committed.deadlist == 0 {
            return Err(ObjError::Corrupt(format!("object set {} has a snapshot but no dead list", inner.id.0)));
        }
        crate::snap::deadlist_append(s, txg, committed.deadlist, &dead)?;
    }
    committed.used_bytes = (committed.used_bytes as i64 + used_delta + ctx.used_delta).max(0) as u64;
    committed.logical_bytes = (committed.logical_bytes as i64 + logical_delta + ctx.logical_delta).max(0) as u64;
    committed.data_logical = (committed.data_logical as i64 + data_logical_delta + ctx.data_logical_delta).max(0) as u64;
    committed.data_bytes = (committed.data_bytes as i64 + data_delta + ctx.data_delta).max(0) as u64;
    committed.object_count = (committed.object_count as i64 + object_delta).max(0) as u64;
    let spec = WriteSpec { otype: OT_OBJSET, ..s.meta_spec(props.copies) };
    // The root's own size is known only after writing it: account a fixed
    // estimate first, then correct the stored value is impossible without a
    // rewrite, so the root block is not counted in used_bytes.
    let root_data = committed.encode();
    let root_bp = s.io.write(&root_data, spec, txg).map_err(block_err)?;
    Ok(ObjsetSync { inner: inner.clone(), items, new_phys: committed, root_bp })
}

fn publish(s: &Shared, r: ObjsetSync, txg: Txg) {
    *r.inner.committed.lock() = r.new_phys;
    *r.inner.root_bp.lock() = r.root_bp;
    for it in r.items {
        let mut st = it.dn.st.lock();
        st.committed = it.base;
        let done: Vec<Txg> = st.dirty.range(..=txg).map(|(&t, _)| t).collect();
        for t in done {
            if let Some(d) = st.dirty.remove(&t) {
                r.inner.discharge(s, d.charge);
            }
        }
    }
    let mut od = r.inner.object_delta.lock();
    let done: Vec<Txg> = od.range(..=txg).map(|(&t, _)| t).collect();
    for t in done {
        od.remove(&t);
    }
}

fn condense_spacemap(s: &Shared, txg: Txg, records: Vec<tarn_block::alloc::Record>) -> Result<(BlockPtr, Vec<BlockPtr>, u64)> {
    let _ = records; // the snapshot below supersedes them
    let old_blocks = s.root.lock().spacemap_blocks.clone();
    for bp in &old_blocks {
        s.io.free(bp, txg);
    }
    let _ = s.io.alloc.lock().take_records();
    // Snapshot: allocated extents (deferred and checkpoint-held count as
    // allocated), deferred frees, held extents. write_log adds the
    // snapshot's own allocations to the records.
    let recs = s.io.alloc.lock().snapshot_records();
    let (head, written) = spacemap::write_log(&s.io, txg, BlockPtr::HOLE, recs.clone(), true).map_err(block_err)?;
    let n = recs.len() as u64 + written.len() as u64 * spacemap::LOG_COPIES as u64;
    Ok((head, written, n))
}
