//! `fallocate` and `lseek(SEEK_DATA / SEEK_HOLE)`.
//!
//! tarn is copy-on-write: every write allocates new blocks, so space set
//! aside ahead of time could not be the space a later write lands in. As
//! in OpenZFS, preallocation (mode 0 and `FALLOC_FL_KEEP_SIZE`) therefore
//! reserves nothing: it checks that the quota and the pool could take the
//! range plus a tenth (ZFS's `zfs_fallocate_reserve_percent` = 110), fails
//! with EDQUOT / ENOSPC if not, and mode 0 then grows the file's size (the
//! new range reads as zeros, a hole). `FALLOC_FL_PUNCH_HOLE` (with
//! `KEEP_SIZE`, as Linux requires) and `FALLOC_FL_ZERO_RANGE` free every
//! whole block in the range (holes in the block tree; the space comes back
//! when the txg syncs, or goes to a snapshot's dead list) and zero the
//! partial blocks at its edges. Other modes (collapse, insert, unshare)
//! answer EOPNOTSUPP.
//!
//! SEEK_DATA / SEEK_HOLE answer from the object's newest view
//! (`ObjectSet::next_data_block` / `next_hole_block`): dirty buffers not
//! yet synced are data, dirty frees are holes. Offsets are block-aligned
//! except that an answer never goes back before the offset asked and a
//! hole is never reported past the end of the file (the implicit hole at
//! end of file). At or past the end: ENXIO, as Linux answers.

use tarn_obj::ObjectId;

use crate::{is_dir, is_reg, now_ns, Attr, Fs, FsError, Result, MAX_FILE_SIZE};

pub const FALLOC_FL_KEEP_SIZE: u32 = 0x01;
pub const FALLOC_FL_PUNCH_HOLE: u32 = 0x02;
pub const FALLOC_FL_ZERO_RANGE: u32 = 0x10;
pub const SEEK_DATA: u32 = 3;
pub const SEEK_HOLE: u32 = 4;

/// Preallocation checks for this share of the range, in percent.
const FALLOCATE_RESERVE_PERCENT: u64 = 110;

impl Fs {
    /// `fallocate(2)` on a regular file; returns its new attributes.
    pub fn fallocate(&self, ino: u64, offset: u64, len: u64, mode: u32) -> Result<Attr> {
        self.committed(self.fallocate_uncommitted(ino, offset, len, mode))
    }

    fn fallocate_uncommitted(&self, ino: u64, offset: u64, len: u64, mode: u32) -> Result<Attr> {
        let known = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;
        if mode & !known != 0 {
            return Err(FsError::NotSupported("fallocate mode"));
        }
        let punch = mode & FALLOC_FL_PUNCH_HOLE != 0;
        let zero = mode & FALLOC_FL_ZERO_RANGE != 0;
        let keep_size = mode & FALLOC_FL_KEEP_SIZE != 0;
        // Linux: punching must keep the size, and punch and zero exclude each other.
        if punch && (!keep_size || zero) {
            return Err(FsError::NotSupported("fallocate mode"));
        }
        if len == 0 {
            return Err(FsError::Invalid("fallocate of an empty range"));
        }
        let end = offset.checked_add(len).ok_or(FsError::FileTooBig)?;
        if end > MAX_FILE_SIZE {
            return Err(FsError::FileTooBig);
        }
        self.writable()?;
        if !punch && !zero {
            // Outside any transaction, like every check for room.
            let room = len.saturating_mul(FALLOCATE_RESERVE_PERCENT) / 100;
            self.make_room(room)?;
        }
        let tx = self.begin();
        let _g = self.lock_set(&tx, &[ino]);
        let mut p = self.inode(ino)?;
        if is_dir(&p) {
            return Err(FsError::IsDir);
        }
        if !is_reg(&p) {
            return Err(FsError::NoDevice);
        }
        let now = now_ns();
        let o = ObjectId(ino);
        if punch || zero {
            if offset < p.size {
                let stop = end.min(p.size);
                self.os.free_range(&tx, o, offset, Some(stop - offset))?;
            }
            if zero && !keep_size && end > p.size {
                p.size = end;
            }
            p.mtime_ns = now;
            p.ctime_ns = now;
        } else if !keep_size && end > p.size {
            p.size = end;
            p.mtime_ns = now;
            p.ctime_ns = now;
        }
        self.put_inode(&tx, ino, &p)?;
        self.attr_of(ino, &p)
    }

    /// `lseek` with SEEK_DATA or SEEK_HOLE: the offset of the first data
    /// (or hole) at or after `offset`.
    pub fn seek_data_hole(&self, ino: u64, offset: u64, whence: u32) -> Result<u64> {
        if whence != SEEK_DATA && whence != SEEK_HOLE {
            return Err(FsError::Invalid("whence"));
        }
        let _g = self.read_lock(ino);
        let p = self.inode(ino)?;
        if !is_reg(&p) && !is_dir(&p) {
            return Err(FsError::Invalid("seek on a special file"));
        }
        // Directories have no data to find (as on ZFS).
        if offset >= p.size || is_dir(&p) {
            return Err(FsError::NoSuchOffset);
        }
        let o = ObjectId(ino);
        let bs = u64::from(self.os.info(o)?.block_size.max(1));
        let first = offset / bs;
        if whence == SEEK_DATA {
            let Some(b) = self.os.next_data_block(o, first)? else {
                return Err(FsError::NoSuchOffset);
            };
            let at = b.saturating_mul(bs).max(offset);
            if at >= p.size {
                return Err(FsError::NoSuchOffset);
            }
            Ok(at)
        } else {
            let b = self.os.next_hole_block(o, first)?;
            Ok(b.saturating_mul(bs).max(offset).min(p.size))
        }
    }
}
