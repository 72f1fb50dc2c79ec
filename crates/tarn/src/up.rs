//! `tarn up` / `tarn down`: the one-command start on a fresh machine.
//!
//! Home (`--home`, else `$TARN_HOME`, else the daemon's default state
//! directory: `$TARN_STATE_DIR`, else /var/lib/tarn) holds `vdevs/d1..d4`
//! (4 GiB sparse files), the daemon's state (`tarn.sock`, `pools.json`,
//! `daemon.log`) and the mount `mnt/tank`. The default is the state
//! directory the CLI looks in first, so `tarn up` then `tarn list` works
//! without naming a socket.

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
    if client::call(&socket, &Request::Ping).is_err() {
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
            .arg(&home)
            .arg("--socket")
            .arg(&socket)
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
        command.spawn().map_err(|e| format!("cannot start the daemon: {e}"))?;
        let started = Instant::now();
        while client::call(&socket, &Request::Ping).is_err() {
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!("the daemon did not start; see {}", log_path.display()).into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        println!("started tarn daemon (log: {})", log_path.display());
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
                    vdevs: vec![VdevGroup { kind: VdevKind::Raidz { parity: 1 }, devices }],
                    force: false,
                    dry_run: false,
                    mountpoint: Some(mountpoint.to_string_lossy().into_owned()),
                    altroot: None,
                    ashift: None,
                    pool_props: vec![],
                    fs_props: vec![],
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
        call_ok(&socket, &Request::Create { dataset: DATASET.into(), parents: true, props: vec![] })?;
        println!("created dataset '{DATASET}'");
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
    if crate::client::socket_path(None) != socket {
        // Only when `tarn` would not find this daemon by itself (--home).
        println!("the CLI talks to this daemon with: export TARN_SOCKET={}", socket.display());
    }
    Ok(0)
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
