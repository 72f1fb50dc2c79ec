//! Devices: where bytes finally live.
//!
//! The [`Device`] trait is the five-method seam every layer above writes
//! through, and every robustness test wraps: file and block-device backends
//! for real use, an in-memory device, a fault-injecting wrapper (I/O errors,
//! bit rot, a device that vanishes) and a crash-recording device that can
//! reproduce the durable image at any point of a run (power cut).
//!
//! Invariants:
//! - A write is durable only after a later `flush` on the same device returned Ok.
//! - Offsets and lengths are bounds-checked: an access past `size()` is an
//!   error, never a panic.

use std::sync::Arc;

pub type Result<T> = std::result::Result<T, DevError>;

#[derive(Debug, thiserror::Error)]
pub enum DevError {
    #[error("{path}: {op} at offset {offset}: {source}")]
    Io { path: String, op: &'static str, offset: u64, #[source] source: std::io::Error },
    #[error("{path}: access [{offset}, +{len}) is past the end of the device ({size} bytes)")]
    OutOfRange { path: String, offset: u64, len: u64, size: u64 },
    #[error("{path}: device is in use by another process")]
    Busy { path: String },
    #[error("{path}: {reason}")]
    Open { path: String, reason: String },
    #[error("{path}: injected fault on {op}")]
    Injected { path: String, op: &'static str },
    /// The device went away (pulled disk, deleted file, dead FUSE backend).
    #[error("{path}: device is gone")]
    Gone { path: String },
}

impl DevError {
    /// Whether the error says the device itself is no longer there (as
    /// opposed to one failed operation): the vdev layer then reports the
    /// device REMOVED at once instead of counting errors toward FAULTED.
    pub fn is_gone(&self) -> bool {
        match self {
            DevError::Gone { .. } => true,
            DevError::Io { source, .. } => matches!(
                source.raw_os_error(),
                Some(libc::ENOENT | libc::ENXIO | libc::ENODEV | libc::ENOTCONN | libc::ESHUTDOWN | libc::ESTALE | libc::EBADF)
            ),
            _ => false,
        }
    }
}

/// A place that stores bytes at offsets. Implementations are thread-safe;
/// concurrent I/O to disjoint ranges is allowed and expected.
pub trait Device: Send + Sync {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()>;
    /// Writes `buf` and returns once these bytes are durable, without
    /// waiting for other writes still in a cache (the intent log's path:
    /// a commit must not queue behind a txg's writes to the same device).
    /// The default writes, then flushes everything.
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.write_at(buf, offset)?;
        self.flush()
    }
    /// Writes `bufs` one after another from `offset` (a run of adjacent
    /// writes gathered by the vdev layer), as one request where the
    /// backend can. The default writes them one by one.
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<()> {
        let mut at = offset;
        for b in bufs {
            self.write_at(b, at)?;
            at += b.len() as u64;
        }
        Ok(())
    }
    /// Make every completed write durable.
    fn flush(&self) -> Result<()>;
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Hint that a range is no longer in use.
    fn trim(&self, offset: u64, len: u64) -> Result<()>;
    /// The path or name users know this device by.
    fn path(&self) -> &str;
}

pub type DeviceRef = Arc<dyn Device>;

mod crash;
mod fault;
mod file;
mod mem;

pub use crash::{CrashDevice, CrashRecorder, CutMode};
pub use fault::FaultDevice;
pub use file::{FileDevice, DIRECT_ALIGN};
pub use mem::MemDevice;

/// Bounds check shared by every backend: `[offset, offset + len)` must lie
/// inside `[0, size)`. Overflow of `offset + len` is out of range too.
pub(crate) fn check_range(path: &str, offset: u64, len: u64, size: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(DevError::OutOfRange { path: path.to_string(), offset, len, size }),
    }
}
