//! The crate's one error enum. Every message is one line and never holds
//! key material: lengths and positions only, never a byte of a key.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum KeyError {
    /// The key (passphrase, hex or raw) does not open the wrapped key, or
    /// the wrapped key was bound to other data (another encryption root).
    /// The caller names the dataset: "incorrect key provided for 'tank/x'".
    #[error("incorrect key provided")]
    WrongKey,

    /// `keyformat=raw`: the material is not exactly 32 bytes.
    #[error("raw key must be 32 bytes, got {got}")]
    RawKeyLength { got: usize },

    /// `keyformat=hex`: not 64 characters (after one trailing newline).
    #[error("hex key must be 64 hex digits, got {got} characters")]
    HexKeyLength { got: usize },

    /// `keyformat=hex`: 64 characters, but one is not a hex digit.
    #[error("hex key must be 64 hex digits, character {position} is not one")]
    HexKeyDigit { position: usize },

    #[error("passphrase must be at least {min} bytes, got {got}")]
    PassphraseTooShort { got: usize, min: usize },

    #[error("passphrase must be at most {max} bytes, got {got}")]
    PassphraseTooLong { got: usize, max: usize },

    /// Reading `keylocation=file://...` failed; `reason` is the system's
    /// text without the "(os error N)" tail, or why the file is no key.
    #[error("keylocation {location}: {reason}")]
    KeyFile { location: String, reason: String },

    /// `keylocation=prompt`: the caller (the CLI) must ask the user and
    /// hand the answer to `KeyMaterial::from_bytes`.
    #[error("keylocation=prompt: the key must be entered, not read from a file")]
    PromptNeeded,

    /// A `keyformat` or `keylocation` value that does not parse.
    #[error("invalid {property} '{value}': {expected}")]
    BadProperty { property: &'static str, value: String, expected: &'static str },

    /// KDF parameters outside the limits (from a user or a hostile blob).
    #[error("{0}")]
    KdfParams(String),

    /// A KDF that does not go with the key format (a passphrase needs one,
    /// hex and raw keys take none).
    #[error("keyformat={format} {problem}")]
    KdfMismatch { format: crate::KeyFormat, problem: &'static str },

    /// The material's format is not the one the wrapped key was made with.
    #[error("key is keyformat={given}, but the wrapped key needs keyformat={expected}")]
    FormatMismatch { given: crate::KeyFormat, expected: crate::KeyFormat },

    /// A wrapped-key blob that does not decode: damaged or not one.
    #[error("wrapped key is damaged: {0}")]
    Corrupt(String),

    /// A wrapped-key blob of a version or cipher this binary does not know.
    #[error("wrapped key {0}")]
    Unsupported(String),

    /// The system's random source or the crypto library failed (never
    /// expected; nothing is written when it happens).
    #[error("crypto library failure: {0}")]
    Crypto(&'static str),
}
