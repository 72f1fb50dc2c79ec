//! Producing streams (and their exact size without producing them).
//!
//! One generator walks the difference between two snapshots (or a whole
//! snapshot) through `tarn_obj::diff`, in increasing object id and, within
//! an object, increasing offset order, and hands records to a sink: the
//! stream writer, or a counter for estimates. Only WRITE records need a
//! block's contents, and the counter never reads them, so an estimate
//! reads exactly the metadata a send reads and nothing else.
//!
//! A stream is produced by a pipeline (see [`run_to`]): the walk runs on
//! a thread of its own, reader threads read and verify the blocks, frame
//! their WRITE records and checksum them, several at a time, and the
//! calling thread (which owns the output) hashes the sub-stream and
//! writes, in stream order. The output is the same as a sequential send's.

use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::Mutex;

use tarn_obj::diff::{BlockChange, BlockRef, ObjectChange};
use tarn_obj::{ObjError, ObjPool, ObjectId, ObjectSet};

use crate::format::*;
use crate::{Result, SendBase, SendError, SendSummary, SnapRef};

trait Sink {
    fn begin(&mut self, b: &Begin) -> Result<()>;
    fn record(&mut self, ty: RecordType, parts: &[&[u8]]) -> Result<()>;
    fn write_block(&mut self, os: &ObjectSet, hdr: WriteHdr, block: &BlockRef) -> Result<()>;
    fn end(&mut self) -> Result<()>;
}

struct StreamSink<'a, 'w> {
    w: &'a mut RecordWriter<'w>,
}

impl Sink for StreamSink<'_, '_> {
    fn begin(&mut self, b: &Begin) -> Result<()> {
        self.w.begin(b)
    }

    fn record(&mut self, ty: RecordType, parts: &[&[u8]]) -> Result<()> {
        self.w.record(ty, parts)
    }

    fn write_block(&mut self, os: &ObjectSet, hdr: WriteHdr, block: &BlockRef) -> Result<()> {
        let data = read_for_write(os, block, &hdr)?;
        self.w.record(RecordType::Write, &[&hdr.encode(), &data])
    }

    fn end(&mut self) -> Result<()> {
        self.w.end()
    }
}

#[derive(Default)]
struct CountSink {
    bytes: u64,
    records: u64,
}

impl Sink for CountSink {
    fn begin(&mut self, _b: &Begin) -> Result<()> {
        self.bytes += record_size(BEGIN_LEN);
        self.records += 1;
        Ok(())
    }

    fn record(&mut self, _ty: RecordType, parts: &[&[u8]]) -> Result<()> {
        self.bytes += record_size(parts.iter().map(|p| p.len()).sum());
        self.records += 1;
        Ok(())
    }

    fn write_block(&mut self, _os: &ObjectSet, hdr: WriteHdr, _block: &BlockRef) -> Result<()> {
        self.bytes += record_size(WRITE_HEADER + hdr.data_len as usize);
        self.records += 1;
        Ok(())
    }

    fn end(&mut self) -> Result<()> {
        self.bytes += record_size(END_LEN);
        self.records += 1;
        Ok(())
    }
}

/// Runs `body` inside a `tarn_obj` callback: a send error stops the walk
/// and is kept in `slot` (the walk itself returns a placeholder).
fn bridge(slot: &mut Option<SendError>, r: Result<()>) -> tarn_obj::Result<()> {
    r.map_err(|e| {
        *slot = Some(e);
        ObjError::Io("send stopped".into())
    })
}

fn settle(slot: Option<SendError>, r: tarn_obj::Result<()>) -> Result<()> {
    match slot {
        Some(e) => Err(e),
        None => Ok(r?),
    }
}

fn random_guid() -> u64 {
    loop {
        let g: u64 = rand::random();
        if g != 0 {
            return g;
        }
    }
}

