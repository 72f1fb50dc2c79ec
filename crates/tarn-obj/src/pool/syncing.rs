//! Syncing context: writing one txg out. Destroyed object sets are freed,
//! dirty object sets are written (level-0 blocks in parallel, then trees
//! bottom-up, then the root), snapshot operations applied, the MOS
//! written, the space map log appended (or condensed), every vdev flushed,
//! and only then the uberblock; last the new trees are published.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tarn_block::{spacemap, BlockPtr, WriteSpec};
use tarn_vdev::Uberblock;

use super::{now_ns, RootState, Shared, SyncTx, MOS_OBJSET_ID, MOS_OBJSET_TABLE};
use crate::format::{DnodePhys, ObjsetPhys, UberPayload, DNODES_PER_BLOCK, DNODE_SIZE, DN_IN_USE, DN_METADATA, META_BLOCK_SIZE, OT_OBJSET};
use crate::objset::{ObjectSet, ObjsetInner, SyncItem};
use crate::tree::{self, block_err, Changes, TreeCtx};
use crate::*;

/// A level-0 block to write: item index, block id, data, object type,
/// metadata?, and for ciphertext of a raw receive its pointer fields.
type DataJob = (usize, u64, Arc<Vec<u8>>, u8, bool, Option<tarn_block::RawBlock>);

pub(crate) struct ObjsetSync {
    pub inner: Arc<ObjsetInner>,
    pub items: Vec<SyncItem>,
    pub new_phys: ObjsetPhys,
    pub root_bp: BlockPtr,
}

pub(super) fn sync_txg(s: &Arc<Shared>, stx: &SyncTx) -> Result<Txg> {
    let txg = stx.txg();
    // The credit began in `sync_once` (space.rs); it ends here, once the
    // txg has published and given its charges back, or on any other way
    // out, a panic included.
    struct EndCredit<'a>(&'a Shared);
    impl Drop for EndCredit<'_> {
        fn drop(&mut self) {
            self.0.sync_space_end();
        }
    }
    let _end = EndCredit(s);
    sync_txg_inner(s, stx, txg)
}

