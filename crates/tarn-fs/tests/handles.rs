//! File handles (inode number + generation) and operations without FUSE
//! references, as NFS uses them, on a memory-device pool.

use std::collections::HashSet;

use tarn_fs::*;

mod support;

const C: Cred = Cred::ROOT;

/// Deleting and re-creating files many times, inside one txg and across
/// txgs: every handle of a deleted file is stale, every live one answers
/// with its own file's attributes, and no (ino, generation) is given twice.
#[test]
fn handles_of_deleted_files_are_stale_and_never_reused() {
    let fs = support::single_fs("fhandles");
    let root = fs.root_ino();
    let d = fs.mkdir_noref(root, b"d", 0o755, C).unwrap();
    let mut seen = HashSet::new();
    let mut dead = Vec::new();
    for round in 0..40u32 {
        for i in 0..25u32 {
            let name = format!("f{}", i % 5);
            let a = fs.create_noref(d.ino, name.as_bytes(), 0o644, C, true).unwrap().0;
            assert!(seen.insert((a.ino, a.generation)), "handle ({}, {}) given twice", a.ino, a.generation);
            fs.write(a.ino, 0, format!("{round}/{i}").as_bytes()).unwrap();
            assert_eq!(fs.attr_by_handle(a.ino, a.generation).unwrap(), fs.getattr(a.ino).unwrap());
            assert_eq!(fs.references(a.ino), 0);
            if i % 3 == 0 {
                let m = fs.mkdir_noref(d.ino, b"sub", 0o755, C).unwrap();
                fs.rmdir(d.ino, b"sub").unwrap();
                dead.push((m.ino, m.generation));
            }
            fs.unlink(d.ino, name.as_bytes()).unwrap();
            dead.push((a.ino, a.generation));
        }
        if round % 4 == 3 {
            fs.pool().sync().unwrap(); // the next rounds run in later txgs
        }
    }
    let live = fs.create_noref(d.ino, b"live", 0o600, C, true).unwrap().0;
    for &(ino, generation) in &dead {
        assert!(matches!(fs.attr_by_handle(ino, generation), Err(FsError::Stale)), "({ino}, {generation}) not stale");
    }
    assert_eq!(fs.attr_by_handle(live.ino, live.generation).unwrap().ino, live.ino);
    let e = fs.attr_by_handle(live.ino, live.generation + 1).unwrap_err();
    assert_eq!(e.errno(), libc::ESTALE);
    assert!(matches!(fs.attr_by_handle(live.ino, live.generation.wrapping_sub(1)), Err(FsError::Stale)));
}

/// Garbage handles: object 0, the master node, the unlinked set, xattr
/// objects, numbers past the last object. All `Stale`, none `Corrupt`, and
/// the only handles that answer are those of the live inodes.
#[test]
fn garbage_handles_are_stale() {
    let fs = support::single_fs("fgarbage");
    let root = fs.root_ino();
    let f = fs.create_noref(root, b"f", 0o644, C, true).unwrap().0;
    fs.setxattr(f.ino, b"user.big", &vec![7u8; 20_000], 0).unwrap(); // an object of its own
    let dir = fs.mkdir_noref(root, b"d", 0o755, C).unwrap();
    let live: HashSet<u64> = [root, f.ino, dir.ino].into();
    let gens = [0, 1, f.generation, dir.generation, u64::MAX];
    for ino in (0..300).chain([u64::MAX, u64::MAX / 2, 1 << 40]) {
        for &g in &gens {
            match fs.attr_by_handle(ino, g) {
                Ok(a) => {
                    assert!(live.contains(&ino), "handle ({ino}, {g}) answered for a non-inode");
                    assert_eq!((a.ino, a.generation), (ino, g));
                }
                Err(FsError::Stale) => {}
                Err(e) => panic!("handle ({ino}, {g}): {e} instead of Stale"),
            }
        }
    }
}

