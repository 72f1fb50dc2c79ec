//! Issue 13 through the daemon and CLI: volumes created with `create -V`
//! (`-b`, `-s`, `-p`), listed and typed as `volume`, served over NBD by
//! name (`[nbd]` in the daemon's config) to qemu-io and nbdinfo;
//! snapshots served read-only as `pool/vol@snap`, clones as volumes of
//! their own; `volsize` grown (seen by new connections) and shrunk only
//! with `-f`; contents kept across export/import and across a daemon
//! killed after a FLUSH (the intent log replayed when the volume opens);
//! a destroyed volume is no longer served; bad sizes refused in one line.

mod common;

use std::process::Command;

use common::{path_str, Harness};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn uri(port: u16, export: &str) -> String {
    format!("nbd://127.0.0.1:{port}/{export}")
}

/// qemu-io on `export`: every command must succeed.
fn qemu_io(port: u16, export: &str, commands: &[&str]) {
    let mut c = Command::new("qemu-io");
    if export.contains('@') {
        c.arg("-r"); // snapshots are served read-only
    }
    c.args(["-f", "raw", &uri(port, export)]);
    for cmd in commands {
        c.args(["-c", cmd]);
    }
    let out = common::run_with_timeout(c, std::time::Duration::from_secs(120));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !text.contains("failed") && !text.contains("error"), "qemu-io {export} {commands:?}:\n{text}");
}

/// qemu-io on `export` whose output must contain `want`.
fn qemu_io_says(port: u16, export: &str, command: &str, want: &str) {
    let mut c = Command::new("qemu-io");
    c.args(["-f", "raw", &uri(port, export), "-c", command]);
    let out = common::run_with_timeout(c, std::time::Duration::from_secs(120));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(want), "qemu-io {export} {command}: wanted '{want}' in:\n{text}");
}

