//! Device and scan commands: `pool scrub`, `wait`, `offline`, `online`,
//! `replace`, `attach`, `detach`, `add`, `remove`, `clear`.
//!
//! As in zpool, a command naming several pools or devices goes on past one
//! that fails (its error line printed) and exits 1 at the end.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use tarn_daemon::proto::{PoolStatusData, Request, VdevStatus};
use tarn_ds::size::format_bytes;

use crate::cli::{CommaList, PoolCommand, WAIT_ACTIVITIES};
use crate::commands::{data, resolve_device, send};
use crate::up::absolute;
use crate::{client, vdevspec, Failure};

/// A device already in the pool as the daemon knows it: a path (made
/// absolute), a name under /dev, or a guid (passed as given).
pub fn resolve_member(name: &str) -> String {
    let path = Path::new(name);
    if name.contains('/') || path.exists() {
        return absolute(path).to_string_lossy().into_owned();
    }
    if Path::new("/dev").join(name).exists() {
        return format!("/dev/{name}");
    }
    name.to_string()
}

/// Runs `op` on every item; prints each failure; the worst exit status.
fn each(items: Vec<String>, mut op: impl FnMut(String) -> Result<(), Failure>) -> i32 {
    let mut exit = 0;
    for item in items {
        if let Err(failure) = op(item) {
            eprintln!("tarn: {}", failure.message);
            exit = exit.max(failure.exit);
        }
    }
    exit
}

fn wait_for(socket: &Path, pool: &str, activity: &str) -> Result<(), Failure> {
    send(socket, &Request::PoolWait { pool: pool.to_string(), activities: vec![activity.into()], timeout_secs: None })?;
    Ok(())
}

/// The activities `-t` selected, in zpool's column order; empty = all.
fn selected_activities(lists: Vec<CommaList>) -> Vec<String> {
    let wanted: Vec<String> = lists.into_iter().flat_map(|l| l.0).collect();
    WAIT_ACTIVITIES.iter().filter(|a| wanted.iter().any(|w| w == *a)).map(|a| a.to_string()).collect()
}

fn has_replacing(vdev: &VdevStatus) -> bool {
    vdev.vdev_type == "replacing" || vdev.children.iter().any(has_replacing)
}

/// Bytes left of `activity` (replace: a resilver with a replacing vdev).
fn remaining(activity: &str, pool: &PoolStatusData) -> u64 {
    if activity == "trim" {
        return pool.trims.iter().filter(|t| t.state == "active").map(|t| t.bytes_left).sum();
    }
    let Some(scan) = pool.scan.as_ref().filter(|s| s.state == "scanning") else { return 0 };
    let left = scan.to_examine.saturating_sub(scan.issued);
    match activity {
        "scrub" if scan.function == "scrub" => left,
        "resilver" if scan.function == "resilver" => left,
        "replace" if scan.function == "resilver" && has_replacing(&pool.root) => left,
        _ => 0,
    }
}

fn column_width(activity: &str) -> usize {
    activity.len().max(6)
}

/// `pool wait POOL INTERVAL`'s header: one column per activity.
pub fn wait_header(activities: &[String]) -> String {
    let cells: Vec<String> =
        activities.iter().map(|a| format!("{:>width$}", a.to_ascii_uppercase(), width = column_width(a))).collect();
    cells.join("  ")
}

/// One progress row: the bytes each activity has left.
pub fn wait_row(activities: &[String], pool: &PoolStatusData) -> String {
    let cells: Vec<String> = activities
        .iter()
        .map(|a| format!("{:>width$}", format_bytes(remaining(a, pool)), width = column_width(a)))
        .collect();
    cells.join("  ")
}

