//! Receiving streams.
//!
//! Design (see `docs/send-stream.md`, "Receive"): records are applied to
//! the target as they arrive, each only after its own checksum and its
//! place in the order have been verified; the END record's whole-sub-stream
//! hash is checked before the sub-stream's snapshot is taken. A failure
//! restores the target with the snapshot machinery of the object layer:
//! a full receive destroys the object set it created, an incremental one
//! destroys the snapshots it took and rolls the head back to its base
//! snapshot. A resumable receive (`-s`) instead syncs what it applied and
//! returns a token naming the sub-stream and the position reached.
//!
//! Every record is idempotent given the order (OBJECT with NEW recreates
//! the object, WRITE and FREE set absolute contents, FREEOBJECTS frees what
//! exists), so replaying a sub-stream from any earlier position converges
//! to the same state; a token is therefore valid for any state at or past
//! its position.

use std::io::Read;
use std::sync::Arc;

use tarn_obj::{ObjError, ObjPool, ObjType, ObjectId, ObjectSet, ObjsetId, Tx};

use crate::format::*;
use crate::{PartialRecv, ReceivedSnap, RecvJournal, RecvOptions, RecvOutcome, RecvTarget, Result, SendError, SnapRef};

fn corrupt<T>(m: impl Into<String>) -> Result<T> {
    Err(SendError::Corrupt(m.into()))
}

/// Reads and verifies the first BEGIN record of a stream; returns it and
/// the bytes consumed, so a caller can decide on the target and then
/// receive `raw.chain(input)`.
pub fn peek_begin(input: &mut dyn Read) -> Result<(Begin, Vec<u8>)> {
    let mut raw = vec![0u8; REC_HEADER + BEGIN_LEN];
    if let Err(e) = input.read_exact(&mut raw) {
        return Err(if e.kind() == std::io::ErrorKind::UnexpectedEof {
            SendError::Truncated("stream ends inside its first record".into())
        } else {
            SendError::Io(e)
        });
    }
    let mut src: &[u8] = &raw;
    let b = RecordReader::new(&mut src).read_begin()?;
    Ok((b, raw))
}

#[derive(Clone, Copy)]
enum Kind {
    New,
    Existing { base: SnapRef },
    Resume,
}

/// The object whose records are being applied.
#[derive(Clone, Copy)]
struct Cur {
    id: u64,
    bs: u64,
    nblocks: u64,
    /// Data records of this object must start at or after this offset.
    end: u64,
}

struct Receiver<'p> {
    pool: &'p ObjPool,
    kind: Kind,
    head: ObjsetId,
    os: ObjectSet,
    resumable: bool,
    created: Vec<ReceivedSnap>,
    /// BEGIN of the current sub-stream (between sub-streams: the last one).
    begin: Begin,
    /// The current sub-stream is done and snapshotted; the next BEGIN has
    /// not been read.
    between: bool,
    /// Where the current sub-stream started (its resume position, if any).
    start: Position,
    /// The next OBJECT or FREEOBJECTS id must be at least this.
    next_min: u64,
    cur: Option<Cur>,
    /// A resumed sub-stream whose first OBJECT (RESUMED) has not come yet.
    pending_resume: Option<Position>,
    /// The END record did not verify: everything of this sub-stream is
    /// suspect, so a token restarts it from where it started.
    end_failed: bool,
    /// A raw stream: how its object set is encrypted.
    raw: Option<CryptRec>,
    /// Raw: dnode blocks this sub-stream changed (their seals must have
    /// come), and whether an OBJECT or FREEOBJECTS came yet (SEALs first).
    touched: std::collections::BTreeSet<u64>,
    objects_started: bool,
    /// Told of the position at the first change of every txg.
    journal: Option<Arc<dyn RecvJournal>>,
    /// The txg whose first change the journal was last told of.
    noted_txg: u64,
}

