//! Native encryption of datasets: encryption roots, wrapped keys, and
//! `load-key`, `unload-key`, `change-key`, as OpenZFS users know them.
//!
//! Every encrypted dataset has a master key of its own (random, 32 bytes)
//! and a key guid that its object set, snapshots and clones carry
//! (tarn-obj `crypt.rs`). The master key is stored only wrapped (tarn-keys):
//! sealed under the *wrapping key* of the dataset's encryption root, which
//! is derived from the user's key material (a passphrase through argon2id
//! or PBKDF2, or a raw/hex key as it is). Children created under an
//! encryption root share its wrapping key, so one `load-key` of the root
//! unwraps them all, and `change-key` rewraps their master keys without
//! rewriting a block. The wrapped key's associated data is the key guid: a
//! blob copied onto another dataset's record fails as a wrong key.
//!
//! Stored: `DatasetRecord::crypt` (JSON in the MOS like the rest of the
//! record): cipher, key guid, the encryption root's dataset guid, the
//! wrapped key (hex) and, on roots, `keylocation`. `keyformat` and the
//! KDF's cost are read from the wrapped key itself.
//!
//! In memory: the wrapping keys of loaded roots (locked, zeroed on drop:
//! tarn-keys `Secret`) and, in tarn-obj's key ring, each loaded dataset's
//! block keys. Nothing here is ever logged or shown by `get`.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tarn_block::{BlockKeys, Cipher};
use tarn_keys::{unwrap_with, wrap, Kdf, KeyFormat, KeyLocation, KeyMaterial, MasterKey, WrappedKey, WrappingKey};
use tarn_obj::crypt::Crypt;

use crate::pool::{new_guid, Pool};
use crate::props::{self, Source};
use crate::{DsError, Result};

/// What an encrypted dataset's record holds about its encryption.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CryptRecord {
    /// `aes-128-gcm` or `aes-256-gcm`.
    pub cipher: String,
    pub key_guid: u64,
    /// Dataset guid of the encryption root (this dataset's own guid on a root).
    pub root: u64,
    /// The wrapped master key, hex.
    pub wrapped: String,
    /// Encryption roots: `prompt` or `file:///path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keylocation: Option<String>,
}

/// The properties `create -o` takes about encryption (set only at creation,
/// except `keylocation` on a root).
pub const CREATE_PROPS: [&str; 4] = ["encryption", "keyformat", "keylocation", "pbkdf2iters"];

/// What `create -o` asked for about encryption.
#[derive(Default, Debug, Clone)]
pub struct CryptRequest {
    /// `Some(None)`: encryption=off.
    pub encryption: Option<Option<Cipher>>,
    pub keyformat: Option<KeyFormat>,
    pub keylocation: Option<KeyLocation>,
    pub pbkdf2iters: Option<u64>,
}

impl CryptRequest {
    pub fn is_empty(&self) -> bool {
        self.encryption.is_none() && self.keyformat.is_none() && self.keylocation.is_none() && self.pbkdf2iters.is_none()
    }
}

/// Takes the encryption properties out of `create -o` assignments.
pub fn split_request(properties: &[(String, String)]) -> Result<(Vec<(String, String)>, CryptRequest)> {
    let mut rest = Vec::new();
    let mut req = CryptRequest::default();
    for (prop, value) in properties {
        match prop.as_str() {
            "encryption" => {
                req.encryption = Some(match value.as_str() {
                    "off" => None,
                    v => Some(Cipher::parse(v).ok_or_else(|| {
                        DsError::BadValue(format!("invalid encryption '{v}': must be off, on, aes-128-gcm or aes-256-gcm"))
                    })?),
                })
            }
            "keyformat" => req.keyformat = Some(value.parse()?),
            "keylocation" => req.keylocation = Some(value.parse()?),
            "pbkdf2iters" => {
                let n = value
                    .parse::<u64>()
                    .map_err(|_| DsError::BadValue(format!("invalid pbkdf2iters '{value}': must be a number")))?;
                Kdf::pbkdf2_for_new_key(n)?;
                req.pbkdf2iters = Some(n);
            }
            _ => rest.push((prop.clone(), value.clone())),
        }
    }
    Ok((rest, req))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Result<Vec<u8>> {
    let bad = || DsError::Corrupt("wrapped key is not hex".into());
    if !text.len().is_multiple_of(2) {
        return Err(bad());
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2).ok_or_else(bad)?, 16).map_err(|_| bad())).collect()
}

