//! Differences between object sets, for replication (send/receive).
//!
//! Everything here reads the *committed* state of an object set: for a
//! snapshot that is all of it. Nothing here changes anything.
//!
//! Big theory: copy-on-write gives every block pointer the txg it was
//! written in (`birth`), and a parent is written whenever a child is, so a
//! parent's birth is at least its children's. Take a snapshot `T` (target)
//! and an earlier snapshot `B` (base) of the same object set, taken in txg
//! `F`. A pointer of `T` born at or before `F` sat at the same position of
//! the head at `F` (a position's pointer is only ever replaced by a newer
//! one), so the whole subtree under it is identical in `B`: the walk skips
//! it without reading it. Under a pointer born after `F`, `T`'s children are
//! compared with `B`'s children at the same position: a child of `T` that
//! is a hole where `B` has data became a hole (a free); a level-0 child
//! born after `F` is new data. So the walk reads only the changed indirect
//! blocks of `T` and the matching ones of `B`: its cost is the size of the
//! change, not of the object set. Holes carry no birth in tarn, which is why
//! the base tree is read alongside rather than relying on hole births.
//!
//! Trees of different heights are compared by padding the shorter one: a
//! tree of `n` levels is the child 0 of a virtual pointer at level `n`
//! (its capacity, 3 × 1024^(n−1) blocks, fits in one level-`n` span).
//!
//! The same walk runs over the meta-dnode (whose level-0 blocks are arrays
//! of 32 dnodes) to find the objects whose dnode changed or disappeared,
//! and over an object's block tree to find its new blocks and new holes.
//!
//! Without a base tree (the base is a *bookmark*: only its txg is known,
//! see `changed_objects_since` / `changed_blocks_since`) the pruning is the
//! same, but under a pointer born after `F` nothing tells whether a hole
//! of `T` held data at `F`: every hole met there (and every free dnode slot
//! of a changed dnode block) is reported as possibly freed. The cost is
//! still the size of the change; the reports are a superset, and freeing
//! what is already free is a no-op for the receiver.
//!
//! As a cheap sanity check, every pruned pointer of `T` is compared with
//! `B`'s pointer at the same position: they must be the very same block,
//! or the two object sets are not a snapshot and an earlier snapshot of
//! the same head (`ObjError::Invalid`).
//!
//! Reads take the pool's reader gate one block at a time. Callers walking a
//! snapshot must keep it from being destroyed meanwhile (a hold, as ZFS
//! send takes one).

use tarn_block::BlockPtr;

use crate::format::{span, DnodePhys, DNODES_PER_BLOCK, DNODE_SIZE, EPB, NBPS};
use crate::tree::{block_err, read_children};
use crate::{ObjError, ObjType, ObjectId, ObjectSet, Result, Txg, BONUS_LEN};

/// An object as its committed dnode describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectAttrs {
    pub id: ObjectId,
    pub otype: ObjType,
    pub block_size: u32,
    /// Highest data block id + 1 (0: no data). `ObjInfo::length` is
    /// `nblocks * block_size`.
    pub nblocks: u64,
    /// Bytes allocated to the object's blocks.
    pub used_bytes: u64,
    pub bonus: [u8; BONUS_LEN],
    /// `DN_METADATA`: a map, not user data.
    pub metadata: bool,
    dnode: DnodePhys,
}

impl ObjectAttrs {
    fn new(id: u64, d: DnodePhys) -> ObjectAttrs {
        ObjectAttrs {
            id: ObjectId(id),
            otype: ObjType(d.otype),
            block_size: d.block_size,
            nblocks: d.nblocks,
            used_bytes: d.used_bytes,
            bonus: d.bonus,
            metadata: d.flags & crate::format::DN_METADATA != 0,
            dnode: d,
        }
    }

    /// Number of levels of the object's block tree.
    pub fn levels(&self) -> u8 {
        self.dnode.nlevels
    }
}

/// A difference in the object list, in increasing object id order.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)] // handed to a callback one at a time, never stored in bulk
pub enum ObjectChange {
    /// An object of the target whose dnode differs from the base's (or that
    /// the base does not have). `base` is the base's object of that id, if
    /// it has one (it may be an unrelated object that was freed and whose
    /// id was reused: compare type and block size).
    Changed { target: ObjectAttrs, base: Option<ObjectAttrs> },
    /// Objects `first .. first + count` exist in the base and not in the
    /// target (every id of the run existed in the base).
    Freed { first: ObjectId, count: u64 },
}

