//! Directory listings: `readdir` (names and types) and `readdir_plus`
//! (names with every entry's attributes, for FUSE READDIRPLUS).
//!
//! Offsets: 0 is the start, 1 follows `.`, 2 follows `..`; past that an
//! offset is a ZAP cookie plus `DIR_OFFSET_BIAS`, stable across creates
//! and removes (tarn_obj::zap).
//!
//! `readdir_plus` is `lookup` for a whole batch of entries: every entry it
//! hands out (and the caller takes) gets one reference, exactly as a
//! `lookup` of that name would, because the kernel counts each entry of a
//! READDIRPLUS reply as a lookup and later gives it back with `forget`.
//! `.` and `..` get none (the kernel does not count them). The directory's
//! lock is held while an entry's attributes are read and its reference
//! taken, as in `lookup`, so an unlink cannot free the inode in between:
//! it either happens before (the entry is not listed) or sees the
//! reference (the inode goes to the unlinked set and stays readable).
//!
//! Cold walks: before reading the attributes of a batch of entries, the
//! dnode blocks of the whole batch are read in parallel
//! (`ObjectSet::prefetch_dnodes`), so a directory of a thousand files costs
//! a few rounds of parallel block reads instead of one read per dnode block
//! in turn.

use tarn_obj::zap::Zap;
use tarn_obj::{ObjError, ObjectId};

use crate::format::{decode_dirent, InodePhys};
use crate::{Attr, DirEntry, FileKind, Fs, FsError, Result, DIR_OFFSET_BIAS, MASTER_OBJECT};

/// Entries read (and their dnodes prefetched) per batch of `readdir_plus`:
/// a little more than one 32 KiB READDIRPLUS reply holds (~200 entries),
/// so the next reply finds its first dnodes already cached.
pub const READDIR_PLUS_BATCH: usize = 256;

impl Fs {
    /// Attributes of `ino`, named by an entry of `dir`: one dnode look-up.
    fn child_attr(&self, dir: u64, ino: u64) -> Result<Attr> {
        let missing = || FsError::Corrupt(format!("directory {dir} names missing inode {ino}"));
        if ino == MASTER_OBJECT || ino == self.unlinked.0 {
            return Err(missing());
        }
        let info = match self.os.info_for_walk(ObjectId(ino)) {
            Ok(i) => i,
            Err(ObjError::NotFound(_)) => return Err(missing()),
            Err(e) => return Err(e.into()),
        };
        let p = InodePhys::decode(ino, &info.bonus)?;
        Ok(self.attr_from(ino, &p, &info))
    }

