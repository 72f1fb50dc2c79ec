//! Log vdevs (SLOG): where log blocks go, what a log vdev adds to the
//! pool's space (nothing), removal with live records, and log device
//! faults (vanishing, failing writes, rot), single and mirrored, through
//! a crash and the import after it (`import -m` when a log is missing).
mod common;
use common::*;
use std::sync::Arc;
use tarn_dev::{Device, FaultDevice, MemDevice};
use tarn_obj::zil::LogPhase;
use tarn_obj::*;

const DEV_SIZE: u64 = 64 << 20;


/// A pool of a two-way mirror with a log vdev of `log_kind` over `logs`.
fn create_with_log(main: &[Arc<dyn Device>], logs: &[Arc<dyn Device>], log_kind: TopKind) -> Arc<ObjPool> {
    let named = |prefix: &str, devs: &[Arc<dyn Device>]| -> Vec<(String, Arc<dyn Device>)> {
        devs.iter().enumerate().map(|(i, d)| (format!("{prefix}{i}"), d.clone())).collect()
    };
    ObjPool::create_with_logs(
        PoolCreate {
            name: "t".into(),
            tops: vec![(TopKind::Mirror, named("d", main))],
            ashift: 12,
            properties: Default::default(),
            hostname: "test".into(),
        },
        vec![(log_kind, named("slog", logs))],
    )
    .expect("create pool with a log vdev")
}

fn opts() -> ImportOptions {
    ImportOptions { rewind: false, force: true, hostname: "test".into(), readonly: false }
}

fn faulty(devs: &[Arc<MemDevice>]) -> Vec<Arc<FaultDevice>> {
    devs.iter().map(|d| FaultDevice::new(d.clone() as Arc<dyn Device>)).collect()
}

fn dyn_faulty(devs: &[Arc<FaultDevice>]) -> Vec<Arc<dyn Device>> {
    devs.iter().map(|d| d.clone() as Arc<dyn Device>).collect()
}




/// Top-level vdevs holding the live blocks of `os`'s chain.
fn chain_vdevs(os: &ObjectSet) -> Vec<u32> {
    let mut v: Vec<u32> = os.log_stats().chain_blocks.iter().flat_map(|bp| bp.dvas().iter().map(|d| d.vdev).collect::<Vec<_>>()).collect();
    v.sort();
    v.dedup();
    v
}

/// Replayed records are those not yet in a synced txg: a suffix of what
/// was committed (a fallback sync, or the txg that writes a new chain's
/// header, retires the records before it), never with a gap.
fn assert_suffix(got: &[u32], from: u32, to: u32, what: &str) {
    let first = *got.first().unwrap_or_else(|| panic!("{what}: nothing replayed"));
    assert!(first >= from && first <= from + 3, "{what}: replay starts at {first}, committed from {from}");
    assert_eq!(got, (first..to).collect::<Vec<u32>>(), "{what}");
}

/// Incompressible bytes.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn check_clean(pool: &ObjPool) {
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
}

#[test]
fn log_blocks_land_on_the_log_vdev_and_nothing_else_does() {
    let main = mem_devs(2, DEV_SIZE);
    let slog = mem_devs(1, DEV_SIZE);
    let pool = create_with_log(&as_dyn(&main), &as_dyn(&slog), TopKind::Disk);
    quiet(&pool);
    assert_eq!(pool.log_vdev_ids(), vec![1]);
    // The log vdev is not pool space.
    let per_vdev = pool.vdev_space();
    assert_eq!(per_vdev.len(), 2);
    assert_eq!(pool.space().size, per_vdev[0].size, "a log vdev counted in the pool's size");
    let (_, os) = new_objset(&pool);
    append_committed(&os, &pool, 0, 40);
    assert!(os.log_stats().live_blocks > 0);
    assert_eq!(chain_vdevs(&os), vec![1], "log blocks not on the log vdev: {:?}", os.log_stats());
    // Lots of data and metadata, synced: none of it on the log vdev.
    for i in 0..32u8 {
        let tx = pool.begin();
        let obj = os.create(&tx, ObjType(20), 131072, &[0; BONUS_LEN]).unwrap();
        os.write(&tx, obj, 0, &noise(u64::from(i) + 1, 256 << 10)).unwrap();
    }
    pool.sync().unwrap();
    assert_eq!(os.log_stats().live_blocks, 0, "the sync retires every record");
    let per_vdev = pool.vdev_space();
    assert!(per_vdev[0].alloc > 8 << 20, "{per_vdev:?}");
    // Only the block the chain allocated ahead stays on the log vdev.
    assert!(per_vdev[1].alloc <= 128 << 10, "normal blocks on the log vdev: {per_vdev:?}");
    let status = pool.status();
    assert_eq!(status.tops.len(), 1);
    assert_eq!(status.logs.len(), 1);
    assert_eq!(status.logs[0].name, "slog0");
    check_clean(&pool);
}

