//! Scrub, resilver, replace and spares, in process on memory devices.
//!
//! - every layout: corruption on up to `redundancy` devices is found and
//!   repaired by a scrub; a second scrub finds nothing;
//! - offline/online: the resilver writes only what was written while the
//!   device was away, and the device then holds everything on its own;
//! - a device that vanishes, then `replace`: resilver, ONLINE, imports
//!   with the new device set;
//! - a hot spare covers a failed device, and returns to the spare list
//!   when the failed device is replaced;
//! - a scrub and a resilver interrupted by export resume after import.
mod common;
use common::*;

use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_dev::{Device, FaultDevice, MemDevice};
use tarn_obj::scan::{ScanFunc, ScanPhase, ScanStats};
use tarn_obj::*;

const DEV: u64 = 96 << 20;

struct Rig {
    mem: Vec<Arc<MemDevice>>,
    faults: Vec<Arc<FaultDevice>>,
    pool: Arc<ObjPool>,
    osid: ObjsetId,
    files: Vec<(ObjectId, Vec<u8>)>,
}

fn devs_of(faults: &[Arc<FaultDevice>]) -> Vec<Arc<dyn Device>> {
    faults.iter().map(|f| f.clone() as Arc<dyn Device>).collect()
}

fn rig(kind: TopKind, n: usize) -> Rig {
    let mem: Vec<Arc<MemDevice>> = (0..n).map(|i| MemDevice::new(&format!("d{i}"), DEV)).collect();
    let faults: Vec<Arc<FaultDevice>> = mem.iter().map(|m| FaultDevice::new(m.clone() as Arc<dyn Device>)).collect();
    let pool = create(&devs_of(&faults), kind);
    let osid = {
        let tx = pool.begin();
        pool.create_objset(&tx).unwrap()
    };
    Rig { mem, faults, pool, osid, files: vec![] }
}

/// Writes `count` files of random (incompressible) data, synced.
fn write_files(r: &mut Rig, rng: &mut ChaCha8Rng, count: usize, max_len: usize) {
    let os = r.pool.open_objset(r.osid).unwrap();
    for _ in 0..count {
        let len = rng.gen_range(1..=max_len);
        let mut data = vec![0u8; len];
        rng.fill_bytes(&mut data);
        let tx = r.pool.begin();
        let id = os.create(&tx, ObjType(20), 131072, &[0; BONUS_LEN]).unwrap();
        os.write_data(&tx, id, 0, &data).unwrap();
        drop(tx);
        r.files.push((id, data));
    }
    r.pool.sync().unwrap();
}

fn verify(pool: &ObjPool, osid: ObjsetId, files: &[(ObjectId, Vec<u8>)], what: &str) {
    let os = pool.open_objset(osid).unwrap();
    for (id, data) in files {
        let back = read_all(&os, *id, data.len());
        assert!(back == *data, "{what}: object {} differs", id.0);
    }
}

fn wait_scan(pool: &ObjPool) -> ScanStats {
    assert!(pool.wait_scan(None, Duration::from_secs(120)), "scan did not finish");
    pool.scan_stats().expect("scan stats")
}

