//! Trim in process. On sparse file vdevs (mirror, raidz1): data written
//! and then freed comes back to the file system as holes once it leaves
//! the defer window — by `trim_start` (a manual trim) or by autotrim — and
//! everything still live reads back, the checker clean. On memory and
//! crash-recording devices, where a trimmed page really reads as zeros:
//! no trim ever touches what a power cut, `import -F` (the defer window)
//! or a checkpoint still needs. Suspend, cancel and resume across export.
mod common;
use common::*;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_dev::{CrashRecorder, CutMode, Device, FileDevice, MemDevice};
use tarn_obj::trim::TrimState;
use tarn_obj::*;

fn allocated(paths: &[PathBuf]) -> u64 {
    paths.iter().map(|p| std::fs::metadata(p).unwrap().blocks() * 512).sum()
}

fn file_devs(dir: &Path, n: usize, size: u64) -> (Vec<PathBuf>, Vec<Arc<dyn Device>>) {
    let paths: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("f{i}"))).collect();
    let devs = paths.iter().map(|p| FileDevice::open(p, Some(size)).unwrap() as Arc<dyn Device>).collect();
    (paths, devs)
}

fn reopen(paths: &[PathBuf]) -> Vec<Arc<dyn Device>> {
    paths.iter().map(|p| FileDevice::open(p, None).unwrap() as Arc<dyn Device>).collect()
}

fn random_bytes(rng: &mut ChaCha8Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    v
}

fn settle(pool: &ObjPool) {
    for _ in 0..tarn_block::DEFER_TXGS + 2 {
        pool.sync().unwrap();
    }
}

fn checked(pool: &ObjPool, what: &str) {
    let report = pool.check();
    assert!(report.ok(), "{what}: {report:?}");
}

struct Data {
    set: ObjsetId,
    objects: Vec<ObjectId>,
    contents: Vec<Vec<u8>>,
}

/// `objects` objects of `each` random bytes in a new object set.
fn fill(pool: &ObjPool, rng: &mut ChaCha8Rng, objects: usize, each: usize) -> Data {
    let set = {
        let tx = pool.begin();
        pool.create_objset(&tx).unwrap()
    };
    let os = pool.open_objset(set).unwrap();
    let mut data = Data { set, objects: vec![], contents: vec![] };
    for _ in 0..objects {
        let bytes = random_bytes(rng, each);
        let tx = pool.begin();
        let id = os.create(&tx, ObjType(20), 128 << 10, &[0; BONUS_LEN]).unwrap();
        os.write_data(&tx, id, 0, &bytes).unwrap();
        data.objects.push(id);
        data.contents.push(bytes);
    }
    pool.sync().unwrap();
    data
}

fn free_all_but(pool: &ObjPool, data: &mut Data, keep: usize) {
    let os = pool.open_objset(data.set).unwrap();
    let tx = pool.begin();
    for id in data.objects.drain(keep..) {
        os.free(&tx, id).unwrap();
    }
    data.contents.truncate(keep);
}

fn verify(pool: &ObjPool, data: &Data, what: &str) {
    let os = pool.open_objset(data.set).unwrap();
    for (id, want) in data.objects.iter().zip(&data.contents) {
        let mut got = vec![0u8; want.len()];
        os.read(*id, 0, &mut got).unwrap_or_else(|e| panic!("{what}: read {}: {e}", id.0));
        assert!(&got == want, "{what}: object {} differs", id.0);
    }
}

