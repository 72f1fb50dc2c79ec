//! `pool iostat` and `pool list -v`: the vdev tree of each pool with the
//! space of the pool and of each top-level vdev, each device's size and
//! health, and the I/O counters of every leaf (summed for the groups above
//! it). The counters are totals since import; the CLI turns two samples
//! into rates.


use tarn_obj::{PoolSpace, TopKind};
use tarn_vdev::{IoCounters, LeafRole, LeafStatus};

use crate::daemon::{Daemon, Imported};
use crate::proto::{PoolIostatData, Response, VdevIostat};

type HandlerResult = Result<Response, String>;

fn leaf_row(l: &LeafStatus) -> VdevIostat {
    VdevIostat {
        name: l.path.clone(),
        vdev_type: "file".into(),
        guid: l.guid,
        state: l.state.word().into(),
        size: l.size,
        alloc: None,
        free: None,
        io: l.io,
        children: vec![],
    }
}

fn group_row(name: String, vdev_type: &str, guid: u64, state: &str, space: Option<PoolSpace>, children: Vec<VdevIostat>) -> VdevIostat {
    let io = IoCounters::sum(children.iter().map(|c| &c.io));
    VdevIostat {
        name,
        vdev_type: vdev_type.into(),
        guid,
        state: state.into(),
        size: space.map_or(0, |s| s.size),
        alloc: space.map(|s| s.alloc),
        free: space.map(|s| s.free),
        io,
        children,
    }
}

/// The rows of one top-level vdev (ids, not positions, match a vdev to
/// its config and space: log vdevs are listed apart).
fn top_rows(top: &tarn_vdev::TopStatus, config: &tarn_vdev::PoolConfig, spaces: &[PoolSpace], in_use_spares: &mut Vec<LeafStatus>) -> Vec<VdevIostat> {
    let mut tops = Vec::new();
    let index = top.id as usize;
    let top_cfg = config.top.get(index);
    let space = spaces.get(index).copied();
    let slots = top.slot_groups();
    let mut rows = Vec::new();
    for (slot, leaves) in &slots {
        if leaves.len() == 1 {
            rows.extend(leaves.iter().map(|l| leaf_row(l)));
            continue;
        }
        let spare = leaves.iter().any(|l| l.role == LeafRole::Spare);
        in_use_spares.extend(leaves.iter().filter(|l| l.role == LeafRole::Spare).map(|l| (*l).clone()));
        let kind = if spare { "spare" } else { "replacing" };
        let state = if leaves.iter().all(|l| l.state.usable()) { "ONLINE" } else { "DEGRADED" };
        let children = leaves.iter().map(|l| leaf_row(l)).collect();
        rows.push(group_row(format!("{kind}-{slot}"), kind, 0, state, None, children));
    }
    let guid = top_cfg.map_or(0, |t| t.guid);
    match top_cfg.map(|t| &t.kind) {
        // A plain disk is its own top-level vdev: it carries the space.
        Some(TopKind::Disk) | None if rows.len() == 1 => {
            for mut row in rows {
                if let Some(s) = space {
                    (row.size, row.alloc, row.free) = (s.size, Some(s.alloc), Some(s.free));
                }
                tops.push(row);
            }
        }
        _ => {
            let kind = match top_cfg.map(|t| &t.kind) {
                Some(TopKind::Raidz { parity }) => format!("raidz{parity}"),
                Some(TopKind::Disk) => "disk".into(),
                _ => "mirror".into(),
            };
            let vdev_type = kind.trim_end_matches(char::is_numeric).to_string();
            tops.push(group_row(format!("{kind}-{index}"), &vdev_type, guid, top.state.word(), space, rows));
        }
    }
    tops
}

/// The iostat tree of one pool.
pub(crate) fn pool_data(name: &str, imported: &Imported) -> PoolIostatData {
    let obj = imported.ds.obj();
    let status = obj.status();
    let config = obj.config();
    let spaces = obj.vdev_space();
    let mut tops = Vec::new();
    let mut in_use_spares = Vec::new();
    for top in &status.tops {
        tops.extend(top_rows(top, &config, &spaces, &mut in_use_spares));
    }
    let mut logs = Vec::new();
    for top in &status.logs {
        logs.extend(top_rows(top, &config, &spaces, &mut in_use_spares));
    }
    let state = match &status.suspended {
        Some(_) => "SUSPENDED".to_string(),
        None => status.state.word().to_string(),
    };
    let root = group_row(name.to_string(), "root", status.guid, &state, Some(obj.space()), tops);
    let mut spares: Vec<VdevIostat> = status
        .spares
        .iter()
        .map(|l| {
            let mut row = leaf_row(l);
            if l.state.usable() {
                row.state = "AVAIL".into();
            }
            row
        })
        .collect();
    for l in in_use_spares {
        spares.push(VdevIostat { state: "INUSE".into(), ..leaf_row(&l) });
    }
    let cache = status.cache.iter().map(leaf_row).collect();
    PoolIostatData { name: name.to_string(), guid: status.guid, state, root, logs, spares, cache }
}

impl Daemon {
    pub(crate) fn pool_iostat(&self, names: &[String]) -> HandlerResult {
        let pools = self.pools.lock();
        let mut out = Vec::new();
        for (name, imported) in Self::selected_pools(&pools, names)? {
            out.push(pool_data(name, imported));
        }
        Ok(Response::data(serde_json::to_value(out).map_err(|e| e.to_string())?))
    }
}
