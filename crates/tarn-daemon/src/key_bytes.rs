//! `KeyBytes`: key material inside a request (what the CLI read at a
//! prompt or from stdin, for the daemon to check and use).
//!
//! It lives in a [`tarn_keys::Secret`] on both sides — locked, left out of
//! core dumps, zeroed when dropped — and travels as one JSON string of hex
//! digits, not as the array of numbers serde makes of a `Vec<u8>`:
//! - serializing writes the digits from a secret of their own into the
//!   request line (`proto::request_line`, whose caller zeroes the line);
//! - deserializing takes the string by value (serde_json hands a
//!   `Value`'s strings over, and serde's buffering of internally tagged
//!   enums moves them), decodes it straight into a secret and zeroes it.
//!   An array of numbers would leave the key behind in the parser's
//!   values, which nothing zeroes.
//!
//! The server zeroes the buffers the line passed through (`server.rs`).

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tarn_keys::Secret;
use zeroize::Zeroize;

/// The most key material one request carries, in bytes (a raw key read
/// from stdin is at most 4097: one more than a key file may hold).
pub const KEY_BYTES_MAX: usize = 8192;

#[derive(Clone)]
pub struct KeyBytes(Secret);

impl KeyBytes {
    pub fn new(secret: Secret) -> KeyBytes {
        KeyBytes(secret)
    }

    /// The key material. Copy it nowhere that is not a `Secret`.
    pub fn expose(&self) -> &[u8] {
        self.0.expose()
    }
}

impl fmt::Debug for KeyBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyBytes({} bytes)", self.0.len())
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl Serialize for KeyBytes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut digits = Secret::zeroed(2 * self.0.len());
        for (byte, pair) in self.0.expose().iter().zip(digits.expose_mut().chunks_exact_mut(2)) {
            pair[0] = HEX[usize::from(byte >> 4)];
            pair[1] = HEX[usize::from(byte & 15)];
        }
        let text = std::str::from_utf8(digits.expose()).map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(text)
    }
}

fn digit(d: u8) -> Option<u8> {
    match d {
        b'0'..=b'9' => Some(d - b'0'),
        b'a'..=b'f' => Some(d - b'a' + 10),
        b'A'..=b'F' => Some(d - b'A' + 10),
        _ => None,
    }
}

/// Hex digits decoded into a secret (the error names no digit).
fn decode(digits: &[u8]) -> Result<KeyBytes, &'static str> {
    if !digits.len().is_multiple_of(2) || digits.len() > 2 * KEY_BYTES_MAX {
        return Err("key material in a request is not an even number of at most 16384 hex digits");
    }
    let mut secret = Secret::zeroed(digits.len() / 2);
    for (pair, out) in digits.chunks_exact(2).zip(secret.expose_mut()) {
        let (Some(high), Some(low)) = (digit(pair[0]), digit(pair[1])) else {
            return Err("key material in a request is not hex");
        };
        *out = (high << 4) | low;
    }
    Ok(KeyBytes(secret))
}

struct KeyVisitor;

impl Visitor<'_> for KeyVisitor {
    type Value = KeyBytes;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("key material as a string of hex digits")
    }

    /// A string the deserializer lends (the caller's text, which it zeroes).
    fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyBytes, E> {
        decode(v.as_bytes()).map_err(E::custom)
    }

    /// A string handed over: decoded, then zeroed.
    fn visit_string<E: de::Error>(self, mut v: String) -> Result<KeyBytes, E> {
        let key = decode(v.as_bytes());
        v.zeroize();
        key.map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for KeyBytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<KeyBytes, D::Error> {
        deserializer.deserialize_string(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{parse_request_line, request_line, Request};

    fn load_key(key: &[u8]) -> Request {
        Request::LoadKey { dataset: "tank/a".into(), noop: false, location: None, key: Some(KeyBytes::new(Secret::from_slice(key))) }
    }

    #[test]
    fn a_key_travels_as_hex_and_comes_back_whole() {
        let key: Vec<u8> = (0..=255u8).chain([b'\n', 0]).collect();
        let line = request_line(&load_key(&key), Some(&["tarn".into(), "load-key".into()])).unwrap();
        let digits: String = key.iter().map(|b| format!("{b:02x}")).collect();
        assert!(line.contains(&format!(r#""key":"{digits}""#)), "{line}");
        let (request, argv) = parse_request_line(&line).unwrap();
        let Request::LoadKey { key: Some(got), .. } = request else { panic!("{request:?}") };
        assert_eq!(got.expose(), &key[..]);
        assert_eq!(argv.unwrap(), ["tarn", "load-key"]);
        assert_eq!(format!("{got:?}"), "KeyBytes(258 bytes)");
        // Upper-case digits are taken too.
        let (request, _) = parse_request_line(&line.replace(&digits, &digits.to_ascii_uppercase())).unwrap();
        assert!(matches!(request, Request::LoadKey { key: Some(k), .. } if k.expose() == &key[..]));
    }

    #[test]
    fn bad_key_text_is_a_one_line_error() {
        for bad in [r#""abc""#, r#""zz""#, "[1,2,3]", &format!("\"{}\"", "00".repeat(KEY_BYTES_MAX + 1))] {
            let line = format!(r#"{{"cmd":"load_key","dataset":"tank/a","noop":false,"location":null,"key":{bad}}}"#);
            let e = parse_request_line(&line).expect_err(bad).to_string();
            assert!(!e.contains('\n') && !e.contains("00000"), "{e}");
        }
    }
}
