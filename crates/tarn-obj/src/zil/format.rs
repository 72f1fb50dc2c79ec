//! Byte layouts of the intent log (docs/on-disk-format.md, "Intent log").
//! Everything little-endian; decoders return `Err(Corrupt)`, never panic.
//!
//! Log header (inside ObjsetPhys at byte 600, 168 bytes; zero = no log):
//! | off | size | field |
//! |----:|-----:|-------|
//! | 0   | 128 | head: first block of the chain (possibly not written yet) |
//! | 128 | 8   | head_seq: block sequence number the head must carry |
//! | 136 | 8   | chain: chain identity (0 = no log) |
//! | 144 | 8   | owner: id of the object set whose log it is (a snapshot or clone carries its origin's header: not theirs) |
//! | 152 | 8   | claim_txg: 0, or the synced txg at the import that claimed the chain |
//! | 160 | 8   | replay_seq: records with seq <= this have been replayed |
//!
//! Log block (psize bytes, a multiple of the sector):
//! | off | size | field |
//! |----:|-----:|-------|
//! | 0   | 8   | magic `b"TARNLOG1"` (`b"TARNLOGE"`: sealed) |
//! | 8   | 8   | chain identity |
//! | 16  | 8   | block sequence number |
//! | 24  | 4   | bytes of records from offset 64 |
//! | 28  | 4   | number of records |
//! | 32  | 16  | sealed: IV (salt, nonce); else zero |
//! | 48  | 16  | sealed: MAC (GCM tag); else zero |
//! | 64  | ... | records, each 8-aligned |
//! | psize-160 | 128 | next: the block allocated to follow this one |
//! | psize-32  | 32  | blake3 of bytes `[0, psize-32)` |
//!
//! Record: type u32 (non-zero), payload length u32, txg u64, seq u64,
//! payload, zero padding to 8 bytes.
//!
//! A sealed block (the log of an encrypted object set) has its record
//! bytes `[64, 64 + used)` encrypted with the object set's block keys
//! (AES-GCM, a detached seal). Right after them, in the clear, comes its
//! *claim table*: count u32, zero u32, then per entry the txg u64 of a
//! record and the pointer (128 bytes) of a block that record's indirect
//! write names, in record order. The additional data binds a domain
//! string, the object set's id, bytes `[0, 32)`, the next pointer and (when
//! the table is not empty) the table. Everything the import needs to walk
//! and claim the chain (magic, chain, sequence, next, the claim table, the
//! checksum over it all) stays readable without the key; the records
//! (their types, txgs, sequence numbers and contents) are opened at
//! replay, which needs the key, and must name exactly the table's blocks.

use tarn_block::{BlockKeys, BlockPtr, ChecksumKind, BP_SIZE};

use crate::{ObjError, Result, Txg};

pub const LOG_HEADER_OFFSET: usize = 600;
pub const LOG_HEADER_SIZE: usize = 168;
pub const LOG_MAGIC: &[u8; 8] = b"TARNLOG1";
pub const LOG_MAGIC_SEALED: &[u8; 8] = b"TARNLOGE";
/// Domain of a sealed log block's additional data.
const SEAL_DOMAIN: &[u8] = b"tarn log block v1";
pub const BLOCK_HEAD: usize = 64;
pub const BLOCK_TAIL: usize = BP_SIZE + 32;
pub const RECORD_HEAD: usize = 24;
/// Smallest and largest log blocks.
pub const LOG_BLOCK_MIN: usize = 4096;
pub const LOG_BLOCK_MAX: usize = 128 * 1024;
/// The largest payload one record may carry (it must fit a block alone).
pub const RECORD_PAYLOAD_MAX: usize = LOG_BLOCK_MAX - BLOCK_HEAD - BLOCK_TAIL - RECORD_HEAD;
/// Object type stamped into log block pointers.
pub const OT_LOG_BLOCK: u8 = 6;
/// A claim table's head (count, zero) and each entry (txg, pointer).
pub const CLAIM_HEAD: usize = 8;
pub const CLAIM_ENTRY: usize = 8 + BP_SIZE;

