//! Issue 9, the pool verbs of the first hour, through the real daemon, CLI
//! and FUSE mount: `pool iostat` (counters that follow the bytes written
//! and read through the mount), `pool list -v`, `pool status -x`,
//! `pool history` (kept in the pool: it moves to another daemon with the
//! pool) and `diff` (exact output after creating, changing, removing and
//! renaming files and directories). Every verb is also given bad input:
//! one line `tarn: ...` and exit 1 (refused) or 2 (usage), never a panic.

mod common;

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{refused, path_str, random_bytes, write_file, Harness};

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

/// The pool's cumulative counters from `pool iostat -j -v`.
fn totals(harness: &Harness, pool: &str) -> serde_json::Value {
    let doc = json(&harness.tarn_ok(&["pool", "iostat", "-j", "-v", "-l", pool]));
    doc["pools"][pool]["vdevs"][pool].clone()
}

fn counter(vdev: &serde_json::Value, key: &str) -> u64 {
    vdev["totals"][key].as_u64().unwrap_or_else(|| panic!("no totals.{key} in {vdev:#}"))
}

fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname").trim().to_string()
}

#[test]
fn iostat_counts_the_bytes_written_and_read_through_the_mount() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(1);
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 3, 256 << 20);
    let mut spec = vec!["raidz1".to_string()];
    spec.extend(devices.iter().map(|p| path_str(p)));
    let root = harness.create_pool("tank", &spec);

    // Written: 8 MiB of incompressible data, fsynced (a txg writes it out).
    const SIZE: u64 = 8 << 20;
    let before = totals(&harness, "tank");
    let data = random_bytes(&mut rng, SIZE as usize);
    let mut file = fs::File::create(root.join("written")).unwrap();
    file.write_all(&data).unwrap();
    file.sync_all().unwrap();
    drop(file);
    let after = totals(&harness, "tank");
    let written = counter(&after, "write_bytes") - counter(&before, "write_bytes");
    assert!(written >= SIZE, "8 MiB written through the mount, the devices took {written} bytes");
    assert!(counter(&after, "write_ops") > counter(&before, "write_ops"));
    assert!(counter(&after, "write_disk_ns") > counter(&before, "write_disk_ns"));
    assert!(counter(&after, "write_total_ns") >= counter(&after, "write_disk_ns"));

    // Read: after export and import (no cache left), the file read back
    // through the mount must come from the devices.
    harness.export("tank");
    let root = harness.import("tank", devices[0].parent().unwrap());
    let before = totals(&harness, "tank");
    assert_eq!(fs::read(root.join("written")).unwrap(), data);
    let after = totals(&harness, "tank");
    let read = counter(&after, "read_bytes") - counter(&before, "read_bytes");
    assert!(read >= SIZE, "8 MiB read through the mount, the devices gave {read} bytes");
    assert!(counter(&after, "read_ops") > counter(&before, "read_ops"));

    // The pool is the sum of its devices; each device did some of it.
    let raidz = &after["vdevs"]["raidz1-0"];
    let leaves: Vec<&serde_json::Value> = raidz["vdevs"].as_object().unwrap().values().collect();
    assert_eq!(leaves.len(), 3);
    for key in ["read_bytes", "write_bytes", "read_ops", "write_ops"] {
        let sum: u64 = leaves.iter().map(|l| counter(l, key)).sum();
        assert_eq!(sum, counter(raidz, key), "{key}: devices vs raidz1-0");
        assert_eq!(sum, counter(&after, key), "{key}: devices vs pool");
    }
    assert!(leaves.iter().all(|l| counter(l, "read_ops") > 0), "every raidz member serves reads: {raidz:#}");
    // -l: average latencies are there once there were operations.
    assert!(after["total_rwait"].as_u64().is_some() && after["disk_rwait"].as_u64().is_some(), "{after:#}");

    // Text forms: one line per pool; -v adds the vdev and its devices.
    let text = harness.tarn_ok(&["pool", "iostat"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].contains("capacity") && lines[0].contains("operations") && lines[0].contains("bandwidth"), "{text}");
    assert_eq!(lines[1].split_whitespace().collect::<Vec<_>>(), ["pool", "alloc", "free", "read", "write", "read", "write"]);
    assert!(lines[3].starts_with("tank "), "{text}");
    let text = harness.tarn_ok(&["pool", "iostat", "-v", "-l", "tank"]);
    assert!(text.contains("total_wait") && text.contains("disk_wait"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("  raidz1-0 ")), "{text}");
    for device in &devices {
        assert!(text.lines().any(|l| l.starts_with(&format!("    {}", path_str(device)))), "{text}");
    }
    let scripted = harness.tarn_ok(&["pool", "iostat", "-H", "-p", "tank"]);
    let fields: Vec<&str> = scripted.trim_end().split('\t').collect();
    assert_eq!(fields.len(), 7, "{scripted}");
    assert_eq!(fields[0], "tank");
    assert!(fields[1..].iter().all(|f| f.parse::<u64>().is_ok()), "{scripted}");

    // An interval and a count: that many reports, the later ones per interval.
    let reports = harness.tarn_ok(&["pool", "iostat", "-j", "tank", "0.2", "3"]);
    let docs: Vec<serde_json::Value> =
        serde_json::Deserializer::from_str(&reports).into_iter().collect::<Result<_, _>>().unwrap();
    assert_eq!(docs.len(), 3);
    let with_y = harness.tarn_ok(&["pool", "iostat", "-y", "-H", "tank", "0.2", "2"]);
    assert_eq!(with_y.lines().count(), 2, "{with_y}");

    // Bad input.
    refused(&harness, &["pool", "iostat", "nosuch"], 1);
    refused(&harness, &["pool", "iostat", "tank", "0"], 2);
    refused(&harness, &["pool", "iostat", "tank", "1", "0"], 2);
    refused(&harness, &["pool", "iostat", "tank", "1", "2.5"], 2);
    refused(&harness, &["pool", "iostat", "tank", "1", "2", "3"], 2);
    refused(&harness, &["pool", "iostat", "tank", "soon1"], 1);
    refused(&harness, &["pool", "iostat", "tank", "1x"], 2);
    refused(&harness, &["pool", "iostat", "-q", "tank"], 2);
}

