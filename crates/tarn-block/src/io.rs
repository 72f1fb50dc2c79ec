//! The I/O pipeline between object trees and vdevs.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tarn_vdev::{ScanOutcome, TopVdev};

use crate::alloc::{Allocator, Extent};
use crate::alloc_lock::AllocLock;
use crate::read_cache::{CacheKey, ReadCache};
use crate::gang::{is_gang, CopyPlace, Placement, GANG_MAX_PIECES};
use crate::bp::{checksum_code, compression_code, BlockPtr, Dva, COMP_OFF, MAX_COPIES};
use crate::crypt::{BlockKeys, RawBlock};
use crate::{checksum, compress, ChecksumKind, Compression};

/// A block ready to place: its pointer (no addresses yet) and physical
/// bytes, borrowed from the data when they are the data itself.
type Prepared<'a> = (BlockPtr, Cow<'a, [u8]>);

#[derive(Debug, thiserror::Error)]
pub enum BlockError {
    #[error("out of space")]
    NoSpace,
    #[error("block at {where_}: {what}")]
    Corrupt { where_: String, what: String },
    #[error("write failed: {0}")]
    Write(String),
}

/// How to write one block.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct WriteSpec {
    pub compression: Compression,
    pub checksum: ChecksumKind,
    pub copies: u8,
    pub level: u8,
    pub otype: u8,
    /// Metadata (indirect and dnode blocks, maps, object-set roots, the
    /// MOS, the space map log): placed apart from data (alloc.rs).
    pub metadata: bool,
}

/// Called with every block as it is freed (the scanner drops it from its
/// queue, so it never reads a block whose space may be reused).
pub type FreeHook = Arc<dyn Fn(&BlockPtr, u64) + Send + Sync>;

