//! `tarn up` / `tarn down`: the one-command start on a fresh machine.
//!
//! Home (`--home`, else `$TARN_HOME`, else the daemon's default state
//! directory: `$TARN_STATE_DIR`, else /var/lib/tarn) holds `vdevs/d1..d4`
//! (4 GiB sparse files), the daemon's state (`tarn.sock`, `pools.json`,
//! `daemon.log`) and the mount `mnt/tank`. The default is the state
//! directory the CLI looks in first, so `tarn up` then `tarn list` works
//! without naming a socket.
//!
//! The daemon `up` starts reads `tarn.toml` in home, which `up` writes the
//! first time: NFS on 127.0.0.1 (port 2049, or a free port when 2049 is
//! taken) and, when Samba's smbd is installed, SMB on 127.0.0.1 (port 445,
//! or a free port); the default dataset gets `sharenfs=on` (and
//! `sharesmb=on`) unless it was set otherwise, and `up` prints the client
//! command lines.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tarn_daemon::proto::{Request, VdevGroup, VdevKind};

use crate::client;
use crate::Failure;

const POOL: &str = "tank";
const DATASET: &str = "tank/data";
const VDEV_SIZE: u64 = 4 << 30;

pub fn home_dir(flag: Option<&Path>) -> Result<PathBuf, Failure> {
    if let Some(dir) = flag {
        return Ok(absolute(dir));
    }
    if let Some(dir) = std::env::var_os("TARN_HOME").filter(|d| !d.is_empty()) {
        return Ok(absolute(Path::new(&dir)));
    }
    Ok(tarn_daemon::default_state_dir())
}

pub fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

fn call_ok(socket: &Path, request: &Request) -> Result<tarn_daemon::proto::Response, Failure> {
    let response = client::call(socket, request)?;
    if !response.ok {
        return Err(Failure { message: response.error.unwrap_or_default(), exit: response.exit.max(1) });
    }
    eprint!("{}", response.stderr);
    Ok(response)
}

