//! Talking to the daemon: find its socket, send one request, read one
//! response.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use tarn_daemon::proto::{Request, Response};
use zeroize::Zeroize;

/// `--socket`, then `TARN_SOCKET`, then the socket of a `tarn up --home`
/// directory named by `TARN_HOME` if a daemon listens there (set on
/// purpose, it wins over the default), then `<state dir>/tarn.sock` (the
/// state directory `tarn daemon` and `tarn up` use by default:
/// `TARN_STATE_DIR`, else /var/lib/tarn).
pub fn socket_path(flag: Option<&Path>) -> PathBuf {
    if let Some(path) = flag {
        return path.to_path_buf();
    }
    if let Some(path) = std::env::var_os("TARN_SOCKET").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    if let Some(home) = std::env::var_os("TARN_HOME").filter(|p| !p.is_empty()) {
        let candidate = crate::up::absolute(Path::new(&home)).join("tarn.sock");
        if candidate.exists() {
            return candidate;
        }
    }
    tarn_daemon::default_state_dir().join("tarn.sock")
}

/// The command line this process was started with: sent with every
/// request, so the daemon can record it in the pool's history.
static ARGV: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

pub fn set_argv(argv: Vec<String>) {
    let _ = ARGV.set(argv);
}

pub fn call(socket: &Path, request: &Request) -> Result<Response, String> {
    call_with_fd(socket, request, None)
}

/// Like [`call`], passing `fd` (the CLI's standard output or input) with the
/// request: `send` and `recv` move their stream through it.
pub fn call_with_fd(socket: &Path, request: &Request, fd: Option<RawFd>) -> Result<Response, String> {
    let stream = UnixStream::connect(socket).map_err(|e| {
        format!("cannot connect to tarn daemon at {}: {e} (is `tarn daemon` running?)", socket.display())
    })?;
    let mut line = tarn_daemon::proto::request_line(request, ARGV.get().map(Vec::as_slice)).map_err(|e| e.to_string())?;
    line.push('\n');
    let sent = match fd {
        Some(fd) => tarn_daemon::fdpass::send_with_fd(&stream, line.as_bytes(), fd),
        None => (&stream).write_all(line.as_bytes()),
    };
    // The line may hold key material (hex digits): zeroed once sent.
    line.zeroize();
    sent.map_err(|e| format!("cannot talk to the daemon: {e}"))?;
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    reader.read_line(&mut answer).map_err(|e| format!("cannot read the daemon's answer: {e}"))?;
    if answer.is_empty() {
        return Err("the daemon closed the connection without answering".into());
    }
    serde_json::from_str(&answer).map_err(|e| format!("bad answer from the daemon: {e}"))
}
