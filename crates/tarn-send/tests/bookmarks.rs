//! Incrementals from a bookmark: the base snapshot is destroyed on the
//! sender, only its txg and guid are left (`SendBase::Bookmark`). Random
//! changes between A and B (writes, zeroed blocks, holes punched,
//! truncations, objects freed, recreated under the same id with another
//! type or block size, bonus changes, a directory-like map); the receiver,
//! which holds A, must end up object for object equal to B, for a single
//! stream, a series, and a stream interrupted and resumed. A wrong guid
//! and a damaged stream leave the receiver as it was.
mod common;
use common::*;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_obj::{ObjPool, ObjsetId};
use tarn_send::*;

fn bookmark_of(s: &SnapRef) -> SendBase {
    SendBase::Bookmark {
        txg: s.txg,
        guid: s.guid,
    }
}

fn stream(pool: &ObjPool, snaps: &[SnapRef], from: &SendBase) -> Vec<u8> {
    let mut out = Vec::new();
    let sum = send_series(pool, snaps, Some(from), &mut out).unwrap();
    assert_eq!(sum.bytes as usize, out.len());
    assert_eq!(
        estimate_series(pool, snaps, Some(from)).unwrap(),
        out.len() as u64,
        "estimate must equal the stream size"
    );
    out
}

fn recv(pool: &ObjPool, s: &[u8], target: RecvTarget, resumable: bool) -> Result<RecvOutcome> {
    let mut input = s;
    receive(
        pool,
        &mut input,
        target,
        &RecvOptions {
            resumable,
            props: None,
            raw: None,
            journal: None,
        },
    )
}

/// Destroys snapshot `s` (the oldest of its head; `next` is the one after).
fn destroy(pool: &ObjPool, s: &SnapRef, next: ObjsetId) {
    {
        let tx = pool.begin();
        pool.destroy_snapshot(&tx, s.objset, 0, next).unwrap();
    }
    pool.sync().unwrap();
    assert!(
        pool.open_objset(s.objset).is_err(),
        "snapshot still there after destroy"
    );
}

struct Setup {
    src: std::sync::Arc<ObjPool>,
    dst: std::sync::Arc<ObjPool>,
    a: SnapRef,
    snaps: Vec<SnapRef>,
    dhead: ObjsetId,
    dbase: SnapRef,
    /// The incremental A → snaps[0] made while A existed.
    from_snapshot: Vec<u8>,
}

/// A on both sides, then `n` more snapshots on the source with random
/// changes in between, then A destroyed on the source.
fn setup(seed: u64, n: usize) -> Setup {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let src = pool(Layout::Raidz1);
    let dst = pool(Layout::Mirror);
    let head = new_head(&src);
    let zap = populate(&src, head, &mut rng, 14);
    let a = snapshot(&src, head, &mut rng);
    let mut snaps = Vec::new();
    for _ in 0..n {
        mutate(&src, head, &mut rng, zap, 30);
        snaps.push(snapshot(&src, head, &mut rng));
    }
    let mut full = Vec::new();
    send(&src, &a, None, &mut full).unwrap();
    let o = recv(&dst, &full, RecvTarget::New, false).unwrap();
    let mut from_snapshot = Vec::new();
    send(
        &src,
        &snaps[0],
        Some(&SendBase::from(a)),
        &mut from_snapshot,
    )
    .unwrap();
    destroy(&src, &a, snaps[0].objset);
    Setup {
        src,
        dst,
        a,
        snaps,
        dhead: o.head,
        dbase: o.snapshots[0].snap_ref(),
        from_snapshot,
    }
}

#[test]
fn incremental_from_a_bookmark_equals_the_target() {
    let run = tarn_testkit::seeded!(4);
    let (seed, count) = (run.seed, run.count);
    for trial in 0..count {
        let seed = seed.wrapping_add(trial);
        let what = format!("seed {seed}");
        let s = setup(seed, 1);
        let b = s.snaps[0];
        let inc = stream(&s.src, &[b], &bookmark_of(&s.a));
        // No base tree: it frees more than the snapshot-based stream, but
        // carries the same data.
        assert!(
            inc.len() >= s.from_snapshot.len() - 64,
            "{what}: {} < {}",
            inc.len(),
            s.from_snapshot.len()
        );
        let o = recv(
            &s.dst,
            &inc,
            RecvTarget::Existing {
                head: s.dhead,
                base: s.dbase,
                force: false,
            },
            false,
        )
        .unwrap_or_else(|e| panic!("{what}: receive: {e}"));
        assert_eq!(o.snapshots[0].guid, b.guid);
        assert_same(
            &s.src,
            b.objset,
            &s.dst,
            o.snapshots[0].objset,
            &format!("{what}: received snapshot"),
        );
        assert_same(&s.src, b.objset, &s.dst, s.dhead, &format!("{what}: head"));
        assert_check(&s.src, &format!("{what}: source"));
        assert_check(&s.dst, &format!("{what}: destination"));
    }
}

