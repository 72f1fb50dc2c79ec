//! `tarn list` and `tarn get`: which names a query covers (datasets,
//! snapshots, bookmarks; `-r`, `-d DEPTH`, `-t`), their property cells
//! (native and user properties; `get all`), and `-s`/`-S` sorting.

use std::cmp::Ordering;

use tarn_ds::props;

use crate::daemon::{pool_of, Daemon, Imported};
use crate::proto::{DatasetRow, Response};

/// One `list`/`get` request.
pub struct Query {
    pub datasets: Vec<String>,
    pub recursive: bool,
    pub props: Vec<String>,
    pub parsable: bool,
    pub types: Vec<String>,
    pub depth: Option<u32>,
    pub sort: Vec<(String, bool)>,
}

/// Levels of `name` below `top` (a snapshot or bookmark is one level below
/// its dataset), as `zfs list -d` counts them.
fn depth_below(top: &str, name: &str) -> u32 {
    let levels = |n: &str| {
        let dataset = n.split(['@', '#']).next().unwrap_or(n);
        dataset.split('/').count() as u32 + u32::from(n.contains(['@', '#']))
    };
    levels(name).saturating_sub(levels(top))
}

/// Sort order of two exact property values: numbers as numbers (before
/// words), `-` last, else as text.
fn compare_values(a: &str, b: &str) -> Ordering {
    let number = |v: &str| v.parse::<f64>().ok().filter(|n| n.is_finite());
    match (a == "-", b == "-") {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Greater,
        (false, true) => return Ordering::Less,
        _ => {}
    }
    match (number(a), number(b)) {
        (Some(x), Some(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

impl Daemon {
    pub(crate) fn dataset_props(&self, q: &Query) -> Result<Response, String> {
        let want_fs = q.types.iter().any(|t| t == "filesystem");
        let want_vol = q.types.iter().any(|t| t == "volume");
        let want_snap = q.types.iter().any(|t| t == "snapshot");
        let want_bookmark = q.types.iter().any(|t| t == "bookmark");
        let recursive = q.recursive || q.depth.is_some();
        // `list -t snapshot fs`: the snapshots of fs (zfs: depth 1).
        let snaps_of_named = (want_snap || want_bookmark) && !want_fs && !want_vol && !recursive;
        for prop in q.props.iter().filter(|p| p.as_str() != "all") {
            props::check_name(prop).map_err(|e| e.to_string())?;
        }
        for (prop, _) in &q.sort {
            props::check_name(prop).map_err(|e| e.to_string())?;
        }
        let all = q.props.is_empty() || q.props.iter().any(|p| p == "all");
        let pools = self.pools.lock();
        let mut names: Vec<String> = Vec::new();
        // A dataset, then its snapshots (oldest first), as the types ask.
        let add = |imported: &Imported, dataset: &str, names: &mut Vec<String>| {
            if if imported.ds.is_volume(dataset) { want_vol } else { want_fs } {
                names.push(dataset.to_string());
            }
            if want_snap {
                names.extend(imported.ds.snapshots(Some(dataset)));
            }
            if want_bookmark {
                names.extend(imported.ds.bookmarks(Some(dataset)));
            }
        };
        if q.datasets.is_empty() {
            for imported in pools.values() {
                for dataset in imported.ds.list() {
                    add(imported, &dataset, &mut names);
                }
            }
            if let Some(depth) = q.depth {
                names.retain(|n| depth_below(pool_of(n), n) <= depth);
            }
        } else {
            for dataset in &q.datasets {
                let missing = || format!("cannot open '{dataset}': dataset does not exist");
                let imported = pools.get(pool_of(dataset)).ok_or_else(missing)?;
                if dataset.contains('@') {
                    imported.ds.snapshot_record(dataset).map_err(|_| missing())?;
                    names.push(dataset.clone());
                    continue;
                }
                if dataset.contains('#') {
                    imported.ds.bookmark_record(dataset).map_err(|_| format!("cannot open '{dataset}': bookmark does not exist"))?;
                    names.push(dataset.clone());
                    continue;
                }
                if !imported.ds.exists(dataset) {
                    return Err(missing());
                }
                if recursive {
                    let mut below = Vec::new();
                    for name in imported.ds.subtree(dataset) {
                        add(imported, &name, &mut below);
                    }
                    if let Some(depth) = q.depth {
                        below.retain(|n| depth_below(dataset, n) <= depth);
                    }
                    names.extend(below);
                } else if snaps_of_named {
                    if want_snap {
                        names.extend(imported.ds.snapshots(Some(dataset)));
                    }
                    if want_bookmark {
                        names.extend(imported.ds.bookmarks(Some(dataset)));
                    }
                } else {
                    names.push(dataset.clone());
                }
            }
        }
        let mut rows = Vec::new();
        let mut keys: Vec<Vec<String>> = Vec::new();
        for name in names {
            let pool_name = pool_of(&name).to_string();
            let Some(imported) = pools.get(&pool_name) else { continue };
            let createtxg = if name.contains('#') {
                imported.ds.bookmark_record(&name).map(|r| r.createtxg)
            } else if name.contains('@') {
                imported.ds.snapshot_record(&name).map(|r| r.createtxg)
            } else {
                imported.ds.record(&name).map(|r| r.createtxg)
            }
            .map_err(|e| e.to_string())?;
            let wanted: Vec<String> = if all {
                let mut every: Vec<String> = props::PROPERTIES.iter().map(|p| p.name.to_string()).collect();
                if imported.ds.is_volume(&name) {
                    every.extend(tarn_ds::volumes::VOLUME_PROPERTIES.iter().map(|p| p.to_string()));
                }
                if !name.contains(['@', '#']) {
                    every.extend(imported.ds.user_properties(&name));
                }
                every
            } else {
                q.props.iter().map(|p| props::canonical_name(p)).collect()
            };
            let get = |prop: &str, parsable: bool| {
                let mut value = imported
                    .ds
                    .get_property(&name, prop, parsable, imported.altroot.as_deref())
                    .map_err(|e| format!("cannot get '{prop}' of '{name}': {e}"))?;
                if prop == "mounted" && !name.contains(['@', '#']) {
                    value.value = if imported.mounts.contains_key(&name) { "yes" } else { "no" }.to_string();
                }
                Ok::<_, String>(value)
            };
            let mut cells = Vec::new();
            for prop in &wanted {
                let value = get(prop, q.parsable)?;
                // `get all` of a snapshot or bookmark: the properties it has.
                if all && name.contains(['@', '#']) && value.value == "-" {
                    continue;
                }
                cells.push(value.into());
            }
            let mut key = Vec::new();
            for (prop, _) in &q.sort {
                key.push(get(&props::canonical_name(prop), true)?.value);
            }
            keys.push(key);
            rows.push(DatasetRow { name, pool: pool_name, createtxg, props: cells });
        }
        if !q.sort.is_empty() {
            let mut order: Vec<usize> = (0..rows.len()).collect();
            order.sort_by(|&a, &b| {
                for (i, (_, descending)) in q.sort.iter().enumerate() {
                    let o = compare_values(&keys[a][i], &keys[b][i]);
                    let o = if *descending { o.reverse() } else { o };
                    if o != Ordering::Equal {
                        return o;
                    }
                }
                rows[a].name.cmp(&rows[b].name)
            });
            let mut slots: Vec<Option<DatasetRow>> = rows.into_iter().map(Some).collect();
            rows = order.into_iter().filter_map(|i| slots[i].take()).collect();
        }
        Ok(Response::data(serde_json::to_value(rows).map_err(|e| e.to_string())?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_levels_and_snapshots() {
        assert_eq!(depth_below("tank", "tank"), 0);
        assert_eq!(depth_below("tank", "tank/a"), 1);
        assert_eq!(depth_below("tank", "tank/a/b"), 2);
        assert_eq!(depth_below("tank", "tank@s"), 1);
        assert_eq!(depth_below("tank/a", "tank/a/b@s"), 2);
        assert_eq!(depth_below("tank", "tank/a#m"), 2);
    }

    #[test]
    fn values_sort_as_numbers_then_words_then_dashes() {
        let mut v = vec!["10", "-", "9", "abc", "1.5", "2"];
        v.sort_by(|a, b| compare_values(a, b));
        assert_eq!(v, ["1.5", "2", "9", "10", "abc", "-"]);
    }
}
