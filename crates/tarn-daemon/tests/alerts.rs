//! Alerts against real receivers: an SMTP server (aiosmtpd, plain and
//! STARTTLS + AUTH), an HTTP server for the webhook, and a shell script as
//! the command. Needs python3 with aiosmtpd (`python3 -m pip install
//! aiosmtpd`) and the openssl command line.
//!
//! Every server is a child process killed by [`Server`]'s Drop, and it
//! also exits by itself when its stdin (held by the test) closes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tarn_daemon::alerts::{AlertConfig, Alerter};
use tarn_daemon::events::{Event, Severity};

mod sinks;
use sinks::{lines, mails, start_smtp, start_webhook, Server, PATIENCE};

/// A command channel: a script appending "<class> <pool> <json>" per run.
fn write_command(dir: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let out = dir.join("command.log");
    let script = dir.join("notify.sh");
    let text = format!(
        "#!/bin/sh\n{{ printf '%s %s ' \"$TARN_EVENT_CLASS\" \"$TARN_POOL\"; tr -d '\\n'; echo; }} >> '{}'\n",
        out.display()
    );
    // Written and closed before any thread could fork (no ETXTBSY).
    std::fs::write(&script, text).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (script, out)
}


/// Poll `count` until it reaches `want` (bounded by PATIENCE); returns the
/// last count seen.
fn wait_count(want: usize, count: impl Fn() -> usize) -> usize {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let n = count();
        if n >= want || Instant::now() >= deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

struct Receivers {
    _smtp: Server,
    _webhook: Server,
    mail: PathBuf,
    webhook_log: PathBuf,
    command_log: PathBuf,
    config: AlertConfig,
}

/// Plain SMTP, webhook and command receivers, and a config naming them.
fn receivers(dir: &Path) -> Receivers {
    let (command, command_log) = write_command(dir);
    let (smtp, mail) = start_smtp(dir, &[]);
    let (webhook, webhook_log) = start_webhook(dir, &[]);
    let config = AlertConfig {
        email_to: vec!["admin@example.org".into()],
        email_from: Some("tarn@nas.local".into()),
        smtp_server: Some(format!("127.0.0.1:{}", smtp.port)),
        webhook_url: Some(format!("http://127.0.0.1:{}/hook", webhook.port)),
        command: Some(command),
        ..AlertConfig::default()
    };
    config.validate().expect("test config is valid");
    Receivers { _smtp: smtp, _webhook: webhook, mail, webhook_log, command_log, config }
}

impl Receivers {
    /// Deliveries seen so far: (emails, webhook posts, command runs).
    fn counts(&self) -> (usize, usize, usize) {
        (mails(&self.mail).len(), lines(&self.webhook_log).len(), lines(&self.command_log).len())
    }

    /// Wait for the alerter's queue to drain, then for `want` deliveries on
    /// every channel; returns what arrived.
    fn settle(&self, alerter: &Alerter, want: usize) -> (usize, usize, usize) {
        assert!(alerter.flush(PATIENCE), "the alert queue did not drain");
        wait_count(want, || mails(&self.mail).len());
        wait_count(want, || lines(&self.webhook_log).len());
        wait_count(want, || lines(&self.command_log).len());
        self.counts()
    }
}

fn faulted(state: &str) -> Event {
    let severity = if state == "ONLINE" { Severity::Info } else { Severity::Error };
    Event::new("tank", "statechange", severity, format!("vdev /dev/sdb is {state}"))
        .with_vdev("/dev/sdb")
        .with_state(state)
}

#[test]
fn an_error_reaches_every_channel_once_until_the_state_changes() {
    let dir = tempfile::tempdir().unwrap();
    let r = receivers(dir.path());
    let alerter = Alerter::new(r.config.clone());
    assert_eq!(alerter.channels(), ["email", "webhook", "command"]);
    assert_eq!(alerter.capacity_warn_percent(), 80);

    let first = faulted("FAULTED");
    alerter.notify(&first);
    assert_eq!(r.settle(&alerter, 1), (1, 1, 1));

    let mail = &mails(&r.mail)[0];
    assert!(mail.contains("X-Envelope-From: tarn@nas.local"), "{mail}");
    assert!(mail.contains("X-Envelope-To: admin@example.org"), "{mail}");
    assert!(mail.contains("From: tarn@nas.local"), "{mail}");
    assert!(mail.contains("To: admin@example.org"), "{mail}");
    assert!(mail.contains("Subject: [tarn] tank: vdev /dev/sdb is FAULTED"), "{mail}");
    for part in ["statechange", "FAULTED", "/dev/sdb", "Run 'tarn pool status -v tank' for details."] {
        assert!(mail.contains(part), "{part} in {mail}");
    }

    let post = &lines(&r.webhook_log)[0];
    let (content_type, body) = post.split_once('\t').expect("content type and body");
    assert_eq!(content_type, "application/json");
    let posted: Event = serde_json::from_str(body).expect("webhook body is the Event JSON");
    assert_eq!(posted, first);

    let run = &lines(&r.command_log)[0];
    let json = run.strip_prefix("statechange tank ").unwrap_or_else(|| panic!("env of the command: {run}"));
    let got: Event = serde_json::from_str(json).expect("command stdin is the Event JSON");
    assert_eq!(got, first);

    // A storm of identical events alerts once.
    for _ in 0..100 {
        alerter.notify(&faulted("FAULTED"));
    }
    assert_eq!(r.settle(&alerter, 1), (1, 1, 1), "identical events are deduplicated");

    // ONLINE is Info (no alert) but re-arms: the next FAULTED alerts again.
    alerter.notify(&faulted("ONLINE"));
    assert_eq!(r.settle(&alerter, 1), (1, 1, 1));
    alerter.notify(&faulted("FAULTED"));
    assert_eq!(r.settle(&alerter, 2), (2, 2, 2), "FAULTED → ONLINE → FAULTED alerts twice");

    // Info scrub_start stays quiet; scrub_finish always alerts.
    alerter.notify(&Event::new("tank", "scrub_start", Severity::Info, "scrub started"));
    assert_eq!(r.settle(&alerter, 2), (2, 2, 2), "scrub_start does not alert");
    alerter.notify(&Event::new("tank", "scrub_finish", Severity::Info, "scrub repaired 0B with 0 errors"));
    assert_eq!(r.settle(&alerter, 3), (3, 3, 3), "scrub_finish alerts");
    assert!(mails(&r.mail)[2].contains("Subject: [tarn] tank: scrub repaired 0B with 0 errors"));
}

#[test]
fn identical_events_alert_again_after_the_repeat_window() {
    let dir = tempfile::tempdir().unwrap();
    let (_webhook, log) = start_webhook(dir.path(), &[]);
    let config = AlertConfig {
        webhook_url: Some(format!("http://127.0.0.1:{}/hook", _webhook.port)),
        repeat_after_secs: 1,
        ..AlertConfig::default()
    };
    let alerter = Alerter::new(config);
    let event = Event::new("tank", "data_error", Severity::Error, "permanent error in tank/media");
    alerter.notify(&event);
    alerter.notify(&event);
    assert!(alerter.flush(PATIENCE));
    assert_eq!(wait_count(1, || lines(&log).len()), 1);
    std::thread::sleep(Duration::from_millis(1100));
    alerter.notify(&event);
    assert!(alerter.flush(PATIENCE));
    assert_eq!(wait_count(2, || lines(&log).len()), 2, "repeated after repeat_after_secs");
}

#[test]
fn send_test_reports_every_channel() {
    let dir = tempfile::tempdir().unwrap();
    let r = receivers(dir.path());
    let alerter = Alerter::new(r.config.clone());
    let results = alerter.send_test("tank");
    let names: Vec<_> = results.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["email", "webhook", "command"]);
    for (name, result) in &results {
        assert!(result.is_ok(), "{name}: {result:?}");
    }
    // send_test is synchronous: everything is there already.
    assert_eq!(r.counts(), (1, 1, 1));
    assert!(mails(&r.mail)[0].contains("Subject: [tarn] tank: test alert from tarn"));
    let posted: Event = serde_json::from_str(lines(&r.webhook_log)[0].split_once('\t').unwrap().1).unwrap();
    assert_eq!((posted.class.as_str(), posted.severity), ("test", Severity::Info));
    assert!(lines(&r.command_log)[0].starts_with("test tank {"));
    // It bypasses deduplication.
    assert!(alerter.send_test("tank").iter().all(|(_, result)| result.is_ok()));
    assert_eq!(r.counts(), (2, 2, 2));

    // No channel: nothing to report.
    assert!(Alerter::new(AlertConfig::default()).send_test("tank").is_empty());
}

