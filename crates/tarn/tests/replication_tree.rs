//! Replication of dataset trees as a replication user scripts it (issue
//! 14), through the real binary, a real daemon and FUSE mounts:
//!
//! - `recv_f_prunes_what_the_sender_no_longer_has`: `send -R -I | recv -F`
//!   into a replica destroys the snapshots and child datasets the sender
//!   destroyed (and a dataset made only on the replica), keeps a held
//!   snapshot with a warning, and without `-F` destroys nothing.
//! - `clones_arrive_as_clones_sharing_space`: `send -R` of a tree with a
//!   clone recreates it as a clone of the received origin (the pool's
//!   `alloc` grows by the clone's own data, not by a second copy), a clone
//!   made later arrives as one with `send -R -I`, and `send -i origin@snap
//!   clone@x` makes a clone on a receiver that has the origin anywhere.
//! - `a_daemon_killed_mid_receive_leaves_no_leak`: the daemon is killed
//!   (SIGKILL) while it receives, with and without `-s`; after a restart
//!   the pool checker finds no leak, the target is unchanged or holds a
//!   resumable state, and `send -t` completes it.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use common::streams::{recv_ok, send_to, tarn_cmd};
use common::{hash_file, path_str, random_bytes, write_file, Harness};

fn names(h: &Harness, args: &[&str]) -> Vec<String> {
    h.tarn_ok(args).lines().map(str::to_string).collect()
}

fn get(h: &Harness, prop: &str, name: &str) -> String {
    h.tarn_ok(&["get", "-H", "-o", "value", prop, name]).trim().to_string()
}

fn alloc(h: &Harness, pool: &str) -> u64 {
    h.tarn_ok(&["pool", "sync", pool]);
    h.tarn_ok(&["pool", "list", "-H", "-p", "-o", "alloc", pool]).trim().parse().expect("alloc")
}