#[test]
fn list_verbose_and_status_x() {
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 3, 128 << 20);
    let (d0, d1, d2) = (path_str(&devices[0]), path_str(&devices[1]), path_str(&devices[2]));
    harness.create_pool("tank", &["mirror".into(), d0.clone(), d1.clone(), "spare".into(), d2.clone()]);
    let other = harness.vdev_files("other", 1, 128 << 20);
    harness.create_pool("other", &[path_str(&other[0])]);

    let text = harness.tarn_ok(&["pool", "list", "-v", "tank"]);
    let rows: Vec<String> = text.lines().skip(1).map(|l| l.split_whitespace().next().unwrap().to_string()).collect();
    assert_eq!(rows, ["tank", "mirror-0", d0.as_str(), d1.as_str(), "spare", d2.as_str()], "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[2].starts_with("  mirror-0 "), "{text}");
    assert!(lines[3].starts_with(&format!("    {d0}")), "{text}");
    assert!(lines[5].starts_with("spare"), "{text}");
    assert!(lines[6].starts_with(&format!("  {d2}")) && lines[6].ends_with("AVAIL"), "{text}");
    let mirror: Vec<&str> = lines[2].split_whitespace().collect();
    // NAME SIZE ALLOC FREE CHECKPOINT CAP HEALTH
    assert_eq!(mirror.len(), 7, "{text}");
    assert_eq!(mirror[4], "-", "no checkpoint: {text}");
    assert_eq!(mirror[6], "ONLINE");
    let scripted = harness.tarn_ok(&["pool", "list", "-v", "-H", "-p", "-o", "name,size,alloc,health", "tank"]);
    let leaf: Vec<&str> = scripted.lines().nth(2).unwrap().split('\t').collect();
    assert_eq!(leaf, [format!("    {d0}").as_str(), (128u64 << 20).to_string().as_str(), "-", "ONLINE"], "{scripted}");
    let doc = json(&harness.tarn_ok(&["pool", "list", "-v", "-j", "tank"]));
    let mirror = &doc["pools"]["tank"]["vdevs"]["mirror-0"];
    assert_eq!(mirror["vdev_type"], "mirror");
    assert_eq!(mirror["vdevs"][&d1]["state"], "ONLINE");
    assert_eq!(doc["pools"]["tank"]["spares"][&d2]["state"], "AVAIL");

    // status -x: all well, then one pool degraded.
    assert_eq!(harness.tarn_ok(&["pool", "status", "-x"]), "all pools are healthy\n");
    assert_eq!(harness.tarn_ok(&["pool", "status", "-x", "tank"]), "pool 'tank' is healthy\n");
    let empty = json(&harness.tarn_ok(&["pool", "status", "-x", "-j"]));
    assert_eq!(empty["pools"].as_object().map(|m| m.len()), Some(0), "{empty:#}");
    harness.tarn_ok(&["pool", "offline", "tank", &d1]);
    let text = harness.tarn_ok(&["pool", "status", "-x"]);
    assert!(text.contains("  pool: tank") && text.contains(" state: DEGRADED") && text.contains("OFFLINE"), "{text}");
    assert!(!text.contains("pool: other"), "a healthy pool is left out: {text}");
    assert_eq!(harness.tarn_ok(&["pool", "status", "-x", "other"]), "pool 'other' is healthy\n");
    let doc = json(&harness.tarn_ok(&["pool", "status", "-x", "-j"]));
    let pools: Vec<&String> = doc["pools"].as_object().unwrap().keys().collect();
    assert_eq!(pools, ["tank"]);
    let text = harness.tarn_ok(&["pool", "list", "-v", "tank"]);
    assert!(text.lines().any(|l| l.starts_with(&format!("    {d1}")) && l.ends_with("OFFLINE")), "{text}");
    harness.tarn_ok(&["pool", "online", "tank", &d1]);
    harness.wait_status("tank", std::time::Duration::from_secs(60), "back online", |s| s["state"] == "ONLINE");

    refused(&harness, &["pool", "list", "-v", "nosuch"], 1);
    refused(&harness, &["pool", "status", "-x", "nosuch"], 1);
    refused(&harness, &["pool", "status", "-x", "-q"], 2);
}

