//! Log vdevs (SLOG): top-level vdevs of class `log`, as zpool has them.
//!
//! Big theory:
//! - A log vdev is a disk or a mirror (never raidz, as in zpool) that holds
//!   intent-log blocks only. The allocator never places a normal block
//!   there (`VdevSpace::log`), and its bytes are not pool space: size,
//!   free and available leave it out, and so do `list` and statfs.
//! - The intent log (`zil/alloc.rs`) puts its blocks on a log vdev that
//!   *takes log blocks* ([`takes_log_blocks`]): in service, not being
//!   removed, and with a complete slot beyond its redundancy that has had
//!   no write error since the last `clear`. Otherwise on the normal vdevs,
//!   silently: a log write that fails falls back to a txg sync once, and
//!   the next chain goes to the main pool.
//! - Removal (`pool remove` of a log device) is zpool's: new log blocks
//!   stop going there, every chain with blocks on it is given up (its
//!   blocks freed, its records covered by the txg that frees them), a txg
//!   syncs, and once no live block is left the vdev becomes a *hole*: it
//!   keeps its id (the ids after it are named by block pointers and by the
//!   space maps) but has no devices, no space and no I/O.
//! - A pool whose log vdev is missing at import (unmirrored, or every side
//!   of a mirror) imports only with `-m`; the chains that ended on it lose
//!   their records after the last readable block (`zil/claim.rs` says which,
//!   in [`ObjPool::import_notes`]), and the vdev stays UNAVAIL until removed.
//!
//! Lock order: as in `zil/`: txg hold -> a log's state -> allocator.

use std::sync::Arc;
use std::time::Duration;

use tarn_block::{Allocator, BlockPtr};
use tarn_dev::Device;
use tarn_vdev::{TopClass, TopKind, TopVdev};

use crate::pool::Shared;
use crate::{ObjError, ObjPool, Result, TopDevices};

fn invalid(msg: impl Into<String>) -> ObjError {
    ObjError::Invalid(msg.into())
}

/// An allocator for `tops`, log vdevs (and holes of removed ones) marked.
pub(crate) fn new_allocator(tops: &[Arc<TopVdev>]) -> Allocator {
    let asizes: Vec<u64> = tops.iter().map(|t| t.asize()).collect();
    let mut a = Allocator::new(&asizes);
    for t in tops.iter().filter(|t| t.is_log()) {
        a.set_log(t.id() as usize);
    }
    a
}

/// zpool allows a disk or a mirror as a log vdev.
pub(crate) fn check_log_kinds(logs: &[TopDevices]) -> Result<()> {
    match logs.iter().find(|(k, _)| !matches!(k, TopKind::Disk | TopKind::Mirror)) {
        Some(_) => Err(invalid("a log vdev is a disk or a mirror (raidz is not supported for log devices)")),
        None => Ok(()),
    }
}

/// Whether new log blocks may go to `top` now (see the module doc).
pub(crate) fn takes_log_blocks(s: &Shared, top: &TopVdev) -> bool {
    if !top.is_log() || top.is_hole() || !top.state().usable() || s.log_removing.lock().contains(&top.id()) {
        return false;
    }
    let bad = top.slots().iter().filter(|slot| slot.iter().all(|l| !l.usable() || l.write_errors() > 0 || !l.dtl().is_empty())).count();
    let redundancy = match top.kind() {
        TopKind::Mirror => top.slots().len().saturating_sub(1),
        _ => 0,
    };
    bad <= redundancy
}

/// Every block pointer a log holds (live, ahead, waiting to be freed,
/// claimed) that has a copy on top-level vdev `vdev`.
fn log_blocks_on(s: &Shared, vdev: u32) -> Vec<BlockPtr> {
    crate::zil::blocks_in_use(s).into_iter().filter(|bp| bp.dvas().iter().any(|d| d.vdev == vdev)).collect()
}