fn sync_txg_inner(s: &Arc<Shared>, stx: &SyncTx, txg: Txg) -> Result<Txg> {
    // The txg's writes go out in runs, all of them before the flush below.
    s.io.gather_writes();
    // Checkpoint taken or discarded in this txg: before any free of it.
    crate::checkpoint::sync_begin(s, stx)?;
    // Earlier failed txgs leave dirty records behind; sync them with this one.
    let ids: HashSet<ObjsetId> = {
        let mut d = s.dirty_objsets.lock();
        let keys: Vec<Txg> = d.range(..=txg).map(|(&t, _)| t).collect();
        let mut out = HashSet::new();
        for k in keys {
            if let Some(set) = d.remove(&k) {
                out.extend(set);
            }
        }
        out
    };
    let mut synced: Vec<ObjsetSync> = Vec::new();
    let created: Vec<ObjsetId> = {
        let mut c = s.created_objsets.lock();
        let keys: Vec<Txg> = c.range(..=txg).map(|(&t, _)| t).collect();
        keys.into_iter().flat_map(|k| c.remove(&k).unwrap_or_default()).collect()
    };
    let destroyed: Vec<(ObjsetId, Arc<ObjsetInner>)> = {
        let mut c = s.destroyed_objsets.lock();
        let keys: Vec<Txg> = c.range(..=txg).map(|(&t, _)| t).collect();
        keys.into_iter().flat_map(|k| c.remove(&k).unwrap_or_default()).collect()
    };
    let mut ctx = TreeCtx::new(stx, &s.io, s.meta_spec(1), 0);
    // Destroyed object sets: free their whole trees.
    let mos_handle = ObjectSet { shared: s.clone(), inner: s.mos.clone() };
    for (id, inner) in &destroyed {
        let phys = inner.committed.lock().clone();
        crate::zil::destroy_objset_log(s, stx, *id);
        if phys.prev_snap_txg == 0 {
            free_objset_tree(&mut ctx, &phys)?;
        } else {
            // Blocks born at or before `prev_snap_txg` are a snapshot's (or
            // a clone's origin's): only what this head wrote later is freed.
            let mut own = Vec::new();
            crate::snap::collect_born_after(s, &phys, phys.prev_snap_txg, &mut own)?;
            for bp in &own {
                ctx.free(bp);
            }
        }
        if phys.deadlist != 0 {
            // Dead-list entries born after `prev_snap_txg` were held by
            // snapshots destroyed with it; the rest stay the predecessor's.
            for bp in crate::snap::deadlist_read(s, phys.deadlist)? {
                if bp.birth > phys.prev_snap_txg {
                    ctx.free(&bp);
                }
            }
            crate::snap::deadlist_free(s, stx, phys.deadlist)?;
        }
        let root = *inner.root_bp.lock();
        ctx.free(&root);
        mos_write_in_txg(&mos_handle, stx, id.0 * tarn_block::BP_SIZE as u64, &[0u8; tarn_block::BP_SIZE])?;
        // Its unsynced changes die with it: give back their dirty accounting.
        discard_dirty(s, inner, &[]);
    }
    let dataset_ids: Vec<ObjsetId> = {
        let map = s.objsets.lock();
        ids.iter().chain(created.iter()).filter(|id| **id != MOS_OBJSET_ID && map.contains_key(id)).copied().collect::<HashSet<_>>().into_iter().collect()
    };
    for id in dataset_ids {
        let inner = match s.objsets.lock().get(&id) {
            Some(i) => i.clone(),
            None => continue,
        };
        let r = sync_objset(s, stx, &inner)?;
        // Record the new root in the MOS table, inside this same txg.
        let mos = ObjectSet { shared: s.clone(), inner: s.mos.clone() };
        mos_write_in_txg(&mos, stx, id.0 * tarn_block::BP_SIZE as u64, &r.root_bp.encode())?;
        synced.push(r);
    }
    // Snapshots, snapshot destroys and rollbacks asked for in this txg.
    let ops: Vec<crate::snap::SnapOp> = {
        let mut o = s.snap_ops.lock();
        let keys: Vec<Txg> = o.range(..=txg).map(|(&t, _)| t).collect();
        keys.into_iter().flat_map(|k| o.remove(&k).unwrap_or_default()).collect()
    };
    let evict = crate::snap::apply(s, stx, ops, &mut synced)?;
    // Now the MOS (it may have gained dirty records just above).
    let mos_sync = sync_objset(s, stx, &s.mos)?;
    // Space map log.
    let (sm_head, sm_blocks, sm_records) = {
        let root = s.root.lock();
        let records = s.io.alloc.lock().take_records();
        let extents = spacemap_extents(&s.io.alloc.lock());
        let wanted = s.condense_wanted.swap(false, Ordering::AcqRel);
        let condense = condense_now(root.spacemap_records, extents, wanted);
        if condense {
            drop(root);
            condense_spacemap(s, stx, records)?
        } else {
            let n = records.len() as u64;
            let prev = root.spacemap_head;
            let mut blocks = root.spacemap_blocks.clone();
            let total = root.spacemap_records;
            drop(root);
            stx.check();
            let (head, written) = spacemap::write_log(&s.io, txg, prev, records, false).map_err(block_err)?;
            let added: u64 = n + written.len() as u64 * spacemap::LOG_COPIES as u64;
            blocks.extend(written);
            (head, blocks, total + added)
        }
    };
    s.io.flush(txg).map_err(block_err)?;
    // Leaves that missed writes (or changed state) get it on record in the
    // labels before the txg that depends on it becomes the newest.
    let dtl_changed = s.io.tops().iter().flat_map(|t| t.leaves()).fold(false, |acc, l| l.take_dtl_dirty() | acc);
    let features_changed = s.features_dirty.swap(false, Ordering::SeqCst);
    if dtl_changed || features_changed {
        crate::vdevs::write_labels(s, None)?;
    }
    let payload = UberPayload { mos_root: mos_sync.root_bp, spacemap_head: sm_head, spacemap_records: sm_records }.encode();
    let guid = s.config.lock().pool_guid;
    let ub_devices = crate::vdevs::uberblock_devices(s);
    tarn_vdev::write_uberblock(&ub_devices, &Uberblock { txg, timestamp_ns: now_ns(), pool_guid: guid, payload })?;
    // Publish: trees first, then drop the dirty records they replace.
    *s.root.lock() = RootState { spacemap_head: sm_head, spacemap_records: sm_records, spacemap_blocks: sm_blocks };
    for r in synced.into_iter().chain(std::iter::once(mos_sync)) {
        publish(s, r, txg);
    }
    for id in evict {
        s.objsets.lock().remove(&id);
    }
    {
        let _no_readers = s.reader_gate.write();
        s.io.alloc.lock().release_deferred(txg);
    }
    // Bookkeeping writes of this txg may have noted objsets dirty in it.
    {
        let mut d = s.dirty_objsets.lock();
        let done: Vec<Txg> = d.range(..=txg).map(|(&t, _)| t).collect();
        for t in done {
            d.remove(&t);
        }
    }
    s.settle_meta_charges(txg);
    s.synced_txg.store(txg, Ordering::Release);
    crate::zil::after_sync(s, txg);
    Ok(txg)
}

