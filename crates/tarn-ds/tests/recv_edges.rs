//! Receive journal edge cases found in review (issue 14): each test failed
//! before its fix.
//!
//! - a resumed receive (`send -t`) without `-s` that stops again keeps its
//!   partial state resumable (it used to leave its new snapshots unnamed
//!   and a stale token that resumed into a wrong snapshot);
//! - power cuts while a failed `-R -F` receive takes back a dataset a full
//!   stream had replaced leave no orphan (the old record and the new object
//!   set's destruction are one transaction);
//! - power cuts during an `-R -I` receive, without `-s`, of a clone made
//!   after the base: taking the clone back frees only what it did not
//!   share with its origin (it used to free the origin's blocks);
//! - a forged `-R` header whose sender lists omit what the package itself
//!   brings is refused before anything is changed (it used to prune the
//!   target and its children).

mod common;

use rand::{Rng, RngCore};
use rand_chacha::ChaCha8Rng;
use tarn_dev::{CrashRecorder, CutMode};
use tarn_ds::replication::{read_header, RecvSpec, SendSpec};
use tarn_ds::Pool;
use tarn_obj::{ObjType, ObjectId, BONUS_LEN};

use common::{crash_pool, import_after_cut, no_init};

const DEV: u64 = 96 << 20;

fn fill(pool: &Pool, ds: &str, rng: &mut ChaCha8Rng, n: usize) {
    let os = pool.objset(ds).unwrap();
    let tx = pool.obj().begin();
    for _ in 0..n {
        let id = os.create(&tx, ObjType(20), 16384, &[1u8; BONUS_LEN]).unwrap();
        let mut data = vec![0u8; 4 * 16384];
        rng.fill_bytes(&mut data);
        os.write(&tx, id, 0, &data).unwrap();
    }
    drop(tx);
    pool.obj().sync().unwrap();
}

fn package(pool: &Pool, spec: SendSpec) -> Vec<u8> {
    let plan = pool.send_plan(&spec).unwrap();
    let mut v = Vec::new();
    pool.send_package(&plan, &mut v).unwrap();
    v
}

fn recv(pool: &Pool, target: &str, resumable: bool, force: bool, stream: &[u8]) -> tarn_ds::Result<tarn_ds::replication::RecvReport> {
    let mut input = stream;
    let header = read_header(&mut input)?;
    let spec = RecvSpec { target: target.into(), resumable, force, spool_dir: Some(std::env::temp_dir()), ..Default::default() };
    pool.receive_package(&spec, &header, &mut input)
}

fn objects(pool: &Pool, snap: &str) -> usize {
    pool.snapshot_objset(snap).unwrap().objects_in_range(ObjectId(1), ObjectId(1 << 16)).unwrap().len()
}

/// Seeded cut points in `first..=total` (`TARN_COUNT` of them, all of
/// them when the range is smaller).
fn cuts(run: &tarn_testkit::Seeded, stream: u64, first: u64, total: u64) -> Vec<u64> {
    if total - first < run.count {
        return (first..=total).collect();
    }
    let mut rng = run.rng(stream);
    let mut v: Vec<u64> = (0..run.count).map(|_| rng.gen_range(first..=total)).collect();
    v.sort();
    v
}

#[test]
fn a_resumed_receive_without_s_that_stops_stays_resumable() {
    let mut rng = <ChaCha8Rng as rand::SeedableRng>::seed_from_u64(7);
    let src = Pool::create(common::obj_pool("src", &common::devices("s", 64 << 20)), &[], &no_init).unwrap();
    src.create_dataset("src/a", &[], false, &no_init).unwrap();
    for i in 1..=3 {
        fill(&src, "src/a", &mut rng, 8);
        src.snapshot(&[format!("src/a@s{i}")]).unwrap();
    }
    let dst = Pool::create(common::obj_pool("dst", &common::devices("d", 64 << 20)), &[], &no_init).unwrap();
    recv(&dst, "dst/a", false, false, &package(&src, SendSpec { snapshot: "src/a@s1".into(), ..Default::default() })).unwrap();
    let series = package(&src, SendSpec { snapshot: "src/a@s3".into(), from: Some("@s1".into()), series: true, ..Default::default() });
    // Stopped early in @s2's sub-stream, with -s.
    recv(&dst, "dst/a", true, false, &series[..series.len() / 4]).unwrap_err();
    let token = dst.record("dst/a").unwrap().recv.unwrap().token;
    let plan = src.send_plan_resume(&token).unwrap();
    let mut rest = Vec::new();
    src.send_package(&plan, &mut rest).unwrap();
    // Resumed WITHOUT -s and stopped again inside @s3's sub-stream (after
    // @s2 was taken): still resumable, nothing unnamed.
    recv(&dst, "dst/a", false, false, &rest[..rest.len() - rest.len() / 5]).unwrap_err();
    let report = dst.check().unwrap();
    assert!(report.ok(), "{report:?}");
    let token2 = dst.record("dst/a").unwrap().recv.expect("the partial state is kept").token;
    assert_ne!(token2, token, "the token names the new position");
    assert!(dst.snapshots(Some("dst/a")).contains(&"dst/a@s2".to_string()));
    let plan = src.send_plan_resume(&token2).unwrap();
    let mut rest = Vec::new();
    src.send_package(&plan, &mut rest).unwrap();
    recv(&dst, "dst/a", true, false, &rest).unwrap();
    for sn in ["s2", "s3"] {
        assert_eq!(objects(&src, &format!("src/a@{sn}")), objects(&dst, &format!("dst/a@{sn}")), "@{sn}");
    }
    let report = dst.check().unwrap();
    assert!(report.ok(), "{report:?}");
}