impl CryptRecord {
    fn blob(&self) -> Result<WrappedKey> {
        Ok(WrappedKey::decode(&unhex(&self.wrapped)?)?)
    }

    fn cipher(&self) -> Result<Cipher> {
        Cipher::parse(&self.cipher).ok_or_else(|| DsError::Corrupt(format!("unknown cipher '{}'", self.cipher)))
    }

    pub(crate) fn crypt(&self) -> Result<Crypt> {
        Ok(Crypt { cipher: self.cipher()?, key_guid: self.key_guid })
    }

    /// Whether the wrapped key `other` (hex) was wrapped under the same
    /// wrapping key as this record's (format, KDF and salt): one that
    /// `load-key` of this root opens.
    pub(crate) fn wrapped_by_same_key(&self, other: &str) -> bool {
        match (self.blob(), unhex(other).ok().and_then(|b| WrappedKey::decode(&b).ok())) {
            (Ok(a), Some(b)) => a.format() == b.format() && a.kdf() == b.kdf() && a.salt() == b.salt(),
            _ => false,
        }
    }
}

/// Checks the key record of a dataset in a raw package (bad input is a
/// one-line error, never stored).
pub(crate) fn check_package_crypt(cipher: &str, key_guid: u64, wrapped: &str) -> Result<()> {
    package_crypt_of(cipher, key_guid)?;
    WrappedKey::decode(&unhex(wrapped)?).map_err(|e| DsError::Corrupt(format!("wrapped key: {e}")))?;
    Ok(())
}

/// The object-level encryption of a raw package's dataset.
pub(crate) fn package_crypt_of(cipher: &str, key_guid: u64) -> Result<Crypt> {
    let cipher = Cipher::parse(cipher).filter(|_| cipher != "on").ok_or_else(|| DsError::Corrupt(format!("unknown cipher '{cipher}'")))?;
    if key_guid == 0 {
        return Err(DsError::Corrupt("key guid 0".into()));
    }
    Ok(Crypt { cipher, key_guid })
}

/// `copies=3` on an encrypted dataset is refused, as OpenZFS refuses it:
/// an encrypted block pointer carries its IV in the third copy's place,
/// so it has room for two. (A `copies=3` an encrypted dataset inherits
/// from an unencrypted ancestor is capped at 2: docs/encryption.md.)
pub(crate) fn refuse_three_copies(copies: Option<&str>, encrypted: bool) -> Result<()> {
    if encrypted && copies == Some("3") {
        return Err(DsError::BadValue("copies=3 is not possible with encryption (an encrypted block has room for 2 copies)".into()));
    }
    Ok(())
}

/// The associated data a master key is wrapped with: its key guid.
fn aad(key_guid: u64) -> [u8; 8] {
    key_guid.to_le_bytes()
}

/// A new wrapping key (a new root, or `change-key`): the KDF for `format`
/// (PBKDF2 with `pbkdf2iters` for a passphrase when given, else the
/// default), over `material` or what `location` holds.
fn new_wrapping_key(format: KeyFormat, location: &KeyLocation, pbkdf2iters: Option<u64>, material: Option<&KeyMaterial>) -> Result<WrappingKey> {
    let kdf = match pbkdf2iters {
        Some(n) if format == KeyFormat::Passphrase => Kdf::pbkdf2_for_new_key(n)?,
        Some(_) => return Err(DsError::BadValue("pbkdf2iters applies to keyformat=passphrase only".into())),
        None => Kdf::default_for(format),
    };
    let read;
    let material = match (material, location) {
        (Some(m), _) => m,
        (None, KeyLocation::File(_)) => {
            read = KeyMaterial::read(format, location)?;
            &read
        }
        (None, KeyLocation::Prompt) => return Err(DsError::BadValue("keylocation=prompt and no key was entered".into())),
    };
    if material.format() != format {
        return Err(DsError::BadValue(format!("the key given is {}, keyformat is {format}", material.format())));
    }
    Ok(WrappingKey::new(material, kdf)?)
}

