//! tarn-fs: the POSIX layer (the ZPL of tarn) over objects and ZAPs.
//!
//! An inode is an object; its number (`ino`) is the object id. Attributes
//! live in the object's 96-byte bonus (`format::InodePhys`), directories are
//! ZAPs (name → object id + type), symlink targets and file data are object
//! data. Object 1 is the master node (a ZAP naming the root directory and
//! the unlinked set). Byte layouts: `format.rs`.
//!
//! # Modules
//!
//! `inode.rs` attributes, space checks, freeing and the unlinked set;
//! `dir.rs` lookups, creation of every kind of inode, links, unlink and
//! rmdir; `rename.rs`; `data.rs` read/write/fsync/statfs; `xattr.rs`;
//! `locks.rs` shard locks and FUSE references; `readdir.rs`, `falloc.rs`,
//! `tmpfile.rs`, `privileges.rs`; `error.rs` and `types.rs` the API's
//! values.
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
//! Front ends without `forget` (NFS) use the `*_noref` operations and
//! `Fs::checked` (`access.rs`), which take no reference: for them an
//! inode lives as long as its links, and a handle to it (`handle.rs`)
//! turns stale when the last goes.
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

use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tarn_obj::zap::Zap;
use tarn_obj::{ObjPool, ObjectId, ObjectSet, Tx};

pub mod access;
mod data;
mod dir;
mod error;
pub mod falloc;
pub mod format;
mod handle;
mod inode;
mod locks;
pub mod snapshots;
pub use snapshots::SnapshotSource;
mod privileges;
mod readdir;
mod rename;
mod tmpfile;
mod types;
mod xattr;
pub use access::{Caller, Checked, MAY_EXEC, MAY_READ, MAY_WRITE};
pub use error::FsError;
pub use tarn_obj::Segment;
use format::{u64_value, InodePhys};
pub use privileges::XATTR_SECURITY_CAPABILITY;
pub use readdir::READDIR_PLUS_BATCH;
pub use types::{Attr, Cred, DirEntry, FileKind, FsOptions, SetAttr, SpaceLimit, StatFs, SyncMode, TimeSet};

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

fn now_ns() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos().min(i64::MAX as u128) as i64,
        Err(e) => -(e.duration().as_nanos().min(i64::MAX as u128) as i64),
    }
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
    /// This session's generation epoch (see `new_generation`), taken by
    /// the first creation (`ensure_epoch`); `epoch_begun` says it was.
    epoch: std::sync::atomic::AtomicU64,
    epoch_begun: Mutex<bool>,
}

/// Bits of a generation that hold the creating txg; the epoch sits above.
const GENERATION_TXG_BITS: u32 = 40;

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

    /// Open a formatted object set: replays its intent log if the import
    /// found one (the changes acknowledged before a crash), then frees
    /// inodes left in the unlinked set.
    pub fn open(pool: Arc<ObjPool>, os: ObjectSet, opts: FsOptions) -> Result<Arc<Fs>> {
        if !opts.readonly && !os.is_readonly() {
            os.replay_redo()?;
        }
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
            epoch: std::sync::atomic::AtomicU64::new(0),
            epoch_begun: Mutex::new(false),
        });
        if !opts.readonly {
            fs.clean_unlinked()?;
        }
        Ok(fs)
    }

    /// Before the first inode this session creates: a new generation
    /// epoch, `EPOCH` in the master node up by one and synced. A txg lost
    /// in a crash is written again with the same number and the same new
    /// object ids (and with txgs in flight, more than one can be lost);
    /// without the epoch an inode created then would carry the (inode
    /// number, generation) of one the crash lost, and a file handle a
    /// client kept would name it. With it, the session after the crash has
    /// a higher epoch, so its generations are new. Taken at the first
    /// creation, not at open, so a mount that creates nothing leaves the
    /// dataset unmodified (an incremental receive into it still applies).
    /// Called before the creation takes its locks and transaction.
    pub(crate) fn ensure_epoch(&self) -> Result<()> {
        let mut begun = self.epoch_begun.lock();
        if *begun {
            return Ok(());
        }
        let m = ObjectId(MASTER_OBJECT);
        let old = match Zap::lookup(&self.os, m, b"EPOCH")? {
            Some(v) => u64_value(&v)?,
            None => 0,
        };
        let next = old + 1;
        {
            let tx = self.begin();
            Zap::update(&self.os, &tx, m, b"EPOCH", &next.to_le_bytes())?;
        }
        self.pool.sync()?;
        self.epoch.store(next, std::sync::atomic::Ordering::Release);
        *begun = true;
        Ok(())
    }

    /// A transaction whose changes become records of the dataset's intent
    /// log (appended when the inode locks it changed under are released:
    /// `LockSet`). Also under `sync=disabled`: an fsync after the property
    /// changes back must find every change before it in the log.
    pub(crate) fn begin(&self) -> Tx {
        self.pool.begin().logged(&self.os)
    }

    /// The generation of an inode created in `tx`: this session's epoch
    /// above the txg (docs/on-disk-format.md).
    pub(crate) fn new_generation(&self, tx: &Tx) -> u64 {
        let epoch = self.epoch.load(std::sync::atomic::Ordering::Acquire);
        (epoch << GENERATION_TXG_BITS) | (tx.txg() & ((1 << GENERATION_TXG_BITS) - 1))
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
            let tx = self.begin();
            let _g = self.lock_set(&tx, &[ino]);
            // One inode that cannot be freed must not make the dataset
            // unmountable: it stays in the set and is retried next mount.
            if let Err(e) = self.free_inode(&tx, ino) {
                eprintln!("tarn: cannot free unlinked inode {ino}: {e}");
            }
        }
        Ok(())
    }

    /// New options for a mounted file system. Turning `readonly` off
    /// replays the intent log first if the import found one (opened read
    /// only, the file system did not): a change made before the replay
    /// would be overwritten by records older than it.
    /// (The replay runs without the options' lock: operations holding a
    /// transaction read the options, and the replay waits for a txg.)
    pub fn set_options(&self, opts: FsOptions) {
        let was_readonly = self.opts.read().readonly;
        if was_readonly && !opts.readonly && !self.os.is_readonly() {
            if let Err(e) = self.os.replay_redo() {
                eprintln!("tarn: cannot replay the intent log of object set {}: {e}; staying read-only", self.os.id().0);
                return;
            }
        }
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
    /// Whether this file system's object set still exists in the pool. A
    /// snapshot's file system opened by a front end outlives the snapshot's
    /// destroy and would read the blocks the destroy freed (and the pool
    /// reuses): front ends ask this before serving from one. Object set
    /// ids are never reused, so a snapshot re-created under the same name
    /// is another object set and this stays false.
    pub fn objset_exists(&self) -> bool {
        self.pool.open_objset(self.os.id()).is_ok()
    }
    pub fn pool(&self) -> &Arc<ObjPool> {
        &self.pool
    }
    /// Object id of the root directory.
    pub fn root_ino(&self) -> u64 {
        self.root
    }
}
