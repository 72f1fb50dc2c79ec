//! Issue 12 through the real daemon, CLI and FUSE mounts, the parts
//! `tests/encryption.rs` leaves open:
//!
//! 1. `hex_and_passphrase_keys_from_files_and_prompts_and_wrong_keys_refused`:
//!    roots with `keyformat=hex` (64 digits in a key file, and typed on
//!    stdin in upper case) and a passphrase read from a key file mount and
//!    read back after export and `pool import -l`; a wrong raw key of the
//!    right length, a wrong hex key, a malformed hex key and a wrong
//!    passphrase in the key file are refused in one line (exit 1) with
//!    nothing mounted, and `pool import -l` with a wrong key file imports
//!    the pool, opens the other roots and leaves that one shut.
//! 2. `no_key_material_in_logs_state_listings_or_history_and_xattrs_sealed`:
//!    after creating, loading (also with wrong keys), unloading and
//!    changing passphrase, raw and hex keys, and a daemon restart, none of
//!    the key material (as bytes, hex, a JSON/Debug byte array or base64)
//!    is in the daemon's log, any file of its state directory, `pool
//!    history`, `get [-j] all`, `list -j -o all`, `pool status -j` and the
//!    other reports; nor on the devices, where the names and values of
//!    xattrs written into an encrypted dataset are not either (the same
//!    scan finds them when the dataset is not encrypted).
//! 3. `scrub_replace_resilver_and_check_with_the_key_unloaded`: on a
//!    mirror whose encrypted dataset's key is unloaded, `debug check`,
//!    `pool scrub -w` and a `pool replace` resilver all work; the data read
//!    back after load-key is what was written, also from the new device
//!    alone and from the new device with the untouched one.
//! 4. `a_plaintext_send_of_an_encrypted_dataset_needs_its_key`: `send`
//!    without `-w` works with the key (the stream receives into a plain
//!    dataset), is refused in one line without it, and what it wrote is
//!    not receivable; `send -w` needs no key and carries no plaintext.
//!    `a_refused_plaintext_send_writes_nothing_to_stdout`: nothing at all
//!    reaches stdout (the keys are checked before the stream begins).
//! 5. `compression_happens_before_encryption`: highly compressible text in
//!    an encrypted lz4 dataset shows `compressratio` > 2 and `used` well
//!    below `logicalused`, about as an unencrypted lz4 dataset does, and
//!    its marker is on no device (the plain dataset's marker is: the scan
//!    sees through lz4).
//!
//! Reproduce: `TARN_SEED=<seed> cargo test -p tarn --test encryption_keys`.

mod common;

use std::collections::{BTreeSet, HashMap};

use common::needles::{hex, secret_forms, Needles};
use std::ffi::CString;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{assert_clean_failure, assert_no_panic, mount_type, path_str, random_bytes, refused, wait_mounted, wait_unmounted, Harness};

// ---------------------------------------------------------------------------
// Helpers.

fn get(h: &Harness, props: &str, dataset: &str) -> Vec<String> {
    h.tarn_ok(&["get", "-H", "-o", "value", props, dataset]).lines().map(str::to_string).collect()
}

