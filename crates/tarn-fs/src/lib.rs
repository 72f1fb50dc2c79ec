//! tarn-fs: the POSIX layer (the ZPL of tarn) over objects and ZAPs.
//!
//! An inode is an object; its number (`ino`) is the object id. Attributes
//! live in the object's 96-byte bonus (`format::InodePhys`), directories are
//! ZAPs (name → object id + type), symlink targets and file data are object
//! data. Object 1 is the master node (a ZAP naming the root directory and
//! the unlinked set). Byte layouts: `format.rs`.
//!
//! # References and the unlinked set
//!
//! Operations that hand out an entry (`lookup`, `create`, `mkdir`,
//! `mknod`, `symlink`, `link`) add one reference to the inode (the FUSE
//! "lookup count"); the caller gives it back with `forget`. When the last
//! link of an inode goes away while it is referenced, the inode is put in
//! the persistent unlinked set (same transaction) and stays readable and
//! writable; the last `forget` frees it. `Fs::open` frees everything left
//! in the unlinked set (files that were open at a crash).
//!
//! # Lock order (never take them in another order)
//!
//! 1. `Tx` (`pool.begin()`): always first. No lock below is ever held
//!    while calling `begin()`, and no code creates a `Tx` while holding one.
//! 2. `rename_lock` (serialises renames, so the "directory into its own
//!    subtree" walk up the parent chain is stable).
//! 3. Inode shard locks (`RwLock` per shard of `ino`), several taken at once
//!    only through `lock_set`, in ascending shard order. Read locks for
//!    lookups/reads, write locks for any read-modify-write of an inode or a
//!    directory's contents.
//! 4. Reference-count shard mutexes (`refs`), held only for a counter update.
//! 5. ZAP stripe locks inside `tarn_obj::zap` (leaf locks).
//!
//! Data-path reads and writes take only their own inode's shard lock, so I/O
//! on different files runs in parallel. `fsync` holds nothing while it waits
//! for `pool.sync()`.

use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tarn_obj::zap::Zap;
use tarn_obj::{ObjError, ObjPool, ObjectId, ObjectSet, Tx};

pub mod falloc;
pub mod format;
pub mod snapshots;
pub use snapshots::SnapshotSource;
mod tmpfile;
mod privileges;
mod readdir;
pub use privileges::XATTR_SECURITY_CAPABILITY;
pub use readdir::READDIR_PLUS_BATCH;
use format::{decode_dirent, encode_dirent, u64_value, InodePhys, FLAG_UNLINKED};

pub type Result<T> = std::result::Result<T, FsError>;

/// Object types owned by tarn-fs.
pub mod otype {
    use tarn_obj::ObjType;
    pub const MASTER: ObjType = ObjType(16);
    pub const DIR: ObjType = ObjType(17);
    pub const FILE: ObjType = ObjType(18);
    pub const SYMLINK: ObjType = ObjType(19);
    pub const SPECIAL: ObjType = ObjType(20);
    pub const XATTR_DIR: ObjType = ObjType(21);
    pub const XATTR_VALUE: ObjType = ObjType(22);
    pub const UNLINKED_SET: ObjType = ObjType(23);
}

pub const MASTER_OBJECT: u64 = 1;
pub const NAME_MAX: usize = 255;
pub const XATTR_NAME_MAX: usize = 255;
pub const XATTR_SIZE_MAX: usize = 64 * 1024;
/// Largest file offset accepted (2^50 bytes = 1 PiB).
pub const MAX_FILE_SIZE: u64 = 1 << 50;
pub const LINK_MAX: u32 = 65_000;
const XATTR_INLINE_MAX: usize = tarn_obj::zap::MAX_VALUE_LEN - 1;
const MIN_BLOCK: u32 = 512;
const SHARDS: usize = 1024;
const REF_SHARDS: usize = 64;
/// readdir offsets: 0 = start, 1 = after ".", 2 = after "..", then ZAP cookie + 2.
const DIR_OFFSET_BIAS: u64 = 2;

pub const XATTR_CREATE: u32 = 1;
pub const XATTR_REPLACE: u32 = 2;
pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("name too long")]
    NameTooLong,
    #[error("read-only file system")]
    ReadOnly,
    #[error("no such attribute")]
    NoData,
    #[error("attribute value too large")]
    TooBig,
    #[error("operation not permitted")]
    Perm,
    #[error("too many links")]
    TooManyLinks,
    #[error("file too large")]
    FileTooBig,
    #[error("quota exceeded")]
    Quota,
    #[error("operation not supported: {0}")]
    NotSupported(&'static str),
    #[error("no such device")]
    NoDevice,
    #[error("no data or hole at or past the end of the file")]
    NoSuchOffset,
    #[error("corrupt: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Obj(#[from] ObjError),
}

