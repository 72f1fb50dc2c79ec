//! Log block space: allocated when a block is written, outside syncing
//! context, with the space map records held back until the sync of the
//! txg the writer held (see mod.rs).

use tarn_block::bp::checksum_code;
use tarn_block::{BlockPtr, ChecksumKind, Dva, Extent};

use super::format::OT_LOG_BLOCK;
use super::LogState;
use crate::pool::Shared;
use crate::{ObjError, Result, Txg};

/// Where log blocks go: `Log` means the pool's log vdevs (SLOG) when one
/// takes log blocks (see `log_vdevs.rs`), else the normal vdevs, silently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum VdevClass {
    #[default]
    Normal,
    Log,
}

/// Allocates a log block of `psize` bytes (`copies` copies on distinct
/// top-level vdevs where possible) born in `txg`, whose allocation records
/// go to `st.withheld` instead of the txg being synced. No gang blocks: a
/// log block that does not fit whole is `NoSpace` (the caller falls back
/// to a txg sync).
pub(crate) fn alloc_block(s: &Shared, st: &mut LogState, psize: u64, copies: u8, class: VdevClass, txg: Txg) -> Result<BlockPtr> {
    let got = alloc_extents(s, psize, copies, class, true, txg)?;
    let mut bp = BlockPtr::HOLE;
    for (i, e) in got.iter().enumerate() {
        bp.dva[i] = Dva { vdev: e.vdev, asize: e.len as u32, offset: e.offset };
        st.withheld.insert(*e, txg);
    }
    bp.ndva = got.len() as u8;
    bp.lsize = psize as u32;
    bp.psize = psize as u32;
    bp.birth = txg;
    bp.fill = 1;
    bp.checksum_kind = checksum_code(ChecksumKind::Blake3);
    bp.otype = OT_LOG_BLOCK;
    Ok(bp)
}

/// Space for the copies of a block of `psize` bytes, whole, taken out of
/// the free tree with no allocation record: the caller owns the extents
/// until it records them (`release_withheld`, `indirect::adopt`) or frees
/// them (`free_block`). Data (`metadata` false) is placed with data.
pub(crate) fn alloc_extents(s: &Shared, psize: u64, copies: u8, class: VdevClass, metadata: bool, txg: Txg) -> Result<Vec<Extent>> {
    let tops = s.io.tops();
    // On the normal vdevs a log block takes space the open txgs' dirty
    // data was promised: refused (the commit falls back to a txg sync)
    // unless it fits as new data would (space.rs), or a full pool's sync
    // would find its space gone and suspend the pool.
    let has_slog = class == VdevClass::Log && tops.iter().any(|t| crate::log_vdevs::takes_log_blocks(s, t));
    if !has_slog {
        let n = u64::from(copies.clamp(1, tarn_block::bp::MAX_COPIES as u8));
        let asize = tops.iter().map(|t| t.alloc_size(psize)).max().unwrap_or(psize);
        s.check_space(asize * n)?;
    }
    let slogs: Vec<usize> = match class {
        VdevClass::Log => tops.iter().filter(|t| crate::log_vdevs::takes_log_blocks(s, t)).map(|t| t.id() as usize).collect(),
        VdevClass::Normal => vec![],
    };
    let mut a = s.io.alloc.lock();
    let n = copies.clamp(1, tarn_block::bp::MAX_COPIES as u8) as usize;
    let mut got: Vec<Extent> = Vec::new();
    let size_of = |v: usize| tops.get(v).map_or(u64::MAX, |t| t.alloc_size(psize));
    let sector_of = |v: usize| tops.get(v).map_or(512, |t| t.sector());
    // On the log vdevs first (copies on distinct ones while there are
    // enough), then, for what they cannot take, the normal vdevs.
    while got.len() < n && !slogs.is_empty() {
        let start = (txg as usize).wrapping_add(got.len()) % slogs.len();
        let order = slogs.iter().cycle().skip(start).take(slogs.len()).copied();
        let fresh: Vec<usize> = order.filter(|v| !got.iter().any(|e| e.vdev as usize == *v)).collect();
        let placed = fresh.iter().find_map(|&v| a.alloc_on(v, size_of(v), sector_of(v), true));
        let Some(e) = placed else { break };
        a.hold_back(e);
        got.push(e);
        // On a log vdev: not pool space, nothing to tell the space checks.
        if fresh.len() <= 1 {
            break;
        }
    }
    while got.len() < n {
        let avoid: Vec<u32> = got.iter().map(|e| e.vdev).collect();
        let Some(e) = a.alloc(&size_of, &sector_of, &avoid, metadata) else { break };
        // Hold the record back (see the module doc).
        a.hold_back(e);
        // Not the sync's: no credit for it while a txg is written.
        s.note_other_alloc(e.len);
        got.push(e);
    }
    if got.len() < n || got.iter().any(|e| e.len > u32::MAX as u64) {
        for e in got {
            a.return_held(e);
        }
        return Err(ObjError::NoSpace);
    }
    Ok(got)
}

/// Records the allocation of extents taken by `alloc_extents` in the txg
/// being synced (syncing context).
pub(crate) fn record_alloc(s: &Shared, extents: &[Extent]) {
    let mut a = s.io.alloc.lock();
    for e in extents {
        a.record_held(*e);
    }
}

/// The extents of a log block (never a gang block).
pub(crate) fn extents(bp: &BlockPtr) -> Vec<Extent> {
    bp.dvas().iter().map(|d| Extent { vdev: d.vdev, offset: d.offset, len: d.asize as u64 }).collect()
}

/// Hands the held-back allocation records that `pick` selects to the
/// allocator (syncing context: they go into the txg being synced).
pub(crate) fn release_withheld(s: &Shared, st: &mut LogState, pick: &dyn Fn(Txg, &Extent) -> bool) {
    let now: Vec<Extent> = st.withheld.extract_if(.., |e, t| pick(*t, e)).map(|(e, _)| e).collect();
    record_released(s, now);
}

/// Records the allocation of extents just taken out of `withheld`.
fn record_released(s: &Shared, extents: Vec<Extent>) {
    if extents.is_empty() {
        return;
    }
    let mut a = s.io.alloc.lock();
    for e in extents {
        a.record_held(e);
    }
}

/// Frees a log block in txg `txg` (syncing context), handing its held-back
/// allocation record over first if it still has one.
pub(crate) fn free_block(s: &Shared, st: &mut LogState, bp: &BlockPtr, txg: Txg) {
    let mine: Vec<Extent> = extents(bp).into_iter().filter(|e| st.withheld.remove(e).is_some()).collect();
    record_released(s, mine);
    s.io.free(bp, txg);
}
