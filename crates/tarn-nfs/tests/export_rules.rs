//! sharenfs rules applied by client address, at MOUNT and on every call.

mod support;

use nfs3_client::nfs3_types::mount::mountstat3;
use nfs3_client::nfs3_types::nfs3::*;
use nfs3_client::MountError;
use support::*;

fn open_root(fs: &std::sync::Arc<tarn_fs::Fs>) {
    // A directory anyone may create in, so squashed users can too.
    let sa = tarn_fs::SetAttr { mode: Some(0o777), ..Default::default() };
    fs.setattr(fs.root_ino(), &sa).unwrap();
}

#[test]
fn allowed_refused_ro_rw_and_root_squash() {
    let fs = fs_support::single_fs("rules");
    open_root(&fs);
    let srv = server(&fs, "rw=@127.0.0.1/32,ro=@127.0.0.3/32", 1);
    let addr = srv.local_addr();
    rt().block_on(async {
        let (mut c, root) = connect(addr, "127.0.0.1", 0, 0).await;
        // Refused client: MNT3ERR_ACCES, and NFS3ERR_ACCES with a known handle.
        match mount(addr, "127.0.0.2", PATH).await {
            Err(MountError::Denied(mountstat3::MNT3ERR_ACCES)) => {}
            other => panic!("127.0.0.2 mounted: {other:?}"),
        }
        let mut refused = nfs_client(addr, "127.0.0.2", 0, 0).await;
        assert_eq!(getattr(&mut refused, &root).await.unwrap_err(), nfsstat3::NFS3ERR_ACCES);
        // MNT by the mountpoint works too; an unknown path is NOENT.
        assert_eq!(mount(addr, "127.0.0.1", "/mnt/data").await.unwrap(), root);
        assert!(matches!(mount(addr, "127.0.0.1", "/tank/nope").await, Err(MountError::Denied(mountstat3::MNT3ERR_NOENT))));

        // root_squash (the default): root's files belong to nobody.
        let a = create(&mut c, &root, "by-root").await.unwrap().obj_attributes.unwrap();
        assert_eq!((a.uid, a.gid), (65534, 65534));
        let mut user = nfs_client(addr, "127.0.0.1", 1000, 100).await;
        let a = create(&mut user, &root, "by-user").await.unwrap().obj_attributes.unwrap();
        assert_eq!((a.uid, a.gid), (1000, 100));

        // Read-only client: reads work, writes are ROFS.
        let (mut ro, _) = connect(addr, "127.0.0.3", 1000, 100).await;
        let (f, _) = lookup(&mut ro, &root, "by-user").await.unwrap();
        assert_eq!(getattr(&mut ro, &f).await.unwrap().uid, 1000);
        assert_eq!(status(&write(&mut ro, &f, 0, b"x", stable_how::FILE_SYNC).await), nfsstat3::NFS3ERR_ROFS);
        assert_eq!(status(&create(&mut ro, &root, "no").await), nfsstat3::NFS3ERR_ROFS);
        let acc = ro.access(&ACCESS3args { object: f.clone(), access: ACCESS3_READ | ACCESS3_MODIFY }).await.unwrap().unwrap();
        assert_eq!(acc.access, ACCESS3_READ);
    });

    // Rules change under a running server: the next call sees them.
    srv.set_exports(vec![export(&fs, "rw=@127.0.0.2/32", None)]);
    rt().block_on(async {
        assert!(matches!(mount(addr, "127.0.0.1", PATH).await, Err(MountError::Denied(mountstat3::MNT3ERR_ACCES))));
        mount(addr, "127.0.0.2", PATH).await.unwrap();
    });
}

#[test]
fn all_squash_anonuid_and_no_root_squash() {
    let fs = fs_support::single_fs("squash");
    open_root(&fs);
    let srv = server(&fs, "rw=@127.0.0.1/32,all_squash,anonuid=1234,anongid=4321", 1);
    rt().block_on(async {
        let (mut c, root) = connect(srv.local_addr(), "127.0.0.1", 1000, 100).await;
        let a = create(&mut c, &root, "f").await.unwrap().obj_attributes.unwrap();
        assert_eq!((a.uid, a.gid), (1234, 4321));
    });
    srv.set_exports(vec![export(&fs, "rw=@127.0.0.1/32,no_root_squash", None)]);
    rt().block_on(async {
        let (mut c, root) = connect(srv.local_addr(), "127.0.0.1", 0, 0).await;
        let a = create(&mut c, &root, "g").await.unwrap().obj_attributes.unwrap();
        assert_eq!((a.uid, a.gid), (0, 0));
    });
}
