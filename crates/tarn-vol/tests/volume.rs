//! Volumes against a model: random writes (zero blocks among them),
//! trims and write-zeroes read back as the model says, the extents never
//! call data a hole (and call every block a trim freed one), and all of
//! it survives export and import; range and read-only errors; a shrink
//! frees what is past the new end. And power cuts: every write a FLUSH
//! acknowledged survives any cut after it (the intent log, no txg).

use std::sync::Arc;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tarn_dev::{CrashRecorder, CutMode, Device, MemDevice};
use tarn_obj::{ImportOptions, ObjPool, PoolCreate, TopKind, Tunables};
use tarn_vol::{SyncMode, VolError, VolOptions, Volume};

const BS: u64 = 4096;

fn pool_on(devs: &[Arc<dyn Device>]) -> Arc<ObjPool> {
    let pool = ObjPool::create(PoolCreate {
        name: "volt".into(),
        tops: vec![(TopKind::Mirror, devs.iter().enumerate().map(|(i, d)| (format!("d{i}"), d.clone())).collect())],
        ashift: 12,
        properties: Default::default(),
        hostname: "test".into(),
    })
    .expect("create pool");
    // Nothing reaches disk by timer: durability comes from the log.
    pool.set_tunables(Tunables { txg_timeout_ms: 3_600_000, ..Default::default() });
    pool
}

fn import(devs: Vec<Arc<dyn Device>>) -> Arc<ObjPool> {
    ObjPool::import(devs, ImportOptions { rewind: false, force: true, hostname: "test".into(), readonly: false }).expect("import")
}

fn opts(size: u64) -> VolOptions {
    VolOptions { size, sync: SyncMode::Standard, readonly: false }
}

/// A new volume of `size` bytes in a new object set; its object set id.
fn new_volume(pool: &Arc<ObjPool>, size: u64, bs: u32) -> (Arc<Volume>, tarn_obj::ObjsetId) {
    let tx = pool.begin();
    let id = pool.create_objset(&tx).unwrap();
    drop(tx);
    let os = pool.open_objset(id).unwrap();
    let tx = pool.begin();
    Volume::format(&os, &tx, bs).unwrap();
    drop(tx);
    (Volume::open(pool.clone(), os, opts(size)).unwrap(), id)
}

fn mem(n: usize, size: u64) -> Vec<Arc<dyn Device>> {
    (0..n).map(|i| MemDevice::new(&format!("m{i}"), size) as Arc<dyn Device>).collect()
}

/// Random bytes with runs of zeros, so some whole blocks are zero.
fn data(rng: &mut ChaCha8Rng, len: usize) -> Vec<u8> {
    let mut d = vec![0u8; len];
    rng.fill(&mut d[..]);
    let mut at = 0;
    while at < len {
        let run = rng.gen_range(1..3 * BS as usize);
        if rng.gen_bool(0.3) {
            let end = (at + run).min(len);
            d[at..end].fill(0);
        }
        at += run;
    }
    d
}

/// Asserts the volume reads as `model` and its extents are sound: no
/// hole where the model holds a non-zero byte; every block in `freed`
/// (whole blocks freed since last written) reported as a hole.
fn verify(vol: &Volume, model: &[u8], freed: &[bool]) {
    let mut got = vec![0u8; model.len()];
    vol.read(0, &mut got).unwrap();
    if let Some(i) = (0..model.len()).find(|&i| got[i] != model[i]) {
        panic!("byte {i} reads {} where {} was written", got[i], model[i]);
    }
    let mut at = 0u64;
    let mut extents = Vec::new();
    while at < model.len() as u64 {
        let e = vol.extents(at, model.len() as u64 - at, 7).unwrap();
        assert!(!e.is_empty(), "no extents from {at}");
        for x in e {
            extents.push((at, x));
            at += x.len;
        }
    }
    assert_eq!(at, model.len() as u64, "the extents cover the volume exactly");
    for (start, x) in extents {
        if x.hole {
            let r = start as usize..(start + x.len) as usize;
            assert!(model[r.clone()].iter().all(|&b| b == 0), "a hole at {r:?} over data");
        } else {
            for b in start / BS..(start + x.len).div_ceil(BS) {
                assert!(!freed[b as usize], "block {b} was freed whole, reported as data");
            }
        }
    }
}

