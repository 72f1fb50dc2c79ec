//! The pool checkpoint: the whole pool as of one txg, kept so that the pool
//! can later be rewound to it (`pool checkpoint`, `pool import
//! --rewind-to-checkpoint`, `pool checkpoint -d`).
//!
//! Big theory:
//! - Taking a checkpoint first syncs (so every change made before the
//!   request is on disk in txg C), then, at the very start of the next
//!   txg's sync and before any free of it, records C's uberblock payload
//!   (MOS root, space map head) in MOS object 4 and tells the allocator
//!   that the checkpoint covers txg C.
//! - From then on a block born at or before C is never freed to the
//!   allocator: its free is *held* (a `CheckpointFree` space map record;
//!   the extent stays allocated, is never deferred, never reused). This is
//!   the same care the snapshot dead lists take, at the pool level, and
//!   it covers every tree: datasets, snapshots, the MOS, dead lists, the
//!   space map log's own blocks (condensing frees them: they are held).
//!   Everything C's tree references is therefore intact for as long as the
//!   checkpoint exists. Blocks born after C are freed as usual.
//! - Discarding frees every held extent (deferred like any free) and the
//!   MOS object, in one txg.
//! - Rewinding imports the pool from C's payload as a fresh txg numbered
//!   above every txg seen on disk, written before the abandoned txgs'
//!   uberblocks are poisoned (as `import -F` does), so neither a crash
//!   during the rewind nor a later `-F` can land on the abandoned history.
//!   C's own MOS has no checkpoint object (it was written after C): the
//!   rewound pool has no checkpoint. Top-level vdevs added after C leave
//!   the pool (their labels are cleared).
//! - Layout changes a rewind could not undo are refused while a checkpoint
//!   exists, as zpool refuses them: attach, detach, replace (and spares
//!   taking over, which is a replace), remove. `add` is allowed.
//!
//! Invariants (assertions that stay on in release builds):
//! - the allocator never hands out, releases from the defer window or
//!   holds twice an extent the checkpoint holds (tarn-block alloc.rs);
//! - a checkpoint is taken only after txg C is on disk, and its txg is
//!   below the txg that records it;
//! - `tarn debug check` walks C's tree too: every block it references is
//!   either live or held, and everything held belongs to it.

use std::sync::Arc;

use parking_lot::Mutex;
use tarn_block::{BlockPtr, Extent};
use tarn_vdev::{PoolConfig, Uberblock};

use crate::format::UberPayload;
use crate::pool::{Shared, SyncTx};
use crate::{CheckReport, ImportOptions, ObjError, ObjPool, ObjType, ObjectId, ObjectSet, Result, Txg, BONUS_LEN};

/// MOS object holding the checkpoint record (absent: no checkpoint).
pub const MOS_CHECKPOINT: ObjectId = ObjectId(4);
/// Its object type.
pub const OT_CHECKPOINT: u8 = 42;
const MAGIC: &[u8; 8] = b"TARNCKPT";
const VERSION: u32 = 1;
const HEADER: usize = 32;
const PAYLOAD: usize = 272;
const TOP_ENTRY: usize = 16;
/// More top-level vdevs than this in a record is corruption.
const TOPS_MAX: usize = 4096;

/// The checkpoint as stored in MOS object 4 (little-endian):
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 8 | magic `TARNCKPT` |
/// | 8 | 4 | version = 1 |
/// | 12 | 4 | top-level vdev count `n` |
/// | 16 | 8 | txg C: the checkpoint is the pool as synced in C |
/// | 24 | 8 | creation time, Unix seconds |
/// | 32 | 272 | C's uberblock payload (`UberPayload`: MOS root, space map head, record count) |
/// | 304 | 16·n | the top-level vdevs of C: id u32, reserved u32, guid u64 |
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointPhys {
    pub txg: Txg,
    pub created: u64,
    pub mos_root: BlockPtr,
    pub spacemap_head: BlockPtr,
    pub spacemap_records: u64,
    /// (id, guid) of each top-level vdev as of C.
    pub tops: Vec<(u32, u64)>,
}

