//! The write path of an object set: changing a block in a txg (copied
//! from its newest version), data writes, and freeing ranges.

use std::sync::Arc;

use super::{Dnode, Found, ObjectSet};
use crate::tree;
use crate::{ObjError, ObjectId, Result, Tx, Txg};

impl ObjectSet {
    /// Apply `f` to block `blkid` of txg `txg` (made from the newest version).
    ///
    /// A syncing-context write may target a txg older than the newest dirty
    /// record: T's copy is then built from what T sees (records <= T, then
    /// the committed tree), and the same change is applied to every newer
    /// record holding the block, so no later txg rolls it back.
    /// `expect_bs` is the block size the caller split its range with; if it
    /// changed meanwhile the call fails rather than write at wrong offsets.
    /// Changes block `blkid` in `txg` (and in newer txgs that have it
    /// dirty); returns `txg`'s version of it.
    pub(super) fn modify_block(&self, dn: &Arc<Dnode>, txg: Txg, blkid: u64, expect_bs: u64, whole: Option<&[u8]>, f: &mut dyn FnMut(&mut [u8])) -> Result<Arc<Vec<u8>>> {
        if self.inner.raw.lock().is_some() {
            return Err(ObjError::Invalid("the object set is receiving a raw stream: only raw writes".into()));
        }
        let mut st = dn.st.lock();
        let bs = st.attrs().block_size as usize;
        if bs as u64 != expect_bs {
            return Err(ObjError::Invalid("block size changed during the write".into()));
        }
        let base: Vec<u8> = if whole.is_some() || st.dirty.get(&txg).is_some_and(|d| d.blocks.contains_key(&blkid)) {
            Vec::new() // whole: the source itself below; present: modified in place below
        } else {
            match self.block_view_upto(&st, blkid, txg)? {
                Found::Data(b) => b.as_ref().clone(),
                Found::Hole => vec![0u8; bs],
                Found::Committed(phys) => {
                    drop(st);
                    let d = self.read_committed(&phys, blkid)?;
                    st = dn.st.lock();
                    if st.attrs().block_size as usize != bs {
                        return Err(ObjError::Invalid("block size changed during the write".into()));
                    }
                    // Another writer may have dirtied it meanwhile: prefer that.
                    match self.block_view_upto(&st, blkid, txg)? {
                        Found::Data(b) => b.as_ref().clone(),
                        Found::Hole => vec![0u8; bs],
                        Found::Committed(_) => d.map(|x| x.as_ref().clone()).unwrap_or_else(|| vec![0u8; bs]),
                    }
                }
            }
        };
        let d = self.dirty_for(dn, &mut st, txg);
        match (whole.is_some(), d.blocks.get_mut(&blkid)) {
            (false, Some(b)) => {
                let b = Arc::make_mut(b);
                b.resize(bs, 0);
                f(b);
            }
            _ => {
                // A whole-block write takes the source as is (no zero fill).
                let data = match whole {
                    Some(src) if src.len() == bs => src.to_vec(),
                    _ => {
                        let mut data = base;
                        data.resize(bs, 0);
                        f(&mut data);
                        data
                    }
                };
                if let Some(prev) = d.blocks.insert(blkid, Arc::new(data)) {
                    self.drop_charge(d, self.charge_of(prev.len() as u64));
                }
                self.add_charge(d, self.charge_of(bs as u64));
            }
        }
        let mine = st.dirty.get(&txg).and_then(|d| d.blocks.get(&blkid)).cloned().expect("block just dirtied");
        for (_, newer) in st.dirty.range_mut(txg + 1..) {
            if let Some(b) = newer.blocks.get_mut(&blkid) {
                let b = Arc::make_mut(b);
                b.resize(bs, 0);
                f(b);
            }
        }
        Ok(mine)
    }

    /// Write new data (file contents, symlink targets, large xattrs): refused
    /// with `NoSpace` once free space minus dirty data reaches the slop, so
    /// a txg never fails for space.
    pub fn write_data(&self, tx: &Tx, id: ObjectId, offset: u64, data: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.shared.check_space(self.charge_of(data.len() as u64).asize)?;
        self.write(tx, id, offset, data)
    }

