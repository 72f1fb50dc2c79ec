//! Issue 9, the dataset verbs through the real daemon, CLI and FUSE
//! mounts: `inherit [-r]`, user properties, `rename` of datasets (mounts
//! move, children follow; `-p`, `-u`, `-f`) and snapshots (`-r`),
//! `list -d` and `-s`/`-S` (sizes sorted as numbers), `destroy -R`,
//! `mount -a`/`unmount -a`, and the properties tarn does not have yet.
//! Every verb is also given bad input: one line `tarn: ...`, exit 2 for
//! bad usage or an unknown property, exit 1 for a refused operation (a
//! property ZFS has but tarn not yet, a malformed user property, a missing
//! dataset), never a panic, and nothing changed.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{assert_clean_failure, mount_type, mounts_under, path_str, write_file, Harness};

/// Exit status `code`, one line `tarn: ...` on stderr; returns the line.
fn refused(harness: &Harness, args: &[&str], code: i32) -> String {
    let out = harness.tarn(args);
    assert_clean_failure(&out, &args.join(" "));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "tarn {}: {stderr}", args.join(" "));
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(lines.len() == 1 && lines[0].starts_with("tarn: "), "tarn {}: one line 'tarn: ...' wanted:\n{stderr}", args.join(" "));
    stderr.trim_end().to_string()
}

/// `get -H -o value,source PROP DS` → (value, source).
fn value_source(harness: &Harness, prop: &str, dataset: &str) -> (String, String) {
    let out = harness.tarn_ok(&["get", "-H", "-o", "value,source", prop, dataset]);
    let (value, source) = out.trim_end_matches('\n').split_once('\t').unwrap_or_else(|| panic!("get {prop} {dataset}: {out:?}"));
    (value.to_string(), source.to_string())
}

/// Names from `tarn ARGS` run with `-H -o name`.
fn names(harness: &Harness, args: &[&str]) -> Vec<String> {
    let mut full: Vec<&str> = args.to_vec();
    full.extend(["-H", "-o", "name"]);
    harness.tarn_ok(&full).lines().map(String::from).collect()
}

/// A dataset's own FUSE mount is at `path`, on top (not hidden under a
/// parent mounted later): a different device than the directory above.
fn assert_mounted(path: &Path) {
    assert!(mount_type(path).is_some_and(|t| t.starts_with("fuse")), "{} is not mounted", path.display());
    let here = fs::metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display())).dev();
    let above = fs::metadata(path.parent().unwrap()).unwrap().dev();
    assert_ne!(here, above, "{} is not its own mount (hidden under its parent's?)", path.display());
}

fn assert_unmounted(path: &Path) {
    assert!(mount_type(path).is_none(), "{} is still mounted", path.display());
}

