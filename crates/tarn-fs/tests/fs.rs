//! tarn-fs integration tests on a memory-device pool.

use std::collections::BTreeSet;
use std::sync::Arc;
use tarn_dev::{Device, MemDevice};
use tarn_fs::*;
use tarn_obj::{ImportOptions, ObjPool, ObjsetId, PoolCreate, TopKind};

const C: Cred = Cred::ROOT;

struct Env {
    dev: Arc<MemDevice>,
    pool: Arc<ObjPool>,
    osid: ObjsetId,
    fs: Arc<Fs>,
}

fn setup(name: &str) -> Env {
    setup_opts(name, FsOptions::default())
}

fn setup_opts(name: &str, opts: FsOptions) -> Env {
    let dev = MemDevice::new("mem0", 256 << 20);
    let pool = ObjPool::create(PoolCreate {
        name: name.into(),
        tops: vec![(
            TopKind::Disk,
            vec![("mem0".into(), dev.clone() as Arc<dyn Device>)],
        )],
        ashift: 12,
        properties: Default::default(),
        hostname: "test".into(),
    })
    .expect("create pool");
    let tx = pool.begin();
    let osid = pool.create_objset(&tx).unwrap();
    drop(tx);
    let os = pool.open_objset(osid).unwrap();
    let tx = pool.begin();
    Fs::format(&os, &tx).unwrap();
    drop(tx);
    let fs = Fs::open(pool.clone(), os, opts).unwrap();
    Env {
        dev,
        pool,
        osid,
        fs,
    }
}

fn names(fs: &Fs, dir: u64) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    fs.readdir(dir, 0, &mut |e| {
        v.push(e.name.clone());
        true
    })
    .unwrap();
    v
}

fn errno<T: std::fmt::Debug>(r: Result<T>) -> i32 {
    r.expect_err("expected an error").errno()
}

#[test]
fn basic_files_dirs_symlinks_nodes() {
    let e = setup("fsbasic");
    let fs = &e.fs;
    let root = fs.root_ino();
    let ra = fs.getattr(root).unwrap();
    assert_eq!(
        (ra.kind, ra.perm, ra.uid, ra.gid, ra.nlink),
        (FileKind::Dir, 0o755, 0, 0, 2)
    );
    let d = fs
        .mkdir(root, b"d", 0o750, Cred { uid: 5, gid: 6 })
        .unwrap();
    assert_eq!(
        (d.kind, d.perm, d.uid, d.gid, d.nlink),
        (FileKind::Dir, 0o750, 5, 6, 2)
    );
    assert_eq!(fs.getattr(root).unwrap().nlink, 3);
    assert_eq!(errno(fs.mkdir(root, b"d", 0o755, C)), libc::EEXIST);
    let (f, created) = fs.create(d.ino, b"f", 0o644, C, true).unwrap();
    assert!(created);
    assert_eq!(errno(fs.create(d.ino, b"f", 0o644, C, true)), libc::EEXIST);
    let (f2, created) = fs.create(d.ino, b"f", 0o644, C, false).unwrap();
    assert!(!created);
    assert_eq!(f2.ino, f.ino);
    assert_eq!(fs.write(f.ino, 0, b"hello world").unwrap(), 11);
    assert_eq!(fs.read(f.ino, 6, 100).unwrap(), b"world");
    assert_eq!(fs.getattr(f.ino).unwrap().size, 11);
    assert_eq!(fs.lookup(d.ino, b"f").unwrap().ino, f.ino);
    assert_eq!(errno(fs.lookup(d.ino, b"nope")), libc::ENOENT);
    assert_eq!(fs.lookup(d.ino, b"..").unwrap().ino, root);
    assert_eq!(errno(fs.lookup(f.ino, b"x")), libc::ENOTDIR);
    let s = fs.symlink(d.ino, b"s", b"../target/path", C).unwrap();
    assert_eq!(s.kind, FileKind::Symlink);
    assert_eq!(fs.readlink(s.ino).unwrap(), b"../target/path");
    for (n, mode, kind) in [
        (&b"fifo"[..], libc::S_IFIFO | 0o600, FileKind::Fifo),
        (b"sock", libc::S_IFSOCK | 0o600, FileKind::Socket),
        (b"chr", libc::S_IFCHR | 0o600, FileKind::CharDev),
        (b"blk", libc::S_IFBLK | 0o600, FileKind::BlockDev),
    ] {
        let a = fs.mknod(d.ino, n, mode, 0x0803, C).unwrap();
        assert_eq!(a.kind, kind);
        if matches!(kind, FileKind::CharDev | FileKind::BlockDev) {
            assert_eq!(a.rdev, 0x0803);
        }
    }
    let got: BTreeSet<Vec<u8>> = names(fs, d.ino).into_iter().collect();
    let want: BTreeSet<Vec<u8>> = [".", "..", "f", "s", "fifo", "sock", "chr", "blk"]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    assert_eq!(got, want);
    assert_eq!(fs.getattr(d.ino).unwrap().size, 8);
    assert_eq!(errno(fs.rmdir(root, b"d")), libc::ENOTEMPTY);
    assert_eq!(errno(fs.unlink(root, b"d")), libc::EISDIR);
    assert_eq!(errno(fs.rmdir(d.ino, b"f")), libc::ENOTDIR);
    for n in ["f", "s", "fifo", "sock", "chr", "blk"] {
        fs.unlink(d.ino, n.as_bytes()).unwrap();
    }
    fs.rmdir(root, b"d").unwrap();
    assert_eq!(fs.getattr(root).unwrap().nlink, 2);
    assert_eq!(names(fs, root), vec![b".".to_vec(), b"..".to_vec()]);
    assert_eq!(
        errno(fs.mkdir(root, &[b'x'; 256], 0o755, C)),
        libc::ENAMETOOLONG
    );
    assert_eq!(errno(fs.mkdir(root, b"a/b", 0o755, C)), libc::EINVAL);
}

