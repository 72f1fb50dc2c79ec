//! fallocate modes and SEEK_DATA / SEEK_HOLE on a memory-device pool.

use rand::{Rng, RngCore};
use std::sync::Arc;
use tarn_fs::falloc::{FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH, FALLOC_FL_ZERO_RANGE as ZERO, SEEK_DATA, SEEK_HOLE};
use tarn_fs::*;
use tarn_obj::{ChecksumKind, Compression, ObjPool, ObjectId, TopKind, WriteProps};

mod support;

const C: Cred = Cred::ROOT;
const MIB: u64 = 1 << 20;

struct Env {
    pool: Arc<ObjPool>,
    fs: Arc<Fs>,
}

fn setup(name: &str, size: u64, opts: FsOptions) -> Env {
    let (pool, _) = support::mem_pool(name, TopKind::Disk, 1, size);
    let fs = support::new_fs(&pool, opts);
    Env { pool, fs }
}

fn errno<T: std::fmt::Debug>(r: Result<T>) -> i32 {
    r.expect_err("expected an error").errno()
}

fn noise(rng: &mut impl RngCore, len: usize) -> Vec<u8> {
    // Never zero: a block of it is never all zeros (never a hole when compressed).
    (0..len).map(|_| rng.gen_range(1..=255u8)).collect()
}

fn sync_all(pool: &ObjPool) {
    // Frees come back to the pool after the defer window.
    for _ in 0..=tarn_obj::DEFER_TXGS + 1 {
        pool.sync().unwrap();
    }
}

#[test]
fn punch_hole_frees_blocks_and_space() {
    let e = setup("fpunch", 256 * MIB, FsOptions::default());
    let fs = &e.fs;
    let mut rng = rand::thread_rng();
    let (f, _) = fs.create(fs.root_ino(), b"f", 0o644, C, true).unwrap();
    let data = noise(&mut rng, (16 * MIB) as usize);
    fs.write(f.ino, 0, &data).unwrap();
    sync_all(&e.pool);
    let used0 = fs.objset().used_bytes();
    let alloc0 = e.pool.space().alloc;
    let blocks0 = fs.getattr(f.ino).unwrap().blocks;
    // 8 MiB from an unaligned offset: 63 whole 128 KiB blocks freed, two edges zeroed.
    let (off, len) = (4 * MIB + 1000, 8 * MIB);
    let a = fs.fallocate(f.ino, off, len, PUNCH | KEEP).unwrap();
    assert_eq!(a.size, 16 * MIB, "punching keeps the size");
    // Before the txg syncs: zeros read back, and the hole is seen.
    let back = fs.read(f.ino, 0, (16 * MIB) as u32).unwrap();
    assert_eq!(&back[..off as usize], &data[..off as usize]);
    assert!(back[off as usize..(off + len) as usize].iter().all(|&b| b == 0));
    assert_eq!(&back[(off + len) as usize..], &data[(off + len) as usize..]);
    let first_hole = off.div_ceil(128 << 10) * (128 << 10);
    assert_eq!(fs.seek_data_hole(f.ino, 0, SEEK_HOLE).unwrap(), first_hole);
    let data_again = ((off + len) / (128 << 10)) * (128 << 10);
    assert_eq!(fs.seek_data_hole(f.ino, first_hole, SEEK_DATA).unwrap(), data_again);
    sync_all(&e.pool);
    let freed = 63 * (128 << 10);
    let used1 = fs.objset().used_bytes();
    assert!(used0 - used1 >= freed, "dataset used {used0} -> {used1}, expected at least {freed} less");
    let alloc1 = e.pool.space().alloc;
    assert!(alloc0 - alloc1 >= freed, "pool alloc {alloc0} -> {alloc1}");
    let blocks1 = fs.getattr(f.ino).unwrap().blocks;
    assert!(blocks0 - blocks1 >= freed / 512, "st_blocks {blocks0} -> {blocks1}");
    // Same answers once on disk.
    assert_eq!(fs.seek_data_hole(f.ino, 0, SEEK_HOLE).unwrap(), first_hole);
    assert_eq!(fs.seek_data_hole(f.ino, first_hole, SEEK_DATA).unwrap(), data_again);
    assert_eq!(fs.read(f.ino, off, 10).unwrap(), vec![0u8; 10]);
    // Punching a hole that is one already allocates nothing.
    fs.fallocate(f.ino, first_hole + 10, 1000, PUNCH | KEEP).unwrap();
    sync_all(&e.pool);
    assert_eq!(fs.objset().used_bytes(), used1);
    // Past the end: nothing to punch, size kept.
    assert_eq!(fs.fallocate(f.ino, 20 * MIB, MIB, PUNCH | KEEP).unwrap().size, 16 * MIB);
}

