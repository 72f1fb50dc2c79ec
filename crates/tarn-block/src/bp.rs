//! The block pointer: how every block is found and verified.
//!
//! On disk a block pointer is 128 bytes, little-endian:
//!
//! | off | size | field |
//! |----:|-----:|-------|
//! | 0   | 48   | three DVAs of 16 bytes: `vdev u32`, `asize u32`, `offset u64` (an unused DVA is all zero with `asize == 0`) |
//! | 48  | 4    | `lsize` — logical (uncompressed) size in bytes |
//! | 52  | 4    | `psize` — physical size in bytes, a multiple of the vdev sector |
//! | 56  | 8    | `birth` — txg in which the block was written |
//! | 64  | 8    | `fill` — non-hole level-0 blocks at or below this one |
//! | 72  | 1    | compression (0 off, 1 lz4, 2 zstd) |
//! | 73  | 1    | checksum (1 fletcher4, 2 sha256, 3 blake3) |
//! | 74  | 1    | level in the object's tree (0 = data) |
//! | 75  | 1    | object type of the owning object |
//! | 76  | 1    | flags (bit 0: encrypted, see `crypt.rs`; bit 1: gang — every DVA points at a gang header, see `gang.rs`; bit 2: partly sealed — readable, parts sealed by the object layer; bit 3: children digest — the MAC field is a digest of the block pointers the block holds; bit 4: object set MAC — a keyed MAC of an object set root; see `crypt.rs`) |
//! | 77  | 1    | number of DVAs in use |
//! | 78  | 2    | reserved, zero |
//! | 80  | 32   | checksum of the physical block |
//! | 112 | 16   | MAC of an encrypted or partly sealed block (the GCM tag), or the children digest; zero otherwise |
//!
//! A hole is 128 zero bytes. Encrypted and partly sealed blocks keep at
//! most two copies: the third DVA's 16 bytes (32..48) carry the IV
//! instead: the key salt `u32` then the 96-bit nonce (`crypt.rs`).

use crate::{ChecksumKind, Compression};

pub const BP_SIZE: usize = 128;
pub const MAX_COPIES: usize = 3;
/// Bytes of [`BlockPtr::portable`].
pub const PORTABLE_LEN: usize = 52;

/// A data virtual address: where one copy of a block lives.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Dva {
    pub vdev: u32,
    /// Bytes of the vdev's address space the copy occupies (0 = unused DVA).
    pub asize: u32,
    /// Offset in the top-level vdev's address space.
    pub offset: u64,
}

impl Dva {
    pub fn is_empty(&self) -> bool {
        self.asize == 0
    }
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockPtr {
    pub dva: [Dva; MAX_COPIES],
    pub ndva: u8,
    pub lsize: u32,
    pub psize: u32,
    pub birth: u64,
    pub fill: u64,
    pub compression: u8,
    pub checksum_kind: u8,
    pub level: u8,
    pub otype: u8,
    pub flags: u8,
    pub checksum: [u8; 32],
    /// Encrypted blocks: key salt (4 bytes, little-endian) and nonce (12).
    pub iv: [u8; 16],
    /// Encrypted blocks: the GCM tag over the physical block.
    pub mac: [u8; 16],
}

pub const COMP_OFF: u8 = 0;
pub const COMP_LZ4: u8 = 1;
pub const COMP_ZSTD: u8 = 2;

impl BlockPtr {
    pub const HOLE: BlockPtr = BlockPtr {
        dva: [Dva { vdev: 0, asize: 0, offset: 0 }; MAX_COPIES],
        ndva: 0,
        lsize: 0,
        psize: 0,
        birth: 0,
        fill: 0,
        compression: 0,
        checksum_kind: 0,
        level: 0,
        otype: 0,
        flags: 0,
        checksum: [0; 32],
        iv: [0; 16],
        mac: [0; 16],
    };

    pub fn is_hole(&self) -> bool {
        self.ndva == 0
    }

    pub fn dvas(&self) -> &[Dva] {
        &self.dva[..(self.ndva as usize).min(MAX_COPIES)]
    }

    /// Total allocated bytes over all copies.
    pub fn asize(&self) -> u64 {
        self.dvas().iter().map(|d| d.asize as u64).sum()
    }

    pub fn checksum_kind(&self) -> Option<ChecksumKind> {
        match self.checksum_kind {
            1 => Some(ChecksumKind::Fletcher4),
            2 => Some(ChecksumKind::Sha256),
            3 => Some(ChecksumKind::Blake3),
            _ => None,
        }
    }

