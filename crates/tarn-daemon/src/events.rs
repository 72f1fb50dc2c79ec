//! Pool events (`tarn pool events`, zpool's `zpool events`): what happened to
//! a pool or one of its devices, newest kept in memory and, optionally, in a
//! JSON-lines file so they survive a daemon restart.
//!
//! Invariants:
//! - Sequence numbers start at 1 and only grow, also across a restart that
//!   reloads the file; `clear` removes events but never reuses a number.
//! - The ring holds at most [`RING_CAPACITY`] events; the file is rewritten
//!   to the ring whenever it passes [`FILE_LINES_MAX`] lines, and at open.
//! - The file is best effort: a line that does not parse is skipped at
//!   load, a failed write is reported once on stderr, never an error to the
//!   poster.
//!
//! File format: one JSON object per line, the [`Event`] fields plus `"seq"`.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};

/// Newest events kept in memory (and in the file after a rewrite).
pub const RING_CAPACITY: usize = 10_000;
/// The file is compacted to the ring once it has more lines than this.
pub const FILE_LINES_MAX: usize = 20_000;

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Severity {
    type Err = String;
    fn from_str(s: &str) -> Result<Severity, String> {
        match s {
            "info" => Ok(Severity::Info),
            "warning" => Ok(Severity::Warning),
            "error" => Ok(Severity::Error),
            other => Err(format!("bad severity '{other}' (info, warning or error)")),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Event {
    /// RFC 3339 UTC with milliseconds, e.g. "2026-11-22T03:10:59.123Z".
    pub time: String,
    /// Nanoseconds since the Unix epoch (the same instant as `time`).
    pub time_ns: u64,
    pub pool: String,
    /// "statechange", "vdev_faulted", "scrub_finish", "test", ...
    pub class: String,
    pub severity: Severity,
    /// Device path, when the event is about one device.
    pub vdev: Option<String>,
    /// The new state ("FAULTED", "DEGRADED", "ONLINE"), for state changes.
    pub state: Option<String>,
    /// One line, human readable.
    pub message: String,
}

impl Event {
    /// An event stamped with the current time. Line breaks in `message`
    /// become spaces, so the message stays one line everywhere it is shown.
    pub fn new(
        pool: impl Into<String>,
        class: impl Into<String>,
        severity: Severity,
        message: impl Into<String>,
    ) -> Event {
        let time_ns = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
        let message: String = message.into();
        Event {
            time: rfc3339_utc(time_ns),
            time_ns,
            pool: pool.into(),
            class: class.into(),
            severity,
            vdev: None,
            state: None,
            message: message.split(['\r', '\n']).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" "),
        }
    }

    pub fn with_vdev(mut self, vdev: impl Into<String>) -> Event {
        self.vdev = Some(vdev.into());
        self
    }

    pub fn with_state(mut self, state: impl Into<String>) -> Event {
        self.state = Some(state.into());
        self
    }
}

/// `time_ns` (Unix nanoseconds) as RFC 3339 UTC with milliseconds.
pub fn rfc3339_utc(time_ns: u64) -> String {
    let secs = time_ns / 1_000_000_000;
    let millis = (time_ns % 1_000_000_000) / 1_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian
/// calendar (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // 0..=365, from March 1
    let mp = (5 * doy + 2) / 153; // 0..=11, March = 0
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// One line of the file.
#[derive(Serialize, Deserialize)]
struct Record {
    seq: u64,
    #[serde(flatten)]
    event: Event,
}

struct LogFile {
    path: PathBuf,
    /// Open for appending; `None` after a failure to open it.
    out: Option<File>,
    lines: usize,
    /// A write failure was reported; stay quiet until a write succeeds.
    failing: bool,
}

struct Inner {
    ring: VecDeque<(u64, Event)>,
    /// Sequence number of the newest event ever posted (0: none yet).
    last_seq: u64,
    file: Option<LogFile>,
}

/// The daemon's event log. Lock order: it takes only its own lock.
pub struct EventLog {
    inner: Mutex<Inner>,
    posted: Condvar,
}

impl EventLog {
    /// An empty log, or the events of `path` if it exists; with a path, every
    /// event posted is appended to it.
    pub fn open(path: Option<PathBuf>) -> EventLog {
        let mut inner = Inner { ring: VecDeque::new(), last_seq: 0, file: None };
        if let Some(path) = path {
            match load(&path) {
                Ok(records) => {
                    for (seq, event) in records {
                        inner.last_seq = seq;
                        push_bounded(&mut inner.ring, seq, event);
                    }
                }
                Err(e) => eprintln!("tarn daemon: event log {}: {e}", path.display()),
            }
            let mut file = LogFile { path, out: None, lines: 0, failing: false };
            // Rewriting at open drops garbage and a torn last line, so the
            // next append starts on a line of its own.
            file.rewrite(&inner.ring);
            inner.file = Some(file);
        }
        EventLog { inner: Mutex::new(inner), posted: Condvar::new() }
    }

    /// Record `event`; returns its sequence number.
    pub fn post(&self, event: Event) -> u64 {
        let mut inner = self.inner.lock();
        inner.last_seq += 1;
        let seq = inner.last_seq;
        let Inner { ring, file, .. } = &mut *inner;
        if let Some(file) = file {
            file.append(seq, &event);
        }
        push_bounded(ring, seq, event);
        if let Some(file) = file {
            if file.lines > FILE_LINES_MAX {
                file.rewrite(ring);
            }
        }
        drop(inner);
        self.posted.notify_all();
        seq
    }

    /// Events with a sequence number above `seq`, oldest first, of `pool`
    /// only when given.
    pub fn since(&self, seq: u64, pool: Option<&str>) -> Vec<(u64, Event)> {
        let inner = self.inner.lock();
        let start = inner.ring.partition_point(|(s, _)| *s <= seq);
        inner.ring.range(start..).filter(|(_, e)| pool.is_none_or(|p| e.pool == p)).cloned().collect()
    }

    /// Sequence number of the newest event posted (0 if none): a follower
    /// starts from here.
    pub fn last_seq(&self) -> u64 {
        self.inner.lock().last_seq
    }

    /// Wait until an event newer than `seq` is posted or `timeout` passes;
    /// true if there is one.
    pub fn wait_newer(&self, seq: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut inner = self.inner.lock();
        while inner.last_seq <= seq {
            if self.posted.wait_until(&mut inner, deadline).timed_out() {
                return inner.last_seq > seq;
            }
        }
        true
    }

    /// Forget every event of `pool` (`tarn pool events -c`), in the file too.
    pub fn clear(&self, pool: &str) {
        let mut inner = self.inner.lock();
        inner.ring.retain(|(_, e)| e.pool != pool);
        let Inner { ring, file, .. } = &mut *inner;
        if let Some(file) = file {
            file.rewrite(ring);
        }
    }
}

fn push_bounded(ring: &mut VecDeque<(u64, Event)>, seq: u64, event: Event) {
    if ring.len() >= RING_CAPACITY {
        ring.pop_front();
    }
    ring.push_back((seq, event));
}

/// The parsable records of `path`, renumbered where needed so sequence
/// numbers strictly increase; a missing file is empty.
fn load(path: &Path) -> Result<Vec<(u64, Event)>, String> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut f) => f.read_to_end(&mut bytes).map_err(|e| e.to_string())?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.to_string()),
    };
    let mut records = Vec::new();
    let mut last = 0u64;
    for line in bytes.split(|b| *b == b'\n') {
        let Ok(record) = serde_json::from_slice::<Record>(line) else { continue };
        // A hand-edited or damaged file may repeat or reorder numbers.
        last = if record.seq > last { record.seq } else { last + 1 };
        records.push((last, record.event));
    }
    // Keep only what the ring would hold.
    let skip = records.len().saturating_sub(RING_CAPACITY);
    records.drain(..skip);
    Ok(records)
}

