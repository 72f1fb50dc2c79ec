//! File handles: what a client holds instead of a path. Byte layout
//! (docs/nfs.md keeps the same table; all integers little-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | version, 1 |
//! | 1 | 1 | kind: 0 an inode of the dataset, 1 `.zfs`, 2 `.zfs/snapshot`, 3 an inode of a snapshot |
//! | 2 | 2 | zero |
//! | 4 | 8 | pool guid |
//! | 12 | 8 | dataset: object set id of the exported file system |
//! | 20 | 8 | snapshot: object set id of the snapshot (kind 3), else 0 |
//! | 28 | 8 | inode (object id), 0 for kinds 1 and 2 |
//! | 36 | 8 | generation of the inode (the txg that created it) |
//!
//! Nothing in it depends on the running daemon: the same handle names the
//! same file after a restart and after export/import. A handle that does
//! not decode (wrong length, version, kind, non-zero padding) is
//! BADHANDLE; one that decodes but names no current file is STALE.

pub const HANDLE_LEN: usize = 44;
pub const HANDLE_VERSION: u8 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Node,
    Ctl,
    SnapDir,
    SnapNode,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle {
    pub kind: Kind,
    pub pool_guid: u64,
    pub objset: u64,
    pub snapshot: u64,
    pub ino: u64,
    pub generation: u64,
}

/// The handle does not decode.
#[derive(Debug)]
pub struct BadHandle;

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

impl Handle {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HANDLE_LEN);
        b.push(HANDLE_VERSION);
        b.push(match self.kind {
            Kind::Node => 0,
            Kind::Ctl => 1,
            Kind::SnapDir => 2,
            Kind::SnapNode => 3,
        });
        b.extend_from_slice(&[0, 0]);
        for v in [self.pool_guid, self.objset, self.snapshot, self.ino, self.generation] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        debug_assert_eq!(b.len(), HANDLE_LEN);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Handle, BadHandle> {
        if b.len() != HANDLE_LEN || b[0] != HANDLE_VERSION || b[2] != 0 || b[3] != 0 {
            return Err(BadHandle);
        }
        let kind = match b[1] {
            0 => Kind::Node,
            1 => Kind::Ctl,
            2 => Kind::SnapDir,
            3 => Kind::SnapNode,
            _ => return Err(BadHandle),
        };
        let h = Handle {
            kind,
            pool_guid: u64_at(b, 4),
            objset: u64_at(b, 12),
            snapshot: u64_at(b, 20),
            ino: u64_at(b, 28),
            generation: u64_at(b, 36),
        };
        let consistent = match kind {
            Kind::Node => h.snapshot == 0 && h.ino != 0,
            Kind::Ctl | Kind::SnapDir => h.snapshot == 0 && h.ino == 0 && h.generation == 0,
            Kind::SnapNode => h.snapshot != 0 && h.ino != 0,
        };
        if !consistent {
            return Err(BadHandle);
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let h = Handle { kind: Kind::SnapNode, pool_guid: 7, objset: 9, snapshot: 11, ino: 34, generation: 5 };
        let b = h.encode();
        assert_eq!(Handle::decode(&b).unwrap(), h);
        assert!(Handle::decode(&b[..43]).is_err());
        let mut v = b.clone();
        v[0] = 2;
        assert!(Handle::decode(&v).is_err());
        let mut v = b;
        v[1] = 0; // a dataset node with a snapshot id
        assert!(Handle::decode(&v).is_err());
    }
}