impl CheckpointPhys {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER + PAYLOAD + TOP_ENTRY * self.tops.len()];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(self.tops.len() as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.txg.to_le_bytes());
        b[24..32].copy_from_slice(&self.created.to_le_bytes());
        let payload = UberPayload { mos_root: self.mos_root, spacemap_head: self.spacemap_head, spacemap_records: self.spacemap_records };
        b[HEADER..HEADER + PAYLOAD].copy_from_slice(&payload.encode());
        for (i, (id, guid)) in self.tops.iter().enumerate() {
            let o = HEADER + PAYLOAD + i * TOP_ENTRY;
            b[o..o + 4].copy_from_slice(&id.to_le_bytes());
            b[o + 8..o + 16].copy_from_slice(&guid.to_le_bytes());
        }
        b
    }

    /// Bounds-checked: malformed input is `Corrupt`, never a panic.
    pub fn decode(b: &[u8]) -> Result<CheckpointPhys> {
        let bad = |what: &str| ObjError::Corrupt(format!("checkpoint record: {what}"));
        let u32_at = |o: usize| b.get(o..o + 4).and_then(|s| s.try_into().ok()).map(u32::from_le_bytes).ok_or_else(|| bad("too short"));
        let u64_at = |o: usize| b.get(o..o + 8).and_then(|s| s.try_into().ok()).map(u64::from_le_bytes).ok_or_else(|| bad("too short"));
        if b.get(0..8) != Some(&MAGIC[..]) {
            return Err(bad("bad magic"));
        }
        if u32_at(8)? != VERSION {
            return Err(bad("unsupported version"));
        }
        let n = u32_at(12)? as usize;
        if n == 0 || n > TOPS_MAX || b.len() < HEADER + PAYLOAD + n * TOP_ENTRY {
            return Err(bad("bad top-level vdev count"));
        }
        let payload = UberPayload::decode(b.get(HEADER..HEADER + PAYLOAD).ok_or_else(|| bad("too short"))?)?;
        let mut tops = Vec::with_capacity(n);
        for i in 0..n {
            let o = HEADER + PAYLOAD + i * TOP_ENTRY;
            tops.push((u32_at(o)?, u64_at(o + 8)?));
        }
        Ok(CheckpointPhys {
            txg: u64_at(16)?,
            created: u64_at(24)?,
            mos_root: payload.mos_root,
            spacemap_head: payload.spacemap_head,
            spacemap_records: payload.spacemap_records,
            tops,
        })
    }
}

/// What users see of a checkpoint (`pool status`, `pool list`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CheckpointInfo {
    pub txg: Txg,
    /// Unix seconds.
    pub created: u64,
    /// Bytes only the checkpoint still needs (`CKPOINT`).
    pub held_bytes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    Create,
    Discard,
}

/// In-memory checkpoint state of a pool.
#[derive(Default)]
pub(crate) struct State {
    record: Mutex<Option<CheckpointPhys>>,
    /// Asked for, done at the start of the next txg's sync.
    pending: Mutex<Option<Pending>>,
    /// Serializes `checkpoint` and `checkpoint -d` requests.
    op: Mutex<()>,
    /// Bytes the last discard freed.
    discarded: Mutex<u64>,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn mos(s: &Arc<Shared>) -> ObjectSet {
    ObjectSet { shared: s.clone(), inner: s.mos.clone() }
}

/// Reads MOS object 4 at import and arms the allocator's hold.
pub(crate) fn load(s: &Arc<Shared>) -> Result<()> {
    let m = mos(s);
    let Ok(info) = m.info(MOS_CHECKPOINT) else {
        return Ok(());
    };
    if info.length > 1 << 20 {
        return Err(ObjError::Corrupt(format!("checkpoint record of {} bytes", info.length)));
    }
    let mut raw = vec![0u8; info.length as usize];
    m.read(MOS_CHECKPOINT, 0, &mut raw)?;
    let rec = CheckpointPhys::decode(&raw)?;
    let synced = s.synced_txg.load(std::sync::atomic::Ordering::Acquire);
    if rec.txg >= synced {
        return Err(ObjError::Corrupt(format!("checkpoint of txg {} recorded in a pool synced to txg {synced}", rec.txg)));
    }
    s.io.alloc.lock().set_checkpoint(rec.txg);
    *s.ckpt.record.lock() = Some(rec);
    Ok(())
}

/// Syncing context, first thing in txg `txg`: takes or discards the
/// checkpoint asked for, before any block of this txg is freed.
pub(crate) fn sync_begin(s: &Arc<Shared>, stx: &SyncTx) -> Result<()> {
    let Some(op) = *s.ckpt.pending.lock() else { return Ok(()) };
    let txg = stx.txg();
    let tx = stx.tx();
    match op {
        Pending::Create => {
            let c = s.synced_txg.load(std::sync::atomic::Ordering::Acquire);
            assert!(c < txg, "checkpoint of txg {c} taken while syncing txg {txg}");
            let root = s.root.lock();
            let tops = s
                .io
                .tops()
                .iter()
                .map(|t| {
                    let c = t.config();
                    (c.id, c.guid)
                })
                .collect();
            let rec = CheckpointPhys {
                txg: c,
                created: now_secs(),
                mos_root: *s.mos.root_bp.lock(),
                spacemap_head: root.spacemap_head,
                spacemap_records: root.spacemap_records,
                tops,
            };
            drop(root);
            let m = mos(s);
            if m.info(MOS_CHECKPOINT).is_ok() {
                return Err(ObjError::Corrupt("MOS object 4 (checkpoint) exists while no checkpoint is known".into()));
            }
            m.create_with_id(tx, MOS_CHECKPOINT, ObjType(OT_CHECKPOINT), 4096, &[0; BONUS_LEN])?;
            m.write(tx, MOS_CHECKPOINT, 0, &rec.encode())?;
            s.io.alloc.lock().set_checkpoint(c);
            *s.ckpt.record.lock() = Some(rec);
        }
        Pending::Discard => {
            let freed = s.io.alloc.lock().discard_checkpoint(txg);
            mos(s).free(tx, MOS_CHECKPOINT)?;
            *s.ckpt.record.lock() = None;
            *s.ckpt.discarded.lock() = freed;
        }
    }
    *s.ckpt.pending.lock() = None;
    Ok(())
}

/// The one-line refusal of a layout change while a checkpoint exists
/// (attach, detach, replace, remove, a spare taking over), as zpool's.
pub(crate) fn refuse_layout_change(s: &Shared) -> Result<()> {
    if s.ckpt.record.lock().is_some() {
        return Err(ObjError::Invalid(format!(
            "checkpoint exists (discard it first with 'tarn pool checkpoint -d {}')",
            s.config.lock().name
        )));
    }
    Ok(())
}

/// What rewinding to a checkpoint opens instead of the newest txg.
pub(crate) struct RewindTarget {
    pub txg: Txg,
    rec: CheckpointPhys,
}

impl RewindTarget {
    /// The checkpoint's payload as an uberblock of a fresh txg above
    /// every txg seen on disk.
    pub fn uberblock(&self, newest_seen: Txg, pool_guid: u64) -> Uberblock {
        let payload =
            UberPayload { mos_root: self.rec.mos_root, spacemap_head: self.rec.spacemap_head, spacemap_records: self.rec.spacemap_records };
        let timestamp_ns =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
        Uberblock { txg: newest_seen + 1, timestamp_ns, pool_guid, payload: payload.encode() }
    }

