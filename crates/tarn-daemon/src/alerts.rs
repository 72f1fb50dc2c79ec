//! Alerts: telling the admin, by e-mail, webhook or a command, that a disk
//! failed (or a scrub finished, or the pool is filling up).
//!
//! The daemon hands every [`Event`] to [`Alerter::notify`], which decides
//! whether it alerts, drops repeats, and queues one delivery per configured
//! channel for a single worker thread: the caller (the pool monitor) never
//! waits on SMTP or HTTP. A failed delivery is retried after
//! [`RETRY_DELAYS`] and then reported as one stderr line.
//!
//! Which events alert: severity at least `min_severity` (default warning),
//! and always the classes in [`ALWAYS_ALERT`].
//!
//! Deduplication: events with the same (pool, class, vdev, state) alert once,
//! and again only after `repeat_after_secs` (0: every time), or once a
//! different state was seen for that (pool, vdev) in between: a disk that
//! goes FAULTED → ONLINE → FAULTED alerts twice, a thousand identical error
//! events alert once.
//!
//! Channels (see `config.rs` for the `[alerts]` keys):
//! - email: plain SMTP, or STARTTLS required (`smtp_starttls`), optional
//!   AUTH; subject `[tarn] <pool>: <message>`, body lists every field.
//! - webhook: HTTP(S) POST of the Event JSON, `Content-Type: application/json`.
//! - command: the program is run directly (no shell) with `command_args`,
//!   the Event JSON on stdin, `TARN_EVENT_CLASS`, `TARN_EVENT_SEVERITY` and
//!   `TARN_POOL` in its environment; killed (with its process group) after
//!   [`COMMAND_TIMEOUT`].

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lettre::message::header::ContentType;
use lettre::message::Mailbox;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{Message, SmtpTransport, Transport};
use parking_lot::{Condvar, Mutex};

use crate::events::{Event, Severity};

/// Info-severity classes that alert whatever `min_severity` says.
pub const ALWAYS_ALERT: [&str; 3] = ["scrub_finish", "resilver_finish", "test"];
/// Waits before the second and third try of a failed delivery.
pub const RETRY_DELAYS: [Duration; 2] = [Duration::from_secs(2), Duration::from_secs(10)];
/// A command channel still running after this is killed.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// Connect/read timeout for SMTP and webhook deliveries.
const NETWORK_TIMEOUT: Duration = Duration::from_secs(30);
/// Deliveries waiting at most; more are dropped (with a stderr line).
const QUEUE_MAX: usize = 1000;
/// Subject lines are cut to this many characters.
const SUBJECT_CHARS_MAX: usize = 120;

/// The `[alerts]` table of the config file; every field optional. A channel
/// is configured when its key is: `email_to` (non-empty), `webhook_url`,
/// `command`.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertConfig {
    pub email_to: Vec<String>,
    pub email_from: Option<String>,
    /// "host:port" ("[::1]:25" for IPv6).
    pub smtp_server: Option<String>,
    /// Require STARTTLS (else plain SMTP, for a relay on localhost).
    pub smtp_starttls: bool,
    pub smtp_user: Option<String>,
    /// File holding the SMTP password (read at each delivery, trailing
    /// newline ignored).
    pub smtp_password_file: Option<PathBuf>,
    /// Extra trusted CA certificate(s), PEM, besides the built-in roots.
    pub smtp_ca_file: Option<PathBuf>,
    pub webhook_url: Option<String>,
    pub command: Option<PathBuf>,
    pub command_args: Vec<String>,
    pub capacity_warn_percent: u8,
    pub min_severity: Severity,
    /// 0: identical events alert every time.
    pub repeat_after_secs: u64,
}

impl Default for AlertConfig {
    fn default() -> AlertConfig {
        AlertConfig {
            email_to: Vec::new(),
            email_from: None,
            smtp_server: None,
            smtp_starttls: false,
            smtp_user: None,
            smtp_password_file: None,
            smtp_ca_file: None,
            webhook_url: None,
            command: None,
            command_args: Vec::new(),
            capacity_warn_percent: 80,
            min_severity: Severity::Warning,
            repeat_after_secs: 3600,
        }
    }
}

