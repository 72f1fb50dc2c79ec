//! `tarn pool checkpoint` end to end through the real daemon and mounts:
//! after a checkpoint, files are overwritten, deleted and created, a
//! snapshot taken, a dataset destroyed and another created, the pool
//! filled; layout changes a rewind cannot undo are refused; the daemon is
//! killed (-9) and restarted; then `pool import --rewind-to-checkpoint`
//! brings back exactly the checkpoint's files (every one hashed) and
//! datasets, with `tarn debug check` clean. A seeded random variant rewinds
//! and discards (the held space, shown as CKPOINT by `pool list`, comes
//! back). Bad requests fail with one line.

mod common;

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use common::{assert_clean_failure, hash_file, path_str, random_bytes, wait_mounted, walk, write_file, Harness};
use rand::Rng;

const POOL: &str = "tank";

/// Every file and directory below `root`: path → hash (0 for directories).
fn tree(root: &Path) -> BTreeMap<PathBuf, u64> {
    walk(root)
        .into_iter()
        .filter(|p| p != Path::new(".txg"))
        .map(|p| {
            let full = root.join(&p);
            let hash = if full.is_dir() { 0 } else { hash_file(&full) };
            (p, hash)
        })
        .collect()
}

fn assert_tree(root: &Path, want: &BTreeMap<PathBuf, u64>, what: &str) {
    let got = tree(root);
    let missing: Vec<&PathBuf> = want.keys().filter(|k| !got.contains_key(*k)).collect();
    let extra: Vec<&PathBuf> = got.keys().filter(|k| !want.contains_key(*k)).collect();
    let changed: Vec<&PathBuf> = want.iter().filter(|(k, v)| got.get(*k).is_some_and(|g| g != *v)).map(|(k, _)| k).collect();
    assert!(missing.is_empty() && extra.is_empty() && changed.is_empty(), "{what}: missing {missing:?}, extra {extra:?}, changed {changed:?}");
}

/// Several txgs (each fsync syncs one), so frees leave the defer window.
/// Needs no space: `.txg` exists already (`make_txg_file`) and gets no data.
/// Syncs `n` txgs (`pool sync`; an fsync commits only the intent log).
fn advance_txgs(harness: &Harness, n: usize) {
    for _ in 0..n {
        harness.tarn_ok(&["pool", "sync", POOL]);
    }
}

fn make_txg_file(mount: &Path) {
    write_file(&mount.join(".txg"), b"");
}

fn check_clean(harness: &Harness) {
    let out = harness.tarn_ok(&["debug", "check", POOL]);
    assert!(out.contains("no damage, leaks or double allocations found"), "{out}");
}

fn tarn_fails(harness: &Harness, args: &[&str], exit: i32, needle: &str) {
    let out = harness.tarn(args);
    let what = args.join(" ");
    assert_clean_failure(&out, &what);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(exit), "tarn {what}: {stderr}");
    assert!(stderr.contains(needle), "tarn {what}: expected '{needle}' in: {stderr}");
}

fn list_value(harness: &Harness, prop: &str) -> String {
    harness.tarn_ok(&["pool", "list", "-H", "-p", "-o", prop, POOL]).trim().to_string()
}

fn names(harness: &Harness) -> Vec<String> {
    harness.tarn_ok(&["list", "-t", "all", "-H", "-o", "name", "-r", POOL]).lines().map(str::to_string).collect()
}

