//! `tarn diff SNAPSHOT [SNAPSHOT|DATASET]` (`zfs diff`): the files and
//! directories that changed between a snapshot and a later snapshot of the
//! same file system (or its live state, or a clone of it).
//!
//! The objects that changed come from tarn-obj's read-only diff walk (the
//! one `send` uses: trees compared side by side, pruned by birth txg, so
//! the cost is the size of the change). Each changed object is then looked
//! at through the POSIX layer on both sides — a read-only file system on
//! the earlier snapshot's object set and one on the later one's — for its
//! type, link count, generation, change time and path. The rules are
//! zfs's: an object on one side only is `+` or `-`; on both sides with the
//! same generation and type, a different path is `R`, a different link
//! count of a file is `M` with `(+n)`/`(-n)`, another change of its change
//! time is `M`; a different generation or type (the object id was reused)
//! is `-` of the old and `+` of the new. A directory whose entries changed
//! is itself `M`. Objects the POSIX layer does not show (extended
//! attribute storage, the file system's own maps) are skipped: a changed
//! attribute changes its file's change time, so the file shows as `M`.
//!
//! Paths are found from the parent pointer in each inode, looking the name
//! up in the parent directory; each directory needed is listed once per
//! side (names cached), so naming many changes in one large directory
//! does not list it again and again. An object whose path cannot be
//! resolved (unlinked while open) is treated as absent on that side.
//! Rows are sorted by path (zfs prints them in object order).

use std::collections::HashMap;
use std::sync::Arc;

use tarn_fs::format::{InodePhys, FLAG_UNLINKED};
use tarn_fs::{otype, Fs, FsOptions};
use tarn_obj::diff::{ObjectAttrs, ObjectChange};
use tarn_obj::{ObjType, ObjectId, ObjectSet};

use crate::daemon::{pool_of, Daemon};
use crate::proto::{DiffData, DiffRow, Response};

type HandlerResult = Result<Response, String>;

/// Deepest directory nesting followed when naming a file.
const DEPTH_MAX: usize = 4096;

fn posix_type(t: ObjType) -> bool {
    [otype::FILE, otype::DIR, otype::SYMLINK, otype::SPECIAL].contains(&t)
}

/// zfs diff's type letter.
fn type_letter(mode: u32) -> char {
    match mode & libc::S_IFMT {
        libc::S_IFBLK => 'B',
        libc::S_IFCHR => 'C',
        libc::S_IFDIR => '/',
        libc::S_IFIFO => '|',
        libc::S_IFLNK => '@',
        libc::S_IFSOCK => '=',
        libc::S_IFREG => 'F',
        _ => '?',
    }
}

fn is_dir(mode: u32) -> bool {
    mode & libc::S_IFMT == libc::S_IFDIR
}

/// One side of the comparison: a read-only file system and the names of
/// the directories listed so far.
struct Side {
    os: ObjectSet,
    fs: Arc<Fs>,
    /// Directory → (child object → name), filled one directory at a time.
    names: HashMap<u64, HashMap<u64, Vec<u8>>>,
}

/// What the POSIX layer says of one object on one side.
struct Seen {
    inode: InodePhys,
    path: Vec<u8>,
}

impl Side {
    fn open(ds: &tarn_ds::Pool, os: ObjectSet) -> Result<Side, String> {
        let opts = FsOptions { readonly: true, atime: false, ..FsOptions::default() };
        let fs = Fs::open(ds.obj().clone(), os.clone(), opts).map_err(|e| e.to_string())?;
        Ok(Side { os, fs, names: HashMap::new() })
    }

    fn inode(&self, ino: u64) -> Option<InodePhys> {
        let bonus = self.os.bonus(ObjectId(ino)).ok()?;
        InodePhys::decode(ino, &bonus).ok()
    }

    fn name_in(&mut self, dir: u64, ino: u64) -> Result<Option<Vec<u8>>, String> {
        if !self.names.contains_key(&dir) {
            let mut entries = HashMap::new();
            let listed = self.fs.readdir(dir, 2, &mut |e| {
                entries.insert(e.ino, e.name.clone());
                true
            });
            match listed {
                Ok(()) => {}
                // Not a directory (any more): nothing is named in it.
                Err(tarn_fs::FsError::NotDir | tarn_fs::FsError::NotFound) => {}
                Err(e) => return Err(format!("cannot list directory {dir}: {e}")),
            }
            self.names.insert(dir, entries);
        }
        Ok(self.names.get(&dir).and_then(|m| m.get(&ino)).cloned())
    }

