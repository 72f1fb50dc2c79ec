//! Fault-injecting wrapper around any device.
//!
//! Every control is `&self` and atomic, so a test can flip faults while I/O
//! is in flight. Faults apply to I/O through the wrapper; `corrupt` and
//! `zero` act directly on the inner device's bytes (bit rot, a lost write).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{check_range, DevError, Device, Result};

/// `fail_after` countdown value meaning "not armed".
const DISARMED: u64 = u64::MAX;

pub struct FaultDevice {
    inner: Arc<dyn Device>,
    fail_reads: AtomicBool,
    fail_writes: AtomicBool,
    gone: AtomicBool,
    ops_until_failure: AtomicU64,
    read_latency_ns: AtomicU64,
    reads: AtomicU64,
    writes: AtomicU64,
    flushes: AtomicU64,
}

impl FaultDevice {
    pub fn new(inner: Arc<dyn Device>) -> Arc<FaultDevice> {
        Arc::new(FaultDevice {
            inner,
            fail_reads: AtomicBool::new(false),
            fail_writes: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            ops_until_failure: AtomicU64::new(DISARMED),
            read_latency_ns: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
        })
    }

    pub fn inner(&self) -> &Arc<dyn Device> {
        &self.inner
    }
    pub fn set_fail_reads(&self, on: bool) {
        self.fail_reads.store(on, Ordering::SeqCst);
    }
    pub fn set_fail_writes(&self, on: bool) {
        self.fail_writes.store(on, Ordering::SeqCst);
    }
    /// Like a pulled disk: every operation, flush and trim included, fails.
    pub fn set_gone(&self, on: bool) {
        self.gone.store(on, Ordering::SeqCst);
    }
    /// The next `n_ops` operations succeed, every one after fails (until
    /// [`FaultDevice::disarm_fail_after`]).
    pub fn fail_after(&self, n_ops: u64) {
        self.ops_until_failure.store(n_ops.min(DISARMED - 1), Ordering::SeqCst);
    }
    pub fn disarm_fail_after(&self) {
        self.ops_until_failure.store(DISARMED, Ordering::SeqCst);
    }
    pub fn set_read_latency(&self, latency: Duration) {
        self.read_latency_ns.store(latency.as_nanos().min(u64::MAX as u128) as u64, Ordering::SeqCst);
    }
    /// Reads attempted through this wrapper (failed ones included).
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }
    pub fn flushes(&self) -> u64 {
        self.flushes.load(Ordering::SeqCst)
    }

    /// Flips random bits in `[offset, offset + len)` of the inner device,
    /// deterministically from `seed`. At least one bit changes when len > 0.
    pub fn corrupt(&self, offset: u64, len: u64, seed: u64) -> Result<()> {
        check_range(self.inner.path(), offset, len, self.inner.size())?;
        let mut buf = vec![0u8; len as usize];
        self.inner.read_at(&mut buf, offset)?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut flipped = false;
        for byte in buf.iter_mut() {
            if rng.gen_ratio(1, 8) {
                *byte ^= 1 << rng.gen_range(0..8);
                flipped = true;
            }
        }
        if !flipped && !buf.is_empty() {
            let i = rng.gen_range(0..buf.len());
            buf[i] ^= 1 << rng.gen_range(0..8);
        }
        self.inner.write_at(&buf, offset)
    }

    /// Overwrites `[offset, offset + len)` of the inner device with zeros.
    pub fn zero(&self, offset: u64, len: u64) -> Result<()> {
        check_range(self.inner.path(), offset, len, self.inner.size())?;
        self.inner.write_at(&vec![0u8; len as usize], offset)
    }

    /// Decides whether this operation fails; counts down `fail_after`.
    fn injected(&self, op: &'static str, flag: Option<&AtomicBool>) -> Result<()> {
        let fail = |op| Err(DevError::Injected { path: self.inner.path().to_string(), op });
        if self.gone.load(Ordering::SeqCst) {
            return Err(DevError::Gone { path: self.inner.path().to_string() });
        }
        let countdown = self.ops_until_failure.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
            if left == DISARMED || left == 0 {
                None
            } else {
                Some(left - 1)
            }
        });
        if countdown == Err(0) {
            return fail(op);
        }
        if flag.is_some_and(|f| f.load(Ordering::SeqCst)) {
            return fail(op);
        }
        Ok(())
    }
}

