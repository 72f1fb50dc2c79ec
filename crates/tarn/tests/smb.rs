//! SMB through the daemon's own smbd: smbclient and smbtorture (Debian's
//! `smbclient` and `samba-testsuite`) against a tarn share on a high port.
//! Also: `tarn set` refusing bad share strings, `tarn share -l`.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{path_str, run_with_timeout, Harness};

const PASSWORD: &str = "tarn-secret";

/// A free TCP port on 127.0.0.1 (bound then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

fn smb_harness(port: u16) -> Harness {
    let harness = Harness::start_with_config(Some(&move |_dir: &Path| {
        format!("[smb]\nenable = true\nlisten = \"127.0.0.1:{port}\"\n")
    }));
    harness.vdev_files("v", 2, common::VDEV_SIZE_BYTES);
    let v = harness.dir.join("v");
    harness.create_pool("tank", &["mirror".into(), path_str(&v.join("d0")), path_str(&v.join("d1"))]);
    let add = Command::new(common::TARN)
        .args(["--socket", &path_str(&harness.socket), "smb", "user", "add", "--password-stdin", "root"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("tarn smb user add");
    use std::io::Write;
    add.stdin.as_ref().expect("stdin").write_all(format!("{PASSWORD}\n").as_bytes()).expect("password");
    let out = add.wait_with_output().expect("wait");
    assert!(out.status.success(), "smb user add: {}", String::from_utf8_lossy(&out.stderr));
    harness
}

/// `smbclient //127.0.0.1/SHARE -p PORT -U root%PW -c COMMANDS`, with the
/// exit status and both outputs in one string.
fn smbclient(port: u16, share: &str, commands: &str, cwd: &Path) -> (bool, String) {
    let mut command = Command::new("smbclient");
    command
        .current_dir(cwd)
        .arg(format!("//127.0.0.1/{share}"))
        .args(["-p", &port.to_string(), "-U", &format!("root%{PASSWORD}"), "-c", commands]);
    let out = run_with_timeout(command, Duration::from_secs(120));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success() && !text.contains("NT_STATUS_"), text)
}

fn wait_for<F: FnMut() -> bool>(what: &str, mut ok: F) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn smbd_pid(harness: &Harness) -> Option<u32> {
    let pid_file = harness.state_dir.join("smb/pid/smbd-smb.conf.pid");
    let alt = harness.state_dir.join("smb/pid/smbd.pid");
    let text = std::fs::read_to_string(&pid_file).or_else(|_| std::fs::read_to_string(&alt)).ok()?;
    let pid: u32 = text.trim().parse().ok()?;
    Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
}

#[test]
fn smbclient_reads_writes_renames_and_sees_snapshots() {
    let port = free_port();
    let harness = smb_harness(port);
    let mnt = harness.mountpoint("tank");
    harness.tarn_ok(&["create", "tank/media"]);
    harness.tarn_ok(&["set", "sharesmb=on", "tank/media"]);
    let media = mnt.join("media");
    std::fs::write(media.join("old.txt"), b"before the snapshot\n").unwrap();
    let work = harness.dir.join("client");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("up.bin"), vec![7u8; 300_000]).unwrap();

    // put/get/mkdir/rename/delete.
    let (ok, out) = smbclient(port, "tank_media", "put up.bin; mkdir dir; rename up.bin dir/moved.bin; get old.txt got.txt", &work);
    assert!(ok, "{out}");
    assert_eq!(std::fs::read(media.join("dir/moved.bin")).unwrap(), vec![7u8; 300_000]);
    assert_eq!(std::fs::read(work.join("got.txt")).unwrap(), b"before the snapshot\n");
    let (ok, out) = smbclient(port, "tank_media", "del dir/moved.bin; rmdir dir", &work);
    assert!(ok, "{out}");
    assert!(!media.join("dir").exists());

    // A real tree, copied in and out, byte-identical.
    let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (ok, out) = smbclient(
        port,
        "tank_media",
        &format!("prompt OFF; recurse ON; mkdir src; cd src; lcd {}; mput *", path_str(&tree)),
        &work,
    );
    assert!(ok, "{out}");
    let back = work.join("back");
    std::fs::create_dir_all(&back).unwrap();
    let (ok, out) = smbclient(port, "tank_media", "prompt OFF; recurse ON; mget src", &back);
    assert!(ok, "{out}");
    let mut compared = 0;
    for entry in common::walk(&tree) {
        let rel = entry.strip_prefix(&tree).unwrap_or(&entry).to_path_buf();
        let file = tree.join(&rel);
        if file.is_file() {
            assert_eq!(std::fs::read(&file).unwrap(), std::fs::read(back.join("src").join(&rel)).unwrap(), "{rel:?}");
            assert_eq!(std::fs::read(&file).unwrap(), std::fs::read(media.join("src").join(&rel)).unwrap(), "{rel:?}");
            compared += 1;
        }
    }
    assert!(compared > 10, "only {compared} files compared");

    // Previous Versions: a zfs-auto-snapshot name is an @GMT version.
    harness.tarn_ok(&["snapshot", "tank/media@zfs-auto-snap_hourly-2026-11-24-1000"]);
    std::fs::write(media.join("old.txt"), b"after\n").unwrap();
    let (ok, out) = smbclient(port, "tank_media", "allinfo old.txt", &work);
    assert!(ok, "{out}");
    assert!(out.contains("@GMT-2026.11.24-10.00.00"), "allinfo shows no snapshot:\n{out}");
    let (ok, out) = smbclient(port, "tank_media", r"get @GMT-2026.11.24-10.00.00\old.txt snap.txt", &work);
    assert!(ok, "{out}");
    assert_eq!(std::fs::read(work.join("snap.txt")).unwrap(), b"before the snapshot\n");
    let (ok, _) = smbclient(port, "tank_media", "get old.txt now.txt", &work);
    assert!(ok);
    assert_eq!(std::fs::read(work.join("now.txt")).unwrap(), b"after\n");

    // DOS attributes are stored as xattrs on the dataset.
    let (ok, out) = smbclient(port, "tank_media", "setmode old.txt +h", &work);
    assert!(ok, "{out}");
    let path = std::ffi::CString::new(path_str(&media.join("old.txt"))).unwrap();
    let mut names = vec![0u8; 4096];
    // SAFETY: listxattr into a buffer of the length given.
    let len = unsafe { libc::listxattr(path.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(len > 0, "no xattrs on a file smbd set DOS attributes on");
    let names = String::from_utf8_lossy(&names[..len as usize]).into_owned();
    assert!(names.contains("user.DOSATTRIB"), "no DOS attribute xattr: {names:?}");

    // share -l lists it.
    let list = harness.tarn_ok(&["share", "-l"]);
    assert!(list.contains("tank/media") && list.contains("smb") && list.contains("tank_media"), "{list}");
    let json: serde_json::Value = serde_json::from_str(&harness.tarn_ok(&["share", "-l", "-j"])).unwrap();
    assert_eq!(json["shares"][0]["share"], "tank_media");
    assert_eq!(json["shares"][0]["mountpoint"], path_str(&media));

    // unshare takes it away; share brings it back.
    harness.tarn_ok(&["unshare", "tank/media"]);
    let (ok, out) = smbclient(port, "tank_media", "ls", &work);
    assert!(!ok && out.contains("NT_STATUS_BAD_NETWORK_NAME"), "{out}");
    assert!(!harness.tarn_ok(&["share", "-l"]).contains("tank_media"));
    harness.tarn_ok(&["share", "tank/media"]);
    let (ok, out) = smbclient(port, "tank_media", "ls", &work);
    assert!(ok, "{out}");

    // Export with the share in use: the share goes, then the mount.
    harness.export("tank");
    let (ok, out) = smbclient(port, "tank_media", "ls", &work);
    assert!(!ok, "share still there after export: {out}");
}

#[test]
fn share_options_readonly_hosts_name_and_smbd_restart() {
    let port = free_port();
    let harness = smb_harness(port);
    let mnt = harness.mountpoint("tank");
    let work = harness.dir.join("client");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("f.txt"), b"x").unwrap();
    harness.tarn_ok(&["create", "-o", "sharesmb=name=photos,readonly=on", "tank/photos"]);
    std::fs::write(mnt.join("photos/p.jpg"), b"jpeg").unwrap();
    let (ok, out) = smbclient(port, "photos", "get p.jpg p.jpg", &work);
    assert!(ok, "{out}");
    let (ok, out) = smbclient(port, "photos", "put f.txt", &work);
    assert!(!ok && out.contains("NT_STATUS_ACCESS_DENIED"), "readonly=on took a write: {out}");
    assert!(!mnt.join("photos/f.txt").exists());

    // hosts deny refuses 127.0.0.1 (smbclient cannot pick its source address).
    harness.tarn_ok(&["create", "-o", "sharesmb=name=closed,hosts deny=127.0.0.1", "tank/closed"]);
    harness.tarn_ok(&["create", "-o", "sharesmb=name=open,hosts allow=127.", "tank/open"]);
    let (ok, out) = smbclient(port, "closed", "ls", &work);
    assert!(!ok, "hosts deny=127.0.0.1 let 127.0.0.1 in: {out}");
    let (ok, out) = smbclient(port, "open", "put f.txt", &work);
    assert!(ok, "{out}");

    // Children inherit sharesmb with their own default name.
    harness.tarn_ok(&["create", "tank/open/kid"]);
    harness.tarn_ok(&["set", "sharesmb=on", "tank/open"]);
    let (ok, out) = smbclient(port, "tank_open_kid", "ls", &work);
    assert!(ok, "{out}");

    // smbd killed: the daemon starts it again.
    let pid = smbd_pid(&harness).expect("smbd pid file");
    // SAFETY: signalling the test's own smbd.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    wait_for("a new smbd", || smbd_pid(&harness).is_some_and(|p| p != pid));
    wait_for("the share after the restart", || smbclient(port, "photos", "ls", &work).0);
    assert!(harness.daemon_log().contains("smbd restarted"));
}

#[test]
fn smbtorture_smb2_curated() {
    let port = free_port();
    let harness = smb_harness(port);
    harness.tarn_ok(&["create", "-o", "sharesmb=on", "tank/t"]);
    // These pass on tarn's FUSE mount; the others smbtorture has need what
    // FUSE or tarn-fs do not give (file index, DACLs, hidden-bit dosmode…).
    let tests = "smb2.connect smb2.read.eof smb2.read.position smb2.read.dir smb2.read.access smb2.dir.find \
        smb2.dir.sorted smb2.create.brlocked smb2.create.multi smb2.create.delete smb2.create.leading-slash \
        smb2.create.dir-alloc-size smb2.getinfo.fsinfo smb2.getinfo.qfile_buffercheck smb2.rename.simple \
        smb2.rename.no_sharing smb2.rename.share_delete_and_delete_access smb2.rename.rename_dir_openfile \
        smb2.lock.valid-request smb2.lock.rw-shared smb2.lock.rw-exclusive smb2.lock.zerobytelength \
        smb2.lock.unlock smb2.lock.multiple-unlock smb2.lock.stacking smb2.lock.contend smb2.lock.context \
        smb2.lock.async smb2.lock.cancel smb2.lock.range smb2.streams.dir smb2.streams.io smb2.streams.sharemodes \
        smb2.streams.names smb2.streams.names2 smb2.streams.basefile-rename-with-open-stream \
        smb2.streams.create-disposition smb2.streams.delete smb2.streams.attributes1 smb2.oplock.exclusive1 \
        smb2.oplock.batch1 smb2.oplock.levelii500 smb2.ioctl.shadow_copy smb2.compound.related1 \
        smb2.compound.unrelated1 smb2.compound.invalid1 smb2.compound.interim1 smb2.maxfid \
        smb2.session.reconnect1 smb2.durable-open.open-oplock smb2.delete-on-close-perms.OVERWRITE_IF \
        smb2.delete-on-close-perms.CREATE smb2.delete-on-close-perms.FIND_and_set_DOC smb2.sdread";
    let mut failed = Vec::new();
    for test in tests.split_whitespace() {
        let mut command = Command::new("smbtorture");
        command
            .current_dir(&harness.dir)
            .arg("//127.0.0.1/tank_t")
            .args(["-p", &port.to_string(), "-U", &format!("root%{PASSWORD}"), test]);
        let out = run_with_timeout(command, Duration::from_secs(300));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let name = test.rsplit('.').next().unwrap();
        let passed = out.status.success()
            && text.contains(&format!("success: {name}"))
            && !text.contains("failure:")
            && !text.contains("error:");
        if !passed {
            failed.push(format!("{test}: {}", common::tail(&text, 5)));
        }
    }
    assert!(failed.is_empty(), "smbtorture failures:\n{}", failed.join("\n"));
}

#[test]
fn set_refuses_bad_share_strings_and_missing_samba_is_named() {
    let harness = Harness::start();
    harness.vdev_files("v", 1, common::VDEV_SIZE_BYTES);
    harness.create_pool("tank", &[path_str(&harness.dir.join("v/d0"))]);
    harness.tarn_ok(&["create", "tank/a"]);
    for (assignment, needle) in [
        ("sharenfs=rw=@10.0.0.0/33", "bad network length"),
        ("sharenfs=frobnicate", "unknown sharenfs option 'frobnicate'"),
        ("sharenfs=sec=krb5", "only sec=sys"),
        ("sharesmb=name=global", "reserved"),
        ("sharesmb=bogus=1", "unknown sharesmb option"),
        ("sharesmb=readonly=maybe", "must be on or off"),
    ] {
        let out = harness.tarn(&["set", assignment, "tank/a"]);
        assert_eq!(out.status.code(), Some(1), "{assignment}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{assignment}: {stderr}");
        assert!(stderr.starts_with("tarn: ") && stderr.contains(needle), "{assignment}: {stderr}");
    }
    assert_eq!(harness.tarn_ok(&["get", "-H", "-o", "value", "sharenfs", "tank/a"]).trim(), "off");
    harness.tarn_ok(&["set", "sharenfs=rw=@192.168.1.0/24,ro=@10.0.0.0/8,no_root_squash", "tank"]);
    let got = harness.tarn_ok(&["get", "-H", "-o", "value,source", "sharenfs", "tank/a"]);
    assert_eq!(got.trim(), "rw=@192.168.1.0/24,ro=@10.0.0.0/8,no_root_squash\tinherited from tank");
    // No [smb]: smb user is refused with the reason.
    let out = harness.tarn(&["smb", "user", "list"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("[smb] enable = true"));

    // [smb] enable with an smbd that does not exist: the daemon says which package.
    let out = Command::new(common::TARN)
        .args(["daemon", "--state-dir"])
        .arg(harness.dir.join("state2"))
        .arg("--socket")
        .arg(harness.dir.join("s2"))
        .arg("--config")
        .arg({
            let path = harness.dir.join("bad.toml");
            std::fs::write(&path, "[smb]\nenable = true\nsmbd = \"/nonexistent/smbd\"\n").unwrap();
            path
        })
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("'samba' package"), "{stderr}");

    // [smb] on an address something else listens on: the daemon does not
    // start (smbd would abort and be restarted forever), and says why.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = Command::new(common::TARN)
        .args(["daemon", "--state-dir"])
        .arg(harness.dir.join("state3"))
        .arg("--socket")
        .arg(harness.dir.join("s3"))
        .arg("--config")
        .arg({
            let path = harness.dir.join("busy.toml");
            std::fs::write(&path, format!("[smb]\nenable = true\nlisten = \"127.0.0.1:{port}\"\n")).unwrap();
            path
        })
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr.lines().last().unwrap_or_default();
    assert!(line.contains(&format!("SMB server: cannot listen on 127.0.0.1:{port}")) && line.to_lowercase().contains("in use"), "{stderr}");
    drop(taken);
}