#[test]
fn seek_sees_dirty_data_and_holes() {
    let e = setup("fseek", 256 * MIB, FsOptions::default());
    let fs = &e.fs;
    let bs = 128 << 10;
    let (f, _) = fs.create(fs.root_ino(), b"f", 0o644, C, true).unwrap();
    // Empty file: ENXIO for both.
    assert_eq!(errno(fs.seek_data_hole(f.ino, 0, SEEK_DATA)), libc::ENXIO);
    assert_eq!(errno(fs.seek_data_hole(f.ino, 0, SEEK_HOLE)), libc::ENXIO);
    fs.write(f.ino, MIB + 5, b"data").unwrap();
    fs.write(f.ino, 40 * MIB, &[7u8; 300_000]).unwrap();
    let size = 40 * MIB + 300_000;
    let check = |fs: &Fs| {
        assert_eq!(fs.seek_data_hole(f.ino, 0, SEEK_DATA).unwrap(), MIB);
        assert_eq!(fs.seek_data_hole(f.ino, MIB + 100, SEEK_DATA).unwrap(), MIB + 100);
        assert_eq!(fs.seek_data_hole(f.ino, 0, SEEK_HOLE).unwrap(), 0);
        assert_eq!(fs.seek_data_hole(f.ino, MIB, SEEK_HOLE).unwrap(), MIB + bs);
        assert_eq!(fs.seek_data_hole(f.ino, MIB + bs, SEEK_DATA).unwrap(), 40 * MIB);
        // The implicit hole at the end of the file.
        assert_eq!(fs.seek_data_hole(f.ino, 40 * MIB, SEEK_HOLE).unwrap(), size);
        assert_eq!(fs.seek_data_hole(f.ino, size - 1, SEEK_DATA).unwrap(), size - 1);
        assert_eq!(errno(fs.seek_data_hole(f.ino, size, SEEK_DATA)), libc::ENXIO);
        assert_eq!(errno(fs.seek_data_hole(f.ino, size, SEEK_HOLE)), libc::ENXIO);
        assert_eq!(errno(fs.seek_data_hole(f.ino, 0, 0)), libc::EINVAL);
    };
    check(fs); // dirty, nothing synced yet
    e.pool.sync().unwrap();
    check(fs); // on disk
    // A dirty write into a synced hole, and a dirty punch over synced data.
    fs.write(f.ino, 20 * MIB, b"x").unwrap();
    assert_eq!(fs.seek_data_hole(f.ino, MIB + bs, SEEK_DATA).unwrap(), 20 * MIB);
    fs.fallocate(f.ino, 40 * MIB, bs, PUNCH | KEEP).unwrap();
    assert_eq!(fs.seek_data_hole(f.ino, 21 * MIB, SEEK_DATA).unwrap(), 40 * MIB + bs);
    assert_eq!(fs.seek_data_hole(f.ino, 40 * MIB, SEEK_HOLE).unwrap(), 40 * MIB);
    // A dirty truncate that hides synced data; then data written back over it.
    fs.setattr(f.ino, &SetAttr { size: Some(2 * MIB), ..Default::default() }).unwrap();
    fs.setattr(f.ino, &SetAttr { size: Some(50 * MIB), ..Default::default() }).unwrap();
    assert_eq!(fs.seek_data_hole(f.ino, 2 * MIB, SEEK_DATA).map_err(|e| e.errno()), Err(libc::ENXIO));
    fs.write(f.ino, 45 * MIB, b"y").unwrap();
    assert_eq!(fs.seek_data_hole(f.ino, 2 * MIB, SEEK_DATA).unwrap(), 45 * MIB);
    e.pool.sync().unwrap();
    assert_eq!(fs.seek_data_hole(f.ino, 2 * MIB, SEEK_DATA).unwrap(), 45 * MIB);
    assert_eq!(fs.seek_data_hole(f.ino, 45 * MIB, SEEK_HOLE).unwrap(), 45 * MIB + bs);
    // A sparse file far larger than the pool, answered by walking indirect blocks.
    let (s, _) = fs.create(fs.root_ino(), b"huge", 0o644, C, true).unwrap();
    fs.write(s.ino, 1 << 40, b"far").unwrap();
    e.pool.sync().unwrap();
    assert_eq!(fs.seek_data_hole(s.ino, 0, SEEK_DATA).unwrap(), 1 << 40);
    assert_eq!(fs.seek_data_hole(s.ino, 1 << 40, SEEK_HOLE).unwrap(), (1 << 40) + 3);
}

