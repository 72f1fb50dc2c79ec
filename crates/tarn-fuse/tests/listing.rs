//! Directory listings through a real FUSE mount (needs root and /dev/fuse).
//!
//! The kernel gets listings as READDIRPLUS: each entry comes with its
//! attributes and counts as one lookup, which the kernel gives back with
//! FORGET when it drops the inode. These tests watch tarn-fs's reference
//! counts from the side while the kernel lists, stats, opens, unlinks and
//! forgets, so a reference taken too few (a file freed while open) or too
//! many (an unlinked file never freed) fails here.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tarn_fs::{Cred, Fs};
use tarn_fuse::{mount, MountOptions};
#[path = "../../tarn-fs/tests/support/mod.rs"]
mod support;

fn new_fs(name: &str) -> Arc<Fs> {
    support::single_fs(name)
}

fn opts() -> MountOptions {
    MountOptions { fsname: "tank/listing".into(), readonly: false, allow_other: false, writeback_cache: false }
}

/// Wait up to 20 s for `cond` (FORGETs reach the daemon asynchronously).
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(20), "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `ls -l DIR` in Rust: list, then lstat every entry by path.
fn ls_l(dir: &std::path::Path) -> BTreeMap<String, (u64, u64)> {
    let mut out = BTreeMap::new();
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let md = fs::symlink_metadata(e.path()).unwrap();
        assert_eq!(md.ino(), e.ino(), "d_ino equals st_ino");
        out.insert(e.file_name().into_string().unwrap(), (md.ino(), md.len()));
    }
    out
}

fn drop_kernel_caches() {
    fs::write("/proc/sys/vm/drop_caches", b"2").expect("drop dentries and inodes (needs root)");
}

#[test]
fn every_listed_entry_holds_one_reference_until_the_kernel_forgets_it() {
    const FILES: usize = 1500; // several READDIRPLUS replies
    let fs_ = new_fs("fuselisting");
    let d = fs_.mkdir(fs_.root_ino(), b"d", 0o755, Cred::ROOT).unwrap().ino;
    fs_.forget(d, 1);
    let mut made = BTreeMap::new();
    for i in 0..FILES {
        let name = format!("file-{i:05}");
        let (a, _) = fs_.create(d, name.as_bytes(), 0o644, Cred::ROOT, true).unwrap();
        fs_.write(a.ino, 0, name.as_bytes()).unwrap();
        // The kernel has never seen these: no references.
        fs_.forget(a.ino, 1);
        made.insert(name, a.ino);
    }
    let dir = tempfile::tempdir().unwrap();
    let h = mount(fs_.clone(), dir.path(), opts()).expect("mount");
    let m = h.mountpoint().to_path_buf();

    // One listing with a stat of every entry: the stats are answered from
    // the entries the listing brought (no LOOKUP), so each file has exactly
    // the one reference its listing entry took.
    let listed = ls_l(&m.join("d"));
    assert_eq!(listed.len(), FILES);
    for (name, ino) in &made {
        assert_eq!(listed[name], (*ino, name.len() as u64), "{name}");
        assert_eq!(fs_.references(*ino), 1, "{name}: one reference per listing entry");
    }
    // A second listing finds the kernel's entries in place; it still
    // counts each as one more lookup, and so must we.
    assert_eq!(ls_l(&m.join("d")).len(), FILES);
    for (name, ino) in &made {
        assert_eq!(fs_.references(*ino), 2, "{name} after the second listing");
    }
    // The kernel forgets what it drops, with the count it kept: ours must
    // come back to zero, not stay above.
    drop_kernel_caches();
    eventually("every reference given back", || made.values().all(|&ino| fs_.references(ino) == 0));

    // Unlinked while open, known to the kernel only from a listing.
    ls_l(&m.join("d"));
    let victim = made["file-00042"];
    assert_eq!(fs_.references(victim), 1);
    let mut f = fs::OpenOptions::new().read(true).write(true).open(m.join("d/file-00042")).unwrap();
    assert_eq!(fs_.references(victim), 1, "open used the listed entry");
    fs::remove_file(m.join("d/file-00042")).unwrap();
    assert_eq!(f.metadata().unwrap().nlink(), 0);
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "file-00042", "readable through the open file after unlink");
    f.write_all(b"+tail").unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    s.clear();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "file-00042+tail");
    assert!(fs_.getattr(victim).is_ok(), "kept while open");
    drop(f);
    eventually("the unlinked file freed after its close", || fs_.getattr(victim).is_err());

    // Every other file, listed (one reference each) and removed: all freed.
    for name in made.keys().filter(|n| *n != "file-00042") {
        fs::remove_file(m.join("d").join(name)).unwrap();
    }
    eventually("every removed file freed", || made.values().all(|&ino| fs_.getattr(ino).is_err()));
    assert!(made.values().all(|&ino| fs_.references(ino) == 0));
    assert_eq!(fs::read_dir(m.join("d")).unwrap().count(), 0);
    h.unmount().expect("unmount");
}

