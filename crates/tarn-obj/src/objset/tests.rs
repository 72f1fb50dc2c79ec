use super::*;
use crate::{ObjPool, PoolCreate, TopKind};
use tarn_dev::{Device, MemDevice};

fn pool() -> Arc<ObjPool> {
    let d = MemDevice::new("m", 64 << 20) as Arc<dyn Device>;
    ObjPool::create(PoolCreate {
        name: "t".into(),
        tops: vec![(TopKind::Disk, vec![("m".into(), d)])],
        ashift: 12,
        properties: Default::default(),
        hostname: "h".into(),
    })
    .unwrap()
}

/// The story: the sync thread records object-set roots in the MOS table
/// in the syncing txg T while a user change to the same table block
/// already sits in T+1. T's copy used to be built from the newest (T+1)
/// view, so T committed T+1's change early, and T+1 then wrote back the
/// root T had replaced. A syncing-context write must see only what T
/// sees, and newer records must receive its change too.
#[test]
fn syncing_context_write_into_an_older_txg_keeps_both_histories_apart() {
    let pool = pool();
    let mos = pool.mos();
    let id = {
        let tx = pool.begin();
        mos.create(&tx, ObjType(30), 4096, &[0; BONUS_LEN]).unwrap()
    };
    pool.sync().unwrap();
    let newer = pool.begin();
    let t_new = newer.txg();
    mos.write(&newer, id, 0, b"user-T+1").unwrap();
    drop(newer);
    let sync_lock = pool.shared.sync_lock.lock();
    let older = crate::pool::SyncTx::begin(&pool.shared, &sync_lock, t_new - 1);
    mos.write(older.tx(), id, 128, b"sync-T").unwrap();
    drop(older);
    drop(sync_lock);
    let dn = mos.dnode(id).unwrap();
    let st = dn.st.lock();
    let t = st.dirty.get(&(t_new - 1)).unwrap().blocks.get(&0).unwrap();
    assert_eq!(&t[128..134], b"sync-T");
    assert_eq!(&t[0..8], &[0u8; 8], "T must not see T+1's change");
    let n = st.dirty.get(&t_new).unwrap().blocks.get(&0).unwrap();
    assert_eq!(&n[0..8], b"user-T+1");
    assert_eq!(&n[128..134], b"sync-T", "T+1 must not roll T's change back");
}

/// A change tagged with a txg that is neither open nor syncing would
/// never reach disk: refused by an assertion, not lost.
#[test]
#[should_panic(expected = "neither open")]
fn a_change_in_a_txg_already_written_is_an_assertion() {
    let pool = pool();
    let mos = pool.mos();
    let id = {
        let tx = pool.begin();
        mos.create(&tx, ObjType(30), 4096, &[0; BONUS_LEN]).unwrap()
    };
    pool.sync().unwrap();
    let written = pool.last_synced_txg();
    mos.write(&Tx { txg: written, _hold: None, redo: None }, id, 0, b"late").unwrap();
}

/// Only a quiesced txg is synced: a syncing transaction for the open
/// txg is a bug.
#[test]
#[should_panic(expected = "only a quiesced txg")]
fn a_syncing_transaction_of_the_open_txg_is_an_assertion() {
    let pool = pool();
    let sync_lock = pool.shared.sync_lock.lock();
    let open = pool.shared.open_txg.load(Ordering::Acquire);
    let _stx = crate::pool::SyncTx::begin(&pool.shared, &sync_lock, open);
}

/// A syncing transaction kept past its sync (here: one made while
/// another txg is marked syncing) fails its check.
#[test]
#[should_panic(expected = "a syncing-context operation for txg")]
fn a_syncing_operation_with_another_txgs_transaction_is_an_assertion() {
    let pool = pool();
    pool.sync().unwrap();
    let sync_lock = pool.shared.sync_lock.lock();
    let synced = pool.last_synced_txg();
    let stx = crate::pool::SyncTx::begin(&pool.shared, &sync_lock, synced);
    pool.shared.syncing_txg.store(synced - 1, Ordering::Release);
    stx.check();
}

