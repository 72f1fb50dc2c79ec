//! Pool configuration as stored (as JSON) in every label.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum PoolState {
    Active,
    Exported,
    Destroyed,
}

/// Why a leaf is in its slot. A slot (one child position of a top-level
/// vdev) normally holds one primary leaf; while it is being replaced, or
/// while a hot spare covers for it, it holds more, all written alike.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LeafRole {
    #[default]
    Primary,
    /// Joined by `replace`: takes the slot over when its resilver completes.
    Replacing,
    /// A hot spare covering for a failed primary.
    Spare,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct LeafConfig {
    pub guid: u64,
    pub path: String,
    /// Taken offline by the administrator.
    #[serde(default)]
    pub offline: bool,
    /// Dirty time log: txg ranges `[first, last]` whose writes this leaf
    /// missed; `last == u64::MAX` means "until it came back".
    #[serde(default)]
    pub dtl: Vec<(u64, u64)>,
    #[serde(default)]
    pub role: LeafRole,
    /// Further leaves in this leaf's slot (replacing or spare); only on a
    /// slot's primary, never nested.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub joined: Vec<LeafConfig>,
}

impl LeafConfig {
    pub fn new(guid: u64, path: String) -> LeafConfig {
        LeafConfig { guid, path, offline: false, dtl: vec![], role: LeafRole::Primary, joined: vec![] }
    }

    /// This leaf and the leaves joined to its slot.
    pub fn slot_leaves(&self) -> impl Iterator<Item = &LeafConfig> {
        std::iter::once(self).chain(self.joined.iter())
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum TopKind {
    Disk,
    Mirror,
    Raidz { parity: u8 },
    /// A removed top-level vdev (a log device taken out with `pool
    /// remove`): no devices, never read or allocated; it keeps its id so
    /// the ids after it (named by block pointers) stay what they are.
    Hole,
}

/// What a top-level vdev is for, as zpool's allocation classes: normal
/// vdevs hold the pool's data and metadata; `log` vdevs (SLOG) hold only
/// intent-log blocks and do not count in the pool's size.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TopClass {
    #[default]
    Normal,
    Log,
}

impl TopClass {
    pub fn is_normal(&self) -> bool {
        *self == TopClass::Normal
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TopConfig {
    pub id: u32,
    pub guid: u64,
    pub kind: TopKind,
    pub ashift: u8,
    pub asize: u64,
    pub children: Vec<LeafConfig>,
    /// Absent in labels written before log vdevs existed (and for normal
    /// vdevs): normal.
    #[serde(default, skip_serializing_if = "TopClass::is_normal")]
    pub class: TopClass,
}

impl TopConfig {
    /// A removed vdev's place: same id and size (space map records of
    /// the past still name it), no devices.
    pub fn hole(&self) -> TopConfig {
        TopConfig { kind: TopKind::Hole, children: vec![], guid: self.guid, ..self.clone() }
    }

    pub fn is_log(&self) -> bool {
        self.class == TopClass::Log
    }

    /// Address-space bytes a block of `psize` takes on this vdev: itself
    /// on a disk or mirror; on raidz its data sectors, a parity sector per
    /// row, padded to a multiple of parity + 1 (variable-width stripes).
    pub fn alloc_size(&self, psize: u64) -> u64 {
        match self.kind {
            TopKind::Disk | TopKind::Mirror | TopKind::Hole => psize,
            TopKind::Raidz { parity } => crate::raidz::alloc_size(psize, self.children.len(), usize::from(parity), self.ashift),
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct PoolConfig {
    pub name: String,
    pub pool_guid: u64,
    pub version: u32,
    pub state: PoolState,
    pub hostname: String,
    pub create_txg: u64,
    pub top: Vec<TopConfig>,
    pub properties: BTreeMap<String, String>,
    /// Hot spares not in use (a spare in use sits in the slot it covers).
    #[serde(default)]
    pub spares: Vec<LeafConfig>,
    /// Cache devices (L2ARC): not top-level vdevs, they hold no pool data
    /// (absent in labels written before cache devices existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cache: Vec<LeafConfig>,
    /// Bumped at every config change: import takes the highest among labels.
    #[serde(default)]
    pub generation: u64,
    /// Features the pool's contents use that a binary must know to open it
    /// (`feature@…`). Labels that list any are written as version 2, which
    /// binaries from before features existed refuse; a binary refuses to
    /// import a pool with a feature it does not know ([`KNOWN_FEATURES`]).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub features: BTreeSet<String>,
}

/// `encryption`: the pool holds (or held) encrypted datasets: sealed
/// blocks, encrypted object sets and sealed intent-log blocks.
pub const FEATURE_ENCRYPTION: &str = "encryption";

/// Every feature this binary reads and writes.
pub const KNOWN_FEATURES: [&str; 1] = [FEATURE_ENCRYPTION];

impl PoolConfig {
    /// The first feature the pool uses that this binary does not know.
    pub fn unknown_feature(&self) -> Option<&str> {
        self.features.iter().map(String::as_str).find(|f| !KNOWN_FEATURES.contains(f))
    }

    /// The label format version a config needs: 2 when it lists features.
    pub fn label_version(&self) -> u32 {
        if self.features.is_empty() {
            crate::format::LABEL_VERSION
        } else {
            crate::format::LABEL_VERSION_FEATURES
        }
    }

    /// Every leaf of every slot, with its top-level vdev's id.
    pub fn leaves(&self) -> Vec<(u32, &LeafConfig)> {
        self.top.iter().flat_map(|t| t.children.iter().flat_map(move |c| c.slot_leaves().map(move |l| (t.id, l)))).collect()
    }
}

/// The `top_id` a spare's label carries.
pub const SPARE_TOP_ID: u32 = u32::MAX;
/// The `top_id` a cache device's label carries.
pub const CACHE_TOP_ID: u32 = u32::MAX - 1;

/// What one leaf device's labels hold: the whole pool config plus which top
/// vdev and leaf this device is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Label {
    pub config: PoolConfig,
    pub top_id: u32,
    pub leaf_guid: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn top(class: TopClass) -> TopConfig {
        TopConfig { id: 1, guid: 7, kind: TopKind::Disk, ashift: 12, asize: 1 << 20, children: vec![LeafConfig::new(3, "d".into())], class }
    }

    /// Labels written before log vdevs existed have no `class`: normal.
    /// A normal vdev is still written without it (older binaries read
    /// pools without log vdevs unchanged); a log vdev and a hole round-trip.
    #[test]
    fn class_is_optional_and_round_trips() {
        let normal = serde_json::to_string(&top(TopClass::Normal)).unwrap();
        assert!(!normal.contains("class"), "{normal}");
        let old = r#"{"id":1,"guid":7,"kind":"Disk","ashift":12,"asize":1048576,"children":[{"guid":3,"path":"d"}]}"#;
        assert_eq!(serde_json::from_str::<TopConfig>(old).unwrap(), top(TopClass::Normal));
        let log = top(TopClass::Log);
        let text = serde_json::to_string(&log).unwrap();
        assert!(text.contains(r#""class":"Log""#), "{text}");
        assert_eq!(serde_json::from_str::<TopConfig>(&text).unwrap(), log);
        let hole = log.hole();
        assert!(hole.children.is_empty() && hole.is_log() && hole.kind == TopKind::Hole && hole.id == 1 && hole.asize == 1 << 20);
        assert_eq!(serde_json::from_str::<TopConfig>(&serde_json::to_string(&hole).unwrap()).unwrap(), hole);
    }
}
