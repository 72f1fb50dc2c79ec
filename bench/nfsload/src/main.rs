//! nfsload: the client of the NFS benchmarks (bench/nfs.sh).
//!
//! Drives an NFSv3 server over TCP with no kernel NFS client: MOUNT, then
//! READ/WRITE/CREATE/GETATTR/REMOVE/COMMIT over `--conns` connections with
//! up to `--qd` calls in flight on each, as the Linux client does with
//! `nconnect` and readahead/writeback. `--local DIR` runs the same
//! workloads with system calls on a directory (`conns × qd` threads), so
//! a FUSE mount or ext4 is measured by the same code.
//!
//! Every read checks the offset stamped in each 4 KiB of the data it got;
//! short or failed requests end the run with exit status 1: a wrong result
//! is not a number. Prints one JSON object.

mod local;
mod nfs;
mod rpc;
mod workload;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};

use workload::{Kind, Pattern, Source};

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Workload {
    /// Write --size bytes in --bs requests (UNSTABLE), then COMMIT (fsync).
    SeqWrite,
    /// Read --size bytes of --file in --bs requests.
    SeqRead,
    /// Random --bs reads within the first --size bytes for --runtime seconds.
    RandRead,
    /// Random --bs writes (UNSTABLE) for --runtime seconds, then COMMIT (fsync).
    RandWrite,
    /// Create, getattr and remove --files empty files in one directory.
    Meta,
    /// Remove --file and the metadata directory.
    Cleanup,
}

#[derive(Parser, Debug)]
#[command(name = "nfsload", about = "NFSv3 load generator for tarn's benchmarks")]
struct Args {
    /// NFS server address (host:port).
    #[arg(long, conflicts_with = "local")]
    nfs: Option<SocketAddr>,
    /// MOUNT port (default: the NFS port).
    #[arg(long)]
    mount_port: Option<u16>,
    /// Export path to mount.
    #[arg(long, default_value = "/")]
    export: String,
    /// Run on this local directory instead of an NFS server.
    #[arg(long)]
    local: Option<PathBuf>,
    /// With --local: reads with O_DIRECT and getattr with statx
    /// AT_STATX_FORCE_SYNC, past the kernel's page and attribute caches
    /// (on a FUSE mount every call then reaches the daemon).
    #[arg(long, requires = "local")]
    uncached: bool,
    /// AUTH_SYS uid and gid of the calls.
    #[arg(long, default_value_t = 0)]
    uid: u32,
    #[arg(long, default_value_t = 0)]
    gid: u32,
    /// Data file name, in the export's root.
    #[arg(long, default_value = "nfsload.data")]
    file: String,
    /// Bytes of the data file used (K, M, G suffixes).
    #[arg(long, default_value = "2G", value_parser = parse_size)]
    size: u64,
    /// Request size.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    bs: u64,
    /// Connections (threads for --local).
    #[arg(long, default_value_t = 1)]
    conns: usize,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 1)]
    qd: usize,
    /// Seconds of the random workloads.
    #[arg(long, default_value_t = 20)]
    runtime: u64,
    /// Files of the metadata workload.
    #[arg(long, default_value_t = 20000)]
    files: u32,
    /// Seed of the random offsets (TARN_SEED, else the clock).
    #[arg(long)]
    seed: Option<String>,
    workload: Workload,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().map(|n| n * mult).map_err(|_| format!("bad size {s:?}"))
}

fn parse_seed(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("bad seed {s:?}"))
}

const META_DIR: &str = "nfsload-meta";

fn main() {
    let args = Args::parse();
    match run(&args) {
        Ok(json) => println!("{json}"),
        Err(e) => {
            eprintln!("nfsload: {e}");
            std::process::exit(1);
        }
    }
}

