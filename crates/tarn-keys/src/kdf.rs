//! Wrapping keys: the 32-byte AES-256-GCM key that seals a master key,
//! made from the user's material.
//!
//! A passphrase is stretched by a KDF with a random 32-byte salt:
//! argon2id (the default: memory-hard, so a GPU farm gains little) or
//! PBKDF2-HMAC-SHA-512 (ZFS's `pbkdf2iters`, for users who ask for it).
//! Hex and raw keys are the wrapping key itself: no KDF, salt all zero.
//!
//! Every parameter set is checked against hard limits before any work,
//! whether a user chose it or a wrapped key read from disk or a stream
//! names it: a hostile blob must not make `load-key` allocate 1 TiB or
//! spin for a day.

use std::num::NonZeroU32;

use crate::{KeyError, KeyFormat, KeyMaterial, Secret};

pub const WRAPPING_KEY_LEN: usize = 32;
pub const KDF_SALT_LEN: usize = 32;

/// argon2id memory limit: 4 GiB (in KiB).
pub const ARGON2ID_M_KIB_MAX: u32 = 4 * 1024 * 1024;
pub const ARGON2ID_T_MAX: u32 = 64;
pub const ARGON2ID_P_MAX: u32 = 16;
pub const PBKDF2_ITERS_MAX: u32 = 100_000_000;
/// The fewest PBKDF2 iterations a new key may ask for (as OpenZFS).
pub const PBKDF2_ITERS_MIN: u32 = 100_000;

/// How a passphrase becomes a wrapping key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kdf {
    /// Hex and raw keys: the material is the key.
    None,
    /// Argon2id (version 0x13), `m_kib` KiB of memory, `t` passes, `p` lanes.
    Argon2id { m_kib: u32, t: u32, p: u32 },
    /// PBKDF2 with HMAC-SHA-512.
    Pbkdf2Sha512 { iters: u32 },
}

impl Kdf {
    /// 64 MiB, 3 passes, 1 lane.
    pub const ARGON2ID_DEFAULT: Kdf = Kdf::Argon2id { m_kib: 64 * 1024, t: 3, p: 1 };
    /// OpenZFS's default `pbkdf2iters`.
    pub const PBKDF2_DEFAULT: Kdf = Kdf::Pbkdf2Sha512 { iters: 350_000 };

    /// The KDF for `pbkdf2iters=N` on a new key or `change-key`: at least
    /// [`PBKDF2_ITERS_MIN`] as OpenZFS requires (wrapped keys already
    /// stored are read with any count within the limits).
    pub fn pbkdf2_for_new_key(iters: u64) -> Result<Kdf, KeyError> {
        match u32::try_from(iters) {
            Ok(iters) if (PBKDF2_ITERS_MIN..=PBKDF2_ITERS_MAX).contains(&iters) => Ok(Kdf::Pbkdf2Sha512 { iters }),
            _ => Err(KeyError::KdfParams(format!(
                "pbkdf2iters must be between {PBKDF2_ITERS_MIN} and {PBKDF2_ITERS_MAX}, got {iters}"
            ))),
        }
    }

    /// The KDF a new key of `format` gets unless the user asks otherwise.
    pub fn default_for(format: KeyFormat) -> Kdf {
        match format {
            KeyFormat::Passphrase => Kdf::ARGON2ID_DEFAULT,
            KeyFormat::Hex | KeyFormat::Raw => Kdf::None,
        }
    }

    /// The number in the wrapped-key blob.
    pub(crate) fn code(self) -> u8 {
        match self {
            Kdf::None => 0,
            Kdf::Argon2id { .. } => 1,
            Kdf::Pbkdf2Sha512 { .. } => 2,
        }
    }