/// Gives up every chain with a block on `vdev`: its blocks are freed, and
/// its header cleared, by the next sync, which also covers every record
/// they hold (the records' txgs are at most the txg held here). Until that
/// sync is on disk the old header and blocks are what a crash finds.
fn evacuate(s: &Arc<Shared>, vdev: u32) -> Result<()> {
    for log in s.logs.all() {
        let mut waited = 0;
        loop {
            let tx = crate::zil::hold(s);
            let mut st = log.st.lock();
            if st.writing {
                // A batch is being written (it may wait for a txg: never
                // while this thread holds one).
                drop(st);
                drop(tx);
                waited += 1;
                if waited > 3000 {
                    return Err(ObjError::Io(format!("the intent log of object set {} stays busy", log.id.0)));
                }
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            let on = |bp: &BlockPtr| !bp.is_hole() && bp.dvas().iter().any(|d| d.vdev == vdev);
            if let Some(c) = &st.claimed {
                if c.blocks.iter().any(on) || on(&st.ahead) {
                    return Err(invalid(format!(
                        "the intent log of object set {} on it awaits replay (mount the dataset first)",
                        log.id.0
                    )));
                }
            }
            let uses = st.live.iter().any(|b| on(&b.bp)) || on(&st.ahead);
            if uses && st.phase == crate::zil::LogPhase::Open {
                let live: Vec<BlockPtr> = st.live.drain(..).map(|b| b.bp).collect();
                st.discard.extend(live);
                let ahead = std::mem::replace(&mut st.ahead, BlockPtr::HOLE);
                if !ahead.is_hole() {
                    st.discard.push(ahead);
                }
                st.phase = crate::zil::LogPhase::Closed;
                st.chain = 0;
            }
            if uses {
                s.note_dirty_objset(tx.txg, log.id);
            }
            break;
        }
    }
    Ok(())
}

impl ObjPool {
    /// `pool add tank log ...`: a new log vdev (disk or mirror).
    pub fn add_log_vdev(&self, kind: TopKind, devs: Vec<(String, Arc<dyn Device>)>) -> Result<()> {
        check_log_kinds(&[(kind.clone(), vec![])])?;
        self.add_top_vdev(kind, devs, TopClass::Log)
    }

    /// Whether `path` (a device path, a leaf guid or a vdev name such as
    /// `mirror-2`) names a log vdev or one of its devices.
    pub fn is_log_device(&self, path: &str) -> bool {
        self.shared.io.tops().iter().filter(|t| t.is_log() && !t.is_hole()).any(|t| {
            t.name() == path || t.leaves().iter().any(|l| l.path == path || l.guid.to_string() == path)
        })
    }

    /// `pool remove` of a log vdev (named by one of its devices or by its
    /// name, e.g. `mirror-2`): see the module doc.
    pub fn remove_log(&self, path: &str) -> Result<()> {
        let s = &self.shared;
        if s.readonly {
            return Err(ObjError::ReadOnly);
        }
        if let Some(m) = s.suspended.why() {
            return Err(ObjError::Io(m));
        }
        crate::checkpoint::refuse_layout_change(s)?;
        let tops = s.io.tops();
        let top = tops
            .iter()
            .filter(|t| !t.is_hole())
            .find(|t| t.name() == path || t.leaves().iter().any(|l| l.path == path || l.guid.to_string() == path))
            .cloned()
            .ok_or_else(|| invalid(format!("no such device in pool: {path}")))?;
        if !top.is_log() {
            return Err(invalid(format!("{path} is a data device: only log devices, cache devices and hot spares can be removed")));
        }
        let id = top.id();
        if top.kind() == &TopKind::Mirror && top.leaves().iter().any(|l| l.path == path || l.guid.to_string() == path) {
            // zpool removes a whole log mirror by its name; one side is detached.
            return Err(invalid(format!(
                "{path} is one side of the log mirror {} (detach it, or remove {})",
                top.name(),
                top.name()
            )));
        }
        s.log_removing.lock().push(id);
        let result = self.empty_and_drop_log(&top);
        s.log_removing.lock().retain(|v| *v != id);
        result
    }

    fn empty_and_drop_log(&self, top: &Arc<TopVdev>) -> Result<()> {
        let s = &self.shared;
        let id = top.id();
        // A few rounds: a batch that was being written when the first
        // round looked may have put a block there since.
        for _ in 0..4 {
            evacuate(s, id)?;
            crate::pool::sync_and_wait(s)?;
            if log_blocks_on(s, id).is_empty() {
                break;
            }
        }
        let _g = s.sync_lock.lock();
        let left = log_blocks_on(s, id);
        if !left.is_empty() {
            return Err(ObjError::Io(format!("{} log blocks are still on {}; try again", left.len(), top.name())));
        }
        let hole = TopVdev::new(top.config().hole(), vec![])?;
        s.io.replace_top(Arc::new(hole));
        crate::vdevs::write_labels(s, None)?;
        for leaf in top.leaves() {
            if let (true, Some(dev)) = (leaf.usable(), leaf.device()) {
                let _ = tarn_vdev::clear_labels(dev.as_ref());
            }
        }
        Ok(())
    }

    /// What the import had to give up (`import -m`), one line each.
    pub fn import_notes(&self) -> Vec<String> {
        self.shared.import_notes.lock().clone()
    }

    /// Log vdevs by id (holes of removed ones left out): for tests and
    /// `pool status`.
    pub fn log_vdev_ids(&self) -> Vec<u32> {
        self.shared.io.tops().iter().filter(|t| t.is_log() && !t.is_hole()).map(|t| t.id()).collect()
    }
}

/// The import's refusal of a pool whose log vdev is missing.
pub(crate) fn missing_log_message(pool: &str, top: &TopVdev) -> String {
    let missing: Vec<String> = top.leaves().iter().filter(|l| !l.usable()).map(|l| l.path.clone()).collect();
    format!(
        "pool '{pool}' cannot be imported: log device {} is missing (use -m to import anyway; log records on it are lost)",
        missing.join(", ")
    )
}
