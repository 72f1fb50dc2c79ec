//! `tarn pool iostat` (`zpool iostat`) and `tarn pool list -v`.
//!
//! The daemon answers with each pool's vdev tree: space, and for every
//! device its I/O totals since import (operations, bytes, time). The first
//! report divides the totals by the time since import; each later one
//! divides the change since the previous sample by the time between them.
//! Latencies (`-l`) are averages per operation over the same span:
//! `total_wait` from the vdev layer accepting the block I/O to its end,
//! `disk_wait` the time inside the device call.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tarn_daemon::proto::{PoolIostatData, PoolRow, Request, VdevIostat};
use tarn_ds::size::format_number;
use tarn_vdev::IoCounters;

use crate::commands::{data, print_json, send};
use crate::output::{output_version, table};
use crate::Failure;

pub struct IostatOptions {
    pub verbose: bool,
    pub latency: bool,
    pub scripted: bool,
    pub parsable: bool,
    pub json: bool,
    pub skip_first: bool,
}

/// The operands of `pool iostat`: pools, then the interval and count.
type Operands = (Vec<String>, Option<Duration>, Option<u64>);

/// `[POOL...] [INTERVAL [COUNT]]`: trailing numbers are the interval and
/// the count (pool names start with a letter, so a number is never one).
pub fn split_args(args: &[String]) -> Result<Operands, Failure> {
    let is_number = |s: &str| s.starts_with(|c: char| c.is_ascii_digit() || c == '.');
    let numbers = args.iter().rev().take_while(|a| is_number(a)).count();
    if numbers > 2 {
        return Err(Failure::usage(format!("too many numbers: '{}' (INTERVAL [COUNT])", args[args.len() - numbers])));
    }
    let (pools, numbers) = args.split_at(args.len() - numbers);
    if let Some(bad) = pools.iter().find(|p| p.starts_with(|c: char| c.is_ascii_digit() || c == '.')) {
        return Err(Failure::usage(format!("invalid interval '{bad}': INTERVAL and COUNT come after the pools")));
    }
    let interval = match numbers.first() {
        None => None,
        Some(text) => Some(crate::cli::interval(text).map_err(Failure::usage)?),
    };
    let count = match numbers.get(1) {
        None => None,
        Some(text) => match text.parse::<u64>() {
            Ok(n) if n > 0 => Some(n),
            _ => return Err(Failure::usage(format!("invalid count '{text}': must be a positive whole number"))),
        },
    };
    Ok((pools.to_vec(), interval, count))
}

/// Per-second rates and average latencies of one vdev over one span.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rates {
    pub read_ops: f64,
    pub write_ops: f64,
    pub read_bytes: f64,
    pub write_bytes: f64,
    /// Average nanoseconds per operation; None without operations.
    pub total_rwait: Option<u64>,
    pub total_wwait: Option<u64>,
    pub disk_rwait: Option<u64>,
    pub disk_wwait: Option<u64>,
}

/// The rates between two samples of the same counters (`prev` None: since
/// the counters started).
pub fn rates(cur: &IoCounters, prev: Option<&IoCounters>) -> Rates {
    let zero = IoCounters::default();
    let prev = prev.unwrap_or(&zero);
    let d = |a: u64, b: u64| a.saturating_sub(b);
    let secs = d(cur.elapsed_ns, prev.elapsed_ns) as f64 / 1e9;
    let per_sec = |v: u64| if secs > 0.0 { v as f64 / secs } else { 0.0 };
    let avg = |ns: u64, ops: u64| (ops > 0).then(|| ns / ops);
    let (rops, wops) = (d(cur.read_ops, prev.read_ops), d(cur.write_ops, prev.write_ops));
    Rates {
        read_ops: per_sec(rops),
        write_ops: per_sec(wops),
        read_bytes: per_sec(d(cur.read_bytes, prev.read_bytes)),
        write_bytes: per_sec(d(cur.write_bytes, prev.write_bytes)),
        total_rwait: avg(d(cur.read_total_ns, prev.read_total_ns), rops),
        total_wwait: avg(d(cur.write_total_ns, prev.write_total_ns), wops),
        disk_rwait: avg(d(cur.read_disk_ns, prev.read_disk_ns), rops),
        disk_wwait: avg(d(cur.write_disk_ns, prev.write_disk_ns), wops),
    }
}

