//! Byte layout of send streams (version 1). `docs/send-stream.md` is the
//! normative description; this module is the only code that knows it.
//!
//! A stream is one or more *sub-streams*; each is a BEGIN record, the
//! records of one snapshot (or of the difference between two), and an END
//! record. Every record is a 32-byte header and a payload:
//!
//! | off | size | field |
//! |----:|-----:|-------|
//! | 0   | 4  | record type (u32) |
//! | 4   | 4  | payload length (u32) |
//! | 8   | 8  | sequence number in the sub-stream (BEGIN is 0) |
//! | 16  | 16 | first 16 bytes of blake3(stream guid ‖ series index ‖ header bytes 0..16 ‖ payload) |
//!
//! All integers little-endian.

use std::io::{Read, Write};

use tarn_obj::{BONUS_LEN, MAX_BLOCK_SIZE};

use crate::{Result, SendError};

pub const MAGIC: &[u8; 8] = b"TARNSND1";
pub const VERSION: u32 = 1;

/// BEGIN flags.
pub const FLAG_RAW: u32 = 1 << 0;
pub const FLAG_RESUME: u32 = 1 << 1;
const KNOWN_FLAGS: u32 = FLAG_RAW | FLAG_RESUME;

/// OBJECT flags.
pub const OBJ_NEW: u8 = 1 << 0;
pub const OBJ_RESUMED: u8 = 1 << 1;
/// Incrementals from a bookmark: the sender does not know the receiver's
/// object of this id. The receiver creates it if missing and recreates it
/// if its type or block size differ; the records that follow rewrite
/// every position that may differ (see `docs/send-stream.md`).
pub const OBJ_ANY_BASE: u8 = 1 << 2;
/// The object is metadata (a ZAP map), not user data: the receiver marks
/// it so (it is left out of `compressratio`). Combines with the others.
pub const OBJ_METADATA: u8 = 1 << 3;

/// WRITE flags: the data is a sealed block's ciphertext (raw streams).
pub const WRITE_RAW: u32 = 1 << 0;

pub const REC_HEADER: usize = 32;
pub const BEGIN_LEN: usize = 128;
pub const OBJECT_LEN: usize = 128;
pub const FREEOBJECTS_LEN: usize = 16;
pub const WRITE_HEADER: usize = 64;
pub const FREE_LEN: usize = 24;
pub const END_LEN: usize = 48;
pub const CRYPT_LEN: usize = 48;
pub const SEAL_LEN: usize = 48;
pub const MAX_PAYLOAD: usize = WRITE_HEADER + MAX_BLOCK_SIZE as usize;

/// Object ids are below 2^48 (as in ZFS).
pub const MAX_OBJECT: u64 = 1 << 48;
/// Series longer than this are refused (a sanity bound for the header).
pub const MAX_SERIES: u32 = 1 << 20;

/// Record types.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RecordType {
    Begin = 1,
    Object = 2,
    FreeObjects = 3,
    Write = 4,
    Free = 5,
    End = 6,
    /// Raw streams: the object set's cipher, key guid, root MAC and
    /// meta-dnode shape, right after BEGIN.
    Crypt = 7,
    /// Raw streams: the IV and MAC of a dnode block, after CRYPT.
    Seal = 8,
}

impl RecordType {
    fn from_u32(v: u32) -> Option<RecordType> {
        Some(match v {
            1 => RecordType::Begin,
            2 => RecordType::Object,
            3 => RecordType::FreeObjects,
            4 => RecordType::Write,
            5 => RecordType::Free,
            6 => RecordType::End,
            7 => RecordType::Crypt,
            8 => RecordType::Seal,
            _ => return None,
        })
    }

    /// Allowed payload lengths.
    fn len_ok(self, len: usize) -> bool {
        match self {
            RecordType::Begin => len == BEGIN_LEN,
            RecordType::Object => len == OBJECT_LEN,
            RecordType::FreeObjects => len == FREEOBJECTS_LEN,
            RecordType::Write => (WRITE_HEADER..=MAX_PAYLOAD).contains(&len),
            RecordType::Free => len == FREE_LEN,
            RecordType::End => len == END_LEN,
            RecordType::Crypt => len == CRYPT_LEN,
            RecordType::Seal => len == SEAL_LEN,
        }
    }
}

/// Where a sub-stream resumes: everything before this point was applied.
/// `started`: the OBJECT record of `object` and its data records ending at
/// or before `offset` were applied; otherwise nothing of `object` or any
/// later id was.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Position {
    pub object: u64,
    pub offset: u64,
    pub started: bool,
}