#[test]
fn rewind_to_checkpoint_after_every_kind_of_change_and_a_daemon_kill() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(1);
    let mut harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 3, common::VDEV_SIZE_BYTES);
    let spare = harness.vdev_files("spare", 1, common::VDEV_SIZE_BYTES);
    let extra = harness.vdev_files("extra", 1, common::VDEV_SIZE_BYTES);
    let spec: Vec<String> = std::iter::once("raidz1".to_string()).chain(devices.iter().map(|d| path_str(d))).collect();
    let mount = harness.create_pool(POOL, &spec);
    make_txg_file(&mount);
    harness.tarn_ok(&["create", "tank/a"]);
    harness.tarn_ok(&["create", "tank/b"]);
    wait_mounted(&mount.join("a"));
    wait_mounted(&mount.join("b"));
    for i in 0..6 {
        write_file(&mount.join(format!("root{i}")), &random_bytes(&mut rng, 700_000));
        write_file(&mount.join(format!("a/file{i}")), &random_bytes(&mut rng, 1_500_000));
        write_file(&mount.join(format!("b/file{i}")), &random_bytes(&mut rng, 400_000));
    }
    fs::create_dir(mount.join("a/dir")).unwrap();
    write_file(&mount.join("a/dir/inner"), b"inner");
    harness.tarn_ok(&["snapshot", "tank/a@s1"]);
    let at_checkpoint = tree(&mount);
    let names_at_checkpoint = names(&harness);
    assert_eq!(list_value(&harness, "checkpoint"), "-");
    assert!(!harness.tarn_ok(&["pool", "status", POOL]).contains("checkpoint:"));

    harness.tarn_ok(&["pool", "checkpoint", POOL]);
    let status = harness.tarn_ok(&["pool", "status", POOL]);
    assert!(status.contains("checkpoint: created ") && status.contains(", consumes "), "{status}");
    assert!(harness.tarn_ok(&["pool", "list", POOL]).lines().next().unwrap().contains("CKPOINT"));
    tarn_fails(&harness, &["pool", "checkpoint", POOL], 1, "checkpoint exists");
    let pool_json = harness.pool_json(POOL);
    assert!(pool_json["checkpoint_stats"]["txg"].as_u64().is_some(), "{pool_json:#}");

    // Every kind of change.
    for i in 0..6 {
        write_file(&mount.join(format!("a/file{i}")), &random_bytes(&mut rng, 1_000_000));
    }
    for i in 0..3 {
        fs::remove_file(mount.join(format!("root{i}"))).unwrap();
    }
    write_file(&mount.join("new-after-checkpoint"), &random_bytes(&mut rng, 300_000));
    fs::remove_dir_all(mount.join("a/dir")).unwrap();
    harness.tarn_ok(&["snapshot", "tank/a@s2"]);
    harness.tarn_ok(&["destroy", "-r", "tank/b"]);
    harness.tarn_ok(&["destroy", "tank/a@s1"]);
    harness.tarn_ok(&["create", "tank/c"]);
    wait_mounted(&mount.join("c"));
    write_file(&mount.join("c/file"), &random_bytes(&mut rng, 800_000));
    // Fill the pool: ENOSPC, and the pool stays healthy.
    let big = mount.join("c/big");
    {
        let mut f = fs::File::create(&big).unwrap();
        let chunk = random_bytes(&mut rng, 1 << 20);
        let mut written = 0u64;
        let error = loop {
            let step = f.write_all(&chunk).and_then(|()| if written.is_multiple_of(16 << 20) { f.sync_all() } else { Ok(()) });
            match step {
                Ok(()) => written += chunk.len() as u64,
                Err(e) => break e,
            }
            assert!(written < 2 << 30, "the pool never filled");
        };
        assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "filling: {error}");
        eprintln!("filled the pool: ENOSPC after {} MiB", written >> 20);
    }
    assert!(harness.tarn_ok(&["pool", "status", POOL]).contains("state: ONLINE"));
    fs::remove_file(&big).unwrap();
    advance_txgs(&harness, 6);
    let held: u64 = list_value(&harness, "checkpoint").parse().expect("CKPOINT is a number of bytes");
    assert!(held >= 8 << 20, "the checkpoint holds what was overwritten and destroyed: {held}");
    check_clean(&harness);

    // Layout changes a rewind could not undo are refused; add is allowed.
    let first = path_str(&devices[0]);
    let new = path_str(&extra[0]);
    tarn_fails(&harness, &["pool", "attach", POOL, &first, &new], 1, "checkpoint exists");
    tarn_fails(&harness, &["pool", "replace", POOL, &first, &new], 1, "checkpoint exists");
    tarn_fails(&harness, &["pool", "detach", POOL, &first], 1, "checkpoint exists");
    harness.tarn_ok(&["pool", "add", POOL, "spare", &path_str(&spare[0])]);
    tarn_fails(&harness, &["pool", "remove", POOL, &path_str(&spare[0])], 1, "checkpoint exists");

    // kill -9: the checkpoint is on disk.
    harness.kill_and_restart();
    wait_mounted(&mount);
    let status = harness.tarn_ok(&["pool", "status", POOL]);
    assert!(status.contains("checkpoint: created "), "the checkpoint survives a daemon kill:\n{status}");
    assert!(mount.join("new-after-checkpoint").exists());

    // Rewind.
    harness.export(POOL);
    harness.tarn_ok(&["pool", "import", "--rewind-to-checkpoint", "-d", &path_str(&harness.dir.join("vdevs")), POOL]);
    wait_mounted(&mount);
    wait_mounted(&mount.join("a"));
    wait_mounted(&mount.join("b"));
    assert_eq!(names(&harness), names_at_checkpoint, "datasets and snapshots as at the checkpoint");
    assert_tree(&mount, &at_checkpoint, "after the rewind");
    let status = harness.tarn_ok(&["pool", "status", POOL]);
    assert!(!status.contains("checkpoint:"), "the rewound pool has no checkpoint:\n{status}");
    assert_eq!(list_value(&harness, "checkpoint"), "-");
    check_clean(&harness);
    write_file(&mount.join("after-rewind"), b"writable");
    // A layout change works again.
    harness.tarn_ok(&["pool", "remove", POOL, &path_str(&spare[0])]);
    harness.export(POOL);
    tarn_fails(
        &harness,
        &["pool", "import", "--rewind-to-checkpoint", "-d", &path_str(&harness.dir.join("vdevs")), POOL],
        1,
        "checkpoint does not exist",
    );
    harness.import(POOL, &harness.dir.join("vdevs"));
    assert!(mount.join("after-rewind").exists());
    check_clean(&harness);
}

