//! `tarn send` / `tarn recv` end to end (issue 4, tests 2 and 3), through
//! the real binary, a real daemon and FUSE mounts.
//!
//! - `trees_replicate_across_layouts`: a tree with every kind of file
//!   metadata (modes, owners, timestamps, xattrs, hard links, symlinks,
//!   sparse holes, two record sizes) is sent full, then `-i`, then `-I`, from
//!   a raidz1 pool to a mirror pool; then `-R` (a dataset tree with its
//!   properties and every snapshot) and `-p` with `recv -o`/`-x`. Every
//!   snapshot on the receiving side must digest the same as on the sending
//!   side (read through `.zfs/snapshot`, which nothing can change).
//! - `damaged_streams_change_nothing_and_resume_completes`: full,
//!   incremental-series and `-R` streams truncated at random offsets,
//!   bit-flipped, or with two records swapped are refused with one line and
//!   leave every dataset and snapshot of the receiving pool as it was; with
//!   `recv -s` an interrupted receive keeps its partial state, reports a
//!   `receive_resume_token`, and `send -t` completes it (also after a second
//!   interruption of the resumed stream) to identical trees.
//!
//! - `raw_sends_need_no_key_on_either_side` (issue 12, test 4): an
//!   encrypted dataset sent raw (`-w`, full then `-I`) with its key
//!   unloaded, received into a pool of another layout that never has the
//!   key: listed, scrubbed, not mounted; after `load-key` there with the
//!   original passphrase every snapshot and the head digest as on the
//!   sender. Damaged raw streams change nothing; `-R` sends the
//!   encrypted child raw.
//!
//! Reproduce a failure: `TARN_SEED=<seed> TARN_COUNT=<n> cargo nextest run
//! -p tarn --test replication` (the seed is printed).

mod common;

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use common::streams::{pipe, recv_from, recv_ok, send_to, tarn_cmd};
use common::trees::{chown, files_under, set_times, xattr_remove, xattr_set, xattrs};
use common::{assert_clean_failure, hash_file, path_str, random_bytes, walk, Harness};

// ---------------------------------------------------------------------------
// Trees: building, changing, digesting.

/// A tree with directories, files of random sizes, modes, owners, times,
/// xattrs, hard links, a symlink and a sparse file.
fn populate(root: &Path, rng: &mut ChaCha8Rng, files: usize) {
    fs::create_dir_all(root.join("d1/d2")).unwrap();
    for i in 0..files {
        let dir = ["", "d1", "d1/d2"][i % 3];
        let path = root.join(dir).join(format!("f{i}"));
        let len = rng.gen_range(0..200_000);
        fs::write(&path, random_bytes(rng, len)).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(rng.gen_range(0o400..0o777))).unwrap();
        chown(&path, 1000 + i as u32, 2000 + rng.gen_range(0..5));
        if rng.gen_bool(0.5) {
            xattr_set(&path, "user.tag", &{ let n = rng.gen_range(1..300); random_bytes(rng, n) });
        }
        let t = 1_600_000_000 + rng.gen_range(0..100_000_000i64);
        set_times(&path, (t, rng.gen_range(0..1_000_000_000)), (t + 7, rng.gen_range(0..1_000_000_000)));
    }
    fs::hard_link(root.join("f0"), root.join("d1/hard0")).unwrap();
    fs::hard_link(root.join("f0"), root.join("d1/d2/hard0b")).unwrap();
    std::os::unix::fs::symlink("d1/f1", root.join("link")).unwrap();
    chown(&root.join("link"), 4242, 4343);
    fs::set_permissions(root.join("d1"), fs::Permissions::from_mode(0o750)).unwrap();
    xattr_set(&root.join("d1"), "user.dir", b"directory xattr");
    // Sparse: 32 MiB with two small islands of data.
    let sparse = File::create(root.join("sparse")).unwrap();
    sparse.set_len(32 << 20).unwrap();
    sparse.write_all_at(&random_bytes(rng, 10_000), 1 << 20).unwrap();
    sparse.write_all_at(&random_bytes(rng, 20_000), 20 << 20).unwrap();
    sparse.sync_all().unwrap();
}