/// The BEGIN record's payload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Begin {
    pub flags: u32,
    /// Random per send; shared by the sub-streams of one series.
    pub stream_guid: u64,
    pub series_index: u32,
    pub series_count: u32,
    /// Guid of the last snapshot of the series.
    pub series_last_guid: u64,
    /// Sending pool and object set (informational).
    pub pool_guid: u64,
    pub objset: u64,
    pub to_txg: u64,
    pub to_guid: u64,
    /// 0 for a full sub-stream.
    pub from_txg: u64,
    pub from_guid: u64,
    /// Meaningful with `FLAG_RESUME`.
    pub resume: Position,
}

fn u32at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn u64at(b: &[u8], o: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(x)
}

fn corrupt<T>(m: impl Into<String>) -> Result<T> {
    Err(SendError::Corrupt(m.into()))
}

impl Begin {
    pub fn is_incremental(&self) -> bool {
        self.from_guid != 0
    }

    pub fn encode(&self) -> [u8; BEGIN_LEN] {
        let mut b = [0u8; BEGIN_LEN];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.flags.to_le_bytes());
        b[16..24].copy_from_slice(&self.stream_guid.to_le_bytes());
        b[24..28].copy_from_slice(&self.series_index.to_le_bytes());
        b[28..32].copy_from_slice(&self.series_count.to_le_bytes());
        b[32..40].copy_from_slice(&self.series_last_guid.to_le_bytes());
        b[40..48].copy_from_slice(&self.pool_guid.to_le_bytes());
        b[48..56].copy_from_slice(&self.objset.to_le_bytes());
        b[56..64].copy_from_slice(&self.to_txg.to_le_bytes());
        b[64..72].copy_from_slice(&self.to_guid.to_le_bytes());
        b[72..80].copy_from_slice(&self.from_txg.to_le_bytes());
        b[80..88].copy_from_slice(&self.from_guid.to_le_bytes());
        b[88..96].copy_from_slice(&self.resume.object.to_le_bytes());
        b[96..104].copy_from_slice(&self.resume.offset.to_le_bytes());
        b[104..108].copy_from_slice(&(self.resume.started as u32).to_le_bytes());
        b
    }

    /// Parse and validate (magic, version, known flags, consistent fields).
    pub fn decode(b: &[u8]) -> Result<Begin> {
        if b.len() != BEGIN_LEN {
            return corrupt(format!("BEGIN payload of {} bytes", b.len()));
        }
        if &b[0..8] != MAGIC {
            return corrupt("not a tarn send stream (bad magic)");
        }
        let version = u32at(b, 8);
        if version != VERSION {
            return Err(SendError::Unsupported(format!("send stream version {version} (this build reads version {VERSION})")));
        }
        let flags = u32at(b, 12);
        if flags & !KNOWN_FLAGS != 0 {
            return Err(SendError::Unsupported(format!("send stream features {:#x}", flags & !KNOWN_FLAGS)));
        }
        let rflags = u32at(b, 104);
        let h = Begin {
            flags,
            stream_guid: u64at(b, 16),
            series_index: u32at(b, 24),
            series_count: u32at(b, 28),
            series_last_guid: u64at(b, 32),
            pool_guid: u64at(b, 40),
            objset: u64at(b, 48),
            to_txg: u64at(b, 56),
            to_guid: u64at(b, 64),
            from_txg: u64at(b, 72),
            from_guid: u64at(b, 80),
            resume: Position { object: u64at(b, 88), offset: u64at(b, 96), started: rflags & 1 != 0 },
        };
        if b[108..].iter().any(|&x| x != 0) || rflags & !1 != 0 {
            return corrupt("BEGIN reserved bytes are not zero");
        }
        if h.series_count == 0 || h.series_count > MAX_SERIES || h.series_index >= h.series_count {
            return corrupt(format!("BEGIN claims sub-stream {} of {}", h.series_index, h.series_count));
        }
        if h.to_guid == 0 || h.series_last_guid == 0 || h.stream_guid == 0 {
            return corrupt("BEGIN with a zero guid");
        }
        if (h.from_guid == 0) != (h.from_txg == 0) {
            return corrupt("BEGIN: from_guid and from_txg must both be zero or both set");
        }
        if h.from_guid != 0 && h.from_txg >= h.to_txg {
            return corrupt(format!("BEGIN: base txg {} is not before txg {}", h.from_txg, h.to_txg));
        }
        if flags & FLAG_RESUME == 0 && h.resume != Position::default() {
            return corrupt("BEGIN has a resume position but no RESUME flag");
        }
        if h.resume.object >= MAX_OBJECT {
            return corrupt("BEGIN resume object out of range");
        }
        Ok(h)
    }
}