/// A level-0 block of a committed tree, to read later.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockRef {
    bp: BlockPtr,
}

impl BlockRef {
    /// The txg the block was written in.
    pub fn birth(&self) -> Txg {
        self.bp.birth
    }

    /// Its logical (uncompressed) size in bytes.
    pub fn logical_size(&self) -> u32 {
        self.bp.lsize
    }

    pub(crate) fn block_ptr(&self) -> BlockPtr {
        self.bp
    }

    /// A sealed block's raw pointer fields (what a raw send carries
    /// besides its ciphertext), without reading it.
    pub fn raw_block(&self) -> Option<tarn_block::RawBlock> {
        tarn_block::RawBlock::of(&self.bp)
    }
}

/// A difference in one object's data, in increasing block id order.
#[derive(Clone, Debug)]
pub enum BlockChange {
    /// Block `blkid` holds data the base does not have (written after the
    /// base's txg).
    Data { blkid: u64, block: BlockRef },
    /// Blocks `first .. first + count` are holes in the target and were not
    /// all holes in the base (freed or zeroed). Runs are merged.
    Hole { first: u64, count: u64 },
}

/// A subtree of a (possibly padded) tree.
#[derive(Clone)]
enum Node<'a> {
    Hole,
    Real(BlockPtr),
    /// The whole tree of this dnode, sitting at position 0 of a level at or
    /// above its number of levels.
    Pad(&'a DnodePhys),
}

impl Node<'_> {
    fn of(bp: BlockPtr) -> Self {
        if bp.is_hole() {
            Node::Hole
        } else {
            Node::Real(bp)
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Node::Hole => true,
            Node::Real(bp) => bp.is_hole(),
            Node::Pad(p) => p.bps.iter().all(|b| b.is_hole()),
        }
    }
}

/// What the walk reports.
enum Ev<'a> {
    /// A level-0 pointer of the target born after `from`, with the base's
    /// node at the same position.
    New { blkid: u64, t: BlockPtr, b: Node<'a> },
    /// The target is empty under a node where the base is not.
    Gone { level: u8, first: u64, b: Node<'a> },
}

struct Differ<'o> {
    os: &'o ObjectSet,
    from: Txg,
    verify_related: bool,
    /// No base tree: every empty node of the target reached by the walk is
    /// reported as `Gone` (it may have held data at `from`).
    unknown_base: bool,
    /// Dnodes as stored: an encrypted object set's bonuses stay sealed
    /// (a raw send; no key needed).
    raw: bool,
}

impl<'o> Differ<'o> {
    fn read(&self, bp: &BlockPtr) -> Result<std::sync::Arc<Vec<u8>>> {
        let _gate = self.os.shared.reader_gate.read();
        self.os.shared.io.read(bp).map_err(block_err)
    }

    /// Dnode block `blkid`, its bonuses opened when the object set is
    /// encrypted (sealed bonuses differ every time a block is rewritten).
    fn read_dnodes(&self, bp: &BlockPtr, blkid: u64) -> Result<std::sync::Arc<Vec<u8>>> {
        if self.raw {
            return self.read(bp);
        }
        let keys = self.os.inner.keys(&self.os.shared)?;
        crate::crypt::opened_dnode_block(keys.as_deref(), bp, blkid, self.read(bp)?)
    }

