//! In-memory device: sparse, copy-on-write pages, cheap snapshots.
//!
//! Storage is a two-level map: chunks of [`CHUNK_PAGES`] pages, each page an
//! `Arc<[u8]>` of [`PAGE`] bytes. A page or chunk that was never written is
//! absent and reads as zeros. [`MemDevice::snapshot`] clones only the outer
//! map (one `Arc` per chunk, i.e. per MiB), so it costs O(size / 1 MiB); the
//! first later write to a shared chunk or page copies just that chunk's
//! pointer table (4 KiB) and that page.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::{check_range, Device, Result};

/// Page size in bytes.
pub const PAGE: usize = 4096;
/// Pages per chunk (a chunk covers 1 MiB).
const CHUNK_PAGES: usize = 256;
const CHUNK_BYTES: u64 = (PAGE * CHUNK_PAGES) as u64;

type Page = Arc<[u8]>;
type Chunk = Arc<Vec<Option<Page>>>;

pub struct MemDevice {
    name: String,
    size: u64,
    chunks: RwLock<BTreeMap<u64, Chunk>>,
}

impl MemDevice {
    pub fn new(name: &str, size: u64) -> Arc<MemDevice> {
        Arc::new(MemDevice { name: name.to_string(), size, chunks: RwLock::new(BTreeMap::new()) })
    }

    /// Writes this device's contents into `dst` (the MiB chunks that are
    /// not all zeros; `dst` is taken to start zeroed) and flushes it: an
    /// image moved onto another kind of device (a crash recorder's).
    pub fn copy_to(&self, dst: &dyn Device) -> Result<()> {
        let mut buf = vec![0u8; 1 << 20];
        let mut off = 0;
        while off < self.size {
            let n = (self.size - off).min(buf.len() as u64) as usize;
            self.read_at(&mut buf[..n], off)?;
            if buf[..n].iter().any(|&b| b != 0) {
                dst.write_at(&buf[..n], off)?;
            }
            off += n as u64;
        }
        dst.flush()
    }

    /// An independent copy of the current contents. Cheap: shares pages
    /// until either side writes them.
    pub fn snapshot(&self) -> Arc<MemDevice> {
        let chunks = self.chunks.read().clone();
        Arc::new(MemDevice { name: self.name.clone(), size: self.size, chunks: RwLock::new(chunks) })
    }

    /// Bytes held in memory (written pages × page size).
    pub fn resident_bytes(&self) -> u64 {
        let chunks = self.chunks.read();
        let pages: usize = chunks.values().map(|c| c.iter().filter(|p| p.is_some()).count()).sum();
        (pages * PAGE) as u64
    }

    fn write_locked(chunks: &mut BTreeMap<u64, Chunk>, buf: &[u8], offset: u64) {
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let chunk_index = pos / CHUNK_BYTES;
            let page_index = ((pos % CHUNK_BYTES) / PAGE as u64) as usize;
            let in_page = (pos % PAGE as u64) as usize;
            let n = (PAGE - in_page).min(buf.len() - done);
            let src = &buf[done..done + n];
            let chunk = chunks.entry(chunk_index).or_insert_with(|| Arc::new(vec![None; CHUNK_PAGES]));
            let slot = &mut Arc::make_mut(chunk)[page_index];
            if n == PAGE {
                *slot = Some(Arc::from(src));
            } else {
                let page = slot.get_or_insert_with(|| Arc::from(vec![0u8; PAGE]));
                if Arc::get_mut(page).is_none() {
                    *page = Arc::from(&page[..]);
                }
                let bytes = Arc::get_mut(page).expect("page was just made unique");
                bytes[in_page..in_page + n].copy_from_slice(src);
            }
            done += n;
        }
    }

    /// Write without bounds or fault checks; used by the crash recorder to
    /// build images (callers have already checked the range).
    pub(crate) fn apply(&self, buf: &[u8], offset: u64) {
        Self::write_locked(&mut self.chunks.write(), buf, offset);
    }
}