    /// The layout as of the checkpoint: top-level vdevs added later go.
    pub fn restrict(&self, config: &mut PoolConfig) -> Result<()> {
        for (id, guid) in &self.rec.tops {
            if !config.top.iter().any(|t| t.id == *id && t.guid == *guid) {
                return Err(ObjError::Corrupt(format!("top-level vdev {id} of the checkpoint is not in the pool's configuration")));
            }
        }
        config.top.retain(|t| self.rec.tops.iter().any(|(id, guid)| t.id == *id && t.guid == *guid));
        Ok(())
    }
}

/// `pool checkpoint -d` and the checker's view of held space.
impl ObjPool {
    /// `pool checkpoint`: saves the pool's whole state as of now.
    pub fn checkpoint(&self) -> Result<CheckpointInfo> {
        let s = &self.shared;
        let _op = s.ckpt.op.lock();
        if s.readonly {
            return Err(ObjError::ReadOnly);
        }
        if let Some(m) = s.suspended.why() {
            return Err(ObjError::Io(m));
        }
        if s.ckpt.record.lock().is_some() {
            return Err(ObjError::Invalid("checkpoint exists".into()));
        }
        // Everything asked for before this request reaches disk first.
        self.sync()?;
        *s.ckpt.pending.lock() = Some(Pending::Create);
        let synced = self.sync();
        if synced.is_err() {
            *s.ckpt.pending.lock() = None;
        }
        synced?;
        self.checkpoint_info().ok_or_else(|| ObjError::Io("the checkpoint was not recorded".into()))
    }

    /// `pool checkpoint -d`: discards the checkpoint; its space is freed
    /// (reusable after the defer window). Returns the bytes freed.
    pub fn checkpoint_discard(&self) -> Result<u64> {
        let s = &self.shared;
        let _op = s.ckpt.op.lock();
        if s.readonly {
            return Err(ObjError::ReadOnly);
        }
        if let Some(m) = s.suspended.why() {
            return Err(ObjError::Io(m));
        }
        if s.ckpt.record.lock().is_none() {
            return Err(ObjError::Invalid("checkpoint does not exist".into()));
        }
        *s.ckpt.pending.lock() = Some(Pending::Discard);
        let synced = self.sync();
        if synced.is_err() {
            *s.ckpt.pending.lock() = None;
        }
        synced?;
        if s.ckpt.record.lock().is_some() {
            return Err(ObjError::Io("the checkpoint was not discarded".into()));
        }
        Ok(*s.ckpt.discarded.lock())
    }

