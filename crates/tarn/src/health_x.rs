//! `tarn pool status -x` (`zpool status -x`): only the pools with a
//! problem, each in full; otherwise one line saying all is well.
//!
//! A pool has a problem when zpool would give it a `status:` paragraph
//! (`status::advice`: suspended, data errors, a resilver running, devices
//! faulted, unavailable, removed or offline, devices with error counts) or
//! when it is not ONLINE.

use std::path::Path;

use tarn_daemon::proto::{PoolStatusData, Request};

use crate::clock::Zone;
use crate::commands::{data, print_json, send};
use crate::{status, Failure};

/// Whether `pool status -x` shows the pool.
pub fn unhealthy(pool: &PoolStatusData) -> bool {
    pool.state != "ONLINE" || pool.suspended.is_some() || status::advice(pool).is_some()
}

/// What `-x` prints when every pool asked about is fine.
pub fn healthy_line(pools: &[String], found: usize) -> String {
    match pools {
        _ if found == 0 => "no pools available".into(),
        [one] => format!("pool '{one}' is healthy"),
        _ => "all pools are healthy".into(),
    }
}

pub fn run(socket: &Path, verbose: bool, json: bool, pools: Vec<String>) -> Result<i32, Failure> {
    let response = send(socket, &Request::PoolStatus { pools: pools.clone(), verbose })?;
    let all: Vec<PoolStatusData> = data(response)?;
    let found = all.len();
    let sick: Vec<PoolStatusData> = all.into_iter().filter(unhealthy).collect();
    if json {
        print_json(&status::status_json(&sick));
    } else if sick.is_empty() {
        println!("{}", healthy_line(&pools, found));
    } else {
        print!("{}", status::status_text(&sick, verbose, Zone::Local));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthy_lines() {
        assert_eq!(healthy_line(&[], 2), "all pools are healthy");
        assert_eq!(healthy_line(&["tank".into()], 1), "pool 'tank' is healthy");
        assert_eq!(healthy_line(&["tank".into(), "b".into()], 2), "all pools are healthy");
        assert_eq!(healthy_line(&[], 0), "no pools available");
    }
}
