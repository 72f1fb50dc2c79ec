//! The dataset tree on memory devices: create, set, destroy, and everything
//! surviving export/import.

use std::sync::Arc;

use tarn_dev::{Device, MemDevice};
use tarn_ds::{Pool, Source};
use tarn_obj::{ImportOptions, ObjPool, PoolCreate, TopKind};

fn no_init(_: &tarn_obj::ObjectSet, _: &tarn_obj::Tx) -> Result<(), String> {
    Ok(())
}

fn devices() -> Vec<Arc<MemDevice>> {
    (0..3).map(|i| MemDevice::new(&format!("mem{i}"), 256 << 20)).collect()
}

fn create(devs: &[Arc<MemDevice>]) -> Arc<Pool> {
    let tops = vec![(
        TopKind::Raidz { parity: 1 },
        devs.iter().map(|d| (d.path().to_string(), d.clone() as Arc<dyn Device>)).collect(),
    )];
    let obj = ObjPool::create(PoolCreate {
        name: "tank".into(),
        tops,
        ashift: 12,
        properties: Default::default(),
        hostname: "test".into(),
    })
    .expect("create pool");
    Pool::create(obj, &[("mountpoint".into(), "/mnt/tank".into())], &no_init).expect("create datasets")
}

fn import(devs: &[Arc<MemDevice>]) -> Arc<Pool> {
    let list: Vec<Arc<dyn Device>> = devs.iter().map(|d| d.clone() as Arc<dyn Device>).collect();
    let obj = ObjPool::import(list, ImportOptions::default()).expect("import");
    Pool::open(obj).expect("open datasets")
}

fn value(pool: &Pool, name: &str, prop: &str) -> (String, String) {
    let v = pool.get_property(name, prop, false, None).unwrap();
    (v.value, v.source)
}

#[test]
fn datasets_and_properties_survive_export_import() {
    let devs = devices();
    let pool = create(&devs);
    assert_eq!(pool.list(), vec!["tank"]);
    pool.create_dataset("tank/media", &[("compression".into(), "zstd".into()), ("recordsize".into(), "1M".into())], false, &no_init)
        .unwrap();
    assert!(pool.create_dataset("tank/a/b", &[], false, &no_init).is_err());
    assert_eq!(pool.create_dataset("tank/a/b", &[], true, &no_init).unwrap(), vec!["tank/a", "tank/a/b"]);
    assert!(pool.create_dataset("tank/media", &[], false, &no_init).is_err());
    assert!(pool.create_dataset("tank/bad prop", &[], false, &no_init).is_err());
    assert!(pool.create_dataset("tank/x", &[("foo".into(), "1".into())], false, &no_init).is_err());
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
    pool.create_dataset("tank/gone", &[], false, &no_init).unwrap();
    assert_eq!(pool.destroy_dataset("tank/gone", false).unwrap(), vec!["tank/gone"]);
    let created = pool.record("tank/media").unwrap();

    pool.obj().export().unwrap();
    drop(pool);

    let pool = import(&devs);
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
    let pool = import(&devs);
    assert_eq!(pool.list(), vec!["tank", "tank/media"]);
    assert!(pool.obj().check().ok(), "{:?}", pool.obj().check());
}
