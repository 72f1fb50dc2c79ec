//! Bad streams never corrupt and never panic: truncated at random offsets,
//! single bit flips, two records swapped, a stream from the wrong base,
//! forged records with valid checksums but absurd contents. Receive returns
//! an error and the target is exactly as before (same objects as its base
//! snapshot, no new snapshot or object set, `check()` clean). With `-s`
//! the partial state is kept with a token, and `send_resume` + receive
//! completes to the same tree as an uninterrupted transfer, also when the
//! resumed stream is interrupted again and in the middle of a series.
mod common;
use common::*;

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_obj::{ObjPool, ObjsetId, BONUS_LEN};
use tarn_send::format::*;
use tarn_send::*;

struct Fixture {
    src: Arc<ObjPool>,
    /// s0 .. s3 of one head.
    snaps: Vec<SnapRef>,
    full0: Vec<u8>,
    inc01: Vec<u8>,
    /// s0 -> {s1, s2, s3}.
    series: Vec<u8>,
    inc12: Vec<u8>,
}

fn fixture(seed: u64) -> Fixture {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let src = pool(Layout::Raidz1);
    let head = new_head(&src);
    let zap = populate(&src, head, &mut rng, 8);
    let mut snaps = vec![snapshot(&src, head, &mut rng)];
    for _ in 0..3 {
        mutate(&src, head, &mut rng, zap, 12);
        snaps.push(snapshot(&src, head, &mut rng));
    }
    let mut full0 = Vec::new();
    send(&src, &snaps[0], None, &mut full0).unwrap();
    let mut inc01 = Vec::new();
    send(&src, &snaps[1], Some(&SendBase::from(snaps[0])), &mut inc01).unwrap();
    let mut series = Vec::new();
    send_series(&src, &snaps[1..], Some(&SendBase::from(snaps[0])), &mut series).unwrap();
    let mut inc12 = Vec::new();
    send(&src, &snaps[2], Some(&SendBase::from(snaps[1])), &mut inc12).unwrap();
    Fixture { src, snaps, full0, inc01, series, inc12 }
}

/// A destination holding s0 (received): its pool, head and base.
struct Dst {
    pool: Arc<ObjPool>,
    head: ObjsetId,
    base: SnapRef,
    objsets: u64,
}

fn dst(fx: &Fixture) -> Dst {
    let pool = pool(Layout::Mirror);
    let mut input = &fx.full0[..];
    let o = receive(&pool, &mut input, RecvTarget::New, &RecvOptions::default()).unwrap();
    let objsets = pool.check().objsets;
    Dst { pool, head: o.head, base: o.snapshots[0].snap_ref(), objsets }
}

impl Dst {
    fn existing(&self) -> RecvTarget {
        RecvTarget::Existing { head: self.head, base: self.base, force: false }
    }

    fn recv(&self, stream: &[u8], target: RecvTarget, resumable: bool) -> Result<RecvOutcome> {
        let mut input = stream;
        receive(&self.pool, &mut input, target, &RecvOptions { resumable, props: None, raw: None, journal: None })
    }

    /// The target is exactly as before the failed receive.
    fn assert_unchanged(&self, fx: &Fixture, what: &str) {
        assert_eq!(self.pool.snapshot_info(self.head).unwrap().0, self.base.txg, "{what}: newest snapshot");
        let os = self.pool.open_objset(self.head).unwrap();
        assert!(!os.changed_since(self.base.txg), "{what}: head changed");
        assert_same(&fx.src, fx.snaps[0].objset, &self.pool, self.head, what);
        let r = self.pool.check();
        assert!(r.ok(), "{what}: {r:?}");
        assert_eq!(r.objsets, self.objsets, "{what}: object sets left behind");
    }
}

fn partial(e: SendError, what: &str) -> PartialRecv {
    match e {
        SendError::Interrupted { partial, .. } => *partial,
        e => panic!("{what}: expected an interrupted receive, got {e}"),
    }
}

fn flip(stream: &[u8], rng: &mut ChaCha8Rng) -> (Vec<u8>, usize) {
    let mut s = stream.to_vec();
    let at = rng.gen_range(0..s.len());
    s[at] ^= 1 << rng.gen_range(0..8);
    (s, at)
}

