//! A POSIX conformance suite of our own, runnable against any directory.
//!
//! `run_posix_suite(root)` runs every check in its own subdirectory of
//! `root`, collects every failure (a check that panics), and panics at the
//! end with the list, so one run shows everything that is wrong.
//!
//! Every expectation here is POSIX (or Linux VFS behaviour that every local
//! file system shares); `posix.rs` runs the suite on tmpfs as a reference
//! before trusting it on a tarn mount. Where POSIX allows two answers (a
//! rename over a non-empty directory: ENOTEMPTY or EEXIST) both are allowed.

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

type Check = fn(&Path);

/// Every check, by name.
pub const CHECKS: &[(&str, Check)] = &[
    ("open_flags", open_flags),
    ("read_write_patterns", read_write_patterns),
    ("truncate_up_and_down", truncate_up_and_down),
    ("rename_files", rename_files),
    ("rename_directories", rename_directories),
    ("unlink_open_file", unlink_open_file),
    ("hard_links", hard_links),
    ("symlinks", symlinks),
    ("chmod_chown", chmod_chown),
    ("utimens", utimens),
    ("timestamps_follow_changes", timestamps_follow_changes),
    ("xattrs", xattrs),
    ("readdir_many_entries", readdir_many_entries),
    ("sparse_file", sparse_file),
    ("large_offsets", large_offsets),
    ("mkdir_rmdir_errors", mkdir_rmdir_errors),
    ("name_lengths", name_lengths),
    ("statfs_sane", statfs_sane),
    ("fsync_variants", fsync_variants),
    ("mknod_fifo", mknod_fifo),
    ("mmap_shared_writes", mmap_shared_writes),
    ("truncate_races", truncate_races),
];

/// Run every check below `root`; panic with the list of failures.
pub fn run_posix_suite(root: &Path) {
    let mut failures = Vec::new();
    for (name, check) in CHECKS {
        let dir = root.join(name);
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        let started = Instant::now();
        let result = std::panic::catch_unwind(|| check(&dir));
        match result {
            Ok(()) => eprintln!("posix: {name}: ok ({} ms)", started.elapsed().as_millis()),
            Err(payload) => {
                let message = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "(non-string panic)".into());
                eprintln!("posix: {name}: FAILED: {message}");
                failures.push(format!("{name}: {message}"));
            }
        }
    }
    assert!(failures.is_empty(), "{} POSIX check(s) failed under {}:\n{}", failures.len(), root.display(), failures.join("\n"));
}

// ---------------------------------------------------------------------------
// Helpers.

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("no NUL in path")
}

/// Assert that `result` failed with one of `allowed` errnos.
#[track_caller]
fn expect_errno<T: std::fmt::Debug>(result: io::Result<T>, allowed: &[i32], what: &str) {
    match result {
        Ok(value) => panic!("{what}: succeeded ({value:?}), expected errno {allowed:?}"),
        Err(e) => {
            let errno = e.raw_os_error().unwrap_or(-1);
            assert!(allowed.contains(&errno), "{what}: got {e} (errno {errno}), expected errno {allowed:?}");
        }
    }
}

fn libc_result(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn pattern(len: usize, salt: u64) -> Vec<u8> {
    // xorshift: cheap, deterministic, incompressible enough.
    let mut state = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn read_all(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn read_at(file: &File, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, offset).unwrap_or_else(|e| panic!("pread {len} at {offset}: {e}"));
    buf
}

fn lstat(path: &Path) -> fs::Metadata {
    fs::symlink_metadata(path).unwrap_or_else(|e| panic!("lstat {}: {e}", path.display()))
}

fn set_times(path: &Path, atime: libc::timespec, mtime: libc::timespec, flags: libc::c_int) -> io::Result<libc::c_int> {
    let times = [atime, mtime];
    // SAFETY: valid C string and a two-element timespec array.
    libc_result(unsafe { libc::utimensat(libc::AT_FDCWD, cpath(path).as_ptr(), times.as_ptr(), flags) })
}

fn ts(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec { tv_sec: sec as libc::time_t, tv_nsec: nsec as _ }
}

fn ts_special(nsec: i64) -> libc::timespec {
    libc::timespec { tv_sec: 0, tv_nsec: nsec as _ }
}

fn now_sec() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_secs() as i64
}

fn statvfs(path: &Path) -> libc::statvfs {
    // SAFETY: zeroed statvfs is a valid out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out-pointer.
    libc_result(unsafe { libc::statvfs(cpath(path).as_ptr(), &mut st) }).expect("statvfs");
    st
}

fn free_bytes(path: &Path) -> u64 {
    let st = statvfs(path);
    st.f_bfree * st.f_frsize
}

/// Free bytes once they have not changed for 6 s (longer than the
/// daemon's 5 s txg timeout), or after 60 s, whichever comes first.
fn settled_free_bytes(path: &Path) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = free_bytes(path);
    let mut since = Instant::now();
    while since.elapsed() < Duration::from_secs(6) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        let now = free_bytes(path);
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
    last
}

fn syncfs(path: &Path) {
    let dir = File::open(path).expect("open for syncfs");
    // SAFETY: valid fd.
    libc_result(unsafe { libc::syncfs(dir.as_raw_fd()) }).expect("syncfs");
}

// ---------------------------------------------------------------------------
// Checks.