/// Random file changes around a checkpoint: a rewind gives back the tree
/// as it was; a second checkpoint is discarded, its space comes back.
#[test]
fn random_changes_then_rewind_or_discard() {
    let seeded = tarn_testkit::seeded!(80);
    let mut rng = seeded.rng(2);
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 2, common::VDEV_SIZE_BYTES);
    let spec: Vec<String> = std::iter::once("mirror".to_string()).chain(devices.iter().map(|d| path_str(d))).collect();
    let mount = harness.create_pool(POOL, &spec);
    make_txg_file(&mount);
    let random_changes = |rng: &mut rand_chacha::ChaCha8Rng, count: u64| {
        for _ in 0..count {
            let files: Vec<PathBuf> = walk(&mount).into_iter().filter(|p| mount.join(p).is_file() && p != Path::new(".txg")).collect();
            match rng.gen_range(0..6) {
                0 | 1 => {
                    let len = rng.gen_range(1..600_000);
                    write_file(&mount.join(format!("f{}", rng.gen_range(0..40))), &random_bytes(rng, len));
                }
                2 if !files.is_empty() => {
                    fs::remove_file(mount.join(&files[rng.gen_range(0..files.len())])).unwrap();
                }
                3 if !files.is_empty() => {
                    let mut f = OpenOptions::new().write(true).open(mount.join(&files[rng.gen_range(0..files.len())])).unwrap();
                    f.write_all(&random_bytes(rng, 5000)).unwrap();
                    f.sync_all().unwrap();
                }
                4 => {
                    let dir = mount.join(format!("d{}", rng.gen_range(0..5)));
                    let _ = fs::create_dir(&dir);
                    write_file(&dir.join(format!("g{}", rng.gen_range(0..5))), &random_bytes(rng, 10_000));
                }
                _ => {
                    let name = format!("{POOL}@r{}", rng.gen::<u32>());
                    harness.tarn_ok(&["snapshot", &name]);
                }
            }
        }
    };
    random_changes(&mut rng, seeded.count / 2);
    let at_checkpoint = tree(&mount);
    let names_at_checkpoint = names(&harness);
    harness.tarn_ok(&["pool", "checkpoint", POOL]);
    random_changes(&mut rng, seeded.count);
    check_clean(&harness);
    harness.export(POOL);
    harness.tarn_ok(&["pool", "import", "--rewind-to-checkpoint", "-d", &path_str(&harness.dir.join("vdevs")), POOL]);
    wait_mounted(&mount);
    assert_tree(&mount, &at_checkpoint, "rewound");
    assert_eq!(names(&harness), names_at_checkpoint);
    check_clean(&harness);

    // A second checkpoint, discarded. Without snapshots, whatever is
    // overwritten afterwards is held by the checkpoint alone.
    tarn_fails(&harness, &["pool", "checkpoint", "-d", POOL], 1, "checkpoint does not exist");
    if names(&harness).iter().any(|n| n.contains('@')) {
        harness.tarn_ok(&["destroy", &format!("{POOL}@%")]);
    }
    advance_txgs(&harness, 6);
    let free_before: u64 = list_value(&harness, "free").parse().unwrap();
    harness.tarn_ok(&["pool", "checkpoint", POOL]);
    // Every file overwritten with as many bytes: the old versions are held.
    for f in walk(&mount).into_iter().filter(|p| mount.join(p).is_file() && p != Path::new(".txg")) {
        let len = fs::metadata(mount.join(&f)).unwrap().len() as usize;
        write_file(&mount.join(&f), &random_bytes(&mut rng, len));
    }
    advance_txgs(&harness, 6);
    let held: u64 = list_value(&harness, "checkpoint").parse().unwrap();
    let data: u64 = walk(&mount).iter().map(|p| fs::metadata(mount.join(p)).unwrap()).filter(|m| m.is_file()).map(|m| m.len()).sum();
    assert!(held >= data, "the overwritten {data} bytes (two copies each) are held: {held}");
    let current = tree(&mount);
    harness.tarn_ok(&["pool", "checkpoint", "-d", "-w", POOL]);
    assert_eq!(list_value(&harness, "checkpoint"), "-");
    assert!(!harness.tarn_ok(&["pool", "status", POOL]).contains("checkpoint:"));
    advance_txgs(&harness, 6);
    let free_after: u64 = list_value(&harness, "free").parse().unwrap();
    assert!(free_after + (2 << 20) >= free_before, "the held space came back: free {free_before} -> {free_after}, {held} was held");
    assert_tree(&mount, &current, "after the discard");
    check_clean(&harness);
}

