//! Sizes as users type them (`128K`, `1.5G`, `131072`) and as ZFS prints
//! them (`1.21K`, `45.3M`, `2G`).

/// Parse a size: a decimal number with an optional unit `K M G T P E`
/// (powers of 1024, case-insensitive), optionally followed by `B` or `iB`.
/// A bare `B` suffix means bytes. Returns `None` for anything else or on
/// overflow.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if number.is_empty() || number == "." {
        return None;
    }
    let unit = unit.to_ascii_uppercase();
    let unit = unit.strip_suffix("IB").or_else(|| unit.strip_suffix('B').filter(|u| !u.is_empty())).unwrap_or(&unit);
    let shift = match unit {
        "" | "B" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        "P" => 50,
        "E" => 60,
        _ => return None,
    };
    if number.contains('.') {
        let value: f64 = number.parse().ok()?;
        let bytes = value * (1u64 << shift) as f64;
        if !bytes.is_finite() || bytes >= u64::MAX as f64 {
            return None;
        }
        Some(bytes as u64)
    } else {
        let value: u64 = number.parse().ok()?;
        value.checked_mul(1u64 << shift)
    }
}

/// ZFS's `zfs_nicenum` family: fit a number in at most five characters.
fn nicenum(value: u64, units: &[&str; 7]) -> String {
    let mut index = 0;
    let mut scaled = value;
    while scaled >= 1024 && index < units.len() - 1 {
        scaled /= 1024;
        index += 1;
    }
    let unit = units[index];
    let divisor = 1u64 << (10 * index);
    if index == 0 || value.is_multiple_of(divisor) {
        return format!("{scaled}{unit}");
    }
    let exact = value as f64 / divisor as f64;
    for precision in (0..=2).rev() {
        let text = format!("{exact:.precision$}{unit}");
        if text.len() <= 5 {
            return text;
        }
    }
    format!("{exact:.0}{unit}")
}

/// Bytes as `zfs list` prints them: `512B`, `1.21K`, `45.3M`, `2G`.
pub fn format_bytes(value: u64) -> String {
    nicenum(value, &["B", "K", "M", "G", "T", "P", "E"])
}

/// Numbers as `zpool list` prints them: `512`, `1.21K`, `3.75G`.
pub fn format_number(value: u64) -> String {
    nicenum(value, &["", "K", "M", "G", "T", "P", "E"])
}

/// A ratio as `compressratio` prints it: `1.00x`.
pub fn format_ratio(hundredths: u64) -> String {
    format!("{}.{:02}x", hundredths / 100, hundredths % 100)
}

/// `logical / physical` in hundredths, never below 1.00x and 1.00x when
/// nothing is stored.
pub fn ratio_hundredths(logical: u64, physical: u64) -> u64 {
    if physical == 0 || logical <= physical {
        return 100;
    }
    ((logical as u128 * 100) / physical as u128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes_as_zfs_does() {
        assert_eq!(parse_size("131072"), Some(131072));
        assert_eq!(parse_size("128K"), Some(131072));
        assert_eq!(parse_size("128k"), Some(131072));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("1MB"), Some(1 << 20));
        assert_eq!(parse_size("1MiB"), Some(1 << 20));
        assert_eq!(parse_size("1.5G"), Some(3 << 29));
        assert_eq!(parse_size("10T"), Some(10 << 40));
        assert_eq!(parse_size("512B"), Some(512));
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size("12Q"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("1.2.3"), None);
        assert_eq!(parse_size("99999999E"), None);
    }

    #[test]
    fn formats_like_zfs_nicenum() {
        assert_eq!(format_bytes(0), "0B");
        assert_eq!(format_bytes(512), "512B");
        assert_eq!(format_bytes(1024), "1K");
        assert_eq!(format_bytes(1239), "1.21K");
        assert_eq!(format_bytes(131072), "128K");
        assert_eq!(format_bytes(47_500_000), "45.3M");
        assert_eq!(format_bytes(2 << 30), "2G");
        assert_eq!(format_bytes((2 << 30) + 1), "2.00G");
        assert_eq!(format_bytes(10239), "10.0K");
        assert_eq!(format_bytes(1023 * 1024 + 1000), "1024K");
        assert_eq!(format_number(0), "0");
        assert_eq!(format_number(16 << 30), "16G");
        assert_eq!(format_number(u64::MAX), "16.0E");
    }

    #[test]
    fn ratios() {
        assert_eq!(format_ratio(ratio_hundredths(0, 0)), "1.00x");
        assert_eq!(format_ratio(ratio_hundredths(300, 100)), "3.00x");
        assert_eq!(format_ratio(ratio_hundredths(150, 100)), "1.50x");
        assert_eq!(format_ratio(ratio_hundredths(100, 150)), "1.00x");
    }
}