#[test]
fn setattr_times_modes_and_truncate() {
    let e = setup("fssetattr");
    let fs = &e.fs;
    let (f, _) = fs.create(fs.root_ino(), b"f", 0o4755, C, true).unwrap();
    let a = fs
        .setattr(
            f.ino,
            &SetAttr {
                atime: Some(TimeSet::Ns(1_000)),
                mtime: Some(TimeSet::Ns(2_000)),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!((a.atime_ns, a.mtime_ns), (1_000, 2_000));
    assert!(a.ctime_ns > 2_000);
    // UTIME_OMIT for atime, UTIME_NOW for mtime.
    let b = fs
        .setattr(
            f.ino,
            &SetAttr {
                mtime: Some(TimeSet::Now),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(b.atime_ns, 1_000);
    assert!(b.mtime_ns > 2_000);
    let c = fs
        .setattr(
            f.ino,
            &SetAttr {
                uid: Some(7),
                gid: Some(8),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!((c.uid, c.gid), (7, 8));
    assert_eq!(c.perm & 0o4000, 0, "chown clears setuid");
    let m = fs
        .setattr(
            f.ino,
            &SetAttr {
                mode: Some(0o600),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!((m.perm, m.kind), (0o600, FileKind::File));
    fs.write(f.ino, 0, &[7u8; 10_000]).unwrap();
    let t = fs
        .setattr(
            f.ino,
            &SetAttr {
                size: Some(100),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(t.size, 100);
    let t = fs
        .setattr(
            f.ino,
            &SetAttr {
                size: Some(5000),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(t.size, 5000);
    let data = fs.read(f.ino, 0, 6000).unwrap();
    assert_eq!(data.len(), 5000);
    assert!(data[..100].iter().all(|&b| b == 7));
    assert!(
        data[100..].iter().all(|&b| b == 0),
        "truncate down then up reads zeros"
    );
    assert_eq!(
        errno(fs.setattr(
            fs.root_ino(),
            &SetAttr {
                size: Some(0),
                ..Default::default()
            }
        )),
        libc::EISDIR
    );
}

#[test]
fn sparse_and_block_sizes() {
    let e = setup("fssparse");
    let fs = &e.fs;
    let os = fs.objset().clone();
    let (f, _) = fs.create(fs.root_ino(), b"small", 0o644, C, true).unwrap();
    fs.write(f.ino, 0, &[1u8; 700]).unwrap();
    assert_eq!(os.info(tarn_obj::ObjectId(f.ino)).unwrap().block_size, 1024);
    fs.write(f.ino, 700, &[2u8; 3000]).unwrap();
    assert_eq!(os.info(tarn_obj::ObjectId(f.ino)).unwrap().block_size, 4096);
    fs.write(f.ino, 3700, &[3u8; 200_000]).unwrap();
    assert_eq!(
        os.info(tarn_obj::ObjectId(f.ino)).unwrap().block_size,
        128 * 1024
    );
    let all = fs.read(f.ino, 0, 300_000).unwrap();
    assert_eq!(all.len(), 203_700);
    assert!(all[..700].iter().all(|&b| b == 1) && all[700..3700].iter().all(|&b| b == 2));
    assert!(all[3700..].iter().all(|&b| b == 3));
    // Sparse terabyte file.
    let (s, _) = fs.create(fs.root_ino(), b"sparse", 0o644, C, true).unwrap();
    let far = 2u64 << 40;
    fs.write(s.ino, far, b"tail").unwrap();
    let a = fs.getattr(s.ino).unwrap();
    assert_eq!(a.size, far + 4);
    assert!(
        a.blocks < 10_000,
        "sparse file allocates little: {} blocks",
        a.blocks
    );
    assert!(fs
        .read(s.ino, 1 << 30, 65536)
        .unwrap()
        .iter()
        .all(|&b| b == 0));
    assert_eq!(fs.read(s.ino, far - 2, 10).unwrap(), b"\0\0tail");
    fs.setattr(
        s.ino,
        &SetAttr {
            size: Some(4096),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(fs.read(s.ino, 0, 10).unwrap(), vec![0u8; 10]);
    assert_eq!(errno(fs.write(s.ino, MAX_FILE_SIZE, b"x")), libc::EFBIG);
}

#[test]
fn rename_rules() {
    let e = setup("fsrename");
    let fs = &e.fs;
    let root = fs.root_ino();
    let a = fs.mkdir(root, b"a", 0o755, C).unwrap();
    let b = fs.mkdir(root, b"b", 0o755, C).unwrap();
    let sub = fs.mkdir(a.ino, b"sub", 0o755, C).unwrap();
    let (f, _) = fs.create(a.ino, b"f", 0o644, C, true).unwrap();
    let (g, _) = fs.create(b.ino, b"g", 0o644, C, true).unwrap();
    // File over existing file (victim freed), across directories.
    fs.rename(a.ino, b"f", b.ino, b"g", 0).unwrap();
    assert_eq!(fs.lookup(b.ino, b"g").unwrap().ino, f.ino);
    assert_eq!(errno(fs.lookup(a.ino, b"f")), libc::ENOENT);
    assert_eq!(
        fs.getattr(g.ino).unwrap().nlink,
        0,
        "victim still referenced, parked"
    );
    fs.forget(g.ino, 1);
    assert_eq!(errno(fs.getattr(g.ino)), libc::ENOENT);
    // Dir moved across: parent nlinks change and .. follows.
    fs.rename(a.ino, b"sub", b.ino, b"sub2", 0).unwrap();
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 2);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 3);
    assert_eq!(fs.lookup(sub.ino, b"..").unwrap().ino, b.ino);
    // Into own subtree.
    assert_eq!(errno(fs.rename(root, b"b", sub.ino, b"x", 0)), libc::EINVAL);
    assert_eq!(errno(fs.rename(root, b"b", b.ino, b"x", 0)), libc::EINVAL);
    // Dir over non-empty dir / file over dir / dir over file.
    fs.mkdir(a.ino, b"full", 0o755, C).unwrap();
    fs.create(fs.lookup(a.ino, b"full").unwrap().ino, b"x", 0o644, C, true)
        .unwrap();
    assert_eq!(
        errno(fs.rename(b.ino, b"sub2", a.ino, b"full", 0)),
        libc::ENOTEMPTY
    );
    assert_eq!(
        errno(fs.rename(b.ino, b"g", a.ino, b"full", 0)),
        libc::EISDIR
    );
    assert_eq!(
        errno(fs.rename(b.ino, b"sub2", b.ino, b"g", 0)),
        libc::ENOTDIR
    );
    // Dir over empty dir.
    let empty = fs.mkdir(a.ino, b"empty", 0o755, C).unwrap();
    fs.rename(b.ino, b"sub2", a.ino, b"empty", 0).unwrap();
    assert_eq!(fs.lookup(a.ino, b"empty").unwrap().ino, sub.ino);
    assert_eq!(fs.getattr(empty.ino).unwrap().nlink, 0);
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 4, "a: full + empty(=sub)");
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 2);
    // NOREPLACE and EXCHANGE.
    assert_eq!(
        errno(fs.rename(b.ino, b"g", a.ino, b"full", RENAME_NOREPLACE)),
        libc::EEXIST
    );
    fs.rename(b.ino, b"g", a.ino, b"g2", RENAME_NOREPLACE)
        .unwrap();
    assert_eq!(
        errno(fs.rename(a.ino, b"g2", b.ino, b"none", RENAME_EXCHANGE)),
        libc::ENOENT
    );
    let full = fs.lookup(a.ino, b"full").unwrap().ino;
    let (h, _) = fs.create(b.ino, b"h", 0o644, C, true).unwrap();
    fs.rename(a.ino, b"full", b.ino, b"h", RENAME_EXCHANGE)
        .unwrap();
    assert_eq!(fs.lookup(b.ino, b"h").unwrap().ino, full);
    assert_eq!(fs.lookup(a.ino, b"full").unwrap().ino, h.ino);
    assert_eq!(fs.lookup(full, b"..").unwrap().ino, b.ino);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 3);
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 3);
    // Same inode (hard links): no-op. Same name: no-op.
    fs.link(h.ino, a.ino, b"hl").unwrap();
    fs.rename(a.ino, b"full", a.ino, b"hl", 0).unwrap();
    assert_eq!(fs.getattr(h.ino).unwrap().nlink, 2);
    fs.rename(a.ino, b"hl", a.ino, b"hl", 0).unwrap();
    assert_eq!(
        errno(fs.rename(a.ino, b"missing", a.ino, b"x", 0)),
        libc::ENOENT
    );
    assert_eq!(errno(fs.rename(a.ino, b"hl", a.ino, b"x", 4)), libc::EINVAL);
    // Same-directory rename keeps sizes right.
    let before = fs.getattr(a.ino).unwrap().size;
    fs.rename(a.ino, b"hl", a.ino, b"hl2", 0).unwrap();
    assert_eq!(fs.getattr(a.ino).unwrap().size, before);
}

#[test]
fn hard_links() {
    let e = setup("fslink");
    let fs = &e.fs;
    let root = fs.root_ino();
    let (f, _) = fs.create(root, b"f", 0o644, C, true).unwrap();
    fs.forget(f.ino, 1);
    fs.write(f.ino, 0, b"data").unwrap();
    let l = fs.link(f.ino, root, b"l").unwrap();
    fs.forget(f.ino, 1);
    assert_eq!(l.nlink, 2);
    assert_eq!(errno(fs.link(f.ino, root, b"l")), libc::EEXIST);
    assert_eq!(errno(fs.link(root, root, b"rootlink")), libc::EPERM);
    fs.unlink(root, b"f").unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 1);
    assert_eq!(fs.read(f.ino, 0, 10).unwrap(), b"data");
    fs.unlink(root, b"l").unwrap();
    assert_eq!(
        errno(fs.getattr(f.ino)),
        libc::ENOENT,
        "no references: freed at once"
    );
}

#[test]
fn unlinked_while_open_then_forget_or_crash() {
    let e = setup("fsunlinked");
    let fs = &e.fs;
    let root = fs.root_ino();
    let (f, _) = fs.create(root, b"open", 0o644, C, true).unwrap();
    fs.write(f.ino, 0, b"still here").unwrap();
    fs.unlink(root, b"open").unwrap();
    assert_eq!(fs.read(f.ino, 0, 100).unwrap(), b"still here");
    fs.write(f.ino, 10, b"!").unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 0);
    fs.forget(f.ino, 1);
    assert_eq!(errno(fs.getattr(f.ino)), libc::ENOENT);
    // Crash while open: the next open frees it.
    let (g, _) = fs.create(root, b"crash", 0o644, C, true).unwrap();
    fs.write(g.ino, 0, &[5u8; 100_000]).unwrap();
    fs.unlink(root, b"crash").unwrap();
    e.pool.sync().unwrap();
    let image = e.dev.snapshot(); // power cut: only what is synced
    let pool2 = ObjPool::import(
        vec![image as Arc<dyn Device>],
        ImportOptions {
            force: true,
            hostname: "test".into(),
            ..Default::default()
        },
    )
    .unwrap();
    let os2 = pool2.open_objset(e.osid).unwrap();
    assert!(
        os2.info(tarn_obj::ObjectId(g.ino)).is_ok(),
        "parked in the unlinked set before remount"
    );
    let fs2 = Fs::open(pool2.clone(), os2.clone(), FsOptions::default()).unwrap();
    assert_eq!(errno(fs2.getattr(g.ino)), libc::ENOENT);
    assert!(
        os2.info(tarn_obj::ObjectId(g.ino)).is_err(),
        "freed at mount"
    );
}

#[test]
fn xattrs() {
    let e = setup("fsxattr");
    let fs = &e.fs;
    let (f, _) = fs.create(fs.root_ino(), b"f", 0o644, C, true).unwrap();
    assert_eq!(errno(fs.getxattr(f.ino, b"user.a")), libc::ENODATA);
    assert_eq!(fs.listxattr(f.ino).unwrap(), Vec::<Vec<u8>>::new());
    fs.setxattr(f.ino, b"user.a", b"1", 0).unwrap();
    assert_eq!(
        errno(fs.setxattr(f.ino, b"user.a", b"2", XATTR_CREATE)),
        libc::EEXIST
    );
    assert_eq!(
        errno(fs.setxattr(f.ino, b"user.b", b"2", XATTR_REPLACE)),
        libc::ENODATA
    );
    fs.setxattr(f.ino, b"user.a", b"22", XATTR_REPLACE).unwrap();
    assert_eq!(fs.getxattr(f.ino, b"user.a").unwrap(), b"22");
    let big: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
    fs.setxattr(f.ino, b"user.big", &big, XATTR_CREATE).unwrap();
    assert_eq!(fs.getxattr(f.ino, b"user.big").unwrap(), big);
    fs.setxattr(f.ino, b"user.big", &big[..10_000], 0).unwrap();
    assert_eq!(fs.getxattr(f.ino, b"user.big").unwrap(), &big[..10_000]);
    fs.setxattr(f.ino, b"user.empty", b"", 0).unwrap();
    assert_eq!(fs.getxattr(f.ino, b"user.empty").unwrap(), b"");
    assert_eq!(
        errno(fs.setxattr(f.ino, b"user.huge", &vec![0u8; 64 * 1024 + 1], 0)),
        libc::E2BIG
    );
    let mut l = fs.listxattr(f.ino).unwrap();
    l.sort();
    assert_eq!(
        l,
        vec![
            b"user.a".to_vec(),
            b"user.big".to_vec(),
            b"user.empty".to_vec()
        ]
    );
    fs.removexattr(f.ino, b"user.big").unwrap();
    assert_eq!(errno(fs.removexattr(f.ino, b"user.big")), libc::ENODATA);
    assert_eq!(fs.listxattr(f.ino).unwrap().len(), 2);
    fs.setxattr(fs.root_ino(), b"trusted.dir", b"x", 0).unwrap();
    assert_eq!(fs.getxattr(fs.root_ino(), b"trusted.dir").unwrap(), b"x");
    fs.unlink(fs.root_ino(), b"f").unwrap();
    fs.forget(f.ino, 2);
    assert_eq!(errno(fs.getattr(f.ino)), libc::ENOENT);
}

#[test]
fn big_directory_and_stable_offsets() {
    let run = tarn_testkit::seeded!(100_000);
    let n = run.count;
    let e = setup("fsbigdir");
    let fs = &e.fs;
    let d = fs.mkdir(fs.root_ino(), b"big", 0o755, C).unwrap();
    for i in 0..n {
        let (a, _) = fs
            .create(d.ino, format!("entry-{i:07}").as_bytes(), 0o644, C, true)
            .unwrap();
        fs.forget(a.ino, 1);
    }
    assert_eq!(fs.getattr(d.ino).unwrap().size, n + 2);
    assert_eq!(fs.dir_entries(d.ino).unwrap(), n);
    for i in (0..n).step_by(997) {
        fs.lookup(d.ino, format!("entry-{i:07}").as_bytes())
            .unwrap();
    }
    // Read half, delete and add around, resume: every survivor exactly once.
    let mut first = Vec::new();
    let mut resume = 0;
    fs.readdir(d.ino, 0, &mut |e| {
        first.push(e.name.clone());
        resume = e.next_offset;
        first.len() < (n / 2) as usize
    })
    .unwrap();
    for i in (0..n).step_by(3) {
        fs.unlink(d.ino, format!("entry-{i:07}").as_bytes())
            .unwrap();
    }
    for i in 0..1000 {
        let (a, _) = fs
            .create(d.ino, format!("new-{i}").as_bytes(), 0o644, C, true)
            .unwrap();
        fs.forget(a.ino, 1);
    }
    let mut rest = Vec::new();
    fs.readdir(d.ino, resume, &mut |e| {
        rest.push(e.name.clone());
        true
    })
    .unwrap();
    let seen: BTreeSet<Vec<u8>> = first.iter().chain(rest.iter()).cloned().collect();
    assert_eq!(seen.len(), first.len() + rest.len(), "no duplicates");
    for i in (0..n).filter(|i| i % 3 != 0) {
        assert!(
            seen.contains(format!("entry-{i:07}").as_bytes()),
            "survivor {i} listed"
        );
    }
    assert!(resume < (1 << 63));
}

#[test]
fn readonly_and_quota_and_statfs() {
    let e = setup("fsro");
    let fs = &e.fs;
    let st = fs.statfs().unwrap();
    assert!(st.blocks > 0 && st.blocks_free > 0 && st.name_max == 255);
    let (f, _) = fs.create(fs.root_ino(), b"f", 0o644, C, true).unwrap();
    fs.set_options(FsOptions {
        readonly: true,
        ..FsOptions::default()
    });
    assert_eq!(errno(fs.write(f.ino, 0, b"x")), libc::EROFS);
    assert_eq!(errno(fs.mkdir(fs.root_ino(), b"d", 0o755, C)), libc::EROFS);
    assert_eq!(errno(fs.unlink(fs.root_ino(), b"f")), libc::EROFS);
    assert_eq!(errno(fs.setxattr(f.ino, b"user.x", b"", 0)), libc::EROFS);
    assert_eq!(
        errno(fs.setattr(
            f.ino,
            &SetAttr {
                mode: Some(0),
                ..Default::default()
            }
        )),
        libc::EROFS
    );
    fs.read(f.ino, 0, 10).unwrap();
    fs.set_options(FsOptions::default());
    // A 1 MiB limit counted like the dataset layer counts a quota: what
    // the object set uses on disk plus what it has dirtied since.
    struct Quota {
        os: tarn_obj::ObjectSet,
        pool: Arc<ObjPool>,
        quota: u64,
    }
    impl SpaceLimit for Quota {
        fn remaining(&self) -> Option<(u64, bool)> {
            let dirty = self.os.dirty_bytes();
            let used = self.pool.deflate(self.os.used_bytes()) + dirty;
            Some((self.quota.saturating_sub(used), dirty > 0))
        }
    }
    fs.set_space_limit(Some(Arc::new(Quota { os: fs.objset().clone(), pool: e.pool.clone(), quota: 1 << 20 })));
    let st = fs.statfs().unwrap();
    assert!(st.blocks <= (1 << 20) / 4096 && st.blocks_avail < (1 << 20) / 4096, "{st:?}");
    // Unsynced writes count: 64 KiB at a time, no sync in between, stops
    // within one write of the limit.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let noise: Vec<u8> = (0..64 << 10)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut written = 0u64;
    let err = loop {
        match fs.write(f.ino, written, &noise) {
            Ok(_) => written += 64 << 10,
            Err(err) => break err,
        }
        assert!(written <= 2 << 20, "quota not enforced: {written} bytes written");
    };
    assert_eq!(err.errno(), libc::EDQUOT);
    e.pool.sync().unwrap();
    let used = e.pool.deflate(fs.objset().used_bytes());
    assert!(used <= (1 << 20) + (64 << 10), "overshoot past one write: used {used}");
    assert!(written >= (1 << 20) - (128 << 10), "quota refused early: {written} bytes written");
}

#[test]
fn atime_relatime() {
    let e = setup("fsatime");
    let fs = &e.fs;
    let (f, _) = fs.create(fs.root_ino(), b"f", 0o644, C, true).unwrap();
    fs.write(f.ino, 0, b"x").unwrap();
    fs.setattr(
        f.ino,
        &SetAttr {
            atime: Some(TimeSet::Ns(5)),
            ..Default::default()
        },
    )
    .unwrap();
    fs.read(f.ino, 0, 1).unwrap();
    assert!(fs.getattr(f.ino).unwrap().atime_ns > 5);
    fs.set_options(FsOptions {
        atime: false,
        ..FsOptions::default()
    });
    fs.setattr(
        f.ino,
        &SetAttr {
            atime: Some(TimeSet::Ns(5)),
            ..Default::default()
        },
    )
    .unwrap();
    fs.read(f.ino, 0, 1).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().atime_ns, 5);
}

#[test]
fn parallel_writers_on_different_files() {
    let e = setup("fspar");
    let fs = e.fs.clone();
    let inos: Vec<u64> = (0..4)
        .map(|i| {
            fs.create(fs.root_ino(), format!("f{i}").as_bytes(), 0o644, C, true)
                .unwrap()
                .0
                .ino
        })
        .collect();
    std::thread::scope(|s| {
        for (t, &ino) in inos.iter().enumerate() {
            let fs = fs.clone();
            s.spawn(move || {
                for k in 0..64u64 {
                    fs.write(ino, k * 65536, &vec![t as u8 + 1; 65536]).unwrap();
                    if k % 16 == 0 {
                        fs.mkdir(fs.root_ino(), format!("d{t}-{k}").as_bytes(), 0o755, C)
                            .unwrap();
                    }
                }
            });
        }
    });
    for (t, &ino) in inos.iter().enumerate() {
        let d = fs.read(ino, 0, 4 << 20).unwrap();
        assert_eq!(d.len(), 4 << 20);
        assert!(d.iter().all(|&b| b == t as u8 + 1));
    }
    fs.fsync(inos[0]).unwrap();
}

#[test]
fn persists_across_export_import() {
    let e = setup("fspersist");
    let fs = &e.fs;
    let root = fs.root_ino();
    let d = fs
        .mkdir(root, b"dir", 0o700, Cred { uid: 1, gid: 2 })
        .unwrap();
    let (f, _) = fs.create(d.ino, b"file", 0o640, C, true).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 256) as u8).collect();
    fs.write(f.ino, 0, &data).unwrap();
    fs.setxattr(f.ino, b"user.k", b"v", 0).unwrap();
    fs.symlink(d.ino, b"ln", b"file", C).unwrap();
    e.pool.export().unwrap();
    let image = e.dev.snapshot();
    let pool2 = ObjPool::import(
        vec![image as Arc<dyn Device>],
        ImportOptions {
            hostname: "test".into(),
            ..Default::default()
        },
    )
    .unwrap();
    let fs2 = Fs::open(
        pool2.clone(),
        pool2.open_objset(e.osid).unwrap(),
        FsOptions::default(),
    )
    .unwrap();
    let d2 = fs2.lookup(fs2.root_ino(), b"dir").unwrap();
    assert_eq!((d2.ino, d2.perm, d2.uid, d2.gid), (d.ino, 0o700, 1, 2));
    let f2 = fs2.lookup(d2.ino, b"file").unwrap();
    assert_eq!(fs2.read(f2.ino, 0, 400_000).unwrap(), data);
    assert_eq!(fs2.getxattr(f2.ino, b"user.k").unwrap(), b"v");
    let l = fs2.lookup(d2.ino, b"ln").unwrap();
    assert_eq!(fs2.readlink(l.ino).unwrap(), b"file");
}
