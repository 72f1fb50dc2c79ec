//! Object sets in memory: dnode handles, their per-txg dirty state, and the
//! read and write paths.
//!
//! Big theory:
//! - Each dnode keeps `committed` (its DnodePhys as of the last synced txg)
//!   and `dirty[txg]` for every txg not yet synced: level-0 buffers, free
//!   ranges, and its attributes as of the end of that txg. The newest view is
//!   the newest dirty txg, else `committed`.
//! - Readers look through dirty txgs newest first, then the committed tree.
//!   Sync publishes the new committed tree *before* dropping the synced
//!   txg's dirty state, under the dnode lock, so a reader sees one or the other.
//! - Freed blocks stay intact for DEFER_TXGS txgs, so a reader that took a
//!   committed snapshot just before a publish still reads valid blocks.
//!
//! Lock order: txg hold (Tx) -> objset handle map shard -> dnode state.
//! The sync thread takes dnode locks without a Tx.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_block::{BlockIo, BlockPtr};

use crate::format::{DnodePhys, ObjsetPhys, DNODES_PER_BLOCK, DNODE_SIZE, DN_IN_USE, DN_METADATA};
use crate::pool::Shared;
use crate::space::Charge;
use crate::tree::{self, block_err};
use crate::{ObjError, ObjInfo, ObjType, ObjectId, ObjsetId, Result, Tx, Txg, WriteProps, BONUS_LEN, MAX_BLOCK_SIZE};

mod read;
pub use read::Segment;
mod write;

#[derive(Clone)]
pub(crate) struct Attrs {
    pub exists: bool,
    pub otype: u8,
    pub block_size: u32,
    pub bonus: [u8; BONUS_LEN],
    /// `DN_METADATA`: a map, not user data.
    pub metadata: bool,
}

impl Attrs {
    fn of(c: &DnodePhys) -> Attrs {
        Attrs { exists: c.in_use(), otype: c.otype, block_size: c.block_size, bonus: c.bonus, metadata: c.flags & DN_METADATA != 0 }
    }
}

#[derive(Clone)]
pub(crate) struct TxgDirty {
    pub blocks: BTreeMap<u64, Arc<Vec<u8>>>,
    pub frees: Vec<(u64, u64)>,
    pub attrs: Attrs,
    /// The object was freed (and its old tree must be released) in this txg.
    pub freed: bool,
    /// What this record's dirty blocks are charged (space.rs).
    pub charge: Charge,
    /// Blocks of `blocks` that are ciphertext from a raw receive, with
    /// their pointer fields (raw.rs): written as they are.
    pub raw: BTreeMap<u64, tarn_block::RawBlock>,
    /// Raw receive: the levels and block count the dnode must have.
    pub shape: Option<(u8, u64)>,
}

pub(crate) struct DnodeState {
    pub committed: DnodePhys,
    /// Boxed: a map node holds room for 11 entries, and most dnodes have
    /// one dirty txg at a time (a node of 11 inline records was 4 KiB).
    pub dirty: BTreeMap<Txg, Box<TxgDirty>>,
}

impl DnodeState {
    pub(crate) fn attrs(&self) -> Attrs {
        if let Some((_, d)) = self.dirty.iter().next_back() {
            return d.attrs.clone();
        }
        Attrs::of(&self.committed)
    }

    /// Upper bound of data blocks in the newest view.
    pub(crate) fn nblocks(&self) -> u64 {
        let mut n = self.committed.nblocks;
        for d in self.dirty.values() {
            if d.freed {
                n = 0;
            }
            for &(s, e) in &d.frees {
                if e >= n && s < n {
                    n = s;
                }
            }
            if let Some((&b, _)) = d.blocks.iter().next_back() {
                n = n.max(b + 1);
            }
        }
        n
    }
}

