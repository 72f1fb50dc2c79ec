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

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tarn_dev::Device;

use crate::iostat::IoStart;
use crate::leaf::{DevState, LeafStatus, LeafVdev};
use crate::parity::{codec_for, ParityCodec};
use crate::raidz::{alloc_size, RaidzMap};
use crate::threads::par_map;
use crate::{data_region_size, LeafConfig, Result, TopConfig, TopKind, VdevError};

pub const ASHIFT_MIN: u8 = 9;
pub const ASHIFT_MAX: u8 = 16;
pub const RAIDZ_PARITY_MAX: u8 = 3;

pub struct ReadOutcome {
    pub data: Vec<u8>,
    /// Bytes rewritten to copies found bad.
    pub repaired_bytes: u64,
    /// Bytes read from devices to produce `data`.
    pub read_bytes: u64,
}

/// What a scrub or resilver did with one block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanOutcome {
    /// Bytes read from devices.
    pub read_bytes: u64,
    /// Bytes rewritten over copies found bad (I/O or checksum errors).
    pub repaired_bytes: u64,
    /// Bytes written to leaves that lacked the block (their DTL covered it).
    pub resilvered_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopStatus {
    /// The vdev's id (its index among the pool's top-level vdevs).
    #[serde(default)]
    pub id: u32,
    pub name: String,
    pub state: DevState,
    /// Every leaf, slot by slot (`slots[i]` leaves are `children` entries
    /// whose `slot == i`).
    pub children: Vec<LeafStatus>,
    pub slots: Vec<u32>,
}

impl TopStatus {
    /// The leaves of each slot, by slot number (a slot of several leaves
    /// is a replacing or spare group, as zpool shows them).
    pub fn slot_groups(&self) -> std::collections::BTreeMap<u32, Vec<&LeafStatus>> {
        let mut slots: std::collections::BTreeMap<u32, Vec<&LeafStatus>> = std::collections::BTreeMap::new();
        for (leaf, slot) in self.children.iter().zip(&self.slots) {
            slots.entry(*slot).or_default().push(leaf);
        }
        slots
    }
}

/// One child position: its primary leaf first, then leaves joined to it
/// (replacing, spare). All leaves of a slot hold the same bytes.
pub type Slot = Vec<Arc<LeafVdev>>;

pub struct TopVdev {
    config: TopConfig,
    slots: Vec<Slot>,
    /// Raidz only.
    codec: Option<Arc<dyn ParityCodec>>,
    /// Mirror read rotation.
    next_child: AtomicUsize,
    /// Writes are gathered by the leaves until their next flush
    /// (gather.rs): on while a txg is written out.
    gathering: AtomicBool,
}

type Verify<'a> = &'a (dyn Fn(&[u8]) -> bool + Sync);

/// A recovered raidz block: its data, all shards, the rebuilt columns.
type Recovered = (Vec<u8>, Vec<Vec<u8>>, Vec<usize>);

