//! The wrapped-key blob: the only form in which a master key is ever
//! stored (in the pool) or sent (in a raw send stream). Byte layout, all
//! integers little-endian (docs/on-disk-format.md, "Wrapped keys"):
//!
//! ```text
//! off  len  field
//!   0    8  magic "TARNWKEY"
//!   8    2  version (1)
//!  10    1  wrapping cipher: 1 = AES-256-GCM
//!  11    1  keyformat: 1 passphrase, 2 hex, 3 raw
//!  12    1  kdf: 0 none, 1 argon2id (v0x13), 2 PBKDF2-HMAC-SHA-512
//!  13    3  zero
//!  16    4  kdf parameter 1: argon2id m_kib, PBKDF2 iterations, else 0
//!  20    4  kdf parameter 2: argon2id t, else 0
//!  24    4  kdf parameter 3: argon2id p, else 0
//!  28    4  zero
//!  32   32  kdf salt (zero without a kdf)
//!  64   12  nonce
//!  76   48  the sealed master key: 32 bytes ciphertext, 16 bytes GCM tag
//! 124   32  SHA-256 of bytes 0..124
//! 156       end
//! ```
//!
//! The seal's associated data is bytes 0..76 (the header above, nonce
//! included) followed by the caller's bytes (the encryption root's
//! identity): no field can be changed, and no blob moved to another
//! dataset, without the seal failing. The SHA-256 tells damage apart from
//! a wrong key before any KDF work; it protects nothing against an
//! attacker (the seal does that).
//!
//! `decode` never panics, whatever the input; it checks the KDF limits
//! (`Kdf::check`), so a hostile blob cannot ask for unbounded work.

#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use aws_lc_rs::digest;

use crate::{Kdf, KeyError, KeyFormat, KDF_SALT_LEN};

pub const WRAPPED_KEY_MAGIC: [u8; 8] = *b"TARNWKEY";
pub const WRAPPED_KEY_VERSION: u16 = 1;
/// Length of a version-1 blob.
pub const WRAPPED_KEY_LEN: usize = 156;
/// The wrapping cipher's number: AES-256-GCM.
pub const CIPHER_AES_256_GCM: u8 = 1;
pub const NONCE_LEN: usize = 12;
/// 32-byte master key and 16-byte tag.
pub const SEALED_LEN: usize = 48;
/// Bytes 0..76: the header bound into the seal.
pub(crate) const HEADER_LEN: usize = 76;
const CHECKSUMMED_LEN: usize = 124;

/// A master key sealed under a wrapping key, with everything needed to
/// remake that wrapping key from the user's material except the material.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrappedKey {
    pub(crate) format: KeyFormat,
    pub(crate) kdf: Kdf,
    pub(crate) salt: [u8; KDF_SALT_LEN],
    pub(crate) nonce: [u8; NONCE_LEN],
    pub(crate) sealed: [u8; SEALED_LEN],
}

impl WrappedKey {
    /// The `keyformat` the material must have (the CLI prompts by it).
    pub fn format(&self) -> KeyFormat {
        self.format
    }

    /// The KDF and its parameters (reported by `get pbkdf2iters`).
    pub fn kdf(&self) -> Kdf {
        self.kdf
    }

    pub fn salt(&self) -> &[u8; KDF_SALT_LEN] {
        &self.salt
    }

    /// Bytes 0..76, bound into the seal.
    pub(crate) fn header(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        let (p1, p2, p3) = match self.kdf {
            Kdf::None => (0, 0, 0),
            Kdf::Argon2id { m_kib, t, p } => (m_kib, t, p),
            Kdf::Pbkdf2Sha512 { iters } => (iters, 0, 0),
        };
        let mut w = Writer { buf: &mut out, at: 0 };
        w.put(&WRAPPED_KEY_MAGIC);
        w.put(&WRAPPED_KEY_VERSION.to_le_bytes());
        w.put(&[CIPHER_AES_256_GCM, self.format.code(), self.kdf.code(), 0, 0, 0]);
        w.put(&p1.to_le_bytes());
        w.put(&p2.to_le_bytes());
        w.put(&p3.to_le_bytes());
        w.put(&[0; 4]);
        w.put(&self.salt);
        w.put(&self.nonce);
        assert_eq!(w.at, HEADER_LEN, "wrapped key header layout");
        out
    }

