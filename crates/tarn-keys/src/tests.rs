//! Tests that need the crate's insides (the wrapping key's bytes).

use crate::*;

/// Whether any 8-byte piece of `needle` appears in `haystack`.
fn holds_any_piece(haystack: &[u8], needle: &[u8]) -> bool {
    needle.windows(8.min(needle.len())).any(|piece| haystack.windows(piece.len()).any(|w| w == piece))
}

#[test]
fn encoded_blob_holds_no_key_material() {
    let passphrase: &[u8] = b"a passphrase nobody guesses 4711";
    let hex: &[u8] = b"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let raw: [u8; 32] = std::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(11));
    let cases = [
        (KeyFormat::Passphrase, passphrase, Kdf::Argon2id { m_kib: 64, t: 1, p: 1 }),
        (KeyFormat::Passphrase, passphrase, Kdf::Pbkdf2Sha512 { iters: 1000 }),
        (KeyFormat::Hex, hex, Kdf::None),
        (KeyFormat::Raw, &raw[..], Kdf::None),
    ];
    for (format, input, kdf) in cases {
        for _ in 0..20 {
            let material = KeyMaterial::from_bytes(format, input).expect("material");
            let wrapping = WrappingKey::new(&material, kdf).expect("wrapping key");
            let master = MasterKey::generate().expect("master");
            let blob = wrap(&master, &wrapping, b"tank/secure").expect("wrap").encode();
            assert_eq!(blob.len(), WRAPPED_KEY_LEN);
            // The test's own search must be able to fail.
            assert!(holds_any_piece(&blob, &blob[40..60]));
            assert!(!holds_any_piece(&blob, master.bytes()), "{format} {kdf:?}: master key in the blob");
            assert!(!holds_any_piece(&blob, wrapping.key()), "{format} {kdf:?}: wrapping key in the blob");
            assert!(!holds_any_piece(&blob, input), "{format} {kdf:?}: user's key in the blob");
            assert!(!holds_any_piece(&blob, material.bytes()), "{format} {kdf:?}: material in the blob");
            // Nor does the decoded value's Debug output.
            let shown = format!("{:?} {material:?} {wrapping:?} {master:?}", WrappedKey::decode(&blob).expect("decode"));
            for secret in [&master.bytes()[..], wrapping.key(), input] {
                let as_list = format!("{:?}", &secret[..8]);
                assert!(!shown.contains(&as_list[1..as_list.len() - 1]), "Debug shows key bytes: {shown}");
            }
            assert!(!shown.contains(std::str::from_utf8(&passphrase[..8]).expect("ascii")));
        }
    }
}

#[test]
fn hex_material_decodes_to_the_key_it_spells() {
    let material = KeyMaterial::from_bytes(
        KeyFormat::Hex,
        b"00112233445566778899AABBCCDDEEFF00112233445566778899aabbccddeeff\n",
    )
    .expect("hex");
    let expected: Vec<u8> = (0..32).map(|i| ((i % 16) as u8) * 0x11).collect();
    assert_eq!(material.bytes(), expected.as_slice());
    // A raw key of the same bytes is the same wrapping key, but the blob
    // records the format: a hex-made blob does not open with raw material.
    let raw = KeyMaterial::from_bytes(KeyFormat::Raw, &expected).expect("raw");
    assert_eq!(
        WrappingKey::new(&raw, Kdf::None).expect("raw").key(),
        WrappingKey::new(&material, Kdf::None).expect("hex").key()
    );
}

#[test]
fn passphrase_from_a_file_loses_one_trailing_newline_only() {
    let one = KeyMaterial::from_bytes(KeyFormat::Passphrase, b"12345678\n").expect("phrase");
    assert_eq!(one.bytes(), b"12345678");
    let two = KeyMaterial::from_bytes(KeyFormat::Passphrase, b"12345678\n\n").expect("phrase");
    assert_eq!(two.bytes(), b"12345678\n");
    let spaces = KeyMaterial::from_bytes(KeyFormat::Passphrase, b" 1234567 ").expect("phrase");
    assert_eq!(spaces.bytes(), b" 1234567 ");
}
