//! Secrets are locked in RAM, left out of core dumps and wiped in forked
//! children: seen from the kernel's side (/proc), not from our own flags.
//! Alone in its binary: VmLck is per process.

mod common;

use tarn_keys::{secret_stats, MasterKey, Secret};

#[test]
fn secrets_are_locked_undumpable_and_never_shown() {
    let before_kib = common::vm_locked_kib();
    let before = secret_stats();
    let page_kib = 4;

    let pattern: Vec<u8> = b"SECRET-BYTES-0123456789-abcdef!!".to_vec();
    let secrets: Vec<Secret> = (0..8).map(|_| Secret::from_slice(&pattern)).collect();
    let master = MasterKey::generate().expect("master");
    let held = secrets.len() as u64 + 1;

    let locked_kib = common::vm_locked_kib();
    assert!(
        locked_kib >= before_kib + held * page_kib,
        "VmLck {before_kib} -> {locked_kib} KiB for {held} secrets (is RLIMIT_MEMLOCK too low without root?)"
    );
    let stats = secret_stats();
    assert_eq!(stats.live, before.live + held);
    assert!(stats.locked_bytes >= before.locked_bytes + held * page_kib * 1024);
    assert_eq!(stats.mlock_failures, before.mlock_failures);
    assert_eq!(stats.dontdump_failures, 0);

    for secret in &secrets {
        assert!(secret.is_locked());
        assert_eq!(secret.expose(), pattern.as_slice());
        let flags = common::vm_flags(secret.expose().as_ptr() as usize);
        for flag in ["lo", "dd", "wf"] {
            assert!(flags.iter().any(|f| f == flag), "VmFlags {flags:?} lack {flag}");
        }
        let shown = format!("{secret:?} {secret:#?}");
        assert_eq!(format!("{secret:?}"), "Secret(32 bytes, locked)");
        assert!(!shown.contains("SECRET") && !shown.contains("83, 69, 67"), "{shown}");
    }
    let flags = common::vm_flags(master.bytes().as_ptr() as usize);
    assert!(flags.iter().any(|f| f == "lo") && flags.iter().any(|f| f == "dd"), "{flags:?}");
    let derived = master.derive(b"block key", 32);
    assert!(derived.is_locked());
    assert_eq!(format!("{master:?}"), "MasterKey(..)");
    assert_eq!(format!("{derived:?}"), "Secret(32 bytes, locked)");

    drop(secrets);
    drop(master);
    drop(derived);
    let after_kib = common::vm_locked_kib();
    assert_eq!(after_kib, before_kib, "dropped secrets are unlocked");
    assert_eq!(secret_stats().live, before.live);
    assert_eq!(secret_stats().locked_bytes, before.locked_bytes);
}
