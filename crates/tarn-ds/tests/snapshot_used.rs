//! A snapshot's `used` and a dataset's `usedbysnapshots` come from cached
//! summaries of the dead lists (tarn-obj `deadlist_cache.rs`, issue 14
//! item 5). This test holds them to a full recount of the dead lists after
//! every step of a seeded random sequence of writes, snapshots, snapshot
//! destroys, rollbacks, clones, clone destroys and promotes, while another
//! thread keeps asking for every snapshot's `used` (so summaries are built
//! in the middle of syncs, when dead lists are changing). At the end, a
//! second listing with nothing changed in between reads no dead list.
//!
//! `TARN_SEED` / `TARN_COUNT` (steps, default 300) pick the sequence.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rand::{Rng, RngCore};
use tarn_ds::Pool;
use tarn_obj::{ObjType, ObjectId, ObjsetId, BONUS_LEN};

const OBJECTS: usize = 3;
const SPAN: u64 = 512 << 10;

fn prop(pool: &Pool, name: &str, prop: &str) -> u64 {
    let v = pool.get_property(name, prop, true, None).unwrap_or_else(|e| panic!("{prop} of {name}: {e}"));
    v.value.parse().unwrap_or_else(|_| panic!("{prop} of {name}: {}", v.value))
}

/// The txg a dataset's snapshot chain starts after: its origin's, for a
/// clone, else 0.
fn origin_txg(pool: &Pool, dataset: &str) -> u64 {
    pool.record(dataset).unwrap().origin.map_or(0, |o| pool.snapshot_record(&o).unwrap().createtxg)
}

/// Every snapshot's `used` and every dataset's `usedbysnapshots` against
/// a recount of the dead lists, entry by entry.
fn check_against_recount(pool: &Pool, what: &str) {
    let obj = pool.obj();
    for dataset in pool.list() {
        let chain = pool.snapshots(Some(&dataset));
        let origin = origin_txg(pool, &dataset);
        let head = ObjsetId(pool.record(&dataset).unwrap().objset);
        let mut snapshots_raw = obj.deadlist_split_recount(head, origin).unwrap().1;
        for (i, snap) in chain.iter().enumerate() {
            let prev_txg = if i == 0 { origin } else { pool.snapshot_record(&chain[i - 1]).unwrap().createtxg };
            let next = match chain.get(i + 1) {
                Some(n) => ObjsetId(pool.snapshot_record(n).unwrap().objset),
                None => head,
            };
            let expected = obj.deflate(obj.deadlist_split_recount(next, prev_txg).unwrap().1);
            assert_eq!(prop(pool, snap, "used"), expected, "{what}: used of {snap}");
            assert_eq!(prop(pool, snap, "used"), expected, "{what}: used of {snap}, asked again");
            let own = ObjsetId(pool.snapshot_record(snap).unwrap().objset);
            snapshots_raw += obj.deadlist_split_recount(own, origin).unwrap().1;
        }
        assert_eq!(prop(pool, &dataset, "usedbysnapshots"), obj.deflate(snapshots_raw), "{what}: usedbysnapshots of {dataset}");
    }
}

/// Writes and frees in `dataset`'s objects (made on first use), synced.
fn churn(pool: &Pool, dataset: &str, rng: &mut impl RngCore) {
    let os = pool.objset(dataset).unwrap();
    let tx = pool.obj().begin();
    let mut ids = os.objects_in_range(ObjectId(1), ObjectId(1 << 16)).unwrap();
    while ids.len() < OBJECTS {
        ids.push(os.create(&tx, ObjType(20), 4096, &[0; BONUS_LEN]).unwrap());
    }
    for _ in 0..rng.gen_range(1..24) {
        let id = ids[rng.gen_range(0..ids.len())];
        if rng.gen_range(0..10) == 0 {
            let start = rng.gen_range(0..SPAN / 4096) * 4096;
            os.free_range(&tx, id, start, Some(rng.gen_range(1..16) * 4096)).unwrap();
            continue;
        }
        let mut data = vec![0u8; rng.gen_range(1..=16) * 4096];
        rng.fill_bytes(&mut data);
        os.write(&tx, id, rng.gen_range(0..SPAN / 4096) * 4096, &data).unwrap();
    }
    drop(tx);
    pool.obj().sync().unwrap();
}