/// The crash-cut variant of zil.rs with a log vdev, single and mirrored:
/// what was committed comes back from the log device.
#[test]
fn committed_records_replay_from_a_log_vdev_after_a_crash() {
    for (kind, n) in [(TopKind::Disk, 1), (TopKind::Mirror, 2)] {
        let main = mem_devs(2, DEV_SIZE);
        let slog = mem_devs(n, DEV_SIZE);
        let pool = create_with_log(&as_dyn(&main), &as_dyn(&slog), kind.clone());
        quiet(&pool);
        let (id, os) = new_objset(&pool);
        append_committed(&os, &pool, 0, 60);
        assert_eq!(chain_vdevs(&os), vec![1]);
        drop(os);
        drop(pool);
        let all: Vec<Arc<dyn Device>> = as_dyn(&main).into_iter().chain(as_dyn(&slog)).collect();
        let pool = ObjPool::import(all, opts()).unwrap();
        let os = pool.open_objset(id).unwrap();
        assert_eq!(os.log_stats().phase, LogPhase::Claimed);
        assert_eq!(replay_all(&os).0, (0..60).collect::<Vec<u32>>(), "{kind:?}");
        check_clean(&pool);
        // The new chain goes to the log vdev again.
        append_committed(&os, &pool, 100, 3);
        assert_eq!(chain_vdevs(&os), vec![1]);
    }
}

#[test]
fn removing_a_log_vdev_with_live_records_keeps_them() {
    let main = mem_devs(2, DEV_SIZE);
    let slog = mem_devs(2, DEV_SIZE);
    let pool = create_with_log(&as_dyn(&main), &as_dyn(&slog), TopKind::Mirror);
    quiet(&pool);
    let (id, os) = new_objset(&pool);
    append_committed(&os, &pool, 0, 30);
    assert!(os.log_stats().live_blocks > 0);
    // One side of a log mirror is not how it is removed.
    let err = pool.remove_log("slog0").unwrap_err().to_string();
    assert!(err.contains("mirror-1"), "{err}");
    // A normal vdev cannot be removed.
    let err = pool.remove_log("d0").unwrap_err().to_string();
    assert!(err.contains("only log devices"), "{err}");
    assert!(pool.remove_log("nonesuch").unwrap_err().to_string().contains("no such device"));
    pool.remove_log("mirror-1").unwrap();
    assert!(pool.log_vdev_ids().is_empty());
    assert!(pool.status().logs.is_empty());
    assert!(tarn_vdev::read_label(slog[0].as_ref()).is_err(), "a removed log device keeps its label");
    // The pool's own ids do not move: the hole keeps id 1.
    assert_eq!(pool.config().top.len(), 2);
    assert_eq!(pool.config().top[1].kind, TopKind::Hole);
    check_clean(&pool);
    // The log goes on, on the main vdevs.
    append_committed(&os, &pool, 30, 10);
    assert_eq!(chain_vdevs(&os), vec![0]);
    // A crash, and an import without the removed devices.
    drop(os);
    drop(pool);
    let pool = ObjPool::import(as_dyn(&main), opts()).unwrap();
    let os = pool.open_objset(id).unwrap();
    // Records before the removal were synced by it.
    assert_suffix(&replay_all(&os).0, 30, 40, "after removal");
    check_clean(&pool);
    // A log vdev can be added again; it takes the next id.
    let again = mem_devs(1, DEV_SIZE);
    pool.add_log_vdev(TopKind::Disk, vec![("again".into(), again[0].clone() as Arc<dyn Device>)]).unwrap();
    assert_eq!(pool.log_vdev_ids(), vec![2]);
    append_committed(&os, &pool, 50, 5);
    // (The chain's next block was allocated ahead on the main vdevs; the
    // blocks after it are on the new log vdev.)
    let newest = *os.log_stats().chain_blocks.last().expect("live blocks");
    assert_eq!(newest.dvas()[0].vdev, 2, "{:?}", os.log_stats());
    // Raidz is no log vdev.
    let z = mem_devs(3, DEV_SIZE);
    let err = pool.add_log_vdev(TopKind::Raidz { parity: 1 }, as_dyn(&z).into_iter().enumerate().map(|(i, d)| (format!("z{i}"), d)).collect());
    assert!(err.unwrap_err().to_string().contains("raidz"), "raidz log accepted");
    assert_eq!(pool.log_vdev_ids(), vec![2]);
}

