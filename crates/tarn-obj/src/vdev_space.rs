//! Space per top-level vdev (`zpool list -v`, `zpool iostat`): the same
//! accounting as the pool's [`ObjPool::space`], split by vdev.

use crate::{ObjPool, PoolSpace};

impl ObjPool {
    /// Size, allocated and free bytes of each top-level vdev, in vdev id
    /// order (raw: raidz parity included, as `zpool list` counts it).
    /// Deferred frees count as free, as in the pool's total.
    pub fn vdev_space(&self) -> Vec<PoolSpace> {
        let a = self.shared.io.alloc.lock();
        let mut deferred = vec![0u64; a.vdevs.len()];
        for extent in a.deferred.values().flatten() {
            if let Some(bytes) = deferred.get_mut(extent.vdev as usize) {
                *bytes += extent.len;
            }
        }
        a.vdevs
            .iter()
            .zip(deferred)
            .map(|(v, d)| {
                let free = (v.free_bytes + d).min(v.asize);
                let available = free.saturating_sub(crate::space::slop_bytes(v.asize));
                PoolSpace { size: v.asize, alloc: v.asize - free, free, available }
            })
            .collect()
    }
}
