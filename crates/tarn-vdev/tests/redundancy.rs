//! Mirror and raidz: damage up to the redundancy and every read still
//! returns the original bytes, counts the damage and repairs it; damage
//! beyond the redundancy is `Unrecoverable`, never wrong data.

#[macro_use]
mod common;

use std::sync::Arc;

use rand::seq::SliceRandom;
use rand::{Rng, RngCore};
use rand_chacha::ChaCha8Rng;
use tarn_dev::{Device, FaultDevice, MemDevice};
use tarn_vdev::*;

const DEV_SIZE: u64 = 12 << 20;

struct Rig {
    top: TopVdev,
    faults: Vec<Arc<FaultDevice>>,
    blocks: Vec<Block>,
    /// Children a block may lose: parity, or n - 1 for a mirror.
    redundancy: usize,
}

struct Block {
    offset: u64,
    data: Vec<u8>,
    /// Children holding this block's columns (parity columns first).
    children: Vec<usize>,
    /// How many of `children` hold parity (raidz) — 0 for mirrors.
    parity: usize,
    /// Child data-region byte range that only this block uses.
    child_range: (u64, u64),
}

impl Block {
    fn holds_data(&self, child: usize) -> bool {
        self.children.get(self.parity..).is_some_and(|d| d.contains(&child))
    }
}

/// Whether damage to any of `children` is visible to plain reads (raidz
/// reads parity only when the data columns fail).
fn reads_see(rig: &Rig, children: &[usize]) -> bool {
    rig.blocks.iter().any(|b| children.iter().any(|&c| b.holds_data(c)))
}

fn kind_name(kind: &TopKind, n: usize) -> String {
    format!("{kind:?}x{n}")
}

fn rig(kind: TopKind, n: usize, ashift: u8) -> Rig {
    let faults: Vec<Arc<FaultDevice>> =
        (0..n).map(|i| FaultDevice::new(MemDevice::new(&format!("d{i}"), DEV_SIZE))).collect();
    let sizes = vec![DEV_SIZE; n];
    let asize = TopVdev::compute_asize(&kind, ashift, &sizes).unwrap();
    let cfg = TopConfig {
        class: Default::default(), id: 0,
        guid: 1,
        kind: kind.clone(),
        ashift,
        asize,
        children: (0..n).map(|i| LeafConfig::new(10 + i as u64, format!("d{i}"))).collect(),
    };
    let devs = faults.iter().map(|f| Some(f.clone() as Arc<dyn Device>)).collect();
    let top = TopVdev::new(cfg, devs).unwrap();
    let redundancy = match kind {
        TopKind::Disk | TopKind::Hole => 0,
        TopKind::Mirror => n - 1,
        TopKind::Raidz { parity } => parity as usize,
    };
    Rig { top, faults, blocks: vec![], redundancy }
}

/// Writes `count` random blocks. Raidz blocks start on a row boundary and
/// never share a row, so damage to one block's rows touches no other block.
fn fill(rig: &mut Rig, rng: &mut ChaCha8Rng, count: u64) {
    let n = rig.faults.len() as u64;
    let sector = rig.top.sector();
    let (parity, raidz) = match rig.top.config().kind {
        TopKind::Raidz { parity } => (parity as u64, true),
        _ => (0, false),
    };
    let mut offset = 0u64;
    for i in 0..count {
        let data_cols = if raidz { n - parity } else { 1 };
        let sectors = match i % 4 {
            0 => 1,
            1 => data_cols,
            2 => data_cols + 1,
            _ => rng.gen_range(1..=48),
        };
        let psize = sectors * sector;
        let mut data = vec![0u8; psize as usize];
        rng.fill_bytes(&mut data);
        let alloc = rig.top.alloc_size(psize);
        assert!(alloc >= psize && alloc.is_multiple_of(sector));
        if offset + alloc > rig.top.asize() {
            break;
        }
        rig.top.write(offset, &data, 1).unwrap();
        let (children, child_range, next) = if raidz {
            let rows = sectors.div_ceil(n - parity);
            let cols = if rows == 1 { parity + sectors } else { n };
            let s = offset / sector;
            let first_row = s / n;
            let end_row = (s + alloc / sector).div_ceil(n);
            let range = (first_row * sector, end_row * sector);
            // The next block starts in a fresh row, at a random column.
            let next = (end_row * n + rng.gen_range(0..n)) * sector;
            ((0..cols).map(|c| ((s + c) % n) as usize).collect(), range, next)
        } else {
            ((0..n as usize).collect(), (offset, offset + psize), offset + alloc)
        };
        rig.blocks.push(Block { offset, data, children, parity: parity as usize, child_range });
        offset = next;
    }
    rig.top.flush(1).unwrap();
}

