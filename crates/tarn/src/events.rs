//! `tarn pool events` (zpool events) and `tarn alert test`.
//!
//! Text rows have fixed column widths so `-f` can print each event as it
//! arrives under a header printed once:
//!
//! ```text
//! TIME                      CLASS            SEVERITY  POOL      MESSAGE
//! Nov 28 2026 03:10:59.123  statechange      error     tank      device /srv/d1 is FAULTED: too many I/O errors
//! ```
//!
//! `-H` gives tab-separated fields without a header: the RFC 3339 UTC time,
//! class, severity, pool, device, state (`-` when absent) and message.
//! `-j` gives one document; with `-f`, one JSON object per line.

use std::io::Write;
use std::path::Path;

use serde_json::{json, Value};
use tarn_daemon::proto::{AlertTestRow, EventRow, Request};

use crate::clock::{self, Zone};
use crate::commands::{data, print_json, send};
use crate::output::output_version;
use crate::Failure;

/// How long one `-f` request waits for a new event (the daemon caps it).
const FOLLOW_WAIT_SECS: u64 = 30;

const CLASS_WIDTH: usize = 15;
const SEVERITY_WIDTH: usize = 8;
const POOL_WIDTH: usize = 8;

pub fn header() -> String {
    format!(
        "{:<24}  {:<CLASS_WIDTH$}  {:<SEVERITY_WIDTH$}  {:<POOL_WIDTH$}  MESSAGE",
        "TIME", "CLASS", "SEVERITY", "POOL"
    )
}

/// One event as a text row (no newline).
pub fn line(row: &EventRow, scripted: bool, zone: Zone) -> String {
    let e = &row.event;
    if scripted {
        let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        return [e.time.clone(), e.class.clone(), e.severity.to_string(), e.pool.clone(), dash(&e.vdev), dash(&e.state), e.message.clone()]
            .join("\t");
    }
    // The message usually names the device and state already; say them
    // only when it does not.
    let mut extra = Vec::new();
    if let Some(vdev) = e.vdev.as_ref().filter(|v| !e.message.contains(v.as_str())) {
        extra.push(format!("device {vdev}"));
    }
    if let Some(state) = e.state.as_ref().filter(|s| !e.message.contains(s.as_str())) {
        extra.push(format!("state {state}"));
    }
    let extra = if extra.is_empty() { String::new() } else { format!(" ({})", extra.join(", ")) };
    let text = format!(
        "{}  {:<CLASS_WIDTH$}  {:<SEVERITY_WIDTH$}  {:<POOL_WIDTH$}  {}{extra}",
        clock::event_time(e.time_ns, zone),
        e.class,
        e.severity.as_str(),
        e.pool,
        e.message
    );
    text.trim_end().to_string()
}

/// `pool events -j` without `-f`.
pub fn events_json(rows: &[EventRow]) -> Value {
    json!({"output_version": output_version("zpool events"), "events": rows})
}

/// `alert test`: `email: ok`, `webhook: failed: <error>`.
pub fn alert_lines(rows: &[AlertTestRow]) -> String {
    let mut out = String::new();
    for row in rows {
        if row.ok {
            out.push_str(&format!("{}: ok\n", row.channel));
        } else {
            out.push_str(&format!("{}: failed: {}\n", row.channel, row.error.as_deref().unwrap_or("unknown error")));
        }
    }
    out
}

/// `alert test -j`.
pub fn alert_json(rows: &[AlertTestRow]) -> Value {
    json!({"output_version": output_version("alert test"), "channels": rows})
}

pub struct EventsOptions {
    pub follow: bool,
    pub json: bool,
    pub scripted: bool,
    pub clear: bool,
    pub pool: Option<String>,
}

fn request(pool: &Option<String>, after: u64, wait_secs: u64) -> Request {
    Request::PoolEvents { pool: pool.clone(), after, wait_secs, clear: false }
}

