//! Rebuilding a cache device's index from the device (persistent L2ARC):
//! after import or a daemon restart the cache is what the device holds,
//! not empty.
//!
//! The newer of the two device headers that verify and name this pool and
//! device gives the newest chunk; the walk goes back through each chunk's
//! `prev` while the chunk verifies, has the sequence number one below the
//! chunk after it, and lies wholly behind it on the ring (a chunk the
//! head has since passed over is not read). Entries born after `max_birth`
//! (the txg the pool was imported at) are dropped: after a rewind import a
//! (vdev, offset, birth) may name another block. A header of another pool,
//! or garbage, is an empty cache, not an error.

use std::sync::atomic::{AtomicBool, Ordering};

use super::device::{CacheDev, Loc};
use super::format::{self, ChunkHeader, DevHeader};

/// What a rebuild restored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rebuilt {
    pub chunks: u64,
    pub blocks: u64,
    /// Entries left out because they were born after the imported txg.
    pub too_young: u64,
}

/// The newest valid device header for this pool and device, if any.
fn device_header(dev: &CacheDev) -> Option<DevHeader> {
    let mut best: Option<DevHeader> = None;
    for copy in [0, format::DEV_HEADER_SIZE] {
        let mut buf = vec![0u8; format::DEV_HEADER_SIZE as usize];
        if dev.leaf.cache_read(&mut buf, copy).is_err() {
            continue;
        }
        let Some(h) = DevHeader::decode(&buf) else { continue };
        if h.pool_guid != dev.pool_guid || h.device_guid != dev.guid() || h.ring_end != dev.ring_end {
            continue;
        }
        if best.is_none_or(|b| h.generation > b.generation) {
            best = Some(h);
        }
    }
    best
}

/// Reads and decodes the chunk header at `at`.
fn read_chunk(dev: &CacheDev, at: u64) -> Option<ChunkHeader> {
    if at < format::RING_START || !at.is_multiple_of(format::CHUNK_ALIGN) || at >= dev.ring_end {
        return None;
    }
    let mut first = vec![0u8; format::CHUNK_ALIGN as usize];
    dev.leaf.cache_read(&mut first, at).ok()?;
    let n = ChunkHeader::peek_entries(&first)?;
    let size = ChunkHeader::size_for(n);
    if size > dev.chunk_max() || at + size > dev.ring_end {
        return None;
    }
    let buf = if size as usize > first.len() {
        let mut all = vec![0u8; size as usize];
        dev.leaf.cache_read(&mut all, at).ok()?;
        all
    } else {
        first
    };
    let c = ChunkHeader::decode(&buf)?;
    (c.pool_guid == dev.pool_guid && c.device_guid == dev.guid() && at + c.len <= dev.ring_end).then_some(c)
}

/// Rebuilds `dev`'s index; stops early if `stop` is set. Leaves the ring
/// state so the feed goes on after the newest chunk.
pub(crate) fn rebuild(dev: &CacheDev, max_birth: u64, stop: &AtomicBool) -> Rebuilt {
    let mut out = Rebuilt::default();
    let Some(h) = device_header(dev) else { return out };
    let mut ring = dev.ring.lock();
    ring.generation = h.generation;
    if h.newest == 0 {
        return out;
    }
    let ring_len = dev.ring_len();
    let Some(newest) = read_chunk(dev, h.newest) else { return out };
    if newest.seq != h.newest_seq {
        return out;
    }
    let head = h.newest + newest.len;
    // How far behind the head a ring offset is (0 means a full pass).
    let behind = |at: u64| {
        let d = if at < head { head - at } else { head - format::RING_START + dev.ring_end - at };
        if d == 0 { ring_len } else { d }
    };
    ring.head = head;
    ring.evicted_to = head;
    ring.seq = newest.seq;
    ring.newest = h.newest;
    let mut index = dev.index.write();
    let mut data_bytes = 0u64;
    let mut at = h.newest;
    let mut chunk = newest;
    // How far behind the head the chunk after this one starts.
    let mut newer_start = 0u64;
    loop {
        let start = behind(at);
        if start < chunk.len || start - chunk.len < newer_start || start > ring_len {
            break; // overlaps what the head wrote since: overwritten
        }
        if at >= head {
            ring.wrapped = true;
        }
        out.chunks += 1;
        for e in &chunk.entries {
            if e.id.birth > max_birth {
                out.too_young += 1;
                continue;
            }
            // Walking back: a newer copy of the block, seen first, wins.
            if let std::collections::hash_map::Entry::Vacant(slot) = index.entry(e.id) {
                slot.insert(Loc { at: at + e.rel, len: e.len });
                data_bytes += u64::from(e.len);
                out.blocks += 1;
            }
        }
        if chunk.prev == 0 || stop.load(Ordering::Relaxed) {
            break;
        }
        newer_start = start;
        let want = chunk.seq.saturating_sub(1);
        match read_chunk(dev, chunk.prev) {
            Some(c) if c.seq == want && want > 0 => {
                at = chunk.prev;
                chunk = c;
            }
            _ => break,
        }
    }
    dev.data_bytes.store(data_bytes, Ordering::Relaxed);
    out
}
