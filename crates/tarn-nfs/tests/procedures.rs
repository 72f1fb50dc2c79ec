//! Every NFSv3 procedure through a real client (nfs3_client) against the
//! server on 127.0.0.1, on success and on its error paths.

mod support;

use nfs3_client::nfs3_types::nfs3::*;
use nfs3_client::nfs3_types::xdr_codec::Opaque;
use support::*;

#[test]
fn every_procedure_succeeds() {
    let fs = fs_support::single_fs("procs");
    let srv = server(&fs, "rw,no_root_squash", 1);
    let addr = srv.local_addr();
    rt().block_on(async {
        let (mut c, root) = connect(addr, "127.0.0.1", 0, 0).await;
        c.null().await.unwrap();
        let ra = getattr(&mut c, &root).await.unwrap();
        assert_eq!(ra.type_, ftype3::NF3DIR);

        // MKDIR, CREATE, WRITE (FILE_SYNC), READ
        let d = c.mkdir(&MKDIR3args { where_: dirop(&root, "d"), attributes: sattr_mode(0o750) }).await.unwrap().unwrap();
        let dfh = d.obj.unwrap();
        assert_eq!(d.obj_attributes.unwrap().mode, 0o750);
        assert!(d.dir_wcc.before.is_some() && d.dir_wcc.after.is_some(), "wcc data filled");
        let f = obj_fh(create(&mut c, &dfh, "f").await);
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
        let w = write(&mut c, &f, 0, &data, stable_how::FILE_SYNC).await.unwrap();
        assert_eq!((w.count, w.committed), (data.len() as u32, stable_how::FILE_SYNC));
        assert_eq!(read(&mut c, &f, 0, 1 << 20).await, data);
        let r = c.read(&READ3args { file: f.clone(), offset: 299_990, count: 100 }).await.unwrap().unwrap();
        assert!(r.eof && r.count == 10);

        // SETATTR (guard ok, then a wrong guard), truncate
        let a = getattr(&mut c, &f).await.unwrap();
        let sa = sattr3 { mode: Nfs3Option::Some(0o600), size: Nfs3Option::Some(1000), ..Default::default() };
        c.setattr(&SETATTR3args { object: f.clone(), new_attributes: sa.clone(), guard: Nfs3Option::Some(a.ctime) }).await.unwrap().unwrap();
        let a2 = getattr(&mut c, &f).await.unwrap();
        assert_eq!((a2.mode, a2.size), (0o600, 1000));
        let bad = nfstime3 { seconds: 1, nseconds: 0 };
        let r = c.setattr(&SETATTR3args { object: f.clone(), new_attributes: sa, guard: Nfs3Option::Some(bad) }).await.unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_NOT_SYNC);

        // LOOKUP, ACCESS
        let (lf, la) = lookup(&mut c, &dfh, "f").await.unwrap();
        assert_eq!((lf.clone(), la.fileid), (f.clone(), a.fileid));
        let acc = c.access(&ACCESS3args { object: f.clone(), access: ACCESS3_READ | ACCESS3_MODIFY }).await.unwrap().unwrap();
        assert_eq!(acc.access, ACCESS3_READ | ACCESS3_MODIFY);

        // SYMLINK, READLINK
        let s = c
            .symlink(&SYMLINK3args { where_: dirop(&dfh, "s"), symlink: symlinkdata3 { symlink_attributes: sattr3::default(), symlink_data: nfspath3(Opaque::borrowed(b"../target")) } })
            .await
            .unwrap()
            .unwrap();
        let sfh = s.obj.unwrap();
        let rl = c.readlink(&READLINK3args { symlink: sfh.clone() }).await.unwrap().unwrap();
        assert_eq!(rl.data.0.as_ref(), b"../target");

        // MKNOD: fifo, socket, char and block devices
        for (name, what, ty) in [
            ("fifo", mknoddata3::NF3FIFO(sattr_mode(0o644)), ftype3::NF3FIFO),
            ("sock", mknoddata3::NF3SOCK(sattr_mode(0o644)), ftype3::NF3SOCK),
            ("chr", mknoddata3::NF3CHR(devicedata3 { dev_attributes: sattr_mode(0o600), spec: specdata3 { specdata1: 1, specdata2: 3 } }), ftype3::NF3CHR),
            ("blk", mknoddata3::NF3BLK(devicedata3 { dev_attributes: sattr_mode(0o600), spec: specdata3 { specdata1: 8, specdata2: 300 } }), ftype3::NF3BLK),
        ] {
            let m = c.mknod(&MKNOD3args { where_: dirop(&dfh, name), what }).await.unwrap().unwrap();
            let at = m.obj_attributes.unwrap();
            assert_eq!(at.type_, ty, "{name}");
            if name == "blk" {
                assert_eq!(at.rdev, specdata3 { specdata1: 8, specdata2: 300 });
            }
        }

        // LINK
        let l = c.link(&LINK3args { file: f.clone(), link: dirop(&root, "hard") }).await.unwrap().unwrap();
        assert_eq!(l.file_attributes.unwrap().nlink, 2);

        // READDIR, READDIRPLUS
        let rd = c.readdir(&READDIR3args { dir: dfh.clone(), cookie: 0, cookieverf: cookieverf3::default(), count: 8192 }).await.unwrap().unwrap();
        let mut names: Vec<String> = rd.reply.entries.0.iter().map(|e| String::from_utf8(e.name.0.to_vec()).unwrap()).collect();
        names.sort();
        assert_eq!(names, [".", "..", "blk", "chr", "f", "fifo", "s", "sock"]);
        assert!(rd.reply.eof);
        let (mut plus, _, eof) = list_plus(&mut c, &dfh, 0, 4096, 10).await;
        plus.sort();
        assert!(eof);
        assert_eq!(plus, names);

        // RENAME, REMOVE, RMDIR
        c.rename(&RENAME3args { from: dirop(&dfh, "f"), to: dirop(&root, "g") }).await.unwrap().unwrap();
        assert_eq!(lookup(&mut c, &root, "g").await.unwrap().0, f, "the handle follows the file");
        for n in ["blk", "chr", "fifo", "s", "sock"] {
            c.remove(&REMOVE3args { object: dirop(&dfh, n) }).await.unwrap().unwrap();
        }
        c.rmdir(&RMDIR3args { object: dirop(&root, "d") }).await.unwrap().unwrap();

        // FSSTAT, FSINFO, PATHCONF, COMMIT
        let st = c.fsstat(&FSSTAT3args { fsroot: root.clone() }).await.unwrap().unwrap();
        assert!(st.tbytes > 0 && st.abytes > 0 && st.abytes <= st.tbytes);
        let fi = c.fsinfo(&FSINFO3args { fsroot: root.clone() }).await.unwrap().unwrap();
        assert_eq!((fi.rtmax, fi.wtmax), (1 << 20, 1 << 20));
        let pc = c.pathconf(&PATHCONF3args { object: root.clone() }).await.unwrap().unwrap();
        assert_eq!(pc.name_max, 255);
        let cm = c.commit(&COMMIT3args { file: f.clone(), offset: 0, count: 0 }).await.unwrap().unwrap();
        assert_eq!(cm.verf, w.verf);
    });
    drop(srv);
}

