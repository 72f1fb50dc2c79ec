//! The wrapped-key blob as hostile input: random bytes, mutated blobs and
//! mutated blobs whose checksum was fixed up (an attacker's edit, not
//! rot). Decoding never panics; no mutation ever unwraps, let alone to
//! another key. Seeded: `TARN_SEED`, `TARN_COUNT` (tarn-testkit).

use rand::{Rng, RngCore};
use tarn_keys::{unwrap, wrap, Kdf, KeyError, KeyFormat, KeyMaterial, MasterKey, WrappedKey, WrappingKey, WRAPPED_KEY_LEN};

const ROOT: &[u8] = b"tank/secure guid 0x5eed";
const SUM_AT: usize = 124;

struct Sample {
    format: KeyFormat,
    input: Vec<u8>,
    master: MasterKey,
    blob: Vec<u8>,
}

impl Sample {
    fn material(&self) -> KeyMaterial {
        KeyMaterial::from_bytes(self.format, &self.input).expect("material")
    }
}

/// One blob per format and KDF, with KDF costs small enough to unwrap
/// thousands of times.
fn samples() -> Vec<Sample> {
    let cases: [(KeyFormat, &[u8], Kdf); 4] = [
        (KeyFormat::Raw, &[0x42; 32], Kdf::None),
        (KeyFormat::Hex, b"0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0", Kdf::None),
        (KeyFormat::Passphrase, b"open sesame, please", Kdf::Pbkdf2Sha512 { iters: 1000 }),
        (KeyFormat::Passphrase, b"open sesame, please", Kdf::Argon2id { m_kib: 64, t: 1, p: 1 }),
    ];
    cases
        .into_iter()
        .map(|(format, input, kdf)| {
            let master = MasterKey::generate().expect("master");
            let material = KeyMaterial::from_bytes(format, input).expect("material");
            let wrapping = WrappingKey::new(&material, kdf).expect("wrapping key");
            let blob = wrap(&master, &wrapping, ROOT).expect("wrap").encode();
            Sample { format, input: input.to_vec(), master, blob }
        })
        .collect()
}

fn hex_decode(digits: &[u8]) -> Vec<u8> {
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).expect("ascii"), 16).expect("hex"))
        .collect()
}

fn fix_checksum(blob: &mut [u8]) {
    let sum = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &blob[..SUM_AT]);
    blob[SUM_AT..].copy_from_slice(sum.as_ref());
}

/// Whether unwrapping a decoded blob costs little (a fixed-up mutation of
/// a KDF parameter can name costs up to the limits: minutes of work).
fn cheap(kdf: Kdf) -> bool {
    match kdf {
        Kdf::None => true,
        Kdf::Argon2id { m_kib, t, p } => m_kib <= 4096 && t <= 4 && p <= 4,
        Kdf::Pbkdf2Sha512 { iters } => iters <= 20_000,
    }
}

/// Asserts that `blob` does not give `sample`'s master key (nor any key).
fn assert_refused(sample: &Sample, blob: &[u8], what: &str) -> bool {
    let Ok(decoded) = WrappedKey::decode(blob) else { return false };
    if !cheap(decoded.kdf()) {
        return true;
    }
    // The sample's key spelled in the decoded format: a hex blob relabelled
    // raw is tried with the 32 bytes the hex spells, and the reverse (the
    // wrapping key is the same; the header in the seal must refuse it).
    let input = match (sample.format, decoded.format()) {
        (KeyFormat::Hex, KeyFormat::Raw) => hex_decode(&sample.input),
        (KeyFormat::Raw, KeyFormat::Hex) => sample.input.iter().map(|b| format!("{b:02x}")).collect::<String>().into_bytes(),
        _ => sample.input.clone(),
    };
    let material = match KeyMaterial::from_bytes(decoded.format(), &input) {
        Ok(material) => material,
        // A passphrase relabelled hex or raw: no key of that format to try.
        Err(_) => return true,
    };
    match unwrap(&decoded, &material, ROOT) {
        Ok(key) => panic!(
            "{what}: a changed blob unwrapped (to {} key)",
            if key.bytes() == sample.master.bytes() { "the same" } else { "ANOTHER" }
        ),
        Err(KeyError::WrongKey) => true,
        Err(other) => panic!("{what}: unwrap failed with {other}, expected WrongKey"),
    }
}