/// OBJECT: an object of the target and its attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRec {
    pub object: u64,
    pub otype: u8,
    pub flags: u8,
    pub block_size: u32,
    pub nblocks: u64,
    pub bonus: [u8; BONUS_LEN],
    /// Raw streams: the levels of the object's block tree (0 in plain
    /// streams).
    pub levels: u8,
}

impl ObjectRec {
    pub fn encode(&self) -> [u8; OBJECT_LEN] {
        let mut b = [0u8; OBJECT_LEN];
        b[0..8].copy_from_slice(&self.object.to_le_bytes());
        b[8] = self.otype;
        b[9] = self.flags;
        b[10] = self.levels;
        b[12..16].copy_from_slice(&self.block_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.nblocks.to_le_bytes());
        b[24..24 + BONUS_LEN].copy_from_slice(&self.bonus);
        b
    }

    pub fn decode(b: &[u8]) -> Result<ObjectRec> {
        if b.len() != OBJECT_LEN {
            return corrupt("OBJECT payload length");
        }
        let mut bonus = [0u8; BONUS_LEN];
        bonus.copy_from_slice(&b[24..24 + BONUS_LEN]);
        let r = ObjectRec { object: u64at(b, 0), otype: b[8], flags: b[9], block_size: u32at(b, 12), nblocks: u64at(b, 16), bonus, levels: b[10] };
        if b[11] != 0 || b[120..].iter().any(|&x| x != 0) {
            return corrupt("OBJECT reserved bytes are not zero");
        }
        let kind = r.flags & (OBJ_NEW | OBJ_RESUMED | OBJ_ANY_BASE);
        if r.flags & !(OBJ_NEW | OBJ_RESUMED | OBJ_ANY_BASE | OBJ_METADATA) != 0 || kind.count_ones() > 1 {
            return corrupt(format!("OBJECT {} flags {:#x}", r.object, r.flags));
        }
        if r.object == 0 || r.object >= MAX_OBJECT {
            return corrupt(format!("OBJECT id {} out of range", r.object));
        }
        if r.block_size < 512 || r.block_size > MAX_BLOCK_SIZE || !r.block_size.is_multiple_of(512) {
            return corrupt(format!("OBJECT {} block size {}", r.object, r.block_size));
        }
        if r.levels > tarn_obj::format::MAX_LEVELS {
            return corrupt(format!("OBJECT {} with {} levels", r.object, r.levels));
        }
        let max_blocks = tarn_obj::format::capacity(tarn_obj::format::MAX_LEVELS);
        if r.nblocks > max_blocks || r.nblocks.checked_mul(r.block_size as u64).is_none() {
            return corrupt(format!("OBJECT {} claims {} blocks", r.object, r.nblocks));
        }
        Ok(r)
    }
}

pub fn encode_freeobjects(first: u64, count: u64) -> [u8; FREEOBJECTS_LEN] {
    let mut b = [0u8; FREEOBJECTS_LEN];
    b[0..8].copy_from_slice(&first.to_le_bytes());
    b[8..16].copy_from_slice(&count.to_le_bytes());
    b
}

pub fn decode_freeobjects(b: &[u8]) -> Result<(u64, u64)> {
    if b.len() != FREEOBJECTS_LEN {
        return corrupt("FREEOBJECTS payload length");
    }
    let (first, count) = (u64at(b, 0), u64at(b, 8));
    if first == 0 || count == 0 || first >= MAX_OBJECT || count > MAX_OBJECT - first {
        return corrupt(format!("FREEOBJECTS {first} + {count} out of range"));
    }
    Ok((first, count))
}

/// WRITE header (64 bytes) followed by the data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteHdr {
    pub object: u64,
    pub offset: u64,
    pub logical_len: u32,
    pub flags: u32,
    pub data_len: u32,
    /// Raw sends only: the compression of the ciphertext's plaintext.
    pub compression: u8,
    /// Raw sends only: the block pointer's IV (salt and nonce) and MAC.
    pub iv: [u8; 16],
    pub mac: [u8; 16],
}

