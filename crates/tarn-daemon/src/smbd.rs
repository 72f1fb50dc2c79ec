//! The daemon's own smbd: written config, started, supervised, reloaded.
//!
//! With `[smb] enable = true` the daemon writes `<state dir>/smb/smb.conf`
//! (tarn_share::smb::write_config) and runs
//! `smbd --foreground --no-process-group -s <that file>`; every Samba state
//! directory is under `<state dir>/smb`, so the system's Samba (its
//! /etc/samba/smb.conf, passdb, locks) is never read or changed.
//!
//! Invariants:
//! - One smbd per daemon, a child of it. A supervisor thread restarts it
//!   when it exits, after a back-off that doubles from 1 s to 30 s and
//!   resets once smbd has run for a minute.
//! - smb.conf is replaced atomically (write to a temporary file, rename),
//!   then smbd is told to reload it; a share that went away has its
//!   connections closed first, so the mount under it can be unmounted.
//! - Missing smbd is an error at daemon start naming the Debian package,
//!   never a silent no-op; so is an SMB address already in use (smbd
//!   itself would abort and be restarted forever). When smbd exits, the
//!   daemon's log says why if smbd's own log does.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tarn_share::smb::{SmbGlobal, SmbShare};

use crate::share_config::SmbConfig;

const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
const HEALTHY_AFTER: Duration = Duration::from_secs(60);

