//! Key/value maps stored in objects (extendible hashing).
//!
//! A ZAP ("ZFS attribute processor" in ZFS; here simply the map) is an object
//! of 16 KiB blocks holding an extendible hash table. Directories, xattr
//! directories, dataset and property tables are ZAPs.
//!
//! # Big theory
//!
//! Every key is hashed with xxh3-64 seeded by a per-map seed; the top 48
//! bits of that hash (`h48`) pick the bucket. A pointer table of
//! `2^global_depth` entries maps the top `global_depth` bits of `h48` to a
//! leaf block. A leaf has a `local_depth <= global_depth` and a `prefix`
//! (the top `local_depth` bits shared by all its entries); it is pointed to
//! by `2^(global_depth - local_depth)` consecutive table slots. A leaf that
//! overflows splits on the next hash bit; when its local depth equals the
//! global depth the pointer table doubles first. Leaves never merge.
//!
//! Entries inside a leaf are sorted by `(h48, cd)` where `cd` is a collision
//! differentiator: the lowest value not used by another entry with the same
//! `h48` (entries with equal `h48` always share a leaf). An entry keeps its
//! `(h48, cd)` for life, so the iteration cookie
//! `cookie = h48 << 15 | cd` is stable across inserts and removes:
//! iterating from a cookie yields exactly the entries whose `(h48, cd)` is
//! at or after it, in hash order. Cookies are below 2^63 (`cd < 0x7FF0`),
//! so callers can offer them as non-negative `off_t` values (readdir,
//! telldir, NFS cookies) after adding a small bias. Cookie 0 means "start".
//!
//! Lookup cost is O(1) block reads at any size: the header fields, one
//! pointer-table slot (inline in block 0, or 8 bytes of the table run), one
//! leaf block.
//!
//! Invariants (checked on every decode; a violation is `ObjError::Corrupt`,
//! never a panic):
//! - header magic/version match; `global_depth <= MAX_DEPTH`; an inline
//!   table only while `global_depth <= INLINE_DEPTH`.
//! - every table slot names a block in `1..next_block`, and the leaf found
//!   through slot `i` has `local_depth <= global_depth` and
//!   `prefix == i >> (global_depth - local_depth)`.
//! - leaf entries lie inside the block, are sorted by `(h48, cd)`, and each
//!   `h48` has `prefix` as its top `local_depth` bits.
//!
//! Concurrency: the map is stateless, but a process-wide striped lock keyed
//! by (object set, object) serialises writers of one map against each other
//! and against readers. Callbacks of `iterate` run with no lock held, so
//! they may call back into the same map. Lock order: the caller's `Tx`
//! (already held) → zap stripe lock; nothing under the stripe lock waits for
//! a `Tx` or takes another stripe.
//!
//! # Byte layout (all integers little-endian; block size 16 KiB)
//!
//! Block 0 — header:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `b"TARNZAP\0"` |
//! | 8 | 4 | version = 1 |
//! | 12 | 4 | block size = 16384 |
//! | 16 | 8 | hash seed (xxh3-64 seed for this map) |
//! | 24 | 8 | entry count |
//! | 32 | 4 | global depth `g` (0..=32) |
//! | 36 | 4 | flags (0) |
//! | 40 | 8 | pointer table first block (0 = inline in this block) |
//! | 48 | 8 | pointer table length in blocks (0 when inline) |
//! | 56 | 8 | next block: first block number never allocated |
//! | 64 | 8 | leaf count |
//! | 72 | 56 | reserved, zero |
//! | 128 | 8·2^g | inline pointer table (only while g <= 10): u64 leaf block numbers |
//!
//! External pointer table (g > 10): `max(1, 2^g·8/16384)` consecutive
//! blocks starting at the recorded block, slot `i` at byte `8·i` of the run.
//! When the table doubles, a new run is allocated at `next block`, slot `i`
//! of the new table = slot `i >> 1` of the old, the header is switched to it
//! and the old run is freed (becomes a hole).
//!
//! Leaf block:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `b"ZLF1"` |
//! | 4 | 2 | local depth `d` |
//! | 6 | 2 | entry count `n` |
//! | 8 | 8 | prefix (top `d` bits of h48 of every entry) |
//! | 16 | 4 | bytes used by entries |
//! | 20 | 4 | reserved, zero |
//! | 24 | … | `n` packed entries, sorted by (h48, cd) |
//!
//! Entry: `u64 h48` (top 16 bits zero), `u16 cd` (< 0x7FF0), `u16 key
//! length` (<= 1024), `u16 value length` (<= 8192), `u16` reserved zero,
//! then the key bytes, then the value bytes (16 + key + value bytes, no
//! padding).
//!
//! Hash: `h = xxh3_64_with_seed(key, seed)`, `h48 = h >> 16`. Table slot for
//! `h48` at depth g: `h48 >> (48 - g)`. A leaf of depth `d` splits on bit
//! `47 - d` of `h48` (0 stays, 1 moves to the new leaf). Map creation seed:
//! xxh3-64 of (object set id, object id, txg), so runs are reproducible.