    pub fn checkpoint_info(&self) -> Option<CheckpointInfo> {
        let rec = self.shared.ckpt.record.lock().clone()?;
        Some(CheckpointInfo { txg: rec.txg, created: rec.created, held_bytes: self.shared.io.alloc.lock().held_bytes() })
    }

    /// `pool import --rewind-to-checkpoint`: imports the pool as it was
    /// when the checkpoint was taken; every later change is gone, and so
    /// is the checkpoint.
    pub fn import_rewind_to_checkpoint(devices: Vec<Arc<dyn crate::Device>>, opts: ImportOptions) -> Result<Arc<ObjPool>> {
        // The checkpoint record lives in the newest state's MOS.
        let probe = ObjPool::import(devices.clone(), ImportOptions { readonly: true, ..opts.clone() })?;
        let rec = probe.shared.ckpt.record.lock().clone();
        let config = probe.config();
        drop(probe);
        let rec = rec.ok_or_else(|| ObjError::Invalid("checkpoint does not exist".into()))?;
        let target = RewindTarget { txg: rec.txg, rec };
        let pool = ObjPool::import_at(devices.clone(), opts.clone(), Some(&target), false)?;
        if !opts.readonly {
            // Devices of top-level vdevs added after the checkpoint are no
            // longer part of the pool.
            let kept: Vec<u64> = pool.config().top.iter().map(|t| t.guid).collect();
            let dropped: Vec<u64> =
                config.top.iter().filter(|t| !kept.contains(&t.guid)).flat_map(|t| t.children.iter().flat_map(|c| c.slot_leaves().map(|l| l.guid))).collect();
            for d in &devices {
                if tarn_vdev::read_label(d.as_ref()).is_ok_and(|l| dropped.contains(&l.leaf_guid)) {
                    let _ = tarn_vdev::clear_labels(d.as_ref());
                }
            }
        }
        Ok(pool)
    }
}

/// The checker's part: C's tree (and space map chain) must be intact.
/// Every extent it references is live (same place in the current trees)
/// or held; everything held belongs to it. `live` and `held` are sorted.
pub(crate) fn check(s: &Shared, live: &[Extent], held: &[Extent], report: &mut CheckReport) {
    let Some(rec) = s.ckpt.record.lock().clone() else {
        if !held.is_empty() {
            report.damaged.push(format!("{} extents are held for a checkpoint that does not exist", held.len()));
        }
        return;
    };
    let (extents, damaged) = crate::check::tree_extents(s, &rec.mos_root, &rec.spacemap_head);
    for d in damaged {
        report.damaged.push(format!("checkpoint (txg {}): {d}", rec.txg));
    }
    let mut missing = 0u64;
    for e in &extents {
        if live.binary_search(e).is_err() && held.binary_search(e).is_err() {
            missing += 1;
            if missing <= 10 {
                report.damaged.push(format!("checkpoint (txg {}): block at {e:?} is neither live nor held", rec.txg));
            }
        }
    }
    let mut stray = 0u64;
    for e in held {
        if extents.binary_search(e).is_err() {
            stray += e.len;
        }
    }
    if stray > 0 {
        report.damaged.push(format!("{stray} bytes are held for the checkpoint but not part of it"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> CheckpointPhys {
        let mut bp = BlockPtr::HOLE;
        bp.birth = 7;
        bp.lsize = 4096;
        bp.psize = 4096;
        bp.ndva = 1;
        bp.dva[0].asize = 4096;
        bp.dva[0].offset = 8192;
        bp.checksum_kind = tarn_block::bp::checksum_code(crate::ChecksumKind::Fletcher4);
        CheckpointPhys { txg: 7, created: 1_795_835_459, mos_root: bp, spacemap_head: BlockPtr::HOLE, spacemap_records: 12, tops: vec![(0, 11), (1, 22)] }
    }

    #[test]
    fn round_trip() {
        let r = record();
        assert_eq!(CheckpointPhys::decode(&r.encode()).unwrap(), r);
    }

    /// Truncated, bit-flipped and garbage records are errors, never panics.
    #[test]
    fn malformed_records_are_corrupt_not_panics() {
        let good = record().encode();
        for len in 0..good.len() {
            assert!(CheckpointPhys::decode(&good[..len]).is_err(), "truncated to {len}");
        }
        let mut seed = 0x1234_5678_u64;
        for _ in 0..2000 {
            let mut bytes = good.clone();
            for _ in 0..4 {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let i = (seed >> 33) as usize % bytes.len();
                bytes[i] ^= 1 << (seed >> 61);
            }
            let _ = CheckpointPhys::decode(&bytes);
        }
        let mut bad = good.clone();
        bad[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(CheckpointPhys::decode(&bad).is_err(), "a huge vdev count");
        assert!(CheckpointPhys::decode(&[0xab; 400]).is_err());
    }
}