/// Random changes of every kind.
fn mutate(root: &Path, rng: &mut ChaCha8Rng, step: usize) {
    let files = files_under(root);
    for _ in 0..6 {
        let path = &files[rng.gen_range(0..files.len())];
        if !path.exists() {
            continue;
        }
        match rng.gen_range(0..7) {
            0 => {
                let mut f = OpenOptions::new().append(true).open(path).unwrap();
                f.write_all(&{ let n = rng.gen_range(1..50_000); random_bytes(rng, n) }).unwrap();
            }
            1 => {
                let f = OpenOptions::new().write(true).open(path).unwrap();
                let at = rng.gen_range(0..300_000);
                f.write_all_at(&{ let n = rng.gen_range(1..20_000); random_bytes(rng, n) }, at).unwrap();
            }
            2 => fs::remove_file(path).unwrap(),
            3 => fs::set_permissions(path, fs::Permissions::from_mode(rng.gen_range(0o400..0o777))).unwrap(),
            4 => chown(path, 3000 + rng.gen_range(0..100), 3000),
            5 => xattr_set(path, &format!("user.step{step}"), &random_bytes(rng, 40)),
            _ => {
                xattr_remove(path, "user.tag");
                let f = OpenOptions::new().write(true).open(path).unwrap();
                f.set_len(rng.gen_range(0..100_000)).unwrap();
            }
        }
    }
    let new = root.join(format!("d1/new{step}"));
    fs::write(&new, { let n = rng.gen_range(1..300_000); random_bytes(rng, n) }).unwrap();
    if let Some(target) = files_under(root).into_iter().find(|p| !p.ends_with("sparse")) {
        let _ = fs::hard_link(&target, root.join(format!("link{step}")));
    }
    let _ = fs::rename(root.join(format!("d1/new{step}")), root.join(format!("d1/d2/moved{step}")));
    // The sparse file: a hole punched by truncating down, then data far out.
    let sparse = OpenOptions::new().write(true).open(root.join("sparse")).unwrap();
    sparse.set_len((4 + step as u64) << 20).unwrap();
    sparse.write_all_at(&random_bytes(rng, 5000), (24 + step as u64) << 20).unwrap();
    sparse.sync_all().unwrap();
}

/// What a tree comparison looks at, per path.
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    path: String,
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    atime: (i64, i64),
    mtime: (i64, i64),
    ctime: (i64, i64),
    nlink: u64,
    /// Files: content hash; symlinks: the target.
    content: String,
    xattrs: Vec<(String, Vec<u8>)>,
    /// Hard links: the first path (in walk order) of the same inode.
    first_link: String,
}

fn digest(root: &Path) -> Vec<Entry> {
    let mut first: BTreeMap<u64, String> = BTreeMap::new();
    let mut out = Vec::new();
    for rel in walk(root) {
        let path = root.join(&rel);
        let m = fs::symlink_metadata(&path).unwrap();
        let name = rel.to_string_lossy().into_owned();
        let content = if m.file_type().is_symlink() {
            fs::read_link(&path).unwrap().to_string_lossy().into_owned()
        } else if m.is_file() {
            format!("{:016x}", hash_file(&path))
        } else {
            String::new()
        };
        let first_link = first.entry(m.ino()).or_insert_with(|| name.clone()).clone();
        out.push(Entry {
            path: name,
            mode: m.mode(),
            uid: m.uid(),
            gid: m.gid(),
            size: if m.is_dir() { 0 } else { m.size() },
            atime: (m.atime(), m.atime_nsec()),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
            nlink: if m.is_dir() { 0 } else { m.nlink() },
            content,
            xattrs: xattrs(&path),
            first_link,
        });
    }
    out
}

fn assert_same_tree(a: &Path, b: &Path) {
    let (da, db) = (digest(a), digest(b));
    assert!(!da.is_empty(), "{} is empty", a.display());
    if da != db {
        let missing: Vec<&str> = da.iter().filter(|e| !db.iter().any(|f| f.path == e.path)).map(|e| e.path.as_str()).collect();
        let extra: Vec<&str> = db.iter().filter(|e| !da.iter().any(|f| f.path == e.path)).map(|e| e.path.as_str()).collect();
        let differ: Vec<String> = da
            .iter()
            .filter_map(|e| db.iter().find(|f| f.path == e.path && *f != e).map(|f| format!("{e:?}\n   vs {f:?}")))
            .take(3)
            .collect();
        panic!(
            "{} and {} differ:\nonly in the first: {missing:?}\nonly in the second: {extra:?}\ndiffering:\n{}",
            a.display(),
            b.display(),
            differ.join("\n")
        );
    }
}

fn snap_dir(mount: &Path, snap: &str) -> PathBuf {
    mount.join(".zfs/snapshot").join(snap)
}

fn get(h: &Harness, prop: &str, name: &str) -> String {
    h.tarn_ok(&["get", "-H", "-o", "value", prop, name]).trim().to_string()
}

fn get_source(h: &Harness, prop: &str, name: &str) -> (String, String) {
    let line = h.tarn_ok(&["get", "-H", "-o", "value,source", prop, name]);
    let mut parts = line.trim_end().split('\t');
    (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string())
}

fn pools(h: &Harness) -> (PathBuf, PathBuf) {
    let a = h.vdev_files("a", 3, common::VDEV_SIZE_BYTES);
    let b = h.vdev_files("b", 2, common::VDEV_SIZE_BYTES);
    let tank = h.create_pool("tank", &[&["raidz1".to_string()][..], &a.iter().map(|p| path_str(p)).collect::<Vec<_>>()].concat());
    let backup =
        h.create_pool("backup", &[&["mirror".to_string()][..], &b.iter().map(|p| path_str(p)).collect::<Vec<_>>()].concat());
    (tank, backup)
}

