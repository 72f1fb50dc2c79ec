//! `sharesmb`: per-share options, and the smb.conf written for the daemon's
//! own smbd.
//!
//! A value is `off`, `on`, or comma-separated options: `name=NAME`,
//! `hosts allow=LIST`, `hosts deny=LIST`, `readonly=on|off`,
//! `guest ok=yes|no`. Commas separate options, so a host list separates its
//! hosts with spaces, as smb.conf does (`hosts allow=192.168.1.0/24 127.`).
//! Without `name=`, the share is named after the dataset with `/` turned
//! into `_` (`tank/media` → `tank_media`), as OpenZFS names it.
//!
//! Invariants:
//! - Nothing the user writes reaches smb.conf unchecked: share names and
//!   host tokens are limited to characters that cannot start a new line,
//!   section or parameter, so a property value can never inject settings.
//! - The config written keeps every Samba state directory under the
//!   daemon's state dir, so the system's Samba is untouched.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A parsed `sharesmb` value other than `off`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SmbRules {
    /// `name=`; `None`: the dataset's name with `/` → `_`.
    pub name: Option<String>,
    pub hosts_allow: Vec<String>,
    pub hosts_deny: Vec<String>,
    /// `readonly=on`.
    pub read_only: bool,
    /// `guest ok=yes`.
    pub guest_ok: bool,
}

/// Parses a `sharesmb` value. `Ok(None)` is `off`; `Err` is a one-line reason.
pub fn parse(value: &str) -> Result<Option<SmbRules>, String> {
    let value = value.trim();
    if value.chars().any(char::is_control) {
        return Err("sharesmb value holds a control character (a line break or tab?)".to_string());
    }
    match value {
        "off" => return Ok(None),
        "on" => return Ok(Some(SmbRules::default())),
        "" => return Err("empty sharesmb value (use on, off or options)".to_string()),
        _ => {}
    }
    let mut rules = SmbRules::default();
    for option in value.split(',') {
        let (key, arg) = option
            .split_once('=')
            .ok_or_else(|| format!("option '{}' needs a value (KEY=VALUE)", option.trim().escape_default()))?;
        let key = key.split_whitespace().collect::<Vec<_>>().join(" ");
        let arg = arg.trim();
        match key.as_str() {
            "name" => {
                check_share_name(arg)?;
                rules.name = Some(arg.to_string());
            }
            "hosts allow" | "allow hosts" => rules.hosts_allow = parse_hosts(&key, arg)?,
            "hosts deny" | "deny hosts" => rules.hosts_deny = parse_hosts(&key, arg)?,
            "readonly" | "read only" => {
                rules.read_only = match arg {
                    "on" | "yes" => true,
                    "off" | "no" => false,
                    _ => return Err(format!("{key}={arg}: must be on or off")),
                }
            }
            "guest ok" => {
                rules.guest_ok = match arg {
                    "yes" | "on" => true,
                    "no" | "off" => false,
                    _ => return Err(format!("{key}={arg}: must be yes or no")),
                }
            }
            _ => {
                return Err(format!(
                    "unknown sharesmb option '{}' (known: name, hosts allow, hosts deny, readonly, guest ok)",
                    key.escape_default()
                ))
            }
        }
    }
    Ok(Some(rules))
}

/// The share name OpenZFS gives a dataset: `/` (and the other characters a
/// share name cannot hold) become `_`.
pub fn default_share_name(dataset: &str) -> String {
    dataset.chars().map(|c| if share_name_char(c) { c } else { '_' }).collect()
}

fn share_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-_.$ ".contains(c)
}

