//! Power cuts in the middle of receives (issue 14, item 1).
//!
//! A package (a full `-R` of a tree with a clone, an incremental `-R`, a
//! `-I` series of one dataset) is received, with and without `-s`, into a pool on crash
//! recording devices; then the durable image at seeded cut points is
//! imported. At every cut:
//! - the pool checker finds no damage and no leak, object sets that no
//!   dataset, snapshot or receive names counted (orphans);
//! - without `-s` the target is exactly as before the receive or exactly as
//!   after it;
//! - with `-s` it is one of those, or a dataset holds partial state whose
//!   `receive_resume_token` makes the sender produce the rest, and
//!   receiving that gives exactly the tree after the receive.
//!
//! `TARN_COUNT` is the number of cuts over all six runs.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::{Rng, RngCore};
use rand_chacha::ChaCha8Rng;
use tarn_dev::{CrashRecorder, CutMode};
use tarn_ds::replication::{read_header, RecvSpec, SendSpec};
use tarn_ds::Pool;
use tarn_obj::{ObjType, ObjectId, ObjectSet, BONUS_LEN};

use common::{crash_pool, import_after_cut, no_init};

const DEV: u64 = 96 << 20;

/// The source: `src/a` with children `b` and `c`, snapshots s1..s3 of all.
fn source() -> Arc<Pool> {
    let devs = common::devices("s", DEV);
    let pool = Pool::create(common::obj_pool("src", &devs), &[], &no_init).unwrap();
    for ds in ["src/a", "src/a/b", "src/a/c"] {
        pool.create_dataset(ds, &[], false, &no_init).unwrap();
    }
    let mut rng = <ChaCha8Rng as rand::SeedableRng>::seed_from_u64(0x5eed);
    let mut all = vec!["src/a", "src/a/b", "src/a/c"];
    for round in 1..=3 {
        for ds in &all {
            change(&pool, ds, &mut rng, round);
        }
        let names: Vec<String> = all.iter().map(|d| format!("{d}@s{round}")).collect();
        pool.snapshot(&names).unwrap();
        if round == 1 {
            // A clone inside the tree: sent as a clone of the origin.
            pool.clone_snapshot("src/a/c@s1", "src/a/k", &[]).unwrap();
            all.push("src/a/k");
        }
    }
    pool
}

/// Some objects made, rewritten, grown and freed: enough data that a
/// receive spans several txgs.
fn change(pool: &Pool, ds: &str, rng: &mut ChaCha8Rng, round: u32) {
    let os = pool.objset(ds).unwrap();
    let tx = pool.obj().begin();
    for _ in 0..6 {
        let bs = [4096u32, 16384, 131072][rng.gen_range(0..3)];
        let id = os.create(&tx, ObjType(20), bs, &[round as u8; BONUS_LEN]).unwrap();
        let mut data = vec![0u8; rng.gen_range(1..6) * bs as usize];
        rng.fill_bytes(&mut data);
        os.write(&tx, id, 0, &data).unwrap();
    }
    let existing = os.objects_in_range(ObjectId(1), ObjectId(1 << 16)).unwrap();
    drop(tx);
    pool.obj().sync().unwrap();
    let tx = pool.obj().begin();
    for id in &existing {
        if !rng.gen_bool(0.3) {
            continue;
        }
        let mut data = vec![0u8; 8192];
        rng.fill_bytes(&mut data);
        os.write(&tx, *id, rng.gen_range(0..4) * 4096, &data).unwrap();
    }
    if round == 3 {
        if let Some(id) = existing.first() {
            os.free(&tx, *id).unwrap();
        }
    }
    drop(tx);
    pool.obj().sync().unwrap();
}

fn package(pool: &Pool, spec: SendSpec) -> Vec<u8> {
    let plan = pool.send_plan(&spec).unwrap();
    let mut out = Vec::new();
    pool.send_package(&plan, &mut out).unwrap();
    out
}

fn receive(pool: &Pool, target: &str, resumable: bool, stream: &[u8]) -> tarn_ds::Result<tarn_ds::replication::RecvReport> {
    let mut input = stream;
    let header = read_header(&mut input)?;
    let spec = RecvSpec { target: target.into(), resumable, spool_dir: Some(std::env::temp_dir()), ..Default::default() };
    pool.receive_package(&spec, &header, &mut input)
}

/// Contents of an object set: every object's type, block size, bonus and
/// bytes, hashed.
fn digest(os: &ObjectSet) -> String {
    let mut h = blake3::Hasher::new();
    for id in os.objects_in_range(ObjectId(1), ObjectId(1 << 16)).unwrap() {
        let info = os.info(id).unwrap();
        h.update(&id.0.to_le_bytes());
        h.update(&info.otype.0.to_le_bytes());
        h.update(&info.block_size.to_le_bytes());
        h.update(&info.bonus);
        let mut data = vec![0u8; info.length as usize];
        os.read(id, 0, &mut data).unwrap();
        h.update(&data);
    }
    h.finalize().to_hex().to_string()
}

/// The tree under `top`: relative dataset and snapshot names, each with its
/// contents' digest, and whether it holds a partial receive.
fn tree(pool: &Pool, top: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let rel = |n: &str| n.strip_prefix(top).unwrap_or(n).to_string();
    for ds in pool.subtree(top) {
        let rec = pool.record(&ds).unwrap();
        let partial = if rec.recv.is_some() { " (partial)" } else { "" };
        out.insert(rel(&ds), format!("{}{partial}", digest(&pool.objset(&ds).unwrap())));
        for s in pool.snapshots(Some(&ds)) {
            let guid = pool.snapshot_record(&s).unwrap().guid;
            out.insert(rel(&s), format!("{} guid {guid:x}", digest(&pool.snapshot_objset(&s).unwrap())));
        }
    }
    out
}