#[test]
fn a_single_log_device_that_vanishes_costs_no_commit_and_import_needs_m() {
    let main = mem_devs(2, DEV_SIZE);
    let slog_mem = mem_devs(1, DEV_SIZE);
    let slog = faulty(&slog_mem);
    let pool = create_with_log(&as_dyn(&main), &dyn_faulty(&slog), TopKind::Disk);
    quiet(&pool);
    let (id, os) = new_objset(&pool);
    append_committed(&os, &pool, 0, 10);
    assert_eq!(chain_vdevs(&os), vec![1]);
    slog[0].set_gone(true);
    // The first commit after falls back to a txg sync; every later one goes
    // to the main pool's vdevs. No caller sees an error.
    append_committed(&os, &pool, 10, 20);
    assert_eq!(chain_vdevs(&os), vec![0], "{:?}", os.log_stats());
    let status = pool.status();
    assert_eq!(status.state, DevState::Degraded);
    assert!(!status.logs[0].state.usable());
    drop(os);
    drop(pool);
    // Without the log device: refused, naming it, pointing at -m.
    let err = ObjPool::import(as_dyn(&main), opts()).err().expect("import refused").to_string();
    assert!(err.contains("log device slog0 is missing") && err.contains("-m"), "{err}");
    let pool = ObjPool::import_missing_log(as_dyn(&main), opts()).unwrap();
    let os = pool.open_objset(id).unwrap();
    // Nothing was on the missing device any more: nothing lost.
    assert_suffix(&replay_all(&os).0, 10, 30, "after the log device vanished");
    assert!(pool.import_notes().is_empty(), "{:?}", pool.import_notes());
    let status = pool.status();
    assert_eq!(status.logs.len(), 1);
    assert_eq!(status.logs[0].state, DevState::Unavail);
    check_clean(&pool);
    // The log works (on the main vdevs); the missing device can be removed.
    append_committed(&os, &pool, 30, 3);
    assert_eq!(chain_vdevs(&os), vec![0]);
    pool.remove_log("slog0").unwrap();
    assert!(pool.status().logs.is_empty());
    assert_eq!(pool.status().state, DevState::Online);
    append_committed(&os, &pool, 40, 3);
    drop(os);
    drop(pool);
    let pool = ObjPool::import(as_dyn(&main), opts()).unwrap();
    let os = pool.open_objset(id).unwrap();
    assert_eq!(replay_all(&os).0, vec![40, 41, 42]);
    check_clean(&pool);
}