/// `list -p -H -o used DS` once it has reached `at_least` bytes.
fn wait_used(harness: &Harness, dataset: &str, at_least: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let used: u64 = harness.tarn_ok(&["list", "-p", "-H", "-o", "used", dataset]).trim().parse().unwrap();
        if used >= at_least {
            return used;
        }
        assert!(Instant::now() < deadline, "{dataset}: used {used} never reached {at_least}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn mirror_pool(harness: &Harness) -> std::path::PathBuf {
    let devices = harness.vdev_files("vdevs", 2, 256 << 20);
    harness.create_pool("tank", &["mirror".into(), path_str(&devices[0]), path_str(&devices[1])])
}

#[test]
fn inherit_returns_values_to_inherited_or_default() {
    let harness = Harness::start();
    let root = mirror_pool(&harness);
    harness.tarn_ok(&["create", "-p", "tank/a/b/c"]);
    harness.tarn_ok(&["set", "compression=zstd", "tank/a"]);
    harness.tarn_ok(&["set", "compression=off", "tank/a/b"]);
    harness.tarn_ok(&["set", "recordsize=16K", "tank/a/b/c"]);
    assert_eq!(value_source(&harness, "compression", "tank/a/b"), ("off".into(), "local".into()));
    assert_eq!(value_source(&harness, "compression", "tank/a/b/c"), ("off".into(), "inherited from tank/a/b".into()));

    // One dataset: back to what its parent has, and its children with it.
    harness.tarn_ok(&["inherit", "compression", "tank/a/b"]);
    assert_eq!(value_source(&harness, "compression", "tank/a/b"), ("zstd".into(), "inherited from tank/a".into()));
    assert_eq!(value_source(&harness, "compression", "tank/a/b/c"), ("zstd".into(), "inherited from tank/a".into()));
    // The table's SOURCE column says the same.
    let table = harness.tarn_ok(&["get", "-r", "compression", "tank/a"]);
    let row = table.lines().find(|l| l.starts_with("tank/a/b ")).unwrap_or_else(|| panic!("{table}"));
    assert!(row.ends_with("inherited from tank/a"), "{table}");

    // -r: every local setting below goes too; the default comes back.
    harness.tarn_ok(&["set", "compression=zstd-3", "tank/a/b/c"]);
    harness.tarn_ok(&["inherit", "-r", "compression", "tank/a"]);
    for dataset in ["tank/a", "tank/a/b", "tank/a/b/c"] {
        let (value, source) = value_source(&harness, "compression", dataset);
        let (root_value, _) = value_source(&harness, "compression", "tank");
        assert_eq!((value, source.as_str()), (root_value, "default"), "{dataset}");
    }
    // Without -r, a child's own setting stays.
    assert_eq!(value_source(&harness, "recordsize", "tank/a/b/c"), ("16K".into(), "local".into()));
    harness.tarn_ok(&["inherit", "recordsize", "tank/a/b/c"]);
    assert_eq!(value_source(&harness, "recordsize", "tank/a/b/c"), ("128K".into(), "default".into()));

    // mountpoint: the mount moves away and back.
    let elsewhere = harness.dir.join("elsewhere");
    harness.tarn_ok(&["set", &format!("mountpoint={}", path_str(&elsewhere)), "tank/a/b"]);
    assert_mounted(&elsewhere);
    assert_mounted(&elsewhere.join("c"));
    write_file(&elsewhere.join("c/file"), b"moved");
    harness.tarn_ok(&["inherit", "mountpoint", "tank/a/b"]);
    assert_unmounted(&elsewhere);
    assert_mounted(&root.join("a/b"));
    assert_mounted(&root.join("a/b/c"));
    assert_eq!(fs::read(root.join("a/b/c/file")).unwrap(), b"moved");
    assert_eq!(value_source(&harness, "mountpoint", "tank/a/b").1, "inherited from tank");

    // Bad input; nothing changes.
    harness.tarn_ok(&["set", "compression=zstd", "tank/a"]);
    let line = refused(&harness, &["inherit", "nosuch", "tank/a"], 2);
    assert_eq!(line, "tarn: bad property 'nosuch'");
    let line = refused(&harness, &["inherit", "dedup", "tank/a"], 1);
    assert_eq!(line, "tarn: property 'dedup' is not yet supported");
    let line = refused(&harness, &["inherit", "used", "tank/a"], 1);
    assert!(line.contains("read-only"), "{line}");
    let line = refused(&harness, &["inherit", "compression", "tank/nosuch"], 1);
    assert!(line.contains("does not exist"), "{line}");
    harness.tarn_ok(&["snapshot", "tank/a@s"]);
    refused(&harness, &["inherit", "compression", "tank/a@s"], 1);
    refused(&harness, &["inherit", "compression"], 2);
    refused(&harness, &["inherit", "-q", "compression", "tank/a"], 2);
    assert_eq!(value_source(&harness, "compression", "tank/a"), ("zstd".into(), "local".into()));
}

#[test]
fn user_properties_are_set_inherited_listed_and_removed() {
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 1, 256 << 20);
    harness.create_pool("tank", &[path_str(&devices[0])]);
    harness.tarn_ok(&["create", "-p", "tank/a/b"]);
    const NOTE: &str = "com.example:note";

    harness.tarn_ok(&["set", "com.example:note=x", "tank/a"]);
    assert_eq!(value_source(&harness, NOTE, "tank/a"), ("x".into(), "local".into()));
    assert_eq!(value_source(&harness, NOTE, "tank/a/b"), ("x".into(), "inherited from tank/a".into()));
    assert_eq!(value_source(&harness, NOTE, "tank"), ("-".into(), "-".into()));
    // `get all` shows it, with its source.
    let all = harness.tarn_ok(&["get", "-H", "all", "tank/a/b"]);
    assert!(all.lines().any(|l| l == format!("tank/a/b\t{NOTE}\tx\tinherited from tank/a")), "{all}");
    let all = harness.tarn_ok(&["get", "-H", "all", "tank"]);
    assert!(!all.contains(NOTE), "a user property nobody set is not in `get all`:\n{all}");
    // A column of `list`, and JSON.
    let listed = harness.tarn_ok(&["list", "-H", "-r", "-o", &format!("name,{NOTE}"), "tank"]);
    assert_eq!(listed, "tank\t-\ntank/a\tx\ntank/a/b\tx\n");
    let doc: serde_json::Value = serde_json::from_str(&harness.tarn_ok(&["get", "-j", NOTE, "tank/a/b"])).unwrap();
    assert!(doc.to_string().contains("\"x\""), "{doc:#}");

    // A child's own value wins; values with spaces are kept as written.
    harness.tarn_ok(&["set", "com.example:note=child's own, with spaces", "tank/a/b"]);
    assert_eq!(value_source(&harness, NOTE, "tank/a/b"), ("child's own, with spaces".into(), "local".into()));
    // They survive export and import.
    harness.export("tank");
    harness.import("tank", devices[0].parent().unwrap());
    assert_eq!(value_source(&harness, NOTE, "tank/a"), ("x".into(), "local".into()));
    assert_eq!(value_source(&harness, NOTE, "tank/a/b"), ("child's own, with spaces".into(), "local".into()));

    // inherit removes it: the child's from the parent, then the parent's.
    harness.tarn_ok(&["inherit", NOTE, "tank/a/b"]);
    assert_eq!(value_source(&harness, NOTE, "tank/a/b"), ("x".into(), "inherited from tank/a".into()));
    harness.tarn_ok(&["inherit", NOTE, "tank/a"]);
    for dataset in ["tank/a", "tank/a/b"] {
        assert_eq!(value_source(&harness, NOTE, dataset), ("-".into(), "-".into()), "{dataset}");
        assert!(!harness.tarn_ok(&["get", "all", dataset]).contains(NOTE));
    }

    // Bad names and values are refused (exit 1, one line) and set nothing.
    harness.tarn_ok(&["set", "com.example:keep=1", "tank/a"]);
    let long_name = format!("com.example:{}", "n".repeat(250));
    let long_value = format!("com.example:keep={}", "v".repeat(8193));
    for bad in ["Com.Example:x=1", ":x=1", "com.ex ample:x=1", "com.example:x/y=1", &format!("{long_name}=1"), &long_value] {
        let line = refused(&harness, &["set", bad, "tank/a"], 1);
        assert!(line.contains("user property"), "set {bad}: {line}");
    }
    refused(&harness, &["get", "Com.Example:x", "tank/a"], 1);
    refused(&harness, &["inherit", "com.example:x/y", "tank/a"], 1);
    refused(&harness, &["create", "-o", "Bad:x=1", "tank/c"], 1);
    assert_eq!(names(&harness, &["list", "-r", "tank"]), ["tank", "tank/a", "tank/a/b"]);
    assert_eq!(value_source(&harness, "com.example:keep", "tank/a"), ("1".into(), "local".into()));
    let all = harness.tarn_ok(&["get", "-H", "-o", "property", "all", "tank/a"]);
    let user: Vec<&str> = all.lines().filter(|p| p.contains(':')).collect();
    assert_eq!(user, ["com.example:keep"], "only the valid user property was stored");
}

