//! Checks a file system found after a power cut against its model
//! (crash_model.rs): the tree is whole (every entry names a live inode of
//! its kind, link counts equal the names, directory sizes, link counts and
//! `..` agree with their entries, no inode or attribute object is left
//! unreachable), and every name, inode and attribute holds a value the
//! acknowledgements allow.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, HashSet};

use tarn_fs::format::InodePhys;
use tarn_fs::{otype, Attr, FileKind, Fs, MASTER_OBJECT};
use tarn_obj::zap::Zap;
use tarn_obj::{ObjType, ObjectId};

use super::crash_model::{hash, Acked, DataChange, DsModel, Ino, Val};

/// What one check looked at.
#[derive(Default, Debug, Clone, Copy)]
pub struct Seen {
    pub inodes: u64,
    pub entries: u64,
    pub bytes_read: u64,
    /// Files whose bytes were no single state the file passed through,
    /// only a mix of them (a later write applied in part).
    pub mixed: u64,
}

fn e<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |err| format!("{what}: {err}")
}

/// Reads the whole file.
fn read_all(fs: &Fs, ino: Ino, size: u64) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(size as usize);
    while (out.len() as u64) < size {
        let n = (size - out.len() as u64).min(1 << 20) as u32;
        let part = fs.read(ino, out.len() as u64, n).map_err(e(&format!("read inode {ino}")))?;
        if part.is_empty() {
            return Err(format!("inode {ino}: read at {} of {size} returned nothing", out.len()));
        }
        out.extend_from_slice(&part);
    }
    Ok(out)
}