/// A pool with one object set, created and written out.
fn pool_with_objset() -> (Arc<ObjPool>, ObjsetId, ObjectSet) {
    let pool = pool();
    pool.sync().unwrap();
    let osid = {
        let tx = pool.begin();
        pool.create_objset(&tx).unwrap()
    };
    pool.sync().unwrap();
    let os = pool.open_objset(osid).unwrap();
    (pool, osid, os)
}

#[test]
fn destroying_a_dataset_with_unsynced_changes_returns_its_dirty_bytes() {
    let (pool, osid, os) = pool_with_objset();
    {
        let tx = pool.begin();
        let id = os.create(&tx, ObjType(30), 131072, &[0; BONUS_LEN]).unwrap();
        os.write(&tx, id, 0, &vec![7u8; 1 << 20]).unwrap();
        assert!(pool.dirty_bytes() >= 1 << 20);
        pool.destroy_objset(&tx, osid).unwrap();
    }
    pool.sync().unwrap();
    assert_eq!(pool.dirty_bytes(), 0);
    assert_eq!(pool.dirty_asize(), 0, "every charge is given back once its txg is written");
    assert!(pool.check().ok());
}

/// A rollback in the txg that also changed the head throws those changes
/// away: their charges go back too (they stayed counted for good, and a
/// sync's credit would offset them).
#[test]
fn rolling_back_a_head_with_unsynced_changes_returns_its_dirty_bytes() {
    let (pool, osid, os) = pool_with_objset();
    let snap = {
        let tx = pool.begin();
        pool.snapshot(&tx, osid).unwrap()
    };
    pool.sync().unwrap();
    {
        let tx = pool.begin();
        let id = os.create(&tx, ObjType(30), 131072, &[0; BONUS_LEN]).unwrap();
        os.write(&tx, id, 0, &vec![7u8; 1 << 20]).unwrap();
        assert!(pool.dirty_asize() >= 1 << 20);
        pool.rollback(&tx, osid, snap).unwrap();
    }
    pool.sync().unwrap();
    pool.sync().unwrap();
    assert_eq!(pool.dirty_bytes(), 0);
    assert_eq!(pool.dirty_asize(), 0, "the rolled-back changes' charges are given back");
    assert!(pool.check().ok());
}