    fn children<'a>(&self, n: &Node<'a>, level: u8) -> Result<Vec<Node<'a>>> {
        let mut v = vec![Node::Hole; EPB as usize];
        match n {
            Node::Hole => {}
            Node::Real(bp) => {
                if bp.level != level {
                    return Err(ObjError::Corrupt(format!("block pointer of level {} where level {level} belongs", bp.level)));
                }
                let kids = {
                    let _gate = self.os.shared.reader_gate.read();
                    read_children(&self.os.shared.io, bp)?
                };
                for (slot, c) in v.iter_mut().zip(kids) {
                    *slot = Node::of(c);
                }
            }
            Node::Pad(p) => {
                if level > p.nlevels {
                    v[0] = Node::Pad(p);
                } else {
                    for (slot, c) in v.iter_mut().zip(p.bps) {
                        *slot = Node::of(c);
                    }
                }
            }
        }
        Ok(v)
    }

    /// The three top nodes (level `n - 1`) of `p` padded to `n` levels.
    fn tops<'a>(p: Option<&'a DnodePhys>, n: u8) -> Vec<Node<'a>> {
        match p.filter(|p| p.in_use()) {
            None => vec![Node::Hole; NBPS],
            Some(p) if p.nlevels == n => p.bps.iter().map(|b| Node::of(*b)).collect(),
            Some(p) => {
                let mut v = vec![Node::Hole; NBPS];
                v[0] = Node::Pad(p);
                v
            }
        }
    }

    /// Walk target `t` against base `b` over block ids `[lo, hi)`.
    fn tree<'a>(&self, t: &'a DnodePhys, b: Option<&'a DnodePhys>, lo: u64, hi: u64, f: &mut dyn FnMut(Ev<'a>) -> Result<()>) -> Result<()> {
        let tn = if t.in_use() { t.nlevels } else { 1 };
        let bn = b.filter(|p| p.in_use()).map_or(1, |p| p.nlevels);
        let n = tn.max(bn).max(1);
        let tt = Self::tops(Some(t), n);
        let bt = Self::tops(b, n);
        let s = span(n - 1);
        for (i, (tn, bn)) in tt.into_iter().zip(bt).enumerate() {
            self.node(n - 1, (i as u64).saturating_mul(s), tn, bn, lo, hi, f)?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn node<'a>(&self, level: u8, first: u64, t: Node<'a>, b: Node<'a>, lo: u64, hi: u64, f: &mut dyn FnMut(Ev<'a>) -> Result<()>) -> Result<()> {
        let end = first.saturating_add(span(level));
        if end <= lo || first >= hi {
            return Ok(());
        }
        if t.is_empty() {
            if self.unknown_base || !b.is_empty() {
                f(Ev::Gone { level, first, b })?;
            }
            return Ok(());
        }
        if let Node::Real(bp) = &t {
            if bp.birth <= self.from {
                if self.verify_related && !matches!(&b, Node::Real(x) if x == bp) {
                    return Err(ObjError::Invalid(
                        "the base is not an earlier snapshot of the same object set (a block older than the base differs from it)".into(),
                    ));
                }
                return Ok(());
            }
            if level == 0 {
                return f(Ev::New { blkid: first, t: *bp, b });
            }
        }
        if level == 0 {
            return Err(ObjError::Corrupt("padded tree node at level 0".into()));
        }
        let tc = self.children(&t, level)?;
        let bc = self.children(&b, level)?;
        let cs = span(level - 1);
        for (j, (tn, bn)) in tc.into_iter().zip(bc).enumerate() {
            self.node(level - 1, first.saturating_add((j as u64).saturating_mul(cs)), tn, bn, lo, hi, f)?;
        }
        Ok(())
    }

    /// Every non-hole level-0 pointer under `n` (a node at `level` starting
    /// at block `first`), in order.
    fn leaves<'a>(&self, n: Node<'a>, level: u8, first: u64, f: &mut dyn FnMut(u64, BlockPtr) -> Result<()>) -> Result<()> {
        if n.is_empty() {
            return Ok(());
        }
        if level == 0 {
            return match n {
                Node::Real(bp) => f(first, bp),
                _ => Err(ObjError::Corrupt("padded tree node at level 0".into())),
            };
        }
        let cs = span(level - 1);
        for (j, c) in self.children(&n, level)?.into_iter().enumerate() {
            self.leaves(c, level - 1, first.saturating_add((j as u64).saturating_mul(cs)), f)?;
        }
        Ok(())
    }
}

fn decode_slot(block: &[u8], slot: usize) -> Result<DnodePhys> {
    DnodePhys::decode(block.get(slot * DNODE_SIZE..(slot + 1) * DNODE_SIZE).ok_or_else(|| ObjError::Corrupt("short dnode block".into()))?)
}

/// Merges freed object ids into runs.
struct FreeRuns<'f> {
    run: Option<(u64, u64)>,
    f: &'f mut dyn FnMut(ObjectChange) -> Result<()>,
}