/// An inode named only by an NFS handle (no FUSE reference) is freed when
/// its last link goes, and its space returns; one a FUSE lookup still
/// references waits in the unlinked set (its handle is stale meanwhile)
/// and is freed by the last forget.
#[test]
fn unlink_frees_at_once_without_references_and_parks_with_them() {
    let fs = support::single_fs("fnoref");
    let root = fs.root_ino();
    // Incompressible (the pool compresses): a xorshift stream.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let data: Vec<u8> = (0..4 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let used = |fs: &Fs| {
        fs.pool().sync().unwrap();
        fs.objset().used_bytes()
    };
    let base = used(&fs);

    // NFS only: no references from create, lookup, link, readdir_plus.
    let a = fs.create_noref(root, b"nfs", 0o644, C, true).unwrap().0;
    fs.write(a.ino, 0, &data).unwrap();
    fs.lookup_noref(root, b"nfs").unwrap();
    fs.link_noref(a.ino, root, b"nfs2").unwrap();
    fs.readdir_plus_noref(root, 0, &mut |_, _| true).unwrap();
    let s = fs.symlink_noref(root, b"s", b"nfs", C).unwrap();
    assert_eq!(fs.references(s.ino), 0);
    fs.unlink(root, b"s").unwrap();
    let nod = fs.mknod_noref(root, b"fifo", libc::S_IFIFO | 0o644, 0, C).unwrap();
    assert_eq!(fs.references(nod.ino), 0);
    assert_eq!(fs.references(a.ino), 0);
    assert!(used(&fs) >= base + data.len() as u64);
    fs.unlink(root, b"nfs").unwrap();
    assert!(fs.attr_by_handle(a.ino, a.generation).is_ok(), "one link left");
    fs.unlink(root, b"nfs2").unwrap();
    assert!(matches!(fs.attr_by_handle(a.ino, a.generation), Err(FsError::Stale)));
    assert!(matches!(fs.getattr(a.ino), Err(FsError::NotFound)), "freed, not parked");
    assert!(used(&fs) < base + data.len() as u64 / 4, "the space came back");

    // FUSE: a lookup reference keeps the unlinked inode until forget.
    let b = fs.create_noref(root, b"fuse", 0o644, C, true).unwrap().0;
    fs.write(b.ino, 0, &data).unwrap();
    fs.lookup(root, b"fuse").unwrap();
    fs.unlink(root, b"fuse").unwrap();
    assert!(matches!(fs.attr_by_handle(b.ino, b.generation), Err(FsError::Stale)), "no link: stale to NFS");
    assert_eq!(fs.read(b.ino, 0, 4).unwrap(), &data[..4], "still open through FUSE");
    assert!(used(&fs) >= base + data.len() as u64);
    fs.forget(b.ino, 1);
    assert!(matches!(fs.getattr(b.ino), Err(FsError::NotFound)));
    assert!(used(&fs) < base + data.len() as u64 / 4);
}

/// A txg lost in a power cut is written again with the same number and the
/// same new object ids. A handle a client kept to a file created in the
/// lost txg must not name the file created in its place after the restart:
/// each writable open starts a new generation epoch, synced first.
#[test]
fn a_lost_txg_written_again_gives_new_generations() {
    use tarn_obj::TopKind;

    let (pool, devs) = support::mem_pool("fhcrash", TopKind::Disk, 1, 256 << 20);
    let fs = support::new_fs(&pool, FsOptions::default());
    let osid = fs.objset().id();
    let root = fs.root_ino();
    fs.create_noref(root, b"kept", 0o644, C, true).unwrap();
    fs.fsync(root).unwrap();
    // Created, handed out, never made durable: the power goes.
    let lost = fs.create_noref(root, b"lost", 0o644, C, true).unwrap().0;
    let image = devs[0].snapshot();
    drop(fs);
    drop(pool);

    let fs = support::reopen_fs(image, osid);
    assert!(fs.lookup_noref(root, b"lost").is_err(), "the creation was lost with its txg");
    let mut again = Vec::new();
    for i in 0..20u32 {
        again.push(fs.create_noref(root, format!("new{i}").as_bytes(), 0o644, C, true).unwrap().0);
    }
    assert!(again.iter().any(|a| a.ino == lost.ino), "the lost inode number is given again (what this test is about)");
    for a in &again {
        assert_ne!((a.ino, a.generation), (lost.ino, lost.generation), "a new file carries a lost file's handle");
    }
    assert!(matches!(fs.attr_by_handle(lost.ino, lost.generation), Err(FsError::Stale)), "the lost file's handle is stale");
}