fn pick<T: Clone>(rng: &mut impl Rng, items: &[T]) -> Option<T> {
    (!items.is_empty()).then(|| items[rng.gen_range(0..items.len())].clone())
}

#[test]
fn cached_snapshot_space_matches_a_recount() {
    let run = tarn_testkit::seeded!(300);
    let mut rng = run.rng(0);
    let devs = common::devices("used", 256 << 20);
    let pool = common::create(&devs, "none");
    pool.create_dataset("tank/a", &[], false, &common::no_init).unwrap();
    pool.create_dataset("tank/b", &[], false, &common::no_init).unwrap();

    // Asks for every snapshot's `used` all the time, whatever is going on.
    let stop = Arc::new(AtomicBool::new(false));
    let asker = {
        let (pool, stop) = (pool.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut asked = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for snap in pool.snapshots(None) {
                    if pool.get_property(&snap, "used", true, None).is_ok() {
                        asked += 1;
                    }
                }
                std::thread::yield_now();
            }
            asked
        })
    };

    let mut serial = 0;
    let mut done = [0usize; 7];
    for step in 0..run.count {
        serial += 1;
        let datasets = pool.list();
        let snapshots = pool.snapshots(None);
        let clones: Vec<String> = datasets.iter().filter(|d| pool.record(d).is_ok_and(|r| r.origin.is_some())).cloned().collect();
        let kind = rng.gen_range(0..16);
        let ok = match kind {
            0..=5 => {
                let ds = pick(&mut rng, &datasets).unwrap();
                churn(&pool, &ds, &mut rng);
                true
            }
            6..=8 => {
                let ds = pick(&mut rng, &datasets).unwrap();
                pool.snapshot(&[format!("{ds}@s{serial}")]).is_ok()
            }
            9 | 10 => pick(&mut rng, &snapshots).is_some_and(|s| pool.clones_of(&s).is_empty() && pool.destroy_snapshot(&s, false).is_ok()),
            11 => pick(&mut rng, &snapshots).is_some_and(|s| pool.rollback(&s, true).is_ok()),
            12 => pick(&mut rng, &snapshots).is_some_and(|s| pool.clone_snapshot(&s, &format!("tank/c{serial}"), &[]).is_ok()),
            13 => pick(&mut rng, &clones).is_some_and(|c| pool.destroy_dataset(&c, true).is_ok()),
            _ => pick(&mut rng, &clones).is_some_and(|c| pool.promote(&c).is_ok()),
        };
        if ok {
            done[match kind {
                0..=5 => 0,
                6..=8 => 1,
                9 | 10 => 2,
                11 => 3,
                12 => 4,
                13 => 5,
                _ => 6,
            }] += 1;
        }
        pool.obj().sync().unwrap();
        check_against_recount(&pool, &format!("step {step} (kind {kind})"));
    }
    stop.store(true, Ordering::Relaxed);
    let asked = asker.join().unwrap();
    eprintln!("steps done by kind {done:?}; `used` asked {asked} times meanwhile");
    assert!(done.iter().all(|&n| n > 0) || run.count < 100, "every kind of step ran: {done:?}");

    // Nothing changes: the second listing is served from the summaries.
    let list = |pool: &Pool| {
        for snap in pool.snapshots(None) {
            prop(pool, &snap, "used");
        }
    };
    list(&pool);
    let (hits, builds) = pool.obj().deadlist_summary_counters();
    list(&pool);
    let (hits2, builds2) = pool.obj().deadlist_summary_counters();
    assert_eq!(builds2, builds, "a listing with nothing changed read a dead list again");
    assert!(hits2 - hits >= pool.snapshots(None).len() as u64, "every snapshot's used came from a summary");
    let report = pool.obj().check();
    assert!(report.ok(), "{report:?}");
    check_against_recount(&common::reimport(pool, &devs), "after export/import");
}
