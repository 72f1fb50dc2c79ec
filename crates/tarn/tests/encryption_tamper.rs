//! Issue 12, test 3 through the daemon, the attacks that need no damage
//! to any block: valid encrypted blocks *moved*. With 4 KiB records on a
//! two-way mirror, each block of a file is one page on each side, so the
//! test can move whole blocks on every copy (no repair can hide it):
//! - one block of a file swapped with one block of a file in another
//!   dataset of the same encryption root (both valid ciphertext under
//!   keys of the same root);
//! - one block of a file overwritten with the same block's earlier
//!   version (the file rewritten since: a replay of an older txg).
//!
//! Reads of the moved blocks fail with EIO, every other block of both
//! files reads back exactly what was written (nothing returns another
//! block's plaintext), a scrub counts the errors, and `pool status -v`
//! names both files.
//!
//! And the other side of redundancy: with `copies=2` (one disk) both
//! copies of each encrypted block are written, and one damaged copy is
//! repaired from the other, by a read and by a scrub.

mod common;

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::FileExt;

use common::{longest_run, path_str, wait_mounted, Harness};

const PAGE: usize = 4096;
/// Blocks of each file.
const BLOCKS: usize = 64;


/// The pages of `device` written since `before` was taken: the longest
/// run of them, which a session that wrote one file of `BLOCKS` 4 KiB
/// records and nothing else of that size is made of (data goes to the
/// front of the vdev, metadata to the back).
fn file_run(device: &std::path::Path, before: &HashSet<u64>) -> u64 {
    let fresh: Vec<u64> = common::written_pages(device).into_iter().filter(|p| !before.contains(p)).collect();
    let (start, len) = longest_run(&fresh);
    assert!(len >= BLOCKS, "the session's longest run of new pages is {len} pages, not a file of {BLOCKS} blocks");
    start
}

fn pages_of(device: &std::path::Path) -> HashSet<u64> {
    common::written_pages(device).into_iter().collect()
}

/// Reads `path` block by block: the blocks that fail (with EIO, nothing
/// else), after asserting every other block is exactly `want`'s.
fn failing_blocks(path: &std::path::Path, want: &[u8]) -> Vec<usize> {
    let f = fs::File::open(path).unwrap();
    let mut bad = Vec::new();
    for (i, want) in want.chunks(PAGE).enumerate() {
        let mut got = vec![0u8; want.len()];
        match f.read_exact_at(&mut got, (i * PAGE) as u64) {
            Ok(()) => assert!(got == want, "{}: block {i} read back other bytes than were written", path.display()),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EIO), "{}: block {i}: {e}", path.display());
                bad.push(i);
            }
        }
    }
    bad
}