    pub fn encode(&self) -> [u8; BP_SIZE] {
        let mut b = [0u8; BP_SIZE];
        if self.is_hole() {
            return b;
        }
        for (i, d) in self.dva.iter().enumerate() {
            let o = i * 16;
            b[o..o + 4].copy_from_slice(&d.vdev.to_le_bytes());
            b[o + 4..o + 8].copy_from_slice(&d.asize.to_le_bytes());
            b[o + 8..o + 16].copy_from_slice(&d.offset.to_le_bytes());
        }
        b[48..52].copy_from_slice(&self.lsize.to_le_bytes());
        b[52..56].copy_from_slice(&self.psize.to_le_bytes());
        b[56..64].copy_from_slice(&self.birth.to_le_bytes());
        b[64..72].copy_from_slice(&self.fill.to_le_bytes());
        b[72] = self.compression;
        b[73] = self.checksum_kind;
        b[74] = self.level;
        b[75] = self.otype;
        b[76] = self.flags;
        b[77] = self.ndva;
        b[80..112].copy_from_slice(&self.checksum);
        if self.has_iv() {
            assert!((self.ndva as usize) < MAX_COPIES, "an encrypted block has at most two copies");
            b[32..48].copy_from_slice(&self.iv);
        }
        if self.flags & crate::crypt::SEALING_FLAGS != 0 {
            b[112..128].copy_from_slice(&self.mac);
        }
        b
    }

    pub fn is_encrypted(&self) -> bool {
        self.flags & crate::crypt::FLAG_ENCRYPTED != 0
    }

    /// Sealed whole or in part: the pointer carries an IV and a MAC (and
    /// so at most two copies).
    pub fn has_iv(&self) -> bool {
        self.flags & (crate::crypt::FLAG_ENCRYPTED | crate::crypt::FLAG_PARTLY_SEALED) != 0
    }

    /// The fields of this pointer that stay the same when its block is
    /// copied into another pool (a raw receive): sizes, compression,
    /// level, type, the sealing flags, fill, IV and MAC; not the addresses,
    /// the birth txg or the checksum. A parent's authentication covers
    /// these (docs/on-disk-format.md "Encryption"). Of a block whose
    /// *logical* contents are authenticated (an indirect block's children
    /// digest, a partly sealed dnode block) the physical size and
    /// compression are left out too: a receiver rebuilds those blocks and
    /// may store them differently (another sector size).
    pub fn portable(&self) -> [u8; PORTABLE_LEN] {
        let mut b = [0u8; PORTABLE_LEN];
        if self.is_hole() {
            return b;
        }
        b[0..4].copy_from_slice(&self.lsize.to_le_bytes());
        if self.flags & (crate::crypt::FLAG_CHILDREN_DIGEST | crate::crypt::FLAG_PARTLY_SEALED) == 0 {
            b[4..8].copy_from_slice(&self.psize.to_le_bytes());
            b[8] = self.compression;
        }
        b[9] = self.level;
        b[10] = self.otype;
        b[11] = self.flags & crate::crypt::SEALING_FLAGS;
        b[12..20].copy_from_slice(&self.fill.to_le_bytes());
        b[20..36].copy_from_slice(&self.iv);
        b[36..52].copy_from_slice(&self.mac);
        b
    }

