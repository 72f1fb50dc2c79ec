#![allow(dead_code)]
//! Shared helpers: pools on memory devices, a random workload of object
//! changes between snapshots, and a comparison of two object sets object
//! by object (ids, types, block sizes, bonus, length, logical data).

use std::sync::Arc;

use rand::{Rng, RngCore};
use rand_chacha::ChaCha8Rng;
use tarn_dev::{Device, MemDevice};
use tarn_obj::zap::Zap;
use tarn_obj::*;
use tarn_send::SnapRef;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Raidz1,
    Mirror,
}

pub fn pool(layout: Layout) -> Arc<ObjPool> {
    pool_with_devices(layout).0
}

/// A pool and its devices (to import it again).
pub fn pool_with_devices(layout: Layout) -> (Arc<ObjPool>, Vec<Arc<dyn Device>>) {
    let (kind, n, size) = match layout {
        Layout::Raidz1 => (TopKind::Raidz { parity: 1 }, 3, 96 << 20),
        Layout::Mirror => (TopKind::Mirror, 2, 160 << 20),
    };
    let devs: Vec<Arc<dyn Device>> = (0..n)
        .map(|i| MemDevice::new(&format!("m{i}"), size) as Arc<dyn Device>)
        .collect();
    let pool = ObjPool::create(PoolCreate {
        name: "t".into(),
        tops: vec![(
            kind,
            devs.iter()
                .enumerate()
                .map(|(i, d)| (format!("d{i}"), d.clone()))
                .collect(),
        )],
        ashift: 12,
        properties: Default::default(),
        hostname: "test".into(),
    })
    .expect("create pool");
    (pool, devs)
}

/// Imports a pool that was dropped without export (a power cut after its
/// last synced txg).
pub fn reimport(devs: &[Arc<dyn Device>]) -> Arc<ObjPool> {
    ObjPool::import(
        devs.to_vec(),
        ImportOptions {
            rewind: false,
            force: true,
            hostname: "test".into(),
            readonly: false,
        },
    )
    .expect("import")
}

pub fn new_head(pool: &ObjPool) -> ObjsetId {
    let id = {
        let tx = pool.begin();
        pool.create_objset(&tx).unwrap()
    };
    pool.sync().unwrap();
    id
}

/// Snapshots `head` with a fresh random guid (the dataset layer's job).
pub fn snapshot(pool: &ObjPool, head: ObjsetId, rng: &mut ChaCha8Rng) -> SnapRef {
    let (objset, txg) = {
        let tx = pool.begin();
        (pool.snapshot(&tx, head).unwrap(), tx.txg())
    };
    pool.sync().unwrap();
    SnapRef {
        objset,
        txg,
        guid: rng.gen::<u64>() | 1,
    }
}

const BLOCK_SIZES: [u32; 5] = [512, 4096, 16384, 65536, 131072];
/// Objects stay below this many bytes.
const SPAN: u64 = 1_500_000;

fn random_bonus(rng: &mut ChaCha8Rng) -> [u8; BONUS_LEN] {
    let mut b = [0u8; BONUS_LEN];
    rng.fill_bytes(&mut b);
    b
}

fn random_data(rng: &mut ChaCha8Rng, len: usize) -> Vec<u8> {
    let mut d = vec![0u8; len];
    // Half compressible, half not.
    if rng.gen_bool(0.5) {
        rng.fill_bytes(&mut d);
    } else {
        let v = rng.gen::<u8>() | 1;
        d.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = v.wrapping_add((i / 100) as u8));
    }
    d
}

fn objects(os: &ObjectSet) -> Vec<tarn_obj::diff::ObjectAttrs> {
    let mut v = Vec::new();
    os.list_objects(&mut |a| {
        v.push(a);
        Ok(())
    })
    .unwrap();
    v
}

/// Creates a file-like object with some data (possibly sparse).
pub fn create_object(os: &ObjectSet, pool: &ObjPool, rng: &mut ChaCha8Rng) -> ObjectId {
    let bs = BLOCK_SIZES[rng.gen_range(0..BLOCK_SIZES.len())];
    let tx = pool.begin();
    let id = os
        .create(&tx, ObjType(rng.gen_range(20..26)), bs, &random_bonus(rng))
        .unwrap();
    for _ in 0..rng.gen_range(0..4) {
        let off = rng.gen_range(0..SPAN - 70_000);
        let len = rng.gen_range(1..65_536);
        os.write(&tx, id, off, &random_data(rng, len)).unwrap();
    }
    id
}

