//! On-disk byte layouts of tarn-fs. Nothing else in the crate knows them.
//!
//! # Inode attributes (the object's 96-byte bonus), little-endian
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | mode: file type (S_IFMT bits) + permission bits |
//! | 4 | 4 | nlink |
//! | 8 | 4 | uid |
//! | 12 | 4 | gid |
//! | 16 | 8 | size in bytes (directories: entries + 2; symlinks: target length) |
//! | 24 | 8 | atime, i64 ns since the Unix epoch |
//! | 32 | 8 | mtime, i64 ns |
//! | 40 | 8 | ctime, i64 ns |
//! | 48 | 8 | crtime (birth), i64 ns |
//! | 56 | 8 | parent directory object id (for `..`; last parent for files) |
//! | 64 | 8 | generation (epoch << 40 \| txg of creation) |
//! | 72 | 8 | xattr directory object id (0 = none) |
//! | 80 | 8 | rdev (character/block devices) |
//! | 88 | 4 | flags (bit 0: in the unlinked set) |
//! | 92 | 2 | layout version = 1 |
//! | 94 | 2 | reserved, zero |
//!
//! Inode numbers and generations (file handles): an inode number is its
//! object id, and object ids are never reused inside an object set: tarn-obj
//! allocates them from `next_object`, which only grows. The generation is
//! `EPOCH << 40 | txg of creation` (EPOCH from the master node, below; the
//! root directory, made at format time, has epoch 0). A rollback restores an
//! older counter, but every txg after the rollback is newer than any
//! generation it discarded. A txg lost in a power cut is written again with
//! the same number and the same new ids, and with txgs in flight more than
//! one can be lost; but before the first inode each session (each open
//! of the file system) creates, `EPOCH` goes up by one and is synced, so
//! inodes created after the restart carry a higher epoch than any the crash
//! lost. (At the first creation, not at open: a mount that creates nothing
//! leaves the dataset unmodified.) So an (inode number, generation)
//! pair names one inode for the life of the dataset; NFS file handles carry
//! both, and a handle whose pair names no inode with a link is stale.
//!
//! # Master node (object 1, a ZAP)
//!
//! Keys (ASCII) → u64 LE values: `VERSION` (= 1), `ROOT` (root directory
//! object id), `UNLINKED` (unlinked-set ZAP object id), `EPOCH` (generation
//! epoch: raised by one and synced before the first creation of each open; absent = 0, in
//! file systems written before it existed).
//!
//! # Directory (a ZAP)
//!
//! Key: the entry name (1..=255 bytes, no `/` or NUL). Value (9 bytes):
//! u64 LE object id, u8 file type (DT_* value: 1 fifo, 2 chr, 4 dir, 6 blk,
//! 8 reg, 10 lnk, 12 sock). `.` and `..` are not stored.
//!
//! # Unlinked set (a ZAP)
//!
//! Key: u64 LE object id of an inode whose link count reached 0 while it was
//! still referenced; value empty. Emptied at mount.
//!
//! # Extended attributes (a ZAP per inode, object id in the bonus)
//!
//! Key: attribute name (1..=255 bytes). Value: tag byte 0 followed by the
//! value bytes (value < 8 KiB), or tag byte 1 followed by u64 LE object id
//! and u32 LE length of a separate object holding the value (up to 64 KiB).
//!
//! Symlink target: the data of the symlink object (bytes 0..size).

use crate::FsError;

pub const BONUS_VERSION: u16 = 1;
pub const FLAG_UNLINKED: u32 = 1;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InodePhys {
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub crtime_ns: i64,
    pub parent: u64,
    pub generation: u64,
    pub xattr_obj: u64,
    pub rdev: u64,
    pub flags: u32,
}

const _: () = assert!(96 == tarn_obj::BONUS_LEN);

fn rd<const N: usize>(b: &[u8; 96], off: usize) -> [u8; N] {
    let mut o = [0u8; N];
    o.copy_from_slice(&b[off..off + N]);
    o
}