#[test]
fn zero_range_and_preallocate() {
    let e = setup("fzero", 256 * MIB, FsOptions::default());
    let fs = &e.fs;
    let bs = 128u64 << 10;
    let (f, _) = fs.create(fs.root_ino(), b"f", 0o644, C, true).unwrap();
    fs.write(f.ino, 0, &[5u8; (4 * MIB) as usize]).unwrap();
    e.pool.sync().unwrap();
    let before = fs.getattr(f.ino).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    // Zero range inside: zeros, whole blocks are holes, times change.
    let a = fs.fallocate(f.ino, bs / 2, 3 * bs, ZERO).unwrap();
    assert_eq!(a.size, 4 * MIB);
    assert!(a.mtime_ns > before.mtime_ns && a.ctime_ns > before.ctime_ns);
    let back = fs.read(f.ino, 0, (4 * bs) as u32).unwrap();
    assert!(back[..(bs / 2) as usize].iter().all(|&b| b == 5));
    assert!(back[(bs / 2) as usize..(3 * bs + bs / 2) as usize].iter().all(|&b| b == 0));
    assert!(back[(3 * bs + bs / 2) as usize..].iter().all(|&b| b == 5));
    assert_eq!(fs.seek_data_hole(f.ino, 0, SEEK_HOLE).unwrap(), bs);
    assert_eq!(fs.seek_data_hole(f.ino, bs, SEEK_DATA).unwrap(), 3 * bs);
    // Zero range past the end grows the size unless KEEP_SIZE.
    assert_eq!(fs.fallocate(f.ino, 4 * MIB - 10, 100, ZERO | KEEP).unwrap().size, 4 * MIB);
    assert_eq!(fs.fallocate(f.ino, 4 * MIB - 10, 100, ZERO).unwrap().size, 4 * MIB + 90);
    assert_eq!(fs.read(f.ino, 4 * MIB - 20, 200).unwrap(), [vec![5u8; 10], vec![0u8; 100]].concat());
    // Mode 0: grows the size (a hole), allocates nothing; KEEP_SIZE keeps it.
    e.pool.sync().unwrap();
    let used = fs.objset().used_bytes();
    let a = fs.fallocate(f.ino, 0, 64 * MIB, 0).unwrap();
    assert_eq!(a.size, 64 * MIB);
    assert_eq!(fs.fallocate(f.ino, 0, 100 * MIB, KEEP).unwrap().size, 64 * MIB);
    let m = fs.getattr(f.ino).unwrap().mtime_ns;
    // Inside the size: nothing changes, not even the times.
    assert_eq!(fs.fallocate(f.ino, 0, MIB, 0).unwrap().mtime_ns, m);
    e.pool.sync().unwrap();
    assert!(fs.objset().used_bytes() <= used + 64 * 1024, "preallocation wrote no data");
    assert_eq!(fs.seek_data_hole(f.ino, 4 * MIB, SEEK_HOLE).unwrap(), 4 * MIB);
    assert_eq!(errno(fs.seek_data_hole(f.ino, 5 * MIB, SEEK_DATA)), libc::ENXIO);
    assert!(fs.read(f.ino, 63 * MIB, 4096).unwrap().iter().all(|&b| b == 0));
    // More than the pool can hold (ZFS: 110% of the range must fit): ENOSPC, nothing changed.
    assert_eq!(errno(fs.fallocate(f.ino, 0, 1 << 30, 0)), libc::ENOSPC);
    assert_eq!(errno(fs.fallocate(f.ino, 0, 240 * MIB, KEEP)), libc::ENOSPC);
    assert_eq!(fs.getattr(f.ino).unwrap().size, 64 * MIB);
    // Bad requests.
    assert_eq!(errno(fs.fallocate(f.ino, 0, MIB, PUNCH)), libc::EOPNOTSUPP, "punch needs KEEP_SIZE");
    assert_eq!(errno(fs.fallocate(f.ino, 0, MIB, PUNCH | ZERO | KEEP)), libc::EOPNOTSUPP);
    for other in [0x08u32, 0x20, 0x40] {
        // collapse, insert, unshare
        assert_eq!(errno(fs.fallocate(f.ino, 0, bs, other)), libc::EOPNOTSUPP, "mode {other:#x}");
    }
    assert_eq!(errno(fs.fallocate(f.ino, 0, 0, 0)), libc::EINVAL);
    assert_eq!(errno(fs.fallocate(f.ino, MAX_FILE_SIZE, 1, 0)), libc::EFBIG);
    assert_eq!(errno(fs.fallocate(f.ino, u64::MAX, 2, 0)), libc::EFBIG);
    let d = fs.mkdir(fs.root_ino(), b"d", 0o755, C).unwrap();
    assert_eq!(errno(fs.fallocate(d.ino, 0, 10, 0)), libc::EISDIR);
    let fifo = fs.mknod(fs.root_ino(), b"p", libc::S_IFIFO | 0o644, 0, C).unwrap();
    assert_eq!(errno(fs.fallocate(fifo.ino, 0, 10, 0)), libc::ENODEV);
    let mut ro = fs.options();
    ro.readonly = true;
    fs.set_options(ro);
    assert_eq!(errno(fs.fallocate(f.ino, 0, 10, PUNCH | KEEP)), libc::EROFS);
    assert_eq!(errno(fs.fallocate(f.ino, 0, 10, 0)), libc::EROFS);
    assert_eq!(fs.getattr(f.ino).unwrap().size, 64 * MIB);
}

