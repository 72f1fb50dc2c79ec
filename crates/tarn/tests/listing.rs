//! Listings with attributes (FUSE READDIRPLUS) through the real daemon and
//! mount, with the real `ls`: `ls -l` and `ls -lR` of the dataset, of
//! `.zfs` and of `.zfs/snapshot/<name>` show each entry with the attributes
//! `stat` gives and the inode numbers of the mount's scheme (a snapshot's
//! objects as `k << 48 | object`); snapshot names made or destroyed while
//! mounted appear and disappear at once, even right after a miss.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{DirEntryExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::{path_str, Harness};

const SNAP_SHIFT: u32 = 48;

/// `ls -l ARGS...` (C locale, numeric owners), checked for success.
fn ls(args: &[&str], path: &Path) -> String {
    let out = Command::new("ls").env("LC_ALL", "C").arg("-n").args(args).arg(path).output().expect("run ls");
    assert!(out.status.success(), "ls {args:?} {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// name → first column (type and mode) of each entry line of `ls -l`.
fn modes(listing: &str) -> BTreeMap<String, String> {
    listing
        .lines()
        .filter(|l| !l.starts_with("total") && !l.is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let name = cols[8..].join(" ");
            let name = name.split(" -> ").next().unwrap().to_string();
            (name, cols[0].to_string())
        })
        .collect()
}

/// Every entry of `dir`: d_ino from the listing must equal st_ino.
fn inos(dir: &Path) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let st = fs::symlink_metadata(e.path()).unwrap();
        assert_eq!(e.ino(), st.ino(), "{}: d_ino and st_ino", e.path().display());
        out.insert(e.file_name().into_string().unwrap(), st.ino());
    }
    out
}

#[test]
fn ls_l_of_datasets_and_snapshots() {
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 3, 128 << 20);
    let mut spec = vec!["raidz1".to_string()];
    spec.extend(devices.iter().map(|p| path_str(p)));
    let root = harness.create_pool("tank", &spec);

    fs::create_dir(root.join("dir")).unwrap();
    for i in 0..600 {
        fs::write(root.join(format!("dir/f{i:04}")), vec![b'x'; i]).unwrap();
    }
    fs::set_permissions(root.join("dir/f0007"), fs::Permissions::from_mode(0o4750)).unwrap();
    std::os::unix::fs::symlink("dir/f0001", root.join("link")).unwrap();
    fs::write(root.join("a"), b"first").unwrap();
    harness.tarn_ok(&["snapshot", "tank@one"]);
    fs::write(root.join("a"), b"second, longer").unwrap();
    fs::remove_file(root.join("dir/f0003")).unwrap();
    harness.tarn_ok(&["snapshot", "tank@two"]);

    // The live dataset: ls -lR lists every file with its size.
    let live = ls(&["-lR"], &root);
    assert!(live.contains("-rwsr-x---"), "setuid file shown: {live}");
    assert_eq!(live.lines().filter(|l| l.starts_with('-')).count(), 599 + 1);
    assert!(live.contains("link -> dir/f0001"));

    // .zfs and .zfs/snapshot: read-only directories, listed with ls -l.
    let ctl = ls(&["-a"], &root.join(".zfs"));
    assert_eq!(modes(&ctl).get("snapshot").map(String::as_str), Some("dr-xr-xr-x"), "{ctl}");
    let snapdir = root.join(".zfs/snapshot");
    let listing = ls(&[], &snapdir);
    let m = modes(&listing);
    assert_eq!(m.keys().collect::<Vec<_>>(), ["one", "two"], "{listing}");
    assert!(m.values().all(|t| t.starts_with('d')), "{listing}");

    // Inode numbers: snapshot k's objects are k << 48 | object, the same
    // object number as the live file they were.
    let snaps = inos(&snapdir);
    let live_inos = inos(&root.join("dir"));
    for (name, snap_root) in &snaps {
        let k = snap_root >> SNAP_SHIFT;
        assert!(k >= 1, "{name}: snapshot inode {snap_root:#x}");
        let inside = inos(&snapdir.join(name).join("dir"));
        for (file, ino) in &inside {
            assert_eq!(ino >> SNAP_SHIFT, k, "{name}/dir/{file}");
            if let Some(live) = live_inos.get(file) {
                assert_eq!(ino & ((1 << SNAP_SHIFT) - 1), *live, "{name}/dir/{file} is the live object");
            }
        }
        assert_eq!(inside.len(), if name == "one" { 600 } else { 599 });
    }
    assert_ne!(snaps["one"] >> SNAP_SHIFT, snaps["two"] >> SNAP_SHIFT);

    // ls -lR inside a snapshot shows the files as they were, sizes included.
    let one = ls(&["-lR"], &snapdir.join("one"));
    let line = one.lines().find(|l| l.ends_with(" a")).expect("a listed");
    assert_eq!(line.split_whitespace().nth(4), Some("5"), "size of a in @one: {line}");
    assert!(one.contains("f0003"));
    assert!(one.contains("-rwsr-x---"));
    let two = ls(&["-lR"], &snapdir.join("two"));
    let line = two.lines().find(|l| l.ends_with(" a")).expect("a listed");
    assert_eq!(line.split_whitespace().nth(4), Some("14"), "size of a in @two: {line}");
    assert!(!two.contains("f0003"));

    // A name missed in .zfs/snapshot is not remembered: a snapshot taken
    // right after is there at once; a destroyed one goes at once.
    assert!(fs::metadata(snapdir.join("three")).is_err());
    harness.tarn_ok(&["snapshot", "tank@three"]);
    assert!(fs::metadata(snapdir.join("three")).unwrap().is_dir());
    assert_eq!(fs::read(snapdir.join("three/a")).unwrap(), b"second, longer");
    assert!(modes(&ls(&[], &snapdir)).contains_key("three"));
    harness.tarn_ok(&["destroy", "tank@two"]);
    assert_eq!(modes(&ls(&[], &snapdir)).keys().collect::<Vec<_>>(), ["one", "three"]);

    // snapdir=visible: ls -la of the root shows .zfs as a directory.
    harness.tarn_ok(&["set", "snapdir=visible", "tank"]);
    let top = modes(&ls(&["-a"], &root));
    assert_eq!(top.get(".zfs").map(String::as_str), Some("dr-xr-xr-x"), "{top:?}");

    // Listings took references in the snapshots' file systems too; the
    // kernel gives them back, and the pool stays clean.
    fs::write("/proc/sys/vm/drop_caches", b"2").unwrap();
    assert_eq!(inos(&snapdir.join("one/dir")).len(), 600);
    harness.tarn_ok(&["debug", "check", "tank"]);
}