/// Write 48 MiB, free 40 of it, trim: the files shrink by about what was
/// freed (its share on each device, parity included), the rest is intact.
fn manual_trim_shrinks_files(kind: TopKind, n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (paths, devs) = file_devs(dir.path(), n, 160 << 20);
    let pool = create(&devs, kind.clone());
    drop(devs);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut data = fill(&pool, &mut rng, 48, 1 << 20);
    let full = allocated(&paths);
    free_all_but(&pool, &mut data, 8);
    settle(&pool);
    let before = allocated(&paths);
    assert!(before + (4 << 20) >= full, "nothing is given back before the trim ({full} -> {before})");
    pool.trim_start(&[], 0).unwrap();
    assert!(pool.wait_trim(Duration::from_secs(120)), "the trim ends");
    let status = pool.trim_status();
    assert_eq!(status.len(), n);
    for l in &status {
        assert_eq!((l.state, l.percent()), (TrimState::Complete, 100), "{l:?}");
        assert!(l.bytes_done > 0, "{l:?}");
    }
    let after = allocated(&paths);
    let raw_per_mib = if n == 2 { 2 << 20 } else { 3 << 19 }; // mirror: 2 copies; raidz1 of 3: 1.5
    let freed_raw = 40 * raw_per_mib as u64;
    assert!(before - after >= freed_raw * 8 / 10, "{kind:?}: {before} -> {after}, expected about {freed_raw} less");
    assert!(after >= 8 * raw_per_mib as u64, "{kind:?}: live data still takes space: {after}");
    verify(&pool, &data, "after the trim");
    checked(&pool, "after the trim");
    pool.export().unwrap();
    drop(pool);
    let pool = import(reopen(&paths), false).unwrap();
    verify(&pool, &data, "after import");
    checked(&pool, "after import");
    let status = pool.trim_status();
    assert!(status.iter().all(|l| l.state == TrimState::Complete), "completion is remembered: {status:?}");
}

#[test]
fn manual_trim_gives_freed_space_back_on_a_mirror() {
    manual_trim_shrinks_files(TopKind::Mirror, 2);
}

#[test]
fn manual_trim_gives_freed_space_back_on_raidz1() {
    manual_trim_shrinks_files(TopKind::Raidz { parity: 1 }, 3);
}

#[test]
fn autotrim_gives_freed_space_back_without_a_manual_trim() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, devs) = file_devs(dir.path(), 3, 160 << 20);
    let pool = create(&devs, TopKind::Raidz { parity: 1 });
    pool.set_autotrim(true);
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    let mut data = fill(&pool, &mut rng, 40, 1 << 20);
    let full = allocated(&paths);
    free_all_but(&pool, &mut data, 4);
    pool.sync().unwrap();
    let in_window = allocated(&paths);
    assert!(in_window + (4 << 20) >= full, "nothing is trimmed inside the defer window ({full} -> {in_window})");
    settle(&pool);
    let want = 36 * (3 << 19) as u64 * 8 / 10;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while full.saturating_sub(allocated(&paths)) < want && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = allocated(&paths);
    assert!(full - after >= want, "autotrim gave back {} of about {want}", full - after);
    assert!(pool.autotrim_bytes() >= want, "autotrim counted {}", pool.autotrim_bytes());
    assert!(pool.trim_status().is_empty(), "no manual trim ran");
    verify(&pool, &data, "after autotrim");
    checked(&pool, "after autotrim");
    // Off: freed space stays allocated in the files.
    pool.set_autotrim(false);
    let more = fill(&pool, &mut rng, 8, 1 << 20);
    let with_more = allocated(&paths);
    {
        let os = pool.open_objset(more.set).unwrap();
        let tx = pool.begin();
        for id in &more.objects {
            os.free(&tx, *id).unwrap();
        }
    }
    settle(&pool);
    std::thread::sleep(Duration::from_secs(1));
    assert!(allocated(&paths) + (2 << 20) >= with_more, "autotrim off trims nothing");
}