/// What a model block is, for comparing seek answers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    MustData,
    MustHole,
    /// Data of zeros: a hole once written out with compression on.
    Either,
}

struct Model {
    bytes: Vec<u8>,
    /// Block ids holding a block (at the file's current block size).
    data: std::collections::BTreeSet<u64>,
    bs: u64,
}

impl Model {
    fn kind(&self, b: u64, compressed: bool) -> Kind {
        if !self.data.contains(&b) {
            return Kind::MustHole;
        }
        let s = (b * self.bs) as usize;
        let e = ((b + 1) * self.bs).min(self.bytes.len() as u64) as usize;
        if compressed && self.bytes.get(s..e).is_none_or(|x| x.iter().all(|&v| v == 0)) {
            Kind::Either
        } else {
            Kind::MustData
        }
    }

    fn nblocks(&self) -> u64 {
        self.data.iter().next_back().map_or(0, |b| b + 1)
    }

    /// The object layer's free_range: whole blocks go, edges are zeroed.
    fn free(&mut self, s: u64, e: Option<u64>) {
        let end_bytes = self.nblocks() * self.bs;
        let e_clip = e.unwrap_or(end_bytes).min(end_bytes);
        if s >= e_clip {
            return;
        }
        let first_full = s.div_ceil(self.bs);
        let last_full = if e.is_none() { u64::MAX } else { e_clip / self.bs };
        let doomed: Vec<u64> = self.data.range(first_full..last_full.max(first_full)).copied().collect();
        for b in doomed {
            self.data.remove(&b);
        }
        let zs = (s as usize).min(self.bytes.len());
        let ze = (e_clip as usize).min(self.bytes.len());
        self.bytes[zs..ze].fill(0);
    }
}

