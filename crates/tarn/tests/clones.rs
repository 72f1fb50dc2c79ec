//! Clones and promote end to end through the real binary and real FUSE
//! mounts: `tarn clone` of a snapshot shows the snapshot's files, writable,
//! while the origin stays as it was; `get origin` / `get clones`; the
//! origin snapshot cannot be destroyed while it has a clone; `tarn promote`
//! moves the snapshots, after which the former origin file system can be
//! destroyed and the clone keeps everything; the pool checker stays clean
//! throughout, across export/import too. Bad input fails with exit 1 and
//! one line, and changes nothing.

mod common;

use std::fs;
use std::path::Path;

use common::{assert_clean_failure, path_str, wait_mounted, write_file, Harness};

const POOL: &str = "tank";

fn pool_spec(harness: &Harness) -> Vec<String> {
    let devices = harness.vdev_files("vdevs", 2, common::VDEV_SIZE_BYTES);
    std::iter::once("mirror".to_string())
        .chain(devices.iter().map(|d| path_str(d)))
        .collect()
}

fn get(harness: &Harness, prop: &str, name: &str) -> String {
    harness
        .tarn_ok(&["get", "-H", "-o", "value", prop, name])
        .trim()
        .to_string()
}

fn names(harness: &Harness) -> String {
    harness.tarn_ok(&["list", "-t", "all", "-H", "-o", "name", "-r", POOL])
}

