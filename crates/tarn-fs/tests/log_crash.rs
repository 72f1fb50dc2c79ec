//! Power cuts under a file system (issue 11, "crash consistency with the
//! log"). Three threads run a seeded mix of operations on two datasets of
//! one pool on crash-recorded devices: writes (a few bytes to 1 MiB, random
//! offsets and data), truncates, create, mkdir, unlink, rmdir, rename
//! (within and across directories, replacing a file), link, symlink,
//! setxattr and removexattr, `fsync` of a file, and now and then a pool
//! sync. The txg timeout is an hour: what is durable is what an fsync (or a
//! sync) made so. A model (support/crash_model.rs) keeps every value each
//! name, inode and attribute had, and every acknowledgement with the
//! recorder's event count when it returned.
//!
//! Power is then cut at seeded points (unflushed writes dropped, the last
//! one torn, or a random subset kept); after each cut the pool is imported,
//! each dataset opened (`Fs::open` replays its intent log) and a txg
//! synced, and: the pool checker finds nothing; every entry names a live
//! inode of its kind, link counts equal the names, directory sizes, link
//! counts and `..` agree, nothing is left unreachable (no half-applied
//! rename, link or unlink); every fsync-acknowledged byte, size and
//! attribute, and every namespace change before an acknowledged fsync of
//! its dataset, is there (support/crash_check.rs).
//!
//! The guarantee checked is the standard one: an fsync makes its file's
//! data, size and attributes and every namespace change of the dataset
//! before it durable (tarn's log commits more: every record of the dataset).
//! A write not acknowledged may reach the disk in part (a large write is
//! split over log records): each byte of a file must be what the
//! acknowledged state left there or what a later operation wrote there;
//! the summary counts the files found holding such a mix.
//!
//! The summary also says how many log blocks were written and how many
//! cuts left a log to replay: 0 before tarn-fs used the intent log.
//!
//! A second test cuts power while the datasets are opened (their logs
//! replayed) after a crash, and opens them again.
//!
//! Thread interleavings are not reproducible from the seed (the operations
//! each thread picks and the cut points are); `TARN_CRASH_THREADS=1` runs
//! the same number of operations on one thread, which repeats exactly.
#[path = "support/crash_check.rs"]
mod crash_check;
#[path = "support/crash_model.rs"]
mod crash_model;

use std::sync::Arc;
use std::time::Instant;

use crash_check::check_fs;
use crash_model::{Ack, Acked, DsModel, Ino, Val};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_dev::{CrashRecorder, CutMode, Device, MemDevice};
use tarn_fs::{Cred, Fs, FsOptions, SetAttr};
use tarn_fs::format::InodePhys;
use tarn_obj::{ImportOptions, ObjPool, ObjectId, ObjsetId, PoolCreate, TopKind, Tunables};

const DATASETS: usize = 2;
/// Worker threads; `TARN_CRASH_THREADS=1` makes a run repeat exactly from
/// its seed (same operations, same cuts), with the same total operations.
const THREADS: usize = 3;

fn threads() -> usize {
    match std::env::var("TARN_CRASH_THREADS") {
        Ok(v) if !v.trim().is_empty() => {
            v.trim().parse().ok().filter(|&n| n > 0).unwrap_or_else(|| panic!("TARN_CRASH_THREADS={v:?} is not a positive number"))
        }
        _ => THREADS,
    }
}
const DEV_SIZE: u64 = 96 << 20;
const NAMES: [&[u8]; 8] = [b"n0", b"n1", b"n2", b"n3", b"n4", b"n5", b"n6", b"n7"];
const XATTRS: [&[u8]; 3] = [b"user.a", b"user.b", b"trusted.c"];
/// Files stay under about this size (writes and truncates aim below it).
const FILE_SPAN: usize = 1_280 << 10;

/// A pool layout under test.
struct Variant {
    name: &'static str,
    kind: TopKind,
    devices: usize,
    /// A log vdev (SLOG): its kind and device count.
    log: Option<(TopKind, usize)>,
}

const VARIANTS: [Variant; 4] = [
    Variant { name: "disk", kind: TopKind::Disk, devices: 1, log: None },
    Variant { name: "mirror", kind: TopKind::Mirror, devices: 2, log: None },
    Variant { name: "disk+log", kind: TopKind::Disk, devices: 1, log: Some((TopKind::Disk, 1)) },
    Variant { name: "mirror+mirrored log", kind: TopKind::Mirror, devices: 2, log: Some((TopKind::Mirror, 2)) },
];