fn check_seek(fs: &Fs, ino: u64, m: &Model, off: u64, compressed: bool, what: &str) {
    let size = m.bytes.len() as u64;
    let bs = m.bs;
    for whence in [SEEK_DATA, SEEK_HOLE] {
        let r = fs.seek_data_hole(ino, off, whence);
        let ctx = format!("{what}: seek {} from {off} (size {size}, bs {bs}, data {:?})", if whence == SEEK_DATA { "data" } else { "hole" }, m.data);
        if off >= size {
            assert_eq!(r.map_err(|e| e.errno()), Err(libc::ENXIO), "{ctx}");
            continue;
        }
        let last = (size - 1) / bs;
        match (whence, r) {
            (SEEK_DATA, Err(e)) => {
                assert_eq!(e.errno(), libc::ENXIO, "{ctx}");
                for b in off / bs..=last {
                    assert_ne!(m.kind(b, compressed), Kind::MustData, "{ctx}: block {b} is data");
                }
            }
            (SEEK_DATA, Ok(r)) => {
                assert!(r >= off && r < size && (r == off || r % bs == 0), "{ctx}: {r}");
                for b in off / bs..r / bs {
                    assert_ne!(m.kind(b, compressed), Kind::MustData, "{ctx}: {r}, block {b} skipped");
                }
                assert_ne!(m.kind(r / bs, compressed), Kind::MustHole, "{ctx}: {r} is a hole");
            }
            (_, Ok(r)) => {
                assert!(r >= off && r <= size && (r == off || r == size || r % bs == 0), "{ctx}: {r}");
                for b in off / bs..r.div_ceil(bs).min(last + 1) {
                    if (b * bs).max(off) < r {
                        assert_ne!(m.kind(b, compressed), Kind::MustHole, "{ctx}: {r}, hole {b} skipped");
                    }
                }
                if r < size {
                    assert_ne!(m.kind(r / bs, compressed), Kind::MustData, "{ctx}: {r} is data");
                }
            }
            (_, Err(e)) => panic!("{ctx}: {e}"),
        }
    }
}