impl Device for FaultDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let latency = self.read_latency_ns.load(Ordering::SeqCst);
        if latency > 0 {
            std::thread::sleep(Duration::from_nanos(latency));
        }
        self.injected("read", Some(&self.fail_reads))?;
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.injected("write", Some(&self.fail_writes))?;
        self.inner.write_at(buf, offset)
    }

    fn write_durable_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.flushes.fetch_add(1, Ordering::SeqCst);
        self.injected("write", Some(&self.fail_writes))?;
        self.inner.write_durable_at(buf, offset)
    }

    fn flush(&self) -> Result<()> {
        self.flushes.fetch_add(1, Ordering::SeqCst);
        self.injected("flush", None)?;
        self.inner.flush()
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn trim(&self, offset: u64, len: u64) -> Result<()> {
        self.injected("trim", Some(&self.fail_writes))?;
        self.inner.trim(offset, len)
    }

    fn path(&self) -> &str {
        self.inner.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDevice;

    fn dev() -> (Arc<MemDevice>, Arc<FaultDevice>) {
        let mem = MemDevice::new("m", 1 << 20);
        let fault = FaultDevice::new(mem.clone());
        (mem, fault)
    }

    #[test]
    fn read_write_flags() {
        let (_, f) = dev();
        f.write_at(&[1; 10], 0).unwrap();
        f.set_fail_reads(true);
        assert!(matches!(f.read_at(&mut [0; 10], 0), Err(DevError::Injected { op: "read", .. })));
        f.write_at(&[2; 10], 0).unwrap();
        f.set_fail_reads(false);
        f.set_fail_writes(true);
        assert!(f.write_at(&[3; 10], 0).is_err());
        let mut buf = [0; 10];
        f.read_at(&mut buf, 0).unwrap();
        assert_eq!(buf, [2; 10]);
        f.flush().unwrap();
        assert_eq!((f.reads(), f.writes()), (2, 3));
    }

    #[test]
    fn gone_fails_everything() {
        let (_, f) = dev();
        f.set_gone(true);
        assert!(f.read_at(&mut [0; 1], 0).is_err());
        assert!(f.write_at(&[0; 1], 0).is_err());
        assert!(f.flush().is_err());
        assert!(f.trim(0, 4096).is_err());
        f.set_gone(false);
        f.flush().unwrap();
    }

    #[test]
    fn fail_after_countdown() {
        let (_, f) = dev();
        f.fail_after(3);
        for _ in 0..3 {
            f.write_at(&[0; 1], 0).unwrap();
        }
        assert!(f.read_at(&mut [0; 1], 0).is_err());
        assert!(f.flush().is_err());
        f.disarm_fail_after();
        f.flush().unwrap();
    }

    #[test]
    fn corrupt_is_seeded_and_changes_bytes() {
        let (mem, f) = dev();
        let (mem2, f2) = dev();
        f.corrupt(100, 512, 42).unwrap();
        f2.corrupt(100, 512, 42).unwrap();
        let mut a = vec![0; 512];
        let mut b = vec![0; 512];
        mem.read_at(&mut a, 100).unwrap();
        mem2.read_at(&mut b, 100).unwrap();
        assert_eq!(a, b);
        assert!(a.iter().any(|&x| x != 0));
        f.zero(0, 4096).unwrap();
        mem.read_at(&mut a, 100).unwrap();
        assert!(a.iter().all(|&x| x == 0));
        assert!(f.corrupt(1 << 20, 1, 0).is_err());
        // one byte: still changes
        f.corrupt(7, 1, 3).unwrap();
        let mut one = [0u8; 1];
        mem.read_at(&mut one, 7).unwrap();
        assert_ne!(one[0], 0);
    }

    #[test]
    fn latency() {
        let (_, f) = dev();
        f.set_read_latency(Duration::from_millis(20));
        let t = std::time::Instant::now();
        f.read_at(&mut [0; 1], 0).unwrap();
        assert!(t.elapsed() >= Duration::from_millis(20));
    }
}
