//! Directories: entries, lookup, creation of every kind of inode,
//! hard links, unlink and rmdir.

use tarn_obj::zap::Zap;
use tarn_obj::ObjectId;

use crate::format::{decode_dirent, encode_dirent, InodePhys, FLAG_UNLINKED};
use crate::{
    is_dir, is_reg, kind_of, now_ns, otype, Attr, Cred, FileKind, Fs, FsError, Result, LINK_MAX,
    MIN_BLOCK, NAME_MAX,
};

/// A permission check of a new entry: given the directory, the inode
/// (for `link`; the directory again for a new inode) and the permission
/// bits asked for, the bits to give.
pub(crate) type EntryCheck<'a> = dyn Fn(&InodePhys, &InodePhys, u32) -> Result<u32> + 'a;

/// A permission check of a removal: given the directory and the inode.
pub(crate) type RemoveCheck<'a> = dyn Fn(&InodePhys, &InodePhys) -> Result<()> + 'a;

/// How an entry-making operation runs: whether it takes a FUSE reference
/// on the entry it returns, and a check run under the directory's lock.
#[derive(Clone, Copy)]
pub(crate) struct How<'a> {
    pub(crate) take_ref: bool,
    /// For a new inode: given the directory and the permission bits asked
    /// for, once the name is known to be free, returns the bits to give
    /// (or refuses). For `link`: given the directory and the inode.
    pub(crate) check: Option<&'a EntryCheck<'a>>,
}

impl How<'_> {
    /// What FUSE does: one reference per entry, no checks (the kernel's).
    pub(crate) const FUSE: How<'static> = How { take_ref: true, check: None };
    /// No reference, no checks.
    pub(crate) const NOREF: How<'static> = How { take_ref: false, check: None };
}

/// What `make_node` makes.
pub(crate) struct NewNode<'a> {
    pub(crate) kind: FileKind,
    pub(crate) perm: u32,
    pub(crate) cred: Cred,
    pub(crate) rdev: u64,
    pub(crate) exclusive: bool,
    pub(crate) target: Option<&'a [u8]>,
}

pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(FsError::Invalid("bad name"));
    }
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    Ok(())
}

impl Fs {
    pub(crate) fn dir_lookup(&self, dir: u64, name: &[u8]) -> Result<Option<(u64, FileKind)>> {
        match Zap::lookup(&self.os, ObjectId(dir), name)? {
            None => Ok(None),
            Some(v) => {
                let (ino, t) = decode_dirent(&v)?;
                let k = FileKind::from_dtype(t)
                    .ok_or_else(|| FsError::Corrupt("bad dirent type".into()))?;
                Ok(Some((ino, k)))
            }
        }
    }

    /// Look up `name` in `dir`; adds one reference (see `forget`).
    pub fn lookup(&self, dir: u64, name: &[u8]) -> Result<Attr> {
        self.lookup_how(dir, name, true)
    }

    /// `lookup` without a reference, for front ends that have no `forget`
    /// (NFS): the entry's lifetime is its links, and a handle to it turns
    /// stale when the last goes (`attr_by_handle`).
    pub fn lookup_noref(&self, dir: u64, name: &[u8]) -> Result<Attr> {
        self.lookup_how(dir, name, false)
    }

    pub(crate) fn lookup_how(&self, dir: u64, name: &[u8], take_ref: bool) -> Result<Attr> {
        if name.len() > NAME_MAX {
            return Err(FsError::NameTooLong);
        }
        let _g = self.read_lock(dir);
        let dp = self.dir(dir)?;
        let ino = if name == b"." {
            dir
        } else if name == b".." {
            dp.parent
        } else {
            match self.dir_lookup(dir, name)? {
                Some((i, _)) => i,
                None => return Err(FsError::NotFound),
            }
        };
        // The child's attributes are one bonus read: a consistent snapshot
        // without taking its lock (which could invert the shard order).
        let attr = if ino == dir {
            self.attr_of(ino, &dp)?
        } else {
            self.attr_of(ino, &self.inode(ino)?)?
        };
        if take_ref {
            self.add_ref(ino);
        }
        Ok(attr)
    }

