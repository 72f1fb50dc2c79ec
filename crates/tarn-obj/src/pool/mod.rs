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
//! The sync runs every `txg_timeout`, when dirty data (with the intent
//! log's uncommitted records) passes `dirty_data_sync_percent` of
//! `dirty_data_max`, or when someone calls `sync()`. Writers are throttled
//! smoothly from `DELAY_DIRTY_PERCENT` and stopped at 100% until a sync
//! finishes (txg.rs).
//!
//! Where things are: `txg.rs` opens transactions (the txg switch and the
//! write throttle) and waits for syncs; `sync_thread.rs` decides when a txg
//! is quiesced and synced; `syncing.rs` writes one txg out (object sets,
//! the MOS, the space map log, the uberblock) and publishes it; `import.rs`
//! opens a pool from its devices; `space.rs` holds the space and dirty-data
//! counters users see; `prefetch.rs` runs read-ahead jobs.

mod hot;
mod import;
mod prefetch;
mod space;
mod sync_thread;
mod sync_tx;
mod syncing;
pub(crate) use syncing::discard_dirty;
mod txg;

use std::collections::{BTreeMap, HashMap, HashSet};

/// An object set destroyed in a txg, kept until that txg is written.
type DestroyedObjset = (ObjsetId, Arc<ObjsetInner>);
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Condvar, Mutex, RwLock};
use tarn_block::{BlockIo, BlockPtr, WriteSpec};
use tarn_dev::Device;
use tarn_vdev::{PoolConfig, PoolState, TopConfig, TopVdev};

use crate::format::{ObjsetPhys, OT_OBJSET_TABLE};
use crate::objset::{ObjectSet, ObjsetInner};
use crate::tree::block_err;
use crate::*;

pub(crate) use prefetch::PrefetchJob;
pub(crate) use sync_tx::SyncTx;
pub(crate) use syncing::{condense_now, spacemap_extents, ObjsetSync};
pub(crate) use txg::{begin_tx, sync_and_wait, DEFER_TXGS};

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
    /// Keys of encrypted object sets, by key guid (crypt.rs).
    pub keys: crate::crypt::KeyRing,
    pub readonly: bool,
    pub config: Mutex<PoolConfig>,
    /// A feature was added to `config`: the next sync writes the labels
    /// before its uberblock (so no pool state that uses a feature is ever
    /// the newest while the labels do not list it).
    pub features_dirty: AtomicBool,
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
    /// The txg being synced while a `SyncTx` lives, else 0 (sync_tx.rs).
    pub syncing_txg: AtomicU64,
    pub synced_txg: AtomicU64,
    pub dirty_bytes: AtomicU64,
    /// The throttle delayed a writer since the sync thread last looked
    /// (txg.rs: the sync then keeps going while much is dirty).
    pub behind: AtomicBool,
    /// Raw space the dirty data may take when written (see space.rs).
    pub dirty_asize: AtomicU64,
    /// While a txg is written: the free space and the dirty charges when
    /// its sync began (charge 0: no sync under way). What the sync has
    /// allocated since is still in `dirty_asize` until it publishes; the
    /// space checks count it once (space.rs, `sync_credit`).
    pub sync_free_start: AtomicU64,
    pub sync_charge_start: AtomicU64,
    /// Space taken outside the sync since it began (intent-log blocks).
    pub sync_other_alloc: AtomicU64,
    /// Charges the sync has given back so far (as it publishes): the
    /// credit shrinks by them, so a txg is counted once through publish.
    pub sync_discharged: AtomicU64,
    /// ENOSPC answers since import, indexed by `space::NoSpaceSite`: for
    /// a refusal to say which check made it.
    pub nospace: [AtomicU64; 3],
    pub meta_charges: Mutex<crate::space::MetaCharges>,
    pub dirty_objsets: Mutex<BTreeMap<Txg, HashSet<ObjsetId>>>,
    pub objsets: Mutex<HashMap<ObjsetId, Arc<ObjsetInner>>>,
    pub mos: Arc<ObjsetInner>,
    pub root: Mutex<RootState>,
    pub sync_lock: Mutex<()>,
    /// Read on every change: atomics, no lock (hot.rs).
    pub tunables: hot::TunableCell,
    /// Signals the sync thread (work to do) and waiters (a txg synced).
    pub cv_lock: Mutex<SyncSignal>,
    pub cv_sync: Condvar,
    pub cv_done: Condvar,
    pub shutdown: AtomicBool,
    /// A writer about to answer `NoSpace` asks the next sync to condense
    /// the space map log, whose blocks are space the pool can give back
    /// (space.rs, `reserve_space`).
    pub condense_wanted: AtomicBool,
    pub next_objset: AtomicU64,
    pub created_objsets: Mutex<BTreeMap<Txg, Vec<ObjsetId>>>,
    pub destroyed_objsets: Mutex<BTreeMap<Txg, Vec<DestroyedObjset>>>,
    /// Snapshot operations to apply at the end of each txg (see snap.rs).
    pub snap_ops: Mutex<BTreeMap<Txg, Vec<crate::snap::SnapOp>>>,
    pub last_error: Mutex<Option<String>>,
    /// Set when a txg could not be written: the pool stops syncing and
    /// refuses changes; what is on disk stays as of the last synced txg.
    pub suspended: hot::Suspension,
    /// Background readers for prefetch (plain threads; see par.rs for why not rayon).
    pub prefetch_queue: Mutex<Option<std::sync::mpsc::Sender<PrefetchJob>>>,
    pub prefetched_blocks: AtomicU64,
    /// Prefetch jobs queued and not yet finished.
    pub prefetch_pending: Arc<AtomicU64>,
    /// Readers of committed trees hold this shared; releasing deferred
    /// frees (which makes their space reusable) takes it exclusively, so no
    /// reader can follow a stale pointer into reallocated space.
    pub reader_gate: RwLock<()>,
    /// The pool checkpoint (see checkpoint.rs).
    pub ckpt: crate::checkpoint::State,
    /// Manual trim and autotrim (see trim.rs).
    pub trim: crate::trim::Trimmer,
    /// The object sets' intent logs (zil/).
    pub logs: crate::zil::PoolLogs,
    /// What the import had to give up (`import -m`: log records on a
    /// missing log device), one line each.
    pub import_notes: Mutex<Vec<String>>,
    /// Log vdevs being removed: no new log blocks go there.
    pub log_removing: Mutex<Vec<u32>>,
    /// The L2ARC on this pool's cache devices (l2arc/, cache_vdevs.rs).
    pub l2: Arc<crate::l2arc::PoolL2>,
    /// Summaries of the dead lists (deadlist_cache.rs).
    pub deadlists: crate::deadlist_cache::DeadlistCache,
}