/// A new dataset's master key and key guid, wrapped by its root's wrapping
/// key: its record and its block keys.
fn new_master_key(name: &str, cipher: Cipher, root: u64, wrapping: &WrappingKey, keylocation: Option<String>) -> Result<(CryptRecord, Arc<BlockKeys>)> {
    let master = MasterKey::generate()?;
    let key_guid = new_guid();
    let blob = wrap(&master, wrapping, &aad(key_guid))?;
    let record = CryptRecord { cipher: cipher.name().to_string(), key_guid, root, wrapped: hex(&blob.encode()), keylocation };
    let keys = BlockKeys::new(cipher, &master).map_err(|e| DsError::BadValue(format!("cannot create '{name}': {e}")))?;
    Ok((record, Arc::new(keys)))
}

/// A new encryption root's record, block keys and wrapping key.
pub(crate) type RootCrypt = (CryptRecord, Arc<BlockKeys>, Arc<WrappingKey>);

/// A new encryption root (`create -o keyformat=…`, or a pool's root
/// dataset with `pool create -O keyformat=…`): its record and block keys,
/// and the wrapping key to keep; None when `req` asks for no encryption.
pub(crate) fn new_root_crypt(
    name: &str,
    guid: u64,
    req: &CryptRequest,
    material: Option<&KeyMaterial>,
) -> Result<Option<RootCrypt>> {
    let cannot = |why: String| DsError::BadValue(format!("cannot create '{name}': {why}"));
    let Some(format) = req.keyformat else {
        if req.encryption.flatten().is_some() || req.keylocation.is_some() || req.pbkdf2iters.is_some() {
            return Err(cannot("encryption needs keyformat (a new encryption root)".into()));
        }
        return Ok(None);
    };
    let Some(cipher) = req.encryption.unwrap_or(Some(Cipher::Aes256Gcm)) else {
        return Err(cannot("keyformat, keylocation and pbkdf2iters need encryption".into()));
    };
    let location = req.keylocation.clone().unwrap_or(KeyLocation::Prompt);
    let wrapping = Arc::new(new_wrapping_key(format, &location, req.pbkdf2iters, material).map_err(|e| cannot(e.to_string()))?);
    let (record, keys) = new_master_key(name, cipher, guid, &wrapping, Some(location.to_string()))?;
    Ok(Some((record, keys, wrapping)))
}

/// Wrapping keys of loaded encryption roots, by root dataset guid.
#[derive(Default)]
pub(crate) struct Wrapping(pub(crate) parking_lot::Mutex<HashMap<u64, Arc<WrappingKey>>>);

impl Pool {
    /// The encryption root of `name` (a dataset, or a snapshot's dataset),
    /// if it is encrypted.
    pub fn encryption_root(&self, name: &str) -> Option<String> {
        let dataset = name.split(['@', '#']).next().unwrap_or(name);
        let root = self.record(dataset).ok()?.crypt?.root;
        self.state.read().datasets.iter().find(|(_, r)| r.guid == root).map(|(n, _)| n.clone())
    }

    /// Whether `name`'s key is loaded (true when it is not encrypted).
    pub fn key_available(&self, name: &str) -> bool {
        let dataset = name.split(['@', '#']).next().unwrap_or(name);
        match self.record(dataset).ok().and_then(|r| r.crypt) {
            None => true,
            Some(c) => self.root_loaded(c.root),
        }
    }

    /// Whether the key of encryption root `root` (a dataset guid) is loaded.
    /// (A dataset's key status is its root's: two roots may hold the same
    /// master key — two raw copies of one source — and loading one does
    /// not make the other available.)
    fn root_loaded(&self, root: u64) -> bool {
        self.wrapping.0.lock().contains_key(&root)
    }