/// Share names: letters, digits, `-_.$` and inner spaces, at most 80
/// characters, and not one of Samba's special sections.
pub fn check_share_name(name: &str) -> Result<(), String> {
    let shown = name.escape_default().to_string();
    if name.is_empty() || name.len() > 80 {
        return Err(format!("share name '{shown}' must be 1 to 80 characters"));
    }
    if !name.chars().all(share_name_char) || name.starts_with(' ') || name.ends_with(' ') {
        return Err(format!("share name '{shown}': only letters, digits, '-', '_', '.', '$' and inner spaces"));
    }
    if ["global", "homes", "printers", "print$", "ipc$"].contains(&name.to_ascii_lowercase().as_str()) {
        return Err(format!("share name '{shown}' is reserved by Samba"));
    }
    Ok(())
}

/// A `hosts allow`/`hosts deny` list: tokens separated by spaces, each an
/// address, a network (`192.168.1.0/24`, `192.168.1.0/255.255.255.0`, the
/// prefix form `192.168.1.` or `127.`), a host name, `ALL`, `LOCAL` or
/// `EXCEPT`, as smb.conf(5) takes them.
pub fn parse_hosts(key: &str, list: &str) -> Result<Vec<String>, String> {
    let tokens: Vec<String> = list.split_whitespace().map(str::to_string).collect();
    if tokens.is_empty() {
        return Err(format!("{key}=: empty host list"));
    }
    for token in &tokens {
        let ok = token.chars().all(|c| c.is_ascii_alphanumeric() || ".:/-_*[]".contains(c));
        if !ok {
            return Err(format!("{key}: bad host '{}' (addresses, networks, names, ALL, LOCAL, EXCEPT)", token.escape_default()));
        }
    }
    if tokens.first().is_some_and(|t| t == "EXCEPT") || tokens.last().is_some_and(|t| t == "EXCEPT") {
        return Err(format!("{key}: EXCEPT must stand between two hosts"));
    }
    Ok(tokens)
}

/// The `[smb]` table of the daemon config, as the global section needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmbGlobal {
    /// `smb ports`.
    pub port: u16,
    /// `interfaces` (with `bind interfaces only = yes`): addresses or
    /// interface names.
    pub interfaces: Vec<String>,
    pub hosts_allow: Vec<String>,
    pub hosts_deny: Vec<String>,
    /// `server min protocol`: SMB2 by default.
    pub server_min_protocol: String,
    pub workgroup: String,
    /// Everything smbd keeps goes under here (the daemon uses
    /// `<state dir>/smb`).
    pub state_dir: PathBuf,
}

/// Protocol names `server min protocol` accepts.
pub const PROTOCOLS: &[&str] = &["NT1", "SMB2", "SMB2_02", "SMB2_10", "SMB3", "SMB3_00", "SMB3_02", "SMB3_11"];

/// One share as smb.conf gets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmbShare {
    pub name: String,
    /// The dataset's mountpoint.
    pub path: PathBuf,
    /// The dataset, for the comment line.
    pub dataset: String,
    pub rules: SmbRules,
    /// `readonly=on` in sharesmb or the dataset's own `readonly=on`.
    pub read_only: bool,
}

/// Snapshots named by zfs-auto-snapshot (`zfs-auto-snap_hourly-2026-11-24-1000`,
/// UTC) are shown to Windows as Previous Versions; these are the
/// shadow_copy2 settings that read that timestamp.
pub const SHADOW_SNAPPREFIX: &str =
    r"^zfs-auto-snap_\(frequent\)\{0,1\}\(hourly\)\{0,1\}\(daily\)\{0,1\}\(weekly\)\{0,1\}\(monthly\)\{0,1\}";
pub const SHADOW_DELIMITER: &str = "-20";
pub const SHADOW_FORMAT: &str = "-%Y-%m-%d-%H%M";

impl SmbGlobal {
    pub fn private_dir(&self) -> PathBuf {
        self.state_dir.join("private")
    }
    pub fn config_path(&self) -> PathBuf {
        self.state_dir.join("smb.conf")
    }
    /// The directories smb.conf names; the daemon creates them.
    pub fn dirs(&self) -> Vec<PathBuf> {
        ["private", "lock", "state", "cache", "pid", "ncalrpc", "log"]
            .iter()
            .map(|d| self.state_dir.join(d))
            .collect()
    }
}

