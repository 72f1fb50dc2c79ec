//! A mount is multi-user (issue 9, item 0): ordinary uids reach what the
//! permission bits grant them and nothing more, through the kernel's
//! `default_permissions` checks on an `allow_other` mount.
//!
//! pjdfstest (the published POSIX conformance suite, `cargo install
//! pjdfstest`; `.ci/run` installs it) runs as root and switches to uid
//! 65534 and to a second dummy user ("tests", created by scripts/test) with
//! supplementary groups for its permission cases. It runs on tmpfs first,
//! the reference proving this configuration passes on a kernel file system,
//! then through a tarn mount, with no expected failures. Our own checks
//! drive `setpriv` as other uids: EACCES and EPERM exactly where POSIX puts
//! them.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

use common::{path_str, Harness};

/// pjdfstest's configuration: every Linux feature the suite can test, the
/// two dummy users, and a nap longer than the kernel's coarse clock tick
/// (timestamps taken 1 ms apart can be equal on tmpfs and FUSE alike).
const PJD_CONFIG: &str = r#"
[features]
posix_fallocate = {}
utimensat = {}
utime_now = {}
rename_ctime = {}

[settings]
naptime = 0.05
allow_remount = false

[dummy_auth]
entries = [["nobody", "nogroup"], ["tests", "tests"]]
"#;

fn pjdfstest(root: &Path, config_dir: &Path) {
    let config = config_dir.join("pjdfstest.toml");
    std::fs::write(&config, PJD_CONFIG).unwrap();
    for (user, _) in [("nobody", "nogroup"), ("tests", "tests")] {
        let ok = Command::new("getent").args(["passwd", user]).output().map(|o| o.status.success()).unwrap_or(false);
        assert!(ok, "pjdfstest needs the user '{user}' (scripts/test creates it)");
    }
    // The suite works in the current directory's file system as other uids.
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new("pjdfstest")
        .arg("-c")
        .arg(&config)
        .arg("-p")
        .arg(root)
        .current_dir(root)
        .output()
        .unwrap_or_else(|e| panic!("cannot run pjdfstest ({e}): `cargo install --locked pjdfstest` (.ci/run does)"));
    let text = String::from_utf8_lossy(&out.stdout);
    let failed: Vec<&str> = text.lines().filter(|l| l.trim_end().ends_with("FAILED")).collect();
    let summary = text.lines().find(|l| l.starts_with("Summary:")).unwrap_or("no summary");
    assert!(
        out.status.success() && failed.is_empty(),
        "pjdfstest on {}: {summary}\n{}\n{}",
        root.display(),
        failed.join("\n"),
        common::tail(&String::from_utf8_lossy(&out.stderr), 30)
    );
    // The run must really have tested something: a few hundred cases.
    let passed: u64 = summary
        .split(',')
        .find_map(|part| part.trim().strip_suffix(" passed").and_then(|n| n.trim().parse().ok()))
        .unwrap_or(0);
    assert!(passed >= 350, "pjdfstest passed only {passed} cases: {summary}");
}

/// Every directory from `/` down to `path` must be searchable by others.
fn open_path_to(path: &Path) {
    let mut dir = path.to_path_buf();
    while let Some(parent) = dir.parent() {
        if parent == Path::new("/") || parent.as_os_str().is_empty() {
            break;
        }
        let mode = std::fs::metadata(parent).unwrap().permissions().mode();
        if mode & 0o005 != 0o005 {
            std::fs::set_permissions(parent, std::fs::Permissions::from_mode(mode | 0o005)).unwrap();
        }
        dir = parent.to_path_buf();
    }
}

#[test]
fn pjdfstest_on_tmpfs_reference() {
    let tmp = tempfile::Builder::new().prefix("tarn-pjd-ref-").tempdir().expect("temp dir");
    let root = tmp.path().join("tmpfs");
    let _mount = common::mount_tmpfs(&root, "tarn-pjd-ref", "1g");
    open_path_to(&root);
    pjdfstest(&root, tmp.path());
}

#[test]
fn pjdfstest_through_tarn_mount() {
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 2, 512 << 20);
    let mountpoint = harness.create_pool("pjd", &["mirror".into(), path_str(&devices[0]), path_str(&devices[1])]);
    open_path_to(&mountpoint);
    pjdfstest(&mountpoint, &harness.dir);
    let out = harness.tarn(&["debug", "check", "pjd"]);
    assert!(out.status.success(), "debug check after pjdfstest: {}", String::from_utf8_lossy(&out.stdout));
}

