//! Block volumes (zvols): a volume dataset's object set holds one data
//! object (object 1) whose bytes are the volume's, in blocks of
//! `volblocksize`; everything else about the volume (its size, its
//! reservation) is the dataset layer's. Front ends (the NBD server) call
//! this layer and nothing below it.
//!
//! - Holes: a whole block of zeros is never written, it is freed (a
//!   hole), and so are the blocks a TRIM or a WRITE_ZEROES covers whole;
//!   [`Volume::extents`] reports holes and data for NBD's block status.
//! - Durability (DESIGN invariant 4): every change is made in a logged
//!   transaction (`Tx::logged`), so it becomes a record of the object
//!   set's intent log; [`Volume::flush`] and FUA writes commit the log
//!   (no txg), `sync=always` commits after every change, `sync=disabled`
//!   never waits. Replay happens in [`Volume::open`], before anything
//!   else, as for file systems.
//! - Order: changes to overlapping blocks take the same stripe locks
//!   (by block number) and append their records before releasing them,
//!   so the log replays them in the order they were applied.
//!
//! The size is the caller's (`volsize`, from the dataset's record): a
//! request past it is refused here, whatever the object's length. Blocks
//! past the size (a shrink that a crash interrupted) are freed at open.
//!
//! Layout (docs/on-disk-format.md, "Volumes"): object 1, type
//! [`VOLUME_DATA`], block size = volblocksize, bonus
//! `magic "TARNVOL1" | version u64` (little-endian), rest zero.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard};
use tarn_obj::{ObjError, ObjPool, ObjType, ObjectId, ObjectSet, Tx, BONUS_LEN};
pub use tarn_obj::Segment;

/// Object type of a volume's data object.
pub const VOLUME_DATA: ObjType = ObjType(40);
/// The data object of every volume.
pub const DATA_OBJECT: ObjectId = ObjectId(1);
const MAGIC: &[u8; 8] = b"TARNVOL1";
const VERSION: u64 = 1;
/// `volblocksize` unless asked otherwise (as OpenZFS 2.2).
pub const DEFAULT_BLOCK_SIZE: u32 = 16 << 10;
pub const MIN_BLOCK_SIZE: u32 = 512;
/// Largest `volblocksize` (the object layer's largest block).
pub const MAX_BLOCK_SIZE: u32 = tarn_obj::MAX_BLOCK_SIZE;
/// Largest volume: the object layer's largest object is far above it;
/// 2^60 keeps every offset + length sum inside u64.
pub const MAX_SIZE: u64 = 1 << 60;
/// Stripe locks ordering writes to the same blocks.
const STRIPES: usize = 256;
/// Zeros are written in pieces of at most this (when holes are not wanted).
const ZERO_CHUNK: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum VolError {
    #[error("{offset} + {len} is past the end of the volume ({size} bytes)")]
    OutOfRange { offset: u64, len: u64, size: u64 },
    #[error("read-only volume")]
    ReadOnly,
    #[error("not a volume: {0}")]
    NotAVolume(String),
    #[error("bad volblocksize {0}: a power of two from 512 to 1M")]
    BadBlockSize(u64),
    /// Closed by its owner (destroyed, rolled back, exported): no request
    /// reaches the object set any more.
    #[error("the volume was closed")]
    Closed,
    #[error(transparent)]
    Obj(#[from] ObjError),
}

impl VolError {
    /// The errno a protocol answers with.
    pub fn errno(&self) -> i32 {
        match self {
            VolError::OutOfRange { .. } => libc_errno::EINVAL,
            VolError::ReadOnly => libc_errno::EPERM,
            VolError::NotAVolume(_) | VolError::BadBlockSize(_) => libc_errno::EINVAL,
            VolError::Closed => libc_errno::ESHUTDOWN,
            VolError::Obj(e) => e.errno(),
        }
    }
}

mod libc_errno {
    pub const EPERM: i32 = 1;
    pub const EINVAL: i32 = 22;
    pub const ESHUTDOWN: i32 = 108;
}

pub type Result<T> = std::result::Result<T, VolError>;

/// The `sync` property, as for file systems.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    Standard,
    Always,
    Disabled,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolOptions {
    /// `volsize`.
    pub size: u64,
    pub sync: SyncMode,
    /// `readonly=on`, or a snapshot.
    pub readonly: bool,
}

/// A run of the volume: data, or a hole (reads as zeros, holds no block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub len: u64,
    pub hole: bool,
}

