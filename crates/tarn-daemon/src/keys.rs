//! `load-key`, `unload-key`, `change-key` and the key roots they walk.
//!
//! The CLI asks for the roots (`KeyRoots`), prompts for the ones whose
//! `keylocation` is `prompt`, and sends each root's key material in its
//! own request; a root with a key file is loaded from the file here (the
//! daemon runs as root, as `zfs load-key` does). Key material comes in
//! its request as `KeyBytes` (a `Secret`: `key_bytes.rs`), reaches
//! tarn-keys from there and is dropped with it: it is never logged,
//! recorded in the history (the history keeps the argv the user typed,
//! which holds no key) or written to the state directory.
//!
//! `unload-key` unmounts the root's file systems first (a busy one stops
//! it, nothing unloaded); `load-key` does not mount (as OpenZFS: `mount -a`
//! or `pool import -l` does).

use serde::{Deserialize, Serialize};
use tarn_keys::{KeyFormat, KeyLocation, KeyMaterial};

use crate::daemon::{pool_of, Daemon, Imported};
use crate::proto::Response;

type HandlerResult = Result<Response, String>;

/// One encryption root, as `KeyRoots` lists it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct KeyRoot {
    pub name: String,
    pub keyformat: String,
    pub keylocation: String,
    pub loaded: bool,
}

/// Key material sent by the CLI, checked for the root's format.
pub(crate) fn material(format: &str, bytes: &[u8]) -> Result<KeyMaterial, String> {
    let format: KeyFormat = format.parse().map_err(|e: tarn_keys::KeyError| e.to_string())?;
    KeyMaterial::from_bytes(format, bytes).map_err(|e| e.to_string())
}

/// The key a create (`create`, `pool create`) carries, in the format its
/// last `keyformat=` property names; None without a key.
pub(crate) fn creation_material(props: &[(String, String)], key: Option<&[u8]>) -> Result<Option<KeyMaterial>, String> {
    let Some(bytes) = key else { return Ok(None) };
    let format = props.iter().rev().find(|(p, _)| p == "keyformat").map_or("", |(_, v)| v.as_str());
    material(format, bytes).map(Some)
}

fn prop(imported: &Imported, name: &str, p: &str) -> String {
    imported.ds.get_property(name, p, true, None).map(|v| v.value).unwrap_or_default()
}

/// The encryption roots at or under `names` (`recursive`), or all of them.
fn roots(imported: &Imported, names: Option<(&str, bool)>) -> Vec<KeyRoot> {
    imported
        .ds
        .list()
        .into_iter()
        .filter(|n| match names {
            None => true,
            Some((top, recursive)) => n == top || (recursive && n.starts_with(&format!("{top}/"))),
        })
        .filter(|n| imported.ds.encryption_root(n).as_deref() == Some(n.as_str()))
        .map(|n| KeyRoot {
            keyformat: prop(imported, &n, "keyformat"),
            keylocation: prop(imported, &n, "keylocation"),
            loaded: imported.ds.key_available(&n),
            name: n,
        })
        .collect()
}

/// Loads every root of `imported` whose key is in a file (`pool import
/// -l` and the re-import at daemon start); returns warning lines for the
/// ones that failed. Roots whose keylocation is `prompt` are left to the CLI.
pub(crate) fn load_file_keys(imported: &Imported) -> String {
    let mut warnings = String::new();
    for root in roots(imported, None) {
        if root.loaded || !root.keylocation.starts_with("file://") {
            continue;
        }
        if let Err(e) = imported.ds.load_key(&root.name, None, None, false) {
            warnings.push_str(&format!("warning: cannot load the key of '{}': {e}\n", root.name));
        }
    }
    warnings
}

impl Daemon {
    /// `KeyRoots`: data `Vec<KeyRoot>`, for `datasets` (with `recursive`,
    /// their descendants) or every imported pool's (`all`).
    pub(crate) fn key_roots(&self, datasets: &[String], recursive: bool, all: bool) -> HandlerResult {
        let pools = self.pools.lock();
        let mut out = Vec::new();
        if all {
            for imported in pools.values() {
                out.extend(roots(imported, None));
            }
        } else {
            for name in datasets {
                let imported = pools.get(pool_of(name)).filter(|p| p.ds.exists(name)).ok_or_else(|| format!("cannot open '{name}': dataset does not exist"))?;
                let found = roots(imported, Some((name, recursive)));
                if found.is_empty() && !recursive {
                    let why = match imported.ds.encryption_root(name) {
                        None => "not encrypted".to_string(),
                        Some(root) => format!("not an encryption root (its encryption root is '{root}')"),
                    };
                    return Err(format!("'{name}': {why}"));
                }
                out.extend(found);
            }
        }
        Ok(Response::data(serde_json::to_value(out).map_err(|e| e.to_string())?))
    }

