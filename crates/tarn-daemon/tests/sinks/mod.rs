//! Real receivers for alert tests, shared by tarn-daemon's and tarn's
//! integration tests (`#[path]`-included): an SMTP server (aiosmtpd, via
//! smtp_sink.py) and an HTTP server for webhooks, each a child process
//! killed by [`Server`]'s Drop, which also exits by itself when its stdin
//! (held by the test) closes.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// Upper bound for anything to arrive; only reached when something is wrong.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// The webhook receiver: appends "<content-type>\t<body>" per POST to a
/// file; HTTPS when given a certificate and key after the port file.
const WEBHOOK_SINK: &str = r#"
import http.server, os, sys, threading
out, portfile = sys.argv[1], sys.argv[2]
lock = threading.Lock()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        line = self.headers.get("Content-Type", "").encode() + b"\t" + body.replace(b"\n", b" ") + b"\n"
        with lock, open(out, "ab") as f:
            f.write(line)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(portfile + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(portfile + ".tmp", portfile)
if len(sys.argv) > 4:
    import ssl
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[3], sys.argv[4])
    server.socket = context.wrap_socket(server.socket, server_side=True)
threading.Thread(target=server.serve_forever, daemon=True).start()
sys.stdin.buffer.read()
"#;

/// A receiver process; killed on drop, even when the test fails.
pub struct Server {
    child: Child,
    _stdin: Option<ChildStdin>,
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run a Python receiver and wait for the port it writes to `portfile`.
fn start_python(what: &str, args: &[&Path], extra: &[&str], portfile: &Path) -> Server {
    let mut child = Command::new("python3")
        .args(args)
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run python3 for the {what}: {e}"));
    let stdin = child.stdin.take();
    let mut server = Server { child, _stdin: stdin, port: 0 };
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Ok(text) = std::fs::read_to_string(portfile) {
            server.port = text.trim().parse().expect("port number");
            return server;
        }
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("the {what} exited with {status} before listening (is aiosmtpd installed? python3 -m pip install aiosmtpd)");
        }
        assert!(Instant::now() < deadline, "the {what} did not start listening");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn smtp_sink_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tarn-daemon/tests/smtp_sink.py")
}

/// An SMTP server saving mail to `dir/mail/`; `extra` as smtp_sink.py takes.
pub fn start_smtp(dir: &Path, extra: &[&str]) -> (Server, PathBuf) {
    let mail = dir.join("mail");
    std::fs::create_dir_all(&mail).unwrap();
    let portfile = dir.join("smtp.port");
    let script = smtp_sink_script();
    let server = start_python("SMTP server", &[&script, &mail, &portfile], extra, &portfile);
    (server, mail)
}

/// An HTTP server appending every POST to `dir/webhook.log`; `tls` is
/// [certificate, key] for HTTPS.
pub fn start_webhook(dir: &Path, tls: &[&str]) -> (Server, PathBuf) {
    let script = dir.join("webhook_sink.py");
    std::fs::write(&script, WEBHOOK_SINK).unwrap();
    let log = dir.join("webhook.log");
    let portfile = dir.join("webhook.port");
    let server = start_python("webhook server", &[&script, &log, &portfile], tls, &portfile);
    (server, log)
}


/// Saved mails, oldest first.
pub fn mails(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "eml"))
        .collect();
    names.sort();
    names.iter().map(|p| std::fs::read_to_string(p).unwrap()).collect()
}

pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).map(|t| t.lines().map(str::to_string).collect()).unwrap_or_default()
}