#[test]
fn rename_moves_mounts_and_children() {
    let harness = Harness::start();
    let root = mirror_pool(&harness);
    harness.tarn_ok(&["create", "-p", "tank/a/b/c"]);
    write_file(&root.join("a/b/c/file"), b"deep");
    harness.tarn_ok(&["snapshot", "-r", "tank/a@s1"]);
    harness.tarn_ok(&["bookmark", "tank/a/b@s1", "tank/a/b#m1"]);

    harness.tarn_ok(&["rename", "tank/a", "tank/z"]);
    for gone in ["a/b/c", "a/b", "a"] {
        assert_unmounted(&root.join(gone));
    }
    for here in ["z", "z/b", "z/b/c"] {
        assert_mounted(&root.join(here));
    }
    assert_eq!(fs::read(root.join("z/b/c/file")).unwrap(), b"deep");
    assert_eq!(
        names(&harness, &["list", "-r", "-t", "all", "tank"]),
        ["tank", "tank/z", "tank/z@s1", "tank/z/b", "tank/z/b@s1", "tank/z/b#m1", "tank/z/b/c", "tank/z/b/c@s1"]
    );
    assert_eq!(value_source(&harness, "mountpoint", "tank/z/b/c").0, path_str(&root.join("z/b/c")));
    assert_eq!(fs::read(root.join("z/b/c/.zfs/snapshot/s1/file")).unwrap(), b"deep");

    // -p: missing parents are created (and mounted).
    harness.tarn_ok(&["rename", "-p", "tank/z/b", "tank/q/r/b"]);
    assert_eq!(names(&harness, &["list", "-r", "tank"]), ["tank", "tank/q", "tank/q/r", "tank/q/r/b", "tank/q/r/b/c", "tank/z"]);
    for here in ["q", "q/r", "q/r/b", "q/r/b/c", "z"] {
        assert_mounted(&root.join(here));
    }
    assert_eq!(fs::read(root.join("q/r/b/c/file")).unwrap(), b"deep");

    // -u: renamed but not mounted; `mount -a` mounts them, parents first.
    harness.tarn_ok(&["rename", "-u", "tank/q", "tank/u"]);
    assert_unmounted(&root.join("q"));
    assert_unmounted(&root.join("u"));
    harness.tarn_ok(&["mount", "-a"]);
    for here in ["u", "u/r", "u/r/b", "u/r/b/c"] {
        assert_mounted(&root.join(here));
    }

    // A busy file system refuses (exit 1) unless -f.
    let held = fs::File::open(root.join("u/r/b/c/file")).unwrap();
    let line = refused(&harness, &["rename", "tank/u", "tank/v"], 1);
    assert!(line.contains("busy"), "{line}");
    assert_eq!(names(&harness, &["list", "-d", "1", "tank"]), ["tank", "tank/u", "tank/z"]);
    assert_mounted(&root.join("u/r/b/c"));
    harness.tarn_ok(&["rename", "-f", "tank/u", "tank/v"]);
    drop(held);
    assert_mounted(&root.join("v/r/b/c"));
    assert_eq!(fs::read(root.join("v/r/b/c/file")).unwrap(), b"deep");

    // Refusals change nothing, and leave every mount where it was (a
    // refused rename of the pool's root must not bury its children's
    // mounts under its own).
    let before = names(&harness, &["list", "-r", "-t", "all", "tank"]);
    let refusals: [(&[&str], &str); 8] = [
        (&["rename", "tank/v", "tank/v/inside"], "inside"),
        (&["rename", "tank/v", "tank/nosuch/x"], "does not exist"),
        (&["rename", "tank/v", "other/x"], "stay in their pool"),
        (&["rename", "tank/v", "tank/z"], "already exists"),
        (&["rename", "tank/nosuch", "tank/y"], "does not exist"),
        (&["rename", "-r", "tank/v", "tank/w"], "-r"),
        (&["rename", "tank", "tank2"], "root dataset"),
        (&["rename", "tank/v", "tank/bad@name"], "not a dataset name"),
    ];
    for (args, why) in refusals {
        let line = refused(&harness, args, 1);
        assert!(line.contains(why), "{args:?}: {line}");
        assert_eq!(line.matches("cannot rename").count(), 1, "said once: {line}");
    }
    refused(&harness, &["rename", "tank/v"], 2);
    assert_eq!(names(&harness, &["list", "-r", "-t", "all", "tank"]), before);
    for here in ["v", "v/r", "v/r/b", "v/r/b/c", "z"] {
        assert_mounted(&root.join(here));
    }
    assert_eq!(fs::read(root.join("v/r/b/c/file")).unwrap(), b"deep");
    harness.tarn_ok(&["debug", "check", "tank"]);
}