/// One random change to `os`.
pub fn mutate_once(os: &ObjectSet, pool: &ObjPool, rng: &mut ChaCha8Rng, zap: ObjectId) {
    // Committed objects as the newest (possibly unsynced) state sees them.
    let live: Vec<_> = objects(os)
        .into_iter()
        .filter(|a| a.id != zap)
        .filter_map(|mut a| {
            let i = os.info(a.id).ok()?;
            a.otype = i.otype;
            a.block_size = i.block_size;
            a.nblocks = i.length / i.block_size as u64;
            Some(a)
        })
        .collect();
    let pick = |rng: &mut ChaCha8Rng| live[rng.gen_range(0..live.len())].clone();
    let op = if live.is_empty() {
        0
    } else {
        rng.gen_range(0..12)
    };
    let tx = pool.begin();
    match op {
        0 => {
            drop(tx);
            create_object(os, pool, rng);
        }
        1..=3 => {
            let a = pick(rng);
            let off = rng.gen_range(0..SPAN - 70_000);
            let len = rng.gen_range(1..65_536);
            os.write(&tx, a.id, off, &random_data(rng, len)).unwrap();
        }
        4 => {
            // Zeros over whole blocks: holes with compression on.
            let a = pick(rng);
            let bs = a.block_size as u64;
            if a.nblocks > 0 {
                let b = rng.gen_range(0..a.nblocks);
                let n = rng.gen_range(1..=4u64).min(a.nblocks - b);
                os.write(&tx, a.id, b * bs, &vec![0u8; (n * bs) as usize])
                    .unwrap();
            }
        }
        5 => {
            let a = pick(rng);
            let len = a.nblocks * a.block_size as u64;
            if len > 0 {
                let off = rng.gen_range(0..len);
                os.free_range(&tx, a.id, off, Some(rng.gen_range(1..200_000)))
                    .unwrap();
            }
        }
        6 => {
            // Truncate.
            let a = pick(rng);
            let len = a.nblocks * a.block_size as u64;
            os.free_range(
                &tx,
                a.id,
                if len > 0 { rng.gen_range(0..len) } else { 0 },
                None,
            )
            .unwrap();
        }
        7 => {
            let a = pick(rng);
            os.free(&tx, a.id).unwrap();
        }
        8 => {
            let a = pick(rng);
            os.set_bonus(&tx, a.id, &random_bonus(rng)).unwrap();
        }
        9 => {
            // Free and recreate the same id, in this txg or a later one.
            let a = pick(rng);
            os.free(&tx, a.id).unwrap();
            let same_txg = rng.gen_bool(0.5);
            let tx = if same_txg {
                tx
            } else {
                drop(tx);
                pool.sync().unwrap();
                pool.begin()
            };
            let bs = if rng.gen_bool(0.5) {
                a.block_size
            } else {
                BLOCK_SIZES[rng.gen_range(0..BLOCK_SIZES.len())]
            };
            let ty = if rng.gen_bool(0.7) {
                a.otype
            } else {
                ObjType(rng.gen_range(20..26))
            };
            os.create_with_id(&tx, a.id, ty, bs, &random_bonus(rng))
                .unwrap();
            let off = rng.gen_range(0..SPAN / 4);
            let len = rng.gen_range(1..40_000);
            os.write(&tx, a.id, off, &random_data(rng, len)).unwrap();
        }
        10 => {
            // A small object changes its block size (allowed up to one block).
            let a = pick(rng);
            if a.nblocks <= 1 {
                let bs = BLOCK_SIZES[rng.gen_range(0..BLOCK_SIZES.len())];
                os.set_block_size(&tx, a.id, bs).unwrap();
            } else {
                os.write(&tx, a.id, 0, &random_data(rng, 100)).unwrap();
            }
        }
        _ => {
            // Directory-like map changes.
            for _ in 0..rng.gen_range(1..20) {
                let k = format!("entry-{}", rng.gen_range(0..400));
                if rng.gen_bool(0.7) {
                    Zap::update(os, &tx, zap, k.as_bytes(), &rng.gen::<u64>().to_le_bytes())
                        .unwrap();
                } else {
                    Zap::remove(os, &tx, zap, k.as_bytes()).unwrap();
                }
            }
        }
    }
}

/// A head with a map (a ZAP, like a directory) and `n` random objects.
pub fn populate(pool: &ObjPool, head: ObjsetId, rng: &mut ChaCha8Rng, n: usize) -> ObjectId {
    let os = pool.open_objset(head).unwrap();
    let zap = {
        let tx = pool.begin();
        let z = Zap::create(&os, &tx, ObjType(30)).unwrap();
        for i in 0..50 {
            Zap::insert(
                &os,
                &tx,
                z,
                format!("entry-{i}").as_bytes(),
                &(i as u64).to_le_bytes(),
            )
            .unwrap();
        }
        z
    };
    for _ in 0..n {
        create_object(&os, pool, rng);
        if rng.gen_bool(0.3) {
            pool.sync().unwrap();
        }
    }
    zap
}

/// `steps` random changes, with syncs in between now and then.
pub fn mutate(pool: &ObjPool, head: ObjsetId, rng: &mut ChaCha8Rng, zap: ObjectId, steps: usize) {
    let os = pool.open_objset(head).unwrap();
    for _ in 0..steps {
        mutate_once(&os, pool, rng, zap);
        if rng.gen_bool(0.25) {
            pool.sync().unwrap();
        }
    }
}

