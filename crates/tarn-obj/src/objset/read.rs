//! The object set's read path: which version of a block a reader sees
//! (dirty, committed, hole), reading committed blocks through the cache as
//! the object set's `primarycache` says, read-ahead of sequential readers.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Dnode, DnodeState, Found, ObjectSet, PREFETCH_BYTES};
use crate::format::DnodePhys;
use crate::tree::{self, block_err};
use crate::{ObjError, ObjectId, Result, Txg};

/// A piece of an object's contents as read (`ObjectSet::read_segments`):
/// `len` bytes from `start` of a block's buffer, or zeros.
#[derive(Clone, Debug)]
pub enum Segment {
    Data { block: Arc<Vec<u8>>, start: usize, len: usize },
    Zeros(usize),
}

/// A committed block as read: its data, or None for a hole.
type Block = Option<Arc<Vec<u8>>>;

/// Appends `seg`, merged into a run of zeros it continues.
fn push_segment(out: &mut Vec<Segment>, seg: Segment) {
    match (out.last_mut(), seg) {
        (Some(Segment::Zeros(n)), Segment::Zeros(m)) => *n += m,
        (_, seg) => out.push(seg),
    }
}

impl Segment {
    pub fn len(&self) -> usize {
        match self {
            Segment::Data { len, .. } | Segment::Zeros(len) => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, for data; None for zeros.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Segment::Data { block, start, len } => Some(&block[*start..*start + *len]),
            Segment::Zeros(_) => None,
        }
    }

    /// The segment as slices, in order: its bytes, or zeros from a static
    /// buffer (a long run in several slices) — what a vectored write sends
    /// and a copy appends.
    pub fn slices(&self) -> impl Iterator<Item = &[u8]> {
        let zeros = match self {
            Segment::Data { .. } => 0,
            Segment::Zeros(n) => *n,
        };
        let whole = zeros / ZEROS.len();
        let rest = zeros % ZEROS.len();
        self.bytes()
            .into_iter()
            .chain(std::iter::repeat_n(&ZEROS[..], whole))
            .chain((rest > 0).then(|| &ZEROS[..rest]))
    }

    /// Appends the segment's bytes to `out`.
    pub fn append_to(&self, out: &mut Vec<u8>) {
        for s in self.slices() {
            out.extend_from_slice(s);
        }
    }
}

/// Zeros that runs of zeros are handed out from (`Segment::slices`).
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

impl ObjectSet {
    /// Where the newest version of block `blkid` lives.
    pub(super) fn block_view(&self, st: &DnodeState, blkid: u64) -> Result<Found> {
        self.block_view_upto(st, blkid, Txg::MAX)
    }

    /// Where block `blkid` lives as txg `txg` sees it (records <= txg).
    pub(super) fn block_view_upto(&self, st: &DnodeState, blkid: u64, txg: Txg) -> Result<Found> {
        for (_, d) in st.dirty.range(..=txg).rev() {
            if let Some(b) = d.blocks.get(&blkid) {
                if d.raw.contains_key(&blkid) {
                    // Ciphertext of a raw receive: nothing to read until
                    // the key is loaded, after the receive.
                    return Err(ObjError::KeyNotLoaded);
                }
                return Ok(Found::Data(b.clone()));
            }
            if d.freed || d.frees.iter().any(|&(s, e)| s <= blkid && blkid < e) {
                return Ok(Found::Hole);
            }
        }
        Ok(Found::Committed(Box::new(st.committed.clone())))
    }

    /// `read_committed` from the cache alone: None when the block, or an
    /// indirect block above it, is not cached, or the reader gate is busy
    /// (nothing is read or waited for then).
    fn read_committed_if_cached(&self, phys: &DnodePhys, blkid: u64) -> Result<Option<Block>> {
        let keys = self.inner.keys(&self.shared)?;
        // Not waiting: readers hold the gate across disk reads, and a sync
        // waiting for it keeps new readers out until they are done.
        let Some(_gate) = self.shared.reader_gate.try_read() else { return Ok(None) };
        let metadata = phys.flags & crate::format::DN_METADATA != 0;
        if !self.cache_policy().keeps(metadata) {
            return Ok(None);
        }
        let bp = match tree::lookup_cached(self.io(), phys, blkid) {
            None => return Ok(None),
            Some(bp) => bp?,
        };
        if bp.is_hole() {
            return Ok(Some(None));
        }
        Ok(self.io().read_if_cached(&bp, keys.as_deref()).map(Some))
    }

    pub(super) fn read_committed(&self, phys: &DnodePhys, blkid: u64) -> Result<Option<Arc<Vec<u8>>>> {
        self.read_committed_as(phys, blkid, false)
    }