fn pick<T: Copy>(rng: &mut ChaCha8Rng, v: &[T]) -> Option<T> {
    if v.is_empty() {
        None
    } else {
        Some(v[rng.gen_range(0..v.len())])
    }
}

fn is_file(v: &Val) -> bool {
    matches!(v, Val::File { .. })
}
fn is_dir(v: &Val) -> bool {
    matches!(v, Val::Dir)
}
fn is_file_or_dir(v: &Val) -> bool {
    is_file(v) || is_dir(v)
}

fn fail<E: std::fmt::Debug>(what: String) -> impl FnOnce(E) -> String {
    move |err| format!("{what}: {err:?}")
}

/// A free name in a random directory.
fn free_name(m: &DsModel, rng: &mut ChaCha8Rng) -> Option<(Ino, &'static [u8])> {
    let dir = pick(rng, &m.inos(is_dir))?;
    let name = pick(rng, &NAMES)?;
    (!m.entries.contains_key(&(dir, name.to_vec()))).then_some((dir, name))
}

/// One random operation on a dataset, applied to it and to its model
/// (whose lock the caller holds). Returns its name ("" if none fit).
fn step(fs: &Fs, m: &mut DsModel, rng: &mut ChaCha8Rng) -> Result<&'static str, String> {
    let r = rng.gen_range(0..100);
    let done = match r {
        0..=27 => {
            let Some(ino) = pick(rng, &m.inos(is_file)) else { return Ok("") };
            let len = match rng.gen_range(0..20) {
                0..=9 => rng.gen_range(1..=8192),
                10..=14 => rng.gen_range(8192..=128 << 10),
                15..=17 => rng.gen_range((128 << 10) + 1..=400 << 10),
                _ => 1 << 20,
            };
            let mut off = rng.gen_range(0..=FILE_SPAN - len.min(FILE_SPAN));
            if rng.gen_bool(0.5) {
                off &= !4095;
            }
            let mut data = vec![0u8; len];
            rng.fill(&mut data[..]);
            let op = m.begin();
            let n = fs.write(ino, off as u64, &data).map_err(fail(format!("write {len} at {off} to {ino}")))?;
            if n as usize != len {
                return Err(format!("write {len} at {off} to {ino}: wrote {n}"));
            }
            m.wrote(op, ino, off, &data);
            "write"
        }
        28..=33 => {
            let Some(ino) = pick(rng, &m.inos(is_file)) else { return Ok("") };
            let size = match rng.gen_range(0..4) {
                0 => 0,
                1 => m.nodes[&ino].data.len() / 2,
                _ => rng.gen_range(0..=FILE_SPAN),
            };
            let op = m.begin();
            let sa = SetAttr { size: Some(size as u64), ..Default::default() };
            fs.setattr(ino, &sa).map_err(fail(format!("truncate {ino} to {size}")))?;
            m.truncated(op, ino, size);
            "truncate"
        }
        34..=45 => {
            let Some((dir, name)) = free_name(m, rng) else { return Ok("") };
            let op = m.begin();
            let (a, _) = fs.create_noref(dir, name, 0o644, Cred::ROOT, true).map_err(fail(format!("create in {dir}")))?;
            m.created(op, dir, name, a.ino, Val::File { size: 0, hash: crash_model::hash(&[]) });
            "create"
        }
        46..=49 => {
            if m.inos(is_dir).len() >= 6 {
                return Ok("");
            }
            let Some((dir, name)) = free_name(m, rng) else { return Ok("") };
            let op = m.begin();
            let a = fs.mkdir_noref(dir, name, 0o755, Cred::ROOT).map_err(fail(format!("mkdir in {dir}")))?;
            m.created(op, dir, name, a.ino, Val::Dir);
            "mkdir"
        }
        50..=56 => {
            let names: Vec<(Ino, Vec<u8>)> =
                m.entries.iter().filter(|(_, i)| !m.kind_is(**i, is_dir)).map(|(k, _)| k.clone()).collect();
            let Some(k) = pick_ref(rng, &names) else { return Ok("") };
            let op = m.begin();
            fs.unlink(k.0, &k.1).map_err(fail(format!("unlink in {}", k.0)))?;
            m.removed(op, k.0, &k.1);
            "unlink"
        }
        57..=58 => {
            let names: Vec<(Ino, Vec<u8>)> = m
                .entries
                .iter()
                .filter(|(_, i)| m.kind_is(**i, is_dir) && m.children(**i) == 0)
                .map(|(k, _)| k.clone())
                .collect();
            let Some(k) = pick_ref(rng, &names) else { return Ok("") };
            let op = m.begin();
            fs.rmdir(k.0, &k.1).map_err(fail(format!("rmdir in {}", k.0)))?;
            m.removed(op, k.0, &k.1);
            "rmdir"
        }
        59..=71 => {
            let names: Vec<(Ino, Vec<u8>)> = m.entries.keys().cloned().collect();
            let Some((sd, sn)) = pick_ref(rng, &names) else { return Ok("") };
            let src = m.entries[&(sd, sn.clone())];
            let dd = if rng.gen_bool(0.5) { sd } else { pick(rng, &m.inos(is_dir)).unwrap() };
            let dn = pick(rng, &NAMES).unwrap();
            let target = m.entries.get(&(dd, dn.to_vec())).copied();
            if (dd, dn) == (sd, &sn[..]) || target == Some(src) {
                return Ok("");
            }
            if m.kind_is(src, is_dir) && (target.is_some() || m.is_under(dd, src)) {
                return Ok("");
            }
            if target.is_some_and(|t| m.kind_is(t, is_dir)) {
                return Ok("");
            }
            let op = m.begin();
            fs.rename(sd, &sn, dd, dn, 0).map_err(fail(format!("rename {sd}/.. to {dd}/..")))?;
            m.renamed(op, sd, &sn, dd, dn);
            if target.is_some() {
                "rename over"
            } else {
                "rename"
            }
        }
        72..=77 => {
            let Some(ino) = pick(rng, &m.inos(is_file)) else { return Ok("") };
            let Some((dir, name)) = free_name(m, rng) else { return Ok("") };
            if m.links(ino) >= 4 {
                return Ok("");
            }
            let op = m.begin();
            fs.link_noref(ino, dir, name).map_err(fail(format!("link {ino} into {dir}")))?;
            m.linked(op, ino, dir, name);
            "link"
        }
        78..=81 => {
            let Some((dir, name)) = free_name(m, rng) else { return Ok("") };
            let len = if rng.gen_bool(0.2) { rng.gen_range(100..900) } else { rng.gen_range(1..40) };
            let target: Vec<u8> = (0..len).map(|_| rng.gen_range(b'a'..=b'z')).collect();
            let op = m.begin();
            let a = fs.symlink_noref(dir, name, &target, Cred::ROOT).map_err(fail(format!("symlink in {dir}")))?;
            m.created(op, dir, name, a.ino, Val::Symlink(target));
            "symlink"
        }
        82..=92 => {
            let Some(ino) = pick(rng, &m.inos(is_file_or_dir)) else { return Ok("") };
            let name = pick(rng, &XATTRS).unwrap();
            let len = if rng.gen_bool(0.2) { rng.gen_range(9000..20_000) } else { rng.gen_range(0..200) };
            let mut value = vec![0u8; len];
            rng.fill(&mut value[..]);
            let op = m.begin();
            fs.setxattr(ino, name, &value, 0).map_err(fail(format!("setxattr on {ino}")))?;
            m.xattr_set(op, ino, name, Some(&value));
            "setxattr"
        }
        _ => {
            let with: Vec<(Ino, Vec<u8>)> =
                m.nodes.iter().flat_map(|(i, n)| n.xattrs.keys().map(move |k| (*i, k.clone()))).collect();
            let Some((ino, name)) = pick_ref(rng, &with) else { return Ok("") };
            let op = m.begin();
            fs.removexattr(ino, &name).map_err(fail(format!("removexattr on {ino}")))?;
            m.xattr_set(op, ino, &name, None);
            "removexattr"
        }
    };
    Ok(done)
}

