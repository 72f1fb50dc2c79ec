//! Snapshots end to end through the real binary (issue 4): `tarn snapshot`
//! taken while a seeded writer changes the mounted file system, then
//! `tarn rollback` to each snapshot, newest first, each compared with the
//! writer's model; `list -t snapshot`, `get` on snapshots, holds, ranges,
//! `debug check`; and bad input, which must fail with exit 1 and one line.
//!
//! Why the comparison is exact: every operation of the writer is one
//! atomic request to the file system (a file's new content is written to a
//! temporary name and renamed into place; appends and in-place writes stay
//! within one 4 KiB page, which the kernel sends as one FUSE request — a
//! longer write that starts or ends inside a page the page cache does not
//! hold is split there, and a snapshot may fall between the pieces;
//! truncate, chmod, unlink, mkdir (of a temporary directory renamed into
//! place), rmdir and rename are one request each), and the writer
//! publishes how many operations it has
//! started and how many it has finished (fsynced). A snapshot must then
//! equal the model after k operations for some k between the operations
//! finished before `tarn snapshot` was called and those started by the
//! time it returned. Temporary names are ignored in the comparison.
//!
//! Reproduce a failure: `TARN_SEED=<seed> TARN_COUNT=<ops> cargo nextest
//! run -p tarn --test snapshots` (the seed is printed).

mod common;

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use common::{assert_clean_failure, assert_no_panic, path_str, random_bytes, wait_mounted, write_file, Harness};

const POOL: &str = "tank";
const FS: &str = "tank/fs";
/// Names the writer uses on the way to an atomic rename (ignored when trees
/// are compared).
const TMP_PREFIX: &str = ".tmp-";
const MAX_FILE: u64 = 512 << 10;
/// Appends and in-place writes stay within one page (one FUSE request).
const PAGE: u64 = 4096;
const SNAPSHOTS: usize = 8;

fn pool_spec(harness: &Harness) -> Vec<String> {
    let devices = harness.vdev_files("vdevs", 2, common::VDEV_SIZE_BYTES);
    std::iter::once("mirror".to_string()).chain(devices.iter().map(|d| path_str(d))).collect()
}

// ---------------------------------------------------------------------------
// The model.

#[derive(Clone, Debug)]
enum Node {
    Dir { mode: u32 },
    File { data: Vec<u8>, mode: u32 },
}

/// Relative path ("d1/f3") → node.
type Tree = BTreeMap<String, Node>;

/// One entry of a tree's digest: what the comparison looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    path: String,
    kind: char,
    size: u64,
    hash: u64,
    mode: u32,
}

#[derive(Clone, Debug)]
enum Op {
    /// Write a temporary file, set its mode, rename it to `path`.
    Put { path: String, data: Vec<u8>, mode: u32 },
    Append { path: String, data: Vec<u8> },
    /// Overwrite in place at `offset` (at most the file's size).
    Patch { path: String, offset: u64, data: Vec<u8> },
    Truncate { path: String, len: u64 },
    Unlink { path: String },
    /// Make a temporary directory, set its mode, rename it to `path`.
    Mkdir { path: String, mode: u32 },
    Rmdir { path: String },
    Rename { from: String, to: String },
    Chmod { path: String, mode: u32 },
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

fn hash(data: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(data)
}

fn digest(tree: &Tree) -> Vec<Entry> {
    tree.iter()
        .map(|(path, node)| match node {
            Node::Dir { mode } => Entry { path: path.clone(), kind: 'd', size: 0, hash: 0, mode: *mode },
            Node::File { data, mode } => {
                Entry { path: path.clone(), kind: 'f', size: data.len() as u64, hash: hash(data), mode: *mode }
            }
        })
        .collect()
}

fn apply_model(tree: &mut Tree, op: &Op) {
    match op {
        Op::Put { path, data, mode } => {
            tree.insert(path.clone(), Node::File { data: data.clone(), mode: *mode });
        }
        Op::Append { path, data: more } => {
            if let Some(Node::File { data, .. }) = tree.get_mut(path) {
                data.extend_from_slice(more);
            }
        }
        Op::Patch { path, offset, data: patch } => {
            if let Some(Node::File { data, .. }) = tree.get_mut(path) {
                let start = *offset as usize;
                let end = start + patch.len();
                if data.len() < end {
                    data.resize(end, 0);
                }
                data[start..end].copy_from_slice(patch);
            }
        }
        Op::Truncate { path, len } => {
            if let Some(Node::File { data, .. }) = tree.get_mut(path) {
                data.resize(*len as usize, 0);
            }
        }
        Op::Unlink { path } | Op::Rmdir { path } => {
            tree.remove(path);
        }
        Op::Mkdir { path, mode } => {
            tree.insert(path.clone(), Node::Dir { mode: *mode });
        }
        Op::Rename { from, to } => {
            if let Some(node) = tree.remove(from) {
                tree.insert(to.clone(), node);
            }
        }
        Op::Chmod { path, mode: new } => match tree.get_mut(path) {
            Some(Node::File { mode, .. }) | Some(Node::Dir { mode }) => *mode = *new,
            None => {}
        },
    }
}

const FILE_MODES: [u32; 4] = [0o644, 0o600, 0o640, 0o664];
const DIR_MODES: [u32; 4] = [0o755, 0o700, 0o750, 0o775];

fn pick<'a, T>(rng: &mut ChaCha8Rng, items: &'a [T]) -> &'a T {
    &items[rng.gen_range(0..items.len())]
}

