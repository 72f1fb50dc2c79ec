//! Set-ID bits and file capabilities after writes, truncates and changes
//! of owner, through a real FUSE mount (needs root and /dev/fuse).
//!
//! The mount hands this job to tarn (`FUSE_HANDLE_KILLPRIV_V2`, so the
//! kernel stops asking for `security.capability` before every write). The
//! same checks run on tmpfs first: the reference that proves each
//! expectation is what Linux does, not a tarn habit.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use tarn_fs::Fs;
use tarn_fuse::{mount, MountOptions};
#[path = "../../tarn-fs/tests/support/mod.rs"]
mod support;

const NOBODY: u32 = 65534;

fn new_fs() -> Arc<Fs> {
    support::single_fs("fuseprivs")
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().mode() & 0o7777
}

fn make(p: &Path, m: u32) {
    fs::write(p, b"0123456789").unwrap();
    fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
    assert_eq!(mode(p), m, "{} set up", p.display());
}

/// Run a shell command as the unprivileged user `nobody` (no CAP_FSETID).
fn as_nobody(script: &str, path: &Path) {
    let out = Command::new("sh")
        .args(["-c", script, "sh"])
        .arg(path)
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .expect("run sh as nobody");
    assert!(out.status.success(), "as nobody: {script} {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
}

fn xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: valid C strings and a buffer of the given length.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (r >= 0).then(|| buf[..r as usize].to_vec())
}

/// A file capability (VFS_CAP_REVISION_2, effective, CAP_NET_RAW permitted).
fn set_capability(path: &Path) {
    let mut v = Vec::new();
    v.extend_from_slice(&(0x0200_0000u32 | 1).to_le_bytes());
    v.extend_from_slice(&(1u32 << 13).to_le_bytes()); // permitted, low word
    v.extend_from_slice(&0u32.to_le_bytes()); // inheritable, low word
    v.extend_from_slice(&0u32.to_le_bytes()); // permitted, high word
    v.extend_from_slice(&0u32.to_le_bytes()); // inheritable, high word
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new("security.capability").unwrap();
    // SAFETY: valid C strings and value slice.
    let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
    assert_eq!(r, 0, "set security.capability on {}: {}", path.display(), std::io::Error::last_os_error());
    assert!(xattr(path, "security.capability").is_some());
}

