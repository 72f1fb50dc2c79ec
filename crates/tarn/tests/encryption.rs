//! Issue 12, tests 1 and 2 through the real daemon, CLI and FUSE mounts:
//! encryption roots created with each keyformat and keylocation (the
//! passphrase typed on stdin), inheritance, the properties, a wrong key
//! refused in one line with nothing mounted, unload/load, change-key,
//! export/import without and with `-l`, a daemon restart (keys in files
//! come back, prompted ones wait); and after all that, no marker, file
//! name, passphrase or key byte anywhere on the pool's devices (nor of a
//! file only the intent log held when the daemon was killed). Test 3:
//! an encrypted file's data damaged on every copy fails its reads, and
//! `pool status -v` names it.

mod common;

use std::fs;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::{assert_clean_failure, longest_run, path_str, wait_mounted, wait_unmounted, Harness};

const PASS: &str = "correct horse battery staple";
const NEW_PASS: &str = "a new passphrase for media";
const MARK: &[u8] = b"ENC-MARKER-3b8e1d-file-contents-never-on-disk";
const NAME: &str = "NAME-MARKER-tax-return-2026.pdf";
/// Written and fsynced just before the daemon is killed: on disk only in
/// the intent log's (sealed) records.
const LOG_MARK: &[u8] = b"LOG-MARKER-7f31c2-fsynced-never-synced";
const LOG_NAME: &str = "LOG-NAME-MARKER-payslip.pdf";

fn get(h: &Harness, props: &str, dataset: &str) -> Vec<String> {
    h.tarn_ok(&["get", "-H", "-o", "value", props, dataset]).lines().map(str::to_string).collect()
}

