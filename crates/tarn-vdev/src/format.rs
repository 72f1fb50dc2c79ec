//! Byte layouts of labels and uberblock slots. This file alone knows them.
//!
//! Every decode is bounds-checked and returns `Err(FormatError)` on bad
//! input; nothing here can panic on device contents.
//!
//! Label config area (at offset [`CONFIG_OFFSET`] of each label copy,
//! [`CONFIG_SIZE`] bytes), little-endian:
//!
//! | bytes    | field                                  |
//! |----------|----------------------------------------|
//! | 0..8     | magic `b"TARNLBL1"`                    |
//! | 8..12    | version u32 (1; 2 when the config lists features) |
//! | 12..16   | payload_len u32                        |
//! | 16..48   | blake3 of the payload                  |
//! | 48..     | payload: JSON of `Label`, payload_len bytes |
//!
//! Uberblock slot ([`UB_SLOT_SIZE`] bytes), little-endian:
//!
//! | bytes    | field                                  |
//! |----------|----------------------------------------|
//! | 0..8     | magic `b"TARNUBR1"`                    |
//! | 8..12    | version u32 (= 1)                      |
//! | 12..16   | payload_len u32 (≤ 900)                |
//! | 16..24   | txg u64                                |
//! | 24..32   | timestamp_ns u64                       |
//! | 32..40   | pool_guid u64                          |
//! | 40..940  | payload, zero-padded to 900 bytes      |
//! | 940..992 | zero                                   |
//! | 992..1024| blake3 of bytes 0..992                 |

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

pub const KIB: u64 = 1024;
/// One label copy.
pub const LABEL_SIZE: u64 = 256 * KIB;
/// Config area inside a label copy.
pub const CONFIG_OFFSET: u64 = 8 * KIB;
pub const CONFIG_SIZE: u64 = 120 * KIB;
/// Uberblock ring inside a label copy.
pub const RING_OFFSET: u64 = 128 * KIB;
pub const UB_SLOT_SIZE: u64 = 1024;
pub const UB_SLOTS: u64 = 128;

pub const LABEL_MAGIC: &[u8; 8] = b"TARNLBL1";
pub const LABEL_VERSION: u32 = 1;
/// Labels of pools that use features (`PoolConfig.features`): binaries
/// from before features existed refuse them.
pub const LABEL_VERSION_FEATURES: u32 = 2;
pub const LABEL_HEADER_SIZE: usize = 48;
pub const LABEL_PAYLOAD_MAX: usize = CONFIG_SIZE as usize - LABEL_HEADER_SIZE;

pub const UB_MAGIC: &[u8; 8] = b"TARNUBR1";
pub const UB_VERSION: u32 = 1;
pub const UB_HEADER_SIZE: usize = 40;
pub const UB_PAYLOAD_MAX: usize = 900;
const UB_CHECKSUM_OFFSET: usize = 992;

const _: () = assert!(UB_HEADER_SIZE + UB_PAYLOAD_MAX <= UB_CHECKSUM_OFFSET);
const _: () = assert!(UB_CHECKSUM_OFFSET + 32 == UB_SLOT_SIZE as usize);
const _: () = assert!(UB_SLOTS * UB_SLOT_SIZE == LABEL_SIZE - RING_OFFSET);
const _: () = assert!(CONFIG_OFFSET + CONFIG_SIZE == RING_OFFSET);

#[derive(Debug, PartialEq)]
pub enum FormatError {
    /// No magic: this is not (or no longer) a tarn structure.
    NoMagic,
    BadChecksum,
    UnsupportedVersion(u32),
    Malformed(String),
}

fn le_u32(buf: &[u8], at: usize) -> Result<u32, FormatError> {
    let bytes = buf.get(at..at + 4).ok_or_else(|| FormatError::Malformed(format!("short read at {at}")))?;
    let mut a = [0u8; 4];
    a.copy_from_slice(bytes);
    Ok(u32::from_le_bytes(a))
}