pub(crate) struct Dnode {
    pub id: ObjectId,
    pub st: Mutex<DnodeState>,
    /// Sequential-read detection: the block after the last read.
    pub next_read: AtomicU64,
    /// Blocks below this have been handed to the prefetcher.
    pub prefetched_to: AtomicU64,
    /// Consecutive sequential reads seen (a stream starts at 2).
    pub seq_hits: AtomicU64,
}

/// What a dirty txg says about one block, newest first.
enum Found {
    Data(Arc<Vec<u8>>),
    Hole,
    Committed(Box<DnodePhys>),
}

pub(crate) struct ObjsetInner {
    pub id: ObjsetId,
    pub props: Mutex<WriteProps>,
    /// `props.primarycache` (low two bits) and `props.secondarycache`
    /// (the next two), readable without the lock (every read asks).
    pub cache_policy: std::sync::atomic::AtomicU8,
    /// `logbias` (0 latency, 1 throughput), read by every logged write.
    pub logbias: std::sync::atomic::AtomicU8,
    /// Dnode handles, sharded by object id (handles.rs).
    pub handles: crate::handles::HandleMap,
    /// Root as of the last synced txg.
    pub committed: Mutex<ObjsetPhys>,
    pub next_object: AtomicU64,
    /// Dnodes dirty per txg.
    pub dirty: Mutex<BTreeMap<Txg, HashMap<ObjectId, Arc<Dnode>>>>,
    pub object_delta: Mutex<BTreeMap<Txg, i64>>,
    pub destroyed: std::sync::atomic::AtomicBool,
    /// A snapshot (or another view that must never change).
    pub readonly: std::sync::atomic::AtomicBool,
    /// Block pointer of the committed ObjsetPhys block.
    pub root_bp: Mutex<BlockPtr>,
    /// Bytes of this object set's dirty blocks not yet written (quotas
    /// count them: ZFS's temporary reservations).
    pub dirty_bytes: AtomicU64,
    /// Encrypted: cipher and key guid (fixed for the object set's life).
    pub crypt: Option<crate::crypt::Crypt>,
    /// The root's MAC was checked against the loaded key (crypt.rs);
    /// cleared when the key is unloaded.
    pub root_verified: std::sync::atomic::AtomicBool,
    /// A raw receive in progress (raw.rs).
    pub raw: Mutex<Option<crate::raw::RawState>>,
}

fn policy_bits(p: &WriteProps) -> u8 {
    p.primarycache as u8 | (p.secondarycache as u8) << 2
}

fn policy_from(bits: u8) -> crate::CachePolicy {
    match bits & 3 {
        0 => crate::CachePolicy::All,
        1 => crate::CachePolicy::Metadata,
        _ => crate::CachePolicy::None,
    }
}

pub(crate) const HANDLE_CACHE_MAX: usize = 65536;
/// An object set prunes its handles for the ARC's sake only past this many.
const HANDLE_PRUNE_MIN: usize = 64;
/// The same two limits per shard of the handle map.
const SHARD_HANDLES_MAX: usize = HANDLE_CACHE_MAX / crate::handles::HANDLE_SHARDS;
const SHARD_PRUNE_MIN: usize = HANDLE_PRUNE_MIN / crate::handles::HANDLE_SHARDS;
/// Memory one cached dnode handle takes (the handle, its `Arc`, its slot
/// in the map), charged to the ARC.
const HANDLE_BYTES: u64 = std::mem::size_of::<Dnode>() as u64 + 64;
const PREFETCH_BYTES: u64 = 8 << 20;

impl ObjsetInner {
    pub fn new(id: ObjsetId, phys: ObjsetPhys, props: WriteProps, root_bp: BlockPtr) -> Arc<ObjsetInner> {
        Arc::new(ObjsetInner {
            root_verified: std::sync::atomic::AtomicBool::new(false),
            raw: Mutex::new(None),
            crypt: phys.crypt,
            id,
            props: Mutex::new(props),
            cache_policy: std::sync::atomic::AtomicU8::new(policy_bits(&props)),
            logbias: std::sync::atomic::AtomicU8::new(0),
            handles: crate::handles::HandleMap::new(),
            next_object: AtomicU64::new(phys.next_object),
            committed: Mutex::new(phys),
            dirty: Mutex::new(BTreeMap::new()),
            object_delta: Mutex::new(BTreeMap::new()),
            destroyed: std::sync::atomic::AtomicBool::new(false),
            readonly: std::sync::atomic::AtomicBool::new(false),
            root_bp: Mutex::new(root_bp),
            dirty_bytes: AtomicU64::new(0),
        })
    }