/// The blocks a sealed block's records name, as its claim table lists
/// them: (record txg, block pointer), in record order.
pub fn claims_of(records: &[LogRecord]) -> Vec<(Txg, BlockPtr)> {
    records
        .iter()
        .filter(|r| r.rtype == crate::redo::REDO_RECORD)
        .flat_map(|r| crate::redo::block_pointers(&r.payload).into_iter().map(move |bp| (r.txg, bp)))
        .collect()
}

/// Bytes `record` takes in a block: framed, plus its claim-table entries
/// when the block is sealed.
pub fn footprint(record: &LogRecord, sealed: bool) -> usize {
    let claims = if sealed { claims_of(std::slice::from_ref(record)).len() } else { 0 };
    record.framed_len() + claims * CLAIM_ENTRY
}

/// Record bytes a block of `psize` holds (`capacity`, less a sealed
/// block's claim-table head).
pub fn capacity_for(psize: usize, sealed: bool) -> usize {
    capacity(psize).saturating_sub(if sealed { CLAIM_HEAD } else { 0 })
}

/// The log header an object set carries in its phys (written by every
/// txg sync of that object set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LogHeader {
    pub head: BlockPtr,
    pub head_seq: u64,
    pub chain: u64,
    pub owner: u64,
    pub claim_txg: Txg,
    pub replay_seq: u64,
}

impl LogHeader {
    pub fn is_empty(&self) -> bool {
        self.chain == 0
    }

    pub fn encode(&self, out: &mut [u8]) {
        out[..LOG_HEADER_SIZE].fill(0);
        if self.is_empty() {
            return;
        }
        out[0..128].copy_from_slice(&self.head.encode());
        for (i, v) in [self.head_seq, self.chain, self.owner, self.claim_txg, self.replay_seq].iter().enumerate() {
            out[128 + i * 8..136 + i * 8].copy_from_slice(&v.to_le_bytes());
        }
    }

    /// An object set written before the log existed has zeros here: no log.
    pub fn decode(b: &[u8]) -> Result<LogHeader> {
        let b = b.get(..LOG_HEADER_SIZE).ok_or_else(|| ObjError::Corrupt("short log header".into()))?;
        let u = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        let h = LogHeader {
            head: BlockPtr::decode(&b[0..128]).map_err(|e| ObjError::Corrupt(format!("log header: {e}")))?,
            head_seq: u(128),
            chain: u(136),
            owner: u(144),
            claim_txg: u(152),
            replay_seq: u(160),
        };
        if h.chain == 0 && b.iter().any(|&x| x != 0) {
            return Err(ObjError::Corrupt("log header without a chain identity".into()));
        }
        if h.chain != 0 && h.head.is_hole() {
            return Err(ObjError::Corrupt("log header with a chain but no head block".into()));
        }
        Ok(h)
    }
}

/// One record: opaque payload for the layer above.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord {
    pub rtype: u32,
    pub txg: Txg,
    pub seq: u64,
    pub payload: Vec<u8>,
}

impl LogRecord {
    /// Bytes the record takes in a block.
    pub fn framed_len(&self) -> usize {
        RECORD_HEAD + self.payload.len().div_ceil(8) * 8
    }

    fn encode_into(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.rtype.to_le_bytes());
        out[4..8].copy_from_slice(&(self.payload.len() as u32).to_le_bytes());
        out[8..16].copy_from_slice(&self.txg.to_le_bytes());
        out[16..24].copy_from_slice(&self.seq.to_le_bytes());
        out[24..24 + self.payload.len()].copy_from_slice(&self.payload);
    }
}

/// Whether `records` carry sequence numbers strictly increasing from
/// above `last`, which follows them (up to the first out of order).
pub fn in_sequence(records: &[LogRecord], last: &mut u64) -> bool {
    records.iter().all(|r| {
        let ok = r.seq > *last;
        *last = r.seq;
        ok
    })
}

/// A decoded, verified log block.
#[derive(Clone, Debug)]
pub struct LogBlock {
    pub chain: u64,
    pub seq: u64,
    pub records: Vec<LogRecord>,
    pub next: BlockPtr,
    /// A sealed block's bytes (its records are opened at replay).
    pub sealed: Option<Vec<u8>>,
    /// A sealed block's claim table (empty for a plain block, whose
    /// records name their blocks in the clear).
    pub claims: Vec<(Txg, BlockPtr)>,
}

