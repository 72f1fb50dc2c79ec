//! Raw (`send -w`) replication of encrypted datasets, issue 12 test 4: the
//! parts `replication.rs::raw_sends_need_no_key_on_either_side` leaves
//! open, through the real daemon, CLI and FUSE mounts. The sender is a
//! raidz1 of 3, the receiver a mirror of 2 (and the reverse for a
//! restore); a receiving dataset never has its key loaded until the
//! `load-key` (the sender's passphrase) at the end of each test, after
//! which its trees must be identical byte for byte to the sender's
//! (contents, modes, owners, times, xattrs, hard links, symlinks).
//!
//! - `raw_incremental_into_another_layout_loads_with_the_passphrase`: a
//!   single raw incremental (`send -w -i @a fs@b`, sent with the sender's
//!   key unloaded) onto the raw-received `@a`: one raw sub-stream from
//!   `@a`'s guid, no plaintext in it; received keyless, scrubbed and
//!   checked keyless; after `load-key` `@a`, `@b` and the head equal the
//!   sender's, and a sparse file's holes are still holes.
//! - `raw_receives_resume_through_the_cli`: a raw full stream and a raw
//!   `-I` series cut in the middle of a data record (for the series: in
//!   its second sub-stream) and received with `recv -s`: the completed
//!   snapshots stay, `receive_resume_token` names that sub-stream and a
//!   position inside it, `tarn send -t TOKEN | tarn recv -s` finishes the
//!   rest (and sends less than the whole); every snapshot then equals the
//!   sender's.
//! - `damaged_raw_streams_change_nothing`: a raw full stream (into a new
//!   dataset) and a raw incremental (onto its keyless base, with and
//!   without `-F` over a newer local snapshot), each truncated inside a
//!   record, without its END, with a bit flipped in the middle, in the
//!   CRYPT record, or in the wrapped key of the package header, and with
//!   two records swapped: refused in one line, the receiving pool's
//!   datasets, snapshots (and their guids), tokens and key status as
//!   before, `debug check` clean, and the base's contents unchanged once
//!   its key is loaded; the undamaged streams then receive.
//! - `reframed_raw_forgeries_never_read_back_as_data`: the framing is not
//!   secret, so forgeries with record checksums and END recomputed: two
//!   WRITEs reordered (refused by the order rules, nothing changed); two
//!   blocks' sealed contents exchanged, a dnode block's SEAL MAC or the
//!   root MAC changed (received keyless, `debug check` clean): with the
//!   key, refused at load-key or mount, or reads fail with EIO; nothing
//!   reads back as other data.
//! - `restore_is_the_reverse_raw_send`: a backup made raw (`-w`, then
//!   `-w -I` with `recv -s`) holds (`hold`) its snapshots without a key
//!   (destroying a held one is refused); the home dataset is destroyed and
//!   restored with `send -w -R` from the backup under a new name; the
//!   original passphrase opens it and every snapshot and the head are the
//!   trees recorded before the loss.
//!
//! Reproduce a failure: `TARN_SEED=<seed> cargo nextest run -p tarn --test
//! raw_replication` (the seed is printed).

mod common;

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use common::streams::{pipe, recv_from, recv_ok, send_to};
use common::trees::{chown, files_under, set_times, xattr_remove, xattr_set, xattrs};
use common::{
    assert_clean_failure, assert_no_panic, hash_file, mount_type, path_str, random_bytes, refused, wait_mounted,
    wait_unmounted, walk, Harness,
};

const PASS: &str = "raw replication, the gaps";

// ---------------------------------------------------------------------------
// Running the CLI (send and recv: common/streams.rs).

fn ok_input(h: &Harness, args: &[&str], input: &str) {
    let out = h.tarn_input(args, input.as_bytes());
    assert_no_panic(&out, &args.join(" "));
    assert!(
        out.status.success(),
        "tarn {}: {}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr),
        common::tail(&h.daemon_log(), 30)
    );
}

fn load_key(h: &Harness, dataset: &str) {
    ok_input(h, &["load-key", dataset], &format!("{PASS}\n"));
    assert_eq!(get(h, "keystatus", dataset), "available", "{dataset} after load-key");
}

fn get(h: &Harness, prop: &str, name: &str) -> String {
    h.tarn_ok(&["get", "-H", "-o", "value", prop, name]).trim().to_string()
}

fn guid(h: &Harness, snapshot: &str) -> u64 {
    let g = get(h, "guid", snapshot);
    g.parse().unwrap_or_else(|e| panic!("guid of {snapshot}: '{g}': {e}"))
}

/// The snapshots of `dataset`, oldest first.
fn snapshots(h: &Harness, dataset: &str) -> Vec<String> {
    h.tarn_ok(&["list", "-H", "-o", "name", "-t", "snapshot", "-r", dataset]).lines().map(str::to_string).collect()
}

fn check_clean(h: &Harness, pool: &str) {
    let out = h.tarn_ok(&["debug", "check", pool]);
    assert!(out.contains("no damage, leaks or double allocations found"), "debug check {pool}:\n{out}");
}

/// A raidz1 of 3 sends, a mirror of 2 receives.
fn pools(h: &Harness) -> (PathBuf, PathBuf) {
    let a = h.vdev_files("a", 3, 128 << 20);
    let b = h.vdev_files("b", 2, 128 << 20);
    let spec = |kind: &str, devs: &[PathBuf]| [vec![kind.to_string()], devs.iter().map(|p| path_str(p)).collect()].concat();
    let tank = h.create_pool("tank", &spec("raidz1", &a));
    let backup = h.create_pool("backup", &spec("mirror", &b));
    let rows = |pool: &str| common::status_rows(h, pool).join("\n");
    assert!(rows("tank").contains("raidz1") && !rows("tank").contains("mirror"), "{}", rows("tank"));
    assert!(rows("backup").contains("mirror") && !rows("backup").contains("raidz"), "{}", rows("backup"));
    (tank, backup)
}

