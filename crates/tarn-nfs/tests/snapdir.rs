//! `.zfs/snapshot` over NFS, on real snapshots of the pool (tarn-obj's
//! snapshot, destroy_snapshot): listings, old contents through LOOKUP,
//! READ, READLINK and READDIRPLUS, NFS3ERR_ROFS for every write-type
//! procedure inside a snapshot, handles that survive a server restart and
//! are STALE once their snapshot is destroyed (also when a new snapshot
//! takes its name), and `.zfs` listed only when the source says visible.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nfs3_client::nfs3_types::nfs3::*;
use nfs3_client::nfs3_types::xdr_codec::Opaque;
use nfs3_client::Nfs3Client;
use parking_lot::Mutex;
use support::*;
use tarn_fs::{Fs, FsOptions, SnapshotSource};
use tarn_nfs::NfsServer;
use tarn_obj::{ObjPool, ObjsetId};

/// The snapshots of one head object set, taken and destroyed here as
/// tarn-ds does (one txg each, neighbours told on destroy), opened
/// read-only as the daemon opens them.
struct PoolSnapshots {
    pool: Arc<ObjPool>,
    head: ObjsetId,
    /// (name, object set, txg taken), oldest first.
    snaps: Mutex<Vec<(String, ObjsetId, u64)>>,
    visible: AtomicBool,
}

impl PoolSnapshots {
    fn take(&self, name: &str) -> ObjsetId {
        let tx = self.pool.begin();
        let txg = tx.txg();
        let id = self.pool.snapshot(&tx, self.head).unwrap();
        drop(tx);
        self.pool.sync().unwrap();
        self.snaps.lock().push((name.to_string(), id, txg));
        id
    }

    fn destroy(&self, name: &str) {
        let mut snaps = self.snaps.lock();
        let i = snaps.iter().position(|(n, _, _)| n == name).expect("snapshot exists");
        let prev_txg = if i == 0 { 0 } else { snaps[i - 1].2 };
        let next = snaps.get(i + 1).map_or(self.head, |s| s.1);
        {
            let tx = self.pool.begin();
            self.pool.destroy_snapshot(&tx, snaps[i].1, prev_txg, next).unwrap();
        }
        self.pool.sync().unwrap();
        snaps.remove(i);
    }
}

impl SnapshotSource for PoolSnapshots {
    fn names(&self) -> Vec<String> {
        self.snaps.lock().iter().map(|s| s.0.clone()).collect()
    }

    fn open(&self, name: &str) -> Option<Arc<Fs>> {
        let id = self.snaps.lock().iter().find(|s| s.0 == name)?.1;
        let os = self.pool.open_objset(id).ok()?;
        os.mark_readonly();
        Fs::open(self.pool.clone(), os, FsOptions { readonly: true, atime: false, ..FsOptions::default() }).ok()
    }

    fn visible(&self) -> bool {
        self.visible.load(Ordering::Relaxed)
    }
}

fn serve(fs: &Arc<Fs>, snaps: &Arc<PoolSnapshots>, seed: u64) -> NfsServer {
    let s = NfsServer::start("127.0.0.1:0".parse().unwrap(), seed).expect("start server");
    s.set_exports(vec![export(fs, "rw,no_root_squash", Some(snaps.clone() as Arc<dyn SnapshotSource>))]);
    s
}

async fn names_of(c: &mut Nfs3Client<Io>, dir: &nfs_fh3) -> Vec<String> {
    let rd = c.readdir(&READDIR3args { dir: dir.clone(), cookie: 0, cookieverf: cookieverf3::default(), count: 8192 }).await.unwrap().unwrap();
    assert!(rd.reply.eof);
    rd.reply.entries.0.iter().map(|e| String::from_utf8(e.name.0.to_vec()).unwrap()).collect()
}

async fn put(c: &mut Nfs3Client<Io>, dir: &nfs_fh3, name: &str, data: &[u8]) -> nfs_fh3 {
    let f = obj_fh(create(c, dir, name).await);
    let w = write(c, &f, 0, data, stable_how::FILE_SYNC).await.unwrap();
    assert_eq!(w.count as usize, data.len());
    f
}

async fn read_all(c: &mut Nfs3Client<Io>, fh: &nfs_fh3) -> Vec<u8> {
    read(c, fh, 0, 1 << 20).await
}