fn open_flags(dir: &Path) {
    let path = dir.join("f");
    expect_errno(File::open(&path), &[libc::ENOENT], "open missing without O_CREAT");
    fs::write(&path, b"hello world").unwrap();
    expect_errno(OpenOptions::new().write(true).create_new(true).open(&path), &[libc::EEXIST], "O_CREAT|O_EXCL on existing file");

    // O_TRUNC empties the file.
    drop(OpenOptions::new().write(true).truncate(true).open(&path).unwrap());
    assert_eq!(lstat(&path).len(), 0, "O_TRUNC must leave size 0");

    // O_APPEND writes at the end whatever the offset.
    fs::write(&path, b"0123456789").unwrap();
    {
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.seek(SeekFrom::Start(0)).unwrap();
        file.write_all(b"AB").unwrap();
        let other = OpenOptions::new().write(true).open(&path).unwrap();
        other.write_all_at(b"xyzxyzxyzxyzxyz", 0).unwrap(); // grows to 15
        file.write_all(b"CD").unwrap();
    }
    assert_eq!(read_all(&path), b"xyzxyzxyzxyzxyzCD", "O_APPEND must write at the current end");

    // Write on a read-only descriptor, read on a write-only one.
    let mut reader = File::open(&path).unwrap();
    expect_errno(reader.write(b"x"), &[libc::EBADF], "write on O_RDONLY fd");
    let mut writer = OpenOptions::new().write(true).open(&path).unwrap();
    let mut buf = [0u8; 4];
    expect_errno(writer.read(&mut buf), &[libc::EBADF], "read on O_WRONLY fd");

    // Directories.
    expect_errno(OpenOptions::new().write(true).open(dir), &[libc::EISDIR], "open a directory for writing");
    expect_errno(
        OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY).open(&path),
        &[libc::ENOTDIR],
        "O_DIRECTORY on a file",
    );
    expect_errno(File::open(path.join("below")), &[libc::ENOTDIR], "file used as a directory");

    // O_CREAT with a mode; O_EXCL on a dangling symlink must not follow it.
    let created = dir.join("mode");
    drop(OpenOptions::new().write(true).create_new(true).mode(0o600).open(&created).unwrap());
    assert_eq!(lstat(&created).permissions().mode() & 0o777, 0o600, "mode given to O_CREAT");
    std::os::unix::fs::symlink("nowhere", dir.join("dangling")).unwrap();
    expect_errno(
        OpenOptions::new().write(true).create_new(true).open(dir.join("dangling")),
        &[libc::EEXIST],
        "O_CREAT|O_EXCL on a dangling symlink",
    );
    assert!(!dir.join("nowhere").exists(), "O_EXCL must not create the symlink's target");
}

fn read_write_patterns(dir: &Path) {
    let path = dir.join("f");
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
    // A gap inside one block reads as zeros.
    file.write_all_at(b"abc", 0).unwrap();
    file.write_all_at(b"xyz", 10_000).unwrap();
    let data = read_at(&file, 0, 10_003);
    assert_eq!(&data[..3], b"abc");
    assert!(data[3..10_000].iter().all(|b| *b == 0), "gap before a later write must read zero");
    assert_eq!(&data[10_000..], b"xyz");
    // Unaligned overwrites across block boundaries, compared with a model.
    let mut model = data.clone();
    model.resize(1 << 20, 0);
    file.set_len(1 << 20).unwrap();
    let mut state = 12345u64;
    for round in 0..200u64 {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let offset = (state >> 33) as usize % (1 << 20);
        let len = ((state >> 13) as usize % 70_000).min((1 << 20) - offset);
        let chunk = pattern(len, round);
        file.write_all_at(&chunk, offset as u64).unwrap();
        model[offset..offset + len].copy_from_slice(&chunk);
    }
    assert_eq!(read_at(&file, 0, 1 << 20), model, "file differs from model after unaligned writes");
    // A short read at the end of file, and reads past it.
    let mut buf = vec![0u8; 100];
    assert_eq!(file.read_at(&mut buf, (1 << 20) - 10).unwrap(), 10, "read crossing EOF");
    assert_eq!(file.read_at(&mut buf, (1 << 20) + 10).unwrap(), 0, "read past EOF");
    // A large write in one call.
    let big = pattern(8 << 20, 99);
    fs::write(dir.join("big"), &big).unwrap();
    assert!(read_all(&dir.join("big")) == big, "8 MiB file reads back differently");
}

fn truncate_up_and_down(dir: &Path) {
    let path = dir.join("f");
    let data = pattern(300_000, 1);
    fs::write(&path, &data).unwrap();
    let file = OpenOptions::new().read(true).write(true).open(&path).unwrap();
    file.set_len(5_000).unwrap();
    assert_eq!(file.metadata().unwrap().len(), 5_000);
    assert_eq!(read_all(&path), data[..5_000], "truncate down keeps the prefix");
    // Up again: the dropped bytes must not come back.
    file.set_len(200_000).unwrap();
    let after = read_all(&path);
    assert_eq!(after.len(), 200_000);
    assert_eq!(after[..5_000], data[..5_000]);
    assert!(after[5_000..].iter().all(|b| *b == 0), "bytes beyond an earlier truncate must read zero");
    // truncate(2) by path, to zero and to an unaligned size.
    fs::write(&path, &data).unwrap();
    // SAFETY: valid C string.
    libc_result(unsafe { libc::truncate(cpath(&path).as_ptr(), 131_073) }).unwrap();
    assert_eq!(read_all(&path), data[..131_073]);
    libc_result(unsafe { libc::truncate(cpath(&path).as_ptr(), 0) }).unwrap();
    assert_eq!(lstat(&path).len(), 0);
    // Writes after truncate extend from the new size.
    let mut appender = OpenOptions::new().append(true).open(&path).unwrap();
    appender.write_all(b"tail").unwrap();
    assert_eq!(read_all(&path), b"tail");
    expect_errno(
        OpenOptions::new().write(true).open(dir).and_then(|f| f.set_len(0)),
        &[libc::EISDIR],
        "truncate a directory",
    );
    // SAFETY: valid C string.
    expect_errno(libc_result(unsafe { libc::truncate(cpath(&path).as_ptr(), -1) }), &[libc::EINVAL], "truncate to -1");
}

