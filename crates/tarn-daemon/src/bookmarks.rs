//! Bookmarks: `bookmark SRC fs#name`, `destroy fs#name`, and their rows in
//! `list -t bookmark` / `get` (the dataset layer keeps them, see
//! `tarn_ds::bookmarks`).

use serde_json::json;

use crate::daemon::{pool_of, Daemon};
use crate::proto::Response;

type HandlerResult = Result<Response, String>;

/// The one-line message of a failed bookmark operation.
fn bookmark_error(e: tarn_ds::DsError, fail: impl Fn(String) -> String) -> String {
    match e {
        tarn_ds::DsError::Snapshot(message) => message,
        tarn_ds::DsError::BadName { why, .. } => fail(why),
        tarn_ds::DsError::NotFound(name) => fail(format!("'{name}' does not exist")),
        other => fail(other.to_string()),
    }
}

impl Daemon {
    /// `bookmark SOURCE TARGET`: `SOURCE` is `fs@snap` or `fs#mark`;
    /// `TARGET` is `fs#name` (or `#name`) of the same dataset.
    pub(crate) fn bookmark(&self, source: &str, target: &str) -> HandlerResult {
        let fail = |why: String| format!("cannot create bookmark '{target}': {why}");
        if source.is_empty() || target.is_empty() {
            return Err(fail(
                "a source (fs@snap or fs#name) and a bookmark name (fs#name) are needed".into(),
            ));
        }
        let ds = {
            let pools = self.pools.lock();
            let imported = pools
                .get(pool_of(source))
                .ok_or_else(|| fail(format!("no such pool '{}'", pool_of(source))))?;
            imported.ds.clone()
        };
        ds.bookmark(source, target)
            .map_err(|e| bookmark_error(e, fail))?;
        let full = match target.strip_prefix('#') {
            Some(short) => format!(
                "{}#{short}",
                source.split(['@', '#']).next().unwrap_or_default()
            ),
            None => target.to_string(),
        };
        Ok(Response::data(json!([full])))
    }

    /// `destroy fs#name` (`-n`: nothing is destroyed). Data: the names.
    pub(crate) fn destroy_bookmark(&self, name: &str, dry_run: bool) -> HandlerResult {
        let fail = |why: String| format!("cannot destroy '{name}': {why}");
        let ds = {
            let pools = self.pools.lock();
            let imported = pools
                .get(pool_of(name))
                .ok_or_else(|| fail(format!("no such pool '{}'", pool_of(name))))?;
            imported.ds.clone()
        };
        tarn_ds::bookmarks::validate_bookmark_name(name).map_err(|e| bookmark_error(e, fail))?;
        if dry_run {
            ds.bookmark_record(name)
                .map_err(|e| bookmark_error(e, fail))?;
        } else {
            ds.destroy_bookmark(name)
                .map_err(|e| bookmark_error(e, fail))?;
        }
        Ok(Response::data(json!([name])))
    }
}
