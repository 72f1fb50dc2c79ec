//! Socket server: one thread per client connection, one JSON request per
//! line, one JSON response per line (see [`crate::proto`]).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::daemon::Daemon;
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
    let Ok(reader_stream) = stream.try_clone() else { return };
    let mut writer = stream;
    let reader = BufReader::new(reader_stream);
    for line in reader.lines() {
        let Ok(line) = line else { return };
        if line.trim().is_empty() {
            continue;
        }
        let (response, shutdown) = match serde_json::from_str::<Request>(&line) {
            Err(e) => (Response { exit: 2, ..Response::error(format!("bad request: {e}")) }, false),
            Ok(request) => {
                let shutdown = matches!(request, Request::Shutdown);
                let answer = catch_unwind(AssertUnwindSafe(|| daemon.handle(request)));
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
