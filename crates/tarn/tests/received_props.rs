//! Received properties (issue 14, item 2) through the real binary, a real
//! daemon and FUSE mounts: `send -R`/`-p` brings the sender's own values,
//! which the receiver keeps apart from its local ones, as ZFS does.
//!
//! - `received_values_have_their_own_source_and_follow_the_sender`: after
//!   `send -R | recv -o mountpoint=… -o atime=… -x sync`, `get` shows SOURCE
//!   `received` (and RECEIVED in `-j`) with the received column; `-o`
//!   values are local on the top and, on a descendant that received a
//!   value of the property, the top's value is inherited (the received one
//!   masked); `-x` keeps a value out. A received quota caps `available`, a
//!   received mountpoint is where the dataset mounts. `set` overrides a
//!   received value, `inherit -S` reverts to it, plain `inherit` masks it.
//!   Properties removed on the sender (`inherit` there, a new snapshot,
//!   `send -R -I`) disappear on the receiver; local values stay. A dataset
//!   sent on from the receiver with `-p` carries its received values.
//!   Everything survives export/import.
//! - `bad_property_requests_fail_in_one_line`: `get -o` with an unknown
//!   field, `inherit -S` of a read-only property or on a snapshot, plain
//!   `inherit` of a property that is not inherited.

mod common;

use std::process::{Command, Stdio};

use common::{path_str, refused, wait_mounted, Harness, TARN};

