//! Labels and the uberblock ring: round trips, damage, garbage.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::RngCore;
use tarn_dev::{Device, FaultDevice, MemDevice};
use tarn_vdev::*;

const SIZE: u64 = 64 << 20;
const L: u64 = 256 << 10;

fn label() -> Label {
    let mut properties = BTreeMap::new();
    properties.insert("compression".into(), "lz4".into());
    Label {
        config: PoolConfig {
            name: "tank".into(),
            pool_guid: 0x1234,
            version: 1,
            state: PoolState::Active,
            hostname: "nas".into(),
            create_txg: 4,
            top: vec![TopConfig {
                class: Default::default(), id: 0,
                guid: 77,
                kind: TopKind::Raidz { parity: 2 },
                ashift: 12,
                asize: 1 << 30,
                children: (0..4).map(|i| LeafConfig::new(100 + i, format!("/dev/d{i}"))).collect(),
            }],
            properties,
            spares: vec![],
            cache: vec![],
            generation: 0,
            features: Default::default(),
        },
        top_id: 0,
        leaf_guid: 101,
    }
}

fn msg<T: std::fmt::Debug>(r: Result<T>) -> String {
    r.expect_err("expected an error").to_string()
}

#[test]
fn label_round_trip_and_survives_damaged_copies() {
    let dev = MemDevice::new("d0", SIZE);
    write_label(&*dev, &label()).unwrap();
    assert_eq!(read_label(&*dev).unwrap(), label());
    // Each of L0, L1, L2 destroyed in turn: a later copy still reads.
    let fault = FaultDevice::new(dev.clone());
    for (i, off) in [0, L, SIZE - 2 * L].into_iter().enumerate() {
        fault.corrupt(off + 8192 + 100, 64, i as u64).unwrap();
        assert_eq!(read_label(&*dev).unwrap(), label(), "after damaging copy {i}");
    }
    fault.corrupt(SIZE - L + 8192 + 100, 64, 9).unwrap();
    assert!(msg(read_label(&*dev)).contains("label checksum mismatch"));
    clear_labels(&*dev).unwrap();
    assert!(msg(read_label(&*dev)).contains("no tarn label found"));
}

/// A pool without features keeps writing version-1 labels (older binaries
/// read them); one with features writes version 2, which older binaries
/// refuse, and names a feature this binary does not know.
#[test]
fn labels_with_features_are_version_2_and_name_unknown_ones() {
    let dev = MemDevice::new("d0", SIZE);
    let version = |dev: &MemDevice| {
        let mut v = [0u8; 4];
        dev.read_at(&mut v, 8192 + 8).unwrap();
        u32::from_le_bytes(v)
    };
    write_label(&*dev, &label()).unwrap();
    assert_eq!(version(&dev), 1);
    assert_eq!(read_label(&*dev).unwrap().config.unknown_feature(), None);
    let mut with = label();
    with.config.features.insert(FEATURE_ENCRYPTION.to_string());
    write_label(&*dev, &with).unwrap();
    assert_eq!(version(&dev), 2);
    let read = read_label(&*dev).unwrap();
    assert_eq!(read, with);
    assert_eq!(read.config.unknown_feature(), None);
    with.config.features.insert("zstd_dict".to_string());
    write_label(&*dev, &with).unwrap();
    assert_eq!(read_label(&*dev).unwrap().config.unknown_feature(), Some("zstd_dict"));
}

#[test]
fn empty_zero_garbage_truncated_devices_give_clear_errors() {
    let (mut rng, count, _guard) = seeded_run!(8);
    let zero = MemDevice::new("zero", SIZE);
    assert!(matches!(read_label(&*zero), Err(VdevError::NoLabel { .. })));
    assert!(read_uberblocks(&*zero).is_empty());
    for size in [0u64, 1, 100, 4096, 300 << 10] {
        let tiny = MemDevice::new("tiny", size);
        assert!(msg(read_label(&*tiny)).contains("no tarn label found"), "size {size}");
        assert!(read_uberblocks(&*tiny).is_empty());
        assert!(write_label(&*tiny, &label()).is_err());
    }
    for round in 0..count {
        let garbage = MemDevice::new("garbage", 8 << 20);
        let mut bytes = vec![0u8; 8 << 20];
        rng.fill_bytes(&mut bytes);
        if round % 2 == 1 {
            // garbage behind valid magics
            for off in [0, L, (8 << 20) - 2 * L, (8 << 20) - L] {
                bytes[(off + 8192) as usize..(off + 8200) as usize].copy_from_slice(b"TARNLBL1");
                for slot in 0..128 {
                    let at = (off + 131072 + slot * 1024) as usize;
                    bytes[at..at + 8].copy_from_slice(b"TARNUBR1");
                }
            }
        }
        garbage.write_at(&bytes, 0).unwrap();
        assert!(read_label(&*garbage).is_err());
        assert!(read_uberblocks(&*garbage).is_empty());
    }
    // Truncated: only the front of a labelled device survives.
    let dev = MemDevice::new("d0", SIZE);
    write_label(&*dev, &label()).unwrap();
    for keep in [L / 2, L + 100, 2 * L, 3 << 20] {
        let cut = MemDevice::new("cut", keep);
        let mut head = vec![0u8; keep as usize];
        dev.read_at(&mut head, 0).unwrap();
        cut.write_at(&head, 0).unwrap();
        let r = read_label(&*cut);
        if keep >= L {
            assert_eq!(r.unwrap(), label(), "keep {keep}");
        } else {
            assert!(msg(r).contains("no tarn label found"));
        }
    }
}