/// A valid next operation for `tree`.
fn next_op(rng: &mut ChaCha8Rng, tree: &Tree) -> Op {
    let files: Vec<(String, u64)> = tree
        .iter()
        .filter_map(|(p, n)| match n {
            Node::File { data, .. } => Some((p.clone(), data.len() as u64)),
            Node::Dir { .. } => None,
        })
        .collect();
    let mut dirs: Vec<String> = vec![String::new()];
    dirs.extend(tree.iter().filter(|(_, n)| matches!(n, Node::Dir { .. })).map(|(p, _)| p.clone()));
    let is_dir = |p: &str| matches!(tree.get(p), Some(Node::Dir { .. }));
    loop {
        let roll = rng.gen_range(0..100);
        match roll {
            0..=24 => {
                let path = join(pick(rng, &dirs[..]).as_str(), &format!("f{}", rng.gen_range(0..12)));
                if is_dir(&path) {
                    continue;
                }
                let len = match rng.gen_range(0..100) {
                    0..=69 => rng.gen_range(0..8 << 10),
                    70..=94 => rng.gen_range(8 << 10..128 << 10),
                    _ => rng.gen_range(128 << 10..400 << 10),
                };
                return Op::Put { path, data: random_bytes(rng, len), mode: *pick(rng, &FILE_MODES) };
            }
            25..=39 if !files.is_empty() => {
                let (path, size) = pick(rng, &files).clone();
                let len = rng.gen_range(1..=PAGE - size % PAGE);
                if size + len > MAX_FILE {
                    continue;
                }
                return Op::Append { path, data: random_bytes(rng, len as usize) };
            }
            40..=49 if !files.is_empty() => {
                let (path, size) = pick(rng, &files).clone();
                let offset = rng.gen_range(0..=size);
                let len = rng.gen_range(1..=PAGE - offset % PAGE);
                if offset + len > MAX_FILE {
                    continue;
                }
                return Op::Patch { path, offset, data: random_bytes(rng, len as usize) };
            }
            50..=59 if !files.is_empty() => {
                let (path, size) = pick(rng, &files).clone();
                let len = rng.gen_range(0..=(size * 2 + 4096).min(MAX_FILE));
                return Op::Truncate { path, len };
            }
            60..=67 if !files.is_empty() => return Op::Unlink { path: pick(rng, &files).0.clone() },
            68..=75 => {
                let parent = pick(rng, &dirs).clone();
                if parent.matches('/').count() >= 1 {
                    continue;
                }
                let path = join(&parent, &format!("d{}", rng.gen_range(0..6)));
                if tree.contains_key(&path) {
                    continue;
                }
                return Op::Mkdir { path, mode: *pick(rng, &DIR_MODES) };
            }
            76..=79 => {
                let empty: Vec<String> = dirs
                    .iter()
                    .filter(|d| !d.is_empty() && !tree.keys().any(|k| k.starts_with(&format!("{d}/"))))
                    .cloned()
                    .collect();
                if empty.is_empty() {
                    continue;
                }
                return Op::Rmdir { path: pick(rng, &empty).clone() };
            }
            80..=91 if !files.is_empty() => {
                let from = pick(rng, &files).0.clone();
                let to = join(pick(rng, &dirs[..]).as_str(), &format!("f{}", rng.gen_range(0..12)));
                if to == from || is_dir(&to) {
                    continue;
                }
                return Op::Rename { from, to };
            }
            92..=99 => {
                let paths: Vec<&String> = tree.keys().collect();
                if paths.is_empty() {
                    continue;
                }
                let path = (*pick(rng, &paths)).clone();
                let mode = if is_dir(&path) { *pick(rng, &DIR_MODES) } else { *pick(rng, &FILE_MODES) };
                return Op::Chmod { path, mode };
            }
            _ => continue,
        }
    }
}