#[test]
fn encrypted_blocks_swapped_between_datasets_or_replayed_fail_their_reads() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(3);
    let h = Harness::start();
    let vdevs = h.vdev_files("vdevs", 2, 128 << 20);
    let vdir = vdevs[0].parent().unwrap().to_path_buf();
    h.create_pool("tank", &["mirror".into(), path_str(&vdevs[0]), path_str(&vdevs[1])]);
    let key = h.dir.join("secret.key");
    fs::write(&key, common::random_bytes(&mut rng, 32)).unwrap();
    let loc = format!("keylocation=file://{}", path_str(&key));
    let props = ["-o", "recordsize=4K", "-o", "compression=off"];
    let root: Vec<&str> = [&["create", "-o", "encryption=aes-256-gcm", "-o", "keyformat=raw", "-o", &loc][..], &props, &["tank/secret"]].concat();
    h.tarn_ok(&root[..]);
    let child: Vec<&str> = [&["create"][..], &props, &["tank/secret/other"]].concat();
    h.tarn_ok(&child[..]);
    assert_eq!(h.tarn_ok(&["get", "-H", "-o", "value", "encryptionroot", "tank/secret/other"]).trim(), "tank/secret");
    let secret = h.mountpoint("tank").join("secret");
    let other = secret.join("other");
    wait_mounted(&other);
    let (a_path, b_path) = (secret.join("victim-a.db"), other.join("victim-b.db"));
    let session = |write: &dyn Fn()| {
        h.tarn_ok(&["pool", "import", "-l", "-d", &path_str(&vdir), "tank"]);
        wait_mounted(&other);
        write();
        h.export("tank");
    };
    h.export("tank");

    // Each file written in a session of its own, so its blocks are the
    // run of pages that session wrote.
    let a_old = common::random_bytes(&mut rng, BLOCKS * PAGE);
    let before = pages_of(&vdevs[0]);
    session(&|| common::write_file(&a_path, &a_old));
    let a_old_at = file_run(&vdevs[0], &before);
    let b = common::random_bytes(&mut rng, BLOCKS * PAGE);
    let before = pages_of(&vdevs[0]);
    session(&|| common::write_file(&b_path, &b));
    let b_at = file_run(&vdevs[0], &before);
    // The old version of A's blocks, kept before A is rewritten (its
    // pages may be trimmed or reused after).
    let mut a_old_pages = vec![0u8; BLOCKS * PAGE];
    fs::File::open(&vdevs[0]).unwrap().read_exact_at(&mut a_old_pages, a_old_at).unwrap();
    let a = common::random_bytes(&mut rng, BLOCKS * PAGE);
    let before = pages_of(&vdevs[0]);
    session(&|| common::write_file(&a_path, &a));
    let a_at = file_run(&vdevs[0], &before);
    assert_ne!(a_at, a_old_at, "a rewrite is copy-on-write");

    let sides: Vec<fs::File> = vdevs.iter().map(|v| common::open_rw(v)).collect();
    let page_at = |at: u64| {
        let mut p = vec![0u8; PAGE];
        sides[0].read_exact_at(&mut p, at).unwrap();
        let mut q = vec![0u8; PAGE];
        sides[1].read_exact_at(&mut q, at).unwrap();
        assert_eq!(p, q, "the mirror's sides differ at {at}");
        p
    };
    let put = |at: u64, page: &[u8]| {
        for s in &sides {
            s.write_all_at(page, at).unwrap();
            s.sync_all().unwrap();
        }
    };
    // Swap: A's block at run index 10 with B's at run index 20, on both
    // sides. Replay: A's block at run index 40 gets the page the same run
    // index held before the rewrite (an earlier version of a block of A).
    let (a_swap, b_swap, replayed) = (a_at + 10 * PAGE as u64, b_at + 20 * PAGE as u64, a_at + 40 * PAGE as u64);
    let (pa, pb) = (page_at(a_swap), page_at(b_swap));
    assert_ne!(pa, pb);
    assert!(!a.windows(64).any(|w| w == &pa[..64]) && !b.windows(64).any(|w| w == &pb[..64]), "plaintext on the device");
    put(a_swap, &pb);
    put(b_swap, &pa);
    let old = &a_old_pages[40 * PAGE..41 * PAGE];
    assert_ne!(page_at(replayed), old, "the old version is another ciphertext");
    put(replayed, old);

    h.tarn_ok(&["pool", "import", "-l", "-d", &path_str(&vdir), "tank"]);
    wait_mounted(&other);
    let a_bad = failing_blocks(&a_path, &a);
    let b_bad = failing_blocks(&b_path, &b);
    assert_eq!(a_bad.len(), 2, "A: the swapped and the replayed block fail, no other ({a_bad:?})");
    assert_eq!(b_bad.len(), 1, "B: the swapped block fails, no other ({b_bad:?})");
    let err = fs::read(&a_path).expect_err("a file with moved blocks read whole");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");

    h.tarn_ok(&["pool", "scrub", "-w", "tank"]);
    let status = h.pool_json("tank");
    assert!(status["scan_stats"]["errors"].as_u64().unwrap_or(0) >= 3, "{status:#}");
    let text = h.tarn_ok(&["pool", "status", "-v", "tank"]);
    assert!(text.contains(&path_str(&a_path)) && text.contains(&path_str(&b_path)), "{text}");
    // The moved blocks still fail after the scrub (no copy could repair
    // them), and the other blocks still read.
    assert_eq!(failing_blocks(&a_path, &a), a_bad);
    assert_eq!(failing_blocks(&b_path, &b), b_bad);
}