/// `tank/secret`, an encryption root with the passphrase `PASS`; mounted.
fn encrypted(h: &Harness, tank: &Path) -> PathBuf {
    ok_input(
        h,
        &["create", "-o", "encryption=on", "-o", "keyformat=passphrase", "-o", "pbkdf2iters=100000", "tank/secret"],
        &format!("{PASS}\n{PASS}\n"),
    );
    let src = tank.join("secret");
    wait_mounted(&src);
    src
}

// ---------------------------------------------------------------------------
// Trees: building, changing, digesting (as in replication.rs).

/// A tree with directories, files of random sizes, modes, owners, times,
/// xattrs, hard links, a symlink and a sparse file (a few MiB of data).
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
            xattr_set(&path, "user.tag", &{
                let n = rng.gen_range(1..300);
                random_bytes(rng, n)
            });
        }
        let t = 1_600_000_000 + rng.gen_range(0..100_000_000i64);
        set_times(&path, (t, rng.gen_range(0..1_000_000_000)), (t + 7, rng.gen_range(0..1_000_000_000)));
    }
    fs::hard_link(root.join("f0"), root.join("d1/hard0")).unwrap();
    std::os::unix::fs::symlink("d1/f1", root.join("link")).unwrap();
    chown(&root.join("link"), 4242, 4343);
    fs::set_permissions(root.join("d1"), fs::Permissions::from_mode(0o750)).unwrap();
    xattr_set(&root.join("d1"), "user.dir", b"directory xattr");
    let sparse = File::create(root.join("sparse")).unwrap();
    sparse.set_len(16 << 20).unwrap();
    sparse.write_all_at(&random_bytes(rng, 10_000), 1 << 20).unwrap();
    sparse.write_all_at(&random_bytes(rng, 20_000), 12 << 20).unwrap();
    sparse.sync_all().unwrap();
}

