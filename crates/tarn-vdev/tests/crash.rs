//! Power cuts during label and uberblock updates: at every cut, in every
//! cut mode, the durable image has a readable label (once the first label
//! generation was flushed) and its newest valid uberblock is at least the
//! last one whose flush completed — never a torn or invented one.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use tarn_dev::{CrashRecorder, CutMode, Device};
use tarn_vdev::*;

const SIZE: u64 = 16 << 20;

fn label(leaf_guid: u64) -> Label {
    Label {
        config: PoolConfig {
            name: "tank".into(),
            pool_guid: 5,
            version: 1,
            state: PoolState::Active,
            hostname: "h".into(),
            create_txg: 1,
            top: vec![],
            properties: BTreeMap::new(),
            spares: vec![],
            cache: vec![],
            generation: 0,
            features: Default::default(),
        },
        top_id: 0,
        leaf_guid,
    }
}

fn ub(txg: u64) -> Uberblock {
    Uberblock { txg, timestamp_ns: txg, pool_guid: 5, payload: txg.to_le_bytes().repeat((txg % 100) as usize) }
}

#[test]
fn every_cut_of_label_and_uberblock_updates_is_consistent() {
    let (_rng, txgs, guard) = seeded_run!(300);
    let rec = CrashRecorder::new();
    let crash: Vec<_> = (0..2).map(|i| rec.device(&format!("d{i}"), SIZE)).collect();
    let devs: Vec<Arc<dyn Device>> = crash.iter().map(|d| d.clone() as Arc<dyn Device>).collect();
    for (i, d) in devs.iter().enumerate() {
        write_label(d.as_ref(), &label(i as u64)).unwrap();
    }
    let label_done = rec.event_count();
    // (first event of the txg's writes, txg)
    let mut started = vec![];
    for txg in 1..=txgs {
        started.push((rec.event_count(), txg));
        write_uberblock(&devs, &ub(txg)).unwrap();
    }
    let total = rec.event_count();
    let flushes = rec.flush_events();
    let mut in_image_at = std::time::Duration::ZERO;
    let mut images = 0u64;
    for cut in 0..=total {
        let mode = match cut % 3 {
            0 => CutMode::DropUnflushed,
            1 => CutMode::TearLastWrite,
            _ => CutMode::RandomSubset(guard.seed ^ cut),
        };
        let t = Instant::now();
        let image = rec.image_at(cut, mode);
        in_image_at += t.elapsed();
        images += 1;
        // Newest txg whose round (write both devices, flush both) ended
        // before the cut.
        let durable_txg = started
            .iter()
            .zip(started.iter().skip(1).map(|s| s.0).chain(std::iter::once(total)))
            .filter(|(_, round_end)| *round_end <= cut)
            .map(|((_, txg), _)| *txg)
            .max();
        let written_txg = started.iter().filter(|(s, _)| *s < cut).map(|(_, t)| *t).max();
        for (i, dev) in image.iter().enumerate() {
            let first_label_flush = flushes.iter().filter(|&&f| f < label_done).nth(i * 2).copied();
            match read_label(dev.as_ref()) {
                Ok(l) => assert_eq!(l, label(i as u64)),
                Err(e) => assert!(first_label_flush.is_none_or(|f| cut <= f), "cut {cut}: dev {i}: {e}"),
            }
            let ubs = read_uberblocks(dev.as_ref());
            for u in &ubs {
                assert_eq!(*u, ub(u.txg), "cut {cut}: damaged uberblock accepted");
                assert!(Some(u.txg) <= written_txg, "cut {cut}: uberblock from the future");
            }
            let newest = ubs.first().map(|u| u.txg);
            assert!(newest >= durable_txg, "cut {cut} dev {i}: newest {newest:?} < durable {durable_txg:?}");
        }
    }
    eprintln!(
        "{images} images of 2 devices ({total} events, {} KiB written): {:?} per image_at",
        (txgs * 2 * 4 * 1024 + 2 * 4 * 120 * 1024) / 1024,
        in_image_at / images as u32
    );
}