#[test]
fn rename_snapshots_alone_and_recursively() {
    let harness = Harness::start();
    let root = mirror_pool(&harness);
    harness.tarn_ok(&["create", "-p", "tank/a/b/c"]);
    harness.tarn_ok(&["create", "tank/a/nosnap"]);
    write_file(&root.join("a/b/file"), b"b's");
    harness.tarn_ok(&["snapshot", "-r", "tank/a@s1"]);
    harness.tarn_ok(&["destroy", "tank/a/nosnap@s1"]);

    // -r: the snapshot of that name in every descendant that has one.
    harness.tarn_ok(&["rename", "-r", "tank/a@s1", "@s2"]);
    assert_eq!(
        names(&harness, &["list", "-r", "-t", "snapshot", "tank"]),
        ["tank/a@s2", "tank/a/b@s2", "tank/a/b/c@s2"]
    );
    assert_eq!(fs::read(root.join("a/b/.zfs/snapshot/s2/file")).unwrap(), b"b's");
    assert!(!root.join("a/b/.zfs/snapshot/s1").exists());
    // Without -r: that one only; the long form of the new name works too.
    harness.tarn_ok(&["rename", "tank/a/b@s2", "tank/a/b@s3"]);
    assert_eq!(
        names(&harness, &["list", "-r", "-t", "snapshot", "tank"]),
        ["tank/a@s2", "tank/a/b@s3", "tank/a/b/c@s2"]
    );
    assert_eq!(fs::read(root.join("a/b/.zfs/snapshot/s3/file")).unwrap(), b"b's");

    let before = names(&harness, &["list", "-r", "-t", "all", "tank"]);
    harness.tarn_ok(&["snapshot", "tank/a/b@taken"]);
    let before_with = names(&harness, &["list", "-r", "-t", "all", "tank"]);
    assert_eq!(before_with.len(), before.len() + 1);
    for (args, why) in [
        (&["rename", "tank/a/b@s3", "tank/a@s4"][..], "within their dataset"),
        (&["rename", "tank/a/b@s3", "s4"], "not a snapshot name"),
        (&["rename", "tank/a/b@nosuch", "@s4"], "does not exist"),
        (&["rename", "tank/a/b@s3", "@bad@x"], "invalid"),
        (&["rename", "tank/a/b@s3", "@taken"], "exists"),
    ] {
        let line = refused(&harness, args, 1);
        assert!(line.contains(why), "{args:?}: {line}");
    }
    assert_eq!(names(&harness, &["list", "-r", "-t", "all", "tank"]), before_with);
}

