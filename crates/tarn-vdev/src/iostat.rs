//! I/O statistics of a leaf device (`zpool iostat`): operations, bytes
//! and time, counted where the I/O meets the device.
//!
//! Every read and write a leaf issues to its device adds one operation,
//! its length, the time spent inside the device call (*disk wait*) and the
//! time since the vdev layer accepted the block I/O it belongs to (*total
//! wait*: disk time plus the time the child I/O waited for a thread of the
//! vdev I/O pool, or behind the other columns and copies of the same
//! block). Label and uberblock writes go through the same counters (the
//! leaf hands out its device wrapped in a [`CountedDevice`]); the monitor's
//! health probes do not (they are not pool I/O, and would make an idle pool
//! look busy).
//!
//! Cost on the data path: two clock reads and four relaxed atomic adds per
//! operation; no lock. Top-level vdevs and the pool have no counters of
//! their own: their numbers are the sums of their leaves'.
//!
//! The start of a block I/O is carried to the leaf calls in a thread-local
//! ([`IoStart`]), set by the top-level vdev's entry points and passed on
//! to the vdev I/O threads by `par_map`.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tarn_dev::Device;

/// Counters of one direction (read or write).
#[derive(Default)]
struct Direction {
    ops: AtomicU64,
    bytes: AtomicU64,
    disk_ns: AtomicU64,
    total_ns: AtomicU64,
}

impl Direction {
    fn add(&self, bytes: u64, disk_ns: u64, total_ns: u64) {
        self.ops.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.disk_ns.fetch_add(disk_ns, Ordering::Relaxed);
        self.total_ns.fetch_add(total_ns, Ordering::Relaxed);
    }
}

/// The live counters of one leaf, from the moment it was opened.
pub struct IoStats {
    since: Instant,
    read: Direction,
    write: Direction,
}

impl Default for IoStats {
    fn default() -> Self {
        IoStats { since: Instant::now(), read: Direction::default(), write: Direction::default() }
    }
}

/// A copy of a leaf's counters (or a sum of several leaves'). All values
/// are totals since the counters started, `elapsed_ns` ago.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoCounters {
    pub elapsed_ns: u64,
    pub read_ops: u64,
    pub write_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Time spent inside the device calls.
    pub read_disk_ns: u64,
    pub write_disk_ns: u64,
    /// Time from the vdev layer accepting the block I/O to completion.
    pub read_total_ns: u64,
    pub write_total_ns: u64,
}

impl IoCounters {
    /// The sum of several leaves' counters; `elapsed_ns` is the longest.
    pub fn sum<'a>(items: impl IntoIterator<Item = &'a IoCounters>) -> IoCounters {
        let mut out = IoCounters::default();
        for c in items {
            out.elapsed_ns = out.elapsed_ns.max(c.elapsed_ns);
            out.read_ops += c.read_ops;
            out.write_ops += c.write_ops;
            out.read_bytes += c.read_bytes;
            out.write_bytes += c.write_bytes;
            out.read_disk_ns += c.read_disk_ns;
            out.write_disk_ns += c.write_disk_ns;
            out.read_total_ns += c.read_total_ns;
            out.write_total_ns += c.write_total_ns;
        }
        out
    }
}

fn nanos(from: Instant, to: Instant) -> u64 {
    u64::try_from(to.saturating_duration_since(from).as_nanos()).unwrap_or(u64::MAX)
}

impl IoStats {
    pub fn counters(&self) -> IoCounters {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IoCounters {
            elapsed_ns: nanos(self.since, Instant::now()),
            read_ops: get(&self.read.ops),
            write_ops: get(&self.write.ops),
            read_bytes: get(&self.read.bytes),
            write_bytes: get(&self.write.bytes),
            read_disk_ns: get(&self.read.disk_ns),
            write_disk_ns: get(&self.write.disk_ns),
            read_total_ns: get(&self.read.total_ns),
            write_total_ns: get(&self.write.total_ns),
        }
    }

    /// `dev.read_at`, counted.
    pub fn read(&self, dev: &dyn Device, buf: &mut [u8], offset: u64) -> tarn_dev::Result<()> {
        let started = Instant::now();
        let result = dev.read_at(buf, offset);
        let done = Instant::now();
        let issued = IoStart::current().unwrap_or(started).min(started);
        self.read.add(buf.len() as u64, nanos(started, done), nanos(issued, done));
        result
    }

    /// `dev.write_at`, counted.
    pub fn write(&self, dev: &dyn Device, buf: &[u8], offset: u64) -> tarn_dev::Result<()> {
        self.write_as(dev, buf, offset, false)
    }

