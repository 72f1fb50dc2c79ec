//! The model of a file system under a crash test (log_crash.rs): what each
//! name, inode and extended attribute held after every operation, and what
//! a crash may leave of it.
//!
//! Operations on one dataset are numbered in the order they ran (the test
//! serialises a dataset's operations under its model's lock). Every name,
//! inode and attribute keeps its history: (operation index, value after
//! it). An acknowledgement "the first `n` operations are durable" allows,
//! for each thing it covers, the value in effect after those `n` operations
//! or any later one: a later operation that was not acknowledged may or may
//! not have reached the disk, an earlier value may not come back.
//!
//! Inode numbers are reused after a free; an inode's history then runs
//! through its incarnations (with `Gone` between them), which only widens
//! the values allowed, never wrongly narrows them.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub type Ino = u64;

/// What an inode holds, as far as the test checks it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Val {
    Gone,
    File { size: u64, hash: u64 },
    Dir,
    Symlink(Vec<u8>),
}

/// A fast content hash (words, multiply-rotate); collisions are not a concern here.
pub fn hash(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ data.len() as u64;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let x = u64::from_le_bytes(w.try_into().unwrap());
        h = (h ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    }
    for &b in words.remainder() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Changes of one value: (index of the operation that made it, value).
#[derive(Clone, Debug)]
pub struct History<V> {
    changes: Vec<(u64, V)>,
}

impl<V> Default for History<V> {
    fn default() -> Self {
        History { changes: Vec::new() }
    }
}

impl<V: Clone + PartialEq + std::fmt::Debug> History<V> {
    pub fn push(&mut self, op: u64, v: V) {
        self.changes.push((op, v));
    }

    /// Whether `v` may be found after a crash when the first `acked`
    /// operations are acknowledged: the value in effect after them
    /// (`initial` before the first change), or any later one.
    pub fn allows(&self, initial: &V, acked: u64, v: &V) -> bool {
        self.allows_if(initial, acked, |x| x == v)
    }

    /// `allows` of any value `f` accepts.
    pub fn allows_if(&self, initial: &V, acked: u64, f: impl Fn(&V) -> bool) -> bool {
        let first_later = self.changes.partition_point(|(op, _)| *op < acked);
        let at_ack = first_later.checked_sub(1).map_or(initial, |i| &self.changes[i].1);
        f(at_ack) || self.changes[first_later..].iter().any(|(_, x)| f(x))
    }

    pub fn describe(&self, initial: &V, acked: u64) -> String {
        let first_later = self.changes.partition_point(|(op, _)| *op < acked);
        let at_ack = first_later.checked_sub(1).map_or(initial, |i| &self.changes[i].1);
        format!("acked {acked} ops: {at_ack:?} then {:?}", &self.changes[first_later..])
    }
}

#[derive(Clone, Debug)]
pub struct Node {
    pub val: Val,
    /// File contents (files only).
    pub data: Vec<u8>,
    /// Name -> value hash.
    pub xattrs: BTreeMap<Vec<u8>, u64>,
}

/// A change of a file's bytes.
#[derive(Clone, Debug)]
pub enum DataChange {
    /// Created or freed: empty.
    Reset,
    Write { offset: usize, data: Arc<Vec<u8>> },
    Truncate(usize),
}

/// One dataset's model: the current tree and every history.
#[derive(Default)]
pub struct DsModel {
    /// Operations done so far (the index of the next one).
    pub ops: u64,
    pub root: Ino,
    pub nodes: HashMap<Ino, Node>,
    /// (directory, name) -> inode.
    pub entries: BTreeMap<(Ino, Vec<u8>), Ino>,
    pub ent_hist: HashMap<(Ino, Vec<u8>), History<Option<Ino>>>,
    pub ino_hist: HashMap<Ino, History<Val>>,
    /// (inode, name) -> value hash.
    pub xattr_hist: HashMap<(Ino, Vec<u8>), History<Option<u64>>>,
    /// Per inode, every change of its bytes: (operation index, change).
    pub data_log: HashMap<Ino, Vec<(u64, DataChange)>>,
}

impl DsModel {
    pub fn new(root: Ino) -> DsModel {
        let mut m = DsModel { root, ..Default::default() };
        m.nodes.insert(root, Node { val: Val::Dir, data: Vec::new(), xattrs: BTreeMap::new() });
        m.ino_hist.entry(root).or_default().push(0, Val::Dir);
        m
    }

    /// Starts an operation: its index.
    pub fn begin(&mut self) -> u64 {
        self.ops += 1;
        self.ops - 1
    }

    pub fn kind_is(&self, ino: Ino, f: fn(&Val) -> bool) -> bool {
        self.nodes.get(&ino).is_some_and(|n| f(&n.val))
    }

    pub fn inos(&self, f: fn(&Val) -> bool) -> Vec<Ino> {
        let mut v: Vec<Ino> = self.nodes.iter().filter(|(_, n)| f(&n.val)).map(|(i, _)| *i).collect();
        v.sort();
        v
    }

    pub fn links(&self, ino: Ino) -> usize {
        self.entries.values().filter(|&&i| i == ino).count()
    }

    pub fn children(&self, dir: Ino) -> usize {
        self.entries.range((dir, Vec::new())..).take_while(|((d, _), _)| *d == dir).count()
    }

    /// The directory holding directory `ino` (None for the root).
    pub fn parent(&self, ino: Ino) -> Option<Ino> {
        self.entries.iter().find(|(_, &i)| i == ino).map(|((d, _), _)| *d)
    }

    /// Whether `dir` is `anc` or below it.
    pub fn is_under(&self, dir: Ino, anc: Ino) -> bool {
        let mut d = dir;
        loop {
            if d == anc {
                return true;
            }
            match self.parent(d) {
                Some(p) => d = p,
                None => return false,
            }
        }
    }

    fn set_entry(&mut self, op: u64, dir: Ino, name: &[u8], ino: Option<Ino>) {
        let key = (dir, name.to_vec());
        match ino {
            Some(i) => self.entries.insert(key.clone(), i),
            None => self.entries.remove(&key),
        };
        self.ent_hist.entry(key).or_default().push(op, ino);
    }

    pub fn set_val(&mut self, op: u64, ino: Ino) {
        let v = self.nodes.get(&ino).map_or(Val::Gone, |n| n.val.clone());
        self.ino_hist.entry(ino).or_default().push(op, v);
    }

    /// A new inode named `dir/name`.
    pub fn created(&mut self, op: u64, dir: Ino, name: &[u8], ino: Ino, val: Val) {
        self.nodes.insert(ino, Node { val, data: Vec::new(), xattrs: BTreeMap::new() });
        self.data_log.entry(ino).or_default().push((op, DataChange::Reset));
        self.set_val(op, ino);
        self.set_entry(op, dir, name, Some(ino));
    }

    pub fn linked(&mut self, op: u64, ino: Ino, dir: Ino, name: &[u8]) {
        self.set_entry(op, dir, name, Some(ino));
    }

    /// Drops the inode if nothing names it any more.
    fn release(&mut self, op: u64, ino: Ino) {
        if self.links(ino) > 0 {
            return;
        }
        if let Some(n) = self.nodes.remove(&ino) {
            for name in n.xattrs.keys() {
                self.xattr_hist.entry((ino, name.clone())).or_default().push(op, None);
            }
        }
        self.data_log.entry(ino).or_default().push((op, DataChange::Reset));
        self.set_val(op, ino);
    }

    /// `dir/name` removed (unlink or rmdir).
    pub fn removed(&mut self, op: u64, dir: Ino, name: &[u8]) {
        let ino = self.entries[&(dir, name.to_vec())];
        self.set_entry(op, dir, name, None);
        self.release(op, ino);
    }

    /// `sd/sn` renamed to `dd/dn`, replacing what `dd/dn` named.
    pub fn renamed(&mut self, op: u64, sd: Ino, sn: &[u8], dd: Ino, dn: &[u8]) {
        let ino = self.entries[&(sd, sn.to_vec())];
        let old = self.entries.get(&(dd, dn.to_vec())).copied();
        self.set_entry(op, sd, sn, None);
        self.set_entry(op, dd, dn, Some(ino));
        if let Some(o) = old {
            self.release(op, o);
        }
    }

    pub fn wrote(&mut self, op: u64, ino: Ino, offset: usize, data: &[u8]) {
        let n = self.nodes.get_mut(&ino).expect("written file in the model");
        if n.data.len() < offset + data.len() {
            n.data.resize(offset + data.len(), 0);
        }
        n.data[offset..offset + data.len()].copy_from_slice(data);
        n.val = Val::File { size: n.data.len() as u64, hash: hash(&n.data) };
        self.set_val(op, ino);
        let change = DataChange::Write { offset, data: Arc::new(data.to_vec()) };
        self.data_log.entry(ino).or_default().push((op, change));
    }

    pub fn truncated(&mut self, op: u64, ino: Ino, size: usize) {
        let n = self.nodes.get_mut(&ino).expect("truncated file in the model");
        n.data.resize(size, 0);
        n.val = Val::File { size: size as u64, hash: hash(&n.data) };
        self.set_val(op, ino);
        self.data_log.entry(ino).or_default().push((op, DataChange::Truncate(size)));
    }

    /// The bytes of file `ino` after the first `acked` operations.
    pub fn content_at(&self, ino: Ino, acked: u64) -> Vec<u8> {
        let log = self.data_log.get(&ino).map_or(&[][..], |v| &v[..]);
        let mut data = Vec::new();
        for (_, c) in log.iter().take_while(|(op, _)| *op < acked) {
            match c {
                DataChange::Reset => data.clear(),
                DataChange::Truncate(size) => data.resize(*size, 0),
                DataChange::Write { offset, data: d } => {
                    if data.len() < offset + d.len() {
                        data.resize(offset + d.len(), 0);
                    }
                    data[*offset..offset + d.len()].copy_from_slice(d);
                }
            }
        }
        data
    }

    /// The changes of file `ino`'s bytes from operation `acked` on.
    pub fn changes_from(&self, ino: Ino, acked: u64) -> &[(u64, DataChange)] {
        let log = self.data_log.get(&ino).map_or(&[][..], |v| &v[..]);
        &log[log.partition_point(|(op, _)| *op < acked)..]
    }

    pub fn xattr_set(&mut self, op: u64, ino: Ino, name: &[u8], value: Option<&[u8]>) {
        let n = self.nodes.get_mut(&ino).expect("inode in the model");
        let h = value.map(hash);
        match h {
            Some(h) => n.xattrs.insert(name.to_vec(), h),
            None => n.xattrs.remove(name),
        };
        self.xattr_hist.entry((ino, name.to_vec())).or_default().push(op, h);
    }
}

/// An acknowledgement: when it returned (recorder events) and what it covers.
#[derive(Clone, Copy, Debug)]
pub struct Ack {
    /// The recorder's event count when the call returned: cuts at or after
    /// it keep what it acknowledged.
    pub event: u64,
    pub ds: usize,
    /// The first `ops` operations of the dataset were done when it was called.
    pub ops: u64,
    /// Some(ino): `fsync(ino)` (that file's data, size and attributes, and
    /// every namespace change); None: a pool sync (everything).
    pub ino: Option<Ino>,
}

/// What the acknowledgements up to a cut cover in one dataset.
pub struct Acked {
    /// Namespace: names, and which inodes exist.
    pub namespace: u64,
    /// Everything (pool syncs).
    pub all: u64,
    /// Per fsynced inode.
    pub files: HashMap<Ino, u64>,
}

impl Acked {
    pub fn at(acks: &[Ack], ds: usize, cut: u64) -> Acked {
        let mut a = Acked { namespace: 0, all: 0, files: HashMap::new() };
        for ack in acks.iter().filter(|a| a.ds == ds && a.event <= cut) {
            a.namespace = a.namespace.max(ack.ops);
            match ack.ino {
                None => a.all = a.all.max(ack.ops),
                Some(i) => {
                    let e = a.files.entry(i).or_default();
                    *e = (*e).max(ack.ops);
                }
            }
        }
        a
    }

    /// Operations acknowledged for the contents and attributes of `ino`.
    pub fn of(&self, ino: Ino) -> u64 {
        self.all.max(self.files.get(&ino).copied().unwrap_or(0))
    }
}