impl LogFile {
    fn append(&mut self, seq: u64, event: &Event) {
        let Some(out) = &mut self.out else { return };
        let mut line = match serde_json::to_vec(&Record { seq, event: event.clone() }) {
            Ok(line) => line,
            Err(e) => return self.failed(&e.to_string()),
        };
        line.push(b'\n');
        // One write per line: with O_APPEND it lands whole or not at all
        // for lines of this size.
        match out.write_all(&line) {
            Ok(()) => {
                self.lines += 1;
                self.failing = false;
            }
            Err(e) => self.failed(&e.to_string()),
        }
    }

    /// Replace the file with `ring` (write a temporary file, then rename)
    /// and reopen it for appending.
    fn rewrite(&mut self, ring: &VecDeque<(u64, Event)>) {
        self.out = None;
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let result = (|| -> std::io::Result<()> {
            let mut text = Vec::new();
            for (seq, event) in ring {
                serde_json::to_writer(&mut text, &Record { seq: *seq, event: event.clone() })?;
                text.push(b'\n');
            }
            let mut f = File::create(&tmp)?;
            f.write_all(&text)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        })();
        match result {
            Ok(()) => self.lines = ring.len(),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                self.failed(&format!("cannot rewrite: {e}"));
            }
        }
        match OpenOptions::new().create(true).append(true).open(&self.path) {
            Ok(f) => self.out = Some(f),
            Err(e) => self.failed(&format!("cannot open for appending: {e}")),
        }
    }

    fn failed(&mut self, why: &str) {
        if !self.failing {
            eprintln!("tarn daemon: event log {}: {why}", self.path.display());
            self.failing = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(pool: &str, n: usize) -> Event {
        Event::new(pool, "statechange", Severity::Info, format!("event {n}"))
    }

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (leap day) 12:34:56.789
        assert_eq!(rfc3339_utc(951_827_696_789_000_000), "2000-02-29T12:34:56.789Z");
        assert_eq!(rfc3339_utc(1_795_835_459_123_456_789), "2026-11-28T03:10:59.123Z");
        let e = Event::new("tank", "test", Severity::Info, "a\nb\r\nc");
        assert_eq!(e.message, "a b c");
        assert_eq!(e.time, rfc3339_utc(e.time_ns));
        assert!(e.time.starts_with("20") && e.time.ends_with('Z'));
        let json = serde_json::to_value(e.with_vdev("/dev/sdb").with_state("FAULTED")).unwrap();
        assert_eq!(json["severity"], "info");
        assert_eq!(json["vdev"], "/dev/sdb");
        assert_eq!(json["state"], "FAULTED");
    }

    #[test]
    fn ring_is_bounded_and_since_filters() {
        let log = EventLog::open(None);
        for n in 0..RING_CAPACITY + 5 {
            let pool = if n % 2 == 0 { "tank" } else { "backup" };
            assert_eq!(log.post(ev(pool, n)), n as u64 + 1);
        }
        let all = log.since(0, None);
        assert_eq!(all.len(), RING_CAPACITY);
        assert_eq!(all[0].0, 6, "the 5 oldest were dropped");
        assert_eq!(all.last().map(|(s, _)| *s), Some(RING_CAPACITY as u64 + 5));
        let newest = log.since(RING_CAPACITY as u64 + 2, None);
        assert_eq!(newest.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [10_003, 10_004, 10_005]);
        let tank = log.since(RING_CAPACITY as u64 + 2, Some("tank"));
        let messages: Vec<_> = tank.iter().map(|(_, e)| e.message.as_str()).collect();
        assert_eq!(messages, ["event 10002", "event 10004"]);
        log.clear("tank");
        assert!(log.since(0, Some("tank")).is_empty());
        assert_eq!(log.since(0, None).len(), RING_CAPACITY / 2);
        assert_eq!(log.post(ev("tank", 0)), RING_CAPACITY as u64 + 6, "clear never reuses numbers");
    }

    #[test]
    fn reloads_from_file_skipping_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        {
            let log = EventLog::open(Some(path.clone()));
            log.post(ev("tank", 1));
            log.post(ev("tank", 2).with_vdev("/dev/sdb").with_state("FAULTED"));
        }
        // Garbage, an unknown shape, invalid UTF-8, and a torn last line.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"not json\n{\"seq\":9,\"what\":1}\n\xff\xfe\n\n{\"seq\":3,\"time\":\"x").unwrap();
        drop(f);
        let log = EventLog::open(Some(path.clone()));
        let events = log.since(0, None);
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].0, 2);
        assert_eq!(events[1].1.state.as_deref(), Some("FAULTED"));
        assert_eq!(log.post(ev("tank", 3)), 3, "numbering continues after a restart");
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3, "garbage was dropped at open: {text}");
        assert!(text.ends_with('\n'));
        let log = EventLog::open(Some(path.clone()));
        assert_eq!(log.since(0, None).len(), 3);
        log.clear("tank");
        drop(log);
        assert!(EventLog::open(Some(path)).since(0, None).is_empty(), "clear reaches the file");
    }

    #[test]
    fn file_is_compacted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let log = EventLog::open(Some(path.clone()));
        for n in 0..FILE_LINES_MAX + 1 {
            log.post(ev("tank", n));
        }
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert_eq!(lines, RING_CAPACITY, "rewritten to the ring past {FILE_LINES_MAX} lines");
        let log = EventLog::open(Some(path));
        assert_eq!(log.last_seq(), FILE_LINES_MAX as u64 + 1);
    }

    #[test]
    fn unreadable_path_is_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the file should be: cannot read, cannot write.
        let path = dir.path().join("events.jsonl");
        std::fs::create_dir(&path).unwrap();
        let log = EventLog::open(Some(path));
        assert_eq!(log.post(ev("tank", 1)), 1);
        assert_eq!(log.since(0, None).len(), 1);
    }

    #[test]
    fn wait_newer_wakes() {
        let log = std::sync::Arc::new(EventLog::open(None));
        assert!(!log.wait_newer(0, Duration::from_millis(20)));
        let poster = {
            let log = log.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                log.post(ev("tank", 1));
            })
        };
        let started = Instant::now();
        assert!(log.wait_newer(0, Duration::from_secs(20)));
        assert!(started.elapsed() < Duration::from_secs(10));
        poster.join().unwrap();
        assert!(log.wait_newer(0, Duration::ZERO), "already newer: no wait");
        assert!(!log.wait_newer(1, Duration::from_millis(10)));
    }
}
