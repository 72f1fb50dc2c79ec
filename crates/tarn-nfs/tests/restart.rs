//! Handles and cookies outlive the server; the write verifier does not.

mod support;

use std::sync::Arc;

use nfs3_client::nfs3_types::nfs3::*;
use support::*;
use tarn_dev::Device;
use tarn_fs::{Cred, Fs, FsOptions};
use tarn_obj::{ImportOptions, ObjPool, ObjsetId};

#[test]
fn handles_survive_restart_and_reimport_verifier_changes() {
    let (pool, devs) = fs_support::mem_pool("restart", tarn_obj::TopKind::Disk, 1, 256 << 20);
    let fs = fs_support::new_fs(&pool, FsOptions::default());
    let osid = fs.objset().id();
    let srv = server(&fs, "rw,no_root_squash", 100);
    let (f, d, verf1) = rt().block_on(async {
        let (mut c, root) = connect(srv.local_addr(), "127.0.0.1", 0, 0).await;
        let d = c.mkdir(&MKDIR3args { where_: dirop(&root, "d"), attributes: sattr_mode(0o755) }).await.unwrap().unwrap().obj.unwrap();
        let f = obj_fh(create(&mut c, &d, "f").await);
        let w = write(&mut c, &f, 0, b"unstable bytes", stable_how::UNSTABLE).await.unwrap();
        assert_eq!(w.committed, stable_how::UNSTABLE);
        let cm = c.commit(&COMMIT3args { file: f.clone(), offset: 0, count: 0 }).await.unwrap().unwrap();
        assert_eq!(cm.verf, w.verf, "one verifier per server instance");
        (f, d, cm.verf)
    });
    srv.shutdown();

    // Same pool, a new server with a new seed.
    let srv = server(&fs, "rw,no_root_squash", 101);
    rt().block_on(async {
        let mut c = nfs_client(srv.local_addr(), "127.0.0.1", 0, 0).await;
        assert_eq!(read(&mut c, &f, 0, 100).await, b"unstable bytes");
        assert_eq!(lookup(&mut c, &d, "f").await.unwrap().0, f);
        let w = write(&mut c, &f, 0, b"U", stable_how::UNSTABLE).await.unwrap();
        assert_ne!(w.verf, verf1, "a restart changes the write verifier");
        let cm = c.commit(&COMMIT3args { file: f.clone(), offset: 0, count: 0 }).await.unwrap().unwrap();
        assert_eq!(cm.verf, w.verf);
    });
    srv.shutdown();
    drop(fs);

    // The pool closed and imported again (as after a power cut: only what
    // COMMIT made durable): the same handles name the same files.
    let image = devs[0].snapshot();
    pool.export().ok();
    drop(pool);
    let pool2 = ObjPool::import(vec![image as Arc<dyn Device>], ImportOptions { force: true, hostname: "test".into(), ..Default::default() }).unwrap();
    let fs2 = Fs::open(pool2.clone(), pool2.open_objset(ObjsetId(osid.0)).unwrap(), FsOptions::default()).unwrap();
    let srv = server(&fs2, "rw,no_root_squash", 102);
    rt().block_on(async {
        let mut c = nfs_client(srv.local_addr(), "127.0.0.1", 0, 0).await;
        assert_eq!(read(&mut c, &f, 0, 100).await, b"Unstable bytes", "committed data survives");
        // A removed file's handle is STALE after the re-import too.
        c.remove(&REMOVE3args { object: dirop(&d, "f") }).await.unwrap().unwrap();
        assert_eq!(getattr(&mut c, &f).await.unwrap_err(), nfsstat3::NFS3ERR_STALE);
    });
}

#[test]
fn readdirplus_100k_entries_resumed_from_a_cookie() {
    const N: usize = 100_000;
    let (pool, _) = fs_support::mem_pool("big", tarn_obj::TopKind::Disk, 1, 1 << 30);
    let fs = fs_support::new_fs(&pool, FsOptions::default());
    let root = fs.root_ino();
    let dir = fs.mkdir(root, b"big", 0o755, Cred::ROOT).unwrap();
    for i in 0..N {
        let (a, _) = fs.create(dir.ino, format!("file-{i:06}").as_bytes(), 0o644, Cred::ROOT, true).unwrap();
        fs.forget(a.ino, 1);
    }
    let srv = server(&fs, "rw,no_root_squash", 7);
    let (first, cookie) = rt().block_on(async {
        let (mut c, root) = connect(srv.local_addr(), "127.0.0.1", 0, 0).await;
        let (big, _) = lookup(&mut c, &root, "big").await.unwrap();
        // About half the directory, then the client goes away.
        let (names, cookie, eof) = list_plus(&mut c, &big, 0, 32 * 1024, 250).await;
        assert!(!eof && names.len() > 10_000 && names.len() < N, "stopped mid-way: {}", names.len());
        (names, cookie)
    });
    srv.shutdown();
    let srv = server(&fs, "rw,no_root_squash", 8);
    let rest = rt().block_on(async {
        let (mut c, root) = connect(srv.local_addr(), "127.0.0.1", 0, 0).await;
        let (big, _) = lookup(&mut c, &root, "big").await.unwrap();
        let (names, _, eof) = list_plus(&mut c, &big, cookie, 64 * 1024, 100_000).await;
        assert!(eof);
        names
    });
    let mut all: Vec<String> = first.into_iter().chain(rest).filter(|n| n != "." && n != "..").collect();
    assert_eq!(all.len(), N, "every entry exactly once");
    all.sort();
    all.dedup();
    assert_eq!(all.len(), N, "no entry twice");
}
