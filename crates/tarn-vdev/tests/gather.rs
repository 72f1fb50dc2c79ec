//! Write gathering (gather.rs) seen from a top-level vdev: between
//! `gather_writes` and `flush` the devices get nothing, reads still see
//! the new bytes, the flush writes adjacent blocks as runs, and a device
//! that fails a gathered write has the txg in its DTL and fails the flush
//! as a failed write would.

use std::sync::Arc;

use tarn_dev::{Device, FaultDevice, MemDevice};
use tarn_vdev::*;

const DEV_SIZE: u64 = 16 << 20;

fn raidz1(n: usize) -> (TopVdev, Vec<Arc<FaultDevice>>) {
    let faults: Vec<Arc<FaultDevice>> = (0..n).map(|i| FaultDevice::new(MemDevice::new(&format!("d{i}"), DEV_SIZE))).collect();
    let kind = TopKind::Raidz { parity: 1 };
    let asize = TopVdev::compute_asize(&kind, 12, &vec![DEV_SIZE; n]).unwrap();
    let cfg = TopConfig {
        class: Default::default(),
        id: 0,
        guid: 1,
        kind,
        ashift: 12,
        asize,
        children: (0..n).map(|i| LeafConfig::new(10 + i as u64, format!("d{i}"))).collect(),
    };
    let devs = faults.iter().map(|f| Some(f.clone() as Arc<dyn Device>)).collect();
    (TopVdev::new(cfg, devs).unwrap(), faults)
}

fn block(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 31 + j * 7 % 251) as u8).collect()
}

/// Writes `count` blocks of 48 KiB one after another; returns (offset, data).
fn write_blocks(top: &TopVdev, count: u64, txg: u64) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    for i in 0..count {
        let data = block(i, 48 << 10);
        top.write(at, &data, txg).unwrap();
        out.push((at, data.clone()));
        at += top.alloc_size(data.len() as u64);
    }
    out
}

fn write_ops(top: &TopVdev) -> u64 {
    top.leaves().iter().map(|l| l.status().io.write_ops).sum()
}

#[test]
fn gathered_writes_are_read_back_and_go_out_as_runs_at_the_flush() {
    let (top, faults) = raidz1(4);
    top.gather_writes();
    let blocks = write_blocks(&top, 40, 7);
    assert_eq!(faults.iter().map(|f| f.writes()).sum::<u64>(), 0, "nothing reached a device before the flush");
    assert_eq!(write_ops(&top), 0);
    for (at, data) in &blocks {
        let got = top.read(*at, data.len() as u64, 7, &|_| true).unwrap();
        assert_eq!(&got.data, data, "a gathered block reads back");
    }
    // The reads wrote out what they overlapped; write the rest and count.
    let before = write_ops(&top);
    let more = {
        let base = blocks.last().map(|(a, d)| a + top.alloc_size(d.len() as u64)).unwrap();
        top.gather_writes();
        let mut out = Vec::new();
        let mut at = base;
        for i in 0..40u64 {
            let data = block(100 + i, 48 << 10);
            top.write(at, &data, 8).unwrap();
            out.push((at, data.clone()));
            at += top.alloc_size(data.len() as u64);
        }
        out
    };
    top.flush(8).unwrap();
    let ops = write_ops(&top) - before;
    // 40 blocks of 4 columns each, 2 MiB in all over 4 devices: runs of
    // up to a MiB make a handful of requests per device, not 160.
    assert!(ops <= 16, "{ops} write requests for 40 adjacent blocks");
    assert!(faults.iter().all(|f| f.writes() > 0));
    for (at, data) in blocks.iter().chain(more.iter()) {
        let got = top.read(*at, data.len() as u64, 8, &|_| true).unwrap();
        assert_eq!(&got.data, data);
    }
    // After the flush, writes go straight to the devices again.
    let w = faults[0].writes() + faults[1].writes() + faults[2].writes() + faults[3].writes();
    top.write(64 << 20 >> 3, &block(999, 16 << 10), 9).unwrap();
    assert!(faults.iter().map(|f| f.writes()).sum::<u64>() > w);
}

#[test]
fn a_failed_gathered_write_lands_in_the_dtl_and_fails_the_leafs_flush() {
    let (top, faults) = raidz1(4);
    top.gather_writes();
    let blocks = write_blocks(&top, 8, 5);
    faults[2].set_fail_writes(true);
    // One device of a raidz1 lost its writes: the txg is still whole.
    top.flush(5).unwrap();
    let leaf = &top.leaves()[2];
    assert!(leaf.dtl().contains(5), "the failed device missed txg 5");
    assert!(leaf.status().write_errors > 0);
    faults[2].set_fail_writes(false);
    for (at, data) in &blocks {
        let got = top.read(*at, data.len() as u64, 5, &|d| d == &data[..]).unwrap();
        assert_eq!(&got.data, data);
    }
    // Two devices losing a txg's gathered writes is more than raidz1 bears.
    top.gather_writes();
    let base = 8 << 20;
    top.write(base, &block(1, 48 << 10), 6).unwrap();
    faults[0].set_fail_writes(true);
    faults[1].set_fail_writes(true);
    assert!(top.flush(6).is_err());
}