// ---------------------------------------------------------------------------

#[test]
fn trees_replicate_across_layouts() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(1);
    let h = Harness::start();
    let (tank, backup) = pools(&h);
    h.tarn_ok(&["create", "-o", "recordsize=64K", "tank/data"]);
    h.tarn_ok(&["create", "-o", "recordsize=16K", "-o", "compression=zstd", "tank/data/sub"]);
    let src = tank.join("data");
    populate(&src, &mut rng, 24);
    populate(&src.join("sub"), &mut rng, 6);
    h.tarn_ok(&["snapshot", "-r", "tank/data@s1"]);

    // A snapshot being sent cannot be destroyed: the sender is stalled on a
    // full pipe (after its first byte, so the send has begun).
    {
        use std::io::Read;
        let mut sender = tarn_cmd(&h, &["send", "tank/data@s1"]).stdout(Stdio::piped()).spawn().unwrap();
        let mut stream = sender.stdout.take().unwrap();
        let mut first = [0u8; 1];
        stream.read_exact(&mut first).unwrap();
        let out = h.tarn(&["destroy", "tank/data@s1"]);
        assert_clean_failure(&out, "destroy of a snapshot being sent");
        assert!(String::from_utf8_lossy(&out.stderr).contains("being sent"));
        let out = h.tarn(&["pool", "export", "tank"]);
        assert_clean_failure(&out, "export of a pool with a send running");
        assert!(String::from_utf8_lossy(&out.stderr).contains("being sent"));
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).unwrap();
        assert!(sender.wait().unwrap().success());
        assert!(rest.len() > 1 << 20, "the whole stream arrived");
    }

    // Full, through a pipe.
    pipe(&h, &["tank/data@s1"], &["backup/data"]);
    let dst = backup.join("data");
    common::wait_mounted(&dst);
    assert_same_tree(&snap_dir(&src, "s1"), &snap_dir(&dst, "s1"));

    // -i, through a file; its size as -nvP predicts it.
    mutate(&src, &mut rng, 2);
    h.tarn_ok(&["snapshot", "tank/data@s2"]);
    let stream = h.dir.join("inc.stream");
    send_to(&h, &["-i", "@s1", "tank/data@s2"], &stream);
    let estimate = h.tarn_ok(&["send", "-n", "-P", "-i", "@s1", "tank/data@s2"]);
    let size_line = estimate.lines().find(|l| l.starts_with("size\t")).expect("size line");
    assert_eq!(size_line, format!("size\t{}", fs::metadata(&stream).unwrap().len()), "-nP estimate:\n{estimate}");
    assert!(h.tarn_ok(&["send", "-nv", "-i", "@s1", "tank/data@s2"]).contains("incremental send of tank/data@s2 from @s1"));
    recv_ok(&h, &["backup/data"], &stream);
    assert_same_tree(&snap_dir(&src, "s2"), &snap_dir(&dst, "s2"));

    // -I: every snapshot in between.
    mutate(&src, &mut rng, 3);
    h.tarn_ok(&["snapshot", "tank/data@s3"]);
    mutate(&src, &mut rng, 4);
    h.tarn_ok(&["snapshot", "tank/data@s4"]);
    pipe(&h, &["-I", "@s2", "tank/data@s4"], &["-F", "backup/data"]);
    for s in ["s1", "s2", "s3", "s4"] {
        assert_same_tree(&snap_dir(&src, s), &snap_dir(&dst, s));
    }
    assert_eq!(get(&h, "guid", "backup/data@s4"), get(&h, "guid", "tank/data@s4"), "a received snapshot keeps its guid");
    // Holes stayed holes: 32 MiB apparent, little allocated.
    let sparse = fs::metadata(snap_dir(&dst, "s4").join("sparse")).unwrap();
    assert!(sparse.size() >= 24 << 20 && sparse.blocks() * 512 < 2 << 20, "sparse file: {} bytes, {} blocks", sparse.size(), sparse.blocks());

    // -R: the tree, its properties and every snapshot.
    h.tarn_ok(&["snapshot", "-r", "tank/data@r"]);
    pipe(&h, &["-R", "tank/data@r"], &["-x", "mountpoint", "backup/rep"]);
    let rep = backup.join("rep");
    common::wait_mounted(&rep.join("sub"));
    for s in ["s1", "s2", "s3", "s4", "r"] {
        assert_same_tree(&snap_dir(&src, s), &snap_dir(&rep, s));
    }
    for s in ["s1", "r"] {
        assert_same_tree(&snap_dir(&src.join("sub"), s), &snap_dir(&rep.join("sub"), s));
    }
    assert_eq!(get_source(&h, "recordsize", "backup/rep/sub"), ("16K".into(), "received".into()));
    assert_eq!(get_source(&h, "compression", "backup/rep/sub"), ("zstd".into(), "received".into()));
    assert_eq!(get_source(&h, "recordsize", "backup/rep"), ("64K".into(), "received".into()));

    // An incremental -R with a new child dataset.
    h.tarn_ok(&["create", "tank/data/late"]);
    fs::write(src.join("late/file"), b"late child").unwrap();
    mutate(&src, &mut rng, 5);
    h.tarn_ok(&["snapshot", "-r", "tank/data@r2"]);
    pipe(&h, &["-R", "-i", "@r", "tank/data@r2"], &["-F", "-x", "mountpoint", "backup/rep"]);
    assert_same_tree(&snap_dir(&src, "r2"), &snap_dir(&rep, "r2"));
    assert_same_tree(&snap_dir(&src.join("late"), "r2"), &snap_dir(&rep.join("late"), "r2"));

    // From a bookmark, after its snapshot is gone.
    h.tarn_ok(&["bookmark", "tank/data@r2", "tank/data#m"]);
    h.tarn_ok(&["destroy", "tank/data@r2"]);
    mutate(&src, &mut rng, 6);
    h.tarn_ok(&["snapshot", "tank/data@s6"]);
    assert!(h.tarn_ok(&["send", "-nv", "-i", "#m", "tank/data@s6"]).contains("from #m"));
    pipe(&h, &["-i", "tank/data#m", "tank/data@s6"], &["-F", "backup/rep"]);
    assert_same_tree(&snap_dir(&src, "s6"), &snap_dir(&rep, "s6"));

    // -p with -o and -x.
    pipe(&h, &["-p", "tank/data/sub@r"], &["-o", "compression=off", "-x", "recordsize", "backup/p"]);
    assert_eq!(get_source(&h, "compression", "backup/p").0, "off");
    assert_ne!(get_source(&h, "recordsize", "backup/p").1, "local", "-x recordsize: not received");
    assert_same_tree(&snap_dir(&src.join("sub"), "r"), &snap_dir(&backup.join("p"), "r"));

    // -d and -e: the sent name below the target (parents created).
    pipe(&h, &["tank/data/sub@r"], &["-d", "backup/dd"]);
    pipe(&h, &["tank/data/sub@r"], &["-e", "backup"]);
    let names = h.tarn_ok(&["list", "-H", "-r", "-t", "all", "-o", "name", "backup"]);
    for n in ["backup/dd", "backup/dd/data", "backup/dd/data/sub@r", "backup/sub@r"] {
        assert!(names.lines().any(|l| l == n), "{n} missing after recv -d/-e:\n{names}");
    }
    assert_same_tree(&snap_dir(&src.join("sub"), "r"), &snap_dir(&backup.join("dd/data/sub"), "r"));

    h.tarn_ok(&["debug", "check", "tank"]);
    h.tarn_ok(&["debug", "check", "backup"]);
}

