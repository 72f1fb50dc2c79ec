//! Dates and durations as zpool prints them: `Sun Nov 22 03:10:59 2026`
//! (C's `ctime`), `Nov 22 2026 03:10:59.123` (`zpool events`), `00:01:02`.
//!
//! The zone is a parameter so tests can format fixed instants in UTC while
//! the commands print local time, as zpool does.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Zone {
    Local,
    #[cfg_attr(not(test), expect(dead_code, reason = "tests format fixed instants in UTC"))]
    Utc,
}

/// A broken-down time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Civil {
    year: i64,
    /// 1..=12
    month: u32,
    /// 1..=31
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    /// 0 = Sunday
    weekday: u32,
}

const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

fn utc(time_secs: u64) -> Civil {
    let days = (time_secs / 86_400) as i64;
    let rem = time_secs % 86_400;
    // Howard Hinnant's civil_from_days (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    Civil {
        year: yoe + era * 400 + i64::from(month <= 2),
        month,
        day,
        hour: (rem / 3600) as u32,
        minute: (rem % 3600 / 60) as u32,
        second: (rem % 60) as u32,
        // 1970-01-01 was a Thursday.
        weekday: ((days + 4).rem_euclid(7)) as u32,
    }
}

fn local(time_secs: u64) -> Option<Civil> {
    let time: libc::time_t = time_secs.try_into().ok()?;
    // SAFETY: an all-zero `tm` is a valid value (integers and a null
    // pointer); localtime_r only writes into `tm`, which outlives the call.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let result = unsafe { libc::localtime_r(&time, &mut tm) };
    if result.is_null() {
        return None;
    }
    Some(Civil {
        year: i64::from(tm.tm_year) + 1900,
        month: (tm.tm_mon + 1).clamp(1, 12) as u32,
        day: tm.tm_mday.max(1) as u32,
        hour: tm.tm_hour.max(0) as u32,
        minute: tm.tm_min.max(0) as u32,
        second: tm.tm_sec.max(0) as u32,
        weekday: tm.tm_wday.rem_euclid(7) as u32,
    })
}

fn civil(time_secs: u64, zone: Zone) -> Civil {
    match zone {
        Zone::Utc => utc(time_secs),
        Zone::Local => local(time_secs).unwrap_or_else(|| utc(time_secs)),
    }
}

/// `2026-11-22.03:10:59` (`zpool history`: strftime's `%F.%T`).
pub fn history_time(time_secs: u64, zone: Zone) -> String {
    let c = civil(time_secs, zone);
    format!("{:04}-{:02}-{:02}.{:02}:{:02}:{:02}", c.year, c.month, c.day, c.hour, c.minute, c.second)
}

/// `Sun Nov 22 03:10:59 2026` (C's `ctime` without the newline).
pub fn ctime(time_secs: u64, zone: Zone) -> String {
    let c = civil(time_secs, zone);
    format!(
        "{} {} {:>2} {:02}:{:02}:{:02} {}",
        WEEKDAYS[c.weekday as usize % 7],
        MONTHS[(c.month as usize + 11) % 12],
        c.day,
        c.hour,
        c.minute,
        c.second,
        c.year
    )
}

/// `Nov 22 2026 03:10:59.123`: the TIME column of `pool events`; always
/// 24 characters for years 1000..=9999.
pub fn event_time(time_ns: u64, zone: Zone) -> String {
    let c = civil(time_ns / 1_000_000_000, zone);
    let millis = time_ns % 1_000_000_000 / 1_000_000;
    format!(
        "{} {:>2} {} {:02}:{:02}:{:02}.{millis:03}",
        MONTHS[(c.month as usize + 11) % 12],
        c.day,
        c.year,
        c.hour,
        c.minute,
        c.second
    )
}

/// `00:01:02`, `2 days 03:04:05`: zpool's scan durations.
pub fn hms(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let text = format!("{:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60);
    match days {
        0 => text,
        1 => format!("1 day {text}"),
        n => format!("{n} days {text}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_ctime() {
        assert_eq!(ctime(0, Zone::Utc), "Thu Jan  1 00:00:00 1970");
        // 2000-02-29 (a leap day, a Tuesday) 12:34:56
        assert_eq!(ctime(951_827_696, Zone::Utc), "Tue Feb 29 12:34:56 2000");
        assert_eq!(ctime(1_795_835_459, Zone::Utc), "Sat Nov 28 03:10:59 2026");
        assert_eq!(event_time(1_795_835_459_123_456_789, Zone::Utc), "Nov 28 2026 03:10:59.123");
        assert_eq!(event_time(1_795_835_459_123_456_789, Zone::Utc).len(), 24);
        assert_eq!(event_time(1_796_008_259_000_000_000, Zone::Utc), "Nov 30 2026 03:10:59.000");
        assert_eq!(history_time(1_795_835_459, Zone::Utc), "2026-11-28.03:10:59");
        assert_eq!(history_time(951_827_696, Zone::Utc), "2000-02-29.12:34:56");
        // Local time is some valid rendering of the same instant.
        assert_eq!(ctime(1_795_835_459, Zone::Local).len(), 24);
    }

    #[test]
    fn durations() {
        assert_eq!(hms(0), "00:00:00");
        assert_eq!(hms(62), "00:01:02");
        assert_eq!(hms(86_399), "23:59:59");
        assert_eq!(hms(86_400 + 3661), "1 day 01:01:01");
        assert_eq!(hms(3 * 86_400), "3 days 00:00:00");
    }
}