impl WriteHdr {
    pub fn encode(&self) -> [u8; WRITE_HEADER] {
        let mut b = [0u8; WRITE_HEADER];
        b[0..8].copy_from_slice(&self.object.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b[16..20].copy_from_slice(&self.logical_len.to_le_bytes());
        b[20..24].copy_from_slice(&self.flags.to_le_bytes());
        b[24..28].copy_from_slice(&self.data_len.to_le_bytes());
        b[28] = self.compression;
        b[32..48].copy_from_slice(&self.iv);
        b[48..64].copy_from_slice(&self.mac);
        b
    }

    /// The sealed block's pointer fields, of a raw WRITE.
    pub fn raw_block(&self) -> tarn_block::RawBlock {
        tarn_block::RawBlock { lsize: self.logical_len, psize: self.data_len, compression: self.compression, iv: self.iv, mac: self.mac }
    }

    /// The fields of a WRITE header, unchecked (`decode` checks them).
    fn fields(b: &[u8; WRITE_HEADER]) -> WriteHdr {
        let mut iv = [0u8; 16];
        iv.copy_from_slice(&b[32..48]);
        let mut mac = [0u8; 16];
        mac.copy_from_slice(&b[48..64]);
        WriteHdr { object: u64at(b, 0), offset: u64at(b, 8), logical_len: u32at(b, 16), flags: u32at(b, 20), data_len: u32at(b, 24), compression: b[28], iv, mac }
    }

    /// Parse the header of a WRITE payload; returns it and the data.
    pub fn decode(b: &[u8]) -> Result<(WriteHdr, &[u8])> {
        if b.len() < WRITE_HEADER {
            return corrupt("WRITE payload shorter than its header");
        }
        let h = WriteHdr::fields(b[..WRITE_HEADER].try_into().expect("checked length"));
        if b[29..32].iter().any(|&x| x != 0) {
            return corrupt("WRITE reserved bytes are not zero");
        }
        if h.flags & !WRITE_RAW != 0 {
            return corrupt(format!("WRITE of object {} with flags {:#x}", h.object, h.flags));
        }
        let data = &b[WRITE_HEADER..];
        if h.flags & WRITE_RAW != 0 {
            if h.data_len as usize != data.len() || h.data_len == 0 || !tarn_block::compress::known_code(h.compression) {
                return corrupt(format!("raw WRITE of object {}: {} bytes of ciphertext for {}, compression {}", h.object, data.len(), h.logical_len, h.compression));
            }
            return Ok((h, data));
        }
        if h.compression != 0 || h.iv != [0; 16] || h.mac != [0; 16] {
            return corrupt(format!("WRITE of object {} with raw fields in a plain stream", h.object));
        }
        if h.data_len as usize != data.len() || h.data_len != h.logical_len {
            return corrupt(format!("WRITE of object {}: lengths {} / {} / {}", h.object, h.logical_len, h.data_len, data.len()));
        }
        Ok((h, data))
    }
}

/// CRYPT (raw streams): how the object set is encrypted and what its root
/// authenticates (tarn-obj raw.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CryptRec {
    pub cipher: tarn_block::Cipher,
    pub key_guid: u64,
    pub root: tarn_obj::raw::RawRoot,
}

impl CryptRec {
    pub fn encode(&self) -> [u8; CRYPT_LEN] {
        let mut b = [0u8; CRYPT_LEN];
        b[0] = self.cipher.code();
        b[1] = self.root.meta_levels;
        b[8..16].copy_from_slice(&self.key_guid.to_le_bytes());
        b[16..24].copy_from_slice(&self.root.meta_nblocks.to_le_bytes());
        b[24..40].copy_from_slice(&self.root.mac);
        b
    }

    pub fn decode(b: &[u8]) -> Result<CryptRec> {
        if b.len() != CRYPT_LEN {
            return corrupt("CRYPT payload length");
        }
        let cipher = tarn_block::Cipher::from_code(b[0]).ok_or_else(|| SendError::Unsupported(format!("cipher code {}", b[0])))?;
        if b[2..8].iter().chain(&b[40..48]).any(|&x| x != 0) {
            return corrupt("CRYPT reserved bytes are not zero");
        }
        let mut mac = [0u8; 16];
        mac.copy_from_slice(&b[24..40]);
        let root = tarn_obj::raw::RawRoot { mac, meta_levels: b[1], meta_nblocks: u64at(b, 16) };
        let key_guid = u64at(b, 8);
        if key_guid == 0 || root.meta_levels == 0 || root.meta_levels > tarn_obj::format::MAX_LEVELS || root.meta_nblocks > tarn_obj::format::capacity(root.meta_levels) {
            return corrupt(format!("CRYPT: key guid {key_guid:#x}, meta-dnode of {} levels and {} blocks", root.meta_levels, root.meta_nblocks));
        }
        Ok(CryptRec { cipher, key_guid, root })
    }
}

/// SEAL (raw streams): dnode block `blkid`'s IV and MAC.
pub fn encode_seal(blkid: u64, seal: &tarn_obj::raw::DnodeSeal) -> [u8; SEAL_LEN] {
    let mut b = [0u8; SEAL_LEN];
    b[0..8].copy_from_slice(&blkid.to_le_bytes());
    b[8..24].copy_from_slice(&seal.iv);
    b[24..40].copy_from_slice(&seal.mac);
    b
}