    /// `load-key [-n] [-L location] ROOT` with the material the CLI read
    /// (`key`), or from the location.
    pub(crate) fn load_key(&self, dataset: &str, noop: bool, location: Option<&str>, key: Option<&[u8]>) -> HandlerResult {
        let fail = |why: String| format!("cannot load key for '{dataset}': {why}");
        let pools = self.pools.lock();
        let imported = pools.get(pool_of(dataset)).filter(|p| p.ds.exists(dataset)).ok_or_else(|| fail("dataset does not exist".into()))?;
        let location: Option<KeyLocation> = location.map(|l| l.parse().map_err(|e: tarn_keys::KeyError| fail(e.to_string()))).transpose()?;
        let material = match key {
            Some(bytes) => Some(material(&prop(imported, dataset, "keyformat"), bytes).map_err(fail)?),
            None => None,
        };
        imported.ds.load_key(dataset, material.as_ref(), location.as_ref(), noop).map_err(|e| fail(e.to_string()))?;
        Ok(Response::text(""))
    }

    /// `unload-key ROOT`: unmounts the root's datasets, then forgets their keys.
    pub(crate) fn unload_key(&self, dataset: &str) -> HandlerResult {
        let fail = |why: String| format!("cannot unload key for '{dataset}': {why}");
        let mut pools = self.pools.lock();
        let imported = pools.get_mut(pool_of(dataset)).filter(|p| p.ds.exists(dataset)).ok_or_else(|| fail("dataset does not exist".into()))?;
        let members: Vec<String> = imported
            .ds
            .list()
            .into_iter()
            .filter(|n| imported.ds.encryption_root(n).as_deref() == Some(dataset))
            .collect();
        if members.is_empty() {
            return Err(fail("not an encryption root".into()));
        }
        if members.iter().any(|n| imported.busy.contains(n)) {
            return Err(fail("a dataset under it is busy (a receive or rollback is in progress)".into()));
        }
        crate::dataset_ops::unmount_names(imported, &members, false).map_err(fail)?;
        if let Err(e) = imported.ds.unload_key(dataset) {
            for n in &members {
                let _ = crate::daemon::mount_dataset(imported, n);
            }
            return Err(fail(e.to_string()));
        }
        Ok(Response::text(""))
    }

    /// `change-key [-o keyformat=…] [-o keylocation=…] [-o pbkdf2iters=…] ROOT`.
    pub(crate) fn change_key(&self, dataset: &str, props: &[(String, String)], key: Option<&[u8]>, inherit: bool) -> HandlerResult {
        let fail = |why: String| format!("cannot change key for '{dataset}': {why}");
        let pools = self.pools.lock();
        let imported = pools.get(pool_of(dataset)).filter(|p| p.ds.exists(dataset)).ok_or_else(|| fail("dataset does not exist".into()))?;
        if inherit {
            if !props.is_empty() || key.is_some() {
                return Err(fail("-i takes no key and no -o properties".into()));
            }
            imported.ds.change_key_inherit(dataset).map_err(|e| fail(e.to_string()))?;
            return Ok(Response::text(""));
        }
        let (mut format, mut location, mut iters) = (None, None, None);
        for (p, v) in props {
            match p.as_str() {
                "keyformat" => format = Some(v.parse::<KeyFormat>().map_err(|e| fail(e.to_string()))?),
                "keylocation" => location = Some(v.parse::<KeyLocation>().map_err(|e| fail(e.to_string()))?),
                "pbkdf2iters" => iters = Some(v.parse::<u64>().map_err(|_| fail(format!("invalid pbkdf2iters '{v}': must be a number")))?),
                other => return Err(fail(format!("only keyformat, keylocation and pbkdf2iters can be given, not '{other}'"))),
            }
        }
        let format_now = format.map_or_else(|| prop(imported, dataset, "keyformat"), |f| f.to_string());
        let material = match key {
            Some(bytes) => Some(material(&format_now, bytes).map_err(fail)?),
            None => None,
        };
        imported.ds.change_key(dataset, format, location, iters, material.as_ref()).map_err(|e| fail(e.to_string()))?;
        Ok(Response::text(""))
    }
}
