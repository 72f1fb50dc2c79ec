//! Directories: entries, lookup, creation of every kind of inode,
//! hard links, unlink and rmdir.

use tarn_obj::zap::Zap;
use tarn_obj::ObjectId;

use crate::format::{decode_dirent, encode_dirent, InodePhys, FLAG_UNLINKED};
use crate::{
    is_dir, is_reg, kind_of, now_ns, otype, Attr, Cred, FileKind, Fs, FsError, Result, LINK_MAX,
    MIN_BLOCK, NAME_MAX,
};

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
        self.add_ref(ino);
        Ok(attr)
    }

    /// Common path for every operation that adds a new inode under `dir`.
    #[expect(
        clippy::too_many_arguments,
        reason = "one private constructor shared by five public operations"
    )]
    pub(crate) fn make_node(
        &self,
        dir: u64,
        name: &[u8],
        kind: FileKind,
        perm: u32,
        cred: Cred,
        rdev: u64,
        exclusive: bool,
        symlink_target: Option<&[u8]>,
    ) -> Result<(Attr, bool)> {
        self.writable()?;
        check_name(name)?;
        self.make_room(4096 + symlink_target.map_or(0, |t| t.len() as u64))?;
        let tx = self.pool.begin();
        let _g = self.lock_set(&[dir]);
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
            self.add_ref(ino);
            return Ok((a, false));
        }
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
            generation: tx.txg(),
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
        self.add_ref(ino.0);
        Ok((a, true))
    }

    /// Create a regular file. With `exclusive` an existing name is EEXIST;
    /// otherwise the existing file is returned (`.1 == false`).
    pub fn create(
        &self,
        dir: u64,
        name: &[u8],
        perm: u32,
        cred: Cred,
        exclusive: bool,
    ) -> Result<(Attr, bool)> {
        self.make_node(dir, name, FileKind::File, perm, cred, 0, exclusive, None)
    }

    pub fn mkdir(&self, dir: u64, name: &[u8], perm: u32, cred: Cred) -> Result<Attr> {
        Ok(self
            .make_node(dir, name, FileKind::Dir, perm, cred, 0, true, None)?
            .0)
    }

    /// `mode` carries the file type (S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK, S_IFREG).
    pub fn mknod(&self, dir: u64, name: &[u8], mode: u32, rdev: u64, cred: Cred) -> Result<Attr> {
        let kind = match FileKind::from_mode(mode) {
            Some(
                k @ (FileKind::Fifo
                | FileKind::Socket
                | FileKind::CharDev
                | FileKind::BlockDev
                | FileKind::File),
            ) => k,
            Some(FileKind::Dir) => return Err(FsError::Perm),
            _ => return Err(FsError::Invalid("mknod type")),
        };
        let rdev = if matches!(kind, FileKind::CharDev | FileKind::BlockDev) {
            rdev
        } else {
            0
        };
        Ok(self
            .make_node(dir, name, kind, mode, cred, rdev, true, None)?
            .0)
    }

    pub fn symlink(&self, dir: u64, name: &[u8], target: &[u8], cred: Cred) -> Result<Attr> {
        if target.is_empty() {
            return Err(FsError::NotFound);
        }
        if target.len() > 4096 {
            return Err(FsError::NameTooLong);
        }
        Ok(self
            .make_node(
                dir,
                name,
                FileKind::Symlink,
                0o777,
                cred,
                0,
                true,
                Some(target),
            )?
            .0)
    }

    /// New hard link `dir/name` to `ino`; adds one reference.
    pub fn link(&self, ino: u64, dir: u64, name: &[u8]) -> Result<Attr> {
        self.writable()?;
        check_name(name)?;
        let tx = self.pool.begin();
        let _g = self.lock_set(&[dir, ino]);
        let mut dp = self.dir(dir)?;
        if dp.nlink == 0 {
            return Err(FsError::NotFound);
        }
        let mut p = self.inode(ino)?;
        if is_dir(&p) {
            return Err(FsError::Perm);
        }
        if p.nlink >= LINK_MAX {
            return Err(FsError::TooManyLinks);
        }
        if self.dir_lookup(dir, name)?.is_some() {
            return Err(FsError::Exists);
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
        self.add_ref(ino);
        Ok(a)
    }

    pub(crate) fn remove_entry(&self, dir: u64, name: &[u8], want_dir: bool) -> Result<()> {
        self.writable()?;
        check_name(name)?;
        let tx = self.pool.begin();
        let (_g, ino, _) = self.lock_child(dir, name)?;
        let mut dp = self.dir(dir)?;
        let mut p = self.inode(ino)?;
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
        self.remove_entry(dir, name, false)
    }

    pub fn rmdir(&self, dir: u64, name: &[u8]) -> Result<()> {
        if name == b"." {
            return Err(FsError::Invalid("rmdir ."));
        }
        if name == b".." {
            return Err(FsError::NotEmpty);
        }
        self.remove_entry(dir, name, true)
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

    /// Number of entries in a directory (without `.` and `..`).
    pub fn dir_entries(&self, dir: u64) -> Result<u64> {
        self.dir(dir)?;
        Ok(Zap::count(&self.os, ObjectId(dir))?)
    }
}
