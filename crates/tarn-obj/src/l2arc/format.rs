//! The cache device's on-device structures (docs/on-disk-format.md, "Cache
//! devices (L2ARC)"): the device header (two copies), the chunk header
//! that each feed write starts with, and the record in front of each
//! cached block. All little-endian; every decoder checks bounds and
//! returns `None` on anything unexpected, never panics.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

/// Bytes of one device header copy (copies at data offsets 0 and 4 KiB).
pub const DEV_HEADER_SIZE: u64 = 4096;
/// Where the ring of chunks starts in the data region.
pub const RING_START: u64 = 2 * DEV_HEADER_SIZE;
/// Chunks start on, and are padded to, this boundary.
pub const CHUNK_ALIGN: u64 = 4096;
/// Records start on this boundary inside a chunk.
pub const RECORD_ALIGN: u64 = 512;
/// Bytes of the record header in front of each block's data.
pub const RECORD_HEADER_SIZE: usize = 128;
/// Bytes of a chunk header before its entries.
pub const CHUNK_FIXED_SIZE: usize = 96;
/// Bytes of one chunk entry.
pub const ENTRY_SIZE: usize = 32;

pub const DEV_MAGIC: &[u8; 8] = b"TARNL2DH";
pub const CHUNK_MAGIC: &[u8; 8] = b"TARNL2CK";
pub const RECORD_MAGIC: &[u8; 8] = b"TARNL2RC";
pub const VERSION: u32 = 1;

/// Which block a cached copy is: the first DVA and the birth txg, as the
/// ARC keys it (within one pool).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockId {
    pub offset: u64,
    pub birth: u64,
    pub vdev: u32,
}

/// A block on its way to a cache device: identity, the bp's checksum,
/// the data.
pub type Queued = (BlockId, [u8; 32], std::sync::Arc<Vec<u8>>);

/// The device header: which pool and device this is, and the newest chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevHeader {
    pub pool_guid: u64,
    pub device_guid: u64,
    /// Bumped at every rewrite; the valid copy with the highest wins.
    pub generation: u64,
    /// Data-region offset of the newest chunk (0: no chunk).
    pub newest: u64,
    pub newest_seq: u64,
    /// The ring's end when it was written (a device that changed size
    /// starts empty).
    pub ring_end: u64,
}

/// One entry of a chunk header: a block and where its record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub id: BlockId,
    /// Bytes of the block's data.
    pub len: u32,
    /// Offset of its record from the chunk's start.
    pub rel: u64,
}

/// A chunk header: one feed write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    pub pool_guid: u64,
    pub device_guid: u64,
    pub seq: u64,
    /// Data-region offset of the previous chunk (0: none).
    pub prev: u64,
    /// Bytes of the whole chunk (header, entries, records, padding).
    pub len: u64,
    pub entries: Vec<Entry>,
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(dst) = buf.get_mut(at..at + bytes.len()) {
        dst.copy_from_slice(bytes);
    }
}

fn u64_at(buf: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(buf.get(at..at + 8)?.try_into().ok()?))
}

fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(buf.get(at..at + 4)?.try_into().ok()?))
}

fn hash32(buf: &[u8], at: usize) -> Option<[u8; 32]> {
    buf.get(at..at + 32)?.try_into().ok()
}

pub fn round_up(v: u64, align: u64) -> u64 {
    v.div_ceil(align) * align
}

impl DevHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; DEV_HEADER_SIZE as usize];
        put(&mut b, 0, DEV_MAGIC);
        put(&mut b, 8, &VERSION.to_le_bytes());
        for (i, v) in [self.pool_guid, self.device_guid, self.generation, self.newest, self.newest_seq, self.ring_end].iter().enumerate() {
            put(&mut b, 16 + 8 * i, &v.to_le_bytes());
        }
        let sum = blake3::hash(b.get(..64).unwrap_or_default());
        put(&mut b, 64, sum.as_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Option<DevHeader> {
        if b.get(..8)? != DEV_MAGIC || u32_at(b, 8)? != VERSION {
            return None;
        }
        if blake3::hash(b.get(..64)?).as_bytes() != &hash32(b, 64)? {
            return None;
        }
        Some(DevHeader {
            pool_guid: u64_at(b, 16)?,
            device_guid: u64_at(b, 24)?,
            generation: u64_at(b, 32)?,
            newest: u64_at(b, 40)?,
            newest_seq: u64_at(b, 48)?,
            ring_end: u64_at(b, 56)?,
        })
    }
}

