//! Dnode prefetch for directory walks (`ObjectSet::prefetch_dnodes`): a
//! cold batch of object ids costs one parallel round of dnode block reads,
//! a warm one none, and what is read afterwards is the current dnode even
//! when the cache still holds older copies of its block.
mod common;
use common::*;
use tarn_obj::*;

fn bonus_of(i: u64) -> [u8; BONUS_LEN] {
    let mut b = [0u8; BONUS_LEN];
    b[..8].copy_from_slice(&i.to_le_bytes());
    b[8] = 0xd7;
    b
}

#[test]
fn cold_batch_reads_each_dnode_block_once_and_then_nothing() {
    let mem = mem_devs(4, 64 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Raidz { parity: 1 });
    let osid = {
        let tx = pool.begin();
        pool.create_objset(&tx).unwrap()
    };
    let os = pool.open_objset(osid).unwrap();
    let ids: Vec<ObjectId> = {
        let tx = pool.begin();
        (0..300).map(|i| os.create(&tx, ObjType(20), 512, &bonus_of(i)).unwrap()).collect()
    };
    pool.sync().unwrap();
    pool.export().unwrap();
    drop(os);
    drop(pool);

    let pool = import(as_dyn(&mem), false).expect("import");
    let os = pool.open_objset(osid).unwrap();
    let per_block = format::DNODES_PER_BLOCK;
    let blocks: std::collections::BTreeSet<u64> = ids.iter().map(|id| id.0 / per_block).collect();
    assert!(blocks.len() >= 300 / per_block as usize);
    assert_eq!(os.prefetch_dnodes(&ids), blocks.len(), "one read per distinct dnode block");
    assert_eq!(os.prefetch_dnodes(&ids), 0, "a warm batch reads nothing");
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(os.bonus(*id).unwrap(), bonus_of(i as u64), "object {}", id.0);
    }
    // Ids past the end and object 0 are ignored, never an error.
    let past = ObjectId(ids.last().unwrap().0 + 10 * per_block);
    assert_eq!(os.prefetch_dnodes(&[ObjectId(0), past]), 0);
    assert!(os.info(past).is_err());

    // Objects with handles cost nothing either; after a change is synced,
    // the new dnode block is what a fresh handle sees.
    {
        let tx = pool.begin();
        os.set_bonus(&tx, ids[5], &bonus_of(5000)).unwrap();
    }
    pool.sync().unwrap();
    assert_eq!(os.prefetch_dnodes(&ids[..10]), 0, "all have handles or cached blocks");
    assert_eq!(os.bonus(ids[5]).unwrap(), bonus_of(5000));
    pool.export().unwrap();
    drop(os);
    drop(pool);
    let pool = import(as_dyn(&mem), false).expect("import");
    let os = pool.open_objset(osid).unwrap();
    assert!(os.prefetch_dnodes(&ids[..10]) >= 1);
    assert_eq!(os.bonus(ids[5]).unwrap(), bonus_of(5000));
    assert_eq!(os.bonus(ids[6]).unwrap(), bonus_of(6));
    assert!(pool.check().ok());
}

fn same(a: &ObjInfo, b: &ObjInfo) -> bool {
    a.otype == b.otype && a.block_size == b.block_size && a.length == b.length && a.used_bytes == b.used_bytes && a.bonus == b.bonus
}

/// `info_for_walk` answers what `info` answers, for objects with and
/// without handles, clean or changed in an unsynced txg, and freed ones.
#[test]
fn info_for_walk_agrees_with_info() {
    let mem = mem_devs(4, 64 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Raidz { parity: 1 });
    let osid = {
        let tx = pool.begin();
        pool.create_objset(&tx).unwrap()
    };
    let os = pool.open_objset(osid).unwrap();
    let ids: Vec<ObjectId> = {
        let tx = pool.begin();
        let ids: Vec<ObjectId> = (0..100).map(|i| os.create(&tx, ObjType(20), 4096, &bonus_of(i)).unwrap()).collect();
        for (i, id) in ids.iter().enumerate() {
            os.write_data(&tx, *id, 0, &vec![i as u8; i * 100]).unwrap();
        }
        ids
    };
    pool.sync().unwrap();
    pool.export().unwrap();
    drop(os);
    drop(pool);
    let pool = import(as_dyn(&mem), false).expect("import");
    let os = pool.open_objset(osid).unwrap();
    // No handles yet: read from the dnode blocks, then compared with info
    // (which makes the handles).
    let walked: Vec<ObjInfo> = ids.iter().map(|id| os.info_for_walk(*id).unwrap()).collect();
    for (id, w) in ids.iter().zip(&walked) {
        assert!(same(w, &os.info(*id).unwrap()), "object {}", id.0);
    }
    // Changed and freed in the open txg: the handle's newest view wins.
    {
        let tx = pool.begin();
        os.set_bonus(&tx, ids[1], &bonus_of(777)).unwrap();
        os.write_data(&tx, ids[2], 1 << 20, b"grown").unwrap();
        os.free(&tx, ids[3]).unwrap();
    }
    assert_eq!(os.info_for_walk(ids[1]).unwrap().bonus, bonus_of(777));
    assert!(same(&os.info_for_walk(ids[2]).unwrap(), &os.info(ids[2]).unwrap()));
    assert!(os.info_for_walk(ids[2]).unwrap().length > 1 << 20);
    assert!(matches!(os.info_for_walk(ids[3]), Err(ObjError::NotFound(_))));
    assert!(matches!(os.info_for_walk(ObjectId(ids[99].0 + 1000)), Err(ObjError::NotFound(_))));
    pool.sync().unwrap();
    assert!(matches!(os.info_for_walk(ids[3]), Err(ObjError::NotFound(_))));
}
