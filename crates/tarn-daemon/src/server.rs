//! Socket server: one thread per client connection, one JSON request per
//! line, one JSON response per line (see [`crate::proto`]).

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use zeroize::{Zeroize, Zeroizing};

use crate::daemon::Daemon;
use crate::fdpass::recv_with_fds;
use crate::history::{peer_uid, Caller};

/// A request line longer than this ends the connection.
const MAX_REQUEST: usize = 16 << 20;
use crate::proto::{Request, Response};

pub fn serve(daemon: Arc<Daemon>, listener: UnixListener) {
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                let daemon = daemon.clone();
                let spawned = std::thread::Builder::new()
                    .name("tarn-client".into())
                    .spawn(move || serve_client(&daemon, stream));
                if let Err(e) = spawned {
                    eprintln!("tarn daemon: cannot start a client thread: {e}");
                }
            }
            Err(e) => eprintln!("tarn daemon: accept failed: {e}"),
        }
    }
}

/// Bytes a connection has received and not yet handled. Every buffer a
/// request passes through is zeroed once it is done with (a request may
/// carry key material, `key_bytes.rs`): the receive buffer after each
/// read, the bytes a line leaves behind in this one when it is taken off,
/// the old buffer when this one grows, and everything when the
/// connection ends.
struct Received {
    pending: Vec<u8>,
}

impl Received {
    fn append(&mut self, bytes: &[u8]) {
        if self.pending.capacity() - self.pending.len() < bytes.len() {
            let mut bigger = Vec::with_capacity((2 * self.pending.capacity()).max(self.pending.len() + bytes.len()).max(4096));
            bigger.extend_from_slice(&self.pending);
            self.pending.zeroize();
            self.pending = bigger;
        }
        self.pending.extend_from_slice(bytes);
    }

    /// The first complete line (without its newline), if there is one.
    fn take_line(&mut self) -> Option<Vec<u8>> {
        let end = self.pending.iter().position(|b| *b == b'\n')?;
        let line = self.pending[..end].to_vec();
        let rest = self.pending.len() - (end + 1);
        self.pending.copy_within(end + 1.., 0);
        self.pending[rest..].zeroize();
        self.pending.truncate(rest);
        Some(line)
    }
}

impl Drop for Received {
    fn drop(&mut self) {
        self.pending.zeroize();
    }
}

/// Zeroes the stack below the caller's frame, where the handling of a
/// request that carried a key left its temporaries (the KDF's and the
/// parser's among them); a thread's stack is in a core dump, and glibc
/// keeps the stacks of finished threads for new ones.
#[inline(never)]
fn scrub_stack() {
    let mut area = [0u8; 256 << 10];
    area.zeroize();
    std::hint::black_box(&area);
}

fn serve_client(daemon: &Daemon, stream: UnixStream) {
    let mut writer = match stream.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let mut received = Received { pending: Vec::new() };
    let mut fds: Vec<OwnedFd> = Vec::new();
    let mut chunk = Zeroizing::new(vec![0u8; 64 << 10]);
    loop {
        let line = match received.take_line() {
            Some(line) => line,
            None => match recv_with_fds(&stream, &mut chunk) {
                Ok((0, _)) | Err(_) => return,
                Ok((n, got)) => {
                    received.append(&chunk[..n]);
                    chunk[..n].zeroize();
                    fds.extend(got);
                    if received.pending.len() > MAX_REQUEST {
                        return;
                    }
                    continue;
                }
            },
        };
        let mut line = match String::from_utf8(line) {
            Ok(line) => Zeroizing::new(line),
            Err(e) => {
                e.into_bytes().zeroize();
                return;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let passed = std::mem::take(&mut fds);
        let parsed = crate::proto::parse_request_line(&line);
        line.zeroize();
        let mut keyed = false;
        let (response, shutdown) = match parsed {
            Err(e) => (Response { exit: 2, ..Response::error(format!("bad request: {e}")) }, false),
            Ok((request, argv)) => {
                let shutdown = matches!(request, Request::Shutdown);
                keyed = request.carries_key();
                let caller = Caller { argv, uid: peer_uid(stream.as_raw_fd()) };
                let answer = catch_unwind(AssertUnwindSafe(|| daemon.handle_logged(request, caller, passed, stream.as_raw_fd())));
                let response = answer.unwrap_or_else(|panic| {
                    let what = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "unknown panic".into());
                    Response::error(format!("internal error in the daemon: {what}"))
                });
                (response, shutdown)
            }
        };
        if keyed {
            scrub_stack();
        }
        let mut text = serde_json::to_string(&response).unwrap_or_else(|_| {
            r#"{"ok":false,"exit":1,"stdout":"","stderr":"","error":"cannot encode the response","data":null}"#.into()
        });
        text.push('\n');
        if writer.write_all(text.as_bytes()).is_err() {
            return;
        }
        let _ = writer.flush();
        if shutdown {
            daemon.shutdown();
            eprintln!("tarn daemon: shut down on request");
            std::process::exit(0);
        }
    }
}
