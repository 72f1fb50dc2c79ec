//! Dataset commands that move mounts around: `set`/`inherit` (a changed
//! `mountpoint` remounts), `rename` (datasets and snapshots), `mount -a`,
//! `unmount -a`, and what `destroy -R` takes with it (clones).
//!
//! Every handler takes the pool table for its whole run (as `set` always
//! has): mounts and dataset names change together, no other command sees
//! one without the other.

use std::collections::BTreeSet;

use tarn_ds::props::{self, Mountpoint};

use crate::daemon::{mount_dataset, pool_of, Daemon, Imported};
use crate::mount;
use crate::proto::Response;

type HandlerResult = Result<Response, String>;

/// Unmounts the mounts of `names` (deepest mountpoints first). A busy one
/// stops it, unless `force`, and what was unmounted is mounted again.
/// Returns the names unmounted.
pub(crate) fn unmount_names(imported: &mut Imported, names: &[String], force: bool) -> Result<Vec<String>, String> {
    let volumes = crate::volumes::close_volumes(imported, names);
    let mut mounted: Vec<String> = names.iter().filter(|n| imported.mounts.contains_key(*n)).cloned().collect();
    mounted.sort_by_key(|n| std::cmp::Reverse(imported.mounts.get(n).map_or(0, |m| m.path.components().count())));
    let mut done: Vec<String> = Vec::new();
    for name in mounted {
        let Some(mut m) = imported.mounts.remove(&name) else { continue };
        if force {
            m.unmount();
        } else if let Err(e) = m.try_unmount() {
            imported.mounts.insert(name, m);
            for undone in done.iter().rev() {
                let _ = mount_dataset(imported, undone);
            }
            return Err(e);
        }
        done.push(name);
    }
    done.extend(volumes);
    Ok(done)
}

/// Mounts `names`, parents before children whatever order they come in
/// (`unmount_names` returns them deepest first: a parent mounted after its
/// child would hide the child's mount); returns warning lines.
fn mount_names(imported: &mut Imported, names: &[String]) -> String {
    let mut warnings = String::new();
    let mut names: Vec<&String> = names.iter().collect();
    names.sort_by_key(|n| n.matches('/').count());
    for name in names {
        if imported.mounts.contains_key(name) || imported.volumes.contains_key(name) {
            continue;
        }
        if let Err(e) = mount_dataset(imported, name) {
            warnings.push_str(&format!("warning: cannot mount '{name}': {e}\n"));
        }
    }
    warnings
}

/// Applies a property change of `dataset` (`change` sets or inherits it
/// and returns the datasets whose effective value may have moved) with
/// the mounts it affects: a `mountpoint` change takes the subtree's mounts
/// off first (a busy one refuses the change, which is then not made) and
/// mounts them at their new places; any other property reaches the
/// mounted file systems as new options. Returns warning lines.
pub(crate) fn change_property(
    imported: &mut Imported,
    dataset: &str,
    prop: &str,
    change: impl FnOnce(&tarn_ds::Pool) -> Result<Vec<String>, String>,
) -> Result<String, String> {
    if props::canonical_name(prop) == "mountpoint" {
        let subtree = imported.ds.subtree(dataset);
        let unmounted = unmount_names(imported, &subtree, false)?;
        let affected = match change(&imported.ds) {
            Ok(affected) => affected,
            Err(e) => {
                mount_names(imported, &unmounted);
                return Err(e);
            }
        };
        let mut again: Vec<String> = affected;
        for name in unmounted {
            if !again.contains(&name) {
                again.push(name);
            }
        }
        again.sort();
        return Ok(mount_names(imported, &again));
    }
    let affected = change(&imported.ds)?;
    for name in &affected {
        if let (Some(mounted), Ok(settings)) = (imported.mounts.get(name), imported.ds.settings(name)) {
            mounted.set_options(&settings);
        }
    }
    Ok(String::new())
}