    /// Common path for every operation that adds a new inode under `dir`.
    pub(crate) fn make_node(
        &self,
        dir: u64,
        name: &[u8],
        node: &NewNode<'_>,
        how: How<'_>,
    ) -> Result<(Attr, bool)> {
        self.committed(self.make_node_uncommitted(dir, name, node, how))
    }

    fn make_node_uncommitted(
        &self,
        dir: u64,
        name: &[u8],
        node: &NewNode<'_>,
        how: How<'_>,
    ) -> Result<(Attr, bool)> {
        let NewNode { kind, perm, cred, rdev, exclusive, target: symlink_target } = *node;
        self.writable()?;
        check_name(name)?;
        self.make_room(4096 + symlink_target.map_or(0, |t| t.len() as u64))?;
        self.ensure_epoch()?;
        let tx = self.begin();
        let _g = self.lock_set(&tx, &[dir]);
        let mut dp = self.dir(dir)?;
        if dp.nlink == 0 {
            return Err(FsError::NotFound);
        }
        if let Some((ino, k)) = self.dir_lookup(dir, name)? {
            if exclusive || kind != FileKind::File {
                return Err(FsError::Exists);
            }
            if k == FileKind::Dir {
                return Err(FsError::IsDir);
            }
            // Non-exclusive create of an existing file opens it.
            let p = self.inode(ino)?;
            let a = self.attr_of(ino, &p)?;
            if how.take_ref {
                self.add_ref(ino);
            }
            return Ok((a, false));
        }
        let perm = match how.check {
            Some(check) => check(&dp, &dp, perm)?,
            None => perm,
        };
        let now = now_ns();
        let mut mode = kind.mode_bits() | (perm & 0o7777);
        let mut gid = cred.gid;
        if dp.mode & libc::S_ISGID != 0 {
            gid = dp.gid;
            if kind == FileKind::Dir {
                mode |= libc::S_ISGID;
            }
        }
        let mut p = InodePhys {
            mode,
            nlink: if kind == FileKind::Dir { 2 } else { 1 },
            uid: cred.uid,
            gid,
            size: 0,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            crtime_ns: now,
            parent: dir,
            generation: self.new_generation(&tx),
            rdev,
            ..Default::default()
        };
        let ino = match kind {
            FileKind::Dir => {
                p.size = 2;
                let o = Zap::create(&self.os, &tx, otype::DIR)?;
                self.os.set_bonus(&tx, o, &p.encode())?;
                o
            }
            FileKind::Symlink => {
                let t = symlink_target.unwrap_or_default();
                p.size = t.len() as u64;
                let bs = (t.len() as u32).div_ceil(MIN_BLOCK).max(1) * MIN_BLOCK;
                let o = self.os.create(&tx, otype::SYMLINK, bs, &p.encode())?;
                self.os.write_data(&tx, o, 0, t)?;
                o
            }
            FileKind::File => self.os.create(&tx, otype::FILE, MIN_BLOCK, &p.encode())?,
            _ => self
                .os
                .create(&tx, otype::SPECIAL, MIN_BLOCK, &p.encode())?,
        };
        Zap::insert(
            &self.os,
            &tx,
            ObjectId(dir),
            name,
            &encode_dirent(ino.0, kind.dtype()),
        )?;
        dp.size += 1;
        if kind == FileKind::Dir {
            dp.nlink += 1;
        }
        dp.mtime_ns = now;
        dp.ctime_ns = now;
        self.put_inode(&tx, dir, &dp)?;
        let a = self.attr_of(ino.0, &p)?;
        if how.take_ref {
            self.add_ref(ino.0);
        }
        Ok((a, true))
    }

    /// Create a regular file. With `exclusive` an existing name is EEXIST;
    /// otherwise the existing file is returned (`.1 == false`). Adds one
    /// reference.
    pub fn create(
        &self,
        dir: u64,
        name: &[u8],
        perm: u32,
        cred: Cred,
        exclusive: bool,
    ) -> Result<(Attr, bool)> {
        self.create_how(dir, name, perm, cred, exclusive, How::FUSE)
    }

