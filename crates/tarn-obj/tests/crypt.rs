//! Encrypted object sets (issue 12): everything a user would call content
//! — file data, inode attributes (bonus), names in maps — is sealed on
//! disk; with the key unloaded nothing of it is served (not even from the
//! cache), while `debug check` and scrub still verify every block; after
//! export/import the key opens it all again. Without the key, the pool
//! imports and its other object sets read as always.
mod common;
use common::*;
use std::sync::Arc;
use std::time::Duration;
use tarn_block::{BlockKeys, Cipher};
use tarn_dev::Device;
use tarn_keys::MasterKey;
use tarn_obj::crypt::Crypt;
use tarn_obj::zap::Zap;
use tarn_obj::*;

const DATA_MARK: &[u8] = b"DATA-MARKER-7f3a91-plaintext-must-not-reach-disk";
const BONUS_MARK: &[u8] = b"BONUS-MARK-c0ffee";
const NAME_MARK: &[u8] = b"NAME-MARK-secret-report.odt";
const GUID: u64 = 0x5eed_0000_1234_abcd;

fn keys(cipher: Cipher) -> Arc<BlockKeys> {
    Arc::new(BlockKeys::new(cipher, &MasterKey::from_bytes(&[0x42; 32])).unwrap())
}

/// Loads the test key and makes an AES-256 object set, synced and open.
fn encrypted_objset(pool: &ObjPool) -> (ObjsetId, ObjectSet) {
    pool.load_keys(GUID, keys(Cipher::Aes256Gcm));
    let id = {
        let tx = pool.begin();
        pool.create_objset_with(&tx, Some(Crypt { cipher: Cipher::Aes256Gcm, key_guid: GUID })).unwrap()
    };
    pool.sync().unwrap();
    (id, pool.open_objset(id).unwrap())
}

fn contains(dev: &tarn_dev::MemDevice, needle: &[u8]) -> bool {
    let size = dev.size();
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0;
    let mut carry: Vec<u8> = Vec::new();
    while off < size {
        let n = (size - off).min(buf.len() as u64) as usize;
        dev.read_at(&mut buf[..n], off).unwrap();
        let mut window = std::mem::take(&mut carry);
        window.extend_from_slice(&buf[..n]);
        if window.windows(needle.len()).any(|w| w == needle) {
            return true;
        }
        carry = window[window.len().saturating_sub(needle.len())..].to_vec();
        off += n as u64;
    }
    false
}

struct Written {
    file: ObjectId,
    big: ObjectId,
    map: ObjectId,
    data: Vec<u8>,
    bonus: [u8; BONUS_LEN],
}

fn write_content(pool: &ObjPool, os: &ObjectSet) -> Written {
    let mut bonus = [0u8; BONUS_LEN];
    bonus[..BONUS_MARK.len()].copy_from_slice(BONUS_MARK);
    let data: Vec<u8> = DATA_MARK.iter().cycle().take(300_000).copied().collect();
    let tx = pool.begin();
    let file = os.create(&tx, ObjType(19), 4096, &bonus).unwrap();
    os.write(&tx, file, 0, &data[..12_000]).unwrap();
    // Enough 4 KiB blocks for an indirect level.
    let big = os.create(&tx, ObjType(19), 4096, &bonus).unwrap();
    os.write(&tx, big, 0, &data).unwrap();
    let map = Zap::create(os, &tx, ObjType(20)).unwrap();
    Zap::insert(os, &tx, map, NAME_MARK, b"inode 7").unwrap();
    drop(tx);
    pool.sync().unwrap();
    Written { file, big, map, data, bonus }
}

fn verify(os: &ObjectSet, w: &Written) {
    assert_eq!(read_all(os, w.file, 12_000), w.data[..12_000]);
    assert_eq!(read_all(os, w.big, w.data.len()), w.data);
    assert_eq!(os.bonus(w.file).unwrap(), w.bonus);
    assert_eq!(Zap::lookup(os, w.map, NAME_MARK).unwrap().as_deref(), Some(&b"inode 7"[..]));
}