    /// The blob, [`WRAPPED_KEY_LEN`] bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(WRAPPED_KEY_LEN);
        out.extend_from_slice(&self.header());
        out.extend_from_slice(&self.sealed);
        let sum = digest::digest(&digest::SHA256, &out);
        out.extend_from_slice(sum.as_ref());
        assert_eq!(out.len(), WRAPPED_KEY_LEN, "wrapped key layout");
        out
    }

    /// Parses a blob; any damage or unknown value is an error.
    pub fn decode(bytes: &[u8]) -> Result<WrappedKey, KeyError> {
        let corrupt = |what: &str| KeyError::Corrupt(what.to_string());
        let mut r = Reader { buf: bytes, at: 0 };
        let magic: [u8; 8] = r.array().ok_or_else(|| corrupt(&format!("{} bytes, too short", bytes.len())))?;
        if magic != WRAPPED_KEY_MAGIC {
            return Err(corrupt("bad magic (not a tarn wrapped key)"));
        }
        let version = u16::from_le_bytes(r.array().ok_or_else(|| corrupt("too short"))?);
        if version != WRAPPED_KEY_VERSION {
            return Err(KeyError::Unsupported(format!(
                "version {version} is not supported (this tarn reads version {WRAPPED_KEY_VERSION})"
            )));
        }
        if bytes.len() != WRAPPED_KEY_LEN {
            return Err(corrupt(&format!("{} bytes, expected {WRAPPED_KEY_LEN}", bytes.len())));
        }
        let (body, sum) = bytes.split_at(CHECKSUMMED_LEN);
        if digest::digest(&digest::SHA256, body).as_ref() != sum {
            return Err(corrupt("checksum mismatch"));
        }
        let [cipher, format, kdf, z1, z2, z3] = r.array().ok_or_else(|| corrupt("too short"))?;
        if cipher != CIPHER_AES_256_GCM {
            return Err(KeyError::Unsupported(format!("wrapping cipher {cipher} is not supported")));
        }
        let format = KeyFormat::from_code(format).ok_or_else(|| corrupt(&format!("unknown keyformat {format}")))?;
        let p1 = r.u32().ok_or_else(|| corrupt("too short"))?;
        let p2 = r.u32().ok_or_else(|| corrupt("too short"))?;
        let p3 = r.u32().ok_or_else(|| corrupt("too short"))?;
        let z4 = r.u32().ok_or_else(|| corrupt("too short"))?;
        if [z1, z2, z3] != [0; 3] || z4 != 0 {
            return Err(corrupt("reserved bytes are not zero"));
        }
        let salt: [u8; KDF_SALT_LEN] = r.array().ok_or_else(|| corrupt("too short"))?;
        let kdf = match kdf {
            0 => {
                if [p1, p2, p3] != [0; 3] || salt != [0; KDF_SALT_LEN] {
                    return Err(corrupt("parameters or salt without a kdf"));
                }
                Kdf::None
            }
            1 => Kdf::Argon2id { m_kib: p1, t: p2, p: p3 },
            2 => {
                if [p2, p3] != [0; 2] {
                    return Err(corrupt("unused pbkdf2 parameters are not zero"));
                }
                Kdf::Pbkdf2Sha512 { iters: p1 }
            }
            other => return Err(corrupt(&format!("unknown kdf {other}"))),
        };
        kdf.check_for(format)?;
        let nonce = r.array().ok_or_else(|| corrupt("too short"))?;
        let sealed = r.array().ok_or_else(|| corrupt("too short"))?;
        assert_eq!(r.at, CHECKSUMMED_LEN, "wrapped key layout");
        Ok(WrappedKey { format, kdf, salt, nonce, sealed })
    }
}

struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) {
        let end = self.at + bytes.len();
        self.buf.get_mut(self.at..end).expect("header field within the header").copy_from_slice(bytes);
        self.at = end;
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let field = self.buf.get(self.at..self.at.checked_add(N)?)?;
        self.at += N;
        field.try_into().ok()
    }

    fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }
}
