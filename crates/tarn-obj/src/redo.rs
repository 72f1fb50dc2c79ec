//! Redo records: what a transaction changed in one object set, as intent
//! log records, and how replay applies them again.
//!
//! Big theory:
//! - A [`Tx`] made with [`Tx::logged`] carries a capture for one object
//!   set. Every change that object set's methods make through it (create,
//!   free, bonus, block size, data write, range free) and every map
//!   operation of [`crate::zap::Zap`] is noted, in order, at the level the
//!   caller used: a map insert is one note, not the block writes inside it
//!   (a depth counter silences the layers below).
//! - [`flush`] turns the notes into records and appends them to the object
//!   set's intent log. The layer above calls it while it still holds the
//!   locks of what it changed (tarn-fs: when its inode lock set drops), so
//!   two changes to one thing get sequence numbers in the order they were
//!   made; a `Tx` dropped with notes left flushes them itself.
//! - Data writes are noted without copying their bytes: the note keeps the
//!   versions of the blocks the write made (`WritePart`, the same buffers
//!   the txg will write), and [`flush`], still under the caller's locks,
//!   copies the bytes of partial blocks into the record's payload and lets
//!   go of those blocks, so a record holds the bytes of its own write, not
//!   a later one's. A partially written block must not stay shared past
//!   the flush: the next write into a shared block copies all of it
//!   first (`Arc::make_mut`), so keeping them until a commit made every
//!   4 KiB write into a 128 KiB record dirty in the txg copy the record
//!   (half the daemon's time, docs/benchmarks.md). Whole blocks are kept
//!   until the commit instead: written indirectly (below, `Fill`), or,
//!   when small, spliced into the payload by the log writer (`Splice`,
//!   [`assemble`]) — most records retire with their txg uncommitted, and
//!   copying every 16 KiB block of a volume's writes at the flush was a
//!   fifth of the daemon's time in a sequential write. The version kept is
//!   the write's own: a later whole-block write replaces the txg's buffer,
//!   a later partial one copies it first (at most `IMMEDIATE_WRITE_MAX`).
//! - Replay ([`ObjectSet::replay_redo`]) applies each record's notes in one
//!   transaction, on top of exactly the state that preceded them (the
//!   intent log replays only records of txgs that did not reach disk, in
//!   sequence order), so the same deterministic operations give the same
//!   result: object ids, generations and times come from the notes, never
//!   from the replaying machine.
//! - One transaction's notes fit one record unless they carry more data
//!   than a record holds (a large write): then the write is split over
//!   records, each still a whole operation on its range, and the inode
//!   attributes that follow the write move in front of it, so a crash
//!   between the records shows zeros in the file rather than bytes past
//!   its end.
//!
//! - A whole block of a write larger than `zil::IMMEDIATE_WRITE_MAX` (any
//!   whole block under `logbias=throughput`) is not copied: its note is
//!   filled at commit with the pointer of the block the log writer writes
//!   once, as the ordinary block the txg then adopts (zil/indirect.rs);
//!   replay reads it back.
//!
//! Record payload: a sequence of notes, each a tag byte and its fields
//! (docs/on-disk-format.md, "Redo records").

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::zil::{ReplayReport, RECORD_PAYLOAD_MAX};
use crate::zap::Zap;
use tarn_block::BlockPtr;

use crate::{ObjError, ObjType, ObjectId, ObjectSet, Result, Tx, BONUS_LEN};

/// Intent log record type of redo records.
pub const REDO_RECORD: u32 = 1;

const T_CREATE: u8 = 1;
const T_FREE: u8 = 2;
const T_BONUS: u8 = 3;
const T_MARK_META: u8 = 4;
const T_BLOCK_SIZE: u8 = 5;
const T_WRITE: u8 = 6;
const T_FREE_RANGE: u8 = 7;
const T_ZAP_PUT: u8 = 8;
const T_ZAP_REMOVE: u8 = 9;
const T_ZAP_INIT: u8 = 10;
const T_WRITE_BLOCK: u8 = 11;

/// Bytes of a write note before its data.
const WRITE_HEAD: usize = 1 + 8 + 8 + 4;
/// Bytes of a block write note (a write note and a block pointer).
const BLOCK_NOTE: usize = WRITE_HEAD + tarn_block::BP_SIZE;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Create { id: u64, otype: u8, block_size: u32, bonus: [u8; BONUS_LEN] },
    Free { id: u64 },
    Bonus { id: u64, bonus: [u8; BONUS_LEN] },
    MarkMeta { id: u64 },
    BlockSize { id: u64, block_size: u32 },
    /// The bytes are copied from `parts` when the record is committed.
    Write { id: u64, off: u64, len: u64, parts: Arc<Vec<WritePart>> },
    FreeRange { id: u64, off: u64, len: Option<u64> },
    ZapPut { obj: u64, key: Vec<u8>, value: Vec<u8>, insert: bool },
    ZapRemove { obj: u64, key: Vec<u8> },
    ZapInit { obj: u64, seed_txg: u64 },
}

/// The notes of one `Tx` for one object set.
pub(crate) struct Capture {
    os: ObjectSet,
    ops: Mutex<Vec<Op>>,
    depth: AtomicU32,
}