#[test]
fn a_volume_reads_as_written_and_reports_its_holes() {
    let seeded = tarn_testkit::seeded!(300);
    let mut rng = seeded.rng(1);
    const SIZE: u64 = 8 << 20;
    let devs = mem(2, 128 << 20);
    let pool = pool_on(&devs);
    let (vol, id) = new_volume(&pool, SIZE, BS as u32);
    let mut model = vec![0u8; SIZE as usize];
    let mut freed = vec![false; (SIZE / BS) as usize];
    for i in 0..seeded.count {
        let off = rng.gen_range(0..SIZE - 1);
        let len = rng.gen_range(1..=(SIZE - off).min(256 << 10));
        let (a, e) = (off as usize, (off + len) as usize);
        let whole = off.div_ceil(BS)..(off + len) / BS;
        match rng.gen_range(0..10) {
            0..=5 => {
                let d = data(&mut rng, len as usize);
                vol.write(off, &d, rng.gen_bool(0.1)).unwrap();
                model[a..e].copy_from_slice(&d);
                for b in off / BS..(off + len).div_ceil(BS) {
                    freed[b as usize] = false;
                }
            }
            6 | 7 => {
                vol.trim(off, len, false).unwrap();
                // Whole blocks read as zeros, partial ones keep their data.
                for b in whole {
                    model[(b * BS) as usize..((b + 1) * BS) as usize].fill(0);
                    freed[b as usize] = true;
                }
            }
            8 => {
                vol.write_zeroes(off, len, true, false).unwrap();
                model[a..e].fill(0);
                for b in whole {
                    freed[b as usize] = true;
                }
            }
            _ => {
                vol.write_zeroes(off, len, false, false).unwrap();
                model[a..e].fill(0);
                for b in off / BS..(off + len).div_ceil(BS) {
                    freed[b as usize] = false;
                }
            }
        }
        if i % 50 == 0 {
            verify(&vol, &model, &freed);
            if rng.gen_bool(0.5) {
                pool.sync().unwrap();
            }
        }
    }
    verify(&vol, &model, &freed);
    vol.flush().unwrap();
    drop(vol);
    pool.export().unwrap();
    drop(pool);
    let pool = import(devs);
    let vol = Volume::open(pool.clone(), pool.open_objset(id).unwrap(), opts(SIZE)).unwrap();
    verify(&vol, &model, &freed);
    assert!(pool.check().ok(), "{:?}", pool.check());
}

