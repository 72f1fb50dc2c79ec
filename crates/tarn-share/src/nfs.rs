//! `sharenfs`: Linux exports(5) options as OpenZFS on Linux accepts them.
//!
//! A value is `off`, `on`, or a comma-separated list of options. OpenZFS on
//! Linux turns every host named by a `rw=` or `ro=` option (hosts separated
//! by `:`; a bare `rw`/`ro` means `*`) into one exports line
//! `path host(rw|ro,<the other options>)`, in the order they are written,
//! and `on` into `rw,crossmnt` for everyone. exportfs then picks, for a
//! client named by several lines, the line of the most specific *kind*
//! first (a single address or host name, then a network, then `*`) and,
//! among lines of the same kind, the first one written. [`NfsRules::access`]
//! decides the same way; docs/nfs.md ("Export rules") says it for users.
//!
//! Invariants:
//! - `parse` never panics and refuses (with a one-line reason) anything it
//!   does not understand: an unknown option, a malformed host, a security
//!   flavour other than `sys`, a netgroup, a name wildcard.
//! - Host names are kept as names: [`NfsRules::resolve_names`] looks them up
//!   when the rules are applied; an unresolved name matches no client.
//! - An IPv4-mapped IPv6 client (`::ffff:a.b.c.d`) is matched as the IPv4
//!   address it carries.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, ToSocketAddrs};

/// The uid and gid squashed users become unless `anonuid`/`anongid` say
/// otherwise (`nobody`/`nogroup` on Debian, as exports(5)).
pub const ANON_ID_DEFAULT: u32 = 65534;

/// Which callers lose their identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Squash {
    /// uid 0 and gid 0 become anonuid/anongid (`root_squash`, the default).
    Root,
    /// Nobody is squashed (`no_root_squash`).
    None,
    /// Every caller becomes anonuid/anongid (`all_squash`).
    All,
}

/// What one client may do on one export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAccess {
    pub read_only: bool,
    pub squash: Squash,
    pub anonuid: u32,
    pub anongid: u32,
}

/// One host specification of a `rw=`/`ro=` list or of the daemon's
/// `[nfs] hosts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostSpec {
    /// `*`: every client.
    Anyone,
    /// One address.
    Address(IpAddr),
    /// A network, `@192.168.1.0/24`, `192.168.1.0/255.255.255.0`,
    /// `[fd00::]/64`; the address is stored with its host bits cleared.
    Network(IpAddr, u8),
    /// A host name, matched against the addresses it resolved to.
    Name { name: String, addresses: Vec<IpAddr> },
}

/// How specific a host specification is: exportfs prefers the lowest.
fn kind_rank(spec: &HostSpec) -> u8 {
    match spec {
        HostSpec::Address(_) | HostSpec::Name { .. } => 0,
        HostSpec::Network(..) => 1,
        HostSpec::Anyone => 2,
    }
}

impl HostSpec {
    /// Parses one host: `*`, an address (IPv6 in brackets or bare), a
    /// network with `/len` or `/netmask`, optionally after `@`, or a name.
    pub fn parse(text: &str) -> Result<HostSpec, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("empty host in host list".to_string());
        }
        if text == "*" {
            return Ok(HostSpec::Anyone);
        }
        let had_at = text.starts_with('@');
        let body = text.strip_prefix('@').unwrap_or(text);
        let (addr_text, len_text) = match body.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (body, None),
        };
        let addr_text = match addr_text.strip_prefix('[') {
            Some(inner) => inner
                .strip_suffix(']')
                .ok_or_else(|| format!("host '{text}': unclosed '['"))?,
            None => addr_text,
        };
        if let Ok(address) = addr_text.parse::<IpAddr>() {
            let address = unmap(address);
            return match len_text {
                None => Ok(HostSpec::Address(address)),
                Some(len) => {
                    let prefix = prefix_len(address, len)
                        .ok_or_else(|| format!("host '{text}': bad network length '{len}'"))?;
                    Ok(HostSpec::Network(mask(address, prefix), prefix))
                }
            };
        }
        if had_at {
            return Err(format!("host '{text}': netgroups are not supported (use @address/length)"));
        }
        if len_text.is_some() {
            return Err(format!("host '{text}': not an address/length network"));
        }
        if text.contains(['*', '?']) {
            return Err(format!("host '{text}': host name wildcards are not supported"));
        }
        let valid_name = text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
        });
        if !valid_name || text.len() > 253 {
            return Err(format!("host '{text}': not an address, network or host name"));
        }
        Ok(HostSpec::Name { name: text.to_ascii_lowercase(), addresses: Vec::new() })
    }

    /// Whether `client` (already unmapped) is named by this specification.
    pub fn matches(&self, client: IpAddr) -> bool {
        match self {
            HostSpec::Anyone => true,
            HostSpec::Address(address) => *address == client,
            HostSpec::Network(net, len) => {
                net.is_ipv4() == client.is_ipv4() && mask(client, *len) == *net
            }
            HostSpec::Name { addresses, .. } => addresses.iter().any(|a| unmap(*a) == client),
        }
    }
}

