//! The log's part of a txg sync (syncing context): hand over held-back
//! allocation records, retire records the txg covers, free what they
//! leave empty, record replay progress, and write the header.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tarn_block::BlockPtr;

use super::alloc::{extents, free_block, release_withheld};
use super::format::LogHeader;
use super::{LogPhase, LogState};
use crate::pool::{Shared, SyncTx};
use crate::{ObjsetId, Txg};

/// Called by the sync of a txg for object set `id`, just before its phys
/// is encoded: sets `header` to what this txg makes durable.
pub(crate) fn sync_objset_log(s: &Arc<Shared>, stx: &SyncTx, id: ObjsetId, header: &mut LogHeader) {
    stx.check();
    let txg = stx.txg();
    let Some(log) = s.logs.get(id) else { return };
    let mut guard = log.st.lock();
    let st = &mut *guard;
    // Blocks allocated under txgs up to this one are on disk (their writer
    // held that txg until their flush): their space becomes allocated in
    // this txg's space map, alongside the header that names them.
    release_withheld(s, st, &|t, _| t <= txg);
    let mut freed: Vec<BlockPtr> = std::mem::take(&mut st.discard);
    for bp in &freed {
        free_block(s, st, bp, txg);
    }
    // The txg's blocks are written: indirect blocks it did not adopt go.
    freed.extend(super::indirect::close_txg(s, st, txg));
    match st.phase {
        LogPhase::Closed => *header = LogHeader::default(),
        LogPhase::Claimed => {
            let done = st.replay_done_txg.is_some_and(|d| d <= txg);
            let marks: Vec<Txg> = st.replay_marks.range(..=txg).map(|(&t, _)| t).collect();
            let mut best = 0;
            for t in marks {
                best = best.max(st.replay_marks.remove(&t).unwrap_or(0));
            }
            let Some(c) = st.claimed.as_mut() else { return };
            c.header.replay_seq = c.header.replay_seq.max(best);
            let h = c.header;
            if !done {
                *header = h;
                return;
            }
            // Replay finished in a txg now syncing: the old chain goes, a
            // new one starts at the block the old one would have used next.
            let blocks = std::mem::take(&mut c.blocks);
            let indirect = std::mem::take(&mut c.indirect);
            st.claimed = None;
            for bp in &indirect {
                free_block(s, st, bp, txg);
            }
            st.replay_done_txg = None;
            for bp in &blocks {
                free_block(s, st, bp, txg);
            }
            freed.extend(blocks);
            st.restart_chain(txg);
            *header = if st.chain == 0 {
                LogHeader::default()
            } else {
                LogHeader { head: st.ahead, head_seq: 1, chain: st.chain, owner: id.0, claim_txg: 0, replay_seq: 0 }
            };
        }
        LogPhase::Open => {
            // Retire: blocks at the head whose records all belong to synced txgs.
            while st.live.front().is_some_and(|b| b.max_txg <= txg) {
                let b = st.live.pop_front().expect("front exists");
                free_block(s, st, &b.bp, txg);
                freed.push(b.bp);
            }
            let (head, head_seq) = match st.live.front() {
                Some(b) => (b.bp, b.seq),
                None => (st.ahead, st.ahead_seq),
            };
            *header = LogHeader { head, head_seq, chain: st.chain, owner: id.0, claim_txg: 0, replay_seq: 0 };
        }
    }
    if !header.is_empty() {
        assert!(!header.head.is_hole(), "log header of object set {} names no block", id.0);
        let head = extents(&header.head);
        let names_freed = freed.iter().any(|bp| extents(bp).iter().any(|e| head.contains(e)));
        assert!(!names_freed, "log header of object set {} names a block freed in txg {txg}", id.0);
    }
}

/// After txg `txg` is on disk (its uberblock flushed, not merely being
/// written: a record retired earlier could be acknowledged by a commit and
/// then lost with a txg the power cut took): records of txgs up to `txg`
/// still waiting for a commit never need a log block, so they are dropped,
/// and every sequence number below the first record still unwritten counts
/// as durable.
pub(crate) fn after_sync(s: &Shared, txg: Txg) {
    assert!(s.synced_txg.load(Ordering::Acquire) >= txg, "log records retired before txg {txg} is on disk");
    for log in s.logs.all() {
        retire_pending(&mut log.st.lock(), txg);
        log.cv.notify_all();
    }
}

fn retire_pending(st: &mut LogState, txg: Txg) {
    st.pending.retain(|p| p.rec.txg > txg);
    st.mark_durable();
}

/// The object set is destroyed (or rolled back) in the txg being synced:
/// its log goes with it.
pub(crate) fn destroy_objset_log(s: &Arc<Shared>, stx: &SyncTx, id: ObjsetId) {
    stx.check();
    let txg = stx.txg();
    let Some(log) = s.logs.remove(id) else { return };
    log.stop.store(true, Ordering::Relaxed);
    log.cv.notify_all();
    let mut guard = log.st.lock();
    let st = &mut *guard;
    let mut doomed: Vec<BlockPtr> = std::mem::take(&mut st.discard);
    doomed.extend(st.live.drain(..).map(|b| b.bp));
    if !st.ahead.is_hole() {
        doomed.push(std::mem::replace(&mut st.ahead, BlockPtr::HOLE));
    }
    if let Some(c) = st.claimed.take() {
        doomed.extend(c.blocks);
        doomed.extend(c.indirect);
    }
    let overrides: Vec<BlockPtr> = st.overrides.drain().map(|(_, o)| o.bp).collect();
    for bp in &overrides {
        super::alloc::record_alloc(s, &extents(bp));
    }
    doomed.extend(overrides);
    for bp in &doomed {
        free_block(s, st, bp, txg);
    }
    release_withheld(s, st, &|_, _| true);
    st.phase = LogPhase::Closed;
}