/// The history lines of `pool history ARGS`, without their timestamps
/// (which must be there, in zpool's form).
fn history(harness: &Harness, args: &[&str]) -> Vec<String> {
    let mut full = vec!["pool", "history"];
    full.extend_from_slice(args);
    let text = harness.tarn_ok(&full);
    let mut lines = text.lines();
    let header = lines.next().unwrap_or("");
    assert!(header.starts_with("History for '") && header.ends_with("':"), "{text}");
    lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (time, rest) = l.split_once(' ').unwrap_or_else(|| panic!("no timestamp: {l}"));
            let b = time.as_bytes();
            assert!(
                b.len() == 19 && b[4] == b'-' && b[7] == b'-' && b[10] == b'.' && b[13] == b':' && b[16] == b':',
                "timestamp not YYYY-MM-DD.HH:MM:SS: {l}"
            );
            rest.to_string()
        })
        .collect()
}

#[test]
fn history_is_kept_in_the_pool_and_moves_with_it() {
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 2, 128 << 20);
    let (d0, d1) = (path_str(&devices[0]), path_str(&devices[1]));
    let mnt = path_str(&harness.mountpoint("tank"));
    harness.create_pool("tank", &["mirror".into(), d0.clone(), d1.clone()]);
    harness.tarn_ok(&["create", "-o", "compression=zstd", "tank/a"]);
    harness.tarn_ok(&["snapshot", "tank/a@one"]);
    harness.tarn_ok(&["set", "atime=off", "tank/a"]);
    // Failed and read-only commands leave nothing.
    refused(&harness, &["create", "tank/a"], 1);
    harness.tarn_ok(&["list"]);
    harness.tarn_ok(&["pool", "status"]);
    harness.tarn_ok(&["destroy", "tank/a@one"]);
    harness.tarn_ok(&["pool", "scrub", "-w", "tank"]);

    let expected = vec![
        format!("tarn pool create -m {mnt} tank mirror {d0} {d1}"),
        "tarn create -o compression=zstd tank/a".to_string(),
        "tarn snapshot tank/a@one".to_string(),
        "tarn set atime=off tank/a".to_string(),
        "tarn destroy tank/a@one".to_string(),
        "tarn pool scrub -w tank".to_string(),
    ];
    assert_eq!(history(&harness, &["tank"]), expected);

    // -l: who and where.
    let host = hostname();
    for line in history(&harness, &["-l", "tank"]) {
        assert!(line.ends_with(&format!(" [user 0 (root) on {host}:linux]")), "{line}");
    }
    // -i: the internal events, with txgs, before each command.
    let internal = history(&harness, &["-i", "tank"]);
    let txg_of = |prefix: &str| -> u64 {
        let line = internal.iter().find(|l| l.contains(prefix)).unwrap_or_else(|| panic!("no '{prefix}' in {internal:#?}"));
        line.trim_start_matches("[txg:").split(']').next().unwrap().parse().unwrap()
    };
    assert!(internal[0].starts_with("[txg:") && internal[0].contains("] create pool version 1; software version tarn-"), "{internal:#?}");
    let created = txg_of("] create tank/a (");
    let snapped = txg_of("] snapshot tank/a@one (");
    let set = txg_of("] set tank/a (");
    let destroyed = txg_of("] destroy tank/a@one (");
    assert!(created < snapped && snapped <= set && set <= destroyed, "txgs out of order: {internal:#?}");
    assert!(internal.iter().any(|l| l.ends_with(") atime=off")), "{internal:#?}");
    assert!(internal.iter().any(|l| l.contains("] scan setup func=scrub")), "{internal:#?}");
    let commands: Vec<&String> = internal.iter().filter(|l| !l.starts_with("[txg:")).collect();
    assert_eq!(commands, expected.iter().collect::<Vec<_>>());
    // The record of a dataset created names its object set id, as zfs does.
    let dsid = |line: &str| line.rsplit_once('(').and_then(|(_, r)| r.split(')').next()).and_then(|n| n.parse::<u64>().ok());
    let create_line = internal.iter().find(|l| l.contains("] create tank/a (")).unwrap();
    assert!(dsid(create_line).is_some_and(|id| id > 0), "{create_line}");

    // Export here, import into another daemon: the history went along.
    harness.export("tank");
    let second = Harness::start();
    second.tarn_ok(&["pool", "import", "-d", &path_str(devices[0].parent().unwrap()), "tank"]);
    let mut moved = expected.clone();
    moved.push("tarn pool export tank".to_string());
    moved.push(format!("tarn pool import -d {} tank", path_str(devices[0].parent().unwrap())));
    assert_eq!(history(&second, &["tank"]), moved);
    let internal = history(&second, &["-i"]);
    assert!(internal.iter().any(|l| l.contains("] import pool version 1")), "{internal:#?}");
    assert_eq!(internal.iter().filter(|l| l.contains("] create tank/a (")).count(), 1, "an import creates nothing: {internal:#?}");
    second.tarn_ok(&["pool", "export", "tank"]);

    refused(&harness, &["pool", "history", "nosuch"], 1);
    refused(&harness, &["pool", "history", "-x"], 2);
}

