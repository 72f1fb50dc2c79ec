//! The intent log: per object set, a chain of self-checksummed log blocks
//! that makes records durable without waiting for a txg.
//!
//! Big theory:
//! - `append` (cheap, in memory) gives a record the next sequence number
//!   and the txg of the caller's `Tx`; `commit(seq)` hands every pending
//!   record to the object set's log writer thread, which packs them into
//!   log blocks, writes them, flushes the devices written and wakes every
//!   committer whose record is now durable. Committers that arrive while a
//!   write is in flight share the next one (group commit).
//! - Each written block names the next block, allocated ahead. Its
//!   checksum cannot be in the pointer (the block was allocated before its
//!   contents existed), so each block carries its own checksum and the
//!   chain identity and its sequence number; the reader demands all three.
//!   A block that does not verify ends the chain.
//! - Log blocks are allocated outside syncing context, so their space map
//!   records are held back (`withheld`, tagged with the txg the writer
//!   holds open while it writes) and handed to the allocator by the sync of
//!   that txg, together with the header that names them. The writer keeps
//!   that txg open until its write is flushed, so a txg never reaches disk
//!   allocating a log block whose contents are not durable.
//! - The header (in the object set's phys, written by every sync of it)
//!   names the first block still holding an unretired record. A sync of txg
//!   T retires records of txgs <= T (their effects are in T): it frees the
//!   blocks at the head whose records are all retired, in txg T.
//! - Import walks each chain from its header and *claims* the blocks the
//!   space maps do not have yet (born after the last synced txg), before
//!   anything else allocates. The chain then waits in `Claimed` until the
//!   layer above calls `replay`, which applies each record with txg above
//!   the claim txg and seq above the replayed seq, recording progress in
//!   the txg that applies it (idempotent across a crash), then frees the
//!   chain and starts a new one (new identity) with a normal txg sync.
//!
//! Invariants (release assertions):
//! - A record's txg is above the synced txg when appended (the caller
//!   holds its `Tx`).
//! - Sequence numbers strictly increase along the chain (records and
//!   blocks).
//! - The header never names a freed block.
//!
//! Lock order: txg hold (Tx) -> `ObjsetLog::st` -> allocator. `commit`
//! and `replay` must not be called while holding a `Tx`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use tarn_block::{BlockPtr, Extent};

use crate::pool::Shared;
use crate::{ObjError, ObjectSet, ObjsetId, Result, Tx, Txg};

pub(crate) mod alloc;
mod claim;
pub mod format;
mod indirect;
mod replay;
mod scan;
mod sync;
mod writer;

pub use alloc::VdevClass;
pub use format::{LogHeader, LogRecord, RECORD_PAYLOAD_MAX};
pub(crate) use format::{CLAIM_ENTRY, CLAIM_HEAD};
pub use replay::ReplayReport;
pub(crate) use claim::{claim_all, read_log_block};
pub(crate) use indirect::adopt;
pub(crate) use scan::scan_live;
pub(crate) use sync::{after_sync, destroy_objset_log, sync_objset_log};

/// Whole blocks larger than this are written once as ordinary blocks and
/// their records carry pointers (`logbias=latency`; with `throughput`,
/// every whole block). OpenZFS's `zfs_immediate_write_sz`, 32 KiB.
pub const IMMEDIATE_WRITE_MAX: usize = 32 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum LogPhase {
    /// No chain (the header says no log): the first commit opens one.
    Closed,
    /// A chain being written.
    Open,
    /// Found at import with records to replay; appends are refused until
    /// `replay` has run.
    Claimed,
}

/// A written, durable block of the open chain.
#[derive(Clone, Debug)]
pub(crate) struct LiveBlock {
    pub bp: BlockPtr,
    pub seq: u64,
    /// Newest txg of its records (0: none): retired once that txg synced.
    pub max_txg: Txg,
}

/// An appended record and the blocks the writer writes for it (redo.rs).
pub(crate) struct Pending {
    pub rec: LogRecord,
    pub fills: Vec<crate::redo::Fill>,
    /// Whole blocks whose bytes go into `rec.payload` at commit (until
    /// then the payload lacks them: `redo::assemble`).
    pub splices: Vec<crate::redo::Splice>,
    /// Its bytes, counted as dirty memory until it is written or retired.
    pub _held: PendingBytes,
}

/// Bytes of records waiting in a pool's logs: added when a record is
/// appended, taken off when the guard drops (the record written, retired
/// by its txg's sync, or dropped with its log), whatever the path.
pub(crate) struct PendingBytes {
    counter: Arc<AtomicU64>,
    bytes: u64,
}