#[derive(Default)]
pub(crate) struct SyncSignal {
    pub wanted: Txg,
}

impl Shared {
    /// Records that the pool uses `feature` (`PoolConfig.features`); the
    /// labels list it from the sync of the txg that first uses it.
    pub(crate) fn use_feature(&self, feature: &str) {
        let mut config = self.config.lock();
        if !config.features.contains(feature) {
            config.features.insert(feature.to_string());
            self.features_dirty.store(true, Ordering::SeqCst);
        }
    }

    pub fn note_dirty_objset(&self, txg: Txg, id: ObjsetId) {
        self.dirty_objsets.lock().entry(txg).or_default().insert(id);
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
    WriteProps { compression: Compression::Lz4, checksum: ChecksumKind::Fletcher4, copies: 1, primarycache: crate::CachePolicy::All, secondarycache: crate::CachePolicy::All }
}

impl ObjPool {
    pub fn create(cfg: PoolCreate) -> Result<Arc<ObjPool>> {
        Self::create_with_logs(cfg, vec![])
    }

    /// `pool create ... log ...`: the pool's vdevs, then `logs` as log
    /// vdevs (disks or mirrors) after them.
    pub fn create_with_logs(cfg: PoolCreate, logs: Vec<TopDevices>) -> Result<Arc<ObjPool>> {
        Self::create_with_devices(cfg, logs, vec![])
    }

