//! The space map log: allocations and frees, persisted per txg.
//!
//! Each synced txg appends one or more log blocks, chained newest to oldest
//! through a `prev` block pointer; the uberblock holds the newest. A block
//! flagged BASE is a condensed snapshot of the whole allocated set, so import
//! replays a chain whose length is bounded, not the pool's whole history.
//!
//! Block layout (little-endian), uncompressed:
//! header 160 bytes: magic `b"TARNSMAP"` u64, txg u64, record count u32,
//! flags u32 (bit 0 BASE), prev block pointer (128 bytes), 8 reserved bytes;
//! then records of 32 bytes: kind u8 (1 alloc, 2 free, 3 free held by the
//! checkpoint), 3 reserved, vdev u32, offset u64, length u64, free txg u64
//! (0 for alloc).
//!
//! A log block's own allocation is one of its records: its DVAs are
//! allocated before the records are final, so a crash can never leave a
//! referenced block unrecorded.

use crate::alloc::{Record, RecordKind};
use crate::bp::BlockPtr;
use crate::io::{BlockError, BlockIo, WriteSpec};
use crate::{ChecksumKind, Compression, Extent};

pub const MAGIC: &[u8; 8] = b"TARNSMAP";
const HEADER: usize = 160;
const RECORD: usize = 32;
pub const RECORDS_PER_BLOCK: usize = (128 * 1024 - HEADER) / RECORD;
pub const FLAG_BASE: u32 = 1;
pub const OTYPE_SPACEMAP: u8 = 2;

/// Copies of each log block (metadata gets more copies than data).
pub const LOG_COPIES: u8 = 2;

pub struct LogBlock {
    pub txg: u64,
    pub flags: u32,
    pub prev: BlockPtr,
    pub records: Vec<Record>,
}

pub fn encode(b: &LogBlock) -> Vec<u8> {
    let mut out = vec![0u8; HEADER + b.records.len() * RECORD];
    out[0..8].copy_from_slice(MAGIC);
    out[8..16].copy_from_slice(&b.txg.to_le_bytes());
    out[16..20].copy_from_slice(&(b.records.len() as u32).to_le_bytes());
    out[20..24].copy_from_slice(&b.flags.to_le_bytes());
    out[24..152].copy_from_slice(&b.prev.encode());
    for (i, r) in b.records.iter().enumerate() {
        let o = HEADER + i * RECORD;
        let (kind, txg) = match r.kind {
            RecordKind::Alloc => (1u8, 0u64),
            RecordKind::Free(t) => (2u8, t),
            RecordKind::CheckpointFree(t) => (3u8, t),
        };
        out[o] = kind;
        out[o + 4..o + 8].copy_from_slice(&r.extent.vdev.to_le_bytes());
        out[o + 8..o + 16].copy_from_slice(&r.extent.offset.to_le_bytes());
        out[o + 16..o + 24].copy_from_slice(&r.extent.len.to_le_bytes());
        out[o + 24..o + 32].copy_from_slice(&txg.to_le_bytes());
    }
    out
}

fn u64_at(b: &[u8], o: usize) -> Result<u64, String> {
    b.get(o..o + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| "space map block too short".to_string())
}

fn u32_at(b: &[u8], o: usize) -> Result<u32, String> {
    b.get(o..o + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| "space map block too short".to_string())
}

pub fn decode(b: &[u8]) -> Result<LogBlock, String> {
    if b.get(0..8) != Some(&MAGIC[..]) {
        return Err("space map block has bad magic".into());
    }
    let txg = u64_at(b, 8)?;
    let n = u32_at(b, 16)? as usize;
    let flags = u32_at(b, 20)?;
    let prev = BlockPtr::decode(b.get(24..152).ok_or("short")?)?;
    if n > RECORDS_PER_BLOCK || HEADER + n * RECORD > b.len() {
        return Err(format!("space map block claims {n} records"));
    }
    let mut records = Vec::with_capacity(n);
    for i in 0..n {
        let o = HEADER + i * RECORD;
        let extent = Extent { vdev: u32_at(b, o + 4)?, offset: u64_at(b, o + 8)?, len: u64_at(b, o + 16)? };
        let kind = match b.get(o) {
            Some(1) => RecordKind::Alloc,
            Some(2) => RecordKind::Free(u64_at(b, o + 24)?),
            Some(3) => RecordKind::CheckpointFree(u64_at(b, o + 24)?),
            other => return Err(format!("space map record kind {other:?}")),
        };
        if extent.len == 0 {
            return Err("space map record of length 0".into());
        }
        records.push(Record { kind, extent });
    }
    Ok(LogBlock { txg, flags, prev, records })
}

