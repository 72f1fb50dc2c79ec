//! The block-device backend on a real block device: a loop device over a
//! sparse file (set up with losetup, detached at the end even on failure).
use std::path::Path;
use std::process::Command;

use tarn_dev::{Device, FileDevice};

struct Loop(String);

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
    }
}

#[test]
fn loop_device_size_io_and_exclusive_open() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("disk.img");
    std::fs::File::create(&img).unwrap().set_len(64 << 20).unwrap();
    let out = Command::new("losetup").args(["-f", "--show"]).arg(&img).output().expect("losetup runs (root, util-linux)");
    assert!(out.status.success(), "losetup: {}", String::from_utf8_lossy(&out.stderr));
    let dev = Loop(String::from_utf8(out.stdout).unwrap().trim().to_string());
    let d = FileDevice::open(Path::new(&dev.0), None).expect("open the loop device");
    assert_eq!(d.size(), 64 << 20, "size comes from BLKGETSIZE64");
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
    d.write_at(&data, (64 << 20) - 8192).unwrap();
    d.flush().unwrap();
    let mut back = vec![0u8; 8192];
    d.read_at(&mut back, (64 << 20) - 8192).unwrap();
    assert_eq!(back, data);
    assert!(d.read_at(&mut back, 64 << 20).is_err(), "past the end is an error");
    assert!(FileDevice::open(Path::new(&dev.0), None).is_err(), "a second open is refused while the first holds it");
    drop(d);
    assert!(FileDevice::open(Path::new(&dev.0), None).is_ok());
}

/// `trim` on a block device is BLKDISCARD: the loop driver passes it on to
/// its backing file as a hole punch, so the sparse file's allocated blocks
/// shrink by the discarded range and the range reads back as zeros.
#[test]
fn loop_device_trim_discards() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("disk.img");
    std::fs::File::create(&img).unwrap().set_len(64 << 20).unwrap();
    let out = Command::new("losetup").args(["-f", "--show"]).arg(&img).output().expect("losetup runs (root, util-linux)");
    assert!(out.status.success(), "losetup: {}", String::from_utf8_lossy(&out.stderr));
    let dev = Loop(String::from_utf8(out.stdout).unwrap().trim().to_string());
    let d = FileDevice::open(Path::new(&dev.0), None).expect("open the loop device");
    d.write_at(&vec![0x5au8; 16 << 20], 8 << 20).unwrap();
    d.flush().unwrap();
    let before = std::fs::metadata(&img).unwrap().blocks();
    assert!(before >= (16 << 20) / 512, "written data is allocated in the backing file: {before} blocks");
    // An unaligned range: only the whole sectors inside it are discarded.
    d.trim((10 << 20) + 100, (8 << 20) - 100).unwrap();
    d.flush().unwrap();
    let after = std::fs::metadata(&img).unwrap().blocks();
    assert!(before - after >= (7 << 20) / 512, "the backing file shrank by the discarded range: {before} -> {after} blocks");
    let mut buf = vec![1u8; 1 << 20];
    d.read_at(&mut buf, 12 << 20).unwrap();
    assert!(buf.iter().all(|&b| b == 0), "discarded range reads as zeros");
    d.read_at(&mut buf, 20 << 20).unwrap();
    assert!(buf.iter().all(|&b| b == 0x5a), "data outside the range is kept");
    let mut edge = vec![0u8; 100];
    d.read_at(&mut edge, 10 << 20).unwrap();
    assert!(edge.iter().all(|&b| b == 0x5a), "the partial sector before the range is kept");
    assert!(d.trim(64 << 20, 1).is_err(), "past the end is an error");
}