/// A txg being written has taken its blocks out of the free space while
/// its charges still count as dirty: a writer checking then must see the
/// space once, not twice (the full-pool test's spurious ENOSPC).
#[test]
fn a_sync_in_progress_does_not_count_its_blocks_twice() {
    let (pool, _, os) = pool_with_objset();
    let tx = pool.begin();
    let id = os.create(&tx, ObjType(30), 131072, &[0; BONUS_LEN]).unwrap();
    os.write(&tx, id, 0, &vec![7u8; 8 << 20]).unwrap();
    let s = &pool.shared;
    let dirty = s.dirty_asize.load(Ordering::Relaxed);
    let (size, free) = {
        let t = s.io.alloc.totals();
        (t.total, t.free)
    };
    // Exactly what still fits in this txg (the in-txg check keeps half
    // the slop).
    let room = free - crate::space::slop_bytes(size) / 2 - dirty;
    assert!(s.check_space(room).is_ok());
    // The sync begins and allocates 4 MiB of what the txg was charged.
    s.sync_space_begin();
    let taken = s.io.alloc.lock().alloc(&|_| 4 << 20, &|_| 4096, &[], false).expect("4 MiB free");
    assert!(s.check_space(room).is_ok(), "the sync's own blocks counted twice");
    assert!(s.check_space(room + 4096).is_err(), "no more room than before the sync");
    // An intent-log block taken meanwhile is not the sync's: it takes its
    // room away, credit or not.
    let log = crate::zil::alloc::alloc_extents(s, 1 << 20, 1, crate::zil::VdevClass::Normal, true, tx.txg()).unwrap();
    let log_bytes: u64 = log.iter().map(|e| e.len).sum();
    assert!(s.check_space(room).is_err(), "a log block hidden by the sync's credit");
    assert!(s.check_space(room - log_bytes).is_ok());
    for e in log {
        s.io.alloc.lock().return_held(e);
    }
    // The sync publishes and gives its charges back a piece at a time: at
    // no point is the txg counted twice (while the credit ended before the
    // charges left, a fresh pool's first fill was refused at 61%), and once
    // they are all back the txg counts as what it took.
    let charge = s.dirty_asize.load(Ordering::Relaxed);
    let piece = charge / 4;
    for i in 0..4 {
        s.note_sync_discharge(piece);
        s.undirty(crate::space::Charge { bytes: 0, asize: piece });
        assert!(s.check_space(room).is_ok(), "publish step {i}: the txg counted twice");
    }
    let after = room + charge - (4 << 20);
    assert!(s.check_space(after).is_ok(), "published: the txg counts as what it took");
    assert!(s.check_space(after + 1).is_err(), "published: no more room than free space");
    s.add_dirty(crate::space::Charge { bytes: 0, asize: 4 * piece });
    // Without the credit (no sync under way) the same state is short, and
    // the refusal is counted where it was given.
    s.sync_space_end();
    let was = pool.nospace_refusals();
    assert!(s.check_space(room).is_err());
    let now = pool.nospace_refusals();
    assert_eq!(now.in_txg, was.in_txg + 1, "a refusal inside the txg counts as one");
    assert_eq!((now.reserve, now.reserve_waited_out), (was.reserve, was.reserve_waited_out));
    s.io.alloc.lock().unalloc(taken);
    drop(tx);
    pool.sync().unwrap();
    assert!(pool.check().ok());
}

/// The bytes `segs` hold, in order.
fn flat(segs: &[Segment]) -> Vec<u8> {
    let mut v = Vec::new();
    for s in segs {
        s.append_to(&mut v);
    }
    v
}

/// `read_segments` hands out what `read` copies: dirty blocks, committed
/// ones, holes, a block written in part and the range past the object's
/// blocks, with runs of zeros merged, at every alignment tried.
#[test]
fn read_segments_cover_what_read_reads() {
    let (pool, _osid, os) = pool_with_objset();
    let bs = 16384usize;
    let id = {
        let tx = pool.begin();
        let id = os.create(&tx, ObjType(30), bs as u32, &[0; BONUS_LEN]).unwrap();
        let data: Vec<u8> = (0..bs * 3).map(|i| (i % 251) as u8 + 1).collect();
        os.write(&tx, id, 0, &data).unwrap();
        // Blocks 3 and 4 stay holes; block 5 is written in part.
        os.write(&tx, id, (bs * 5 + 100) as u64, &[9u8; 1000]).unwrap();
        id
    };
    pool.sync().unwrap();
    {
        // A dirty version over a committed block.
        let tx = pool.begin();
        os.write(&tx, id, (bs + 10) as u64, &[0xEEu8; 5000]).unwrap();
    }
    for (off, len) in [(0usize, bs * 8), (1, bs * 3), (bs - 1, 2), (bs * 3 - 5, bs * 2 + 10), (bs * 5 + 50, 200), (bs * 7, bs), (0, 0)] {
        let mut want = vec![0xAAu8; len];
        os.read(id, off as u64, &mut want).unwrap();
        let mut segs = Vec::new();
        os.read_segments(id, off as u64, len, &mut segs).unwrap();
        let got = flat(&segs);
        assert!(got == want, "offset {off}, length {len}");
        assert!(segs.windows(2).all(|w| w[0].bytes().is_some() || w[1].bytes().is_some()), "runs of zeros are merged at {off}");
    }
}

