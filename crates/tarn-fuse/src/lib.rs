//! tarn-fuse: serves a `tarn_fs::Fs` through the kernel's FUSE driver.
//!
//! Pure-Rust mount (fuser with no libfuse); as root the mount syscall is
//! used directly. Several worker threads each read their own cloned
//! `/dev/fuse` descriptor, so requests for different files run in parallel
//! (tarn-fs has no global lock on the data path).
//!
//! Caching: attributes and entries are cached by the kernel for `TTL`
//! (every change goes through this mount, so the kernel's view stays
//! right), misses too (a negative entry: a name appears only through this
//! mount, which replaces it; not in `.zfs/snapshot`, whose names come and
//! go with `tarn snapshot`/`destroy`); listings are READDIRPLUS, which
//! fill the same caches for every entry listed (`readdir.rs`); symlink
//! targets are cached (`FUSE_CACHE_SYMLINKS`: they never change);
//! `keep_cache` is set on open when the file's mtime and size did
//! not change since its previous open.
//!
//! Writes: write-through by default — every `write(2)` reaches tarn-fs
//! before it returns, so a full pool or a quota refuses it there and then
//! (`ENOSPC`/`EDQUOT`, as ZFS does). With `MountOptions::writeback_cache`
//! the kernel's writeback cache is on (`FUSE_WRITEBACK_CACHE`): small
//! writes land in the page cache and reach us batched, up to `MAX_IO` per
//! request, when the kernel writes back, on `fsync` and on close. The kernel
//! then owns the file's size, mtime and ctime while it has dirty pages (it
//! sends them back with SETATTR when it flushes), handles `O_APPEND`
//! itself, and may READ through a write-only handle to fill a partial
//! page; none of our handlers depends on the open mode, so all of that
//! holds as is. The price: a write the pool cannot hold fails when the
//! kernel writes it back, and the error is reported by `fsync` and
//! `close`, not by `write` (as on an NFS client). `fsync` always flushes
//! the kernel's dirty pages first, then asks us: durability is the same
//! either way. Whoever needs the kernel's dirty pages in the pool at a
//! point in time (a snapshot) calls [`flush`] first.
//!
//! Privileges (`FUSE_HANDLE_KILLPRIV_V2`): the file system, not the kernel,
//! drops set-ID bits and `security.capability` on write, truncate and
//! chown (`Fs::drop_privileges`), so the kernel can mark inodes as having
//! no security attributes instead of asking for `security.capability`
//! before every write. Every handler that changes a file's contents or
//! owner calls it (a new one, e.g. fallocate, must too).
//!
//! POSIX ACLs: none (ZFS's `acltype=off`); `system.posix_acl_access` and
//! `_default` are refused with `EOPNOTSUPP` (`is_posix_acl`).
//!
//! Inode numbers: FUSE's root (1) is the root directory object; every
//! other inode number is the object id (object 1 is the master node and
//! never appears as a file). Snapshots (`.zfs/snapshot/<name>`, as in ZFS:
//! reachable by path always, listed in the root directory when `snapdir`
//! is visible) are served by read-only file systems of their own: the k-th
//! snapshot opened in this mount has inode numbers `k << 48 | object id`,
//! and `.zfs` and `.zfs/snapshot` are two fixed virtual directories.
//!
//! No request ever panics the daemon: every handler runs under
//! `catch_unwind` and a panic becomes `EIO`.

use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, KernelConfig,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, SessionACL, TimeOrNow,
    WriteFlags,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tarn_fs::{Attr, Cred, FileKind, Fs, FsError, SetAttr, TimeSet};

mod falloc;
mod tmpfile;
mod readdir;

/// How long the kernel may cache attributes and directory entries. Every
/// change reaches the file system through this mount, so the kernel's copy
/// only goes stale for what the daemon changes on its own (atime).
pub const TTL: Duration = Duration::from_secs(10);
/// Largest write and readahead the kernel is asked to use.
pub const MAX_IO: u32 = 1 << 20;
/// The file system type of every tarn mount in /proc/self/mountinfo (how
/// the daemon knows its own mounts, e.g. the dead ones a killed daemon left).
pub const FSTYPE: &str = "fuse.tarn";
/// Worker threads serving requests.
pub const WORKER_THREADS: usize = 4;

