//! A dataset's own property values, and the verbs that change them.
//!
//! A dataset record (pool.rs; on disk: docs/on-disk-format.md) keeps:
//! - `props`: the *local* values (`tarn set`, `create -o`, `recv -o`);
//! - `received`: the values the last receive that carried properties
//!   brought (`send -p`/`-R`), replaced whole by each such receive, less
//!   the `-x` ones;
//! - `masked`: names whose received value `tarn inherit` set aside.
//!
//! A dataset's *own* value of a property is its local value, else its
//! received value unless masked. The effective value (props.rs) is the own
//! value, else the nearest ancestor's own value (inheritable properties),
//! else the default. Hence, as in ZFS:
//! - `tarn set` writes a local value and lifts the property's mask;
//! - `tarn inherit` removes the local value and masks a received one: the
//!   inherited value (or the default) wins;
//! - `tarn inherit -S` removes the local value and the mask: the received
//!   value is back (without one, the value is inherited);
//! - a receive replaces the received map (when its package carries
//!   properties) and sets `-o` values locally; it never touches the other
//!   local values or the masks.
//!
//! Invariant: every reader of a dataset's own value goes through
//! [`DatasetRecord::own_value`] (settings, quota, refreservation, volsize,
//! `get`, `send -p`), so a received value counts wherever a local one does.

use std::collections::{BTreeMap, BTreeSet};

use tarn_obj::WriteProps;

use crate::pool::{DatasetRecord, Pool, PropValue, State};
use crate::props::{self, Own, Source};
use crate::replication::{PackageDataset, PackageHeader, RecvSpec};
use crate::{DsError, Result};

impl DatasetRecord {
    /// The dataset's own value of `prop` and which one it is.
    pub fn own_value(&self, prop: &str) -> Option<(&String, Own)> {
        if let Some(value) = self.props.get(prop) {
            return Some((value, Own::Local));
        }
        if self.masked.contains(prop) {
            return None;
        }
        self.received.get(prop).map(|value| (value, Own::Received))
    }

    /// The dataset's own value of `prop`, local or received.
    pub fn own(&self, prop: &str) -> Option<&String> {
        self.own_value(prop).map(|(value, _)| value)
    }

    /// Every own value (what `send -p` sends): the unmasked received
    /// values with the local ones over them.
    pub fn own_props(&self) -> BTreeMap<String, String> {
        let mut out: BTreeMap<String, String> =
            self.received.iter().filter(|(k, _)| !self.masked.contains(*k)).map(|(k, v)| (k.clone(), v.clone())).collect();
        out.extend(self.props.iter().map(|(k, v)| (k.clone(), v.clone())));
        out
    }
}

/// `tarn inherit` (the received value is masked) or `tarn inherit -S`
/// (back to the received value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InheritTo {
    /// The inherited value (or the default), even over a received one.
    Inherited,
    /// The received value, if the dataset has one.
    Received,
}