/// An object set's changes not written, thrown away (it is destroyed, or
/// rolled back in the txg that made them): their charges go back, those
/// of the dnodes already taken into this sync's `items` too.
pub(crate) fn discard_dirty(s: &Shared, inner: &ObjsetInner, items: &[SyncItem]) {
    let dnodes: Vec<Arc<crate::objset::Dnode>> =
        std::mem::take(&mut *inner.dirty.lock()).into_values().flat_map(|m| m.into_values()).collect();
    for dn in dnodes.iter().chain(items.iter().map(|it| &it.dn)) {
        let mut st = dn.st.lock();
        for (_, d) in std::mem::take(&mut st.dirty) {
            inner.discharge_synced(s, d.charge);
        }
    }
}

/// A write into the MOS object set table in the syncing txg.
fn mos_write_in_txg(mos: &ObjectSet, stx: &SyncTx, offset: u64, data: &[u8]) -> Result<()> {
    mos.write(stx.tx(), MOS_OBJSET_TABLE, offset, data)
}

fn free_objset_tree(ctx: &mut TreeCtx, phys: &ObjsetPhys) -> Result<()> {
    // Every object's tree as its dnode block is read (frees are deferred, so
    // the meta tree stays readable until the walk ends), then the meta tree.
    let io = ctx.io;
    tree::walk(io, &phys.meta, &mut |bp, level| {
        if level == 0 {
            let data = io.read_uncached(bp).map_err(block_err)?;
            for chunk in data.chunks_exact(DNODE_SIZE) {
                let d = DnodePhys::decode(chunk)?;
                if d.in_use() {
                    for child in d.bps {
                        ctx.free_subtree(&child, d.nlevels - 1)?;
                    }
                }
            }
        }
        Ok(())
    })?;
    for bp in phys.meta.bps {
        ctx.free_subtree(&bp, phys.meta.nlevels - 1)?;
    }
    Ok(())
}

