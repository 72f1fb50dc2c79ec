//! Raidz: variable-width stripes, one full stripe per block.
//!
//! Geometry (N children, p parity, sector S = 1 << ashift, block of d data
//! sectors at vdev offset `offset`, s = offset / S):
//!
//! - The vdev address space is laid out row-major over the children:
//!   address sector `a` lives on child `a % N` at data-region sector `a / N`.
//! - The block's columns are address sectors s, s+1, ...: column c is on
//!   child `(s + c) % N` starting at child sector `(s + c) / N`, and a column
//!   of k sectors occupies k consecutive sectors of its child.
//! - rows = ceil(d / (N - p)); columns = p + d if rows == 1, else N. The
//!   first p columns are parity, each `rows` sectors long. Of the data
//!   columns, the first `d - (rows - 1)(N - p)` have `rows` sectors and the
//!   rest `rows - 1`; together the block covers address sectors
//!   `[s, s + rows·p + d)` exactly.
//! - Data fills the data columns column by column: data column 0 holds the
//!   first bytes of the block, then column 1, and so on.
//! - `alloc_size` rounds `rows·p + d` sectors up to a multiple of p + 1, so
//!   the allocator never leaves a gap too small for a one-sector block.
//! - Parity is computed over shards of `rows` sectors; shorter data columns
//!   are zero-padded in memory (the padding is not stored).

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub child: usize,
    /// Offset in the child's data region.
    pub child_offset: u64,
    pub len: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RaidzMap {
    pub parity: usize,
    /// Parity columns first, then data columns.
    pub columns: Vec<Column>,
    /// Length of a full column (rows × sector) = parity shard length.
    pub shard_len: usize,
}

impl RaidzMap {
    pub fn new(offset: u64, psize: u64, children: usize, parity: usize, ashift: u8) -> RaidzMap {
        let sector = 1u64 << ashift;
        let n = children as u64;
        let p = parity as u64;
        let s = offset >> ashift;
        let d = psize >> ashift;
        let data_cols = n - p;
        let rows = d.div_ceil(data_cols).max(1);
        let big = d - (rows - 1) * data_cols;
        let cols = if rows == 1 { p + d } else { n };
        let columns = (0..cols)
            .map(|c| {
                let sectors = if c < p || c - p < big { rows } else { rows - 1 };
                let a = s + c;
                Column { child: (a % n) as usize, child_offset: (a / n) * sector, len: (sectors * sector) as usize }
            })
            .collect();
        RaidzMap { parity, columns, shard_len: (rows * sector) as usize }
    }

    pub fn data_columns(&self) -> usize {
        self.columns.len() - self.parity
    }

    /// Index in the parity codec's shard order (data first, then parity)
    /// of column `c`.
    pub fn shard_of(&self, c: usize) -> usize {
        if c < self.parity {
            self.data_columns() + c
        } else {
            c - self.parity
        }
    }
}

/// Address-space bytes a block of `psize` consumes.
pub fn alloc_size(psize: u64, children: usize, parity: usize, ashift: u8) -> u64 {
    let d = psize >> ashift;
    let n = children as u64;
    let p = parity as u64;
    let rows = d.div_ceil(n - p).max(1);
    let total = rows * p + d;
    (total.div_ceil(p + 1) * (p + 1)) << ashift
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn columns_tile_the_allocation() {
        for n in 2..=8usize {
            for p in 1..=3usize.min(n - 1) {
                for d in 1..=40u64 {
                    let s = 13u64;
                    let map = RaidzMap::new(s << 9, d << 9, n, p, 9);
                    let mut sectors = vec![];
                    let mut data = 0;
                    for (c, col) in map.columns.iter().enumerate() {
                        let first = col.child_offset / 512 * n as u64 + col.child as u64;
                        for k in 0..(col.len / 512) as u64 {
                            sectors.push(first + k * n as u64);
                        }
                        if c >= p {
                            data += col.len;
                        }
                    }
                    sectors.sort();
                    let total = sectors.len() as u64;
                    assert_eq!(sectors, (s..s + total).collect::<Vec<_>>(), "n={n} p={p} d={d}");
                    assert_eq!(data as u64, d << 9);
                    let alloc = alloc_size(d << 9, n, p, 9) >> 9;
                    assert!(alloc >= total && alloc.is_multiple_of(p as u64 + 1) && alloc - total <= p as u64);
                    // children distinct
                    let mut kids: Vec<_> = map.columns.iter().map(|c| c.child).collect();
                    kids.sort();
                    kids.dedup();
                    assert_eq!(kids.len(), map.columns.len());
                }
            }
        }
    }
}
