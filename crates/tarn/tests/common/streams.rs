//! Send and receive through the CLI: to and from files, and through a
//! real pipe (the replication tests).

use std::fs::File;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use super::{assert_no_panic, tail, Harness, TARN};

/// `tarn --socket … ARGS`, not yet run.
pub fn tarn_cmd(h: &Harness, args: &[&str]) -> Command {
    let mut c = Command::new(TARN);
    c.arg("--socket").arg(&h.socket).args(args);
    c
}

/// `tarn send ARGS > file`; panics unless it succeeds.
pub fn send_to(h: &Harness, args: &[&str], file: &Path) {
    let out = tarn_cmd(h, &[&["send"], args].concat())
        .stdout(File::create(file).expect("create stream file"))
        .stderr(Stdio::piped())
        .output()
        .expect("run tarn send");
    assert!(out.status.success(), "tarn send {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    assert_no_panic(&out, "send");
}

/// `tarn recv ARGS < file`, whatever its outcome (never a panic).
pub fn recv_from(h: &Harness, args: &[&str], file: &Path) -> Output {
    let out = tarn_cmd(h, &[&["recv"], args].concat())
        .stdin(File::open(file).expect("open stream file"))
        .output()
        .expect("run tarn recv");
    assert_no_panic(&out, "recv");
    out
}

/// `tarn recv ARGS < file`: (stdout, stderr); panics unless it succeeds.
pub fn recv_ok(h: &Harness, args: &[&str], file: &Path) -> (String, String) {
    let out = recv_from(h, args, file);
    assert!(
        out.status.success(),
        "tarn recv {args:?} failed: {}\ndaemon log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        tail(&h.daemon_log(), 30)
    );
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `tarn send SEND | tarn recv RECV` through a real pipe; panics unless
/// both succeed.
pub fn pipe(h: &Harness, send: &[&str], recv: &[&str]) {
    let mut sender = tarn_cmd(h, &[&["send"], send].concat())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tarn send");
    let stream = sender.stdout.take().expect("sender stdout");
    let receiver = tarn_cmd(h, &[&["recv"], recv].concat()).stdin(stream).output().expect("run tarn recv");
    let sent = sender.wait_with_output().expect("wait for tarn send");
    assert_no_panic(&sent, "send");
    assert_no_panic(&receiver, "recv");
    assert!(sent.status.success(), "tarn send {send:?}: {}", String::from_utf8_lossy(&sent.stderr));
    assert!(
        receiver.status.success(),
        "tarn recv {recv:?}: {}\ndaemon log:\n{}",
        String::from_utf8_lossy(&receiver.stderr),
        tail(&h.daemon_log(), 30)
    );
}
