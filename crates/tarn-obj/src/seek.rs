//! Finding data and holes in an object (SEEK_DATA / SEEK_HOLE).
//!
//! A block is data in the newest view when the newest dirty txg that
//! mentions it holds a buffer for it, or when no dirty txg mentions it and
//! the committed tree has a pointer for it. It is a hole when the newest
//! txg that mentions it frees it (a free range, or the whole object freed),
//! or when nothing mentions it and the committed tree has none. Blocks at
//! or past the object's end (`nblocks`) are holes.
//!
//! The committed tree is walked top-down, skipping hole subtrees (looking
//! for data) and subtrees whose `fill` says every block is present
//! (looking for a hole), so a sparse file of any size is answered by
//! reading a few indirect blocks.
//!
//! Invariant: the answer describes one consistent view. The dirty state is
//! copied (block ids and free ranges only) together with the committed
//! dnode under the dnode lock; the committed tree is then read under the
//! reader gate, so blocks a later sync frees stay readable meanwhile.

use tarn_block::BlockPtr;

use crate::format::{span, DnodePhys, NBPS};
use crate::objset::DnodeState;
use crate::tree::read_children;
use crate::{ObjError, ObjectId, ObjectSet, Result};

/// One dirty txg's mentions of blocks: buffers held, ranges freed.
struct Mentions {
    blocks: Vec<u64>,
    frees: Vec<(u64, u64)>,
    freed: bool,
}

/// What the newest view of one block comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum View {
    DirtyData,
    /// Freed by a dirty txg; the range freed ends at `.0` (exclusive).
    DirtyHole(u64),
    Committed,
}

/// The dirty overlay of one object, newest txg first.
struct Overlay {
    txgs: Vec<Mentions>,
}

impl Overlay {
    fn of(st: &DnodeState) -> Overlay {
        let txgs = st
            .dirty
            .values()
            .rev()
            .map(|d| Mentions { blocks: d.blocks.keys().copied().collect(), frees: d.frees.clone(), freed: d.freed })
            .collect();
        Overlay { txgs }
    }

    fn view(&self, blkid: u64) -> View {
        for m in &self.txgs {
            if m.blocks.binary_search(&blkid).is_ok() {
                return View::DirtyData;
            }
            if m.freed {
                return View::DirtyHole(u64::MAX);
            }
            let mut end = None;
            for &(s, e) in &m.frees {
                if s <= blkid && blkid < e {
                    end = Some(end.map_or(e, |x: u64| x.max(e)));
                }
            }
            if let Some(e) = end {
                return View::DirtyHole(e);
            }
        }
        View::Committed
    }

    /// The first block at or after `from` any dirty txg mentions.
    fn next_mention(&self, from: u64) -> Option<u64> {
        let mut best: Option<u64> = None;
        let mut take = |b: u64| best = Some(best.map_or(b, |x| x.min(b)));
        for m in &self.txgs {
            if m.freed {
                take(from);
            }
            let i = m.blocks.partition_point(|&b| b < from);
            if let Some(&b) = m.blocks.get(i) {
                take(b);
            }
            for &(s, e) in &m.frees {
                if e > from {
                    take(s.max(from));
                }
            }
        }
        best
    }