#[derive(Clone, Debug)]
pub struct MountOptions {
    pub fsname: String,
    pub readonly: bool,
    pub allow_other: bool,
    /// The kernel's writeback cache (see the module's notes on writes).
    pub writeback_cache: bool,
}

pub struct MountHandle {
    session: Option<fuser::BackgroundSession>,
    mountpoint: PathBuf,
}

/// Write the kernel's dirty pages and times of the mount at `path` back
/// to the file system (`syncfs(2)` on its root), so that what `write(2)`
/// and shared `mmap` stores have put in the page cache is in the pool.
/// Call it from a thread that serves no FUSE request, before taking a
/// snapshot or unmounting; the mount's workers carry the writes.
pub fn flush(path: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let root = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)?;
    // SAFETY: `root` is an open descriptor for the duration of the call.
    if unsafe { libc::syncfs(root.as_raw_fd()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Detach the mount at `path` lazily (`umount2(MNT_DETACH)`): gone from
/// the namespace at once, released when nothing uses it any more.
pub fn detach(path: &Path) -> std::io::Result<()> {
    umount2(path, libc::MNT_DETACH)
}

/// How often an unmount that found the mount busy tries again (50 ms apart).
const UNMOUNT_BUSY_RETRIES: u32 = 20;

fn umount2(path: &Path, flags: i32) -> std::io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    let r = unsafe { libc::umount2(c.as_ptr(), flags) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl MountHandle {
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmount. If the mount is busy it is detached lazily (`MNT_DETACH`)
    /// and the serving threads finish in the background once the last user
    /// lets go.
    /// Unmount, detaching lazily if the mount is busy (the forced form).
    pub fn unmount(mut self) -> std::io::Result<()> {
        self.do_unmount(true)
    }

    /// Unmount only if nothing uses the mount: a busy mount stays mounted
    /// and served, and the error is EBUSY (after about a second of
    /// retries, so a momentary path walk does not count as a user).
    pub fn try_unmount(&mut self) -> std::io::Result<()> {
        self.do_unmount(false)
    }

    fn do_unmount(&mut self, force: bool) -> std::io::Result<()> {
        if self.session.is_none() {
            return Ok(());
        }
        // A path walk in flight through the mount (a statfs, a lookup by
        // another process) holds it for an instant: EBUSY is retried for a
        // moment before it is taken for a user of the mount.
        let mut result = umount2(&self.mountpoint, 0);
        for _ in 0..if force { 0 } else { UNMOUNT_BUSY_RETRIES } {
            match &result {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    result = umount2(&self.mountpoint, 0);
                }
                _ => break,
            }
        }
        match result {
            Ok(()) => {
                // The connection is gone: the workers see ENODEV (or, racing
                // the teardown, ECONNABORTED) and exit. The mount is gone
                // either way: how a worker ended is not the unmount's error.
                if let Some(session) = self.session.take() {
                    if let Err(e) = session.join() {
                        if !matches!(e.raw_os_error(), Some(libc::ENODEV | libc::ECONNABORTED)) {
                            eprintln!("tarn: FUSE session of {} ended with: {e}", self.mountpoint.display());
                        }
                    }
                }
                Ok(())
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                // Not mounted here any more (detached by someone else, maybe
                // still in use elsewhere): never wait for its last user.
                if let Some(session) = self.session.take() {
                    std::thread::spawn(move || {
                        let _ = session.join();
                    });
                }
                Ok(())
            }
            Err(e) if !force => Err(e),
            Err(_) => {
                umount2(&self.mountpoint, libc::MNT_DETACH)?;
                if let Some(session) = self.session.take() {
                    std::thread::spawn(move || {
                        let _ = session.join();
                    });
                }
                Ok(())
            }
        }
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            // Process is going away or the caller forgot: detach lazily, never block.
            let _ = umount2(&self.mountpoint, libc::MNT_DETACH);
            std::thread::spawn(move || {
                let _ = session.join();
            });
        }
    }
}

/// Mount `fs` on `mountpoint`; returns once the kernel has completed the
/// FUSE handshake. Requests are served by background threads.
///
/// The mount syscall is made here (not by fuser) so the file system type
/// is `fuse.tarn` and the source is `opts.fsname`, as `mount(8)` shows them.
pub fn mount(fs: Arc<Fs>, mountpoint: &Path, opts: MountOptions) -> std::io::Result<MountHandle> {
    mount_with_snapshots(fs, mountpoint, opts, None)
}

/// Like [`mount`], with `.zfs/snapshot/<name>` served from `snapshots`.
pub fn mount_with_snapshots(
    fs: Arc<Fs>,
    mountpoint: &Path,
    opts: MountOptions,
    snapshots: Option<Arc<dyn SnapshotSource>>,
) -> std::io::Result<MountHandle> {
    use std::os::fd::{AsRawFd, OwnedFd};
    let mountpoint = mountpoint.canonicalize()?;
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")?;
    let mut data = format!(
        "fd={},rootmode=40000,user_id={},group_id={},default_permissions",
        dev.as_raw_fd(),
        // SAFETY: getuid/getgid have no preconditions.
        unsafe { libc::getuid() },
        unsafe { libc::getgid() },
    );
    if opts.allow_other {
        data.push_str(",allow_other");
    }
    data.push_str(&format!(",max_read={MAX_IO}"));
    let mut flags = libc::MS_NOSUID | libc::MS_NODEV;
    if opts.readonly {
        flags |= libc::MS_RDONLY;
    }
    let bad = |_| std::io::Error::from_raw_os_error(libc::EINVAL);
    let src = CString::new(opts.fsname.as_bytes()).map_err(bad)?;
    let target = CString::new(mountpoint.as_os_str().as_bytes()).map_err(bad)?;
    let fstype = CString::new(FSTYPE).map_err(bad)?;
    let cdata = CString::new(data).map_err(bad)?;
    // SAFETY: all pointers are valid NUL-terminated strings that outlive the call.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            cdata.as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut config = fuser::Config::default();
    config.acl = if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(WORKER_THREADS);
    config.clone_fd = true;
    let front = TarnFuse {
        fs,
        writeback_cache: opts.writeback_cache,
        write_errors: Mutex::new(HashMap::new()),
        opened: OpenedMap::default(),
        snapshots,
        snap_fs: Mutex::new(Vec::new()),
    };
    let session = fuser::Session::from_fd(front, OwnedFd::from(dev), config.acl, config.clone())
        .and_then(fuser::Session::spawn);
    match session {
        Ok(session) => Ok(MountHandle {
            session: Some(session),
            mountpoint,
        }),
        Err(e) => {
            let _ = umount2(&mountpoint, libc::MNT_DETACH);
            Err(e)
        }
    }
}

/// Where `.zfs/snapshot` gets its contents: defined in tarn-fs (shared with
/// tarn-nfs), re-exported here so callers keep `tarn_fuse::SnapshotSource`.
pub use tarn_fs::SnapshotSource;

const SNAP_SHIFT: u32 = 48;
const CTL_INO: u64 = (0x7fff << SNAP_SHIFT) | 1;
const SNAPDIR_INO: u64 = (0x7fff << SNAP_SHIFT) | 2;
const CTL_NAME: &[u8] = b".zfs";
/// readdir offset of the `.zfs` entry appended to the root directory.
const CTL_OFFSET: u64 = u64::MAX - 1;

struct TarnFuse {
    fs: Arc<Fs>,
    /// Ask the kernel for its writeback cache at INIT.
    writeback_cache: bool,
    /// With the writeback cache: the first error a write-back WRITE got
    /// for each file, kept until an FSYNC or FLUSH (close) of that file
    /// reports it with its errno. The kernel reports write-back errors
    /// too, but only to descriptors open when the error happened (fsync)
    /// and as ENOSPC or EIO at close; this reaches the next fsync of the
    /// file whoever opened it.
    write_errors: Mutex<HashMap<(u64, u64), Errno>>,
    /// (mtime, size) of each file at its last open, for `keep_cache`;
    /// every write updates it, so it is sharded by inode (no lock shared
    /// by all writers of the mount).
    opened: OpenedMap,
    snapshots: Option<Arc<dyn SnapshotSource>>,
    /// Snapshots opened so far: index + 1 is their `k`.
    snap_fs: Mutex<Vec<(String, Arc<Fs>)>>,
}

/// Shards of `TarnFuse::opened`.
const OPENED_SHARDS: usize = 16;

/// (snapshot index, inode) → (mtime, size) at the last open or write, in
/// shards chosen by inode.
#[derive(Default)]
struct OpenedMap {
    shards: [OpenedShard; OPENED_SHARDS],
}

/// One shard: (snapshot index, inode) → (mtime, size).
type OpenedShard = Mutex<HashMap<(u64, u64), (i64, u64)>>;

impl OpenedMap {
    fn shard(&self, ino: u64) -> &OpenedShard {
        &self.shards[(ino % OPENED_SHARDS as u64) as usize]
    }
}

/// What an inode number names.
enum Target {
    /// `.zfs`
    Ctl,
    /// `.zfs/snapshot`
    SnapDir,
    /// Object `ino` of file system `k` (0: the dataset, k ≥ 1: a snapshot).
    Node { fs: Arc<Fs>, ino: u64, k: u64 },
}

fn to_time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn from_time(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos().min(i64::MAX as u128) as i64,
        Err(e) => -(e.duration().as_nanos().min(i64::MAX as u128) as i64),
    }
}