#[test]
fn error_paths() {
    let fs = fs_support::single_fs("errors");
    let srv = server(&fs, "rw,no_root_squash", 2);
    let addr = srv.local_addr();
    rt().block_on(async {
        let (mut c, root) = connect(addr, "127.0.0.1", 0, 0).await;
        assert_eq!(lookup(&mut c, &root, "missing").await.unwrap_err(), nfsstat3::NFS3ERR_NOENT);
        let long = "x".repeat(300);
        assert_eq!(lookup(&mut c, &root, &long).await.unwrap_err(), nfsstat3::NFS3ERR_NAMETOOLONG);
        let d = c.mkdir(&MKDIR3args { where_: dirop(&root, "d"), attributes: sattr_mode(0o755) }).await.unwrap().unwrap().obj.unwrap();
        let r = c.mkdir(&MKDIR3args { where_: dirop(&root, "d"), attributes: sattr_mode(0o755) }).await.unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_EXIST);
        let f = obj_fh(create(&mut c, &d, "f").await);
        let r = c.rmdir(&RMDIR3args { object: dirop(&root, "d") }).await.unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_NOTEMPTY);
        let r = c.create(&CREATE3args { where_: dirop(&d, "f"), how: createhow3::GUARDED(sattr_mode(0o644)) }).await.unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_EXIST);
        // A file as a directory, a directory as a file
        assert_eq!(lookup(&mut c, &f, "x").await.unwrap_err(), nfsstat3::NFS3ERR_NOTDIR);
        let r = c.read(&READ3args { file: d.clone(), offset: 0, count: 10 }).await.unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_ISDIR);
        let r = c.readlink(&READLINK3args { symlink: f.clone() }).await.unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_INVAL);
        let r = c.remove(&REMOVE3args { object: dirop(&root, "nothing") }).await.unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_NOENT);
        let r = c.mknod(&MKNOD3args { where_: dirop(&d, "f"), what: mknoddata3::NF3FIFO(sattr3::default()) }).await.unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_EXIST);

        // EXCLUSIVE: a retry with the same verifier succeeds with the
        // same file; another verifier is EEXIST.
        let verf = createverf3(*b"\x01\x02\x03\x04\x05\x06\x07\x08");
        let e1 = obj_fh(c.create(&CREATE3args { where_: dirop(&d, "x"), how: createhow3::EXCLUSIVE(verf) }).await.unwrap());
        let e2 = obj_fh(c.create(&CREATE3args { where_: dirop(&d, "x"), how: createhow3::EXCLUSIVE(verf) }).await.unwrap());
        assert_eq!(e1, e2);
        let r = c.create(&CREATE3args { where_: dirop(&d, "x"), how: createhow3::EXCLUSIVE(createverf3([9; 8])) }).await.unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_EXIST);

        // STALE after delete, even once the inode number is reused.
        c.remove(&REMOVE3args { object: dirop(&d, "f") }).await.unwrap().unwrap();
        assert_eq!(getattr(&mut c, &f).await.unwrap_err(), nfsstat3::NFS3ERR_STALE);
        let r = write(&mut c, &f, 0, b"x", stable_how::UNSTABLE).await;
        assert_eq!(status(&r), nfsstat3::NFS3ERR_STALE);
        for i in 0..20 {
            let h = obj_fh(create(&mut c, &d, &format!("n{i}")).await);
            assert_ne!(h, f, "a new file never gets the old handle");
        }
        assert_eq!(getattr(&mut c, &f).await.unwrap_err(), nfsstat3::NFS3ERR_STALE);

        // Another pool's guid: STALE. Garbage: BADHANDLE.
        let mut other = root.data.to_vec();
        other[4] ^= 0xff;
        let other = nfs_fh3 { data: Opaque::owned(other) };
        assert_eq!(getattr(&mut c, &other).await.unwrap_err(), nfsstat3::NFS3ERR_STALE);
        for bad in [vec![], vec![0u8; 10], vec![0xffu8; 64], { let mut v = root.data.to_vec(); v[0] = 9; v }] {
            let h = nfs_fh3 { data: Opaque::owned(bad) };
            assert_eq!(getattr(&mut c, &h).await.unwrap_err(), nfsstat3::NFS3ERR_BADHANDLE);
        }
        // A readdir cookie verifier that is not ours.
        let r = c.readdir(&READDIR3args { dir: d.clone(), cookie: 5, cookieverf: cookieverf3([7; 8]), count: 4096 }).await.unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_BAD_COOKIE);
    });
    drop(srv);
}

