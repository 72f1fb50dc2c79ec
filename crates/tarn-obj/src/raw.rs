//! Raw replication of encrypted object sets: what a raw send reads and
//! what a raw receive writes, with no key on either side.
//!
//! A raw stream carries an encrypted object set as it is stored: level-0
//! blocks as ciphertext with the pointer fields their seals bind
//! ([`RawBlock`]), dnodes with their bonuses still sealed, the IV and MAC
//! of every dnode block written since the base, and the object set root's
//! MAC with the shape of its meta-dnode ([`RawRoot`]). The receiver
//! rebuilds the trees (addresses, births, checksums and the physical form
//! of indirect and dnode blocks are its own) so that every field the
//! chain of MACs covers comes out as on the sender: the data blocks' own
//! fields, the indirect blocks' children digests (unkeyed, recomputed),
//! each dnode's header (levels and block count are forced to the
//! sender's: [`ObjectSet::set_raw_shape`]) and its pointers' portable
//! forms. The dnode blocks and the root then carry the sender's MACs, and
//! load-key on the receiver authenticates the lot as it would on the
//! sender. Nothing is decrypted or re-sealed on the way.
//!
//! While an object set receives raw (between [`ObjectSet::begin_raw`] and
//! [`ObjectSet::end_raw`]) its syncs take the seals from here instead of
//! sealing, plain writes are refused, and its dnodes are read as stored
//! (bonuses sealed, whether its key is loaded or not); the dnodes held in
//! memory are dropped when it starts and ends.

use std::collections::HashMap;

use tarn_block::RawBlock;

use crate::format::DnodePhys;
use crate::objset::ObjectSet;
use crate::tree::{self, block_err};
use crate::{ObjError, ObjectId, Result, Tx, Txg};

/// The IV and MAC of a partly sealed dnode block.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DnodeSeal {
    pub iv: [u8; 16],
    pub mac: [u8; 16],
}

/// What the root of an encrypted object set authenticates that a raw
/// receiver cannot rebuild on its own: the root's MAC, and the levels and
/// block count of the meta-dnode (both under that MAC).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RawRoot {
    pub mac: [u8; 16],
    pub meta_levels: u8,
    pub meta_nblocks: u64,
}

/// An object set's raw receive in progress.
#[derive(Debug)]
pub(crate) struct RawState {
    pub root: RawRoot,
    pub seals: HashMap<u64, DnodeSeal>,
}

impl ObjectSet {
    fn encrypted(&self) -> Result<crate::crypt::Crypt> {
        self.inner.crypt.ok_or_else(|| ObjError::Invalid(format!("object set {} is not encrypted", self.inner.id.0)))
    }

    /// The root's MAC and meta-dnode shape (sender side).
    pub fn raw_root(&self) -> Result<RawRoot> {
        self.encrypted()?;
        let bp = *self.inner.root_bp.lock();
        if bp.flags & tarn_block::crypt::FLAG_OBJSET_MAC == 0 {
            return Err(ObjError::Io(format!("object set {}: the root carries no MAC", self.inner.id.0)));
        }
        let meta = self.inner.committed.lock().meta.clone();
        Ok(RawRoot { mac: bp.mac, meta_levels: meta.nlevels, meta_nblocks: meta.nblocks })
    }

    /// The seals of the dnode blocks written after `from_txg`, in block
    /// order (sender side; holes have none).
    pub fn raw_dnode_seals(&self, from_txg: Txg, f: &mut dyn FnMut(u64, DnodeSeal) -> Result<()>) -> Result<()> {
        self.encrypted()?;
        let meta = self.inner.committed.lock().meta.clone();
        // Collected under the reader gate, handed out without it (`f` may
        // wait on the stream's reader).
        let mut seals = Vec::new();
        {
            let _gate = self.shared.reader_gate.read();
            crate::diff::leaves_unlocked(&self.shared.io, &meta, 0, meta.nblocks, &mut |blkid, bp| {
                if bp.birth > from_txg {
                    seals.push((blkid, bp));
                }
                Ok(())
            })?;
        }
        for (blkid, bp) in seals {
            if bp.flags & tarn_block::crypt::FLAG_PARTLY_SEALED == 0 {
                return Err(ObjError::Io(format!("dnode block {blkid} of an encrypted object set is not sealed")));
            }
            f(blkid, DnodeSeal { iv: bp.iv, mac: bp.mac })?;
        }
        Ok(())
    }

    /// The ciphertext of a block found by `changed_blocks` and its raw
    /// pointer fields (checksum verified, nothing opened).
    pub fn read_block_raw(&self, b: &crate::diff::BlockRef) -> Result<(RawBlock, Vec<u8>)> {
        let bp = b.block_ptr();
        let raw = RawBlock::of(&bp).ok_or_else(|| ObjError::Corrupt("a block of an encrypted object set is not sealed".into()))?;
        let _gate = self.shared.reader_gate.read();
        Ok((raw, self.shared.io.read_phys(&bp).map_err(block_err)?))
    }