impl AlertConfig {
    /// Check values and combinations; the error is one line naming the key.
    pub fn validate(&self) -> Result<(), String> {
        let bad = |key: &str, why: String| Err(format!("[alerts] {key}: {why}"));
        for to in &self.email_to {
            if let Err(e) = to.parse::<Mailbox>() {
                return bad("email_to", format!("bad address '{to}': {e}"));
            }
        }
        if let Some(from) = &self.email_from {
            if let Err(e) = from.parse::<Mailbox>() {
                return bad("email_from", format!("bad address '{from}': {e}"));
            }
        }
        if let Some(server) = &self.smtp_server {
            if let Err(e) = split_host_port(server) {
                return bad("smtp_server", e);
            }
        }
        if !self.email_to.is_empty() {
            if self.email_from.is_none() {
                return bad("email_to", "needs email_from too".into());
            }
            if self.smtp_server.is_none() {
                return bad("email_to", "needs smtp_server too (host:port)".into());
            }
        }
        match (&self.smtp_user, &self.smtp_password_file) {
            (Some(_), None) => return bad("smtp_user", "needs smtp_password_file too".into()),
            (None, Some(_)) => return bad("smtp_password_file", "needs smtp_user too".into()),
            _ => {}
        }
        if self.smtp_ca_file.is_some() && !self.smtp_starttls {
            return bad("smtp_ca_file", "needs smtp_starttls = true".into());
        }
        let files = [
            ("smtp_password_file", &self.smtp_password_file),
            ("smtp_ca_file", &self.smtp_ca_file),
            ("command", &self.command),
        ];
        for (key, path) in files {
            if let Some(path) = path {
                if !path.is_absolute() {
                    return bad(key, format!("'{}' must be an absolute path", path.display()));
                }
            }
        }
        if !self.command_args.is_empty() && self.command.is_none() {
            return bad("command_args", "needs command too".into());
        }
        if let Some(url) = &self.webhook_url {
            if let Err(e) = check_url(url) {
                return bad("webhook_url", e);
            }
        }
        if !(1..=100).contains(&self.capacity_warn_percent) {
            return bad("capacity_warn_percent", format!("{} is not in 1..=100", self.capacity_warn_percent));
        }
        Ok(())
    }

    /// Names of the configured channels, in delivery order.
    pub fn channels(&self) -> Vec<Channel> {
        let mut channels = Vec::new();
        if !self.email_to.is_empty() {
            channels.push(Channel::Email);
        }
        if self.webhook_url.is_some() {
            channels.push(Channel::Webhook);
        }
        if self.command.is_some() {
            channels.push(Channel::Command);
        }
        channels
    }
}

/// "host:port" → (host, port); brackets of an IPv6 literal are removed.
pub fn split_host_port(server: &str) -> Result<(String, u16), String> {
    let (host, port) = server.rsplit_once(':').ok_or_else(|| format!("'{server}' has no port (host:port)"))?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if host.is_empty() || host.contains(['[', ']', ' ', '/']) || (host.contains(':') && !server.starts_with('[')) {
        return Err(format!("'{server}' is not host:port"));
    }
    match port.parse::<u16>() {
        Ok(port) if port != 0 => Ok((host.to_string(), port)),
        _ => Err(format!("'{server}' has a bad port '{port}'")),
    }
}

fn check_url(url: &str) -> Result<(), String> {
    let uri: ureq::http::Uri = url.parse().map_err(|e| format!("bad URL '{url}': {e}"))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        _ => return Err(format!("'{url}' is not an http:// or https:// URL")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("'{url}' has no host"));
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    Email,
    Webhook,
    Command,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Email => "email",
            Channel::Webhook => "webhook",
            Channel::Command => "command",
        }
    }
}

/// Does `event` alert at all under `min_severity` (before deduplication)?
pub fn should_alert(event: &Event, min_severity: Severity) -> bool {
    event.severity >= min_severity || ALWAYS_ALERT.contains(&event.class.as_str())
}

/// (pool, class, vdev, state)
type DedupKey = (String, String, Option<String>, Option<String>);

#[derive(Default)]
struct Dedup {
    /// When each key last alerted.
    alerted: HashMap<DedupKey, Instant>,
    /// Last state seen per (pool, vdev); vdev `None` is the pool itself.
    states: HashMap<(String, Option<String>), String>,
}

struct Job {
    event: Arc<Event>,
    channel: Channel,
    /// Tries made so far.
    tries: usize,
    due: Instant,
}