impl ChunkHeader {
    /// Bytes the header and its entries take, rounded to a record boundary.
    pub fn size_for(entries: usize) -> u64 {
        round_up((CHUNK_FIXED_SIZE + entries * ENTRY_SIZE) as u64, RECORD_ALIGN)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; Self::size_for(self.entries.len()) as usize];
        put(&mut b, 0, CHUNK_MAGIC);
        put(&mut b, 8, &VERSION.to_le_bytes());
        put(&mut b, 12, &(self.entries.len() as u32).to_le_bytes());
        for (i, v) in [self.pool_guid, self.device_guid, self.seq, self.prev, self.len].iter().enumerate() {
            put(&mut b, 16 + 8 * i, &v.to_le_bytes());
        }
        for (i, e) in self.entries.iter().enumerate() {
            let at = CHUNK_FIXED_SIZE + i * ENTRY_SIZE;
            put(&mut b, at, &e.id.vdev.to_le_bytes());
            put(&mut b, at + 4, &e.len.to_le_bytes());
            put(&mut b, at + 8, &e.id.offset.to_le_bytes());
            put(&mut b, at + 16, &e.id.birth.to_le_bytes());
            put(&mut b, at + 24, &e.rel.to_le_bytes());
        }
        let sum = Self::checksum(&b, self.entries.len());
        put(&mut b, 64, &sum);
        b
    }

    fn checksum(b: &[u8], entries: usize) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        h.update(b.get(..64).unwrap_or_default());
        h.update(b.get(CHUNK_FIXED_SIZE..CHUNK_FIXED_SIZE + entries * ENTRY_SIZE).unwrap_or_default());
        *h.finalize().as_bytes()
    }

    /// How many entries the header at the front of `b` claims (to read the
    /// rest of a large header), if it starts like one.
    pub fn peek_entries(b: &[u8]) -> Option<usize> {
        if b.get(..8)? != CHUNK_MAGIC || u32_at(b, 8)? != VERSION {
            return None;
        }
        Some(u32_at(b, 12)? as usize)
    }

    /// Decodes a chunk header; `None` if anything is off (torn, garbage,
    /// another format). Entries are checked to lie inside the chunk.
    pub fn decode(b: &[u8]) -> Option<ChunkHeader> {
        let n = Self::peek_entries(b)?;
        if b.len() < CHUNK_FIXED_SIZE + n * ENTRY_SIZE || Self::checksum(b, n) != hash32(b, 64)? {
            return None;
        }
        let len = u64_at(b, 48)?;
        let header = Self::size_for(n);
        let mut entries = Vec::with_capacity(n);
        for i in 0..n {
            let at = CHUNK_FIXED_SIZE + i * ENTRY_SIZE;
            let e = Entry {
                id: BlockId { vdev: u32_at(b, at)?, offset: u64_at(b, at + 8)?, birth: u64_at(b, at + 16)? },
                len: u32_at(b, at + 4)?,
                rel: u64_at(b, at + 24)?,
            };
            let end = e.rel.checked_add(RECORD_HEADER_SIZE as u64 + u64::from(e.len))?;
            if e.rel < header || end > len || !e.rel.is_multiple_of(RECORD_ALIGN) {
                return None;
            }
            entries.push(e);
        }
        Some(ChunkHeader {
            pool_guid: u64_at(b, 16)?,
            device_guid: u64_at(b, 24)?,
            seq: u64_at(b, 32)?,
            prev: u64_at(b, 40)?,
            len,
            entries,
        })
    }
}

/// Bytes a record of `len` data bytes takes (header, data, padding).
pub fn record_size(len: u64) -> u64 {
    round_up(RECORD_HEADER_SIZE as u64 + len, RECORD_ALIGN)
}

/// The hash that binds a record to its pool, device, identity and data.
pub fn record_hash(pool_guid: u64, device_guid: u64, header: &[u8], data: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(&pool_guid.to_le_bytes());
    h.update(&device_guid.to_le_bytes());
    h.update(header.get(..64).unwrap_or_default());
    h.update(data);
    *h.finalize().as_bytes()
}

/// Writes the record for `data` (header then data) into `out`, which
/// holds `record_size(data.len())` bytes.
pub fn encode_record(out: &mut [u8], pool_guid: u64, device_guid: u64, id: BlockId, bp_checksum: &[u8; 32], data: &[u8]) {
    put(out, 0, RECORD_MAGIC);
    put(out, 8, &(data.len() as u32).to_le_bytes());
    put(out, 12, &id.vdev.to_le_bytes());
    put(out, 16, &id.offset.to_le_bytes());
    put(out, 24, &id.birth.to_le_bytes());
    put(out, 32, bp_checksum);
    let hash = record_hash(pool_guid, device_guid, out, data);
    put(out, 64, &hash);
    put(out, RECORD_HEADER_SIZE, data);
}

