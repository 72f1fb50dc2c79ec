//! `tarn pool status`: zpool's text layout (state, status/action advice,
//! scan progress, the device tree with its notes, spares, errors) and the
//! `-j` document (docs/cli-json.md).
//!
//! Everything here is a pure function of the daemon's [`PoolStatusData`]
//! and a time zone, so tests pin the exact text.

use serde_json::{json, Map, Value};
use tarn_daemon::proto::{PoolStatusData, ScanStatusData, VdevStatus};
use tarn_ds::size::format_bytes;

use crate::clock::{self, Zone};
use crate::output::output_version;

/// Text width zpool wraps its `status:` and `action:` paragraphs to.
const PARAGRAPH_WIDTH: usize = 80;

/// The pool's health word: SUSPENDED overrides the vdev tree's state.
fn health(pool: &PoolStatusData) -> &str {
    if pool.suspended.is_some() {
        "SUSPENDED"
    } else {
        &pool.state
    }
}

fn leaves<'a>(vdev: &'a VdevStatus, out: &mut Vec<&'a VdevStatus>) {
    if vdev.children.is_empty() {
        out.push(vdev);
    }
    for child in &vdev.children {
        leaves(child, out);
    }
}

/// What is wrong with the pool and what to do about it (zpool's `status:`
/// and `action:`), one sentence list each, unwrapped. None when healthy.
pub fn advice(pool: &PoolStatusData) -> Option<(String, String)> {
    let name = &pool.name;
    if let Some(why) = &pool.suspended {
        return Some((
            format!("The pool is suspended: {why}. I/O to the pool is stopped until its devices are back."),
            format!("Make sure the affected devices are connected, then run 'tarn pool clear {name}'."),
        ));
    }
    if pool.data_errors > 0 {
        return Some((
            "One or more devices has experienced an error resulting in data corruption. Applications may be affected."
                .into(),
            "Restore the file in question if possible. Otherwise restore the entire pool from backup.".into(),
        ));
    }
    if pool.scan.as_ref().is_some_and(|s| s.function == "resilver" && s.state == "scanning") {
        return Some((
            "One or more devices is currently being resilvered. The pool will continue to function, possibly in a degraded state."
                .into(),
            format!("Wait for the resilver to complete ('tarn pool wait -t resilver {name}')."),
        ));
    }
    let mut all = Vec::new();
    leaves(&pool.root, &mut all);
    let mut log_leaves = Vec::new();
    for log in &pool.logs {
        leaves(log, &mut log_leaves);
    }
    let bad_logs: Vec<&str> =
        log_leaves.iter().filter(|l| ["FAULTED", "UNAVAIL", "REMOVED"].contains(&l.state.as_str())).map(|l| l.name.as_str()).collect();
    if all.iter().all(|l| l.state == "ONLINE") && !bad_logs.is_empty() {
        let device = if bad_logs.len() == 1 { bad_logs[0] } else { "DEVICE" };
        return Some((
            format!(
                "One or more log devices cannot be used: {}. The intent log keeps working, on the rest of its mirror or on the main pool.",
                bad_logs.join(", ")
            ),
            format!(
                "Reattach the device and run 'tarn pool clear {name}', replace it with 'tarn pool replace {name} {device} NEW', or remove it with 'tarn pool remove {name} {device}'."
            ),
        ));
    }
    let replicas = if pool.state == "DEGRADED" {
        "Sufficient replicas exist for the pool to continue functioning in a degraded state."
    } else {
        "There are insufficient replicas for the pool to continue functioning."
    };
    for state in ["FAULTED", "UNAVAIL", "REMOVED", "OFFLINE"] {
        let hit: Vec<&str> = all.iter().filter(|l| l.state == state).map(|l| l.name.as_str()).collect();
        let Some(first) = hit.first() else { continue };
        let device = if hit.len() == 1 { *first } else { "DEVICE" };
        let list = hit.join(", ");
        let replace = format!("'tarn pool replace {name} {device} NEW'");
        let online = format!("'tarn pool online {name} {device}'");
        let (what, action) = match state {
            "FAULTED" => (
                format!("One or more devices are faulted in response to persistent errors: {list}."),
                format!(
                    "Replace the faulted device using {replace}, or use 'tarn pool clear {name} {device}' to mark it repaired."
                ),
            ),
            "UNAVAIL" => (
                format!("One or more devices could not be opened: {list}."),
                format!("Attach the missing device and bring it back using {online}, or replace it using {replace}."),
            ),
            "REMOVED" => (
                format!("One or more devices have been removed: {list}."),
                format!("Reconnect the device and bring it back using {online}, or replace it using {replace}."),
            ),
            _ => (
                format!("One or more devices have been taken offline by the administrator: {list}."),
                format!("Bring the device back using {online}, or replace it using {replace}."),
            ),
        };
        return Some((format!("{what} {replicas}"), action));
    }
    let errors = pool.root.read_errors + pool.root.write_errors + pool.root.checksum_errors;
    if errors > 0 {
        return Some((
            "One or more devices has experienced an unrecoverable error. An attempt was made to correct the error. Applications are unaffected."
                .into(),
            format!(
                "Determine if the device needs to be replaced, and clear the errors using 'tarn pool clear {name}' or replace the device using 'tarn pool replace'."
            ),
        ));
    }
    None
}