struct Queue {
    /// Oldest first; the worker takes the first one that is due.
    jobs: Vec<Job>,
    /// The worker is delivering a job it took off `jobs`.
    busy: bool,
    closed: bool,
}

struct Shared {
    config: AlertConfig,
    agent: ureq::Agent,
    queue: Mutex<Queue>,
    /// Signalled when a job is queued or the alerter closes.
    wake: Condvar,
    /// Signalled when the queue becomes empty and the worker idle.
    idle: Condvar,
}

/// Sends alerts; share it in an `Arc`. Dropping it stops the worker after
/// its current delivery and abandons queued ones: call [`Alerter::flush`]
/// first at shutdown. Lock order: `dedup` before the queue.
pub struct Alerter {
    shared: Arc<Shared>,
    dedup: Mutex<Dedup>,
}

impl Alerter {
    /// Start the delivery worker. `config` should have passed
    /// [`AlertConfig::validate`]; problems left (an unreadable password
    /// file) show up as delivery errors.
    pub fn new(config: AlertConfig) -> Alerter {
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .build();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .tls_config(tls)
            .timeout_global(Some(NETWORK_TIMEOUT))
            // A webhook that redirects or fails is reported, not followed.
            .max_redirects(0)
            .http_status_as_error(false)
            .build()
            .into();
        let shared = Arc::new(Shared {
            config,
            agent,
            queue: Mutex::new(Queue { jobs: Vec::new(), busy: false, closed: false }),
            wake: Condvar::new(),
            idle: Condvar::new(),
        });
        let worker = shared.clone();
        let spawned = std::thread::Builder::new().name("tarn-alerts".into()).spawn(move || work(&worker));
        if let Err(e) = spawned {
            // Deliveries then wait forever in the queue; say so once.
            eprintln!("tarn daemon: cannot start the alert thread: {e}");
        }
        Alerter { shared, dedup: Mutex::new(Dedup::default()) }
    }

    /// Consider `event` for alerting (see the module comment); never blocks
    /// on delivery.
    pub fn notify(&self, event: &Event) {
        let config = &self.shared.config;
        let mut dedup = self.dedup.lock();
        if let Some(state) = &event.state {
            let place = (event.pool.clone(), event.vdev.clone());
            if dedup.states.get(&place) != Some(state) {
                dedup.states.insert(place, state.clone());
                // A new state re-arms every alert about this pool or device.
                dedup.alerted.retain(|(pool, _, vdev, _), _| !(*pool == event.pool && *vdev == event.vdev));
            }
        }
        let channels = config.channels();
        if channels.is_empty() || !should_alert(event, config.min_severity) {
            return;
        }
        let now = Instant::now();
        let window = Duration::from_secs(config.repeat_after_secs);
        let key = (event.pool.clone(), event.class.clone(), event.vdev.clone(), event.state.clone());
        if let Some(last) = dedup.alerted.get(&key) {
            if now.duration_since(*last) < window {
                return;
            }
        }
        dedup.alerted.insert(key, now);
        if dedup.alerted.len() > 10_000 {
            dedup.alerted.retain(|_, last| now.duration_since(*last) < window);
        }
        drop(dedup);

        let event = Arc::new(event.clone());
        let mut queue = self.shared.queue.lock();
        for channel in channels {
            if queue.jobs.len() >= QUEUE_MAX {
                eprintln!(
                    "tarn daemon: alert via {} dropped: queue full ({} {})",
                    channel.as_str(),
                    event.pool,
                    event.class
                );
                continue;
            }
            queue.jobs.push(Job { event: event.clone(), channel, tries: 0, due: now });
        }
        drop(queue);
        self.shared.wake.notify_all();
    }

    /// Send a `test` event through every channel now, bypassing the queue
    /// and deduplication; one result per configured channel (none: no
    /// channel configured).
    pub fn send_test(&self, pool: &str) -> Vec<(String, Result<(), String>)> {
        let event = Event::new(pool, "test", Severity::Info, "test alert from tarn");
        self.shared
            .config
            .channels()
            .into_iter()
            .map(|channel| (channel.as_str().to_string(), deliver(&self.shared, channel, &event)))
            .collect()
    }

    /// Configured channels: "email", "webhook", "command".
    pub fn channels(&self) -> Vec<String> {
        self.shared.config.channels().into_iter().map(|c| c.as_str().to_string()).collect()
    }