/// zfs's time nicenum: `12ns`, `345us`, `1.2ms`, `3s`.
pub fn nicetime(ns: u64) -> String {
    const UNITS: [&str; 4] = ["ns", "us", "ms", "s"];
    let mut index = 0;
    let mut divisor = 1u64;
    while index + 1 < UNITS.len() && ns / divisor >= 1000 {
        divisor *= 1000;
        index += 1;
    }
    let unit = UNITS[index];
    if index == 0 || ns.is_multiple_of(divisor) {
        return format!("{}{unit}", ns / divisor);
    }
    let exact = ns as f64 / divisor as f64;
    for precision in (0..=2).rev() {
        let text = format!("{exact:.precision$}{unit}");
        if text.len() <= 5 {
            return text;
        }
    }
    format!("{}{unit}", ns / divisor)
}

/// One line of a report.
struct Line {
    depth: usize,
    name: String,
    alloc: Option<u64>,
    free: Option<u64>,
    rates: Rates,
    /// A section title (`logs`): no numbers, dashes.
    title: bool,
}

fn find<'a>(list: &'a [VdevIostat], name: &str) -> Option<&'a VdevIostat> {
    list.iter().find(|v| v.name == name)
}

fn collect(node: &VdevIostat, prev: Option<&VdevIostat>, depth: usize, verbose: bool, out: &mut Vec<Line>) {
    out.push(Line {
        depth,
        name: node.name.clone(),
        alloc: node.alloc,
        free: node.free,
        rates: rates(&node.io, prev.map(|p| &p.io)),
        title: false,
    });
    if verbose {
        for child in &node.children {
            let prev_child = prev.and_then(|p| find(&p.children, &child.name));
            collect(child, prev_child, depth + 1, verbose, out);
        }
    }
}

fn number(value: f64, parsable: bool) -> String {
    let v = value.max(0.0) as u64;
    if parsable {
        v.to_string()
    } else {
        format_number(v)
    }
}

fn cells(line: &Line, options: &IostatOptions) -> Vec<String> {
    if line.title {
        return vec!["-".to_string(); if options.latency { 10 } else { 6 }];
    }
    let p = options.parsable;
    let space = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| number(v as f64, p));
    let r = &line.rates;
    let mut out = vec![
        space(line.alloc),
        space(line.free),
        number(r.read_ops, p),
        number(r.write_ops, p),
        number(r.read_bytes, p),
        number(r.write_bytes, p),
    ];
    if options.latency {
        let wait = |v: Option<u64>| match v {
            None => "-".to_string(),
            Some(ns) if p => ns.to_string(),
            Some(ns) => nicetime(ns),
        };
        out.extend([wait(r.total_rwait), wait(r.total_wwait), wait(r.disk_rwait), wait(r.disk_wwait)]);
    }
    out
}

fn groups(latency: bool) -> Vec<&'static str> {
    let mut g = vec!["capacity", "operations", "bandwidth"];
    if latency {
        g.extend(["total_wait", "disk_wait"]);
    }
    g
}

/// `text` centred in `width` columns (the extra space on the left, as zpool).
fn centred(text: &str, width: usize) -> String {
    let room = width.saturating_sub(text.len());
    let left = room.div_ceil(2);
    format!("{}{text}{}", " ".repeat(left), " ".repeat(room - left))
}

