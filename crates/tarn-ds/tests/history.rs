//! Pool history (`zpool history`) on memory devices: records kept in order
//! across export/import, the pool's first records never dropped, the
//! oldest others dropped when the ring is full (records of random sizes,
//! `TARN_SEED` / `TARN_COUNT`), and a damaged header refused cleanly.

mod common;

use rand::{Rng, SeedableRng};
use tarn_ds::history::HistoryRecord;

fn command(i: usize, pad: usize) -> HistoryRecord {
    HistoryRecord {
        time: 1_800_000_000 + i as u64,
        command: Some(format!("tarn snapshot tank@s{i} {}", "x".repeat(pad))),
        who: Some(0),
        user: Some("root".into()),
        host: Some("testhost".into()),
        zone: Some("linux".into()),
        ..Default::default()
    }
}

fn internal(i: usize) -> HistoryRecord {
    HistoryRecord {
        time: 1_800_000_000 + i as u64,
        txg: Some(i as u64),
        event: Some("snapshot".into()),
        dataset: Some(format!("tank@s{i}")),
        dsid: Some(7),
        host: Some("testhost".into()),
        ..Default::default()
    }
}

#[test]
fn history_survives_export_import_in_order() {
    let devs = common::devices("hist", 256 << 20);
    let pool = common::create(&devs, "/mnt/tank");
    assert!(pool.history().unwrap().records.is_empty(), "no history object yet");
    let create = vec![internal(0), command(0, 0)];
    pool.history_append(&create, true).unwrap();
    let mut expected = create.clone();
    for i in 1..50 {
        let batch = vec![internal(i), command(i, i % 7)];
        pool.history_append(&batch, false).unwrap();
        expected.extend(batch);
    }
    assert_eq!(pool.history().unwrap().records, expected);
    let pool = common::reimport(pool, &devs);
    let history = pool.history().unwrap();
    assert_eq!(history.records, expected);
    assert_eq!(history.dropped, 0);
    // Appending after the import continues the same history.
    pool.history_append(&[command(99, 0)], false).unwrap();
    assert_eq!(pool.history().unwrap().records.last(), Some(&command(99, 0)));
    let report = pool.obj().check();
    assert!(report.ok(), "{report:?}");
}

#[test]
fn full_ring_drops_the_oldest_but_keeps_the_first_records() {
    let run = tarn_testkit::seeded!(3000);
    let (seed, count) = (run.seed, run.count as usize);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let devs = common::devices("ring", 256 << 20);
    let pool = common::create(&devs, "/mnt/tank");
    let capacity = 16 << 10;
    pool.history_init(capacity).unwrap();
    let create = vec![internal(0), command(0, 3)];
    pool.history_append(&create, true).unwrap();
    let mut appended: Vec<HistoryRecord> = Vec::new();
    for i in 1..count {
        let record = if rng.gen_bool(0.5) { command(i, rng.gen_range(0..700)) } else { internal(i) };
        pool.history_append(std::slice::from_ref(&record), false).unwrap();
        appended.push(record);
        if i % 500 == 0 {
            let history = pool.history().unwrap();
            check_ring(&history, &create, &appended, capacity, seed);
        }
    }
    let pool = common::reimport(pool, &devs);
    let history = pool.history().unwrap();
    check_ring(&history, &create, &appended, capacity, seed);
    assert!(history.dropped > 0, "TARN_SEED={seed}: the ring never wrapped");
    // A record bigger than half the ring is refused and changes nothing.
    let before = pool.history().unwrap();
    assert!(pool.history_append(&[command(1, 10_000)], false).is_err());
    assert_eq!(pool.history().unwrap(), before);
}

/// The first records, then the newest appended ones: a suffix of
/// `appended`, as long as fits, with `dropped` accounting for the rest.
fn check_ring(
    history: &tarn_ds::history::History,
    create: &[HistoryRecord],
    appended: &[HistoryRecord],
    capacity: u64,
    seed: u64,
) {
    let what = format!("TARN_SEED={seed}");
    assert_eq!(&history.records[..create.len()], create, "{what}");
    let kept = &history.records[create.len()..];
    assert!(!kept.is_empty(), "{what}");
    assert_eq!(kept, &appended[appended.len() - kept.len()..], "{what}: not the newest records, in order");
    assert_eq!(history.dropped as usize, appended.len() - kept.len(), "{what}");
    let bytes: usize = history.records.iter().map(|r| serde_json::to_vec(r).unwrap().len() + 4).sum();
    assert!(bytes as u64 <= capacity, "{what}: {bytes} bytes kept in a history of {capacity}");
    // The ring is not dropping more than it must: the record dropped last
    // would not have fit beside the ones kept.
    if kept.len() < appended.len() {
        let previous = &appended[appended.len() - kept.len() - 1];
        let previous_bytes = serde_json::to_vec(previous).unwrap().len() + 4;
        assert!(bytes + previous_bytes > capacity as usize, "{what}: dropped a record that fitted");
    }
}
