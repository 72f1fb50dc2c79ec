//! Issue 11, "Writeback": the kernel's writeback cache on tarn's mounts
//! (`[fuse] writeback_cache = true`), through the real daemon. What the
//! page cache holds reaches the pool before a snapshot and before an
//! export; the kernel's size and mtime are what the pool keeps; a quota
//! the buffered writes run into is reported (by `write` or at the latest
//! by `fsync`), never swallowed. The POSIX suite and the exerciser also
//! run with the cache on (posix.rs, exerciser.rs).

mod common;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;

use common::{path_str, Harness};

fn writeback_harness() -> Harness {
    Harness::start_with_config(Some(&|_| "[fuse]\nwriteback_cache = true\n".into()))
}

fn mirror_pool(harness: &Harness, pool: &str) -> std::path::PathBuf {
    let devices = harness.vdev_files("vdevs", 2, 256 << 20);
    let mut spec = vec!["mirror".to_string()];
    spec.extend(devices.iter().map(|p| path_str(p)));
    harness.create_pool(pool, &spec)
}

fn lines(count: u32, salt: &str) -> Vec<u8> {
    (0..count).flat_map(|i| format!("{salt} line {i:06}\n").into_bytes()).collect()
}

#[test]
fn a_snapshot_holds_what_the_page_cache_held() {
    let harness = writeback_harness();
    let root = mirror_pool(&harness, "wbsnap");
    // Warm the mount first: a fresh FUSE device gets almost no share of
    // the kernel's dirty-page limit and writes back at once; after some
    // write-out it lets pages stay dirty, which is the case to test.
    let warm: Vec<u8> = (0..64u32 << 20).map(|i| (i % 251) as u8).collect();
    fs::write(root.join("warm"), &warm).unwrap();
    OpenOptions::new().write(true).open(root.join("warm")).unwrap().sync_all().unwrap();
    let expect = lines(2_000, "before");
    let mut file = OpenOptions::new().create_new(true).write(true).open(root.join("log")).unwrap();
    for chunk in expect.chunks(100) {
        file.write_all(chunk).unwrap();
    }
    // Still open, never fsync'd: the bytes may be only in the page cache.
    harness.tarn_ok(&["snapshot", "wbsnap@s1"]);
    file.write_all(b"after the snapshot\n").unwrap();
    drop(file);
    let in_snapshot = fs::read(root.join(".zfs/snapshot/s1/log")).unwrap();
    assert_eq!(in_snapshot.len(), expect.len(), "the snapshot's copy has every byte written before it");
    assert!(in_snapshot == expect, "the snapshot's copy differs from what was written");
    let mut head = expect.clone();
    head.extend_from_slice(b"after the snapshot\n");
    assert!(fs::read(root.join("log")).unwrap() == head);
}

#[test]
fn size_and_mtime_from_the_kernel_survive_export_and_import() {
    let harness = writeback_harness();
    let root = mirror_pool(&harness, "wbtimes");
    let path = root.join("appended");
    let mut expect = Vec::new();
    for round in 0..50 {
        let mut f = OpenOptions::new().create(true).append(true).open(&path).unwrap();
        let chunk = lines(37, &format!("round {round}"));
        f.write_all(&chunk).unwrap();
        expect.extend_from_slice(&chunk);
    }
    let before = fs::metadata(&path).unwrap();
    assert_eq!(before.len(), expect.len() as u64);
    harness.export("wbtimes");
    let root = harness.import("wbtimes", &harness.dir.join("vdevs"));
    let after = fs::metadata(root.join("appended")).unwrap();
    assert_eq!(after.len(), before.len(), "size after export/import");
    assert_eq!((after.mtime(), after.mtime_nsec()), (before.mtime(), before.mtime_nsec()), "mtime after export/import");
    assert!(fs::read(root.join("appended")).unwrap() == expect);
    harness.tarn_ok(&["debug", "check", "wbtimes"]);
}

#[test]
fn a_quota_is_reported_not_swallowed() {
    let harness = writeback_harness();
    mirror_pool(&harness, "wbquota");
    harness.tarn_ok(&["create", "-o", "quota=8M", "wbquota/q"]);
    let dir = harness.mountpoint("wbquota").join("q");
    common::wait_mounted(&dir);
    let mut file = OpenOptions::new().create_new(true).write(true).open(dir.join("big")).unwrap();
    // Incompressible: the quota counts allocated bytes, and compression
    // would let 32 MiB of a repeated byte fit in 8 MiB.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let chunk: Vec<u8> = (0..64 << 10)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut refused_by_write = None;
    for _ in 0..(32 << 20) / chunk.len() {
        if let Err(e) = file.write_all(&chunk) {
            refused_by_write = e.raw_os_error();
            break;
        }
    }
    let fsync = file.sync_all().err().and_then(|e| e.raw_os_error());
    let reported = refused_by_write.or(fsync);
    assert_eq!(
        reported,
        Some(libc::EDQUOT),
        "32 MiB into an 8 MiB quota: write said {refused_by_write:?}, fsync said {fsync:?}"
    );
    drop(file);
    // Without fsync, in a second dataset with the same quota: close reports it.
    harness.tarn_ok(&["create", "-o", "quota=8M", "wbquota/r"]);
    let dir2 = harness.mountpoint("wbquota").join("r");
    common::wait_mounted(&dir2);
    let mut file = OpenOptions::new().create_new(true).write(true).open(dir2.join("big")).unwrap();
    let mut refused_by_write = None;
    for _ in 0..(32 << 20) / chunk.len() {
        if let Err(e) = file.write_all(&chunk) {
            refused_by_write = e.raw_os_error();
            break;
        }
    }
    let fd = std::os::fd::IntoRawFd::into_raw_fd(file);
    // SAFETY: `fd` was just taken from the File and is closed once.
    let closed = unsafe { libc::close(fd) };
    let close = (closed != 0).then(|| std::io::Error::last_os_error().raw_os_error()).flatten();
    // The kernel keeps only "ENOSPC or EIO" for a write-back error it
    // reports at close (fsync keeps the errno): either, never success.
    assert!(
        matches!(refused_by_write.or(close), Some(libc::EDQUOT | libc::EIO)),
        "32 MiB into the second 8 MiB quota: write said {refused_by_write:?}, close said {close:?}"
    );
    for q in ["wbquota/q", "wbquota/r"] {
        let used: u64 = harness.tarn_ok(&["get", "-Hpo", "value", "used", q]).trim().parse().unwrap();
        // Each write may overshoot by at most itself (full_pool_mount.rs);
        // the kernel writes back up to 1 MiB per request on each of the
        // mount's 4 workers at once.
        let bound = (8 << 20) + tarn_fuse::WORKER_THREADS as u64 * u64::from(tarn_fuse::MAX_IO);
        assert!(used <= bound, "{q}: the quota held: used {used}, bound {bound}");
    }
}