impl FsError {
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::Exists => libc::EEXIST,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::Invalid(_) => libc::EINVAL,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::ReadOnly => libc::EROFS,
            FsError::NoData => libc::ENODATA,
            FsError::TooBig => libc::E2BIG,
            FsError::Perm => libc::EPERM,
            FsError::TooManyLinks => libc::EMLINK,
            FsError::FileTooBig => libc::EFBIG,
            FsError::Quota => libc::EDQUOT,
            FsError::NotSupported(_) => libc::EOPNOTSUPP,
            FsError::NoDevice => libc::ENODEV,
            FsError::NoSuchOffset => libc::ENXIO,
            FsError::Corrupt(_) => libc::EIO,
            FsError::Obj(e) => e.errno(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsOptions {
    pub recordsize: u32,
    pub atime: bool,
    pub readonly: bool,
}

impl Default for FsOptions {
    fn default() -> Self {
        FsOptions {
            recordsize: 128 * 1024,
            atime: true,
            readonly: false,
        }
    }
}

/// How much more a file system may take (its dataset's `quota` and its
/// ancestors'), asked before every change that adds data. The dataset
/// layer knows; tests may give a fixed one.
pub trait SpaceLimit: Send + Sync {
    /// Bytes (as `used` counts them) it may still grow by, counting
    /// changes not yet written out, and whether any such changes were
    /// counted (writing them out may leave more room). None: no limit.
    fn remaining(&self) -> Option<(u64, bool)>;
}

/// Waits for unwritten changes before answering "over quota" or "no
/// space": their estimates are larger than what they take once written.
const SPACE_RETRIES: u32 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDev,
    BlockDev,
}

impl FileKind {
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileKind::File,
            libc::S_IFDIR => FileKind::Dir,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDev,
            libc::S_IFBLK => FileKind::BlockDev,
            _ => return None,
        })
    }
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::File => libc::S_IFREG,
            FileKind::Dir => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::Fifo => libc::S_IFIFO,
            FileKind::Socket => libc::S_IFSOCK,
            FileKind::CharDev => libc::S_IFCHR,
            FileKind::BlockDev => libc::S_IFBLK,
        }
    }
    pub fn dtype(self) -> u8 {
        match self {
            FileKind::Fifo => libc::DT_FIFO,
            FileKind::CharDev => libc::DT_CHR,
            FileKind::Dir => libc::DT_DIR,
            FileKind::BlockDev => libc::DT_BLK,
            FileKind::File => libc::DT_REG,
            FileKind::Symlink => libc::DT_LNK,
            FileKind::Socket => libc::DT_SOCK,
        }
    }
    pub fn from_dtype(t: u8) -> Option<FileKind> {
        Some(match t {
            libc::DT_FIFO => FileKind::Fifo,
            libc::DT_CHR => FileKind::CharDev,
            libc::DT_DIR => FileKind::Dir,
            libc::DT_BLK => FileKind::BlockDev,
            libc::DT_REG => FileKind::File,
            libc::DT_LNK => FileKind::Symlink,
            libc::DT_SOCK => FileKind::Socket,
            _ => return None,
        })
    }
}

/// Attributes as returned to callers (`stat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: FileKind,
    /// Permission bits only (07777).
    pub perm: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Allocated 512-byte units.
    pub blocks: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub crtime_ns: i64,
    pub rdev: u64,
    pub blksize: u32,
    pub generation: u64,
}

/// Caller identity for operations that create inodes or change ownership.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
}
impl Cred {
    pub const ROOT: Cred = Cred { uid: 0, gid: 0 };
}

/// A timestamp to set: `None` in `SetAttr` = UTIME_OMIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSet {
    Now,
    Ns(i64),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// Permission bits (07777); the file type is kept.
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: u64,
    pub kind: FileKind,
    pub name: Vec<u8>,
    /// Offset to pass to `readdir` to continue after this entry.
    pub next_offset: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    pub block_size: u32,
    pub blocks: u64,
    pub blocks_free: u64,
    pub blocks_avail: u64,
    pub files: u64,
    pub files_free: u64,
    pub name_max: u32,
}

fn now_ns() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos().min(i64::MAX as u128) as i64,
        Err(e) => -(e.duration().as_nanos().min(i64::MAX as u128) as i64),
    }
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(FsError::Invalid("bad name"));
    }
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    Ok(())
}

fn is_dir(p: &InodePhys) -> bool {
    p.mode & libc::S_IFMT == libc::S_IFDIR
}
fn is_reg(p: &InodePhys) -> bool {
    p.mode & libc::S_IFMT == libc::S_IFREG
}

fn kind_of(p: &InodePhys) -> FileKind {
    FileKind::from_mode(p.mode).unwrap_or(FileKind::File)
}

/// Guard over a set of inode shard locks (taken in ascending order).
struct LockSet<'a> {
    _guards: Vec<RwLockWriteGuard<'a, ()>>,
}

pub struct Fs {
    pool: Arc<ObjPool>,
    os: ObjectSet,
    opts: RwLock<FsOptions>,
    limit: RwLock<Option<Arc<dyn SpaceLimit>>>,
    root: u64,
    unlinked: ObjectId,
    shards: Vec<RwLock<()>>,
    rename_lock: Mutex<()>,
    refs: Vec<Mutex<HashMap<u64, u64>>>,
}

