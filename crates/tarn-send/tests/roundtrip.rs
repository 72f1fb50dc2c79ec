//! Replication between pools of different layouts: full, incremental and
//! series streams of randomly changing object sets (several block sizes,
//! sparse objects, holes punched and zeroed, truncations, objects freed,
//! created and recreated under the same id, bonus and block-size changes,
//! a directory-like map). After every receive each received snapshot must
//! equal its source object by object, the estimate must equal the stream's
//! size, and both pools must pass `check()`.
mod common;
use common::*;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tarn_obj::{Compression, ObjPool, WriteProps};
use tarn_send::*;

fn stream_of(pool: &ObjPool, snaps: &[SnapRef], from: Option<&SnapRef>) -> Vec<u8> {
    let mut out = Vec::new();
    let sum = send_series(pool, snaps, from.map(SendBase::from).as_ref(), &mut out).unwrap();
    assert_eq!(sum.bytes as usize, out.len());
    let est = estimate_series(pool, snaps, from.map(SendBase::from).as_ref()).unwrap();
    assert_eq!(est, out.len() as u64, "estimate must equal the stream size");
    out
}

fn recv(pool: &ObjPool, stream: &[u8], target: RecvTarget, opts: &RecvOptions) -> RecvOutcome {
    let mut input = stream;
    let o = receive(pool, &mut input, target, opts).unwrap_or_else(|e| panic!("receive: {e}"));
    assert!(input.is_empty(), "receive leaves {} bytes unread", input.len());
    o
}

