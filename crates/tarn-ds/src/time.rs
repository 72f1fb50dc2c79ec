//! Creation times as `zfs get creation` prints them (local time,
//! `Mon Jan  1 12:00 2024`).

/// `creation` as `zfs get` prints it: Unix seconds with `-p`, else local time.
pub fn creation_value(unix_seconds: u64, parsable: bool) -> String {
    if parsable {
        unix_seconds.to_string()
    } else {
        format_creation(unix_seconds)
    }
}

pub fn format_creation(unix_seconds: u64) -> String {
    let time = unix_seconds as libc::time_t;
    // SAFETY: localtime_r and strftime write only into the buffers given.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&time, &mut tm).is_null() {
            return unix_seconds.to_string();
        }
        let mut buf = [0u8; 64];
        let len = libc::strftime(buf.as_mut_ptr().cast(), buf.len(), c"%a %b %e %H:%M %Y".as_ptr(), &tm);
        String::from_utf8_lossy(&buf[..len]).into_owned()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_a_date() {
        let text = super::format_creation(1_700_000_000);
        assert!(text.ends_with("2023"), "{text}");
        assert_eq!(text.split_whitespace().count(), 5, "{text}");
    }
}
