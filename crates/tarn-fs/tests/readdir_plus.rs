//! `Fs::readdir_plus` (FUSE READDIRPLUS): the same entries as `readdir`,
//! each with the attributes `getattr` gives, and one reference for every
//! entry the caller takes — the kernel counts each listed entry as a lookup
//! and gives it back with FORGET, so a missing reference frees a file that
//! is still open, and a surplus one keeps an unlinked file forever.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rand::Rng;
use tarn_fs::*;

mod support;

const C: Cred = Cred::ROOT;

fn new_fs(name: &str) -> Arc<Fs> {
    support::single_fs(name)
}

/// A directory `d` under the root holding `files` files, `dirs`
/// directories and a symlink, with no references left (as if the kernel
/// had forgotten them all).
fn populated(fs: &Fs, files: usize, dirs: usize) -> u64 {
    let d = fs.mkdir(fs.root_ino(), b"d", 0o755, C).unwrap();
    fs.forget(d.ino, 1);
    for i in 0..files {
        let (a, _) = fs.create(d.ino, format!("file-{i:05}").as_bytes(), 0o640, C, true).unwrap();
        fs.write(a.ino, 0, &vec![i as u8; i % 3000]).unwrap();
        fs.forget(a.ino, 1);
    }
    for i in 0..dirs {
        let a = fs.mkdir(d.ino, format!("dir-{i:03}").as_bytes(), 0o700, C).unwrap();
        fs.forget(a.ino, 1);
    }
    let s = fs.symlink(d.ino, b"link", b"file-00001", C).unwrap();
    fs.forget(s.ino, 1);
    d.ino
}

fn plain_listing(fs: &Fs, dir: u64) -> Vec<(Vec<u8>, u64, FileKind, u64)> {
    let mut v = Vec::new();
    fs.readdir(dir, 0, &mut |e| {
        v.push((e.name.clone(), e.ino, e.kind, e.next_offset));
        true
    })
    .unwrap();
    v
}

#[test]
fn readdir_plus_lists_what_readdir_lists_with_getattr_attributes() {
    let fs = new_fs("rdpsame");
    let d = populated(&fs, 700, 20);
    let plain = plain_listing(&fs, d);
    assert_eq!(plain.len(), 2 + 700 + 20 + 1);
    let mut plus = Vec::new();
    let mut attrs = Vec::new();
    fs.readdir_plus(d, 0, &mut |e, a| {
        plus.push((e.name.clone(), e.ino, e.kind, e.next_offset));
        attrs.push(*a.expect("attributes of every entry"));
        true
    })
    .unwrap();
    assert_eq!(plus, plain, "same names, inodes, types and offsets in the same order");
    for ((name, ino, kind, _), a) in plus.iter().zip(&attrs) {
        assert_eq!(a.ino, *ino, "{}", String::from_utf8_lossy(name));
        assert_eq!(a.kind, *kind, "{}", String::from_utf8_lossy(name));
        assert_eq!(*a, fs.getattr(*ino).unwrap(), "attributes of {}", String::from_utf8_lossy(name));
    }
    // Every entry but `.` and `..` was taken once: one reference each.
    for (name, ino, _, _) in &plus {
        let want = if name == b"." || name == b".." { 0 } else { 1 };
        assert_eq!(fs.references(*ino), want, "references of {}", String::from_utf8_lossy(name));
    }
    // Resuming anywhere gives the rest, as readdir does.
    for cut in [1usize, 2, 3, 250, 722] {
        let mut rest = Vec::new();
        fs.readdir_plus(d, plain[cut - 1].3, &mut |e, _| {
            rest.push(e.name.clone());
            true
        })
        .unwrap();
        let want: Vec<Vec<u8>> = plain[cut..].iter().map(|x| x.0.clone()).collect();
        assert_eq!(rest, want, "resume after entry {cut}");
    }
}

#[test]
fn an_entry_refused_by_the_caller_gets_no_reference() {
    let fs = new_fs("rdprefuse");
    let d = populated(&fs, 600, 0);
    let plain = plain_listing(&fs, d);
    // Like a FUSE reply buffer: take 204 entries, refuse the 205th, then
    // continue from the last one taken, as the kernel does.
    let mut offset = 0;
    let mut taken: BTreeMap<u64, u64> = BTreeMap::new();
    let mut refused = BTreeSet::new();
    loop {
        let mut n = 0;
        let mut last = None;
        fs.readdir_plus(d, offset, &mut |e, _| {
            if n == 204 {
                refused.insert(e.ino);
                return false;
            }
            n += 1;
            last = Some(e.next_offset);
            if e.name != b"." && e.name != b".." {
                *taken.entry(e.ino).or_default() += 1;
            }
            true
        })
        .unwrap();
        match last {
            Some(o) if n == 204 => offset = o,
            _ => break,
        }
    }
    assert_eq!(taken.len(), 601, "every file (and the symlink) taken exactly once across the calls");
    assert!(taken.values().all(|&c| c == 1));
    assert!(!refused.is_empty());
    for (name, ino, _, _) in &plain[2..] {
        assert_eq!(fs.references(*ino), 1, "{}: refused entries must not keep a reference", String::from_utf8_lossy(name));
    }
    // Giving the references back and removing the files frees every inode:
    // nothing was counted twice.
    for (name, ino, _, _) in &plain[2..] {
        fs.forget(*ino, 1);
        fs.unlink(d, name).unwrap();
        assert_eq!(fs.getattr(*ino).unwrap_err().errno(), libc::ENOENT, "{} freed", String::from_utf8_lossy(name));
    }
}