#[test]
fn truncated_flipped_and_reordered_streams_leave_the_target_unchanged() {
    let run = tarn_testkit::seeded!(12);
    let (seed, count) = (run.seed, run.count);
    let fx = fixture(seed);
    let d = dst(&fx);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    for trial in 0..count {
        // Truncated incremental.
        let cut = rng.gen_range(0..fx.inc01.len());
        let e = d.recv(&fx.inc01[..cut], d.existing(), false).unwrap_err();
        d.assert_unchanged(&fx, &format!("trial {trial}: incremental cut at {cut}: {e}"));
        // One bit flipped.
        let (bad, at) = flip(&fx.inc01, &mut rng);
        let e = d.recv(&bad, d.existing(), false).unwrap_err();
        d.assert_unchanged(&fx, &format!("trial {trial}: incremental with a bit flipped at {at}: {e}"));
        // Two records swapped (not BEGIN or END).
        let recs = records(&fx.inc01);
        if recs.len() > 3 {
            let i = rng.gen_range(1..recs.len() - 2);
            let j = rng.gen_range(i + 1..recs.len() - 1);
            let mut s = fx.inc01[..recs[i].0].to_vec();
            s.extend_from_slice(&fx.inc01[recs[j].0..recs[j].0 + recs[j].2]);
            s.extend_from_slice(&fx.inc01[recs[i].0 + recs[i].2..recs[j].0]);
            s.extend_from_slice(&fx.inc01[recs[i].0..recs[i].0 + recs[i].2]);
            s.extend_from_slice(&fx.inc01[recs[j].0 + recs[j].2..]);
            assert_eq!(s.len(), fx.inc01.len());
            let e = d.recv(&s, d.existing(), false).unwrap_err();
            d.assert_unchanged(&fx, &format!("trial {trial}: records {i} and {j} swapped: {e}"));
        }
        // A series cut anywhere: the snapshots it took are gone again.
        let cut = rng.gen_range(0..fx.series.len());
        let e = d.recv(&fx.series[..cut], d.existing(), false).unwrap_err();
        d.assert_unchanged(&fx, &format!("trial {trial}: series cut at {cut}: {e}"));
        // A truncated full stream leaves no object set behind.
        let cut = rng.gen_range(0..fx.full0.len());
        let e = d.recv(&fx.full0[..cut], RecvTarget::New, false).unwrap_err();
        d.assert_unchanged(&fx, &format!("trial {trial}: full cut at {cut}: {e}"));
        let (bad, at) = flip(&fx.full0, &mut rng);
        let e = d.recv(&bad, RecvTarget::New, false).unwrap_err();
        d.assert_unchanged(&fx, &format!("trial {trial}: full with a bit flipped at {at}: {e}"));
    }
    // After all that, the real stream still applies.
    let o = d.recv(&fx.inc01, d.existing(), false).unwrap();
    assert_same(&fx.src, fx.snaps[1].objset, &d.pool, o.snapshots[0].objset, "the intact stream after the failures");
    assert_check(&d.pool, "end");
}

