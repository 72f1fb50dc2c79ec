//! ZAP (extendible-hash map) tests against a BTreeMap model on a memory pool.
//!
//! Reproduce a failure with the printed `TARN_SEED=... TARN_COUNT=...`.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tarn_dev::Device;
use tarn_obj::zap::Zap;
use tarn_obj::{ObjError, ObjPool, ObjType, ObjectId, ObjectSet, PoolCreate, TopKind};

const T_TEST: ObjType = ObjType(200);

fn pool(name: &str) -> Arc<ObjPool> {
    let dev = tarn_dev::MemDevice::new("mem0", 256 << 20) as Arc<dyn Device>;
    ObjPool::create(PoolCreate {
        name: name.into(),
        tops: vec![(TopKind::Disk, vec![("mem0".into(), dev)])],
        ashift: 12,
        properties: Default::default(),
        hostname: "test".into(),
    })
    .expect("create pool")
}

fn objset(p: &ObjPool) -> ObjectSet {
    let tx = p.begin();
    let id = p.create_objset(&tx).expect("create objset");
    drop(tx);
    p.open_objset(id).expect("open objset")
}

fn all(os: &ObjectSet, obj: ObjectId) -> Vec<(u64, Vec<u8>, Vec<u8>)> {
    let mut v = Vec::new();
    Zap::iterate(os, obj, 0, &mut |c, k, val| {
        v.push((c, k.to_vec(), val.to_vec()));
        true
    })
    .expect("iterate");
    v
}

#[test]
#[expect(
    clippy::map_entry,
    reason = "the model is updated only after the map accepted the insert"
)]
fn random_ops_match_btreemap_model() {
    let run = tarn_testkit::seeded!(20_000);
    let (seed, count) = (run.seed, run.count);
    eprintln!("reproduce: TARN_SEED={seed} TARN_COUNT={count} cargo test -p tarn-obj --test zap");
    let p = pool("zapmodel");
    let os = objset(&p);
    let tx = p.begin();
    let obj = Zap::create(&os, &tx, T_TEST).unwrap();
    drop(tx);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let key_of = |rng: &mut ChaCha8Rng| -> Vec<u8> {
        let n: u32 = rng.gen_range(0..3000);
        let len = if rng.gen_ratio(1, 50) {
            rng.gen_range(100..=1024)
        } else {
            rng.gen_range(1..24)
        };
        let mut k = format!("key-{n}-").into_bytes();
        k.resize(len.max(k.len()), b'x');
        k.truncate(1024);
        k
    };
    for i in 0..count {
        let tx = p.begin();
        let k = key_of(&mut rng);
        match rng.gen_range(0..10) {
            0..=3 => {
                let vlen = if rng.gen_ratio(1, 20) {
                    rng.gen_range(0..=8192)
                } else {
                    rng.gen_range(0..64)
                };
                let v: Vec<u8> = (0..vlen).map(|_| rng.gen()).collect();
                let r = Zap::insert(&os, &tx, obj, &k, &v);
                if model.contains_key(&k) {
                    assert!(
                        matches!(r, Err(ObjError::Exists)),
                        "op {i}: insert existing"
                    );
                } else {
                    r.unwrap();
                    model.insert(k, v);
                }
            }
            4..=5 => {
                let v: Vec<u8> = (0..rng.gen_range(0..200)).map(|_| rng.gen()).collect();
                Zap::update(&os, &tx, obj, &k, &v).unwrap();
                model.insert(k, v);
            }
            6..=7 => {
                let r = Zap::remove(&os, &tx, obj, &k).unwrap();
                assert_eq!(r, model.remove(&k).is_some(), "op {i}: remove");
            }
            _ => {
                assert_eq!(
                    Zap::lookup(&os, obj, &k).unwrap(),
                    model.get(&k).cloned(),
                    "op {i}: lookup"
                );
            }
        }
        drop(tx);
        if i % 5000 == 0 {
            assert_eq!(Zap::verify(&os, obj).unwrap(), model.len() as u64);
        }
    }
    assert_eq!(Zap::count(&os, obj).unwrap(), model.len() as u64);
    assert_eq!(Zap::verify(&os, obj).unwrap(), model.len() as u64);
    let got = all(&os, obj);
    let mut cookies: Vec<u64> = got.iter().map(|e| e.0).collect();
    let sorted = cookies.windows(2).all(|w| w[0] < w[1]);
    assert!(sorted, "iteration in strictly increasing cookie order");
    cookies.dedup();
    assert_eq!(cookies.len(), got.len());
    let got_map: BTreeMap<Vec<u8>, Vec<u8>> = got.into_iter().map(|(_, k, v)| (k, v)).collect();
    assert_eq!(got_map, model);
    for (k, v) in &model {
        assert_eq!(Zap::lookup(&os, obj, k).unwrap().as_ref(), Some(v));
    }
}