pub fn decode_seal(b: &[u8]) -> Result<(u64, tarn_obj::raw::DnodeSeal)> {
    if b.len() != SEAL_LEN {
        return corrupt("SEAL payload length");
    }
    if b[40..].iter().any(|&x| x != 0) {
        return corrupt("SEAL reserved bytes are not zero");
    }
    let blkid = u64at(b, 0);
    if blkid >= MAX_OBJECT / tarn_obj::format::DNODES_PER_BLOCK {
        return corrupt(format!("SEAL of dnode block {blkid}"));
    }
    let mut seal = tarn_obj::raw::DnodeSeal { iv: [0; 16], mac: [0; 16] };
    seal.iv.copy_from_slice(&b[8..24]);
    seal.mac.copy_from_slice(&b[24..40]);
    Ok((blkid, seal))
}

pub fn encode_free(object: u64, offset: u64, length: u64) -> [u8; FREE_LEN] {
    let mut b = [0u8; FREE_LEN];
    b[0..8].copy_from_slice(&object.to_le_bytes());
    b[8..16].copy_from_slice(&offset.to_le_bytes());
    b[16..24].copy_from_slice(&length.to_le_bytes());
    b
}

pub fn decode_free(b: &[u8]) -> Result<(u64, u64, u64)> {
    if b.len() != FREE_LEN {
        return corrupt("FREE payload length");
    }
    let (o, off, len) = (u64at(b, 0), u64at(b, 8), u64at(b, 16));
    if len == 0 || (len != u64::MAX && off.checked_add(len).is_none()) {
        return corrupt(format!("FREE of object {o}: range {off} + {len}"));
    }
    Ok((o, off, len))
}

fn record_checksum(stream_guid: u64, series_index: u32, head: &[u8], parts: &[&[u8]]) -> [u8; 16] {
    let mut h = blake3::Hasher::new();
    h.update(&stream_guid.to_le_bytes());
    h.update(&series_index.to_le_bytes());
    h.update(head);
    for p in parts {
        h.update(p);
    }
    let mut out = [0u8; 16];
    out.copy_from_slice(&h.finalize().as_bytes()[..16]);
    out
}

/// A record header whose checksum is computed when the payload is ready,
/// possibly on another thread than the writer's.
pub struct PendingHeader {
    head: [u8; REC_HEADER],
    guid: u64,
    index: u32,
}

impl PendingHeader {
    fn new(ty: RecordType, len: usize, seq: u64, guid: u64, index: u32) -> PendingHeader {
        let mut head = [0u8; REC_HEADER];
        head[0..4].copy_from_slice(&(ty as u32).to_le_bytes());
        head[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        head[8..16].copy_from_slice(&seq.to_le_bytes());
        PendingHeader { head, guid, index }
    }

    /// The header of the record with this payload.
    pub fn finish(mut self, parts: &[&[u8]]) -> [u8; REC_HEADER] {
        debug_assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), u32at(&self.head, 4) as usize);
        let ck = record_checksum(self.guid, self.index, &self.head[..16], parts);
        self.head[16..32].copy_from_slice(&ck);
        self.head
    }
}

/// Follows the records given to a [`RecordWriter`], in the same order,
/// to frame some of them ahead of it: the writer then only writes and
/// hashes them ([`RecordWriter::record_framed`]).
#[derive(Default)]
pub struct Sequencer {
    seq: u64,
    guid: u64,
    index: u32,
}

impl Sequencer {
    /// A BEGIN record (framed by the writer).
    pub fn begin(&mut self, b: &Begin) {
        self.seq = 1;
        self.guid = b.stream_guid;
        self.index = b.series_index;
    }

    /// A record framed by the writer.
    pub fn skip(&mut self) {
        self.seq += 1;
    }

    /// A record framed here, with a payload of `len` bytes.
    pub fn frame(&mut self, ty: RecordType, len: usize) -> PendingHeader {
        debug_assert!(ty.len_ok(len));
        let h = PendingHeader::new(ty, len, self.seq, self.guid, self.index);
        self.seq += 1;
        h
    }
}

/// Writes records of sub-streams: framing, sequence numbers, checksums and
/// the running whole-sub-stream hash.
pub struct RecordWriter<'w> {
    out: &'w mut dyn Write,
    hasher: blake3::Hasher,
    seq: u64,
    bytes: u64,
    guid: u64,
    index: u32,
    pub total_bytes: u64,
    pub total_records: u64,
}

