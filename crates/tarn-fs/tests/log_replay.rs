//! The intent log through the file system (issue 11): `fsync` makes every
//! change before it durable without a txg, and after a power cut the next
//! `Fs::open` replays them: the tree then equals, byte for byte and
//! attribute for attribute, the one the fsync acknowledged.
//!
//! Power is "cut" by rebuilding the devices from a recorder of every write
//! and flush (tarn_dev::CrashRecorder), keeping only what was flushed when
//! the fsync returned. The seeded exhaustive version with several threads
//! and random cut points is tests/log_crash.rs.

use std::collections::BTreeMap;
use std::sync::Arc;

use tarn_dev::{CrashRecorder, CutMode, Device};
use tarn_fs::*;
use tarn_obj::{ImportOptions, ObjPool, PoolCreate, TopKind, Tunables};

mod support;
use support::new_fs;

const C: Cred = Cred::ROOT;

fn pool_on(devs: &[Arc<dyn Device>]) -> Arc<ObjPool> {
    let pool = ObjPool::create(PoolCreate {
        name: "logt".into(),
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

/// Everything a user can see of a tree: per path, kind, mode, owner, size,
/// link count, times, generation, contents (or target), and xattrs.
fn dump(fs: &Fs) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(fs.root_ino(), String::new())];
    while let Some((dir, path)) = stack.pop() {
        let mut entries = Vec::new();
        fs.readdir(dir, 0, &mut |e| {
            if e.name != b"." && e.name != b".." {
                entries.push(e.clone());
            }
            true
        })
        .unwrap();
        for e in entries {
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let a = fs.getattr(e.ino).unwrap();
            let body = match a.kind {
                FileKind::File => {
                    let data = fs.read(e.ino, 0, a.size as u32).unwrap();
                    format!("{:016x}", xxhash(&data))
                }
                FileKind::Symlink => String::from_utf8_lossy(&fs.readlink(e.ino).unwrap()).into_owned(),
                FileKind::Dir => {
                    stack.push((e.ino, p.clone()));
                    String::new()
                }
                _ => String::new(),
            };
            let mut xattrs: Vec<String> = fs
                .listxattr(e.ino)
                .unwrap()
                .into_iter()
                .map(|n| format!("{}={:?}", String::from_utf8_lossy(&n), fs.getxattr(e.ino, &n).unwrap()))
                .collect();
            xattrs.sort();
            out.insert(
                p,
                format!(
                    "ino {} {:?} {:o} {}:{} size {} nlink {} m{} c{} gen {} [{body}] {xattrs:?}",
                    a.ino, a.kind, a.perm, a.uid, a.gid, a.size, a.nlink, a.mtime_ns, a.ctime_ns, a.generation
                ),
            );
        }
    }
    out
}

fn xxhash(b: &[u8]) -> u64 {
    // FNV-1a: enough to tell contents apart in a test.
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ x as u64).wrapping_mul(0x100_0000_01b3))
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Every kind of change, some undone by later ones, in one dataset.
fn changes(fs: &Fs) {
    let root = fs.root_ino();
    let d = fs.mkdir(root, b"d", 0o755, C).unwrap();
    let (a, _) = fs.create(d.ino, b"a", 0o644, C, true).unwrap();
    fs.write(a.ino, 0, &pattern(3000, 1)).unwrap();
    fs.write(a.ino, 100, &pattern(50, 2)).unwrap();
    // Larger than one log record: split over records.
    let (big, _) = fs.create(root, b"big", 0o600, C, true).unwrap();
    fs.write(big.ino, 1 << 20, &pattern(300_000, 3)).unwrap();
    fs.write(big.ino, 0, &pattern(1 << 20, 4)).unwrap();
    let (b, _) = fs.create(root, b"b", 0o644, C, true).unwrap();
    fs.write(b.ino, 0, b"to be replaced").unwrap();
    fs.rename(d.ino, b"a", root, b"b", 0).unwrap();
    fs.link(a.ino, d.ino, b"a-link").unwrap();
    fs.symlink(d.ino, b"s", b"../b", C).unwrap();
    fs.setxattr(a.ino, b"user.k", b"v1", 0).unwrap();
    fs.setxattr(a.ino, b"user.big", &pattern(20_000, 5), 0).unwrap();
    fs.setxattr(a.ino, b"user.k", b"v2", 0).unwrap();
    fs.removexattr(a.ino, b"user.big").unwrap();
    let (t, _) = fs.create(root, b"t", 0o644, C, true).unwrap();
    fs.write(t.ino, 0, &pattern(200_000, 6)).unwrap();
    fs.setattr(t.ino, &SetAttr { size: Some(70_001), ..Default::default() }).unwrap();
    fs.setattr(t.ino, &SetAttr { mode: Some(0o600), uid: Some(1000), ..Default::default() }).unwrap();
    let (gone, _) = fs.create(root, b"gone", 0o644, C, true).unwrap();
    fs.write(gone.ino, 0, b"x").unwrap();
    fs.unlink(root, b"gone").unwrap();
    fs.mkdir(d.ino, b"empty", 0o700, C).unwrap();
    fs.mkdir(d.ino, b"rmd", 0o700, C).unwrap();
    fs.rmdir(d.ino, b"rmd").unwrap();
    fs.mknod(root, b"fifo", libc::S_IFIFO | 0o644, 0, C).unwrap();
    for ino in [a.ino, big.ino, t.ino, gone.ino] {
        fs.forget(ino, 1);
    }
}

