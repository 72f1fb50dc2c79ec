//! Write gathering: while a txg is written out, a leaf keeps the writes it
//! gets (copied into aligned buffers) instead of issuing each on its own,
//! and sends them as runs of adjacent pieces, one request per run of up to
//! [`RUN_MAX`] bytes (`Device::write_vectored_at`; `O_DIRECT` on file
//! vdevs), once [`DRAIN_AT`] bytes have gathered or at the leaf's next
//! flush. A txg's blocks are allocated mostly one after another, so a
//! sync that wrote a raidz column of 4–44 KiB per system call writes
//! runs of up to a MiB instead (the idea of OpenZFS's I/O aggregation in
//! its vdev queue; our own code).
//!
//! Invariants:
//! - A gathered write reaches the device before the leaf's next flush
//!   returns (the flush drains first): a txg's blocks are on the device
//!   before the uberblock naming them is written.
//! - A read, durable write, trim or immediate write of a range that
//!   overlaps a piece gathered or being written waits until it is
//!   written: nobody reads stale bytes, and a later write of the same
//!   bytes lands after the earlier one.
//! - One drain at a time per leaf (`writing`), and a drain takes every
//!   piece gathered so far: pieces reach the device in the order they
//!   were gathered, for any one range.
//! - A run that fails puts the txgs of its pieces in the leaf's DTL and
//!   counts a write error (the caller's accounting), and the leaf's next
//!   flush fails, as if the write had failed when it was made.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_dev::{Device, DIRECT_ALIGN};

use crate::iostat::IoStats;

/// Bytes gathered on one leaf before the writer that passes it drains them.
pub const DRAIN_AT: usize = 4 << 20;
/// Largest run written as one request (OpenZFS's default aggregation limit).
pub const RUN_MAX: usize = 1 << 20;
/// Most pieces in one run (one `pwritev`).
const RUN_PIECES: usize = 1024;

/// Gathered bytes are copied into chunks of this size (aligned for direct
/// I/O), carved in order and reused while the txg lasts: allocating and
/// freeing a buffer per write made the allocator hand memory back and
/// fault it in again, a sixth of the sync's time.
pub const CHUNK: usize = 1 << 20;