impl<'w> RecordWriter<'w> {
    pub fn new(out: &'w mut dyn Write) -> RecordWriter<'w> {
        RecordWriter { out, hasher: blake3::Hasher::new(), seq: 0, bytes: 0, guid: 0, index: 0, total_bytes: 0, total_records: 0 }
    }

    fn put(&mut self, ty: RecordType, parts: &[&[u8]], hash: bool) -> Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        debug_assert!(ty.len_ok(len));
        let head = PendingHeader::new(ty, len, self.seq, self.guid, self.index).finish(parts);
        self.emit(&head, parts, hash)
    }

    fn emit(&mut self, head: &[u8; REC_HEADER], parts: &[&[u8]], hash: bool) -> Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.out.write_all(head)?;
        if hash {
            self.hasher.update(head);
        }
        for p in parts {
            self.out.write_all(p)?;
            if hash {
                self.hasher.update(p);
            }
        }
        let n = (REC_HEADER + len) as u64;
        self.bytes += n;
        self.total_bytes += n;
        self.total_records += 1;
        self.seq += 1;
        Ok(())
    }

    /// Writes a record framed by a [`Sequencer`] that followed this
    /// writer's records (checked: type, length and sequence number).
    pub fn record_framed(&mut self, head: &[u8; REC_HEADER], parts: &[&[u8]]) -> Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let ok = RecordType::from_u32(u32at(head, 0)).is_some_and(|ty| ty != RecordType::Begin && ty != RecordType::End && ty.len_ok(len))
            && u32at(head, 4) as usize == len
            && u64at(head, 8) == self.seq;
        if !ok {
            return Err(SendError::Invalid(format!("internal error: a record framed out of sequence (record {})", self.seq)));
        }
        self.emit(head, parts, true)
    }

    pub fn begin(&mut self, b: &Begin) -> Result<()> {
        self.hasher = blake3::Hasher::new();
        self.seq = 0;
        self.bytes = 0;
        self.guid = b.stream_guid;
        self.index = b.series_index;
        self.put(RecordType::Begin, &[&b.encode()], true)
    }

    pub fn record(&mut self, ty: RecordType, parts: &[&[u8]]) -> Result<()> {
        self.put(ty, parts, true)
    }

    pub fn end(&mut self) -> Result<()> {
        let mut p = [0u8; END_LEN];
        p[0..8].copy_from_slice(&self.seq.to_le_bytes());
        p[8..16].copy_from_slice(&self.bytes.to_le_bytes());
        p[16..48].copy_from_slice(self.hasher.finalize().as_bytes());
        self.put(RecordType::End, &[&p], false)
    }

    pub fn flush(&mut self) -> Result<()> {
        Ok(self.out.flush()?)
    }
}

/// Bytes of a record with a payload of `len` bytes.
pub fn record_size(len: usize) -> u64 {
    (REC_HEADER + len) as u64
}

/// Reads and verifies records.
pub struct RecordReader<'r> {
    input: &'r mut dyn Read,
    hasher: blake3::Hasher,
    seq: u64,
    bytes: u64,
    guid: u64,
    index: u32,
    /// Bytes read in the current sub-stream and in all.
    pub total_bytes: u64,
    pub total_records: u64,
    pending_end: Option<[u8; REC_HEADER]>,
}

fn read_full(input: &mut dyn Read, buf: &mut [u8], what: &str) -> Result<()> {
    match input.read_exact(buf) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(SendError::Truncated(format!("stream ends inside {what}"))),
        Err(e) => Err(SendError::Io(e)),
    }
}

