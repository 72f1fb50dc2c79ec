//! Issue 11, cache vdevs (L2ARC) through the real daemon, CLI and FUSE
//! mount: `pool create ... cache`, `pool add ... cache`, the `cache`
//! section of `pool status`, `pool list -v` and `pool iostat -v` (text and
//! JSON), the feed reaching the cache device (`arcstat`), `secondarycache`,
//! `pool remove` of a cache device, an import with the cache device
//! missing (it imports; the device is UNAVAIL); and bad input (a mirrored
//! or raidz cache, an empty cache section, a device in use, twice the same
//! device, a bad `secondarycache`): one line, non-zero exit, nothing
//! changed.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{pool_size, status_rows, path_str, random_bytes, write_file, Harness};

/// A refused command: exit 1, one clean error line; returns stderr.
fn refused(harness: &Harness, args: &[&str]) -> String {
    common::refused(harness, args, 1)
}

fn names(paths: &[PathBuf]) -> Vec<String> {
    paths.iter().map(|p| path_str(p)).collect()
}

fn arcstat(harness: &Harness) -> serde_json::Value {
    serde_json::from_str(&harness.tarn_ok(&["arcstat", "-j"])).expect("arcstat -j is JSON")
}

#[test]
fn cache_vdevs_create_add_status_remove() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(1);
    let harness = Harness::start();
    let files = harness.vdev_files("vdevs", 5, 256 << 20);
    let dir = files[0].parent().unwrap().to_path_buf();
    let all = names(&files);
    let (main, cache) = (&all[0..2], &all[2..5]);

    // Bad input first: nothing may be created.
    let err = refused(&harness, &["pool", "create", "bad", "mirror", &main[0], &main[1], "cache", "mirror", &cache[0], &cache[1]]);
    assert!(err.contains("not supported for cache devices"), "{err}");
    let err = refused(&harness, &["pool", "create", "bad", "mirror", &main[0], &main[1], "cache", &cache[0], "raidz", &cache[1], &cache[2]]);
    assert!(err.contains("not supported for cache devices"), "{err}");
    let err = refused(&harness, &["pool", "create", "bad", &main[0], "cache"]);
    assert!(err.contains("cache requires at least 1 device"), "{err}");
    let err = refused(&harness, &["pool", "create", "bad", "cache", &cache[0]]);
    assert!(err.contains("at least one top-level vdev"), "{err}");
    let err = refused(&harness, &["pool", "create", "bad", &main[0], "cache", &main[0]]);
    assert!(err.contains("more than once"), "{err}");
    assert!(!harness.tarn_ok(&["pool", "list", "-H", "-o", "name"]).contains("bad"));
    let dry = harness.tarn_ok(&["pool", "create", "-n", "dry", "mirror", &main[0], &main[1], "cache", &cache[0]]);
    let dry_rows: Vec<&str> = dry.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    assert_eq!(&dry_rows[dry_rows.len() - 2..], &["cache", cache[0].as_str()], "{dry}");
    assert!(!harness.tarn_ok(&["pool", "list", "-H", "-o", "name"]).contains("dry"));

    // A mirror with a cache device.
    let spec: Vec<String> = ["mirror", &main[0], &main[1], "cache", &cache[0]].iter().map(|s| s.to_string()).collect();
    let root = harness.create_pool("tank", &spec);
    let want = vec![
        "tank ONLINE".to_string(),
        "mirror-0 ONLINE".into(),
        format!("{} ONLINE", main[0]),
        format!("{} ONLINE", main[1]),
        "cache".into(),
        format!("{} ONLINE", cache[0]),
    ];
    assert_eq!(status_rows(&harness, "tank"), want, "{}", harness.tarn_ok(&["pool", "status", "tank"]));
    let pool = harness.pool_json("tank");
    assert_eq!(pool["l2cache"][cache[0].as_str()]["state"], "ONLINE", "{pool:#}");
    assert!(pool["vdevs"]["tank"]["vdevs"].get(cache[0].as_str()).is_none(), "a cache device among the data vdevs: {pool:#}");
    let listing = harness.tarn_ok(&["pool", "list", "-v", "-H", "-o", "name,size", "tank"]);
    let rows: Vec<&str> = listing.lines().map(|l| l.split('\t').next().unwrap_or("").trim()).collect();
    let at = rows.iter().position(|n| *n == "cache").unwrap_or_else(|| panic!("{listing}"));
    assert_eq!(rows[at + 1], cache[0].as_str(), "{listing}");
    let listed: serde_json::Value = serde_json::from_str(&harness.tarn_ok(&["pool", "list", "-v", "-j", "tank"])).unwrap();
    assert!(listed["pools"]["tank"]["l2cache"][cache[0].as_str()].is_object(), "{listed:#}");
    let iostat = harness.tarn_ok(&["pool", "iostat", "-v", "tank"]);
    let line_of = |name: &str| iostat.lines().position(|l| l.split_whitespace().next() == Some(name));
    assert!(line_of("mirror-0") < line_of("cache") && line_of("cache") < line_of(&cache[0]) && line_of("mirror-0").is_some(), "{iostat}");
    let stats: serde_json::Value = serde_json::from_str(&harness.tarn_ok(&["pool", "iostat", "-v", "-j", "tank"])).unwrap();
    assert!(stats["pools"]["tank"]["l2cache"][cache[0].as_str()].is_object(), "{stats:#}");

    // A cache device is not pool space.
    let size = pool_size(&harness, "tank");
    harness.tarn_ok(&["pool", "add", "tank", "cache", &cache[1]]);
    assert_eq!(pool_size(&harness, "tank"), size, "a cache device grew the pool");
    let rows = status_rows(&harness, "tank");
    assert_eq!(&rows[4..], &["cache".to_string(), format!("{} ONLINE", cache[0]), format!("{} ONLINE", cache[1])], "{rows:?}");

    // Bad input to add: refused, status unchanged.
    let before = status_rows(&harness, "tank");
    let err = refused(&harness, &["pool", "add", "tank", "cache", "mirror", &cache[2], &main[0]]);
    assert!(err.contains("not supported for cache devices"), "{err}");
    let err = refused(&harness, &["pool", "add", "tank", "cache", &cache[1]]);
    assert!(err.contains("already in the pool"), "{err}");
    let err = refused(&harness, &["pool", "add", "tank", "cache", "/no/such/device"]);
    assert!(err.contains("/no/such/device"), "{err}");
    // A device of another pool is refused.
    harness.tarn_ok(&["pool", "create", "-m", &path_str(&harness.mountpoint("other")), "other", &cache[2]]);
    let err = refused(&harness, &["pool", "add", "tank", "cache", &cache[2]]);
    assert!(err.contains(&cache[2]), "{err}");
    harness.tarn_ok(&["pool", "destroy", "other"]);
    assert_eq!(status_rows(&harness, "tank"), before);

    // The feed reaches the cache devices: a working set larger than the ARC.
    harness.tarn_ok(&["tunable", "set", "arc_min=8M", "arc_max=16M", "l2arc_write_max=256M"]);
    let tunables = harness.tarn_ok(&["tunable", "get", "-H", "l2arc_write_max"]);
    assert_eq!(tunables, format!("l2arc_write_max\t{}\tset\n", 256u64 << 20));
    let data = random_bytes(&mut rng, 48 << 20);
    write_file(&root.join("big"), &data);
    harness.tarn_ok(&["pool", "sync", "tank"]);
    let start = Instant::now();
    loop {
        let stats = arcstat(&harness);
        if stats["l2size"].as_u64().unwrap_or(0) > 8 << 20 {
            assert!(stats["l2_hdr_size"].as_u64().unwrap() > 0, "{stats}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "nothing reached the cache devices: {stats}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(fs::read(root.join("big")).unwrap(), data);
    let text = harness.tarn_ok(&["arcstat"]);
    assert!(text.lines().next().unwrap().contains("l2hits"), "{text}");

    // secondarycache: set, inherited, a bad value refused in one line.
    harness.tarn_ok(&["set", "secondarycache=metadata", "tank"]);
    harness.tarn_ok(&["create", "tank/kid"]);
    let got = harness.tarn_ok(&["get", "-H", "-o", "name,value,source", "-r", "secondarycache", "tank"]);
    assert!(got.contains("tank\tmetadata\tlocal") && got.contains("tank/kid\tmetadata\tinherited from tank"), "{got}");
    let err = refused(&harness, &["set", "secondarycache=some", "tank/kid"]);
    assert!(err.contains("secondarycache"), "{err}");
    harness.tarn_ok(&["inherit", "secondarycache", "tank"]);
    assert_eq!(harness.tarn_ok(&["get", "-H", "-o", "value", "secondarycache", "tank/kid"]), "all\n");

    // Remove a cache device: gone from the config, its label cleared (a
    // new pool takes it without -f).
    harness.tarn_ok(&["pool", "remove", "tank", &cache[1]]);
    let rows = status_rows(&harness, "tank");
    assert!(!rows.iter().any(|r| r.starts_with(&cache[1])), "{rows:?}");
    harness.tarn_ok(&["pool", "create", "-m", &path_str(&harness.mountpoint("other")), "other", &cache[1]]);
    harness.tarn_ok(&["pool", "destroy", "other"]);

    // Exported, the cache device taken away: the pool imports without -m,
    // ONLINE, the cache device UNAVAIL; the data reads back.
    harness.export("tank");
    let away = harness.dir.join("away");
    fs::rename(&cache[0], &away).unwrap();
    let listing = harness.tarn_ok(&["pool", "import", "-d", &path_str(&dir)]);
    assert!(listing.contains("state: ONLINE") && listing.contains("\tcache\n"), "{listing}");
    let cache_row = listing.lines().find(|l| l.contains(cache[0].as_str())).unwrap_or_else(|| panic!("{listing}"));
    assert!(cache_row.ends_with("UNAVAIL"), "{listing}");
    let root = harness.import("tank", &dir);
    let pool = harness.pool_json("tank");
    assert_eq!(pool["state"], "ONLINE", "{pool:#}");
    assert_eq!(pool["l2cache"][cache[0].as_str()]["state"], "UNAVAIL", "{pool:#}");
    assert_eq!(fs::read(root.join("big")).unwrap(), data);
    // Back in place: the next import finds it again, and its cache.
    harness.export("tank");
    fs::rename(&away, &cache[0]).unwrap();
    let root = harness.import("tank", Path::new(&dir));
    assert_eq!(harness.pool_json("tank")["l2cache"][cache[0].as_str()]["state"], "ONLINE");
    assert_eq!(fs::read(root.join("big")).unwrap(), data);
    harness.tarn_ok(&["pool", "remove", "tank", &cache[0]]);
    assert!(!status_rows(&harness, "tank").contains(&"cache".to_string()));
    harness.export("tank");
}
