//! Objects written, synced, exported and imported come back byte for byte,
//! and the checker finds no damage, leak or double allocation.
mod common;
use common::*;
use rand::{Rng, SeedableRng};
use tarn_obj::*;

#[test]
fn write_export_import_check() {
    let run = tarn_testkit::seeded!(200);
    let (seed, count) = (run.seed, run.count);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    for kind in [TopKind::Disk, TopKind::Mirror, TopKind::Raidz { parity: 1 }, TopKind::Raidz { parity: 2 }] {
        let n = match kind { TopKind::Disk | TopKind::Hole => 1, TopKind::Mirror => 2, TopKind::Raidz { parity } => 3 + parity as usize };
        let mem = mem_devs(n, 64 << 20);
        let pool = create(&as_dyn(&mem), kind.clone());
        let osid = { let tx = pool.begin(); pool.create_objset(&tx).unwrap() };
        let os = pool.open_objset(osid).unwrap();
        let mut model: Vec<(ObjectId, Vec<u8>)> = Vec::new();
        for i in 0..count {
            let tx = pool.begin();
            if model.is_empty() || rng.gen_bool(0.2) {
                let bs = [512u32, 4096, 16384, 131072][rng.gen_range(0..4)];
                let id = os.create(&tx, ObjType(20), bs, &[i as u8; BONUS_LEN]).unwrap();
                model.push((id, Vec::new()));
            }
            let k = rng.gen_range(0..model.len());
            let (id, data) = &mut model[k];
            let off = rng.gen_range(0..300_000usize);
            let len = rng.gen_range(1..200_000usize);
            let fill: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            os.write(&tx, *id, off as u64, &fill).unwrap();
            if data.len() < off + len { data.resize(off + len, 0); }
            data[off..off + len].copy_from_slice(&fill);
            if rng.gen_bool(0.1) {
                let cut = rng.gen_range(0..data.len() + 1);
                os.free_range(&tx, *id, cut as u64, None).unwrap();
                data.truncate(cut);
            }
            drop(tx);
            if rng.gen_bool(0.05) { pool.sync().unwrap(); }
            let (id, data) = &model[rng.gen_range(0..model.len())];
            assert_eq!(&read_all(&os, *id, data.len()), data, "read-back before sync, seed {seed}");
        }
        // Free one object entirely.
        let (gone, _) = model.remove(0);
        { let tx = pool.begin(); os.free(&tx, gone).unwrap(); }
        pool.sync().unwrap();
        let report = pool.check();
        assert!(report.ok(), "check before export: {report:?}");
        pool.export().unwrap();
        drop(os);
        drop(pool);
        let pool = import(as_dyn(&mem), false).expect("import");
        let os = pool.open_objset(osid).unwrap();
        for (id, data) in &model {
            assert_eq!(&read_all(&os, *id, data.len()), data, "after import, seed {seed}");
        }
        assert!(os.info(gone).is_err());
        let report = pool.check();
        assert!(report.ok(), "check after import: {report:?}");
        assert!(report.blocks > 0);
        // Freeing everything returns the space (modulo metadata) after the defer window.
        { let tx = pool.begin(); for (id, _) in &model { os.free(&tx, *id).unwrap(); } }
        for _ in 0..6 { pool.sync().unwrap(); }
        let report = pool.check();
        assert!(report.ok(), "check after frees: {report:?}");
        assert!(os.used_bytes() < 1 << 20, "used {} after freeing all", os.used_bytes());
    }
}

#[test]
fn sequential_reads_prefetch_ahead() {
    let mem = mem_devs(4, 64 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Raidz { parity: 1 });
    let osid = { let tx = pool.begin(); pool.create_objset(&tx).unwrap() };
    let os = pool.open_objset(osid).unwrap();
    let id = { let tx = pool.begin(); os.create(&tx, ObjType(20), 131072, &[0; BONUS_LEN]).unwrap() };
    let data: Vec<u8> = (0..16u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    { let tx = pool.begin(); os.write(&tx, id, 0, &data).unwrap(); }
    pool.export().unwrap();
    drop(os);
    drop(pool);
    let pool = import(as_dyn(&mem), false).unwrap();
    let os = pool.open_objset(osid).unwrap();
    let mut back = vec![0u8; data.len()];
    for (i, chunk) in back.chunks_mut(128 << 10).enumerate() {
        os.read(id, (i as u64) << 17, chunk).unwrap();
    }
    assert!(back == data, "sequential read returns the data");
    assert!(pool.prefetched_blocks() > 0, "a sequential reader is read ahead of");
    // Random reads do not trigger read-ahead. (The sequential reader's
    // read-ahead runs on after its last read: let it finish first.)
    let idle = std::time::Duration::from_secs(60);
    assert!(pool.wait_prefetch_idle(idle), "read-ahead still running after a minute");
    let before = pool.prefetched_blocks();
    let mut b = [0u8; 4096];
    for off in [9u64 << 20, 1 << 20, 13 << 20, 3 << 20] {
        os.read(id, off, &mut b).unwrap();
    }
    assert!(pool.wait_prefetch_idle(idle));
    assert_eq!(pool.prefetched_blocks(), before);
}