#[test]
fn unchanged_samples_unwrap() {
    for sample in samples() {
        let decoded = WrappedKey::decode(&sample.blob).expect("decode");
        assert_eq!(unwrap(&decoded, &sample.material(), ROOT).expect("unwrap").bytes(), sample.master.bytes());
    }
}

#[test]
fn random_bytes_never_decode_and_never_panic() {
    let run = tarn_testkit::seeded!(20_000);
    let mut rng = run.rng(0);
    for round in 0..run.count {
        let len = match rng.gen_range(0..4) {
            0 => WRAPPED_KEY_LEN,
            1 => rng.gen_range(0..16),
            _ => rng.gen_range(0..400),
        };
        let mut bytes = vec![0u8; len];
        rng.fill_bytes(&mut bytes);
        if rng.gen_bool(0.5) && len >= 10 {
            bytes[..8].copy_from_slice(b"TARNWKEY");
            bytes[8..10].copy_from_slice(&1u16.to_le_bytes());
        }
        let result = WrappedKey::decode(&bytes);
        assert!(result.is_err(), "round {round}: {len} random bytes decoded");
        assert!(!result.expect_err("checked").to_string().contains('\n'));
    }
}

/// Random headers with a valid checksum reach every field check; what
/// decodes must be within the KDF limits and refuse to unwrap.
#[test]
fn random_fields_with_a_valid_checksum_never_panic() {
    let run = tarn_testkit::seeded!(20_000);
    let mut rng = run.rng(1);
    let samples = samples();
    let mut decoded_count = 0;
    for round in 0..run.count {
        let sample = &samples[rng.gen_range(0..samples.len())];
        let mut blob = sample.blob.clone();
        // Small values in the code bytes, mostly zero reserved bytes, any
        // parameters: otherwise nearly nothing gets past the first check.
        blob[10] = rng.gen_range(0..3);
        blob[11] = rng.gen_range(0..5);
        blob[12] = rng.gen_range(0..4);
        for at in [13, 14, 15, 28, 29, 30, 31] {
            blob[at] = if rng.gen_bool(0.9) { 0 } else { rng.gen() };
        }
        for byte in &mut blob[16..28] {
            if rng.gen_bool(0.3) {
                *byte = rng.gen();
            }
        }
        if rng.gen_bool(0.2) {
            blob[32..64].fill(0);
        }
        fix_checksum(&mut blob);
        if let Ok(decoded) = WrappedKey::decode(&blob) {
            decoded.kdf().check_for(decoded.format()).expect("decode checks the kdf");
            decoded_count += 1;
            if blob != sample.blob {
                assert_refused(sample, &blob, &format!("round {round}"));
            }
        }
    }
    assert!(decoded_count > 0 || run.count < 100, "no random header decoded: the test reaches no field check");
}

/// Every single changed byte, at every offset, with and without the
/// checksum fixed up: decode refuses it or unwrap does.
#[test]
fn every_single_byte_change_is_refused() {
    let run = tarn_testkit::seeded!(8);
    let mut rng = run.rng(2);
    let samples = samples();
    for round in 0..run.count {
        for sample in &samples {
            for at in 0..WRAPPED_KEY_LEN {
                let mut blob = sample.blob.clone();
                blob[at] ^= rng.gen_range(1..=255u8);
                let what = format!("round {round}, {} blob, byte {at}", sample.format);
                assert!(WrappedKey::decode(&blob).is_err(), "{what}: a changed byte passed the checksum");
                if at < SUM_AT {
                    fix_checksum(&mut blob);
                    assert_refused(sample, &blob, &format!("{what} (checksum fixed)"));
                }
            }
        }
    }
}