use crate::redo::{self, Op};
use crate::{ObjError, ObjType, ObjectId, ObjectSet, Result, Tx, BONUS_LEN};
use parking_lot::RwLock;

/// Called with (hash, collision differentiator, name, value) of each
/// entry; false stops the walk.
type EntryVisitor<'a> = dyn FnMut(u64, u16, &[u8], &[u8]) -> bool + 'a;

/// Block size of every ZAP object.
pub const ZAP_BLOCK_SIZE: u32 = 16 * 1024;
/// Longest key accepted.
pub const MAX_KEY_LEN: usize = 1024;
/// Longest value accepted.
pub const MAX_VALUE_LEN: usize = 8 * 1024;

const BS: usize = ZAP_BLOCK_SIZE as usize;
const HDR_MAGIC: &[u8; 8] = b"TARNZAP\0";
const HDR_VERSION: u32 = 1;
const INLINE_OFF: usize = 128;
const INLINE_DEPTH: u32 = 10;
const MAX_DEPTH: u32 = 32;
const LEAF_MAGIC: &[u8; 4] = b"ZLF1";
const LEAF_HDR: usize = 24;
const ENTRY_HDR: usize = 16;
const CD_LIMIT: u16 = 0x7FF0;
const H48_MASK: u64 = (1 << 48) - 1;

// ---------------------------------------------------------------- locking

const STRIPES: usize = 256;
static STRIPE_LOCKS: [RwLock<()>; STRIPES] = [const { parking_lot::const_rwlock(()) }; STRIPES];

fn stripe(os: &ObjectSet, obj: ObjectId) -> &'static RwLock<()> {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&os.id().0.to_le_bytes());
    b[8..].copy_from_slice(&obj.0.to_le_bytes());
    let h = xxhash_rust::xxh3::xxh3_64(&b);
    &STRIPE_LOCKS[(h % STRIPES as u64) as usize]
}

fn corrupt(obj: ObjectId, what: &str) -> ObjError {
    ObjError::Corrupt(format!("zap object {}: {what}", obj.0))
}