/// A process-unique cache key prefix (pipelines and block keys).
pub(crate) fn next_cache_id() -> u64 {
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

pub struct BlockIo {
    /// Swapped whole when the pool's layout changes (attach, add, ...).
    tops: parking_lot::RwLock<Arc<Vec<Arc<TopVdev>>>>,
    free_hook: parking_lot::RwLock<Option<FreeHook>>,
    /// The allocator; its space totals readable without the lock
    /// (alloc_lock.rs).
    pub alloc: AllocLock,
    /// Where verified blocks are cached (read_cache.rs): the process's ARC
    /// unless given another.
    cache: Arc<dyn ReadCache>,
    /// This pipeline's key prefix in its cache (process-unique).
    arc_id: u64,
    /// Cache key prefixes of the block keys whose plaintext this pipeline
    /// cached (each `BlockKeys` has its own: dropped with the keys or the
    /// pipeline).
    keyed_ids: parking_lot::Mutex<std::collections::HashSet<u64>>,
    /// Physical sizes are multiples of this (the largest sector of any vdev).
    unit: u64,
    /// Blocks no copy of which could be read back correctly.
    pub data_errors: AtomicU64,
    /// Blocks written as gang blocks since import (free space too
    /// fragmented to take them whole).
    pub gang_blocks: AtomicU64,
}

impl BlockIo {
    /// A pipeline over `tops`; its blocks are cached in the process's ARC
    /// (`crate::arc`), sized by `ArcCache::set_limits`.
    pub fn new(tops: Vec<Arc<TopVdev>>, alloc: Allocator) -> BlockIo {
        let cache: Arc<dyn ReadCache> = crate::arc::shared_arc().clone();
        BlockIo::with_cache(tops, alloc, cache)
    }

    /// A pipeline whose blocks are cached in `cache`.
    pub fn with_cache(tops: Vec<Arc<TopVdev>>, alloc: Allocator, cache: Arc<dyn ReadCache>) -> BlockIo {
        let unit = tops.iter().map(|t| t.sector()).max().unwrap_or(512);
        BlockIo {
            tops: parking_lot::RwLock::new(Arc::new(tops)),
            free_hook: parking_lot::RwLock::new(None),
            alloc: AllocLock::new(alloc),
            cache,
            arc_id: next_cache_id(),
            keyed_ids: Default::default(),
            unit,
            data_errors: AtomicU64::new(0),
            gang_blocks: AtomicU64::new(0),
        }
    }

    pub fn set_free_hook(&self, hook: Option<FreeHook>) {
        *self.free_hook.write() = hook;
    }

    /// Puts a changed top-level vdev in place (same id).
    pub fn replace_top(&self, top: Arc<TopVdev>) {
        let mut tops = self.tops.write();
        let mut next: Vec<Arc<TopVdev>> = tops.as_ref().clone();
        if let Some(slot) = next.get_mut(top.id() as usize) {
            *slot = top;
        }
        *tops = Arc::new(next);
    }

    /// Adds a top-level vdev (the next id) and its space.
    pub fn add_top(&self, top: Arc<TopVdev>) {
        let mut tops = self.tops.write();
        let mut next: Vec<Arc<TopVdev>> = tops.as_ref().clone();
        let mut alloc = self.alloc.lock();
        alloc.add_vdev(top.asize());
        if top.is_log() {
            alloc.set_log(top.id() as usize);
        }
        drop(alloc);
        next.push(top);
        *tops = Arc::new(next);
    }

    pub fn tops(&self) -> Arc<Vec<Arc<TopVdev>>> {
        self.tops.read().clone()
    }

    pub fn unit(&self) -> u64 {
        self.unit
    }

    /// Physical size for `len` bytes of payload.
    pub fn psize_for(&self, len: usize) -> u64 {
        (len as u64).div_ceil(self.unit).max(1) * self.unit
    }

    /// Where the copies of a physical block of `psize` bytes go: whole, on
    /// distinct top-level vdevs where there are enough of them; when no free
    /// extent can hold a copy whole, every copy as a gang block (gang.rs).
    pub fn place(&self, psize: u64, copies: u8, metadata: bool) -> Result<Placement, BlockError> {
        let tops = self.tops();
        let mut a = self.alloc.lock();
        let n = copies.clamp(1, MAX_COPIES as u8) as usize;
        let mut whole: Vec<Extent> = Vec::new();
        while whole.len() < n {
            let avoid: Vec<u32> = whole.iter().map(|e| e.vdev).collect();
            let size_of = |v: usize| tops.get(v).map_or(u64::MAX, |t| t.alloc_size(psize));
            let sector_of = |v: usize| tops.get(v).map_or(512, |t| t.sector());
            match a.alloc(&size_of, &sector_of, &avoid, metadata) {
                Some(e) => whole.push(e),
                None => break,
            }
        }
        if whole.len() == n {
            let copies = whole.iter().map(|e| CopyPlace::Whole(Dva { vdev: e.vdev, asize: e.len as u32, offset: e.offset })).collect();
            return Ok(Placement { copies });
        }
        for e in whole.into_iter().rev() {
            a.unalloc(e);
        }
        let mut placed: Vec<CopyPlace> = Vec::new();
        while placed.len() < n {
            let avoid: Vec<u32> = placed.iter().map(|c| c.dva().vdev).collect();
            match self.place_gang(&mut a, &tops, psize, metadata, &avoid) {
                Some(c) => placed.push(c),
                None => {
                    for e in placed.iter().flat_map(CopyPlace::extents).collect::<Vec<_>>().into_iter().rev() {
                        a.unalloc(e);
                    }
                    return Err(BlockError::NoSpace);
                }
            }
        }
        self.gang_blocks.fetch_add(1, Ordering::Relaxed);
        Ok(Placement { copies: placed })
    }

    /// Takes back placements that were never written (in the txg being
    /// synced): their space is free at once.
    pub fn unplace<'a>(&self, placements: impl Iterator<Item = &'a Placement>) {
        let mut a = self.alloc.lock();
        let extents: Vec<Extent> = placements.flat_map(Placement::extents).collect();
        for e in extents.into_iter().rev() {
            a.unalloc(e);
        }
    }

    /// One gang copy of `psize` bytes: pieces, halving their size until
    /// free extents take them, and the headers listing them, all on one
    /// vdev (not in `avoid` if possible).
    fn place_gang(&self, a: &mut Allocator, tops: &[Arc<TopVdev>], psize: u64, metadata: bool, avoid: &[u32]) -> Option<CopyPlace> {
        let unit = self.unit;
        let header_psize = self.gang_header_psize();
        for pass in 0..2 {
            for (v, top) in tops.iter().enumerate() {
                if (pass == 0 && avoid.contains(&(v as u32))) || top.is_log() || top.is_hole() {
                    continue;
                }
                let sector = top.sector();
                let header_len = top.alloc_size(header_psize);
                let Some(root) = a.alloc_on(v, header_len, sector, true) else { continue };
                let mut headers = vec![root];
                let mut pieces: Vec<(Extent, u64)> = Vec::new();
                let mut left = psize;
                let mut target = (psize / 2 / unit * unit).max(unit);
                let complete = loop {
                    if left == 0 {
                        break true;
                    }
                    if pieces.len() == GANG_MAX_PIECES {
                        break false;
                    }
                    let want = target.min(left);
                    match a.alloc_on(v, top.alloc_size(want), sector, metadata) {
                        Some(e) => {
                            pieces.push((e, want));
                            left -= want;
                        }
                        None if target <= unit => break false,
                        None => target = (target / 2 / unit * unit).max(unit),
                    }
                };
                let complete = complete
                    && (1..crate::gang::headers_for(pieces.len())).all(|_| match a.alloc_on(v, header_len, sector, true) {
                        Some(h) => {
                            headers.push(h);
                            true
                        }
                        None => false,
                    });
                if complete {
                    if let Some(node) = crate::gang::build_tree(&headers, pieces.clone()) {
                        return Some(CopyPlace::Gang(node));
                    }
                }
                for e in headers.iter().skip(1).rev().chain(pieces.iter().map(|(e, _)| e).rev()).chain(std::iter::once(&root)) {
                    a.unalloc(*e);
                }
            }
        }
        None
    }

    /// Writes a fresh physical block to every copy `placement` gives it
    /// (`bp` carries the placement: see `Placement::apply`).
    pub fn write_placed(&self, bp: &BlockPtr, placement: &Placement, phys: &[u8]) -> Result<(), BlockError> {
        let tops = self.tops();
        let mut failures = Vec::new();
        for copy in &placement.copies {
            let r = match copy {
                CopyPlace::Whole(d) => match tops.get(d.vdev as usize) {
                    Some(top) => top.write(d.offset, phys, bp.birth).map_err(|e| BlockError::Write(e.to_string())),
                    None => Err(BlockError::Write(format!("no vdev {}", d.vdev))),
                },
                CopyPlace::Gang(node) => self.write_gang_copy(node, phys, bp.birth),
            };
            if let Err(e) = r {
                failures.push(e.to_string());
            }
        }
        if failures.len() == placement.copies.len() {
            return Err(BlockError::Write(failures.join("; ")));
        }
        Ok(())
    }

    /// Write one block; returns its pointer. All-zero data with compression
    /// on becomes a hole, as in ZFS.
    pub fn write(&self, data: &[u8], spec: WriteSpec, birth: u64) -> Result<BlockPtr, BlockError> {
        self.write_with(data, spec, birth, None)
    }

    /// As `write`, sealed with `keys` when given (an encrypted dataset's
    /// block: at most two copies, crypt.rs).
    pub fn write_with(&self, data: &[u8], spec: WriteSpec, birth: u64, keys: Option<&BlockKeys>) -> Result<BlockPtr, BlockError> {
        let Some((mut bp, phys)) = self.prepare_cow(data, spec, birth, keys)? else { return Ok(BlockPtr::HOLE) };
        let placement = self.place(u64::from(bp.psize), copies_for(spec.copies, keys.is_some()), spec.metadata)?;
        placement.apply(&mut bp);
        self.write_placed(&bp, &placement, &phys)?;
        Ok(bp)
    }

    /// Writes a block sealed on another pool as it is (a raw receive):
    /// `phys` is its ciphertext, `raw` the pointer fields its seal binds;
    /// only the addresses, birth and checksum are this pool's. Nothing is
    /// compressed, sealed or opened: no key is needed.
    pub fn write_raw(&self, phys: &[u8], raw: &RawBlock, spec: WriteSpec, birth: u64) -> Result<BlockPtr, BlockError> {
        if phys.len() != raw.psize as usize || phys.is_empty() || raw.lsize == 0 {
            return Err(BlockError::Write(format!("raw block of {} bytes with psize {} and lsize {}", phys.len(), raw.psize, raw.lsize)));
        }
        if !u64::from(raw.psize).is_multiple_of(self.unit) {
            return Err(BlockError::Write(format!(
                "a raw block of {} bytes does not fit this pool's {}-byte allocation unit (receive into a pool of the same or a smaller sector size)",
                raw.psize, self.unit
            )));
        }
        let mut bp = BlockPtr::HOLE;
        bp.lsize = raw.lsize;
        bp.psize = raw.psize;
        bp.birth = birth;
        bp.fill = 1;
        bp.compression = raw.compression;
        bp.checksum_kind = checksum_code(spec.checksum);
        bp.level = 0;
        bp.otype = spec.otype;
        bp.flags = crate::crypt::FLAG_ENCRYPTED;
        bp.iv = raw.iv;
        bp.mac = raw.mac;
        bp.checksum = checksum::compute(spec.checksum, phys);
        let placement = self.place(u64::from(bp.psize), copies_for(spec.copies, true), spec.metadata)?;
        placement.apply(&mut bp);
        self.write_placed(&bp, &placement, phys)?;
        Ok(bp)
    }

    /// What `write` writes: the block pointer without its addresses and
    /// the physical bytes (compressed, padded to the allocation unit,
    /// checksummed), or None for data that becomes a hole. For writers
    /// that place the block themselves (the intent log's indirect writes).
    pub fn prepare(&self, data: &[u8], spec: WriteSpec, birth: u64) -> Option<(BlockPtr, Vec<u8>)> {
        self.prepare_with(data, spec, birth, None).ok().flatten()
    }

    /// As `prepare`, sealing the physical block with `keys` when given
    /// (compress -> pad -> seal -> checksum over the ciphertext).
    pub fn prepare_with(&self, data: &[u8], spec: WriteSpec, birth: u64, keys: Option<&BlockKeys>) -> Result<Option<(BlockPtr, Vec<u8>)>, BlockError> {
        Ok(self.prepare_cow(data, spec, birth, keys)?.map(|(bp, phys)| (bp, phys.into_owned())))
    }

    /// `prepare_with`, the physical bytes borrowed from `data` when they
    /// are the data itself (stored uncompressed, not sealed, a whole
    /// number of allocation units): a block of incompressible data is not
    /// copied on its way to the vdevs.
    fn prepare_cow<'a>(&self, data: &'a [u8], spec: WriteSpec, birth: u64, keys: Option<&BlockKeys>) -> Result<Option<Prepared<'a>>, BlockError> {
        if spec.compression != Compression::Off && data.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        let (code, mut phys) = match compress::compress(spec.compression, data) {
            Some(z) => (compression_code(spec.compression), Cow::Owned(z)),
            None => (COMP_OFF, Cow::Borrowed(data)),
        };
        let psize = self.psize_for(phys.len());
        if psize as usize != phys.len() {
            phys.to_mut().resize(psize as usize, 0);
        }
        let mut bp = BlockPtr::HOLE;
        bp.lsize = data.len() as u32;
        bp.psize = psize as u32;
        bp.birth = birth;
        bp.fill = 1;
        bp.compression = code;
        bp.checksum_kind = checksum_code(spec.checksum);
        bp.level = spec.level;
        bp.otype = spec.otype;
        if let Some(keys) = keys {
            keys.seal(&mut bp, phys.to_mut()).map_err(|e| BlockError::Write(format!("cannot encrypt block: {e}")))?;
        }
        bp.checksum = checksum::compute(spec.checksum, &phys);
        Ok(Some((bp, phys)))
    }

    /// Rewrites copy `d` of `bp` from good physical bytes (self-healing);
    /// returns the bytes written.
    fn rewrite_copy(&self, d: &Dva, bp: &BlockPtr, phys: &[u8]) -> Result<u64, BlockError> {
        if is_gang(bp) {
            return self.rewrite_gang_copy(d, bp, phys);
        }
        let top = self.tops().get(d.vdev as usize).cloned().ok_or_else(|| BlockError::Write(format!("no vdev {}", d.vdev)))?;
        top.write(d.offset, phys, bp.birth).map_err(|e| BlockError::Write(e.to_string()))?;
        Ok(u64::from(bp.psize))
    }

    fn key(&self, bp: &BlockPtr) -> CacheKey {
        CacheKey { io: self.arc_id, vdev: bp.dva[0].vdev, offset: bp.dva[0].offset, birth: bp.birth }
    }

    /// The cache key of `bp`'s plaintext opened with `keys`: under the
    /// keys' own prefix, so unloading them can drop exactly that
    /// plaintext (`drop_keyed`).
    fn key_keyed(&self, bp: &BlockPtr, keys: &BlockKeys) -> CacheKey {
        CacheKey { io: keys.cache_id(), ..self.key(bp) }
    }

    /// The cache key of `bp` as read with `keys`: an encrypted block's
    /// plaintext under the keys' prefix.
    fn cache_key(&self, bp: &BlockPtr, keys: Option<&BlockKeys>) -> CacheKey {
        match keys {
            Some(k) if bp.is_encrypted() => self.key_keyed(bp, k),
            _ => self.key(bp),
        }
    }

    /// Puts a block in the cache (remembering a keyed prefix, so dropping
    /// the pipeline drops its blocks too).
    fn cache_insert(&self, key: CacheKey, data: Arc<Vec<u8>>, l2: Option<[u8; 32]>) {
        if key.io != self.arc_id {
            self.keyed_ids.lock().insert(key.io);
        }
        self.cache.insert(key, data, l2);
    }

    /// Drops from the cache every block opened with `keys` (their key is
    /// being unloaded: no plaintext of theirs stays in memory).
    pub fn drop_keyed(&self, keys: &BlockKeys) {
        self.cache.drop_io(keys.cache_id());
        self.keyed_ids.lock().remove(&keys.cache_id());
    }

    /// `cache_written_as` for a block sealed with `keys` (its plaintext
    /// goes under the keys' prefix, never to the second level).
    pub fn cache_written_keyed(&self, bp: &BlockPtr, data: Arc<Vec<u8>>, keys: &BlockKeys) {
        if bp.is_hole() || data.len() != bp.lsize as usize {
            return;
        }
        self.cache_insert(self.key_keyed(bp, keys), data, None);
    }

    /// Read, verify and decompress a block (through the ARC).
    pub fn read(&self, bp: &BlockPtr) -> Result<Arc<Vec<u8>>, BlockError> {
        self.read_cached(bp, false)
    }

    /// As `read`, for a read ahead of a reader: counted apart from demand
    /// hits and misses.
    pub fn read_prefetch(&self, bp: &BlockPtr) -> Result<Arc<Vec<u8>>, BlockError> {
        self.read_cached(bp, true)
    }

    /// As `read`, but a block read from the vdevs is not kept in the cache
    /// (a dataset whose `primarycache` leaves it out); one already cached
    /// is served from there.
    pub fn read_passing(&self, bp: &BlockPtr) -> Result<Arc<Vec<u8>>, BlockError> {
        self.read_passing_with(bp, None)
    }

    /// As `read_passing`, opening an encrypted block with `keys` (its
    /// plaintext looked up under the keys' prefix, as `read_keyed`).
    pub fn read_passing_with(&self, bp: &BlockPtr, keys: Option<&BlockKeys>) -> Result<Arc<Vec<u8>>, BlockError> {
        if let Some(v) = self.cache.get(&self.cache_key(bp, keys), bp, false) {
            return Ok(v);
        }
        Ok(Arc::new(self.read_uncached_with(bp, keys)?))
    }

    /// As `read` (or `read_prefetch`), for a block the cache keeps but
    /// whose dataset's `secondarycache` may keep out of the second level
    /// (`l2` false: it is not offered to the L2ARC when evicted).
    pub fn read_cached_as(&self, bp: &BlockPtr, prefetch: bool, l2: bool) -> Result<Arc<Vec<u8>>, BlockError> {
        self.read_keyed(bp, prefetch, l2, None)
    }

    /// As `read_cached_as`, opening an encrypted block with `keys`. An
    /// encrypted block is never offered to the second level: the L2ARC
    /// keeps logical bytes, and plaintext must not reach a cache device.
    pub fn read_keyed(&self, bp: &BlockPtr, prefetch: bool, l2: bool, keys: Option<&BlockKeys>) -> Result<Arc<Vec<u8>>, BlockError> {
        let key = self.cache_key(bp, keys);
        if let Some(v) = self.cache.get(&key, bp, prefetch) {
            return Ok(v);
        }
        let mut data = self.read_uncached_with(bp, keys)?;
        data.shrink_to_fit();
        let data = Arc::new(data);
        self.cache_insert(key, data.clone(), (l2 && !bp.is_encrypted()).then_some(bp.checksum));
        Ok(data)
    }

    fn read_cached(&self, bp: &BlockPtr, prefetch: bool) -> Result<Arc<Vec<u8>>, BlockError> {
        self.read_cached_as(bp, prefetch, true)
    }

    /// The id this pipeline's blocks carry in the cache (`CacheKey::io`):
    /// the L2ARC routes by it.
    pub fn cache_id(&self) -> u64 {
        self.arc_id
    }

    /// `bp`'s data if the ARC holds it, as `read_keyed` returns it (a
    /// hit counted); None, without reading anything (not even from an
    /// L2ARC device) and without counting a miss, when it does not.
    pub fn read_if_cached(&self, bp: &BlockPtr, keys: Option<&BlockKeys>) -> Option<Arc<Vec<u8>>> {
        self.cache.get_resident(&self.cache_key(bp, keys))
    }

    /// Whether `bp`'s data is in the cache (no read, no hit counted).
    pub fn is_cached(&self, bp: &BlockPtr) -> bool {
        self.cache.contains(&self.key(bp))
    }

    /// Cache a block just written from the data it was written from (its
    /// logical bytes, as a read would return them): a block rewritten soon
    /// after (a small write into a large record, read-modify-write) is then
    /// not read back from the vdevs, verified and decompressed on the
    /// writer's thread.
    pub fn cache_written(&self, bp: &BlockPtr, data: Arc<Vec<u8>>) {
        self.cache_written_as(bp, data, true)
    }

    /// As `cache_written`; `l2` false keeps the block out of the second
    /// level when the cache evicts it (`secondarycache`).
    pub fn cache_written_as(&self, bp: &BlockPtr, data: Arc<Vec<u8>>, l2: bool) {
        if bp.is_hole() || data.len() != bp.lsize as usize {
            return;
        }
        self.cache.insert(self.key(bp), data, (l2 && !bp.is_encrypted()).then_some(bp.checksum));
    }

    /// Drop a block from the cache (it was freed).
    pub fn evict(&self, bp: &BlockPtr) {
        self.cache.remove(&self.key(bp));
    }

    /// Read a physical block from the first copy that verifies; rewrite
    /// copies found bad. Returns the verified physical bytes.
    pub fn read_phys(&self, bp: &BlockPtr) -> Result<Vec<u8>, BlockError> {
        let kind = bp.checksum_kind().ok_or_else(|| BlockError::Corrupt { where_: "bp".into(), what: "checksum kind".into() })?;
        let verify = |buf: &[u8]| checksum::compute(kind, buf) == bp.checksum;
        let mut bad: Vec<Dva> = Vec::new();
        let mut errors = Vec::new();
        let tops = self.tops();
        for d in bp.dvas() {
            let Some(top) = tops.get(d.vdev as usize) else {
                errors.push(format!("no vdev {}", d.vdev));
                continue;
            };
            let read = if is_gang(bp) {
                self.read_gang_copy(d, bp).and_then(|data| {
                    if verify(&data) {
                        Ok(data)
                    } else {
                        Err(BlockError::Corrupt { where_: format!("gang copy {d:?}"), what: "checksum mismatch".into() })
                    }
                })
            } else {
                top.read(d.offset, bp.psize as u64, bp.birth, &verify).map(|out| out.data).map_err(|e| BlockError::Write(e.to_string()))
            };
            match read {
                Ok(data) => {
                    for b in &bad {
                        let _ = self.rewrite_copy(b, bp, &data);
                    }
                    return Ok(data);
                }
                Err(e) => {
                    errors.push(format!("vdev {} offset {}: {e}", d.vdev, d.offset));
                    bad.push(*d);
                }
            }
        }
        self.data_errors.fetch_add(1, Ordering::Relaxed);
        Err(BlockError::Corrupt { where_: format!("{:?}", bp.dva[0]), what: errors.join("; ") })
    }

    /// Reads, verifies and decompresses a block past the cache. An
    /// encrypted block fails here: it needs its keys (`read_uncached_with`).
    pub fn read_uncached(&self, bp: &BlockPtr) -> Result<Vec<u8>, BlockError> {
        self.read_uncached_with(bp, None)
    }

    /// As `read_uncached`; an encrypted block is opened with `keys` (its
    /// MAC checked before anything is decompressed or returned).
    pub fn read_uncached_with(&self, bp: &BlockPtr, keys: Option<&BlockKeys>) -> Result<Vec<u8>, BlockError> {
        let mut phys = self.read_phys(bp)?;
        if bp.is_encrypted() {
            let Some(keys) = keys else {
                return Err(BlockError::Corrupt { where_: format!("{:?}", bp.dva[0]), what: "encrypted block and no key loaded".into() });
            };
            if let Err(e) = keys.open(bp, &mut phys) {
                // Every copy verified against the checksum, so no copy can
                // do better: the block or its pointer was altered.
                self.data_errors.fetch_add(1, Ordering::Relaxed);
                return Err(BlockError::Corrupt { where_: format!("{:?}", bp.dva[0]), what: e.to_string() });
            }
        }
        let data = if bp.compression == COMP_OFF && phys.len() >= bp.lsize as usize {
            // Stored as is (incompressible data): the bytes read are the block.
            phys.truncate(bp.lsize as usize);
            phys
        } else {
            compress::decompress(bp.compression, &phys, bp.lsize as usize)
                .map_err(|what| BlockError::Corrupt { where_: format!("{:?}", bp.dva[0]), what })?
        };
        if bp.flags & crate::crypt::FLAG_CHILDREN_DIGEST != 0 && crate::crypt::children_digest(&data) != Some(bp.mac) {
            // The checksum verified: the block pointers in it, or this
            // pointer's digest, were changed together with the checksum.
            self.data_errors.fetch_add(1, Ordering::Relaxed);
            return Err(BlockError::Corrupt { where_: format!("{:?}", bp.dva[0]), what: "children digest mismatch (authentication failed)".into() });
        }
        Ok(data)
    }

    /// Scrub (`scrub`) or resilver one block: every DVA through its top
    /// vdev's scan step; a DVA that cannot be recovered is rewritten from
    /// another DVA when the block has one (ditto copies). An error means
    /// no copy of the block could be read back correctly.
    pub fn scan_block(&self, bp: &BlockPtr, scrub: bool) -> Result<ScanOutcome, BlockError> {
        let kind = bp.checksum_kind().ok_or_else(|| BlockError::Corrupt { where_: "bp".into(), what: "checksum kind".into() })?;
        let verify = |buf: &[u8]| checksum::compute(kind, buf) == bp.checksum;
        let tops = self.tops();
        let mut total = ScanOutcome::default();
        let mut failed: Vec<Dva> = Vec::new();
        let mut errors = Vec::new();
        for d in bp.dvas() {
            let Some(top) = tops.get(d.vdev as usize) else {
                errors.push(format!("no vdev {}", d.vdev));
                continue;
            };
            if !scrub && !top.needs_resilver(bp.birth) {
                continue;
            }
            let scanned = if is_gang(bp) {
                self.scan_gang_copy(d, bp, scrub).map_err(|e| e.to_string())
            } else {
                top.scan(d.offset, bp.psize as u64, bp.birth, &verify, scrub).map_err(|e| e.to_string())
            };
            match scanned {
                Ok(o) => {
                    total.read_bytes += o.read_bytes;
                    total.repaired_bytes += o.repaired_bytes;
                    total.resilvered_bytes += o.resilvered_bytes;
                }
                Err(e) => {
                    errors.push(format!("vdev {} offset {}: {e}", d.vdev, d.offset));
                    failed.push(*d);
                }
            }
        }
        if failed.is_empty() {
            return Ok(total);
        }
        if failed.len() < bp.dvas().len() {
            // Another copy is good: rewrite the failed ones from it (if no
            // copy reads back, read_phys has counted the data error).
            let Ok(phys) = self.read_phys(bp) else {
                return Err(BlockError::Corrupt { where_: format!("{:?}", bp.dva[0]), what: errors.join("; ") });
            };
            {
                for d in &failed {
                    if let Ok(n) = self.rewrite_copy(d, bp, &phys) {
                        total.repaired_bytes += n;
                    }
                }
                return Ok(total);
            }
        }
        self.data_errors.fetch_add(1, Ordering::Relaxed);
        Err(BlockError::Corrupt { where_: format!("{:?}", bp.dva[0]), what: errors.join("; ") })
    }

    /// Free every copy of a block in txg `txg` (reusable after the defer
    /// window; held instead while a checkpoint older than the block's
    /// birth exists, see `Allocator::free`).
    pub fn free(&self, bp: &BlockPtr, txg: u64) {
        if bp.is_hole() {
            return;
        }
        if let Some(hook) = self.free_hook.read().as_ref() {
            hook(bp, txg);
        }
        self.evict(bp);
        // A gang block's pieces are found in its headers (read first, not
        // under the allocator's lock); a header that no longer reads back
        // leaks its pieces, which `debug check` then reports.
        let extents = match self.extents_of(bp) {
            Ok(extents) => extents,
            Err(e) => {
                eprintln!("tarn: cannot free gang block {:?}: {e}", bp.dva[0]);
                Vec::new()
            }
        };
        let mut a = self.alloc.lock();
        for e in extents {
            a.free(e, txg, bp.birth);
        }
    }

    /// Until the next [`BlockIo::flush`], the vdevs gather the writes
    /// they get and send them in runs of adjacent blocks (tarn-vdev's
    /// gather.rs): a txg being written out.
    pub fn gather_writes(&self) {
        for t in self.tops().iter() {
            t.gather_writes();
        }
    }

    /// Flushes every vdev; `txg` is the txg whose writes the flush makes
    /// durable (a leaf that fails it records that txg in its DTL).
    pub fn flush(&self, txg: u64) -> Result<(), BlockError> {
        let mut failures = Vec::new();
        for t in self.tops().iter() {
            if let Err(e) = t.flush(txg) {
                // A txg writes nothing to a log vdev (the intent log
                // flushes its own writes): one that is gone fails no txg.
                if !t.is_log() {
                    failures.push(e.to_string());
                }
            }
        }
        if !failures.is_empty() {
            return Err(BlockError::Write(failures.join("; ")));
        }
        Ok(())
    }
}

