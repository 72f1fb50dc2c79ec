//! Finding pools to import: open every candidate device, read its label,
//! group by pool guid. A device that cannot be opened, is in use, or holds
//! no valid label (empty, zeroed, garbage, truncated) is skipped.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use tarn_dev::Device;
use tarn_vdev::{PoolConfig, PoolState};

pub struct Found {
    pub path: String,
    pub leaf_guid: u64,
    pub device: Arc<dyn Device>,
}

pub struct Candidate {
    pub config: PoolConfig,
    pub devices: Vec<Found>,
}

/// Device paths to try: regular files and block devices directly inside
/// each directory (not recursive), then the extra paths.
pub fn candidate_paths(dirs: &[String], extra: &[String]) -> Vec<String> {
    use std::os::unix::fs::FileTypeExt;
    let mut paths = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        let mut names: Vec<_> = entries.flatten().collect();
        names.sort_by_key(|e| e.file_name());
        for entry in names {
            let Ok(meta) = std::fs::metadata(entry.path()) else { continue };
            if meta.is_file() || meta.file_type().is_block_device() {
                paths.push(entry.path().to_string_lossy().into_owned());
            }
        }
    }
    for path in extra {
        if Path::new(path).exists() && !paths.contains(path) {
            paths.push(path.clone());
        }
    }
    paths
}

/// Open a device without creating it.
pub fn open_device(path: &str) -> Result<Arc<dyn Device>, tarn_dev::DevError> {
    let device: Arc<dyn Device> = tarn_dev::FileDevice::open(Path::new(path), None)?;
    Ok(device)
}

/// Smallest device a pool takes, as zpool's: below it the labels, the
/// uberblock rings and the slop leave no room worth having.
pub const MIN_DEVICE_BYTES: u64 = 64 << 20;

/// Opens a device that is to join a pool (create, add, attach, replace):
/// a full path to a regular file or block device of at least
/// [`MIN_DEVICE_BYTES`] that, unless `force`, belongs to no pool that is
/// not destroyed.
pub fn open_new_device(path: &str, force: bool) -> Result<Arc<dyn Device>, String> {
    use std::os::unix::fs::FileTypeExt;
    if !path.starts_with('/') {
        return Err(format!("cannot open '{path}': must be a full path"));
    }
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot open '{path}': {e}"))?;
    if !(meta.is_file() || meta.file_type().is_block_device()) {
        return Err(format!("'{path}' is not a regular file or block device"));
    }
    let device = open_device(path).map_err(|e| format!("cannot use '{path}': {e}"))?;
    if device.size() < MIN_DEVICE_BYTES {
        return Err(format!(
            "'{path}' is smaller than the minimum device size ({} < 64M)",
            tarn_ds::size::format_bytes(device.size())
        ));
    }
    if let Ok(label) = tarn_vdev::read_label(&*device) {
        if label.config.state != PoolState::Destroyed && !force {
            let state = match label.config.state {
                PoolState::Exported => "exported",
                _ => "potentially active",
            };
            return Err(format!("'{path}' is part of {state} pool '{}' (use -f to override)", label.config.name));
        }
    }
    Ok(device)
}

pub fn scan(paths: &[String]) -> BTreeMap<u64, Candidate> {
    let mut pools: BTreeMap<u64, Candidate> = BTreeMap::new();
    for path in paths {
        let Ok(device) = open_device(path) else { continue };
        let Ok(label) = tarn_vdev::read_label(&*device) else { continue };
        if label.config.state == PoolState::Destroyed {
            continue;
        }
        let found = Found { path: path.clone(), leaf_guid: label.leaf_guid, device };
        let guid = label.config.pool_guid;
        match pools.get_mut(&guid) {
            Some(candidate) => {
                if !candidate.devices.iter().any(|d| d.leaf_guid == found.leaf_guid) {
                    candidate.devices.push(found);
                }
            }
            None => {
                pools.insert(guid, Candidate { config: label.config, devices: vec![found] });
            }
        }
    }
    pools
}
