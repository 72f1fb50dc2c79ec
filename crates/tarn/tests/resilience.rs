//! Disks fail, bits rot, nothing is lost — through the real CLI, daemon
//! and FUSE mount:
//!
//! 1. `scrub_repairs_every_layout`: mirror, raidz1, raidz2, raidz3; random
//!    regions of up to `redundancy` devices overwritten; a scrub repairs
//!    everything, a second finds nothing, every file hashes as written.
//! 2. `vanished_device_alerts_then_replace`: a vdev file on bindfs whose
//!    process is killed during a seeded write workload: the pool goes
//!    DEGRADED, the workload sees no error, an alert reaches a real SMTP
//!    server (aiosmtpd) and a webhook receiver; `replace` with a new file,
//!    resilver, data verified, ONLINE.
//! 3. `offline_online_resilvers_only_what_changed`: bytes resilvered match
//!    what was written while the device was away.
//! 4. `spare_takes_over_and_scans_resume_after_export`: a hot spare is put
//!    in automatically; a scrub and a resilver interrupted by export go on
//!    after import from where they were.
//! 5. `too_many_failures_suspend_then_clear`: the pool suspends with a
//!    clear message, `clear` while devices are gone fails cleanly, devices
//!    come back, `clear`, data intact.
//!
//! Reproduce: `TARN_SEED=<seed> cargo test -p tarn --test resilience`.

mod common;
#[path = "../../tarn-daemon/tests/sinks/mod.rs"]
mod sinks;

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, RngCore};
use rand_chacha::ChaCha8Rng;

use common::{data_region, hash_file, path_str, random_bytes, write_file, BindFs, Harness};

fn scan(status: &serde_json::Value) -> serde_json::Value {
    status["scan_stats"].clone()
}

fn num(v: &serde_json::Value, keys: &[&str]) -> u64 {
    keys.iter().find_map(|k| v[*k].as_u64().or_else(|| v[*k].as_str().and_then(|s| s.parse().ok()))).unwrap_or(0)
}

fn scan_done(status: &serde_json::Value, function: &str) -> bool {
    let s = scan(status);
    s["function"].as_str().is_some_and(|f| f.eq_ignore_ascii_case(function))
        && s["state"].as_str().is_some_and(|st| st.eq_ignore_ascii_case("finished"))
}

/// Writes `count` files of random sizes under `root/dir`; returns their hashes.
fn write_tree(root: &Path, dir: &str, rng: &mut ChaCha8Rng, count: usize, max: usize) -> BTreeMap<PathBuf, u64> {
    std::fs::create_dir_all(root.join(dir)).unwrap();
    let mut out = BTreeMap::new();
    for i in 0..count {
        let len = rng.gen_range(1..=max);
        let data = random_bytes(rng, len);
        let rel = PathBuf::from(dir).join(format!("f{i:03}"));
        write_file(&root.join(&rel), &data);
        out.insert(rel, hash_file(&root.join(dir).join(format!("f{i:03}"))));
    }
    out
}

fn verify(root: &Path, files: &BTreeMap<PathBuf, u64>, when: &str) {
    for (rel, hash) in files {
        assert_eq!(hash_file(&root.join(rel)), *hash, "{when}: {} reads back wrong", rel.display());
    }
}

fn leaf_state(status: &serde_json::Value, file: &Path) -> Option<String> {
    common::device_counters(status)
        .into_iter()
        .find(|d| Path::new(&d.name).file_name() == file.file_name() && Path::new(&d.name) == file)
        .map(|d| d.state)
}

/// Overwrites random 64 KiB regions of the written part of `path`'s data region.
fn rot(path: &Path, rng: &mut ChaCha8Rng, regions: usize) {
    let pages = common::written_pages(path);
    assert!(!pages.is_empty());
    let file = common::open_rw(path);
    let (_, end) = data_region(file.metadata().unwrap().len());
    for _ in 0..regions {
        let from = pages[rng.gen_range(0..pages.len())];
        let len = (64u64 << 10).min(end - from);
        let mut junk = vec![0u8; len as usize];
        rng.fill_bytes(&mut junk);
        file.write_all_at(&junk, from).unwrap();
    }
    file.sync_all().unwrap();
}