#[test]
fn wrong_base_and_raw_streams_are_refused() {
    let run = tarn_testkit::seeded!(1);
    let seed = run.seed;
    let fx = fixture(seed);
    let d = dst(&fx);
    let e = d.recv(&fx.inc12, d.existing(), false).unwrap_err();
    assert!(matches!(e, SendError::WrongBase(_)), "{e}");
    d.assert_unchanged(&fx, "wrong base");
    // A base that is not the head's newest snapshot.
    let e = d.recv(&fx.inc01, RecvTarget::Existing { head: d.head, base: SnapRef { txg: d.base.txg - 1, ..d.base }, force: true }, false).unwrap_err();
    assert!(matches!(e, SendError::WrongBase(_)), "{e}");
    d.assert_unchanged(&fx, "base not newest");
    // Full onto existing, incremental into new.
    assert!(matches!(d.recv(&fx.full0, d.existing(), false).unwrap_err(), SendError::Invalid(_)));
    assert!(matches!(d.recv(&fx.inc01, RecvTarget::New, false).unwrap_err(), SendError::Invalid(_)));
    d.assert_unchanged(&fx, "full/incremental mismatch");
    // RAW streams: one without its CRYPT record is corrupt; a raw stream
    // is received only into an encrypted object set of its key.
    let mut raw = Vec::new();
    {
        let mut w = RecordWriter::new(&mut raw);
        w.begin(&Begin { flags: FLAG_RAW, ..begin_of(&fx.inc01) }).unwrap();
        w.end().unwrap();
    }
    let e = d.recv(&raw, d.existing(), true).unwrap_err();
    assert!(matches!(e.cause(), SendError::Corrupt(_)), "{e}");
    d.assert_unchanged(&fx, "raw without CRYPT");
    let mut raw = Vec::new();
    {
        let mut w = RecordWriter::new(&mut raw);
        w.begin(&Begin { flags: FLAG_RAW, ..begin_of(&fx.inc01) }).unwrap();
        let root = tarn_obj::raw::RawRoot { mac: [7; 16], meta_levels: 1, meta_nblocks: 1 };
        w.record(RecordType::Crypt, &[&CryptRec { cipher: tarn_block::Cipher::Aes256Gcm, key_guid: 9, root }.encode()]).unwrap();
        w.end().unwrap();
    }
    let e = d.recv(&raw, d.existing(), true).unwrap_err();
    assert!(matches!(e.cause(), SendError::Invalid(_)), "{e}");
    d.assert_unchanged(&fx, "raw into a plain object set");
    // A token for another stream.
    let bad_token = ResumeToken { stream_guid: 1, series_index: 0, series_count: 1, to_guid: 5, from_guid: 6, series_last_guid: 5, ..Default::default() }.encode();
    assert!(send_resume(&fx.src, &fx.snaps[1], Some(&SendBase::from(fx.snaps[0])), &bad_token, &mut Vec::new()).is_err());
    let e = d.recv(&fx.inc01, RecvTarget::Resume { head: d.head, token: bad_token }, false).unwrap_err();
    assert!(matches!(e, SendError::Invalid(_)), "{e}");
    d.assert_unchanged(&fx, "token of another stream");
}

fn begin_of(stream: &[u8]) -> Begin {
    Begin::decode(&stream[REC_HEADER..REC_HEADER + BEGIN_LEN]).unwrap()
}

