//! What the tests of tarn-fs and tarn-fuse share: a pool on memory
//! devices and an empty file system in a new object set of it. tarn-fuse's
//! tests include this file by path.
#![allow(dead_code)]

use std::sync::Arc;

use tarn_dev::{Device, MemDevice};
use tarn_fs::{Fs, FsOptions};
use tarn_obj::{ObjPool, PoolCreate, TopKind};

/// A pool `name` of one top-level vdev of `kind` on `devices` memory
/// devices (`m0`, `m1`, … or `mem0` alone) of `size` bytes each, ashift 12.
pub fn mem_pool(name: &str, kind: TopKind, devices: usize, size: u64) -> (Arc<ObjPool>, Vec<Arc<MemDevice>>) {
    let names: Vec<String> = if devices == 1 { vec!["mem0".into()] } else { (0..devices).map(|i| format!("m{i}")).collect() };
    let devs: Vec<Arc<MemDevice>> = names.iter().map(|n| MemDevice::new(n, size)).collect();
    let pool = ObjPool::create(PoolCreate {
        name: name.into(),
        tops: vec![(kind, names.into_iter().zip(devs.iter().map(|d| d.clone() as Arc<dyn Device>)).collect())],
        ashift: 12,
        properties: Default::default(),
        hostname: "test".into(),
    })
    .expect("create pool");
    (pool, devs)
}

/// A new object set of `pool`, formatted as an empty file system and opened.
pub fn new_fs(pool: &Arc<ObjPool>, opts: FsOptions) -> Arc<Fs> {
    new_fs_with(pool, opts, None)
}

/// `new_fs`, encrypted with `crypt` when given (its keys must be loaded).
pub fn new_fs_with(pool: &Arc<ObjPool>, opts: FsOptions, crypt: Option<tarn_obj::crypt::Crypt>) -> Arc<Fs> {
    let tx = pool.begin();
    let osid = pool.create_objset_with(&tx, crypt).unwrap();
    drop(tx);
    let os = pool.open_objset(osid).unwrap();
    let tx = pool.begin();
    Fs::format(&os, &tx).unwrap();
    drop(tx);
    Fs::open(pool.clone(), os, opts).unwrap()
}

/// The pool on `image` (a `MemDevice::snapshot`: the device as a power
/// cut left it) imported again, and its file system `osid` opened.
pub fn reopen_fs(image: Arc<MemDevice>, osid: tarn_obj::ObjsetId) -> Arc<Fs> {
    let opts = tarn_obj::ImportOptions { force: true, hostname: "test".into(), ..Default::default() };
    let pool = ObjPool::import(vec![image as Arc<dyn Device>], opts).expect("import");
    Fs::open(pool.clone(), pool.open_objset(osid).expect("open the object set"), FsOptions::default()).expect("open the file system")
}

/// A file system alone in a 256 MiB single-disk pool.
pub fn single_fs(name: &str) -> Arc<Fs> {
    let (pool, _) = mem_pool(name, TopKind::Disk, 1, 256 << 20);
    new_fs(&pool, FsOptions::default())
}
