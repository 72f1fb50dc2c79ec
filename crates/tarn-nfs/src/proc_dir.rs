//! READDIR and READDIRPLUS.
//!
//! Cookies are tarn-fs's readdir offsets: 1 after `.`, 2 after `..`,
//! then ZAP hash cookies that stay valid across creates and removes, and
//! across restarts. So the cookie verifier is a constant: a client may
//! resume a listing from any cookie it was given, any time later, and
//! sees every entry that existed throughout exactly once. A verifier
//! other than zero or ours is NFS3ERR_BAD_COOKIE.
//!
//! The dataset's root lists `.zfs` last (cookie `CTL_COOKIE`) when
//! `snapdir=visible`; `.zfs` and `.zfs/snapshot` list with cookies
//! 1, 2, … (index + 1).

use nfs3_types::nfs3::{
    cookieverf3, dirlist3, dirlistplus3, entry3, entryplus3, fattr3, filename3, nfs_fh3, nfsstat3,
    Nfs3Option, Nfs3Result, READDIR3resfail, READDIR3resok, READDIRPLUS3resfail,
    READDIRPLUS3resok,
};
use nfs3_types::xdr_codec::{List, Opaque};

use crate::exports::Node;
use crate::handle::Kind;
use crate::nfs::{fattr, fh, fileid, status, virtual_attr, Ctx, NfsResult, Target, CTL_FILEID, SNAPDIR_FILEID};
use crate::proc_read::Reply;
use crate::xdr::Reader;

pub const COOKIE_VERF: [u8; 8] = *b"tarnzap1";
/// Cookie of the `.zfs` entry appended to the root's listing.
pub const CTL_COOKIE: u64 = u64::MAX - 1;

/// Reply overhead outside the entries: status, post-op attributes, the
/// verifier, the end-of-list marker and eof.
const OVERHEAD: usize = 4 + 4 + 84 + 8 + 4 + 4;

/// An entry's attributes and handle (READDIRPLUS only).
type Plus = Option<(fattr3, nfs_fh3)>;
/// A listing: the directory, its entries, eof; or a status.
type Listing = Result<(Target, Vec<Item>, bool), (nfsstat3, Option<Target>)>;

struct Item {
    fileid: u64,
    name: Vec<u8>,
    cookie: u64,
    plus: Plus,
}

impl Item {
    fn dir_size(&self) -> usize {
        4 + 8 + 4 + self.name.len().div_ceil(4) * 4 + 8
    }
    fn size(&self) -> usize {
        self.dir_size() + if self.plus.is_some() { 4 + 84 + 4 + 4 + 44 } else { 4 + 4 }
    }
}

/// Collects entries while they fit.
struct Budget {
    items: Vec<Item>,
    used: usize,
    dir_used: usize,
    max: usize,
    dir_max: usize,
    full: bool,
}

impl Budget {
    fn push(&mut self, it: Item) -> bool {
        let fits = self.used + it.size() <= self.max && (self.items.is_empty() || self.dir_used + it.dir_size() <= self.dir_max);
        if !fits {
            self.full = true;
            return false;
        }
        self.used += it.size();
        self.dir_used += it.dir_size();
        self.items.push(it);
        true
    }
}