/// Waits until no scan runs and no leaf in service lacks txgs: a resilver
/// that could not forget a DTL (a leaf's mark moved during it) is followed
/// by another one.
fn wait_settled(pool: &ObjPool) -> ScanStats {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let st = wait_scan(pool);
        let pending = pool.status().tops.iter().flat_map(|t| t.children.iter()).any(|c| c.state.usable() && !c.dtl.is_empty());
        if !pending {
            return st;
        }
        assert!(std::time::Instant::now() < deadline, "DTLs never cleared: {:?}", pool.status());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn leaf_errors(pool: &ObjPool) -> Vec<(String, u64)> {
    pool.status().tops.iter().flat_map(|t| t.children.iter().map(|c| (c.path.clone(), c.checksum_errors))).collect()
}

fn redundancy(kind: &TopKind, n: usize) -> usize {
    match kind {
        TopKind::Mirror => n - 1,
        TopKind::Raidz { parity } => usize::from(*parity),
        TopKind::Disk | TopKind::Hole => 0,
    }
}

#[test]
fn scrub_repairs_corruption_on_every_layout() {
    let run = tarn_testkit::seeded!(1);
    let seed = run.seed;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let layouts =
        [(TopKind::Mirror, 2), (TopKind::Mirror, 3), (TopKind::Raidz { parity: 1 }, 4), (TopKind::Raidz { parity: 2 }, 5), (TopKind::Raidz { parity: 3 }, 6)];
    for (kind, n) in layouts {
        let name = format!("{kind:?}x{n}");
        let mut r = rig(kind.clone(), n);
        write_files(&mut r, &mut rng, 24, 600_000);
        let alloc = r.pool.space().alloc;
        // Random regions of garbage on up to `redundancy` devices, inside
        // the allocated part of the data region.
        let k = rng.gen_range(1..=redundancy(&kind, n));
        let mut victims: Vec<usize> = (0..n).collect();
        while victims.len() > k {
            victims.remove(rng.gen_range(0..victims.len()));
        }
        let span = (alloc / n as u64).max(1 << 20);
        for &v in &victims {
            for _ in 0..12 {
                let off = tarn_vdev::DATA_START + rng.gen_range(0..span) / 4096 * 4096;
                let mut junk = vec![0u8; 32 << 10];
                rng.fill_bytes(&mut junk);
                r.mem[v].write_at(&junk, off).unwrap();
            }
        }
        r.pool.scrub_start().unwrap();
        let st = wait_scan(&r.pool);
        assert_eq!(st.func, ScanFunc::Scrub);
        assert_eq!(st.phase, ScanPhase::Finished, "{name}");
        assert_eq!(st.errors, 0, "{name}: {st:?}");
        assert!(st.repaired > 0, "{name}: nothing repaired: {st:?}");
        assert!(st.issued >= st.to_examine * 9 / 10, "{name}: scrub skipped blocks: {st:?}");
        // Errors are counted on the damaged devices only.
        for (path, errors) in leaf_errors(&r.pool) {
            let i: usize = path.trim_start_matches('d').parse().unwrap();
            if !victims.contains(&i) {
                assert_eq!(errors, 0, "{name}: {path} was not damaged");
            }
        }
        assert!(leaf_errors(&r.pool).iter().map(|e| e.1).sum::<u64>() > 0, "{name}");
        // A second scrub finds nothing.
        r.pool.scrub_start().unwrap();
        let st2 = wait_scan(&r.pool);
        assert_eq!((st2.repaired, st2.errors), (0, 0), "{name}: second scrub: {st2:?}");
        // Every byte back, read from disk (not the cache) after re-import.
        let (osid, files) = (r.osid, std::mem::take(&mut r.files));
        r.pool.export().unwrap();
        drop(r.pool);
        let pool = import(devs_of(&r.faults), false).unwrap();
        verify(&pool, osid, &files, &name);
        assert!(pool.check().ok(), "{name}");
    }
}

#[test]
fn offline_online_resilvers_only_what_was_missed() {
    let run = tarn_testkit::seeded!(1);
    let seed = run.seed;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 2);
    for (kind, n) in [(TopKind::Mirror, 2), (TopKind::Raidz { parity: 1 }, 4)] {
        let name = format!("{kind:?}x{n}");
        let mut r = rig(kind.clone(), n);
        write_files(&mut r, &mut rng, 20, 1_000_000); // ~10 MB before
        let before_alloc = r.pool.space().alloc;
        r.pool.offline("d1").unwrap();
        assert_eq!(r.pool.status().state, DevState::Degraded, "{name}");
        // Offlining a second device of a raidz1 would lose data: refused.
        if n == 4 {
            assert!(r.pool.offline("d2").unwrap_err().to_string().contains("no valid replicas"));
        }
        let first_new = r.files.len();
        write_files(&mut r, &mut rng, 4, 250_000); // ~0.5 MB while away
        for _ in 0..3 {
            r.pool.sync().unwrap();
        }
        let new_bytes: u64 = r.files[first_new..].iter().map(|f| f.1.len() as u64).sum();
        r.pool.online("d1", None).unwrap();
        let st = wait_settled(&r.pool);
        assert_eq!((st.func, st.phase, st.errors), (ScanFunc::Resilver, ScanPhase::Finished, 0), "{name}: {st:?}");
        // Only the txgs written while it was away: the new data's share
        // on that device plus metadata, far less than what came before.
        let share = match kind {
            TopKind::Mirror => new_bytes,
            _ => new_bytes / 3,
        };
        assert!(st.resilvered >= share * 9 / 10, "{name}: resilvered {} < {share}", st.resilvered);
        assert!(st.resilvered < share + (2 << 20), "{name}: resilvered {} of {before_alloc} allocated", st.resilvered);
        assert!(st.resilvered < before_alloc / 4, "{name}: resilvered {}", st.resilvered);
        let status = r.pool.status();
        assert_eq!(status.state, DevState::Online, "{name}");
        assert!(status.tops[0].children.iter().all(|c| c.dtl.is_empty()), "{name}: {status:?}");
        // The returned device now holds its part of everything: import
        // without another device and read it all.
        let (osid, files) = (r.osid, std::mem::take(&mut r.files));
        r.pool.export().unwrap();
        drop(r.pool);
        let partial: Vec<Arc<dyn Device>> = r.mem.iter().enumerate().filter(|(i, _)| *i != 0).map(|(_, m)| m.clone() as Arc<dyn Device>).collect();
        let pool = import(partial, false).unwrap();
        assert_eq!(pool.status().state, DevState::Degraded);
        verify(&pool, osid, &files, &name);
    }
}