fn pick_ref<T: Clone + Ord>(rng: &mut ChaCha8Rng, v: &[T]) -> Option<T> {
    // Sorted first: the model's maps iterate in no fixed order.
    let mut v = v.to_vec();
    v.sort();
    if v.is_empty() {
        None
    } else {
        Some(v[rng.gen_range(0..v.len())].clone())
    }
}

/// A pool of `v` on devices of `rec`, txg timeout an hour.
fn create_pool(rec: &Arc<CrashRecorder>, v: &Variant) -> Arc<ObjPool> {
    let devs: Vec<(String, Arc<dyn Device>)> = (0..v.devices)
        .map(|i| {
            let name = format!("{}{i}", v.name);
            let d = rec.device(&name, DEV_SIZE) as Arc<dyn Device>;
            (name, d)
        })
        .collect();
    let logs: Vec<tarn_obj::TopDevices> = v
        .log
        .iter()
        .map(|(kind, n)| {
            let devs = (0..*n)
                .map(|i| {
                    let name = format!("log{i}");
                    (name.clone(), rec.device(&name, DEV_SIZE) as Arc<dyn Device>)
                })
                .collect();
            (kind.clone(), devs)
        })
        .collect();
    let pool = ObjPool::create_with_logs(PoolCreate {
        name: "crash".into(),
        tops: vec![(v.kind.clone(), devs)],
        ashift: 12,
        properties: Default::default(),
        hostname: "test".into(),
    }, logs)
    .expect("create pool");
    pool.set_tunables(Tunables { txg_timeout_ms: 3_600_000, ..Default::default() });
    pool
}

