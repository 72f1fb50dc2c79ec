//! The dataset tree of one pool, kept in the MOS.
//!
//! On disk (all in the MOS):
//! - object 1, the *pool directory* (type [`DS_DIRECTORY`]): its bonus holds
//!   `magic "TARNDSD1" | version u64 | datasets ZAP id u64 | pool props ZAP id u64
//!   | history ring id u64 | receives ZAP id u64` (little-endian; the history
//!   ring is `history.rs`'s; the receives map, 0 until the
//!   first receive, holds the journals of receives in progress:
//!   `replication/journal.rs`).
//! - the *datasets ZAP* (type [`DS_ZAP`]): full dataset name → JSON
//!   [`DatasetRecord`] (object set id, guid, creation time, creation txg,
//!   locally set properties, received ones and the masked names:
//!   `own_props.rs`).
//! - the *pool properties ZAP*: property name → value (`comment`, `failmode`).
//!
//! In memory the records are mirrored in a map so listing never touches disk;
//! every change is written through to the ZAP in one transaction and synced
//! before the call returns (like a ZFS sync task).
//!
//! Lock order: `change` (serializes modifications) before `state`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use tarn_obj::zap::Zap;
use tarn_obj::{ObjPool, ObjType, ObjectId, ObjectSet, ObjsetId, Tx, WriteProps, BONUS_LEN};

use crate::props::{self, PropDef, Settings, Source};
use crate::size::{format_bytes, format_ratio, ratio_hundredths};
use crate::{DsError, Result};

/// Object type of the pool directory (MOS object 1).
pub const DS_DIRECTORY: ObjType = ObjType(32);
/// Object type of the dataset and pool-property maps.
pub const DS_ZAP: ObjType = ObjType(33);
const DIRECTORY_OBJECT: ObjectId = ObjectId(1);
const DIRECTORY_MAGIC: &[u8; 8] = b"TARNDSD1";
const DIRECTORY_VERSION: u64 = 1;
/// Byte offset in the directory's bonus of the receives map's id.
pub(crate) const DIRECTORY_RECEIVES: usize = 40;

/// One dataset as stored in the datasets ZAP.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DatasetRecord {
    pub objset: u64,
    pub guid: u64,
    /// Unix seconds.
    pub creation: u64,
    pub createtxg: u64,
    /// Locally set properties, normalized (see `props`).
    pub props: BTreeMap<String, String>,
    /// Properties the last receive with properties brought (`send -p`/
    /// `-R`), normalized; a local value overrides one (own_props.rs).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub received: BTreeMap<String, String>,
    /// Received values `tarn inherit` set aside: the inherited value wins
    /// until `tarn set` or `tarn inherit -S`.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub masked: BTreeSet<String>,
    /// Snapshots only: user holds (`tarn hold TAG`); a held snapshot
    /// cannot be destroyed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holds: Vec<String>,
    /// Clones only: the snapshot (`pool/fs@snap`) this dataset was cloned
    /// from; its trees start as that snapshot's (see `clones.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// A receive into this dataset was interrupted (`recv -s`): its
    /// resume token; the dataset holds partial state and is not mounted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recv: Option<crate::replication::RecvPartial>,
    /// Encrypted datasets: cipher, key guid, encryption root, wrapped key
    /// (encryption.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crypt: Option<crate::encryption::CryptRecord>,
    /// Volumes (and their snapshots and clones) only: `volsize` and
    /// `volblocksize` (volumes.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<crate::volumes::VolumeRecord>,
}

/// An effective property value, ready to print.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PropValue {
    pub property: String,
    /// As `zfs get` prints it (`-p` form when asked for).
    pub value: String,
    pub source: String,
    /// OpenZFS JSON `source.type` / `source.data`.
    pub source_type: String,
    pub source_data: String,
    /// The dataset's received value (`tarn get -o received`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received: Option<String>,
}

impl PropValue {
    pub(crate) fn new(property: &str, value: String, source: &Source) -> PropValue {
        PropValue {
            property: property.to_string(),
            value,
            source: source.display(),
            source_type: source.json_type().to_string(),
            source_data: source.json_data(),
            received: None,
        }
    }

