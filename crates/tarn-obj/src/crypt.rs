//! Encrypted object sets in the object layer: which keys seal an object
//! set's blocks, and how a dnode block is sealed.
//!
//! An encrypted object set (its root says so: `ObjsetPhys::crypt`) seals
//! every level-0 block of every object with the block pipeline's AES-GCM
//! (tarn-block `crypt.rs`): file data, directory and attribute maps
//! (names), xattrs. Indirect blocks and the object set root stay readable,
//! so scrub, resilver and `debug check` walk the trees without a key.
//!
//! A dnode block (a level-0 block of the meta-dnode: 32 dnodes) is *partly*
//! sealed: the bonus areas of the dnodes in use (tarn-fs keeps the inode
//! there: size, mode, owner, times) are encrypted, everything else stays
//! readable, and one GCM tag authenticates the lot: the dnode headers, and
//! of each block pointer its portable fields (sizes, type, level, fill, IV
//! and MAC; not addresses or birth). So a block pointer in a dnode cannot
//! be changed to another valid block (a swap between files, an old version
//! of the same block) without the dnode block's MAC failing. The block's
//! pointer carries the IV and MAC with `FLAG_PARTLY_SEALED`.
//!
//! Keys are found by the object set's `key_guid` in the pool's key ring,
//! filled by the dataset layer's `load-key`; an object set whose key is not
//! loaded refuses every read of sealed content (`ObjError::KeyNotLoaded`)
//! before the cache is asked.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use tarn_block::crypt::FLAG_PARTLY_SEALED;
use tarn_block::{BlockKeys, BlockPtr, Cipher, BP_SIZE};

use crate::format::{ObjsetPhys, DNODE_SIZE, DN_IN_USE, NBPS};
use crate::{ObjError, Result};

/// How an object set is encrypted: its cipher, and the guid of the key
/// (one per encrypted dataset; its snapshots and clones share it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crypt {
    pub cipher: Cipher,
    pub key_guid: u64,
}

/// Loaded keys by key guid.
#[derive(Default)]
pub(crate) struct KeyRing(RwLock<HashMap<u64, Arc<BlockKeys>>>);

impl KeyRing {
    pub fn get(&self, guid: u64) -> Option<Arc<BlockKeys>> {
        self.0.read().get(&guid).cloned()
    }

    pub fn insert(&self, guid: u64, keys: Arc<BlockKeys>) {
        self.0.write().insert(guid, keys);
    }

    pub fn remove(&self, guid: u64) -> bool {
        self.0.write().remove(&guid).is_some()
    }
}

/// Domain of a dnode block's additional data (never a block seal's 16
/// fixed bytes).
const DNODE_DOMAIN: &[u8] = b"tarn dnode block v1";

/// Offset and length of a dnode's bonus area in its 512 bytes.
const BONUS_AT: usize = 416;
const BONUS_LEN: usize = DNODE_SIZE - BONUS_AT;

fn in_use(slot: &[u8]) -> bool {
    slot[3] & DN_IN_USE != 0
}

/// What the dnode block's MAC binds besides the sealed bonuses: its place
/// in the meta-dnode, and of each slot the header (type, levels, flags,
/// block size, number of blocks) and the portable fields of its block
/// pointers. Not `used_bytes` (it depends on the pool's layout).
fn dnode_aad(blkid: u64, data: &[u8]) -> Result<Vec<u8>> {
    let slots = data.len() / DNODE_SIZE;
    let mut a = Vec::with_capacity(DNODE_DOMAIN.len() + 8 + slots * (16 + NBPS * tarn_block::bp::PORTABLE_LEN));
    a.extend_from_slice(DNODE_DOMAIN);
    a.extend_from_slice(&blkid.to_le_bytes());
    for slot in data.chunks_exact(DNODE_SIZE) {
        a.extend_from_slice(&slot[..16]);
        if in_use(slot) {
            for i in 0..NBPS {
                let at = 32 + i * BP_SIZE;
                let bp = BlockPtr::decode(&slot[at..at + BP_SIZE]).map_err(ObjError::Corrupt)?;
                a.extend_from_slice(&bp.portable());
            }
        }
    }
    Ok(a)
}