/// Lists `dir` from `cookie` into `b`; true at the end of the directory.
fn list(t: &Target, cookie: u64, plus: bool, b: &mut Budget) -> NfsResult<bool> {
    let entry = &t.entry;
    match &t.node {
        Node::Inode { fs, ino, snapshot } => {
            let snap = *snapshot;
            let at_root = *ino == fs.root_ino() && snap == 0;
            if cookie != CTL_COOKIE {
                let res = if plus {
                    crate::caller::readdir_plus(fs, *ino, cookie, &t.creds, &mut |e, a| {
                        // An inode that does not read: the name, without
                        // attributes or handle (both optional in READDIRPLUS).
                        let plus = a.map(|a| (fattr(entry, snap, a), fh(&entry.handle_of(snap, a.ino, a.generation))));
                        b.push(Item { fileid: fileid(snap, e.ino), name: e.name.clone(), cookie: e.next_offset, plus })
                    })
                } else {
                    crate::caller::readdir(fs, *ino, cookie, &t.creds, &mut |e| {
                        b.push(Item { fileid: fileid(snap, e.ino), name: e.name.clone(), cookie: e.next_offset, plus: None })
                    })
                };
                res.map_err(|e| status(&e))?;
                if b.full {
                    return Ok(false);
                }
            }
            let visible = at_root && entry.export.snapshots.as_ref().is_some_and(|s| s.visible());
            if visible && cookie != CTL_COOKIE {
                let plus = if plus { Some((virtual_attr(entry, CTL_FILEID)?, fh(&entry.virtual_handle(Kind::Ctl)))) } else { None };
                if !b.push(Item { fileid: CTL_FILEID, name: b".zfs".to_vec(), cookie: CTL_COOKIE, plus }) {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Node::Ctl | Node::SnapDir => {
            let (me, parent, mine) = if matches!(t.node, Node::Ctl) {
                (Kind::Ctl, None, CTL_FILEID)
            } else {
                (Kind::SnapDir, Some(Kind::Ctl), SNAPDIR_FILEID)
            };
            let mut names: Vec<(Vec<u8>, u64, Plus)> = Vec::new();
            let virt = |k: Kind, id: u64| -> NfsResult<(fattr3, nfs_fh3)> { Ok((virtual_attr(entry, id)?, fh(&entry.virtual_handle(k)))) };
            names.push((b".".to_vec(), mine, if plus { Some(virt(me, mine)?) } else { None }));
            let up = match parent {
                Some(k) => (b"..".to_vec(), CTL_FILEID, if plus { Some(virt(k, CTL_FILEID)?) } else { None }),
                None => {
                    let fs = &entry.export.fs;
                    let a = fs.getattr(fs.root_ino()).map_err(|e| status(&e))?;
                    (b"..".to_vec(), a.ino, if plus { Some((fattr(entry, 0, &a), fh(&entry.root_handle()))) } else { None })
                }
            };
            names.push(up);
            if me == Kind::Ctl {
                names.push((b"snapshot".to_vec(), SNAPDIR_FILEID, if plus { Some(virt(Kind::SnapDir, SNAPDIR_FILEID)?) } else { None }));
            } else {
                for n in entry.snapshot_names() {
                    let Some((id, fs)) = entry.snapshot_by_name(&n) else { continue };
                    let Ok(a) = fs.getattr(fs.root_ino()) else { continue };
                    let p = if plus { Some((fattr(entry, id, &a), fh(&entry.handle_of(id, a.ino, a.generation)))) } else { None };
                    names.push((n.into_bytes(), fileid(id, a.ino), p));
                }
            }
            for (i, (name, id, p)) in names.into_iter().enumerate() {
                let c = i as u64 + 1;
                if c <= cookie {
                    continue;
                }
                if !b.push(Item { fileid: id, name, cookie: c, plus: p }) {
                    return Ok(false);
                }
            }
            Ok(true)
        }
    }
}

fn check_verf(cookie: u64, verf: [u8; 8]) -> NfsResult<()> {
    if cookie != 0 && verf != [0; 8] && verf != COOKIE_VERF {
        return Err(nfsstat3::NFS3ERR_BAD_COOKIE);
    }
    Ok(())
}

fn run(ctx: &Ctx, fh: &nfs_fh3, cookie: u64, verf: [u8; 8], plus: bool, dir_max: usize, max: usize) -> Listing {
    let t = ctx.resolve(fh).map_err(|s| (s, None))?;
    if let Err(s) = check_verf(cookie, verf) {
        return Err((s, Some(t)));
    }
    let mut b = Budget { items: Vec::new(), used: OVERHEAD, dir_used: 0, max, dir_max, full: false };
    match list(&t, cookie, plus, &mut b) {
        Ok(eof) => {
            if b.items.is_empty() && !eof {
                return Err((nfsstat3::NFS3ERR_TOOSMALL, Some(t)));
            }
            Ok((t, b.items, eof))
        }
        Err(s) => Err((s, Some(t))),
    }
}

pub fn readdir(ctx: &Ctx, r: &mut Reader) -> Reply {
    let dir = r.fh()?;
    let cookie = r.u64()?;
    let verf = r.fixed::<8>()?;
    let count = r.u32()? as usize;
    let res: Nfs3Result<READDIR3resok<'static>, READDIR3resfail> = match run(ctx, &dir, cookie, verf, false, usize::MAX, count.min(1 << 20)) {
        Ok((t, items, eof)) => Nfs3Result::Ok(READDIR3resok {
            dir_attributes: t.post_op(),
            cookieverf: cookieverf3(COOKIE_VERF),
            reply: dirlist3 {
                entries: List(items.into_iter().map(|i| entry3 { fileid: i.fileid, name: filename3(Opaque::owned(i.name)), cookie: i.cookie }).collect()),
                eof,
            },
        }),
        Err((s, t)) => Nfs3Result::Err((s, READDIR3resfail { dir_attributes: t.map_or(Nfs3Option::None, |t| t.post_op()) })),
    };
    Ok(Box::new(res))
}

pub fn readdirplus(ctx: &Ctx, r: &mut Reader) -> Reply {
    let dir = r.fh()?;
    let cookie = r.u64()?;
    let verf = r.fixed::<8>()?;
    let dircount = r.u32()? as usize;
    let maxcount = r.u32()? as usize;
    let res: Nfs3Result<READDIRPLUS3resok<'static>, READDIRPLUS3resfail> = match run(ctx, &dir, cookie, verf, true, dircount.max(512), maxcount.min(1 << 20)) {
        Ok((t, items, eof)) => Nfs3Result::Ok(READDIRPLUS3resok {
            dir_attributes: t.post_op(),
            cookieverf: cookieverf3(COOKIE_VERF),
            reply: dirlistplus3 {
                entries: List(
                    items
                        .into_iter()
                        .map(|i| {
                            let (a, h) = match i.plus {
                                Some((a, h)) => (Nfs3Option::Some(a), Nfs3Option::Some(h)),
                                None => (Nfs3Option::None, Nfs3Option::None),
                            };
                            entryplus3 { fileid: i.fileid, name: filename3(Opaque::owned(i.name)), cookie: i.cookie, name_attributes: a, name_handle: h }
                        })
                        .collect(),
                ),
                eof,
            },
        }),
        Err((s, t)) => Nfs3Result::Err((s, READDIRPLUS3resfail { dir_attributes: t.map_or(Nfs3Option::None, |t| t.post_op()) })),
    };
    Ok(Box::new(res))
}
