//! Gang blocks: a block written in pieces when no free extent is large
//! enough to hold it whole.
//!
//! A pool that is nearly full, or full of small files being deleted, can
//! have megabytes free in holes smaller than the 16 KiB-1 MiB blocks a txg
//! must write; without a way to split a block, that txg would fail and
//! suspend the pool. As in ZFS, such a block becomes a *gang*: its block
//! pointer (flag `GANG`) keeps lsize, psize and the checksum of the whole
//! physical block, but each DVA points at a *gang header* on the same
//! top-level vdev instead of the data: one 4 KiB block listing up to 72
//! entries, each a *piece* of the data or a *sub-header* (a header of the
//! same form listing pieces only), so a copy has at most 72 × 72 pieces.
//! The pieces, in order, are the physical block. Each copy (DVA) has its
//! own headers and pieces; the DVA's `asize` counts all of them, so space
//! accounting sees a gang block like any other.
//!
//! Header (4096 bytes, little-endian):
//!
//! | off | size | field |
//! |----:|-----:|-------|
//! | 0   | 8    | magic `TARNGANG` |
//! | 8   | 4    | version (1) |
//! | 12  | 4    | number of entries (1..=72) |
//! | 16  | 8    | bytes of data below this header (sum of the pieces' psizes) |
//! | 24  | 8    | reserved, zero |
//! | 32  | 32   | fletcher4 of the header with these 32 bytes zero |
//! | 64  | 56×n | entries: kind u8 (0 piece, 1 sub-header), 3 zero, psize u32 (data bytes below it), asize u64 (allocated bytes: the piece, or the sub-header and its pieces), offset u64, fletcher4 [32] (of the piece, or of the sub-header block) |
//!
//! Invariants: headers are written after everything they list (a torn
//! write leaves a header that does not verify, never one naming unwritten
//! pieces); the pieces and headers of one copy lie on that copy's vdev and
//! never overlap; a gang block is freed by reading its headers.

use crate::alloc::Extent;
use crate::bp::{BlockPtr, Dva};
use crate::checksum;
use crate::io::{BlockError, BlockIo};
use crate::ChecksumKind;

pub const GANG_MAGIC: &[u8; 8] = b"TARNGANG";
pub const GANG_HEADER_LEN: usize = 4096;
const ENTRY: usize = 56;
const ENTRIES_AT: usize = 64;
/// Entries of one header.
pub const GANG_FANOUT: usize = (GANG_HEADER_LEN - ENTRIES_AT) / ENTRY;
/// Pieces of one copy at most (a header of sub-headers of pieces).
pub const GANG_MAX_PIECES: usize = GANG_FANOUT * GANG_FANOUT;
/// Block pointer flag: every DVA is a gang header.
pub const FLAG_GANG: u8 = 1 << 1;

const KIND_PIECE: u8 = 0;
const KIND_SUB: u8 = 1;

fn sum(data: &[u8]) -> [u8; 32] {
    checksum::compute(ChecksumKind::Fletcher4, data)
}

/// One entry of a header as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub sub: bool,
    pub psize: u32,
    pub asize: u64,
    pub offset: u64,
    pub checksum: [u8; 32],
}

pub fn encode_header(entries: &[Entry]) -> Vec<u8> {
    let mut b = vec![0u8; GANG_HEADER_LEN];
    b[0..8].copy_from_slice(GANG_MAGIC);
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[12..16].copy_from_slice(&(entries.len() as u32).to_le_bytes());
    let below: u64 = entries.iter().map(|e| u64::from(e.psize)).sum();
    b[16..24].copy_from_slice(&below.to_le_bytes());
    for (i, e) in entries.iter().enumerate() {
        let o = ENTRIES_AT + i * ENTRY;
        b[o] = if e.sub { KIND_SUB } else { KIND_PIECE };
        b[o + 4..o + 8].copy_from_slice(&e.psize.to_le_bytes());
        b[o + 8..o + 16].copy_from_slice(&e.asize.to_le_bytes());
        b[o + 16..o + 24].copy_from_slice(&e.offset.to_le_bytes());
        b[o + 24..o + 56].copy_from_slice(&e.checksum);
    }
    let own = sum(&b);
    b[32..64].copy_from_slice(&own);
    b
}

