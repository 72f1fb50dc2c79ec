//! The `[nfs]` and `[smb]` tables of the daemon config.
//!
//! ```toml
//! [nfs]                       # present: the NFS server runs (enable = false stops it)
//! enable = true
//! listen = "0.0.0.0:2049"     # MOUNT and NFS on this one TCP address
//! hosts = ["192.168.1.0/24"]  # who `sharenfs=on` is for (default "*", everyone)
//! busy_poll_us = 100          # a one-call-at-a-time client's connection polls this long (0: off)
//!
//! [smb]
//! enable = true               # the daemon runs its own smbd (Debian's `samba`)
//! listen = ["127.0.0.1:4455"] # PORT, ADDRESS, ADDRESS:PORT or an interface name; one port for all
//! hosts_allow = ["192.168.1.", "127."]   # the whole server (smb.conf syntax)
//! hosts_deny = ["ALL"]
//! server_min_protocol = "SMB2"
//! workgroup = "WORKGROUP"
//! smbd = "/usr/sbin/smbd"     # default: smbd from PATH, /usr/sbin
//! ```
//!
//! Keys may also be written with spaces as in smb.conf (`"hosts allow"`).
//! Without an `[nfs]` table there is no NFS server; without `[smb]`
//! (or with `enable = false`) no smbd: sharing starts only when asked.

use std::net::SocketAddr;
use std::path::PathBuf;

use tarn_share::nfs::HostList;

#[derive(Clone, Debug, PartialEq)]
pub struct NfsConfig {
    pub enable: bool,
    pub listen: SocketAddr,
    /// Hosts `sharenfs=on` is read-write for.
    pub hosts: HostList,
    /// Microseconds a connection polls for the next call (tarn-nfs `server.rs`).
    pub busy_poll_us: u64,
}