    fn read_committed_as(&self, phys: &DnodePhys, blkid: u64, prefetch: bool) -> Result<Option<Arc<Vec<u8>>>> {
        // The key first: nothing of an encrypted object set is served,
        // not even from the cache, while its key is not loaded.
        let keys = self.inner.keys(&self.shared)?;
        // Frees are not released while a reader walks a committed snapshot.
        let _gate = self.shared.reader_gate.read();
        let bp = tree::lookup(self.io(), phys, blkid)?;
        if bp.is_hole() {
            return Ok(None);
        }
        let metadata = phys.flags & crate::format::DN_METADATA != 0;
        // (An encrypted block never goes to the second level: read_keyed.)
        let data = if !self.cache_policy().keeps(metadata) {
            self.io().read_passing_with(&bp, keys.as_deref())
        } else {
            self.io().read_keyed(&bp, prefetch, self.l2_policy().keeps(metadata), keys.as_deref())
        };
        Ok(Some(data.map_err(block_err)?))
    }

    pub fn read(&self, id: ObjectId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let mut pos = 0usize;
        self.visit(id, offset, buf.len(), false, &mut |seg| {
            let dst = &mut buf[pos..pos + seg.len()];
            match seg {
                Segment::Data { block, start, len } => dst.copy_from_slice(&block[start..start + len]),
                Segment::Zeros(_) => dst.fill(0),
            }
            pos += dst.len();
        })
        .map(|_| ())
    }

    /// What `read` of `len` bytes at `offset` reads, without copying: the
    /// blocks' own buffers (cached or dirty) and runs of zeros, in order,
    /// appended to `out` (a server sends them with one vectored write).
    pub fn read_segments(&self, id: ObjectId, offset: u64, len: usize, out: &mut Vec<Segment>) -> Result<()> {
        self.visit(id, offset, len, false, &mut |seg| push_segment(out, seg)).map(|_| ())
    }

    /// `read_segments` if the object's dnode is in memory and every block
    /// it needs (and every indirect block above them) is dirty or in the
    /// ARC: false, with `out` as it was and
    /// nothing read, when one is not. A server answers such reads on the
    /// thread that read the request, without a hand-off. (The blocks found
    /// before a missing one count as hits twice when the reader then reads
    /// the whole range: the ARC's hit ratio leans high by that much.)
    pub fn read_segments_cached(&self, id: ObjectId, offset: u64, len: usize, out: &mut Vec<Segment>) -> Result<bool> {
        let mut mine = Vec::new();
        let done = self.visit(id, offset, len, true, &mut |seg| push_segment(&mut mine, seg))?;
        if done {
            out.append(&mut mine);
        }
        Ok(done)
    }

    /// Hands `f` the pieces of `len` bytes at `offset`, in order; with
    /// `cached_only`, stops and returns false at the first block that is
    /// neither dirty nor cached.
    fn visit(&self, id: ObjectId, offset: u64, len: usize, cached_only: bool, f: &mut dyn FnMut(Segment)) -> Result<bool> {
        let dn = if cached_only {
            // Its dnode too: loading one may read the pool, and the map's
            // shard is held across such a read.
            match self.inner.handles.try_get(id) {
                Some(dn) => dn,
                None => return Ok(false),
            }
        } else {
            self.dnode(id)?
        };
        // A read that may still give up counts (and reads ahead) only once
        // it is done: the one that follows it must not look like a second
        // reader of the same range.
        if !cached_only {
            self.shared.client_ops.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if len > 0 {
                self.maybe_prefetch(&dn, offset, len as u64);
            }
        }
        let mut pos = 0usize;
        while pos < len {
            let (view, bs) = {
                let st = dn.st.lock();
                let a = st.attrs();
                if !a.exists {
                    return Err(ObjError::NotFound(id.0));
                }
                let bs = a.block_size as u64;
                let blkid = (offset + pos as u64) / bs;
                if blkid >= st.nblocks() {
                    f(Segment::Zeros(len - pos));
                    break;
                }
                (self.block_view(&st, blkid)?, bs)
            };
            let off = offset + pos as u64;
            let in_blk = (off % bs) as usize;
            let n = ((bs as usize) - in_blk).min(len - pos);
            let data = match view {
                Found::Data(d) => Some(d),
                Found::Hole => None,
                Found::Committed(phys) if cached_only => match self.read_committed_if_cached(&phys, off / bs)? {
                    Some(d) => d,
                    None => return Ok(false),
                },
                Found::Committed(phys) => self.read_committed(&phys, off / bs)?,
            };
            match data {
                Some(d) => {
                    let avail = d.len().saturating_sub(in_blk).min(n);
                    if avail > 0 {
                        f(Segment::Data { block: d, start: in_blk, len: avail });
                    }
                    if avail < n {
                        f(Segment::Zeros(n - avail));
                    }
                }
                None => f(Segment::Zeros(n)),
            }
            pos += n;
        }
        if cached_only {
            self.shared.client_ops.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if len > 0 {
                self.maybe_prefetch(&dn, offset, len as u64);
            }
        }
        Ok(true)
    }