/// Whether `b` starts with a header whose own checksum verifies.
fn header_ok(b: &[u8]) -> bool {
    if b.len() < GANG_HEADER_LEN || &b[0..8] != GANG_MAGIC {
        return false;
    }
    let mut copy = b[..GANG_HEADER_LEN].to_vec();
    copy[32..64].fill(0);
    sum(&copy)[..] == b[32..64]
}

/// The entries of a header, checked against the data bytes (`psize`) and
/// allocated bytes (`asize`, the header's own included) it must account
/// for. A sub-header (`nested`) lists pieces only. Malformed headers are
/// `Err`, never a panic.
pub fn decode_header(b: &[u8], psize: u64, asize: u64, header_asize: u64, nested: bool) -> Result<Vec<Entry>, String> {
    if !header_ok(b) {
        return Err("gang header does not verify".into());
    }
    let u32at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u64at = |o: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[o..o + 8]);
        u64::from_le_bytes(x)
    };
    if u32at(8) != 1 {
        return Err(format!("gang header version {}", u32at(8)));
    }
    let n = u32at(12) as usize;
    if n == 0 || n > GANG_FANOUT || u64at(16) != psize {
        return Err(format!("gang header lists {n} entries of {} bytes for {psize}", u64at(16)));
    }
    let mut entries = Vec::with_capacity(n);
    let (mut total_psize, mut total_asize) = (0u64, header_asize);
    for i in 0..n {
        let o = ENTRIES_AT + i * ENTRY;
        let mut checksum = [0u8; 32];
        checksum.copy_from_slice(&b[o + 24..o + 56]);
        let sub = match b[o] {
            KIND_PIECE => false,
            KIND_SUB if !nested => true,
            kind => return Err(format!("gang entry {i} of kind {kind}")),
        };
        let e = Entry { sub, psize: u32at(o + 4), asize: u64at(o + 8), offset: u64at(o + 16), checksum };
        if e.psize == 0 || e.asize < u64::from(e.psize) || b[o + 1..o + 4].iter().any(|&x| x != 0) {
            return Err(format!("gang entry {i}: {} data bytes in {} allocated", e.psize, e.asize));
        }
        total_psize += u64::from(e.psize);
        total_asize += e.asize;
        entries.push(e);
    }
    if total_psize != psize || total_asize != asize {
        return Err(format!("gang entries add up to {total_psize}/{total_asize} bytes, expected {psize}/{asize}"));
    }
    Ok(entries)
}

/// A planned gang header and what it lists (pieces, or sub-headers).
#[derive(Clone, Debug)]
pub struct GangNode {
    pub header: Extent,
    pub children: Vec<GangChild>,
}

#[derive(Clone, Debug)]
pub enum GangChild {
    /// A piece: where it goes, and its share of the data.
    Piece(Extent, u64),
    Node(GangNode),
}

impl GangNode {
    fn psize(&self) -> u64 {
        self.children.iter().map(GangChild::psize).sum()
    }
    fn asize(&self) -> u64 {
        self.header.len + self.children.iter().map(GangChild::asize).sum::<u64>()
    }
    fn extents(&self, out: &mut Vec<Extent>) {
        out.push(self.header);
        for c in &self.children {
            match c {
                GangChild::Piece(e, _) => out.push(*e),
                GangChild::Node(n) => n.extents(out),
            }
        }
    }
}

impl GangChild {
    fn psize(&self) -> u64 {
        match self {
            GangChild::Piece(_, p) => *p,
            GangChild::Node(n) => n.psize(),
        }
    }
    fn asize(&self) -> u64 {
        match self {
            GangChild::Piece(e, _) => e.len,
            GangChild::Node(n) => n.asize(),
        }
    }
}

/// Where one copy of a block goes: whole, or as a gang.
#[derive(Clone, Debug)]
pub enum CopyPlace {
    Whole(Dva),
    Gang(GangNode),
}

impl CopyPlace {
    /// The DVA the block pointer records for this copy.
    pub fn dva(&self) -> Dva {
        match self {
            CopyPlace::Whole(d) => *d,
            CopyPlace::Gang(n) => Dva { vdev: n.header.vdev, asize: n.asize() as u32, offset: n.header.offset },
        }
    }

