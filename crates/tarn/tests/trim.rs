//! `tarn pool trim` and `autotrim` end to end, on sparse file vdevs: files
//! written through the mount and deleted come back to the file system as
//! holes (the vdev files' allocated blocks, `stat -c %b`, shrink by about
//! what was freed) once their blocks leave the defer window — after `pool
//! trim -w`, or by themselves with `autotrim=on`; everything still there
//! reads back and `tarn debug check` is clean. `pool status` shows
//! `(trimming)` while a trim runs and, with `-t`, `(N% trimmed, ...)`; a
//! throttled trim can be suspended, resumed and cancelled; bad input fails
//! with one line.

mod common;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{assert_clean_failure, hash_file, path_str, random_bytes, write_file, Harness, Seeded};

const POOL: &str = "tank";

/// Bytes the vdev files take on their file system.
fn allocated(devices: &[PathBuf]) -> u64 {
    devices.iter().map(|d| fs::metadata(d).expect("stat vdev").blocks() * 512).sum()
}

/// Several txgs (fsync syncs one each), so frees leave the defer window.
/// Syncs `n` txgs, each with a change in it (frees leave the defer window
/// only as txgs go by; fsync alone commits the intent log, not a txg).
fn advance_txgs(harness: &Harness, mount: &Path, n: usize) {
    let path = mount.join(".txg");
    for i in 0..n {
        let mut f = OpenOptions::new().create(true).write(true).truncate(true).open(&path).expect("open .txg");
        f.write_all(&[i as u8]).expect("write .txg");
        drop(f);
        harness.tarn_ok(&["pool", "sync", POOL]);
    }
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

/// Writes `count` files of `size` random bytes; returns (name, hash).
fn write_files(mount: &Path, prefix: &str, count: usize, size: usize, seeded: &Seeded, stream: u64) -> Vec<(PathBuf, u64)> {
    let mut rng = seeded.rng(stream);
    (0..count)
        .map(|i| {
            let path = mount.join(format!("{prefix}{i}"));
            write_file(&path, &random_bytes(&mut rng, size));
            let hash = hash_file(&path);
            (path, hash)
        })
        .collect()
}

fn verify(files: &[(PathBuf, u64)], what: &str) {
    for (path, hash) in files {
        assert_eq!(hash_file(path), *hash, "{what}: {} differs", path.display());
    }
}

#[test]
fn trim_and_autotrim_give_freed_space_back_to_sparse_files() {
    let seeded = tarn_testkit::seeded!(1);
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 3, common::VDEV_SIZE_BYTES);
    let spec: Vec<String> = std::iter::once("raidz1".to_string()).chain(devices.iter().map(|d| path_str(d))).collect();
    let mount = harness.create_pool(POOL, &spec);
    assert_eq!(harness.tarn_ok(&["pool", "get", "-H", "-o", "value", "autotrim", POOL]).trim(), "off");

    // 48 MiB written, 40 MiB deleted, then `pool trim -w`.
    let mut files = write_files(&mount, "f", 24, 2 << 20, &seeded, 1);
    let full = allocated(&devices);
    for (path, _) in files.drain(4..) {
        fs::remove_file(path).expect("remove");
    }
    advance_txgs(&harness, &mount, 8);
    let before = allocated(&devices);
    assert!(before + (4 << 20) >= full, "nothing given back before the trim: {full} -> {before}");
    harness.tarn_ok(&["pool", "trim", "-w", POOL]);
    let after = allocated(&devices);
    // 40 MiB of data is 60 MiB on raidz1 of three.
    let want = 60u64 << 20;
    assert!(before - after >= want * 8 / 10, "pool trim gave back {} of about {want}", before - after);
    let status = harness.tarn_ok(&["pool", "status", "-t", POOL]);
    for d in &devices {
        let row = status.lines().find(|l| l.contains(&path_str(d))).unwrap_or_else(|| panic!("{} in:\n{status}", d.display()));
        assert!(row.contains("(100% trimmed, completed at "), "{row}");
    }
    let plain = harness.tarn_ok(&["pool", "status", POOL]);
    assert!(!plain.contains("trimm"), "a finished trim shows only with -t:\n{plain}");
    let json = harness.pool_json(POOL);
    assert!(json.to_string().contains("\"trim_state\":\"COMPLETE\""), "{json:#}");
    verify(&files, "after pool trim");
    check_clean(&harness);

    // autotrim=on: the same without a manual trim.
    harness.tarn_ok(&["pool", "set", "autotrim=on", POOL]);
    assert_eq!(harness.tarn_ok(&["pool", "get", "-H", "-o", "value,source", "autotrim", POOL]).trim(), "on\tlocal");
    let mut more = write_files(&mount, "g", 16, 2 << 20, &seeded, 2);
    let full = allocated(&devices);
    for (path, _) in more.drain(2..) {
        fs::remove_file(path).expect("remove");
    }
    advance_txgs(&harness, &mount, 8);
    let want = 42u64 << 20; // 28 MiB of data on raidz1 of three
    let deadline = Instant::now() + Duration::from_secs(60);
    while full.saturating_sub(allocated(&devices)) < want * 8 / 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let after = allocated(&devices);
    assert!(full - after >= want * 8 / 10, "autotrim gave back {} of about {want}", full - after);
    verify(&files, "after autotrim");
    verify(&more, "after autotrim");
    check_clean(&harness);

    // Survives export and import (autotrim stays on).
    harness.export(POOL);
    harness.import(POOL, &harness.dir.join("vdevs"));
    assert_eq!(harness.tarn_ok(&["pool", "get", "-H", "-o", "value", "autotrim", POOL]).trim(), "on");
    verify(&files, "after import");
    verify(&more, "after import");
    check_clean(&harness);
}