#[test]
fn bad_checkpoint_requests_fail_with_one_line() {
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 2, common::VDEV_SIZE_BYTES);
    let spec: Vec<String> = std::iter::once("mirror".to_string()).chain(devices.iter().map(|d| path_str(d))).collect();
    let mount = harness.create_pool(POOL, &spec);
    write_file(&mount.join("keep"), b"kept");
    tarn_fails(&harness, &["pool", "checkpoint", "-d", POOL], 1, "checkpoint does not exist");
    tarn_fails(&harness, &["pool", "checkpoint", "nosuch"], 1, "no such pool");
    tarn_fails(&harness, &["pool", "checkpoint"], 2, "required");
    tarn_fails(&harness, &["pool", "checkpoint", "-w", POOL], 2, "--discard");
    tarn_fails(&harness, &["pool", "import", "--rewind-to-checkpoint", "-F", POOL], 2, "cannot be used with");
    harness.tarn_ok(&["pool", "checkpoint", POOL]);
    tarn_fails(&harness, &["pool", "checkpoint", POOL], 1, "checkpoint exists");
    // Rewinding an imported pool: it must be exported first.
    tarn_fails(
        &harness,
        &["pool", "import", "--rewind-to-checkpoint", "-d", &path_str(&harness.dir.join("vdevs")), POOL],
        1,
        "cannot import",
    );
    harness.tarn_ok(&["pool", "checkpoint", "-d", POOL]);
    harness.export(POOL);
    tarn_fails(
        &harness,
        &["pool", "import", "--rewind-to-checkpoint", "-d", &path_str(&harness.dir.join("vdevs")), POOL],
        1,
        "checkpoint does not exist",
    );
    tarn_fails(&harness, &["pool", "checkpoint", POOL], 1, "no such pool");
    harness.import(POOL, &harness.dir.join("vdevs"));
    assert_eq!(fs::read(mount.join("keep")).unwrap(), b"kept");
    check_clean(&harness);
}