/// Random changes of every kind: appends, overwrites, removals, modes,
/// owners, xattrs, truncations, a new file moved, a hard link, a hole.
fn mutate(root: &Path, rng: &mut ChaCha8Rng, step: usize) {
    let files = files_under(root);
    for _ in 0..6 {
        let path = &files[rng.gen_range(0..files.len())];
        if !path.exists() || path.ends_with("sparse") {
            continue;
        }
        match rng.gen_range(0..7) {
            0 => {
                let mut f = OpenOptions::new().append(true).open(path).unwrap();
                f.write_all(&{
                    let n = rng.gen_range(1..50_000);
                    random_bytes(rng, n)
                })
                .unwrap();
            }
            1 => {
                let f = OpenOptions::new().write(true).open(path).unwrap();
                let at = rng.gen_range(0..300_000);
                f.write_all_at(
                    &{
                        let n = rng.gen_range(1..20_000);
                        random_bytes(rng, n)
                    },
                    at,
                )
                .unwrap();
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
    // A new file of several records, always: every step has data to send.
    let new = root.join(format!("d1/new{step}"));
    let len = 300_000 + rng.gen_range(0..200_000);
    fs::write(&new, random_bytes(rng, len)).unwrap();
    if let Some(target) = files_under(root).into_iter().find(|p| !p.ends_with("sparse")) {
        let _ = fs::hard_link(&target, root.join(format!("link{step}")));
    }
    fs::rename(&new, root.join(format!("d1/d2/moved{step}"))).unwrap();
    let sparse = OpenOptions::new().write(true).open(root.join("sparse")).unwrap();
    sparse.set_len((4 + step as u64) << 20).unwrap();
    sparse.write_all_at(&random_bytes(rng, 5000), (8 + step as u64) << 20).unwrap();
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

/// `got` (a tree's digest) must be `want`, entry for entry.
fn assert_same_digest(want: &[Entry], got: &[Entry], what: &str) {
    assert!(!want.is_empty(), "{what}: the expected tree is empty");
    if want != got {
        let missing: Vec<&str> = want.iter().filter(|e| !got.iter().any(|f| f.path == e.path)).map(|e| e.path.as_str()).collect();
        let extra: Vec<&str> = got.iter().filter(|e| !want.iter().any(|f| f.path == e.path)).map(|e| e.path.as_str()).collect();
        let differ: Vec<String> = want
            .iter()
            .filter_map(|e| got.iter().find(|f| f.path == e.path && *f != e).map(|f| format!("{e:?}\n   vs {f:?}")))
            .take(3)
            .collect();
        panic!("{what}: trees differ:\nmissing: {missing:?}\nextra: {extra:?}\ndiffering:\n{}", differ.join("\n"));
    }
}

fn assert_same_tree(a: &Path, b: &Path) {
    assert_same_digest(&digest(a), &digest(b), &format!("{} vs {}", a.display(), b.display()));
}

fn snap_dir(mount: &Path, snap: &str) -> PathBuf {
    mount.join(".zfs/snapshot").join(snap)
}

// ---------------------------------------------------------------------------
// Streams: the package and its records (docs/send-stream.md).

const BEGIN: u32 = 1;
const OBJECT: u32 = 2;
const FREEOBJECTS: u32 = 3;
const WRITE: u32 = 4;
const END: u32 = 6;
const CRYPT: u32 = 7;
const SEAL: u32 = 8;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// The JSON header of a package.
fn package_header(stream: &[u8]) -> serde_json::Value {
    assert_eq!(&stream[..8], b"TARNPKG1", "not a tarn package");
    let len = u32_at(stream, 12) as usize;
    serde_json::from_slice(&stream[16..16 + len]).expect("the package header is JSON")
}

/// One record of an inner stream: where it starts, its length with the
/// 32-byte frame, its type.
#[derive(Clone, Copy, Debug)]
struct Rec {
    at: usize,
    len: usize,
    ty: u32,
}

fn records(stream: &[u8]) -> Vec<Rec> {
    let header_len = u32_at(stream, 12) as usize;
    let mut at = 16 + header_len + 16;
    let mut out = Vec::new();
    while at + 32 <= stream.len() {
        let ty = u32_at(stream, at);
        let len = u32_at(stream, at + 4) as usize;
        out.push(Rec { at, len: 32 + len, ty });
        at += 32 + len;
    }
    let last = out.last().expect("records");
    assert_eq!(last.at + last.len, stream.len(), "the stream is records up to its last byte");
    out
}

/// A BEGIN record's fields.
#[derive(Debug)]
struct Begin {
    flags: u32,
    index: u32,
    count: u32,
    to_guid: u64,
    from_guid: u64,
}

fn begin(stream: &[u8], rec: Rec) -> Begin {
    assert_eq!(rec.ty, BEGIN);
    let p = rec.at + 32;
    assert_eq!(&stream[p..p + 8], b"TARNSND1");
    Begin {
        flags: u32_at(stream, p + 12),
        index: u32_at(stream, p + 24),
        count: u32_at(stream, p + 28),
        to_guid: u64_at(stream, p + 64),
        from_guid: u64_at(stream, p + 80),
    }
}

/// Index ranges (into `recs`) of the sub-streams, BEGIN to END inclusive.
fn substreams(recs: &[Rec]) -> Vec<std::ops::RangeInclusive<usize>> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, r) in recs.iter().enumerate() {
        match r.ty {
            BEGIN => start = Some(i),
            END => out.push(start.take().expect("END without BEGIN")..=i),
            _ => {}
        }
    }
    out
}

/// A point inside the middle WRITE record among `recs[range]`.
fn cut_in_middle_write(recs: &[Rec], range: std::ops::RangeInclusive<usize>) -> usize {
    let writes: Vec<&Rec> = recs[range].iter().filter(|r| r.ty == WRITE).collect();
    assert!(writes.len() >= 2, "too few WRITE records to cut between: {}", writes.len());
    let w = writes[writes.len() / 2];
    w.at + w.len / 2
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex: {s}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap_or_else(|e| panic!("not hex: {s}: {e}")))
        .collect()
}

/// `receive_resume_token`: `tarn1-` + hex(JSON) + `-` + checksum.
fn token_json(token: &str) -> serde_json::Value {
    let body = token.strip_prefix("tarn1-").unwrap_or_else(|| panic!("not a resume token: {token}"));
    let (json, _) = body.rsplit_once('-').unwrap_or_else(|| panic!("not a resume token: {token}"));
    serde_json::from_slice(&unhex(json)).expect("the token's JSON")
}

/// The inner stream's token (docs/send-stream.md, "Resume").
#[derive(Debug)]
struct Inner {
    index: u32,
    count: u32,
    to_guid: u64,
    object: u64,
}

fn inner_token(json: &serde_json::Value) -> Inner {
    let inner = unhex(json["inner"].as_str().unwrap_or_else(|| panic!("no inner token: {json}")));
    assert_eq!(inner.len(), 128, "{json}");
    assert_eq!(&inner[..4], b"TRT1", "{json}");
    Inner { index: u32_at(&inner, 16), count: u32_at(&inner, 20), to_guid: u64_at(&inner, 24), object: u64_at(&inner, 64) }
}

/// What a failed receive must leave as it was: every dataset, snapshot
/// and bookmark of `pool` by name, each snapshot's guid, each dataset's
/// resume token and key status.
fn pool_state(h: &Harness, pool: &str) -> Vec<String> {
    let names = h.tarn_ok(&["list", "-t", "all", "-H", "-o", "name", "-r", pool]);
    let mut out: Vec<String> = names.lines().map(str::to_string).collect();
    for name in names.lines() {
        if name.contains('@') {
            out.push(format!("{name} guid {}", get(h, "guid", name)));
        } else if !name.contains('#') {
            let props = h.tarn_ok(&["get", "-H", "-o", "value", "receive_resume_token,keystatus", name]);
            out.push(format!("{name}: {}", props.trim().replace('\n', " ")));
        }
    }
    out
}

// ---------------------------------------------------------------------------

#[test]
fn raw_incremental_into_another_layout_loads_with_the_passphrase() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(41);
    let h = Harness::start();
    let (tank, backup) = pools(&h);
    h.tarn_ok(&["set", "atime=off", "backup"]);
    let src = encrypted(&h, &tank);
    populate(&src, &mut rng, 16);
    h.tarn_ok(&["snapshot", "tank/secret@a"]);
    mutate(&src, &mut rng, 1);
    // Plaintext the raw stream must not carry: incompressible content and a
    // file name (a plain stream carries both as they are).
    const NAME: &str = "NAME-MARKER-raw-incremental-8c1f.txt";
    let marker = random_bytes(&mut rng, 256 << 10);
    common::write_file(&src.join(NAME), &marker);
    h.tarn_ok(&["snapshot", "tank/secret@b"]);
    let (guid_a, guid_b) = (guid(&h, "tank/secret@a"), guid(&h, "tank/secret@b"));

    let dir = h.dir.join("streams");
    fs::create_dir_all(&dir).unwrap();
    let (full, inc) = (dir.join("full"), dir.join("inc"));
    send_to(&h, &["-w", "tank/secret@a"], &full);
    recv_ok(&h, &["backup/secret"], &full);
    let dst = backup.join("secret");
    assert_eq!(get(&h, "keystatus", "backup/secret"), "unavailable");
    assert!(mount_type(&dst).is_none(), "mounted without its key");

    // The incremental, sent with the sender's key unloaded too.
    h.tarn_ok(&["unload-key", "tank/secret"]);
    wait_unmounted(&src);
    send_to(&h, &["-w", "-i", "@a", "tank/secret@b"], &inc);
    let bytes = fs::read(&inc).unwrap();
    let header = package_header(&bytes);
    assert_eq!(header["send"]["series"], false, "{header:#}");
    assert_eq!(header["send"]["raw"], true, "{header:#}");
    let ds = &header["datasets"];
    assert_eq!(ds.as_array().map(Vec::len), Some(1), "{header:#}");
    assert_eq!(ds[0]["base"]["name"], "a", "{header:#}");
    assert_eq!(ds[0]["base"]["guid"].as_u64(), Some(guid_a), "{header:#}");
    let made: Vec<&str> = ds[0]["snapshots"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(made, ["b"], "{header:#}");
    assert_eq!(ds[0]["crypt"]["cipher"], "aes-256-gcm", "{header:#}");
    let recs = records(&bytes);
    let subs = substreams(&recs);
    assert_eq!(subs.len(), 1, "-i is one sub-stream");
    let b = begin(&bytes, recs[0]);
    assert_eq!(b.flags & 1, 1, "BEGIN of -w -i is not RAW: {b:?}");
    assert_eq!((b.index, b.count, b.from_guid, b.to_guid), (0, 1, guid_a, guid_b), "{b:?}");
    assert_eq!(recs[1].ty, CRYPT, "a raw sub-stream starts BEGIN, CRYPT");
    assert!(recs.iter().any(|r| r.ty == SEAL) && recs.iter().any(|r| r.ty == WRITE));
    assert!(!bytes.windows(64).any(|w| w == &marker[1000..1064]), "file contents in clear in the raw stream");
    assert!(!bytes.windows(NAME.len()).any(|w| w == NAME.as_bytes()), "a file name in clear in the raw stream");

    // Received with no key anywhere.
    recv_ok(&h, &["backup/secret"], &inc);
    assert_eq!(snapshots(&h, "backup/secret"), ["backup/secret@a", "backup/secret@b"]);
    assert_eq!(guid(&h, "backup/secret@b"), guid_b, "a received snapshot keeps its guid");
    assert_eq!(get(&h, "keystatus", "backup/secret"), "unavailable");
    assert_eq!(get(&h, "encryptionroot", "backup/secret"), "backup/secret");
    assert_eq!(get(&h, "receive_resume_token", "backup/secret"), "-");
    assert!(mount_type(&dst).is_none(), "mounted without its key");
    h.tarn_ok(&["pool", "scrub", "-w", "backup"]);
    let status = h.pool_json("backup");
    assert_eq!(status["scan_stats"]["errors"].as_u64(), Some(0), "scrub without the key: {status:#}");
    assert!(status["scan_stats"]["state"].as_str().is_some_and(|s| s.eq_ignore_ascii_case("finished")), "{status:#}");
    check_clean(&h, "backup");

    // The sender's passphrase opens the copy: the same trees.
    load_key(&h, "tank/secret");
    load_key(&h, "backup/secret");
    h.tarn_ok(&["mount", "-a"]);
    wait_mounted(&src);
    wait_mounted(&dst);
    for snap in ["a", "b"] {
        assert_same_tree(&snap_dir(&src, snap), &snap_dir(&dst, snap));
    }
    assert_same_tree(&snap_dir(&src, "b"), &dst);
    assert_eq!(fs::read(dst.join(NAME)).unwrap(), marker);
    // Holes stayed holes: a few KiB of data in a file of 9 MiB.
    let sparse = fs::metadata(dst.join("sparse")).unwrap();
    assert!(sparse.len() > 8 << 20 && sparse.blocks() * 512 < 1 << 20, "sparse: {} bytes, {} blocks", sparse.len(), sparse.blocks());
    check_clean(&h, "backup");
    // The control of the plaintext search: a plain send (key loaded) of the
    // same incremental carries the contents and the name.
    let plain = dir.join("plain");
    send_to(&h, &["-i", "@a", "tank/secret@b"], &plain);
    let bytes = fs::read(&plain).unwrap();
    assert_eq!(begin(&bytes, records(&bytes)[0]).flags & 1, 0, "a send without -w is not raw");
    assert!(bytes.windows(64).any(|w| w == &marker[1000..1064]), "the search does not find contents in a plain stream");
    assert!(bytes.windows(NAME.len()).any(|w| w == NAME.as_bytes()), "the search does not find a name in a plain stream");
}

#[test]
fn raw_receives_resume_through_the_cli() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(42);
    let h = Harness::start();
    let (tank, backup) = pools(&h);
    let src = encrypted(&h, &tank);
    populate(&src, &mut rng, 16);
    h.tarn_ok(&["snapshot", "tank/secret@a"]);
    for (step, snap) in ["b", "c", "d"].into_iter().enumerate() {
        mutate(&src, &mut rng, step + 1);
        h.tarn_ok(&["snapshot", &format!("tank/secret@{snap}")]);
    }
    let guids: Vec<u64> = ["a", "b", "c", "d"].iter().map(|s| guid(&h, &format!("tank/secret@{s}"))).collect();
    h.tarn_ok(&["unload-key", "tank/secret"]);
    wait_unmounted(&src);

    let dir = h.dir.join("streams");
    fs::create_dir_all(&dir).unwrap();
    let (full, series, cut) = (dir.join("full"), dir.join("series"), dir.join("cut"));
    send_to(&h, &["-w", "tank/secret@a"], &full);
    send_to(&h, &["-w", "-I", "@a", "tank/secret@d"], &series);
    let sbytes = fs::read(&series).unwrap();
    let srecs = records(&sbytes);
    let subs = substreams(&srecs);
    assert_eq!(subs.len(), 3, "-I @a @d: three sub-streams");
    for (k, sub) in subs.iter().enumerate() {
        let b = begin(&sbytes, srecs[*sub.start()]);
        assert_eq!((b.flags & 1, b.index, b.count, b.to_guid), (1, k as u32, 3, guids[k + 1]), "sub-stream {k}: {b:?}");
    }

    // A full raw stream cut inside a data record.
    let fbytes = fs::read(&full).unwrap();
    let frecs = records(&fbytes);
    let at = cut_in_middle_write(&frecs, 0..=frecs.len() - 1);
    fs::write(&cut, &fbytes[..at]).unwrap();
    let out = recv_from(&h, &["-s", "backup/full"], &cut);
    assert_clean_failure(&out, &format!("recv -s of a raw full stream cut at {at} of {}", fbytes.len()));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tarn send -t"), "{}", String::from_utf8_lossy(&out.stderr));
    let token = get(&h, "receive_resume_token", "backup/full");
    assert_ne!(token, "-", "no receive_resume_token after an interrupted recv -s");
    let json = token_json(&token);
    assert_eq!(json["spec"]["snapshot"], "tank/secret@a", "{json:#}");
    assert_eq!(json["spec"]["raw"], true, "{json:#}");
    let inner = inner_token(&json);
    assert_eq!((inner.index, inner.count, inner.to_guid), (0, 1, guids[0]), "{inner:?}");
    assert!(inner.object > 0, "the position is inside the stream: {inner:?}");
    assert!(snapshots(&h, "backup/full").is_empty(), "a snapshot from a cut full stream");
    assert_eq!(get(&h, "keystatus", "backup/full"), "unavailable");
    assert!(mount_type(&backup.join("full")).is_none(), "partial state mounted");
    pipe(&h, &["-t", &token], &["-s", "backup/full"]);
    assert_eq!(get(&h, "receive_resume_token", "backup/full"), "-");
    assert_eq!(snapshots(&h, "backup/full"), ["backup/full@a"]);
    assert_eq!(guid(&h, "backup/full@a"), guids[0]);

    // The series, cut in the middle of its second sub-stream (@b→@c).
    recv_ok(&h, &["backup/series"], &full);
    let at = cut_in_middle_write(&srecs, subs[1].clone());
    fs::write(&cut, &sbytes[..at]).unwrap();
    let out = recv_from(&h, &["-s", "backup/series"], &cut);
    assert_clean_failure(&out, &format!("recv -s of a raw series cut at {at} of {}", sbytes.len()));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tarn send -t"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(snapshots(&h, "backup/series"), ["backup/series@a", "backup/series@b"], "the first sub-stream completed");
    assert_eq!(guid(&h, "backup/series@b"), guids[1]);
    let token = get(&h, "receive_resume_token", "backup/series");
    assert_ne!(token, "-", "no receive_resume_token after an interrupted recv -s");
    let json = token_json(&token);
    assert_eq!(json["spec"]["raw"], true, "{json:#}");
    assert_eq!(json["spec"]["series"], true, "{json:#}");
    assert_eq!(json["spec"]["snapshot"], "tank/secret@d", "{json:#}");
    let inner = inner_token(&json);
    assert_eq!((inner.index, inner.count, inner.to_guid), (1, 3, guids[2]), "resumes the second sub-stream: {inner:?}");
    assert!(inner.object > 0, "the position is inside the sub-stream: {inner:?}");
    assert_eq!(get(&h, "keystatus", "backup/series"), "unavailable");
    assert!(mount_type(&backup.join("series")).is_none(), "partial state mounted");
    // The resumed stream starts inside sub-stream 1: it leaves out all of
    // sub-stream 0 and what of sub-stream 1 arrived.
    let resumed = dir.join("resumed");
    send_to(&h, &["-t", &token], &resumed);
    let rbytes = fs::read(&resumed).unwrap();
    let rrecs = records(&rbytes);
    let rb = begin(&rbytes, rrecs[0]);
    assert_eq!((rb.flags & 3, rb.index, rb.to_guid), (3, 1, guids[2]), "the resumed stream: RAW|RESUME from sub-stream 1: {rb:?}");
    let rsubs = substreams(&rrecs);
    assert_eq!(rsubs.len(), 2, "the resumed stream: sub-streams 1 and 2");
    let span = |recs: &[Rec], r: &std::ops::RangeInclusive<usize>| recs[*r.end()].at + recs[*r.end()].len - recs[*r.start()].at;
    assert!(
        span(&rrecs, &rsubs[0]) < span(&srecs, &subs[1]),
        "the resumed sub-stream 1 ({} bytes) is not shorter than the whole one ({})",
        span(&rrecs, &rsubs[0]),
        span(&srecs, &subs[1])
    );
    assert_eq!(span(&rrecs, &rsubs[1]), span(&srecs, &subs[2]), "sub-stream 2, resent whole");
    pipe(&h, &["-t", &token], &["-s", "backup/series"]);
    assert_eq!(get(&h, "receive_resume_token", "backup/series"), "-");
    let want: Vec<String> = ["a", "b", "c", "d"].iter().map(|s| format!("backup/series@{s}")).collect();
    assert_eq!(snapshots(&h, "backup/series"), want);
    for (s, g) in want.iter().zip(&guids) {
        assert_eq!(guid(&h, s), *g, "{s}");
    }
    assert_eq!(get(&h, "keystatus", "backup/series"), "unavailable");
    check_clean(&h, "backup");

    // The keys, at last.
    for ds in ["tank/secret", "backup/full", "backup/series"] {
        load_key(&h, ds);
    }
    h.tarn_ok(&["mount", "-a"]);
    for m in [&src, &backup.join("full"), &backup.join("series")] {
        wait_mounted(m);
    }
    assert_same_tree(&snap_dir(&src, "a"), &snap_dir(&backup.join("full"), "a"));
    for s in ["a", "b", "c", "d"] {
        assert_same_tree(&snap_dir(&src, s), &snap_dir(&backup.join("series"), s));
    }
}

