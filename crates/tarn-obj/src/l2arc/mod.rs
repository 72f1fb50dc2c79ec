//! The L2ARC: a second level of the block cache on `cache` vdevs.
//!
//! Big theory:
//! - The ARC is one per process; so is its second level, the
//!   [`Dispatcher`], which implements tarn-block's `SecondLevel` and routes
//!   each call by `CacheKey::io` to the pool's [`PoolL2`] (a pool with cache
//!   devices registers at create/import/add and deregisters at export or
//!   destroy; `drop_io` deregisters too).
//! - Feed: the ARC offers each block it evicts whose dataset's
//!   `secondarycache` allows it. `offer` never blocks on I/O: it queues the
//!   block in a buffer bounded by bytes (one second of feed); what does not
//!   fit is dropped. A feed thread per pool writes at most
//!   `l2arc_write_max` bytes per second, plus `l2arc_write_boost` while no
//!   cache device of the pool has been filled once (its ring has not yet
//!   wrapped), as chunks (format.rs) going round each device as a ring
//!   (device.rs); entries leave the index before their region is written.
//! - Read: on an ARC miss, `get` looks the block up in the devices'
//!   indexes, reads its record and returns the data only if the record
//!   names the block (vdev, offset, birth, the bp's checksum) and its
//!   blake3 over identity and data matches. Anything else (read error,
//!   mismatch, device gone) is a miss, counted (`l2_io_error`,
//!   `l2_cksum_bad`), and the entry is dropped; the pool read happens as
//!   usual. The device holds decompressed data (the ARC's form), checked
//!   by a hash of our own rather than the bp checksum: re-compressing on
//!   the way back to compare against the bp would cost more than a blake3,
//!   and the data's identity is tied to the bp by its checksum words.
//! - Persistence: the feed thread first rebuilds each device's index from
//!   the device (rebuild.rs), in the background; import does not wait.
//! - Memory: the indexes' tables are charged to the ARC (`charge_meta`),
//!   so `arc_max` stays a cap (`l2_hdr_size`).
//!
//! Lock order: a device's ring -> its index; the dispatcher's pool table
//! is taken alone.

mod device;
mod feed;
pub mod format;
mod rebuild;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Condvar, Mutex, RwLock};
use tarn_block::{BlockPtr, CacheKey, SecondLevel};
use tarn_vdev::{LeafStatus, LeafVdev};

pub(crate) use device::CacheDev;
use device::Lookup;
pub use device::INDEX_SLOT_BYTES;
use format::BlockId;
pub use rebuild::Rebuilt;

/// Default `l2arc_write_max` (8 MiB/s, as ZFS).
pub const WRITE_MAX_DEFAULT: u64 = 8 << 20;
/// Default `l2arc_write_boost` (8 MiB/s, as ZFS).
pub const WRITE_BOOST_DEFAULT: u64 = 8 << 20;

static WRITE_MAX: AtomicU64 = AtomicU64::new(WRITE_MAX_DEFAULT);
static WRITE_BOOST: AtomicU64 = AtomicU64::new(WRITE_BOOST_DEFAULT);

/// Sets `l2arc_write_max` and `l2arc_write_boost` (bytes per second; one
/// pair for the process, as the ARC is one).
pub fn set_write_limits(write_max: u64, write_boost: u64) {
    WRITE_MAX.store(write_max, Ordering::Relaxed);
    WRITE_BOOST.store(write_boost, Ordering::Relaxed);
}

/// Counters of one pool's L2ARC, or of the process's (`stats()`).
#[derive(Default)]
pub(crate) struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
    writes: AtomicU64,
    cksum_bad: AtomicU64,
    io_errors: AtomicU64,
    feed_dropped: AtomicU64,
    rebuild_blocks: AtomicU64,
}

/// A snapshot of L2ARC counters and sizes (`tarn arcstat`, tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct L2Stats {
    /// ARC misses answered by a cache device.
    pub hits: u64,
    /// ARC misses a cache device did not answer (pools with cache devices).
    pub misses: u64,
    pub read_bytes: u64,
    /// Bytes the feed wrote (chunks, headers and padding included).
    pub write_bytes: u64,
    /// Chunks written.
    pub writes: u64,
    pub cksum_bad: u64,
    pub io_errors: u64,
    /// Blocks offered but dropped (the feed buffer was full).
    pub feed_dropped: u64,
    /// Blocks put back in the index from the devices at import.
    pub rebuild_blocks: u64,
    /// Bytes of block data the indexes name (`l2_size`).
    pub size: u64,
    /// Bytes of memory the indexes take (`l2_hdr_size`).
    pub hdr_size: u64,
    /// Blocks indexed.
    pub blocks: u64,
}

fn count(pool: &Counters, f: fn(&Counters) -> &AtomicU64, n: u64) {
    f(pool).fetch_add(n, Ordering::Relaxed);
    f(&dispatcher().totals).fetch_add(n, Ordering::Relaxed);
}