/// Record bytes a block of `psize` bytes holds.
pub fn capacity(psize: usize) -> usize {
    psize.saturating_sub(BLOCK_HEAD + BLOCK_TAIL)
}

/// Encodes a block of exactly `psize` bytes. The records must fit
/// (`capacity`): a bug otherwise.
pub fn encode_block(psize: usize, chain: u64, seq: u64, records: &[LogRecord], next: &BlockPtr) -> Vec<u8> {
    let mut b = frame_block(LOG_MAGIC, psize, chain, seq, records, next);
    finish(&mut b);
    b
}

/// `encode_block` with the records sealed under `keys` (the log of
/// encrypted object set `objset`).
pub fn encode_block_sealed(psize: usize, chain: u64, seq: u64, records: &[LogRecord], next: &BlockPtr, keys: &BlockKeys, objset: u64) -> Result<Vec<u8>> {
    let mut b = frame_block(LOG_MAGIC_SEALED, psize, chain, seq, records, next);
    let used = u32::from_le_bytes(b[24..28].try_into().expect("4 bytes")) as usize;
    let claims = claims_of(records);
    let at = BLOCK_HEAD + used;
    assert!(used + CLAIM_HEAD + claims.len() * CLAIM_ENTRY <= capacity(psize), "log block of {psize} bytes cannot hold its claim table");
    b[at..at + 4].copy_from_slice(&(claims.len() as u32).to_le_bytes());
    for (i, (txg, bp)) in claims.iter().enumerate() {
        let e = at + CLAIM_HEAD + i * CLAIM_ENTRY;
        b[e..e + 8].copy_from_slice(&txg.to_le_bytes());
        b[e + 8..e + CLAIM_ENTRY].copy_from_slice(&bp.encode());
    }
    let aad = seal_aad(&b, objset);
    let (iv, mac) = keys.seal_detached(&aad, &mut b[BLOCK_HEAD..BLOCK_HEAD + used]).map_err(|e| ObjError::Io(format!("sealing a log block: {e}")))?;
    b[32..48].copy_from_slice(&iv);
    b[48..64].copy_from_slice(&mac);
    finish(&mut b);
    Ok(b)
}

/// What a sealed block's MAC binds besides its records: the framing, the
/// next pointer and a non-empty claim table (blocks written before claim
/// tables existed have none, and bind the same bytes as then).
fn seal_aad(b: &[u8], objset: u64) -> Vec<u8> {
    let n = b.len();
    let mut a = Vec::with_capacity(SEAL_DOMAIN.len() + 8 + 32 + BP_SIZE);
    a.extend_from_slice(SEAL_DOMAIN);
    a.extend_from_slice(&objset.to_le_bytes());
    a.extend_from_slice(&b[0..32]);
    a.extend_from_slice(&b[n - BLOCK_TAIL..n - 32]);
    if let Ok(Some(table)) = claim_table_bytes(b) {
        a.extend_from_slice(table);
    }
    a
}

/// A sealed block's claim table bytes (head and entries): None when it
/// has no entries, `Err` when they do not fit the block.
fn claim_table_bytes(b: &[u8]) -> std::result::Result<Option<&[u8]>, ()> {
    let u32at = |o: usize| b.get(o..o + 4).and_then(|x| x.try_into().ok()).map(u32::from_le_bytes).ok_or(());
    let at = BLOCK_HEAD + u32at(24)? as usize;
    let count = u32at(at)? as usize;
    if count == 0 {
        return Ok(None);
    }
    let end = count.checked_mul(CLAIM_ENTRY).and_then(|n| n.checked_add(at + CLAIM_HEAD)).ok_or(())?;
    if end > b.len().saturating_sub(BLOCK_TAIL) {
        return Err(());
    }
    b.get(at..end).map(Some).ok_or(())
}

/// The claim table of a sealed block: `Corrupt` if it overruns the block.
fn parse_claims(b: &[u8]) -> Result<Vec<(Txg, BlockPtr)>> {
    let bad = |what: &str| ObjError::Corrupt(format!("sealed log block: {what}"));
    let table = match claim_table_bytes(b) {
        Ok(Some(table)) => table,
        Ok(None) => return Ok(Vec::new()),
        Err(()) => return Err(bad("claim table overruns")),
    };
    let mut out = Vec::with_capacity((table.len() - CLAIM_HEAD) / CLAIM_ENTRY);
    for e in table[CLAIM_HEAD..].chunks_exact(CLAIM_ENTRY) {
        let txg = u64::from_le_bytes(e[0..8].try_into().unwrap_or([0; 8]));
        let bp = BlockPtr::decode(&e[8..]).map_err(|e| bad(&format!("claim table pointer: {e}")))?;
        out.push((txg, bp));
    }
    Ok(out)
}