/// `label: text` wrapped at [`PARAGRAPH_WIDTH`], continuation lines
/// indented by a tab (eight columns, as wide as `status: `).
fn paragraph(label: &str, text: &str) -> String {
    let room = PARAGRAPH_WIDTH - 8;
    let mut lines: Vec<String> = vec![String::new()];
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("never empty");
        if line.is_empty() {
            line.push_str(word);
        } else if line.len() + 1 + word.len() <= room {
            line.push(' ');
            line.push_str(word);
        } else {
            lines.push(word.to_string());
        }
    }
    format!("{label:>6}: {}\n", lines.join("\n\t"))
}

fn to_go(scan: &ScanStatusData) -> String {
    match scan.eta_secs {
        Some(secs) => format!("{} to go", clock::hms(secs)),
        None => "no estimated completion time".into(),
    }
}

/// The `  scan:` lines.
pub fn scan_text(scan: &ScanStatusData, zone: Zone) -> String {
    let func = scan.function.as_str();
    let started = clock::ctime(scan.start_time, zone);
    let ended = clock::ctime(scan.end_time, zone);
    let took = clock::hms(scan.end_time.saturating_sub(scan.start_time));
    let resilver = func == "resilver";
    match scan.state.as_str() {
        "finished" if resilver => format!(
            "  scan: resilvered {} in {took} with {} errors on {ended}, {} read\n",
            format_bytes(scan.resilvered),
            scan.errors,
            format_bytes(scan.read_bytes)
        ),
        "finished" => format!(
            "  scan: {func} repaired {} in {took} with {} errors on {ended}\n",
            format_bytes(scan.repaired),
            scan.errors
        ),
        "canceled" => format!("  scan: {func} canceled on {ended}\n"),
        _ => {
            let mut out = if scan.paused {
                // The daemon does not record when the pause began; a later
                // one that does may put it in end_time.
                if scan.end_time > 0 {
                    format!("  scan: {func} paused since {ended}\n\t{func} started on {started}\n")
                } else {
                    format!("  scan: {func} paused\n\t{func} started on {started}\n")
                }
            } else {
                format!("  scan: {func} in progress since {started}\n")
            };
            let total = format_bytes(scan.to_examine);
            out.push_str(&format!(
                "\t{} / {total} scanned, {} / {total} issued",
                format_bytes(scan.examined),
                format_bytes(scan.issued)
            ));
            if !scan.paused {
                out.push_str(&format!(" at {}/s", format_bytes(scan.rate)));
            }
            out.push_str("\n\t");
            if resilver {
                out.push_str(&format!("{} resilvered, ", format_bytes(scan.resilvered)));
                if scan.repaired > 0 {
                    out.push_str(&format!("{} repaired, ", format_bytes(scan.repaired)));
                }
                out.push_str(&format!("{} read, ", format_bytes(scan.read_bytes)));
            } else {
                out.push_str(&format!("{} repaired, ", format_bytes(scan.repaired)));
            }
            out.push_str(&format!("{:.2}% done", scan.percent));
            if !scan.paused {
                out.push_str(&format!(", {}", to_go(scan)));
            }
            out.push('\n');
            out
        }
    }
}