fn rename_files(dir: &Path) {
    let (a, b) = (dir.join("a"), dir.join("b"));
    fs::write(&a, b"from a").unwrap();
    fs::write(&b, b"old b").unwrap();
    let ino_a = lstat(&a).ino();
    let keep_b_open = File::open(&b).unwrap();
    fs::rename(&a, &b).unwrap();
    assert!(!a.exists(), "rename source still exists");
    assert_eq!(read_all(&b), b"from a");
    assert_eq!(lstat(&b).ino(), ino_a, "rename keeps the inode");
    // The replaced file lives on through its open descriptor.
    assert_eq!(read_at(&keep_b_open, 0, 5), b"old b");
    // Across directories.
    let sub = dir.join("sub");
    fs::create_dir(&sub).unwrap();
    fs::rename(&b, sub.join("moved")).unwrap();
    assert_eq!(read_all(&sub.join("moved")), b"from a");
    assert!(!b.exists());
    // Renaming a name onto itself, or onto another link of the same inode, changes nothing.
    fs::rename(sub.join("moved"), sub.join("moved")).unwrap();
    fs::hard_link(sub.join("moved"), sub.join("twin")).unwrap();
    fs::rename(sub.join("moved"), sub.join("twin")).unwrap();
    assert!(sub.join("moved").exists() && sub.join("twin").exists(), "rename between links of one inode is a no-op");
    // File over directory and directory over file.
    let d = dir.join("d");
    fs::create_dir(&d).unwrap();
    expect_errno(fs::rename(sub.join("twin"), &d), &[libc::EISDIR], "rename a file over a directory");
    expect_errno(fs::rename(&d, sub.join("twin")), &[libc::ENOTDIR], "rename a directory over a file");
    expect_errno(fs::rename(dir.join("missing"), dir.join("x")), &[libc::ENOENT], "rename a missing name");
    expect_errno(fs::rename(sub.join("twin"), dir.join("missing/x")), &[libc::ENOENT], "rename into a missing directory");
    // RENAME_NOREPLACE (Linux renameat2): EEXIST, nothing changed.
    fs::write(dir.join("p"), b"p").unwrap();
    fs::write(dir.join("q"), b"q").unwrap();
    // SAFETY: valid C strings.
    let r = libc_result(unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            cpath(&dir.join("p")).as_ptr(),
            libc::AT_FDCWD,
            cpath(&dir.join("q")).as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    });
    expect_errno(r, &[libc::EEXIST], "renameat2 RENAME_NOREPLACE over an existing name");
    assert_eq!(read_all(&dir.join("q")), b"q");
}

fn rename_directories(dir: &Path) {
    let (a, b) = (dir.join("a"), dir.join("b"));
    fs::create_dir(&a).unwrap();
    fs::write(a.join("inside"), b"1").unwrap();
    fs::create_dir(&b).unwrap();
    // Over an empty directory: allowed.
    fs::rename(&a, &b).unwrap();
    assert!(!a.exists());
    assert_eq!(read_all(&b.join("inside")), b"1");
    // Over a non-empty directory: ENOTEMPTY or EEXIST.
    let c = dir.join("c");
    fs::create_dir(&c).unwrap();
    expect_errno(fs::rename(&c, &b), &[libc::ENOTEMPTY, libc::EEXIST], "rename over a non-empty directory");
    assert!(b.join("inside").exists(), "failed rename must leave the target intact");
    // Into its own subtree: EINVAL.
    fs::create_dir_all(b.join("x/y")).unwrap();
    expect_errno(fs::rename(&b, b.join("x/y/b")), &[libc::EINVAL], "rename a directory into its own subtree");
    expect_errno(fs::rename(&b, b.join("self")), &[libc::EINVAL], "rename a directory into itself");
    // '..' follows the move.
    let moved = c.join("moved");
    fs::rename(b.join("x"), &moved).unwrap();
    assert_eq!(lstat(&moved.join("..")).ino(), lstat(&c).ino(), "'..' of a moved directory names its new parent");
    assert!(lstat(&moved.join("y")).file_type().is_dir());
    // Renaming '.' or '..' is refused.
    expect_errno(fs::rename(c.join("."), dir.join("dot")), &[libc::EINVAL, libc::EBUSY], "rename '.'");
}

fn unlink_open_file(dir: &Path) {
    let path = dir.join("f");
    let size = 8usize << 20;
    let data = pattern(size, 7);
    {
        let mut file = File::create(&path).unwrap();
        file.write_all(&data).unwrap();
        file.sync_all().unwrap();
    }
    syncfs(dir);
    let free_before_unlink = free_bytes(dir);
    let file = OpenOptions::new().read(true).write(true).open(&path).unwrap();
    fs::remove_file(&path).unwrap();
    expect_errno(fs::symlink_metadata(&path), &[libc::ENOENT], "stat after unlink");
    assert!(!fs::read_dir(dir).unwrap().any(|e| e.unwrap().file_name() == "f"), "unlinked name still listed");
    assert_eq!(file.metadata().unwrap().nlink(), 0, "fstat of an unlinked file: nlink 0");
    assert!(read_at(&file, 0, size) == data, "unlinked file must stay readable through its fd");
    file.write_all_at(b"still writable", 100).unwrap();
    assert_eq!(read_at(&file, 100, 14), b"still writable");
    file.sync_all().unwrap();
    drop(file);
    // After the last close the space comes back (allow background freeing).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        syncfs(dir);
        let freed = free_bytes(dir).saturating_sub(free_before_unlink);
        if freed >= (size / 2) as u64 {
            break;
        }
        assert!(Instant::now() < deadline, "only {freed} bytes freed 30 s after closing an unlinked {size}-byte file");
        std::thread::sleep(Duration::from_millis(200));
    }
    expect_errno(fs::remove_file(&path), &[libc::ENOENT], "unlink twice");
}

fn hard_links(dir: &Path) {
    let (a, b) = (dir.join("a"), dir.join("b"));
    fs::write(&a, b"shared").unwrap();
    fs::hard_link(&a, &b).unwrap();
    let (ma, mb) = (lstat(&a), lstat(&b));
    assert_eq!(ma.ino(), mb.ino(), "hard links share the inode");
    assert_eq!((ma.nlink(), mb.nlink()), (2, 2), "nlink after link");
    OpenOptions::new().write(true).open(&b).unwrap().write_all_at(b"SH", 0).unwrap();
    assert_eq!(read_all(&a), b"SHared", "a write through one link is seen through the other");
    let sub = dir.join("sub");
    fs::create_dir(&sub).unwrap();
    fs::hard_link(&a, sub.join("c")).unwrap();
    assert_eq!(lstat(&a).nlink(), 3);
    fs::remove_file(&a).unwrap();
    assert_eq!(lstat(&b).nlink(), 2, "nlink after unlinking one name");
    assert_eq!(read_all(&sub.join("c")), b"SHared");
    expect_errno(fs::hard_link(&b, sub.join("c")), &[libc::EEXIST], "link onto an existing name");
    expect_errno(fs::hard_link(&sub, dir.join("dirlink")), &[libc::EPERM], "hard link to a directory");
    expect_errno(fs::hard_link(dir.join("missing"), dir.join("x")), &[libc::ENOENT], "link a missing file");
    // Metadata is per inode.
    fs::set_permissions(&b, fs::Permissions::from_mode(0o604)).unwrap();
    assert_eq!(lstat(&sub.join("c")).permissions().mode() & 0o777, 0o604);
}