/// `send -I #a @c`: a series whose first sub-stream is from the bookmark.
#[test]
fn series_from_a_bookmark() {
    let s = setup(101, 3);
    let series = stream(&s.src, &s.snaps, &bookmark_of(&s.a));
    let o = recv(
        &s.dst,
        &series,
        RecvTarget::Existing {
            head: s.dhead,
            base: s.dbase,
            force: false,
        },
        false,
    )
    .unwrap();
    assert_eq!(o.snapshots.len(), 3);
    for (src, got) in s.snaps.iter().zip(&o.snapshots) {
        assert_same(
            &s.src,
            src.objset,
            &s.dst,
            got.objset,
            &format!("series, txg {}", src.txg),
        );
    }
    assert_check(&s.dst, "series");
}

/// Interrupted (cut at a random place) and resumed from the bookmark.
#[test]
fn resumed_from_a_bookmark() {
    let s = setup(202, 1);
    let b = s.snaps[0];
    let base = bookmark_of(&s.a);
    let full = stream(&s.src, &[b], &base);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let cut = rng.gen_range(full.len() / 3..full.len() * 2 / 3);
    let e = recv(
        &s.dst,
        &full[..cut],
        RecvTarget::Existing {
            head: s.dhead,
            base: s.dbase,
            force: false,
        },
        true,
    )
    .unwrap_err();
    let SendError::Interrupted { partial, .. } = e else {
        panic!("not interrupted: {e}")
    };
    let mut rest = Vec::new();
    send_resume(&s.src, &b, Some(&base), &partial.token, &mut rest).unwrap();
    assert_eq!(
        estimate_resume(&s.src, &[b], Some(&base), &partial.token).unwrap(),
        rest.len() as u64
    );
    let o = recv(
        &s.dst,
        &rest,
        RecvTarget::Resume {
            head: partial.head,
            token: partial.token.clone(),
        },
        true,
    )
    .unwrap();
    assert_same(&s.src, b.objset, &s.dst, o.snapshots[0].objset, "resumed");
    assert_check(&s.dst, "resumed");
}

/// The cost scales with the change: one block changed in a large object
/// set sends a few records, not the object set.
#[test]
fn cost_scales_with_the_change() {
    use tarn_obj::{ObjType, BONUS_LEN};
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let src = pool(Layout::Mirror);
    let head = new_head(&src);
    let os = src.open_objset(head).unwrap();
    let big = {
        let tx = src.begin();
        for i in 0..300u32 {
            let id = os
                .create(&tx, ObjType(20), 512, &[i as u8; BONUS_LEN])
                .unwrap();
            os.write(&tx, id, 0, &[i as u8; 100]).unwrap();
        }
        let big = os.create(&tx, ObjType(21), 512, &[9; BONUS_LEN]).unwrap();
        os.write(&tx, big, 0, &vec![7u8; 4000 * 512]).unwrap();
        big
    };
    src.sync().unwrap();
    let a = snapshot(&src, head, &mut rng);
    {
        let tx = src.begin();
        os.write(&tx, big, 3000 * 512, &[1u8; 512]).unwrap();
    }
    src.sync().unwrap();
    let b = snapshot(&src, head, &mut rng);
    destroy(&src, &a, b.objset);
    let inc = stream(&src, &[b], &bookmark_of(&a));
    let mut full = Vec::new();
    send(&src, &b, None, &mut full).unwrap();
    // One dnode block (32 objects: an OBJECT and a FREE or two each) and
    // one data block.
    assert!(
        inc.len() < 32 * 3 * 160 + 4096,
        "bookmark incremental of {} bytes (full: {})",
        inc.len(),
        full.len()
    );
    assert!(full.len() > 10 * inc.len());
}