    /// `pool create ... log ... cache ...`: as `create_with_logs`, and
    /// `cache` as cache devices (L2ARC, cache_vdevs.rs).
    pub fn create_with_devices(cfg: PoolCreate, logs: Vec<TopDevices>, cache: Vec<(String, Arc<dyn Device>)>) -> Result<Arc<ObjPool>> {
        if !(9..=16).contains(&cfg.ashift) {
            return Err(ObjError::Invalid(format!("ashift {} is outside 9..16", cfg.ashift)));
        }
        if cfg.tops.is_empty() {
            return Err(ObjError::Invalid("a pool needs at least one vdev".into()));
        }
        let pool_guid = random_guid();
        let mut tops_cfg = Vec::new();
        let mut all_devs: Vec<(u32, u64, Arc<dyn Device>)> = Vec::new();
        crate::log_vdevs::check_log_kinds(&logs)?;
        let normal = cfg.tops.len();
        let all_tops: Vec<&TopDevices> = cfg.tops.iter().chain(logs.iter()).collect();
        for (i, (kind, devs)) in all_tops.iter().enumerate() {
            let class = if i < normal { tarn_vdev::TopClass::Normal } else { tarn_vdev::TopClass::Log };
            let sizes: Vec<u64> = devs.iter().map(|(_, d)| d.size()).collect();
            let asize = TopVdev::compute_asize(kind, cfg.ashift, &sizes)?;
            let children: Vec<tarn_vdev::LeafConfig> =
                devs.iter().map(|(p, _)| tarn_vdev::LeafConfig::new(random_guid(), p.clone())).collect();
            for (c, (_, d)) in children.iter().zip(devs) {
                all_devs.push((i as u32, c.guid, d.clone()));
            }
            tops_cfg.push(TopConfig { id: i as u32, guid: random_guid(), kind: kind.clone(), ashift: cfg.ashift, asize, children, class });
        }
        let cache_leaves: Vec<Arc<tarn_vdev::LeafVdev>> =
            cache.iter().map(|(p, d)| Arc::new(tarn_vdev::LeafVdev::new(random_guid(), p.clone(), Some(d.clone())))).collect();
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
            cache: cache_leaves.iter().map(|l| tarn_vdev::LeafConfig::new(l.guid, l.path.clone())).collect(),
            generation: 1,
            features: Default::default(),
        };
        for l in &cache_leaves {
            if let Some(d) = l.device() {
                all_devs.push((tarn_vdev::CACHE_TOP_ID, l.guid, d));
            }
        }
        for (top_id, leaf_guid, d) in &all_devs {
            tarn_vdev::write_label(d.as_ref(), &tarn_vdev::Label { config: config.clone(), top_id: *top_id, leaf_guid: *leaf_guid })?;
        }
        let mut tops = Vec::new();
        for (tc, (_, devs)) in tops_cfg.iter().zip(all_tops) {
            tops.push(Arc::new(TopVdev::new(tc.clone(), devs.iter().map(|(_, d)| Some(d.clone())).collect())?));
        }
        let alloc = crate::log_vdevs::new_allocator(&tops);
        let io = BlockIo::new(tops, alloc);
        let mos = ObjsetInner::new(MOS_OBJSET_ID, ObjsetPhys::new(0), default_props(), BlockPtr::HOLE);
        let shared = Self::shared(io, config, vec![], mos, 1, RootState { spacemap_head: BlockPtr::HOLE, spacemap_records: 0, spacemap_blocks: vec![] }, false);
        let pool = Self::start(shared);
        {
            let tx = pool.begin();
            let mos = pool.mos();
            mos.create_with_id(&tx, MOS_OBJSET_TABLE, ObjType(OT_OBJSET_TABLE), 16384, &[0; BONUS_LEN])?;
        }
        pool.sync()?;
        crate::cache_vdevs::bring_in(&pool.shared, cache_leaves)?;
        Ok(pool)
    }

    fn shared(io: BlockIo, config: PoolConfig, spares: Vec<Arc<tarn_vdev::LeafVdev>>, mos: Arc<ObjsetInner>, open_txg: Txg, root: RootState, readonly: bool) -> Arc<Shared> {
        let next_objset = mos.committed.lock().next_objset;
        let l2 = crate::l2arc::PoolL2::new(config.pool_guid, io.cache_id());
        let scanner = crate::scan::Scanner::new();
        let queue = scanner.queue.clone();
        io.set_free_hook(Some(Arc::new(move |bp: &BlockPtr, txg: Txg| queue.lock().freed(bp, txg))));
        Arc::new(Shared {
            keys: Default::default(),
            io,
            readonly,
            config: Mutex::new(config),
            features_dirty: AtomicBool::new(false),
            spares: Mutex::new(spares),
            scanner,
            client_ops: AtomicU64::new(0),
            failmode_wait: AtomicBool::new(false),
            txg_lock: Arc::new(RwLock::new(())),
            open_txg: AtomicU64::new(open_txg),
            syncing_txg: AtomicU64::new(0),
            synced_txg: AtomicU64::new(open_txg - 1),
            dirty_bytes: AtomicU64::new(0),
            behind: AtomicBool::new(false),
            dirty_asize: AtomicU64::new(0),
            sync_free_start: AtomicU64::new(0),
            sync_charge_start: AtomicU64::new(0),
            sync_other_alloc: AtomicU64::new(0),
            sync_discharged: AtomicU64::new(0),
            nospace: Default::default(),
            meta_charges: Mutex::new(Default::default()),
            dirty_objsets: Mutex::new(BTreeMap::new()),
            objsets: Mutex::new(HashMap::new()),
            mos,
            root: Mutex::new(root),
            sync_lock: Mutex::new(()),
            tunables: hot::TunableCell::new(Tunables::default()),
            cv_lock: Mutex::new(SyncSignal::default()),
            cv_sync: Condvar::new(),
            cv_done: Condvar::new(),
            shutdown: AtomicBool::new(false),
            condense_wanted: AtomicBool::new(false),
            next_objset: AtomicU64::new(next_objset),
            created_objsets: Mutex::new(BTreeMap::new()),
            destroyed_objsets: Mutex::new(BTreeMap::new()),
            snap_ops: Mutex::new(BTreeMap::new()),
            last_error: Mutex::new(None),
            suspended: hot::Suspension::default(),
            prefetch_queue: Mutex::new(None),
            prefetched_blocks: AtomicU64::new(0),
            prefetch_pending: Arc::new(AtomicU64::new(0)),
            reader_gate: RwLock::new(()),
            ckpt: crate::checkpoint::State::default(),
            trim: crate::trim::Trimmer::default(),
            logs: Default::default(),
            import_notes: Mutex::new(Vec::new()),
            log_removing: Mutex::new(Vec::new()),
            l2,
            deadlists: Default::default(),
        })
    }