impl InodePhys {
    pub fn encode(&self) -> [u8; 96] {
        let mut b = [0u8; 96];
        b[0..4].copy_from_slice(&self.mode.to_le_bytes());
        b[4..8].copy_from_slice(&self.nlink.to_le_bytes());
        b[8..12].copy_from_slice(&self.uid.to_le_bytes());
        b[12..16].copy_from_slice(&self.gid.to_le_bytes());
        b[16..24].copy_from_slice(&self.size.to_le_bytes());
        b[24..32].copy_from_slice(&self.atime_ns.to_le_bytes());
        b[32..40].copy_from_slice(&self.mtime_ns.to_le_bytes());
        b[40..48].copy_from_slice(&self.ctime_ns.to_le_bytes());
        b[48..56].copy_from_slice(&self.crtime_ns.to_le_bytes());
        b[56..64].copy_from_slice(&self.parent.to_le_bytes());
        b[64..72].copy_from_slice(&self.generation.to_le_bytes());
        b[72..80].copy_from_slice(&self.xattr_obj.to_le_bytes());
        b[80..88].copy_from_slice(&self.rdev.to_le_bytes());
        b[88..92].copy_from_slice(&self.flags.to_le_bytes());
        b[92..94].copy_from_slice(&BONUS_VERSION.to_le_bytes());
        b
    }

    pub fn decode(ino: u64, b: &[u8; 96]) -> Result<InodePhys, FsError> {
        if u16::from_le_bytes(rd(b, 92)) != BONUS_VERSION {
            return Err(FsError::Corrupt(format!("inode {ino}: bad bonus version")));
        }
        let p = InodePhys {
            mode: u32::from_le_bytes(rd(b, 0)),
            nlink: u32::from_le_bytes(rd(b, 4)),
            uid: u32::from_le_bytes(rd(b, 8)),
            gid: u32::from_le_bytes(rd(b, 12)),
            size: u64::from_le_bytes(rd(b, 16)),
            atime_ns: i64::from_le_bytes(rd(b, 24)),
            mtime_ns: i64::from_le_bytes(rd(b, 32)),
            ctime_ns: i64::from_le_bytes(rd(b, 40)),
            crtime_ns: i64::from_le_bytes(rd(b, 48)),
            parent: u64::from_le_bytes(rd(b, 56)),
            generation: u64::from_le_bytes(rd(b, 64)),
            xattr_obj: u64::from_le_bytes(rd(b, 72)),
            rdev: u64::from_le_bytes(rd(b, 80)),
            flags: u32::from_le_bytes(rd(b, 88)),
        };
        if crate::FileKind::from_mode(p.mode).is_none() {
            return Err(FsError::Corrupt(format!(
                "inode {ino}: bad file type in mode {:o}",
                p.mode
            )));
        }
        Ok(p)
    }
}

pub fn encode_dirent(ino: u64, dtype: u8) -> [u8; 9] {
    let mut b = [0u8; 9];
    b[..8].copy_from_slice(&ino.to_le_bytes());
    b[8] = dtype;
    b
}

pub fn decode_dirent(v: &[u8]) -> Result<(u64, u8), FsError> {
    if v.len() != 9 {
        return Err(FsError::Corrupt("directory entry of wrong length".into()));
    }
    let mut i = [0u8; 8];
    i.copy_from_slice(&v[..8]);
    Ok((u64::from_le_bytes(i), v[8]))
}

pub fn u64_value(v: &[u8]) -> Result<u64, FsError> {
    let a: [u8; 8] = v
        .try_into()
        .map_err(|_| FsError::Corrupt("expected a u64 value".into()))?;
    Ok(u64::from_le_bytes(a))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn bonus_roundtrip() {
        let p = InodePhys {
            mode: 0o100644,
            nlink: 1,
            size: 5,
            mtime_ns: -3,
            xattr_obj: 9,
            ..Default::default()
        };
        assert_eq!(InodePhys::decode(1, &p.encode()).unwrap(), p);
        assert!(InodePhys::decode(1, &[0u8; 96]).is_err());
    }
}
