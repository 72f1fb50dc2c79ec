//! The daemon's config file (TOML).
//!
//! ```toml
//! [tunables]
//! arc_max = "2G"          # bytes, or a size string
//! arc_min = "32M"
//! dirty_data_max = 536870912   # default: a tenth of RAM, 64M to 4G
//! dirty_data_sync_percent = 25  # a txg sync starts at this share of it
//! txg_timeout = 5         # seconds
//! scan_mem_max = "64M"
//! scan_rate_max = 0       # bytes per second, 0: no limit
//!
//! [alerts]                # every key optional; see alerts.rs
//! email_to = ["admin@example.org"]
//! email_from = "tarn@nas.local"
//! smtp_server = "127.0.0.1:25"        # host:port
//! smtp_starttls = false               # true: require STARTTLS
//! smtp_user = "tarn"                  # with smtp_password_file
//! smtp_password_file = "/etc/tarn/smtp.pass"
//! smtp_ca_file = "/etc/tarn/ca.pem"   # extra trusted CA (needs smtp_starttls)
//! webhook_url = "https://hooks.example.org/tarn"
//! command = "/usr/local/bin/notify"   # run directly, event JSON on stdin
//! command_args = ["--urgent"]
//! capacity_warn_percent = 80
//! min_severity = "warning"            # info, warning or error
//! repeat_after_secs = 3600            # 0: repeat identical alerts
//!
//! [fuse]
//! writeback_cache = false             # the kernel's writeback cache on mounts
//! ```
//!
//! `[fuse] writeback_cache = true` lets the kernel gather small writes
//! into large ones (tarn-fuse's notes on writes); a full pool or a quota
//! is then reported by `fsync` and `close`, not by `write` — why it is off
//! unless asked for (docs/tuning.md).
//!
//! Unknown tables or keys are an error, so a typo never passes silently.

use std::path::PathBuf;

use tarn_obj::Tunables;

use crate::alerts::AlertConfig;

#[derive(Clone, Debug, Default)]
pub struct DaemonConfig {
    pub tunables: Tunables,
    /// The tunables the file names (the others keep their defaults).
    pub tunables_given: Vec<String>,
    pub alerts: AlertConfig,
    /// `[nfs]` (share_config.rs): `None` without the table, no NFS server.
    pub nfs: Option<crate::share_config::NfsConfig>,
    /// `[smb]` (share_config.rs).
    pub smb: crate::share_config::SmbConfig,
    /// `[fuse] writeback_cache`.
    pub fuse_writeback_cache: bool,
    /// `[nbd]` (volumes.rs): `None` without the table, no NBD server.
    pub nbd: Option<crate::volumes::NbdConfig>,
}

pub fn parse_config(text: &str) -> Result<DaemonConfig, String> {
    let value: toml::Table = text.parse().map_err(|e: toml::de::Error| one_line(e.message()))?;
    let mut config = DaemonConfig::default();
    for (key, item) in &value {
        let table = item.as_table().ok_or_else(|| format!("'{key}' must be a table ([{key}])"))?;
        match key.as_str() {
            "tunables" => (config.tunables, config.tunables_given) = parse_tunables(table)?,
            "alerts" => config.alerts = parse_alerts(table)?,
            "nfs" => config.nfs = Some(crate::share_config::parse_nfs(table)?),
            "smb" => config.smb = crate::share_config::parse_smb(table)?,
            "fuse" => config.fuse_writeback_cache = parse_fuse(table)?,
            "nbd" => config.nbd = Some(crate::volumes::parse_nbd(table)?),
            _ => return Err(format!("unknown table or key '{key}' (known: [tunables], [alerts], [nfs], [smb], [fuse], [nbd])")),
        }
    }
    Ok(config)
}

