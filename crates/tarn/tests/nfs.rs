//! NFS through a real daemon: `[nfs] listen` on a free high port, a real
//! NFSv3 client (the `nfs3_client` crate) speaking MOUNT and NFS to it.
//! Exports follow the datasets (sharenfs, create/destroy, mount/unmount,
//! share/unshare, pool export/import), handles outlive a daemon restart
//! while the write verifier does not, export rules apply by source
//! address, and a killed daemon keeps every FILE_SYNC- or
//! COMMIT-acknowledged byte.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{path_str, wait_mounted, Harness};
use nfs3_client::nfs3_types::mount::dirpath;
use nfs3_client::nfs3_types::nfs3::*;
use nfs3_client::nfs3_types::rpc::{auth_unix, opaque_auth};
use nfs3_client::nfs3_types::xdr_codec::Opaque;
use nfs3_client::{MountClient, MountError, Nfs3Client};
use rand::Rng;
use tokio::net::{TcpSocket, TcpStream};

type Client = Nfs3Client<Io>;

/// A TCP stream for nfs3_client whose reads fail at end of stream: the
/// crate's `async_read_exact` (0.9.1) retries a 0-byte read forever, so a
/// client of a daemon that died would spin instead of failing.
struct Io(TcpStream);

impl nfs3_client::io::AsyncRead for Io {
    async fn async_read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = tokio::io::AsyncReadExt::read(&mut self.0, buf).await?;
        if n == 0 && !buf.is_empty() {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(n)
    }
}

impl nfs3_client::io::AsyncWrite for Io {
    async fn async_write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        tokio::io::AsyncWriteExt::write(&mut self.0, buf).await
    }
}

/// A free TCP port on 127.0.0.1 (bound then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// A daemon with `[nfs] listen = "127.0.0.1:PORT"` and a mirrored pool
/// `tank` mounted under the harness directory.
fn nfs_harness(port: u16) -> Harness {
    let harness = Harness::start_with_config(Some(&move |_dir: &Path| format!("[nfs]\nlisten = \"127.0.0.1:{port}\"\n")));
    harness.vdev_files("v", 2, common::VDEV_SIZE_BYTES);
    let v = harness.dir.join("v");
    harness.create_pool("tank", &["mirror".into(), path_str(&v.join("d0")), path_str(&v.join("d1"))]);
    harness
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

fn auth(uid: u32, gid: u32) -> opaque_auth<'static> {
    opaque_auth::auth_unix(&auth_unix { stamp: 1, machinename: Opaque::borrowed(b"test"), uid, gid, gids: vec![] })
}

/// A TCP connection to the daemon's NFS port from source address `src`.
async fn tcp_from(src: &str, port: u16) -> TcpStream {
    let sock = TcpSocket::new_v4().expect("socket");
    sock.bind(SocketAddr::new(src.parse::<IpAddr>().expect("address"), 0)).expect("bind source address");
    sock.connect(SocketAddr::from(([127, 0, 0, 1], port))).await.expect("connect to the daemon's NFS port")
}

async fn client(port: u16, src: &str, uid: u32, gid: u32) -> Client {
    Nfs3Client::new_with_auth(Io(tcp_from(src, port).await), auth(uid, gid), opaque_auth::default())
}

/// MNT `path` from `src`: the export's root handle or the MOUNT error.
async fn mount(port: u16, src: &str, path: &str) -> Result<nfs_fh3, MountError> {
    let io = Io(tcp_from(src, port).await);
    let mut m = MountClient::new_with_auth(io, auth(0, 0), opaque_auth::default());
    let ok = m.mnt(dirpath(Opaque::owned(path.as_bytes().to_vec()))).await?;
    Ok(nfs_fh3 { data: Opaque::owned(ok.fhandle.0.to_vec()) })
}

/// MNT `path` from `src`, which must be refused: the MOUNT status's name.
async fn mount_refused(port: u16, src: &str, path: &str) -> String {
    match mount(port, src, path).await {
        Err(MountError::Denied(status)) => format!("{status:?}"),
        other => panic!("MNT {path} from {src}: expected a refusal, got {other:?}"),
    }
}

fn dirop<'a>(dir: &nfs_fh3, name: &'a str) -> diropargs3<'a> {
    diropargs3 { dir: dir.clone(), name: filename3(Opaque::borrowed(name.as_bytes())) }
}