#[test]
fn power_cuts_while_a_replaced_dataset_is_taken_back() {
    let run = tarn_testkit::seeded!(150);
    let mut rng = <ChaCha8Rng as rand::SeedableRng>::seed_from_u64(11);
    let src = Pool::create(common::obj_pool("src", &common::devices("s", 64 << 20)), &[], &no_init).unwrap();
    src.create_dataset("src/a", &[], false, &no_init).unwrap();
    src.create_dataset("src/a/b", &[], false, &no_init).unwrap();
    fill(&src, "src/a", &mut rng, 4);
    fill(&src, "src/a/b", &mut rng, 8);
    src.snapshot(&["src/a@s1".to_string(), "src/a/b@s1".to_string()]).unwrap();
    let pkg = package(&src, SendSpec { snapshot: "src/a@s1".into(), recursive: true, ..Default::default() });
    let rec = CrashRecorder::new();
    let pool = crash_pool(&rec, DEV);
    pool.create_dataset("dst/a", &[], false, &no_init).unwrap();
    fill(&pool, "dst/a", &mut rng, 2);
    let first = rec.event_count();
    // -F replaces dst/a (no snapshots), then the child's stream stops: the
    // replacement is taken back.
    recv(&pool, "dst/a", false, true, &pkg[..pkg.len() - pkg.len() / 4]).unwrap_err();
    assert!(pool.check().unwrap().ok());
    drop(pool);
    for cut in cuts(&run, 0, first, rec.event_count()) {
        let pool = import_after_cut(rec.image_at(cut, CutMode::DropUnflushed));
        let r = pool.check().unwrap();
        assert!(r.ok(), "cut {cut}: {r:?}");
    }
}

#[test]
fn power_cuts_while_a_new_clone_is_received_without_s() {
    let run = tarn_testkit::seeded!(200);
    let mut rng = <ChaCha8Rng as rand::SeedableRng>::seed_from_u64(13);
    let src = Pool::create(common::obj_pool("src", &common::devices("s", 64 << 20)), &[], &no_init).unwrap();
    src.create_dataset("src/a", &[], false, &no_init).unwrap();
    src.create_dataset("src/a/c", &[], false, &no_init).unwrap();
    fill(&src, "src/a/c", &mut rng, 6);
    src.snapshot(&["src/a@s1".to_string(), "src/a/c@s1".to_string()]).unwrap();
    src.clone_snapshot("src/a/c@s1", "src/a/k", &[]).unwrap();
    for r in 2..=3u64 {
        // The clone rewrites blocks it shares with its origin, and adds some.
        let os = src.objset("src/a/k").unwrap();
        let ids = os.objects_in_range(ObjectId(1), ObjectId(1 << 16)).unwrap();
        {
            let tx = src.obj().begin();
            for id in ids.iter().take(3) {
                let mut d = vec![0u8; 16384];
                rng.fill_bytes(&mut d);
                os.write(&tx, *id, 16384 * (r - 2), &d).unwrap();
            }
        }
        src.obj().sync().unwrap();
        fill(&src, "src/a/k", &mut rng, 4);
        src.snapshot(&[format!("src/a@s{r}"), format!("src/a/c@s{r}"), format!("src/a/k@s{r}")]).unwrap();
    }
    let full = package(&src, SendSpec { snapshot: "src/a@s1".into(), recursive: true, ..Default::default() });
    let inc = package(&src, SendSpec { snapshot: "src/a@s3".into(), from: Some("@s1".into()), recursive: true, ..Default::default() });
    let rec = CrashRecorder::new();
    let pool = crash_pool(&rec, DEV);
    recv(&pool, "dst/a", false, false, &full).unwrap();
    pool.obj().sync().unwrap();
    let first = rec.event_count();
    recv(&pool, "dst/a", false, false, &inc).unwrap();
    assert!(pool.record("dst/a/k").unwrap().origin.is_some_and(|o| o == "dst/a/c@s1"));
    assert!(pool.check().unwrap().ok());
    drop(pool);
    let mut settled = 0;
    for cut in cuts(&run, 1, first, rec.event_count()) {
        let pool = import_after_cut(rec.image_at(cut, CutMode::DropUnflushed));
        settled += usize::from(!pool.recovered_receives().is_empty());
        let r = pool.check().unwrap();
        assert!(r.ok(), "cut {cut}: {:?}: {r:?}", pool.recovered_receives());
        // The origin reads whole whatever happened to the clone.
        assert_eq!(objects(&pool, "dst/a/c@s1"), 6, "cut {cut}");
    }
    assert!(settled > 0, "no cut found the receive in progress");
}