fn get_u16(b: &[u8], off: usize) -> Option<u16> {
    b.get(off..off + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
}
fn get_u32(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes(s.try_into().unwrap_or([0; 4])))
}
fn get_u64(b: &[u8], off: usize) -> Option<u64> {
    b.get(off..off + 8)
        .map(|s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
}

// ---------------------------------------------------------------- header

#[derive(Clone, Debug)]
struct Header {
    seed: u64,
    count: u64,
    depth: u32,
    table_block: u64,
    table_blocks: u64,
    next_block: u64,
    leaf_count: u64,
}

impl Header {
    const LEN: usize = 72;

    fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..8].copy_from_slice(HDR_MAGIC);
        b[8..12].copy_from_slice(&HDR_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&ZAP_BLOCK_SIZE.to_le_bytes());
        b[16..24].copy_from_slice(&self.seed.to_le_bytes());
        b[24..32].copy_from_slice(&self.count.to_le_bytes());
        b[32..36].copy_from_slice(&self.depth.to_le_bytes());
        // 36..40 flags = 0
        b[40..48].copy_from_slice(&self.table_block.to_le_bytes());
        b[48..56].copy_from_slice(&self.table_blocks.to_le_bytes());
        b[56..64].copy_from_slice(&self.next_block.to_le_bytes());
        b[64..72].copy_from_slice(&self.leaf_count.to_le_bytes());
        b
    }

    fn decode(obj: ObjectId, b: &[u8]) -> Result<Header> {
        let bad = |w: &str| corrupt(obj, w);
        if b.get(0..8) != Some(&HDR_MAGIC[..]) {
            return Err(bad("bad header magic (not a zap?)"));
        }
        if get_u32(b, 8) != Some(HDR_VERSION) {
            return Err(bad("unsupported header version"));
        }
        if get_u32(b, 12) != Some(ZAP_BLOCK_SIZE) {
            return Err(bad("bad block size"));
        }
        let h = Header {
            seed: get_u64(b, 16).ok_or_else(|| bad("short header"))?,
            count: get_u64(b, 24).ok_or_else(|| bad("short header"))?,
            depth: get_u32(b, 32).ok_or_else(|| bad("short header"))?,
            table_block: get_u64(b, 40).ok_or_else(|| bad("short header"))?,
            table_blocks: get_u64(b, 48).ok_or_else(|| bad("short header"))?,
            next_block: get_u64(b, 56).ok_or_else(|| bad("short header"))?,
            leaf_count: get_u64(b, 64).ok_or_else(|| bad("short header"))?,
        };
        if h.depth > MAX_DEPTH {
            return Err(bad("global depth too large"));
        }
        if h.next_block < 2 || h.next_block > (1 << 40) {
            return Err(bad("bad next block"));
        }
        if h.table_block == 0 {
            if h.depth > INLINE_DEPTH || h.table_blocks != 0 {
                return Err(bad("inline pointer table too large"));
            }
        } else {
            if h.table_blocks != table_blocks_for(h.depth) {
                return Err(bad("pointer table length does not match depth"));
            }
            if h.table_block
                .checked_add(h.table_blocks)
                .is_none_or(|end| end > h.next_block)
            {
                return Err(bad("pointer table outside object"));
            }
        }
        Ok(h)
    }

    fn slots(&self) -> u64 {
        1u64 << self.depth
    }

    fn slot_of(&self, h48: u64) -> u64 {
        h48 >> (48 - self.depth)
    }
}

fn table_blocks_for(depth: u32) -> u64 {
    ((8u64 << depth) / BS as u64).max(1)
}

// ---------------------------------------------------------------- leaves

#[derive(Clone, Debug)]
struct Entry {
    h48: u64,
    cd: u16,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl Entry {
    fn size(&self) -> usize {
        ENTRY_HDR + self.key.len() + self.value.len()
    }
    fn cookie(&self) -> u64 {
        (self.h48 << 15) | self.cd as u64
    }
}

#[derive(Clone, Debug)]
struct Leaf {
    depth: u32,
    prefix: u64,
    entries: Vec<Entry>,
}

impl Leaf {
    fn encoded_len(&self) -> usize {
        LEAF_HDR + self.entries.iter().map(Entry::size).sum::<usize>()
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BS];
        let used = self.encoded_len() - LEAF_HDR;
        assert!(
            self.encoded_len() <= BS,
            "zap leaf overflow must be split before encoding"
        );
        b[0..4].copy_from_slice(LEAF_MAGIC);
        b[4..6].copy_from_slice(&(self.depth as u16).to_le_bytes());
        b[6..8].copy_from_slice(&(self.entries.len() as u16).to_le_bytes());
        b[8..16].copy_from_slice(&self.prefix.to_le_bytes());
        b[16..20].copy_from_slice(&(used as u32).to_le_bytes());
        let mut off = LEAF_HDR;
        for e in &self.entries {
            b[off..off + 8].copy_from_slice(&e.h48.to_le_bytes());
            b[off + 8..off + 10].copy_from_slice(&e.cd.to_le_bytes());
            b[off + 10..off + 12].copy_from_slice(&(e.key.len() as u16).to_le_bytes());
            b[off + 12..off + 14].copy_from_slice(&(e.value.len() as u16).to_le_bytes());
            off += ENTRY_HDR;
            b[off..off + e.key.len()].copy_from_slice(&e.key);
            off += e.key.len();
            b[off..off + e.value.len()].copy_from_slice(&e.value);
            off += e.value.len();
        }
        b
    }