/// Runs `argv` as `uid:gid` with the given supplementary groups.
fn as_user(uid: u32, gid: u32, groups: &[u32], argv: &[&str]) -> Output {
    let mut command = Command::new("setpriv");
    command.arg(format!("--reuid={uid}")).arg(format!("--regid={gid}"));
    if groups.is_empty() {
        command.arg("--clear-groups");
    } else {
        let list: Vec<String> = groups.iter().map(u32::to_string).collect();
        command.arg(format!("--groups={}", list.join(",")));
    }
    command.args(argv).output().expect("run setpriv")
}

fn refused(out: &Output, what: &str, message: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{what} should fail, succeeded");
    assert!(stderr.contains(message), "{what}: expected '{message}', got: {stderr}");
}

fn ok(out: &Output, what: &str) {
    assert!(out.status.success(), "{what} failed: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn ordinary_users_get_what_the_bits_grant() {
    let harness = Harness::start();
    let devices = harness.vdev_files("vdevs", 1, 256 << 20);
    let mnt = harness.create_pool("users", &[path_str(&devices[0])]);
    open_path_to(&mnt);
    let m = |rel: &str| path_str(&mnt.join(rel));

    // The issue's reproduction: a world-writable directory takes a file
    // from uid 65534, owned by that uid.
    std::fs::create_dir(mnt.join("d")).unwrap();
    std::fs::set_permissions(mnt.join("d"), std::fs::Permissions::from_mode(0o777)).unwrap();
    ok(&as_user(65534, 65534, &[], &["touch", &m("d/x")]), "touch as nobody in a 0777 directory");
    let meta = std::fs::metadata(mnt.join("d/x")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (65534, 65534));

    // Root's 0755 directory: others read and list, never create.
    std::fs::write(mnt.join("readme"), b"hello\n").unwrap();
    let cat = as_user(65534, 65534, &[], &["cat", &m("readme")]);
    ok(&cat, "cat of a 0644 file as nobody");
    assert_eq!(cat.stdout, b"hello\n");
    ok(&as_user(65534, 65534, &[], &["ls", &mnt.to_string_lossy()]), "ls of a 0755 directory as nobody");
    refused(&as_user(65534, 65534, &[], &["touch", &m("nope")]), "touch in root's 0755 directory", "Permission denied");
    refused(&as_user(65534, 65534, &[], &["sh", "-c", &format!("echo x >> {}", m("readme"))]), "append to a 0644 file", "Permission denied");

    // A private directory: closed to others, open to a member of its group
    // through a supplementary group only.
    std::fs::create_dir(mnt.join("team")).unwrap();
    std::fs::set_permissions(mnt.join("team"), std::fs::Permissions::from_mode(0o770)).unwrap();
    std::os::unix::fs::chown(mnt.join("team"), Some(0), Some(4242)).unwrap();
    refused(&as_user(65534, 65534, &[], &["ls", &m("team")]), "ls of a 0770 directory by an outsider", "Permission denied");
    ok(&as_user(65534, 65534, &[4242], &["touch", &m("team/shared")]), "touch by a member of the group");
    let meta = std::fs::metadata(mnt.join("team/shared")).unwrap();
    assert_eq!(meta.uid(), 65534);

    // EPERM: only the owner (or root) changes modes and owners.
    refused(&as_user(1000, 1000, &[], &["chmod", "777", &m("d/x")]), "chmod of another user's file", "Operation not permitted");
    refused(&as_user(65534, 65534, &[], &["chown", "1000", &m("d/x")]), "chown to another uid", "Operation not permitted");
    ok(&as_user(65534, 65534, &[], &["chmod", "600", &m("d/x")]), "chmod by the owner");
    refused(&as_user(1000, 1000, &[], &["cat", &m("d/x")]), "read of a 0600 file by another uid", "Permission denied");

    // Sticky directory: others' files cannot be removed.
    std::fs::create_dir(mnt.join("tmp")).unwrap();
    std::fs::set_permissions(mnt.join("tmp"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    ok(&as_user(1000, 1000, &[], &["touch", &m("tmp/mine")]), "touch in a sticky directory");
    refused(&as_user(65534, 65534, &[], &["rm", "-f", &m("tmp/mine")]), "rm of another user's file in a sticky directory", "Operation not permitted");
    ok(&as_user(1000, 1000, &[], &["rm", &m("tmp/mine")]), "rm by the owner");

    // Snapshots are read-only for everyone and readable as the bits say.
    harness.tarn_ok(&["snapshot", "users@s"]);
    let snap = mnt.join(".zfs/snapshot/s");
    ok(&as_user(65534, 65534, &[], &["cat", &path_str(&snap.join("readme"))]), "cat in a snapshot as nobody");
    refused(&as_user(65534, 65534, &[], &["touch", &path_str(&snap.join("d/y"))]), "touch in a snapshot", "Read-only file system");
}
