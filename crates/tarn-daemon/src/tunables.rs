//! Tunables at run time (`tarn tunable get|set`) and the ARC's counters
//! (`tarn arcstat`), the daemon's answer to ZFS's
//! /sys/module/zfs/parameters and arcstats.
//!
//! A tunable has one value for the whole daemon: the config file's
//! `[tunables]` gives the starting value, `tunable set` changes it for
//! every imported pool at once (and for pools imported later), and
//! `--persist` also writes it into the config file's `[tunables]` table
//! (the other tables are kept; comments are not).

use std::collections::BTreeMap;
use std::path::PathBuf;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tarn_obj::Tunables;

use crate::proto::Response;
use crate::Daemon;

/// Every tunable: name, unit, what it does.
pub const TUNABLES: [(&str, &str, &str); 9] = [
    ("arc_max", "bytes", "largest size of the ARC (one cache for all pools)"),
    ("arc_min", "bytes", "the ARC's target never drops below this under memory pressure"),
    ("dirty_data_max", "bytes", "changes held in memory before writers wait for a txg sync"),
    ("dirty_data_sync_percent", "percent", "share of dirty_data_max that starts a txg sync"),
    ("txg_timeout", "seconds", "longest time between txg syncs"),
    ("scan_mem_max", "bytes", "memory a scrub or resilver may use to sort block pointers"),
    ("scan_rate_max", "bytes/s", "bytes per second a scrub or resilver may issue (0: no limit)"),
    ("l2arc_write_max", "bytes/s", "bytes per second written to each pool's cache devices (L2ARC feed)"),
    ("l2arc_write_boost", "bytes/s", "added to l2arc_write_max until a pool's cache devices have been filled once"),
];

/// The tunables tarn has, in listing order.
pub fn names() -> impl Iterator<Item = &'static str> {
    TUNABLES.iter().map(|t| t.0)
}

/// Smallest values accepted.
pub const ARC_MAX_MIN: u64 = tarn_block::arc::ARC_MAX_FLOOR;
pub const DIRTY_DATA_MAX_MIN: u64 = 1 << 20;
pub const SCAN_MEM_MAX_MIN: u64 = 4 << 10;
pub const TXG_TIMEOUT_MAX_S: u64 = 3600;
pub const L2ARC_WRITE_MAX_MIN: u64 = 64 << 10;

/// Why a tunable could not be set: a name or value that does not parse is
/// bad usage (exit 2); a well-formed value out of range is refused (1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TunableError {
    Usage(String),
    Refused(String),
}

impl TunableError {
    pub fn message(&self) -> &str {
        match self {
            TunableError::Usage(m) | TunableError::Refused(m) => m,
        }
    }
    fn exit(&self) -> i32 {
        match self {
            TunableError::Usage(_) => 2,
            TunableError::Refused(_) => 1,
        }
    }
}

fn known() -> String {
    names().collect::<Vec<_>>().join(", ")
}

pub fn check_name(name: &str) -> Result<(), TunableError> {
    if names().any(|n| n == name) {
        Ok(())
    } else {
        Err(TunableError::Usage(format!("unknown tunable '{name}' (known: {})", known())))
    }
}

/// The value of tunable `name` in its unit (bytes, seconds).
pub fn value_of(t: &Tunables, name: &str) -> u64 {
    match name {
        "arc_max" => t.arc_max,
        "arc_min" => t.arc_min,
        "dirty_data_max" => t.dirty_data_max,
        "dirty_data_sync_percent" => t.dirty_data_sync_percent,
        "txg_timeout" => t.txg_timeout_ms / 1000,
        "scan_mem_max" => t.scan_mem_max,
        "scan_rate_max" => t.scan_rate_max,
        "l2arc_write_max" => t.l2arc_write_max,
        "l2arc_write_boost" => t.l2arc_write_boost,
        _ => 0,
    }
}

/// Parses `value` for tunable `name`: sizes take zfs's units (`256M`),
/// `txg_timeout` whole seconds, `dirty_data_sync_percent` a whole number.
pub fn parse_value(name: &str, value: &str) -> Result<u64, TunableError> {
    check_name(name)?;
    let bad = || TunableError::Usage(format!("tunable '{name}': bad value '{value}'"));
    if name == "txg_timeout" || name == "dirty_data_sync_percent" {
        return value.trim().parse::<u64>().map_err(|_| bad());
    }
    tarn_ds::size::parse_size(value).ok_or_else(bad)
}