fn ok_input(h: &Harness, args: &[&str], input: &str) -> String {
    let out = h.tarn_input(args, input.as_bytes());
    assert!(
        out.status.success(),
        "tarn {} failed: {}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr),
        common::tail(&h.daemon_log(), 30)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn refused_input(h: &Harness, args: &[&str], input: &str) -> String {
    let out = h.tarn_input(args, input.as_bytes());
    assert_clean_failure(&out, &args.join(" "));
    assert_eq!(out.status.code(), Some(1), "tarn {}", args.join(" "));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn contains(path: &Path, needle: &[u8]) -> bool {
    let data = fs::read(path).unwrap();
    data.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn key_lifecycle_through_the_cli_and_no_plaintext_on_disk() {
    let mut h = Harness::start();
    let vdevs = h.vdev_files("vdevs", 2, 256 << 20);
    let mnt = h.create_pool("tank", &["mirror".into(), path_str(&vdevs[0]), path_str(&vdevs[1])]);
    let keys = h.dir.join("keys");
    fs::create_dir_all(&keys).unwrap();
    let raw_key: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
    fs::write(keys.join("media.key"), &raw_key).unwrap();
    let raw_loc = format!("file://{}", path_str(&keys.join("media.key")));

    // A passphrase root, typed (stdin), and a raw key in a file.
    ok_input(&h, &["create", "-o", "encryption=on", "-o", "keyformat=passphrase", "tank/secure"], &format!("{PASS}\n"));
    h.tarn_ok(&["create", "-o", "encryption=aes-256-gcm", "-o", "keyformat=raw", "-o", &format!("keylocation={raw_loc}"), "tank/media"]);
    h.tarn_ok(&["create", "tank/secure/docs"]);
    assert_eq!(
        get(&h, "encryption,keystatus,keyformat,keylocation,encryptionroot", "tank/secure/docs"),
        ["aes-256-gcm", "available", "passphrase", "none", "tank/secure"]
    );
    assert_eq!(get(&h, "keylocation,keyformat", "tank/media"), [raw_loc.as_str(), "raw"]);
    let docs = mnt.join("secure/docs");
    let media = mnt.join("media");
    wait_mounted(&docs);
    wait_mounted(&media);
    fs::write(docs.join(NAME), MARK.repeat(100)).unwrap();
    fs::write(media.join("film.mkv"), MARK.repeat(5000)).unwrap();
    let all = h.tarn_ok(&["get", "-H", "all", "tank/secure"]);
    assert!(!all.contains(PASS));

    // Bad requests: one line, exit 1, nothing created.
    for (args, why) in [
        (vec!["create", "-o", "encryption=off", "tank/secure/plain"], "under encrypted"),
        (vec!["create", "-o", "encryption=on", "tank/nokey"], "keyformat"),
        (vec!["create", "-o", "encryption=on", "-o", "keyformat=raw", "-o", "keylocation=file:///nonexistent/key", "tank/nokey"], "No such file"),
        (vec!["set", "encryption=off", "tank/secure"], "read-only"),
        (vec!["load-key", "tank/secure/docs"], "not an encryption root"),
        (vec!["load-key", "tank"], "not encrypted"),
    ] {
        let e = refused_input(&h, &args, "");
        assert!(e.contains(why), "{args:?}: {e}");
    }
    // A plain stream cannot land under an encrypted parent (it would be
    // received unencrypted): refused, nothing created.
    h.tarn_ok(&["snapshot", "tank@plain"]);
    let stream = h.tarn(&["send", "tank@plain"]);
    assert!(stream.status.success() && !stream.stdout.is_empty());
    let out = h.tarn_input(&["recv", "tank/secure/received"], &stream.stdout);
    assert_clean_failure(&out, "recv under an encrypted parent");
    assert!(String::from_utf8_lossy(&out.stderr).contains("is encrypted and the stream is not"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!h.tarn_ok(&["list", "-H", "-o", "name"]).contains("received"));
    // Sends: plaintext with the key (as zfs without -w), raw with -w (see
    // tests/replication.rs); -p over an encrypted dataset only raw.
    h.tarn_ok(&["snapshot", "-r", "tank/secure@s1"]);
    let plain = h.tarn(&["send", "tank/secure/docs@s1"]);
    assert!(plain.status.success() && !plain.stdout.is_empty(), "{}", String::from_utf8_lossy(&plain.stderr));
    let out = h.tarn(&["send", "-p", "tank/secure@s1"]);
    assert_clean_failure(&out, "send -p of an encrypted dataset");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("is encrypted") && e.contains("-w"), "{e}");
    assert!(out.stdout.is_empty(), "send -p wrote a stream");
    // An encrypted pool root dataset (zpool create -O encryption=on ...):
    // a short passphrase refused with no pool made, then one made, its
    // root an encryption root, its children in it.
    let more = h.vdev_files("more", 1, 128 << 20);
    let mnt2 = h.dir.join("mnt-tank2");
    let create2 = ["pool", "create", "-m", &path_str(&mnt2), "-O", "encryption=aes-128-gcm", "-O", "keyformat=passphrase", "tank2", &path_str(&more[0])];
    let e = refused_input(&h, &create2, "short\n");
    assert!(e.contains("at least 8 bytes"), "{e}");
    assert!(!h.tarn_ok(&["pool", "list", "-H", "-o", "name"]).contains("tank2"));
    ok_input(&h, &create2, &format!("{PASS}\n"));
    wait_mounted(&mnt2);
    h.tarn_ok(&["create", "tank2/child"]);
    assert_eq!(get(&h, "encryption,keyformat,encryptionroot,keystatus", "tank2/child"), ["aes-128-gcm", "passphrase", "tank2", "available"]);
    fs::write(mnt2.join("child").join(NAME), MARK).unwrap();
    h.tarn_ok(&["unload-key", "-r", "tank2"]);
    wait_unmounted(&mnt2);
    ok_input(&h, &["load-key", "tank2"], &format!("{PASS}\n"));
    h.tarn_ok(&["mount", "-a"]);
    wait_mounted(&mnt2.join("child"));
    assert_eq!(fs::read(mnt2.join("child").join(NAME)).unwrap(), MARK);
    h.tarn_ok(&["pool", "export", "tank2"]);
    wait_unmounted(&mnt2);
    assert!(!contains(&more[0], MARK) && !contains(&more[0], NAME.as_bytes()), "plaintext on tank2's device");
    let e = refused_input(&h, &["create", "-o", "encryption=on", "-o", "keyformat=passphrase", "tank/short"], "short\n");
    assert!(e.contains("passphrase must be at least 8 bytes"), "{e}");
    assert!(!h.tarn_ok(&["list", "-H", "-o", "name"]).contains("tank/short"));

    // Unload: unmounted, unreadable; a wrong passphrase mounts nothing.
    h.tarn_ok(&["unload-key", "tank/secure"]);
    wait_unmounted(&docs);
    assert_eq!(get(&h, "keystatus", "tank/secure/docs"), ["unavailable"]);
    let e = refused_input(&h, &["mount", "tank/secure/docs"], "");
    assert!(e.contains("key not loaded"), "{e}");
    let e = refused_input(&h, &["load-key", "tank/secure"], "not the passphrase\n");
    assert!(e.contains("incorrect key"), "{e}");
    assert_eq!(get(&h, "keystatus", "tank/secure"), ["unavailable"]);
    assert!(!docs.join(NAME).exists());
    ok_input(&h, &["load-key", "-n", "tank/secure"], &format!("{PASS}\n"));
    assert_eq!(get(&h, "keystatus", "tank/secure"), ["unavailable"], "-n loads nothing");
    ok_input(&h, &["load-key", "tank/secure"], &format!("{PASS}\n"));
    h.tarn_ok(&["mount", "-a"]);
    wait_mounted(&docs);
    assert_eq!(fs::read(docs.join(NAME)).unwrap(), MARK.repeat(100));

    // change-key: the raw key becomes a prompted passphrase; no data rewritten.
    ok_input(&h, &["change-key", "-o", "keyformat=passphrase", "-o", "keylocation=prompt", "tank/media"], &format!("{NEW_PASS}\n"));
    assert_eq!(get(&h, "keyformat,keylocation", "tank/media"), ["passphrase", "prompt"]);
    h.tarn_ok(&["unload-key", "tank/media"]);
    wait_unmounted(&media);
    let e = refused_input(&h, &["load-key", "-L", &raw_loc, "tank/media"], "");
    assert!(e.contains("passphrase") || e.contains("incorrect"), "{e}");
    ok_input(&h, &["load-key", "tank/media"], &format!("{NEW_PASS}\n"));
    h.tarn_ok(&["mount", "tank/media"]);
    assert_eq!(fs::read(media.join("film.mkv")).unwrap().len(), MARK.len() * 5000);

    // Export/import: nothing encrypted mounts without -l; with -l the
    // prompted keys are asked for (stdin, in order) and everything mounts.
    h.export("tank");
    let vdir = vdevs[0].parent().unwrap().to_path_buf();
    h.import("tank", &vdir);
    assert_eq!(get(&h, "keystatus", "tank/secure"), ["unavailable"]);
    assert!(!docs.join(NAME).exists());
    h.export("tank");
    // Roots in name order: tank/media, then tank/secure.
    let out = ok_input(&h, &["pool", "import", "-l", "-d", &path_str(&vdir), "tank"], &format!("{NEW_PASS}\n{PASS}\n"));
    assert!(out.contains("2 / 2 key(s) successfully loaded"), "{out}");
    wait_mounted(&docs);
    wait_mounted(&media);
    assert_eq!(fs::read(docs.join(NAME)).unwrap(), MARK.repeat(100));

    // A daemon restart: a key kept in a file comes back by itself.
    h.tarn_ok(&["unload-key", "tank/media"]);
    ok_input(&h, &["change-key", "-l", "-o", "keyformat=raw", "-o", &format!("keylocation={raw_loc}"), "tank/media"], &format!("{NEW_PASS}\n"));
    h.kill_and_restart();
    wait_mounted(&media);
    assert_eq!(get(&h, "keystatus", "tank/media"), ["available"]);
    assert_eq!(get(&h, "keystatus", "tank/secure"), ["unavailable"]);
    assert_eq!(fs::read(media.join("film.mkv")).unwrap().len(), MARK.len() * 5000);

    // Test 5 with the intent log: an fsynced file of an encrypted dataset
    // survives a daemon killed before any txg carried it (txg_timeout an
    // hour), through its log records, which are sealed (the scan below).
    h.tarn_ok(&["tunable", "set", "txg_timeout=3600"]);
    h.tarn_ok(&["pool", "sync", "tank"]);
    {
        let mut f = fs::File::create(media.join(LOG_NAME)).unwrap();
        f.write_all(&LOG_MARK.repeat(50)).unwrap();
        f.sync_all().unwrap();
    }
    h.kill_and_restart();
    wait_mounted(&media);
    assert_eq!(fs::read(media.join(LOG_NAME)).unwrap(), LOG_MARK.repeat(50), "an fsynced file lost with the daemon");
    h.tarn_ok(&["tunable", "set", "txg_timeout=5"]);

    // Test 2: no plaintext on disk.
    h.export("tank");
    for v in &vdevs {
        for (what, needle) in [
            ("contents", MARK),
            ("a file name", NAME.as_bytes()),
            ("logged contents", LOG_MARK),
            ("a logged file name", LOG_NAME.as_bytes()),
            ("the passphrase", PASS.as_bytes()),
            ("the new passphrase", NEW_PASS.as_bytes()),
            ("the raw key", &raw_key[..]),
        ] {
            assert!(!contains(v, needle), "{what} found on {}", v.display());
        }
    }
    // The same scan finds plaintext where there is some: the control.
    h.import("tank", &vdir);
    fs::write(mnt.join(NAME), MARK).unwrap();
    h.export("tank");
    assert!(vdevs.iter().all(|v| contains(v, MARK) && contains(v, NAME.as_bytes())), "the scan finds plaintext of an unencrypted dataset");
}

/// Issue 12, test 3 through the daemon: pages of an encrypted file's data
/// are overwritten on both sides of a mirror (no copy can repair them).
/// Reading the damaged record fails with EIO, every other record reads
/// back what was written (nothing returns wrong plaintext), another file
/// reads, a scrub counts the damage, and `pool status -v` names the file:
/// by its path while the key is loaded, as `dataset:<0x…>` once it is
/// unloaded (the name is content: not shown without the key).
#[test]
fn tampered_encrypted_data_fails_its_reads_and_status_names_the_file() {
    const VICTIM: &str = "VICTIM-quarterly-report.ods";
    const RECORD: usize = 128 << 10;
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(12);
    let h = Harness::start();
    let vdevs = h.vdev_files("vdevs", 2, 128 << 20);
    let vdir = vdevs[0].parent().unwrap().to_path_buf();
    h.create_pool("tank", &["mirror".into(), path_str(&vdevs[0]), path_str(&vdevs[1])]);
    let key = h.dir.join("secret.key");
    fs::write(&key, common::random_bytes(&mut rng, 32)).unwrap();
    let loc = format!("keylocation=file://{}", path_str(&key));
    h.tarn_ok(&["create", "-o", "encryption=aes-256-gcm", "-o", "keyformat=raw", "-o", &loc, "-o", "compression=off", "tank/secret"]);
    let ds = h.mountpoint("tank").join("secret");
    wait_mounted(&ds);
    let bystander = common::random_bytes(&mut rng, 1 << 20);
    common::write_file(&ds.join("bystander"), &bystander);
    h.export("tank");
    let before: std::collections::HashSet<u64> = common::written_pages(&vdevs[0]).into_iter().collect();

    // The victim, written in a session of its own: its data is the longest
    // run of pages written then.
    h.tarn_ok(&["pool", "import", "-l", "-d", &path_str(&vdir), "tank"]);
    wait_mounted(&ds);
    let victim = common::random_bytes(&mut rng, 8 << 20);
    common::write_file(&ds.join(VICTIM), &victim);
    h.export("tank");
    let fresh: Vec<u64> = common::written_pages(&vdevs[0]).into_iter().filter(|p| !before.contains(p)).collect();
    let (start, len) = longest_run(&fresh);
    assert!(len >= 256, "no run of 1 MiB among the pages the victim's session wrote (longest {len} pages)");
    let at = start + (len as u64 / 2) * 4096;
    let copies: Vec<std::fs::File> = vdevs.iter().map(|v| common::open_rw(v)).collect();
    let mut pages = [vec![0u8; 4096], vec![0u8; 4096]];
    for (f, p) in copies.iter().zip(pages.iter_mut()) {
        f.read_exact_at(p, at).unwrap();
    }
    assert_eq!(pages[0], pages[1], "the mirror's sides differ at the page chosen");
    assert!(!victim.windows(64).any(|w| w == &pages[0][..64]), "the victim's plaintext on the device");
    let junk = common::random_bytes(&mut rng, 4096);
    for f in &copies {
        f.write_all_at(&junk, at).unwrap();
        f.sync_all().unwrap();
    }

    h.tarn_ok(&["pool", "import", "-l", "-d", &path_str(&vdir), "tank"]);
    wait_mounted(&ds);
    let err = fs::read(ds.join(VICTIM)).expect_err("a damaged file read whole");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    let f = fs::File::open(ds.join(VICTIM)).unwrap();
    let (mut good, mut bad) = (0, 0);
    for (i, want) in victim.chunks(RECORD).enumerate() {
        let mut got = vec![0u8; want.len()];
        match f.read_exact_at(&mut got, (i * RECORD) as u64) {
            Ok(()) => {
                assert!(got == want, "record {i} read back other bytes than were written");
                good += 1;
            }
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EIO), "record {i}: {e}");
                bad += 1;
            }
        }
    }
    assert!(bad >= 1 && good >= victim.len() / RECORD - 2, "{bad} records failed, {good} read");
    assert_eq!(fs::read(ds.join("bystander")).unwrap(), bystander);
    h.tarn_ok(&["pool", "scrub", "-w", "tank"]);
    let status = h.pool_json("tank");
    assert!(status["scan_stats"]["errors"].as_u64().unwrap_or(0) > 0, "{status:#}");
    let text = h.tarn_ok(&["pool", "status", "-v", "tank"]);
    assert!(text.contains(&path_str(&ds.join(VICTIM))), "{text}");
    // Without the key the file is named by its object, not its name.
    drop(f);
    h.tarn_ok(&["unload-key", "tank/secret"]);
    wait_unmounted(&ds);
    let text = h.tarn_ok(&["pool", "status", "-v", "tank"]);
    assert!(!text.contains(VICTIM) && text.contains("tank/secret:<0x"), "{text}");
}

/// The label config's version field (label copy 0).
fn label_version(device: &Path) -> u32 {
    let mut v = [0u8; 4];
    fs::File::open(device).unwrap().read_exact_at(&mut v, 8192 + 8).unwrap();
    u32::from_le_bytes(v)
}

/// Rewrites every label of `device` with `edit` applied to its config.
fn edit_labels(device: &Path, edit: impl Fn(&mut tarn_vdev::PoolConfig)) {
    let dev = tarn_dev::FileDevice::open(device, None).unwrap();
    let mut label = tarn_vdev::read_label(&*dev).unwrap();
    edit(&mut label.config);
    tarn_vdev::write_label(&*dev, &label).unwrap();
}

/// `feature@encryption`: `enabled` until the first encrypted dataset, then
/// `active`, recorded in the labels (version 2, which binaries from before
/// features refuse). A pool whose labels name a feature this tarn does not
/// know is refused at import in one line, its devices untouched.
#[test]
fn the_encryption_feature_is_recorded_and_unknown_features_are_refused() {
    let h = Harness::start();
    let vdevs = h.vdev_files("vdevs", 2, 128 << 20);
    let device_dir = h.dir.join("vdevs");
    h.create_pool("tank", &["mirror".into(), path_str(&vdevs[0]), path_str(&vdevs[1])]);
    let feature = |h: &Harness| h.tarn_ok(&["pool", "get", "-H", "-o", "value", "feature@encryption", "tank"]).trim().to_string();
    assert_eq!(feature(&h), "enabled");
    assert!(h.tarn_ok(&["pool", "get", "-H", "-o", "property", "all", "tank"]).lines().any(|l| l == "feature@encryption"));
    let e = common::refused(&h, &["pool", "set", "feature@encryption=enabled", "tank"], 1);
    assert!(e.contains("read-only"), "{e}");
    h.export("tank");
    assert!(vdevs.iter().all(|d| label_version(d) == 1), "a pool using no feature keeps version-1 labels");

    h.import("tank", &device_dir);
    let key = h.dir.join("k");
    fs::write(&key, [7u8; 32]).unwrap();
    h.tarn_ok(&["create", "-o", "encryption=on", "-o", "keyformat=raw", "-o", &format!("keylocation=file://{}", path_str(&key)), "tank/secret"]);
    assert_eq!(feature(&h), "active");
    fs::write(h.mountpoint("tank").join("secret/f"), MARK).unwrap();
    h.export("tank");
    for d in &vdevs {
        assert_eq!(label_version(d), 2, "{}", d.display());
        let label = tarn_vdev::read_label(&*tarn_dev::FileDevice::open(d, None).unwrap()).unwrap();
        assert!(label.config.features.contains("encryption"), "{:?}", label.config.features);
    }

    // A feature from the future: refused in one line, nothing written.
    for d in &vdevs {
        edit_labels(d, |c| {
            c.features.insert("zstd_dict".into());
        });
    }
    let before: Vec<Vec<u8>> = vdevs.iter().map(|d| fs::read(d).unwrap()).collect();
    let e = common::refused(&h, &["pool", "import", "-d", &path_str(&device_dir), "tank"], 1);
    assert!(e.contains("feature 'zstd_dict'") && e.contains("newer tarn"), "{e}");
    assert!(before.iter().zip(&vdevs).all(|(b, d)| fs::read(d).unwrap() == *b), "a refused import changed a device");
    for d in &vdevs {
        edit_labels(d, |c| {
            c.features.remove("zstd_dict");
        });
    }
    h.import("tank", &device_dir);
    h.tarn_ok(&["load-key", "tank/secret"]);
    h.tarn_ok(&["mount", "tank/secret"]);
    wait_mounted(&h.mountpoint("tank").join("secret"));
    assert_eq!(fs::read(h.mountpoint("tank").join("secret/f")).unwrap(), MARK);
    assert_eq!(feature(&h), "active");
}

/// `change-key` through the CLI on a dataset that is not an encryption
/// root (it becomes one: a new passphrase asked for), and `change-key -i`
/// (it joins its parent's root again); the mounts keep serving throughout
/// and a daemon restart needs exactly the keys the roots say.
#[test]
fn change_key_moves_datasets_between_roots_through_the_cli() {
    let mut h = Harness::start();
    let vdevs = h.vdev_files("vdevs", 1, 128 << 20);
    let mnt = h.create_pool("tank", &[path_str(&vdevs[0])]);
    let key = h.dir.join("secure.key");
    fs::write(&key, [0x42u8; 32]).unwrap();
    h.tarn_ok(&["create", "-o", "encryption=on", "-o", "keyformat=raw", "-o", &format!("keylocation=file://{}", path_str(&key)), "tank/secure"]);
    h.tarn_ok(&["create", "-p", "tank/secure/home/kid"]);
    let kid = mnt.join("secure/home/kid");
    wait_mounted(&kid);
    fs::write(kid.join("homework.txt"), MARK).unwrap();

    let e = refused_input(&h, &["change-key", "-i", "tank/secure/home"], "");
    assert!(e.contains("not an encryption root"), "{e}");
    let e = refused_input(&h, &["change-key", "-i", "tank/secure"], "");
    assert!(e.contains("parent 'tank' is not encrypted"), "{e}");
    let e = refused_input(&h, &["change-key", "tank"], "");
    assert!(e.contains("not encrypted"), "{e}");
    let out = h.tarn(&["change-key", "-i", "-o", "keyformat=raw", "tank/secure"]);
    assert_eq!(out.status.code(), Some(2), "-i with -o is a usage error");

    // tank/secure/home becomes a root with a prompted passphrase.
    ok_input(&h, &["change-key", "-o", "keyformat=passphrase", "tank/secure/home"], &format!("{PASS}\n"));
    assert_eq!(get(&h, "encryptionroot,keyformat,keylocation", "tank/secure/home"), ["tank/secure/home", "passphrase", "prompt"]);
    assert_eq!(get(&h, "encryptionroot", "tank/secure/home/kid"), ["tank/secure/home"]);
    assert_eq!(fs::read(kid.join("homework.txt")).unwrap(), MARK, "the mount kept serving");
    h.kill_and_restart();
    wait_mounted(&mnt.join("secure"));
    assert_eq!(get(&h, "keystatus", "tank/secure/home/kid"), ["unavailable"], "its key is a passphrase now, not the file");
    ok_input(&h, &["load-key", "tank/secure/home"], &format!("{PASS}\n"));
    h.tarn_ok(&["mount", "-a"]);
    wait_mounted(&kid);
    assert_eq!(fs::read(kid.join("homework.txt")).unwrap(), MARK);

    // -i: back under tank/secure, whose key file opens it all again.
    h.tarn_ok(&["change-key", "-i", "tank/secure/home"]);
    assert_eq!(get(&h, "encryptionroot,keylocation", "tank/secure/home"), ["tank/secure", "none"]);
    h.kill_and_restart();
    wait_mounted(&kid);
    assert_eq!(get(&h, "keystatus", "tank/secure/home/kid"), ["available"]);
    assert_eq!(fs::read(kid.join("homework.txt")).unwrap(), MARK);
}
