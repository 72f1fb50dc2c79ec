//! Space: what a txg may still dirty, what users see as available, and how
//! allocated bytes translate into bytes of user data.
//!
//! Big theory:
//! - Every dirty buffer carries a [`Charge`]: its bytes (what the write
//!   throttle counts against `dirty_data_max`) and the raw space it may
//!   allocate when its txg is written — the worst case: no compression,
//!   rounded up to the vdev's sector, inflated by raidz parity and padding
//!   (or, if free space is too fragmented to hold it whole, written as a
//!   gang of sector-sized pieces, each its own stripe), times the copies,
//!   plus its share of indirect blocks. Each dnode block
//!   (16 KiB, 32 dnodes) a txg dirties is charged once per txg, at its
//!   metadata copies. The pool keeps the sums (`Shared::dirty_asize`).
//! - The *slop* is 1/32 of the pool (at least 4 MiB or half the pool, at
//!   most 128 GiB), as in ZFS: space users never see as available, which
//!   the syncing-context bookkeeping of every txg (object-set roots, the
//!   MOS, the space map log, dead lists) and the charges' rounding use.
//! - Writers of new data reserve before they join a txg
//!   ([`crate::ObjectSet::reserve`]): the reservation fits when free space
//!   less the slop less every charge already dirty can take its charge.
//!   When it does not fit yet would once pending work settles (dirty data
//!   smaller than its worst-case charge, frees still in the defer window),
//!   the writer syncs txgs and asks again — so a pool emptied by deletes
//!   takes writes again at once, and `available` is what can be written.
//!   Only when even that cannot make room is the answer `NoSpace`.
//! - While a txg is written its blocks have left the free space but its
//!   charges stay dirty until it publishes: the checks add back what the
//!   sync allocated since it began, up to the charges it began with less
//!   those it has given back (`sync_credit`), so the txg is counted once,
//!   while it publishes too.
//! - Every change (deletes too) waits at `begin()` while the dirty charges
//!   reach free space less half the slop: no txg is ever bigger than the
//!   space it can be written to, so a txg never fails for space.
//! - Users see space *deflated*: a top-level vdev's raw bytes count as the
//!   share a 128 KiB block leaves of them (raidz parity and stripe padding
//!   taken out), so `used`, `available` and what a full pool holds agree.
//!
//! Lock order: `Shared::meta_charges` is a leaf lock.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;

use crate::format::{IND_BLOCK_SIZE, META_BLOCK_SIZE};
use crate::pool::Shared;
use crate::{ObjError, ObjsetId, PoolSpace, Result, Txg};

/// The slop: 1/32 of the pool, at least 4 MiB (but at most half the pool),
/// at most 128 GiB.
pub fn slop_bytes(size: u64) -> u64 {
    let min = (4u64 << 20).min(size / 2);
    (size >> 5).clamp(min, 128 << 30)
}

/// Reference block size for deflating raw space into user bytes.
const DEFLATE_BLOCK: u64 = 128 << 10;

/// Share of the raw space users can fill, as numerator/denominator: each
/// top-level vdev counts as what a 128 KiB block leaves of it (raidz:
/// parity and the padding of its variable-width stripes, as ZFS deflates).
pub fn deflate_ratio(config: &tarn_vdev::PoolConfig) -> (u64, u64) {
    let mut data = 0u128;
    let mut total = 0u128;
    // Log vdevs (and the holes of removed ones) are not pool space.
    for top in config.top.iter().filter(|t| !t.is_log()) {
        let asize = top.asize.max(1) as u128;
        let taken = top.alloc_size(DEFLATE_BLOCK).max(1) as u128;
        total += asize;
        data += asize * DEFLATE_BLOCK as u128 / taken;
    }
    if total == 0 {
        return (1, 1);
    }
    // Keep the numbers small enough to multiply u64 byte counts by.
    let scale = 1u128 << 20;
    (((data * scale) / total).max(1) as u64, scale as u64)
}

/// What a dirty buffer will cost: its bytes (for the throttle) and the raw
/// space it may allocate when written (for space checks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Charge {
    pub bytes: u64,
    pub asize: u64,
}