/// Applies a send stream (see the crate documentation and
/// `docs/send-stream.md`). Verifies every record before applying it; on
/// failure the target is as it was (or, with `opts.resumable` or a
/// `RecvTarget::Resume`, keeps the partial state and the error is
/// `SendError::Interrupted` with the resume token).
pub fn receive(pool: &ObjPool, input: &mut dyn Read, target: RecvTarget, opts: &RecvOptions) -> Result<RecvOutcome> {
    let mut rd = RecordReader::new(input);
    let begin = rd.read_begin()?;
    let raw = if begin.flags & FLAG_RAW != 0 { Some(read_crypt(&mut rd)?) } else { None };
    match (&raw, &opts.raw) {
        (Some(c), Some(want)) if c.key_guid == want.key_guid && c.cipher == want.cipher => {}
        (None, None) => {}
        (Some(_), None) => return Err(SendError::Invalid("a raw (encrypted) stream where a plain one was expected".into())),
        (None, Some(_)) => return Err(SendError::Invalid("a plain stream where a raw (encrypted) one was expected".into())),
        (Some(c), Some(want)) => {
            return Err(SendError::Invalid(format!(
                "the raw stream is of key {:#x} ({}), {:#x} ({}) was expected",
                c.key_guid,
                c.cipher.name(),
                want.key_guid,
                want.cipher.name()
            )))
        }
    }
    let (kind, head, os, resumable) = setup(pool, &begin, raw.as_ref(), target, opts)?;
    let mut r = Receiver {
        pool,
        kind,
        head,
        os,
        resumable,
        created: Vec::new(),
        begin,
        between: false,
        start: Position::default(),
        next_min: 0,
        cur: None,
        pending_resume: None,
        end_failed: false,
        raw,
        touched: Default::default(),
        objects_started: false,
        journal: opts.journal.clone(),
        noted_txg: 0,
    };
    r.reset_cursor();
    let ran = r.run(&mut rd).and_then(|()| Ok(r.os.end_raw()?));
    match ran {
        Ok(()) => Ok(RecvOutcome { head, snapshots: r.created, bytes: rd.total_bytes, records: rd.total_records }),
        Err(e) => {
            let (sub, total) = (rd.substream_bytes(), rd.total_bytes);
            Err(r.fail(e, sub, total))
        }
    }
}

/// The CRYPT record that follows BEGIN in a raw sub-stream.
fn read_crypt(rd: &mut RecordReader) -> Result<CryptRec> {
    match rd.read_record()? {
        (RecordType::Crypt, p) => CryptRec::decode(&p),
        (ty, _) => corrupt(format!("a raw sub-stream starts with {ty:?}, not CRYPT")),
    }
}

/// The token of a stream's first sub-stream, before any of it arrived.
fn start_token(b: &Begin, head: ObjsetId) -> ResumeToken {
    ResumeToken {
        stream_guid: b.stream_guid,
        series_index: b.series_index,
        series_count: b.series_count,
        to_guid: b.to_guid,
        to_txg: b.to_txg,
        from_guid: b.from_guid,
        from_txg: b.from_txg,
        series_last_guid: b.series_last_guid,
        position: if b.flags & FLAG_RESUME != 0 { b.resume } else { Position::default() },
        head: head.0,
        ..Default::default()
    }
}

/// Whether a raw stream fits the object set it is received into: the
/// same key (loaded here or not).
fn check_raw_target(os: &ObjectSet, raw: Option<&CryptRec>) -> Result<()> {
    let Some(c) = raw else { return Ok(()) };
    match os.crypt() {
        Some(t) if t.key_guid == c.key_guid && t.cipher == c.cipher => Ok(()),
        Some(t) => Err(SendError::WrongBase(format!(
            "the raw stream is encrypted with key {:#x} ({}), the target with key {:#x} ({})",
            c.key_guid,
            c.cipher.name(),
            t.key_guid,
            t.cipher.name()
        ))),
        None => Err(SendError::Invalid("a raw (encrypted) stream is received only into an encrypted dataset of the same key".into())),
    }
}