/// `count` operations and the digest of the tree after each prefix:
/// `digests[k]` is the tree after the first k operations.
fn plan(rng: &mut ChaCha8Rng, count: usize) -> (Vec<Op>, Vec<Vec<Entry>>) {
    let mut tree = Tree::new();
    let mut ops = Vec::with_capacity(count);
    let mut digests = vec![digest(&tree)];
    for _ in 0..count {
        let op = next_op(rng, &tree);
        apply_model(&mut tree, &op);
        ops.push(op);
        digests.push(digest(&tree));
    }
    (ops, digests)
}

// ---------------------------------------------------------------------------
// The real file system.

fn sync_dir(dir: &Path) -> Result<(), String> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| format!("fsync {}: {e}", dir.display()))
}

fn apply_fs(root: &Path, index: usize, op: &Op) -> Result<(), String> {
    let at = |p: &str| root.join(p);
    let err = |what: &str, e: std::io::Error| format!("op {index} ({what}): {e}");
    match op {
        Op::Put { path, data, mode } => {
            let tmp = root.join(format!("{TMP_PREFIX}{index}"));
            let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(|e| err("create", e))?;
            file.write_all(data).map_err(|e| err("write", e))?;
            file.set_permissions(Permissions::from_mode(*mode)).map_err(|e| err("fchmod", e))?;
            file.sync_all().map_err(|e| err("fsync", e))?;
            fs::rename(&tmp, at(path)).map_err(|e| err("rename", e))?;
            sync_dir(root)
        }
        Op::Append { path, data } => {
            let mut file = OpenOptions::new().append(true).open(at(path)).map_err(|e| err("open", e))?;
            file.write_all(data).map_err(|e| err("append", e))?;
            file.sync_all().map_err(|e| err("fsync", e))
        }
        Op::Patch { path, offset, data } => {
            let file = OpenOptions::new().write(true).open(at(path)).map_err(|e| err("open", e))?;
            file.write_all_at(data, *offset).map_err(|e| err("pwrite", e))?;
            file.sync_all().map_err(|e| err("fsync", e))
        }
        Op::Truncate { path, len } => {
            let file = OpenOptions::new().write(true).open(at(path)).map_err(|e| err("open", e))?;
            file.set_len(*len).map_err(|e| err("truncate", e))?;
            file.sync_all().map_err(|e| err("fsync", e))
        }
        Op::Unlink { path } => {
            fs::remove_file(at(path)).map_err(|e| err("unlink", e))?;
            sync_dir(root)
        }
        Op::Mkdir { path, mode } => {
            let tmp = root.join(format!("{TMP_PREFIX}{index}"));
            fs::create_dir(&tmp).map_err(|e| err("mkdir", e))?;
            fs::set_permissions(&tmp, Permissions::from_mode(*mode)).map_err(|e| err("chmod", e))?;
            fs::rename(&tmp, at(path)).map_err(|e| err("rename", e))?;
            sync_dir(root)
        }
        Op::Rmdir { path } => {
            fs::remove_dir(at(path)).map_err(|e| err("rmdir", e))?;
            sync_dir(root)
        }
        Op::Rename { from, to } => {
            fs::rename(at(from), at(to)).map_err(|e| err("rename", e))?;
            sync_dir(root)
        }
        Op::Chmod { path, mode } => {
            fs::set_permissions(at(path), Permissions::from_mode(*mode)).map_err(|e| err("chmod", e))?;
            sync_dir(root)
        }
    }
}