/// Opens `to` (and `from`) and checks what can be checked at this layer:
/// the txgs are consistent with the object sets' roots and `from` is older.
/// A bookmark base has no object set: only its txg can be checked (that it
/// is a snapshot of the same head is the caller's business).
fn open_pair(pool: &ObjPool, to: &SnapRef, from: Option<&SendBase>) -> Result<(ObjectSet, Option<ObjectSet>)> {
    let tos = pool.open_objset(to.objset)?;
    // The tree's births, not the root's: destroying a neighbouring snapshot
    // rewrites a snapshot's header (not its tree) in a later txg.
    if tos.tree_birth() > to.txg || tos.prev_snap_txg() >= to.txg {
        return Err(SendError::Invalid(format!(
            "object set {} was not snapshotted in txg {} (its tree is from txg {}, its previous snapshot from txg {})",
            to.objset.0,
            to.txg,
            tos.tree_birth(),
            tos.prev_snap_txg()
        )));
    }
    let bos = match from {
        None => None,
        Some(SendBase::Bookmark { txg, guid }) => {
            if *txg >= to.txg || *txg == 0 || *guid == to.guid {
                return Err(SendError::Invalid(format!(
                    "bookmark of txg {txg} is not of an earlier snapshot than txg {} (object set {})",
                    to.txg, to.objset.0
                )));
            }
            None
        }
        Some(SendBase::Snapshot(f)) => {
            let bos = pool.open_objset(f.objset)?;
            if f.txg >= to.txg || bos.tree_birth() > f.txg || tos.prev_snap_txg() < f.txg {
                return Err(SendError::Invalid(format!(
                    "snapshot of txg {} (object set {}) is not an earlier snapshot of the same head as txg {} (object set {})",
                    f.txg, f.objset.0, to.txg, to.objset.0
                )));
            }
            Some(bos)
        }
    };
    Ok((tos, bos))
}

/// One sub-stream: BEGIN, the records, END.
fn substream(pool: &ObjPool, to: &SnapRef, from: Option<&SendBase>, begin: &Begin, sink: &mut dyn Sink) -> Result<()> {
    let (tos, bos) = open_pair(pool, to, from)?;
    let raw = begin.flags & FLAG_RAW != 0;
    let from_txg = from.map_or(0, |f| f.txg());
    // From a bookmark there is no base tree: holes and free slots under
    // what changed are all freed, and objects may or may not exist there.
    let bookmark = from.is_some_and(|f| f.is_bookmark());
    let resume = (begin.flags & FLAG_RESUME != 0).then_some(begin.resume);
    let started = resume.filter(|p| p.started);
    sink.begin(begin)?;
    if raw {
        raw_prelude(&tos, from_txg, sink)?;
    }
    let mut resumed_seen = false;
    let mut slot: Option<SendError> = None;
    let start = resume.map_or(0, |p| p.object);
    let mut on_object = |ch: ObjectChange| {
        let r = (|| -> Result<()> {
            match ch {
                ObjectChange::Freed { first, count } => {
                    // Object 0 is never sent; a bookmark's runs may cover it.
                    let mut a = first.0.max(1);
                    let e = first.0.saturating_add(count).min(MAX_OBJECT);
                    if let Some(p) = started {
                        a = a.max(p.object + 1);
                    }
                    if a < e {
                        sink.record(RecordType::FreeObjects, &[&encode_freeobjects(a, e - a)])?;
                    }
                }
                ObjectChange::Changed { target, base } => {
                    let id = target.id.0;
                    let resuming = started.is_some_and(|p| p.object == id);
                    if started.is_some_and(|p| id < p.object) {
                        return Ok(());
                    }
                    resumed_seen |= resuming;
                    let usable = base.filter(|b| b.otype == target.otype && b.block_size == target.block_size);
                    let flags = if resuming {
                        OBJ_RESUMED
                    } else if bookmark {
                        OBJ_ANY_BASE
                    } else if usable.is_none() {
                        OBJ_NEW
                    } else {
                        0
                    };
                    let rec = ObjectRec {
                        object: id,
                        otype: target.otype.0,
                        flags: if target.metadata { flags | OBJ_METADATA } else { flags },
                        block_size: target.block_size,
                        nblocks: target.nblocks,
                        bonus: target.bonus,
                        levels: if raw { target.levels() } else { 0 },
                    };
                    sink.record(RecordType::Object, &[&rec.encode()])?;
                    let skip_to = if resuming { started.map_or(0, |p| p.offset) } else { 0 };
                    let bs = target.block_size as u64;
                    let nb = target.nblocks;
                    let end_bytes = nb * bs;
                    let mut inner: Option<SendError> = None;
                    let mut on_block = |bc: BlockChange| {
                        let r = (|| -> Result<()> {
                            match bc {
                                BlockChange::Data { blkid, block } => {
                                    if blkid >= nb {
                                        return Err(SendError::Obj(ObjError::Corrupt(format!(
                                            "object {id}: block {blkid} past its {nb} blocks"
                                        ))));
                                    }
                                    let offset = blkid * bs;
                                    if offset < skip_to {
                                        return Ok(());
                                    }
                                    let hdr = write_header(id, offset, target.block_size, &block, raw)?;
                                    sink.write_block(&tos, hdr, &block)
                                }
                                BlockChange::Hole { first, count } => {
                                    let a = first.saturating_mul(bs).max(skip_to);
                                    let e = first.saturating_add(count).saturating_mul(bs).min(end_bytes);
                                    if a < e {
                                        sink.record(RecordType::Free, &[&encode_free(id, a, e - a)])?;
                                    }
                                    Ok(())
                                }
                            }
                        })();
                        bridge(&mut inner, r)
                    };
                    let r = if bookmark {
                        tos.changed_blocks_since(&target, from_txg, skip_to / bs, &mut on_block)
                    } else {
                        tos.changed_blocks(&target, usable.as_ref(), from_txg, skip_to / bs, &mut on_block)
                    };
                    settle(inner, r)?;
                    // Truncation: the base had blocks past the new end (from
                    // a bookmark: it may have had).
                    if (bookmark || usable.is_some_and(|b| b.nblocks > nb)) && skip_to <= end_bytes {
                        sink.record(RecordType::Free, &[&encode_free(id, end_bytes, u64::MAX)])?;
                    }
                }
            }
            Ok(())
        })();
        bridge(&mut slot, r)
    };
    let r = if bookmark {
        tos.changed_objects_since(from_txg, ObjectId(start), raw, &mut on_object)
    } else {
        tos.changed_objects(bos.as_ref(), from_txg, ObjectId(start), raw, &mut on_object)
    };
    settle(slot, r)?;
    if let Some(p) = started {
        if !resumed_seen {
            return Err(SendError::Invalid(format!("resume token names object {} which this sub-stream does not send", p.object)));
        }
    }
    sink.end()
}

