//! `tarn pool trim` and `tarn pool checkpoint`, and their part of `pool
//! status`: a device's `(trimming)` note (with `-t`: `(12% trimmed,
//! started at ...)`, `(100% trimmed, completed at ...)`), and the
//! `checkpoint: created ..., consumes ...` line.

use std::path::Path;

use serde_json::{json, Value};
use tarn_daemon::proto::{PoolStatusData, Request, VdevStatus};
use tarn_ds::size::format_bytes;

use crate::cli::PoolCommand;
use crate::clock::{self, Zone};
use crate::commands::send;
use crate::devices::resolve_member;
use crate::Failure;

pub fn run(socket: &Path, command: PoolCommand) -> Result<i32, Failure> {
    match command {
        PoolCommand::Trim { cancel, suspend, rate, wait, pool, devices } => {
            let devices = devices.iter().map(|d| resolve_member(d)).collect();
            send(socket, &Request::PoolTrim { pool: pool.clone(), devices, rate: rate.unwrap_or(0), cancel, suspend })?;
            if wait {
                send(socket, &Request::PoolWait { pool, activities: vec!["trim".into()], timeout_secs: None })?;
            }
            Ok(0)
        }
        // A discard is complete when the request returns: -w has nothing
        // more to wait for.
        PoolCommand::Checkpoint { discard, wait: _, pool } => {
            send(socket, &Request::PoolCheckpoint { pool, discard })?;
            Ok(0)
        }
        other => unreachable!("not a trim or checkpoint command: {other:?}"),
    }
}

/// The trim note at the end of a device row.
pub fn note(pool: &PoolStatusData, vdev: &VdevStatus, detail: bool, zone: Zone) -> String {
    if !vdev.children.is_empty() || vdev.vdev_type == "root" || ["AVAIL", "INUSE"].contains(&vdev.state.as_str()) {
        return String::new();
    }
    let trim = pool.trims.iter().find(|t| t.guid == vdev.guid);
    let when = |t: u64| clock::ctime(t, zone);
    match (trim, detail) {
        (Some(t), false) if t.state == "active" => "  (trimming)".into(),
        (Some(t), true) if t.state == "active" => format!("  ({}% trimmed, started at {})", t.percent, when(t.action_time)),
        (Some(t), true) if t.state == "suspended" => format!("  ({}% trimmed, suspended since {})", t.percent, when(t.action_time)),
        (Some(t), true) if t.state == "complete" => format!("  (100% trimmed, completed at {})", when(t.action_time)),
        (_, true) => "  (untrimmed)".into(),
        _ => String::new(),
    }
}

/// The `checkpoint:` line of `pool status` (empty without a checkpoint).
pub fn checkpoint_text(pool: &PoolStatusData, zone: Zone) -> String {
    match &pool.checkpoint {
        Some(c) => format!("checkpoint: created {}, consumes {}\n", clock::ctime(c.created, zone), format_bytes(c.held_bytes)),
        None => String::new(),
    }
}

/// A leaf's trim in `pool status -j`.
pub fn vdev_json(pool: &PoolStatusData, vdev: &VdevStatus, object: &mut Value) {
    if !vdev.children.is_empty() {
        return;
    }
    if let Some(t) = pool.trims.iter().find(|t| t.guid == vdev.guid) {
        object["trim_state"] = json!(t.state.to_ascii_uppercase());
        object["trim_percent"] = json!(t.percent);
        object["trim_action_time"] = json!(t.action_time);
        object["trim_bytes_done"] = json!(t.bytes_done);
        object["trim_rate"] = json!(t.rate);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_daemon::proto::{CheckpointData, TrimStatusData};

    /// 2026-11-28 03:10:59 UTC, a Saturday.
    const WHEN: u64 = 1_795_835_459;

    fn leaf(name: &str, guid: u64) -> VdevStatus {
        VdevStatus {
            name: name.into(),
            vdev_type: "file".into(),
            guid,
            state: "ONLINE".into(),
            read_errors: 0,
            write_errors: 0,
            checksum_errors: 0,
            children: vec![],
            reason: None,
            resilvering: false,
        }
    }

    fn trim(guid: u64, state: &str, percent: u64) -> TrimStatusData {
        TrimStatusData { guid, path: String::new(), state: state.into(), percent, action_time: WHEN, bytes_done: 0, bytes_left: 0, rate: 0 }
    }

    fn pool() -> PoolStatusData {
        let leaves: Vec<VdevStatus> = (1..=5).map(|g| leaf(&format!("/d{g}"), g)).collect();
        PoolStatusData {
            name: "tank".into(),
            guid: 9,
            state: "ONLINE".into(),
            txg: 5,
            data_errors: 0,
            root: VdevStatus { name: "tank".into(), vdev_type: "root".into(), guid: 9, children: leaves, ..leaf("tank", 9) },
            scan: None,
            logs: vec![],
            cache: vec![],
            spares: vec![],
            error_files: vec![],
            suspended: None,
            trims: vec![trim(1, "active", 12), trim(2, "suspended", 40), trim(3, "complete", 100), trim(4, "canceled", 30)],
            checkpoint: Some(CheckpointData { txg: 7, created: WHEN, held_bytes: 1_415_577 }),
        }
    }

    #[test]
    fn trim_notes_as_zpool_prints_them() {
        let p = pool();
        let notes: Vec<String> = p.root.children.iter().map(|v| note(&p, v, false, Zone::Utc)).collect();
        assert_eq!(notes, vec!["  (trimming)", "", "", "", ""]);
        let notes: Vec<String> = p.root.children.iter().map(|v| note(&p, v, true, Zone::Utc)).collect();
        assert_eq!(
            notes,
            vec![
                "  (12% trimmed, started at Sat Nov 28 03:10:59 2026)",
                "  (40% trimmed, suspended since Sat Nov 28 03:10:59 2026)",
                "  (100% trimmed, completed at Sat Nov 28 03:10:59 2026)",
                "  (untrimmed)",
                "  (untrimmed)",
            ]
        );
        assert_eq!(note(&p, &p.root, true, Zone::Utc), "", "no note on the pool row");
    }

    #[test]
    fn checkpoint_line_and_status_text() {
        let p = pool();
        assert_eq!(checkpoint_text(&p, Zone::Utc), "checkpoint: created Sat Nov 28 03:10:59 2026, consumes 1.35M\n");
        let text = crate::status::status_text_with(std::slice::from_ref(&p), false, true, Zone::Utc);
        assert!(text.contains("\ncheckpoint: created Sat Nov 28 03:10:59 2026, consumes 1.35M\nconfig:"), "{text}");
        assert!(text.contains("  /d3  ONLINE      0     0     0  (100% trimmed, completed at Sat Nov 28 03:10:59 2026)"), "{text}");
        let plain = crate::status::status_text(std::slice::from_ref(&p), false, Zone::Utc);
        assert!(plain.contains("  /d1  ONLINE      0     0     0  (trimming)\n"), "{plain}");
        assert!(!plain.contains("trimmed"), "{plain}");
        let none = PoolStatusData { checkpoint: None, ..p };
        assert_eq!(checkpoint_text(&none, Zone::Utc), "");
    }
}
