//! Issue 9, the CLI's setting up: `tarn pool create` refuses devices it
//! should not guess at (relative paths, even when they name a file in the
//! current directory; files under the 64 MiB minimum), and the CLI finds
//! the daemon `tarn up` started without being told its socket (through
//! `TARN_HOME`, or the default state directory `TARN_STATE_DIR`).

mod common;

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{assert_clean_failure, mounts_under, path_str, Harness, TARN};

#[test]
fn pool_create_refuses_relative_paths_and_small_files() {
    let harness = Harness::start();
    let vdevs = harness.dir.join("vdevs");
    fs::create_dir_all(&vdevs).unwrap();
    for (name, size) in [("d0", 128u64 << 20), ("d1", 128 << 20), ("small", (64 << 20) - 4096), ("exact", 64 << 20)] {
        fs::File::create(vdevs.join(name)).unwrap().set_len(size).unwrap();
    }
    // Run from the directory holding the files: a relative name would find
    // them, and must still be refused.
    let in_vdevs = |args: &[&str]| -> Output {
        let out = Command::new(TARN)
            .arg("--socket")
            .arg(&harness.socket)
            .args(args)
            .current_dir(&vdevs)
            .stdin(Stdio::null())
            .output()
            .expect("run tarn");
        assert_clean_failure(&out, &args.join(" "));
        out
    };
    for spec in [&["d0"][..], &["./d0"], &["mirror", "d0", "d1"], &["mirror", &path_str(&vdevs.join("d0")), "../vdevs/d1"]] {
        let mut args = vec!["pool", "create", "tank"];
        args.extend_from_slice(spec);
        let out = in_vdevs(&args);
        assert_eq!(out.status.code(), Some(1), "{spec:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("tarn: cannot create 'tank': cannot open '") && stderr.contains("must be a full path"), "{stderr}");
    }
    let small = path_str(&vdevs.join("small"));
    for spec in [vec![small.clone()], vec!["mirror".into(), path_str(&vdevs.join("d0")), small.clone()]] {
        let mut args = vec!["pool".to_string(), "create".into(), "tank".into()];
        args.extend(spec);
        let out = harness.tarn(&args);
        assert_clean_failure(&out, &args.join(" "));
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(&small) && stderr.contains("minimum device size"), "{stderr}");
    }
    // Nothing was made, and the devices are still free for a pool.
    assert_eq!(harness.tarn_ok(&["pool", "list", "-H", "-o", "name"]), "");
    harness.create_pool("tank", &["mirror".into(), path_str(&vdevs.join("d0")), path_str(&vdevs.join("d1"))]);
    // Exactly the minimum is enough.
    harness.create_pool("edge", &[path_str(&vdevs.join("exact"))]);
    assert_eq!(harness.tarn_ok(&["pool", "list", "-H", "-o", "name"]), "edge\ntank\n");
}

/// `tarn ARGS` with exactly the environment given (no TARN_* inherited).
fn tarn_env(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(TARN);
    command.args(args).stdin(Stdio::null());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("TARN_") {
            command.env_remove(&key);
        }
    }
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("run tarn")
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "tarn {what} failed with {}:\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Stops the daemons `tarn up` started under `root` (each with `tarn down`,
/// by its home), then clears any mount left under `root`.
struct UpGuard {
    root: PathBuf,
    homes: Vec<PathBuf>,
}

impl Drop for UpGuard {
    fn drop(&mut self) {
        for home in &self.homes {
            let _ = tarn_env(&["down", "--home", &path_str(home)], &[]);
        }
        for mountpoint in mounts_under(&self.root) {
            let _ = Command::new("umount").arg("-l").arg(&mountpoint).status();
        }
        if std::thread::panicking() {
            for home in &self.homes {
                let log = fs::read_to_string(home.join("daemon.log")).unwrap_or_default();
                eprintln!("---- {} ----\n{}", home.display(), common::tail(&log, 80));
            }
        }
    }
}

