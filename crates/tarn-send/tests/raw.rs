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

use rand::{Rng, SeedableRng};
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

/// A pool of `layout` holding an encrypted object set (12 objects) and
/// its snapshots: one, then one after each of `rounds` rounds of `steps`
/// changes. Its key is unloaded: the sender needs none.
fn encrypted_source(layout: Layout, cipher: Cipher, rng: &mut ChaCha8Rng, rounds: usize, steps: usize) -> (Arc<ObjPool>, Vec<SnapRef>) {
    let src = pool(layout);
    let head = encrypted_head(&src, cipher);
    let zap = populate(&src, head, rng, 12);
    let mut snaps = vec![snapshot(&src, head, rng)];
    for _ in 0..rounds {
        mutate(&src, head, rng, zap, steps);
        snaps.push(snapshot(&src, head, rng));
    }
    src.unload_keys(GUID).unwrap();
    (src, snaps)
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
    // The sender needs no key either.
    let (src, snaps) = encrypted_source(src_layout, cipher, &mut rng, 4, 25);
    let dst = pool(dst_layout);

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

/// `stream` written again record by record through a `RecordWriter` (so
/// every checksum is valid), each payload first passed to `edit` with its
/// record's index and type.
fn reframe(stream: &[u8], mut edit: impl FnMut(usize, u32, &mut Vec<u8>)) -> Vec<u8> {
    use tarn_send::format::{RecordType, RecordWriter, REC_HEADER};
    let mut out = Vec::new();
    {
        let mut wr = RecordWriter::new(&mut out);
        for (i, (o, ty, len)) in records(stream).into_iter().enumerate() {
            let mut p = stream[o + REC_HEADER..o + len].to_vec();
            edit(i, ty, &mut p);
            let t = match ty {
                1 => {
                    wr.begin(&Begin::decode(&p).unwrap()).unwrap();
                    continue;
                }
                6 => {
                    wr.end().unwrap();
                    continue;
                }
                2 => RecordType::Object,
                3 => RecordType::FreeObjects,
                4 => RecordType::Write,
                5 => RecordType::Free,
                7 => RecordType::Crypt,
                8 => RecordType::Seal,
                t => panic!("record type {t}"),
            };
            wr.record(t, &[&p]).unwrap();
        }
    }
    out
}

/// Reads every object of `src` from `dst` (keys loaded on both): each
/// attribute, bonus and byte either fails to read or equals the source's,
/// never anything else. Returns how many objects failed somewhere.
fn true_or_refused(src: &ObjPool, s: ObjsetId, dst: &ObjPool, d: ObjsetId, what: &str) -> usize {
    let so = src.open_objset(s).unwrap();
    let Ok(dos) = dst.open_objset(d) else { return usize::MAX };
    let mut ids = Vec::new();
    so.list_objects(&mut |a| {
        ids.push((a.id, a.nblocks * a.block_size as u64));
        Ok(())
    })
    .unwrap();
    let mut failed = 0;
    for (id, len) in ids {
        let want = so.info(id).unwrap();
        let Ok(got) = dos.info(id) else {
            failed += 1;
            continue;
        };
        assert!(got.bonus == want.bonus && got.length == want.length && got.otype == want.otype, "{what}: object {} read back other attributes", id.0);
        if len > 8 << 20 {
            continue;
        }
        let (mut a, mut b) = (vec![0u8; len as usize], vec![0u8; len as usize]);
        so.read(id, 0, &mut a).unwrap();
        // Block by block, so one bad block does not hide the others.
        let bs = want.block_size as usize;
        let mut bad = false;
        for (i, chunk) in b.chunks_mut(bs).enumerate() {
            match dos.read(id, (i * bs) as u64, chunk) {
                Ok(_) => assert!(chunk == &a[i * bs..i * bs + chunk.len()], "{what}: object {} block {i} read back other bytes", id.0),
                Err(_) => bad = true,
            }
        }
        failed += usize::from(bad);
    }
    failed
}

/// Issue 12, test 4: raw streams forged on purpose — a sealed field
/// changed and the stream re-framed with valid checksums, so only the
/// keyed MACs can tell — are received (the receiver has no key to check
/// them), and once the key is loaded every read of what was forged fails;
/// nothing reads back other plaintext than the sender's, and the pool
/// checks clean (its checksums are its own). The untouched stream,
/// re-framed the same way, is byte-identical and reads back whole.
#[test]
fn forged_raw_streams_read_as_errors_never_as_other_plaintext() {
    let run = tarn_testkit::seeded!(1);
    for seed in run.seed..run.seed + run.count {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let cipher = Cipher::Aes256Gcm;
        let (src, snaps) = encrypted_source(Layout::Mirror, cipher, &mut rng, 1, 10);
        let (s0, s1) = (snaps[0], snaps[1]);
        let full = raw_stream(&src, &[s0], None);
        let inc = raw_stream(&src, &[s1], Some(&s0));
        assert_eq!(reframe(&full, |_, _, _| {}), full, "re-framing changes a stream");
        let recs = records(&full);
        let of = |ty: u32| -> Vec<usize> { recs.iter().enumerate().filter(|(_, r)| r.1 == ty).map(|(i, _)| i).collect() };
        let writes: Vec<usize> = of(4).into_iter().filter(|&i| recs[i].2 > 32 + 64 + 64).collect();
        let pick = |v: &[usize], rng: &mut ChaCha8Rng| v[rng.gen_range(0..v.len())];
        let (w, o, sl, c) = (pick(&writes, &mut rng), pick(&of(2), &mut rng), pick(&of(8), &mut rng), of(7)[0]);
        // Two writes of equal sizes (header bytes 16..32 and compression) at different places.
        let hdr = |i: usize| full[recs[i].0 + 32..recs[i].0 + 32 + 29].to_vec();
        let swap = writes.iter().flat_map(|&a| writes.iter().map(move |&b| (a, b))).find(|&(a, b)| a < b && hdr(a)[16..] == hdr(b)[16..] && hdr(a)[..16] != hdr(b)[..16]);
        let payload = |i: usize| full[recs[i].0 + 32..recs[i].0 + recs[i].2].to_vec();
        let mut cases: Vec<(&str, Vec<u8>)> = vec![
            ("a ciphertext byte of a WRITE", reframe(&full, |i, _, p| if i == w { let n = p.len(); p[64 + (n - 64) / 2] ^= 0x10 })),
            ("a WRITE's IV", reframe(&full, |i, _, p| if i == w { p[40] ^= 1 })),
            ("a WRITE's MAC", reframe(&full, |i, _, p| if i == w { p[50] ^= 1 })),
            ("a sealed bonus of an OBJECT", reframe(&full, |i, _, p| if i == o { p[30] ^= 1 })),
            ("a dnode block's SEAL", reframe(&full, |i, _, p| if i == sl { p[30] ^= 1 })),
            ("the root MAC in CRYPT", reframe(&full, |i, _, p| if i == c { p[30] ^= 1 })),
        ];
        if let Some((a, b)) = swap {
            let (pa, pb) = (payload(a), payload(b));
            cases.push(("two blocks swapped between places", reframe(&full, |i, _, p| {
                if i == a {
                    p[28..].copy_from_slice(&pb[28..]);
                } else if i == b {
                    p[28..].copy_from_slice(&pa[28..]);
                }
            })));
        }
        for (what, forged) in cases {
            let what = format!("seed {seed}: {what}");
            assert_ne!(forged, full, "{what}: nothing changed");
            let dst = pool(Layout::Raidz1);
            let o = recv(&dst, &forged, RecvTarget::New, cipher);
            assert_check(&dst, &what);
            dst.load_keys(GUID, keys(cipher));
            src.load_keys(GUID, keys(cipher));
            let failed = true_or_refused(&src, s0.objset, &dst, o.head, &what);
            assert!(failed > 0, "{what}: every object read back as sent");
            src.unload_keys(GUID).unwrap();
        }
        // An incremental with a forged block, onto a good full receive.
        let dst = pool(Layout::Raidz1);
        let o = recv(&dst, &full, RecvTarget::New, cipher);
        let iw: Vec<usize> = records(&inc).iter().enumerate().filter(|(_, r)| r.1 == 4 && r.2 > 32 + 64 + 64).map(|(i, _)| i).collect();
        if !iw.is_empty() {
            let w = pick(&iw, &mut rng);
            let forged = reframe(&inc, |i, _, p| if i == w { p[70] ^= 4 });
            let base = o.snapshots[0].snap_ref();
            let o2 = recv(&dst, &forged, RecvTarget::Existing { head: o.head, base, force: false }, cipher);
            assert_check(&dst, "forged incremental");
            dst.load_keys(GUID, keys(cipher));
            src.load_keys(GUID, keys(cipher));
            assert_eq!(true_or_refused(&src, s0.objset, &dst, o.snapshots[0].objset, "the base of a forged incremental"), 0);
            assert!(true_or_refused(&src, s1.objset, &dst, o2.snapshots[0].objset, "forged incremental") > 0);
            src.unload_keys(GUID).unwrap();
        }
    }
}

/// Issue 12, test 4: a raw receive with `-s` cut at random points keeps a
/// partial state and a token; `send_raw` from the token resumes it (cut
/// again, then whole), the sender's key unloaded throughout, the receiver
/// never holding it; then with the key the result equals the source.
#[test]
fn raw_receives_resume_mid_stream() {
    let run = tarn_testkit::seeded!(2);
    for seed in run.seed..run.seed + run.count {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7e5);
        let cipher = if seed % 2 == 0 { Cipher::Aes128Gcm } else { Cipher::Aes256Gcm };
        let (src, snaps) = encrypted_source(Layout::Raidz1, cipher, &mut rng, 3, 20);
        let dst = pool(Layout::Mirror);
        let opts = RecvOptions { resumable: true, raw: Some(Crypt { cipher, key_guid: GUID }), ..Default::default() };
        // A full stream of the first, then a series of the rest, each cut
        // twice before it goes through.
        let mut dhead = None;
        let mut received: Vec<(SnapRef, ReceivedSnap)> = Vec::new();
        for (part, from) in [(&snaps[..1], None), (&snaps[1..], Some(snaps[0]))] {
            let base = from.as_ref().map(SendBase::from);
            let mut stream = Vec::new();
            send_raw(&src, part, base.as_ref(), None, &mut stream).unwrap();
            let mut target = match dhead {
                None => RecvTarget::New,
                Some(h) => RecvTarget::Existing { head: h, base: received.last().unwrap().1.snap_ref(), force: false },
            };
            let mut got = Vec::new();
            for round in 0..3 {
                let piece = if round < 2 { &stream[..rng.gen_range(stream.len() / 8..stream.len() * 7 / 8)] } else { &stream[..] };
                let mut input = piece;
                match receive(&dst, &mut input, target.clone(), &opts) {
                    Ok(o) => {
                        assert_eq!(round, 2, "seed {seed}: a cut stream went through");
                        got.extend(o.snapshots);
                        dhead = Some(o.head);
                        break;
                    }
                    Err(SendError::Interrupted { partial, .. }) => {
                        assert!(round < 2, "seed {seed}: the whole stream was interrupted");
                        got.extend(partial.snapshots.iter().copied());
                        assert_check(&dst, &format!("seed {seed}: partial state"));
                        let os = dst.open_objset(partial.head).unwrap();
                        assert!(matches!(os.info(ObjectId(1)), Err(ObjError::KeyNotLoaded) | Err(ObjError::NotFound(_))), "a partial raw receive read without the key");
                        stream.clear();
                        send_raw(&src, part, base.as_ref(), Some(&partial.token), &mut stream).unwrap();
                        target = RecvTarget::Resume { head: partial.head, token: partial.token };
                    }
                    Err(e) => panic!("seed {seed}: {e}"),
                }
            }
            assert_eq!(got.len(), part.len(), "seed {seed}: snapshots received");
            received.extend(part.iter().copied().zip(got));
        }
        assert_check(&dst, &format!("seed {seed}: resumed"));
        refuses_without_key(&dst, dhead.unwrap());
        compare_with_key(&src, &dst, &received, dhead.unwrap(), cipher, &format!("seed {seed}: resumed raw"));
    }
}
