//! Crash consistency: record every device write of a workload, cut power at
//! many seeded points (dropping unflushed writes, tearing the last one, or
//! keeping a random subset), and after each: import succeeds, the checker
//! finds nothing damaged, leaked or doubly allocated, and every byte that a
//! completed `sync()` (the fsync path) acknowledged is intact.
mod common;
use common::*;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use tarn_dev::{CrashRecorder, CutMode, Device};
use tarn_obj::*;

#[derive(Clone)]
struct State {
    files: Vec<(ObjectId, Vec<u8>)>,
}

#[test]
fn power_cut_at_many_points_keeps_synced_data() {
    let run = tarn_testkit::seeded!(1000);
    let (seed, count) = (run.seed, run.count);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let rec = CrashRecorder::new();
    let devs: Vec<Arc<dyn Device>> = (0..3).map(|i| rec.device(&format!("c{i}"), 32 << 20) as Arc<dyn Device>).collect();
    let pool = create(&devs, TopKind::Raidz { parity: 1 });
    pool.set_tunables(Tunables { txg_timeout_ms: 3_600_000, ..Default::default() });
    let osid = { let tx = pool.begin(); pool.create_objset(&tx).unwrap() };
    let os = pool.open_objset(osid).unwrap();
    pool.sync().unwrap();
    // (first event after the sync returned, state acknowledged)
    let mut acked: Vec<(u64, State)> = vec![(rec.event_count(), State { files: vec![] })];
    let mut cur = State { files: vec![] };
    let rounds = 40;
    for _ in 0..rounds {
        let tx = pool.begin();
        for _ in 0..rng.gen_range(1..6) {
            if cur.files.is_empty() || rng.gen_bool(0.3) {
                let id = os.create(&tx, ObjType(20), 4096 * rng.gen_range(1..9), &[0; BONUS_LEN]).unwrap();
                cur.files.push((id, Vec::new()));
            }
            let k = rng.gen_range(0..cur.files.len());
            let (id, data) = &mut cur.files[k];
            let off = rng.gen_range(0..100_000usize);
            let len = rng.gen_range(1..60_000usize);
            let fill: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            os.write(&tx, *id, off as u64, &fill).unwrap();
            if data.len() < off + len { data.resize(off + len, 0); }
            data[off..off + len].copy_from_slice(&fill);
            if rng.gen_bool(0.15) {
                let (id, _) = cur.files.remove(rng.gen_range(0..cur.files.len()));
                os.free(&tx, id).unwrap();
            }
        }
        drop(tx);
        pool.sync().unwrap();
        acked.push((rec.event_count(), cur.clone()));
    }
    drop(os);
    drop(pool);
    let total = rec.event_count();
    let first = acked[0].0;
    let mut cuts: Vec<u64> = (0..count).map(|_| rng.gen_range(first..=total)).collect();
    cuts.sort();
    let mut checked = 0;
    for (i, &cut) in cuts.iter().enumerate() {
        let mode = match i % 3 { 0 => CutMode::DropUnflushed, 1 => CutMode::TearLastWrite, _ => CutMode::RandomSubset(seed ^ cut) };
        let images: Vec<Arc<dyn Device>> = rec.image_at(cut, mode).into_iter().map(|d| d as Arc<dyn Device>).collect();
        let pool = import(images, false).unwrap_or_else(|e| panic!("import after cut {cut} ({mode:?}), seed {seed}: {e}"));
        let report = pool.check();
        assert!(report.ok(), "cut {cut} ({mode:?}) seed {seed}: {report:?}");
        // The newest acknowledged state at or before the cut, or the one after it
        // (its sync may have reached disk before the acknowledgement).
        let r = acked.iter().rposition(|(ev, _)| *ev <= cut).expect("first ack precedes cuts");
        let os = pool.open_objset(osid).expect("objset");
        let matches = |st: &State| st.files.iter().all(|(id, data)| {
            let Ok(info) = os.info(*id) else { return false };
            let _ = info;
            read_all(&os, *id, data.len()) == *data
        });
        let ok = matches(&acked[r].1) || acked.get(r + 1).is_some_and(|(_, st)| matches(st));
        assert!(ok, "cut {cut} ({mode:?}) seed {seed}: acknowledged data lost");
        checked += 1;
        drop(os);
        drop(pool);
    }
    eprintln!("checked {checked} cut points over {total} events");
    assert!(checked as u64 >= count);
}
