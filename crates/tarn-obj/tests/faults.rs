//! Operating errors: a full pool refuses writes with NoSpace and stays
//! consistent; a pool whose devices all fail suspends instead of writing a
//! partial txg, and what was synced before imports intact.
mod common;
use common::*;
use std::sync::Arc;
use tarn_dev::{Device, FaultDevice};
use tarn_obj::*;

#[test]
fn full_pool_says_no_space_and_stays_consistent() {
    let mem = mem_devs(1, 48 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Disk);
    let osid = { let tx = pool.begin(); pool.create_objset(&tx).unwrap() };
    let os = pool.open_objset(osid).unwrap();
    os.set_write_props(WriteProps { compression: Compression::Off, checksum: ChecksumKind::Fletcher4, copies: 1, primarycache: Default::default(), secondarycache: Default::default() });
    let id = { let tx = pool.begin(); os.create(&tx, ObjType(20), 131072, &[0; BONUS_LEN]).unwrap() };
    let chunk = vec![0xA5u8; 1 << 20];
    let mut written = 0u64;
    let mut hit = false;
    for i in 0..200u64 {
        let r = { let tx = pool.begin(); os.write_data(&tx, id, i << 20, &chunk) };
        match r {
            Ok(()) => written += 1 << 20,
            Err(ObjError::NoSpace) => { hit = true; break; }
            Err(e) => panic!("unexpected error {e}"),
        }
        if i % 4 == 3 { pool.sync().expect("sync never fails for space"); }
    }
    assert!(hit, "a 48 MiB pool must fill up");
    pool.sync().unwrap();
    assert!(pool.suspended().is_none());
    let report = pool.check();
    assert!(report.ok(), "{report:?}");
    let mut back = vec![0u8; 1 << 20];
    os.read(id, written - (1 << 20), &mut back).unwrap();
    assert_eq!(back, chunk);
    // Freeing makes room again (after the defer window).
    { let tx = pool.begin(); os.free_range(&tx, id, 0, None).unwrap(); }
    for _ in 0..6 { pool.sync().unwrap(); }
    { let tx = pool.begin(); os.write(&tx, id, 0, &chunk).unwrap(); }
    pool.sync().unwrap();
}

#[test]
fn all_devices_failing_suspends_and_keeps_synced_state() {
    let mem = mem_devs(2, 64 << 20);
    let faulty: Vec<Arc<FaultDevice>> = mem.iter().map(|m| FaultDevice::new(m.clone() as Arc<dyn Device>)).collect();
    let devs: Vec<Arc<dyn Device>> = faulty.iter().map(|f| f.clone() as Arc<dyn Device>).collect();
    let pool = create(&devs, TopKind::Mirror);
    let osid = { let tx = pool.begin(); pool.create_objset(&tx).unwrap() };
    let os = pool.open_objset(osid).unwrap();
    let id = { let tx = pool.begin(); os.create(&tx, ObjType(20), 4096, &[0; BONUS_LEN]).unwrap() };
    { let tx = pool.begin(); os.write(&tx, id, 0, b"kept").unwrap(); }
    pool.sync().unwrap();
    for f in &faulty { f.set_gone(true); }
    // A whole-block write needs no read of the (now unreadable) old block.
    { let tx = pool.begin(); os.write(&tx, id, 0, &[b'L'; 4096]).unwrap(); }
    let err = pool.sync().expect_err("sync with every device gone");
    assert!(err.to_string().contains("suspended"), "{err}");
    assert!(pool.suspended().is_some());
    let tx = pool.begin();
    assert!(os.write(&tx, id, 0, b"more").is_err(), "a suspended pool refuses changes");
    drop(tx);
    drop(os);
    drop(pool);
    let pool = import(as_dyn(&mem), false).expect("import the devices as they are");
    let os = pool.open_objset(osid).unwrap();
    assert_eq!(read_all(&os, id, 4), b"kept");
    assert!(pool.check().ok());
}
