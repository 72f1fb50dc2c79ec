//! What every NFS procedure shares: the call's context (export table,
//! client, credentials), handle resolution, attribute and error
//! translation. The procedures themselves are in `proc_*.rs`.

use std::net::IpAddr;
use std::sync::Arc;

use nfs3_types::nfs3::{
    fattr3, ftype3, nfs_fh3, nfsstat3, nfstime3, post_op_attr, pre_op_attr, specdata3, wcc_attr,
    wcc_data, Nfs3Option,
};
use nfs3_types::xdr_codec::Opaque;
use tarn_fs::{Attr, FileKind, Fs, FsError};
use tarn_share::nfs::ClientAccess;

use crate::exports::{squash, Creds, Entry, Node, Table};
use crate::handle::{Handle, Kind};
use crate::rpc::Auth;

/// Inode numbers shown for `.zfs` and `.zfs/snapshot` (as tarn-fuse does).
pub const CTL_FILEID: u64 = (0x7fff << 48) | 1;
pub const SNAPDIR_FILEID: u64 = (0x7fff << 48) | 2;

/// One call's context.
pub struct Ctx<'a> {
    pub table: &'a Table,
    pub client: IpAddr,
    pub auth: &'a Auth,
    /// The write verifier of this server instance.
    pub verifier: [u8; 8],
}

/// A handle resolved for this caller.
pub struct Target {
    pub entry: Arc<Entry>,
    pub access: ClientAccess,
    pub creds: Creds,
    pub node: Node,
}

pub type NfsResult<T> = Result<T, nfsstat3>;

impl Ctx<'_> {
    /// A handle's export, and what the export's rules let this client do
    /// and as whom.
    fn export_of(&self, fh: &nfs_fh3) -> NfsResult<(Handle, Arc<Entry>, ClientAccess, Creds)> {
        let handle = Handle::decode(fh.data.as_ref()).map_err(|_| nfsstat3::NFS3ERR_BADHANDLE)?;
        let entry = self.table.by_handle(&handle).ok_or(nfsstat3::NFS3ERR_STALE)?.clone();
        let access = entry.export.rules.access(self.client).ok_or(nfsstat3::NFS3ERR_ACCES)?;
        let creds = squash(self.auth, &access);
        Ok((handle, entry, access, creds))
    }

    pub fn resolve(&self, fh: &nfs_fh3) -> NfsResult<Target> {
        let (handle, entry, access, creds) = self.export_of(fh)?;
        let node = match handle.kind {
            Kind::Node => {
                let fs = entry.export.fs.clone();
                check_generation(&fs, handle.ino, handle.generation)?;
                Node::Inode { fs, ino: handle.ino, snapshot: 0 }
            }
            Kind::SnapNode => {
                let fs = entry.snapshot_by_id(handle.snapshot).ok_or(nfsstat3::NFS3ERR_STALE)?;
                check_generation(&fs, handle.ino, handle.generation)?;
                Node::Inode { fs, ino: handle.ino, snapshot: handle.snapshot }
            }
            Kind::Ctl | Kind::SnapDir if entry.export.snapshots.is_none() => return Err(nfsstat3::NFS3ERR_STALE),
            Kind::Ctl => Node::Ctl,
            Kind::SnapDir => Node::SnapDir,
        };
        Ok(Target { entry, access, creds, node })
    }

    /// `resolve` of a dataset inode's handle from memory alone, with the
    /// inode's attributes: None when the full path must answer (a
    /// snapshot or `.zfs` handle, an inode not in memory or locked by a
    /// change, or any error: the full path then gives it).
    pub fn resolve_cached(&self, fh: &nfs_fh3) -> Option<(Target, Attr)> {
        let (handle, entry, access, creds) = self.export_of(fh).ok()?;
        if handle.kind != Kind::Node {
            return None;
        }
        let fs = entry.export.fs.clone();
        let attr = fs.attr_by_handle_cached(handle.ino, handle.generation)?;
        Some((Target { entry, access, creds, node: Node::Inode { fs, ino: handle.ino, snapshot: 0 } }, attr))
    }
}

/// STALE unless `ino` is a live inode of `fs` created as `generation`.
fn check_generation(fs: &Fs, ino: u64, generation: u64) -> NfsResult<()> {
    crate::caller::by_handle(fs, ino, generation).map(|_| ()).map_err(|e| status(&e))
}

impl Target {
    /// The inode's file system and number; `.zfs` directories are
    /// not inodes (callers that need one answer with `not_inode`).
    pub fn inode(&self) -> Option<(&Arc<Fs>, u64)> {
        match &self.node {
            Node::Inode { fs, ino, .. } => Some((fs, *ino)),
            _ => None,
        }
    }

    pub fn snapshot(&self) -> u64 {
        match &self.node {
            Node::Inode { snapshot, .. } => *snapshot,
            _ => 0,
        }
    }

    /// NFS3ERR_ROFS for a read-only client, a snapshot, or `.zfs`.
    pub fn writable(&self) -> NfsResult<()> {
        if self.access.read_only || !matches!(self.node, Node::Inode { snapshot: 0, .. }) {
            return Err(nfsstat3::NFS3ERR_ROFS);
        }
        Ok(())
    }

    /// Current attributes (of an inode or a `.zfs` directory).
    pub fn attr(&self) -> NfsResult<fattr3> {
        match &self.node {
            Node::Inode { fs, ino, snapshot } => {
                let a = fs.getattr(*ino).map_err(|e| status(&e))?;
                Ok(fattr(&self.entry, *snapshot, &a))
            }
            Node::Ctl => virtual_attr(&self.entry, CTL_FILEID),
            Node::SnapDir => virtual_attr(&self.entry, SNAPDIR_FILEID),
        }
    }