/// One pool's L2ARC: its cache devices, feed buffer and feed thread.
pub(crate) struct PoolL2 {
    pool_guid: u64,
    /// The pool's `BlockIo` id (`CacheKey::io`).
    io_id: u64,
    /// Entries born after this txg are dropped at rebuild.
    max_birth: AtomicU64,
    pub devs: RwLock<Vec<Arc<CacheDev>>>,
    queue: Mutex<VecDeque<format::Queued>>,
    queued_bytes: AtomicU64,
    counters: Counters,
    /// Bytes of index memory charged to the ARC.
    charged: AtomicU64,
    stop: AtomicBool,
    wake: (Mutex<bool>, Condvar),
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    registered: AtomicBool,
}

impl PoolL2 {
    pub fn new(pool_guid: u64, io_id: u64) -> Arc<PoolL2> {
        Arc::new(PoolL2 {
            pool_guid,
            io_id,
            max_birth: AtomicU64::new(u64::MAX),
            devs: RwLock::new(Vec::new()),
            queue: Mutex::new(VecDeque::new()),
            queued_bytes: AtomicU64::new(0),
            counters: Counters::default(),
            charged: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            wake: (Mutex::new(false), Condvar::new()),
            thread: Mutex::new(None),
            registered: AtomicBool::new(false),
        })
    }

    /// The cache devices found at import, whose indexes are rebuilt from
    /// them (entries born after `max_birth`, the imported txg, dropped).
    pub fn attach(&self, leaves: Vec<Arc<LeafVdev>>, max_birth: u64) {
        self.max_birth.store(max_birth, Ordering::Relaxed);
        let mut devs = self.devs.write();
        devs.extend(leaves.into_iter().map(|l| Arc::new(CacheDev::new(l, self.pool_guid))));
    }

    /// The cache devices' leaves (labels, status).
    pub fn leaves(&self) -> Vec<Arc<LeafVdev>> {
        self.devs.read().iter().map(|d| d.leaf.clone()).collect()
    }

    pub fn status(&self) -> Vec<LeafStatus> {
        self.devs.read().iter().map(|d| d.leaf.status()).collect()
    }

    /// Starts serving (registers with the dispatcher, starts the feed
    /// thread, which first rebuilds the indexes) if it has devices.
    pub fn start(self: &Arc<Self>) {
        if self.devs.read().is_empty() || self.stop.load(Ordering::Relaxed) {
            return;
        }
        if !self.registered.swap(true, Ordering::AcqRel) {
            dispatcher().register(self.clone());
        }
        let mut thread = self.thread.lock();
        if thread.is_none() {
            let me = self.clone();
            *thread = Some(std::thread::Builder::new().name("tarn-l2arc-feed".into()).spawn(move || feed::run(&me)).expect("spawn the L2ARC feed thread"));
        }
    }

    /// Adds a device (already formatted) and starts serving.
    pub fn add(self: &Arc<Self>, dev: Arc<CacheDev>) {
        dev.ready.store(true, Ordering::Relaxed);
        self.devs.write().push(dev);
        self.start();
    }

    /// Takes the device with `guid` out: no more reads or writes, its
    /// index dropped. Returns its leaf.
    pub fn remove(&self, guid: u64) -> Option<Arc<LeafVdev>> {
        let dev = {
            let mut devs = self.devs.write();
            let i = devs.iter().position(|d| d.guid() == guid)?;
            devs.remove(i)
        };
        dev.retired.store(true, Ordering::Relaxed);
        // Wait for a chunk being written to it.
        drop(dev.ring.lock());
        dev.clear();
        self.charge();
        Some(dev.leaf.clone())
    }

