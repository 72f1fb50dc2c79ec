//! Pool checkpoints in process: after a checkpoint, every kind of change
//! (overwrites, frees, new and destroyed object sets, snapshots taken and
//! destroyed, a pool filled to ENOSPC, enough churn to condense the space
//! map) must leave the checkpoint's state intact — the checker walks it
//! and finds every block live or held — so that rewinding brings back
//! exactly the checkpoint's contents, and discarding frees exactly the
//! held space. Also: the checkpoint survives export/import and power cuts;
//! bad requests and forbidden layout changes are refused.
mod common;
use common::*;

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_dev::{CrashRecorder, CutMode, Device, MemDevice};
use tarn_obj::*;

/// Contents of every object of every object set: (objset, object) → bytes.
type Model = BTreeMap<(u64, u64), Vec<u8>>;

fn opts() -> ImportOptions {
    ImportOptions { rewind: false, force: true, hostname: "test".into(), readonly: false }
}

fn write(pool: &ObjPool, os: ObjsetId, obj: ObjectId, off: usize, data: &[u8], model: &mut Model) {
    let set = pool.open_objset(os).unwrap();
    {
        let tx = pool.begin();
        set.write(&tx, obj, off as u64, data).unwrap();
    }
    let m = model.entry((os.0, obj.0)).or_default();
    if m.len() < off + data.len() {
        m.resize(off + data.len(), 0);
    }
    m[off..off + data.len()].copy_from_slice(data);
}

fn new_objset(pool: &ObjPool, objects: usize, model: &mut Model) -> (ObjsetId, Vec<ObjectId>) {
    let id = {
        let tx = pool.begin();
        pool.create_objset(&tx).unwrap()
    };
    let set = pool.open_objset(id).unwrap();
    let ids: Vec<ObjectId> = {
        let tx = pool.begin();
        (0..objects).map(|_| set.create(&tx, ObjType(20), 16384, &[0; BONUS_LEN]).unwrap()).collect()
    };
    for o in &ids {
        model.insert((id.0, o.0), Vec::new());
    }
    (id, ids)
}

/// Every object of the model reads back exactly; object sets not in the
/// model (`gone`) do not exist.
fn verify(pool: &ObjPool, model: &Model, gone: &[ObjsetId], what: &str) {
    for (&(os, obj), want) in model {
        let set = pool.open_objset(ObjsetId(os)).unwrap_or_else(|e| panic!("{what}: object set {os}: {e}"));
        let mut got = vec![0u8; want.len()];
        set.read(ObjectId(obj), 0, &mut got).unwrap_or_else(|e| panic!("{what}: read {os}/{obj}: {e}"));
        assert!(&got == want, "{what}: object {os}/{obj} differs");
    }
    for id in gone {
        assert!(pool.open_objset(*id).is_err(), "{what}: object set {} should not exist", id.0);
    }
}

fn checked(pool: &ObjPool, what: &str) {
    let report = pool.check();
    assert!(report.ok(), "{what}: {report:?}");
}

fn random_bytes(rng: &mut ChaCha8Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    v
}

/// Syncs enough txgs for frees to leave the defer window.
fn settle(pool: &ObjPool) {
    for _ in 0..tarn_block::DEFER_TXGS + 2 {
        pool.sync().unwrap();
    }
}