/// `copies=2` on an encrypted dataset, on a single disk (the copies are
/// ditto blocks on one device): every block of a file is written twice
/// (each of its ciphertext pages is found twice among the pages its
/// session wrote, in the data region at the front of the device); with
/// one copy of every block damaged the file reads back whole (repaired
/// from the other copy); with the *other* copy of every block damaged
/// then, a scrub repairs them without an error and the file reads back
/// again (so the first repair rewrote good copies); in the end both
/// copies of every block are alike again. `copies=3` is refused in one
/// line: an encrypted block has room for two copies.
#[test]
fn copies_2_of_an_encrypted_file_are_both_written_and_repair_each_other() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(5);
    let h = Harness::start();
    let size = 128u64 << 20;
    let vdevs = h.vdev_files("vdevs", 1, size);
    let vdir = vdevs[0].parent().unwrap().to_path_buf();
    h.create_pool("tank", &[path_str(&vdevs[0])]);
    let key = h.dir.join("secret.key");
    fs::write(&key, common::random_bytes(&mut rng, 32)).unwrap();
    let loc = format!("keylocation=file://{}", path_str(&key));
    let base = ["create", "-o", "encryption=on", "-o", "keyformat=raw", "-o", &loc, "-o", "recordsize=4K", "-o", "compression=off"];
    let e = common::refused(&h, &[&base[..], &["-o", "copies=3", "tank/three"]].concat(), 1);
    assert!(e.contains("copies=3 is not possible with encryption"), "{e}");
    h.tarn_ok(&[&base[..], &["-o", "copies=2", "tank/secret"]].concat());
    let e = common::refused(&h, &["set", "copies=3", "tank/secret"], 1);
    assert!(e.contains("copies=3 is not possible with encryption"), "{e}");
    assert_eq!(h.tarn_ok(&["get", "-H", "-o", "value", "copies", "tank/secret"]).trim(), "2");
    let ds = h.mountpoint("tank").join("secret");
    wait_mounted(&ds);
    h.export("tank");

    // The file, written in a session of its own without fsync (so through
    // the txg, not the intent log).
    let data = common::random_bytes(&mut rng, BLOCKS * PAGE);
    let before = pages_of(&vdevs[0]);
    h.tarn_ok(&["pool", "import", "-l", "-d", &path_str(&vdir), "tank"]);
    wait_mounted(&ds);
    fs::write(ds.join("doubled"), &data).unwrap();
    h.export("tank");
    let device = common::open_rw(&vdevs[0]);
    let page_at = |at: u64| {
        let mut p = vec![0u8; PAGE];
        device.read_exact_at(&mut p, at).unwrap();
        p
    };
    // Pages of the data region (the front half) written by the session,
    // grouped by content: a block's two copies are two pages alike.
    let mut twins: std::collections::HashMap<Vec<u8>, Vec<u64>> = std::collections::HashMap::new();
    for at in common::written_pages(&vdevs[0]).into_iter().filter(|p| !before.contains(p) && *p < size / 2) {
        twins.entry(page_at(at)).or_default().push(at);
    }
    let pairs: Vec<(u64, u64)> = twins.values().filter(|v| v.len() == 2).map(|v| (v[0], v[1])).collect();
    assert!(pairs.len() >= BLOCKS, "{} blocks written twice, the file has {BLOCKS}", pairs.len());
    assert!(twins.keys().all(|p| !data.windows(64).any(|w| w == &p[..64])), "plaintext on the device");
    let damage = |which: fn(&(u64, u64)) -> u64| {
        let junk = vec![0x5au8; PAGE];
        for pair in &pairs {
            device.write_all_at(&junk, which(pair)).unwrap();
        }
        device.sync_all().unwrap();
    };

    // One copy of every block damaged: read back whole, from the others.
    damage(|p| p.0);
    h.tarn_ok(&["pool", "import", "-l", "-d", &path_str(&vdir), "tank"]);
    wait_mounted(&ds);
    assert_eq!(fs::read(ds.join("doubled")).unwrap(), data, "read with one copy of each block damaged");
    let checksum_errors: u64 = common::leaf_counters(&h.pool_json("tank"), &vdevs).iter().map(|c| c.checksum_errors).sum();
    assert!(checksum_errors >= BLOCKS as u64, "{checksum_errors} checksum errors counted");
    h.export("tank");

    // Then the other copy of every block: a scrub repairs them all.
    damage(|p| p.1);
    h.tarn_ok(&["pool", "import", "-l", "-d", &path_str(&vdir), "tank"]);
    wait_mounted(&ds);
    h.tarn_ok(&["pool", "scrub", "-w", "tank"]);
    let scan = &h.pool_json("tank")["scan_stats"];
    assert_eq!(scan["errors"].as_u64(), Some(0), "{scan:#}");
    assert!(scan["processed"].as_u64().unwrap_or(0) >= (BLOCKS * PAGE) as u64, "the scrub repaired every block: {scan:#}");
    assert_eq!(fs::read(ds.join("doubled")).unwrap(), data, "read after the scrub");
    h.export("tank");
    for (a, b) in &pairs {
        assert_eq!(page_at(*a), page_at(*b), "the copies at {a} and {b} differ after the repairs");
    }
}