    /// Forgets that root `root`'s key is loaded (its dataset was replaced).
    pub(crate) fn forget_root_key(&self, root: u64) {
        self.wrapping.0.lock().remove(&root);
    }

    /// A dataset a receive just created under encryption root `c.root`
    /// gets its key loaded if that root's is (as `create` does).
    pub(crate) fn load_member_key(&self, name: &str, c: &CryptRecord) -> Result<()> {
        let Some(wrapping) = self.wrapping.0.lock().get(&c.root).cloned() else { return Ok(()) };
        if self.obj().keys_loaded(c.key_guid) {
            return Ok(());
        }
        let master = unwrap_with(&c.blob()?, &wrapping, &aad(c.key_guid))
            .map_err(|e| DsError::Corrupt(format!("the wrapped key of '{name}' does not open with its root's key: {e}")))?;
        let keys = BlockKeys::new(c.cipher()?, &master).map_err(|e| DsError::BadValue(format!("'{name}': {e}")))?;
        self.obj().load_keys(c.key_guid, Arc::new(keys));
        Ok(())
    }

    /// The encryption of a new dataset `name` whose record will have
    /// `guid`, following `req` and its parent; loads its keys. None: not
    /// encrypted.
    /// Whether dataset `name`, about to be created with `req`, will be
    /// encrypted: a new root, or under an encrypted ancestor (the nearest
    /// that exists; missing parents made on the way follow it).
    pub(crate) fn will_be_encrypted(&self, name: &str, req: &CryptRequest) -> bool {
        match req.encryption {
            Some(cipher) => cipher.is_some(),
            None if req.keyformat.is_some() => true,
            None => {
                let mut current = props::parent_name(name);
                while let Some(parent) = current {
                    if self.exists(parent) {
                        return self.encryption_root(parent).is_some();
                    }
                    current = props::parent_name(parent);
                }
                false
            }
        }
    }

    pub(crate) fn crypt_for_new(
        &self,
        name: &str,
        guid: u64,
        req: &CryptRequest,
        material: Option<&KeyMaterial>,
    ) -> Result<Option<(CryptRecord, Crypt)>> {
        let parent = props::parent_name(name).and_then(|p| self.record(p).ok().map(|r| (p.to_string(), r)));
        let parent_crypt = parent.as_ref().and_then(|(n, r)| r.crypt.clone().map(|c| (n.clone(), c)));
        let cannot = |why: String| DsError::BadValue(format!("cannot create '{name}': {why}"));
        if req.encryption == Some(None) {
            if let Some((p, _)) = &parent_crypt {
                return Err(cannot(format!("an unencrypted dataset cannot be created under encrypted '{p}'")));
            }
            if req.keyformat.is_some() || req.keylocation.is_some() || req.pbkdf2iters.is_some() {
                return Err(cannot("keyformat, keylocation and pbkdf2iters need encryption".into()));
            }
            return Ok(None);
        }
        if req.keyformat.is_none() && (req.keylocation.is_some() || req.pbkdf2iters.is_some()) {
            return Err(cannot("keylocation and pbkdf2iters need keyformat (a new encryption root)".into()));
        }
        // `keyformat` makes a new encryption root.
        let root = if req.keyformat.is_some() { new_root_crypt(name, guid, req, material)? } else { None };
        if let Some((record, keys, wrapping)) = root {
            self.obj().load_keys(record.key_guid, keys);
            self.wrapping.0.lock().insert(guid, wrapping);
            let crypt = record.crypt()?;
            return Ok(Some((record, crypt)));
        }
        // Else the parent's root, if it has one.
        let Some((pname, pc)) = &parent_crypt else {
            if req.encryption.is_some() {
                return Err(cannot("encryption needs keyformat (a new encryption root)".into()));
            }
            return Ok(None);
        };
        let wrapping = self.wrapping.0.lock().get(&pc.root).cloned().ok_or_else(|| {
            cannot(format!("the key of encryption root '{}' is not loaded", self.encryption_root(pname).unwrap_or_default()))
        })?;
        let cipher = req.encryption.flatten().map_or_else(|| pc.cipher(), Ok)?;
        let (record, keys) = new_master_key(name, cipher, pc.root, &wrapping, None)?;
        self.obj().load_keys(record.key_guid, keys);
        let crypt = record.crypt()?;
        Ok(Some((record, crypt)))
    }