impl<'r> RecordReader<'r> {
    pub fn new(input: &'r mut dyn Read) -> RecordReader<'r> {
        RecordReader { input, hasher: blake3::Hasher::new(), seq: 0, bytes: 0, guid: 0, index: 0, total_bytes: 0, total_records: 0, pending_end: None }
    }

    /// Bytes of the current sub-stream read so far.
    pub fn substream_bytes(&self) -> u64 {
        self.bytes
    }

    fn read_raw(&mut self) -> Result<(RecordType, [u8; REC_HEADER], Vec<u8>)> {
        let mut head = [0u8; REC_HEADER];
        read_full(self.input, &mut head, "a record header")?;
        let tyv = u32at(&head, 0);
        let ty = RecordType::from_u32(tyv).ok_or_else(|| SendError::Corrupt(format!("record {}: unknown type {tyv}", self.seq)))?;
        let len = u32at(&head, 4) as usize;
        if !ty.len_ok(len) {
            return corrupt(format!("record {} ({ty:?}): payload length {len} out of bounds", self.seq));
        }
        let mut payload = vec![0u8; len];
        read_full(self.input, &mut payload, "a record payload")?;
        let n = (REC_HEADER + len) as u64;
        self.total_bytes += n;
        Ok((ty, head, payload))
    }

    fn verify(&mut self, ty: RecordType, head: &[u8; REC_HEADER], payload: &[u8]) -> Result<()> {
        let ck = record_checksum(self.guid, self.index, &head[..16], &[payload]);
        if ck != head[16..32] {
            return corrupt(format!("record {} ({ty:?}): checksum mismatch", self.seq));
        }
        let seq = u64at(head, 8);
        if seq != self.seq {
            return corrupt(format!("record out of order: expected sequence {}, found {seq}", self.seq));
        }
        Ok(())
    }

    fn account(&mut self, head: &[u8], payload: &[u8], hash: bool) {
        if hash {
            self.hasher.update(head);
            self.hasher.update(payload);
        }
        self.bytes += (head.len() + payload.len()) as u64;
        self.seq += 1;
        self.total_records += 1;
    }

    /// The BEGIN record of the next sub-stream.
    pub fn read_begin(&mut self) -> Result<Begin> {
        self.hasher = blake3::Hasher::new();
        self.seq = 0;
        self.bytes = 0;
        let (ty, head, payload) = self.read_raw()?;
        if ty != RecordType::Begin {
            return corrupt(format!("expected a BEGIN record, found {ty:?}"));
        }
        // The checksum context (guid, index) comes from the payload itself:
        // check the magic first so garbage is reported as such.
        if payload.get(0..8) != Some(&MAGIC[..]) {
            return corrupt("not a tarn send stream (bad magic)");
        }
        self.guid = u64at(&payload, 16);
        self.index = u32at(&payload, 24);
        self.verify(ty, &head, &payload)?;
        let b = Begin::decode(&payload)?;
        self.account(&head, &payload, true);
        Ok(b)
    }

    /// The next record of the current sub-stream, verified (checksum and
    /// sequence). An END record must then be checked with [`Self::finish_end`].
    pub fn read_record(&mut self) -> Result<(RecordType, Vec<u8>)> {
        let (ty, head, payload) = self.read_raw()?;
        self.verify(ty, &head, &payload)?;
        match ty {
            RecordType::Begin => corrupt(format!("record {}: BEGIN inside a sub-stream", self.seq)),
            RecordType::End => {
                self.pending_end = Some(head);
                Ok((ty, payload))
            }
            _ => {
                self.account(&head, &payload, true);
                Ok((ty, payload))
            }
        }
    }

    /// Checks an END record against the sub-stream: record count, bytes and
    /// the hash of every byte before it.
    pub fn finish_end(&mut self, payload: &[u8]) -> Result<()> {
        let head = self.pending_end.take().ok_or_else(|| SendError::Corrupt("END checked twice".into()))?;
        if payload.len() != END_LEN {
            return corrupt("END payload length");
        }
        let (records, bytes) = (u64at(payload, 0), u64at(payload, 8));
        if records != self.seq || bytes != self.bytes {
            return corrupt(format!("END claims {records} records / {bytes} bytes, the sub-stream had {} / {}", self.seq, self.bytes));
        }
        if self.hasher.finalize().as_bytes()[..] != payload[16..48] {
            return corrupt("END: the hash of the sub-stream does not match");
        }
        self.account(&head, payload, false);
        Ok(())
    }
}

/// The resume token's contents (see `docs/send-stream.md`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResumeToken {
    pub stream_guid: u64,
    pub series_index: u32,
    pub series_count: u32,
    /// Guid of the sub-stream's snapshot (0: not known yet — the receive
    /// stopped before that sub-stream's BEGIN arrived).
    pub to_guid: u64,
    pub to_txg: u64,
    pub from_guid: u64,
    pub from_txg: u64,
    pub series_last_guid: u64,
    pub position: Position,
    /// Bytes of the interrupted sub-stream received before the stop, and
    /// of the whole stream (informational).
    pub bytes: u64,
    pub total_bytes: u64,
    /// The receiving object set holding the partial state (informational).
    pub head: u64,
}

const TOKEN_MAGIC: &[u8; 4] = b"TRT1";
const TOKEN_LEN: usize = 128;

