//! Tables as zfs prints them (aligned, header row; `-H`: tab-separated, no
//! header) and the `-j` JSON documents (shapes in docs/cli-json.md, modelled
//! on OpenZFS 2.3's `-j` output with numbers as JSON numbers).

use serde_json::{json, Map, Value};
use tarn_daemon::proto::{DatasetRow, PoolRow, PoolStatusData, PropCell, VdevStatus};

pub fn table(headers: &[String], rows: &[Vec<String>], scripted: bool) -> String {
    let mut out = String::new();
    if scripted {
        for row in rows {
            out.push_str(&row.join("\t"));
            out.push('\n');
        }
        return out;
    }
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.len());
            }
        }
    }
    let mut line = |cells: &[String]| {
        let last = cells.len().saturating_sub(1);
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i == last {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(headers);
    for row in rows {
        line(row);
    }
    out
}

fn output_version(command: &str) -> Value {
    json!({"command": command, "vers_major": 0, "vers_minor": 1})
}

fn props_object(cells: &[PropCell]) -> Value {
    let mut props = Map::new();
    for cell in cells {
        props.insert(
            cell.property.clone(),
            json!({"value": cell.value, "source": {"type": cell.source_type, "data": cell.source_data}}),
        );
    }
    Value::Object(props)
}

/// `tarn list -j` / `tarn get -j`.
pub fn datasets_json(command: &str, rows: &[DatasetRow]) -> Value {
    let mut datasets = Map::new();
    for row in rows {
        datasets.insert(
            row.name.clone(),
            json!({
                "name": row.name,
                "type": "FILESYSTEM",
                "pool": row.pool,
                "createtxg": row.createtxg,
                "properties": props_object(&row.props),
            }),
        );
    }
    json!({"output_version": output_version(command), "datasets": datasets})
}

/// `tarn pool list -j` / `tarn pool get -j`.
pub fn pools_json(command: &str, rows: &[PoolRow]) -> Value {
    let mut pools = Map::new();
    for row in rows {
        pools.insert(
            row.name.clone(),
            json!({
                "name": row.name,
                "type": "POOL",
                "state": row.state,
                "pool_guid": row.guid,
                "txg": row.txg,
                "properties": props_object(&row.props),
            }),
        );
    }
    json!({"output_version": output_version(command), "pools": pools})
}

fn vdev_json(vdev: &VdevStatus) -> Value {
    let mut object = json!({
        "name": vdev.name,
        "vdev_type": vdev.vdev_type,
        "guid": vdev.guid,
        "state": vdev.state,
        "read_errors": vdev.read_errors,
        "write_errors": vdev.write_errors,
        "checksum_errors": vdev.checksum_errors,
    });
    if !vdev.children.is_empty() {
        let mut children = Map::new();
        for child in &vdev.children {
            children.insert(child.name.clone(), vdev_json(child));
        }
        object["vdevs"] = Value::Object(children);
    }
    object
}

/// `tarn pool status -j`.
pub fn status_json(pools: &[PoolStatusData]) -> Value {
    let mut map = Map::new();
    for pool in pools {
        let mut vdevs = Map::new();
        vdevs.insert(pool.root.name.clone(), vdev_json(&pool.root));
        map.insert(
            pool.name.clone(),
            json!({
                "name": pool.name,
                "state": pool.state,
                "pool_guid": pool.guid,
                "txg": pool.txg,
                "error_count": pool.data_errors,
                "vdevs": vdevs,
            }),
        );
    }
    json!({"output_version": output_version("zpool status"), "pools": map})
}

/// `tarn pool status` text (zpool-style tree).
pub fn status_text(pools: &[PoolStatusData], verbose: bool) -> String {
    let mut out = String::new();
    for (index, pool) in pools.iter().enumerate() {
        if index > 0 {
            out.push('\n');
        }
        out.push_str(&format!("  pool: {}\n state: {}\n", pool.name, pool.state));
        let errors = pool.root.read_errors + pool.root.write_errors + pool.root.checksum_errors;
        if errors > 0 {
            out.push_str("status: One or more devices has experienced an error; applications are unaffected\n        where redundancy allowed the data to be repaired.\n");
        }
        out.push_str("config:\n\n");
        let mut lines = Vec::new();
        fn walk<'a>(vdev: &'a VdevStatus, depth: usize, lines: &mut Vec<(String, &'a VdevStatus)>) {
            lines.push((format!("{}{}", "  ".repeat(depth), vdev.name), vdev));
            for child in &vdev.children {
                walk(child, depth + 1, lines);
            }
        }
        walk(&pool.root, 0, &mut lines);
        let width = lines.iter().map(|(n, _)| n.len()).max().unwrap_or(4).max(4) + 2;
        out.push_str(&format!("\t{:<width$}{:<8}{:>5} {:>5} {:>5}\n", "NAME", "STATE", "READ", "WRITE", "CKSUM"));
        for (name, vdev) in lines {
            out.push_str(&format!(
                "\t{name:<width$}{:<8}{:>5} {:>5} {:>5}\n",
                vdev.state, vdev.read_errors, vdev.write_errors, vdev.checksum_errors
            ));
        }
        out.push('\n');
        if pool.data_errors == 0 {
            out.push_str("errors: No known data errors\n");
        } else if verbose {
            out.push_str(&format!("errors: {} data errors (blocks unreadable from every copy)\n", pool.data_errors));
        } else {
            out.push_str(&format!("errors: {} data errors, use '-v' for a list\n", pool.data_errors));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_scripted_tables() {
        let headers = vec!["NAME".to_string(), "USED".to_string()];
        let rows = vec![vec!["tank".to_string(), "1.21K".to_string()], vec!["tank/media".into(), "0B".into()]];
        assert_eq!(table(&headers, &rows, false), "NAME        USED\ntank        1.21K\ntank/media  0B\n");
        assert_eq!(table(&headers, &rows, true), "tank\t1.21K\ntank/media\t0B\n");
    }

    fn leaf(name: &str, cksum: u64) -> VdevStatus {
        VdevStatus {
            name: name.into(),
            vdev_type: "file".into(),
            guid: 1,
            state: "ONLINE".into(),
            read_errors: 0,
            write_errors: 0,
            checksum_errors: cksum,
            children: vec![],
            reason: None,
            resilvering: false,
        }
    }

    #[test]
    fn status_json_has_numeric_counters() {
        let mut top = leaf("raidz1-0", 0);
        top.vdev_type = "raidz".into();
        top.children = vec![leaf("/d1", 3), leaf("/d2", 0)];
        let mut root = leaf("tank", 0);
        root.vdev_type = "root".into();
        root.children = vec![top];
        let pool = PoolStatusData {
            name: "tank".into(),
            guid: 9,
            state: "ONLINE".into(),
            txg: 5,
            data_errors: 0,
            root,
            scan: None,
            spares: vec![],
            error_files: vec![],
            suspended: None,
        };
        let value = status_json(std::slice::from_ref(&pool));
        let d1 = &value["pools"]["tank"]["vdevs"]["tank"]["vdevs"]["raidz1-0"]["vdevs"]["/d1"];
        assert_eq!(d1["checksum_errors"], 3);
        assert_eq!(d1["state"], "ONLINE");
        let text = status_text(&[pool], false);
        assert!(text.contains("NAME"), "{text}");
        assert!(text.contains("    /d1"), "{text}");
    }
}