    /// List `dir` from `offset` (0 = start; `.` and `..` first). The
    /// callback returns false to stop; pass an entry's `next_offset` to
    /// continue after it. Offsets stay valid across creates and removes.
    pub fn readdir(
        &self,
        dir: u64,
        offset: u64,
        f: &mut dyn FnMut(&DirEntry) -> bool,
    ) -> Result<()> {
        let dp = {
            let _g = self.read_lock(dir);
            self.dir(dir)?
        };
        if offset == 0
            && !f(&DirEntry {
                ino: dir,
                kind: FileKind::Dir,
                name: b".".to_vec(),
                next_offset: 1,
            })
        {
            return Ok(());
        }
        if offset <= 1
            && !f(&DirEntry {
                ino: dp.parent,
                kind: FileKind::Dir,
                name: b"..".to_vec(),
                next_offset: 2,
            })
        {
            return Ok(());
        }
        let cookie = offset.max(DIR_OFFSET_BIAS) - DIR_OFFSET_BIAS;
        let mut err = None;
        Zap::iterate(
            &self.os,
            ObjectId(dir),
            cookie,
            &mut |next, k, v| match decode_dirent(v) {
                Ok((ino, t)) => {
                    let kind = FileKind::from_dtype(t).unwrap_or(FileKind::File);
                    f(&DirEntry {
                        ino,
                        kind,
                        name: k.to_vec(),
                        next_offset: next + DIR_OFFSET_BIAS,
                    })
                }
                Err(e) => {
                    err = Some(e);
                    false
                }
            },
        )?;
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Like `readdir`, with each entry's attributes. The callback returns
    /// true when it took the entry and wants the next one; every entry
    /// taken, except `.` and `..`, gets one reference (see `lookup`,
    /// `forget`). An entry the callback refuses (false) gets none and ends
    /// the listing. The callback must not call back into this `Fs` (the
    /// directory's lock is held while it runs).
    ///
    /// An entry whose inode does not read (EIO: a damaged dnode block, an
    /// entry naming a missing inode) comes without attributes (`None`) and
    /// takes no reference: the listing goes on, as `ls` of such a
    /// directory does on ZFS, and only that entry's `stat` fails.
    pub fn readdir_plus(
        &self,
        dir: u64,
        offset: u64,
        f: &mut dyn FnMut(&DirEntry, Option<&Attr>) -> bool,
    ) -> Result<()> {
        self.readdir_plus_how(dir, offset, true, f)
    }

    /// `readdir_plus` without references (see `lookup_noref`).
    pub fn readdir_plus_noref(
        &self,
        dir: u64,
        offset: u64,
        f: &mut dyn FnMut(&DirEntry, Option<&Attr>) -> bool,
    ) -> Result<()> {
        self.readdir_plus_how(dir, offset, false, f)
    }

    fn readdir_plus_how(
        &self,
        dir: u64,
        offset: u64,
        take_refs: bool,
        f: &mut dyn FnMut(&DirEntry, Option<&Attr>) -> bool,
    ) -> Result<()> {
        let _g = self.read_lock(dir);
        let dp = self.dir(dir)?;
        if offset == 0 {
            let me = DirEntry { ino: dir, kind: FileKind::Dir, name: b".".to_vec(), next_offset: 1 };
            if !f(&me, Some(&self.attr_of(dir, &dp)?)) {
                return Ok(());
            }
        }
        if offset <= 1 {
            // A removed directory's parent may be gone: the kernel ignores
            // the attributes of `..` anyway, so the directory's own do then.
            let parent = match self.inode(dp.parent) {
                Ok(p) => self.attr_of(dp.parent, &p)?,
                Err(_) => self.attr_of(dir, &dp)?,
            };
            let up = DirEntry { ino: dp.parent, kind: FileKind::Dir, name: b"..".to_vec(), next_offset: 2 };
            if !f(&up, Some(&parent)) {
                return Ok(());
            }
        }
        let mut cookie = offset.max(DIR_OFFSET_BIAS) - DIR_OFFSET_BIAS;
        loop {
            let mut batch: Vec<DirEntry> = Vec::with_capacity(READDIR_PLUS_BATCH);
            let mut err = None;
            Zap::iterate(&self.os, ObjectId(dir), cookie, &mut |next, k, v| match decode_dirent(v) {
                Ok((ino, t)) => {
                    batch.push(DirEntry {
                        ino,
                        kind: FileKind::from_dtype(t).unwrap_or(FileKind::File),
                        name: k.to_vec(),
                        next_offset: next + DIR_OFFSET_BIAS,
                    });
                    batch.len() < READDIR_PLUS_BATCH
                }
                Err(e) => {
                    err = Some(e);
                    false
                }
            })?;
            let complete = batch.len() < READDIR_PLUS_BATCH;
            let inos: Vec<ObjectId> = batch.iter().map(|e| ObjectId(e.ino)).collect();
            self.os.prefetch_dnodes(&inos);
            for e in &batch {
                let attr = match self.child_attr(dir, e.ino) {
                    Ok(attr) => Some(attr),
                    Err(err) if err.errno() == libc::EIO => None,
                    Err(err) => return Err(err),
                };
                if !f(e, attr.as_ref()) {
                    return Ok(());
                }
                if take_refs && attr.is_some() {
                    self.add_ref(e.ino);
                }
                cookie = e.next_offset - DIR_OFFSET_BIAS;
            }
            if let Some(e) = err {
                return Err(e);
            }
            if complete {
                return Ok(());
            }
        }
    }
}
