//! Import: walk every object set's log chain and claim its blocks before
//! anything else allocates.
//!
//! A block of the chain born at or before the synced txg is already in the
//! space maps (the sync of the txg it was allocated under recorded it);
//! one born later is not, and is claimed: taken out of the free tree, its
//! allocation recorded for the next sync. The walk ends at the first block
//! that does not verify (never written, torn, damaged, or stale from
//! another chain or lap): records after it are discarded, as in ZFS, and
//! the import goes on. That block (the *terminal*) was allocated by the
//! log too; it is kept (claimed if free) as the first block of the chain
//! that follows.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tarn_block::alloc::{Record, RecordKind};
use tarn_block::BlockPtr;

use super::alloc::extents;
use super::format::{self, LogHeader, LogRecord};
use super::{Claimed, LogPhase};
use crate::format::ObjsetPhys;
use crate::objset::ObjsetInner;
use crate::pool::{default_props, Shared, MOS_OBJSET_TABLE};
use crate::{ObjectSet, ObjsetId, Txg};

/// Claims every object set's log (import, before the sync thread runs and
/// before anything allocates). Problems end a chain, never the import.
pub(crate) fn claim_all(s: &Arc<Shared>) {
    let synced = s.synced_txg.load(Ordering::Acquire);
    let mos = ObjectSet { shared: s.clone(), inner: s.mos.clone() };
    let last = s.next_objset.load(Ordering::Relaxed);
    for id in 1..last {
        let mut raw = [0u8; tarn_block::BP_SIZE];
        if mos.read(MOS_OBJSET_TABLE, id * tarn_block::BP_SIZE as u64, &mut raw).is_err() {
            continue;
        }
        let Ok(bp) = BlockPtr::decode(&raw) else { continue };
        if bp.is_hole() {
            continue;
        }
        let phys = match s.io.read(&bp).map_err(|e| e.to_string()).and_then(|d| ObjsetPhys::decode(&d).map_err(|e| e.to_string())) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("tarn: object set {id}: cannot read its root to claim its intent log: {e}");
                continue;
            }
        };
        // A snapshot or clone carries its origin's header: not its log.
        if phys.log.is_empty() || phys.log.owner != id {
            continue;
        }
        // Loaded now, so every sync from here on writes its header (the
        // claim txg above all) even if nobody opens it.
        let log = phys.log;
        s.objsets.lock().entry(ObjsetId(id)).or_insert_with(|| ObjsetInner::new(ObjsetId(id), phys, default_props(), bp));
        claim_one(s, ObjsetId(id), &log, synced);
    }
}

/// Reads block `seq` of chain `chain` at `bp`: the first copy that verifies.
pub(crate) fn read_log_block(s: &Shared, bp: &BlockPtr, chain: u64, seq: u64) -> Option<format::LogBlock> {
    let tops = s.io.tops();
    for d in bp.dvas() {
        let Some(top) = tops.get(d.vdev as usize) else { continue };
        let verify = |b: &[u8]| format::verifies(b, chain, seq);
        if let Ok(out) = top.read_speculative(d.offset, bp.psize as u64, bp.birth, &verify) {
            return format::decode_block(&out.data).ok();
        }
    }
    None
}

/// Takes the extents of `bp` that are free out of the free tree, recording
/// the allocation for the next sync. Returns how many were free, or None
/// if the pointer does not fit the pool (then nothing is taken).
fn claim_block(s: &Shared, bp: &BlockPtr) -> Option<usize> {
    let tops = s.io.tops();
    let mut a = s.io.alloc.lock();
    for d in bp.dvas() {
        let top = tops.get(d.vdev as usize)?;
        let fits = d.offset.checked_add(d.asize as u64).is_some_and(|end| end <= top.asize());
        if !fits || top.alloc_size(bp.psize as u64) != d.asize as u64 || a.vdevs.get(d.vdev as usize).is_none() {
            return None;
        }
    }
    let mut n = 0;
    for e in extents(bp) {
        if a.vdevs[e.vdev as usize].remove_free(e.offset, e.len) {
            a.records.push(Record { kind: RecordKind::Alloc, extent: e });
            n += 1;
        }
    }
    Some(n)
}

/// If every copy of `bp` is on a log vdev that is out of service, the
/// paths of its missing devices.
fn unreachable_on_missing_log(s: &Shared, bp: &BlockPtr) -> Option<String> {
    if bp.is_hole() {
        return None;
    }
    let tops = s.io.tops();
    let mut paths = Vec::new();
    for d in bp.dvas() {
        let top = tops.get(d.vdev as usize)?;
        if !top.is_log() || top.state().usable() {
            return None;
        }
        paths.extend(top.leaves().iter().filter(|l| !l.usable()).map(|l| l.path.clone()));
    }
    Some(paths.join(", "))
}

