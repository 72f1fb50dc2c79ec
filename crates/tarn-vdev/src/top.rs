//! Top-level vdevs: one disk, an n-way mirror, or raidz1/2/3.
//!
//! Reads take a `verify` closure (the block checksum). A copy or column
//! that fails I/O counts a read error on its leaf; one that returns bad data
//! counts a checksum error; both are rewritten with the good data once the
//! block has been recovered (`repaired_bytes`).
//!
//! Raidz reads fetch the data columns only. On an I/O error the missing
//! columns are rebuilt from parity; when verify fails and no column is known
//! bad, every combination of 1..=p columns (data or parity) is assumed bad
//! in turn, rebuilt and verified: the first combination that verifies
//! names the bad columns. Nothing verifying is `Unrecoverable`, never
//! wrong data.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tarn_dev::Device;

use crate::leaf::{DevState, LeafStatus, LeafVdev};
use crate::parity::{codec_for, ParityCodec};
use crate::raidz::{alloc_size, RaidzMap};
use crate::threads::par_map;
use crate::{data_region_size, Result, TopConfig, TopKind, VdevError};

pub const ASHIFT_MIN: u8 = 9;
pub const ASHIFT_MAX: u8 = 16;
pub const RAIDZ_PARITY_MAX: u8 = 3;

pub struct ReadOutcome {
    pub data: Vec<u8>,
    pub repaired_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopStatus {
    pub name: String,
    pub state: DevState,
    pub children: Vec<LeafStatus>,
}

pub struct TopVdev {
    config: TopConfig,
    leaves: Vec<Arc<LeafVdev>>,
    /// Raidz only.
    codec: Option<Arc<dyn ParityCodec>>,
    /// Mirror read rotation.
    next_child: AtomicUsize,
}

type Verify<'a> = &'a (dyn Fn(&[u8]) -> bool + Sync);

fn validate_width(kind: &TopKind, children: usize) -> Result<()> {
    let (name, need) = match kind {
        TopKind::Disk => ("disk", 1),
        TopKind::Mirror => ("mirror", 2),
        TopKind::Raidz { parity } => {
            if *parity == 0 || *parity > RAIDZ_PARITY_MAX {
                return Err(VdevError::Invalid(format!("raidz parity {parity} (supported: 1..={RAIDZ_PARITY_MAX})")));
            }
            ("raidz", usize::from(*parity) + 1)
        }
    };
    if children < need {
        return Err(VdevError::NotEnoughDevices { kind: name.into(), need, have: children });
    }
    if matches!(kind, TopKind::Disk) && children != 1 {
        return Err(VdevError::Invalid(format!("a disk vdev has exactly one device, got {children}")));
    }
    if children > 255 {
        return Err(VdevError::Invalid(format!("{children} children: at most 255")));
    }
    Ok(())
}

impl TopVdev {
    /// Allocatable bytes of a vdev of this kind over devices of these sizes.
    pub fn compute_asize(kind: &TopKind, ashift: u8, dev_sizes: &[u64]) -> Result<u64> {
        validate_width(kind, dev_sizes.len())?;
        if !(ASHIFT_MIN..=ASHIFT_MAX).contains(&ashift) {
            return Err(VdevError::Invalid(format!("ashift {ashift} (supported: {ASHIFT_MIN}..={ASHIFT_MAX})")));
        }
        let sector = 1u64 << ashift;
        let min = dev_sizes.iter().map(|&s| data_region_size(s)).min().unwrap_or(0) / sector * sector;
        if min == 0 {
            return Err(VdevError::Invalid("a device is too small to hold labels and data".into()));
        }
        Ok(match kind {
            TopKind::Disk | TopKind::Mirror => min,
            TopKind::Raidz { .. } => min * dev_sizes.len() as u64,
        })
    }