fn import(devs: Vec<Arc<dyn Device>>) -> tarn_obj::Result<Arc<ObjPool>> {
    ObjPool::import(devs, ImportOptions { rewind: false, force: true, hostname: "test".into(), readonly: false })
}

fn open_fs(pool: &Arc<ObjPool>, id: ObjsetId) -> Result<Arc<Fs>, String> {
    let os = pool.open_objset(id).map_err(|e| format!("open object set {id:?}: {e}"))?;
    Fs::open(pool.clone(), os, FsOptions::default()).map_err(|e| format!("Fs::open of {id:?}: {e}"))
}

type Keys = (tarn_obj::crypt::Crypt, Arc<tarn_block::BlockKeys>);

/// What a workload did: its datasets, models and acknowledgements.
struct Run {
    /// The encrypted dataset's cipher, key guid and keys (loaded after each import).
    keys: Option<Keys>,
    osids: Vec<ObjsetId>,
    models: Vec<DsModel>,
    acks: Vec<Ack>,
    /// Recorder events when the setup was synced (cuts start here) and when the threads ended.
    first: u64,
    end: u64,
    ops: std::collections::BTreeMap<&'static str, u64>,
    log_blocks_written: u64,
    /// Of those, the first dataset's (sealed when it is encrypted).
    log_blocks_written_first: u64,
    /// Data blocks the logs wrote once for their records (indirect writes).
    indirect_written: u64,
    /// Of those, the first dataset's (sealed when it is encrypted).
    indirect_written_first: u64,
}