fn checks(root: &Path) {
    let d = root.join("privs");
    fs::create_dir(&d).unwrap();
    fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();

    // Writes by root (CAP_FSETID) keep set-ID bits.
    let f = d.join("root-write");
    make(&f, 0o6755);
    fs::OpenOptions::new().append(true).open(&f).and_then(|mut h| std::io::Write::write_all(&mut h, b"x")).unwrap();
    assert_eq!(mode(&f), 0o6755, "a write by root keeps set-ID bits");

    // Writes by others drop set-user-ID, and set-group-ID with group execute.
    let f = d.join("user-write");
    make(&f, 0o6777);
    as_nobody("printf x >> \"$1\"", &f);
    assert_eq!(mode(&f), 0o0777, "an unprivileged write drops set-user-ID and set-group-ID");
    assert_eq!(fs::metadata(&f).unwrap().len(), 11);
    // Set-group-ID without group execute (a locking mark): kept for
    // writers in the file's group, dropped for others.
    let f = d.join("user-write-nogx-other");
    make(&f, 0o2767);
    as_nobody("printf x >> \"$1\"", &f);
    assert_eq!(mode(&f), 0o0767, "set-group-ID without group execute goes for a writer outside the group");
    let f = d.join("user-write-nogx");
    make(&f, 0o2767);
    std::os::unix::fs::chown(&f, None, Some(NOBODY)).unwrap();
    assert_eq!(mode(&f), 0o2767, "root's chgrp keeps set-group-ID without group execute");
    as_nobody("printf x >> \"$1\"", &f);
    assert_eq!(mode(&f), 0o2767, "set-group-ID without group execute stays for a writer in the group");
    // Once the bits are gone, writes go on (the kernel now skips the check).
    for _ in 0..3 {
        as_nobody("printf y >> \"$1\"", &f);
    }
    assert_eq!(fs::metadata(&f).unwrap().len(), 14);

    // Truncation: by others drops them, by root keeps them.
    let f = d.join("user-truncate");
    make(&f, 0o4777);
    as_nobody("truncate -s 3 \"$1\"", &f);
    assert_eq!((mode(&f), fs::metadata(&f).unwrap().len()), (0o0777, 3), "an unprivileged truncate drops set-user-ID");
    let f = d.join("root-truncate");
    make(&f, 0o4755);
    fs::OpenOptions::new().write(true).open(&f).unwrap().set_len(2).unwrap();
    assert_eq!(mode(&f), 0o4755, "a truncate by root keeps set-user-ID");

    // A change of owner drops them, even by root, even to the same owner;
    // directories keep theirs.
    let f = d.join("chown");
    make(&f, 0o6755);
    std::os::unix::fs::chown(&f, Some(NOBODY), None).unwrap();
    assert_eq!(mode(&f), 0o0755, "chown drops set-user-ID and set-group-ID (group execute)");
    assert_eq!(fs::metadata(&f).unwrap().uid(), NOBODY);
    let f = d.join("chown-same");
    make(&f, 0o4755);
    std::os::unix::fs::chown(&f, Some(0), Some(0)).unwrap();
    assert_eq!(mode(&f), 0o0755, "chown to the same owner drops set-user-ID too");
    let f = d.join("chown-nogx");
    make(&f, 0o2745);
    std::os::unix::fs::chown(&f, Some(NOBODY), None).unwrap();
    assert_eq!(mode(&f), 0o2745, "set-group-ID without group execute survives chown");
    let sub = d.join("setgid-dir");
    fs::create_dir(&sub).unwrap();
    fs::set_permissions(&sub, fs::Permissions::from_mode(0o2775)).unwrap();
    std::os::unix::fs::chown(&sub, Some(NOBODY), Some(NOBODY)).unwrap();
    assert_eq!(mode(&sub), 0o2775, "a directory keeps set-group-ID across chown");

    // File capabilities go with any write, even root's, and with chown.
    let f = d.join("caps-write");
    make(&f, 0o755);
    set_capability(&f);
    fs::OpenOptions::new().append(true).open(&f).and_then(|mut h| std::io::Write::write_all(&mut h, b"x")).unwrap();
    assert_eq!(xattr(&f, "security.capability"), None, "a write drops security.capability");
    let f = d.join("caps-chown");
    make(&f, 0o755);
    set_capability(&f);
    std::os::unix::fs::chown(&f, Some(NOBODY), None).unwrap();
    assert_eq!(xattr(&f, "security.capability"), None, "chown drops security.capability");
    // Other xattrs stay.
    let f = d.join("user-xattr");
    make(&f, 0o755);
    let p = std::ffi::CString::new(f.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new("user.keep").unwrap();
    // SAFETY: valid C strings and value slice.
    assert_eq!(unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), b"1".as_ptr().cast(), 1, 0) }, 0);
    fs::OpenOptions::new().append(true).open(&f).and_then(|mut h| std::io::Write::write_all(&mut h, b"x")).unwrap();
    assert_eq!(xattr(&f, "user.keep"), Some(b"1".to_vec()));
}

/// A directory every user can reach (the temp dir is 0700 by default).
fn open_tempdir(prefix: &str) -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let m = t.path().join("mnt");
    fs::create_dir(&m).unwrap();
    (t, m)
}

struct Tmpfs(PathBuf);
impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn setid_bits_and_capabilities_on_tmpfs_reference() {
    let (_t, m) = open_tempdir("tarn-privs-ref-");
    let st = Command::new("mount").args(["-t", "tmpfs", "-o", "size=64m,mode=0755", "tarn-privs-ref"]).arg(&m).status().unwrap();
    assert!(st.success(), "mount tmpfs (the tests run as root)");
    let _g = Tmpfs(m.clone());
    checks(&m);
}

#[test]
fn setid_bits_and_capabilities_through_tarn() {
    let (_t, m) = open_tempdir("tarn-privs-");
    let h = mount(new_fs(), &m, MountOptions { fsname: "tank/privs".into(), readonly: false, allow_other: true, writeback_cache: false }).expect("mount");
    checks(h.mountpoint());
    h.unmount().unwrap();
}
