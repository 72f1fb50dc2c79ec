//! One cache device: its in-memory index, the ring it is written as, and
//! the reads that answer an ARC miss.
//!
//! Invariants:
//! - An index entry names a record that was completely written (the entry
//!   goes in after the chunk's write returned Ok) and lies ahead of the
//!   write head's next pass: before the head writes `[at, at + len)`,
//!   every entry in that range (and a little beyond) leaves the index.
//! - A read answers only with data whose record verifies against the
//!   reader's block (identity, bp checksum, hash over identity and data);
//!   anything else is a miss, and the entry is dropped.
//!
//! Lock order: ring (writer state) -> index. Readers take the index alone,
//! never across device I/O.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tarn_vdev::LeafVdev;

use super::format::{self, round_up, BlockId, ChunkHeader, DevHeader, Entry};

/// What a device answers for a block.
pub(crate) enum Lookup {
    NotHere,
    Hit(Vec<u8>),
    /// Indexed, but the device is out of service (or being removed).
    Unusable,
    /// The read failed (`l2_io_error`).
    IoError,
    /// The record did not verify (`l2_cksum_bad`).
    Corrupt,
}

/// Where a cached block's record is on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    /// Data-region offset of the record.
    pub at: u64,
    /// Bytes of the block's data.
    pub len: u32,
}

/// Bytes one index entry takes in its table (key, location, the table's
/// control byte); the table's empty slots come on top (docs/tuning.md).
pub const INDEX_SLOT_BYTES: u64 = (std::mem::size_of::<(BlockId, Loc)>() + 1) as u64;

/// The writer's state: where the next chunk goes.
pub(crate) struct Ring {
    pub head: u64,
    /// Entries below this (from `head`) have left the index already.
    pub evicted_to: u64,
    pub seq: u64,
    /// Data-region offset of the newest chunk (0: none yet).
    pub newest: u64,
    pub generation: u64,
    /// The head has gone round once (the device has been filled).
    pub wrapped: bool,
}

pub(crate) struct CacheDev {
    pub leaf: Arc<LeafVdev>,
    pub pool_guid: u64,
    pub index: RwLock<HashMap<BlockId, Loc>>,
    pub ring: Mutex<Ring>,
    pub ring_end: u64,
    /// The index is rebuilt (or the device was found empty): feed may write.
    pub ready: AtomicBool,
    /// Being removed from the pool, or the pool is going away: no reads,
    /// no writes.
    pub retired: AtomicBool,
    /// Bytes of data the index names.
    pub data_bytes: AtomicU64,
}

impl CacheDev {
    pub fn new(leaf: Arc<LeafVdev>, pool_guid: u64) -> CacheDev {
        let ring_end = leaf.data_size() / format::CHUNK_ALIGN * format::CHUNK_ALIGN;
        CacheDev {
            leaf,
            pool_guid,
            index: RwLock::new(HashMap::new()),
            ring: Mutex::new(Ring { head: format::RING_START, evicted_to: format::RING_START, seq: 0, newest: 0, generation: 0, wrapped: false }),
            ring_end,
            ready: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            data_bytes: AtomicU64::new(0),
        }
    }

    pub fn guid(&self) -> u64 {
        self.leaf.guid
    }

    /// Usable for reads and writes.
    pub fn serving(&self) -> bool {
        !self.retired.load(Ordering::Relaxed) && self.leaf.usable()
    }

    /// Bytes of the ring.
    pub fn ring_len(&self) -> u64 {
        self.ring_end.saturating_sub(format::RING_START)
    }

    /// The largest chunk a feed write may make on this device.
    pub fn chunk_max(&self) -> u64 {
        (self.ring_len() / 8).clamp(format::CHUNK_ALIGN, 16 << 20)
    }

    /// Bytes of memory the index takes: its table's slots, full or not
    /// (`capacity` is 7/8 of them: the table's largest load).
    pub fn index_bytes(&self) -> u64 {
        self.index.read().capacity() as u64 * 8 / 7 * INDEX_SLOT_BYTES
    }

    pub fn contains(&self, id: &BlockId) -> bool {
        self.index.read().contains_key(id)
    }

    /// Removes every entry; returns nothing (device failed or retired).
    pub fn clear(&self) {
        let mut index = self.index.write();
        index.clear();
        index.shrink_to_fit();
        self.data_bytes.store(0, Ordering::Relaxed);
    }

    pub fn forget(&self, id: &BlockId) {
        if let Some(loc) = self.index.write().remove(id) {
            self.data_bytes.fetch_sub(u64::from(loc.len), Ordering::Relaxed);
        }
    }

