//! Sparse files through the real mount (issue 9, item 0): util-linux
//! `fallocate` in every mode the FUSE driver passes, SEEK_DATA /
//! SEEK_HOLE through `lseek(2)`, `cp` keeping holes, space coming back
//! after a punch, and O_TMPFILE (unnamed files, linked or freed). Where
//! the semantics are the same, every step runs on a tmpfs reference too
//! and the answers must agree (the data layout is 128 KiB-aligned so tmpfs's 4 KiB pages and
//! tarn's 128 KiB records see the same holes).

mod common;

use std::fs::{self, File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::process::Command;

use common::{path_str, random_bytes, Harness};

const K: u64 = 1024;
const M: u64 = 1024 * 1024;


/// Run util-linux `fallocate ARGS FILE`; Err(stderr) if it fails.
fn fallocate(args: &[&str], file: &Path) -> Result<(), String> {
    let out = Command::new("fallocate").args(args).arg(file).output().expect("run fallocate");
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `lseek(fd, offset, whence)`: the offset, or the errno.
fn seek(file: &File, offset: u64, whence: i32) -> Result<u64, i32> {
    // SAFETY: a plain syscall on a descriptor `file` owns.
    let r = unsafe { libc::lseek(file.as_raw_fd(), offset as libc::off_t, whence) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(r as u64)
    }
}

fn du_kib(path: &Path) -> u64 {
    fs::metadata(path).unwrap().blocks() / 2
}

fn fsync(path: &Path) {
    File::open(path).unwrap().sync_all().unwrap();
}

/// An offset and what SEEK_DATA and SEEK_HOLE answer from it.
type SeekAnswers = (u64, Result<u64, i32>, Result<u64, i32>);

/// Every SEEK_DATA / SEEK_HOLE answer from offsets around each boundary.
fn seek_map(path: &Path, size: u64, marks: &[u64]) -> Vec<SeekAnswers> {
    let f = File::open(path).unwrap();
    let mut offsets: Vec<u64> = marks.iter().flat_map(|&m| [m.saturating_sub(1), m, m + 1]).collect();
    offsets.extend([0, size - 1, size, size + 1, size + 10 * M]);
    offsets.sort_unstable();
    offsets.dedup();
    offsets.into_iter().map(|o| (o, seek(&f, o, libc::SEEK_DATA), seek(&f, o, libc::SEEK_HOLE))).collect()
}

/// The steps run on both file systems; returns what must agree.
fn scenario(root: &Path, data: &[u8]) -> Vec<String> {
    let mut seen = Vec::new();
    // fallocate -l: the size grows, zeros read back.
    let a = root.join("a");
    fallocate(&["-l", "8MiB"], &a).unwrap();
    let meta = fs::metadata(&a).unwrap();
    assert_eq!(meta.len(), 8 * M);
    assert!(fs::read(&a).unwrap().iter().all(|&b| b == 0));
    fallocate(&["-o", "4MiB", "-l", "8MiB"], &a).unwrap();
    assert_eq!(fs::metadata(&a).unwrap().len(), 12 * M);

    // fallocate -n (--keep-size): the size stays.
    let b = root.join("b");
    fs::write(&b, data).unwrap();
    fallocate(&["-n", "-l", "16MiB"], &b).unwrap();
    assert_eq!(fs::metadata(&b).unwrap().len(), data.len() as u64);
    assert_eq!(fs::read(&b).unwrap(), data);

    // fallocate -p: zeros in the range, the rest as written, size kept.
    let mtime = fs::metadata(&b).unwrap().modified().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    fallocate(&["-p", "-o", "1MiB", "-l", "2MiB"], &b).unwrap();
    let mut expect = data.to_vec();
    expect[M as usize..3 * M as usize].fill(0);
    assert_eq!(fs::read(&b).unwrap(), expect, "{}: after punching", root.display());
    assert!(fs::metadata(&b).unwrap().modified().unwrap() > mtime, "punching changes mtime");
    // An unaligned punch: edges zeroed.
    fallocate(&["-p", "-o", "3145800", "-l", "5000"], &b).unwrap();
    expect[3_145_800..3_150_800].fill(0);
    assert_eq!(fs::read(&b).unwrap(), expect);
    seen.push(format!("b seek {:?}", seek_map(&b, data.len() as u64, &[M, 3 * M])));

    // A sparse file written with holes, 128 KiB aligned.
    let s = root.join("s");
    {
        let f = OpenOptions::new().create(true).write(true).truncate(true).open(&s).unwrap();
        f.write_all_at(&data[..256 * K as usize], 0).unwrap();
        f.write_all_at(&data[..128 * K as usize], 10 * M).unwrap();
        f.set_len(20 * M).unwrap();
    }
    let marks = [256 * K, 10 * M, 10 * M + 128 * K];
    seen.push(format!("s seek {:?}", seek_map(&s, 20 * M, &marks)));
    // cp (sparse=auto walks SEEK_DATA/SEEK_HOLE) and cp --sparse=always keep the holes.
    for (name, sparse) in [("s-auto", "--sparse=auto"), ("s-always", "--sparse=always")] {
        let to = root.join(name);
        let st = Command::new("cp").arg(sparse).arg(&s).arg(&to).status().unwrap();
        assert!(st.success());
        assert_eq!(fs::read(&to).unwrap(), fs::read(&s).unwrap());
        fsync(&to);
        assert!(du_kib(&to) < 2 * 1024, "{}: {name} allocates {} KiB of 20 MiB", root.display(), du_kib(&to));
        seen.push(format!("{name} seek {:?}", seek_map(&to, 20 * M, &marks)));
    }
    seen
}

#[test]
fn fallocate_and_seek_agree_with_tmpfs() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(1);
    let data = random_bytes(&mut rng, (4 * M) as usize);
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 2, 256 << 20);
    let mut spec = vec!["mirror".to_string()];
    spec.extend(devices.iter().map(|p| path_str(p)));
    let root = harness.create_pool("tank", &spec);
    let reference = harness.dir.join("tmpfs");
    let _tmpfs = common::mount_tmpfs(&reference, "tarn-sparse-ref", "1g");

    let on_tmpfs = scenario(&reference, &data);
    let on_tarn = scenario(&root, &data);
    for (t, r) in on_tarn.iter().zip(&on_tmpfs) {
        assert_eq!(t, r, "tarn and tmpfs disagree");
    }
    assert_eq!(on_tarn.len(), on_tmpfs.len());

    // cp of tarn's sparse file onto tmpfs (and back) keeps the holes.
    let to_tmpfs = reference.join("from-tarn");
    assert!(Command::new("cp").arg(root.join("s")).arg(&to_tmpfs).status().unwrap().success());
    assert!(du_kib(&to_tmpfs) <= 512, "copy on tmpfs allocates {} KiB", du_kib(&to_tmpfs));
    let back = root.join("from-tmpfs");
    assert!(Command::new("cp").arg(&to_tmpfs).arg(&back).status().unwrap().success());
    assert_eq!(fs::read(&back).unwrap(), fs::read(root.join("s")).unwrap());
}