#[test]
fn fsync_commits_the_log_and_replay_restores_every_change() {
    let rec = CrashRecorder::new();
    let devs: Vec<Arc<dyn Device>> = (0..2).map(|i| rec.device(&format!("z{i}"), 128 << 20) as Arc<dyn Device>).collect();
    let pool = pool_on(&devs);
    let fs = new_fs(&pool, FsOptions::default());
    let osid = fs.objset().id();
    // The first creation syncs the new generation epoch, and the first
    // commit waits for the txg whose header names the new chain: start
    // after both.
    fs.mkdir(fs.root_ino(), b"warm", 0o755, C).unwrap();
    fs.fsync(fs.root_ino()).unwrap();
    pool.sync().unwrap();

    let synced = pool.last_synced_txg();
    changes(&fs);
    fs.fsync(fs.root_ino()).unwrap();
    assert_eq!(pool.last_synced_txg(), synced, "fsync synced a txg instead of committing the log");
    let stats = fs.objset().log_stats();
    assert!(stats.writes >= 1 && stats.blocks_written >= 3, "{stats:?}");
    let want = dump(&fs);
    let cut = rec.event_count();
    // Changes after the fsync are not acknowledged: they may or may not survive.
    fs.write(fs.lookup(fs.root_ino(), b"b").unwrap().ino, 0, b"after").unwrap();
    drop(fs);
    drop(pool);

    let images: Vec<Arc<dyn Device>> = rec.image_at(cut, CutMode::DropUnflushed).into_iter().map(|d| d as Arc<dyn Device>).collect();
    let pool = ObjPool::import(images, ImportOptions { rewind: false, force: true, hostname: "test".into(), readonly: false }).unwrap();
    let os = pool.open_objset(osid).unwrap();
    assert_eq!(os.log_stats().phase, tarn_obj::zil::LogPhase::Claimed, "import found no log to replay");
    // Mounted read-only first: no replay, nothing may change; made
    // writable, the file system replays before it takes a change.
    let fs = Fs::open(pool.clone(), os, FsOptions { readonly: true, ..Default::default() }).unwrap();
    assert_eq!(fs.objset().log_stats().phase, tarn_obj::zil::LogPhase::Claimed, "a read-only mount replayed");
    assert!(fs.lookup(fs.root_ino(), b"big").is_err(), "records applied without a replay");
    fs.set_options(FsOptions::default());
    let got = dump(&fs);
    for (k, v) in &want {
        assert_eq!(got.get(k), Some(v), "{k} after replay");
    }
    assert_eq!(got.len(), want.len(), "extra entries after replay: {got:?}");
    let report = pool.check();
    assert!(report.ok(), "{report:?}");
    // Replay is done and synced: the log is a fresh, empty chain.
    assert_ne!(fs.objset().log_stats().phase, tarn_obj::zil::LogPhase::Claimed);
    // The file system keeps working, and its next fsync uses the log again.
    let (n, _) = fs.create(fs.root_ino(), b"new", 0o644, C, true).unwrap();
    fs.write(n.ino, 0, b"new data").unwrap();
    fs.fsync(n.ino).unwrap();
    assert!(fs.objset().log_stats().writes >= 1);
}