#[test]
fn throttled_trim_suspends_resumes_and_cancels() {
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 2, common::VDEV_SIZE_BYTES);
    let spec: Vec<String> = std::iter::once("mirror".to_string()).chain(devices.iter().map(|d| path_str(d))).collect();
    let mount = harness.create_pool(POOL, &spec);
    let first = path_str(&devices[0]);
    // 250 MiB of free space at 16 MiB/s: about 15 s.
    harness.tarn_ok(&["pool", "trim", "-r", "16M", POOL, &first]);
    let status = harness.tarn_ok(&["pool", "status", POOL]);
    let row = |text: &str, dev: &str| text.lines().find(|l| l.contains(dev)).map(str::to_string).unwrap_or_default();
    assert!(row(&status, &first).ends_with("(trimming)"), "{status}");
    assert!(!row(&status, &path_str(&devices[1])).contains("trim"), "only the named device: {status}");
    tarn_fails(&harness, &["pool", "trim", POOL, &first], 1, "currently trimming");
    std::thread::sleep(Duration::from_millis(1500));
    harness.tarn_ok(&["pool", "trim", "-s", POOL]);
    let suspended = harness.tarn_ok(&["pool", "status", "-t", POOL]);
    let line = row(&suspended, &first);
    assert!(line.contains("% trimmed, suspended since "), "{suspended}");
    let percent = |line: &str| -> u64 {
        let at = line.find("% trimmed").expect("percent");
        line[..at].rsplit('(').next().and_then(|n| n.parse().ok()).expect("a number")
    };
    let p1 = percent(&line);
    assert!(p1 < 100, "{line}");
    assert!(row(&suspended, &path_str(&devices[1])).contains("(untrimmed)"), "{suspended}");
    tarn_fails(&harness, &["pool", "trim", "-s", POOL], 1, "there is no active trim");
    // Resumed: it goes on from where it was.
    harness.tarn_ok(&["pool", "trim", "-r", "16M", POOL, &first]);
    std::thread::sleep(Duration::from_millis(1500));
    let resumed = harness.tarn_ok(&["pool", "status", "-t", POOL]);
    let line = row(&resumed, &first);
    assert!(line.contains("% trimmed, started at "), "{resumed}");
    assert!(percent(&line) > p1, "progress went on: {p1} -> {line}");
    // Progress shows in `pool wait -t trim POOL INTERVAL` too.
    harness.tarn_ok(&["pool", "trim", "-c", POOL]);
    let cancelled = harness.tarn_ok(&["pool", "status", "-t", POOL]);
    assert!(row(&cancelled, &first).contains("(untrimmed)"), "{cancelled}");
    tarn_fails(&harness, &["pool", "trim", "-c", POOL], 1, "there is no active trim");
    // A full-speed trim of every device, waited for.
    harness.tarn_ok(&["pool", "trim", POOL]);
    harness.tarn_ok(&["pool", "wait", "-t", "trim", POOL]);
    let done = harness.tarn_ok(&["pool", "status", "-t", POOL]);
    for d in &devices {
        assert!(row(&done, &path_str(d)).contains("(100% trimmed, completed at "), "{done}");
    }
    write_file(&mount.join("still-works"), b"yes");
    check_clean(&harness);
}

#[test]
fn bad_trim_requests_fail_with_one_line() {
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 2, common::VDEV_SIZE_BYTES);
    let spec: Vec<String> = std::iter::once("mirror".to_string()).chain(devices.iter().map(|d| path_str(d))).collect();
    harness.create_pool(POOL, &spec);
    let missing = harness.dir.join("vdevs/nope");
    tarn_fails(&harness, &["pool", "trim", POOL, &path_str(&missing)], 1, "no such device in pool");
    tarn_fails(&harness, &["pool", "trim", "nosuch"], 1, "no such pool");
    tarn_fails(&harness, &["pool", "trim", "-r", "fast", POOL], 2, "rate");
    tarn_fails(&harness, &["pool", "trim", "-r", "0", POOL], 2, "rate");
    tarn_fails(&harness, &["pool", "trim", "-c", "-s", POOL], 2, "cannot be used with");
    tarn_fails(&harness, &["pool", "trim", "-c", POOL], 1, "there is no active trim");
    tarn_fails(&harness, &["pool", "set", "autotrim=maybe", POOL], 1, "autotrim");
    tarn_fails(&harness, &["pool", "wait", "-t", "frobnicate", POOL], 2, "frobnicate");
    harness.export(POOL);
    tarn_fails(&harness, &["pool", "trim", POOL], 1, "no such pool");
    // Nothing changed: the pool imports as before.
    harness.import(POOL, &harness.dir.join("vdevs"));
    check_clean(&harness);
}