    /// Decode a leaf reached through table slot `slot` at global depth `g`.
    fn decode(obj: ObjectId, b: &[u8], slot: u64, g: u32) -> Result<Leaf> {
        let mut entries = Vec::new();
        let (depth, prefix) = Self::scan(obj, b, slot, g, &mut |h48, cd, key, value| {
            entries.push(Entry { h48, cd, key: key.to_vec(), value: value.to_vec() });
            true
        })?;
        Ok(Leaf { depth, prefix, entries })
    }

    /// Walk a raw leaf in place, validating as it goes; `f` returns false
    /// to stop early (the rest of the leaf is then not checked). Returns
    /// the leaf's (depth, prefix).
    fn scan(
        obj: ObjectId,
        b: &[u8],
        slot: u64,
        g: u32,
        f: &mut EntryVisitor<'_>,
    ) -> Result<(u32, u64)> {
        let bad = |w: &str| corrupt(obj, w);
        if b.len() != BS || b.get(0..4) != Some(&LEAF_MAGIC[..]) {
            return Err(bad("bad leaf magic"));
        }
        let depth = get_u16(b, 4).ok_or_else(|| bad("short leaf"))? as u32;
        let n = get_u16(b, 6).ok_or_else(|| bad("short leaf"))? as usize;
        let prefix = get_u64(b, 8).ok_or_else(|| bad("short leaf"))?;
        let used = get_u32(b, 16).ok_or_else(|| bad("short leaf"))? as usize;
        if depth > g || slot >> (g - depth) != prefix {
            return Err(bad("leaf depth/prefix does not match pointer table"));
        }
        if used > BS - LEAF_HDR {
            return Err(bad("leaf used bytes out of range"));
        }
        let end = LEAF_HDR + used;
        let mut off = LEAF_HDR;
        let mut last: Option<(u64, u16)> = None;
        for _ in 0..n {
            if off + ENTRY_HDR > end {
                return Err(bad("entry header past end of leaf"));
            }
            let h48 = get_u64(b, off).ok_or_else(|| bad("short entry"))?;
            let cd = get_u16(b, off + 8).ok_or_else(|| bad("short entry"))?;
            let kl = get_u16(b, off + 10).ok_or_else(|| bad("short entry"))? as usize;
            let vl = get_u16(b, off + 12).ok_or_else(|| bad("short entry"))? as usize;
            if h48 & !H48_MASK != 0 || cd >= CD_LIMIT || kl > MAX_KEY_LEN || vl > MAX_VALUE_LEN {
                return Err(bad("entry field out of range"));
            }
            if depth > 0 && h48 >> (48 - depth) != prefix {
                return Err(bad("entry hash does not match leaf prefix"));
            }
            if last.is_some_and(|l| l >= (h48, cd)) {
                return Err(bad("leaf entries not sorted"));
            }
            last = Some((h48, cd));
            off += ENTRY_HDR;
            let key = b
                .get(off..off + kl)
                .filter(|_| off + kl <= end)
                .ok_or_else(|| bad("key past end"))?;
            off += kl;
            let value = b
                .get(off..off + vl)
                .filter(|_| off + vl <= end)
                .ok_or_else(|| bad("value past end"))?;
            off += vl;
            if !f(h48, cd, key, value) {
                return Ok((depth, prefix));
            }
        }
        if off != end {
            return Err(bad("leaf used bytes do not match entries"));
        }
        Ok((depth, prefix))
    }

    /// Index of the entry with this key, if present.
    fn find(&self, h48: u64, key: &[u8]) -> Option<usize> {
        let start = self.entries.partition_point(|e| e.h48 < h48);
        self.entries[start..]
            .iter()
            .take_while(|e| e.h48 == h48)
            .position(|e| e.key == key)
            .map(|p| start + p)
    }
}

// ---------------------------------------------------------------- raw I/O

fn block_off(blk: u64) -> u64 {
    blk * BS as u64
}

fn read_header(os: &ObjectSet, obj: ObjectId) -> Result<Header> {
    let mut b = [0u8; Header::LEN];
    os.read(obj, 0, &mut b)?;
    Header::decode(obj, &b)
}

fn write_header(os: &ObjectSet, tx: &Tx, obj: ObjectId, h: &Header) -> Result<()> {
    os.write(tx, obj, 0, &h.encode())
}

