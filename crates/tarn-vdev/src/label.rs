//! Labels (pool config, four copies per device) and the uberblock ring.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::sync::Arc;

use tarn_dev::Device;

use crate::format::{
    decode_config, decode_uberblock, encode_config, encode_uberblock, FormatError, UberblockPhys, CONFIG_OFFSET,
    CONFIG_SIZE, LABEL_SIZE, RING_OFFSET, UB_PAYLOAD_MAX, UB_SLOTS, UB_SLOT_SIZE,
};
use crate::threads::par_map;
use crate::{Label, Result, VdevError};

/// Start of the data region on every leaf.
pub const DATA_START: u64 = 4 << 20;
pub const UBERBLOCK_PAYLOAD_MAX: usize = UB_PAYLOAD_MAX;
/// Smallest device that holds labels and a 1 MiB data region.
pub const MIN_DEVICE_SIZE: u64 = DATA_START + 2 * LABEL_SIZE + (1 << 20);

#[derive(Clone, Debug, PartialEq)]
pub struct Uberblock {
    pub txg: u64,
    pub timestamp_ns: u64,
    pub pool_guid: u64,
    pub payload: Vec<u8>,
}

/// Result of [`write_uberblock`]: how many devices took it, and which did not.
#[derive(Debug)]
pub struct UberblockWrite {
    pub written: usize,
    /// (device path, error) of every device that failed.
    pub failed: Vec<(String, VdevError)>,
}

fn label_end(size: u64) -> u64 {
    size / LABEL_SIZE * LABEL_SIZE
}

/// Bytes of the data region `[DATA_START, end - 512K)` (0 if too small).
pub fn data_region_size(dev_size: u64) -> u64 {
    label_end(dev_size).saturating_sub(2 * LABEL_SIZE).saturating_sub(DATA_START)
}

/// Offsets of the label copies that fit on a device of this size: all four
/// on any usable device; on a truncated one, the front copies still count.
fn label_offsets(size: u64) -> Vec<u64> {
    let end = label_end(size);
    let mut offsets = vec![];
    for (i, off) in [0, LABEL_SIZE].into_iter().enumerate() {
        if (i as u64 + 1) * LABEL_SIZE <= end {
            offsets.push(off);
        }
    }
    if end >= 4 * LABEL_SIZE {
        offsets.push(end - 2 * LABEL_SIZE);
        offsets.push(end - LABEL_SIZE);
    }
    offsets
}

fn check_usable(dev: &dyn Device) -> Result<()> {
    if dev.size() < MIN_DEVICE_SIZE {
        return Err(VdevError::Invalid(format!(
            "{}: device is {} bytes, a tarn device needs at least {MIN_DEVICE_SIZE}",
            dev.path(),
            dev.size()
        )));
    }
    Ok(())
}

/// Writes the config area of all four label copies: L0 and L2, flush, L1
/// and L3, flush (a crash leaves one complete generation). The uberblock
/// rings are not touched.
pub fn write_label(dev: &dyn Device, label: &Label) -> Result<()> {
    check_usable(dev)?;
    let json = serde_json::to_vec(label).map_err(|e| VdevError::Invalid(format!("label does not serialize: {e}")))?;
    let area = encode_config(&json, label.config.label_version()).map_err(|e| VdevError::Invalid(format!("{}: {e:?}", dev.path())))?;
    let offsets = label_offsets(dev.size());
    for pair in [[0usize, 2], [1, 3]] {
        for i in pair {
            if let Some(off) = offsets.get(i) {
                dev.write_at(&area, off + CONFIG_OFFSET)?;
            }
        }
        dev.flush()?;
    }
    Ok(())
}

/// Reads the first label copy that verifies. Errors say why none did: the
/// most specific problem found across the copies wins.
pub fn read_label(dev: &dyn Device) -> Result<Label> {
    let path = dev.path().to_string();
    let mut worst: Option<(u8, VdevError)> = None;
    let mut note = |rank: u8, err: VdevError| {
        if worst.as_ref().is_none_or(|(r, _)| rank > *r) {
            worst = Some((rank, err));
        }
    };
    let corrupt = |what: String| VdevError::Corrupt { path: path.clone(), what };
    let mut buf = vec![0u8; CONFIG_SIZE as usize];
    for (copy, off) in label_offsets(dev.size()).into_iter().enumerate() {
        if let Err(e) = dev.read_at(&mut buf, off + CONFIG_OFFSET) {
            note(1, e.into());
            continue;
        }
        match decode_config(&buf) {
            Ok(payload) => match serde_json::from_slice::<Label>(payload) {
                Ok(label) => return Ok(label),
                Err(e) => note(3, corrupt(format!("label copy {copy}: config is not a valid label: {e}"))),
            },
            Err(FormatError::NoMagic) => {}
            Err(FormatError::BadChecksum) => note(2, corrupt("label checksum mismatch".into())),
            Err(FormatError::UnsupportedVersion(v)) => note(4, corrupt(format!("unsupported label version {v}"))),
            Err(FormatError::Malformed(m)) => note(2, corrupt(format!("label copy {copy}: {m}"))),
        }
    }
    Err(worst.map_or(VdevError::NoLabel { path }, |(_, e)| e))
}