#[test]
fn negative_entries_are_cached_and_replaced_by_creates() {
    let fs_ = new_fs("fusenegative");
    let dir = tempfile::tempdir().unwrap();
    let h = mount(fs_.clone(), dir.path(), opts()).expect("mount");
    let m = h.mountpoint().to_path_buf();
    // A miss, then the name made through the mount: visible at once.
    for round in 0..3 {
        let p = m.join(format!("later-{round}"));
        assert_eq!(fs::metadata(&p).unwrap_err().raw_os_error(), Some(libc::ENOENT));
        assert_eq!(fs::metadata(&p).unwrap_err().raw_os_error(), Some(libc::ENOENT));
        match round {
            0 => fs::write(&p, b"file").unwrap(),
            1 => fs::create_dir(&p).unwrap(),
            _ => std::os::unix::fs::symlink("target", &p).unwrap(),
        }
        assert!(fs::symlink_metadata(&p).is_ok(), "round {round}: created name visible");
        fs::rename(&p, m.join("moved")).unwrap();
        assert_eq!(fs::symlink_metadata(&p).unwrap_err().raw_os_error(), Some(libc::ENOENT));
        if round == 1 {
            fs::remove_dir(m.join("moved")).unwrap();
        } else {
            fs::remove_file(m.join("moved")).unwrap();
        }
        assert_eq!(fs::symlink_metadata(m.join("moved")).unwrap_err().raw_os_error(), Some(libc::ENOENT));
    }
    // Hard link onto a cached miss.
    fs::write(m.join("orig"), b"x").unwrap();
    assert!(fs::metadata(m.join("alias")).is_err());
    fs::hard_link(m.join("orig"), m.join("alias")).unwrap();
    assert_eq!(fs::read(m.join("alias")).unwrap(), b"x");
    h.unmount().expect("unmount");
}

/// `errno` of a failed xattr call, or `None` if it succeeded.
fn xattr_errno(r: isize) -> Option<i32> {
    (r < 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap())
}

fn cpath(p: &std::path::Path) -> std::ffi::CString {
    std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap()
}