fn args_os<'a>(args: &'a [&'a str]) -> impl Iterator<Item = &'a OsStr> {
    args.iter().map(OsStr::new)
}

#[test]
fn the_cli_finds_the_daemon_tarn_up_started() {
    let tmp = tempfile::Builder::new().prefix("tarn-it-").tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let home = root.join("home");
    let state = root.join("state");
    let no_state = root.join("no-state-here");
    let mut guard = UpGuard { root: root.clone(), homes: vec![] };

    // TARN_HOME: `tarn up` puts everything there; a later `tarn` with the
    // same environment (no --socket, no TARN_SOCKET, and no daemon at the
    // default state directory) talks to that daemon.
    guard.homes.push(home.clone());
    let env = [("TARN_HOME", home.as_path()), ("TARN_STATE_DIR", no_state.as_path())];
    let up = ok(tarn_env(&["up"], &env), "up");
    assert!(up.contains("ready: copy files into"), "{up}");
    assert!(!up.contains("TARN_SOCKET"), "the CLI finds this daemon by itself, so no hint is printed:\n{up}");
    assert!(home.join("tarn.sock").exists());
    let listed = ok(tarn_env(&["list", "-H", "-o", "name,mountpoint"], &env), "list");
    assert_eq!(listed, format!("tank\t{}\ntank/data\t{}\n", path_str(&home.join("mnt/tank")), path_str(&home.join("mnt/tank/data"))));
    assert_eq!(ok(tarn_env(&["pool", "status", "-x"], &env), "pool status -x"), "all pools are healthy\n");
    common::wait_mounted(&home.join("mnt/tank/data"));
    // Running it again changes nothing and still succeeds.
    ok(tarn_env(&["up"], &env), "up again");
    assert_eq!(ok(tarn_env(&["list", "-H", "-o", "name"], &env), "list"), "tank\ntank/data\n");
    // Without TARN_HOME the CLI looks in the default state directory only.
    let out = tarn_env(&["list"], &[("TARN_STATE_DIR", no_state.as_path())]);
    assert_clean_failure(&out, "list without a daemon");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot connect to tarn daemon") && stderr.contains(&path_str(&no_state)), "{stderr}");

    // The default state directory: `tarn up` with nothing set uses it, and
    // so does every other command.
    guard.homes.push(state.clone());
    let state_env = [("TARN_STATE_DIR", state.as_path())];
    let up = ok(tarn_env(&["up"], &state_env), "up in the state directory");
    assert!(!up.contains("TARN_SOCKET"), "{up}");
    let mountpoints = |env: &[(&str, &Path)]| ok(tarn_env(&["list", "-H", "-o", "mountpoint", "tank"], env), "list");
    assert_eq!(mountpoints(&state_env), format!("{}\n", path_str(&state.join("mnt/tank"))));
    // Both running: a TARN_HOME set on purpose wins over the default.
    let both = [("TARN_HOME", home.as_path()), ("TARN_STATE_DIR", state.as_path())];
    assert_eq!(mountpoints(&both), format!("{}\n", path_str(&home.join("mnt/tank"))));
    ok(tarn_env(&["down"], &env), "down");
    assert!(!home.join("tarn.sock").exists());
    guard.homes.retain(|h| h != &home);
    // TARN_HOME with no daemon there: the default is used.
    assert_eq!(mountpoints(&both), format!("{}\n", path_str(&state.join("mnt/tank"))));
    let env = state_env;
    // --home elsewhere: the CLI would not find it, and `up` says how to.
    let other = root.join("other");
    guard.homes.push(other.clone());
    let up = ok(tarn_env(&["up", "--home", &path_str(&other)], &env), "up --home");
    assert!(up.contains(&format!("export TARN_SOCKET={}", path_str(&other.join("tarn.sock")))), "{up}");
    let via_socket = Command::new(TARN)
        .args(args_os(&["list", "-H", "-o", "name"]))
        .env("TARN_SOCKET", other.join("tarn.sock"))
        .output()
        .unwrap();
    assert_eq!(ok(via_socket, "list via TARN_SOCKET"), "tank\ntank/data\n");
    ok(tarn_env(&["down", "--home", &path_str(&other)], &env), "down --home");
    ok(tarn_env(&["down"], &env), "down");
    assert!(!state.join("tarn.sock").exists());
    guard.homes.clear();
    drop(guard);
    assert_eq!(mounts_under(&root), Vec::<PathBuf>::new(), "tarn down leaves no mount behind");
}

/// The port in `nfs-ls 'nfs://…?…&nfsport=P&…'` of `tarn up`'s output.
fn printed_nfs_port(up: &str) -> u16 {
    let line = up.lines().find(|l| l.trim_start().starts_with("nfs-ls 'nfs://127.0.0.1/tank/data?")).unwrap_or_else(|| panic!("no nfs-ls line:\n{up}"));
    let port = line.split("nfsport=").nth(1).and_then(|r| r.split('&').next()).expect("nfsport=");
    assert!(line.contains(&format!("mountport={port}")), "{line}");
    assert!(up.contains(&format!("mount -t nfs -o vers=3,proto=tcp,port={port},mountport={port},nolock 127.0.0.1:/tank/data ")), "{up}");
    port.parse().expect("a port number")
}

#[test]
fn tarn_up_shares_its_dataset_over_nfs_and_smb_on_localhost() {
    let tmp = tempfile::Builder::new().prefix("tarn-it-").tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let no_state = root.join("no-state-here");
    let mut guard = UpGuard { root: root.clone(), homes: vec![] };
    let home = root.join("home");
    guard.homes.push(home.clone());
    let env = [("TARN_HOME", home.as_path()), ("TARN_STATE_DIR", no_state.as_path())];
    let up = ok(tarn_env(&["up"], &env), "up");
    let port = printed_nfs_port(&up);
    assert_eq!(port == 2049, !up.contains("port 2049 is taken"), "{up}");
    assert_eq!(ok(tarn_env(&["get", "-H", "-o", "value,source", "sharenfs", "tank/data"], &env), "get"), "on\tlocal\n");
    let data = home.join("mnt/tank/data");
    common::wait_mounted(&data);
    fs::write(data.join("hello.txt"), b"hello from tarn up\n").unwrap();

    // A real NFS client (Debian's libnfs-utils) reads and writes it.
    let url = |name: &str| format!("nfs://127.0.0.1/tank/data/{name}?version=3&nfsport={port}&mountport={port}");
    let out = Command::new("nfs-cat").arg(url("hello.txt")).output().expect("nfs-cat");
    assert!(out.status.success(), "nfs-cat: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, b"hello from tarn up\n");
    // root is squashed (sharenfs=on): root's copy into the root-owned
    // directory is refused; a user writes into a directory of their own.
    fs::write(root.join("up.bin"), vec![5u8; 100_000]).unwrap();
    let out = Command::new("nfs-cp").arg(root.join("up.bin")).arg(url("up.bin")).output().expect("nfs-cp");
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("NFS3ERR_ACCES"), "squashed root wrote");
    fs::create_dir(data.join("user")).unwrap();
    std::os::unix::fs::chown(data.join("user"), Some(1000), Some(1000)).unwrap();
    let out = Command::new("nfs-cp").arg(root.join("up.bin")).arg(format!("{}&uid=1000&gid=1000", url("user/up.bin"))).output().expect("nfs-cp");
    assert!(out.status.success(), "nfs-cp: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(fs::read(data.join("user/up.bin")).unwrap(), vec![5u8; 100_000]);
    let listed = ok(tarn_env(&["share", "-l", "-H"], &env), "share -l");
    assert!(listed.contains("tank/data\tnfs\t/tank/data\t"), "{listed}");

    let smbd = ["/usr/sbin/smbd", "/usr/bin/smbd"].iter().any(|p| Path::new(p).exists());
    if smbd {
        let line = up.lines().find(|l| l.trim_start().starts_with("smbclient //127.0.0.1/tank_data -p ")).unwrap_or_else(|| panic!("{up}"));
        let smb_port = line.split(" -p ").nth(1).and_then(|r| r.split(' ').next()).expect("-p PORT");
        assert!(listed.contains("tank/data\tsmb\ttank_data\t"), "{listed}");
        let mut add = Command::new(TARN)
            .args(["smb", "user", "add", "--password-stdin", "root"])
            .env("TARN_HOME", &home)
            .env("TARN_STATE_DIR", &no_state)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tarn smb user add");
        use std::io::Write;
        add.stdin.take().expect("stdin").write_all(b"up-secret\n").unwrap();
        let out = add.wait_with_output().unwrap();
        assert!(out.status.success(), "smb user add: {}", String::from_utf8_lossy(&out.stderr));
        let out = Command::new("smbclient")
            .current_dir(&root)
            .args(["//127.0.0.1/tank_data", "-p", smb_port, "-U", "root%up-secret", "-c", "get hello.txt got.txt"])
            .output()
            .expect("smbclient");
        assert!(out.status.success(), "smbclient: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(fs::read(root.join("got.txt")).unwrap(), b"hello from tarn up\n");
    } else {
        assert!(up.contains("'samba' package"), "smbd is missing and up does not say which package:\n{up}");
    }

    // A second `tarn up` elsewhere cannot have the first one's port: it
    // says so and takes a free one.
    let home2 = root.join("home2");
    guard.homes.push(home2.clone());
    let up2 = ok(tarn_env(&["up"], &[("TARN_HOME", home2.as_path()), ("TARN_STATE_DIR", no_state.as_path())]), "up in home2");
    let port2 = printed_nfs_port(&up2);
    assert_ne!(port2, port);
    assert_eq!(port2 == 2049, !up2.contains("port 2049 is taken"), "{up2}");
}