fn symlinks(dir: &Path) {
    let target = dir.join("target");
    fs::write(&target, b"pointed at").unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink("target", &link).unwrap();
    assert_eq!(fs::read_link(&link).unwrap(), PathBuf::from("target"));
    let l = lstat(&link);
    assert!(l.file_type().is_symlink(), "lstat sees the link");
    assert_eq!(l.len(), "target".len() as u64, "a symlink's size is its target's length");
    let s = fs::metadata(&link).unwrap();
    assert!(s.is_file(), "stat follows the link");
    assert_eq!(s.ino(), lstat(&target).ino());
    assert_eq!(read_all(&link), b"pointed at");
    // Dangling.
    let dangling = dir.join("dangling");
    std::os::unix::fs::symlink("no/such/file", &dangling).unwrap();
    assert!(lstat(&dangling).file_type().is_symlink());
    expect_errno(fs::metadata(&dangling), &[libc::ENOENT], "stat a dangling symlink");
    // O_NOFOLLOW.
    expect_errno(
        OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(&link),
        &[libc::ELOOP],
        "O_NOFOLLOW on a symlink",
    );
    // Through a symlink to a directory; a long target; a loop.
    fs::create_dir(dir.join("real")).unwrap();
    fs::write(dir.join("real/inner"), b"in").unwrap();
    std::os::unix::fs::symlink("real", dir.join("alias")).unwrap();
    assert_eq!(read_all(&dir.join("alias/inner")), b"in");
    let long = "abcdefghi/".repeat(100);
    std::os::unix::fs::symlink(&long, dir.join("long")).unwrap();
    assert_eq!(fs::read_link(dir.join("long")).unwrap(), PathBuf::from(&long));
    std::os::unix::fs::symlink("loop", dir.join("loop")).unwrap();
    expect_errno(fs::metadata(dir.join("loop")), &[libc::ELOOP], "stat a self-referencing symlink");
    expect_errno(std::os::unix::fs::symlink("x", &link), &[libc::EEXIST], "symlink onto an existing name");
    expect_errno(fs::read_link(&target), &[libc::EINVAL], "readlink of a regular file");
    // Removing the link leaves the target.
    fs::remove_file(&link).unwrap();
    assert!(target.exists());
}

fn chmod_chown(dir: &Path) {
    let path = dir.join("f");
    fs::write(&path, b"x").unwrap();
    for mode in [0o000, 0o644, 0o755, 0o4755, 0o2750, 0o1777, 0o7777] {
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(lstat(&path).permissions().mode() & 0o7777, mode, "chmod {mode:o}");
    }
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::chown(&path, Some(1234), Some(5678)).unwrap();
    let m = lstat(&path);
    assert_eq!((m.uid(), m.gid()), (1234, 5678), "chown");
    std::os::unix::fs::chown(&path, None, Some(42)).unwrap();
    assert_eq!((lstat(&path).uid(), lstat(&path).gid()), (1234, 42), "chown of the group only");
    // Root reads a file whose mode grants nothing.
    fs::set_permissions(&path, fs::Permissions::from_mode(0o000)).unwrap();
    assert_eq!(read_all(&path), b"x", "root ignores permission bits for reading");
    // fchmod and a directory.
    let file = File::open(&path).unwrap();
    // SAFETY: valid fd.
    libc_result(unsafe { libc::fchmod(file.as_raw_fd(), 0o600) }).unwrap();
    assert_eq!(lstat(&path).permissions().mode() & 0o7777, 0o600, "fchmod");
    let sub = dir.join("sub");
    fs::create_dir(&sub).unwrap();
    fs::set_permissions(&sub, fs::Permissions::from_mode(0o3711)).unwrap();
    assert_eq!(lstat(&sub).permissions().mode() & 0o7777, 0o3711, "chmod a directory");
    std::os::unix::fs::chown(&sub, Some(7), Some(8)).unwrap();
    assert_eq!((lstat(&sub).uid(), lstat(&sub).gid()), (7, 8));
    // lchown changes the link, not its target.
    let link = dir.join("link");
    std::os::unix::fs::symlink("f", &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(99), Some(98)).unwrap();
    assert_eq!((lstat(&link).uid(), lstat(&link).gid()), (99, 98), "lchown");
    assert_eq!(lstat(&path).uid(), 1234, "lchown must not touch the target");
    expect_errno(fs::set_permissions(dir.join("missing"), fs::Permissions::from_mode(0o600)), &[libc::ENOENT], "chmod a missing file");
    // chmod changes ctime, not mtime.
    set_times(&path, ts(1_000_000, 0), ts(1_000_000, 0), 0).unwrap();
    let before = lstat(&path);
    std::thread::sleep(Duration::from_millis(20));
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let after = lstat(&path);
    assert_eq!(after.mtime(), 1_000_000, "chmod must not change mtime");
    assert!((after.ctime(), after.ctime_nsec()) > (before.ctime(), before.ctime_nsec()), "chmod must change ctime");
}

