//! O_TMPFILE files on a memory-device pool: unnamed, freed by their last
//! forget or at the next mount, given a name by `link`.

use std::sync::Arc;
use tarn_dev::Device;
use tarn_fs::*;
use tarn_obj::{ImportOptions, ObjPool, ObjectId, TopKind};

mod support;

const C: Cred = Cred::ROOT;

#[test]
fn tmpfiles_are_unnamed_until_linked_and_freed_otherwise() {
    let (pool, devs) = support::mem_pool("ftmp", TopKind::Disk, 1, 256 << 20);
    let dev = devs[0].clone();
    let fs = support::new_fs(&pool, FsOptions::default());
    let osid = fs.objset().id();
    let root = fs.root_ino();
    let d = fs.mkdir(root, b"d", 0o2775, Cred { uid: 1, gid: 7 }).unwrap();
    let dir_before = fs.getattr(d.ino).unwrap();

    // Unnamed: nlink 0, no entry, the directory unchanged; readable and writable.
    let t = fs.create_tmpfile(d.ino, 0o600, Cred { uid: 5, gid: 6 }).unwrap();
    assert_eq!((t.kind, t.nlink, t.perm, t.uid, t.gid, t.size), (FileKind::File, 0, 0o600, 5, 7, 0), "setgid directory gives its group");
    fs.write(t.ino, 0, b"temporary").unwrap();
    assert_eq!(fs.read(t.ino, 0, 100).unwrap(), b"temporary");
    assert_eq!(fs.dir_entries(d.ino).unwrap(), 0);
    assert_eq!(fs.getattr(d.ino).unwrap().mtime_ns, dir_before.mtime_ns);
    // Linked: a name, nlink 1, out of the unlinked set (kept across a remount).
    let named = fs.link(t.ino, d.ino, b"named").unwrap();
    assert_eq!(named.nlink, 1);
    assert_eq!(fs.lookup(d.ino, b"named").unwrap().ino, t.ino);
    fs.forget(t.ino, 3);
    assert_eq!(fs.read(t.ino, 0, 100).unwrap(), b"temporary");

    // Not linked: the last forget frees it.
    let u = fs.create_tmpfile(d.ino, 0o644, C).unwrap();
    fs.write(u.ino, 0, &[1u8; 100_000]).unwrap();
    fs.forget(u.ino, 1);
    assert_eq!(fs.getattr(u.ino).unwrap_err().errno(), libc::ENOENT);
    assert!(fs.objset().info(ObjectId(u.ino)).is_err());

    // Bad requests: a removed directory, a file as the directory, read-only.
    let gone = fs.mkdir(root, b"gone", 0o755, C).unwrap();
    fs.rmdir(root, b"gone").unwrap();
    assert_eq!(fs.create_tmpfile(gone.ino, 0o600, C).unwrap_err().errno(), libc::ENOENT);
    assert_eq!(fs.create_tmpfile(t.ino, 0o600, C).unwrap_err().errno(), libc::ENOTDIR);
    // An unlinked file that is not a tmpfile never gets here through the
    // kernel, but a directory cannot be relinked either way.
    assert_eq!(fs.link(d.ino, root, b"dirlink").unwrap_err().errno(), libc::EPERM);

    // A tmpfile open at a power cut is freed at the next mount; a linked one stays.
    let v = fs.create_tmpfile(d.ino, 0o600, C).unwrap();
    fs.write(v.ino, 0, &[2u8; 50_000]).unwrap();
    pool.sync().unwrap();
    let image = dev.snapshot();
    let pool2 = ObjPool::import(vec![image as Arc<dyn Device>], ImportOptions { force: true, hostname: "test".into(), ..Default::default() }).unwrap();
    let os2 = pool2.open_objset(osid).unwrap();
    assert!(os2.info(ObjectId(v.ino)).is_ok(), "in the unlinked set before the mount");
    let fs2 = Fs::open(pool2.clone(), os2.clone(), FsOptions::default()).unwrap();
    assert!(os2.info(ObjectId(v.ino)).is_err(), "freed at mount");
    let n = fs2.lookup(d.ino, b"named").unwrap();
    assert_eq!((n.ino, n.nlink), (t.ino, 1));
    assert_eq!(fs2.read(t.ino, 0, 100).unwrap(), b"temporary");
    let mut ro = fs2.options();
    ro.readonly = true;
    fs2.set_options(ro);
    assert_eq!(fs2.create_tmpfile(d.ino, 0o600, C).unwrap_err().errno(), libc::EROFS);
}