    /// Checks the parameters against the limits above (and argon2's own
    /// minimums), with a one-line reason.
    pub fn check(&self) -> Result<(), KeyError> {
        let fail = |text: String| Err(KeyError::KdfParams(text));
        match *self {
            Kdf::None => Ok(()),
            Kdf::Argon2id { m_kib, t, p } => {
                if p == 0 || p > ARGON2ID_P_MAX {
                    return fail(format!("argon2id parallelism {p} is outside 1..={ARGON2ID_P_MAX}"));
                }
                if t == 0 || t > ARGON2ID_T_MAX {
                    return fail(format!("argon2id time cost {t} is outside 1..={ARGON2ID_T_MAX}"));
                }
                if m_kib > ARGON2ID_M_KIB_MAX {
                    return fail(format!("argon2id memory {m_kib} KiB is over the limit of {ARGON2ID_M_KIB_MAX} KiB (4 GiB)"));
                }
                if m_kib < 8 * p {
                    return fail(format!("argon2id memory {m_kib} KiB is under 8 KiB per lane ({p} lanes)"));
                }
                Ok(())
            }
            Kdf::Pbkdf2Sha512 { iters } => {
                if iters == 0 || iters > PBKDF2_ITERS_MAX {
                    return fail(format!("pbkdf2 iterations {iters} is outside 1..={PBKDF2_ITERS_MAX}"));
                }
                Ok(())
            }
        }
    }

    /// Checks that this KDF goes with `format`: a passphrase needs one,
    /// hex and raw keys take none.
    pub fn check_for(&self, format: KeyFormat) -> Result<(), KeyError> {
        match (format, self) {
            (KeyFormat::Passphrase, Kdf::None) => {
                Err(KeyError::KdfMismatch { format, problem: "needs a key derivation function (argon2id or pbkdf2)" })
            }
            (KeyFormat::Hex | KeyFormat::Raw, Kdf::Argon2id { .. } | Kdf::Pbkdf2Sha512 { .. }) => {
                Err(KeyError::KdfMismatch { format, problem: "takes no key derivation function" })
            }
            _ => self.check(),
        }
    }
}

/// A secret's bytes as argon2 memory blocks.
fn as_blocks(memory: &mut Secret) -> &mut [argon2::Block] {
    const _: () = assert!(std::mem::size_of::<argon2::Block>() == argon2::Block::SIZE);
    const _: () = assert!(std::mem::align_of::<argon2::Block>() <= 4096);
    let bytes = memory.expose_mut();
    assert!(bytes.len().is_multiple_of(argon2::Block::SIZE));
    assert!((bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<argon2::Block>()), "secrets are page-aligned");
    // SAFETY: a Block is 1024 bytes of u64s with no padding (size asserted
    // above), so any bytes are a valid Block; the memory is aligned
    // (asserted), `len / 1024` blocks long, and borrowed mutably from
    // `memory` for the result's lifetime.
    unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<argon2::Block>(), bytes.len() / argon2::Block::SIZE) }
}

/// The key that seals a master key, with the recipe it was made by
/// (format, KDF, salt), which the wrapped key records.
pub struct WrappingKey {
    format: KeyFormat,
    kdf: Kdf,
    salt: [u8; KDF_SALT_LEN],
    key: Secret,
}

impl WrappingKey {
    /// A new wrapping key from `material`: a fresh random salt when `kdf`
    /// is not `None` (new keys, `change-key`).
    pub fn new(material: &KeyMaterial, kdf: Kdf) -> Result<WrappingKey, KeyError> {
        let mut salt = [0u8; KDF_SALT_LEN];
        if kdf != Kdf::None {
            aws_lc_rs::rand::fill(&mut salt).map_err(|_| KeyError::Crypto("random source failed"))?;
        }
        WrappingKey::derive(material, kdf, &salt)
    }

    /// The wrapping key `material` gives under `kdf` and `salt` (to open a
    /// wrapped key, which names both).
    pub fn derive(material: &KeyMaterial, kdf: Kdf, salt: &[u8; KDF_SALT_LEN]) -> Result<WrappingKey, KeyError> {
        let format = material.format();
        kdf.check_for(format)?;
        let mut key = Secret::zeroed(WRAPPING_KEY_LEN);
        match kdf {
            Kdf::None => {
                // Hex and raw material is 32 bytes (checked when made).
                assert_eq!(material.bytes().len(), WRAPPING_KEY_LEN, "hex/raw material is not 32 bytes");
                key.expose_mut().copy_from_slice(material.bytes());
            }
            Kdf::Argon2id { m_kib, t, p } => {
                let params = argon2::Params::new(m_kib, t, p, Some(WRAPPING_KEY_LEN))
                    .map_err(|e| KeyError::KdfParams(format!("argon2id parameters refused: {e}")))?;
                let blocks = params.block_count();
                let argon = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
                // The working memory holds values from which the key can
                // be recomputed: it gets a secret's pages too (locked,
                // undumpable, zeroed after).
                let mut memory = Secret::zeroed(blocks * argon2::Block::SIZE);
                argon
                    .hash_password_into_with_memory(material.bytes(), salt, key.expose_mut(), as_blocks(&mut memory))
                    .map_err(|e| KeyError::KdfParams(format!("argon2id failed: {e}")))?;
            }
            Kdf::Pbkdf2Sha512 { iters } => {
                let iters = NonZeroU32::new(iters).expect("checked: iterations >= 1");
                aws_lc_rs::pbkdf2::derive(
                    aws_lc_rs::pbkdf2::PBKDF2_HMAC_SHA512,
                    iters,
                    salt,
                    material.bytes(),
                    key.expose_mut(),
                );
            }
        }
        Ok(WrappingKey { format, kdf, salt: *salt, key })
    }