    /// Every extent this copy allocates.
    pub fn extents(&self) -> Vec<Extent> {
        match self {
            CopyPlace::Whole(d) => vec![Extent { vdev: d.vdev, offset: d.offset, len: u64::from(d.asize) }],
            CopyPlace::Gang(n) => {
                let mut out = Vec::new();
                n.extents(&mut out);
                out
            }
        }
    }
}

/// Where every copy of a block goes (see [`BlockIo::place`]).
#[derive(Clone, Debug)]
pub struct Placement {
    pub copies: Vec<CopyPlace>,
}

impl Placement {
    pub fn is_gang(&self) -> bool {
        self.copies.iter().any(|c| matches!(c, CopyPlace::Gang(_)))
    }

    pub fn extents(&self) -> Vec<Extent> {
        self.copies.iter().flat_map(CopyPlace::extents).collect()
    }

    /// Puts the placement into `bp` (DVAs, copy count, the gang flag).
    pub fn apply(&self, bp: &mut BlockPtr) {
        bp.ndva = self.copies.len() as u8;
        for (i, c) in self.copies.iter().enumerate() {
            bp.dva[i] = c.dva();
        }
        if self.is_gang() {
            bp.flags |= FLAG_GANG;
        } else {
            bp.flags &= !FLAG_GANG;
        }
    }
}

pub fn is_gang(bp: &BlockPtr) -> bool {
    bp.flags & FLAG_GANG != 0
}

/// What reading a header tree finds: each piece's place, data size and
/// checksum, in order, and every header (offset, allocated bytes).
struct Tree {
    pieces: Vec<Entry>,
    headers: Vec<(u64, u64)>,
}

impl BlockIo {
    /// Bytes of a gang header as stored.
    pub(crate) fn gang_header_psize(&self) -> u64 {
        self.psize_for(GANG_HEADER_LEN)
    }

    fn gang_top(&self, vdev: u32) -> Result<std::sync::Arc<tarn_vdev::TopVdev>, BlockError> {
        self.tops().get(vdev as usize).cloned().ok_or_else(|| BlockError::Write(format!("no vdev {vdev}")))
    }

    /// Writes one gang header tree: every piece, each header after what
    /// it lists. Returns the header's entry (for its parent).
    fn write_node(&self, top: &tarn_vdev::TopVdev, node: &GangNode, phys: &[u8], at: &mut usize, birth: u64) -> Result<Entry, BlockError> {
        let mut entries = Vec::with_capacity(node.children.len());
        for child in &node.children {
            entries.push(match child {
                GangChild::Piece(e, psize) => {
                    let end = *at + *psize as usize;
                    let piece = phys.get(*at..end).ok_or_else(|| BlockError::Write("gang pieces longer than the block".into()))?;
                    top.write(e.offset, piece, birth).map_err(|e| BlockError::Write(e.to_string()))?;
                    *at = end;
                    Entry { sub: false, psize: *psize as u32, asize: e.len, offset: e.offset, checksum: sum(piece) }
                }
                GangChild::Node(sub) => Entry { sub: true, ..self.write_node(top, sub, phys, at, birth)? },
            });
        }
        let mut head = encode_header(&entries);
        let checksum = sum(&head[..GANG_HEADER_LEN]);
        head.resize(self.gang_header_psize() as usize, 0);
        top.write(node.header.offset, &head, birth).map_err(|e| BlockError::Write(e.to_string()))?;
        Ok(Entry { sub: false, psize: node.psize() as u32, asize: node.asize(), offset: node.header.offset, checksum })
    }

    /// Writes one gang copy: its pieces, then its headers.
    pub(crate) fn write_gang_copy(&self, node: &GangNode, phys: &[u8], birth: u64) -> Result<(), BlockError> {
        let top = self.gang_top(node.header.vdev)?;
        let mut at = 0usize;
        self.write_node(&top, node, phys, &mut at, birth).map(|_| ())
    }