/// Opens the records of a sealed block that `verifies` (replay, with the
/// object set's keys). A block that does not authenticate is `Corrupt`.
pub fn open_sealed(b: &[u8], keys: &BlockKeys, objset: u64) -> Result<Vec<LogRecord>> {
    let bad = |what: &str| ObjError::Corrupt(format!("sealed log block: {what}"));
    if b.len() < BLOCK_HEAD + BLOCK_TAIL || &b[0..8] != LOG_MAGIC_SEALED {
        return Err(bad("not a sealed block"));
    }
    let used = u32::from_le_bytes(b[24..28].try_into().unwrap_or([0; 4])) as usize;
    let count = u32::from_le_bytes(b[28..32].try_into().unwrap_or([0; 4])) as usize;
    if used > capacity(b.len()) {
        return Err(bad("records overrun the block"));
    }
    let iv: [u8; 16] = b[32..48].try_into().unwrap_or([0; 16]);
    let mac: [u8; 16] = b[48..64].try_into().unwrap_or([0; 16]);
    let mut area = vec![0u8; used];
    keys.open_detached(&iv, &mac, &seal_aad(b, objset), &b[BLOCK_HEAD..BLOCK_HEAD + used], &mut area)
        .map_err(|_| bad("does not authenticate"))?;
    let records = parse_records(&area, count)?;
    // The claim took the table's blocks: the records must name exactly those.
    if claims_of(&records) != parse_claims(b)? {
        return Err(bad("claim table does not match its records"));
    }
    Ok(records)
}

fn frame_block(magic: &[u8; 8], psize: usize, chain: u64, seq: u64, records: &[LogRecord], next: &BlockPtr) -> Vec<u8> {
    let used: usize = records.iter().map(LogRecord::framed_len).sum();
    assert!(used <= capacity(psize), "log block of {psize} bytes cannot hold {used} bytes of records");
    let mut b = vec![0u8; psize];
    b[0..8].copy_from_slice(magic);
    b[8..16].copy_from_slice(&chain.to_le_bytes());
    b[16..24].copy_from_slice(&seq.to_le_bytes());
    b[24..28].copy_from_slice(&(used as u32).to_le_bytes());
    b[28..32].copy_from_slice(&(records.len() as u32).to_le_bytes());
    let mut o = BLOCK_HEAD;
    for r in records {
        r.encode_into(&mut b[o..]);
        o += r.framed_len();
    }
    b[psize - BLOCK_TAIL..psize - 32].copy_from_slice(&next.encode());
    b
}

/// Writes the block's own checksum (its last 32 bytes).
fn finish(b: &mut [u8]) {
    let n = b.len();
    let sum = tarn_block::checksum::compute(ChecksumKind::Blake3, &b[..n - 32]);
    b[n - 32..].copy_from_slice(&sum);
}

/// Whether `b` is the block `seq` of chain `chain`: its checksum matches
/// and it names that chain and sequence number. A stale block of another
/// chain, or of an earlier lap of this one, fails here.
pub fn verifies(b: &[u8], chain: u64, seq: u64) -> bool {
    if b.len() < BLOCK_HEAD + BLOCK_TAIL || (&b[0..8] != LOG_MAGIC && &b[0..8] != LOG_MAGIC_SEALED) {
        return false;
    }
    let n = b.len();
    if tarn_block::checksum::compute(ChecksumKind::Blake3, &b[..n - 32])[..] != b[n - 32..] {
        return false;
    }
    b[8..16] == chain.to_le_bytes() && b[16..24] == seq.to_le_bytes()
}