#[test]
fn list_depth_and_sorting() {
    let harness = Harness::start();
    let root = mirror_pool(&harness);
    harness.tarn_ok(&["create", "-p", "tank/big/deeper/deepest"]);
    harness.tarn_ok(&["create", "tank/small"]);
    harness.tarn_ok(&["create", "-o", "compression=off", "tank/mid"]);
    // 10 MiB against 2 MiB: sorted as text "10M" would come before "2M".
    let mut rng = tarn_testkit::seeded!(1).rng(1);
    write_file(&root.join("big/data"), &common::random_bytes(&mut rng, 10 << 20));
    write_file(&root.join("mid/data"), &common::random_bytes(&mut rng, 2 << 20));
    write_file(&root.join("small/data"), &common::random_bytes(&mut rng, 200 << 10));
    wait_used(&harness, "tank/big", 10 << 20);
    wait_used(&harness, "tank/mid", 2 << 20);
    wait_used(&harness, "tank/small", 200 << 10);

    assert_eq!(names(&harness, &["list", "-d", "0", "tank"]), ["tank"]);
    assert_eq!(names(&harness, &["list", "-d", "1", "tank"]), ["tank", "tank/big", "tank/mid", "tank/small"]);
    assert_eq!(
        names(&harness, &["list", "-d", "2", "tank"]),
        ["tank", "tank/big", "tank/big/deeper", "tank/mid", "tank/small"]
    );
    assert_eq!(names(&harness, &["list", "-d", "1", "tank/big"]), ["tank/big", "tank/big/deeper"]);
    // -d counts snapshots one level below their dataset, as zfs does.
    harness.tarn_ok(&["snapshot", "-r", "tank@s"]);
    assert_eq!(names(&harness, &["list", "-d", "1", "-t", "snapshot", "tank"]), ["tank@s"]);

    // -s used: ascending by the number, whatever the unit.
    let by_used = names(&harness, &["list", "-d", "1", "-s", "used", "tank"]);
    assert_eq!(by_used, ["tank/small", "tank/mid", "tank/big", "tank"]);
    let shown = harness.tarn_ok(&["list", "-H", "-d", "1", "-o", "name,used", "-s", "used", "tank"]);
    let used: Vec<&str> = shown.lines().map(|l| l.split('\t').nth(1).unwrap()).collect();
    // As text the order would be the other way round ("10.1M" < "2.11M").
    assert!(used[1].ends_with('M') && used[2].ends_with('M') && used[1] > used[2], "{shown}");
    assert_eq!(names(&harness, &["list", "-d", "1", "-S", "used", "tank"]), ["tank", "tank/big", "tank/mid", "tank/small"]);
    let parsable = harness.tarn_ok(&["list", "-H", "-p", "-r", "-o", "used", "-S", "used", "tank"]);
    let numbers: Vec<u64> = parsable.lines().map(|l| l.parse().unwrap()).collect();
    assert!(numbers.windows(2).all(|w| w[0] >= w[1]), "{parsable}");
    // Text properties sort as text; several keys in order.
    assert_eq!(
        names(&harness, &["list", "-d", "1", "-S", "name", "tank"]),
        ["tank/small", "tank/mid", "tank/big", "tank"]
    );
    let keyed = harness.tarn_ok(&["list", "-H", "-d", "1", "-o", "name,compression", "-s", "compression", "-S", "used", "tank"]);
    let keyed: Vec<&str> = keyed.lines().map(|l| l.split('\t').next().unwrap()).collect();
    assert_eq!(keyed, ["tank", "tank/big", "tank/small", "tank/mid"], "lz4 before off, then by used, largest first");

    // A new empty dataset compresses nothing: 1.00x.
    harness.tarn_ok(&["create", "tank/empty"]);
    assert_eq!(value_source(&harness, "compressratio", "tank/empty"), ("1.00x".into(), "-".into()));
    assert_eq!(harness.tarn_ok(&["list", "-H", "-o", "compressratio", "tank/empty"]), "1.00x\n");

    refused(&harness, &["list", "-s", "nosuch"], 2);
    refused(&harness, &["list", "-S", "nosuch"], 2);
    let line = refused(&harness, &["list", "-s", "dedup"], 1);
    assert_eq!(line, "tarn: property 'dedup' is not yet supported");
    refused(&harness, &["list", "-d", "x"], 2);
    refused(&harness, &["list", "-d", "-1"], 2);
    refused(&harness, &["list", "-d", "1", "tank/nosuch"], 1);
}

