//! Pool configuration as stored (as JSON) in every label.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum PoolState {
    Active,
    Exported,
    Destroyed,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct LeafConfig {
    pub guid: u64,
    pub path: String,
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
}

/// What one leaf device's labels hold: the whole pool config plus which top
/// vdev and leaf this device is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Label {
    pub config: PoolConfig,
    pub top_id: u32,
    pub leaf_guid: u64,
}
