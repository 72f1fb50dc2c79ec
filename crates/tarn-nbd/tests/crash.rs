//! Issue 13, test 4: power cuts under a volume written by a real NBD
//! client. A pool (a mirror of two crash-recorded devices, txg timeout an
//! hour: what is durable is what the intent log made so) holds a volume
//! of 4 KiB blocks served by [`tarn_nbd::NbdServer`]; qemu-io writes it in
//! rounds, each round one qemu-io process writing a few random block
//! ranges with `write -P <round>` (now and then `write -z`, with or
//! without `-u`). qemu-io runs with `-t writeback`: by default it opens
//! images write-through, which sends every write with FUA and would make
//! the FLUSH under test redundant. A round ends in one of four ways:
//!
//! - `flush`: once qemu-io has exited successfully the FLUSH was
//!   answered, so the recorder's event count then is the round's ack
//!   point: every write of the round is durable in any cut at or after
//!   it; and every earlier write not yet acknowledged too, as the server
//!   advertises multi-conn (a FLUSH on any connection covers the writes
//!   completed on all of them);
//! - every write with FUA (`write -f`), qemu-io fed one command at a time
//!   and killed (SIGKILL) once the last was answered: no FLUSH, and each
//!   write is durable from the ack point taken then;
//! - no flush, qemu-io killed the same way (one round in the middle, the
//!   last round, and some others): the client vanished; its writes may or
//!   may not be durable until the next round's FLUSH covers them;
//! - no flush command, qemu-io exits normally: it flushes when it closes
//!   the image (qemu 10 does, even with `-t unsafe`), but the test does
//!   not count on it: maybe durable, as above.
//!
//! Between rounds the pool sometimes syncs a txg. Power is then cut at
//! seeded points between the first ack and the end, in the three
//! [`CutMode`]s; each image is imported (forced), the volume opened
//! (`Volume::open` replays its log), and every block must hold one whole
//! version: the newest one acknowledged before the cut, or one written
//! after that ack — never an older one, never a mix, never zeros where
//! an acknowledged write put data — and the pool checker finds nothing.
//!
//! The rounds (and so the cuts) repeat exactly from the seed: qemu-io
//! sends its requests one at a time and nothing syncs by timer.

mod support;

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use rand::Rng;
use support::ok;
use tarn_dev::{CrashRecorder, CutMode, Device};
use tarn_nbd::{Export, NbdServer};
use tarn_obj::{ImportOptions, ObjPool, Tunables};
use tarn_share::nfs::HostList;
use tarn_vol::{SyncMode, VolOptions, Volume};

const BS: u64 = 4096;
const BLOCKS: u64 = 512;
const SIZE: u64 = BLOCKS * BS;
const DEV_SIZE: u64 = 64 << 20;
/// Each round writes its own byte (the round number), so fewer than 256.
const ROUNDS: u32 = 48;
/// Ack of a write no FLUSH (nor FUA) has covered yet.
const NEVER: u64 = u64::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Writes, then `flush`; qemu-io exits.
    Flush,
    /// FUA writes; qemu-io killed.
    Fua,
    /// Writes; qemu-io killed.
    Killed,
    /// Writes; qemu-io exits (and may flush as it closes).
    Closed,
}

/// One version of a block: the byte it holds throughout (0: zeros, the
/// state before any write or after a `write -z`), the round that wrote
/// it, and the event count from which it is durable ([`NEVER`]: not yet).
#[derive(Clone, Copy, Debug)]
struct Version {
    value: u8,
    #[allow(dead_code)] // in failure messages
    round: u32,
    ack: u64,
}

/// Runs qemu-io on `uri` with `commands` as `-c` arguments, asserting
/// that it exited successfully and that every I/O command reported its
/// ops (nothing failed).
fn qemu_io(uri: &str, commands: &[String]) {
    let mut args = vec!["-f", "raw", "-t", "writeback", uri];
    for c in commands {
        args.push("-c");
        args.push(c);
    }
    let out = ok("qemu-io", &args);
    assert!(!out.contains("failed") && !out.contains("error"), "qemu-io {commands:?}:\n{out}");
    let ios = commands.iter().filter(|c| *c != "flush").count();
    assert_eq!(out.matches(" ops; ").count(), ios, "qemu-io {commands:?}:\n{out}");
}

/// qemu-io reading its commands from a pipe, each sent once the one
/// before was answered; [`Interactive::kill`] ends it with SIGKILL: the
/// client vanishes without a FLUSH or a close.
struct Interactive {
    child: Child,
    stdin: ChildStdin,
    /// What it printed (stdout and stderr), in pieces.
    out: mpsc::Receiver<Vec<u8>>,
    text: String,
    answered: usize,
}