fn nbdinfo(args: &[&str]) -> String {
    let mut c = Command::new("nbdinfo");
    c.args(args);
    let out = common::run_with_timeout(c, std::time::Duration::from_secs(60));
    assert!(out.status.success(), "nbdinfo {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `tarn send SEND | tarn recv RECV` through a real pipe.
fn pipe(h: &Harness, send: &[&str], recv: &[&str]) {
    let tarn = |args: &[&str]| {
        let mut c = Command::new(common::TARN);
        c.arg("--socket").arg(&h.socket).args(args);
        c
    };
    let mut sender = tarn(&[&["send"], send].concat()).stdout(std::process::Stdio::piped()).spawn().expect("spawn tarn send");
    let stream = sender.stdout.take().expect("sender stdout");
    let receiver = tarn(&[&["recv"], recv].concat()).stdin(stream).output().expect("run tarn recv");
    assert!(sender.wait().unwrap().success(), "tarn send {send:?}");
    assert!(receiver.status.success(), "tarn recv {recv:?}: {}", String::from_utf8_lossy(&receiver.stderr));
}

/// xxh3 of the whole device behind `export` (nbdcopy to a file, hashed).
fn device_hash(h: &Harness, port: u16, export: &str) -> u64 {
    let out = h.dir.join(format!("dev-{}.img", export.replace(['/', '@'], "_")));
    let mut c = Command::new("nbdcopy");
    c.args([&uri(port, export), out.to_str().unwrap()]);
    let o = common::run_with_timeout(c, std::time::Duration::from_secs(120));
    assert!(o.status.success(), "nbdcopy {export}: {}", String::from_utf8_lossy(&o.stderr));
    let hash = common::hash_file(&out);
    std::fs::remove_file(&out).unwrap();
    hash
}

fn size_of(port: u16, export: &str) -> u64 {
    nbdinfo(&["--size", &uri(port, export)]).trim().parse().unwrap()
}

#[test]
fn volumes_through_the_cli_served_over_nbd() {
    let port = free_port();
    let config = move |_: &std::path::Path| format!("[nbd]\nlisten = \"127.0.0.1:{port}\"\n");
    let mut h = Harness::start_with_config(Some(&config));
    let vdevs = h.vdev_files("vdevs", 2, 512 << 20);
    let vdir = vdevs[0].parent().unwrap().to_path_buf();
    h.create_pool("tank", &["mirror".into(), path_str(&vdevs[0]), path_str(&vdevs[1])]);
    h.tarn_ok(&["create", "-V", "64M", "tank/vol"]);
    h.tarn_ok(&["create", "-p", "-s", "-b", "4K", "-V", "1G", "tank/vm/scratch"]);
    let rows = h.tarn_ok(&["list", "-H", "-t", "volume", "-o", "name,type,volsize,volblocksize"]);
    assert_eq!(rows, "tank/vm/scratch\tvolume\t1G\t4K\ntank/vol\tvolume\t64M\t16K\n", "{rows}");
    let fs_rows = h.tarn_ok(&["list", "-H", "-t", "filesystem", "-o", "name"]);
    assert_eq!(fs_rows, "tank\ntank/vm\n");
    assert_eq!(h.tarn_ok(&["get", "-H", "-o", "value", "volsize", "tank/vol"]).trim(), "64M");
    assert_eq!(h.tarn_ok(&["get", "-H", "-o", "value", "volsize", "tank/vm"]).trim(), "-");
    assert!(!h.mountpoint("tank").join("vol").exists(), "a volume was mounted");

    // Bad input: one line each, nothing created.
    for (args, want) in [
        (&["create", "-V", "10M", "-b", "3K", "tank/bad"][..], "volblocksize"),
        (&["create", "-V", "100000", "tank/bad"], "multiple of volblocksize"),
        (&["create", "-V", "0", "tank/bad"], "greater than zero"),
        (&["create", "-V", "lots", "tank/bad"], "bad volsize"),
    ] {
        let e = common::refused(&h, args, 1);
        assert!(e.contains(want), "{args:?}: {e}");
    }
    assert!(h.tarn(&["list", "tank/bad"]).status.code() != Some(0));

    let list = nbdinfo(&["--list", "--json", &format!("nbd://127.0.0.1:{port}")]);
    assert!(list.contains("\"tank/vol\"") && list.contains("\"tank/vm/scratch\""), "{list}");
    assert_eq!(size_of(port, "tank/vol"), 64 << 20);
    qemu_io(port, "tank/vol", &["write -P 0xa1 0 8M", "write -P 0xa2 60M 4M", "flush", "read -P 0xa1 0 8M", "read -P 0xa2 60M 4M", "read -P 0 8M 52M"]);
    qemu_io(port, "tank/vm/scratch", &["write -P 0x5c 900M 1M", "read -P 0x5c 900M 1M"]);

    // Snapshot: served read-only with the contents it was taken with.
    h.tarn_ok(&["snapshot", "tank/vol@a"]);
    qemu_io(port, "tank/vol", &["write -P 0xb1 0 4M", "flush"]);
    qemu_io(port, "tank/vol@a", &["read -P 0xa1 0 8M"]);
    // Opened for writing, a snapshot is refused.
    qemu_io_says(port, "tank/vol@a", "write -P 0 0 4k", "Permission denied");
    qemu_io(port, "tank/vol", &["read -P 0xb1 0 4M", "read -P 0xa1 4M 4M"]);
    // A clone: a volume of its own, starting as the snapshot.
    h.tarn_ok(&["clone", "tank/vol@a", "tank/volclone"]);
    let hash_a = device_hash(&h, port, "tank/vol@a");
    assert_eq!(device_hash(&h, port, "tank/volclone"), hash_a, "a clone is its origin, whole");
    assert_ne!(device_hash(&h, port, "tank/vol"), hash_a, "the head changed since @a");
    assert_eq!(h.tarn_ok(&["get", "-H", "-o", "value", "type,volsize", "tank/volclone"]), "volume\n64M\n");
    qemu_io(port, "tank/volclone", &["read -P 0xa1 0 8M", "write -P 0xc1 0 1M", "read -P 0xc1 0 1M"]);
    qemu_io(port, "tank/vol@a", &["read -P 0xa1 0 8M"]);

    // volsize: grown, seen by a new connection; shrunk only with -f.
    h.tarn_ok(&["set", "volsize=128M", "tank/vol"]);
    assert_eq!(size_of(port, "tank/vol"), 128 << 20);
    qemu_io(port, "tank/vol", &["read -P 0 64M 64M", "write -P 0xd1 120M 1M", "read -P 0xa2 60M 4M"]);
    let e = common::refused(&h, &["set", "volsize=32M", "tank/vol"], 1);
    assert!(e.contains("-f"), "{e}");
    assert_eq!(size_of(port, "tank/vol"), 128 << 20);
    h.tarn_ok(&["set", "-f", "volsize=96M", "tank/vol"]);
    assert_eq!(size_of(port, "tank/vol"), 96 << 20);
    h.tarn_ok(&["set", "volsize=128M", "tank/vol"]);
    qemu_io(port, "tank/vol", &["read -P 0 96M 32M", "read -P 0xa2 60M 4M"]);
    let e = common::refused(&h, &["set", "volsize=1G", "tank/vm"], 1);
    assert!(e.contains("not a volume"), "{e}");

    // Send and receive: a volume arrives as a volume of the same size and
    // contents, its snapshots keeping the size they had; an incremental
    // brings the new size.
    pipe(&h, &["tank/vol@a"], &["tank/copy"]);
    assert_eq!(h.tarn_ok(&["get", "-H", "-o", "value", "type,volsize,volblocksize", "tank/copy"]), "volume\n64M\n16K\n");
    qemu_io(port, "tank/copy", &["read -P 0xa1 0 8M", "read -P 0xa2 60M 4M"]);
    qemu_io(port, "tank/copy@a", &["read -P 0xa1 0 8M"]);
    assert_eq!(device_hash(&h, port, "tank/copy@a"), hash_a, "the received snapshot, whole");
    assert_eq!(device_hash(&h, port, "tank/copy"), hash_a);
    h.tarn_ok(&["snapshot", "tank/vol@b"]);
    pipe(&h, &["-i", "@a", "tank/vol@b"], &["-F", "tank/copy"]);
    assert_eq!(h.tarn_ok(&["get", "-H", "-o", "value", "volsize", "tank/copy", "tank/copy@a", "tank/copy@b"]), "128M\n64M\n128M\n");
    qemu_io(port, "tank/copy", &["read -P 0xb1 0 4M", "read -P 0xa1 4M 4M", "read -P 0 96M 32M"]);
    let hash_b = device_hash(&h, port, "tank/vol@b");
    assert_eq!(device_hash(&h, port, "tank/copy@b"), hash_b);
    assert_eq!(device_hash(&h, port, "tank/copy"), hash_b);

    // Export and import: the contents are kept, the volume served again.
    h.export("tank");
    assert!(!nbdinfo(&["--list", "--json", &format!("nbd://127.0.0.1:{port}")]).contains("tank/vol"));
    h.import("tank", &vdir);
    qemu_io(port, "tank/vol", &["read -P 0xb1 0 4M", "read -P 0xa1 4M 4M", "read -P 0xa2 60M 4M"]);

    // A write acknowledged by a FLUSH survives the daemon's death: the
    // log replays when the volume opens again.
    h.tarn_ok(&["tunable", "set", "txg_timeout=600"]);
    h.tarn_ok(&["pool", "sync", "tank"]);
    qemu_io(port, "tank/vol", &["write -P 0xe1 16M 2M", "flush"]);
    h.kill_daemon();
    h.restart_daemon();
    let mut tries = 0;
    while !nbdinfo(&["--list", "--json", &format!("nbd://127.0.0.1:{port}")]).contains("\"tank/vol\"") {
        tries += 1;
        assert!(tries < 100, "the volume is not served after the restart:\n{}", common::tail(&h.daemon_log(), 30));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    qemu_io(port, "tank/vol", &["read -P 0xe1 16M 2M", "read -P 0xb1 0 4M"]);
    let check = h.tarn_ok(&["debug", "check", "tank"]);
    assert!(check.contains("no damage, leaks or double allocations found"), "{check}");

    // Rollback: the volume is closed, rolled back and served again, whole.
    h.tarn_ok(&["rollback", "tank/vol@b"]);
    assert_eq!(device_hash(&h, port, "tank/vol"), hash_b, "rolled back to @b, whole");
    // readonly=on: opened for writing, refused; read as before.
    h.tarn_ok(&["set", "readonly=on", "tank/vol"]);
    qemu_io_says(port, "tank/vol", "write -P 0 0 4k", "Permission denied");
    qemu_io(port, "tank/vol@b", &["read -P 0xb1 0 4M"]);
    h.tarn_ok(&["set", "readonly=off", "tank/vol"]);
    qemu_io(port, "tank/vol", &["write -P 0xf1 0 4k", "read -P 0xf1 0 4k"]);

    // Destroyed: no longer served.
    h.tarn_ok(&["destroy", "tank/volclone"]);
    let list = nbdinfo(&["--list", "--json", &format!("nbd://127.0.0.1:{port}")]);
    assert!(!list.contains("tank/volclone") && list.contains("\"tank/vol\""), "{list}");
}

fn bytes(h: &Harness, prop: &str, name: &str) -> u64 {
    h.tarn_ok(&["get", "-Hp", "-o", "value", prop, name]).trim().parse().unwrap_or_else(|e| panic!("{prop} of {name}: {e}"))
}

/// Issue 13, test 5's space accounting: a volume created without `-s`
/// reserves its size (`refreservation = volsize`); what its data does not
/// use yet is `usedbyrefreservation`, counted in its `used` and its
/// parent's, and held back from every other dataset: their `available`
/// drops by it, and filling a file system stops with ENOSPC short of it,
/// while the volume can still write all of its size. A sparse volume
/// reserves nothing; a reservation that cannot fit is refused.
#[test]
fn refreservation_holds_space_for_a_volume() {
    let port = free_port();
    let config = move |_: &std::path::Path| format!("[nbd]\nlisten = \"127.0.0.1:{port}\"\n");
    let h = Harness::start_with_config(Some(&config));
    let vdevs = h.vdev_files("vdevs", 2, 384 << 20);
    h.create_pool("tank", &["mirror".into(), path_str(&vdevs[0]), path_str(&vdevs[1])]);
    h.tarn_ok(&["create", "-o", "compression=off", "tank/fs"]);
    let avail_before = bytes(&h, "available", "tank/fs");
    h.tarn_ok(&["create", "-o", "compression=off", "-V", "96M", "tank/vol"]);
    h.tarn_ok(&["create", "-s", "-V", "1G", "tank/sparse"]);
    assert_eq!(bytes(&h, "refreservation", "tank/vol"), 96 << 20);
    assert_eq!(h.tarn_ok(&["get", "-H", "-o", "value,source", "refreservation", "tank/sparse"]).trim(), "none\tdefault");
    let unused = bytes(&h, "usedbyrefreservation", "tank/vol");
    assert!(unused > 90 << 20 && unused <= 96 << 20, "usedbyrefreservation {unused}");
    assert!(bytes(&h, "used", "tank/vol") >= 96 << 20);
    assert!(bytes(&h, "used", "tank") >= 96 << 20, "the parent's used counts the child's reservation");
    let avail_after = bytes(&h, "available", "tank/fs");
    assert!(avail_before - avail_after >= 95 << 20, "others' available: {avail_before} -> {avail_after}");

    // Written data moves from usedbyrefreservation to referenced.
    qemu_io(port, "tank/vol", &["write -P 0x61 0 32M", "flush"]);
    h.tarn_ok(&["pool", "sync", "tank"]);
    let unused2 = bytes(&h, "usedbyrefreservation", "tank/vol");
    assert!(unused - unused2 >= 31 << 20, "usedbyrefreservation {unused} -> {unused2} after 32M written");

    // A file system filling the pool stops short of the reservation.
    let big = h.mountpoint("tank").join("fs/big");
    let mut f = std::fs::File::create(&big).unwrap();
    let chunk = vec![0x5au8; 1 << 20];
    let mut written = 0u64;
    let err = loop {
        match std::io::Write::write_all(&mut f, &chunk) {
            Ok(()) => written += 1 << 20,
            Err(e) => break e,
        }
        assert!(written < 1 << 30, "wrote 1 GiB into a 384 MiB pool");
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    drop(f);
    h.tarn_ok(&["pool", "sync", "tank"]);
    // The volume still writes every byte of its size.
    qemu_io(port, "tank/vol", &["write -P 0x62 32M 64M", "flush", "read -P 0x61 0 32M", "read -P 0x62 32M 64M"]);
    h.tarn_ok(&["pool", "sync", "tank"]);
    assert!(bytes(&h, "usedbyrefreservation", "tank/vol") < 1 << 20, "the reservation is used up by the volume's data");

    // Too large to fit: refused, nothing changed.
    let e = common::refused(&h, &["set", "refreservation=10G", "tank/fs"], 1);
    assert!(e.contains("out of space"), "{e}");
    let e = common::refused(&h, &["create", "-V", "10G", "tank/huge"], 1);
    assert!(e.contains("out of space"), "{e}");
    assert_eq!(h.tarn_ok(&["get", "-H", "-o", "value", "refreservation", "tank/fs"]).trim(), "none");
    // Removing the reservation gives the space back to the others.
    let before = bytes(&h, "available", "tank/fs");
    h.tarn_ok(&["set", "refreservation=none", "tank/vol"]);
    // (The property's own record takes a few KiB.)
    let after = bytes(&h, "available", "tank/fs");
    assert!(before.abs_diff(after) < 256 << 10, "a fully used reservation held nothing more: {before} -> {after}");
}

/// Issue 13, test 3 through the daemon: fio's nbd engine writes with
/// crc32c verification from several jobs (random and sequential), the
/// pool is exported and imported, and fio verifies every block again.
#[test]
fn fio_verifies_across_export_and_import() {
    let port = free_port();
    let config = move |_: &std::path::Path| format!("[nbd]\nlisten = \"127.0.0.1:{port}\"\n");
    let h = Harness::start_with_config(Some(&config));
    let vdevs = h.vdev_files("vdevs", 4, 256 << 20);
    let vdir = vdevs[0].parent().unwrap().to_path_buf();
    let spec: Vec<String> = std::iter::once("raidz1".to_string()).chain(vdevs.iter().map(|v| path_str(v))).collect();
    h.create_pool("tank", &spec);
    h.tarn_ok(&["create", "-V", "256M", "tank/vol"]);
    let fio = |rw: &str, offset: &str, verify_only: bool| {
        let mut c = Command::new("fio");
        c.current_dir(&h.dir); // its verify state files go there
        c.args([
            "--name=v",
            "--ioengine=nbd",
            &format!("--uri={}", uri(port, "tank/vol")),
            &format!("--rw={rw}"),
            "--bs=16k",
            "--size=40m",
            "--numjobs=3",
            &format!("--offset={offset}"),
            "--offset_increment=40m",
            "--iodepth=8",
            "--verify=crc32c",
            "--verify_fatal=1",
        ]);
        if verify_only {
            c.arg("--verify_only=1");
        }
        let out = common::run_with_timeout(c, std::time::Duration::from_secs(300));
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && !text.contains("verify failed") && !text.contains("bad magic"), "fio {rw} (verify only: {verify_only}):\n{text}");
    };
    fio("randwrite", "0", false);
    fio("write", "128m", false);
    h.export("tank");
    h.import("tank", &vdir);
    let mut tries = 0;
    while !nbdinfo(&["--list", "--json", &format!("nbd://127.0.0.1:{port}")]).contains("\"tank/vol\"") {
        tries += 1;
        assert!(tries < 100, "the volume is not served after import");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    fio("randwrite", "0", true);
    fio("write", "128m", true);
    // The check can fail: data changed under fio's feet is caught.
    qemu_io(port, "tank/vol", &["write -P 0x77 1M 64k", "flush"]);
    let mut c = Command::new("fio");
    c.current_dir(&h.dir); // its verify state files go there
    c.args(["--name=v", "--ioengine=nbd", &format!("--uri={}", uri(port, "tank/vol")), "--rw=randwrite", "--bs=16k", "--size=40m", "--numjobs=3", "--offset=0", "--offset_increment=40m", "--verify=crc32c", "--verify_only=1"]);
    let out = common::run_with_timeout(c, std::time::Duration::from_secs(300));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success() || text.contains("verify"), "fio verified a volume that was changed behind it:\n{text}");
}