fn utimens(dir: &Path) {
    let path = dir.join("f");
    fs::write(&path, b"x").unwrap();
    set_times(&path, ts(1_000_000_001, 123_456_789), ts(1_234_567_890, 500_000_000), 0).unwrap();
    let m = lstat(&path);
    assert_eq!((m.atime(), m.atime_nsec()), (1_000_000_001, 123_456_789), "explicit atime with nanoseconds");
    assert_eq!((m.mtime(), m.mtime_nsec()), (1_234_567_890, 500_000_000), "explicit mtime with nanoseconds");
    // UTIME_OMIT keeps atime, UTIME_NOW sets mtime to now.
    let now = now_sec();
    set_times(&path, ts_special(libc::UTIME_OMIT), ts_special(libc::UTIME_NOW), 0).unwrap();
    let m = lstat(&path);
    assert_eq!((m.atime(), m.atime_nsec()), (1_000_000_001, 123_456_789), "UTIME_OMIT keeps atime");
    assert!((m.mtime() - now).abs() <= 5, "UTIME_NOW sets mtime to now: {} vs {now}", m.mtime());
    // Both NOW / mtime OMIT.
    set_times(&path, ts_special(libc::UTIME_NOW), ts_special(libc::UTIME_OMIT), 0).unwrap();
    let m2 = lstat(&path);
    assert!((m2.atime() - now).abs() <= 5, "UTIME_NOW sets atime");
    assert_eq!((m2.mtime(), m2.mtime_nsec()), (m.mtime(), m.mtime_nsec()), "UTIME_OMIT keeps mtime");
    // Times before 1970 and far in the future.
    set_times(&path, ts(-1_000_000, 0), ts(4_102_444_800, 1), 0).unwrap();
    let m = lstat(&path);
    assert_eq!(m.atime(), -1_000_000, "negative (pre-1970) atime");
    assert_eq!((m.mtime(), m.mtime_nsec()), (4_102_444_800, 1), "mtime in 2100");
    // AT_SYMLINK_NOFOLLOW sets the link's own times.
    let link = dir.join("link");
    std::os::unix::fs::symlink("f", &link).unwrap();
    set_times(&link, ts(500, 0), ts(600, 0), libc::AT_SYMLINK_NOFOLLOW).unwrap();
    assert_eq!(lstat(&link).mtime(), 600, "utimensat AT_SYMLINK_NOFOLLOW on the link");
    assert_eq!(lstat(&path).mtime(), 4_102_444_800, "the target's mtime is untouched");
    // A directory.
    set_times(dir, ts(10, 0), ts(20, 0), 0).unwrap();
    assert_eq!(lstat(dir).mtime(), 20);
    // futimens through an fd.
    let file = File::open(&path).unwrap();
    let times = [ts(77, 7), ts(88, 8)];
    // SAFETY: valid fd and array.
    libc_result(unsafe { libc::futimens(file.as_raw_fd(), times.as_ptr()) }).unwrap();
    let m = lstat(&path);
    assert_eq!((m.atime(), m.atime_nsec(), m.mtime(), m.mtime_nsec()), (77, 7, 88, 8), "futimens");
}

fn timestamps_follow_changes(dir: &Path) {
    let old = ts(1_000_000, 0);
    let path = dir.join("f");
    fs::write(&path, b"x").unwrap();
    // A write changes mtime and ctime.
    set_times(&path, old, old, 0).unwrap();
    OpenOptions::new().write(true).open(&path).unwrap().write_all_at(b"y", 5).unwrap();
    assert!(lstat(&path).mtime() > 1_000_000, "write must update mtime");
    // A size-changing truncate changes mtime.
    set_times(&path, old, old, 0).unwrap();
    OpenOptions::new().write(true).open(&path).unwrap().set_len(100).unwrap();
    assert!(lstat(&path).mtime() > 1_000_000, "truncate must update mtime");
    // Creating, removing and renaming entries change the directory's mtime.
    let sub = dir.join("sub");
    fs::create_dir(&sub).unwrap();
    for (what, action) in [
        ("create", Box::new(|d: &Path| fs::write(d.join("n"), b"").unwrap()) as Box<dyn Fn(&Path)>),
        ("rename", Box::new(|d: &Path| fs::rename(d.join("n"), d.join("m")).unwrap())),
        ("unlink", Box::new(|d: &Path| fs::remove_file(d.join("m")).unwrap())),
        ("mkdir", Box::new(|d: &Path| fs::create_dir(d.join("s")).unwrap())),
        ("rmdir", Box::new(|d: &Path| fs::remove_dir(d.join("s")).unwrap())),
    ] {
        set_times(&sub, old, old, 0).unwrap();
        action(&sub);
        assert!(lstat(&sub).mtime() > 1_000_000, "{what} in a directory must update its mtime");
    }
    // Reading does not change mtime.
    set_times(&path, old, old, 0).unwrap();
    let _ = read_all(&path);
    assert_eq!(lstat(&path).mtime(), 1_000_000, "read must not update mtime");
}