#[test]
fn vanished_device_then_replace() {
    let run = tarn_testkit::seeded!(1);
    let seed = run.seed;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 3);
    let mut r = rig(TopKind::Raidz { parity: 1 }, 4);
    write_files(&mut r, &mut rng, 16, 800_000);
    r.faults[2].set_gone(true);
    // Writes carry on; the pool notices and degrades.
    write_files(&mut r, &mut rng, 8, 400_000);
    r.pool.probe_devices();
    let status = r.pool.status();
    assert_eq!(status.state, DevState::Degraded);
    assert_eq!(status.tops[0].children[2].state, DevState::Removed);
    assert!(status.suspended.is_none());
    verify(&r.pool, r.osid, &r.files, "degraded");
    let new = MemDevice::new("d9", DEV);
    r.pool.replace("d2", "d9".into(), new.clone() as Arc<dyn Device>).unwrap();
    let st = wait_settled(&r.pool);
    assert_eq!((st.func, st.phase, st.errors), (ScanFunc::Resilver, ScanPhase::Finished, 0), "{st:?}");
    let status = r.pool.status();
    assert_eq!(status.state, DevState::Online, "{status:?}");
    let paths: Vec<String> = status.tops[0].children.iter().map(|c| c.path.clone()).collect();
    assert_eq!(paths, ["d0", "d1", "d9", "d3"]);
    // Replacing a device that is not there is an error, not a panic.
    assert!(r.pool.replace("nope", "x".into(), MemDevice::new("x", DEV) as Arc<dyn Device>).is_err());
    let (osid, files) = (r.osid, std::mem::take(&mut r.files));
    r.pool.export().unwrap();
    drop(r.pool);
    let devs: Vec<Arc<dyn Device>> =
        vec![r.mem[0].clone(), r.mem[1].clone(), new.clone() as Arc<dyn Device>, r.mem[3].clone()].into_iter().map(|d| d as Arc<dyn Device>).collect();
    // Without d1: the new device must carry its share.
    let pool = import(devs.iter().enumerate().filter(|(i, _)| *i != 1).map(|(_, d)| d.clone()).collect(), false).unwrap();
    verify(&pool, osid, &files, "after replace, d1 missing");
    pool.export().unwrap();
    drop(pool);
    let pool = import(devs, false).unwrap();
    assert_eq!(pool.status().state, DevState::Online);
    assert!(pool.check().ok());
}

#[test]
fn spare_covers_then_returns_after_replace() {
    let run = tarn_testkit::seeded!(1);
    let seed = run.seed;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 4);
    let mut r = rig(TopKind::Mirror, 2);
    let spare = MemDevice::new("s0", DEV);
    r.pool.add_spare("s0".into(), spare.clone() as Arc<dyn Device>).unwrap();
    assert_eq!(r.pool.spares().len(), 1);
    write_files(&mut r, &mut rng, 12, 800_000);
    r.faults[1].set_gone(true);
    r.pool.probe_devices();
    assert_eq!(r.pool.activate_spare("d1").unwrap().as_deref(), Some("s0"));
    let st = wait_settled(&r.pool);
    assert_eq!((st.func, st.errors), (ScanFunc::Resilver, 0));
    assert!(st.resilvered > 0);
    let status = r.pool.status();
    assert!(r.pool.spares().is_empty());
    assert_eq!(status.state, DevState::Degraded, "d1 is still gone");
    let roles: Vec<(String, tarn_vdev::LeafRole)> = status.tops[0].children.iter().map(|c| (c.path.clone(), c.role)).collect();
    assert!(roles.contains(&("s0".into(), tarn_vdev::LeafRole::Spare)), "{roles:?}");
    // The spare alone (with d0 gone too) serves everything.
    write_files(&mut r, &mut rng, 2, 100_000);
    // Replace the failed device: the spare goes back to the spare list.
    let new = MemDevice::new("d7", DEV);
    r.pool.replace("d1", "d7".into(), new.clone() as Arc<dyn Device>).unwrap();
    let st = wait_settled(&r.pool);
    assert_eq!((st.func, st.errors), (ScanFunc::Resilver, 0));
    let status = r.pool.status();
    assert_eq!(status.state, DevState::Online, "{status:?}");
    assert_eq!(r.pool.spares().iter().map(|s| s.path.clone()).collect::<Vec<_>>(), ["s0"]);
    let (osid, files) = (r.osid, std::mem::take(&mut r.files));
    r.pool.export().unwrap();
    drop(r.pool);
    // d0 missing: d7 alone must hold everything.
    let pool = import(vec![new.clone() as Arc<dyn Device>, spare.clone() as Arc<dyn Device>], false).unwrap();
    verify(&pool, osid, &files, "d7 alone");
    assert_eq!(pool.spares().len(), 1, "the spare is remembered");
}

