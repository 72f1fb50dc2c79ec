//! A pool filled to the brim and emptied again, in process (issue 9,
//! item 1): writes stop with ENOSPC close to what `available` promised,
//! deletes always go through, the freed space takes writes again at once
//! (no export, no waiting for a timeout), no txg ever fails for space, and
//! the checker finds nothing wrong. Mirror and raidz1, three rounds each.

use std::sync::Arc;

use tarn_fs::*;
use tarn_obj::{ObjPool, TopKind};

mod support;

const C: Cred = Cred::ROOT;

fn pool(kind: TopKind, devices: usize, size: u64) -> (Arc<ObjPool>, Arc<Fs>) {
    let (pool, _) = support::mem_pool("full", kind, devices, size);
    let fs = support::new_fs(&pool, FsOptions::default());
    pool.sync().unwrap();
    (pool, fs)
}

/// Incompressible bytes (xorshift).
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn available(pool: &ObjPool) -> u64 {
    pool.deflate(pool.space().available)
}

/// Writes 1 MiB chunks into `name` until ENOSPC; returns bytes written.
/// On a pool already full even the file's creation may be refused (its
/// dnode and directory entry need room too): 0 bytes, no file.
fn fill_big(fs: &Fs, name: &[u8], chunk: &[u8]) -> u64 {
    let f = match fs.create(fs.root_ino(), name, 0o644, C, true) {
        Ok((f, _)) => f,
        Err(e) if e.errno() == libc::ENOSPC => return 0,
        Err(e) => panic!("create {}: {e}", String::from_utf8_lossy(name)),
    };
    let mut written = 0u64;
    loop {
        match fs.write(f.ino, written, chunk) {
            Ok(n) => written += u64::from(n),
            Err(e) => {
                assert_eq!(e.errno(), libc::ENOSPC, "after {written} bytes: {e}");
                break;
            }
        }
    }
    fs.forget(f.ino, 1);
    written
}

/// Small files of `len` bytes in directory `dir` until ENOSPC; returns how many.
fn fill_small(fs: &Fs, dir: u64, len: usize, prefix: &str) -> u64 {
    let data = noise(len, 7);
    let mut n = 0u64;
    loop {
        let name = format!("{prefix}{n}");
        match fs.create(dir, name.as_bytes(), 0o644, C, true) {
            Ok((a, _)) => {
                let r = fs.write(a.ino, 0, &data);
                fs.forget(a.ino, 1);
                match r {
                    Ok(_) => n += 1,
                    Err(e) => {
                        assert_eq!(e.errno(), libc::ENOSPC, "file {n}: {e}");
                        break;
                    }
                }
            }
            Err(e) => {
                assert_eq!(e.errno(), libc::ENOSPC, "file {n}: {e}");
                break;
            }
        }
    }
    n
}

fn empty_dir(fs: &Fs, dir: u64) {
    let mut names = Vec::new();
    fs.readdir(dir, 2, &mut |e| {
        names.push(e.name.clone());
        true
    })
    .unwrap();
    for name in names {
        fs.unlink(dir, &name).unwrap_or_else(|e| panic!("unlink on a full pool: {e}"));
    }
}

fn journey(kind: TopKind, devices: usize) {
    let (pool, fs) = pool(kind, devices, 192 << 20);
    let chunk = noise(1 << 20, 3);
    for round in 0..3 {
        let suspended = |what: &str| assert!(pool.suspended().is_none(), "round {round}, {what}: {:?}", pool.suspended());
        // The small files' directory first: on a pool one big file filled,
        // ENOSPC for a mkdir is a fair answer.
        let dir = fs.mkdir(fs.root_ino(), b"small", 0o755, C).expect("mkdir").ino;
        // One big file until ENOSPC: what `available` promised, within 1%.
        let promised = available(&pool);
        let written = fill_big(&fs, b"big", &chunk);
        suspended("big file");
        let gap = promised.abs_diff(written);
        // (What the pool said right after the refusal, for a failure to name its state.)
        assert!(
            gap * 100 <= promised,
            "round {round}: available said {promised}, wrote {written}; then {:?}, dirty {} bytes (worst case {}), gang blocks {}, refusals {:?}",
            pool.space(),
            pool.dirty_bytes(),
            pool.dirty_asize(),
            pool.gang_blocks(),
            pool.nospace_refusals()
        );
        // Small files into what is left, then the big file goes and small
        // files fill that too: tens of thousands on a full pool.
        let first = fill_small(&fs, dir, 3000, "a");
        fs.unlink(fs.root_ino(), b"big").expect("unlink on a full pool");
        let files = first + fill_small(&fs, dir, 3000, "b");
        suspended("small files");
        assert!(files > 20_000, "round {round}: only {files} small files fit; refusals {:?}", pool.nospace_refusals());
        eprintln!("round {round}: {written} bytes in one file, then {files} small files ({} gang blocks so far)", pool.gang_blocks());
        // Everything goes, on a full pool, and the space is back at once.
        empty_dir(&fs, dir);
        fs.rmdir(fs.root_ino(), b"small").expect("rmdir on a full pool");
        fs.forget(dir, 1);
        suspended("deletes");
        let again = fill_big(&fs, b"again", &chunk);
        suspended("writing again");
        // Nothing more fits later either: ENOSPC was not a passing state.
        for _ in 0..tarn_obj::DEFER_TXGS + 1 {
            pool.sync().unwrap();
        }
        let later = fill_big(&fs, b"later", &chunk);
        assert_eq!(later, 0, "round {round}: {later} more bytes fit after a few txgs (again: {again} of {written}; {:?})", pool.space());
        // (Created empty, or refused if not even its metadata fitted.)
        match fs.unlink(fs.root_ino(), b"later") {
            Ok(()) => {}
            Err(e) if e.errno() == libc::ENOENT => {}
            Err(e) => panic!("unlink later: {e}"),
        }

        // Within 1% of the first fill, give or take the one 1 MiB write
        // that did not fit (the measure's grain).
        assert!((again + chunk.len() as u64) * 100 >= written * 99, "round {round}: after deleting everything only {again} of {written} bytes fit again");
        fs.unlink(fs.root_ino(), b"again").unwrap();
        let report = pool.check();
        assert!(report.ok(), "round {round}: {report:?}");
    }
}

#[test]
fn mirror_fills_empties_and_fills_again() {
    journey(TopKind::Mirror, 2);
}

#[test]
fn raidz1_fills_empties_and_fills_again() {
    journey(TopKind::Raidz { parity: 1 }, 4);
}

/// `available` is what one big file can take, within 1%, on raidz widths
/// where the ideal (N-p)/N deflation would overstate it by 3-5.5%.
#[test]
fn available_is_writable_on_several_widths() {
    let chunk = noise(1 << 20, 11);
    for (kind, devices) in [
        (TopKind::Raidz { parity: 1 }, 3),
        (TopKind::Raidz { parity: 1 }, 4),
        (TopKind::Raidz { parity: 2 }, 6),
        (TopKind::Raidz { parity: 2 }, 8),
        (TopKind::Mirror, 3),
    ] {
        let (pool, fs) = pool(kind.clone(), devices, 96 << 20);
        let promised = available(&pool);
        let written = fill_big(&fs, b"big", &chunk);
        let gap = promised.abs_diff(written);
        assert!(
            gap * 100 <= promised,
            "{kind:?} x{devices}: available said {promised}, {written} fit ({:.2}% off)",
            gap as f64 * 100.0 / promised as f64
        );
        let report = pool.check();
        assert!(report.ok(), "{kind:?} x{devices}: {report:?}");
    }
}
