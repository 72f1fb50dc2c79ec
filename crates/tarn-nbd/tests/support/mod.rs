//! A volume on a pool of memory devices, served by an NBD server on a
//! free localhost port.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tarn_dev::Device;
use tarn_nbd::{Export, NbdServer};
use tarn_obj::{ObjPool, PoolCreate, TopKind};
use tarn_share::nfs::HostList;
use tarn_vol::{SyncMode, VolOptions, Volume};

pub struct Served {
    pub pool: Arc<ObjPool>,
    pub volume: Arc<Volume>,
    pub server: NbdServer,
    pub devs: Vec<Arc<dyn Device>>,
    /// Holds the device files (sparse); removed last.
    pub dir: tempfile::TempDir,
}

impl Served {
    pub fn uri(&self, export: &str) -> String {
        format!("nbd://127.0.0.1:{}/{export}", self.server.local_addr().port())
    }
}

pub fn pool(devs: &[Arc<dyn Device>]) -> Arc<ObjPool> {
    ObjPool::create(PoolCreate {
        name: "nbdt".into(),
        tops: vec![(TopKind::Mirror, devs.iter().enumerate().map(|(i, d)| (format!("d{i}"), d.clone())).collect())],
        ashift: 12,
        properties: Default::default(),
        hostname: "test".into(),
    })
    .expect("create pool")
}

pub fn volume(pool: &Arc<ObjPool>, size: u64, bs: u32) -> Arc<Volume> {
    let tx = pool.begin();
    let id = pool.create_objset(&tx).unwrap();
    drop(tx);
    let os = pool.open_objset(id).unwrap();
    let tx = pool.begin();
    Volume::format(&os, &tx, bs).unwrap();
    drop(tx);
    Volume::open(pool.clone(), os, VolOptions { size, sync: SyncMode::Standard, readonly: false }).unwrap()
}

/// `tank/vol` of `size` bytes (16 KiB blocks) served read-write, on a
/// mirror of two sparse files.
pub fn serve(size: u64) -> Served {
    let dir = tempfile::Builder::new().prefix("tarn-nbd-").tempdir_in(scratch()).unwrap();
    let devs: Vec<Arc<dyn Device>> = (0..2)
        .map(|i| tarn_dev::FileDevice::open(&dir.path().join(format!("d{i}")), Some(size + size / 4 + (256 << 20))).unwrap() as Arc<dyn Device>)
        .collect();
    let pool = pool(&devs);
    let volume = volume(&pool, size, 16 << 10);
    let server = NbdServer::start("127.0.0.1:0".parse().unwrap(), HostList::everyone()).unwrap();
    server.set_exports(vec![Export { name: "tank/vol".into(), volume: volume.clone(), readonly: false, description: "a test volume".into() }]);
    Served { pool, volume, server, devs, dir }
}

/// Where large test files go: on disk, not a tmpfs in memory.
pub fn scratch() -> std::path::PathBuf {
    let p = std::path::PathBuf::from("/var/tmp");
    if p.is_dir() {
        p
    } else {
        std::env::temp_dir()
    }
}

/// blake3-free streaming comparison: whether `a` and `b` hold the same
/// bytes (`b` may be longer if its tail is zeros).
pub fn same_prefix_then_zeros(a: &Path, b: &Path) -> bool {
    use std::io::Read;
    let (mut fa, mut fb) = (std::fs::File::open(a).unwrap(), std::fs::File::open(b).unwrap());
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let na = read_full(&mut fa, &mut ba);
        let nb = read_full(&mut fb, &mut bb);
        if na == 0 {
            if nb == 0 {
                return true;
            }
            if bb[..nb].iter().any(|&x| x != 0) {
                return false;
            }
            continue;
        }
        if nb < na || ba[..na] != bb[..na] {
            return false;
        }
        if nb > na && bb[na..nb].iter().any(|&x| x != 0) {
            return false;
        }
    }
    fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while n < buf.len() {
            match f.read(&mut buf[n..]).unwrap() {
                0 => break,
                k => n += k,
            }
        }
        n
    }
}

/// Runs a client program with a time limit; its output.
pub fn run(program: &str, args: &[&str]) -> Output {
    let mut child = Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e} (install qemu-utils, libnbd-bin, fio)"));
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("{program} {} timed out:\n{}{}", args.join(" "), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `run`, asserting success; stdout.
pub fn ok(program: &str, args: &[&str]) -> String {
    let out = run(program, args);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{program} {} failed ({}):\n{stdout}{stderr}", args.join(" "), out.status);
    stdout
}

/// A file of `len` random bytes (a multiple of 1 MiB) with zero runs
/// (holes to find after a copy in), written in pieces.
pub fn write_random_file(path: &Path, len: usize, seed: u64) {
    use rand::{RngCore, SeedableRng};
    use std::io::Write;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut d = vec![0u8; 1 << 20];
    for i in 0..len / (1 << 20) {
        rng.fill_bytes(&mut d);
        if i % 3 == 0 {
            d[..256 << 10].fill(0);
        }
        f.write_all(&d).unwrap();
    }
    f.flush().unwrap();
}