/// Sets `name` to `number` in `t`, checking its range and its relation to
/// the other tunables (`arc_min` ≤ `arc_max`).
pub fn apply(t: &mut Tunables, name: &str, number: u64) -> Result<(), TunableError> {
    check_name(name)?;
    let refuse = |why: String| Err(TunableError::Refused(format!("cannot set '{name}' to {number}: {why}")));
    let size = tarn_ds::size::format_number;
    match name {
        "arc_max" if number < ARC_MAX_MIN => return refuse(format!("must be at least {}", size(ARC_MAX_MIN))),
        "arc_max" if number < t.arc_min => {
            return refuse(format!("below arc_min ({}); lower arc_min first", size(t.arc_min)))
        }
        "arc_max" => t.arc_max = number,
        "arc_min" if number > t.arc_max => return refuse(format!("above arc_max ({})", size(t.arc_max))),
        "arc_min" => t.arc_min = number,
        "dirty_data_max" if number < DIRTY_DATA_MAX_MIN => {
            return refuse(format!("must be at least {}", size(DIRTY_DATA_MAX_MIN)))
        }
        "dirty_data_max" => t.dirty_data_max = number,
        "dirty_data_sync_percent" if !(1..=100).contains(&number) => return refuse("must be 1 to 100 (percent)".into()),
        "dirty_data_sync_percent" => t.dirty_data_sync_percent = number,
        "txg_timeout" if !(1..=TXG_TIMEOUT_MAX_S).contains(&number) => {
            return refuse(format!("must be 1 to {TXG_TIMEOUT_MAX_S} seconds"))
        }
        "txg_timeout" => t.txg_timeout_ms = number * 1000,
        "scan_mem_max" if number < SCAN_MEM_MAX_MIN => {
            return refuse(format!("must be at least {}", size(SCAN_MEM_MAX_MIN)))
        }
        "scan_mem_max" => t.scan_mem_max = number,
        "scan_rate_max" => t.scan_rate_max = number,
        "l2arc_write_max" if number < L2ARC_WRITE_MAX_MIN => {
            return refuse(format!("must be at least {}", size(L2ARC_WRITE_MAX_MIN)))
        }
        "l2arc_write_max" => t.l2arc_write_max = number,
        "l2arc_write_boost" => t.l2arc_write_boost = number,
        _ => unreachable!("names checked above"),
    }
    Ok(())
}

/// One tunable as `tunable get` reports it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct TunableRow {
    pub name: String,
    pub value: u64,
    pub unit: String,
    /// `default`, `config` (the config file) or `set` (changed at run time).
    pub source: String,
    pub description: String,
}

/// The ARC's counters as `arcstat` reports them (bytes and counts since
/// the daemon started).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ArcstatData {
    pub size: u64,
    pub data_size: u64,
    pub meta_size: u64,
    /// The target size `c`.
    pub c: u64,
    pub arc_max: u64,
    pub arc_min: u64,
    pub blocks: u64,
    pub hits: u64,
    pub misses: u64,
    pub prefetch_reads: u64,
    /// The daemon's resident memory (VmRSS), bytes.
    pub rss: u64,
    /// The L2ARC (every pool's cache devices): ARC misses answered from a
    /// cache device and not, since the daemon started.
    #[serde(default)]
    pub l2_hits: u64,
    #[serde(default)]
    pub l2_misses: u64,
    /// Bytes of blocks on the cache devices, and of their index in memory.
    #[serde(default)]
    pub l2_size: u64,
    #[serde(default)]
    pub l2_hdr_size: u64,
    /// Bytes read from and written to the cache devices since start.
    #[serde(default)]
    pub l2_read_bytes: u64,
    #[serde(default)]
    pub l2_write_bytes: u64,
    /// Reads a cache device answered wrongly (checksum) or not at all.
    #[serde(default)]
    pub l2_cksum_bad: u64,
    #[serde(default)]
    pub l2_io_error: u64,
    /// Blocks restored from the cache devices at import.
    #[serde(default)]
    pub l2_rebuild_blocks: u64,
}

/// The daemon's tunables and where each value came from.
pub struct Tuning {
    pub values: Mutex<Tunables>,
    sources: Mutex<BTreeMap<String, String>>,
    /// The `--config` file, rewritten by `tunable set --persist`.
    pub config_path: Option<PathBuf>,
}