    /// Stops the feed thread, deregisters, gives the index memory back.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        {
            let (lock, cv) = &self.wake;
            *lock.lock() = true;
            cv.notify_all();
        }
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
        if self.registered.swap(false, Ordering::AcqRel) {
            dispatcher().deregister(self.io_id);
        }
        for d in self.devs.read().iter() {
            d.retired.store(true, Ordering::Relaxed);
            d.clear();
        }
        self.queue.lock().clear();
        self.queued_bytes.store(0, Ordering::Relaxed);
        self.charge();
    }

    /// Charges the ARC for the indexes' memory as it is now.
    fn charge(&self) {
        let now: u64 = self.devs.read().iter().map(|d| d.index_bytes()).sum();
        let before = self.charged.swap(now, Ordering::Relaxed);
        if now != before {
            tarn_block::arc().charge_meta(now as i64 - before as i64);
        }
    }

    fn get(&self, key: &CacheKey, bp: &BlockPtr) -> Option<Arc<Vec<u8>>> {
        let id = BlockId { vdev: key.vdev, offset: key.offset, birth: key.birth };
        let devs = self.devs.read().clone();
        for d in &devs {
            match d.get(&id, &bp.checksum, bp.lsize) {
                Lookup::NotHere => continue,
                Lookup::Hit(data) => {
                    count(&self.counters, |c| &c.hits, 1);
                    count(&self.counters, |c| &c.read_bytes, data.len() as u64);
                    return Some(Arc::new(data));
                }
                Lookup::Unusable => {}
                Lookup::IoError => count(&self.counters, |c| &c.io_errors, 1),
                Lookup::Corrupt => count(&self.counters, |c| &c.cksum_bad, 1),
            }
        }
        count(&self.counters, |c| &c.misses, 1);
        None
    }

    fn offer(&self, key: CacheKey, bp_checksum: [u8; 32], data: Arc<Vec<u8>>) {
        if self.stop.load(Ordering::Relaxed) {
            return;
        }
        let id = BlockId { vdev: key.vdev, offset: key.offset, birth: key.birth };
        let devs = self.devs.read();
        if !devs.iter().any(|d| d.serving()) || devs.iter().any(|d| d.contains(&id)) {
            return;
        }
        drop(devs);
        let len = data.len() as u64;
        let limit = WRITE_MAX.load(Ordering::Relaxed) + WRITE_BOOST.load(Ordering::Relaxed);
        if self.queued_bytes.load(Ordering::Relaxed) + len > limit.max(1 << 20) {
            count(&self.counters, |c| &c.feed_dropped, 1);
            return;
        }
        self.queued_bytes.fetch_add(len, Ordering::Relaxed);
        self.queue.lock().push_back((id, bp_checksum, data));
    }

    /// Whether a cache device indexes `bp`'s block.
    pub fn holds(&self, bp: &BlockPtr) -> bool {
        let id = BlockId { vdev: bp.dva[0].vdev, offset: bp.dva[0].offset, birth: bp.birth };
        self.devs.read().iter().any(|d| d.contains(&id))
    }

    fn forget(&self, key: &CacheKey) {
        let id = BlockId { vdev: key.vdev, offset: key.offset, birth: key.birth };
        for d in self.devs.read().iter() {
            d.forget(&id);
        }
    }

    pub fn stats(&self) -> L2Stats {
        let mut s = snapshot(&self.counters);
        for d in self.devs.read().iter() {
            s.size += d.data_bytes.load(Ordering::Relaxed);
            s.hdr_size += d.index_bytes();
            s.blocks += d.index.read().len() as u64;
        }
        s
    }

    /// Whether every device's index has been rebuilt (or found empty).
    pub fn rebuilt(&self) -> bool {
        self.devs.read().iter().all(|d| d.ready.load(Ordering::Relaxed) || !d.leaf.usable())
    }
}

fn snapshot(c: &Counters) -> L2Stats {
    let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
    L2Stats {
        hits: l(&c.hits),
        misses: l(&c.misses),
        read_bytes: l(&c.read_bytes),
        write_bytes: l(&c.write_bytes),
        writes: l(&c.writes),
        cksum_bad: l(&c.cksum_bad),
        io_errors: l(&c.io_errors),
        feed_dropped: l(&c.feed_dropped),
        rebuild_blocks: l(&c.rebuild_blocks),
        ..L2Stats::default()
    }
}

/// The process's second level: routes the ARC's calls to pools by
/// `CacheKey::io`.
pub struct Dispatcher {
    pools: RwLock<HashMap<u64, Arc<PoolL2>>>,
    /// Counters of every pool since the process started.
    totals: Counters,
    installed: AtomicBool,
}

static DISPATCHER: OnceLock<Arc<Dispatcher>> = OnceLock::new();

fn dispatcher() -> &'static Arc<Dispatcher> {
    DISPATCHER.get_or_init(|| Arc::new(Dispatcher { pools: RwLock::new(HashMap::new()), totals: Counters::default(), installed: AtomicBool::new(false) }))
}

impl Dispatcher {
    fn register(&self, pool: Arc<PoolL2>) {
        self.pools.write().insert(pool.io_id, pool);
        if !self.installed.swap(true, Ordering::AcqRel) {
            let me: Arc<dyn SecondLevel> = dispatcher().clone();
            tarn_block::arc().set_second_level(Some(me));
        }
    }

    fn deregister(&self, io: u64) {
        self.pools.write().remove(&io);
    }

    fn pool(&self, io: u64) -> Option<Arc<PoolL2>> {
        self.pools.read().get(&io).cloned()
    }
}

impl SecondLevel for Dispatcher {
    fn get(&self, key: &CacheKey, bp: &BlockPtr) -> Option<Arc<Vec<u8>>> {
        self.pool(key.io)?.get(key, bp)
    }

    fn offer(&self, key: CacheKey, bp_checksum: [u8; 32], data: Arc<Vec<u8>>) {
        if let Some(p) = self.pool(key.io) {
            p.offer(key, bp_checksum, data);
        }
    }

    fn remove(&self, key: &CacheKey) {
        if let Some(p) = self.pool(key.io) {
            p.forget(key);
        }
    }

    fn drop_io(&self, io: u64) {
        if let Some(p) = self.pool(io) {
            p.stop();
        }
    }
}

/// The process's L2ARC counters and sizes, every pool together (`tarn
/// arcstat`).
pub fn stats() -> L2Stats {
    let d = dispatcher();
    let mut s = snapshot(&d.totals);
    for p in d.pools.read().values() {
        let ps = p.stats();
        s.size += ps.size;
        s.hdr_size += ps.hdr_size;
        s.blocks += ps.blocks;
    }
    s
}