/// Copies to write: an encrypted block has room for two (its IV takes the
/// third DVA's place).
fn copies_for(copies: u8, encrypted: bool) -> u8 {
    if encrypted {
        copies.min(MAX_COPIES as u8 - 1)
    } else {
        copies
    }
}

impl Drop for BlockIo {
    /// An exported pool keeps nothing in the ARC.
    fn drop(&mut self) {
        self.cache.drop_io(self.arc_id);
        for id in self.keyed_ids.get_mut().drain() {
            self.cache.drop_io(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arc::ArcCache;
    use tarn_dev::{Device, MemDevice};
    use tarn_vdev::{LeafConfig, TopConfig, TopKind};

    /// A pipeline on one in-memory disk with an ARC of its own.
    fn io_with_own_arc() -> (BlockIo, Arc<ArcCache>) {
        let dev = MemDevice::new("m", 64 << 20) as Arc<dyn Device>;
        let kind = TopKind::Disk;
        let asize = TopVdev::compute_asize(&kind, 12, &[dev.size()]).unwrap();
        let cfg = TopConfig { class: Default::default(), id: 0, guid: 1, kind, ashift: 12, asize, children: vec![LeafConfig::new(2, "m".into())] };
        let top = Arc::new(TopVdev::new(cfg, vec![Some(dev)]).unwrap());
        let arc = Arc::new(ArcCache::new(32 << 20, 1 << 20));
        let io = BlockIo::with_cache(vec![top], Allocator::new(&[asize]), arc.clone());
        (io, arc)
    }

    fn spec() -> WriteSpec {
        WriteSpec { compression: Compression::Lz4, checksum: ChecksumKind::Fletcher4, copies: 1, level: 0, otype: 0, metadata: false }
    }

    /// Reads go through the pipeline's own cache: the first misses and
    /// fills it, the second hits; a free invalidates the block, and
    /// dropping the pipeline empties the cache of its blocks.
    #[test]
    fn reads_fill_the_cache_and_a_free_invalidates() {
        let (io, arc) = io_with_own_arc();
        let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        let bp = io.write(&data, spec(), 5).unwrap();
        assert!(!io.is_cached(&bp), "a write does not fill the read cache");
        assert_eq!(io.read(&bp).unwrap().as_slice(), &data[..]);
        assert_eq!((arc.stats().hits, arc.stats().misses), (0, 1));
        assert!(io.is_cached(&bp));
        assert_eq!(io.read(&bp).unwrap().as_slice(), &data[..]);
        assert_eq!((arc.stats().hits, arc.stats().misses), (1, 1));
        io.free(&bp, 6);
        assert!(!io.is_cached(&bp), "a freed block leaves the cache");
        assert_eq!(arc.stats().blocks, 0);
        let other = io.write(&data, spec(), 7).unwrap();
        io.read(&other).unwrap();
        assert_eq!(arc.stats().blocks, 1);
        let data = Arc::new(data);
        let third = io.write(&data, spec(), 8).unwrap();
        io.cache_written(&third, data.clone());
        assert!(io.is_cached(&third), "a block cached as written");
        let hits = arc.stats().hits;
        assert!(Arc::ptr_eq(&io.read(&third).unwrap(), &data), "read back from the cache, not the vdev");
        assert_eq!(arc.stats().hits, hits + 1);
        io.cache_written(&BlockPtr::HOLE, Arc::new(vec![0u8; 4096]));
        io.cache_written(&bp, Arc::new(vec![1u8; 10]));
        assert_eq!(arc.stats().blocks, 2, "holes and data of the wrong size are not cached");
        drop(io);
        assert_eq!(arc.stats().blocks, 0, "a dropped pipeline leaves nothing in its cache");
    }

    /// An encrypted block through the pipeline: two copies at most, sealed
    /// on disk, checksum over the ciphertext (so scrub needs no key), read
    /// back only with its keys, and a block altered with a matching
    /// checksum (what an attacker with the disk can do) is refused by its
    /// MAC, never returned.
    #[test]
    fn encrypted_blocks_are_sealed_verified_and_opened() {
        let (io, _arc) = io_with_own_arc();
        let keys = BlockKeys::new(crate::Cipher::Aes256Gcm, &tarn_keys::MasterKey::from_bytes(&[9u8; 32])).unwrap();
        let data: Vec<u8> = b"tarn-marker-plaintext ".iter().cycle().take(16384).copied().collect();
        let mut spec = spec();
        spec.copies = 3;
        let bp = io.write_with(&data, spec, 5, Some(&keys)).unwrap();
        assert!(bp.is_encrypted());
        assert_eq!(bp.dvas().len(), 2, "copies=3 gives two copies when encrypted");
        assert!(bp.compression != COMP_OFF, "compressed before sealing");
        let phys = io.read_phys(&bp).unwrap();
        assert!(!phys.windows(11).any(|w| w == b"tarn-marker"), "no plaintext on disk");
        assert_eq!(io.scan_block(&bp, true).unwrap().repaired_bytes, 0, "scrub verifies without a key");
        let err = io.read_uncached(&bp).unwrap_err().to_string();
        assert!(err.contains("no key loaded"), "{err}");
        assert_eq!(io.read_keyed(&bp, false, true, Some(&keys)).unwrap().as_slice(), &data[..]);
        let other = BlockKeys::new(crate::Cipher::Aes256Gcm, &tarn_keys::MasterKey::from_bytes(&[8u8; 32])).unwrap();
        assert!(io.read_uncached_with(&bp, Some(&other)).unwrap_err().to_string().contains("MAC mismatch"));

        // Rewrite one ciphertext byte on both copies and give the block
        // pointer the matching checksum: the checksum passes, the MAC not.
        let mut forged = phys.clone();
        forged[100] ^= 0x40;
        let tops = io.tops();
        for d in bp.dvas() {
            tops[d.vdev as usize].write(d.offset, &forged, bp.birth).unwrap();
        }
        let mut bad = bp;
        bad.checksum = checksum::compute(ChecksumKind::Fletcher4, &forged);
        let errors = io.data_errors.load(Ordering::Relaxed);
        let err = io.read_uncached_with(&bad, Some(&keys)).unwrap_err().to_string();
        assert!(err.contains("MAC mismatch"), "{err}");
        assert_eq!(io.data_errors.load(Ordering::Relaxed), errors + 1, "counted as a data error");
        // And a plaintext block of the same pool is untouched by all this.
        let plain = io.write(&data, self::spec(), 6).unwrap();
        assert!(!plain.is_encrypted());
        assert_eq!(io.read_uncached(&plain).unwrap(), data);
    }

    /// Plaintext of encrypted blocks is cached under its keys' own prefix:
    /// dropping the keys' blocks leaves nothing of theirs in the cache and
    /// everything else; a dropped pipeline takes its keyed blocks too.
    #[test]
    fn keyed_plaintext_is_dropped_with_its_keys() {
        let (io, arc) = io_with_own_arc();
        let keys = BlockKeys::new(crate::Cipher::Aes256Gcm, &tarn_keys::MasterKey::from_bytes(&[5u8; 32])).unwrap();
        let data = vec![7u8; 8192];
        let sealed = io.write_with(&data, spec(), 5, Some(&keys)).unwrap();
        let written = io.write_with(&data, spec(), 5, Some(&keys)).unwrap();
        let plain = io.write(&data, spec(), 5).unwrap();
        assert_eq!(io.read_keyed(&sealed, false, true, Some(&keys)).unwrap().as_slice(), &data[..]);
        io.cache_written_keyed(&written, Arc::new(data.clone()), &keys);
        io.read(&plain).unwrap();
        assert_eq!(arc.stats().blocks, 3);
        let hits = arc.stats().hits;
        io.read_keyed(&sealed, false, true, Some(&keys)).unwrap();
        io.read_keyed(&written, false, true, Some(&keys)).unwrap();
        assert_eq!(arc.stats().hits, hits + 2, "keyed blocks are served from the cache");
        io.drop_keyed(&keys);
        assert_eq!(arc.stats().blocks, 1, "only the plain block stays");
        io.read_keyed(&sealed, false, true, Some(&keys)).unwrap();
        assert_eq!(arc.stats().blocks, 2);
        drop(io);
        assert_eq!(arc.stats().blocks, 0, "a dropped pipeline takes its keyed blocks along");
    }

    /// An indirect block of an encrypted object set carries its children's
    /// digest: one child pointer turned to another valid block (a swap or
    /// a replay) with the checksum fixed up is refused, without any key;
    /// addresses and births of children are not covered (a resilver or a
    /// raw receive may change them).
    #[test]
    fn children_digests_catch_a_changed_child_pointer() {
        let (io, _arc) = io_with_own_arc();
        let keys = BlockKeys::new(crate::Cipher::Aes256Gcm, &tarn_keys::MasterKey::from_bytes(&[7u8; 32])).unwrap();
        let a = io.write_with(&[1u8; 8192], spec(), 5, Some(&keys)).unwrap();
        let b = io.write_with(&[2u8; 8192], spec(), 5, Some(&keys)).unwrap();
        let indirect = |children: &[BlockPtr]| {
            let mut data = vec![0u8; 1024 * crate::BP_SIZE];
            for (i, c) in children.iter().enumerate() {
                data[i * crate::BP_SIZE..(i + 1) * crate::BP_SIZE].copy_from_slice(&c.encode());
            }
            data
        };
        let data = indirect(&[a, b]);
        let mut ind = io.write(&data, spec(), 6).unwrap();
        ind.flags |= crate::crypt::FLAG_CHILDREN_DIGEST;
        ind.mac = crate::crypt::children_digest(&data).unwrap();
        let back = BlockPtr::decode(&ind.encode()).unwrap();
        assert_eq!((back.mac, back.dvas().len()), (ind.mac, ind.dvas().len()), "the digest survives encoding; copies are not capped");
        assert_eq!(io.read_uncached(&ind).unwrap(), data);
        // The children swapped, written over the block with a matching checksum.
        let swapped = indirect(&[b, a]);
        let phys = io.prepare(&swapped, spec(), 6).unwrap().1;
        for d in ind.dvas() {
            io.tops()[d.vdev as usize].write(d.offset, &phys, ind.birth).unwrap();
        }
        let mut forged = ind;
        forged.checksum = checksum::compute(ChecksumKind::Fletcher4, &phys);
        let err = io.read_uncached(&forged).unwrap_err().to_string();
        assert!(err.contains("children digest mismatch"), "{err}");
        // A child moved (address, birth) keeps the digest.
        let mut moved = a;
        moved.dva[0].offset += 1 << 20;
        moved.birth = 99;
        assert_eq!(crate::crypt::children_digest(&indirect(&[moved, b])), crate::crypt::children_digest(&data));
        assert_ne!(crate::crypt::children_digest(&indirect(&[a, a])), crate::crypt::children_digest(&data));
    }
}
