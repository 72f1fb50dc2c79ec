//! `tarn pool history [-i] [-l] [POOL...]` (`zpool history`): the commands
//! that changed each pool, oldest first, as the daemon recorded them in the
//! pool; `-i` adds the internal events (what was applied, in which txg),
//! `-l` who ran each command, on which host.

use std::path::Path;

use tarn_daemon::proto::{PoolHistoryData, Request};
use tarn_ds::history::HistoryRecord;

use crate::clock::{history_time, Zone};
use crate::commands::{data, send};
use crate::Failure;

/// One record as zpool prints it (without the newline), or None when it is
/// an internal event and `internal` is off.
pub fn record_line(r: &HistoryRecord, internal: bool, long: bool, zone: Zone) -> Option<String> {
    let time = history_time(r.time, zone);
    let mut line = if let Some(command) = &r.command {
        format!("{time} {command}")
    } else {
        if !internal {
            return None;
        }
        let mut text = format!("{time} [txg:{}] {}", r.txg.unwrap_or(0), r.event.as_deref().unwrap_or("?"));
        if let Some(dataset) = &r.dataset {
            text.push_str(&format!(" {dataset} ({})", r.dsid.unwrap_or(0)));
        }
        text.push(' ');
        text.push_str(r.detail.as_deref().unwrap_or(""));
        text
    };
    if long {
        line.push_str(" [");
        if let Some(who) = r.who {
            line.push_str(&format!("user {who} "));
            if let Some(user) = &r.user {
                line.push_str(&format!("({user}) "));
            }
        }
        if let Some(host) = &r.host {
            line.push_str(&format!("on {host}"));
        }
        if let Some(zone) = &r.zone {
            line.push_str(&format!(":{zone}"));
        }
        line.push(']');
    }
    Some(line)
}

pub fn history_text(pools: &[PoolHistoryData], internal: bool, long: bool, zone: Zone) -> String {
    let mut out = String::new();
    for pool in pools {
        out.push_str(&format!("History for '{}':\n", pool.name));
        for record in &pool.records {
            if let Some(line) = record_line(record, internal, long, zone) {
                out.push_str(&line);
                out.push('\n');
            }
        }
        out.push('\n');
    }
    out
}

pub fn run(socket: &Path, pools: Vec<String>, internal: bool, long: bool) -> Result<i32, Failure> {
    let found: Vec<PoolHistoryData> = data(send(socket, &Request::PoolHistory { pools })?)?;
    if found.is_empty() {
        println!("no pools available");
        return Ok(0);
    }
    print!("{}", history_text(&found, internal, long, Zone::Local));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_as_zpool_prints_them() {
        let command = HistoryRecord {
            time: 1_795_835_459,
            command: Some("tarn snapshot tank@a".into()),
            who: Some(0),
            user: Some("root".into()),
            host: Some("nas".into()),
            zone: Some("linux".into()),
            ..Default::default()
        };
        let internal = HistoryRecord {
            time: 1_795_835_459,
            txg: Some(42),
            event: Some("snapshot".into()),
            dataset: Some("tank@a".into()),
            dsid: Some(9),
            detail: Some(String::new()),
            host: Some("nas".into()),
            ..Default::default()
        };
        let z = Zone::Utc;
        assert_eq!(record_line(&command, false, false, z).unwrap(), "2026-11-28.03:10:59 tarn snapshot tank@a");
        assert_eq!(
            record_line(&command, false, true, z).unwrap(),
            "2026-11-28.03:10:59 tarn snapshot tank@a [user 0 (root) on nas:linux]"
        );
        assert_eq!(record_line(&internal, false, false, z), None);
        assert_eq!(record_line(&internal, true, false, z).unwrap(), "2026-11-28.03:10:59 [txg:42] snapshot tank@a (9) ");
        assert_eq!(record_line(&internal, true, true, z).unwrap(), "2026-11-28.03:10:59 [txg:42] snapshot tank@a (9)  [on nas]");
        let text = history_text(&[PoolHistoryData { name: "tank".into(), records: vec![command], dropped: 0 }], false, false, z);
        assert_eq!(text, "History for 'tank':\n2026-11-28.03:10:59 tarn snapshot tank@a\n\n");
    }
}
