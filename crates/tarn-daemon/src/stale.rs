//! Dead mounts of a daemon that died (issue 9, item 3).
//!
//! A daemon killed with datasets mounted leaves their FUSE mounts behind:
//! the kernel keeps them in the mount table, and every access answers
//! `ENOTCONN` ("Transport endpoint is not connected"). At start, and again
//! before each mount, the daemon finds such mounts — only tarn's, known by
//! their file system type `fuse.tarn`, and only dead ones: a live mount
//! of another daemon answers `statfs` and is left alone — and detaches them,
//! so each dataset mounts exactly once, at its mountpoint. At start only
//! the dead mounts of the pools this daemon re-imports go (their source
//! names the dataset, so a pool of the same name elsewhere counts as
//! ours): another daemon's are its own to clean up. Before a mount, a
//! dead mount on that very mountpoint goes whoever left it; one above it
//! of another pool makes the mount fail naming it (`umount -l` it).

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tarn_fuse::FSTYPE;

/// How long a `statfs` of a mount may take before the mount counts as hung.
const STAT_TIMEOUT: Duration = Duration::from_secs(2);

/// One line of /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq)]
pub struct MountEntry {
    pub path: PathBuf,
    pub fstype: String,
    pub source: String,
}

/// Undo mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() && bytes[i + 1..i + 4].iter().all(|b| (b'0'..=b'7').contains(b)) {
            let value = bytes[i + 1..i + 4].iter().fold(0u32, |v, b| v * 8 + u32::from(b - b'0'));
            out.push(value as u8);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

/// Parses mountinfo text: `id parent major:minor root mountpoint options
/// [optional fields...] - fstype source super-options`.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mountpoint = left.split(' ').nth(4)?;
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let source = right.next().unwrap_or("");
            Some(MountEntry {
                path: PathBuf::from(std::ffi::OsStr::from_bytes(&unescape(mountpoint))),
                fstype: String::from_utf8_lossy(&unescape(fstype)).into_owned(),
                source: String::from_utf8_lossy(&unescape(source)).into_owned(),
            })
        })
        .collect()
}

/// tarn's mounts in this mount namespace, deepest first.
pub fn tarn_mounts() -> Vec<MountEntry> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts: Vec<MountEntry> = parse_mountinfo(&text).into_iter().filter(|m| m.fstype == FSTYPE).collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.path.as_os_str().len()));
    mounts
}

/// What a `stat` of a mount says about it.
#[derive(Debug, PartialEq)]
pub enum Liveness {
    Alive,
    /// Its daemon is gone: ENOTCONN (or ECONNABORTED).
    Dead,
    /// No answer within the timeout: a daemon alive but stuck.
    Hung,
}

pub fn liveness(path: &Path) -> Liveness {
    let (tx, rx) = std::sync::mpsc::channel();
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return Liveness::Alive;
    };
    // statfs, not stat: the kernel answers stat from its attribute cache
    // for a while even after the connection died, but every statfs of a
    // FUSE mount is a request. A hung mount blocks it until its daemon
    // answers: ask from a thread that may be left behind.
    let spawned = std::thread::Builder::new().name("tarn-statfs".into()).spawn(move || {
        // SAFETY: `c` is a valid NUL-terminated path; `buf` is a writable statfs.
        let answer = unsafe {
            let mut buf: libc::statfs = std::mem::zeroed();
            if libc::statfs(c.as_ptr(), &mut buf) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error().raw_os_error())
            }
        };
        let _ = tx.send(answer);
    });
    if spawned.is_err() {
        return Liveness::Hung;
    }
    match rx.recv_timeout(STAT_TIMEOUT) {
        Ok(Ok(_)) => Liveness::Alive,
        Ok(Err(Some(libc::ENOTCONN | libc::ECONNABORTED))) => Liveness::Dead,
        // Any other answer (EACCES, ENOENT of a submount's dead parent…)
        // came from a file system that answered.
        Ok(Err(_)) => Liveness::Alive,
        Err(_) => Liveness::Hung,
    }
}

/// The pool a mount's source (`pool/fs`, `pool/fs@snap`) names.
fn pool_of_source(source: &str) -> &str {
    source.split(['/', '@']).next().unwrap_or(source)
}

/// At start: detach every dead tarn mount of the pools in `pools`.
/// Returns log lines.
pub fn detach_dead_mounts(pools: &[String]) -> Vec<String> {
    let mut log = Vec::new();
    for entry in tarn_mounts() {
        if !pools.iter().any(|p| p == pool_of_source(&entry.source)) || liveness(&entry.path) != Liveness::Dead {
            continue;
        }
        match tarn_fuse::detach(&entry.path) {
            Ok(()) => log.push(format!("detached the dead mount of '{}' at {}", entry.source, entry.path.display())),
            // A submount goes with its parent when the parent goes first.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) || e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => log.push(format!("cannot detach the dead mount at {}: {e}", entry.path.display())),
        }
    }
    log
}

/// Before mounting `dataset` at `path`: detach a dead tarn mount there,
/// refuse a live one, and create the directory, naming the real cause
/// when any of it fails.
pub fn prepare_mountpoint(dataset: &str, path: &Path) -> Result<(), String> {
    for entry in tarn_mounts().into_iter().filter(|m| m.path == path) {
        match liveness(path) {
            Liveness::Dead => tarn_fuse::detach(path).map_err(|e| {
                format!("cannot mount '{dataset}': {} is a dead mount of '{}' that cannot be detached: {e}", path.display(), entry.source)
            })?,
            Liveness::Alive => {
                return Err(format!("cannot mount '{dataset}': {} is already mounted ('{}')", path.display(), entry.source));
            }
            Liveness::Hung => {
                return Err(format!(
                    "cannot mount '{dataset}': {} is mounted by '{}', whose daemon does not answer",
                    path.display(),
                    entry.source
                ));
            }
        }
    }
    match std::fs::create_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) => {
            // Name the real cause: a dead mount above (not ours to detach
            // here), or what the directory's own file system said.
            let cause = match path.ancestors().find(|p| std::fs::symlink_metadata(p).is_ok()) {
                Some(existing) if liveness(existing) == Liveness::Dead => {
                    format!("{} is on a dead mount ({e})", existing.display())
                }
                _ => e.to_string(),
            };
            Err(format!("cannot create mountpoint {}: {cause}", path.display()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_with_escapes_and_optional_fields() {
        let text = "36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 - fuse.tarn tank/x rw,user_id=0\n\
                    37 35 0:5 / /proc rw shared:2 - proc proc rw\n\
                    38 35 0:6 / /x rw - tmpfs none rw\n\
                    garbage line\n";
        let entries = parse_mountinfo(text);
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0], MountEntry { path: "/mnt/a b".into(), fstype: FSTYPE.into(), source: "tank/x".into() });
        assert_eq!(entries[1].fstype, "proc");
        assert_eq!(entries[2].path, PathBuf::from("/x"));
    }

    #[test]
    fn a_mount_source_names_its_pool() {
        assert_eq!(pool_of_source("tank"), "tank");
        assert_eq!(pool_of_source("tank/home/alice"), "tank");
        assert_eq!(pool_of_source("tank@snap"), "tank");
        assert_eq!(pool_of_source("tank/vm@before"), "tank");
    }

    #[test]
    fn live_directories_are_alive() {
        assert_eq!(liveness(Path::new("/")), Liveness::Alive);
        assert_eq!(liveness(Path::new("/does/not/exist")), Liveness::Alive);
    }
}