#[test]
fn sync_always_commits_each_change_and_disabled_never_waits() {
    let rec = CrashRecorder::new();
    let devs: Vec<Arc<dyn Device>> = (0..2).map(|i| rec.device(&format!("y{i}"), 64 << 20) as Arc<dyn Device>).collect();
    let pool = pool_on(&devs);
    let always = new_fs(&pool, FsOptions { sync: SyncMode::Always, ..Default::default() });
    let disabled = new_fs(&pool, FsOptions { sync: SyncMode::Disabled, ..Default::default() });
    always.mkdir(always.root_ino(), b"warm", 0o755, C).unwrap();
    disabled.mkdir(disabled.root_ino(), b"warm", 0o755, C).unwrap();
    pool.sync().unwrap();
    let synced = pool.last_synced_txg();
    let (a, _) = always.create(always.root_ino(), b"f", 0o644, C, true).unwrap();
    always.write(a.ino, 0, b"acknowledged by the write itself").unwrap();
    let (d, _) = disabled.create(disabled.root_ino(), b"f", 0o644, C, true).unwrap();
    disabled.write(d.ino, 0, b"never waited for").unwrap();
    disabled.fsync(d.ino).unwrap();
    assert_eq!(pool.last_synced_txg(), synced, "no txg may be synced");
    assert!(always.objset().log_stats().writes >= 2, "{:?}", always.objset().log_stats());
    assert_eq!(disabled.objset().log_stats().writes, 0, "sync=disabled wrote its log");
    let cut = rec.event_count();
    let (ida, idd) = (always.objset().id(), disabled.objset().id());
    drop((always, disabled));
    drop(pool);
    let images: Vec<Arc<dyn Device>> = rec.image_at(cut, CutMode::DropUnflushed).into_iter().map(|d| d as Arc<dyn Device>).collect();
    let pool = ObjPool::import(images, ImportOptions { rewind: false, force: true, hostname: "test".into(), readonly: false }).unwrap();
    let always = Fs::open(pool.clone(), pool.open_objset(ida).unwrap(), FsOptions::default()).unwrap();
    let f = always.lookup(always.root_ino(), b"f").unwrap();
    assert_eq!(always.read(f.ino, 0, 100).unwrap(), b"acknowledged by the write itself");
    // sync=disabled promised nothing: the file was never made durable.
    let disabled = Fs::open(pool.clone(), pool.open_objset(idd).unwrap(), FsOptions::default()).unwrap();
    assert!(disabled.lookup(disabled.root_ino(), b"f").is_err(), "sync=disabled change survived without any sync");
    assert!(pool.check().ok());
}