impl Fs {
    /// Format a fresh object set: master node (object 1) and root directory.
    pub fn format(os: &ObjectSet, tx: &Tx) -> Result<()> {
        os.create_with_id(
            tx,
            ObjectId(MASTER_OBJECT),
            otype::MASTER,
            tarn_obj::zap::ZAP_BLOCK_SIZE,
            &[0u8; tarn_obj::BONUS_LEN],
        )?;
        Zap::init(os, tx, ObjectId(MASTER_OBJECT))?;
        let now = now_ns();
        let root = Zap::create(os, tx, otype::DIR)?;
        let rp = InodePhys {
            mode: libc::S_IFDIR | 0o755,
            nlink: 2,
            size: 2,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            crtime_ns: now,
            parent: root.0,
            generation: tx.txg(),
            ..Default::default()
        };
        os.set_bonus(tx, root, &rp.encode())?;
        let unlinked = Zap::create(os, tx, otype::UNLINKED_SET)?;
        let m = ObjectId(MASTER_OBJECT);
        Zap::insert(os, tx, m, b"VERSION", &1u64.to_le_bytes())?;
        Zap::insert(os, tx, m, b"ROOT", &root.0.to_le_bytes())?;
        Zap::insert(os, tx, m, b"UNLINKED", &unlinked.0.to_le_bytes())?;
        Ok(())
    }

    /// Open a formatted object set; frees inodes left in the unlinked set.
    pub fn open(pool: Arc<ObjPool>, os: ObjectSet, opts: FsOptions) -> Result<Arc<Fs>> {
        let m = ObjectId(MASTER_OBJECT);
        let get = |k: &[u8]| -> Result<u64> {
            let v = Zap::lookup(&os, m, k)?
                .ok_or_else(|| FsError::Corrupt("master node incomplete".into()))?;
            u64_value(&v)
        };
        if get(b"VERSION")? != 1 {
            return Err(FsError::Corrupt("unsupported filesystem version".into()));
        }
        let root = get(b"ROOT")?;
        let unlinked = ObjectId(get(b"UNLINKED")?);
        let fs = Arc::new(Fs {
            pool,
            os,
            opts: RwLock::new(opts),
            limit: RwLock::new(None),
            root,
            unlinked,
            shards: (0..SHARDS).map(|_| RwLock::new(())).collect(),
            rename_lock: Mutex::new(()),
            refs: (0..REF_SHARDS)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
        });
        if !opts.readonly {
            fs.clean_unlinked()?;
        }
        Ok(fs)
    }

    fn clean_unlinked(&self) -> Result<()> {
        let mut inos = Vec::new();
        Zap::iterate(&self.os, self.unlinked, 0, &mut |_, k, _| {
            if let Ok(a) = <[u8; 8]>::try_from(k) {
                inos.push(u64::from_le_bytes(a));
            }
            true
        })?;
        for ino in inos {
            let tx = self.pool.begin();
            let _g = self.lock_set(&[ino]);
            // One inode that cannot be freed must not make the dataset
            // unmountable: it stays in the set and is retried next mount.
            if let Err(e) = self.free_inode(&tx, ino) {
                eprintln!("tarn: cannot free unlinked inode {ino}: {e}");
            }
        }
        Ok(())
    }

    pub fn set_options(&self, opts: FsOptions) {
        *self.opts.write() = opts;
    }
    pub fn options(&self) -> FsOptions {
        *self.opts.read()
    }
    /// The quota this file system answers to (None: none).
    pub fn set_space_limit(&self, limit: Option<Arc<dyn SpaceLimit>>) {
        *self.limit.write() = limit;
    }
    pub fn objset(&self) -> &ObjectSet {
        &self.os
    }
    pub fn pool(&self) -> &Arc<ObjPool> {
        &self.pool
    }
    /// Object id of the root directory.
    pub fn root_ino(&self) -> u64 {
        self.root
    }

    // ------------------------------------------------------------ helpers

