//! The intent log mechanism: commit, group commit, claim at import,
//! replay (and a crash during it), a damaged block ending the chain.
//! (The seeded power-cut test is in zil_crash.rs.)
mod common;
use common::*;
use std::sync::Arc;
use tarn_dev::Device;
use tarn_obj::*;





/// Checksum errors counted on every leaf: reading the never-written block
/// that ends a chain must not count as one.
fn checksum_errors(pool: &ObjPool) -> u64 {
    pool.status().tops.iter().flat_map(|t| t.children.iter()).map(|l| l.checksum_errors).sum()
}


#[test]
fn committed_records_survive_a_crash_and_replay_once() {
    let mem = mem_devs(2, 64 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Mirror);
    quiet(&pool);
    let (id, os) = new_objset(&pool);
    append_committed(&os, &pool, 0, 50);
    let st = os.log_stats();
    assert_eq!(st.phase, tarn_obj::zil::LogPhase::Open);
    assert!(st.live_blocks > 0, "{st:?}");
    // Crash: no export, no sync.
    drop(os);
    drop(pool);
    let pool = import(as_dyn(&mem), false).unwrap();
    assert_eq!(checksum_errors(&pool), 0, "the chain's unwritten end counted as a checksum error");
    let os = pool.open_objset(id).unwrap();
    assert_eq!(os.log_stats().phase, tarn_obj::zil::LogPhase::Claimed);
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
    // Appends wait for replay.
    {
        let tx = pool.begin();
        assert!(os.log_append(&tx, REC, b"x").is_err());
    }
    let (got, report) = replay_all(&os);
    assert_eq!(got, (0..50).collect::<Vec<u32>>());
    assert_eq!(report.replayed, 50);
    let st = os.log_stats();
    assert_eq!(st.live_blocks, 0, "{st:?}");
    assert!(st.chain_blocks.is_empty());
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
    // A second replay finds nothing; the log works again.
    assert_eq!(replay_all(&os).0, Vec::<u32>::new());
    append_committed(&os, &pool, 100, 5);
    drop(os);
    drop(pool);
    let pool = import(as_dyn(&mem), false).unwrap();
    let os = pool.open_objset(id).unwrap();
    assert_eq!(replay_all(&os).0, (100..105).collect::<Vec<u32>>());
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
}

#[test]
fn synced_records_are_retired_and_not_replayed() {
    let mem = mem_devs(1, 64 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Disk);
    quiet(&pool);
    let (id, os) = new_objset(&pool);
    append_committed(&os, &pool, 0, 20);
    pool.sync().unwrap();
    // The sync covered every record: their blocks are freed.
    assert_eq!(os.log_stats().live_blocks, 0, "{:?}", os.log_stats());
    append_committed(&os, &pool, 20, 3);
    drop(os);
    drop(pool);
    let pool = import(as_dyn(&mem), false).unwrap();
    let os = pool.open_objset(id).unwrap();
    let (got, report) = replay_all(&os);
    assert_eq!(got, vec![20, 21, 22], "{report:?}");
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
    // Export/import with nothing pending: nothing to replay, pool clean.
    pool.export().unwrap();
    drop(os);
    drop(pool);
    let pool = import(as_dyn(&mem), false).unwrap();
    let os = pool.open_objset(id).unwrap();
    assert_eq!(replay_all(&os).0, Vec::<u32>::new());
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
}

#[test]
fn concurrent_committers_share_log_writes() {
    let mem = mem_devs(1, 128 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Disk);
    quiet(&pool);
    let (_, os) = new_objset(&pool);
    let os = Arc::new(os);
    let threads = 8;
    let per = 100;
    std::thread::scope(|sc| {
        for t in 0..threads {
            let os = os.clone();
            let pool = pool.clone();
            sc.spawn(move || {
                for i in 0..per {
                    let tx = pool.begin();
                    let seq = os.log_append(&tx, REC, &((t * 1000 + i) as u32).to_le_bytes()).unwrap();
                    drop(tx);
                    os.log_commit(seq).unwrap();
                }
            });
        }
    });
    let st = os.log_stats();
    eprintln!("{} commits, {} log writes, {} blocks", st.commits, st.writes, st.blocks_written);
    assert_eq!(st.commits, (threads * per) as u64 + 1, "the warm-up commit and ours");
    assert!(st.writes < st.commits, "no group commit: {st:?}");
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
}

