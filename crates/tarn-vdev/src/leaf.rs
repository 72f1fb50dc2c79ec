//! A leaf vdev: one device, its health and its error counters.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tarn_dev::{DevError, Device};

use crate::{data_region_size, Result, VdevError, DATA_START};

/// A leaf is reported Faulted after this many consecutive failed operations
/// (any success resets the run).
const FAULT_AFTER_CONSECUTIVE_ERRORS: u64 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DevState {
    Online,
    Degraded,
    Faulted,
    Offline,
    Removed,
    Unavail,
}

impl DevState {
    /// Whether a child in this state can currently serve I/O.
    pub fn usable(self) -> bool {
        matches!(self, DevState::Online | DevState::Degraded)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LeafStatus {
    pub path: String,
    pub state: DevState,
    pub read_errors: u64,
    pub write_errors: u64,
    pub checksum_errors: u64,
}

pub struct LeafVdev {
    pub guid: u64,
    pub path: String,
    device: Option<Arc<dyn Device>>,
    read_errors: AtomicU64,
    write_errors: AtomicU64,
    checksum_errors: AtomicU64,
    consecutive_errors: AtomicU64,
}

impl LeafVdev {
    pub fn new(guid: u64, path: String, device: Option<Arc<dyn Device>>) -> LeafVdev {
        LeafVdev {
            guid,
            path,
            device,
            read_errors: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            checksum_errors: AtomicU64::new(0),
            consecutive_errors: AtomicU64::new(0),
        }
    }

    pub fn device(&self) -> Option<&Arc<dyn Device>> {
        self.device.as_ref()
    }

    pub fn state(&self) -> DevState {
        if self.device.is_none() {
            DevState::Unavail
        } else if self.consecutive_errors.load(Ordering::Relaxed) >= FAULT_AFTER_CONSECUTIVE_ERRORS {
            DevState::Faulted
        } else {
            DevState::Online
        }
    }

    pub fn read_errors(&self) -> u64 {
        self.read_errors.load(Ordering::Relaxed)
    }
    pub fn write_errors(&self) -> u64 {
        self.write_errors.load(Ordering::Relaxed)
    }
    pub fn checksum_errors(&self) -> u64 {
        self.checksum_errors.load(Ordering::Relaxed)
    }

    pub fn status(&self) -> LeafStatus {
        LeafStatus {
            path: self.path.clone(),
            state: self.state(),
            read_errors: self.read_errors(),
            write_errors: self.write_errors(),
            checksum_errors: self.checksum_errors(),
        }
    }

    pub fn clear_errors(&self) {
        for counter in [&self.read_errors, &self.write_errors, &self.checksum_errors, &self.consecutive_errors] {
            counter.store(0, Ordering::Relaxed);
        }
    }

    /// Data-region bytes of this leaf (0 when missing).
    pub fn data_size(&self) -> u64 {
        self.device.as_ref().map_or(0, |d| data_region_size(d.size()))
    }

    pub(crate) fn note_checksum_error(&self) {
        self.checksum_errors.fetch_add(1, Ordering::Relaxed);
    }

    fn dev(&self) -> Result<&Arc<dyn Device>> {
        self.device.as_ref().ok_or_else(|| {
            VdevError::Dev(DevError::Open { path: self.path.clone(), reason: "device is missing".into() })
        })
    }

    fn check(&self, offset: u64, len: usize) -> Result<u64> {
        let size = self.data_size();
        match offset.checked_add(len as u64) {
            Some(end) if end <= size => Ok(DATA_START + offset),
            _ => Err(VdevError::Invalid(format!(
                "{}: access [{offset}, +{len}) is past the data region ({size} bytes)",
                self.path
            ))),
        }
    }

    fn account<T>(&self, counter: &AtomicU64, result: Result<T>) -> Result<T> {
        match &result {
            Ok(_) => self.consecutive_errors.store(0, Ordering::Relaxed),
            Err(_) => {
                counter.fetch_add(1, Ordering::Relaxed);
                self.consecutive_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }

    /// Reads at `offset` of the data region; failures count as read errors.
    pub(crate) fn read(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let result = self.dev().and_then(|d| {
            let at = self.check(offset, buf.len())?;
            Ok(d.read_at(buf, at)?)
        });
        self.account(&self.read_errors, result)
    }

    pub(crate) fn read_vec(&self, len: usize, offset: u64) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.read(&mut buf, offset)?;
        Ok(buf)
    }

    /// Writes at `offset` of the data region; failures count as write errors.
    pub(crate) fn write(&self, buf: &[u8], offset: u64) -> Result<()> {
        let result = self.dev().and_then(|d| {
            let at = self.check(offset, buf.len())?;
            Ok(d.write_at(buf, at)?)
        });
        self.account(&self.write_errors, result)
    }

    pub(crate) fn flush(&self) -> Result<()> {
        let result = self.dev().and_then(|d| Ok(d.flush()?));
        self.account(&self.write_errors, result)
    }
}