    /// `name`'s record and crypt record, if it is an encryption root.
    fn root_record(&self, name: &str) -> Result<(crate::DatasetRecord, CryptRecord)> {
        let record = self.record(name)?;
        let crypt = record.crypt.clone().ok_or_else(|| DsError::BadValue(format!("'{name}' is not encrypted")))?;
        if crypt.root != record.guid {
            let root = self.encryption_root(name).unwrap_or_default();
            return Err(DsError::BadValue(format!("'{name}' is not an encryption root (its encryption root is '{root}')")));
        }
        Ok((record, crypt))
    }

    /// Datasets whose encryption root is the dataset with guid `root`.
    fn members(&self, root: u64) -> Vec<(String, CryptRecord)> {
        let state = self.state.read();
        state.datasets.iter().filter_map(|(n, r)| r.crypt.clone().filter(|c| c.root == root).map(|c| (n.clone(), c))).collect()
    }

    /// Key material for encryption root `name` read from `location` (its
    /// `keylocation` unless another is given).
    fn read_material(&self, name: &str, crypt: &CryptRecord, location: Option<&KeyLocation>) -> Result<KeyMaterial> {
        let format = crypt.blob()?.format();
        let stored: KeyLocation = crypt.keylocation.as_deref().unwrap_or("prompt").parse()?;
        match location.unwrap_or(&stored) {
            KeyLocation::Prompt => Err(DsError::BadValue(format!("'{name}': keylocation=prompt: the key must be entered"))),
            loc => Ok(KeyMaterial::read(format, loc)?),
        }
    }

    /// `load-key`: unwraps the master keys of every dataset under encryption
    /// root `name` and loads them. `check_only` (`-n`): only says whether
    /// the key is right. A wrong key changes nothing.
    pub fn load_key(&self, name: &str, material: Option<&KeyMaterial>, location: Option<&KeyLocation>, check_only: bool) -> Result<()> {
        let (record, crypt) = self.root_record(name)?;
        if self.root_loaded(record.guid) && !check_only {
            return Err(DsError::BadValue(format!("key already loaded for '{name}'")));
        }
        let read;
        let material = match material {
            Some(m) => m,
            None => {
                read = self.read_material(name, &crypt, location)?;
                &read
            }
        };
        let blob = crypt.blob()?;
        let wrapping = WrappingKey::for_wrapped(&blob, material)?;
        unwrap_with(&blob, &wrapping, &aad(crypt.key_guid))?;
        if check_only {
            return Ok(());
        }
        let mut loaded = Vec::new();
        for (member, c) in self.members(record.guid) {
            let master = unwrap_with(&c.blob()?, &wrapping, &aad(c.key_guid))
                .map_err(|e| DsError::Corrupt(format!("the wrapped key of '{member}' does not open with its root's key: {e}")))?;
            let keys = BlockKeys::new(c.cipher()?, &master).map_err(|e| DsError::BadValue(format!("'{member}': {e}")))?;
            loaded.push((c.key_guid, Arc::new(keys)));
        }
        for (guid, keys) in loaded {
            self.obj().load_keys(guid, keys);
        }
        self.wrapping.0.lock().insert(record.guid, Arc::new(wrapping));
        Ok(())
    }

