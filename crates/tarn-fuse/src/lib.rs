//! tarn-fuse: serves a `tarn_fs::Fs` through the kernel's FUSE driver.
//!
//! Pure-Rust mount (fuser with no libfuse); as root the mount syscall is
//! used directly. Several worker threads each read their own cloned
//! `/dev/fuse` descriptor, so requests for different files run in parallel
//! (tarn-fs has no global lock on the data path).
//!
//! Caching: attributes and entries are cached by the kernel for `TTL`
//! (every change goes through this mount, so the kernel's view stays
//! right); `keep_cache` is set on open when the file's mtime and size did
//! not change since its previous open. The writeback cache is NOT enabled:
//! writes are write-through, so a write acknowledged to an `O_SYNC` /
//! `O_DSYNC` file is followed by a pool sync before the reply, and `fsync`
//! returns after a pool sync — the durability contract holds without
//! having to trust the kernel's flush ordering.
//!
//! Inode numbers: FUSE's root (1) is the root directory object; every
//! other inode number is the object id (object 1 is the master node and
//! never appears as a file).
//!
//! No request ever panics the daemon: every handler runs under
//! `catch_unwind` and a panic becomes `EIO`.

use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, KernelConfig,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, SessionACL, TimeOrNow,
    WriteFlags,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tarn_fs::{Attr, Cred, FileKind, Fs, FsError, SetAttr, TimeSet};

/// How long the kernel may cache attributes and directory entries. Every
/// change reaches the file system through this mount, so the kernel's copy
/// only goes stale for what the daemon changes on its own (atime).
pub const TTL: Duration = Duration::from_secs(10);
/// Largest write and readahead the kernel is asked to use.
pub const MAX_IO: u32 = 1 << 20;
/// Worker threads serving requests.
pub const WORKER_THREADS: usize = 4;

#[derive(Clone, Debug)]
pub struct MountOptions {
    pub fsname: String,
    pub readonly: bool,
    pub allow_other: bool,
}