fn ok_input(h: &Harness, args: &[&str], input: &[u8]) -> String {
    let out = h.tarn_input(args, input);
    assert!(
        out.status.success(),
        "tarn {} failed ({}): {}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr),
        common::tail(&h.daemon_log(), 30)
    );
    assert_no_panic(&out, &args.join(" "));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Exit 1 with one `tarn: ` line on stderr; returns that line.
fn refused_input(h: &Harness, args: &[&str], input: &[u8]) -> String {
    let out = h.tarn_input(args, input);
    assert_clean_failure(&out, &args.join(" "));
    assert_eq!(out.status.code(), Some(1), "tarn {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn file_location(path: &Path) -> String {
    format!("file://{}", path_str(path))
}

/// Every regular file under `dir`, recursively (not following symlinks).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap_or_else(|e| panic!("read_dir {}: {e}", d.display())) {
            let path = entry.expect("dir entry").path();
            let meta = fs::symlink_metadata(&path).expect("lstat");
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_encoded_bytes()).expect("path without NUL")
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) {
    let n = CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings and a live buffer of value.len() bytes.
    let r = unsafe { libc::setxattr(cpath(p).as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(r, 0, "setxattr {} {name}: {}", p.display(), std::io::Error::last_os_error());
}

fn get_xattr(p: &Path, name: &str) -> Vec<u8> {
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 64 << 10];
    // SAFETY: valid NUL-terminated strings and a live buffer of buf.len() bytes.
    let r = unsafe { libc::getxattr(cpath(p).as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r >= 0, "getxattr {} {name}: {}", p.display(), std::io::Error::last_os_error());
    buf.truncate(r as usize);
    buf
}

/// `dataset`'s key is not loaded and nothing of it is mounted, not even by
/// `mount -a`; mounting it by name is refused.
fn assert_shut(h: &Harness, dataset: &str, mountpoint: &Path) {
    assert_eq!(get(h, "keystatus", dataset), ["unavailable"], "{dataset}");
    assert!(mount_type(mountpoint).is_none(), "{dataset} is mounted without its key");
    h.tarn_ok(&["mount", "-a"]);
    assert!(mount_type(mountpoint).is_none(), "mount -a mounted {dataset} without its key");
    let e = refused(h, &["mount", dataset], 1);
    assert!(e.contains("key not loaded"), "{e}");
}

/// The leaf of `status` whose path is `file`: its state.
fn leaf_state(status: &serde_json::Value, file: &Path) -> Option<String> {
    common::device_counters(status).into_iter().find(|d| Path::new(&d.name) == file).map(|d| d.state)
}

fn num(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().or_else(|| v[key].as_str().and_then(|s| s.parse().ok())).unwrap_or_else(|| panic!("no number '{key}' in {v:#}"))
}

fn scan_done(status: &serde_json::Value, function: &str) -> bool {
    let s = &status["scan_stats"];
    s["function"].as_str().is_some_and(|f| f.eq_ignore_ascii_case(function)) && s["state"].as_str().is_some_and(|st| st.eq_ignore_ascii_case("finished"))
}

/// No device of `status` counts an error.
fn assert_no_device_errors(status: &serde_json::Value, what: &str) {
    for d in common::device_counters(status) {
        assert_eq!((d.read_errors, d.write_errors, d.checksum_errors), (0, 0, 0), "{what}: {} counts errors: {status:#}", d.name);
    }
}

fn check_clean(h: &Harness, pool: &str, what: &str) {
    let out = h.tarn_ok(&["debug", "check", pool]);
    assert!(out.contains("no damage, leaks or double allocations found"), "{what}: {out}");
}

// ---------------------------------------------------------------------------
// 1. Key formats through the CLI.

#[test]
fn hex_and_passphrase_keys_from_files_and_prompts_and_wrong_keys_refused() {
    const FILE_PASS: &str = "a passphrase kept in a key file, 1201";
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(1201);
    let h = Harness::start();
    let vdevs = h.vdev_files("vdevs", 1, 128 << 20);
    let vdir = vdevs[0].parent().unwrap().to_path_buf();
    let mnt = h.create_pool("tank", &[path_str(&vdevs[0])]);
    let keys = h.dir.join("keys");
    fs::create_dir_all(&keys).unwrap();
    let hex_key = hex(&random_bytes(&mut rng, 32));
    // Typed in upper case: hex digits are case-insensitive.
    let typed_hex = hex(&random_bytes(&mut rng, 32)).to_ascii_uppercase();
    let raw_key = random_bytes(&mut rng, 32);
    let (hex_file, pass_file, raw_file) = (keys.join("hex.key"), keys.join("pass.key"), keys.join("raw.key"));
    fs::write(&hex_file, format!("{hex_key}\n")).unwrap();
    fs::write(&pass_file, format!("{FILE_PASS}\n")).unwrap();
    fs::write(&raw_file, &raw_key).unwrap();

    h.tarn_ok(&["create", "-o", "encryption=on", "-o", "keyformat=hex", "-o", &format!("keylocation={}", file_location(&hex_file)), "tank/hexfile"]);
    ok_input(&h, &["create", "-o", "encryption=aes-128-gcm", "-o", "keyformat=hex", "tank/hexprompt"], format!("{typed_hex}\n").as_bytes());
    h.tarn_ok(&["create", "-o", "encryption=aes-256-gcm", "-o", "keyformat=passphrase", "-o", &format!("keylocation={}", file_location(&pass_file)), "tank/passfile"]);
    h.tarn_ok(&["create", "-o", "encryption=on", "-o", "keyformat=raw", "-o", &format!("keylocation={}", file_location(&raw_file)), "tank/rawfile"]);
    let props = "encryption,keyformat,keylocation,encryptionroot,keystatus";
    let hex_loc = file_location(&hex_file);
    let pass_loc = file_location(&pass_file);
    let raw_loc = file_location(&raw_file);
    for (ds, want) in [
        ("tank/hexfile", ["aes-256-gcm", "hex", hex_loc.as_str(), "tank/hexfile", "available"]),
        ("tank/hexprompt", ["aes-128-gcm", "hex", "prompt", "tank/hexprompt", "available"]),
        ("tank/passfile", ["aes-256-gcm", "passphrase", pass_loc.as_str(), "tank/passfile", "available"]),
        ("tank/rawfile", ["aes-256-gcm", "raw", raw_loc.as_str(), "tank/rawfile", "available"]),
    ] {
        assert_eq!(get(&h, props, ds), want, "{ds}");
    }
    let names = ["hexfile", "hexprompt", "passfile", "rawfile"];
    let mut contents = HashMap::new();
    for name in names {
        let dir = mnt.join(name);
        wait_mounted(&dir);
        let data = random_bytes(&mut rng, 300_000);
        common::write_file(&dir.join("data.bin"), &data);
        contents.insert(name, data);
    }
    let read_all = |what: &str| {
        for name in names {
            let dir = mnt.join(name);
            wait_mounted(&dir);
            assert!(fs::read(dir.join("data.bin")).unwrap() == contents[name], "{what}: tank/{name} reads back other bytes");
        }
    };

    // Export, then `import -l`: the key files are read, the typed hex key
    // asked for (stdin), everything mounts and reads back.
    h.export("tank");
    h.import("tank", &vdir);
    for name in names {
        assert_shut(&h, &format!("tank/{name}"), &mnt.join(name));
    }
    h.export("tank");
    ok_input(&h, &["pool", "import", "-l", "-d", &path_str(&vdir), "tank"], format!("{typed_hex}\n").as_bytes());
    for name in names {
        assert_eq!(get(&h, "keystatus", &format!("tank/{name}")), ["available"], "tank/{name} after import -l");
    }
    read_all("after export and import -l");

    // A wrong raw key of the right length in the key file.
    let wrong_raw = random_bytes(&mut rng, 32);
    assert_ne!(wrong_raw, raw_key);
    h.tarn_ok(&["unload-key", "tank/rawfile"]);
    wait_unmounted(&mnt.join("rawfile"));
    fs::write(&raw_file, &wrong_raw).unwrap();
    let e = refused(&h, &["load-key", "tank/rawfile"], 1);
    assert!(e.contains("tank/rawfile") && e.contains("incorrect key"), "{e}");
    assert_shut(&h, "tank/rawfile", &mnt.join("rawfile"));
    let e = refused(&h, &["load-key", "-n", "tank/rawfile"], 1);
    assert!(e.contains("incorrect key"), "{e}");
    fs::write(&raw_file, &raw_key[..31]).unwrap();
    let e = refused(&h, &["load-key", "tank/rawfile"], 1);
    assert!(e.contains("32 bytes"), "{e}");
    assert_shut(&h, "tank/rawfile", &mnt.join("rawfile"));
    // The same wrong key given on stdin (-L prompt) is refused too.
    let e = refused_input(&h, &["load-key", "-L", "prompt", "tank/rawfile"], &wrong_raw);
    assert!(e.contains("incorrect key"), "{e}");
    assert_shut(&h, "tank/rawfile", &mnt.join("rawfile"));

    // A wrong hex key (64 good digits), then a malformed one, in the file.
    let wrong_hex = hex(&random_bytes(&mut rng, 32));
    assert_ne!(wrong_hex, hex_key);
    h.tarn_ok(&["unload-key", "tank/hexfile"]);
    wait_unmounted(&mnt.join("hexfile"));
    fs::write(&hex_file, format!("{wrong_hex}\n")).unwrap();
    let e = refused(&h, &["load-key", "tank/hexfile"], 1);
    assert!(e.contains("tank/hexfile") && e.contains("incorrect key"), "{e}");
    assert_shut(&h, "tank/hexfile", &mnt.join("hexfile"));
    fs::write(&hex_file, format!("zz{}\n", &hex_key[2..])).unwrap();
    let e = refused(&h, &["load-key", "tank/hexfile"], 1);
    assert!(e.contains("hex key must be 64 hex digits"), "{e}");
    fs::write(&hex_file, &hex_key[1..]).unwrap();
    let e = refused(&h, &["load-key", "tank/hexfile"], 1);
    assert!(e.contains("hex key must be 64 hex digits"), "{e}");
    assert_shut(&h, "tank/hexfile", &mnt.join("hexfile"));

    // A wrong hex key typed at the prompt.
    h.tarn_ok(&["unload-key", "tank/hexprompt"]);
    wait_unmounted(&mnt.join("hexprompt"));
    let e = refused_input(&h, &["load-key", "tank/hexprompt"], format!("{wrong_hex}\n").as_bytes());
    assert!(e.contains("incorrect key"), "{e}");
    let e = refused_input(&h, &["load-key", "tank/hexprompt"], format!("{}\n", &typed_hex[..63]).as_bytes());
    assert!(e.contains("hex key must be 64 hex digits"), "{e}");
    assert_shut(&h, "tank/hexprompt", &mnt.join("hexprompt"));

    // A wrong passphrase in the key file.
    h.tarn_ok(&["unload-key", "tank/passfile"]);
    wait_unmounted(&mnt.join("passfile"));
    fs::write(&pass_file, "not the passphrase that was set\n").unwrap();
    let e = refused(&h, &["load-key", "tank/passfile"], 1);
    assert!(e.contains("tank/passfile") && e.contains("incorrect key"), "{e}");
    assert_shut(&h, "tank/passfile", &mnt.join("passfile"));

    // The right keys open everything again.
    fs::write(&raw_file, &raw_key).unwrap();
    fs::write(&hex_file, format!("{hex_key}\n")).unwrap();
    fs::write(&pass_file, format!("{FILE_PASS}\n")).unwrap();
    for ds in ["tank/rawfile", "tank/hexfile", "tank/passfile"] {
        h.tarn_ok(&["load-key", ds]);
    }
    ok_input(&h, &["load-key", "tank/hexprompt"], typed_hex.to_ascii_lowercase().as_bytes());
    h.tarn_ok(&["mount", "-a"]);
    read_all("after the right keys");

    // `pool import -l` with a wrong key file: the pool imports and the
    // other roots open; that one stays shut, and the command says so.
    fs::write(&raw_file, &wrong_raw).unwrap();
    h.export("tank");
    let out = h.tarn_input(&["pool", "import", "-l", "-d", &path_str(&vdir), "tank"], format!("{typed_hex}\n").as_bytes());
    assert_no_panic(&out, "pool import -l");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "import -l with a wrong key file: {stderr}");
    assert!(stderr.contains("tank/rawfile") && stderr.contains("incorrect key"), "{stderr}");
    for name in ["hexfile", "hexprompt", "passfile"] {
        let dir = mnt.join(name);
        wait_mounted(&dir);
        assert!(fs::read(dir.join("data.bin")).unwrap() == contents[name], "tank/{name} after import -l");
    }
    assert_shut(&h, "tank/rawfile", &mnt.join("rawfile"));
}

// ---------------------------------------------------------------------------
// 2. No key material where it must not be.

#[test]
fn no_key_material_in_logs_state_listings_or_history_and_xattrs_sealed() {
    const PASS: &str = "purple monkey dishwasher, 1202";
    const NEW_PASS: &str = "a changed passphrase for tank/pass";
    const WRONG_PASS: &str = "purple monkey dishwashers, 1202";
    const FILE_PASS: &str = "the passphrase in pass.key, 1202";
    const NAME_MARK: &str = "XATTR-NAME-MARKER-4c1d9e";
    const VALUE_MARK: &[u8] = b"XATTR-VALUE-MARKER-9a7f20-owner-is-alice";
    const FILE_NAME: &str = "FILE-NAME-MARKER-e61b-payroll.xlsx";
    let small_name = format!("user.{NAME_MARK}-small");
    let large_name = format!("user.{NAME_MARK}-large");
    // Larger than a value kept in the xattr map: an object of its own.
    let large_value = VALUE_MARK.repeat(200);
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(1202);
    let mut h = Harness::start();
    let vdevs = h.vdev_files("vdevs", 2, 128 << 20);
    let vdir = vdevs[0].parent().unwrap().to_path_buf();
    let mnt = h.create_pool("tank", &["mirror".into(), path_str(&vdevs[0]), path_str(&vdevs[1])]);
    let keys = h.dir.join("keys");
    fs::create_dir_all(&keys).unwrap();
    let raw = random_bytes(&mut rng, 32);
    let raw_in = random_bytes(&mut rng, 32);
    let wrong_raw = random_bytes(&mut rng, 32);
    let hex_bytes = random_bytes(&mut rng, 32);
    let hex2_bytes = random_bytes(&mut rng, 32);
    let (hex_text, hex2_text) = (hex(&hex_bytes), hex(&hex2_bytes));
    let (raw_file, hex_file, hex2_file, pass_file) = (keys.join("raw.key"), keys.join("hex.key"), keys.join("hex2.key"), keys.join("pass.key"));
    fs::write(&raw_file, &raw).unwrap();
    fs::write(&hex_file, format!("{hex_text}\n")).unwrap();
    fs::write(&hex2_file, &hex2_text).unwrap();
    fs::write(&pass_file, format!("{FILE_PASS}\n")).unwrap();

    // Four roots: a typed passphrase, a raw key file, a hex key file, a
    // raw key on stdin; a child inheriting the first.
    ok_input(&h, &["create", "-o", "encryption=on", "-o", "keyformat=passphrase", "tank/pass"], format!("{PASS}\n").as_bytes());
    h.tarn_ok(&["create", "-o", "encryption=on", "-o", "keyformat=raw", "-o", &format!("keylocation={}", file_location(&raw_file)), "tank/raw"]);
    h.tarn_ok(&["create", "-o", "encryption=on", "-o", "keyformat=hex", "-o", &format!("keylocation={}", file_location(&hex_file)), "tank/hex"]);
    ok_input(&h, &["create", "-o", "encryption=aes-128-gcm", "-o", "keyformat=raw", "tank/rawin"], &raw_in);
    h.tarn_ok(&["create", "tank/pass/child"]);

    // Content, a file name and xattrs (small and large) in tank/pass/child.
    let child = mnt.join("pass/child");
    wait_mounted(&child);
    let carrier = child.join(FILE_NAME);
    common::write_file(&carrier, b"some content");
    set_xattr(&carrier, &small_name, VALUE_MARK);
    set_xattr(&carrier, &large_name, &large_value);
    assert_eq!(get_xattr(&carrier, &small_name), VALUE_MARK);
    assert!(get_xattr(&carrier, &large_name) == large_value, "the large xattr reads back other bytes");
    for ds in ["raw", "hex", "rawin"] {
        wait_mounted(&mnt.join(ds));
        common::write_file(&mnt.join(ds).join("f"), ds.as_bytes());
    }
    h.tarn_ok(&["snapshot", "-r", "tank@one"]);

    // Loads (wrong, -n, right), unloads and key changes.
    h.tarn_ok(&["unload-key", "-r", "tank/pass"]);
    wait_unmounted(&mnt.join("pass"));
    let e = refused_input(&h, &["load-key", "tank/pass"], format!("{WRONG_PASS}\n").as_bytes());
    assert!(e.contains("incorrect key"), "{e}");
    ok_input(&h, &["load-key", "-n", "tank/pass"], format!("{PASS}\n").as_bytes());
    ok_input(&h, &["load-key", "tank/pass"], format!("{PASS}\n").as_bytes());
    h.tarn_ok(&["unload-key", "tank/rawin"]);
    let e = refused_input(&h, &["load-key", "tank/rawin"], &wrong_raw);
    assert!(e.contains("incorrect key"), "{e}");
    ok_input(&h, &["load-key", "tank/rawin"], &raw_in);
    h.tarn_ok(&["mount", "-a"]);
    ok_input(&h, &["change-key", "tank/pass"], format!("{NEW_PASS}\n").as_bytes());
    h.tarn_ok(&["change-key", "-o", "keyformat=hex", "-o", &format!("keylocation={}", file_location(&hex2_file)), "tank/raw"]);
    h.tarn_ok(&["change-key", "-o", "keyformat=passphrase", "-o", &format!("keylocation={}", file_location(&pass_file)), "tank/hex"]);
    let out = h.tarn_ok(&["unload-key", "-a"]);
    assert!(out.contains("4 / 4 key(s) successfully unloaded"), "{out}");
    ok_input(&h, &["load-key", "tank/pass"], format!("{NEW_PASS}\n").as_bytes());
    ok_input(&h, &["load-key", "tank/rawin"], &raw_in);
    let out = h.tarn_ok(&["load-key", "-a"]);
    assert!(out.contains("2 / 2 key(s) successfully loaded"), "{out}");
    h.tarn_ok(&["mount", "-a"]);
    wait_mounted(&child);
    assert_eq!(get_xattr(&carrier, &small_name), VALUE_MARK);

    // A daemon restart (it loads the key files itself), an export and an
    // import: more chances to log or keep something.
    h.kill_and_restart();
    wait_mounted(&mnt.join("raw"));
    assert_eq!(get(&h, "keystatus", "tank/hex"), ["available"]);
    assert_eq!(get(&h, "keystatus", "tank/pass"), ["unavailable"]);
    ok_input(&h, &["load-key", "tank/pass"], format!("{NEW_PASS}\n").as_bytes());
    ok_input(&h, &["load-key", "tank/rawin"], &raw_in);
    h.tarn_ok(&["mount", "-a"]);
    h.export("tank");
    // The prompted roots in name order: tank/pass (a line), tank/rawin
    // (the rest of stdin).
    let input = [format!("{NEW_PASS}\n").as_bytes(), &raw_in].concat();
    ok_input(&h, &["pool", "import", "-l", "-d", &path_str(&vdir), "tank"], &input);
    wait_mounted(&child);
    wait_mounted(&mnt.join("rawin"));
    assert!(get_xattr(&carrier, &large_name) == large_value, "the large xattr after import");
    assert_eq!(fs::read(mnt.join("raw/f")).unwrap(), b"raw");

    let mut secrets = Vec::new();
    for (label, secret) in [
        ("the passphrase", PASS.as_bytes()),
        ("the new passphrase", NEW_PASS.as_bytes()),
        ("the wrong passphrase", WRONG_PASS.as_bytes()),
        ("the passphrase of the key file", FILE_PASS.as_bytes()),
        ("the raw key", &raw[..]),
        ("the raw key given on stdin", &raw_in[..]),
        ("the wrong raw key", &wrong_raw[..]),
        ("the hex key's digits", hex_text.as_bytes()),
        ("the hex key", &hex_bytes[..]),
        ("the second hex key's digits", hex2_text.as_bytes()),
        ("the second hex key", &hex2_bytes[..]),
    ] {
        secrets.extend(secret_forms(label, secret));
    }
    let secrets = Needles::new(secrets);
    // The search finds what is there (its own check).
    let upper = hex2_text.to_ascii_uppercase();
    let planted = [&b"xx"[..], &raw[..], &b"yy"[..], upper.as_bytes()].concat();
    let want: BTreeSet<String> = ["the raw key", "the second hex key as uppercase hex"].map(String::from).into();
    assert_eq!(secrets.find(&planted), want);

    // Everything the CLI reports.
    let mut sinks: Vec<(String, Vec<u8>)> = Vec::new();
    let reports: &[&[&str]] = &[
        &["pool", "history", "tank"],
        &["pool", "history", "-i", "-l", "tank"],
        &["get", "all", "-r", "tank"],
        &["get", "-j", "all", "-r", "tank"],
        &["get", "-H", "-p", "all", "-r", "tank"],
        &["get", "-j", "all", "tank/pass"],
        &["get", "all", "tank/raw"],
        &["get", "-j", "all", "tank/hex"],
        &["get", "-j", "all", "tank/rawin"],
        &["list", "-j", "-o", "all", "-t", "all", "-r", "tank"],
        &["list", "-j", "-r", "tank"],
        &["list", "-H", "-o", "name,encryption,keyformat,keylocation,keystatus,encryptionroot", "-r", "tank"],
        &["pool", "status", "-j"],
        &["pool", "status", "-v", "tank"],
        &["pool", "list", "-j", "-v"],
        &["pool", "get", "-j", "all", "tank"],
        &["pool", "events", "-j", "tank"],
        &["debug", "check", "tank"],
    ];
    for &args in reports {
        sinks.push((format!("`tarn {}`", args.join(" ")), h.tarn_ok(args).into_bytes()));
    }
    // The reports are the real thing: the key properties are in them.
    for (what, text) in sinks.iter().filter(|(what, _)| what.starts_with("`tarn get") || what.contains("-o all") || what.contains("keyformat")) {
        let text = String::from_utf8_lossy(text);
        assert!(text.contains("keyformat") || text.contains("passphrase"), "{what} shows no key property:\n{text}");
    }
    let history = String::from_utf8_lossy(&sinks[0].1).into_owned();
    assert!(
        history.contains("tarn create -o encryption=on -o keyformat=passphrase tank/pass") && history.contains("tarn change-key tank/pass"),
        "the history records the key commands (without their keys):\n{history}"
    );
    let state_files = files_under(&h.state_dir);
    assert!(!state_files.is_empty(), "no file in the state dir {}", h.state_dir.display());
    for file in &state_files {
        sinks.push((format!("state file {}", file.display()), fs::read(file).unwrap()));
    }
    let log = h.daemon_log();
    assert!(log.contains("re-imported pool 'tank'"), "the daemon log is the daemon's:\n{log}");
    sinks.push(("the daemon's log".into(), log.into_bytes()));
    let leaks: Vec<String> = sinks
        .iter()
        .flat_map(|(what, text)| secrets.find(text).into_iter().map(move |s| format!("{s} in {what}")))
        .collect();
    assert!(leaks.is_empty(), "key material where it must not be:\n{}", leaks.join("\n"));

    // The devices: no key material, no xattr name or value, no file name.
    h.export("tank");
    let mut on_disk = secrets.list.clone();
    on_disk.push(("an xattr name".into(), NAME_MARK.as_bytes().to_vec()));
    on_disk.push(("an xattr value".into(), VALUE_MARK.to_vec()));
    on_disk.push(("a file name".into(), FILE_NAME.as_bytes().to_vec()));
    let on_disk = Needles::new(on_disk);
    for v in &vdevs {
        let found = on_disk.find_on_device(v);
        assert!(found.is_empty(), "on {}: {found:?}", v.display());
    }

    // The control: the same names and xattrs in an unencrypted dataset are
    // found by the same scan.
    let plain = h.import("tank", &vdir).join("plain");
    h.tarn_ok(&["create", "-o", "compression=off", "tank/plain"]);
    wait_mounted(&plain);
    let carrier = plain.join(FILE_NAME);
    common::write_file(&carrier, b"some content");
    set_xattr(&carrier, &small_name, VALUE_MARK);
    set_xattr(&carrier, &large_name, &large_value);
    h.export("tank");
    for v in &vdevs {
        let found = on_disk.find_on_device(v);
        for what in ["an xattr name", "an xattr value", "a file name"] {
            assert!(found.contains(what), "the scan does not find {what} of an unencrypted dataset on {}: {found:?}", v.display());
        }
    }
}

// ---------------------------------------------------------------------------
// 3. Scrub, resilver, replace and check with the key unloaded.

#[test]
fn scrub_replace_resilver_and_check_with_the_key_unloaded() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(1203);
    let h = Harness::start();
    let vdevs = h.vdev_files("vdevs", 2, 128 << 20);
    let vdir = vdevs[0].parent().unwrap().to_path_buf();
    let mnt = h.create_pool("tank", &["mirror".into(), path_str(&vdevs[0]), path_str(&vdevs[1])]);
    let key = h.dir.join("secret.key");
    fs::write(&key, random_bytes(&mut rng, 32)).unwrap();
    h.tarn_ok(&["create", "-o", "encryption=on", "-o", "keyformat=raw", "-o", &format!("keylocation={}", file_location(&key)), "-o", "compression=off", "tank/secret"]);
    let ds = mnt.join("secret");
    wait_mounted(&ds);
    fs::create_dir(ds.join("dir")).unwrap();
    let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    for i in 0..6 {
        files.push((PathBuf::from(format!("big{i}")), random_bytes(&mut rng, 1 << 20)));
    }
    for i in 0..40 {
        let len = 100 + (i * 997) % 20_000;
        files.push((PathBuf::from(format!("dir/small{i}")), random_bytes(&mut rng, len)));
    }
    for (rel, data) in &files {
        common::write_file(&ds.join(rel), data);
    }
    let data_bytes: u64 = files.iter().map(|(_, d)| d.len() as u64).sum();
    let verify = |what: &str| {
        for (rel, data) in &files {
            let got = fs::read(ds.join(rel)).unwrap_or_else(|e| panic!("{what}: read {}: {e}", rel.display()));
            assert!(got == *data, "{what}: {} reads back other bytes", rel.display());
        }
    };
    h.tarn_ok(&["pool", "sync", "tank"]);
    h.tarn_ok(&["unload-key", "tank/secret"]);
    wait_unmounted(&ds);
    assert_eq!(get(&h, "keystatus", "tank/secret"), ["unavailable"]);

    // Without the key: check, scrub.
    check_clean(&h, "tank", "debug check with the key unloaded");
    h.tarn_ok(&["pool", "scrub", "-w", "tank"]);
    let status = h.pool_json("tank");
    assert!(scan_done(&status, "scrub"), "{status:#}");
    let scan = &status["scan_stats"];
    assert_eq!(num(scan, "errors"), 0, "{status:#}");
    assert!(num(scan, "examined") >= data_bytes, "the scrub examined less than the encrypted data: {scan:#}");
    assert_no_device_errors(&status, "after the scrub");

    // Replace one side with a new file: the resilver copies the
    // encrypted blocks without their key.
    let new_dir = h.dir.join("newside");
    fs::create_dir_all(&new_dir).unwrap();
    let new = new_dir.join("n0");
    fs::File::create(&new).unwrap().set_len(128 << 20).unwrap();
    let started = Instant::now();
    h.tarn_ok(&["pool", "replace", "tank", &path_str(&vdevs[1]), &path_str(&new)]);
    let status = h.wait_status("tank", Duration::from_secs(50), "the replace's resilver done", |s| {
        s["state"] == "ONLINE" && scan_done(s, "resilver") && leaf_state(s, &vdevs[1]).is_none()
    });
    eprintln!("replace and resilver: {:.1} s", started.elapsed().as_secs_f64());
    assert_eq!(leaf_state(&status, &new).as_deref(), Some("ONLINE"), "{status:#}");
    assert_eq!(leaf_state(&status, &vdevs[0]).as_deref(), Some("ONLINE"), "{status:#}");
    let scan = &status["scan_stats"];
    assert_eq!(num(scan, "errors"), 0, "{status:#}");
    assert!(num(scan, "resilvered") >= data_bytes, "resilvered less than the encrypted data ({data_bytes} bytes): {scan:#}");
    assert_no_device_errors(&status, "after the resilver");
    assert_eq!(get(&h, "keystatus", "tank/secret"), ["unavailable"], "the key stayed unloaded");
    assert!(mount_type(&ds).is_none());
    check_clean(&h, "tank", "debug check after the resilver");
    h.tarn_ok(&["pool", "scrub", "-w", "tank"]);
    let status = h.pool_json("tank");
    assert!(scan_done(&status, "scrub") && num(&status["scan_stats"], "errors") == 0, "{status:#}");
    assert_no_device_errors(&status, "the scrub after the resilver");

    // The key: everything as written.
    h.tarn_ok(&["load-key", "tank/secret"]);
    h.tarn_ok(&["mount", "tank/secret"]);
    wait_mounted(&ds);
    verify("after the resilver");

    // The old side leaves; the new side alone holds everything…
    h.export("tank");
    let retired = h.dir.join("retired");
    fs::create_dir_all(&retired).unwrap();
    fs::rename(&vdevs[1], retired.join("d1")).unwrap();
    let parked = h.dir.join("parked");
    fs::create_dir_all(&parked).unwrap();
    fs::rename(&vdevs[0], parked.join("d0")).unwrap();
    h.tarn_ok(&["pool", "import", "-l", "-d", &path_str(&new_dir), "tank"]);
    wait_mounted(&ds);
    let status = h.pool_json("tank");
    assert_eq!(status["state"], "DEGRADED", "{status:#}");
    verify("from the new device alone");
    check_clean(&h, "tank", "debug check on the new device alone");
    h.export("tank");
    // …and with the untouched side back, the pair.
    fs::rename(parked.join("d0"), &vdevs[0]).unwrap();
    h.tarn_ok(&["pool", "import", "-l", "-d", &path_str(&vdir), "-d", &path_str(&new_dir), "tank"]);
    wait_mounted(&ds);
    let status = h.wait_status("tank", Duration::from_secs(30), "both sides ONLINE, no scan running", |s| {
        s["state"] == "ONLINE" && s["scan_stats"]["state"].as_str() != Some("scanning")
    });
    assert_eq!(leaf_state(&status, &vdevs[0]).as_deref(), Some("ONLINE"), "{status:#}");
    assert_eq!(leaf_state(&status, &new).as_deref(), Some("ONLINE"), "{status:#}");
    verify("from the new device and the other");
    h.tarn_ok(&["pool", "scrub", "-w", "tank"]);
    let status = h.pool_json("tank");
    assert!(scan_done(&status, "scrub") && num(&status["scan_stats"], "errors") == 0, "{status:#}");
    assert_no_device_errors(&status, "the last scrub");
    check_clean(&h, "tank", "the last debug check");
}