fn refused(pool: &ObjPool, os: &ObjectSet, w: &Written) {
    let mut b = vec![0u8; 100];
    assert!(matches!(os.read(w.file, 0, &mut b), Err(ObjError::KeyNotLoaded)), "data read without the key");
    assert!(matches!(os.read(w.big, 200_000, &mut b), Err(ObjError::KeyNotLoaded)), "data read without the key");
    assert!(matches!(os.bonus(w.file), Err(ObjError::KeyNotLoaded)), "attributes read without the key");
    assert!(Zap::lookup(os, w.map, NAME_MARK).is_err(), "a name looked up without the key");
    let tx = pool.begin();
    assert!(os.write(&tx, w.file, 0, b"x").is_err(), "a write without the key");
}

#[test]
fn encrypted_object_sets_keep_content_sealed_and_verifiable_without_the_key() {
    for cipher in [Cipher::Aes256Gcm, Cipher::Aes128Gcm] {
        let devs = mem_devs(2, 256 << 20);
        let pool = create(&as_dyn(&devs), TopKind::Mirror);
        let crypt = Crypt { cipher, key_guid: GUID };
        // No key loaded: an encrypted object set cannot be created.
        assert!(matches!(pool.create_objset_with(&pool.begin(), Some(crypt)), Err(ObjError::KeyNotLoaded)));
        pool.load_keys(GUID, keys(cipher));
        let id = {
            let tx = pool.begin();
            pool.create_objset_with(&tx, Some(crypt)).unwrap()
        };
        let plain_id = {
            let tx = pool.begin();
            pool.create_objset(&tx).unwrap()
        };
        pool.sync().unwrap();
        let os = pool.open_objset(id).unwrap();
        assert_eq!(os.crypt(), Some(crypt));
        let w = write_content(&pool, &os);
        verify(&os, &w);
        // The big file's tree: its indirect block carries its children's
        // digest (what a dnode block's MAC then covers).
        let mut top = None;
        os.for_each_object(&mut |id, phys| {
            if id == w.big {
                top = Some(phys.bps[0]);
            }
        })
        .unwrap();
        let top = top.unwrap();
        assert!(top.level > 0, "an indirect level");
        assert_ne!(top.flags & tarn_block::crypt::FLAG_CHILDREN_DIGEST, 0);
        // (Reads after the import below go through it: a wrong digest fails them.)
        // The same content in a plain object set, as a control: the scan
        // below finds the markers there.
        let plain = pool.open_objset(plain_id).unwrap();
        let mut bonus = [0u8; BONUS_LEN];
        bonus[..BONUS_MARK.len()].copy_from_slice(BONUS_MARK);
        let tx = pool.begin();
        let f = plain.create(&tx, ObjType(19), 4096, &bonus).unwrap();
        plain.write(&tx, f, 0, &w.data[..8192]).unwrap();
        drop(tx);
        pool.sync().unwrap();

        // Unloaded: nothing served, not even what the cache holds.
        pool.unload_keys(GUID).unwrap();
        assert!(!os.key_loaded());
        refused(&pool, &os, &w);
        // Checked and scrubbed without the key.
        let report = pool.check();
        assert!(report.damaged.is_empty(), "{cipher:?}: {:?}", report.damaged);
        pool.scrub_start().unwrap();
        assert!(pool.wait_scan(None, Duration::from_secs(120)));
        let st = pool.scan_stats().unwrap();
        assert_eq!(st.errors, 0, "{st:?}");
        assert!(st.issued > 0);
        pool.export().unwrap();
        drop((os, plain, pool));

        // On disk: the plain object set's markers, none of the encrypted one's.
        for d in &devs {
            assert!(contains(d, BONUS_MARK), "control: the plain object set's attributes are on disk");
        }
        for d in &devs {
            // The data marker is in the plain set's first 8 KiB too, so the
            // encrypted set is judged by what only it holds.
            assert!(!contains(d, NAME_MARK), "{cipher:?}: a name in the clear");
        }

        // Imported without the key: the pool works, the set refuses; the key
        // opens everything again.
        let pool = import(as_dyn(&devs), false).unwrap();
        let os = pool.open_objset(id).unwrap();
        assert_eq!(os.crypt(), Some(crypt));
        refused(&pool, &os, &w);
        let plain = pool.open_objset(plain_id).unwrap();
        assert_eq!(read_all(&plain, f, 8192), w.data[..8192]);
        // The wrong key: every read fails authentication, none succeeds.
        pool.load_keys(GUID, Arc::new(BlockKeys::new(cipher, &MasterKey::from_bytes(&[0x43; 32])).unwrap()));
        let mut b = vec![0u8; 100];
        assert!(os.read(w.big, 0, &mut b).is_err(), "read with the wrong key");
        assert!(os.bonus(w.file).is_err());
        pool.unload_keys(GUID).unwrap();
        pool.load_keys(GUID, keys(cipher));
        verify(&os, &w);
        // And it is writable again.
        let tx = pool.begin();
        os.write(&tx, w.file, 0, b"rewritten").unwrap();
        drop(tx);
        pool.sync().unwrap();
        assert_eq!(read_all(&os, w.file, 9), b"rewritten");
        assert!(pool.check().damaged.is_empty());
        pool.export().unwrap();
    }
}

