//! File data: read, write, fsync; statfs.

use tarn_obj::{ObjectId, Segment};

use crate::types::SyncMode;
use crate::{
    is_dir, is_reg, now_ns, Fs, FsError, Result, StatFs, MAX_FILE_SIZE, MIN_BLOCK, NAME_MAX,
};

impl Fs {
    /// Read up to `size` bytes at `offset` (short at end of file).
    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let segs = self.read_segments(ino, offset, size)?;
        // Filled in order, not zeroed first.
        let mut buf = Vec::with_capacity(segs.iter().map(Segment::len).sum());
        for s in &segs {
            s.append_to(&mut buf);
        }
        Ok(buf)
    }

    /// `read` without the copy: the file's blocks (cached or dirty) and
    /// runs of zeros holding its bytes `offset..offset + size` (to its
    /// end), in order, for a server to send as they are.
    pub fn read_segments(&self, ino: u64, offset: u64, size: u32) -> Result<Vec<Segment>> {
        let (segs, p) = {
            let _g = self.read_lock(ino);
            let p = self.inode(ino)?;
            if is_dir(&p) {
                return Err(FsError::IsDir);
            }
            if !is_reg(&p) {
                return Err(FsError::Invalid("read of a non-regular file"));
            }
            let end = offset.saturating_add(size as u64).min(p.size);
            let len = end.saturating_sub(offset) as usize;
            let mut segs = Vec::new();
            if len > 0 {
                self.os.read_segments(ObjectId(ino), offset, len, &mut segs)?;
            }
            (segs, p)
        };
        if let Some(now) = self.atime_due(&p) {
            let tx = self.begin();
            let _g = self.lock_set(&tx, &[ino]);
            if let Ok(mut p) = self.inode(ino) {
                p.atime_ns = now;
                let _ = self.put_inode(&tx, ino, &p);
            }
        }
        Ok(segs)
    }

    /// `read_segments` from memory alone, with the file's attributes, for
    /// a server's connection thread: None, with nothing read, nothing
    /// changed and nothing waited for, when the inode's dnode or a block is
    /// not cached, a change holds the inode's lock, the read would update
    /// atime (a transaction), `check` refuses the inode, or the read would
    /// fail. The caller then takes the full path, which answers the same.
    pub(crate) fn read_segments_cached_as(
        &self,
        ino: u64,
        offset: u64,
        size: u32,
        check: &dyn Fn(&crate::format::InodePhys) -> bool,
    ) -> Option<(Vec<Segment>, crate::Attr)> {
        let _g = self.try_read_lock(ino)?;
        let (p, info) = self.live_inode_cached(ino)?;
        if !is_reg(&p) || !check(&p) {
            return None;
        }
        if self.atime_due(&p).is_some() {
            return None;
        }
        let end = offset.saturating_add(size as u64).min(p.size);
        let len = end.saturating_sub(offset) as usize;
        let mut segs = Vec::new();
        if len > 0 && !self.os.read_segments_cached(ObjectId(ino), offset, len, &mut segs).ok()? {
            return None;
        }
        Some((segs, self.attr_from(ino, &p, &info)))
    }

    /// The time to set as `p`'s atime if a read now must update it: with
    /// `atime` on and the dataset writable, relatime's rule (atime not
    /// newer than mtime or ctime, or older than a day).
    fn atime_due(&self, p: &crate::format::InodePhys) -> Option<i64> {
        let opts = *self.opts.read();
        if !opts.atime || opts.readonly {
            return None;
        }
        let now = now_ns();
        (p.atime_ns <= p.mtime_ns || p.atime_ns <= p.ctime_ns || now.saturating_sub(p.atime_ns) > 86_400_000_000_000).then_some(now)
    }

    /// Write `data` at `offset`; returns bytes written (all of it).
    pub fn write(&self, ino: u64, offset: u64, data: &[u8]) -> Result<u32> {
        self.write_as(ino, offset, data, true)
    }

    /// Like [`Fs::write`]; `touch_times: false` leaves mtime and ctime to
    /// the caller: a kernel with a writeback cache keeps its own and sends
    /// them with a SETATTR when it writes the inode back, which may reach
    /// us before the data it covers (tarn-fuse).
    pub fn write_as(&self, ino: u64, offset: u64, data: &[u8], touch_times: bool) -> Result<u32> {
        self.writable()?;
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or(FsError::FileTooBig)?;
        if end > MAX_FILE_SIZE {
            return Err(FsError::FileTooBig);
        }
        self.make_room(data.len() as u64)?;
        self.preread_partial_blocks(ino, offset, end);
        let recordsize = self
            .opts
            .read()
            .recordsize
            .clamp(MIN_BLOCK, tarn_obj::MAX_BLOCK_SIZE);
        let tx = self.begin();
        let _g = self.lock_set(&tx, &[ino]);
        let mut p = self.inode(ino)?;
        if is_dir(&p) {
            return Err(FsError::IsDir);
        }
        if !is_reg(&p) {
            return Err(FsError::Invalid("write to a non-regular file"));
        }
        if data.is_empty() {
            return Ok(0);
        }
        let o = ObjectId(ino);
        let info = self.os.info(o)?;
        if info.block_size < recordsize
            && end > info.block_size as u64
            && info.length <= info.block_size as u64
        {
            // Still at most one block: grow it (ZFS-style single-block files).
            let bs = if end <= recordsize as u64 {
                (end as u32).div_ceil(MIN_BLOCK) * MIN_BLOCK
            } else {
                recordsize
            };
            self.os.set_block_size(&tx, o, bs)?;
        }
        self.os.write_data(&tx, o, offset, data)?;
        p.size = p.size.max(end);
        if touch_times {
            let now = now_ns();
            p.mtime_ns = now;
            p.ctime_ns = now;
        }
        self.put_inode(&tx, ino, &p)?;
        drop(_g);
        drop(tx);
        self.committed(Ok(data.len() as u32))
    }

    /// A write that covers part of a block changes a copy of the whole
    /// block: read the partly covered blocks at the ends of the range into
    /// the cache now, before the txg hold and the inode lock, so writers
    /// of one file read in parallel rather than one at a time under the
    /// lock. Only a cache warm-up: errors are met (and reported) by the
    /// write itself.
    fn preread_partial_blocks(&self, ino: u64, offset: u64, end: u64) {
        let o = ObjectId(ino);
        let Ok(info) = self.os.info(o) else { return };
        let bs = u64::from(info.block_size);
        if bs == 0 || end <= offset {
            return;
        }
        let (first, last) = (offset / bs, (end - 1) / bs);
        let partial = |b: u64| (b == first && !offset.is_multiple_of(bs)) || (b == last && !end.is_multiple_of(bs));
        let ends: &[u64] = if first == last { &[first] } else { &[first, last] };
        for &b in ends {
            if partial(b) && b * bs < info.length {
                let _ = self.os.read_block(o, b);
            }
        }
    }

    /// Make everything written so far durable, unless the dataset has
    /// `sync=disabled`: the intent log's records of every change made in
    /// this dataset until now are written and flushed (no txg; concurrent
    /// callers share one log write). This commits more than the file's own
    /// changes, never less.
    pub fn fsync(&self, _ino: u64) -> Result<()> {
        if self.opts.read().sync == SyncMode::Disabled {
            return Ok(());
        }
        self.commit_log()
    }

    /// A change's result, made durable first under `sync=always` (call it
    /// with no transaction or inode lock held: it waits for the log).
    pub(crate) fn committed<T>(&self, r: Result<T>) -> Result<T> {
        let value = r?;
        if self.opts.read().sync == SyncMode::Always {
            self.commit_log()?;
        }
        Ok(value)
    }

    /// The durability point of one dataset's changes: its intent log.
    fn commit_log(&self) -> Result<()> {
        if self.os.is_readonly() {
            // Data written before `readonly` was set is in a txg that its
            // own sync (or the export's) writes.
            return self.sync_now();
        }
        self.os.log_commit_all()?;
        Ok(())
    }

    /// The durability point: a txg sync of the pool.
    pub(crate) fn sync_now(&self) -> Result<()> {
        // Always: data written before `readonly=on` was set must still be
        // durable when its fsync returns (a no-op on a read-only pool).
        self.pool.sync()?;
        Ok(())
    }

    pub fn statfs(&self) -> Result<StatFs> {
        let bs = 4096u64;
        // Deflated like `tarn list`: raidz parity is not space users can fill.
        let space = self.pool.space();
        let used = self.pool.deflate(self.os.used_bytes());
        let mut avail = self.pool.deflate(space.available);
        let limit = self.limit.read().clone();
        if let Some((remaining, _)) = limit.and_then(|l| l.remaining()) {
            avail = avail.min(remaining);
        }
        let total = used.saturating_add(avail);
        let files_free = avail / 512;
        Ok(StatFs {
            block_size: bs as u32,
            blocks: total / bs,
            blocks_free: avail / bs,
            blocks_avail: avail / bs,
            files: self.os.object_count().saturating_add(files_free),
            files_free,
            name_max: NAME_MAX as u32,
        })
    }
}