#[test]
fn rewind_brings_back_exactly_the_checkpoint_and_numbers_txgs_above_everything() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mem = mem_devs(3, 160 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Raidz { parity: 1 });
    let mut model = Model::new();
    let (a, a_objs) = new_objset(&pool, 6, &mut model);
    let (b, b_objs) = new_objset(&pool, 3, &mut model);
    for o in &a_objs {
        let len = rng.gen_range(1..400_000);
        write(&pool, a, *o, 0, &random_bytes(&mut rng, len), &mut model);
    }
    for o in &b_objs {
        write(&pool, b, *o, 5000, &random_bytes(&mut rng, 200_000), &mut model);
    }
    let snap_a = {
        let tx = pool.begin();
        pool.snapshot(&tx, a).unwrap()
    };
    pool.sync().unwrap();
    let (snap_txg, _, _) = pool.snapshot_info(a).unwrap();
    write(&pool, a, a_objs[0], 1000, &random_bytes(&mut rng, 50_000), &mut model);
    let at_checkpoint = model.clone();
    let snap_model: Model = at_checkpoint.clone();
    let info = pool.checkpoint().unwrap();
    assert_eq!(pool.checkpoint_info(), Some(info));
    assert!(info.held_bytes < 1 << 20, "only the metadata rewritten by the checkpoint's own txg is held: {}", info.held_bytes);
    assert!(pool.checkpoint().is_err(), "a second checkpoint is refused");
    checked(&pool, "right after the checkpoint");

    // Every kind of change.
    for round in 0..12 {
        for o in &a_objs {
            let off = rng.gen_range(0..300_000);
            write(&pool, a, *o, off, &random_bytes(&mut rng, 60_000), &mut model);
        }
        pool.sync().unwrap();
        if round == 3 {
            let set = pool.open_objset(a).unwrap();
            let tx = pool.begin();
            set.free_range(&tx, a_objs[1], 0, None).unwrap();
            model.get_mut(&(a.0, a_objs[1].0)).unwrap().iter_mut().for_each(|x| *x = 0);
        }
        if round == 5 {
            // The snapshot taken before the checkpoint goes.
            let tx = pool.begin();
            pool.destroy_snapshot(&tx, snap_a, 0, a).unwrap();
        }
        if round == 6 {
            let tx = pool.begin();
            pool.destroy_objset(&tx, b).unwrap();
            model.retain(|(os, _), _| *os != b.0);
        }
        pool.sync().unwrap();
    }
    let (c, c_objs) = new_objset(&pool, 2, &mut model);
    write(&pool, c, c_objs[0], 0, &random_bytes(&mut rng, 300_000), &mut model);
    let tx = pool.begin();
    let _snap_c = pool.snapshot(&tx, c).unwrap();
    drop(tx);
    settle(&pool);
    // Fill the pool: writers get ENOSPC, no txg fails.
    let set_c = pool.open_objset(c).unwrap();
    let mut filled = 0u64;
    loop {
        let data = random_bytes(&mut rng, 1 << 20);
        let r = {
            let tx = pool.begin();
            set_c.write_data(&tx, c_objs[1], filled, &data)
        };
        match r {
            Ok(()) => filled += data.len() as u64,
            Err(ObjError::NoSpace) => break,
            Err(e) => panic!("filling: {e}"),
        }
        if filled.is_multiple_of(16 << 20) {
            pool.sync().unwrap();
        }
        assert!(filled < 1 << 30, "the pool never filled");
    }
    pool.sync().unwrap();
    assert!(pool.suspended().is_none(), "a full pool with a checkpoint must not suspend");
    let held = pool.checkpoint_info().unwrap().held_bytes;
    assert!(held > 2 << 20, "the checkpoint holds what was overwritten and destroyed: {held}");
    checked(&pool, "after the changes, with the checkpoint");
    verify(&pool, &model, &[b], "after the changes");

    // Survives export/import.
    drop(set_c);
    pool.export().unwrap();
    drop(pool);
    let pool = import(as_dyn(&mem), false).unwrap();
    assert_eq!(pool.checkpoint_info().map(|i| i.txg), Some(info.txg), "the checkpoint survives export/import");
    checked(&pool, "after import");
    let newest = pool.last_synced_txg();
    pool.export().unwrap();
    drop(pool);

    // Rewind.
    let pool = ObjPool::import_rewind_to_checkpoint(as_dyn(&mem), opts()).unwrap();
    assert!(pool.checkpoint_info().is_none(), "the rewound pool has no checkpoint");
    assert!(pool.last_synced_txg() > newest, "new txgs are numbered above every txg seen ({} <= {newest})", pool.last_synced_txg());
    verify(&pool, &at_checkpoint, &[c], "after the rewind");
    let snap = pool.open_objset(snap_a).expect("the snapshot destroyed after the checkpoint is back");
    for (&(os, obj), want) in snap_model.iter().filter(|((os, _), _)| *os == a.0) {
        let _ = os;
        let mut got = vec![0u8; want.len()];
        snap.read(ObjectId(obj), 0, &mut got).unwrap();
        // The snapshot is the state before the last pre-checkpoint write.
        if obj != a_objs[0].0 {
            assert!(&got == want, "snapshot object {obj}");
        }
    }
    assert_eq!(pool.snapshot_info(a).unwrap().0, snap_txg);
    checked(&pool, "after the rewind");
    // It takes changes, and survives export/import again.
    let mut model = at_checkpoint.clone();
    write(&pool, a, a_objs[2], 0, &random_bytes(&mut rng, 100_000), &mut model);
    settle(&pool);
    checked(&pool, "writing after the rewind");
    pool.export().unwrap();
    drop(pool);
    let pool = import(as_dyn(&mem), false).unwrap();
    verify(&pool, &model, &[c], "after the rewind and an import");
    checked(&pool, "after the rewind and an import");
    assert!(ObjPool::import_rewind_to_checkpoint(as_dyn(&mem), opts()).is_err(), "no checkpoint to rewind to any more");
}