// ---------------------------------------------------------------------------
// 4. A plaintext send needs the key.

#[test]
fn a_plaintext_send_of_an_encrypted_dataset_needs_its_key() {
    const MARK: &[u8] = b"SEND-MARKER-0d5c17-only-in-plaintext-streams";
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(1204);
    let h = Harness::start();
    let vdevs = h.vdev_files("vdevs", 1, 128 << 20);
    let mnt = h.create_pool("tank", &[path_str(&vdevs[0])]);
    let key = h.dir.join("secret.key");
    fs::write(&key, random_bytes(&mut rng, 32)).unwrap();
    h.tarn_ok(&["create", "-o", "encryption=on", "-o", "keyformat=raw", "-o", &format!("keylocation={}", file_location(&key)), "-o", "compression=off", "tank/secret"]);
    let ds = mnt.join("secret");
    wait_mounted(&ds);
    let first = MARK.repeat(1000);
    common::write_file(&ds.join("a"), &first);
    h.tarn_ok(&["snapshot", "tank/secret@s"]);
    let second = random_bytes(&mut rng, 200_000);
    common::write_file(&ds.join("b"), &second);
    h.tarn_ok(&["snapshot", "tank/secret@t"]);

    // With the key: a plaintext stream (as zfs without -w), which an
    // unencrypted dataset receives.
    let stream = h.tarn(&["send", "tank/secret@s"]);
    assert!(stream.status.success() && !stream.stdout.is_empty(), "send with the key: {}", String::from_utf8_lossy(&stream.stderr));
    ok_input(&h, &["recv", "tank/copy"], &stream.stdout);
    wait_mounted(&mnt.join("copy"));
    assert!(fs::read(mnt.join("copy/a")).unwrap() == first, "the plaintext stream received other bytes");
    assert_eq!(get(&h, "encryption", "tank/copy"), ["off"]);

    // Without: refused in one line naming the key; whatever reached stdout
    // is no stream (nothing on stdout at all: the test after this one).
    h.tarn_ok(&["unload-key", "tank/secret"]);
    wait_unmounted(&ds);
    let before = h.tarn_ok(&["list", "-H", "-o", "name", "-t", "all", "-r", "tank"]);
    for args in [
        vec!["send", "tank/secret@s"],
        vec!["send", "tank/secret@t"],
        vec!["send", "-i", "@s", "tank/secret@t"],
        vec!["send", "-I", "@s", "tank/secret@t"],
    ] {
        let out = h.tarn(&args[..]);
        let what = args.join(" ");
        assert_clean_failure(&out, &what);
        assert_eq!(out.status.code(), Some(1), "{what}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains("key"), "{what}: the error does not say the key is missing: {e}");
        if !out.stdout.is_empty() {
            let r = h.tarn_input(&["recv", "tank/leak"], &out.stdout);
            assert_clean_failure(&r, &format!("recv of what a refused `{what}` wrote"));
        }
    }
    assert_eq!(h.tarn_ok(&["list", "-H", "-o", "name", "-t", "all", "-r", "tank"]), before, "a refused send changed the datasets");
    assert_eq!(get(&h, "keystatus", "tank/secret"), ["unavailable"]);
    assert!(mount_type(&ds).is_none());

    // -w needs no key, and its stream carries no plaintext.
    let raw = h.tarn(&["send", "-w", "tank/secret@s"]);
    assert!(raw.status.success() && !raw.stdout.is_empty(), "send -w without the key: {}", String::from_utf8_lossy(&raw.stderr));
    assert!(Needles::new(vec![("the marker".into(), MARK.to_vec())]).find(&raw.stdout).is_empty(), "plaintext in a raw stream");

    // With the key back, the plaintext send works again.
    h.tarn_ok(&["load-key", "tank/secret"]);
    let stream = h.tarn(&["send", "-i", "@s", "tank/secret@t"]);
    assert!(stream.status.success() && !stream.stdout.is_empty(), "send -i with the key: {}", String::from_utf8_lossy(&stream.stderr));
    ok_input(&h, &["recv", "-F", "tank/copy"], &stream.stdout);
    wait_mounted(&mnt.join("copy"));
    assert!(fs::read(mnt.join("copy/b")).unwrap() == second, "the incremental plaintext stream received other bytes");
}

// ---------------------------------------------------------------------------
// 5. Compression before encryption.

#[test]
fn compression_happens_before_encryption() {
    const ENC_MARK: &str = "COMPRESS-MARKER-ENCRYPTED-77e2a1";
    const PLAIN_MARK: &str = "COMPRESS-MARKER-PLAIN-0b93f4";
    const SIZE: usize = 8 << 20;
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(1205);
    let h = Harness::start();
    let vdevs = h.vdev_files("vdevs", 1, 128 << 20);
    let mnt = h.create_pool("tank", &[path_str(&vdevs[0])]);
    let key = h.dir.join("secret.key");
    fs::write(&key, random_bytes(&mut rng, 32)).unwrap();
    h.tarn_ok(&["create", "-o", "encryption=on", "-o", "keyformat=raw", "-o", &format!("keylocation={}", file_location(&key)), "-o", "compression=lz4", "tank/secret"]);
    h.tarn_ok(&["create", "-o", "compression=lz4", "tank/plain"]);
    let text = |mark: &str| {
        let line = format!("{mark}: the quick brown fox jumps over the lazy dog, over and over again.\n");
        line.repeat(SIZE / line.len())
    };
    let secret_text = text(ENC_MARK);
    let plain_text = text(PLAIN_MARK);
    for (ds, data) in [("secret", &secret_text), ("plain", &plain_text)] {
        wait_mounted(&mnt.join(ds));
        common::write_file(&mnt.join(ds).join("notes.txt"), data.as_bytes());
    }
    h.tarn_ok(&["pool", "sync", "tank"]);
    let space = |ds: &str| -> (f64, u64, u64) {
        let v = h.tarn_ok(&["get", "-H", "-p", "-o", "value", "compressratio,used,logicalused", ds]);
        let v: Vec<&str> = v.lines().collect();
        assert_eq!(v.len(), 3, "{v:?}");
        (v[0].trim_end_matches('x').parse().unwrap(), v[1].parse().unwrap(), v[2].parse().unwrap())
    };
    let (ratio, used, logical) = space("tank/secret");
    let (plain_ratio, plain_used, plain_logical) = space("tank/plain");
    eprintln!("encrypted: {ratio}x, used {used}, logicalused {logical}; plain: {plain_ratio}x, used {plain_used}, logicalused {plain_logical}");
    assert!(logical >= (secret_text.len() as u64) * 9 / 10, "logicalused {logical} for {} bytes written", secret_text.len());
    assert!(ratio > 2.0, "compressratio {ratio} of an encrypted lz4 dataset of repeated text");
    assert!(used < logical / 2, "used {used} not well below logicalused {logical}");
    assert!(ratio >= plain_ratio * 0.8, "encrypted {ratio}x against {plain_ratio}x unencrypted: compression suffers from encryption");
    assert!(fs::read(mnt.join("secret/notes.txt")).unwrap() == secret_text.as_bytes(), "the encrypted file reads back other bytes");

    h.export("tank");
    let needles = Needles::new(vec![("the encrypted dataset's marker".into(), ENC_MARK.as_bytes().to_vec()), ("the plain dataset's marker".into(), PLAIN_MARK.as_bytes().to_vec())]);
    let found = needles.find_on_device(&vdevs[0]);
    assert!(!found.contains("the encrypted dataset's marker"), "plaintext of the encrypted dataset on the device");
    assert!(found.contains("the plain dataset's marker"), "the scan does not find the lz4-compressed plain marker: {found:?}");
}

/// A refused plaintext send writes nothing: `tarn send fs@snap > file` with
/// the key unloaded must not leave a beginning of a stream in `file` (the
/// daemon checks the keys of every dataset sent as plaintext before it
/// writes the package header, as zfs refuses before writing).
#[test]
fn a_refused_plaintext_send_writes_nothing_to_stdout() {
    let h = Harness::start();
    let vdevs = h.vdev_files("vdevs", 1, 128 << 20);
    let mnt = h.create_pool("tank", &[path_str(&vdevs[0])]);
    let key = h.dir.join("secret.key");
    fs::write(&key, [0x5au8; 32]).unwrap();
    h.tarn_ok(&["create", "-o", "encryption=on", "-o", "keyformat=raw", "-o", &format!("keylocation={}", file_location(&key)), "tank/secret"]);
    wait_mounted(&mnt.join("secret"));
    common::write_file(&mnt.join("secret/f"), b"contents");
    h.tarn_ok(&["snapshot", "tank/secret@s"]);
    h.tarn_ok(&["unload-key", "tank/secret"]);
    wait_unmounted(&mnt.join("secret"));
    let out = h.tarn(&["send", "tank/secret@s"]);
    assert_clean_failure(&out, "send tank/secret@s without the key");
    assert!(
        out.stdout.is_empty(),
        "a refused send (stderr: {}) wrote {} bytes to stdout, beginning {:?}",
        String::from_utf8_lossy(&out.stderr).trim_end(),
        out.stdout.len(),
        String::from_utf8_lossy(&out.stdout[..out.stdout.len().min(80)])
    );
}