/// Checks `fs` against `m` with what `acked` acknowledges; with
/// `contents`, reads every file whole (otherwise sizes only).
pub fn check_fs(fs: &Fs, m: &DsModel, acked: &Acked, contents: bool) -> Result<Seen, String> {
    let mut seen = Seen::default();
    let root = fs.root_ino();
    if root != m.root {
        return Err(format!("root is inode {root}, was {}", m.root));
    }
    // Walk the tree.
    let mut ents: BTreeMap<(Ino, Vec<u8>), Ino> = BTreeMap::new();
    let mut attrs: HashMap<Ino, Attr> = HashMap::new();
    let mut parent_of: HashMap<Ino, Ino> = HashMap::from([(root, root)]);
    let mut todo = vec![root];
    attrs.insert(root, fs.getattr(root).map_err(e("getattr of the root"))?);
    while let Some(d) = todo.pop() {
        let da = attrs[&d];
        let mut list = Vec::new();
        let mut dotdot = None;
        fs.readdir(d, 0, &mut |ent| {
            match &ent.name[..] {
                b"." => {}
                b".." => dotdot = Some(ent.ino),
                _ => list.push(ent.clone()),
            }
            true
        })
        .map_err(e(&format!("readdir of directory {d}")))?;
        if dotdot != Some(parent_of[&d]) {
            return Err(format!("directory {d}: '..' is {dotdot:?}, but it is named in directory {}", parent_of[&d]));
        }
        let mut subdirs = 0;
        for ent in &list {
            let name = String::from_utf8_lossy(&ent.name);
            let a = fs.getattr(ent.ino).map_err(e(&format!("entry {d}/{name} names inode {} that is not live", ent.ino)))?;
            if a.kind != ent.kind {
                return Err(format!("entry {d}/{name}: type {:?}, inode {} is {:?}", ent.kind, ent.ino, a.kind));
            }
            if a.kind == FileKind::Dir {
                subdirs += 1;
                if parent_of.insert(ent.ino, d).is_some() {
                    return Err(format!("directory {} has two names (second: {d}/{name})", ent.ino));
                }
                todo.push(ent.ino);
            }
            attrs.insert(ent.ino, a);
            ents.insert((d, ent.name.clone()), ent.ino);
        }
        if da.size != 2 + list.len() as u64 {
            return Err(format!("directory {d}: size {} for {} entries", da.size, list.len()));
        }
        if da.nlink != 2 + subdirs {
            return Err(format!("directory {d}: nlink {} with {subdirs} subdirectories", da.nlink));
        }
    }
    seen.entries = ents.len() as u64;
    seen.inodes = attrs.len() as u64;
    // Link counts.
    let mut names: HashMap<Ino, u32> = HashMap::new();
    for ino in ents.values() {
        *names.entry(*ino).or_default() += 1;
    }
    for (ino, a) in &attrs {
        if a.kind != FileKind::Dir && a.nlink != names[ino] {
            return Err(format!("inode {ino}: nlink {} but {} names (a link or rename half applied)", a.nlink, names[ino]));
        }
    }
    // Names against the model.
    let keys: HashSet<&(Ino, Vec<u8>)> = m.ent_hist.keys().chain(ents.keys()).collect();
    for key in keys {
        let got = ents.get(key).copied();
        let name = String::from_utf8_lossy(&key.1);
        let Some(h) = m.ent_hist.get(key) else {
            return Err(format!("entry {}/{name} -> {got:?} was never created", key.0));
        };
        if !h.allows(&None, acked.namespace, &got) {
            return Err(format!("entry {}/{name} is {got:?}; {}", key.0, h.describe(&None, acked.namespace)));
        }
    }
    // Inodes against the model.
    for (&ino, a) in &attrs {
        let Some(h) = m.ino_hist.get(&ino) else {
            return Err(format!("inode {ino} ({:?}) was never created", a.kind));
        };
        let (val, ack) = match a.kind {
            FileKind::Dir => (Val::Dir, acked.namespace),
            FileKind::Symlink => (Val::Symlink(fs.readlink(ino).map_err(e("readlink"))?), acked.namespace),
            FileKind::File => {
                let ack = acked.of(ino);
                if !h.allows_if(&Val::Gone, ack, |v| matches!(v, Val::File { size, .. } if *size == a.size)) {
                    return Err(format!("file {ino}: size {}; {}", a.size, h.describe(&Val::Gone, ack)));
                }
                if contents {
                    let data = read_all(fs, ino, a.size)?;
                    seen.bytes_read += data.len() as u64;
                    let val = Val::File { size: a.size, hash: hash(&data) };
                    if !h.allows(&Val::Gone, ack, &val) {
                        check_bytes(m, ino, ack, &data)?;
                        seen.mixed += 1;
                    }
                }
                continue;
            }
            k => return Err(format!("inode {ino}: kind {k:?} the test never makes")),
        };
        if !h.allows(&Val::Gone, ack, &val) {
            return Err(format!("inode {ino} is {val:?}; {}", h.describe(&Val::Gone, ack)));
        }
    }
    // Extended attributes against the model.
    for (&ino, a) in &attrs {
        if a.kind == FileKind::Symlink {
            continue;
        }
        let ack = acked.of(ino);
        let mut got: HashMap<Vec<u8>, u64> = HashMap::new();
        let mut what: HashMap<Vec<u8>, String> = HashMap::new();
        for name in fs.listxattr(ino).map_err(e("listxattr"))? {
            let v = fs.getxattr(ino, &name).map_err(e("getxattr"))?;
            got.insert(name.clone(), hash(&v));
            let zeros = v.iter().filter(|&&b| b == 0).count();
            what.insert(name, format!("{} bytes, {zeros} zero", v.len()));
        }
        for name in got.keys() {
            if !m.xattr_hist.contains_key(&(ino, name.clone())) {
                return Err(format!("inode {ino}: xattr {} was never set", String::from_utf8_lossy(name)));
            }
        }
        for ((i, name), h) in &m.xattr_hist {
            if *i != ino {
                continue;
            }
            let v = got.get(name).copied();
            if !h.allows(&None, ack, &v) {
                return Err(format!(
                    "inode {ino}: xattr {} is {v:?} ({}); {}",
                    String::from_utf8_lossy(name),
                    what.get(name).map_or("absent", |s| s),
                    h.describe(&None, ack),
                ));
            }
        }
    }
    check_orphans(fs, &attrs).map_err(|(msg, ids)| {
        // What the model knows of them: their values and the names they had.
        let mut out = msg;
        for id in ids {
            if let Some(h) = m.ino_hist.get(&id) {
                out += &format!("; inode {id}: {}", h.describe(&Val::Gone, acked.of(id)));
                for (key, eh) in &m.ent_hist {
                    if eh.allows(&None, 0, &Some(id)) {
                        out += &format!("; entry {}/{}: {}", key.0, String::from_utf8_lossy(&key.1), eh.describe(&None, acked.namespace));
                    }
                }
            }
        }
        out
    })?;
    Ok(seen)
}

