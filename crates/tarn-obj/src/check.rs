//! The pool checker behind `tarn debug check`: walk every block pointer
//! reachable from the newest uberblock, verify every checksum, and compare
//! the space it references with what the allocator believes is allocated.

use std::collections::BTreeMap;

use tarn_block::{BlockPtr, Extent};

use crate::format::{DnodePhys, ObjsetPhys, DNODE_SIZE};
use crate::pool::{Shared, MOS_OBJSET_TABLE};
use crate::tree::{self, block_err};
use crate::{CheckReport, ObjError, Result};

struct Walker<'a> {
    s: &'a Shared,
    /// Every copy of every block reached, with the block's birth txg: a
    /// block shared by a snapshot and its head is reached twice and counted
    /// once.
    refs: Vec<(Extent, u64)>,
    /// The same for blocks of dataset object sets' trees (not the MOS,
    /// not object set roots): what the datasets' `used` adds up to.
    dataset_refs: Vec<(Extent, u64)>,
    /// Set while walking the trees of a dataset object set.
    in_dataset: bool,
    /// The intent log header of the object set walked last.
    last_log: crate::zil::LogHeader,
    /// Log headers of the object sets walked (their own, not a snapshot's
    /// copy of its origin's).
    logs: Vec<crate::zil::LogHeader>,
    /// Per object set of the table: its id and the range of `refs` its
    /// walk added.
    spans: Vec<(u64, std::ops::Range<usize>)>,
    report: CheckReport,
}