/// `f` on another thread, which must return within 10 s: a call that
/// waits for a lock the test holds fails it instead of hanging it.
fn without_waiting<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(10)).expect("the call waited for a lock the test holds")
}

/// `read_segments_cached` answers from dirty and cached blocks and gives
/// up, reading nothing and leaving `out` empty, at a block the cache lost.
#[test]
fn cached_segments_give_up_at_a_block_not_in_the_cache() {
    let (pool, _osid, os) = pool_with_objset();
    let bs = 16384usize;
    let data: Vec<u8> = (0..bs * 4).map(|i| (i % 253) as u8).collect();
    let id = {
        let tx = pool.begin();
        let id = os.create(&tx, ObjType(30), bs as u32, &[0; BONUS_LEN]).unwrap();
        os.write(&tx, id, 0, &data).unwrap();
        id
    };
    let mut out = Vec::new();
    assert!(os.read_segments_cached(id, 0, bs * 4, &mut out).unwrap(), "dirty blocks");
    assert!(flat(&out) == data);
    pool.sync().unwrap();
    // A read caches what the sync wrote; then block 2 is dropped.
    os.read_segments(id, 0, bs * 4, &mut Vec::new()).unwrap();
    let phys = os.dnode(ObjectId(id.0)).unwrap().st.lock().committed.clone();
    let bp = crate::tree::lookup(os.io(), &phys, 2).unwrap();
    assert!(!bp.is_hole());
    os.io().evict(&bp);
    let mut out = Vec::new();
    assert!(os.read_segments_cached(id, 100, bs * 2 - 100, &mut out).unwrap(), "blocks 0 and 1 are cached");
    assert!(flat(&out) == data[100..bs * 2]);
    let mut out = vec![Segment::Zeros(7)];
    assert!(!os.read_segments_cached(id, 0, bs * 4, &mut out).unwrap(), "block 2 is not cached");
    assert!(matches!(out[..], [Segment::Zeros(7)]), "what the caller had is left as it was");
    // A read brings it back; past the end reads zeros, cached or not.
    let mut out = Vec::new();
    os.read_segments(id, 0, bs * 4, &mut out).unwrap();
    let mut again = Vec::new();
    assert!(os.read_segments_cached(id, 0, bs * 5, &mut again).unwrap());
    let mut want = data.clone();
    want.resize(bs * 5, 0);
    assert!(flat(&again) == want);
    // A busy shard of the handle map (a dnode being loaded holds it across
    // a disk read) or reader gate (a sync waiting for it): nothing waits.
    // (The calls run on another thread: one that waits fails the test
    // after 10 s instead of hanging it.)
    let try_both = || {
        let os = os.clone();
        without_waiting(move || (os.info_cached(id).unwrap().is_some(), os.read_segments_cached(id, 0, bs, &mut Vec::new()).unwrap()))
    };
    {
        let _shard = os.inner.handles.write_shard(id);
        assert_eq!(try_both(), (false, false), "the handle map's shard is busy");
    }
    {
        let _gate = os.shared.reader_gate.write();
        assert_eq!(try_both(), (true, false), "attributes need no gate; the reader gate is busy");
    }
    assert!(os.read_segments_cached(id, 0, bs, &mut Vec::new()).unwrap());
    // Its dnode out of memory: nothing cached answers, nothing is loaded.
    let info = os.info(id).unwrap();
    assert_eq!(os.info_cached(id).unwrap().map(|i| i.length), Some(info.length));
    drop(again);
    drop(out);
    os.inner.handles.drop_clean();
    assert!(os.info_cached(id).unwrap().is_none(), "the dnode is not in memory");
    assert!(!os.read_segments_cached(id, 0, bs, &mut Vec::new()).unwrap(), "nor read for a cached read");
    assert!(os.info_cached(id).unwrap().is_none(), "and still not loaded");
    assert_eq!(os.info(id).unwrap().length, info.length);
    assert!(os.info_cached(id).unwrap().is_some());
}
