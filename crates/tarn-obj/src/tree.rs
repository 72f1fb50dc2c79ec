//! Block trees: find the pointer of a data block, and rewrite a tree
//! bottom-up with a txg's changes (copy-on-write: every touched indirect
//! block is written anew and the old one freed).

use std::collections::BTreeMap;
use std::sync::Arc;

use tarn_block::{BlockIo, BlockPtr, WriteSpec, BP_SIZE};

use crate::format::{capacity, span, DnodePhys, EPB, IND_BLOCK_SIZE, MAX_LEVELS, NBPS, OT_INDIRECT};
use crate::{ObjError, Result, Txg};

pub fn block_err(e: tarn_block::BlockError) -> ObjError {
    match e {
        tarn_block::BlockError::NoSpace => ObjError::NoSpace,
        tarn_block::BlockError::Corrupt { .. } => ObjError::Io(e.to_string()),
        tarn_block::BlockError::Write(_) => ObjError::Io(e.to_string()),
    }
}

fn decode_children(data: &[u8]) -> Result<Vec<BlockPtr>> {
    if data.len() != IND_BLOCK_SIZE {
        return Err(ObjError::Corrupt(format!("indirect block of {} bytes", data.len())));
    }
    data.chunks_exact(BP_SIZE).map(|c| BlockPtr::decode(c).map_err(ObjError::Corrupt)).collect()
}

pub fn read_children(io: &BlockIo, bp: &BlockPtr) -> Result<Vec<BlockPtr>> {
    if bp.is_hole() {
        return Ok(vec![BlockPtr::HOLE; EPB as usize]);
    }
    let data = io.read(bp).map_err(block_err)?;
    decode_children(&data)
}

/// The block pointer of data block `blkid` (a hole if none).
pub fn lookup(io: &BlockIo, phys: &DnodePhys, blkid: u64) -> Result<BlockPtr> {
    descend(phys, blkid, &mut |bp| Some(io.read(bp).map_err(block_err))).expect("a walk that reads every indirect block finishes")
}

/// `lookup` from cached indirect blocks only: None when one of them is
/// not in the cache (nothing is read).
pub fn lookup_cached(io: &BlockIo, phys: &DnodePhys, blkid: u64) -> Option<Result<BlockPtr>> {
    descend(phys, blkid, &mut |bp| io.read_if_cached(bp, None).map(Ok))
}

/// How `descend` gets an indirect block: None gives up the walk.
type GetIndirect<'a> = dyn FnMut(&BlockPtr) -> Option<Result<Arc<Vec<u8>>>> + 'a;

/// The pointer of level-0 block `blkid`, each indirect block on the way
/// got from `indirect` (None there: the walk gives up, None).
fn descend(phys: &DnodePhys, blkid: u64, indirect: &mut GetIndirect<'_>) -> Option<Result<BlockPtr>> {
    if !phys.in_use() || blkid >= phys.capacity() {
        return Some(Ok(BlockPtr::HOLE));
    }
    let mut level = phys.nlevels - 1;
    let s = span(level);
    let idx = (blkid / s) as usize;
    let Some(mut bp) = phys.bps.get(idx).copied() else { return Some(Err(ObjError::Corrupt("block id past tree".into()))) };
    let mut rem = blkid % s;
    while level > 0 {
        if bp.is_hole() {
            return Some(Ok(BlockPtr::HOLE));
        }
        let data = match indirect(&bp)? {
            Ok(d) => d,
            Err(e) => return Some(Err(e)),
        };
        level -= 1;
        let s = span(level);
        let i = (rem / s) as usize;
        rem %= s;
        let Some(raw) = data.get(i * BP_SIZE..(i + 1) * BP_SIZE) else { return Some(Err(ObjError::Corrupt("indirect".into()))) };
        bp = match BlockPtr::decode(raw) {
            Ok(bp) => bp,
            Err(e) => return Some(Err(ObjError::Corrupt(e))),
        };
    }
    Some(Ok(bp))
}

/// A txg's changes to one object's tree: frees (applied first), then writes.
#[derive(Default)]
pub struct Changes {
    pub frees: Vec<(u64, u64)>,
    pub writes: BTreeMap<u64, BlockPtr>,
}