#[test]
fn a_damaged_log_block_ends_the_chain() {
    let mem = mem_devs(1, 64 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Disk);
    quiet(&pool);
    let (id, os) = new_objset(&pool);
    // Ten commits, each its own log write: one block each at least.
    append_committed(&os, &pool, 0, 10);
    let st = os.log_stats();
    assert_eq!(st.chain_blocks.len(), 10, "{st:?}");
    // One record per block: damaging the 5th keeps records 0..4.
    let victim = st.chain_blocks[4];
    drop(os);
    drop(pool);
    let off = tarn_vdev::DATA_START + victim.dva[0].offset + 100;
    let mut b = [0u8; 1];
    mem[0].read_at(&mut b, off).unwrap();
    b[0] ^= 0x5a;
    mem[0].write_at(&b, off).unwrap();
    let pool = import(as_dyn(&mem), false).expect("import succeeds despite the damaged log block");
    let os = pool.open_objset(id).unwrap();
    let (got, _) = replay_all(&os);
    assert_eq!(got, (0..4).collect::<Vec<u32>>(), "records before the damaged block replayed, after it discarded");
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
    drop(os);
    drop(pool);
    // And the discarded tail's space was never leaked: a clean re-import.
    let pool = import(as_dyn(&mem), false).unwrap();
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
}

#[test]
fn a_claimed_chain_waits_for_replay_across_txgs_and_imports() {
    let mem = mem_devs(1, 64 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Disk);
    quiet(&pool);
    let (id, os) = new_objset(&pool);
    let (other, _) = new_objset(&pool);
    append_committed(&os, &pool, 0, 6);
    drop(os);
    drop(pool);
    // Import claims the chain; nobody replays it while txgs go by.
    let pool = import(as_dyn(&mem), false).unwrap();
    let o = pool.open_objset(other).unwrap();
    for i in 0..3u8 {
        let tx = pool.begin();
        let obj = o.create(&tx, ObjType(20), 4096, &[0; BONUS_LEN]).unwrap();
        o.write(&tx, obj, 0, &[i + 1; 100]).unwrap();
        drop(tx);
        pool.sync().unwrap();
    }
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
    drop(o);
    drop(pool);
    // Crash again: the claim (its txg on disk) holds, nothing is lost.
    let pool = import(as_dyn(&mem), false).unwrap();
    let os = pool.open_objset(id).unwrap();
    let (got, _) = replay_all(&os);
    assert_eq!(got, (0..6).collect::<Vec<u32>>());
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
}

#[test]
fn snapshots_clones_rollback_and_destroy_leave_no_stray_log() {
    let mem = mem_devs(2, 64 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Mirror);
    quiet(&pool);
    let (head, os) = new_objset(&pool);
    append_committed(&os, &pool, 0, 5);
    // The snapshot's root is the head's as synced: it carries the head's
    // log header, which must never be taken for the snapshot's own.
    let snap = {
        let tx = pool.begin();
        pool.snapshot(&tx, head).unwrap()
    };
    let snap_txg = pool.sync().unwrap();
    append_committed(&os, &pool, 10, 4);
    let clone = {
        let tx = pool.begin();
        pool.clone_objset(&tx, snap, snap_txg).unwrap()
    };
    pool.sync().unwrap();
    append_committed(&os, &pool, 20, 3);
    // Another object set with a live log, destroyed: its log goes with it.
    let (doomed, d) = new_objset(&pool);
    append_committed(&d, &pool, 0, 7);
    drop(d);
    {
        let tx = pool.begin();
        pool.destroy_objset(&tx, doomed).unwrap();
    }
    pool.sync().unwrap();
    append_committed(&os, &pool, 30, 2);
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
    append_committed(&os, &pool, 40, 2);
    drop(os);
    drop(pool);
    let pool = import(as_dyn(&mem), false).unwrap();
    for other in [snap, clone] {
        let o = pool.open_objset(other).unwrap();
        let st = o.log_stats();
        assert_eq!(st.phase, tarn_obj::zil::LogPhase::Closed, "object set {other:?}: {st:?}");
        assert_eq!(replay_all(&o).0, Vec::<u32>::new());
    }
    let os = pool.open_objset(head).unwrap();
    assert_eq!(replay_all(&os).0, vec![40, 41]);
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
    // Roll the head back with a live log: the log describes changes the
    // rollback discards, and goes.
    append_committed(&os, &pool, 50, 3);
    drop(os);
    {
        let tx = pool.begin();
        pool.rollback(&tx, head, snap).unwrap();
    }
    pool.sync().unwrap();
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
    drop(pool);
    let pool = import(as_dyn(&mem), false).unwrap();
    let os = pool.open_objset(head).unwrap();
    assert_eq!(replay_all(&os).0, Vec::<u32>::new());
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
}

#[test]
fn log_decoders_never_panic_on_garbage() {
    use rand::{Rng, SeedableRng};
    let run = tarn_testkit::seeded!(2000);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(run.seed);
    let good = tarn_obj::zil::format::encode_block(
        4096,
        9,
        3,
        &[tarn_obj::zil::LogRecord { rtype: 1, txg: 5, seq: 8, payload: vec![1, 2, 3] }],
        &tarn_block::BlockPtr::HOLE,
    );
    for _ in 0..run.count {
        let mut b = if rng.gen_bool(0.5) { good.clone() } else { (0..rng.gen_range(0..5000)).map(|_| rng.gen()).collect() };
        for _ in 0..rng.gen_range(0..8) {
            if !b.is_empty() {
                let i = rng.gen_range(0..b.len());
                b[i] = rng.gen();
            }
        }
        let _ = tarn_obj::zil::format::decode_block(&b);
        let _ = tarn_obj::zil::format::verifies(&b, 9, 3);
        let _ = tarn_obj::zil::LogHeader::decode(&b);
    }
    assert!(tarn_obj::zil::format::verifies(&good, 9, 3));
}