fn setup(pool: &ObjPool, begin: &Begin, raw: Option<&CryptRec>, target: RecvTarget, opts: &RecvOptions) -> Result<(Kind, ObjsetId, ObjectSet, bool)> {
    let resumed = begin.flags & FLAG_RESUME != 0;
    let (kind, head, os, resumable) = match target {
        RecvTarget::New => {
            if begin.is_incremental() {
                return Err(SendError::Invalid("an incremental stream is received onto an existing object set".into()));
            }
            if resumed || begin.series_index != 0 {
                return Err(SendError::Invalid("a resumed stream is received with RecvTarget::Resume".into()));
            }
            let id = {
                let tx = pool.begin();
                let id = match raw {
                    Some(c) => pool.create_objset_raw(&tx, tarn_obj::crypt::Crypt { cipher: c.cipher, key_guid: c.key_guid })?,
                    None => pool.create_objset(&tx)?,
                };
                if let Some(j) = &opts.journal {
                    j.created(&tx, id, &start_token(begin, id).encode())?;
                }
                id
            };
            (Kind::New, id, pool.open_objset(id)?, opts.resumable)
        }
        RecvTarget::Existing { head, base, force } => {
            if !begin.is_incremental() {
                return Err(SendError::Invalid("a full stream is received into a new object set".into()));
            }
            if resumed || begin.series_index != 0 {
                return Err(SendError::Invalid("a resumed stream is received with RecvTarget::Resume".into()));
            }
            if begin.from_guid != base.guid {
                return Err(SendError::WrongBase(format!(
                    "the stream is based on snapshot {:#018x}, the target's base is {:#018x}",
                    begin.from_guid, base.guid
                )));
            }
            pool.open_objset(base.objset)?;
            let (newest, _, _) = pool.snapshot_info(head)?;
            if newest != base.txg {
                return Err(SendError::WrongBase(format!(
                    "the base (txg {}) is not the newest snapshot of object set {} (txg {newest})",
                    base.txg, head.0
                )));
            }
            let mut os = pool.open_objset(head)?;
            // Checked before anything changes (a forced rollback).
            check_raw_target(&os, raw)?;
            // Changes an unmounted dataset's intent log still holds (found at
            // import, not replayed) are changes since the base: apply them
            // first, so they count as such and are never replayed later over
            // what the stream writes.
            // An encrypted one whose key is not loaded cannot open its
            // (sealed) records: they are changes since the base all the
            // same, which only a forced receive may throw away.
            match os.replay_redo() {
                Ok(_) => {}
                Err(tarn_obj::ObjError::KeyNotLoaded) if os.log_awaits_replay() => {
                    if !force {
                        return Err(SendError::Modified);
                    }
                    os.log_discard().map_err(SendError::from)?;
                }
                Err(e) => return Err(e.into()),
            }
            if os.changed_since(base.txg) {
                if !force {
                    return Err(SendError::Modified);
                }
                drop(os);
                pool.sync()?;
                {
                    let tx = pool.begin();
                    pool.rollback(&tx, head, base.objset)?;
                }
                pool.sync()?;
                os = pool.open_objset(head)?;
            }
            (Kind::Existing { base }, head, os, opts.resumable)
        }
        RecvTarget::Resume { head, token } => {
            let t = ResumeToken::decode(&token)?;
            let matches = resumed
                && begin.series_index == t.series_index
                && begin.series_count == t.series_count
                && begin.series_last_guid == t.series_last_guid
                && begin.from_guid == t.from_guid
                && (t.to_guid == 0 || begin.to_guid == t.to_guid)
                && begin.resume == t.position;
            if !matches {
                return Err(SendError::Invalid("the stream does not continue this partial receive (make it with send_resume and this token)".into()));
            }
            let os = pool.open_objset(head)?;
            check_raw_target(&os, raw)?;
            (Kind::Resume, head, os, true)
        }
    };
    if let Some(p) = opts.props {
        os.set_write_props(p);
    }
    // (A new object set was made with the stream's key; an existing one
    // was checked above.)
    if let Some(c) = raw {
        if let Err(e) = os.begin_raw(c.root) {
            if matches!(kind, Kind::New) {
                let tx = pool.begin();
                let _ = pool.destroy_objset(&tx, head);
            }
            return Err(e.into());
        }
    }
    Ok((kind, head, os, resumable))
}