/// Damaged copies of a raw package: what was done, the bytes.
fn damaged_copies(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let recs = records(bytes);
    let last = *recs.last().unwrap();
    assert_eq!(last.ty, END);
    let mut out = Vec::new();
    let at = cut_in_middle_write(&recs, 0..=recs.len() - 1);
    out.push((format!("truncated at {at}, inside a WRITE record"), bytes[..at].to_vec()));
    out.push(("truncated before its END record".to_string(), bytes[..last.at].to_vec()));
    let mut b = bytes.to_vec();
    let at = bytes.len() / 2;
    b[at] ^= 0x04;
    out.push((format!("bit 2 of byte {at} (the middle) flipped"), b));
    let crypt = recs.iter().find(|r| r.ty == CRYPT).expect("a CRYPT record");
    let mut b = bytes.to_vec();
    b[crypt.at + 32 + 16] ^= 0x01; // the meta-dnode block count
    out.push(("a bit of the CRYPT record flipped".to_string(), b));
    // The wrapped master key in the header: another hex digit.
    let header_end = 16 + u32_at(bytes, 12) as usize;
    let key = b"\"wrapped\":\"";
    let pos = bytes[..header_end].windows(key.len()).position(|w| w == key).expect("a wrapped key in the header") + key.len() + 10;
    let mut b = bytes.to_vec();
    b[pos] = if b[pos] == b'0' { b'1' } else { b'0' };
    out.push(("a digit of the header's wrapped key changed".to_string(), b));
    // Two neighbouring records of the sub-stream swapped: WRITEs if there
    // are two in a row, and the last SEAL with the record after it.
    let swap = |i: usize| {
        let (a, c) = (recs[i], recs[i + 1]);
        let mut b = bytes[..a.at].to_vec();
        b.extend_from_slice(&bytes[c.at..c.at + c.len]);
        b.extend_from_slice(&bytes[a.at..a.at + a.len]);
        b.extend_from_slice(&bytes[c.at + c.len..]);
        assert!(b != bytes, "swapping records {i} and {} changed nothing", i + 1);
        (format!("records {i} (type {}) and {} (type {}) swapped", a.ty, i + 1, c.ty), b)
    };
    let middle = recs.len() / 2;
    let i = (middle..recs.len() - 2)
        .chain(1..middle)
        .find(|&i| recs[i].ty == WRITE && recs[i + 1].ty == WRITE && bytes[recs[i].at + 32..recs[i].at + recs[i].len] != bytes[recs[i + 1].at + 32..recs[i + 1].at + recs[i + 1].len])
        .expect("two WRITE records in a row");
    out.push(swap(i));
    let seal = recs.iter().rposition(|r| r.ty == SEAL).expect("a SEAL record");
    assert!(matches!(recs[seal + 1].ty, OBJECT | FREEOBJECTS), "after the SEALs: {:?}", recs[seal + 1]);
    out.push(swap(seal));
    out
}