struct Scenario {
    name: &'static str,
    /// Packages received before the recording counts (the base).
    setup: Vec<Vec<u8>>,
    /// The package whose receive is cut.
    stream: Vec<u8>,
    /// What `send -t TOKEN` resumes from, on the source.
    target: &'static str,
}

/// Returns (cuts whose import settled a receive in progress, cuts that
/// found partial state and resumed it).
fn run(src: &Pool, sc: &Scenario, resumable: bool, cuts: u64, rng: &mut ChaCha8Rng) -> (u64, u64) {
    let rec = CrashRecorder::new();
    let pool = crash_pool(&rec, DEV);
    pool.create_dataset("dst/in", &[], false, &no_init).unwrap();
    for p in &sc.setup {
        receive(&pool, sc.target, false, p).unwrap();
    }
    pool.obj().sync().unwrap();
    let before = tree(&pool, sc.target);
    let first = rec.event_count();
    receive(&pool, sc.target, resumable, &sc.stream).unwrap();
    let after = tree(&pool, sc.target);
    assert_ne!(before, after, "{}: the receive changed nothing", sc.name);
    drop(pool);
    let total = rec.event_count();
    let mut points: Vec<u64> = (0..cuts).map(|_| rng.gen_range(first..=total)).collect();
    points.sort();
    let (mut settled, mut resumed) = (0, 0);
    for (i, &cut) in points.iter().enumerate() {
        let mode = match i % 3 {
            0 => CutMode::DropUnflushed,
            1 => CutMode::TearLastWrite,
            _ => CutMode::RandomSubset(rng.gen()),
        };
        let what = format!("{} (-s: {resumable}), cut {cut} of {first}..{total}, {mode:?}", sc.name);
        let pool = import_after_cut(rec.image_at(cut, mode));
        settled += u64::from(!pool.recovered_receives().is_empty());
        let report = pool.check().unwrap();
        assert!(report.ok(), "{what}: check failed: {report:?}");
        let now = tree(&pool, sc.target);
        if now == after {
            // Received whole: the clone is one again.
            if let Some(k) = pool.subtree(sc.target).iter().find(|d| d.ends_with("/k")) {
                assert!(pool.record(k).unwrap().origin.is_some_and(|o| o.ends_with("/c@s1")), "{what}: {k} is not a clone");
            }
            continue;
        }
        if now == before {
            continue;
        }
        assert!(resumable, "{what}: without -s the target is neither as before nor as after:\nnow {now:#?}\nbefore {before:#?}\nafter {after:#?}");
        // A dataset holds a partial receive (or the top a restart marker).
        let token = pool
            .subtree(sc.target)
            .iter()
            .find_map(|d| pool.record(d).unwrap().recv.map(|p| p.token))
            .unwrap_or_else(|| panic!("{what}: changed, but no dataset is resumable: {now:#?}"));
        let plan = src.send_plan_resume(&token).unwrap_or_else(|e| panic!("{what}: send -t: {e}"));
        let mut rest = Vec::new();
        src.send_package(&plan, &mut rest).unwrap();
        receive(&pool, sc.target, true, &rest).unwrap_or_else(|e| panic!("{what}: receiving the rest: {e}"));
        assert_eq!(tree(&pool, sc.target), after, "{what}: resumed, but not the same tree");
        let report = pool.check().unwrap();
        assert!(report.ok(), "{what}: check failed after the resume: {report:?}");
        resumed += 1;
    }
    // The cuts must have hit the receive in flight, not only before or
    // after it.
    assert!(settled > cuts / 4, "{} (-s: {resumable}): only {settled} of {cuts} cuts found a receive in progress", sc.name);
    (settled, resumed)
}

#[test]
fn power_cuts_during_receives_leave_the_target_unchanged_or_resumable() {
    let run_ = tarn_testkit::seeded!(540);
    let mut rng = run_.rng(0);
    let src = source();
    let full_r = package(&src, SendSpec { snapshot: "src/a@s2".into(), recursive: true, ..Default::default() });
    let inc_r = package(&src, SendSpec { snapshot: "src/a@s3".into(), from: Some("@s2".into()), recursive: true, ..Default::default() });
    let full_b = package(&src, SendSpec { snapshot: "src/a/b@s1".into(), ..Default::default() });
    let series_b = package(&src, SendSpec { snapshot: "src/a/b@s3".into(), from: Some("@s1".into()), series: true, ..Default::default() });
    let scenarios = [
        Scenario { name: "full -R", setup: vec![], stream: full_r.clone(), target: "dst/in/a" },
        Scenario { name: "incremental -R", setup: vec![full_r], stream: inc_r, target: "dst/in/a" },
        Scenario { name: "-I series", setup: vec![full_b], stream: series_b, target: "dst/in/b" },
    ];
    let per = run_.count.div_ceil(6).max(1);
    let mut total = (0, 0);
    for sc in &scenarios {
        for resumable in [false, true] {
            let (n, r) = run(&src, sc, resumable, per, &mut rng);
            eprintln!("{} (-s: {resumable}): {per} cuts, {n} found it in progress, {r} resumed", sc.name);
            total.0 += n;
            total.1 += r;
        }
    }
    assert!(total.1 > 0, "no cut left a resumable state: {total:?}");
}