/// Zeroes all four label copies (config and uberblock rings), then flushes.
pub fn clear_labels(dev: &dyn Device) -> Result<()> {
    let zeros = vec![0u8; LABEL_SIZE as usize];
    for off in label_offsets(dev.size()) {
        dev.write_at(&zeros, off)?;
    }
    dev.flush()?;
    Ok(())
}

fn write_slot(dev: &dyn Device, slot: &[u8], txg: u64) -> Result<()> {
    check_usable(dev)?;
    let at = RING_OFFSET + (txg % UB_SLOTS) * UB_SLOT_SIZE;
    for off in label_offsets(dev.size()) {
        dev.write_at(slot, off + at)?;
    }
    dev.flush()?;
    Ok(())
}

/// Writes `ub` into slot `txg % 128` of all four label copies of every
/// device (devices in parallel), flushing each. Ok if at least one device
/// took it; the failures are listed in the result.
pub fn write_uberblock(devs: &[Arc<dyn Device>], ub: &Uberblock) -> Result<UberblockWrite> {
    let phys =
        UberblockPhys { txg: ub.txg, timestamp_ns: ub.timestamp_ns, pool_guid: ub.pool_guid, payload: ub.payload.clone() };
    let slot = encode_uberblock(&phys).map_err(|e| VdevError::Invalid(format!("uberblock: {e:?}")))?;
    let results = par_map(devs, |dev| write_slot(dev.as_ref(), &slot, ub.txg));
    let mut report = UberblockWrite { written: 0, failed: vec![] };
    for (dev, result) in devs.iter().zip(results) {
        match result {
            Ok(()) => report.written += 1,
            Err(e) => report.failed.push((dev.path().to_string(), e)),
        }
    }
    if report.written == 0 {
        return Err(VdevError::TooManyFailures {
            what: format!("uberblock txg {}", ub.txg),
            failed: devs.len(),
            children: devs.len(),
            tolerated: devs.len().saturating_sub(1),
        });
    }
    Ok(report)
}

/// Every valid slot of every label copy, one per txg, newest first. A slot
/// whose txg does not belong in its position is ignored. Unreadable copies
/// are skipped. Slots of any pool are returned: the caller filters by
/// `pool_guid` (a reused device may still hold an old pool's ring).
pub fn read_uberblocks(dev: &dyn Device) -> Vec<Uberblock> {
    let mut by_txg: BTreeMap<u64, Uberblock> = BTreeMap::new();
    let mut ring = vec![0u8; (UB_SLOTS * UB_SLOT_SIZE) as usize];
    for off in label_offsets(dev.size()) {
        if dev.read_at(&mut ring, off + RING_OFFSET).is_err() {
            continue;
        }
        for (index, slot) in ring.chunks_exact(UB_SLOT_SIZE as usize).enumerate() {
            let Ok(ub) = decode_uberblock(slot) else { continue };
            if ub.txg % UB_SLOTS != index as u64 {
                continue;
            }
            by_txg.entry(ub.txg).or_insert(Uberblock {
                txg: ub.txg,
                timestamp_ns: ub.timestamp_ns,
                pool_guid: ub.pool_guid,
                payload: ub.payload,
            });
        }
    }
    by_txg.into_values().rev().collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn offsets() {
        let size = 64 << 20;
        assert_eq!(label_offsets(size), vec![0, 256 << 10, size - (512 << 10), size - (256 << 10)]);
        // not a multiple of 256K: rounded down
        assert_eq!(label_offsets(size + 1000)[3], size - (256 << 10));
        assert_eq!(data_region_size(size), size - (512 << 10) - DATA_START);
        assert_eq!(data_region_size(1000), 0);
        assert_eq!(label_offsets(300 << 10), vec![0]);
        assert!(label_offsets(100).is_empty());
    }
}