    pub(crate) fn with_received(mut self, received: Option<String>) -> PropValue {
        self.received = received;
        self
    }
}

pub(crate) struct State {
    pub(crate) datasets: BTreeMap<String, DatasetRecord>,
    /// Snapshots by full name (`pool/fs@name`), kept in the same ZAP.
    pub(crate) snapshots: BTreeMap<String, DatasetRecord>,
    /// Bookmarks by full name (`pool/fs#name`), same ZAP (`bookmarks.rs`).
    pub(crate) bookmarks: BTreeMap<String, crate::bookmarks::BookmarkRecord>,
    pub(crate) objsets: HashMap<String, ObjectSet>,
    pool_props: BTreeMap<String, String>,
}

/// Callback that lays out a fresh object set (the daemon passes the POSIX
/// layer's `Fs::format`; tests may pass a no-op).
pub type InitObjset<'a> = &'a dyn Fn(&ObjectSet, &Tx) -> std::result::Result<(), String>;

pub struct Pool {
    pub(crate) obj: Arc<ObjPool>,
    pub(crate) datasets_zap: ObjectId,
    props_zap: ObjectId,
    pub(crate) change: Mutex<()>,
    /// Snapshots being sent (name → sends): they cannot be destroyed
    /// meanwhile, as if held.
    pub(crate) sending: Mutex<BTreeMap<String, usize>>,
    pub(crate) state: RwLock<State>,
    pub(crate) quota_cache: crate::quota::SharedQuotaCache,
    /// Unused reservations as of the last synced txg (reservation.rs).
    pub(crate) reservation_cache: parking_lot::Mutex<crate::reservation::ReservationCache>,
    /// Wrapping keys of loaded encryption roots (encryption.rs).
    pub(crate) wrapping: crate::encryption::Wrapping,
    /// The receives map (replication/journal.rs).
    pub(crate) journals: crate::replication::journal::JournalMap,
}

pub(crate) fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

pub(crate) fn new_guid() -> u64 {
    loop {
        let guid: u64 = rand::random();
        if guid != 0 {
            return guid;
        }
    }
}

/// Check a dataset name: `pool/a/b`, components of `[A-Za-z0-9_.:-]`, the
/// first starting with a letter.
pub fn validate_dataset_name(name: &str) -> Result<()> {
    let bad = |why: &str| Err(DsError::BadName { name: name.to_string(), why: why.to_string() });
    if name.is_empty() {
        return bad("empty name");
    }
    if name.len() > 255 {
        return bad("name is too long");
    }
    if name.contains('@') || name.contains('#') {
        return bad("'@' and '#' name snapshots and bookmarks, not datasets");
    }
    for component in name.split('/') {
        if component.is_empty() {
            return bad("empty component");
        }
        if component == "." || component == ".." {
            return bad("'.' and '..' are not allowed");
        }
        if let Some(c) = component.chars().find(|c| !(c.is_ascii_alphanumeric() || "_.:-".contains(*c))) {
            return bad(&format!("invalid character '{c}'"));
        }
    }
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return bad("must begin with a letter");
    }
    Ok(())
}

fn write_props_of(settings: &Settings) -> WriteProps {
    WriteProps { compression: settings.compression, checksum: settings.checksum, copies: settings.copies, primarycache: settings.primarycache, secondarycache: settings.secondarycache }
}


impl Pool {
    /// Lay out the dataset tree of a freshly created pool: the directory,
    /// the maps and the root dataset named after the pool.
    pub fn create(obj: Arc<ObjPool>, root_props: &[(String, String)], init: InitObjset) -> Result<Arc<Pool>> {
        Pool::create_keyed(obj, root_props, init, None)
    }