/// `tarn send SEND | tarn recv RECV` through a real pipe; returns recv's
/// stderr (its warnings).
fn pipe(h: &Harness, send: &[&str], recv: &[&str]) -> String {
    let tarn = |args: &[&str]| {
        let mut c = Command::new(TARN);
        c.arg("--socket").arg(&h.socket).args(args);
        c
    };
    let mut sender = tarn(&[&["send"], send].concat()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn tarn send");
    let stream = sender.stdout.take().expect("sender stdout");
    let receiver = tarn(&[&["recv"], recv].concat()).stdin(stream).output().expect("run tarn recv");
    let sent = sender.wait_with_output().expect("wait for tarn send");
    assert!(sent.status.success(), "tarn send {send:?}: {}", String::from_utf8_lossy(&sent.stderr));
    common::assert_no_panic(&receiver, "recv");
    assert!(
        receiver.status.success(),
        "tarn recv {recv:?}: {}\ndaemon log:\n{}",
        String::from_utf8_lossy(&receiver.stderr),
        common::tail(&h.daemon_log(), 30)
    );
    String::from_utf8_lossy(&receiver.stderr).into_owned()
}

/// VALUE, RECEIVED and SOURCE of one property (`get -H -o value,received,source`).
fn cols(h: &Harness, prop: &str, name: &str) -> (String, String, String) {
    let line = h.tarn_ok(&["get", "-H", "-o", "value,received,source", prop, name]);
    let parts: Vec<&str> = line.trim_end_matches('\n').split('\t').collect();
    assert_eq!(parts.len(), 3, "get -o value,received,source {prop} {name}: {line:?}");
    (parts[0].to_string(), parts[1].to_string(), parts[2].to_string())
}

fn c(value: &str, received: &str, source: &str) -> (String, String, String) {
    (value.to_string(), received.to_string(), source.to_string())
}

fn single_pool(h: &Harness, pool: &str) -> std::path::PathBuf {
    let dev = h.vdev_files(pool, 1, common::VDEV_SIZE_BYTES);
    h.create_pool(pool, &[path_str(&dev[0])])
}

/// Every property the test looks at, of every dataset under `top`, with
/// the received column: what must survive export/import.
fn snapshot_of_props(h: &Harness, top: &str) -> String {
    h.tarn_ok(&[
        "get",
        "-r",
        "-t",
        "filesystem",
        "-H",
        "-o",
        "all",
        "compression,atime,quota,recordsize,sync,mountpoint,com.example:note",
        top,
    ])
}

#[test]
fn received_values_have_their_own_source_and_follow_the_sender() {
    let h = Harness::start();
    let tank = single_pool(&h, "tank");
    single_pool(&h, "backup");
    let kid_src = h.dir.join("kid-src");
    let rep_mnt = h.dir.join("rep");
    h.tarn_ok(&["create", "-o", "compression=zstd", "-o", "atime=off", "-o", "quota=64M", "tank/src"]);
    h.tarn_ok(&["set", "com.example:note=hello", "tank/src"]);
    h.tarn_ok(&[
        "create",
        "-o",
        "recordsize=16K",
        "-o",
        "sync=always",
        "-o",
        "atime=off",
        "-o",
        &format!("mountpoint={}", path_str(&kid_src)),
        "tank/src/kid",
    ]);
    wait_mounted(&kid_src);
    std::fs::write(tank.join("src/file"), b"top").unwrap();
    std::fs::write(kid_src.join("file"), b"kid").unwrap();
    h.tarn_ok(&["snapshot", "-r", "tank/src@s1"]);

    let mountpoint_opt = format!("mountpoint={}", path_str(&rep_mnt));
    pipe(&h, &["-R", "tank/src@s1"], &["-o", &mountpoint_opt, "-o", "atime=on", "-x", "sync", "backup/rep"]);
    wait_mounted(&rep_mnt);
    wait_mounted(&rep_mnt.join("kid"));
    assert_eq!(std::fs::read(rep_mnt.join("kid/file")).unwrap(), b"kid");

    // Received values, their source and column.
    assert_eq!(cols(&h, "compression", "backup/rep"), c("zstd", "zstd", "received"));
    assert_eq!(cols(&h, "quota", "backup/rep"), c("64M", "64M", "received"));
    assert_eq!(cols(&h, "com.example:note", "backup/rep"), c("hello", "hello", "received"));
    assert_eq!(cols(&h, "recordsize", "backup/rep/kid"), c("16K", "16K", "received"));
    assert_eq!(cols(&h, "compression", "backup/rep/kid"), c("zstd", "-", "inherited from backup/rep"));
    assert_eq!(cols(&h, "com.example:note", "backup/rep/kid"), c("hello", "-", "inherited from backup/rep"));
    // -o: local on the top (the received value kept beside it); on a
    // descendant that received a value, the top's value is inherited.
    assert_eq!(cols(&h, "atime", "backup/rep"), c("on", "off", "local"));
    assert_eq!(cols(&h, "atime", "backup/rep/kid"), c("on", "off", "inherited from backup/rep"));
    let rep_mnt_text = path_str(&rep_mnt);
    assert_eq!(cols(&h, "mountpoint", "backup/rep/kid"), c(&format!("{rep_mnt_text}/kid"), &path_str(&kid_src), "inherited from backup/rep"));
    // -x: not received at all.
    assert_eq!(cols(&h, "sync", "backup/rep/kid"), c("standard", "-", "default"));
    // A received quota caps available space as a local one does.
    let available: u64 = h.tarn_ok(&["get", "-Hp", "-o", "value", "available", "backup/rep"]).trim().parse().unwrap();
    assert!(available <= 64 << 20, "available {available} under a received quota of 64M");
    let pool_available: u64 = h.tarn_ok(&["get", "-Hp", "-o", "value", "available", "backup"]).trim().parse().unwrap();
    assert!(pool_available > 100 << 20, "the pool has more room than the quota: {pool_available}");
    // JSON: source type RECEIVED and the received value.
    let doc: serde_json::Value = serde_json::from_str(&h.tarn_ok(&["get", "-j", "compression,atime,recordsize", "backup/rep"])).unwrap();
    let p = &doc["datasets"]["backup/rep"]["properties"];
    assert_eq!(p["compression"]["source"]["type"], "RECEIVED", "{doc}");
    assert_eq!(p["compression"]["received"], "zstd");
    assert_eq!(p["atime"]["source"]["type"], "LOCAL");
    assert_eq!(p["atime"]["received"], "off");
    assert_eq!(p["recordsize"]["source"]["type"], "DEFAULT");
    assert!(p["recordsize"].get("received").is_none(), "no received value, no key: {doc}");
    // `-o all` is name, property, value, received, source.
    assert_eq!(h.tarn_ok(&["get", "-H", "-o", "all", "compression", "backup/rep"]), "backup/rep\tcompression\tzstd\tzstd\treceived\n");
    let table = h.tarn_ok(&["get", "-o", "name,property,value,received,source", "quota", "backup/rep/kid"]);
    assert_eq!(table.lines().next().map(|l| l.split_whitespace().collect::<Vec<_>>()), Some(vec!["NAME", "PROPERTY", "VALUE", "RECEIVED", "SOURCE"]));

    // set overrides, inherit -S reverts, plain inherit masks.
    h.tarn_ok(&["set", "compression=off", "backup/rep"]);
    assert_eq!(cols(&h, "compression", "backup/rep"), c("off", "zstd", "local"));
    assert_eq!(cols(&h, "compression", "backup/rep/kid").2, "inherited from backup/rep");
    h.tarn_ok(&["inherit", "-S", "compression", "backup/rep"]);
    assert_eq!(cols(&h, "compression", "backup/rep"), c("zstd", "zstd", "received"));
    h.tarn_ok(&["inherit", "compression", "backup/rep"]);
    assert_eq!(cols(&h, "compression", "backup/rep"), c("lz4", "zstd", "default"));
    assert_eq!(cols(&h, "compression", "backup/rep/kid"), c("lz4", "-", "default"));
    h.tarn_ok(&["inherit", "-S", "compression", "backup/rep"]);
    assert_eq!(cols(&h, "compression", "backup/rep"), c("zstd", "zstd", "received"));
    // A property that is not inherited goes back to its received value
    // with -S only.
    h.tarn_ok(&["set", "quota=none", "backup/rep"]);
    assert_eq!(cols(&h, "quota", "backup/rep"), c("none", "64M", "local"));
    refused(&h, &["inherit", "quota", "backup/rep"], 1);
    h.tarn_ok(&["inherit", "-S", "quota", "backup/rep"]);
    assert_eq!(cols(&h, "quota", "backup/rep"), c("64M", "64M", "received"));
    // inherit -S on the kid lifts the mask -o put there: the received
    // mountpoint is where it mounts (the sender's kid moved away first).
    let kid_moved = h.dir.join("kid-moved");
    h.tarn_ok(&["set", &format!("mountpoint={}", path_str(&kid_moved)), "tank/src/kid"]);
    wait_mounted(&kid_moved);
    h.tarn_ok(&["inherit", "-S", "mountpoint", "backup/rep/kid"]);
    assert_eq!(cols(&h, "mountpoint", "backup/rep/kid"), c(&path_str(&kid_src), &path_str(&kid_src), "received"));
    wait_mounted(&kid_src);
    assert_eq!(std::fs::read(kid_src.join("file")).unwrap(), b"kid", "the received copy mounts at the received mountpoint");

    // The sender drops properties; an incremental -R (this time without
    // -x sync) brings the new sets.
    h.tarn_ok(&["inherit", "compression", "tank/src"]);
    h.tarn_ok(&["inherit", "com.example:note", "tank/src"]);
    h.tarn_ok(&["inherit", "recordsize", "tank/src/kid"]);
    h.tarn_ok(&["inherit", "mountpoint", "tank/src/kid"]);
    wait_mounted(&tank.join("src/kid"));
    h.tarn_ok(&["snapshot", "-r", "tank/src@s2"]);
    pipe(&h, &["-R", "-I", "@s1", "tank/src@s2"], &["-F", "backup/rep"]);
    assert_eq!(cols(&h, "compression", "backup/rep"), c("lz4", "-", "default"));
    assert_eq!(cols(&h, "com.example:note", "backup/rep"), c("-", "-", "-"));
    assert_eq!(cols(&h, "recordsize", "backup/rep/kid"), c("128K", "-", "default"));
    assert_eq!(cols(&h, "sync", "backup/rep/kid"), c("always", "always", "received"));
    assert_eq!(cols(&h, "quota", "backup/rep"), c("64M", "64M", "received"), "kept on the sender, kept here");
    // Local values are the receiver's: untouched by a receive.
    assert_eq!(cols(&h, "atime", "backup/rep"), c("on", "off", "local"));
    assert_eq!(cols(&h, "mountpoint", "backup/rep").2, "local");
    // The kid's mountpoint went with the sender's: it follows the top again.
    assert_eq!(cols(&h, "mountpoint", "backup/rep/kid"), c(&format!("{rep_mnt_text}/kid"), "-", "inherited from backup/rep"));
    wait_mounted(&rep_mnt.join("kid"));
    assert!(!h.tarn_ok(&["get", "-H", "-o", "property", "all", "backup/rep"]).contains("com.example:note"), "a removed user property is gone from get all");

    // Sent on with -p, a received value travels as the dataset's own.
    pipe(&h, &["-p", "backup/rep@s2"], &["-o", "mountpoint=none", "backup/third"]);
    assert_eq!(cols(&h, "quota", "backup/third"), c("64M", "64M", "received"));
    assert_eq!(cols(&h, "atime", "backup/third"), c("on", "on", "received"));

    // Export and import keep all three layers.
    let before = snapshot_of_props(&h, "backup");
    assert!(before.contains("backup/rep\tatime\ton\toff\tlocal"), "{before}");
    h.export("backup");
    h.import("backup", &h.dir.join("backup"));
    wait_mounted(&rep_mnt.join("kid"));
    assert_eq!(snapshot_of_props(&h, "backup"), before);
    // The mask too: plain inherit masks, and after the import -S lifts it.
    h.tarn_ok(&["inherit", "atime", "backup/rep"]);
    assert_eq!(cols(&h, "atime", "backup/rep"), c("on", "off", "default"), "masked: the default (on) wins");
    h.export("backup");
    h.import("backup", &h.dir.join("backup"));
    assert_eq!(cols(&h, "atime", "backup/rep"), c("on", "off", "default"));
    h.tarn_ok(&["inherit", "-S", "atime", "backup/rep"]);
    assert_eq!(cols(&h, "atime", "backup/rep"), c("off", "off", "received"));
    h.tarn_ok(&["debug", "check", "backup"]);
}

#[test]
fn bad_property_requests_fail_in_one_line() {
    let h = Harness::start();
    single_pool(&h, "tank");
    h.tarn_ok(&["create", "tank/a"]);
    h.tarn_ok(&["snapshot", "tank/a@s"]);
    let stderr = refused(&h, &["get", "-o", "value,bogus", "compression", "tank/a"], 2);
    assert!(stderr.contains("bad field 'bogus'"), "{stderr}");
    let stderr = refused(&h, &["inherit", "-S", "used", "tank/a"], 1);
    assert!(stderr.contains("read-only"), "{stderr}");
    refused(&h, &["inherit", "-S", "compression", "tank/a@s"], 1);
    let stderr = refused(&h, &["inherit", "quota", "tank/a"], 1);
    assert!(stderr.contains("cannot be inherited"), "{stderr}");
    // Nothing to revert to: -S leaves the value inherited.
    h.tarn_ok(&["set", "compression=zstd", "tank/a"]);
    h.tarn_ok(&["inherit", "-S", "compression", "tank/a"]);
    assert_eq!(cols(&h, "compression", "tank/a"), c("lz4", "-", "default"));
}