fn ftype(k: FileKind) -> FileType {
    match k {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDev => FileType::CharDevice,
        FileKind::BlockDev => FileType::BlockDevice,
    }
}

/// The POSIX ACL attributes. tarn has no ACLs (ZFS's `acltype=off`, its
/// default on Linux): they are refused with `EOPNOTSUPP` as there, rather
/// than stored as plain attributes the kernel would never enforce. The
/// answer also lets `ls -l` stop asking (GNU ls remembers, per device,
/// that ACLs are not supported): a listing costs no GETXATTR round trip
/// per file for them.
fn is_posix_acl(name: &OsStr) -> bool {
    matches!(name.as_bytes(), b"system.posix_acl_access" | b"system.posix_acl_default")
}

fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
}

/// Run a handler body; a panic becomes EIO instead of killing a worker.
fn guarded<T>(f: impl FnOnce() -> tarn_fs::Result<T>) -> tarn_fs::Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => Err(FsError::Corrupt(
            "internal error while serving a request".into(),
        )),
    }
}

impl TarnFuse {
    fn target(&self, ino: INodeNo) -> tarn_fs::Result<Target> {
        match ino.0 {
            1 => Ok(Target::Node { fs: self.fs.clone(), ino: self.fs.root_ino(), k: 0 }),
            CTL_INO if self.snapshots.is_some() => Ok(Target::Ctl),
            SNAPDIR_INO if self.snapshots.is_some() => Ok(Target::SnapDir),
            n => {
                let k = n >> SNAP_SHIFT;
                let inner = n & ((1 << SNAP_SHIFT) - 1);
                if k == 0 {
                    return Ok(Target::Node { fs: self.fs.clone(), ino: n, k: 0 });
                }
                let fs = self.snap_fs.lock().get(k as usize - 1).map(|(_, f)| f.clone()).ok_or(FsError::NotFound)?;
                if !fs.objset_exists() {
                    return Err(FsError::Stale);
                }
                Ok(Target::Node { fs, ino: inner, k })
            }
        }
    }