#[test]
fn out_of_range_read_only_and_shrink() {
    let devs = mem(2, 64 << 20);
    let pool = pool_on(&devs);
    let (vol, id) = new_volume(&pool, 1 << 20, 16 << 10);
    assert_eq!(vol.block_size(), 16 << 10);
    let mut b = vec![0u8; 4096];
    assert!(matches!(vol.read((1 << 20) - 100, &mut b), Err(VolError::OutOfRange { .. })));
    assert!(matches!(vol.write(u64::MAX - 10, b"xy", false), Err(VolError::OutOfRange { .. })));
    assert!(matches!(vol.trim(1 << 20, 1, false), Err(VolError::OutOfRange { .. })));
    assert!(vol.extents((1 << 20) + 1, 10, 5).is_err());
    vol.write((1 << 20) - 4096, &[7u8; 4096], false).unwrap();
    vol.write(0, &[9u8; 4096], false).unwrap();
    vol.set_options(SyncMode::Standard, true);
    assert!(matches!(vol.write(0, b"x", false), Err(VolError::ReadOnly)));
    assert_eq!(vol.write(0, b"x", false).unwrap_err().errno(), 1, "EPERM");
    vol.set_options(SyncMode::Standard, false);

    // Shrink to 512 KiB: the block at the old end is freed; grown again,
    // it reads as zeros.
    vol.resize(512 << 10).unwrap();
    assert!(vol.read((1 << 20) - 4096, &mut b).is_err());
    vol.resize(1 << 20).unwrap();
    vol.read((1 << 20) - 4096, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 0), "data past a shrink came back");
    vol.read(0, &mut b).unwrap();
    assert_eq!(b, vec![9u8; 4096]);

    // Opened with a smaller size than its data (a shrink a crash cut
    // short): the blocks past it are freed.
    vol.write((1 << 20) - 4096, &[7u8; 4096], false).unwrap();
    drop(vol);
    let os = pool.open_objset(id).unwrap();
    let vol = Volume::open(pool.clone(), os, opts(256 << 10)).unwrap();
    vol.resize(1 << 20).unwrap();
    vol.read((1 << 20) - 4096, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 0), "data past the size at open survived");

    // Not a volume: a plain empty object set.
    let tx = pool.begin();
    let other = pool.create_objset(&tx).unwrap();
    drop(tx);
    let err = Volume::open(pool.clone(), pool.open_objset(other).unwrap(), opts(4096)).err().expect("an empty object set opened as a volume");
    assert!(matches!(err, VolError::NotAVolume(_)), "{err}");
    assert!(matches!(tarn_vol::check_block_size(1000), Err(VolError::BadBlockSize(1000))));

    // Closed: every operation refused, none reaches the object set.
    vol.close();
    assert!(vol.is_closed());
    assert!(matches!(vol.write(0, b"late", true), Err(VolError::Closed)));
    assert!(matches!(vol.read(0, &mut b), Err(VolError::Closed)));
    assert!(matches!(vol.flush(), Err(VolError::Closed)));
    assert_eq!(vol.flush().unwrap_err().errno(), 108, "ESHUTDOWN");
}

/// A block's contents: round `r`, block `b`, at byte `i`.
fn pattern(r: u32, b: u64) -> Vec<u8> {
    (0..BS as usize).map(|i| (r as usize * 31 + b as usize * 7 + i) as u8 | 1).collect()
}

