//! `keyformat` and `keylocation`, spelled as ZFS users write them.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::KeyError;

/// `keyformat`: how the user's key is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyFormat {
    /// 8 to 512 bytes, stretched by a KDF (argon2id or PBKDF2).
    Passphrase,
    /// 64 hex digits: the 32-byte wrapping key itself.
    Hex,
    /// 32 bytes: the wrapping key itself.
    Raw,
}

impl KeyFormat {
    pub const ALL: [KeyFormat; 3] = [KeyFormat::Passphrase, KeyFormat::Hex, KeyFormat::Raw];

    pub fn as_str(self) -> &'static str {
        match self {
            KeyFormat::Passphrase => "passphrase",
            KeyFormat::Hex => "hex",
            KeyFormat::Raw => "raw",
        }
    }

    /// The number in the wrapped-key blob.
    pub(crate) fn code(self) -> u8 {
        match self {
            KeyFormat::Passphrase => 1,
            KeyFormat::Hex => 2,
            KeyFormat::Raw => 3,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<KeyFormat> {
        KeyFormat::ALL.into_iter().find(|f| f.code() == code)
    }
}

impl fmt::Display for KeyFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for KeyFormat {
    type Err = KeyError;

    fn from_str(text: &str) -> Result<KeyFormat, KeyError> {
        KeyFormat::ALL.into_iter().find(|f| f.as_str() == text).ok_or_else(|| KeyError::BadProperty {
            property: "keyformat",
            value: printable(text),
            expected: "must be one of passphrase, hex, raw",
        })
    }
}

/// `keylocation`: where `load-key` finds the key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KeyLocation {
    /// Asked for on the terminal (by the CLI).
    Prompt,
    /// Read from this file; the path is absolute.
    File(PathBuf),
}

const LOCATION_EXPECTED: &str = "must be prompt or file:///absolute/path";

impl KeyLocation {
    /// A file location; `path` must be absolute.
    pub fn file(path: &Path) -> Result<KeyLocation, KeyError> {
        let text = path.to_str().ok_or_else(|| KeyError::BadProperty {
            property: "keylocation",
            value: printable(&path.to_string_lossy()),
            expected: "the path must be UTF-8",
        })?;
        format!("file://{text}").parse()
    }
}

impl fmt::Display for KeyLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyLocation::Prompt => f.write_str("prompt"),
            // Parsed from UTF-8, so display is lossless.
            KeyLocation::File(path) => write!(f, "file://{}", path.display()),
        }
    }
}

impl FromStr for KeyLocation {
    type Err = KeyError;

    fn from_str(text: &str) -> Result<KeyLocation, KeyError> {
        let bad = |expected| KeyError::BadProperty { property: "keylocation", value: printable(text), expected };
        if text == "prompt" {
            return Ok(KeyLocation::Prompt);
        }
        let path = text.strip_prefix("file://").ok_or_else(|| bad(LOCATION_EXPECTED))?;
        if !path.starts_with('/') {
            return Err(bad("the path must be absolute (file:///path)"));
        }
        if path.contains('\0') || path.contains('\n') {
            return Err(bad("the path holds a NUL or newline"));
        }
        Ok(KeyLocation::File(PathBuf::from(path)))
    }
}

/// A user's value as it can appear in a one-line message: control
/// characters escaped, long values cut.
fn printable(text: &str) -> String {
    let mut out: String = text.chars().take(200).flat_map(char::escape_debug).collect();
    if text.chars().count() > 200 {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse_and_print_as_zfs_spells_them() {
        for f in KeyFormat::ALL {
            assert_eq!(f.to_string().parse::<KeyFormat>().expect("parse"), f);
            assert_eq!(KeyFormat::from_code(f.code()), Some(f));
        }
        assert_eq!(KeyFormat::from_code(0), None);
        assert_eq!(KeyFormat::from_code(4), None);
        for bad in ["", "Passphrase", "hex ", "none", "aes"] {
            let err = bad.parse::<KeyFormat>().expect_err(bad);
            assert_eq!(err.to_string(), format!("invalid keyformat '{bad}': must be one of passphrase, hex, raw"));
        }
    }

    #[test]
    fn locations_parse_and_print_as_zfs_spells_them() {
        assert_eq!("prompt".parse::<KeyLocation>().expect("prompt"), KeyLocation::Prompt);
        let loc: KeyLocation = "file:///etc/tarn/keys/media.key".parse().expect("file");
        assert_eq!(loc, KeyLocation::File(PathBuf::from("/etc/tarn/keys/media.key")));
        assert_eq!(loc.to_string(), "file:///etc/tarn/keys/media.key");
        assert_eq!(KeyLocation::file(Path::new("/k")).expect("file"), KeyLocation::File("/k".into()));
        let cases = [
            ("", "invalid keylocation '': must be prompt or file:///absolute/path"),
            ("Prompt", "invalid keylocation 'Prompt': must be prompt or file:///absolute/path"),
            ("/etc/key", "invalid keylocation '/etc/key': must be prompt or file:///absolute/path"),
            ("https://x/key", "invalid keylocation 'https://x/key': must be prompt or file:///absolute/path"),
            ("file://etc/key", "invalid keylocation 'file://etc/key': the path must be absolute (file:///path)"),
            ("file://", "invalid keylocation 'file://': the path must be absolute (file:///path)"),
            ("file:///a\nb", "invalid keylocation 'file:///a\\nb': the path holds a NUL or newline"),
        ];
        for (text, message) in cases {
            let err = text.parse::<KeyLocation>().expect_err(text);
            assert_eq!(err.to_string(), message);
            assert!(!err.to_string().contains('\n'));
        }
        assert!(KeyLocation::file(Path::new("rel/key")).is_err());
    }
}