    /// The path of `ino` (`/` for the root), None if it is not reachable.
    fn path(&mut self, ino: u64, inode: &InodePhys) -> Result<Option<Vec<u8>>, String> {
        let root = self.fs.root_ino();
        let mut parts: Vec<Vec<u8>> = Vec::new();
        let (mut cur, mut parent) = (ino, inode.parent);
        for _ in 0..DEPTH_MAX {
            if cur == root {
                parts.reverse();
                let mut path = Vec::new();
                for part in &parts {
                    path.push(b'/');
                    path.extend_from_slice(part);
                }
                if path.is_empty() {
                    path.push(b'/');
                }
                return Ok(Some(path));
            }
            let Some(name) = self.name_in(parent, cur)? else { return Ok(None) };
            parts.push(name);
            cur = parent;
            let Some(up) = self.inode(cur) else { return Ok(None) };
            parent = up.parent;
        }
        Ok(None)
    }

    /// The object as the POSIX layer shows it, if it does.
    fn seen(&mut self, attrs: Option<&ObjectAttrs>) -> Result<Option<Seen>, String> {
        let Some(attrs) = attrs.filter(|a| posix_type(a.otype)) else { return Ok(None) };
        let Ok(inode) = InodePhys::decode(attrs.id.0, &attrs.bonus) else { return Ok(None) };
        if inode.nlink == 0 || inode.flags & FLAG_UNLINKED != 0 {
            return Ok(None);
        }
        Ok(self.path(attrs.id.0, &inode)?.map(|path| Seen { inode, path }))
    }
}

fn prefixed(mount: &[u8], path: &[u8]) -> Vec<u8> {
    let mut out = mount.to_vec();
    out.extend_from_slice(path);
    out
}

fn row(change: char, seen: &Seen, mount: &[u8]) -> DiffRow {
    DiffRow {
        change,
        file_type: type_letter(seen.inode.mode),
        path: prefixed(mount, &seen.path),
        new_path: None,
        link_delta: None,
        ctime_ns: seen.inode.ctime_ns,
    }
}

/// zfs's verdict on one object seen (or not) on each side.
fn compare(from: Option<Seen>, to: Option<Seen>, mount: &[u8], out: &mut Vec<DiffRow>) {
    let links = |s: &Option<Seen>| s.as_ref().map_or(0, |s| i64::from(s.inode.nlink));
    let dir = |s: &Option<Seen>| s.as_ref().is_some_and(|s| is_dir(s.inode.mode));
    let delta = if dir(&from) || dir(&to) || links(&from) == 0 || links(&to) == 0 { 0 } else { links(&to) - links(&from) };
    match (from, to) {
        (None, None) => {}
        (None, Some(t)) => out.push(row('+', &t, mount)),
        (Some(f), None) => out.push(row('-', &f, mount)),
        (Some(f), Some(t)) => {
            let same_object =
                f.inode.generation == t.inode.generation && f.inode.mode & libc::S_IFMT == t.inode.mode & libc::S_IFMT;
            if !same_object {
                out.push(row('-', &f, mount));
                out.push(row('+', &t, mount));
            } else if f.inode.ctime_ns == t.inode.ctime_ns {
                // Nothing a user would see (an access time, say).
            } else if delta != 0 {
                let seen = if delta > 0 { &f } else { &t };
                out.push(DiffRow { link_delta: Some(delta), ..row('M', seen, mount) });
            } else if f.path == t.path {
                out.push(row('M', &t, mount));
            } else {
                let renamed = row('R', &t, mount);
                out.push(DiffRow { path: prefixed(mount, &f.path), new_path: Some(renamed.path.clone()), ..renamed });
            }
        }
    }
}

/// A snapshot name split: (dataset or "", snapshot name).
fn split_snapshot(name: &str) -> Option<(&str, &str)> {
    let (dataset, snap) = name.split_once('@')?;
    (!snap.is_empty()).then_some((dataset, snap))
}

