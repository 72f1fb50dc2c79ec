//! Issue 11, log vdevs (SLOG) through the real daemon, CLI and FUSE mount:
//! `pool create ... log mirror ...`, `pool add ... log`, the `logs`
//! section of `pool status` (text and JSON), `pool remove` of a log
//! device and of a log mirror, `pool import -m` of a pool whose log
//! device is gone; and bad input (raidz log, a pool of logs only,
//! removing a data device, an unknown device): one line, non-zero exit,
//! nothing changed.

mod common;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use common::{pool_size, status_rows, path_str, random_bytes, Harness};

/// A refused command: exit 1, one clean error line; returns stderr.
fn refused(harness: &Harness, args: &[&str]) -> String {
    common::refused(harness, args, 1)
}

fn available(harness: &Harness, pool: &str) -> u64 {
    harness.tarn_ok(&["get", "-H", "-p", "-o", "value", "available", pool]).trim().parse().expect("available")
}

fn write_synced(path: &Path, data: &[u8]) {
    let mut file = fs::File::create(path).unwrap();
    file.write_all(data).unwrap();
    file.sync_all().unwrap();
}

fn names(paths: &[PathBuf]) -> Vec<String> {
    paths.iter().map(|p| path_str(p)).collect()
}

#[test]
fn log_vdevs_create_add_status_remove() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(1);
    let harness = Harness::start();
    // One directory (import scans it): data d0 d1, logs d2..d5, spare d6,
    // another data mirror d7 d8.
    let files = harness.vdev_files("vdevs", 9, 256 << 20);
    let dir = files[0].parent().unwrap().to_path_buf();
    let all = names(&files);
    let (main, logs, spare, more) = (&all[0..2], &all[2..6], &all[6..7], &all[7..9]);

    // Bad input first: nothing may be created.
    let raidz_log = [&["pool", "create", "bad", "mirror"][..], &[main[0].as_str(), main[1].as_str()], &["log", "raidz", logs[0].as_str(), logs[1].as_str(), logs[2].as_str()]].concat();
    let err = refused(&harness, &raidz_log);
    assert!(err.contains("not supported for log devices"), "{err}");
    let err = refused(&harness, &["pool", "create", "bad", "log", &logs[0]]);
    assert!(err.contains("at least one top-level vdev"), "{err}");
    let err = refused(&harness, &["pool", "create", "bad", &main[0], "log"]);
    assert!(err.contains("log requires at least 1 device"), "{err}");
    assert!(!harness.tarn_ok(&["pool", "list", "-H", "-o", "name"]).contains("bad"));
    let dry = harness.tarn_ok(&["pool", "create", "-n", "dry", "mirror", &main[0], &main[1], "log", &logs[0]]);
    let dry_rows: Vec<&str> = dry.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    assert_eq!(&dry_rows[dry_rows.len() - 2..], &["logs", logs[0].as_str()], "{dry}");
    assert!(!harness.tarn_ok(&["pool", "list", "-H", "-o", "name"]).contains("dry"));

    // A mirror with a mirrored log and a spare.
    let spec = [&["mirror"][..], &[main[0].as_str(), main[1].as_str()], &["log", "mirror", logs[0].as_str(), logs[1].as_str()], &["spare", spare[0].as_str()]].concat();
    let spec: Vec<String> = spec.iter().map(|s| s.to_string()).collect();
    let root = harness.create_pool("tank", &spec);
    let rows = status_rows(&harness, "tank");
    assert_eq!(
        rows,
        vec![
            "tank ONLINE".to_string(),
            "mirror-0 ONLINE".into(),
            format!("{} ONLINE", main[0]),
            format!("{} ONLINE", main[1]),
            "logs".into(),
            "mirror-1 ONLINE".into(),
            format!("{} ONLINE", logs[0]),
            format!("{} ONLINE", logs[1]),
            "spares".into(),
            format!("{} AVAIL", spare[0]),
        ],
        "{}",
        harness.tarn_ok(&["pool", "status", "tank"])
    );
    let pool = harness.pool_json("tank");
    let log_mirror = &pool["logs"]["mirror-1"];
    assert_eq!(log_mirror["vdev_type"], "mirror", "{pool:#}");
    assert_eq!(log_mirror["vdevs"].as_object().map(|v| v.len()), Some(2), "{pool:#}");
    assert!(pool["vdevs"]["tank"]["vdevs"].get("mirror-1").is_none(), "a log vdev among the data vdevs: {pool:#}");
    // `pool list -v`: the log vdev in a `logs` section of its own, with its size.
    let listing = harness.tarn_ok(&["pool", "list", "-v", "-H", "-o", "name,size", "tank"]);
    let names: Vec<&str> = listing.lines().map(|l| l.split('\t').next().unwrap_or("").trim()).collect();
    let logs_row = names.iter().position(|n| *n == "logs").unwrap_or_else(|| panic!("{listing}"));
    assert_eq!(&names[logs_row + 1..logs_row + 4], &["mirror-1", logs[0].as_str(), logs[1].as_str()], "{listing}");
    assert_eq!(names[logs_row + 4], "spare", "{listing}");
    let listed: serde_json::Value = serde_json::from_str(&harness.tarn_ok(&["pool", "list", "-v", "-j", "tank"])).unwrap();
    assert!(listed["pools"]["tank"]["logs"]["mirror-1"]["vdevs"].is_object(), "{listed:#}");
    assert!(listed["pools"]["tank"]["vdevs"].get("mirror-1").is_none(), "{listed:#}");

    // Sync writes through the mount work (the log is on mirror-1).
    let data = random_bytes(&mut rng, 1 << 20);
    write_synced(&root.join("synced"), &data);

    // The log's space is not the pool's.
    let size = pool_size(&harness, "tank");
    let avail = available(&harness, "tank");
    let dry = harness.tarn_ok(&["pool", "add", "-n", "tank", "log", &logs[2]]);
    assert!(dry.contains("\tlogs\n") && dry.contains(logs[2].as_str()), "{dry}");
    assert_eq!(status_rows(&harness, "tank").len(), 10, "a dry run changed the pool");
    harness.tarn_ok(&["pool", "add", "tank", "log", &logs[2]]);
    assert_eq!(pool_size(&harness, "tank"), size, "a log device grew the pool");
    assert!(available(&harness, "tank") <= avail, "a log device grew the available space");
    let rows = status_rows(&harness, "tank");
    let logs_at = rows.iter().position(|r| r == "logs").unwrap();
    assert_eq!(rows[logs_at + 4], format!("{} ONLINE", logs[2]), "{rows:?}");
    assert_eq!(rows[logs_at + 5], "spares", "{rows:?}");

    // Bad input to add and remove: refused, status unchanged.
    let before = status_rows(&harness, "tank");
    let err = refused(&harness, &["pool", "add", "tank", "log", "raidz", &logs[3], &spare[0], &main[0]]);
    assert!(err.contains("log"), "{err}");
    let err = refused(&harness, &["pool", "remove", "tank", &main[0]]);
    assert!(err.contains("only log devices, cache devices and hot spares can be removed"), "{err}");
    let err = refused(&harness, &["pool", "remove", "tank", "/no/such/device"]);
    assert!(err.contains("no such device"), "{err}");
    let err = refused(&harness, &["pool", "remove", "tank", &logs[0]]);
    assert!(err.contains("mirror-1"), "{err}");
    assert_eq!(status_rows(&harness, "tank"), before);

    // Remove the single log device, then the log mirror by its name.
    harness.tarn_ok(&["pool", "remove", "tank", &logs[2]]);
    let rows = status_rows(&harness, "tank");
    assert!(!rows.contains(&format!("{} ONLINE", logs[2])), "{rows:?}");
    harness.tarn_ok(&["pool", "remove", "tank", "mirror-1"]);
    let rows = status_rows(&harness, "tank");
    assert!(!rows.contains(&"logs".to_string()), "{rows:?}");
    assert_eq!(harness.pool_json("tank")["logs"], serde_json::json!({}));
    // The removed devices are free to use: a new pool takes one.
    harness.tarn_ok(&["pool", "create", "-m", &path_str(&harness.mountpoint("other")), "other", &logs[0]]);
    harness.tarn_ok(&["pool", "destroy", "other"]);

    // Added again (a log mirror), then a data mirror after it: the ids
    // (positions among all vdevs, holes included) stay right everywhere.
    harness.tarn_ok(&["pool", "add", "tank", "log", "mirror", &logs[2], &logs[3]]);
    harness.tarn_ok(&["pool", "add", "tank", "mirror", &more[0], &more[1]]);
    let rows = status_rows(&harness, "tank");
    let logs_at = rows.iter().position(|r| r == "logs").unwrap_or_else(|| panic!("{rows:?}"));
    assert_eq!(&rows[..logs_at], &["tank ONLINE".to_string(), "mirror-0 ONLINE".into(), format!("{} ONLINE", main[0]), format!("{} ONLINE", main[1]), "mirror-4 ONLINE".into(), format!("{} ONLINE", more[0]), format!("{} ONLINE", more[1])]);
    assert_eq!(rows[logs_at + 1], "mirror-3 ONLINE", "{rows:?}");
    let iostat = harness.tarn_ok(&["pool", "iostat", "-v", "tank"]);
    let at = |name: &str| iostat.lines().position(|l| l.split_whitespace().next() == Some(name));
    assert!(at("mirror-4") < at("logs") && at("logs") < at("mirror-3") && at("mirror-4").is_some(), "{iostat}");
    let stats: serde_json::Value = serde_json::from_str(&harness.tarn_ok(&["pool", "iostat", "-v", "-j", "tank"])).unwrap();
    assert!(stats["pools"]["tank"]["logs"]["mirror-3"]["vdevs"].is_object(), "{stats:#}");
    let listing = harness.tarn_ok(&["pool", "list", "-v", "-H", "-o", "name", "tank"]);
    let names: Vec<&str> = listing.lines().map(str::trim).collect();
    assert_eq!(&names[..3], &["tank", "mirror-0", main[0].as_str()], "{listing}");
    assert!(names.iter().position(|n| *n == "mirror-4") < names.iter().position(|n| *n == "logs"), "{listing}");
    write_synced(&root.join("again"), &data);
    assert_eq!(fs::read(root.join("synced")).unwrap(), data);
    harness.export("tank");
    let root = harness.import("tank", &dir);
    assert_eq!(fs::read(root.join("again")).unwrap(), data);
    let rows = status_rows(&harness, "tank");
    assert!(rows.contains(&"mirror-3 ONLINE".to_string()) && rows.contains(&"mirror-4 ONLINE".to_string()), "{rows:?}");
}