#[test]
fn damaged_raw_streams_change_nothing() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(43);
    let h = Harness::start();
    let (tank, backup) = pools(&h);
    h.tarn_ok(&["set", "atime=off", "backup"]);
    let src = encrypted(&h, &tank);
    populate(&src, &mut rng, 16);
    h.tarn_ok(&["snapshot", "tank/secret@a"]);
    mutate(&src, &mut rng, 1);
    h.tarn_ok(&["snapshot", "tank/secret@b"]);
    let dir = h.dir.join("streams");
    fs::create_dir_all(&dir).unwrap();
    let (full, inc, bad) = (dir.join("full"), dir.join("inc"), dir.join("bad"));
    send_to(&h, &["-w", "tank/secret@a"], &full);
    send_to(&h, &["-w", "-i", "@a", "tank/secret@b"], &inc);
    // The base of the incremental, received raw; no key on this side.
    recv_ok(&h, &["backup/base"], &full);
    assert_eq!(get(&h, "keystatus", "backup/base"), "unavailable");
    let base_guid = guid(&h, "backup/base@a");

    let mut refusals = 0;
    // Into a new dataset, onto the base, then onto the base with -F over a
    // newer local snapshot that only a whole stream may destroy.
    for (what, stream, args) in [
        ("full", &full, vec!["backup/fresh"]),
        ("incremental", &inc, vec!["backup/base"]),
        ("incremental -F", &inc, vec!["-F", "backup/base"]),
    ] {
        if args[0] == "-F" {
            h.tarn_ok(&["snapshot", "backup/base@precious"]);
        }
        let bytes = fs::read(stream).unwrap();
        for (damage, damaged) in damaged_copies(&bytes) {
            fs::write(&bad, &damaged).unwrap();
            let before = pool_state(&h, "backup");
            let out = recv_from(&h, &args, &bad);
            let context = format!("recv {} of the raw {what} stream, {damage}", args.join(" "));
            assert_clean_failure(&out, &context);
            assert_eq!(out.status.code(), Some(1), "{context}: {}", String::from_utf8_lossy(&out.stderr));
            assert_eq!(pool_state(&h, "backup"), before, "{context}: the receiving pool changed");
            refusals += 1;
        }
    }
    assert_eq!(refusals, 3 * 7);
    let names = h.tarn_ok(&["list", "-t", "all", "-H", "-o", "name", "-r", "backup"]);
    assert_eq!(names, "backup\nbackup/base\nbackup/base@a\nbackup/base@precious\n");
    assert_eq!(guid(&h, "backup/base@a"), base_guid);
    check_clean(&h, "backup");

    // The base's contents, with its key, are @a's.
    load_key(&h, "backup/base");
    h.tarn_ok(&["mount", "-a"]);
    let base = backup.join("base");
    wait_mounted(&base);
    assert_same_tree(&snap_dir(&src, "a"), &base);
    assert_same_tree(&snap_dir(&src, "a"), &snap_dir(&base, "a"));
    h.tarn_ok(&["unload-key", "backup/base"]);
    wait_unmounted(&base);

    // The undamaged streams are received (keyless), -F destroying @precious.
    recv_ok(&h, &["-F", "backup/base"], &inc);
    recv_ok(&h, &["backup/fresh"], &full);
    assert_eq!(snapshots(&h, "backup/base"), ["backup/base@a", "backup/base@b"]);
    assert_eq!(snapshots(&h, "backup/fresh"), ["backup/fresh@a"]);
    check_clean(&h, "backup");
    load_key(&h, "backup/base");
    load_key(&h, "backup/fresh");
    h.tarn_ok(&["mount", "-a"]);
    wait_mounted(&base);
    wait_mounted(&backup.join("fresh"));
    assert_same_tree(&snap_dir(&src, "b"), &snap_dir(&base, "b"));
    assert_same_tree(&snap_dir(&src, "b"), &base);
    assert_same_tree(&snap_dir(&src, "a"), &snap_dir(&backup.join("fresh"), "a"));
}