impl Pool {
    /// Own values of the datasets in `state`, for [`props::effective`].
    pub(crate) fn own_lookup(state: &State) -> impl Fn(&str, &str) -> Option<(String, Own)> + '_ {
        move |dataset: &str, prop: &str| {
            state.datasets.get(dataset).and_then(|r| r.own_value(prop)).map(|(value, own)| (value.clone(), own))
        }
    }

    /// Set a property locally (lifting its mask); returns the canonical
    /// property name and the datasets whose effective value may have
    /// changed (the dataset and, for inheritable properties, its
    /// descendants).
    pub fn set_property(&self, name: &str, prop: &str, value: &str) -> Result<(String, Vec<String>)> {
        if prop == "keylocation" {
            self.set_keylocation(name, value)?;
            return Ok((prop.to_string(), vec![name.to_string()]));
        }
        if prop == "volsize" {
            self.set_volsize(name, value, false)?;
            return Ok((prop.to_string(), vec![name.to_string()]));
        }
        let (prop, stored) = props::validate(prop, value)?;
        let _change = self.change.lock();
        let mut record = self.record(name)?;
        if prop == "copies" {
            crate::encryption::refuse_three_copies(Some(&stored), record.crypt.is_some())?;
        }
        if prop == "quota" {
            if let Ok(quota) = stored.parse::<u64>() {
                let used = self.used_bytes(name);
                if quota < used {
                    return Err(DsError::BadValue(format!(
                        "cannot set quota of '{name}' to {}: below its current usage of {}",
                        crate::size::format_bytes(quota),
                        crate::size::format_bytes(used)
                    )));
                }
            }
        }
        if prop == "refreservation" {
            if let Ok(bytes) = stored.parse::<u64>() {
                self.check_refreservation(name, bytes)?;
            }
        }
        record.props.insert(prop.clone(), stored);
        record.masked.remove(&prop);
        let tx = self.obj.begin();
        self.store_record(&tx, name, &record)?;
        drop(tx);
        self.state.write().datasets.insert(name.to_string(), record);
        let affected = self.affected_by(name, &prop);
        for dataset in &affected {
            self.reapply_write_props(dataset)?;
        }
        self.obj.sync()?;
        Ok((prop, affected))
    }

    /// The datasets whose effective value of `prop` follows `name`'s.
    fn affected_by(&self, name: &str, prop: &str) -> Vec<String> {
        let inheritable = props::is_user_property(prop) || props::lookup(prop).is_ok_and(|d| d.inheritable);
        if inheritable {
            self.subtree(name)
        } else {
            vec![name.to_string()]
        }
    }

    /// `zfs inherit`: [`Pool::inherit_property_to`] the inherited value.
    pub fn inherit_property(&self, name: &str, prop: &str, recursive: bool) -> Result<(String, Vec<String>)> {
        self.inherit_property_to(name, prop, recursive, InheritTo::Inherited)
    }

    /// `zfs inherit [-S]`: drop the local setting of `prop` from `name`
    /// (and with `recursive` from every descendant). `to` says what takes
    /// its place: the inherited value (a received value is masked), or the
    /// received value (its mask lifted). Returns the canonical name and
    /// the datasets whose effective value may change.
    pub fn inherit_property_to(&self, name: &str, prop: &str, recursive: bool, to: InheritTo) -> Result<(String, Vec<String>)> {
        props::check_name(prop)?;
        let prop = props::canonical_name(prop);
        if !props::is_user_property(&prop) {
            let def = props::lookup(&prop)?;
            if !def.settable {
                return Err(DsError::BadValue(format!("'{prop}' property is read-only")));
            }
            // A property that is not inherited can still go back to its
            // received value.
            if !def.inheritable && to == InheritTo::Inherited {
                return Err(DsError::BadValue(format!(
                    "'{prop}' property cannot be inherited (set it to its default instead, or revert it to its received value with -S)"
                )));
            }
        }
        let _change = self.change.lock();
        if !self.exists(name) {
            return Err(DsError::NotFound(name.to_string()));
        }
        let targets = if recursive { self.subtree(name) } else { vec![name.to_string()] };
        let mut changed = Vec::new();
        for dataset in &targets {
            let mut record = self.record(dataset)?;
            let before = record.clone();
            record.props.remove(&prop);
            match to {
                InheritTo::Inherited if record.received.contains_key(&prop) => {
                    record.masked.insert(prop.clone());
                }
                InheritTo::Inherited => {}
                InheritTo::Received => {
                    record.masked.remove(&prop);
                }
            }
            if record != before {
                changed.push((dataset.clone(), record));
            }
        }
        if !changed.is_empty() {
            let tx = self.obj.begin();
            for (dataset, record) in &changed {
                self.store_record(&tx, dataset, record)?;
            }
            drop(tx);
            let mut state = self.state.write();
            for (dataset, record) in changed {
                state.datasets.insert(dataset, record);
            }
        }
        let affected = self.affected_by(name, &prop);
        for dataset in &affected {
            self.reapply_write_props(dataset)?;
        }
        self.obj.sync()?;
        Ok((prop, affected))
    }

    /// The user properties in effect on `name` (its own or inherited),
    /// sorted by name.
    pub fn user_properties(&self, name: &str) -> Vec<String> {
        let state = self.state.read();
        let mut names = BTreeSet::new();
        let mut current = Some(name);
        while let Some(dataset) = current {
            if let Some(record) = state.datasets.get(dataset) {
                names.extend(record.own_props().into_keys().filter(|k| props::is_user_property(k)));
            }
            current = props::parent_name(dataset);
        }
        names.into_iter().collect()
    }

    /// A user property's effective value and source; `-` and no source
    /// when no dataset up the tree has a value of its own.
    pub(crate) fn user_property(&self, name: &str, prop: &str) -> PropValue {
        let state = self.state.read();
        let lookup = Self::own_lookup(&state);
        let received = state.datasets.get(name).and_then(|r| r.received.get(prop).cloned());
        let mut current = Some(name);
        while let Some(dataset) = current {
            if let Some((value, own)) = lookup(dataset, prop) {
                let source = if dataset != name {
                    Source::Inherited(dataset.to_string())
                } else if own == Own::Local {
                    Source::Local
                } else {
                    Source::Received
                };
                return PropValue::new(prop, value, &source).with_received(received);
            }
            current = props::parent_name(dataset);
        }
        PropValue::new(prop, "-".to_string(), &Source::None).with_received(received)
    }

    /// The received value of a settable property of dataset `name` (the
    /// `received` column of `tarn get`), as `get` prints values.
    pub(crate) fn received_display(&self, name: &str, prop: &str, parsable: bool) -> Option<String> {
        let state = self.state.read();
        let stored = state.datasets.get(name)?.received.get(prop)?;
        Some(props::display_value(prop, stored, parsable))
    }

    /// The write properties dataset `name` would have with `record` as its
    /// record (what a receive writes its data with).
    pub(crate) fn write_props_as(&self, name: &str, record: &DatasetRecord) -> WriteProps {
        let state = self.state.read();
        let others = Self::own_lookup(&state);
        let lookup = |dataset: &str, prop: &str| {
            if dataset == name {
                record.own_value(prop).map(|(value, own)| (value.clone(), own))
            } else {
                others(dataset, prop)
            }
        };
        let s = props::settings(name, &lookup);
        WriteProps { compression: s.compression, checksum: s.checksum, copies: s.copies, primarycache: s.primarycache, secondarycache: s.secondarycache }
    }

    /// What receiving package dataset `entry` at `dst` does to the
    /// dataset's own values (`existing`: its record, if it exists).
    /// Values that do not validate, or a received refreservation that
    /// does not fit, are left out with a warning.
    pub(crate) fn recv_props(
        &self,
        spec: &RecvSpec,
        header: &PackageHeader,
        entry: &PackageDataset,
        existing: Option<&DatasetRecord>,
        dst: &str,
        warnings: &mut Vec<String>,
    ) -> RecvProps {
        let top = entry.name.is_empty();
        let set: Vec<(String, String)> =
            spec.set.iter().filter_map(|(k, v)| props::validate(k, v).ok()).map(|(p, stored)| (p.to_string(), stored)).collect();
        let mut out = RecvProps::default();
        if top {
            out.local = set.iter().cloned().collect();
        }
        if header.props {
            let mut received = BTreeMap::new();
            for (k, v) in &entry.props {
                if spec.exclude.iter().any(|x| props::canonical_name(x) == *k) {
                    continue;
                }
                match props::validate(k, v) {
                    Ok((p, stored)) => {
                        received.insert(p.to_string(), stored);
                    }
                    Err(e) => warnings.push(format!("property '{k}' of '{dst}' not received: {e}")),
                }
            }
            // `-o` on a descendant: as if `tarn inherit` ran there, so the
            // top's value reaches it.
            if !top {
                out.mask = set.iter().map(|(p, _)| p.clone()).filter(|p| received.contains_key(p)).collect();
            }
            out.received = Some(received);
        }
        // A received refreservation must fit, as a local one must.
        let mut after = existing.cloned().unwrap_or_default();
        out.apply(&mut after);
        if let Some((value, Own::Received)) = after.own_value("refreservation") {
            if let Ok(bytes) = value.parse::<u64>() {
                if let Err(e) = self.check_refreservation(dst, bytes) {
                    warnings.push(format!("property 'refreservation' of '{dst}' not received: {e}"));
                    if let Some(received) = out.received.as_mut() {
                        received.remove("refreservation");
                    }
                }
            }
        }
        out
    }
}