    /// `create` without a reference (see `lookup_noref`).
    pub fn create_noref(
        &self,
        dir: u64,
        name: &[u8],
        perm: u32,
        cred: Cred,
        exclusive: bool,
    ) -> Result<(Attr, bool)> {
        self.create_how(dir, name, perm, cred, exclusive, How::NOREF)
    }

    pub(crate) fn create_how(
        &self,
        dir: u64,
        name: &[u8],
        perm: u32,
        cred: Cred,
        exclusive: bool,
        how: How<'_>,
    ) -> Result<(Attr, bool)> {
        let node = NewNode { kind: FileKind::File, perm, cred, rdev: 0, exclusive, target: None };
        self.make_node(dir, name, &node, how)
    }

    /// Adds one reference.
    pub fn mkdir(&self, dir: u64, name: &[u8], perm: u32, cred: Cred) -> Result<Attr> {
        self.mkdir_how(dir, name, perm, cred, How::FUSE)
    }

    /// `mkdir` without a reference.
    pub fn mkdir_noref(&self, dir: u64, name: &[u8], perm: u32, cred: Cred) -> Result<Attr> {
        self.mkdir_how(dir, name, perm, cred, How::NOREF)
    }

    pub(crate) fn mkdir_how(
        &self,
        dir: u64,
        name: &[u8],
        perm: u32,
        cred: Cred,
        how: How<'_>,
    ) -> Result<Attr> {
        let node = NewNode { kind: FileKind::Dir, perm, cred, rdev: 0, exclusive: true, target: None };
        Ok(self.make_node(dir, name, &node, how)?.0)
    }

    /// `mode` carries the file type (S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK,
    /// S_IFREG). Adds one reference.
    pub fn mknod(&self, dir: u64, name: &[u8], mode: u32, rdev: u64, cred: Cred) -> Result<Attr> {
        self.mknod_how(dir, name, mode, rdev, cred, How::FUSE)
    }

    /// `mknod` without a reference.
    pub fn mknod_noref(
        &self,
        dir: u64,
        name: &[u8],
        mode: u32,
        rdev: u64,
        cred: Cred,
    ) -> Result<Attr> {
        self.mknod_how(dir, name, mode, rdev, cred, How::NOREF)
    }

    pub(crate) fn mknod_how(
        &self,
        dir: u64,
        name: &[u8],
        mode: u32,
        rdev: u64,
        cred: Cred,
        how: How<'_>,
    ) -> Result<Attr> {
        let kind = mknod_kind(mode)?;
        let rdev = if matches!(kind, FileKind::CharDev | FileKind::BlockDev) {
            rdev
        } else {
            0
        };
        let node = NewNode { kind, perm: mode, cred, rdev, exclusive: true, target: None };
        Ok(self.make_node(dir, name, &node, how)?.0)
    }

    /// Adds one reference.
    pub fn symlink(&self, dir: u64, name: &[u8], target: &[u8], cred: Cred) -> Result<Attr> {
        self.symlink_how(dir, name, target, cred, How::FUSE)
    }

    /// `symlink` without a reference.
    pub fn symlink_noref(&self, dir: u64, name: &[u8], target: &[u8], cred: Cred) -> Result<Attr> {
        self.symlink_how(dir, name, target, cred, How::NOREF)
    }

    pub(crate) fn symlink_how(
        &self,
        dir: u64,
        name: &[u8],
        target: &[u8],
        cred: Cred,
        how: How<'_>,
    ) -> Result<Attr> {
        if target.is_empty() {
            return Err(FsError::NotFound);
        }
        if target.len() > 4096 {
            return Err(FsError::NameTooLong);
        }
        let node = NewNode {
            kind: FileKind::Symlink,
            perm: 0o777,
            cred,
            rdev: 0,
            exclusive: true,
            target: Some(target),
        };
        Ok(self.make_node(dir, name, &node, how)?.0)
    }

