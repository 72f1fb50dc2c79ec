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

/// One arcstat line's numbers: counts over the interval (or since start),
/// and the L2 feed's bytes per second over it.
#[derive(Default)]
struct Sample {
    hits: u64,
    misses: u64,
    l2_hits: u64,
    l2_misses: u64,
    l2_read_per_sec: u64,
    l2_write_per_sec: u64,
}

fn sample(now: &ArcstatData, prev: Option<&ArcstatData>, secs: f64) -> Sample {
    let zero = ArcstatData::default();
    let p = prev.unwrap_or(&zero);
    // The first report: since the daemon started (rates unknown: 0).
    let rate = |now: u64, before: u64| if prev.is_some() && secs > 0.0 { (now.saturating_sub(before) as f64 / secs) as u64 } else { 0 };
    Sample {
        hits: now.hits.saturating_sub(p.hits),
        misses: now.misses.saturating_sub(p.misses),
        l2_hits: now.l2_hits.saturating_sub(p.l2_hits),
        l2_misses: now.l2_misses.saturating_sub(p.l2_misses),
        l2_read_per_sec: rate(now.l2_read_bytes, p.l2_read_bytes),
        l2_write_per_sec: rate(now.l2_write_bytes, p.l2_write_bytes),
    }
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
        "l2hits": delta.l2_hits,
        "l2miss": delta.l2_misses,
        "l2hit_ratio": ratio(delta.l2_hits, delta.l2_misses),
        "l2size": now.l2_size,
        "l2_hdr_size": now.l2_hdr_size,
        "l2bytes": delta.l2_read_per_sec,
        "l2wbytes": delta.l2_write_per_sec,
        "l2_cksum_bad": now.l2_cksum_bad,
        "l2_io_error": now.l2_io_error,
        "l2_rebuild_blocks": now.l2_rebuild_blocks,
    })
}

const HEADER: &str =
    "    time   read   hits   miss  hit%   size      c  arc_max    rss  l2hits  l2miss  l2hit%  l2size  l2wbytes";

fn arcstat_line(now: &ArcstatData, delta: &Sample, parsable: bool) -> String {
    let size = |v: u64| if parsable { v.to_string() } else { format_number(v) };
    let count = |v: u64| if parsable { v.to_string() } else { format_number(v) };
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    // `YYYY-MM-DD.HH:MM:SS`: the time of day is the last 8 characters.
    let stamp = crate::clock::history_time(secs, crate::clock::Zone::Local);
    let time = &stamp[stamp.len().saturating_sub(8)..];
    format!(
        "{time:>8} {:>6} {:>6} {:>6} {:>5} {:>6} {:>6} {:>8} {:>6} {:>7} {:>7} {:>7} {:>7} {:>9}\n",
        count(delta.hits + delta.misses),
        count(delta.hits),
        count(delta.misses),
        ratio(delta.hits, delta.misses),
        size(now.size),
        size(now.c),
        size(now.arc_max),
        size(now.rss),
        count(delta.l2_hits),
        count(delta.l2_misses),
        ratio(delta.l2_hits, delta.l2_misses),
        size(now.l2_size),
        size(delta.l2_write_per_sec),
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
        let secs = interval.unwrap_or_default().as_secs_f64();
        let delta = sample(&now, prev.as_ref(), secs);
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
        let line = arcstat_line(&now, &Sample { hits: 90, misses: 10, l2_hits: 6, l2_misses: 4, l2_write_per_sec: 8 << 20, ..Default::default() }, false);
        assert!(line.ends_with("   100     90     10    90     1M    64M      64M      0       6       4      60       0        8M\n"), "{line:?}");
        assert_eq!(HEADER.len() + 1, line.len(), "{line:?}");
    }
}