#[test]
fn flushed_writes_survive_any_power_cut() {
    let seeded = tarn_testkit::seeded!(40);
    let mut rng = seeded.rng(2);
    const BLOCKS: u64 = 256;
    let rec = CrashRecorder::new();
    let devs: Vec<Arc<dyn Device>> = (0..2).map(|i| rec.device(&format!("c{i}"), 128 << 20) as Arc<dyn Device>).collect();
    let pool = pool_on(&devs);
    let (vol, id) = new_volume(&pool, BLOCKS * BS, BS as u32);
    // The first commit waits for the txg naming the chain: start after it.
    vol.write(0, &pattern(0, 0), true).unwrap();
    // history[b]: (round, event count when that round's flush returned
    // (u64::MAX: never flushed)) of each write of block b, in order.
    let mut history: Vec<Vec<(u32, u64)>> = vec![vec![(0, 0)]; BLOCKS as usize];
    history[0] = vec![(0, 0)];
    let rounds = 12u32;
    let mut acks = Vec::new();
    for r in 1..=rounds {
        let mut written = Vec::new();
        for _ in 0..rng.gen_range(1..20) {
            let b = rng.gen_range(0..BLOCKS);
            let n = rng.gen_range(1..=4u64).min(BLOCKS - b);
            let mut d = Vec::new();
            for k in b..b + n {
                d.extend_from_slice(&pattern(r, k));
                written.push(k);
            }
            vol.write(b * BS, &d, false).unwrap();
        }
        if rng.gen_bool(0.2) {
            pool.sync().unwrap();
        }
        let flushed = r < rounds; // the last round is never flushed
        if flushed {
            vol.flush().unwrap();
        }
        let ack = if flushed { rec.event_count() } else { u64::MAX };
        written.sort_unstable();
        written.dedup();
        for k in written {
            history[k as usize].push((r, ack));
        }
        if flushed {
            acks.push(ack);
        }
    }
    drop(vol);
    drop(pool);
    let end = rec.event_count();
    let first = acks[0];
    for i in 0..seeded.count {
        let cut = rng.gen_range(first..=end);
        let mode = match i % 3 {
            0 => CutMode::DropUnflushed,
            1 => CutMode::TearLastWrite,
            _ => CutMode::RandomSubset(rng.gen()),
        };
        let images: Vec<Arc<dyn Device>> = rec.image_at(cut, mode).into_iter().map(|d| d as Arc<dyn Device>).collect();
        let pool = import(images);
        let vol = Volume::open(pool.clone(), pool.open_objset(id).unwrap(), opts(BLOCKS * BS)).unwrap();
        let mut got = vec![0u8; BS as usize];
        for (b, hist) in history.iter().enumerate() {
            vol.read(b as u64 * BS, &mut got).unwrap();
            // The newest write acknowledged by a flush before the cut, or
            // any later one.
            let base = hist.iter().rposition(|&(_, ack)| ack <= cut).unwrap_or(0);
            let ok = hist[base..].iter().any(|&(r, _)| got == pattern(r, b as u64))
                || (base == 0 && hist[0].0 == 0 && b != 0 && got.iter().all(|&x| x == 0));
            assert!(ok, "cut {cut} ({mode:?}): block {b} holds none of the acceptable versions {:?}", &hist[base..]);
        }
        let report = pool.check();
        assert!(report.ok(), "cut {cut}: {report:?}");
    }
}

/// A nearly full pool: large writes admitted together up to the pool's
/// limit, then one FLUSH. The log blocks that commit writes must not take
/// the space the dirty data was promised (the commit falls back to a txg
/// sync instead): the txgs all sync, the pool is never suspended, and the
/// volume holds what was written.
#[test]
fn log_commits_on_a_nearly_full_pool_never_overcommit_a_txg() {
    use rand::RngCore;
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(3);
    let devs = mem(2, 128 << 20);
    let pool = pool_on(&devs);
    pool.set_tunables(Tunables { txg_timeout_ms: 3_600_000, dirty_data_max: 1 << 30, ..Default::default() });
    let (vol, _) = new_volume(&pool, 512 << 20, 16 << 10);
    // Fill most of the pool, synced.
    let mut fill = vec![0u8; 8 << 20];
    let mut at = 0u64;
    loop {
        rng.fill_bytes(&mut fill);
        if vol.write(at, &fill, false).is_err() {
            break;
        }
        at += fill.len() as u64;
        pool.sync().unwrap();
        if pool.space().free < 56 << 20 {
            break;
        }
    }
    // Two large writes at once, then a flush.
    const CHUNK: usize = 16 << 20;
    let data: Vec<Vec<u8>> = (0..2)
        .map(|_| {
            let mut d = vec![0u8; CHUNK];
            rng.fill_bytes(&mut d);
            d
        })
        .collect();
    let base = at + (64 << 20);
    std::thread::scope(|s| {
        for (i, d) in data.iter().enumerate() {
            let vol = &vol;
            s.spawn(move || vol.write(base + (i * CHUNK) as u64, d, false).unwrap());
        }
    });
    vol.flush().expect("the flush of a full pool's writes");
    pool.sync().expect("a txg sync on the full pool");
    let mut got = vec![0u8; CHUNK];
    for (i, d) in data.iter().enumerate() {
        vol.read(base + (i * CHUNK) as u64, &mut got).unwrap();
        assert!(got == *d, "chunk {i} reads other bytes");
    }
    assert!(pool.check().ok());
}
