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