impl Drop for PendingBytes {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// A chain found at import, waiting for replay.
pub(crate) struct Claimed {
    pub header: LogHeader,
    pub blocks: Vec<BlockPtr>,
    pub records: Vec<LogRecord>,
    /// The chain's blocks as read, when they are sealed (an encrypted
    /// object set's log): their records are opened at replay, with the key.
    /// A chain is all sealed (`records` empty) or all plain.
    pub sealed: Vec<Vec<u8>>,
    /// Blocks of indirect writes among the records to replay (freed with
    /// the chain).
    pub indirect: Vec<BlockPtr>,
}

pub(crate) struct LogState {
    pub phase: LogPhase,
    pub chain: u64,
    /// The block the next write goes to (allocated, not yet written) and
    /// the sequence number it will carry.
    pub ahead: BlockPtr,
    pub ahead_seq: u64,
    pub live: VecDeque<LiveBlock>,
    /// The chain is usable for acknowledgements once this txg synced (the
    /// header naming it is on disk).
    pub header_txg: Txg,
    pub next_rec_seq: u64,
    /// Appended, not yet handed to the writer (in sequence order). A sync
    /// drops those of the txgs it wrote: they need no log block.
    pub pending: Vec<Pending>,
    /// First sequence number of the batch being written (0: none).
    pub inflight_from: u64,
    /// A record could not be appended in this txg: commits wait for its
    /// sync instead (the change is in it).
    pub needs_txg: Txg,
    pub durable_seq: u64,
    pub want_seq: u64,
    pub writing: bool,
    pub writer_running: bool,
    /// A batch up to this seq failed and its fallback sync too.
    pub failed_upto: u64,
    pub failed_msg: String,
    /// Space map records of log blocks not yet handed to the allocator:
    /// extent -> txg the block was allocated under. A map: a sync frees
    /// thousands of retired blocks while thousands of the open txg's are
    /// withheld, and a list searched (and rebuilt) per freed block was 5%
    /// of the daemon's time in fsync-heavy writes, under the log's lock.
    pub withheld: BTreeMap<Extent, Txg>,
    /// Blocks to free at the next sync (a failed batch's, indirect blocks
    /// registered too late to be adopted).
    pub discard: Vec<BlockPtr>,
    /// Indirect blocks written for records, waiting for their txg's sync
    /// (indirect.rs).
    pub overrides: indirect::Overrides,
    /// Syncs of txgs up to this one have gone past their overrides.
    pub overrides_closed: Txg,
    pub claimed: Option<Claimed>,
    /// Replay progress: txg -> highest seq applied in it.
    pub replay_marks: BTreeMap<Txg, u64>,
    pub replay_done_txg: Option<Txg>,
    /// Record bytes of the last batch (sizes the next block allocated).
    pub last_batch_bytes: usize,
}

impl LogState {
    /// A chain found at import waits for `replay` (or `discard`).
    pub fn awaits_replay(&self) -> bool {
        self.phase == LogPhase::Claimed && self.claimed.is_some() && self.replay_done_txg.is_none()
    }

    /// Raises `durable_seq` to the record before the first one that is
    /// neither written nor retired (pending, or in the batch being
    /// written): every record below it reached a log block that was
    /// flushed, or a txg that is on disk. (The writer after a batch, an
    /// idle writer, and `after_sync` all count this way.)
    pub fn mark_durable(&mut self) {
        let first_unwritten = [self.pending.first().map(|p| p.rec.seq), (self.inflight_from > 0).then_some(self.inflight_from)].into_iter().flatten().min();
        let bound = first_unwritten.map_or(self.next_rec_seq - 1, |f| f - 1);
        self.durable_seq = self.durable_seq.max(bound);
    }