/// `pool wait` with an INTERVAL: a progress row every interval until done.
fn wait_with_progress(socket: &Path, pool: String, activities: Vec<String>, interval: Duration) -> Result<i32, Failure> {
    let columns = if activities.is_empty() { WAIT_ACTIVITIES.map(String::from).to_vec() } else { activities.clone() };
    let timeout_secs = interval.as_secs_f64().ceil().max(1.0) as u64;
    let mut stdout = std::io::stdout();
    let mut text = wait_header(&columns) + "\n";
    loop {
        let pools: Vec<PoolStatusData> = data(send(socket, &Request::PoolStatus { pools: vec![pool.clone()], verbose: false })?)?;
        if let Some(status) = pools.first() {
            text.push_str(&wait_row(&columns, status));
            text.push('\n');
        }
        match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
            Ok(()) => text.clear(),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(1),
            Err(e) => return Err(Failure::from(format!("cannot write: {e}"))),
        }
        let request = Request::PoolWait { pool: pool.clone(), activities: activities.clone(), timeout_secs: Some(timeout_secs) };
        let response = client::call(socket, &request)?;
        if response.ok {
            return Ok(0);
        }
        let message = response.error.unwrap_or_else(|| "failed".into());
        if !message.starts_with("timed out waiting") {
            return Err(Failure { message, exit: response.exit.max(1) });
        }
    }
}

