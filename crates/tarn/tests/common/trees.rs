//! File attributes the replication tests set and compare: xattrs (not
//! following symlinks), times to the nanosecond, owners.

use std::fs;
use std::path::{Path, PathBuf};

use super::walk;

pub fn cpath(p: &Path) -> std::ffi::CString {
    std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("path without NUL")
}

pub fn xattr_set(p: &Path, name: &str, value: &[u8]) {
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings and a live buffer.
    let r = unsafe { libc::setxattr(cpath(p).as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(r, 0, "setxattr {}: {}", p.display(), std::io::Error::last_os_error());
}

pub fn xattr_remove(p: &Path, name: &str) {
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings.
    unsafe { libc::removexattr(cpath(p).as_ptr(), n.as_ptr()) };
}

/// Every extended attribute of `p` (not following symlinks), sorted.
pub fn xattrs(p: &Path) -> Vec<(String, Vec<u8>)> {
    let mut names = vec![0u8; 64 << 10];
    // SAFETY: a live buffer of names.len() bytes.
    let n = unsafe { libc::llistxattr(cpath(p).as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n <= 0 {
        return vec![];
    }
    let mut out = Vec::new();
    for name in names[..n as usize].split(|b| *b == 0).filter(|s| !s.is_empty()) {
        let cname = std::ffi::CString::new(name).unwrap();
        let mut value = vec![0u8; 64 << 10];
        // SAFETY: a live buffer of value.len() bytes.
        let len = unsafe { libc::lgetxattr(cpath(p).as_ptr(), cname.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
        assert!(len >= 0, "lgetxattr {}", p.display());
        out.push((String::from_utf8_lossy(name).into_owned(), value[..len as usize].to_vec()));
    }
    out.sort();
    out
}

pub fn set_times(p: &Path, atime: (i64, i64), mtime: (i64, i64)) {
    let times = [
        libc::timespec { tv_sec: atime.0, tv_nsec: atime.1 },
        libc::timespec { tv_sec: mtime.0, tv_nsec: mtime.1 },
    ];
    // SAFETY: a valid path and two timespecs.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, cpath(p).as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    assert_eq!(r, 0, "utimensat {}: {}", p.display(), std::io::Error::last_os_error());
}

pub fn chown(p: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(gid)).unwrap_or_else(|e| panic!("lchown {}: {e}", p.display()));
}

pub fn files_under(root: &Path) -> Vec<PathBuf> {
    walk(root).into_iter().map(|r| root.join(r)).filter(|p| fs::symlink_metadata(p).is_ok_and(|m| m.is_file())).collect()
}