    /// The file system and inode an operation acts on; the virtual
    /// directories take no changes.
    fn node(&self, ino: INodeNo) -> tarn_fs::Result<(Arc<Fs>, u64, u64)> {
        match self.target(ino)? {
            Target::Node { fs, ino, k } => Ok((fs, ino, k)),
            Target::Ctl | Target::SnapDir => Err(FsError::ReadOnly),
        }
    }

    fn ino_out(&self, fs: &Fs, k: u64, ino: u64) -> INodeNo {
        if k == 0 && ino == self.fs.root_ino() {
            INodeNo(1)
        } else if k == 0 {
            INodeNo(ino)
        } else {
            let _ = fs;
            INodeNo((k << SNAP_SHIFT) | ino)
        }
    }

    fn attr(&self, fs: &Fs, k: u64, a: &Attr) -> FileAttr {
        FileAttr {
            ino: self.ino_out(fs, k, a.ino),
            size: a.size,
            blocks: a.blocks,
            atime: to_time(a.atime_ns),
            mtime: to_time(a.mtime_ns),
            ctime: to_time(a.ctime_ns),
            crtime: to_time(a.crtime_ns),
            kind: ftype(a.kind),
            perm: (a.perm & 0o7777) as u16,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: a.rdev as u32,
            blksize: a.blksize,
            flags: 0,
        }
    }