impl Charge {
    pub fn add(&mut self, other: Charge) {
        self.bytes += other.bytes;
        self.asize += other.asize;
    }
    pub fn sub(&mut self, other: Charge) {
        self.bytes = self.bytes.saturating_sub(other.bytes);
        self.asize = self.asize.saturating_sub(other.asize);
    }
}

/// Where an ENOSPC answer was given: the index of its count in
/// `Shared::nospace`.
#[derive(Clone, Copy)]
enum NoSpaceSite {
    /// `check_space`, inside a txg.
    InTxg,
    /// `reserve_space`, when nothing pending could make room.
    Reserve,
    /// `reserve_space`, after waiting every txg it may wait.
    ReserveWaitedOut,
}

/// Dnode blocks dirtied per txg, each charged once; and the bytes freed
/// per txg by objects freed whole (deletes not yet written).
#[derive(Default)]
pub(crate) struct MetaCharges {
    blocks: BTreeMap<Txg, HashSet<(ObjsetId, u64)>>,
    asize: BTreeMap<Txg, u64>,
    frees: BTreeMap<Txg, u64>,
}

impl Shared {
    /// Largest raw allocation a block of `len` bytes can take, per copy:
    /// whole, or as a gang of sector-sized pieces (each its own raidz
    /// stripe, so up to parity + 1 sectors per sector of data) with its
    /// headers — what a fragmented pool may make of it.
    fn worst_asize(&self, len: u64) -> u64 {
        let psize = self.io.psize_for(len as usize);
        let unit = self.io.unit();
        let pieces = psize.div_ceil(unit);
        let headers = tarn_block::gang::headers_for(pieces as usize) as u64;
        let header = self.io.psize_for(tarn_block::gang::GANG_HEADER_LEN);
        self.io
            .tops()
            .iter()
            .map(|t| t.alloc_size(psize).max(pieces * t.alloc_size(unit) + headers * t.alloc_size(header)))
            .max()
            .unwrap_or(psize)
    }

    /// The charge of a dirty data block of `len` bytes written with
    /// `copies` copies (indirect blocks at `copies + 1`).
    pub(crate) fn block_charge(&self, len: u64, copies: u8) -> Charge {
        let copies = u64::from(copies.max(1));
        // An indirect block maps 1024 blocks; two levels' share, rounded up.
        let indirect = (self.worst_asize(IND_BLOCK_SIZE as u64) * (copies + 1)).div_ceil(512);
        Charge { bytes: len, asize: self.worst_asize(len) * copies + indirect }
    }

    pub(crate) fn add_dirty(&self, c: Charge) {
        self.dirty_bytes.fetch_add(c.bytes, Ordering::Relaxed);
        self.dirty_asize.fetch_add(c.asize, Ordering::Relaxed);
        self.dirty_grew();
    }

    /// Memory held by changes not yet written: dirty blocks, and intent
    /// log records waiting for a commit or for their txg (zil/). What the
    /// write throttle and the sync trigger count against `dirty_data_max`.
    pub(crate) fn dirty_total(&self) -> u64 {
        self.dirty_bytes.load(Ordering::Relaxed) + self.logs.pending_bytes()
    }

    /// Starts a sync once the dirty total passes the sync trigger.
    pub(crate) fn dirty_grew(&self) {
        if self.dirty_total() > self.tunables.dirty_sync_bytes() {
            self.kick(0);
        }
    }