#[test]
fn destroy_dependents_takes_clones_with_it() {
    let harness = Harness::start();
    let root = mirror_pool(&harness);
    harness.tarn_ok(&["create", "-p", "tank/src/kid"]);
    write_file(&root.join("src/kid/file"), b"kid");
    harness.tarn_ok(&["snapshot", "-r", "tank/src@s"]);
    harness.tarn_ok(&["clone", "tank/src@s", "tank/cl"]);
    harness.tarn_ok(&["snapshot", "tank/cl@c"]);
    harness.tarn_ok(&["clone", "tank/cl@c", "tank/cl2"]);
    harness.tarn_ok(&["clone", "tank/src/kid@s", "tank/kidclone"]);
    harness.tarn_ok(&["create", "tank/bystander"]);
    harness.tarn_ok(&["snapshot", "tank/bystander@b"]);
    assert_eq!(fs::read(root.join("kidclone/file")).unwrap(), b"kid");
    let everything = names(&harness, &["list", "-r", "-t", "all", "tank"]);

    // Without -R: refused, naming the clone.
    let line = refused(&harness, &["destroy", "-r", "tank/src"], 1);
    assert!(line.contains("clones") && line.contains("tank/cl"), "{line}");
    let line = refused(&harness, &["destroy", "tank/src@s"], 1);
    assert!(line.contains("clones"), "{line}");
    // A dry run lists every dependent, before what it depends on.
    let dry = harness.tarn_ok(&["destroy", "-n", "-v", "-R", "tank/src"]);
    let doomed: Vec<&str> = dry.lines().map(|l| l.strip_prefix("would destroy ").unwrap_or_else(|| panic!("{dry}"))).collect();
    let mut sorted = doomed.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        ["tank/cl", "tank/cl2", "tank/cl@c", "tank/kidclone", "tank/src", "tank/src/kid", "tank/src/kid@s", "tank/src@s"]
    );
    let position = |name: &str| doomed.iter().position(|d| *d == name).unwrap();
    assert!(position("tank/cl2") < position("tank/cl@c") && position("tank/cl@c") < position("tank/cl"));
    assert!(position("tank/cl") < position("tank/src@s") && position("tank/kidclone") < position("tank/src/kid@s"));
    assert_eq!(names(&harness, &["list", "-r", "-t", "all", "tank"]), everything, "-n destroys nothing");

    // On a snapshot: that snapshot and its clones (with theirs); the kid's
    // snapshot and its clone stay.
    let parsable = harness.tarn_ok(&["destroy", "-R", "-p", "-v", "tank/src@s"]);
    assert!(parsable.lines().all(|l| l.starts_with("destroy\t")), "{parsable}");
    assert_eq!(parsable.lines().count(), 4, "{parsable}");
    assert_eq!(
        names(&harness, &["list", "-r", "-t", "all", "tank"]),
        ["tank", "tank/bystander", "tank/bystander@b", "tank/kidclone", "tank/src", "tank/src/kid", "tank/src/kid@s"]
    );
    assert_unmounted(&root.join("cl"));
    assert_unmounted(&root.join("cl2"));

    // On the dataset: its descendants, snapshots and the kid's clone.
    harness.tarn_ok(&["destroy", "-R", "tank/src"]);
    assert_eq!(names(&harness, &["list", "-r", "-t", "all", "tank"]), ["tank", "tank/bystander", "tank/bystander@b"]);
    assert_unmounted(&root.join("kidclone"));
    assert_unmounted(&root.join("src/kid"));
    assert_mounted(&root.join("bystander"));
    harness.tarn_ok(&["debug", "check", "tank"]);

    refused(&harness, &["destroy", "-R", "tank/nosuch"], 1);
    refused(&harness, &["destroy", "-R", "tank/bystander@nosuch"], 1);
    refused(&harness, &["destroy", "-R"], 2);
}