    fn shard_of(ino: u64) -> usize {
        (ino.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as usize % SHARDS
    }
    fn read_lock(&self, ino: u64) -> RwLockReadGuard<'_, ()> {
        self.shards[Self::shard_of(ino)].read()
    }
    fn lock_set(&self, inos: &[u64]) -> LockSet<'_> {
        let mut idx: Vec<usize> = inos.iter().map(|&i| Self::shard_of(i)).collect();
        idx.sort_unstable();
        idx.dedup();
        LockSet {
            _guards: idx.into_iter().map(|i| self.shards[i].write()).collect(),
        }
    }

    fn writable(&self) -> Result<()> {
        if self.opts.read().readonly {
            return Err(FsError::ReadOnly);
        }
        Ok(())
    }

    /// Before a change that adds `extra` bytes, outside any transaction:
    /// the quota must leave room for them (counting unwritten changes, so
    /// one write can overshoot by at most itself), then the pool must
    /// (`ObjectSet::reserve` syncs txgs while pending work may make room).
    fn make_room(&self, extra: u64) -> Result<()> {
        let limit = self.limit.read().clone();
        if let Some(limit) = limit {
            let mut tries = 0;
            while let Some((remaining, pending)) = limit.remaining() {
                if extra <= remaining {
                    break;
                }
                if !pending || tries == SPACE_RETRIES {
                    return Err(FsError::Quota);
                }
                self.pool.sync()?;
                tries += 1;
            }
        }
        self.os.reserve(extra)?;
        Ok(())
    }

    fn inode(&self, ino: u64) -> Result<InodePhys> {
        if ino == MASTER_OBJECT || ino == self.unlinked.0 {
            return Err(FsError::NotFound);
        }
        let b = match self.os.bonus(ObjectId(ino)) {
            Ok(b) => b,
            Err(ObjError::NotFound(_)) => return Err(FsError::NotFound),
            Err(e) => return Err(e.into()),
        };
        InodePhys::decode(ino, &b)
    }

    fn put_inode(&self, tx: &Tx, ino: u64, p: &InodePhys) -> Result<()> {
        self.os.set_bonus(tx, ObjectId(ino), &p.encode())?;
        Ok(())
    }

    fn dir(&self, ino: u64) -> Result<InodePhys> {
        let p = self.inode(ino)?;
        if !is_dir(&p) {
            return Err(FsError::NotDir);
        }
        Ok(p)
    }

    fn dir_lookup(&self, dir: u64, name: &[u8]) -> Result<Option<(u64, FileKind)>> {
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

    fn attr_of(&self, ino: u64, p: &InodePhys) -> Result<Attr> {
        let info = self.os.info(ObjectId(ino))?;
        Ok(self.attr_from(ino, p, &info))
    }

    /// `attr_of` when the object's info is at hand already.
    fn attr_from(&self, ino: u64, p: &InodePhys, info: &tarn_obj::ObjInfo) -> Attr {
        Attr {
            ino,
            kind: kind_of(p),
            perm: p.mode & 0o7777,
            nlink: p.nlink,
            uid: p.uid,
            gid: p.gid,
            size: p.size,
            blocks: info.used_bytes.div_ceil(512),
            atime_ns: p.atime_ns,
            mtime_ns: p.mtime_ns,
            ctime_ns: p.ctime_ns,
            crtime_ns: p.crtime_ns,
            rdev: p.rdev,
            blksize: if is_reg(p) {
                self.opts.read().recordsize.max(info.block_size)
            } else {
                4096
            },
            generation: p.generation,
        }
    }

    fn add_ref(&self, ino: u64) {
        *self.refs[(ino % REF_SHARDS as u64) as usize]
            .lock()
            .entry(ino)
            .or_insert(0) += 1;
    }
    fn refs_of(&self, ino: u64) -> u64 {
        self.refs[(ino % REF_SHARDS as u64) as usize]
            .lock()
            .get(&ino)
            .copied()
            .unwrap_or(0)
    }

    /// Drop one link of `ino` (already locked, `p` its current attrs).
    /// Frees it or parks it in the unlinked set when the count reaches 0.
    fn drop_link(&self, tx: &Tx, ino: u64, p: &mut InodePhys, now: i64) -> Result<()> {
        p.nlink = if is_dir(p) {
            0
        } else {
            p.nlink.saturating_sub(1)
        };
        p.ctime_ns = now;
        if p.nlink > 0 {
            return self.put_inode(tx, ino, p);
        }
        if self.refs_of(ino) > 0 {
            p.flags |= FLAG_UNLINKED;
            self.put_inode(tx, ino, p)?;
            Zap::update(&self.os, tx, self.unlinked, &ino.to_le_bytes(), b"")?;
            Ok(())
        } else {
            self.free_inode(tx, ino)
        }
    }

    /// Free an inode, its xattrs and its unlinked-set entry. Caller holds its lock.
    fn free_inode(&self, tx: &Tx, ino: u64) -> Result<()> {
        if let Ok(p) = self.inode(ino) {
            if p.xattr_obj != 0 {
                let xo = ObjectId(p.xattr_obj);
                let mut big = Vec::new();
                Zap::iterate(&self.os, xo, 0, &mut |_, _, v| {
                    if v.first() == Some(&1) && v.len() >= 9 {
                        big.push(u64::from_le_bytes(v[1..9].try_into().unwrap_or([0; 8])));
                    }
                    true
                })?;
                for b in big {
                    let _ = self.os.free(tx, ObjectId(b));
                }
                self.os.free(tx, xo)?;
            }
            self.os.free(tx, ObjectId(ino))?;
        }
        Zap::remove(&self.os, tx, self.unlinked, &ino.to_le_bytes())?;
        Ok(())
    }

    // ------------------------------------------------------------ lookups

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

    /// Give back `n` references taken by entry-returning operations. The
    /// inode is freed if this was the last reference of an unlinked inode.
    pub fn forget(&self, ino: u64, n: u64) {
        let last = {
            let mut m = self.refs[(ino % REF_SHARDS as u64) as usize].lock();
            match m.get_mut(&ino) {
                Some(c) if *c > n => {
                    *c -= n;
                    false
                }
                Some(_) => {
                    m.remove(&ino);
                    true
                }
                None => false,
            }
        };
        if !last || self.opts.read().readonly {
            return;
        }
        {
            // Under the inode lock: an unlink deciding to park this inode
            // holds it while it reads the references and writes nlink 0.
            let _r = self.read_lock(ino);
            if !matches!(self.inode(ino), Ok(p) if p.nlink == 0) {
                return;
            }
        }
        let tx = self.pool.begin();
        let _g = self.lock_set(&[ino]);
        if self.refs_of(ino) == 0 && matches!(self.inode(ino), Ok(p) if p.nlink == 0) {
            // Errors here leave the inode in the unlinked set; the next mount frees it.
            let _ = self.free_inode(&tx, ino);
        }
    }

    /// Current reference count (for tests and the front ends).
    pub fn references(&self, ino: u64) -> u64 {
        self.refs_of(ino)
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        let _g = self.read_lock(ino);
        let p = self.inode(ino)?;
        self.attr_of(ino, &p)
    }

    pub fn setattr(&self, ino: u64, sa: &SetAttr) -> Result<Attr> {
        self.writable()?;
        let tx = self.pool.begin();
        let _g = self.lock_set(&[ino]);
        let mut p = self.inode(ino)?;
        let now = now_ns();
        if let Some(size) = sa.size {
            if is_dir(&p) {
                return Err(FsError::IsDir);
            }
            if !is_reg(&p) {
                return Err(FsError::Invalid("truncate of a non-regular file"));
            }
            if size > MAX_FILE_SIZE {
                return Err(FsError::FileTooBig);
            }
            if size < p.size {
                self.os.free_range(&tx, ObjectId(ino), size, None)?;
            }
            if size != p.size {
                p.size = size;
                p.mtime_ns = now;
            }
            // POSIX: truncate updates mtime/ctime even if the size is unchanged
            // when called through ftruncate/truncate; FUSE sends the times it wants.
            p.mtime_ns = now;
        }
        if let Some(mode) = sa.mode {
            p.mode = (p.mode & libc::S_IFMT) | (mode & 0o7777);
        }
        let chown = sa.uid.is_some_and(|u| u != p.uid) || sa.gid.is_some_and(|g| g != p.gid);
        if let Some(u) = sa.uid {
            p.uid = u;
        }
        if let Some(g) = sa.gid {
            p.gid = g;
        }
        if chown && !is_dir(&p) && sa.mode.is_none() {
            // Like Linux: a change of owner clears set-user-ID, and set-group-ID
            // when group execute is set.
            p.mode &= !libc::S_ISUID;
            if p.mode & libc::S_IXGRP != 0 {
                p.mode &= !libc::S_ISGID;
            }
        }
        match sa.atime {
            Some(TimeSet::Now) => p.atime_ns = now,
            Some(TimeSet::Ns(t)) => p.atime_ns = t,
            None => {}
        }
        match sa.mtime {
            Some(TimeSet::Now) => p.mtime_ns = now,
            Some(TimeSet::Ns(t)) => p.mtime_ns = t,
            None => {}
        }
        p.ctime_ns = now;
        self.put_inode(&tx, ino, &p)?;
        self.attr_of(ino, &p)
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        let _g = self.read_lock(ino);
        let p = self.inode(ino)?;
        if p.mode & libc::S_IFMT != libc::S_IFLNK {
            return Err(FsError::Invalid("not a symlink"));
        }
        let mut buf = vec![0u8; p.size.min(64 * 1024) as usize];
        self.os.read(ObjectId(ino), 0, &mut buf)?;
        Ok(buf)
    }

    // ------------------------------------------------------------ creation

    /// Common path for every operation that adds a new inode under `dir`.
    #[expect(
        clippy::too_many_arguments,
        reason = "one private constructor shared by five public operations"
    )]
    fn make_node(
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

    // ------------------------------------------------------------ removal

    /// Lock `dir` and the inode currently named `name` in it (retrying if
    /// the name moves between the unlocked look-up and the lock).
    fn lock_child(&self, dir: u64, name: &[u8]) -> Result<(LockSet<'_>, u64, FileKind)> {
        loop {
            let found = {
                let _r = self.read_lock(dir);
                self.dir(dir)?;
                self.dir_lookup(dir, name)?
            };
            let Some((ino, _)) = found else {
                return Err(FsError::NotFound);
            };
            let g = self.lock_set(&[dir, ino]);
            match self.dir_lookup(dir, name)? {
                Some((i2, k)) if i2 == ino => return Ok((g, ino, k)),
                _ => continue,
            }
        }
    }

    fn remove_entry(&self, dir: u64, name: &[u8], want_dir: bool) -> Result<()> {
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

    // ------------------------------------------------------------ rename

    /// Is `anc` an ancestor of (or equal to) `ino`? Walks parent pointers;
    /// stable because renames are serialised by `rename_lock`.
    fn is_ancestor(&self, anc: u64, mut ino: u64) -> Result<bool> {
        for _ in 0..100_000 {
            if ino == anc {
                return Ok(true);
            }
            if ino == self.root {
                return Ok(false);
            }
            let p = self.inode(ino)?;
            if p.parent == ino {
                return Ok(false);
            }
            ino = p.parent;
        }
        Err(FsError::Corrupt("directory parent chain loops".into()))
    }

    pub fn rename(
        &self,
        src_dir: u64,
        src_name: &[u8],
        dst_dir: u64,
        dst_name: &[u8],
        flags: u32,
    ) -> Result<()> {
        self.writable()?;
        check_name(src_name)?;
        check_name(dst_name)?;
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags & (RENAME_NOREPLACE | RENAME_EXCHANGE) == (RENAME_NOREPLACE | RENAME_EXCHANGE)
        {
            return Err(FsError::Invalid("rename flags"));
        }
        let tx = self.pool.begin();
        let _rl = self.rename_lock.lock();
        // Names cannot change under us except through unlink/create, which
        // take the directory locks: look up, lock all, verify, else retry.
        let (_g, src, dst) = loop {
            let src = self
                .dir_lookup_checked(src_dir, src_name)?
                .ok_or(FsError::NotFound)?;
            self.dir(dst_dir)?;
            let dst = self.dir_lookup(dst_dir, dst_name)?;
            let mut set = vec![src_dir, dst_dir, src.0];
            if let Some(d) = dst {
                set.push(d.0);
            }
            let g = self.lock_set(&set);
            if self.dir_lookup(src_dir, src_name)? == Some(src)
                && self.dir_lookup(dst_dir, dst_name)? == dst
            {
                break (g, src, dst);
            }
        };
        let exchange = flags & RENAME_EXCHANGE != 0;
        if exchange && dst.is_none() {
            return Err(FsError::NotFound);
        }
        if flags & RENAME_NOREPLACE != 0 && dst.is_some() {
            return Err(FsError::Exists);
        }
        if dst.is_some_and(|d| d.0 == src.0) {
            return Ok(()); // same inode: POSIX says do nothing
        }
        let mut sdp = self.dir(src_dir)?;
        if self.dir(dst_dir)?.nlink == 0 {
            return Err(FsError::NotFound);
        }
        let src_is_dir = src.1 == FileKind::Dir;
        let dst_is_dir = dst.is_some_and(|d| d.1 == FileKind::Dir);
        if src.0 == self.root || dst.is_some_and(|d| d.0 == self.root) {
            return Err(FsError::Invalid("rename of the root"));
        }
        if src_dir != dst_dir {
            if src_is_dir && self.is_ancestor(src.0, dst_dir)? {
                return Err(FsError::Invalid("directory into its own subtree"));
            }
            if exchange && dst_is_dir && self.is_ancestor(dst.map(|d| d.0).unwrap_or(0), src_dir)? {
                return Err(FsError::Invalid("directory into its own subtree"));
            }
        }
        let now = now_ns();
        let mut sp = self.inode(src.0)?;
        if exchange {
            let d = dst.ok_or(FsError::NotFound)?;
            let mut dp_ino = self.inode(d.0)?;
            Zap::update(
                &self.os,
                &tx,
                ObjectId(src_dir),
                src_name,
                &encode_dirent(d.0, d.1.dtype()),
            )?;
            Zap::update(
                &self.os,
                &tx,
                ObjectId(dst_dir),
                dst_name,
                &encode_dirent(src.0, src.1.dtype()),
            )?;
            if src_dir != dst_dir {
                let mut ddp = self.dir(dst_dir)?;
                if src_is_dir && !dst_is_dir {
                    sdp.nlink = sdp.nlink.saturating_sub(1);
                    ddp.nlink += 1;
                } else if dst_is_dir && !src_is_dir {
                    sdp.nlink += 1;
                    ddp.nlink = ddp.nlink.saturating_sub(1);
                }
                sp.parent = dst_dir;
                dp_ino.parent = src_dir;
                ddp.mtime_ns = now;
                ddp.ctime_ns = now;
                self.put_inode(&tx, dst_dir, &ddp)?;
            }
            sp.ctime_ns = now;
            dp_ino.ctime_ns = now;
            self.put_inode(&tx, src.0, &sp)?;
            self.put_inode(&tx, d.0, &dp_ino)?;
            sdp.mtime_ns = now;
            sdp.ctime_ns = now;
            self.put_inode(&tx, src_dir, &sdp)?;
            return Ok(());
        }
        // Replace an existing target per POSIX rules.
        if let Some(d) = dst {
            if src_is_dir && !dst_is_dir {
                return Err(FsError::NotDir);
            }
            if !src_is_dir && dst_is_dir {
                return Err(FsError::IsDir);
            }
            if dst_is_dir && Zap::count(&self.os, ObjectId(d.0))? != 0 {
                return Err(FsError::NotEmpty);
            }
        }
        // Remove the source entry, then write the target entry.
        Zap::remove(&self.os, &tx, ObjectId(src_dir), src_name)?;
        Zap::update(
            &self.os,
            &tx,
            ObjectId(dst_dir),
            dst_name,
            &encode_dirent(src.0, src.1.dtype()),
        )?;
        sdp.size = sdp.size.saturating_sub(1);
        sdp.mtime_ns = now;
        sdp.ctime_ns = now;
        if src_is_dir && src_dir != dst_dir {
            sdp.nlink = sdp.nlink.saturating_sub(1);
        }
        // Same dir: sdp is the destination too.
        let mut ddp = if src_dir == dst_dir {
            sdp
        } else {
            self.dir(dst_dir)?
        };
        if dst.is_none() {
            ddp.size += 1;
        }
        if src_is_dir && src_dir != dst_dir {
            ddp.nlink += 1;
        }
        if let Some(d) = dst {
            let mut victim = self.inode(d.0)?;
            if dst_is_dir {
                ddp.nlink = ddp.nlink.saturating_sub(1);
            }
            self.drop_link(&tx, d.0, &mut victim, now)?;
        }
        ddp.mtime_ns = now;
        ddp.ctime_ns = now;
        if src_dir != dst_dir {
            self.put_inode(&tx, src_dir, &sdp)?;
        }
        self.put_inode(&tx, dst_dir, &ddp)?;
        sp.parent = dst_dir;
        sp.ctime_ns = now;
        self.put_inode(&tx, src.0, &sp)?;
        Ok(())
    }

    fn dir_lookup_checked(&self, dir: u64, name: &[u8]) -> Result<Option<(u64, FileKind)>> {
        self.dir(dir)?;
        self.dir_lookup(dir, name)
    }

    // ------------------------------------------------------------ data

    /// Read up to `size` bytes at `offset` (short at end of file).
    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let (buf, p) = {
            let _g = self.read_lock(ino);
            let p = self.inode(ino)?;
            if is_dir(&p) {
                return Err(FsError::IsDir);
            }
            if !is_reg(&p) {
                return Err(FsError::Invalid("read of a non-regular file"));
            }
            let end = offset.saturating_add(size as u64).min(p.size);
            let mut buf = vec![0u8; end.saturating_sub(offset) as usize];
            if !buf.is_empty() {
                self.os.read(ObjectId(ino), offset, &mut buf)?;
            }
            (buf, p)
        };
        let opts = *self.opts.read();
        if opts.atime && !opts.readonly {
            // relatime: update when atime is not newer than mtime/ctime, or older than a day.
            let now = now_ns();
            if p.atime_ns <= p.mtime_ns
                || p.atime_ns <= p.ctime_ns
                || now.saturating_sub(p.atime_ns) > 86_400_000_000_000
            {
                let tx = self.pool.begin();
                let _g = self.lock_set(&[ino]);
                if let Ok(mut p) = self.inode(ino) {
                    p.atime_ns = now;
                    let _ = self.put_inode(&tx, ino, &p);
                }
            }
        }
        Ok(buf)
    }

    /// Write `data` at `offset`; returns bytes written (all of it).
    pub fn write(&self, ino: u64, offset: u64, data: &[u8]) -> Result<u32> {
        self.writable()?;
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or(FsError::FileTooBig)?;
        if end > MAX_FILE_SIZE {
            return Err(FsError::FileTooBig);
        }
        self.make_room(data.len() as u64)?;
        let recordsize = self
            .opts
            .read()
            .recordsize
            .clamp(MIN_BLOCK, tarn_obj::MAX_BLOCK_SIZE);
        let tx = self.pool.begin();
        let _g = self.lock_set(&[ino]);
        let mut p = self.inode(ino)?;
        if is_dir(&p) {
            return Err(FsError::IsDir);
        }
        if !is_reg(&p) {
            return Err(FsError::Invalid("write to a non-regular file"));
        }
        if data.is_empty() {
            return Ok(0);
        }
        let o = ObjectId(ino);
        let info = self.os.info(o)?;
        if info.block_size < recordsize
            && end > info.block_size as u64
            && info.length <= info.block_size as u64
        {
            // Still at most one block: grow it (ZFS-style single-block files).
            let bs = if end <= recordsize as u64 {
                (end as u32).div_ceil(MIN_BLOCK) * MIN_BLOCK
            } else {
                recordsize
            };
            self.os.set_block_size(&tx, o, bs)?;
        }
        self.os.write_data(&tx, o, offset, data)?;
        let now = now_ns();
        p.size = p.size.max(end);
        p.mtime_ns = now;
        p.ctime_ns = now;
        self.put_inode(&tx, ino, &p)?;
        Ok(data.len() as u32)
    }

    /// Make everything written so far durable (returns after a txg sync).
    pub fn fsync(&self, _ino: u64) -> Result<()> {
        // Always: data written before `readonly=on` was set must still be
        // durable when its fsync returns (a no-op on a read-only pool).
        self.pool.sync()?;
        Ok(())
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
                let parts: Vec<String> = names.iter().map(|n| String::from_utf8_lossy(n).into_owned()).collect();
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

    // ------------------------------------------------------------ statfs

    pub fn statfs(&self) -> Result<StatFs> {
        let bs = 4096u64;
        // Deflated like `tarn list`: raidz parity is not space users can fill.
        let space = self.pool.space();
        let used = self.pool.deflate(self.os.used_bytes());
        let mut avail = self.pool.deflate(space.available);
        let limit = self.limit.read().clone();
        if let Some((remaining, _)) = limit.and_then(|l| l.remaining()) {
            avail = avail.min(remaining);
        }
        let total = used.saturating_add(avail);
        let files_free = avail / 512;
        Ok(StatFs {
            block_size: bs as u32,
            blocks: total / bs,
            blocks_free: avail / bs,
            blocks_avail: avail / bs,
            files: self.os.object_count().saturating_add(files_free),
            files_free,
            name_max: NAME_MAX as u32,
        })
    }

    // ------------------------------------------------------------ xattrs

    fn check_xattr_name(name: &[u8]) -> Result<()> {
        if name.is_empty() || name.contains(&0) {
            return Err(FsError::Invalid("xattr name"));
        }
        if name.len() > XATTR_NAME_MAX {
            return Err(FsError::NameTooLong);
        }
        Ok(())
    }

    fn xattr_value(&self, v: &[u8]) -> Result<Vec<u8>> {
        match v.first() {
            Some(0) => Ok(v[1..].to_vec()),
            Some(1) if v.len() == 13 => {
                let obj = u64::from_le_bytes(v[1..9].try_into().unwrap_or([0; 8]));
                let len = u32::from_le_bytes(v[9..13].try_into().unwrap_or([0; 4])) as usize;
                if len > XATTR_SIZE_MAX {
                    return Err(FsError::Corrupt("xattr length".into()));
                }
                let mut buf = vec![0u8; len];
                self.os.read(ObjectId(obj), 0, &mut buf)?;
                Ok(buf)
            }
            _ => Err(FsError::Corrupt("xattr value tag".into())),
        }
    }

    fn free_xattr_value(&self, tx: &Tx, v: &[u8]) -> Result<()> {
        if v.first() == Some(&1) && v.len() == 13 {
            let obj = u64::from_le_bytes(v[1..9].try_into().unwrap_or([0; 8]));
            self.os.free(tx, ObjectId(obj))?;
        }
        Ok(())
    }

    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: u32) -> Result<()> {
        self.writable()?;
        Self::check_xattr_name(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(FsError::TooBig);
        }
        self.make_room(value.len() as u64)?;
        let tx = self.pool.begin();
        let _g = self.lock_set(&[ino]);
        let mut p = self.inode(ino)?;
        let old = if p.xattr_obj != 0 {
            Zap::lookup(&self.os, ObjectId(p.xattr_obj), name)?
        } else {
            None
        };
        if flags & XATTR_CREATE != 0 && old.is_some() {
            return Err(FsError::Exists);
        }
        if flags & XATTR_REPLACE != 0 && old.is_none() {
            return Err(FsError::NoData);
        }
        if p.xattr_obj == 0 {
            p.xattr_obj = Zap::create(&self.os, &tx, otype::XATTR_DIR)?.0;
        }
        if let Some(o) = &old {
            self.free_xattr_value(&tx, o)?;
        }
        let enc = if value.len() <= XATTR_INLINE_MAX {
            let mut e = Vec::with_capacity(value.len() + 1);
            e.push(0);
            e.extend_from_slice(value);
            e
        } else {
            let bs = (value.len() as u32).div_ceil(MIN_BLOCK) * MIN_BLOCK;
            let o = self
                .os
                .create(&tx, otype::XATTR_VALUE, bs, &[0u8; tarn_obj::BONUS_LEN])?;
            self.os.write_data(&tx, o, 0, value)?;
            let mut e = vec![1u8];
            e.extend_from_slice(&o.0.to_le_bytes());
            e.extend_from_slice(&(value.len() as u32).to_le_bytes());
            e
        };
        Zap::update(&self.os, &tx, ObjectId(p.xattr_obj), name, &enc)?;
        p.ctime_ns = now_ns();
        self.put_inode(&tx, ino, &p)
    }

    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        Self::check_xattr_name(name)?;
        let _g = self.read_lock(ino);
        let p = self.inode(ino)?;
        if p.xattr_obj == 0 {
            return Err(FsError::NoData);
        }
        match Zap::lookup(&self.os, ObjectId(p.xattr_obj), name)? {
            Some(v) => self.xattr_value(&v),
            None => Err(FsError::NoData),
        }
    }

    /// Attribute names (without NUL terminators).
    pub fn listxattr(&self, ino: u64) -> Result<Vec<Vec<u8>>> {
        let _g = self.read_lock(ino);
        let p = self.inode(ino)?;
        let mut names = Vec::new();
        if p.xattr_obj != 0 {
            Zap::iterate(&self.os, ObjectId(p.xattr_obj), 0, &mut |_, k, _| {
                names.push(k.to_vec());
                true
            })?;
        }
        Ok(names)
    }

    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        self.writable()?;
        Self::check_xattr_name(name)?;
        let tx = self.pool.begin();
        let _g = self.lock_set(&[ino]);
        let mut p = self.inode(ino)?;
        if p.xattr_obj == 0 {
            return Err(FsError::NoData);
        }
        let xo = ObjectId(p.xattr_obj);
        let old = Zap::lookup(&self.os, xo, name)?.ok_or(FsError::NoData)?;
        self.free_xattr_value(&tx, &old)?;
        Zap::remove(&self.os, &tx, xo, name)?;
        p.ctime_ns = now_ns();
        self.put_inode(&tx, ino, &p)
    }
}