/// A raw sub-stream's records after BEGIN: how the object set is
/// encrypted and what its root authenticates (CRYPT), then the seals of
/// the dnode blocks written since the base (SEAL), so the receiver has
/// them before any dnode block of its own is written.
fn raw_prelude(tos: &ObjectSet, from_txg: u64, sink: &mut dyn Sink) -> Result<()> {
    let c = tos.crypt().ok_or_else(|| SendError::Invalid("a raw stream of an object set that is not encrypted".into()))?;
    let rec = CryptRec { cipher: c.cipher, key_guid: c.key_guid, root: tos.raw_root()? };
    sink.record(RecordType::Crypt, &[&rec.encode()])?;
    let mut slot = None;
    let r = tos.raw_dnode_seals(from_txg, &mut |blkid, seal| bridge(&mut slot, sink.record(RecordType::Seal, &[&encode_seal(blkid, &seal)])));
    settle(slot, r)
}

/// The WRITE header of block `offset` of object `id`: plain (the data is
/// the block's contents), or raw (its ciphertext and sealed pointer fields).
fn write_header(id: u64, offset: u64, block_size: u32, block: &BlockRef, raw: bool) -> Result<WriteHdr> {
    let hdr = WriteHdr { object: id, offset, logical_len: block_size, data_len: block_size, ..Default::default() };
    if !raw {
        return Ok(hdr);
    }
    let rb = block.raw_block().ok_or_else(|| SendError::Obj(ObjError::Corrupt(format!("object {id}: block at {offset} of an encrypted object set is not sealed"))))?;
    if rb.lsize != block_size {
        return Err(SendError::Obj(ObjError::Corrupt(format!("object {id}: sealed block at {offset} of {} bytes, block size {block_size}", rb.lsize))));
    }
    Ok(WriteHdr { flags: WRITE_RAW, data_len: rb.psize, compression: rb.compression, iv: rb.iv, mac: rb.mac, ..hdr })
}