fn validate_width(kind: &TopKind, children: usize) -> Result<()> {
    let (name, need) = match kind {
        TopKind::Hole if children == 0 => return Ok(()),
        TopKind::Hole => return Err(VdevError::Invalid(format!("a removed vdev has no devices, got {children}"))),
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
            TopKind::Hole => return Err(VdevError::Invalid("a removed vdev has no space".into())),
        })
    }

    /// Bytes of a leaf's data region a vdev of this config needs.
    pub fn leaf_size_needed(cfg: &TopConfig) -> u64 {
        match cfg.kind {
            TopKind::Disk | TopKind::Mirror => cfg.asize,
            TopKind::Raidz { .. } => cfg.asize / cfg.children.len().max(1) as u64,
            TopKind::Hole => 0,
        }
    }

    /// `devs[i]` is the device of `cfg.children[i]`, or None if missing.
    pub fn new(cfg: TopConfig, devs: Vec<Option<Arc<dyn Device>>>) -> Result<TopVdev> {
        if devs.len() != cfg.children.len() {
            return Err(VdevError::Invalid(format!(
                "top vdev {} lists {} children but {} devices were given",
                cfg.id,
                cfg.children.len(),
                devs.len()
            )));
        }
        let mut it = devs.into_iter();
        let slots = cfg
            .children
            .iter()
            .map(|c| vec![Arc::new(LeafVdev::from_config(c, it.next().flatten(), u64::MAX))])
            .collect();
        TopVdev::from_slots(cfg, slots)
    }

    /// Opens every leaf of every slot as the config describes it; `find`
    /// gives the device of a leaf (None: missing). Open DTL ranges are
    /// closed at `newest_txg`.
    pub fn open(cfg: TopConfig, find: &dyn Fn(&LeafConfig) -> Option<Arc<dyn Device>>, newest_txg: u64) -> Result<TopVdev> {
        let slots = cfg
            .children
            .iter()
            .map(|c| c.slot_leaves().map(|l| Arc::new(LeafVdev::from_config(l, find(l), newest_txg))).collect())
            .collect();
        TopVdev::from_slots(cfg, slots)
    }

    /// A vdev for a changed config (attach, detach, replace, spare), keeping
    /// the leaves it already has (by guid: their devices, counters, DTLs)
    /// and taking new ones from `new_leaves`.
    pub fn reconfigure(&self, cfg: TopConfig, new_leaves: &[Arc<LeafVdev>]) -> Result<TopVdev> {
        let known: Vec<Arc<LeafVdev>> = self.leaves().into_iter().chain(new_leaves.iter().cloned()).collect();
        let mut slots = Vec::new();
        for c in &cfg.children {
            let mut slot = Vec::new();
            for l in c.slot_leaves() {
                let leaf = known
                    .iter()
                    .find(|k| k.guid == l.guid)
                    .cloned()
                    .ok_or_else(|| VdevError::Invalid(format!("no open leaf for {}", l.path)))?;
                leaf.set_role(l.role);
                slot.push(leaf);
            }
            slots.push(slot);
        }
        TopVdev::from_slots(cfg, slots)
    }

    fn from_slots(cfg: TopConfig, slots: Vec<Slot>) -> Result<TopVdev> {
        validate_width(&cfg.kind, cfg.children.len())?;
        if slots.iter().any(Vec::is_empty) {
            return Err(VdevError::Invalid(format!("top vdev {} has an empty slot", cfg.id)));
        }
        if cfg.kind == TopKind::Hole {
            return Ok(TopVdev { config: cfg, slots, codec: None, next_child: AtomicUsize::new(0), gathering: AtomicBool::new(false) });
        }
        if cfg.class == crate::TopClass::Log && matches!(cfg.kind, TopKind::Raidz { .. }) {
            return Err(VdevError::Invalid("a log vdev is a disk or a mirror, not raidz".into()));
        }
        let sizes: Vec<u64> = slots
            .iter()
            .map(|s| s.iter().filter_map(|l| l.device()).map(|d| d.size()).min().unwrap_or(u64::MAX))
            .collect();
        let available = TopVdev::compute_asize(&cfg.kind, cfg.ashift, &sizes)?;
        if cfg.asize == 0 || cfg.asize > available || !cfg.asize.is_multiple_of(1u64 << cfg.ashift) {
            return Err(VdevError::Invalid(format!(
                "top vdev {}: asize {} does not fit the devices (at most {available}, multiple of the sector)",
                cfg.id, cfg.asize
            )));
        }
        let codec = match cfg.kind {
            TopKind::Raidz { parity } => Some(codec_for(usize::from(parity))),
            _ => None,
        };
        Ok(TopVdev { config: cfg, slots, codec, next_child: AtomicUsize::new(0), gathering: AtomicBool::new(false) })
    }

    /// The config as it stands now: leaves' offline flags, roles and DTLs
    /// as they are in memory.
    pub fn config(&self) -> TopConfig {
        let mut cfg = self.config.clone();
        for (c, slot) in cfg.children.iter_mut().zip(&self.slots) {
            let mut leaves: Vec<LeafConfig> = slot
                .iter()
                .map(|l| LeafConfig {
                    guid: l.guid,
                    path: l.path.clone(),
                    offline: l.is_offline(),
                    dtl: l.dtl_for_config(),
                    role: l.role(),
                    joined: vec![],
                })
                .collect();
            let mut primary = leaves.remove(0);
            primary.joined = leaves;
            *c = primary;
        }
        cfg
    }
    pub fn id(&self) -> u32 {
        self.config.id
    }
    pub fn kind(&self) -> &TopKind {
        &self.config.kind
    }
    pub fn class(&self) -> crate::TopClass {
        self.config.class
    }
    /// A log vdev (SLOG): intent-log blocks only.
    pub fn is_log(&self) -> bool {
        self.config.class == crate::TopClass::Log
    }
    /// The place of a removed vdev.
    pub fn is_hole(&self) -> bool {
        self.config.kind == TopKind::Hole
    }
    pub fn asize(&self) -> u64 {
        self.config.asize
    }
    pub fn sector(&self) -> u64 {
        1 << self.config.ashift
    }
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }
    /// Every leaf of every slot.
    pub fn leaves(&self) -> Vec<Arc<LeafVdev>> {
        self.slots.iter().flatten().cloned().collect()
    }

    fn parity(&self) -> usize {
        match self.config.kind {
            TopKind::Raidz { parity } => usize::from(parity),
            _ => 0,
        }
    }

    /// How many slots may fail while the vdev still serves.
    fn redundancy(&self) -> usize {
        match self.config.kind {
            TopKind::Disk | TopKind::Hole => 0,
            TopKind::Mirror => self.slots.len() - 1,
            TopKind::Raidz { parity } => usize::from(parity),
        }
    }

    pub fn alloc_size(&self, psize: u64) -> u64 {
        match self.config.kind {
            TopKind::Disk | TopKind::Mirror | TopKind::Hole => psize,
            TopKind::Raidz { parity } => alloc_size(psize, self.slots.len(), usize::from(parity), self.config.ashift),
        }
    }

    fn check_io(&self, offset: u64, psize: u64) -> Result<()> {
        if self.is_hole() {
            return Err(VdevError::Invalid(format!("top vdev {} was removed", self.config.id)));
        }
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

    /// Writes a block born in `txg`. Leaves out of service (or failing)
    /// record `txg` in their DTL; the write fails only if more slots than
    /// the redundancy allows got nothing.
    pub fn write(&self, offset: u64, data: &[u8], txg: u64) -> Result<()> {
        self.write_as(offset, data, txg, false)
    }

    /// As [`TopVdev::write`], and the block is durable when this returns
    /// (each child's write is `Device::write_durable_at`): the intent
    /// log's writes, which must not wait for a flush of everything a txg
    /// sync has written meanwhile. A child whose durable write failed has
    /// the txg in its DTL, as after a failed write or flush.
    pub fn write_durable(&self, offset: u64, data: &[u8], txg: u64) -> Result<()> {
        self.write_as(offset, data, txg, true)
    }

    /// From now on, until the next [`TopVdev::flush`] (which turns it
    /// off), the leaves gather this vdev's writes and send them in runs
    /// (gather.rs); durable writes are never gathered.
    pub fn gather_writes(&self) {
        self.gathering.store(true, Ordering::Release);
    }

    fn write_as(&self, offset: u64, data: &[u8], txg: u64, durable: bool) -> Result<()> {
        self.check_io(offset, data.len() as u64)?;
        let _start = IoStart::begin();
        let gather = !durable && self.gathering.load(Ordering::Acquire);
        match self.config.kind {
            TopKind::Disk | TopKind::Mirror | TopKind::Hole => {
                let leaves = self.leaves();
                let results: Vec<bool> = if gather {
                    // A copy each: no I/O to wait for, no threads to wake.
                    leaves.iter().map(|leaf| leaf.write_gathered(data, offset, txg).is_ok()).collect()
                } else {
                    par_map(&leaves, |leaf| leaf.write_as(data, offset, txg, durable).is_ok())
                };
                let mut ok_slots = vec![false; self.slots.len()];
                let mut i = 0;
                for (s, slot) in self.slots.iter().enumerate() {
                    for _ in slot {
                        if results.get(i).copied().unwrap_or(false) {
                            if let Some(f) = ok_slots.get_mut(s) {
                                *f = true;
                            }
                        }
                        i += 1;
                    }
                }
                // A mirror needs one good copy.
                if ok_slots.iter().any(|&ok| ok) {
                    Ok(())
                } else {
                    let n = self.slots.len();
                    Err(VdevError::TooManyFailures { what: format!("write at {offset}"), failed: n, children: n, tolerated: n - 1 })
                }
            }
            TopKind::Raidz { .. } => self.raidz_write(offset, data, txg, durable, gather),
        }
    }

    /// Reads and verifies a block born in txg `birth`.
    pub fn read(&self, offset: u64, psize: u64, birth: u64, verify: Verify) -> Result<ReadOutcome> {
        self.check_io(offset, psize)?;
        let _start = IoStart::begin();
        match self.config.kind {
            TopKind::Disk | TopKind::Mirror | TopKind::Hole => self.mirror_read(offset, psize, birth, verify),
            TopKind::Raidz { .. } => self.raidz_read(offset, psize, birth, verify),
        }
    }

    /// As `read`, for a block that may never have been written (the next
    /// block of an intent log chain): a copy that does not verify is not a
    /// checksum error and is not rewritten. (A raidz block rebuilt from
    /// parity still counts the columns it had to rebuild: it verified, so
    /// they were really bad.)
    pub fn read_speculative(&self, offset: u64, psize: u64, birth: u64, verify: Verify) -> Result<ReadOutcome> {
        self.check_io(offset, psize)?;
        let _start = IoStart::begin();
        match self.config.kind {
            TopKind::Disk | TopKind::Mirror | TopKind::Hole => {
                let (holders, stale) = self.mirror_order(birth);
                let mut read_bytes = 0;
                for leaf in holders.iter().chain(stale.iter()) {
                    if let Ok(data) = leaf.read_vec(psize as usize, offset) {
                        read_bytes += psize;
                        if verify(&data) {
                            return Ok(ReadOutcome { data, repaired_bytes: 0, read_bytes });
                        }
                    }
                }
                Err(VdevError::Unrecoverable { offset, psize })
            }
            TopKind::Raidz { .. } => self.raidz_read(offset, psize, birth, verify),
        }
    }

    /// Whether some leaf in service lacks blocks born in `birth` (so a
    /// resilver must visit them).
    pub fn needs_resilver(&self, birth: u64) -> bool {
        self.slots.iter().flatten().any(|l| l.usable() && l.dtl().contains(birth))
    }

    /// The per-block step of a scrub (`scrub == true`: every copy, every
    /// raidz column including parity, is read and checked; bad ones are
    /// rewritten) or of a resilver (`false`: the block is read as cheaply
    /// as possible). Either way, leaves in service whose DTL covers `birth`
    /// are written their copy.
    pub fn scan(&self, offset: u64, psize: u64, birth: u64, verify: Verify, scrub: bool) -> Result<ScanOutcome> {
        self.check_io(offset, psize)?;
        let _start = IoStart::begin();
        match self.config.kind {
            TopKind::Disk | TopKind::Mirror | TopKind::Hole => self.mirror_scan(offset, psize, birth, verify, scrub),
            TopKind::Raidz { .. } => self.raidz_scan(offset, psize, birth, verify, scrub),
        }
    }

    /// Flushes every leaf in service; fails only if more slots than the
    /// redundancy allows could not flush. A leaf whose flush fails may have
    /// lost the writes of `txg`: they go to its DTL.
    pub fn flush(&self, txg: u64) -> Result<()> {
        self.gathering.store(false, Ordering::Release);
        // Writes gathered by a leaf that left service meanwhile did not
        // happen: into its DTL.
        for leaf in self.leaves().iter().filter(|l| !l.usable()) {
            leaf.drain_gather();
        }
        let leaves: Vec<Arc<LeafVdev>> = self.leaves().into_iter().filter(|l| l.usable()).collect();
        let results = par_map(&leaves, |leaf| {
            let ok = leaf.flush().is_ok();
            if !ok {
                leaf.note_missed(txg);
            }
            (leaf.guid, ok)
        });
        let failed = self
            .slots
            .iter()
            .filter(|slot| !slot.iter().any(|l| results.iter().any(|&(g, ok)| ok && g == l.guid)))
            .count();
        self.tolerate("flush", failed, self.slots.len())
    }

    pub fn state(&self) -> DevState {
        let failed = self.slots.iter().filter(|slot| !slot.iter().any(|l| l.usable())).count();
        let any_bad = self.slots.iter().flatten().any(|l| !l.usable());
        if failed > self.redundancy() {
            DevState::Unavail
        } else if failed > 0 || any_bad {
            DevState::Degraded
        } else {
            DevState::Online
        }
    }

    pub fn name(&self) -> String {
        match self.config.kind {
            TopKind::Disk => self.slots.first().and_then(|s| s.first()).map_or_else(String::new, |l| l.path.clone()),
            TopKind::Mirror => format!("mirror-{}", self.config.id),
            TopKind::Raidz { parity } => format!("raidz{parity}-{}", self.config.id),
            TopKind::Hole => format!("hole-{}", self.config.id),
        }
    }

    pub fn status(&self) -> TopStatus {
        let mut children = Vec::new();
        let mut slots = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            for l in slot {
                children.push(l.status());
                slots.push(i as u32);
            }
        }
        TopStatus { id: self.config.id, name: self.name(), state: self.state(), children, slots }
    }

    pub fn clear_errors(&self) {
        self.slots.iter().flatten().for_each(|l| l.clear_errors());
    }

    // ---- mirror / disk ----

    /// Leaves holding `birth`, in rotation order, then leaves in service
    /// whose DTL says they lack it (last resort: a DTL may be conservative).
    fn mirror_order(&self, birth: u64) -> (Vec<Arc<LeafVdev>>, Vec<Arc<LeafVdev>>) {
        let all = self.leaves();
        let n = all.len().max(1);
        let start = self.next_child.fetch_add(1, Ordering::Relaxed) % n;
        let rotated: Vec<Arc<LeafVdev>> = (0..all.len()).filter_map(|i| all.get((start + i) % n).cloned()).collect();
        let (holders, rest): (Vec<_>, Vec<_>) = rotated.into_iter().partition(|l| l.has(birth));
        (holders, rest.into_iter().filter(|l| l.usable()).collect())
    }

    fn mirror_read(&self, offset: u64, psize: u64, birth: u64, verify: Verify) -> Result<ReadOutcome> {
        let (holders, stale) = self.mirror_order(birth);
        let mut bad: Vec<&Arc<LeafVdev>> = vec![];
        let mut last_io_error = None;
        let mut read_bytes = 0;
        for (leaf, is_holder) in holders.iter().map(|l| (l, true)).chain(stale.iter().map(|l| (l, false))) {
            match leaf.read_vec(psize as usize, offset) {
                Err(e) => {
                    last_io_error = Some(e);
                    bad.push(leaf);
                }
                Ok(data) if !verify(&data) => {
                    read_bytes += psize;
                    if is_holder {
                        leaf.note_checksum_error();
                    }
                    bad.push(leaf);
                }
                Ok(data) => {
                    read_bytes += psize;
                    let repaired: u64 = par_map(&bad, |b| b.write(&data, offset, birth).is_ok())
                        .into_iter()
                        .filter(|&ok| ok)
                        .map(|_| psize)
                        .sum();
                    return Ok(ReadOutcome { data, repaired_bytes: repaired, read_bytes });
                }
            }
        }
        match (self.slots.len(), self.leaves().len(), last_io_error) {
            // A single disk that failed I/O: report the device error itself.
            (1, 1, Some(e)) => Err(e),
            _ => Err(VdevError::Unrecoverable { offset, psize }),
        }
    }

    fn mirror_scan(&self, offset: u64, psize: u64, birth: u64, verify: Verify, scrub: bool) -> Result<ScanOutcome> {
        let (holders, stale) = self.mirror_order(birth);
        let mut out = ScanOutcome::default();
        let (data, bad): (Vec<u8>, Vec<Arc<LeafVdev>>) = if scrub {
            let copies = par_map(&holders, |leaf| leaf.read_vec(psize as usize, offset).ok());
            let mut good: Option<Vec<u8>> = None;
            let mut bad = vec![];
            for (leaf, copy) in holders.iter().zip(copies) {
                match copy {
                    None => bad.push(leaf.clone()),
                    Some(data) => {
                        out.read_bytes += psize;
                        if !verify(&data) {
                            leaf.note_checksum_error();
                            bad.push(leaf.clone());
                        } else {
                            good.get_or_insert(data);
                        }
                    }
                }
            }
            match good {
                Some(d) => (d, bad),
                None => {
                    // Last resort: the leaves the DTL says are stale.
                    let r = self.mirror_read(offset, psize, birth, verify)?;
                    out.read_bytes += r.read_bytes;
                    (r.data, bad)
                }
            }
        } else {
            let r = self.mirror_read(offset, psize, birth, verify)?;
            out.read_bytes += r.read_bytes;
            out.repaired_bytes += r.repaired_bytes;
            (r.data, vec![])
        };
        out.repaired_bytes += par_map(&bad, |b| b.write(&data, offset, birth).is_ok()).into_iter().filter(|&ok| ok).count() as u64 * psize;
        out.resilvered_bytes += par_map(&stale, |b| b.write(&data, offset, birth).is_ok()).into_iter().filter(|&ok| ok).count() as u64 * psize;
        Ok(out)
    }

    // ---- raidz ----

    fn codec(&self) -> Result<&Arc<dyn ParityCodec>> {
        self.codec.as_ref().ok_or_else(|| VdevError::Invalid("raidz vdev without a parity codec".into()))
    }

    fn map(&self, offset: u64, psize: u64) -> RaidzMap {
        RaidzMap::new(offset, psize, self.slots.len(), self.parity(), self.config.ashift)
    }

    fn slot(&self, child: usize) -> Result<&Slot> {
        self.slots.get(child).ok_or_else(|| VdevError::Invalid(format!("raidz child {child} out of range")))
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

    /// `encode` for writing: a data column as long as the shards is
    /// borrowed from `data` (the shards' zero padding exists only for the
    /// parity, and only short columns need it), so a write copies into
    /// shards only the short columns, not the block.
    fn encode_for_write<'a>(&self, map: &RaidzMap, data: &'a [u8]) -> Result<Vec<Cow<'a, [u8]>>> {
        let mut shards: Vec<Cow<'a, [u8]>> = Vec::with_capacity(map.columns.len());
        let mut at = 0usize;
        for col in map.columns.iter().skip(map.parity) {
            let src = data.get(at..at + col.len).ok_or_else(|| VdevError::Invalid("raidz data too short".into()))?;
            if col.len == map.shard_len {
                shards.push(Cow::Borrowed(src));
            } else {
                let mut shard = vec![0u8; map.shard_len];
                if let Some(dst) = shard.get_mut(..col.len) {
                    dst.copy_from_slice(src);
                }
                shards.push(Cow::Owned(shard));
            }
            at += col.len;
        }
        let mut parity = vec![vec![0u8; map.shard_len]; map.parity];
        {
            let refs: Vec<&[u8]> = shards.iter().map(|s| s.as_ref()).collect();
            self.codec()?.encode(&refs, &mut parity).map_err(VdevError::Invalid)?;
        }
        shards.extend(parity.into_iter().map(Cow::Owned));
        Ok(shards)
    }

    /// The bytes column `c` stores, from shards in codec order.
    fn column_bytes<'a, S: AsRef<[u8]>>(map: &RaidzMap, shards: &'a [S], c: usize) -> &'a [u8] {
        let len = map.columns.get(c).map_or(0, |col| col.len);
        shards.get(map.shard_of(c)).and_then(|s| s.as_ref().get(..len)).unwrap_or(&[])
    }

    fn raidz_write(&self, offset: u64, data: &[u8], txg: u64, durable: bool, gather: bool) -> Result<()> {
        let map = self.map(offset, data.len() as u64);
        let shards = self.encode_for_write(&map, data)?;
        let columns: Vec<usize> = (0..map.columns.len()).collect();
        let write_column = |c: &usize| {
            let c = *c;
            let col = map.columns.get(c).ok_or_else(|| VdevError::Invalid("column".into()))?;
            let bytes = Self::column_bytes(&map, &shards, c);
            let slot = self.slot(col.child)?;
            let mut first_err = None;
            let mut oks = 0;
            for l in slot.iter() {
                let r = if gather { l.write_gathered(bytes, col.child_offset, txg) } else { l.write_as(bytes, col.child_offset, txg, durable) };
                match r {
                    Ok(()) => oks += 1,
                    Err(e) => {
                        first_err.get_or_insert_with(|| format!("{}: {e}", l.path));
                    }
                }
            }
            if oks == 0 {
                Err(VdevError::Invalid(first_err.unwrap_or_else(|| "column write failed".into())))
            } else {
                Ok(())
            }
        };
        let results: Vec<Result<()>> = if gather { columns.iter().map(write_column).collect() } else { par_map(&columns, write_column) };
        let failed = results.iter().filter(|r| r.is_err()).count();
        // Name the first failure: "4 of 4 failed" alone does not say why.
        let why = results.iter().find_map(|r| r.as_ref().err()).map(|e| format!(" ({e})")).unwrap_or_default();
        self.tolerate(&format!("raidz write at {offset}{why}"), failed, map.columns.len())
    }

    /// Reads columns `which` from the first leaf of their slot that holds
    /// `birth`; `(leaf, bytes)` per column, None = unreadable.
    fn read_columns(&self, map: &RaidzMap, which: &[usize], birth: u64) -> Vec<Option<(Arc<LeafVdev>, Vec<u8>)>> {
        par_map(which, |&c| {
            let col = map.columns.get(c)?;
            let slot = self.slots.get(col.child)?;
            slot.iter().filter(|l| l.has(birth)).find_map(|l| l.read_vec(col.len, col.child_offset).ok().map(|b| (l.clone(), b)))
        })
    }

    /// Rewrites column `c` to every leaf in service of its slot.
    fn rewrite_column(&self, map: &RaidzMap, c: usize, bytes: &[u8], birth: u64) -> u64 {
        let Some(col) = map.columns.get(c) else { return 0 };
        let Some(slot) = self.slots.get(col.child) else { return 0 };
        slot.iter().filter(|l| l.usable()).filter(|l| l.write(bytes, col.child_offset, birth).is_ok()).count() as u64
            * bytes.len() as u64
    }

    /// Finds the block from columns as read (None = erased): the data as
    /// read if it verifies, else every combination of up to p further
    /// columns assumed bad, rebuilt and verified. Returns the data, all
    /// shards, and the columns that had to be rebuilt (erased or bad).
    fn recover(
        &self,
        map: &RaidzMap,
        cols: &[Option<Vec<u8>>],
        psize: u64,
        verify: Verify,
    ) -> Result<Option<Recovered>> {
        let ncols = map.columns.len();
        let p = map.parity;
        let data_complete = cols.iter().skip(p).all(Option::is_some);
        if data_complete {
            let mut data = Vec::with_capacity(psize as usize);
            for col in cols.iter().skip(p).flatten() {
                data.extend_from_slice(col);
            }
            if verify(&data) {
                let shards = self.encode(map, &data)?;
                return Ok(Some((data, shards, vec![])));
            }
        }
        let io_bad: Vec<usize> = (0..ncols).filter(|&c| cols.get(c).is_some_and(Option::is_none)).collect();
        if io_bad.len() > p {
            return Ok(None);
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
                    data.extend_from_slice(Self::column_bytes(map, &shards, c));
                }
                if verify(&data) {
                    return Ok(Some((data, shards, erased)));
                }
            }
        }
        Ok(None)
    }

    fn raidz_read(&self, offset: u64, psize: u64, birth: u64, verify: Verify) -> Result<ReadOutcome> {
        let map = self.map(offset, psize);
        let ncols = map.columns.len();
        let p = map.parity;
        let mut src: Vec<Option<Arc<LeafVdev>>> = vec![None; ncols];
        let mut cols: Vec<Option<Vec<u8>>> = vec![None; ncols];
        let mut read_bytes = 0u64;
        fn take(
            which: &[usize],
            got: Vec<Option<(Arc<LeafVdev>, Vec<u8>)>>,
            src: &mut [Option<Arc<LeafVdev>>],
            cols: &mut [Option<Vec<u8>>],
            read_bytes: &mut u64,
        ) {
            for (c, g) in which.iter().zip(got) {
                if let Some((leaf, bytes)) = g {
                    *read_bytes += bytes.len() as u64;
                    if let (Some(s), Some(slot)) = (src.get_mut(*c), cols.get_mut(*c)) {
                        *s = Some(leaf);
                        *slot = Some(bytes);
                    }
                }
            }
        }
        let data_cols: Vec<usize> = (p..ncols).collect();
        take(&data_cols, self.read_columns(&map, &data_cols, birth), &mut src, &mut cols, &mut read_bytes);
        if cols.iter().skip(p).all(Option::is_some) {
            let mut data = Vec::with_capacity(psize as usize);
            for col in cols.iter().skip(p).flatten() {
                data.extend_from_slice(col);
            }
            if verify(&data) {
                return Ok(ReadOutcome { data, repaired_bytes: 0, read_bytes });
            }
        }
        // Slow path: fetch parity and reconstruct.
        let parity_cols: Vec<usize> = (0..p).collect();
        take(&parity_cols, self.read_columns(&map, &parity_cols, birth), &mut src, &mut cols, &mut read_bytes);
        let Some((data, shards, erased)) = self.recover(&map, &cols, psize, verify)? else {
            return Err(VdevError::Unrecoverable { offset, psize });
        };
        let mut repaired = 0;
        for &c in &erased {
            if let Some(Some(leaf)) = src.get(c) {
                leaf.note_checksum_error(); // it was read, yet had to be rebuilt
            }
            repaired += self.rewrite_column(&map, c, Self::column_bytes(&map, &shards, c), birth);
        }
        Ok(ReadOutcome { data, repaired_bytes: repaired, read_bytes })
    }

    fn raidz_scan(&self, offset: u64, psize: u64, birth: u64, verify: Verify, scrub: bool) -> Result<ScanOutcome> {
        let map = self.map(offset, psize);
        let mut out = ScanOutcome::default();
        let shards = if scrub {
            // Every column from every leaf that holds it.
            let jobs: Vec<(usize, Arc<LeafVdev>)> = map
                .columns
                .iter()
                .enumerate()
                .flat_map(|(c, col)| {
                    self.slots.get(col.child).into_iter().flatten().filter(|l| l.has(birth)).map(move |l| (c, l.clone()))
                })
                .collect();
            let copies = par_map(&jobs, |(c, l)| {
                let col = map.columns.get(*c)?;
                l.read_vec(col.len, col.child_offset).ok()
            });
            out.read_bytes = copies.iter().flatten().map(|b| b.len() as u64).sum();
            let mut cols: Vec<Option<Vec<u8>>> = vec![None; map.columns.len()];
            for ((c, _), copy) in jobs.iter().zip(&copies) {
                if let (Some(slot @ None), Some(bytes)) = (cols.get_mut(*c), copy) {
                    *slot = Some(bytes.clone());
                }
            }
            let recovered = self.recover(&map, &cols, psize, verify)?;
            let Some((data, _, _)) = recovered else {
                // Stale leaves (by DTL) are the last resort.
                let r = self.raidz_read(offset, psize, birth, verify)?;
                out.read_bytes += r.read_bytes;
                out.repaired_bytes += r.repaired_bytes;
                return self.raidz_fill_stale(&map, &self.encode(&map, &r.data)?, birth, out);
            };
            // What every column should hold, from the verified data: the
            // reconstruction's own shards keep damaged columns it did not need.
            let shards = self.encode(&map, &data)?;
            // Compare every copy with what it should hold.
            for ((c, leaf), copy) in jobs.iter().zip(copies) {
                let expected = Self::column_bytes(&map, &shards, *c);
                let Some(col) = map.columns.get(*c) else { continue };
                match copy {
                    Some(got) if got.as_slice() == expected => continue,
                    Some(_) => leaf.note_checksum_error(),
                    None => {} // the read error is already counted
                }
                if leaf.write(expected, col.child_offset, birth).is_ok() {
                    out.repaired_bytes += expected.len() as u64;
                }
            }
            shards
        } else {
            let r = self.raidz_read(offset, psize, birth, verify)?;
            out.read_bytes += r.read_bytes;
            out.repaired_bytes += r.repaired_bytes;
            self.encode(&map, &r.data)?
        };
        self.raidz_fill_stale(&map, &shards, birth, out)
    }

    /// Writes each column to the leaves in service that lack `birth`.
    fn raidz_fill_stale(&self, map: &RaidzMap, shards: &[Vec<u8>], birth: u64, mut out: ScanOutcome) -> Result<ScanOutcome> {
        for (c, col) in map.columns.iter().enumerate() {
            let bytes = Self::column_bytes(map, shards, c);
            for leaf in self.slots.get(col.child).into_iter().flatten() {
                if leaf.usable() && !leaf.has(birth) && leaf.write(bytes, col.child_offset, birth).is_ok() {
                    out.resilvered_bytes += bytes.len() as u64;
                }
            }
        }
        Ok(out)
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
    use super::*;

    /// A write's borrowed shards store what the copied ones do, in every
    /// column, for blocks with short columns and without, at parity 1–3.
    #[test]
    fn write_shards_match_the_copied_encoding() {
        for parity in 1..=3u8 {
            let n = 6;
            let kind = TopKind::Raidz { parity };
            let sizes = vec![8u64 << 20; n];
            let cfg = TopConfig {
                class: Default::default(),
                id: 0,
                guid: 1,
                kind: kind.clone(),
                ashift: 9,
                asize: TopVdev::compute_asize(&kind, 9, &sizes).unwrap(),
                children: (0..n).map(|i| LeafConfig::new(10 + i as u64, format!("d{i}"))).collect(),
            };
            let devs = (0..n).map(|i| Some(tarn_dev::MemDevice::new(&format!("d{i}"), 8 << 20) as Arc<dyn Device>)).collect();
            let top = TopVdev::new(cfg, devs).unwrap();
            for sectors in [1u64, 2, 3, 5, 6, 7, 31, 32, 33, 256] {
                let data: Vec<u8> = (0..sectors * 512).map(|i| (i * 7 + i / 511) as u8).collect();
                let map = top.map(sectors * 512 * 3, data.len() as u64);
                let copied = top.encode(&map, &data).unwrap();
                let borrowed = top.encode_for_write(&map, &data).unwrap();
                for c in 0..map.columns.len() {
                    assert_eq!(
                        TopVdev::column_bytes(&map, &copied, c),
                        TopVdev::column_bytes(&map, &borrowed, c),
                        "parity {parity}, {sectors} sectors, column {c}"
                    );
                }
            }
        }
    }

    #[test]
    fn combos() {
        assert_eq!(combinations(&[1, 2, 3], 0), vec![Vec::<usize>::new()]);
        assert_eq!(combinations(&[1, 2, 3], 2), vec![vec![1, 2], vec![1, 3], vec![2, 3]]);
        assert_eq!(combinations(&[5, 6, 7, 8, 9], 3).len(), 10);
    }
}