    /// `devs[i]` is the device of `cfg.children[i]`, or None if missing.
    pub fn new(cfg: TopConfig, devs: Vec<Option<Arc<dyn Device>>>) -> Result<TopVdev> {
        validate_width(&cfg.kind, cfg.children.len())?;
        if devs.len() != cfg.children.len() {
            return Err(VdevError::Invalid(format!(
                "top vdev {} lists {} children but {} devices were given",
                cfg.id,
                cfg.children.len(),
                devs.len()
            )));
        }
        let present: Vec<u64> = devs.iter().flatten().map(|d| d.size()).collect();
        let sizes: Vec<u64> = if present.is_empty() { vec![u64::MAX; devs.len()] } else { present };
        let padded: Vec<u64> = sizes.iter().copied().chain(std::iter::repeat(u64::MAX)).take(devs.len()).collect();
        let available = TopVdev::compute_asize(&cfg.kind, cfg.ashift, &padded)?;
        if cfg.asize == 0 || cfg.asize > available || !cfg.asize.is_multiple_of(1u64 << cfg.ashift) {
            return Err(VdevError::Invalid(format!(
                "top vdev {}: asize {} does not fit the devices (at most {available}, multiple of the sector)",
                cfg.id, cfg.asize
            )));
        }
        let leaves = cfg
            .children
            .iter()
            .zip(devs)
            .map(|(c, d)| Arc::new(LeafVdev::new(c.guid, c.path.clone(), d)))
            .collect();
        let codec = match cfg.kind {
            TopKind::Raidz { parity } => Some(codec_for(usize::from(parity))),
            _ => None,
        };
        Ok(TopVdev { config: cfg, leaves, codec, next_child: AtomicUsize::new(0) })
    }

    pub fn config(&self) -> &TopConfig {
        &self.config
    }
    pub fn asize(&self) -> u64 {
        self.config.asize
    }
    pub fn sector(&self) -> u64 {
        1 << self.config.ashift
    }
    pub fn leaves(&self) -> &[Arc<LeafVdev>] {
        &self.leaves
    }

    fn parity(&self) -> usize {
        match self.config.kind {
            TopKind::Raidz { parity } => usize::from(parity),
            _ => 0,
        }
    }

    /// How many children may fail while the vdev still serves.
    fn redundancy(&self) -> usize {
        match self.config.kind {
            TopKind::Disk => 0,
            TopKind::Mirror => self.leaves.len() - 1,
            TopKind::Raidz { parity } => usize::from(parity),
        }
    }

    pub fn alloc_size(&self, psize: u64) -> u64 {
        match self.config.kind {
            TopKind::Disk | TopKind::Mirror => psize,
            TopKind::Raidz { parity } => alloc_size(psize, self.leaves.len(), usize::from(parity), self.config.ashift),
        }
    }

    fn check_io(&self, offset: u64, psize: u64) -> Result<()> {
        let sector = self.sector();
        let fits = offset.checked_add(self.alloc_size(psize)).is_some_and(|end| end <= self.asize());
        if psize == 0 || !psize.is_multiple_of(sector) || !offset.is_multiple_of(sector) || !fits {
            return Err(VdevError::Invalid(format!(
                "I/O [{offset}, +{psize}) on top vdev {}: must be non-empty, {sector}-aligned and inside {} bytes",
                self.config.id,
                self.asize()
            )));
        }
        Ok(())
    }

    fn tolerate(&self, what: &str, failed: usize, children: usize) -> Result<()> {
        let tolerated = self.redundancy();
        if failed > tolerated {
            return Err(VdevError::TooManyFailures { what: what.into(), failed, children, tolerated });
        }
        Ok(())
    }

    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check_io(offset, data.len() as u64)?;
        match self.config.kind {
            TopKind::Disk | TopKind::Mirror => {
                let results = par_map(&self.leaves, |leaf| leaf.write(data, offset));
                let failed = results.iter().filter(|r| r.is_err()).count();
                self.tolerate(&format!("write at {offset}"), failed, self.leaves.len())
            }
            TopKind::Raidz { .. } => self.raidz_write(offset, data),
        }
    }

    pub fn read(&self, offset: u64, psize: u64, verify: Verify) -> Result<ReadOutcome> {
        self.check_io(offset, psize)?;
        match self.config.kind {
            TopKind::Disk | TopKind::Mirror => self.mirror_read(offset, psize, verify),
            TopKind::Raidz { .. } => self.raidz_read(offset, psize, verify),
        }
    }