    pub fn capacity_warn_percent(&self) -> u8 {
        self.shared.config.capacity_warn_percent
    }

    pub fn config(&self) -> &AlertConfig {
        &self.shared.config
    }

    /// Wait until every queued delivery is done (retries included) or
    /// `timeout` passes; true if the queue drained.
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut queue = self.shared.queue.lock();
        while !queue.jobs.is_empty() || queue.busy {
            if self.shared.idle.wait_until(&mut queue, deadline).timed_out() {
                return queue.jobs.is_empty() && !queue.busy;
            }
        }
        true
    }
}

impl Drop for Alerter {
    fn drop(&mut self) {
        self.shared.queue.lock().closed = true;
        self.shared.wake.notify_all();
    }
}

/// The delivery worker: takes the oldest due job, delivers it without
/// holding the lock, requeues it with a delay if it failed.
fn work(shared: &Shared) {
    let mut queue = shared.queue.lock();
    loop {
        if queue.closed {
            return;
        }
        let now = Instant::now();
        let Some(index) = queue.jobs.iter().position(|job| job.due <= now) else {
            if queue.jobs.is_empty() {
                shared.idle.notify_all();
                shared.wake.wait(&mut queue);
            } else {
                let next = queue.jobs.iter().map(|job| job.due).min().unwrap_or(now);
                shared.wake.wait_until(&mut queue, next);
            }
            continue;
        };
        let mut job = queue.jobs.remove(index);
        queue.busy = true;
        drop(queue);
        let result = deliver(shared, job.channel, &job.event);
        job.tries += 1;
        queue = shared.queue.lock();
        queue.busy = false;
        if let Err(e) = result {
            match RETRY_DELAYS.get(job.tries - 1) {
                Some(delay) => {
                    job.due = Instant::now() + *delay;
                    queue.jobs.push(job);
                }
                None => eprintln!(
                    "tarn daemon: alert via {} failed: {e} ({} {}, {} tries)",
                    job.channel.as_str(),
                    job.event.pool,
                    job.event.class,
                    job.tries
                ),
            }
        }
    }
}

fn deliver(shared: &Shared, channel: Channel, event: &Event) -> Result<(), String> {
    let config = &shared.config;
    let result = match channel {
        Channel::Email => send_email(config, event),
        Channel::Webhook => post_webhook(&shared.agent, config, event),
        Channel::Command => match &config.command {
            Some(program) => run_command(program, &config.command_args, event, COMMAND_TIMEOUT),
            None => Err("no command configured".into()),
        },
    };
    result.map_err(|e| one_line(&e))
}

/// Collapse whitespace (line breaks included) so an error is one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The error and its sources, "outer: inner", without repeating a source
/// whose text the outer message already contains.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let part = e.to_string();
        if !text.contains(&part) {
            text = format!("{text}: {part}");
        }
        source = e.source();
    }
    text
}

pub fn email_subject(event: &Event) -> String {
    let subject = format!("[tarn] {}: {}", event.pool, event.message);
    if subject.chars().count() <= SUBJECT_CHARS_MAX {
        return subject;
    }
    let mut cut: String = subject.chars().take(SUBJECT_CHARS_MAX - 3).collect();
    cut.push_str("...");
    cut
}

pub fn email_body(event: &Event) -> String {
    let mut body = format!("tarn on {} reports an event for pool '{}':\n\n", hostname(), event.pool);
    let mut field = |name: &str, value: &str| body.push_str(&format!("  {name:<9} {value}\n"));
    field("message:", &event.message);
    field("class:", &event.class);
    field("severity:", event.severity.as_str());
    field("pool:", &event.pool);
    if let Some(vdev) = &event.vdev {
        field("vdev:", vdev);
    }
    if let Some(state) = &event.state {
        field("state:", state);
    }
    field("time:", &event.time);
    body.push_str(&format!("\nRun 'tarn pool status -v {}' for details.\n", event.pool));
    body
}

