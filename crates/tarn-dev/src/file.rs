//! File and block-device backend.
//!
//! Positional I/O through `std::os::unix::fs::FileExt`; `flush` is
//! `fdatasync`. The size is fixed at open time (file length, or the
//! `BLKGETSIZE64` ioctl for block devices) and every operation is checked
//! against it. The open takes `flock(LOCK_EX | LOCK_NB)`, so a second open
//! of the same device — from this process or another — fails with
//! [`DevError::Busy`]; the lock goes away when the device is dropped.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;
use std::sync::Arc;

use crate::{check_range, DevError, Device, Result};

/// `_IOR(0x12, 114, size_t)`: size of a block device in bytes.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
/// `_IO(0x12, 119)`: discard a byte range `[start, start + len)` (two u64).
const BLKDISCARD: libc::c_ulong = 0x1277;
/// Discards are issued in whole 512-byte sectors (the smallest logical
/// block size a block device has).
const DISCARD_SECTOR: u64 = 512;

pub struct FileDevice {
    file: File,
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
        Ok(Arc::new(FileDevice { file, path: name, size, is_block }))
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
        let mut done = 0usize;
        while done < buf.len() {
            let rest = &buf[done..];
            let iov = libc::iovec { iov_base: rest.as_ptr() as *mut libc::c_void, iov_len: rest.len() };
            let at = (offset + done as u64) as libc::off_t;
            // SAFETY: one iovec naming `rest`, which lives across the call;
            // the kernel only reads it.
            let n = unsafe { libc::pwritev2(self.file.as_raw_fd(), &iov, 1, at, libc::RWF_DSYNC) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EOPNOTSUPP | libc::ENOSYS) if done == 0 => {
                        self.write_at(buf, offset)?;
                        return self.flush();
                    }
                    _ => return Err(self.io_err("write", offset + done as u64, e)),
                }
            }
            if n == 0 {
                return Err(self.io_err("write", offset + done as u64, std::io::Error::from(ErrorKind::WriteZero)));
            }
            done += n as usize;
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

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