/// Checks the series and the token; returns the first sub-stream to send
/// and its resume position.
fn plan(snaps: &[SnapRef], from: Option<&SendBase>, token: Option<&str>) -> Result<(usize, Option<Position>)> {
    let last = snaps.last().ok_or_else(|| SendError::Invalid("no snapshot to send".into()))?;
    if snaps.len() > MAX_SERIES as usize {
        return Err(SendError::Invalid(format!("a series of {} snapshots", snaps.len())));
    }
    if from.is_some_and(|f| f.guid() == 0) {
        return Err(SendError::Invalid("the base has no guid".into()));
    }
    let mut prev = from.map(|f| (f.txg(), f.guid()));
    for s in snaps {
        if s.guid == 0 {
            return Err(SendError::Invalid(format!("snapshot {} has no guid", s.objset.0)));
        }
        if let Some((ptxg, pguid)) = prev {
            if ptxg >= s.txg || pguid == s.guid {
                return Err(SendError::Invalid(format!("snapshots out of order: txg {ptxg} then txg {}", s.txg)));
            }
        }
        prev = Some((s.txg, s.guid));
    }
    let Some(tok) = token else { return Ok((0, None)) };
    let t = ResumeToken::decode(tok)?;
    if t.series_count as usize != snaps.len() || t.series_last_guid != last.guid {
        return Err(SendError::Invalid("the resume token belongs to another stream (different snapshots)".into()));
    }
    let i = t.series_index as usize;
    let base_guid = if i == 0 { from.map_or(0, |f| f.guid()) } else { snaps[i - 1].guid };
    if (t.to_guid != 0 && t.to_guid != snaps[i].guid) || t.from_guid != base_guid {
        return Err(SendError::Invalid(format!("the resume token names sub-stream {i} of other snapshots")));
    }
    Ok((i, Some(t.position)))
}

fn run(pool: &ObjPool, snaps: &[SnapRef], from: Option<&SendBase>, token: Option<&str>, raw: bool, sink: &mut dyn Sink) -> Result<u64> {
    let (first, position) = plan(snaps, from, token)?;
    let stream_guid = random_guid();
    let last = snaps[snaps.len() - 1].guid;
    for i in first..snaps.len() {
        let to = &snaps[i];
        let base = if i == 0 { from.copied() } else { Some(SendBase::Snapshot(snaps[i - 1])) };
        let mut begin = Begin {
            flags: if raw { FLAG_RAW } else { 0 },
            stream_guid,
            series_index: i as u32,
            series_count: snaps.len() as u32,
            series_last_guid: last,
            pool_guid: pool.guid(),
            objset: to.objset.0,
            to_txg: to.txg,
            to_guid: to.guid,
            from_txg: base.map_or(0, |b| b.txg()),
            from_guid: base.map_or(0, |b| b.guid()),
            resume: Position::default(),
        };
        if i == first {
            if let Some(p) = position {
                begin.flags |= FLAG_RESUME;
                begin.resume = p;
            }
        }
        substream(pool, to, base.as_ref(), &begin, sink)?;
    }
    Ok(stream_guid)
}

/// Records handed from the walking thread to the writing one, in stream
/// order. A WRITE's data comes from a reader thread.
enum Msg {
    Begin(Box<Begin>),
    Record(RecordType, Vec<u8>),
    /// A WRITE's header and data, framed.
    Write([u8; WRITE_HEADER], Block),
    End,
}

type Framed = Result<([u8; REC_HEADER], Vec<u8>)>;

enum Block {
    Read(Framed),
    Pending(Receiver<Framed>),
}

/// A block for a reader thread to read, and its record to frame.
struct ReadJob {
    os: ObjectSet,
    block: BlockRef,
    hdr: WriteHdr,
    head: PendingHeader,
    reply: SyncSender<Framed>,
}

impl ReadJob {
    fn run(self) {
        // The writer may be gone (it stopped on an error): then nobody
        // wants the block.
        let _ = self.reply.send(read_framed(&self.os, &self.block, &self.hdr, self.head));
    }
}

fn read_framed(os: &ObjectSet, block: &BlockRef, hdr: &WriteHdr, head: PendingHeader) -> Framed {
    let data = read_for_write(os, block, hdr)?;
    Ok((head.finish(&[&hdr.encode(), &data]), data))
}

/// Records in flight between the walker and the writer, which bounds the
/// blocks read ahead of the writer (8 MiB of 128 KiB blocks).
const PIPELINE_DEPTH: usize = 64;
/// Threads reading blocks: several reads in flight keep the disks busy
/// and spread block verification over the cores.
const READERS: usize = 3;

/// Reads a block as a WRITE with header `hdr` carries it. Plain: blocks
/// are stored at the object's block size; be lenient with a short one
/// (zero-filled, as a read would return it). Raw: the ciphertext as
/// stored, checksum verified.
fn read_for_write(os: &ObjectSet, block: &BlockRef, hdr: &WriteHdr) -> Result<Vec<u8>> {
    if hdr.flags & WRITE_RAW != 0 {
        let (_, data) = os.read_block_raw(block)?;
        if data.len() != hdr.data_len as usize {
            return Err(SendError::Obj(ObjError::Corrupt(format!("object {}: sealed block at {} read as {} bytes", hdr.object, hdr.offset, data.len()))));
        }
        return Ok(data);
    }
    let mut data = os.read_block_ref(block)?;
    data.resize(hdr.logical_len as usize, 0);
    Ok(data)
}