impl Interactive {
    fn start(uri: &str) -> Interactive {
        let mut child = Command::new("qemu-io")
            .args(["-f", "raw", "-t", "writeback", uri])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("qemu-io: {e} (install qemu-utils)"));
        let (tx, out) = mpsc::channel();
        let pipes: [Box<dyn Read + Send>; 2] = [Box::new(child.stdout.take().unwrap()), Box::new(child.stderr.take().unwrap())];
        for mut pipe in pipes {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = pipe.read(&mut buf) {
                    if tx.send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            });
        }
        let stdin = child.stdin.take().unwrap();
        Interactive { child, stdin, out, text: String::new(), answered: 0 }
    }

    /// Sends one I/O command and waits for its answer.
    fn run(&mut self, command: &str) {
        writeln!(self.stdin, "{command}").and_then(|()| self.stdin.flush()).unwrap_or_else(|e| panic!("qemu-io stdin: {e}\n{}", self.text));
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.text.matches(" ops; ").count() <= self.answered {
            assert!(!self.text.contains("failed") && !self.text.contains("error"), "qemu-io {command:?}:\n{}", self.text);
            let left = deadline.saturating_duration_since(Instant::now());
            match self.out.recv_timeout(left) {
                Ok(piece) => self.text.push_str(&String::from_utf8_lossy(&piece)),
                Err(e) => panic!("qemu-io {command:?}: no answer ({e}):\n{}", self.text),
            }
        }
        assert!(!self.text.contains("failed") && !self.text.contains("error"), "qemu-io {command:?}:\n{}", self.text);
        self.answered += 1;
    }

    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

fn opts() -> VolOptions {
    VolOptions { size: SIZE, sync: SyncMode::Standard, readonly: false }
}