    /// [`Pool::create`]; with `-O encryption=… -O keyformat=…` among the
    /// root's properties the root dataset is an encryption root, keyed by
    /// `material` (or its key file).
    pub fn create_keyed(obj: Arc<ObjPool>, root_props: &[(String, String)], init: InitObjset, material: Option<&tarn_keys::KeyMaterial>) -> Result<Arc<Pool>> {
        let name = obj.name();
        let (root_props, crypt_req) = crate::encryption::split_request(root_props)?;
        let guid = new_guid();
        let crypt = crate::encryption::new_root_crypt(&name, guid, &crypt_req, material)?;
        let mut local = BTreeMap::new();
        for (prop, value) in &root_props {
            let (prop, stored) = props::validate(prop, value)?;
            local.insert(prop.to_string(), stored);
        }
        crate::encryption::refuse_three_copies(local.get("copies").map(String::as_str), crypt.is_some())?;
        let mos = obj.mos();
        let tx = obj.begin();
        let datasets_zap = Zap::create(&mos, &tx, DS_ZAP)?;
        let props_zap = Zap::create(&mos, &tx, DS_ZAP)?;
        let mut bonus = [0u8; BONUS_LEN];
        bonus[0..8].copy_from_slice(DIRECTORY_MAGIC);
        bonus[8..16].copy_from_slice(&DIRECTORY_VERSION.to_le_bytes());
        bonus[16..24].copy_from_slice(&datasets_zap.0.to_le_bytes());
        bonus[24..32].copy_from_slice(&props_zap.0.to_le_bytes());
        mos.create_with_id(&tx, DIRECTORY_OBJECT, DS_DIRECTORY, 512, &bonus)?;
        if let Some((record, keys, _)) = &crypt {
            obj.load_keys(record.key_guid, keys.clone());
        }
        let objset = obj.create_objset_with(&tx, crypt.as_ref().map(|(r, _, _)| r.crypt()).transpose()?)?;
        let os = obj.open_objset(objset)?;
        init(&os, &tx).map_err(DsError::Init)?;
        let record = DatasetRecord {
            objset: objset.0,
            guid,
            creation: now_unix(),
            createtxg: tx.txg(),
            props: local,
            crypt: crypt.as_ref().map(|(r, _, _)| r.clone()),
            ..Default::default()
        };
        let encoded = serde_json::to_vec(&record).map_err(|e| DsError::Corrupt(e.to_string()))?;
        Zap::insert(&mos, &tx, datasets_zap, name.as_bytes(), &encoded)?;
        drop(tx);
        obj.sync()?;
        let pool = Pool {
            obj,
            datasets_zap,
            props_zap,
            change: Mutex::new(()),
            sending: Mutex::new(BTreeMap::new()),
            quota_cache: Default::default(),
            reservation_cache: Default::default(),
            wrapping: Default::default(),
            journals: Default::default(),
            state: RwLock::new(State {
                datasets: BTreeMap::from([(name.clone(), record)]),
                snapshots: BTreeMap::new(),
                bookmarks: BTreeMap::new(),
                objsets: HashMap::from([(name.clone(), os)]),
                pool_props: BTreeMap::new(),
            }),
        };
        if let Some((_, _, wrapping)) = crypt {
            pool.wrapping.0.lock().insert(guid, wrapping);
        }
        pool.apply_write_props(&name)?;
        pool.apply_failmode();
        pool.apply_autotrim();
        Ok(Arc::new(pool))
    }