#[test]
fn mount_all_and_unmount_all() {
    let harness = Harness::start();
    let root = mirror_pool(&harness);
    let other_devices = harness.vdev_files("other", 1, 128 << 20);
    let other = harness.create_pool("other", &[path_str(&other_devices[0])]);
    harness.tarn_ok(&["create", "-p", "tank/a/b"]);
    harness.tarn_ok(&["create", "other/x"]);
    write_file(&root.join("a/b/file"), b"in b");
    let mounted = [root.clone(), root.join("a"), root.join("a/b"), other.clone(), other.join("x")];

    harness.tarn_ok(&["unmount", "-a"]);
    assert_eq!(mounts_under(&harness.dir), Vec::<std::path::PathBuf>::new(), "every dataset of every pool");
    assert_eq!(harness.tarn_ok(&["mount"]), "", "`mount` lists nothing");
    harness.tarn_ok(&["mount", "-a"]);
    for path in &mounted {
        assert_mounted(path);
    }
    assert_eq!(fs::read(root.join("a/b/file")).unwrap(), b"in b");
    let listing = harness.tarn_ok(&["mount"]);
    assert_eq!(listing.lines().count(), mounted.len(), "{listing}");
    // Again: nothing to do, still success.
    harness.tarn_ok(&["mount", "-a"]);
    assert_eq!(harness.tarn_ok(&["mount"]), listing);

    // A busy file system stays, and the command says so and fails; the
    // others are unmounted. -f takes it anyway.
    let held = fs::File::open(root.join("a/b/file")).unwrap();
    let out = harness.tarn(&["unmount", "-a"]);
    common::assert_no_panic(&out, "unmount -a");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.is_empty() && stderr.lines().all(|l| l.starts_with("tarn: ") && l.contains("busy")), "{stderr}");
    assert!(stderr.contains(&path_str(&root.join("a/b"))), "{stderr}");
    assert_unmounted(&other.join("x"));
    assert_unmounted(&other);
    assert_mounted(&root.join("a/b"));
    harness.tarn_ok(&["unmount", "-a", "-f"]);
    drop(held);
    assert_eq!(mounts_under(&harness.dir), Vec::<std::path::PathBuf>::new());
    harness.tarn_ok(&["mount", "-a"]);
    for path in &mounted {
        assert_mounted(path);
    }

    refused(&harness, &["mount", "-a", "tank"], 2);
    refused(&harness, &["unmount", "-a", "tank/a"], 2);
    refused(&harness, &["unmount"], 2);
}

