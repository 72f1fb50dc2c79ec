//! POSIX conformance through the real mount.
//!
//! The same suite (`posix/suite.rs`) runs twice: on tmpfs, as the reference
//! that proves its expectations are POSIX and not tarn's habits, and on a
//! tarn pool mounted through FUSE by the real daemon.

mod common;
#[path = "posix/suite.rs"]
mod suite;

use common::{path_str, Harness};

#[test]
fn posix_suite_on_tmpfs_reference() {
    let tmp = tempfile::Builder::new().prefix("tarn-posix-ref-").tempdir().expect("temp dir");
    let root = tmp.path().join("tmpfs");
    let _mount = common::mount_tmpfs(&root, "tarn-posix-ref", "8g");
    suite::run_posix_suite(&root);
}

#[test]
fn posix_suite_through_tarn_mount() {
    run_through_tarn(Harness::start(), "posix");
}

/// The same suite with the kernel's writeback cache on the mount.
#[test]
fn posix_suite_through_tarn_mount_with_the_writeback_cache() {
    run_through_tarn(Harness::start_with_config(Some(&|_| "[fuse]\nwriteback_cache = true\n".into())), "posixwb");
}

fn run_through_tarn(harness: Harness, pool: &str) {
    let devices = harness.vdev_files("vdevs", 4, 1 << 30);
    let mut spec = vec!["raidz1".to_string()];
    spec.extend(devices.iter().map(|p| path_str(p)));
    let mountpoint = harness.create_pool(pool, &spec);
    suite::run_posix_suite(&mountpoint);
    // The pool the suite just exercised must verify clean.
    harness.export(pool);
    harness.import(pool, &harness.dir.join("vdevs"));
    let out = harness.tarn(&["debug", "check", pool]);
    assert!(
        out.status.success(),
        "tarn debug check after the POSIX suite failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