#[test]
fn suspend_cancel_and_resume_across_export() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, devs) = file_devs(dir.path(), 2, 160 << 20);
    let pool = create(&devs, TopKind::Mirror);
    drop(devs);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut data = fill(&pool, &mut rng, 16, 1 << 20);
    free_all_but(&pool, &mut data, 2);
    settle(&pool);
    let names: Vec<String> = pool.config().top[0].children.iter().map(|c| c.path.clone()).collect();
    // Errors.
    assert!(pool.trim_stop(&[], false).is_err(), "cancel without a trim");
    assert!(pool.trim_stop(&[], true).is_err(), "suspend without a trim");
    assert!(pool.trim_start(&["nope".to_string()], 0).is_err(), "unknown device");
    // Slow: 8 MiB/s over ~150 MiB of free space.
    pool.trim_start(&names[..1], 8 << 20).unwrap();
    assert!(pool.trim_start(&names[..1], 0).is_err(), "already trimming");
    std::thread::sleep(Duration::from_millis(700));
    pool.trim_stop(&names[..1], true).unwrap();
    let suspended = pool.trim_status()[0].clone();
    assert_eq!(suspended.state, TrimState::Suspended);
    assert!(suspended.offset > 0 && suspended.percent() < 100, "{suspended:?}");
    assert!(pool.trim_stop(&names[..1], true).is_err(), "suspending a suspended trim");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(pool.trim_status()[0].offset, suspended.offset, "a suspended trim does not move");
    // Resume, then export in the middle: import goes on from there.
    pool.trim_start(&names[..1], 8 << 20).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    pool.export().unwrap();
    drop(pool);
    let pool = import(reopen(&paths), false).unwrap();
    let resumed = pool.trim_status();
    assert_eq!(resumed.len(), 1);
    assert!(resumed[0].offset >= suspended.offset, "resumed from where it was: {resumed:?}");
    assert!(matches!(resumed[0].state, TrimState::Active | TrimState::Complete), "{resumed:?}");
    // Cancel it; a new trim of both sides at full speed completes.
    if resumed[0].state == TrimState::Active {
        pool.trim_stop(&[], false).unwrap();
        assert_eq!(pool.trim_status()[0].state, TrimState::Canceled);
    }
    pool.trim_start(&[], 0).unwrap();
    assert!(pool.wait_trim(Duration::from_secs(120)));
    assert!(pool.trim_status().iter().all(|l| l.state == TrimState::Complete && l.offset >= l.asize));
    verify(&pool, &data, "end");
    checked(&pool, "end");
}

/// The pool's objects after each round, by the txg the round's changes
/// went into.
type History = BTreeMap<Txg, Vec<Vec<u8>>>;

/// Rounds of writes and frees, each in one txg, with autotrim on and a
/// manual trim every few rounds: trims run right behind the frees.
fn churn(pool: &ObjPool, rng: &mut ChaCha8Rng, rounds: usize, history: &mut History) -> (ObjsetId, Vec<ObjectId>) {
    pool.set_autotrim(true);
    let set = {
        let tx = pool.begin();
        pool.create_objset(&tx).unwrap()
    };
    let os = pool.open_objset(set).unwrap();
    let objects: Vec<ObjectId> = {
        let tx = pool.begin();
        (0..6).map(|_| os.create(&tx, ObjType(20), 16384, &[0; BONUS_LEN]).unwrap()).collect()
    };
    pool.sync().unwrap();
    let mut model: Vec<Vec<u8>> = vec![Vec::new(); objects.len()];
    for round in 0..rounds {
        let tx = pool.begin();
        for _ in 0..4 {
            let i = rng.gen_range(0..objects.len());
            if rng.gen_ratio(1, 4) {
                os.free_range(&tx, objects[i], 0, None).unwrap();
                model[i].iter_mut().for_each(|b| *b = 0);
            } else {
                let off = rng.gen_range(0..400_000);
                let len = rng.gen_range(1..300_000);
                let bytes = random_bytes(rng, len);
                os.write_data(&tx, objects[i], off as u64, &bytes).unwrap();
                if model[i].len() < off + bytes.len() {
                    model[i].resize(off + bytes.len(), 0);
                }
                model[i][off..off + bytes.len()].copy_from_slice(&bytes);
            }
        }
        history.insert(tx.txg(), model.clone());
        drop(tx);
        pool.sync().unwrap();
        if round % 4 == 3 {
            pool.trim_start(&[], 0).unwrap();
            assert!(pool.wait_trim(Duration::from_secs(60)));
        }
    }
    (set, objects)
}

/// The model of the newest round whose txg is at or before `txg`.
fn model_at(history: &History, txg: Txg) -> Option<&Vec<Vec<u8>>> {
    history.range(..=txg).next_back().map(|(_, m)| m)
}

fn verify_model(pool: &ObjPool, set: ObjsetId, objects: &[ObjectId], model: &[Vec<u8>], what: &str) {
    let os = pool.open_objset(set).unwrap_or_else(|e| panic!("{what}: {e}"));
    for (id, want) in objects.iter().zip(model) {
        let mut got = vec![0u8; want.len()];
        os.read(*id, 0, &mut got).unwrap_or_else(|e| panic!("{what}: read {}: {e}", id.0));
        if &got != want {
            let first = got.iter().zip(want.iter()).position(|(a, b)| a != b);
            panic!("{what}: object {} differs at {first:?} of {} (got len {})", id.0, want.len(), got.len());
        }
    }
}