impl ResumeToken {
    pub fn encode(&self) -> String {
        let mut b = [0u8; TOKEN_LEN];
        b[0..4].copy_from_slice(TOKEN_MAGIC);
        b[4..8].copy_from_slice(&1u32.to_le_bytes());
        b[8..16].copy_from_slice(&self.stream_guid.to_le_bytes());
        b[16..20].copy_from_slice(&self.series_index.to_le_bytes());
        b[20..24].copy_from_slice(&self.series_count.to_le_bytes());
        b[24..32].copy_from_slice(&self.to_guid.to_le_bytes());
        b[32..40].copy_from_slice(&self.to_txg.to_le_bytes());
        b[40..48].copy_from_slice(&self.from_guid.to_le_bytes());
        b[48..56].copy_from_slice(&self.from_txg.to_le_bytes());
        b[56..64].copy_from_slice(&self.series_last_guid.to_le_bytes());
        b[64..72].copy_from_slice(&self.position.object.to_le_bytes());
        b[72..80].copy_from_slice(&self.position.offset.to_le_bytes());
        b[80..84].copy_from_slice(&(self.position.started as u32).to_le_bytes());
        b[88..96].copy_from_slice(&self.bytes.to_le_bytes());
        b[96..104].copy_from_slice(&self.total_bytes.to_le_bytes());
        b[104..112].copy_from_slice(&self.head.to_le_bytes());
        let ck = blake3::hash(&b[..112]);
        b[112..128].copy_from_slice(&ck.as_bytes()[..16]);
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    pub fn decode(s: &str) -> Result<ResumeToken> {
        let bad = |m: &str| SendError::Invalid(format!("resume token: {m}"));
        let s = s.trim();
        if s.len() != TOKEN_LEN * 2 || !s.is_ascii() {
            return Err(bad("wrong length"));
        }
        let mut b = [0u8; TOKEN_LEN];
        for (i, x) in b.iter_mut().enumerate() {
            *x = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad("not hexadecimal"))?;
        }
        if &b[0..4] != TOKEN_MAGIC || u32at(&b, 4) != 1 {
            return Err(bad("unknown format"));
        }
        if blake3::hash(&b[..112]).as_bytes()[..16] != b[112..128] {
            return Err(bad("checksum mismatch"));
        }
        let started = u32at(&b, 80);
        if started > 1 || b[84..88].iter().any(|&x| x != 0) {
            return Err(bad("reserved bytes"));
        }
        let t = ResumeToken {
            stream_guid: u64at(&b, 8),
            series_index: u32at(&b, 16),
            series_count: u32at(&b, 20),
            to_guid: u64at(&b, 24),
            to_txg: u64at(&b, 32),
            from_guid: u64at(&b, 40),
            from_txg: u64at(&b, 48),
            series_last_guid: u64at(&b, 56),
            position: Position { object: u64at(&b, 64), offset: u64at(&b, 72), started: started == 1 },
            bytes: u64at(&b, 88),
            total_bytes: u64at(&b, 96),
            head: u64at(&b, 104),
        };
        if t.series_count == 0 || t.series_index >= t.series_count || t.series_last_guid == 0 {
            return Err(bad("series position out of range"));
        }
        if t.to_guid == 0 && t.position != Position::default() {
            return Err(bad("a position inside a sub-stream whose snapshot is unknown"));
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn begin_round_trips_and_rejects_garbage() {
        let b = Begin {
            flags: FLAG_RESUME,
            stream_guid: 7,
            series_index: 1,
            series_count: 3,
            series_last_guid: 9,
            pool_guid: 1,
            objset: 2,
            to_txg: 50,
            to_guid: 8,
            from_txg: 40,
            from_guid: 6,
            resume: Position { object: 20, offset: 4096, started: true },
        };
        assert_eq!(Begin::decode(&b.encode()).unwrap(), b);
        let mut raw = b.encode();
        raw[12] = 0x80;
        assert!(matches!(Begin::decode(&raw), Err(SendError::Unsupported(_))));
        let mut raw = b.encode();
        raw[28] = 1; // count 1, index 1
        assert!(Begin::decode(&raw).is_err());
        assert!(Begin::decode(&raw[..100]).is_err());
    }

    #[test]
    fn token_round_trips_and_detects_damage() {
        let t = ResumeToken {
            stream_guid: 1,
            series_index: 2,
            series_count: 3,
            to_guid: 4,
            to_txg: 5,
            from_guid: 6,
            from_txg: 7,
            series_last_guid: 8,
            position: Position { object: 9, offset: 10, started: true },
            bytes: 11,
            total_bytes: 12,
            head: 13,
        };
        let s = t.encode();
        assert_eq!(ResumeToken::decode(&s).unwrap(), t);
        let mut d = s.into_bytes();
        d[40] = if d[40] == b'0' { b'1' } else { b'0' };
        assert!(ResumeToken::decode(std::str::from_utf8(&d).unwrap()).is_err());
        assert!(ResumeToken::decode("zz").is_err());
    }
}