fn scenario(seed: u64, src_layout: Layout, dst_layout: Layout) {
    let what = format!("seed {seed} {src_layout:?} -> {dst_layout:?}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let src = pool(src_layout);
    let dst = pool(dst_layout);
    let head = new_head(&src);
    let zap = populate(&src, head, &mut rng, 12);
    let mut snaps = vec![snapshot(&src, head, &mut rng)];
    for _ in 0..4 {
        mutate(&src, head, &mut rng, zap, 25);
        snaps.push(snapshot(&src, head, &mut rng));
    }
    // The receiving side stores differently (no compression, blake3).
    let opts = RecvOptions {
        resumable: false,
        props: Some(WriteProps { compression: Compression::Off, checksum: tarn_obj::ChecksumKind::Blake3, copies: 1, primarycache: Default::default(), secondarycache: Default::default() }),
        raw: None,
        journal: None,
    };

    // Full of s0, then incremental s0 -> s1, then the series s1 -> {s2, s3, s4}.
    let full = stream_of(&src, &snaps[..1], None);
    let o = recv(&dst, &full, RecvTarget::New, &opts);
    assert_eq!(o.snapshots.len(), 1);
    assert_eq!(o.snapshots[0].guid, snaps[0].guid);
    assert_eq!(o.snapshots[0].source_txg, snaps[0].txg);
    let dhead = o.head;
    let mut got = vec![o.snapshots[0]];
    assert_same(&src, snaps[0].objset, &dst, got[0].objset, &format!("{what}: full s0"));
    assert_same(&src, snaps[0].objset, &dst, dhead, &format!("{what}: head after full s0"));

    let inc = stream_of(&src, &snaps[1..2], Some(&snaps[0]));
    assert!(inc.len() < full.len() + (4 << 20));
    let o = recv(&dst, &inc, RecvTarget::Existing { head: dhead, base: got[0].snap_ref(), force: false }, &opts);
    assert_eq!(o.head, dhead);
    got.extend(o.snapshots);
    assert_same(&src, snaps[1].objset, &dst, got[1].objset, &format!("{what}: incremental s1"));

    let series = stream_of(&src, &snaps[2..], Some(&snaps[1]));
    let o = recv(&dst, &series, RecvTarget::Existing { head: dhead, base: got[1].snap_ref(), force: false }, &opts);
    assert_eq!(o.snapshots.len(), 3);
    got.extend(o.snapshots);
    for (i, (s, g)) in snaps.iter().zip(&got).enumerate() {
        assert_eq!(s.guid, g.guid);
        assert_same(&src, s.objset, &dst, g.objset, &format!("{what}: snapshot {i}"));
    }
    assert_same(&src, snaps[4].objset, &dst, dhead, &format!("{what}: head at the end"));

    // The whole history as one full series into another object set.
    let all = stream_of(&src, &snaps, None);
    let o = recv(&dst, &all, RecvTarget::New, &RecvOptions::default());
    assert_eq!(o.snapshots.len(), snaps.len());
    for (i, (s, g)) in snaps.iter().zip(&o.snapshots).enumerate() {
        assert_same(&src, s.objset, &dst, g.objset, &format!("{what}: full series, snapshot {i}"));
    }

    // Cascade: the receiver sends on (its snapshots keep the source guids)
    // to a third pool of the source's layout, skipping a snapshot (-i).
    let third = pool(src_layout);
    let s0 = stream_of(&dst, &[got[0].snap_ref()], None);
    let o0 = recv(&third, &s0, RecvTarget::New, &RecvOptions::default());
    let skip = stream_of(&dst, &[got[3].snap_ref()], Some(&got[0].snap_ref()));
    let o1 = recv(&third, &skip, RecvTarget::Existing { head: o0.head, base: o0.snapshots[0].snap_ref(), force: false }, &RecvOptions::default());
    assert_same(&src, snaps[3].objset, &third, o1.snapshots[0].objset, &format!("{what}: cascaded -i s0 -> s3"));

    assert_check(&src, &format!("{what}: source"));
    assert_check(&dst, &format!("{what}: destination"));
    assert_check(&third, &format!("{what}: third pool"));
}

#[test]
fn raidz1_to_mirror_full_incremental_and_series() {
    let run = tarn_testkit::seeded!(2);
    let (seed, count) = (run.seed, run.count);
    for s in seed..seed + count {
        scenario(s, Layout::Raidz1, Layout::Mirror);
    }
}

#[test]
fn mirror_to_raidz1_full_incremental_and_series() {
    let run = tarn_testkit::seeded!(2);
    let (seed, count) = (run.seed, run.count);
    for s in seed..seed + count {
        scenario(s + 1000, Layout::Mirror, Layout::Raidz1);
    }
}

/// An incremental whose base is not the head's newest snapshot, or onto a
/// head changed since its base, is refused unless forced; forced, the head
/// is rolled back first and ends equal to the source.
#[test]
fn modified_destination_needs_force() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let src = pool(Layout::Raidz1);
    let dst = pool(Layout::Mirror);
    let head = new_head(&src);
    let zap = populate(&src, head, &mut rng, 6);
    let s0 = snapshot(&src, head, &mut rng);
    mutate(&src, head, &mut rng, zap, 10);
    let s1 = snapshot(&src, head, &mut rng);
    let full = stream_of(&src, &[s0], None);
    let o = recv(&dst, &full, RecvTarget::New, &RecvOptions::default());
    let (dhead, base) = (o.head, o.snapshots[0].snap_ref());
    // Change the destination head.
    {
        let os = dst.open_objset(dhead).unwrap();
        let tx = dst.begin();
        os.create(&tx, tarn_obj::ObjType(20), 4096, &[1; tarn_obj::BONUS_LEN]).unwrap();
    }
    dst.sync().unwrap();
    let inc = stream_of(&src, &[s1], Some(&s0));
    let mut input = &inc[..];
    let e = receive(&dst, &mut input, RecvTarget::Existing { head: dhead, base, force: false }, &RecvOptions::default()).unwrap_err();
    assert!(matches!(e, SendError::Modified), "{e}");
    // The caller may read the BEGIN record first to choose the target.
    let mut input = &inc[..];
    let (begin, raw) = peek_begin(&mut input).unwrap();
    assert_eq!((begin.from_guid, begin.to_guid, begin.series_count), (s0.guid, s1.guid, 1));
    let mut chained = std::io::Read::chain(&raw[..], input);
    let o = receive(&dst, &mut chained, RecvTarget::Existing { head: dhead, base, force: true }, &RecvOptions::default()).unwrap();
    assert_same(&src, s1.objset, &dst, o.snapshots[0].objset, "forced incremental");
    assert_same(&src, s1.objset, &dst, dhead, "forced incremental, head");
    assert_check(&dst, "after forced receive");
}