fn getxattr(path: &Path, name: &str) -> io::Result<Vec<u8>> {
    let name = CString::new(name).unwrap();
    let mut buf = vec![0u8; 70_000];
    // SAFETY: valid C strings and buffer.
    let n = unsafe { libc::getxattr(cpath(path).as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

fn setxattr(path: &Path, name: &str, value: &[u8], flags: libc::c_int) -> io::Result<libc::c_int> {
    let name = CString::new(name).unwrap();
    // SAFETY: valid C strings and buffer.
    libc_result(unsafe { libc::setxattr(cpath(path).as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), flags) })
}

fn removexattr(path: &Path, name: &str) -> io::Result<libc::c_int> {
    let name = CString::new(name).unwrap();
    // SAFETY: valid C strings.
    libc_result(unsafe { libc::removexattr(cpath(path).as_ptr(), name.as_ptr()) })
}

fn listxattr(path: &Path) -> Vec<String> {
    let mut buf = vec![0u8; 65_536];
    // SAFETY: valid C string and buffer.
    let n = unsafe { libc::listxattr(cpath(path).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n >= 0, "listxattr: {}", io::Error::last_os_error());
    buf[..n as usize]
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

fn xattrs(dir: &Path) {
    let path = dir.join("f");
    fs::write(&path, b"x").unwrap();
    setxattr(&path, "user.color", b"blue", 0).unwrap();
    assert_eq!(getxattr(&path, "user.color").unwrap(), b"blue");
    setxattr(&path, "user.empty", b"", 0).unwrap();
    assert_eq!(getxattr(&path, "user.empty").unwrap(), b"");
    let mut names = listxattr(&path);
    names.retain(|n| n.starts_with("user."));
    names.sort();
    assert_eq!(names, ["user.color", "user.empty"], "listxattr");
    // XATTR_CREATE / XATTR_REPLACE.
    expect_errno(setxattr(&path, "user.color", b"red", libc::XATTR_CREATE), &[libc::EEXIST], "XATTR_CREATE on an existing name");
    expect_errno(setxattr(&path, "user.none", b"v", libc::XATTR_REPLACE), &[libc::ENODATA], "XATTR_REPLACE on a missing name");
    setxattr(&path, "user.color", b"red", libc::XATTR_REPLACE).unwrap();
    assert_eq!(getxattr(&path, "user.color").unwrap(), b"red");
    expect_errno(getxattr(&path, "user.none"), &[libc::ENODATA], "getxattr of a missing name");
    // Size probe with a zero-length buffer.
    let name = CString::new("user.color").unwrap();
    // SAFETY: a null buffer with size 0 asks for the size.
    let size = unsafe { libc::getxattr(cpath(&path).as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    assert_eq!(size, 3, "getxattr size probe");
    // A 64 KiB value (the Linux maximum), binary.
    let big = pattern(65_536, 3);
    setxattr(&path, "user.big", &big, 0).unwrap();
    assert!(getxattr(&path, "user.big").unwrap() == big, "64 KiB xattr value reads back differently");
    // Remove.
    removexattr(&path, "user.color").unwrap();
    expect_errno(getxattr(&path, "user.color"), &[libc::ENODATA], "getxattr after removexattr");
    expect_errno(removexattr(&path, "user.color"), &[libc::ENODATA], "removexattr twice");
    // Many names, and xattrs on a directory.
    for i in 0..100 {
        setxattr(&path, &format!("user.n{i:03}"), format!("value {i}").as_bytes(), 0).unwrap();
    }
    let names = listxattr(&path);
    for i in 0..100 {
        assert!(names.contains(&format!("user.n{i:03}")), "user.n{i:03} missing from listxattr");
        assert_eq!(getxattr(&path, &format!("user.n{i:03}")).unwrap(), format!("value {i}").as_bytes());
    }
    setxattr(dir, "user.on_dir", b"d", 0).unwrap();
    assert_eq!(getxattr(dir, "user.on_dir").unwrap(), b"d");
    // Xattrs follow the inode across rename and hard link.
    fs::rename(&path, dir.join("g")).unwrap();
    fs::hard_link(dir.join("g"), dir.join("h")).unwrap();
    assert!(getxattr(&dir.join("h"), "user.big").unwrap() == big);
}

fn readdir_raw(dir: &Path) -> Vec<(String, u64)> {
    // SAFETY: opendir/readdir/closedir on a valid path; entries copied out before the next call.
    unsafe {
        let handle = libc::opendir(cpath(dir).as_ptr());
        assert!(!handle.is_null(), "opendir {}: {}", dir.display(), io::Error::last_os_error());
        let mut out = Vec::new();
        loop {
            *libc::__errno_location() = 0;
            let entry = libc::readdir(handle);
            if entry.is_null() {
                let errno = *libc::__errno_location();
                assert_eq!(errno, 0, "readdir: {}", io::Error::from_raw_os_error(errno));
                break;
            }
            let name = std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()).to_string_lossy().into_owned();
            out.push((name, (*entry).d_ino));
        }
        libc::closedir(handle);
        out
    }
}

fn readdir_many_entries(dir: &Path) {
    let count = 10_000;
    let big = dir.join("big");
    fs::create_dir(&big).unwrap();
    for i in 0..count {
        File::create(big.join(format!("entry-{i:05}-{}", "x".repeat(i % 40)))).unwrap();
    }
    let entries = readdir_raw(&big);
    let mut seen = std::collections::HashMap::new();
    let mut inodes = std::collections::HashMap::new();
    for (name, ino) in &entries {
        *seen.entry(name.clone()).or_insert(0) += 1;
        inodes.insert(name.clone(), *ino);
    }
    for i in (0..count).step_by(499) {
        let name = format!("entry-{i:05}-{}", "x".repeat(i % 40));
        if let Some(ino) = inodes.get(&name) {
            assert_eq!(*ino, lstat(&big.join(&name)).ino(), "d_ino of {name} differs from st_ino");
        }
    }
    assert_eq!(seen.get("."), Some(&1), "'.' listed once");
    assert_eq!(seen.get(".."), Some(&1), "'..' listed once");
    for i in 0..count {
        let name = format!("entry-{i:05}-{}", "x".repeat(i % 40));
        assert_eq!(seen.get(&name), Some(&1), "{name} must be listed exactly once");
    }
    assert_eq!(entries.len(), count + 2, "no extra entries");
    // Unlinking while iterating with std (a common pattern: rm -r).
    for entry in fs::read_dir(&big).unwrap() {
        fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let left = readdir_raw(&big);
    let names: Vec<_> = left.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.len() == 2 && names.contains(&".") && names.contains(&".."), "directory not empty after removing all: {names:?}");
    fs::remove_dir(&big).unwrap();
}

fn sparse_file(dir: &Path) {
    let path = dir.join("sparse");
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
    let far = 100u64 << 20;
    file.write_all_at(b"start", 0).unwrap();
    file.write_all_at(b"far away", far).unwrap();
    file.sync_all().unwrap();
    let m = file.metadata().unwrap();
    assert_eq!(m.len(), far + 8);
    assert!(m.blocks() * 512 < 4 << 20, "a 100 MiB file with two small writes uses {} bytes", m.blocks() * 512);
    assert_eq!(read_at(&file, 0, 5), b"start");
    assert_eq!(read_at(&file, far, 8), b"far away");
    for offset in [5u64, 4096, 1 << 20, 50 << 20, far - 4096] {
        assert!(read_at(&file, offset, 4096).iter().all(|b| *b == 0), "hole at {offset} must read zero");
    }
    // Extending with truncate creates a hole too.
    file.set_len(1 << 30).unwrap();
    assert!(read_at(&file, (1 << 30) - 65_536, 65_536).iter().all(|b| *b == 0));
    file.sync_all().unwrap();
    assert!(file.metadata().unwrap().blocks() * 512 < 4 << 20, "truncate up must not allocate");
    // Truncating down into the data keeps what lies before the new end.
    file.set_len(far + 4).unwrap();
    assert_eq!(read_at(&file, far, 4), b"far ");
}

fn large_offsets(dir: &Path) {
    let path = dir.join("large");
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
    let chunk = pattern(1 << 20, 11);
    // Across 2^31 and 2^32, and at 5 GiB.
    let offsets = [(2u64 << 30) - (512 << 10), (4u64 << 30) - 100, 5u64 << 30];
    for offset in offsets {
        file.write_all_at(&chunk, offset).unwrap();
    }
    file.sync_all().unwrap();
    assert_eq!(file.metadata().unwrap().len(), (5u64 << 30) + (1 << 20));
    let reopened = File::open(&path).unwrap();
    for offset in offsets {
        assert!(read_at(&reopened, offset, 1 << 20) == chunk, "1 MiB at offset {offset} reads back differently");
    }
    assert!(read_at(&reopened, 3u64 << 30, 4096).iter().all(|b| *b == 0), "hole at 3 GiB");
    let mut f = File::open(&path).unwrap();
    assert_eq!(f.seek(SeekFrom::End(0)).unwrap(), (5u64 << 30) + (1 << 20));
    // Truncate down across the 4 GiB boundary.
    file.set_len((4u64 << 30) + 10).unwrap();
    let tail = read_at(&reopened, (4u64 << 30) - 100, 110);
    assert_eq!(tail[..], chunk[..110]);
}

fn mkdir_rmdir_errors(dir: &Path) {
    let d = dir.join("d");
    fs::create_dir(&d).unwrap();
    assert!(lstat(&d).is_dir());
    expect_errno(fs::create_dir(&d), &[libc::EEXIST], "mkdir an existing directory");
    fs::write(d.join("f"), b"").unwrap();
    expect_errno(fs::create_dir(d.join("f")), &[libc::EEXIST], "mkdir over a file");
    expect_errno(fs::remove_dir(&d), &[libc::ENOTEMPTY, libc::EEXIST], "rmdir a non-empty directory");
    expect_errno(fs::remove_dir(dir.join("missing")), &[libc::ENOENT], "rmdir a missing directory");
    expect_errno(fs::remove_dir(d.join("f")), &[libc::ENOTDIR], "rmdir a file");
    expect_errno(fs::remove_file(&d), &[libc::EISDIR, libc::EPERM], "unlink a directory");
    expect_errno(fs::create_dir(d.join("f/sub")), &[libc::ENOTDIR], "mkdir below a file");
    expect_errno(fs::create_dir(dir.join("missing/sub")), &[libc::ENOENT], "mkdir below a missing directory");
    expect_errno(File::create(dir.join("missing/f")), &[libc::ENOENT], "create below a missing directory");
    expect_errno(fs::remove_dir(d.join(".")), &[libc::EINVAL, libc::EBUSY], "rmdir '.'");
    fs::remove_file(d.join("f")).unwrap();
    fs::remove_dir(&d).unwrap();
    expect_errno(fs::symlink_metadata(&d), &[libc::ENOENT], "stat a removed directory");
    // mkdir with a mode; deep trees.
    // SAFETY: valid C string.
    libc_result(unsafe { libc::mkdir(cpath(&dir.join("m")).as_ptr(), 0o700) }).unwrap();
    assert_eq!(lstat(&dir.join("m")).permissions().mode() & 0o777, 0o700 & !current_umask());
    let deep: PathBuf = (0..30).fold(dir.join("deep"), |p, i| p.join(format!("level{i}")));
    fs::create_dir_all(&deep).unwrap();
    fs::write(deep.join("leaf"), b"leaf").unwrap();
    assert_eq!(read_all(&deep.join("leaf")), b"leaf");
    fs::remove_dir_all(dir.join("deep")).unwrap();
    assert!(!dir.join("deep").exists());
}

fn current_umask() -> u32 {
    // Linux >= 4.7 reports it in /proc without changing it.
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Umask:").map(|v| v.trim().to_owned())))
        .and_then(|v| u32::from_str_radix(&v, 8).ok())
        .unwrap_or(0o022)
}

fn name_lengths(dir: &Path) {
    let longest = "n".repeat(255);
    fs::write(dir.join(&longest), b"255").unwrap();
    assert_eq!(read_all(&dir.join(&longest)), b"255");
    assert!(fs::read_dir(dir).unwrap().any(|e| e.unwrap().file_name().len() == 255));
    expect_errno(fs::write(dir.join("n".repeat(256)), b""), &[libc::ENAMETOOLONG], "create a 256-byte name");
    expect_errno(fs::create_dir(dir.join("d".repeat(256))), &[libc::ENAMETOOLONG], "mkdir a 256-byte name");
    // Names with every byte but '/' and NUL.
    let odd = std::ffi::OsStr::from_bytes(b"sp ace\ttab\xc3\xa9\xff\x01-*?\\\"'");
    fs::write(dir.join(odd), b"odd").unwrap();
    assert_eq!(read_all(&dir.join(odd)), b"odd");
    assert!(fs::read_dir(dir).unwrap().any(|e| e.unwrap().file_name() == odd), "odd name listed as written");
}

fn statfs_sane(dir: &Path) {
    let st = statvfs(dir);
    assert!(st.f_bsize > 0 && st.f_frsize > 0, "block sizes");
    assert!(st.f_blocks > 0, "f_blocks");
    assert!(st.f_bfree <= st.f_blocks, "f_bfree <= f_blocks");
    assert!(st.f_bavail <= st.f_bfree, "f_bavail <= f_bfree");
    assert!(st.f_ffree <= st.f_files, "f_ffree <= f_files");
    assert!(st.f_namemax >= 255, "f_namemax {}", st.f_namemax);
    // Writing data uses space. The baseline is taken once the free space
    // has held still for longer than a txg's timeout: space that earlier
    // checks still hold for a while (intent-log blocks of their fsyncs are
    // retired when their txg is written; by hand 6.4 MB came back 4.6 s
    // after name_lengths ended) coming back during the loop below once hid
    // half the write (CI: "used only 7634944 bytes").
    let before = settled_free_bytes(dir);
    let data = pattern(16 << 20, 5);
    let mut file = File::create(dir.join("fill")).unwrap();
    file.write_all(&data).unwrap();
    file.sync_all().unwrap();
    syncfs(dir);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let used = before.saturating_sub(free_bytes(dir));
        if used >= 8 << 20 {
            break;
        }
        assert!(Instant::now() < deadline, "writing 16 MiB used only {used} bytes per statfs");
        std::thread::sleep(Duration::from_millis(200));
        syncfs(dir);
    }
}

fn fsync_variants(dir: &Path) {
    let path = dir.join("f");
    let mut file = File::create(&path).unwrap();
    file.write_all(b"durable").unwrap();
    file.sync_all().expect("fsync");
    file.sync_data().expect("fdatasync");
    File::open(dir).unwrap().sync_all().expect("fsync of a directory");
    let synced = OpenOptions::new().write(true).custom_flags(libc::O_SYNC).open(&path).unwrap();
    synced.write_all_at(b"D", 0).expect("O_SYNC write");
    // SAFETY: plain sync(2).
    unsafe { libc::sync() };
    assert_eq!(read_all(&path), b"Durable");
}

fn mknod_fifo(dir: &Path) {
    let path = dir.join("fifo");
    // SAFETY: valid C string.
    libc_result(unsafe { libc::mkfifo(cpath(&path).as_ptr(), 0o644) }).expect("mkfifo");
    let m = lstat(&path);
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&m.file_type()), "mkfifo makes a FIFO");
    assert_eq!(m.permissions().mode() & 0o777, 0o644 & !current_umask());
    // Data flows through it (the kernel's pipe, not the file system).
    let mut fifo = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NONBLOCK).open(&path).unwrap();
    fifo.write_all(b"through the pipe").unwrap();
    let mut buf = [0u8; 16];
    fifo.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"through the pipe");
    expect_errno(
        // SAFETY: valid C string.
        libc_result(unsafe { libc::mkfifo(cpath(&path).as_ptr(), 0o644) }),
        &[libc::EEXIST],
        "mkfifo over an existing name",
    );
    fs::remove_file(&path).unwrap();
    // A character device node (root may make one).
    let node = dir.join("null");
    // SAFETY: valid C string; 1:3 is /dev/null.
    libc_result(unsafe { libc::mknod(cpath(&node).as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) }).expect("mknod c 1 3");
    let m = lstat(&node);
    assert!(std::os::unix::fs::FileTypeExt::is_char_device(&m.file_type()));
    assert_eq!(m.rdev(), libc::makedev(1, 3), "st_rdev of a device node");
}

