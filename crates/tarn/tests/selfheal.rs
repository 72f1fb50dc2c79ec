//! Self-healing through the real mount, for every redundant layout.
//!
//! For each layout: write a tree of files through the mount, export, keep a
//! pristine copy of the devices, then for each kind of damage — bit flips,
//! zeroed ranges, the whole data region overwritten, and a mix — restore
//! the pristine devices, damage `redundancy` of them (all but one side of a
//! mirror; p devices of a raidz-p), import, and:
//! - every file reads back exactly through the FUSE mount;
//! - `pool status -j` shows non-zero read/checksum error counters;
//! - the bad copies that were read were rewritten: on the exported device
//!   files fewer pages differ from the pristine copy than before import;
//! - raidz reads check data columns, not parity (as ZFS's do). When sparse
//!   damage met no data column that the reads touched, it was all parity:
//!   then a scrub must find it (counters) and rewrite it (fewer pages);
//! - for raidz (whose reads touch every data column), after export and
//!   import, reading everything again adds no checksum error. A mirror
//!   reads one side per block, so there a damaged copy on the side that was
//!   not read legitimately survives until it is read or scrubbed.
//!
//! Damage stays inside each device's data region (from 4 MiB to 512 KiB
//! before the end, rounded down to 256 KiB), so labels survive, and aims at
//! pages that were written (data or parity), so that it cannot miss them.
//!
//! Reproduce: `TARN_SEED=<seed> cargo test -p tarn --test selfheal`.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rand::{Rng, RngCore};
use rand_chacha::ChaCha8Rng;

use common::{copy_sparse, data_region, device_counters, hash_file, path_str, random_bytes, write_file, Harness};

#[derive(Clone, Copy, Debug)]
enum Damage {
    BitFlips,
    ZeroRanges,
    Overwrite,
}

#[derive(Clone, Copy, Debug)]
enum Round {
    Only(Damage),
    Mixed,
}

const ROUNDS: [Round; 4] =
    [Round::Only(Damage::BitFlips), Round::Only(Damage::ZeroRanges), Round::Only(Damage::Overwrite), Round::Mixed];

fn damage_device(path: &Path, damage: Damage, rng: &mut ChaCha8Rng) -> String {
    let pages = common::written_pages(path);
    assert!(!pages.is_empty(), "{} holds no data in its data region", path.display());
    let file = common::open_rw(path);
    let size = file.metadata().unwrap().len();
    let (start, end) = data_region(size);
    let summary = match damage {
        Damage::BitFlips => {
            let flips = (pages.len() / 16).max(64);
            for _ in 0..flips {
                let page = pages[rng.gen_range(0..pages.len())];
                let offset = page + rng.gen_range(0..4096);
                let mut byte = [0u8; 1];
                file.read_exact_at(&mut byte, offset).unwrap();
                byte[0] ^= 1 << rng.gen_range(0..8);
                file.write_all_at(&byte, offset).unwrap();
            }
            format!("{flips} bit flips over {} written pages", pages.len())
        }
        Damage::ZeroRanges => {
            let mut zeroed = 0u64;
            for _ in 0..8 {
                let from = pages[rng.gen_range(0..pages.len())];
                let len = (rng.gen_range(1..=256u64) * 4096).min(end - from);
                file.write_all_at(&vec![0u8; len as usize], from).unwrap();
                zeroed += len;
            }
            format!("8 zeroed ranges, {zeroed} bytes")
        }
        Damage::Overwrite => {
            let mut buf = vec![0u8; 1 << 20];
            let mut offset = start;
            while offset < end {
                let len = ((end - offset) as usize).min(buf.len());
                rng.fill_bytes(&mut buf[..len]);
                file.write_all_at(&buf[..len], offset).unwrap();
                offset += len as u64;
            }
            format!("data region [{start}, {end}) overwritten with garbage")
        }
    };
    file.sync_all().unwrap();
    summary
}

fn read_everything(root: &Path, expected: &BTreeMap<PathBuf, u64>, when: &str) {
    for (relative, hash) in expected {
        assert_eq!(hash_file(&root.join(relative)), *hash, "{when}: {} reads back wrong", relative.display());
    }
    let present: Vec<PathBuf> = common::walk(root).into_iter().filter(|p| root.join(p).is_file()).collect();
    assert_eq!(present, expected.keys().cloned().collect::<Vec<_>>(), "{when}: the set of files changed");
}

fn error_total(status: &serde_json::Value) -> u64 {
    device_counters(status).iter().map(|d| d.read_errors + d.checksum_errors).sum()
}

fn checksum_errors_by_device(status: &serde_json::Value) -> Vec<(String, u64)> {
    device_counters(status).into_iter().map(|d| (d.name, d.checksum_errors)).collect()
}

/// Offsets of the 4 KiB pages of the data region where `device` differs
/// from `pristine`; with `only`, just those of these pages that still do.
/// (The import writes new metadata into free space, so a count over the
/// whole region would mix repairs with fresh writes.)
fn pages_differing(device: &Path, pristine: &Path, only: Option<&[u64]>) -> Vec<u64> {
    let a = std::fs::File::open(device).unwrap();
    let b = std::fs::File::open(pristine).unwrap();
    let (start, end) = data_region(a.metadata().unwrap().len());
    let (mut x, mut y) = (vec![0u8; 4096], vec![0u8; 4096]);
    let differs = |page: u64, x: &mut [u8], y: &mut [u8]| {
        a.read_exact_at(x, page).unwrap();
        b.read_exact_at(y, page).unwrap();
        x != y
    };
    match only {
        Some(pages) => pages.iter().copied().filter(|page| differs(*page, &mut x, &mut y)).collect(),
        None => (start..end).step_by(4096).filter(|page| differs(*page, &mut x, &mut y)).collect(),
    }
}