    /// Give back a dirty record's charge (written, or thrown away).
    pub(crate) fn discharge(&self, s: &Shared, c: Charge) {
        let _ = self.dirty_bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(c.bytes)));
        s.undirty(c);
    }

    /// Give back the charge of a record the syncing txg wrote (or threw
    /// away with its object set): its sync's credit shrinks first.
    pub(crate) fn discharge_synced(&self, s: &Shared, c: Charge) {
        s.note_sync_discharge(c.asize);
        self.discharge(s, c);
    }

    /// The keys that seal this object set's blocks: None if it is not
    /// encrypted; `KeyNotLoaded` if it is and its key is not loaded.
    pub(crate) fn keys(&self, s: &Shared) -> Result<Option<Arc<tarn_block::BlockKeys>>> {
        let Some(c) = self.crypt else { return Ok(None) };
        let keys = s.keys.get(c.key_guid).ok_or(ObjError::KeyNotLoaded)?;
        if !self.root_verified.load(Ordering::Acquire) {
            // Once per key load: the root as read from disk must carry its
            // MAC (every later root is our own, made with the key).
            let bp = *self.root_bp.lock();
            crate::crypt::verify_root(&keys, &self.committed.lock(), &bp)
                .map_err(|e| ObjError::Io(format!("object set {}: {e}", self.id.0)))?;
            self.root_verified.store(true, Ordering::Release);
        }
        Ok(Some(keys))
    }

    /// Drops the dnodes held in memory (their attributes as opened with
    /// the key, or as stored) and has the root's MAC checked again at the
    /// next use of the key; false (nothing reset) if some are dirty.
    pub(crate) fn forget_opened(&self) -> bool {
        let (_, kept) = self.handles.drop_clean();
        if kept > 0 {
            return false;
        }
        self.root_verified.store(false, Ordering::Release);
        true
    }

    /// Read the on-disk DnodePhys of `id` from the committed meta tree.
    pub fn load_phys(&self, s: &Shared, id: ObjectId) -> Result<DnodePhys> {
        // A raw receive reads the dnodes as stored (bonuses sealed).
        let keys = if self.raw.lock().is_some() { None } else { self.keys(s)? };
        let io = &s.io;
        let _gate = s.reader_gate.read();
        let meta = self.committed.lock().meta.clone();
        let blkid = id.0 / DNODES_PER_BLOCK;
        let bp = tree::lookup(io, &meta, blkid)?;
        if bp.is_hole() {
            return Ok(DnodePhys::empty());
        }
        let data = crate::crypt::opened_dnode_block(keys.as_deref(), &bp, blkid, io.read(&bp).map_err(block_err)?)?;
        let slot = (id.0 % DNODES_PER_BLOCK) as usize * DNODE_SIZE;
        DnodePhys::decode(data.get(slot..slot + DNODE_SIZE).ok_or_else(|| ObjError::Corrupt("short dnode block".into()))?)
    }

    pub fn handle(&self, s: &Shared, id: ObjectId) -> Result<Arc<Dnode>> {
        if let Some(h) = self.handles.get(id) {
            return Ok(h);
        }
        let mut map = self.handles.write_shard(id);
        if let Some(h) = map.get(&id) {
            return Ok(h.clone());
        }
        // Handles are charged to the ARC; past their share of it (or the
        // per-object-set cap) the ones nobody uses are dropped.
        if map.len() >= SHARD_HANDLES_MAX || (map.len() >= SHARD_PRUNE_MIN && tarn_block::arc().meta_over_budget()) {
            let before = map.len();
            map.retain(|_, h| Arc::strong_count(h) > 1 || !h.st.lock().dirty.is_empty());
            tarn_block::arc().charge_meta(-(((before - map.len()) as u64 * HANDLE_BYTES) as i64));
        }
        let phys = self.load_phys(s, id)?;
        let h = Arc::new(Dnode {
            id,
            st: Mutex::new(DnodeState { committed: phys, dirty: BTreeMap::new() }),
            next_read: AtomicU64::new(u64::MAX),
            prefetched_to: AtomicU64::new(0),
            seq_hits: AtomicU64::new(0),
        });
        map.insert(id, h.clone());
        tarn_block::arc().charge_meta(HANDLE_BYTES as i64);
        Ok(h)
    }
}

