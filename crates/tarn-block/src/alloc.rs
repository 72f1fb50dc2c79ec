//! Space allocation: per top-level vdev, a tree of free extents.
//!
//! Invariants:
//! - Every allocation and free made while syncing txg T is appended to the
//!   txg's record list, which the space map log persists with txg T.
//! - A free made in txg F goes to `deferred[F]` and returns to the free tree
//!   only after txg F + DEFER_TXGS has synced, so the trees of the last
//!   DEFER_TXGS uberblocks stay intact on disk (rewind with `import -F`).
//! - An extent is in exactly one of: free tree, deferred list, checkpoint
//!   hold, trim in flight, allocated.
//! - While the pool has a checkpoint (taken after txg C), a block born at
//!   or before C that is freed is *held*: recorded (`CheckpointFree`) and
//!   kept allocated, never deferred and never reused, until the checkpoint
//!   is discarded (its extents are then freed like any other) or the pool
//!   is rewound to it (the checkpoint's own space map knows nothing of
//!   later frees). Checked in release builds where it can break: a held
//!   or in-flight trim extent is never handed out, never released from the
//!   defer window, never held twice.
//! - A trim in flight takes its extents out of the free tree (without a
//!   record: they are free on disk) until the trim returns, so nothing is
//!   allocated in a range while the device is told it is empty.
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
    /// Freed in the given txg while the checkpoint holds it: stays
    /// allocated until the checkpoint is discarded.
    CheckpointFree(u64),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub kind: RecordKind,
    pub extent: Extent,
}

/// A free extent at least this long holds any block whole (the largest
/// record, 1 MiB, with raidz parity fits a few times over); free space in
/// shorter extents is holes, where large blocks may have to be ganged.
pub const LARGE_EXTENT: u64 = 4 << 20;

#[derive(Clone, Debug)]
pub struct VdevSpace {
    pub asize: u64,
    /// start -> length
    free: BTreeMap<u64, u64>,
    pub free_bytes: u64,
    /// Bytes of `free` in extents of at least [`LARGE_EXTENT`].
    pub large_free: u64,
    cursor: u64,
    /// Metadata is placed at or below this (it moves down).
    meta_cursor: u64,
    /// A log vdev (SLOG): `alloc` never places blocks here (the intent
    /// log places its blocks with `alloc_on`), and its bytes are not in
    /// the totals.
    pub log: bool,
}

impl VdevSpace {
    pub fn new(asize: u64) -> VdevSpace {
        let mut v = VdevSpace { asize, free: BTreeMap::new(), free_bytes: asize, large_free: 0, cursor: 0, meta_cursor: asize, log: false };
        if asize > 0 {
            v.put(0, asize);
        }
        v
    }

    /// Every change to the free tree goes through these two, which keep
    /// `large_free` true.
    fn put(&mut self, start: u64, len: u64) {
        if len >= LARGE_EXTENT {
            self.large_free += len;
        }
        self.free.insert(start, len);
    }

