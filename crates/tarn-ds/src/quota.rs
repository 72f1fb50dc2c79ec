//! Quotas as writers see them: how much a dataset may still grow.
//!
//! `quota` limits a dataset with its descendants and snapshots (its
//! `used`). A writer asks before each change that adds data; the answer
//! is the smallest headroom of the dataset and every ancestor that has a
//! quota, where a headroom is the quota less `used` as of the last synced
//! txg less the bytes its subtree has dirtied since (ZFS's temporary
//! reservations: without them a 64 MiB write into `quota=50M` succeeded
//! whole, because `used` moves only when its txg is written). `used` of
//! the quota holders is cached per synced txg (it reads dead lists).

use std::collections::BTreeMap;

use parking_lot::Mutex;
use tarn_obj::ObjsetId;

use crate::pool::Pool;
use crate::props::parent_name;

/// Per synced txg: the quota holders above a dataset and their `used`.
#[derive(Default)]
pub(crate) struct QuotaCache {
    txg: u64,
    /// dataset name → [(holder, quota, used)].
    holders: BTreeMap<String, Vec<(String, u64, u64)>>,
}

pub(crate) type SharedQuotaCache = Mutex<QuotaCache>;

impl Pool {
    /// The name of the dataset whose head is object set `id`.
    pub(crate) fn name_of_objset(&self, id: ObjsetId) -> Option<String> {
        self.state.read().datasets.iter().find(|(_, r)| r.objset == id.0).map(|(n, _)| n.clone())
    }

    /// The dataset and every ancestor that has a quota: (name, quota,
    /// used as of the last synced txg).
    fn quota_holders(&self, name: &str) -> Vec<(String, u64, u64)> {
        let txg = self.obj.last_synced_txg();
        let mut cache = self.quota_cache.lock();
        if cache.txg != txg {
            *cache = QuotaCache { txg, holders: BTreeMap::new() };
        }
        if let Some(h) = cache.holders.get(name) {
            return h.clone();
        }
        let mut holders = Vec::new();
        let mut current = Some(name);
        while let Some(dataset) = current {
            let quota = self.state.read().datasets.get(dataset).and_then(|r| r.own("quota").and_then(|q| q.parse::<u64>().ok()));
            if let Some(quota) = quota {
                holders.push((dataset.to_string(), quota, self.used_bytes(dataset)));
            }
            current = parent_name(dataset);
        }
        cache.holders.insert(name.to_string(), holders.clone());
        holders
    }

    /// Bytes dirtied (not yet written) by `name` and its descendants.
    fn subtree_dirty(&self, name: &str) -> u64 {
        let state = self.state.read();
        let prefix = format!("{name}/");
        state.objsets.iter().filter(|(n, _)| n.as_str() == name || n.starts_with(&prefix)).map(|(_, os)| os.dirty_bytes()).sum()
    }

    /// How many more bytes the dataset whose head is `objset` may take
    /// under its own quota and its ancestors', counting unwritten changes;
    /// None when no quota applies. `pending` tells whether unwritten
    /// changes were counted (writing them out may then leave more room:
    /// they usually take less than their size once compressed).
    pub fn quota_remaining(&self, objset: ObjsetId) -> Option<(u64, bool)> {
        let name = self.name_of_objset(objset)?;
        let mut remaining: Option<u64> = None;
        let mut pending = false;
        for (holder, quota, used) in self.quota_holders(&name) {
            let dirty = self.subtree_dirty(&holder);
            pending |= dirty > 0;
            let left = quota.saturating_sub(used).saturating_sub(dirty);
            remaining = Some(remaining.map_or(left, |r| r.min(left)));
        }
        remaining.map(|r| (r, pending))
    }
}