/// What a receive does to one dataset's own values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RecvProps {
    /// The package's values, less `-x`: the new received map. `None`: the
    /// package carries no properties (the received map stays).
    pub received: Option<BTreeMap<String, String>>,
    /// `-o` on the top dataset: local values.
    pub local: BTreeMap<String, String>,
    /// `-o` on a descendant that receives a value of it: masked.
    pub mask: BTreeSet<String>,
}

impl RecvProps {
    pub(crate) fn apply(&self, record: &mut DatasetRecord) {
        if let Some(received) = &self.received {
            record.received = received.clone();
        }
        for (k, v) in &self.local {
            record.props.insert(k.clone(), v.clone());
            record.masked.remove(k);
        }
        record.masked.extend(self.mask.iter().cloned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::props::{effective, lookup};

    fn record(local: &[(&str, &str)], received: &[(&str, &str)], masked: &[&str]) -> DatasetRecord {
        let map = |e: &[(&str, &str)]| e.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        DatasetRecord {
            props: map(local),
            received: map(received),
            masked: masked.iter().map(|m| m.to_string()).collect(),
            ..Default::default()
        }
    }

    fn value(tree: &BTreeMap<&str, DatasetRecord>, name: &str, prop: &str) -> (String, Source) {
        let own = |d: &str, p: &str| tree.get(d).and_then(|r| r.own_value(p)).map(|(v, o)| (v.clone(), o));
        effective(lookup(prop).unwrap(), name, &own)
    }

    #[test]
    fn local_then_received_then_inherited_then_default() {
        let tree = BTreeMap::from([
            ("tank", record(&[("compression", "zstd")], &[("atime", "off")], &[])),
            ("tank/a", record(&[("recordsize", "16384")], &[("recordsize", "65536"), ("compression", "off"), ("quota", "1048576")], &[])),
            ("tank/a/b", record(&[], &[("compression", "zstd-3"), ("sync", "always")], &["compression"])),
        ]);
        // Local over received.
        assert_eq!(value(&tree, "tank/a", "recordsize"), ("16384".into(), Source::Local));
        // Received over the inherited value.
        assert_eq!(value(&tree, "tank/a", "compression"), ("off".into(), Source::Received));
        // A masked received value gives way to the nearest ancestor's own
        // value, which may itself be a received one.
        assert_eq!(value(&tree, "tank/a/b", "compression"), ("off".into(), Source::Inherited("tank/a".into())));
        assert_eq!(value(&tree, "tank/a/b", "atime"), ("off".into(), Source::Inherited("tank".into())));
        assert_eq!(value(&tree, "tank/a/b", "sync"), ("always".into(), Source::Received));
        // Not inherited: received on the dataset itself only.
        assert_eq!(value(&tree, "tank/a", "quota"), ("1048576".into(), Source::Received));
        assert_eq!(value(&tree, "tank/a/b", "quota"), ("none".into(), Source::Default));
        assert_eq!(value(&tree, "tank/a/b", "recordsize"), ("16384".into(), Source::Inherited("tank/a".into())));
        assert_eq!(value(&tree, "tank", "recordsize"), ("131072".into(), Source::Default));
        assert_eq!(Source::Received.display(), "received");
        assert_eq!(Source::Received.json_type(), "RECEIVED");
    }

    #[test]
    fn own_props_are_unmasked_received_under_local() {
        let r = record(&[("atime", "on")], &[("atime", "off"), ("sync", "always"), ("copies", "2")], &["copies"]);
        let own = r.own_props();
        assert_eq!(own.get("atime").map(String::as_str), Some("on"));
        assert_eq!(own.get("sync").map(String::as_str), Some("always"));
        assert!(!own.contains_key("copies"), "masked: not the dataset's own");
        assert_eq!(r.own_value("copies"), None);
        assert_eq!(r.own_value("sync"), Some((&"always".to_string(), Own::Received)));
    }

    #[test]
    fn a_receive_replaces_the_received_map_and_keeps_local_values_and_masks() {
        let mut r = record(&[("atime", "on")], &[("atime", "off"), ("sync", "always")], &["sync"]);
        let change = RecvProps {
            received: Some(BTreeMap::from([("atime".to_string(), "off".to_string()), ("copies".to_string(), "2".to_string())])),
            local: BTreeMap::from([("recordsize".to_string(), "16384".to_string())]),
            mask: BTreeSet::new(),
        };
        change.apply(&mut r);
        assert_eq!(r.received.keys().collect::<Vec<_>>(), ["atime", "copies"], "sync is gone: the sender no longer has it");
        assert_eq!(r.props.get("atime").map(String::as_str), Some("on"));
        assert_eq!(r.props.get("recordsize").map(String::as_str), Some("16384"));
        assert!(r.masked.contains("sync"));
        // A package without properties leaves the received map.
        let before = r.clone();
        RecvProps::default().apply(&mut r);
        assert_eq!(r, before);
    }

    #[test]
    fn old_records_decode_and_new_fields_are_written_only_when_set() {
        let old = br#"{"objset":5,"guid":7,"creation":1,"createtxg":3,"props":{"atime":"off"}}"#;
        let r: DatasetRecord = serde_json::from_slice(old).unwrap();
        assert!(r.received.is_empty() && r.masked.is_empty());
        let text = String::from_utf8(serde_json::to_vec(&r).unwrap()).unwrap();
        assert!(!text.contains("received") && !text.contains("masked"), "{text}");
        let r = record(&[], &[("atime", "off")], &["atime"]);
        let back: DatasetRecord = serde_json::from_slice(&serde_json::to_vec(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
