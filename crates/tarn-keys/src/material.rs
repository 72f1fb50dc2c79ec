//! Key material: what the user gives (typed at a prompt or read from a
//! key file), checked as OpenZFS checks it and held in a [`Secret`].
//!
//! - raw: exactly 32 bytes, taken as they are (a newline is a key byte);
//! - hex: exactly 64 hex digits, one trailing newline allowed; decoded to
//!   32 bytes here, so no copy of the digits outlives the check;
//! - passphrase: 8 to 512 bytes after one trailing newline is stripped.
//!
//! A key file is read into locked memory, at most [`KEY_FILE_MAX`] bytes:
//! anything longer is no key file (and reading `/dev/zero` by mistake
//! stops at once).

use std::io::Read;
use std::path::Path;

use crate::{KeyError, KeyFormat, KeyLocation, Secret};

pub const RAW_KEY_LEN: usize = 32;
pub const HEX_KEY_LEN: usize = 64;
pub const PASSPHRASE_MIN: usize = 8;
pub const PASSPHRASE_MAX: usize = 512;
/// The largest key file read; longer files are refused.
pub const KEY_FILE_MAX: usize = 4096;

/// Checked key material of one format. For hex and raw the 32 bytes are
/// the wrapping key; a passphrase goes through the KDF.
pub struct KeyMaterial {
    format: KeyFormat,
    bytes: Secret,
}

impl KeyMaterial {
    /// Checks `input` as `format` requires (what the CLI read at a prompt,
    /// or from standard input). The caller zeroes its own copy.
    pub fn from_bytes(format: KeyFormat, input: &[u8]) -> Result<KeyMaterial, KeyError> {
        let bytes = match format {
            KeyFormat::Raw => {
                if input.len() != RAW_KEY_LEN {
                    return Err(KeyError::RawKeyLength { got: input.len() });
                }
                Secret::from_slice(input)
            }
            KeyFormat::Hex => {
                let digits = input.strip_suffix(b"\n").unwrap_or(input);
                if digits.len() != HEX_KEY_LEN {
                    return Err(KeyError::HexKeyLength { got: digits.len() });
                }
                let mut key = Secret::zeroed(RAW_KEY_LEN);
                for (i, (pair, out)) in digits.chunks_exact(2).zip(key.expose_mut()).enumerate() {
                    let [high, low] = [pair[0], pair[1]];
                    let high = hex_value(high).ok_or(KeyError::HexKeyDigit { position: 2 * i + 1 })?;
                    let low = hex_value(low).ok_or(KeyError::HexKeyDigit { position: 2 * i + 2 })?;
                    *out = (high << 4) | low;
                }
                key
            }
            KeyFormat::Passphrase => {
                let phrase = input.strip_suffix(b"\n").unwrap_or(input);
                if phrase.len() < PASSPHRASE_MIN {
                    return Err(KeyError::PassphraseTooShort { got: phrase.len(), min: PASSPHRASE_MIN });
                }
                if phrase.len() > PASSPHRASE_MAX {
                    return Err(KeyError::PassphraseTooLong { got: phrase.len(), max: PASSPHRASE_MAX });
                }
                Secret::from_slice(phrase)
            }
        };
        Ok(KeyMaterial { format, bytes })
    }

    /// Reads and checks the key at `location`; `Prompt` is the CLI's job
    /// ([`KeyError::PromptNeeded`]).
    pub fn read(format: KeyFormat, location: &KeyLocation) -> Result<KeyMaterial, KeyError> {
        match location {
            KeyLocation::Prompt => Err(KeyError::PromptNeeded),
            KeyLocation::File(path) => KeyMaterial::read_file(format, path),
        }
    }

    /// Reads and checks a key file (at most [`KEY_FILE_MAX`] bytes).
    pub fn read_file(format: KeyFormat, path: &Path) -> Result<KeyMaterial, KeyError> {
        let location = format!("file://{}", path.display());
        let fail = |reason: String| KeyError::KeyFile { location: location.clone(), reason };
        let mut file = std::fs::File::open(path).map_err(|e| fail(os_reason(&e)))?;
        let mut buffer = Secret::zeroed(KEY_FILE_MAX + 1);
        let mut filled = 0;
        while let Some(rest) = buffer.expose_mut().get_mut(filled..).filter(|rest| !rest.is_empty()) {
            match file.read(rest) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(fail(os_reason(&e))),
            }
        }
        if filled > KEY_FILE_MAX {
            return Err(fail(format!("larger than {KEY_FILE_MAX} bytes, not a key file")));
        }
        buffer.truncate(filled);
        KeyMaterial::from_bytes(format, buffer.expose())
    }

    pub fn format(&self) -> KeyFormat {
        self.format
    }

    /// The checked bytes: the passphrase, or the 32-byte hex/raw key.
    pub(crate) fn bytes(&self) -> &[u8] {
        self.bytes.expose()
    }
}

impl std::fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyMaterial(keyformat={}, {} bytes)", self.format, self.bytes.len())
    }
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// The system's text for an I/O error, without Rust's "(os error N)".
fn os_reason(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.rfind(" (os error ") {
        Some(cut) => text[..cut].to_string(),
        None => text,
    }
}