impl Drop for ObjsetInner {
    fn drop(&mut self) {
        let n = self.handles.len_mut() as u64;
        tarn_block::arc().charge_meta(-((n * HANDLE_BYTES) as i64));
    }
}

/// A handle on one object set.
#[derive(Clone)]
pub struct ObjectSet {
    pub(crate) shared: Arc<Shared>,
    pub(crate) inner: Arc<ObjsetInner>,
}

impl ObjectSet {
    /// Refuses every change from now on (snapshots).
    pub fn mark_readonly(&self) {
        self.inner.readonly.store(true, Ordering::Relaxed);
    }

    pub fn id(&self) -> ObjsetId {
        self.inner.id
    }

    pub fn set_write_props(&self, p: WriteProps) {
        let mut g = self.inner.props.lock();
        *g = p;
        self.inner.cache_policy.store(policy_bits(&p), Ordering::Relaxed);
    }

    /// `primarycache` of this object set.
    pub(crate) fn cache_policy(&self) -> crate::CachePolicy {
        policy_from(self.inner.cache_policy.load(Ordering::Relaxed))
    }

    /// `secondarycache` of this object set.
    pub(crate) fn l2_policy(&self) -> crate::CachePolicy {
        policy_from(self.inner.cache_policy.load(Ordering::Relaxed) >> 2)
    }

    /// Sets `logbias` (see `LogBias`).
    pub fn set_logbias(&self, bias: crate::LogBias) {
        self.inner.logbias.store(bias as u8, Ordering::Relaxed);
    }

    pub fn logbias(&self) -> crate::LogBias {
        match self.inner.logbias.load(Ordering::Relaxed) {
            0 => crate::LogBias::Latency,
            _ => crate::LogBias::Throughput,
        }
    }

    pub fn write_props(&self) -> WriteProps {
        *self.inner.props.lock()
    }

    pub(crate) fn io(&self) -> &BlockIo {
        &self.shared.io
    }

    /// Copies this object set's blocks are written with (the MOS: metadata's).
    fn copies(&self) -> u8 {
        let copies = self.inner.props.lock().copies;
        if self.inner.id == crate::pool::MOS_OBJSET_ID {
            self.shared.meta_spec(copies).copies
        } else {
            copies
        }
    }

    pub(crate) fn charge_of(&self, len: u64) -> Charge {
        self.shared.block_charge(len, self.copies())
    }

    pub(crate) fn add_charge(&self, d: &mut TxgDirty, c: Charge) {
        d.charge.add(c);
        self.inner.dirty_bytes.fetch_add(c.bytes, Ordering::Relaxed);
        self.shared.add_dirty(c);
    }

    pub(crate) fn drop_charge(&self, d: &mut TxgDirty, c: Charge) {
        d.charge.sub(c);
        self.inner.discharge(&self.shared, c);
    }

    /// Bytes of this object set's changes not yet written out.
    pub fn dirty_bytes(&self) -> u64 {
        self.inner.dirty_bytes.load(Ordering::Relaxed)
    }