// ---------------------------------------------------------------------------
// Forgeries with valid framing: the record checksums and END's hash are not
// secret, so whoever can change a stream can recompute them. What stops a
// forged raw stream then is the receiver's order checks and the MACs.

fn blake3(data: &[u8]) -> [u8; 32] {
    tarn_block::checksum::compute(tarn_block::ChecksumKind::Blake3, data)
}

/// Appends one framed record (docs/send-stream.md, "Record frame").
fn push_record(out: &mut Vec<u8>, stream_guid: &[u8], series_index: &[u8], seq: u64, ty: u32, payload: &[u8]) {
    let mut header = Vec::with_capacity(16);
    header.extend_from_slice(&ty.to_le_bytes());
    header.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    header.extend_from_slice(&seq.to_le_bytes());
    let sum = blake3(&[stream_guid, series_index, &header, payload].concat());
    out.extend_from_slice(&header);
    out.extend_from_slice(&sum[..16]);
    out.extend_from_slice(payload);
}

/// The package `bytes` (one dataset, one sub-stream) with its records
/// (type, payload; END left out) changed by `edit`, then framed anew:
/// sequence numbers, record checksums and END all valid.
fn reframed(bytes: &[u8], edit: impl FnOnce(&mut Vec<(u32, Vec<u8>)>)) -> Vec<u8> {
    let recs = records(bytes);
    assert_eq!(substreams(&recs).len(), 1, "one sub-stream");
    let mut list: Vec<(u32, Vec<u8>)> = recs[..recs.len() - 1].iter().map(|r| (r.ty, bytes[r.at + 32..r.at + r.len].to_vec())).collect();
    edit(&mut list);
    assert_eq!(list[0].0, BEGIN);
    let (guid, index) = (list[0].1[16..24].to_vec(), list[0].1[24..28].to_vec());
    let mut out = bytes[..recs[0].at].to_vec();
    let start = out.len();
    for (seq, (ty, payload)) in list.iter().enumerate() {
        push_record(&mut out, &guid, &index, seq as u64, *ty, payload);
    }
    let n = list.len() as u64;
    let body = &out[start..];
    let end = [&n.to_le_bytes()[..], &(body.len() as u64).to_le_bytes(), &blake3(body)].concat();
    push_record(&mut out, &guid, &index, n, END, &end);
    out
}

