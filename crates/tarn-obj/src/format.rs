//! Byte layouts of the object layer. Everything little-endian.
//!
//! DnodePhys (512 bytes):
//! | off | size | field |
//! |----:|-----:|-------|
//! | 0   | 1  | object type (0 = free slot) |
//! | 1   | 1  | levels of the block tree (1 = the dnode's pointers address data blocks) |
//! | 2   | 1  | number of block pointers (3) |
//! | 3   | 1  | flags (bit 0: in use; bit 1: metadata — a ZAP map, not user data) |
//! | 4   | 4  | data block size in bytes |
//! | 8   | 8  | number of data blocks (highest block id + 1, an upper bound) |
//! | 16  | 8  | bytes allocated to this object's blocks (all copies, all levels) |
//! | 24  | 8  | reserved |
//! | 32  | 384 | three block pointers |
//! | 416 | 96 | bonus: owner-defined attributes (tarn-fs keeps the inode here) |
//!
//! Indirect blocks are 128 KiB arrays of 1024 block pointers.
//! A block tree of `levels` L covers 3 × 1024^(L-1) data blocks.
//!
//! ObjsetPhys (1024 bytes, stored as one block): magic `b"TARNOBJS"`,
//! version u32, kind u32 (0 MOS, 1 dataset), the meta-dnode (512 bytes)
//! whose data blocks (16 KiB) are arrays of 32 DnodePhys, then next_object,
//! used_bytes, logical_bytes, object_count, next_objset, prev_snap_txg,
//! deadlist, data_logical, data_bytes (u64 each), then at byte 600 the
//! intent log header (168 bytes, `zil/format.rs`; zeros in object sets
//! written before it existed: no log), at byte 768 the encryption: cipher
//! u8 (0 = not encrypted, else tarn-block's cipher code), 7 zero bytes, the
//! key guid u64 (crypt.rs); zero pad.
//!
//! Uberblock payload: version u32, 4 reserved, MOS root block pointer (128),
//! space map log head block pointer (128), space map chain records u64.

use tarn_block::BlockPtr;

use crate::{ObjError, Result, BONUS_LEN};

pub const DNODE_SIZE: usize = 512;
pub const NBPS: usize = 3;
pub const IND_BLOCK_SIZE: usize = 128 * 1024;
pub const EPB_SHIFT: u32 = 10;
pub const EPB: u64 = 1 << EPB_SHIFT;
pub const META_BLOCK_SIZE: u32 = 16 * 1024;
pub const DNODES_PER_BLOCK: u64 = META_BLOCK_SIZE as u64 / DNODE_SIZE as u64;
pub const OBJSET_PHYS_SIZE: usize = 1024;
pub const MAX_LEVELS: u8 = 7;

pub const OBJSET_MAGIC: &[u8; 8] = b"TARNOBJS";
pub const FORMAT_VERSION: u32 = 1;

/// Object types the object layer itself uses.
pub const OT_META_DNODE: u8 = 1;
pub const OT_INDIRECT: u8 = 3;
pub const OT_OBJSET: u8 = 4;
pub const OT_OBJSET_TABLE: u8 = 5;

#[derive(Clone, Debug, PartialEq)]
pub struct DnodePhys {
    pub otype: u8,
    pub nlevels: u8,
    pub flags: u8,
    pub block_size: u32,
    pub nblocks: u64,
    pub used_bytes: u64,
    pub bps: [BlockPtr; NBPS],
    pub bonus: [u8; BONUS_LEN],
}

pub const DN_IN_USE: u8 = 1;
/// The object is metadata (a ZAP map: directories, attribute maps, the
/// dataset tables), not user data: its blocks are left out of
/// `data_logical`/`data_bytes` (what `compressratio` divides).
pub const DN_METADATA: u8 = 2;

impl DnodePhys {
    pub fn empty() -> DnodePhys {
        DnodePhys { otype: 0, nlevels: 1, flags: 0, block_size: 0, nblocks: 0, used_bytes: 0, bps: [BlockPtr::HOLE; NBPS], bonus: [0; BONUS_LEN] }
    }

    pub fn in_use(&self) -> bool {
        self.flags & DN_IN_USE != 0
    }

    /// Data blocks addressable with the current number of levels.
    pub fn capacity(&self) -> u64 {
        capacity(self.nlevels)
    }