#[test]
fn scrub_repairs_every_layout() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(1);
    let harness = Harness::start();
    for (layout, n, redundancy) in [("mirror", 2, 1), ("raidz1", 3, 1), ("raidz2", 4, 2), ("raidz3", 5, 3)] {
        let pool = format!("s{layout}");
        let devices = harness.vdev_files(&pool, n, 128 << 20);
        let mut spec = vec![layout.to_string()];
        spec.extend(devices.iter().map(|p| path_str(p)));
        let root = harness.create_pool(&pool, &spec);
        let files = write_tree(&root, "t", &mut rng, 24, 700_000);
        harness.export(&pool);
        let k = rng.gen_range(1..=redundancy);
        let mut victims: Vec<usize> = (0..n).collect();
        while victims.len() > k {
            victims.remove(rng.gen_range(0..victims.len()));
        }
        for &v in &victims {
            rot(&devices[v], &mut rng, 24);
        }
        let root = harness.import(&pool, &harness.dir.join(&pool));
        harness.tarn_ok(&["pool", "scrub", "-w", &pool]);
        let status = harness.pool_json(&pool);
        let s = scan(&status);
        assert!(scan_done(&status, "scrub"), "{layout}: {s:#}");
        assert_eq!(num(&s, &["errors"]), 0, "{layout}: {s:#}");
        assert!(num(&s, &["processed", "repaired"]) > 0, "{layout}: scrub repaired nothing: {s:#}");
        // The damaged devices carry the checksum errors.
        let counters = common::leaf_counters(&status, &devices);
        for (i, d) in devices.iter().enumerate() {
            let c = counters.iter().find(|c| Path::new(&c.name) == d).unwrap();
            if !victims.contains(&i) {
                assert_eq!(c.checksum_errors, 0, "{layout}: undamaged {} has errors", d.display());
            }
        }
        assert!(counters.iter().map(|c| c.checksum_errors).sum::<u64>() > 0, "{layout}");
        harness.tarn_ok(&["pool", "scrub", "-w", &pool]);
        let s2 = scan(&harness.pool_json(&pool));
        assert_eq!((num(&s2, &["processed", "repaired"]), num(&s2, &["errors"])), (0, 0), "{layout}: second scrub: {s2:#}");
        verify(&root, &files, layout);
        let text = harness.tarn_ok(&["pool", "status", &pool]);
        assert!(text.contains("scrub repaired"), "{text}");
        harness.export(&pool);
    }
}

fn alert_config(smtp_port: u16, webhook_port: u16) -> impl Fn(&Path) -> String {
    move |_dir: &Path| {
        format!(
            "[alerts]\nemail_to = [\"admin@example.org\"]\nemail_from = \"tarn@nas.local\"\nsmtp_server = \"127.0.0.1:{smtp_port}\"\nsmtp_starttls = false\nwebhook_url = \"http://127.0.0.1:{webhook_port}/hook\"\ncapacity_warn_percent = 1\n"
        )
    }
}