fn gather(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for slot in data.chunks_exact(DNODE_SIZE).filter(|s| in_use(s)) {
        out.extend_from_slice(&slot[BONUS_AT..]);
    }
    out
}

fn scatter(data: &mut [u8], bonuses: &[u8]) {
    let mut at = 0;
    for slot in data.chunks_exact_mut(DNODE_SIZE).filter(|s| in_use(s)) {
        slot[BONUS_AT..].copy_from_slice(&bonuses[at..at + BONUS_LEN]);
        at += BONUS_LEN;
    }
}

/// Seals dnode block `blkid` in place (its bonuses); returns the IV and
/// MAC for [`stamp`].
pub(crate) fn seal_dnode_block(keys: &BlockKeys, blkid: u64, data: &mut [u8]) -> Result<([u8; 16], [u8; 16])> {
    let aad = dnode_aad(blkid, data)?;
    let mut bonuses = gather(data);
    let sealed = keys.seal_detached(&aad, &mut bonuses).map_err(|e| ObjError::Io(format!("cannot encrypt dnode block: {e}")))?;
    scatter(data, &bonuses);
    Ok(sealed)
}

/// Marks `bp` (the pointer just written for a sealed dnode block) partly
/// sealed with the seal's IV and MAC. A hole (an all-empty block) stays one.
pub(crate) fn stamp(bp: &mut BlockPtr, seal: ([u8; 16], [u8; 16])) {
    if bp.is_hole() {
        return;
    }
    assert!(bp.dvas().len() < tarn_block::bp::MAX_COPIES, "a sealed dnode block has at most two copies");
    bp.flags |= FLAG_PARTLY_SEALED;
    bp.iv = seal.0;
    bp.mac = seal.1;
}

/// Opens dnode block `blkid` read through `bp` in place. A block not
/// sealed in an encrypted object set, or one that fails its MAC, is an
/// I/O error naming the block.
pub(crate) fn open_dnode_block(keys: &BlockKeys, bp: &BlockPtr, blkid: u64, data: &mut [u8]) -> Result<()> {
    if bp.flags & FLAG_PARTLY_SEALED == 0 {
        return Err(ObjError::Io(format!("dnode block {blkid} of an encrypted object set is not sealed")));
    }
    let aad = dnode_aad(blkid, data)?;
    let sealed = gather(data);
    let mut plain = vec![0u8; sealed.len()];
    keys.open_detached(&bp.iv, &bp.mac, &aad, &sealed, &mut plain).map_err(|e| ObjError::Io(format!("dnode block {blkid}: {e}")))?;
    scatter(data, &plain);
    Ok(())
}

/// Dnode block `blkid` read through `bp`: with `keys` (an encrypted object
/// set), a copy with its bonuses opened; else as read.
pub(crate) fn opened_dnode_block(keys: Option<&BlockKeys>, bp: &BlockPtr, blkid: u64, data: Arc<Vec<u8>>) -> Result<Arc<Vec<u8>>> {
    let Some(keys) = keys else { return Ok(data) };
    let mut block = data.as_ref().clone();
    open_dnode_block(keys, bp, blkid, &mut block)?;
    Ok(Arc::new(block))
}

/// What an object set root's MAC covers: its kind and its meta-dnode as a
/// parent sees a child (the header and the portable forms of its three
/// pointers, digests and MACs included), so the whole tree hangs from it.
/// Not the counters, snapshot links or log header (layout-dependent, or
/// rewritten without the key by snapshot operations).
fn root_mac_input(phys: &ObjsetPhys) -> Vec<u8> {
    let mut a = Vec::with_capacity(64 + NBPS * tarn_block::bp::PORTABLE_LEN);
    a.extend_from_slice(b"tarn objset v1");
    a.extend_from_slice(&phys.kind.to_le_bytes());
    let mut meta = [0u8; DNODE_SIZE];
    phys.meta.encode(&mut meta);
    a.extend_from_slice(&meta[..16]);
    for bp in &phys.meta.bps {
        a.extend_from_slice(&bp.portable());
    }
    a
}