    /// `unload-key`: forgets the keys of every dataset under encryption root
    /// `name` (its file systems must be unmounted first: the daemon does).
    pub fn unload_key(&self, name: &str) -> Result<()> {
        let (record, _) = self.root_record(name)?;
        if !self.root_loaded(record.guid) {
            return Err(DsError::BadValue(format!("key already unloaded for '{name}'")));
        }
        // Master keys another loaded root also holds (a second raw copy of
        // the same source) stay in the pool's key ring.
        let others: std::collections::HashSet<u64> = self.wrapping.0.lock().keys().copied().filter(|&r| r != record.guid).collect();
        let kept: std::collections::HashSet<u64> =
            self.state.read().datasets.values().filter_map(|r| r.crypt.as_ref()).filter(|c| others.contains(&c.root)).map(|c| c.key_guid).collect();
        for (_, c) in self.members(record.guid) {
            if self.obj().keys_loaded(c.key_guid) && !kept.contains(&c.key_guid) {
                self.obj().unload_keys(c.key_guid)?;
            }
        }
        self.wrapping.0.lock().remove(&record.guid);
        Ok(())
    }

    /// `change-key`: wraps the master keys under root `name` with a new
    /// wrapping key (new format, location or cost as given); no block is
    /// rewritten. The key must be loaded. On a dataset that is not an
    /// encryption root, it becomes one: it and the descendants that share
    /// its root move to the new key (keyformat defaults to the old root's,
    /// keylocation to `prompt`), as `zfs change-key` does.
    pub fn change_key(
        &self,
        name: &str,
        format: Option<KeyFormat>,
        location: Option<KeyLocation>,
        pbkdf2iters: Option<u64>,
        material: Option<&KeyMaterial>,
    ) -> Result<()> {
        let _change = self.change.lock();
        let record = self.record(name)?;
        let crypt = record.crypt.clone().ok_or_else(|| DsError::BadValue(format!("'{name}' is not encrypted")))?;
        let is_root = crypt.root == record.guid;
        let old = self.root_wrapping(name, crypt.root)?;
        let format = format.unwrap_or(crypt.blob()?.format());
        let location = match (location, is_root) {
            (Some(l), _) => l,
            (None, true) => crypt.keylocation.as_deref().unwrap_or("prompt").parse()?,
            (None, false) => KeyLocation::Prompt,
        };
        let new = Arc::new(new_wrapping_key(format, &location, pbkdf2iters, material).map_err(|e| DsError::BadValue(format!("'{name}': {e}")))?);
        // A root's key covers all its members, clones outside its tree
        // included; a new root takes the members at or under it.
        let moved = if is_root { self.members(record.guid) } else { self.members_at(crypt.root, name) };
        self.rewrap(moved, &old, &new, record.guid, Some((name, location.to_string())))?;
        self.wrapping.0.lock().insert(record.guid, new);
        Ok(())
    }

    /// `change-key -i`: encryption root `name` (and every dataset under it
    /// that shares its root) joins its parent's encryption root: their
    /// master keys are rewrapped under the parent root's wrapping key, and
    /// one `load-key` of that root opens them from then on. Both keys must
    /// be loaded; no block is rewritten.
    pub fn change_key_inherit(&self, name: &str) -> Result<()> {
        let _change = self.change.lock();
        let (record, _) = self.root_record(name)?;
        let parent = props::parent_name(name).ok_or_else(|| DsError::BadValue(format!("'{name}' has no parent to inherit a key from")))?;
        let parent_crypt = self
            .record(parent)?
            .crypt
            .ok_or_else(|| DsError::BadValue(format!("parent '{parent}' is not encrypted: there is no key to inherit")))?;
        let old = self.root_wrapping(name, record.guid)?;
        let new = self.root_wrapping(parent, parent_crypt.root)?;
        let moved = self.members(record.guid);
        self.rewrap(moved, &old, &new, parent_crypt.root, None)?;
        self.wrapping.0.lock().remove(&record.guid);
        Ok(())
    }

    /// The loaded wrapping key of root `root` (`name` is in it).
    fn root_wrapping(&self, name: &str, root: u64) -> Result<Arc<WrappingKey>> {
        self.wrapping.0.lock().get(&root).cloned().ok_or_else(|| {
            let root = self.encryption_root(name).unwrap_or_else(|| name.to_string());
            DsError::BadValue(format!("key for '{root}' is not loaded"))
        })
    }