/// Streams forged with valid checksums but hostile contents.
#[test]
fn forged_records_are_rejected_without_changing_anything() {
    let run = tarn_testkit::seeded!(1);
    let seed = run.seed;
    let fx = fixture(seed);
    let d = dst(&fx);
    let inc = begin_of(&fx.inc01);
    let full = begin_of(&fx.full0);
    let obj = |object: u64, flags: u8, block_size: u32, nblocks: u64| ObjectRec { object, otype: 20, flags, block_size, nblocks, bonus: [3; BONUS_LEN], levels: 0 };
    let w = |object: u64, offset: u64, data: &[u8]| {
        let h = WriteHdr { object, offset, logical_len: data.len() as u32, data_len: data.len() as u32, ..Default::default() };
        let mut v = h.encode().to_vec();
        v.extend_from_slice(data);
        v
    };
    type Rec = (RecordType, Vec<u8>);
    // A valid start that really changes the head: a new object with data.
    let good: Vec<Rec> = vec![(RecordType::Object, obj(5000, OBJ_NEW, 4096, 2).encode().to_vec()), (RecordType::Write, w(5000, 0, &[7u8; 4096]))];
    let cases: Vec<(&str, Begin, Vec<Rec>)> = vec![
        ("object id past 2^48", inc.clone(), vec![(RecordType::Object, obj(1 << 50, OBJ_NEW, 4096, 1).encode().to_vec())]),
        ("block size 2 MiB", inc.clone(), vec![(RecordType::Object, obj(5001, OBJ_NEW, 2 << 20, 1).encode().to_vec())]),
        ("2^62 blocks", inc.clone(), vec![(RecordType::Object, obj(5001, OBJ_NEW, 4096, 1 << 62).encode().to_vec())]),
        ("write without object", inc.clone(), vec![(RecordType::Write, w(5000, 0, &[1u8; 4096]))]),
        ("write past the declared blocks", inc.clone(), [good.clone(), vec![(RecordType::Write, w(5000, 8192, &[1u8; 4096]))]].concat()),
        ("write backwards", inc.clone(), [good.clone(), vec![(RecordType::Write, w(5000, 0, &[1u8; 4096]))]].concat()),
        ("write of the wrong size", inc.clone(), [good.clone(), vec![(RecordType::Write, w(5000, 4096, &[1u8; 100]))]].concat()),
        ("objects out of order", inc.clone(), [good.clone(), vec![(RecordType::Object, obj(4000, OBJ_NEW, 4096, 1).encode().to_vec())]].concat()),
        ("free objects count 2^63", inc.clone(), [good.clone(), vec![(RecordType::FreeObjects, encode_freeobjects(6000, 1 << 63).to_vec())]].concat()),
        ("free with overflowing range", inc.clone(), [good.clone(), vec![(RecordType::Free, encode_free(5000, 4096, u64::MAX - 10).to_vec())]].concat()),
        ("change of an object the target lacks", inc.clone(), [good.clone(), vec![(RecordType::Object, obj(7000, 0, 4096, 1).encode().to_vec())]].concat()),
        ("resumed object in a plain stream", inc.clone(), [good.clone(), vec![(RecordType::Object, obj(7000, OBJ_RESUMED, 4096, 1).encode().to_vec())]].concat()),
        ("full stream changing an existing object", full.clone(), vec![(RecordType::Object, obj(5000, 0, 4096, 1).encode().to_vec())]),
        ("series of 0", Begin { series_count: 0, series_index: 0, ..inc.clone() }, good.clone()),
        ("a second sub-stream that does not follow", Begin { series_count: 2, ..inc.clone() }, good.clone()),
    ];
    for (what, begin, recs) in cases {
        let mut s = Vec::new();
        {
            let mut wr = RecordWriter::new(&mut s);
            wr.begin(&begin).unwrap();
            for (ty, p) in &recs {
                wr.record(*ty, &[p]).unwrap();
            }
            wr.end().unwrap();
            if what.starts_with("a second") {
                wr.begin(&Begin { series_index: 1, from_guid: 99, ..begin.clone() }).unwrap();
                wr.end().unwrap();
            }
        }
        let target = if begin.from_guid == 0 { RecvTarget::New } else { d.existing() };
        let e = d.recv(&s, target, false).unwrap_err();
        d.assert_unchanged(&fx, &format!("{what}: {e}"));
    }
    // A record header claiming a 4 GiB payload, and a too-large write.
    let mut s = fx.inc01[..REC_HEADER + BEGIN_LEN].to_vec();
    s.extend_from_slice(&4u32.to_le_bytes());
    s.extend_from_slice(&u32::MAX.to_le_bytes());
    s.extend_from_slice(&[0u8; 24]);
    let e = d.recv(&s, d.existing(), false).unwrap_err();
    assert!(matches!(e, SendError::Corrupt(_)), "{e}");
    d.assert_unchanged(&fx, "4 GiB record");
    // The forged-but-good prefix really applies when the stream is valid.
    let mut s = Vec::new();
    {
        let mut wr = RecordWriter::new(&mut s);
        wr.begin(&inc).unwrap();
        for (ty, p) in &good {
            wr.record(*ty, &[p]).unwrap();
        }
        wr.end().unwrap();
    }
    let o = d.recv(&s, d.existing(), false).unwrap();
    let os = d.pool.open_objset(o.snapshots[0].objset).unwrap();
    assert_eq!(os.info(tarn_obj::ObjectId(5000)).unwrap().length, 8192);
    assert_check(&d.pool, "forged valid stream");
}