pub fn run(socket: &Path, command: PoolCommand) -> Result<i32, Failure> {
    match command {
        PoolCommand::Scrub { pause, stop, wait, pools } => {
            let mut started = Vec::new();
            let mut exit = each(pools, |pool| {
                send(socket, &Request::PoolScrub { pool: pool.clone(), pause, stop })?;
                started.push(pool);
                Ok(())
            });
            if wait {
                exit = exit.max(each(started, |pool| wait_for(socket, &pool, "scrub")));
            }
            Ok(exit)
        }
        PoolCommand::Wait { activities, pool, interval } => {
            let activities = selected_activities(activities);
            match interval {
                Some(interval) => wait_with_progress(socket, pool, activities, interval),
                None => {
                    send(socket, &Request::PoolWait { pool, activities, timeout_secs: None })?;
                    Ok(0)
                }
            }
        }
        PoolCommand::Offline { temporary, pool, devices } => {
            if temporary {
                eprintln!("tarn: -t: temporary offline is not supported; the device stays offline until 'tarn pool online'");
            }
            Ok(each(devices, |device| {
                send(socket, &Request::PoolOffline { pool: pool.clone(), device: resolve_member(&device) })?;
                Ok(())
            }))
        }
        PoolCommand::Online { pool, devices } => Ok(each(devices, |device| {
            send(socket, &Request::PoolOnline { pool: pool.clone(), device: resolve_member(&device) })?;
            Ok(())
        })),
        PoolCommand::Replace { force, wait, pool, old, new } => {
            let old = resolve_member(&old);
            let new = new.map(|n| resolve_device(&n)).transpose().map_err(|e| Failure::from(format!("cannot replace {old}: {e}")))?;
            send(socket, &Request::PoolReplace { pool: pool.clone(), old, new, force })?;
            if wait {
                wait_for(socket, &pool, "replace")?;
            }
            Ok(0)
        }
        PoolCommand::Attach { force, wait, pool, existing, new } => {
            let new = resolve_device(&new).map_err(|e| Failure::from(format!("cannot attach {new} to {existing}: {e}")))?;
            let request = Request::PoolAttach { pool: pool.clone(), existing: resolve_member(&existing), new, force };
            send(socket, &request)?;
            if wait {
                wait_for(socket, &pool, "resilver")?;
            }
            Ok(0)
        }
        PoolCommand::Detach { pool, device } => {
            send(socket, &Request::PoolDetach { pool, device: resolve_member(&device) })?;
            Ok(0)
        }
        PoolCommand::Add { force, dry_run, pool, vdevs } => {
            let mut spec = vdevspec::parse_pool_spec(&vdevs).map_err(|e| Failure::from(format!("cannot add to '{pool}': {e}")))?;
            for device in spec.vdevs.iter_mut().flat_map(|g| g.devices.iter_mut()).chain(spec.spares.iter_mut()).chain(spec.cache.iter_mut()) {
                *device = resolve_device(device).map_err(|e| Failure::from(format!("cannot add to '{pool}': {e}")))?;
            }
            send(socket, &Request::PoolAdd { pool, vdevs: spec.vdevs, spares: spec.spares, force, dry_run, cache: spec.cache })?;
            Ok(0)
        }
        PoolCommand::Remove { pool, devices } => Ok(each(devices, |device| {
            send(socket, &Request::PoolRemove { pool: pool.clone(), device: resolve_member(&device) })?;
            Ok(())
        })),
        PoolCommand::Clear { pool, device } => {
            send(socket, &Request::PoolClear { pool, device: device.map(|d| resolve_member(&d)) })?;
            Ok(0)
        }
        PoolCommand::Sync { pools } => {
            send(socket, &Request::PoolSync { pools })?;
            Ok(0)
        }
        other => unreachable!("not a device command: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_daemon::proto::ScanStatusData;

    fn status(function: &str, state: &str, replacing: bool) -> PoolStatusData {
        let leaf = VdevStatus {
            name: "/d1".into(),
            vdev_type: if replacing { "replacing" } else { "file" }.into(),
            guid: 1,
            state: "ONLINE".into(),
            read_errors: 0,
            write_errors: 0,
            checksum_errors: 0,
            children: vec![],
            reason: None,
            resilvering: false,
        };
        PoolStatusData {
            name: "tank".into(),
            guid: 1,
            state: "ONLINE".into(),
            txg: 1,
            data_errors: 0,
            root: VdevStatus { name: "tank".into(), vdev_type: "root".into(), children: vec![leaf.clone()], ..leaf },
            scan: Some(ScanStatusData {
                function: function.into(),
                state: state.into(),
                paused: false,
                start_time: 0,
                end_time: 0,
                to_examine: 3 << 30,
                examined: 2 << 30,
                issued: 1 << 30,
                read_bytes: 0,
                repaired: 0,
                resilvered: 0,
                errors: 0,
                rate: 0,
                eta_secs: None,
                percent: 33.3,
            }),
            logs: vec![],
            cache: vec![],
            spares: vec![],
            error_files: vec![],
            suspended: None,
            trims: vec![],
            checkpoint: None,
        }
    }

    #[test]
    fn wait_progress_rows() {
        let all: Vec<String> = WAIT_ACTIVITIES.map(String::from).to_vec();
        assert_eq!(wait_header(&all), "REPLACE  RESILVER   SCRUB    TRIM");
        assert_eq!(wait_row(&all, &status("scrub", "scanning", false)), "     0B        0B      2G      0B");
        assert_eq!(wait_row(&all, &status("resilver", "scanning", false)), "     0B        2G      0B      0B");
        assert_eq!(wait_row(&all, &status("resilver", "scanning", true)), "     2G        2G      0B      0B");
        assert_eq!(wait_row(&all, &status("scrub", "finished", false)), "     0B        0B      0B      0B");
        let mut trimming = status("scrub", "finished", false);
        let trim = |state: &str, left: u64| tarn_daemon::proto::TrimStatusData {
            guid: 1,
            path: "/d1".into(),
            state: state.into(),
            percent: 50,
            action_time: 0,
            bytes_done: 0,
            bytes_left: left,
            rate: 0,
        };
        trimming.trims = vec![trim("active", 1 << 30), trim("active", 1 << 30), trim("complete", 0), trim("suspended", 5 << 30)];
        assert_eq!(wait_row(&all, &trimming), "     0B        0B      0B      2G");
    }

    #[test]
    fn activities_in_column_order_without_repeats() {
        let lists = vec![CommaList(vec!["scrub".into(), "replace".into()]), CommaList(vec!["scrub".into()])];
        assert_eq!(selected_activities(lists), vec!["replace", "scrub"]);
        assert!(selected_activities(vec![]).is_empty());
    }

    #[test]
    fn members_keep_guids_and_resolve_paths() {
        assert_eq!(resolve_member("1234567890123"), "1234567890123");
        assert_eq!(resolve_member("/srv/d1"), "/srv/d1");
        assert!(resolve_member("vdevs/d1").starts_with('/'));
        assert_eq!(resolve_member("null"), "/dev/null");
    }
}