impl FreeRuns<'_> {
    fn add(&mut self, id: u64) -> Result<()> {
        match &mut self.run {
            Some((first, count)) if *first + *count == id => *count += 1,
            _ => {
                self.flush()?;
                self.run = Some((id, 1));
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if let Some((first, count)) = self.run.take() {
            (self.f)(ObjectChange::Freed { first: ObjectId(first), count })?;
        }
        Ok(())
    }

    fn emit(&mut self, c: ObjectChange) -> Result<()> {
        self.flush()?;
        (self.f)(c)
    }

    /// Adds ids `first .. end`.
    fn add_range(&mut self, first: u64, end: u64) -> Result<()> {
        if first >= end {
            return Ok(());
        }
        match &mut self.run {
            Some((f0, count)) if *f0 + *count == first => *count = end - *f0,
            _ => {
                self.flush()?;
                self.run = Some((first, end - first));
            }
        }
        Ok(())
    }
}

impl ObjectSet {
    /// The object set's dnode tree as committed (the meta-dnode).
    fn committed_meta(&self) -> DnodePhys {
        self.inner.committed.lock().meta.clone()
    }

    /// Birth txg of the committed root block of this object set (for a
    /// snapshot: at most the txg it was taken in).
    pub fn root_birth(&self) -> Txg {
        self.inner.root_bp.lock().birth
    }

    /// Newest birth among the committed dnode tree's top pointers: the txg
    /// of the last change to any object (0: never changed). Unlike
    /// [`ObjectSet::root_birth`] it does not move when only the object
    /// set's header is rewritten (a neighbouring snapshot destroyed).
    pub fn tree_birth(&self) -> Txg {
        let meta = self.committed_meta();
        meta.bps.iter().filter(|b| !b.is_hole()).map(|b| b.birth).max().unwrap_or(0)
    }

    /// Txg of the newest snapshot taken before this object set's committed
    /// state (for a snapshot: the one before it; 0 if none).
    pub fn prev_snap_txg(&self) -> Txg {
        self.inner.committed.lock().prev_snap_txg
    }

    /// Whether this object set has changed since txg `txg`: unsynced
    /// changes, or a committed dnode block written after `txg`.
    pub fn changed_since(&self, txg: Txg) -> bool {
        if self.inner.dirty.lock().values().any(|m| !m.is_empty()) {
            return true;
        }
        let meta = self.committed_meta();
        meta.bps.iter().any(|b| !b.is_hole() && b.birth > txg)
    }

    /// The committed dnode of object `id` (`None` if the slot is free).
    pub fn committed_object(&self, id: ObjectId) -> Result<Option<ObjectAttrs>> {
        let d = self.inner.load_phys(&self.shared, id)?;
        Ok(d.in_use().then(|| ObjectAttrs::new(id.0, d)))
    }

    /// Objects whose committed dnode differs between `base` and `self`, in
    /// increasing id order from `start`, pruned by birth: only dnode blocks
    /// written after `from_txg` are read (with `base: None`, every object).
    /// `base` must be an earlier snapshot of the same head taken in
    /// `from_txg` (checked on the way where possible). With `raw`, dnodes
    /// are reported as stored (bonuses sealed; no key needed).
    pub fn changed_objects(
        &self,
        base: Option<&ObjectSet>,
        from_txg: Txg,
        start: ObjectId,
        raw: bool,
        f: &mut dyn FnMut(ObjectChange) -> Result<()>,
    ) -> Result<()> {
        let tmeta = self.committed_meta();
        let bmeta = base.map(|b| b.committed_meta());
        let from = if base.is_some() { from_txg } else { 0 };
        let d = Differ { os: self, from, verify_related: base.is_some() && from > 0, unknown_base: false, raw };
        self.objects_walk(&d, &tmeta, bmeta.as_ref(), start, f)
    }

    /// Like [`ObjectSet::changed_objects`] against a base known only by the
    /// txg `from_txg` it was taken in (a bookmark of an earlier snapshot of
    /// the same head, whose tree may be gone). Every in-use dnode of a dnode
    /// block written after `from_txg` is reported as `Changed` with `base:
    /// None` (whether the base had that object, or an unrelated one of the
    /// same id, is unknown); every free slot of such a block and every hole
    /// of the dnode tree under a pointer written after `from_txg` is
    /// reported in a `Freed` run, which may include ids that were already
    /// free in the base. The caller must know that the base is an earlier
    /// snapshot of this object set's head: nothing can be checked here.
    pub fn changed_objects_since(&self, from_txg: Txg, start: ObjectId, raw: bool, f: &mut dyn FnMut(ObjectChange) -> Result<()>) -> Result<()> {
        let tmeta = self.committed_meta();
        let d = Differ { os: self, from: from_txg, verify_related: false, unknown_base: true, raw };
        self.objects_walk(&d, &tmeta, None, start, f)
    }

    fn objects_walk(
        &self,
        d: &Differ<'_>,
        tmeta: &DnodePhys,
        bmeta: Option<&DnodePhys>,
        start: ObjectId,
        f: &mut dyn FnMut(ObjectChange) -> Result<()>,
    ) -> Result<()> {
        let lo = start.0 / DNODES_PER_BLOCK;
        let mut runs = FreeRuns { run: None, f };
        d.tree(tmeta, bmeta, lo, u64::MAX, &mut |ev| match ev {
            Ev::New { blkid, t, b } => {
                let tdata = d.read_dnodes(&t, blkid)?;
                let bdata = match b {
                    Node::Real(bp) => Some(d.read_dnodes(&bp, blkid)?),
                    _ => None,
                };
                for slot in 0..DNODES_PER_BLOCK as usize {
                    let id = blkid * DNODES_PER_BLOCK + slot as u64;
                    if id < start.0 {
                        continue;
                    }
                    let td = decode_slot(&tdata, slot)?;
                    let bd = match &bdata {
                        Some(x) => decode_slot(x, slot)?,
                        None => DnodePhys::empty(),
                    };
                    if td == bd && !d.unknown_base {
                        continue;
                    }
                    if td.in_use() {
                        let base = bd.in_use().then(|| ObjectAttrs::new(id, bd));
                        runs.emit(ObjectChange::Changed { target: ObjectAttrs::new(id, td), base })?;
                    } else if bd.in_use() || d.unknown_base {
                        runs.add(id)?;
                    }
                }
                Ok(())
            }
            Ev::Gone { level, first, .. } if d.unknown_base => {
                let a = first.saturating_mul(DNODES_PER_BLOCK).max(start.0);
                let e = first.saturating_add(span(level)).saturating_mul(DNODES_PER_BLOCK);
                runs.add_range(a, e)
            }
            Ev::Gone { level, first, b } => d.leaves(b, level, first, &mut |blkid, bp| {
                let data = d.read(&bp)?;
                for slot in 0..DNODES_PER_BLOCK as usize {
                    let id = blkid * DNODES_PER_BLOCK + slot as u64;
                    if id >= start.0 && decode_slot(&data, slot)?.in_use() {
                        runs.add(id)?;
                    }
                }
                Ok(())
            }),
        })?;
        runs.flush()
    }

    /// Every object of the committed state, in increasing id order.
    pub fn list_objects(&self, f: &mut dyn FnMut(ObjectAttrs) -> Result<()>) -> Result<()> {
        self.changed_objects(None, 0, ObjectId(0), false, &mut |c| match c {
            ObjectChange::Changed { target, .. } => f(target),
            ObjectChange::Freed { .. } => Ok(()),
        })
    }

    /// Ids of the committed objects in `[first, end)`, in order. Holes of
    /// the dnode tree are skipped without reading, so the cost is the part
    /// of the tree that exists in the range. The whole walk holds the reader
    /// gate, so it is safe on a live object set.
    pub fn objects_in_range(&self, first: ObjectId, end: ObjectId) -> Result<Vec<ObjectId>> {
        let meta = self.committed_meta();
        let lo = first.0 / DNODES_PER_BLOCK;
        let hi = end.0.div_ceil(DNODES_PER_BLOCK);
        let mut out = Vec::new();
        let io = &self.shared.io;
        let _gate = self.shared.reader_gate.read();
        leaves_unlocked(io, &meta, lo, hi, &mut |blkid, bp| {
            let data = io.read(&bp).map_err(block_err)?;
            for slot in 0..DNODES_PER_BLOCK as usize {
                let id = blkid * DNODES_PER_BLOCK + slot as u64;
                if id >= first.0 && id < end.0 && decode_slot(&data, slot)?.in_use() {
                    out.push(ObjectId(id));
                }
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// The data blocks of object `target` (an object of this object set)
    /// that differ from `base` (the same object in an earlier snapshot
    /// taken in `from_txg`; `None`: every non-hole block), from block
    /// `start` on, pruned by birth. `base` must have the same block size.
    pub fn changed_blocks(
        &self,
        target: &ObjectAttrs,
        base: Option<&ObjectAttrs>,
        from_txg: Txg,
        start: u64,
        f: &mut dyn FnMut(BlockChange) -> Result<()>,
    ) -> Result<()> {
        if let Some(b) = base {
            if b.block_size != target.block_size || b.id != target.id {
                return Err(ObjError::Invalid(format!(
                    "object {}: base block size {} differs from {}",
                    target.id.0, b.block_size, target.block_size
                )));
            }
        }
        let from = if base.is_some() { from_txg } else { 0 };
        let d = Differ { os: self, from, verify_related: base.is_some() && from > 0, unknown_base: false, raw: false };
        Self::blocks_walk(&d, target, base, start, f)
    }

    /// Like [`ObjectSet::changed_blocks`] against a base known only by its
    /// txg (see [`ObjectSet::changed_objects_since`]): blocks written after
    /// `from_txg` are `Data`; every hole met under a pointer written after
    /// `from_txg` (and every hole among the dnode's top pointers) is in a
    /// `Hole` run, whether or not it held data in the base. Blocks past the
    /// tree are not reported: a receiver frees past the object's end.
    pub fn changed_blocks_since(&self, target: &ObjectAttrs, from_txg: Txg, start: u64, f: &mut dyn FnMut(BlockChange) -> Result<()>) -> Result<()> {
        let d = Differ { os: self, from: from_txg, verify_related: false, unknown_base: true, raw: false };
        Self::blocks_walk(&d, target, None, start, f)
    }

    fn blocks_walk(d: &Differ<'_>, target: &ObjectAttrs, base: Option<&ObjectAttrs>, start: u64, f: &mut dyn FnMut(BlockChange) -> Result<()>) -> Result<()> {
        let mut hole: Option<(u64, u64)> = None;
        d.tree(&target.dnode, base.map(|b| &b.dnode), start, u64::MAX, &mut |ev| {
            match ev {
                Ev::New { blkid, t, .. } => {
                    if let Some((first, count)) = hole.take() {
                        f(BlockChange::Hole { first, count })?;
                    }
                    f(BlockChange::Data { blkid, block: BlockRef { bp: t } })?;
                }
                Ev::Gone { level, first, .. } => {
                    let end = first.saturating_add(span(level));
                    let first = first.max(start);
                    match &mut hole {
                        Some((f0, c)) if *f0 + *c == first => *c = end - *f0,
                        _ => {
                            if let Some((first, count)) = hole.take() {
                                f(BlockChange::Hole { first, count })?;
                            }
                            hole = Some((first, end - first));
                        }
                    }
                }
            }
            Ok(())
        })?;
        if let Some((first, count)) = hole {
            f(BlockChange::Hole { first, count })?;
        }
        Ok(())
    }

    /// The logical (decompressed, verified) contents of a block found by
    /// [`ObjectSet::changed_blocks`]. Not kept in the block cache.
    pub fn read_block_ref(&self, b: &BlockRef) -> Result<Vec<u8>> {
        let keys = self.inner.keys(&self.shared)?;
        let _gate = self.shared.reader_gate.read();
        self.shared.io.read_uncached_with(&b.bp, keys.as_deref()).map_err(block_err)
    }

    /// Whether committed block `blkid` of object `id` is a hole (or past
    /// the end of the object).
    pub fn committed_block_is_hole(&self, id: ObjectId, blkid: u64) -> Result<bool> {
        let d = self.inner.load_phys(&self.shared, id)?;
        if !d.in_use() {
            return Err(ObjError::NotFound(id.0));
        }
        let _gate = self.shared.reader_gate.read();
        Ok(crate::tree::lookup(&self.shared.io, &d, blkid)?.is_hole())
    }
}

/// The non-hole level-0 blocks of `meta` in `[lo, hi)` without taking the
/// gate per block (the caller holds it).
pub(crate) fn leaves_unlocked(io: &tarn_block::BlockIo, meta: &DnodePhys, lo: u64, hi: u64, f: &mut dyn FnMut(u64, BlockPtr) -> Result<()>) -> Result<()> {
    fn rec(io: &tarn_block::BlockIo, level: u8, first: u64, bp: BlockPtr, lo: u64, hi: u64, f: &mut dyn FnMut(u64, BlockPtr) -> Result<()>) -> Result<()> {
        let end = first.saturating_add(span(level));
        if bp.is_hole() || end <= lo || first >= hi {
            return Ok(());
        }
        if level == 0 {
            return f(first, bp);
        }
        if bp.level != level {
            return Err(ObjError::Corrupt(format!("block pointer of level {} where level {level} belongs", bp.level)));
        }
        let kids = read_children(io, &bp)?;
        let cs = span(level - 1);
        for (j, c) in kids.into_iter().enumerate() {
            rec(io, level - 1, first.saturating_add((j as u64).saturating_mul(cs)), c, lo, hi, f)?;
        }
        Ok(())
    }
    if !meta.in_use() {
        return Ok(());
    }
    let s = span(meta.nlevels - 1);
    for (i, bp) in meta.bps.iter().enumerate() {
        rec(io, meta.nlevels - 1, (i as u64).saturating_mul(s), *bp, lo, hi, f)?;
    }
    Ok(())
}
