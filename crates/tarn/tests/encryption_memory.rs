//! DESIGN invariant 9 and issue 12 in memory: keys live in locked pages
//! excluded from core dumps, never in the daemon's ordinary memory.
//!
//! A real daemon is given keys every way it takes them: passphrases typed
//! at the prompt (stdin) for `create`, `load-key` (a wrong one too) and
//! `change-key`; hex and raw keys read from key files by the daemon; a
//! raw key and a hex key typed on stdin. Then everything a core dump of
//! the daemon would hold is read — every readable mapping of
//! `/proc/<pid>/smaps` without the `dd` (`MADV_DONTDUMP`) flag, through
//! `/proc/<pid>/mem` — and searched for every passphrase and key in every
//! form it could take (bytes, hex either case, a JSON or Debug byte array,
//! base64): nothing is found.
//!
//! The search is not vacuous, two ways: a marker written to and read back
//! from an encrypted file is found in the same memory (the block cache
//! holds its plaintext), and the keys the daemon keeps on purpose (the
//! wrapping keys of loaded hex and raw roots) are found in the `dd`
//! mappings, where `Secret` puts them.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::FileExt;

use common::needles::{hex, secret_forms, Needles};
use common::{assert_no_panic, path_str, random_bytes, wait_mounted, Harness};

const PASS: &str = "memory test passphrase, typed";
const NEW_PASS: &str = "memory test passphrase, changed";
const WRONG_PASS: &str = "memory test passphrase, wrong";
const MARK: &[u8] = b"MEMORY-MARKER-4c1d-plaintext-in-the-block-cache";

fn ok_input(h: &Harness, args: &[&str], input: &[u8]) {
    let out = h.tarn_input(args, input);
    assert!(out.status.success(), "tarn {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    assert_no_panic(&out, &args.join(" "));
}

/// One mapping of a process, as `/proc/<pid>/smaps` describes it.
struct Mapping {
    start: u64,
    end: u64,
    readable: bool,
    /// `VmFlags` has `dd`: left out of core dumps.
    dontdump: bool,
    name: String,
}

fn mappings(pid: u32) -> Vec<Mapping> {
    let smaps = fs::read_to_string(format!("/proc/{pid}/smaps")).expect("read smaps");
    let mut out: Vec<Mapping> = Vec::new();
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        if let Some((start, end)) = first.split_once('-').filter(|(s, _)| s.chars().all(|c| c.is_ascii_hexdigit())) {
            let perms = words.next().unwrap_or("");
            out.push(Mapping {
                start: u64::from_str_radix(start, 16).expect("mapping start"),
                end: u64::from_str_radix(end, 16).expect("mapping end"),
                readable: perms.starts_with('r'),
                dontdump: false,
                name: words.nth(3).unwrap_or("[anon]").to_string(),
            });
        } else if first == "VmFlags:" {
            if let Some(m) = out.last_mut() {
                m.dontdump = words.any(|f| f == "dd");
            }
        }
    }
    out
}

/// What the search found: needles in dumpable memory, needles in `dd`
/// memory, and the dumpable bytes read.
struct Found {
    dumpable: BTreeSet<String>,
    dontdump: BTreeSet<String>,
    where_dumpable: Vec<String>,
    bytes: u64,
}

/// Reads every readable mapping of `pid` (in 1 MiB pieces, overlapping by
/// a needle's length) and searches it.
fn search(pid: u32, needles: &Needles, longest: usize) -> Found {
    const PIECE: u64 = 1 << 20;
    let mem = fs::File::open(format!("/proc/{pid}/mem")).expect("open /proc/<pid>/mem");
    let mut found = Found { dumpable: BTreeSet::new(), dontdump: BTreeSet::new(), where_dumpable: Vec::new(), bytes: 0 };
    let mut buf = vec![0u8; (PIECE as usize) + longest];
    for m in mappings(pid).iter().filter(|m| m.readable) {
        let mut at = m.start;
        while at < m.end {
            let len = (m.end - at).min(PIECE + longest as u64) as usize;
            // Some mappings cannot be read ([vvar], I/O memory): a core
            // dump has nothing of them either.
            if mem.read_exact_at(&mut buf[..len], at).is_err() {
                break;
            }
            let mut here = BTreeSet::new();
            if buf[..len].iter().any(|b| *b != 0) {
                needles.found_in(&buf[..len], &mut here);
            }
            if m.dontdump {
                found.dontdump.extend(here);
            } else {
                found.bytes += len.min(PIECE as usize) as u64;
                for label in &here {
                    found.where_dumpable.push(format!("{label} at {at:#x} in {} ({:#x}-{:#x})", m.name, m.start, m.end));
                }
                found.dumpable.extend(here);
            }
            at += PIECE;
        }
    }
    found
}

