//! Key material checks and key files: each refusal's exact one-line text.

use tarn_keys::{KeyError, KeyFormat, KeyLocation, KeyMaterial, KEY_FILE_MAX};

fn refused(format: KeyFormat, input: &[u8]) -> String {
    let err = KeyMaterial::from_bytes(format, input).expect_err("must be refused");
    let text = err.to_string();
    assert!(!text.contains('\n'), "one line: {text:?}");
    text
}

#[test]
fn bad_material_is_refused_with_exact_messages() {
    let cases: Vec<(KeyFormat, Vec<u8>, &str)> = vec![
        (KeyFormat::Raw, vec![1; 17], "raw key must be 32 bytes, got 17"),
        (KeyFormat::Raw, vec![], "raw key must be 32 bytes, got 0"),
        (KeyFormat::Raw, [vec![1; 32], b"\n".to_vec()].concat(), "raw key must be 32 bytes, got 33"),
        (KeyFormat::Hex, vec![b'a'; 63], "hex key must be 64 hex digits, got 63 characters"),
        (KeyFormat::Hex, vec![b'a'; 65], "hex key must be 64 hex digits, got 65 characters"),
        (KeyFormat::Hex, [vec![b'a'; 64], b"\n\n".to_vec()].concat(), "hex key must be 64 hex digits, got 65 characters"),
        (KeyFormat::Hex, [vec![b'a'; 64], b"\r\n".to_vec()].concat(), "hex key must be 64 hex digits, got 65 characters"),
        (KeyFormat::Hex, [b"g".to_vec(), vec![b'a'; 63]].concat(), "hex key must be 64 hex digits, character 1 is not one"),
        (KeyFormat::Hex, [vec![b'0'; 40], b" ".to_vec(), vec![b'0'; 23]].concat(), "hex key must be 64 hex digits, character 41 is not one"),
        (KeyFormat::Hex, [vec![b'0'; 63], b"x".to_vec()].concat(), "hex key must be 64 hex digits, character 64 is not one"),
        (KeyFormat::Passphrase, b"1234567".to_vec(), "passphrase must be at least 8 bytes, got 7"),
        (KeyFormat::Passphrase, b"1234567\n".to_vec(), "passphrase must be at least 8 bytes, got 7"),
        (KeyFormat::Passphrase, b"".to_vec(), "passphrase must be at least 8 bytes, got 0"),
        (KeyFormat::Passphrase, vec![b'p'; 513], "passphrase must be at most 512 bytes, got 513"),
    ];
    for (format, input, message) in cases {
        assert_eq!(refused(format, &input), message, "{format} {:?}", String::from_utf8_lossy(&input));
    }
}

#[test]
fn good_material_at_the_edges_is_taken() {
    let good: Vec<(KeyFormat, Vec<u8>)> = vec![
        (KeyFormat::Raw, vec![b'\n'; 32]),
        (KeyFormat::Hex, vec![b'F'; 64]),
        (KeyFormat::Hex, [vec![b'0'; 64], b"\n".to_vec()].concat()),
        (KeyFormat::Passphrase, vec![b'p'; 8]),
        (KeyFormat::Passphrase, vec![b'p'; 512]),
        (KeyFormat::Passphrase, [vec![b'p'; 512], b"\n".to_vec()].concat()),
        (KeyFormat::Passphrase, "pässphräse with ünïcode".as_bytes().to_vec()),
    ];
    for (format, input) in good {
        let material = KeyMaterial::from_bytes(format, &input).unwrap_or_else(|e| panic!("{format}: {e}"));
        assert_eq!(material.format(), format);
        assert!(!format!("{material:?}").contains("pp"), "Debug shows no material");
    }
}

#[test]
fn key_files_are_read_bounded_with_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name);
    let shown = |name: &str| format!("keylocation file://{}", path(name).display());

    std::fs::write(path("raw.key"), [9u8; 32]).expect("write");
    std::fs::write(path("hex.key"), [&[b'c'; 64][..], b"\n"].concat()).expect("write");
    std::fs::write(path("phrase.key"), b"correct horse battery staple\n").expect("write");
    std::fs::write(path("short.key"), [9u8; 17]).expect("write");
    std::fs::write(path("huge.key"), vec![b'a'; KEY_FILE_MAX + 1]).expect("write");
    std::fs::write(path("max.key"), vec![b'a'; KEY_FILE_MAX]).expect("write");

    for (format, name) in [(KeyFormat::Raw, "raw.key"), (KeyFormat::Hex, "hex.key"), (KeyFormat::Passphrase, "phrase.key")] {
        let location = KeyLocation::file(&path(name)).expect("location");
        let material = KeyMaterial::read(format, &location).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(material.format(), format);
    }

    let cases = [
        (KeyFormat::Raw, "missing.key", format!("{}: No such file or directory", shown("missing.key"))),
        (KeyFormat::Raw, "short.key", "raw key must be 32 bytes, got 17".to_string()),
        (KeyFormat::Passphrase, "huge.key", format!("{}: larger than 4096 bytes, not a key file", shown("huge.key"))),
        (KeyFormat::Passphrase, "max.key", "passphrase must be at most 512 bytes, got 4096".to_string()),
        (KeyFormat::Raw, "", format!("{}: Is a directory", shown(""))),
        (KeyFormat::Hex, "phrase.key", "hex key must be 64 hex digits, got 28 characters".to_string()),
    ];
    for (format, name, message) in cases {
        let err = KeyMaterial::read_file(format, &path(name)).expect_err(name);
        assert_eq!(err.to_string(), message);
    }

    // /dev/zero never ends: the bound stops the read.
    let err = KeyMaterial::read_file(KeyFormat::Raw, std::path::Path::new("/dev/zero")).expect_err("endless");
    assert_eq!(err.to_string(), "keylocation file:///dev/zero: larger than 4096 bytes, not a key file");

    let err = KeyMaterial::read(KeyFormat::Passphrase, &KeyLocation::Prompt).expect_err("prompt");
    assert!(matches!(err, KeyError::PromptNeeded));
    assert_eq!(err.to_string(), "keylocation=prompt: the key must be entered, not read from a file");
}