/// The `[fuse]` table: `writeback_cache` (a boolean).
fn parse_fuse(table: &toml::Table) -> Result<bool, String> {
    let mut writeback = false;
    for (key, value) in table {
        match (key.as_str(), value) {
            ("writeback_cache", toml::Value::Boolean(b)) => writeback = *b,
            ("writeback_cache", other) => return Err(format!("[fuse] writeback_cache: expected true or false, not {other}")),
            _ => return Err(format!("unknown key '{key}' in [fuse] (known: writeback_cache)")),
        }
    }
    Ok(writeback)
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The `[tunables]` table (names and ranges as `tunable set` takes them,
/// tunables.rs). `arc_min` left out is the default, lowered to `arc_max`
/// when that is smaller.
fn parse_tunables(table: &toml::Table) -> Result<(Tunables, Vec<String>), String> {
    let mut tunables = Tunables::default();
    let mut given = Vec::new();
    let mut arc_min = None;
    tunables.arc_min = 0;
    for (name, setting) in table {
        let text = match setting {
            toml::Value::Integer(n) if *n >= 0 => n.to_string(),
            toml::Value::String(s) => s.clone(),
            other => return Err(format!("tunable '{name}': bad value {other}")),
        };
        let number = crate::tunables::parse_value(name, &text).map_err(|e| e.message().to_string())?;
        if name == "arc_min" {
            arc_min = Some(number);
        } else {
            crate::tunables::apply(&mut tunables, name, number).map_err(|e| e.message().to_string())?;
        }
        given.push(name.clone());
    }
    let arc_min = arc_min.unwrap_or(Tunables::default().arc_min.min(tunables.arc_max));
    crate::tunables::apply(&mut tunables, "arc_min", arc_min).map_err(|e| e.message().to_string())?;
    Ok((tunables, given))
}

const ALERT_KEYS: &str = "email_to, email_from, smtp_server, smtp_starttls, smtp_user, smtp_password_file, \
    smtp_ca_file, webhook_url, command, command_args, capacity_warn_percent, min_severity, repeat_after_secs";

fn parse_alerts(table: &toml::Table) -> Result<AlertConfig, String> {
    let mut alerts = AlertConfig::default();
    for (key, value) in table {
        let bad = |want: &str| format!("[alerts] {key}: expected {want}, got {value}");
        let string = || value.as_str().map(str::to_string).ok_or_else(|| bad("a string"));
        let strings = || match value {
            // A single address is accepted as well as a list.
            toml::Value::String(s) => Ok(vec![s.clone()]),
            toml::Value::Array(items) => items
                .iter()
                .map(|item| item.as_str().map(str::to_string).ok_or_else(|| bad("a list of strings")))
                .collect(),
            _ => Err(bad("a list of strings")),
        };
        let integer = || value.as_integer().ok_or_else(|| bad("an integer"));
        match key.as_str() {
            "email_to" => alerts.email_to = strings()?,
            "email_from" => alerts.email_from = Some(string()?),
            "smtp_server" => alerts.smtp_server = Some(string()?),
            "smtp_starttls" => alerts.smtp_starttls = value.as_bool().ok_or_else(|| bad("true or false"))?,
            "smtp_user" => alerts.smtp_user = Some(string()?),
            "smtp_password_file" => alerts.smtp_password_file = Some(PathBuf::from(string()?)),
            "smtp_ca_file" => alerts.smtp_ca_file = Some(PathBuf::from(string()?)),
            "webhook_url" => alerts.webhook_url = Some(string()?),
            "command" => alerts.command = Some(PathBuf::from(string()?)),
            "command_args" => alerts.command_args = strings()?,
            "capacity_warn_percent" => {
                let percent = integer()?;
                alerts.capacity_warn_percent = u8::try_from(percent)
                    .ok()
                    .filter(|p| (1..=100).contains(p))
                    .ok_or_else(|| format!("[alerts] capacity_warn_percent: {percent} is not in 1..=100"))?;
            }
            "min_severity" => alerts.min_severity = string()?.parse().map_err(|e| format!("[alerts] {key}: {e}"))?,
            "repeat_after_secs" => {
                alerts.repeat_after_secs = u64::try_from(integer()?).map_err(|_| bad("a number of seconds"))?
            }
            _ => return Err(format!("unknown key '{key}' in [alerts] (known: {ALERT_KEYS})")),
        }
    }
    alerts.validate()?;
    Ok(alerts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Severity;

    #[test]
    fn parses_tunables() {
        let t =
            parse_config("[tunables]\narc_max = \"2G\"\ndirty_data_max = 1048576\ntxg_timeout = 2\n").unwrap().tunables;
        assert_eq!(t.arc_max, 2 << 30);
        assert_eq!(t.dirty_data_max, 1 << 20);
        assert_eq!(t.txg_timeout_ms, 2000);
        let empty = parse_config("").unwrap();
        assert_eq!(empty.alerts, AlertConfig::default());
        assert!(empty.alerts.channels().is_empty(), "no [alerts]: no alerts");
    }

    #[test]
    fn parses_fuse() {
        assert!(!parse_config("").unwrap().fuse_writeback_cache);
        assert!(parse_config("[fuse]\nwriteback_cache = true\n").unwrap().fuse_writeback_cache);
        assert!(!parse_config("[fuse]\nwriteback_cache = false\n").unwrap().fuse_writeback_cache);
        let e = parse_config("[fuse]\nwriteback_cache = 1\n").unwrap_err();
        assert!(e.contains("writeback_cache") && !e.contains('\n'), "{e}");
        assert!(parse_config("[fuse]\nwriteback = true\n").unwrap_err().contains("writeback"));
    }

    #[test]
    fn parses_nbd() {
        assert!(parse_config("").unwrap().nbd.is_none());
        let n = parse_config("[nbd]\n").unwrap().nbd.unwrap();
        assert_eq!(n.listen.to_string(), "127.0.0.1:10809");
        assert!(n.enable);
        assert_eq!(n.busy_poll_us, tarn_share::poll::BUSY_POLL_US);
        assert_eq!(parse_config("[nbd]\nbusy_poll_us = 0\n").unwrap().nbd.unwrap().busy_poll_us, 0);
        let n = parse_config("[nbd]\nlisten = \"0.0.0.0:10810\"\nhosts = [\"@192.168.1.0/24\", \"127.0.0.1\"]\nenable = false\n").unwrap().nbd.unwrap();
        assert_eq!(n.listen.port(), 10810);
        assert!(!n.enable);
        assert!(n.hosts.0.iter().any(|h| h.matches("192.168.1.7".parse().unwrap())));
        assert!(!n.hosts.0.iter().any(|h| h.matches("10.0.0.1".parse().unwrap())));
        for (bad, want) in [
            ("[nbd]\nlisten = \"nowhere\"\n", "ADDRESS:PORT"),
            ("[nbd]\nhosts = [\"@1.2.3.0/99\"]\n", "[nbd] hosts"),
            ("[nbd]\nport = 1\n", "unknown key 'port' in [nbd]"),
            ("[nbd]\nenable = \"yes\"\n", "[nbd] enable"),
            ("[nbd]\nbusy_poll_us = 20000\n", "[nbd] busy_poll_us"),
        ] {
            let e = parse_config(bad).unwrap_err();
            assert!(e.contains(want) && !e.contains('\n'), "{bad}: {e}");
        }
    }

    #[test]
    fn rejects_unknown_keys() {
        assert!(parse_config("[tunables]\narc_maxx = 1\n").unwrap_err().contains("arc_maxx"));
        assert!(parse_config("[other]\n").unwrap_err().contains("other"));
        assert!(parse_config("alerts = 1\n").is_err());
        assert!(parse_config("[tunables]\ntxg_timeout = -1\n").is_err());
        assert!(parse_config("not toml [").is_err());
    }

    #[test]
    fn parses_alerts() {
        let text = r#"
[tunables]
txg_timeout = 5

[alerts]
email_to = ["admin@example.org", "Second Admin <second@example.org>"]
email_from = "tarn@nas.local"
smtp_server = "127.0.0.1:2525"
smtp_starttls = true
smtp_user = "tarn"
smtp_password_file = "/etc/tarn/smtp.pass"
smtp_ca_file = "/etc/tarn/ca.pem"
webhook_url = "http://127.0.0.1:9000/hook"
command = "/usr/local/bin/notify"
command_args = ["--urgent", "two words"]
capacity_warn_percent = 90
min_severity = "error"
repeat_after_secs = 0
"#;
        let a = parse_config(text).unwrap().alerts;
        assert_eq!(a.email_to.len(), 2);
        assert_eq!(a.email_from.as_deref(), Some("tarn@nas.local"));
        assert_eq!(a.smtp_server.as_deref(), Some("127.0.0.1:2525"));
        assert!(a.smtp_starttls);
        assert_eq!(a.smtp_user.as_deref(), Some("tarn"));
        assert_eq!(a.smtp_password_file, Some(PathBuf::from("/etc/tarn/smtp.pass")));
        assert_eq!(a.smtp_ca_file, Some(PathBuf::from("/etc/tarn/ca.pem")));
        assert_eq!(a.webhook_url.as_deref(), Some("http://127.0.0.1:9000/hook"));
        assert_eq!(a.command, Some(PathBuf::from("/usr/local/bin/notify")));
        assert_eq!(a.command_args, ["--urgent", "two words"]);
        assert_eq!(a.capacity_warn_percent, 90);
        assert_eq!(a.min_severity, Severity::Error);
        assert_eq!(a.repeat_after_secs, 0);
        assert_eq!(a.channels().len(), 3);

        let a = parse_config("[alerts]\nwebhook_url = \"https://hooks.example.org/x?y=1\"\n").unwrap().alerts;
        assert_eq!(a.channels().len(), 1);
        assert_eq!((a.capacity_warn_percent, a.min_severity, a.repeat_after_secs), (80, Severity::Warning, 3600));
        let a =
            parse_config("[alerts]\nemail_to = \"a@b.org\"\nemail_from = \"t@b.org\"\nsmtp_server = \"[::1]:25\"\n")
                .unwrap()
                .alerts;
        assert_eq!(a.email_to, ["a@b.org"]);
        assert!(parse_config("[alerts]\n").unwrap().alerts.channels().is_empty());
    }

    #[test]
    fn rejects_bad_alerts() {
        let mail = "email_from = \"t@b.org\"\nsmtp_server = \"127.0.0.1:25\"\n";
        let cases = [
            ("emial_to = []", "emial_to"),
            ("email_to = [\"not an address\"]\nemail_from = \"t@b.org\"\nsmtp_server = \"h:25\"", "email_to"),
            ("email_to = [\"a@b.org\"]\nemail_from = \"tarn\"\nsmtp_server = \"h:25\"", "email_from"),
            ("email_to = [\"a@b.org\"]\nemail_from = \"t@b.org\"\nsmtp_server = \"127.0.0.1\"", "no port"),
            ("email_to = [\"a@b.org\"]\nemail_from = \"t@b.org\"\nsmtp_server = \"h:0\"", "smtp_server"),
            ("email_to = [\"a@b.org\"]\nemail_from = \"t@b.org\"", "smtp_server"),
            ("email_to = [\"a@b.org\"]\nsmtp_server = \"h:25\"", "email_from"),
            ("email_to = [1]", "email_to"),
            ("smtp_starttls = \"yes\"", "smtp_starttls"),
            ("smtp_user = \"u\"", "smtp_password_file"),
            ("smtp_user = \"u\"\nsmtp_password_file = \"pass\"", "absolute"),
            ("smtp_ca_file = \"/etc/ca.pem\"", "smtp_starttls"),
            ("webhook_url = \"ftp://x/y\"", "webhook_url"),
            ("webhook_url = \"not a url\"", "webhook_url"),
            ("command = \"notify\"", "absolute"),
            ("command_args = [\"-x\"]", "command"),
            ("capacity_warn_percent = 0", "capacity_warn_percent"),
            ("capacity_warn_percent = 101", "capacity_warn_percent"),
            ("capacity_warn_percent = 300", "capacity_warn_percent"),
            ("min_severity = \"warn\"", "min_severity"),
            ("repeat_after_secs = -1", "repeat_after_secs"),
        ];
        for (body, needle) in cases {
            let e = parse_config(&format!("[alerts]\n{body}\n")).unwrap_err();
            assert!(e.contains(needle), "'{body}': error '{e}' should name '{needle}'");
            assert!(!e.contains('\n'), "'{body}': error '{e}' is more than one line");
        }
        // The same server settings are fine with both addresses.
        assert!(parse_config(&format!("[alerts]\nemail_to = [\"a@b.org\"]\n{mail}")).is_ok());
    }
}