/// A piece of a write: the version of a block the write made (shared
/// with the txg's dirty data: a later change of the block copies it first)
/// and the range of it the write covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WritePart {
    pub(crate) block: Arc<Vec<u8>>,
    pub(crate) start: usize,
    pub(crate) len: usize,
    /// The object's type (an encrypted block's seal binds it).
    pub(crate) otype: u8,
}

impl WritePart {
    /// The write covers the whole block.
    fn is_whole(&self) -> bool {
        self.start == 0 && self.len == self.block.len()
    }
}

/// What the log writer puts into a record at commit: `block` written as
/// an ordinary block with `spec` (zil/indirect.rs); its pointer goes to
/// payload offset `at`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fill {
    pub at: usize,
    pub block: Arc<Vec<u8>>,
    pub spec: tarn_block::WriteSpec,
}

/// A whole block of a write the log writer copies into the record's
/// payload at `at` (of the assembled payload) when it commits the record:
/// the block version the write made, kept instead of its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Splice {
    pub at: usize,
    pub block: Arc<Vec<u8>>,
}

impl Tx {
    /// This transaction's changes to `os` become redo records of its intent
    /// log (see the module doc). A read-only object set is not captured.
    pub fn logged(mut self, os: &ObjectSet) -> Tx {
        if !os.is_readonly() {
            self.redo = Some(Box::new(Capture { os: os.clone(), ops: Mutex::new(Vec::new()), depth: AtomicU32::new(0) }));
        }
        self
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        // Still holding the txg: the records carry it.
        flush(self);
    }
}

fn capture_for<'a>(os: &ObjectSet, tx: &'a Tx) -> Option<&'a Capture> {
    tx.redo.as_deref().filter(|c| c.os.id() == os.id())
}

/// Runs a composite operation (a map operation) with the notes of what it
/// does underneath silenced, and notes `op` if it succeeded.
pub(crate) fn scoped<T>(os: &ObjectSet, tx: &Tx, f: impl FnOnce() -> Result<T>, op: impl FnOnce(&T) -> Op) -> Result<T> {
    let Some(c) = capture_for(os, tx) else { return f() };
    let outer = c.depth.fetch_add(1, Ordering::Relaxed) == 0;
    let r = f();
    c.depth.fetch_sub(1, Ordering::Relaxed);
    if let (true, Ok(v)) = (outer, &r) {
        c.ops.lock().push(op(v));
    }
    r
}

/// Appends what `tx` noted so far to the intent log (call it while still
/// holding the locks of what was changed).
pub fn flush(tx: &Tx) {
    let Some(c) = tx.redo.as_deref() else { return };
    let ops = std::mem::take(&mut *c.ops.lock());
    if ops.is_empty() {
        return;
    }
    for rec in encode(ops, indirect_policy(&c.os)) {
        if let Err(e) = c.os.log_append_filled(tx, REDO_RECORD, rec) {
            // The change is in the txg; without its record a commit must
            // not claim it durable: the log falls back to a txg sync.
            c.os.log_needs_sync(tx);
            if !matches!(e, ObjError::ReadOnly) {
                eprintln!("tarn: intent log of object set {}: {e}", c.os.id().0);
            }
        }
    }
}

/// Which whole blocks of writes become indirect writes, and how they are
/// written: those of at least `.0` bytes, with `.1` (its `otype` replaced
/// by the object's). `.2`: bytes each block note takes in its log block
/// besides the record (a sealed block's claim-table entry; 0 when plain).
type Indirect = Option<(usize, tarn_block::WriteSpec, usize)>;

fn indirect_policy(os: &ObjectSet) -> Indirect {
    let p = os.write_props();
    let spec = tarn_block::WriteSpec { compression: p.compression, checksum: p.checksum, copies: p.copies, level: 0, otype: 0, metadata: false };
    let min = match os.logbias() {
        crate::LogBias::Latency => crate::zil::IMMEDIATE_WRITE_MAX + 1,
        crate::LogBias::Throughput => 1,
    };
    // An encrypted object set's records are sealed; the blocks they name
    // are listed in the clear too, for the claim (zil/format.rs).
    let claim = if os.crypt().is_some() { crate::zil::CLAIM_ENTRY } else { 0 };
    Some((min, spec, claim))
}

fn note_len(op: &Op) -> usize {
    match op {
        Op::Create { .. } => 1 + 8 + 1 + 4 + BONUS_LEN,
        Op::Free { .. } | Op::MarkMeta { .. } => 1 + 8,
        Op::Bonus { .. } => 1 + 8 + BONUS_LEN,
        Op::BlockSize { .. } => 1 + 8 + 4,
        Op::Write { len, .. } => WRITE_HEAD + *len as usize,
        Op::FreeRange { .. } => 1 + 8 + 8 + 8,
        Op::ZapPut { key, value, .. } => 1 + 8 + 1 + 2 + key.len() + 4 + value.len(),
        Op::ZapRemove { key, .. } => 1 + 8 + 2 + key.len(),
        Op::ZapInit { .. } => 1 + 8 + 8,
    }
}