#[test]
fn import_without_the_log_device_needs_m() {
    let seeded = tarn_testkit::seeded!(2);
    let mut rng = seeded.rng(2);
    let mut harness = Harness::start();
    let files = harness.vdev_files("vdevs", 3, 256 << 20);
    let main = names(&files[0..2]);
    let slog = &files[2..3];
    let spec: Vec<String> = vec!["mirror".into(), main[0].clone(), main[1].clone(), "log".into(), path_str(&slog[0])];
    let root = harness.create_pool("tank", &spec);
    let data = random_bytes(&mut rng, 256 << 10);
    write_synced(&root.join("file"), &data);
    harness.export("tank");

    // The log device is gone.
    let away = harness.dir.join("away");
    fs::rename(&slog[0], &away).unwrap();
    let dirs = ["-d", &main[0][..main[0].rfind('/').unwrap()]];
    let listing = harness.tarn_ok(&[&["pool", "import"][..], &dirs].concat());
    assert!(listing.contains("-m"), "{listing}");
    let err = refused(&harness, &[&["pool", "import"][..], &dirs, &["tank"]].concat());
    assert!(err.contains(&path_str(&slog[0])) && err.contains("-m"), "{err}");
    assert!(!harness.tarn_ok(&["pool", "list", "-H", "-o", "name"]).contains("tank"));

    let out = harness.tarn(&[&["pool", "import", "-m"][..], &dirs, &["tank"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&path_str(&slog[0])) && stderr.contains("missing"), "{stderr}");
    common::wait_mounted(&root);
    assert_eq!(fs::read(root.join("file")).unwrap(), data);
    let pool = harness.pool_json("tank");
    assert_eq!(pool["state"], "DEGRADED", "{pool:#}");
    let log = &pool["logs"][path_str(&slog[0]).as_str()];
    assert_eq!(log["state"], "UNAVAIL", "{pool:#}");
    let text = harness.tarn_ok(&["pool", "status", "tank"]);
    assert!(text.contains("log devices cannot be used"), "{text}");
    // Sync writes go on (on the main vdevs).
    write_synced(&root.join("after"), &data);
    // A daemon restart imports it the way it was imported (with `-m`),
    // not refusing it for the device the user already let go.
    harness.kill_daemon();
    harness.restart_daemon();
    common::wait_mounted(&root);
    assert_eq!(fs::read(root.join("after")).unwrap(), data, "fsync'd after import -m, then the daemon restarted");
    assert_eq!(harness.pool_json("tank")["state"], "DEGRADED");
    // The missing device is removed; the pool is whole again.
    harness.tarn_ok(&["pool", "remove", "tank", &path_str(&slog[0])]);
    assert_eq!(harness.pool_json("tank")["state"], "ONLINE");
    harness.export("tank");
    let root = harness.import("tank", Path::new(dirs[1]));
    assert_eq!(fs::read(root.join("after")).unwrap(), data);
}