/// The handle of the path `parts` under `dir`.
async fn walk(c: &mut Nfs3Client<Io>, dir: &nfs_fh3, parts: &[&str]) -> Result<nfs_fh3, nfsstat3> {
    let mut h = dir.clone();
    for p in parts {
        h = lookup(c, &h, p).await?.0;
    }
    Ok(h)
}

/// The contents of the file at path `parts` under `dir`.
async fn cat(c: &mut Nfs3Client<Io>, dir: &nfs_fh3, parts: &[&str]) -> Vec<u8> {
    let f = walk(c, dir, parts).await.unwrap_or_else(|s| panic!("{parts:?}: {s:?}"));
    read_all(c, &f).await
}

/// Every write-type procedure with its target in snapshot directory `sdir`
/// (file `sfile` in it, named `fname`): NFS3ERR_ROFS, nothing changed.
async fn all_writes_refused(c: &mut Nfs3Client<Io>, sdir: &nfs_fh3, sfile: &nfs_fh3, fname: &str, head_dir: &nfs_fh3, head_file: &nfs_fh3) {
    let rofs = nfsstat3::NFS3ERR_ROFS;
    let before = read_all(c, sfile).await;
    let r = create(c, sdir, "new-in-snapshot").await;
    assert_eq!(status(&r), rofs, "CREATE");
    let r = c.create(&CREATE3args { where_: dirop(sdir, "x"), how: createhow3::EXCLUSIVE(createverf3([1; 8])) }).await.unwrap();
    assert_eq!(status(&r), rofs, "CREATE EXCLUSIVE");
    for stable in [stable_how::UNSTABLE, stable_how::DATA_SYNC, stable_how::FILE_SYNC] {
        assert_eq!(status(&write(c, sfile, 0, b"overwrite", stable).await), rofs, "WRITE {stable:?}");
    }
    for sa in [sattr_mode(0o777), sattr3 { size: Nfs3Option::Some(0), ..Default::default() }, sattr3 { uid: Nfs3Option::Some(5), ..Default::default() }] {
        let r = c.setattr(&SETATTR3args { object: sfile.clone(), new_attributes: sa, guard: Nfs3Option::None }).await.unwrap();
        assert_eq!(status(&r), rofs, "SETATTR");
    }
    let r = c.setattr(&SETATTR3args { object: sdir.clone(), new_attributes: sattr_mode(0o700), guard: Nfs3Option::None }).await.unwrap();
    assert_eq!(status(&r), rofs, "SETATTR of a directory");
    let r = c.remove(&REMOVE3args { object: dirop(sdir, fname) }).await.unwrap();
    assert_eq!(status(&r), rofs, "REMOVE");
    let r = c.rmdir(&RMDIR3args { object: dirop(sdir, "d") }).await.unwrap();
    assert_eq!(status(&r), rofs, "RMDIR");
    let r = c.rename(&RENAME3args { from: dirop(sdir, fname), to: dirop(sdir, "renamed") }).await.unwrap();
    assert_eq!(status(&r), rofs, "RENAME within the snapshot");
    let r = c.rename(&RENAME3args { from: dirop(sdir, fname), to: dirop(head_dir, "renamed") }).await.unwrap();
    assert_eq!(status(&r), rofs, "RENAME out of the snapshot");
    let r = c.rename(&RENAME3args { from: dirop(head_dir, "kept"), to: dirop(sdir, "renamed") }).await.unwrap();
    assert_eq!(status(&r), rofs, "RENAME into the snapshot");
    let r = c.mkdir(&MKDIR3args { where_: dirop(sdir, "newdir"), attributes: sattr_mode(0o755) }).await.unwrap();
    assert_eq!(status(&r), rofs, "MKDIR");
    let r = c.link(&LINK3args { file: sfile.clone(), link: dirop(sdir, "hard") }).await.unwrap();
    assert_eq!(status(&r), rofs, "LINK within the snapshot");
    let r = c.link(&LINK3args { file: head_file.clone(), link: dirop(sdir, "hard") }).await.unwrap();
    assert_eq!(status(&r), rofs, "LINK of a dataset file into the snapshot");
    let r = c.link(&LINK3args { file: sfile.clone(), link: dirop(head_dir, "hard") }).await.unwrap();
    assert_eq!(status(&r), nfsstat3::NFS3ERR_XDEV, "LINK of a snapshot file into the dataset");
    let r = c
        .symlink(&SYMLINK3args { where_: dirop(sdir, "sym"), symlink: symlinkdata3 { symlink_attributes: sattr3::default(), symlink_data: nfspath3(Opaque::borrowed(b"x")) } })
        .await
        .unwrap();
    assert_eq!(status(&r), rofs, "SYMLINK");
    let r = c.mknod(&MKNOD3args { where_: dirop(sdir, "fifo"), what: mknoddata3::NF3FIFO(sattr3::default()) }).await.unwrap();
    assert_eq!(status(&r), rofs, "MKNOD");
    // ACCESS grants no change; COMMIT has nothing to do.
    let acc = c.access(&ACCESS3args { object: sfile.clone(), access: ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND }).await.unwrap().unwrap();
    assert_eq!(acc.access, ACCESS3_READ);
    c.commit(&COMMIT3args { file: sfile.clone(), offset: 0, count: 0 }).await.unwrap().unwrap();
    assert_eq!(read_all(c, sfile).await, before, "the snapshot did not change");
    assert_eq!(lookup(c, sdir, "renamed").await.unwrap_err(), nfsstat3::NFS3ERR_NOENT);
    assert!(lookup(c, head_dir, "hard").await.is_err(), "no link made in the dataset");
}