#[test]
fn readonly_dataset_is_erofs() {
    let (pool, _) = fs_support::mem_pool("rofs", tarn_obj::TopKind::Disk, 1, 256 << 20);
    let fs = fs_support::new_fs(&pool, tarn_fs::FsOptions { readonly: true, ..Default::default() });
    let srv = server(&fs, "rw,no_root_squash", 3);
    let addr = srv.local_addr();
    rt().block_on(async {
        let (mut c, root) = connect(addr, "127.0.0.1", 0, 0).await;
        let r = create(&mut c, &root, "f").await;
        assert_eq!(status(&r), nfsstat3::NFS3ERR_ROFS);
        let r = c.mkdir(&MKDIR3args { where_: dirop(&root, "d"), attributes: sattr3::default() }).await.unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_ROFS);
    });
}

#[test]
fn unprivileged_caller_gets_eacces() {
    let fs = fs_support::single_fs("eacces");
    let srv = server(&fs, "rw,no_root_squash", 4);
    let addr = srv.local_addr();
    rt().block_on(async {
        let (mut root_c, root) = connect(addr, "127.0.0.1", 0, 0).await;
        let private = c_mkdir(&mut root_c, &root, "private", 0o700).await;
        let f = obj_fh(create(&mut root_c, &root, "root-file").await);
        let mut user = nfs_client(addr, "127.0.0.1", 1000, 1000).await;
        // The root directory is root's 0755: no create, no remove.
        assert_eq!(status(&create(&mut user, &root, "mine").await), nfsstat3::NFS3ERR_ACCES);
        let r = user.remove(&REMOVE3args { object: dirop(&root, "root-file") }).await.unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_ACCES);
        // A 0700 directory cannot be searched or listed.
        assert_eq!(lookup(&mut user, &private, "x").await.unwrap_err(), nfsstat3::NFS3ERR_ACCES);
        let r = user.readdir(&READDIR3args { dir: private.clone(), cookie: 0, cookieverf: cookieverf3::default(), count: 4096 }).await.unwrap();
        assert_eq!(status(&r), nfsstat3::NFS3ERR_ACCES);
        // A 0644 file of root's: readable, not writable; ACCESS says so.
        assert_eq!(status(&write(&mut user, &f, 0, b"x", stable_how::FILE_SYNC).await), nfsstat3::NFS3ERR_ACCES);
        let acc = user.access(&ACCESS3args { object: f.clone(), access: ACCESS3_READ | ACCESS3_MODIFY }).await.unwrap().unwrap();
        assert_eq!(acc.access, ACCESS3_READ);
        // A user in the file's group (supplementary) may write a 0664 file.
        let sa = sattr3 { mode: Nfs3Option::Some(0o664), gid: Nfs3Option::Some(50), ..Default::default() };
        root_c.setattr(&SETATTR3args { object: f.clone(), new_attributes: sa, guard: Nfs3Option::None }).await.unwrap().unwrap();
        let s = tcp_from("127.0.0.1".parse().unwrap(), addr).await;
        let mut member = nfs3_client::Nfs3Client::new_with_auth(nfs3_client::tokio::TokioIo::new(s), auth(1000, 1000, vec![50]), Default::default());
        write(&mut member, &f, 0, b"x", stable_how::FILE_SYNC).await.unwrap();
    });
}

async fn c_mkdir(c: &mut nfs3_client::Nfs3Client<Io>, dir: &nfs_fh3, name: &str, mode: u32) -> nfs_fh3 {
    c.mkdir(&MKDIR3args { where_: dirop(dir, name), attributes: sattr_mode(mode) }).await.unwrap().unwrap().obj.unwrap()
}
