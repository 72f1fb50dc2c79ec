//! Giving memory back to the system.
//!
//! The allocator is chosen by the binary (`tarn` uses mimalloc), so the
//! daemon library only holds a hook the binary installs: it asks the
//! allocator to return freed memory at once instead of keeping it for
//! later allocations. The daemon calls it after an export or destroy (the
//! pool's cache, handles and buffers are gone), after tunables change
//! (a smaller ARC), and from the memory monitor.
//!
//! The memory monitor (`spawn_monitor`) keeps the ARC's target `c`
//! between `arc_min` and `arc_max`: lower while the machine is short of
//! memory, back up when it is not.

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

/// How often the memory monitor looks at the machine's free memory.
const MONITOR_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

/// The ARC's next target `c` given the machine's memory (bytes): while
/// `MemAvailable` is under 1/16 of `MemTotal`, `c` drops by the shortfall
/// (never below `arc_min`, which `set_target` enforces); otherwise it grows
/// back toward `arc_max` by 1/32 of `arc_max` per step.
pub fn next_target(c: u64, arc_max: u64, mem_total: u64, mem_available: u64) -> u64 {
    let reserve = mem_total / 16;
    if mem_available < reserve {
        c.saturating_sub(reserve - mem_available)
    } else {
        c.saturating_add((arc_max / 32).max(1 << 20)).min(arc_max)
    }
}

/// `MemTotal` of /proc/meminfo, in bytes.
pub fn mem_total() -> Option<u64> {
    meminfo().map(|(total, _)| total)
}

/// `MemTotal` and `MemAvailable` of /proc/meminfo, in bytes.
fn meminfo() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
    };
    Some((field("MemTotal:")?, field("MemAvailable:")?))
}

/// Starts the thread that lowers the ARC's target while the machine is
/// short of memory and raises it again afterwards (ZFS's arc_reap).
pub fn spawn_monitor() {
    let _ = std::thread::Builder::new().name("tarn-arc-monitor".into()).spawn(|| loop {
        std::thread::sleep(MONITOR_PERIOD);
        let Some((total, available)) = meminfo() else { continue };
        let arc = tarn_block::arc();
        let stats = arc.stats();
        let next = next_target(stats.target, stats.arc_max, total, available);
        if next != stats.target {
            arc.set_target(next);
            if next < stats.target {
                release_memory();
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_follows_free_memory() {
        let gib = 1u64 << 30;
        // Plenty free: back up toward arc_max in steps of arc_max / 32.
        assert_eq!(next_target(gib / 2, gib, 16 * gib, 8 * gib), gib / 2 + gib / 32);
        assert_eq!(next_target(gib, gib, 16 * gib, 8 * gib), gib);
        // Short by 256 MiB of the 1 GiB reserve: c drops by as much.
        assert_eq!(next_target(gib, gib, 16 * gib, gib - (256 << 20)), gib - (256 << 20));
        assert_eq!(next_target(1 << 20, gib, 16 * gib, 0), 0, "set_target clamps to arc_min");
    }
}