    /// Attributes of `.zfs` and `.zfs/snapshot`: read-only directories
    /// with the dataset root's owner and times.
    fn virtual_attr(&self, ino: u64) -> FileAttr {
        let root = self.fs.getattr(self.fs.root_ino()).ok();
        let t = root.as_ref().map_or(UNIX_EPOCH, |a| to_time(a.mtime_ns));
        FileAttr {
            ino: INodeNo(ino),
            size: 0,
            blocks: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind: FileType::Directory,
            perm: 0o555,
            nlink: 2,
            uid: root.as_ref().map_or(0, |a| a.uid),
            gid: root.as_ref().map_or(0, |a| a.gid),
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    /// The k of snapshot `name`, opening it on first use.
    fn snapshot_k(&self, name: &str) -> Option<(u64, Arc<Fs>)> {
        let source = self.snapshots.as_ref()?;
        let mut opened = self.snap_fs.lock();
        if let Some(i) = opened.iter().position(|(n, _)| n == name) {
            if opened[i].1.objset_exists() {
                return opened.get(i).map(|(_, f)| (i as u64 + 1, f.clone()));
            }
            // Destroyed since: its k stays dead (its inodes answer ESTALE),
            // a snapshot now under the name gets a k of its own.
            opened[i].0.clear();
        }
        if !source.names().iter().any(|n| n == name) {
            return None;
        }
        let fs = source.open(name)?;
        if opened.len() + 1 >= 0x7fff {
            return None;
        }
        opened.push((name.to_string(), fs.clone()));
        Some((opened.len() as u64, fs))
    }

    fn entry(&self, fs: &Fs, k: u64, r: tarn_fs::Result<Attr>, reply: ReplyEntry) {
        match r {
            Ok(a) => reply.entry(&TTL, &self.attr(fs, k, &a), Generation(a.generation)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// A write-back error of this file not yet reported, if any (taken).
    fn take_write_error(&self, k: u64, ino: u64) -> Option<Errno> {
        if !self.writeback_cache {
            return None;
        }
        self.write_errors.lock().remove(&(k, ino))
    }

    fn empty(r: tarn_fs::Result<()>, reply: ReplyEmpty) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

fn cred(req: &Request) -> Cred {
    Cred {
        uid: req.uid(),
        gid: req.gid(),
    }
}

fn ts(t: Option<TimeOrNow>) -> Option<TimeSet> {
    t.map(|t| match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(s) => TimeSet::Ns(from_time(s)),
    })
}

macro_rules! node_or_reply {
    ($self:ident, $ino:expr, $reply:ident) => {
        match $self.node($ino) {
            Ok(x) => x,
            Err(e) => return $reply.error(errno(&e)),
        }
    };
}

impl fuser::Filesystem for TarnFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(MAX_IO);
        if config.set_max_readahead(MAX_IO).is_err() {
            // The kernel caps readahead; keep its maximum.
        }
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_PARALLEL_DIROPS);
        // Listings carry attributes (readdir.rs): no LOOKUP per entry.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_DO_READDIRPLUS);
        // A symlink's target never changes: the kernel may keep it.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_CACHE_SYMLINKS);
        // We drop set-ID bits and file capabilities ourselves on write,
        // truncate and chown (`Fs::drop_privileges`), so the kernel marks
        // inodes "no security attributes" instead of asking for
        // security.capability (a GETXATTR round trip) before every write.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        if self.writeback_cache && config.add_capabilities(fuser::InitFlags::FUSE_WRITEBACK_CACHE).is_err() {
            // An old kernel: writes stay write-through, which is correct too.
        }
        let _ = config.set_max_background(64);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let target = match self.target(parent) {
            Ok(t) => t,
            Err(e) => return reply.error(errno(&e)),
        };
        match target {
            Target::Ctl => match name.as_bytes() {
                b"snapshot" => reply.entry(&TTL, &self.virtual_attr(SNAPDIR_INO), Generation(0)),
                _ => reply.error(Errno::ENOENT),
            },
            Target::SnapDir => match self.snapshot_k(&name.to_string_lossy()) {
                Some((k, fs)) => {
                    let r = guarded(|| fs.getattr(fs.root_ino()));
                    self.entry(&fs, k, r, reply)
                }
                None => reply.error(Errno::ENOENT),
            },
            Target::Node { fs, ino, k } => {
                if k == 0 && ino == self.fs.root_ino() && name.as_bytes() == CTL_NAME && self.snapshots.is_some() {
                    return reply.entry(&TTL, &self.virtual_attr(CTL_INO), Generation(0));
                }
                let r = guarded(|| fs.lookup(ino, name.as_bytes()));
                if matches!(r, Err(FsError::NotFound)) {
                    // A negative entry the kernel may cache for TTL: names
                    // appear only through this mount, which replaces it.
                    return reply.entry(&TTL, &self.virtual_attr(0), Generation(0));
                }
                self.entry(&fs, k, r, reply)
            }
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let Ok((fs, inner, k)) = self.node(ino) else { return };
        let _ = guarded(|| {
            fs.forget(inner, nlookup);
            Ok(())
        });
        if fs.references(inner) == 0 {
            self.opened.shard(inner).lock().remove(&(k, inner));
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.target(ino) {
            Ok(Target::Ctl) => reply.attr(&TTL, &self.virtual_attr(CTL_INO)),
            Ok(Target::SnapDir) => reply.attr(&TTL, &self.virtual_attr(SNAPDIR_INO)),
            Ok(Target::Node { fs, ino, k }) => match guarded(|| fs.getattr(ino)) {
                Ok(a) => reply.attr(&TTL, &self.attr(&fs, k, &a)),
                Err(e) => reply.error(errno(&e)),
            },
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let (fs, ino, k) = node_or_reply!(self, ino, reply);
        let sa = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: ts(atime),
            mtime: ts(mtime),
        };
        // HANDLE_KILLPRIV_V2: a truncate by a caller without CAP_FSETID
        // (taken as: not root) and any change of owner drop set-ID bits;
        // both drop file capabilities. An explicit mode wins.
        let chown = uid.is_some() || gid.is_some();
        let kill = (sa.mode.is_none() && (chown || (size.is_some() && req.uid() != 0))).then(|| cred(req));
        let r = guarded(|| {
            let a = fs.setattr(ino, &sa)?;
            if chown || size.is_some() {
                fs.drop_privileges(ino, kill)?;
                return fs.getattr(ino);
            }
            Ok(a)
        });
        match r {
            Ok(a) => reply.attr(&TTL, &self.attr(&fs, k, &a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let (fs, ino, _) = node_or_reply!(self, ino, reply);
        match guarded(|| fs.readlink(ino)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let (fs, parent, k) = node_or_reply!(self, parent, reply);
        let r = guarded(|| fs.mknod(parent, name.as_bytes(), mode, rdev as u64, cred(req)));
        self.entry(&fs, k, r, reply)
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let (fs, parent, k) = node_or_reply!(self, parent, reply);
        let r = guarded(|| fs.mkdir(parent, name.as_bytes(), mode & 0o7777, cred(req)));
        self.entry(&fs, k, r, reply)
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (fs, parent, _) = node_or_reply!(self, parent, reply);
        Self::empty(guarded(|| fs.unlink(parent, name.as_bytes())), reply)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (fs, parent, _) = node_or_reply!(self, parent, reply);
        Self::empty(guarded(|| fs.rmdir(parent, name.as_bytes())), reply)
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let (fs, parent, k) = node_or_reply!(self, parent, reply);
        let r = guarded(|| fs.symlink(parent, link_name.as_bytes(), target.as_os_str().as_bytes(), cred(req)));
        self.entry(&fs, k, r, reply)
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (fs, parent, k) = node_or_reply!(self, parent, reply);
        let (_, newparent, k2) = node_or_reply!(self, newparent, reply);
        if k != k2 {
            return reply.error(Errno::EXDEV);
        }
        let r = guarded(|| fs.rename(parent, name.as_bytes(), newparent, newname.as_bytes(), flags.bits()));
        Self::empty(r, reply)
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let (fs, ino, k) = node_or_reply!(self, ino, reply);
        let (_, newparent, k2) = node_or_reply!(self, newparent, reply);
        if k != k2 {
            return reply.error(Errno::EXDEV);
        }
        let r = guarded(|| fs.link(ino, newparent, newname.as_bytes()));
        self.entry(&fs, k, r, reply)
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let (fs, ino, k) = node_or_reply!(self, ino, reply);
        // Snapshots: nothing opens for writing.
        if k > 0 && (flags.0 & libc::O_ACCMODE != libc::O_RDONLY || flags.0 & libc::O_TRUNC != 0) {
            return reply.error(Errno::EROFS);
        }
        match guarded(|| fs.getattr(ino)) {
            Ok(a) => {
                let mut open_flags = FopenFlags::empty();
                let trunc = flags.0 & libc::O_TRUNC != 0;
                let mut m = self.opened.shard(ino).lock();
                if !trunc && m.get(&(k, ino)) == Some(&(a.mtime_ns, a.size)) {
                    open_flags |= FopenFlags::FOPEN_KEEP_CACHE;
                }
                m.insert((k, ino), (a.mtime_ns, a.size));
                reply.opened(FileHandle(0), open_flags)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let (fs, ino, _) = node_or_reply!(self, ino, reply);
        match guarded(|| fs.read(ino, offset, size)) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        let (fs, ino, k) = node_or_reply!(self, ino, reply);
        let r = guarded(|| {
            // With the writeback cache the kernel owns mtime and ctime and
            // sends them with a SETATTR when it writes the inode back; that
            // SETATTR can overtake the WRITEs it covers, so a WRITE must not
            // stamp its own (later) time over the kernel's.
            let n = fs.write_as(ino, offset, data, !self.writeback_cache)?;
            // HANDLE_KILLPRIV_V2: the kernel flags writers without CAP_FSETID.
            fs.drop_privileges(ino, write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID).then(|| cred(req)))?;
            if flags.0 & (libc::O_SYNC | libc::O_DSYNC) != 0 {
                fs.fsync(ino)?;
            }
            Ok(n)
        });
        match r {
            Ok(n) => {
                if let Ok(a) = fs.getattr(ino) {
                    // Our own write: the kernel's cached pages are current.
                    self.opened.shard(ino).lock().insert((k, ino), (a.mtime_ns, a.size));
                }
                reply.written(n)
            }
            Err(e) => {
                if self.writeback_cache {
                    self.write_errors.lock().entry((k, ino)).or_insert(errno(&e));
                }
                reply.error(errno(&e))
            }
        }
    }


    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.do_fallocate(ino, offset, length, mode, reply)
    }

    fn tmpfile(
        &self,
        req: &Request,
        parent: INodeNo,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        self.do_tmpfile(req, parent, mode, reply)
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: fuser::ReplyLseek,
    ) {
        self.do_lseek(ino, offset, whence, reply)
    }

    /// Close: without the writeback cache there is nothing to report and
    /// ENOSYS makes the kernel stop sending FLUSH; with it, FLUSH comes
    /// after the kernel wrote the file's dirty pages back, and reports a
    /// write-back error those writes got.
    fn flush(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _lock_owner: fuser::LockOwner, reply: ReplyEmpty) {
        if !self.writeback_cache {
            return reply.error(Errno::ENOSYS);
        }
        let (_, ino, k) = node_or_reply!(self, ino, reply);
        match self.take_write_error(k, ino) {
            Some(e) => reply.error(e),
            None => reply.ok(),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let (fs, ino, k) = node_or_reply!(self, ino, reply);
        if let Some(e) = self.take_write_error(k, ino) {
            return reply.error(e);
        }
        Self::empty(guarded(|| fs.fsync(ino)), reply)
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.target(ino) {
            Ok(Target::Ctl | Target::SnapDir) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Ok(Target::Node { fs, ino, .. }) => match guarded(|| fs.getattr(ino)) {
                Ok(a) if a.kind == FileKind::Dir => reply.opened(FileHandle(0), FopenFlags::empty()),
                Ok(_) => reply.error(Errno::ENOTDIR),
                Err(e) => reply.error(errno(&e)),
            },
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.list(ino, offset, reply)
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        self.list_plus(ino, offset, reply)
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.target(ino) {
            Ok(Target::Node { fs, ino, .. }) => Self::empty(guarded(|| fs.fsync(ino)), reply),
            Ok(_) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match guarded(|| self.fs.statfs()) {
            Ok(s) => reply.statfs(
                s.blocks,
                s.blocks_free,
                s.blocks_avail,
                s.files,
                s.files_free,
                s.block_size,
                s.name_max,
                s.block_size,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        if is_posix_acl(name) {
            return reply.error(Errno::EOPNOTSUPP);
        }
        let (fs, ino, _) = node_or_reply!(self, ino, reply);
        let r = guarded(|| fs.setxattr(ino, name.as_bytes(), value, flags as u32));
        Self::empty(r, reply)
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if is_posix_acl(name) {
            return reply.error(Errno::EOPNOTSUPP);
        }
        let (fs, ino, _) = match self.node(ino) {
            Ok(x) => x,
            Err(_) => return reply.error(Errno::ENODATA),
        };
        match guarded(|| fs.getxattr(ino, name.as_bytes())) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let names = match self.node(ino) {
            Ok((fs, ino, _)) => guarded(|| fs.listxattr(ino)),
            Err(_) => Ok(Vec::new()),
        };
        match names {
            Ok(names) => {
                let mut buf = Vec::new();
                for n in names.into_iter().filter(|n| !is_posix_acl(OsStr::from_bytes(n))) {
                    buf.extend_from_slice(&n);
                    buf.push(0);
                }
                if size == 0 {
                    reply.size(buf.len() as u32)
                } else if buf.len() > size as usize {
                    reply.error(Errno::ERANGE)
                } else {
                    reply.data(&buf)
                }
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if is_posix_acl(name) {
            return reply.error(Errno::EOPNOTSUPP);
        }
        let (fs, ino, _) = node_or_reply!(self, ino, reply);
        Self::empty(guarded(|| fs.removexattr(ino, name.as_bytes())), reply)
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        // default_permissions: the kernel checks modes; we only confirm existence.
        match self.target(ino) {
            Ok(Target::Node { fs, ino, .. }) => Self::empty(guarded(|| fs.getattr(ino).map(|_| ())), reply),
            Ok(_) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let (fs, parent, k) = node_or_reply!(self, parent, reply);
        let excl = flags & libc::O_EXCL != 0;
        let r = guarded(|| {
            let (a, _) = fs.create(parent, name.as_bytes(), mode & 0o7777, cred(req), excl)?;
            if flags & libc::O_TRUNC != 0 && a.size != 0 {
                return fs.setattr(
                    a.ino,
                    &SetAttr {
                        size: Some(0),
                        ..Default::default()
                    },
                );
            }
            Ok(a)
        });
        match r {
            Ok(a) => {
                self.opened.shard(a.ino).lock().insert((k, a.ino), (a.mtime_ns, a.size));
                reply.created(
                    &TTL,
                    &self.attr(&fs, k, &a),
                    Generation(a.generation),
                    FileHandle(0),
                    FopenFlags::empty(),
                )
            }
            Err(e) => reply.error(errno(&e)),
        }
    }
}