#[test]
fn file_vdevs_concurrent_commits_crash_and_replay() {
    use tarn_dev::FileDevice;
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<std::path::PathBuf> = (0..3).map(|i| dir.path().join(format!("f{i}"))).collect();
    let devs: Vec<Arc<dyn Device>> = paths.iter().map(|p| FileDevice::open(p, Some(64 << 20)).unwrap() as Arc<dyn Device>).collect();
    let pool = create(&devs, TopKind::Raidz { parity: 1 });
    quiet(&pool);
    let sets: Vec<(ObjsetId, Arc<ObjectSet>)> = (0..2).map(|_| new_objset(&pool)).map(|(id, os)| (id, Arc::new(os))).collect();
    // (object set index, seq, txg, payload) of every committed record.
    let committed = parking_lot::Mutex::new(Vec::new());
    let started = std::time::Instant::now();
    std::thread::scope(|sc| {
        for t in 0..4u32 {
            let (sets, committed, pool) = (&sets, &committed, pool.clone());
            sc.spawn(move || {
                for i in 0..50u32 {
                    let k = ((t + i) % 2) as usize;
                    let p = (t * 1000 + i).to_le_bytes();
                    let tx = pool.begin();
                    let seq = sets[k].1.log_append(&tx, REC, &p).unwrap();
                    let txg = tx.txg();
                    drop(tx);
                    sets[k].1.log_commit(seq).unwrap();
                    committed.lock().push((k, seq, txg, u32::from_le_bytes(p)));
                }
            });
        }
    });
    let elapsed = started.elapsed();
    for (k, (_, os)) in sets.iter().enumerate() {
        let st = os.log_stats();
        eprintln!("object set {k}: {} commits, {} log writes, {} blocks (file vdevs, raidz1 of 3; 200 commits in {elapsed:?} in all)", st.commits, st.writes, st.blocks_written);
    }
    let ids: Vec<ObjsetId> = sets.iter().map(|(id, _)| *id).collect();
    drop(sets);
    drop(pool);
    drop(devs);
    // The pool's threads let go of the files as they notice the drop.
    let reopen = |p: &std::path::Path| {
        for _ in 0..100 {
            match FileDevice::open(p, None) {
                Ok(d) => return d as Arc<dyn Device>,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
            }
        }
        panic!("{} still in use 5 s after the pool was dropped", p.display());
    };
    let devs: Vec<Arc<dyn Device>> = paths.iter().map(|p| reopen(p)).collect();
    let pool = import(devs, false).unwrap();
    let synced = pool.last_synced_txg();
    let mut committed = committed.into_inner();
    committed.sort();
    for (k, id) in ids.iter().enumerate() {
        let os = pool.open_objset(*id).unwrap();
        let mut got = Vec::new();
        os.log_replay(&mut |_, r| {
            got.push((r.seq, u32::from_le_bytes(r.payload[..4].try_into().unwrap())));
            Ok(())
        })
        .unwrap();
        let want: Vec<(u64, u32)> = committed.iter().filter(|c| c.0 == k && c.2 > synced).map(|c| (c.1, c.3)).collect();
        assert_eq!(got, want, "object set {k}: replayed = committed records of unsynced txgs, in order");
    }
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
}

#[test]
fn a_scrub_repairs_a_damaged_copy_of_a_live_log_block() {
    let mem = mem_devs(2, 64 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Mirror);
    quiet(&pool);
    let (_, os) = new_objset(&pool);
    append_committed(&os, &pool, 0, 3);
    let st = os.log_stats();
    assert_eq!(st.chain_blocks.len(), 3, "{st:?}");
    // One side's copy of the second block rots (the pointer has no checksum:
    // only a scan of the log blocks themselves can notice).
    let victim = st.chain_blocks[1];
    let off = tarn_vdev::DATA_START + victim.dva[0].offset + 200;
    let rotten = [0xa5u8; 64];
    mem[1].write_at(&rotten, off).unwrap();
    pool.scrub_start().unwrap();
    assert!(pool.wait_scan(None, std::time::Duration::from_secs(60)), "scrub did not finish");
    let s = pool.scan_stats().expect("scan stats");
    assert!(s.repaired >= victim.psize as u64, "the rotten log block copy was not repaired: {s:?}");
    let mut back = [0u8; 64];
    mem[1].read_at(&mut back, off).unwrap();
    assert_ne!(back, rotten, "still rotten on the device");
    // A second scrub finds nothing more.
    pool.scrub_start().unwrap();
    assert!(pool.wait_scan(None, std::time::Duration::from_secs(60)));
    assert_eq!(pool.scan_stats().unwrap().repaired, 0);
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
}
