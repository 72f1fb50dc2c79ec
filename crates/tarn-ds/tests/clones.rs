//! Clones and promote on memory devices: a seeded random sequence of
//! writes and frees in datasets, snapshots, snapshot destroys (any order),
//! clones, promotes, rollbacks and dataset destroys, against a model of
//! every dataset and snapshot. After every step the pool checker must find
//! no damage, no leak and no double allocation, and the datasets' space
//! must add up (see `check_space`). `TARN_SEED` / `TARN_COUNT` pick the
//! sequence and its length.

mod common;

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use tarn_ds::Pool;
use tarn_obj::{
    ObjType, ObjectId, ObjectSet, BONUS_LEN,
};

const OBJECTS: u64 = 3;
const SPAN: usize = 400_000;

/// Object id → contents.
type Contents = BTreeMap<u64, Vec<u8>>;

#[derive(Default)]
struct Model {
    /// Datasets: contents and origin.
    datasets: BTreeMap<String, (Contents, Option<String>)>,
    /// Snapshots by full name: contents.
    snapshots: BTreeMap<String, Contents>,
}

fn read_contents(os: &ObjectSet, want: &Contents, what: &str) {
    for (id, data) in want {
        let mut got = vec![0u8; data.len()];
        os.read(ObjectId(*id), 0, &mut got)
            .unwrap_or_else(|e| panic!("{what}: read object {id}: {e}"));
        assert!(got == *data, "{what}: object {id} differs");
    }
}

fn verify_contents(pool: &Pool, model: &Model, what: &str) {
    assert_eq!(
        pool.list(),
        model.datasets.keys().cloned().collect::<Vec<_>>(),
        "{what}: dataset names"
    );
    let mut snaps = pool.snapshots(None);
    snaps.sort();
    assert_eq!(
        snaps,
        model.snapshots.keys().cloned().collect::<Vec<_>>(),
        "{what}: snapshot names"
    );
    for (name, (contents, origin)) in &model.datasets {
        read_contents(
            &pool.objset(name).unwrap(),
            contents,
            &format!("{what}: {name}"),
        );
        let got = pool.get_property(name, "origin", true, None).unwrap().value;
        assert_eq!(
            got,
            origin.clone().unwrap_or_else(|| "-".into()),
            "{what}: origin of {name}"
        );
    }
    for (name, contents) in &model.snapshots {
        read_contents(
            &pool.snapshot_objset(name).unwrap(),
            contents,
            &format!("{what}: {name}"),
        );
    }
}

/// The pool checker finds nothing wrong, and space adds up:
///
///   used_raw(pool root) == report.dataset_bytes
///
/// where `used_raw` is the raw (not deflated) `used` of the root dataset
/// (usedbydataset + usedbysnapshots + usedbychildren, every dataset once)
/// and `dataset_bytes` is what the checker finds allocated to the trees of
/// every dataset object set (heads, snapshots, clones; all copies; roots
/// excluded), each block counted once however many object sets share it.
/// Every dataset's `used` is also at least its `usedbysnapshots`, and a
/// snapshot's `used` (what destroying it frees) at most that.
fn check_space(pool: &Pool, what: &str) {
    pool.obj().sync().unwrap();
    let report = pool.obj().check();
    assert!(report.ok(), "{what}: {report:?}");
    let used = pool.used_raw("tank");
    assert_eq!(
        used, report.dataset_bytes,
        "{what}: sum of used (raw) vs blocks in dataset trees ({report:?})"
    );
    for name in pool.list() {
        let get = |prop: &str| {
            pool.get_property(&name, prop, true, None)
                .unwrap()
                .value
                .parse::<u64>()
                .unwrap()
        };
        let (total, ds, snaps, children) = (
            get("used"),
            get("usedbydataset"),
            get("usedbysnapshots"),
            get("usedbychildren"),
        );
        assert!(
            ds + snaps + children <= total + 2 && total <= ds + snaps + children + 2,
            "{what}: {name}: used {total} != {ds}+{snaps}+{children}"
        );
        for snap in pool.snapshots(Some(&name)) {
            let u: u64 = pool
                .get_property(&snap, "used", true, None)
                .unwrap()
                .value
                .parse()
                .unwrap();
            assert!(
                u <= snaps,
                "{what}: {snap} used {u} > usedbysnapshots of {name} {snaps}"
            );
        }
    }
}

fn random_dataset(rng: &mut StdRng, model: &Model) -> String {
    let names: Vec<&String> = model.datasets.keys().collect();
    names[rng.gen_range(0..names.len())].clone()
}

fn random_snapshot(rng: &mut StdRng, model: &Model) -> Option<String> {
    let names: Vec<&String> = model.snapshots.keys().collect();
    if names.is_empty() {
        return None;
    }
    Some(names[rng.gen_range(0..names.len())].clone())
}