#[test]
fn import_m_says_what_a_missing_log_device_took() {
    let main = mem_devs(2, DEV_SIZE);
    let slog = mem_devs(1, DEV_SIZE);
    let pool = create_with_log(&as_dyn(&main), &as_dyn(&slog), TopKind::Disk);
    quiet(&pool);
    let (id, os) = new_objset(&pool);
    append_committed(&os, &pool, 0, 25);
    drop(os);
    drop(pool);
    // The crash left 25 records on the log device, which is now gone.
    let err = ObjPool::import(as_dyn(&main), opts()).err().expect("import refused").to_string();
    assert!(err.contains("slog0") && err.contains("use -m"), "{err}");
    let pool = ObjPool::import_missing_log(as_dyn(&main), opts()).unwrap();
    let notes = pool.import_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains(&format!("object set {}", id.0)) && notes[0].contains("slog0"), "{notes:?}");
    let os = pool.open_objset(id).unwrap();
    assert_eq!(replay_all(&os).0, Vec::<u32>::new());
    check_clean(&pool);
    append_committed(&os, &pool, 100, 4);
    assert_eq!(chain_vdevs(&os), vec![0]);
}

#[test]
fn a_log_device_returning_errors_is_left_for_the_main_pool() {
    let main = mem_devs(2, DEV_SIZE);
    let slog_mem = mem_devs(1, DEV_SIZE);
    let slog = faulty(&slog_mem);
    let pool = create_with_log(&as_dyn(&main), &dyn_faulty(&slog), TopKind::Disk);
    quiet(&pool);
    let (id, os) = new_objset(&pool);
    append_committed(&os, &pool, 0, 5);
    slog[0].set_fail_writes(true);
    append_committed(&os, &pool, 5, 1);
    // After the failed write the log device takes no new log blocks.
    append_committed(&os, &pool, 6, 20);
    assert_eq!(chain_vdevs(&os), vec![0]);
    assert!(pool.status().logs[0].children[0].write_errors > 0);
    // Repaired and cleared (`pool clear`): once resilvered, the log device
    // takes log blocks again.
    slog[0].set_fail_writes(false);
    let again = slog[0].clone() as Arc<dyn Device>;
    pool.clear(None, &|_| Some(again.clone())).unwrap();
    assert!(pool.wait_scan(None, std::time::Duration::from_secs(60)));
    assert_eq!(pool.status().logs[0].state, DevState::Online);
    append_committed(&os, &pool, 100, 10);
    let newest = *os.log_stats().chain_blocks.last().expect("live blocks");
    assert_eq!(newest.dvas()[0].vdev, 1, "a cleared log device is not used again: {:?}", os.log_stats());
    drop(os);
    drop(pool);
    let all: Vec<Arc<dyn Device>> = as_dyn(&main).into_iter().chain(as_dyn(&slog_mem)).collect();
    let pool = ObjPool::import(all, opts()).unwrap();
    let os = pool.open_objset(id).unwrap();
    let got = replay_all(&os).0;
    // What the clear's txgs did not retire, then every record since.
    assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
    assert!((100..110).all(|r| got.contains(&r)), "{got:?}");
    check_clean(&pool);
}

#[test]
fn a_mirrored_log_loses_nothing_when_one_side_vanishes_or_rots() {
    for fault in ["vanish", "rot"] {
        let main = mem_devs(2, DEV_SIZE);
        let slog_mem = mem_devs(2, DEV_SIZE);
        let slog = faulty(&slog_mem);
        let pool = create_with_log(&as_dyn(&main), &dyn_faulty(&slog), TopKind::Mirror);
        quiet(&pool);
        let (id, os) = new_objset(&pool);
        append_committed(&os, &pool, 0, 20);
        if fault == "vanish" {
            slog[1].set_gone(true);
        }
        // The mirror goes on with one side.
        append_committed(&os, &pool, 20, 20);
        assert_eq!(chain_vdevs(&os), vec![1], "{fault}");
        drop(os);
        drop(pool);
        let devices: Vec<Arc<dyn Device>> = if fault == "vanish" {
            as_dyn(&main).into_iter().chain([slog_mem[0].clone() as Arc<dyn Device>]).collect()
        } else {
            // Every log block on one side rots.
            let data = tarn_vdev::DATA_START;
            slog[1].corrupt(data, DEV_SIZE - data - (512 << 10), 7).unwrap();
            as_dyn(&main).into_iter().chain(as_dyn(&slog_mem)).collect()
        };
        // A mirror with one side left imports without -m.
        let pool = ObjPool::import(devices, opts()).unwrap();
        let os = pool.open_objset(id).unwrap();
        assert_eq!(replay_all(&os).0, (0..40).collect::<Vec<u32>>(), "{fault}");
        if fault == "vanish" {
            assert_eq!(pool.status().logs[0].state, DevState::Degraded);
            assert_eq!(pool.status().state, DevState::Degraded);
        }
        check_clean(&pool);
    }
}