/// The digest of the tree under `root` (temporary names and `.zfs` left out).
fn digest_of_mount(root: &Path) -> Vec<Entry> {
    fn go(root: &Path, dir: &Path, out: &mut Vec<Entry>) {
        for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display())) {
            let path = entry.expect("dir entry").path();
            let rel = path.strip_prefix(root).expect("below root").to_string_lossy().into_owned();
            if dir == root && (rel.starts_with(TMP_PREFIX) || rel == ".zfs") {
                continue;
            }
            let meta = fs::symlink_metadata(&path).unwrap_or_else(|e| panic!("lstat {}: {e}", path.display()));
            let mode = meta.mode() & 0o7777;
            if meta.is_dir() {
                out.push(Entry { path: rel, kind: 'd', size: 0, hash: 0, mode });
                go(root, &path, out);
            } else {
                let data = fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
                out.push(Entry { path: rel, kind: 'f', size: meta.len(), hash: hash(&data), mode });
            }
        }
    }
    let mut out = Vec::new();
    go(root, root, &mut out);
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

fn describe_op(op: &Op) -> String {
    match op {
        Op::Put { path, data, mode } => format!("put {path} ({} bytes, mode {mode:o})", data.len()),
        Op::Append { path, data } => format!("append {} bytes to {path}", data.len()),
        Op::Patch { path, offset, data } => format!("write {} bytes at {offset} of {path}", data.len()),
        Op::Truncate { path, len } => format!("truncate {path} to {len}"),
        Op::Unlink { path } => format!("unlink {path}"),
        Op::Mkdir { path, mode } => format!("mkdir {path} (mode {mode:o})"),
        Op::Rmdir { path } => format!("rmdir {path}"),
        Op::Rename { from, to } => format!("rename {from} to {to}"),
        Op::Chmod { path, mode } => format!("chmod {mode:o} {path}"),
    }
}

fn describe_difference(actual: &[Entry], expected: &[Entry]) -> String {
    let mut lines = Vec::new();
    for e in expected {
        match actual.iter().find(|a| a.path == e.path) {
            None => lines.push(format!("  missing: {e:?}")),
            Some(a) if a != e => lines.push(format!("  differs: expected {e:?}, found {a:?}")),
            _ => {}
        }
    }
    for a in actual.iter().filter(|a| !expected.iter().any(|e| e.path == a.path)) {
        lines.push(format!("  extra: {a:?}"));
    }
    lines.truncate(20);
    lines.join("\n")
}

/// Rolls back (`-r` if `destroy_later`) to `snapshot` and checks the mount
/// equals the model after k operations for some k in `range`; returns k.
fn rollback_and_compare(
    harness: &Harness,
    mountpoint: &Path,
    snapshot: &str,
    destroy_later: bool,
    range: (usize, usize),
    digests: &[Vec<Entry>],
    ops: &[Op],
) -> usize {
    let mut args = vec!["rollback"];
    if destroy_later {
        args.push("-r");
    }
    args.push(snapshot);
    harness.tarn_ok(&args);
    wait_mounted(mountpoint);
    let actual = digest_of_mount(mountpoint);
    let (low, high) = range;
    let high = high.min(digests.len() - 1);
    if let Some(k) = (low..=high).find(|k| digests[*k] == actual) {
        return k;
    }
    let window: Vec<String> =
        ops.iter().enumerate().take(high).skip(low.saturating_sub(1)).map(|(i, op)| format!("  {i}: {}", describe_op(op))).collect();
    panic!(
        "after rollback to {snapshot}, the mount matches the model after no k in [{low}, {high}];\n\
         against k = {low}:\n{}\nagainst k = {high}:\n{}\noperations {}..{high}:\n{}",
        describe_difference(&actual, &digests[low]),
        describe_difference(&actual, &digests[high]),
        low.saturating_sub(1),
        window.join("\n")
    );
}

/// `tarn list -t snapshot -H -o name DATASET`, as names.
fn snapshot_names(harness: &Harness, dataset: &str) -> Vec<String> {
    harness.tarn_ok(&["list", "-t", "snapshot", "-H", "-o", "name", dataset]).lines().map(str::to_string).collect()
}