fn verify_for(expected: &[u8]) -> impl Fn(&[u8]) -> bool + Sync {
    let want = *blake3::hash(expected).as_bytes();
    move |got: &[u8]| blake3::hash(got).as_bytes() == &want
}

fn checksum_errors(top: &TopVdev) -> u64 {
    top.leaves().iter().map(|l| l.checksum_errors()).sum()
}
fn read_errors(top: &TopVdev) -> u64 {
    top.leaves().iter().map(|l| l.read_errors()).sum()
}

/// Reads `block` `times` times; each must return the original bytes.
fn read_ok(top: &TopVdev, block: &Block, times: usize, what: &str) -> u64 {
    let mut repaired = 0;
    for _ in 0..times {
        let out = top
            .read(block.offset, block.data.len() as u64, 1, &verify_for(&block.data))
            .unwrap_or_else(|e| panic!("{what}: block at {} unreadable: {e}", block.offset));
        assert!(out.data == block.data, "{what}: wrong data at {}", block.offset);
        repaired += out.repaired_bytes;
    }
    repaired
}

fn scrub_ok(top: &TopVdev, block: &Block, what: &str) -> u64 {
    let out = top
        .scan(block.offset, block.data.len() as u64, 1, &verify_for(&block.data), true)
        .unwrap_or_else(|e| panic!("{what}: scrub of block at {} failed: {e}", block.offset));
    out.repaired_bytes
}

#[derive(Clone, Copy, Debug)]
enum Damage {
    BitFlips,
    Zeroed,
}

fn damage(rig: &Rig, block: &Block, child: usize, how: Damage, seed: u64) {
    let (start, end) = block.child_range;
    let f = &rig.faults[child];
    match how {
        Damage::BitFlips => f.corrupt(DATA_START + start, end - start, seed).unwrap(),
        Damage::Zeroed => f.zero(DATA_START + start, end - start).unwrap(),
    }
}

fn configs() -> Vec<(TopKind, usize)> {
    let mut v = vec![(TopKind::Mirror, 2), (TopKind::Mirror, 3)];
    for p in 1..=3u8 {
        for n in (p as usize + 1)..=8 {
            v.push((TopKind::Raidz { parity: p }, n));
        }
    }
    v
}

fn reads_per_check(rig: &Rig) -> usize {
    match rig.top.config().kind {
        TopKind::Mirror => rig.faults.len(), // rotation visits every child first once
        _ => 1,
    }
}

#[test]
fn damage_within_redundancy_is_repaired() {
    let (mut rng, count, _guard) = seeded_run!(16);
    for (kind, n) in configs() {
        for ashift in [9u8, 12] {
            let mut rig = rig(kind.clone(), n, ashift);
            fill(&mut rig, &mut rng, count);
            let name = format!("{} ashift {ashift}", kind_name(&kind, n));
            let reads = reads_per_check(&rig);
            for block in &rig.blocks {
                let k = rng.gen_range(1..=rig.redundancy);
                let bad: Vec<usize> = block.children.choose_multiple(&mut rng, k).copied().collect();
                let how = if rng.gen_bool(0.5) { Damage::BitFlips } else { Damage::Zeroed };
                for &c in &bad {
                    damage(&rig, block, c, how, rng.next_u64());
                }
                let before = checksum_errors(&rig.top);
                let what = format!("{name}, bad {bad:?} {how:?}");
                let repaired = read_ok(&rig.top, block, reads, &what);
                let found = checksum_errors(&rig.top) - before;
                let bad_data = bad.iter().filter(|&&c| block.holds_data(c)).count() as u64;
                if matches!(kind, TopKind::Mirror) {
                    assert_eq!(found, bad.len() as u64, "{what}");
                } else {
                    assert!(found >= bad_data && found <= bad.len() as u64, "{what}: found {found}");
                }
                assert_eq!(repaired > 0, found > 0, "{what}");
                // Second pass: already repaired.
                let before = checksum_errors(&rig.top);
                assert_eq!(read_ok(&rig.top, block, reads, &what), 0, "{what}: repaired twice");
                assert_eq!(checksum_errors(&rig.top), before, "{what}: damage left behind");
            }
            assert_eq!(read_errors(&rig.top), 0);
        }
    }
}