/// Large sync writes are written once (issue 11): the log writes each whole
/// block as the ordinary block and records its pointer, the txg adopts the
/// block instead of writing its own, and after a power cut the replay
/// reads the blocks back. `logbias=throughput` does the same for small
/// whole blocks; partial blocks are always copied into the log.
#[test]
fn large_sync_writes_are_written_once_and_replayed_from_their_blocks() {
    let rec = CrashRecorder::new();
    let devs: Vec<Arc<dyn Device>> = (0..2).map(|i| rec.device(&format!("x{i}"), 128 << 20) as Arc<dyn Device>).collect();
    let pool = pool_on(&devs);
    let fs = new_fs(&pool, FsOptions::default());
    // 16 KiB records: whole blocks below the size, copied under
    // logbias=latency, written once under throughput.
    let small = FsOptions { recordsize: 16 << 10, ..Default::default() };
    let lat = new_fs(&pool, small);
    let tp = new_fs(&pool, small);
    tp.objset().set_logbias(tarn_obj::LogBias::Throughput);
    for f in [&fs, &lat, &tp] {
        f.mkdir(f.root_ino(), b"warm", 0o755, C).unwrap();
        f.fsync(f.root_ino()).unwrap();
    }
    pool.sync().unwrap();

    // Adopted: 1 MiB of whole 128 KiB blocks, fsynced, then a txg.
    let (a, _) = fs.create(fs.root_ino(), b"adopted", 0o644, C, true).unwrap();
    fs.write(a.ino, 0, &pattern(1 << 20, 1)).unwrap();
    fs.fsync(a.ino).unwrap();
    let st = fs.objset().log_stats();
    assert_eq!((st.indirect_written, st.indirect_adopted), (8, 0), "{st:?}");
    let log_bytes: u64 = st.chain_blocks.iter().map(|b| u64::from(b.psize)).sum();
    assert!(log_bytes < 256 << 10, "the log holds pointers, not 1 MiB of data: {log_bytes} bytes of log blocks");
    pool.sync().unwrap();
    assert_eq!(fs.objset().log_stats().indirect_adopted, 8, "the txg wrote its own copies");
    // A block changed again after its record is not adopted (the txg
    // writes the newer one) and its indirect block is freed: `check` would
    // see a leak or a double reference.
    let (c, _) = fs.create(fs.root_ino(), b"changed", 0o644, C, true).unwrap();
    fs.write(c.ino, 0, &pattern(256 << 10, 2)).unwrap();
    fs.fsync(c.ino).unwrap();
    fs.write(c.ino, 1000, b"newer").unwrap();
    pool.sync().unwrap();
    let st = fs.objset().log_stats();
    assert_eq!((st.indirect_written, st.indirect_adopted), (10, 9), "{st:?}");
    let mut want_changed = pattern(256 << 10, 2);
    want_changed[1000..1005].copy_from_slice(b"newer");
    assert_eq!(fs.read(c.ino, 0, 256 << 10).unwrap(), want_changed);
    assert!(pool.check().ok(), "{:?}", pool.check());

    // Replayed: large writes on `fs` (with partial blocks at both ends),
    // 16 KiB records on `lat` and `tp`; fsync, then the power goes.
    let synced = pool.last_synced_txg();
    let (r, _) = fs.create(fs.root_ino(), b"replayed", 0o644, C, true).unwrap();
    fs.write(r.ino, 4096, &pattern(600_000, 3)).unwrap();
    fs.fsync(r.ino).unwrap();
    for f in [&lat, &tp] {
        let (t, _) = f.create(f.root_ino(), b"small-records", 0o644, C, true).unwrap();
        f.write(t.ino, 0, &pattern(64 << 10, 4)).unwrap();
        f.write(t.ino, 70_000, &pattern(5000, 5)).unwrap();
        f.fsync(t.ino).unwrap();
    }
    assert_eq!(pool.last_synced_txg(), synced, "fsync synced a txg");
    assert_eq!(lat.objset().log_stats().indirect_written, 0, "{:?}", lat.objset().log_stats());
    assert_eq!(tp.objset().log_stats().indirect_written, 4, "{:?}", tp.objset().log_stats());
    let (want_fs, want_lat, want_tp) = (dump(&fs), dump(&lat), dump(&tp));
    let cut = rec.event_count();
    let (idf, idl, idt) = (fs.objset().id(), lat.objset().id(), tp.objset().id());
    drop((fs, lat, tp));
    drop(pool);
    let images: Vec<Arc<dyn Device>> = rec.image_at(cut, CutMode::DropUnflushed).into_iter().map(|d| d as Arc<dyn Device>).collect();
    let pool = ObjPool::import(images, ImportOptions { rewind: false, force: true, hostname: "test".into(), readonly: false }).unwrap();
    assert!(pool.check().ok(), "claimed indirect blocks are allocated: {:?}", pool.check());
    let fs = Fs::open(pool.clone(), pool.open_objset(idf).unwrap(), FsOptions::default()).unwrap();
    let lat = Fs::open(pool.clone(), pool.open_objset(idl).unwrap(), FsOptions::default()).unwrap();
    let tp = Fs::open(pool.clone(), pool.open_objset(idt).unwrap(), FsOptions::default()).unwrap();
    assert_eq!(dump(&fs), want_fs);
    assert_eq!(dump(&lat), want_lat);
    assert_eq!(dump(&tp), want_tp);
    // The replay freed the claimed blocks with the chain: nothing leaks.
    pool.sync().unwrap();
    assert!(pool.check().ok(), "{:?}", pool.check());
}