    /// New hard link `dir/name` to `ino`; adds one reference.
    pub fn link(&self, ino: u64, dir: u64, name: &[u8]) -> Result<Attr> {
        self.link_how(ino, dir, name, How::FUSE)
    }

    /// `link` without a reference.
    pub fn link_noref(&self, ino: u64, dir: u64, name: &[u8]) -> Result<Attr> {
        self.link_how(ino, dir, name, How::NOREF)
    }

    pub(crate) fn link_how(&self, ino: u64, dir: u64, name: &[u8], how: How<'_>) -> Result<Attr> {
        self.committed(self.link_how_uncommitted(ino, dir, name, how))
    }

    fn link_how_uncommitted(&self, ino: u64, dir: u64, name: &[u8], how: How<'_>) -> Result<Attr> {
        self.writable()?;
        check_name(name)?;
        let tx = self.begin();
        let _g = self.lock_set(&tx, &[dir, ino]);
        let mut dp = self.dir(dir)?;
        if dp.nlink == 0 {
            return Err(FsError::NotFound);
        }
        let mut p = self.inode(ino)?;
        // Linux's order: the name, then permissions, then what the inode allows.
        if self.dir_lookup(dir, name)?.is_some() {
            return Err(FsError::Exists);
        }
        if let Some(check) = how.check {
            check(&dp, &p, 0)?;
        }
        if is_dir(&p) {
            return Err(FsError::Perm);
        }
        if p.nlink >= LINK_MAX {
            return Err(FsError::TooManyLinks);
        }
        if p.nlink == 0 && (p.flags & FLAG_UNLINKED == 0 || !is_reg(&p)) {
            return Err(FsError::NotFound);
        }
        let now = now_ns();
        Zap::insert(
            &self.os,
            &tx,
            ObjectId(dir),
            name,
            &encode_dirent(ino, kind_of(&p).dtype()),
        )?;
        if p.nlink == 0 {
            // An O_TMPFILE file getting its name (tmpfile.rs).
            self.relink(&tx, ino, &mut p)?;
        }
        p.nlink += 1;
        p.ctime_ns = now;
        self.put_inode(&tx, ino, &p)?;
        dp.size += 1;
        dp.mtime_ns = now;
        dp.ctime_ns = now;
        self.put_inode(&tx, dir, &dp)?;
        let a = self.attr_of(ino, &p)?;
        if how.take_ref {
            self.add_ref(ino);
        }
        Ok(a)
    }

    /// Remove `dir/name`; `check` (permissions, given the directory and
    /// the inode) runs under their locks before anything else is checked.
    pub(crate) fn remove_entry(
        &self,
        dir: u64,
        name: &[u8],
        want_dir: bool,
        check: Option<&RemoveCheck<'_>>,
    ) -> Result<()> {
        self.committed(self.remove_entry_uncommitted(dir, name, want_dir, check))
    }

    fn remove_entry_uncommitted(
        &self,
        dir: u64,
        name: &[u8],
        want_dir: bool,
        check: Option<&RemoveCheck<'_>>,
    ) -> Result<()> {
        self.writable()?;
        check_name(name)?;
        let tx = self.begin();
        let (_g, ino, _) = self.lock_child(&tx, dir, name)?;
        let mut dp = self.dir(dir)?;
        let mut p = self.inode(ino)?;
        if let Some(check) = check {
            check(&dp, &p)?;
        }
        if want_dir {
            if !is_dir(&p) {
                return Err(FsError::NotDir);
            }
            if Zap::count(&self.os, ObjectId(ino))? != 0 {
                return Err(FsError::NotEmpty);
            }
            if ino == self.root {
                return Err(FsError::Perm);
            }
        } else if is_dir(&p) {
            return Err(FsError::IsDir);
        }
        let now = now_ns();
        Zap::remove(&self.os, &tx, ObjectId(dir), name)?;
        dp.size = dp.size.saturating_sub(1);
        if want_dir {
            dp.nlink = dp.nlink.saturating_sub(1);
        }
        dp.mtime_ns = now;
        dp.ctime_ns = now;
        self.put_inode(&tx, dir, &dp)?;
        self.drop_link(&tx, ino, &mut p, now)
    }