#[test]
fn whole_children_overwritten_or_failing() {
    let (mut rng, count, _guard) = seeded_run!(16);
    for (kind, n) in configs() {
        let mut rig = rig(kind.clone(), n, 9);
        fill(&mut rig, &mut rng, count);
        let name = kind_name(&kind, n);
        let reads = reads_per_check(&rig);
        let children: Vec<usize> = (0..n).collect();

        // Up to `redundancy` children entirely overwritten with garbage.
        let k = rng.gen_range(1..=rig.redundancy);
        let bad: Vec<usize> = children.choose_multiple(&mut rng, k).copied().collect();
        for &c in &bad {
            let mut junk = vec![0u8; data_region_size(DEV_SIZE) as usize];
            rng.fill_bytes(&mut junk);
            rig.faults[c].inner().write_at(&junk, DATA_START).unwrap();
        }
        let before = checksum_errors(&rig.top);
        for block in &rig.blocks {
            read_ok(&rig.top, block, reads, &format!("{name} overwritten {bad:?}"));
        }
        if reads_see(&rig, &bad) {
            assert!(checksum_errors(&rig.top) > before, "{name}: no checksum errors counted");
        }
        let before = checksum_errors(&rig.top);
        for block in &rig.blocks {
            assert_eq!(read_ok(&rig.top, block, reads, &name), 0);
        }
        assert_eq!(checksum_errors(&rig.top), before, "{name}: overwritten child not repaired");
        // Parity columns are only checked by a scrub: it finds and repairs
        // what plain reads could not see, and a second scrub finds nothing.
        let before = checksum_errors(&rig.top);
        let scrubbed: u64 = rig.blocks.iter().map(|b| scrub_ok(&rig.top, b, &name)).sum();
        assert_eq!(scrubbed > 0, checksum_errors(&rig.top) > before, "{name}");
        let before = checksum_errors(&rig.top);
        for block in &rig.blocks {
            assert_eq!(scrub_ok(&rig.top, block, &name), 0, "{name}: scrub repaired twice");
        }
        assert_eq!(checksum_errors(&rig.top), before, "{name}");

        // Up to `redundancy` children failing every I/O.
        let k = rng.gen_range(1..=rig.redundancy);
        let gone: Vec<usize> = children.choose_multiple(&mut rng, k).copied().collect();
        for &c in &gone {
            rig.faults[c].set_gone(true);
        }
        let before_read = read_errors(&rig.top);
        let before_cksum = checksum_errors(&rig.top);
        for _ in 0..2 {
            for block in &rig.blocks {
                read_ok(&rig.top, block, reads, &format!("{name} gone {gone:?}"));
            }
        }
        // Raidz reads touch parity columns only when needed: with blocks
        // aligned to rows, children 0..p hold parity only.
        if reads_see(&rig, &gone) {
            assert!(read_errors(&rig.top) > before_read, "{name}: no read errors counted");
        }
        for _ in 0..3 {
            rig.top.flush(1).unwrap();
        }
        assert_eq!(checksum_errors(&rig.top), before_cksum, "{name}: I/O errors are not checksum errors");
        let status = rig.top.status();
        assert_eq!(status.state, DevState::Degraded, "{name}: {status:?}");
        for &c in &gone {
            assert_eq!(status.children[c].state, DevState::Removed);
        }
        // Writes still succeed while failures stay within the redundancy.
        let mut data = vec![0u8; 4096];
        rng.fill_bytes(&mut data);
        let last = rig.blocks.last().unwrap();
        let offset = last.offset; // overwrite the last block in place: test only
        rig.top.write(offset, &data, 1).unwrap();
        assert_eq!(rig.top.read(offset, 4096, 1, &verify_for(&data)).unwrap().data, data);
        // One more gone child than the redundancy: writes fail, reads fail cleanly.
        let extra: Vec<usize> = children.iter().filter(|c| !gone.contains(c)).copied().collect();
        if extra.len() + gone.len() > rig.redundancy {
            for &c in extra.iter().take(rig.redundancy + 1 - gone.len()) {
                rig.faults[c].set_gone(true);
            }
            assert!(rig.top.write(offset, &data, 1).is_err(), "{name}");
            let r = rig.top.read(offset, 4096, 1, &verify_for(&data));
            assert!(matches!(r, Err(VdevError::Unrecoverable { .. })), "{name}");
            // A device that is gone is reported REMOVED at its first failure.
            for _ in 0..3 {
                let _ = rig.top.read(offset, 4096, 1, &verify_for(&data));
            }
            assert_eq!(rig.top.state(), DevState::Unavail, "{name}");
        }
        rig.top.clear_errors();
        assert_eq!(read_errors(&rig.top), 0);
    }
}