fn claim_one(s: &Arc<Shared>, id: ObjsetId, header: &LogHeader, synced: Txg) {
    let mut blocks: Vec<BlockPtr> = Vec::new();
    let mut records: Vec<LogRecord> = Vec::new();
    let mut sealed: Vec<Vec<u8>> = Vec::new();
    // A sealed chain's claim tables: (record txg, block) its records name.
    let mut claims: Vec<(Txg, BlockPtr)> = Vec::new();
    let mut bp = header.head;
    let mut seq = header.head_seq;
    let mut last_rec_seq = 0u64;
    let mut seen: Vec<BlockPtr> = Vec::new();
    let mut terminal = BlockPtr::HOLE;
    loop {
        if bp.is_hole() || seen.iter().any(|b| b.dva[0] == bp.dva[0]) {
            break;
        }
        let Some(block) = read_log_block(s, &bp, header.chain, seq) else {
            terminal = bp;
            break;
        };
        // A chain is all sealed or all plain (an object set's encryption
        // never changes); a block of the other kind is not part of it.
        let chain_sealed = !sealed.is_empty();
        if !blocks.is_empty() && block.sealed.is_some() != chain_sealed {
            eprintln!("tarn: object set {}: intent log block {seq} is {}sealed unlike the chain: chain ends there", id.0, if block.sealed.is_some() { "" } else { "not " });
            break;
        }
        // Sequence numbers strictly increase along the chain; a block that
        // breaks that is not part of it. (Those of sealed blocks are
        // checked when they are opened, at replay.)
        if !format::in_sequence(&block.records, &mut last_rec_seq) {
            eprintln!("tarn: object set {}: intent log block {seq} out of sequence: chain ends there", id.0);
            break;
        }
        match claim_block(s, &bp) {
            Some(n) => {
                if n > 0 && bp.birth <= synced {
                    eprintln!("tarn: object set {}: intent log block {seq} (txg {}) was not allocated; claimed", id.0, bp.birth);
                }
            }
            None => {
                eprintln!("tarn: object set {}: intent log block {seq} does not fit the pool: chain ends there", id.0);
                break;
            }
        }
        seen.push(bp);
        blocks.push(bp);
        records.extend(block.records);
        sealed.extend(block.sealed);
        claims.extend(block.claims);
        bp = block.next;
        seq += 1;
    }
    // The terminal becomes the first block of the next chain, unless it
    // is on a log device that is missing (`import -m`): then the records
    // from there on are lost, and the block is freed by the next sync.
    let mut lost: Option<BlockPtr> = None;
    if !terminal.is_hole() && claim_block(s, &terminal).is_none() {
        terminal = BlockPtr::HOLE;
    }
    if let Some(paths) = unreachable_on_missing_log(s, &terminal) {
        let note = format!(
            "object set {}: its intent log goes on at block {seq} on the missing log device {paths}: records from there on, if any, are lost ({} before it are replayed)",
            id.0,
            records.len()
        );
        eprintln!("tarn: {note}");
        s.import_notes.lock().push(note);
        lost = Some(std::mem::replace(&mut terminal, BlockPtr::HOLE));
    }
    let log = s.logs.get_or_create(id);
    let mut st = log.st.lock();
    st.discard.extend(lost);
    st.ahead = terminal;
    st.next_rec_seq = last_rec_seq + 1;
    let open = s.open_txg.load(Ordering::Acquire);
    if blocks.is_empty() {
        // Nothing to replay: a new chain from the terminal.
        st.restart_chain(open);
    } else {
        let mut h = *header;
        if h.claim_txg == 0 {
            h.claim_txg = synced;
        }
        // The blocks of indirect writes the replay will read: their txg
        // never reached disk, so the space maps may not have them.
        // (A sealed chain lists them in the clear: its claim tables.)
        let named = if sealed.is_empty() { format::claims_of(&records) } else { claims };
        let mut indirect = Vec::new();
        for (txg, bp) in named.into_iter().filter(|(txg, _)| *txg > h.claim_txg) {
            if claim_block(s, &bp).is_some() {
                indirect.push(bp);
            } else {
                eprintln!("tarn: object set {}: an intent log record of txg {txg} names a block outside the pool; its replay will fail", id.0);
            }
        }
        st.phase = LogPhase::Claimed;
        st.chain = h.chain;
        st.ahead_seq = seq;
        st.claimed = Some(Claimed { header: h, blocks, records, sealed, indirect });
    }
    drop(st);
    // The next sync writes the header (claim txg, or the new chain).
    s.note_dirty_objset(open, id);
}