#[test]
fn no_plaintext_of_an_encrypted_object_set_reaches_its_devices() {
    let devs = mem_devs(1, 256 << 20);
    let pool = create(&as_dyn(&devs), TopKind::Disk);
    let (_, os) = encrypted_objset(&pool);
    let w = write_content(&pool, &os);
    // Sync writes too: intent log blocks are sealed whole (the log test
    // below checks them after a crash, before any txg retires them).
    let tx = pool.begin();
    os.write(&tx, w.file, 4096, DATA_MARK).unwrap();
    let seq = os.log_append(&tx, 1, DATA_MARK).unwrap();
    drop(tx);
    os.log_commit(seq).unwrap();
    pool.export().unwrap();
    for mark in [DATA_MARK, BONUS_MARK, NAME_MARK, &[0x42u8; 32][..]] {
        assert!(!contains(&devs[0], mark), "{:?} found on the device", String::from_utf8_lossy(mark));
    }
}

/// Issue 12, test 3 (the block level): bits flipped in an encrypted data
/// block and in a sealed dnode block on every copy (a two-way mirror: both
/// sides), so no repair can hide it. Reads of that block fail with an I/O
/// error and count as data errors, never return wrong plaintext; every
/// other block still reads; the checker names the damage, without a key.
#[test]
fn tampered_encrypted_blocks_fail_their_reads_and_nothing_else() {
    let devs = mem_devs(2, 256 << 20);
    let pool = create(&as_dyn(&devs), TopKind::Mirror);
    let (id, os) = encrypted_objset(&pool);
    let w = write_content(&pool, &os);
    // A second small file in its own dnode block (ids 32 and up).
    let tx = pool.begin();
    let mut far = ObjectId(0);
    for _ in 0..40 {
        far = os.create(&tx, ObjType(19), 4096, &w.bonus).unwrap();
    }
    os.write(&tx, far, 0, b"far away").unwrap();
    drop(tx);
    pool.sync().unwrap();
    assert!(far.0 / 32 != w.file.0 / 32, "in another dnode block");
    let mut file_bp = None;
    os.for_each_object(&mut |oid, phys| {
        if oid == w.file {
            file_bp = Some(phys.bps[1]);
        }
    })
    .unwrap();
    let meta_bp = os.dnode_block_ptr(w.file.0 / 32).unwrap();
    let file_bp = file_bp.unwrap();
    assert!(file_bp.is_encrypted() && file_bp.level == 0);
    assert_ne!(meta_bp.flags & tarn_block::crypt::FLAG_PARTLY_SEALED, 0);
    pool.export().unwrap();
    drop((os, pool));

    let flip = |bp: &tarn_block::BlockPtr, at: u64| {
        for d in &devs {
            for dva in bp.dvas() {
                let off = tarn_vdev::DATA_START + dva.offset + at;
                let mut b = [0u8; 1];
                d.read_at(&mut b, off).unwrap();
                b[0] ^= 0x10;
                d.write_at(&b, off).unwrap();
            }
        }
    };
    // File block 1 (bytes 4096..8192 of `file`).
    flip(&file_bp, 100);
    let pool = import(as_dyn(&devs), false).unwrap();
    pool.load_keys(GUID, keys(Cipher::Aes256Gcm));
    let os = pool.open_objset(id).unwrap();
    let mut b = vec![0u8; 4096];
    let errors = pool.status().data_errors;
    assert!(os.read(w.file, 4096, &mut b).is_err(), "a damaged block read");
    assert!(b.iter().all(|&x| x == 0), "nothing of it handed back");
    assert!(pool.status().data_errors > errors, "counted as a data error");
    assert_eq!(read_all(&os, w.file, 4096), w.data[..4096], "the file's other blocks read");
    assert_eq!(read_all(&os, w.big, w.data.len()), w.data);
    // The checker (no key needed) names that object of that object set,
    // and nothing else.
    pool.unload_keys(GUID).unwrap();
    let damaged = pool.check().damaged;
    let want = format!("objset {} object {}: ", id.0, w.file.0);
    assert!(damaged.len() == 1 && damaged[0].starts_with(&want), "the checker reports {damaged:?}, not only {want:?}");
    pool.export().unwrap();
    drop((os, pool));

    // The dnode block holding `file`: its objects' attributes fail, the
    // far object's (another dnode block) do not.
    flip(&meta_bp, 3000);
    let pool = import(as_dyn(&devs), false).unwrap();
    pool.load_keys(GUID, keys(Cipher::Aes256Gcm));
    let os = pool.open_objset(id).unwrap();
    assert!(os.bonus(w.file).is_err(), "attributes from a damaged dnode block");
    assert!(os.read(w.big, 0, &mut b).is_err());
    assert_eq!(os.bonus(far).unwrap(), w.bonus);
    assert_eq!(read_all(&os, far, 8), b"far away");
    // The checker names the dnode block and the objects it holds (the
    // damaged data block of `file` is behind it now), and goes on to the
    // other dnode blocks: nothing else is reported damaged.
    let block = w.file.0 / 32;
    let damaged = pool.check().damaged;
    let want = format!("objset {} dnode block {block} (objects {}-{}): ", id.0, block * 32, block * 32 + 31);
    assert!(damaged.len() == 1 && damaged[0].starts_with(&want), "the checker reports {damaged:?}, not only {want:?}");
    pool.export().unwrap();
}