#[test]
fn unreachable_channels_report_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let failing = dir.path().join("fail.sh");
    std::fs::write(&failing, "#!/bin/sh\necho 'relay says no' >&2\nexit 7\n").unwrap();
    std::fs::set_permissions(&failing, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let down = AlertConfig {
        email_to: vec!["admin@example.org".into()],
        email_from: Some("tarn@nas.local".into()),
        smtp_server: Some(format!("127.0.0.1:{}", closed_port())),
        webhook_url: Some(format!("http://127.0.0.1:{}/hook", closed_port())),
        command: Some(failing),
        ..AlertConfig::default()
    };
    down.validate().unwrap();
    let alerter = Alerter::new(down);
    let results = alerter.send_test("tank");
    assert_eq!(results.len(), 3);
    for (name, result) in &results {
        let e = result.as_ref().expect_err(name);
        assert!(!e.is_empty() && !e.contains('\n'), "{name}: '{e}'");
    }
    let command_error = results[2].1.as_ref().unwrap_err();
    assert!(command_error.ends_with("exited with status 7: relay says no"), "{command_error}");

    // A webhook answering an HTTP error is an error too.
    let mut server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    let answer = std::thread::spawn(move || answer_once(&mut server, "HTTP/1.1 500 Internal Server Error"));
    let alerter = Alerter::new(AlertConfig {
        webhook_url: Some(format!("http://127.0.0.1:{port}/hook")),
        ..AlertConfig::default()
    });
    let results = alerter.send_test("tank");
    let e = results[0].1.as_ref().unwrap_err();
    assert!(e.contains("500"), "{e}");
    answer.join().unwrap();
}