fn sync_objset(s: &Arc<Shared>, stx: &SyncTx, inner: &Arc<ObjsetInner>) -> Result<ObjsetSync> {
    let txg = stx.txg();
    let props = *inner.props.lock();
    let dnodes: Vec<Arc<crate::objset::Dnode>> = {
        let mut d = inner.dirty.lock();
        let keys: Vec<Txg> = d.range(..=txg).map(|(&t, _)| t).collect();
        let mut out: HashMap<ObjectId, Arc<crate::objset::Dnode>> = HashMap::new();
        for k in keys {
            out.extend(d.remove(&k).unwrap_or_default());
        }
        out.into_values().collect()
    };
    // Snapshot every dirty record up to `txg` (merged oldest to newest).
    let mut items: Vec<SyncItem> = Vec::with_capacity(dnodes.len());
    for dn in dnodes {
        let st = dn.st.lock();
        let mut merged: Option<crate::objset::TxgDirty> = None;
        for (_, d) in st.dirty.range(..=txg) {
            merged = Some(match merged {
                None => crate::objset::TxgDirty::clone(d),
                Some(mut m) => {
                    if d.freed {
                        m.blocks.clear();
                        m.raw.clear();
                        m.frees.clear();
                        m.freed = true;
                    }
                    for &(a, b) in &d.frees {
                        let doomed: Vec<u64> = m.blocks.range(a..b).map(|(&k, _)| k).collect();
                        for k in doomed {
                            m.blocks.remove(&k);
                            m.raw.remove(&k);
                        }
                        m.frees.push((a, b));
                    }
                    for (k, v) in &d.blocks {
                        m.blocks.insert(*k, v.clone());
                        match d.raw.get(k) {
                            Some(r) => m.raw.insert(*k, *r),
                            None => m.raw.remove(k),
                        };
                    }
                    m.shape = d.shape.or(m.shape);
                    m.attrs = d.attrs.clone();
                    m.charge.add(d.charge);
                    m
                }
            });
        }
        let base = st.committed.clone();
        drop(st);
        if let Some(dirty) = merged {
            items.push(SyncItem { dn, dirty, base, written: BTreeMap::new() });
        }
    }
    // An encrypted object set with changes to write must have its key:
    // unloading waits for the object set to be clean (ObjPool::unload_keys).
    // (`keys` checks the root's MAC first: changes are never built on a
    // root that does not authenticate.)
    // A raw receive writes ciphertext and seals made elsewhere: no key.
    let raw = inner.raw.lock().as_ref().map(|r| r.root);
    let keys = match inner.crypt {
        Some(c) if !items.is_empty() && raw.is_none() => Some(inner.keys(s).map_err(|e| {
            ObjError::Io(format!("object set {} has changes to write and no usable key (guid {:#x}): {e}", inner.id.0, c.key_guid))
        })?.expect("an encrypted object set's keys")),
        _ => None,
    };
    let keys = keys.as_deref();
    // Level-0 data blocks, in parallel.
    let data_spec = WriteSpec { compression: props.compression, checksum: props.checksum, copies: props.copies, level: 0, otype: 0, metadata: false };
    let jobs: Vec<DataJob> = items
        .iter()
        .enumerate()
        .flat_map(|(i, it)| it.dirty.blocks.iter().map(move |(&b, d)| (i, b, d.clone(), it.dirty.attrs.otype, it.dirty.attrs.metadata, it.dirty.raw.get(&b).copied())))
        .collect();
    let is_mos = inner.id == MOS_OBJSET_ID;
    let spec_for = |otype: u8, metadata: bool| {
        if is_mos {
            WriteSpec { otype, ..s.meta_spec(props.copies) }
        } else {
            // A dataset's maps (directories, attributes) keep its copies and
            // compression but are placed with metadata.
            WriteSpec { otype, metadata, ..data_spec }
        }
    };
    // Blocks the intent log already wrote for a commit are adopted, not
    // written again (zil/indirect.rs).
    let adopted = crate::zil::adopt(s, stx, inner.id, &jobs.iter().map(|j| &j.2).collect::<Vec<_>>());
    let work: Vec<(&DataJob, Option<BlockPtr>)> = jobs.iter().zip(adopted).collect();
    let results: Vec<(usize, u64, std::result::Result<BlockPtr, tarn_block::BlockError>, u64)> = crate::par::par_map(&work, |((i, b, d, ot, meta, rawblk), adopted)| {
        let r = match (adopted, rawblk) {
            (Some(bp), _) => {
                // A sealed block's MAC binds its type: the log sealed it
                // with its object's (redo.rs), so nothing changes here.
                assert!(!bp.is_encrypted() || bp.otype == *ot, "an adopted encrypted block sealed as type {} for an object of type {ot}", bp.otype);
                Ok(BlockPtr { otype: *ot, ..*bp })
            }
            (None, Some(rb)) => s.io.write_raw(d, rb, spec_for(*ot, *meta), txg),
            (None, None) if raw.is_some() && inner.crypt.is_some() => {
                Err(tarn_block::BlockError::Write("a plain block in an object set receiving raw".into()))
            }
            (None, None) => s.io.write_with(d, spec_for(*ot, *meta), txg, keys),
        };
        let lsize = rawblk.map_or(d.len() as u64, |r| u64::from(r.lsize));
        (*i, *b, r, lsize)
    });
    let mut used_delta: i64 = 0;
    let mut logical_delta: i64 = 0;
    let mut data_logical_delta: i64 = 0;
    let mut data_delta: i64 = 0;
    for (job, (i, b, r, lsize)) in jobs.iter().zip(results) {
        let bp = r.map_err(block_err)?;
        assert_eq!((job.0, job.1), (i, b), "par_map returns results in job order");
        if props.primarycache.keeps(job.4) && job.5.is_none() {
            match keys {
                Some(k) if bp.is_encrypted() => s.io.cache_written_keyed(&bp, job.2.clone(), k),
                _ => s.io.cache_written_as(&bp, job.2.clone(), props.secondarycache.keeps(job.4)),
            }
        }
        if !bp.is_hole() {
            used_delta += bp.asize() as i64;
            logical_delta += lsize as i64;
            if !items[i].dirty.attrs.metadata {
                data_logical_delta += lsize as i64;
                data_delta += bp.asize() as i64;
            }
        }
        items[i].written.insert(b, bp);
    }
    // Trees, bottom-up; then the new dnodes into the meta-object.
    let prev_snap_txg = inner.committed.lock().prev_snap_txg;
    let mut ctx = TreeCtx::new(stx, &s.io, s.meta_spec(props.copies), prev_snap_txg);
    ctx.authenticate = inner.crypt.is_some();
    let mut new_dnodes: BTreeMap<u64, DnodePhys> = BTreeMap::new();
    let mut object_delta: i64 = 0;
    for it in &mut items {
        ctx.used_delta = 0;
        let mut phys = it.base.clone();
        let mut used = phys.used_bytes as i64;
        let was_in_use = phys.in_use();
        ctx.counting_data = phys.flags & DN_METADATA == 0;
        if it.dirty.freed || !it.dirty.attrs.exists {
            for bp in phys.bps {
                ctx.free_subtree(&bp, phys.nlevels - 1)?;
            }
            phys = DnodePhys::empty();
            used = 0;
            used_delta += ctx.used_delta;
            ctx.used_delta = 0;
        }
        let a = &it.dirty.attrs;
        if a.exists {
            if !phys.in_use() {
                phys = DnodePhys::empty();
                phys.flags = DN_IN_USE;
            }
            phys.otype = a.otype;
            phys.block_size = a.block_size;
            phys.bonus = a.bonus;
            phys.flags = if a.metadata { phys.flags | DN_METADATA } else { phys.flags & !DN_METADATA };
            ctx.counting_data = !a.metadata;
            let written_used: i64 = it.written.values().map(|b| b.asize() as i64).sum();
            let ch = Changes { frees: std::mem::take(&mut it.dirty.frees), writes: std::mem::take(&mut it.written) };
            ctx.apply(&mut phys, &ch)?;
            if let Some((levels, nblocks)) = it.dirty.shape {
                crate::raw::apply_shape(&mut ctx, &mut phys, levels, nblocks)?;
            }
            phys.used_bytes = (used + written_used + ctx.used_delta).max(0) as u64;
        } else {
            // Created and freed before reaching disk: its fresh blocks are garbage.
            for bp in it.written.values() {
                ctx.free(bp);
            }
        }
        object_delta += phys.in_use() as i64 - was_in_use as i64;
        used_delta += ctx.used_delta;
        it.base = phys.clone();
        new_dnodes.insert(it.dn.id.0, phys);
    }
    ctx.used_delta = 0;
    // Meta-object blocks holding the changed dnodes.
    let mut committed = inner.committed.lock().clone();
    let mut meta_blocks: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for (&id, phys) in &new_dnodes {
        let blkid = id / DNODES_PER_BLOCK;
        if let std::collections::btree_map::Entry::Vacant(e) = meta_blocks.entry(blkid) {
            let bp = tree::lookup(&s.io, &committed.meta, blkid)?;
            let mut data = if bp.is_hole() { vec![0u8; META_BLOCK_SIZE as usize] } else { s.io.read(&bp).map_err(block_err)?.as_ref().clone() };
            if let (Some(keys), false) = (keys, bp.is_hole()) {
                crate::crypt::open_dnode_block(keys, &bp, blkid, &mut data)?;
            }
            e.insert(data);
        }
        let slot = (id % DNODES_PER_BLOCK) as usize * DNODE_SIZE;
        let blk = meta_blocks.get_mut(&blkid).expect("inserted");
        phys.encode(&mut blk[slot..slot + DNODE_SIZE]);
    }
    let mut meta_spec = WriteSpec { otype: crate::format::OT_META_DNODE, ..s.meta_spec(props.copies) };
    // Dnode blocks of an encrypted object set: bonuses sealed, the IV in
    // the pointer (so at most two copies).
    let mut seals = BTreeMap::new();
    if inner.crypt.is_some() {
        meta_spec.copies = meta_spec.copies.min(2);
    }
    if let Some(keys) = keys {
        for (&b, d) in meta_blocks.iter_mut() {
            seals.insert(b, crate::crypt::seal_dnode_block(keys, b, d)?);
        }
    } else if let Some(r) = inner.raw.lock().as_ref() {
        // Raw receive: the sender's seals (a block whose seal did not
        // arrive stays unstamped, and will not authenticate).
        for &b in meta_blocks.keys() {
            if let Some(seal) = r.seals.get(&b) {
                seals.insert(b, (seal.iv, seal.mac));
            }
        }
    }
    let meta_written: Vec<(u64, std::result::Result<BlockPtr, tarn_block::BlockError>)> =
        {
        let list: Vec<(&u64, &Vec<u8>)> = meta_blocks.iter().collect();
        crate::par::par_map(&list, |(b, d)| (**b, s.io.write(d, meta_spec, txg)))
    };
    let mut ch = Changes::default();
    for (b, r) in meta_written {
        let mut bp = r.map_err(block_err)?;
        if let Some(seal) = seals.get(&b) {
            crate::crypt::stamp(&mut bp, *seal);
        }
        ctx.used_delta += bp.asize() as i64;
        ch.writes.insert(b, bp);
    }
    ctx.apply(&mut committed.meta, &ch)?;
    if let Some(root) = &raw {
        crate::raw::apply_shape(&mut ctx, &mut committed.meta, root.meta_levels, root.meta_nblocks)?;
    }
    committed.next_object = committed.next_object.max(inner.next_object.load(Ordering::Relaxed));
    if is_mos {
        committed.next_objset = committed.next_objset.max(s.next_objset.load(Ordering::Relaxed));
    }
    // The old root block goes in this txg; the new one is written last. A
    // root is never shared (a snapshot keeps the root it was taken from and
    // gives the head a new one), and roots are not counted in used_bytes.
    let old_root = *inner.root_bp.lock();
    stx.free(&old_root);
    // Blocks still held by the newest snapshot: onto the dead list.
    let dead = std::mem::take(&mut ctx.dead);
    if !dead.is_empty() {
        if committed.deadlist == 0 {
            return Err(ObjError::Corrupt(format!("object set {} has a snapshot but no dead list", inner.id.0)));
        }
        crate::snap::deadlist_append(s, stx, committed.deadlist, &dead)?;
    }
    committed.used_bytes = (committed.used_bytes as i64 + used_delta + ctx.used_delta).max(0) as u64;
    committed.logical_bytes = (committed.logical_bytes as i64 + logical_delta + ctx.logical_delta).max(0) as u64;
    committed.data_logical = (committed.data_logical as i64 + data_logical_delta + ctx.data_logical_delta).max(0) as u64;
    committed.data_bytes = (committed.data_bytes as i64 + data_delta + ctx.data_delta).max(0) as u64;
    committed.object_count = (committed.object_count as i64 + object_delta).max(0) as u64;
    let spec = WriteSpec { otype: OT_OBJSET, ..s.meta_spec(props.copies) };
    // The root's own size is known only after writing it: account a fixed
    // estimate first, then correct the stored value is impossible without a
    // rewrite, so the root block is not counted in used_bytes.
    if !is_mos {
        crate::zil::sync_objset_log(s, stx, inner.id, &mut committed.log);
    }
    let root_data = committed.encode();
    let mut root_bp = s.io.write(&root_data, spec, txg).map_err(block_err)?;
    if let (Some(root), Some(_)) = (&raw, inner.crypt) {
        crate::crypt::set_root_mac(&mut root_bp, root.mac);
    } else if inner.crypt.is_some() {
        // The root's MAC: made with the key when there were changes; kept
        // from the old root otherwise (what it covers did not change).
        match (keys, inner.crypt.and_then(|c| s.keys.get(c.key_guid))) {
            (Some(keys), _) => crate::crypt::stamp_root(keys, &committed, &mut root_bp),
            // A new object set's first root, before any change.
            (None, Some(keys)) if old_root.is_hole() => crate::crypt::stamp_root(&keys, &committed, &mut root_bp),
            _ => crate::crypt::carry_root_mac(&mut root_bp, &old_root),
        }
    }
    Ok(ObjsetSync { inner: inner.clone(), items, new_phys: committed, root_bp })
}

