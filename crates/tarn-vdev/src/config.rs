//! Pool configuration as stored (as JSON) in every label.

use std::collections::BTreeMap;

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
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TopConfig {
    pub id: u32,
    pub guid: u64,
    pub kind: TopKind,
    pub ashift: u8,
    pub asize: u64,
    pub children: Vec<LeafConfig>,
}

impl TopConfig {
    /// Address-space bytes a block of `psize` takes on this vdev: itself
    /// on a disk or mirror; on raidz its data sectors, a parity sector per
    /// row, padded to a multiple of parity + 1 (variable-width stripes).
    pub fn alloc_size(&self, psize: u64) -> u64 {
        match self.kind {
            TopKind::Disk | TopKind::Mirror => psize,
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
    /// Bumped at every config change: import takes the highest among labels.
    #[serde(default)]
    pub generation: u64,
}

impl PoolConfig {
    /// Every leaf of every slot, with its top-level vdev's id.
    pub fn leaves(&self) -> Vec<(u32, &LeafConfig)> {
        self.top.iter().flat_map(|t| t.children.iter().flat_map(move |c| c.slot_leaves().map(move |l| (t.id, l)))).collect()
    }
}

/// The `top_id` a spare's label carries.
pub const SPARE_TOP_ID: u32 = u32::MAX;

/// What one leaf device's labels hold: the whole pool config plus which top
/// vdev and leaf this device is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Label {
    pub config: PoolConfig,
    pub top_id: u32,
    pub leaf_guid: u64,
}
