//! The tarn daemon: owns every imported pool, mounts their datasets, and
//! answers the CLI over a Unix socket.
//!
//! # Protocol
//!
//! JSON lines over a Unix stream socket (default `<state-dir>/tarn.sock`):
//! the client writes one [`proto::Request`] per line (an object tagged by
//! `"cmd"`), the daemon answers each with one [`proto::Response`] line:
//! `{"ok":bool,"exit":0|1|2,"stdout":"...","stderr":"...","error":null|"...","data":null|{...}}`.
//! Every connection is served on its own thread; every request runs under
//! `catch_unwind`, so a failing command answers with an error and never
//! takes the daemon or another pool down. See `docs/cli-json.md` for the
//! shapes of `data`.
//!
//! # State
//!
//! `<state-dir>/pools.json` records the imported pools (name, guid, device
//! paths, altroot) and every device path seen in a pool; pools recorded
//! there are re-imported at start. SIGTERM/SIGINT (or `tarn down`'s
//! `shutdown` request) unmount everything, sync every pool and exit,
//! leaving the pools active so the next start re-imports them.
//!
//! Modules: [`proto`] (wire types), [`daemon`] (state and command
//! handlers), [`server`] (socket), [`scan`] (finding importable pools),
//! [`cache`] (pools.json), [`config`] (the TOML config), `mount` (the only
//! code that touches the POSIX layer and FUSE), `health` (device commands,
//! scrubs, the monitor that turns device failures into events, spares and
//! alerts), [`events`] (the event log), [`alerts`] (e-mail, webhook and
//! command delivery), [`history`] (recording each changing command in the
//! pool's history; `pool history`), `iostat` (`pool iostat`, `pool list
//! -v`), `diff` (`tarn diff`), `trim` (pool trim, checkpoints),
//! [`tunables`] (`tunable get|set`, `arcstat`), `memory` (giving memory
//! back to the system).

pub mod alerts;
mod bookmarks;
pub mod cache;
mod clones;
pub mod config;
pub mod daemon;
mod damage;
mod health;
mod dataset_ops;
mod listing;
pub mod events;
pub mod history;
mod iostat;
pub mod keys;
mod key_bytes;
mod diff;
pub mod fdpass;
mod memory;
pub use memory::set_release_hook;
mod mount;
mod replication;
mod stale;
pub mod proto;
pub mod scan;
pub mod server;
pub mod share_config;
pub mod shares;
mod smb_users;
mod smbd;
mod trim;
pub mod tunables;
pub mod volumes;

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;

pub use daemon::Daemon;

/// Default state directory (overridden by `TARN_STATE_DIR`).
pub fn default_state_dir() -> PathBuf {
    std::env::var_os("TARN_STATE_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/var/lib/tarn"))
}

pub struct DaemonOptions {
    pub state_dir: PathBuf,
    pub socket: Option<PathBuf>,
    pub config: Option<PathBuf>,
}

fn termination_signals() -> libc::sigset_t {
    // SAFETY: plain signal-set manipulation on a zeroed sigset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        set
    }
}

/// Block SIGTERM/SIGINT in this thread, and so in every thread it spawns
/// afterwards. Called first thing: a thread started before (the alerter's,
/// say) would otherwise take the signal and end the process without a
/// clean shutdown.
fn block_signals() -> Result<(), String> {
    let set = termination_signals();
    // SAFETY: plain signal-mask manipulation with a valid sigset.
    if unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) } != 0 {
        return Err("cannot block signals".into());
    }
    Ok(())
}

/// Wait for SIGTERM/SIGINT on a dedicated thread and shut down cleanly.
fn install_signal_thread(daemon: Arc<Daemon>) -> Result<(), String> {
    let set = termination_signals();
    std::thread::Builder::new()
        .name("tarn-signals".into())
        .spawn(move || {
            let mut signal: libc::c_int = 0;
            loop {
                // SAFETY: sigwait on a valid set, writing one int.
                if unsafe { libc::sigwait(&set, &mut signal) } == 0 {
                    eprintln!("tarn daemon: signal {signal}, shutting down");
                    daemon.shutdown();
                    std::process::exit(0);
                }
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Run the daemon in the foreground until a signal or `shutdown` request.
pub fn run(options: DaemonOptions) -> Result<(), String> {
    block_signals()?;
    let config = match &options.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            config::parse_config(&text).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => config::DaemonConfig::default(),
    };
    let state_dir = options.state_dir;
    std::fs::create_dir_all(&state_dir)
        .map_err(|e| format!("cannot create state directory {}: {e}", state_dir.display()))?;
    let socket = options.socket.unwrap_or_else(|| state_dir.join("tarn.sock"));
    if socket.exists() {
        if UnixStream::connect(&socket).is_ok() {
            return Err(format!("another tarn daemon is already listening at {}", socket.display()));
        }
        std::fs::remove_file(&socket).map_err(|e| format!("cannot remove stale socket {}: {e}", socket.display()))?;
    }
    let daemon = Arc::new(Daemon::new(state_dir.clone(), socket.clone(), config)?.with_config_path(options.config.clone()));
    install_signal_thread(daemon.clone())?;
    // smbd first: missing Samba with [smb] enable = true stops the start here.
    for line in daemon.shares.start(&state_dir)? {
        eprintln!("tarn daemon: {line}");
    }
    if let Some(line) = daemon.nbd.start()? {
        eprintln!("tarn daemon: {line}");
    }
    let listener = UnixListener::bind(&socket).map_err(|e| format!("cannot listen at {}: {e}", socket.display()))?;
    // Mounts of our pools left by a daemon that died: gone before anything
    // mounts.
    for line in stale::detach_dead_mounts(&daemon.cached_pool_names()) {
        eprintln!("tarn daemon: {line}");
    }
    for line in daemon.reimport_cached() {
        eprintln!("tarn daemon: {line}");
    }
    daemon.refresh_shares();
    daemon.shares.serve_nfs();
    shares::spawn_refresher(daemon.clone());
    health::spawn_monitor(daemon.clone());
    memory::spawn_monitor();
    eprintln!("tarn daemon: listening at {} (state in {})", socket.display(), state_dir.display());
    server::serve(daemon, listener);
    Ok(())
}