/// Checks a `volblocksize`.
pub fn check_block_size(bs: u64) -> Result<u32> {
    if bs.is_power_of_two() && (u64::from(MIN_BLOCK_SIZE)..=u64::from(MAX_BLOCK_SIZE)).contains(&bs) {
        Ok(bs as u32)
    } else {
        Err(VolError::BadBlockSize(bs))
    }
}

fn header() -> [u8; BONUS_LEN] {
    let mut b = [0u8; BONUS_LEN];
    b[..8].copy_from_slice(MAGIC);
    b[8..16].copy_from_slice(&VERSION.to_le_bytes());
    b
}

pub struct Volume {
    pool: Arc<ObjPool>,
    os: ObjectSet,
    block_size: u32,
    size: AtomicU64,
    sync: AtomicU8,
    readonly: AtomicBool,
    stripes: Box<[Mutex<()>]>,
    /// Every operation holds it shared; [`Volume::close`] takes it
    /// exclusively, so it returns once none is running, and sets it.
    closed: RwLock<bool>,
    /// What other datasets' reservations hold back from this one
    /// (`refreservation`, the dataset layer's): a write that adds data
    /// must leave it free.
    held: RwLock<Option<SpaceHold>>,
}

/// Asked before a write that adds data: bytes of the pool it must leave
/// free for other datasets' reservations.
pub type SpaceHold = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Stripe locks held for one transaction's changes: dropping it appends
/// the changes to the intent log before the locks go (see the crate doc).
struct Held<'a> {
    tx: &'a Tx,
    _guards: Vec<MutexGuard<'a, ()>>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        tarn_obj::redo::flush(self.tx);
    }
}

fn sync_code(s: SyncMode) -> u8 {
    match s {
        SyncMode::Standard => 0,
        SyncMode::Always => 1,
        SyncMode::Disabled => 2,
    }
}

impl Volume {
    /// Lays out a fresh volume's object set (the dataset layer's init
    /// callback at creation).
    pub fn format(os: &ObjectSet, tx: &Tx, block_size: u32) -> Result<()> {
        check_block_size(u64::from(block_size))?;
        os.create_with_id(tx, DATA_OBJECT, VOLUME_DATA, block_size, &header())?;
        Ok(())
    }

    /// Whether `os` holds a volume (its data object, with the header).
    pub fn is_volume(os: &ObjectSet) -> bool {
        os.info(DATA_OBJECT).is_ok_and(|i| i.otype == VOLUME_DATA && &i.bonus[..8] == MAGIC)
    }

    /// Opens a volume: replays its intent log when it can be written (the
    /// changes acknowledged before a crash), then frees any block past
    /// `opts.size`.
    pub fn open(pool: Arc<ObjPool>, os: ObjectSet, opts: VolOptions) -> Result<Arc<Volume>> {
        let writable = !opts.readonly && !os.is_readonly();
        if writable {
            os.replay_redo()?;
        }
        let info = os.info(DATA_OBJECT).map_err(|e| match e {
            ObjError::NotFound(_) => VolError::NotAVolume("no data object".into()),
            e => e.into(),
        })?;
        if info.otype != VOLUME_DATA || &info.bonus[..8] != MAGIC {
            return Err(VolError::NotAVolume(format!("object 1 has type {}", info.otype.0)));
        }
        let version = u64::from_le_bytes(info.bonus[8..16].try_into().expect("8 bytes"));
        if version != VERSION {
            return Err(VolError::NotAVolume(format!("volume version {version} (this tarn knows {VERSION})")));
        }
        if opts.size > MAX_SIZE {
            return Err(VolError::OutOfRange { offset: 0, len: opts.size, size: MAX_SIZE });
        }
        let vol = Arc::new(Volume {
            pool,
            os,
            block_size: info.block_size,
            size: AtomicU64::new(opts.size),
            sync: AtomicU8::new(sync_code(opts.sync)),
            readonly: AtomicBool::new(opts.readonly),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            closed: RwLock::new(false),
            held: RwLock::new(None),
        });
        if writable && info.length > opts.size {
            vol.free_tail(opts.size)?;
        }
        Ok(vol)
    }