fn publish(s: &Shared, r: ObjsetSync, txg: Txg) {
    *r.inner.committed.lock() = r.new_phys;
    *r.inner.root_bp.lock() = r.root_bp;
    for it in r.items {
        let mut st = it.dn.st.lock();
        st.committed = it.base;
        let done: Vec<Txg> = st.dirty.range(..=txg).map(|(&t, _)| t).collect();
        for t in done {
            if let Some(d) = st.dirty.remove(&t) {
                r.inner.discharge_synced(s, d.charge);
            }
        }
        // An emptied BTreeMap keeps its root node (room for 11 dirty
        // records, about 4 KiB here) until dropped: a cached handle of
        // every file created would hold one, counted nowhere (bench/memory.sh's
        // create phase went past the bound by it).
        if st.dirty.is_empty() {
            st.dirty = BTreeMap::new();
        }
    }
    let mut od = r.inner.object_delta.lock();
    let done: Vec<Txg> = od.range(..=txg).map(|(&t, _)| t).collect();
    for t in done {
        od.remove(&t);
    }
}

/// Records a condensed space map would hold: the free tree's extents and
/// the deferred frees.
pub(crate) fn spacemap_extents(a: &tarn_block::alloc::Allocator) -> usize {
    a.vdevs.iter().map(|v| v.extent_count()).sum::<usize>() + a.deferred.values().map(|v| v.len()).sum::<usize>()
}