impl std::fmt::Display for HostSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostSpec::Anyone => write!(f, "*"),
            HostSpec::Address(a) => write!(f, "{a}"),
            HostSpec::Network(a, len) => write!(f, "{a}/{len}"),
            HostSpec::Name { name, .. } => write!(f, "{name}"),
        }
    }
}

/// A list of hosts, as the daemon's `[nfs] hosts` gives the default for
/// `sharenfs=on`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostList(pub Vec<HostSpec>);

impl HostList {
    /// `*`: the default of `[nfs] hosts`.
    pub fn everyone() -> HostList {
        HostList(vec![HostSpec::Anyone])
    }

    /// Parses each item with [`HostSpec::parse`].
    pub fn from_items<S: AsRef<str>>(items: &[S]) -> Result<HostList, String> {
        items.iter().map(|item| HostSpec::parse(item.as_ref())).collect::<Result<_, _>>().map(HostList)
    }
}

/// One exports line: a host and whether it gets `ro`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportLine {
    pub host: HostSpec,
    pub read_only: bool,
}

/// A parsed `sharenfs` value other than `off`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NfsRules {
    /// In the order written; [`NfsRules::access`] applies exportfs' choice.
    pub lines: Vec<ExportLine>,
    root_squash: bool,
    all_squash: bool,
    anonuid: u32,
    anongid: u32,
}

/// `parse_with_default` with everyone as the hosts of `sharenfs=on`.
pub fn parse(value: &str) -> Result<Option<NfsRules>, String> {
    parse_with_default(value, &HostList::everyone())
}

/// Options OpenZFS on Linux passes to exportfs that change nothing here:
/// tarn's server has no subtree checks, always crosses into `.zfs`, writes
/// as the client's stable_how asks, does not check source ports, and has no
/// NLM; `fsid`, `mountpoint`, `refer`, `replicas` have no meaning for it.
const IGNORED: &[&str] = &[
    "async", "auth_nlm", "crossmnt", "fsid", "fsuid", "hide", "insecure", "insecure_locks",
    "mountpoint", "mp", "no_acl", "no_auth_nlm", "no_subtree_check", "no_wdelay", "nohide",
    "nosub", "refer", "replicas", "secure", "secure_locks", "subtree_check", "sync", "wdelay",
];

/// Parses a `sharenfs` value; `on` means read-write for `default_hosts`.
/// `Ok(None)` is `off`; `Err` is a one-line reason.
pub fn parse_with_default(value: &str, default_hosts: &HostList) -> Result<Option<NfsRules>, String> {
    let value = value.trim();
    if value.chars().any(char::is_control) {
        return Err("sharenfs value holds a control character (a line break or tab?)".to_string());
    }
    let mut rules = NfsRules::empty();
    match value {
        "off" => return Ok(None),
        "on" => return Ok(Some(NfsRules::on(default_hosts))),
        "" => return Err("empty sharenfs value (use on, off or exports options)".to_string()),
        _ => {}
    }
    for option in value.split(',') {
        let option = option.trim();
        if option.is_empty() {
            return Err(format!("empty option in '{value}'"));
        }
        let (key, arg) = match option.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (option, None),
        };
        match (key, arg) {
            ("rw" | "ro", None) => rules.lines.push(ExportLine { host: HostSpec::Anyone, read_only: key == "ro" }),
            ("rw" | "ro", Some(hosts)) => {
                for host in split_hosts(hosts)? {
                    let host = HostSpec::parse(&host).map_err(|e| format!("{key}=: {e}"))?;
                    rules.lines.push(ExportLine { host, read_only: key == "ro" });
                }
            }
            ("root_squash", None) => rules.root_squash = true,
            ("no_root_squash", None) => rules.root_squash = false,
            ("all_squash", None) => rules.all_squash = true,
            ("no_all_squash", None) => rules.all_squash = false,
            ("anonuid" | "anon", Some(n)) => rules.anonuid = parse_id(key, n)?,
            ("anongid", Some(n)) => rules.anongid = parse_id(key, n)?,
            ("root_mapping", Some(n)) => {
                rules.root_squash = true;
                rules.anonuid = parse_id(key, n)?;
            }
            ("sec", Some(flavours)) => {
                if let Some(other) = flavours.split(':').find(|f| *f != "sys") {
                    return Err(format!("sec={other}: only sec=sys (AUTH_SYS) is supported"));
                }
            }
            (ignored, _) if IGNORED.contains(&ignored) => {}
            ("anonuid" | "anon" | "anongid" | "root_mapping" | "sec", None) => {
                return Err(format!("option '{key}' needs a value ({key}=...)"));
            }
            (_, Some(_)) if ["root_squash", "no_root_squash", "all_squash", "no_all_squash"].contains(&key) => {
                return Err(format!("option '{key}' takes no value"));
            }
            _ => return Err(format!("unknown sharenfs option '{key}'")),
        }
    }
    Ok(Some(rules))
}

