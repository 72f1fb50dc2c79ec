//! The commit path: committers wait; one writer thread per object set's
//! log packs every pending record into blocks, writes and flushes them
//! (group commit: whoever arrives during a write shares the next one).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tarn_block::{BlockKeys, BlockPtr};

use super::alloc::{alloc_block, VdevClass};
use super::format::{self, LogRecord, BLOCK_HEAD, BLOCK_TAIL, LOG_BLOCK_MAX, LOG_BLOCK_MIN};
use super::{hold, new_chain_id, wait_synced, LiveBlock, LogPhase, LogState, ObjsetLog, Pending};
use crate::pool::Shared;
use crate::redo::Fill;
use crate::{ObjError, ObjsetId, Result, Txg};

/// A log writer with nothing to do for this long exits.
const WRITER_IDLE_EXIT: Duration = Duration::from_secs(5);

/// A batch whose indirect writes (whole blocks, indirect.rs) add up to
/// more than this is made durable by a txg sync instead of the log.
const TXG_INSTEAD_BYTES: usize = 16 << 20;

/// Copies of each log block (the vdev's own redundancy protects it).
const LOG_COPIES: u8 = 1;

pub(crate) fn commit(s: &Arc<Shared>, id: ObjsetId, seq: u64) -> Result<()> {
    commit_log(s, id, seq)?;
    // A change whose record could not be appended is durable only with its txg.
    let needs = s.logs.get(id).map_or(0, |l| l.st.lock().needs_txg);
    if needs > s.synced_txg.load(Ordering::Acquire) {
        wait_synced(s, needs)?;
    }
    Ok(())
}

fn commit_log(s: &Arc<Shared>, id: ObjsetId, seq: u64) -> Result<()> {
    let Some(log) = s.logs.get(id) else { return Ok(()) };
    log.commits.fetch_add(1, Ordering::Relaxed);
    let mut st = log.st.lock();
    if st.phase == LogPhase::Claimed {
        return Err(ObjError::Invalid(format!("the intent log of object set {} awaits replay", id.0)));
    }
    if seq >= st.next_rec_seq {
        return Err(ObjError::Invalid(format!("log sequence {seq} was never appended")));
    }
    if seq <= st.durable_seq {
        return Ok(());
    }
    st.want_seq = st.want_seq.max(seq);
    if !st.writer_running {
        st.writer_running = true;
        let weak = Arc::downgrade(s);
        let l = log.clone();
        let spawned = std::thread::Builder::new().name(format!("tarn-zil-{}", id.0)).spawn(move || writer_thread(weak, l));
        if let Err(e) = spawned {
            st.writer_running = false;
            return Err(ObjError::Io(format!("cannot start the log writer: {e}")));
        }
    }
    log.cv.notify_all();
    loop {
        if st.durable_seq >= seq {
            return Ok(());
        }
        if st.failed_upto >= seq {
            return Err(ObjError::Io(st.failed_msg.clone()));
        }
        if log.stop.load(Ordering::Relaxed) || s.shutdown.load(Ordering::Relaxed) {
            return Err(ObjError::Io("pool is shutting down".into()));
        }
        log.cv.wait_for(&mut st, Duration::from_millis(100));
    }
}