fn le_u64(buf: &[u8], at: usize) -> Result<u64, FormatError> {
    let bytes = buf.get(at..at + 8).ok_or_else(|| FormatError::Malformed(format!("short read at {at}")))?;
    let mut a = [0u8; 8];
    a.copy_from_slice(bytes);
    Ok(u64::from_le_bytes(a))
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) -> Result<(), FormatError> {
    buf.get_mut(at..at + bytes.len())
        .ok_or_else(|| FormatError::Malformed(format!("field at {at} does not fit")))?
        .copy_from_slice(bytes);
    Ok(())
}

/// Encodes a config area (exactly `CONFIG_SIZE` bytes) around `payload`,
/// as label format `version`.
pub fn encode_config(payload: &[u8], version: u32) -> Result<Vec<u8>, FormatError> {
    if payload.len() > LABEL_PAYLOAD_MAX {
        return Err(FormatError::Malformed(format!(
            "label config is {} bytes, more than the {LABEL_PAYLOAD_MAX} that fit",
            payload.len()
        )));
    }
    let mut buf = vec![0u8; CONFIG_SIZE as usize];
    put(&mut buf, 0, LABEL_MAGIC)?;
    if !(LABEL_VERSION..=LABEL_VERSION_FEATURES).contains(&version) {
        return Err(FormatError::UnsupportedVersion(version));
    }
    put(&mut buf, 8, &version.to_le_bytes())?;
    put(&mut buf, 12, &(payload.len() as u32).to_le_bytes())?;
    put(&mut buf, 16, blake3::hash(payload).as_bytes())?;
    put(&mut buf, LABEL_HEADER_SIZE, payload)?;
    Ok(buf)
}

/// Decodes a config area and returns the verified payload.
pub fn decode_config(buf: &[u8]) -> Result<&[u8], FormatError> {
    if buf.get(0..8) != Some(&LABEL_MAGIC[..]) {
        return Err(FormatError::NoMagic);
    }
    let version = le_u32(buf, 8)?;
    if !(LABEL_VERSION..=LABEL_VERSION_FEATURES).contains(&version) {
        return Err(FormatError::UnsupportedVersion(version));
    }
    let len = le_u32(buf, 12)? as usize;
    if len > LABEL_PAYLOAD_MAX {
        return Err(FormatError::Malformed(format!("label payload length {len} exceeds {LABEL_PAYLOAD_MAX}")));
    }
    let sum = buf.get(16..48).ok_or_else(|| FormatError::Malformed("short label header".into()))?;
    let payload = buf
        .get(LABEL_HEADER_SIZE..LABEL_HEADER_SIZE + len)
        .ok_or_else(|| FormatError::Malformed("label payload is cut short".into()))?;
    if blake3::hash(payload).as_bytes() != sum {
        return Err(FormatError::BadChecksum);
    }
    Ok(payload)
}

/// An uberblock slot's decoded fields.
#[derive(Clone, Debug, PartialEq)]
pub struct UberblockPhys {
    pub txg: u64,
    pub timestamp_ns: u64,
    pub pool_guid: u64,
    pub payload: Vec<u8>,
}

pub fn encode_uberblock(ub: &UberblockPhys) -> Result<Vec<u8>, FormatError> {
    if ub.payload.len() > UB_PAYLOAD_MAX {
        return Err(FormatError::Malformed(format!(
            "uberblock payload is {} bytes, at most {UB_PAYLOAD_MAX} fit",
            ub.payload.len()
        )));
    }
    let mut buf = vec![0u8; UB_SLOT_SIZE as usize];
    put(&mut buf, 0, UB_MAGIC)?;
    put(&mut buf, 8, &UB_VERSION.to_le_bytes())?;
    put(&mut buf, 12, &(ub.payload.len() as u32).to_le_bytes())?;
    put(&mut buf, 16, &ub.txg.to_le_bytes())?;
    put(&mut buf, 24, &ub.timestamp_ns.to_le_bytes())?;
    put(&mut buf, 32, &ub.pool_guid.to_le_bytes())?;
    put(&mut buf, UB_HEADER_SIZE, &ub.payload)?;
    let sum = blake3::hash(buf.get(..UB_CHECKSUM_OFFSET).unwrap_or(&[]));
    put(&mut buf, UB_CHECKSUM_OFFSET, sum.as_bytes())?;
    Ok(buf)
}