/// An allocation aligned for direct I/O.
struct Chunk {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: a Chunk owns its allocation. Its bytes are written only through
// `Gather::add`, into a range reserved under the state lock that no other
// piece covers, before the piece naming them is published.
unsafe impl Send for Chunk {}
// SAFETY: as above; shared access reads only published ranges.
unsafe impl Sync for Chunk {}

impl Chunk {
    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len.max(1), DIRECT_ALIGN).expect("a gather chunk's layout")
    }

    fn new(len: usize) -> Arc<Chunk> {
        let layout = Chunk::layout(len);
        // SAFETY: a layout of non-zero size.
        let raw = unsafe { std::alloc::alloc(layout) };
        let Some(ptr) = std::ptr::NonNull::new(raw) else { std::alloc::handle_alloc_error(layout) };
        Arc::new(Chunk { ptr, len })
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: allocated in `Chunk::new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Chunk::layout(self.len)) };
    }
}

/// A gathered write: `len` bytes at `off` of its chunk.
struct Piece {
    chunk: Arc<Chunk>,
    off: usize,
    len: usize,
    txg: u64,
}

impl Piece {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `off + len <= chunk.len`, written before the piece was
        // published (see `Chunk`).
        unsafe { std::slice::from_raw_parts(self.chunk.ptr.as_ptr().add(self.off), self.len) }
    }
}

/// Room for `len` bytes, rounded up to the direct-I/O alignment: carved
/// from the current chunk, a spare one, or a new one (a piece larger
/// than a chunk gets one of its own).
fn reserve(st: &mut State, len: usize) -> (Arc<Chunk>, usize) {
    let need = len.div_ceil(DIRECT_ALIGN).max(1) * DIRECT_ALIGN;
    if need > CHUNK {
        return (Chunk::new(need), 0);
    }
    if let Some((c, used)) = st.current.as_mut() {
        if *used + need <= CHUNK {
            let off = *used;
            *used += need;
            return (c.clone(), off);
        }
    }
    let c = st.spare.pop().unwrap_or_else(|| Chunk::new(CHUNK));
    if let Some((old, _)) = st.current.replace((c.clone(), need)) {
        st.used.push(old);
    }
    (c, 0)
}

#[derive(Default)]
struct State {
    /// By device offset.
    pending: BTreeMap<u64, Piece>,
    /// The chunk being carved, and how much of it is taken.
    current: Option<(Arc<Chunk>, usize)>,
    /// Chunks carved full, their pieces maybe not yet written.
    used: Vec<Arc<Chunk>>,
    /// Chunks whose pieces are all written, for reuse until the next flush.
    spare: Vec<Arc<Chunk>>,
    bytes: usize,
    /// `[start, end)` of the runs being written.
    inflight: Vec<(u64, u64)>,
    /// A drain's failure not yet reported by a flush.
    failed: Option<String>,
}

impl State {
    fn overlaps(&self, start: u64, end: u64) -> bool {
        let pending = self.pending.range(..end).next_back().is_some_and(|(&at, p)| at + p.len as u64 > start);
        pending || self.inflight.iter().any(|&(a, b)| a < end && start < b)
    }
}

/// A run that could not be written: why, and the txgs of its pieces.
pub(crate) struct Failed {
    pub error: tarn_dev::DevError,
    pub txgs: Vec<u64>,
}

#[derive(Default)]
pub(crate) struct Gather {
    st: Mutex<State>,
    writing: Mutex<()>,
    /// Pieces gathered or being written (0: no range check needed).
    active: AtomicUsize,
}

impl Gather {
    /// Whether `[start, start + len)` (device offsets) overlaps a piece
    /// gathered or being written.
    pub fn overlaps(&self, start: u64, len: u64) -> bool {
        self.active.load(Ordering::Acquire) > 0 && self.st.lock().overlaps(start, start.saturating_add(len))
    }

    /// Keeps a copy of `data` for device offset `at`. None: it overlaps a
    /// piece not yet written (drain, then try again). Some(true): enough
    /// has gathered, the caller drains.
    pub fn add(&self, at: u64, data: &[u8], txg: u64) -> Option<bool> {
        let (chunk, off) = {
            let mut st = self.st.lock();
            if st.overlaps(at, at + data.len() as u64) {
                return None;
            }
            reserve(&mut st, data.len())
        };
        // The copy outside the lock: the range is this call's alone.
        // SAFETY: `off + data.len() <= chunk.len` (reserve), no other piece
        // covers it, and nothing reads it before the piece is published.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), chunk.ptr.as_ptr().add(off), data.len()) };
        let mut st = self.st.lock();
        if st.overlaps(at, at + data.len() as u64) {
            // Another writer gathered an overlapping write meanwhile.
            return None;
        }
        st.bytes += data.len();
        st.pending.insert(at, Piece { chunk, off, len: data.len(), txg });
        self.active.fetch_add(1, Ordering::AcqRel);
        Some(st.bytes >= DRAIN_AT)
    }

    /// Writes every piece gathered so far, in runs; returns the runs that
    /// failed.
    pub fn drain(&self, dev: Option<&dyn Device>, stats: &IoStats) -> Vec<Failed> {
        let _one = self.writing.lock();
        let (runs, n) = {
            let mut st = self.st.lock();
            let pending = std::mem::take(&mut st.pending);
            st.bytes = 0;
            let n = pending.len();
            let runs = runs_of(pending);
            st.inflight = runs.iter().map(|r| (r.0, r.0 + r.1.iter().map(|p| p.len as u64).sum::<u64>())).collect();
            (runs, n)
        };
        let mut failed = Vec::new();
        for (at, pieces) in &runs {
            let at = *at;
            let bufs: Vec<&[u8]> = pieces.iter().map(Piece::bytes).collect();
            let r = match dev {
                Some(d) => stats.write_vectored(d, &bufs, at),
                None => Err(tarn_dev::DevError::Open { path: String::new(), reason: "device is missing".into() }),
            };
            if let Err(error) = r {
                failed.push(Failed { error, txgs: pieces.iter().map(|p| p.txg).collect() });
            }
        }
        // The pieces hold references to their chunks: let them go before
        // deciding which chunks can be reused.
        drop(runs);
        let mut st = self.st.lock();
        st.inflight.clear();
        // Chunks no piece refers to any more are reused.
        let used = std::mem::take(&mut st.used);
        for c in used {
            if Arc::strong_count(&c) == 1 && c.len == CHUNK {
                st.spare.push(c);
            } else if Arc::strong_count(&c) > 1 {
                st.used.push(c);
            }
        }
        if let Some(f) = failed.first() {
            st.failed.get_or_insert_with(|| f.error.to_string());
        }
        self.active.fetch_sub(n, Ordering::AcqRel);
        failed
    }

    /// At a flush (the txg is written): the chunks are let go, and a
    /// drain's failure since the last call is returned.
    pub fn finish(&self) -> Option<String> {
        let mut st = self.st.lock();
        st.spare.clear();
        // Pieces gathered meanwhile keep their chunk alive themselves.
        st.current = None;
        st.used.clear();
        st.failed.take()
    }
}

/// Adjacent pieces grouped into runs of at most [`RUN_MAX`] bytes and
/// [`RUN_PIECES`] pieces (a piece larger than a run is a run alone).
fn runs_of(pending: BTreeMap<u64, Piece>) -> Vec<(u64, Vec<Piece>)> {
    let mut runs: Vec<(u64, Vec<Piece>, usize)> = Vec::new();
    for (at, p) in pending {
        match runs.last_mut() {
            Some((start, pieces, bytes)) if *start + *bytes as u64 == at && *bytes + p.len <= RUN_MAX && pieces.len() < RUN_PIECES => {
                *bytes += p.len;
                pieces.push(p);
            }
            _ => {
                let len = p.len;
                runs.push((at, vec![p], len));
            }
        }
    }
    runs.into_iter().map(|(at, pieces, _)| (at, pieces)).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tarn_dev::MemDevice;

    fn piece(st: &mut State, data: &[u8], txg: u64) -> Piece {
        let (chunk, off) = reserve(st, data.len());
        // SAFETY: the reserved range, as in `Gather::add`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), chunk.ptr.as_ptr().add(off), data.len()) };
        Piece { chunk, off, len: data.len(), txg }
    }

    #[test]
    fn adjacent_pieces_go_out_as_runs_and_overlaps_are_refused() {
        let g = Gather::default();
        let stats = IoStats::default();
        let dev: Arc<dyn Device> = MemDevice::new("m", 4 << 20);
        // Out of order, as parallel writers deliver them.
        assert_eq!(g.add(8192, &[2u8; 4096], 5), Some(false));
        assert_eq!(g.add(0, &[0u8; 4096], 5), Some(false));
        assert_eq!(g.add(4096, &[1u8; 4096], 5), Some(false));
        assert_eq!(g.add(1 << 20, &[9u8; 512], 6), Some(false));
        assert!(g.overlaps(8000, 200) && g.overlaps(1 << 20, 1) && !g.overlaps(12288, 4096));
        assert_eq!(g.add(4000, &[7u8; 200], 6), None, "overlapping a gathered piece");
        let ops = stats.counters().write_ops;
        assert!(g.drain(Some(&*dev), &stats).is_empty());
        assert_eq!(stats.counters().write_ops - ops, 2, "two runs: [0, 12288) and the piece at 1 MiB");
        assert!(!g.overlaps(0, 4 << 20));
        let mut back = vec![0u8; 12288];
        dev.read_at(&mut back, 0).unwrap();
        assert!(back[..4096].iter().all(|&b| b == 0) && back[4096..8192].iter().all(|&b| b == 1) && back[8192..].iter().all(|&b| b == 2));
        assert_eq!(g.add(4000, &[7u8; 200], 6), Some(false), "accepted once written");
        assert!(g.finish().is_none());
    }

    #[test]
    fn runs_stop_at_the_size_limit() {
        let mut pending = BTreeMap::new();
        let mut st = State::default();
        let size = RUN_MAX / 4;
        for i in 0..9u64 {
            pending.insert(i * size as u64, piece(&mut st, &vec![i as u8; size], 1));
        }
        let runs = runs_of(pending);
        assert_eq!(runs.iter().map(|r| r.1.len()).collect::<Vec<_>>(), vec![4, 4, 1]);
        assert_eq!(runs[1].0, 4 * size as u64);
        assert!(runs[0].1.iter().all(|p| p.bytes().iter().all(|&b| b < 4)));
    }

    #[test]
    fn a_failed_run_is_reported_with_its_txgs_and_at_the_next_flush() {
        let g = Gather::default();
        let stats = IoStats::default();
        g.add(0, &[1u8; 4096], 11).unwrap();
        g.add(4096, &[1u8; 4096], 12).unwrap();
        let failed = g.drain(None, &stats);
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].txgs, vec![11, 12]);
        assert!(g.finish().is_some());
        assert!(g.finish().is_none(), "reported once");
    }
}