    /// Like [`TopVdev::read`], but checks every copy: all mirror children,
    /// and for raidz the parity columns too (recomputed from the verified
    /// data). Every bad copy or column is counted and rewritten. This is the
    /// per-block step of a scrub; plain reads only look at parity when the
    /// data fails.
    pub fn scrub(&self, offset: u64, psize: u64, verify: Verify) -> Result<ReadOutcome> {
        self.check_io(offset, psize)?;
        match self.config.kind {
            TopKind::Disk | TopKind::Mirror => self.mirror_scrub(offset, psize, verify),
            TopKind::Raidz { .. } => self.raidz_scrub(offset, psize, verify),
        }
    }

    pub fn flush(&self) -> Result<()> {
        let results = par_map(&self.leaves, |leaf| leaf.flush());
        let failed = results.iter().filter(|r| r.is_err()).count();
        self.tolerate("flush", failed, self.leaves.len())
    }

    pub fn state(&self) -> DevState {
        let bad = self.leaves.iter().filter(|l| !l.state().usable()).count();
        if bad == 0 {
            DevState::Online
        } else if bad <= self.redundancy() {
            DevState::Degraded
        } else {
            DevState::Unavail
        }
    }

    pub fn status(&self) -> TopStatus {
        let name = match self.config.kind {
            TopKind::Disk => self.leaves.first().map_or_else(String::new, |l| l.path.clone()),
            TopKind::Mirror => format!("mirror-{}", self.config.id),
            TopKind::Raidz { parity } => format!("raidz{parity}-{}", self.config.id),
        };
        TopStatus { name, state: self.state(), children: self.leaves.iter().map(|l| l.status()).collect() }
    }

    pub fn clear_errors(&self) {
        self.leaves.iter().for_each(|l| l.clear_errors());
    }

    // ---- mirror / disk ----

    fn mirror_read(&self, offset: u64, psize: u64, verify: Verify) -> Result<ReadOutcome> {
        let n = self.leaves.len();
        let start = self.next_child.fetch_add(1, Ordering::Relaxed) % n;
        let mut bad: Vec<&Arc<LeafVdev>> = vec![];
        let mut last_io_error = None;
        for leaf in (0..n).filter_map(|i| self.leaves.get((start + i) % n)) {
            match leaf.read_vec(psize as usize, offset) {
                Err(e) => {
                    last_io_error = Some(e);
                    bad.push(leaf);
                }
                Ok(data) if !verify(&data) => {
                    leaf.note_checksum_error();
                    bad.push(leaf);
                }
                Ok(data) => {
                    let repaired: u64 = par_map(&bad, |b| b.write(&data, offset).is_ok())
                        .into_iter()
                        .filter(|&ok| ok)
                        .map(|_| psize)
                        .sum();
                    return Ok(ReadOutcome { data, repaired_bytes: repaired });
                }
            }
        }
        match (n, last_io_error) {
            // A single disk that failed I/O: report the device error itself.
            (1, Some(e)) => Err(e),
            _ => Err(VdevError::Unrecoverable { offset, psize }),
        }
    }

    fn mirror_scrub(&self, offset: u64, psize: u64, verify: Verify) -> Result<ReadOutcome> {
        let copies = par_map(&self.leaves, |leaf| leaf.read_vec(psize as usize, offset).ok());
        let mut good: Option<Vec<u8>> = None;
        let mut bad = vec![];
        for (leaf, copy) in self.leaves.iter().zip(copies) {
            match copy {
                None => bad.push(leaf),
                Some(data) if !verify(&data) => {
                    leaf.note_checksum_error();
                    bad.push(leaf);
                }
                Some(data) => {
                    good.get_or_insert(data);
                }
            }
        }
        let Some(data) = good else { return Err(VdevError::Unrecoverable { offset, psize }) };
        let repaired = par_map(&bad, |b| b.write(&data, offset).is_ok()).into_iter().filter(|&ok| ok).count();
        Ok(ReadOutcome { data, repaired_bytes: repaired as u64 * psize })
    }