    pub(crate) fn undirty(&self, c: Charge) {
        let _ = self.dirty_bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(c.bytes)));
        // Release: a checker that sees the charge gone sees the sync's
        // credit shrunk by it too (`note_sync_discharge` comes first).
        let _ = self.dirty_asize.fetch_update(Ordering::Release, Ordering::Relaxed, |v| Some(v.saturating_sub(c.asize)));
    }

    /// Dnode `id` of object set `os` is dirty in `txg`: its dnode block is
    /// charged, once per txg.
    pub(crate) fn note_dirty_dnode(&self, txg: Txg, os: ObjsetId, id: u64, meta_copies: u8) {
        let block = id / crate::format::DNODES_PER_BLOCK;
        let mut m = self.meta_charges.lock();
        if m.blocks.entry(txg).or_default().insert((os, block)) {
            let asize = self.worst_asize(u64::from(META_BLOCK_SIZE)) * u64::from(meta_copies.max(1));
            *m.asize.entry(txg).or_default() += asize;
            self.dirty_asize.fetch_add(asize, Ordering::Relaxed);
        }
    }

    /// An object whose blocks take `bytes` on disk is freed in `txg`.
    pub(crate) fn note_pending_free(&self, txg: Txg, bytes: u64) {
        if bytes > 0 {
            *self.meta_charges.lock().frees.entry(txg).or_default() += bytes;
        }
    }

    /// Bytes that deletes not yet written will free.
    fn pending_frees(&self) -> u64 {
        self.meta_charges.lock().frees.values().sum()
    }

    /// Txg `txg` (and every older one) is on disk: its dnode-block charges
    /// are spent, its frees are in the defer window.
    pub(crate) fn settle_meta_charges(&self, txg: Txg) {
        let mut m = self.meta_charges.lock();
        let done: Vec<Txg> = m.frees.range(..=txg).map(|(&t, _)| t).collect();
        for t in done {
            m.frees.remove(&t);
        }
        let done: Vec<Txg> = m.asize.range(..=txg).map(|(&t, _)| t).collect();
        for t in done {
            let asize = m.asize.remove(&t).unwrap_or(0);
            self.note_sync_discharge(asize);
            let _ = self.dirty_asize.fetch_update(Ordering::Release, Ordering::Relaxed, |v| Some(v.saturating_sub(asize)));
        }
        let done: Vec<Txg> = m.blocks.range(..=txg).map(|(&t, _)| t).collect();
        for t in done {
            m.blocks.remove(&t);
        }
    }

    /// (raw size, free now, freed but in the defer window), without the
    /// allocator's lock (the sync thread holds it while it places a txg).
    fn raw_space(&self) -> (u64, u64, u64) {
        let t = self.io.alloc.totals();
        (t.total, t.free, t.deferred)
    }

    /// Can `asize` more raw bytes join the open txg? `reserve` is the share
    /// of the slop that must stay untouched: the whole slop for a writer
    /// reserving ahead, half of it for the check inside the txg (other
    /// writers may have reserved meanwhile).
    fn fits(&self, asize: u64, reserve: u64) -> bool {
        // The charges first (Acquire), then the credit: see `sync_credit`.
        let dirty = self.dirty_asize.load(Ordering::Acquire);
        let (_, free, _) = self.raw_space();
        (free + self.sync_credit(free)).saturating_sub(reserve).saturating_sub(dirty) >= asize
    }

    /// A txg being written takes its blocks out of the free space before
    /// its charges leave `dirty_asize` (at publish): what it allocated so
    /// far, up to the charges there were when it began less those given
    /// back since, counts once, not twice. Without this a writer checking
    /// during a sync saw the pool short by up to the whole txg and got
    /// `NoSpace` with room to spare; and while the credit ended before
    /// publish gave the charges back, a fresh pool's first fill was
    /// refused at 61% (full_pool, one run in seven). Space taken meanwhile
    /// outside the sync (intent-log blocks, charged to nothing) is not the
    /// sync's and earns no credit. Callers load `dirty_asize` (Acquire)
    /// before calling this: a charge is noted given back before it leaves
    /// `dirty_asize`, so a charge seen gone is never credited as well.
    fn sync_credit(&self, free_now: u64) -> u64 {
        let charge = self.sync_charge_start.load(Ordering::Acquire);
        if charge == 0 {
            return 0;
        }
        let left = charge.saturating_sub(self.sync_discharged.load(Ordering::Acquire));
        let taken = self.sync_free_start.load(Ordering::Acquire).saturating_sub(free_now);
        taken.saturating_sub(self.sync_other_alloc.load(Ordering::Acquire)).min(left)
    }

    /// The syncing txg gives back `asize` of its charges: called before
    /// they leave `dirty_asize` (see `sync_credit`).
    pub(crate) fn note_sync_discharge(&self, asize: u64) {
        self.sync_discharged.fetch_add(asize, Ordering::AcqRel);
    }

    /// A txg's sync begins, before it allocates anything: called with the
    /// txg switch's write lock held, so no writer of the next txg has
    /// charged anything yet. Not under the allocator's lock: an
    /// intent-log block allocated while this runs can be in the starting
    /// free space and not counted in `sync_other_alloc` (its count is
    /// noted inside the allocator's lock, the free total updated as the
    /// lock is let go), and is then credited to the sync: one log block at
    /// most per sync, which the half slop every check inside a txg leaves
    /// untouched covers many times over.
    pub(crate) fn sync_space_begin(&self) {
        let (_, free, _) = self.raw_space();
        self.sync_other_alloc.store(0, Ordering::Release);
        self.sync_discharged.store(0, Ordering::Release);
        self.sync_free_start.store(free, Ordering::Release);
        self.sync_charge_start.store(self.dirty_asize.load(Ordering::Acquire), Ordering::Release);
    }

    /// Space taken outside the sync while it runs (intent-log blocks):
    /// called under the allocator's lock, right after the allocation.
    pub(crate) fn note_other_alloc(&self, bytes: u64) {
        self.sync_other_alloc.fetch_add(bytes, Ordering::AcqRel);
    }

    /// A txg's sync ends: once it has published and given its charges
    /// back, or when it fails or panics.
    pub(crate) fn sync_space_end(&self) {
        self.sync_charge_start.store(0, Ordering::Release);
    }

    /// The check inside a txg before new data is dirtied (see the module
    /// doc): refused only when even half the slop would be eaten.
    pub(crate) fn check_space(&self, asize: u64) -> Result<()> {
        self.check_suspended()?;
        let (size, _, _) = self.raw_space();
        if !self.fits(asize, slop_bytes(size) / 2) {
            return Err(self.refuse(NoSpaceSite::InTxg));
        }
        Ok(())
    }

    /// Waits, outside any txg hold, until `asize` raw bytes fit (syncing
    /// txgs while dirty data or deferred frees may make room), or answers
    /// `NoSpace` when nothing pending can.
    pub(crate) fn reserve_space(self: &std::sync::Arc<Self>, asize: u64) -> Result<()> {
        let mut synced_pending = false;
        let mut condensed = false;
        let mut waited_for: Option<u64> = None;
        // Room for a wait on a returning delete, a condensed space map and
        // a whole defer window after each: the loop ends early when the
        // room is there or cannot come.
        for _ in 0..3 * (crate::pool::DEFER_TXGS + 2) {
            self.check_suspended()?;
            let (size, free, deferred) = self.raw_space();
            let slop = slop_bytes(size);
            // A mass delete is on its way back (frees in the defer window or
            // not yet written, more than the slop and more than a sixteenth
            // of what is free) and what is free now is mostly holes (less
            // than half of it in extents of `LARGE_EXTENT` or more): let it
            // come back first, as long as each txg brings some of it back.
            // Written now, into the holes between what is still being
            // freed, blocks would be split into gang pieces and keep that
            // cost for good. Where most of what is free lies in large
            // extents (a pool rewriting its blocks, whose old copies wait
            // out the defer window txg after txg, with room to spare),
            // nothing would be ganged and writers go on: waiting there
            // stalled every writer once per few txgs (NBD random writes at
            // QD32 fell to a few hundred IOPS in those seconds).
            let returning = deferred + self.pending_frees();
            let progressing = waited_for.is_none_or(|before| returning < before);
            let holes = || self.io.alloc.totals().large_free < free / 2;
            if returning > slop && returning * 16 > free && progressing && holes() {
                waited_for = Some(returning);
                crate::pool::sync_and_wait(self)?;
                continue;
            }
            if self.fits(asize, slop) {
                return Ok(());
            }
            // Every deferred free back and the dirty data costing nothing
            // would make room: write txgs until it does.
            let could = (free + deferred).saturating_sub(slop) >= asize;
            // Else only frees not yet written (deletes in the open txg)
            // can: write them once and look again.
            let pending = !self.dirty_objsets.lock().is_empty();
            if !could && (synced_pending || !pending) {
                // The space map log's blocks, when a condensed map would
                // be much smaller, are space too: condense once and wait
                // for its old blocks to come back, or the space would turn
                // up a few txgs later on its own (ENOSPC a passing state).
                if !condensed && self.spacemap_would_shrink() {
                    condensed = true;
                    self.condense_wanted.store(true, Ordering::Release);
                    crate::pool::sync_and_wait(self)?;
                    continue;
                }
                return Err(self.refuse(NoSpaceSite::Reserve));
            }
            synced_pending |= !could;
            crate::pool::sync_and_wait(self)?;
        }
        Err(self.refuse(NoSpaceSite::ReserveWaitedOut))
    }

    /// An ENOSPC answer, counted by where it was given.
    fn refuse(&self, site: NoSpaceSite) -> ObjError {
        self.nospace[site as usize].fetch_add(1, Ordering::Relaxed);
        ObjError::NoSpace
    }

    /// ENOSPC answers so far, by site (`ObjPool::nospace_refusals`).
    pub(crate) fn nospace_refusals(&self) -> crate::NoSpaceRefusals {
        let n = |site: NoSpaceSite| self.nospace[site as usize].load(Ordering::Relaxed);
        crate::NoSpaceRefusals {
            in_txg: n(NoSpaceSite::InTxg),
            reserve: n(NoSpaceSite::Reserve),
            reserve_waited_out: n(NoSpaceSite::ReserveWaitedOut),
        }
    }

    /// Would the next sync condense the space map log if a writer asked?
    fn spacemap_would_shrink(&self) -> bool {
        let records = self.root.lock().spacemap_records;
        let extents = crate::pool::spacemap_extents(&self.io.alloc.lock());
        crate::pool::condense_now(records, extents, true)
    }

    /// Should a new transaction wait for the txg to sync because the dirty
    /// charges have reached what free space can take (less half the slop)?
    pub(crate) fn space_full(&self) -> bool {
        let dirty = self.dirty_asize.load(Ordering::Acquire);
        if dirty == 0 {
            return false;
        }
        let (size, free, _) = self.raw_space();
        dirty >= (free + self.sync_credit(free)).saturating_sub(slop_bytes(size) / 2)
    }

    /// Space as users see it (raw bytes; deflate for user bytes).
    pub(crate) fn space(&self) -> PoolSpace {
        let (size, free, deferred) = self.raw_space();
        let free_total = (free + deferred).min(size);
        PoolSpace {
            size,
            alloc: size - free_total,
            free: free_total,
            available: free_total.saturating_sub(slop_bytes(size)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slop_is_a_thirty_second_within_bounds() {
        assert_eq!(slop_bytes(1 << 30), 32 << 20);
        assert_eq!(slop_bytes(64 << 20), 4 << 20);
        assert_eq!(slop_bytes(6 << 20), 3 << 20);
        assert_eq!(slop_bytes(64 << 40), 128 << 30);
    }

    fn top(kind: tarn_vdev::TopKind, n: usize, ashift: u8) -> tarn_vdev::TopConfig {
        tarn_vdev::TopConfig {
            class: Default::default(), id: 0,
            guid: 1,
            kind,
            ashift,
            asize: 1 << 30,
            children: (0..n).map(|i| tarn_vdev::LeafConfig::new(i as u64 + 1, format!("d{i}"))).collect(),
        }
    }

    fn ratio(t: tarn_vdev::TopConfig) -> f64 {
        let config = tarn_vdev::PoolConfig {
            name: "t".into(),
            pool_guid: 1,
            version: 1,
            state: tarn_vdev::PoolState::Active,
            hostname: "h".into(),
            create_txg: 1,
            top: vec![t],
            properties: Default::default(),
            spares: vec![],
            cache: vec![],
            generation: 1,
            features: Default::default(),
        };
        let (n, d) = deflate_ratio(&config);
        n as f64 / d as f64
    }

    /// The story: deflating by the ideal (N-p)/N overstated raidz space by
    /// the padding of variable-width stripes (3% on a 4-wide raidz1, 5.5%
    /// on an 8-wide raidz2 at ashift 12).
    #[test]
    fn raidz_deflates_by_the_real_allocation_of_a_128k_block() {
        use tarn_vdev::TopKind;
        assert_eq!(ratio(top(TopKind::Mirror, 2, 12)), 1.0);
        let z1 = ratio(top(TopKind::Raidz { parity: 1 }, 4, 12));
        assert!((z1 - 128.0 / 176.0).abs() < 1e-5, "raidz1 x4: {z1}");
        assert!(z1 < 0.75 * 0.98);
        let z2 = ratio(top(TopKind::Raidz { parity: 2 }, 8, 12));
        assert!(z2 < 0.75 * 0.95, "raidz2 x8: {z2}");
    }
}