fn tarn_fails(harness: &Harness, args: &[&str], needle: &str) {
    let out = harness.tarn(args);
    let what = args.join(" ");
    assert_clean_failure(&out, &what);
    assert_eq!(
        out.status.code(),
        Some(1),
        "tarn {what} must exit 1:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("tarn {what}: {}", stderr.trim());
    assert!(
        stderr.contains(needle),
        "tarn {what}: expected '{needle}' in the error, got: {stderr}"
    );
}

fn check_clean(harness: &Harness) {
    let out = harness.tarn_ok(&["debug", "check", POOL]);
    assert!(
        out.contains("no damage, leaks or double allocations found"),
        "{out}"
    );
}

fn read(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[test]
fn clone_promote_and_destroy_the_former_origin() {
    let harness = Harness::start();
    let root = harness.create_pool(POOL, &pool_spec(&harness));
    harness.tarn_ok(&["create", "tank/fs"]);
    let fs_mnt = root.join("fs");
    wait_mounted(&fs_mnt);
    let old: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    write_file(&fs_mnt.join("a.bin"), &old);
    fs::create_dir(fs_mnt.join("dir")).unwrap();
    write_file(&fs_mnt.join("dir/b.txt"), b"before the snapshot\n");
    harness.tarn_ok(&["snapshot", "tank/fs@one"]);
    write_file(&fs_mnt.join("a.bin"), b"changed after one\n");
    harness.tarn_ok(&["snapshot", "tank/fs@two"]);
    write_file(&fs_mnt.join("late.txt"), b"after two\n");

    // Clone @one: its files are the snapshot's, and writable.
    harness.tarn_ok(&["clone", "-o", "compression=zstd", "tank/fs@one", "tank/cl"]);
    let cl_mnt = root.join("cl");
    wait_mounted(&cl_mnt);
    assert_eq!(read(&cl_mnt.join("a.bin")), old);
    assert_eq!(read(&cl_mnt.join("dir/b.txt")), b"before the snapshot\n");
    assert!(!cl_mnt.join("late.txt").exists());
    write_file(&cl_mnt.join("dir/b.txt"), b"changed in the clone\n");
    write_file(&cl_mnt.join("new.txt"), b"only in the clone\n");
    assert_eq!(read(&cl_mnt.join("dir/b.txt")), b"changed in the clone\n");
    // The origin is unchanged.
    assert_eq!(read(&fs_mnt.join("a.bin")), b"changed after one\n");
    assert_eq!(read(&fs_mnt.join("dir/b.txt")), b"before the snapshot\n");
    assert!(!fs_mnt.join("new.txt").exists());
    assert_eq!(get(&harness, "origin", "tank/cl"), "tank/fs@one");
    assert_eq!(get(&harness, "origin", "tank/fs"), "-");
    assert_eq!(get(&harness, "clones", "tank/fs@one"), "tank/cl");
    assert_eq!(get(&harness, "compression", "tank/cl"), "zstd");
    check_clean(&harness);

    // The origin snapshot (and so its dataset) cannot go while cloned.
    tarn_fails(&harness, &["destroy", "tank/fs@one"], "dependent clones");
    tarn_fails(&harness, &["destroy", "-r", "tank/fs"], "dependent clones");
    tarn_fails(&harness, &["destroy", "tank/fs@one%two"], "dependent clones");
    assert_eq!(get(&harness, "name", "tank/fs@two"), "tank/fs@two", "a refused range destroys nothing");
    assert!(
        fs_mnt.join("a.bin").exists(),
        "a refused destroy unmounted nothing"
    );

    // Bad input: one line, exit 1, nothing changed.
    let before = names(&harness);
    tarn_fails(&harness, &["clone", "tank/fs", "tank/x"], "not a snapshot");
    tarn_fails(
        &harness,
        &["clone", "tank/fs@nope", "tank/x"],
        "does not exist",
    );
    tarn_fails(
        &harness,
        &["clone", "tank/fs@one", "tank/cl"],
        "already exists",
    );
    tarn_fails(
        &harness,
        &["clone", "tank/fs@one", "tank/no/such"],
        "parent does not exist",
    );
    tarn_fails(&harness, &["clone", "tank/fs@one", "other/x"], "same pool");
    tarn_fails(
        &harness,
        &["clone", "-o", "compression=bogus", "tank/fs@one", "tank/x"],
        "compression",
    );
    tarn_fails(&harness, &["promote", "tank/fs"], "not a cloned filesystem");
    tarn_fails(&harness, &["promote", "tank/nope"], "does not exist");
    tarn_fails(&harness, &["promote", "tank/fs@one"], "not a file system");
    assert_eq!(names(&harness), before);
    check_clean(&harness);

    // Promote: @one moves to the clone, tank/fs becomes its clone.
    harness.tarn_ok(&["promote", "tank/cl"]);
    wait_mounted(&cl_mnt);
    wait_mounted(&fs_mnt);
    let snaps = harness.tarn_ok(&["list", "-t", "snapshot", "-H", "-o", "name", "-r", POOL]);
    assert_eq!(
        snaps.lines().collect::<Vec<_>>(),
        vec!["tank/cl@one", "tank/fs@two"]
    );
    assert_eq!(get(&harness, "origin", "tank/fs"), "tank/cl@one");
    assert_eq!(get(&harness, "origin", "tank/cl"), "-");
    assert_eq!(get(&harness, "clones", "tank/cl@one"), "tank/fs");
    assert_eq!(read(&cl_mnt.join(".zfs/snapshot/one/a.bin")), old);
    assert_eq!(read(&fs_mnt.join("late.txt")), b"after two\n");
    check_clean(&harness);

    // The former origin goes; the clone keeps all it had.
    harness.tarn_ok(&["destroy", "-r", "tank/fs"]);
    assert_eq!(read(&cl_mnt.join("a.bin")), old);
    assert_eq!(read(&cl_mnt.join("new.txt")), b"only in the clone\n");
    assert_eq!(read(&cl_mnt.join("dir/b.txt")), b"changed in the clone\n");
    check_clean(&harness);

    // And everything survives export/import.
    harness.export(POOL);
    let root = harness.import(POOL, &harness.dir.join("vdevs"));
    let cl_mnt = root.join("cl");
    wait_mounted(&cl_mnt);
    assert_eq!(read(&cl_mnt.join("a.bin")), old);
    assert_eq!(
        read(&cl_mnt.join(".zfs/snapshot/one/dir/b.txt")),
        b"before the snapshot\n"
    );
    assert_eq!(get(&harness, "origin", "tank/cl"), "-");
    check_clean(&harness);
    harness.tarn_ok(&["destroy", "-r", "tank/cl"]);
    check_clean(&harness);
}