fn send_email(config: &AlertConfig, event: &Event) -> Result<(), String> {
    let from = config.email_from.as_deref().ok_or("no email_from configured")?;
    let server = config.smtp_server.as_deref().ok_or("no smtp_server configured")?;
    let mut message = Message::builder()
        .from(from.parse::<Mailbox>().map_err(|e| format!("bad email_from '{from}': {e}"))?)
        .subject(email_subject(event))
        .message_id(None)
        .header(ContentType::TEXT_PLAIN);
    for to in &config.email_to {
        message = message.to(to.parse::<Mailbox>().map_err(|e| format!("bad email_to '{to}': {e}"))?);
    }
    let message = message.body(email_body(event)).map_err(|e| format!("cannot build the message: {e}"))?;

    let (host, port) = split_host_port(server)?;
    let mut transport = SmtpTransport::builder_dangerous(host.as_str()).port(port).timeout(Some(NETWORK_TIMEOUT));
    if config.smtp_starttls {
        let mut params = TlsParameters::builder(host.clone());
        if let Some(ca_file) = &config.smtp_ca_file {
            let pem = std::fs::read(ca_file).map_err(|e| format!("smtp_ca_file {}: {e}", ca_file.display()))?;
            if !pem.windows(11).any(|w| w == b"CERTIFICATE") {
                return Err(format!("smtp_ca_file {}: no PEM certificate in it", ca_file.display()));
            }
            let certificate = Certificate::from_pem(&pem)
                .map_err(|e| format!("smtp_ca_file {}: {}", ca_file.display(), error_chain(&e)))?;
            params = params.add_root_certificate(certificate);
        }
        let params = params.build_rustls().map_err(|e| format!("TLS setup: {}", error_chain(&e)))?;
        transport = transport.tls(Tls::Required(params));
    }
    if let (Some(user), Some(password_file)) = (&config.smtp_user, &config.smtp_password_file) {
        let password = std::fs::read_to_string(password_file)
            .map_err(|e| format!("smtp_password_file {}: {e}", password_file.display()))?;
        let password = password.trim_end_matches(['\r', '\n']).to_string();
        transport = transport.credentials(Credentials::new(user.clone(), password));
    }
    transport.build().send(&message).map_err(|e| format!("SMTP {server}: {}", error_chain(&e)))?;
    Ok(())
}

fn post_webhook(agent: &ureq::Agent, config: &AlertConfig, event: &Event) -> Result<(), String> {
    let url = config.webhook_url.as_deref().ok_or("no webhook_url configured")?;
    let body = serde_json::to_vec(event).map_err(|e| e.to_string())?;
    let response = agent
        .post(url)
        .header("Content-Type", "application/json")
        .send(&body[..])
        .map_err(|e| format!("POST {url}: {}", error_chain(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("POST {url}: HTTP {status}"));
    }
    Ok(())
}

/// Run `program` with the event JSON on stdin; Ok when it exits 0 within
/// `timeout`, else the error names the exit status and the first line of
/// its stderr.
fn run_command(program: &Path, args: &[String], event: &Event, timeout: Duration) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let json = serde_json::to_vec(event).map_err(|e| e.to_string())?;
    let mut child = Command::new(program)
        .args(args)
        .env("TARN_EVENT_CLASS", &event.class)
        .env("TARN_EVENT_SEVERITY", event.severity.as_str())
        .env("TARN_POOL", &event.pool)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        // Its own process group, so a timeout kills what it started too.
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    // Feed stdin and drain stderr on helper threads: a command that reads
    // neither must not block us, only run into the timeout.
    if let Some(mut stdin) = child.stdin.take() {
        std::thread::spawn(move || {
            // A command that exits without reading gives EPIPE: fine.
            let _ = stdin.write_all(&json);
        });
    }
    let (stderr_tx, stderr_rx) = std::sync::mpsc::channel();
    if let Some(mut stderr) = child.stderr.take() {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = (&mut stderr).take(4096).read_to_end(&mut text);
            let _ = stderr_tx.send(text);
            // Keep draining so the command never blocks on a full pipe.
            let _ = std::io::copy(&mut stderr, &mut std::io::sink());
        });
    }
    let started = Instant::now();
    let mut pause = Duration::from_millis(5);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() >= timeout => {
                // SAFETY: kill(2) on the process group we created above.
                unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{} timed out after {} s (killed)", program.display(), timeout.as_secs()));
            }
            Ok(None) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            Err(e) => return Err(format!("waiting for {}: {e}", program.display())),
        }
    };
    if status.success() {
        return Ok(());
    }
    // Children of the command may hold stderr open: do not wait long.
    let stderr = stderr_rx.recv_timeout(Duration::from_millis(500)).unwrap_or_default();
    let first_line = String::from_utf8_lossy(&stderr).lines().find(|l| !l.trim().is_empty()).unwrap_or("").to_string();
    let how = match (status.code(), std::os::unix::process::ExitStatusExt::signal(&status)) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => format!("failed ({status})"),
    };
    let mut error = format!("{} {how}", program.display());
    if !first_line.is_empty() {
        error.push_str(": ");
        error.push_str(&first_line);
    }
    Err(error)
}