/// The notes zpool puts at the end of a device row.
fn notes(vdev: &VdevStatus) -> String {
    let mut out = String::new();
    if vdev.state == "INUSE" {
        out.push_str("  currently in use");
    }
    if !["ONLINE", "AVAIL", "INUSE"].contains(&vdev.state.as_str()) {
        if let Some(reason) = &vdev.reason {
            out.push_str(&format!("  {reason}"));
        }
    }
    if vdev.resilvering {
        out.push_str("  (resilvering)");
    }
    out
}

fn config_text(pool: &PoolStatusData, trim_detail: bool, zone: Zone) -> String {
    let mut rows: Vec<(String, &VdevStatus)> = Vec::new();
    fn walk<'a>(vdev: &'a VdevStatus, depth: usize, rows: &mut Vec<(String, &'a VdevStatus)>) {
        rows.push((format!("{}{}", "  ".repeat(depth), vdev.name), vdev));
        for child in &vdev.children {
            walk(child, depth + 1, rows);
        }
    }
    walk(&pool.root, 0, &mut rows);
    let mut logs: Vec<(String, &VdevStatus)> = Vec::new();
    for log in &pool.logs {
        walk(log, 1, &mut logs);
    }
    let cache: Vec<(String, &VdevStatus)> = pool.cache.iter().map(|c| (format!("  {}", c.name), c)).collect();
    let spares: Vec<(String, &VdevStatus)> = pool.spares.iter().map(|s| (format!("  {}", s.name), s)).collect();
    let width = rows.iter().chain(&logs).chain(&cache).chain(&spares).map(|(n, _)| n.len()).max().unwrap_or(4).max(4) + 2;
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(format!("\t{:<width$}{:<8}{:>5} {:>5} {:>5}", "NAME", "STATE", "READ", "WRITE", "CKSUM"));
    let logs_from = rows.len();
    let with_logs: Vec<(String, &VdevStatus)> = rows.into_iter().chain(logs).collect();
    let row = |name: &str, vdev: &VdevStatus, extra: String| {
        format!(
            "\t{name:<width$}{:<8}{:>5} {:>5} {:>5}{}",
            vdev.state, vdev.read_errors, vdev.write_errors, vdev.checksum_errors, extra
        )
    };
    for (i, (name, vdev)) in with_logs.into_iter().enumerate() {
        if i == logs_from {
            line("\tlogs".into());
        }
        line(row(&name, vdev, notes(vdev) + &crate::trim::note(pool, vdev, trim_detail, zone)));
    }
    // Cache devices after the logs and before the spares, as zpool shows them.
    if !cache.is_empty() {
        line("\tcache".into());
        for (name, vdev) in cache {
            line(row(&name, vdev, notes(vdev)));
        }
    }
    if !spares.is_empty() {
        line("\tspares".into());
        for (name, vdev) in spares {
            line(format!("\t{name:<width$}{:<8}{}", vdev.state, notes(vdev)));
        }
    }
    out
}