/// `pool events`. With `-f` it returns only when stdout is closed (exit 1,
/// quietly, as a process killed by SIGPIPE would be) or the daemon is gone.
pub fn run(socket: &Path, options: EventsOptions) -> Result<i32, Failure> {
    let EventsOptions { follow, json, scripted, clear, pool } = options;
    if clear {
        send(socket, &Request::PoolEvents { pool, after: 0, wait_secs: 0, clear: true })?;
        return Ok(0);
    }
    let mut rows: Vec<EventRow> = data(send(socket, &request(&pool, 0, 0))?)?;
    if !follow {
        if json {
            print_json(&events_json(&rows));
        } else {
            let mut out = String::new();
            if !scripted {
                out.push_str(&header());
                out.push('\n');
            }
            for row in &rows {
                out.push_str(&line(row, scripted, Zone::Local));
                out.push('\n');
            }
            print!("{out}");
        }
        return Ok(0);
    }
    let mut stdout = std::io::stdout();
    let mut after = 0;
    let mut text = if json || scripted { String::new() } else { header() + "\n" };
    loop {
        for row in &rows {
            if json {
                text.push_str(&serde_json::to_string(row).map_err(|e| e.to_string())?);
            } else {
                text.push_str(&line(row, scripted, Zone::Local));
            }
            text.push('\n');
            after = after.max(row.seq);
        }
        let written = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush());
        match written {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(1),
            Err(e) => return Err(Failure::from(format!("cannot write events: {e}"))),
        }
        text.clear();
        rows = data(send(socket, &request(&pool, after, FOLLOW_WAIT_SECS))?)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_daemon::events::{rfc3339_utc, Event, Severity};

    /// 2026-11-28 03:10:59.123 UTC.
    const TIME_NS: u64 = 1_795_835_459_123_456_789;

    fn row(seq: u64, class: &str, severity: Severity, message: &str) -> EventRow {
        EventRow {
            seq,
            event: Event {
                time: rfc3339_utc(TIME_NS),
                time_ns: TIME_NS,
                pool: "tank".into(),
                class: class.into(),
                severity,
                vdev: None,
                state: None,
                message: message.into(),
            },
        }
    }

    #[test]
    fn text_rows_line_up_under_the_header() {
        let mut faulted = row(7, "statechange", Severity::Error, "device /srv/d1 is FAULTED: too many I/O errors");
        faulted.event.vdev = Some("/srv/d1".into());
        faulted.event.state = Some("FAULTED".into());
        let mut spare = row(8, "spare_activated", Severity::Warning, "hot spare /srv/d8 is replacing a failed device");
        spare.event.vdev = Some("/srv/d1".into());
        let capacity = row(9, "capacity", Severity::Warning, "pool is 85% full (warning at 80%)");
        let lines = [header(), line(&faulted, false, Zone::Utc), line(&spare, false, Zone::Utc), line(&capacity, false, Zone::Utc)];
        assert_eq!(
            lines.join("\n"),
            "TIME                      CLASS            SEVERITY  POOL      MESSAGE
Nov 28 2026 03:10:59.123  statechange      error     tank      device /srv/d1 is FAULTED: too many I/O errors
Nov 28 2026 03:10:59.123  spare_activated  warning   tank      hot spare /srv/d8 is replacing a failed device (device /srv/d1)
Nov 28 2026 03:10:59.123  capacity         warning   tank      pool is 85% full (warning at 80%)"
        );
        let column = lines[0].find("MESSAGE").unwrap();
        assert!(lines[1..].iter().all(|l| l[column - 2..].starts_with("  ") && !l[column..].starts_with(' ')));
    }

    #[test]
    fn scripted_rows_have_every_field() {
        let mut faulted = row(7, "statechange", Severity::Error, "device /srv/d1 is FAULTED");
        faulted.event.vdev = Some("/srv/d1".into());
        faulted.event.state = Some("FAULTED".into());
        assert_eq!(
            line(&faulted, true, Zone::Utc),
            "2026-11-28T03:10:59.123Z\tstatechange\terror\ttank\t/srv/d1\tFAULTED\tdevice /srv/d1 is FAULTED"
        );
        assert_eq!(
            line(&row(1, "scrub_start", Severity::Info, "scrub started"), true, Zone::Utc),
            "2026-11-28T03:10:59.123Z\tscrub_start\tinfo\ttank\t-\t-\tscrub started"
        );
    }

    #[test]
    fn json_document_and_lines() {
        let rows = [row(3, "scrub_finish", Severity::Info, "scrub finished")];
        let value = events_json(&rows);
        assert_eq!(value["output_version"]["command"], "zpool events");
        let event = &value["events"][0];
        assert_eq!(event["seq"], 3);
        assert_eq!(event["class"], "scrub_finish");
        assert_eq!(event["severity"], "info");
        assert_eq!(event["time"], "2026-11-28T03:10:59.123Z");
        assert_eq!(event["time_ns"], TIME_NS);
        assert!(event["vdev"].is_null());
        let back: EventRow = serde_json::from_str(&serde_json::to_string(&rows[0]).unwrap()).unwrap();
        assert_eq!(back, rows[0]);
    }

    #[test]
    fn alert_test_lines() {
        let rows = [
            AlertTestRow { channel: "email".into(), ok: true, error: None },
            AlertTestRow { channel: "webhook".into(), ok: false, error: Some("connection refused".into()) },
        ];
        assert_eq!(alert_lines(&rows), "email: ok\nwebhook: failed: connection refused\n");
        let value = alert_json(&rows);
        assert_eq!(value["channels"][1], json!({"channel": "webhook", "ok": false, "error": "connection refused"}));
    }
}