fn status<T, E>(r: &Nfs3Result<T, E>) -> nfsstat3 {
    match r {
        Nfs3Result::Ok(_) => nfsstat3::NFS3_OK,
        Nfs3Result::Err((s, _)) => *s,
    }
}

async fn create(c: &mut Client, dir: &nfs_fh3, name: &str) -> CREATE3res {
    let how = createhow3::UNCHECKED(sattr3 { mode: Nfs3Option::Some(0o644), ..Default::default() });
    c.create(&CREATE3args { where_: dirop(dir, name), how }).await.expect("CREATE call")
}

fn created(r: CREATE3res) -> (nfs_fh3, fattr3) {
    let ok = r.unwrap();
    match (ok.obj, ok.obj_attributes) {
        (Nfs3Option::Some(h), Nfs3Option::Some(a)) => (h, a),
        _ => panic!("CREATE without handle or attributes"),
    }
}

async fn write(c: &mut Client, fh: &nfs_fh3, offset: u64, data: &[u8], stable: stable_how) -> WRITE3res {
    let args = WRITE3args { file: fh.clone(), offset, count: data.len() as u32, stable, data: Opaque::owned(data.to_vec()) };
    c.write(&args).await.expect("WRITE call")
}

async fn commit(c: &mut Client, fh: &nfs_fh3) -> writeverf3 {
    c.commit(&COMMIT3args { file: fh.clone(), offset: 0, count: 0 }).await.expect("COMMIT call").unwrap().verf
}

/// The whole file, in 1 MiB READs.
async fn read_all(c: &mut Client, fh: &nfs_fh3) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let r = c.read(&READ3args { file: fh.clone(), offset: out.len() as u64, count: 1 << 20 }).await.expect("READ call").unwrap();
        out.extend_from_slice(&r.data);
        if r.eof || r.data.is_empty() {
            return out;
        }
    }
}