    fn take(&mut self, start: u64) {
        if let Some(len) = self.free.remove(&start) {
            if len >= LARGE_EXTENT {
                self.large_free -= len;
            }
        }
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
        self.take(s);
        if s < start {
            self.put(s, start - s);
        }
        if start + len < s + l {
            self.put(start + len, s + l - (start + len));
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
                self.take(s);
                new_len += l;
            }
        }
        if new_start != start {
            self.take(new_start);
        }
        self.put(new_start, new_len);
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

/// Extents keyed by (vdev, offset), with their lengths.
type ExtentMap = BTreeMap<(u32, u64), u64>;

/// Whether `e` overlaps an extent of `map`.
fn overlaps(map: &ExtentMap, e: &Extent) -> bool {
    let end = e.offset.saturating_add(e.len);
    map.range((e.vdev, 0)..(e.vdev, end)).next_back().is_some_and(|(&(_, o), &l)| o + l > e.offset)
}

/// Whether `e` (already in `map`) overlaps another extent of `map`.
fn overlaps_other(map: &ExtentMap, e: &Extent) -> bool {
    let before = map.range(..(e.vdev, e.offset)).next_back().is_some_and(|(&(v, o), &l)| v == e.vdev && o + l > e.offset);
    let after = map.range((e.vdev, e.offset + 1)..).next().is_some_and(|(&(v, o), _)| v == e.vdev && o < e.offset + e.len);
    before || after
}

/// Autotrim keeps at most this many released extents waiting (a manual
/// trim covers whatever it drops).
const AUTOTRIM_QUEUE_MAX: usize = 1 << 20;

#[derive(Clone, Debug)]
pub struct Allocator {
    pub vdevs: Vec<VdevSpace>,
    pub deferred: BTreeMap<u64, Vec<Extent>>,
    /// The bytes of `deferred` (asked for on every write: space checks).
    deferred_total: u64,
    /// Records of the txg being synced.
    pub records: Vec<Record>,
    rotor: usize,
    rotor_bytes: u64,
    /// The txg the pool's checkpoint was taken after, if it has one.
    checkpoint_txg: Option<u64>,
    /// Extents the checkpoint holds (freed since it was taken, born before).
    held: ExtentMap,
    held_bytes: u64,
    /// Extents out of the free tree while a trim of them is in flight.
    trimming: ExtentMap,
    trimming_bytes: u64,
    /// With autotrim on: extents released from the defer window, to trim.
    autotrim: Option<Vec<Extent>>,
    /// Extents taken out of the free tree with their allocation record
    /// held back (the intent log's blocks, written outside syncing
    /// context: `hold_back`). On disk they are free until `record_held`
    /// records them, so a condensed space map must not list them.
    unrecorded: ExtentMap,
}

/// Bytes written to one top-level vdev before the rotor moves on.
const ROTOR_CHUNK: u64 = 1 << 20;

impl Allocator {
    pub fn new(asizes: &[u64]) -> Allocator {
        Allocator {
            vdevs: asizes.iter().map(|&a| VdevSpace::new(a)).collect(),
            deferred: BTreeMap::new(),
            deferred_total: 0,
            records: Vec::new(),
            rotor: 0,
            rotor_bytes: 0,
            checkpoint_txg: None,
            held: BTreeMap::new(),
            held_bytes: 0,
            trimming: BTreeMap::new(),
            unrecorded: BTreeMap::new(),
            trimming_bytes: 0,
            autotrim: None,
        }
    }

    /// Space of a newly added top-level vdev (the next id).
    pub fn add_vdev(&mut self, asize: u64) {
        self.vdevs.push(VdevSpace::new(asize));
    }

    /// Marks vdev `v` as a log vdev (see [`VdevSpace::log`]).
    pub fn set_log(&mut self, v: usize) {
        if let Some(vs) = self.vdevs.get_mut(v) {
            vs.log = true;
        }
        let vdevs = &self.vdevs;
        self.deferred_total = self.deferred.values().flatten().filter(|e| !Self::is_log(vdevs, e.vdev)).map(|e| e.len).sum();
    }

