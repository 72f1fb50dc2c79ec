//! Directory listings: READDIR and READDIRPLUS.
//!
//! The kernel is asked for READDIRPLUS (`FUSE_DO_READDIRPLUS`, not the
//! adaptive `_AUTO`), so every listing carries each entry's attributes and
//! `ls -l`, `du` and `find` need no LOOKUP round trip per entry: the
//! kernel makes a dentry and an inode from every entry and caches both for
//! `TTL`.
//!
//! Reference counting: the kernel counts every READDIRPLUS entry it gets
//! (except `.` and `..`, and entries with node id 0) as one lookup, and
//! later returns it with FORGET. An entry whose inode does not read (a
//! damaged dnode block) is sent with node id 0: listed by name and inode
//! number, no inode made, no reference taken; its `stat` fails on its own. `Fs::readdir_plus` takes one reference per
//! entry the reply accepted, exactly like `Fs::lookup`, and none for an
//! entry that did not fit. If the listing fails after some entries were
//! accepted, those entries are still sent (with their references) and the
//! error comes with the next call, whose first entry fails again before
//! anything is accepted: a reference is never taken for an entry the
//! kernel does not receive.
//!
//! `.zfs` and `.zfs/snapshot` are virtual: their entries need no reference
//! (FORGET of a virtual inode is ignored, and snapshot roots are reached
//! through `getattr`, as `lookup` in `.zfs/snapshot` does).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::time::{Duration, UNIX_EPOCH};

use fuser::{FileAttr, FileType, Generation, INodeNo, ReplyDirectory, ReplyDirectoryPlus};

use crate::{errno, ftype, guarded, Target, TarnFuse, CTL_INO, CTL_OFFSET, SNAPDIR_INO, SNAP_SHIFT, TTL};

/// What a READDIRPLUS entry without attributes carries: node id 0 and
/// its kind (for the dirent's type); the kernel reads nothing else of it.
fn no_attributes(kind: FileType) -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

/// One entry of `.zfs` or `.zfs/snapshot`.
struct VirtualEntry {
    ino: u64,
    name: String,
    attr: FileAttr,
    generation: u64,
}

impl TarnFuse {
    /// The entries of a virtual directory, `.` and `..` first.
    fn virtual_entries(&self, ctl: bool) -> Vec<VirtualEntry> {
        let virt = |ino: u64, name: &str| VirtualEntry {
            ino,
            name: name.to_string(),
            attr: self.virtual_attr(ino),
            generation: 0,
        };
        if ctl {
            let root = match self.fs.getattr(self.fs.root_ino()) {
                Ok(a) => self.attr(&self.fs, 0, &a),
                Err(_) => self.virtual_attr(1),
            };
            return vec![
                virt(CTL_INO, "."),
                VirtualEntry { ino: 1, name: "..".into(), attr: root, generation: 0 },
                virt(SNAPDIR_INO, "snapshot"),
            ];
        }
        let mut all = vec![virt(SNAPDIR_INO, "."), virt(CTL_INO, "..")];
        let names = self.snapshots.as_ref().map(|s| s.names()).unwrap_or_default();
        for name in names {
            let Some((k, fs)) = self.snapshot_k(&name) else { continue };
            let Ok(a) = guarded(|| fs.getattr(fs.root_ino())) else { continue };
            all.push(VirtualEntry {
                ino: (k << SNAP_SHIFT) | fs.root_ino(),
                attr: self.attr(&fs, k, &a),
                generation: a.generation,
                name,
            });
        }
        all
    }

    pub(crate) fn list(&self, ino: INodeNo, offset: u64, mut reply: ReplyDirectory) {
        let target = match self.target(ino) {
            Ok(t) => t,
            Err(e) => return reply.error(errno(&e)),
        };
        let (fs, inner, k) = match target {
            Target::Ctl | Target::SnapDir => {
                let all = self.virtual_entries(matches!(target, Target::Ctl));
                for (i, e) in all.iter().enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(e.ino), i as u64 + 1, FileType::Directory, OsStr::new(&e.name)) {
                        break;
                    }
                }
                return reply.ok();
            }
            Target::Node { fs, ino, k } => (fs, ino, k),
        };
        let at_root = k == 0 && inner == self.fs.root_ino();
        let visible = at_root && self.snapshots.as_ref().is_some_and(|s| s.visible());
        let mut full = false;
        let r = if offset == CTL_OFFSET + 1 {
            Ok(())
        } else {
            guarded(|| {
                fs.readdir(inner, if offset == CTL_OFFSET { u64::MAX } else { offset }, &mut |e| {
                    let name = OsString::from_vec(e.name.clone());
                    full = reply.add(self.ino_out(&fs, k, e.ino), e.next_offset, ftype(e.kind), &name);
                    !full
                })
            })
        };
        if r.is_ok() && visible && !full && offset <= CTL_OFFSET {
            let _ = reply.add(INodeNo(CTL_INO), CTL_OFFSET + 1, FileType::Directory, OsStr::new(".zfs"));
        }
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(crate) fn list_plus(&self, ino: INodeNo, offset: u64, mut reply: ReplyDirectoryPlus) {
        let target = match self.target(ino) {
            Ok(t) => t,
            Err(e) => return reply.error(errno(&e)),
        };
        let (fs, inner, k) = match target {
            Target::Ctl | Target::SnapDir => {
                let all = self.virtual_entries(matches!(target, Target::Ctl));
                for (i, e) in all.iter().enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(e.ino), i as u64 + 1, OsStr::new(&e.name), &TTL, &e.attr, Generation(e.generation)) {
                        break;
                    }
                }
                return reply.ok();
            }
            Target::Node { fs, ino, k } => (fs, ino, k),
        };
        let at_root = k == 0 && inner == self.fs.root_ino();
        let visible = at_root && self.snapshots.as_ref().is_some_and(|s| s.visible());
        let mut full = false;
        let mut accepted = 0usize;
        let r = if offset == CTL_OFFSET + 1 {
            Ok(())
        } else {
            guarded(|| {
                fs.readdir_plus(inner, if offset == CTL_OFFSET { u64::MAX } else { offset }, &mut |e, a| {
                    full = match a {
                        Some(a) => {
                            let attr = self.attr(&fs, k, a);
                            reply.add(attr.ino, e.next_offset, OsStr::from_bytes(&e.name), &TTL, &attr, Generation(a.generation))
                        }
                        // An inode that does not read: the name with node
                        // id 0 (no attributes, no lookup counted); its
                        // `stat` asks again and gets the error.
                        None => {
                            let attr = no_attributes(ftype(e.kind));
                            reply.add(self.ino_out(&fs, k, e.ino), e.next_offset, OsStr::from_bytes(&e.name), &Duration::ZERO, &attr, Generation(0))
                        }
                    };
                    if !full {
                        accepted += 1;
                    }
                    !full
                })
            })
        };
        if r.is_ok() && visible && !full && offset <= CTL_OFFSET {
            let _ = reply.add(INodeNo(CTL_INO), CTL_OFFSET + 1, OsStr::new(".zfs"), &TTL, &self.virtual_attr(CTL_INO), Generation(0));
        }
        match r {
            Ok(()) => reply.ok(),
            // Entries already accepted hold references: send them; the
            // next call starts at the failing entry and reports the error.
            Err(_) if accepted > 0 => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }
}
