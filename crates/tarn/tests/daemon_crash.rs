//! A daemon killed with datasets mounted and a writer active (issue 9,
//! item 3): the next daemon finds its predecessor's dead FUSE mounts,
//! detaches them, and mounts every dataset exactly once at its mountpoint,
//! with no manual step; a mountpoint it cannot use gets the real cause.

mod common;

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use common::{mounts_at, path_str, wait_mounted, Harness};

/// statfs always reaches the FUSE server (stat may be answered from the
/// kernel's attribute cache): None when it answers, else the errno.
fn stat_errno(path: &Path) -> Option<i32> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: valid NUL-terminated path and a writable statfs buffer.
    let r = unsafe {
        let mut buf: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut buf)
    };
    if r == 0 { None } else { std::io::Error::last_os_error().raw_os_error() }
}

#[test]
fn sigkill_with_a_writer_then_restart_mounts_each_dataset_once() {
    let mut harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 2, 256 << 20);
    let root = harness.create_pool("crash", &["mirror".into(), path_str(&devices[0]), path_str(&devices[1])]);
    let elsewhere = harness.dir.join("elsewhere");
    harness.tarn_ok(&["create", "crash/home"]);
    harness.tarn_ok(&["create", "crash/home/alice"]);
    harness.tarn_ok(&["create", "-o", &format!("mountpoint={}", path_str(&elsewhere)), "crash/media"]);
    let mountpoints = [root.clone(), root.join("home"), root.join("home/alice"), elsewhere.clone()];
    for path in &mountpoints {
        wait_mounted(path);
    }
    std::fs::write(root.join("home/alice/kept"), b"written and synced before the crash\n").unwrap();
    std::fs::File::open(root.join("home/alice/kept")).unwrap().sync_all().unwrap();

    // A writer streams into a file while the daemon is killed.
    let stream = root.join("home/alice/stream");
    let writer = std::thread::spawn(move || {
        let mut file = std::fs::File::create(&stream).expect("create the stream file");
        let chunk = vec![0x5au8; 64 << 10];
        let mut written = 0u64;
        loop {
            match file.write_all(&chunk) {
                Ok(()) => written += chunk.len() as u64,
                Err(e) => return (written, e.raw_os_error()),
            }
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    harness.kill_daemon();
    let (written, errno) = writer.join().unwrap();
    assert!(written > 0, "the writer wrote nothing before the kill");
    assert!(matches!(errno, Some(libc::ENOTCONN | libc::ECONNABORTED)), "writer stopped with {errno:?}");
    // What the issue saw: dead mounts left behind.
    for path in &mountpoints {
        assert_eq!(mounts_at(path), 1, "{} should still be in the mount table", path.display());
    }
    assert_eq!(stat_errno(&root), Some(libc::ENOTCONN), "the root mount should be dead");

    // A new daemon, no manual step.
    harness.restart_daemon();
    for path in &mountpoints {
        wait_mounted(path);
    }
    // The dataset mounts come up one after the other; give the last a moment.
    std::thread::sleep(Duration::from_millis(300));
    for path in &mountpoints {
        assert_eq!(mounts_at(path), 1, "{} must be mounted exactly once", path.display());
        assert_eq!(stat_errno(path), None, "{} must answer", path.display());
    }
    assert_eq!(
        std::fs::read(root.join("home/alice/kept")).unwrap(),
        b"written and synced before the crash\n"
    );
    // The streamed file holds whatever reached a txg (maybe nothing yet:
    // it was never synced), and it reads back whole.
    if let Ok(bytes) = std::fs::read(root.join("home/alice/stream")) {
        assert!(bytes.iter().all(|&b| b == 0x5a), "the stream file holds only what was written");
    }
    let log = harness.daemon_log();
    assert!(log.contains("detached the dead mount of 'crash"), "daemon log:\n{log}");
    let mounted = harness.tarn_ok(&["get", "-H", "-o", "name,value", "-r", "mounted", "crash"]);
    for line in mounted.lines() {
        assert!(line.ends_with("\tyes"), "every dataset mounted: {mounted}");
    }
    let out = harness.tarn(&["debug", "check", "crash"]);
    assert!(out.status.success(), "debug check: {}", String::from_utf8_lossy(&out.stdout));
}

/// Another daemon (another state directory) starting while this one's
/// mounts are dead leaves them alone: they are this pool's daemon's to
/// clean up, and it does when it comes back.
#[test]
fn a_daemon_leaves_another_daemons_dead_mounts_alone() {
    let mut harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 1, 128 << 20);
    let root = harness.create_pool("theirs", &[path_str(&devices[0])]);
    wait_mounted(&root);
    harness.kill_daemon();
    assert_eq!(stat_errno(&root), Some(libc::ENOTCONN), "the mount should be dead");

    let mut other = Harness::start();
    let other_devices = other.vdev_files("vdevs", 1, 128 << 20);
    let other_root = other.create_pool("ours", &[path_str(&other_devices[0])]);
    wait_mounted(&other_root);
    assert_eq!(mounts_at(&root), 1, "another daemon detached a dead mount of a pool it does not have");
    assert!(!other.daemon_log().contains("detached the dead mount"), "{}", other.daemon_log());
    other.stop_daemon();

    harness.restart_daemon();
    wait_mounted(&root);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while mounts_at(&root) != 1 || stat_errno(&root).is_some() {
        assert!(std::time::Instant::now() < deadline, "{} mounted {} times, statfs {:?}", root.display(), mounts_at(&root), stat_errno(&root));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(harness.daemon_log().contains("detached the dead mount of 'theirs'"), "{}", harness.daemon_log());
}

#[test]
fn unusable_mountpoints_name_the_real_cause() {
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 1, 128 << 20);
    harness.create_pool("where", &[path_str(&devices[0])]);
    // A regular file where the mountpoint should be.
    let file = harness.dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let out = harness.tarn(&["create", "-o", &format!("mountpoint={}", path_str(&file.join("below"))), "where/x"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot create mountpoint") && stderr.contains("Not a directory"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    // A place another file system already mounts tarn at: refused, named.
    let taken = harness.mountpoint("where");
    let out = harness.tarn(&["create", "-o", &format!("mountpoint={}", path_str(&taken)), "where/y"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "mounting over a live mount must be refused");
    assert!(stderr.contains("already mounted ('where')"), "{stderr}");
    assert_eq!(mounts_at(&taken), 1);
}
