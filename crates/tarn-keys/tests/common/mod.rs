//! /proc readers shared by the secret-memory tests (each runs in its own
//! test binary: the counters and limits they look at are per process).

/// `VmLck` of this process, in KiB.
pub fn vm_locked_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = status.lines().find(|l| l.starts_with("VmLck:")).expect("VmLck line");
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("VmLck value")
}

/// The `VmFlags` of the mapping holding `address` (`lo` locked, `dd` not
/// dumped, `wf` wiped on fork).
pub fn vm_flags(address: usize) -> Vec<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read /proc/self/smaps");
    let mut inside = false;
    for line in smaps.lines() {
        let head = line.split_whitespace().next().unwrap_or("");
        if let Some((start, end)) = head.split_once('-') {
            if let (Ok(start), Ok(end)) = (usize::from_str_radix(start, 16), usize::from_str_radix(end, 16)) {
                inside = (start..end).contains(&address);
                continue;
            }
        }
        if inside {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                return flags.split_whitespace().map(str::to_string).collect();
            }
        }
    }
    panic!("no mapping holds {address:#x}");
}