/// The sender refuses snapshots out of order, and a base that is not an
/// earlier snapshot of the same head when it can tell.
#[test]
fn sender_checks_its_arguments() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let src = pool(Layout::Mirror);
    let a = new_head(&src);
    let b = new_head(&src);
    let za = populate(&src, a, &mut rng, 4);
    populate(&src, b, &mut rng, 4);
    let a0 = snapshot(&src, a, &mut rng);
    let b0 = snapshot(&src, b, &mut rng);
    mutate(&src, a, &mut rng, za, 5);
    let a1 = snapshot(&src, a, &mut rng);
    let mut out = Vec::new();
    assert!(send(&src, &a0, Some(&SendBase::from(a1)), &mut out).is_err(), "base after target");
    assert!(send_series(&src, &[a1, a0], None, &mut out).is_err(), "series out of order");
    // A base txg later than the base's real one would miss changes.
    assert!(a1.txg > a0.txg + 1);
    assert!(send(&src, &a1, Some(&SendBase::from(SnapRef { txg: a1.txg - 1, ..a0 })), &mut out).is_err(), "base txg too late");
    // b0 is older than a1 but of another head: caught by the block check.
    let r = send(&src, &a1, Some(&SendBase::from(b0)), &mut Vec::new());
    assert!(r.is_err(), "unrelated base accepted");
    assert!(estimate(&src, &a1, Some(&SendBase::from(a0))).unwrap() > 0);
}

/// Trees of different heights between base and target: an object growing
/// from one level to four, whole indirect subtrees freed, a tall object
/// freed and recreated short under the same id, a huge sparse offset.
#[test]
fn tree_heights_and_whole_subtrees() {
    use tarn_obj::{ObjType, ObjectId, BONUS_LEN};
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let src = pool(Layout::Raidz1);
    let dst = pool(Layout::Mirror);
    let head = new_head(&src);
    let os = src.open_objset(head).unwrap();
    let (grow, tall, sparse) = tree_shapes(&src, &os);
    let s0 = snapshot(&src, head, &mut rng);
    {
        let tx = src.begin();
        os.write(&tx, grow, 5000 * 512, &[8u8; 512]).unwrap();
        os.write(&tx, grow, 4_000_000 * 512, &[9u8; 512]).unwrap();
        // Free blocks 1024..3072 of the tall object: whole level-1 subtrees.
        os.free_range(&tx, tall, 1024 * 512, Some(2048 * 512)).unwrap();
        os.write(&tx, sparse, (1 << 40) + 4096, &[1u8; 100]).unwrap();
        os.write(&tx, sparse, 0, &[2u8; 4096]).unwrap();
    }
    src.sync().unwrap();
    let s1 = snapshot(&src, head, &mut rng);
    {
        let tx = src.begin();
        os.free(&tx, tall).unwrap();
        os.create_with_id(&tx, tall, ObjType(20), 512, &[4; BONUS_LEN]).unwrap();
        os.write(&tx, tall, 0, &[3u8; 700]).unwrap();
        os.free_range(&tx, grow, 0, None).unwrap();
    }
    src.sync().unwrap();
    let s2 = snapshot(&src, head, &mut rng);
    let full = stream_of(&src, &[s0], None);
    let o = recv(&dst, &full, RecvTarget::New, &RecvOptions::default());
    let series = stream_of(&src, &[s1, s2], Some(&s0));
    let o2 = recv(&dst, &series, RecvTarget::Existing { head: o.head, base: o.snapshots[0].snap_ref(), force: false }, &RecvOptions::default());
    assert_same(&src, s1.objset, &dst, o2.snapshots[0].objset, "s1");
    assert_same(&src, s2.objset, &dst, o2.snapshots[1].objset, "s2");
    let d = dst.open_objset(o2.snapshots[0].objset).unwrap();
    assert!(d.committed_block_is_hole(ObjectId(tall.0), 2000).unwrap());
    assert!(!d.committed_block_is_hole(ObjectId(tall.0), 3500).unwrap());
    assert_eq!(d.committed_object(grow).unwrap().unwrap().levels(), 4);
    // Incremental streams carry the change only, even at an offset of 1 TiB.
    assert!(series.len() < 3 * 4096 + 4000, "series of {} bytes", series.len());
    assert_check(&src, "source");
    assert_check(&dst, "destination");
}