/// Decodes and verifies a record read back (`buf` = header and data):
/// the data if the header is one, names `id` and `bp_checksum`, and the
/// hash over identity and data matches.
pub fn verify_record<'a>(buf: &'a [u8], pool_guid: u64, device_guid: u64, id: BlockId, bp_checksum: &[u8; 32]) -> Option<&'a [u8]> {
    if buf.get(..8)? != RECORD_MAGIC {
        return None;
    }
    let len = u32_at(buf, 8)? as usize;
    let got = BlockId { vdev: u32_at(buf, 12)?, offset: u64_at(buf, 16)?, birth: u64_at(buf, 24)? };
    if got != id || &hash32(buf, 32)? != bp_checksum {
        return None;
    }
    let data = buf.get(RECORD_HEADER_SIZE..RECORD_HEADER_SIZE + len)?;
    if record_hash(pool_guid, device_guid, buf, data) != hash32(buf, 64)? {
        return None;
    }
    Some(data)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn chunk(n: usize) -> ChunkHeader {
        let header = ChunkHeader::size_for(n);
        let entries: Vec<Entry> = (0..n)
            .map(|i| Entry {
                id: BlockId { vdev: i as u32 % 3, offset: 4096 * i as u64, birth: 7 + i as u64 },
                len: 4096,
                rel: header + i as u64 * record_size(4096),
            })
            .collect();
        let len = round_up(header + n as u64 * record_size(4096), CHUNK_ALIGN);
        ChunkHeader { pool_guid: 11, device_guid: 22, seq: 5, prev: 8192, len, entries }
    }

    #[test]
    fn chunk_header_round_trips() {
        for n in [0, 1, 13, 200] {
            let c = chunk(n);
            let b = c.encode();
            assert_eq!(b.len() as u64, ChunkHeader::size_for(n));
            assert_eq!(ChunkHeader::peek_entries(&b), Some(n));
            assert_eq!(ChunkHeader::decode(&b), Some(c));
        }
    }

    /// A torn header (its tail never written), a flipped bit anywhere,
    /// garbage, zeros, a truncated buffer: all `None`, no panic.
    #[test]
    fn torn_or_damaged_chunk_headers_do_not_decode() {
        let b = chunk(40).encode();
        let mut torn = b.clone();
        for x in &mut torn[512..] {
            *x = 0;
        }
        assert_eq!(ChunkHeader::decode(&torn), None, "torn");
        for bit in [0usize, 70 * 8, 100 * 8 + 3, (b.len() - 700) * 8] {
            let mut flipped = b.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(ChunkHeader::decode(&flipped), None, "bit {bit}");
        }
        assert_eq!(ChunkHeader::decode(&b[..200]), None, "truncated");
        assert_eq!(ChunkHeader::decode(&vec![0u8; 4096]), None, "zeros");
        let mut x = 0x9e3779b97f4a7c15u64;
        let garbage: Vec<u8> = (0..8192).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        }).collect();
        assert_eq!(ChunkHeader::decode(&garbage), None, "garbage");
        let mut fake = garbage.clone();
        fake[..8].copy_from_slice(CHUNK_MAGIC);
        fake[8..12].copy_from_slice(&VERSION.to_le_bytes());
        fake[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(ChunkHeader::decode(&fake), None, "an absurd entry count");
    }

    /// An entry pointing outside its chunk is refused even with a good
    /// checksum (the encoder never writes one; a decoder must not trust it).
    #[test]
    fn entries_outside_the_chunk_are_refused() {
        let mut c = chunk(3);
        c.entries[2].rel = c.len;
        assert_eq!(ChunkHeader::decode(&c.encode()), None);
        let mut c = chunk(3);
        c.entries[1].rel += 1;
        assert_eq!(ChunkHeader::decode(&c.encode()), None);
    }

    #[test]
    fn device_header_round_trips_and_rejects_damage() {
        let h = DevHeader { pool_guid: 1, device_guid: 2, generation: 3, newest: 8192, newest_seq: 9, ring_end: 1 << 30 };
        let b = h.encode();
        assert_eq!(DevHeader::decode(&b), Some(h));
        let mut bad = b.clone();
        bad[45] ^= 4;
        assert_eq!(DevHeader::decode(&bad), None);
        assert_eq!(DevHeader::decode(&vec![0u8; 4096]), None);
        assert_eq!(DevHeader::decode(&b[..30]), None);
    }

    #[test]
    fn records_verify_only_for_their_block_and_data() {
        let id = BlockId { vdev: 1, offset: 1 << 20, birth: 44 };
        let data: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let mut buf = vec![0u8; record_size(data.len() as u64) as usize];
        encode_record(&mut buf, 5, 6, id, &[4u8; 32], &data);
        assert_eq!(verify_record(&buf, 5, 6, id, &[4u8; 32]), Some(&data[..]));
        assert_eq!(verify_record(&buf, 5, 6, BlockId { birth: 45, ..id }, &[4u8; 32]), None, "another birth");
        assert_eq!(verify_record(&buf, 5, 6, id, &[5u8; 32]), None, "another bp checksum");
        assert_eq!(verify_record(&buf, 5, 7, id, &[4u8; 32]), None, "another device");
        let mut rot = buf.clone();
        rot[RECORD_HEADER_SIZE + 4000] ^= 0x10;
        assert_eq!(verify_record(&rot, 5, 6, id, &[4u8; 32]), None, "rotted data");
        assert_eq!(verify_record(&buf[..1000], 5, 6, id, &[4u8; 32]), None, "short read");
    }
}
