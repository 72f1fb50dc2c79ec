//! Import: labels, uberblocks newest first, the MOS and the space map log
//! of the first txg that verifies (or an older one with `-F`, or the
//! checkpoint), then the sync thread and the scans that were running.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tarn_block::{spacemap, Allocator, BlockIo, BlockPtr};
use tarn_dev::Device;
use tarn_vdev::{PoolState, TopVdev, Uberblock};

use super::{default_props, now_ns, ObjPool, RootState, MOS_OBJSET_ID};
use crate::format::{ObjsetPhys, UberPayload};
use crate::objset::ObjsetInner;
use crate::tree::block_err;
use crate::*;

impl ObjPool {
    pub fn import(devices: Vec<Arc<dyn Device>>, opts: ImportOptions) -> Result<Arc<ObjPool>> {
        Self::import_at(devices, opts, None, false)
    }

    /// `import -m`: imports although a log vdev is missing; the log
    /// records on it are lost (`import_notes` says which chains ended).
    pub fn import_missing_log(devices: Vec<Arc<dyn Device>>, opts: ImportOptions) -> Result<Arc<ObjPool>> {
        Self::import_at(devices, opts, None, true)
    }

    /// Import; with `target`, open the checkpointed state instead of the
    /// newest txg (`import --rewind-to-checkpoint`, see checkpoint.rs).
    pub(crate) fn import_at(
        devices: Vec<Arc<dyn Device>>,
        opts: ImportOptions,
        target: Option<&crate::checkpoint::RewindTarget>,
        missing_log: bool,
    ) -> Result<Arc<ObjPool>> {
        if devices.is_empty() {
            return Err(ObjError::Invalid("no devices given".into()));
        }
        // Labels: every device must belong to the same pool.
        let mut labels = Vec::new();
        for d in &devices {
            labels.push((tarn_vdev::read_label(d.as_ref())?, d.clone()));
        }
        let guid = labels[0].0.config.pool_guid;
        if let Some((l, d)) = labels.iter().find(|(l, _)| l.config.pool_guid != guid) {
            return Err(ObjError::Invalid(format!("{} belongs to pool '{}', not '{}'", d.path(), l.config.name, labels[0].0.config.name)));
        }
        // The newest config among labels wins (labels are rewritten at export/import).
        let mut config =
            labels.iter().map(|(l, _)| l.config.clone()).max_by_key(|c| (c.generation, c.create_txg)).expect("non-empty");
        if let Some(feature) = config.unknown_feature() {
            return Err(ObjError::Invalid(format!(
                "pool '{}' uses feature '{feature}', which this tarn does not support; import it with a newer tarn",
                config.name
            )));
        }
        if config.state == PoolState::Destroyed && !opts.force {
            return Err(ObjError::Invalid(format!("pool '{}' was destroyed (use -f to import anyway)", config.name)));
        }
        if config.state == PoolState::Active && config.hostname != opts.hostname && !opts.force {
            return Err(ObjError::Invalid(format!(
                "pool '{}' was last in use on host '{}' and not exported (use -f to import anyway)",
                config.name, config.hostname
            )));
        }
        if let Some(t) = target {
            t.restrict(&mut config)?;
        }
        // Uberblocks, newest first.
        let mut ubs: Vec<Uberblock> = Vec::new();
        for d in &devices {
            for ub in tarn_vdev::read_uberblocks(d.as_ref()) {
                if ub.pool_guid == guid && !ubs.iter().any(|u| u.txg == ub.txg) {
                    ubs.push(ub);
                }
            }
        }
        ubs.sort_by_key(|u| std::cmp::Reverse(u.txg));
        let newest_seen = ubs.first().map(|u| u.txg).ok_or_else(|| ObjError::Corrupt("no valid uberblock found".into()))?;
        // Leaves find their devices by guid; a device whose label is older
        // than the config (it was away) still belongs if the config lists it.
        let find = |l: &tarn_vdev::LeafConfig| labels.iter().find(|(lab, _)| lab.leaf_guid == l.guid).map(|(_, d)| d.clone());
        let mut tops = Vec::new();
        for tc in &config.top {
            tops.push(Arc::new(TopVdev::open(tc.clone(), &find, newest_seen)?));
        }
        let spares: Vec<Arc<tarn_vdev::LeafVdev>> =
            config.spares.iter().map(|l| Arc::new(tarn_vdev::LeafVdev::from_config(l, find(l), newest_seen))).collect();
        // A missing cache device is UNAVAIL, never a reason to refuse.
        let cache: Vec<Arc<tarn_vdev::LeafVdev>> =
            config.cache.iter().map(|l| Arc::new(tarn_vdev::LeafVdev::from_config(l, find(l), newest_seen))).collect();
        if let Some(t) = tops.iter().find(|t| t.is_log() && t.state() == DevState::Unavail) {
            if !missing_log {
                return Err(ObjError::Invalid(crate::log_vdevs::missing_log_message(&config.name, t)));
            }
        }
        if let Some(t) = tops.iter().find(|t| !t.is_log() && t.state() == DevState::Unavail) {
            return Err(ObjError::Invalid(format!(
                "pool '{}' cannot be imported: vdev {} has too many missing or damaged devices",
                config.name,
                t.status().name
            )));
        }
        let alloc = crate::log_vdevs::new_allocator(&tops);
        let io = BlockIo::new(tops, alloc);
        // Slots poisoned by an earlier rewind are not candidates (but their
        // txg numbers still count in `newest_seen`).
        let rewound: Vec<Uberblock> = target.map(|t| t.uberblock(newest_seen, guid)).into_iter().collect();
        let candidates: Vec<&Uberblock> = match target {
            Some(_) => rewound.iter().collect(),
            None => ubs.iter().filter(|u| UberPayload::decode(&u.payload).is_ok()).collect(),
        };
        let tries = if opts.rewind && target.is_none() { (tarn_block::DEFER_TXGS as usize + 1).min(candidates.len()) } else { 1 };
        let mut last_err = None;
        for ub in candidates.into_iter().take(tries) {
            match Self::load_root(&io, ub) {
                Ok((mos_phys, root, alloc, mos_root)) => {
                    *io.alloc.lock() = alloc;
                    config.state = PoolState::Active;
                    config.hostname = opts.hostname.clone();
                    let open = newest_seen.max(ub.txg) + 1;
                    let mos = ObjsetInner::new(MOS_OBJSET_ID, mos_phys, default_props(), mos_root);
                    let shared = Self::shared(io, config, spares, mos, open, root, opts.readonly);
                    shared.synced_txg.store(ub.txg, Ordering::Relaxed);
                    // The L2ARC: rebuilt in the background from the cache
                    // devices (`start` below); entries born after this txg
                    // are not trusted (a rewind).
                    shared.l2.attach(cache.clone(), ub.txg);
                    crate::checkpoint::load(&shared)?;
                    // Before anything allocates: the logs' blocks.
                    if !opts.readonly {
                        crate::zil::claim_all(&shared);
                    }
                    let devices = crate::vdevs::uberblock_devices(&shared);
                    // A rewind to the checkpoint lands on a fresh txg above
                    // every txg seen, durable before the labels change and
                    // before any slot is poisoned.
                    let rewound_to = target.map_or(ub.txg, |t| t.txg);
                    if !opts.readonly && target.is_some() {
                        tarn_vdev::write_uberblock(&devices, ub)?;
                    }
                    if !opts.readonly {
                        crate::vdevs::write_labels(&shared, Some(PoolState::Active))?;
                    }
                    if !opts.readonly && rewound_to < newest_seen {
                        // Rewound: poison the abandoned txgs' slots so a later
                        // rewind can never land on history whose freed blocks
                        // this pool is about to reuse.
                        for stale in ubs.iter().filter(|u| u.txg > rewound_to) {
                            let poison = Uberblock { txg: stale.txg, timestamp_ns: now_ns(), pool_guid: guid, payload: vec![0u8; 8] };
                            tarn_vdev::write_uberblock(&devices, &poison)?;
                        }
                    }
                    let pool = Self::start(shared);
                    if !opts.readonly {
                        pool.shared.l2.start();
                        pool.resume_scan();
                        crate::trim::resume(&pool.shared);
                    }
                    return Ok(pool);
                }
                Err(e) => last_err = Some(format!("txg {}: {e}", ub.txg)),
            }
        }
        let e = last_err.unwrap_or_default();
        Err(ObjError::Corrupt(if opts.rewind {
            format!("no usable uberblock in the last {tries} txgs ({e})")
        } else {
            format!("the newest txg does not verify ({e}); `import -F` may recover by rewinding to an older txg")
        }))
    }

