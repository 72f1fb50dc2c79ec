//! Crash recording: reproduce the durable image at any point of a run.
//!
//! A [`CrashRecorder`] hands out [`CrashDevice`]s that behave like memory
//! devices (reads see every completed write) and log every write (with its
//! data) and every flush as an event with one global sequence number shared
//! by all devices of the recorder.
//!
//! [`CrashRecorder::image_at`]`(cut, mode)` is the state the devices would
//! hold if power failed just before event `cut` (events `0..cut` happened):
//! a write is durable only if a flush of its own device came after it and
//! before `cut`. Writes that were not yet flushed sat in the disk's volatile
//! cache; [`CutMode`] says what of them reaches the media. A durable write
//! (`write_durable_at`, the intent log's) is durable on its own: every
//! image cut after it has it whole, and it makes no other write durable.
//!
//! Trims are recorded too and are harsher than writes: a trim reaches the
//! media at once, flush or not (a device may discard the range before it
//! acknowledges), so every image cut after a trim has the range zeroed (in
//! whole 4 KiB pages, like [`MemDevice::trim`]). A pool that trims space a
//! crash or a rewind still needs fails its crash tests.
//!
//! Speed: each device keeps a copy-on-write [`MemDevice`] of its durable
//! state, updated at each flush with the writes made durable by it, and a
//! snapshot of it per flush. `image_at` finds the last flush before `cut`
//! by binary search, snapshots that (O(size / 1 MiB)) and applies only the
//! unflushed tail that the mode asks for.

use std::sync::Arc;

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{check_range, Device, MemDevice, Result};

/// Writes are torn at this granularity (a sector write is atomic).
const TEAR_UNIT: usize = 512;

/// What happens to the unflushed writes at the cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutMode {
    /// Every unflushed write is lost.
    DropUnflushed,
    /// Per device, the first part (a whole number of 512-byte units, chosen
    /// from `cut`) of the last unflushed write before the cut reaches the
    /// media; the other unflushed writes are lost.
    TearLastWrite,
    /// Per device, a seeded random subset of the unflushed writes reaches
    /// the media in order, each possibly torn: a volatile write cache that
    /// reorders.
    RandomSubset(u64),
}

enum Event {
    /// `durable`: a write that returned only once durable
    /// (`write_durable_at`): every image cut after it has it whole.
    Write { device: usize, offset: u64, data: Arc<[u8]>, durable: bool },
    Trim { device: usize, offset: u64, len: u64 },
    Flush,
}

struct DeviceLog {
    /// Durable state as of the last flush (updated in place, copy-on-write).
    durable: Arc<MemDevice>,
    /// (sequence number of the flush, durable state right after it).
    flushed: Vec<(u64, Arc<MemDevice>)>,
    /// Sequence numbers of this device's writes and trims, ascending.
    writes: Vec<u64>,
    /// Index into `writes` of the first write not yet covered by a flush.
    first_unflushed: usize,
}

#[derive(Default)]
struct Log {
    events: Vec<Event>,
    devices: Vec<DeviceLog>,
    flushes: Vec<u64>,
}

#[derive(Default)]
pub struct CrashRecorder {
    log: Mutex<Log>,
}

pub struct CrashDevice {
    recorder: Arc<CrashRecorder>,
    index: usize,
    live: Arc<MemDevice>,
}

impl CrashRecorder {
    pub fn new() -> Arc<CrashRecorder> {
        Arc::new(CrashRecorder::default())
    }

    /// A new recorded device. Images list devices in creation order.
    pub fn device(self: &Arc<Self>, name: &str, size: u64) -> Arc<CrashDevice> {
        let mut log = self.log.lock();
        let index = log.devices.len();
        log.devices.push(DeviceLog {
            durable: MemDevice::new(name, size),
            flushed: Vec::new(),
            writes: Vec::new(),
            first_unflushed: 0,
        });
        Arc::new(CrashDevice { recorder: self.clone(), index, live: MemDevice::new(name, size) })
    }

    /// Number of events so far; valid cuts are `0..=event_count()`.
    pub fn event_count(&self) -> u64 {
        self.log.lock().events.len() as u64
    }

    /// Sequence numbers of all flush events (of every device), ascending.
    pub fn flush_events(&self) -> Vec<u64> {
        self.log.lock().flushes.clone()
    }