/// Every file of `reference` read through `copy`: the same bytes, mode,
/// owner and size, or EIO. Returns the paths that failed.
fn reads_true_or_fail(reference: &Path, copy: &Path) -> Vec<String> {
    let mut failed = Vec::new();
    for rel in walk(reference) {
        let (want, got) = (reference.join(&rel), copy.join(&rel));
        let m = fs::symlink_metadata(&want).unwrap();
        if !m.is_file() {
            continue;
        }
        let read = fs::symlink_metadata(&got).and_then(|g| fs::read(&got).map(|data| (g, data)));
        match read {
            Ok((g, data)) => {
                assert!(data == fs::read(&want).unwrap(), "{}: a forged raw stream read back as other data", rel.display());
                assert_eq!((g.mode(), g.uid(), g.gid(), g.size()), (m.mode(), m.uid(), m.gid(), m.size()), "{}", rel.display());
            }
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EIO), "{}: {e}", rel.display());
                failed.push(rel.display().to_string());
            }
        }
    }
    failed
}

#[test]
fn reframed_raw_forgeries_never_read_back_as_data() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(45);
    let h = Harness::start();
    let (tank, backup) = pools(&h);
    h.tarn_ok(&["set", "atime=off", "backup"]);
    let src = encrypted(&h, &tank);
    populate(&src, &mut rng, 16);
    h.tarn_ok(&["snapshot", "tank/secret@a"]);
    mutate(&src, &mut rng, 1);
    h.tarn_ok(&["snapshot", "tank/secret@b"]);
    let dir = h.dir.join("streams");
    fs::create_dir_all(&dir).unwrap();
    let (full, inc, forged) = (dir.join("full"), dir.join("inc"), dir.join("forged"));
    send_to(&h, &["-w", "tank/secret@a"], &full);
    send_to(&h, &["-w", "-i", "@a", "tank/secret@b"], &inc);
    let bytes = fs::read(&inc).unwrap();
    assert!(reframed(&bytes, |_| {}) == bytes, "framing anew an unchanged stream gives other bytes");

    // Reordered: two WRITEs exchanged, framing valid: the order rules refuse it.
    recv_ok(&h, &["backup/base"], &full);
    let recs = records(&bytes);
    let i = (1..recs.len() - 2).find(|&i| recs[i].ty == WRITE && recs[i + 1].ty == WRITE).expect("two WRITEs in a row");
    fs::write(&forged, reframed(&bytes, |l| l.swap(i, i + 1))).unwrap();
    let before = pool_state(&h, "backup");
    let out = recv_from(&h, &["backup/base"], &forged);
    assert_clean_failure(&out, "recv of a reordered raw stream with valid framing");
    eprintln!("reordered, framing valid: {}", String::from_utf8_lossy(&out.stderr).trim());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(pool_state(&h, "backup"), before, "a refused reordered stream changed the pool");

    // Forged contents, framing valid: received or not, nothing may read
    // back as data it is not, and the forgery must show somewhere.
    let payload = |r: &Rec| bytes[r.at + 32..r.at + r.len].to_vec();
    let writes: Vec<usize> = (0..recs.len()).filter(|&i| recs[i].ty == WRITE).collect();
    let (w1, w2) = writes
        .iter()
        .flat_map(|&a| writes.iter().map(move |&b| (a, b)))
        .find(|&(a, b)| {
            let (pa, pb) = (payload(&recs[a]), payload(&recs[b]));
            a < b && pa[..8] == pb[..8] && pa[24..28] == pb[24..28] && pa[64..] != pb[64..]
        })
        .expect("two blocks of one object with ciphertexts of one length");
    let seal = recs.iter().position(|r| r.ty == SEAL).expect("a SEAL");
    let crypt = recs.iter().position(|r| r.ty == CRYPT).expect("a CRYPT");
    let forgeries: Vec<(&str, Vec<u8>)> = vec![
        (
            "two blocks' sealed contents exchanged",
            reframed(&bytes, |l| {
                // (The list holds the records before END at their indices.)
                let (a, b) = (l[w1].1.clone(), l[w2].1.clone());
                l[w1].1 = [&a[..24], &b[24..]].concat();
                l[w2].1 = [&b[..24], &a[24..]].concat();
            }),
        ),
        ("a dnode block's SEAL MAC changed", reframed(&bytes, |l| l[seal].1[24] ^= 0x01)),
        ("the object set's root MAC changed", reframed(&bytes, |l| l[crypt].1[24] ^= 0x01)),
    ];
    for (k, (what, stream)) in forgeries.into_iter().enumerate() {
        let ds = format!("backup/forged{k}");
        recv_ok(&h, &[&ds], &full);
        fs::write(&forged, &stream).unwrap();
        let before = pool_state(&h, "backup");
        let out = recv_from(&h, &[&ds], &forged);
        let noticed = if !out.status.success() {
            assert_clean_failure(&out, what);
            assert_eq!(pool_state(&h, "backup"), before, "{what}: refused, yet the pool changed");
            format!("refused by recv: {}", String::from_utf8_lossy(&out.stderr).trim())
        } else {
            assert_eq!(snapshots(&h, &ds), [format!("{ds}@a"), format!("{ds}@b")], "{what}");
            check_clean(&h, "backup");
            let out = h.tarn_input(&["load-key", &ds], format!("{PASS}\n").as_bytes());
            if !out.status.success() {
                assert_clean_failure(&out, &format!("load-key after {what}"));
                format!("load-key refused: {}", String::from_utf8_lossy(&out.stderr).trim())
            } else {
                let out = h.tarn(&["mount", &ds]);
                if !out.status.success() {
                    assert_clean_failure(&out, &format!("mount after {what}"));
                    format!("mount refused: {}", String::from_utf8_lossy(&out.stderr).trim())
                } else {
                    let mnt = backup.join(ds.strip_prefix("backup/").unwrap());
                    wait_mounted(&mnt);
                    let failed = reads_true_or_fail(&snap_dir(&src, "b"), &mnt);
                    assert!(!failed.is_empty(), "{what}: received, opened and read back with no error");
                    format!("reads of {failed:?} fail with EIO")
                }
            }
        };
        eprintln!("{what}: {noticed}");
    }
    check_clean(&h, "backup");
}