    pub fn post_op(&self) -> post_op_attr {
        self.attr().map_or(Nfs3Option::None, Nfs3Option::Some)
    }

    pub fn pre_op(&self) -> pre_op_attr {
        match self.attr() {
            Ok(a) => Nfs3Option::Some(wcc_attr { size: a.size, mtime: a.mtime, ctime: a.ctime }),
            Err(_) => Nfs3Option::None,
        }
    }

    /// wcc data from `before` to now.
    pub fn wcc(&self, before: pre_op_attr) -> wcc_data {
        wcc_data { before, after: self.post_op() }
    }

    pub fn fh_of(&self, a: &Attr) -> nfs_fh3 {
        fh(&self.entry.handle_of(self.snapshot(), a.ino, a.generation))
    }
}

pub fn fh(h: &Handle) -> nfs_fh3 {
    nfs_fh3 { data: Opaque::owned(h.encode()) }
}

/// The file system id clients see for an export: the same for the
/// dataset and its snapshots (so `.zfs/snapshot` is not a mount point to
/// an NFSv3 client), different between exports.
pub fn fsid(entry: &Entry) -> u64 {
    entry.export.pool_guid.rotate_left(17) ^ entry.export.objset
}

/// File ids: the inode number in the dataset; in a snapshot, the inode
/// number with the snapshot folded into the top 16 bits (as tarn-fuse
/// numbers them, but stable: derived from the snapshot's object set).
pub fn fileid(snapshot: u64, ino: u64) -> u64 {
    if snapshot == 0 {
        ino
    } else {
        ((snapshot % 0x7ffe + 1) << 48) | (ino & ((1 << 48) - 1))
    }
}

pub fn time(ns: i64) -> nfstime3 {
    let secs = ns.div_euclid(1_000_000_000);
    nfstime3 { seconds: secs.clamp(0, u32::MAX as i64) as u32, nseconds: ns.rem_euclid(1_000_000_000) as u32 }
}

pub fn fattr(entry: &Entry, snapshot: u64, a: &Attr) -> fattr3 {
    let type_ = match a.kind {
        FileKind::File => ftype3::NF3REG,
        FileKind::Dir => ftype3::NF3DIR,
        FileKind::Symlink => ftype3::NF3LNK,
        FileKind::Fifo => ftype3::NF3FIFO,
        FileKind::Socket => ftype3::NF3SOCK,
        FileKind::CharDev => ftype3::NF3CHR,
        FileKind::BlockDev => ftype3::NF3BLK,
    };
    fattr3 {
        type_,
        mode: a.perm & 0o7777,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        used: a.blocks.saturating_mul(512),
        rdev: specdata3 { specdata1: libc::major(a.rdev), specdata2: libc::minor(a.rdev) },
        fsid: fsid(entry),
        fileid: fileid(snapshot, a.ino),
        atime: time(a.atime_ns),
        mtime: time(a.mtime_ns),
        ctime: time(a.ctime_ns),
    }
}

/// `.zfs` and `.zfs/snapshot`: read-only directories owned by root, with
/// the dataset root's times.
pub fn virtual_attr(entry: &Entry, fileid: u64) -> NfsResult<fattr3> {
    let fs = &entry.export.fs;
    let root = fs.getattr(fs.root_ino()).map_err(|e| status(&e))?;
    let mut a = fattr(entry, 0, &root);
    a.mode = 0o555;
    a.nlink = 2;
    a.uid = 0;
    a.gid = 0;
    a.size = 2;
    a.used = 0;
    a.fileid = fileid;
    Ok(a)
}

/// tarn-fs's error as an NFS status, by errno (so new tarn-fs errors,
/// EACCES and ESTALE, map without a change here).
pub fn status(e: &FsError) -> nfsstat3 {
    match e.errno() {
        libc::EPERM => nfsstat3::NFS3ERR_PERM,
        libc::ENOENT => nfsstat3::NFS3ERR_NOENT,
        libc::ENXIO => nfsstat3::NFS3ERR_NXIO,
        libc::EACCES => nfsstat3::NFS3ERR_ACCES,
        libc::EEXIST => nfsstat3::NFS3ERR_EXIST,
        libc::EXDEV => nfsstat3::NFS3ERR_XDEV,
        libc::ENODEV => nfsstat3::NFS3ERR_NODEV,
        libc::ENOTDIR => nfsstat3::NFS3ERR_NOTDIR,
        libc::EISDIR => nfsstat3::NFS3ERR_ISDIR,
        libc::EINVAL | libc::E2BIG | libc::ENODATA | libc::ELOOP => nfsstat3::NFS3ERR_INVAL,
        libc::EFBIG => nfsstat3::NFS3ERR_FBIG,
        libc::ENOSPC => nfsstat3::NFS3ERR_NOSPC,
        libc::EROFS => nfsstat3::NFS3ERR_ROFS,
        libc::EMLINK => nfsstat3::NFS3ERR_MLINK,
        libc::ENAMETOOLONG => nfsstat3::NFS3ERR_NAMETOOLONG,
        libc::ENOTEMPTY => nfsstat3::NFS3ERR_NOTEMPTY,
        libc::EDQUOT => nfsstat3::NFS3ERR_DQUOT,
        libc::ESTALE => nfsstat3::NFS3ERR_STALE,
        libc::EOPNOTSUPP => nfsstat3::NFS3ERR_NOTSUPP,
        _ => nfsstat3::NFS3ERR_IO,
    }
}