#[test]
fn vanished_device_alerts_then_replace() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(2);
    let sinks_dir = tempfile::tempdir().unwrap();
    let (smtp, mail_dir) = sinks::start_smtp(sinks_dir.path(), &[]);
    let (webhook, hook_log) = sinks::start_webhook(sinks_dir.path(), &[]);
    let config = alert_config(smtp.port, webhook.port);
    let harness = Harness::start_with_config(Some(&config));
    // Three devices in a plain directory, the fourth behind bindfs.
    let mut devices = harness.vdev_files("vdevs", 3, 128 << 20);
    let mut bind = BindFs::start(&harness.dir.join("under"), &harness.dir.join("pulled"));
    let pulled = bind.mnt.join("d3");
    std::fs::File::create(bind.src.join("d3")).unwrap().set_len(128 << 20).unwrap();
    devices.push(pulled.clone());
    let mut spec = vec!["raidz1".to_string()];
    spec.extend(devices.iter().map(|p| path_str(p)));
    let root = harness.create_pool("tank", &spec);
    let before = write_tree(&root, "before", &mut rng, 12, 600_000);
    // `alert test` goes through every channel.
    let out = harness.tarn_ok(&["alert", "test", "tank"]);
    assert!(out.contains("email: ok") && out.contains("webhook: ok"), "{out}");

    // A seeded workload writing (and fsyncing) while the device is pulled.
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (root, stop) = (root.clone(), stop.clone());
        let mut wrng = seeded.rng(3);
        std::thread::spawn(move || {
            let mut written = BTreeMap::new();
            let mut i = 0;
            std::fs::create_dir_all(root.join("during")).unwrap();
            while !stop.load(Ordering::Relaxed) || i < 20 {
                let len = wrng.gen_range(1..=300_000);
                let data = random_bytes(&mut wrng, len);
                let rel = PathBuf::from("during").join(format!("w{i:04}"));
                // Any error here fails the test: clients must see none.
                write_file(&root.join(&rel), &data);
                written.insert(rel.clone(), hash_file(&root.join(&rel)));
                i += 1;
            }
            written
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    bind.pull();
    let status = harness.wait_status("tank", Duration::from_secs(60), "pool DEGRADED", |s| s["state"] == "DEGRADED");
    assert_eq!(leaf_state(&status, &pulled).as_deref(), Some("REMOVED"), "{status:#}");
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let during = worker.join().expect("the workload saw an error");
    // Alerts within 60 s, at the real SMTP server and the webhook.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mails = sinks::mails(&mail_dir);
        let hooks = sinks::lines(&hook_log);
        let mail_ok = mails.iter().any(|m| m.contains("tank") && (m.contains("REMOVED") || m.contains("DEGRADED")));
        let hook_ok = hooks.iter().any(|h| h.contains("\"pool\":\"tank\"") && (h.contains("REMOVED") || h.contains("DEGRADED")));
        if mail_ok && hook_ok {
            assert!(mails.iter().all(|m| m.contains("admin@example.org")));
            // Deduplicated: a handful of events, not one per I/O error.
            assert!(mails.len() <= 6, "{} mails: {mails:#?}", mails.len());
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no alert in 60 s: mails {mails:#?} hooks {hooks:#?}\n{}", harness.daemon_log());
        std::thread::sleep(Duration::from_millis(250));
    }
    // Past 1% full (the configured threshold): one capacity warning.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !sinks::lines(&hook_log).iter().any(|h| h.contains("\"class\":\"capacity\"")) {
        assert!(std::time::Instant::now() < deadline, "no capacity alert:\n{:#?}", sinks::lines(&hook_log));
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(sinks::lines(&hook_log).iter().filter(|h| h.contains("\"class\":\"capacity\"")).count(), 1);
    // Replace the pulled device with a new file; resilver; ONLINE.
    let new = harness.dir.join("vdevs").join("d9");
    std::fs::File::create(&new).unwrap().set_len(128 << 20).unwrap();
    harness.tarn_ok(&["pool", "replace", "-w", "tank", &path_str(&pulled), &path_str(&new)]);
    let status = harness.wait_status("tank", Duration::from_secs(120), "pool ONLINE after replace", |s| s["state"] == "ONLINE");
    assert!(scan_done(&status, "resilver"), "{status:#}");
    assert!(leaf_state(&status, &pulled).is_none(), "the pulled device left the pool: {status:#}");
    assert_eq!(leaf_state(&status, &new).as_deref(), Some("ONLINE"));
    let s = scan(&status);
    assert_eq!(num(&s, &["errors"]), 0);
    assert!(num(&s, &["resilvered"]) > 0, "{s:#}");
    verify(&root, &before, "after replace");
    verify(&root, &during, "after replace");
    // The finished resilver is mailed too.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !sinks::mails(&mail_dir).iter().any(|m| m.contains("resilver")) {
        assert!(std::time::Instant::now() < deadline, "no mail for the finished resilver:\n{}", harness.daemon_log());
        std::thread::sleep(Duration::from_millis(250));
    }
    // The event log tells the story.
    let events: serde_json::Value = serde_json::from_str(&harness.tarn_ok(&["pool", "events", "-j", "tank"])).unwrap();
    let text = events.to_string();
    for class in ["statechange", "pool_degraded", "resilver_finish", "capacity"] {
        assert!(text.contains(&format!("\"class\":\"{class}\"")), "no {class} event: {events:#}");
    }
    assert!(text.contains("REMOVED"), "{events:#}");
    // And from disk, not from caches: export, import, read again.
    harness.export("tank");
    drop(bind);
    let root = harness.import("tank", &harness.dir.join("vdevs"));
    verify(&root, &before, "after re-import");
    verify(&root, &during, "after re-import");
    drop((smtp, webhook));
}

#[test]
fn offline_online_resilvers_only_what_changed() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(4);
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 2, 256 << 20);
    let spec = vec!["mirror".to_string(), path_str(&devices[0]), path_str(&devices[1])];
    let root = harness.create_pool("tank", &spec);
    let old = write_tree(&root, "old", &mut rng, 40, 1 << 20); // ~20 MB
    harness.tarn_ok(&["pool", "offline", "tank", &path_str(&devices[1])]);
    let status = harness.pool_json("tank");
    assert_eq!(status["state"], "DEGRADED");
    assert_eq!(leaf_state(&status, &devices[1]).as_deref(), Some("OFFLINE"));
    let new = write_tree(&root, "new", &mut rng, 8, 400_000); // ~1.6 MB while away
    // On the remaining side in a txg (fsync alone puts it in the intent log).
    harness.tarn_ok(&["pool", "sync", "tank"]);
    let new_bytes: u64 = new.keys().map(|p| std::fs::metadata(root.join(p)).unwrap().len()).sum();
    harness.tarn_ok(&["pool", "online", "tank", &path_str(&devices[1])]);
    harness.tarn_ok(&["pool", "wait", "-t", "resilver", "tank"]);
    let status = harness.pool_json("tank");
    assert_eq!(status["state"], "ONLINE", "{status:#}");
    let s = scan(&status);
    assert!(scan_done(&status, "resilver"), "{s:#}");
    let resilvered = num(&s, &["resilvered"]);
    // What was written while it was away (plus its metadata), not the 20 MB before.
    assert!(resilvered >= new_bytes * 9 / 10, "resilvered {resilvered} < {new_bytes}");
    assert!(resilvered <= new_bytes + (3 << 20), "resilvered {resilvered} for {new_bytes} new bytes: {s:#}");
    // The returned side alone holds everything.
    harness.export("tank");
    let alone = harness.dir.join("alone");
    std::fs::create_dir_all(&alone).unwrap();
    std::fs::rename(&devices[1], alone.join("d1")).unwrap();
    let root = harness.import("tank", &alone);
    assert_eq!(harness.pool_json("tank")["state"], "DEGRADED");
    verify(&root, &old, "d1 alone");
    verify(&root, &new, "d1 alone");
}

