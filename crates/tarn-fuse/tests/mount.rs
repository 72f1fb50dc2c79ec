//! Real FUSE mounts of a memory-device pool (needs root and /dev/fuse).

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::sync::Arc;
use tarn_fs::{Fs, FsOptions};
use tarn_fuse::{mount, MountOptions};
#[path = "../../tarn-fs/tests/support/mod.rs"]
mod support;

fn new_fs(name: &str) -> Arc<Fs> {
    support::single_fs(name)
}

fn opts() -> MountOptions {
    MountOptions {
        fsname: "tank/test".into(),
        readonly: false,
        allow_other: false,
        writeback_cache: false,
    }
}

fn xattr_get(path: &std::path::Path, name: &str) -> Option<Vec<u8>> {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 65536];
    // SAFETY: valid C strings and a buffer of the given length.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return None;
    }
    buf.truncate(r as usize);
    Some(buf)
}

fn xattr_set(path: &std::path::Path, name: &str, v: &[u8]) -> i32 {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid C strings and value slice.
    unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) }
}

#[test]
fn file_operations_through_the_mount() {
    let dir = tempfile::tempdir().unwrap();
    let fs_ = new_fs("fusebasic");
    let h = mount(fs_.clone(), dir.path(), opts()).expect("mount");
    let m = h.mountpoint().to_path_buf();
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(mounts.contains("fuse.tarn"), "mounted with subtype tarn");

    // Files: write, read, append, overwrite, truncate.
    fs::write(m.join("hello.txt"), b"hello tarn").unwrap();
    assert_eq!(fs::read(m.join("hello.txt")).unwrap(), b"hello tarn");
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(m.join("hello.txt"))
        .unwrap();
    f.write_all(b"!!").unwrap();
    drop(f);
    assert_eq!(
        fs::read_to_string(m.join("hello.txt")).unwrap(),
        "hello tarn!!"
    );
    let big: Vec<u8> = (0..5_000_000u32).map(|i| (i % 253) as u8).collect();
    fs::write(m.join("big.bin"), &big).unwrap();
    assert_eq!(fs::read(m.join("big.bin")).unwrap(), big);
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.join("big.bin"))
        .unwrap();
    f.write_all_at(b"XYZ", 1_000_000).unwrap();
    let mut b = [0u8; 3];
    f.read_exact_at(&mut b, 1_000_000).unwrap();
    assert_eq!(&b, b"XYZ");
    f.set_len(10).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(fs::metadata(m.join("big.bin")).unwrap().len(), 10);

    // Sparse file.
    let mut f = fs::File::create(m.join("sparse")).unwrap();
    f.seek(SeekFrom::Start(1 << 30)).unwrap();
    f.write_all(b"end").unwrap();
    drop(f);
    let md = fs::metadata(m.join("sparse")).unwrap();
    assert_eq!(md.len(), (1 << 30) + 3);
    let mut f = fs::File::open(m.join("sparse")).unwrap();
    let mut buf = vec![1u8; 4096];
    f.seek(SeekFrom::Start(12345)).unwrap();
    f.read_exact(&mut buf).unwrap();
    assert!(buf.iter().all(|&x| x == 0));

    // Directories, rename, links, symlinks, permissions.
    fs::create_dir_all(m.join("a/b/c")).unwrap();
    fs::write(m.join("a/b/c/f"), b"x").unwrap();
    assert_eq!(fs::metadata(m.join("a")).unwrap().nlink(), 3);
    fs::rename(m.join("a/b/c/f"), m.join("a/moved")).unwrap();
    assert!(!m.join("a/b/c/f").exists());
    assert_eq!(fs::read(m.join("a/moved")).unwrap(), b"x");
    let e = fs::rename(m.join("a"), m.join("a/b/c/inside")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    let e = fs::remove_dir(m.join("a/b")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTEMPTY));
    fs::hard_link(m.join("a/moved"), m.join("hl")).unwrap();
    assert_eq!(fs::metadata(m.join("hl")).unwrap().nlink(), 2);
    std::os::unix::fs::symlink("a/moved", m.join("sl")).unwrap();
    assert_eq!(
        fs::read_link(m.join("sl")).unwrap().to_str(),
        Some("a/moved")
    );
    assert_eq!(fs::read(m.join("sl")).unwrap(), b"x");
    fs::set_permissions(m.join("hl"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        fs::metadata(m.join("a/moved"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o600
    );
    let mut names: Vec<String> = fs::read_dir(&m)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "big.bin", "hello.txt", "hl", "sl", "sparse"]);
    let e = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(m.join("hl"))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));

    // Many entries: readdir across several kernel buffers.
    fs::create_dir(m.join("many")).unwrap();
    for i in 0..3000 {
        fs::File::create(m.join(format!("many/file-{i:05}"))).unwrap();
    }
    assert_eq!(fs::read_dir(m.join("many")).unwrap().count(), 3000);

    // Unlinked while open stays usable.
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.join("tmp"))
        .unwrap();
    f.write_all(b"ghost").unwrap();
    fs::remove_file(m.join("tmp")).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "ghost");
    drop(f);

    // O_SYNC write and xattrs.
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_SYNC)
        .open(m.join("sync"))
        .unwrap();
    f.write_all(b"durable").unwrap();
    drop(f);
    assert_eq!(xattr_set(&m.join("sync"), "user.color", b"blue"), 0);
    assert_eq!(
        xattr_get(&m.join("sync"), "user.color"),
        Some(b"blue".to_vec())
    );
    assert_eq!(xattr_get(&m.join("sync"), "user.none"), None);

    // statfs
    let c = std::ffi::CString::new(m.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: zeroed statvfs is a valid out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid path and out-parameter.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    assert!(st.f_blocks > 0 && st.f_namemax == 255);

    // Parallel writers on different files.
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let m = m.clone();
            s.spawn(move || {
                let data = vec![t; 4 << 20];
                fs::write(m.join(format!("par{t}")), &data).unwrap();
                assert_eq!(fs::read(m.join(format!("par{t}"))).unwrap(), data);
            });
        }
    });

    h.unmount().expect("unmount");
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(dir.path().to_str().unwrap()), "unmounted");
    // The unlinked-while-open file was freed at its last forget (or will be at next open).
    assert!(fs_.lookup(fs_.root_ino(), b"tmp").is_err());
}

