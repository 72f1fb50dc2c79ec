//! `tarn tunable get|set` (the daemon's tunables at run time, as a ZFS
//! user reads and writes /sys/module/zfs/parameters) and `tarn arcstat`
//! (the ARC's size and hit ratio, as arcstat prints them).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tarn_daemon::proto::Request;
use tarn_daemon::tunables::{ArcstatData, TunableRow};
use tarn_ds::size::format_number;

use crate::cli::TunableCommand;
use crate::commands::{data, print_json, send};
use crate::Failure;

pub fn run(socket: &Path, command: TunableCommand) -> Result<i32, Failure> {
    match command {
        TunableCommand::Get { json, scripted, name } => {
            let rows: Vec<TunableRow> = data(send(socket, &Request::TunableGet { name })?)?;
            if json {
                let map: serde_json::Map<String, Value> = rows
                    .iter()
                    .map(|r| (r.name.clone(), json!({ "value": r.value, "unit": r.unit, "source": r.source })))
                    .collect();
                print_json(&json!({ "tunables": map }));
            } else {
                print!("{}", table(&rows, scripted));
            }
            Ok(0)
        }
        TunableCommand::Set { persist, assignments } => {
            send(socket, &Request::TunableSet { assignments, persist })?;
            Ok(0)
        }
    }
}

fn table(rows: &[TunableRow], scripted: bool) -> String {
    if scripted {
        return rows.iter().map(|r| format!("{}\t{}\t{}\n", r.name, r.value, r.source)).collect();
    }
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(0).max(4);
    let value_width = rows.iter().map(|r| r.value.to_string().len()).max().unwrap_or(0).max(5);
    let mut out = format!("{:<width$}  {:>value_width$}  {:<7}  {:<8}\n", "NAME", "VALUE", "UNIT", "SOURCE");
    for r in rows {
        out.push_str(&format!("{:<width$}  {:>value_width$}  {:<7}  {:<8}\n", r.name, r.value, r.unit, r.source));
    }
    out
}

/// One arcstat line's numbers: counts over the interval (or since start).
struct Sample {
    hits: u64,
    misses: u64,
}

fn ratio(hits: u64, misses: u64) -> u64 {
    (hits * 100).checked_div(hits + misses).unwrap_or(0)
}

fn arcstat_json(now: &ArcstatData, delta: &Sample) -> Value {
    json!({
        "time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        "size": now.size,
        "data_size": now.data_size,
        "meta_size": now.meta_size,
        "c": now.c,
        "arc_max": now.arc_max,
        "arc_min": now.arc_min,
        "blocks": now.blocks,
        "hits": delta.hits,
        "misses": delta.misses,
        "hit_ratio": ratio(delta.hits, delta.misses),
        "prefetch_reads": now.prefetch_reads,
        "rss": now.rss,
    })
}

const HEADER: &str = "    time   read   hits   miss  hit%   size      c  arc_max    rss";

fn arcstat_line(now: &ArcstatData, delta: &Sample, parsable: bool) -> String {
    let size = |v: u64| if parsable { v.to_string() } else { format_number(v) };
    let count = |v: u64| if parsable { v.to_string() } else { format_number(v) };
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    // `YYYY-MM-DD.HH:MM:SS`: the time of day is the last 8 characters.
    let stamp = crate::clock::history_time(secs, crate::clock::Zone::Local);
    let time = &stamp[stamp.len().saturating_sub(8)..];
    format!(
        "{time:>8} {:>6} {:>6} {:>6} {:>5} {:>6} {:>6} {:>8} {:>6}\n",
        count(delta.hits + delta.misses),
        count(delta.hits),
        count(delta.misses),
        ratio(delta.hits, delta.misses),
        size(now.size),
        size(now.c),
        size(now.arc_max),
        size(now.rss),
    )
}

/// `arcstat [-j] [-p] [INTERVAL [COUNT]]`: the first report counts since
/// the daemon started; each later one, the INTERVAL before it.
pub fn arcstat(socket: &Path, json: bool, parsable: bool, interval: Option<Duration>, count: Option<u64>) -> Result<i32, Failure> {
    let reports = match (interval, count) {
        (None, _) => 1,
        (Some(_), Some(n)) => n,
        (Some(_), None) => u64::MAX,
    };
    let mut prev: Option<ArcstatData> = None;
    let mut next_at = Instant::now();
    for i in 0..reports {
        if i > 0 {
            let wait = next_at.saturating_duration_since(Instant::now());
            std::thread::sleep(wait);
        }
        next_at += interval.unwrap_or_default();
        let now: ArcstatData = data(send(socket, &Request::Arcstat)?)?;
        let delta = match &prev {
            Some(p) => Sample { hits: now.hits.saturating_sub(p.hits), misses: now.misses.saturating_sub(p.misses) },
            None => Sample { hits: now.hits, misses: now.misses },
        };
        if json {
            print_json(&arcstat_json(&now, &delta));
        } else {
            if i == 0 {
                println!("{HEADER}");
            }
            print!("{}", arcstat_line(&now, &delta, parsable));
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
        prev = Some(now);
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_line_up() {
        let rows = vec![
            TunableRow { name: "arc_max".into(), value: 67108864, unit: "bytes".into(), source: "config".into(), description: String::new() },
            TunableRow { name: "txg_timeout".into(), value: 5, unit: "seconds".into(), source: "default".into(), description: String::new() },
        ];
        let text = table(&rows, false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "NAME            VALUE  UNIT     SOURCE  ");
        assert_eq!(lines[1], "arc_max      67108864  bytes    config  ");
        assert_eq!(table(&rows, true), "arc_max\t67108864\tconfig\ntxg_timeout\t5\tdefault\n");
        assert_eq!(ratio(3, 1), 75);
        assert_eq!(ratio(0, 0), 0);
        let now = ArcstatData { size: 1 << 20, c: 64 << 20, arc_max: 64 << 20, ..Default::default() };
        let line = arcstat_line(&now, &Sample { hits: 90, misses: 10 }, false);
        assert!(line.ends_with("   100     90     10    90     1M    64M      64M      0\n"), "{line:?}");
        assert_eq!(HEADER.len() + 1, line.len(), "{line:?}");
    }
}
