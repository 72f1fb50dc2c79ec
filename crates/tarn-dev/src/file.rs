//! File and block-device backend.
//!
//! Positional I/O through `std::os::unix::fs::FileExt`; `flush` is
//! `fdatasync`. The size is fixed at open time (file length, or the
//! `BLKGETSIZE64` ioctl for block devices) and every operation is checked
//! against it. The open takes `flock(LOCK_EX | LOCK_NB)`, so a second open
//! of the same device — from this process or another — fails with
//! [`DevError::Busy`]; the lock goes away when the device is dropped.
//!
//! Gathered writes (`write_vectored_at`, the vdev layer's runs of a txg's
//! adjacent blocks) go out with `O_DIRECT` when every piece is aligned to
//! [`DIRECT_ALIGN`]: no copy into the page cache and no writeback by the
//! kernel's flusher, which on the disks measured made buffered writes
//! followed by `fdatasync` two to three times slower than direct ones
//! (docs/benchmarks.md). Durable writes (`write_durable_at`) go direct too
//! when offset and length are aligned (`RWF_DSYNC`: one write, no page to
//! dirty and write back first). Everything else, and every read, goes
//! through the page cache; the kernel keeps the two coherent (a direct
//! write drops the cached pages of its range). A file system that refuses direct I/O
//! (EINVAL at open or at the first write) is written through the cache.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::{check_range, DevError, Device, Result};

/// `_IOR(0x12, 114, size_t)`: size of a block device in bytes.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
/// `_IO(0x12, 119)`: discard a byte range `[start, start + len)` (two u64).
const BLKDISCARD: libc::c_ulong = 0x1277;
/// Discards are issued in whole 512-byte sectors (the smallest logical
/// block size a block device has).
const DISCARD_SECTOR: u64 = 512;
/// Alignment of address, length and offset a direct write needs here (the
/// largest logical block size of the disks tarn is used on).
pub const DIRECT_ALIGN: usize = 4096;
/// Most iovecs one `pwritev` takes (Linux's `UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

pub struct FileDevice {
    file: File,
    /// The same file opened with `O_DIRECT` (None where the file system
    /// refuses it).
    direct: Option<File>,
    /// Cleared when a direct write was refused (EINVAL).
    direct_ok: AtomicBool,
    path: String,
    size: u64,
    is_block: bool,
}

impl FileDevice {
    /// Opens `path` read-write and locks it exclusively. With
    /// `create_size = Some(n)` a missing regular file is created, and a
    /// regular file shorter than `n` is extended to `n` (never shrunk).
    pub fn open(path: &Path, create_size: Option<u64>) -> Result<Arc<FileDevice>> {
        let name = path.display().to_string();
        let open_err = |reason: String| DevError::Open { path: name.clone(), reason };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create_size.is_some())
            .truncate(false)
            .open(path)
            .map_err(|e| match e.kind() {
                ErrorKind::NotFound => open_err("no such file or device (pass a size to create a file)".into()),
                ErrorKind::PermissionDenied => open_err(format!("permission denied: {e}")),
                _ => open_err(format!("cannot open: {e}")),
            })?;
        // SAFETY: flock on a descriptor we own; no memory is passed.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Err(DevError::Busy { path: name });
            }
            return Err(open_err(format!("flock failed: {err}")));
        }
        let meta = file.metadata().map_err(|e| open_err(format!("stat failed: {e}")))?;
        let file_type = meta.file_type();
        let (size, is_block) = if file_type.is_block_device() {
            let mut bytes: u64 = 0;
            // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which
            // points to a live local.
            let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64 as _, &mut bytes as *mut u64) };
            if rc != 0 {
                return Err(open_err(format!("BLKGETSIZE64 failed: {}", std::io::Error::last_os_error())));
            }
            (bytes, true)
        } else if file_type.is_file() {
            let mut len = meta.len();
            if let Some(want) = create_size {
                if len < want {
                    file.set_len(want).map_err(|e| open_err(format!("cannot size file to {want}: {e}")))?;
                    len = want;
                }
            }
            (len, false)
        } else {
            return Err(open_err("not a regular file or block device".into()));
        };
        // A second descriptor for direct writes; no lock (the first one
        // holds it for this process).
        let direct = OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(path).ok();
        let direct_ok = AtomicBool::new(direct.is_some());
        Ok(Arc::new(FileDevice { file, direct, direct_ok, path: name, size, is_block }))
    }

    /// Whether the device writes aligned runs with `O_DIRECT`.
    pub fn writes_direct(&self) -> bool {
        self.direct_ok.load(Ordering::Relaxed)
    }

    /// Writes aligned `bufs` through the `O_DIRECT` descriptor (pwritev2
    /// with `flags`). None when the caller must go through the page cache
    /// instead: no direct descriptor, direct I/O refused (EINVAL: off from
    /// now on, a file system without direct I/O for writes), or `flags`
    /// not known to the kernel (EOPNOTSUPP, ENOSYS).
    fn write_direct(&self, bufs: &[&[u8]], offset: u64, flags: libc::c_int) -> Option<Result<()>> {
        let direct = self.direct.as_ref().filter(|_| self.writes_direct())?;
        match pwritev_all(direct, bufs, offset, flags) {
            Ok(()) => Some(Ok(())),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                self.direct_ok.store(false, Ordering::Relaxed);
                None
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOSYS)) => None,
            Err(e) => Some(Err(self.io_err("write", offset, e))),
        }
    }

    fn io_err(&self, op: &'static str, offset: u64, source: std::io::Error) -> DevError {
        DevError::Io { path: self.path.clone(), op, offset, source }
    }
}

