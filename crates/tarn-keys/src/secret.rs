//! `Secret`: key bytes in memory of their own.
//!
//! Each secret lives in an anonymous mapping of whole pages (there are few
//! keys: one master key per loaded encryption root, a wrapping key while
//! loading, the per-purpose keys the block layer derives), so that:
//!
//! - the pages are `mlock`ed: never written to swap. When the lock is
//!   refused (`RLIMIT_MEMLOCK` without `CAP_IPC_LOCK`) the secret still
//!   works; the refusal is counted in [`secret_stats`] for the daemon to
//!   report, as a warning, not an error;
//! - `madvise(MADV_DONTDUMP)`: never in a core dump (failures counted
//!   too), and `MADV_WIPEONFORK`: a forked child (the daemon starts smbd
//!   and other helpers) sees zeros, not keys (best effort: old kernels
//!   lack it);
//! - the bytes are zeroed (volatile writes that the optimizer keeps)
//!   before the pages are unlocked and unmapped on drop.
//!
//! `Debug` shows the length and lock state, never a byte. `Clone` makes a
//! new mapping, locked and advised like the first.
//!
//! Invariant: `len <= map_len`, `map_len` a positive multiple of the page
//! size, `ptr` the start of a live mapping of `map_len` bytes owned by this
//! value alone.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use zeroize::Zeroize;

use crate::KeyError;

static LIVE: AtomicU64 = AtomicU64::new(0);
static LOCKED_BYTES: AtomicU64 = AtomicU64::new(0);
static MLOCK_FAILURES: AtomicU64 = AtomicU64::new(0);
static DONTDUMP_FAILURES: AtomicU64 = AtomicU64::new(0);

/// Counters of the process's secret memory, for the daemon to report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SecretStats {
    /// Secrets alive now.
    pub live: u64,
    /// Bytes of secret pages locked now.
    pub locked_bytes: u64,
    /// Secrets whose pages could not be locked (since the process began).
    pub mlock_failures: u64,
    /// Secrets whose pages could not be excluded from core dumps.
    pub dontdump_failures: u64,
}

/// The counters of every secret this process made.
pub fn secret_stats() -> SecretStats {
    SecretStats {
        live: LIVE.load(Ordering::Relaxed),
        locked_bytes: LOCKED_BYTES.load(Ordering::Relaxed),
        mlock_failures: MLOCK_FAILURES.load(Ordering::Relaxed),
        dontdump_failures: DONTDUMP_FAILURES.load(Ordering::Relaxed),
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).ok().filter(|s| s.is_power_of_two()).unwrap_or(4096)
}

pub struct Secret {
    ptr: NonNull<u8>,
    len: usize,
    map_len: usize,
    locked: bool,
}

// SAFETY: the mapping is owned by this value alone (like a Box<[u8]>);
// shared access is read-only through &self.
unsafe impl Send for Secret {}
// SAFETY: as above; no interior mutability.
unsafe impl Sync for Secret {}

impl Secret {
    /// `len` zero bytes in locked, undumpable pages of their own.
    ///
    /// Panics only if the system cannot map a page (out of memory, like
    /// any allocation failure).
    pub fn zeroed(len: usize) -> Secret {
        let page = page_size();
        let map_len = len.max(1).div_ceil(page).checked_mul(page).expect("secret size overflows");
        // SAFETY: an anonymous private mapping at an address of the
        // kernel's choosing; the result is checked below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(
            addr != libc::MAP_FAILED,
            "tarn-keys: cannot map {map_len} bytes for a secret: {}",
            std::io::Error::last_os_error()
        );
        let ptr = NonNull::new(addr.cast::<u8>()).expect("mmap returned a null mapping");
        // SAFETY: (for the three calls) the range is the mapping just made.
        if unsafe { libc::madvise(addr, map_len, libc::MADV_DONTDUMP) } != 0 {
            DONTDUMP_FAILURES.fetch_add(1, Ordering::Relaxed);
        }
        // Best effort: EINVAL before Linux 4.14.
        let _ = unsafe { libc::madvise(addr, map_len, libc::MADV_WIPEONFORK) };
        let locked = unsafe { libc::mlock(addr, map_len) } == 0;
        if locked {
            LOCKED_BYTES.fetch_add(map_len as u64, Ordering::Relaxed);
        } else {
            MLOCK_FAILURES.fetch_add(1, Ordering::Relaxed);
        }
        LIVE.fetch_add(1, Ordering::Relaxed);
        Secret { ptr, len, map_len, locked }
    }

    /// A copy of `bytes` in a secret (the caller zeroes its own copy).
    pub fn from_slice(bytes: &[u8]) -> Secret {
        let mut secret = Secret::zeroed(bytes.len());
        secret.expose_mut().copy_from_slice(bytes);
        secret
    }

    /// `len` bytes from the system's cryptographic random source.
    pub fn random(len: usize) -> Result<Secret, KeyError> {
        let mut secret = Secret::zeroed(len);
        aws_lc_rs::rand::fill(secret.expose_mut()).map_err(|_| KeyError::Crypto("random source failed"))?;
        Ok(secret)
    }

    /// The bytes. Copy them nowhere that is not a `Secret`.
    pub fn expose(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len lies in the live mapping (invariant).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn expose_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `expose`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the pages are locked in RAM (false when `mlock` was refused).
    pub fn is_locked(&self) -> bool {
        self.locked
    }

    /// Shortens the secret to `len` bytes, zeroing the bytes cut off.
    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            // SAFETY: ptr..ptr+self.len is in the live mapping, len < self.len.
            let tail = unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(len), self.len - len) };
            tail.zeroize();
            self.len = len;
        }
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        // SAFETY: the whole mapping is ours; zero all of it, not just
        // `len` (a truncated tail was zeroed already, but be sure).
        let all = unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.map_len) };
        all.zeroize();
        let addr = self.ptr.as_ptr().cast::<libc::c_void>();
        if self.locked {
            // SAFETY: the range is our locked mapping.
            unsafe { libc::munlock(addr, self.map_len) };
            LOCKED_BYTES.fetch_sub(self.map_len as u64, Ordering::Relaxed);
        }
        // SAFETY: unmapping our own mapping, never used again.
        unsafe { libc::munmap(addr, self.map_len) };
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Clone for Secret {
    /// A new locked, undumpable mapping with the same bytes.
    fn clone(&self) -> Secret {
        Secret::from_slice(self.expose())
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes, {})", self.len, if self.locked { "locked" } else { "not locked" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_zeroes_the_tail_and_clone_copies() {
        let mut s = Secret::from_slice(b"0123456789");
        let c = s.clone();
        s.truncate(4);
        assert_eq!(s.expose(), b"0123");
        // SAFETY: the mapping is still ours; look at what truncate left.
        let raw = unsafe { std::slice::from_raw_parts(s.ptr.as_ptr(), 10) };
        assert_eq!(&raw[4..], &[0u8; 6]);
        assert_eq!(c.expose(), b"0123456789");
        assert_ne!(c.ptr, s.ptr);
    }

    #[test]
    fn zero_length_and_multi_page_secrets_work() {
        let empty = Secret::zeroed(0);
        assert!(empty.is_empty());
        assert_eq!(empty.expose(), b"");
        let big = Secret::random(3 * page_size() + 1).expect("random");
        assert_eq!(big.len(), 3 * page_size() + 1);
        assert!(big.map_len >= big.len() && big.map_len.is_multiple_of(page_size()));
        assert!(big.expose().iter().any(|&b| b != 0));
    }
}