/// The text of one report: the header (when asked), a line per pool (and
/// per vdev with -v), dashes between pools with -v.
fn report_text(pools: &[Vec<Line>], options: &IostatOptions, header: bool) -> String {
    let rows: Vec<Vec<String>> = pools.iter().flatten().map(|l| cells(l, options)).collect();
    if options.scripted {
        let mut out = String::new();
        for (line, row) in pools.iter().flatten().zip(&rows) {
            out.push_str(&line.name);
            for cell in row {
                out.push('\t');
                out.push_str(cell);
            }
            out.push('\n');
        }
        return out;
    }
    let name_width = pools.iter().flatten().map(|l| 2 * l.depth + l.name.len()).max().unwrap_or(0).max(10);
    let ncols = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..ncols).map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0).max(5)).collect();
    let dashes = {
        let mut d = "-".repeat(name_width);
        for w in &widths {
            d.push_str("  ");
            d.push_str(&"-".repeat(*w));
        }
        d.push('\n');
        d
    };
    let mut out = String::new();
    if header {
        let mut first = " ".repeat(name_width);
        let mut second = format!("{:<name_width$}", "pool");
        for (g, title) in groups(options.latency).iter().enumerate() {
            let (a, b) = (widths[2 * g], widths[2 * g + 1]);
            first.push_str("  ");
            first.push_str(&centred(title, a + 2 + b));
            let subtitles = if g == 0 { ["alloc", "free"] } else { ["read", "write"] };
            second.push_str(&format!("  {:>a$}  {:>b$}", subtitles[0], subtitles[1]));
        }
        out.push_str(first.trim_end());
        out.push('\n');
        out.push_str(&second);
        out.push('\n');
        out.push_str(&dashes);
    }
    let mut i = 0;
    for pool in pools {
        for line in pool {
            let row = &rows[i];
            i += 1;
            let mut text = format!("{:<name_width$}", format!("{}{}", "  ".repeat(line.depth), line.name));
            for (cell, w) in row.iter().zip(&widths) {
                text.push_str(&format!("  {cell:>w$}"));
            }
            out.push_str(&text);
            out.push('\n');
        }
        if options.verbose {
            out.push_str(&dashes);
        }
    }
    out
}

fn rates_json(r: &Rates, latency: bool) -> Map<String, Value> {
    let round = |v: f64| (v * 1000.0).round() / 1000.0;
    let mut m = Map::new();
    m.insert("read_ops".into(), json!(round(r.read_ops)));
    m.insert("write_ops".into(), json!(round(r.write_ops)));
    m.insert("read_bytes".into(), json!(round(r.read_bytes)));
    m.insert("write_bytes".into(), json!(round(r.write_bytes)));
    if latency {
        m.insert("total_rwait".into(), json!(r.total_rwait));
        m.insert("total_wwait".into(), json!(r.total_wwait));
        m.insert("disk_rwait".into(), json!(r.disk_rwait));
        m.insert("disk_wwait".into(), json!(r.disk_wwait));
    }
    m
}

fn vdev_json(node: &VdevIostat, prev: Option<&VdevIostat>, options: &IostatOptions) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!(node.name));
    m.insert("vdev_type".into(), json!(node.vdev_type));
    m.insert("guid".into(), json!(node.guid));
    m.insert("state".into(), json!(node.state));
    m.insert("size".into(), json!(node.size));
    if let (Some(alloc), Some(free)) = (node.alloc, node.free) {
        m.insert("alloc_space".into(), json!(alloc));
        m.insert("free_space".into(), json!(free));
    }
    m.extend(rates_json(&rates(&node.io, prev.map(|p| &p.io)), options.latency));
    m.insert("totals".into(), serde_json::to_value(node.io).unwrap_or(Value::Null));
    if options.verbose && !node.children.is_empty() {
        let mut children = Map::new();
        for child in &node.children {
            let prev_child = prev.and_then(|p| find(&p.children, &child.name));
            children.insert(child.name.clone(), vdev_json(child, prev_child, options));
        }
        m.insert("vdevs".into(), Value::Object(children));
    }
    Value::Object(m)
}

/// One `-j` report: every pool, its root vdev (and with -v the tree).
fn report_json(cur: &[PoolIostatData], prev: &[PoolIostatData], options: &IostatOptions) -> Value {
    let mut pools = Map::new();
    for pool in cur {
        let before = prev.iter().find(|p| p.name == pool.name && p.guid == pool.guid).map(|p| &p.root);
        let mut vdevs = Map::new();
        vdevs.insert(pool.root.name.clone(), vdev_json(&pool.root, before, options));
        let mut doc = json!({"name": pool.name, "pool_guid": pool.guid, "state": pool.state, "vdevs": vdevs});
        if options.verbose {
            let before_logs = prev.iter().find(|p| p.name == pool.name && p.guid == pool.guid).map(|p| &p.logs[..]);
            let logs: Map<String, Value> = pool
                .logs
                .iter()
                .map(|l| (l.name.clone(), vdev_json(l, before_logs.and_then(|b| find(b, &l.name)), options)))
                .collect();
            doc["logs"] = Value::Object(logs);
            let before_cache = prev.iter().find(|p| p.name == pool.name && p.guid == pool.guid).map(|p| &p.cache[..]);
            let cache: Map<String, Value> = pool
                .cache
                .iter()
                .map(|c| (c.name.clone(), vdev_json(c, before_cache.and_then(|b| find(b, &c.name)), options)))
                .collect();
            doc["l2cache"] = Value::Object(cache);
        }
        pools.insert(pool.name.clone(), doc);
    }
    json!({"output_version": output_version("zpool iostat"), "pools": pools})
}

