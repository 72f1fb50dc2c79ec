//! `<state-dir>/pools.json`: the pools this daemon has imported (re-imported
//! at start, like zpool.cache) and every device path it has seen in a pool
//! (scanned by `pool import` without `-d`).

use std::path::Path;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CachedPool {
    pub name: String,
    pub guid: u64,
    pub devices: Vec<String>,
    pub altroot: Option<String>,
    /// Imported with `-m` (a log device missing): the daemon re-imports it
    /// the same way at start, until it is exported.
    #[serde(default)]
    pub missing_log: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PoolCache {
    pub pools: Vec<CachedPool>,
    #[serde(default)]
    pub known_devices: Vec<String>,
}

impl PoolCache {
    pub fn load(path: &Path) -> Result<PoolCache, String> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(PoolCache::default()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// Write atomically (temporary file, fsync, rename).
    pub fn save(&self, path: &Path) -> Result<(), String> {
        use std::io::Write;
        let temporary = path.with_extension("json.tmp");
        let text = serde_json::to_vec_pretty(self).map_err(|e| e.to_string())?;
        let write = || -> std::io::Result<()> {
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(&text)?;
            file.sync_all()?;
            std::fs::rename(&temporary, path)
        };
        write().map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn remember(&mut self, pool: CachedPool) {
        for device in &pool.devices {
            if !self.known_devices.contains(device) {
                self.known_devices.push(device.clone());
            }
        }
        let mut pool = pool;
        pool.missing_log |= self.pools.iter().any(|p| p.guid == pool.guid && p.missing_log);
        self.pools.retain(|p| p.name != pool.name);
        self.pools.push(pool);
    }

    pub fn forget(&mut self, name: &str) {
        self.pools.retain(|p| p.name != name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pools.json");
        assert_eq!(PoolCache::load(&path).unwrap(), PoolCache::default());
        let mut cache = PoolCache::default();
        cache.remember(CachedPool { name: "tank".into(), guid: 7, devices: vec!["/a".into()], altroot: None, missing_log: false });
        cache.save(&path).unwrap();
        let loaded = PoolCache::load(&path).unwrap();
        assert_eq!(loaded, cache);
        cache.forget("tank");
        assert!(cache.pools.is_empty());
        assert_eq!(cache.known_devices, vec!["/a".to_string()]);
    }
}
