//! Keys for native encryption: what the user types or keeps in a key
//! file, the wrapping key made from it, the master key it protects, and
//! the wrapped-key blob that is all of this the pool ever stores.
//!
//! ```text
//!  material (passphrase | hex | raw)         keyformat, keylocation
//!      │  argon2id / PBKDF2-HMAC-SHA-512 + salt, or none for hex/raw
//!      ▼
//!  WrappingKey (32 bytes) ──AES-256-GCM seal, AAD = header ‖ root id──▶ WrappedKey (156-byte blob, on disk / in raw streams)
//!      ▲                                                                         │
//!  MasterKey (32 random bytes per encryption root) ◀────────── unwrap ──────────┘
//!      │  HKDF-SHA-512(info)
//!      ▼
//!  the block layer's keys (tarn-block)
//! ```
//!
//! Invariants:
//! - Key bytes this crate holds (material, wrapping key, master key,
//!   derived keys) live only in [`Secret`]s: locked, excluded from core
//!   dumps, zeroed on drop, and no `Debug` or error message shows a byte
//!   of them. aws-lc, which seals and derives with them, builds its own
//!   contexts (key schedules) on its heap: docs/encryption.md, "Keys in
//!   memory, and core dumps".
//! - A master key leaves this crate in the clear only through
//!   [`MasterKey::bytes`] and [`MasterKey::derive`]; on disk and in streams
//!   only as a [`WrappedKey`] (DESIGN invariant 9).
//! - `unwrap` either returns the master key that was wrapped or fails:
//!   a wrong key, another encryption root's AAD or any changed byte of
//!   the blob is an error, never a different key.
//! - Decoding a blob never panics and refuses KDF costs over the limits
//!   in [`kdf`](Kdf::check) before doing any work.
//!
//! API boundary: prompting (terminal, twice for a new passphrase) is the
//! CLI's; storing the blob and choosing the AAD are the dataset layer's;
//! this crate depends on no other tarn crate.

mod error;
mod format;
mod kdf;
mod master;
mod material;
mod props;
mod secret;
mod wrap;

pub use error::KeyError;
pub use format::{
    WrappedKey, CIPHER_AES_256_GCM, NONCE_LEN, SEALED_LEN, WRAPPED_KEY_LEN, WRAPPED_KEY_MAGIC, WRAPPED_KEY_VERSION,
};
pub use kdf::{
    Kdf, WrappingKey, ARGON2ID_M_KIB_MAX, ARGON2ID_P_MAX, ARGON2ID_T_MAX, KDF_SALT_LEN, PBKDF2_ITERS_MAX,
    PBKDF2_ITERS_MIN,
    WRAPPING_KEY_LEN,
};
pub use master::{MasterKey, DERIVE_MAX, MASTER_KEY_LEN};
pub use material::{KeyMaterial, HEX_KEY_LEN, KEY_FILE_MAX, PASSPHRASE_MAX, PASSPHRASE_MIN, RAW_KEY_LEN};
pub use props::{KeyFormat, KeyLocation};
pub use secret::{secret_stats, Secret, SecretStats};
pub use wrap::{rewrap, unwrap, unwrap_with, wrap};

#[cfg(test)]
mod tests;