#[test]
fn punching_returns_space_and_tarn_only_modes() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(2);
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 1, 512 << 20);
    let root = harness.create_pool("tank", &[path_str(&devices[0])]);
    let used = || -> u64 { harness.tarn_ok(&["list", "-Hp", "-o", "used", "tank"]).trim().parse().expect("used is a number") };

    // 64 MiB of incompressible data, on disk.
    let f = root.join("big");
    let data = random_bytes(&mut rng, (64 * M) as usize);
    fs::write(&f, &data).unwrap();
    fsync(&f);
    // fsync makes the data durable in the intent log; `du` and `used`
    // count what a txg wrote (as on ZFS): sync the pool.
    harness.tarn_ok(&["pool", "sync", "tank"]);
    let used_before = used();
    let du_before = du_kib(&f);
    assert!(du_before >= 64 * 1024, "{du_before} KiB");
    // Punch 48 MiB: the blocks go, `du` and `used` drop once a txg syncs.
    fallocate(&["-p", "-o", "8MiB", "-l", "48MiB"], &f).unwrap();
    harness.tarn_ok(&["pool", "sync", "tank"]);
    let du_after = du_kib(&f);
    assert!(du_before - du_after >= 47 * 1024, "du {du_before} -> {du_after} KiB");
    let used_after = used();
    assert!(used_before - used_after >= 47 * M, "used {used_before} -> {used_after}");
    let file = File::open(&f).unwrap();
    assert_eq!(seek(&file, 0, libc::SEEK_HOLE), Ok(8 * M));
    assert_eq!(seek(&file, 8 * M, libc::SEEK_DATA), Ok(56 * M));
    assert_eq!(seek(&file, 64 * M, libc::SEEK_DATA), Err(libc::ENXIO));

    // Zero range (FUSE passes it): zeros, whole blocks freed, -z without -k grows the size.
    fallocate(&["-z", "-o", "56MiB", "-l", "9MiB"], &f).unwrap();
    assert_eq!(fs::metadata(&f).unwrap().len(), 65 * M);
    let back = fs::read(&f).unwrap();
    assert_eq!(&back[..8 * M as usize], &data[..8 * M as usize]);
    assert!(back[8 * M as usize..].iter().all(|&b| b == 0));
    assert_eq!(seek(&file, 0, libc::SEEK_HOLE), Ok(8 * M));
    assert_eq!(seek(&file, 8 * M, libc::SEEK_DATA), Err(libc::ENXIO));

    // More than the pool holds: ENOSPC, nothing changed.
    let err = fallocate(&["-l", "4GiB"], &f).expect_err("4 GiB on a 512 MiB pool");
    assert!(err.contains("No space left on device"), "{err}");
    assert_eq!(fs::metadata(&f).unwrap().len(), 65 * M);
    // Modes tarn cannot do (the FUSE driver refuses them before us).
    let err = fallocate(&["-c", "-o", "0", "-l", "1MiB"], &f).expect_err("collapse range");
    assert!(err.contains("Operation not supported"), "{err}");

    // A snapshot takes no changes.
    harness.tarn_ok(&["snapshot", "tank@s"]);
    let snap = root.join(".zfs/snapshot/s/big");
    let err = fallocate(&["-p", "-o", "0", "-l", "1MiB"], &snap).expect_err("punch in a snapshot");
    assert!(err.contains("Read-only file system"), "{err}");
    let snapfile = File::open(&snap).unwrap();
    assert_eq!(seek(&snapfile, 0, libc::SEEK_HOLE), Ok(8 * M));
    // Punching the live file now keeps the snapshot's blocks.
    fallocate(&["-p", "-o", "0", "-l", "8MiB"], &f).unwrap();
    assert_eq!(fs::read(&snap).unwrap()[..8 * M as usize], data[..8 * M as usize]);
    assert_eq!(seek(&file, 0, libc::SEEK_DATA), Err(libc::ENXIO));
}