impl Device for FileDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_range(&self.path, offset, buf.len() as u64, self.size)?;
        self.file.read_exact_at(buf, offset).map_err(|e| {
            if e.kind() == ErrorKind::UnexpectedEof {
                // The file shrank under us: report it as a range error.
                DevError::OutOfRange { path: self.path.clone(), offset, len: buf.len() as u64, size: self.size }
            } else {
                self.io_err("read", offset, e)
            }
        })
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        check_range(&self.path, offset, buf.len() as u64, self.size)?;
        self.file.write_all_at(buf, offset).map_err(|e| self.io_err("write", offset, e))
    }

    /// `pwritev2(RWF_DSYNC)`: the kernel syncs this range (and the
    /// metadata it needs) and flushes the device's cache, where
    /// `fdatasync` would also wait for every other dirty page of the file.
    /// A kernel without the flag (before 4.7) gets a write and a flush.
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        check_range(&self.path, offset, buf.len() as u64, self.size)?;
        // Aligned offset and length: one direct write with RWF_DSYNC (the
        // file system makes it durable with a FUA write or one flush; no
        // page to copy and write back first), through an aligned copy when
        // the caller's buffer is not aligned.
        let aligned = offset.is_multiple_of(DIRECT_ALIGN as u64) && buf.len().is_multiple_of(DIRECT_ALIGN) && !buf.is_empty();
        if aligned && self.writes_direct() {
            let bounce;
            let data = if (buf.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN) {
                buf
            } else {
                bounce = AlignedBuf::copy_of(buf);
                bounce.as_slice()
            };
            if let Some(done) = self.write_direct(&[data], offset, libc::RWF_DSYNC) {
                return done;
            }
        }
        match pwritev_all(&self.file, &[buf], offset, libc::RWF_DSYNC) {
            Ok(()) => Ok(()),
            // A kernel without RWF_DSYNC (refused before anything was
            // written): a write and a flush.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOSYS)) => {
                self.write_at(buf, offset)?;
                self.flush()
            }
            Err(e) => Err(self.io_err("write", offset, e)),
        }
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<()> {
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        check_range(&self.path, offset, total, self.size)?;
        let aligned = offset.is_multiple_of(DIRECT_ALIGN as u64)
            && bufs.iter().all(|b| b.len().is_multiple_of(DIRECT_ALIGN) && (b.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN));
        if aligned {
            if let Some(done) = self.write_direct(bufs, offset, 0) {
                return done;
            }
        }
        pwritev_all(&self.file, bufs, offset, 0).map_err(|e| self.io_err("write", offset, e))
    }

    fn flush(&self) -> Result<()> {
        self.file.sync_data().map_err(|e| self.io_err("flush", 0, e))
    }

    fn size(&self) -> u64 {
        self.size
    }

    /// Regular file: punches a hole (`FALLOC_FL_PUNCH_HOLE | KEEP_SIZE`),
    /// so the file's allocated blocks shrink and the range reads as zeros.
    /// Block device: `BLKDISCARD` of the whole 512-byte sectors inside the
    /// range. A file system or device that cannot do either (EOPNOTSUPP)
    /// is not an error: trim is a hint.
    fn trim(&self, offset: u64, len: u64) -> Result<()> {
        check_range(&self.path, offset, len, self.size)?;
        if len == 0 {
            return Ok(());
        }
        let rc = if self.is_block {
            let start = offset.div_ceil(DISCARD_SECTOR) * DISCARD_SECTOR;
            let end = (offset + len) / DISCARD_SECTOR * DISCARD_SECTOR;
            if end <= start {
                return Ok(());
            }
            let range: [u64; 2] = [start, end - start];
            // SAFETY: BLKDISCARD reads two u64 through the pointer, which
            // points to a live local array.
            unsafe { libc::ioctl(self.file.as_raw_fd(), BLKDISCARD as _, range.as_ptr()) }
        } else {
            let (Ok(off), Ok(l)) = (i64::try_from(offset), i64::try_from(len)) else {
                return Ok(());
            };
            // SAFETY: fallocate on a descriptor we own; no memory is passed.
            unsafe { libc::fallocate(self.file.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, off, l) }
        };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EOPNOTSUPP) {
                return Ok(());
            }
            return Err(self.io_err("trim", offset, err));
        }
        Ok(())
    }

    fn path(&self) -> &str {
        &self.path
    }
}