fn flat(segs: &[Segment]) -> Vec<u8> {
    let mut out = Vec::new();
    for s in segs {
        s.append_to(&mut out);
    }
    out
}

/// The answers a server gives from memory alone (`attr_by_handle_cached`,
/// `Checked::read_segments_cached`) are the full path's answers, and they
/// stand aside (None) whenever the full path would read the pool, change
/// the inode (atime) or answer an error: after a re-import nothing is in
/// memory, a refused caller and a stale handle get None, never data.
#[test]
fn cached_answers_are_the_full_paths_or_none() {
    use tarn_obj::TopKind;

    let (pool, devs) = support::mem_pool("fhcached", TopKind::Disk, 1, 256 << 20);
    let fs = support::new_fs(&pool, FsOptions::default());
    let osid = fs.objset().id();
    let root = fs.root_ino();
    let f = fs.create_noref(root, b"f", 0o640, Cred { uid: 1000, gid: 1000 }, true).unwrap().0;
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    fs.write(f.ino, 0, &data).unwrap();
    let owner = Caller { uid: 1000, gid: 1000, groups: vec![] };
    let other = Caller { uid: 2000, gid: 2000, groups: vec![] };
    let check = |fs: &Fs, off: u64, len: u32| {
        let (segs, attr) = fs.checked(&owner).read_segments_cached(f.ino, off, len).expect("cached");
        let want = fs.read(f.ino, off, len).unwrap();
        assert!(flat(&segs) == want, "read of {len} at {off}");
        assert_eq!(attr, fs.getattr(f.ino).unwrap());
    };

    // Dirty, never read: the first read is due to update atime (a change).
    assert_eq!(fs.attr_by_handle_cached(f.ino, f.generation), Some(fs.attr_by_handle(f.ino, f.generation).unwrap()));
    assert!(fs.checked(&owner).read_segments_cached(f.ino, 0, 4096).is_none(), "atime is due: the full path answers");
    fs.checked(&owner).read_segments(f.ino, 0, 4096).unwrap();
    for (off, len) in [(0, 4096), (131_000, 70_000), (299_000, 1 << 20), (400_000, 10)] {
        check(&fs, off, len);
    }
    // Refused or stale: None, and the full path gives the error.
    assert!(fs.checked(&other).read_segments_cached(f.ino, 0, 4096).is_none());
    assert!(matches!(fs.checked(&other).read_segments(f.ino, 0, 4096), Err(FsError::Access)));
    assert!(fs.attr_by_handle_cached(f.ino, f.generation + 1).is_none());
    assert!(fs.checked(&owner).read_segments_cached(root, 0, 10).is_none(), "a directory");
    let g = fs.create_noref(root, b"g", 0o644, C, true).unwrap().0;
    fs.unlink(root, b"g").unwrap();
    assert!(fs.attr_by_handle_cached(g.ino, g.generation).is_none(), "an unlinked inode");
    assert!(fs.checked(&Caller::root()).read_segments_cached(g.ino, 0, 10).is_none());

    // Written and re-imported: nothing in memory, so nothing cached
    // answers until the full path has read it.
    fs.pool().sync().unwrap();
    let image = devs[0].snapshot();
    drop(fs);
    drop(pool);
    let fs = support::reopen_fs(image, osid);
    assert!(fs.attr_by_handle_cached(f.ino, f.generation).is_none(), "the inode's dnode is not in memory");
    assert!(fs.checked(&owner).read_segments_cached(f.ino, 0, 4096).is_none());
    let a = fs.attr_by_handle(f.ino, f.generation).unwrap();
    assert_eq!(fs.attr_by_handle_cached(f.ino, f.generation), Some(a));
    fs.read(f.ino, 0, data.len() as u32).unwrap();
    check(&fs, 5, 200_000);
}