/// Decodes a block that `verifies`; malformed framing is `Corrupt`. A
/// sealed block comes back with no records and its bytes in `sealed`.
pub fn decode_block(b: &[u8]) -> Result<LogBlock> {
    let bad = |what: &str| ObjError::Corrupt(format!("log block: {what}"));
    if b.len() < BLOCK_HEAD + BLOCK_TAIL {
        return Err(bad("too short"));
    }
    let u32at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
    let u64at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    let used = u32at(24) as usize;
    let count = u32at(28) as usize;
    if used > capacity(b.len()) {
        return Err(bad("records overrun the block"));
    }
    let n = b.len();
    let next = BlockPtr::decode(&b[n - BLOCK_TAIL..n - 32]).map_err(|e| bad(&format!("next pointer: {e}")))?;
    if &b[0..8] == LOG_MAGIC_SEALED {
        let claims = parse_claims(b)?;
        return Ok(LogBlock { chain: u64at(8), seq: u64at(16), records: Vec::new(), next, sealed: Some(b.to_vec()), claims });
    }
    let records = parse_records(&b[BLOCK_HEAD..BLOCK_HEAD + used], count)?;
    Ok(LogBlock { chain: u64at(8), seq: u64at(16), records, next, sealed: None, claims: Vec::new() })
}