#[test]
fn attach_detach_and_add() {
    let run = tarn_testkit::seeded!(1);
    let seed = run.seed;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 5);
    let mut r = rig(TopKind::Disk, 1);
    write_files(&mut r, &mut rng, 8, 500_000);
    let side = MemDevice::new("m1", DEV);
    r.pool.attach("d0", "m1".into(), side.clone() as Arc<dyn Device>).unwrap();
    wait_scan(&r.pool);
    assert_eq!(r.pool.status().tops[0].name, "mirror-0");
    // Detaching the only complete side is refused while it is the only one.
    r.pool.detach("d0").unwrap();
    assert_eq!(r.pool.status().tops[0].name, "m1");
    assert!(r.pool.detach("m1").is_err(), "a lone disk cannot be detached");
    let added = [MemDevice::new("a0", DEV), MemDevice::new("a1", DEV)];
    let size = r.pool.space().size;
    r.pool.add_vdev(TopKind::Mirror, added.iter().enumerate().map(|(i, d)| (format!("a{i}"), d.clone() as Arc<dyn Device>)).collect()).unwrap();
    assert!(r.pool.space().size > size * 3 / 2);
    write_files(&mut r, &mut rng, 8, 500_000);
    let (osid, files) = (r.osid, std::mem::take(&mut r.files));
    r.pool.export().unwrap();
    drop(r.pool);
    let devs: Vec<Arc<dyn Device>> = vec![side.clone(), added[0].clone(), added[1].clone()].into_iter().map(|d| d as Arc<dyn Device>).collect();
    let pool = import(devs, false).unwrap();
    verify(&pool, osid, &files, "after attach/detach/add");
    assert!(pool.check().ok());
}

