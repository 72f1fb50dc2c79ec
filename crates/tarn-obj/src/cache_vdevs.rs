//! Cache vdevs (L2ARC devices), as zpool has them: `create ... cache DEV`,
//! `add tank cache DEV`, `remove tank DEV`.
//!
//! Big theory:
//! - A cache device is a single disk (never a mirror or raidz, as zpool
//!   refuses them), listed in the config's `cache` section like a spare
//!   (labels with `top_id` = `CACHE_TOP_ID`), never a top-level vdev: it
//!   holds no pool data, no block pointer names it, and it counts in no
//!   space figure and no redundancy.
//! - A cache device missing or failed at import shows UNAVAIL and never
//!   stops the import; one that fails while in use only costs pool reads.
//! - The cache itself is l2arc/: what is written there, how it is read
//!   back and verified, and how it is rebuilt after import.

use std::sync::Arc;

use tarn_dev::Device;
use tarn_vdev::LeafVdev;

use crate::l2arc::{CacheDev, L2Stats};
use crate::pool::Shared;
use crate::{ObjError, ObjPool, Result};

fn invalid(msg: impl Into<String>) -> ObjError {
    ObjError::Invalid(msg.into())
}

/// Puts freshly labelled cache devices into service (create, add): each
/// starts with an empty device header, whatever it held before.
pub(crate) fn bring_in(s: &Shared, leaves: Vec<Arc<LeafVdev>>) -> Result<()> {
    let guid = s.config.lock().pool_guid;
    for leaf in leaves {
        let dev = Arc::new(CacheDev::new(leaf, guid));
        dev.format()?;
        s.l2.add(dev);
    }
    Ok(())
}

impl ObjPool {
    /// `pool add tank cache DEV`.
    pub fn add_cache(&self, path: String, dev: Arc<dyn Device>) -> Result<()> {
        if self.shared.l2.leaves().iter().any(|l| l.path == path) {
            return Err(invalid(format!("{path} is already a cache device")));
        }
        if dev.size() < tarn_vdev::MIN_DEVICE_SIZE {
            return Err(invalid(format!("{path} is too small for a cache device")));
        }
        let leaf = Arc::new(LeafVdev::new(crate::vdevs::new_guid(), path, Some(dev)));
        self.config_op(|s| bring_in(s, vec![leaf]))
    }

    /// Whether `path` (or a guid) names one of this pool's cache devices.
    pub fn is_cache_device(&self, path: &str) -> bool {
        self.shared.l2.leaves().iter().any(|l| l.path == path || l.guid.to_string() == path)
    }

    /// `pool remove` of a cache device: no more reads or feed, its labels
    /// cleared (the blocks it held are still in the pool).
    pub fn remove_cache(&self, path: &str) -> Result<()> {
        let Some(guid) = self.shared.l2.leaves().iter().find(|l| l.path == path || l.guid.to_string() == path).map(|l| l.guid) else {
            return Err(invalid(format!("{path} is not a cache device of this pool")));
        };
        let leaf = self.config_op(|s| Ok(s.l2.remove(guid)))?;
        if let Some(leaf) = leaf {
            if let Some(dev) = leaf.device() {
                let _ = tarn_vdev::clear_labels(dev.as_ref());
            }
            leaf.close();
        }
        Ok(())
    }

    /// The L2ARC's counters and sizes for this pool.
    pub fn l2_stats(&self) -> L2Stats {
        self.shared.l2.stats()
    }

    /// Whether the cache devices' indexes have been rebuilt since import
    /// (the rebuild runs in the background).
    pub fn l2_rebuilt(&self) -> bool {
        self.shared.l2.rebuilt()
    }
}
