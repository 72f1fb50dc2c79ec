//! Trim: telling the leaves which ranges of a top-level vdev hold nothing.
//!
//! The pool decides what is free (its allocator's free tree, never the
//! defer window, a checkpoint or anything allocated); this file maps a free
//! range of the vdev's address space to the leaf ranges that hold no byte
//! of any block, and issues the trims.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use crate::top::TopVdev;
use crate::{TopKind, VdevError};

impl TopVdev {
    /// Where the free vdev range `[offset, offset + len)` lies on the
    /// children: (slot, data-region offset, length). A disk or mirror has
    /// the same range on every slot. For raidz, vdev sector `a` is sector
    /// `a / N` of child `a % N` (a bijection, and a block's columns tile
    /// exactly the sectors it was allocated), so a range no block was
    /// allocated in maps to child ranges no block's column uses: at most
    /// one contiguous range per child. The range is cut to whole sectors.
    pub fn trim_ranges(&self, offset: u64, len: u64) -> Vec<(usize, u64, u64)> {
        let sector = self.sector();
        let first = offset.div_ceil(sector);
        let end = offset.saturating_add(len).min(self.asize()) / sector;
        if end <= first {
            return vec![];
        }
        match *self.kind() {
            TopKind::Hole => vec![],
            TopKind::Disk | TopKind::Mirror => {
                (0..self.slots().len()).map(|s| (s, first * sector, (end - first) * sector)).collect()
            }
            TopKind::Raidz { .. } => {
                let n = self.slots().len() as u64;
                let mut out = Vec::new();
                for c in 0..n {
                    let a0 = first + (c + n - first % n) % n;
                    if a0 >= end {
                        continue;
                    }
                    let a_last = a0 + (end - 1 - a0) / n * n;
                    let (r0, r1) = (a0 / n, a_last / n);
                    out.push((c as usize, r0 * sector, (r1 - r0 + 1) * sector));
                }
                out
            }
        }
    }

    /// Trims the free vdev range `[offset, offset + len)` on every leaf in
    /// service (all leaves of a slot hold the same bytes), or only on the
    /// leaves whose guid is in `only`. The caller guarantees that no block
    /// lives in the range and none is allocated there until this returns.
    /// Returns the bytes trimmed per leaf guid and the first error, if any.
    pub fn trim(&self, offset: u64, len: u64, only: Option<&[u64]>) -> (Vec<(u64, u64)>, Option<VdevError>) {
        let mut done: Vec<(u64, u64)> = Vec::new();
        let mut first_error = None;
        for (slot, child_offset, child_len) in self.trim_ranges(offset, len) {
            for leaf in self.slots().get(slot).into_iter().flatten() {
                if !leaf.usable() || only.is_some_and(|o| !o.contains(&leaf.guid)) {
                    continue;
                }
                match leaf.trim(child_offset, child_len) {
                    Ok(()) => match done.iter_mut().find(|(g, _)| *g == leaf.guid) {
                        Some((_, n)) => *n += child_len,
                        None => done.push((leaf.guid, child_len)),
                    },
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        (done, first_error)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::raidz::RaidzMap;
    use crate::{LeafConfig, TopConfig};
    use std::sync::Arc;
    use tarn_dev::Device;

    fn raidz(n: usize, p: u8) -> TopVdev {
        let children: Vec<LeafConfig> = (0..n).map(|i| LeafConfig::new(i as u64 + 1, format!("d{i}"))).collect();
        let cfg = TopConfig { class: Default::default(), id: 0, guid: 9, kind: TopKind::Raidz { parity: p }, ashift: 9, asize: 512 * 4096, children };
        let devs = (0..n).map(|i| Some(tarn_dev::MemDevice::new(&format!("d{i}"), 8 << 20) as Arc<dyn Device>)).collect();
        TopVdev::new(cfg, devs).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The child ranges of a free vdev range are exactly the child sectors
    /// of vdev sectors in the range: a block allocated right before and
    /// right after it never has a column inside them.
    #[test]
    fn raidz_trim_ranges_are_the_free_sectors_and_nothing_else() {
        for n in 2..=7usize {
            for p in 1..=3u8.min(n as u8 - 1) {
                let top = raidz(n, p);
                for (first, count) in [(0u64, 1u64), (3, 2), (5, 17), (11, 40), (1, 3)] {
                    let ranges = top.trim_ranges(first * 512, count * 512);
                    let mut got: Vec<(usize, u64)> = Vec::new();
                    for (c, off, len) in &ranges {
                        for k in 0..len / 512 {
                            got.push((*c, off / 512 + k));
                        }
                    }
                    got.sort();
                    let mut want: Vec<(usize, u64)> = (first..first + count).map(|a| ((a % n as u64) as usize, a / n as u64)).collect();
                    want.sort();
                    assert_eq!(got, want, "n={n} p={p} first={first} count={count}");
                    // Blocks ending at `first` and starting at `first + count`
                    // never touch those child sectors.
                    for d in 1..=6u64 {
                        let alloc = top.alloc_size(d * 512) / 512;
                        for start in [first.saturating_sub(alloc), first + count] {
                            if start + alloc > first && start < first + count {
                                continue;
                            }
                            let map = RaidzMap::new(start * 512, d * 512, n, usize::from(p), 9);
                            for col in &map.columns {
                                for k in 0..col.len as u64 / 512 {
                                    let cell = (col.child, col.child_offset / 512 + k);
                                    assert!(!got.contains(&cell), "n={n} p={p} block at {start} d={d} column in trimmed {cell:?}");
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn mirror_trims_the_same_range_on_every_side() {
        let children: Vec<LeafConfig> = (0..3).map(|i| LeafConfig::new(i + 1, format!("d{i}"))).collect();
        let cfg = TopConfig { class: Default::default(), id: 0, guid: 9, kind: TopKind::Mirror, ashift: 12, asize: 1 << 20, children };
        let mems: Vec<Arc<tarn_dev::MemDevice>> = (0..3).map(|i| tarn_dev::MemDevice::new(&format!("d{i}"), 8 << 20)).collect();
        let top = TopVdev::new(cfg, mems.iter().map(|m| Some(m.clone() as Arc<dyn Device>)).collect()).unwrap_or_else(|e| panic!("{e}"));
        let data = vec![9u8; 65536];
        top.write(0, &data, 5).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(top.trim_ranges(100, 9000), vec![(0, 4096, 4096), (1, 4096, 4096), (2, 4096, 4096)]);
        let (done, err) = top.trim(0, 16384, Some(&[2]));
        assert!(err.is_none());
        assert_eq!(done, vec![(2, 16384)], "one side only");
        let mut buf = vec![0u8; 4096];
        mems[1].read_at(&mut buf, crate::DATA_START).unwrap_or_else(|e| panic!("{e}"));
        assert!(buf.iter().all(|&b| b == 0), "the named side is trimmed");
        mems[0].read_at(&mut buf, crate::DATA_START).unwrap_or_else(|e| panic!("{e}"));
        assert!(buf.iter().all(|&b| b == 9), "the other sides are not");
    }
}

