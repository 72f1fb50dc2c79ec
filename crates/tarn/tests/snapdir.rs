//! `.zfs/snapshot` through the real mount (issue 4, test 5): every
//! snapshot of a dataset is browsable read-only at
//! `<mountpoint>/.zfs/snapshot/<name>/`, with the contents, modes, sizes,
//! symlinks and xattrs the dataset had when it was taken, while the live
//! dataset moves on; every way of writing there fails with EROFS; `.zfs`
//! is hidden from the root listing unless `snapdir=visible`.

mod common;

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{hash_file, path_str, random_bytes, write_file, Harness};

fn erofs<T: std::fmt::Debug>(r: std::io::Result<T>, what: &str) {
    match r {
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => {}
        other => panic!("{what}: expected EROFS, got {other:?}"),
    }
}

#[test]
fn snapshots_are_browsable_and_read_only() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(1);
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 3, 128 << 20);
    let mut spec = vec!["raidz1".to_string()];
    spec.extend(devices.iter().map(|p| path_str(p)));
    let root = harness.create_pool("tank", &spec);

    let first = random_bytes(&mut rng, 300_000);
    write_file(&root.join("a"), &first);
    fs::create_dir(root.join("dir")).unwrap();
    write_file(&root.join("dir/b"), b"version one");
    fs::set_permissions(root.join("dir/b"), fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::symlink("dir/b", root.join("link")).unwrap();
    xattr_set(&root.join("a"), "user.tag", b"one");
    harness.tarn_ok(&["snapshot", "tank@one"]);

    // The dataset moves on.
    write_file(&root.join("a"), b"overwritten");
    write_file(&root.join("dir/b"), b"version two, longer");
    fs::remove_file(root.join("link")).unwrap();
    write_file(&root.join("new"), b"only after");
    write_file(&root.join("unread"), &random_bytes(&mut rng, 200_000));
    harness.tarn_ok(&["snapshot", "tank@two"]);
    fs::remove_dir_all(root.join("dir")).unwrap();

    // Reachable by path although hidden from the listing.
    let names: Vec<String> = fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(!names.contains(&".zfs".to_string()), "{names:?}");
    let snapdir = root.join(".zfs/snapshot");
    let mut snaps: Vec<String> = fs::read_dir(&snapdir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    snaps.sort();
    assert_eq!(snaps, ["one", "two"]);

    let one = snapdir.join("one");
    assert_eq!(fs::read(one.join("a")).unwrap(), first);
    assert_eq!(fs::read(one.join("dir/b")).unwrap(), b"version one");
    assert_eq!(fs::metadata(one.join("dir/b")).unwrap().permissions().mode() & 0o777, 0o640);
    assert_eq!(fs::read_link(one.join("link")).unwrap(), Path::new("dir/b"));
    assert_eq!(xattr_get(&one.join("a"), "user.tag").as_deref(), Some(&b"one"[..]));
    assert!(!one.join("new").exists());
    let two = snapdir.join("two");
    assert_eq!(fs::read(two.join("a")).unwrap(), b"overwritten");
    assert_eq!(fs::read(two.join("dir/b")).unwrap(), b"version two, longer");
    assert_eq!(fs::read(two.join("new")).unwrap(), b"only after");
    assert!(!two.join("link").exists());
    // The live dataset is what it is now.
    assert!(!root.join("dir").exists());
    assert_eq!(fs::read(root.join("a")).unwrap(), b"overwritten");

    // Every way of changing a snapshot fails with EROFS.
    erofs(fs::write(one.join("a"), b"x"), "overwrite");
    erofs(fs::OpenOptions::new().append(true).open(one.join("a")), "open for append");
    erofs(fs::File::create(one.join("created")), "create");
    erofs(fs::create_dir(one.join("d")), "mkdir");
    erofs(fs::remove_file(one.join("a")), "unlink");
    erofs(fs::remove_dir(one.join("dir")), "rmdir");
    erofs(fs::rename(one.join("a"), one.join("a2")), "rename");
    erofs(fs::set_permissions(one.join("a"), fs::Permissions::from_mode(0o777)), "chmod");
    erofs(std::os::unix::fs::symlink("x", one.join("s")), "symlink");
    erofs(fs::hard_link(one.join("a"), one.join("h")), "link");
    erofs(xattr_try_set(&one.join("a"), "user.x", b"y"), "setxattr");
    erofs(fs::create_dir(snapdir.join("three")), "mkdir in .zfs/snapshot");
    // And nothing changed.
    assert_eq!(fs::read(one.join("a")).unwrap(), first);
    assert_eq!(hash_file(&one.join("a")), hash_file(&one.join("a")));

    // snapdir=visible lists .zfs in the root directory.
    harness.tarn_ok(&["set", "snapdir=visible", "tank"]);
    let names: Vec<String> = fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.contains(&".zfs".to_string()), "{names:?}");

    // A snapshot destroyed while mounted disappears from the directory,
    // and a file of it held open reads nothing any more (never the blocks
    // the destroy freed).
    // (A file not read before: the kernel's page cache would answer.)
    let mut held = fs::File::open(two.join("unread")).unwrap();
    harness.tarn_ok(&["destroy", "tank@two"]);
    let mut buf = Vec::new();
    let gone = std::io::Read::read_to_end(&mut held, &mut buf);
    assert!(gone.is_err(), "read from a destroyed snapshot gave {gone:?} ({} bytes)", buf.len());
    let snaps: Vec<String> = fs::read_dir(&snapdir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(snaps, ["one"]);
    // Writing to the live dataset still works, and the pool checks clean.
    let mut f = fs::OpenOptions::new().append(true).open(root.join("a")).unwrap();
    f.write_all(b"!").unwrap();
    f.sync_all().unwrap();
    harness.tarn_ok(&["debug", "check", "tank"]);
}

fn cpath(p: &Path) -> std::ffi::CString {
    std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap()
}

fn xattr_try_set(p: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings and a live buffer.
    let r = unsafe { libc::setxattr(cpath(p).as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn xattr_set(p: &Path, name: &str, value: &[u8]) {
    xattr_try_set(p, name, value).unwrap();
}

fn xattr_get(p: &Path, name: &str) -> Option<Vec<u8>> {
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid NUL-terminated strings and a live buffer of buf.len() bytes.
    let r = unsafe { libc::getxattr(cpath(p).as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (r >= 0).then(|| buf[..r as usize].to_vec())
}