fn sample(socket: &Path, pools: &[String]) -> Result<Vec<PoolIostatData>, Failure> {
    data(send(socket, &Request::PoolIostat { pools: pools.to_vec() })?)
}

pub fn run(socket: &Path, args: Vec<String>, options: IostatOptions) -> Result<i32, Failure> {
    let (pools, interval, count) = split_args(&args)?;
    // No interval: one report. An interval without a count: until stopped.
    let reports = match (interval, count) {
        (None, _) => 1,
        (Some(_), Some(n)) => n,
        (Some(_), None) => u64::MAX,
    };
    let mut prev: Option<Vec<PoolIostatData>> = None;
    let mut printed = 0u64;
    let mut first_text = true;
    let mut cur = sample(socket, &pools)?;
    if cur.is_empty() {
        println!("no pools available");
        return Ok(0);
    }
    if options.skip_first && interval.is_none() {
        return Ok(0);
    }
    loop {
        if !(options.skip_first && prev.is_none()) {
            let previous = prev.as_deref().unwrap_or(&[]);
            let text = if options.json {
                let mut doc = serde_json::to_string_pretty(&report_json(&cur, previous, &options)).unwrap_or_default();
                doc.push('\n');
                doc
            } else {
                let lines: Vec<Vec<Line>> = cur
                    .iter()
                    .map(|pool| {
                        let before = previous.iter().find(|p| p.name == pool.name && p.guid == pool.guid).map(|p| &p.root);
                        let mut out = Vec::new();
                        collect(&pool.root, before, 0, options.verbose, &mut out);
                        // zpool iostat -v: the log vdevs in a section of their own.
                        if options.verbose && !pool.logs.is_empty() {
                            let title = Line { depth: 0, name: "logs".into(), alloc: None, free: None, rates: Rates::default(), title: true };
                            out.push(title);
                            let before_logs = previous.iter().find(|p| p.name == pool.name && p.guid == pool.guid).map(|p| &p.logs[..]);
                            for log in &pool.logs {
                                let prev_log = before_logs.and_then(|l| find(l, &log.name));
                                collect(log, prev_log, 1, true, &mut out);
                            }
                        }
                        // ... and the cache devices after them, as zpool shows them.
                        if options.verbose && !pool.cache.is_empty() {
                            out.push(Line { depth: 0, name: "cache".into(), alloc: None, free: None, rates: Rates::default(), title: true });
                            let before_cache = previous.iter().find(|p| p.name == pool.name && p.guid == pool.guid).map(|p| &p.cache[..]);
                            for c in &pool.cache {
                                collect(c, before_cache.and_then(|b| find(b, &c.name)), 1, true, &mut out);
                            }
                        }
                        out
                    })
                    .collect();
                let header = first_text || options.verbose;
                first_text = false;
                report_text(&lines, &options, header)
            };
            // A reader that went away (`| head`) ends the reports quietly.
            let mut stdout = std::io::stdout().lock();
            if stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()).is_err() {
                return Ok(0);
            }
            drop(stdout);
            printed += 1;
            if printed >= reports {
                return Ok(0);
            }
        }
        let Some(interval) = interval else { return Ok(0) };
        std::thread::sleep(interval);
        prev = Some(cur);
        cur = sample(socket, &pools)?;
    }
}

// ---------------------------------------------------------------------------
// `pool list -v`