#[test]
fn flush_acknowledged_nbd_writes_survive_any_power_cut() {
    let seeded = tarn_testkit::seeded!(150);
    let mut rng = seeded.rng(13);
    let started = Instant::now();

    let rec = CrashRecorder::new();
    let devs: Vec<Arc<dyn Device>> = (0..2).map(|i| rec.device(&format!("c{i}"), DEV_SIZE) as Arc<dyn Device>).collect();
    let pool = support::pool(&devs);
    // Nothing reaches disk by timer: durability comes from the log.
    pool.set_tunables(Tunables { txg_timeout_ms: 3_600_000, ..Default::default() });
    let volume = support::volume(&pool, SIZE, BS as u32);
    let id = volume.objset().id();
    // The volume exists on disk before the first round (its creation is
    // not what this test is about).
    pool.sync().unwrap();
    let server = NbdServer::start("127.0.0.1:0".parse().unwrap(), HostList::everyone()).unwrap();
    server.set_exports(vec![Export { name: "tank/vol".into(), volume: volume.clone(), readonly: false, description: String::new() }]);
    let uri = format!("nbd://127.0.0.1:{}/tank/vol", server.local_addr().port());

    // history[b]: every version of block b, oldest first.
    let mut history: Vec<Vec<Version>> = vec![vec![Version { value: 0, round: 0, ack: 0 }]; BLOCKS as usize];
    let middle = rng.gen_range(4..ROUNDS / 2);
    let closed = rng.gen_range(ROUNDS / 2..ROUNDS - 1);
    let mut acks = Vec::new();
    let mut syncs = 0;
    let mut closing_flushes = 0;
    // Killed rounds during which the pool wrote to its devices anyway (not
    // for a FLUSH: a txg the pool started by itself, say; rare).
    let mut killed_commits = 0;
    let mut kinds = [0usize; 4];
    for round in 1..=ROUNDS {
        let kind = match rng.gen_range(0..20) {
            _ if round == 1 => Kind::Flush,
            _ if round == middle || round == ROUNDS => Kind::Killed,
            _ if round == closed => Kind::Closed,
            0..=2 => Kind::Fua,
            3..=5 => Kind::Killed,
            6 => Kind::Closed,
            _ => Kind::Flush,
        };
        kinds[kind as usize] += 1;
        let fua = if kind == Kind::Fua { " -f" } else { "" };
        let value = round as u8; // unique per round (ROUNDS < 256), never 0
        let mut commands = Vec::new();
        // (block, value) written this round, in order.
        let mut written: Vec<(u64, u8)> = Vec::new();
        for _ in 0..rng.gen_range(1..=6) {
            let b = rng.gen_range(0..BLOCKS);
            let n = rng.gen_range(1..=8u64).min(BLOCKS - b);
            let (off, len) = (b * BS, n * BS);
            let v = match rng.gen_range(0..10) {
                0 => {
                    commands.push(format!("write{fua} -z {off} {len}"));
                    0
                }
                1 => {
                    commands.push(format!("write{fua} -z -u {off} {len}"));
                    0
                }
                _ => {
                    commands.push(format!("write{fua} -P {value:#04x} {off} {len}"));
                    value
                }
            };
            written.extend((b..b + n).map(|k| (k, v)));
        }
        let before = rec.event_count();
        let ack = match kind {
            Kind::Flush | Kind::Closed => {
                if kind == Kind::Flush {
                    commands.push("flush".into());
                }
                qemu_io(&uri, &commands);
                // qemu-io has exited: the FLUSH was answered, so what it
                // made durable is in the events so far.
                let now = rec.event_count();
                if kind == Kind::Flush {
                    now
                } else {
                    // Nothing syncs by timer: device writes mean a log
                    // commit (qemu-io flushing as it closed).
                    closing_flushes += usize::from(now != before);
                    NEVER
                }
            }
            Kind::Fua | Kind::Killed => {
                let mut q = Interactive::start(&uri);
                for c in &commands {
                    q.run(c);
                }
                // Every write was answered (the FUA ones durable).
                let now = rec.event_count();
                q.kill();
                if kind == Kind::Fua {
                    now
                } else {
                    killed_commits += usize::from(now != before);
                    NEVER
                }
            }
        };
        if kind == Kind::Flush {
            // The FLUSH also covers every earlier round's completed writes
            // (multi-conn: a FLUSH on any connection commits them all).
            for h in history.iter_mut() {
                for v in h.iter_mut().filter(|v| v.ack == NEVER) {
                    v.ack = ack;
                }
            }
        }
        for (b, v) in written {
            history[b as usize].push(Version { value: v, round, ack });
        }
        if ack != NEVER {
            acks.push(ack);
        }
        if rng.gen_bool(0.2) {
            pool.sync().unwrap();
            syncs += 1;
        }
    }
    server.shutdown();
    drop(server);
    drop(volume);
    drop(pool);
    let end = rec.event_count();
    let first = acks[0];
    let written_at = started.elapsed();
    eprintln!(
        "{ROUNDS} rounds by qemu-io ({} flushed, {} all FUA then killed, {} killed without a flush ({killed_commits} of them with device writes nonetheless), {} closed without a flush command ({closing_flushes} of them flushed on close)), {syncs} txg syncs, {end} events (first ack at {first}), in {written_at:.1?}",
        kinds[Kind::Flush as usize],
        kinds[Kind::Fua as usize],
        kinds[Kind::Killed as usize],
        kinds[Kind::Closed as usize],
    );

    let mut per_mode = [0u64; 3];
    let mut newer_seen = 0u64;
    let mut buf = vec![0u8; BS as usize];
    for i in 0..seeded.count {
        let cut = rng.gen_range(first..=end);
        let mode = match i % 3 {
            0 => CutMode::DropUnflushed,
            1 => CutMode::TearLastWrite,
            _ => CutMode::RandomSubset(rng.gen()),
        };
        per_mode[(i % 3) as usize] += 1;
        let images: Vec<Arc<dyn Device>> = rec.image_at(cut, mode).into_iter().map(|d| d as Arc<dyn Device>).collect();
        let pool = ObjPool::import(images, ImportOptions { rewind: false, force: true, hostname: "test".into(), readonly: false })
            .unwrap_or_else(|e| panic!("cut {cut} ({mode:?}): import: {e}"));
        let os = pool.open_objset(id).unwrap_or_else(|e| panic!("cut {cut} ({mode:?}): open the object set: {e}"));
        let vol = Volume::open(pool.clone(), os, opts()).unwrap_or_else(|e| panic!("cut {cut} ({mode:?}): open the volume: {e}"));
        let mut newer = false;
        for (b, hist) in history.iter().enumerate() {
            vol.read(b as u64 * BS, &mut buf).unwrap_or_else(|e| panic!("cut {cut} ({mode:?}): read block {b}: {e}"));
            // The newest version acknowledged before the cut, or any later.
            let base = hist.iter().rposition(|v| v.ack <= cut).expect("the first version is acknowledged at 0");
            let acceptable = &hist[base..];
            let value = buf[0];
            let whole = buf.iter().all(|&x| x == value);
            let found = acceptable.iter().rposition(|v| v.value == value);
            assert!(
                whole && found.is_some(),
                "cut {cut} ({mode:?}): block {b} reads {} where one of these versions must be: {acceptable:?} (every version: {hist:?})",
                if whole { format!("{value:#04x} throughout") } else { format!("a mix of bytes ({:?}…)", &buf[..16]) },
            );
            newer |= found != Some(0) && acceptable[0].value != value;
        }
        newer_seen += u64::from(newer);
        let report = pool.check();
        assert!(report.ok(), "cut {cut} ({mode:?}): {report:?}");
    }
    eprintln!(
        "{} cuts in {first}..={end} ({} drop-unflushed, {} torn last write, {} random subset), {newer_seen} of them holding writes not yet acknowledged; {:.1?} in all",
        seeded.count,
        per_mode[0],
        per_mode[1],
        per_mode[2],
        started.elapsed(),
    );
}