/// Each byte of file `ino` is what the first `ack` operations left there
/// or what a later one wrote there (zero past a later truncate or free):
/// writes that were not acknowledged may reach the disk in part, but no
/// acknowledged byte is lost and no byte comes from nowhere.
fn check_bytes(m: &DsModel, ino: Ino, ack: u64, data: &[u8]) -> Result<(), String> {
    let base = m.content_at(ino, ack);
    let later = m.changes_from(ino, ack);
    const CHUNK: usize = 4096;
    for (i, chunk) in data.chunks(CHUNK).enumerate() {
        let start = i * CHUNK;
        let want = base.get(start..(start + chunk.len()).min(base.len())).unwrap_or(&[]);
        if chunk.len() == want.len() && chunk == want {
            continue;
        }
        for (j, &b) in chunk.iter().enumerate() {
            let p = start + j;
            let acked_byte = base.get(p).copied().unwrap_or(0);
            if b == acked_byte {
                continue;
            }
            let explained = later.iter().any(|(_, c)| match c {
                DataChange::Reset => b == 0,
                DataChange::Truncate(size) => p >= *size && b == 0,
                DataChange::Write { offset, data: d } => p >= *offset && p < offset + d.len() && d[p - offset] == b,
            });
            if !explained {
                return Err(format!(
                    "file {ino}: byte {p} is {b:#04x}, the first {ack} operations left {acked_byte:#04x} and no later one wrote it ({} later changes)",
                    later.len()
                ));
            }
        }
    }
    Ok(())
}

/// Every inode and attribute object of the object set is reachable from
/// the root, and the unlinked set is empty (the open freed its inodes).
/// Reads the synced state: call after a pool sync.
fn check_orphans(fs: &Fs, attrs: &HashMap<Ino, Attr>) -> Result<(), (String, Vec<u64>)> {
    check_orphans_inner(fs, attrs).map_err(|e| (e, Vec::new()))?.map_or(Ok(()), Err)
}

/// Err: a failure to check; Ok(Some): orphans found (message, ids).
fn check_orphans_inner(fs: &Fs, attrs: &HashMap<Ino, Attr>) -> Result<Option<(String, Vec<u64>)>, String> {
    let os = fs.objset();
    let mut xattr_dirs = HashSet::new();
    let mut xattr_values = HashSet::new();
    for &ino in attrs.keys() {
        let b = os.bonus(ObjectId(ino)).map_err(e("bonus"))?;
        let p = InodePhys::decode(ino, &b).map_err(e("inode"))?;
        if p.xattr_obj != 0 {
            xattr_dirs.insert(p.xattr_obj);
            Zap::iterate(os, ObjectId(p.xattr_obj), 0, &mut |_, _, v| {
                if v.first() == Some(&1) && v.len() == 13 {
                    xattr_values.insert(u64::from_le_bytes(v[1..9].try_into().unwrap()));
                }
                true
            })
            .map_err(e("xattr map"))?;
        }
    }
    let unlinked = Zap::lookup(os, ObjectId(MASTER_OBJECT), b"UNLINKED").map_err(e("master node"))?.ok_or("no unlinked set")?;
    let unlinked = u64::from_le_bytes(unlinked[..8].try_into().map_err(e("unlinked set id"))?);
    let n = Zap::count(os, ObjectId(unlinked)).map_err(e("unlinked set"))?;
    if n != 0 {
        return Ok(Some((format!("{n} inodes left in the unlinked set after open"), Vec::new())));
    }
    let mut orphans = Vec::new();
    os.for_each_object(&mut |id, phys| {
        let t = ObjType(phys.otype);
        let reachable = if [otype::DIR, otype::FILE, otype::SYMLINK, otype::SPECIAL].contains(&t) {
            attrs.contains_key(&id.0)
        } else if t == otype::XATTR_DIR {
            xattr_dirs.contains(&id.0)
        } else if t == otype::XATTR_VALUE {
            xattr_values.contains(&id.0)
        } else {
            true
        };
        if !reachable {
            orphans.push((id.0, phys.otype));
        }
    })
    .map_err(e("object walk"))?;
    if !orphans.is_empty() {
        let ids = orphans.iter().map(|o| o.0).collect();
        return Ok(Some((format!("objects allocated but unreachable (id, type): {orphans:?}"), ids)));
    }
    Ok(None)
}