/// A vdev row of `pool list -v` for the columns asked for.
fn list_cells(node: &VdevIostat, depth: usize, columns: &[String], parsable: bool, spare: bool) -> Vec<String> {
    let n = |v: u64| if parsable { v.to_string() } else { format_number(v) };
    columns
        .iter()
        .map(|c| match c.as_str() {
            "name" => format!("{}{}", "  ".repeat(depth), node.name),
            "size" if !spare && node.size > 0 => n(node.size),
            "allocated" => node.alloc.map_or_else(|| "-".into(), n),
            "free" => node.free.map_or_else(|| "-".into(), n),
            "capacity" => match node.alloc {
                Some(alloc) if node.size > 0 => {
                    let pct = (u128::from(alloc) * 100 / u128::from(node.size)) as u64;
                    if parsable {
                        pct.to_string()
                    } else {
                        format!("{pct}%")
                    }
                }
                _ => "-".into(),
            },
            "health" => node.state.clone(),
            "guid" if node.guid != 0 => node.guid.to_string(),
            _ => "-".into(),
        })
        .collect()
}

fn list_rows(node: &VdevIostat, depth: usize, columns: &[String], parsable: bool, out: &mut Vec<Vec<String>>) {
    for child in &node.children {
        out.push(list_cells(child, depth, columns, parsable, false));
        list_rows(child, depth + 1, columns, parsable, out);
    }
}

fn list_vdev_json(node: &VdevIostat, columns: &[String], parsable: bool, spare: bool) -> Value {
    let cells = list_cells(node, 0, columns, parsable, spare);
    let mut props = Map::new();
    for (c, v) in columns.iter().zip(cells) {
        if c != "name" {
            props.insert(c.clone(), json!({"value": v, "source": {"type": "NONE", "data": "-"}}));
        }
    }
    let mut m = Map::new();
    m.insert("name".into(), json!(node.name));
    m.insert("vdev_type".into(), json!(node.vdev_type));
    m.insert("guid".into(), json!(node.guid));
    m.insert("state".into(), json!(node.state));
    m.insert("properties".into(), Value::Object(props));
    if !node.children.is_empty() {
        let children: Map<String, Value> =
            node.children.iter().map(|c| (c.name.clone(), list_vdev_json(c, columns, parsable, false))).collect();
        m.insert("vdevs".into(), Value::Object(children));
    }
    Value::Object(m)
}