fn errors_text(pool: &PoolStatusData, verbose: bool) -> String {
    if pool.data_errors == 0 {
        return "errors: No known data errors\n".into();
    }
    if !verbose {
        return format!("errors: {} data errors, use '-v' for a list\n", pool.data_errors);
    }
    if pool.error_files.is_empty() {
        return format!("errors: {} data errors (blocks unreadable from every copy)\n", pool.data_errors);
    }
    let mut out = String::from("errors: Permanent errors have been detected in the following files:\n\n");
    for file in &pool.error_files {
        out.push_str(&format!("        {file}\n"));
    }
    out
}

/// `tarn pool status` text (zpool layout).
pub fn status_text(pools: &[PoolStatusData], verbose: bool, zone: Zone) -> String {
    status_text_with(pools, verbose, false, zone)
}

/// `tarn pool status [-t]` text: with `trim_detail`, each device's trim
/// progress and when it last changed, as `zpool status -t` shows it.
pub fn status_text_with(pools: &[PoolStatusData], verbose: bool, trim_detail: bool, zone: Zone) -> String {
    let mut out = String::new();
    for (index, pool) in pools.iter().enumerate() {
        if index > 0 {
            out.push('\n');
        }
        out.push_str(&format!("  pool: {}\n state: {}\n", pool.name, health(pool)));
        if let Some((status, action)) = advice(pool) {
            out.push_str(&paragraph("status", &status));
            out.push_str(&paragraph("action", &action));
        }
        if let Some(scan) = &pool.scan {
            out.push_str(&scan_text(scan, zone));
        }
        out.push_str(&crate::trim::checkpoint_text(pool, zone));
        out.push_str("config:\n\n");
        out.push_str(&config_text(pool, trim_detail, zone));
        out.push('\n');
        out.push_str(&errors_text(pool, verbose));
    }
    out
}

fn vdev_json(vdev: &VdevStatus, pool: &PoolStatusData) -> Value {
    let mut object = json!({
        "name": vdev.name,
        "vdev_type": vdev.vdev_type,
        "guid": vdev.guid,
        "state": vdev.state,
        "read_errors": vdev.read_errors,
        "write_errors": vdev.write_errors,
        "checksum_errors": vdev.checksum_errors,
    });
    if let Some(reason) = &vdev.reason {
        object["reason"] = json!(reason);
    }
    if vdev.resilvering {
        object["resilvering"] = json!(true);
    }
    if !vdev.children.is_empty() {
        let mut children = Map::new();
        for child in &vdev.children {
            children.insert(child.name.clone(), vdev_json(child, pool));
        }
        object["vdevs"] = Value::Object(children);
    }
    crate::trim::vdev_json(pool, vdev, &mut object);
    object
}

/// `scan_stats`: OpenZFS 2.3's names where it has the number
/// (`processed` is bytes repaired), then tarn's own.
fn scan_json(scan: &ScanStatusData) -> Value {
    json!({
        "function": scan.function,
        "state": scan.state,
        "start_time": scan.start_time,
        "end_time": scan.end_time,
        "to_examine": scan.to_examine,
        "examined": scan.examined,
        "issued": scan.issued,
        "processed": scan.repaired,
        "errors": scan.errors,
        "paused": scan.paused,
        "resilvered": scan.resilvered,
        "read_bytes": scan.read_bytes,
        "rate": scan.rate,
        "percent": scan.percent,
        "eta_secs": scan.eta_secs,
    })
}