/// The walking side of a pipelined send: walks and hands over the records
/// (and the blocks to read, to the readers); the writing thread frames,
/// checksums, hashes and writes them.
struct ChannelSink {
    tx: SyncSender<Msg>,
    /// None: no reader threads, the walker reads.
    jobs: Option<Sender<ReadJob>>,
    seq: Sequencer,
}

fn writer_gone() -> SendError {
    // The writer only goes away on an error, which it reports itself: this
    // error is never the one returned.
    SendError::Io(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the stream writer stopped"))
}

impl ChannelSink {
    fn send(&self, m: Msg) -> Result<()> {
        self.tx.send(m).map_err(|_| writer_gone())
    }
}

impl Sink for ChannelSink {
    fn begin(&mut self, b: &Begin) -> Result<()> {
        self.seq.begin(b);
        self.send(Msg::Begin(Box::new(b.clone())))
    }

    fn record(&mut self, ty: RecordType, parts: &[&[u8]]) -> Result<()> {
        self.seq.skip();
        self.send(Msg::Record(ty, parts.concat()))
    }

    fn write_block(&mut self, os: &ObjectSet, hdr: WriteHdr, block: &BlockRef) -> Result<()> {
        let head = self.seq.frame(RecordType::Write, WRITE_HEADER + hdr.data_len as usize);
        let encoded = hdr.encode();
        let data = match &self.jobs {
            // A read error ends the walk here, as a sequential send.
            None => Block::Read(Ok(read_framed(os, block, &hdr, head)?)),
            Some(jobs) => {
                let (reply, rx) = sync_channel(1);
                jobs.send(ReadJob { os: os.clone(), block: *block, hdr, head, reply }).map_err(|_| writer_gone())?;
                Block::Pending(rx)
            }
        };
        self.send(Msg::Write(encoded, data))
    }

    fn end(&mut self) -> Result<()> {
        self.send(Msg::End)
    }
}

fn reader(jobs: &Mutex<Receiver<ReadJob>>, stop: &AtomicBool) {
    loop {
        let job = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        if stop.load(Ordering::Relaxed) {
            continue;
        }
        job.run();
    }
}

fn apply(w: &mut RecordWriter<'_>, m: Msg) -> Result<()> {
    match m {
        Msg::Begin(b) => w.begin(&b),
        Msg::Record(ty, p) => w.record(ty, &[&p]),
        Msg::Write(h, d) => {
            let (head, d) = match d {
                Block::Read(r) => r?,
                // A reader drops a job unanswered only when it panicked
                // (resumed when it is joined) or the send stops.
                Block::Pending(rx) => rx.recv().map_err(|_| writer_gone())??,
            };
            w.record_framed(&head, &[&h, &d])
        }
        Msg::End => w.end(),
    }
}

fn join<T>(h: std::thread::ScopedJoinHandle<'_, T>) -> T {
    h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// Sends on several threads: a scoped thread walks the snapshots, reader
/// threads read the blocks (several in flight) and this one (which owns
/// `out`) writes. Errors come out as if sequential: the records before the
/// first failure (a read or a write) are written, and that failure is
/// returned.
fn run_to(pool: &ObjPool, snaps: &[SnapRef], from: Option<&SendBase>, token: Option<&str>, raw: bool, out: &mut dyn Write) -> Result<SendSummary> {
    let mut buf = BufWriter::with_capacity(1 << 20, out);
    let mut w = RecordWriter::new(&mut buf);
    let (tx, rx) = sync_channel::<Msg>(PIPELINE_DEPTH);
    let (jobs_tx, jobs_rx) = channel::<ReadJob>();
    let jobs_rx = Mutex::new(jobs_rx);
    let stop = AtomicBool::new(false);
    let stream_guid = std::thread::scope(|s| -> Result<u64> {
        let readers: Vec<_> = (0..READERS)
            .filter_map(|i| std::thread::Builder::new().name(format!("tarn-send-read-{i}")).spawn_scoped(s, || reader(&jobs_rx, &stop)).ok())
            .collect();
        let jobs = (!readers.is_empty()).then_some(jobs_tx);
        let walker = std::thread::Builder::new().name("tarn-send-walk".into()).spawn_scoped(s, move || {
            let mut sink = ChannelSink { tx, jobs, seq: Sequencer::default() };
            run(pool, snaps, from, token, raw, &mut sink)
        });
        // (A failed spawn dropped the sink's channels: the readers end.)
        let Ok(walker) = walker else {
            // No thread: send on this one.
            return run(pool, snaps, from, token, raw, &mut StreamSink { w: &mut w });
        };
        let written = {
            // Dropped before the joins: a walker blocked on a full channel
            // then fails its send and ends (and with it the readers).
            let rx = rx;
            let r = rx.iter().try_for_each(|m| apply(&mut w, m));
            if r.is_err() {
                stop.store(true, Ordering::Relaxed);
            }
            r
        };
        let walked = join(walker);
        for r in readers {
            join(r);
        }
        written?;
        walked
    })?;
    w.flush()?;
    let (bytes, records) = (w.total_bytes, w.total_records);
    drop(w);
    buf.flush()?;
    Ok(SendSummary { bytes, records, stream_guid })
}

/// Writes a stream of snapshot `snap`: full, or incremental from `from`
/// (an earlier snapshot of the same head, or a bookmark of one: the caller
/// vouches that a bookmark is of this head's history). The snapshots must
/// not be destroyed while this runs.
pub fn send(pool: &ObjPool, snap: &SnapRef, from: Option<&SendBase>, out: &mut dyn Write) -> Result<SendSummary> {
    run_to(pool, std::slice::from_ref(snap), from, None, false, out)
}

/// Writes `snaps` (consecutive snapshots of one head, oldest first) as one
/// stream of sub-streams: the first full or from `from`, each next one from
/// the previous snapshot (`send -I from snaps.last()`).
pub fn send_series(pool: &ObjPool, snaps: &[SnapRef], from: Option<&SendBase>, out: &mut dyn Write) -> Result<SendSummary> {
    run_to(pool, snaps, from, None, false, out)
}

/// The rest of the stream `send(snap, base)` after the interruption that
/// returned `token`.
pub fn send_resume(pool: &ObjPool, snap: &SnapRef, base: Option<&SendBase>, token: &str, out: &mut dyn Write) -> Result<SendSummary> {
    run_to(pool, std::slice::from_ref(snap), base, Some(token), false, out)
}

/// The rest of the stream `send_series(snaps, from)` after the interruption
/// that returned `token`: from the sub-stream and position it names.
pub fn send_series_resume(pool: &ObjPool, snaps: &[SnapRef], from: Option<&SendBase>, token: &str, out: &mut dyn Write) -> Result<SendSummary> {
    run_to(pool, snaps, from, Some(token), false, out)
}

/// A raw stream of an encrypted object set's `snaps` (as
/// [`send_series`], or from `token` as [`send_series_resume`]): blocks as
/// ciphertext, dnodes with their bonuses sealed, the seals of the dnode
/// blocks and the root's MAC. Needs no key (`docs/send-stream.md`, "Raw
/// streams").
pub fn send_raw(pool: &ObjPool, snaps: &[SnapRef], from: Option<&SendBase>, token: Option<&str>, out: &mut dyn Write) -> Result<SendSummary> {
    run_to(pool, snaps, from, token, true, out)
}

/// Bytes `send_raw` would write (exact).
pub fn estimate_raw(pool: &ObjPool, snaps: &[SnapRef], from: Option<&SendBase>, token: Option<&str>) -> Result<u64> {
    let mut sink = CountSink::default();
    run(pool, snaps, from, token, true, &mut sink)?;
    Ok(sink.bytes)
}

fn count(pool: &ObjPool, snaps: &[SnapRef], from: Option<&SendBase>, token: Option<&str>) -> Result<u64> {
    let mut sink = CountSink::default();
    run(pool, snaps, from, token, false, &mut sink)?;
    Ok(sink.bytes)
}

/// Bytes `send(snap, from)` would write, computed without reading any data
/// block (exact).
pub fn estimate(pool: &ObjPool, snap: &SnapRef, from: Option<&SendBase>) -> Result<u64> {
    count(pool, std::slice::from_ref(snap), from, None)
}

/// Bytes `send_series(snaps, from)` would write (exact).
pub fn estimate_series(pool: &ObjPool, snaps: &[SnapRef], from: Option<&SendBase>) -> Result<u64> {
    count(pool, snaps, from, None)
}

/// Bytes `send_series_resume(snaps, from, token)` would write (exact).
pub fn estimate_resume(pool: &ObjPool, snaps: &[SnapRef], from: Option<&SendBase>, token: &str) -> Result<u64> {
    count(pool, snaps, from, Some(token))
}