/// Object-by-object equality of two object sets' committed states.
pub fn diff_objsets(a: &ObjectSet, b: &ObjectSet) -> std::result::Result<(), String> {
    let oa = objects(a);
    let ob = objects(b);
    let ids_a: Vec<u64> = oa.iter().map(|x| x.id.0).collect();
    let ids_b: Vec<u64> = ob.iter().map(|x| x.id.0).collect();
    if ids_a != ids_b {
        return Err(format!("object lists differ:\n{ids_a:?}\n{ids_b:?}"));
    }
    for (x, y) in oa.iter().zip(&ob) {
        let id = x.id.0;
        if x.otype != y.otype
            || x.block_size != y.block_size
            || x.nblocks != y.nblocks
            || x.bonus != y.bonus
        {
            return Err(format!(
                "object {id}: type {}/{} block size {}/{} blocks {}/{} bonus equal {}",
                x.otype.0,
                y.otype.0,
                x.block_size,
                y.block_size,
                x.nblocks,
                y.nblocks,
                x.bonus == y.bonus
            ));
        }
        let len = x.nblocks * x.block_size as u64;
        if len <= 32 << 20 {
            // Independent of the code under test: read everything.
            let (mut da, mut db) = (vec![0u8; len as usize], vec![0u8; len as usize]);
            a.read(x.id, 0, &mut da)
                .map_err(|e| format!("read {id}: {e}"))?;
            b.read(y.id, 0, &mut db)
                .map_err(|e| format!("read {id}: {e}"))?;
            if da != db {
                let first = da.iter().zip(&db).position(|(p, q)| p != q).unwrap_or(0);
                return Err(format!(
                    "object {id}: data differs from byte {first} (length {len})"
                ));
            }
            continue;
        }
        // Huge sparse objects: every block that is not a hole on either
        // side (a hole reads as zeros, so a zero block equals a hole).
        let mut blocks = std::collections::BTreeSet::new();
        for (os, attrs) in [(a, x), (b, y)] {
            os.changed_blocks(attrs, None, 0, 0, &mut |c| {
                if let tarn_obj::diff::BlockChange::Data { blkid, .. } = c {
                    blocks.insert(blkid);
                }
                Ok(())
            })
            .map_err(|e| format!("walk {id}: {e}"))?;
        }
        let bs = x.block_size as usize;
        let (mut da, mut db) = (vec![0u8; bs], vec![0u8; bs]);
        for blkid in blocks {
            let off = blkid * bs as u64;
            a.read(x.id, off, &mut da)
                .map_err(|e| format!("read {id}: {e}"))?;
            b.read(y.id, off, &mut db)
                .map_err(|e| format!("read {id}: {e}"))?;
            if da != db {
                let first = da.iter().zip(&db).position(|(p, q)| p != q).unwrap_or(0);
                return Err(format!(
                    "object {id}: data differs at byte {}",
                    off + first as u64
                ));
            }
        }
    }
    Ok(())
}

pub fn assert_same(pool_a: &ObjPool, a: ObjsetId, pool_b: &ObjPool, b: ObjsetId, what: &str) {
    let oa = pool_a.open_objset(a).unwrap();
    let ob = pool_b.open_objset(b).unwrap();
    if let Err(e) = diff_objsets(&oa, &ob) {
        panic!("{what}: {e}");
    }
}

pub fn assert_check(pool: &ObjPool, what: &str) {
    let r = pool.check();
    assert!(r.ok(), "{what}: check failed: {r:?}");
}

/// Record boundaries of a stream: (offset, type, total length).
pub fn records(stream: &[u8]) -> Vec<(usize, u32, usize)> {
    let mut out = Vec::new();
    let mut o = 0;
    while o + 32 <= stream.len() {
        let ty = u32::from_le_bytes(stream[o..o + 4].try_into().unwrap());
        let len = u32::from_le_bytes(stream[o + 4..o + 8].try_into().unwrap()) as usize;
        out.push((o, ty, 32 + len));
        o += 32 + len;
    }
    out
}

/// Three objects of different tree shapes, synced: `grow` (one 512-byte
/// block, one level), `tall` (blocks 0..4000 of 512 bytes: two levels of
/// indirects), `sparse` (one 4 KiB block at 1 TiB).
pub fn tree_shapes(pool: &ObjPool, os: &ObjectSet) -> (ObjectId, ObjectId, ObjectId) {
    use tarn_obj::{ObjType, BONUS_LEN};
    let tx = pool.begin();
    let grow = os.create(&tx, ObjType(20), 512, &[1; BONUS_LEN]).unwrap();
    os.write(&tx, grow, 0, &[5u8; 512]).unwrap();
    let tall = os.create(&tx, ObjType(20), 512, &[2; BONUS_LEN]).unwrap();
    os.write(&tx, tall, 0, &vec![6u8; 4000 * 512]).unwrap();
    let sparse = os.create(&tx, ObjType(21), 4096, &[3; BONUS_LEN]).unwrap();
    os.write(&tx, sparse, 1 << 40, &[7u8; 4096]).unwrap();
    drop(tx);
    pool.sync().unwrap();
    (grow, tall, sparse)
}