/// Issue 12 with issue 11: an encrypted dataset's large sync writes are
/// written once too, as sealed blocks named by sealed records and listed
/// in the clear for the claim. After a power cut the import claims them
/// without the key (the checker finds them allocated, nothing leaked),
/// and the replay, once the key is loaded, restores the data; no byte of
/// it is on the devices in the clear.
#[test]
fn large_sync_writes_on_an_encrypted_dataset_are_written_once_sealed() {
    let rec = CrashRecorder::new();
    let devs: Vec<Arc<dyn Device>> = (0..2).map(|i| rec.device(&format!("e{i}"), 128 << 20) as Arc<dyn Device>).collect();
    let pool = pool_on(&devs);
    let crypt = tarn_obj::crypt::Crypt { cipher: tarn_block::Cipher::Aes256Gcm, key_guid: 0x5ea1 };
    let keys = || Arc::new(tarn_block::BlockKeys::new(crypt.cipher, &tarn_keys::MasterKey::from_bytes(&[0x61; 32])).unwrap());
    pool.load_keys(crypt.key_guid, keys());
    let fs = support::new_fs_with(&pool, FsOptions::default(), Some(crypt));
    let id = fs.objset().id();
    fs.mkdir(fs.root_ino(), b"warm", 0o755, C).unwrap();
    fs.fsync(fs.root_ino()).unwrap();
    pool.sync().unwrap();

    // Adopted by the next txg: written once, not twice.
    let marker = |i: u8| -> Vec<u8> { (0..1u32 << 20).map(|k| b"SEALED-INDIRECT-MARKER-"[k as usize % 23] ^ i).collect() };
    let (a, _) = fs.create(fs.root_ino(), b"adopted", 0o644, C, true).unwrap();
    fs.write(a.ino, 0, &marker(0)).unwrap();
    fs.fsync(a.ino).unwrap();
    let st = fs.objset().log_stats();
    assert_eq!((st.indirect_written, st.indirect_adopted), (8, 0), "{st:?}");
    let log_bytes: u64 = st.chain_blocks.iter().map(|b| u64::from(b.psize)).sum();
    assert!(log_bytes < 256 << 10, "the sealed log holds pointers, not 1 MiB of data: {log_bytes} bytes of log blocks");
    pool.sync().unwrap();
    assert_eq!(fs.objset().log_stats().indirect_adopted, 8, "the txg adopted the sealed blocks");
    assert_eq!(fs.read(a.ino, 0, 1 << 20).unwrap(), marker(0));
    assert!(pool.check().ok(), "{:?}", pool.check());

    // Replayed: fsynced, then the power goes before any txg.
    let synced = pool.last_synced_txg();
    let (r, _) = fs.create(fs.root_ino(), b"replayed", 0o644, C, true).unwrap();
    fs.write(r.ino, 4096, &marker(1)[..600_000]).unwrap();
    fs.fsync(r.ino).unwrap();
    assert_eq!(pool.last_synced_txg(), synced, "fsync synced a txg");
    assert!(fs.objset().log_stats().indirect_written >= 11, "{:?}", fs.objset().log_stats());
    let want = dump(&fs);
    let cut = rec.event_count();
    drop(fs);
    drop(pool);
    let images: Vec<Arc<dyn Device>> = rec.image_at(cut, CutMode::DropUnflushed).into_iter().map(|d| d as Arc<dyn Device>).collect();
    for d in &images {
        let mut all = vec![0u8; d.size() as usize];
        d.read_at(&mut all, 0).unwrap();
        for i in [0u8, 1] {
            let needle = &marker(i)[..64];
            assert!(!all.windows(64).any(|w| w == needle), "data of file {i} in the clear on {}", d.path());
        }
    }
    let open = || ObjPool::import(images.clone(), ImportOptions { rewind: false, force: true, hostname: "test".into(), readonly: false }).unwrap();
    // Without the key: claimed (the checker sees the blocks allocated).
    let pool = open();
    let check = pool.check();
    assert!(check.ok(), "claimed sealed indirect blocks: {check:?}");
    let os = pool.open_objset(id).unwrap();
    assert!(os.log_awaits_replay());
    assert_eq!(os.log_stats().claimed_indirect.len(), 3, "the three whole blocks of the replayed write, from the claim table");
    drop(os);
    pool.sync().unwrap();
    drop(pool);
    // With it: replayed from the sealed blocks; then nothing leaks.
    let pool = open();
    pool.load_keys(crypt.key_guid, keys());
    let fs = Fs::open(pool.clone(), pool.open_objset(id).unwrap(), FsOptions::default()).unwrap();
    assert_eq!(dump(&fs), want);
    pool.sync().unwrap();
    assert!(pool.check().ok(), "{:?}", pool.check());
}
