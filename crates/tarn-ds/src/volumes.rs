//! Volumes as datasets (issue 13): a dataset whose record carries a
//! [`VolumeRecord`] is of type `volume`; its object set is laid out by
//! tarn-vol (the daemon passes `Volume::format` as the init callback).
//! `volsize` and `volblocksize` live in the record, so they read without
//! a key and travel with snapshots and clones (each snapshot keeps the
//! size it had).
//!
//! `volsize` is a multiple of `volblocksize`; `volblocksize` is fixed at
//! creation (a power of two from 512 to 1M, 16K by default). A shrink is
//! refused unless forced: it discards the data past the new end.

use serde::{Deserialize, Serialize};

use crate::pool::Pool;
use crate::size::{format_bytes, parse_size};
use crate::{DsError, Result};

/// A volume's geometry, in its dataset record.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct VolumeRecord {
    pub volsize: u64,
    pub volblocksize: u32,
}

/// `volblocksize` unless `-b` says otherwise.
pub const DEFAULT_VOLBLOCKSIZE: u32 = 16 << 10;
/// Largest `volsize` (tarn-vol's bound).
pub const MAX_VOLSIZE: u64 = 1 << 60;

/// Properties only volumes have (`tarn get all` lists them for volumes).
pub const VOLUME_PROPERTIES: &[&str] = &["volsize", "volblocksize"];

/// Checks `-b` / `volblocksize`.
pub fn parse_volblocksize(text: &str) -> Result<u32> {
    let bad = || DsError::BadValue(format!("bad volblocksize '{text}': a power of two from 512 to 1M"));
    let bytes = parse_size(text).ok_or_else(bad)?;
    if !bytes.is_power_of_two() || !(512..=1 << 20).contains(&bytes) {
        return Err(bad());
    }
    Ok(bytes as u32)
}

/// Checks `-V` / `volsize` against the block size.
pub fn parse_volsize(text: &str, volblocksize: u32) -> Result<u64> {
    let bytes = parse_size(text).ok_or_else(|| DsError::BadValue(format!("bad volsize '{text}': a size such as 100G")))?;
    if bytes == 0 {
        return Err(DsError::BadValue("volsize must be greater than zero".into()));
    }
    if bytes > MAX_VOLSIZE {
        return Err(DsError::BadValue(format!("volsize '{text}' is larger than {}", format_bytes(MAX_VOLSIZE))));
    }
    if !bytes.is_multiple_of(u64::from(volblocksize)) {
        return Err(DsError::BadValue(format!("volsize must be a multiple of volblocksize ({})", format_bytes(u64::from(volblocksize)))));
    }
    Ok(bytes)
}

impl Pool {
    /// The geometry of a volume (head, snapshot or clone); None for a
    /// file system or a name that does not exist.
    pub fn volume_of(&self, name: &str) -> Option<VolumeRecord> {
        let state = self.state.read();
        let record = if name.contains('@') { state.snapshots.get(name) } else { state.datasets.get(name) };
        record.and_then(|r| r.volume)
    }

    pub fn is_volume(&self, name: &str) -> bool {
        self.volume_of(name).is_some()
    }

    /// `tarn set volsize=…`: grows, or with `force` shrinks, a volume.
    /// Returns the new size; the caller resizes the open volume (a shrink
    /// frees the blocks past the end there, and again at every open).
    pub fn set_volsize(&self, name: &str, text: &str, force: bool) -> Result<u64> {
        let _change = self.change.lock();
        let mut record = self.record(name)?;
        let Some(mut volume) = record.volume else {
            return Err(DsError::BadValue(format!("'{name}' is not a volume: volsize applies to volumes only")));
        };
        let size = parse_volsize(text, volume.volblocksize)?;
        if size < volume.volsize && !force {
            return Err(DsError::BadValue(format!(
                "shrinking '{name}' from {} to {} discards the data past the new end (use -f)",
                format_bytes(volume.volsize),
                format_bytes(size)
            )));
        }
        // A reservation of the old size (a volume created without -s)
        // follows the size.
        if record.own("refreservation").and_then(|v| v.parse::<u64>().ok()) == Some(volume.volsize) {
            self.check_refreservation(name, size)?;
            record.props.insert("refreservation".into(), size.to_string());
        }
        volume.volsize = size;
        record.volume = Some(volume);
        let tx = self.obj.begin();
        self.store_record(&tx, name, &record)?;
        drop(tx);
        self.state.write().datasets.insert(name.to_string(), record);
        self.obj.sync()?;
        Ok(size)
    }

    /// The value of a volume property of `name` ("-" for a file system).
    pub(crate) fn volume_property(&self, name: &str, prop: &str, parsable: bool) -> String {
        let number = |bytes: u64| if parsable { bytes.to_string() } else { format_bytes(bytes) };
        match (self.volume_of(name), prop) {
            (Some(v), "volsize") => number(v.volsize),
            (Some(v), "volblocksize") => number(u64::from(v.volblocksize)),
            _ => "-".to_string(),
        }
    }
}