    /// Every trim so far: (device index, offset, length), in order.
    pub fn trims(&self) -> Vec<(usize, u64, u64)> {
        self.log
            .lock()
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Trim { device, offset, len } => Some((*device, *offset, *len)),
                _ => None,
            })
            .collect()
    }

    /// The durable images if power were cut just before event `cut`, one
    /// per device in creation order. Each is an independent device.
    pub fn image_at(&self, cut: u64, mode: CutMode) -> Vec<Arc<MemDevice>> {
        let log = self.log.lock();
        let cut = cut.min(log.events.len() as u64);
        log.devices
            .iter()
            .enumerate()
            .map(|(index, dev)| {
                let last = dev.flushed.partition_point(|(seq, _)| *seq < cut);
                let (flush_seq, image) = match last.checked_sub(1).and_then(|i| dev.flushed.get(i)) {
                    Some((seq, snap)) => (Some(*seq), snap.snapshot()),
                    None => (None, MemDevice::new(dev.durable.path(), dev.durable.size())),
                };
                let from = flush_seq.map_or(0, |f| dev.writes.partition_point(|w| *w < f));
                let to = dev.writes.partition_point(|w| *w < cut);
                let unflushed = dev.writes.get(from..to).unwrap_or(&[]);
                apply_unflushed(&log.events, &image, unflushed, cut, index, mode);
                image
            })
            .collect()
    }
}

/// Applies the part of the unflushed writes (sequence numbers, ascending)
/// that `mode` lets through to `image`; trims among them always apply.
fn apply_unflushed(events: &[Event], image: &MemDevice, unflushed: &[u64], cut: u64, device: usize, mode: CutMode) {
    let last_write =
        unflushed.iter().rev().copied().find(|&s| matches!(events.get(s as usize), Some(Event::Write { durable: false, .. })));
    let mut rng = match mode {
        CutMode::RandomSubset(seed) => ChaCha8Rng::seed_from_u64(seed ^ cut.rotate_left(17) ^ ((device as u64) << 48)),
        _ => ChaCha8Rng::seed_from_u64(cut ^ ((device as u64) << 48)),
    };
    for &seq in unflushed {
        match events.get(seq as usize) {
            Some(Event::Trim { offset, len, .. }) => {
                let _ = image.trim(*offset, *len);
            }
            Some(Event::Write { offset, data, durable: true, .. }) => image.apply(data, *offset),
            Some(Event::Write { offset, data, .. }) => match mode {
                CutMode::DropUnflushed => {}
                CutMode::TearLastWrite => {
                    if Some(seq) == last_write {
                        let keep = torn_len(&mut rng, data.len());
                        image.apply(&data[..keep], *offset);
                    }
                }
                CutMode::RandomSubset(_) => {
                    if rng.gen_bool(0.5) {
                        let keep = if rng.gen_ratio(1, 4) { torn_len(&mut rng, data.len()) } else { data.len() };
                        image.apply(&data[..keep], *offset);
                    }
                }
            },
            _ => {}
        }
    }
}

/// A prefix length strictly shorter than `len`, a multiple of 512 bytes
/// (0 for writes of one unit or less: a sector write does not tear).
fn torn_len(rng: &mut ChaCha8Rng, len: usize) -> usize {
    let units = len.div_ceil(TEAR_UNIT);
    if units <= 1 {
        return 0;
    }
    rng.gen_range(1..units) * TEAR_UNIT
}

impl CrashDevice {
    /// The live contents (everything written, flushed or not).
    pub fn live(&self) -> &Arc<MemDevice> {
        &self.live
    }

    fn record_write(&self, buf: &[u8], offset: u64, durable: bool) -> Result<()> {
        check_range(self.live.path(), offset, buf.len() as u64, self.live.size())?;
        // The log lock orders the live write with its event.
        let mut log = self.recorder.log.lock();
        let seq = log.events.len() as u64;
        log.events.push(Event::Write { device: self.index, offset, data: Arc::from(buf), durable });
        if let Some(dev) = log.devices.get_mut(self.index) {
            dev.writes.push(seq);
        }
        self.live.apply(buf, offset);
        Ok(())
    }
}