    /// Starts (or, at the next sub-stream, continues) a raw receive into
    /// this object set, whose final root is `root`.
    /// The dnodes held in memory (opened with the key, if it is loaded)
    /// are dropped first: from here on they are read as stored.
    pub fn begin_raw(&self, root: RawRoot) -> Result<()> {
        self.encrypted()?;
        let mut raw = self.inner.raw.lock();
        match raw.as_mut() {
            Some(r) => r.root = root,
            None => {
                let (_, kept) = self.inner.handles.drop_clean();
                if kept > 0 {
                    return Err(ObjError::Invalid(format!("object set {} is being written", self.inner.id.0)));
                }
                *raw = Some(RawState { root, seals: HashMap::new() });
            }
        }
        Ok(())
    }

    pub fn raw_seal(&self, blkid: u64, seal: DnodeSeal) -> Result<()> {
        self.inner.raw.lock().as_mut().ok_or_else(|| ObjError::Invalid("no raw receive in progress".into()))?.seals.insert(blkid, seal);
        Ok(())
    }

    /// Whether the seal of dnode block `blkid` arrived.
    pub fn has_raw_seal(&self, blkid: u64) -> bool {
        self.inner.raw.lock().as_ref().is_some_and(|r| r.seals.contains_key(&blkid))
    }

    /// Ends a raw receive (after the sync that wrote its last changes):
    /// the dnodes held in memory, with sealed bonuses, are dropped.
    pub fn end_raw(&self) -> Result<()> {
        let Some(_) = self.inner.raw.lock().take() else { return Ok(()) };
        if !self.inner.forget_opened() {
            return Err(ObjError::Invalid(format!("object set {} has raw changes not written", self.inner.id.0)));
        }
        Ok(())
    }

    fn check_raw(&self) -> Result<()> {
        if self.inner.raw.lock().is_none() {
            return Err(ObjError::Invalid("raw write outside a raw receive".into()));
        }
        Ok(())
    }

    /// Block `blkid` of object `id` becomes the sealed block `data`.
    pub fn write_raw_block(&self, tx: &Tx, id: ObjectId, blkid: u64, raw: RawBlock, data: Vec<u8>) -> Result<()> {
        self.check_raw()?;
        if blkid >= crate::format::capacity(crate::format::MAX_LEVELS) {
            return Err(ObjError::Invalid("write past the largest object size".into()));
        }
        self.shared.check_space(self.charge_of(data.len() as u64).asize)?;
        let dn = self.dnode(id)?;
        let mut st = dn.st.lock();
        let a = st.attrs();
        if !a.exists {
            return Err(ObjError::NotFound(id.0));
        }
        if raw.lsize != a.block_size {
            return Err(ObjError::Invalid(format!("raw block of {} bytes in object {} of block size {}", raw.lsize, id.0, a.block_size)));
        }
        let n = data.len() as u64;
        let d = self.dirty_for(&dn, &mut st, tx.txg());
        if let Some(prev) = d.blocks.insert(blkid, std::sync::Arc::new(data)) {
            self.drop_charge(d, self.charge_of(prev.len() as u64));
        }
        d.raw.insert(blkid, raw);
        self.add_charge(d, self.charge_of(n));
        Ok(())
    }

    /// Levels object `id`'s tree will have when its changes so far are
    /// written, before any growth (1 if it was recreated). Levels never
    /// shrink: a raw receiver whose object has more levels than the
    /// sender's recreates it (the sender's was recreated since the base).
    pub fn raw_levels(&self, id: ObjectId) -> Result<u8> {
        let dn = self.dnode(id)?;
        let st = dn.st.lock();
        if st.dirty.values().any(|d| d.freed) {
            return Ok(1);
        }
        Ok(st.committed.nlevels)
    }

    /// Object `id`'s tree gets at least `levels` levels and exactly
    /// `nblocks` blocks when written (the sender's dnode header).
    pub fn set_raw_shape(&self, tx: &Tx, id: ObjectId, levels: u8, nblocks: u64) -> Result<()> {
        self.check_raw()?;
        if levels == 0 || levels > crate::format::MAX_LEVELS || nblocks > crate::format::capacity(levels) {
            return Err(ObjError::Invalid(format!("object {} with {levels} levels and {nblocks} blocks", id.0)));
        }
        let dn = self.dnode(id)?;
        let mut st = dn.st.lock();
        if !st.attrs().exists {
            return Err(ObjError::NotFound(id.0));
        }
        // Blocks past a shorter length go now, in the same txg: no state
        // (a partial receive's either) holds blocks past its length, which
        // the dnode block's MAC would refuse.
        let shrinks = nblocks < st.nblocks();
        self.dirty_for(&dn, &mut st, tx.txg()).shape = Some((levels, nblocks));
        drop(st);
        if shrinks {
            self.free_blocks(&dn, tx, nblocks, u64::MAX);
        }
        Ok(())
    }
}

/// Makes `phys` have `levels` levels and `nblocks` blocks (syncing
/// context, after the changes were applied).
pub(crate) fn apply_shape(ctx: &mut tree::TreeCtx, phys: &mut DnodePhys, levels: u8, nblocks: u64) -> Result<()> {
    ctx.grow_to(phys, levels)?;
    phys.nblocks = nblocks.min(phys.capacity());
    Ok(())
}