fn run(a: &Args) -> Result<String, String> {
    if a.bs == 0 || a.bs > 1 << 20 || !a.bs.is_multiple_of(4096) {
        return Err(format!("--bs {} must be a multiple of 4K up to 1M", a.bs));
    }
    if a.conns == 0 || a.qd == 0 {
        return Err("--conns and --qd must be at least 1".into());
    }
    let seed_text = a.seed.clone().or_else(|| std::env::var("TARN_SEED").ok());
    let seed = match &seed_text {
        Some(s) => parse_seed(s)?,
        None => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64),
    };
    let bs = u32::try_from(a.bs).expect("bs checked above");
    let pattern = Pattern::new(bs as usize);
    let runtime = Some(Duration::from_secs(a.runtime));
    let src = |kind| Source::new(kind, a.size, bs, u64::from(a.files), runtime, seed);
    let data_row = |w: &str, done: u64, secs: f64| {
        let bytes = done * a.bs;
        format!(
            "{{\"workload\":\"{w}\",\"conns\":{},\"qd\":{},\"bs\":{},\"ops\":{done},\"bytes\":{bytes},\"seconds\":{secs:.3},\"mib_per_s\":{:.1},\"iops\":{:.0},\"seed\":{seed}}}",
            a.conns,
            a.qd,
            a.bs,
            bytes as f64 / secs / f64::from(1 << 20),
            done as f64 / secs
        )
    };
    let meta_row = |t: [f64; 3]| {
        let n = f64::from(a.files);
        format!(
            "{{\"workload\":\"meta\",\"conns\":{},\"qd\":{},\"files\":{},\"create_per_s\":{:.0},\"getattr_per_s\":{:.0},\"remove_per_s\":{:.0},\"cycle_ops_per_s\":{:.0}}}",
            a.conns,
            a.qd,
            a.files,
            n / t[0],
            n / t[1],
            n / t[2],
            3.0 * n / (t[0] + t[1] + t[2])
        )
    };
    let name = match a.workload {
        Workload::SeqWrite => "seq-write",
        Workload::SeqRead => "seq-read",
        Workload::RandRead => "rand-read",
        Workload::RandWrite => "rand-write",
        Workload::Meta => "meta",
        Workload::Cleanup => "cleanup",
    };
    if let Some(dir) = &a.local {
        return run_local(a, dir, &src, &pattern, name, &data_row, &meta_row);
    }
    let Some(addr) = a.nfs else { return Err("give --nfs HOST:PORT or --local DIR".into()) };
    let cred = rpc::credential(a.uid, a.gid);
    let mount_addr = SocketAddr::new(addr.ip(), a.mount_port.unwrap_or(addr.port()));
    let root = rpc::mount(mount_addr, &a.export, &cred)?;
    let server = nfs::Server { addr, root, cred };
    let mut c = server.client()?;
    let root = server.root.clone();
    let empty = || nfs::Ctx { file: root.clone(), dir: root.clone(), handles: Vec::new() };
    match a.workload {
        Workload::SeqWrite | Workload::RandWrite | Workload::SeqRead | Workload::RandRead => {
            let file = if a.workload == Workload::SeqWrite {
                server.create_empty(&mut c, &root, &a.file)?
            } else {
                let fh = server.lookup(&mut c, &root, &a.file)?.ok_or_else(|| format!("{}: no such file (run seq-write first)", a.file))?;
                let have = server.size(&mut c, &fh)?;
                if have < a.size {
                    return Err(format!("{} holds {have} bytes, fewer than --size {}", a.file, a.size));
                }
                fh
            };
            let ctx = nfs::Ctx { file, ..empty() };
            let kind = match a.workload {
                Workload::SeqWrite => Kind::SeqWrite,
                Workload::SeqRead => Kind::SeqRead,
                Workload::RandRead => Kind::RandRead,
                _ => Kind::RandWrite,
            };
            let t0 = Instant::now();
            let done = server.run(a.conns, a.qd, &src(kind), &ctx, &pattern)?;
            if matches!(a.workload, Workload::SeqWrite | Workload::RandWrite) {
                server.commit(&mut c, &ctx.file)?;
            }
            Ok(data_row(name, done, t0.elapsed().as_secs_f64()))
        }
        Workload::Meta => {
            if server.lookup(&mut c, &root, META_DIR)?.is_some() {
                return Err(format!("{META_DIR} exists in the export: run cleanup first"));
            }
            let dir = server.mkdir(&mut c, &root, META_DIR)?;
            let ctx = nfs::Ctx { dir, handles: (0..a.files).map(|_| Mutex::new(None)).collect(), ..empty() };
            let mut t = [0.0; 3];
            for (k, kind) in [Kind::Create, Kind::Getattr, Kind::Remove].into_iter().enumerate() {
                let t0 = Instant::now();
                let done = server.run(a.conns, a.qd, &src(kind), &ctx, &pattern)?;
                t[k] = t0.elapsed().as_secs_f64();
                if done != u64::from(a.files) {
                    return Err(format!("{kind:?}: {done} of {} files", a.files));
                }
            }
            server.rmdir(&mut c, &root, META_DIR)?;
            Ok(meta_row(t))
        }
        Workload::Cleanup => {
            server.remove(&mut c, &root, &a.file)?;
            if let Some(dir) = server.lookup(&mut c, &root, META_DIR)? {
                for i in 0..a.files {
                    server.remove(&mut c, &dir, &workload::meta_name(i))?;
                }
                server.rmdir(&mut c, &root, META_DIR)?;
            }
            Ok("{\"workload\":\"cleanup\"}".into())
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn run_local(
    a: &Args,
    dir: &std::path::Path,
    src: &dyn Fn(Kind) -> Source,
    pattern: &Pattern,
    name: &str,
    data_row: &dyn Fn(&str, u64, f64) -> String,
    meta_row: &dyn Fn([f64; 3]) -> String,
) -> Result<String, String> {
    let l = local::Local { file: dir.join(&a.file), dir: dir.join(META_DIR), uncached: a.uncached };
    let threads = a.conns * a.qd;
    match a.workload {
        Workload::SeqWrite | Workload::RandWrite | Workload::SeqRead | Workload::RandRead => {
            if a.workload != Workload::SeqWrite && local::size(&l.file)? < a.size {
                return Err(format!("{} holds fewer than --size {} bytes", l.file.display(), a.size));
            }
            let kind = match a.workload {
                Workload::SeqWrite => Kind::SeqWrite,
                Workload::SeqRead => Kind::SeqRead,
                Workload::RandRead => Kind::RandRead,
                _ => Kind::RandWrite,
            };
            let t0 = Instant::now();
            let direct = a.uncached && matches!(a.workload, Workload::SeqRead | Workload::RandRead);
            let f = l.open(a.workload == Workload::SeqWrite, direct)?;
            let done = l.run(threads, &src(kind), Some(&f), pattern)?;
            if matches!(a.workload, Workload::SeqWrite | Workload::RandWrite) {
                f.sync_all().map_err(|e| format!("fsync {}: {e}", l.file.display()))?;
            }
            Ok(data_row(name, done, t0.elapsed().as_secs_f64()))
        }
        Workload::Meta => {
            std::fs::create_dir(&l.dir).map_err(|e| format!("{}: {e} (run cleanup first)", l.dir.display()))?;
            let mut t = [0.0; 3];
            for (k, kind) in [Kind::Create, Kind::Getattr, Kind::Remove].into_iter().enumerate() {
                let t0 = Instant::now();
                l.run(threads, &src(kind), None, pattern)?;
                t[k] = t0.elapsed().as_secs_f64();
            }
            std::fs::remove_dir(&l.dir).map_err(|e| format!("{}: {e}", l.dir.display()))?;
            Ok(meta_row(t))
        }
        Workload::Cleanup => {
            let _ = std::fs::remove_file(&l.file);
            let _ = std::fs::remove_dir_all(&l.dir);
            Ok("{\"workload\":\"cleanup\"}".into())
        }
    }
}