#[test]
fn damage_beyond_redundancy_is_unrecoverable_not_wrong_data() {
    let (mut rng, count, _guard) = seeded_run!(16);
    for (kind, n) in configs() {
        let mut rig = rig(kind.clone(), n, 9);
        fill(&mut rig, &mut rng, count);
        for block in &rig.blocks {
            let k = rig.redundancy + 1;
            let bad: Vec<usize> = block.children.choose_multiple(&mut rng, k).copied().collect();
            for &c in &bad {
                damage(&rig, block, c, Damage::Zeroed, 0);
            }
            let r = rig.top.read(block.offset, block.data.len() as u64, 1, &verify_for(&block.data));
            match r {
                Err(VdevError::Unrecoverable { offset, .. }) => assert_eq!(offset, block.offset),
                Err(e) => panic!("{}: wrong error {e}", kind_name(&kind, n)),
                Ok(_) => panic!("{}: read succeeded with {bad:?} zeroed", kind_name(&kind, n)),
            }
        }
    }
}

#[test]
fn disk_vdev_and_missing_children() {
    let (mut rng, _count, _guard) = seeded_run!(1);
    let mut disk = rig(TopKind::Disk, 1, 12);
    fill(&mut disk, &mut rng, 8);
    for block in &disk.blocks {
        read_ok(&disk.top, block, 1, "disk");
    }
    assert_eq!(disk.top.status().name, "d0");
    let block = &disk.blocks[0];
    damage(&disk, block, 0, Damage::BitFlips, 1);
    let r = disk.top.read(block.offset, block.data.len() as u64, 1, &verify_for(&block.data));
    assert!(matches!(r, Err(VdevError::Unrecoverable { .. })));
    assert_eq!(disk.top.leaves()[0].checksum_errors(), 1);

    // A raidz2 opened with one child missing is degraded but serves.
    let devs: Vec<Arc<MemDevice>> = (0..5).map(|i| MemDevice::new(&format!("m{i}"), DEV_SIZE)).collect();
    let kind = TopKind::Raidz { parity: 2 };
    let asize = TopVdev::compute_asize(&kind, 9, &[DEV_SIZE; 5]).unwrap();
    let cfg = TopConfig {
        class: Default::default(), id: 3,
        guid: 9,
        kind,
        ashift: 9,
        asize,
        children: (0..5).map(|i| LeafConfig::new(i, format!("m{i}"))).collect(),
    };
    let full = TopVdev::new(cfg.clone(), devs.iter().map(|d| Some(d.clone() as Arc<dyn Device>)).collect()).unwrap();
    let mut data = vec![0u8; 64 << 10];
    rng.fill_bytes(&mut data);
    full.write(8192 * 5, &data, 1).unwrap();
    let partial: Vec<Option<Arc<dyn Device>>> =
        devs.iter().enumerate().map(|(i, d)| (i != 3).then(|| d.clone() as Arc<dyn Device>)).collect();
    let degraded = TopVdev::new(cfg, partial).unwrap();
    assert_eq!(degraded.state(), DevState::Degraded);
    let status = degraded.status();
    assert_eq!(status.name, "raidz2-3");
    assert_eq!(status.children[3].state, DevState::Unavail);
    let json = serde_json::to_string(&status).unwrap();
    assert!(json.contains("\"Unavail\""));
    let out = degraded.read(8192 * 5, 64 << 10, 1, &verify_for(&data)).unwrap();
    assert_eq!(out.data, data);
}