impl Receiver<'_> {
    fn reset_cursor(&mut self) {
        self.touched.clear();
        self.objects_started = false;
        self.cur = None;
        self.end_failed = false;
        self.between = false;
        if self.begin.flags & FLAG_RESUME != 0 {
            let p = self.begin.resume;
            self.start = p;
            self.next_min = p.object;
            self.pending_resume = p.started.then_some(p);
        } else {
            self.start = Position::default();
            self.next_min = 0;
            self.pending_resume = None;
        }
    }

    /// A transaction for the next change; the first of its txg tells the
    /// journal the position reached before it.
    fn begin_tx(&mut self) -> Result<Tx> {
        let tx = self.pool.begin();
        if let Some(j) = &self.journal {
            if tx.txg() > self.noted_txg {
                j.progress(&tx, &self.token(0, 0).encode())?;
                self.noted_txg = tx.txg();
            }
        }
        Ok(tx)
    }

    fn position(&self) -> Position {
        if let Some(p) = self.pending_resume {
            return p;
        }
        match self.cur {
            Some(c) => Position { object: c.id, offset: c.end, started: true },
            None => Position { object: self.next_min, offset: 0, started: false },
        }
    }

    fn run(&mut self, rd: &mut RecordReader) -> Result<()> {
        loop {
            self.substream(rd)?;
            self.snapshot()?;
            if self.begin.series_index + 1 == self.begin.series_count {
                return Ok(());
            }
            self.between = true;
            let next = rd.read_begin()?;
            let b = &self.begin;
            if next.flags != b.flags & FLAG_RAW
                || next.stream_guid != b.stream_guid
                || next.series_index != b.series_index + 1
                || next.series_count != b.series_count
                || next.series_last_guid != b.series_last_guid
                || next.from_guid != b.to_guid
                || next.from_txg != b.to_txg
            {
                return corrupt(format!("sub-stream {} does not follow sub-stream {} of this stream", next.series_index, b.series_index));
            }
            if let Some(prev) = self.raw {
                let c = read_crypt(rd)?;
                if c.key_guid != prev.key_guid || c.cipher != prev.cipher {
                    return corrupt("a sub-stream of another key");
                }
                self.os.begin_raw(c.root)?;
                self.raw = Some(c);
            }
            self.begin = next;
            self.reset_cursor();
        }
    }

    fn substream(&mut self, rd: &mut RecordReader) -> Result<()> {
        loop {
            let (ty, p) = rd.read_record()?;
            match ty {
                RecordType::Object => {
                    self.objects_started = true;
                    self.object(ObjectRec::decode(&p)?)?
                }
                RecordType::FreeObjects => {
                    self.objects_started = true;
                    self.free_objects(&p)?
                }
                RecordType::Write => self.write(&p)?,
                RecordType::Free => self.free(&p)?,
                RecordType::Seal => self.seal(&p)?,
                RecordType::End => {
                    if let Err(e) = rd.finish_end(&p) {
                        self.end_failed = true;
                        return Err(e);
                    }
                    if let Some(p) = self.pending_resume {
                        return corrupt(format!("resumed sub-stream ends before object {}", p.object));
                    }
                    self.finish_object()?;
                    return self.check_seals();
                }
                RecordType::Begin => return corrupt("BEGIN inside a sub-stream"),
                RecordType::Crypt => return corrupt("CRYPT inside a sub-stream"),
            }
        }
    }

    fn seal(&mut self, p: &[u8]) -> Result<()> {
        if self.raw.is_none() || self.objects_started {
            return corrupt("SEAL outside the start of a raw sub-stream");
        }
        let (blkid, seal) = decode_seal(p)?;
        Ok(self.os.raw_seal(blkid, seal)?)
    }

    /// Raw: every dnode block this sub-stream changed and that still holds
    /// objects got its seal (else it would not authenticate).
    fn check_seals(&mut self) -> Result<()> {
        if self.raw.is_none() {
            return Ok(());
        }
        let per = tarn_obj::format::DNODES_PER_BLOCK;
        for &b in &self.touched {
            if !self.os.has_raw_seal(b) && !self.os.objects_in_range(ObjectId(b * per), ObjectId((b + 1) * per))?.is_empty() {
                return corrupt(format!("the raw stream changes dnode block {b} without its seal"));
            }
        }
        Ok(())
    }

    fn snapshot(&mut self) -> Result<()> {
        let made = {
            let tx = self.begin_tx()?;
            let snap = self.pool.snapshot(&tx, self.head)?;
            let made = ReceivedSnap { objset: snap, txg: tx.txg(), guid: self.begin.to_guid, source_txg: self.begin.to_txg };
            if let Some(j) = &self.journal {
                // What follows resumes after this sub-stream.
                self.between = true;
                let token = self.token(0, 0).encode();
                self.between = false;
                j.snapshot(&tx, &made, &token)?;
                self.noted_txg = tx.txg();
            }
            made
        };
        self.pool.sync()?;
        self.created.push(made);
        Ok(())
    }

    /// The current object's length becomes what the stream declared
    /// (trailing holes extend it, blocks past it are freed).
    fn finish_object(&mut self) -> Result<()> {
        let Some(c) = self.cur else { return Ok(()) };
        let id = ObjectId(c.id);
        let info = self.os.info(id)?;
        let want = c.nblocks * c.bs;
        if info.length > want {
            let tx = self.begin_tx()?;
            self.os.free_range(&tx, id, want, None)?;
        } else if info.length < want && self.raw.is_none() {
            // (Raw: the OBJECT record's shape sets the length.)
            let tx = self.begin_tx()?;
            self.os.write_data(&tx, id, want - c.bs, &vec![0u8; c.bs as usize])?;
        }
        self.cur = None;
        Ok(())
    }

    fn object(&mut self, r: ObjectRec) -> Result<()> {
        let id = ObjectId(r.object);
        if let Some(p) = self.pending_resume {
            if r.flags & !OBJ_METADATA != OBJ_RESUMED || r.object != p.object {
                return corrupt(format!("a sub-stream resumed inside object {} must start with it", p.object));
            }
        } else {
            if r.flags & OBJ_RESUMED != 0 {
                return corrupt(format!("object {} marked RESUMED outside the start of a resumed sub-stream", r.object));
            }
            if r.object < self.next_min {
                return corrupt(format!("object {} out of order (expected {} or above)", r.object, self.next_min));
            }
            if !self.begin.is_incremental() && r.flags & OBJ_NEW == 0 {
                return corrupt(format!("a full stream changes object {} as if it existed", r.object));
            }
        }
        if self.raw.is_some() == (r.levels == 0) {
            return corrupt(format!("OBJECT {} with {} levels in a {} stream", r.object, r.levels, if self.raw.is_some() { "raw" } else { "plain" }));
        }
        self.finish_object()?;
        {
            let tx = self.begin_tx()?;
            if r.flags & OBJ_NEW != 0 {
                match self.os.info(id) {
                    Ok(_) => self.os.free(&tx, id)?,
                    Err(ObjError::NotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                }
                self.os.create_with_id(&tx, id, ObjType(r.otype), r.block_size, &r.bonus)?;
            } else {
                let any = r.flags & OBJ_ANY_BASE != 0;
                let info = match self.os.info(id) {
                    Ok(i) => Some(i),
                    Err(ObjError::NotFound(_)) if any => None,
                    Err(ObjError::NotFound(_)) => {
                        return corrupt(format!("the stream changes object {} which the receiving object set does not have", r.object))
                    }
                    Err(e) => return Err(e.into()),
                };
                // Raw: a tree taller than the sender's was the base's
                // object; the sender's was recreated since (and all of its
                // blocks follow): start from an empty one.
                let info = match info {
                    Some(_) if self.raw.is_some() && self.os.raw_levels(id)? > r.levels => {
                        self.os.free(&tx, id)?;
                        None
                    }
                    i => i,
                };
                match info {
                    None => self.os.create_with_id(&tx, id, ObjType(r.otype), r.block_size, &r.bonus)?,
                    // From a bookmark: another object had this id in the base.
                    Some(info) if any && (info.otype.0 != r.otype || info.block_size != r.block_size) => {
                        self.os.free(&tx, id)?;
                        self.os.create_with_id(&tx, id, ObjType(r.otype), r.block_size, &r.bonus)?;
                    }
                    Some(info) => self.existing_object(&tx, &r, &info)?,
                }
            }
            if r.flags & OBJ_METADATA != 0 {
                self.os.mark_metadata(&tx, id)?;
            }
            if self.raw.is_some() {
                self.os.set_raw_shape(&tx, id, r.levels, r.nblocks)?;
                self.touched.insert(r.object / tarn_obj::format::DNODES_PER_BLOCK);
            }
        }
        self.object_started(&r)
    }

    /// An OBJECT record (not NEW) for an object the receiver has.
    fn existing_object(&self, tx: &tarn_obj::Tx, r: &ObjectRec, info: &tarn_obj::ObjInfo) -> Result<()> {
        if info.otype.0 != r.otype || info.block_size != r.block_size {
            return corrupt(format!(
                "the stream changes object {} (type {}, block size {}) but the receiving object set has type {}, block size {}",
                r.object, r.otype, r.block_size, info.otype.0, info.block_size
            ));
        }
        if info.bonus != r.bonus {
            self.os.set_bonus(tx, ObjectId(r.object), &r.bonus)?;
        }
        Ok(())
    }

    fn object_started(&mut self, r: &ObjectRec) -> Result<()> {
        let end = self.pending_resume.take().map_or(0, |p| p.offset);
        self.cur = Some(Cur { id: r.object, bs: r.block_size as u64, nblocks: r.nblocks, end });
        self.next_min = r.object + 1;
        Ok(())
    }

    fn free_objects(&mut self, p: &[u8]) -> Result<()> {
        let (first, count) = decode_freeobjects(p)?;
        if self.pending_resume.is_some() || first < self.next_min {
            return corrupt(format!("FREEOBJECTS {first} + {count} out of order"));
        }
        self.finish_object()?;
        let end = first + count;
        for id in self.os.objects_in_range(ObjectId(first), ObjectId(end))? {
            self.touched.insert(id.0 / tarn_obj::format::DNODES_PER_BLOCK);
            let tx = self.begin_tx()?;
            match self.os.free(&tx, id) {
                Ok(()) | Err(ObjError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.next_min = end;
        Ok(())
    }

    fn current(&mut self, object: u64, what: &str) -> Result<&mut Cur> {
        match self.cur.as_mut() {
            Some(c) if c.id == object => Ok(c),
            _ => corrupt(format!("{what} of object {object} outside that object's records")),
        }
    }

    fn write(&mut self, p: &[u8]) -> Result<()> {
        let (h, data) = WriteHdr::decode(p)?;
        let c = *self.current(h.object, "WRITE")?;
        if h.logical_len as u64 != c.bs || h.offset % c.bs != 0 || h.offset < c.end || h.offset / c.bs >= c.nblocks {
            return corrupt(format!(
                "WRITE of object {} at {} + {} (block size {}, {} blocks, next offset {})",
                h.object, h.offset, h.logical_len, c.bs, c.nblocks, c.end
            ));
        }
        if (h.flags & WRITE_RAW != 0) != self.raw.is_some() {
            return corrupt(format!("WRITE of object {}: raw and plain records mixed", h.object));
        }
        {
            let tx = self.begin_tx()?;
            if h.flags & WRITE_RAW != 0 {
                self.os.write_raw_block(&tx, ObjectId(h.object), h.offset / c.bs, h.raw_block(), data.to_vec())?;
            } else {
                self.os.write_data(&tx, ObjectId(h.object), h.offset, data)?;
            }
        }
        self.current(h.object, "WRITE")?.end = h.offset + c.bs;
        Ok(())
    }

    fn free(&mut self, p: &[u8]) -> Result<()> {
        let (object, offset, len) = decode_free(p)?;
        let c = *self.current(object, "FREE")?;
        if offset < c.end {
            return corrupt(format!("FREE of object {object} at {offset} out of order (next offset {})", c.end));
        }
        let end = {
            let tx = self.begin_tx()?;
            if len == u64::MAX {
                self.os.free_range(&tx, ObjectId(object), offset, None)?;
                u64::MAX
            } else {
                self.os.free_range(&tx, ObjectId(object), offset, Some(len))?;
                offset + len
            }
        };
        self.current(object, "FREE")?.end = end;
        Ok(())
    }

    fn token(&self, sub_bytes: u64, total_bytes: u64) -> ResumeToken {
        let b = &self.begin;
        let common = ResumeToken {
            stream_guid: b.stream_guid,
            series_count: b.series_count,
            series_last_guid: b.series_last_guid,
            total_bytes,
            head: self.head.0,
            ..Default::default()
        };
        if self.between {
            return ResumeToken { series_index: b.series_index + 1, from_guid: b.to_guid, from_txg: b.to_txg, ..common };
        }
        ResumeToken {
            series_index: b.series_index,
            to_guid: b.to_guid,
            to_txg: b.to_txg,
            from_guid: b.from_guid,
            from_txg: b.from_txg,
            position: if self.end_failed { self.start } else { self.position() },
            bytes: sub_bytes,
            ..common
        }
    }

    fn fail(self, cause: SendError, sub_bytes: u64, total_bytes: u64) -> SendError {
        // What was applied must be on disk before a token names it; a raw
        // receive's changes are written with the seals they came with
        // before the object set leaves raw mode (and is kept or rolled back).
        if self.resumable || self.raw.is_some() {
            let written = self.pool.sync().map_err(SendError::from).and_then(|_| if self.raw.is_some() { Ok(self.os.end_raw()?) } else { Ok(()) });
            if let Err(e) = written {
                let what = if self.resumable { "the partial state" } else { "the raw changes" };
                return SendError::CleanupFailed { cause: Box::new(cause), cleanup: format!("{what} could not be written: {e}") };
            }
        }
        if self.resumable {
            let token = self.token(sub_bytes, total_bytes).encode();
            return SendError::Interrupted {
                cause: Box::new(cause),
                partial: Box::new(PartialRecv { token, head: self.head, snapshots: self.created }),
            };
        }
        match self.restore() {
            Ok(()) => cause,
            Err(e) => SendError::CleanupFailed { cause: Box::new(cause), cleanup: e.to_string() },
        }
    }

    /// Puts the target back as it was before this receive.
    fn restore(self) -> tarn_obj::Result<()> {
        let Receiver { pool, kind, head, os, created, .. } = self;
        drop(os);
        match kind {
            Kind::New => undo_receive(pool, head, None, &created),
            Kind::Existing { base } => undo_receive(pool, head, Some(&base), &created),
            Kind::Resume => Ok(()),
        }
    }
}

/// Takes back a receive into `head`: destroys the snapshots it `created`
/// (newest first), then rolls `head` back to `base` (an incremental) or,
/// with no base (a full stream into an object set it created), destroys
/// `head`. What is gone already (an undo cut short by a crash, done again
/// at import) is skipped, so it may run any number of times.
pub fn undo_receive(pool: &ObjPool, head: ObjsetId, base: Option<&SnapRef>, created: &[ReceivedSnap]) -> tarn_obj::Result<()> {
    let base_txg = base.map_or(0, |b| b.txg);
    for k in (0..created.len()).rev() {
        if pool.open_objset(created[k].objset).is_err() {
            continue;
        }
        // The snapshot before it that still exists.
        let prev = created[..k].iter().rev().find(|c| pool.open_objset(c.objset).is_ok()).map_or(base_txg, |c| c.txg);
        {
            let tx = pool.begin();
            pool.destroy_snapshot(&tx, created[k].objset, prev, head)?;
        }
        pool.sync()?;
    }
    if pool.open_objset(head).is_err() {
        return Ok(());
    }
    match base {
        None => {
            {
                let tx = pool.begin();
                pool.destroy_objset(&tx, head)?;
            }
            pool.sync()?;
        }
        Some(base) => {
            pool.sync()?;
            {
                let tx = pool.begin();
                pool.rollback(&tx, head, base.objset)?;
            }
            pool.sync()?;
        }
    }
    Ok(())
}

/// Gives up an interrupted resumable receive: `head` is rolled back to
/// `newest`, its newest snapshot (the incremental's base, or the last
/// snapshot the receive took), or, with `None` (a full receive interrupted
/// in its first sub-stream), the object set is destroyed.
pub fn abort_partial(pool: &ObjPool, head: ObjsetId, newest: Option<&SnapRef>) -> Result<()> {
    match newest {
        Some(s) => {
            let (txg, _, _) = pool.snapshot_info(head)?;
            if txg != s.txg {
                return Err(SendError::Invalid(format!("txg {} is not the newest snapshot of object set {} (txg {txg})", s.txg, head.0)));
            }
            pool.sync()?;
            {
                let tx = pool.begin();
                pool.rollback(&tx, head, s.objset)?;
            }
            pool.sync()?;
        }
        None => {
            {
                let tx = pool.begin();
                pool.destroy_objset(&tx, head)?;
            }
            pool.sync()?;
        }
    }
    Ok(())
}
