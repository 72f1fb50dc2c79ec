//! `clone` and `promote` (the dataset layer does the work, see
//! `tarn_ds::clones`): a clone is mounted like a created file system;
//! promote moves snapshots between two datasets, so both are unmounted
//! (when idle) and mounted again to show their new `.zfs/snapshot`.

use serde_json::json;

use crate::daemon::{
    bad_snapshot_name, mount_dataset, pool_of, snapshot_error, unmount_for_rollback, Daemon,
};
use crate::proto::Response;

type HandlerResult = Result<Response, String>;

impl Daemon {
    pub(crate) fn clone_snapshot(
        &self,
        snapshot: &str,
        target: &str,
        properties: &[(String, String)],
    ) -> HandlerResult {
        let fail = |why: String| format!("cannot create '{target}': {why}");
        if !snapshot.contains('@') {
            return Err(fail(format!(
                "'{snapshot}' is not a snapshot (clones are made from DATASET@SNAPSHOT)"
            )));
        }
        tarn_ds::snapshots::validate_snapshot_name(snapshot)
            .map_err(|e| fail(bad_snapshot_name(e)))?;
        if target.contains('@') {
            return Err(fail("a clone is a file system, not a snapshot".into()));
        }
        tarn_ds::validate_dataset_name(target).map_err(|e| fail(bad_snapshot_name(e)))?;
        if pool_of(snapshot) != pool_of(target) {
            return Err(fail("source and target must be in the same pool".into()));
        }
        let mut pools = self.pools.lock();
        let imported = pools
            .get_mut(pool_of(target))
            .ok_or_else(|| fail(format!("no such pool '{}'", pool_of(target))))?;
        let source = snapshot.split('@').next().unwrap_or_default();
        if imported.busy.contains(target) || imported.busy.contains(source) {
            return Err(fail("dataset is busy (a rollback or receive is in progress)".into()));
        }
        imported
            .ds
            .clone_snapshot(snapshot, target, properties)
            .map_err(|e| match e {
                tarn_ds::DsError::NoParent(_) => fail("parent does not exist".into()),
                tarn_ds::DsError::Exists(_) => fail("dataset already exists".into()),
                tarn_ds::DsError::NotFound(name) if name.contains('@') => {
                    fail(format!("snapshot '{name}' does not exist"))
                }
                other => snapshot_error(other, fail),
            })?;
        // As for create: made, but a clone that did not mount is a failure.
        match mount_dataset(imported, target) {
            Ok(()) => Ok(Response::text("")),
            Err(e) => Ok(Response {
                stderr: format!("tarn: filesystem '{target}' created, but not mounted: {e}\n"),
                exit: 1,
                ..Response::text("")
            }),
        }
    }

    pub(crate) fn promote(&self, dataset: &str) -> HandlerResult {
        let fail = |why: String| format!("cannot promote '{dataset}': {why}");
        if dataset.contains('@') {
            return Err(fail(
                "not a file system (promote takes a cloned file system)".into(),
            ));
        }
        tarn_ds::validate_dataset_name(dataset).map_err(|e| fail(bad_snapshot_name(e)))?;
        let mut pools = self.pools.lock();
        let imported = pools
            .get_mut(pool_of(dataset))
            .filter(|p| p.ds.exists(dataset))
            .ok_or_else(|| fail("dataset does not exist".into()))?;
        let record = imported
            .ds
            .record(dataset)
            .map_err(|e| fail(e.to_string()))?;
        let Some(origin) = record.origin else {
            return Err(fail("not a cloned filesystem".into()));
        };
        let source = origin
            .split_once('@')
            .map(|(d, _)| d.to_string())
            .unwrap_or_default();
        for name in [dataset, source.as_str()] {
            if imported.busy.contains(name) {
                return Err(fail(format!(
                    "'{name}' is busy (a rollback is in progress)"
                )));
            }
        }
        // Idle mounts are mounted again afterwards, so their .zfs/snapshot
        // shows the snapshots that moved; a busy one just stays mounted.
        let mut unmounted = Vec::new();
        for name in [source.as_str(), dataset] {
            if let Ok(done) = unmount_for_rollback(imported, name, false) {
                unmounted.extend(done);
            }
        }
        let result = imported.ds.promote(dataset);
        let mut warnings = String::new();
        for name in unmounted.iter().rev() {
            if let Err(e) = mount_dataset(imported, name) {
                warnings.push_str(&format!("tarn: cannot mount '{name}' again: {e}\n"));
            }
        }
        let former = result.map_err(|e| snapshot_error(e, fail))?;
        let exit = if warnings.is_empty() { 0 } else { 1 };
        Ok(Response {
            stderr: warnings,
            exit,
            data: Some(json!(former)),
            ..Response::text("")
        })
    }
}