pub struct TreeCtx<'a> {
    /// The sync this walk belongs to: frees and writes are of its txg.
    pub stx: &'a crate::pool::SyncTx<'a>,
    pub io: &'a BlockIo,
    pub txg: u64,
    pub meta_spec: WriteSpec,
    /// Bytes allocated (+) and freed (-) by this update.
    pub used_delta: i64,
    /// Logical bytes of level-0 blocks freed (-) by this update.
    pub logical_delta: i64,
    /// Of the frees above, those of user data (see `counting_data`):
    /// logical (-) and allocated (-) bytes.
    pub data_logical_delta: i64,
    pub data_delta: i64,
    /// The object whose blocks are being freed holds user data (not
    /// `DN_METADATA`); set by the caller per object.
    pub counting_data: bool,
    /// Blocks born at or before this txg belong to a snapshot too: they go
    /// to `dead` (the object set's dead list) instead of being freed.
    pub prev_snap_txg: u64,
    pub dead: Vec<BlockPtr>,
    /// Encrypted object set: indirect blocks carry their children's digest.
    pub authenticate: bool,
}

impl<'a> TreeCtx<'a> {
    pub fn new(stx: &'a crate::pool::SyncTx<'a>, io: &'a BlockIo, meta_spec: WriteSpec, prev_snap_txg: u64) -> TreeCtx<'a> {
        TreeCtx {
            stx,
            io,
            txg: stx.txg(),
            meta_spec,
            used_delta: 0,
            logical_delta: 0,
            data_logical_delta: 0,
            data_delta: 0,
            counting_data: true,
            prev_snap_txg,
            dead: Vec::new(),
            authenticate: false,
        }
    }

    pub fn free(&mut self, bp: &BlockPtr) {
        if !bp.is_hole() {
            self.used_delta -= bp.asize() as i64;
            if bp.level == 0 {
                self.logical_delta -= bp.lsize as i64;
                if self.counting_data {
                    self.data_logical_delta -= bp.lsize as i64;
                    self.data_delta -= bp.asize() as i64;
                }
            }
            if bp.birth <= self.prev_snap_txg {
                self.dead.push(*bp);
            } else {
                self.stx.free(bp);
            }
        }
    }

    pub fn free_subtree(&mut self, bp: &BlockPtr, level: u8) -> Result<()> {
        if bp.is_hole() {
            return Ok(());
        }
        if level > 0 {
            for c in read_children(self.io, bp)? {
                self.free_subtree(&c, level - 1)?;
            }
        }
        self.free(bp);
        Ok(())
    }

    fn write_indirect(&mut self, children: &[BlockPtr], level: u8) -> Result<BlockPtr> {
        let mut data = vec![0u8; IND_BLOCK_SIZE];
        let mut fill = 0;
        for (i, c) in children.iter().enumerate() {
            data[i * BP_SIZE..(i + 1) * BP_SIZE].copy_from_slice(&c.encode());
            fill += c.fill;
        }
        let spec = WriteSpec { level, otype: OT_INDIRECT, ..self.meta_spec };
        let mut bp = self.io.write(&data, spec, self.txg).map_err(block_err)?;
        bp.fill = fill;
        if self.authenticate && !bp.is_hole() {
            // Encrypted object sets: the pointer carries a digest of its
            // children's portable forms (crypt.rs), which the parent's MAC
            // covers in turn.
            bp.flags |= tarn_block::crypt::FLAG_CHILDREN_DIGEST;
            bp.mac = tarn_block::crypt::children_digest(&data).ok_or_else(|| ObjError::Corrupt("indirect block does not decode".into()))?;
        }
        self.used_delta += bp.asize() as i64;
        Ok(bp)
    }

    /// Apply `ch` to the tree of `phys` (data block pointers in `ch.writes`
    /// are already written and counted by the caller).
    pub fn apply(&mut self, phys: &mut DnodePhys, ch: &Changes) -> Result<()> {
        let max_write = ch.writes.keys().next_back().copied();
        if let Some(m) = max_write {
            while phys.capacity() <= m {
                self.grow(phys)?;
            }
        }
        let top = phys.nlevels - 1;
        let s = span(top);
        for i in 0..NBPS {
            let base = i as u64 * s;
            let end = base.saturating_add(s);
            if touches(ch, base, end) {
                phys.bps[i] = self.update(top, phys.bps[i], base, ch)?;
            }
        }
        for &(start, end) in &ch.frees {
            if end >= phys.nblocks && start < phys.nblocks {
                phys.nblocks = start;
            }
        }
        if let Some(m) = max_write {
            phys.nblocks = phys.nblocks.max(m + 1);
        }
        phys.nblocks = phys.nblocks.min(capacity(phys.nlevels));
        Ok(())
    }

    /// One more level: the top pointers move under a new indirect block.
    fn grow(&mut self, phys: &mut DnodePhys) -> Result<()> {
        if phys.nlevels >= MAX_LEVELS {
            return Err(ObjError::Invalid("object too large".into()));
        }
        if phys.bps.iter().all(|b| b.is_hole()) {
            phys.nlevels += 1;
            return Ok(());
        }
        let mut children = vec![BlockPtr::HOLE; EPB as usize];
        children[..NBPS].copy_from_slice(&phys.bps);
        let bp = self.write_indirect(&children, phys.nlevels)?;
        phys.bps = [bp, BlockPtr::HOLE, BlockPtr::HOLE];
        phys.nlevels += 1;
        Ok(())
    }

    /// Grows the tree of `phys` to at least `levels` levels.
    pub fn grow_to(&mut self, phys: &mut DnodePhys, levels: u8) -> Result<()> {
        while phys.nlevels < levels {
            self.grow(phys)?;
        }
        Ok(())
    }

    fn update(&mut self, level: u8, old: BlockPtr, base: u64, ch: &Changes) -> Result<BlockPtr> {
        let end = base.saturating_add(span(level));
        if level == 0 {
            if let Some(new) = ch.writes.get(&base) {
                self.free(&old);
                return Ok(*new);
            }
            if ch.frees.iter().any(|&(s, e)| s <= base && base < e) {
                self.free(&old);
                return Ok(BlockPtr::HOLE);
            }
            return Ok(old);
        }
        let whole_freed = ch.frees.iter().any(|&(s, e)| s <= base && end <= e);
        let any_write = ch.writes.range(base..end).next().is_some();
        if whole_freed && !any_write {
            self.free_subtree(&old, level)?;
            return Ok(BlockPtr::HOLE);
        }
        let mut children = if whole_freed {
            self.free_subtree(&old, level)?;
            vec![BlockPtr::HOLE; EPB as usize]
        } else {
            let c = read_children(self.io, &old)?;
            self.free(&old);
            c
        };
        let cs = span(level - 1);
        for (j, child) in children.iter_mut().enumerate() {
            let cb = base + j as u64 * cs;
            let ce = cb.saturating_add(cs);
            if touches(ch, cb, ce) {
                *child = self.update(level - 1, *child, cb, ch)?;
            }
        }
        if children.iter().all(|c| c.is_hole()) {
            return Ok(BlockPtr::HOLE);
        }
        self.write_indirect(&children, level)
    }
}

fn touches(ch: &Changes, base: u64, end: u64) -> bool {
    ch.writes.range(base..end).next().is_some() || ch.frees.iter().any(|&(s, e)| s < end && base < e)
}

/// Visit every block pointer of a tree (indirects before their children).
pub fn walk(io: &BlockIo, phys: &DnodePhys, f: &mut dyn FnMut(&BlockPtr, u8) -> Result<()>) -> Result<()> {
    walk_born_after(io, phys, 0, f)
}

/// Like [`walk`], but skips every subtree whose root was born before
/// `min_birth`: copy-on-write gives a parent a birth at least its
/// children's, so nothing newer hides below an older pointer.
pub fn walk_born_after(io: &BlockIo, phys: &DnodePhys, min_birth: Txg, f: &mut dyn FnMut(&BlockPtr, u8) -> Result<()>) -> Result<()> {
    if !phys.in_use() {
        return Ok(());
    }
    fn rec(io: &BlockIo, bp: &BlockPtr, level: u8, min_birth: Txg, f: &mut dyn FnMut(&BlockPtr, u8) -> Result<()>) -> Result<()> {
        if bp.is_hole() || bp.birth < min_birth {
            return Ok(());
        }
        f(bp, level)?;
        if level > 0 {
            let data = io.read_uncached(bp).map_err(block_err)?;
            for c in decode_children(&data)? {
                rec(io, &c, level - 1, min_birth, f)?;
            }
        }
        Ok(())
    }
    for bp in &phys.bps {
        rec(io, bp, phys.nlevels - 1, min_birth, f)?;
    }
    Ok(())
}