impl Device for MemDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_range(&self.name, offset, buf.len() as u64, self.size)?;
        let chunks = self.chunks.read();
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let page_index = ((pos % CHUNK_BYTES) / PAGE as u64) as usize;
            let in_page = (pos % PAGE as u64) as usize;
            let n = (PAGE - in_page).min(buf.len() - done);
            let dst = &mut buf[done..done + n];
            match chunks.get(&(pos / CHUNK_BYTES)).and_then(|c| c[page_index].as_ref()) {
                Some(page) => dst.copy_from_slice(&page[in_page..in_page + n]),
                None => dst.fill(0),
            }
            done += n;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        check_range(&self.name, offset, buf.len() as u64, self.size)?;
        Self::write_locked(&mut self.chunks.write(), buf, offset);
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn size(&self) -> u64 {
        self.size
    }

    /// Drops whole pages inside the range (they read as zeros afterwards);
    /// partial pages at the edges are left as they are.
    fn trim(&self, offset: u64, len: u64) -> Result<()> {
        check_range(&self.name, offset, len, self.size)?;
        let first = offset.div_ceil(PAGE as u64);
        let end = (offset + len) / PAGE as u64;
        let mut chunks = self.chunks.write();
        for page in first..end {
            let chunk_index = page / CHUNK_PAGES as u64;
            if let Some(chunk) = chunks.get_mut(&chunk_index) {
                let slot = (page % CHUNK_PAGES as u64) as usize;
                if chunk[slot].is_some() {
                    Arc::make_mut(chunk)[slot] = None;
                }
            }
        }
        Ok(())
    }

    fn path(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwritten_reads_zero_and_roundtrip() {
        let dev = MemDevice::new("m", 10 << 20);
        let mut buf = vec![1u8; 10000];
        dev.read_at(&mut buf, 12345).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        let data: Vec<u8> = (0..10000u32).map(|i| (i * 7) as u8).collect();
        dev.write_at(&data, 4000).unwrap();
        dev.read_at(&mut buf, 4000).unwrap();
        assert_eq!(buf, data);
        assert_eq!(dev.resident_bytes(), 4 * PAGE as u64);
    }

    #[test]
    fn bounds() {
        let dev = MemDevice::new("m", 8192);
        assert!(dev.write_at(&[0; 1], 8192).is_err());
        assert!(dev.read_at(&mut [0; 2], 8191).is_err());
        assert!(dev.read_at(&mut [0; 1], u64::MAX).is_err());
        assert!(dev.trim(4096, 4097).is_err());
        dev.write_at(&[1; 8192], 0).unwrap();
        dev.read_at(&mut [0; 0], 8192).unwrap();
    }

    #[test]
    fn snapshot_is_independent() {
        let dev = MemDevice::new("m", 4 << 20);
        dev.write_at(&[1; 5000], 100).unwrap();
        let snap = dev.snapshot();
        dev.write_at(&[2; 5000], 100).unwrap();
        snap.write_at(&[3; 10], 2 << 20).unwrap();
        let mut a = [0u8; 5000];
        snap.read_at(&mut a, 100).unwrap();
        assert!(a.iter().all(|&b| b == 1));
        dev.read_at(&mut a, 100).unwrap();
        assert!(a.iter().all(|&b| b == 2));
        let mut b = [9u8; 10];
        dev.read_at(&mut b, 2 << 20).unwrap();
        assert_eq!(b, [0; 10]);
    }

    #[test]
    fn trim_drops_whole_pages_only() {
        let dev = MemDevice::new("m", 1 << 20);
        dev.write_at(&[5; 3 * PAGE], 0).unwrap();
        dev.trim(100, 2 * PAGE as u64).unwrap();
        let mut buf = vec![0u8; 3 * PAGE];
        dev.read_at(&mut buf, 0).unwrap();
        assert!(buf[..PAGE].iter().all(|&b| b == 5));
        assert!(buf[PAGE..2 * PAGE].iter().all(|&b| b == 0));
        assert!(buf[2 * PAGE..].iter().all(|&b| b == 5));
    }
}