    pub fn unlink(&self, dir: u64, name: &[u8]) -> Result<()> {
        self.remove_entry(dir, name, false, None)
    }

    pub fn rmdir(&self, dir: u64, name: &[u8]) -> Result<()> {
        check_rmdir_name(name)?;
        self.remove_entry(dir, name, true, None)
    }

    /// The path of `ino` below the root (`/a/b`), found by following its
    /// parent pointers and looking its name up in each parent; None if a
    /// link is missing (a file unlinked, or renamed away meanwhile). For
    /// `pool status -v`.
    pub fn path_of(&self, ino: u64) -> Option<String> {
        let root = self.root_ino();
        let mut names: Vec<Vec<u8>> = Vec::new();
        let mut cur = ino;
        for _ in 0..4096 {
            if cur == root {
                names.reverse();
                let parts: Vec<String> = names
                    .iter()
                    .map(|n| String::from_utf8_lossy(n).into_owned())
                    .collect();
                return Some(format!("/{}", parts.join("/")));
            }
            let parent = self.inode(cur).ok()?.parent;
            let mut found = None;
            self.readdir(parent, 2, &mut |e| {
                if e.ino == cur {
                    found = Some(e.name.clone());
                    false
                } else {
                    true
                }
            })
            .ok()?;
            names.push(found?);
            cur = parent;
        }
        None
    }

    /// The paths below the root (`/a/b`) of those of `inos` that some
    /// directory names, found by walking the tree from the root through
    /// directory entries alone: it works for objects whose own inode does
    /// not read (a damaged dnode block), where [`Fs::path_of`] cannot. A
    /// directory that does not read is passed over; at most `limit`
    /// entries are visited. For `pool status -v`.
    pub fn paths_by_walk(&self, inos: &std::collections::BTreeSet<u64>, limit: u64) -> std::collections::BTreeMap<u64, String> {
        let mut found = std::collections::BTreeMap::new();
        let mut dirs = std::collections::VecDeque::from([(self.root_ino(), String::new())]);
        let mut visited = 0u64;
        while let Some((dir, path)) = dirs.pop_front() {
            let _ = self.readdir(dir, 2, &mut |e| {
                visited += 1;
                let child = format!("{path}/{}", String::from_utf8_lossy(&e.name));
                if inos.contains(&e.ino) {
                    found.entry(e.ino).or_insert_with(|| child.clone());
                }
                if e.kind == FileKind::Dir {
                    dirs.push_back((e.ino, child));
                }
                visited < limit && found.len() < inos.len()
            });
            if visited >= limit || found.len() == inos.len() {
                break;
            }
        }
        found
    }

    /// Number of entries in a directory (without `.` and `..`).
    pub fn dir_entries(&self, dir: u64) -> Result<u64> {
        self.dir(dir)?;
        Ok(Zap::count(&self.os, ObjectId(dir))?)
    }
}

/// The kind `mknod` makes from `mode`'s file type.
fn mknod_kind(mode: u32) -> Result<FileKind> {
    match FileKind::from_mode(mode) {
        Some(
            k @ (FileKind::Fifo
            | FileKind::Socket
            | FileKind::CharDev
            | FileKind::BlockDev
            | FileKind::File),
        ) => Ok(k),
        Some(FileKind::Dir) => Err(FsError::Perm),
        _ => Err(FsError::Invalid("mknod type")),
    }
}

/// rmdir of `.` is EINVAL and of `..` ENOTEMPTY, as Linux answers.
pub(crate) fn check_rmdir_name(name: &[u8]) -> Result<()> {
    if name == b"." {
        return Err(FsError::Invalid("rmdir ."));
    }
    if name == b".." {
        return Err(FsError::NotEmpty);
    }
    Ok(())
}
