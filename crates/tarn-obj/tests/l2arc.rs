//! The L2ARC (issue 11, test 4): blocks the ARC evicts are read back from
//! the cache device (its hit counter rises, the pool's devices are not
//! read), after export/import too (the index is rebuilt from the device,
//! not refilled); a corrupted or vanished cache device only costs pool
//! reads (the data stays right, the errors are counted);
//! `secondarycache` decides what is fed; cache devices come and go with
//! the pool's config.
//!
//! Every test here shares the process's ARC (16 MiB, the floor) and runs
//! a working set three times larger, so most of it lives below the ARC.
mod common;
use common::*;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tarn_dev::{Device, FaultDevice, MemDevice};
use tarn_obj::*;

const BLOCK: u32 = 16 << 10;
/// 48 MiB of 16 KiB blocks: three times the ARC.
const BLOCKS: u64 = 3072;

struct Setup {
    main: Arc<FaultDevice>,
    cache: Arc<FaultDevice>,
    pool: Arc<ObjPool>,
    /// Held for the test's life (declared last: dropped after the pool).
    _serial: std::sync::MutexGuard<'static, ()>,
}

/// The tests share the process's ARC: run concurrently, each one's
/// working set evicts the others' blocks before the feed has written
/// them, and hit counts stop meaning anything. One at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn tunables() -> Tunables {
    // A fast feed, so the tests wait for fractions of a second.
    Tunables { arc_max: 16 << 20, arc_min: 4 << 20, l2arc_write_max: 512 << 20, l2arc_write_boost: 0, ..Default::default() }
}

fn setup() -> Setup {
    let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let main = FaultDevice::new(MemDevice::new("main", 256 << 20) as Arc<dyn Device>);
    let cache = FaultDevice::new(MemDevice::new("cache", 128 << 20) as Arc<dyn Device>);
    let pool = ObjPool::create_with_devices(
        PoolCreate {
            name: "t".into(),
            tops: vec![(TopKind::Disk, vec![("main".into(), main.clone() as Arc<dyn Device>)])],
            ashift: 12,
            properties: Default::default(),
            hostname: "test".into(),
        },
        vec![],
        vec![("cache".into(), cache.clone() as Arc<dyn Device>)],
    )
    .expect("create a pool with a cache device");
    pool.set_tunables(tunables());
    Setup { main, cache, pool, _serial: serial }
}

/// An object set with `secondarycache` = `l2`, holding a file of
/// `BLOCKS` blocks, written in several txgs.
fn fill(pool: &Arc<ObjPool>, l2: CachePolicy, seed: u8) -> (ObjsetId, ObjectId, Vec<u8>) {
    let id = {
        let tx = pool.begin();
        pool.create_objset(&tx).unwrap()
    };
    let os = pool.open_objset(id).unwrap();
    os.set_write_props(WriteProps { compression: Compression::Off, checksum: ChecksumKind::Fletcher4, copies: 1, primarycache: CachePolicy::All, secondarycache: l2 });
    let data: Vec<u8> = (0..BLOCKS as usize * BLOCK as usize).map(|i| ((i / 4096) as u8).wrapping_mul(13) ^ (i as u8) ^ seed).collect();
    let file = {
        let tx = pool.begin();
        os.create(&tx, ObjType(18), BLOCK, &[0; BONUS_LEN]).unwrap()
    };
    for piece in data.chunks(8 << 20).enumerate() {
        let tx = pool.begin();
        os.write_data(&tx, file, (piece.0 * (8 << 20)) as u64, piece.1).unwrap();
        drop(tx);
        pool.sync().unwrap();
    }
    (id, file, data)
}

fn read_check(pool: &ObjPool, id: ObjsetId, file: ObjectId, data: &[u8], what: &str) {
    let os = pool.open_objset(id).unwrap();
    let mut buf = vec![0u8; BLOCK as usize];
    for b in 0..BLOCKS {
        let at = (b * BLOCK as u64) as usize;
        os.read(file, at as u64, &mut buf).unwrap();
        assert!(buf[..] == data[at..at + BLOCK as usize], "{what}: block {b} reads back wrong");
    }
}

/// Waits until the feed has written what it was offered (the indexed
/// count stops moving) and at least `want` blocks are indexed.
fn wait_fed(pool: &ObjPool, want: u64) -> L2Stats {
    let start = Instant::now();
    let mut last = pool.l2_stats();
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = pool.l2_stats();
        if now.blocks >= want && now.blocks == last.blocks && now.writes == last.writes {
            return now;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the feed did not settle: {now:?}");
        last = now;
    }
}