    /// Dirty buffers at or after `from`, in increasing order (duplicates
    /// across txgs possible).
    fn dirty_blocks_from(&self, from: u64) -> Vec<u64> {
        let mut v: Vec<u64> = self.txgs.iter().flat_map(|m| m.blocks[m.blocks.partition_point(|&b| b < from)..].iter().copied()).collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

impl ObjectSet {
    /// The first block at or after `from` that holds data in the newest
    /// view (dirty buffers count), or None if there is none before the end
    /// of the object.
    pub fn next_data_block(&self, id: ObjectId, from: u64) -> Result<Option<u64>> {
        let (overlay, committed, nblocks) = self.seek_view(id)?;
        if from >= nblocks {
            return Ok(None);
        }
        let dirty = overlay.dirty_blocks_from(from).into_iter().find(|&b| overlay.view(b) == View::DirtyData);
        let mut found = None;
        let mut p = from;
        let _gate = self.shared.reader_gate.read();
        while let Some(c) = committed_next(self, &committed, p, true)? {
            if dirty.is_some_and(|d| d <= c) || c >= nblocks {
                break;
            }
            match overlay.view(c) {
                View::Committed | View::DirtyData => {
                    found = Some(c);
                    break;
                }
                // Every committed block up to the end of that free is hidden.
                View::DirtyHole(end) => {
                    if end == u64::MAX {
                        break;
                    }
                    p = end;
                }
            }
        }
        let best = match (dirty, found) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(best.filter(|&b| b < nblocks))
    }

    /// The first block at or after `from` that is a hole in the newest view
    /// (every block at or past the end of the object is one).
    pub fn next_hole_block(&self, id: ObjectId, from: u64) -> Result<u64> {
        let (overlay, committed, nblocks) = self.seek_view(id)?;
        let _gate = self.shared.reader_gate.read();
        let mut p = from;
        loop {
            if p >= nblocks {
                return Ok(p);
            }
            match overlay.view(p) {
                View::DirtyHole(_) => return Ok(p),
                View::DirtyData => p += 1,
                View::Committed => {
                    let hole = committed_next(self, &committed, p, false)?.unwrap_or(u64::MAX);
                    if hole == p {
                        return Ok(p);
                    }
                    let mention = p.checked_add(1).and_then(|q| overlay.next_mention(q)).unwrap_or(u64::MAX);
                    p = hole.min(mention);
                }
            }
        }
    }

    /// The dirty overlay, committed dnode and block count of `id`, taken
    /// together under the dnode lock.
    fn seek_view(&self, id: ObjectId) -> Result<(Overlay, DnodePhys, u64)> {
        let dn = self.dnode(id)?;
        let st = dn.st.lock();
        if !st.attrs().exists {
            return Err(ObjError::NotFound(id.0));
        }
        Ok((Overlay::of(&st), st.committed.clone(), st.nblocks()))
    }
}

/// In the committed tree `phys`: the first data block (`want_data`) or
/// hole at or after `from`. None: no data block at or after `from` (a hole
/// always exists past the tree's capacity).
fn committed_next(os: &ObjectSet, phys: &DnodePhys, from: u64, want_data: bool) -> Result<Option<u64>> {
    if !phys.in_use() || from >= phys.capacity() {
        return Ok(if want_data { None } else { Some(from) });
    }
    let top = phys.nlevels - 1;
    let s = span(top);
    for (i, bp) in phys.bps.iter().enumerate().take(NBPS) {
        let base = (i as u64).saturating_mul(s);
        if base.saturating_add(s) <= from {
            continue;
        }
        if let Some(b) = subtree_next(os, bp, top, base, from, want_data)? {
            return Ok(Some(b));
        }
    }
    Ok(if want_data { None } else { Some(phys.capacity().max(from)) })
}

fn subtree_next(os: &ObjectSet, bp: &BlockPtr, level: u8, base: u64, from: u64, want_data: bool) -> Result<Option<u64>> {
    if bp.is_hole() {
        return Ok((!want_data).then_some(base.max(from)));
    }
    if level == 0 {
        return Ok(want_data.then_some(base));
    }
    if !want_data && bp.fill >= span(level) {
        // Every block below is present: no hole here.
        return Ok(None);
    }
    let children = read_children(os.io(), bp)?;
    let cs = span(level - 1);
    for (j, c) in children.iter().enumerate() {
        let cb = base.saturating_add((j as u64).saturating_mul(cs));
        if cb.saturating_add(cs) <= from {
            continue;
        }
        if let Some(b) = subtree_next(os, c, level - 1, cb, from, want_data)? {
            return Ok(Some(b));
        }
    }
    Ok(None)
}