/// Formats the datasets, builds a small tree, syncs, then runs the threads.
fn workload(pool: &Arc<ObjPool>, rec: &CrashRecorder, seed: u64, per_thread: usize, keys: Option<Keys>) -> Run {
    if let Some((crypt, k)) = &keys {
        pool.load_keys(crypt.key_guid, k.clone());
    }
    let mut osids = Vec::new();
    let mut fss = Vec::new();
    let mut models = Vec::new();
    for _ in 0..DATASETS {
        // With `keys`, the first dataset is encrypted (its log blocks are
        // sealed, the blocks of its large sync writes sealed too).
        let crypt = keys.as_ref().filter(|_| osids.is_empty()).map(|(c, _)| *c);
        let tx = pool.begin();
        let id = pool.create_objset_with(&tx, crypt).unwrap();
        drop(tx);
        let os = pool.open_objset(id).unwrap();
        let tx = pool.begin();
        Fs::format(&os, &tx).unwrap();
        drop(tx);
        let fs = Fs::open(pool.clone(), os, FsOptions::default()).unwrap();
        // The second dataset writes every whole block of its sync writes
        // once, as the block its txg adopts (the first: those past 32 KiB).
        if !osids.is_empty() {
            fs.objset().set_logbias(tarn_obj::LogBias::Throughput);
        }
        let mut m = DsModel::new(fs.root_ino());
        // A start: two directories and a few files, some data.
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5e7u64.wrapping_mul(osids.len() as u64 + 1));
        for (dir_name, files) in [(&b"d0"[..], 2), (b"d1", 1)] {
            let root = m.root;
            let op = m.begin();
            let d = fs.mkdir_noref(root, dir_name, 0o755, Cred::ROOT).unwrap();
            m.created(op, root, dir_name, d.ino, Val::Dir);
            for name in &NAMES[..files] {
                for dir in [root, d.ino] {
                    if m.entries.contains_key(&(dir, name.to_vec())) {
                        continue;
                    }
                    let op = m.begin();
                    let (a, _) = fs.create_noref(dir, name, 0o644, Cred::ROOT, true).unwrap();
                    m.created(op, dir, name, a.ino, Val::File { size: 0, hash: crash_model::hash(&[]) });
                    let mut data = vec![0u8; rng.gen_range(1..300_000)];
                    rng.fill(&mut data[..]);
                    let op = m.begin();
                    fs.write(a.ino, 0, &data).unwrap();
                    m.wrote(op, a.ino, 0, &data);
                }
            }
        }
        osids.push(fs.objset().id());
        fss.push(fs);
        models.push(Mutex::new(m));
    }
    pool.sync().unwrap();
    let first = rec.event_count();
    let acks = Mutex::new(
        models.iter().enumerate().map(|(ds, m)| Ack { event: first, ds, ops: m.lock().ops, ino: None }).collect::<Vec<_>>(),
    );
    let counts = Mutex::new(std::collections::BTreeMap::new());
    std::thread::scope(|sc| {
        let n = threads();
        for t in 0..n {
            let per_thread = per_thread * THREADS / n;
            let (fss, models, acks, counts) = (&fss, &models, &acks, &counts);
            sc.spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ ((t as u64 + 1) * 0x9e37_79b9));
                let mut mine = std::collections::BTreeMap::new();
                for _ in 0..per_thread {
                    let k = rng.gen_range(0..DATASETS);
                    let r = rng.gen_range(0..100);
                    if r < 12 {
                        // fsync of a file; operations done when it is called are acknowledged when it returns.
                        let (ino, ops) = {
                            let m = models[k].lock();
                            (pick(&mut rng, &m.inos(is_file)), m.ops)
                        };
                        let Some(ino) = ino else { continue };
                        match fss[k].fsync(ino) {
                            Ok(()) => acks.lock().push(Ack { event: rec.event_count(), ds: k, ops, ino: Some(ino) }),
                            // Unlinked (and freed) by another thread meanwhile: no acknowledgement.
                            Err(_) if !models[k].lock().nodes.contains_key(&ino) => {}
                            Err(e) => panic!("fsync of {ino}: {e}"),
                        }
                        *mine.entry("fsync").or_insert(0) += 1;
                    } else if r < 13 {
                        let ops: Vec<u64> = models.iter().map(|m| m.lock().ops).collect();
                        pool.sync().unwrap();
                        let event = rec.event_count();
                        acks.lock().extend(ops.iter().enumerate().map(|(ds, &ops)| Ack { event, ds, ops, ino: None }));
                        *mine.entry("pool sync").or_insert(0) += 1;
                    } else {
                        let mut m = models[k].lock();
                        let what = step(&fss[k], &mut m, &mut rng).unwrap_or_else(|e| panic!("thread {t}, dataset {k}: {e}"));
                        *mine.entry(what).or_insert(0) += 1;
                    }
                }
                let mut c = counts.lock();
                for (k, v) in mine {
                    *c.entry(k).or_insert(0) += v;
                }
            });
        }
    });
    let end = rec.event_count();
    // (0 where the file system does not use the log.)
    let log_blocks_written = fss.iter().map(|fs| fs.objset().log_stats().blocks_written).sum();
    let log_blocks_written_first = fss[0].objset().log_stats().blocks_written;
    let indirect_written = fss.iter().map(|fs| fs.objset().log_stats().indirect_written).sum();
    let indirect_written_first = fss[0].objset().log_stats().indirect_written;
    drop(fss);
    Run {
        keys,
        osids,
        models: models.into_iter().map(|m| m.into_inner()).collect(),
        acks: acks.into_inner(),
        first,
        end,
        ops: counts.into_inner(),
        log_blocks_written,
        log_blocks_written_first,
        indirect_written,
        indirect_written_first,
    }
}

/// What one import and check saw.
#[derive(Default)]
struct Checked {
    /// Bytes of file data compared.
    bytes: u64,
    /// Log blocks found at import (waiting for replay), all datasets.
    log_blocks: u64,
    /// Of those, the first dataset's.
    log_blocks_first: u64,
    /// Files holding a mix of their states (see `Seen::mixed`).
    mixed: u64,
}