/// Bytes `op` takes encoded (a write's whole blocks that `indirect`
/// selects as block notes; without splits over records).
fn encoded_len(op: &Op, indirect: &Indirect) -> usize {
    let (Op::Write { parts, .. }, Some((min, _, _))) = (op, indirect) else { return note_len(op) };
    let mut n = 0;
    let mut copying = false;
    for p in parts.iter() {
        if p.is_whole() && p.len >= *min {
            n += BLOCK_NOTE;
            copying = false;
        } else {
            n += p.len + if copying { 0 } else { WRITE_HEAD };
            copying = true;
        }
    }
    n
}

/// Moves the bonus written after a run of writes to the same object in
/// front of the run (used when the writes are split over records).
fn bonus_first(ops: &mut [Op]) {
    for i in 1..ops.len() {
        let Op::Bonus { id, .. } = ops[i] else { continue };
        let mut j = i;
        while j > 0 && matches!(ops[j - 1], Op::Write { id: w, .. } if w == id) {
            j -= 1;
        }
        if j < i {
            ops[j..=i].rotate_right(1);
        }
    }
}

/// Pieces of a write: copied byte ranges (offset in the write, length)
/// and whole blocks to write indirectly.
enum Piece {
    Copy(usize, usize),
    /// Offset in the write, the block, its object's type.
    Block(usize, Arc<Vec<u8>>, u8),
}

fn pieces(len: usize, parts: &[WritePart], indirect: &Indirect) -> Vec<Piece> {
    let Some((min, _, _)) = indirect else { return vec![Piece::Copy(0, len)] };
    let mut out = Vec::new();
    let mut at = 0usize;
    for p in parts {
        let whole = p.is_whole() && p.len >= *min;
        match out.last_mut() {
            _ if whole => out.push(Piece::Block(at, p.block.clone(), p.otype)),
            Some(Piece::Copy(_, n)) => *n += p.len,
            _ => out.push(Piece::Copy(at, p.len)),
        }
        at += p.len;
    }
    assert_eq!(at, len, "a write note's parts cover its length");
    out
}

/// One record as encoded: its payload less the spliced blocks' bytes,
/// the block notes the log writer fills, and the whole blocks it splices
/// in (`assemble`).
#[derive(Debug, Default)]
pub(crate) struct Encoded {
    pub payload: Vec<u8>,
    pub fills: Vec<Fill>,
    pub splices: Vec<Splice>,
    /// Bytes of `splices`.
    pub spliced: usize,
}