/// The `count` records framed in `area`.
fn parse_records(area: &[u8], count: usize) -> Result<Vec<LogRecord>> {
    let bad = |what: &str| ObjError::Corrupt(format!("log block: {what}"));
    let used = area.len();
    let mut records = Vec::with_capacity(count.min(used / RECORD_HEAD));
    let mut o = 0;
    while o < area.len() {
        let head = area.get(o..o + RECORD_HEAD).ok_or_else(|| bad("truncated record"))?;
        let rtype = u32::from_le_bytes(head[0..4].try_into().unwrap_or([0; 4]));
        let len = u32::from_le_bytes(head[4..8].try_into().unwrap_or([0; 4])) as usize;
        let payload = area.get(o + RECORD_HEAD..o + RECORD_HEAD + len).ok_or_else(|| bad("record payload overruns"))?;
        if rtype == 0 {
            return Err(bad("record of type 0"));
        }
        records.push(LogRecord {
            rtype,
            txg: u64::from_le_bytes(head[8..16].try_into().unwrap_or([0; 8])),
            seq: u64::from_le_bytes(head[16..24].try_into().unwrap_or([0; 8])),
            payload: payload.to_vec(),
        });
        o += RECORD_HEAD + len.div_ceil(8) * 8;
    }
    if records.len() != count {
        return Err(bad("record count does not match"));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_round_trips_and_rejects_other_chains_and_laps() {
        let recs = vec![
            LogRecord { rtype: 1, txg: 7, seq: 1, payload: b"hello".to_vec() },
            LogRecord { rtype: 2, txg: 8, seq: 2, payload: vec![] },
        ];
        let b = encode_block(4096, 42, 9, &recs, &BlockPtr::HOLE);
        assert!(verifies(&b, 42, 9));
        assert!(!verifies(&b, 43, 9), "another chain");
        assert!(!verifies(&b, 42, 10), "another lap");
        let d = decode_block(&b).unwrap();
        assert_eq!(d.records, recs);
        let mut torn = b.clone();
        torn[100] ^= 1;
        assert!(!verifies(&torn, 42, 9));
    }

    #[test]
    fn sealed_blocks_hide_their_records_and_authenticate() {
        use tarn_block::Cipher;
        use tarn_keys::MasterKey;
        let keys = BlockKeys::new(Cipher::Aes256Gcm, &MasterKey::from_bytes(&[5u8; 32])).unwrap();
        let other = BlockKeys::new(Cipher::Aes256Gcm, &MasterKey::from_bytes(&[6u8; 32])).unwrap();
        let marker = b"a secret file name and its bytes".to_vec();
        let recs = vec![
            LogRecord { rtype: 1, txg: 7, seq: 11, payload: marker.clone() },
            LogRecord { rtype: 1, txg: 8, seq: 12, payload: vec![9; 100] },
        ];
        let next = BlockPtr::HOLE;
        let b = encode_block_sealed(4096, 42, 3, &recs, &next, &keys, 77).unwrap();
        assert!(verifies(&b, 42, 3), "the chain is walkable without the key");
        assert!(!b.windows(marker.len()).any(|w| w == &marker[..]), "record bytes are in the clear");
        let d = decode_block(&b).unwrap();
        assert!(d.records.is_empty() && d.sealed.is_some());
        assert_eq!(open_sealed(&b, &keys, 77).unwrap(), recs);
        assert!(open_sealed(&b, &keys, 78).is_err(), "another object set");
        assert!(open_sealed(&b, &other, 77).is_err(), "another key");
        // Any change to a bound byte fails, even with the checksum fixed up.
        for at in [8, 16, 24, 28, 40, 56, 64, 70, 4096 - 150] {
            let mut t = b.clone();
            t[at] ^= 1;
            finish(&mut t);
            assert!(open_sealed(&t, &keys, 77).is_err(), "byte {at} changed");
        }
        // Two encodings of the same records differ (a fresh nonce each).
        let again = encode_block_sealed(4096, 42, 3, &recs, &next, &keys, 77).unwrap();
        assert_ne!(b[64..200], again[64..200]);
    }

    /// A sealed block lists the blocks its records' indirect writes name
    /// in the clear (the claim needs them without the key); the records
    /// must name exactly those, and the table is bound by the MAC.
    #[test]
    fn sealed_blocks_list_their_indirect_blocks_in_a_bound_claim_table() {
        use tarn_block::{Cipher, Dva};
        use tarn_keys::MasterKey;
        let keys = BlockKeys::new(Cipher::Aes256Gcm, &MasterKey::from_bytes(&[5u8; 32])).unwrap();
        let bp_at = |offset: u64| {
            let mut bp = BlockPtr::HOLE;
            bp.lsize = 131072;
            bp.psize = 131072;
            bp.birth = 9;
            bp.fill = 1;
            bp.checksum_kind = 3;
            bp.ndva = 1;
            bp.dva[0] = Dva { vdev: 0, asize: 131072, offset };
            bp
        };
        let (a, b) = (bp_at(1 << 20), bp_at(2 << 20));
        let mut two = crate::redo::block_note(5, 0, 131072, &a);
        two.extend(crate::redo::block_note(5, 131072, 131072, &b));
        let recs = vec![
            LogRecord { rtype: crate::redo::REDO_RECORD, txg: 9, seq: 1, payload: two },
            LogRecord { rtype: 2, txg: 9, seq: 2, payload: b"not a redo record".to_vec() },
        ];
        assert_eq!(claims_of(&recs), vec![(9, a), (9, b)]);
        let fits: usize = recs.iter().map(|r| footprint(r, true)).sum();
        assert_eq!(fits, recs.iter().map(LogRecord::framed_len).sum::<usize>() + 2 * CLAIM_ENTRY);
        let blk = encode_block_sealed(4096, 42, 3, &recs, &BlockPtr::HOLE, &keys, 77).unwrap();
        let d = decode_block(&blk).unwrap();
        assert_eq!(d.claims, vec![(9, a), (9, b)], "the table reads without the key");
        assert_eq!(open_sealed(&blk, &keys, 77).unwrap(), recs);
        // A changed table entry (checksum fixed up) fails the MAC.
        let used = u32::from_le_bytes(blk[24..28].try_into().unwrap()) as usize;
        let mut t = blk.clone();
        t[BLOCK_HEAD + used + CLAIM_HEAD + 8 + 40] ^= 1;
        finish(&mut t);
        assert!(verifies(&t, 42, 3));
        assert!(open_sealed(&t, &keys, 77).is_err(), "a forged claim table authenticated");
        // A table that runs past the block is malformed, not a panic.
        let mut t = blk.clone();
        t[BLOCK_HEAD + used..BLOCK_HEAD + used + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        finish(&mut t);
        assert!(decode_block(&t).is_err());
        assert!(open_sealed(&t, &keys, 77).is_err());
        // A block with no indirect writes has no table and binds what it did
        // before tables existed.
        let plain = vec![LogRecord { rtype: 2, txg: 9, seq: 1, payload: vec![1; 10] }];
        let blk = encode_block_sealed(4096, 42, 3, &plain, &BlockPtr::HOLE, &keys, 77).unwrap();
        assert!(decode_block(&blk).unwrap().claims.is_empty());
        assert_eq!(open_sealed(&blk, &keys, 77).unwrap(), plain);
    }

    #[test]
    fn zero_header_is_no_log() {
        let h = LogHeader::decode(&[0u8; LOG_HEADER_SIZE]).unwrap();
        assert!(h.is_empty());
    }
}
