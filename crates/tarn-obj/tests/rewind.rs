//! `import -F`: when the newest uberblock's tree is damaged beyond repair,
//! a plain import refuses with a hint, and a rewinding import goes back to
//! the newest older txg that verifies.
mod common;
use common::*;
use tarn_dev::Device;
use tarn_obj::format::UberPayload;
use tarn_obj::*;

#[test]
fn rewind_to_older_txg_when_newest_tree_is_damaged() {
    let mem = mem_devs(1, 64 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Disk);
    let osid = { let tx = pool.begin(); pool.create_objset(&tx).unwrap() };
    let os = pool.open_objset(osid).unwrap();
    let id = { let tx = pool.begin(); os.create(&tx, ObjType(20), 4096, &[0; BONUS_LEN]).unwrap() };
    { let tx = pool.begin(); os.write(&tx, id, 0, &[1u8; 4096]).unwrap(); }
    let old_txg = pool.sync().unwrap();
    { let tx = pool.begin(); os.write(&tx, id, 0, &[2u8; 4096]).unwrap(); }
    let new_txg = pool.sync().unwrap();
    assert!(new_txg > old_txg);
    drop(os);
    pool.export().unwrap();
    drop(pool);

    // Destroy every copy of the newest MOS root block.
    let ubs = tarn_vdev::read_uberblocks(mem[0].as_ref());
    let newest = ubs.iter().max_by_key(|u| u.txg).unwrap();
    let payload = UberPayload::decode(&newest.payload).unwrap();
    for dva in payload.mos_root.dvas() {
        let at = tarn_vdev::DATA_START + dva.offset;
        mem[0].write_at(&vec![0xEE; dva.asize as usize], at).unwrap();
    }

    let err = import(as_dyn(&mem), false).err().expect("plain import must refuse a damaged newest txg");
    assert!(err.to_string().contains("-F"), "hint at -F: {err}");
    let pool = import(as_dyn(&mem), true).expect("import -F");
    let chosen = pool.last_synced_txg();
    assert!(chosen < newest.txg);
    // The abandoned txgs can no longer be chosen by a later rewind.
    for ub in tarn_vdev::read_uberblocks(mem[0].as_ref()) {
        if ub.txg > chosen && ub.txg <= newest.txg {
            assert!(UberPayload::decode(&ub.payload).is_err(), "txg {} still looks usable", ub.txg);
        }
    }
    let os = pool.open_objset(osid).unwrap();
    let back = read_all(&os, id, 4096);
    assert!(back == vec![1u8; 4096] || back == vec![2u8; 4096], "data of an older intact txg");
    assert!(pool.check().ok());
    // New txgs are numbered above anything seen on disk.
    let t = pool.sync().unwrap();
    assert!(t > newest.txg, "txg {t} must outrank the abandoned txg {}", newest.txg);
}