/// Imports `images`, opens every dataset (replaying its log), syncs, and
/// checks the pool and each file system against the run as acknowledged
/// by event `acked_at`.
fn import_and_check(images: Vec<Arc<dyn Device>>, run: &Run, acked_at: u64, contents: bool) -> Result<Checked, String> {
    let pool = import(images).map_err(|e| format!("import: {e}"))?;
    if let Some((crypt, k)) = &run.keys {
        pool.load_keys(crypt.key_guid, k.clone());
    }
    let mut out = Checked::default();
    for id in &run.osids {
        let os = pool.open_objset(*id).map_err(|e| format!("open object set {id:?}: {e}"))?;
        let n = os.log_stats().chain_blocks.len() as u64;
        out.log_blocks += n;
        if *id == run.osids[0] {
            out.log_blocks_first += n;
        }
    }
    let fss: Vec<Arc<Fs>> = run.osids.iter().map(|id| open_fs(&pool, *id)).collect::<Result<_, _>>()?;
    pool.sync().map_err(|e| format!("sync after open: {e}"))?;
    let report = pool.check();
    if !report.ok() {
        return Err(format!("pool check: {report:?}"));
    }
    for (k, fs) in fss.iter().enumerate() {
        let acked = Acked::at(&run.acks, k, acked_at);
        let seen = check_fs(fs, &run.models[k], &acked, contents).map_err(|e| format!("dataset {k}: {e}"))?;
        out.bytes += seen.bytes_read;
        out.mixed += seen.mixed;
    }
    Ok(out)
}

fn mode_for(i: usize, seed: u64, cut: u64) -> CutMode {
    match i % 3 {
        0 => CutMode::DropUnflushed,
        1 => CutMode::TearLastWrite,
        _ => CutMode::RandomSubset(seed ^ cut),
    }
}

fn as_dyn(v: Vec<Arc<MemDevice>>) -> Vec<Arc<dyn Device>> {
    v.into_iter().map(|d| d as Arc<dyn Device>).collect()
}

#[test]
fn power_cuts_keep_fsynced_files_and_whole_namespace() {
    let run_env = tarn_testkit::seeded!(1050);
    let (seed, count) = (run_env.seed, run_env.count);
    let per_variant = count.div_ceil(VARIANTS.len() as u64);
    let mut total_cuts = 0;
    for (vi, v) in VARIANTS.iter().enumerate() {
        let t0 = Instant::now();
        let vseed = seed ^ (vi as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d);
        let rec = CrashRecorder::new();
        let pool = create_pool(&rec, v);
        let run = workload(&pool, &rec, vseed, 250, None);
        drop(pool);
        let worked = t0.elapsed();
        let mut rng = ChaCha8Rng::seed_from_u64(vseed);
        let mut cuts: Vec<u64> = (0..per_variant).map(|_| rng.gen_range(run.first..=run.end)).collect();
        cuts.sort();
        let (mut bytes, mut with_log, mut log_blocks, mut mixed) = (0, 0, 0, 0);
        for (i, &cut) in cuts.iter().enumerate() {
            let mode = mode_for(i, vseed, cut);
            // Every file read whole at every fourth cut; sizes only at the others.
            let contents = true;
            let images = as_dyn(rec.image_at(cut, mode));
            let c = import_and_check(images, &run, cut, contents)
                .unwrap_or_else(|e| panic!("{}: cut {cut} of {} ({mode:?}), seed {seed:#x}: {e}", v.name, run.end));
            bytes += c.bytes;
            mixed += c.mixed;
            log_blocks += c.log_blocks;
            with_log += u64::from(c.log_blocks > 0);
        }
        total_cuts += cuts.len();
        let fsyncs = run.acks.iter().filter(|a| a.ino.is_some()).count();
        eprintln!(
            "{}: {} cuts over events {}..{}; {} ops {:?}; {fsyncs} fsyncs acknowledged, {} log blocks and {} indirect blocks written; {with_log} cuts left a log to replay ({log_blocks} blocks); {} MiB compared, {mixed} files found holding parts of unacknowledged writes; workload {:.1?}, cuts {:.1?}",
            v.name,
            cuts.len(),
            run.first,
            run.end,
            run.models.iter().map(|m| m.ops).sum::<u64>(),
            run.ops,
            run.log_blocks_written,
            run.indirect_written,
            bytes >> 20,
            worked,
            t0.elapsed() - worked,
        );
        assert!(fsyncs > 10, "{}: only {fsyncs} fsyncs: the test proves little", v.name);
        assert!(run.log_blocks_written > 0 && with_log > 0, "{}: no cut left a log to replay: the log is not exercised", v.name);
        assert!(run.indirect_written > 0, "{}: no indirect write: large sync writes are not exercised", v.name);
    }
    eprintln!("{total_cuts} cuts checked");
}