impl Default for NfsConfig {
    fn default() -> NfsConfig {
        NfsConfig {
            enable: true,
            listen: "0.0.0.0:2049".parse().expect("literal"),
            hosts: HostList::everyone(),
            busy_poll_us: tarn_share::poll::BUSY_POLL_US,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmbConfig {
    pub enable: bool,
    pub port: u16,
    /// Addresses or interface names smbd binds; empty: every interface.
    pub interfaces: Vec<String>,
    pub hosts_allow: Vec<String>,
    pub hosts_deny: Vec<String>,
    pub server_min_protocol: String,
    pub workgroup: String,
    /// The smbd binary; `None`: looked up in PATH and /usr/sbin.
    pub smbd: Option<PathBuf>,
}

impl Default for SmbConfig {
    fn default() -> SmbConfig {
        SmbConfig {
            enable: false,
            port: 445,
            interfaces: Vec::new(),
            hosts_allow: Vec::new(),
            hosts_deny: Vec::new(),
            server_min_protocol: "SMB2".into(),
            workgroup: "WORKGROUP".into(),
            smbd: None,
        }
    }
}

fn strings(table: &str, key: &str, value: &toml::Value) -> Result<Vec<String>, String> {
    let bad = || format!("[{table}] {key}: expected a string or a list of strings, got {value}");
    match value {
        toml::Value::String(s) => Ok(vec![s.clone()]),
        toml::Value::Array(items) => items.iter().map(|i| i.as_str().map(str::to_string).ok_or_else(bad)).collect(),
        _ => Err(bad()),
    }
}

fn boolean(table: &str, key: &str, value: &toml::Value) -> Result<bool, String> {
    value.as_bool().ok_or_else(|| format!("[{table}] {key}: expected true or false, got {value}"))
}

fn string(table: &str, key: &str, value: &toml::Value) -> Result<String, String> {
    value.as_str().map(str::to_string).ok_or_else(|| format!("[{table}] {key}: expected a string, got {value}"))
}

/// `busy_poll_us` of the `[nfs]` or `[nbd]` table: microseconds, 0–10,000.
pub fn busy_poll_us(table: &str, value: &toml::Value) -> Result<u64, String> {
    value
        .as_integer()
        .filter(|us| (0..=10_000).contains(us))
        .map(|us| us as u64)
        .ok_or_else(|| format!("[{table}] busy_poll_us: '{value}' is not a number of microseconds from 0 to 10000"))
}

pub fn parse_nfs(table: &toml::Table) -> Result<NfsConfig, String> {
    let mut config = NfsConfig::default();
    for (key, value) in table {
        match key.as_str() {
            "enable" => config.enable = boolean("nfs", key, value)?,
            "listen" => {
                let text = string("nfs", key, value)?;
                config.listen = text
                    .parse()
                    .map_err(|_| format!("[nfs] listen: '{text}' is not ADDRESS:PORT (e.g. 0.0.0.0:2049)"))?;
            }
            "hosts" => {
                let items = strings("nfs", key, value)?;
                config.hosts = HostList::from_items(&items).map_err(|e| format!("[nfs] hosts: {e}"))?;
            }
            "busy_poll_us" => config.busy_poll_us = busy_poll_us("nfs", value)?,
            _ => return Err(format!("unknown key '{key}' in [nfs] (known: enable, listen, hosts, busy_poll_us)")),
        }
    }
    Ok(config)
}

pub fn parse_smb(table: &toml::Table) -> Result<SmbConfig, String> {
    let mut config = SmbConfig::default();
    let mut port: Option<u16> = None;
    for (key, value) in table {
        let key = key.replace(' ', "_");
        match key.as_str() {
            "enable" => config.enable = boolean("smb", &key, value)?,
            "listen" => {
                for item in strings("smb", &key, value)? {
                    let (interface, item_port) = split_listen(&item)?;
                    if let Some(p) = item_port {
                        if port.is_some_and(|q| q != p) {
                            return Err("[smb] listen: smbd listens on one port for every address".into());
                        }
                        port = Some(p);
                    }
                    if let Some(interface) = interface {
                        config.interfaces.push(interface);
                    }
                }
            }
            "hosts_allow" | "hosts_deny" => {
                let list = strings("smb", &key, value)?.join(" ");
                let hosts = tarn_share::smb::parse_hosts(&key.replace('_', " "), &list)
                    .map_err(|e| format!("[smb] {e}"))?;
                if key == "hosts_allow" {
                    config.hosts_allow = hosts;
                } else {
                    config.hosts_deny = hosts;
                }
            }
            "server_min_protocol" => {
                let protocol = string("smb", &key, value)?.to_ascii_uppercase();
                if !tarn_share::smb::PROTOCOLS.contains(&protocol.as_str()) {
                    return Err(format!(
                        "[smb] server_min_protocol: '{protocol}' is not one of {}",
                        tarn_share::smb::PROTOCOLS.join(", ")
                    ));
                }
                config.server_min_protocol = protocol;
            }
            "workgroup" => {
                let workgroup = string("smb", &key, value)?;
                if workgroup.is_empty()
                    || workgroup.len() > 15
                    || !workgroup.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                {
                    return Err(format!("[smb] workgroup: '{workgroup}' must be 1 to 15 letters, digits, '-', '_', '.'"));
                }
                config.workgroup = workgroup;
            }
            "smbd" => {
                let path = PathBuf::from(string("smb", &key, value)?);
                if !path.is_absolute() {
                    return Err(format!("[smb] smbd: '{}' must be an absolute path", path.display()));
                }
                config.smbd = Some(path);
            }
            _ => {
                return Err(format!(
                    "unknown key '{key}' in [smb] (known: enable, listen, hosts_allow, hosts_deny, server_min_protocol, workgroup, smbd)"
                ))
            }
        }
    }
    if let Some(port) = port {
        config.port = port;
    }
    Ok(config)
}

/// `PORT`, `ADDRESS`, `ADDRESS:PORT`, `[V6]:PORT`, `IFNAME` or `IFNAME:PORT`.
fn split_listen(item: &str) -> Result<(Option<String>, Option<u16>), String> {
    let bad = || format!("[smb] listen: '{item}' is not PORT, ADDRESS, ADDRESS:PORT or an interface name");
    let port = |text: &str| text.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(bad);
    if item.chars().all(|c| c.is_ascii_digit()) && !item.is_empty() {
        return Ok((None, Some(port(item)?)));
    }
    if let Ok(address) = item.parse::<SocketAddr>() {
        return Ok((Some(address.ip().to_string()), Some(port(&address.port().to_string())?)));
    }
    if item.parse::<std::net::IpAddr>().is_ok() {
        return Ok((Some(item.to_string()), None));
    }
    let (name, item_port) = match item.rsplit_once(':') {
        Some((name, p)) => (name, Some(port(p)?)),
        None => (item, None),
    };
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(bad());
    }
    Ok((Some(name.to_string()), item_port))
}

#[cfg(test)]
mod tests {
    use crate::config::parse_config;

    #[test]
    fn nfs_and_smb_tables() {
        let config = parse_config(
            "[nfs]\nlisten = \"127.0.0.1:12049\"\nhosts = [\"192.168.1.0/24\", \"127.0.0.1\"]\nbusy_poll_us = 0\n\
             [smb]\nenable = true\nlisten = [\"127.0.0.1:4455\", \"lo\"]\n\"hosts allow\" = \"127. 192.168.1.\"\n\
             hosts_deny = [\"ALL\"]\nserver_min_protocol = \"smb3\"\nworkgroup = \"HOME\"\n",
        )
        .unwrap();
        let nfs = config.nfs.unwrap();
        assert_eq!(nfs.listen, "127.0.0.1:12049".parse().unwrap());
        assert_eq!((nfs.hosts.0.len(), nfs.busy_poll_us), (2, 0));
        let smb = config.smb;
        assert!(smb.enable);
        assert_eq!((smb.port, smb.interfaces.clone()), (4455, vec!["127.0.0.1".to_string(), "lo".to_string()]));
        assert_eq!(smb.hosts_allow, ["127.", "192.168.1."]);
        assert_eq!(smb.hosts_deny, ["ALL"]);
        assert_eq!((smb.server_min_protocol.as_str(), smb.workgroup.as_str()), ("SMB3", "HOME"));
        let empty = parse_config("").unwrap();
        assert!(empty.nfs.is_none() && !empty.smb.enable);
        let default = parse_config("[nfs]\n").unwrap().nfs.unwrap();
        assert_eq!((default.listen.to_string(), default.busy_poll_us), ("0.0.0.0:2049".to_string(), tarn_share::poll::BUSY_POLL_US));
    }

    #[test]
    fn bad_share_config_is_one_line() {
        for (text, needle) in [
            ("[nfs]\nlisten = \"2049\"", "listen"),
            ("[nfs]\nhosts = [\"@staff\"]", "hosts"),
            ("[nfs]\nport = 1", "port"),
            ("[nfs]\nbusy_poll_us = -1", "busy_poll_us"),
            ("[nfs]\nbusy_poll_us = \"fast\"", "busy_poll_us"),
            ("[smb]\nlisten = [\"127.0.0.1:1\", \"127.0.0.2:2\"]", "one port"),
            ("[smb]\nlisten = \"a b\"", "listen"),
            ("[smb]\nhosts_allow = \"1.2.3.4;x\"", "hosts allow"),
            ("[smb]\nserver_min_protocol = \"LANMAN1\"", "server_min_protocol"),
            ("[smb]\nworkgroup = \"a]b\"", "workgroup"),
            ("[smb]\nsmbd = \"smbd\"", "absolute"),
            ("[smb]\nenable = \"yes\"", "enable"),
        ] {
            let e = parse_config(text).unwrap_err();
            assert!(e.contains(needle) && !e.contains('\n'), "{text}: {e}");
        }
    }
}