    fn load_root(io: &BlockIo, ub: &Uberblock) -> Result<(ObjsetPhys, RootState, Allocator, BlockPtr)> {
        let p = UberPayload::decode(&ub.payload)?;
        let data = io.read_uncached(&p.mos_root).map_err(block_err)?;
        let mos = ObjsetPhys::decode(&data)?;
        // Verify the MOS meta tree's top blocks too.
        for bp in &mos.meta.bps {
            if !bp.is_hole() {
                io.read_uncached(bp).map_err(block_err)?;
            }
        }
        let chain = spacemap::read_chain(io, &p.spacemap_head).map_err(block_err)?;
        let mut alloc = crate::log_vdevs::new_allocator(&io.tops());
        let mut blocks = Vec::new();
        for (bp, blk) in &chain {
            for r in &blk.records {
                alloc.replay(r, ub.txg).map_err(ObjError::Corrupt)?;
            }
            blocks.push(*bp);
        }
        Ok((mos, RootState { spacemap_head: p.spacemap_head, spacemap_records: p.spacemap_records, spacemap_blocks: blocks }, alloc, p.mos_root))
    }

    /// After import: a scan that was running goes on from its last
    /// checkpoint; otherwise leaves that missed txgs are resilvered.
    fn resume_scan(&self) {
        let s = &self.shared;
        if let Some(st) = crate::scan::load(s) {
            let running = st.phase == crate::scan::ScanPhase::Scanning;
            let paused = st.paused;
            *s.scanner.stats.lock() = Some(st);
            if running {
                s.scanner.ctl.lock().pause = paused;
                // What leaves went through before the export is not known:
                // none counts as having stayed in service (leaf_marks stays
                // empty), so no DTL is forgotten on the strength of this
                // scan; a fresh resilver follows it.
                s.scanner.leaf_marks.lock().clear();
                crate::scan::spawn(s);
                if paused {
                    s.scanner.ctl.lock().pause = true;
                }
                return;
            }
        }
        if let Err(e) = self.resilver_if_needed() {
            eprintln!("tarn: cannot start resilver: {e}");
        }
    }
}