async fn lookup(c: &mut Client, dir: &nfs_fh3, name: &str) -> Result<nfs_fh3, nfsstat3> {
    match c.lookup(&LOOKUP3args { what: dirop(dir, name) }).await.expect("LOOKUP call") {
        Nfs3Result::Ok(ok) => Ok(ok.object),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

async fn getattr(c: &mut Client, fh: &nfs_fh3) -> Result<fattr3, nfsstat3> {
    match c.getattr(&GETATTR3args { object: fh.clone() }).await.expect("GETATTR call") {
        Nfs3Result::Ok(ok) => Ok(ok.obj_attributes),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

/// Lets squashed and unprivileged NFS users create in a dataset's root.
fn open_to_all(dir: &Path) {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).expect("chmod 777");
}

#[test]
fn exports_follow_datasets_shares_mounts_and_pools() {
    let port = free_port();
    let harness = nfs_harness(port);
    let mnt = harness.mountpoint("tank");
    let media = mnt.join("media");
    harness.tarn_ok(&["create", "tank/media"]);
    open_to_all(&media);
    std::fs::write(media.join("from-fuse.txt"), b"written through FUSE\n").unwrap();
    rt().block_on(async {
        // sharenfs is off by default: not exported.
        assert_eq!(mount_refused(port, "127.0.0.1", "/tank/media").await, "MNT3ERR_NOENT");

        // sharenfs=on: exported as /POOL/DATASET and by mountpoint.
        harness.tarn_ok(&["set", "sharenfs=on", "tank/media"]);
        let root = mount(port, "127.0.0.1", "/tank/media").await.expect("MNT /tank/media");
        assert_eq!(mount(port, "127.0.0.1", &path_str(&media)).await.expect("MNT by mountpoint"), root);
        let mut c = client(port, "127.0.0.1", 1000, 1000).await;

        // FUSE → NFS and NFS → FUSE: one file system, seen at once.
        let f = lookup(&mut c, &root, "from-fuse.txt").await.expect("LOOKUP of a FUSE-written file");
        assert_eq!(read_all(&mut c, &f).await, b"written through FUSE\n");
        let (g, attrs) = created(create(&mut c, &root, "from-nfs.txt").await);
        assert_eq!((attrs.uid, attrs.gid), (1000, 1000));
        write(&mut c, &g, 0, b"written over NFS\n", stable_how::FILE_SYNC).await.unwrap();
        assert_eq!(std::fs::read(media.join("from-nfs.txt")).unwrap(), b"written over NFS\n");
        std::fs::write(media.join("from-fuse.txt"), b"changed through FUSE\n").unwrap();
        assert_eq!(read_all(&mut c, &f).await, b"changed through FUSE\n");

        // A child inherits sharenfs and is its own export.
        harness.tarn_ok(&["create", "tank/media/kid"]);
        let got = harness.tarn_ok(&["get", "-H", "-o", "value,source", "sharenfs", "tank/media/kid"]);
        assert_eq!(got.trim(), "on\tinherited from tank/media");
        open_to_all(&media.join("kid"));
        let kid = mount(port, "127.0.0.1", "/tank/media/kid").await.expect("MNT of an inheriting child");
        assert_ne!(kid, root);
        let (kf, _) = created(create(&mut c, &kid, "k").await);
        write(&mut c, &kf, 0, b"kid data", stable_how::FILE_SYNC).await.unwrap();
        assert_eq!(std::fs::read(media.join("kid/k")).unwrap(), b"kid data");
        assert_eq!(mount_refused(port, "127.0.0.1", "/tank").await, "MNT3ERR_NOENT", "the parent is not shared");

        // share -l: one nfs row per export, with its clients.
        let list = harness.tarn_ok(&["share", "-l"]);
        let rows: Vec<&str> = list.lines().filter(|l| l.split_whitespace().nth(1) == Some("nfs")).collect();
        assert_eq!(rows.len(), 2, "{list}");
        assert!(rows.iter().any(|r| r.starts_with("tank/media ") && r.contains(" /tank/media ") && r.contains("rw=*,root_squash")), "{list}");
        assert!(rows.iter().any(|r| r.starts_with("tank/media/kid ") && r.contains(&path_str(&media.join("kid")))), "{list}");

        // Unmounting the child takes its export away: its handles are
        // STALE, and MNT of its path now finds the (empty) directory of the
        // parent export, not the child; mounting it brings it back.
        harness.tarn_ok(&["unmount", "tank/media/kid"]);
        assert_eq!(getattr(&mut c, &kf).await.unwrap_err(), nfsstat3::NFS3ERR_STALE);
        assert_ne!(mount(port, "127.0.0.1", "/tank/media/kid").await.expect("MNT of the parent's directory"), kid);
        harness.tarn_ok(&["mount", "tank/media/kid"]);
        wait_mounted(&media.join("kid"));
        assert_eq!(mount(port, "127.0.0.1", "/tank/media/kid").await.expect("MNT after mount"), kid);
        assert_eq!(read_all(&mut c, &kf).await, b"kid data");

        // unshare/share.
        harness.tarn_ok(&["unshare", "tank/media"]);
        assert_eq!(mount_refused(port, "127.0.0.1", "/tank/media").await, "MNT3ERR_NOENT");
        assert!(!harness.tarn_ok(&["share", "-l"]).contains(" /tank/media "));
        assert_eq!(mount(port, "127.0.0.1", "/tank/media/kid").await.expect("the child stays shared"), kid);
        harness.tarn_ok(&["share", "tank/media"]);
        assert_eq!(mount(port, "127.0.0.1", "/tank/media").await.expect("MNT after share"), root);

        // Under an unshared parent: a new dataset appears, unmount/mount
        // take it away and back, destroy removes it and its handles are STALE.
        harness.tarn_ok(&["create", "-o", "sharenfs=on", "tank/other"]);
        let other = mount(port, "127.0.0.1", "/tank/other").await.expect("MNT of a new dataset");
        assert!(getattr(&mut c, &other).await.is_ok());
        harness.tarn_ok(&["unmount", "tank/other"]);
        assert_eq!(mount_refused(port, "127.0.0.1", "/tank/other").await, "MNT3ERR_NOENT");
        assert_eq!(getattr(&mut c, &other).await.unwrap_err(), nfsstat3::NFS3ERR_STALE);
        harness.tarn_ok(&["mount", "tank/other"]);
        wait_mounted(&mnt.join("other"));
        assert_eq!(mount(port, "127.0.0.1", "/tank/other").await.expect("MNT after mount"), other);
        harness.tarn_ok(&["destroy", "tank/other"]);
        assert_eq!(mount_refused(port, "127.0.0.1", "/tank/other").await, "MNT3ERR_NOENT");
        assert_eq!(getattr(&mut c, &other).await.unwrap_err(), nfsstat3::NFS3ERR_STALE);

        // sharenfs=off on the parent: both go (the child inherits off).
        harness.tarn_ok(&["set", "sharenfs=off", "tank/media"]);
        assert_eq!(mount_refused(port, "127.0.0.1", "/tank/media").await, "MNT3ERR_NOENT");
        assert_eq!(mount_refused(port, "127.0.0.1", "/tank/media/kid").await, "MNT3ERR_NOENT");
        assert_eq!(getattr(&mut c, &f).await.unwrap_err(), nfsstat3::NFS3ERR_STALE);
        harness.tarn_ok(&["set", "sharenfs=on", "tank/media"]);

        // Pool export removes everything; import brings it back and the
        // handles taken before name the same files again.
        harness.export("tank");
        for path in ["/tank/media", "/tank/media/kid"] {
            assert_eq!(mount_refused(port, "127.0.0.1", path).await, "MNT3ERR_NOENT", "{path}");
        }
        assert_eq!(getattr(&mut c, &g).await.unwrap_err(), nfsstat3::NFS3ERR_STALE);
        assert!(!harness.tarn_ok(&["share", "-l"]).contains("nfs"));
        harness.import("tank", &harness.dir.join("v"));
        wait_mounted(&media.join("kid"));
        assert_eq!(mount(port, "127.0.0.1", "/tank/media").await.expect("MNT after import"), root);
        assert_eq!(read_all(&mut c, &g).await, b"written over NFS\n");
        assert_eq!(read_all(&mut c, &kf).await, b"kid data");
        assert_eq!(lookup(&mut c, &root, "from-fuse.txt").await.unwrap(), f);
    });
}

#[test]
fn handles_and_committed_writes_survive_a_restart_and_the_verifier_changes() {
    let port = free_port();
    let mut harness = nfs_harness(port);
    let data = harness.mountpoint("tank").join("data");
    harness.tarn_ok(&["create", "-o", "sharenfs=on", "tank/data"]);
    open_to_all(&data);
    let (root, stable, unstable, verf) = rt().block_on(async {
        let root = mount(port, "127.0.0.1", "/tank/data").await.expect("MNT");
        let mut c = client(port, "127.0.0.1", 1000, 1000).await;
        let (stable, _) = created(create(&mut c, &root, "stable").await);
        let w = write(&mut c, &stable, 0, b"file_sync bytes", stable_how::FILE_SYNC).await.unwrap();
        assert_eq!(w.committed, stable_how::FILE_SYNC);
        let (unstable, _) = created(create(&mut c, &root, "unstable").await);
        let w = write(&mut c, &unstable, 0, b"unstable bytes, then COMMIT", stable_how::UNSTABLE).await.unwrap();
        assert_eq!(commit(&mut c, &unstable).await, w.verf, "one verifier per daemon run");
        (root, stable, unstable, w.verf)
    });

    harness.stop_daemon();
    assert!(!data.join("stable").exists(), "the dataset is still mounted after the daemon stopped");
    harness.restart_daemon();
    wait_mounted(&data);

    rt().block_on(async {
        assert_eq!(mount(port, "127.0.0.1", "/tank/data").await.expect("MNT after restart"), root, "the root handle changed");
        let mut c = client(port, "127.0.0.1", 1000, 1000).await;
        assert_eq!(read_all(&mut c, &stable).await, b"file_sync bytes");
        assert_eq!(read_all(&mut c, &unstable).await, b"unstable bytes, then COMMIT");
        assert_eq!(lookup(&mut c, &root, "stable").await.unwrap(), stable);
        let w = write(&mut c, &unstable, 0, b"U", stable_how::UNSTABLE).await.unwrap();
        assert_ne!(w.verf, verf, "a daemon restart must change the write verifier");
        assert_eq!(commit(&mut c, &unstable).await, w.verf);
        assert_eq!(std::fs::read(data.join("unstable")).unwrap(), b"Unstable bytes, then COMMIT");
    });
}

#[test]
fn export_rules_by_source_address_and_bad_settings_refused() {
    let port = free_port();
    let harness = nfs_harness(port);
    let dir = harness.mountpoint("tank").join("r");
    harness.tarn_ok(&["create", "tank/r"]);
    open_to_all(&dir);
    harness.tarn_ok(&["set", "sharenfs=rw=@127.0.0.1/32,ro=@127.0.0.3/32", "tank/r"]);
    rt().block_on(async {
        let root = mount(port, "127.0.0.1", "/tank/r").await.expect("MNT from 127.0.0.1");
        let mut rw = client(port, "127.0.0.1", 1000, 1000).await;
        let (f, _) = created(create(&mut rw, &root, "f").await);
        write(&mut rw, &f, 0, b"rw client", stable_how::FILE_SYNC).await.unwrap();
        assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"rw client");

        // root_squash is the default: root's file belongs to nobody.
        let mut root_client = client(port, "127.0.0.1", 0, 0).await;
        let (_, a) = created(create(&mut root_client, &root, "by-root").await);
        assert_eq!((a.uid, a.gid), (65534, 65534));
        let meta = std::fs::metadata(dir.join("by-root")).unwrap();
        assert_eq!((std::os::unix::fs::MetadataExt::uid(&meta), std::os::unix::fs::MetadataExt::gid(&meta)), (65534, 65534));

        // ro client: mounts and reads, writes are ROFS.
        assert_eq!(mount(port, "127.0.0.3", "/tank/r").await.expect("MNT from 127.0.0.3"), root);
        let mut ro = client(port, "127.0.0.3", 1000, 1000).await;
        assert_eq!(read_all(&mut ro, &f).await, b"rw client");
        assert_eq!(status(&write(&mut ro, &f, 0, b"x", stable_how::FILE_SYNC).await), nfsstat3::NFS3ERR_ROFS);
        assert_eq!(status(&create(&mut ro, &root, "no").await), nfsstat3::NFS3ERR_ROFS);
        assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"rw client");
        assert!(!dir.join("no").exists());

        // Not listed: refused at MOUNT, and with a handle it learned elsewhere.
        assert_eq!(mount_refused(port, "127.0.0.2", "/tank/r").await, "MNT3ERR_ACCES");
        let mut other = client(port, "127.0.0.2", 1000, 1000).await;
        assert_eq!(getattr(&mut other, &f).await.unwrap_err(), nfsstat3::NFS3ERR_ACCES);
    });

    // A bad rule string is refused by `tarn set`, the old value kept.
    let out = harness.tarn(&["set", "sharenfs=rw=@10.0.0.0/33", "tank/r"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("tarn: ") && stderr.lines().count() == 1 && stderr.contains("10.0.0.0/33"), "{stderr}");
    let value = harness.tarn_ok(&["get", "-H", "-o", "value", "sharenfs", "tank/r"]);
    assert_eq!(value.trim(), "rw=@127.0.0.1/32,ro=@127.0.0.3/32");

    // A bad or taken [nfs] listen: the daemon refuses to start, in one line.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap();
    for (n, (listen, needle)) in
        [("127.0.0.1", "[nfs] listen".to_string()), ("nowhere:2049", "[nfs] listen".to_string()), (&*taken_addr.to_string(), taken_addr.to_string())]
            .into_iter()
            .enumerate()
    {
        let config = harness.dir.join(format!("bad{n}.toml"));
        std::fs::write(&config, format!("[nfs]\nlisten = \"{listen}\"\n")).unwrap();
        let mut command = Command::new(common::TARN);
        command
            .args(["daemon", "--state-dir"])
            .arg(harness.dir.join(format!("state-bad{n}")))
            .arg("--socket")
            .arg(harness.dir.join(format!("s-bad{n}")))
            .arg("--config")
            .arg(&config);
        let out = common::run_with_timeout(command, Duration::from_secs(30));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "listen = {listen:?}: {stderr}");
        assert!(stderr.starts_with("tarn: ") && stderr.lines().count() == 1 && stderr.contains(&needle), "listen = {listen:?}: {stderr}");
        assert!(!harness.dir.join(format!("s-bad{n}")).exists(), "a socket was left behind");
    }
    drop(taken);
}

/// What the writer saw acknowledged before the daemon died.
#[derive(Default)]
struct Acked {
    /// Bytes of the FILE_SYNC file acknowledged (written in order).
    sync_len: u64,
    /// Bytes of the UNSTABLE file covered by an acknowledged COMMIT.
    committed_len: u64,
    writes: u64,
}

#[test]
fn daemon_killed_while_writing_keeps_every_acknowledged_byte() {
    let run = tarn_testkit::seeded!(3);
    let port = free_port();
    let mut harness = nfs_harness(port);
    let data = harness.mountpoint("tank").join("data");
    harness.tarn_ok(&["create", "-o", "sharenfs=on", "tank/data"]);
    open_to_all(&data);
    for round in 0..run.count {
        let mut rng = run.rng(round);
        let content: Arc<Vec<u8>> = Arc::new((0..32 << 20).map(|_| rng.gen()).collect());
        let kill_after = Duration::from_millis(rng.gen_range(200..1500));
        let chunk_seed: u64 = rng.gen();
        let (root, sync_fh, unstable_fh) = rt().block_on(async {
            let root = mount(port, "127.0.0.1", "/tank/data").await.expect("MNT");
            let mut c = client(port, "127.0.0.1", 1000, 1000).await;
            let (s, _) = created(create(&mut c, &root, &format!("sync{round}")).await);
            let (u, _) = created(create(&mut c, &root, &format!("unstable{round}")).await);
            (root, s, u)
        });
        let acked = Arc::new(Mutex::new(Acked::default()));
        let writer = {
            let (acked, content, sync_fh, unstable_fh) = (acked.clone(), content.clone(), sync_fh.clone(), unstable_fh.clone());
            std::thread::spawn(move || {
                let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(chunk_seed);
                rt().block_on(async move {
                    let mut c = client(port, "127.0.0.1", 1000, 1000).await;
                    let (mut sync_at, mut unstable_at) = (0usize, 0usize);
                    while sync_at < content.len() || unstable_at < content.len() {
                        let len = rng.gen_range(1..256 << 10).min(content.len() - sync_at.min(unstable_at));
                        if sync_at < content.len() {
                            let len = len.min(content.len() - sync_at);
                            let args = WRITE3args {
                                file: sync_fh.clone(),
                                offset: sync_at as u64,
                                count: len as u32,
                                stable: stable_how::FILE_SYNC,
                                data: Opaque::owned(content[sync_at..sync_at + len].to_vec()),
                            };
                            match c.write(&args).await {
                                Ok(Nfs3Result::Ok(ok)) => {
                                    assert_eq!(ok.count as usize, len, "short FILE_SYNC write");
                                    assert_eq!(ok.committed, stable_how::FILE_SYNC);
                                    sync_at += len;
                                    let mut a = acked.lock().unwrap();
                                    a.sync_len = sync_at as u64;
                                    a.writes += 1;
                                }
                                _ => return,
                            }
                        }
                        if unstable_at < content.len() {
                            let len = len.min(content.len() - unstable_at);
                            let args = WRITE3args {
                                file: unstable_fh.clone(),
                                offset: unstable_at as u64,
                                count: len as u32,
                                stable: stable_how::UNSTABLE,
                                data: Opaque::owned(content[unstable_at..unstable_at + len].to_vec()),
                            };
                            match c.write(&args).await {
                                Ok(Nfs3Result::Ok(_)) => unstable_at += len,
                                _ => return,
                            }
                            if rng.gen_ratio(1, 4) {
                                match c.commit(&COMMIT3args { file: unstable_fh.clone(), offset: 0, count: 0 }).await {
                                    Ok(Nfs3Result::Ok(_)) => acked.lock().unwrap().committed_len = unstable_at as u64,
                                    _ => return,
                                }
                            }
                        }
                    }
                })
            })
        };
        let started = Instant::now();
        while started.elapsed() < kill_after && !writer.is_finished() {
            std::thread::sleep(Duration::from_millis(10));
        }
        harness.kill_and_restart();
        writer.join().expect("writer thread");
        wait_mounted(&data);
        let acked = std::mem::take(&mut *acked.lock().unwrap());
        eprintln!(
            "round {round}: killed after {kill_after:?}, {} FILE_SYNC writes ({} bytes), {} bytes committed",
            acked.writes, acked.sync_len, acked.committed_len
        );
        assert!(acked.writes > 0, "the daemon was killed before any write was acknowledged");
        rt().block_on(async {
            let mut c = client(port, "127.0.0.1", 1000, 1000).await;
            assert_eq!(mount(port, "127.0.0.1", "/tank/data").await.expect("MNT after the kill"), root);
            let got = read_all(&mut c, &sync_fh).await;
            let n = acked.sync_len as usize;
            assert!(got.len() >= n, "FILE_SYNC file is {} bytes, {n} were acknowledged", got.len());
            assert!(got[..n] == content[..n], "FILE_SYNC-acknowledged bytes differ after the kill");
            let got = read_all(&mut c, &unstable_fh).await;
            let n = acked.committed_len as usize;
            assert!(got.len() >= n, "UNSTABLE file is {} bytes, {n} were committed", got.len());
            assert!(got[..n] == content[..n], "COMMIT-acknowledged bytes differ after the kill");
        });
    }
}
