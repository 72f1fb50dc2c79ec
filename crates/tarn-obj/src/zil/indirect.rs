//! Indirect writes: a whole data block a commit must make durable is
//! written once, as the ordinary block the txg would write, and the log
//! record carries only its pointer (ZFS's WR_INDIRECT with `dmu_sync`).
//!
//! Big theory:
//! - The log writer writes the block (compressed and checksummed as the
//!   dataset's properties say, born in the txg of the change) to space it
//!   takes with no allocation record, then registers an *override*: this
//!   version of the block (the very buffer the txg will write) has this
//!   pointer. Registration comes after the block's write completed, so a
//!   sync that adopts it flushes it before its uberblock.
//! - The sync of that txg, about to write the block, finds the override
//!   by the buffer's address and *adopts* it: the tree gets the pointer,
//!   the allocation is recorded in that txg, nothing is written again. A
//!   block changed again after the record (a new buffer) is not adopted.
//! - Overrides the sync did not adopt are freed by it (their allocation
//!   recorded and freed in the same txg; the space is reused only after
//!   the defer window, so a record naming the block stays readable until
//!   that txg is on disk and the record retired). One registered after
//!   its txg's sync passed is freed by the next sync.
//! - After a crash, the claim takes the blocks of records it will replay
//!   (their txg never reached disk); replay reads each block, verifies it,
//!   and writes its bytes as an ordinary write; the blocks are freed with
//!   the chain.
//!
//! Invariant (release assertion): an override is adopted only in the txg
//! it was born in, so its birth is the txg whose tree first names it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tarn_block::{BlockKeys, BlockPtr, Dva, Extent, WriteSpec};

use super::alloc::{alloc_extents, extents, free_block, record_alloc, VdevClass};
use super::{LogState, ObjsetLog};
use crate::pool::{Shared, SyncTx};
use crate::{ObjError, ObjsetId, Result, Txg};

/// A block the log wrote for a record, waiting for its txg's sync.
pub(crate) struct Override {
    pub txg: Txg,
    /// Keeps the buffer (and so its address) alive until the sync.
    pub block: Arc<Vec<u8>>,
    pub bp: BlockPtr,
}

/// Overrides by the address of the buffer they stand for.
pub(crate) type Overrides = HashMap<usize, Override>;

fn key(block: &Arc<Vec<u8>>) -> usize {
    Arc::as_ptr(block) as usize
}

/// Writes `block` (a whole level-0 block of a record of txg `txg`) as an
/// ordinary block and registers it for adoption; returns its pointer (a
/// hole for zeros the dataset's compression turns into one). The block is
/// durable when this returns (`TopVdev::write_durable`), before any log
/// block naming it is written.
/// `keys`: an encrypted object set's, which seal the block as its sync
/// would (its pointer carries the IV and MAC; the seal binds the type).
pub(crate) fn write_block(
    s: &Shared,
    log: &ObjsetLog,
    block: &Arc<Vec<u8>>,
    spec: WriteSpec,
    keys: Option<&BlockKeys>,
    txg: Txg,
) -> Result<BlockPtr> {
    let prepared = s.io.prepare_with(block, spec, txg, keys).map_err(|e| ObjError::Io(format!("indirect block: {e}")))?;
    let Some((mut bp, phys)) = prepared else { return Ok(BlockPtr::HOLE) };
    let got = alloc_extents(s, u64::from(bp.psize), spec.copies, VdevClass::Normal, false, txg)?;
    bp.ndva = got.len() as u8;
    for (i, e) in got.iter().enumerate() {
        bp.dva[i] = Dva { vdev: e.vdev, asize: e.len as u32, offset: e.offset };
    }
    let tops = s.io.tops();
    let mut ok = false;
    let mut errors = Vec::new();
    for d in bp.dvas() {
        match tops.get(d.vdev as usize).map(|t| t.write_durable(d.offset, &phys, txg)) {
            Some(Ok(())) => ok = true,
            Some(Err(e)) => errors.push(e.to_string()),
            None => errors.push(format!("no vdev {}", d.vdev)),
        }
    }
    log.indirect_written.fetch_add(1, Ordering::Relaxed);
    let mut st = log.st.lock();
    if !ok || txg <= st.overrides_closed {
        // Failed, or its txg's sync has gone by (the block is the record's
        // alone): the next sync records the allocation and frees it.
        st.withheld.extend(got.iter().map(|e| (*e, txg)));
        st.discard.push(bp);
        if !ok {
            return Err(ObjError::Io(format!("indirect block write: {}", errors.join("; "))));
        }
    } else {
        st.overrides.insert(key(block), Override { txg, block: block.clone(), bp });
    }
    Ok(bp)
}

/// For each of `blocks` (level-0 blocks of object set `id` the sync of
/// `stx`'s txg is about to write), the pointer of an override to adopt
/// instead of writing it (syncing context).
pub(crate) fn adopt(s: &Shared, stx: &SyncTx, id: ObjsetId, blocks: &[&Arc<Vec<u8>>]) -> Vec<Option<BlockPtr>> {
    stx.check();
    let txg = stx.txg();
    let mut out = vec![None; blocks.len()];
    let Some(log) = s.logs.get(id) else { return out };
    let mut st = log.st.lock();
    if st.overrides.is_empty() {
        return out;
    }
    let mut taken: Vec<Extent> = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        let k = key(b);
        if st.overrides.get(&k).is_some_and(|o| o.txg == txg && Arc::ptr_eq(&o.block, b)) {
            let o = st.overrides.remove(&k).expect("override present");
            assert_eq!(o.bp.birth, txg, "an override adopted outside the txg it was born in");
            taken.extend(extents(&o.bp));
            out[i] = Some(o.bp);
            log.indirect_adopted.fetch_add(1, Ordering::Relaxed);
        }
    }
    drop(st);
    record_alloc(s, &taken);
    out
}

/// The sync of `txg` wrote its blocks: frees the overrides of txgs up to
/// it that no block adopted; later registrations for them are discarded.
pub(crate) fn close_txg(s: &Shared, st: &mut LogState, txg: Txg) -> Vec<BlockPtr> {
    st.overrides_closed = st.overrides_closed.max(txg);
    let stale: Vec<usize> = st.overrides.iter().filter(|(_, o)| o.txg <= txg).map(|(&k, _)| k).collect();
    let mut freed = Vec::new();
    for k in stale {
        let o = st.overrides.remove(&k).expect("override present");
        record_alloc(s, &extents(&o.bp));
        free_block(s, st, &o.bp, txg);
        freed.push(o.bp);
    }
    freed
}