impl Encoded {
    /// The assembled payload's length.
    pub fn len(&self) -> usize {
        self.payload.len() + self.spliced
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `len` bytes from offset `skip` of the write `parts`
    /// describe: a whole block the range covers is spliced, the rest copied.
    fn add_parts(&mut self, parts: &[WritePart], skip: usize, len: usize) {
        let (mut skip, mut done) = (skip, 0);
        for p in parts {
            if done == len {
                break;
            }
            if skip >= p.len {
                skip -= p.len;
                continue;
            }
            let n = (p.len - skip).min(len - done);
            if skip == 0 && n == p.len && p.is_whole() {
                self.splices.push(Splice { at: self.len(), block: p.block.clone() });
                self.spliced += n;
            } else {
                self.payload.extend_from_slice(&p.block[p.start + skip..p.start + skip + n]);
            }
            done += n;
            skip = 0;
        }
        assert_eq!(done, len, "a write note's blocks cover fewer bytes than the note");
    }
}

/// A record's payload with its spliced blocks in place (the log writer,
/// at commit; `skeleton` is `Encoded::payload`).
pub(crate) fn assemble(skeleton: &[u8], splices: &[Splice]) -> Vec<u8> {
    let total = skeleton.len() + splices.iter().map(|s| s.block.len()).sum::<usize>();
    let mut out = Vec::with_capacity(total);
    let mut from = 0usize;
    for s in splices {
        let take = s.at - out.len();
        out.extend_from_slice(&skeleton[from..from + take]);
        from += take;
        out.extend_from_slice(&s.block);
    }
    out.extend_from_slice(&skeleton[from..]);
    assert_eq!(out.len(), total, "a record's splices lie within it");
    out
}

/// Packs notes into record payloads of at most `RECORD_PAYLOAD_MAX` bytes,
/// splitting writes that do not fit; whole blocks `indirect` selects get
/// block notes instead of their bytes, and other whole blocks are spliced
/// in at commit rather than copied now.
pub(crate) fn encode(mut ops: Vec<Op>, indirect: Indirect) -> Vec<Encoded> {
    let total: usize = ops.iter().map(note_len).sum();
    if total > RECORD_PAYLOAD_MAX {
        bonus_first(&mut ops);
    }
    let mut out = Vec::new();
    let mut cur = Encoded::default();
    // What is left to encode, to size each record's payload once (grown a
    // push at a time, a 4 KiB write's payload was reallocated ten times).
    let mut left: usize = ops.iter().map(|op| copied_len(op, &indirect)).sum();
    // Bytes the current record's block notes take outside it (claim-table
    // entries of a sealed log block, and the table's head): the record
    // and they must fit one log block together.
    let per_block = indirect.map_or(0, |i| i.2);
    let mut outside = 0usize;
    // What one more block note adds outside a record already `outside`
    // bytes out (the first note of a record also pays the table's head).
    let claim_bytes = |outside: usize| if per_block > 0 && outside == 0 { per_block + crate::zil::CLAIM_HEAD } else { per_block };
    let push = |out: &mut Vec<Encoded>, cur: &mut Encoded, outside: &mut usize| {
        out.push(std::mem::take(cur));
        *outside = 0;
    };
    for op in ops {
        if cur.payload.capacity() == 0 {
            cur.payload.reserve_exact(left.min(RECORD_PAYLOAD_MAX));
        }
        left = left.saturating_sub(copied_len(&op, &indirect));
        if let Op::Write { id, off, len, parts } = op {
            for piece in pieces(len as usize, &parts, &indirect) {
                match piece {
                    Piece::Block(at, block, otype) => {
                        if RECORD_PAYLOAD_MAX - cur.len() - outside < BLOCK_NOTE + claim_bytes(outside) {
                            push(&mut out, &mut cur, &mut outside);
                        }
                        outside += claim_bytes(outside);
                        cur.payload.push(T_WRITE_BLOCK);
                        cur.payload.extend_from_slice(&id.to_le_bytes());
                        cur.payload.extend_from_slice(&(off + at as u64).to_le_bytes());
                        cur.payload.extend_from_slice(&(block.len() as u32).to_le_bytes());
                        let spec = tarn_block::WriteSpec { otype, ..indirect.expect("block pieces only with a policy").1 };
                        cur.fills.push(Fill { at: cur.len(), block, spec });
                        cur.payload.resize(cur.payload.len() + tarn_block::BP_SIZE, 0);
                    }
                    Piece::Copy(start, n) => encode_copy(&mut out, &mut cur, id, off + start as u64, n, start, &parts, &mut outside),
                }
            }
            continue;
        }
        if cur.len() + outside + note_len(&op) > RECORD_PAYLOAD_MAX && !cur.is_empty() {
            push(&mut out, &mut cur, &mut outside);
        }
        encode_note(&op, &mut cur.payload);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Bytes `op` puts into a record's payload at encoding: `encoded_len`
/// less the whole blocks spliced in at commit.
fn copied_len(op: &Op, indirect: &Indirect) -> usize {
    let spliced = match op {
        Op::Write { parts, .. } => parts
            .iter()
            .filter(|p| p.is_whole() && indirect.is_none_or(|(min, _, _)| p.len < min))
            .map(|p| p.len)
            .sum(),
        _ => 0,
    };
    encoded_len(op, indirect).saturating_sub(spliced)
}

/// Write notes for `len` bytes at `off`, from byte `skip` of the write's
/// parts, split over records where they do not fit.
#[allow(clippy::too_many_arguments)]
fn encode_copy(
    out: &mut Vec<Encoded>,
    cur: &mut Encoded,
    id: u64,
    mut off: u64,
    mut len: usize,
    mut skip: usize,
    parts: &[WritePart],
    outside: &mut usize,
) {
    while len > 0 {
        let mut room = RECORD_PAYLOAD_MAX - cur.len() - *outside;
        if room <= WRITE_HEAD {
            out.push(std::mem::take(cur));
            *outside = 0;
            room = RECORD_PAYLOAD_MAX;
            // The rest of the write's notes, and the attributes usually
            // noted after it (whole blocks are spliced, not copied).
            cur.payload.reserve_exact(4096);
        }
        let n = len.min(room - WRITE_HEAD);
        cur.payload.push(T_WRITE);
        cur.payload.extend_from_slice(&id.to_le_bytes());
        cur.payload.extend_from_slice(&off.to_le_bytes());
        cur.payload.extend_from_slice(&(n as u32).to_le_bytes());
        cur.add_parts(parts, skip, n);
        off += n as u64;
        len -= n;
        skip += n;
    }
}

fn encode_note(op: &Op, b: &mut Vec<u8>) {
    match op {
        Op::Create { id, otype, block_size, bonus } => {
            b.push(T_CREATE);
            b.extend_from_slice(&id.to_le_bytes());
            b.push(*otype);
            b.extend_from_slice(&block_size.to_le_bytes());
            b.extend_from_slice(bonus);
        }
        Op::Free { id } => {
            b.push(T_FREE);
            b.extend_from_slice(&id.to_le_bytes());
        }
        Op::Bonus { id, bonus } => {
            b.push(T_BONUS);
            b.extend_from_slice(&id.to_le_bytes());
            b.extend_from_slice(bonus);
        }
        Op::MarkMeta { id } => {
            b.push(T_MARK_META);
            b.extend_from_slice(&id.to_le_bytes());
        }
        Op::BlockSize { id, block_size } => {
            b.push(T_BLOCK_SIZE);
            b.extend_from_slice(&id.to_le_bytes());
            b.extend_from_slice(&block_size.to_le_bytes());
        }
        Op::Write { .. } => unreachable!("writes are encoded by `encode`"),
        Op::FreeRange { id, off, len } => {
            b.push(T_FREE_RANGE);
            b.extend_from_slice(&id.to_le_bytes());
            b.extend_from_slice(&off.to_le_bytes());
            b.extend_from_slice(&len.unwrap_or(u64::MAX).to_le_bytes());
        }
        Op::ZapPut { obj, key, value, insert } => {
            b.push(T_ZAP_PUT);
            b.extend_from_slice(&obj.to_le_bytes());
            b.push(u8::from(*insert));
            b.extend_from_slice(&(key.len() as u16).to_le_bytes());
            b.extend_from_slice(key);
            b.extend_from_slice(&(value.len() as u32).to_le_bytes());
            b.extend_from_slice(value);
        }
        Op::ZapRemove { obj, key } => {
            b.push(T_ZAP_REMOVE);
            b.extend_from_slice(&obj.to_le_bytes());
            b.extend_from_slice(&(key.len() as u16).to_le_bytes());
            b.extend_from_slice(key);
        }
        Op::ZapInit { obj, seed_txg } => {
            b.push(T_ZAP_INIT);
            b.extend_from_slice(&obj.to_le_bytes());
            b.extend_from_slice(&seed_txg.to_le_bytes());
        }
    }
}

/// A note and, for writes, its bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded<'a> {
    Op(Op),
    Write { id: u64, off: u64, data: &'a [u8] },
    /// A whole block written once by the log: `len` bytes at `off`.
    Block { id: u64, off: u64, len: u32, bp: BlockPtr },
}

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(ObjError::Corrupt(format!("redo record cut short at byte {}", self.pos)));
        };
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn bonus(&mut self) -> Result<[u8; BONUS_LEN]> {
        Ok(self.take(BONUS_LEN)?.try_into().expect("bonus bytes"))
    }
}

/// Decodes a redo record's payload; `Err(Corrupt)` on anything malformed.
pub(crate) fn decode(payload: &[u8]) -> Result<Vec<Decoded<'_>>> {
    let mut c = Cursor { b: payload, pos: 0 };
    let mut out = Vec::new();
    while c.pos < payload.len() {
        out.push(decode_one(&mut c)?);
    }
    Ok(out)
}