    /// Before a change that adds `bytes` of new data, outside any
    /// transaction: waits (syncing txgs) until the pool can take them, or
    /// answers `NoSpace` when nothing pending can make room (space.rs).
    pub fn reserve(&self, bytes: u64) -> Result<()> {
        self.check_writable()?;
        let charge = self.charge_of(bytes);
        self.shared.reserve_space(charge.asize)
    }

    fn check_writable(&self) -> Result<()> {
        if let Some(m) = self.shared.suspended.why() {
            return Err(ObjError::Io(m));
        }
        if self.shared.readonly || self.inner.destroyed.load(Ordering::Relaxed) || self.inner.readonly.load(Ordering::Relaxed) {
            return Err(ObjError::ReadOnly);
        }
        if self.shared.shutdown.load(Ordering::Relaxed) {
            return Err(ObjError::Io("pool is exported".into()));
        }
        Ok(())
    }

    /// How this object set is encrypted (None: it is not).
    pub fn crypt(&self) -> Option<crate::crypt::Crypt> {
        self.inner.crypt
    }

    /// Whether its key is loaded (true for an object set not encrypted).
    pub fn key_loaded(&self) -> bool {
        self.inner.keys(&self.shared).is_ok()
    }

    pub(crate) fn dnode(&self, id: ObjectId) -> Result<Arc<Dnode>> {
        self.inner.handle(&self.shared, id)
    }