fn tarn_fails(harness: &Harness, args: &[&str], needle: &str) -> String {
    let out = harness.tarn(args);
    let what = args.join(" ");
    assert_clean_failure(&out, &what);
    assert_eq!(out.status.code(), Some(1), "tarn {what} must exit 1:\n{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(stderr.contains(needle), "tarn {what}: expected '{needle}' in the error, got: {stderr}");
    stderr
}

fn assert_daemon_did_not_panic(harness: &Harness) {
    let log = harness.daemon_log();
    assert!(!log.contains("panicked"), "the daemon panicked:\n{}", common::tail(&log, 60));
}

#[test]
fn snapshots_during_a_seeded_workload_roll_back_exactly() {
    let seeded = tarn_testkit::seeded!(1500);
    let harness = Harness::start();
    let pool_mount = harness.create_pool(POOL, &pool_spec(&harness));
    harness.tarn_ok(&["create", FS]);
    let mountpoint = pool_mount.join("fs");
    wait_mounted(&mountpoint);

    let (ops, digests) = plan(&mut seeded.rng(1), seeded.count as usize);
    let ops = Arc::new(ops);
    let started = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (ops, started, done, stop, root) = (ops.clone(), started.clone(), done.clone(), stop.clone(), mountpoint.clone());
        thread::spawn(move || -> Result<(), String> {
            for (index, op) in ops.iter().enumerate() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                started.store(index + 1, Ordering::SeqCst);
                apply_fs(&root, index, op)?;
                done.store(index + 1, Ordering::SeqCst);
            }
            Ok(())
        })
    };

    // Snapshots at random moments: (name, finished before, started after).
    let mut rng = seeded.rng(2);
    let mut taken: Vec<(String, usize, usize)> = Vec::new();
    for n in 0..SNAPSHOTS {
        thread::sleep(Duration::from_millis(rng.gen_range(100..700)));
        let name = format!("{FS}@s{n}");
        let before = done.load(Ordering::SeqCst);
        harness.tarn_ok(&["snapshot", &name]);
        let after = started.load(Ordering::SeqCst);
        taken.push((name, before, after));
    }
    stop.store(true, Ordering::SeqCst);
    writer.join().expect("writer thread").unwrap_or_else(|e| panic!("the writer failed: {e}"));
    let finished = done.load(Ordering::SeqCst);
    eprintln!("writer: {finished} operations; snapshots (name, done before, started after): {taken:?}");
    assert!(finished >= 5, "the writer managed only {finished} operations");

    // A snapshot of a file system nothing changes afterwards holds nothing
    // of its own. (The kernel's FORGET of the last unlinked or replaced
    // file, which frees it, comes asynchronously: let it land first.)
    thread::sleep(Duration::from_millis(300));
    let quiet = format!("{FS}@quiet");
    harness.tarn_ok(&["snapshot", &quiet]);
    let listed = harness.tarn_ok(&["list", "-t", "snapshot", "-o", "name,used,refer", "-p", "-H"]);
    let rows: Vec<Vec<&str>> = listed.lines().map(|l| l.split('\t').collect()).collect();
    let names: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    let expected: Vec<String> = taken.iter().map(|t| t.0.clone()).chain([quiet.clone()]).collect();
    assert_eq!(names, expected, "list -t snapshot, oldest first:\n{listed}");
    for row in &rows {
        assert_eq!(row.len(), 3, "list -o name,used,refer -H: {listed}");
        let used: u64 = row[1].parse().unwrap_or_else(|_| panic!("used of {} is not a number: {listed}", row[0]));
        let refer: u64 = row[2].parse().unwrap_or_else(|_| panic!("refer of {} is not a number: {listed}", row[0]));
        if row[0] == quiet {
            assert_eq!(used, 0, "a snapshot of an unchanged file system uses nothing:\n{listed}");
        }
        assert!(refer > 0, "a snapshot of a file system refers to something:\n{listed}");
    }
    let got = harness.tarn_ok(&["get", "-H", "-p", "-o", "value", "type,used,userrefs", &quiet]);
    assert_eq!(got.lines().collect::<Vec<_>>(), ["snapshot", "0", "0"], "get on a snapshot");
    // `tarn list` without -t: file systems only.
    let plain = harness.tarn_ok(&["list", "-H", "-o", "name"]);
    assert_eq!(plain.lines().collect::<Vec<_>>(), [POOL, FS], "plain list shows no snapshots");
    let json = harness.tarn_ok(&["list", "-j", "-t", "snapshot", FS]);
    let json: serde_json::Value = serde_json::from_str(&json).expect("list -j is JSON");
    let entry = &json["datasets"][quiet.as_str()];
    assert_eq!(entry["type"], "SNAPSHOT", "{json:#}");
    assert_eq!(entry["dataset"], FS, "{json:#}");
    assert_eq!(entry["snapshot_name"], "quiet", "{json:#}");
    assert_eq!(entry["pool"], POOL, "{json:#}");
    assert!(entry["createtxg"].as_u64().is_some_and(|t| t > 0), "{json:#}");
    assert_eq!(json["datasets"].as_object().map(|o| o.len()), Some(SNAPSHOTS + 1), "{json:#}");
    let usedsnap = harness.tarn_ok(&["get", "-H", "-p", "-o", "value", "usedbysnapshots,written", FS]);
    assert!(usedsnap.lines().all(|l| l.parse::<u64>().is_ok()), "usedbysnapshots,written: {usedsnap}");

    // A held snapshot cannot be destroyed, alone or in a range; released, it can.
    let oldest = taken[0].0.clone();
    harness.tarn_ok(&["hold", "keep", &oldest]);
    let holds = harness.tarn_ok(&["holds", "-H", &oldest]);
    assert_eq!(holds, format!("{oldest}\tkeep\t-\n"), "holds -H");
    let table = harness.tarn_ok(&["holds", &oldest]);
    assert!(table.starts_with("NAME") && table.contains("TAG") && table.contains("TIMESTAMP"), "holds table:\n{table}");
    tarn_fails(&harness, &["destroy", &oldest], "held");
    tarn_fails(&harness, &["destroy", &format!("{FS}@%s1")], "held");
    tarn_fails(&harness, &["hold", "keep", &oldest], "already exists");
    assert_eq!(snapshot_names(&harness, FS).len(), SNAPSHOTS + 1, "a refused destroy destroyed something");
    assert_eq!(harness.tarn_ok(&["get", "-H", "-o", "value", "userrefs", &oldest]).trim(), "1");
    harness.tarn_ok(&["release", "keep", &oldest]);
    assert_eq!(harness.tarn_ok(&["holds", "-H", &oldest]), "", "holds after release");
    tarn_fails(&harness, &["release", "keep", &oldest], "no such tag");

    // Roll back to the newest first: the file system as the writer left it.
    let k = rollback_and_compare(&harness, &mountpoint, &quiet, false, (finished, finished), &digests, &ops);
    assert_eq!(k, finished);
    // Then to each older snapshot, destroying the later ones (-r).
    for (index, (name, before, after)) in taken.iter().enumerate().rev() {
        // Never the newest (quiet, or the one after it, still exists): -r it takes.
        tarn_fails(&harness, &["rollback", name], "more recent snapshots");
        let k = rollback_and_compare(&harness, &mountpoint, name, true, (*before, *after), &digests, &ops);
        eprintln!("{name}: matches the model after {k} operations (window {before}..={after})");
        let left = snapshot_names(&harness, FS);
        let expected: Vec<String> = taken[..=index].iter().map(|t| t.0.clone()).collect();
        assert_eq!(left, expected, "snapshots left after rollback -r to {name}");
        // Rolled back, the file system takes writes again.
        write_file(&mountpoint.join("after-rollback"), name.as_bytes());
        assert_eq!(fs::read(mountpoint.join("after-rollback")).unwrap(), name.as_bytes());
    }

    // Ranges, on a dataset of their own.
    let r = "tank/r";
    harness.tarn_ok(&["create", r]);
    let r_mount = pool_mount.join("r");
    wait_mounted(&r_mount);
    let mut data_rng = seeded.rng(3);
    for i in 0..5 {
        write_file(&r_mount.join(format!("f{i}")), &random_bytes(&mut data_rng, 200 << 10));
        harness.tarn_ok(&["snapshot", &format!("{r}@r{i}")]);
        if i == 2 {
            fs::remove_file(r_mount.join("f0")).unwrap();
        }
    }
    let dry = harness.tarn_ok(&["destroy", "-n", "-v", &format!("{r}@r1%r3")]);
    assert_eq!(dry, "would destroy tank/r@r1\nwould destroy tank/r@r2\nwould destroy tank/r@r3\n", "destroy -nv of a range");
    let dry = harness.tarn_ok(&["destroy", "-n", "-p", &format!("{r}@%r1")]);
    assert_eq!(dry, "destroy\ttank/r@r0\ndestroy\ttank/r@r1\n", "destroy -np of a range from the first");
    assert_eq!(snapshot_names(&harness, r).len(), 5, "a dry run destroyed something");
    harness.tarn_ok(&["destroy", &format!("{r}@r1%r3")]);
    assert_eq!(snapshot_names(&harness, r), ["tank/r@r0", "tank/r@r4"]);
    harness.tarn_ok(&["destroy", &format!("{r}@%r0")]);
    assert_eq!(snapshot_names(&harness, r), ["tank/r@r4"]);
    // The files of the snapshots destroyed are gone; the survivor still rolls back.
    write_file(&r_mount.join("late"), b"late");
    harness.tarn_ok(&["rollback", &format!("{r}@r4")]);
    wait_mounted(&r_mount);
    assert!(!r_mount.join("late").exists() && r_mount.join("f4").exists(), "rollback of tank/r to r4");
    tarn_fails(&harness, &["destroy", r], "snapshots");
    let gone = harness.tarn_ok(&["destroy", "-r", "-v", r]);
    assert_eq!(gone, "will destroy tank/r@r4\nwill destroy tank/r\n", "destroy -rv of a file system with a snapshot");
    let all = harness.tarn_ok(&["list", "-t", "all", "-H", "-o", "name"]);
    assert!(!all.contains("tank/r"), "tank/r and its snapshots are gone:\n{all}");

    harness.tarn_ok(&["debug", "check", POOL]);
    assert_daemon_did_not_panic(&harness);
}