/// Finds a Samba program: the configured path, else PATH, else /usr/sbin
/// and /usr/bin.
pub fn find_program(name: &str, configured: Option<&Path>) -> Option<PathBuf> {
    if let Some(path) = configured {
        return path.is_file().then(|| path.to_path_buf());
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path_var)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Binds (and releases) every address smbd will listen on, so an address
/// in use fails the daemon's start in one line, as the NFS port does.
/// Interface names (not addresses) are probed as the wildcard address.
fn probe_listen(global: &SmbGlobal) -> Result<(), String> {
    let mut addrs: Vec<std::net::SocketAddr> = Vec::new();
    for name in &global.interfaces {
        match name.parse::<std::net::IpAddr>() {
            Ok(ip) => addrs.push((ip, global.port).into()),
            Err(_) => addrs.push(([0, 0, 0, 0], global.port).into()),
        }
    }
    if addrs.is_empty() {
        addrs.push(([0, 0, 0, 0], global.port).into());
    }
    addrs.dedup();
    for addr in addrs {
        std::net::TcpListener::bind(addr).map_err(|e| format!("SMB server: cannot listen on {addr}: {e}"))?;
    }
    Ok(())
}

/// The reason smbd's log gives for its last exit, when it is one the user
/// can act on (an address in use, a bad config line).
fn exit_reason(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let tail: Vec<&str> = text.lines().rev().take(40).collect();
    tail.iter().find_map(|line| {
        let line = line.trim();
        if let Some(pos) = line.find("open_socket_in failed: ") {
            return Some(format!("cannot listen: {}", &line[pos + "open_socket_in failed: ".len()..]));
        }
        line.contains("Unknown parameter encountered").then(|| line.to_string())
    })
}

pub fn missing_samba(program: &str) -> String {
    format!("{program} not found: install Debian's 'samba' package (apt-get install samba), or set [smb] enable = false")
}

struct State {
    child: Option<Child>,
    shares: Vec<SmbShare>,
    started: Instant,
    backoff: Duration,
    /// When the next start may happen (after a crash).
    next_start: Instant,
    restarts: u64,
}

pub struct Smbd {
    global: SmbGlobal,
    smbd: PathBuf,
    state: Mutex<State>,
}

impl Smbd {
    /// Writes the config, starts smbd and its supervisor thread.
    pub fn start(config: &SmbConfig, state_dir: &Path) -> Result<Arc<Smbd>, String> {
        let smbd = find_program("smbd", config.smbd.as_deref()).ok_or_else(|| missing_samba("smbd"))?;
        let global = SmbGlobal {
            port: config.port,
            interfaces: config.interfaces.clone(),
            hosts_allow: config.hosts_allow.clone(),
            hosts_deny: config.hosts_deny.clone(),
            server_min_protocol: config.server_min_protocol.clone(),
            workgroup: config.workgroup.clone(),
            state_dir: state_dir.join("smb"),
        };
        for dir in global.dirs() {
            std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        // smbd refuses a world-readable private dir holding passwords.
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(global.private_dir(), std::fs::Permissions::from_mode(0o700));
        let now = Instant::now();
        let this = Arc::new(Smbd {
            global,
            smbd,
            state: Mutex::new(State {
                child: None,
                shares: Vec::new(),
                started: now,
                backoff: BACKOFF_FIRST,
                next_start: now,
                restarts: 0,
            }),
        });
        probe_listen(&this.global)?;
        this.write_config(&[])?;
        {
            let mut state = this.state.lock();
            this.spawn(&mut state)?;
        }
        this.wait_ready(Duration::from_secs(10));
        let weak = Arc::downgrade(&this);
        std::thread::Builder::new()
            .name("tarn-smbd".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(250));
                let Some(smbd) = weak.upgrade() else { return };
                smbd.supervise();
            })
            .map_err(|e| e.to_string())?;
        Ok(this)
    }

    pub fn config_path(&self) -> PathBuf {
        self.global.config_path()
    }

    pub fn global(&self) -> &SmbGlobal {
        &self.global
    }

    /// smbd's process id, when it runs.
    pub fn pid(&self) -> Option<u32> {
        self.state.lock().child.as_ref().map(Child::id)
    }

    pub fn restarts(&self) -> u64 {
        self.state.lock().restarts
    }

    fn spawn(&self, state: &mut State) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.global.state_dir.join("log/smbd.stdout"))
            .map_err(|e| format!("cannot open smbd's log: {e}"))?;
        let log_err = log.try_clone().map_err(|e| e.to_string())?;
        let mut command = Command::new(&self.smbd);
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl and setpgid are async-signal-safe. smbd dies with the daemon,
        // even a SIGKILLed one (smbd is started from the main or the
        // supervisor thread, both living as long as the daemon).
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                // Its own process group: smbd signals its whole group when
                // it shuts down, which must not include the daemon (or
                // whatever started the daemon).
                libc::setpgid(0, 0);
                Ok(())
            });
        }
        let child = command
            .arg("--foreground")
            .arg("--no-process-group")
            .arg("-s")
            .arg(self.config_path())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.smbd.display()))?;
        state.child = Some(child);
        state.started = Instant::now();
        Ok(())
    }

    /// One supervisor step: reap a dead smbd, restart it after the back-off.
    fn supervise(&self) {
        let mut state = self.state.lock();
        if let Some(child) = state.child.as_mut() {
            match child.try_wait() {
                Ok(None) => {
                    if state.started.elapsed() > HEALTHY_AFTER {
                        state.backoff = BACKOFF_FIRST;
                    }
                    return;
                }
                Ok(Some(status)) => {
                    let why = exit_reason(&self.global.state_dir.join("log/smbd.log")).map(|r| format!(": {r}")).unwrap_or_default();
                    eprintln!("tarn daemon: smbd exited ({status}){why}; restarting in {:?}", state.backoff);
                }
                Err(e) => eprintln!("tarn daemon: cannot watch smbd: {e}"),
            }
            state.child = None;
            state.next_start = Instant::now() + state.backoff;
            state.backoff = (state.backoff * 2).min(BACKOFF_MAX);
            return;
        }
        if Instant::now() < state.next_start {
            return;
        }
        match self.spawn(&mut state) {
            Ok(()) => {
                state.restarts += 1;
                eprintln!("tarn daemon: smbd restarted (pid {})", state.child.as_ref().map_or(0, Child::id));
            }
            Err(e) => {
                eprintln!("tarn daemon: {e}");
                state.next_start = Instant::now() + state.backoff;
                state.backoff = (state.backoff * 2).min(BACKOFF_MAX);
            }
        }
    }

    fn write_config(&self, shares: &[SmbShare]) -> Result<(), String> {
        let text = tarn_share::smb::write_config(&self.global, shares);
        let path = self.config_path();
        let temporary = path.with_extension("conf.new");
        std::fs::write(&temporary, text).map_err(|e| format!("cannot write {}: {e}", temporary.display()))?;
        std::fs::rename(&temporary, &path).map_err(|e| format!("cannot replace {}: {e}", path.display()))
    }

    /// Makes `shares` the shares smbd serves: closes the connections of
    /// shares that go away, rewrites smb.conf and has smbd reload it.
    pub fn set_shares(&self, shares: Vec<SmbShare>) {
        let mut state = self.state.lock();
        if state.shares == shares {
            return;
        }
        let gone: Vec<String> = state
            .shares
            .iter()
            .filter(|old| !shares.iter().any(|new| new.name == old.name && new.path == old.path))
            .map(|old| old.name.clone())
            .collect();
        if let Err(e) = self.write_config(&shares) {
            eprintln!("tarn daemon: {e}");
            return;
        }
        state.shares = shares;
        if state.child.is_none() {
            return; // It reads the new file when the supervisor starts it.
        }
        self.reload();
        for name in gone {
            self.control(&["close-share", &name]);
        }
    }

    /// The shares smbd was last given.
    pub fn shares(&self) -> Vec<SmbShare> {
        self.state.lock().shares.clone()
    }

    /// Closes every connection to the share on `path` (before the mount
    /// under it goes away), without waiting for the next table.
    pub fn close_path(&self, path: &Path) {
        let names: Vec<String> =
            self.state.lock().shares.iter().filter(|s| s.path == path).map(|s| s.name.clone()).collect();
        for name in names {
            self.control(&["close-share", &name]);
        }
    }

    /// Waits (at most `limit`) until smbd answers `smbcontrol ping`: it has
    /// written its pid file and will take a reload, so the shares the
    /// daemon sets right after its start are served at once.
    fn wait_ready(&self, limit: Duration) {
        let Some(smbcontrol) = find_program("smbcontrol", None) else { return };
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            let ping = Command::new(&smbcontrol).arg("-s").arg(self.config_path()).args(["smbd", "ping"]).output();
            if ping.is_ok_and(|o| o.status.success()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("tarn daemon: smbd did not answer within {} s (shares are set when it does)", limit.as_secs());
    }

    /// Has smbd reload its config. A smbd that has just started may not
    /// have written its pid file yet (smbcontrol: "Can't find pid"); it
    /// may also have read the config before we rewrote it. So a failed
    /// reload is tried again in the background for a few seconds, until
    /// smbd takes it.
    fn reload(&self) {
        if self.control(&["reload-config"]) {
            return;
        }
        let Some(smbcontrol) = find_program("smbcontrol", None) else { return };
        let config = self.config_path();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
                let done = Command::new(&smbcontrol).arg("-s").arg(&config).args(["smbd", "reload-config"]).output();
                if done.is_ok_and(|o| o.status.success()) {
                    eprintln!("tarn daemon: smbd reloaded its config");
                    return;
                }
            }
            eprintln!("tarn daemon: smbd did not take a config reload within 15 s");
        });
    }

    /// `smbcontrol -s <our config> smbd ARGS`; falls back to SIGHUP for a
    /// reload when smbcontrol is missing. Whether smbd took it.
    fn control(&self, args: &[&str]) -> bool {
        let Some(smbcontrol) = find_program("smbcontrol", None) else {
            if args == ["reload-config"] {
                if let Some(pid) = self.pid() {
                    // SAFETY: signalling our own child.
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGHUP) };
                }
            }
            return true;
        };
        let output = Command::new(smbcontrol).arg("-s").arg(self.config_path()).arg("smbd").args(args).output();
        match output {
            Ok(out) if out.status.success() => true,
            Ok(out) => {
                eprintln!(
                    "tarn daemon: smbcontrol smbd {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                false
            }
            Err(e) => {
                eprintln!("tarn daemon: smbcontrol: {e}");
                false
            }
        }
    }

    /// Stops smbd (daemon shutdown).
    pub fn stop(&self) {
        let mut state = self.state.lock();
        if let Some(mut child) = state.child.take() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        // The supervisor must not start it again.
        state.next_start = Instant::now() + Duration::from_secs(365 * 24 * 3600);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn global(interfaces: &[&str], port: u16) -> SmbGlobal {
        SmbGlobal {
            port,
            interfaces: interfaces.iter().map(|s| s.to_string()).collect(),
            hosts_allow: Vec::new(),
            hosts_deny: Vec::new(),
            server_min_protocol: "SMB2".into(),
            workgroup: "WORKGROUP".into(),
            state_dir: PathBuf::from("/nonexistent"),
        }
    }

    #[test]
    fn an_address_in_use_is_found_before_smbd_starts() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let err = probe_listen(&global(&["127.0.0.1"], port)).unwrap_err();
        assert!(err.starts_with(&format!("SMB server: cannot listen on 127.0.0.1:{port}: ")), "{err}");
        assert!(err.to_lowercase().contains("in use"), "{err}");
        drop(taken);
        probe_listen(&global(&["127.0.0.1"], port)).unwrap();
        // The probe released the port: it can be taken again at once.
        std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    }

    #[test]
    fn the_exit_reason_is_read_from_smbds_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("smbd.log");
        assert_eq!(exit_reason(&log), None, "no log, no reason");
        std::fs::write(
            &log,
            "[2026/11/24 18:30:38.101641,  0] ../../source3/smbd/server.c:1097(smbd_open_one_socket)\n  \
             smbd_open_one_socket: open_socket_in failed: Address already in use\n\
             [2026/11/24 18:30:38.101690,  0] ../../source3/smbd/server.c:1264(open_sockets_smbd)\n  \
             open_sockets_smbd: No sockets available to bind to.\n",
        )
        .unwrap();
        assert_eq!(exit_reason(&log).as_deref(), Some("cannot listen: Address already in use"));
        std::fs::write(&log, "[2026/11/24 18:30:38,  0] started\n  smbd version 4.17.12 started.\n").unwrap();
        assert_eq!(exit_reason(&log), None, "nothing the user can act on");
    }
}
