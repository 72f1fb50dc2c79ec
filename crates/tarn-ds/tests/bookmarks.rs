//! Bookmarks at the dataset level: create (from a snapshot, copied from a
//! bookmark), list, get, destroy, survive export/import, go with their
//! dataset, bad names and sources refused; and the point of them: an
//! incremental send from a bookmark after its snapshot was destroyed.

mod common;

use std::sync::Arc;

use tarn_dev::MemDevice;
use tarn_ds::Pool;
use tarn_obj::{ObjType, ObjectId, BONUS_LEN};
use tarn_send::{RecvOptions, RecvTarget, SendBase};

fn create(devs: &[Arc<MemDevice>]) -> Arc<Pool> {
    let pool = Pool::create(common::obj_pool("tank", devs), &[], &common::no_init).expect("create datasets");
    pool.create_dataset("tank/media", &[], false, &common::no_init)
        .unwrap();
    pool
}

fn get(pool: &Pool, name: &str, prop: &str) -> String {
    pool.get_property(name, prop, true, None)
        .unwrap_or_else(|e| panic!("get {prop} of {name}: {e}"))
        .value
}

fn err(r: tarn_ds::Result<impl std::fmt::Debug>) -> String {
    let e = r.expect_err("accepted").to_string();
    assert!(!e.contains('\n'), "multi-line error: {e}");
    e
}

#[test]
fn create_list_get_destroy_and_survive_import() {
    let devs = common::devices("bm", 128 << 20);
    let pool = create(&devs);
    pool.snapshot(&["tank/media@a".into()]).unwrap();
    pool.snapshot(&["tank/media@b".into()]).unwrap();
    pool.bookmark("tank/media@a", "tank/media#a").unwrap();
    pool.bookmark("tank/media@b", "#b").unwrap();
    pool.bookmark("tank/media#a", "tank/media#a-copy").unwrap();
    assert_eq!(
        pool.bookmarks(Some("tank/media")),
        vec!["tank/media#a", "tank/media#a-copy", "tank/media#b"]
    );
    assert_eq!(pool.bookmarks(None).len(), 3);
    assert!(pool.bookmarks(Some("tank")).is_empty());
    // Bookmarks are not snapshots nor datasets.
    assert_eq!(pool.snapshots(Some("tank/media")).len(), 2);
    assert!(!pool.list().iter().any(|n| n.contains('#')));

    let snap_a = pool.snapshot_record("tank/media@a").unwrap();
    let bm = pool.bookmark_record("tank/media#a").unwrap();
    assert_eq!(
        (bm.guid, bm.createtxg, bm.creation),
        (snap_a.guid, snap_a.createtxg, snap_a.creation)
    );
    assert_eq!(pool.bookmark_record("tank/media#a-copy").unwrap(), bm);
    assert_eq!(get(&pool, "tank/media#a", "type"), "bookmark");
    assert_eq!(get(&pool, "tank/media#a", "name"), "tank/media#a");
    assert_eq!(get(&pool, "tank/media#a", "guid"), snap_a.guid.to_string());
    assert_eq!(get(&pool, "tank/media@a", "guid"), snap_a.guid.to_string());
    assert_eq!(
        get(&pool, "tank/media#a", "createtxg"),
        snap_a.createtxg.to_string()
    );
    assert_eq!(
        get(&pool, "tank/media#a", "creation"),
        snap_a.creation.to_string()
    );
    assert_eq!(get(&pool, "tank/media#a", "used"), "0");

    // The snapshot goes, the bookmark stays.
    pool.destroy_snapshot("tank/media@a", false).unwrap();
    assert_eq!(pool.bookmark_record("tank/media#a").unwrap(), bm);
    pool.destroy_bookmark("tank/media#a-copy").unwrap();
    err(pool.destroy_bookmark("tank/media#a-copy"));

    pool.obj().export().unwrap();
    drop(pool);
    let pool = common::import(&devs);
    assert_eq!(pool.bookmarks(None), vec!["tank/media#a", "tank/media#b"]);
    assert_eq!(pool.bookmark_record("tank/media#a").unwrap(), bm);
    assert_eq!(get(&pool, "tank/media#b", "type"), "bookmark");

    // Destroying the dataset takes its bookmarks.
    pool.destroy_dataset("tank/media", true).unwrap();
    assert!(pool.bookmarks(None).is_empty());
    pool.obj().export().unwrap();
    drop(pool);
    let pool = common::import(&devs);
    assert!(pool.bookmarks(None).is_empty());
}

