//! Space allocation: per top-level vdev, a tree of free extents.
//!
//! Invariants:
//! - Every allocation and free made while syncing txg T is appended to the
//!   txg's record list, which the space map log persists with txg T.
//! - A free made in txg F goes to `deferred[F]` and returns to the free tree
//!   only after txg F + DEFER_TXGS has synced, so the trees of the last
//!   DEFER_TXGS uberblocks stay intact on disk (rewind with `import -F`).
//! - An extent is in exactly one of: free tree, deferred list, allocated.
//!
//! Placement: data fills each vdev from the front (first fit after a
//! cursor), metadata from the back (last fit before a cursor of its own).
//! Kept apart, the 16 KiB-128 KiB metadata blocks that every txg rewrites
//! free room of their own size as they move; mixed with small data blocks
//! they would find only the 4 KiB holes that deleting small files leaves
//! on a full pool, and a txg could fail for want of a contiguous extent
//! with megabytes free.

use std::collections::BTreeMap;

pub const DEFER_TXGS: u64 = 4;

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Extent {
    pub vdev: u32,
    pub offset: u64,
    pub len: u64,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RecordKind {
    Alloc,
    /// Freed in the given txg.
    Free(u64),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub kind: RecordKind,
    pub extent: Extent,
}

#[derive(Clone, Debug)]
pub struct VdevSpace {
    pub asize: u64,
    /// start -> length
    free: BTreeMap<u64, u64>,
    pub free_bytes: u64,
    cursor: u64,
    /// Metadata is placed at or below this (it moves down).
    meta_cursor: u64,
}

impl VdevSpace {
    pub fn new(asize: u64) -> VdevSpace {
        let mut free = BTreeMap::new();
        if asize > 0 {
            free.insert(0, asize);
        }
        VdevSpace { asize, free, free_bytes: asize, cursor: 0, meta_cursor: asize }
    }

    /// First fit at or after the cursor, wrapping once.
    fn alloc(&mut self, len: u64, align: u64) -> Option<u64> {
        let pick = |free: &BTreeMap<u64, u64>, from: u64| -> Option<u64> {
            // An extent starting before `from` may still cover it.
            let before = free.range(..from).next_back().map(|(&s, &l)| (s, l));
            let candidates = before.into_iter().chain(free.range(from..).map(|(&s, &l)| (s, l)));
            for (s, l) in candidates {
                let start = round_up(s.max(from), align);
                if start + len <= s + l {
                    return Some(start);
                }
            }
            None
        };
        let start = pick(&self.free, self.cursor).or_else(|| pick(&self.free, 0))?;
        self.remove_free(start, len);
        self.cursor = start + len;
        Some(start)
    }

    /// Last fit ending at or below the metadata cursor, wrapping once.
    fn alloc_back(&mut self, len: u64, align: u64) -> Option<u64> {
        let pick = |free: &BTreeMap<u64, u64>, below: u64| -> Option<u64> {
            for (&s, &l) in free.range(..below).rev() {
                let end = (s + l).min(below);
                if end < len {
                    continue;
                }
                let start = (end - len) / align * align;
                if start >= s {
                    return Some(start);
                }
            }
            None
        };
        let start = pick(&self.free, self.meta_cursor).or_else(|| pick(&self.free, self.asize))?;
        self.remove_free(start, len);
        self.meta_cursor = start;
        Some(start)
    }

    /// Remove [start, start+len) from the free tree. Returns false if any of
    /// it was not free (the caller treats that as corruption).
    pub fn remove_free(&mut self, start: u64, len: u64) -> bool {
        let Some(end) = start.checked_add(len).filter(|&e| e <= self.asize) else { return false };
        let Some((&s, &l)) = self.free.range(..=start).next_back() else { return false };
        if s + l < end {
            return false;
        }
        self.free.remove(&s);
        if s < start {
            self.free.insert(s, start - s);
        }
        if start + len < s + l {
            self.free.insert(start + len, s + l - (start + len));
        }
        self.free_bytes -= len;
        true
    }

    /// Add [start, start+len) to the free tree, merging neighbours. Returns
    /// false (and changes nothing) if it overlaps free space: a double free.
    pub fn add_free(&mut self, start: u64, len: u64) -> bool {
        if start.checked_add(len).is_none_or(|end| end > self.asize) {
            return false;
        }
        let mut new_start = start;
        let mut new_len = len;
        if let Some((&s, &l)) = self.free.range(..=start).next_back() {
            if s + l > start {
                return false;
            }
            if s + l == start {
                new_start = s;
                new_len += l;
            }
        }
        if let Some((&s, &l)) = self.free.range(start..).next() {
            if s < start + len {
                return false;
            }
            if s == start + len {
                self.free.remove(&s);
                new_len += l;
            }
        }
        if new_start != start {
            self.free.remove(&new_start);
        }
        self.free.insert(new_start, new_len);
        self.free_bytes += len;
        true
    }

    pub fn free_extents(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.free.iter().map(|(&s, &l)| (s, l))
    }

    pub fn extent_count(&self) -> usize {
        self.free.len()
    }
}

fn round_up(x: u64, align: u64) -> u64 {
    x.div_ceil(align) * align
}

#[derive(Clone, Debug)]
pub struct Allocator {
    pub vdevs: Vec<VdevSpace>,
    pub deferred: BTreeMap<u64, Vec<Extent>>,
    /// Records of the txg being synced.
    pub records: Vec<Record>,
    rotor: usize,
    rotor_bytes: u64,
}

/// Bytes written to one top-level vdev before the rotor moves on.
const ROTOR_CHUNK: u64 = 1 << 20;

impl Allocator {
    pub fn new(asizes: &[u64]) -> Allocator {
        Allocator {
            vdevs: asizes.iter().map(|&a| VdevSpace::new(a)).collect(),
            deferred: BTreeMap::new(),
            records: Vec::new(),
            rotor: 0,
            rotor_bytes: 0,
        }
    }

    /// Space of a newly added top-level vdev (the next id).
    pub fn add_vdev(&mut self, asize: u64) {
        self.vdevs.push(VdevSpace::new(asize));
    }

    /// Allocate `len` bytes (per vdev, computed by `len_for`) on a vdev not
    /// in `avoid` if possible; `metadata` blocks are placed from the back
    /// (see the module doc). Returns (vdev, offset, len).
    pub fn alloc(&mut self, len_for: &dyn Fn(usize) -> u64, align_for: &dyn Fn(usize) -> u64, avoid: &[u32], metadata: bool) -> Option<Extent> {
        let n = self.vdevs.len();
        if n == 0 {
            return None;
        }
        for pass in 0..2 {
            for i in 0..n {
                let v = (self.rotor + i) % n;
                if pass == 0 && avoid.contains(&(v as u32)) {
                    continue;
                }
                let len = len_for(v);
                let vs = &mut self.vdevs[v];
                let placed = if metadata { vs.alloc_back(len, align_for(v)) } else { vs.alloc(len, align_for(v)) };
                if let Some(off) = placed {
                    let e = Extent { vdev: v as u32, offset: off, len };
                    self.records.push(Record { kind: RecordKind::Alloc, extent: e });
                    if v == self.rotor {
                        self.rotor_bytes += len;
                        if self.rotor_bytes >= ROTOR_CHUNK {
                            self.rotor = (self.rotor + 1) % n;
                            self.rotor_bytes = 0;
                        }
                    }
                    return Some(e);
                }
            }
        }
        None
    }

    /// Free an extent in txg `txg`: recorded now, reusable after DEFER_TXGS.
    pub fn free(&mut self, e: Extent, txg: u64) {
        self.records.push(Record { kind: RecordKind::Free(txg), extent: e });
        self.deferred.entry(txg).or_default().push(e);
    }

    /// Called after txg `synced` is on disk: release frees that are old enough.
    pub fn release_deferred(&mut self, synced: u64) {
        let keep_from = synced.saturating_sub(DEFER_TXGS) + 1;
        let old: Vec<u64> = self.deferred.range(..keep_from).map(|(&t, _)| t).collect();
        for t in old {
            for e in self.deferred.remove(&t).unwrap_or_default() {
                if let Some(v) = self.vdevs.get_mut(e.vdev as usize) {
                    v.add_free(e.offset, e.len);
                }
            }
        }
    }

    /// Replay one persisted record at import of uberblock txg `ub_txg`.
    pub fn replay(&mut self, r: &Record, ub_txg: u64) -> Result<(), String> {
        let v = self
            .vdevs
            .get_mut(r.extent.vdev as usize)
            .ok_or_else(|| format!("space map names vdev {}", r.extent.vdev))?;
        match r.kind {
            RecordKind::Alloc => {
                if !v.remove_free(r.extent.offset, r.extent.len) {
                    return Err(format!("space map allocates {:?} twice", r.extent));
                }
            }
            RecordKind::Free(txg) => {
                if r.extent.offset.checked_add(r.extent.len).is_none_or(|end| end > v.asize) {
                    return Err(format!("space map frees {:?} past the end of the vdev", r.extent));
                }
                if txg.saturating_add(DEFER_TXGS) > ub_txg {
                    self.deferred.entry(txg).or_default().push(r.extent);
                } else if !v.add_free(r.extent.offset, r.extent.len) {
                    return Err(format!("space map frees {:?} twice", r.extent));
                }
            }
        }
        Ok(())
    }

    pub fn take_records(&mut self) -> Vec<Record> {
        std::mem::take(&mut self.records)
    }

    pub fn free_bytes(&self) -> u64 {
        self.vdevs.iter().map(|v| v.free_bytes).sum()
    }

    pub fn total_bytes(&self) -> u64 {
        self.vdevs.iter().map(|v| v.asize).sum()
    }

    pub fn deferred_bytes(&self) -> u64 {
        self.deferred.values().flatten().map(|e| e.len).sum()
    }

    /// Allocated extents (deferred frees count as allocated) of every vdev.
    pub fn allocated_extents(&self) -> Vec<Extent> {
        let mut out = Vec::new();
        for (i, v) in self.vdevs.iter().enumerate() {
            let mut pos = 0;
            for (s, l) in v.free_extents() {
                if s > pos {
                    out.push(Extent { vdev: i as u32, offset: pos, len: s - pos });
                }
                pos = s + l;
            }
            if pos < v.asize {
                out.push(Extent { vdev: i as u32, offset: pos, len: v.asize - pos });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn alloc_free_defer_merge() {
        let mut a = Allocator::new(&[1 << 20, 1 << 20]);
        let e1 = a.alloc(&|_| 4096, &|_| 4096, &[], false).unwrap();
        let e2 = a.alloc(&|_| 4096, &|_| 4096, &[e1.vdev], false).unwrap();
        assert_ne!(e1.vdev, e2.vdev);
        assert_eq!(a.free_bytes(), (2 << 20) - 8192);
        a.free(e1, 10);
        a.release_deferred(12);
        assert_eq!(a.free_bytes(), (2 << 20) - 8192);
        a.release_deferred(10 + DEFER_TXGS);
        assert_eq!(a.free_bytes(), (2 << 20) - 4096);
        assert!(!a.vdevs[e1.vdev as usize].add_free(e1.offset, e1.len), "double free refused");
        assert_eq!(a.vdevs[e1.vdev as usize].extent_count(), 1, "merged back");
    }

    #[test]
    fn metadata_fills_from_the_back_data_from_the_front() {
        let mut a = Allocator::new(&[1 << 20]);
        let d = a.alloc(&|_| 4096, &|_| 4096, &[], false).unwrap();
        let m = a.alloc(&|_| 16384, &|_| 4096, &[], true).unwrap();
        assert_eq!(d.offset, 0);
        assert_eq!(m.offset, (1 << 20) - 16384);
        let m2 = a.alloc(&|_| 8192, &|_| 4096, &[], true).unwrap();
        assert_eq!(m2.offset, (1 << 20) - 16384 - 8192, "metadata packs downwards");
        // A freed metadata block's room is found again by metadata.
        a.free(m, 1);
        a.release_deferred(1 + DEFER_TXGS);
        let m3 = a.alloc(&|_| 16384, &|_| 4096, &[], true).unwrap();
        assert_eq!(m3.offset, m.offset);
        // Both kinds use the whole vdev when the other end is full.
        let mut b = Allocator::new(&[64 << 10]);
        for _ in 0..16 {
            assert!(b.alloc(&|_| 4096, &|_| 4096, &[], true).is_some());
        }
        assert!(b.alloc(&|_| 4096, &|_| 4096, &[], false).is_none());
    }
}