    /// The block `id` from this device, verified against the reader's
    /// `bp_checksum` and `lsize`. An entry that fails is dropped.
    pub fn get(&self, id: &BlockId, bp_checksum: &[u8; 32], lsize: u32) -> Lookup {
        let Some(loc) = self.index.read().get(id).copied() else { return Lookup::NotHere };
        if !self.serving() {
            return Lookup::Unusable;
        }
        let mut buf = vec![0u8; format::RECORD_HEADER_SIZE + loc.len as usize];
        let read = self.leaf.cache_read(&mut buf, loc.at);
        let ok = read.is_ok()
            && loc.len == lsize
            && format::verify_record(&buf, self.pool_guid, self.guid(), *id, bp_checksum).is_some();
        if ok {
            buf.drain(..format::RECORD_HEADER_SIZE);
            return Lookup::Hit(buf);
        }
        let mut outcome = Lookup::Unusable;
        {
            let mut index = self.index.write();
            // Not indexed any more: the feed overwrote it while this read
            // was under way, a miss rather than damage.
            if index.get(id) == Some(&loc) {
                index.remove(id);
                self.data_bytes.fetch_sub(u64::from(loc.len), Ordering::Relaxed);
                outcome = if read.is_err() { Lookup::IoError } else { Lookup::Corrupt };
            }
        }
        if !self.leaf.usable() {
            // The device left service: nothing it indexes can be read.
            self.clear();
        }
        outcome
    }

    /// Drops the entries whose records lie in `[from, to)`.
    fn evict_range(&self, from: u64, to: u64) {
        let mut index = self.index.write();
        let mut freed = 0u64;
        index.retain(|_, loc| {
            let inside = loc.at >= from && loc.at < to;
            if inside {
                freed += u64::from(loc.len);
            }
            !inside
        });
        self.data_bytes.fetch_sub(freed, Ordering::Relaxed);
    }

    /// Writes one chunk of `blocks` (identity, bp checksum, data) at the
    /// head, then the device header naming it, and indexes the blocks.
    /// Returns the bytes written.
    pub fn write_chunk(&self, blocks: &[format::Queued]) -> tarn_vdev::Result<u64> {
        let header_len = ChunkHeader::size_for(blocks.len());
        let mut entries = Vec::with_capacity(blocks.len());
        let mut rel = header_len;
        for (id, _, data) in blocks {
            entries.push(Entry { id: *id, len: data.len() as u32, rel });
            rel += format::record_size(data.len() as u64);
        }
        let len = round_up(rel, format::CHUNK_ALIGN);
        assert!(len <= self.ring_len(), "a chunk of {len} bytes is larger than the ring");
        let mut ring = self.ring.lock();
        if ring.head + len > self.ring_end {
            ring.head = format::RING_START;
            ring.evicted_to = format::RING_START;
            ring.wrapped = true;
        }
        let at = ring.head;
        if at + len > ring.evicted_to {
            // Evict ahead in steps of 1/32 of the ring, so the index is
            // walked 32 times per pass, not once per chunk.
            let to = (at + len).max(at + self.ring_len() / 32).min(self.ring_end);
            self.evict_range(at, to);
            ring.evicted_to = to;
        }
        ring.seq += 1;
        let header = ChunkHeader { pool_guid: self.pool_guid, device_guid: self.guid(), seq: ring.seq, prev: ring.newest, len, entries };
        let mut buf = vec![0u8; len as usize];
        let head_bytes = header.encode();
        buf[..head_bytes.len()].copy_from_slice(&head_bytes);
        for ((id, sum, data), e) in blocks.iter().zip(&header.entries) {
            let start = e.rel as usize;
            let end = start + format::record_size(data.len() as u64) as usize;
            format::encode_record(&mut buf[start..end], self.pool_guid, self.guid(), *id, sum, data);
        }
        self.leaf.cache_write(&buf, at)?;
        self.leaf.cache_flush()?;
        ring.generation += 1;
        let dev_header = DevHeader {
            pool_guid: self.pool_guid,
            device_guid: self.guid(),
            generation: ring.generation,
            newest: at,
            newest_seq: ring.seq,
            ring_end: self.ring_end,
        };
        // Alternate copies: a torn header write leaves the other one.
        let copy = (ring.generation % 2) * format::DEV_HEADER_SIZE;
        self.leaf.cache_write(&dev_header.encode(), copy)?;
        ring.newest = at;
        ring.head = at + len;
        let mut index = self.index.write();
        let mut added = 0u64;
        for e in &header.entries {
            let loc = Loc { at: at + e.rel, len: e.len };
            if let Some(old) = index.insert(e.id, loc) {
                added = added.wrapping_sub(u64::from(old.len));
            }
            added = added.wrapping_add(u64::from(e.len));
        }
        self.data_bytes.fetch_add(added, Ordering::Relaxed);
        Ok(len)
    }

    /// Writes an empty device header (a device just added: whatever was
    /// there before is not this pool's cache).
    pub fn format(&self) -> tarn_vdev::Result<()> {
        let mut ring = self.ring.lock();
        ring.generation += 1;
        let h = DevHeader { pool_guid: self.pool_guid, device_guid: self.guid(), generation: ring.generation, newest: 0, newest_seq: 0, ring_end: self.ring_end };
        let bytes = h.encode();
        self.leaf.cache_write(&bytes, 0)?;
        self.leaf.cache_write(&bytes, format::DEV_HEADER_SIZE)?;
        self.leaf.cache_flush()
    }
}
