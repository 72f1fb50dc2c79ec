//! One cache device alone, on a memory device: the ring, its index, and
//! the rebuild from what the device holds.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tarn_dev::{Device, MemDevice};
use tarn_vdev::LeafVdev;

use super::device::{CacheDev, Lookup};
use super::format::{BlockId, Queued};
use super::rebuild::rebuild;

const POOL: u64 = 0x5151;

fn dev_on(mem: &Arc<MemDevice>, guid: u64) -> CacheDev {
    let leaf = Arc::new(LeafVdev::new(guid, "cache0".into(), Some(mem.clone() as Arc<dyn Device>)));
    CacheDev::new(leaf, POOL)
}

fn block(i: u64, len: usize) -> (BlockId, [u8; 32], Arc<Vec<u8>>) {
    let id = BlockId { vdev: (i % 2) as u32, offset: i * 4096, birth: 1 + i / 10 };
    let mut sum = [0u8; 32];
    sum[..8].copy_from_slice(&i.to_le_bytes());
    let data: Vec<u8> = (0..len).map(|j| (i as usize * 31 + j) as u8).collect();
    (id, sum, Arc::new(data))
}

/// Writes blocks `range` as chunks of `per_chunk`; returns what each
/// block should read back as.
fn feed(dev: &CacheDev, range: std::ops::Range<u64>, per_chunk: usize) -> HashMap<BlockId, Queued> {
    let all: Vec<_> = range.map(|i| (i, block(i, 4096 + (i as usize % 3) * 4096))).collect();
    let mut out = HashMap::new();
    for chunk in all.chunks(per_chunk) {
        let blocks: Vec<_> = chunk.iter().map(|(_, b)| b.clone()).collect();
        dev.write_chunk(&blocks).expect("chunk written");
        for (_, (id, sum, data)) in chunk {
            out.insert(*id, (*id, *sum, data.clone()));
        }
    }
    out
}

fn hit(dev: &CacheDev, id: &BlockId, sum: &[u8; 32], data: &[u8]) -> bool {
    match dev.get(id, sum, data.len() as u32) {
        Lookup::Hit(got) => {
            assert_eq!(got, data, "{id:?}: a hit returns the block's data");
            true
        }
        _ => false,
    }
}

/// Going round the ring several times: the index never names a record
/// that was overwritten (every indexed block reads back verified), and a
/// rebuild from the device finds exactly what the index held.
#[test]
fn the_ring_wraps_and_a_rebuild_finds_what_the_index_held() {
    let mem = MemDevice::new("c", 16 << 20);
    let dev = dev_on(&mem, 77);
    dev.format().unwrap();
    let blocks = feed(&dev, 0..4000, 37);
    assert!(dev.ring.lock().wrapped, "4000 blocks of 4-12 KiB go round a 10 MiB ring");
    let indexed: Vec<BlockId> = dev.index.read().keys().copied().collect();
    assert!(indexed.len() > 300, "{} indexed", indexed.len());
    for id in &indexed {
        let (_, sum, data) = &blocks[id];
        assert!(hit(&dev, id, sum, data), "indexed block {id:?} does not read back");
    }
    let fresh = dev_on(&mem, 77);
    let stop = AtomicBool::new(false);
    let r = rebuild(&fresh, u64::MAX, &stop);
    let rebuilt: Vec<BlockId> = fresh.index.read().keys().copied().collect();
    assert_eq!(r.blocks as usize, rebuilt.len());
    // The live index left out the stretch just ahead of the head (evicted
    // in advance, not yet overwritten), which the rebuild may restore; it
    // kept the tail of the chunk the head is passing through, whose
    // header is gone: the rebuild lacks at most that one chunk's blocks.
    let missing = indexed.iter().filter(|id| !fresh.contains(id)).count();
    assert!(missing <= 37, "{missing} indexed blocks not rebuilt");
    assert!(rebuilt.len() <= indexed.len() + indexed.len() / 8, "{} rebuilt, {} indexed", rebuilt.len(), indexed.len());
    for id in &rebuilt {
        let (_, sum, data) = &blocks[id];
        assert!(hit(&fresh, id, sum, data));
    }
    // The feed goes on after the newest chunk, and a second rebuild still
    // agrees with the index.
    let more = feed(&fresh, 4000..4100, 20);
    let again = dev_on(&mem, 77);
    rebuild(&again, u64::MAX, &stop);
    assert_eq!(again.index.read().len(), fresh.index.read().len());
    let (id, (_, sum, data)) = more.iter().next().unwrap();
    assert!(hit(&again, id, sum, data));
}