fn check_clean(h: &Harness, pool: &str) {
    let out = h.tarn(&["debug", "check", pool]);
    assert!(out.status.success(), "debug check {pool}: {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

fn pools(h: &Harness) -> (PathBuf, PathBuf) {
    let a = h.vdev_files("a", 3, common::VDEV_SIZE_BYTES);
    let b = h.vdev_files("b", 2, common::VDEV_SIZE_BYTES);
    let tank = h.create_pool("tank", &[&["raidz1".to_string()][..], &a.iter().map(|p| path_str(p)).collect::<Vec<_>>()].concat());
    let backup = h.create_pool("backup", &[&["mirror".to_string()][..], &b.iter().map(|p| path_str(p)).collect::<Vec<_>>()].concat());
    (tank, backup)
}

#[test]
fn recv_f_prunes_what_the_sender_no_longer_has() {
    let h = Harness::start();
    let (tank, _) = pools(&h);
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    h.tarn_ok(&["create", "-p", "tank/src/c1"]);
    h.tarn_ok(&["create", "tank/src/c2"]);
    for (i, d) in ["src", "src/c1", "src/c2"].iter().enumerate() {
        write_file(&tank.join(d).join("f"), &random_bytes(&mut rng, 100_000 + i));
    }
    h.tarn_ok(&["snapshot", "-r", "tank/src@a"]);
    h.tarn_ok(&["snapshot", "-r", "tank/src@b"]);
    let stream = h.dir.join("full");
    send_to(&h, &["-R", "tank/src@b"], &stream);
    recv_ok(&h, &["backup/dst"], &stream);
    h.tarn_ok(&["hold", "keep", "backup/dst/c1@a"]);

    // The sender prunes: @a everywhere, the whole of c2; then @c.
    h.tarn_ok(&["destroy", "-r", "tank/src@a"]);
    h.tarn_ok(&["destroy", "-r", "tank/src/c2"]);
    write_file(&tank.join("src/f2"), &random_bytes(&mut rng, 5000));
    h.tarn_ok(&["snapshot", "-r", "tank/src@c"]);
    let inc = h.dir.join("inc");
    send_to(&h, &["-R", "-I", "@b", "tank/src@c"], &inc);

    // Without -F: received, nothing destroyed.
    let before = names(&h, &["list", "-H", "-o", "name", "-t", "all", "-r", "backup/dst"]);
    let (_, err) = recv_ok(&h, &["backup/dst"], &inc);
    assert!(!err.contains("not on the sender"), "{err}");
    let after = names(&h, &["list", "-H", "-o", "name", "-t", "all", "-r", "backup/dst"]);
    for n in &before {
        assert!(after.contains(n), "'{n}' destroyed without -F: {after:?}");
    }
    assert!(after.contains(&"backup/dst@c".to_string()), "{after:?}");

    // Again with -F, from a replica rolled back to @b, with a dataset of
    // its own (its mountpoint directory changes the replica's head: -F
    // rolls that back too).
    h.tarn_ok(&["create", "backup/dst/local"]);
    h.tarn_ok(&["destroy", "backup/dst/c1@c"]);
    h.tarn_ok(&["destroy", "backup/dst@c"]);
    let (out, err) = recv_ok(&h, &["-F", "-v", "backup/dst"], &inc);
    let now = names(&h, &["list", "-H", "-o", "name", "-t", "all", "-r", "backup/dst"]);
    for gone in ["backup/dst@a", "backup/dst/c2", "backup/dst/c2@a", "backup/dst/c2@b", "backup/dst/local"] {
        assert!(!now.contains(&gone.to_string()), "'{gone}' is still there after recv -F: {now:?}");
    }
    for kept in ["backup/dst@b", "backup/dst@c", "backup/dst/c1@b", "backup/dst/c1@c", "backup/dst/c1@a"] {
        assert!(now.contains(&kept.to_string()), "'{kept}' is missing after recv -F: {now:?}");
    }
    assert!(err.contains("'backup/dst/c1@a' is not on the sender, but is kept: held (keep)"), "{err}");
    assert!(out.contains("destroyed backup/dst/c2"), "{out}");
    assert!(out.contains("destroyed backup/dst@a"), "{out}");
    // The pruned datasets are unmounted and gone; the rest is mounted.
    let backup_mnt = h.mountpoint("backup");
    assert!(!backup_mnt.join("dst/c2/f").exists() && !backup_mnt.join("dst/local").join(".zfs").exists());
    assert_eq!(hash_file(&backup_mnt.join("dst/f2")), hash_file(&tank.join("src/f2")));
    check_clean(&h, "backup");
}

#[test]
fn clones_arrive_as_clones_sharing_space() {
    let h = Harness::start();
    let (tank, backup_mnt) = pools(&h);
    let mut rng = ChaCha8Rng::seed_from_u64(41);
    h.tarn_ok(&["create", "-o", "compression=off", "tank/src"]);
    let big = random_bytes(&mut rng, 8 << 20);
    write_file(&tank.join("src/big"), &big);
    h.tarn_ok(&["snapshot", "tank/src@base"]);
    h.tarn_ok(&["clone", "tank/src@base", "tank/src/kid"]);
    write_file(&tank.join("src/kid/own"), &random_bytes(&mut rng, 1 << 20));
    h.tarn_ok(&["snapshot", "-r", "tank/src@s1"]);
    let stream = h.dir.join("tree");
    send_to(&h, &["-R", "tank/src@s1"], &stream);

    let before = alloc(&h, "backup");
    recv_ok(&h, &["backup/copy"], &stream);
    let grown = alloc(&h, "backup") - before;
    assert_eq!(get(&h, "origin", "backup/copy/kid"), "backup/copy@base");
    assert_eq!(hash_file(&backup_mnt.join("copy/kid/big")), hash_file(&tank.join("src/big")));
    assert_eq!(hash_file(&backup_mnt.join("copy/kid/own")), hash_file(&tank.join("src/kid/own")));
    // 8 MiB shared and 1 MiB of the clone's own, on a two-way mirror
    // (counted once by `alloc`, as zpool counts a mirror): a second copy
    // of the shared 8 MiB would make it 17.
    assert!(grown < 12 << 20, "the clone did not share its origin's blocks: alloc grew by {grown} bytes");
    assert!(grown > 9 << 20, "alloc grew by only {grown} bytes for 9 MiB of data");

    // A clone made later arrives as one in an incremental -R.
    h.tarn_ok(&["clone", "tank/src@s1", "tank/src/kid2"]);
    write_file(&tank.join("src/kid2/more"), &random_bytes(&mut rng, 200_000));
    h.tarn_ok(&["snapshot", "-r", "tank/src@s2"]);
    let inc = h.dir.join("inc");
    send_to(&h, &["-R", "-I", "@s1", "tank/src@s2"], &inc);
    // (Reading the replica updated its access times: -F, as with zfs.)
    recv_ok(&h, &["-F", "backup/copy"], &inc);
    assert_eq!(get(&h, "origin", "backup/copy/kid2"), "backup/copy@s1");
    assert_eq!(hash_file(&backup_mnt.join("copy/kid2/more")), hash_file(&tank.join("src/kid2/more")));

    // `send -i origin@snap clone@x`: the receiver finds the origin by guid.
    let one = h.dir.join("one");
    send_to(&h, &["-i", "tank/src@base", "tank/src/kid@s1"], &one);
    let before = alloc(&h, "backup");
    recv_ok(&h, &["backup/kid-again"], &one);
    assert_eq!(get(&h, "origin", "backup/kid-again"), "backup/copy@base");
    assert_eq!(hash_file(&backup_mnt.join("kid-again/own")), hash_file(&tank.join("src/kid/own")));
    assert!(alloc(&h, "backup") - before < 3 << 20, "the second clone copied its origin");
    // Not a clone's origin: refused in one line, nothing sent.
    let out = tarn_cmd(&h, &["send", "-i", "tank/src@s1", "tank/src/kid@s1"]).stdout(Stdio::null()).output().unwrap();
    common::assert_clean_failure(&out, "send -i of a snapshot that is not the origin");
    check_clean(&h, "backup");
    check_clean(&h, "tank");
}

/// Feeds `stream` to `tarn recv ARGS`; the daemon is killed once `part`
/// bytes are in, then started again.
fn receive_killed(h: &mut Harness, args: &[&str], stream: &[u8], part: usize) {
    let mut child = tarn_cmd(h, &[&["recv"], args].concat()).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    let _ = input.write_all(&stream[..part]);
    let _ = input.flush();
    // What the daemon applied so far reaches the disk (a txg), so the
    // kill lands in the middle of the receive, not before it.
    std::thread::sleep(Duration::from_millis(300));
    h.tarn_ok(&["pool", "sync", "backup"]);
    h.kill_daemon();
    drop(input);
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().ok().flatten().is_none() {
        assert!(Instant::now() < deadline, "tarn recv did not end after the daemon died");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Mounts of the killed daemon are dead: the new one detaches them.
    h.restart_daemon();
}

#[test]
fn a_daemon_killed_mid_receive_leaves_no_leak() {
    let mut h = Harness::start();
    let (tank, backup_mnt) = pools(&h);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    h.tarn_ok(&["create", "-o", "compression=off", "tank/big"]);
    for i in 0..12 {
        write_file(&tank.join(format!("big/f{i}")), &random_bytes(&mut rng, 3 << 20));
    }
    h.tarn_ok(&["snapshot", "tank/big@one"]);
    let file = h.dir.join("stream");
    send_to(&h, &["tank/big@one"], &file);
    let stream = std::fs::read(&file).unwrap();
    for (resumable, target) in [(false, "backup/plain"), (true, "backup/resumable")] {
        let args: Vec<&str> = if resumable { vec!["-s", target] } else { vec![target] };
        receive_killed(&mut h, &args, &stream, stream.len() / 2);
        h.wait_status("backup", Duration::from_secs(30), "backup imported again", |s| s["state"] == "ONLINE");
        check_clean(&h, "backup");
        let token = h.tarn(&["get", "-H", "-o", "value", "receive_resume_token", target]);
        let token = String::from_utf8_lossy(&token.stdout).trim().to_string();
        if !resumable {
            assert!(!h.tarn(&["list", target]).status.success(), "{target} exists after a killed receive without -s");
            continue;
        }
        assert!(token.starts_with("tarn1-"), "no resume token on {target}: {token:?}\n{}", common::tail(&h.daemon_log(), 20));
        let rest = h.dir.join("rest");
        send_to(&h, &["-t", &token], &rest);
        recv_ok(&h, &["-s", target], &rest);
        for i in 0..12 {
            let rel = format!("f{i}");
            let mnt = backup_mnt.join("resumable");
            assert_eq!(hash_file(&mnt.join(&rel)), hash_file(&tank.join("big").join(&rel)), "{rel}");
        }
        check_clean(&h, "backup");
    }
}