    pub fn encode(&self, out: &mut [u8]) {
        out[..DNODE_SIZE].fill(0);
        if !self.in_use() {
            return;
        }
        out[0] = self.otype;
        out[1] = self.nlevels;
        out[2] = NBPS as u8;
        out[3] = self.flags;
        out[4..8].copy_from_slice(&self.block_size.to_le_bytes());
        out[8..16].copy_from_slice(&self.nblocks.to_le_bytes());
        out[16..24].copy_from_slice(&self.used_bytes.to_le_bytes());
        for (i, bp) in self.bps.iter().enumerate() {
            out[32 + i * 128..32 + (i + 1) * 128].copy_from_slice(&bp.encode());
        }
        out[416..512].copy_from_slice(&self.bonus);
    }

    pub fn decode(b: &[u8]) -> Result<DnodePhys> {
        let b = b.get(..DNODE_SIZE).ok_or_else(|| ObjError::Corrupt("short dnode".into()))?;
        if b[3] & DN_IN_USE == 0 {
            return Ok(DnodePhys::empty());
        }
        let nlevels = b[1];
        if nlevels == 0 || nlevels > MAX_LEVELS || b[2] as usize != NBPS {
            return Err(ObjError::Corrupt(format!("dnode with {nlevels} levels, {} pointers", b[2])));
        }
        let block_size = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        if block_size == 0 || block_size > crate::MAX_BLOCK_SIZE || block_size % 512 != 0 {
            return Err(ObjError::Corrupt(format!("dnode block size {block_size}")));
        }
        let mut bps = [BlockPtr::HOLE; NBPS];
        for (i, bp) in bps.iter_mut().enumerate() {
            *bp = BlockPtr::decode(&b[32 + i * 128..32 + (i + 1) * 128]).map_err(ObjError::Corrupt)?;
        }
        let mut bonus = [0u8; BONUS_LEN];
        bonus.copy_from_slice(&b[416..512]);
        let nblocks = u64::from_le_bytes(b[8..16].try_into().map_err(|_| ObjError::Corrupt("dnode".into()))?);
        if nblocks > capacity(nlevels) || nblocks.checked_mul(block_size as u64).is_none() {
            return Err(ObjError::Corrupt(format!("dnode claims {nblocks} blocks with {nlevels} levels")));
        }
        Ok(DnodePhys {
            otype: b[0],
            nlevels,
            flags: b[3],
            block_size,
            nblocks,
            used_bytes: u64::from_le_bytes(b[16..24].try_into().map_err(|_| ObjError::Corrupt("dnode".into()))?),
            bps,
            bonus,
        })
    }
}

pub fn capacity(nlevels: u8) -> u64 {
    let mut c = NBPS as u64;
    for _ in 1..nlevels {
        c = c.saturating_mul(EPB);
    }
    c
}

/// Data blocks covered by one block pointer at `level`.
pub fn span(level: u8) -> u64 {
    1u64.checked_shl(EPB_SHIFT * level as u32).unwrap_or(u64::MAX)
}

#[derive(Clone, Debug, PartialEq)]
pub struct ObjsetPhys {
    pub kind: u32,
    pub meta: DnodePhys,
    pub next_object: u64,
    pub used_bytes: u64,
    pub logical_bytes: u64,
    pub object_count: u64,
    pub next_objset: u64,
    /// Txg of the newest snapshot of this object set (0: none): blocks born
    /// at or before it are shared with that snapshot.
    pub prev_snap_txg: u64,
    /// MOS object of the dead list (0: none yet).
    pub deadlist: u64,
    /// Logical bytes of the level-0 blocks of user-data objects (not
    /// `DN_METADATA`) referenced.
    pub data_logical: u64,
    /// Allocated bytes of those same blocks: `compressratio` is
    /// `data_logical / data_bytes`. (Object sets written before these two
    /// fields existed read them as 0 and count from their next writes.)
    pub data_bytes: u64,
    /// The intent log's header (zil/format.rs), rewritten by every sync of
    /// an object set that has a log.
    pub log: crate::zil::LogHeader,
    /// Encrypted object sets: cipher and key (crypt.rs).
    pub crypt: Option<crate::crypt::Crypt>,
}

/// Where `ObjsetPhys::crypt` is kept.
const CRYPT_OFFSET: usize = 768;