fn write_random(pool: &Pool, rng: &mut StdRng, model: &mut Model, name: &str) {
    let os = pool.objset(name).unwrap();
    let id = rng.gen_range(1..=OBJECTS);
    let contents = &mut model.datasets.get_mut(name).unwrap().0;
    let Some(data_model) = contents.get_mut(&id) else {
        return;
    };
    if rng.gen_range(0..5) == 0 {
        let tx = pool.obj().begin();
        os.free_range(&tx, ObjectId(id), 0, None).unwrap();
        data_model.iter_mut().for_each(|b| *b = 0);
        return;
    }
    let off = rng.gen_range(0..SPAN);
    let len = rng.gen_range(1..=80_000);
    let mut data = vec![0u8; len];
    rng.fill_bytes(&mut data);
    let tx = pool.obj().begin();
    os.write(&tx, ObjectId(id), off as u64, &data).unwrap();
    if data_model.len() < off + len {
        data_model.resize(off + len, 0);
    }
    data_model[off..off + len].copy_from_slice(&data);
}

/// A fresh dataset with OBJECTS objects.
fn new_dataset(pool: &Pool, model: &mut Model, name: &str) {
    if name != "tank" {
        pool.create_dataset(name, &[], false, &common::no_init).unwrap();
    }
    let os = pool.objset(name).unwrap();
    let tx = pool.obj().begin();
    let mut contents = Contents::new();
    for _ in 0..OBJECTS {
        let id = os.create(&tx, ObjType(20), 16384, &[0; BONUS_LEN]).unwrap();
        contents.insert(id.0, Vec::new());
    }
    drop(tx);
    pool.obj().sync().unwrap();
    model.datasets.insert(name.to_string(), (contents, None));
}

/// The snapshots a promote of `clone` moves (asked before the promote).
fn moving_snapshots(pool: &Pool, model: &Model, clone: &str) -> Vec<String> {
    let origin = model.datasets[clone].1.clone().expect("a clone");
    let source = origin.split_once('@').unwrap().0.to_string();
    let origin_txg = pool.snapshot_record(&origin).unwrap().createtxg;
    model
        .snapshots
        .keys()
        .filter(|n| n.split_once('@').unwrap().0 == source)
        .filter(|n| pool.snapshot_record(n).unwrap().createtxg <= origin_txg)
        .cloned()
        .collect()
}

/// What promote does to names, in the model.
fn promote_model(model: &mut Model, clone: &str, moving: &[String]) {
    let origin = model.datasets[clone].1.clone().expect("a clone");
    let source = origin.split_once('@').unwrap().0.to_string();
    let rename = |n: &str| format!("{clone}@{}", n.split_once('@').unwrap().1);
    for old in moving {
        let c = model.snapshots.remove(old).unwrap();
        model.snapshots.insert(rename(old), c);
    }
    let source_origin = model.datasets[&source].1.clone();
    model.datasets.get_mut(clone).unwrap().1 = source_origin;
    model.datasets.get_mut(&source).unwrap().1 = Some(rename(&origin));
    for (name, (_, o)) in model.datasets.iter_mut() {
        if name != clone && name != &source {
            if let Some(x) = o.clone().filter(|x| moving.contains(x)) {
                *o = Some(rename(&x));
            }
        }
    }
}