// ---------------------------------------------------------------------------
// Damaged streams.

/// Offsets and lengths of the inner stream records of a package (each a
/// 32-byte header, type at 0, payload length at 4).
fn records(stream: &[u8]) -> Vec<(usize, usize, u32)> {
    let header_len = u32::from_le_bytes(stream[12..16].try_into().unwrap()) as usize;
    let mut at = 16 + header_len + 16;
    let mut out = Vec::new();
    while at + 32 <= stream.len() {
        let ty = u32::from_le_bytes(stream[at..at + 4].try_into().unwrap());
        let len = u32::from_le_bytes(stream[at + 4..at + 8].try_into().unwrap()) as usize;
        out.push((at, 32 + len, ty));
        at += 32 + len;
    }
    out
}

/// Every dataset and snapshot of the receiving pool with what identifies
/// its state (snapshots by guid, datasets by their tree when mounted).
fn pool_state(h: &Harness, backup: &Path) -> Vec<String> {
    let list = h.tarn_ok(&["list", "-H", "-r", "-t", "all", "-o", "name,receive_resume_token", "backup"]);
    let mut out: Vec<String> = list.lines().map(str::to_string).collect();
    for line in list.lines() {
        let name = line.split('\t').next().unwrap_or("");
        if name.contains('@') {
            out.push(format!("{name} guid {} referenced {}", get(h, "guid", name), get(h, "referenced", name)));
        } else if let Some(rel) = name.strip_prefix("backup/") {
            let dir = backup.join(rel);
            if dir.exists() {
                out.push(format!("{name}: {:?}", digest(&dir)));
            }
        }
    }
    out
}