fn open_tmpfile(dir: &Path, flags: i32) -> Result<File, i32> {
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a valid path; the descriptor is owned by the File.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_TMPFILE | libc::O_RDWR | flags, 0o600) };
    if fd < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        // SAFETY: `fd` was just opened and nothing else owns it.
        Ok(unsafe { <File as std::os::unix::io::FromRawFd>::from_raw_fd(fd) })
    }
}

/// `linkat(fd, "", AT_FDCWD, to, AT_EMPTY_PATH)`: 0 or the errno.
fn link_fd(file: &File, to: &Path) -> Result<(), i32> {
    let c = std::ffi::CString::new(to.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid descriptor and NUL-terminated paths for the call.
    let r = unsafe { libc::linkat(file.as_raw_fd(), c"".as_ptr(), libc::AT_FDCWD, c.as_ptr(), libc::AT_EMPTY_PATH) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

/// What O_TMPFILE does on one file system (the same on tmpfs and tarn).
fn tmpfile_scenario(root: &Path, data: &[u8]) -> Vec<String> {
    let mut seen = Vec::new();
    let dir = root.join("t");
    fs::create_dir(&dir).unwrap();
    let t = open_tmpfile(&dir, 0).expect("O_TMPFILE");
    t.write_all_at(data, 0).unwrap();
    let m = t.metadata().unwrap();
    seen.push(format!("unnamed: nlink {} size {} mode {:o}", m.nlink(), m.len(), m.mode()));
    seen.push(format!("entries {}", fs::read_dir(&dir).unwrap().count()));
    let mut back = vec![0u8; data.len()];
    t.read_exact_at(&mut back, 0).unwrap();
    assert_eq!(back, data);
    // Given a name: nlink 1, the same data by path.
    link_fd(&t, &dir.join("named")).unwrap();
    seen.push(format!("linked: nlink {}", t.metadata().unwrap().nlink()));
    assert_eq!(fs::read(dir.join("named")).unwrap(), data);
    assert_eq!(fs::metadata(dir.join("named")).unwrap().ino(), m.ino());
    // A second name is an ordinary hard link.
    link_fd(&t, &dir.join("second")).unwrap();
    seen.push(format!("second: nlink {}", t.metadata().unwrap().nlink()));
    drop(t);
    // O_EXCL: never linkable.
    let x = open_tmpfile(&dir, libc::O_EXCL).expect("O_TMPFILE|O_EXCL");
    seen.push(format!("excl link: {:?}", link_fd(&x, &dir.join("never"))));
    // On a file, and a missing directory.
    seen.push(format!("on a file: {:?}", open_tmpfile(&dir.join("named"), 0).map(|_| ())));
    seen.push(format!("missing dir: {:?}", open_tmpfile(&dir.join("nope"), 0).map(|_| ())));
    let mut names: Vec<String> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    seen.push(format!("names {names:?}"));
    seen
}

/// O_TMPFILE through the mount (FUSE_TMPFILE, with fuser patched for it):
/// the same answers as tmpfs; an unnamed file's space comes back when it
/// is closed; none can be made in a snapshot.
#[test]
fn o_tmpfile_matches_tmpfs_and_frees_on_close() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(3);
    let data = random_bytes(&mut rng, 300_000);
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 1, 512 << 20);
    let root = harness.create_pool("tank", &[path_str(&devices[0])]);
    let reference = harness.dir.join("tmpfs");
    let _tmpfs = common::mount_tmpfs(&reference, "tarn-sparse-ref", "1g");
    assert_eq!(tmpfile_scenario(&root, &data), tmpfile_scenario(&reference, &data));

    let used = || -> u64 { harness.tarn_ok(&["list", "-Hp", "-o", "used", "tank"]).trim().parse().expect("used is a number") };
    // `used` counts what a txg wrote (fsync only commits the intent log).
    let sync = || {
        harness.tarn_ok(&["pool", "sync", "tank"]);
    };
    sync();
    let before = used();
    let t = open_tmpfile(&root, 0).unwrap();
    t.write_all_at(&random_bytes(&mut rng, (32 * M) as usize), 0).unwrap();
    t.sync_all().unwrap();
    sync();
    let during = used();
    assert!(during >= before + 31 * M, "used {before} -> {during} with 32 MiB in a tmpfile");
    drop(t);
    // The kernel forgets the inode at the last close; the txg then frees it.
    let mut after = during;
    for _ in 0..50 {
        sync();
        after = used();
        if after < before + M {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(after < before + M, "used {before} -> {during} -> {after}: the closed tmpfile's space is not back");

    harness.tarn_ok(&["snapshot", "tank@s"]);
    assert_eq!(open_tmpfile(&root.join(".zfs/snapshot/s/t"), 0).map(|_| ()), Err(libc::EROFS));
}
