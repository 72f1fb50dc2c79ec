//! Socket server: one thread per client connection, one JSON request per
//! line, one JSON response per line (see [`crate::proto`]).

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

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

fn serve_client(daemon: &Daemon, stream: UnixStream) {
    let mut writer = match stream.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let mut pending: Vec<u8> = Vec::new();
    let mut fds: Vec<OwnedFd> = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let line = match pending.iter().position(|b| *b == b'\n') {
            Some(i) => {
                let rest = pending.split_off(i + 1);
                let mut line = std::mem::replace(&mut pending, rest);
                line.pop();
                line
            }
            None => match recv_with_fds(&stream, &mut chunk) {
                Ok((0, _)) | Err(_) => return,
                Ok((n, got)) => {
                    pending.extend_from_slice(&chunk[..n]);
                    fds.extend(got);
                    if pending.len() > MAX_REQUEST {
                        return;
                    }
                    continue;
                }
            },
        };
        let Ok(line) = String::from_utf8(line) else { return };
        if line.trim().is_empty() {
            continue;
        }
        let passed = std::mem::take(&mut fds);
        let (response, shutdown) = match crate::proto::parse_request_line(&line) {
            Err(e) => (Response { exit: 2, ..Response::error(format!("bad request: {e}")) }, false),
            Ok((request, argv)) => {
                let shutdown = matches!(request, Request::Shutdown);
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