    /// Body of [`ObjectSet::write`] (redo.rs); with `parts`, each block's
    /// new version and the range of it the write covers, in order (a redo
    /// note keeps them: a later change of the block copies it).
    pub(crate) fn write_inner(&self, tx: &Tx, id: ObjectId, offset: u64, data: &[u8], mut parts: Option<&mut Vec<crate::redo::WritePart>>) -> Result<()> {
        self.check_writable()?;
        let dn = self.dnode(id)?;
        let (bs, otype) = {
            let st = dn.st.lock();
            let a = st.attrs();
            if !a.exists {
                return Err(ObjError::NotFound(id.0));
            }
            (a.block_size as u64, a.otype)
        };
        if offset.checked_add(data.len() as u64).is_none_or(|end| end / bs >= crate::format::capacity(crate::format::MAX_LEVELS)) {
            return Err(ObjError::Invalid("write past the largest object size".into()));
        }
        let mut pos = 0usize;
        while pos < data.len() {
            let off = offset + pos as u64;
            let blkid = off / bs;
            let in_blk = (off % bs) as usize;
            let n = (bs as usize - in_blk).min(data.len() - pos);
            let src = &data[pos..pos + n];
            let block = self.modify_block(&dn, tx.txg(), blkid, bs, (n == bs as usize).then_some(src), &mut |b| b[in_blk..in_blk + n].copy_from_slice(src))?;
            if let Some(p) = parts.as_deref_mut() {
                p.push(crate::redo::WritePart { block, start: in_blk, len: n, otype });
            }
            pos += n;
        }
        Ok(())
    }

    pub(crate) fn free_range_inner(&self, tx: &Tx, id: ObjectId, offset: u64, len: Option<u64>) -> Result<()> {
        self.check_writable()?;
        let dn = self.dnode(id)?;
        let (bs, nblocks) = {
            let st = dn.st.lock();
            let a = st.attrs();
            if !a.exists {
                return Err(ObjError::NotFound(id.0));
            }
            (a.block_size as u64, st.nblocks())
        };
        let end = match len {
            Some(l) => offset.saturating_add(l).min(nblocks * bs),
            None => nblocks * bs,
        };
        if offset >= end {
            return Ok(());
        }
        // Partial blocks at the edges are zeroed; whole blocks freed.
        let first_full = offset.div_ceil(bs);
        let last_full = if len.is_none() { u64::MAX } else { end / bs };
        // A hole at an edge stays one (punching a hole allocates nothing).
        if !offset.is_multiple_of(bs) && !self.is_hole_now(&dn, offset / bs)? {
            let blkid = offset / bs;
            let from = (offset % bs) as usize;
            let to = if end / bs == blkid { (end % bs) as usize } else { bs as usize };
            self.modify_block(&dn, tx.txg(), blkid, bs, None, &mut |b| b[from..to].fill(0))?;
        }
        if len.is_some() && !end.is_multiple_of(bs) && end / bs >= first_full && !self.is_hole_now(&dn, end / bs)? {
            let blkid = end / bs;
            let to = (end % bs) as usize;
            self.modify_block(&dn, tx.txg(), blkid, bs, None, &mut |b| b[..to].fill(0))?;
        }
        if first_full < last_full {
            self.free_blocks(&dn, tx, first_full, last_full);
        }
        Ok(())
    }

    /// Frees blocks `first..last` of `dn` in `tx`'s txg (dirty ones now,
    /// written ones by the sync).
    pub(crate) fn free_blocks(&self, dn: &Arc<Dnode>, tx: &Tx, first: u64, last: u64) {
        let mut st = dn.st.lock();
        let d = self.dirty_for(dn, &mut st, tx.txg());
        let doomed: Vec<u64> = d.blocks.range(first..last).map(|(&k, _)| k).collect();
        for k in doomed {
            if let Some(b) = d.blocks.remove(&k) {
                d.raw.remove(&k);
                self.drop_charge(d, self.charge_of(b.len() as u64));
            }
        }
        d.frees.push((first, last));
    }

    /// Block `blkid` is a hole (or past the end) in the newest view.
    pub(super) fn is_hole_now(&self, dn: &Arc<Dnode>, blkid: u64) -> Result<bool> {
        let view = {
            let st = dn.st.lock();
            if blkid >= st.nblocks() {
                return Ok(true);
            }
            self.block_view(&st, blkid)?
        };
        match view {
            Found::Data(_) => Ok(false),
            Found::Hole => Ok(true),
            Found::Committed(phys) => {
                let _gate = self.shared.reader_gate.read();
                Ok(tree::lookup(self.io(), &phys, blkid)?.is_hole())
            }
        }
    }
}