    /// Read the dataset tree of an imported pool.
    pub fn open(obj: Arc<ObjPool>) -> Result<Arc<Pool>> {
        let mos = obj.mos();
        let bonus = mos
            .bonus(DIRECTORY_OBJECT)
            .map_err(|e| DsError::Corrupt(format!("pool directory (MOS object 1): {e}")))?;
        if &bonus[0..8] != DIRECTORY_MAGIC {
            return Err(DsError::Corrupt("pool directory has a bad magic number".into()));
        }
        let word = |i: usize| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&bonus[i..i + 8]);
            u64::from_le_bytes(bytes)
        };
        if word(8) != DIRECTORY_VERSION {
            return Err(DsError::Corrupt(format!("unsupported dataset directory version {}", word(8))));
        }
        let datasets_zap = ObjectId(word(16));
        let props_zap = ObjectId(word(24));
        let receives_zap = word(DIRECTORY_RECEIVES);
        let mut datasets = BTreeMap::new();
        let mut decode_error = None;
        let mut bookmarks = BTreeMap::new();
        Zap::iterate(&mos, datasets_zap, 0, &mut |_, key, value| {
            if key.contains(&b'#') {
                return crate::bookmarks::load_record(&mut bookmarks, key, value, &mut decode_error);
            }
            match (std::str::from_utf8(key), serde_json::from_slice::<DatasetRecord>(value)) {
                (Ok(name), Ok(record)) => {
                    datasets.insert(name.to_string(), record);
                    true
                }
                _ => {
                    decode_error = Some(String::from_utf8_lossy(key).into_owned());
                    false
                }
            }
        })?;
        if let Some(key) = decode_error {
            return Err(DsError::Corrupt(format!("dataset record '{key}' does not decode")));
        }
        let mut pool_props = BTreeMap::new();
        Zap::iterate(&mos, props_zap, 0, &mut |_, key, value| {
            pool_props.insert(String::from_utf8_lossy(key).into_owned(), String::from_utf8_lossy(value).into_owned());
            true
        })?;
        let snapshots: BTreeMap<String, DatasetRecord> =
            datasets.iter().filter(|(n, _)| n.contains('@')).map(|(n, r)| (n.clone(), r.clone())).collect();
        datasets.retain(|n, _| !n.contains('@'));
        let mut objsets = HashMap::new();
        for (name, record) in &datasets {
            objsets.insert(name.clone(), obj.open_objset(ObjsetId(record.objset))?);
        }
        let pool = Pool {
            obj,
            datasets_zap,
            props_zap,
            change: Mutex::new(()),
            sending: Mutex::new(BTreeMap::new()),
            state: RwLock::new(State { datasets, snapshots, bookmarks, objsets, pool_props }),
            quota_cache: Default::default(),
            reservation_cache: Default::default(),
            wrapping: Default::default(),
            journals: crate::replication::journal::JournalMap(Mutex::new(receives_zap), Default::default()),
        };
        let names: Vec<String> = pool.state.read().datasets.keys().cloned().collect();
        for name in names {
            pool.apply_write_props(&name)?;
        }
        pool.apply_failmode();
        pool.apply_autotrim();
        // Receives a crash interrupted are settled before anything else
        // sees the datasets.
        *pool.journals.1.lock() = pool.recover_receives()?;
        Ok(Arc::new(pool))
    }

    /// Sets one word of the pool directory's bonus (in `tx`).
    pub(crate) fn set_directory_word(&self, tx: &Tx, offset: usize, value: u64) -> Result<()> {
        let mos = self.obj.mos();
        let mut bonus = mos.bonus(DIRECTORY_OBJECT).map_err(|e| DsError::Corrupt(format!("pool directory (MOS object 1): {e}")))?;
        bonus[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
        mos.set_bonus(tx, DIRECTORY_OBJECT, &bonus)?;
        Ok(())
    }

    pub fn obj(&self) -> &Arc<ObjPool> {
        &self.obj
    }

    /// The pool's name, which is also its root dataset's name.
    pub fn name(&self) -> String {
        self.obj.name()
    }

    /// All dataset names, parents before children.
    pub fn list(&self) -> Vec<String> {
        self.state.read().datasets.keys().cloned().collect()
    }

    pub fn exists(&self, name: &str) -> bool {
        self.state.read().datasets.contains_key(name)
    }

    pub fn record(&self, name: &str) -> Result<DatasetRecord> {
        self.state.read().datasets.get(name).cloned().ok_or_else(|| DsError::NotFound(name.to_string()))
    }

    /// `name` and all its descendants, parents first.
    pub fn subtree(&self, name: &str) -> Vec<String> {
        let state = self.state.read();
        let prefix = format!("{name}/");
        state
            .datasets
            .keys()
            .filter(|n| n.as_str() == name || n.starts_with(&prefix))
            .cloned()
            .collect()
    }

    /// The object set of a dataset (one shared handle per dataset, so write
    /// properties set here reach every user of it).
    pub fn objset(&self, name: &str) -> Result<ObjectSet> {
        self.state.read().objsets.get(name).cloned().ok_or_else(|| DsError::NotFound(name.to_string()))
    }

    /// Effective typed settings.
    pub fn settings(&self, name: &str) -> Result<Settings> {
        let state = self.state.read();
        if !state.datasets.contains_key(name) {
            return Err(DsError::NotFound(name.to_string()));
        }
        let lookup = Self::own_lookup(&state);
        let settings = props::settings(name, &lookup);
        Ok(settings)
    }

    pub(crate) fn reapply_write_props(&self, name: &str) -> Result<()> {
        self.apply_write_props(name)
    }

    fn apply_write_props(&self, name: &str) -> Result<()> {
        let settings = self.settings(name)?;
        let os = self.objset(name)?;
        os.set_write_props(write_props_of(&settings));
        os.set_logbias(settings.logbias);
        Ok(())
    }

    pub(crate) fn store_record(&self, tx: &Tx, name: &str, record: &DatasetRecord) -> Result<()> {
        let encoded = serde_json::to_vec(record).map_err(|e| DsError::Corrupt(e.to_string()))?;
        Zap::update(&self.obj.mos(), tx, self.datasets_zap, name.as_bytes(), &encoded)?;
        Ok(())
    }

    /// Create a dataset (and with `parents`, its missing ancestors). Returns
    /// the names created, parents first.
    pub fn create_dataset(
        &self,
        name: &str,
        properties: &[(String, String)],
        parents: bool,
        init: InitObjset,
    ) -> Result<Vec<String>> {
        self.create_dataset_keyed(name, properties, parents, init, None)
    }

    /// [`Pool::create_dataset`] with the key material of a new encryption
    /// root (`-o encryption=… -o keyformat=…`, keylocation=prompt: the
    /// CLI asked for it); a key file is read here.
    pub fn create_dataset_keyed(
        &self,
        name: &str,
        properties: &[(String, String)],
        parents: bool,
        init: InitObjset,
        material: Option<&tarn_keys::KeyMaterial>,
    ) -> Result<Vec<String>> {
        self.create_inner(name, properties, parents, init, material, None)
    }

    /// A volume (`tarn create -V`): [`Pool::create_dataset_keyed`] whose
    /// record carries `volume`; `init_volume` lays out the volume's object
    /// set, `init` that of each missing parent (file systems).
    #[allow(clippy::too_many_arguments)]
    pub fn create_volume(
        &self,
        name: &str,
        properties: &[(String, String)],
        parents: bool,
        init: InitObjset,
        init_volume: InitObjset,
        material: Option<&tarn_keys::KeyMaterial>,
        volume: crate::volumes::VolumeRecord,
    ) -> Result<Vec<String>> {
        self.create_inner(name, properties, parents, init, material, Some((volume, init_volume)))
    }

    fn create_inner(
        &self,
        name: &str,
        properties: &[(String, String)],
        parents: bool,
        init: InitObjset,
        material: Option<&tarn_keys::KeyMaterial>,
        volume: Option<(crate::volumes::VolumeRecord, InitObjset)>,
    ) -> Result<Vec<String>> {
        validate_dataset_name(name)?;
        let (properties, crypt_req) = crate::encryption::split_request(properties)?;
        let properties = properties.as_slice();
        let pool_name = self.name();
        if name.split('/').next() != Some(pool_name.as_str()) {
            return Err(DsError::NoSuchPool(name.split('/').next().unwrap_or("").to_string()));
        }
        let mut local = BTreeMap::new();
        for (prop, value) in properties {
            let (prop, stored) = props::validate(prop, value)?;
            local.insert(prop.to_string(), stored);
        }
        let _change = self.change.lock();
        if self.exists(name) {
            return Err(DsError::Exists(name.to_string()));
        }
        if let Some(bytes) = local.get("refreservation").and_then(|v| v.parse::<u64>().ok()) {
            self.check_refreservation(name, bytes)?;
        }
        crate::encryption::refuse_three_copies(local.get("copies").map(String::as_str), self.will_be_encrypted(name, &crypt_req))?;
        // Missing ancestors, nearest to the root first.
        let mut missing = Vec::new();
        let mut current = props::parent_name(name);
        while let Some(parent) = current {
            if self.exists(parent) {
                break;
            }
            missing.push(parent.to_string());
            current = props::parent_name(parent);
        }
        if !missing.is_empty() && !parents {
            return Err(DsError::NoParent(name.to_string()));
        }
        missing.reverse();
        let mut created = Vec::new();
        let tx = self.obj.begin();
        let no_request = crate::encryption::CryptRequest::default();
        for dataset in missing.iter().map(String::as_str).chain(std::iter::once(name)) {
            let guid = new_guid();
            let req = if dataset == name { &crypt_req } else { &no_request };
            let crypt = self.crypt_for_new(dataset, guid, req, material)?;
            let objset = self.obj.create_objset_with(&tx, crypt.as_ref().map(|c| c.1))?;
            let os = self.obj.open_objset(objset)?;
            let volume = if dataset == name { volume } else { None };
            match volume {
                Some((_, init_volume)) => init_volume(&os, &tx).map_err(DsError::Init)?,
                None => init(&os, &tx).map_err(DsError::Init)?,
            }
            let volume = volume.map(|v| v.0);
            let record = DatasetRecord {
                objset: objset.0,
                guid,
                volume,
                crypt: crypt.map(|c| c.0),
                creation: now_unix(),
                createtxg: tx.txg(),
                props: if dataset == name { local.clone() } else { BTreeMap::new() },
                ..Default::default()
            };
            self.store_record(&tx, dataset, &record)?;
            let mut state = self.state.write();
            state.datasets.insert(dataset.to_string(), record);
            state.objsets.insert(dataset.to_string(), os);
            created.push(dataset.to_string());
        }
        drop(tx);
        for dataset in &created {
            self.apply_write_props(dataset)?;
        }
        self.obj.sync()?;
        Ok(created)
    }

    /// What `destroy` would remove, deepest first; errors if the dataset is
    /// the pool's root or has children and `recursive` is false.
    pub fn destroy_plan(&self, name: &str, recursive: bool) -> Result<Vec<String>> {
        self.destroy_plan_with(name, recursive, false)
    }

    /// [`Pool::destroy_plan`]; `clones_go_first`: snapshots with clones do
    /// not stop the plan (`destroy -R` destroys those clones before).
    pub fn destroy_plan_with(&self, name: &str, recursive: bool, clones_go_first: bool) -> Result<Vec<String>> {
        if !self.exists(name) {
            return Err(DsError::NotFound(name.to_string()));
        }
        if !recursive && !self.snapshots(Some(name)).is_empty() {
            return Err(DsError::HasSnapshots(name.to_string()));
        }
        if props::parent_name(name).is_none() {
            return Err(DsError::IsPoolRoot(name.to_string()));
        }
        let mut subtree = self.subtree(name);
        if subtree.len() > 1 && !recursive {
            return Err(DsError::HasChildren(name.to_string()));
        }
        // Snapshots with clones stay, unless their clones go first (-R).
        for dataset in subtree.iter().filter(|_| !clones_go_first) {
            for snap in self.snapshots(Some(dataset)) {
                if let Some(why) = self.clones_reason(&snap) {
                    return Err(DsError::Snapshot(format!("snapshot '{snap}' {}", why.trim_start_matches("snapshot "))));
                }
            }
        }
        subtree.reverse();
        Ok(subtree)
    }

    /// Destroy a dataset (with `recursive`, its descendants too). The caller
    /// unmounts first. Returns the names destroyed, deepest first.
    pub fn destroy_dataset(&self, name: &str, recursive: bool) -> Result<Vec<String>> {
        let plan = self.destroy_plan(name, recursive)?;
        // Their snapshots first, newest first (each frees what only it held).
        for dataset in &plan {
            let mut snaps = self.snapshots(Some(dataset));
            snaps.reverse();
            for snap in snaps {
                self.destroy_snapshot(&snap, true)?;
            }
        }
        self.destroy_bookmarks_of(&plan)?;
        let _change = self.change.lock();
        let mos = self.obj.mos();
        let tx = self.obj.begin();
        for dataset in &plan {
            let record = self.record(dataset)?;
            self.obj.destroy_objset(&tx, ObjsetId(record.objset))?;
            Zap::remove(&mos, &tx, self.datasets_zap, dataset.as_bytes())?;
            let mut state = self.state.write();
            state.datasets.remove(dataset);
            state.objsets.remove(dataset);
        }
        drop(tx);
        self.obj.sync()?;
        Ok(plan)
    }

    /// Space used by the dataset and its descendants (bytes, parity excluded).
    /// (A clone's blocks shared with its origin count in the origin's
    /// dataset, see `clones.rs`.)
    pub fn used_bytes(&self, name: &str) -> u64 {
        self.obj.deflate(self.used_raw(name)) + self.subtree_unused_refreservation(name)
    }

    fn logical_bytes(&self, name: &str) -> u64 {
        self.subtree_sum(name, ObjectSet::logical_bytes)
    }

    /// Sum of `f` over the object sets of `name` and its descendants.
    fn subtree_sum(&self, name: &str, f: fn(&ObjectSet) -> u64) -> u64 {
        let state = self.state.read();
        let prefix = format!("{name}/");
        state.objsets.iter().filter(|(n, _)| n.as_str() == name || n.starts_with(&prefix)).map(|(_, os)| f(os)).sum()
    }

    pub(crate) fn referenced_bytes(&self, name: &str) -> u64 {
        self.objset(name).map(|os| self.obj.deflate(os.used_bytes())).unwrap_or(0)
    }

    /// Space the dataset can still use: what the pool has available (its
    /// free space less the slop), capped by the quota of the dataset and of
    /// every ancestor.
    pub fn available_bytes(&self, name: &str) -> u64 {
        let mut available = self.obj.deflate(self.obj.space().available).saturating_sub(self.reserved_elsewhere(name));
        let mut current = Some(name);
        while let Some(dataset) = current {
            let quota = self.state.read().datasets.get(dataset).and_then(|r| r.own("quota").cloned());
            if let Some(quota) = quota.and_then(|q| q.parse::<u64>().ok()) {
                available = available.min(quota.saturating_sub(self.used_bytes(dataset)));
            }
            current = props::parent_name(dataset);
        }
        available
    }

    /// One property of a dataset as `zfs get` shows it. `altroot` prefixes
    /// mountpoints.
    pub fn get_property(&self, name: &str, prop: &str, parsable: bool, altroot: Option<&str>) -> Result<PropValue> {
        if prop.contains(':') {
            props::check_name(prop)?;
            if name.contains('@') || name.contains('#') {
                return Ok(PropValue::new(prop, "-".to_string(), &Source::None));
            }
            self.record(name)?;
            return Ok(self.user_property(name, prop));
        }
        let def: &PropDef = props::lookup(prop)?;
        if crate::volumes::VOLUME_PROPERTIES.contains(&def.name) {
            let value = self.volume_property(name, def.name, parsable);
            let source = if value == "-" || name.contains('@') { Source::None } else { Source::Local };
            return Ok(PropValue::new(def.name, value, &source));
        }
        if let Some((value, source)) = self.crypt_property(name, def.name) {
            return Ok(PropValue::new(def.name, value, &source));
        }
        if name.contains('@') {
            return self.snapshot_property(def, name, parsable);
        }
        if name.contains('#') {
            return self.bookmark_property(def, name, parsable);
        }
        let record = self.record(name)?;
        let number = |bytes: u64| if parsable { bytes.to_string() } else { format_bytes(bytes) };
        let (value, source) = if def.settable {
            let (stored, source) = {
                let state = self.state.read();
                let lookup = Self::own_lookup(&state);
                props::effective(def, name, &lookup)
            };
            let mut value = props::display_value(def.name, &stored, parsable);
            if def.name == "mountpoint" && value.starts_with('/') {
                if let Some(root) = altroot.filter(|r| !r.is_empty() && *r != "/") {
                    value = if value == "/" { root.to_string() } else { format!("{}{}", root.trim_end_matches('/'), value) };
                }
            }
            (value, source)
        } else {
            let value = match def.name {
                "name" => name.to_string(),
                "type" => if record.volume.is_some() { "volume" } else { "filesystem" }.to_string(),
                "creation" => crate::time::creation_value(record.creation, parsable),
                "used" => number(self.used_bytes(name)),
                "available" => number(self.available_bytes(name)),
                "referenced" => number(self.referenced_bytes(name)),
                "logicalused" => number(self.logical_bytes(name)),
                "usedbysnapshots" => number(self.obj.deflate(self.snapshot_space_raw(name))),
                "usedbydataset" => number(self.obj.deflate(self.dataset_space_raw(name))),
                "usedbyrefreservation" => number(self.unused_refreservation(name)),
                "usedbychildren" => number(
                    self.obj.deflate(
                        self.used_raw(name).saturating_sub(self.dataset_space_raw(name)).saturating_sub(self.snapshot_space_raw(name)),
                    ) + self.subtree_unused_refreservation(name).saturating_sub(self.unused_refreservation(name)),
                ),
                "origin" => record.origin.clone().unwrap_or_else(|| "-".to_string()),
                "clones" => "-".to_string(),
                // Known to the daemon, which owns the mounts (it fills this in).
                "mounted" => "-".to_string(),
                "guid" => record.guid.to_string(),
                "written" => number(self.written_bytes(name)),
                "createtxg" => record.createtxg.to_string(),
                "userrefs" => "-".to_string(),
                "receive_resume_token" => record.recv.as_ref().map_or_else(|| "-".to_string(), |p| p.token.clone()),
                "compressratio" => {
                    // User data only, as written and as stored: metadata
                    // (mostly-empty dnode and directory blocks, which
                    // compress well) would show a new empty dataset as 2.00x.
                    let ratio = ratio_hundredths(
                        self.subtree_sum(name, ObjectSet::data_logical),
                        self.obj.deflate(self.subtree_sum(name, ObjectSet::data_bytes)),
                    );
                    if parsable {
                        format!("{}.{:02}", ratio / 100, ratio % 100)
                    } else {
                        format_ratio(ratio)
                    }
                }
                other => return Err(DsError::Prop(props::PropError::Unknown(other.to_string()))),
            };
            (value, Source::None)
        };
        let received = if def.settable { self.received_display(name, def.name, parsable) } else { None };
        Ok(PropValue::new(def.name, value, &source).with_received(received))
    }

    /// A stored pool property (`comment`, `failmode`, `autoreplace`,
    /// `autotrim`), or its default.
    pub fn pool_property(&self, prop: &str) -> (String, Source) {
        match self.state.read().pool_props.get(prop) {
            Some(value) => (value.clone(), Source::Local),
            None => (props::pool_prop_default(prop).to_string(), Source::Default),
        }
    }

    fn apply_failmode(&self) {
        self.obj.set_failmode_wait(self.pool_property("failmode").0 == "wait");
    }

    fn apply_autotrim(&self) {
        self.obj.set_autotrim(self.pool_property("autotrim").0 == "on");
    }

    pub fn set_pool_property(&self, prop: &str, value: &str) -> Result<()> {
        let prop = props::validate_pool_prop(prop, value)?;
        let _change = self.change.lock();
        let tx = self.obj.begin();
        Zap::update(&self.obj.mos(), &tx, self.props_zap, prop.as_bytes(), value.as_bytes())?;
        drop(tx);
        self.state.write().pool_props.insert(prop.to_string(), value.to_string());
        self.apply_failmode();
        self.apply_autotrim();
        self.obj.sync()?;
        Ok(())
    }
}