/// The whole smb.conf: the global section, then one section per share.
pub fn write_config(global: &SmbGlobal, shares: &[SmbShare]) -> String {
    let mut out = String::new();
    let dir = |name: &str| path_value(&global.state_dir.join(name));
    out.push_str("# Written by the tarn daemon; it is rewritten whenever shares change.\n");
    out.push_str("[global]\n");
    let mut set = |key: &str, value: &str| {
        let _ = writeln!(out, "\t{key} = {value}");
    };
    set("server role", "standalone server");
    set("workgroup", &global.workgroup);
    set("smb ports", &global.port.to_string());
    if !global.interfaces.is_empty() {
        set("interfaces", &global.interfaces.join(" "));
        set("bind interfaces only", "yes");
    }
    if !global.hosts_allow.is_empty() {
        set("hosts allow", &global.hosts_allow.join(" "));
    }
    if !global.hosts_deny.is_empty() {
        set("hosts deny", &global.hosts_deny.join(" "));
    }
    set("server min protocol", &global.server_min_protocol);
    set("disable netbios", "yes");
    set("private dir", &dir("private"));
    set("lock directory", &dir("lock"));
    set("state directory", &dir("state"));
    set("cache directory", &dir("cache"));
    set("pid directory", &dir("pid"));
    set("ncalrpc dir", &dir("ncalrpc"));
    set("passdb backend", &format!("tdbsam:{}", path_value(&global.state_dir.join("private/passdb.tdb"))));
    set("log file", &path_value(&global.state_dir.join("log/smbd.log")));
    set("max log size", "1000");
    set("load printers", "no");
    set("printing", "bsd");
    set("printcap name", "/dev/null");
    set("disable spoolss", "yes");
    set("map to guest", "Bad User");
    set("usershare max shares", "0");
    // FUSE has no leases or share-mode flocks for smbd to take.
    set("kernel oplocks", "no");
    set("kernel share modes", "no");
    for share in shares {
        let _ = writeln!(out, "\n[{}]", share.name);
        let mut set = |key: &str, value: &str| {
            let _ = writeln!(out, "\t{key} = {value}");
        };
        set("comment", &format!("tarn dataset {}", sanitize_comment(&share.dataset)));
        set("path", &path_value(&share.path));
        set("read only", if share.read_only { "yes" } else { "no" });
        set("guest ok", if share.rules.guest_ok { "yes" } else { "no" });
        if !share.rules.hosts_allow.is_empty() {
            set("hosts allow", &share.rules.hosts_allow.join(" "));
        }
        if !share.rules.hosts_deny.is_empty() {
            set("hosts deny", &share.rules.hosts_deny.join(" "));
        }
        set("vfs objects", "shadow_copy2 streams_xattr");
        set("shadow:snapdir", ".zfs/snapshot");
        set("shadow:crossmountpoints", "no");
        set("shadow:sort", "desc");
        set("shadow:localtime", "no");
        set("shadow:snapprefix", SHADOW_SNAPPREFIX);
        set("shadow:delimiter", SHADOW_DELIMITER);
        set("shadow:format", SHADOW_FORMAT);
        set("store dos attributes", "yes");
        set("ea support", "yes");
        set("browseable", "yes");
    }
    out
}

/// A path as an smb.conf value: smb.conf has no quoting, so a path with a
/// newline could not be written; the daemon's paths never hold one, and a
/// dataset name cannot.
fn path_value(path: &Path) -> String {
    let text = path.to_string_lossy();
    assert!(!text.contains(['\n', '\r']), "smb.conf path with a line break: {text:?}");
    text.into_owned()
}

fn sanitize_comment(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { '_' } else { c }).collect()
}

#[cfg(test)]
#[path = "smb_tests.rs"]
mod tests;