#[test]
fn a_listed_file_unlinked_while_held_stays_until_forgotten() {
    let fs = new_fs("rdpunlink");
    let d = populated(&fs, 10, 0);
    let (name, ino) = (b"file-00007".to_vec(), fs.lookup(d, b"file-00007").unwrap().ino);
    fs.forget(ino, 1);
    assert_eq!(fs.references(ino), 0);
    let data = fs.read(ino, 0, 100_000).unwrap();
    assert_eq!(data.len(), 7);

    // Control: with no reference the last unlink frees the inode at once.
    let control = fs.lookup(d, b"file-00008").unwrap().ino;
    fs.forget(control, 1);
    fs.unlink(d, b"file-00008").unwrap();
    assert_eq!(fs.getattr(control).unwrap_err().errno(), libc::ENOENT);

    // The kernel learned of the file from a listing only (no lookup).
    fs.readdir_plus(d, 0, &mut |_, _| true).unwrap();
    assert_eq!(fs.references(ino), 1);
    fs.unlink(d, &name).unwrap();
    let a = fs.getattr(ino).expect("still there while referenced");
    assert_eq!(a.nlink, 0);
    assert_eq!(fs.read(ino, 0, 100_000).unwrap(), data, "readable after unlink");
    fs.write(ino, 7, b"more").unwrap();
    fs.forget(ino, 1);
    assert_eq!(fs.getattr(ino).unwrap_err().errno(), libc::ENOENT, "freed by the last forget");
    // Every other listed entry gives its reference back too.
    for (_, other, _, _) in plain_listing(&fs, d).iter().skip(2) {
        fs.forget(*other, 1);
        assert_eq!(fs.references(*other), 0);
    }
}

/// Listers (taking and later forgetting references, like the kernel) race
/// with creators and unlinkers. At the end every name is removed and every
/// reference given back: every inode ever made must be freed, and no
/// listed entry may have named a freed inode.
#[test]
fn listing_racing_with_unlinks_leaks_and_frees_nothing_early() {
    let run = tarn_testkit::seeded!(3000);
    let count = run.count;
    let fs = new_fs("rdprace");
    let d = fs.mkdir(fs.root_ino(), b"d", 0o755, C).unwrap().ino;
    let done = Arc::new(AtomicBool::new(false));
    let listers: Vec<_> = (0..2)
        .map(|_| {
            let fs = fs.clone();
            let done = done.clone();
            std::thread::spawn(move || {
                let mut passes = 0u64;
                while !done.load(Ordering::Relaxed) || passes == 0 {
                    let mut held = Vec::new();
                    let mut offset = 0;
                    loop {
                        // Small "replies" so listings interleave with changes.
                        let mut n = 0;
                        let mut last = None;
                        let r = fs.readdir_plus(d, offset, &mut |e, a| {
                            if n == 37 {
                                return false;
                            }
                            let a = a.expect("attributes of every entry");
                            assert_eq!(a.ino, e.ino);
                            assert!(a.nlink > 0 || e.name == b"..", "listed entry {:?} names an unlinked inode", e.name);
                            n += 1;
                            last = Some(e.next_offset);
                            if e.name != b"." && e.name != b".." {
                                held.push(e.ino);
                            }
                            true
                        });
                        r.expect("listing");
                        match last {
                            Some(o) if n == 37 => offset = o,
                            _ => break,
                        }
                    }
                    for ino in held {
                        assert!(fs.getattr(ino).is_ok(), "inode {ino} freed while referenced");
                        fs.forget(ino, 1);
                    }
                    passes += 1;
                }
                passes
            })
        })
        .collect();
    let mut rng = run.rng(0);
    let mut live: BTreeSet<u32> = BTreeSet::new();
    let mut made = Vec::new();
    for step in 0..count {
        let k: u32 = rng.gen_range(0..200);
        let name = format!("n{k}");
        if live.contains(&k) {
            fs.unlink(d, name.as_bytes()).unwrap_or_else(|e| panic!("step {step}: unlink {name}: {e}"));
            live.remove(&k);
        } else {
            let (a, _) = fs.create(d, name.as_bytes(), 0o644, C, true).unwrap_or_else(|e| panic!("step {step}: create {name}: {e}"));
            fs.write(a.ino, 0, name.as_bytes()).unwrap();
            fs.forget(a.ino, 1);
            made.push(a.ino);
            live.insert(k);
        }
    }
    done.store(true, Ordering::Relaxed);
    for l in listers {
        assert!(l.join().expect("lister") > 0);
    }
    for k in live {
        fs.unlink(d, format!("n{k}").as_bytes()).unwrap();
    }
    for ino in made {
        assert_eq!(fs.references(ino), 0, "inode {ino} keeps a reference");
        assert_eq!(fs.getattr(ino).unwrap_err().errno(), libc::ENOENT, "inode {ino} not freed");
    }
    assert_eq!(fs.dir_entries(d).unwrap(), 0);
}