/// A bookmark stream onto a receiver whose base has another guid is
/// refused before anything changes; a damaged one is rolled back; the
/// sender refuses a bookmark that is not older than the target.
#[test]
fn wrong_base_and_damage_leave_the_receiver_unchanged() {
    let s = setup(303, 1);
    let b = s.snaps[0];
    let target = || RecvTarget::Existing {
        head: s.dhead,
        base: s.dbase,
        force: false,
    };
    let wrong = stream(
        &s.src,
        &[b],
        &SendBase::Bookmark {
            txg: s.a.txg,
            guid: s.a.guid ^ 0x10,
        },
    );
    let e = recv(&s.dst, &wrong, target(), false).unwrap_err();
    assert!(matches!(e, SendError::WrongBase(_)), "{e}");
    assert_same(
        &s.dst,
        s.dbase.objset,
        &s.dst,
        s.dhead,
        "after the wrong base",
    );

    let good = stream(&s.src, &[b], &bookmark_of(&s.a));
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    for round in 0..6 {
        let mut bad = good.clone();
        // Past the BEGIN record (32 + 128 bytes): some change is applied
        // before the damage is found.
        let i = rng.gen_range(200..bad.len());
        bad[i] ^= 1 << rng.gen_range(0..8);
        let e = recv(&s.dst, &bad, target(), false).unwrap_err();
        assert!(
            !matches!(e, SendError::CleanupFailed { .. }),
            "round {round}: {e}"
        );
        assert_same(
            &s.dst,
            s.dbase.objset,
            &s.dst,
            s.dhead,
            &format!("round {round}: after a damaged stream ({e})"),
        );
    }
    let o = recv(&s.dst, &good, target(), false).unwrap();
    assert_same(
        &s.src,
        b.objset,
        &s.dst,
        o.snapshots[0].objset,
        "after the failures",
    );

    let mut out = Vec::new();
    assert!(
        send(
            &s.src,
            &b,
            Some(&SendBase::Bookmark {
                txg: b.txg,
                guid: 5
            }),
            &mut out
        )
        .is_err(),
        "bookmark not older"
    );
    assert!(
        send(
            &s.src,
            &b,
            Some(&SendBase::Bookmark {
                txg: s.a.txg,
                guid: b.guid
            }),
            &mut out
        )
        .is_err(),
        "same guid"
    );
    assert_check(&s.dst, "destination");
}

/// Trees of different heights from a bookmark: an object growing from one
/// level to four, whole indirect subtrees freed, a tall object freed and
/// recreated short under the same id (same type and block size, so the
/// receiver keeps its object and must be rewritten everywhere), a huge
/// sparse offset.
#[test]
fn tree_heights_and_reused_ids_from_a_bookmark() {
    use tarn_obj::{ObjType, ObjectId, BONUS_LEN};
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let src = pool(Layout::Raidz1);
    let dst = pool(Layout::Mirror);
    let head = new_head(&src);
    let os = src.open_objset(head).unwrap();
    let (grow, tall, sparse) = tree_shapes(&src, &os);
    let a = snapshot(&src, head, &mut rng);
    {
        let tx = src.begin();
        os.write(&tx, grow, 5000 * 512, &[8u8; 512]).unwrap();
        os.write(&tx, grow, 4_000_000 * 512, &[9u8; 512]).unwrap();
        os.free_range(&tx, sparse, 0, None).unwrap();
        os.write(&tx, sparse, 4096, &[2u8; 4096]).unwrap();
        os.free(&tx, tall).unwrap();
    }
    src.sync().unwrap();
    {
        let tx = src.begin();
        os.create_with_id(&tx, tall, ObjType(20), 512, &[2; BONUS_LEN])
            .unwrap();
        os.write(&tx, tall, 1500 * 512, &[3u8; 700]).unwrap();
    }
    src.sync().unwrap();
    let b = snapshot(&src, head, &mut rng);
    let mut full = Vec::new();
    send(&src, &a, None, &mut full).unwrap();
    let o = recv(&dst, &full, RecvTarget::New, false).unwrap();
    destroy(&src, &a, b.objset);
    let inc = stream(&src, &[b], &bookmark_of(&a));
    let o2 = recv(
        &dst,
        &inc,
        RecvTarget::Existing {
            head: o.head,
            base: o.snapshots[0].snap_ref(),
            force: false,
        },
        false,
    )
    .unwrap();
    assert_same(&src, b.objset, &dst, o2.snapshots[0].objset, "b");
    let d = dst.open_objset(o2.snapshots[0].objset).unwrap();
    assert!(
        d.committed_block_is_hole(ObjectId(tall.0), 100).unwrap(),
        "old data of a reused id left behind"
    );
    assert!(d.committed_block_is_hole(ObjectId(sparse.0), 0).unwrap());
    assert_eq!(d.committed_object(grow).unwrap().unwrap().levels(), 4);
    assert!(
        inc.len() < 8 * 4096 + 8000,
        "bookmark incremental of {} bytes",
        inc.len()
    );
    assert_check(&dst, "destination");
}