    /// Reads and checks the header tree of gang copy `d` (not the pieces).
    fn gang_tree(&self, d: &Dva, bp: &BlockPtr) -> Result<Tree, BlockError> {
        let corrupt = |what: String| BlockError::Corrupt { where_: format!("gang header {d:?}"), what };
        let top = self.gang_top(d.vdev)?;
        let hsize = self.gang_header_psize();
        let header_asize = top.alloc_size(hsize);
        let read = |offset: u64, expect: Option<[u8; 32]>| {
            let verify = |b: &[u8]| header_ok(b) && expect.is_none_or(|c| sum(&b[..GANG_HEADER_LEN]) == c);
            top.read(offset, hsize, bp.birth, &verify).map(|o| o.data).map_err(|e| corrupt(e.to_string()))
        };
        let root = read(d.offset, None)?;
        let mut tree = Tree { pieces: Vec::new(), headers: vec![(d.offset, header_asize)] };
        for e in decode_header(&root, u64::from(bp.psize), u64::from(d.asize), header_asize, false).map_err(corrupt)? {
            if !e.sub {
                tree.pieces.push(e);
                continue;
            }
            let sub = read(e.offset, Some(e.checksum))?;
            tree.headers.push((e.offset, header_asize));
            tree.pieces.extend(decode_header(&sub, u64::from(e.psize), e.asize, header_asize, true).map_err(corrupt)?);
        }
        Ok(tree)
    }

    /// Reads gang copy `d` whole (each piece verified against its own
    /// checksum; the caller checks the block's).
    pub(crate) fn read_gang_copy(&self, d: &Dva, bp: &BlockPtr) -> Result<Vec<u8>, BlockError> {
        let tree = self.gang_tree(d, bp)?;
        let top = self.gang_top(d.vdev)?;
        let mut phys = Vec::with_capacity(bp.psize as usize);
        for p in &tree.pieces {
            let verify = |b: &[u8]| sum(b) == p.checksum;
            let out = top
                .read(p.offset, u64::from(p.psize), bp.birth, &verify)
                .map_err(|e| BlockError::Corrupt { where_: format!("gang piece at {} on vdev {}", p.offset, d.vdev), what: e.to_string() })?;
            phys.extend_from_slice(&out.data);
        }
        Ok(phys)
    }

    /// Rewrites the pieces of gang copy `d` from good physical bytes (its
    /// headers must still read back); returns the bytes written.
    pub(crate) fn rewrite_gang_copy(&self, d: &Dva, bp: &BlockPtr, phys: &[u8]) -> Result<u64, BlockError> {
        let tree = self.gang_tree(d, bp)?;
        let top = self.gang_top(d.vdev)?;
        let (mut at, mut written) = (0usize, 0u64);
        for p in &tree.pieces {
            let end = at + p.psize as usize;
            if let Some(piece) = phys.get(at..end) {
                top.write(p.offset, piece, bp.birth).map_err(|e| BlockError::Write(e.to_string()))?;
                written += u64::from(p.psize);
            }
            at = end;
        }
        Ok(written)
    }

    /// Scrub or resilver gang copy `d`: its headers and every piece.
    pub(crate) fn scan_gang_copy(&self, d: &Dva, bp: &BlockPtr, scrub: bool) -> Result<tarn_vdev::ScanOutcome, BlockError> {
        let top = self.gang_top(d.vdev)?;
        let fail = |e: tarn_vdev::VdevError| BlockError::Corrupt { where_: format!("gang copy {d:?}"), what: e.to_string() };
        let hsize = self.gang_header_psize();
        // Repairs the root header first (if a column of it is bad), then
        // finds the rest through it.
        let mut total = top.scan(d.offset, hsize, bp.birth, &header_ok, scrub).map_err(fail)?;
        let tree = self.gang_tree(d, bp)?;
        for &(offset, _) in tree.headers.iter().skip(1) {
            let o = top.scan(offset, hsize, bp.birth, &header_ok, scrub).map_err(fail)?;
            total.read_bytes += o.read_bytes;
            total.repaired_bytes += o.repaired_bytes;
            total.resilvered_bytes += o.resilvered_bytes;
        }
        for p in &tree.pieces {
            let verify = |b: &[u8]| sum(b) == p.checksum;
            let o = top.scan(p.offset, u64::from(p.psize), bp.birth, &verify, scrub).map_err(fail)?;
            total.read_bytes += o.read_bytes;
            total.repaired_bytes += o.repaired_bytes;
            total.resilvered_bytes += o.resilvered_bytes;
        }
        Ok(total)
    }

