//! Giving memory back to the system.
//!
//! The allocator is chosen by the binary (`tarn` uses mimalloc), so the
//! daemon library only holds a hook the binary installs: it asks the
//! allocator to return freed memory at once instead of keeping it for
//! later allocations. The daemon calls it after an export or destroy (the
//! pool's cache, handles and buffers are gone), after tunables change
//! (a smaller ARC), and from the memory monitor.

use std::sync::OnceLock;

static RELEASE_HOOK: OnceLock<fn()> = OnceLock::new();

/// Installs the allocator's "return free memory now" function (once).
pub fn set_release_hook(hook: fn()) {
    let _ = RELEASE_HOOK.set(hook);
}

/// Asks the allocator to give freed memory back to the system.
pub fn release_memory() {
    if let Some(hook) = RELEASE_HOOK.get() {
        hook();
    }
}