/// `tarn pool status -j`.
pub fn status_json(pools: &[PoolStatusData]) -> Value {
    let mut map = Map::new();
    for pool in pools {
        let mut vdevs = Map::new();
        vdevs.insert(pool.root.name.clone(), vdev_json(&pool.root, pool));
        let mut spares = Map::new();
        for spare in &pool.spares {
            spares.insert(spare.name.clone(), vdev_json(spare, pool));
        }
        let mut logs = Map::new();
        for log in &pool.logs {
            logs.insert(log.name.clone(), vdev_json(log, pool));
        }
        let mut l2cache = Map::new();
        for c in &pool.cache {
            l2cache.insert(c.name.clone(), vdev_json(c, pool));
        }
        let mut object = json!({
            "name": pool.name,
            "state": health(pool),
            "pool_guid": pool.guid,
            "txg": pool.txg,
            "error_count": pool.data_errors,
            "vdevs": vdevs,
            "logs": logs,
            "l2cache": l2cache,
            "spares": spares,
            "error_files": pool.error_files,
        });
        if let Some((status, action)) = advice(pool) {
            object["status"] = json!(status);
            object["action"] = json!(action);
        }
        if let Some(why) = &pool.suspended {
            object["suspended"] = json!(why);
        }
        if let Some(scan) = &pool.scan {
            object["scan_stats"] = scan_json(scan);
        }
        if let Some(c) = &pool.checkpoint {
            object["checkpoint_stats"] = json!({"state": "exists", "start_time": c.created, "space": c.held_bytes, "txg": c.txg});
        }
        map.insert(pool.name.clone(), object);
    }
    json!({"output_version": output_version("zpool status"), "pools": map})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-28 03:10:59 UTC, a Saturday.
    const START: u64 = 1_795_835_459;

    fn leaf(name: &str, state: &str) -> VdevStatus {
        VdevStatus {
            name: name.into(),
            vdev_type: "file".into(),
            guid: 1,
            state: state.into(),
            read_errors: 0,
            write_errors: 0,
            checksum_errors: 0,
            children: vec![],
            reason: None,
            resilvering: false,
        }
    }

    fn group(name: &str, vdev_type: &str, state: &str, children: Vec<VdevStatus>) -> VdevStatus {
        VdevStatus { vdev_type: vdev_type.into(), children, ..leaf(name, state) }
    }

    fn pool(state: &str, tops: Vec<VdevStatus>) -> PoolStatusData {
        PoolStatusData {
            name: "tank".into(),
            guid: 9,
            state: state.into(),
            txg: 5,
            data_errors: 0,
            root: group("tank", "root", state, tops),
            scan: None,
            logs: vec![],
            cache: vec![],
            spares: vec![],
            error_files: vec![],
            suspended: None,
            trims: vec![],
            checkpoint: None,
        }
    }

    fn scan(function: &str, state: &str) -> ScanStatusData {
        ScanStatusData {
            function: function.into(),
            state: state.into(),
            paused: false,
            start_time: START,
            end_time: 0,
            to_examine: 4 << 30,
            examined: 3 << 29,
            issued: 1 << 30,
            read_bytes: 2 << 30,
            repaired: 0,
            resilvered: 512 << 20,
            errors: 0,
            rate: 100 << 20,
            eta_secs: Some(30),
            percent: 25.0,
        }
    }

    fn mirror(children: Vec<VdevStatus>, state: &str) -> VdevStatus {
        group("mirror-0", "mirror", state, children)
    }

    /// A mirror whose /srv/d1 faulted and is being replaced by /srv/d9,
    /// with one spare standing by.
    fn degraded_resilvering() -> PoolStatusData {
        let mut old = leaf("/srv/d1", "FAULTED");
        old.reason = Some("too many I/O errors".into());
        old.read_errors = 12;
        let mut new = leaf("/srv/d9", "ONLINE");
        new.resilvering = true;
        let replacing = group("replacing-0", "replacing", "DEGRADED", vec![old, new]);
        let mut p = pool("DEGRADED", vec![mirror(vec![replacing, leaf("/srv/d2", "ONLINE")], "DEGRADED")]);
        p.scan = Some(scan("resilver", "scanning"));
        p.spares = vec![leaf("/srv/d8", "AVAIL")];
        p
    }

    #[test]
    fn degraded_resilvering_pool() {
        let text = status_text(&[degraded_resilvering()], false, Zone::Utc);
        let expected = "  pool: tank
 state: DEGRADED
status: One or more devices is currently being resilvered. The pool will
\tcontinue to function, possibly in a degraded state.
action: Wait for the resilver to complete ('tarn pool wait -t resilver tank').
  scan: resilver in progress since Sat Nov 28 03:10:59 2026
\t1.50G / 4G scanned, 1G / 4G issued at 100M/s
\t512M resilvered, 2G read, 25.00% done, 00:00:30 to go
config:

\tNAME             STATE    READ WRITE CKSUM
\ttank             DEGRADED    0     0     0
\t  mirror-0       DEGRADED    0     0     0
\t    replacing-0  DEGRADED    0     0     0
\t      /srv/d1    FAULTED    12     0     0  too many I/O errors
\t      /srv/d9    ONLINE      0     0     0  (resilvering)
\t    /srv/d2      ONLINE      0     0     0
\tspares
\t  /srv/d8        AVAIL

errors: No known data errors
";
        assert_eq!(text, expected, "\n{text}");
    }

    #[test]
    fn scan_line_in_each_phase() {
        let z = Zone::Utc;
        assert_eq!(
            scan_text(&scan("scrub", "scanning"), z),
            "  scan: scrub in progress since Sat Nov 28 03:10:59 2026\n\
             \t1.50G / 4G scanned, 1G / 4G issued at 100M/s\n\
             \t0B repaired, 25.00% done, 00:00:30 to go\n"
        );
        let mut unknown = scan("scrub", "scanning");
        unknown.eta_secs = None;
        unknown.repaired = 4096;
        assert!(scan_text(&unknown, z).ends_with("\t4K repaired, 25.00% done, no estimated completion time\n"));

        let mut paused = scan("scrub", "scanning");
        paused.paused = true;
        assert_eq!(
            scan_text(&paused, z),
            "  scan: scrub paused\n\
             \tscrub started on Sat Nov 28 03:10:59 2026\n\
             \t1.50G / 4G scanned, 1G / 4G issued\n\
             \t0B repaired, 25.00% done\n"
        );
        paused.end_time = START + 60;
        assert!(scan_text(&paused, z).starts_with("  scan: scrub paused since Sat Nov 28 03:11:59 2026\n"));

        let mut done = scan("scrub", "finished");
        done.end_time = START + 3723;
        done.repaired = 1 << 20;
        done.errors = 2;
        assert_eq!(scan_text(&done, z), "  scan: scrub repaired 1M in 01:02:03 with 2 errors on Sat Nov 28 04:13:02 2026\n");

        let mut resilvered = scan("resilver", "finished");
        resilvered.end_time = START + 2 * 86_400 + 5;
        assert_eq!(
            scan_text(&resilvered, z),
            "  scan: resilvered 512M in 2 days 00:00:05 with 0 errors on Mon Nov 30 03:11:04 2026, 2G read\n"
        );

        let mut canceled = scan("scrub", "canceled");
        canceled.end_time = START + 10;
        assert_eq!(scan_text(&canceled, z), "  scan: scrub canceled on Sat Nov 28 03:11:09 2026\n");

        let mut repairing = scan("resilver", "scanning");
        repairing.repaired = 8192;
        assert!(scan_text(&repairing, z).contains("\t512M resilvered, 8K repaired, 2G read, 25.00% done"));
    }

    #[test]
    fn spare_in_use_nests_and_is_listed() {
        let mut failed = leaf("/srv/d1", "UNAVAIL");
        failed.reason = Some("cannot open".into());
        let mut spare = leaf("/srv/d8", "ONLINE");
        spare.resilvering = true;
        let spare_group = group("spare-0", "spare", "DEGRADED", vec![failed, spare]);
        let mut p = pool("DEGRADED", vec![group("raidz1-0", "raidz", "DEGRADED", vec![spare_group, leaf("/srv/d2", "ONLINE"), leaf("/srv/d3", "ONLINE")])]);
        p.spares = vec![leaf("/srv/d8", "INUSE"), leaf("/srv/d7", "AVAIL")];
        let text = status_text(&[p], false, Zone::Utc);
        assert!(text.contains("status: One or more devices could not be opened: /srv/d1. Sufficient replicas\n\texist"), "{text}");
        assert!(text.contains("action: Attach the missing device and bring it back using 'tarn pool online tank\n\t/srv/d1', or replace it using 'tarn pool replace tank /srv/d1 NEW'.\n"), "{text}");
        let config = &text[text.find("config:").unwrap()..];
        let expected = "config:

\tNAME           STATE    READ WRITE CKSUM
\ttank           DEGRADED    0     0     0
\t  raidz1-0     DEGRADED    0     0     0
\t    spare-0    DEGRADED    0     0     0
\t      /srv/d1  UNAVAIL     0     0     0  cannot open
\t      /srv/d8  ONLINE      0     0     0  (resilvering)
\t    /srv/d2    ONLINE      0     0     0
\t    /srv/d3    ONLINE      0     0     0
\tspares
\t  /srv/d8      INUSE     currently in use
\t  /srv/d7      AVAIL

errors: No known data errors
";
        assert_eq!(config, expected, "\n{config}");
    }

    #[test]
    fn device_problems_advise_the_right_command() {
        for (state, status, action) in [
            ("FAULTED", "faulted in response to persistent errors: /d1.", "'tarn pool clear tank /d1'"),
            ("REMOVED", "have been removed: /d1.", "'tarn pool online tank /d1'"),
            ("OFFLINE", "taken offline by the administrator: /d1.", "'tarn pool online tank /d1'"),
        ] {
            let p = pool("DEGRADED", vec![mirror(vec![leaf("/d1", state), leaf("/d2", "ONLINE")], "DEGRADED")]);
            let (s, a) = advice(&p).unwrap();
            assert!(s.contains(status) && s.ends_with("in a degraded state."), "{state}: {s}");
            assert!(a.contains(action) && a.contains("'tarn pool replace tank /d1 NEW'"), "{state}: {a}");
        }
        let p = pool("UNAVAIL", vec![mirror(vec![leaf("/d1", "FAULTED"), leaf("/d2", "FAULTED")], "UNAVAIL")]);
        let (s, a) = advice(&p).unwrap();
        assert!(s.contains("/d1, /d2.") && s.contains("insufficient replicas"), "{s}");
        assert!(a.contains("'tarn pool replace tank DEVICE NEW'"), "{a}");
        assert_eq!(advice(&pool("ONLINE", vec![leaf("/d1", "ONLINE")])), None);
        let mut counted = pool("ONLINE", vec![leaf("/d1", "ONLINE")]);
        counted.root.checksum_errors = 3;
        assert!(advice(&counted).unwrap().0.contains("Applications are unaffected"));
    }

    #[test]
    fn errors_section_with_and_without_verbose() {
        let mut p = pool("ONLINE", vec![leaf("/d1", "ONLINE")]);
        p.data_errors = 2;
        let text = status_text(std::slice::from_ref(&p), false, Zone::Utc);
        assert!(text.ends_with("\nerrors: 2 data errors, use '-v' for a list\n"), "{text}");
        assert!(text.contains("status: One or more devices has experienced an error resulting in data\n\tcorruption."), "{text}");
        p.error_files = vec!["/mnt/tank/a.bin".into(), "tank/media:<0x1f>".into()];
        let text = status_text(std::slice::from_ref(&p), true, Zone::Utc);
        assert!(
            text.ends_with(
                "\nerrors: Permanent errors have been detected in the following files:\n\n        /mnt/tank/a.bin\n        tank/media:<0x1f>\n"
            ),
            "{text}"
        );
        p.error_files.clear();
        let text = status_text(&[p], true, Zone::Utc);
        assert!(text.ends_with("\nerrors: 2 data errors (blocks unreadable from every copy)\n"), "{text}");
    }

    #[test]
    fn suspended_pool_says_so_and_how_to_resume() {
        let mut p = pool("DEGRADED", vec![leaf("/d1", "REMOVED"), leaf("/d2", "ONLINE")]);
        p.suspended = Some("too many devices are missing to write txg 42".into());
        let text = status_text(std::slice::from_ref(&p), false, Zone::Utc);
        let head = "  pool: tank
 state: SUSPENDED
status: The pool is suspended: too many devices are missing to write txg 42. I/O
\tto the pool is stopped until its devices are back.
action: Make sure the affected devices are connected, then run 'tarn pool clear
\ttank'.
config:
";
        assert!(text.starts_with(head), "\n{text}");
        let value = status_json(&[p]);
        let tank = &value["pools"]["tank"];
        assert_eq!(tank["state"], "SUSPENDED");
        assert_eq!(tank["suspended"], "too many devices are missing to write txg 42");
        assert!(tank["action"].as_str().unwrap().contains("tarn pool clear tank"));
    }

    #[test]
    fn paragraphs_wrap_at_80_columns() {
        let text = paragraph("status", &"word ".repeat(40));
        for line in text.lines() {
            let width = line.strip_prefix('\t').map_or(line.len(), |rest| 8 + rest.len());
            assert!(width <= PARAGRAPH_WIDTH, "{line:?}");
        }
        assert_eq!(text.split_whitespace().filter(|w| *w == "word").count(), 40);
        assert_eq!(paragraph("action", "Wait."), "action: Wait.\n");
    }

    #[test]
    fn status_json_has_numeric_counters_scan_and_spares() {
        let mut top = group("raidz1-0", "raidz", "ONLINE", vec![leaf("/d1", "ONLINE"), leaf("/d2", "ONLINE")]);
        top.children[0].checksum_errors = 3;
        let mut p = pool("ONLINE", vec![top]);
        let value = status_json(std::slice::from_ref(&p));
        let tank = &value["pools"]["tank"];
        let d1 = &tank["vdevs"]["tank"]["vdevs"]["raidz1-0"]["vdevs"]["/d1"];
        assert_eq!(d1["checksum_errors"], 3);
        assert_eq!(d1["state"], "ONLINE");
        assert!(d1.get("reason").is_none() && d1.get("resilvering").is_none());
        assert!(tank.get("scan_stats").is_none() && tank.get("status").is_none());
        assert_eq!(tank["spares"], json!({}));
        assert_eq!(tank["error_files"], json!([]));
        let text = status_text(&[p], false, Zone::Utc);
        assert!(text.contains("    /d1"), "{text}");

        p = degraded_resilvering();
        p.error_files = vec!["/mnt/tank/x".into()];
        let value = status_json(&[p]);
        let tank = &value["pools"]["tank"];
        let scan = &tank["scan_stats"];
        assert_eq!(scan["function"], "resilver");
        assert_eq!(scan["state"], "scanning");
        assert_eq!(scan["start_time"], START);
        assert_eq!(scan["to_examine"], 4u64 << 30);
        assert_eq!(scan["processed"], 0);
        assert_eq!(scan["resilvered"], 512u64 << 20);
        assert_eq!(scan["read_bytes"], 2u64 << 30);
        assert_eq!(scan["rate"], 100u64 << 20);
        assert_eq!(scan["percent"], 25.0);
        assert_eq!(scan["eta_secs"], 30);
        assert_eq!(scan["paused"], false);
        assert_eq!(tank["spares"]["/srv/d8"]["state"], "AVAIL");
        assert_eq!(tank["error_files"], json!(["/mnt/tank/x"]));
        let replacing = &tank["vdevs"]["tank"]["vdevs"]["mirror-0"]["vdevs"]["replacing-0"];
        assert_eq!(replacing["vdev_type"], "replacing");
        assert_eq!(replacing["vdevs"]["/srv/d1"]["reason"], "too many I/O errors");
        assert_eq!(replacing["vdevs"]["/srv/d9"]["resilvering"], true);
        assert!(tank["status"].as_str().unwrap().contains("resilvered"));
    }
}