#[test]
fn random_clone_promote_sequences_keep_space_exact() {
    let run = tarn_testkit::seeded!(400);
    let (seed, count) = (run.seed, run.count);
    let mut rng = StdRng::seed_from_u64(seed);
    let devs = common::devices("mem", 256 << 20);
    let mut pool = common::create(&devs, "none");
    let mut model = Model::default();
    new_dataset(&pool, &mut model, "tank");
    new_dataset(&pool, &mut model, "tank/a");
    let mut serial = 0;
    let (mut clones, mut promotes, mut refused) = (0, 0, 0);
    for step in 0..count {
        let what = format!("step {step} (TARN_SEED={seed})");
        serial += 1;
        match rng.gen_range(0..20) {
            0..=6 => {
                let name = random_dataset(&mut rng, &model);
                for _ in 0..rng.gen_range(1..4) {
                    write_random(&pool, &mut rng, &mut model, &name);
                }
            }
            7..=9 => {
                let name = format!("{}@s{serial}", random_dataset(&mut rng, &model));
                pool.snapshot(std::slice::from_ref(&name)).unwrap();
                let dataset = name.split_once('@').unwrap().0;
                model
                    .snapshots
                    .insert(name.clone(), model.datasets[dataset].0.clone());
            }
            10 | 11 => {
                let Some(name) = random_snapshot(&mut rng, &model) else {
                    continue;
                };
                let has_clones = model
                    .datasets
                    .values()
                    .any(|(_, o)| o.as_deref() == Some(name.as_str()));
                let r = pool.destroy_snapshot(&name, false);
                if has_clones {
                    let e = r.expect_err("a snapshot with clones is destroyed");
                    assert!(e.to_string().contains("dependent clones"), "{what}: {e}");
                    refused += 1;
                } else {
                    r.unwrap_or_else(|e| panic!("{what}: destroy {name}: {e}"));
                    model.snapshots.remove(&name);
                }
            }
            12 | 13 => {
                let Some(origin) = random_snapshot(&mut rng, &model) else {
                    continue;
                };
                let target = format!("tank/c{serial}");
                pool.clone_snapshot(&origin, &target, &[])
                    .unwrap_or_else(|e| panic!("{what}: clone {origin}: {e}"));
                let contents = model.snapshots[&origin].clone();
                model.datasets.insert(target, (contents, Some(origin)));
                clones += 1;
            }
            14 | 15 => {
                let candidates: Vec<String> = model
                    .datasets
                    .iter()
                    .filter(|(_, (_, o))| o.is_some())
                    .map(|(n, _)| n.clone())
                    .collect();
                if candidates.is_empty() {
                    continue;
                }
                let clone = candidates[rng.gen_range(0..candidates.len())].clone();
                // A snapshot name used on both sides refuses the promote.
                let source = model.datasets[&clone]
                    .1
                    .clone()
                    .unwrap()
                    .split_once('@')
                    .unwrap()
                    .0
                    .to_string();
                let moving = moving_snapshots(&pool, &model, &clone);
                let conflict = moving.iter().any(|n| {
                    model
                        .snapshots
                        .contains_key(&format!("{clone}@{}", n.split_once('@').unwrap().1))
                });
                let r = pool.promote(&clone);
                if conflict {
                    r.expect_err("promote with a name conflict");
                    refused += 1;
                } else {
                    let former = r.unwrap_or_else(|e| panic!("{what}: promote {clone}: {e}"));
                    assert_eq!(former, source);
                    promote_model(&mut model, &clone, &moving);
                    promotes += 1;
                    verify_contents(&pool, &model, &format!("{what}: after promote of {clone}"));
                }
            }
            16 | 17 => {
                let name = random_dataset(&mut rng, &model);
                let Some(newest) = pool.snapshots(Some(&name)).pop() else {
                    continue;
                };
                pool.rollback(&newest, false)
                    .unwrap_or_else(|e| panic!("{what}: rollback {newest}: {e}"));
                model.datasets.get_mut(&name).unwrap().0 = model.snapshots[&newest].clone();
            }
            18 => {
                let name = random_dataset(&mut rng, &model);
                if name == "tank" {
                    continue;
                }
                let prefix = format!("{name}@");
                let blocked = model
                    .snapshots
                    .keys()
                    .filter(|s| s.starts_with(&prefix))
                    .any(|s| {
                        model
                            .datasets
                            .values()
                            .any(|(_, o)| o.as_deref() == Some(s.as_str()))
                    });
                let r = pool.destroy_dataset(&name, true);
                if blocked {
                    let e = r.expect_err("a dataset whose snapshots have clones is destroyed");
                    assert!(e.to_string().contains("dependent clones"), "{what}: {e}");
                    refused += 1;
                } else {
                    r.unwrap_or_else(|e| panic!("{what}: destroy {name}: {e}"));
                    model.datasets.remove(&name);
                    model.snapshots.retain(|s, _| !s.starts_with(&prefix));
                }
            }
            _ => {
                if model.datasets.len() < 6 {
                    new_dataset(&pool, &mut model, &format!("tank/d{serial}"));
                }
            }
        }
        check_space(&pool, &what);
        if step % 10 == 0 {
            verify_contents(&pool, &model, &what);
        }
        if step == count / 2 {
            pool = common::reimport(pool, &devs);
            verify_contents(&pool, &model, &format!("{what}: after export/import"));
            check_space(&pool, &format!("{what}: after export/import"));
        }
    }
    eprintln!("{clones} clones, {promotes} promotes, {refused} refusals");
    assert!(
        clones > 0 && promotes > 0,
        "the sequence made {clones} clones and {promotes} promotes"
    );
    pool = common::reimport(pool, &devs);
    verify_contents(&pool, &model, "end, after export/import");
    check_space(&pool, "end, after export/import");
}