/// Splits a `:`-separated host list; an IPv6 address is written in
/// brackets (`[fd00::1]`, `[fd00::]/64`) so its colons do not split it.
fn split_hosts(list: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    let mut rest = list;
    loop {
        let end = if rest.starts_with('[') {
            let close = rest.find(']').ok_or_else(|| format!("host list '{list}': unclosed '['"))?;
            rest[close..].find(':').map(|i| close + i)
        } else {
            rest.find(':')
        };
        match end {
            Some(i) => {
                hosts.push(rest[..i].to_string());
                rest = &rest[i + 1..];
            }
            None => {
                hosts.push(rest.to_string());
                return Ok(hosts);
            }
        }
    }
}

fn parse_id(key: &str, text: &str) -> Result<u32, String> {
    text.parse::<u32>().map_err(|_| format!("{key}={text}: not a numeric id"))
}

impl NfsRules {
    fn empty() -> NfsRules {
        NfsRules {
            lines: Vec::new(),
            root_squash: true,
            all_squash: false,
            anonuid: ANON_ID_DEFAULT,
            anongid: ANON_ID_DEFAULT,
        }
    }

    /// `sharenfs=on`: read-write for `hosts`, root squashed.
    pub fn on(hosts: &HostList) -> NfsRules {
        let mut rules = NfsRules::empty();
        rules.lines = hosts.0.iter().map(|host| ExportLine { host: host.clone(), read_only: false }).collect();
        rules
    }

    /// What `client` may do, or `None` when no line names it.
    pub fn access(&self, client: IpAddr) -> Option<ClientAccess> {
        let client = unmap(client);
        let line = self
            .lines
            .iter()
            .filter(|line| line.host.matches(client))
            .min_by_key(|line| kind_rank(&line.host))?;
        Some(ClientAccess {
            read_only: line.read_only,
            squash: self.squash(),
            anonuid: self.anonuid,
            anongid: self.anongid,
        })
    }

    pub fn squash(&self) -> Squash {
        if self.all_squash {
            Squash::All
        } else if self.root_squash {
            Squash::Root
        } else {
            Squash::None
        }
    }

    /// Looks up the addresses of every host name (blocking DNS/`/etc/hosts`
    /// lookups); a name that does not resolve keeps no address and so
    /// matches nobody. Returns the names that did not resolve.
    pub fn resolve_names(&mut self) -> Vec<String> {
        let mut unresolved = Vec::new();
        for line in &mut self.lines {
            if let HostSpec::Name { name, addresses } = &mut line.host {
                *addresses = match (name.as_str(), 0u16).to_socket_addrs() {
                    Ok(found) => found.map(|a| unmap(a.ip())).collect(),
                    Err(_) => Vec::new(),
                };
                if addresses.is_empty() {
                    unresolved.push(name.clone());
                }
            }
        }
        unresolved
    }

    /// "rw=a:b, ro=c" style summary for `tarn share -l`: whom each access
    /// goes to, in the order written.
    pub fn describe(&self) -> String {
        if self.lines.is_empty() {
            return "no client (no rw= or ro=)".to_string();
        }
        let mut parts: Vec<String> = Vec::new();
        for line in &self.lines {
            let access = if line.read_only { "ro" } else { "rw" };
            parts.push(format!("{access}={}", line.host));
        }
        let squash = match self.squash() {
            Squash::Root => "root_squash",
            Squash::None => "no_root_squash",
            Squash::All => "all_squash",
        };
        parts.push(squash.to_string());
        parts.join(",")
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it carries.
fn unmap(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// `/24` or `/255.255.255.0` (IPv4 only) as a prefix length.
fn prefix_len(address: IpAddr, text: &str) -> Option<u8> {
    let max = if address.is_ipv4() { 32 } else { 128 };
    if let Ok(len) = text.parse::<u8>() {
        return (len <= max).then_some(len);
    }
    let netmask = u32::from(text.parse::<Ipv4Addr>().ok()?);
    if !address.is_ipv4() || netmask.leading_ones() + netmask.trailing_zeros() != 32 {
        return None;
    }
    u8::try_from(netmask.leading_ones()).ok()
}

fn mask(address: IpAddr, len: u8) -> IpAddr {
    match address {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let keep = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len.min(32))) };
            IpAddr::V4(Ipv4Addr::from(bits & keep))
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let keep = if len == 0 { 0 } else { u128::MAX << (128 - u32::from(len.min(128))) };
            IpAddr::V6(Ipv6Addr::from(bits & keep))
        }
    }
}

#[cfg(test)]
#[path = "nfs_tests.rs"]
mod tests;