impl Walker<'_> {
    fn note(&mut self, bp: &BlockPtr) {
        self.report.blocks += 1;
        // A gang block's extents are its copies' headers and pieces.
        let extents = match self.s.io.extents_of(bp) {
            Ok(extents) => extents,
            Err(e) => {
                self.report.damaged.push(format!("gang block {:?}: {e}", bp.dva[0]));
                return;
            }
        };
        for extent in extents {
            let e = (extent, bp.birth);
            self.refs.push(e);
            if self.in_dataset {
                self.dataset_refs.push(e);
            }
        }
    }

    /// Reads a block to verify it: a sealed block by its checksum (no key
    /// here), every other one whole.
    fn read_verified(&self, bp: &BlockPtr) -> Result<Vec<u8>> {
        let read = if bp.is_encrypted() { self.s.io.read_phys(bp) } else { self.s.io.read_uncached(bp) };
        read.map_err(|e| ObjError::Io(e.to_string()))
    }

    /// Walk and verify one tree: every block pointer noted, every indirect
    /// block read by the walk; level-0 blocks too unless `read_level0` is
    /// false (the meta-dnode's: [`Walker::dnode_blocks`] reads them).
    fn tree(&mut self, what: &str, phys: &DnodePhys, read_level0: bool) {
        let mut seen = Vec::new();
        let r = tree::walk(&self.s.io, phys, &mut |bp, level| {
            seen.push(*bp);
            if level == 0 && read_level0 {
                self.read_verified(bp)?;
            }
            Ok(())
        });
        for bp in &seen {
            self.note(bp);
        }
        if let Err(e) = r {
            self.report.damaged.push(format!("{what}: {e}"));
        }
    }

    /// The dnode blocks of an object set, one by one: each that reads is
    /// returned with its block id; one that does not is reported with the
    /// objects it holds, and the walk goes on to the next (the objects of
    /// other dnode blocks are still checked).
    fn dnode_blocks(&mut self, name: &str, meta: &DnodePhys) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        for blkid in 0..meta.nblocks {
            // An indirect block that does not read: reported by the walk.
            let Ok(bp) = tree::lookup(&self.s.io, meta, blkid) else { continue };
            if bp.is_hole() {
                continue;
            }
            match self.read_verified(&bp) {
                Ok(block) => out.push((blkid, block)),
                Err(e) => {
                    let first = blkid * crate::format::DNODES_PER_BLOCK;
                    let last = first + crate::format::DNODES_PER_BLOCK - 1;
                    self.report.damaged.push(format!("{name} dnode block {blkid} (objects {first}-{last}): {e}"));
                }
            }
        }
        out
    }

    fn objset(&mut self, name: &str, root: &BlockPtr, keep_level0_of_table: bool) -> Result<Vec<u8>> {
        self.note(root);
        let data = match self.s.io.read_uncached(root) {
            Ok(d) => d,
            Err(e) => {
                self.report.damaged.push(format!("{name}: root block: {e}"));
                return Ok(Vec::new());
            }
        };
        let os = ObjsetPhys::decode(&data)?;
        self.last_log = os.log;
        self.report.objsets += 1;
        self.in_dataset = !keep_level0_of_table;
        let r = self.objset_trees(name, &os, keep_level0_of_table);
        self.in_dataset = false;
        r
    }

    fn objset_trees(&mut self, name: &str, os: &ObjsetPhys, keep_level0_of_table: bool) -> Result<Vec<u8>> {
        self.tree(&format!("{name} meta-dnode"), &os.meta, false);
        let mut table = Vec::new();
        for (blkid, block) in self.dnode_blocks(name, &os.meta) {
            for (i, chunk) in block.chunks_exact(DNODE_SIZE).enumerate() {
                let id = blkid * crate::format::DNODES_PER_BLOCK + i as u64;
                match DnodePhys::decode(chunk) {
                    Ok(d) if d.in_use() => {
                        self.tree(&format!("{name} object {id}"), &d, true);
                        if keep_level0_of_table && id == MOS_OBJSET_TABLE.0 {
                            let len = d.nblocks.saturating_mul(d.block_size as u64);
                            if len > 1 << 30 {
                                self.report.damaged.push(format!("{name} object-set table claims {len} bytes"));
                                continue;
                            }
                            let mut all = vec![0u8; len as usize];
                            for b in 0..d.nblocks {
                                let bp = tree::lookup(&self.s.io, &d, b)?;
                                if !bp.is_hole() {
                                    let x = self.s.io.read_uncached(&bp).map_err(block_err)?;
                                    let o = (b * d.block_size as u64) as usize;
                                    let n = x.len().min(all.len() - o);
                                    all[o..o + n].copy_from_slice(&x[..n]);
                                }
                            }
                            table = all;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => self.report.damaged.push(format!("{name} object {id}: {e}")),
                }
            }
        }
        Ok(table)
    }
}

/// Every block reachable from `mos_root` (the MOS, the object-set table,
/// every object set), verified; `refs` holds each copy with its birth.
fn walk_from<'a>(s: &'a Shared, mos_root: &BlockPtr) -> Walker<'a> {
    let mut w = Walker {
        s,
        refs: Vec::new(),
        dataset_refs: Vec::new(),
        in_dataset: false,
        last_log: Default::default(),
        logs: Vec::new(),
        spans: Vec::new(),
        report: CheckReport::default(),
    };
    match w.objset("MOS", mos_root, true) {
        Ok(table) => {
            for (i, chunk) in table.chunks_exact(tarn_block::BP_SIZE).enumerate() {
                match BlockPtr::decode(chunk) {
                    Ok(bp) if !bp.is_hole() => {
                        w.last_log = Default::default();
                        let start = w.refs.len();
                        if let Err(e) = w.objset(&format!("objset {i}"), &bp, false) {
                            w.report.damaged.push(format!("objset {i}: {e}"));
                        }
                        w.spans.push((i as u64, start..w.refs.len()));
                        if !w.last_log.is_empty() && w.last_log.owner == i as u64 {
                            w.logs.push(w.last_log);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => w.report.damaged.push(format!("objset table entry {i}: {e}")),
                }
            }
        }
        Err(e) => w.report.damaged.push(format!("MOS: {e}")),
    }
    w
}

/// The extents (every copy) of every block reachable from `mos_root` and
/// of the space map chain ending at `spacemap_head`, and what could not be
/// read (used to verify what a checkpoint still needs).
pub(crate) fn tree_extents(s: &Shared, mos_root: &BlockPtr, spacemap_head: &BlockPtr) -> (Vec<Extent>, Vec<String>) {
    let mut w = walk_from(s, mos_root);
    match tarn_block::spacemap::read_chain(&s.io, spacemap_head) {
        Ok(chain) => {
            for (bp, _) in &chain {
                w.note(bp);
            }
        }
        Err(e) => w.report.damaged.push(format!("space map chain: {e}")),
    }
    // The intent log chains those object sets name, as far as blocks born
    // by then go: an import of this tree would claim them.
    let limit = mos_root.birth;
    for h in std::mem::take(&mut w.logs) {
        let (mut bp, mut seq) = (h.head, h.head_seq);
        while !bp.is_hole() && bp.birth <= limit {
            w.note(&bp);
            match crate::zil::read_log_block(s, &bp, h.chain, seq) {
                Some(b) => {
                    bp = b.next;
                    seq += 1;
                }
                None => break,
            }
        }
    }
    let mut out: Vec<Extent> = w.refs.into_iter().map(|(e, _)| e).collect();
    out.sort();
    out.dedup();
    (out, w.report.damaged)
}

/// Object sets of the table not in `named`: their ids and the bytes (every
/// copy) that no other object set's tree reaches.
fn orphans(w: &Walker, named: &std::collections::BTreeSet<u64>) -> Vec<(u64, u64)> {
    let (orphan, kept): (Vec<_>, Vec<_>) = w.spans.iter().partition(|(id, _)| !named.contains(id));
    if orphan.is_empty() {
        return Vec::new();
    }
    let mut reached: Vec<Extent> = kept.iter().flat_map(|(_, r)| w.refs[r.clone()].iter().map(|(e, _)| *e)).collect();
    reached.sort();
    reached.dedup();
    let mut out = Vec::new();
    let mut counted: std::collections::BTreeSet<Extent> = Default::default();
    for (id, r) in orphan {
        let bytes = w.refs[r.clone()]
            .iter()
            .map(|(e, _)| *e)
            .filter(|e| reached.binary_search(e).is_err() && counted.insert(*e))
            .map(|e| e.len)
            .sum();
        out.push((*id, bytes));
    }
    out
}

pub(crate) fn check(s: &Shared, named: Option<&std::collections::BTreeSet<u64>>) -> CheckReport {
    let mos_root = *s.mos.root_bp.lock();
    let mut w = walk_from(s, &mos_root);
    let mut orphan_bytes = 0;
    for (id, bytes) in named.map(|n| orphans(&w, n)).unwrap_or_default() {
        w.report.orphans.push(format!("object set {id} is named by no dataset, snapshot or receive ({bytes} bytes only it holds)"));
        orphan_bytes += bytes;
    }
    let sm_blocks = s.root.lock().spacemap_blocks.clone();
    for bp in &sm_blocks {
        w.note(bp);
        if let Err(e) = s.io.read_uncached(bp) {
            w.report.damaged.push(format!("space map block: {e}"));
        }
    }
    // Intent log blocks (live chains, blocks allocated ahead, claimed
    // chains waiting for replay, blocks waiting to be freed).
    for bp in crate::zil::blocks_in_use(s) {
        w.note(&bp);
    }
    // Compare referenced extents with the allocator's view.
    let a = s.io.alloc.lock();
    let mut allocated: BTreeMap<(u32, u64), u64> = BTreeMap::new();
    for e in a.allocated_extents() {
        allocated.insert((e.vdev, e.offset), e.len);
    }
    let mut unique = std::mem::take(&mut w.refs);
    unique.sort();
    unique.dedup();
    w.report.allocated_bytes = unique.iter().map(|(e, _)| e.len).sum();
    let mut dataset_unique = std::mem::take(&mut w.dataset_refs);
    dataset_unique.sort();
    dataset_unique.dedup();
    w.report.dataset_bytes = dataset_unique.iter().map(|(e, _)| e.len).sum();
    w.report.metadata_bytes = w.report.allocated_bytes.saturating_sub(w.report.dataset_bytes);
    let mut referenced: Vec<Extent> = unique.into_iter().map(|(e, _)| e).collect();
    let live = referenced.clone();
    for es in a.deferred.values() {
        referenced.extend(es.iter().copied());
    }
    // Space only the checkpoint still needs (freed since it was taken).
    let held = a.held_extents();
    referenced.extend(held.iter().copied());
    drop(a);
    crate::checkpoint::check(s, &live, &held, &mut w.report);
    referenced.sort();
    // Double references: overlaps among referenced extents.
    for pair in referenced.windows(2) {
        if pair[0].vdev == pair[1].vdev && pair[0].offset + pair[0].len > pair[1].offset {
            w.report.double_allocated_bytes += (pair[0].offset + pair[0].len).min(pair[1].offset + pair[1].len) - pair[1].offset;
        }
    }
    // Referenced but free, and allocated but unreferenced (leaked).
    let referenced_bytes: u64 = referenced.iter().map(|e| e.len).sum();
    let allocated_bytes: u64 = allocated.values().sum();
    for e in &referenced {
        let covered = allocated
            .range(..=(e.vdev, e.offset))
            .next_back()
            .is_some_and(|(&(v, o), &l)| v == e.vdev && o + l >= e.offset + e.len);
        if !covered {
            w.report.damaged.push(format!("block at vdev {} offset {} (+{}) is in use but marked free", e.vdev, e.offset, e.len));
        }
    }
    w.report.leaked_bytes = orphan_bytes;
    if allocated_bytes > referenced_bytes {
        w.report.leaked_bytes += allocated_bytes - referenced_bytes;
    } else if referenced_bytes > allocated_bytes && w.report.double_allocated_bytes == 0 {
        w.report.double_allocated_bytes = referenced_bytes - allocated_bytes;
    }
    w.report
}
