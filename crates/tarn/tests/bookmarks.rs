//! Bookmarks through the real binary: `tarn bookmark` from a snapshot and
//! from a bookmark, `list -t bookmark` / `-t all`, `get` on a bookmark
//! (type, guid, createtxg), the snapshot destroyed and the bookmark kept,
//! `destroy fs#name`; bad input fails with exit 1 (or 2 for usage) and one
//! line, and changes nothing.

mod common;

use common::{assert_clean_failure, path_str, wait_mounted, write_file, Harness};

fn pool_spec(harness: &Harness) -> Vec<String> {
    let devices = harness.vdev_files("vdevs", 2, common::VDEV_SIZE_BYTES);
    std::iter::once("mirror".to_string())
        .chain(devices.iter().map(|d| path_str(d)))
        .collect()
}

fn lines(text: &str) -> Vec<String> {
    text.lines().map(|l| l.to_string()).collect()
}

fn get(harness: &Harness, prop: &str, name: &str) -> String {
    harness
        .tarn_ok(&["get", "-H", "-p", "-o", "value", prop, name])
        .trim()
        .to_string()
}

fn fails(harness: &Harness, args: &[&str], needle: &str) {
    let out = harness.tarn(args);
    let what = args.join(" ");
    assert_clean_failure(&out, &what);
    assert_ne!(out.status.code(), Some(0), "tarn {what} succeeded");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(needle),
        "tarn {what}: expected '{needle}' in: {stderr}"
    );
}

#[test]
fn bookmark_list_get_destroy() {
    let harness = Harness::start();
    let pool_mount = harness.create_pool("tank", &pool_spec(&harness));
    harness.tarn_ok(&["create", "tank/media"]);
    let mountpoint = pool_mount.join("media");
    wait_mounted(&mountpoint);
    write_file(&mountpoint.join("a"), &[7u8; 10_000]);
    harness.tarn_ok(&["snapshot", "tank/media@one"]);
    harness.tarn_ok(&["bookmark", "tank/media@one", "tank/media#one"]);
    harness.tarn_ok(&["bookmark", "tank/media#one", "#copy"]);

    let listed = harness.tarn_ok(&["list", "-H", "-o", "name", "-t", "bookmark"]);
    assert_eq!(lines(&listed), ["tank/media#copy", "tank/media#one"]);
    let listed = harness.tarn_ok(&["list", "-H", "-o", "name", "-t", "bookmark", "tank/media"]);
    assert_eq!(lines(&listed), ["tank/media#copy", "tank/media#one"]);
    let all = harness.tarn_ok(&["list", "-H", "-o", "name", "-t", "all", "-r", "tank/media"]);
    assert_eq!(
        lines(&all),
        [
            "tank/media",
            "tank/media@one",
            "tank/media#copy",
            "tank/media#one"
        ]
    );
    // The default list shows file systems only.
    assert!(!harness.tarn_ok(&["list", "-H", "-o", "name"]).contains('#'));

    assert_eq!(get(&harness, "type", "tank/media#one"), "bookmark");
    let guid = get(&harness, "guid", "tank/media@one");
    assert_eq!(get(&harness, "guid", "tank/media#one"), guid);
    assert_eq!(get(&harness, "guid", "tank/media#copy"), guid);
    assert_eq!(
        get(&harness, "createtxg", "tank/media#one"),
        get(&harness, "createtxg", "tank/media@one")
    );
    assert_eq!(
        get(&harness, "creation", "tank/media#one"),
        get(&harness, "creation", "tank/media@one")
    );
    let json = harness.tarn_ok(&["list", "-j", "-t", "bookmark"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["datasets"]["tank/media#one"]["type"], "BOOKMARK");

    // The snapshot goes, the bookmark stays.
    harness.tarn_ok(&["destroy", "tank/media@one"]);
    assert_eq!(get(&harness, "guid", "tank/media#one"), guid);
    harness.tarn_ok(&["destroy", "tank/media#copy"]);
    let listed = harness.tarn_ok(&["list", "-H", "-o", "name", "-t", "bookmark"]);
    assert_eq!(lines(&listed), ["tank/media#one"]);

    // Bad input: one line, non-zero, nothing changed.
    harness.tarn_ok(&["snapshot", "tank/media@two"]);
    harness.tarn_ok(&["create", "tank/other"]);
    fails(
        &harness,
        &["bookmark", "tank/media@nope", "tank/media#x"],
        "does not exist",
    );
    fails(
        &harness,
        &["bookmark", "tank/media#nope", "tank/media#x"],
        "does not exist",
    );
    fails(
        &harness,
        &["bookmark", "tank/media", "tank/media#x"],
        "not a snapshot",
    );
    fails(
        &harness,
        &["bookmark", "tank/media@two", "tank/media#one"],
        "exists",
    );
    fails(
        &harness,
        &["bookmark", "tank/media@two", "tank/other#x"],
        "dataset of its source",
    );
    fails(
        &harness,
        &["bookmark", "tank/media@two", "tank/media#"],
        "empty bookmark name",
    );
    fails(
        &harness,
        &["bookmark", "tank/media@two", "tank/media#a b"],
        "invalid character",
    );
    fails(
        &harness,
        &["bookmark", "tank/media@two", "tank/media@x"],
        "dataset#name",
    );
    fails(
        &harness,
        &["bookmark", "ghost/media@two", "ghost/media#x"],
        "ghost",
    );
    fails(&harness, &["bookmark", "tank/media@two"], "");
    fails(&harness, &["destroy", "tank/media#nope"], "does not exist");
    fails(&harness, &["destroy", "tank/media#"], "empty bookmark name");
    fails(
        &harness,
        &["get", "type", "tank/media#nope"],
        "does not exist",
    );
    fails(&harness, &["list", "-t", "bookmarks"], "invalid type");
    let listed = harness.tarn_ok(&["list", "-H", "-o", "name", "-t", "bookmark"]);
    assert_eq!(lines(&listed), ["tank/media#one"]);

    // Destroying the dataset takes its bookmarks.
    harness.tarn_ok(&["destroy", "-r", "tank/media"]);
    assert_eq!(
        harness
            .tarn_ok(&["list", "-H", "-o", "name", "-t", "bookmark"])
            .trim(),
        ""
    );
    let log = harness.daemon_log();
    assert!(
        !log.contains("panicked"),
        "the daemon panicked:\n{}",
        common::tail(&log, 40)
    );
}