#[test]
fn forged_sender_lists_are_refused_before_anything_changes() {
    let mut rng = <ChaCha8Rng as rand::SeedableRng>::seed_from_u64(17);
    let src = Pool::create(common::obj_pool("src", &common::devices("s", 64 << 20)), &[], &no_init).unwrap();
    src.create_dataset("src/a", &[], false, &no_init).unwrap();
    fill(&src, "src/a", &mut rng, 1);
    src.snapshot(&["src/a@s1".to_string()]).unwrap();
    fill(&src, "src/a", &mut rng, 1);
    src.snapshot(&["src/a@s2".to_string()]).unwrap();
    let full = package(&src, SendSpec { snapshot: "src/a@s1".into(), recursive: true, ..Default::default() });
    let inc = package(&src, SendSpec { snapshot: "src/a@s2".into(), from: Some("@s1".into()), recursive: true, ..Default::default() });
    let dst = Pool::create(common::obj_pool("dst", &common::devices("d", 64 << 20)), &[], &no_init).unwrap();
    recv(&dst, "dst/a", false, false, &full).unwrap();
    dst.create_dataset("dst/a/mine", &[], false, &no_init).unwrap();
    let forge = |f: &dyn Fn(&mut tarn_ds::replication::PackageHeader)| {
        let mut input = &inc[..];
        let mut h = read_header(&mut input).unwrap();
        f(&mut h);
        let json = serde_json::to_vec(&h).unwrap();
        let mut v = Vec::new();
        v.extend_from_slice(b"TARNPKG1");
        v.extend_from_slice(&1u32.to_le_bytes());
        v.extend_from_slice(&(json.len() as u32).to_le_bytes());
        v.extend_from_slice(&json);
        let sum = blake3::hash(&v);
        v.extend_from_slice(&sum.as_bytes()[..16]);
        v.extend_from_slice(input);
        v
    };
    type Forgery = Box<dyn Fn(&mut tarn_ds::replication::PackageHeader)>;
    let forgeries: [(&str, Forgery); 4] = [
        ("empty lists", Box::new(|h| {
            h.sender_datasets = Some(vec![]);
            h.datasets[0].sender_snapshots = Some(vec![]);
        })),
        ("the sent snapshots not listed", Box::new(|h| h.datasets[0].sender_snapshots = Some(vec![]))),
        ("lists without -R", Box::new(|h| h.recursive = false)),
        ("a clone of nothing sent before", Box::new(|h| {
            h.datasets[0].origin = Some(tarn_ds::replication::PackageOrigin { dataset: Some("zz".into()) })
        })),
    ];
    let before: Vec<String> = dst.list().into_iter().chain(dst.snapshots(None)).collect();
    for (what, f) in forgeries {
        let stream = forge(&*f);
        let e = recv(&dst, "dst/a", false, true, &stream).unwrap_err();
        assert!(e.to_string().contains("corrupt stream"), "{what}: {e}");
        let now: Vec<String> = dst.list().into_iter().chain(dst.snapshots(None)).collect();
        assert_eq!(now, before, "{what}: the pool changed");
    }
    // The genuine one prunes what the sender does not have, not the target.
    let r = recv(&dst, "dst/a", false, true, &inc).unwrap();
    assert_eq!(r.destroyed, vec!["dst/a/mine".to_string()]);
    assert!(dst.exists("dst/a"));
    assert!(dst.check().unwrap().ok());
}
