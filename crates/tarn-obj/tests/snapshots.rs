//! Snapshots, dead lists and rollback in process: a seeded random sequence
//! of writes, frees, snapshots, destroys (in any order) and rollbacks, on a
//! raidz1 pool, against a model of the head and of every snapshot. After
//! every operation the pool checker must find no damaged block, no leak and
//! no double allocation — so no block a snapshot still holds was freed,
//! and every block only a destroyed snapshot held was — and every snapshot
//! must read exactly as the head was when it was taken.
mod common;
use common::*;

use std::collections::BTreeMap;

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_obj::*;

const OBJECTS: u64 = 4;
const SPAN: usize = 600_000;

type Model = BTreeMap<u64, Vec<u8>>;

fn read_model(os: &ObjectSet, ids: &[ObjectId], model: &Model, what: &str) {
    for id in ids {
        let want = model.get(&id.0).cloned().unwrap_or_default();
        let mut got = vec![0u8; want.len()];
        os.read(*id, 0, &mut got).unwrap_or_else(|e| panic!("{what}: read object {}: {e}", id.0));
        assert!(got == want, "{what}: object {} differs", id.0);
    }
}

/// Destroys the `i`-th snapshot (oldest first) of `head`, telling the pool
/// its neighbours, and syncs.
fn destroy_nth(pool: &ObjPool, head: ObjsetId, snaps: &mut Vec<(ObjsetId, Txg, Model)>, i: usize) {
    let prev_txg = if i == 0 { 0 } else { snaps[i - 1].1 };
    let next = snaps.get(i + 1).map_or(head, |n| n.0);
    {
        let tx = pool.begin();
        pool.destroy_snapshot(&tx, snaps[i].0, prev_txg, next).unwrap();
    }
    pool.sync().unwrap();
    snaps.remove(i);
}

#[test]
fn random_snapshot_destroy_rollback_sequences_stay_consistent() {
    let run = tarn_testkit::seeded!(120);
    let (seed, count) = (run.seed, run.count);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mem = mem_devs(3, 128 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Raidz { parity: 1 });
    let head = {
        let tx = pool.begin();
        pool.create_objset(&tx).unwrap()
    };
    let mut os = pool.open_objset(head).unwrap();
    let ids: Vec<ObjectId> = {
        let tx = pool.begin();
        (0..OBJECTS).map(|_| os.create(&tx, ObjType(20), 16384, &[0; BONUS_LEN]).unwrap()).collect()
    };
    pool.sync().unwrap();
    let mut model: Model = ids.iter().map(|id| (id.0, Vec::new())).collect();
    // (snapshot id, txg, model when taken), oldest first.
    let mut snaps: Vec<(ObjsetId, Txg, Model)> = Vec::new();
    let mut taken = 0;
    for step in 0..count {
        let what = format!("step {step}");
        match rng.gen_range(0..10) {
            0..=4 => {
                let id = ids[rng.gen_range(0..ids.len())];
                let off = rng.gen_range(0..SPAN);
                let len = rng.gen_range(1..=120_000);
                let mut data = vec![0u8; len];
                rng.fill_bytes(&mut data);
                {
                    let tx = pool.begin();
                    os.write(&tx, id, off as u64, &data).unwrap();
                }
                let m = model.get_mut(&id.0).unwrap();
                if m.len() < off + len {
                    m.resize(off + len, 0);
                }
                m[off..off + len].copy_from_slice(&data);
            }
            5 => {
                let id = ids[rng.gen_range(0..ids.len())];
                {
                    let tx = pool.begin();
                    os.free_range(&tx, id, 0, None).unwrap();
                }
                model.get_mut(&id.0).unwrap().iter_mut().for_each(|b| *b = 0);
            }
            6 | 7 => {
                let tx = pool.begin();
                let txg = tx.txg();
                let sid = pool.snapshot(&tx, head).unwrap();
                drop(tx);
                pool.sync().unwrap();
                snaps.push((sid, txg, model.clone()));
                taken += 1;
            }
            8 if !snaps.is_empty() => {
                let i = rng.gen_range(0..snaps.len());
                destroy_nth(&pool, head, &mut snaps, i);
            }
            9 if !snaps.is_empty() => {
                let (sid, _, m) = snaps.last().unwrap().clone();
                pool.sync().unwrap();
                {
                    let tx = pool.begin();
                    pool.rollback(&tx, head, sid).unwrap();
                }
                pool.sync().unwrap();
                drop(os);
                os = pool.open_objset(head).unwrap();
                model = m;
            }
            _ => {}
        }
        if step % 3 == 0 {
            pool.sync().unwrap();
            let report = pool.check();
            assert!(report.ok(), "{what}: {report:?}");
        }
        read_model(&os, &ids, &model, &format!("{what}: head"));
        if step % 5 == 0 {
            for (sid, txg, m) in &snaps {
                let sos = pool.open_objset(*sid).unwrap();
                read_model(&sos, &ids, m, &format!("{what}: snapshot of txg {txg}"));
            }
        }
    }
    assert!(taken > 3, "the sequence took {taken} snapshots");
    // Destroy what is left in a random order; then the head alone holds space.
    while !snaps.is_empty() {
        let i = rng.gen_range(0..snaps.len());
        destroy_nth(&pool, head, &mut snaps, i);
        let report = pool.check();
        assert!(report.ok(), "final destroys: {report:?}");
    }
    let (prev, count, bytes) = pool.snapshot_info(head).unwrap();
    assert_eq!((prev, count, bytes), (0, 0, 0), "no snapshot left, nothing on the dead list");
    read_model(&os, &ids, &model, "end");
    // Survives export/import.
    pool.export().unwrap();
    drop(os);
    drop(pool);
    let pool = import(as_dyn(&mem), false).unwrap();
    let os = pool.open_objset(head).unwrap();
    read_model(&os, &ids, &model, "after import");
    assert!(pool.check().ok());
}