    /// Sequential reads warm the cache ahead of the reader: when a read
    /// starts where the previous one ended, the next `PREFETCH_BYTES` worth
    /// of blocks are read in the background (each at most once per stream).
    fn maybe_prefetch(&self, dn: &Arc<Dnode>, offset: u64, len: u64) {
        let (bs, nblocks, metadata) = {
            let st = dn.st.lock();
            let a = st.attrs();
            (a.block_size.max(512) as u64, st.nblocks(), a.metadata)
        };
        if !self.cache_policy().keeps(metadata) {
            // Read ahead into a cache that would not keep it: nothing to gain.
            return;
        }
        let first = offset / bs;
        let last = (offset + len - 1) / bs;
        let expected = dn.next_read.swap(last + 1, Ordering::Relaxed);
        if last + 1 == expected && first < expected {
            // Still inside the last block read: neither a step forward nor a jump.
            return;
        }
        let sequential = first <= expected && expected <= last + 1;
        if !sequential {
            dn.seq_hits.store(0, Ordering::Relaxed);
            dn.prefetched_to.store(last + 1, Ordering::Relaxed);
            return;
        }
        if dn.seq_hits.fetch_add(1, Ordering::Relaxed) < 2 {
            return;
        }
        let window = (PREFETCH_BYTES / bs).clamp(2, 256);
        let from = dn.prefetched_to.load(Ordering::Relaxed).max(last + 1);
        let to = (last + 1 + window).min(nblocks);
        if from >= to {
            return;
        }
        dn.prefetched_to.store(to, Ordering::Relaxed);
        let os = self.clone();
        let dn = dn.clone();
        self.shared.prefetch(Box::new(move || {
            for blkid in from..to {
                let phys = {
                    let st = dn.st.lock();
                    match os.block_view(&st, blkid) {
                        Ok(Found::Committed(p)) => *p,
                        _ => continue,
                    }
                };
                match os.read_committed_as(&phys, blkid, true) {
                    Ok(Some(_)) => {
                        os.shared.prefetched_blocks.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(None) => {}
                    Err(_) => break,
                }
            }
        }));
    }

    /// Whether the cache holds the committed version of data block `blkid`
    /// of object `id` (false for a hole, a dirty block, or past the end).
    pub fn is_block_cached(&self, id: ObjectId, blkid: u64) -> Result<bool> {
        let dn = self.dnode(id)?;
        let phys = {
            let st = dn.st.lock();
            if blkid >= st.nblocks() {
                return Ok(false);
            }
            match self.block_view(&st, blkid)? {
                Found::Committed(p) => *p,
                _ => return Ok(false),
            }
        };
        let bp = tree::lookup(self.io(), &phys, blkid)?;
        Ok(!bp.is_hole() && self.io().is_cached(&bp))
    }

    /// Whether a committed block of `id` is on a cache device (the L2ARC
    /// indexes it): for tests.
    pub fn is_block_in_l2(&self, id: ObjectId, blkid: u64) -> Result<bool> {
        let dn = self.dnode(id)?;
        let phys = {
            let st = dn.st.lock();
            match self.block_view(&st, blkid)? {
                Found::Committed(p) => *p,
                _ => return Ok(false),
            }
        };
        let bp = tree::lookup(self.io(), &phys, blkid)?;
        Ok(!bp.is_hole() && self.shared.l2.holds(&bp))
    }

    /// The newest version of data block `blkid`, shared (no copy); `None`
    /// for a hole or a block past the end. Its length is the block size.
    pub fn read_block(&self, id: ObjectId, blkid: u64) -> Result<Option<Arc<Vec<u8>>>> {
        let dn = self.dnode(id)?;
        let view = {
            let st = dn.st.lock();
            if !st.attrs().exists {
                return Err(ObjError::NotFound(id.0));
            }
            if blkid >= st.nblocks() {
                return Ok(None);
            }
            self.block_view(&st, blkid)?
        };
        match view {
            Found::Data(d) => Ok(Some(d)),
            Found::Hole => Ok(None),
            Found::Committed(phys) => self.read_committed(&phys, blkid),
        }
    }
}