fn writer_thread(weak: Weak<Shared>, log: Arc<ObjsetLog>) {
    loop {
        let batch = {
            let mut st = log.st.lock();
            let idle_since = std::time::Instant::now();
            loop {
                // `stop` first: once the pool is being dropped, this thread
                // must not take a reference that would outlive the drop (and
                // keep the devices open after it returned).
                // An idle writer goes away too (`commit` starts another): a
                // pool with many object sets keeps threads only for busy logs.
                // Wanted records neither pending nor being written were
                // written or retired (their txg is on disk): durable. (The
                // completion below covers this; a writer must never idle
                // out with a committer left waiting.)
                if st.want_seq > st.durable_seq && st.pending.is_empty() && !st.writing && st.failed_upto <= st.durable_seq {
                    st.mark_durable();
                    log.cv.notify_all();
                }
                let work = st.want_seq > st.durable_seq && !st.pending.is_empty() && !st.writing;
                let idle = !work && idle_since.elapsed() > WRITER_IDLE_EXIT;
                let gone = log.stop.load(Ordering::Relaxed)
                    || idle
                    || weak.strong_count() == 0
                    || weak.upgrade().is_none_or(|s| s.shutdown.load(Ordering::Relaxed));
                if gone {
                    st.writer_running = false;
                    log.cv.notify_all();
                    return;
                }
                if work {
                    break;
                }
                log.cv.wait_for(&mut st, Duration::from_millis(100));
            }
            st.writing = true;
            let batch = std::mem::take(&mut st.pending);
            st.inflight_from = batch.first().map_or(0, |p| p.rec.seq);
            batch
        };
        let Some(s) = weak.upgrade() else {
            let mut st = log.st.lock();
            st.writing = false;
            st.writer_running = false;
            log.cv.notify_all();
            return;
        };
        let upto = batch.last().map_or(0, |p| p.rec.seq);
        let result = make_durable(&s, &log, batch);
        // Let go of the pool before waking committers: the last of them may
        // drop it at once, and the devices must close then, not later here.
        drop(s);
        let mut st = log.st.lock();
        st.writing = false;
        st.inflight_from = 0;
        match result {
            Ok(()) => {
                // Records appended after this batch was taken and retired
                // meanwhile (their txg reached disk) left the pending list
                // without being written: they are durable too. Without
                // this, a committer waiting for one would wait for the
                // next txg (an hour away with a long `txg_timeout`).
                st.mark_durable();
                assert!(st.durable_seq >= upto, "a written batch up to {upto} not counted durable");
            }
            Err(e) => {
                st.failed_upto = upto;
                st.failed_msg = format!("intent log write failed: {e}");
            }
        }
        log.cv.notify_all();
    }
}

/// Makes `batch` durable: written to the log, or by a txg sync when that
/// is the cheaper way or the only one left.
fn make_durable(s: &Arc<Shared>, log: &ObjsetLog, batch: Vec<Pending>) -> Result<()> {
    let indirect: usize = batch.iter().flat_map(|p| p.fills.iter()).map(|f| f.block.len()).sum();
    let spliced: usize = batch.iter().flat_map(|p| p.splices.iter()).map(|b| b.block.len()).sum();
    if indirect + spliced > TXG_INSTEAD_BYTES {
        // Much data to write (an fsync after a bulk write, an NFS COMMIT,
        // an NBD FLUSH): a txg sync streams it and its tree at the pool's
        // full rate, where the log would write it block by block with a
        // device flush each. The sync makes every record of the batch
        // durable (all are of txgs up to the open one).
        log.txg_instead.fetch_add(1, Ordering::Relaxed);
        return crate::pool::sync_and_wait(s).map(|_| ());
    }
    let written = log.keys(s).and_then(|keys| {
        let recs = fill(s, log, batch, keys.as_deref())?;
        write_batch(s, log, &recs, keys.as_deref())
    });
    written.or_else(|e| {
        // The log could not take it: make the records durable the slow
        // way (a txg sync covers every record appended before it) and
        // throw the chain away at that sync.
        eprintln!("tarn: intent log of object set {}: {e}; falling back to a txg sync", log.id.0);
        crate::pool::sync_and_wait(s).map(|_| ())
    })
}