fn touch(path: &Path, data: &[u8]) {
    write_file(path, data);
}

#[test]
fn diff_shows_what_changed_between_snapshots() {
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 3, 128 << 20);
    let mut spec = vec!["raidz1".to_string()];
    spec.extend(devices.iter().map(|p| path_str(p)));
    let root = harness.create_pool("tank", &spec);
    let m = path_str(&root);

    for name in ["keep", "mod", "del", "old", "chm", "lnk"] {
        touch(&root.join(name), name.as_bytes());
    }
    fs::create_dir(root.join("d1")).unwrap();
    touch(&root.join("d1/inner"), b"inner");
    fs::create_dir(root.join("rmd")).unwrap();
    harness.tarn_ok(&["snapshot", "tank@a"]);

    fs::OpenOptions::new().append(true).open(root.join("mod")).unwrap().write_all(b" and more").unwrap();
    fs::remove_file(root.join("del")).unwrap();
    fs::rename(root.join("old"), root.join("new")).unwrap();
    fs::rename(root.join("d1"), root.join("d2")).unwrap();
    fs::remove_dir(root.join("rmd")).unwrap();
    fs::set_permissions(root.join("chm"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::hard_link(root.join("lnk"), root.join("d2/lnk2")).unwrap();
    touch(&root.join("added"), b"added");
    fs::create_dir(root.join("newdir")).unwrap();
    std::os::unix::fs::symlink("keep", root.join("sym")).unwrap();
    harness.tarn_ok(&["snapshot", "tank@b"]);

    let expected = [
        format!("M\t{m}/"),
        format!("+\t{m}/added"),
        format!("M\t{m}/chm"),
        format!("R\t{m}/d1 -> {m}/d2"),
        format!("-\t{m}/del"),
        format!("M\t{m}/lnk\t(+1)"),
        format!("M\t{m}/mod"),
        format!("+\t{m}/newdir"),
        format!("R\t{m}/old -> {m}/new"),
        format!("-\t{m}/rmd"),
        format!("+\t{m}/sym"),
    ];
    let lines = |text: String| text.lines().map(String::from).collect::<Vec<_>>();
    assert_eq!(lines(harness.tarn_ok(&["diff", "tank@a", "tank@b"])), expected);
    assert_eq!(lines(harness.tarn_ok(&["diff", "tank@a", "@b"])), expected);
    assert_eq!(lines(harness.tarn_ok(&["diff", "@a", "tank@b"])), expected);
    // Nothing changed since @b yet: the live file system is @b.
    assert_eq!(harness.tarn_ok(&["diff", "tank@b"]), "");
    assert_eq!(harness.tarn_ok(&["diff", "tank@b", "tank@b"]), "");

    // -F: the file type column; -H: a tab in renames; -t: the ctime first.
    let classified = lines(harness.tarn_ok(&["diff", "-F", "tank@a", "tank@b"]));
    assert!(classified.contains(&format!("+\t/\t{m}/newdir")), "{classified:#?}");
    assert!(classified.contains(&format!("+\t@\t{m}/sym")), "{classified:#?}");
    assert!(classified.contains(&format!("+\tF\t{m}/added")), "{classified:#?}");
    assert!(classified.contains(&format!("R\t/\t{m}/d1 -> {m}/d2")), "{classified:#?}");
    assert!(classified.contains(&format!("M\t/\t{m}/")), "{classified:#?}");
    let scripted = lines(harness.tarn_ok(&["diff", "-H", "tank@a", "tank@b"]));
    assert!(scripted.contains(&format!("R\t{m}/old\t{m}/new")), "{scripted:#?}");
    let timed = lines(harness.tarn_ok(&["diff", "-t", "tank@a", "tank@b"]));
    assert_eq!(timed.len(), expected.len());
    for (line, plain) in timed.iter().zip(&expected) {
        let (time, rest) = line.split_once('\t').unwrap();
        let (secs, nanos) = time.trim_start().split_once('.').unwrap_or_else(|| panic!("{line}"));
        assert!(secs.parse::<u64>().unwrap() > 1_600_000_000 && nanos.len() == 9 && nanos.parse::<u32>().is_ok(), "{line}");
        assert_eq!(rest, plain);
    }
    let added_ctime = fs::symlink_metadata(root.join("added")).unwrap();
    let wanted = {
        use std::os::unix::fs::MetadataExt;
        format!("{}.{:09}\t+\t{m}/added", added_ctime.ctime(), added_ctime.ctime_nsec())
    };
    assert!(timed.iter().any(|l| l.trim_start() == wanted), "{wanted} not in {timed:#?}");

    // The live file system, with a name that needs escaping.
    fs::remove_file(root.join("keep")).unwrap();
    touch(&root.join("sp ace"), b"x");
    assert_eq!(lines(harness.tarn_ok(&["diff", "tank@b"])), [format!("M\t{m}/"), format!("-\t{m}/keep"), format!("+\t{m}/sp\\0040ace")]);
    assert_eq!(lines(harness.tarn_ok(&["diff", "-h", "tank@b", "tank"])), [format!("M\t{m}/"), format!("-\t{m}/keep"), format!("+\t{m}/sp ace")]);

    // A clone is compared with its origin snapshot.
    harness.tarn_ok(&["clone", "tank@b", "tank/c"]);
    let clone_mnt = root.join("c");
    common::wait_mounted(&clone_mnt);
    touch(&clone_mnt.join("cfile"), b"in the clone");
    let c = path_str(&clone_mnt);
    assert_eq!(lines(harness.tarn_ok(&["diff", "tank@b", "tank/c"])), [format!("M\t{c}/"), format!("+\t{c}/cfile")]);

    // Bad input.
    harness.tarn_ok(&["create", "tank/other"]);
    harness.tarn_ok(&["snapshot", "tank/other@x"]);
    refused(&harness, &["diff", "tank"], 2);
    refused(&harness, &["diff", "tank@"], 2);
    refused(&harness, &["diff", "@a"], 2);
    refused(&harness, &["diff", "@a", "@b"], 2);
    refused(&harness, &["diff", "tank@a", "tank@"], 2);
    refused(&harness, &["diff", "tank@nosuch"], 1);
    refused(&harness, &["diff", "tank@a", "tank@nosuch"], 1);
    refused(&harness, &["diff", "nosuch@a"], 1);
    refused(&harness, &["diff", "tank@b", "tank@a"], 1);
    refused(&harness, &["diff", "tank@a", "tank/other@x"], 1);
    refused(&harness, &["diff", "tank@a", "tank/other"], 1);
    refused(&harness, &["diff", "tank/other@x", "tank"], 1);
    refused(&harness, &["diff", "tank@a", "tank/nosuch"], 1);
    refused(&harness, &["diff", "-Q", "tank@a"], 2);
    refused(&harness, &["diff", "tank@a", "tank@b", "tank"], 2);
    // A snapshot being diffed is not destroyed from under it, and after
    // the diff it can be.
    harness.tarn_ok(&["destroy", "tank@a"]);
    harness.tarn_ok(&["debug", "check", "tank"]);
}
