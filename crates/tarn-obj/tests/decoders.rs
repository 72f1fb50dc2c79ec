//! Invariant 8, bad input never panics: every on-disk decoder of the block
//! and object layers is fed random bytes and mutations of valid encodings,
//! and a whole single-disk pool is imported and read after random damage.
//! Errors are fine; a panic is a bug.
mod common;
use common::*;
use rand::{Rng, SeedableRng};
use tarn_block::{spacemap, BlockPtr};
use tarn_dev::Device;
use tarn_obj::format::{DnodePhys, ObjsetPhys, UberPayload};
use tarn_obj::*;

fn mutate(rng: &mut impl Rng, valid: &[u8]) -> Vec<u8> {
    let mut b = valid.to_vec();
    match rng.gen_range(0..4) {
        0 => {
            for _ in 0..rng.gen_range(1..8) {
                let i = rng.gen_range(0..b.len().max(1));
                if let Some(x) = b.get_mut(i) {
                    *x ^= 1 << rng.gen_range(0..8);
                }
            }
        }
        1 => {
            let i = rng.gen_range(0..b.len().max(1));
            if let Some(x) = b.get_mut(i) {
                *x = rng.gen();
            }
            let n = rng.gen_range(0..b.len() + 1);
            b.truncate(n);
        }
        2 => b.iter_mut().for_each(|x| *x = rng.gen()),
        _ => {
            // Big values in every 8-byte field.
            for chunk in b.chunks_mut(8) {
                if rng.gen_bool(0.3) {
                    chunk.fill(0xFF);
                }
            }
        }
    }
    b
}

#[test]
fn decoders_never_panic_on_damaged_bytes() {
    let run = tarn_testkit::seeded!(20_000);
    let (seed, count) = (run.seed, run.count);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut bp = BlockPtr::HOLE;
    bp.ndva = 2;
    bp.dva[0].asize = 4096;
    bp.dva[1] = tarn_block::Dva { vdev: 0, asize: 4096, offset: 1 << 30 };
    bp.lsize = 131072;
    bp.psize = 4096;
    bp.birth = 9;
    bp.fill = 1;
    bp.checksum_kind = 1;
    let mut dn = DnodePhys::empty();
    dn.flags = 1;
    dn.otype = 20;
    dn.block_size = 131072;
    dn.nlevels = 2;
    dn.nblocks = 5;
    dn.bps[0] = bp;
    let mut dn_bytes = vec![0u8; 512];
    dn.encode(&mut dn_bytes);
    let os = ObjsetPhys::new(1).encode();
    let ub = UberPayload { mos_root: bp, spacemap_head: bp, spacemap_records: 7 }.encode();
    let sm = spacemap::encode(&spacemap::LogBlock {
        txg: 5,
        flags: 0,
        prev: bp,
        records: vec![tarn_block::alloc::Record {
            kind: tarn_block::alloc::RecordKind::Free(3),
            extent: tarn_block::Extent { vdev: 0, offset: 4096, len: 8192 },
        }],
    });
    let valid: Vec<(&str, Vec<u8>)> = vec![("bp", bp.encode().to_vec()), ("dnode", dn_bytes), ("objset", os), ("uberpayload", ub), ("spacemap", sm)];
    for i in 0..count {
        let (what, v) = &valid[(i % valid.len() as u64) as usize];
        let b = mutate(&mut rng, v);
        let r = std::panic::catch_unwind(|| match *what {
            "bp" => BlockPtr::decode(&b).is_ok(),
            "dnode" => DnodePhys::decode(&b).is_ok(),
            "objset" => ObjsetPhys::decode(&b).is_ok(),
            "uberpayload" => UberPayload::decode(&b).is_ok(),
            _ => spacemap::decode(&b).is_ok(),
        });
        assert!(r.is_ok(), "{what} decoder panicked on input {i} (seed {seed}): {b:02x?}");
    }
}

#[test]
fn a_randomly_damaged_pool_errors_but_never_panics() {
    let run = tarn_testkit::seeded!(12);
    let (seed, count) = (run.seed, run.count);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mem = mem_devs(1, 32 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Disk);
    let osid = { let tx = pool.begin(); pool.create_objset(&tx).unwrap() };
    let os = pool.open_objset(osid).unwrap();
    let mut ids = Vec::new();
    {
        let tx = pool.begin();
        for i in 0..20u8 {
            let id = os.create(&tx, ObjType(20), 4096 * (1 + i as u32 % 4), &[i; BONUS_LEN]).unwrap();
            os.write(&tx, id, (i as u64) * 70_000, &vec![i; 50_000]).unwrap();
            ids.push(id);
        }
    }
    pool.export().unwrap();
    drop(os);
    drop(pool);
    let clean = mem[0].snapshot();
    let imported = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    for round in 0..count {
        let dev = clean.snapshot();
        // Damage the data region only, where the trees live (labels are tested in tarn-vdev).
        for _ in 0..rng.gen_range(1..40) {
            let off = tarn_vdev::DATA_START + rng.gen_range(0..(4u64 << 20));
            let mut b = [0u8; 64];
            dev.read_at(&mut b, off).unwrap();
            for x in b.iter_mut() {
                if rng.gen_bool(0.2) {
                    *x = rng.gen();
                }
            }
            dev.write_at(&b, off).unwrap();
        }
        let devs: Vec<std::sync::Arc<dyn Device>> = vec![dev];
        let ids = ids.clone();
        let imported2 = imported.clone();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let Ok(pool) = import(devs, true) else { return };
            imported2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let _ = pool.check();
            if let Ok(os) = pool.open_objset(osid) {
                for id in ids {
                    let mut buf = vec![0u8; 300_000];
                    let _ = os.read(id, 0, &mut buf);
                    let _ = os.info(id);
                }
            }
        }));
        assert!(r.is_ok(), "round {round} panicked (seed {seed})");
    }
    // Most damage misses the few metadata blocks the import itself needs, so
    // the walk and the reads below really run on damaged trees.
    let n = imported.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("{n} of {count} damaged pools imported");
    assert!(n > 0, "no damaged pool imported: the test exercised nothing past import");
}
