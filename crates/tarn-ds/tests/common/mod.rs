//! Pools on memory devices for the dataset-layer tests.

#![allow(dead_code)]

use std::sync::Arc;

use tarn_dev::{CrashRecorder, Device, MemDevice};
use tarn_ds::Pool;
use tarn_obj::{ImportOptions, ObjPool, ObjectSet, PoolCreate, TopKind, Tunables, Tx};

/// An `InitObjset` that lays out nothing (no POSIX layer here).
pub fn no_init(_: &ObjectSet, _: &Tx) -> Result<(), String> {
    Ok(())
}

/// Three memory devices `<prefix>0..2` of `size` bytes.
pub fn devices(prefix: &str, size: u64) -> Vec<Arc<MemDevice>> {
    (0..3).map(|i| MemDevice::new(&format!("{prefix}{i}"), size)).collect()
}

/// An object pool `name`: raidz1 of `devs`.
pub fn obj_pool(name: &str, devs: &[Arc<MemDevice>]) -> Arc<ObjPool> {
    let tops = vec![(
        TopKind::Raidz { parity: 1 },
        devs.iter().map(|d| (d.path().to_string(), d.clone() as Arc<dyn Device>)).collect(),
    )];
    ObjPool::create(PoolCreate { name: name.into(), tops, ashift: 12, properties: Default::default(), hostname: "test".into() })
        .expect("create pool")
}

/// Pool `tank` on `devs` with its root's `mountpoint`.
pub fn create(devs: &[Arc<MemDevice>], mountpoint: &str) -> Arc<Pool> {
    Pool::create(obj_pool("tank", devs), &[("mountpoint".into(), mountpoint.into())], &no_init).expect("create datasets")
}

/// Imports the pool on `devs` (the previous handle must be gone or exported).
pub fn import(devs: &[Arc<MemDevice>]) -> Arc<Pool> {
    let list: Vec<Arc<dyn Device>> = devs.iter().map(|d| d.clone() as Arc<dyn Device>).collect();
    let obj = ObjPool::import(list, ImportOptions { hostname: "test".into(), ..Default::default() }).expect("import");
    Pool::open(obj).expect("open datasets")
}

/// Exports `pool` and imports it again.
pub fn reimport(pool: Arc<Pool>, devs: &[Arc<MemDevice>]) -> Arc<Pool> {
    pool.obj().export().expect("export");
    drop(pool);
    import(devs)
}

/// Pool `dst` for the power-cut tests: raidz1 of three devices `d0..2` of
/// `size` bytes made by `rec`, with no txg timer (txgs end when the test
/// syncs them).
pub fn crash_pool(rec: &Arc<CrashRecorder>, size: u64) -> Arc<Pool> {
    let devs: Vec<(String, Arc<dyn Device>)> = (0..3).map(|i| (format!("d{i}"), rec.device(&format!("d{i}"), size) as Arc<dyn Device>)).collect();
    let obj = ObjPool::create(PoolCreate { name: "dst".into(), tops: vec![(TopKind::Raidz { parity: 1 }, devs)], ashift: 12, properties: Default::default(), hostname: "test".into() })
        .unwrap();
    obj.set_tunables(Tunables { txg_timeout_ms: 3_600_000, ..Default::default() });
    Pool::create(obj, &[], &no_init).unwrap()
}

/// The devices left by a power cut, imported and opened (which settles a
/// receive in progress).
pub fn import_after_cut(devs: Vec<Arc<MemDevice>>) -> Arc<Pool> {
    let list: Vec<Arc<dyn Device>> = devs.into_iter().map(|d| d as Arc<dyn Device>).collect();
    let obj = ObjPool::import(list, ImportOptions { hostname: "test".into(), ..Default::default() }).expect("import after the cut");
    Pool::open(obj).expect("open the datasets after the cut (settles the receive)")
}