#[test]
fn discard_frees_exactly_what_the_checkpoint_held() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let mem = mem_devs(2, 96 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Mirror);
    let mut model = Model::new();
    let (a, objs) = new_objset(&pool, 4, &mut model);
    for o in &objs {
        write(&pool, a, *o, 0, &random_bytes(&mut rng, 2 << 20), &mut model);
    }
    settle(&pool);
    let before = pool.space().free;
    assert!(pool.checkpoint_discard().is_err(), "no checkpoint to discard");
    pool.checkpoint().unwrap();
    // Overwrite everything twice: the first versions are held.
    for _ in 0..2 {
        for o in &objs {
            write(&pool, a, *o, 0, &random_bytes(&mut rng, 2 << 20), &mut model);
        }
        pool.sync().unwrap();
    }
    settle(&pool);
    let held = pool.checkpoint_info().unwrap().held_bytes;
    assert!(held >= 8 << 20, "8 MiB of data overwritten: {held} held");
    assert!(pool.space().free + held <= before + (1 << 20), "held space is not free");
    checked(&pool, "with the checkpoint");
    let freed = pool.checkpoint_discard().unwrap();
    assert_eq!(freed, held);
    assert!(pool.checkpoint_info().is_none());
    assert!(pool.checkpoint_discard().is_err(), "discarding twice");
    settle(&pool);
    let after = pool.space().free;
    assert!(after + (2 << 20) >= before, "the held space is free again: {before} before, {after} after");
    checked(&pool, "after the discard");
    verify(&pool, &model, &[], "after the discard");
    pool.export().unwrap();
    drop(pool);
    assert!(ObjPool::import_rewind_to_checkpoint(as_dyn(&mem), opts()).is_err(), "nothing to rewind to after a discard");
    let pool = import(as_dyn(&mem), false).unwrap();
    verify(&pool, &model, &[], "after import");
    checked(&pool, "after import");
}

#[test]
fn layout_changes_a_rewind_cannot_undo_are_refused() {
    let mem = mem_devs(4, 64 << 20);
    let devs = as_dyn(&mem);
    let pool = create(&devs[0..2], TopKind::Mirror);
    let mut model = Model::new();
    let (a, objs) = new_objset(&pool, 1, &mut model);
    write(&pool, a, objs[0], 0, &vec![7u8; 300_000], &mut model);
    pool.add_spare("d3".into(), devs[3].clone()).unwrap();
    pool.sync().unwrap();
    let at_checkpoint = model.clone();
    pool.checkpoint().unwrap();
    let refused = |r: Result<()>, what: &str| {
        let e = r.expect_err(what).to_string();
        assert!(e.contains("checkpoint exists"), "{what}: {e}");
    };
    refused(pool.attach("d0", "d2".into(), devs[2].clone()), "attach");
    refused(pool.replace("d0", "d2".into(), devs[2].clone()), "replace");
    refused(pool.detach("d1"), "detach");
    refused(pool.remove_spare("d3"), "remove");
    pool.offline("d1").unwrap();
    assert_eq!(pool.activate_spare("d1").unwrap(), None, "no spare takes over while a checkpoint exists");
    pool.online("d1", None).unwrap();
    assert_eq!(pool.config().top.len(), 1);
    // Adding a top-level vdev is allowed; a rewind drops it again.
    pool.add_vdev(TopKind::Disk, vec![("d2".into(), devs[2].clone())]).unwrap();
    assert_eq!(pool.config().top.len(), 2);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for _ in 0..8 {
        write(&pool, a, objs[0], 0, &random_bytes(&mut rng, 1 << 20), &mut model);
        pool.sync().unwrap();
    }
    checked(&pool, "after add");
    pool.export().unwrap();
    drop(pool);
    let pool = ObjPool::import_rewind_to_checkpoint(devs.clone(), opts()).unwrap();
    assert_eq!(pool.config().top.len(), 1, "the vdev added after the checkpoint is gone");
    assert!(tarn_vdev::read_label(devs[2].as_ref()).is_err(), "its labels are cleared");
    verify(&pool, &at_checkpoint, &[], "after the rewind");
    checked(&pool, "after the rewind");
    // No checkpoint now: layout changes work again.
    pool.attach("d0", "d2".into(), devs[2].clone()).unwrap();
    pool.export().unwrap();
    drop(pool);
    let pool = import(devs.clone(), false).unwrap();
    verify(&pool, &at_checkpoint, &[], "after attach and import");
}