    /// Every extent a block's copies occupy: its DVAs, or for a gang block
    /// each copy's headers and pieces (read from disk).
    pub fn extents_of(&self, bp: &BlockPtr) -> Result<Vec<Extent>, BlockError> {
        if !is_gang(bp) {
            return Ok(bp.dvas().iter().map(|d| Extent { vdev: d.vdev, offset: d.offset, len: u64::from(d.asize) }).collect());
        }
        let mut out = Vec::new();
        for d in bp.dvas() {
            let tree = self.gang_tree(d, bp)?;
            out.extend(tree.headers.iter().map(|&(offset, len)| Extent { vdev: d.vdev, offset, len }));
            out.extend(tree.pieces.iter().map(|p| Extent { vdev: d.vdev, offset: p.offset, len: p.asize }));
        }
        Ok(out)
    }
}

/// Groups `pieces` (in order) under headers at `headers` (one root, and
/// sub-headers when there are more than [`GANG_FANOUT`] pieces); `None`
/// when there are too many pieces or too few headers.
pub fn build_tree(headers: &[Extent], pieces: Vec<(Extent, u64)>) -> Option<GangNode> {
    let (&root, subs) = headers.split_first()?;
    if pieces.len() <= GANG_FANOUT {
        return Some(GangNode { header: root, children: pieces.into_iter().map(|(e, p)| GangChild::Piece(e, p)).collect() });
    }
    let groups = pieces.len().div_ceil(GANG_FANOUT);
    if groups > GANG_FANOUT || subs.len() < groups {
        return None;
    }
    let mut children = Vec::with_capacity(groups);
    let mut rest = pieces.into_iter();
    for &sub in subs.iter().take(groups) {
        let group: Vec<GangChild> = rest.by_ref().take(GANG_FANOUT).map(|(e, p)| GangChild::Piece(e, p)).collect();
        children.push(GangChild::Node(GangNode { header: sub, children: group }));
    }
    Some(GangNode { header: root, children })
}

/// Headers a copy of `pieces` pieces needs.
pub fn headers_for(pieces: usize) -> usize {
    if pieces <= GANG_FANOUT {
        1
    } else {
        1 + pieces.div_ceil(GANG_FANOUT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(offset: u64, psize: u32) -> Entry {
        Entry { sub: false, psize, asize: u64::from(psize), offset, checksum: [offset as u8; 32] }
    }

    #[test]
    fn headers_round_trip_and_refuse_damage() {
        let entries = vec![entry(4096, 8192), Entry { sub: true, ..entry(65536, 4096) }];
        let b = encode_header(&entries);
        assert_eq!(decode_header(&b, 12288, 4096 + 12288, 4096, false).unwrap(), entries);
        assert!(decode_header(&b, 12288, 4096 + 12288, 4096, true).is_err(), "no sub-headers below a sub-header");
        assert!(decode_header(&b, 12288 + 4096, 4096 + 12288, 4096, false).is_err(), "psize must match");
        assert!(decode_header(&b, 12288, 4096, 4096, false).is_err(), "asize must match");
        for at in [0, 9, 13, 20, 40, 64, 65, 70, 100] {
            let mut bad = b.clone();
            bad[at] ^= 1;
            assert!(decode_header(&bad, 12288, 4096 + 12288, 4096, false).is_err(), "flip at {at}");
        }
        assert!(decode_header(&[0u8; 100], 1, 1, 1, false).is_err());
        assert!(decode_header(&vec![0u8; GANG_HEADER_LEN], 1, 1, 1, false).is_err());
        assert_eq!((GANG_FANOUT, GANG_MAX_PIECES), (72, 5184));
    }

    #[test]
    fn trees_group_pieces_under_sub_headers() {
        let e = |i: u64| Extent { vdev: 0, offset: i * 4096, len: 4096 };
        let pieces: Vec<(Extent, u64)> = (0..200).map(|i| (e(100 + i), 4096)).collect();
        assert_eq!(headers_for(200), 4);
        let headers: Vec<Extent> = (0..4).map(e).collect();
        let tree = build_tree(&headers, pieces.clone()).unwrap();
        assert_eq!(tree.psize(), 200 * 4096);
        assert_eq!(tree.asize(), 204 * 4096);
        assert_eq!(tree.children.len(), 3);
        assert!(build_tree(&headers[..2], pieces).is_none(), "too few headers");
        assert_eq!(headers_for(GANG_FANOUT), 1);
    }
}