#[test]
fn two_hundred_thousand_entries() {
    let run = tarn_testkit::seeded!(200_000);
    let n = run.count.max(1000);
    let p = pool("zapbig");
    let os = objset(&p);
    let tx = p.begin();
    let obj = Zap::create(&os, &tx, T_TEST).unwrap();
    drop(tx);
    for chunk in (0..n).collect::<Vec<_>>().chunks(5000) {
        let tx = p.begin();
        for &i in chunk {
            Zap::insert(
                &os,
                &tx,
                obj,
                format!("file-{i:08}.dat").as_bytes(),
                &i.to_le_bytes(),
            )
            .unwrap();
        }
    }
    p.sync().unwrap();
    assert_eq!(Zap::count(&os, obj).unwrap(), n);
    assert_eq!(Zap::verify(&os, obj).unwrap(), n);
    for i in (0..n).step_by(7) {
        let v = Zap::lookup(&os, obj, format!("file-{i:08}.dat").as_bytes()).unwrap();
        assert_eq!(v, Some(i.to_le_bytes().to_vec()));
    }
    assert_eq!(Zap::lookup(&os, obj, b"file-missing").unwrap(), None);
    let mut seen = 0u64;
    Zap::iterate(&os, obj, 0, &mut |_, _, _| {
        seen += 1;
        true
    })
    .unwrap();
    assert_eq!(seen, n);
    // Remove every other entry.
    for chunk in (0..n).step_by(2).collect::<Vec<_>>().chunks(5000) {
        let tx = p.begin();
        for &i in chunk {
            assert!(Zap::remove(&os, &tx, obj, format!("file-{i:08}.dat").as_bytes()).unwrap());
        }
    }
    assert_eq!(Zap::count(&os, obj).unwrap(), n / 2);
    assert_eq!(Zap::verify(&os, obj).unwrap(), n / 2);
}

#[test]
fn cookies_stable_across_inserts_and_removes() {
    let run = tarn_testkit::seeded!(1);
    let seed = run.seed;
    eprintln!("reproduce: TARN_SEED={seed} cargo test -p tarn-obj --test zap cookies");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let p = pool("zapcookie");
    let os = objset(&p);
    let tx = p.begin();
    let obj = Zap::create(&os, &tx, T_TEST).unwrap();
    for i in 0..5000u32 {
        Zap::insert(&os, &tx, obj, format!("a{i}").as_bytes(), b"v").unwrap();
    }
    drop(tx);
    // Read half, remember where we stopped.
    let mut first = Vec::new();
    let mut resume = 0u64;
    Zap::iterate(&os, obj, 0, &mut |c, k, _| {
        first.push(k.to_vec());
        resume = c;
        first.len() < 2500
    })
    .unwrap();
    // Churn: remove some old keys and insert many new ones (forces splits).
    let tx = p.begin();
    let mut removed = BTreeSet::new();
    for _ in 0..1000 {
        let k = format!("a{}", rng.gen_range(0..5000)).into_bytes();
        if Zap::remove(&os, &tx, obj, &k).unwrap() {
            removed.insert(k);
        }
    }
    for i in 0..20000u32 {
        Zap::insert(&os, &tx, obj, format!("b{i}").as_bytes(), b"w").unwrap();
    }
    drop(tx);
    let mut second = Vec::new();
    Zap::iterate(&os, obj, resume, &mut |_, k, _| {
        second.push(k.to_vec());
        true
    })
    .unwrap();
    let first_set: BTreeSet<_> = first.iter().cloned().collect();
    let second_set: BTreeSet<_> = second.iter().cloned().collect();
    assert_eq!(second.len(), second_set.len(), "no duplicates after resume");
    assert!(first_set.is_disjoint(&second_set), "nothing returned twice");
    for i in 0..5000u32 {
        let k = format!("a{i}").into_bytes();
        if !removed.contains(&k) {
            assert!(
                first_set.contains(&k) || second_set.contains(&k),
                "survivor {i} seen exactly once"
            );
        } else {
            assert!(!second_set.contains(&k));
        }
    }
    // The resume set is exactly the keys at/after the cookie.
    let everything = all(&os, obj);
    let expect: BTreeSet<Vec<u8>> = everything
        .into_iter()
        .filter(|(c, _, _)| *c > resume)
        .map(|e| e.1)
        .collect();
    assert_eq!(expect, second_set);
}

