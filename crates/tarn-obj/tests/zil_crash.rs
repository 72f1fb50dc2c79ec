//! Power cuts with the intent log: several threads append records to
//! several object sets (each record also changes its object set in the
//! same txg, as a file system's would), commit some of them, and txgs sync
//! now and then. Every device write is recorded; power is cut at seeded
//! points (unflushed writes dropped, the last one torn, or a random subset
//! kept). After each cut: import succeeds, replay hands over only records
//! that were appended and whose txg did not reach disk, each once and in
//! sequence order; every record whose commit returned before the cut is
//! present; the checker finds nothing leaked or doubly allocated; the log
//! is empty after the replay's sync.
//!
//! A second test cuts power *during* replay and replays again: no record
//! is applied twice, none is lost.
mod common;
use common::*;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::Arc;
use tarn_dev::{CrashRecorder, CutMode, Device};
use tarn_obj::*;

const REC: u32 = 7;
const OBJSETS: usize = 3;
const THREADS: usize = 3;
const ENTRY: u64 = 16;

/// Record payload: thread, object set index, counter, a random tag.
fn payload(thread: usize, k: usize, counter: u32, tag: u64) -> [u8; 16] {
    let mut p = [0u8; 16];
    p[0] = thread as u8 + 1;
    p[1] = k as u8;
    p[2..6].copy_from_slice(&counter.to_le_bytes());
    p[8..16].copy_from_slice(&tag.to_le_bytes());
    p
}

fn parse(p: &[u8]) -> (usize, usize, u32) {
    (p[0] as usize - 1, p[1] as usize, u32::from_le_bytes(p[2..6].try_into().unwrap()))
}

/// The object of thread `t` in an object set: record effects at counter * 16.
fn effect_object(t: usize) -> ObjectId {
    ObjectId(100 + t as u64)
}

#[derive(Clone, Debug)]
struct Appended {
    k: usize,
    seq: u64,
    txg: Txg,
    payload: [u8; 16],
}

struct Workload {
    osids: Vec<ObjsetId>,
    appended: Vec<Appended>,
    /// (event count when the commit returned, object set, seq)
    acked: Vec<(u64, usize, u64)>,
}

fn setup_objsets(pool: &ObjPool) -> Vec<ObjsetId> {
    let osids: Vec<ObjsetId> = (0..OBJSETS)
        .map(|_| {
            let tx = pool.begin();
            pool.create_objset(&tx).unwrap()
        })
        .collect();
    pool.sync().unwrap();
    for id in &osids {
        let os = pool.open_objset(*id).unwrap();
        let tx = pool.begin();
        for t in 0..THREADS {
            os.create_with_id(&tx, effect_object(t), ObjType(20), 4096, &[0; BONUS_LEN]).unwrap();
        }
        drop(tx);
    }
    pool.sync().unwrap();
    osids
}

fn run_workload(pool: &Arc<ObjPool>, osids: Vec<ObjsetId>, rec: &Arc<CrashRecorder>, seed: u64, per_thread: usize) -> Workload {
    let sets: Vec<Arc<ObjectSet>> = osids.iter().map(|id| Arc::new(pool.open_objset(*id).unwrap())).collect();
    let appended = Mutex::new(Vec::new());
    let acked = Mutex::new(Vec::new());
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            let (sets, appended, acked) = (&sets, &appended, &acked);
            let pool = pool.clone();
            sc.spawn(move || {
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ ((t as u64 + 1) * 0x9e37_79b9));
                for c in 0..per_thread as u32 {
                    let k = rng.gen_range(0..OBJSETS);
                    let os = &sets[k];
                    let p = payload(t, k, c, rng.gen());
                    let tx = pool.begin();
                    let seq = os.log_append(&tx, REC, &p).unwrap();
                    os.write(&tx, effect_object(t), c as u64 * ENTRY, &p).unwrap();
                    appended.lock().push(Appended { k, seq, txg: tx.txg(), payload: p });
                    drop(tx);
                    if rng.gen_bool(0.5) {
                        os.log_commit(seq).unwrap();
                        acked.lock().push((rec.event_count(), k, seq));
                    }
                    if rng.gen_bool(0.02) {
                        pool.sync().unwrap();
                    }
                }
            });
        }
    });
    Workload { osids, appended: appended.into_inner(), acked: acked.into_inner() }
}

