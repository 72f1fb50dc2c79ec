//! An incremental stream costs the change, not the dataset: on an object
//! set of 1500 small objects and a large one, a handful of changes give a
//! stream whose size is exactly what those changes need, the estimate is
//! that size, and receiving it gives the source's snapshot.
mod common;
use common::*;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

use tarn_dev::{Device, FaultDevice, MemDevice};
use tarn_obj::{ImportOptions, ObjPool, ObjType, ObjectId, PoolCreate, TopKind, BONUS_LEN};
use tarn_send::format::{record_size, BEGIN_LEN, END_LEN, FREEOBJECTS_LEN, FREE_LEN, OBJECT_LEN, WRITE_HEADER};
use tarn_send::*;

const SMALL: usize = 1500;

fn data(rng: &mut ChaCha8Rng, len: usize) -> Vec<u8> {
    let mut d = vec![0u8; len];
    rng.fill_bytes(&mut d);
    d
}

#[test]
fn incremental_stream_is_the_size_of_the_change() {
    let run = tarn_testkit::seeded!(1);
    let seed = run.seed;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Devices that count reads.
    let devs: Vec<Arc<FaultDevice>> =
        (0..3).map(|i| FaultDevice::new(MemDevice::new(&format!("m{i}"), 96 << 20) as Arc<dyn Device>)).collect();
    let dyn_devs: Vec<Arc<dyn Device>> = devs.iter().map(|d| d.clone() as Arc<dyn Device>).collect();
    let reads = || devs.iter().map(|d| d.reads()).sum::<u64>();
    let src = ObjPool::create(PoolCreate {
        name: "t".into(),
        tops: vec![(TopKind::Raidz { parity: 1 }, dyn_devs.iter().enumerate().map(|(i, d)| (format!("d{i}"), d.clone())).collect())],
        ashift: 12,
        properties: Default::default(),
        hostname: "test".into(),
    })
    .unwrap();
    let head = new_head(&src);
    let os = src.open_objset(head).unwrap();
    let mut ids = Vec::new();
    for chunk in 0..SMALL / 100 {
        let tx = src.begin();
        for _ in 0..100 {
            let id = os.create(&tx, ObjType(20), 4096, &[chunk as u8; BONUS_LEN]).unwrap();
            os.write(&tx, id, 0, &data(&mut rng, 8192)).unwrap();
            ids.push(id);
        }
        drop(tx);
        src.sync().unwrap();
    }
    let big = {
        let tx = src.begin();
        let id = os.create(&tx, ObjType(21), 131072, &[9; BONUS_LEN]).unwrap();
        os.write(&tx, id, 0, &data(&mut rng, 32 * 131072)).unwrap();
        id
    };
    src.sync().unwrap();
    let s0 = snapshot(&src, head, &mut rng);

    // The change: one block in each of three small objects, two objects
    // freed, a bonus changed, a new object of two blocks, one block of the
    // big object rewritten and the big object truncated to 8 blocks.
    let new = {
        let tx = src.begin();
        for &i in &[100usize, 700, 1400] {
            os.write(&tx, ids[i], 4096, &data(&mut rng, 4096)).unwrap();
        }
        os.free(&tx, ids[200]).unwrap();
        os.free(&tx, ids[201]).unwrap();
        os.set_bonus(&tx, ids[900], &[77; BONUS_LEN]).unwrap();
        let n = os.create(&tx, ObjType(22), 4096, &[1; BONUS_LEN]).unwrap();
        os.write(&tx, n, 0, &data(&mut rng, 8192)).unwrap();
        os.write(&tx, big, 3 * 131072, &data(&mut rng, 131072)).unwrap();
        os.free_range(&tx, big, 8 * 131072, None).unwrap();
        n
    };
    src.sync().unwrap();
    let s1 = snapshot(&src, head, &mut rng);
    assert!(new > big && big > ids[SMALL - 1]);

    // Cold cache: export and import again, then count device reads.
    drop(os);
    src.export().unwrap();
    drop(src);
    let src = ObjPool::import(dyn_devs.clone(), ImportOptions { rewind: false, force: true, hostname: "test".into(), readonly: false }).unwrap();
    let r0 = reads();
    let mut inc = Vec::new();
    let sum = send(&src, &s1, Some(&SendBase::from(s0)), &mut inc).unwrap();
    assert_eq!(sum.bytes as usize, inc.len());
    let inc_reads = reads() - r0;
    let r0 = reads();
    let mut full = Vec::new();
    send(&src, &s1, None, &mut full).unwrap();
    let full_reads = reads() - r0;
    eprintln!("device reads: incremental {inc_reads}, full {full_reads}");
    assert!(inc_reads * 20 < full_reads, "the incremental read {inc_reads} device blocks, the full send {full_reads}");

    let write = |bs: usize| record_size(WRITE_HEADER + bs);
    let expected = record_size(BEGIN_LEN)
        + record_size(END_LEN)
        // OBJECT: three small objects, the bonus change, the big one, the new one.
        + 6 * record_size(OBJECT_LEN)
        + 3 * write(4096)
        + record_size(FREEOBJECTS_LEN)
        + write(131072)
        + record_size(FREE_LEN)
        + 2 * write(4096);
    assert_eq!(inc.len() as u64, expected, "incremental stream of {} bytes (full: {})", inc.len(), full.len());
    assert!(full.len() > 80 * inc.len(), "full {} vs incremental {}", full.len(), inc.len());
    assert_eq!(estimate(&src, &s1, Some(&SendBase::from(s0))).unwrap(), expected);
    assert_eq!(estimate(&src, &s1, None).unwrap(), full.len() as u64);

    // And it replicates.
    let dst = pool(Layout::Mirror);
    let mut s0_full = Vec::new();
    send(&src, &s0, None, &mut s0_full).unwrap();
    let mut input = &s0_full[..];
    let o = receive(&dst, &mut input, RecvTarget::New, &RecvOptions::default()).unwrap();
    let mut input = &inc[..];
    let o1 = receive(&dst, &mut input, RecvTarget::Existing { head: o.head, base: o.snapshots[0].snap_ref(), force: false }, &RecvOptions::default()).unwrap();
    assert_same(&src, s1.objset, &dst, o1.snapshots[0].objset, "incremental of the change");
    let d = dst.open_objset(o1.head).unwrap();
    assert!(d.info(ids[200]).is_err() && d.info(ObjectId(new.0)).is_ok());
    assert_eq!(d.info(big).unwrap().length, 8 * 131072);
    assert_check(&dst, "destination");
    assert_check(&src, "source");
}