/// Completes the batch's records: writes the blocks of their indirect
/// writes (indirect.rs; each durable before this returns, so a record is
/// never durable before the block it names) and puts the pointers in
/// (copied bytes are in the payloads since the notes' flush; whole blocks
/// of small writes are spliced in here, redo.rs).
/// The blocks are written in parallel: each waits for its own durable
/// write, and a 1 MiB sync write is eight of them.
fn fill(s: &Shared, log: &ObjsetLog, batch: Vec<Pending>, keys: Option<&BlockKeys>) -> Result<Vec<LogRecord>> {
    let jobs: Vec<(usize, &Fill, Txg)> =
        batch.iter().enumerate().flat_map(|(i, p)| p.fills.iter().map(move |f| (i, f, p.rec.txg))).collect();
    let bps = crate::par::par_map(&jobs, |&(_, f, txg)| super::indirect::write_block(s, log, &f.block, f.spec, keys, txg));
    let mut placed: Vec<(usize, usize, BlockPtr)> = Vec::with_capacity(jobs.len());
    for (&(i, f, _), bp) in jobs.iter().zip(bps) {
        placed.push((i, f.at, bp?));
    }
    let mut out: Vec<LogRecord> = batch
        .into_iter()
        .map(|p| {
            let mut rec = p.rec;
            if !p.splices.is_empty() {
                rec.payload = crate::redo::assemble(&rec.payload, &p.splices);
            }
            rec
        })
        .collect();
    for (i, at, bp) in placed {
        if let Some(rec) = out.get_mut(i) {
            rec.payload[at..at + tarn_block::BP_SIZE].copy_from_slice(&bp.encode());
        }
    }
    Ok(out)
}

/// How many of the records whose footprints are `sizes` fit, in order,
/// into a block of `psize` (`sealed`: with a claim table).
fn fit(sizes: &[usize], psize: usize, sealed: bool) -> usize {
    let capacity = format::capacity_for(psize, sealed);
    let mut used = 0;
    let mut n = 0;
    for len in sizes {
        if used + len > capacity {
            break;
        }
        used += len;
        n += 1;
    }
    n
}

/// A block size holding `bytes` of records, in sectors, within the limits.
fn block_size_for(s: &Shared, bytes: usize) -> u64 {
    let want = (bytes + BLOCK_HEAD + BLOCK_TAIL).clamp(LOG_BLOCK_MIN, LOG_BLOCK_MAX);
    s.io.psize_for(want).min(LOG_BLOCK_MAX as u64)
}