/// Random writes, punches, zero ranges, preallocations, truncates and
/// syncs on small files, checked after each step against a model of the
/// bytes and of which blocks exist: contents, size, and SEEK_DATA /
/// SEEK_HOLE from random and edge offsets.
#[test]
fn randomized_against_a_model() {
    let run = tarn_testkit::seeded!(300);
    for (round, compression) in [Compression::Off, Compression::Lz4].into_iter().enumerate() {
        let compressed = compression != Compression::Off;
        let e = setup("fmodel", 256 * MIB, FsOptions { recordsize: 4096, ..Default::default() });
        let fs = &e.fs;
        fs.objset().set_write_props(WriteProps { compression, checksum: ChecksumKind::Fletcher4, copies: 1, primarycache: Default::default(), secondarycache: Default::default() });
        let mut rng = run.rng(round as u64);
        let mut files = Vec::new();
        for i in 0..3 {
            let (f, _) = fs.create(fs.root_ino(), format!("f{i}").as_bytes(), 0o644, C, true).unwrap();
            let bs = u64::from(fs.objset().info(ObjectId(f.ino)).unwrap().block_size);
            files.push((f.ino, Model { bytes: Vec::new(), data: Default::default(), bs }));
        }
        let span = 48 * 4096u64;
        for step in 0..run.count {
            let which = rng.gen_range(0..files.len());
            let (ino, m) = &mut files[which];
            let ino = *ino;
            let size = m.bytes.len() as u64;
            let off = rng.gen_range(0..span);
            let len = if rng.gen_bool(0.5) { rng.gen_range(1..3 * 4096) } else { rng.gen_range(1..span / 2) };
            let op = rng.gen_range(0..100);
            let what;
            if op < 30 {
                what = format!("step {step}: write {off}+{len}");
                let data = noise(&mut rng, len as usize);
                fs.write(ino, off, &data).unwrap();
                let bs = u64::from(fs.objset().info(ObjectId(ino)).unwrap().block_size);
                if bs != m.bs {
                    // The single block was carried over at the new size.
                    let had = m.data.contains(&0);
                    m.data.clear();
                    if had {
                        m.data.insert(0);
                    }
                    m.bs = bs;
                }
                let end = (off + len) as usize;
                if m.bytes.len() < end {
                    m.bytes.resize(end, 0);
                }
                m.bytes[off as usize..end].copy_from_slice(&data);
                for b in off / m.bs..=(off + len - 1) / m.bs {
                    m.data.insert(b);
                }
            } else if op < 50 {
                what = format!("step {step}: punch {off}+{len}");
                fs.fallocate(ino, off, len, PUNCH | KEEP).unwrap();
                if off < size {
                    m.free(off, Some((off + len).min(size)));
                }
            } else if op < 65 {
                let keep = rng.gen_bool(0.5);
                what = format!("step {step}: zero range {off}+{len} keep {keep}");
                fs.fallocate(ino, off, len, ZERO | if keep { KEEP } else { 0 }).unwrap();
                if off < size {
                    m.free(off, Some((off + len).min(size)));
                }
                if !keep && off + len > size {
                    m.bytes.resize((off + len) as usize, 0);
                }
            } else if op < 75 {
                let keep = rng.gen_bool(0.3);
                what = format!("step {step}: preallocate {off}+{len} keep {keep}");
                fs.fallocate(ino, off, len, if keep { KEEP } else { 0 }).unwrap();
                if !keep && off + len > size {
                    m.bytes.resize((off + len) as usize, 0);
                }
            } else if op < 85 {
                let to = rng.gen_range(0..span);
                what = format!("step {step}: truncate to {to}");
                fs.setattr(ino, &SetAttr { size: Some(to), ..Default::default() }).unwrap();
                if to < size {
                    m.free(to, None);
                }
                m.bytes.resize(to as usize, 0);
            } else {
                what = format!("step {step}: sync");
                e.pool.sync().unwrap();
            }
            let size = m.bytes.len() as u64;
            assert_eq!(fs.getattr(ino).unwrap().size, size, "{what}");
            let back = fs.read(ino, 0, (size + 10) as u32).unwrap();
            if back != m.bytes {
                let at = back.iter().zip(&m.bytes).position(|(a, b)| a != b);
                panic!("{what}: contents differ (first at {at:?})");
            }
            let mut offs = vec![0, off, off.saturating_sub(1), size.saturating_sub(1), size, size + 1];
            offs.extend((0..4).map(|_| rng.gen_range(0..size.max(1) + 4096)));
            for o in offs {
                check_seek(fs, ino, m, o, compressed, &what);
            }
        }
        e.pool.sync().unwrap();
        let report = e.pool.check();
        assert!(report.ok(), "pool check after the run: {report:?}");
    }
}