impl Daemon {
    pub(crate) fn diff(&self, from: &str, to: Option<&str>) -> HandlerResult {
        let fail = |why: String| format!("cannot diff '{from}': {why}");
        let (from_ds, from_snap) =
            split_snapshot(from).ok_or_else(|| fail("not a snapshot (give DATASET@SNAPSHOT)".into()))?;
        // `to`: a snapshot (`ds@s` or `@s`), a dataset, or the live `from` dataset.
        let (to_ds, to_snap): (&str, Option<&str>) = match to {
            None => (from_ds, None),
            Some(t) if t.contains('@') => {
                let (d, s) = split_snapshot(t).ok_or_else(|| fail(format!("'{t}' is not a snapshot")))?;
                (d, Some(s))
            }
            Some(t) => (t, None),
        };
        let (from_ds, to_ds) = match (from_ds.is_empty(), to_ds.is_empty()) {
            (true, true) => return Err(fail("cannot tell which dataset the snapshots belong to".into())),
            (true, false) => (to_ds, to_ds),
            (false, true) => (from_ds, from_ds),
            (false, false) => (from_ds, to_ds),
        };
        let from_full = format!("{from_ds}@{from_snap}");
        let to_full = to_snap.map(|s| format!("{to_ds}@{s}"));
        let (ds, mount) = {
            let pools = self.pools.lock();
            let imported = pools
                .get(pool_of(from_ds))
                .filter(|p| p.ds.exists(from_ds))
                .ok_or_else(|| fail(format!("dataset '{from_ds}' does not exist")))?;
            if pool_of(to_ds) != pool_of(from_ds) || !imported.ds.exists(to_ds) {
                return Err(fail(format!("dataset '{to_ds}' does not exist in pool '{}'", pool_of(from_ds))));
            }
            let mount = imported
                .mounts
                .get(to_ds)
                .map(|m| m.path.display().to_string())
                .ok_or_else(|| fail(format!("'{to_ds}' is not mounted (zfs diff needs the mountpoint to name paths)")))?;
            (imported.ds.clone(), mount)
        };
        let from_record = ds.snapshot_record(&from_full).map_err(|_| fail(format!("snapshot '{from_full}' does not exist")))?;
        if from_ds != to_ds {
            // A clone of the earlier snapshot is compared with it too.
            let origin = ds.record(to_ds).ok().and_then(|r| r.origin);
            if origin.as_deref() != Some(from_full.as_str()) {
                return Err(fail(format!("not an earlier snapshot of '{to_ds}' (or of the origin of that clone)")));
            }
        }
        let to_os = match &to_full {
            Some(name) => {
                let record = ds.snapshot_record(name).map_err(|_| fail(format!("snapshot '{name}' does not exist")))?;
                if record.createtxg < from_record.createtxg {
                    return Err(fail(format!("'{name}' is older than '{from_full}' (give the earlier snapshot first)")));
                }
                ds.snapshot_objset(name).map_err(|e| fail(e.to_string()))?
            }
            None => {
                // The live file system as of now: what was written is synced
                // first, so the walk (which reads committed trees) sees it.
                ds.obj().sync().map_err(|e| fail(e.to_string()))?;
                ds.objset(to_ds).map_err(|e| fail(e.to_string()))?
            }
        };
        let mut claimed = vec![from_full.clone()];
        claimed.extend(to_full.clone());
        let _claim = ds.claim_snapshots(claimed);
        let from_os = ds.snapshot_objset(&from_full).map_err(|e| fail(e.to_string()))?;
        let mount = if mount == "/" { String::new() } else { mount };
        let rows = diff_objsets(&ds, from_os, to_os, from_record.createtxg, mount.as_bytes()).map_err(fail)?;
        Ok(Response::data(serde_json::to_value(DiffData { rows }).map_err(|e| e.to_string())?))
    }
}