impl Tuning {
    pub fn new(values: Tunables, from_config: &[String], config_path: Option<PathBuf>) -> Tuning {
        tarn_block::arc().set_limits(values.arc_max, values.arc_min);
        tarn_obj::l2arc::set_write_limits(values.l2arc_write_max, values.l2arc_write_boost);
        let sources = from_config.iter().map(|n| (n.clone(), "config".to_string())).collect();
        Tuning { values: Mutex::new(values), sources: Mutex::new(sources), config_path }
    }

    pub fn get(&self) -> Tunables {
        *self.values.lock()
    }

    fn rows(&self, name: Option<&str>) -> Result<Vec<TunableRow>, TunableError> {
        if let Some(name) = name {
            check_name(name)?;
        }
        let values = self.get();
        let sources = self.sources.lock();
        Ok(TUNABLES
            .iter()
            .filter(|(n, _, _)| name.is_none_or(|want| want == *n))
            .map(|(n, unit, description)| TunableRow {
                name: n.to_string(),
                value: value_of(&values, n),
                unit: unit.to_string(),
                source: sources.get(*n).cloned().unwrap_or_else(|| "default".into()),
                description: description.to_string(),
            })
            .collect())
    }
}

/// Resident memory of this process in bytes (VmRSS of /proc/self/status).
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

fn failure(e: TunableError) -> Response {
    let exit = e.exit();
    Response { exit, ..Response::error(e.message()) }
}

/// Writes `values` into the `[tunables]` table of the config file at
/// `path`, keeping its other tables; atomically (temporary file, fsync,
/// rename).
fn persist(path: &std::path::Path, assignments: &[(String, u64)]) -> Result<(), String> {
    use std::io::Write;
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    // Only a file the daemon itself would accept is rewritten.
    crate::config::parse_config(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| format!("{}: {}", path.display(), e.message().trim()))?;
    let tunables = table.entry("tunables").or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let toml::Value::Table(tunables) = tunables else {
        return Err(format!("{}: 'tunables' is not a table", path.display()));
    };
    for (name, value) in assignments {
        tunables.insert(name.clone(), toml::Value::Integer(i64::try_from(*value).unwrap_or(i64::MAX)));
    }
    let out = toml::to_string(&table).map_err(|e| e.to_string())?;
    let temporary = path.with_extension("toml.tmp");
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(out.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    };
    write().map_err(|e| format!("{}: {e}", path.display()))
}

impl Daemon {
    pub(crate) fn tunable_get(&self, name: Option<&str>) -> Response {
        match self.tuning.rows(name) {
            Ok(rows) => Response::data(serde_json::to_value(rows).unwrap_or_default()),
            Err(e) => failure(e),
        }
    }

    /// Sets every assignment or none: all are checked (in order, each
    /// against the values before it) before any is applied.
    pub(crate) fn tunable_set(&self, assignments: &[(String, String)], persist_to_config: bool) -> Response {
        if assignments.is_empty() {
            return failure(TunableError::Usage("tunable set: missing NAME=VALUE".into()));
        }
        if persist_to_config && self.tuning.config_path.is_none() {
            return failure(TunableError::Refused(
                "cannot persist tunables: the daemon was started without --config".into(),
            ));
        }
        let mut next = self.tuning.get();
        let mut parsed = Vec::new();
        for (name, value) in assignments {
            let applied = parse_value(name, value).and_then(|number| apply(&mut next, name, number).map(|()| number));
            match applied {
                Ok(number) => parsed.push((name.clone(), number)),
                Err(e) => return failure(e),
            }
        }
        if persist_to_config {
            let path = self.tuning.config_path.as_ref().expect("checked above");
            let persisted: Vec<(String, u64)> = parsed.iter().map(|(n, _)| (n.clone(), value_of(&next, n))).collect();
            if let Err(e) = persist(path, &persisted) {
                return failure(TunableError::Refused(format!("cannot persist tunables: {e}")));
            }
        }
        *self.tuning.values.lock() = next;
        {
            let mut sources = self.tuning.sources.lock();
            for (name, _) in &parsed {
                sources.insert(name.clone(), if persist_to_config { "config" } else { "set" }.into());
            }
        }
        tarn_block::arc().set_limits(next.arc_max, next.arc_min);
        tarn_obj::l2arc::set_write_limits(next.l2arc_write_max, next.l2arc_write_boost);
        let pools: Vec<_> = self.pools.lock().values().map(|i| i.ds.obj().clone()).collect();
        for obj in pools {
            obj.set_tunables(next);
        }
        crate::memory::release_memory();
        Response::text("")
    }