#[test]
fn bad_names_and_sources_are_refused() {
    let pool = create(&common::devices("bad", 128 << 20));
    pool.create_dataset("tank/other", &[], false, &common::no_init)
        .unwrap();
    pool.snapshot(&["tank/media@a".into()]).unwrap();
    pool.bookmark("tank/media@a", "tank/media#a").unwrap();
    let cases: &[(&str, &str)] = &[
        ("tank/media@nope", "tank/media#x"), // no such snapshot
        ("tank/media#nope", "tank/media#x"), // no such bookmark
        ("tank/media", "tank/media#x"),      // a dataset is not a source
        ("tank/media@a", "tank/media#a"),    // exists
        ("tank/media@a", "tank/other#x"),    // another dataset
        ("tank/media@a", "tank/media#"),     // empty name
        ("tank/media@a", "tank/media#a b"),  // bad character
        ("tank/media@a", "tank/media#a#b"),  // bad character
        ("tank/media@a", "tank/media#a@b"),  // bad character
        ("tank/media@a", "tank/media@x"),    // not a bookmark name
        ("tank/media@a", "tank/media"),      // not a bookmark name
        ("tank/media@a", "#"),               // empty short name
        ("tank/nope@a", "tank/nope#a"),      // no such dataset
        ("", ""),
    ];
    for (source, target) in cases {
        let e = err(pool.bookmark(source, target));
        assert!(!e.is_empty(), "{source} -> {target}");
    }
    let long = format!("tank/media#{}", "x".repeat(260));
    err(pool.bookmark("tank/media@a", &long));
    err(pool.destroy_bookmark("tank/media#nope"));
    err(pool.destroy_bookmark("tank/media"));
    err(pool.destroy_bookmark("tank/media#"));
    err(pool.get_property("tank/media#nope", "type", false, None));
    err(pool.send_base("tank/media#nope"));
    err(pool.send_base_for("#a", "tank/media@nope"));
    err(pool.send_base_for("tank/media", "tank/media@a"));
    // Not older than the target.
    err(pool.send_base_for("#a", "tank/media@a"));
    assert_eq!(pool.bookmarks(None), vec!["tank/media#a"]);
}

/// A rollback to an older snapshot destroys the bookmarks of newer ones
/// (what they describe is no longer the dataset's history).
#[test]
fn rollback_forgets_newer_bookmarks() {
    let pool = create(&common::devices("rb", 128 << 20));
    pool.snapshot(&["tank/media@a".into()]).unwrap();
    pool.snapshot(&["tank/media@b".into()]).unwrap();
    pool.bookmark("tank/media@a", "#a").unwrap();
    pool.bookmark("tank/media@b", "#b").unwrap();
    pool.destroy_snapshot("tank/media@b", false).unwrap();
    pool.rollback("tank/media@a", false).unwrap();
    assert_eq!(pool.bookmarks(None), vec!["tank/media#a"]);
}

fn write(pool: &Pool, obj: ObjectId, offset: u64, data: &[u8]) {
    let os = pool.objset("tank/media").unwrap();
    let tx = pool.obj().begin();
    os.write(&tx, obj, offset, data).unwrap();
}

fn read_all(os: &tarn_obj::ObjectSet, obj: ObjectId) -> Vec<u8> {
    let len = os.info(obj).unwrap().length;
    let mut buf = vec![0u8; len as usize];
    os.read(obj, 0, &mut buf).unwrap();
    buf
}

/// `send -i fs#a fs@b` after `fs@a` was destroyed, received where `@a` is.
#[test]
fn incremental_send_from_a_bookmark() {
    let pool = create(&common::devices("src", 128 << 20));
    let os = pool.objset("tank/media").unwrap();
    let (keep, gone) = {
        let tx = pool.obj().begin();
        let keep = os.create(&tx, ObjType(20), 4096, &[1; BONUS_LEN]).unwrap();
        os.write(&tx, keep, 0, &vec![7u8; 64 << 10]).unwrap();
        let gone = os.create(&tx, ObjType(20), 512, &[2; BONUS_LEN]).unwrap();
        os.write(&tx, gone, 0, &[3u8; 5000]).unwrap();
        (keep, gone)
    };
    pool.snapshot(&["tank/media@a".into()]).unwrap();
    let dst = common::obj_pool("backup", &common::devices("dst", 128 << 20));
    let SendBase::Snapshot(a) = pool.send_base("tank/media@a").unwrap() else {
        panic!("not a snapshot")
    };
    let mut full = Vec::new();
    tarn_send::send(pool.obj(), &a, None, &mut full).unwrap();
    let got = tarn_send::receive(
        &dst,
        &mut &full[..],
        RecvTarget::New,
        &RecvOptions::default(),
    )
    .unwrap();

    write(&pool, keep, 8192, &[9u8; 4096]);
    {
        let tx = pool.obj().begin();
        os.free_range(&tx, keep, 32 << 10, None).unwrap();
        os.free(&tx, gone).unwrap();
    }
    pool.snapshot(&["tank/media@b".into()]).unwrap();
    pool.bookmark("tank/media@a", "tank/media#a").unwrap();
    pool.destroy_snapshot("tank/media@a", false).unwrap();

    let (name, base) = pool.send_base_for("#a", "tank/media@b").unwrap();
    assert_eq!(name, "tank/media#a");
    assert!(matches!(base, SendBase::Bookmark { guid, .. } if guid == a.guid));
    let SendBase::Snapshot(b) = pool.send_base("tank/media@b").unwrap() else {
        panic!("not a snapshot")
    };
    let mut inc = Vec::new();
    tarn_send::send(pool.obj(), &b, Some(&base), &mut inc).unwrap();
    let target = RecvTarget::Existing {
        head: got.head,
        base: got.snapshots[0].snap_ref(),
        force: false,
    };
    let o = tarn_send::receive(&dst, &mut &inc[..], target, &RecvOptions::default()).unwrap();

    let theirs = pool.obj().open_objset(b.objset).unwrap();
    let ours = dst.open_objset(o.snapshots[0].objset).unwrap();
    assert_eq!(read_all(&ours, keep), read_all(&theirs, keep));
    assert_eq!(ours.info(keep).unwrap().length, 32 << 10);
    assert!(ours.info(gone).is_err(), "freed object still there");
}