#[test]
fn limits_and_big_values() {
    let p = pool("zaplimits");
    let os = objset(&p);
    let tx = p.begin();
    let obj = Zap::create(&os, &tx, T_TEST).unwrap();
    assert!(matches!(
        Zap::insert(&os, &tx, obj, &[1u8; 1025], b""),
        Err(ObjError::Invalid(_))
    ));
    assert!(matches!(
        Zap::insert(&os, &tx, obj, b"k", &[1u8; 8193]),
        Err(ObjError::Invalid(_))
    ));
    assert!(matches!(
        Zap::lookup(&os, obj, &[1u8; 1025]),
        Err(ObjError::Invalid(_))
    ));
    Zap::insert(&os, &tx, obj, b"", b"empty key").unwrap();
    for i in 0..300u32 {
        let k = vec![(i % 251) as u8; 1024 - (i as usize % 3)];
        let mut k = k;
        k.extend_from_slice(&i.to_le_bytes());
        k.truncate(1024);
        let k = [i.to_le_bytes().as_slice(), &k[4..]].concat();
        Zap::insert(&os, &tx, obj, &k, &vec![i as u8; 8192]).unwrap();
    }
    // Grow a value in place until the leaf must split.
    for i in 0..300u32 {
        Zap::update(
            &os,
            &tx,
            obj,
            format!("grow{i}").as_bytes(),
            &vec![7u8; (i as usize * 29) % 8193],
        )
        .unwrap();
    }
    drop(tx);
    assert_eq!(Zap::count(&os, obj).unwrap(), 601);
    assert_eq!(Zap::verify(&os, obj).unwrap(), 601);
    assert_eq!(
        Zap::lookup(&os, obj, b"").unwrap(),
        Some(b"empty key".to_vec())
    );
    assert_eq!(
        Zap::lookup(&os, obj, b"grow299").unwrap(),
        Some(vec![7u8; (299 * 29) % 8193])
    );
}

#[test]
fn corrupt_blocks_are_errors_not_panics() {
    let p = pool("zapcorrupt");
    let os = objset(&p);
    let tx = p.begin();
    let obj = Zap::create(&os, &tx, T_TEST).unwrap();
    for i in 0..3000u32 {
        Zap::insert(&os, &tx, obj, format!("k{i}").as_bytes(), b"0123456789").unwrap();
    }
    drop(tx);
    let len = os.info(obj).unwrap().length;
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for _ in 0..200 {
        let off = rng.gen_range(0..len);
        let mut b = [0u8; 1];
        os.read(obj, off, &mut b).unwrap();
        let tx = p.begin();
        os.write(&tx, obj, off, &[b[0] ^ (1 << rng.gen_range(0..8))])
            .unwrap();
        drop(tx);
        for i in (0..3000u32).step_by(97) {
            let _ = Zap::lookup(&os, obj, format!("k{i}").as_bytes());
        }
        let _ = Zap::iterate(&os, obj, 0, &mut |_, _, _| true);
        let _ = Zap::verify(&os, obj);
        let _ = Zap::count(&os, obj);
    }
    // A non-zap object is Corrupt, not a panic.
    let tx = p.begin();
    let other = os.create(&tx, T_TEST, 16384, &[0u8; 96]).unwrap();
    drop(tx);
    assert!(matches!(
        Zap::lookup(&os, other, b"x"),
        Err(ObjError::Corrupt(_))
    ));
}

#[test]
fn survives_export_and_import() {
    let dev = tarn_dev::MemDevice::new("mem0", 256 << 20);
    let p = ObjPool::create(PoolCreate {
        name: "zapimport".into(),
        tops: vec![(
            TopKind::Disk,
            vec![("mem0".into(), dev.clone() as Arc<dyn Device>)],
        )],
        ashift: 12,
        properties: Default::default(),
        hostname: "test".into(),
    })
    .unwrap();
    let os = objset(&p);
    let osid = os.id();
    let tx = p.begin();
    let obj = Zap::create(&os, &tx, T_TEST).unwrap();
    for i in 0..10_000u32 {
        Zap::insert(&os, &tx, obj, format!("k{i}").as_bytes(), &i.to_le_bytes()).unwrap();
    }
    drop(tx);
    p.export().unwrap();
    drop(os);
    drop(p);
    let p = ObjPool::import(
        vec![dev as Arc<dyn Device>],
        tarn_obj::ImportOptions {
            hostname: "test".into(),
            ..Default::default()
        },
    )
    .unwrap();
    let os = p.open_objset(osid).unwrap();
    assert_eq!(Zap::verify(&os, obj).unwrap(), 10_000);
    for i in (0..10_000u32).step_by(13) {
        assert_eq!(
            Zap::lookup(&os, obj, format!("k{i}").as_bytes()).unwrap(),
            Some(i.to_le_bytes().to_vec())
        );
    }
}