    pub(crate) fn arcstat(&self) -> Response {
        let s = tarn_block::arc().stats();
        let l2 = tarn_obj::l2arc::stats();
        let data = ArcstatData {
            size: s.size,
            data_size: s.data_size,
            meta_size: s.meta_size,
            c: s.target,
            arc_max: s.arc_max,
            arc_min: s.arc_min,
            blocks: s.blocks,
            hits: s.hits,
            misses: s.misses,
            prefetch_reads: s.prefetch_reads,
            rss: rss_bytes(),
            l2_hits: l2.hits,
            l2_misses: l2.misses,
            l2_size: l2.size,
            l2_hdr_size: l2.hdr_size,
            l2_read_bytes: l2.read_bytes,
            l2_write_bytes: l2.write_bytes,
            l2_cksum_bad: l2.cksum_bad,
            l2_io_error: l2.io_errors,
            l2_rebuild_blocks: l2.rebuild_blocks,
        };
        Response::data(serde_json::to_value(data).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_and_ranges_hold() {
        let mut t = Tunables::default();
        assert_eq!(parse_value("arc_max", "256M"), Ok(256 << 20));
        assert_eq!(parse_value("txg_timeout", "7"), Ok(7));
        assert!(matches!(parse_value("txg_timeout", "7s"), Err(TunableError::Usage(_))));
        assert!(matches!(parse_value("arc_maxx", "1G"), Err(TunableError::Usage(_))));
        assert!(matches!(parse_value("arc_max", "lots"), Err(TunableError::Usage(_))));
        apply(&mut t, "arc_max", 256 << 20).unwrap();
        assert_eq!(t.arc_max, 256 << 20);
        assert!(matches!(apply(&mut t, "arc_max", 1 << 20), Err(TunableError::Refused(_))));
        assert!(matches!(apply(&mut t, "arc_min", 512 << 20), Err(TunableError::Refused(_))));
        apply(&mut t, "arc_min", 128 << 20).unwrap();
        assert!(matches!(apply(&mut t, "arc_max", 64 << 20), Err(TunableError::Refused(_))));
        assert!(matches!(apply(&mut t, "txg_timeout", 0), Err(TunableError::Refused(_))));
        apply(&mut t, "txg_timeout", 9).unwrap();
        assert_eq!(value_of(&t, "txg_timeout"), 9);
        assert!(matches!(apply(&mut t, "dirty_data_max", 1024), Err(TunableError::Refused(_))));
        apply(&mut t, "dirty_data_max", 1 << 20).unwrap();
        assert!(matches!(parse_value("dirty_data_sync_percent", "40%"), Err(TunableError::Usage(_))));
        for bad in [0, 101] {
            assert!(matches!(apply(&mut t, "dirty_data_sync_percent", bad), Err(TunableError::Refused(_))));
        }
        apply(&mut t, "dirty_data_sync_percent", parse_value("dirty_data_sync_percent", "40").unwrap()).unwrap();
        assert_eq!(value_of(&t, "dirty_data_sync_percent"), 40);
        apply(&mut t, "scan_rate_max", 0).unwrap();
        assert!(matches!(apply(&mut t, "l2arc_write_max", 0), Err(TunableError::Refused(_))));
        apply(&mut t, "l2arc_write_max", parse_value("l2arc_write_max", "64M").unwrap()).unwrap();
        apply(&mut t, "l2arc_write_boost", 0).unwrap();
        assert_eq!((value_of(&t, "l2arc_write_max"), value_of(&t, "l2arc_write_boost")), (64 << 20, 0));
    }

    #[test]
    fn persist_keeps_other_tables() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tarn.toml");
        std::fs::write(&path, "[tunables]\ntxg_timeout = 3\n\n[alerts]\nwebhook_url = \"http://127.0.0.1:9/x\"\n").unwrap();
        persist(&path, &[("arc_max".into(), 64 << 20)]).unwrap();
        let config = crate::config::parse_config(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(config.tunables.arc_max, 64 << 20);
        assert_eq!(config.tunables.txg_timeout_ms, 3000);
        assert_eq!(config.alerts.webhook_url.as_deref(), Some("http://127.0.0.1:9/x"));
        std::fs::write(&path, "not toml [").unwrap();
        assert!(persist(&path, &[("arc_max".into(), 64 << 20)]).is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "not toml [", "a bad file is left alone");
    }
}