#[test]
fn snapshots_browsable_read_only_and_stale_once_destroyed() {
    let (pool, _devs) = fs_support::mem_pool("snapdir", tarn_obj::TopKind::Disk, 1, 256 << 20);
    let fs = fs_support::new_fs(&pool, FsOptions::default());
    let snaps = Arc::new(PoolSnapshots { pool: pool.clone(), head: fs.objset().id(), snaps: Mutex::new(Vec::new()), visible: AtomicBool::new(false) });
    let srv = serve(&fs, &snaps, 1);
    let addr = srv.local_addr();
    let big: Vec<u8> = (0..400_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();

    // The dataset as s1 sees it.
    rt().block_on(async {
        let (mut c, root) = connect(addr, "127.0.0.1", 0, 0).await;
        let d = c.mkdir(&MKDIR3args { where_: dirop(&root, "d"), attributes: sattr_mode(0o755) }).await.unwrap().unwrap().obj.unwrap();
        put(&mut c, &d, "a", b"old contents of a").await;
        put(&mut c, &root, "keep", b"keep v1").await;
        put(&mut c, &root, "gone", &big).await;
        c.symlink(&SYMLINK3args { where_: dirop(&root, "sl"), symlink: symlinkdata3 { symlink_attributes: sattr3::default(), symlink_data: nfspath3(Opaque::borrowed(b"d/a")) } })
            .await
            .unwrap()
            .unwrap();
    });
    snaps.take("s1");
    // Changed after s1; s2 sees this.
    rt().block_on(async {
        let (mut c, root) = connect(addr, "127.0.0.1", 0, 0).await;
        let a = walk(&mut c, &root, &["d", "a"]).await.unwrap();
        c.setattr(&SETATTR3args { object: a.clone(), new_attributes: sattr3 { size: Nfs3Option::Some(0), ..Default::default() }, guard: Nfs3Option::None })
            .await
            .unwrap()
            .unwrap();
        write(&mut c, &a, 0, b"NEW contents of a, longer than before", stable_how::FILE_SYNC).await.unwrap();
        c.remove(&REMOVE3args { object: dirop(&root, "gone") }).await.unwrap().unwrap();
        c.rename(&RENAME3args { from: dirop(&root, "keep"), to: dirop(&root, "kept") }).await.unwrap().unwrap();
        put(&mut c, &root, "fresh", b"made after s1").await;
    });
    snaps.take("s2");
    // And the dataset moves on again.
    rt().block_on(async {
        let (mut c, root) = connect(addr, "127.0.0.1", 0, 0).await;
        put(&mut c, &root, "latest", b"after s2").await;
        c.remove(&REMOVE3args { object: dirop(&root, "fresh") }).await.unwrap().unwrap();
    });

    // Handles kept for after the restart: (s1 root, s1's d/a, s1's gone, .zfs/snapshot).
    let kept = rt().block_on(async {
        let (mut c, root) = connect(addr, "127.0.0.1", 0, 0).await;
        // Hidden: not listed, but LOOKUP finds it (as snapdir=hidden in ZFS).
        assert!(!names_of(&mut c, &root).await.contains(&".zfs".to_string()));
        let (plus, _, eof) = list_plus(&mut c, &root, 0, 8192, 10).await;
        assert!(eof && !plus.contains(&".zfs".to_string()));
        let (ctl, ctl_attr) = lookup(&mut c, &root, ".zfs").await.unwrap();
        assert_eq!(ctl_attr.type_, ftype3::NF3DIR);
        snaps.visible.store(true, Ordering::Relaxed);
        let listed = names_of(&mut c, &root).await;
        assert_eq!(listed.iter().filter(|n| *n == ".zfs").count(), 1, "visible: listed once: {listed:?}");
        let (plus, _, eof) = list_plus(&mut c, &root, 0, 8192, 10).await;
        assert!(eof && plus.contains(&".zfs".to_string()));

        let mut ctl_names = names_of(&mut c, &ctl).await;
        ctl_names.sort();
        assert_eq!(ctl_names, [".", "..", "snapshot"]);
        let (sdir, _) = lookup(&mut c, &ctl, "snapshot").await.unwrap();
        assert_eq!(names_of(&mut c, &sdir).await, [".", "..", "s1", "s2"], "snapshots, oldest first");
        let (plus, _, eof) = list_plus(&mut c, &sdir, 0, 8192, 10).await;
        assert!(eof);
        assert_eq!(plus, [".", "..", "s1", "s2"]);
        assert_eq!(lookup(&mut c, &sdir, "s3").await.unwrap_err(), nfsstat3::NFS3ERR_NOENT);
        assert_eq!(lookup(&mut c, &sdir, "..").await.unwrap().0, ctl);
        assert_eq!(lookup(&mut c, &ctl, "..").await.unwrap().0, root);

        // s1: the old contents.
        let (s1, s1_attr) = lookup(&mut c, &sdir, "s1").await.unwrap();
        assert_eq!(s1_attr.type_, ftype3::NF3DIR);
        assert_eq!(lookup(&mut c, &s1, "..").await.unwrap().0, sdir, "a snapshot's root goes up to .zfs/snapshot");
        let mut s1_names = names_of(&mut c, &s1).await;
        s1_names.sort();
        assert_eq!(s1_names, [".", "..", "d", "gone", "keep", "sl"], ".zfs is not listed inside a snapshot");
        let s1_a = walk(&mut c, &s1, &["d", "a"]).await.unwrap();
        assert_eq!(read_all(&mut c, &s1_a).await, b"old contents of a");
        let (s1_gone, gone_attr) = lookup(&mut c, &s1, "gone").await.unwrap();
        assert_eq!(gone_attr.size, big.len() as u64);
        assert_eq!(read_all(&mut c, &s1_gone).await, big);
        assert_eq!(cat(&mut c, &s1, &["keep"]).await, b"keep v1");
        assert_eq!(lookup(&mut c, &s1, "kept").await.unwrap_err(), nfsstat3::NFS3ERR_NOENT);
        assert_eq!(lookup(&mut c, &s1, "fresh").await.unwrap_err(), nfsstat3::NFS3ERR_NOENT);
        let sl = walk(&mut c, &s1, &["sl"]).await.unwrap();
        assert_eq!(c.readlink(&READLINK3args { symlink: sl }).await.unwrap().unwrap().data.0.as_ref(), b"d/a");
        // READDIRPLUS inside: handles and attributes of the old files.
        let rp = c
            .readdirplus(&READDIRPLUS3args { dir: s1.clone(), cookie: 0, cookieverf: cookieverf3::default(), dircount: 8192, maxcount: 65536 })
            .await
            .unwrap()
            .unwrap();
        assert!(rp.reply.eof);
        let e = rp.reply.entries.0.iter().find(|e| e.name.0.as_ref() == b"gone").expect("gone listed");
        assert_eq!(e.name_attributes.clone().unwrap().size, big.len() as u64);
        let h = e.name_handle.clone().unwrap();
        assert_eq!(h, s1_gone, "READDIRPLUS and LOOKUP give one handle");
        assert_eq!(read(&mut c, &h, 100_000, 1000).await, &big[100_000..101_000]);

        // s2 and the dataset itself.
        let s2 = lookup(&mut c, &sdir, "s2").await.unwrap().0;
        assert_eq!(cat(&mut c, &s2, &["d", "a"]).await, b"NEW contents of a, longer than before");
        assert_eq!(cat(&mut c, &s2, &["fresh"]).await, b"made after s1");
        assert_eq!(lookup(&mut c, &s2, "gone").await.unwrap_err(), nfsstat3::NFS3ERR_NOENT);
        assert_eq!(lookup(&mut c, &s2, "latest").await.unwrap_err(), nfsstat3::NFS3ERR_NOENT);
        let head_a = walk(&mut c, &root, &["d", "a"]).await.unwrap();
        assert_eq!(read_all(&mut c, &head_a).await, b"NEW contents of a, longer than before");
        assert_ne!(head_a, s1_a, "the snapshot's file has its own handle");
        let s1_attr_a = getattr(&mut c, &s1_a).await.unwrap();
        let head_attr_a = getattr(&mut c, &head_a).await.unwrap();
        assert_eq!(s1_attr_a.fsid, head_attr_a.fsid);
        assert_ne!(s1_attr_a.fileid, head_attr_a.fileid, "file ids differ between a snapshot and the dataset");

        // Every write-type procedure inside s1, and in .zfs itself.
        let s1_d = walk(&mut c, &s1, &["d"]).await.unwrap();
        all_writes_refused(&mut c, &s1_d, &s1_a, "a", &root, &head_a).await;
        all_writes_refused(&mut c, &s1, &s1_gone, "gone", &root, &head_a).await;
        for dir in [&ctl, &sdir] {
            assert_eq!(status(&create(&mut c, dir, "x").await), nfsstat3::NFS3ERR_ROFS);
            let r = c.mkdir(&MKDIR3args { where_: dirop(dir, "s9"), attributes: sattr_mode(0o755) }).await.unwrap();
            assert_eq!(status(&r), nfsstat3::NFS3ERR_ROFS, "MKDIR in .zfs");
            let r = c.rmdir(&RMDIR3args { object: dirop(dir, "s1") }).await.unwrap();
            assert_eq!(status(&r), nfsstat3::NFS3ERR_ROFS, "RMDIR in .zfs");
            let r = c.setattr(&SETATTR3args { object: dir.clone(), new_attributes: sattr_mode(0o777), guard: Nfs3Option::None }).await.unwrap();
            assert_eq!(status(&r), nfsstat3::NFS3ERR_ROFS, "SETATTR of .zfs");
        }
        let r = c.rename(&RENAME3args { from: dirop(&sdir, "s1"), to: dirop(&sdir, "s9") }).await.unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_ROFS, "RENAME of a snapshot");
        // The dataset itself is still writable.
        put(&mut c, &root, "still-writable", b"yes").await;
        (s1, s1_a, s1_gone, sdir, s2)
    });
    let (s1, s1_a, s1_gone, sdir, s2) = kept;
    srv.shutdown();

    // A new server (nothing opened yet): the same handles, the same data.
    let srv = serve(&fs, &snaps, 2);
    let addr = srv.local_addr();
    rt().block_on(async {
        let mut c = nfs_client(addr, "127.0.0.1", 0, 0).await;
        assert_eq!(read_all(&mut c, &s1_a).await, b"old contents of a", "a snapshot handle after a restart");
        assert_eq!(read_all(&mut c, &s1_gone).await, big);
        assert_eq!(names_of(&mut c, &sdir).await, [".", "..", "s1", "s2"]);
        let mut n = names_of(&mut c, &s1).await;
        n.sort();
        assert_eq!(n, [".", "..", "d", "gone", "keep", "sl"]);
        assert_eq!(status(&write(&mut c, &s1_a, 0, b"x", stable_how::FILE_SYNC).await), nfsstat3::NFS3ERR_ROFS);
    });

    // s1 destroyed while this server has it open: its handles are STALE,
    // never the blocks it freed; s2 is untouched.
    snaps.destroy("s1");
    let stale_checks = |c_addr: std::net::SocketAddr| {
        let (s1, s1_a, s1_gone, sdir, s2) = (s1.clone(), s1_a.clone(), s1_gone.clone(), sdir.clone(), s2.clone());
        async move {
            let mut c = nfs_client(c_addr, "127.0.0.1", 0, 0).await;
            let stale = nfsstat3::NFS3ERR_STALE;
            for h in [&s1, &s1_a, &s1_gone] {
                assert_eq!(getattr(&mut c, h).await.unwrap_err(), stale, "GETATTR of a destroyed snapshot's file");
            }
            let r = c.read(&READ3args { file: s1_gone.clone(), offset: 0, count: 4096 }).await.unwrap();
            assert_eq!(status(&r), stale, "READ");
            assert_eq!(lookup(&mut c, &s1, "gone").await.unwrap_err(), stale, "LOOKUP");
            let r = c.readdirplus(&READDIRPLUS3args { dir: s1.clone(), cookie: 0, cookieverf: cookieverf3::default(), dircount: 8192, maxcount: 8192 }).await.unwrap();
            assert_eq!(status(&r), stale, "READDIRPLUS");
            assert_eq!(status(&write(&mut c, &s1_a, 0, b"x", stable_how::FILE_SYNC).await), stale, "WRITE");
            assert_eq!(lookup(&mut c, &sdir, "s1").await.unwrap_err(), nfsstat3::NFS3ERR_NOENT);
            assert_eq!(names_of(&mut c, &sdir).await, [".", "..", "s2"]);
            assert_eq!(cat(&mut c, &s2, &["d", "a"]).await, b"NEW contents of a, longer than before");
        }
    };
    rt().block_on(stale_checks(addr));
    srv.shutdown();
    let srv = serve(&fs, &snaps, 3);
    rt().block_on(stale_checks(srv.local_addr()));

    // A new snapshot under the old name: the old handles stay STALE; the
    // name leads to the new snapshot's contents.
    let first_srv = srv;
    snaps.take("s1");
    rt().block_on(async {
        let (mut c, root) = connect(first_srv.local_addr(), "127.0.0.1", 0, 0).await;
        assert_eq!(getattr(&mut c, &s1_a).await.unwrap_err(), nfsstat3::NFS3ERR_STALE, "an old handle under a reused name");
        assert_eq!(getattr(&mut c, &s1).await.unwrap_err(), nfsstat3::NFS3ERR_STALE);
        let sdir = walk(&mut c, &root, &[".zfs", "snapshot"]).await.unwrap();
        assert_eq!(names_of(&mut c, &sdir).await, [".", "..", "s2", "s1"]);
        let a = walk(&mut c, &sdir, &["s1", "d", "a"]).await.unwrap();
        assert_ne!(a, s1_a);
        assert_eq!(read_all(&mut c, &a).await, b"NEW contents of a, longer than before");
        assert_eq!(cat(&mut c, &sdir, &["s1", "latest"]).await, b"after s2");
        assert_eq!(cat(&mut c, &sdir, &["s1", "still-writable"]).await, b"yes");
    });
    drop(first_srv);
    let report = pool.check();
    assert!(report.ok(), "pool checker after snapshots over NFS: {report:?}");
}

#[test]
fn no_snapshot_source_no_zfs_dir() {
    let fs = fs_support::single_fs("nosnap");
    let srv = server(&fs, "rw,no_root_squash", 4);
    rt().block_on(async {
        let (mut c, root) = connect(srv.local_addr(), "127.0.0.1", 0, 0).await;
        assert_eq!(lookup(&mut c, &root, ".zfs").await.unwrap_err(), nfsstat3::NFS3ERR_NOENT);
        assert!(!names_of(&mut c, &root).await.contains(&".zfs".to_string()));
        // A `.zfs` handle (kind 1) made by hand: STALE for this export.
        let mut h = root.data.to_vec();
        h[1] = 1;
        for b in &mut h[20..44] {
            *b = 0;
        }
        assert_eq!(getattr(&mut c, &nfs_fh3 { data: Opaque::owned(h) }).await.unwrap_err(), nfsstat3::NFS3ERR_STALE);
    });
}
