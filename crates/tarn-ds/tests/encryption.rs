//! Encrypted datasets at the dataset layer (issue 12, test 1's library
//! half): encryption roots with each keyformat and keylocation, children
//! inheriting the root, the encryption properties, wrong keys refused with
//! nothing changed, unload/load, change-key (rewrap only), clones, and
//! export/import with the keys unloaded. Test 2 for the keys themselves:
//! neither a master key nor a passphrase's wrapping key is on any device.

mod common;

use std::sync::Arc;

use tarn_dev::{Device, MemDevice};
use tarn_ds::Pool;
use tarn_keys::{Kdf, KeyFormat, KeyMaterial, WrappedKey, WrappingKey};
use tarn_obj::{ObjError, ObjType, ObjectId, BONUS_LEN};

fn get(pool: &Pool, name: &str, prop: &str) -> String {
    pool.get_property(name, prop, true, None).unwrap_or_else(|e| panic!("get {prop} of {name}: {e}")).value
}

fn err(r: tarn_ds::Result<impl std::fmt::Debug>) -> String {
    let e = r.expect_err("accepted").to_string();
    assert!(!e.contains('\n'), "multi-line error: {e}");
    e
}

fn opts(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn pass(p: &str) -> KeyMaterial {
    KeyMaterial::from_bytes(KeyFormat::Passphrase, p.as_bytes()).unwrap()
}

/// Writes a marker object into `name`'s object set; returns its id.
fn put(pool: &Pool, name: &str, what: &[u8]) -> ObjectId {
    let os = pool.objset(name).unwrap();
    let tx = pool.obj().begin();
    let id = os.create(&tx, ObjType(19), 4096, &[7u8; BONUS_LEN]).unwrap();
    os.write(&tx, id, 0, what).unwrap();
    drop(tx);
    pool.obj().sync().unwrap();
    id
}

fn read(pool: &Pool, name: &str, id: ObjectId, len: usize) -> Result<Vec<u8>, ObjError> {
    let os = pool.objset(name).unwrap();
    let mut b = vec![0u8; len];
    os.read(id, 0, &mut b)?;
    Ok(b)
}

#[test]
fn encryption_roots_children_and_the_key_lifecycle() {
    let devs = common::devices("enc", 256 << 20);
    let pool = common::create(&devs, "none");
    let dir = tempfile::tempdir().unwrap();
    let raw_path = dir.path().join("media.key");
    std::fs::write(&raw_path, [0x5au8; 32]).unwrap();
    let hex_path = dir.path().join("hex.key");
    std::fs::write(&hex_path, format!("{}\n", "ab".repeat(32))).unwrap();

    // A passphrase root (PBKDF2 at its floor, to keep the test quick), a raw
    // key from a file, a hex key from a file with AES-128.
    pool.create_dataset_keyed(
        "tank/secure",
        &opts(&[("encryption", "on"), ("keyformat", "passphrase"), ("pbkdf2iters", "100000")]),
        false,
        &common::no_init,
        Some(&pass("correct horse battery")),
    )
    .unwrap();
    let raw_loc = format!("file://{}", raw_path.display());
    pool.create_dataset("tank/media", &opts(&[("encryption", "aes-256-gcm"), ("keyformat", "raw"), ("keylocation", &raw_loc)]), false, &common::no_init)
        .unwrap();
    let hex_loc = format!("file://{}", hex_path.display());
    pool.create_dataset("tank/hex", &opts(&[("encryption", "aes-128-gcm"), ("keyformat", "hex"), ("keylocation", &hex_loc)]), false, &common::no_init)
        .unwrap();
    // Children inherit the root; -p parents too.
    pool.create_dataset("tank/secure/docs/deep", &[], true, &common::no_init).unwrap();
    pool.create_dataset("tank/plain", &[], false, &common::no_init).unwrap();

    let expect = [
        ("tank/secure", ["aes-256-gcm", "passphrase", "prompt", "100000", "tank/secure", "available"]),
        ("tank/secure/docs", ["aes-256-gcm", "passphrase", "none", "0", "tank/secure", "available"]),
        ("tank/secure/docs/deep", ["aes-256-gcm", "passphrase", "none", "0", "tank/secure", "available"]),
        ("tank/media", ["aes-256-gcm", "raw", raw_loc.as_str(), "0", "tank/media", "available"]),
        ("tank/hex", ["aes-128-gcm", "hex", hex_loc.as_str(), "0", "tank/hex", "available"]),
        ("tank/plain", ["off", "none", "none", "0", "-", "-"]),
    ];
    for (name, values) in &expect {
        for (prop, want) in ["encryption", "keyformat", "keylocation", "pbkdf2iters", "encryptionroot", "keystatus"].iter().zip(values) {
            let got = get(&pool, name, prop);
            // Children show keyformat "passphrase" from their root's key.
            if *prop == "pbkdf2iters" && *name != "tank/secure" {
                continue;
            }
            assert_eq!(&got, want, "{prop} of {name}");
        }
    }
    // `get all` shows every property and nothing of the key.
    let all: Vec<String> = tarn_ds::props::PROPERTIES.iter().map(|d| get(&pool, "tank/secure", d.name)).collect();
    assert!(all.iter().all(|v| !v.contains("correct horse")));

    let docs = put(&pool, "tank/secure/docs", b"the docs");
    let media = put(&pool, "tank/media", b"the media");
    let hex = put(&pool, "tank/hex", b"the hex");

    // Bad requests: one line, nothing created.
    for (name, props, why) in [
        ("tank/secure/off", vec![("encryption", "off")], "unencrypted dataset cannot be created under encrypted"),
        ("tank/x", vec![("encryption", "on")], "encryption needs keyformat"),
        ("tank/x", vec![("keylocation", "prompt")], "need keyformat"),
        ("tank/x", vec![("encryption", "aes-256-ccm"), ("keyformat", "raw")], "invalid encryption"),
        ("tank/x", vec![("encryption", "on"), ("keyformat", "raw"), ("keylocation", "file://relative")], "absolute"),
        ("tank/x", vec![("encryption", "on"), ("keyformat", "passphrase"), ("pbkdf2iters", "1000")], "pbkdf2iters must be between"),
        ("tank/x", vec![("encryption", "on"), ("keyformat", "passphrase")], "keylocation=prompt and no key"),
        ("tank/x", vec![("encryption", "on"), ("keyformat", "raw"), ("keylocation", "file:///nonexistent/k")], "No such file"),
        ("tank/x", vec![("encryption", "on"), ("keyformat", "raw"), ("keylocation", raw_loc.as_str()), ("copies", "3")], "copies=3 is not possible with encryption"),
        ("tank/secure/x", vec![("copies", "3")], "copies=3 is not possible with encryption"),
        ("tank/secure/y/z", vec![("copies", "3")], "copies=3 is not possible with encryption"),
    ] {
        let e = err(pool.create_dataset(name, &opts(&props), false, &common::no_init));
        assert!(e.contains(why), "{name} {props:?}: {e}");
        assert!(!pool.exists(name));
    }
    let e = err(pool.create_dataset_keyed("tank/x", &opts(&[("encryption", "on"), ("keyformat", "raw")]), false, &common::no_init, Some(&pass("a passphrase"))));
    assert!(e.contains("keyformat is raw"), "{e}");
    assert!(err(pool.set_property("tank/secure/docs", "copies", "3")).contains("copies=3 is not possible with encryption"));
    pool.set_property("tank/secure/docs", "copies", "2").unwrap();
    pool.set_property("tank/plain", "copies", "3").unwrap();
    pool.inherit_property("tank/plain", "copies", false).unwrap();
    for prop in ["encryption", "keyformat", "pbkdf2iters", "keystatus", "encryptionroot"] {
        let e = err(pool.set_property("tank/secure", prop, "off"));
        assert!(e.contains("read-only") || e.contains("readonly"), "{prop}: {e}");
    }
    assert!(err(pool.load_key("tank/secure/docs", None, None, false)).contains("not an encryption root"));
    assert!(err(pool.load_key("tank/plain", None, None, false)).contains("not encrypted"));
    assert!(err(pool.load_key("tank/secure", Some(&pass("correct horse battery")), None, false)).contains("already loaded"));

    // Unload: every dataset of the root refuses; the others do not care.
    pool.unload_key("tank/secure").unwrap();
    for name in ["tank/secure", "tank/secure/docs", "tank/secure/docs/deep"] {
        assert_eq!(get(&pool, name, "keystatus"), "unavailable", "{name}");
    }
    assert!(matches!(read(&pool, "tank/secure/docs", docs, 8), Err(ObjError::KeyNotLoaded)));
    assert_eq!(read(&pool, "tank/media", media, 9).unwrap(), b"the media");
    // Without the key: snapshots are taken and datasets destroyed (as in
    // zfs), and the pool stays consistent.
    pool.snapshot(&["tank/secure/docs@nokey".into()]).unwrap();
    pool.destroy_dataset("tank/secure/docs/deep", false).unwrap();
    assert!(pool.obj().check().ok(), "{:?}", pool.obj().check());
    assert!(err(pool.create_dataset("tank/secure/new", &[], false, &common::no_init)).contains("is not loaded"));
    assert!(err(pool.unload_key("tank/secure")).contains("already unloaded"));
    // Wrong key: refused, nothing loaded; -n checks only.
    let e = err(pool.load_key("tank/secure", Some(&pass("wrong horse battery")), None, false));
    assert!(e.contains("incorrect key"), "{e}");
    assert_eq!(get(&pool, "tank/secure/docs", "keystatus"), "unavailable");
    pool.load_key("tank/secure", Some(&pass("correct horse battery")), None, true).unwrap();
    assert_eq!(get(&pool, "tank/secure/docs", "keystatus"), "unavailable", "-n loads nothing");
    assert!(err(pool.load_key("tank/secure", None, None, false)).contains("prompt"));
    pool.load_key("tank/secure", Some(&pass("correct horse battery")), None, false).unwrap();
    assert_eq!(read(&pool, "tank/secure/docs", docs, 8).unwrap(), b"the docs");
    pool.clone_snapshot("tank/secure/docs@nokey", "tank/secure/nokeyclone", &[]).unwrap();
    assert_eq!(read(&pool, "tank/secure/nokeyclone", docs, 8).unwrap(), b"the docs", "the snapshot taken without the key");

    // change-key: the old passphrase stops working, the data is not rewritten.
    let used_before = pool.obj().check().allocated_bytes;
    pool.change_key("tank/secure", None, None, None, Some(&pass("new passphrase here"))).unwrap();
    assert_eq!(get(&pool, "tank/secure", "pbkdf2iters"), "0", "argon2id by default");
    pool.unload_key("tank/secure").unwrap();
    assert!(err(pool.load_key("tank/secure", Some(&pass("correct horse battery")), None, false)).contains("incorrect key"));
    pool.load_key("tank/secure", Some(&pass("new passphrase here")), None, false).unwrap();
    assert_eq!(read(&pool, "tank/secure/docs", docs, 8).unwrap(), b"the docs");
    assert!(pool.obj().check().allocated_bytes <= used_before + (1 << 20), "change-key rewrote data");
    // To a raw key file, then keylocation moved with `set`.
    pool.change_key("tank/secure", Some(KeyFormat::Raw), Some(raw_loc.parse().unwrap()), None, None).unwrap();
    assert_eq!(get(&pool, "tank/secure", "keyformat"), "raw");
    let moved = dir.path().join("moved.key");
    std::fs::copy(&raw_path, &moved).unwrap();
    pool.set_property("tank/secure", "keylocation", &format!("file://{}", moved.display())).unwrap();
    assert!(err(pool.set_property("tank/secure/docs", "keylocation", "prompt")).contains("not an encryption root"));

    // Clones share their origin's key and root.
    pool.snapshot(&["tank/secure/docs@s".into()]).unwrap();
    pool.clone_snapshot("tank/secure/docs@s", "tank/secure/copy", &[]).unwrap();
    assert_eq!(get(&pool, "tank/secure/copy", "encryptionroot"), "tank/secure");
    assert_eq!(read(&pool, "tank/secure/copy", docs, 8).unwrap(), b"the docs");
    assert_eq!(get(&pool, "tank/secure/docs@s", "encryption"), "aes-256-gcm");

    // Export/import: every key unloaded; loaded again from the files.
    let pool = common::reimport(pool, &devs);
    for name in ["tank/secure", "tank/secure/docs", "tank/media", "tank/hex", "tank/secure/copy"] {
        assert_eq!(get(&pool, name, "keystatus"), "unavailable", "{name}");
    }
    assert!(matches!(read(&pool, "tank/media", media, 9), Err(ObjError::KeyNotLoaded)));
    pool.load_key("tank/secure", None, None, false).unwrap();
    pool.load_key("tank/media", None, None, false).unwrap();
    pool.load_key("tank/hex", None, None, false).unwrap();
    assert_eq!(read(&pool, "tank/secure/docs", docs, 8).unwrap(), b"the docs");
    assert_eq!(read(&pool, "tank/secure/copy", docs, 8).unwrap(), b"the docs");
    assert_eq!(read(&pool, "tank/media", media, 9).unwrap(), b"the media");
    assert_eq!(read(&pool, "tank/hex", hex, 7).unwrap(), b"the hex");
    // Another key file for -L.
    pool.unload_key("tank/media").unwrap();
    let e = err(pool.load_key("tank/media", None, Some(&format!("file://{}", hex_path.display()).parse().unwrap()), false));
    assert!(e.contains("raw key must be 32 bytes"), "{e}");
}

/// `change-key` on a dataset that is not an encryption root makes it one
/// (with the descendants that shared its root); `change-key -i` puts an
/// encryption root back under its parent's. Keys are only rewrapped: no
/// block is rewritten, and each key opens exactly what it should.
#[test]
fn change_key_makes_a_new_root_and_inherit_joins_the_parent() {
    let devs = common::devices("enc-move", 128 << 20);
    let pool = common::create(&devs, "none");
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("a.key");
    std::fs::write(&key_path, [0x33u8; 32]).unwrap();
    let key_loc = format!("file://{}", key_path.display());
    let secret = || pass("correct horse battery");
    let secure = opts(&[("encryption", "on"), ("keyformat", "passphrase"), ("pbkdf2iters", "100000")]);
    pool.create_dataset_keyed("tank/secure", &secure, false, &common::no_init, Some(&secret())).unwrap();
    pool.create_dataset("tank/secure/a/b", &[], true, &common::no_init).unwrap();
    pool.create_dataset("tank/secure/c", &[], false, &common::no_init).unwrap();
    let a = put(&pool, "tank/secure/a", b"data of a");
    let b = put(&pool, "tank/secure/a/b", b"data of b");
    let c = put(&pool, "tank/secure/c", b"data of c");
    let used = pool.obj().check().allocated_bytes;

    // tank/secure/a becomes a root of its own, with a raw key in a file.
    assert!(err(pool.change_key_inherit("tank/secure/a")).contains("not an encryption root"));
    pool.change_key("tank/secure/a", Some(KeyFormat::Raw), Some(key_loc.parse().unwrap()), None, None).unwrap();
    for (name, root) in [("tank/secure/a", "tank/secure/a"), ("tank/secure/a/b", "tank/secure/a"), ("tank/secure/c", "tank/secure")] {
        assert_eq!(get(&pool, name, "encryptionroot"), root, "{name}");
    }
    assert_eq!(get(&pool, "tank/secure/a", "keyformat"), "raw");
    assert_eq!(get(&pool, "tank/secure/a", "keylocation"), key_loc);
    assert_eq!(get(&pool, "tank/secure/a/b", "keylocation"), "none");
    pool.unload_key("tank/secure").unwrap();
    assert_eq!(read(&pool, "tank/secure/a/b", b, 9).unwrap(), b"data of b", "a's key stays loaded without its old root's");
    assert!(matches!(read(&pool, "tank/secure/c", c, 9), Err(ObjError::KeyNotLoaded)));
    let pool = common::reimport(pool, &devs);
    pool.load_key("tank/secure/a", None, None, false).unwrap();
    assert_eq!(read(&pool, "tank/secure/a", a, 9).unwrap(), b"data of a");
    assert_eq!(read(&pool, "tank/secure/a/b", b, 9).unwrap(), b"data of b");
    assert!(matches!(read(&pool, "tank/secure/c", c, 9), Err(ObjError::KeyNotLoaded)), "the file key opens a's tree only");

    // -i: back under tank/secure, once its key is loaded too.
    assert!(err(pool.change_key_inherit("tank/secure/a")).contains("key for 'tank/secure' is not loaded"));
    assert!(err(pool.change_key_inherit("tank/secure")).contains("parent 'tank' is not encrypted"));
    assert!(err(pool.change_key_inherit("tank")).contains("not encrypted"));
    pool.load_key("tank/secure", Some(&secret()), None, false).unwrap();
    pool.change_key_inherit("tank/secure/a").unwrap();
    for name in ["tank/secure/a", "tank/secure/a/b", "tank/secure/c"] {
        assert_eq!(get(&pool, name, "encryptionroot"), "tank/secure", "{name}");
        assert_eq!(get(&pool, name, "keystatus"), "available", "{name}");
    }
    assert_eq!(get(&pool, "tank/secure/a", "keylocation"), "none");
    assert!(err(pool.load_key("tank/secure/a", None, None, false)).contains("not an encryption root"));
    let pool = common::reimport(pool, &devs);
    assert!(err(pool.load_key("tank/secure", Some(&pass("not the passphrase")), None, false)).contains("incorrect key"));
    pool.load_key("tank/secure", Some(&secret()), None, false).unwrap();
    for (name, id, what) in [("tank/secure/a", a, &b"data of a"[..]), ("tank/secure/a/b", b, b"data of b"), ("tank/secure/c", c, b"data of c")] {
        assert_eq!(read(&pool, name, id, 9).unwrap(), what, "{name}");
    }
    // A clone outside its root's tree (under an unencrypted parent) is in
    // that root all the same: a new key of the root opens it too.
    pool.snapshot(&["tank/secure/c@s".into()]).unwrap();
    pool.clone_snapshot("tank/secure/c@s", "tank/outside", &[]).unwrap();
    assert_eq!(get(&pool, "tank/outside", "encryptionroot"), "tank/secure");
    pool.change_key("tank/secure", None, None, None, Some(&pass("another passphrase"))).unwrap();
    let pool = common::reimport(pool, &devs);
    pool.load_key("tank/secure", Some(&pass("another passphrase")), None, false).unwrap();
    assert_eq!(read(&pool, "tank/outside", c, 9).unwrap(), b"data of c");
    let check = pool.obj().check();
    assert!(check.ok(), "{check:?}");
    assert!(check.allocated_bytes <= used + (1 << 20), "change-key rewrote data: {used} -> {}", check.allocated_bytes);
}

fn unhex(text: &str) -> Vec<u8> {
    assert!(text.len().is_multiple_of(2), "odd hex");
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex")).collect()
}

/// Which of `needles` (label, bytes) are anywhere on `dev`: its non-zero
/// 4 KiB pages are searched in runs, each run widened by a page on both
/// sides (a needle may end in zeros or begin after them).
fn found_on(dev: &MemDevice, needles: &[(&str, &[u8])]) -> Vec<String> {
    const PAGE: usize = 4096;
    let size = dev.size() as usize;
    let mut data = vec![0u8; size];
    dev.read_at(&mut data, 0).unwrap();
    let nonzero: Vec<bool> = data.chunks(PAGE).map(|p| p.iter().any(|b| *b != 0)).collect();
    let mut found = Vec::new();
    let mut p = 0;
    while p < nonzero.len() {
        if !nonzero[p] {
            p += 1;
            continue;
        }
        let start = p;
        while p < nonzero.len() && nonzero[p] {
            p += 1;
        }
        let run = &data[start.saturating_sub(1) * PAGE..((p + 1) * PAGE).min(size)];
        for (label, needle) in needles {
            if !found.iter().any(|f| f == label) && run.windows(needle.len()).any(|w| w == *needle) {
                found.push(label.to_string());
            }
        }
    }
    found
}

/// Issue 12, test 2, the keys themselves: a passphrase root with a known
/// PBKDF2 cost and a child of it each get a master key, wrapped by the
/// root's wrapping key. The test reads the wrapped blobs from the dataset
/// records, derives the wrapping key from the passphrase (tarn-keys, with
/// the salt and cost the blob names) and unwraps both master keys; block
/// keys made from the unwrapped master keys read the data back (so these
/// are the keys in use). After writing and exporting, no byte string of
/// either master key, of the wrapping key or of the passphrase is on any
/// device. The control: each key, planted on a device, is found by the
/// same scan.
#[test]
fn no_master_key_and_no_wrapping_key_on_the_devices() {
    const PHRASE: &str = "a passphrase only this test knows";
    const MARK: &[u8] = b"KEYS-TEST-MARKER-plaintext-never-on-disk";
    let devs = common::devices("keys", 128 << 20);
    let pool = common::create(&devs, "none");
    let props = opts(&[("encryption", "on"), ("keyformat", "passphrase"), ("pbkdf2iters", "123456")]);
    pool.create_dataset_keyed("tank/secure", &props, false, &common::no_init, Some(&pass(PHRASE))).unwrap();
    pool.create_dataset("tank/secure/child", &[], false, &common::no_init).unwrap();
    let root_obj = put(&pool, "tank/secure", &MARK.repeat(100));
    let child_obj = put(&pool, "tank/secure/child", &MARK.repeat(3));

    // The wrapped keys as stored, and what opens them.
    let crypt = |name: &str| pool.record(name).unwrap().crypt.unwrap_or_else(|| panic!("{name} has no key record"));
    let (root_crypt, child_crypt) = (crypt("tank/secure"), crypt("tank/secure/child"));
    let root_blob = WrappedKey::decode(&unhex(&root_crypt.wrapped)).unwrap();
    let child_blob = WrappedKey::decode(&unhex(&child_crypt.wrapped)).unwrap();
    assert_eq!(root_blob.kdf(), Kdf::Pbkdf2Sha512 { iters: 123_456 }, "the cost asked for is the cost stored");
    assert_eq!((child_blob.kdf(), child_blob.salt()), (root_blob.kdf(), root_blob.salt()), "the child is wrapped by its root's key");
    let wrapping = WrappingKey::for_wrapped(&root_blob, &pass(PHRASE)).unwrap();
    let root_master = tarn_keys::unwrap_with(&root_blob, &wrapping, &root_crypt.key_guid.to_le_bytes()).unwrap();
    let child_master = tarn_keys::unwrap_with(&child_blob, &wrapping, &child_crypt.key_guid.to_le_bytes()).unwrap();
    assert_ne!(root_master.bytes(), child_master.bytes(), "a master key per dataset");
    assert!(tarn_keys::unwrap_with(&root_blob, &wrapping, &child_crypt.key_guid.to_le_bytes()).is_err(), "bound to its key guid");
    let secrets: [(&str, Vec<u8>); 4] = [
        ("the root's master key", root_master.bytes().to_vec()),
        ("the child's master key", child_master.bytes().to_vec()),
        ("the wrapping key", wrapping.key().to_vec()),
        ("the passphrase", PHRASE.as_bytes().to_vec()),
    ];
    let pool = common::reimport(pool, &devs);
    pool.obj().export().unwrap();
    drop(pool);
    let mut needles: Vec<(&str, &[u8])> = secrets.iter().map(|(what, bytes)| (*what, &bytes[..])).collect();
    needles.push(("the data's plaintext", MARK));
    for (i, dev) in devs.iter().enumerate() {
        let found = found_on(dev, &needles);
        assert!(found.is_empty(), "on device {i}: {found:?}");
    }

    // The keys are the ones in use: block keys made from the unwrapped
    // master keys (no load-key) read the data.
    let pool = common::import(&devs);
    for (name, crypt, master, id, len) in [
        ("tank/secure", &root_crypt, &root_master, root_obj, MARK.len() * 100),
        ("tank/secure/child", &child_crypt, &child_master, child_obj, MARK.len() * 3),
    ] {
        assert!(matches!(read(&pool, name, id, len), Err(ObjError::KeyNotLoaded)));
        let cipher = tarn_block::Cipher::parse(&crypt.cipher).unwrap();
        pool.obj().load_keys(crypt.key_guid, Arc::new(tarn_block::BlockKeys::new(cipher, master).unwrap()));
        assert_eq!(read(&pool, name, id, len).unwrap(), MARK.repeat(len / MARK.len()), "{name} with its unwrapped master key");
    }
    pool.obj().export().unwrap();
    drop(pool);

    // The control: each secret planted on a device (in the middle of
    // device 1, at an odd offset) is found there.
    for (i, (_, bytes)) in secrets.iter().enumerate() {
        devs[1].write_at(bytes, (64 << 20) + 4096 * i as u64 + 1001).unwrap();
    }
    let planted: Vec<&str> = secrets.iter().map(|(what, _)| *what).collect();
    assert_eq!(found_on(&devs[1], &needles), planted, "the scan finds what was planted on device 1");
    assert!(found_on(&devs[2], &needles).is_empty());
}