#[test]
fn no_key_in_the_daemons_dumpable_memory() {
    let seeded = tarn_testkit::seeded!(1);
    let mut rng = seeded.rng(9);
    let h = Harness::start();
    let vdevs = h.vdev_files("vdevs", 1, 128 << 20);
    let mnt = h.create_pool("tank", &[path_str(&vdevs[0])]);
    let keys = h.dir.join("keys");
    fs::create_dir_all(&keys).unwrap();
    let file_raw = random_bytes(&mut rng, 32);
    let file_hex = random_bytes(&mut rng, 32);
    let typed_raw = random_bytes(&mut rng, 32);
    let typed_hex = random_bytes(&mut rng, 32);
    fs::write(keys.join("raw.key"), &file_raw).unwrap();
    fs::write(keys.join("hex.key"), format!("{}\n", hex(&file_hex))).unwrap();
    let location = |name: &str| format!("keylocation=file://{}", path_str(&keys.join(name)));

    // The control's plaintext (in the unencrypted root, so unload-key
    // does not drop it from the cache): written, synced, read back.
    common::write_file(&mnt.join("marked"), &MARK.repeat(64));
    h.tarn_ok(&["pool", "sync", "tank"]);
    assert_eq!(fs::read(mnt.join("marked")).unwrap(), MARK.repeat(64));

    // Prompted passphrase, key files, a raw key on stdin.
    ok_input(&h, &["create", "-o", "encryption=on", "-o", "keyformat=passphrase", "tank/pass"], format!("{PASS}\n").as_bytes());
    h.tarn_ok(&["create", "-o", "encryption=on", "-o", "keyformat=raw", "-o", &location("raw.key"), "tank/raw"]);
    h.tarn_ok(&["create", "-o", "encryption=on", "-o", "keyformat=hex", "-o", &location("hex.key"), "tank/hex"]);
    ok_input(&h, &["create", "-o", "encryption=on", "-o", "keyformat=raw", "tank/rawin"], &typed_raw);
    wait_mounted(&mnt.join("rawin"));
    // Unloaded and loaded again: a wrong passphrase, the right one, the
    // files. The requests that carry keys come last, with nothing after
    // them to overwrite what they left (the search follows at once).
    let out = h.tarn(&["unload-key", "-a"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = h.tarn_input(&["load-key", "tank/pass"], format!("{WRONG_PASS}\n").as_bytes());
    assert_eq!(out.status.code(), Some(1), "a wrong passphrase is refused");
    ok_input(&h, &["load-key", "tank/pass"], format!("{PASS}\n").as_bytes());
    h.tarn_ok(&["load-key", "tank/raw"]);
    h.tarn_ok(&["load-key", "tank/hex"]);
    ok_input(&h, &["load-key", "tank/rawin"], &typed_raw);
    // change-key: a new passphrase typed; the raw-file root to a hex key typed.
    ok_input(&h, &["change-key", "tank/pass"], format!("{NEW_PASS}\n").as_bytes());
    let typed_digits = hex(&typed_hex).to_ascii_uppercase();
    ok_input(&h, &["change-key", "-o", "keyformat=hex", "-o", "keylocation=prompt", "tank/raw"], format!("{typed_digits}\n").as_bytes());

    let mut list = Vec::new();
    for (label, secret) in [
        ("the passphrase", PASS.as_bytes()),
        ("the new passphrase", NEW_PASS.as_bytes()),
        ("the wrong passphrase", WRONG_PASS.as_bytes()),
        ("the raw key of the key file", &file_raw[..]),
        ("the hex key of the key file", &file_hex[..]),
        ("the raw key typed", &typed_raw[..]),
        ("the hex key typed", &typed_hex[..]),
        // Hex keys are text before they are keys: the digits as typed or
        // stored travel and are read as such (so: their hex, base64…).
        ("the digits of the hex key typed", typed_digits.as_bytes()),
        ("the digits of the hex key file", hex(&file_hex).as_bytes()),
    ] {
        for (form, bytes) in secret_forms(label, secret) {
            // A freed block's first bytes are the allocator's free-list
            // link: the tail of a form is looked for too.
            if bytes.len() >= 32 {
                list.push((format!("{form} (from byte 16)"), bytes[16..].to_vec()));
            }
            list.push((form, bytes));
        }
    }
    list.push(("the marker".into(), MARK.to_vec()));
    let longest = list.iter().map(|(_, n)| n.len()).max().unwrap();
    let needles = Needles::new(list);

    let pid = h.daemon_pid().expect("the daemon runs");
    let found = search(pid, &needles, longest);
    assert!(found.bytes > 1 << 20, "only {} dumpable bytes read", found.bytes);
    // The controls: the search sees the daemon's heap, and the keys kept
    // on purpose are where they should be.
    assert!(found.dumpable.contains("the marker"), "the marker is not found in dumpable memory: the search is blind ({found:?})", found = found.dumpable);
    for kept in ["the hex key of the key file", "the raw key typed", "the hex key typed"] {
        assert!(found.dontdump.contains(kept), "{kept} is not in the daemon's undumpable memory: {:?}", found.dontdump);
    }
    let leaks: Vec<&String> = found.where_dumpable.iter().filter(|w| !w.starts_with("the marker ")).collect();
    assert!(leaks.is_empty(), "key material in memory a core dump holds:\n{}", leaks.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n"));

    // And a key's form planted in the daemon's ordinary memory (a user
    // property's value, kept in the dataset records) is found there.
    h.tarn_ok(&["set", &format!("user:planted={}", hex(&typed_raw)), "tank"]);
    let found = search(pid, &needles, longest);
    assert!(found.dumpable.contains("the raw key typed as lowercase hex"), "a planted key form not found: {:?}", found.dumpable);
}
