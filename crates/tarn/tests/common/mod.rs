//! Shared harness for the integration tests that drive the real `tarn`
//! binary: a private daemon per test, sparse file vdevs, pools mounted
//! through FUSE under the test's own temporary directory, and cleanup that
//! leaves no mount and no process behind even when the test fails.
//!
//! Invariants:
//! - Every path a test touches lives under `Harness::dir`; nothing is
//!   written elsewhere.
//! - Every CLI call has a time limit, and a watchdog kills the daemon when
//!   the whole test overruns: the kernel then aborts the FUSE connection,
//!   so a hung request becomes ENOTCONN instead of a stuck CI run.
//! - `Drop` unmounts (falling back to a lazy unmount) before it stops the
//!   daemon, and prints the daemon's log when the test is panicking.
//!
//! Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use rand::RngCore;
use rand_chacha::ChaCha8Rng;

pub mod needles;
pub mod streams;
pub mod trees;

/// The `tarn` binary built for this test run.
pub const TARN: &str = env!("CARGO_BIN_EXE_tarn");

/// Size of each sparse file vdev unless a test asks otherwise.
pub const VDEV_SIZE_BYTES: u64 = 256 << 20;

/// Longest a single CLI call may take.
const CLI_TIMEOUT: Duration = Duration::from_secs(180);

/// Longest a mount may take to appear or disappear.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);

/// Default time limit of a whole test (override with `TARN_TEST_TIMEOUT_S`).
const TEST_TIMEOUT_S_DEFAULT: u64 = 900;

/// A daemon of our own, with its state, socket, vdevs and mounts in one
/// temporary directory.
pub struct Harness {
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    log_path: PathBuf,
    daemon: Option<Child>,
    watchdog_stop: Option<mpsc::Sender<()>>,
    // Dropped last: removes the directory after everything is unmounted.
    _tmp: tempfile::TempDir,
}

impl Harness {
    /// Start `tarn daemon` and wait until its socket accepts connections.
    pub fn start() -> Harness {
        Harness::start_with_config(None)
    }

    /// Like [`Harness::start`], with `config` (TOML) as the daemon's
    /// `--config` file; `config` may name `{dir}`, the harness directory.
    pub fn start_with_config(config: Option<&dyn Fn(&Path) -> String>) -> Harness {
        let tmp = tempfile::Builder::new()
            .prefix("tarn-it-")
            .tempdir()
            .expect("create temp dir");
        let dir = tmp.path().canonicalize().expect("canonical temp dir");
        let state_dir = dir.join("state");
        let socket = dir.join("s");
        let log_path = dir.join("daemon.log");
        fs::create_dir_all(&state_dir).expect("create state dir");
        let log = File::create(&log_path).expect("create daemon log");
        let mut command = Command::new(TARN);
        command
            .arg("daemon")
            .arg("--state-dir")
            .arg(&state_dir)
            .arg("--socket")
            .arg(&socket);
        if let Some(config) = config {
            let path = dir.join("tarn.toml");
            fs::write(&path, config(&dir)).expect("write daemon config");
            command.arg("--config").arg(&path);
        }
        let daemon = command
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {TARN} daemon: {e}"));
        let pid = daemon.id() as libc::pid_t;
        let mut harness = Harness {
            dir,
            socket,
            state_dir,
            log_path,
            daemon: Some(daemon),
            watchdog_stop: None,
            _tmp: tmp,
        };
        harness.watchdog_stop = Some(start_watchdog(pid));
        harness.wait_for_socket();
        harness
    }