    /// Waits for the operations running to end and refuses every later
    /// one with [`VolError::Closed`] (before a destroy, a rollback, an
    /// export: nothing may reach the object set after it).
    pub fn close(&self) {
        *self.closed.write() = true;
    }

    /// Sets what the volume's writes must leave free (see [`SpaceHold`]).
    pub fn set_space_hold(&self, hold: Option<SpaceHold>) {
        *self.held.write() = hold;
    }

    /// Before adding `len` bytes, outside any transaction: room for them
    /// and for what others' reservations hold (ENOSPC otherwise). The
    /// pool waits here (syncing txgs) while frees on their way back
    /// (deferred, or not yet written: the intent log's blocks after each
    /// commit) would make the room, as the POSIX layer's writers do.
    fn make_room(&self, len: u64) -> Result<()> {
        let held = self.held.read().clone().map_or(0, |h| h());
        self.os.reserve(len.saturating_add(held))?;
        Ok(())
    }

    pub fn is_closed(&self) -> bool {
        *self.closed.read()
    }

    /// Entry of every operation: shared hold of the gate, unless closed.
    fn enter(&self) -> Result<RwLockReadGuard<'_, bool>> {
        let g = self.closed.read();
        if *g {
            return Err(VolError::Closed);
        }
        Ok(g)
    }

    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }
    pub fn block_size(&self) -> u32 {
        self.block_size
    }
    pub fn objset(&self) -> &ObjectSet {
        &self.os
    }
    pub fn is_readonly(&self) -> bool {
        self.readonly.load(Ordering::Acquire) || self.os.is_readonly()
    }
    pub fn sync_mode(&self) -> SyncMode {
        match self.sync.load(Ordering::Acquire) {
            1 => SyncMode::Always,
            2 => SyncMode::Disabled,
            _ => SyncMode::Standard,
        }
    }

    /// New `sync` and `readonly` (the size changes with [`Volume::resize`]).
    pub fn set_options(&self, sync: SyncMode, readonly: bool) {
        self.sync.store(sync_code(sync), Ordering::Release);
        self.readonly.store(readonly, Ordering::Release);
    }

    /// The volume's new size (the caller changed `volsize` first). A
    /// shrink frees the blocks past the new end.
    pub fn resize(&self, size: u64) -> Result<()> {
        let _open = self.enter()?;
        if size > MAX_SIZE {
            return Err(VolError::OutOfRange { offset: 0, len: size, size: MAX_SIZE });
        }
        let old = self.size.swap(size, Ordering::AcqRel);
        if size < old && !self.is_readonly() {
            self.free_tail(size)?;
        }
        Ok(())
    }

    fn free_tail(&self, size: u64) -> Result<()> {
        {
            let tx = self.begin();
            let _held = self.hold(&tx, size, u64::MAX - size);
            self.os.free_range(&tx, DATA_OBJECT, size, None)?;
        }
        self.commit_if_always()
    }

    fn check(&self, offset: u64, len: u64) -> Result<()> {
        let size = self.size();
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(()),
            _ => Err(VolError::OutOfRange { offset, len, size }),
        }
    }

    fn check_writable(&self, offset: u64, len: u64) -> Result<()> {
        if self.is_readonly() {
            return Err(VolError::ReadOnly);
        }
        self.check(offset, len)
    }

    fn begin(&self) -> Tx {
        self.pool.begin().logged(&self.os)
    }

    /// The stripe locks of the blocks `offset..offset + len` touches.
    fn hold<'a>(&'a self, tx: &'a Tx, offset: u64, len: u64) -> Held<'a> {
        let bs = u64::from(self.block_size);
        let first = offset / bs;
        let last = offset.saturating_add(len.max(1) - 1) / bs;
        let mut idx: Vec<usize> = if last - first >= STRIPES as u64 {
            (0..STRIPES).collect()
        } else {
            (first..=last).map(|b| (b % STRIPES as u64) as usize).collect()
        };
        idx.sort_unstable();
        idx.dedup();
        Held { tx, _guards: idx.into_iter().map(|i| self.stripes[i].lock()).collect() }
    }

    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let _open = self.enter()?;
        self.check(offset, buf.len() as u64)?;
        self.os.read(DATA_OBJECT, offset, buf)?;
        Ok(())
    }

    /// `read` without the copy: the blocks holding `len` bytes at
    /// `offset`, and runs of zeros, in order (`ObjectSet::read_segments`).
    pub fn read_segments(&self, offset: u64, len: usize) -> Result<Vec<Segment>> {
        let _open = self.enter()?;
        self.check(offset, len as u64)?;
        let mut out = Vec::new();
        self.os.read_segments(DATA_OBJECT, offset, len, &mut out)?;
        Ok(out)
    }

    /// `read_segments` if it needs no read from the vdevs (every block
    /// dirty or cached); None when it would.
    pub fn read_segments_cached(&self, offset: u64, len: usize) -> Result<Option<Vec<Segment>>> {
        let _open = self.enter()?;
        self.check(offset, len as u64)?;
        let mut out = Vec::new();
        Ok(self.os.read_segments_cached(DATA_OBJECT, offset, len, &mut out)?.then_some(out))
    }

    /// Writes `data` at `offset`; with `fua` (or `sync=always`) durable
    /// when it returns. Whole blocks of zeros become holes.
    pub fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<()> {
        let _open = self.enter()?;
        self.check_writable(offset, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        self.make_room(data.len() as u64)?;
        {
            let tx = self.begin();
            let _held = self.hold(&tx, offset, data.len() as u64);
            let bs = self.block_size as usize;
            // Runs of whole zero blocks are freed, the rest written.
            let mut pos = 0usize;
            while pos < data.len() {
                let at = offset + pos as u64;
                let in_block = (at % bs as u64) as usize;
                let zeros = if in_block == 0 { whole_zero_blocks(&data[pos..], bs) } else { 0 };
                if zeros > 0 {
                    self.os.free_range(&tx, DATA_OBJECT, at, Some(zeros as u64))?;
                    pos += zeros;
                    continue;
                }
                // Up to the next whole zero block (or the end).
                let mut end = (pos + bs - in_block).min(data.len());
                while end < data.len() && whole_zero_blocks(&data[end..], bs) == 0 {
                    end = (end + bs).min(data.len());
                }
                self.os.write_data(&tx, DATA_OBJECT, at, &data[pos..end])?;
                pos = end;
            }
        }
        self.durable(fua)
    }

    /// Zeros `len` bytes at `offset`. With `punch` the whole blocks become
    /// holes (no data written; partial blocks at the edges are zeroed);
    /// without, zeros are written (NBD's `NO_HOLE`).
    pub fn write_zeroes(&self, offset: u64, len: u64, punch: bool, fua: bool) -> Result<()> {
        let _open = self.enter()?;
        self.check_writable(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        if punch {
            let tx = self.begin();
            let _held = self.hold(&tx, offset, len);
            self.os.free_range(&tx, DATA_OBJECT, offset, Some(len))?;
        } else {
            self.make_room(len)?;
            let zeros = vec![0u8; ZERO_CHUNK.min(len) as usize];
            let mut done = 0u64;
            while done < len {
                let n = (len - done).min(ZERO_CHUNK);
                let tx = self.begin();
                let _held = self.hold(&tx, offset + done, n);
                self.os.write_data(&tx, DATA_OBJECT, offset + done, &zeros[..n as usize])?;
                done += n;
            }
        }
        self.durable(fua)
    }

    /// Discards `len` bytes at `offset`: the blocks it covers whole become
    /// holes (read as zeros); partly covered blocks keep their data (TRIM
    /// promises nothing about what reads return).
    pub fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<()> {
        let _open = self.enter()?;
        self.check_writable(offset, len)?;
        let bs = u64::from(self.block_size);
        let first = offset.div_ceil(bs) * bs;
        let end = (offset + len) / bs * bs;
        if end > first {
            let tx = self.begin();
            let _held = self.hold(&tx, first, end - first);
            self.os.free_range(&tx, DATA_OBJECT, first, Some(end - first))?;
        }
        self.durable(fua)
    }

    /// Makes every change made so far durable (NBD FLUSH), unless
    /// `sync=disabled`: the intent log is committed, no txg.
    pub fn flush(&self) -> Result<()> {
        let _open = self.enter()?;
        if self.sync_mode() == SyncMode::Disabled {
            return Ok(());
        }
        self.commit()
    }

    fn durable(&self, fua: bool) -> Result<()> {
        match self.sync_mode() {
            SyncMode::Disabled => Ok(()),
            SyncMode::Always => self.commit(),
            SyncMode::Standard if fua => self.commit(),
            SyncMode::Standard => Ok(()),
        }
    }

    fn commit_if_always(&self) -> Result<()> {
        self.durable(false)
    }

    fn commit(&self) -> Result<()> {
        if self.os.is_readonly() {
            self.pool.sync()?;
        } else {
            self.os.log_commit_all()?;
        }
        Ok(())
    }

    /// Data and holes from `offset` for up to `len` bytes (not past the
    /// end), at most `max` runs, in order; adjacent runs differ.
    pub fn extents(&self, offset: u64, len: u64, max: usize) -> Result<Vec<Extent>> {
        let _open = self.enter()?;
        let size = self.size();
        if offset > size {
            return Err(VolError::OutOfRange { offset, len, size });
        }
        let end = offset.saturating_add(len).min(size);
        let bs = u64::from(self.block_size);
        let mut out: Vec<Extent> = Vec::new();
        let mut pos = offset;
        while pos < end && out.len() < max {
            let blk = pos / bs;
            let data = self.os.next_data_block(DATA_OBJECT, blk)?;
            let (hole, stop) = if data == Some(blk) {
                let h = self.os.next_hole_block(DATA_OBJECT, blk)?;
                (false, h.saturating_mul(bs).min(end))
            } else {
                (true, data.map_or(end, |d| d.saturating_mul(bs).min(end)))
            };
            let stop = stop.max(pos + 1).min(end);
            match out.last_mut() {
                Some(last) if last.hole == hole => last.len += stop - pos,
                _ => out.push(Extent { len: stop - pos, hole }),
            }
            pos = stop;
        }
        Ok(out)
    }
}

/// Bytes of whole `bs` blocks of zeros at the start of `data`.
fn whole_zero_blocks(data: &[u8], bs: usize) -> usize {
    let mut n = 0;
    while n + bs <= data.len() && data[n..n + bs].iter().all(|&b| b == 0) {
        n += bs;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_are_powers_of_two_in_range() {
        assert_eq!(check_block_size(16384).unwrap(), 16384);
        assert!(check_block_size(256).is_err());
        assert!(check_block_size(3 << 12).is_err());
        assert!(check_block_size(2 << 20).is_err());
    }

    #[test]
    fn zero_runs_count_whole_blocks_only() {
        let mut d = vec![0u8; 4096 * 3 + 100];
        assert_eq!(whole_zero_blocks(&d, 4096), 4096 * 3);
        d[4096 + 5] = 1;
        assert_eq!(whole_zero_blocks(&d, 4096), 4096);
        d[0] = 1;
        assert_eq!(whole_zero_blocks(&d, 4096), 0);
    }
}