fn table_off(h: &Header, slot: u64) -> u64 {
    if h.table_block == 0 {
        INLINE_OFF as u64 + slot * 8
    } else {
        block_off(h.table_block) + slot * 8
    }
}

fn get_slot(os: &ObjectSet, obj: ObjectId, h: &Header, slot: u64) -> Result<u64> {
    let mut b = [0u8; 8];
    os.read(obj, table_off(h, slot), &mut b)?;
    let blk = u64::from_le_bytes(b);
    if blk == 0 || blk >= h.next_block {
        return Err(corrupt(
            obj,
            "pointer table slot names a block outside the map",
        ));
    }
    Ok(blk)
}

fn set_slots(
    os: &ObjectSet,
    tx: &Tx,
    obj: ObjectId,
    h: &Header,
    first: u64,
    n: u64,
    blk: u64,
) -> Result<()> {
    // Write in chunks of at most one block worth of slots.
    let per = (BS / 8) as u64;
    let mut s = first;
    while s < first + n {
        let k = (first + n - s).min(per);
        let mut buf = Vec::with_capacity(k as usize * 8);
        for _ in 0..k {
            buf.extend_from_slice(&blk.to_le_bytes());
        }
        os.write(tx, obj, table_off(h, s), &buf)?;
        s += k;
    }
    Ok(())
}

fn read_table(os: &ObjectSet, obj: ObjectId, h: &Header) -> Result<Vec<u64>> {
    let mut b = vec![0u8; (h.slots() * 8) as usize];
    os.read(obj, table_off(h, 0), &mut b)?;
    Ok(b.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect())
}

/// The newest version of a leaf block, shared rather than copied.
fn leaf_block(os: &ObjectSet, obj: ObjectId, blk: u64) -> Result<std::sync::Arc<Vec<u8>>> {
    Ok(os.read_block(obj, blk)?.unwrap_or_else(|| std::sync::Arc::new(vec![0u8; BS])))
}

fn read_leaf(os: &ObjectSet, obj: ObjectId, blk: u64, slot: u64, g: u32) -> Result<Leaf> {
    let b = leaf_block(os, obj, blk)?;
    Leaf::decode(obj, &b, slot, g)
}

fn write_leaf(os: &ObjectSet, tx: &Tx, obj: ObjectId, blk: u64, l: &Leaf) -> Result<()> {
    os.write(tx, obj, block_off(blk), &l.encode())
}

fn hash48(seed: u64, key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(key, seed) >> 16
}

fn check_kv(key: &[u8], value: Option<&[u8]>) -> Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(ObjError::Invalid(format!(
            "zap key of {} bytes > {MAX_KEY_LEN}",
            key.len()
        )));
    }
    if let Some(v) = value {
        if v.len() > MAX_VALUE_LEN {
            return Err(ObjError::Invalid(format!(
                "zap value of {} bytes > {MAX_VALUE_LEN}",
                v.len()
            )));
        }
    }
    Ok(())
}

/// Double the pointer table (g → g+1). Returns the new header (already written).
fn grow_table(os: &ObjectSet, tx: &Tx, obj: ObjectId, h: &Header) -> Result<Header> {
    if h.depth >= MAX_DEPTH {
        return Err(ObjError::NoSpace);
    }
    let old = read_table(os, obj, h)?;
    let mut nh = h.clone();
    nh.depth += 1;
    if nh.depth <= INLINE_DEPTH {
        nh.table_block = 0;
        nh.table_blocks = 0;
    } else {
        nh.table_blocks = table_blocks_for(nh.depth);
        nh.table_block = h.next_block;
        nh.next_block = h.next_block + nh.table_blocks;
    }
    let mut buf = Vec::with_capacity(old.len() * 16);
    for &blk in &old {
        buf.extend_from_slice(&blk.to_le_bytes());
        buf.extend_from_slice(&blk.to_le_bytes());
    }
    os.write(tx, obj, table_off(&nh, 0), &buf)?;
    write_header(os, tx, obj, &nh)?;
    if h.table_block != 0 {
        os.free_range(
            tx,
            obj,
            block_off(h.table_block),
            Some(h.table_blocks * BS as u64),
        )?;
    }
    Ok(nh)
}