impl ObjsetPhys {
    pub fn new(kind: u32) -> ObjsetPhys {
        let mut meta = DnodePhys::empty();
        meta.flags = DN_IN_USE;
        meta.otype = OT_META_DNODE;
        meta.block_size = META_BLOCK_SIZE;
        ObjsetPhys {
            kind,
            meta,
            next_object: 16,
            used_bytes: 0,
            logical_bytes: 0,
            object_count: 0,
            next_objset: 1,
            prev_snap_txg: 0,
            deadlist: 0,
            data_logical: 0,
            data_bytes: 0,
            log: crate::zil::LogHeader::default(),
            crypt: None,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; OBJSET_PHYS_SIZE];
        b[0..8].copy_from_slice(OBJSET_MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.kind.to_le_bytes());
        self.meta.encode(&mut b[16..16 + DNODE_SIZE]);
        let o = 16 + DNODE_SIZE;
        let words = [
            self.next_object,
            self.used_bytes,
            self.logical_bytes,
            self.object_count,
            self.next_objset,
            self.prev_snap_txg,
            self.deadlist,
            self.data_logical,
            self.data_bytes,
        ];
        for (i, v) in words.iter().enumerate() {
            b[o + i * 8..o + i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        let l = crate::zil::format::LOG_HEADER_OFFSET;
        self.log.encode(&mut b[l..l + crate::zil::format::LOG_HEADER_SIZE]);
        if let Some(c) = self.crypt {
            b[CRYPT_OFFSET] = c.cipher.code();
            b[CRYPT_OFFSET + 8..CRYPT_OFFSET + 16].copy_from_slice(&c.key_guid.to_le_bytes());
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<ObjsetPhys> {
        if b.len() < OBJSET_PHYS_SIZE || &b[0..8] != OBJSET_MAGIC {
            return Err(ObjError::Corrupt("object set block has bad magic".into()));
        }
        let version = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        if version != FORMAT_VERSION {
            return Err(ObjError::Corrupt(format!("unsupported object set version {version}")));
        }
        let meta = DnodePhys::decode(&b[16..16 + DNODE_SIZE])?;
        let o = 16 + DNODE_SIZE;
        let u = |i: usize| u64::from_le_bytes(b[o + i * 8..o + i * 8 + 8].try_into().unwrap_or([0; 8]));
        Ok(ObjsetPhys {
            kind: u32::from_le_bytes([b[12], b[13], b[14], b[15]]),
            meta,
            next_object: u(0),
            used_bytes: u(1),
            logical_bytes: u(2),
            object_count: u(3),
            next_objset: u(4),
            prev_snap_txg: u(5),
            deadlist: u(6),
            data_logical: u(7),
            data_bytes: u(8),
            log: crate::zil::LogHeader::decode(&b[crate::zil::format::LOG_HEADER_OFFSET..])?,
            crypt: match b[CRYPT_OFFSET] {
                0 => None,
                code => Some(crate::crypt::Crypt {
                    cipher: tarn_block::Cipher::from_code(code).ok_or_else(|| ObjError::Corrupt(format!("object set with unknown cipher {code}")))?,
                    key_guid: u64::from_le_bytes(b[CRYPT_OFFSET + 8..CRYPT_OFFSET + 16].try_into().unwrap_or([0; 8])),
                }),
            },
        })
    }
}

pub struct UberPayload {
    pub mos_root: BlockPtr,
    pub spacemap_head: BlockPtr,
    pub spacemap_records: u64,
}

impl UberPayload {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; 272];
        b[0..4].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[8..136].copy_from_slice(&self.mos_root.encode());
        b[136..264].copy_from_slice(&self.spacemap_head.encode());
        b[264..272].copy_from_slice(&self.spacemap_records.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<UberPayload> {
        if b.len() < 272 {
            return Err(ObjError::Corrupt("uberblock payload too short".into()));
        }
        let version = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if version != FORMAT_VERSION {
            return Err(ObjError::Corrupt(format!("unsupported pool version {version}")));
        }
        Ok(UberPayload {
            mos_root: BlockPtr::decode(&b[8..136]).map_err(ObjError::Corrupt)?,
            spacemap_head: BlockPtr::decode(&b[136..264]).map_err(ObjError::Corrupt)?,
            spacemap_records: u64::from_le_bytes(b[264..272].try_into().unwrap_or([0; 8])),
        })
    }
}