fn decode_one<'a>(c: &mut Cursor<'a>) -> Result<Decoded<'a>> {
    let tag = c.u8()?;
    let d = match tag {
        T_CREATE => Decoded::Op(Op::Create { id: c.u64()?, otype: c.u8()?, block_size: c.u32()?, bonus: c.bonus()? }),
        T_FREE => Decoded::Op(Op::Free { id: c.u64()? }),
        T_BONUS => Decoded::Op(Op::Bonus { id: c.u64()?, bonus: c.bonus()? }),
        T_MARK_META => Decoded::Op(Op::MarkMeta { id: c.u64()? }),
        T_BLOCK_SIZE => Decoded::Op(Op::BlockSize { id: c.u64()?, block_size: c.u32()? }),
        T_WRITE => {
            let (id, off) = (c.u64()?, c.u64()?);
            let n = c.u32()? as usize;
            Decoded::Write { id, off, data: c.take(n)? }
        }
        T_WRITE_BLOCK => {
            let (id, off, len) = (c.u64()?, c.u64()?, c.u32()?);
            let bp = BlockPtr::decode(c.take(tarn_block::BP_SIZE)?).map_err(|e| ObjError::Corrupt(format!("redo record: block pointer: {e}")))?;
            let fits = bp.is_hole() || (bp.lsize == len && bp.level == 0 && !tarn_block::gang::is_gang(&bp));
            if !fits {
                return Err(ObjError::Corrupt(format!("redo record: block pointer of {} bytes for a {len}-byte write", bp.lsize)));
            }
            Decoded::Block { id, off, len, bp }
        }
        T_FREE_RANGE => {
            let (id, off, len) = (c.u64()?, c.u64()?, c.u64()?);
            Decoded::Op(Op::FreeRange { id, off, len: (len != u64::MAX).then_some(len) })
        }
        T_ZAP_PUT => {
            let obj = c.u64()?;
            let insert = c.u8()? != 0;
            let kl = c.u16()? as usize;
            let key = c.take(kl)?.to_vec();
            let vl = c.u32()? as usize;
            Decoded::Op(Op::ZapPut { obj, key, value: c.take(vl)?.to_vec(), insert })
        }
        T_ZAP_REMOVE => {
            let obj = c.u64()?;
            let kl = c.u16()? as usize;
            Decoded::Op(Op::ZapRemove { obj, key: c.take(kl)?.to_vec() })
        }
        T_ZAP_INIT => Decoded::Op(Op::ZapInit { obj: c.u64()?, seed_txg: c.u64()? }),
        t => return Err(ObjError::Corrupt(format!("redo record: unknown note type {t} at byte {}", c.pos - 1))),
    };
    Ok(d)
}

/// A redo payload of one block note (tests of the log's formats).
#[cfg(test)]
pub(crate) fn block_note(id: u64, off: u64, len: u32, bp: &tarn_block::BlockPtr) -> Vec<u8> {
    let mut b = vec![T_WRITE_BLOCK];
    b.extend_from_slice(&id.to_le_bytes());
    b.extend_from_slice(&off.to_le_bytes());
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(&bp.encode());
    b
}