/// Stores through a shared writable mapping are what read(2) sees, before
/// and after msync, and they survive the mapping; the file's mtime moves.
fn mmap_shared_writes(dir: &Path) {
    let path = dir.join("mapped");
    let len = 3 * 4096 + 100;
    let before = pattern(len, 5);
    fs::write(&path, &before).unwrap();
    let old = ts(now_sec() - 1000, 0);
    set_times(&path, old, old, 0).unwrap();
    let file = OpenOptions::new().read(true).write(true).open(&path).unwrap();
    // SAFETY: a fresh shared mapping of `len` bytes of an open file; unmapped below.
    let ptr = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, file.as_raw_fd(), 0)
    };
    assert_ne!(ptr, libc::MAP_FAILED, "mmap: {}", io::Error::last_os_error());
    let after = pattern(len, 6);
    // SAFETY: `ptr` maps `len` writable bytes.
    let map = unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u8>(), len) };
    map[..4096].copy_from_slice(&after[..4096]);
    map[2 * 4096 + 7..len].copy_from_slice(&after[2 * 4096 + 7..]);
    let mut expect = before.clone();
    expect[..4096].copy_from_slice(&after[..4096]);
    expect[2 * 4096 + 7..].copy_from_slice(&after[2 * 4096 + 7..]);
    assert!(read_all(&path) == expect, "read(2) sees the mapping's stores before msync");
    // SAFETY: `ptr`/`len` as mapped above.
    libc_result(unsafe { libc::msync(ptr, len, libc::MS_SYNC) }).unwrap();
    // SAFETY: as above; `map` is not used after this.
    libc_result(unsafe { libc::munmap(ptr, len) }).unwrap();
    file.sync_all().unwrap();
    drop(file);
    assert!(read_all(&path) == expect, "the stores survive munmap and close");
    assert!(lstat(&path).mtime() > now_sec() - 500, "stores through the mapping move mtime");
    assert_eq!(lstat(&path).len(), len as u64, "a mapping never changes the size");
}