    fn start(shared: Arc<Shared>) -> Arc<ObjPool> {
        let weak: Weak<Shared> = Arc::downgrade(&shared);
        let thread = std::thread::Builder::new()
            .name("tarn-txg-sync".into())
            .spawn(move || sync_thread::sync_thread(weak))
            .expect("spawn sync thread");
        Arc::new(ObjPool { shared, thread: Mutex::new(Some(thread)) })
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

    pub fn mos(&self) -> ObjectSet {
        ObjectSet { shared: self.shared.clone(), inner: self.shared.mos.clone() }
    }

    pub fn create_objset(&self, tx: &Tx) -> Result<ObjsetId> {
        self.create_objset_with(tx, None)
    }

    /// A new object set, encrypted with `crypt` when given: every block of
    /// it is sealed with the keys loaded under `crypt.key_guid`, which must
    /// be loaded (crypt.rs).
    pub fn create_objset_with(&self, tx: &Tx, crypt: Option<crate::crypt::Crypt>) -> Result<ObjsetId> {
        if let Some(c) = crypt {
            if self.shared.keys.get(c.key_guid).is_none() {
                return Err(ObjError::KeyNotLoaded);
            }
        }
        self.create_objset_inner(tx, crypt)
    }

    /// A new encrypted object set for a raw receive: its key need not be
    /// loaded (raw.rs; its first root carries the stream's MAC).
    pub fn create_objset_raw(&self, tx: &Tx, crypt: crate::crypt::Crypt) -> Result<ObjsetId> {
        self.create_objset_inner(tx, Some(crypt))
    }

    fn create_objset_inner(&self, tx: &Tx, crypt: Option<crate::crypt::Crypt>) -> Result<ObjsetId> {
        if self.shared.readonly {
            return Err(ObjError::ReadOnly);
        }
        if crypt.is_some() {
            self.shared.use_feature(tarn_vdev::FEATURE_ENCRYPTION);
        }
        let id = ObjsetId(self.shared.next_objset.fetch_add(1, Ordering::Relaxed));
        let mut phys = ObjsetPhys::new(1);
        phys.crypt = crypt;
        let inner = ObjsetInner::new(id, phys, default_props(), BlockPtr::HOLE);
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

    /// Loads the keys of the object sets encrypted under `key_guid`.
    pub fn load_keys(&self, key_guid: u64, keys: Arc<tarn_block::BlockKeys>) {
        self.shared.keys.insert(key_guid, keys);
    }

    pub fn keys_loaded(&self, key_guid: u64) -> bool {
        self.shared.keys.get(key_guid).is_some()
    }

    /// Unloads the keys under `key_guid`: syncs, so nothing of theirs is
    /// left to write, then drops the decrypted attributes (dnode handles)
    /// of their object sets and forgets the keys. Their blocks read from
    /// then on fail with `KeyNotLoaded`. Refused while one of them still
    /// has changes after the sync (something writes to it).
    pub fn unload_keys(&self, key_guid: u64) -> Result<()> {
        let Some(keys) = self.shared.keys.get(key_guid) else {
            return Err(ObjError::KeyNotLoaded);
        };
        self.sync()?;
        let sets: Vec<Arc<ObjsetInner>> =
            self.shared.objsets.lock().values().filter(|o| o.crypt.is_some_and(|c| c.key_guid == key_guid)).cloned().collect();
        for o in &sets {
            if !o.dirty.lock().is_empty() {
                return Err(ObjError::Invalid(format!("object set {} is being written", o.id.0)));
            }
        }
        for o in &sets {
            if !o.forget_opened() {
                return Err(ObjError::Invalid(format!("object set {} is being written", o.id.0)));
            }
        }
        // No plaintext opened with these keys stays in the ARC.
        self.shared.io.drop_keyed(&keys);
        self.shared.keys.remove(key_guid);
        Ok(())
    }

    /// `failmode`: wait (true) or continue (false, the library default;
    /// the dataset layer applies the pool property, whose default is wait).
    pub fn set_failmode_wait(&self, wait: bool) {
        self.shared.failmode_wait.store(wait, Ordering::Relaxed);
    }

    /// Why the pool is suspended, if it is.
    pub fn suspended(&self) -> Option<String> {
        self.shared.suspended.why()
    }

    pub fn export(&self) -> Result<()> {
        crate::scan::stop(&self.shared);
        crate::trim::stop(&self.shared);
        if self.suspended().is_none() {
            self.sync()?;
        }
        self.stop_thread();
        let s = &self.shared;
        if !s.readonly && !s.suspended.is_set() {
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
        for leaf in s.l2.leaves() {
            leaf.close();
        }
        Ok(())
    }

    fn stop_thread(&self) {
        crate::scan::stop(&self.shared);
        crate::trim::stop(&self.shared);
        self.shared.prefetch_queue.lock().take();
        crate::zil::stop(&self.shared);
        self.shared.l2.stop();
        self.shared.shutdown.store(true, Ordering::Relaxed);
        self.shared.cv_sync.notify_all();
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }

    pub fn status(&self) -> PoolStatus {
        let s = &self.shared;
        let all = s.io.tops();
        let normal: Vec<&Arc<TopVdev>> = all.iter().filter(|t| !t.is_log() && !t.is_hole()).collect();
        let logs: Vec<&Arc<TopVdev>> = all.iter().filter(|t| t.is_log() && !t.is_hole()).collect();
        let tops: Vec<tarn_vdev::TopStatus> = normal.iter().map(|t| t.status()).collect();
        let mut states: Vec<DevState> = normal.iter().map(|t| t.state()).collect();
        // A log vdev that is gone costs the pool nothing but the log's
        // speed (its records fall back to the main vdevs): degraded.
        states.extend(logs.iter().map(|t| t.state()).map(|st| if st == DevState::Online { st } else { DevState::Degraded }));
        let state = if states.contains(&DevState::Unavail) {
            DevState::Unavail
        } else if states.iter().any(|st| *st != DevState::Online) {
            DevState::Degraded
        } else {
            DevState::Online
        };
        let suspended = s.suspended.why();
        PoolStatus {
            name: self.name(),
            guid: self.guid(),
            state: if suspended.is_some() { DevState::Unavail } else { state },
            txg: s.synced_txg.load(Ordering::Acquire),
            tops,
            logs: logs.iter().map(|t| t.status()).collect(),
            spares: self.spares(),
            cache: s.l2.status(),
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
        let old = self.shared.tunables.store(t);
        if (old.arc_max, old.arc_min) != (t.arc_max, t.arc_min) {
            // The ARC is one for the process (tarn-block's arc.rs).
            tarn_block::arc().set_limits(t.arc_max, t.arc_min);
        }
        // So is the L2ARC's feed rate.
        crate::l2arc::set_write_limits(t.l2arc_write_max, t.l2arc_write_boost);
        self.shared.cv_sync.notify_all();
    }

    pub fn tunables(&self) -> Tunables {
        self.shared.tunables.load()
    }

    pub fn last_synced_txg(&self) -> Txg {
        self.shared.synced_txg.load(Ordering::Acquire)
    }

    pub fn check(&self) -> CheckReport {
        let _ = self.sync();
        let _g = self.shared.sync_lock.lock();
        crate::check::check(&self.shared, None)
    }

    /// [`ObjPool::check`], and every object set of the table that `named`
    /// (the ids the caller's records name) does not hold is an orphan: a
    /// leak no dataset, snapshot or receive accounts for.
    pub fn check_named(&self, named: &std::collections::BTreeSet<u64>) -> CheckReport {
        let _ = self.sync();
        let _g = self.shared.sync_lock.lock();
        crate::check::check(&self.shared, Some(named))
    }

}

impl Drop for ObjPool {
    fn drop(&mut self) {
        self.stop_thread();
    }
}