/// The rows of `zfs diff` between `from` (a snapshot taken in `from_txg`)
/// and `to` (a later snapshot, clone or live state of the same file
/// system). Each change is judged as the walk reports it, so memory holds
/// the rows and the directory names, not the changed objects.
fn diff_objsets(ds: &tarn_ds::Pool, from: ObjectSet, to: ObjectSet, from_txg: u64, mount: &[u8]) -> Result<Vec<DiffRow>, String> {
    let mut from_side = Side::open(ds, from.clone())?;
    let mut to_side = Side::open(ds, to.clone())?;
    let mut rows = Vec::new();
    // An error of ours stops the walk; the walk's own error says why not.
    let mut failure: Option<String> = None;
    let mut judge = |base: Option<&ObjectAttrs>, target: Option<&ObjectAttrs>, rows: &mut Vec<DiffRow>| -> tarn_obj::Result<()> {
        let seen = from_side.seen(base).and_then(|f| Ok((f, to_side.seen(target)?)));
        match seen {
            Ok((f, t)) => {
                compare(f, t, mount, rows);
                Ok(())
            }
            Err(e) => {
                failure = Some(e);
                Err(tarn_obj::ObjError::Invalid("diff stopped".into()))
            }
        }
    };
    let walked = to.changed_objects(Some(&from), from_txg, ObjectId(0), false, &mut |change| match change {
        ObjectChange::Changed { target, base } => judge(base.as_ref(), Some(&target), &mut rows),
        ObjectChange::Freed { first, count } => {
            for id in first.0..first.0.saturating_add(count) {
                let base = from.committed_object(ObjectId(id))?;
                if base.as_ref().is_some_and(|b| posix_type(b.otype)) {
                    judge(base.as_ref(), None, &mut rows)?;
                }
            }
            Ok(())
        }
    });
    if let Some(why) = failure {
        return Err(why);
    }
    walked.map_err(|e| format!("cannot compare the object sets: {e}"))?;
    rows.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(mode: u32, nlink: u32, generation: u64, ctime: i64, path: &str) -> Option<Seen> {
        let inode = InodePhys { mode, nlink, generation, ctime_ns: ctime, ..Default::default() };
        Some(Seen { inode, path: path.as_bytes().to_vec() })
    }

    fn verdict(from: Option<Seen>, to: Option<Seen>) -> Vec<(char, String, Option<String>, Option<i64>)> {
        let mut rows = Vec::new();
        compare(from, to, b"/m", &mut rows);
        rows.into_iter()
            .map(|r| {
                let s = |b: Vec<u8>| String::from_utf8(b).unwrap();
                (r.change, s(r.path), r.new_path.map(s), r.link_delta)
            })
            .collect()
    }

    #[test]
    fn zfs_rules() {
        let f = libc::S_IFREG | 0o644;
        let d = libc::S_IFDIR | 0o755;
        assert_eq!(verdict(None, seen(f, 1, 5, 9, "/a")), [('+', "/m/a".into(), None, None)]);
        assert_eq!(verdict(seen(f, 1, 5, 9, "/a"), None), [('-', "/m/a".into(), None, None)]);
        assert_eq!(verdict(seen(f, 1, 5, 9, "/a"), seen(f, 1, 5, 10, "/a")), [('M', "/m/a".into(), None, None)]);
        assert_eq!(verdict(seen(f, 1, 5, 9, "/a"), seen(f, 1, 5, 9, "/a")), []);
        assert_eq!(
            verdict(seen(f, 1, 5, 9, "/a"), seen(f, 1, 5, 10, "/b")),
            [('R', "/m/a".into(), Some("/m/b".into()), None)]
        );
        assert_eq!(verdict(seen(f, 1, 5, 9, "/a"), seen(f, 2, 5, 10, "/a")), [('M', "/m/a".into(), None, Some(1))]);
        assert_eq!(verdict(seen(d, 2, 5, 9, "/"), seen(d, 3, 5, 10, "/")), [('M', "/m/".into(), None, None)]);
        assert_eq!(
            verdict(seen(f, 1, 5, 9, "/a"), seen(f, 1, 7, 10, "/b")),
            [('-', "/m/a".into(), None, None), ('+', "/m/b".into(), None, None)]
        );
        assert_eq!(
            verdict(seen(f, 1, 5, 9, "/a"), seen(d, 2, 5, 10, "/a")),
            [('-', "/m/a".into(), None, None), ('+', "/m/a".into(), None, None)]
        );
        assert_eq!(type_letter(libc::S_IFLNK | 0o777), '@');
        assert_eq!(type_letter(libc::S_IFIFO), '|');
    }
}