    fn raidz_scrub(&self, offset: u64, psize: u64, verify: Verify) -> Result<ReadOutcome> {
        let mut outcome = self.raidz_read(offset, psize, verify)?;
        let map = self.map(offset, psize);
        let shards = self.encode(&map, &outcome.data)?;
        let parity_cols: Vec<usize> = (0..map.parity).collect();
        let found = self.read_columns(&map, &parity_cols);
        let fixes = par_map(&parity_cols, |&c| {
            let expected = Self::column_bytes(&map, &shards, c);
            let col = map.columns.get(c)?;
            let leaf = self.leaves.get(col.child)?;
            match found.get(c) {
                Some(Some(got)) if got.as_slice() == expected => return None,
                Some(Some(_)) => leaf.note_checksum_error(),
                _ => {} // the read error is already counted
            }
            leaf.write(expected, col.child_offset).ok().map(|_| expected.len() as u64)
        });
        outcome.repaired_bytes += fixes.into_iter().flatten().sum::<u64>();
        Ok(outcome)
    }

    // ---- raidz ----

    fn codec(&self) -> Result<&Arc<dyn ParityCodec>> {
        self.codec.as_ref().ok_or_else(|| VdevError::Invalid("raidz vdev without a parity codec".into()))
    }

    fn map(&self, offset: u64, psize: u64) -> RaidzMap {
        RaidzMap::new(offset, psize, self.leaves.len(), self.parity(), self.config.ashift)
    }

    fn leaf(&self, child: usize) -> Result<&Arc<LeafVdev>> {
        self.leaves.get(child).ok_or_else(|| VdevError::Invalid(format!("raidz child {child} out of range")))
    }

    /// Splits `data` into zero-padded data shards and computes parity:
    /// returns all shards in codec order (data, then parity).
    fn encode(&self, map: &RaidzMap, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut shards = Vec::with_capacity(map.columns.len());
        let mut at = 0usize;
        for col in map.columns.iter().skip(map.parity) {
            let mut shard = vec![0u8; map.shard_len];
            let src = data.get(at..at + col.len).ok_or_else(|| VdevError::Invalid("raidz data too short".into()))?;
            if let Some(dst) = shard.get_mut(..col.len) {
                dst.copy_from_slice(src);
            }
            shards.push(shard);
            at += col.len;
        }
        let mut parity = vec![vec![0u8; map.shard_len]; map.parity];
        {
            let refs: Vec<&[u8]> = shards.iter().map(Vec::as_slice).collect();
            self.codec()?.encode(&refs, &mut parity).map_err(VdevError::Invalid)?;
        }
        shards.extend(parity);
        Ok(shards)
    }