#[test]
fn restore_is_the_reverse_raw_send() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(44);
    let h = Harness::start();
    let (tank, backup) = pools(&h);
    h.tarn_ok(&["set", "atime=off", "tank"]);
    let src = encrypted(&h, &tank);
    populate(&src, &mut rng, 16);
    h.tarn_ok(&["snapshot", "tank/secret@a"]);
    mutate(&src, &mut rng, 1);
    h.tarn_ok(&["snapshot", "tank/secret@b"]);
    mutate(&src, &mut rng, 2);
    h.tarn_ok(&["snapshot", "tank/secret@c"]);
    let snaps = ["a", "b", "c"];
    let recorded: Vec<Vec<Entry>> = snaps.iter().map(|s| digest(&snap_dir(&src, s))).collect();
    let head = digest(&src);
    let guids: Vec<u64> = snaps.iter().map(|s| guid(&h, &format!("tank/secret@{s}"))).collect();

    // The backup: full, then the rest as a resumable series (issue 12's
    // `tarn send -w -I @a tank/secure@c | ssh backup tarn recv -s ...`).
    pipe(&h, &["-w", "tank/secret@a"], &["backup/secret"]);
    pipe(&h, &["-w", "-I", "@a", "tank/secret@c"], &["-s", "backup/secret"]);
    let bsnaps: Vec<String> = snaps.iter().map(|s| format!("backup/secret@{s}")).collect();
    assert_eq!(snapshots(&h, "backup/secret"), bsnaps);
    assert_eq!(get(&h, "keystatus", "backup/secret"), "unavailable");
    assert!(mount_type(&backup.join("secret")).is_none(), "the backup mounted without its key");

    // The backup holds its snapshots without the key.
    h.tarn_ok(&["hold", "keep", "backup/secret@a"]);
    let holds = h.tarn_ok(&["holds", "-H", "backup/secret@a"]);
    assert!(holds.starts_with("backup/secret@a\tkeep\t") && holds.lines().count() == 1, "{holds}");
    assert_eq!(get(&h, "userrefs", "backup/secret@a"), "1");
    let e = refused(&h, &["destroy", "backup/secret@a"], 1);
    assert!(e.contains("held") || e.contains("hold"), "{e}");
    let e = refused(&h, &["destroy", "backup/secret@%b"], 1);
    assert!(e.contains("held") || e.contains("hold"), "{e}");
    assert_eq!(snapshots(&h, "backup/secret"), bsnaps, "a refused destroy destroyed something");
    assert_eq!(guid(&h, "backup/secret@a"), guids[0]);

    // Home loses the dataset.
    h.tarn_ok(&["unload-key", "tank/secret"]);
    wait_unmounted(&src);
    h.tarn_ok(&["destroy", "-r", "tank/secret"]);
    assert!(!h.tarn_ok(&["list", "-H", "-o", "name", "-r", "tank"]).contains("tank/secret"));

    // Restored from the backup, raw, under a new name; the backup's key
    // never loaded.
    pipe(&h, &["-w", "-R", "backup/secret@c"], &["tank/restored"]);
    let rsnaps: Vec<String> = snaps.iter().map(|s| format!("tank/restored@{s}")).collect();
    assert_eq!(snapshots(&h, "tank/restored"), rsnaps);
    for (s, g) in rsnaps.iter().zip(&guids) {
        assert_eq!(guid(&h, s), *g, "{s}");
    }
    assert_eq!(get(&h, "keystatus", "tank/restored"), "unavailable");
    assert_eq!(get(&h, "encryptionroot", "tank/restored"), "tank/restored");
    assert_eq!(get(&h, "keyformat", "tank/restored"), "passphrase");
    let restored = tank.join("restored");
    assert!(mount_type(&restored).is_none(), "mounted without its key");
    let out = h.tarn_input(&["load-key", "tank/restored"], b"not the passphrase\n");
    assert_clean_failure(&out, "load-key with a wrong passphrase");
    assert_eq!(get(&h, "keystatus", "tank/restored"), "unavailable");
    load_key(&h, "tank/restored");
    h.tarn_ok(&["mount", "-a"]);
    wait_mounted(&restored);
    for (s, want) in snaps.iter().zip(&recorded) {
        assert_same_digest(want, &digest(&snap_dir(&restored, s)), &format!("restored @{s}"));
    }
    assert_same_digest(&head, &digest(&restored), "the restored head");
    assert_eq!(get(&h, "keystatus", "backup/secret"), "unavailable", "the backup's key was loaded");
    check_clean(&h, "tank");
    check_clean(&h, "backup");

    // It was the hold that kept @a.
    h.tarn_ok(&["release", "keep", "backup/secret@a"]);
    h.tarn_ok(&["destroy", "backup/secret@a"]);
    assert_eq!(snapshots(&h, "backup/secret"), bsnaps[1..].to_vec());
}
