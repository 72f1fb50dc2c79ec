//! Sealing a master key under a wrapping key, and opening it again.
//!
//! AES-256-GCM with a random 96-bit nonce per seal. A master key is
//! sealed once per `create` or `change-key`, so the number of seals under
//! one wrapping key is tiny, and every `change-key` with a KDF makes a new
//! wrapping key anyway (fresh salt): nonce reuse is out of reach. (Hex and
//! raw wrapping keys are the user's and are reused across rewraps; at
//! 2^-32 collision odds after 2^32 seals, a handful is nothing.)
//!
//! The plaintext master key only ever sits in [`Secret`] memory: it is
//! copied into a secret, sealed in place there, and only ciphertext leaves.

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};

use crate::format::{HEADER_LEN, NONCE_LEN, SEALED_LEN};
use crate::{KeyError, KeyMaterial, MasterKey, Secret, WrappedKey, WrappingKey, MASTER_KEY_LEN};

fn aead_key(wrapping: &WrappingKey) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, wrapping.key()).expect("a 32-byte AES-256 key"))
}

fn associated_data(header: &[u8; HEADER_LEN], aad: &[u8]) -> Vec<u8> {
    let mut all = Vec::with_capacity(HEADER_LEN + aad.len());
    all.extend_from_slice(header);
    all.extend_from_slice(aad);
    all
}

/// Seals `master` under `wrapping`, binding `aad` (the encryption root's
/// identity) and every header field into the seal.
pub fn wrap(master: &MasterKey, wrapping: &WrappingKey, aad: &[u8]) -> Result<WrappedKey, KeyError> {
    let mut nonce = [0u8; NONCE_LEN];
    aws_lc_rs::rand::fill(&mut nonce).map_err(|_| KeyError::Crypto("random source failed"))?;
    let mut wrapped = WrappedKey {
        format: wrapping.format(),
        kdf: wrapping.kdf(),
        salt: *wrapping.salt(),
        nonce,
        sealed: [0; SEALED_LEN],
    };
    let aad = associated_data(&wrapped.header(), aad);
    let mut buffer = Secret::from_slice(master.bytes());
    let tag = aead_key(wrapping)
        .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(&aad), buffer.expose_mut())
        .map_err(|_| KeyError::Crypto("AES-256-GCM seal failed"))?;
    let (ciphertext, tag_out) = wrapped.sealed.split_at_mut(MASTER_KEY_LEN);
    ciphertext.copy_from_slice(buffer.expose());
    tag_out.copy_from_slice(tag.as_ref());
    Ok(wrapped)
}

/// Opens `wrapped` with the user's `material` and the same `aad` it was
/// wrapped with. A wrong key, a wrong `aad` or a tampered blob is
/// [`KeyError::WrongKey`]: GCM cannot tell them apart, and it never hands
/// back a different key.
pub fn unwrap(wrapped: &WrappedKey, material: &KeyMaterial, aad: &[u8]) -> Result<MasterKey, KeyError> {
    let wrapping = WrappingKey::for_wrapped(wrapped, material)?;
    unwrap_with(wrapped, &wrapping, aad)
}

/// Opens `wrapped` with a wrapping key already derived for it
/// ([`WrappingKey::for_wrapped`]).
pub fn unwrap_with(wrapped: &WrappedKey, wrapping: &WrappingKey, aad: &[u8]) -> Result<MasterKey, KeyError> {
    if wrapping.format() != wrapped.format || wrapping.kdf() != wrapped.kdf || wrapping.salt() != &wrapped.salt {
        return Err(KeyError::WrongKey);
    }
    let aad = associated_data(&wrapped.header(), aad);
    let mut buffer = Secret::from_slice(&wrapped.sealed);
    let plain = aead_key(wrapping)
        .open_in_place(Nonce::assume_unique_for_key(wrapped.nonce), Aad::from(&aad), buffer.expose_mut())
        .map_err(|_| KeyError::WrongKey)?;
    let bytes: &[u8; MASTER_KEY_LEN] = (&*plain).try_into().expect("GCM opens 48 bytes to 32");
    Ok(MasterKey::from_bytes(bytes))
}

/// `change-key`: opens `wrapped` with the old material and seals the same
/// master key under `new_wrapping` (new format, KDF or salt), same `aad`.
/// The old material no longer opens the result.
pub fn rewrap(
    wrapped: &WrappedKey,
    old_material: &KeyMaterial,
    aad: &[u8],
    new_wrapping: &WrappingKey,
) -> Result<WrappedKey, KeyError> {
    let master = unwrap(wrapped, old_material, aad)?;
    wrap(&master, new_wrapping, aad)
}

impl WrappingKey {
    /// The wrapping key `material` gives under the KDF and salt `wrapped`
    /// names. Refuses material of another format
    /// ([`KeyError::FormatMismatch`]) before any KDF work.
    pub fn for_wrapped(wrapped: &WrappedKey, material: &KeyMaterial) -> Result<WrappingKey, KeyError> {
        if material.format() != wrapped.format {
            return Err(KeyError::FormatMismatch { given: material.format(), expected: wrapped.format });
        }
        WrappingKey::derive(material, wrapped.kdf, &wrapped.salt)
    }
}