#[test]
fn several_changed_bytes_are_refused() {
    let run = tarn_testkit::seeded!(3000);
    let mut rng = run.rng(3);
    let samples = samples();
    for round in 0..run.count {
        let sample = &samples[rng.gen_range(0..samples.len())];
        let mut blob = sample.blob.clone();
        for _ in 0..rng.gen_range(2..8) {
            let at = rng.gen_range(0..SUM_AT);
            blob[at] = rng.gen();
        }
        if blob == sample.blob {
            continue;
        }
        fix_checksum(&mut blob);
        assert_refused(sample, &blob, &format!("round {round}"));
        if rng.gen_bool(0.1) {
            let cut = rng.gen_range(0..WRAPPED_KEY_LEN);
            assert!(WrappedKey::decode(&sample.blob[..cut]).is_err(), "truncated to {cut}");
        }
    }
}

#[test]
fn hostile_kdf_costs_are_refused_before_any_work() {
    let samples = samples();
    let argon = &samples[3].blob;
    let pbkdf2 = &samples[2].blob;
    let with = |base: &[u8], at: usize, value: u32| {
        let mut blob = base.to_vec();
        blob[at..at + 4].copy_from_slice(&value.to_le_bytes());
        fix_checksum(&mut blob);
        WrappedKey::decode(&blob).expect_err("over the limit").to_string()
    };
    assert_eq!(with(argon, 16, 1 << 30), "argon2id memory 1073741824 KiB is over the limit of 4194304 KiB (4 GiB)");
    assert_eq!(with(argon, 20, 1000), "argon2id time cost 1000 is outside 1..=64");
    assert_eq!(with(argon, 24, 0), "argon2id parallelism 0 is outside 1..=16");
    assert_eq!(with(pbkdf2, 16, 1_000_000_000), "pbkdf2 iterations 1000000000 is outside 1..=100000000");
    assert_eq!(with(pbkdf2, 20, 3), "wrapped key is damaged: unused pbkdf2 parameters are not zero");
    let raw = &samples[0].blob;
    assert_eq!(with(raw, 16, 1), "wrapped key is damaged: parameters or salt without a kdf");

    let mut version2 = argon.clone();
    version2[8] = 2;
    assert_eq!(
        WrappedKey::decode(&version2).expect_err("v2").to_string(),
        "wrapped key version 2 is not supported (this tarn reads version 1)"
    );
    let mut rotten = argon.clone();
    rotten[100] ^= 1;
    assert_eq!(WrappedKey::decode(&rotten).expect_err("rot").to_string(), "wrapped key is damaged: checksum mismatch");
    assert_eq!(
        WrappedKey::decode(&argon[..155]).expect_err("short").to_string(),
        "wrapped key is damaged: 155 bytes, expected 156"
    );
    assert_eq!(
        WrappedKey::decode(b"TARNWKE").expect_err("tiny").to_string(),
        "wrapped key is damaged: 7 bytes, too short"
    );
    assert_eq!(
        WrappedKey::decode(&[0u8; 156]).expect_err("zeros").to_string(),
        "wrapped key is damaged: bad magic (not a tarn wrapped key)"
    );
}

/// Hex and raw material both are the wrapping key; only the header,
/// bound into the seal, tells them apart. A blob relabelled from one to
/// the other must not open with the same key bytes.
#[test]
fn a_relabelled_keyformat_does_not_open() {
    let samples = samples();
    for (sample, to) in [(&samples[0], KeyFormat::Hex), (&samples[1], KeyFormat::Raw)] {
        let mut blob = sample.blob.clone();
        blob[11] = match to {
            KeyFormat::Passphrase => 1,
            KeyFormat::Hex => 2,
            KeyFormat::Raw => 3,
        };
        fix_checksum(&mut blob);
        let decoded = WrappedKey::decode(&blob).expect("a relabelled blob decodes");
        assert_eq!(decoded.format(), to);
        assert!(assert_refused(sample, &blob, &format!("{} relabelled {to}", sample.format)));
    }
}