#[test]
fn properties_tarn_does_not_have_yet_and_unknown_ones() {
    let harness = Harness::start();
    mirror_pool(&harness);
    harness.tarn_ok(&["create", "tank/a"]);
    let before = harness.tarn_ok(&["get", "-H", "all", "tank/a"]);

    let line = refused(&harness, &["set", "dedup=on", "tank/a"], 1);
    assert_eq!(line, "tarn: property 'dedup' is not yet supported");
    for prop in tarn_ds::props::NOT_YET_SUPPORTED {
        let want = format!("tarn: property '{prop}' is not yet supported");
        assert_eq!(refused(&harness, &["set", &format!("{prop}=on"), "tank/a"], 1), want);
        assert_eq!(refused(&harness, &["get", prop, "tank/a"], 1), want);
        assert_eq!(refused(&harness, &["inherit", prop, "tank/a"], 1), want);
        assert_eq!(refused(&harness, &["create", "-o", &format!("{prop}=on"), "tank/b"], 1), want);
        assert_eq!(refused(&harness, &["list", "-o", &format!("name,{prop}")], 1), want);
    }
    // Volume options without -V: bad usage (volumes: tests/volumes.rs).
    refused(&harness, &["create", "-s", "tank/vol"], 2);
    refused(&harness, &["create", "-b", "8K", "tank/vol"], 2);

    // A name no ZFS has: bad usage.
    for args in [
        &["set", "nosuch=1", "tank/a"][..],
        &["get", "nosuch", "tank/a"],
        &["get", "compression,nosuch", "tank/a"],
        &["inherit", "nosuch", "tank/a"],
        &["create", "-o", "nosuch=1", "tank/b"],
        &["list", "-o", "name,nosuch"],
    ] {
        assert_eq!(refused(&harness, args, 2), "tarn: bad property 'nosuch'", "{args:?}");
    }
    assert_eq!(names(&harness, &["list", "-r", "tank"]), ["tank", "tank/a"]);
    assert_eq!(harness.tarn_ok(&["get", "-H", "all", "tank/a"]), before);
}