/// Replays every object set of `w` in `pool`, checking what each record
/// is; returns the replayed (object set, seq) pairs.
fn replay_and_verify(pool: &ObjPool, w: &Workload, what: &str) -> Vec<(usize, u64)> {
    let synced = pool.last_synced_txg();
    let by_seq: HashMap<(usize, u64), &Appended> = w.appended.iter().map(|a| ((a.k, a.seq), a)).collect();
    let mut replayed = Vec::new();
    for (k, id) in w.osids.iter().enumerate() {
        let os = pool.open_objset(*id).unwrap();
        let mut last = 0u64;
        os.log_replay(&mut |tx, r| {
            let a = by_seq.get(&(k, r.seq)).unwrap_or_else(|| panic!("{what}: objset {k} replayed seq {} that was never appended", r.seq));
            assert_eq!(r.payload, a.payload, "{what}: objset {k} seq {} payload differs from what was appended", r.seq);
            assert_eq!(r.txg, a.txg, "{what}: record txg");
            assert!(r.txg > synced, "{what}: objset {k} seq {} of txg {} replayed though txg {synced} is on disk", r.seq, r.txg);
            assert!(r.seq > last, "{what}: objset {k} replayed seq {} after {last}", r.seq);
            last = r.seq;
            let (t, kk, c) = parse(&r.payload);
            assert_eq!(kk, k);
            os.write(tx, effect_object(t), c as u64 * ENTRY, &r.payload)?;
            replayed.push((k, r.seq));
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{what}: replay of objset {k}: {e}"));
        let st = os.log_stats();
        assert!(st.chain_blocks.is_empty() && st.live_blocks == 0, "{what}: log not empty after replay: {st:?}");
    }
    replayed
}

/// Every acknowledged record is present; every present entry was appended.
fn verify_effects(pool: &ObjPool, w: &Workload, cut: u64, what: &str) {
    let by_seq: HashMap<(usize, u64), &Appended> = w.appended.iter().map(|a| ((a.k, a.seq), a)).collect();
    let payloads: std::collections::HashSet<[u8; 16]> = w.appended.iter().map(|a| a.payload).collect();
    for (k, id) in w.osids.iter().enumerate() {
        let os = pool.open_objset(*id).unwrap();
        for t in 0..THREADS {
            let len = os.info(effect_object(t)).unwrap().length;
            let mut data = vec![0u8; len as usize];
            os.read(effect_object(t), 0, &mut data).unwrap();
            for (c, e) in data.chunks_exact(ENTRY as usize).enumerate() {
                if e.iter().any(|&b| b != 0) {
                    let p: [u8; 16] = e.try_into().unwrap();
                    assert!(payloads.contains(&p), "{what}: objset {k} thread {t} entry {c} was never appended");
                    assert_eq!(parse(&p), (t, k, c as u32), "{what}: entry in the wrong place");
                }
            }
            let _ = &data;
        }
        for &(ev, kk, seq) in &w.acked {
            if kk != k || ev > cut {
                continue;
            }
            let a = by_seq[&(k, seq)];
            let (t, _, c) = parse(&a.payload);
            let mut e = [0u8; 16];
            os.read(effect_object(t), c as u64 * ENTRY, &mut e).unwrap();
            assert_eq!(e, a.payload, "{what}: objset {k} seq {seq} (txg {}) was committed before the cut but is lost", a.txg);
        }
    }
}

#[test]
fn power_cuts_keep_committed_records_and_replay_each_once() {
    let run = tarn_testkit::seeded!(1000);
    power_cuts(run.seed, run.count, None);
}

/// The same with the log on a log vdev (SLOG), single and mirrored.
#[test]
fn power_cuts_with_a_log_vdev() {
    let run = tarn_testkit::seeded!(500);
    power_cuts(run.seed, run.count, Some(TopKind::Disk));
    power_cuts(run.seed ^ 0x5106, run.count, Some(TopKind::Mirror));
}

fn power_cuts(seed: u64, count: u64, log: Option<TopKind>) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let rec = CrashRecorder::new();
    let devs: Vec<Arc<dyn Device>> = (0..3).map(|i| rec.device(&format!("z{i}"), 32 << 20) as Arc<dyn Device>).collect();
    let pool = match &log {
        None => create(&devs, TopKind::Raidz { parity: 1 }),
        Some(kind) => {
            let sides = if *kind == TopKind::Mirror { 2 } else { 1 };
            let logs = (0..sides).map(|i| (format!("l{i}"), rec.device(&format!("l{i}"), 32 << 20) as Arc<dyn Device>)).collect();
            let tops = vec![(TopKind::Raidz { parity: 1 }, devs.iter().enumerate().map(|(i, d)| (format!("z{i}"), d.clone())).collect())];
            let cfg = PoolCreate { name: "t".into(), tops, ashift: 12, properties: Default::default(), hostname: "test".into() };
            ObjPool::create_with_logs(cfg, vec![(kind.clone(), logs)]).expect("create pool with a log vdev")
        }
    };
    pool.set_tunables(Tunables { txg_timeout_ms: 3_600_000, ..Default::default() });
    let osids = setup_objsets(&pool);
    let first = rec.event_count();
    let w = run_workload(&pool, osids, &rec, seed, 120);
    if log.is_some() {
        // Every log block the workload left was written to the log vdev.
        for id in &w.osids {
            let stats = pool.open_objset(*id).unwrap().log_stats();
            assert!(stats.chain_blocks.iter().all(|bp| bp.dvas().iter().all(|d| d.vdev == 1)), "{log:?}: {stats:?}");
        }
    }
    drop(pool);
    let total = rec.event_count();
    let committed = w.acked.len();
    let mut cuts: Vec<u64> = (0..count).map(|_| rng.gen_range(first..=total)).collect();
    cuts.sort();
    let mut replayed_total = 0;
    for (i, &cut) in cuts.iter().enumerate() {
        let mode = match i % 3 {
            0 => CutMode::DropUnflushed,
            1 => CutMode::TearLastWrite,
            _ => CutMode::RandomSubset(seed ^ cut),
        };
        let what = format!("cut {cut} ({mode:?}), seed {seed:#x}, log vdev {log:?}");
        let images: Vec<Arc<dyn Device>> = rec.image_at(cut, mode).into_iter().map(|d| d as Arc<dyn Device>).collect();
        let pool = import(images, false).unwrap_or_else(|e| panic!("{what}: import: {e}"));
        replayed_total += replay_and_verify(&pool, &w, &what).len();
        let report = pool.check();
        assert!(report.ok(), "{what}: {report:?}");
        verify_effects(&pool, &w, cut, &what);
    }
    eprintln!("{count} cuts over {total} events; {committed} commits of {} records; {replayed_total} records replayed", w.appended.len());
    assert!(replayed_total > 0, "no cut left anything to replay: the test proves nothing");
}

#[test]
fn power_cut_during_replay_resumes_without_applying_twice() {
    let run = tarn_testkit::seeded!(200);
    let (seed, count) = (run.seed, run.count);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    // A crashed pool with committed records in one object set's log.
    let mem = mem_devs(2, 32 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Mirror);
    pool.set_tunables(Tunables { txg_timeout_ms: 3_600_000, ..Default::default() });
    let id = {
        let tx = pool.begin();
        pool.create_objset(&tx).unwrap()
    };
    pool.sync().unwrap();
    let os = pool.open_objset(id).unwrap();
    let applied = ObjectId(100);
    {
        let tx = pool.begin();
        os.create_with_id(&tx, applied, ObjType(20), 4096, &[0; BONUS_LEN]).unwrap();
    }
    pool.sync().unwrap();
    let n = 60u64;
    for i in 0..n {
        let tx = pool.begin();
        let seq = os.log_append(&tx, REC, &i.to_le_bytes()).unwrap();
        drop(tx);
        os.log_commit(seq).unwrap();
    }
    drop(os);
    drop(pool);
    // The crashed image onto recorded devices.
    let rec = CrashRecorder::new();
    let devs: Vec<Arc<dyn Device>> = (0..2).map(|i| rec.device(&format!("r{i}"), 32 << 20) as Arc<dyn Device>).collect();
    for (m, d) in mem.iter().zip(&devs) {
        m.copy_to(d.as_ref()).unwrap();
    }
    let start = rec.event_count();
    // Replay, each record appending its payload to `applied` (not idempotent:
    // a record applied twice shows up twice).
    // (Word 0 of `applied` counts the entries after it.)
    // The replay stops (its callback fails) every `step` records and the
    // test syncs a txg before calling it again: a replay spread over txgs,
    // so cuts land inside it. `step` 0: no stops.
    let replay = |pool: &ObjPool, step: u64| {
        let os = pool.open_objset(id).unwrap();
        let count = |os: &ObjectSet| {
            let mut c = [0u8; 8];
            os.read(applied, 0, &mut c).unwrap();
            u64::from_le_bytes(c)
        };
        let before = count(&os);
        let mut stops = 0;
        loop {
            let mut done_here = 0;
            let r = os.log_replay(&mut |tx, r| {
                if step > 0 && done_here == step {
                    return Err(ObjError::Invalid("pause".into()));
                }
                let c = count(&os);
                os.write(tx, applied, 8 + c * 8, &r.payload)?;
                os.write(tx, applied, 0, &(c + 1).to_le_bytes())?;
                done_here += 1;
                Ok(())
            });
            match r {
                Ok(_) => break,
                Err(ObjError::Invalid(m)) if m == "pause" => {
                    stops += 1;
                    pool.sync().unwrap();
                }
                Err(e) => panic!("replay: {e}"),
            }
        }
        let c = count(&os);
        let mut data = vec![0u8; c as usize * 8];
        os.read(applied, 8, &mut data).unwrap();
        (before, stops, data.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect::<Vec<u64>>())
    };
    {
        let pool = import(devs.clone(), false).unwrap();
        let (_, stops, first_replay) = replay(&pool, 7);
        // The record of the txg that opened the chain is retired by it.
        assert_eq!(first_replay, (1..n).collect::<Vec<u64>>());
        assert_eq!(stops, (n - 1) / 7, "the replay stopped and resumed in this process too");
        drop(pool);
    }
    let total = rec.event_count();
    let mut cuts: Vec<u64> = (0..count).map(|_| rng.gen_range(start..=total)).collect();
    cuts.sort();
    let mut partial = 0;
    // Cuts after which some records were applied and the rest still were not.
    let mut resumed = 0;
    for (i, &cut) in cuts.iter().enumerate() {
        let mode = if i % 2 == 0 { CutMode::DropUnflushed } else { CutMode::RandomSubset(seed ^ cut) };
        let what = format!("cut {cut} ({mode:?}) during replay, seed {seed:#x}");
        let images: Vec<Arc<dyn Device>> = rec.image_at(cut, mode).into_iter().map(|d| d as Arc<dyn Device>).collect();
        let pool = import(images, false).unwrap_or_else(|e| panic!("{what}: import: {e}"));
        let (before, _, got) = replay(&pool, 0);
        if before > 0 && before < got.len() as u64 {
            resumed += 1;
        }
        assert!(got.len() as u64 <= n, "{what}: {} records applied for {n} appended: {got:?}", got.len());
        let expected: Vec<u64> = (n - got.len() as u64..n).collect();
        assert_eq!(got, expected, "{what}: every record applied exactly once, in order");
        assert!(got.len() as u64 >= n - 1, "{what}: records lost");
        let report = pool.check();
        assert!(report.ok(), "{what}: {report:?}");
        let st = pool.open_objset(id).unwrap().log_stats();
        assert!(st.chain_blocks.is_empty(), "{what}: {st:?}");
        drop(pool);
        partial += 1;
    }
    eprintln!("{partial} cuts during replay checked, {resumed} resumed a replay half done");
    assert!(resumed > 0, "no cut landed inside the replay");
}
