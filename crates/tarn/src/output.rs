//! Tables as zfs prints them (aligned, header row; `-H`: tab-separated, no
//! header) and the `-j` JSON documents (shapes in docs/cli-json.md, modelled
//! on OpenZFS 2.3's `-j` output with numbers as JSON numbers). `pool status`
//! is in status.rs, `pool events` and `alert test` in events.rs.

use serde_json::{json, Map, Value};
use tarn_daemon::proto::{DatasetRow, HoldRow, PoolRow, PropCell};

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

pub fn output_version(command: &str) -> Value {
    json!({"command": command, "vers_major": 0, "vers_minor": 1})
}

fn props_object(cells: &[PropCell]) -> Value {
    let mut props = Map::new();
    for cell in cells {
        let mut prop = json!({"value": cell.value, "source": {"type": cell.source_type, "data": cell.source_data}});
        // A received value, when the dataset has one (`get -o received`).
        if let (Some(received), Some(object)) = (&cell.received, prop.as_object_mut()) {
            object.insert("received".into(), json!(received));
        }
        props.insert(cell.property.clone(), prop);
    }
    Value::Object(props)
}

/// `tarn list -j` / `tarn get -j`. Snapshots (`fs@name`) are of type
/// SNAPSHOT and carry `dataset` and `snapshot_name`, as OpenZFS 2.3 prints
/// them.
pub fn datasets_json(command: &str, rows: &[DatasetRow]) -> Value {
    let mut datasets = Map::new();
    for row in rows {
        let mut entry = Map::new();
        entry.insert("name".into(), json!(row.name));
        if let Some((dataset, mark)) = row.name.split_once('#') {
            entry.insert("type".into(), json!("BOOKMARK"));
            entry.insert("pool".into(), json!(row.pool));
            entry.insert("createtxg".into(), json!(row.createtxg));
            entry.insert("dataset".into(), json!(dataset));
            entry.insert("bookmark_name".into(), json!(mark));
            entry.insert("properties".into(), props_object(&row.props));
            datasets.insert(row.name.clone(), Value::Object(entry));
            continue;
        }
        match row.name.split_once('@') {
            Some((dataset, snapshot)) => {
                entry.insert("type".into(), json!("SNAPSHOT"));
                entry.insert("pool".into(), json!(row.pool));
                entry.insert("createtxg".into(), json!(row.createtxg));
                entry.insert("dataset".into(), json!(dataset));
                entry.insert("snapshot_name".into(), json!(snapshot));
            }
            None => {
                entry.insert("type".into(), json!("FILESYSTEM"));
                entry.insert("pool".into(), json!(row.pool));
                entry.insert("createtxg".into(), json!(row.createtxg));
            }
        }
        entry.insert("properties".into(), props_object(&row.props));
        datasets.insert(row.name.clone(), Value::Object(entry));
    }
    json!({"output_version": output_version(command), "datasets": datasets})
}

/// `tarn holds -j`: one entry per snapshot named, with its tags (hold
/// times are not stored: `timestamp` is null).
pub fn holds_json(rows: &[HoldRow]) -> Value {
    let mut holds = Map::new();
    for row in rows {
        let entry = holds.entry(row.name.clone()).or_insert_with(|| json!({"name": row.name, "holds": {}}));
        if let Some(tags) = entry.get_mut("holds").and_then(Value::as_object_mut) {
            tags.insert(row.tag.clone(), json!({"timestamp": null}));
        }
    }
    json!({"output_version": output_version("zfs holds"), "holds": holds})
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

    #[test]
    fn snapshots_in_json() {
        let cell = PropCell {
            property: "used".into(),
            value: "0".into(),
            source: "-".into(),
            source_type: "NONE".into(),
            source_data: "-".into(),
            received: None,
        };
        let rows = vec![
            DatasetRow { name: "tank/a".into(), pool: "tank".into(), createtxg: 5, props: vec![cell.clone()] },
            DatasetRow { name: "tank/a@monday".into(), pool: "tank".into(), createtxg: 9, props: vec![cell] },
        ];
        let doc = datasets_json("zfs list", &rows);
        let fs = &doc["datasets"]["tank/a"];
        assert_eq!(fs["type"], "FILESYSTEM");
        assert!(fs.get("dataset").is_none() && fs.get("snapshot_name").is_none());
        let snap = &doc["datasets"]["tank/a@monday"];
        assert_eq!(snap["type"], "SNAPSHOT");
        assert_eq!(snap["dataset"], "tank/a");
        assert_eq!(snap["snapshot_name"], "monday");
        assert_eq!(snap["createtxg"], 9);
        assert_eq!(snap["properties"]["used"]["value"], "0");

        let holds = holds_json(&[
            HoldRow { name: "tank/a@monday".into(), tag: "keep".into() },
            HoldRow { name: "tank/a@monday".into(), tag: "backup".into() },
        ]);
        assert_eq!(holds["output_version"]["command"], "zfs holds");
        assert!(holds["holds"]["tank/a@monday"]["holds"]["keep"]["timestamp"].is_null());
        assert!(holds["holds"]["tank/a@monday"]["holds"].get("backup").is_some());
    }
}