/// The block pointers of a redo record's indirect writes (the claim takes
/// their space); a malformed payload gives those before the damage.
pub(crate) fn block_pointers(payload: &[u8]) -> Vec<BlockPtr> {
    let mut out = Vec::new();
    let mut c = Cursor { b: payload, pos: 0 };
    // Decoding stops at the first damage; a partial decode is enough here.
    while c.pos < payload.len() {
        match decode_one(&mut c) {
            Ok(Decoded::Block { bp, .. }) if !bp.is_hole() => out.push(bp),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    out
}

/// Applies one decoded record in `tx` (no capture: replay writes no log).
fn apply(os: &ObjectSet, tx: &Tx, notes: Vec<Decoded<'_>>) -> Result<()> {
    for d in notes {
        match d {
            Decoded::Write { id, off, data } => os.write(tx, ObjectId(id), off, data)?,
            Decoded::Block { id, off, len, bp } => {
                let data = if bp.is_hole() {
                    Arc::new(vec![0u8; len as usize])
                } else {
                    let keys = os.inner.keys(&os.shared)?;
                    Arc::new(os.io().read_uncached_with(&bp, keys.as_deref()).map_err(|e| ObjError::Corrupt(format!("indirect write block: {e}")))?)
                };
                if data.len() != len as usize {
                    return Err(ObjError::Corrupt(format!("indirect write block of {} bytes for a {len}-byte write", data.len())));
                }
                os.write(tx, ObjectId(id), off, &data)?
            }
            Decoded::Op(op) => match op {
                Op::Create { id, otype, block_size, bonus } => os.create_with_id(tx, ObjectId(id), ObjType(otype), block_size, &bonus)?,
                Op::Free { id } => os.free(tx, ObjectId(id))?,
                Op::Bonus { id, bonus } => os.set_bonus(tx, ObjectId(id), &bonus)?,
                Op::MarkMeta { id } => os.mark_metadata(tx, ObjectId(id))?,
                Op::BlockSize { id, block_size } => os.set_block_size(tx, ObjectId(id), block_size)?,
                Op::Write { .. } => unreachable!("decoded as Decoded::Write"),
                Op::FreeRange { id, off, len } => os.free_range(tx, ObjectId(id), off, len)?,
                Op::ZapPut { obj, key, value, insert: true } => Zap::insert(os, tx, ObjectId(obj), &key, &value)?,
                Op::ZapPut { obj, key, value, insert: false } => Zap::update(os, tx, ObjectId(obj), &key, &value)?,
                Op::ZapRemove { obj, key } => {
                    Zap::remove(os, tx, ObjectId(obj), &key)?;
                }
                Op::ZapInit { obj, seed_txg } => Zap::init_seeded(os, tx, ObjectId(obj), seed_txg)?,
            },
        }
    }
    Ok(())
}

/// The object set's changing methods: each notes itself in a capturing
/// `Tx` once it succeeded (the bodies are in objset.rs).
impl ObjectSet {
    /// Whether changes are refused (a snapshot, a destroyed or read-only
    /// object set, a read-only pool).
    pub fn is_readonly(&self) -> bool {
        self.shared.readonly || self.inner.readonly.load(Ordering::Relaxed) || self.inner.destroyed.load(Ordering::Relaxed)
    }

    pub fn create_with_id(&self, tx: &Tx, id: ObjectId, t: ObjType, block_size: u32, bonus: &[u8; BONUS_LEN]) -> Result<()> {
        scoped(self, tx, || self.create_with_id_inner(tx, id, t, block_size, bonus), |_| Op::Create { id: id.0, otype: t.0, block_size, bonus: *bonus })
    }

    pub fn free(&self, tx: &Tx, id: ObjectId) -> Result<()> {
        scoped(self, tx, || self.free_inner(tx, id), |_| Op::Free { id: id.0 })
    }

    pub fn set_bonus(&self, tx: &Tx, id: ObjectId, b: &[u8; BONUS_LEN]) -> Result<()> {
        scoped(self, tx, || self.set_bonus_inner(tx, id, b), |_| Op::Bonus { id: id.0, bonus: *b })
    }

    /// Marks an object as metadata (`DN_METADATA`): the ZAP layer does for
    /// every map it formats.
    pub fn mark_metadata(&self, tx: &Tx, id: ObjectId) -> Result<()> {
        scoped(self, tx, || self.mark_metadata_inner(tx, id), |_| Op::MarkMeta { id: id.0 })
    }

    /// Changes the block size of an object of at most one block.
    pub fn set_block_size(&self, tx: &Tx, id: ObjectId, block_size: u32) -> Result<()> {
        scoped(self, tx, || self.set_block_size_inner(tx, id, block_size), |_| Op::BlockSize { id: id.0, block_size })
    }

    /// Write without the space check: metadata updates (directory entries,
    /// maps) that removals and renames need even on a full pool; they may
    /// use the slop, as in ZFS.
    pub fn write(&self, tx: &Tx, id: ObjectId, offset: u64, data: &[u8]) -> Result<()> {
        let Some(c) = capture_for(self, tx).filter(|c| c.depth.load(Ordering::Relaxed) == 0) else {
            return self.write_inner(tx, id, offset, data, None);
        };
        c.depth.fetch_add(1, Ordering::Relaxed);
        let mut parts = Vec::new();
        let r = self.write_inner(tx, id, offset, data, Some(&mut parts));
        c.depth.fetch_sub(1, Ordering::Relaxed);
        if r.is_ok() {
            c.ops.lock().push(Op::Write { id: id.0, off: offset, len: data.len() as u64, parts: Arc::new(parts) });
        }
        r
    }

    /// Frees `len` bytes (None: to the end) from `offset`: whole blocks
    /// become holes, partial ones are zeroed.
    pub fn free_range(&self, tx: &Tx, id: ObjectId, offset: u64, len: Option<u64>) -> Result<()> {
        scoped(self, tx, || self.free_range_inner(tx, id, offset, len), |_| Op::FreeRange { id: id.0, off: offset, len })
    }
}

impl ObjectSet {
    /// Replays this object set's intent log, if import found one: each redo
    /// record not yet applied is applied again (see the module doc). A
    /// record that cannot be decoded or applied ends the replay there, as a
    /// damaged log block ends a chain: it and the records after it are
    /// dropped (one line on stderr says so), so the object set is left as
    /// the records before it made it and stays usable.
    pub fn replay_redo(&self) -> Result<ReplayReport> {
        let mut broken: Option<String> = None;
        let r = self.log_replay(&mut |tx, rec| {
            if broken.is_some() {
                return Ok(());
            }
            let applied = if rec.rtype != REDO_RECORD {
                Err(ObjError::Corrupt(format!("record type {}", rec.rtype)))
            } else {
                decode(&rec.payload).and_then(|notes| apply(self, tx, notes))
            };
            if let Err(e) = applied {
                broken = Some(format!("record {} (txg {}): {e}", rec.seq, rec.txg));
            }
            Ok(())
        })?;
        if let Some(why) = broken {
            eprintln!("tarn: intent log of object set {}: replay stopped at {why}; later records discarded", self.id().0);
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write of `len` bytes (i as u8 at byte i) as 4 KiB blocks, starting 10 bytes into the first.
    fn parts(len: usize) -> Arc<Vec<WritePart>> {
        let mut out = Vec::new();
        let (mut done, mut start) = (0, 10);
        while done < len {
            let n = (4096 - start).min(len - done);
            let mut block = vec![0u8; 4096];
            for (i, b) in block[start..start + n].iter_mut().enumerate() {
                *b = (done + i) as u8;
            }
            out.push(WritePart { block: Arc::new(block), start, len: n, otype: 0 });
            done += n;
            start = 0;
        }
        Arc::new(out)
    }

    fn sample() -> Vec<Op> {
        vec![
            Op::Create { id: 9, otype: 18, block_size: 512, bonus: [3; BONUS_LEN] },
            Op::ZapPut { obj: 4, key: b"name".to_vec(), value: vec![1, 2, 3], insert: true },
            Op::Write { id: 9, off: 10, len: 300_000, parts: parts(300_000) },
            Op::Bonus { id: 9, bonus: [7; BONUS_LEN] },
            Op::ZapRemove { obj: 4, key: b"old".to_vec() },
            Op::FreeRange { id: 9, off: 4096, len: None },
            Op::ZapInit { obj: 11, seed_txg: 77 },
        ]
    }

    #[test]
    fn encode_splits_and_decodes() {
        let recs = encode(sample(), None);
        assert!(recs.len() >= 3, "a 300,000-byte write spans records: {}", recs.len());
        let skeleton: usize = recs.iter().map(|r| r.payload.len()).sum();
        assert!(skeleton < 20_000, "whole blocks are spliced at commit, not copied now: {skeleton} bytes");
        let mut written = 0usize;
        let mut ops = Vec::new();
        for r in &recs {
            assert!(r.len() <= RECORD_PAYLOAD_MAX);
            assert!(r.fills.is_empty(), "no block fills without a policy");
            assert_eq!(r.spliced, r.splices.len() * 4096);
            let payload = assemble(&r.payload, &r.splices);
            assert_eq!(payload.len(), r.len());
            for d in decode(&payload).unwrap() {
                match d {
                    Decoded::Write { id, off, data } => {
                        assert_eq!((id, off), (9, 10 + written as u64));
                        assert!(data.iter().enumerate().all(|(i, &b)| b == (written + i) as u8), "bytes of the write, in order");
                        written += data.len();
                    }
                    Decoded::Op(op) => ops.push(op),
                    Decoded::Block { .. } => panic!("no block notes without a policy"),
                }
            }
        }
        assert_eq!(written, 300_000);
        // The bonus moved in front of the split write, nothing else moved.
        assert!(matches!(ops[2], Op::Bonus { id: 9, .. }), "{ops:?}");
        assert_eq!(ops.len(), 6);
    }

    #[test]
    fn small_transactions_keep_their_order_in_one_record() {
        let ops = vec![Op::Write { id: 5, off: 0, len: 100, parts: parts(100) }, Op::Bonus { id: 5, bonus: [1; BONUS_LEN] }];
        let recs = encode(ops, None);
        assert_eq!(recs.len(), 1);
        assert!(recs[0].splices.is_empty(), "a part of a block is copied");
        let d = decode(&recs[0].payload).unwrap();
        assert!(matches!(d[0], Decoded::Write { id: 5, .. }) && matches!(d[1], Decoded::Op(Op::Bonus { .. })));
    }

    #[test]
    fn whole_blocks_past_the_policy_become_block_notes() {
        // 10 bytes into a 64 KiB block, two whole blocks, 100 bytes of a fourth.
        let block = |fill: u8| Arc::new(vec![fill; 65536]);
        let parts = vec![
            WritePart { block: block(1), start: 65526, len: 10, otype: 0 },
            WritePart { block: block(2), start: 0, len: 65536, otype: 0 },
            WritePart { block: block(3), start: 0, len: 65536, otype: 0 },
            WritePart { block: block(4), start: 0, len: 100, otype: 0 },
        ];
        let len = 10 + 65536 * 2 + 100;
        let spec = tarn_block::WriteSpec { compression: tarn_block::Compression::Off, checksum: tarn_block::ChecksumKind::Fletcher4, copies: 1, level: 0, otype: 0, metadata: false };
        let op = || Op::Write { id: 7, off: 65526, len, parts: Arc::new(parts.clone()) };
        let recs = encode(vec![op()], Some((32769, spec, 0)));
        assert_eq!(recs.len(), 1);
        let (payload, fills) = (&recs[0].payload, &recs[0].fills);
        assert!(recs[0].splices.is_empty(), "whole blocks past the policy are block notes");
        assert!(payload.len() < 1000, "blocks are not copied: {} bytes", payload.len());
        let blocks: Vec<u8> = fills.iter().map(|f| f.block[0]).collect();
        assert_eq!(blocks, [2, 3], "the two whole blocks, in order");
        let mut payload = payload.clone();
        for Fill { at, block, .. } in fills {
            let mut bp = BlockPtr::HOLE;
            bp.lsize = block.len() as u32;
            bp.psize = block.len() as u32;
            bp.birth = 5;
            bp.fill = 1;
            bp.checksum_kind = tarn_block::bp::checksum_code(tarn_block::ChecksumKind::Fletcher4);
            bp.ndva = 1;
            bp.dva[0] = tarn_block::Dva { vdev: 0, asize: 65536, offset: u64::from(block[0]) << 20 };
            payload[*at..*at + tarn_block::BP_SIZE].copy_from_slice(&bp.encode());
        }
        let d = decode(&payload).unwrap();
        assert!(matches!(d[0], Decoded::Write { id: 7, off: 65526, data } if data == [1; 10]));
        assert!(matches!(d[1], Decoded::Block { id: 7, off: 65536, len: 65536, bp } if bp.dva[0].offset == 2 << 20));
        assert!(matches!(d[2], Decoded::Block { id: 7, off: 131072, len: 65536, bp } if bp.dva[0].offset == 3 << 20));
        assert!(matches!(d[3], Decoded::Write { id: 7, off: 196608, data } if data == [4; 100]));
        assert_eq!(block_pointers(&payload).len(), 2);
        // Below the policy's size everything is copied.
        let recs = encode(vec![op()], Some((65537, spec, 0)));
        assert!(recs.iter().all(|r| r.fills.is_empty()));
        let spliced: Vec<u8> = recs.iter().flat_map(|r| r.splices.iter().map(|b| b.block[0])).collect();
        // A block the record's end cuts in two is copied, the rest spliced.
        assert!(spliced == [2] || spliced == [3] || spliced == [2, 3], "whole blocks spliced, partial ones copied: {spliced:?}");
        // ... into the records, in order (the write is split over them).
        let mut bytes = Vec::new();
        for r in &recs {
            for d in decode(&assemble(&r.payload, &r.splices)).unwrap() {
                let Decoded::Write { id: 7, off, data } = d else { panic!("only write notes: {d:?}") };
                assert_eq!(off, 65526 + bytes.len() as u64);
                bytes.extend_from_slice(data);
            }
        }
        let want: Vec<u8> = parts.iter().flat_map(|p| p.block[p.start..p.start + p.len].to_vec()).collect();
        assert!(bytes == want, "the write's bytes, copied at encoding or spliced");
    }

    #[test]
    fn malformed_payloads_are_errors() {
        let first = encode(sample(), None).remove(0);
        let payload = assemble(&first.payload, &first.splices);
        for cut in 1..payload.len().min(200) {
            let _ = decode(&payload[..cut]);
        }
        assert!(decode(&payload[..5]).is_err());
        assert!(decode(&[200]).is_err());
        let mut bad = vec![T_ZAP_PUT];
        bad.extend_from_slice(&[0; 9]);
        bad.extend_from_slice(&u16::MAX.to_le_bytes());
        assert!(decode(&bad).is_err());
    }
}