#[test]
fn geometry_validation() {
    let s = DEV_SIZE;
    assert!(matches!(
        TopVdev::compute_asize(&TopKind::Mirror, 12, &[s]),
        Err(VdevError::NotEnoughDevices { need: 2, have: 1, .. })
    ));
    assert!(TopVdev::compute_asize(&TopKind::Raidz { parity: 3 }, 12, &[s; 3]).is_err());
    assert!(TopVdev::compute_asize(&TopKind::Raidz { parity: 4 }, 12, &[s; 8]).is_err());
    assert!(TopVdev::compute_asize(&TopKind::Raidz { parity: 0 }, 12, &[s; 8]).is_err());
    assert!(TopVdev::compute_asize(&TopKind::Disk, 12, &[s, s]).is_err());
    assert!(TopVdev::compute_asize(&TopKind::Disk, 8, &[s]).is_err());
    assert!(TopVdev::compute_asize(&TopKind::Disk, 12, &[1 << 20]).is_err());
    let region = data_region_size(s);
    assert_eq!(TopVdev::compute_asize(&TopKind::Raidz { parity: 1 }, 12, &[s; 2]).unwrap(), 2 * region);
    assert_eq!(TopVdev::compute_asize(&TopKind::Mirror, 12, &[s, s + (1 << 20)]).unwrap(), region);

    let r = rig(TopKind::Raidz { parity: 2 }, 6, 12);
    assert_eq!(r.top.sector(), 4096);
    assert_eq!(r.top.alloc_size(4096), 3 * 4096); // 1 data + 2 parity
    assert_eq!(r.top.alloc_size(4 * 4096), 6 * 4096); // one full row
    assert_eq!(r.top.alloc_size(5 * 4096), 9 * 4096); // 5 + 2·2 = 9
    // misaligned, empty and out-of-range I/O are errors
    assert!(r.top.write(100, &[0; 4096], 1).is_err());
    assert!(r.top.write(0, &[0; 100], 1).is_err());
    assert!(r.top.write(0, &[], 1).is_err());
    assert!(r.top.write(r.top.asize() - 4096, &[0; 4096], 1).is_err());
    assert!(r.top.read(r.top.asize(), 4096, 1, &|_| true).is_err());
}

/// The pipeline above drives vdevs from the global rayon pool; vdev child
/// I/O runs on its own pool, so many concurrent callers neither deadlock
/// nor interfere.
#[test]
fn concurrent_io_from_the_global_pool() {
    use rayon::prelude::*;
    let (mut rng, _count, _guard) = seeded_run!(1);
    for (kind, n) in [(TopKind::Mirror, 3), (TopKind::Raidz { parity: 2 }, 6)] {
        let mut rig = rig(kind, n, 12);
        fill(&mut rig, &mut rng, 8);
        let top = &rig.top;
        let n_blocks = rig.blocks.len();
        let slot = (top.asize() / 2) / (1 << 20) * (1 << 20);
        (0..64u64).into_par_iter().for_each(|i| {
            let data: Vec<u8> = (0..16384u64).map(|j| (i * 131 + j) as u8).collect();
            let offset = slot + i * top.alloc_size(16384).next_multiple_of(top.sector() * n as u64);
            top.write(offset, &data, 1).unwrap();
            let block = &rig.blocks[i as usize % n_blocks];
            read_ok(top, block, 1, "concurrent");
            assert_eq!(top.read(offset, 16384, 1, &verify_for(&data)).unwrap().data, data);
        });
    }
}

/// A block whose data fails verification is rebuilt from some of its parity
/// columns; damaged columns the rebuild did not need must still be found
/// and rewritten by the scrub, so that a second scrub finds nothing.
#[test]
fn scrub_rewrites_every_bad_column_not_only_the_rebuilt_ones() {
    let (mut rng, _count, _guard) = seeded_run!(1);
    for (parity, n) in [(2u8, 5usize), (3, 6)] {
        let kind = TopKind::Raidz { parity };
        let mut rig = rig(kind.clone(), n, 9);
        fill(&mut rig, &mut rng, 16);
        let name = kind_name(&kind, n);
        for block in rig.blocks.iter().filter(|b| b.children.len() > b.parity) {
            // One data column and every parity column but one, all bad.
            let mut bad = vec![block.children[block.parity]];
            bad.extend(block.children[1..block.parity].iter().copied());
            for &c in &bad {
                damage(&rig, block, c, Damage::BitFlips, rng.next_u64());
            }
            let first = scrub_ok(&rig.top, block, &name);
            assert!(first > 0, "{name}: nothing repaired");
            assert_eq!(scrub_ok(&rig.top, block, &name), 0, "{name}: bad columns {bad:?} left behind");
        }
    }
}