use tarn_obj::l2arc::L2Stats;

fn warm(s: &Setup) -> (ObjsetId, ObjectId, Vec<u8>, L2Stats) {
    let (id, file, data) = fill(&s.pool, CachePolicy::All, 1);
    read_check(&s.pool, id, file, &data, "first read");
    let fed = wait_fed(&s.pool, BLOCKS / 2);
    (id, file, data, fed)
}

#[test]
fn blocks_evicted_from_the_arc_are_read_from_the_cache_device() {
    let s = setup();
    let (id, file, data, fed) = warm(&s);
    assert!(fed.size >= fed.blocks * BLOCK as u64 && fed.hdr_size > 0, "{fed:?}");
    let reads = s.main.reads();
    let hits = s.pool.l2_stats().hits;
    read_check(&s.pool, id, file, &data, "read again");
    let after = s.pool.l2_stats();
    let pool_reads = s.main.reads() - reads;
    assert!(after.hits - hits >= BLOCKS / 3, "{} L2 hits for {BLOCKS} blocks", after.hits - hits);
    assert!(pool_reads < BLOCKS / 4, "{pool_reads} reads of the pool's device for {BLOCKS} blocks");
    assert_eq!((after.cksum_bad, after.io_errors), (0, 0));
    let arc = tarn_block::arc().stats();
    assert!(arc.meta_size >= after.hdr_size, "the index is charged to the ARC: {arc:?} {after:?}");
}