/// A clone reads what its origin snapshot held, diverges independently,
/// keeps its origin snapshot from being destroyed, and after promote the
/// former origin dataset can be destroyed while the clone keeps everything.
#[test]
fn clone_then_promote_then_destroy_origin() {
    let devs = common::devices("mem", 256 << 20);
    let pool = common::create(&devs, "none");
    let mut model = Model::default();
    new_dataset(&pool, &mut model, "tank/a");
    let obj = ObjectId(*model.datasets["tank/a"].0.keys().next().unwrap());
    let os = pool.objset("tank/a").unwrap();
    let write = |os: &ObjectSet, byte: u8, len: usize| {
        let tx = pool.obj().begin();
        os.write(&tx, obj, 0, &vec![byte; len]).unwrap();
    };
    write(&os, 1, 300_000);
    pool.snapshot(&["tank/a@one".to_string()]).unwrap();
    write(&os, 2, 200_000);
    pool.snapshot(&["tank/a@two".to_string()]).unwrap();
    write(&os, 3, 100_000);
    pool.snapshot(&["tank/a@three".to_string()]).unwrap();
    pool.clone_snapshot(
        "tank/a@two",
        "tank/b",
        &[("compression".into(), "off".into())],
    )
    .unwrap();
    let read = |name: &str| {
        let os = if name.contains('@') {
            pool.snapshot_objset(name).unwrap()
        } else {
            pool.objset(name).unwrap()
        };
        let mut buf = vec![0u8; 300_000];
        os.read(obj, 0, &mut buf).unwrap();
        buf
    };
    let mut two = vec![2u8; 200_000];
    two.extend(vec![1u8; 100_000]);
    assert_eq!(read("tank/b"), two);
    assert_eq!(
        pool.get_property("tank/b", "origin", false, None)
            .unwrap()
            .value,
        "tank/a@two"
    );
    assert_eq!(
        pool.get_property("tank/a@two", "clones", false, None)
            .unwrap()
            .value,
        "tank/b"
    );
    assert_eq!(
        pool.get_property("tank/b", "compression", false, None)
            .unwrap()
            .value,
        "off"
    );
    // A fresh clone uses (nearly) nothing: its blocks are the origin's.
    assert_eq!(
        pool.get_property("tank/b", "usedbydataset", true, None)
            .unwrap()
            .value,
        "0"
    );
    check_space(&pool, "after clone");
    // The clone diverges; the origin does not change.
    write(&pool.objset("tank/b").unwrap(), 9, 50_000);
    pool.snapshot(&["tank/b@mine".to_string()]).unwrap();
    check_space(&pool, "after writing the clone");
    assert_eq!(&read("tank/b")[..50_000], &vec![9u8; 50_000][..]);
    assert_eq!(read("tank/a@two"), two);
    let e = pool.destroy_snapshot("tank/a@two", false).unwrap_err();
    assert!(e.to_string().contains("dependent clones"), "{e}");
    assert!(pool.destroy_dataset("tank/a", true).is_err());
    assert!(pool.promote("tank/a").is_err(), "not a clone");
    let e = pool.rollback("tank/a@one", true).unwrap_err();
    assert!(e.to_string().contains("dependent clones"), "{e}");
    assert_eq!(pool.snapshots(Some("tank/a")).len(), 3, "a refused rollback -r destroys nothing");
    check_space(&pool, "after refusals");
    // Promote: one and two move to b, a becomes a clone of b@two.
    let a_now = read("tank/a");
    assert_eq!(pool.promote("tank/b").unwrap(), "tank/a");
    assert_eq!(
        pool.snapshots(Some("tank/b")),
        vec!["tank/b@one", "tank/b@two", "tank/b@mine"]
    );
    assert_eq!(pool.snapshots(Some("tank/a")), vec!["tank/a@three"]);
    assert_eq!(
        pool.get_property("tank/a", "origin", false, None)
            .unwrap()
            .value,
        "tank/b@two"
    );
    assert_eq!(
        pool.get_property("tank/b", "origin", false, None)
            .unwrap()
            .value,
        "-"
    );
    assert_eq!(read("tank/b@two"), two);
    assert_eq!(read("tank/a"), a_now);
    check_space(&pool, "after promote");
    // Now the former origin goes and the clone keeps everything.
    pool.destroy_dataset("tank/a", true).unwrap();
    check_space(&pool, "after destroying the former origin");
    assert_eq!(read("tank/b@two"), two);
    assert_eq!(read("tank/b@one"), vec![1u8; 300_000]);
    let pool = common::reimport(pool, &devs);
    assert_eq!(read_after(&pool, "tank/b@two", obj), two);
    check_space(&pool, "after export/import");
    // And the last snapshots and the dataset can go too.
    pool.destroy_dataset("tank/b", true).unwrap();
    check_space(&pool, "all gone");
}

fn read_after(pool: &Pool, name: &str, obj: ObjectId) -> Vec<u8> {
    let os = pool.snapshot_objset(name).unwrap();
    let mut buf = vec![0u8; 300_000];
    os.read(obj, 0, &mut buf).unwrap();
    buf
}