    /// The bytes column `c` stores, from shards in codec order.
    fn column_bytes<'a>(map: &RaidzMap, shards: &'a [Vec<u8>], c: usize) -> &'a [u8] {
        let len = map.columns.get(c).map_or(0, |col| col.len);
        shards.get(map.shard_of(c)).and_then(|s| s.get(..len)).unwrap_or(&[])
    }

    fn raidz_write(&self, offset: u64, data: &[u8]) -> Result<()> {
        let map = self.map(offset, data.len() as u64);
        let shards = self.encode(&map, data)?;
        let columns: Vec<usize> = (0..map.columns.len()).collect();
        let results = par_map(&columns, |&c| {
            let col = map.columns.get(c).ok_or_else(|| VdevError::Invalid("column".into()))?;
            self.leaf(col.child)?.write(Self::column_bytes(&map, &shards, c), col.child_offset)
        });
        let failed = results.iter().filter(|r| r.is_err()).count();
        self.tolerate(&format!("raidz write at {offset}"), failed, map.columns.len())
    }

    fn read_columns(&self, map: &RaidzMap, which: &[usize]) -> Vec<Option<Vec<u8>>> {
        par_map(which, |&c| {
            let col = map.columns.get(c)?;
            self.leaves.get(col.child)?.read_vec(col.len, col.child_offset).ok()
        })
    }

    fn raidz_read(&self, offset: u64, psize: u64, verify: Verify) -> Result<ReadOutcome> {
        let map = self.map(offset, psize);
        let ncols = map.columns.len();
        let p = map.parity;
        let data_cols: Vec<usize> = (p..ncols).collect();
        // Column contents as read; None = I/O error.
        let mut cols: Vec<Option<Vec<u8>>> = vec![None; ncols];
        for (c, got) in data_cols.iter().zip(self.read_columns(&map, &data_cols)) {
            if let Some(slot) = cols.get_mut(*c) {
                *slot = got;
            }
        }
        let data_complete = cols.iter().skip(p).all(Option::is_some);
        if data_complete {
            let mut data = Vec::with_capacity(psize as usize);
            for col in cols.iter().skip(p).flatten() {
                data.extend_from_slice(col);
            }
            if verify(&data) {
                return Ok(ReadOutcome { data, repaired_bytes: 0 });
            }
        }
        // Slow path: fetch parity and reconstruct.
        let parity_cols: Vec<usize> = (0..p).collect();
        for (c, got) in parity_cols.iter().zip(self.read_columns(&map, &parity_cols)) {
            if let Some(slot) = cols.get_mut(*c) {
                *slot = got;
            }
        }
        let io_bad: Vec<usize> = (0..ncols).filter(|&c| cols.get(c).is_some_and(Option::is_none)).collect();
        if io_bad.len() > p {
            return Err(VdevError::Unrecoverable { offset, psize });
        }
        let candidates: Vec<usize> = (0..ncols).filter(|c| !io_bad.contains(c)).collect();
        // Shards as read (codec order, padded); missing ones zero.
        let mut base = vec![vec![0u8; map.shard_len]; ncols];
        for (c, col) in cols.iter().enumerate() {
            if let (Some(bytes), Some(shard)) = (col, base.get_mut(map.shard_of(c))) {
                if let Some(dst) = shard.get_mut(..bytes.len()) {
                    dst.copy_from_slice(bytes);
                }
            }
        }
        let codec = self.codec()?;
        for k in 0..=(p - io_bad.len()) {
            for extra in combinations(&candidates, k) {
                let erased: Vec<usize> = io_bad.iter().chain(extra.iter()).copied().collect();
                if erased.is_empty() || (data_complete && erased.iter().all(|&c| c < p)) {
                    continue; // the data as read already failed verification
                }
                let mut shards = base.clone();
                let mut present = vec![true; ncols];
                for &c in &erased {
                    if let Some(flag) = present.get_mut(map.shard_of(c)) {
                        *flag = false;
                    }
                }
                if codec.reconstruct(&mut shards, &present, map.data_columns()).is_err() {
                    continue;
                }
                let mut data = Vec::with_capacity(psize as usize);
                for c in p..ncols {
                    data.extend_from_slice(Self::column_bytes(&map, &shards, c));
                }
                if !verify(&data) {
                    continue;
                }
                for &c in &extra {
                    if let Some(col) = map.columns.get(c) {
                        self.leaf(col.child)?.note_checksum_error();
                    }
                }
                let repaired = par_map(&erased, |&c| {
                    let col = map.columns.get(c)?;
                    let bytes = Self::column_bytes(&map, &shards, c);
                    self.leaves.get(col.child)?.write(bytes, col.child_offset).ok().map(|_| bytes.len() as u64)
                });
                return Ok(ReadOutcome { data, repaired_bytes: repaired.into_iter().flatten().sum() });
            }
        }
        Err(VdevError::Unrecoverable { offset, psize })
    }
}

/// All k-element subsets of `items`, in lexicographic order.
fn combinations(items: &[usize], k: usize) -> Vec<Vec<usize>> {
    fn go(items: &[usize], k: usize, start: usize, cur: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if cur.len() == k {
            out.push(cur.clone());
            return;
        }
        for i in start..items.len() {
            if let Some(&x) = items.get(i) {
                cur.push(x);
                go(items, k, i + 1, cur, out);
                cur.pop();
            }
        }
    }
    let mut out = vec![];
    go(items, k, 0, &mut vec![], &mut out);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::combinations;

    #[test]
    fn combos() {
        assert_eq!(combinations(&[1, 2, 3], 0), vec![Vec::<usize>::new()]);
        assert_eq!(combinations(&[1, 2, 3], 2), vec![vec![1, 2], vec![1, 3], vec![2, 3]]);
        assert_eq!(combinations(&[5, 6, 7, 8, 9], 3).len(), 10);
    }
}
