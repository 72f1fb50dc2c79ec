//! Snapshots, dead lists and rollback: history that freeing respects.
//!
//! A snapshot of a dataset's object set (its *head*) taken in txg T is a new
//! object set whose root is the head's root as synced in T; the head gets a
//! new root block (same trees) recording `prev_snap_txg = T` and a fresh,
//! empty dead list. From then on, when the head frees a block born at or
//! before `prev_snap_txg`, the block is still part of the snapshot: it goes
//! to the head's dead list instead of the allocator (DESIGN invariant 7).
//! Taking a snapshot is constant time whatever the dataset's size.
//!
//! Each object set's dead list (a MOS object: an array of block pointers,
//! its bonus holding count and bytes) holds the blocks that were live in the
//! previous snapshot and died before this one (or before now, for the
//! head). So:
//! - destroying snapshot S (previous snapshot at txg p, next N — a later
//!   snapshot or the head) frees the entries of N's dead list born after p
//!   (only S held them), keeps the others, and moves S's own dead list into
//!   N's; S's root block is freed and N's `prev_snap_txg` becomes p;
//! - a snapshot's `used` (what destroying it would free) is the part of
//!   N's dead list born after p; a head's `usedbysnapshots` is the sum of
//!   its chain's dead lists (both answered from summaries of the lists,
//!   deadlist_cache.rs: every change of a dead list below goes through
//!   `DeadlistCache::changing`);
//! - rolling the head back to its newest snapshot S frees every head block
//!   born after S, empties the head's dead list (all of it is in S), and
//!   makes S's root phys the head's.
//!
//! - a clone of snapshot S (taken in txg T) is a new head whose root phys is
//!   S's with `prev_snap_txg = T` and its own empty dead list: its frees of
//!   S's blocks go to its dead list, and destroying it frees only blocks
//!   born after its `prev_snap_txg` (see `destroy_objset`).
//!
//! All of them run in syncing context at the end of the txg they were
//! asked in, after the txg's dataset changes and before the MOS is written.

use std::sync::Arc;

use tarn_block::{BlockPtr, BP_SIZE};

use crate::format::ObjsetPhys;
use crate::pool::{ObjsetSync, Shared, SyncTx, MOS_OBJSET_TABLE};
use crate::tree::{self, block_err};
use crate::{ObjError, ObjPool, ObjType, ObjectId, ObjectSet, ObjsetId, Result, Tx, Txg, BONUS_LEN};

/// MOS object type of a dead list.
pub const OT_DEADLIST: u8 = 41;
const DEADLIST_BLOCK: u32 = 128 << 10;

#[derive(Clone, Debug)]
pub(crate) enum SnapOp {
    Snapshot { head: ObjsetId, snap: ObjsetId, new_deadlist: u64 },
    Destroy { snap: ObjsetId, prev_txg: Txg, next: ObjsetId },
    Rollback { head: ObjsetId, snap: ObjsetId },
    /// A new head `clone` starting from snapshot `snap` (taken in
    /// `snap_txg`), with its own empty dead list.
    Clone { snap: ObjsetId, clone: ObjsetId, snap_txg: Txg, new_deadlist: u64 },
}

fn mos(s: &Arc<Shared>) -> ObjectSet {
    ObjectSet { shared: s.clone(), inner: s.mos.clone() }
}

/// Count and bytes of a dead list.
pub(crate) fn deadlist_totals(s: &Arc<Shared>, obj: u64) -> (u64, u64) {
    if obj == 0 {
        return (0, 0);
    }
    let Ok(b) = mos(s).bonus(ObjectId(obj)) else { return (0, 0) };
    let word = |i: usize| u64::from_le_bytes(b.get(i * 8..i * 8 + 8).and_then(|x| x.try_into().ok()).unwrap_or([0; 8]));
    (word(0), word(1))
}

pub(crate) fn deadlist_read(s: &Arc<Shared>, obj: u64) -> Result<Vec<BlockPtr>> {
    let (count, _) = deadlist_totals(s, obj);
    if count == 0 {
        return Ok(vec![]);
    }
    if count > (1 << 32) {
        return Err(ObjError::Corrupt(format!("dead list {obj} claims {count} entries")));
    }
    let mut buf = vec![0u8; count as usize * BP_SIZE];
    mos(s).read(ObjectId(obj), 0, &mut buf)?;
    buf.chunks_exact(BP_SIZE).map(|c| BlockPtr::decode(c).map_err(ObjError::Corrupt)).collect()
}

