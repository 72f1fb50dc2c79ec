//! Issue 11, item 3: the `sync` property (standard | always | disabled)
//! observed through the mount, by what survives a crash — the daemon
//! killed with SIGKILL, so everything not yet in a txg on the disks is gone
//! — never by timing. `txg_timeout` is an hour, so no periodic txg writes
//! anything behind the test's back.

mod common;

use std::fs;
use std::io::Write;
use std::path::Path;

use common::{path_str, wait_mounted, Harness};

fn write_file(path: &Path, data: &[u8], fsync: bool) {
    let mut f = fs::File::create(path).unwrap();
    f.write_all(data).unwrap();
    if fsync {
        f.sync_all().unwrap();
    }
}

#[test]
fn sync_always_standard_and_disabled_across_a_crash() {
    let mut harness = Harness::start_with_config(Some(&|_| "[tunables]\ntxg_timeout = 3600\n".into()));
    let devices = harness.vdev_files("vdevs", 2, 256 << 20);
    let root = harness.create_pool("sp", &["mirror".into(), path_str(&devices[0]), path_str(&devices[1])]);
    harness.tarn_ok(&["create", "-o", "sync=always", "sp/always"]);
    harness.tarn_ok(&["create", "sp/standard"]);
    harness.tarn_ok(&["create", "-o", "sync=disabled", "sp/disabled"]);
    harness.tarn_ok(&["create", "-o", "logbias=throughput", "-o", "recordsize=16K", "sp/throughput"]);
    for ds in ["always", "standard", "disabled", "throughput"] {
        wait_mounted(&root.join(ds));
    }
    let got = harness.tarn_ok(&["get", "-H", "-o", "name,value,source", "-r", "sync", "sp"]);
    assert_eq!(
        got,
        "sp\tstandard\tdefault\nsp/always\talways\tlocal\nsp/disabled\tdisabled\tlocal\nsp/standard\tstandard\tdefault\nsp/throughput\tstandard\tdefault\n"
    );
    // Bad values: one line, nothing changes.
    let out = harness.tarn(&["set", "sync=sometimes", "sp/standard"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sync") && err.trim_end().lines().count() == 1, "{err}");
    // primarycache: set, inherited, a bad value refused in one line.
    harness.tarn_ok(&["set", "primarycache=metadata", "sp/standard"]);
    let got = harness.tarn_ok(&["get", "-H", "-o", "name,value,source", "-r", "primarycache", "sp"]);
    assert_eq!(got, "sp\tall\tdefault\nsp/always\tall\tdefault\nsp/disabled\tall\tdefault\nsp/standard\tmetadata\tlocal\nsp/throughput\tall\tdefault\n");
    let out = harness.tarn(&["set", "primarycache=some", "sp/standard"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("primarycache") && err.trim_end().lines().count() == 1, "{err}");
    harness.tarn_ok(&["inherit", "primarycache", "sp/standard"]);
    // logbias: latency by default; a bad value refused in one line.
    let got = harness.tarn_ok(&["get", "-H", "-o", "name,value,source", "-r", "logbias", "sp"]);
    assert_eq!(
        got,
        "sp\tlatency\tdefault\nsp/always\tlatency\tdefault\nsp/disabled\tlatency\tdefault\nsp/standard\tlatency\tdefault\nsp/throughput\tthroughput\tlocal\n"
    );
    let out = harness.tarn(&["set", "logbias=fast", "sp/standard"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("logbias") && err.trim_end().lines().count() == 1, "{err}");

    // sync=always: no fsync, yet every change is durable when it returns —
    // data, a directory, a rename, an xattr-free chmod.
    let always = root.join("always");
    write_file(&always.join("data"), b"acknowledged without fsync\n", false);
    fs::create_dir(always.join("dir")).unwrap();
    write_file(&always.join("dir/tmp"), b"renamed\n", false);
    fs::rename(always.join("dir/tmp"), always.join("dir/final")).unwrap();
    fs::set_permissions(always.join("data"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();

    // sync=standard: fsync makes it durable.
    write_file(&root.join("standard/synced"), b"fsync'd\n", true);

    // logbias=throughput: the fsync'd blocks are written once, as the
    // blocks the txg would have written (the log holds their pointers);
    // after the crash, the replay reads them back.
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    write_file(&root.join("throughput/big"), &big, true);

    // sync=disabled: fsync returns at once and makes nothing durable; with
    // no txg until the crash, the file is gone afterwards.
    write_file(&root.join("disabled/lost"), b"fsync'd, but sync=disabled\n", true);

    harness.kill_daemon();
    harness.restart_daemon();
    for ds in ["always", "standard", "disabled", "throughput"] {
        wait_mounted(&root.join(ds));
    }
    assert_eq!(fs::read(always.join("data")).unwrap(), b"acknowledged without fsync\n");
    assert!(fs::read(root.join("throughput/big")).unwrap() == big, "logbias=throughput: fsync'd data lost");
    assert_eq!(fs::read(always.join("dir/final")).unwrap(), b"renamed\n");
    assert!(!always.join("dir/tmp").exists(), "the rename is whole");
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&fs::metadata(always.join("data")).unwrap().permissions()) & 0o777, 0o600);
    assert_eq!(fs::read(root.join("standard/synced")).unwrap(), b"fsync'd\n");
    assert!(
        !root.join("disabled/lost").exists(),
        "sync=disabled: an fsync must not have forced a txg (the file survived the crash)"
    );
    let out = harness.tarn(&["debug", "check", "sp"]);
    assert!(out.status.success(), "debug check: {}", String::from_utf8_lossy(&out.stdout));
}
