//! Wrap, unwrap and rewrap through the public API, with the default KDF
//! costs (what users get), for every keyformat and KDF.

use tarn_keys::{rewrap, unwrap, wrap, Kdf, KeyError, KeyFormat, KeyMaterial, MasterKey, WrappedKey, WrappingKey};

const ROOT: &[u8] = b"pool 0x1f2e3d4c dataset 0x77 (tank/secure)";

fn material(format: KeyFormat, input: &[u8]) -> KeyMaterial {
    KeyMaterial::from_bytes(format, input).unwrap_or_else(|e| panic!("{format}: {e}"))
}

/// (format, the user's key, a wrong key of the same format, kdf)
fn cases() -> Vec<(KeyFormat, Vec<u8>, Vec<u8>, Kdf)> {
    let hex = b"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".to_vec();
    let mut wrong_hex = hex.clone();
    wrong_hex[63] = b'9';
    let raw: Vec<u8> = (0..32).map(|i| (i * 7 + 3) as u8).collect();
    let mut wrong_raw = raw.clone();
    wrong_raw[0] ^= 0x80;
    vec![
        (KeyFormat::Passphrase, b"hunter2 but longer".to_vec(), b"hunter2 but longeR".to_vec(), Kdf::ARGON2ID_DEFAULT),
        (KeyFormat::Passphrase, b"hunter2 but longer".to_vec(), b"hunter2 but longer ".to_vec(), Kdf::PBKDF2_DEFAULT),
        (KeyFormat::Hex, hex, wrong_hex, Kdf::None),
        (KeyFormat::Raw, raw, wrong_raw, Kdf::None),
    ]
}

#[test]
fn every_format_and_kdf_round_trips_and_refuses_wrong_keys_and_roots() {
    for (format, key, wrong, kdf) in cases() {
        let master = MasterKey::generate().expect("master");
        let wrapping = WrappingKey::new(&material(format, &key), kdf).expect("wrapping key");
        assert_eq!(wrapping.kdf(), kdf);
        let blob = wrap(&master, &wrapping, ROOT).expect("wrap").encode();

        let decoded = WrappedKey::decode(&blob).expect("decode");
        assert_eq!(decoded.format(), format);
        assert_eq!(decoded.kdf(), kdf);
        assert_eq!(decoded.encode(), blob, "encode(decode(x)) == x");
        let opened = unwrap(&decoded, &material(format, &key), ROOT).expect("unwrap with the right key");
        assert_eq!(opened.bytes(), master.bytes(), "{format} {kdf:?}");

        let err = unwrap(&decoded, &material(format, &wrong), ROOT).expect_err("wrong key");
        assert!(matches!(err, KeyError::WrongKey), "{format}: {err}");
        assert_eq!(err.to_string(), "incorrect key provided");
        for other_root in [&b"pool 0x1f2e3d4c dataset 0x78 (tank/secure)"[..], b"", &ROOT[..ROOT.len() - 1]] {
            let err = unwrap(&decoded, &material(format, &key), other_root).expect_err("wrong AAD");
            assert!(matches!(err, KeyError::WrongKey), "{format}: {err}");
        }
    }
}

#[test]
fn wrapping_twice_gives_different_blobs_of_the_same_key() {
    let master = MasterKey::generate().expect("master");
    let raw = [5u8; 32];
    let wrapping = WrappingKey::new(&material(KeyFormat::Raw, &raw), Kdf::None).expect("wrapping key");
    let a = wrap(&master, &wrapping, ROOT).expect("wrap");
    let b = wrap(&master, &wrapping, ROOT).expect("wrap");
    assert_ne!(a.encode(), b.encode(), "a fresh nonce per seal");
    for blob in [a, b] {
        assert_eq!(unwrap(&blob, &material(KeyFormat::Raw, &raw), ROOT).expect("unwrap").bytes(), master.bytes());
    }
}

#[test]
fn rewrap_keeps_the_master_key_and_retires_the_old_material() {
    let master = MasterKey::generate().expect("master");
    let all = cases();
    // Walk every format → every other format (and to itself: a new salt
    // or a new raw key), as `change-key -o keyformat=...` would.
    let (mut format, mut key, _, kdf) = all[0].clone();
    let mut blob = wrap(&master, &WrappingKey::new(&material(format, &key), kdf).expect("wrap key"), ROOT).expect("wrap");
    let mut steps = 0;
    for (next_format, next_key, next_wrong, next_kdf) in all.iter().cycle().skip(1).take(6) {
        // A same-format change needs a different key to show the old one
        // stops working; use a variant of the next key.
        let mut next_key = next_key.clone();
        if *next_format == format && next_key == key {
            next_key[3] ^= 0x01;
        }
        let new_wrapping = WrappingKey::new(&material(*next_format, &next_key), *next_kdf).expect("new wrapping key");
        let new_blob = rewrap(&blob, &material(format, &key), ROOT, &new_wrapping).expect("rewrap");
        assert_eq!(new_blob.format(), *next_format);
        let decoded = WrappedKey::decode(&new_blob.encode()).expect("decode");
        let opened = unwrap(&decoded, &material(*next_format, &next_key), ROOT).expect("new key opens");
        assert_eq!(opened.bytes(), master.bytes(), "same master key after rewrap");
        // The old material no longer opens it: wrong format, or wrong key.
        match unwrap(&decoded, &material(format, &key), ROOT) {
            Err(KeyError::WrongKey) => assert_eq!(format, *next_format),
            Err(KeyError::FormatMismatch { given, expected }) => {
                assert_eq!((given, expected), (format, *next_format));
            }
            other => panic!("old material after rewrap: {other:?}"),
        }
        // Rewrapping with the wrong old key is refused and changes nothing.
        let err = rewrap(&decoded, &material(*next_format, next_wrong), ROOT, &new_wrapping).expect_err("wrong old key");
        assert!(matches!(err, KeyError::WrongKey), "{err}");
        (format, key, blob) = (*next_format, next_key, decoded);
        steps += 1;
    }
    assert_eq!(steps, 6);
}

#[test]
fn material_of_another_format_is_refused_before_any_kdf_work() {
    let master = MasterKey::generate().expect("master");
    let phrase = material(KeyFormat::Passphrase, b"twelve chars");
    let blob = wrap(&master, &WrappingKey::new(&phrase, Kdf::Pbkdf2Sha512 { iters: 1000 }).expect("wk"), ROOT)
        .expect("wrap");
    let hex = material(KeyFormat::Hex, &[b'a'; 64]);
    let err = unwrap(&blob, &hex, ROOT).expect_err("hex for a passphrase blob");
    assert_eq!(err.to_string(), "key is keyformat=hex, but the wrapped key needs keyformat=passphrase");
}

#[test]
fn unwrap_with_a_wrapping_key_made_for_another_blob_is_a_wrong_key() {
    let master = MasterKey::generate().expect("master");
    let phrase = material(KeyFormat::Passphrase, b"twelve chars");
    let kdf = Kdf::Argon2id { m_kib: 64, t: 1, p: 1 };
    let first = WrappingKey::new(&phrase, kdf).expect("wk");
    let second = WrappingKey::new(&phrase, kdf).expect("wk");
    let blob = wrap(&master, &first, ROOT).expect("wrap");
    let err = tarn_keys::unwrap_with(&blob, &second, ROOT).expect_err("other salt");
    assert!(matches!(err, KeyError::WrongKey));
    let again = WrappingKey::for_wrapped(&blob, &phrase).expect("derive for the blob");
    assert_eq!(tarn_keys::unwrap_with(&blob, &again, ROOT).expect("unwrap").bytes(), master.bytes());
}