fn set_totals(s: &Arc<Shared>, stx: &SyncTx, obj: u64, count: u64, bytes: u64) -> Result<()> {
    let mut bonus = [0u8; BONUS_LEN];
    bonus[0..8].copy_from_slice(&count.to_le_bytes());
    bonus[8..16].copy_from_slice(&bytes.to_le_bytes());
    mos(s).set_bonus(stx.tx(), ObjectId(obj), &bonus)
}

/// Appends `bps` to dead list `obj` in the syncing txg.
pub(crate) fn deadlist_append(s: &Arc<Shared>, stx: &SyncTx, obj: u64, bps: &[BlockPtr]) -> Result<()> {
    if bps.is_empty() {
        return Ok(());
    }
    s.deadlists.changing(obj, || append_entries(s, stx, obj, bps))
}

fn append_entries(s: &Arc<Shared>, stx: &SyncTx, obj: u64, bps: &[BlockPtr]) -> Result<()> {
    let (count, bytes) = deadlist_totals(s, obj);
    let mut data = Vec::with_capacity(bps.len() * BP_SIZE);
    for bp in bps {
        data.extend_from_slice(&bp.encode());
    }
    mos(s).write(stx.tx(), ObjectId(obj), count * BP_SIZE as u64, &data)?;
    let added: u64 = bps.iter().map(|b| b.asize()).sum();
    set_totals(s, stx, obj, count + bps.len() as u64, bytes + added)
}

/// Replaces the contents of dead list `obj`.
fn deadlist_replace(s: &Arc<Shared>, stx: &SyncTx, obj: u64, bps: &[BlockPtr]) -> Result<()> {
    s.deadlists.changing(obj, || {
        mos(s).free_range(stx.tx(), ObjectId(obj), 0, None)?;
        set_totals(s, stx, obj, 0, 0)?;
        if bps.is_empty() {
            return Ok(());
        }
        append_entries(s, stx, obj, bps)
    })
}

/// Frees dead list object `obj` (syncing context).
pub(crate) fn deadlist_free(s: &Arc<Shared>, stx: &SyncTx, obj: u64) -> Result<()> {
    s.deadlists.changing(obj, || mos(s).free(stx.tx(), ObjectId(obj)))
}

/// Creates an empty dead list (open context, in `tx`).
fn deadlist_create(s: &Arc<Shared>, mos: &ObjectSet, tx: &Tx) -> Result<ObjectId> {
    let id = mos.create(tx, ObjType(OT_DEADLIST), DEADLIST_BLOCK, &[0; BONUS_LEN])?;
    // The id of a freed list may come back: no summary of that one stays.
    s.deadlists.changing(id.0, || ());
    Ok(id)
}

fn table_write(s: &Arc<Shared>, stx: &SyncTx, id: ObjsetId, bp: &BlockPtr) -> Result<()> {
    mos(s).write(stx.tx(), MOS_OBJSET_TABLE, id.0 * BP_SIZE as u64, &bp.encode())
}

/// The root pointer and phys of object set `id` as of this txg's sync so
/// far (from `synced` if it was synced in this txg).
fn current_root(s: &Arc<Shared>, id: ObjsetId, synced: &[ObjsetSync]) -> Result<(BlockPtr, ObjsetPhys)> {
    if let Some(r) = synced.iter().find(|r| r.inner.id == id) {
        return Ok((r.root_bp, r.new_phys.clone()));
    }
    if let Some(inner) = s.objsets.lock().get(&id) {
        return Ok((*inner.root_bp.lock(), inner.committed.lock().clone()));
    }
    let mut raw = [0u8; BP_SIZE];
    mos(s).read(MOS_OBJSET_TABLE, id.0 * BP_SIZE as u64, &mut raw)?;
    let bp = BlockPtr::decode(&raw).map_err(ObjError::Corrupt)?;
    if bp.is_hole() {
        return Err(ObjError::NotFound(id.0));
    }
    let phys = ObjsetPhys::decode(&s.io.read(&bp).map_err(block_err)?)?;
    Ok((bp, phys))
}