pub fn up(flag: Option<&Path>) -> Result<i32, Failure> {
    let home = home_dir(flag)?;
    let vdevs = home.join("vdevs");
    std::fs::create_dir_all(&vdevs).map_err(|e| format!("cannot create {}: {e}", vdevs.display()))?;
    let mut devices = Vec::new();
    for i in 1..=4 {
        let path = vdevs.join(format!("d{i}"));
        if !path.exists() {
            let file = std::fs::File::create(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            file.set_len(VDEV_SIZE).map_err(|e| format!("cannot size {}: {e}", path.display()))?;
        }
        devices.push(path.to_string_lossy().into_owned());
    }
    let socket = home.join("tarn.sock");
    let config_path = home.join("tarn.toml");
    let mut sharing = sharing_config(&config_path, false)?;
    if client::call(&socket, &Request::Ping).is_err() {
        if let Err(e) = start_daemon(&home, &socket, &config_path) {
            if !sharing.fresh {
                return Err(e);
            }
            // The ports up chose were taken before the daemon bound them
            // (another `tarn up` at the same moment): choose free ones.
            let _ = std::fs::remove_file(&config_path);
            sharing = sharing_config(&config_path, true)?;
            start_daemon(&home, &socket, &config_path)?;
        }
    }
    let list = call_ok(&socket, &Request::PoolList { pools: vec![], parsable: true })?;
    let imported = list
        .data
        .as_ref()
        .and_then(|d| d.as_array())
        .is_some_and(|pools| pools.iter().any(|p| p["name"] == POOL));
    if !imported {
        let import = client::call(
            &socket,
            &Request::PoolImport {
                dirs: vec![vdevs.to_string_lossy().into_owned()],
                force: true,
                rewind: false,
                altroot: None,
                pool: Some(POOL.into()),
                missing_log: false,
                load_keys: true,
            },
        )?;
        if import.ok {
            eprint!("{}", import.stderr);
            println!("imported pool '{POOL}'");
        } else {
            let mountpoint = home.join("mnt").join(POOL);
            call_ok(
                &socket,
                &Request::PoolCreate {
                    pool: POOL.into(),
                    vdevs: vec![VdevGroup { kind: VdevKind::Raidz { parity: 1 }, devices, log: false }],
                    force: false,
                    dry_run: false,
                    mountpoint: Some(mountpoint.to_string_lossy().into_owned()),
                    altroot: None,
                    ashift: None,
                    pool_props: vec![],
                    fs_props: vec![],
                    cache: vec![],
                    key: None,
                },
            )?;
            println!("created pool '{POOL}' (raidz1 of 4 files in {})", vdevs.display());
        }
    }
    let has_data = client::call(
        &socket,
        &Request::Props { datasets: vec![DATASET.into()], recursive: false, props: vec!["name".into()], parsable: true },
    )?;
    if !has_data.ok {
        call_ok(&socket, &Request::Create { dataset: DATASET.into(), parents: true, props: vec![], key: None, volume: None })?;
        println!("created dataset '{DATASET}'");
    }
    // Share the default dataset unless its owner chose otherwise.
    for (prop, wanted) in [("sharenfs", sharing.nfs_port.is_some()), ("sharesmb", sharing.smb_port.is_some())] {
        let got = call_ok(
            &socket,
            &Request::Props { datasets: vec![DATASET.into()], recursive: false, props: vec![prop.into()], parsable: true },
        )?;
        let row = got.data.as_ref().map(|d| d[0]["props"][0].clone()).unwrap_or_default();
        if wanted && row["value"] == "off" && row["source"].as_str().is_none_or(|s| s == "default" || s == "-") {
            call_ok(&socket, &Request::Set { assignments: vec![(prop.into(), "on".into())], dataset: DATASET.into(), force: false })?;
        }
    }
    let status = call_ok(&socket, &Request::PoolStatus { pools: vec![POOL.into()], verbose: false })?;
    let pools: Vec<tarn_daemon::proto::PoolStatusData> =
        serde_json::from_value(status.data.unwrap_or_default()).map_err(|e| e.to_string())?;
    print!("{}", crate::status::status_text(&pools, false, crate::clock::Zone::Local));
    let mountpoint = call_ok(
        &socket,
        &Request::Props { datasets: vec![DATASET.into()], recursive: false, props: vec!["mountpoint".into()], parsable: true },
    )?;
    let path = mountpoint
        .data
        .as_ref()
        .and_then(|d| d[0]["props"][0]["value"].as_str().map(String::from))
        .unwrap_or_default();
    println!("\nready: copy files into {path}");
    print_clients(&sharing, &home);
    if crate::client::socket_path(None) != socket {
        // Only when `tarn` would not find this daemon by itself (--home).
        println!("the CLI talks to this daemon with: export TARN_SOCKET={}", socket.display());
    }
    Ok(0)
}

/// Starts `tarn daemon` on home, detached, and waits until it answers.
fn start_daemon(home: &Path, socket: &Path, config_path: &Path) -> Result<(), Failure> {
    let log_path = home.join("daemon.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
    let log_err = log.try_clone().map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the tarn binary: {e}"))?;
    let mut command = Command::new(exe);
    command
        .arg("daemon")
        .arg("--state-dir")
        .arg(home)
        .arg("--socket")
        .arg(socket)
        .arg("--config")
        .arg(config_path)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid is async-signal-safe; it detaches the daemon from our session.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = command.spawn().map_err(|e| format!("cannot start the daemon: {e}"))?;
    let started = Instant::now();
    while client::call(socket, &Request::Ping).is_err() {
        if started.elapsed() > Duration::from_secs(30) || matches!(child.try_wait(), Ok(Some(_))) {
            return Err(format!("the daemon did not start; see {}", log_path.display()).into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("started tarn daemon (log: {})", log_path.display());
    Ok(())
}

/// The ports the daemon of `up` serves NFS and SMB on (from its config).
struct Sharing {
    nfs_port: Option<u16>,
    smb_port: Option<u16>,
    /// Why there is no SMB (Samba missing), to tell the user.
    smb_missing: bool,
    /// The config was written just now (its ports may have been taken since).
    fresh: bool,
}

fn port_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

fn free_port() -> Result<u16, Failure> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot find a free port: {e}"))?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

fn smbd_installed() -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .any(|dir| dir.join("smbd").is_file())
}

/// Reads `tarn.toml` in home, writing it first when it does not exist:
/// `[nfs]` on 127.0.0.1:2049 (a free port if 2049 is taken) and, with
/// smbd installed, `[smb]` on 127.0.0.1:445 (a free port if taken).
/// `avoid_defaults`: free ports even if 2049 and 445 look free.
fn sharing_config(path: &Path, avoid_defaults: bool) -> Result<Sharing, Failure> {
    let fresh = !path.exists();
    if fresh {
        let mut text = String::from("# written by `tarn up`; the daemon reads it at start\n");
        let nfs_port = if !avoid_defaults && port_free(2049) {
            2049
        } else {
            let port = free_port()?;
            println!("port 2049 is taken; NFS uses port {port}");
            port
        };
        text.push_str(&format!("[nfs]\nlisten = \"127.0.0.1:{nfs_port}\"\n"));
        if smbd_installed() {
            let smb_port = if !avoid_defaults && port_free(445) {
                445
            } else {
                let port = free_port()?;
                println!("port 445 is taken; SMB uses port {port}");
                port
            };
            text.push_str(&format!("\n[smb]\nenable = true\nlisten = \"127.0.0.1:{smb_port}\"\n"));
        }
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let table: toml::Table = text.parse().map_err(|e| format!("{}: {e}", path.display()))?;
    let port_of = |name: &str| -> Option<u16> {
        let section = table.get(name)?.as_table()?;
        if section.get("enable").and_then(|v| v.as_bool()) == Some(false) {
            return None;
        }
        let listen = match section.get("listen") {
            Some(toml::Value::Array(items)) => items.first()?.as_str()?.to_string(),
            Some(value) => value.as_str()?.to_string(),
            None => return Some(if name == "smb" { 445 } else { 2049 }),
        };
        listen.rsplit(':').next()?.parse().ok()
    };
    let smb_on = table.get("smb").and_then(|s| s.get("enable")).and_then(|v| v.as_bool()) == Some(true);
    Ok(Sharing {
        nfs_port: port_of("nfs"),
        smb_port: if smb_on { port_of("smb") } else { None },
        smb_missing: !smbd_installed(),
        fresh,
    })
}

fn print_clients(sharing: &Sharing, home: &Path) {
    if let Some(port) = sharing.nfs_port {
        println!("\nNFS (v3, on 127.0.0.1:{port}):");
        println!("  mount -t nfs -o vers=3,proto=tcp,port={port},mountport={port},nolock 127.0.0.1:/{DATASET} /mnt/data");
        println!("  nfs-ls 'nfs://127.0.0.1/{DATASET}?version=3&nfsport={port}&mountport={port}'");
    }
    if let Some(port) = sharing.smb_port {
        let share = DATASET.replace('/', "_");
        println!("\nSMB (on 127.0.0.1:{port}; set a password first: tarn smb user add root):");
        println!("  smbclient //127.0.0.1/{share} -p {port} -U root");
    } else if sharing.smb_missing {
        println!("\nno SMB: smbd is not installed (Debian's 'samba' package); install it and remove {} to share over SMB too",
            home.join("tarn.toml").display());
    }
}

pub fn down(flag: Option<&Path>) -> Result<i32, Failure> {
    let home = home_dir(flag)?;
    let socket = home.join("tarn.sock");
    if client::call(&socket, &Request::Ping).is_err() {
        println!("no tarn daemon is running at {}", socket.display());
        return Ok(0);
    }
    call_ok(&socket, &Request::Shutdown)?;
    let started = Instant::now();
    while socket.exists() && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("stopped tarn daemon at {}", socket.display());
    Ok(0)
}