/// The dataset under `top` holding a resume token, and the token.
fn resume_token(h: &Harness, top: &str) -> (String, String) {
    let list = h.tarn_ok(&["list", "-H", "-r", "-o", "name,receive_resume_token", top]);
    list.lines()
        .filter_map(|l| l.split_once('\t'))
        .find(|(_, t)| *t != "-")
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .unwrap_or_else(|| panic!("no receive_resume_token under {top}:\n{list}"))
}

#[test]
fn damaged_streams_change_nothing_and_resume_completes() {
    let seeded = tarn_testkit::seeded!(3);
    let mut rng = seeded.rng(2);
    let h = Harness::start();
    let (tank, backup) = pools(&h);
    h.tarn_ok(&["create", "tank/data"]);
    h.tarn_ok(&["create", "tank/data/sub"]);
    let src = tank.join("data");
    populate(&src, &mut rng, 12);
    populate(&src.join("sub"), &mut rng, 4);
    h.tarn_ok(&["snapshot", "-r", "tank/data@s1"]);
    mutate(&src, &mut rng, 2);
    h.tarn_ok(&["snapshot", "-r", "tank/data@s2"]);
    mutate(&src, &mut rng, 3);
    mutate(&src.join("sub"), &mut rng, 3);
    h.tarn_ok(&["snapshot", "-r", "tank/data@s3"]);
    // Three streams: full, an incremental series, a replication tree.
    let full = h.dir.join("full.stream");
    let series = h.dir.join("series.stream");
    let tree = h.dir.join("tree.stream");
    send_to(&h, &["tank/data@s1"], &full);
    send_to(&h, &["-I", "@s1", "tank/data@s3"], &series);
    send_to(&h, &["-R", "tank/data@s3"], &tree);
    // The base for the series.
    h.tarn_ok(&["set", "atime=off", "backup"]);
    recv_ok(&h, &["backup/inc"], &full);
    let cases: [(&str, &Path, &str); 3] = [("full", &full, "backup/new"), ("series", &series, "backup/inc"), ("tree", &tree, "backup/tree")];

    // A newer local snapshot on the series' target: -F would destroy it,
    // but only once the stream has proved whole.
    h.tarn_ok(&["snapshot", "backup/inc@precious"]);
    let damaged = h.dir.join("damaged.stream");
    for round in 0..seeded.count {
        for (what, stream, target) in cases {
            let bytes = fs::read(stream).unwrap();
            let recs = records(&bytes);
            let damage = match round % 3 {
                0 => {
                    let cut = rng.gen_range(1..bytes.len());
                    (bytes[..cut].to_vec(), format!("truncated at {cut} of {}", bytes.len()))
                }
                1 => {
                    let mut b = bytes.clone();
                    let at = rng.gen_range(0..b.len());
                    b[at] ^= 1 << rng.gen_range(0..8);
                    (b, format!("bit flipped at {at}"))
                }
                _ => {
                    // Two neighbouring records of one inner stream, swapped.
                    let i = rng.gen_range(1..recs.len() - 2);
                    let (a, b) = (recs[i], recs[i + 1]);
                    let mut out = bytes[..a.0].to_vec();
                    out.extend_from_slice(&bytes[b.0..b.0 + b.1]);
                    out.extend_from_slice(&bytes[a.0..a.0 + a.1]);
                    out.extend_from_slice(&bytes[b.0 + b.1..]);
                    (out, format!("records {i} (type {}) and {} (type {}) swapped", a.2, i + 1, b.2))
                }
            };
            if damage.0 == bytes {
                continue;
            }
            fs::write(&damaged, &damage.0).unwrap();
            let before = pool_state(&h, &backup);
            let out = recv_from(&h, &["-F", target], &damaged);
            assert_clean_failure(&out, &format!("recv of the {what} stream, {}", damage.1));
            assert_eq!(out.status.code(), Some(1), "{what}, {}", damage.1);
            assert_eq!(pool_state(&h, &backup), before, "{what} stream {}: the receiving pool changed", damage.1);
        }
    }
    h.tarn_ok(&["debug", "check", "backup"]);
    assert!(h.tarn_ok(&["list", "-H", "-t", "snapshot", "-o", "name", "-r", "backup/inc"]).contains("backup/inc@precious"));
    h.tarn_ok(&["destroy", "backup/inc@precious"]);

    // Resumable: interrupted (twice), then completed by send -t.
    for (what, stream, target) in cases {
        let bytes = fs::read(stream).unwrap();
        let recs = records(&bytes);
        // Somewhere inside the records, so that something has arrived.
        let cut = rng.gen_range(recs[2].0..bytes.len() - 1);
        fs::write(&damaged, &bytes[..cut]).unwrap();
        let out = recv_from(&h, &["-s", "-F", target], &damaged);
        assert_clean_failure(&out, &format!("recv -s of the {what} stream truncated at {cut}"));
        assert!(String::from_utf8_lossy(&out.stderr).contains("tarn send -t"), "{what}: the error names the resume command");
        let (holder, token) = resume_token(&h, target);
        if what == "full" {
            assert_eq!(holder, target);
            assert!(!common::mounts_under(&h.dir).contains(&backup.join("new")), "a partially received dataset is not mounted");
        }
        // The resumed stream, interrupted once more (a bit flip this time).
        let resumed = h.dir.join("resumed.stream");
        send_to(&h, &["-t", &token], &resumed);
        let mut again = fs::read(&resumed).unwrap();
        let flip = rng.gen_range(again.len() / 2..again.len());
        again[flip] ^= 0x10;
        fs::write(&damaged, &again).unwrap();
        let out = recv_from(&h, &["-s", target], &damaged);
        assert_clean_failure(&out, &format!("recv -s of the resumed {what} stream with a flipped bit"));
        let (_, token) = resume_token(&h, target);
        pipe(&h, &["-t", &token], &["-s", target]);
        let list = h.tarn_ok(&["list", "-H", "-r", "-o", "receive_resume_token", target]);
        assert!(list.lines().all(|l| l == "-"), "{what}: a token is left after the resume:\n{list}");
    }
    let dst = |t: &str| backup.join(t.strip_prefix("backup/").unwrap());
    common::wait_mounted(&dst("backup/new"));
    assert_same_tree(&snap_dir(&src, "s1"), &snap_dir(&dst("backup/new"), "s1"));
    for s in ["s1", "s2", "s3"] {
        assert_same_tree(&snap_dir(&src, s), &snap_dir(&dst("backup/inc"), s));
        assert_same_tree(&snap_dir(&src, s), &snap_dir(&dst("backup/tree"), s));
        assert_same_tree(&snap_dir(&src.join("sub"), s), &snap_dir(&dst("backup/tree").join("sub"), s));
    }
    h.tarn_ok(&["debug", "check", "backup"]);
}