/// Receives `stream` with `-s`, cutting or damaging it as `damage` says,
/// then resumes (again damaged `again` times) until complete. Returns every
/// snapshot taken.
fn interrupted_then_resumed(
    fx: &Fixture,
    d: &Dst,
    snaps: &[SnapRef],
    from: Option<&SnapRef>,
    target: RecvTarget,
    rng: &mut ChaCha8Rng,
    what: &str,
) -> (ObjsetId, Vec<ReceivedSnap>) {
    let mut stream = Vec::new();
    send_series(&fx.src, snaps, from.map(SendBase::from).as_ref(), &mut stream).unwrap();
    let mut got = Vec::new();
    let mut target = target;
    let mut head = None;
    for round in 0..4 {
        let damaged: Vec<u8> = if round == 3 {
            stream.clone()
        } else if rng.gen_bool(0.6) {
            stream[..rng.gen_range(0..stream.len())].to_vec()
        } else {
            flip(&stream, rng).0
        };
        match d.recv(&damaged, target.clone(), true) {
            Ok(o) => {
                got.extend(o.snapshots);
                return (o.head, got);
            }
            Err(SendError::Interrupted { partial, cause }) => {
                let what = format!("{what}, round {round} ({cause})");
                assert!(partial.snapshots.len() < snaps.len(), "{what}");
                got.extend(partial.snapshots.iter().copied());
                if let Some(h) = head {
                    assert_eq!(h, partial.head, "{what}: the partial state moved");
                }
                head = Some(partial.head);
                assert_check(&d.pool, &format!("{what}: partial state"));
                let mut rest = Vec::new();
                send_series_resume(&fx.src, snaps, from.map(SendBase::from).as_ref(), &partial.token, &mut rest).unwrap();
                assert_eq!(estimate_resume(&fx.src, snaps, from.map(SendBase::from).as_ref(), &partial.token).unwrap(), rest.len() as u64);
                stream = rest;
                target = RecvTarget::Resume { head: partial.head, token: partial.token };
            }
            Err(e) => {
                // Damaged before the first BEGIN verified: nothing was done.
                assert!(head.is_none() || matches!(target, RecvTarget::Resume { .. }), "{what}: {e}");
                if head.is_none() {
                    d.assert_unchanged(fx, &format!("{what}: {e}"));
                }
            }
        }
    }
    unreachable!()
}

#[test]
fn resumable_receives_complete_to_the_same_tree() {
    let run = tarn_testkit::seeded!(8);
    let (seed, count) = (run.seed, run.count);
    let fx = fixture(seed);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xbeef);
    for trial in 0..count {
        // Incremental, possibly interrupted several times.
        let d = dst(&fx);
        let (head, got) = interrupted_then_resumed(&fx, &d, &fx.snaps[1..2], Some(&fx.snaps[0]), d.existing(), &mut rng, &format!("trial {trial}: incremental"));
        assert_eq!(head, d.head);
        assert_eq!(got.len(), 1);
        assert_same(&fx.src, fx.snaps[1].objset, &d.pool, got[0].objset, &format!("trial {trial}: resumed incremental"));
        assert_same(&fx.src, fx.snaps[1].objset, &d.pool, d.head, &format!("trial {trial}: resumed incremental head"));
        // A series s0 -> {s1, s2, s3}.
        let d = dst(&fx);
        let (_, got) = interrupted_then_resumed(&fx, &d, &fx.snaps[1..], Some(&fx.snaps[0]), d.existing(), &mut rng, &format!("trial {trial}: series"));
        assert_eq!(got.len(), 3);
        for (i, g) in got.iter().enumerate() {
            assert_eq!(g.guid, fx.snaps[i + 1].guid);
            assert_same(&fx.src, fx.snaps[i + 1].objset, &d.pool, g.objset, &format!("trial {trial}: resumed series, snapshot {}", i + 1));
        }
        // A full series into a new object set.
        let (head, got) = interrupted_then_resumed(&fx, &d, &fx.snaps, None, RecvTarget::New, &mut rng, &format!("trial {trial}: full series"));
        assert_eq!(got.len(), 4);
        for (i, g) in got.iter().enumerate() {
            assert_same(&fx.src, fx.snaps[i].objset, &d.pool, g.objset, &format!("trial {trial}: resumed full series, snapshot {i}"));
        }
        assert_same(&fx.src, fx.snaps[3].objset, &d.pool, head, &format!("trial {trial}: resumed full series head"));
        assert_check(&d.pool, &format!("trial {trial}: end"));
    }
}