#[test]
fn unsupported_version_and_bad_json_are_reported() {
    let dev = MemDevice::new("d0", SIZE);
    write_label(&*dev, &label()).unwrap();
    for off in [0, L, SIZE - 2 * L, SIZE - L] {
        dev.write_at(&7u32.to_le_bytes(), off + 8192 + 8).unwrap();
    }
    assert!(msg(read_label(&*dev)).contains("unsupported label version 7"));
    // Valid header and checksum around something that is not a label.
    let other = MemDevice::new("d1", SIZE);
    let payload = b"{\"not\":\"a label\"}";
    let mut area = Vec::new();
    area.extend_from_slice(b"TARNLBL1");
    area.extend_from_slice(&1u32.to_le_bytes());
    area.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    area.extend_from_slice(blake3::hash(payload).as_bytes());
    area.extend_from_slice(payload);
    other.write_at(&area, 8192).unwrap();
    let e = msg(read_label(&*other));
    assert!(e.contains("not a valid label"), "{e}");
}

fn ub(txg: u64) -> Uberblock {
    Uberblock { txg, timestamp_ns: txg * 1000, pool_guid: 0x1234, payload: vec![txg as u8; (txg % 900) as usize] }
}

#[test]
fn uberblock_ring_newest_first_and_torn_slot_ignored() {
    let devs: Vec<Arc<dyn Device>> = (0..2).map(|i| MemDevice::new(&format!("d{i}"), SIZE) as Arc<dyn Device>).collect();
    for txg in 1..=200 {
        let report = write_uberblock(&devs, &ub(txg)).unwrap();
        assert_eq!((report.written, report.failed.len()), (2, 0));
    }
    let ubs = read_uberblocks(&*devs[0]);
    assert_eq!(ubs.len(), 128);
    assert_eq!(ubs[0], ub(200));
    assert_eq!(ubs.iter().map(|u| u.txg).collect::<Vec<_>>(), (73..=200).rev().collect::<Vec<_>>());

    // Tear the newest slot (txg 200, slot 72) in every copy: 199 is newest.
    let slot = 131072 + 72 * 1024;
    for off in [0, L, SIZE - 2 * L, SIZE - L] {
        devs[0].write_at(&[0xff; 300], off + slot + 500).unwrap();
    }
    assert_eq!(read_uberblocks(&*devs[0])[0].txg, 199);
    // Torn in three copies only: the fourth still provides it.
    let ubs = read_uberblocks(&*devs[1]);
    for off in [0, L, SIZE - 2 * L] {
        devs[1].write_at(&[0; 512], off + slot).unwrap();
    }
    assert_eq!(read_uberblocks(&*devs[1]), ubs);

    let too_big = Uberblock { payload: vec![0; UBERBLOCK_PAYLOAD_MAX + 1], ..ub(1) };
    assert!(matches!(write_uberblock(&devs, &too_big), Err(VdevError::Invalid(_))));
}

#[test]
fn uberblock_write_tolerates_failed_devices() {
    let faults: Vec<Arc<FaultDevice>> = (0..3).map(|i| FaultDevice::new(MemDevice::new(&format!("d{i}"), SIZE))).collect();
    let devs: Vec<Arc<dyn Device>> = faults.iter().map(|f| f.clone() as Arc<dyn Device>).collect();
    faults[1].set_gone(true);
    let report = write_uberblock(&devs, &ub(5)).unwrap();
    assert_eq!(report.written, 2);
    assert_eq!(report.failed.len(), 1);
    assert_eq!(report.failed[0].0, "d1");
    faults[0].set_gone(true);
    faults[2].fail_after(2); // fails mid-way through its four copies
    assert!(write_uberblock(&devs, &ub(6)).is_err());
    faults[0].set_gone(false);
    assert_eq!(read_uberblocks(&*devs[0])[0].txg, 5);
}