    fn wait_for_socket(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Some(status) = self
                .daemon
                .as_mut()
                .and_then(|d| d.try_wait().ok().flatten())
            {
                panic!(
                    "tarn daemon exited with {status} before listening:\n{}",
                    self.daemon_log()
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "tarn daemon socket {} did not appear in 30 s:\n{}",
                    self.socket.display(),
                    self.daemon_log()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Run `tarn --socket S ARGS...` with a time limit.
    pub fn tarn<S: AsRef<OsStr>>(&self, args: &[S]) -> Output {
        let mut command = Command::new(TARN);
        command.arg("--socket").arg(&self.socket);
        command.env("TARN_SOCKET", &self.socket);
        for arg in args {
            command.arg(arg.as_ref());
        }
        run_with_timeout(command, CLI_TIMEOUT)
    }

    /// As [`Harness::tarn`], with `input` on its stdin (keys, passwords).
    pub fn tarn_input<S: AsRef<OsStr>>(&self, args: &[S], input: &[u8]) -> Output {
        let mut command = Command::new(TARN);
        command.arg("--socket").arg(&self.socket);
        command.env("TARN_SOCKET", &self.socket);
        for arg in args {
            command.arg(arg.as_ref());
        }
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().unwrap_or_else(|e| panic!("spawn tarn {}: {e}", show_args(args)));
        {
            let mut stdin = child.stdin.take().expect("stdin");
            let _ = stdin.write_all(input);
        }
        let pid = child.id() as libc::pid_t;
        let (sender, receiver) = mpsc::channel();
        thread::spawn(move || {
            let _ = sender.send(child.wait_with_output());
        });
        match receiver.recv_timeout(CLI_TIMEOUT) {
            Ok(result) => result.expect("wait for tarn"),
            Err(_) => {
                // SAFETY: the child is not reaped until the waiting thread returns.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                panic!("tarn {} did not finish", show_args(args));
            }
        }
    }

    /// Run the CLI and insist on exit 0; returns stdout.
    pub fn tarn_ok<S: AsRef<OsStr>>(&self, args: &[S]) -> String {
        let out = self.tarn(args);
        if !out.status.success() {
            panic!(
                "tarn {} failed with {}:\nstdout: {}\nstderr: {}\ndaemon log tail:\n{}",
                show_args(args),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                tail(&self.daemon_log(), 40)
            );
        }
        assert_no_panic(&out, &show_args(args));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Create `count` sparse files of `size_bytes` in `dir/<subdir>`.
    pub fn vdev_files(&self, subdir: &str, count: usize, size_bytes: u64) -> Vec<PathBuf> {
        let vdev_dir = self.dir.join(subdir);
        fs::create_dir_all(&vdev_dir).expect("create vdev dir");
        (0..count)
            .map(|index| {
                let path = vdev_dir.join(format!("d{index}"));
                let file = File::create(&path).expect("create vdev file");
                file.set_len(size_bytes).expect("size vdev file");
                path
            })
            .collect()
    }

    /// `tarn pool create -m <dir>/mnt-<pool> POOL SPEC...`; waits for the
    /// mount and returns its path. Strings in `spec` that name files are
    /// passed as they are (use `path_str`).
    pub fn create_pool(&self, pool: &str, spec: &[String]) -> PathBuf {
        let mountpoint = self.mountpoint(pool);
        let mut args: Vec<String> = vec![
            "pool".into(),
            "create".into(),
            "-m".into(),
            path_str(&mountpoint),
            pool.into(),
        ];
        args.extend(spec.iter().cloned());
        self.tarn_ok(&args);
        wait_mounted(&mountpoint);
        mountpoint
    }

    /// Where `create_pool` mounts `pool`.
    pub fn mountpoint(&self, pool: &str) -> PathBuf {
        self.dir.join(format!("mnt-{pool}"))
    }

    pub fn export(&self, pool: &str) {
        self.tarn_ok(&["pool", "export", pool]);
        wait_unmounted(&self.mountpoint(pool));
    }

    /// `tarn pool import -d DIR POOL`, then wait for the mount.
    pub fn import(&self, pool: &str, device_dir: &Path) -> PathBuf {
        self.tarn_ok(&["pool", "import", "-d", &path_str(device_dir), pool]);
        let mountpoint = self.mountpoint(pool);
        wait_mounted(&mountpoint);
        mountpoint
    }

    /// `tarn pool status -j POOL`, parsed.
    pub fn status_json(&self, pool: &str) -> serde_json::Value {
        let out = self.tarn_ok(&["pool", "status", "-j", pool]);
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("pool status -j is not JSON ({e}):\n{out}"))
    }

    /// `pool status -j POOL`'s object for the pool.
    pub fn pool_json(&self, pool: &str) -> serde_json::Value {
        self.status_json(pool)["pools"][pool].clone()
    }

    /// Polls `pool status -j` until `pred` holds (panics after `limit`).
    pub fn wait_status(
        &self,
        pool: &str,
        limit: Duration,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + limit;
        loop {
            let status = self.pool_json(pool);
            if pred(&status) {
                return status;
            }
            if Instant::now() > deadline {
                panic!(
                    "{what}: not reached in {} s; last status:\n{status:#}\ndaemon log:\n{}",
                    limit.as_secs(),
                    tail(&self.daemon_log(), 60)
                );
            }
            thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn daemon_log(&self) -> String {
        fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The running daemon's process id.
    pub fn daemon_pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(Child::id)
    }

    /// Whether the daemon process is still running.
    pub fn daemon_alive(&mut self) -> bool {
        match self.daemon.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    fn cleanup(&mut self) {
        for mountpoint in mounts_under(&self.dir) {
            unmount(&mountpoint);
        }
        if let Some(mut child) = self.daemon.take() {
            let pid = child.id() as libc::pid_t;
            // SAFETY: pid is our own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(stop) = self.watchdog_stop.take() {
            let _ = stop.send(());
        }
        // The daemon's exit aborts its FUSE connections; clear anything left.
        for mountpoint in mounts_under(&self.dir) {
            unmount(&mountpoint);
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let panicking = thread::panicking();
        self.cleanup();
        if panicking {
            eprintln!(
                "---- tarn daemon log (tail) ----\n{}",
                tail(&self.daemon_log(), 200)
            );
        }
    }
}

/// Kill the daemon if the test runs past its time limit, so that hung FUSE
/// requests fail and the test reports instead of hanging CI.
fn start_watchdog(pid: libc::pid_t) -> mpsc::Sender<()> {
    let limit_s = std::env::var("TARN_TEST_TIMEOUT_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(TEST_TIMEOUT_S_DEFAULT);
    let (stop, stopped) = mpsc::channel::<()>();
    thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) =
            stopped.recv_timeout(Duration::from_secs(limit_s))
        {
            eprintln!("tarn test watchdog: {limit_s} s passed; killing daemon {pid}");
            // SAFETY: the harness has not reaped the child (it would have stopped us first).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    stop
}

pub fn run_with_timeout(mut command: Command, limit: Duration) -> Output {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let description = format!("{command:?}");
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {description}: {e}"));
    let pid = child.id() as libc::pid_t;
    let (sender, receiver) = mpsc::channel();
    thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    match receiver.recv_timeout(limit) {
        Ok(result) => result.unwrap_or_else(|e| panic!("wait for {description}: {e}")),
        Err(_) => {
            // SAFETY: the child is not reaped until the waiting thread returns.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let out = receiver.recv().ok().and_then(|r| r.ok());
            panic!(
                "{description} did not finish in {} s; stderr: {}",
                limit.as_secs(),
                out.map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                    .unwrap_or_default()
            );
        }
    }
}

pub fn show_args<S: AsRef<OsStr>>(args: &[S]) -> String {
    args.iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn path_str(path: &Path) -> String {
    path.to_str().expect("test paths are UTF-8").to_owned()
}

pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A CLI run must never show a Rust panic, whatever its exit status.
pub fn assert_no_panic(out: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stderr.contains("panicked")
            && !stdout.contains("panicked")
            && !stderr.contains("RUST_BACKTRACE"),
        "tarn {what} panicked:\n{stderr}"
    );
}

/// The error contract: exit 1 with exactly one line on stderr starting
/// `tarn: `, or exit 2 (usage) with something on stderr; never a panic.
pub fn assert_clean_failure(out: &Output, what: &str) {
    assert_no_panic(out, what);
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(1) => {
            let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
            assert!(
                lines.len() == 1 && lines[0].starts_with("tarn: "),
                "tarn {what}: exit 1 must come with one line starting 'tarn: ' on stderr, got:\n{stderr}"
            );
        }
        Some(2) => assert!(
            !stderr.trim().is_empty(),
            "tarn {what}: exit 2 with an empty stderr"
        ),
        other => panic!(
            "tarn {what}: expected exit 1 or 2, got {other:?}\nstdout: {}\nstderr: {stderr}",
            String::from_utf8_lossy(&out.stdout)
        ),
    }
}

/// Mount points listed in /proc/self/mountinfo at or below `dir`, deepest first.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = info
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape_mountinfo(field)))
        .filter(|mountpoint| mountpoint.starts_with(dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

/// How many mounts of any kind sit exactly at `path`.
pub fn mounts_at(path: &Path) -> usize {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|field| Path::new(&unescape_mountinfo(field)) == path)
        .count()
}

/// A tmpfs mounted for a reference run, unmounted (lazily) when dropped,
/// even when the test fails.
pub struct TmpfsMount(PathBuf);

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// `mount -t tmpfs -o size=SIZE,mode=0755 NAME DIR` (DIR created first).
pub fn mount_tmpfs(dir: &Path, name: &str, size: &str) -> TmpfsMount {
    fs::create_dir_all(dir).unwrap();
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755"), name])
        .arg(dir)
        .status()
        .expect("run mount");
    assert!(status.success(), "mount -t tmpfs failed (the tests run as root)");
    TmpfsMount(dir.to_path_buf())
}

/// The file system type of the mount at exactly `path`, if any.
pub fn mount_type(path: &Path) -> Option<String> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let mountpoint = PathBuf::from(unescape_mountinfo(fields.get(4)?));
        if mountpoint != path {
            return None;
        }
        let separator = fields.iter().position(|f| *f == "-")?;
        fields.get(separator + 1).map(|s| s.to_string())
    })
}

fn unescape_mountinfo(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// Wait until a FUSE file system is mounted at `path`.
pub fn wait_mounted(path: &Path) {
    let deadline = Instant::now() + MOUNT_TIMEOUT;
    loop {
        if mount_type(path).is_some_and(|t| t.starts_with("fuse")) {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "{} was not mounted (FUSE) within {} s",
                path.display(),
                MOUNT_TIMEOUT.as_secs()
            );
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Wait until nothing is mounted at `path`.
pub fn wait_unmounted(path: &Path) {
    let deadline = Instant::now() + MOUNT_TIMEOUT;
    while mount_type(path).is_some() {
        if Instant::now() > deadline {
            panic!(
                "{} is still mounted {} s after export",
                path.display(),
                MOUNT_TIMEOUT.as_secs()
            );
        }
        thread::sleep(Duration::from_millis(50));
    }
}

fn unmount(path: &Path) {
    let quiet = |args: &[&OsStr]| {
        Command::new("umount")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if !quiet(&[path.as_os_str()]) {
        quiet(&[OsStr::new("-l"), path.as_os_str()]);
    }
}

// ---------------------------------------------------------------------------
// Seeds and counts for randomized tests: `tarn_testkit::seeded!(count)`
// (the one TARN_SEED/TARN_COUNT parser of the workspace).

#[allow(unused_imports)]
pub use tarn_testkit::Seeded;

// ---------------------------------------------------------------------------
// pool status -j: a tolerant reader of per-device error counters.

/// Error counters of one device, as `pool status -j` reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    pub name: String,
    pub state: String,
    pub read_errors: u64,
    pub write_errors: u64,
    pub checksum_errors: u64,
}

/// Every object in `json` that carries `state`, `read_errors`,
/// `write_errors` and `checksum_errors`, wherever it is nested (pool root,
/// top-level vdevs and leaves alike). `name` is the object's `name` or
/// `path` field, else the key it was found under.
pub fn device_counters(json: &serde_json::Value) -> Vec<DeviceCounters> {
    fn number(value: &serde_json::Value) -> Option<u64> {
        value
            .as_u64()
            .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
    }
    fn walk(value: &serde_json::Value, key: &str, found: &mut Vec<DeviceCounters>) {
        match value {
            serde_json::Value::Object(map) => {
                let read = map.get("read_errors").and_then(number);
                let write = map.get("write_errors").and_then(number);
                let checksum = map.get("checksum_errors").and_then(number);
                if let (Some(read_errors), Some(write_errors), Some(checksum_errors)) =
                    (read, write, checksum)
                {
                    let name = ["path", "name"]
                        .iter()
                        .find_map(|k| map.get(*k).and_then(|v| v.as_str()))
                        .unwrap_or(key)
                        .to_owned();
                    let state = map
                        .get("state")
                        .and_then(|v| v.as_str())
                        .unwrap_or("")
                        .to_owned();
                    found.push(DeviceCounters {
                        name,
                        state,
                        read_errors,
                        write_errors,
                        checksum_errors,
                    });
                }
                for (child_key, child) in map {
                    walk(child, child_key, found);
                }
            }
            serde_json::Value::Array(items) => {
                for item in items {
                    walk(item, key, found);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk(json, "", &mut found);
    found
}

/// Counters of the leaf devices whose name or path ends with one of
/// `device_paths`' file names.
pub fn leaf_counters(json: &serde_json::Value, device_paths: &[PathBuf]) -> Vec<DeviceCounters> {
    device_counters(json)
        .into_iter()
        .filter(|c| {
            device_paths
                .iter()
                .any(|p| Path::new(&c.name).file_name() == p.file_name())
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Files: random content, hashing, tree walks.

pub fn random_bytes(rng: &mut ChaCha8Rng, len: usize) -> Vec<u8> {
    let mut data = vec![0u8; len];
    rng.fill_bytes(&mut data);
    data
}

pub fn write_file(path: &Path, data: &[u8]) {
    let mut file = File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    file.write_all(data)
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    file.sync_all()
        .unwrap_or_else(|e| panic!("fsync {}: {e}", path.display()));
}

pub fn hash_file(path: &Path) -> u64 {
    let mut file = File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    hasher.digest()
}

/// Every path below `root` (relative, sorted), not following symlinks.
pub fn walk(root: &Path) -> Vec<PathBuf> {
    fn go(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
            .map(|e| e.expect("dir entry").path())
            .collect();
        entries.sort();
        for path in entries {
            out.push(path.strip_prefix(root).expect("below root").to_path_buf());
            if fs::symlink_metadata(&path).expect("lstat").is_dir() {
                go(root, &path, out);
            }
        }
    }
    let mut out = Vec::new();
    go(root, root, &mut out);
    out
}

// ---------------------------------------------------------------------------
// Device images: the regions tests may damage.

/// Where a device's data region starts: everything before is labels and
/// boot area (docs/on-disk-format.md).
pub const DATA_REGION_START: u64 = 4 << 20;

/// The data region of a device of `size` bytes: from 4 MiB up to 512 KiB
/// before the end, the end rounded down to 256 KiB.
pub fn data_region(size: u64) -> (u64, u64) {
    let end = (size - (512 << 10)) & !((256 << 10) - 1);
    (DATA_REGION_START, end)
}

/// Offsets (4 KiB aligned, within the data region) of the 4 KiB pages of a
/// device file that are not all zeros, i.e. where something was written.
pub fn written_pages(path: &Path) -> Vec<u64> {
    const PAGE: usize = 4096;
    let file = File::open(path).expect("open device image");
    let (start, end) = data_region(file.metadata().expect("stat").len());
    let mut pages = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut offset = start;
    while offset < end {
        let len = ((end - offset) as usize).min(buf.len());
        file.read_exact_at(&mut buf[..len], offset)
            .expect("read device image");
        for (index, page) in buf[..len].chunks(PAGE).enumerate() {
            if page.iter().any(|b| *b != 0) {
                pages.push(offset + (index * PAGE) as u64);
            }
        }
        offset += len as u64;
    }
    pages
}

/// The longest run of consecutive 4 KiB pages in `pages` (sorted, as
/// [`written_pages`] gives them): (first page's offset, pages).
pub fn longest_run(pages: &[u64]) -> (u64, usize) {
    let (mut best, mut start, mut len) = ((0, 0), 0, 0);
    for (i, &p) in pages.iter().enumerate() {
        if i > 0 && pages[i - 1] + 4096 == p {
            len += 1;
        } else {
            start = p;
            len = 1;
        }
        if len > best.1 {
            best = (start, len);
        }
    }
    best
}

pub fn open_rw(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open device image read-write")
}

/// Copy a (sparse) file, keeping holes: `cp --sparse=always`.
pub fn copy_sparse(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("--sparse=always")
        .arg(from)
        .arg(to)
        .status()
        .expect("run cp");
    assert!(
        status.success(),
        "cp {} {} failed",
        from.display(),
        to.display()
    );
}

// ---------------------------------------------------------------------------
// Devices that vanish: a directory served through Debian's bindfs (FUSE).

/// `bindfs -f SRC MNT`: files under `mnt` live in `src`. Killing the bindfs
/// process makes every I/O to a file under `mnt` fail (ENOTCONN), the way a
/// pulled disk does; `restart` serves the same files again.
pub struct BindFs {
    pub src: PathBuf,
    pub mnt: PathBuf,
    child: Option<Child>,
}

impl BindFs {
    pub fn start(src: &Path, mnt: &Path) -> BindFs {
        fs::create_dir_all(src).expect("create bindfs source");
        fs::create_dir_all(mnt).expect("create bindfs mountpoint");
        let mut b = BindFs {
            src: src.to_path_buf(),
            mnt: mnt.to_path_buf(),
            child: None,
        };
        b.restart();
        b
    }

    pub fn restart(&mut self) {
        self.kill();
        let child = Command::new("bindfs")
            .arg("-f")
            .arg("--no-allow-other")
            .arg(&self.src)
            .arg(&self.mnt)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run bindfs (apt install bindfs): {e}"));
        self.child = Some(child);
        let deadline = Instant::now() + MOUNT_TIMEOUT;
        while mount_type(&self.mnt).is_none() {
            assert!(
                Instant::now() < deadline,
                "bindfs did not mount {}",
                self.mnt.display()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The backing process dies: the mount stays, every access fails.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if mount_type(&self.mnt).is_some() {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }

    /// Kill the process but leave the dead mount in place (so I/O gets
    /// ENOTCONN instead of landing in the directory underneath).
    pub fn pull(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for BindFs {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------
// A daemon that dies.

impl Harness {
    /// `kill -9` the daemon (no export, no sync: its FUSE mounts die with
    /// it), clear the dead mounts, and start a new daemon on the same
    /// state directory and socket; it re-imports the pools it had.
    pub fn kill_and_restart(&mut self) {
        self.kill_daemon();
        for mountpoint in mounts_under(&self.dir) {
            unmount(&mountpoint);
        }
        self.restart_daemon();
    }

    /// `kill -9` the daemon; its mounts stay behind, dead.
    pub fn kill_daemon(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(stop) = self.watchdog_stop.take() {
            let _ = stop.send(());
        }
    }

    /// Stop the daemon cleanly (SIGTERM: it exports its pools and
    /// unmounts) and wait for it to exit.
    pub fn stop_daemon(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            // SAFETY: pid is our own child, not yet reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(30);
            while matches!(child.try_wait(), Ok(None)) {
                assert!(Instant::now() < deadline, "daemon did not stop on SIGTERM:\n{}", tail(&self.daemon_log(), 40));
                thread::sleep(Duration::from_millis(50));
            }
        }
        if let Some(stop) = self.watchdog_stop.take() {
            let _ = stop.send(());
        }
    }

    /// Start a new daemon on the same state directory and socket (and
    /// the same `--config`, if the harness was started with one).
    pub fn restart_daemon(&mut self) {
        let log = fs::OpenOptions::new().append(true).open(&self.log_path).expect("open daemon log");
        let mut command = Command::new(TARN);
        command.arg("daemon").arg("--state-dir").arg(&self.state_dir).arg("--socket").arg(&self.socket);
        let config = self.dir.join("tarn.toml");
        if config.exists() {
            command.arg("--config").arg(&config);
        }
        let daemon = command
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot restart {TARN} daemon: {e}"));
        self.watchdog_stop = Some(start_watchdog(daemon.id() as libc::pid_t));
        self.daemon = Some(daemon);
        self.wait_for_socket();
    }
}

/// A refused command: exit status `code`, one clean error line (see
/// `assert_clean_failure`); returns stderr.
pub fn refused(harness: &Harness, args: &[&str], code: i32) -> String {
    let out = harness.tarn(args);
    assert_clean_failure(&out, &args.join(" "));
    assert_eq!(out.status.code(), Some(code), "tarn {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `pool status` text: the NAME rows (name and state), in order.
pub fn status_rows(harness: &Harness, pool: &str) -> Vec<String> {
    let text = harness.tarn_ok(&["pool", "status", pool]);
    let mut rows = Vec::new();
    let mut in_config = false;
    for line in text.lines() {
        if line.trim_start().starts_with("NAME") {
            in_config = true;
            continue;
        }
        if in_config {
            if line.trim().is_empty() || line.starts_with("errors:") {
                break;
            }
            rows.push(line.split_whitespace().take(2).collect::<Vec<_>>().join(" "));
        }
    }
    rows
}

/// `pool list -p`'s size of `pool`, in bytes.
pub fn pool_size(harness: &Harness, pool: &str) -> u64 {
    harness.tarn_ok(&["pool", "list", "-H", "-p", "-o", "size", pool]).trim().parse().expect("size")
}