    /// Decode a block pointer. Structural nonsense is `Err`, never a panic;
    /// the checksum still guards the contents it points to.
    pub fn decode(b: &[u8]) -> Result<BlockPtr, String> {
        let b: &[u8; BP_SIZE] = b
            .get(..BP_SIZE)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| "short block pointer".to_string())?;
        let u32at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64at = |o: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(x)
        };
        let ndva = b[77];
        if ndva == 0 {
            if b.iter().any(|&x| x != 0) {
                return Err("hole block pointer with non-zero fields".into());
            }
            return Ok(BlockPtr::HOLE);
        }
        if ndva as usize > MAX_COPIES {
            return Err(format!("block pointer with {ndva} copies"));
        }
        let encrypted = b[76] & (crate::crypt::FLAG_ENCRYPTED | crate::crypt::FLAG_PARTLY_SEALED) != 0;
        if encrypted && ndva as usize > MAX_COPIES - 1 {
            return Err(format!("encrypted block pointer with {ndva} copies"));
        }
        let mut dva = [Dva::default(); MAX_COPIES];
        let slots = if encrypted { MAX_COPIES - 1 } else { MAX_COPIES };
        for (i, d) in dva.iter_mut().enumerate().take(slots) {
            let o = i * 16;
            *d = Dva { vdev: u32at(o), asize: u32at(o + 4), offset: u64at(o + 8) };
        }
        let bp = BlockPtr {
            dva,
            ndva,
            lsize: u32at(48),
            psize: u32at(52),
            birth: u64at(56),
            fill: u64at(64),
            compression: b[72],
            checksum_kind: b[73],
            level: b[74],
            otype: b[75],
            flags: b[76],
            checksum: b[80..112].try_into().map_err(|_| "checksum field")?,
            iv: if encrypted { b[32..48].try_into().map_err(|_| "iv field")? } else { [0; 16] },
            mac: if b[76] & crate::crypt::SEALING_FLAGS != 0 { b[112..128].try_into().map_err(|_| "mac field")? } else { [0; 16] },
        };
        if bp.lsize == 0 || bp.psize == 0 || bp.lsize > (1 << 24) || bp.psize > (1 << 24) {
            return Err(format!("block pointer sizes lsize={} psize={}", bp.lsize, bp.psize));
        }
        if bp.compression > COMP_ZSTD || bp.checksum_kind().is_none() || bp.level > 16 {
            return Err("block pointer with unknown compression, checksum or level".into());
        }
        if bp.dvas().iter().any(|d| d.asize == 0) {
            return Err("block pointer with an empty copy".into());
        }
        Ok(bp)
    }
}

pub fn compression_code(c: Compression) -> u8 {
    match c {
        Compression::Off => COMP_OFF,
        Compression::Lz4 => COMP_LZ4,
        Compression::Zstd(_) => COMP_ZSTD,
    }
}

pub fn checksum_code(c: ChecksumKind) -> u8 {
    match c {
        ChecksumKind::Fletcher4 => 1,
        ChecksumKind::Sha256 => 2,
        ChecksumKind::Blake3 => 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn round_trip_and_hole() {
        let mut bp = BlockPtr::HOLE;
        assert_eq!(BlockPtr::decode(&bp.encode()).unwrap(), bp);
        bp.ndva = 2;
        bp.dva[0] = Dva { vdev: 1, asize: 4096, offset: 8192 };
        bp.dva[1] = Dva { vdev: 0, asize: 4096, offset: 1 << 40 };
        bp.lsize = 131072;
        bp.psize = 4096;
        bp.birth = 77;
        bp.fill = 1;
        bp.compression = COMP_LZ4;
        bp.checksum_kind = 3;
        bp.checksum = [9; 32];
        assert_eq!(BlockPtr::decode(&bp.encode()).unwrap(), bp);
        let mut junk = bp.encode();
        junk[77] = 9;
        assert!(BlockPtr::decode(&junk).is_err());
        assert!(BlockPtr::decode(&[1u8; 10]).is_err());
    }

    #[test]
    fn encrypted_round_trip_keeps_iv_and_mac_in_place_of_the_third_copy() {
        let mut bp = BlockPtr::HOLE;
        bp.ndva = 2;
        bp.dva[0] = Dva { vdev: 1, asize: 4096, offset: 8192 };
        bp.dva[1] = Dva { vdev: 0, asize: 4096, offset: 4096 };
        bp.lsize = 4096;
        bp.psize = 4096;
        bp.birth = 3;
        bp.fill = 1;
        bp.checksum_kind = 1;
        bp.flags = crate::crypt::FLAG_ENCRYPTED;
        bp.iv = [0x11; 16];
        bp.mac = [0x22; 16];
        let raw = bp.encode();
        assert_eq!(&raw[32..48], &[0x11; 16]);
        assert_eq!(&raw[112..128], &[0x22; 16]);
        assert_eq!(BlockPtr::decode(&raw).unwrap(), bp);
        let mut three = raw;
        three[77] = 3;
        assert!(BlockPtr::decode(&three).unwrap_err().contains("encrypted block pointer with 3 copies"));
        // The same bytes without the flag: the IV reads as a third DVA (of
        // a block pointer saying two copies), the MAC is dropped.
        let mut plain = raw;
        plain[76] = 0;
        let p = BlockPtr::decode(&plain).unwrap();
        assert_eq!((p.iv, p.mac, p.dvas().len()), ([0; 16], [0; 16], 2));
    }
}