fn self_heal(layout: &str, device_count: usize, redundancy: usize) {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(3);
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", device_count, common::VDEV_SIZE_BYTES);
    let device_dir = harness.dir.join("vdevs");
    let mut spec = vec![layout.to_string()];
    spec.extend(devices.iter().map(|p| path_str(p)));
    let root = harness.create_pool("heal", &spec);

    // A tree of files of many sizes, ~25 MiB, incompressible.
    let sizes = [0usize, 1, 100, 4096, 10_000, 131_072, 200_000, 1 << 20, 2_500_000];
    let mut expected = BTreeMap::new();
    for dir in ["", "one", "one/two", "three"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
        for (index, size) in sizes.iter().enumerate() {
            let relative = Path::new(dir).join(format!("file{index}"));
            write_file(&root.join(&relative), &random_bytes(&mut rng, *size));
            expected.insert(relative.clone(), hash_file(&root.join(&relative)));
        }
    }
    let big = Path::new("three/big").to_path_buf();
    write_file(&root.join(&big), &random_bytes(&mut rng, 8 << 20));
    expected.insert(big.clone(), hash_file(&root.join(&big)));
    read_everything(&root, &expected, "before export");

    let status = harness.status_json("heal");
    let leaves = common::leaf_counters(&status, &devices);
    assert_eq!(leaves.len(), devices.len(), "pool status -j must list every device with its counters: {status}");
    assert_eq!(error_total(&status), 0, "a fresh pool reports errors: {status}");
    harness.export("heal");

    let pristine = harness.dir.join("pristine");
    std::fs::create_dir(&pristine).unwrap();
    for device in &devices {
        copy_sparse(device, &pristine.join(device.file_name().unwrap()));
    }

    for (round_number, round) in ROUNDS.iter().enumerate() {
        for device in &devices {
            copy_sparse(&pristine.join(device.file_name().unwrap()), device);
        }
        let mut victims: Vec<usize> = (0..device_count).collect();
        for i in 0..victims.len() {
            let j = rng.gen_range(i..victims.len());
            victims.swap(i, j);
        }
        victims.truncate(redundancy);
        victims.sort();
        let mut applied = Vec::new();
        for (k, victim) in victims.iter().enumerate() {
            let damage = match round {
                Round::Only(damage) => *damage,
                Round::Mixed => [Damage::BitFlips, Damage::ZeroRanges, Damage::Overwrite][(k + round_number) % 3],
            };
            let summary = damage_device(&devices[*victim], damage, &mut rng);
            applied.push(format!("d{victim}: {damage:?} ({summary})"));
        }
        let when = format!("{layout} round {round_number} {round:?} [{}]", applied.join("; "));
        eprintln!("selfheal: {when}");
        let pristine_of = |v: usize| pristine.join(devices[v].file_name().unwrap());
        let damaged: Vec<Vec<u64>> = victims.iter().map(|v| pages_differing(&devices[*v], &pristine_of(*v), None)).collect();
        let damaged_before: usize = damaged.iter().map(Vec::len).sum();

        let root = harness.import("heal", &device_dir);
        read_everything(&root, &expected, &when);
        let mut status = harness.status_json("heal");
        if error_total(&status) == 0 && layout != "mirror" {
            // A raidz read verifies the data columns only; parity is
            // checked when data fails, and by scrub (as in ZFS). Sparse
            // bit flips on a child that holds mostly parity can miss every
            // data column the read touched. Then the damage is parity's,
            // and a scrub must find it and rewrite it.
            eprintln!("selfheal: {when}: the read met no damaged data column; scrubbing for damaged parity");
            harness.tarn_ok(&["pool", "scrub", "-w", "heal"]);
            status = harness.status_json("heal");
        }
        assert!(
            error_total(&status) > 0,
            "{when}: every file read back, but pool status -j shows no read or checksum errors: {status}"
        );
        harness.export("heal");

        // The bad copies that were read were rewritten in place: fewer
        // damaged pages than before, seen on the device files themselves.
        let damaged_after: usize = victims
            .iter()
            .zip(&damaged)
            .map(|(v, pages)| pages_differing(&devices[*v], &pristine_of(*v), Some(pages)).len())
            .sum();
        eprintln!("selfheal: {when}: damaged pages {damaged_before} before, {damaged_after} after the first read");
        assert!(
            damaged_after < damaged_before,
            "{when}: reading found errors but rewrote no bad copy ({damaged_before} damaged pages before, {damaged_after} after)"
        );

        // raidz reads every data column of a block, so the first pass met
        // every damaged data copy and a second pass finds nothing new. A
        // mirror reads one side per block, so a bad copy on the side not
        // read stays until it is read (or scrubbed): no such claim there.
        if layout != "mirror" {
            let root = harness.import("heal", &device_dir);
            let before = checksum_errors_by_device(&harness.status_json("heal"));
            read_everything(&root, &expected, &format!("{when}, second pass"));
            let after = checksum_errors_by_device(&harness.status_json("heal"));
            assert_eq!(after, before, "{when}: the second read found checksum errors again; bad copies were not rewritten");
            harness.export("heal");
        }
    }
}

#[test]
fn mirror_2way_heals() {
    self_heal("mirror", 2, 1);
}

#[test]
fn mirror_3way_heals() {
    self_heal("mirror", 3, 2);
}

#[test]
fn raidz1_heals() {
    self_heal("raidz1", 4, 1);
}

#[test]
fn raidz2_heals() {
    self_heal("raidz2", 5, 2);
}

#[test]
fn raidz3_heals() {
    self_heal("raidz3", 6, 3);
}