    fn is_log(vdevs: &[VdevSpace], v: u32) -> bool {
        vdevs.get(v as usize).is_some_and(|vs| vs.log)
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
                if (pass == 0 && avoid.contains(&(v as u32))) || self.vdevs[v].log {
                    continue;
                }
                let len = len_for(v);
                let vs = &mut self.vdevs[v];
                let placed = if metadata { vs.alloc_back(len, align_for(v)) } else { vs.alloc(len, align_for(v)) };
                if let Some(off) = placed {
                    let e = Extent { vdev: v as u32, offset: off, len };
                    assert!(
                        !overlaps(&self.held, &e) && !overlaps(&self.trimming, &e),
                        "allocator handed out {e:?}, which a checkpoint holds or a trim is using"
                    );
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

    /// Allocate `len` bytes on vdev `v` only (gang pieces go on their
    /// header's vdev).
    pub fn alloc_on(&mut self, v: usize, len: u64, align: u64, metadata: bool) -> Option<Extent> {
        let vs = self.vdevs.get_mut(v)?;
        let off = if metadata { vs.alloc_back(len, align) } else { vs.alloc(len, align) }?;
        let e = Extent { vdev: v as u32, offset: off, len };
        assert!(
            !overlaps(&self.held, &e) && !overlaps(&self.trimming, &e),
            "allocator handed out {e:?}, which a checkpoint holds or a trim is using"
        );
        self.records.push(Record { kind: RecordKind::Alloc, extent: e });
        Some(e)
    }

    /// Holds back the allocation record of `e`, just allocated: the block
    /// is written outside syncing context, and its allocation is recorded
    /// later, in the txg that makes it reachable (`record_held`), or the
    /// extent given back (`return_held`).
    pub fn hold_back(&mut self, e: Extent) {
        let i = self.records.iter().rposition(|r| r.kind == RecordKind::Alloc && r.extent == e).expect("allocation recorded");
        self.records.remove(i);
        let fresh = self.unrecorded.insert((e.vdev, e.offset), e.len).is_none();
        assert!(fresh, "{e:?} held back twice");
    }

    /// Records the allocation of an extent `hold_back` held back, in the
    /// txg being synced (syncing context).
    pub fn record_held(&mut self, e: Extent) {
        let held = self.unrecorded.remove(&(e.vdev, e.offset));
        assert_eq!(held, Some(e.len), "{e:?} recorded as allocated but it was not held back");
        self.records.push(Record { kind: RecordKind::Alloc, extent: e });
    }

    /// Puts an extent `hold_back` held back into the free tree again (it
    /// was never written or named).
    pub fn return_held(&mut self, e: Extent) {
        let held = self.unrecorded.remove(&(e.vdev, e.offset));
        assert_eq!(held, Some(e.len), "{e:?} given back but it was not held back");
        if let Some(v) = self.vdevs.get_mut(e.vdev as usize) {
            v.add_free(e.offset, e.len);
        }
    }

    /// Take back an allocation of the txg being synced that was never
    /// written (a placement abandoned for another): free at once, its
    /// record gone.
    pub fn unalloc(&mut self, e: Extent) {
        if let Some(i) = self.records.iter().rposition(|r| r.kind == RecordKind::Alloc && r.extent == e) {
            self.records.remove(i);
            if let Some(v) = self.vdevs.get_mut(e.vdev as usize) {
                let fresh = v.add_free(e.offset, e.len);
                assert!(fresh, "{e:?} taken back but part of it was free");
            }
        }
    }

    /// Free an extent of a block born in txg `birth`, in txg `txg`:
    /// recorded now, reusable after DEFER_TXGS — or held for the
    /// checkpoint if the block is older than it.
    pub fn free(&mut self, e: Extent, txg: u64, birth: u64) {
        if self.checkpoint_txg.is_some_and(|c| birth <= c) {
            let fresh = self.held.insert((e.vdev, e.offset), e.len).is_none();
            assert!(fresh, "{e:?} (born in txg {birth}) freed again while the checkpoint holds it");
            self.held_bytes += e.len;
            self.records.push(Record { kind: RecordKind::CheckpointFree(txg), extent: e });
            return;
        }
        self.records.push(Record { kind: RecordKind::Free(txg), extent: e });
        self.defer(txg, e);
    }

    /// Puts `e`, freed in `txg`, into the defer window.
    fn defer(&mut self, txg: u64, e: Extent) {
        self.deferred.entry(txg).or_default().push(e);
        if !Self::is_log(&self.vdevs, e.vdev) {
            self.deferred_total += e.len;
        }
    }

    /// Called after txg `synced` is on disk: release frees that are old enough.
    pub fn release_deferred(&mut self, synced: u64) {
        let keep_from = synced.saturating_sub(DEFER_TXGS) + 1;
        let old: Vec<u64> = self.deferred.range(..keep_from).map(|(&t, _)| t).collect();
        for t in old {
            for e in self.deferred.remove(&t).unwrap_or_default() {
                if !Self::is_log(&self.vdevs, e.vdev) {
                    self.deferred_total = self.deferred_total.checked_sub(e.len).expect("deferred bytes counted below what the defer window holds");
                }
                assert!(
                    !overlaps(&self.held, &e) && !overlaps(&self.trimming, &e),
                    "{e:?} leaves the defer window but a checkpoint holds it or a trim is using it"
                );
                if let Some(v) = self.vdevs.get_mut(e.vdev as usize) {
                    v.add_free(e.offset, e.len);
                }
                if let Some(queue) = self.autotrim.as_mut() {
                    if queue.len() < AUTOTRIM_QUEUE_MAX {
                        queue.push(e);
                    }
                }
            }
        }
    }

    /// The txg the checkpoint was taken after, if there is one.
    pub fn checkpoint_txg(&self) -> Option<u64> {
        self.checkpoint_txg
    }

    /// From now on, frees of blocks born at or before `txg` are held.
    pub fn set_checkpoint(&mut self, txg: u64) {
        assert!(self.checkpoint_txg.is_none(), "a checkpoint exists already");
        self.checkpoint_txg = Some(txg);
    }

    /// Discards the checkpoint in txg `txg`: every held extent is freed
    /// (deferred like any free). Returns the bytes freed.
    pub fn discard_checkpoint(&mut self, txg: u64) -> u64 {
        self.checkpoint_txg = None;
        let held = std::mem::take(&mut self.held);
        let bytes = std::mem::take(&mut self.held_bytes);
        for ((vdev, offset), len) in held {
            let e = Extent { vdev, offset, len };
            self.records.push(Record { kind: RecordKind::Free(txg), extent: e });
            self.defer(txg, e);
        }
        bytes
    }

    /// Bytes held only by the checkpoint (`pool list`'s CKPOINT).
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes
    }

    pub fn held_extents(&self) -> Vec<Extent> {
        self.held.iter().map(|(&(vdev, offset), &len)| Extent { vdev, offset, len }).collect()
    }

    /// Takes the free parts of `[start, start + len)` of `vdev` (pieces of
    /// at least `min_len` bytes) out of the free tree for a trim; returns
    /// them. Nothing is allocated there until [`Allocator::end_trim`].
    pub fn begin_trim(&mut self, vdev: u32, start: u64, len: u64, min_len: u64) -> Vec<(u64, u64)> {
        let Some(v) = self.vdevs.get_mut(vdev as usize) else { return vec![] };
        let end = start.saturating_add(len).min(v.asize);
        let pieces: Vec<(u64, u64)> = v
            .free
            .range(..end)
            .rev()
            .take_while(|(&s, &l)| s + l > start)
            .map(|(&s, &l)| (s.max(start), (s + l).min(end)))
            .filter(|&(a, b)| b > a && b - a >= min_len.max(1))
            .map(|(a, b)| (a, b - a))
            .collect();
        for &(a, l) in &pieces {
            let removed = v.remove_free(a, l);
            assert!(removed, "free piece [{a}, +{l}) of vdev {vdev} vanished under the allocator lock");
            self.trimming.insert((vdev, a), l);
            self.trimming_bytes += l;
        }
        pieces
    }

    /// The first free byte of `vdev` at or after `pos` (None: nothing free
    /// from there to the end).
    pub fn next_free(&self, vdev: u32, pos: u64) -> Option<u64> {
        let v = self.vdevs.get(vdev as usize)?;
        if let Some((&s, &l)) = v.free.range(..=pos).next_back() {
            if s + l > pos {
                return Some(pos);
            }
        }
        v.free.range(pos..).next().map(|(&s, _)| s)
    }

    /// Returns the pieces [`Allocator::begin_trim`] took to the free tree.
    pub fn end_trim(&mut self, vdev: u32, pieces: &[(u64, u64)]) {
        for &(a, l) in pieces {
            let was = self.trimming.remove(&(vdev, a));
            assert_eq!(was, Some(l), "trim of [{a}, +{l}) on vdev {vdev} ended twice");
            self.trimming_bytes -= l;
            if let Some(v) = self.vdevs.get_mut(vdev as usize) {
                let added = v.add_free(a, l);
                assert!(added, "trimmed piece [{a}, +{l}) of vdev {vdev} became allocated during its trim");
            }
        }
    }

    /// Bytes out of the free tree for trims in flight.
    pub fn trimming_bytes(&self) -> u64 {
        self.trimming_bytes
    }

    /// autotrim on (queue what leaves the defer window) or off.
    pub fn set_autotrim(&mut self, on: bool) {
        match (on, self.autotrim.is_some()) {
            (true, false) => self.autotrim = Some(Vec::new()),
            (false, true) => self.autotrim = None,
            _ => {}
        }
    }

    /// Extents released since the last call, for autotrim.
    pub fn take_autotrim(&mut self) -> Vec<Extent> {
        self.autotrim.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Records that rebuild this allocator's state from nothing (a
    /// condensed space map): allocated extents, deferred frees, held
    /// extents. Trims in flight count as free (they are, on disk).
    pub fn snapshot_records(&self) -> Vec<Record> {
        // Extents whose allocation is held back are free on record: the
        // record that allocates them comes later (`record_held`), and a
        // snapshot that listed them would make that one a second.
        let mut out: Vec<Record> =
            self.allocated_extents_except(&self.unrecorded).into_iter().map(|e| Record { kind: RecordKind::Alloc, extent: e }).collect();
        for (&t, es) in &self.deferred {
            out.extend(es.iter().map(|e| Record { kind: RecordKind::Free(t), extent: *e }));
        }
        // The free txg of a held extent does not matter once it is held.
        let txg = self.checkpoint_txg.unwrap_or(0);
        out.extend(self.held_extents().into_iter().map(|e| Record { kind: RecordKind::CheckpointFree(txg), extent: e }));
        out
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
                // A discarded checkpoint frees exactly what it held.
                if let Some(len) = self.held.remove(&(r.extent.vdev, r.extent.offset)) {
                    if len != r.extent.len {
                        return Err(format!("space map frees {:?}, part of a held extent of {len} bytes", r.extent));
                    }
                    self.held_bytes -= len;
                }
                if txg.saturating_add(DEFER_TXGS) > ub_txg {
                    self.defer(txg, r.extent);
                } else if !v.add_free(r.extent.offset, r.extent.len) {
                    return Err(format!("space map frees {:?} twice", r.extent));
                }
            }
            RecordKind::CheckpointFree(_) => {
                let e = r.extent;
                let end = e.offset.checked_add(e.len).filter(|&end| end <= v.asize);
                let is_free = v.free.range(..end.unwrap_or(u64::MAX)).next_back().is_some_and(|(&s, &l)| s + l > e.offset);
                if end.is_none() || is_free {
                    return Err(format!("space map holds {e:?} for the checkpoint, but it is not allocated"));
                }
                if self.held.insert((e.vdev, e.offset), e.len).is_some() || overlaps_other(&self.held, &e) {
                    return Err(format!("space map holds {e:?} for the checkpoint twice"));
                }
                self.held_bytes += e.len;
            }
        }
        Ok(())
    }

