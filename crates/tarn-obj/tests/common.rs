#![allow(dead_code)]
use std::sync::Arc;

use tarn_dev::{Device, MemDevice};
use tarn_obj::*;

pub fn create(devs: &[Arc<dyn Device>], kind: TopKind) -> Arc<ObjPool> {
    ObjPool::create(PoolCreate {
        name: "t".into(),
        tops: vec![(kind, devs.iter().enumerate().map(|(i, d)| (format!("d{i}"), d.clone())).collect())],
        ashift: 12,
        properties: Default::default(),
        hostname: "test".into(),
    })
    .expect("create pool")
}

pub fn mem_devs(n: usize, size: u64) -> Vec<Arc<MemDevice>> {
    (0..n).map(|i| MemDevice::new(&format!("m{i}"), size)).collect()
}

pub fn as_dyn(v: &[Arc<MemDevice>]) -> Vec<Arc<dyn Device>> {
    v.iter().map(|d| d.clone() as Arc<dyn Device>).collect()
}

pub fn import(devs: Vec<Arc<dyn Device>>, rewind: bool) -> tarn_obj::Result<Arc<ObjPool>> {
    ObjPool::import(devs, ImportOptions { rewind, force: true, hostname: "test".into(), readonly: false })
}

pub fn read_all(os: &ObjectSet, id: ObjectId, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    os.read(id, 0, &mut b).expect("read");
    b
}