    /// A new chain starting at `ahead` (a new identity: a stale block of
    /// the old chain at a reused address must never verify), usable once
    /// `header_txg` has synced; closed when there is no block ahead.
    pub fn restart_chain(&mut self, header_txg: Txg) {
        if self.ahead.is_hole() {
            self.phase = LogPhase::Closed;
            self.chain = 0;
        } else {
            self.phase = LogPhase::Open;
            self.chain = new_chain_id();
            self.ahead_seq = 1;
            self.header_txg = header_txg;
        }
    }
}

/// The intent log of one object set.
pub(crate) struct ObjsetLog {
    pub id: ObjsetId,
    pub st: Mutex<LogState>,
    /// Committers wait here for `durable_seq`; the writer for work.
    pub cv: Condvar,
    pub stop: AtomicBool,
    pub commits: AtomicU64,
    pub writes: AtomicU64,
    pub blocks_written: AtomicU64,
    /// Indirect writes: blocks written for records, and those adopted.
    pub indirect_written: AtomicU64,
    /// Batches made durable by a txg sync instead (writer.rs).
    pub txg_instead: AtomicU64,
    pub indirect_adopted: AtomicU64,
    /// The object set's encryption, fixed by its first append: the writer
    /// seals the blocks of an encrypted one.
    pub crypt: std::sync::OnceLock<Option<crate::crypt::Crypt>>,
}

impl ObjsetLog {
    /// The keys that seal this log's blocks and the blocks its records
    /// name: None for an unencrypted object set; `KeyNotLoaded` when its
    /// key is not loaded (the batch fails: the fallback txg sync covers it).
    pub(crate) fn keys(&self, s: &Shared) -> Result<Option<Arc<tarn_block::BlockKeys>>> {
        match self.crypt.get().copied().flatten() {
            Some(c) => Ok(Some(s.keys.get(c.key_guid).ok_or(ObjError::KeyNotLoaded)?)),
            None => Ok(None),
        }
    }

    fn new(id: ObjsetId) -> ObjsetLog {
        ObjsetLog {
            id,
            st: Mutex::new(LogState {
                phase: LogPhase::Closed,
                chain: 0,
                ahead: BlockPtr::HOLE,
                ahead_seq: 0,
                live: VecDeque::new(),
                header_txg: 0,
                next_rec_seq: 1,
                pending: Vec::new(),
                inflight_from: 0,
                needs_txg: 0,
                durable_seq: 0,
                want_seq: 0,
                writing: false,
                writer_running: false,
                failed_upto: 0,
                failed_msg: String::new(),
                withheld: BTreeMap::new(),
                discard: Vec::new(),
                overrides: Default::default(),
                overrides_closed: 0,
                claimed: None,
                replay_marks: BTreeMap::new(),
                replay_done_txg: None,
                last_batch_bytes: 0,
            }),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            commits: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            blocks_written: AtomicU64::new(0),
            indirect_written: AtomicU64::new(0),
            txg_instead: AtomicU64::new(0),
            indirect_adopted: AtomicU64::new(0),
            crypt: std::sync::OnceLock::new(),
        }
    }
}

/// The logs of a pool's object sets (created on first use or at import).
#[derive(Default)]
pub(crate) struct PoolLogs {
    map: Mutex<HashMap<ObjsetId, Arc<ObjsetLog>>>,
    /// Bytes of the records of every log waiting for a commit or for their
    /// txg: memory of changes not yet written, like dirty blocks (the
    /// throttle counts both, `Shared::dirty_total`).
    pending_bytes: Arc<AtomicU64>,
}

impl PoolLogs {
    pub fn pending_bytes(&self) -> u64 {
        self.pending_bytes.load(Ordering::Relaxed)
    }

    /// Counts `bytes` of a record until the guard drops.
    fn hold_bytes(&self, bytes: u64) -> PendingBytes {
        self.pending_bytes.fetch_add(bytes, Ordering::Relaxed);
        PendingBytes { counter: self.pending_bytes.clone(), bytes }
    }

    pub fn get(&self, id: ObjsetId) -> Option<Arc<ObjsetLog>> {
        self.map.lock().get(&id).cloned()
    }

    pub fn get_or_create(&self, id: ObjsetId) -> Arc<ObjsetLog> {
        self.map.lock().entry(id).or_insert_with(|| Arc::new(ObjsetLog::new(id))).clone()
    }

    pub fn remove(&self, id: ObjsetId) -> Option<Arc<ObjsetLog>> {
        self.map.lock().remove(&id)
    }