/// tarn has no POSIX ACLs (ZFS's `acltype=off`): their attributes are
/// refused with EOPNOTSUPP through the mount, not stored unenforced, and
/// one stored by an older tarn is neither listed nor readable. That
/// answer is what lets GNU `ls -l` stop asking for ACLs after the first
/// file of the mount (it remembers the device); with ENODATA it would ask
/// once per file, a GETXATTR round trip each. Checked with the real `ls`
/// under the real `strace`.
#[test]
fn posix_acls_are_refused_and_ls_l_stops_asking() {
    const FILES: usize = 300;
    let fs_ = new_fs("fuseacl");
    let d = fs_.mkdir(fs_.root_ino(), b"d", 0o755, Cred::ROOT).unwrap().ino;
    fs_.forget(d, 1);
    for i in 0..FILES {
        let (a, _) = fs_.create(d, format!("f{i:03}").as_bytes(), 0o644, Cred::ROOT, true).unwrap();
        fs_.forget(a.ino, 1);
    }
    // An ACL attribute stored below the mount (as an older tarn did).
    let (old, _) = fs_.create(d, b"old-acl", 0o644, Cred::ROOT, true).unwrap();
    fs_.setxattr(old.ino, b"system.posix_acl_access", b"\x02\0\0\0", 0).unwrap();
    fs_.setxattr(old.ino, b"user.kept", b"yes", 0).unwrap();
    fs_.forget(old.ino, 1);
    let dir = tempfile::tempdir().unwrap();
    let h = mount(fs_.clone(), dir.path(), opts()).expect("mount");
    let m = h.mountpoint().to_path_buf();

    let f = cpath(&m.join("d/f000"));
    let dir_p = cpath(&m.join("d"));
    let old_p = cpath(&m.join("d/old-acl"));
    let mut buf = vec![0u8; 256];
    // user::rwx group::r-x other::r-x in the kernel's xattr form (a default
    // ACL is only for directories: the kernel itself refuses it on files).
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm) in [(0x01u16, 7u16), (0x04, 5), (0x20, 5)] {
        acl.extend(tag.to_le_bytes());
        acl.extend(perm.to_le_bytes());
        acl.extend(u32::MAX.to_le_bytes());
    }
    for (name, target) in [(c"system.posix_acl_access", &f), (c"system.posix_acl_default", &dir_p)] {
        // SAFETY: valid NUL-terminated strings and buffers of the lengths given.
        unsafe {
            let set = libc::setxattr(target.as_ptr(), name.as_ptr(), acl.as_ptr().cast(), acl.len(), 0);
            assert_eq!(xattr_errno(set as isize), Some(libc::EOPNOTSUPP), "set {name:?}");
            let get = libc::getxattr(target.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len());
            assert_eq!(xattr_errno(get), Some(libc::EOPNOTSUPP), "get {name:?}");
            let rm = libc::removexattr(target.as_ptr(), name.as_ptr());
            assert_eq!(xattr_errno(rm as isize), Some(libc::EOPNOTSUPP), "remove {name:?}");
        }
    }
    // SAFETY: as above.
    let get = unsafe { libc::getxattr(old_p.as_ptr(), c"system.posix_acl_access".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(xattr_errno(get), Some(libc::EOPNOTSUPP), "the ACL stored below the mount is not read");
    // SAFETY: as above.
    let n = unsafe { libc::listxattr(old_p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n >= 0, "listxattr: {}", std::io::Error::last_os_error());
    assert_eq!(&buf[..n as usize], b"user.kept\0", "the stored ACL is not listed, other attributes are");
    // Other attributes work as before.
    // SAFETY: as above.
    unsafe {
        assert_eq!(libc::setxattr(f.as_ptr(), c"user.x".as_ptr(), b"1".as_ptr().cast(), 1, 0), 0);
        assert_eq!(libc::getxattr(f.as_ptr(), c"user.x".as_ptr(), buf.as_mut_ptr().cast(), buf.len()), 1);
    }

    // The real ls -l: it asks for an ACL once, then never again on this
    // device. A regression (ENODATA) would show FILES + 1 calls.
    let out = std::process::Command::new("strace")
        .args(["-f", "-e", "trace=getxattr,lgetxattr", "-o"])
        .arg(dir.path().with_extension("strace"))
        .args(["ls", "-l"])
        .arg(m.join("d"))
        .output()
        .expect("strace (Debian package strace) runs ls -l");
    assert!(out.status.success(), "ls -l: {}", String::from_utf8_lossy(&out.stderr));
    let listing = String::from_utf8_lossy(&out.stdout);
    assert_eq!(listing.lines().filter(|l| l.starts_with('-')).count(), FILES + 1, "{listing}");
    assert!(!listing.lines().any(|l| l.starts_with("-rw-r--r--+")), "no file shown with an ACL");
    let trace = fs::read_to_string(dir.path().with_extension("strace")).unwrap();
    let _ = fs::remove_file(dir.path().with_extension("strace"));
    let acl_calls = trace.lines().filter(|l| l.contains("system.posix_acl_access")).count();
    assert_eq!(acl_calls, 1, "ls -l asked for ACLs {acl_calls} times:\n{trace}");
    h.unmount().expect("unmount");
}
