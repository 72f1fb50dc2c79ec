//! Permission checks of `Fs::checked` against Linux's: the same seeded
//! operations run as several users (with supplementary groups) on a tmpfs
//! through real system calls, in a forked child that called setgroups,
//! setresgid and setresuid, and on tarn through `Checked`; every step must
//! give the same errno, and the touched paths the same mode, owner and
//! group. Plus direct tests of the rules (sticky, set-group-ID directories,
//! chmod/chown, supplementary groups).

use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rand::Rng;
use tarn_fs::*;

mod support;

/// uid, gid, supplementary groups.
const USERS: [(u32, u32, &[u32]); 4] = [(0, 0, &[]), (1000, 1000, &[2000]), (1001, 1001, &[2000, 1000]), (1002, 2000, &[])];

fn caller(u: usize) -> Caller {
    let (uid, gid, groups) = USERS[u];
    Caller { uid, gid, groups: groups.to_vec() }
}

#[derive(Clone, Debug)]
enum Op {
    Mkdir(String, u32),
    Create(String, u32),
    Unlink(String),
    Rmdir(String),
    Rename(String, String),
    Chmod(String, u32),
    Chown(String, Option<u32>, Option<u32>),
    Truncate(String, u64),
    TouchNow(String),
    SetTimes(String),
    Link(String, String),
    Symlink(String),
    Read(String),
    Write(String),
    SetXattr(String, &'static str),
    GetXattr(String, &'static str),
}

/// A tmpfs mounted for the test, unmounted when dropped.
struct Tmpfs(PathBuf);
impl Tmpfs {
    fn new(tag: &str) -> Tmpfs {
        let dir = std::env::temp_dir().join(format!("tarn-access-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
        let r = unsafe { libc::mount(c"tmpfs".as_ptr(), c.as_ptr(), c"tmpfs".as_ptr(), 0, c"mode=0755".as_ptr().cast()) };
        assert_eq!(r, 0, "mount tmpfs on {}: {}", dir.display(), std::io::Error::last_os_error());
        Tmpfs(dir)
    }
}
impl Drop for Tmpfs {
    fn drop(&mut self) {
        let c = CString::new(self.0.as_os_str().as_encoded_bytes()).unwrap();
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn cs(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// Run `op` as user `u` in a forked child chdir'd to `root`; its errno (0: success).
fn kernel(root: &Path, u: usize, op: &Op) -> i32 {
    let (uid, gid, groups) = USERS[u];
    let groups: Vec<libc::gid_t> = groups.to_vec();
    let root = CString::new(root.as_os_str().as_encoded_bytes()).unwrap();
    // Everything the child uses is made before fork: it must not allocate.
    let (a, b) = match op {
        Op::Rename(x, y) | Op::Link(x, y) => (cs(x), cs(y)),
        Op::Mkdir(x, _) | Op::Create(x, _) | Op::Unlink(x) | Op::Rmdir(x) | Op::Chmod(x, _) | Op::Chown(x, ..) | Op::Truncate(x, _) => (cs(x), cs("")),
        Op::TouchNow(x) | Op::SetTimes(x) | Op::Symlink(x) | Op::Read(x) | Op::Write(x) => (cs(x), cs("")),
        Op::SetXattr(x, n) | Op::GetXattr(x, n) => (cs(x), cs(n)),
    };
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        unsafe {
            libc::umask(0);
            if libc::chdir(root.as_ptr()) != 0
                || libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setresgid(gid, gid, gid) != 0
                || libc::setresuid(uid, uid, uid) != 0
            {
                libc::_exit(250);
            }
            let r = match op {
                Op::Mkdir(_, m) => libc::mkdir(a.as_ptr(), *m),
                Op::Create(_, m) => libc::open(a.as_ptr(), libc::O_CREAT | libc::O_EXCL | libc::O_RDONLY, *m),
                Op::Unlink(_) => libc::unlink(a.as_ptr()),
                Op::Rmdir(_) => libc::rmdir(a.as_ptr()),
                Op::Rename(..) => libc::rename(a.as_ptr(), b.as_ptr()),
                Op::Chmod(_, m) => libc::chmod(a.as_ptr(), *m),
                Op::Chown(_, o, g) => libc::chown(a.as_ptr(), o.unwrap_or(u32::MAX), g.unwrap_or(u32::MAX)),
                Op::Truncate(_, n) => libc::truncate(a.as_ptr(), *n as i64),
                Op::TouchNow(_) => libc::utimensat(libc::AT_FDCWD, a.as_ptr(), std::ptr::null(), 0),
                Op::SetTimes(_) => {
                    let t = [libc::timespec { tv_sec: 1, tv_nsec: 0 }, libc::timespec { tv_sec: 2, tv_nsec: 0 }];
                    libc::utimensat(libc::AT_FDCWD, a.as_ptr(), t.as_ptr(), 0)
                }
                Op::Link(..) => libc::link(a.as_ptr(), b.as_ptr()),
                Op::Symlink(_) => libc::symlink(c"nowhere".as_ptr(), a.as_ptr()),
                Op::Read(_) | Op::Write(_) => {
                    let write = matches!(op, Op::Write(_));
                    let fd = libc::open(a.as_ptr(), if write { libc::O_WRONLY } else { libc::O_RDONLY });
                    if fd < 0 {
                        -1
                    } else {
                        let mut buf = [0u8; 16];
                        let n = if write { libc::write(fd, c"hello".as_ptr().cast(), 5) } else { libc::read(fd, buf.as_mut_ptr().cast(), 16) };
                        if n < 0 { -1 } else { 0 }
                    }
                }
                Op::SetXattr(..) => libc::lsetxattr(a.as_ptr(), b.as_ptr(), c"v".as_ptr().cast(), 1, 0),
                Op::GetXattr(..) => {
                    let mut buf = [0u8; 64];
                    let n = libc::lgetxattr(a.as_ptr(), b.as_ptr(), buf.as_mut_ptr().cast(), 64);
                    if n < 0 { -1 } else { 0 }
                }
            };
            libc::_exit(if r < 0 { *libc::__errno_location() } else { 0 });
        }
    }
    let mut status = 0;
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "child died: {status:#x}");
    let code = libc::WEXITSTATUS(status);
    assert_ne!(code, 250, "could not become uid {uid}");
    code
}

/// Resolve `path` on tarn for caller `c`: (parent, last name) after a walk
/// that needs search permission like the kernel's. Symlinks all dangle
/// (their target is `nowhere`), so following one is ENOENT.
fn parent_of(fs: &Fs, c: &Caller, path: &str) -> Result<(u64, String)> {
    let ck = fs.checked(c);
    let mut parts: Vec<&str> = path.split('/').collect();
    let last = parts.pop().unwrap().to_string();
    let mut dir = fs.root_ino();
    for p in parts {
        let a = ck.lookup(dir, p.as_bytes())?;
        match a.kind {
            FileKind::Symlink => return Err(FsError::NotFound),
            FileKind::Dir => dir = a.ino,
            _ => return Err(FsError::NotDir),
        }
    }
    // The kernel's walk checks search permission on the last directory
    // too, before any lookup of the last name (rename walks both paths).
    ck.access(dir, MAY_EXEC)?;
    Ok((dir, last))
}

fn resolve(fs: &Fs, c: &Caller, path: &str, follow: bool) -> Result<Attr> {
    let (dir, last) = parent_of(fs, c, path)?;
    let a = fs.checked(c).lookup(dir, last.as_bytes())?;
    if follow && a.kind == FileKind::Symlink {
        return Err(FsError::NotFound);
    }
    Ok(a)
}

fn tarn(fs: &Fs, u: usize, op: &Op) -> i32 {
    let c = caller(u);
    let ck = fs.checked(&c);
    let set = |path: &str, sa: SetAttr| resolve(fs, &c, path, true).and_then(|a| ck.setattr(a.ino, &sa)).map(|_| ());
    let r: Result<()> = match op {
        Op::Mkdir(p, m) => parent_of(fs, &c, p).and_then(|(d, n)| ck.mkdir(d, n.as_bytes(), *m)).map(|_| ()),
        Op::Create(p, m) => parent_of(fs, &c, p).and_then(|(d, n)| ck.create(d, n.as_bytes(), *m, true)).map(|_| ()),
        Op::Unlink(p) => parent_of(fs, &c, p).and_then(|(d, n)| ck.unlink(d, n.as_bytes())),
        Op::Rmdir(p) => parent_of(fs, &c, p).and_then(|(d, n)| ck.rmdir(d, n.as_bytes())),
        Op::Rename(x, y) => parent_of(fs, &c, x).and_then(|(sd, sn)| {
            let (dd, dn) = parent_of(fs, &c, y)?;
            ck.rename(sd, sn.as_bytes(), dd, dn.as_bytes(), 0)
        }),
        Op::Chmod(p, m) => set(p, SetAttr { mode: Some(*m), ..Default::default() }),
        Op::Chown(p, o, g) => set(p, SetAttr { uid: *o, gid: *g, ..Default::default() }),
        Op::Truncate(p, n) => set(p, SetAttr { size: Some(*n), ..Default::default() }),
        Op::TouchNow(p) => set(p, SetAttr { atime: Some(TimeSet::Now), mtime: Some(TimeSet::Now), ..Default::default() }),
        Op::SetTimes(p) => set(p, SetAttr { atime: Some(TimeSet::Ns(1_000_000_000)), mtime: Some(TimeSet::Ns(2_000_000_000)), ..Default::default() }),
        Op::Link(x, y) => resolve(fs, &c, x, false).and_then(|a| {
            let (d, n) = parent_of(fs, &c, y)?;
            ck.link(a.ino, d, n.as_bytes()).map(|_| ())
        }),
        Op::Symlink(p) => parent_of(fs, &c, p).and_then(|(d, n)| ck.symlink(d, n.as_bytes(), b"nowhere")).map(|_| ()),
        Op::Read(p) => resolve(fs, &c, p, true).and_then(|a| ck.read(a.ino, 0, 16)).map(|_| ()),
        Op::Write(p) => resolve(fs, &c, p, true).and_then(|a| ck.write(a.ino, 0, b"hello")).map(|_| ()),
        Op::SetXattr(p, n) => resolve(fs, &c, p, false).and_then(|a| ck.setxattr(a.ino, n.as_bytes(), b"v", 0)),
        Op::GetXattr(p, n) => resolve(fs, &c, p, false).and_then(|a| ck.getxattr(a.ino, n.as_bytes())).map(|_| ()),
    };
    match r {
        Ok(()) => 0,
        Err(e) => e.errno(),
    }
}

/// (mode, uid, gid, size of a regular file) of `path`, or None.
fn kernel_stat(root: &Path, path: &str) -> Option<(u32, u32, u32, u64)> {
    let m = std::fs::symlink_metadata(root.join(path)).ok()?;
    let size = if m.file_type().is_file() { m.size() } else { 0 };
    Some((m.mode(), m.uid(), m.gid(), size))
}

fn tarn_stat(fs: &Fs, path: &str) -> Option<(u32, u32, u32, u64)> {
    let a = resolve(fs, &Caller::root(), path, false).ok()?;
    let size = if a.kind == FileKind::File { a.size } else { 0 };
    Some((a.kind.mode_bits() | a.perm, a.uid, a.gid, size))
}

fn random_op(rng: &mut impl Rng, paths: &[String]) -> Op {
    const MODES: [u32; 14] = [0o755, 0o700, 0o777, 0o644, 0o600, 0o2775, 0o4755, 0o1777, 0o2755, 0o6777, 0o000, 0o770, 0o2770, 0o2710];
    const IDS: [Option<u32>; 6] = [None, Some(0), Some(1000), Some(1001), Some(2000), Some(1002)];
    const XATTRS: [&str; 3] = ["user.x", "trusted.x", "security.x"];
    let mut p = || paths[rng.gen_range(0..paths.len())].clone();
    let (a, b) = (p(), p());
    match rng.gen_range(0..17) {
        0 | 1 => Op::Mkdir(a, MODES[rng.gen_range(0..MODES.len())]),
        2 | 3 => Op::Create(a, MODES[rng.gen_range(0..MODES.len())]),
        4 => Op::Unlink(a),
        5 => Op::Rmdir(a),
        6 => Op::Rename(a, b),
        7 => Op::Chmod(a, MODES[rng.gen_range(0..MODES.len())]),
        // chown(-1, -1) is no change of owner to NFS: not generated.
        8 => match (IDS[rng.gen_range(0..IDS.len())], IDS[rng.gen_range(0..IDS.len())]) {
            (None, None) => Op::Chown(a, None, Some(2000)),
            (o, g) => Op::Chown(a, o, g),
        },
        9 => Op::Truncate(a, rng.gen_range(0..3)),
        10 => Op::TouchNow(a),
        11 => Op::SetTimes(a),
        12 => Op::Link(a, b),
        13 => Op::Symlink(a),
        14 => Op::Read(a),
        15 => Op::Write(a),
        _ => {
            let n = XATTRS[rng.gen_range(0..XATTRS.len())];
            if rng.gen_bool(0.5) { Op::SetXattr(a, n) } else { Op::GetXattr(a, n) }
        }
    }
}

#[test]
fn checked_operations_give_linux_errnos() {
    let run = tarn_testkit::seeded!(1500);
    let tmp = Tmpfs::new("diff");
    let fs = support::single_fs("faccess");
    // Top directories of every kind, made by root in both worlds.
    let tops: [(&str, u32, u32, u32); 6] = [("pub", 0o777, 0, 0), ("sticky", 0o1777, 0, 0), ("sgid", 0o2775, 1000, 2000), ("priv", 0o700, 1000, 1000), ("grp", 0o770, 1001, 2000), ("ro", 0o555, 1002, 2000)];
    let mut setup = Vec::new();
    for (name, mode, uid, gid) in tops {
        setup.push((0, Op::Mkdir(name.into(), 0o755)));
        setup.push((0, Op::Chown(name.into(), Some(uid), Some(gid))));
        setup.push((0, Op::Chmod(name.into(), mode)));
    }
    let mut paths = Vec::new();
    for (t, ..) in tops {
        for n in ["a", "b", "c"] {
            paths.push(format!("{t}/{n}"));
            paths.push(format!("{t}/a/{n}"));
        }
    }
    let mut rng = run.rng(0);
    let steps: Vec<(usize, Op)> = setup.into_iter().chain((0..run.count).map(|_| (rng.gen_range(0..USERS.len()), random_op(&mut rng, &paths)))).collect();
    let mut errnos = std::collections::BTreeMap::new();
    for (i, (u, op)) in steps.iter().enumerate() {
        let want = kernel(&tmp.0, *u, op);
        *errnos.entry(want).or_insert(0u64) += 1;
        let got = tarn(&fs, *u, op);
        let what = format!("step {i}: {op:?} as uid {} gid {} groups {:?}", USERS[*u].0, USERS[*u].1, USERS[*u].2);
        assert_eq!(got, want, "{what}: tarn errno {got}, Linux {want}\nreproduce: {}", run.reproduce_command());
        let touched: Vec<&String> = match op {
            Op::Rename(a, b) | Op::Link(a, b) => vec![a, b],
            Op::Mkdir(a, _) | Op::Create(a, _) | Op::Unlink(a) | Op::Rmdir(a) | Op::Chmod(a, _) | Op::Chown(a, ..) | Op::Truncate(a, _) => vec![a],
            Op::TouchNow(a) | Op::SetTimes(a) | Op::Symlink(a) | Op::Read(a) | Op::Write(a) | Op::SetXattr(a, _) | Op::GetXattr(a, _) => vec![a],
        };
        for p in touched {
            let (k, t) = (kernel_stat(&tmp.0, p), tarn_stat(&fs, p));
            assert_eq!(t, k, "{what}: {p} is (mode, uid, gid, size) {t:?} on tarn, {k:?} on Linux\nreproduce: {}", run.reproduce_command());
        }
    }
    // The run must have exercised the rules, not only one answer.
    println!("errno counts: {errnos:?}");
    if run.count >= 500 {
        for e in [0, libc::EACCES, libc::EPERM, libc::ENOENT, libc::EEXIST] {
            assert!(errnos.get(&e).is_some_and(|&n| n >= 5), "errno {e} seen too rarely: {errnos:?}");
        }
    }
}

fn user(uid: u32, gid: u32, groups: &[u32]) -> Caller {
    Caller { uid, gid, groups: groups.to_vec() }
}

#[test]
fn sticky_directories_keep_others_entries() {
    let fs = support::single_fs("fsticky");
    let root = fs.checked(&Caller::root());
    let tmp = root.mkdir(fs.root_ino(), b"tmp", 0o1777).unwrap();
    let (alice, bob, owner) = (user(1000, 1000, &[]), user(1001, 1001, &[]), user(1002, 1002, &[]));
    root.setattr(tmp.ino, &SetAttr { uid: Some(1002), ..Default::default() }).unwrap();
    let a = fs.checked(&alice).create(tmp.ino, b"a", 0o666, true).unwrap().0;
    assert_eq!((a.uid, a.gid), (1000, 1000));
    let e = fs.checked(&bob).unlink(tmp.ino, b"a").unwrap_err();
    assert_eq!(e.errno(), libc::EPERM, "bob may not remove alice's file");
    let e = fs.checked(&bob).rename(tmp.ino, b"a", tmp.ino, b"b", 0).unwrap_err();
    assert_eq!(e.errno(), libc::EPERM);
    fs.checked(&bob).create(tmp.ino, b"b", 0o666, true).unwrap();
    let e = fs.checked(&alice).rename(tmp.ino, b"a", tmp.ino, b"b", 0).unwrap_err();
    assert_eq!(e.errno(), libc::EPERM, "nor replace bob's");
    fs.checked(&owner).unlink(tmp.ino, b"b").unwrap(); // the directory's owner may
    fs.checked(&alice).unlink(tmp.ino, b"a").unwrap(); // and the file's
}

#[test]
fn setgid_directories_give_their_group() {
    let fs = support::single_fs("fsetgid");
    let root = fs.checked(&Caller::root());
    let d = root.mkdir(fs.root_ino(), b"d", 0o777).unwrap();
    root.setattr(d.ino, &SetAttr { gid: Some(500), mode: Some(0o2777), ..Default::default() }).unwrap();
    let outsider = user(1000, 1000, &[]);
    let sub = fs.checked(&outsider).mkdir(d.ino, b"sub", 0o755).unwrap();
    assert_eq!((sub.gid, sub.perm), (500, 0o2755), "directories inherit group and set-group-ID");
    let f = fs.checked(&outsider).create(d.ino, b"f", 0o2755, true).unwrap().0;
    assert_eq!((f.gid, f.perm), (500, 0o755), "set-group-ID dropped: not in group 500");
    let member = user(1001, 1001, &[500]);
    let g = fs.checked(&member).create(d.ino, b"g", 0o2755, true).unwrap().0;
    assert_eq!((g.gid, g.perm), (500, 0o2755), "a member keeps it");
}

#[test]
fn chmod_and_chown_rules() {
    let fs = support::single_fs("fchown");
    let root = fs.checked(&Caller::root());
    let d = root.mkdir(fs.root_ino(), b"d", 0o777).unwrap();
    let alice = user(1000, 1000, &[2000]);
    let bob = user(1001, 1001, &[]);
    let f = fs.checked(&alice).create(d.ino, b"f", 0o644, true).unwrap().0;
    let a = fs.checked(&alice);
    let b = fs.checked(&bob);
    let chmod = |c: &Checked, m| c.setattr(f.ino, &SetAttr { mode: Some(m), ..Default::default() });
    assert_eq!(chmod(&b, 0o777).unwrap_err().errno(), libc::EPERM, "chmod by a non-owner");
    assert_eq!(chmod(&a, 0o6755).unwrap().perm, 0o6755);
    // chgrp to a supplementary group: allowed, and the set-ID bits go.
    let g = a.setattr(f.ino, &SetAttr { gid: Some(2000), ..Default::default() }).unwrap();
    assert_eq!((g.gid, g.perm), (2000, 0o755));
    assert_eq!(a.setattr(f.ino, &SetAttr { gid: Some(3000), ..Default::default() }).unwrap_err().errno(), libc::EPERM);
    assert_eq!(a.setattr(f.ino, &SetAttr { uid: Some(1001), ..Default::default() }).unwrap_err().errno(), libc::EPERM);
    // chmod g+s by the owner, now outside the file's group: the bit is dropped.
    root.setattr(f.ino, &SetAttr { gid: Some(4000), ..Default::default() }).unwrap();
    assert_eq!(chmod(&a, 0o2755).unwrap().perm, 0o755);
    // Times: explicit by the owner only; "now" by a writer too.
    chmod(&a, 0o666).unwrap();
    let now = SetAttr { atime: Some(TimeSet::Now), mtime: Some(TimeSet::Now), ..Default::default() };
    b.setattr(f.ino, &now).unwrap();
    let set = SetAttr { mtime: Some(TimeSet::Ns(5)), ..Default::default() };
    assert_eq!(b.setattr(f.ino, &set).unwrap_err().errno(), libc::EPERM);
    chmod(&a, 0o644).unwrap();
    assert_eq!(b.setattr(f.ino, &now).unwrap_err().errno(), libc::EACCES);
    assert_eq!(b.setattr(f.ino, &SetAttr { size: Some(0), ..Default::default() }).unwrap_err().errno(), libc::EACCES);
    assert_eq!(b.write(f.ino, 0, b"x").unwrap_err().errno(), libc::EACCES);
    assert_eq!(b.read(f.ino, 0, 1).unwrap(), b"");
}

#[test]
fn supplementary_groups_count() {
    let fs = support::single_fs("fgroups");
    let root = fs.checked(&Caller::root());
    let d = root.mkdir(fs.root_ino(), b"d", 0o770).unwrap();
    root.setattr(d.ino, &SetAttr { gid: Some(777), ..Default::default() }).unwrap();
    let member = user(1000, 1000, &[5, 777]);
    let outsider = user(1001, 1001, &[5]);
    fs.checked(&member).create(d.ino, b"f", 0o600, true).unwrap();
    assert_eq!(fs.checked(&outsider).lookup(d.ino, b"f").unwrap_err().errno(), libc::EACCES);
    assert_eq!(fs.checked(&outsider).create(d.ino, b"g", 0o600, true).unwrap_err().errno(), libc::EACCES);
    let attr = fs.getattr(d.ino).unwrap();
    assert_eq!(fs.access_mask(&attr, &member), MAY_READ | MAY_WRITE | MAY_EXEC);
    assert_eq!(fs.access_mask(&attr, &outsider), 0);
    assert!(fs.access(d.ino, &member, MAY_EXEC).is_ok());
    // Root: everything, but execute only where some x bit is set.
    let f = fs.checked(&member).lookup(d.ino, b"f").unwrap();
    assert_eq!(fs.access_mask(&f, &Caller::root()), MAY_READ | MAY_WRITE);
    // Devices need root; fifos do not.
    let m = fs.checked(&member);
    assert_eq!(m.mknod(d.ino, b"dev", libc::S_IFCHR | 0o600, 0x0101).unwrap_err().errno(), libc::EPERM);
    m.mknod(d.ino, b"fifo", libc::S_IFIFO | 0o600, 0).unwrap();
    // Checked operations take no references; a vanished inode is stale.
    assert_eq!(fs.references(f.ino), 0);
    m.unlink(d.ino, b"f").unwrap();
    assert_eq!(m.getattr(f.ino).unwrap_err().errno(), libc::ESTALE);
}