fn ok_input(h: &Harness, args: &[&str], input: &str) {
    let out = h.tarn_input(args, input.as_bytes());
    assert!(out.status.success(), "tarn {}: {}\n{}", args.join(" "), String::from_utf8_lossy(&out.stderr), common::tail(&h.daemon_log(), 30));
}

fn names(h: &Harness, args: &[&str]) -> Vec<String> {
    h.tarn_ok(&[&["list", "-H", "-o", "name"], args].concat()).lines().map(str::to_string).collect()
}

#[test]
fn raw_sends_need_no_key_on_either_side() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(3);
    let h = Harness::start();
    let (tank, backup) = pools(&h);
    let pass = "raw replication passphrase";
    ok_input(&h, &["create", "-o", "encryption=on", "-o", "keyformat=passphrase", "-o", "pbkdf2iters=100000", "tank/secure"], &format!("{pass}\n{pass}\n"));
    h.tarn_ok(&["create", "-o", "recordsize=16K", "tank/secure/docs"]);
    let src = tank.join("secure/docs");
    common::wait_mounted(&src);
    populate(&src, &mut rng, 16);
    h.tarn_ok(&["snapshot", "tank/secure/docs@a"]);
    mutate(&src, &mut rng, 1);
    h.tarn_ok(&["snapshot", "tank/secure/docs@b"]);
    mutate(&src, &mut rng, 2);
    h.tarn_ok(&["snapshot", "tank/secure/docs@c"]);
    // The sender needs no key for a raw send.
    h.tarn_ok(&["unload-key", "-r", "tank/secure"]);
    common::wait_unmounted(&src);

    // Full, then the rest as a series; the receiver never has the key.
    let dir = h.dir.join("streams");
    fs::create_dir_all(&dir).unwrap();
    let (full, series) = (dir.join("full"), dir.join("series"));
    send_to(&h, &["-w", "tank/secure/docs@a"], &full);
    send_to(&h, &["-w", "-I", "@a", "tank/secure/docs@c"], &series);
    // A damaged raw stream changes nothing (a flipped bit in the middle,
    // where the data records are; a truncation).
    let bytes = fs::read(&full).unwrap();
    for (i, damaged) in [
        { let mut b = bytes.clone(); let at = b.len() / 2; b[at] ^= 0x10; b },
        bytes[..bytes.len() * 2 / 3].to_vec(),
    ].into_iter().enumerate() {
        let bad = dir.join(format!("bad{i}"));
        fs::write(&bad, damaged).unwrap();
        let out = recv_from(&h, &["backup/docs"], &bad);
        assert_clean_failure(&out, "recv of a damaged raw stream");
        assert!(!names(&h, &["-r", "backup"]).contains(&"backup/docs".to_string()), "a damaged raw stream left a dataset");
    }
    recv_ok(&h, &["backup/docs"], &full);
    let out = recv_from(&h, &["backup/docs"], &series);
    assert!(out.status.success(), "the raw series: {}", String::from_utf8_lossy(&out.stderr));
    let dst = backup.join("docs");
    assert_eq!(get(&h, "keystatus", "backup/docs"), "unavailable");
    assert_eq!(get(&h, "encryptionroot", "backup/docs"), "backup/docs");
    assert_eq!(get(&h, "encryption", "backup/docs"), "aes-256-gcm");
    assert_eq!(get(&h, "keyformat", "backup/docs"), "passphrase");
    let snaps = names(&h, &["-t", "snapshot", "-r", "backup/docs"]);
    assert_eq!(snaps, ["backup/docs@a", "backup/docs@b", "backup/docs@c"]);
    assert!(common::mount_type(&dst).is_none(), "mounted without its key");
    h.tarn_ok(&["snapshot", "-r", "tank@r1"]);
    let tree = dir.join("tree");
    send_to(&h, &["-R", "tank@r1"], &tree);
    recv_ok(&h, &["-u", "-x", "mountpoint", "backup/tree"], &tree);
    assert_eq!(get(&h, "keystatus", "backup/tree/secure/docs"), "unavailable");
    assert_eq!(get(&h, "keystatus", "backup/tree/secure"), "unavailable");
    assert_eq!(get(&h, "encryption", "backup/tree"), "off");
    // The sender's hierarchy is kept: docs is under secure's root, so one
    // load-key of that root will open both.
    assert_eq!(get(&h, "encryptionroot", "backup/tree/secure"), "backup/tree/secure");
    assert_eq!(get(&h, "encryptionroot", "backup/tree/secure/docs"), "backup/tree/secure");
    assert_eq!(get(&h, "keylocation", "backup/tree/secure/docs"), "none");
    assert_eq!(get(&h, "keylocation", "backup/tree/secure"), "prompt");
    let out = h.tarn_input(&["load-key", "backup/tree/secure/docs"], format!("{pass}\n").as_bytes());
    assert_clean_failure(&out, "load-key of a received child");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an encryption root"), "{}", String::from_utf8_lossy(&out.stderr));
    h.tarn_ok(&["pool", "scrub", "-w", "backup"]);
    let status = h.pool_json("backup");
    assert_eq!(status["scan_stats"]["errors"].as_u64().unwrap_or(0), 0, "scrub without the key: {status:#}");
    assert!(status["scan_stats"]["state"].as_str().is_some_and(|s| s.eq_ignore_ascii_case("finished")), "{status:#}");
    // A wrong passphrase opens nothing; the sender's own opens everything.
    let out = h.tarn_input(&["load-key", "backup/docs"], b"not the passphrase\n");
    assert_clean_failure(&out, "load-key with a wrong passphrase");
    ok_input(&h, &["load-key", "backup/docs"], &format!("{pass}\n"));
    ok_input(&h, &["load-key", "tank/secure"], &format!("{pass}\n"));
    h.tarn_ok(&["mount", "-a"]);
    common::wait_mounted(&dst);
    common::wait_mounted(&src);
    // (Snapshots, which reading cannot change: @c is the head's state.)
    for snap in ["a", "b", "c"] {
        assert_same_tree(&snap_dir(&src, snap), &snap_dir(&dst, snap));
    }

    // -R implies raw for the encrypted datasets of a tree (the others go
    // plain); received without mounting, with this pool's mountpoints. Its
    // docs holds the same master key as backup/docs (two raw copies of one
    // source), yet its key status is its own root's.
    let tree_docs = backup.join("tree/secure/docs");
    assert_eq!(get(&h, "keystatus", "backup/tree/secure/docs"), "unavailable", "another root's load made it available");
    assert_eq!(get(&h, "keystatus", "backup/tree/secure"), "unavailable");
    // The root's passphrase opens the received root and its child.
    ok_input(&h, &["load-key", "backup/tree/secure"], &format!("{pass}\n"));
    assert_eq!(get(&h, "keystatus", "backup/tree/secure"), "available");
    assert_eq!(get(&h, "keystatus", "backup/tree/secure/docs"), "available");
    h.tarn_ok(&["mount", "-a"]);
    common::wait_mounted(&tree_docs);
    assert_same_tree(&snap_dir(&src, "r1"), &snap_dir(&tree_docs, "r1"));
    // Unloading it leaves the other copy, under its own root, readable.
    h.tarn_ok(&["unload-key", "backup/tree/secure"]);
    common::wait_unmounted(&tree_docs);
    assert_eq!(get(&h, "keystatus", "backup/tree/secure/docs"), "unavailable");
    assert_eq!(get(&h, "keystatus", "backup/docs"), "available");
    assert_same_tree(&snap_dir(&src, "c"), &snap_dir(&dst, "c"));
}