/// `pool list -v`: each pool's row (`rows`, already cut to `columns`),
/// then its top-level vdevs and devices, indented, then its log vdevs
/// and its spares.
pub fn list_verbose(
    socket: &Path,
    columns: &[String],
    rows: &[PoolRow],
    scripted: bool,
    parsable: bool,
    json: bool,
) -> Result<i32, Failure> {
    let names: Vec<String> = rows.iter().map(|r| r.name.clone()).collect();
    let trees: Vec<PoolIostatData> = if names.is_empty() { Vec::new() } else { sample(socket, &names)? };
    if json {
        let mut doc = crate::output::pools_json("zpool list", rows);
        for tree in &trees {
            if let Some(pool) = doc["pools"].get_mut(&tree.name).and_then(Value::as_object_mut) {
                let vdevs: Map<String, Value> =
                    tree.root.children.iter().map(|c| (c.name.clone(), list_vdev_json(c, columns, parsable, false))).collect();
                pool.insert("vdevs".into(), Value::Object(vdevs));
                let logs: Map<String, Value> =
                    tree.logs.iter().map(|c| (c.name.clone(), list_vdev_json(c, columns, parsable, false))).collect();
                pool.insert("logs".into(), Value::Object(logs));
                let cache: Map<String, Value> =
                    tree.cache.iter().map(|c| (c.name.clone(), list_vdev_json(c, columns, parsable, false))).collect();
                pool.insert("l2cache".into(), Value::Object(cache));
                let spares: Map<String, Value> =
                    tree.spares.iter().map(|s| (s.name.clone(), list_vdev_json(s, columns, parsable, true))).collect();
                pool.insert("spares".into(), Value::Object(spares));
            }
        }
        print_json(&doc);
        return Ok(0);
    }
    let mut lines: Vec<Vec<String>> = Vec::new();
    for row in rows {
        lines.push(row.props.iter().map(|p| p.value.clone()).collect());
        let Some(tree) = trees.iter().find(|t| t.name == row.name) else { continue };
        list_rows(&tree.root, 1, columns, parsable, &mut lines);
        if !tree.logs.is_empty() {
            lines.push(columns.iter().map(|c| if c == "name" { "logs".to_string() } else { "-".to_string() }).collect());
            for log in &tree.logs {
                lines.push(list_cells(log, 1, columns, parsable, false));
                list_rows(log, 2, columns, parsable, &mut lines);
            }
        }
        if !tree.cache.is_empty() {
            lines.push(columns.iter().map(|c| if c == "name" { "cache".to_string() } else { "-".to_string() }).collect());
            for c in &tree.cache {
                lines.push(list_cells(c, 1, columns, parsable, false));
            }
        }
        if !tree.spares.is_empty() {
            lines.push(columns.iter().map(|c| if c == "name" { "spare".to_string() } else { "-".to_string() }).collect());
            for spare in &tree.spares {
                lines.push(list_cells(spare, 1, columns, parsable, true));
            }
        }
    }
    let headers: Vec<String> = columns
        .iter()
        .map(|c| match c.as_str() {
            "allocated" => "ALLOC".into(),
            "capacity" => "CAP".into(),
            other => other.to_ascii_uppercase(),
        })
        .collect();
    print!("{}", table(&headers, &lines, scripted));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn split_ok(s: &str) -> Operands {
        split_args(&args(s)).unwrap_or_else(|f| panic!("{s}: {}", f.message))
    }

    #[test]
    fn trailing_numbers_are_interval_and_count() {
        let (p, i, c) = split_ok("tank backup 2 5");
        assert_eq!((p, i, c), (args("tank backup"), Some(Duration::from_secs(2)), Some(5)));
        let (p, i, c) = split_ok("0.5");
        assert_eq!((p.len(), i, c), (0, Some(Duration::from_millis(500)), None));
        let (p, i, c) = split_ok("tank");
        assert_eq!((p, i, c), (args("tank"), None, None));
        for bad in ["tank 0", "tank 1 0", "tank 1 1.5", "1 2 3", "tank 1x", "5 tank", "tank 1 -"] {
            match split_args(&args(bad)) {
                Err(f) => assert_eq!(f.exit, 2, "{bad}"),
                Ok(parsed) => panic!("{bad}: {parsed:?}"),
            }
        }
    }

    #[test]
    fn rates_and_latencies() {
        let prev = IoCounters { elapsed_ns: 1_000_000_000, read_ops: 10, read_bytes: 4096, read_total_ns: 100, ..Default::default() };
        let cur = IoCounters {
            elapsed_ns: 3_000_000_000,
            read_ops: 30,
            read_bytes: 4096 + 8192,
            read_total_ns: 100 + 40_000,
            read_disk_ns: 20_000,
            ..Default::default()
        };
        let r = rates(&cur, Some(&prev));
        assert_eq!((r.read_ops, r.read_bytes, r.write_ops), (10.0, 4096.0, 0.0));
        assert_eq!((r.total_rwait, r.disk_rwait, r.total_wwait), (Some(2000), Some(1000), None));
        let since_import = rates(&cur, None);
        assert_eq!(since_import.read_ops, 10.0);
        assert_eq!(nicetime(12), "12ns");
        assert_eq!(nicetime(345_000), "345us");
        assert_eq!(nicetime(1_234_567), "1.2ms");
        assert_eq!(nicetime(3_000_000_000), "3s");
    }

    #[test]
    fn text_layout_matches_zpool() {
        let options = IostatOptions { verbose: false, latency: false, scripted: false, parsable: false, json: false, skip_first: false };
        let line = Line {
            depth: 0,
            name: "tank".into(),
            alloc: Some(1 << 20),
            free: Some(9 << 30),
            rates: Rates { read_ops: 3.0, write_ops: 12.0, read_bytes: 1536.0, write_bytes: 25_907.0, ..Default::default() },
            title: false,
        };
        let text = report_text(&[vec![line]], &options, true);
        assert_eq!(
            text,
            "              capacity     operations     bandwidth\n\
             pool        alloc   free   read  write   read  write\n\
             ----------  -----  -----  -----  -----  -----  -----\n\
             tank           1M     9G      3     12  1.50K  25.3K\n"
        );
    }
}