/// Read one request from `listener` and answer with `status` and no body.
fn answer_once(listener: &mut std::net::TcpListener, status: &str) {
    use std::io::Read;
    let (mut stream, _) = listener.accept().unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    // Headers, then the body by Content-Length.
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&request);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= length {
                break;
            }
        }
    }
    let _ = stream.write_all(format!("{status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes());
}

/// A CA and a server certificate for 127.0.0.1/localhost signed by it:
/// (ca.pem, cert.pem, key.pem). rustls refuses a CA certificate as the
/// server's own, so the relay's certificate is a leaf of a private CA, as
/// on a self-hosted relay.
fn make_certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .expect("the openssl command line (Debian: apt-get install openssl)");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    run(&[
        &["req", "-x509"][..],
        &ec,
        &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=tarn test CA"],
    ]
    .concat());
    run(&[&["req"][..], &ec, &["-keyout", "key.pem", "-out", "leaf.csr", "-subj", "/CN=localhost"]].concat());
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "cert.pem",
        "-days",
        "2",
        "-extfile",
        "leaf.ext",
    ]);
    (dir.join("ca.pem"), dir.join("cert.pem"), dir.join("key.pem"))
}

#[test]
fn starttls_with_auth() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = make_certificates(dir.path());
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let (smtp, mail) = start_smtp(dir.path(), &["--tls", &cert, &key, "--auth", "tarn", "s3cret pass"]);
    let password_file = dir.path().join("smtp.pass");
    std::fs::write(&password_file, "s3cret pass\n").unwrap();
    let config = AlertConfig {
        email_to: vec!["admin@example.org".into()],
        email_from: Some("tarn@nas.local".into()),
        smtp_server: Some(format!("127.0.0.1:{}", smtp.port)),
        smtp_starttls: true,
        smtp_user: Some("tarn".into()),
        smtp_password_file: Some(password_file.clone()),
        smtp_ca_file: Some(ca),
        ..AlertConfig::default()
    };
    config.validate().unwrap();

    let results = Alerter::new(config.clone()).send_test("tank");
    assert_eq!(results.len(), 1);
    assert!(results[0].1.is_ok(), "{results:?}");
    let received = mails(&mail);
    assert_eq!(received.len(), 1);
    assert!(received[0].contains("Subject: [tarn] tank: test alert from tarn"), "{}", received[0]);

    // Through the queue as well.
    let alerter = Alerter::new(config.clone());
    alerter.notify(&faulted("FAULTED"));
    assert!(alerter.flush(PATIENCE));
    assert_eq!(wait_count(2, || mails(&mail).len()), 2);

    let refused = |config: AlertConfig, why: &str| {
        let results = Alerter::new(config).send_test("tank");
        let e = results[0].1.as_ref().expect_err(why);
        assert!(!e.contains('\n'), "{why}: '{e}'");
        e.clone()
    };
    std::fs::write(dir.path().join("wrong.pass"), "guess").unwrap();
    let e = refused(
        AlertConfig { smtp_password_file: Some(dir.path().join("wrong.pass")), ..config.clone() },
        "wrong password",
    );
    assert!(e.contains("535") || e.to_lowercase().contains("auth"), "{e}");
    refused(AlertConfig { smtp_ca_file: None, ..config.clone() }, "untrusted certificate");
    refused(AlertConfig { smtp_starttls: false, smtp_ca_file: None, ..config.clone() }, "STARTTLS is required");
    assert_eq!(mails(&mail).len(), 2, "nothing else got through");

    // An https:// webhook goes through TLS (aws-lc-rs provider) and checks
    // the certificate against the built-in roots: a private CA is refused.
    let (https, log) = start_webhook(dir.path(), &[&cert, &key]);
    let alerter = Alerter::new(AlertConfig {
        webhook_url: Some(format!("https://127.0.0.1:{}/hook", https.port)),
        ..AlertConfig::default()
    });
    let results = alerter.send_test("tank");
    let e = results[0].1.as_ref().expect_err("https with an unknown CA");
    assert!(e.contains("UnknownIssuer") && !e.contains('\n'), "{e}");
    assert!(lines(&log).is_empty());
}
