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

/// Intent log helpers shared by zil.rs and slog.rs.
pub const REC: u32 = 1;

pub fn quiet(pool: &ObjPool) {
    // No txg unless asked: records must reach disk through the log.
    pool.set_tunables(Tunables { txg_timeout_ms: 3_600_000, ..Default::default() });
}

/// A new object set whose log is open: its first commit waits for the txg
/// that writes the header naming the chain, which also retires that record.
pub fn new_objset(pool: &ObjPool) -> (ObjsetId, ObjectSet) {
    let id = {
        let tx = pool.begin();
        pool.create_objset(&tx).unwrap()
    };
    pool.sync().unwrap();
    let os = pool.open_objset(id).unwrap();
    let tx = pool.begin();
    let seq = os.log_append(&tx, REC, &u32::MAX.to_le_bytes()).unwrap();
    drop(tx);
    os.log_commit(seq).unwrap();
    assert_eq!(os.log_stats().live_blocks, 0, "the opening txg retired the first record");
    (id, os)
}

/// Appends `n` records (payload = index) in their own txs; commits after each.
pub fn append_committed(os: &ObjectSet, pool: &ObjPool, from: u32, n: u32) -> Vec<u64> {
    let mut seqs = Vec::new();
    for i in from..from + n {
        let tx = pool.begin();
        let seq = os.log_append(&tx, REC, &i.to_le_bytes()).unwrap();
        drop(tx);
        os.log_commit(seq).unwrap();
        seqs.push(seq);
    }
    seqs
}

pub fn replay_all(os: &ObjectSet) -> (Vec<u32>, tarn_obj::zil::ReplayReport) {
    let mut got = Vec::new();
    let report = os
        .log_replay(&mut |_tx, rec| {
            assert_eq!(rec.rtype, REC);
            got.push(u32::from_le_bytes(rec.payload[..4].try_into().unwrap()));
            Ok(())
        })
        .unwrap();
    (got, report)
}

/// Fills the pool with 4 KiB objects, then frees every other one: what is
/// free afterwards is 4 KiB holes. Returns the objects kept.
pub fn fragment(pool: &ObjPool, os: &ObjectSet) -> Vec<ObjectId> {
    let mut ids = Vec::new();
    let data = vec![0x5au8; 4096];
    loop {
        let r = {
            let tx = pool.begin();
            os.create(&tx, ObjType(20), 4096, &[0; BONUS_LEN]).and_then(|id| os.write_data(&tx, id, 0, &data).map(|_| id))
        };
        match r {
            Ok(id) => ids.push(id),
            Err(ObjError::NoSpace) => break,
            Err(e) => panic!("filling: {e}"),
        }
        if ids.len() % 2000 == 0 {
            pool.sync().unwrap();
        }
    }
    pool.sync().unwrap();
    let mut kept = Vec::new();
    {
        let tx = pool.begin();
        for (i, id) in ids.into_iter().enumerate() {
            if i % 2 == 0 {
                os.free(&tx, id).unwrap();
            } else {
                kept.push(id);
            }
        }
    }
    for _ in 0..=tarn_block::DEFER_TXGS + 1 {
        pool.sync().unwrap();
    }
    kept
}