/// Writes a new root block for `id` with `phys`; its old root (if owned by
/// it alone, `free_old`) is freed. Publishes through `synced` when the
/// object set is open.
fn rewrite_root(
    s: &Arc<Shared>,
    stx: &SyncTx,
    id: ObjsetId,
    phys: ObjsetPhys,
    old_root: Option<BlockPtr>,
    mac_from: &BlockPtr,
    synced: &mut Vec<ObjsetSync>,
) -> Result<BlockPtr> {
    let spec = tarn_block::WriteSpec { otype: crate::format::OT_OBJSET, ..s.meta_spec(1) };
    let mut root = s.io.write(&phys.encode(), spec, stx.txg()).map_err(block_err)?;
    // What an encrypted root's MAC covers (its meta-dnode) is the same as
    // in the root it is made from: it keeps that MAC (crypt.rs).
    crate::crypt::carry_root_mac(&mut root, mac_from);
    if let Some(old) = old_root {
        stx.free(&old);
    }
    table_write(s, stx, id, &root)?;
    if let Some(r) = synced.iter_mut().find(|r| r.inner.id == id) {
        r.root_bp = root;
        r.new_phys = phys;
    } else if let Some(inner) = s.objsets.lock().get(&id).cloned() {
        synced.push(ObjsetSync { inner, items: vec![], new_phys: phys, root_bp: root });
    }
    Ok(root)
}

/// Applies the snapshot operations of `txg` (syncing context). Returns the
/// heads whose in-memory state must be dropped after publishing (rollback).
pub(crate) fn apply(s: &Arc<Shared>, stx: &SyncTx, ops: Vec<SnapOp>, synced: &mut Vec<ObjsetSync>) -> Result<Vec<ObjsetId>> {
    let txg = stx.txg();
    let mut evict = Vec::new();
    for op in ops {
        match op {
            SnapOp::Snapshot { head, snap, new_deadlist } => {
                let (root1, phys) = current_root(s, head, synced)?;
                // The snapshot takes the head's root block as it is.
                table_write(s, stx, snap, &root1)?;
                // The head continues from a root of its own.
                let mut next = phys;
                next.prev_snap_txg = txg;
                next.deadlist = new_deadlist;
                rewrite_root(s, stx, head, next, None, &root1, synced)?;
            }
            SnapOp::Destroy { snap, prev_txg, next } => {
                let (snap_root, snap_phys) = current_root(s, snap, synced)?;
                let (next_root, mut next_phys) = current_root(s, next, synced)?;
                let mut keep = Vec::new();
                let mut freed = 0u64;
                for bp in deadlist_read(s, next_phys.deadlist)? {
                    if bp.birth > prev_txg {
                        freed += bp.asize();
                        stx.free(&bp);
                    } else {
                        keep.push(bp);
                    }
                }
                keep.extend(deadlist_read(s, snap_phys.deadlist)?);
                let _ = freed;
                if next_phys.deadlist != 0 {
                    deadlist_replace(s, stx, next_phys.deadlist, &keep)?;
                }
                if snap_phys.deadlist != 0 && snap_phys.deadlist != next_phys.deadlist {
                    deadlist_free(s, stx, snap_phys.deadlist)?;
                }
                stx.free(&snap_root);
                table_write(s, stx, snap, &BlockPtr::HOLE)?;
                evict.push(snap);
                next_phys.prev_snap_txg = prev_txg;
                // A snapshot's root is its own; the head's is too (see Snapshot).
                rewrite_root(s, stx, next, next_phys, Some(next_root), &next_root, synced)?;
            }
            SnapOp::Rollback { head, snap } => {
                let (snap_root, snap_phys) = current_root(s, snap, synced)?;
                let (head_root, head_phys) = current_root(s, head, synced)?;
                let snap_txg = head_phys.prev_snap_txg;
                // Every head block born after the snapshot is the head's alone.
                let mut doomed = Vec::new();
                collect_born_after(s, &head_phys, snap_txg, &mut doomed)?;
                for bp in &doomed {
                    stx.free(bp);
                }
                if head_phys.deadlist != 0 {
                    deadlist_replace(s, stx, head_phys.deadlist, &[])?;
                }
                let mut phys = snap_phys;
                phys.prev_snap_txg = snap_txg;
                phys.deadlist = head_phys.deadlist;
                // The log described changes the rollback discards.
                crate::zil::destroy_objset_log(s, stx, head);
                phys.log = crate::zil::LogHeader::default();
                // Drop the open state's pending changes to this head: they
                // were synced into the tree being discarded. Their charges
                // go back (they stayed counted for good before).
                if let Some(r) = synced.iter().find(|r| r.inner.id == head) {
                    crate::pool::discard_dirty(s, &r.inner, &r.items);
                } else {
                    let inner = s.objsets.lock().get(&head).cloned();
                    if let Some(inner) = inner {
                        crate::pool::discard_dirty(s, &inner, &[]);
                    }
                }
                synced.retain(|r| r.inner.id != head);
                rewrite_root(s, stx, head, phys, Some(head_root), &snap_root, synced)?;
                evict.push(head);
            }
            SnapOp::Clone { snap, clone, snap_txg, new_deadlist } => {
                let (snap_root, snap_phys) = current_root(s, snap, synced)?;
                // The clone shares the snapshot's trees; every block in them
                // was born at or before `snap_txg`, so the clone's frees of
                // them go to its dead list (they stay the origin's).
                let mut phys = snap_phys;
                phys.prev_snap_txg = snap_txg;
                phys.deadlist = new_deadlist;
                // The origin's log header is not the clone's.
                phys.log = crate::zil::LogHeader::default();
                rewrite_root(s, stx, clone, phys, None, &snap_root, synced)?;
            }
        }
    }
    Ok(evict)
}