/// Condense the space map log in this txg? On its own once it holds more
/// than 20,000 records and four times what a condensed map would; when a
/// writer short of space asked (`wanted`), as soon as it holds more than
/// 1,000 and twice that: its blocks are then worth giving back.
pub(crate) fn condense_now(records: u64, extents: usize, wanted: bool) -> bool {
    let records = records as usize;
    (records > 20_000 && records > 4 * extents) || (wanted && records > 1_000 && records > 2 * extents)
}

fn condense_spacemap(s: &Shared, stx: &SyncTx, records: Vec<tarn_block::alloc::Record>) -> Result<(BlockPtr, Vec<BlockPtr>, u64)> {
    let txg = stx.txg();
    let _ = records; // the snapshot below supersedes them
    let old_blocks = s.root.lock().spacemap_blocks.clone();
    for bp in &old_blocks {
        stx.free(bp);
    }
    let _ = s.io.alloc.lock().take_records();
    // Snapshot: allocated extents (deferred and checkpoint-held count as
    // allocated), deferred frees, held extents. write_log adds the
    // snapshot's own allocations to the records.
    let recs = s.io.alloc.lock().snapshot_records();
    let (head, written) = spacemap::write_log(&s.io, txg, BlockPtr::HOLE, recs.clone(), true).map_err(block_err)?;
    let n = recs.len() as u64 + written.len() as u64 * spacemap::LOG_COPIES as u64;
    Ok((head, written, n))
}
