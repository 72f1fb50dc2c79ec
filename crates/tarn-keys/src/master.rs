//! The master key: 32 random bytes per encryption root, made once at
//! `create` and never changed (`change-key` only rewraps it). The block
//! layer derives the keys it uses from it with HKDF-SHA-512.

use aws_lc_rs::hkdf;

use crate::{KeyError, Secret};

pub const MASTER_KEY_LEN: usize = 32;
/// The longest output HKDF-SHA-512 gives (255 blocks of 64 bytes).
pub const DERIVE_MAX: usize = 255 * 64;

/// 32 bytes in a [`Secret`]. `Clone` re-locks (a new mapping).
#[derive(Clone)]
pub struct MasterKey(Secret);

impl MasterKey {
    /// A new master key from the system's cryptographic random source.
    pub fn generate() -> Result<MasterKey, KeyError> {
        Ok(MasterKey(Secret::random(MASTER_KEY_LEN)?))
    }

    /// A master key of known bytes (unwrapping, test vectors).
    pub fn from_bytes(bytes: &[u8; MASTER_KEY_LEN]) -> MasterKey {
        MasterKey(Secret::from_slice(bytes))
    }

    pub fn bytes(&self) -> &[u8; MASTER_KEY_LEN] {
        self.0.expose().try_into().expect("a master key holds 32 bytes")
    }

    /// `out_len` bytes of HKDF-SHA-512 (RFC 5869) with this key as input
    /// keying material, no salt (HashLen zero bytes, as the RFC says) and
    /// `info` naming the purpose and anything that makes the key unique
    /// (a per-object-set salt, a txg). Distinct `info` gives independent
    /// keys; the same `info` the same key, forever (it is part of the
    /// on-disk format).
    ///
    /// Panics if `out_len` is 0 or over [`DERIVE_MAX`] (a caller's bug).
    pub fn derive(&self, info: &[u8], out_len: usize) -> Secret {
        assert!((1..=DERIVE_MAX).contains(&out_len), "HKDF-SHA-512 output of {out_len} bytes asked");
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA512, &[]).extract(self.0.expose());
        let mut out = Secret::zeroed(out_len);
        let info = [info];
        prk.expand(&info, Len(out_len))
            .and_then(|okm| okm.fill(out.expose_mut()))
            .expect("HKDF-SHA-512 expand within its length limit");
        out
    }
}

struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known answers from Python's `hmac` (RFC 5869 written out by hand),
    /// not from aws-lc: block keys derived today must be derived the same
    /// by every later build.
    #[test]
    fn derive_matches_independent_hkdf_sha512() {
        let master = MasterKey::from_bytes(&std::array::from_fn(|i| i as u8));
        let cases: [(&[u8], usize, &str); 3] = [
            (b"tarn block key", 32, "1a404c962977a43d0605107a5f773ecc918576fcc4994ec213585ae29446c137"),
            (b"tarn block mac", 64, "e79fedb279fa69ed73585258c525f062509eb79afd37ccbe322e2bfef71062a0e7a39f5c785316cc7b2f26314b79aa8bbbfe71fc7f93ab0cc3764904cc25f222"),
            (b"", 100, "f5def084b086c3aea7c1ea1693f66dc54d414765f65467e0ff0bf1e7fed491c96bc7e8921b5df55ed1dc990afc0bf8cd0ea225ad5aa2aebde9184b30b2c9b546479fd14b3df278ffb785d8ca52305b1fef1c2f5708b0c6742b069211e7a9e93159b4377a"),
        ];
        for (info, len, expected) in cases {
            let out = master.derive(info, len);
            assert_eq!(out.len(), len);
            let hex: String = out.expose().iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(hex, expected, "info {info:?}");
        }
    }

    #[test]
    fn generated_keys_differ_and_debug_shows_nothing() {
        let a = MasterKey::generate().expect("generate");
        let b = MasterKey::generate().expect("generate");
        assert_ne!(a.bytes(), b.bytes());
        assert_eq!(a.clone().bytes(), a.bytes());
        assert_eq!(format!("{a:?}"), "MasterKey(..)");
        assert_ne!(a.derive(b"x", 32).expose(), a.derive(b"y", 32).expose());
        assert_ne!(a.derive(b"x", 32).expose(), b.derive(b"x", 32).expose());
    }

    #[test]
    #[should_panic(expected = "HKDF-SHA-512 output of 16321 bytes")]
    fn derive_refuses_more_than_hkdf_gives() {
        let _ = MasterKey::from_bytes(&[1; 32]).derive(b"x", DERIVE_MAX + 1);
    }
}
