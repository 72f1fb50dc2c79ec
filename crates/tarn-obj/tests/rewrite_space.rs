//! Writers and the defer window (space.rs, `reserve_space`). Rewritten
//! blocks come back as free space only after `DEFER_TXGS` txgs; a pool
//! rewriting its data always has some of that on its way back. While most
//! of what is free lies in large extents, a writer reserving space goes on
//! at once: no txg is forced (before, a sixteenth of the free space
//! returning made every writer wait for a sync, and NBD random writes fell
//! to a few hundred IOPS in those seconds). After a mass delete on a pool
//! whose free space is holes, the writer still waits for the space to come
//! back rather than write into the holes between what is being freed.

mod common;
use common::*;
use std::sync::Arc;
use tarn_dev::MemDevice;
use tarn_obj::*;

const CHUNK: usize = 1 << 20;

fn pool_and_objset(dev: u64) -> (Arc<ObjPool>, ObjectSet) {
    let mem: Vec<Arc<MemDevice>> = mem_devs(2, dev);
    let pool = create(&as_dyn(&mem), TopKind::Mirror);
    // No txg unless the test (or a waiting writer) asks for one.
    pool.set_tunables(Tunables { txg_timeout_ms: 3_600_000, ..Default::default() });
    let osid = {
        let tx = pool.begin();
        pool.create_objset(&tx).unwrap()
    };
    let os = pool.open_objset(osid).unwrap();
    os.set_write_props(WriteProps {
        compression: Compression::Off,
        checksum: ChecksumKind::Fletcher4,
        copies: 1,
        primarycache: Default::default(),
        secondarycache: Default::default(),
    });
    pool.sync().unwrap();
    (pool, os)
}

/// Writes `len` bytes of `fill` over object `id` from offset 0, in 1 MiB
/// transactions.
fn write_over(pool: &ObjPool, os: &ObjectSet, id: ObjectId, len: usize, fill: u8) {
    let data = vec![fill; CHUNK];
    for off in (0..len).step_by(CHUNK) {
        os.reserve(CHUNK as u64).unwrap();
        let tx = pool.begin();
        os.write_data(&tx, id, off as u64, &data).unwrap();
    }
}

fn new_object(pool: &ObjPool, os: &ObjectSet) -> ObjectId {
    let tx = pool.begin();
    os.create(&tx, ObjType(20), 128 << 10, &[0; BONUS_LEN]).unwrap()
}

#[test]
fn rewriting_with_room_to_spare_forces_no_txg() {
    let (pool, os) = pool_and_objset(256 << 20);
    let id = new_object(&pool, &os);
    let len = 16 << 20;
    // A rewrite per txg: the old copies of the last DEFER_TXGS rewrites
    // (64 MiB) are in the defer window, far more than the slop (8 MiB)
    // and than a sixteenth of the free space, less than the free space.
    for round in 0..tarn_block::DEFER_TXGS + 2 {
        write_over(&pool, &os, id, len, round as u8);
        pool.sync().unwrap();
    }
    let space = pool.space();
    assert!(space.free > (len as u64) * (tarn_block::DEFER_TXGS + 2), "{space:?}");
    let before = pool.last_synced_txg();
    for _ in 0..8 {
        os.reserve(CHUNK as u64).unwrap();
    }
    assert_eq!(pool.last_synced_txg(), before, "a writer forced a txg with {space:?}");
    // And the data is the last rewrite's.
    let got = read_all(&os, id, len);
    assert!(got.iter().all(|&b| b == (tarn_block::DEFER_TXGS + 1) as u8));
}

#[test]
fn after_a_mass_delete_among_holes_the_writer_waits_for_the_space() {
    let (pool, os) = pool_and_objset(64 << 20);
    // The pool full of 4 KiB objects, every other one freed and back:
    // what is free is 4 KiB holes.
    let kept = fragment(&pool, &os);
    // Then the rest goes: more returning than the holes hold.
    {
        let tx = pool.begin();
        for id in kept {
            os.free(&tx, id).unwrap();
        }
    }
    pool.sync().unwrap();
    let before = pool.last_synced_txg();
    os.reserve(CHUNK as u64).unwrap();
    assert!(pool.last_synced_txg() > before, "the writer did not wait for the returning space ({:?})", pool.space());
    assert!(pool.check().ok());
}
