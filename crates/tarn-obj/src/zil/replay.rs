//! The replay driver: hands each record of a claimed chain that is not
//! yet applied to the layer above, in sequence order, recording progress
//! in the same txg as the record's effects, so a crash during replay
//! resumes after the last record whose txg reached disk and never applies
//! one twice.

use std::sync::Arc;

use super::LogPhase;
use crate::pool::Shared;
use crate::{ObjsetId, Result, Tx};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReplayReport {
    /// Records handed to the callback.
    pub replayed: u64,
    /// Records of the chain already applied: in a txg that synced before
    /// the crash, or by an earlier, interrupted replay.
    pub skipped: u64,
    /// Blocks the chain had.
    pub blocks: u64,
}

pub(crate) fn replay(s: &Arc<Shared>, id: ObjsetId, apply: &mut dyn FnMut(&Tx, &super::LogRecord) -> Result<()>) -> Result<ReplayReport> {
    let Some(log) = s.logs.get(id) else { return Ok(ReplayReport::default()) };
    let (records, header, applied, blocks) = {
        let st = log.st.lock();
        // Applied by an earlier call that stopped on an error: in txgs not
        // necessarily synced yet.
        let applied = st.replay_marks.values().copied().max().unwrap_or(0);
        match (&st.claimed, st.phase) {
            (Some(c), LogPhase::Claimed) if st.replay_done_txg.is_none() => (c.records.clone(), c.header, applied, c.blocks.len() as u64),
            _ => return Ok(ReplayReport::default()),
        }
    };
    let mut report = ReplayReport { blocks, ..Default::default() };
    for rec in &records {
        if rec.txg <= header.claim_txg || rec.seq <= header.replay_seq.max(applied) {
            report.skipped += 1;
            continue;
        }
        let tx = crate::pool::begin_tx(s);
        apply(&tx, rec)?;
        {
            let mut st = log.st.lock();
            let m = st.replay_marks.entry(tx.txg).or_insert(0);
            *m = (*m).max(rec.seq);
        }
        s.note_dirty_objset(tx.txg, id);
        drop(tx);
        report.replayed += 1;
    }
    // Done: the sync of this txg frees the chain and starts a new one.
    {
        let tx = crate::pool::begin_tx(s);
        log.st.lock().replay_done_txg = Some(tx.txg);
        s.note_dirty_objset(tx.txg, id);
    }
    crate::pool::sync_and_wait(s)?;
    Ok(report)
}
