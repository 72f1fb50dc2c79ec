//! Issue 13, tests 1–3 against the server alone (the daemon's volumes are
//! crates/tarn/tests/volumes.rs): real clients from Debian's packages.
//! qemu-io writes, reads and verifies patterns, discards and writes
//! zeros; qemu-img maps the holes, converts an image in and out and
//! compares; nbdinfo lists and describes; nbdcopy copies an image in and
//! out over several connections, byte-identical; fio's nbd engine writes
//! and verifies with crc32c from several jobs.

mod support;

use support::{ok, run, same_prefix_then_zeros, serve, write_random_file};

fn qemu_io(uri: &str, commands: &[&str]) -> String {
    let mut args = vec!["-f", "raw", uri];
    for c in commands {
        args.push("-c");
        args.push(c);
    }
    let out = ok("qemu-io", &args);
    assert!(!out.contains("failed") && !out.contains("error"), "qemu-io {commands:?}:\n{out}");
    assert_eq!(out.matches(" ops; ").count(), commands.len() - commands.iter().filter(|c| **c == "flush").count(), "qemu-io {commands:?}:\n{out}");
    out
}

#[test]
fn qemu_io_and_qemu_img_read_write_discard_map_convert_compare() {
    let s = serve(64 << 20);
    let uri = s.uri("tank/vol");
    qemu_io(&uri, &["write -P 0xab 0 4M", "write -P 0x11 5M 1M", "write -P 0x22 4095k 3k", "read -P 0xab 0 4095k", "read -P 0x22 4095k 3k", "read -P 0x11 5M 1M", "read -P 0 6M 1M", "flush"]);
    // A wrong pattern is noticed (the check can fail).
    let out = run("qemu-io", &["-f", "raw", &uri, "-c", "read -P 0xcd 0 64k"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Pattern verification failed") || !out.status.success(), "{text}");

    qemu_io(&uri, &["discard 1M 2M", "read -P 0 1M 2M", "read -P 0xab 0 1M", "write -z -u 5M 512k", "read -P 0 5M 512k", "read -P 0x11 5632k 512k", "write -P 0x33 7M 64k", "write -z 7M 64k", "read -P 0 7M 64k"]);
    let map = ok("qemu-img", &["map", "--output=json", "-f", "raw", &uri]);
    let entries: Vec<serde_like::Entry> = serde_like::parse(&map);
    let covering = |at: u64| entries.iter().find(|e| e.start <= at && at < e.start + e.length).unwrap_or_else(|| panic!("no map entry at {at}: {map}"));
    for at in [(1u64 << 20), 2 << 20, (3 << 20) - 1, 5 << 20, (5 << 20) + (256 << 10), 10 << 20] {
        let e = covering(at);
        assert!(!e.data && e.zero, "{at} after discard/write -z/never written: {e:?}\n{map}");
    }
    for at in [0u64, (1 << 20) - 1, 3 << 20, 4095 << 10, (5 << 20) + (512 << 10)] {
        assert!(covering(at).data, "{at} holds data: {map}");
    }

    // convert in (over the volume), compare, convert out.
    let dir = tempfile::tempdir_in(support::scratch()).unwrap();
    let src = dir.path().join("disk.img");
    write_random_file(&src, 24 << 20, 7);
    let image = std::fs::read(&src).unwrap();
    let src_s = src.to_str().unwrap();
    ok("qemu-img", &["convert", "-n", "-f", "raw", "-O", "raw", src_s, &uri]);
    let out = run("qemu-img", &["compare", "-f", "raw", "-F", "raw", src_s, &uri]);
    // The volume is larger: its tail must be zeros for `compare` to pass.
    assert!(out.status.success() || String::from_utf8_lossy(&out.stdout).contains("identical"), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let back = dir.path().join("back.img");
    ok("qemu-img", &["convert", "-f", "raw", "-O", "raw", &uri, back.to_str().unwrap()]);
    let got = std::fs::read(&back).unwrap();
    assert_eq!(got.len(), 64 << 20);
    assert!(got[..image.len()] == image[..], "converted out: other bytes than converted in");
    // After the convert the earlier patterns past the image are still there.
    assert!(got[image.len()..].iter().all(|&b| b == 0) || got[image.len()..].contains(&0x11));
    // A compare that must fail does.
    std::fs::write(&src, vec![1u8; 4096]).unwrap();
    let out = run("qemu-img", &["compare", "-f", "raw", "-F", "raw", src_s, &uri]);
    assert!(!out.status.success(), "compare of different images succeeded");
}

#[test]
fn nbdinfo_and_nbdcopy_with_several_connections() {
    let s = serve(3 << 30);
    let base = format!("nbd://127.0.0.1:{}", s.server.local_addr().port());
    let list = ok("nbdinfo", &["--list", &base]);
    assert!(list.contains("tank/vol"), "{list}");
    let info = ok("nbdinfo", &["--json", &s.uri("tank/vol")]);
    assert!(info.contains(&(3u64 << 30).to_string()), "{info}");
    assert!(info.contains("\"can_multi_conn\": true") && info.contains("base:allocation"), "{info}");

    let dir = tempfile::tempdir_in(support::scratch()).unwrap();
    let src = dir.path().join("in.img");
    write_random_file(&src, 2 << 30, 11);
    ok("nbdcopy", &["--connections=4", "--requests=16", src.to_str().unwrap(), &s.uri("tank/vol")]);
    let out = dir.path().join("out.img");
    ok("nbdcopy", &["--connections=4", &s.uri("tank/vol"), out.to_str().unwrap()]);
    assert_eq!(std::fs::metadata(&out).unwrap().len(), 3 << 30);
    assert!(same_prefix_then_zeros(&src, &out), "nbdcopy out: other bytes than nbdcopy in");
    // The check can fail: a file differing in one byte does not compare equal.
    let f = std::fs::OpenOptions::new().write(true).open(&out).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"x", 1 << 30).unwrap();
    assert!(!same_prefix_then_zeros(&src, &out));
    // The zero runs went in as holes.
    let map = ok("nbdinfo", &["--map", &s.uri("tank/vol")]);
    assert!(map.contains("hole"), "{map}");
}

#[test]
fn fio_nbd_engine_verifies_with_crc32c() {
    let s = serve(256 << 20);
    let uri = s.uri("tank/vol");
    for rw in ["randwrite", "write"] {
        ok(
            "fio",
            &[
                "--name=v",
                "--ioengine=nbd",
                &format!("--uri={uri}"),
                &format!("--rw={rw}"),
                "--bs=16k",
                "--size=32m",
                "--numjobs=3",
                "--offset_increment=64m",
                "--iodepth=8",
                "--verify=crc32c",
                "--verify_fatal=1",
                "--do_verify=1",
                "--verify_state_save=0",
            ],
        );
    }
}

/// The few fields of `qemu-img map --output=json` the test needs, parsed
/// by hand (no JSON crate in this crate's dependencies).
mod serde_like {
    #[derive(Debug)]
    pub struct Entry {
        pub start: u64,
        pub length: u64,
        pub data: bool,
        pub zero: bool,
    }

    fn field<'a>(obj: &'a str, name: &str) -> &'a str {
        let key = format!("\"{name}\":");
        let at = obj.find(&key).unwrap_or_else(|| panic!("no {name} in {obj}")) + key.len();
        let rest = obj[at..].trim_start();
        let end = rest.find([',', '}']).unwrap_or(rest.len());
        rest[..end].trim()
    }

    pub fn parse(text: &str) -> Vec<Entry> {
        text.split('{')
            .skip(1)
            .map(|obj| Entry {
                start: field(obj, "start").parse().unwrap(),
                length: field(obj, "length").parse().unwrap(),
                data: field(obj, "data") == "true",
                zero: field(obj, "zero") == "true",
            })
            .collect()
    }
}