/// Marks the pointer of a root just written with its keyed MAC.
pub(crate) fn stamp_root(keys: &BlockKeys, phys: &ObjsetPhys, bp: &mut BlockPtr) {
    set_root_mac(bp, keys.objset_mac(&root_mac_input(phys)));
}

/// Marks a root's pointer with `mac` (a hole stays one).
pub(crate) fn set_root_mac(bp: &mut BlockPtr, mac: [u8; 16]) {
    if !bp.is_hole() {
        bp.flags |= tarn_block::crypt::FLAG_OBJSET_MAC;
        bp.mac = mac;
    }
}

/// A root rewritten without a change to what its MAC covers (snapshot
/// bookkeeping, the log header, a clone or rollback taking a snapshot's
/// tree): it keeps the MAC of the root it was made from.
pub(crate) fn carry_root_mac(bp: &mut BlockPtr, from: &BlockPtr) {
    if from.flags & tarn_block::crypt::FLAG_OBJSET_MAC != 0 {
        set_root_mac(bp, from.mac);
    }
}

/// Checks the root of an encrypted object set against its MAC.
pub(crate) fn verify_root(keys: &BlockKeys, phys: &ObjsetPhys, bp: &BlockPtr) -> Result<()> {
    if bp.is_hole() {
        return Ok(()); // created in memory, not written yet
    }
    if bp.flags & tarn_block::crypt::FLAG_OBJSET_MAC == 0 || keys.objset_mac(&root_mac_input(phys)) != bp.mac {
        return Err(ObjError::Io("object set root fails authentication (MAC mismatch)".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::DnodePhys;
    use tarn_keys::MasterKey;

    fn block_with(n: usize) -> Vec<u8> {
        let mut data = vec![0u8; 32 * DNODE_SIZE];
        for i in 0..n {
            let mut d = DnodePhys::empty();
            d.flags = DN_IN_USE;
            d.otype = 19;
            d.block_size = 4096;
            d.bonus = [i as u8 + 1; 96];
            let mut bp = BlockPtr::HOLE;
            bp.ndva = 1;
            bp.lsize = 4096;
            bp.psize = 4096;
            bp.checksum_kind = 3;
            bp.fill = 1;
            bp.dva[0] = tarn_block::Dva { vdev: 0, asize: 4096, offset: 8192 * i as u64 };
            bp.flags = tarn_block::crypt::FLAG_ENCRYPTED;
            bp.iv = [0x10 + i as u8; 16];
            bp.mac = [i as u8; 16];
            d.bps[0] = bp;
            d.nblocks = 1;
            d.encode(&mut data[i * 2 * DNODE_SIZE..(i * 2 + 1) * DNODE_SIZE]);
        }
        data
    }

    #[test]
    fn the_root_mac_covers_the_meta_dnode_and_nothing_layout_bound() {
        let keys = BlockKeys::new(Cipher::Aes256Gcm, &MasterKey::from_bytes(&[5u8; 32])).unwrap();
        let mut phys = ObjsetPhys::new(1);
        let block = block_with(1);
        phys.meta.bps[0] = BlockPtr::decode(&block[32..32 + BP_SIZE]).unwrap();
        phys.meta.nblocks = 1;
        let mut bp = BlockPtr::decode(&block[32..32 + BP_SIZE]).unwrap();
        bp.flags = 0;
        stamp_root(&keys, &phys, &mut bp);
        verify_root(&keys, &phys, &bp).unwrap();
        // Counters, snapshot links, the log: not covered.
        let mut moved = phys.clone();
        moved.used_bytes += 4096;
        moved.prev_snap_txg = 77;
        verify_root(&keys, &moved, &bp).unwrap();
        // The meta-dnode's pointers and header are.
        let mut older = phys.clone();
        older.meta.bps[0].mac[0] ^= 1;
        assert!(verify_root(&keys, &older, &bp).is_err(), "a replayed dnode block");
        let mut grown = phys.clone();
        grown.meta.nblocks = 2;
        assert!(verify_root(&keys, &grown, &bp).is_err());
        let other = BlockKeys::new(Cipher::Aes256Gcm, &MasterKey::from_bytes(&[6u8; 32])).unwrap();
        assert!(verify_root(&other, &phys, &bp).is_err());
        let mut unstamped = bp;
        unstamped.flags = 0;
        assert!(verify_root(&keys, &phys, &unstamped).is_err(), "a root without its MAC");
        let mut carried = unstamped;
        carry_root_mac(&mut carried, &bp);
        verify_root(&keys, &phys, &carried).unwrap();
        assert_eq!(BlockPtr::decode(&carried.encode()).unwrap().mac, bp.mac, "the MAC survives encoding");
    }

    #[test]
    fn bonuses_are_sealed_and_the_rest_is_bound() {
        let keys = BlockKeys::new(Cipher::Aes256Gcm, &MasterKey::from_bytes(&[5u8; 32])).unwrap();
        let plain = block_with(5);
        let mut data = plain.clone();
        let seal = seal_dnode_block(&keys, 7, &mut data).unwrap();
        let mut bp = BlockPtr::HOLE;
        bp.ndva = 1;
        bp.lsize = data.len() as u32;
        bp.psize = 4096;
        bp.checksum_kind = 3;
        bp.dva[0] = tarn_block::Dva { vdev: 0, asize: 4096, offset: 0 };
        stamp(&mut bp, seal);
        for i in 0..5 {
            let at = i * 2 * DNODE_SIZE;
            assert_ne!(&data[at + BONUS_AT..at + DNODE_SIZE], &plain[at + BONUS_AT..at + DNODE_SIZE], "bonus {i} sealed");
            assert_eq!(&data[at..at + BONUS_AT], &plain[at..at + BONUS_AT], "dnode {i} core readable");
        }
        let mut open = data.clone();
        open_dnode_block(&keys, &bp, 7, &mut open).unwrap();
        assert_eq!(open, plain);
        // Another place in the meta-dnode, a changed MAC of a child (a
        // swapped block), a changed size, a flipped bonus bit: all refused.
        let mut moved = data.clone();
        assert!(open_dnode_block(&keys, &bp, 8, &mut moved).is_err());
        for (what, at) in [("child mac", 2 * DNODE_SIZE + 32 + 112), ("child iv", 2 * DNODE_SIZE + 32 + 40), ("child lsize", 32 + 48), ("nblocks", 4 * DNODE_SIZE + 8), ("bonus", 2 * DNODE_SIZE + BONUS_AT + 3)] {
            let mut bad = data.clone();
            bad[at] ^= 1;
            assert!(open_dnode_block(&keys, &bp, 7, &mut bad).is_err(), "{what}");
        }
        // The child's address and birth are not bound: a raw receive or a
        // rewrite elsewhere keeps the seal valid.
        let mut relocated = data.clone();
        relocated[32 + 8] ^= 0x10;
        relocated[32 + 56] ^= 1;
        open_dnode_block(&keys, &bp, 7, &mut relocated).unwrap();
        // Not sealed, or sealed with another key.
        let other = BlockKeys::new(Cipher::Aes256Gcm, &MasterKey::from_bytes(&[6u8; 32])).unwrap();
        assert!(open_dnode_block(&other, &bp, 7, &mut data.clone()).is_err());
        let mut unflagged = bp;
        unflagged.flags = 0;
        assert!(open_dnode_block(&keys, &unflagged, 7, &mut data.clone()).is_err());
    }
}