fn spec() -> WriteSpec {
    WriteSpec { compression: Compression::Off, checksum: ChecksumKind::Fletcher4, copies: LOG_COPIES, level: 0, otype: OTYPE_SPACEMAP, metadata: true }
}

/// Write the records of `txg` as log blocks after `prev` (or a BASE chain
/// when `base`). The blocks' own allocations are added to their records.
/// Returns the new head and every block written, oldest first.
pub fn write_log(io: &BlockIo, txg: u64, prev: BlockPtr, mut records: Vec<Record>, base: bool) -> Result<(BlockPtr, Vec<BlockPtr>), BlockError> {
    let copies = LOG_COPIES;
    // Each block also records its own allocation: `copies` extents, more
    // if it had to be written as a gang block (gang.rs). Plan for that many
    // per block; if a gang needs more, take every placement back and plan
    // again for the most one block took.
    let mut self_per_block = copies as usize;
    let (counts, placements) = loop {
        // Number of blocks k must hold records + k * self_per_block.
        let mut k = 1usize;
        while records.len() + k * self_per_block > k * RECORDS_PER_BLOCK {
            k += 1;
        }
        let mut counts = Vec::with_capacity(k);
        let mut left = records.len() + k * self_per_block;
        for _ in 0..k {
            let c = left.min(RECORDS_PER_BLOCK);
            counts.push(c);
            left -= c;
        }
        let mut placements: Vec<(u64, crate::gang::Placement)> = Vec::with_capacity(k);
        for &c in &counts {
            let psize = io.psize_for(HEADER + c * RECORD);
            match io.place(psize, copies, true) {
                Ok(p) => placements.push((psize, p)),
                Err(e) => {
                    io.unplace(placements.iter().map(|(_, p)| p));
                    return Err(e);
                }
            }
        }
        let most = placements.iter().map(|(_, p)| p.extents().len()).max().unwrap_or(0);
        if most <= self_per_block {
            break (counts, placements);
        }
        io.unplace(placements.iter().map(|(_, p)| p));
        self_per_block = most;
    };
    let mut dvas_per_block = Vec::with_capacity(placements.len());
    for (psize, placement) in placements {
        for extent in placement.extents() {
            records.push(Record { kind: RecordKind::Alloc, extent });
        }
        dvas_per_block.push((psize, placement));
    }
    // Anything allocated while we were at it was recorded by the allocator;
    // those records are ours now (they are the DVAs just pushed).
    io.alloc.lock().take_records();
    let mut written = Vec::with_capacity(counts.len());
    let mut prev = prev;
    let mut rest = records.as_slice();
    for (i, (&c, (psize, placement))) in counts.iter().zip(dvas_per_block).enumerate() {
        // A block planned for more self records than its placement took
        // holds fewer records than it has room for.
        let (mine, tail) = rest.split_at(c.min(rest.len()));
        rest = tail;
        let block = LogBlock { txg, flags: if base && i == 0 { FLAG_BASE } else { 0 }, prev, records: mine.to_vec() };
        let mut phys = encode(&block);
        let lsize = phys.len();
        phys.resize(psize as usize, 0);
        let s = spec();
        let mut bp = BlockPtr::HOLE;
        placement.apply(&mut bp);
        bp.lsize = lsize as u32;
        bp.psize = psize as u32;
        bp.birth = txg;
        bp.fill = 1;
        bp.compression = crate::bp::COMP_OFF;
        bp.checksum_kind = crate::bp::checksum_code(s.checksum);
        bp.otype = s.otype;
        bp.checksum = crate::checksum::compute(s.checksum, &phys);
        io.write_placed(&bp, &placement, &phys)?;
        written.push(bp);
        prev = bp;
    }
    Ok((prev, written))
}

/// Read the chain ending at `head`, oldest block first (stopping after a BASE block).
pub fn read_chain(io: &BlockIo, head: &BlockPtr) -> Result<Vec<(BlockPtr, LogBlock)>, BlockError> {
    let mut out = Vec::new();
    let mut cur = *head;
    while !cur.is_hole() {
        let data = io.read_uncached(&cur)?;
        let blk = decode(&data).map_err(|what| BlockError::Corrupt { where_: "space map".into(), what })?;
        let prev = blk.prev;
        let is_base = blk.flags & FLAG_BASE != 0;
        out.push((cur, blk));
        if is_base {
            break;
        }
        if out.len() > 10_000_000 {
            return Err(BlockError::Corrupt { where_: "space map".into(), what: "chain does not end".into() });
        }
        cur = prev;
    }
    out.reverse();
    Ok(out)
}