    pub fn all(&self) -> Vec<Arc<ObjsetLog>> {
        self.map.lock().values().cloned().collect()
    }
}

/// Stops every log writer (export, pool shutdown).
pub(crate) fn stop(s: &Shared) {
    for log in s.logs.all() {
        log.stop.store(true, Ordering::Relaxed);
        log.cv.notify_all();
    }
}

/// Blocks the logs hold in memory (live, ahead, a claimed chain, blocks
/// waiting to be freed): what `check` adds to the reachable set.
pub(crate) fn blocks_in_use(s: &Shared) -> Vec<BlockPtr> {
    let mut out = Vec::new();
    for log in s.logs.all() {
        let st = log.st.lock();
        out.extend(st.live.iter().map(|b| b.bp));
        out.extend(st.discard.iter().copied());
        out.extend(st.overrides.values().map(|o| o.bp));
        if !st.ahead.is_hole() {
            out.push(st.ahead);
        }
        if let Some(c) = &st.claimed {
            out.extend(c.blocks.iter().copied());
            out.extend(c.indirect.iter().copied());
        }
    }
    out
}

/// What a log looks like from outside (tests, `debug` output).
#[derive(Clone, Debug)]
pub struct LogStats {
    pub phase: LogPhase,
    pub chain: u64,
    /// `commit` calls.
    pub commits: u64,
    /// Log writes (each one batch of blocks and one flush).
    pub writes: u64,
    pub blocks_written: u64,
    /// Data blocks written once for records (indirect writes), and how
    /// many of them a txg adopted instead of writing its own.
    pub indirect_written: u64,
    pub indirect_adopted: u64,
    /// Commits whose batch held more whole blocks than the log writes
    /// (16 MiB) and that a txg sync made durable instead.
    pub txg_instead: u64,
    /// Written blocks not yet retired.
    pub live_blocks: u64,
    pub durable_seq: u64,
    /// Block pointers of the live blocks, oldest first (and the claimed
    /// chain while one waits for replay).
    pub chain_blocks: Vec<BlockPtr>,
    /// Blocks of indirect writes the import claimed for the replay.
    pub claimed_indirect: Vec<BlockPtr>,
}

impl ObjectSet {
    /// Appends a record to this object set's intent log, tagged with the
    /// txg of `tx` (the txg whose changes the record describes); returns
    /// its sequence number. Cheap: nothing is written until `log_commit`.
    pub fn log_append(&self, tx: &Tx, rtype: u32, payload: &[u8]) -> Result<u64> {
        let rec = crate::redo::Encoded { payload: payload.to_vec(), ..Default::default() };
        self.log_append_filled(tx, rtype, rec)
    }

    /// `log_append` of a record whose `fills` ranges the writer reads from
    /// the object set when it writes the record.
    pub(crate) fn log_append_filled(&self, tx: &Tx, rtype: u32, rec: crate::redo::Encoded) -> Result<u64> {
        let s = &self.shared;
        if s.readonly || self.inner.readonly.load(Ordering::Relaxed) {
            return Err(ObjError::ReadOnly);
        }
        if rtype == 0 {
            return Err(ObjError::Invalid("log record type 0 is reserved".into()));
        }
        if rec.len() > RECORD_PAYLOAD_MAX {
            return Err(ObjError::Invalid(format!("log record of {} bytes (at most {RECORD_PAYLOAD_MAX})", rec.len())));
        }
        let len = rec.len();
        let crate::redo::Encoded { payload, fills, splices, .. } = rec;
        let synced = s.synced_txg.load(Ordering::Acquire);
        assert!(tx.txg > synced, "log record appended in txg {} but txg {synced} already synced", tx.txg);
        let log = s.logs.get_or_create(self.inner.id);
        let crypt = *log.crypt.get_or_init(|| self.inner.crypt);
        assert_eq!(crypt, self.inner.crypt, "object set {}: its log's encryption changed", self.inner.id.0);
        let seq = {
            let mut st = log.st.lock();
            if st.phase == LogPhase::Claimed {
                return Err(ObjError::Invalid(format!("the intent log of object set {} awaits replay", self.inner.id.0)));
            }
            let seq = st.next_rec_seq;
            st.next_rec_seq += 1;
            // Spliced blocks count too: the txg's dirty data lets go of a
            // block the same range is written over again, the record not.
            let held = s.logs.hold_bytes((len + format::RECORD_HEAD) as u64);
            st.pending.push(Pending { rec: LogRecord { rtype, txg: tx.txg, seq, payload }, fills, splices, _held: held });
            seq
        };
        s.dirty_grew();
        // The sync of this txg retires the record and rewrites the header.
        s.note_dirty_objset(tx.txg, self.inner.id);
        Ok(seq)
    }

    /// Makes every record up to `seq` durable (written to log blocks and
    /// flushed), then returns. Must not be called while holding a `Tx`.
    pub fn log_commit(&self, seq: u64) -> Result<()> {
        writer::commit(&self.shared, self.inner.id, seq)
    }

    /// `log_commit` of every record appended so far (nothing to do without
    /// a log or records).
    pub fn log_commit_all(&self) -> Result<()> {
        let Some(log) = self.shared.logs.get(self.inner.id) else { return Ok(()) };
        let (last, needs) = {
            let st = log.st.lock();
            (st.next_rec_seq - 1, st.needs_txg)
        };
        if last == 0 {
            // No record ever appended: changes that could not append one
            // are durable with their txg.
            if needs > self.shared.synced_txg.load(Ordering::Acquire) {
                wait_synced(&self.shared, needs)?;
            }
            return Ok(());
        }
        writer::commit(&self.shared, self.inner.id, last)
    }