    /// The dirty record of `txg`, created from the newest view if needed.
    pub(crate) fn dirty_for<'a>(&self, dn: &Arc<Dnode>, st: &'a mut DnodeState, txg: Txg) -> &'a mut TxgDirty {
        if !st.dirty.contains_key(&txg) {
            self.shared.assert_txg_writable(txg);
            let attrs = match st.dirty.range(..txg).next_back() {
                Some((_, d)) => d.attrs.clone(),
                None if st.dirty.is_empty() => st.attrs(),
                None => Attrs::of(&st.committed),
            };
            st.dirty.insert(txg, Box::new(TxgDirty { blocks: BTreeMap::new(), frees: Vec::new(), attrs, freed: false, charge: Charge::default(), raw: BTreeMap::new(), shape: None }));
            self.inner.dirty.lock().entry(txg).or_default().insert(dn.id, dn.clone());
            self.shared.note_dirty_objset(txg, self.inner.id);
            let meta_copies = self.shared.meta_spec(self.copies()).copies;
            self.shared.note_dirty_dnode(txg, self.inner.id, dn.id.0, meta_copies);
        }
        st.dirty.get_mut(&txg).expect("just inserted")
    }

    pub fn create(&self, tx: &Tx, t: ObjType, block_size: u32, bonus: &[u8; BONUS_LEN]) -> Result<ObjectId> {
        self.check_writable()?;
        self.shared.check_space(self.charge_of(u64::from(crate::format::META_BLOCK_SIZE)).asize)?;
        let id = ObjectId(self.inner.next_object.fetch_add(1, Ordering::Relaxed));
        self.create_with_id(tx, id, t, block_size, bonus)?;
        Ok(id)
    }

    pub(crate) fn create_with_id_inner(&self, tx: &Tx, id: ObjectId, t: ObjType, block_size: u32, bonus: &[u8; BONUS_LEN]) -> Result<()> {
        self.check_writable()?;
        if block_size == 0 || block_size > MAX_BLOCK_SIZE || !block_size.is_multiple_of(512) {
            return Err(ObjError::Invalid(format!("block size {block_size}")));
        }
        if id.0 == 0 {
            return Err(ObjError::Invalid("object 0 is the meta-dnode".into()));
        }
        let dn = self.dnode(id)?;
        let mut st = dn.st.lock();
        if st.attrs().exists {
            return Err(ObjError::Exists);
        }
        let had_tree = st.committed.in_use() || st.dirty.values().any(|d| !d.blocks.is_empty());
        let d = self.dirty_for(&dn, &mut st, tx.txg());
        if had_tree {
            d.freed = true;
            d.blocks.clear();
            d.raw.clear();
            d.frees.clear();
        }
        d.attrs = Attrs { exists: true, otype: t.0, block_size, bonus: *bonus, metadata: false };
        drop(st);
        *self.inner.object_delta.lock().entry(tx.txg()).or_default() += 1;
        let next = id.0 + 1;
        self.inner.next_object.fetch_max(next, Ordering::Relaxed);
        Ok(())
    }

    pub(crate) fn free_inner(&self, tx: &Tx, id: ObjectId) -> Result<()> {
        self.check_writable()?;
        let dn = self.dnode(id)?;
        let mut st = dn.st.lock();
        if !st.attrs().exists {
            return Err(ObjError::NotFound(id.0));
        }
        let on_disk = if st.dirty.values().any(|d| d.freed) { 0 } else { st.committed.used_bytes };
        self.shared.note_pending_free(tx.txg(), on_disk);
        let d = self.dirty_for(&dn, &mut st, tx.txg());
        let all = d.charge;
        self.drop_charge(d, all);
        d.blocks.clear();
        d.raw.clear();
        d.frees.clear();
        d.freed = true;
        d.attrs.exists = false;
        drop(st);
        *self.inner.object_delta.lock().entry(tx.txg()).or_default() -= 1;
        Ok(())
    }

    pub fn info(&self, id: ObjectId) -> Result<ObjInfo> {
        Self::info_of(id, &*self.dnode(id)?)
    }

    /// `info` if the object's dnode is in memory already; None, with
    /// nothing read and nothing waited for, when it would have to be read
    /// from the pool or its shard of the handle map is busy (a dnode being
    /// loaded holds it across a disk read). A server answers such calls on
    /// the thread that read the request.
    pub fn info_cached(&self, id: ObjectId) -> Result<Option<ObjInfo>> {
        match self.inner.handles.try_get(id) {
            Some(dn) => Self::info_of(id, &dn).map(Some),
            None => Ok(None),
        }
    }

    fn info_of(id: ObjectId, dn: &Dnode) -> Result<ObjInfo> {
        let st = dn.st.lock();
        let a = st.attrs();
        if !a.exists {
            return Err(ObjError::NotFound(id.0));
        }
        let used = if st.dirty.values().any(|d| d.freed) { 0 } else { st.committed.used_bytes };
        let dirty: u64 = st.dirty.values().map(|d| d.charge.bytes).sum();
        Ok(ObjInfo { otype: ObjType(a.otype), block_size: a.block_size, length: st.nblocks() * a.block_size as u64, used_bytes: used + dirty, bonus: a.bonus })
    }

    pub fn bonus(&self, id: ObjectId) -> Result<[u8; BONUS_LEN]> {
        Ok(self.info(id)?.bonus)
    }

    pub(crate) fn set_bonus_inner(&self, tx: &Tx, id: ObjectId, b: &[u8; BONUS_LEN]) -> Result<()> {
        self.check_writable()?;
        let dn = self.dnode(id)?;
        let mut st = dn.st.lock();
        if !st.attrs().exists {
            return Err(ObjError::NotFound(id.0));
        }
        self.dirty_for(&dn, &mut st, tx.txg()).attrs.bonus = *b;
        Ok(())
    }

    /// Marks an object as metadata (`DN_METADATA`): the ZAP layer does for
    /// every map it formats.
    pub(crate) fn mark_metadata_inner(&self, tx: &Tx, id: ObjectId) -> Result<()> {
        self.check_writable()?;
        let dn = self.dnode(id)?;
        let mut st = dn.st.lock();
        if !st.attrs().exists {
            return Err(ObjError::NotFound(id.0));
        }
        self.dirty_for(&dn, &mut st, tx.txg()).attrs.metadata = true;
        Ok(())
    }

    pub(crate) fn set_block_size_inner(&self, tx: &Tx, id: ObjectId, block_size: u32) -> Result<()> {
        self.check_writable()?;
        if block_size == 0 || block_size > MAX_BLOCK_SIZE || !block_size.is_multiple_of(512) {
            return Err(ObjError::Invalid(format!("block size {block_size}")));
        }
        let dn = self.dnode(id)?;
        let mut st = dn.st.lock();
        let a = st.attrs();
        if !a.exists {
            return Err(ObjError::NotFound(id.0));
        }
        if a.block_size == block_size {
            return Ok(());
        }
        if st.nblocks() > 1 {
            return Err(ObjError::Invalid("block size can change only while an object has at most one block".into()));
        }
        // Carry block 0 over at the new size.
        let old = self.block_view(&st, 0)?;
        let d = self.dirty_for(&dn, &mut st, tx.txg());
        d.attrs.block_size = block_size;
        let mut data = match old {
            Found::Data(b) => b.as_ref().clone(),
            Found::Hole => Vec::new(),
            Found::Committed(phys) => self.read_committed(&phys, 0)?.map(|b| b.as_ref().clone()).unwrap_or_default(),
        };
        if !data.is_empty() || d.blocks.contains_key(&0) {
            data.resize(block_size as usize, 0);
            let nb = data.len() as u64;
            if let Some(prev) = d.blocks.insert(0, Arc::new(data)) {
                self.drop_charge(d, self.charge_of(prev.len() as u64));
            }
            self.add_charge(d, self.charge_of(nb));
        }
        Ok(())
    }

    pub fn used_bytes(&self) -> u64 {
        self.inner.committed.lock().used_bytes
    }

    pub fn logical_bytes(&self) -> u64 {
        self.inner.committed.lock().logical_bytes
    }

    /// Logical bytes of user data (level-0 blocks of objects that are not
    /// metadata).
    pub fn data_logical(&self) -> u64 {
        self.inner.committed.lock().data_logical
    }

    /// Allocated bytes of the blocks `data_logical` counts.
    pub fn data_bytes(&self) -> u64 {
        self.inner.committed.lock().data_bytes
    }

    pub fn object_count(&self) -> u64 {
        let base = self.inner.committed.lock().object_count as i64;
        let pending: i64 = self.inner.object_delta.lock().values().sum();
        (base + pending).max(0) as u64
    }

    /// The committed block pointer of dnode block `blkid` (objects
    /// `32 * blkid ..`), a hole if none: for tools and tests that look at
    /// blocks on disk.
    pub fn dnode_block_ptr(&self, blkid: u64) -> Result<BlockPtr> {
        let meta = self.inner.committed.lock().meta.clone();
        let _gate = self.shared.reader_gate.read();
        tree::lookup(self.io(), &meta, blkid)
    }

    /// Ids of objects that exist (for the checker and tests): walks the meta tree.
    pub fn for_each_object(&self, f: &mut dyn FnMut(ObjectId, &DnodePhys)) -> Result<()> {
        let meta = self.inner.committed.lock().meta.clone();
        let io = self.io();
        for blkid in 0..meta.nblocks {
            let bp = tree::lookup(io, &meta, blkid)?;
            if bp.is_hole() {
                continue;
            }
            let keys = self.inner.keys(&self.shared)?;
            let data = crate::crypt::opened_dnode_block(keys.as_deref(), &bp, blkid, io.read(&bp).map_err(block_err)?)?;
            for (i, chunk) in data.chunks_exact(DNODE_SIZE).enumerate() {
                let phys = DnodePhys::decode(chunk)?;
                if phys.flags & DN_IN_USE != 0 {
                    f(ObjectId(blkid * DNODES_PER_BLOCK + i as u64), &phys);
                }
            }
        }
        Ok(())
    }
}

/// Copy of a dnode's txg record taken by the sync thread.
pub(crate) struct SyncItem {
    pub dn: Arc<Dnode>,
    pub dirty: TxgDirty,
    pub base: DnodePhys,
    /// Block pointers of freshly written data blocks.
    pub written: BTreeMap<u64, BlockPtr>,
}

#[cfg(test)]
mod tests;