/// Cut exactly between two sub-streams of a series, and exactly after the
/// OBJECT record of an object whose data follows: the token names the next
/// sub-stream / the object, and the resume completes it.
#[test]
fn series_cut_at_record_boundaries_resumes() {
    let run = tarn_testkit::seeded!(1);
    let seed = run.seed;
    let fx = fixture(seed);
    let recs = records(&fx.series);
    let ends: Vec<usize> = recs.iter().filter(|r| r.1 == RecordType::End as u32).map(|r| r.0 + r.2).collect();
    assert_eq!(ends.len(), 3);
    let after_object: Vec<usize> = recs.windows(2).filter(|w| w[0].1 == RecordType::Object as u32 && w[1].1 == RecordType::Write as u32).map(|w| w[1].0).collect();
    let mut cuts = vec![ends[0], ends[1]];
    cuts.extend(after_object.iter().take(3));
    for cut in cuts {
        let d = dst(&fx);
        let e = d.recv(&fx.series[..cut], d.existing(), true).unwrap_err();
        let p = partial(e, &format!("cut at {cut}"));
        let t = ResumeToken::decode(&p.token).unwrap();
        let done = ends.iter().filter(|&&e| e <= cut).count();
        assert_eq!(t.series_index as usize, done, "cut at {cut}");
        assert_eq!(p.snapshots.len(), done);
        let mut rest = Vec::new();
        send_series_resume(&fx.src, &fx.snaps[1..], Some(&SendBase::from(fx.snaps[0])), &p.token, &mut rest).unwrap();
        let o = d.recv(&rest, RecvTarget::Resume { head: p.head, token: p.token.clone() }, false).unwrap();
        let got: Vec<_> = p.snapshots.iter().chain(&o.snapshots).collect();
        assert_eq!(got.len(), 3);
        for (i, g) in got.iter().enumerate() {
            assert_same(&fx.src, fx.snaps[i + 1].objset, &d.pool, g.objset, &format!("cut at {cut}: snapshot {}", i + 1));
        }
        assert_check(&d.pool, &format!("cut at {cut}"));
    }
    // Abandoning a partial receive puts the head back at its newest snapshot.
    let d = dst(&fx);
    let p = partial(d.recv(&fx.inc01[..fx.inc01.len() / 2], d.existing(), true).unwrap_err(), "half");
    abort_partial(&d.pool, p.head, Some(&d.base)).unwrap();
    d.assert_unchanged(&fx, "aborted partial receive");
}

/// The partial state and its token survive a crash: the token is handed out
/// only after the partial state is on disk.
#[test]
fn partial_state_survives_a_crash() {
    let run = tarn_testkit::seeded!(3);
    let (seed, count) = (run.seed, run.count);
    let fx = fixture(seed);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xc0de);
    for trial in 0..count {
        let (pool, devs) = pool_with_devices(Layout::Mirror);
        let mut input = &fx.full0[..];
        let o = receive(&pool, &mut input, RecvTarget::New, &RecvOptions::default()).unwrap();
        let cut = rng.gen_range(REC_HEADER + BEGIN_LEN..fx.series.len());
        let mut input = &fx.series[..cut];
        let e = receive(&pool, &mut input, RecvTarget::Existing { head: o.head, base: o.snapshots[0].snap_ref(), force: false }, &RecvOptions { resumable: true, props: None, raw: None, journal: None }).unwrap_err();
        let p = partial(e, &format!("trial {trial}: cut at {cut}"));
        drop(pool); // no export: as if the power went
        let pool = reimport(&devs);
        let mut rest = Vec::new();
        send_series_resume(&fx.src, &fx.snaps[1..], Some(&SendBase::from(fx.snaps[0])), &p.token, &mut rest).unwrap();
        let mut input = &rest[..];
        let o2 = receive(&pool, &mut input, RecvTarget::Resume { head: p.head, token: p.token.clone() }, &RecvOptions::default()).unwrap();
        let got: Vec<_> = p.snapshots.iter().chain(&o2.snapshots).collect();
        assert_eq!(got.len(), 3, "trial {trial}");
        for (i, g) in got.iter().enumerate() {
            assert_same(&fx.src, fx.snaps[i + 1].objset, &pool, g.objset, &format!("trial {trial}: cut at {cut}, snapshot {}", i + 1));
        }
        assert_check(&pool, &format!("trial {trial}: after crash and resume"));
    }
}