    /// A change of `tx` has no record (its append failed): commits from now
    /// on wait for the sync of `tx`'s txg instead.
    pub(crate) fn log_needs_sync(&self, tx: &Tx) {
        let log = self.shared.logs.get_or_create(self.inner.id);
        let mut st = log.st.lock();
        st.needs_txg = st.needs_txg.max(tx.txg);
    }

    /// Replays a chain found at import: `apply` gets each record not yet
    /// applied (txg above the claim txg, seq above the replayed seq), in
    /// sequence order, with a `Tx` whose txg also records the progress.
    /// Afterwards the chain is freed and a txg synced. Without a chain to
    /// replay it does nothing. Must not be called while holding a `Tx`.
    pub fn log_replay(&self, apply: &mut dyn FnMut(&Tx, &LogRecord) -> Result<()>) -> Result<ReplayReport> {
        // Only a chain of sealed blocks needs the key (asked for then).
        let keys = match self.inner.keys(&self.shared) {
            Ok(k) => k,
            Err(ObjError::KeyNotLoaded) => None,
            Err(e) => return Err(e),
        };
        replay::replay(&self.shared, self.inner.id, keys.as_deref(), apply)
    }

    /// Whether a chain found at import waits for `log_replay`.
    pub fn log_awaits_replay(&self) -> bool {
        self.shared.logs.get(self.inner.id).is_some_and(|l| l.st.lock().awaits_replay())
    }

    /// Gives up a chain found at import without applying it (a forced
    /// receive, which rolls the object set back to its base). Must not be
    /// called while holding a `Tx`.
    pub fn log_discard(&self) -> Result<()> {
        replay::discard(&self.shared, self.inner.id)
    }

    pub fn log_stats(&self) -> LogStats {
        let Some(log) = self.shared.logs.get(self.inner.id) else {
            return LogStats {
                phase: LogPhase::Closed,
                chain: self.inner.committed.lock().log.chain,
                commits: 0,
                writes: 0,
                blocks_written: 0,
                indirect_written: 0,
                indirect_adopted: 0,
                txg_instead: 0,
                live_blocks: 0,
                durable_seq: 0,
                chain_blocks: vec![],
                claimed_indirect: vec![],
            };
        };
        let st = log.st.lock();
        let mut chain_blocks: Vec<BlockPtr> = st.live.iter().map(|b| b.bp).collect();
        if let Some(c) = &st.claimed {
            chain_blocks.extend(c.blocks.iter().copied());
        }
        LogStats {
            phase: st.phase,
            chain: st.chain,
            commits: log.commits.load(Ordering::Relaxed),
            writes: log.writes.load(Ordering::Relaxed),
            blocks_written: log.blocks_written.load(Ordering::Relaxed),
            indirect_written: log.indirect_written.load(Ordering::Relaxed),
            indirect_adopted: log.indirect_adopted.load(Ordering::Relaxed),
            txg_instead: log.txg_instead.load(Ordering::Relaxed),
            live_blocks: st.live.len() as u64,
            durable_seq: st.durable_seq,
            chain_blocks,
            claimed_indirect: st.claimed.as_ref().map_or_else(Vec::new, |c| c.indirect.clone()),
        }
    }
}

/// A fresh chain identity (never 0).
pub(crate) fn new_chain_id() -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    (u64::from_le_bytes(b) ^ t.rotate_left(17)).max(1)
}

/// A hold on the open txg for the log writer (no write throttle: the log
/// must not wait behind the dirty data it is there to avoid waiting for).
pub(crate) fn hold(s: &Shared) -> Tx {
    let guard = s.txg_lock.read_arc();
    Tx { txg: s.open_txg.load(Ordering::Acquire), _hold: Some(guard), redo: None }
}

/// Waits until `txg` is on disk (kicking the sync thread).
pub(crate) fn wait_synced(s: &Shared, txg: Txg) -> Result<()> {
    loop {
        if s.synced_txg.load(Ordering::Acquire) >= txg {
            return Ok(());
        }
        if let Some(e) = s.last_error.lock().clone() {
            return Err(ObjError::Io(e));
        }
        if s.shutdown.load(Ordering::Relaxed) {
            return Err(ObjError::Io("pool is shutting down".into()));
        }
        s.kick(txg);
        let mut g = s.cv_lock.lock();
        if s.synced_txg.load(Ordering::Acquire) < txg {
            s.cv_done.wait_for(&mut g, std::time::Duration::from_millis(100));
        }
    }
}