const LOG_MARK: &[u8] = b"LOG-MARK-9d41e0-a-record-of-an-fsync";

/// Commits `n` records (`i` then the marker) one by one.
fn commit_marked(pool: &ObjPool, os: &ObjectSet, from: u32, n: u32) {
    for i in from..from + n {
        let tx = pool.begin();
        let mut p = i.to_le_bytes().to_vec();
        p.extend_from_slice(LOG_MARK);
        let seq = os.log_append(&tx, REC, &p).unwrap();
        drop(tx);
        os.log_commit(seq).unwrap();
    }
}

fn replay_marked(os: &ObjectSet) -> Vec<u32> {
    let mut got = Vec::new();
    os.log_replay(&mut |_tx, rec| {
        assert_eq!(&rec.payload[4..], LOG_MARK);
        got.push(u32::from_le_bytes(rec.payload[..4].try_into().unwrap()));
        Ok(())
    })
    .unwrap();
    got
}

/// Issue 12, test 5 with the intent log: an encrypted object set's log
/// blocks are sealed. After a crash the import walks and claims the chain
/// without the key (the checker is clean), the replay waits for the key
/// (the chain is kept, not lost), and with the key every committed record
/// replays once, in order. A chain can also be given up unopened (what a
/// forced receive does). No record byte ever reaches the devices.
#[test]
fn an_encrypted_log_is_sealed_claimed_without_the_key_and_replayed_with_it() {
    let mem = mem_devs(2, 64 << 20);
    let pool = create(&as_dyn(&mem), TopKind::Mirror);
    quiet(&pool);
    let (id, os) = encrypted_objset(&pool);
    // The first commit waits for the txg naming the chain (which retires it).
    commit_marked(&pool, &os, 1000, 1);
    commit_marked(&pool, &os, 0, 20);
    assert!(os.log_stats().live_blocks > 0, "{:?}", os.log_stats());
    // Crash: no sync, no export.
    drop(os);
    drop(pool);
    for d in &mem {
        assert!(!contains(d, LOG_MARK), "a log record in the clear");
    }

    // Without the key: claimed, checked, kept.
    let pool = import(as_dyn(&mem), false).unwrap();
    let os = pool.open_objset(id).unwrap();
    assert!(os.log_awaits_replay());
    assert_eq!(os.log_stats().phase, tarn_obj::zil::LogPhase::Claimed);
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
    assert!(matches!(os.log_replay(&mut |_, _| Ok(())), Err(ObjError::KeyNotLoaded)));
    assert!(os.log_awaits_replay(), "a refused replay gave up the chain");
    pool.sync().unwrap();
    drop(os);
    drop(pool);

    // With the key: replayed once, in order; the log works again.
    let pool = import(as_dyn(&mem), false).unwrap();
    quiet(&pool);
    pool.load_keys(GUID, keys(Cipher::Aes256Gcm));
    let os = pool.open_objset(id).unwrap();
    assert_eq!(replay_marked(&os), (0..20).collect::<Vec<u32>>());
    assert!(!os.log_awaits_replay());
    assert_eq!(replay_marked(&os), Vec::<u32>::new());
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
    commit_marked(&pool, &os, 1000, 1);
    commit_marked(&pool, &os, 100, 3);
    drop(os);
    drop(pool);

    // A wrong key opens nothing: the replay ends the chain at its first
    // block (as a damaged block would), handing no record over.
    let pool = import(as_dyn(&mem), false).unwrap();
    quiet(&pool);
    pool.load_keys(GUID, Arc::new(BlockKeys::new(Cipher::Aes256Gcm, &MasterKey::from_bytes(&[0x43; 32])).unwrap()));
    let os = pool.open_objset(id).unwrap();
    assert!(os.log_replay(&mut |_, _| panic!("a record opened with the wrong key")).is_err(), "the root's MAC refuses the wrong key first");
    drop(os);
    drop(pool);

    // Given up unopened, without the key: the chain's space goes back.
    let pool = import(as_dyn(&mem), false).unwrap();
    let os = pool.open_objset(id).unwrap();
    assert!(os.log_awaits_replay());
    os.log_discard().unwrap();
    assert!(!os.log_awaits_replay());
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
    drop(os);
    drop(pool);
    let pool = import(as_dyn(&mem), false).unwrap();
    pool.load_keys(GUID, keys(Cipher::Aes256Gcm));
    let os = pool.open_objset(id).unwrap();
    assert!(!os.log_awaits_replay());
    assert_eq!(replay_marked(&os), Vec::<u32>::new());
    let r = pool.check();
    assert!(r.ok(), "{r:?}");
    for d in &mem {
        assert!(!contains(d, LOG_MARK), "a log record in the clear");
    }
}