#[test]
fn busy_mount_unmounts_lazily() {
    let dir = tempfile::tempdir().unwrap();
    let h = mount(new_fs("fusebusy"), dir.path(), opts()).expect("mount");
    let m = h.mountpoint().to_path_buf();
    fs::write(m.join("f"), b"data").unwrap();
    let f = fs::File::open(m.join("f")).unwrap();
    h.unmount().expect("lazy unmount of a busy mount");
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(dir.path().to_str().unwrap()), "detached");
    let mut s = String::new();
    (&f).read_to_string(&mut s).unwrap();
    assert_eq!(s, "data");
    drop(f);
}

#[test]
fn readonly_mount() {
    let dir = tempfile::tempdir().unwrap();
    let fs_ = new_fs("fusero");
    fs_.set_options(FsOptions {
        readonly: true,
        ..FsOptions::default()
    });
    let h = mount(
        fs_,
        dir.path(),
        MountOptions {
            readonly: true,
            ..opts()
        },
    )
    .expect("mount");
    let e = fs::write(h.mountpoint().join("x"), b"1").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    h.unmount().unwrap();
}

/// With the writeback cache on, small writes reach the file system when
/// the kernel writes back; `flush` (syncfs) forces that, after which the
/// file system itself (not the page cache) holds every byte, the size set
/// by the kernel, and the mtime the kernel gave the file.
#[test]
fn writeback_cache_flush_puts_the_page_cache_in_the_file_system() {
    let fs_ = new_fs("tank/wb");
    let dir = tempfile::tempdir().unwrap();
    let h = mount(fs_.clone(), dir.path(), MountOptions { writeback_cache: true, ..opts() }).expect("mount");
    let m = h.mountpoint().to_path_buf();
    let path = m.join("small-writes");
    let mut expect = Vec::new();
    {
        let mut f = fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
        for i in 0..1000u32 {
            let chunk = format!("line {i:05} of many small appends\n");
            f.write_all(chunk.as_bytes()).unwrap();
            expect.extend_from_slice(chunk.as_bytes());
        }
        // Keep the file open: close would flush too.
        tarn_fuse::flush(&m).expect("flush");
        let ino = fs::metadata(&path).unwrap().ino();
        let attr = fs_.getattr(ino).unwrap();
        assert_eq!(attr.size, expect.len() as u64, "size in the file system after flush");
        let stored = fs_.read(ino, 0, expect.len() as u32 + 100).unwrap();
        assert_eq!(stored, expect, "bytes in the file system after flush");
        let kernel_mtime = fs::metadata(&path).unwrap().mtime_nsec() as i64
            + fs::metadata(&path).unwrap().mtime() * 1_000_000_000;
        assert_eq!(attr.mtime_ns, kernel_mtime, "the kernel's mtime was written back");
    }
    // O_APPEND through the cache lands at the end; a read-back agrees.
    assert_eq!(fs::read(&path).unwrap(), expect);
    h.unmount().unwrap();
}