/// Persistence: after export and import the index comes back from the
/// device (nothing is written before the first reads hit it).
#[test]
fn the_cache_survives_export_and_import() {
    let s = setup();
    let (id, file, data, fed) = warm(&s);
    s.pool.export().unwrap();
    drop(s.pool);
    let pool = import(vec![s.main.clone() as Arc<dyn Device>, s.cache.clone() as Arc<dyn Device>], false).unwrap();
    pool.set_tunables(tunables());
    let start = Instant::now();
    while !pool.l2_rebuilt() {
        assert!(start.elapsed() < Duration::from_secs(30), "rebuild did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
    let rebuilt = pool.l2_stats();
    assert!(rebuilt.rebuild_blocks >= fed.blocks * 9 / 10, "{rebuilt:?} after {fed:?}");
    assert_eq!(rebuilt.writes, 0, "rebuilt, not refed");
    let reads = s.main.reads();
    read_check(&pool, id, file, &data, "after import");
    let after = pool.l2_stats();
    assert!(after.hits >= BLOCKS / 3, "{after:?}");
    assert!(s.main.reads() - reads < BLOCKS / 2, "{} pool reads", s.main.reads() - reads);
    assert_eq!(pool.status().cache.len(), 1);
    pool.export().unwrap();
}

/// Rot on the cache device: every read still returns the right data (from
/// the pool), each bad record is counted and dropped.
#[test]
fn a_corrupted_cache_device_costs_only_pool_reads() {
    let s = setup();
    let (id, file, data, _) = warm(&s);
    let ring = tarn_vdev::DATA_START + tarn_obj::l2arc::format::RING_START;
    let len = tarn_vdev::data_region_size(s.cache.size()) - tarn_obj::l2arc::format::RING_START;
    // Counted before the rot: a chunk the feed finishes after this point
    // has its bytes in the difference below, wherever it lands.
    let before = s.pool.l2_stats();
    s.cache.corrupt(ring, len, 42).unwrap();
    read_check(&s.pool, id, file, &data, "after rot");
    let after = s.pool.l2_stats();
    assert!(after.cksum_bad - before.cksum_bad >= BLOCKS / 3, "{after:?}");
    // No rotten record is a hit. The pass itself evicts blocks that the
    // feed writes anew (an indirect block read again later in the pass
    // may then be a hit, of a sound record): every hit needs a record
    // written after the rot, each at least `record_size(0)` bytes.
    let hits = after.hits - before.hits;
    let fed = after.write_bytes - before.write_bytes;
    assert!(
        hits * tarn_obj::l2arc::format::record_size(0) <= fed,
        "{hits} hits after the rot with {fed} bytes fed since: {before:?} {after:?}"
    );
    assert_eq!(s.pool.status().state, DevState::Online);
}

/// The cache device vanishes in the middle of a read pass: the rest of
/// the pass reads the pool, the error is counted, the device shows
/// REMOVED and the pool stays ONLINE.
#[test]
fn a_cache_device_that_vanishes_mid_read() {
    let s = setup();
    let (id, file, data, _) = warm(&s);
    let os = s.pool.open_objset(id).unwrap();
    let before = s.pool.l2_stats();
    let mut buf = vec![0u8; BLOCK as usize];
    for b in 0..BLOCKS {
        if b == BLOCKS / 2 {
            assert!(s.pool.l2_stats().hits > before.hits, "the first half was served from the cache device");
            s.cache.set_gone(true);
        }
        let at = (b * BLOCK as u64) as usize;
        os.read(file, at as u64, &mut buf).unwrap();
        assert!(buf[..] == data[at..at + BLOCK as usize], "block {b}");
    }
    let after = s.pool.l2_stats();
    assert!(after.io_errors >= 1, "{after:?}");
    let st = s.pool.status();
    assert_eq!(st.cache[0].state, DevState::Removed);
    assert_eq!(st.state, DevState::Online);
    assert_eq!(after.blocks, 0, "nothing is indexed on a device that is gone");
}

/// `secondarycache`: under `all` the file's blocks go to the cache
/// device; under `metadata` and `none` none of them does.
#[test]
fn secondarycache_decides_what_is_fed() {
    let s = setup();
    let sets: Vec<_> = [CachePolicy::All, CachePolicy::Metadata, CachePolicy::None]
        .into_iter()
        .enumerate()
        .map(|(i, c)| (c, fill(&s.pool, c, i as u8)))
        .collect();
    for (_, (id, file, data)) in &sets {
        read_check(&s.pool, *id, *file, data, "read");
    }
    wait_fed(&s.pool, 1);
    for (policy, (id, file, _)) in &sets {
        let os = s.pool.open_objset(*id).unwrap();
        let in_l2 = (0..BLOCKS).filter(|&b| os.is_block_in_l2(*file, b).unwrap()).count() as u64;
        match policy {
            CachePolicy::All => assert!(in_l2 >= BLOCKS / 2, "all: {in_l2} of {BLOCKS} file blocks fed"),
            _ => assert_eq!(in_l2, 0, "{policy:?}: file blocks fed"),
        }
    }
}

/// Cache devices in the config: listed, not pool space; a missing one
/// does not stop the import (UNAVAIL); add and remove.
#[test]
fn cache_devices_come_and_go_with_the_config() {
    let s = setup();
    let st = s.pool.status();
    assert_eq!((st.cache.len(), st.cache[0].state, st.cache[0].path.as_str()), (1, DevState::Online, "cache"));
    assert_eq!(s.pool.config().cache.len(), 1);
    let size = s.pool.space().size;
    assert!(size < 256 << 20, "the cache device is not pool space ({size})");
    s.pool.export().unwrap();
    drop(s.pool);
    // Imported without its cache device.
    let pool = import(vec![s.main.clone() as Arc<dyn Device>], false).expect("import without the cache device");
    let st = pool.status();
    assert_eq!((st.state, st.cache.len(), st.cache[0].state), (DevState::Online, 1, DevState::Unavail));
    // Removed while missing; another added.
    pool.remove_cache("cache").unwrap();
    assert!(pool.status().cache.is_empty() && pool.config().cache.is_empty());
    let other = MemDevice::new("cache2", 64 << 20);
    pool.add_cache("cache2".into(), other.clone() as Arc<dyn Device>).unwrap();
    assert!(pool.add_cache("cache2".into(), other.clone() as Arc<dyn Device>).is_err(), "added twice");
    assert!(pool.remove_cache("nonesuch").is_err());
    let label = tarn_vdev::read_label(other.as_ref()).unwrap();
    assert_eq!((label.top_id, label.config.cache.len()), (tarn_vdev::CACHE_TOP_ID, 1));
    pool.export().unwrap();
    drop(pool);
    let pool = import(vec![s.main.clone() as Arc<dyn Device>, other.clone() as Arc<dyn Device>], false).unwrap();
    assert_eq!(pool.status().cache[0].state, DevState::Online);
    pool.remove_cache("cache2").unwrap();
    assert!(tarn_vdev::read_label(other.as_ref()).is_err(), "a removed cache device keeps no label");
    pool.export().unwrap();
}