#[test]
fn spare_takes_over_and_scans_resume_after_export() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(5);
    // Slow scans, small sort queue: so there is a middle to interrupt.
    let config = |_: &Path| "[tunables]\nscan_rate_max = 6291456\nscan_mem_max = 16384\n".to_string();
    let harness = Harness::start_with_config(Some(&config));
    let mut devices = harness.vdev_files("vdevs", 1, 256 << 20);
    let mut bind = BindFs::start(&harness.dir.join("under"), &harness.dir.join("pulled"));
    let pulled = bind.mnt.join("d1");
    std::fs::File::create(bind.src.join("d1")).unwrap().set_len(256 << 20).unwrap();
    devices.push(pulled.clone());
    let spare = harness.dir.join("vdevs").join("spare0");
    std::fs::File::create(&spare).unwrap().set_len(256 << 20).unwrap();
    let spec = vec!["mirror".to_string(), path_str(&devices[0]), path_str(&pulled)];
    let root = harness.create_pool("tank", &spec);
    harness.tarn_ok(&["pool", "add", "tank", "spare", &path_str(&spare)]);
    let text = harness.tarn_ok(&["pool", "status", "tank"]);
    assert!(text.contains("spares") && text.contains("AVAIL"), "{text}");
    let files = write_tree(&root, "t", &mut rng, 40, 1 << 20);
    harness.tarn_ok(&["pool", "sync", "tank"]);

    // Scrub, interrupted by export, resumed after import.
    harness.tarn_ok(&["pool", "scrub", "tank"]);
    let s = harness.wait_status("tank", Duration::from_secs(60), "scrub past a checkpoint", |s| num(&scan(s), &["issued"]) > 8 << 20);
    assert_eq!(scan(&s)["state"], "scanning", "the scrub finished too fast to interrupt: {s:#}");
    harness.export("tank");
    let root = harness.import("tank", &harness.dir.join("vdevs"));
    let s = harness.pool_json("tank");
    let resumed = scan(&s);
    assert_eq!(resumed["function"], "scrub");
    assert_eq!(resumed["state"], "scanning", "{resumed:#}");
    assert!(num(&resumed, &["issued"]) > 0, "restarted instead of resuming: {resumed:#}");
    harness.tarn_ok(&["pool", "wait", "-t", "scrub", "tank"]);
    let done = scan(&harness.pool_json("tank"));
    assert!(num(&done, &["issued"]) <= num(&done, &["to_examine"]) + (8 << 20), "the scrub ran twice: {done:#}");

    // The bindfs device dies: the spare takes over on its own.
    bind.pull();
    let status = harness.wait_status("tank", Duration::from_secs(60), "spare in use", |s| {
        common::device_counters(s).iter().any(|d| Path::new(&d.name) == spare && d.state == "ONLINE")
    });
    assert_eq!(status["state"], "DEGRADED");
    // Interrupt the spare's resilver too.
    let s = harness.wait_status("tank", Duration::from_secs(60), "resilver started", |s| scan(s)["function"] == "resilver");
    if scan(&s)["state"] == "scanning" {
        harness.export("tank");
        let root2 = harness.import("tank", &harness.dir.join("vdevs"));
        assert_eq!(root2, root);
        let resumed = scan(&harness.pool_json("tank"));
        assert_eq!(resumed["function"], "resilver", "{resumed:#}");
    }
    harness.tarn_ok(&["pool", "wait", "-t", "resilver", "tank"]);
    let status = harness.pool_json("tank");
    assert!(scan_done(&status, "resilver"), "{status:#}");
    // The spare alone (with d0 gone) serves everything.
    harness.export("tank");
    let alone = harness.dir.join("alone");
    std::fs::create_dir_all(&alone).unwrap();
    std::fs::rename(&spare, alone.join("spare0")).unwrap();
    let root = harness.import("tank", &alone);
    verify(&root, &files, "spare alone");
    drop(bind);
}