/// Every block of `os` (meta tree and objects) born after `txg`.
pub(crate) fn collect_born_after(s: &Arc<Shared>, os: &ObjsetPhys, txg: Txg, out: &mut Vec<BlockPtr>) -> Result<()> {
    let io = &s.io;
    tree::walk_born_after(io, &os.meta, txg + 1, &mut |bp, level| {
        out.push(*bp);
        if level == 0 {
            let data = io.read_uncached(bp).map_err(block_err)?;
            for chunk in data.chunks_exact(crate::format::DNODE_SIZE) {
                let d = crate::format::DnodePhys::decode(chunk)?;
                if d.in_use() {
                    tree::walk_born_after(io, &d, txg + 1, &mut |b, _| {
                        out.push(*b);
                        Ok(())
                    })?;
                }
            }
        }
        Ok(())
    })
}

impl ObjPool {
    /// Snapshots object set `head` at the end of `tx`'s txg; returns the
    /// snapshot's object set id (usable once that txg has synced).
    pub fn snapshot(&self, tx: &Tx, head: ObjsetId) -> Result<ObjsetId> {
        let s = &self.shared;
        if s.readonly {
            return Err(ObjError::ReadOnly);
        }
        self.open_objset(head)?;
        let deadlist = deadlist_create(s, &self.mos(), tx)?;
        let snap = ObjsetId(s.next_objset.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        self.queue_snap_op(tx, SnapOp::Snapshot { head, snap, new_deadlist: deadlist.0 });
        Ok(snap)
    }

    /// Destroys snapshot `snap`, whose previous snapshot was taken in
    /// `prev_txg` (0: none) and whose next is `next` (a later snapshot or
    /// the head), at the end of `tx`'s txg.
    pub fn destroy_snapshot(&self, tx: &Tx, snap: ObjsetId, prev_txg: Txg, next: ObjsetId) -> Result<()> {
        if self.shared.readonly {
            return Err(ObjError::ReadOnly);
        }
        self.queue_snap_op(tx, SnapOp::Destroy { snap, prev_txg, next });
        Ok(())
    }

    /// Rolls `head` back to `snap`, its newest snapshot, at the end of
    /// `tx`'s txg. Open handles of `head` are stale afterwards: close them
    /// first (unmount) and open the object set again after the sync.
    pub fn rollback(&self, tx: &Tx, head: ObjsetId, snap: ObjsetId) -> Result<()> {
        if self.shared.readonly {
            return Err(ObjError::ReadOnly);
        }
        self.queue_snap_op(tx, SnapOp::Rollback { head, snap });
        Ok(())
    }

    /// Creates a new object set (a clone) whose trees are snapshot
    /// `snap`'s, taken in `snap_txg`, at the end of `tx`'s txg; returns its
    /// id (usable once that txg has synced). The clone's frees of blocks
    /// born at or before `snap_txg` go to its dead list; destroying it
    /// frees only what it wrote (see [`ObjPool::destroy_objset`]).
    pub fn clone_objset(&self, tx: &Tx, snap: ObjsetId, snap_txg: Txg) -> Result<ObjsetId> {
        let s = &self.shared;
        if s.readonly {
            return Err(ObjError::ReadOnly);
        }
        let (_, phys) = current_root(s, snap, &[])?;
        if snap_txg < phys.prev_snap_txg || snap_txg >= tx.txg() {
            return Err(ObjError::Invalid(format!("clone origin txg {snap_txg} does not fit object set {}", snap.0)));
        }
        let deadlist = deadlist_create(s, &self.mos(), tx)?;
        let clone = ObjsetId(s.next_objset.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        self.queue_snap_op(tx, SnapOp::Clone { snap, clone, snap_txg, new_deadlist: deadlist.0 });
        Ok(clone)
    }

    /// Raw bytes of object set `id`'s dead list born at or before `txg`
    /// and after it (from the list's summary, deadlist_cache.rs).
    pub fn deadlist_split(&self, id: ObjsetId, txg: Txg) -> Result<(u64, u64)> {
        let os = self.open_objset(id)?;
        let dl = os.inner.committed.lock().deadlist;
        if txg == 0 {
            return Ok((0, deadlist_totals(&self.shared, dl).1));
        }
        Ok(crate::deadlist_cache::summary(&self.shared, dl)?.split(txg))
    }

    /// [`ObjPool::deadlist_split`] counted entry by entry from the list
    /// itself, never from a summary: O(dead list). For checks and tests.
    pub fn deadlist_split_recount(&self, id: ObjsetId, txg: Txg) -> Result<(u64, u64)> {
        let os = self.open_objset(id)?;
        let dl = os.inner.committed.lock().deadlist;
        let mut split = (0, 0);
        for bp in deadlist_read(&self.shared, dl)? {
            if bp.birth <= txg {
                split.0 += bp.asize();
            } else {
                split.1 += bp.asize();
            }
        }
        Ok(split)
    }

    /// Dead-list summaries served from the cache and built by reading a
    /// list, since the pool was opened.
    pub fn deadlist_summary_counters(&self) -> (u64, u64) {
        self.shared.deadlists.counters()
    }

    fn queue_snap_op(&self, tx: &Tx, op: SnapOp) {
        self.shared.snap_ops.lock().entry(tx.txg()).or_default().push(op);
        self.shared.note_dirty_objset(tx.txg(), crate::pool::MOS_OBJSET_ID);
    }

    /// The txg of object set `id`'s newest snapshot (0: none) and its dead
    /// list's entry count and bytes.
    pub fn snapshot_info(&self, id: ObjsetId) -> Result<(Txg, u64, u64)> {
        let os = self.open_objset(id)?;
        let phys = os.inner.committed.lock().clone();
        let (count, bytes) = deadlist_totals(&self.shared, phys.deadlist);
        Ok((phys.prev_snap_txg, count, bytes))
    }

    /// Bytes destroying snapshot `snap` would free: the part of `next`'s
    /// dead list born after `prev_txg` (a binary search in the list's
    /// summary once it is built: deadlist_cache.rs).
    pub fn snapshot_unique_bytes(&self, prev_txg: Txg, next: ObjsetId) -> Result<u64> {
        let os = self.open_objset(next)?;
        let dl = os.inner.committed.lock().deadlist;
        Ok(crate::deadlist_cache::summary(&self.shared, dl)?.split(prev_txg).1)
    }

    /// Forgets the in-memory state of object set `id` (after a rollback).
    pub fn evict_objset(&self, id: ObjsetId) {
        self.shared.objsets.lock().remove(&id);
    }
}
