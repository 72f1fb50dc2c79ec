//! Keeping snapshots alive while they are read by something other than a
//! send (`tarn diff`): the same in-memory claim a send takes, so a destroy
//! of a claimed snapshot is refused until the reader is done.

use crate::pool::Pool;

/// Snapshots claimed until this is dropped.
pub struct SnapshotClaim<'p> {
    pool: &'p Pool,
    names: Vec<String>,
}

impl Pool {
    /// Claims `names` (full snapshot names) for reading.
    pub fn claim_snapshots(&self, names: Vec<String>) -> SnapshotClaim<'_> {
        let mut sending = self.sending.lock();
        for n in &names {
            *sending.entry(n.clone()).or_default() += 1;
        }
        drop(sending);
        SnapshotClaim { pool: self, names }
    }
}

impl Drop for SnapshotClaim<'_> {
    fn drop(&mut self) {
        let mut sending = self.pool.sending.lock();
        for n in &self.names {
            if let Some(count) = sending.get_mut(n) {
                *count -= 1;
                if *count == 0 {
                    sending.remove(n);
                }
            }
        }
    }
}