#[test]
fn autoreplace_and_damaged_files_named() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(7);
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 1, 128 << 20);
    let mut bind = BindFs::start(&harness.dir.join("under"), &harness.dir.join("bay"));
    let slot = bind.mnt.join("d1");
    std::fs::File::create(bind.src.join("d1")).unwrap().set_len(128 << 20).unwrap();
    let root = harness.create_pool("tank", &["mirror".to_string(), path_str(&devices[0]), path_str(&slot)]);
    harness.tarn_ok(&["pool", "set", "autoreplace=on", "tank"]);
    let files = write_tree(&root, "t", &mut rng, 10, 500_000);
    // The disk in bay d1 dies and a blank one is put in its place.
    bind.pull();
    harness.wait_status("tank", Duration::from_secs(60), "d1 REMOVED", |s| leaf_state(s, &slot).as_deref() == Some("REMOVED"));
    std::fs::remove_file(bind.src.join("d1")).unwrap();
    std::fs::File::create(bind.src.join("d1")).unwrap().set_len(128 << 20).unwrap();
    bind.restart();
    let status = harness.wait_status("tank", Duration::from_secs(60), "autoreplaced and resilvered", |s| {
        s["state"] == "ONLINE" && scan_done(s, "resilver")
    });
    assert_eq!(leaf_state(&status, &slot).as_deref(), Some("ONLINE"));
    let events = harness.tarn_ok(&["pool", "events", "tank"]);
    assert!(events.contains("autoreplace"), "{events}");
    verify(&root, &files, "after autoreplace");
    harness.export("tank");
    drop(bind);

    // A single disk has no redundancy: damage is found, not repaired, and
    // `status -v` names the file.
    let single = harness.vdev_files("single", 1, 128 << 20);
    let root = harness.create_pool("one", &[path_str(&single[0])]);
    let victim = random_bytes(&mut rng, 4 << 20);
    write_file(&root.join("victim"), &victim);
    harness.export("one");
    // Overwrite the device pages that hold the file's second MiB (random
    // data is stored as is), and nothing else: metadata stays readable.
    let dev = common::open_rw(&single[0]);
    let needle = &victim[1 << 20..(1 << 20) + 4096];
    let hit = common::written_pages(&single[0])
        .into_iter()
        .find(|&page| {
            let mut buf = vec![0u8; 4096];
            dev.read_exact_at(&mut buf, page).unwrap();
            buf == needle
        })
        .expect("the file's data on the device");
    dev.write_all_at(&random_bytes(&mut rng, 64 << 10), hit).unwrap();
    dev.sync_all().unwrap();
    let root = harness.import("one", &harness.dir.join("single"));
    harness.tarn_ok(&["pool", "scrub", "-w", "one"]);
    let status = harness.pool_json("one");
    assert!(num(&scan(&status), &["errors"]) > 0, "{status:#}");
    let text = harness.tarn_ok(&["pool", "status", "-v", "one"]);
    assert!(text.contains(&path_str(&root.join("victim"))), "{text}");
}