/// A heap copy aligned to [`DIRECT_ALIGN`] (a direct write's bounce
/// buffer).
struct AlignedBuf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl AlignedBuf {
    fn copy_of(data: &[u8]) -> AlignedBuf {
        assert!(!data.is_empty(), "an aligned copy of nothing");
        let layout = std::alloc::Layout::from_size_align(data.len(), DIRECT_ALIGN).expect("a buffer's length fits a layout");
        // SAFETY: `layout` has a non-zero size (callers pass non-empty data).
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: `ptr` holds `data.len()` bytes; the regions are distinct.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, data.len()) };
        AlignedBuf { ptr, layout }
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` holds `layout.size()` bytes initialized by `copy_of`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `copy_of` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// Writes all of `bufs` at `offset` (pwritev2 with `flags`, following
/// short writes and EINTR).
fn pwritev_all(file: &File, bufs: &[&[u8]], offset: u64, flags: libc::c_int) -> std::io::Result<()> {
    let mut iov: Vec<libc::iovec> =
        bufs.iter().filter(|b| !b.is_empty()).map(|b| libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: b.len() }).collect();
    let mut first = 0usize;
    let mut at = offset;
    while first < iov.len() {
        let n_iov = (iov.len() - first).min(IOV_MAX);
        let pos = libc::off_t::try_from(at).map_err(|_| std::io::Error::from(ErrorKind::InvalidInput))?;
        // SAFETY: `iov[first..first + n_iov]` names slices of `bufs`, which
        // live across the call; the kernel only reads them.
        let n = unsafe { libc::pwritev2(file.as_raw_fd(), iov[first..].as_ptr(), n_iov as libc::c_int, pos, flags) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::from(ErrorKind::WriteZero));
        }
        at += n as u64;
        // Skip what was written; a partly written iovec keeps its rest.
        let mut left = n as usize;
        while left > 0 && first < iov.len() {
            let v = &mut iov[first];
            if left >= v.iov_len {
                left -= v.iov_len;
                first += 1;
            } else {
                // SAFETY: advancing inside the same slice, `left < iov_len`.
                v.iov_base = unsafe { (v.iov_base as *mut u8).add(left) } as *mut libc::c_void;
                v.iov_len -= left;
                left = 0;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectored_writes_land_in_order_aligned_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d0");
        let dev = FileDevice::open(&p, Some(4 << 20)).unwrap();
        // Aligned pieces (the direct path where the file system has it).
        let layout = std::alloc::Layout::from_size_align(3 * DIRECT_ALIGN, DIRECT_ALIGN).unwrap();
        // SAFETY: a non-zero-sized layout; freed below with the same one.
        let ptr = unsafe { std::alloc::alloc(layout) };
        assert!(!ptr.is_null());
        // SAFETY: `ptr` holds 3 * DIRECT_ALIGN bytes, initialized here.
        let aligned = unsafe {
            std::ptr::write_bytes(ptr, 0, 3 * DIRECT_ALIGN);
            std::slice::from_raw_parts_mut(ptr, 3 * DIRECT_ALIGN)
        };
        for (i, b) in aligned.iter_mut().enumerate() {
            *b = (i % 253) as u8;
        }
        let (a, rest) = aligned.split_at(DIRECT_ALIGN);
        dev.write_vectored_at(&[a, rest], 8 * DIRECT_ALIGN as u64).unwrap();
        // Unaligned pieces (through the page cache).
        dev.write_vectored_at(&[b"abc", b"", b"defg"], 100).unwrap();
        dev.flush().unwrap();
        let mut back = vec![0u8; 3 * DIRECT_ALIGN];
        dev.read_at(&mut back, 8 * DIRECT_ALIGN as u64).unwrap();
        assert_eq!(&back[..], &aligned[..]);
        let mut small = [0u8; 7];
        dev.read_at(&mut small, 100).unwrap();
        assert_eq!(&small, b"abcdefg");
        assert!(matches!(dev.write_vectored_at(&[a, rest], (4 << 20) - 4096), Err(DevError::OutOfRange { .. })));
        // SAFETY: allocated above with `layout`, no reference to it is used after.
        unsafe { std::alloc::dealloc(ptr, layout) };
        // Another descriptor sees the bytes: they are in the file.
        let on_file = std::fs::read(&p).unwrap();
        assert_eq!(&on_file[100..107], b"abcdefg");
        assert_eq!(on_file[8 * DIRECT_ALIGN + 5], 5);
    }

    #[test]
    fn create_roundtrip_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d0");
        let dev = FileDevice::open(&p, Some(1 << 20)).unwrap();
        assert_eq!(dev.size(), 1 << 20);
        dev.write_at(b"hello", 4090).unwrap();
        dev.flush().unwrap();
        let mut buf = [0u8; 5];
        dev.read_at(&mut buf, 4090).unwrap();
        assert_eq!(&buf, b"hello");
        assert!(matches!(dev.read_at(&mut buf, (1 << 20) - 4), Err(DevError::OutOfRange { .. })));
        assert!(matches!(dev.write_at(&buf, u64::MAX - 1), Err(DevError::OutOfRange { .. })));
        assert!(dev.trim(1 << 20, 1).is_err());
        dev.trim(0, 8192).unwrap();
        dev.read_at(&mut buf, 4090).unwrap();
        assert_eq!(buf, [0; 5]);
    }

    #[test]
    fn durable_write_lands_in_the_file_and_checks_its_range() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d0");
        let dev = FileDevice::open(&p, Some(1 << 20)).unwrap();
        let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        dev.write_durable_at(&data, 12_345).unwrap();
        drop(dev);
        // Through another descriptor: the bytes are in the file itself.
        let on_file = std::fs::read(&p).unwrap();
        assert_eq!(&on_file[12_345..12_345 + data.len()], &data[..]);
        let dev = FileDevice::open(&p, None).unwrap();
        assert!(matches!(dev.write_durable_at(&data, (1 << 20) - 100), Err(DevError::OutOfRange { .. })));
        assert!(matches!(dev.write_durable_at(&data, u64::MAX - 1), Err(DevError::OutOfRange { .. })));
    }

    #[test]
    fn aligned_durable_writes_read_back_through_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d0");
        let dev = FileDevice::open(&p, Some(1 << 20)).unwrap();
        // Cached first (a read fills the page cache), then overwritten by
        // durable aligned writes from an unaligned buffer (the bounce copy)
        // and from an aligned one.
        let mut before = vec![0u8; 3 * DIRECT_ALIGN];
        dev.read_at(&mut before, 0).unwrap();
        let backing: Vec<u8> = (0..(2 * DIRECT_ALIGN + 1) as u32).map(|i| (i % 253) as u8).collect();
        let unaligned = if (backing.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN) { &backing[1..] } else { &backing[..2 * DIRECT_ALIGN] };
        let unaligned = &unaligned[..2 * DIRECT_ALIGN];
        dev.write_durable_at(unaligned, 0).unwrap();
        let bounce = AlignedBuf::copy_of(&[7u8; DIRECT_ALIGN]);
        dev.write_durable_at(bounce.as_slice(), 2 * DIRECT_ALIGN as u64).unwrap();
        let mut after = vec![0u8; 3 * DIRECT_ALIGN];
        dev.read_at(&mut after, 0).unwrap();
        assert_eq!(&after[..2 * DIRECT_ALIGN], unaligned);
        assert_eq!(&after[2 * DIRECT_ALIGN..], &[7u8; DIRECT_ALIGN][..]);
        assert_eq!(&std::fs::read(&p).unwrap()[..3 * DIRECT_ALIGN], &after[..]);
        // The direct path was taken and not given up, where the file
        // system has direct I/O at all.
        if dev.direct.is_some() {
            assert!(dev.writes_direct(), "a durable write turned direct I/O off");
        }
    }

    #[test]
    fn trim_punches_a_hole_and_the_file_shrinks() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d0");
        let dev = FileDevice::open(&p, Some(16 << 20)).unwrap();
        dev.write_at(&vec![7u8; 8 << 20], 1 << 20).unwrap();
        dev.flush().unwrap();
        let before = std::fs::metadata(&p).unwrap().blocks();
        assert!(before >= (8 << 20) / 512, "data is allocated: {before} blocks");
        dev.trim(2 << 20, 4 << 20).unwrap();
        let after = std::fs::metadata(&p).unwrap().blocks();
        assert!(before - after >= (4 << 20) / 512 - 8, "4 MiB freed: {before} -> {after} blocks");
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 16 << 20, "size kept");
        let mut buf = vec![1u8; 4096];
        dev.read_at(&mut buf, 3 << 20).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        dev.read_at(&mut buf, (6 << 20) + 4096).unwrap();
        assert!(buf.iter().all(|&b| b == 7), "outside the range untouched");
    }

    #[test]
    fn missing_file_is_open_error() {
        let dir = tempfile::tempdir().unwrap();
        match FileDevice::open(&dir.path().join("nope"), None) {
            Err(DevError::Open { reason, .. }) => assert!(reason.contains("no such file")),
            Err(e) => panic!("wrong error {e}"),
            Ok(_) => panic!("opened a missing file"),
        }
    }

    #[test]
    fn second_open_is_busy_until_drop() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d0");
        let a = FileDevice::open(&p, Some(65536)).unwrap();
        assert!(matches!(FileDevice::open(&p, None), Err(DevError::Busy { .. })));
        drop(a);
        FileDevice::open(&p, None).unwrap();
    }

    #[test]
    fn shrunk_file_reads_out_of_range_not_panic() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d0");
        let dev = FileDevice::open(&p, Some(65536)).unwrap();
        std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(1000).unwrap();
        let mut buf = [0u8; 100];
        assert!(matches!(dev.read_at(&mut buf, 2000), Err(DevError::OutOfRange { .. })));
    }
}
