//! When the kernel refuses to lock a secret (RLIMIT_MEMLOCK at 0, no
//! CAP_IPC_LOCK), the secret still works, is still left out of core
//! dumps, and the refusal is counted for the daemon to report.
//! Alone in its binary: it lowers the process's limit.

mod common;

use tarn_keys::{secret_stats, unwrap, wrap, Kdf, KeyFormat, KeyMaterial, MasterKey, Secret, WrappingKey};

const CAP_IPC_LOCK: u32 = 14;
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Drops CAP_IPC_LOCK from this thread's effective set (root has it;
/// mlock checks the calling thread's credentials).
fn drop_ipc_lock() {
    let mut header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget/capset with a v3 header and two data structs, as the
    // kernel's ABI documents; both point to live locals.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header as *mut CapHeader, data.as_mut_ptr()) };
    assert_eq!(rc, 0, "capget: {}", std::io::Error::last_os_error());
    data[0].effective &= !(1 << CAP_IPC_LOCK);
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut CapHeader, data.as_ptr()) };
    assert_eq!(rc, 0, "capset: {}", std::io::Error::last_os_error());
}

#[test]
fn secrets_work_and_are_counted_when_mlock_is_refused() {
    let zero = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: setrlimit with a valid struct.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &zero) }, 0, "setrlimit");
    drop_ipc_lock();

    let before = secret_stats();
    let secret = Secret::from_slice(b"still a secret");
    assert!(!secret.is_locked(), "mlock succeeded without the limit or the capability");
    assert_eq!(secret.expose(), b"still a secret");
    assert_eq!(format!("{secret:?}"), "Secret(14 bytes, not locked)");
    let flags = common::vm_flags(secret.expose().as_ptr() as usize);
    assert!(flags.iter().any(|f| f == "dd"), "not dumped even when not locked: {flags:?}");
    assert!(!flags.iter().any(|f| f == "lo"), "{flags:?}");
    assert_eq!(secret_stats().mlock_failures, before.mlock_failures + 1);

    // The whole path works unlocked: wrap and unwrap (each makes secrets).
    let master = MasterKey::generate().expect("master");
    let material = KeyMaterial::from_bytes(KeyFormat::Raw, &[3; 32]).expect("raw");
    let wrapping = WrappingKey::new(&material, Kdf::None).expect("wrapping key");
    let blob = wrap(&master, &wrapping, b"root").expect("wrap");
    assert_eq!(unwrap(&blob, &material, b"root").expect("unwrap").bytes(), master.bytes());
    let stats = secret_stats();
    assert!(stats.mlock_failures >= before.mlock_failures + 5, "{stats:?}");
    assert_eq!(stats.locked_bytes, 0, "nothing locked: {stats:?}");
    assert_eq!(common::vm_locked_kib(), 0);
}