#[test]
fn too_many_failures_suspend_then_clear() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(6);
    let harness = Harness::start();
    let mut a = BindFs::start(&harness.dir.join("ua"), &harness.dir.join("a"));
    let mut b = BindFs::start(&harness.dir.join("ub"), &harness.dir.join("b"));
    let c_dir = harness.dir.join("c");
    std::fs::create_dir_all(&c_dir).unwrap();
    let devices = [a.mnt.join("d0"), b.mnt.join("d1"), c_dir.join("d2")];
    for (under, name) in [(&a.src, "d0"), (&b.src, "d1"), (&c_dir, "d2")] {
        std::fs::File::create(under.join(name)).unwrap().set_len(128 << 20).unwrap();
    }
    let mountpoint = harness.mountpoint("tank");
    let mut args = vec!["pool", "create", "-o", "failmode=continue", "-m"].into_iter().map(String::from).collect::<Vec<_>>();
    args.push(path_str(&mountpoint));
    args.push("tank".into());
    args.push("raidz1".into());
    args.extend(devices.iter().map(|d| path_str(d)));
    harness.tarn_ok(&args);
    common::wait_mounted(&mountpoint);
    let files = write_tree(&mountpoint, "kept", &mut rng, 10, 500_000);
    a.pull();
    b.pull();
    // Writing now cannot succeed: an error reaches the writer, no panic.
    let data = random_bytes(&mut rng, 1 << 20);
    let failed = std::fs::write(mountpoint.join("lost"), &data).and_then(|_| std::fs::File::open(mountpoint.join("lost"))?.sync_all());
    assert!(failed.is_err(), "a write with two of three raidz1 devices gone succeeded");
    let status = harness.wait_status("tank", Duration::from_secs(60), "pool suspended", |s| s["state"] != "ONLINE" && s["state"] != "DEGRADED");
    let text = harness.tarn_ok(&["pool", "status", "tank"]);
    assert!(text.to_lowercase().contains("suspended"), "{text}\n{status:#}");
    // Clearing while the devices are still gone: a clean error, the pool stays.
    let out = harness.tarn(&["pool", "clear", "tank"]);
    common::assert_clean_failure(&out, "pool clear with devices gone");
    assert!(harness.tarn_ok(&["pool", "list", "-H", "-o", "name"]).contains("tank"));
    // The devices come back: clear brings the pool back with its data.
    a.restart();
    b.restart();
    harness.tarn_ok(&["pool", "clear", "tank"]);
    common::wait_mounted(&mountpoint);
    let status = harness.wait_status("tank", Duration::from_secs(60), "pool back", |s| s["state"] == "ONLINE");
    assert!(status["state"] == "ONLINE");
    verify(&mountpoint, &files, "after clear");
    write_file(&mountpoint.join("after"), b"writable again");
    harness.export("tank");
    drop((a, b));
}

/// Importing a pool with a device missing alerts like a device that
/// vanishes later (issue 9, item 6).
#[test]
fn degraded_import_alerts() {
    let sinks_dir = tempfile::tempdir().unwrap();
    let (smtp, mail_dir) = sinks::start_smtp(sinks_dir.path(), &[]);
    let (webhook, hook_log) = sinks::start_webhook(sinks_dir.path(), &[]);
    let config = alert_config(smtp.port, webhook.port);
    let harness = Harness::start_with_config(Some(&config));
    let devices = harness.vdev_files("vdevs", 2, 128 << 20);
    let root = harness.create_pool("tank", &["mirror".into(), path_str(&devices[0]), path_str(&devices[1])]);
    std::fs::write(root.join("kept"), b"still here\n").unwrap();
    harness.export("tank");
    std::fs::remove_file(&devices[1]).unwrap();
    let root = harness.import("tank", &harness.dir.join("vdevs"));
    assert_eq!(harness.status_json("tank")["pools"]["tank"]["state"], "DEGRADED");
    assert_eq!(std::fs::read(root.join("kept")).unwrap(), b"still here\n");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mails = sinks::mails(&mail_dir);
        let hooks = sinks::lines(&hook_log);
        let mail_ok = mails.iter().any(|m| m.contains("tank") && m.contains("DEGRADED"));
        let hook_ok = hooks.iter().any(|h| h.contains("\"pool\":\"tank\"") && h.contains("DEGRADED"));
        if mail_ok && hook_ok {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no alert for a degraded import within 60 s\nmails: {mails:#?}\nhooks: {hooks:#?}\n{}",
            harness.daemon_log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let events = harness.tarn_ok(&["pool", "events", "-H", "tank"]);
    assert!(events.contains("pool_degraded"), "{events}");
    assert!(events.contains(&path_str(&devices[1])), "the missing device is named: {events}");
}
