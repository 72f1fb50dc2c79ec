//! Gang blocks (tarn-block/src/gang.rs): when free space is only holes
//! smaller than a block, the block is written in pieces under gang headers.
//! On a mirror and a raidz1 whose free space is made of 4 KiB holes, 1 MiB
//! blocks are written as gangs (two header levels: 256 pieces each); they
//! read back, survive export/import, a scrub repairs damaged pieces and
//! headers on one device, freeing them gives all their space back, and the
//! checker counts every header and piece exactly.

mod common;
use common::*;
use std::sync::Arc;
use rand::{Rng, RngCore};
use tarn_dev::{Device, MemDevice};
use tarn_obj::*;

const SIZE: u64 = 64 << 20;

fn gang_round_trip(kind: TopKind, n: usize) {
    let run = tarn_testkit::seeded!(1);
    let mut rng = run.rng(0);
    let mem: Vec<Arc<MemDevice>> = mem_devs(n, SIZE);
    let pool = create(&as_dyn(&mem), kind.clone());
    let osid = {
        let tx = pool.begin();
        pool.create_objset(&tx).unwrap()
    };
    let os = pool.open_objset(osid).unwrap();
    os.set_write_props(WriteProps { compression: Compression::Off, checksum: ChecksumKind::Fletcher4, copies: 1, primarycache: Default::default(), secondarycache: Default::default() });
    let kept = fragment(&pool, &os);
    let free_before = pool.space().free;
    // 1 MiB blocks: 256 pieces of 4 KiB each, under two levels of headers.
    let mut data = vec![0u8; 16 << 20];
    rng.fill_bytes(&mut data);
    let big = {
        let tx = pool.begin();
        let id = os.create(&tx, ObjType(20), 1 << 20, &[0; BONUS_LEN]).unwrap();
        os.write_data(&tx, id, 0, &data).unwrap();
        id
    };
    pool.sync().unwrap();
    assert!(pool.suspended().is_none());
    assert!(pool.gang_blocks() >= 4, "the 1 MiB blocks had to be ganged ({} gangs)", pool.gang_blocks());
    let check = pool.check();
    assert!(check.ok(), "{check:?}");
    assert_eq!(read_all(&os, big, data.len()), data);

    // Across export/import (nothing cached).
    pool.export().unwrap();
    drop(pool);
    let pool = import(as_dyn(&mem), false).unwrap();
    let os = pool.open_objset(osid).unwrap();
    assert_eq!(read_all(&os, big, data.len()), data);

    // Damage on one device (pieces and headers alike): reads are right, a
    // scrub repairs, the damaged device reads clean afterwards.
    let victim = &mem[rng.gen_range(0..n)];
    let (start, end) = (4 << 20, SIZE - (4 << 20));
    for _ in 0..400 {
        let at = rng.gen_range(start / 4096..end / 4096) * 4096;
        victim.write_at(&[0xff; 512], at).unwrap();
    }
    pool.export().unwrap();
    drop(pool);
    let pool = import(as_dyn(&mem), false).unwrap();
    let os = pool.open_objset(osid).unwrap();
    assert_eq!(read_all(&os, big, data.len()), data, "read through damage");
    let scrub = |pool: &ObjPool| {
        pool.scrub_start().unwrap();
        assert!(pool.wait_scan(None, std::time::Duration::from_secs(120)), "scrub did not finish");
        pool.scan_stats().expect("scrub ran")
    };
    let stats = scrub(&pool);
    assert_eq!(stats.errors, 0, "{stats:?}");
    assert!(stats.repaired > 0, "the damage was found and repaired: {stats:?}");
    let again = scrub(&pool);
    assert_eq!((again.repaired, again.errors), (0, 0), "a second scrub finds nothing to repair: {again:?}");

    // Freed, a gang gives back every header and piece.
    {
        let tx = pool.begin();
        os.free(&tx, big).unwrap();
        for id in kept {
            os.free(&tx, id).unwrap();
        }
    }
    for _ in 0..=tarn_block::DEFER_TXGS + 1 {
        pool.sync().unwrap();
    }
    let check = pool.check();
    assert!(check.ok(), "{check:?}");
    assert!(pool.space().free > free_before, "the space came back");
}

#[test]
fn gangs_on_a_mirror() {
    gang_round_trip(TopKind::Mirror, 2);
}

#[test]
fn gangs_on_raidz1() {
    gang_round_trip(TopKind::Raidz { parity: 1 }, 3);
}
