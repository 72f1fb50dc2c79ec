//! `tarn send` and `tarn recv`: the stream goes through this process's
//! standard output / input, which is handed to the daemon with the request
//! (the daemon reads or writes it directly; see `tarn_daemon::fdpass`).

use std::io::IsTerminal;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Instant;

use tarn_daemon::proto::Request;
use tarn_ds::size::format_bytes;

use crate::commands::{data, send_with_fd};
use crate::Failure;

pub struct SendArgs {
    pub from: Option<String>,
    pub from_all: Option<String>,
    pub replicate: bool,
    pub props: bool,
    pub dry_run: bool,
    pub verbose: bool,
    pub parsable: bool,
    pub raw: bool,
    pub token: Option<String>,
    pub snapshot: Option<String>,
}

pub fn send(socket: &Path, a: SendArgs) -> Result<i32, Failure> {
    let stdout = std::io::stdout();
    if !a.dry_run && stdout.is_terminal() {
        return Err(Failure::from(
            "refusing to write a stream to a terminal: redirect standard output to a file or a pipe (e.g. | tarn recv ...)".to_string(),
        ));
    }
    let series = a.from_all.is_some();
    let request = Request::Send {
        snapshot: a.snapshot.unwrap_or_default(),
        from: a.from_all.or(a.from),
        series,
        recursive: a.replicate,
        props: a.props,
        token: a.token,
        dry_run: a.dry_run,
        raw: a.raw,
    };
    if a.dry_run {
        let response = send_with_fd(socket, &request, None)?;
        // zfs prints the estimate with -v or -P; without them, nothing.
        let text = |key: &str| response.data.as_ref().and_then(|d| d.get(key)).and_then(|t| t.as_str()).unwrap_or("").to_string();
        if a.parsable {
            print!("{}", text("parsable"));
        } else if a.verbose {
            print!("{}", text("text"));
        }
        return Ok(0);
    }
    let started = Instant::now();
    let response = send_with_fd(socket, &request, Some(stdout.as_raw_fd()))?;
    if a.verbose {
        let bytes = response.data.as_ref().and_then(|d| d.get("bytes")).and_then(|b| b.as_u64()).unwrap_or(0);
        eprintln!("sent {} in {:.1} seconds", format_bytes(bytes), started.elapsed().as_secs_f64());
    }
    Ok(0)
}

pub struct RecvArgs {
    pub force: bool,
    pub resumable: bool,
    pub no_mount: bool,
    pub verbose: bool,
    pub abort: bool,
    pub set: Vec<(String, String)>,
    pub exclude: Vec<String>,
    pub discard_pool: bool,
    pub last_component: bool,
    pub target: String,
}

pub fn recv(socket: &Path, a: RecvArgs) -> Result<i32, Failure> {
    if a.abort {
        send_with_fd(socket, &Request::ReceiveAbort { dataset: a.target }, None)?;
        return Ok(0);
    }
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Err(Failure::from(
            "refusing to read a stream from a terminal: redirect standard input from a file or a pipe".to_string(),
        ));
    }
    let started = Instant::now();
    let request = Request::Receive {
        target: a.target,
        force: a.force,
        resumable: a.resumable,
        set: a.set,
        exclude: a.exclude,
        no_mount: a.no_mount,
        discard_pool: a.discard_pool,
        last_component: a.last_component,
    };
    // A partial failure (received, but not mounted) sets the exit status
    // through `send_with_fd`.
    let response = send_with_fd(socket, &request, Some(stdin.as_raw_fd()))?;
    if a.verbose {
        let report: tarn_ds::replication::RecvReport = data(response)?;
        for s in &report.snapshots {
            println!("received {s}");
        }
        for d in &report.destroyed {
            println!("destroyed {d} (not on the sender)");
        }
        println!("received {} stream in {:.1} seconds", format_bytes(report.bytes), started.elapsed().as_secs_f64());
    }
    Ok(0)
}