/// A seeded random sequence of changes before and after a checkpoint
/// taken at a random step; then a rewind or a discard (by seed), checked
/// against the model.
#[test]
fn random_changes_around_a_checkpoint() {
    let run = tarn_testkit::seeded!(300);
    let (seed, count) = (run.seed, run.count);
    for round in 0..2u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_add(round));
        let mem = mem_devs(3, 128 << 20);
        let pool = create(&as_dyn(&mem), TopKind::Raidz { parity: 1 });
        let mut model = Model::new();
        let mut sets: Vec<(ObjsetId, Vec<ObjectId>)> = vec![new_objset(&pool, 3, &mut model)];
        let mut snaps: Vec<(ObjsetId, ObjsetId)> = Vec::new();
        let mut gone: Vec<ObjsetId> = Vec::new();
        let ckpt_at = rng.gen_range(count / 4..count / 2);
        let mut at_checkpoint: Option<(Model, Vec<ObjsetId>)> = None;
        for step in 0..count {
            let what = format!("seed {seed} round {round} step {step}");
            if step == ckpt_at {
                pool.checkpoint().unwrap_or_else(|e| panic!("{what}: checkpoint: {e}"));
                at_checkpoint = Some((model.clone(), sets.iter().map(|s| s.0).collect()));
            }
            match rng.gen_range(0..12) {
                0..=5 => {
                    let (os, objs) = sets[rng.gen_range(0..sets.len())].clone();
                    let o = objs[rng.gen_range(0..objs.len())];
                    let off = rng.gen_range(0..500_000);
                    let len = rng.gen_range(1..100_000);
                    write(&pool, os, o, off, &random_bytes(&mut rng, len), &mut model);
                }
                6 => {
                    let (os, objs) = sets[rng.gen_range(0..sets.len())].clone();
                    let o = objs[rng.gen_range(0..objs.len())];
                    let set = pool.open_objset(os).unwrap();
                    let tx = pool.begin();
                    set.free_range(&tx, o, 0, None).unwrap();
                    model.get_mut(&(os.0, o.0)).unwrap().iter_mut().for_each(|x| *x = 0);
                }
                7 if sets.len() < 4 => sets.push(new_objset(&pool, 2, &mut model)),
                8 if sets.len() > 1 && snaps.iter().all(|(h, _)| *h != sets[sets.len() - 1].0) => {
                    let (os, _) = sets.pop().unwrap();
                    let tx = pool.begin();
                    pool.destroy_objset(&tx, os).unwrap();
                    model.retain(|(o, _), _| *o != os.0);
                    gone.push(os);
                }
                9 => {
                    let (head, _) = sets[rng.gen_range(0..sets.len())].clone();
                    if snaps.iter().all(|(h, _)| *h != head) {
                        pool.sync().unwrap();
                        let tx = pool.begin();
                        let sid = pool.snapshot(&tx, head).unwrap();
                        drop(tx);
                        snaps.push((head, sid));
                    }
                }
                10 if !snaps.is_empty() => {
                    let (head, sid) = snaps.remove(rng.gen_range(0..snaps.len()));
                    pool.sync().unwrap();
                    {
                        let tx = pool.begin();
                        pool.destroy_snapshot(&tx, sid, 0, head).unwrap();
                    }
                    // Not in the same txg as a destroy of its head.
                    pool.sync().unwrap();
                }
                _ => pool.sync().map(|_| ()).unwrap(),
            }
            if step % 25 == 0 {
                pool.sync().unwrap();
                checked(&pool, &what);
            }
        }
        settle(&pool);
        checked(&pool, "end of the sequence");
        verify(&pool, &model, &gone, "end of the sequence");
        let (ckpt_model, ckpt_sets) = at_checkpoint.expect("a checkpoint was taken");
        if rng.gen_bool(0.5) {
            pool.export().unwrap();
            drop(pool);
            let pool = ObjPool::import_rewind_to_checkpoint(as_dyn(&mem), opts()).unwrap();
            let gone: Vec<ObjsetId> = sets.iter().map(|s| s.0).chain(gone.iter().copied()).filter(|id| !ckpt_sets.contains(id)).collect();
            verify(&pool, &ckpt_model, &gone, &format!("seed {seed} round {round}: rewound"));
            checked(&pool, "rewound");
        } else {
            pool.checkpoint_discard().unwrap();
            settle(&pool);
            checked(&pool, "discarded");
            verify(&pool, &model, &gone, &format!("seed {seed} round {round}: discarded"));
        }
    }
}