/// Writes `batch` as blocks of the chain, each durable when its write
/// returns (`TopVdev::write_durable`: no flush of the whole device, which
/// would wait for every block a txg sync has written meanwhile). The
/// writer holds the open txg meanwhile (see mod.rs), opening the chain
/// first if there is none; it waits for the header's txg when the chain
/// is new. `sealing`: an encrypted object set's keys, which seal its
/// records.
fn write_batch(s: &Arc<Shared>, log: &ObjsetLog, batch: &[LogRecord], sealing: Option<&BlockKeys>) -> Result<()> {
    if s.suspended.is_set() {
        return Err(ObjError::Io("pool is suspended".into()));
    }
    let tx = hold(s);
    let txg = tx.txg;
    s.note_dirty_objset(txg, log.id);
    // Snapshot what the write needs; only this thread moves `ahead`.
    let (chain, mut cur, mut seq, header_txg) = {
        let mut st = log.st.lock();
        if st.phase == LogPhase::Closed {
            open_chain(s, &mut st, txg, batch)?;
        }
        (st.chain, st.ahead, st.ahead_seq, st.header_txg)
    };
    let sealed = sealing.is_some();
    // Each record's bytes in a block (a sealed one's claim entries too),
    // worked out once: a sealed record's takes decoding its payload.
    let sizes: Vec<usize> = batch.iter().map(|r| format::footprint(r, sealed)).collect();
    if let Some(i) = sizes.iter().position(|&len| len > format::capacity_for(LOG_BLOCK_MAX, sealed)) {
        return Err(ObjError::Invalid(format!("log record {} does not fit a log block", batch[i].seq)));
    }
    let bytes_of = |sizes: &[usize]| -> usize { sizes.iter().sum::<usize>() + if sealed { format::CLAIM_HEAD } else { 0 } };
    let total = bytes_of(&sizes);
    let mut written: Vec<LiveBlock> = Vec::new();
    // Blocks allocated by this batch (each written block's `next`).
    let mut allocated: Vec<BlockPtr> = Vec::new();
    let mut i = 0;
    let mut last_seq_written = 0u64;
    while i < batch.len() {
        let n = fit(&sizes[i..], cur.psize as usize, sealed);
        let rest = if i + n < batch.len() { bytes_of(&sizes[i + n..]) } else { 0 };
        let next_size = if rest > 0 {
            // Enough for the rest (or, if one record did not fit, for it).
            block_size_for(s, rest)
        } else {
            block_size_for(s, total)
        };
        let next = {
            let mut st = log.st.lock();
            let r = alloc_block(s, &mut st, next_size, LOG_COPIES, VdevClass::Log, txg);
            match r {
                Ok(bp) => bp,
                Err(e) => {
                    abandon(&mut st, &allocated);
                    return Err(e);
                }
            }
        };
        allocated.push(next);
        let recs = &batch[i..i + n];
        for r in recs {
            assert!(r.seq > last_seq_written, "log records out of sequence: {} after {last_seq_written}", r.seq);
            last_seq_written = r.seq;
        }
        let data = match sealing {
            None => format::encode_block(cur.psize as usize, chain, seq, recs, &next),
            Some(keys) => match format::encode_block_sealed(cur.psize as usize, chain, seq, recs, &next, keys, log.id.0) {
                Ok(d) => d,
                Err(e) => {
                    abandon(&mut log.st.lock(), &allocated);
                    return Err(e);
                }
            },
        };
        let tops = s.io.tops();
        let mut ok = false;
        let mut errors = Vec::new();
        for d in cur.dvas() {
            match tops.get(d.vdev as usize) {
                Some(top) => match top.write_durable(d.offset, &data, cur.birth.max(txg)) {
                    Ok(()) => ok = true,
                    Err(e) => errors.push(e.to_string()),
                },
                None => errors.push(format!("no vdev {}", d.vdev)),
            }
        }
        written.push(LiveBlock { bp: cur, seq, max_txg: recs.iter().map(|r| r.txg).max().unwrap_or(0) });
        if !ok {
            abandon(&mut log.st.lock(), &allocated);
            return Err(ObjError::Io(format!("log block write: {}", errors.join("; "))));
        }
        cur = next;
        seq += 1;
        i += n;
    }
    drop(tx);
    log.writes.fetch_add(1, Ordering::Relaxed);
    log.blocks_written.fetch_add(written.len() as u64, Ordering::Relaxed);
    {
        let mut st = log.st.lock();
        if let Some(last) = st.live.back() {
            assert!(written.first().is_none_or(|w| w.seq == last.seq + 1), "log block sequence broken");
        }
        st.live.extend(written);
        st.ahead = cur;
        st.ahead_seq = seq;
        st.last_batch_bytes = total;
    }
    // A new chain counts only once the header naming it is on disk.
    if header_txg > s.synced_txg.load(Ordering::Acquire) {
        wait_synced(s, header_txg)?;
    }
    Ok(())
}

/// Starts a chain: a new identity and its first block allocated ahead.
/// The header naming it is written by the sync of `txg`.
fn open_chain(s: &Shared, st: &mut LogState, txg: Txg, batch: &[LogRecord]) -> Result<()> {
    let bytes: usize = batch.iter().map(LogRecord::framed_len).sum();
    let size = block_size_for(s, bytes);
    let first = alloc_block(s, st, size, LOG_COPIES, VdevClass::Log, txg)?;
    st.phase = LogPhase::Open;
    st.chain = new_chain_id();
    st.ahead = first;
    st.ahead_seq = 1;
    st.header_txg = txg;
    Ok(())
}

/// A write failed: the chain is given up. Its blocks (and those this
/// batch allocated) are freed by the next sync, which also clears the
/// header; the next commit starts a new chain.
fn abandon(st: &mut LogState, allocated: &[BlockPtr]) {
    st.discard.extend(allocated.iter().copied());
    let live: Vec<BlockPtr> = st.live.drain(..).map(|b| b.bp).collect();
    st.discard.extend(live);
    if !st.ahead.is_hole() {
        let a = std::mem::replace(&mut st.ahead, BlockPtr::HOLE);
        st.discard.push(a);
    }
    st.phase = LogPhase::Closed;
    st.chain = 0;
}
