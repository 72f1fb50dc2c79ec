//! The dataset tree on memory devices: create, set, destroy, and everything
//! surviving export/import.

mod common;


use tarn_ds::{Pool, Source};

fn value(pool: &Pool, name: &str, prop: &str) -> (String, String) {
    let v = pool.get_property(name, prop, false, None).unwrap();
    (v.value, v.source)
}

#[test]
fn datasets_and_properties_survive_export_import() {
    let devs = common::devices("mem", 256 << 20);
    let pool = common::create(&devs, "/mnt/tank");
    assert_eq!(pool.list(), vec!["tank"]);
    pool.create_dataset("tank/media", &[("compression".into(), "zstd".into()), ("recordsize".into(), "1M".into())], false, &common::no_init)
        .unwrap();
    assert!(pool.create_dataset("tank/a/b", &[], false, &common::no_init).is_err());
    assert_eq!(pool.create_dataset("tank/a/b", &[], true, &common::no_init).unwrap(), vec!["tank/a", "tank/a/b"]);
    assert!(pool.create_dataset("tank/media", &[], false, &common::no_init).is_err());
    assert!(pool.create_dataset("tank/bad prop", &[], false, &common::no_init).is_err());
    assert!(pool.create_dataset("tank/x", &[("foo".into(), "1".into())], false, &common::no_init).is_err());
    pool.set_property("tank", "atime", "off").unwrap();
    pool.set_property("tank/a", "quota", "10G").unwrap();
    pool.set_pool_property("comment", "hello").unwrap();

    assert_eq!(value(&pool, "tank/media", "compression"), ("zstd".into(), "local".into()));
    assert_eq!(value(&pool, "tank/media", "recordsize"), ("1M".into(), "local".into()));
    assert_eq!(value(&pool, "tank/a/b", "atime"), ("off".into(), "inherited from tank".into()));
    assert_eq!(value(&pool, "tank/a/b", "mountpoint"), ("/mnt/tank/a/b".into(), "inherited from tank".into()));
    assert_eq!(value(&pool, "tank/a/b", "quota"), ("none".into(), "default".into()));
    assert_eq!(value(&pool, "tank/a", "quota"), ("10G".into(), "local".into()));
    assert_eq!(value(&pool, "tank", "type"), ("filesystem".into(), "-".into()));
    assert_eq!(value(&pool, "tank", "compressratio").0, "1.00x");
    assert!(pool.available_bytes("tank/a") <= 10 << 30);
    let with_root = pool.get_property("tank/a", "mountpoint", false, Some("/alt")).unwrap();
    assert_eq!(with_root.value, "/alt/mnt/tank/a");
    let settings = pool.settings("tank/media").unwrap();
    assert_eq!(settings.recordsize, 1 << 20);
    assert!(!pool.settings("tank/a/b").unwrap().atime);

    assert!(matches!(pool.destroy_dataset("tank/a", false), Err(tarn_ds::DsError::HasChildren(_))));
    assert!(matches!(pool.destroy_dataset("tank", true), Err(tarn_ds::DsError::IsPoolRoot(_))));
    pool.create_dataset("tank/gone", &[], false, &common::no_init).unwrap();
    assert_eq!(pool.destroy_dataset("tank/gone", false).unwrap(), vec!["tank/gone"]);
    let created = pool.record("tank/media").unwrap();

    pool.obj().export().unwrap();
    drop(pool);

    let pool = common::import(&devs);
    assert_eq!(pool.list(), vec!["tank", "tank/a", "tank/a/b", "tank/media"]);
    assert_eq!(pool.record("tank/media").unwrap(), created);
    assert_eq!(value(&pool, "tank/media", "compression"), ("zstd".into(), "local".into()));
    assert_eq!(value(&pool, "tank/a/b", "atime"), ("off".into(), "inherited from tank".into()));
    assert_eq!(value(&pool, "tank/a", "quota"), ("10G".into(), "local".into()));
    assert_eq!(pool.pool_property("comment"), ("hello".to_string(), Source::Local));
    assert_eq!(pool.pool_property("failmode"), ("wait".to_string(), Source::Default));
    assert_eq!(pool.destroy_dataset("tank/a", true).unwrap(), vec!["tank/a/b", "tank/a"]);
    pool.obj().export().unwrap();
    drop(pool);
    let pool = common::import(&devs);
    assert_eq!(pool.list(), vec!["tank", "tank/media"]);
    assert!(pool.obj().check().ok(), "{:?}", pool.obj().check());
}

/// `Pool::check` (behind `tarn debug check`) accounts for every object set
/// of the MOS: one that no dataset, snapshot or receive names is an orphan,
/// reported with the bytes only it holds and counted as leaked; named again
/// (here: destroyed), the pool is clean.
#[test]
fn an_object_set_nobody_names_is_a_leak() {
    let devs = common::devices("orph", 128 << 20);
    let pool = common::create(&devs, "/mnt/tank");
    pool.create_dataset("tank/a", &[], false, &common::no_init).unwrap();
    pool.snapshot(&["tank/a@s".into()]).unwrap();
    assert!(pool.check().unwrap().ok(), "{:?}", pool.check().unwrap());
    // An object set made behind the dataset layer's back, with data.
    let obj = pool.obj();
    let id = {
        let tx = obj.begin();
        obj.create_objset(&tx).unwrap()
    };
    obj.sync().unwrap();
    {
        let os = obj.open_objset(id).unwrap();
        let tx = obj.begin();
        let o = os.create(&tx, tarn_obj::ObjType(20), 4096, &[0; tarn_obj::BONUS_LEN]).unwrap();
        os.write(&tx, o, 0, &vec![7u8; 1 << 20]).unwrap();
    }
    obj.sync().unwrap();
    let r = pool.check().unwrap();
    assert!(!r.ok());
    assert_eq!(r.orphans.len(), 1, "{r:?}");
    assert!(r.orphans[0].starts_with(&format!("object set {} is named by no dataset", id.0)), "{r:?}");
    assert!(r.leaked_bytes >= 1 << 20, "the orphan's data is not counted as leaked: {r:?}");
    assert!(r.damaged.is_empty() && r.double_allocated_bytes == 0, "{r:?}");
    // The object layer's own checker counts it as referenced (no leak).
    assert!(obj.check().ok());
    {
        let tx = obj.begin();
        obj.destroy_objset(&tx, id).unwrap();
    }
    obj.sync().unwrap();
    let r = pool.check().unwrap();
    assert!(r.ok(), "{r:?}");
}