#[test]
fn bad_send_and_recv_input_fails_cleanly() {
    let h = Harness::start();
    let (tank, _backup) = pools(&h);
    h.tarn_ok(&["create", "tank/a"]);
    fs::write(tank.join("a/f"), b"x").unwrap();
    h.tarn_ok(&["snapshot", "tank/a@one"]);
    h.tarn_ok(&["snapshot", "tank/a@two"]);
    let garbage = h.dir.join("garbage");
    fs::write(&garbage, b"this is not a stream at all, not even close").unwrap();
    let empty = h.dir.join("empty");
    fs::write(&empty, b"").unwrap();
    let out_file = h.dir.join("out");
    let send = |args: &[&str]| {
        tarn_cmd(&h, &[&["send"], args].concat()).stdout(File::create(&out_file).unwrap()).output().unwrap()
    };
    for (args, what) in [
        (vec!["tank/a@nope"], "a missing snapshot"),
        (vec!["tank/a"], "a dataset, not a snapshot"),
        (vec!["-i", "@two", "tank/a@one"], "a base newer than the snapshot"),
        (vec!["-i", "other/x@one", "tank/a@two"], "a base of another dataset"),
        (vec!["-t", "tarn1-00-00"], "a forged token"),
        (vec!["-t", "nonsense"], "a malformed token"),
        (vec!["nopool/a@x"], "a missing pool"),
    ] {
        assert_clean_failure(&send(&args), &format!("send of {what}"));
    }
    let before = h.tarn_ok(&["list", "-H", "-r", "-t", "all", "-o", "name", "backup"]);
    for (args, file, what) in [
        (vec!["backup/x"], &garbage, "garbage"),
        (vec!["backup/x"], &empty, "an empty stream"),
        (vec!["-o", "nosuchprop=1", "backup/x"], &garbage, "a bad -o"),
        (vec!["-x", "nosuchprop", "backup/x"], &garbage, "a bad -x"),
        (vec!["nopool/x"], &garbage, "a missing pool"),
        (vec!["-A", "backup"], &garbage, "-A without a partial receive"),
        (vec!["bad//name"], &garbage, "a bad name"),
    ] {
        assert_clean_failure(&recv_from(&h, &args, file), &format!("recv of {what}"));
    }
    // A stream into an existing dataset without -F, and an incremental
    // without its base.
    let stream = h.dir.join("one.stream");
    send_to(&h, &["tank/a@one"], &stream);
    recv_ok(&h, &["backup/a"], &stream);
    assert_clean_failure(&recv_from(&h, &["backup/a"], &stream), "a full stream over an existing dataset");
    let inc = h.dir.join("inc.stream");
    send_to(&h, &["-i", "@one", "tank/a@two"], &inc);
    assert_clean_failure(&recv_from(&h, &["backup/other"], &inc), "an incremental without its base");
    // A killed `tarn recv` stops its receive (the stream's writer is still
    // there, so it is the hang-up that stops it, not the end of input).
    {
        use std::io::Write as _;
        let big = h.dir.join("big.stream");
        fs::write(tank.join("a/big"), vec![7u8; 3 << 20]).unwrap();
        h.tarn_ok(&["snapshot", "tank/a@big"]);
        send_to(&h, &["tank/a@big"], &big);
        let bytes = fs::read(&big).unwrap();
        let mut receiver = tarn_cmd(&h, &["recv", "backup/killed"]).stdin(Stdio::piped()).spawn().unwrap();
        let mut stdin = receiver.stdin.take().unwrap();
        stdin.write_all(&bytes[..bytes.len() / 2]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        receiver.kill().unwrap();
        receiver.wait().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let names = h.tarn_ok(&["list", "-H", "-r", "-t", "all", "-o", "name", "backup"]);
            let created = h.tarn(&["create", "backup/killed"]);
            if !names.contains("backup/killed") && created.status.success() {
                h.tarn_ok(&["destroy", "backup/killed"]);
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the receive went on after its tarn recv was killed:\n{names}");
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        drop(stdin);
    }

    // Rotating names: a new snapshot named like an old one the destination
    // still has must not take its place.
    recv_ok(&h, &["backup/a"], &inc);
    h.tarn_ok(&["destroy", "tank/a@one"]);
    h.tarn_ok(&["snapshot", "tank/a@one"]);
    let rotated = h.dir.join("rotated.stream");
    send_to(&h, &["-i", "@two", "tank/a@one"], &rotated);
    let guid_before = get(&h, "guid", "backup/a@one");
    let out = recv_from(&h, &["-F", "backup/a"], &rotated);
    assert_clean_failure(&out, "a received snapshot name already in use");
    assert!(String::from_utf8_lossy(&out.stderr).contains("already has a snapshot named 'backup/a@one'"));
    assert_eq!(get(&h, "guid", "backup/a@one"), guid_before);
    let after = h.tarn_ok(&["list", "-H", "-r", "-t", "all", "-o", "name", "backup"]);
    assert_eq!(after.replace("backup/a\nbackup/a@one\nbackup/a@two\n", ""), before, "only backup/a was received");
}