    /// As [`IoStats::write`]; `durable`: through `write_durable_at`.
    pub fn write_as(&self, dev: &dyn Device, buf: &[u8], offset: u64, durable: bool) -> tarn_dev::Result<()> {
        let started = Instant::now();
        let result = if durable { dev.write_durable_at(buf, offset) } else { dev.write_at(buf, offset) };
        let done = Instant::now();
        let issued = IoStart::current().unwrap_or(started).min(started);
        self.write.add(buf.len() as u64, nanos(started, done), nanos(issued, done));
        result
    }

    /// `dev.write_vectored_at` (a gathered run), counted as one write.
    pub fn write_vectored(&self, dev: &dyn Device, bufs: &[&[u8]], offset: u64) -> tarn_dev::Result<()> {
        let started = Instant::now();
        let result = dev.write_vectored_at(bufs, offset);
        let done = Instant::now();
        let issued = IoStart::current().unwrap_or(started).min(started);
        self.write.add(bufs.iter().map(|b| b.len() as u64).sum(), nanos(started, done), nanos(issued, done));
        result
    }
}

thread_local! {
    static IO_START: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The instant the vdev layer accepted the block I/O the current thread
/// works for. Setting it returns a guard that restores the previous value.
pub(crate) struct IoStart {
    previous: Option<Instant>,
}

impl IoStart {
    /// Marks the start of a block I/O (a top-level vdev entry point).
    pub(crate) fn begin() -> IoStart {
        IoStart::enter(Some(Instant::now()))
    }

    /// Carries `start` over to another thread (a `par_map` helper).
    pub(crate) fn enter(start: Option<Instant>) -> IoStart {
        IoStart { previous: IO_START.with(|c| c.replace(start)) }
    }

    pub(crate) fn current() -> Option<Instant> {
        IO_START.with(Cell::get)
    }
}

impl Drop for IoStart {
    fn drop(&mut self) {
        IO_START.with(|c| c.set(self.previous));
    }
}

/// A leaf's device as handed to code outside the vdev (labels, uberblocks):
/// its reads and writes count in the leaf's statistics.
pub struct CountedDevice {
    inner: Arc<dyn Device>,
    stats: Arc<IoStats>,
}

impl CountedDevice {
    pub fn new(inner: Arc<dyn Device>, stats: Arc<IoStats>) -> CountedDevice {
        CountedDevice { inner, stats }
    }
}

impl Device for CountedDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> tarn_dev::Result<()> {
        self.stats.read(&*self.inner, buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> tarn_dev::Result<()> {
        self.stats.write(&*self.inner, buf, offset)
    }
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> tarn_dev::Result<()> {
        self.stats.write_as(&*self.inner, buf, offset, true)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> tarn_dev::Result<()> {
        self.stats.write_vectored(&*self.inner, bufs, offset)
    }
    fn flush(&self) -> tarn_dev::Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn trim(&self, offset: u64, len: u64) -> tarn_dev::Result<()> {
        self.inner.trim(offset, len)
    }
    fn path(&self) -> &str {
        self.inner.path()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn counts_ops_bytes_and_time() {
        let dev: Arc<dyn Device> = tarn_dev::MemDevice::new("m", 1 << 20);
        let stats = Arc::new(IoStats::default());
        let counted = CountedDevice::new(dev, stats.clone());
        counted.write_at(&[7u8; 4096], 0).unwrap();
        counted.write_at(&[7u8; 512], 8192).unwrap();
        let mut buf = [0u8; 1024];
        counted.read_at(&mut buf, 0).unwrap();
        // A failed call is an operation too.
        assert!(counted.read_at(&mut buf, 2 << 20).is_err());
        let c = stats.counters();
        assert_eq!((c.read_ops, c.write_ops, c.read_bytes, c.write_bytes), (2, 2, 2048, 4608));
        assert!(c.read_total_ns >= c.read_disk_ns && c.write_total_ns >= c.write_disk_ns);
        let sum = IoCounters::sum([&c, &c]);
        assert_eq!((sum.read_ops, sum.write_bytes, sum.elapsed_ns), (4, 9216, c.elapsed_ns));
    }

    #[test]
    fn total_wait_counts_from_the_block_start() {
        let dev = tarn_dev::MemDevice::new("m", 1 << 20);
        let stats = IoStats::default();
        {
            let _start = IoStart::begin();
            std::thread::sleep(std::time::Duration::from_millis(20));
            stats.write(&*dev, &[1u8; 512], 0).unwrap();
        }
        assert!(IoStart::current().is_none(), "the guard restores the previous start");
        let c = stats.counters();
        assert!(c.write_total_ns >= 20_000_000, "{c:?}");
        assert!(c.write_disk_ns < c.write_total_ns, "{c:?}");
    }
}