/// Issue 12, test 5: the power cuts above with the first dataset encrypted
/// (on a mirror): after every cut the pool imports, the key is loaded, and
/// both datasets pass the same checks (fsynced data, whole namespace,
/// nothing unreachable, the checker clean: the encrypted trees' MACs and
/// digests verify on every read).
#[test]
fn power_cuts_with_an_encrypted_dataset() {
    let run_env = tarn_testkit::seeded!(150);
    let (seed, count) = (run_env.seed, run_env.count);
    let v = &VARIANTS[1];
    let vseed = seed ^ 0xe2c7_9f1d;
    let master = tarn_keys::MasterKey::from_bytes(&[0x3c; 32]);
    let crypt = tarn_obj::crypt::Crypt { cipher: tarn_block::Cipher::Aes256Gcm, key_guid: 0xe2c7 };
    let keys = Arc::new(tarn_block::BlockKeys::new(crypt.cipher, &master).unwrap());
    let rec = CrashRecorder::new();
    let pool = create_pool(&rec, v);
    let run = workload(&pool, &rec, vseed, 120, Some((crypt, keys)));
    drop(pool);
    let mut rng = ChaCha8Rng::seed_from_u64(vseed);
    let mut cuts: Vec<u64> = (0..count).map(|_| rng.gen_range(run.first..=run.end)).collect();
    cuts.sort();
    let (mut bytes, mut with_log) = (0, 0);
    for (i, &cut) in cuts.iter().enumerate() {
        let mode = mode_for(i, vseed, cut);
        let images = as_dyn(rec.image_at(cut, mode));
        let c = import_and_check(images, &run, cut, true).unwrap_or_else(|e| panic!("encrypted: cut {cut} of {} ({mode:?}), seed {seed:#x}: {e}", run.end));
        bytes += c.bytes;
        with_log += u64::from(c.log_blocks_first > 0);
    }
    let fsyncs = run.acks.iter().filter(|a| a.ino.is_some() && a.ds == 0).count();
    eprintln!(
        "encrypted: {} cuts over events {}..{}; {fsyncs} fsyncs acknowledged on the encrypted dataset, {} sealed log blocks and {} sealed indirect blocks written; {with_log} cuts left it a sealed log to replay; {} MiB compared",
        cuts.len(),
        run.first,
        run.end,
        run.log_blocks_written_first,
        run.indirect_written_first,
        bytes >> 20
    );
    assert!(fsyncs > 5, "only {fsyncs} fsyncs on the encrypted dataset: the test proves little");
    assert!(run.log_blocks_written_first > 0 && with_log > 0, "the encrypted dataset's log is not exercised");
    assert!(run.indirect_written_first > 0, "no indirect write on the encrypted dataset: its large sync writes are not exercised");
}

#[test]
fn power_cut_while_opening_after_a_crash() {
    let run_env = tarn_testkit::seeded!(120);
    let (seed, count) = (run_env.seed, run_env.count);
    let v = &VARIANTS[1];
    // A workload, and power cut just after its last operation returned;
    // the crashed image on new recorded devices: import and open (replay),
    // then cut power anywhere in that and open again. A workload whose
    // crash left no log to replay (its last fsync was followed by a pool
    // sync) is run again with the next seed.
    let mut attempt = 0u64;
    let (run, rec2, first, start) = loop {
        let rec = CrashRecorder::new();
        let pool = create_pool(&rec, v);
        let run = workload(&pool, &rec, seed.wrapping_add(attempt), 40, None);
        drop(pool);
        let crashed = rec.image_at(run.end, CutMode::DropUnflushed);
        let rec2 = CrashRecorder::new();
        let devs: Vec<Arc<dyn Device>> =
            (0..v.devices).map(|i| rec2.device(&format!("r{i}"), DEV_SIZE) as Arc<dyn Device>).collect();
        for (m, d) in crashed.iter().zip(&devs) {
            m.copy_to(d.as_ref()).unwrap();
        }
        let start = rec2.event_count();
        let first = import_and_check(devs, &run, run.end, true)
            .unwrap_or_else(|e| panic!("first open after the crash, seed {seed:#x} + {attempt}: {e}"));
        if first.log_blocks > 0 || attempt == 7 {
            break (run, rec2, first, start);
        }
        attempt += 1;
    };
    let end = rec2.event_count();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut cuts: Vec<u64> = (0..count).map(|_| rng.gen_range(start..=end)).collect();
    cuts.sort();
    let mut with_log = 0;
    for (i, &cut) in cuts.iter().enumerate() {
        let mode = mode_for(i, seed, cut);
        let images = as_dyn(rec2.image_at(cut, mode));
        let c = import_and_check(images, &run, run.end, true)
            .unwrap_or_else(|e| panic!("cut {cut} in {start}..{end} while opening ({mode:?}), seed {seed:#x}: {e}"));
        with_log += u64::from(c.log_blocks > 0);
    }
    assert!(first.log_blocks > 0, "the crashed image has no log to replay: the replay is not exercised");
    eprintln!(
        "{} cuts while opening after a crash (events {start}..{end}; {} acknowledgements to keep; {} log blocks to replay at the first open, {with_log} cuts left a log to replay again)",
        cuts.len(),
        run.acks.len(),
        first.log_blocks,
    );
}