#[test]
fn trims_never_touch_what_a_power_cut_needs() {
    let run = tarn_testkit::seeded!(60);
    let (seed, count) = (run.seed, run.count);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let rec = CrashRecorder::new();
    let devs: Vec<Arc<dyn Device>> = (0..3).map(|i| rec.device(&format!("c{i}"), 48 << 20) as Arc<dyn Device>).collect();
    let pool = create(&devs, TopKind::Raidz { parity: 1 });
    let mut history = History::new();
    let (set, objects) = churn(&pool, &mut rng, 40, &mut history);
    if let Some((_, m)) = history.iter().next_back() {
        verify_model(&pool, set, &objects, m, "live, at the end");
    }
    drop(pool);
    assert!(!rec.trims().is_empty(), "the run trimmed");
    let flushes = rec.flush_events();
    let start = flushes.len() / 4;
    for k in 0..count {
        let cut = flushes[start + rng.gen_range(0..flushes.len() - start)] + 1;
        let mode = if k % 2 == 0 { CutMode::DropUnflushed } else { CutMode::RandomSubset(k) };
        let image: Vec<Arc<dyn Device>> = rec.image_at(cut, mode).into_iter().map(|d: Arc<MemDevice>| d as Arc<dyn Device>).collect();
        let what = format!("seed {seed} cut {cut} {mode:?}");
        let pool = import(image, false).unwrap_or_else(|e| panic!("{what}: import: {e}"));
        // The txg imported (the checker syncs a new one).
        let txg = pool.last_synced_txg();
        checked(&pool, &what);
        if let Some(model) = model_at(&history, txg) {
            verify_model(&pool, set, &objects, model, &what);
        }
    }
}

/// Every one of the last DEFER_TXGS txgs stays importable (`import -F`)
/// however eagerly trims run, and a checkpoint's space is never trimmed.
#[test]
fn trims_spare_the_defer_window_and_the_checkpoint() {
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let mem = mem_devs(3, 64 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Raidz { parity: 1 });
    let mut history = History::new();
    let (set, objects) = churn(&pool, &mut rng, 24, &mut history);
    let newest = pool.last_synced_txg();
    // A checkpoint; then everything is freed and trimmed.
    let at_checkpoint = model_at(&history, newest).unwrap().clone();
    pool.checkpoint().unwrap();
    {
        let os = pool.open_objset(set).unwrap();
        let tx = pool.begin();
        for id in &objects {
            os.free_range(&tx, *id, 0, None).unwrap();
        }
    }
    settle(&pool);
    pool.trim_start(&[], 0).unwrap();
    assert!(pool.wait_trim(Duration::from_secs(60)));
    pool.export().unwrap();
    drop(pool);
    let newest = tarn_vdev::read_uberblocks(mem[0].as_ref()).iter().map(|u| u.txg).max().unwrap();
    // Poison the newest k uberblocks: import lands on txg newest - k.
    for k in 1..=tarn_block::DEFER_TXGS {
        let image: Vec<Arc<dyn Device>> = mem.iter().map(|m| m.snapshot() as Arc<dyn Device>).collect();
        for t in newest - k + 1..=newest {
            let poison = tarn_vdev::Uberblock { txg: t, timestamp_ns: 0, pool_guid: tarn_vdev::read_label(image[0].as_ref()).unwrap().config.pool_guid, payload: vec![0; 8] };
            tarn_vdev::write_uberblock(&image, &poison).unwrap();
        }
        let pool = import(image, false).unwrap_or_else(|e| panic!("txg {}: {e}", newest - k));
        assert_eq!(pool.last_synced_txg(), newest - k);
        checked(&pool, &format!("rewound to txg {}", newest - k));
    }
    let pool = ObjPool::import_rewind_to_checkpoint(as_dyn(&mem), ImportOptions { rewind: false, force: true, hostname: "test".into(), readonly: false }).unwrap();
    verify_model(&pool, set, &objects, &at_checkpoint, "rewound to the checkpoint after trimming everything");
    checked(&pool, "rewound to the checkpoint");
}