    pub fn format(&self) -> KeyFormat {
        self.format
    }

    pub fn kdf(&self) -> Kdf {
        self.kdf
    }

    pub fn salt(&self) -> &[u8; KDF_SALT_LEN] {
        &self.salt
    }

    /// The key's 32 bytes (as [`MasterKey::bytes`](crate::MasterKey::bytes):
    /// for sealing, and for tests that look for it where it must not be).
    /// Copy them nowhere that is not a [`Secret`].
    pub fn key(&self) -> &[u8] {
        self.key.expose()
    }
}

impl std::fmt::Debug for WrappingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WrappingKey(keyformat={}, {:?})", self.format, self.kdf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_refuse_hostile_parameters_with_one_line() {
        let cases = [
            (Kdf::Argon2id { m_kib: ARGON2ID_M_KIB_MAX + 1, t: 3, p: 1 }, "argon2id memory 4194305 KiB is over the limit of 4194304 KiB (4 GiB)"),
            (Kdf::Argon2id { m_kib: u32::MAX, t: 3, p: 1 }, "argon2id memory 4294967295 KiB is over the limit of 4194304 KiB (4 GiB)"),
            (Kdf::Argon2id { m_kib: 65536, t: 65, p: 1 }, "argon2id time cost 65 is outside 1..=64"),
            (Kdf::Argon2id { m_kib: 65536, t: 0, p: 1 }, "argon2id time cost 0 is outside 1..=64"),
            (Kdf::Argon2id { m_kib: 65536, t: 3, p: 0 }, "argon2id parallelism 0 is outside 1..=16"),
            (Kdf::Argon2id { m_kib: 65536, t: 3, p: 17 }, "argon2id parallelism 17 is outside 1..=16"),
            (Kdf::Argon2id { m_kib: 31, t: 3, p: 4 }, "argon2id memory 31 KiB is under 8 KiB per lane (4 lanes)"),
            (Kdf::Pbkdf2Sha512 { iters: 0 }, "pbkdf2 iterations 0 is outside 1..=100000000"),
            (Kdf::Pbkdf2Sha512 { iters: PBKDF2_ITERS_MAX + 1 }, "pbkdf2 iterations 100000001 is outside 1..=100000000"),
        ];
        for (kdf, message) in cases {
            let err = kdf.check().expect_err(message);
            assert_eq!(err.to_string(), message);
        }
        for kdf in [Kdf::None, Kdf::ARGON2ID_DEFAULT, Kdf::PBKDF2_DEFAULT, Kdf::Argon2id { m_kib: ARGON2ID_M_KIB_MAX, t: 64, p: 16 }] {
            kdf.check().expect("within limits");
        }
    }

    #[test]
    fn pbkdf2iters_for_new_keys_has_a_floor() {
        assert_eq!(Kdf::pbkdf2_for_new_key(350_000).expect("ok"), Kdf::PBKDF2_DEFAULT);
        assert_eq!(Kdf::pbkdf2_for_new_key(100_000).expect("ok"), Kdf::Pbkdf2Sha512 { iters: 100_000 });
        for bad in [0, 99_999, 100_000_001, u64::from(u32::MAX) + 1] {
            assert_eq!(
                Kdf::pbkdf2_for_new_key(bad).expect_err("refused").to_string(),
                format!("pbkdf2iters must be between 100000 and 100000000, got {bad}")
            );
        }
    }

    #[test]
    fn kdf_must_match_the_format() {
        assert_eq!(
            Kdf::None.check_for(KeyFormat::Passphrase).expect_err("none").to_string(),
            "keyformat=passphrase needs a key derivation function (argon2id or pbkdf2)"
        );
        assert_eq!(
            Kdf::PBKDF2_DEFAULT.check_for(KeyFormat::Raw).expect_err("raw").to_string(),
            "keyformat=raw takes no key derivation function"
        );
        assert_eq!(
            Kdf::ARGON2ID_DEFAULT.check_for(KeyFormat::Hex).expect_err("hex").to_string(),
            "keyformat=hex takes no key derivation function"
        );
        for format in KeyFormat::ALL {
            Kdf::default_for(format).check_for(format).expect("the default fits");
        }
    }

    #[test]
    fn kdfs_depend_on_material_salt_and_every_parameter() {
        let phrase = KeyMaterial::from_bytes(KeyFormat::Passphrase, b"correct horse").expect("phrase");
        let other = KeyMaterial::from_bytes(KeyFormat::Passphrase, b"correct horsf").expect("phrase");
        let salt = [7u8; KDF_SALT_LEN];
        let salt2 = [8u8; KDF_SALT_LEN];
        let small = [
            Kdf::Argon2id { m_kib: 64, t: 1, p: 1 },
            Kdf::Argon2id { m_kib: 72, t: 1, p: 1 },
            Kdf::Argon2id { m_kib: 64, t: 2, p: 1 },
            Kdf::Argon2id { m_kib: 64, t: 1, p: 2 },
            Kdf::Pbkdf2Sha512 { iters: 1000 },
            Kdf::Pbkdf2Sha512 { iters: 1001 },
        ];
        let mut seen: Vec<Vec<u8>> = Vec::new();
        for kdf in small {
            for (material, salt) in [(&phrase, &salt), (&other, &salt), (&phrase, &salt2)] {
                let key = WrappingKey::derive(material, kdf, salt).expect("derive").key().to_vec();
                let again = WrappingKey::derive(material, kdf, salt).expect("derive");
                assert_eq!(again.key(), key.as_slice(), "deterministic");
                assert!(!seen.contains(&key), "{kdf:?} gave a key another input gave");
                seen.push(key);
            }
        }
        let new1 = WrappingKey::new(&phrase, small[0]).expect("new");
        let new2 = WrappingKey::new(&phrase, small[0]).expect("new");
        assert_ne!(new1.salt(), new2.salt(), "fresh salts");
        assert_ne!(new1.key(), new2.key());
    }

    /// Known answers from implementations other than the ones we call:
    /// the reference argon2 CLI (Debian's `argon2`, `-id -l 32 -r`) and
    /// Python's `hashlib.pbkdf2_hmac('sha512', ...)`. A wrapped key on
    /// disk must open with the same passphrase forever: if a dependency
    /// update or a change of ours alters a derivation, this fails.
    #[test]
    fn derivations_match_independent_known_answers() {
        let phrase = KeyMaterial::from_bytes(KeyFormat::Passphrase, b"correct horse battery").expect("phrase");
        let salt: [u8; KDF_SALT_LEN] = *b"tarn-keys known-answer salt 32by";
        let cases = [
            (Kdf::Argon2id { m_kib: 64, t: 3, p: 1 }, "b9d1896f669ee23aabe8e2b7011b8ca6c91a2ce9535a95e30a19e5ed0fec42d3"),
            (Kdf::Argon2id { m_kib: 256, t: 2, p: 2 }, "04caa28c6a62b3aea8a69f30322ef2a20a9e21e5704e4bcdf0dd069fadcca8f4"),
            (Kdf::ARGON2ID_DEFAULT, "67a79af7422d79197b723536174c01b099c226a9f3adea42c6f8da2c853f1225"),
            (Kdf::Pbkdf2Sha512 { iters: 1000 }, "c85076a10ec35351eeaf8666550bd672d42fa3443ec282aceb61b8dd44c3e33f"),
            (Kdf::PBKDF2_DEFAULT, "248713b20b15e15fe9246ae45eeafb8faa6ef9a961e6ddf520a2d2de1b331338"),
        ];
        for (kdf, expected) in cases {
            let key = WrappingKey::derive(&phrase, kdf, &salt).expect("derive");
            let hex: String = key.key().iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(hex, expected, "{kdf:?}");
        }
    }
}