fn hostname() -> String {
    crate::daemon::hostname()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(class: &str, severity: Severity) -> Event {
        Event::new("tank", class, severity, "something happened")
    }

    #[test]
    fn alert_rules() {
        assert!(!should_alert(&event("scrub_start", Severity::Info), Severity::Warning));
        assert!(should_alert(&event("scrub_finish", Severity::Info), Severity::Warning));
        assert!(should_alert(&event("scrub_finish", Severity::Info), Severity::Error));
        assert!(should_alert(&event("capacity", Severity::Warning), Severity::Warning));
        assert!(!should_alert(&event("capacity", Severity::Warning), Severity::Error));
        assert!(should_alert(&event("statechange", Severity::Info), Severity::Info));
    }

    #[test]
    fn host_port() {
        assert_eq!(split_host_port("127.0.0.1:2525"), Ok(("127.0.0.1".into(), 2525)));
        assert_eq!(split_host_port("[::1]:25"), Ok(("::1".into(), 25)));
        assert_eq!(split_host_port("mail.example.org:587"), Ok(("mail.example.org".into(), 587)));
        for bad in ["127.0.0.1", "host:", ":25", "host:0", "host:99999", "::1:25", "a b:25"] {
            assert!(split_host_port(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn subject_and_body() {
        let e = event("vdev_faulted", Severity::Error).with_vdev("/dev/sdb").with_state("FAULTED");
        assert_eq!(email_subject(&e), "[tarn] tank: something happened");
        let long = Event::new("tank", "x", Severity::Error, "é".repeat(300));
        let subject = email_subject(&long);
        assert_eq!(subject.chars().count(), SUBJECT_CHARS_MAX);
        assert!(subject.ends_with("..."));
        let body = email_body(&e);
        for part in ["vdev_faulted", "error", "/dev/sdb", "FAULTED", &e.time, "tarn pool status -v tank"] {
            assert!(body.contains(part), "{part} in {body}");
        }
    }

    #[test]
    fn command_timeout_kills_the_group() {
        let started = Instant::now();
        let args = ["-c".to_string(), "sleep 30 & sleep 30".to_string()];
        let e = run_command(Path::new("/bin/sh"), &args, &event("test", Severity::Info), Duration::from_millis(300))
            .unwrap_err();
        assert!(e.contains("timed out"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn command_failure_is_one_line() {
        let args = ["-c".to_string(), "cat >/dev/null; echo 'no mail today' >&2; echo more >&2; exit 3".to_string()];
        let e = run_command(Path::new("/bin/sh"), &args, &event("test", Severity::Info), Duration::from_secs(20))
            .unwrap_err();
        assert!(e.ends_with("exited with status 3: no mail today") && !e.contains('\n'), "{e}");
        let e = run_command(Path::new("/nonexistent/notify"), &[], &event("test", Severity::Info), COMMAND_TIMEOUT)
            .unwrap_err();
        assert!(e.contains("cannot run /nonexistent/notify"), "{e}");
    }

    #[test]
    fn failed_deliveries_are_retried_then_dropped() {
        // A command that fails: the first try happens at once, the queue
        // holds the retry, and flush gives up at its timeout.
        let config = AlertConfig { command: Some("/bin/false".into()), ..AlertConfig::default() };
        let alerter = Alerter::new(config);
        alerter.notify(&event("vdev_faulted", Severity::Error));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let queue = alerter.shared.queue.lock();
            if queue.jobs.first().is_some_and(|job| job.tries == 1) {
                assert!(queue.jobs[0].due > Instant::now(), "the retry waits");
                break;
            }
            drop(queue);
            assert!(Instant::now() < deadline, "no retry was queued");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!alerter.flush(Duration::from_millis(100)), "a retry is pending");
    }
}