/// A file of the model with data, and one of its names.
fn some_file(m: &DsModel) -> ((Ino, Vec<u8>), Ino) {
    m.entries
        .iter()
        .find(|(_, i)| m.nodes[i].data.len() > 1)
        .map(|(k, i)| (k.clone(), *i))
        .expect("a file with data")
}

/// Changes inode `ino`'s stored attributes (not through `Fs`).
fn poke_inode(fs: &Fs, ino: Ino, f: fn(&mut InodePhys)) {
    let os = fs.objset();
    let mut p = InodePhys::decode(ino, &os.bonus(ObjectId(ino)).unwrap()).unwrap();
    f(&mut p);
    let tx = fs.pool().begin();
    os.set_bonus(&tx, ObjectId(ino), &p.encode()).unwrap();
}

/// The checks can fail: a change made behind the model's back (through
/// `Fs`, or to the stored inodes, as a half-applied operation would leave
/// them) is found, on a file system that passed them just before.
#[test]
fn checker_finds_changes_behind_the_models_back() {
    type Sabotage = fn(&Fs, &DsModel);
    let cases: [(&str, Sabotage, &str); 10] = [
        ("rename", |fs, m| {
            let ((d, n), _) = some_file(m);
            fs.rename(d, &n, m.root, b"elsewhere", 0).unwrap();
        }, "entry"),
        ("unlink", |fs, m| {
            let ((d, n), _) = some_file(m);
            fs.unlink(d, &n).unwrap();
        }, "entry"),
        ("write", |fs, m| {
            let (_, ino) = some_file(m);
            let b = m.nodes[&ino].data[0];
            fs.write(ino, 0, &[!b]).unwrap();
        }, "no later one wrote it"),
        ("truncate", |fs, m| {
            let (_, ino) = some_file(m);
            fs.setattr(ino, &SetAttr { size: Some(1), ..Default::default() }).unwrap();
        }, "size 1;"),
        ("setxattr", |fs, m| {
            let (_, ino) = some_file(m);
            fs.setxattr(ino, b"user.zz", b"v", 0).unwrap();
        }, "was never set"),
        ("nlink", |fs, m| poke_inode(fs, some_file(m).1, |p| p.nlink += 1), "names"),
        ("dir size", |fs, m| poke_inode(fs, m.root, |p| p.size += 1), "size"),
        ("dir nlink", |fs, m| poke_inode(fs, m.root, |p| p.nlink -= 1), "subdirectories"),
        ("orphan", |fs, _| {
            let tx = fs.pool().begin();
            fs.objset().create(&tx, tarn_fs::otype::FILE, 4096, &[0; tarn_obj::BONUS_LEN]).unwrap();
        }, "unreachable"),
        ("dangling entry", |fs, m| {
            let tx = fs.pool().begin();
            let v = tarn_fs::format::encode_dirent(999_999, tarn_fs::FileKind::File.dtype());
            tarn_obj::zap::Zap::insert(fs.objset(), &tx, ObjectId(m.root), b"ghost", &v).unwrap();
        }, "not live"),
    ];
    let run_env = tarn_testkit::seeded!(1);
    for (what, sabotage, expect) in cases {
        let rec = CrashRecorder::new();
        let pool = create_pool(&rec, &VARIANTS[0]);
        let mut run = workload(&pool, &rec, run_env.seed, 30, None);
        pool.sync().unwrap();
        // Everything acknowledged.
        let all: Vec<Ack> = run.models.iter().enumerate().map(|(ds, m)| Ack { event: 0, ds, ops: m.ops, ino: None }).collect();
        run.acks = all;
        let fs = open_fs(&pool, run.osids[0]).unwrap();
        let acked = Acked::at(&run.acks, 0, 0);
        check_fs(&fs, &run.models[0], &acked, true).unwrap_or_else(|e| panic!("{what}: before the change: {e}"));
        sabotage(&fs, &run.models[0]);
        pool.sync().unwrap();
        match check_fs(&fs, &run.models[0], &acked, true) {
            Ok(_) => panic!("{what}: not found"),
            Err(e) => assert!(e.contains(expect), "{what}: found, but as {e:?} (expected {expect:?})"),
        }
    }
}