impl Device for CrashDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.live.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.record_write(buf, offset, false)
    }

    /// Durable for every cut after it, whatever the mode; the device's
    /// other unflushed writes stay unflushed.
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.record_write(buf, offset, true)
    }

    fn flush(&self) -> Result<()> {
        let mut log = self.recorder.log.lock();
        let log = &mut *log;
        let seq = log.events.len() as u64;
        log.events.push(Event::Flush);
        log.flushes.push(seq);
        let Some(dev) = log.devices.get_mut(self.index) else { return Ok(()) };
        for &w in dev.writes.get(dev.first_unflushed..).unwrap_or(&[]) {
            match log.events.get(w as usize) {
                Some(Event::Write { offset, data, device, .. }) => {
                    debug_assert_eq!(*device, self.index);
                    dev.durable.apply(data, *offset);
                }
                Some(Event::Trim { offset, len, .. }) => {
                    let _ = dev.durable.trim(*offset, *len);
                }
                _ => {}
            }
        }
        dev.first_unflushed = dev.writes.len();
        dev.flushed.push((seq, dev.durable.snapshot()));
        Ok(())
    }

    fn size(&self) -> u64 {
        self.live.size()
    }

    /// Recorded, and applied to the live contents at once (whole 4 KiB
    /// pages read as zeros afterwards); see the module documentation for
    /// what images make of it.
    fn trim(&self, offset: u64, len: u64) -> Result<()> {
        check_range(self.live.path(), offset, len, self.live.size())?;
        let mut log = self.recorder.log.lock();
        let seq = log.events.len() as u64;
        log.events.push(Event::Trim { device: self.index, offset, len });
        if let Some(dev) = log.devices.get_mut(self.index) {
            dev.writes.push(seq);
        }
        self.live.trim(offset, len)
    }

    fn path(&self) -> &str {
        self.live.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(dev: &dyn Device, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0; len];
        dev.read_at(&mut buf, offset).unwrap();
        buf
    }

    #[test]
    fn flush_semantics_per_device() {
        let rec = CrashRecorder::new();
        let a = rec.device("a", 1 << 20);
        let b = rec.device("b", 1 << 20);
        a.write_at(&[1; 4096], 0).unwrap(); // 0
        b.write_at(&[2; 4096], 0).unwrap(); // 1
        a.flush().unwrap(); // 2: makes a's write durable, not b's
        b.write_at(&[3; 4096], 4096).unwrap(); // 3
        a.write_at(&[4; 4096], 0).unwrap(); // 4
        b.flush().unwrap(); // 5
        assert_eq!(rec.event_count(), 6);
        assert_eq!(rec.flush_events(), vec![2, 5]);
        assert_eq!(read(&*a, 0, 4096), vec![4; 4096], "live view");

        let img = rec.image_at(2, CutMode::DropUnflushed);
        assert_eq!(img.len(), 2);
        assert_eq!(read(&*img[0], 0, 4096), vec![0; 4096]);
        let img = rec.image_at(3, CutMode::DropUnflushed);
        assert_eq!(read(&*img[0], 0, 4096), vec![1; 4096]);
        assert_eq!(read(&*img[1], 0, 4096), vec![0; 4096], "a's flush does not cover b");
        let img = rec.image_at(6, CutMode::DropUnflushed);
        assert_eq!(read(&*img[0], 0, 4096), vec![1; 4096], "write 4 never flushed");
        assert_eq!(read(&*img[1], 0, 8192), [vec![2; 4096], vec![3; 4096]].concat());
        // images are independent of each other and of the recorder
        img[0].write_at(&[9; 10], 0).unwrap();
        let again = rec.image_at(6, CutMode::DropUnflushed);
        assert_eq!(read(&*again[0], 0, 10), vec![1; 10]);
        assert_eq!(rec.image_at(0, CutMode::TearLastWrite)[0].resident_bytes(), 0);
    }

    #[test]
    fn a_durable_write_is_durable_alone() {
        let rec = CrashRecorder::new();
        let a = rec.device("a", 1 << 20);
        a.write_at(&[1; 4096], 0).unwrap(); // 0: never flushed
        a.write_durable_at(&[2; 8192], 8192).unwrap(); // 1
        a.write_at(&[3; 8192], 8192).unwrap(); // 2: over it, never flushed
        for mode in [CutMode::DropUnflushed, CutMode::TearLastWrite] {
            let img = rec.image_at(1, mode);
            assert_eq!(read(&*img[0], 8192, 8192), vec![0; 8192], "{mode:?}: cut before it");
            let img = rec.image_at(2, mode);
            if mode == CutMode::DropUnflushed {
                assert_eq!(read(&*img[0], 0, 4096), vec![0; 4096], "it made nothing else durable");
            }
            assert_eq!(read(&*img[0], 8192, 8192), vec![2; 8192], "{mode:?}: whole, never torn");
        }
        // Torn mode tears the last ordinary write, not the durable one.
        let img = rec.image_at(3, CutMode::TearLastWrite);
        let bytes = read(&*img[0], 8192, 8192);
        let threes = bytes.iter().take_while(|&&b| b == 3).count();
        assert!(threes > 0 && threes < 8192, "torn at {threes}");
        assert!(bytes[threes..].iter().all(|&b| b == 2));
        // A random subset may drop ordinary writes, never the durable one.
        for seed in 0..16 {
            let img = rec.image_at(2, CutMode::RandomSubset(seed));
            assert_eq!(read(&*img[0], 8192, 8192), vec![2; 8192], "seed {seed}");
        }
    }

    #[test]
    fn tear_last_write_applies_a_prefix() {
        let rec = CrashRecorder::new();
        let a = rec.device("a", 1 << 20);
        a.write_at(&[1; 8192], 0).unwrap();
        a.flush().unwrap();
        a.write_at(&[7; 4096], 0).unwrap(); // 2: dropped (not the last)
        a.write_at(&[5; 8192], 0).unwrap(); // 3: torn
        let mut seen = std::collections::BTreeSet::new();
        let img = rec.image_at(4, CutMode::TearLastWrite);
        let bytes = read(&*img[0], 0, 8192);
        let fives = bytes.iter().take_while(|&&b| b == 5).count();
        assert!(fives > 0 && fives < 8192 && fives % 512 == 0, "torn at {fives}");
        assert!(bytes[fives..].iter().all(|&b| b == 1));
        seen.insert(fives);
        // deterministic for the same cut
        assert_eq!(read(&*rec.image_at(4, CutMode::TearLastWrite)[0], 0, 8192), bytes);
        // Cut 3: write 2 is the last; drop-unflushed keeps only flushed data.
        let img = rec.image_at(3, CutMode::DropUnflushed);
        assert_eq!(read(&*img[0], 0, 8192), vec![1; 8192]);
    }

    #[test]
    fn trims_are_recorded_and_reach_every_later_image() {
        let rec = CrashRecorder::new();
        let a = rec.device("a", 1 << 20);
        a.write_at(&[3; 16384], 0).unwrap(); // 0
        a.flush().unwrap(); // 1
        a.trim(4096, 8192).unwrap(); // 2: not flushed, applies anyway
        a.write_at(&[4; 4096], 8192).unwrap(); // 3: after the trim
        assert_eq!(rec.trims(), vec![(0, 4096, 8192)]);
        assert_eq!(read(&*a, 0, 16384), [vec![3; 4096], vec![0; 4096], vec![4; 4096], vec![3; 4096]].concat());
        let img = rec.image_at(2, CutMode::DropUnflushed);
        assert_eq!(read(&*img[0], 0, 16384), vec![3; 16384], "cut before the trim");
        for mode in [CutMode::DropUnflushed, CutMode::TearLastWrite, CutMode::RandomSubset(9)] {
            let img = rec.image_at(3, mode);
            assert_eq!(read(&*img[0], 4096, 8192), vec![0; 8192], "{mode:?}: trim without a flush");
        }
        a.flush().unwrap(); // 4
        let img = rec.image_at(5, CutMode::DropUnflushed);
        assert_eq!(read(&*img[0], 0, 16384), [vec![3; 4096], vec![0; 4096], vec![4; 4096], vec![3; 4096]].concat(), "write after the trim wins");
        assert!(a.trim(1 << 20, 1).is_err());
    }

    #[test]
    fn random_subset_is_seeded_and_only_unflushed_writes() {
        let rec = CrashRecorder::new();
        let a = rec.device("a", 1 << 20);
        for i in 0..64u64 {
            a.write_at(&[i as u8 + 1; 4096], i * 4096).unwrap();
        }
        let n = rec.event_count();
        let x = read(&*rec.image_at(n, CutMode::RandomSubset(1))[0], 0, 64 * 4096);
        let y = read(&*rec.image_at(n, CutMode::RandomSubset(1))[0], 0, 64 * 4096);
        assert_eq!(x, y);
        let kept = (0..64).filter(|i| x[i * 4096] != 0).count();
        assert!(kept > 5 && kept < 59, "kept {kept}");
        for (i, page) in x.chunks(4096).enumerate() {
            assert!(page.iter().all(|&b| b == 0 || b == i as u8 + 1));
        }
    }

    #[test]
    fn image_at_speed() {
        // 32 MiB written in 64 KiB writes, a flush every 16 writes.
        let rec = CrashRecorder::new();
        let devs: Vec<_> = (0..4).map(|i| rec.device(&format!("d{i}"), 64 << 20)).collect();
        let data = vec![0xabu8; 64 << 10];
        for i in 0..512u64 {
            let d = &devs[(i % 4) as usize];
            d.write_at(&data, (i * 7919 % 900) * (64 << 10)).unwrap();
            if i % 16 == 15 {
                d.flush().unwrap();
            }
        }
        let n = rec.event_count();
        let t = std::time::Instant::now();
        let cuts = 1000u64;
        for k in 0..cuts {
            let mode = match k % 3 {
                0 => CutMode::DropUnflushed,
                1 => CutMode::TearLastWrite,
                _ => CutMode::RandomSubset(k),
            };
            let img = rec.image_at(k * n / cuts, mode);
            assert_eq!(img.len(), 4);
        }
        let per = t.elapsed() / cuts as u32;
        eprintln!("image_at: {per:?} per cut (4 devices, 32 MiB written, {n} events)");
        assert!(per < std::time::Duration::from_millis(20));
    }
}
