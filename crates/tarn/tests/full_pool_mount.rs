//! A full pool through the daemon's mount, as a user meets it (issue 9,
//! items 1 and 2): one big file until ENOSPC, close to what `tarn list`
//! promised; then thousands of small files; `rm -rf` of everything on the
//! full pool; a new file at once (no export, no waiting for a timeout); the
//! same again, three times; `debug check` clean. Quotas stop a writer
//! within one record of the quota.

mod common;

use std::io::Write;
use std::path::Path;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use common::{path_str, random_bytes, Harness};

const CHUNK: usize = 1 << 20;

/// Incompressible bytes, the same every run.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    random_bytes(&mut ChaCha8Rng::seed_from_u64(seed), len)
}

fn prop(harness: &Harness, name: &str, dataset: &str) -> u64 {
    let out = harness.tarn_ok(&["get", "-H", "-p", "-o", "value", name, dataset]);
    out.trim().parse().unwrap_or_else(|_| panic!("{name} of {dataset}: {out}"))
}

/// Writes `chunk` into `path` until the file system refuses; returns the
/// bytes acknowledged and the errno that stopped it.
fn fill(path: &Path, chunk: &[u8]) -> (u64, i32) {
    let mut file = std::fs::File::create(path).expect("create on a pool with room");
    let mut written = 0u64;
    loop {
        match file.write(chunk) {
            Ok(n) => written += n as u64,
            Err(e) => {
                // fsync makes the pool write a txg: `used` shows it all.
                file.sync_all().expect("fsync after the refused write");
                return (written, e.raw_os_error().unwrap_or(0));
            }
        }
    }
}

fn small_files(dir: &Path, data: &[u8], limit: usize) -> usize {
    std::fs::create_dir(dir).expect("mkdir on a nearly full pool");
    for i in 0..limit {
        let path = dir.join(format!("f{i}"));
        let stored = std::fs::File::create(&path).and_then(|mut f| f.write_all(data));
        if let Err(e) = stored {
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "small file {i}: {e}");
            return i;
        }
    }
    limit
}

/// `available` once the last deletes reached disk: frees count when their
/// txg is written (as in ZFS, `avail` grows a few seconds after `rm`), so
/// wait until two readings more than a txg apart (txg_timeout = 1 s here)
/// agree.
fn settled_available(harness: &Harness, name: &str) -> u64 {
    let mut last = prop(harness, "available", name);
    for _ in 0..12 {
        std::thread::sleep(std::time::Duration::from_millis(2500));
        let now = prop(harness, "available", name);
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("available of {name} never settled (last {last})");
}

fn journey(spec: &[String], name: &str, rounds: usize) {
    let config = |_: &Path| "[tunables]\ntxg_timeout = 1\n".to_string();
    let harness = Harness::start_with_config(Some(&config));
    let root = harness.create_pool(name, spec);
    let chunk = noise(CHUNK, 5);
    let small = noise(8 << 10, 9);
    for round in 0..rounds {
        let promised = settled_available(&harness, name);
        let (written, errno) = fill(&root.join("big"), &chunk);
        assert_eq!(errno, libc::ENOSPC, "round {round}: the big file stopped with errno {errno}");
        let gap = promised.abs_diff(written);
        assert!(gap * 100 <= promised, "round {round}: tarn list promised {promised}, {written} fit");
        // The big file goes, small files take its room and stop at ENOSPC.
        std::fs::remove_file(root.join("big")).expect("rm on a full pool");
        let files = small_files(&root.join("small"), &small, 200_000);
        assert!(files > 10_000, "round {round}: only {files} small files");
        // Everything goes, on a full pool, and the space is back at once.
        std::fs::remove_dir_all(root.join("small")).expect("rm -rf on a full pool");
        std::fs::write(root.join("touch"), b"").expect("a new file right after rm -rf");
        let (again, errno) = fill(&root.join("again"), &chunk);
        assert_eq!(errno, libc::ENOSPC, "round {round}: errno {errno}");
        assert!(
            (again + CHUNK as u64) * 100 >= written * 99,
            "round {round}: after rm -rf only {again} of {written} bytes fit again"
        );
        std::fs::remove_file(root.join("again")).unwrap();
        std::fs::remove_file(root.join("touch")).unwrap();
        eprintln!("round {round}: {written} bytes, {files} small files, {again} bytes again");
    }
    let out = harness.tarn(&["debug", "check", name]);
    assert!(out.status.success(), "debug check: {}", String::from_utf8_lossy(&out.stdout));
    let health = harness.status_json(name);
    assert_eq!(health["pools"][name]["state"], "ONLINE", "{health:#}");
}

#[test]
fn mirror_fills_empties_and_fills_again_through_the_mount() {
    let harness_dir = tempfile::tempdir().unwrap();
    let devices: Vec<String> = (0..2)
        .map(|i| {
            let path = harness_dir.path().join(format!("m{i}"));
            std::fs::File::create(&path).unwrap().set_len(192 << 20).unwrap();
            path_str(&path)
        })
        .collect();
    let mut spec = vec!["mirror".to_string()];
    spec.extend(devices);
    journey(&spec, "fullm", 3);
}

#[test]
fn raidz1_fills_empties_and_fills_again_through_the_mount() {
    let harness_dir = tempfile::tempdir().unwrap();
    let devices: Vec<String> = (0..4)
        .map(|i| {
            let path = harness_dir.path().join(format!("z{i}"));
            std::fs::File::create(&path).unwrap().set_len(96 << 20).unwrap();
            path_str(&path)
        })
        .collect();
    let mut spec = vec!["raidz1".to_string()];
    spec.extend(devices);
    journey(&spec, "fullz", 3);
}

/// `quota=50M` and a 64 MiB write: refused with EDQUOT within one record
/// of the quota, counting what is still dirty in open txgs.
#[test]
fn quota_overshoot_is_bounded_by_one_record() {
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 1, 512 << 20);
    let root = harness.create_pool("quota", &[path_str(&devices[0])]);
    harness.tarn_ok(&["create", "-o", "quota=50M", "quota/q"]);
    harness.tarn_ok(&["create", "quota/q/child"]);
    let chunk = noise(128 << 10, 3);
    let record = 128u64 << 10;
    let quota = 50u64 << 20;
    // Straight into the dataset, then into a child under the same quota.
    for (dataset, dir) in [("quota/q", root.join("q")), ("quota/q/child", root.join("q/child"))] {
        let (written, errno) = fill(&dir.join("big"), &chunk);
        assert_eq!(errno, libc::EDQUOT, "{dataset}: stopped with errno {errno} after {written}");
        assert!(written <= quota + record, "{dataset}: {written} bytes went in under a 50M quota");
        let used = prop(&harness, "used", "quota/q");
        assert!(used <= quota + record, "{dataset}: used {used} > quota + one record");
        assert!(used >= quota - 2 * record, "{dataset}: stopped early, used {used}");
        assert_eq!(prop(&harness, "available", "quota/q"), quota.saturating_sub(used));
        std::fs::remove_file(dir.join("big")).unwrap();
    }
    // The quota's room is back after the delete.
    std::fs::write(root.join("q/after"), &chunk).expect("a write after the delete");
}