#[test]
fn a_single_log_device_that_rots_ends_the_chain_not_the_import() {
    let main = mem_devs(2, DEV_SIZE);
    let slog_mem = mem_devs(1, DEV_SIZE);
    let slog = faulty(&slog_mem);
    let pool = create_with_log(&as_dyn(&main), &dyn_faulty(&slog), TopKind::Disk);
    quiet(&pool);
    let (id, os) = new_objset(&pool);
    append_committed(&os, &pool, 0, 20);
    drop(os);
    drop(pool);
    let data = tarn_vdev::DATA_START;
    slog[0].corrupt(data, DEV_SIZE - data - (512 << 10), 11).unwrap();
    let all: Vec<Arc<dyn Device>> = as_dyn(&main).into_iter().chain(as_dyn(&slog_mem)).collect();
    let pool = ObjPool::import(all, opts()).unwrap();
    let os = pool.open_objset(id).unwrap();
    // The damaged chain ends at its first block: its records are gone (as
    // in ZFS), the pool is consistent and the log works again.
    assert!(replay_all(&os).0.is_empty());
    check_clean(&pool);
    append_committed(&os, &pool, 50, 5);
    drop(os);
    drop(pool);
    let all: Vec<Arc<dyn Device>> = as_dyn(&main).into_iter().chain(as_dyn(&slog_mem)).collect();
    let pool = ObjPool::import(all, opts()).unwrap();
    let os = pool.open_objset(id).unwrap();
    assert_eq!(replay_all(&os).0, (50..55).collect::<Vec<u32>>());
}

/// The story: a resilver walks the block tree, and log blocks are not in
/// it, so a log device replaced while its chain held live records would
/// leave them only on the device that goes away.
#[test]
fn replacing_a_log_device_keeps_every_committed_record() {
    let main = mem_devs(2, DEV_SIZE);
    let slog = mem_devs(2, DEV_SIZE);
    let pool = create_with_log(&as_dyn(&main), &as_dyn(&slog[..1]), TopKind::Disk);
    quiet(&pool);
    let (id, os) = new_objset(&pool);
    append_committed(&os, &pool, 0, 30);
    assert!(os.log_stats().live_blocks > 0);
    pool.replace("slog0", "slog1".into(), slog[1].clone() as Arc<dyn Device>).unwrap();
    assert!(pool.wait_scan(None, std::time::Duration::from_secs(60)));
    let leaves: Vec<String> = pool.status().logs[0].children.iter().map(|l| l.path.clone()).collect();
    assert_eq!(leaves, vec!["slog1".to_string()], "the replacement did not complete");
    append_committed(&os, &pool, 30, 10);
    drop(os);
    drop(pool);
    // Only the new log device is there.
    let devices: Vec<Arc<dyn Device>> = as_dyn(&main).into_iter().chain([slog[1].clone() as Arc<dyn Device>]).collect();
    let pool = ObjPool::import(devices, opts()).unwrap();
    let os = pool.open_objset(id).unwrap();
    assert_suffix(&replay_all(&os).0, 30, 40, "after replacing the log device");
    check_clean(&pool);
}