    /// Members of root `root` at or under `name`.
    fn members_at(&self, root: u64, name: &str) -> Vec<(String, CryptRecord)> {
        let below = format!("{name}/");
        self.members(root).into_iter().filter(|(n, _)| n == name || n.starts_with(&below)).collect()
    }

    /// Rewraps `moved` from `old` to `new`, makes `root` their encryption
    /// root, and stores them in one txg; `keylocation` goes on the dataset
    /// it names (the new root), every other record drops its own.
    fn rewrap(
        &self,
        moved: Vec<(String, CryptRecord)>,
        old: &WrappingKey,
        new: &WrappingKey,
        root: u64,
        keylocation: Option<(&str, String)>,
    ) -> Result<()> {
        let mut updated = Vec::new();
        for (member, mut c) in moved {
            let master = unwrap_with(&c.blob()?, old, &aad(c.key_guid))
                .map_err(|e| DsError::Corrupt(format!("the wrapped key of '{member}' does not open with its root's key: {e}")))?;
            c.wrapped = hex(&wrap(&master, new, &aad(c.key_guid))?.encode());
            c.root = root;
            c.keylocation = keylocation.as_ref().filter(|(n, _)| *n == member).map(|(_, l)| l.clone());
            let mut r = self.record(&member)?;
            r.crypt = Some(c);
            updated.push((member, r));
        }
        let tx = self.obj().begin();
        for (member, r) in &updated {
            self.store_record(&tx, member, r)?;
        }
        drop(tx);
        self.obj().sync()?;
        let mut state = self.state.write();
        for (member, r) in updated {
            state.datasets.insert(member, r);
        }
        Ok(())
    }

    /// `set keylocation=` on an encryption root.
    pub(crate) fn set_keylocation(&self, name: &str, value: &str) -> Result<()> {
        let location: KeyLocation = value.parse()?;
        let _change = self.change.lock();
        let (mut record, mut crypt) = self.root_record(name)?;
        crypt.keylocation = Some(location.to_string());
        record.crypt = Some(crypt);
        let tx = self.obj().begin();
        self.store_record(&tx, name, &record)?;
        drop(tx);
        self.obj().sync()?;
        self.state.write().datasets.insert(name.to_string(), record);
        Ok(())
    }

    /// The encryption properties of dataset `name`, as `zfs get` shows them.
    pub(crate) fn crypt_property(&self, name: &str, prop: &str) -> Option<(String, Source)> {
        let record = self.record(name.split(['@', '#']).next().unwrap_or(name)).ok()?;
        let crypt = record.crypt.as_ref();
        let is_root = crypt.is_some_and(|c| c.root == record.guid) && !name.contains(['@', '#']);
        let blob = crypt.and_then(|c| c.blob().ok());
        let none = || ("none".to_string(), Source::None);
        Some(match prop {
            "encryption" => (crypt.map_or("off".to_string(), |c| c.cipher.clone()), Source::None),
            "keyformat" => blob.map_or_else(none, |b| (b.format().to_string(), Source::None)),
            "keylocation" => match (is_root, crypt) {
                (true, Some(c)) => (c.keylocation.clone().unwrap_or_else(|| "prompt".into()), Source::Local),
                _ => none(),
            },
            "pbkdf2iters" => {
                let iters = match blob.map(|b| b.kdf()) {
                    Some(Kdf::Pbkdf2Sha512 { iters }) => iters,
                    _ => 0,
                };
                (iters.to_string(), Source::None)
            }
            "encryptionroot" => (self.encryption_root(name).unwrap_or_else(|| "-".into()), Source::None),
            "keystatus" => match crypt {
                None => ("-".to_string(), Source::None),
                Some(c) if self.root_loaded(c.root) => ("available".to_string(), Source::None),
                Some(_) => ("unavailable".to_string(), Source::None),
            },
            _ => return None,
        })
    }
}
