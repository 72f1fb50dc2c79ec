//! Export/import round trips.
//!
//! 1. Every byte, mode, owner, timestamp (atime and mtime as set by
//!    utimensat, with nanoseconds), symlink target, hard-link group, xattr
//!    and dataset property survives `tarn pool export` + `tarn pool import`.
//! 2. `tarn pool import -F` rewinds to an older txg when the newest
//!    uberblock's tree is damaged. The damage is made from the outside,
//!    without knowing the format: hash every 4 KiB page of every device's
//!    data region after an export, import, add a file, export again, and
//!    zero every data-region page that changed in between. The pages that
//!    changed are exactly the blocks the newer txgs wrote (copy-on-write
//!    never rewrites a live block, and freed space is not reused for a few
//!    txgs), so every uberblock newer than the first export points at a
//!    zeroed tree, while the first export's tree is untouched. Labels (and
//!    so the uberblock ring) lie outside the data region and are not
//!    touched.

mod common;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use common::{data_region, hash_file, path_str, random_bytes, write_file, Harness};

fn raidz1(harness: &Harness, subdir: &str) -> Vec<String> {
    let devices = harness.vdev_files(subdir, 4, common::VDEV_SIZE_BYTES);
    let mut spec = vec!["raidz1".to_string()];
    spec.extend(devices.iter().map(|p| path_str(p)));
    spec
}

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