pub struct MountHandle {
    session: Option<fuser::BackgroundSession>,
    mountpoint: PathBuf,
}

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
    /// and served, and the error is EBUSY.
    pub fn try_unmount(&mut self) -> std::io::Result<()> {
        self.do_unmount(false)
    }

    fn do_unmount(&mut self, force: bool) -> std::io::Result<()> {
        if self.session.is_none() {
            return Ok(());
        }
        match umount2(&self.mountpoint, 0) {
            Ok(()) => {
                // The connection is gone: the workers see ENODEV and exit.
                if let Some(session) = self.session.take() {
                    session.join()?;
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
    let fstype = CString::new("fuse.tarn").map_err(bad)?;
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
        opened: Mutex::new(HashMap::new()),
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

struct TarnFuse {
    fs: Arc<Fs>,
    /// (mtime, size) of each file at its last open, for `keep_cache`.
    opened: Mutex<HashMap<u64, (i64, u64)>>,
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
    fn ino_in(&self, ino: INodeNo) -> u64 {
        if ino.0 == 1 {
            self.fs.root_ino()
        } else {
            ino.0
        }
    }
    fn ino_out(&self, ino: u64) -> INodeNo {
        if ino == self.fs.root_ino() {
            INodeNo(1)
        } else {
            INodeNo(ino)
        }
    }
    fn attr(&self, a: &Attr) -> FileAttr {
        FileAttr {
            ino: self.ino_out(a.ino),
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
    fn entry(&self, r: tarn_fs::Result<Attr>, reply: ReplyEntry) {
        match r {
            Ok(a) => reply.entry(&TTL, &self.attr(&a), Generation(a.generation)),
            Err(e) => reply.error(errno(&e)),
        }
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

impl fuser::Filesystem for TarnFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(MAX_IO);
        if config.set_max_readahead(MAX_IO).is_err() {
            // The kernel caps readahead; keep its maximum.
        }
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_PARALLEL_DIROPS);
        let _ = config.set_max_background(64);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = guarded(|| self.fs.lookup(self.ino_in(parent), name.as_bytes()));
        self.entry(r, reply)
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let ino = self.ino_in(ino);
        let _ = guarded(|| {
            self.fs.forget(ino, nlookup);
            Ok(())
        });
        if self.fs.references(ino) == 0 {
            self.opened.lock().remove(&ino);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match guarded(|| self.fs.getattr(self.ino_in(ino))) {
            Ok(a) => reply.attr(&TTL, &self.attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
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
        let sa = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: ts(atime),
            mtime: ts(mtime),
        };
        match guarded(|| self.fs.setattr(self.ino_in(ino), &sa)) {
            Ok(a) => reply.attr(&TTL, &self.attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match guarded(|| self.fs.readlink(self.ino_in(ino))) {
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
        let r = guarded(|| {
            self.fs.mknod(
                self.ino_in(parent),
                name.as_bytes(),
                mode,
                rdev as u64,
                cred(req),
            )
        });
        self.entry(r, reply)
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
        let r = guarded(|| {
            self.fs.mkdir(
                self.ino_in(parent),
                name.as_bytes(),
                mode & 0o7777,
                cred(req),
            )
        });
        self.entry(r, reply)
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        Self::empty(
            guarded(|| self.fs.unlink(self.ino_in(parent), name.as_bytes())),
            reply,
        )
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        Self::empty(
            guarded(|| self.fs.rmdir(self.ino_in(parent), name.as_bytes())),
            reply,
        )
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = guarded(|| {
            self.fs.symlink(
                self.ino_in(parent),
                link_name.as_bytes(),
                target.as_os_str().as_bytes(),
                cred(req),
            )
        });
        self.entry(r, reply)
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
        let r = guarded(|| {
            self.fs.rename(
                self.ino_in(parent),
                name.as_bytes(),
                self.ino_in(newparent),
                newname.as_bytes(),
                flags.bits(),
            )
        });
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
        let r = guarded(|| {
            self.fs
                .link(self.ino_in(ino), self.ino_in(newparent), newname.as_bytes())
        });
        self.entry(r, reply)
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let ino = self.ino_in(ino);
        match guarded(|| self.fs.getattr(ino)) {
            Ok(a) => {
                let mut open_flags = FopenFlags::empty();
                let trunc = flags.0 & libc::O_TRUNC != 0;
                let mut m = self.opened.lock();
                if !trunc && m.get(&ino) == Some(&(a.mtime_ns, a.size)) {
                    open_flags |= FopenFlags::FOPEN_KEEP_CACHE;
                }
                m.insert(ino, (a.mtime_ns, a.size));
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
        match guarded(|| self.fs.read(self.ino_in(ino), offset, size)) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        let ino = self.ino_in(ino);
        let r = guarded(|| {
            let n = self.fs.write(ino, offset, data)?;
            if flags.0 & (libc::O_SYNC | libc::O_DSYNC) != 0 {
                self.fs.fsync(ino)?;
            }
            Ok(n)
        });
        match r {
            Ok(n) => {
                if let Ok(a) = self.fs.getattr(ino) {
                    // Our own write: the kernel's cached pages are current.
                    self.opened.lock().insert(ino, (a.mtime_ns, a.size));
                }
                reply.written(n)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    // No `flush`: answering ENOSYS once makes the kernel stop sending a
    // FLUSH on every close; nothing is buffered here between write and close.

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        Self::empty(guarded(|| self.fs.fsync(self.ino_in(ino))), reply)
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match guarded(|| self.fs.getattr(self.ino_in(ino))) {
            Ok(a) if a.kind == FileKind::Dir => reply.opened(FileHandle(0), FopenFlags::empty()),
            Ok(_) => reply.error(Errno::ENOTDIR),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = guarded(|| {
            self.fs.readdir(self.ino_in(ino), offset, &mut |e| {
                let name = std::ffi::OsString::from_vec(e.name.clone());
                !reply.add(self.ino_out(e.ino), e.next_offset, ftype(e.kind), &name)
            })
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        Self::empty(guarded(|| self.fs.fsync(self.ino_in(ino))), reply)
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
        let r = guarded(|| {
            self.fs
                .setxattr(self.ino_in(ino), name.as_bytes(), value, flags as u32)
        });
        Self::empty(r, reply)
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match guarded(|| self.fs.getxattr(self.ino_in(ino), name.as_bytes())) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match guarded(|| self.fs.listxattr(self.ino_in(ino))) {
            Ok(names) => {
                let mut buf = Vec::new();
                for n in names {
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
        Self::empty(
            guarded(|| self.fs.removexattr(self.ino_in(ino), name.as_bytes())),
            reply,
        )
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        // default_permissions: the kernel checks modes; we only confirm existence.
        Self::empty(
            guarded(|| self.fs.getattr(self.ino_in(ino)).map(|_| ())),
            reply,
        )
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
        let excl = flags & libc::O_EXCL != 0;
        let r = guarded(|| {
            let (a, _) = self.fs.create(
                self.ino_in(parent),
                name.as_bytes(),
                mode & 0o7777,
                cred(req),
                excl,
            )?;
            if flags & libc::O_TRUNC != 0 && a.size != 0 {
                return self.fs.setattr(
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
                self.opened.lock().insert(a.ino, (a.mtime_ns, a.size));
                reply.created(
                    &TTL,
                    &self.attr(&a),
                    Generation(a.generation),
                    FileHandle(0),
                    FopenFlags::empty(),
                )
            }
            Err(e) => reply.error(errno(&e)),
        }
    }
}