/// Power cuts at every flush after the checkpoint: the imported pool has
/// the checkpoint (once its txg reached disk) and rewinds to exactly its
/// contents.
#[test]
fn the_checkpoint_survives_power_cuts() {
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    let rec = CrashRecorder::new();
    let devs: Vec<Arc<dyn Device>> = (0..3).map(|i| rec.device(&format!("c{i}"), 64 << 20) as Arc<dyn Device>).collect();
    let pool = create(&devs, TopKind::Raidz { parity: 1 });
    let mut model = Model::new();
    let (a, objs) = new_objset(&pool, 3, &mut model);
    for o in &objs {
        write(&pool, a, *o, 0, &random_bytes(&mut rng, 300_000), &mut model);
    }
    pool.sync().unwrap();
    let at_checkpoint = model.clone();
    let before = rec.event_count();
    pool.checkpoint().unwrap();
    let after_checkpoint = rec.event_count();
    for _ in 0..10 {
        for o in &objs {
            write(&pool, a, *o, rng.gen_range(0..200_000), &random_bytes(&mut rng, 100_000), &mut model);
        }
        pool.sync().unwrap();
    }
    drop(pool);
    let flushes: Vec<u64> = rec.flush_events().into_iter().filter(|&f| f > before).collect();
    let mut with_checkpoint = 0;
    for (i, cut) in flushes.iter().enumerate().step_by(3) {
        let mode = if i % 2 == 0 { CutMode::DropUnflushed } else { CutMode::TearLastWrite };
        let image: Vec<Arc<dyn Device>> =
            rec.image_at(*cut + 1, mode).into_iter().map(|d: Arc<MemDevice>| d as Arc<dyn Device>).collect();
        let pool = import(image.clone(), false).unwrap_or_else(|e| panic!("cut {cut}: import: {e}"));
        let has = pool.checkpoint_info().is_some();
        assert!(has || *cut < after_checkpoint, "cut {cut} after the checkpoint returned, but it is gone");
        checked(&pool, &format!("cut {cut}"));
        pool.export().unwrap();
        drop(pool);
        if has {
            with_checkpoint += 1;
            let pool = ObjPool::import_rewind_to_checkpoint(image, opts()).unwrap_or_else(|e| panic!("cut {cut}: rewind: {e}"));
            verify(&pool, &at_checkpoint, &[], &format!("cut {cut}: rewound"));
            checked(&pool, &format!("cut {cut}: rewound"));
        }
    }
    assert!(with_checkpoint > 5, "{with_checkpoint} cuts had the checkpoint");

    // Power cuts during the rewind itself: every image imports, as the
    // pool before the rewind (with its checkpoint) or after it.
    let rewind_start = rec.event_count();
    let pool = ObjPool::import_rewind_to_checkpoint(devs.clone(), opts()).unwrap();
    pool.sync().unwrap();
    drop(pool);
    let flushes: Vec<u64> = rec.flush_events().into_iter().filter(|&f| f >= rewind_start).collect();
    assert!(flushes.len() > 4, "the rewind flushed {} times", flushes.len());
    let (mut before, mut after) = (0, 0);
    for cut in std::iter::once(rewind_start).chain(flushes.iter().map(|f| f + 1)) {
        for mode in [CutMode::DropUnflushed, CutMode::TearLastWrite] {
            let image: Vec<Arc<dyn Device>> =
                rec.image_at(cut, mode).into_iter().map(|d: Arc<MemDevice>| d as Arc<dyn Device>).collect();
            let what = format!("rewind cut {cut} {mode:?}");
            let pool = import(image, false).unwrap_or_else(|e| panic!("{what}: import: {e}"));
            if pool.checkpoint_info().is_some() {
                before += 1;
                verify(&pool, &model, &[], &what);
            } else {
                after += 1;
                verify(&pool, &at_checkpoint, &[], &what);
            }
            checked(&pool, &what);
        }
    }
    assert!(before > 0 && after > 0, "cuts before ({before}) and after ({after}) the rewind took effect");
}