fn set_times(path: &Path, atime: (i64, i64), mtime: (i64, i64)) {
    let times = [
        libc::timespec { tv_sec: atime.0 as libc::time_t, tv_nsec: atime.1 as _ },
        libc::timespec { tv_sec: mtime.0 as libc::time_t, tv_nsec: mtime.1 as _ },
    ];
    // SAFETY: valid C string and two timespecs.
    let ret = unsafe { libc::utimensat(libc::AT_FDCWD, cpath(path).as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    assert_eq!(ret, 0, "utimensat {}: {}", path.display(), std::io::Error::last_os_error());
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    let name = CString::new(name).unwrap();
    // SAFETY: valid C strings and buffer.
    let ret = unsafe { libc::lsetxattr(cpath(path).as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(ret, 0, "setxattr {}: {}", path.display(), std::io::Error::last_os_error());
}

fn xattrs(path: &Path) -> Vec<(String, Vec<u8>)> {
    let mut names = vec![0u8; 65_536];
    // SAFETY: valid C string and buffer.
    let n = unsafe { libc::llistxattr(cpath(path).as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(n >= 0, "listxattr {}: {}", path.display(), std::io::Error::last_os_error());
    let mut out = Vec::new();
    for name in names[..n as usize].split(|b| *b == 0).filter(|s| !s.is_empty()) {
        let text = String::from_utf8_lossy(name).into_owned();
        if !text.starts_with("user.") {
            continue;
        }
        let cname = CString::new(name).unwrap();
        let mut value = vec![0u8; 65_536];
        // SAFETY: valid C strings and buffer.
        let len = unsafe { libc::lgetxattr(cpath(path).as_ptr(), cname.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
        assert!(len >= 0, "getxattr {text}: {}", std::io::Error::last_os_error());
        value.truncate(len as usize);
        out.push((text, value));
    }
    out.sort();
    out
}

/// Everything the round trip must preserve about one entry.
#[derive(Debug, PartialEq, Eq)]
struct EntryState {
    kind: &'static str,
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    nlink: u64,
    atime: (i64, i64),
    mtime: (i64, i64),
    link_target: Option<PathBuf>,
    xattrs: Vec<(String, Vec<u8>)>,
}

/// Metadata of every entry below `root` (no file contents are read, so
/// atime is left alone), and the hard-link groups by relative path.
fn metadata_of_tree(root: &Path) -> (BTreeMap<PathBuf, EntryState>, Vec<Vec<PathBuf>>) {
    let mut states = BTreeMap::new();
    let mut by_inode: BTreeMap<u64, Vec<PathBuf>> = BTreeMap::new();
    for relative in common::walk(root) {
        let path = root.join(&relative);
        let meta = fs::symlink_metadata(&path).unwrap();
        let kind = if meta.is_dir() {
            "dir"
        } else if meta.file_type().is_symlink() {
            "symlink"
        } else {
            "file"
        };
        if kind == "file" {
            by_inode.entry(meta.ino()).or_default().push(relative.clone());
        }
        states.insert(
            relative,
            EntryState {
                kind,
                mode: meta.mode(),
                uid: meta.uid(),
                gid: meta.gid(),
                size: if kind == "dir" { 0 } else { meta.len() },
                nlink: if kind == "dir" { 0 } else { meta.nlink() },
                atime: (meta.atime(), meta.atime_nsec()),
                mtime: (meta.mtime(), meta.mtime_nsec()),
                link_target: (kind == "symlink").then(|| fs::read_link(&path).unwrap()),
                xattrs: if kind == "symlink" { Vec::new() } else { xattrs(&path) },
            },
        );
    }
    let groups = by_inode.into_values().filter(|g| g.len() > 1).collect();
    (states, groups)
}

fn contents_of_tree(root: &Path) -> BTreeMap<PathBuf, u64> {
    common::walk(root)
        .into_iter()
        .filter(|r| fs::symlink_metadata(root.join(r)).unwrap().is_file())
        .map(|r| {
            let hash = hash_file(&root.join(&r));
            (r, hash)
        })
        .collect()
}

/// Fill `dir` with files of many shapes, links, xattrs, modes and owners.
fn populate(dir: &Path, rng: &mut rand_chacha::ChaCha8Rng) {
    fs::create_dir_all(dir.join("nested/deeper")).unwrap();
    let sizes = [0usize, 1, 511, 4095, 4096, 65_537, 131_072, 131_073, 1 << 20, 3_000_001];
    for (index, size) in sizes.iter().enumerate() {
        let parent = if index % 3 == 0 { dir.join("nested") } else { dir.to_path_buf() };
        write_file(&parent.join(format!("file{index}")), &random_bytes(rng, *size));
    }
    // Compressible text.
    let text: Vec<u8> = "the quick brown fox jumps over the lazy dog\n".repeat(50_000).into_bytes();
    write_file(&dir.join("nested/deeper/text"), &text);
    // Sparse.
    let sparse = File::create(dir.join("sparse")).unwrap();
    sparse.write_all_at(b"head", 0).unwrap();
    sparse.write_all_at(b"tail", 64 << 20).unwrap();
    sparse.sync_all().unwrap();
    // Links.
    std::os::unix::fs::symlink("file1", dir.join("link-to-file1")).unwrap();
    std::os::unix::fs::symlink("/nowhere/at/all", dir.join("dangling")).unwrap();
    fs::hard_link(dir.join("file2"), dir.join("nested/hard-to-file2")).unwrap();
    // Metadata.
    set_xattr(&dir.join("file1"), "user.note", b"kept across export");
    set_xattr(&dir.join("nested"), "user.dir", &random_bytes(rng, 3000));
    fs::set_permissions(dir.join("file1"), fs::Permissions::from_mode(0o4751)).unwrap();
    fs::set_permissions(dir.join("nested/deeper"), fs::Permissions::from_mode(0o1777)).unwrap();
    std::os::unix::fs::chown(dir.join("file4"), Some(1001), Some(2002)).unwrap();
    std::os::unix::fs::lchown(dir.join("link-to-file1"), Some(3003), Some(4004)).unwrap();
}

/// Give every entry distinct atime/mtime with nanoseconds, children first
/// so that no later change touches a directory's times.
fn stamp_times(root: &Path) {
    let mut entries = common::walk(root);
    entries.reverse();
    for (index, relative) in entries.iter().enumerate() {
        let i = index as i64;
        set_times(&root.join(relative), (1_500_000_000 + i * 7, 100 + i), (1_600_000_000 + i * 11, 999_999_000 - i));
    }
}

/// `tarn get -j all DATASET`, flattened to path -> value, without the
/// properties that legitimately change when a pool is imported.
fn stable_properties(harness: &Harness, dataset: &str) -> BTreeMap<String, String> {
    const VOLATILE: &[&str] = &[
        "used", "available", "avail", "referenced", "refer", "logicalused", "logicalreferenced", "compressratio",
        "refcompressratio", "usedbydataset", "usedbychildren", "usedbysnapshots", "usedbyrefreservation", "written",
        "mounted", "createtxg", "guid", "output_version",
    ];
    fn flatten(value: &serde_json::Value, path: String, out: &mut BTreeMap<String, String>) {
        match value {
            serde_json::Value::Object(map) => {
                let named_volatile = ["property", "name"]
                    .iter()
                    .filter_map(|k| map.get(*k).and_then(|v| v.as_str()))
                    .any(|n| VOLATILE.contains(&n));
                if named_volatile {
                    return;
                }
                for (key, child) in map {
                    if !VOLATILE.contains(&key.as_str()) {
                        flatten(child, format!("{path}/{key}"), out);
                    }
                }
            }
            serde_json::Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    flatten(item, format!("{path}/{index}"), out);
                }
            }
            scalar => {
                out.insert(path, scalar.to_string());
            }
        }
    }
    let text = harness.tarn_ok(&["get", "-j", "all", dataset]);
    let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("get -j all is not JSON ({e}):\n{text}"));
    let mut out = BTreeMap::new();
    flatten(&json, String::new(), &mut out);
    out
}

#[test]
fn export_import_preserves_bytes_metadata_and_properties() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(1);
    let harness = Harness::start();
    let spec = raidz1(&harness, "vdevs");
    let root = harness.create_pool("rt", &spec);
    harness.tarn_ok(&["create", "-o", "compression=zstd", "-o", "recordsize=16K", "rt/a"]);
    harness.tarn_ok(&["create", "-o", "copies=2", "-o", "checksum=sha256", "rt/b"]);
    harness.tarn_ok(&["create", "-p", "rt/b/c/d"]);
    harness.tarn_ok(&["set", "atime=off", "rt/a"]);
    harness.tarn_ok(&["set", "quota=1G", "rt/b"]);
    harness.tarn_ok(&["set", "compression=lz4", "rt/b/c"]);
    for child in ["a", "b", "b/c", "b/c/d"] {
        common::wait_mounted(&root.join(child));
    }
    populate(&root.join("a"), &mut rng);
    populate(&root.join("b/c/d"), &mut rng);
    write_file(&root.join("top"), &random_bytes(&mut rng, 777_777));

    let datasets = ["rt", "rt/a", "rt/b", "rt/b/c", "rt/b/c/d"];
    let properties_before: Vec<_> = datasets.iter().map(|d| stable_properties(&harness, d)).collect();
    let a_props = properties_before[1].values().cloned().collect::<Vec<_>>().join(" ");
    assert!(a_props.contains("zstd"), "get -j all rt/a does not show compression=zstd:\n{a_props}");
    assert!(properties_before[4].values().any(|v| v.contains("lz4")), "rt/b/c/d must inherit compression=lz4");

    // Contents first (reading may update atime), then the times we check.
    let contents_before = contents_of_tree(&root);
    stamp_times(&root);
    let (metadata_before, links_before) = metadata_of_tree(&root);
    assert!(!links_before.is_empty(), "the tree has hard links to compare");

    harness.export("rt");
    for child in ["a", "b/c/d"] {
        assert!(common::mount_type(&root.join(child)).is_none(), "rt/{child} still mounted after export");
    }
    let root = harness.import("rt", &harness.dir.join("vdevs"));
    for child in ["a", "b", "b/c", "b/c/d"] {
        common::wait_mounted(&root.join(child));
    }

    let (metadata_after, links_after) = metadata_of_tree(&root);
    for (path, before) in &metadata_before {
        let after = metadata_after.get(path).unwrap_or_else(|| panic!("{} missing after import", path.display()));
        assert_eq!(after, before, "{} changed across export/import", path.display());
    }
    assert_eq!(metadata_after.len(), metadata_before.len(), "entries appeared after import");
    assert_eq!(links_after, links_before, "hard-link groups changed");
    assert_eq!(contents_of_tree(&root), contents_before, "file contents changed across export/import");
    for (dataset, before) in datasets.iter().zip(&properties_before) {
        assert_eq!(&stable_properties(&harness, dataset), before, "properties of {dataset} changed across export/import");
    }
    let out = harness.tarn(&["debug", "check", "rt"]);
    assert!(out.status.success(), "debug check after round trip:\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

const PAGE: usize = 4096;

/// xxh3 of every 4 KiB page of each device's data region.
fn page_hashes(devices: &[PathBuf]) -> Vec<Vec<u64>> {
    devices
        .iter()
        .map(|path| {
            let file = File::open(path).unwrap();
            let (start, end) = data_region(file.metadata().unwrap().len());
            let mut hashes = Vec::with_capacity(((end - start) / PAGE as u64) as usize);
            let mut buf = vec![0u8; 1 << 20];
            let mut offset = start;
            while offset < end {
                let len = ((end - offset) as usize).min(buf.len());
                file.read_exact_at(&mut buf[..len], offset).unwrap();
                hashes.extend(buf[..len].chunks(PAGE).map(xxhash_rust::xxh3::xxh3_64));
                offset += len as u64;
            }
            hashes
        })
        .collect()
}

#[test]
fn import_f_rewinds_when_the_newest_tree_is_damaged() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(2);
    let harness = Harness::start();
    let spec = raidz1(&harness, "vdevs");
    let devices: Vec<PathBuf> = spec[1..].iter().map(PathBuf::from).collect();
    let device_dir = harness.dir.join("vdevs");
    let root = harness.create_pool("rw", &spec);
    fs::create_dir(root.join("old")).unwrap();
    for index in 0..8 {
        write_file(&root.join(format!("old/f{index}")), &random_bytes(&mut rng, 100_000 * (index + 1)));
    }
    let old_contents = contents_of_tree(&root);
    harness.export("rw");
    let before = page_hashes(&devices);

    // The newer txgs: import, one new file, export.
    let root = harness.import("rw", &device_dir);
    assert_eq!(contents_of_tree(&root), old_contents);
    write_file(&root.join("new"), &random_bytes(&mut rng, 1 << 20));
    harness.export("rw");
    let after = page_hashes(&devices);

    // Zero every data-region page the newer txgs wrote.
    let mut zeroed = 0usize;
    for (device, (old, new)) in devices.iter().zip(before.iter().zip(&after)) {
        let file = common::open_rw(device);
        let (start, _) = data_region(file.metadata().unwrap().len());
        for (index, (a, b)) in old.iter().zip(new).enumerate() {
            if a != b {
                file.write_all_at(&[0u8; PAGE], start + (index * PAGE) as u64).unwrap();
                zeroed += 1;
            }
        }
        file.sync_all().unwrap();
    }
    eprintln!("rewind: zeroed {zeroed} pages written after the first export");
    assert!(zeroed >= 256, "writing a 1 MiB file changed only {zeroed} data pages");

    // Without -F the damaged newest txg is reported, not silently dropped.
    let out = harness.tarn(&["pool", "import", "-d", &path_str(&device_dir), "rw"]);
    common::assert_clean_failure(&out, "pool import of a pool whose newest tree is damaged (no -F)");
    assert_eq!(out.status.code(), Some(1));
    assert!(common::mount_type(&root).is_none(), "a failed import left a mount");

    // With -F: back to the state of the first export.
    let out = harness.tarn(&["pool", "import", "-F", "-d", &path_str(&device_dir), "rw"]);
    assert!(
        out.status.success(),
        "pool import -F failed:\n{}{}\ndaemon log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        common::tail(&harness.daemon_log(), 40)
    );
    common::wait_mounted(&root);
    assert!(!root.join("new").exists(), "the file of the discarded txgs is still there");
    assert_eq!(contents_of_tree(&root), old_contents, "rewound pool differs from the first export");
    let out = harness.tarn(&["debug", "check", "rw"]);
    assert!(out.status.success(), "debug check after rewind:\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));

    // The rewound pool is an ordinary pool again: it takes writes and
    // imports without -F.
    write_file(&root.join("after-rewind"), b"written after the rewind");
    harness.export("rw");
    let root = harness.import("rw", &device_dir);
    assert_eq!(fs::read(root.join("after-rewind")).unwrap(), b"written after the rewind");
    assert_eq!(
        contents_of_tree(&root).into_iter().filter(|(p, _)| p.starts_with("old")).collect::<BTreeMap<_, _>>(),
        old_contents
    );
}