    pub fn take_records(&mut self) -> Vec<Record> {
        std::mem::take(&mut self.records)
    }

    /// Free bytes of the normal vdevs (log vdevs are not pool space).
    pub fn free_bytes(&self) -> u64 {
        self.vdevs.iter().filter(|v| !v.log).map(|v| v.free_bytes).sum()
    }

    /// Free bytes in extents of at least [`LARGE_EXTENT`] (not log vdevs'):
    /// space a block of any size is written to whole.
    pub fn large_free_bytes(&self) -> u64 {
        self.vdevs.iter().filter(|v| !v.log).map(|v| v.large_free).sum()
    }

    /// Size of the normal vdevs.
    pub fn total_bytes(&self) -> u64 {
        self.vdevs.iter().filter(|v| !v.log).map(|v| v.asize).sum()
    }

    pub fn deferred_bytes(&self) -> u64 {
        self.deferred_total
    }

    /// Allocated extents (deferred frees and checkpoint holds count as
    /// allocated; trims in flight as free) of every vdev.
    pub fn allocated_extents(&self) -> Vec<Extent> {
        self.allocated_extents_except(&ExtentMap::new())
    }

    /// `allocated_extents`, counting `also_free` as free.
    fn allocated_extents_except(&self, also_free: &ExtentMap) -> Vec<Extent> {
        let mut out = Vec::new();
        for (i, v) in self.vdevs.iter().enumerate() {
            let mut pos = 0;
            let mut free: Vec<(u64, u64)> = v.free_extents().collect();
            free.extend(self.trimming.range((i as u32, 0)..=(i as u32, u64::MAX)).map(|(&(_, o), &l)| (o, l)));
            free.extend(also_free.range((i as u32, 0)..=(i as u32, u64::MAX)).map(|(&(_, o), &l)| (o, l)));
            free.sort_unstable();
            for (s, l) in free {
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
        a.free(e1, 10, 9);
        a.free(e2, 11, 9);
        assert_eq!(a.deferred_bytes(), 8192);
        a.release_deferred(12);
        assert_eq!(a.free_bytes(), (2 << 20) - 8192);
        a.release_deferred(10 + DEFER_TXGS);
        assert_eq!(a.free_bytes(), (2 << 20) - 4096);
        assert_eq!(a.deferred_bytes(), 4096, "e2 still in the defer window");
        a.release_deferred(11 + DEFER_TXGS);
        assert_eq!(a.deferred_bytes(), 0);
        assert!(!a.vdevs[e1.vdev as usize].add_free(e1.offset, e1.len), "double free refused");
        assert_eq!(a.vdevs[e1.vdev as usize].extent_count(), 1, "merged back");
    }

    /// `large_free` (what `reserve_space` tells holes from room by) stays
    /// the sum of the free extents of at least `LARGE_EXTENT` through
    /// allocations of every size, frees, splits and merges.
    #[test]
    fn large_free_follows_the_free_tree() {
        use rand::Rng;
        let run = tarn_testkit::seeded!(200);
        let mut rng = run.rng(0);
        let mut a = Allocator::new(&[64 << 20, 3 << 20]);
        let mut live = Vec::new();
        let recount = |a: &Allocator| -> u64 {
            a.vdevs.iter().flat_map(|v| v.free_extents()).filter(|&(_, l)| l >= LARGE_EXTENT).map(|(_, l)| l).sum()
        };
        assert_eq!(a.large_free_bytes(), 64 << 20, "the 3 MiB vdev is one extent, but not a large one");
        for step in 0..run.count {
            if live.is_empty() || rng.gen_bool(0.6) {
                let len = 4096u64 << rng.gen_range(0..11);
                if let Some(e) = a.alloc(&|_| len, &|_| 4096, &[], false) {
                    live.push(e);
                }
            } else {
                let e = live.swap_remove(rng.gen_range(0..live.len()));
                assert!(a.vdevs[e.vdev as usize].add_free(e.offset, e.len));
            }
            assert_eq!(a.large_free_bytes(), recount(&a), "step {step}");
        }
    }

    /// The intent log allocates blocks outside syncing context and records
    /// them later. A space map condensed in between must show them free,
    /// or their later record allocates them a second time and the pool no
    /// longer imports (found by `bench/encryption.sh`: 1 GiB written, one
    /// fsync, export, import, a few rounds: "space map allocates … twice").
    #[test]
    fn a_condensed_space_map_leaves_held_back_allocations_to_their_record() {
        let mut a = Allocator::new(&[1 << 20]);
        let kept = a.alloc(&|_| 8192, &|_| 4096, &[], false).unwrap();
        let held = a.alloc(&|_| 8192, &|_| 4096, &[], false).unwrap();
        a.hold_back(held);
        let given = a.alloc(&|_| 4096, &|_| 4096, &[], false).unwrap();
        a.hold_back(given);
        assert_eq!(a.take_records().len(), 1, "only the first allocation is on record");
        // Condensed while `held` and `given` are held back.
        let snapshot = a.snapshot_records();
        a.record_held(held);
        a.return_held(given);
        let later = a.take_records();
        assert_eq!(later.len(), 1);
        // An import replays the snapshot, then the later record.
        let mut b = Allocator::new(&[1 << 20]);
        for r in snapshot.iter().chain(&later) {
            b.replay(r, 100).unwrap_or_else(|e| panic!("{r:?}: {e}"));
        }
        assert_eq!(b.free_bytes(), a.free_bytes(), "the import sees what the pool had");
        assert_eq!(b.allocated_extents(), vec![Extent { vdev: 0, offset: kept.offset, len: 16384 }]);
        assert_eq!(a.free_bytes(), (1 << 20) - 16384, "the extent given back is free again");
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
        // A freed metadata block's room is found again by metadata once the
        // cursor has gone round.
        let mut c = Allocator::new(&[64 << 10]);
        let blocks: Vec<Extent> = (0..4).map(|_| c.alloc(&|_| 16384, &|_| 4096, &[], true).unwrap()).collect();
        c.free(blocks[1], 1, 0);
        c.release_deferred(1 + DEFER_TXGS);
        assert_eq!(c.alloc(&|_| 16384, &|_| 4096, &[], true).unwrap().offset, blocks[1].offset);
        // Both kinds use the whole vdev when the other end is full.
        let mut b = Allocator::new(&[64 << 10]);
        for _ in 0..16 {
            assert!(b.alloc(&|_| 4096, &|_| 4096, &[], true).is_some());
        }
        assert!(b.alloc(&|_| 4096, &|_| 4096, &[], false).is_none());
    }

    fn replayed(a: &Allocator, ub_txg: u64) -> Allocator {
        let mut b = Allocator::new(&a.vdevs.iter().map(|v| v.asize).collect::<Vec<_>>());
        for r in a.snapshot_records() {
            b.replay(&r, ub_txg).unwrap();
        }
        b
    }

    #[test]
    fn checkpoint_holds_old_blocks_until_discarded() {
        let mut a = Allocator::new(&[1 << 20]);
        let old = a.alloc(&|_| 8192, &|_| 4096, &[], false).unwrap();
        a.set_checkpoint(5);
        let young = a.alloc(&|_| 4096, &|_| 4096, &[], false).unwrap();
        a.take_records();
        a.free(old, 7, 5);
        a.free(young, 7, 6);
        let kinds: Vec<RecordKind> = a.take_records().iter().map(|r| r.kind).collect();
        assert_eq!(kinds, vec![RecordKind::CheckpointFree(7), RecordKind::Free(7)]);
        a.release_deferred(7 + DEFER_TXGS);
        assert_eq!(a.held_bytes(), 8192);
        assert_eq!(a.free_bytes(), (1 << 20) - 8192, "the young block is free again, the old one held");
        // A condensed map and a replay keep the hold.
        let b = replayed(&a, 20);
        assert_eq!((b.held_bytes(), b.free_bytes()), (8192, (1 << 20) - 8192));
        // Nothing reuses the held space, however much is allocated.
        while let Some(e) = a.alloc(&|_| 4096, &|_| 4096, &[], false) {
            assert!(e.offset + e.len <= old.offset || e.offset >= old.offset + old.len, "{e:?} reuses held {old:?}");
        }
        let mut a = replayed(&b, 20);
        a.set_checkpoint(5);
        assert_eq!(a.discard_checkpoint(21), 8192);
        assert_eq!(a.held_bytes(), 0);
        assert!(matches!(a.take_records().as_slice(), [Record { kind: RecordKind::Free(21), .. }]));
        a.release_deferred(21 + DEFER_TXGS);
        assert_eq!(a.free_bytes(), 1 << 20);
    }

    #[test]
    fn replay_refuses_a_hold_of_free_space_or_twice() {
        let mut a = Allocator::new(&[1 << 20]);
        let e = Extent { vdev: 0, offset: 4096, len: 4096 };
        assert!(a.replay(&Record { kind: RecordKind::CheckpointFree(3), extent: e }, 9).is_err(), "not allocated");
        a.replay(&Record { kind: RecordKind::Alloc, extent: e }, 9).unwrap();
        a.replay(&Record { kind: RecordKind::CheckpointFree(3), extent: e }, 9).unwrap();
        assert!(a.replay(&Record { kind: RecordKind::CheckpointFree(3), extent: e }, 9).is_err(), "twice");
        // The discard's free releases it.
        a.replay(&Record { kind: RecordKind::Free(4), extent: e }, 9).unwrap();
        assert_eq!((a.held_bytes(), a.free_bytes()), (0, 1 << 20));
    }

    #[test]
    fn trims_take_free_pieces_out_and_put_them_back() {
        let mut a = Allocator::new(&[1 << 20]);
        let x = a.alloc(&|_| 65536, &|_| 4096, &[], false).unwrap();
        let y = a.alloc(&|_| 4096, &|_| 4096, &[], false).unwrap();
        a.free(x, 3, 2);
        a.release_deferred(3 + DEFER_TXGS);
        let pieces = a.begin_trim(0, 0, 1 << 20, 4096);
        assert_eq!(pieces, vec![(y.offset + 4096, (1 << 20) - y.offset - 4096), (0, 65536)]);
        assert_eq!(a.free_bytes(), 0);
        assert!(a.alloc(&|_| 4096, &|_| 4096, &[], false).is_none(), "nothing is allocated under a trim");
        let recs = a.snapshot_records();
        assert!(recs.iter().all(|r| r.kind == RecordKind::Alloc && r.extent == y), "a trim in flight is free on disk: {recs:?}");
        a.end_trim(0, &pieces);
        assert_eq!(a.free_bytes(), (1 << 20) - 4096);
        assert_eq!(a.vdevs[0].extent_count(), 2, "merged back");
    }

    #[test]
    fn autotrim_queues_what_leaves_the_defer_window() {
        let mut a = Allocator::new(&[1 << 20]);
        let x = a.alloc(&|_| 8192, &|_| 4096, &[], false).unwrap();
        a.free(x, 3, 1);
        a.release_deferred(3 + DEFER_TXGS);
        assert!(a.take_autotrim().is_empty(), "off");
        a.set_autotrim(true);
        let y = a.alloc(&|_| 8192, &|_| 4096, &[], false).unwrap();
        a.free(y, 9, 8);
        a.release_deferred(8 + DEFER_TXGS);
        assert!(a.take_autotrim().is_empty(), "still in the defer window");
        a.release_deferred(9 + DEFER_TXGS);
        assert_eq!(a.take_autotrim(), vec![y]);
    }
}
