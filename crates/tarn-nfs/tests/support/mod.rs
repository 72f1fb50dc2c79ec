//! What the tarn-nfs tests share: a file system on a memory pool, a
//! server exporting it on 127.0.0.1, and nfs3_client connections from a
//! chosen source address with a chosen AUTH_SYS identity.
#![allow(dead_code)]

#[path = "../../../tarn-fs/tests/support/mod.rs"]
pub mod fs_support;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use nfs3_client::nfs3_types::mount::dirpath;
use nfs3_client::nfs3_types::nfs3::*;
use nfs3_client::nfs3_types::rpc::{auth_unix, opaque_auth};
use nfs3_client::nfs3_types::xdr_codec::Opaque;
use nfs3_client::tokio::TokioIo;
use nfs3_client::{MountClient, MountError, Nfs3Client};
use tarn_fs::{Fs, SnapshotSource};
use tarn_nfs::{Export, NfsServer};
use tokio::net::{TcpSocket, TcpStream};

pub type Io = TokioIo<TcpStream>;

pub const PATH: &str = "/tank/data";

pub fn export(fs: &Arc<Fs>, rules: &str, snapshots: Option<Arc<dyn SnapshotSource>>) -> Export {
    Export {
        path: PATH.into(),
        mountpoint: Some("/mnt/data".into()),
        fs: fs.clone(),
        pool_guid: fs.pool().guid(),
        objset: fs.objset().id().0,
        rules: tarn_share::nfs::parse(rules).expect("rules parse").expect("rules on"),
        snapshots,
    }
}

pub fn server(fs: &Arc<Fs>, rules: &str, seed: u64) -> NfsServer {
    let s = NfsServer::start("127.0.0.1:0".parse().unwrap(), seed).expect("start server");
    s.set_exports(vec![export(fs, rules, None)]);
    s
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

pub fn auth(uid: u32, gid: u32, groups: Vec<u32>) -> opaque_auth<'static> {
    opaque_auth::auth_unix(&auth_unix { stamp: 1, machinename: Opaque::borrowed(b"test"), uid, gid, gids: groups })
}

pub async fn tcp_from(src: IpAddr, addr: SocketAddr) -> TcpStream {
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::new(src, 0)).unwrap();
    sock.connect(addr).await.unwrap()
}

pub async fn nfs_client(addr: SocketAddr, src: &str, uid: u32, gid: u32) -> Nfs3Client<Io> {
    let s = tcp_from(src.parse().unwrap(), addr).await;
    Nfs3Client::new_with_auth(TokioIo::new(s), auth(uid, gid, vec![]), opaque_auth::default())
}

pub async fn mount(addr: SocketAddr, src: &str, path: &str) -> Result<nfs_fh3, MountError> {
    let s = tcp_from(src.parse().unwrap(), addr).await;
    let mut m = MountClient::new_with_auth(TokioIo::new(s), auth(0, 0, vec![]), opaque_auth::default());
    let ok = m.mnt(dirpath(Opaque::owned(path.as_bytes().to_vec()))).await?;
    Ok(nfs_fh3 { data: Opaque::owned(ok.fhandle.0.to_vec()) })
}

/// A mounted client: its NFS connection and the export's root handle.
pub async fn connect(addr: SocketAddr, src: &str, uid: u32, gid: u32) -> (Nfs3Client<Io>, nfs_fh3) {
    let root = mount(addr, src, PATH).await.expect("mount");
    (nfs_client(addr, src, uid, gid).await, root)
}

pub fn dirop<'a>(dir: &nfs_fh3, name: &'a str) -> diropargs3<'a> {
    diropargs3 { dir: dir.clone(), name: filename3(Opaque::borrowed(name.as_bytes())) }
}

pub fn status<T, E>(r: &Nfs3Result<T, E>) -> nfsstat3 {
    match r {
        Nfs3Result::Ok(_) => nfsstat3::NFS3_OK,
        Nfs3Result::Err((s, _)) => *s,
    }
}

pub fn sattr_mode(mode: u32) -> sattr3 {
    sattr3 { mode: Nfs3Option::Some(mode), ..Default::default() }
}

pub async fn create(c: &mut Nfs3Client<Io>, dir: &nfs_fh3, name: &str) -> CREATE3res {
    c.create(&CREATE3args { where_: dirop(dir, name), how: createhow3::UNCHECKED(sattr_mode(0o644)) }).await.unwrap()
}

pub fn obj_fh(r: CREATE3res) -> nfs_fh3 {
    match r.unwrap().obj {
        Nfs3Option::Some(h) => h,
        Nfs3Option::None => panic!("no handle"),
    }
}

pub async fn lookup(c: &mut Nfs3Client<Io>, dir: &nfs_fh3, name: &str) -> Result<(nfs_fh3, fattr3), nfsstat3> {
    match c.lookup(&LOOKUP3args { what: dirop(dir, name) }).await.unwrap() {
        Nfs3Result::Ok(ok) => Ok((ok.object, ok.obj_attributes.unwrap())),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

pub async fn write(c: &mut Nfs3Client<Io>, fh: &nfs_fh3, offset: u64, data: &[u8], stable: stable_how) -> WRITE3res {
    c.write(&WRITE3args { file: fh.clone(), offset, count: data.len() as u32, stable, data: Opaque::owned(data.to_vec()) }).await.unwrap()
}

pub async fn read(c: &mut Nfs3Client<Io>, fh: &nfs_fh3, offset: u64, count: u32) -> Vec<u8> {
    c.read(&READ3args { file: fh.clone(), offset, count }).await.unwrap().unwrap().data.to_vec()
}

pub async fn getattr(c: &mut Nfs3Client<Io>, fh: &nfs_fh3) -> Result<fattr3, nfsstat3> {
    match c.getattr(&GETATTR3args { object: fh.clone() }).await.unwrap() {
        Nfs3Result::Ok(ok) => Ok(ok.obj_attributes),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

/// Every name of `dir` through READDIRPLUS from `cookie`, at most
/// `max_calls` calls of `maxcount` bytes: (names, last cookie, eof).
pub async fn list_plus(c: &mut Nfs3Client<Io>, dir: &nfs_fh3, mut cookie: u64, maxcount: u32, max_calls: usize) -> (Vec<String>, u64, bool) {
    let mut names = Vec::new();
    let mut verf = cookieverf3::default();
    for _ in 0..max_calls {
        let r = c
            .readdirplus(&READDIRPLUS3args { dir: dir.clone(), cookie, cookieverf: verf, dircount: maxcount, maxcount })
            .await
            .unwrap()
            .unwrap();
        verf = r.cookieverf;
        for e in r.reply.entries.0 {
            assert!(e.name_handle.is_some() && e.name_attributes.is_some(), "READDIRPLUS entry without handle/attributes");
            names.push(String::from_utf8(e.name.0.to_vec()).unwrap());
            cookie = e.cookie;
        }
        if r.reply.eof {
            return (names, cookie, true);
        }
    }
    (names, cookie, false)
}