impl Daemon {
    pub(crate) fn set(&self, assignments: &[(String, String)], dataset: &str, force: bool) -> HandlerResult {
        let fail = |why: String| format!("cannot set property for '{dataset}': {why}");
        for (prop, value) in assignments.iter().filter(|(p, _)| p != "volsize") {
            props::validate(prop, value).map_err(|e| fail(e.to_string()))?;
        }
        let mut pools = self.pools.lock();
        let imported = pools
            .get_mut(pool_of(dataset))
            .filter(|p| p.ds.exists(dataset))
            .ok_or_else(|| fail("dataset does not exist".into()))?;
        let mut warnings = String::new();
        for (prop, value) in assignments {
            if prop == "volsize" {
                let size = imported.ds.set_volsize(dataset, value, force).map_err(|e| fail(e.to_string()))?;
                if let Some(vol) = imported.volumes.get(dataset) {
                    vol.resize(size).map_err(|e| fail(e.to_string()))?;
                }
                continue;
            }
            warnings += &change_property(imported, dataset, prop, |ds| {
                ds.set_property(dataset, prop, value).map(|(_, affected)| affected).map_err(|e| e.to_string())
            })
            .map_err(fail)?;
        }
        Ok(Response { stderr: warnings, ..Response::text("") })
    }

    /// `inherit [-rS] PROP DATASET...` (`received`: -S).
    pub(crate) fn inherit(&self, prop: &str, datasets: &[String], recursive: bool, received: bool) -> HandlerResult {
        let to = if received { tarn_ds::own_props::InheritTo::Received } else { tarn_ds::own_props::InheritTo::Inherited };
        let mut pools = self.pools.lock();
        let mut warnings = String::new();
        for dataset in datasets {
            let fail = |why: String| format!("cannot inherit '{prop}' for '{dataset}': {why}");
            if dataset.contains(['@', '#']) {
                return Err(fail("snapshots and bookmarks have no inheritable properties".into()));
            }
            let imported = pools
                .get_mut(pool_of(dataset))
                .filter(|p| p.ds.exists(dataset))
                .ok_or_else(|| fail("dataset does not exist".into()))?;
            warnings += &change_property(imported, dataset, prop, |ds| {
                ds.inherit_property_to(dataset, prop, recursive, to).map(|(_, affected)| affected).map_err(|e| e.to_string())
            })
            .map_err(fail)?;
        }
        Ok(Response { stderr: warnings, ..Response::text("") })
    }

    /// `rename [-p] [-f] [-u] OLD NEW`, `rename [-r] FS@A FS@B|@B`.
    pub(crate) fn rename(&self, source: &str, target: &str, parents: bool, recursive: bool, force: bool, no_mount: bool) -> HandlerResult {
        let fail = |why: String| format!("cannot rename '{source}': {why}");
        // tarn-ds names the dataset or snapshot it could not rename itself.
        let fail_ds = |e: tarn_ds::DsError| {
            let message = e.to_string();
            if message.starts_with("cannot rename ") { message } else { fail(message) }
        };
        let mut pools = self.pools.lock();
        let imported = pools.get_mut(pool_of(source)).ok_or_else(|| fail("dataset does not exist".into()))?;
        if let Some((dataset, _)) = source.split_once('@') {
            let new_short = match target.split_once('@') {
                Some((d, s)) if d.is_empty() || d == dataset => s,
                Some(_) => return Err(fail("snapshots can only be renamed within their dataset".into())),
                None => return Err(fail(format!("'{target}' is not a snapshot name (use @NAME or {dataset}@NAME)"))),
            };
            let renamed = imported.ds.rename_snapshot(source, new_short, recursive).map_err(|e| match e {
                tarn_ds::DsError::NotFound(_) => fail("snapshot does not exist".into()),
                other => fail_ds(other),
            })?;
            return Ok(Response::data(serde_json::json!(renamed)));
        }
        if recursive {
            return Err(fail("-r renames snapshots; a dataset is renamed with its descendants anyway".into()));
        }
        if target.contains(['@', '#']) {
            return Err(fail(format!("'{target}' is not a dataset name")));
        }
        if !imported.ds.exists(source) {
            return Err(fail("dataset does not exist".into()));
        }
        if let Some(busy) = imported.ds.subtree(source).iter().find(|d| imported.busy.contains(*d)) {
            return Err(fail(format!("'{busy}' is busy (a rollback or receive is in progress)")));
        }
        let subtree = imported.ds.subtree(source);
        let unmounted = unmount_names(imported, &subtree, force).map_err(fail)?;
        let renamed = match imported.ds.rename_dataset(source, target, parents, &mount::format) {
            Ok(renamed) => renamed,
            Err(e) => {
                mount_names(imported, &unmounted);
                return Err(fail_ds(e));
            }
        };
        let mut warnings = String::new();
        if !no_mount {
            // Parents made by -p, then the renamed datasets that were
            // mounted (or should be: a dataset mounted before mounts after).
            let mut names: Vec<String> = Vec::new();
            let mut parent = props::parent_name(target);
            while let Some(p) = parent {
                if !imported.mounts.contains_key(p) {
                    names.insert(0, p.to_string());
                }
                parent = props::parent_name(p);
            }
            for (old, new) in &renamed {
                if unmounted.contains(old) {
                    names.push(new.clone());
                }
            }
            warnings = mount_names(imported, &names);
        }
        let exit = if warnings.is_empty() { 0 } else { 1 };
        Ok(Response { stderr: warnings, exit, data: Some(serde_json::json!(renamed)), ..Response::text("") })
    }