/// Split the leaf at `blk` (reached through `slot`). Writes both halves,
/// the pointer table and the header; returns the new header.
fn split_leaf(
    os: &ObjectSet,
    tx: &Tx,
    obj: ObjectId,
    mut h: Header,
    blk: u64,
    leaf: Leaf,
) -> Result<Header> {
    if leaf.depth >= 48 {
        // Entries with one full 48-bit hash do not fit in one leaf.
        return Err(ObjError::NoSpace);
    }
    if leaf.depth == h.depth {
        h = grow_table(os, tx, obj, &h)?;
    }
    let d = leaf.depth;
    let bit = 47 - d;
    let (hi, lo): (Vec<Entry>, Vec<Entry>) = leaf
        .entries
        .into_iter()
        .partition(|e| (e.h48 >> bit) & 1 == 1);
    let left = Leaf {
        depth: d + 1,
        prefix: leaf.prefix << 1,
        entries: lo,
    };
    let right = Leaf {
        depth: d + 1,
        prefix: (leaf.prefix << 1) | 1,
        entries: hi,
    };
    let nb = h.next_block;
    h.next_block += 1;
    h.leaf_count += 1;
    write_leaf(os, tx, obj, nb, &right)?;
    write_leaf(os, tx, obj, blk, &left)?;
    let span = 1u64 << (h.depth - (d + 1));
    let first = right.prefix << (h.depth - (d + 1));
    set_slots(os, tx, obj, &h, first, span, nb)?;
    write_header(os, tx, obj, &h)?;
    Ok(h)
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum PutMode {
    Insert,
    Upsert,
}

/// Stateless helper over (ObjectSet, ObjectId); see the module doc.
pub struct Zap;

impl Zap {
    /// Create an empty map object of type `t`.
    pub fn create(os: &ObjectSet, tx: &Tx, t: ObjType) -> Result<ObjectId> {
        let obj = os.create(tx, t, ZAP_BLOCK_SIZE, &[0u8; BONUS_LEN])?;
        Self::init(os, tx, obj)?;
        Ok(obj)
    }

    /// Format an existing, empty object (created with block size
    /// `ZAP_BLOCK_SIZE`) as an empty map — e.g. a well-known object made with
    /// `create_with_id`.
    pub fn init(os: &ObjectSet, tx: &Tx, obj: ObjectId) -> Result<()> {
        Self::init_seeded(os, tx, obj, tx.txg())
    }

    /// `init` with the hash seed of a map formatted in txg `seed_txg`
    /// (replay formats a map again as the txg that made it did).
    pub fn init_seeded(os: &ObjectSet, tx: &Tx, obj: ObjectId, seed_txg: u64) -> Result<()> {
        redo::scoped(os, tx, || Self::init_inner(os, tx, obj, seed_txg), |_| Op::ZapInit { obj: obj.0, seed_txg })
    }

    fn init_inner(os: &ObjectSet, tx: &Tx, obj: ObjectId, seed_txg: u64) -> Result<()> {
        os.mark_metadata(tx, obj)?;
        let mut sb = [0u8; 24];
        sb[..8].copy_from_slice(&os.id().0.to_le_bytes());
        sb[8..16].copy_from_slice(&obj.0.to_le_bytes());
        sb[16..].copy_from_slice(&seed_txg.to_le_bytes());
        let h = Header {
            seed: xxhash_rust::xxh3::xxh3_64(&sb),
            count: 0,
            depth: 0,
            table_block: 0,
            table_blocks: 0,
            next_block: 2,
            leaf_count: 1,
        };
        let _g = stripe(os, obj).write();
        write_leaf(
            os,
            tx,
            obj,
            1,
            &Leaf {
                depth: 0,
                prefix: 0,
                entries: Vec::new(),
            },
        )?;
        set_slots(os, tx, obj, &h, 0, 1, 1)?;
        write_header(os, tx, obj, &h)
    }

    pub fn lookup(os: &ObjectSet, obj: ObjectId, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_kv(key, None)?;
        let _g = stripe(os, obj).read();
        let h = read_header(os, obj)?;
        let h48 = hash48(h.seed, key);
        let slot = h.slot_of(h48);
        let blk = get_slot(os, obj, &h, slot)?;
        // Scan the shared block in place: no copy, no per-entry allocation.
        let b = leaf_block(os, obj, blk)?;
        let mut found = None;
        Leaf::scan(obj, &b, slot, h.depth, &mut |eh, _cd, k, v| {
            if eh == h48 && k == key {
                found = Some(v.to_vec());
            }
            found.is_none() && eh <= h48
        })?;
        Ok(found)
    }

    pub fn insert(os: &ObjectSet, tx: &Tx, obj: ObjectId, key: &[u8], value: &[u8]) -> Result<()> {
        let op = || Op::ZapPut { obj: obj.0, key: key.to_vec(), value: value.to_vec(), insert: true };
        redo::scoped(os, tx, || Self::put(os, tx, obj, key, value, PutMode::Insert), |_| op())
    }

    pub fn update(os: &ObjectSet, tx: &Tx, obj: ObjectId, key: &[u8], value: &[u8]) -> Result<()> {
        let op = || Op::ZapPut { obj: obj.0, key: key.to_vec(), value: value.to_vec(), insert: false };
        redo::scoped(os, tx, || Self::put(os, tx, obj, key, value, PutMode::Upsert), |_| op())
    }

    fn put(
        os: &ObjectSet,
        tx: &Tx,
        obj: ObjectId,
        key: &[u8],
        value: &[u8],
        mode: PutMode,
    ) -> Result<()> {
        check_kv(key, Some(value))?;
        let _g = stripe(os, obj).write();
        let mut h = read_header(os, obj)?;
        let h48 = hash48(h.seed, key);
        loop {
            let slot = h.slot_of(h48);
            let blk = get_slot(os, obj, &h, slot)?;
            let leaf = read_leaf(os, obj, blk, slot, h.depth)?;
            let mut changed = leaf.clone();
            let added = match changed.find(h48, key) {
                Some(i) => {
                    if mode == PutMode::Insert {
                        return Err(ObjError::Exists);
                    }
                    changed.entries[i].value = value.to_vec();
                    false
                }
                None => {
                    let start = changed.entries.partition_point(|e| e.h48 < h48);
                    let mut cd = 0u16;
                    let mut pos = start;
                    for e in changed.entries[start..].iter().take_while(|e| e.h48 == h48) {
                        if e.cd != cd {
                            break;
                        }
                        cd += 1;
                        pos += 1;
                    }
                    if cd >= CD_LIMIT {
                        return Err(ObjError::NoSpace);
                    }
                    changed.entries.insert(
                        pos,
                        Entry {
                            h48,
                            cd,
                            key: key.to_vec(),
                            value: value.to_vec(),
                        },
                    );
                    true
                }
            };
            if changed.encoded_len() <= BS {
                write_leaf(os, tx, obj, blk, &changed)?;
                if added {
                    h.count += 1;
                    write_header(os, tx, obj, &h)?;
                }
                return Ok(());
            }
            h = split_leaf(os, tx, obj, h, blk, leaf)?;
        }
    }

    pub fn remove(os: &ObjectSet, tx: &Tx, obj: ObjectId, key: &[u8]) -> Result<bool> {
        redo::scoped(os, tx, || Self::remove_inner(os, tx, obj, key), |_| Op::ZapRemove { obj: obj.0, key: key.to_vec() })
    }

    fn remove_inner(os: &ObjectSet, tx: &Tx, obj: ObjectId, key: &[u8]) -> Result<bool> {
        check_kv(key, None)?;
        let _g = stripe(os, obj).write();
        let mut h = read_header(os, obj)?;
        let h48 = hash48(h.seed, key);
        let slot = h.slot_of(h48);
        let blk = get_slot(os, obj, &h, slot)?;
        let mut leaf = read_leaf(os, obj, blk, slot, h.depth)?;
        let Some(i) = leaf.find(h48, key) else {
            return Ok(false);
        };
        leaf.entries.remove(i);
        write_leaf(os, tx, obj, blk, &leaf)?;
        h.count = h
            .count
            .checked_sub(1)
            .ok_or_else(|| corrupt(obj, "entry count underflow"))?;
        write_header(os, tx, obj, &h)?;
        Ok(true)
    }

    pub fn count(os: &ObjectSet, obj: ObjectId) -> Result<u64> {
        let _g = stripe(os, obj).read();
        Ok(read_header(os, obj)?.count)
    }

    /// Iterate in hash order from `cookie` (0 = start). The callback gets
    /// (next_cookie, key, value) and returns false to stop; resuming from
    /// `next_cookie` continues right after that entry. No lock is held
    /// while the callback runs.
    #[expect(clippy::type_complexity, reason = "signature fixed by api_spec.md")]
    pub fn iterate(
        os: &ObjectSet,
        obj: ObjectId,
        cookie: u64,
        f: &mut dyn FnMut(u64, &[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let mut pos = cookie;
        loop {
            if pos >> 63 != 0 {
                return Ok(());
            }
            let (batch, next_pos) = {
                let _g = stripe(os, obj).read();
                let h = read_header(os, obj)?;
                let slot = h.slot_of(pos >> 15);
                let blk = get_slot(os, obj, &h, slot)?;
                let leaf = read_leaf(os, obj, blk, slot, h.depth)?;
                let shift = h.depth - leaf.depth;
                let next_slot = (leaf.prefix + 1) << shift;
                let batch: Vec<Entry> = leaf
                    .entries
                    .into_iter()
                    .filter(|e| e.cookie() >= pos)
                    .collect();
                let next_pos = if next_slot >= h.slots() {
                    None
                } else {
                    Some((next_slot << (48 - h.depth)) << 15)
                };
                (batch, next_pos)
            };
            for e in &batch {
                if !f(e.cookie() + 1, &e.key, &e.value) {
                    return Ok(());
                }
            }
            match next_pos {
                Some(p) => pos = p,
                None => return Ok(()),
            }
        }
    }

    /// Walk the whole map and verify its structure; returns the number of
    /// entries found (must equal `count`). Used by tests and `check`.
    pub fn verify(os: &ObjectSet, obj: ObjectId) -> Result<u64> {
        let _g = stripe(os, obj).read();
        let h = read_header(os, obj)?;
        let table = read_table(os, obj, &h)?;
        let mut n = 0u64;
        let mut slot = 0u64;
        while slot < h.slots() {
            let blk = table[slot as usize];
            if blk == 0 || blk >= h.next_block {
                return Err(corrupt(obj, "pointer table slot outside map"));
            }
            let leaf = read_leaf(os, obj, blk, slot, h.depth)?;
            let span = 1u64 << (h.depth - leaf.depth);
            for s in slot..slot + span {
                if table[s as usize] != blk {
                    return Err(corrupt(obj, "leaf span not contiguous in pointer table"));
                }
            }
            n += leaf.entries.len() as u64;
            slot += span;
        }
        if n != h.count {
            return Err(corrupt(obj, "entry count does not match leaves"));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_roundtrip_and_corruption_never_panics() {
        let obj = ObjectId(9);
        let mut entries = Vec::new();
        for i in 0..50u64 {
            entries.push(Entry {
                h48: i << 20,
                cd: 0,
                key: format!("k{i}").into_bytes(),
                value: vec![i as u8; 10],
            });
        }
        let leaf = Leaf {
            depth: 0,
            prefix: 0,
            entries,
        };
        let b = leaf.encode();
        let d = Leaf::decode(obj, &b, 0, 0).expect("decode");
        assert_eq!(d.entries.len(), 50);
        // Flip every byte of the used region, one at a time: decode must not panic.
        for i in 0..leaf.encoded_len() {
            let mut c = b.clone();
            c[i] ^= 0xFF;
            let _ = Leaf::decode(obj, &c, 0, 0);
        }
        let mut hb = vec![0u8; 200];
        hb[..Header::LEN].copy_from_slice(
            &Header {
                seed: 1,
                count: 0,
                depth: 0,
                table_block: 0,
                table_blocks: 0,
                next_block: 2,
                leaf_count: 1,
            }
            .encode(),
        );
        assert!(Header::decode(obj, &hb).is_ok());
        for i in 0..Header::LEN {
            let mut c = hb.clone();
            c[i] ^= 0x5A;
            let _ = Header::decode(obj, &c);
        }
        assert!(Header::decode(obj, &[]).is_err());
    }
}