pub fn decode_uberblock(buf: &[u8]) -> Result<UberblockPhys, FormatError> {
    if buf.get(0..8) != Some(&UB_MAGIC[..]) {
        return Err(FormatError::NoMagic);
    }
    let body = buf.get(..UB_CHECKSUM_OFFSET).ok_or_else(|| FormatError::Malformed("short uberblock slot".into()))?;
    let sum = buf
        .get(UB_CHECKSUM_OFFSET..UB_CHECKSUM_OFFSET + 32)
        .ok_or_else(|| FormatError::Malformed("short uberblock slot".into()))?;
    if blake3::hash(body).as_bytes() != sum {
        return Err(FormatError::BadChecksum);
    }
    let version = le_u32(buf, 8)?;
    if version != UB_VERSION {
        return Err(FormatError::UnsupportedVersion(version));
    }
    let len = le_u32(buf, 12)? as usize;
    if len > UB_PAYLOAD_MAX {
        return Err(FormatError::Malformed(format!("uberblock payload length {len} exceeds {UB_PAYLOAD_MAX}")));
    }
    let payload = buf
        .get(UB_HEADER_SIZE..UB_HEADER_SIZE + len)
        .ok_or_else(|| FormatError::Malformed("uberblock payload is cut short".into()))?
        .to_vec();
    Ok(UberblockPhys { txg: le_u64(buf, 16)?, timestamp_ns: le_u64(buf, 24)?, pool_guid: le_u64(buf, 32)?, payload })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn config_roundtrip_and_damage() {
        let enc = encode_config(b"{\"a\":1}", LABEL_VERSION).unwrap();
        assert_eq!(enc.len(), CONFIG_SIZE as usize);
        assert_eq!(decode_config(&enc).unwrap(), b"{\"a\":1}");
        let mut bad = enc.clone();
        bad[50] ^= 1;
        assert_eq!(decode_config(&bad), Err(FormatError::BadChecksum));
        let v2 = encode_config(b"{\"a\":1}", LABEL_VERSION_FEATURES).unwrap();
        assert_eq!(v2[8], 2);
        assert_eq!(decode_config(&v2).unwrap(), b"{\"a\":1}");
        let mut v3 = enc.clone();
        v3[8] = 3;
        assert_eq!(decode_config(&v3), Err(FormatError::UnsupportedVersion(3)));
        assert_eq!(encode_config(b"{}", 3), Err(FormatError::UnsupportedVersion(3)));
        let mut long = enc.clone();
        long[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode_config(&long), Err(FormatError::Malformed(_))));
        assert!(matches!(decode_config(&enc[..50]), Err(FormatError::Malformed(_))));
        assert_eq!(decode_config(&[]), Err(FormatError::NoMagic));
        assert!(encode_config(&vec![0; LABEL_PAYLOAD_MAX + 1], LABEL_VERSION).is_err());
    }

    #[test]
    fn uberblock_roundtrip_and_damage() {
        let ub = UberblockPhys { txg: 7, timestamp_ns: 9, pool_guid: 11, payload: vec![3; 900] };
        let enc = encode_uberblock(&ub).unwrap();
        assert_eq!(decode_uberblock(&enc).unwrap(), ub);
        for i in [0usize, 9, 20, 500, 1000] {
            let mut bad = enc.clone();
            bad[i] ^= 0x10;
            assert!(decode_uberblock(&bad).is_err(), "flip at {i}");
        }
        assert!(decode_uberblock(&enc[..500]).is_err());
        assert!(encode_uberblock(&UberblockPhys { payload: vec![0; 901], ..ub }).is_err());
    }
}
