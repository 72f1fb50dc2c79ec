//! The replay driver: hands each record of a claimed chain that is not
//! yet applied to the layer above, in sequence order, recording progress
//! in the same txg as the record's effects, so a crash during replay
//! resumes after the last record whose txg reached disk and never applies
//! one twice.

use std::sync::Arc;

use tarn_block::BlockKeys;

use super::format::{in_sequence, open_sealed};
use super::LogRecord;
use crate::pool::Shared;
use crate::{ObjError, ObjsetId, Result, Tx};

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

/// `keys`: the object set's, when it is encrypted (its chain's blocks are
/// sealed and opened here; without them the replay is refused).
pub(crate) fn replay(
    s: &Arc<Shared>,
    id: ObjsetId,
    keys: Option<&BlockKeys>,
    apply: &mut dyn FnMut(&Tx, &super::LogRecord) -> Result<()>,
) -> Result<ReplayReport> {
    let Some(log) = s.logs.get(id) else { return Ok(ReplayReport::default()) };
    let (mut records, sealed, header, applied, blocks) = {
        let st = log.st.lock();
        // Applied by an earlier call that stopped on an error: in txgs not
        // necessarily synced yet.
        let applied = st.replay_marks.values().copied().max().unwrap_or(0);
        match &st.claimed {
            Some(c) if st.awaits_replay() => (c.records.clone(), c.sealed.clone(), c.header, applied, c.blocks.len() as u64),
            _ => return Ok(ReplayReport::default()),
        }
    };
    if !sealed.is_empty() {
        let keys = keys.ok_or(ObjError::KeyNotLoaded)?;
        records = open_chain(id, keys, &sealed);
        let mut st = log.st.lock();
        let last = records.last().map_or(0, |r| r.seq);
        st.next_rec_seq = st.next_rec_seq.max(last + 1);
    }
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
    finish(s, &log, id)?;
    Ok(report)
}

/// The records of a sealed chain, opened in order: a block that does not
/// authenticate, or records out of sequence, end it (as a damaged block
/// ends a plain chain at the claim).
fn open_chain(id: ObjsetId, keys: &BlockKeys, sealed: &[Vec<u8>]) -> Vec<LogRecord> {
    let mut out: Vec<LogRecord> = Vec::new();
    for (i, b) in sealed.iter().enumerate() {
        let recs = match open_sealed(b, keys, id.0) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("tarn: object set {}: intent log block {} of the chain: {e}: chain ends there", id.0, i + 1);
                break;
            }
        };
        let mut last = out.last().map_or(0, |r| r.seq);
        if !in_sequence(&recs, &mut last) {
            eprintln!("tarn: object set {}: intent log block {} of the chain out of sequence: chain ends there", id.0, i + 1);
            break;
        }
        out.extend(recs);
    }
    out
}

/// Ends a claimed chain without applying what is left of it (a forced
/// receive rolls the object set back to its base anyway; an encrypted one
/// whose key is not loaded cannot open it).
pub(crate) fn discard(s: &Arc<Shared>, id: ObjsetId) -> Result<()> {
    let Some(log) = s.logs.get(id) else { return Ok(()) };
    if !log.st.lock().awaits_replay() {
        return Ok(());
    }
    finish(s, &log, id)
}

/// Done: the sync of this txg frees the chain and starts a new one.
fn finish(s: &Arc<Shared>, log: &super::ObjsetLog, id: ObjsetId) -> Result<()> {
    {
        let tx = crate::pool::begin_tx(s);
        log.st.lock().replay_done_txg = Some(tx.txg);
        s.note_dirty_objset(tx.txg, id);
    }
    crate::pool::sync_and_wait(s)?;
    Ok(())
}