/// A rewind import: entries born after the imported txg are not restored.
#[test]
fn a_rebuild_drops_entries_born_after_the_imported_txg() {
    let mem = MemDevice::new("c", 16 << 20);
    let dev = dev_on(&mem, 5);
    dev.format().unwrap();
    let blocks = feed(&dev, 0..200, 16);
    let fresh = dev_on(&mem, 5);
    let r = rebuild(&fresh, 10, &AtomicBool::new(false));
    let births: Vec<u64> = fresh.index.read().keys().map(|b| b.birth).collect();
    assert!(births.iter().all(|&b| b <= 10));
    assert_eq!(r.blocks as usize, blocks.keys().filter(|b| b.birth <= 10).count());
    assert_eq!(r.too_young as usize, blocks.keys().filter(|b| b.birth > 10).count());
}

/// A device of another pool, another device's guid, garbage, or a torn
/// newest chunk: an empty cache, not an error.
#[test]
fn foreign_or_damaged_devices_rebuild_empty() {
    let stop = AtomicBool::new(false);
    let mem = MemDevice::new("c", 16 << 20);
    let dev = dev_on(&mem, 9);
    dev.format().unwrap();
    feed(&dev, 0..100, 10);
    assert_eq!(rebuild(&dev_on(&mem, 10), u64::MAX, &stop).blocks, 0, "another device guid");
    let leaf = Arc::new(LeafVdev::new(9, "c".into(), Some(mem.clone() as Arc<dyn Device>)));
    assert_eq!(rebuild(&CacheDev::new(leaf, POOL + 1), u64::MAX, &stop).blocks, 0, "another pool");
    let garbage = MemDevice::new("g", 16 << 20);
    let mut x = 7u64;
    let junk: Vec<u8> = (0..(1 << 20)).map(|_| {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) as u8
    }).collect();
    garbage.write_at(&junk, tarn_vdev::DATA_START).unwrap();
    assert_eq!(rebuild(&dev_on(&garbage, 9), u64::MAX, &stop).blocks, 0, "garbage");
    // Tear the newest chunk's header: nothing before it can be trusted
    // to be reached, the cache starts empty.
    let newest = dev.ring.lock().newest;
    mem.write_at(&[0u8; 64], tarn_vdev::DATA_START + newest + 96).unwrap();
    let r = rebuild(&dev_on(&mem, 9), u64::MAX, &stop);
    assert_eq!(r.blocks, 0, "torn newest chunk");
    // A torn chunk in the middle ends the walk there: the newer ones stay.
    let mem = MemDevice::new("c2", 16 << 20);
    let dev = dev_on(&mem, 9);
    dev.format().unwrap();
    feed(&dev, 0..50, 10);
    let middle = dev.ring.lock().newest;
    feed(&dev, 50..100, 10);
    mem.write_at(&[0xffu8; 64], tarn_vdev::DATA_START + middle + 70).unwrap();
    let r = rebuild(&dev_on(&mem, 9), u64::MAX, &stop);
    assert_eq!((r.chunks, r.blocks), (5, 50), "the five chunks after the torn one");
}

/// A record whose bytes rot on the device is a counted miss, and its
/// entry leaves the index; a reader's bp that does not match is a miss.
#[test]
fn rotten_records_and_other_blocks_are_misses() {
    let mem = MemDevice::new("c", 16 << 20);
    let dev = dev_on(&mem, 3);
    dev.format().unwrap();
    let blocks = feed(&dev, 0..20, 20);
    let (id, (_, sum, data)) = blocks.iter().next().unwrap();
    let loc = *dev.index.read().get(id).unwrap();
    let mut other = *sum;
    other[31] ^= 1;
    assert!(matches!(dev.get(id, &other, data.len() as u32), Lookup::Corrupt), "another bp checksum");
    assert!(!dev.contains(id));
    let (id, (_, sum, data)) = blocks.iter().find(|(b, _)| dev.contains(b)).unwrap();
    let loc2 = *dev.index.read().get(id).unwrap();
    mem.write_at(&[0xa5u8; 16], tarn_vdev::DATA_START + loc2.at + 300).unwrap();
    assert!(matches!(dev.get(id, sum, data.len() as u32), Lookup::Corrupt));
    assert!(!dev.contains(id), "the rotten entry is dropped");
    assert!(matches!(dev.get(id, sum, data.len() as u32), Lookup::NotHere));
    assert_ne!(loc.at, loc2.at);
}