#[test]
fn bad_snapshot_input_fails_cleanly() {
    let seeded = tarn_testkit::seeded!(1);
    let harness = Harness::start();
    let pool_mount = harness.create_pool(POOL, &pool_spec(&harness));
    harness.tarn_ok(&["create", "-p", "tank/fs/child"]);
    let mountpoint = pool_mount.join("fs");
    wait_mounted(&mountpoint.join("child"));
    let mut rng = seeded.rng(1);
    write_file(&mountpoint.join("a"), &random_bytes(&mut rng, 100 << 10));
    harness.tarn_ok(&["snapshot", "tank/fs@one"]);
    write_file(&mountpoint.join("b"), &random_bytes(&mut rng, 100 << 10));
    harness.tarn_ok(&["snapshot", "tank/fs@two"]);

    // Names.
    tarn_fails(&harness, &["snapshot", "tank/missing@a"], "does not exist");
    tarn_fails(&harness, &["snapshot", "ghost/fs@a"], "does not exist");
    tarn_fails(&harness, &["snapshot", "tank/fs@"], "empty snapshot name");
    tarn_fails(&harness, &["snapshot", "tank/fs@a@b"], "invalid character '@'");
    tarn_fails(&harness, &["snapshot", "tank/fs@bad/char"], "invalid character '/'");
    tarn_fails(&harness, &["snapshot", "tank/fs"], "tank/fs");
    tarn_fails(&harness, &["snapshot", "tank/fs@one"], "already exists");
    // One bad name of several: nothing is taken.
    tarn_fails(&harness, &["snapshot", "tank/fs@three", "tank/fs/child@x y"], "invalid character");
    assert_eq!(snapshot_names(&harness, "tank/fs"), ["tank/fs@one", "tank/fs@two"]);

    // Rollback.
    tarn_fails(&harness, &["rollback", "tank/fs@one"], "more recent snapshots");
    tarn_fails(&harness, &["rollback", "tank/fs@nope"], "does not exist");
    tarn_fails(&harness, &["rollback", "tank/nope@one"], "does not exist");
    tarn_fails(&harness, &["rollback", "tank/fs"], "tank/fs");
    assert!(mountpoint.join("b").exists(), "a refused rollback changed the file system");

    // Destroy.
    tarn_fails(&harness, &["destroy", "tank/fs@nope"], "does not exist");
    tarn_fails(&harness, &["destroy", "tank/fs@nope%two"], "does not exist");
    tarn_fails(&harness, &["destroy", "tank/fs@two%one"], "names no snapshots");
    tarn_fails(&harness, &["destroy", "tank/fs@"], "empty snapshot name");
    tarn_fails(&harness, &["destroy", "tank/nope@one"], "does not exist");
    tarn_fails(&harness, &["destroy", "tank/fs/child@one"], "does not exist");
    tarn_fails(&harness, &["destroy", "-r", "tank/fs@nope"], "could not find any snapshots");

    // Holds.
    tarn_fails(&harness, &["hold", "keep", "tank/fs@nope"], "does not exist");
    tarn_fails(&harness, &["hold", "keep", "tank/fs"], "tank/fs");
    tarn_fails(&harness, &["release", "keep", "tank/fs@one"], "no such tag");
    tarn_fails(&harness, &["holds", "tank/fs@nope"], "does not exist");
    tarn_fails(&harness, &["hold", "", "tank/fs@one"], "empty tag");
    // Held and then released all or nothing: one missing name changes nothing.
    tarn_fails(&harness, &["hold", "keep", "tank/fs@one", "tank/fs@nope"], "does not exist");
    assert_eq!(harness.tarn_ok(&["holds", "-H", "tank/fs@one"]), "");

    // Usage errors exit 2.
    for args in [&["snapshot"][..], &["rollback"], &["hold", "keep"], &["holds"], &["list", "-t", "nonsense"]] {
        let out = harness.tarn(args);
        assert_no_panic(&out, &args.join(" "));
        assert_eq!(out.status.code(), Some(2), "tarn {} is a usage error", args.join(" "));
    }

    // Recursive forms: one snapshot of the tree, held, listed, destroyed.
    harness.tarn_ok(&["snapshot", "-r", "tank@rec"]);
    let all = snapshot_names(&harness, "tank");
    assert_eq!(all, ["tank@rec"], "list -t snapshot tank: the snapshots of tank only");
    let tree = harness.tarn_ok(&["list", "-r", "-t", "all", "-H", "-o", "name", "tank"]);
    assert_eq!(
        tree.lines().collect::<Vec<_>>(),
        ["tank", "tank@rec", "tank/fs", "tank/fs@one", "tank/fs@two", "tank/fs@rec", "tank/fs/child", "tank/fs/child@rec"],
        "list -r -t all: each dataset followed by its snapshots, oldest first"
    );
    let txgs = harness.tarn_ok(&["get", "-H", "-p", "-o", "value", "createtxg", "tank@rec", "tank/fs@rec", "tank/fs/child@rec"]);
    let txgs: Vec<&str> = txgs.lines().collect();
    assert!(txgs.len() == 3 && txgs.iter().all(|t| *t == txgs[0]), "snapshot -r is one txg: {txgs:?}");
    harness.tarn_ok(&["hold", "-r", "keep", "tank@rec"]);
    let holds = harness.tarn_ok(&["holds", "-r", "-H", "tank@rec"]);
    assert_eq!(holds.lines().count(), 3, "holds -r:\n{holds}");
    tarn_fails(&harness, &["destroy", "-r", "tank@rec"], "held");
    tarn_fails(&harness, &["destroy", "-r", "tank/fs"], "held");
    harness.tarn_ok(&["release", "-r", "keep", "tank@rec"]);
    harness.tarn_ok(&["destroy", "-r", "tank@rec"]);
    assert_eq!(snapshot_names(&harness, "tank").len(), 0);
    assert_eq!(snapshot_names(&harness, "tank/fs"), ["tank/fs@one", "tank/fs@two"]);

    // A busy file system is not rolled back unless forced.
    let busy = File::open(mountpoint.join("b")).expect("open a file to keep the mount busy");
    tarn_fails(&harness, &["rollback", "tank/fs@two"], "busy");
    assert!(mountpoint.join("b").exists(), "the mount survives a refused rollback");
    write_file(&mountpoint.join("c"), b"after two");
    tarn_fails(&harness, &["rollback", "tank/fs@two"], "busy");
    harness.tarn_ok(&["rollback", "-f", "tank/fs@two"]);
    drop(busy);
    wait_mounted(&mountpoint);
    wait_mounted(&mountpoint.join("child"));
    assert!(mountpoint.join("b").exists() && !mountpoint.join("c").exists(), "forced rollback to two");

    // destroy -r of a file system takes its snapshots and children along.
    let gone = harness.tarn_ok(&["destroy", "-r", "-n", "-v", "tank/fs"]);
    assert_eq!(
        gone.lines().collect::<Vec<_>>(),
        ["would destroy tank/fs/child", "would destroy tank/fs@two", "would destroy tank/fs@one", "would destroy tank/fs"]
    );
    harness.tarn_ok(&["destroy", "-r", "tank/fs"]);
    assert_eq!(harness.tarn_ok(&["list", "-t", "all", "-H", "-o", "name"]), "tank\n");

    harness.tarn_ok(&["debug", "check", POOL]);
    assert_daemon_did_not_panic(&harness);
}