#[test]
fn interrupted_scrub_and_resilver_resume_after_import() {
    let run = tarn_testkit::seeded!(1);
    let seed = run.seed;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 6);
    let mut r = rig(TopKind::Mirror, 2);
    write_files(&mut r, &mut rng, 64, 800_000);
    let slow = Tunables { scan_rate_max: 4 << 20, scan_mem_max: 64 * 200, ..Tunables::default() };
    for func in [ScanFunc::Scrub, ScanFunc::Resilver] {
        r.pool.set_tunables(slow);
        if func == ScanFunc::Scrub {
            r.pool.scrub_start().unwrap();
        } else {
            r.pool.offline("d1").unwrap();
            write_files(&mut r, &mut rng, 48, 800_000);
            r.pool.online("d1", None).unwrap();
        }
        // Let it get past a checkpoint, then export in the middle.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while {
            let st = r.pool.scan_stats().unwrap();
            (st.bookmark_objset, st.bookmark_object) == (0, 0)
        } {
            assert!(std::time::Instant::now() < deadline, "{func:?} makes no progress");
            std::thread::sleep(Duration::from_millis(20));
        }
        r.pool.export().unwrap();
        let faults = r.faults.clone();
        drop(std::mem::replace(&mut r.pool, import(devs_of(&faults), false).unwrap()));
        let resumed = r.pool.scan_stats().unwrap();
        assert_eq!((resumed.func, resumed.phase), (func, ScanPhase::Scanning), "{resumed:?}");
        assert!(
            resumed.issued > 0 && (resumed.bookmark_objset, resumed.bookmark_object) != (0, 0),
            "{func:?} restarted instead of resuming: {resumed:?}"
        );
        let done = wait_scan(&r.pool);
        assert_eq!((done.phase, done.errors), (ScanPhase::Finished, 0));
        // Resumed, not restarted: the whole run issued about one pass.
        assert!(done.issued <= done.to_examine + (4 << 20), "{func:?}: {done:?}");
        if func == ScanFunc::Resilver {
            // A resumed resilver keeps the DTLs (what happened to the device
            // before the export is not known) and a fresh one follows.
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while !r.pool.status().tops[0].children.iter().all(|c| c.dtl.is_empty()) {
                assert!(std::time::Instant::now() < deadline, "DTLs never cleared: {:?}", r.pool.status());
                r.pool.set_tunables(Tunables::default());
                wait_scan(&r.pool);
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    verify(&r.pool, r.osid, &r.files, "after resumed scans");
}

#[test]
fn scrub_pause_resume_stop() {
    let run = tarn_testkit::seeded!(1);
    let seed = run.seed;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 7);
    let mut r = rig(TopKind::Raidz { parity: 1 }, 3);
    write_files(&mut r, &mut rng, 24, 500_000);
    r.pool.set_tunables(Tunables { scan_rate_max: 2 << 20, scan_mem_max: 64 * 200, ..Tunables::default() });
    r.pool.scrub_start().unwrap();
    assert!(r.pool.scrub_start().is_err(), "a second start while scrubbing is refused");
    std::thread::sleep(Duration::from_millis(300));
    r.pool.scrub_pause().unwrap();
    let paused = r.pool.scan_stats().unwrap();
    assert!(paused.paused);
    std::thread::sleep(Duration::from_millis(300));
    let later = r.pool.scan_stats().unwrap();
    assert!(later.issued <= paused.issued + (4 << 20), "paused scrub keeps going");
    r.pool.scrub_start().unwrap(); // resume
    assert!(!r.pool.scan_stats().unwrap().paused);
    r.pool.scrub_stop().unwrap();
    assert_eq!(r.pool.scan_stats().unwrap().phase, ScanPhase::Canceled);
    assert!(r.pool.scrub_stop().is_err(), "nothing to stop");
    r.pool.set_tunables(Tunables::default());
    r.pool.scrub_start().unwrap();
    assert_eq!(wait_scan(&r.pool).phase, ScanPhase::Finished);
}

#[test]
fn unrecoverable_damage_is_reported_with_its_object() {
    let run = tarn_testkit::seeded!(1);
    let seed = run.seed;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 8);
    let mut r = rig(TopKind::Disk, 1);
    write_files(&mut r, &mut rng, 4, 1_000_000);
    // Overwrite a stretch of file data on the only device.
    let alloc = r.pool.space().alloc;
    let mut junk = vec![0u8; 256 << 10];
    rng.fill_bytes(&mut junk);
    r.mem[0].write_at(&junk, tarn_vdev::DATA_START + alloc / 2 / 4096 * 4096).unwrap();
    r.pool.scrub_start().unwrap();
    let st = wait_scan(&r.pool);
    assert!(st.errors > 0, "{st:?}");
    assert!(st.damaged.iter().any(|d| d.objset == r.osid.0), "{st:?}");
}

#[test]
fn resilver_that_meets_damage_keeps_the_old_device_and_the_dtl() {
    let run = tarn_testkit::seeded!(1);
    let seed = run.seed;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 9);
    let mut r = rig(TopKind::Disk, 1);
    write_files(&mut r, &mut rng, 6, 1_000_000);
    let alloc = r.pool.space().alloc;
    let mut junk = vec![0u8; 256 << 10];
    rng.fill_bytes(&mut junk);
    r.mem[0].write_at(&junk, tarn_vdev::DATA_START + alloc / 2 / 4096 * 4096).unwrap();
    let new = MemDevice::new("d9", DEV);
    r.pool.replace("d0", "d9".into(), new as Arc<dyn Device>).unwrap();
    let st = wait_scan(&r.pool);
    assert!(st.errors > 0, "{st:?}");
    // Not everything was copied: the old device stays, the new one still
    // lacks what it lacked.
    let status = r.pool.status();
    let leaves: Vec<(String, bool)> = status.tops[0].children.iter().map(|c| (c.path.clone(), c.dtl.is_empty())).collect();
    assert_eq!(leaves, [("d0".to_string(), true), ("d9".to_string(), false)], "{status:?}");
}
