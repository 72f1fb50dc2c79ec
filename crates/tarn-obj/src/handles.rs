//! An object set's dnode handles, in a map sharded by object id: writers
//! of different objects look their handles up without meeting on one
//! lock, and a look-up that finds its handle takes only a read lock.
//!
//! Invariants:
//! - At most one handle per object id (a handle is created under its
//!   shard's write lock, after looking again).
//! - A dnode read from the committed tree without a handle
//!   (`info_for_walk`) is read under its shard's lock, as handles are
//!   created: no handle of that object can appear (and a change through it
//!   be published) between the look-up and the read.
//! - Each shard holds at most `HANDLE_CACHE_MAX / HANDLE_SHARDS` handles;
//!   past that, or past the ARC's budget for other caches, the handles
//!   nobody holds and with no dirty record are dropped.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::objset::Dnode;
use crate::ObjectId;

/// Shards of a handle map (object ids are dense: id modulo the count).
pub(crate) const HANDLE_SHARDS: usize = 16;

pub(crate) type Shard = HashMap<ObjectId, Arc<Dnode>>;

pub(crate) struct HandleMap {
    shards: Box<[RwLock<Shard>]>,
}

impl HandleMap {
    pub fn new() -> HandleMap {
        HandleMap { shards: (0..HANDLE_SHARDS).map(|_| RwLock::new(HashMap::new())).collect() }
    }

    fn shard(&self, id: ObjectId) -> &RwLock<Shard> {
        &self.shards[(id.0 % HANDLE_SHARDS as u64) as usize]
    }

    /// The handle of `id`, if there is one (a read lock of its shard).
    pub fn get(&self, id: ObjectId) -> Option<Arc<Dnode>> {
        self.shard(id).read().get(&id).cloned()
    }

    /// `get` without waiting: None also when the shard is locked for a
    /// change, or a change waits for it (a handle being loaded holds the
    /// shard across a disk read).
    pub fn try_get(&self, id: ObjectId) -> Option<Arc<Dnode>> {
        self.shard(id).try_read()?.get(&id).cloned()
    }

    pub fn contains(&self, id: ObjectId) -> bool {
        self.shard(id).read().contains_key(&id)
    }

    /// `id`'s shard, shared: no handle of `id` appears while it is held.
    pub fn read_shard(&self, id: ObjectId) -> RwLockReadGuard<'_, Shard> {
        self.shard(id).read()
    }

    /// `id`'s shard, exclusively (to create a handle).
    pub fn write_shard(&self, id: ObjectId) -> RwLockWriteGuard<'_, Shard> {
        self.shard(id).write()
    }

    /// Drops every handle with no dirty record (a key being unloaded: the
    /// handles hold decrypted attributes); returns how many were dropped
    /// and how many stay (dirty).
    pub fn drop_clean(&self) -> (usize, usize) {
        let (mut dropped, mut kept) = (0, 0);
        for s in self.shards.iter() {
            let mut m = s.write();
            let before = m.len();
            m.retain(|_, h| !h.st.lock().dirty.is_empty());
            dropped += before - m.len();
            kept += m.len();
        }
        (dropped, kept)
    }

    /// Handles held in all shards (exclusive access: no locks).
    pub fn len_mut(&mut self) -> usize {
        self.shards.iter_mut().map(|s| s.get_mut().len()).sum()
    }
}