    /// `mount -a`: every dataset that has a mountpoint and is not mounted,
    /// in every pool, parents first. A dataset that does not mount makes
    /// the command fail (exit 1) after the others are mounted.
    pub(crate) fn mount_all(&self) -> HandlerResult {
        let mut pools = self.pools.lock();
        let mut warnings = String::new();
        for imported in pools.values_mut() {
            let wanted: Vec<String> = imported
                .ds
                .list()
                .into_iter()
                .filter(|n| !imported.mounts.contains_key(n) && !imported.busy.contains(n) && imported.ds.key_available(n))
                .filter(|n| imported.ds.settings(n).is_ok_and(|s| matches!(s.mountpoint, Mountpoint::Path(_))))
                .collect();
            for name in wanted {
                if let Err(e) = mount_dataset(imported, &name) {
                    warnings.push_str(&format!("tarn: cannot mount '{name}': {e}\n"));
                }
            }
        }
        let exit = if warnings.is_empty() { 0 } else { 1 };
        Ok(Response { stderr: warnings, exit, ..Response::text("") })
    }

    /// `unmount -a [-f]`: every mounted dataset, deepest first. A busy
    /// one stays (unless -f) and makes the command fail after the others.
    pub(crate) fn unmount_all(&self, force: bool) -> HandlerResult {
        let mut pools = self.pools.lock();
        let mut warnings = String::new();
        for imported in pools.values_mut() {
            let mut names: Vec<String> = imported.mounts.keys().cloned().collect();
            names.sort_by_key(|n| std::cmp::Reverse(imported.mounts.get(n).map_or(0, |m| m.path.components().count())));
            for name in names {
                let Some(mut m) = imported.mounts.remove(&name) else { continue };
                if force {
                    m.unmount();
                } else if let Err(e) = m.try_unmount() {
                    imported.mounts.insert(name, m);
                    warnings.push_str(&format!("tarn: {e}\n"));
                }
            }
        }
        let exit = if warnings.is_empty() { 0 } else { 1 };
        Ok(Response { stderr: warnings, exit, ..Response::text("") })
    }
}

/// `destroy -R`: the clones that depend on the snapshots of `roots` (and,
/// in turn, on their own snapshots), as whole subtrees, in the order they
/// must go: every dependent before what it depends on. `roots` are dataset
/// names (their snapshots count) or snapshot names (that snapshot only).
pub(crate) fn dependents(ds: &tarn_ds::Pool, roots: &[String]) -> Vec<String> {
    let mut snapshots: Vec<String> = Vec::new();
    for root in roots {
        if root.contains('@') {
            snapshots.push(root.clone());
        } else {
            for d in ds.subtree(root) {
                snapshots.extend(ds.snapshots(Some(&d)));
            }
        }
    }
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut order: Vec<String> = Vec::new();
    while let Some(snapshot) = snapshots.pop() {
        for clone in ds.clones_of(&snapshot) {
            if roots.contains(&clone) || !seen.insert(clone.clone()) {
                continue;
            }
            for d in ds.subtree(&clone) {
                snapshots.extend(ds.snapshots(Some(&d)));
            }
            order.push(clone);
        }
    }
    // Found later = depends on something found earlier: goes first. A
    // clone inside another doomed subtree still goes on its own, first.
    order.reverse();
    order
}
