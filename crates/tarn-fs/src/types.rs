//! Values passed across the API: options, attributes, kinds, entries.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsOptions {
    pub recordsize: u32,
    pub atime: bool,
    pub readonly: bool,
    /// The dataset's `sync` property.
    pub sync: SyncMode,
}

/// `sync`, as in ZFS: `standard` makes `fsync`, `O_SYNC`/`O_DSYNC` and
/// stable NFS writes durable when they return; `always` makes every
/// change durable before it returns; `disabled` makes `fsync` return at
/// once (changes become durable with the next txg — up to `txg_timeout`
/// seconds of acknowledged writes can be lost in a crash: unsafe, for
/// scratch data only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncMode {
    #[default]
    Standard,
    Always,
    Disabled,
}

impl Default for FsOptions {
    fn default() -> Self {
        FsOptions {
            recordsize: 128 * 1024,
            atime: true,
            readonly: false,
            sync: SyncMode::Standard,
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
    /// Bytes of the pool other datasets' reservations hold back from this
    /// one (`refreservation`): a change must leave them free.
    fn held_elsewhere(&self) -> u64 {
        0
    }
}

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