/// Truncation racing writes: two descriptors interleaved by hand, then
/// threads appending whole 4 KiB blocks while another truncates to zero.
/// No torn block, no hole, no stale byte may appear.
fn truncate_races(dir: &Path) {
    let path = dir.join("raced");
    let first = pattern(65_536, 7);
    let writer = OpenOptions::new().create_new(true).read(true).write(true).open(&path).unwrap();
    writer.write_all_at(&first, 0).unwrap();
    let cutter = OpenOptions::new().write(true).open(&path).unwrap();
    cutter.set_len(10_000).unwrap();
    writer.write_all_at(b"tail", 100_000).unwrap();
    let got = read_all(&path);
    assert_eq!(got.len(), 100_004, "size after truncate then a write past the end");
    assert!(got[..10_000] == first[..10_000], "the prefix kept by the truncate");
    assert!(got[10_000..100_000].iter().all(|b| *b == 0), "the truncated range reads zero, not old bytes");
    assert_eq!(&got[100_000..], b"tail");
    drop((writer, cutter));

    let path = dir.join("appended");
    fs::write(&path, b"").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appenders: Vec<_> = (1..=3u8)
        .map(|stamp| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut f = OpenOptions::new().append(true).open(&path).unwrap();
                let block = vec![stamp; 4096];
                for _ in 0..300 {
                    f.write_all(&block).unwrap();
                }
            })
        })
        .collect();
    let cutter = {
        let (path, stop) = (path.clone(), stop.clone());
        std::thread::spawn(move || {
            let f = OpenOptions::new().write(true).open(&path).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                f.set_len(0).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    for a in appenders {
        a.join().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    cutter.join().unwrap();
    let got = read_all(&path);
    assert_eq!(got.len() % 4096, 0, "appends of whole blocks leave a whole number of blocks ({} bytes)", got.len());
    assert_eq!(lstat(&path).len(), got.len() as u64, "stat and read agree on the size");
    for (i, block) in got.chunks(4096).enumerate() {
        assert!(
            block[0] != 0 && block.iter().all(|b| *b == block[0]),
            "block {i} is torn or a hole: starts {:?}",
            &block[..8]
        );
    }
}
