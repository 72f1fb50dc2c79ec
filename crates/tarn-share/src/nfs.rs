//! `sharenfs`: Linux exports(5) options as OpenZFS on Linux accepts them.
//!
//! Placeholder until the `smb` branch brings the real parser: `on` shares
//! read-write with everyone (root squashed), `off` does not share. The
//! names below are the agreed API; tarn-nfs depends only on them.

use std::net::IpAddr;

/// How a client's credentials are mapped (exports(5)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Squash {
    /// `root_squash` (the default): uid 0 and gid 0 become anon's.
    Root,
    /// `no_root_squash`.
    None,
    /// `all_squash`: every uid and gid becomes anon's.
    All,
}

/// What one client may do with an export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAccess {
    pub read_only: bool,
    pub squash: Squash,
    pub anonuid: u32,
    pub anongid: u32,
}

/// The parsed `sharenfs` value of a shared dataset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NfsRules {
    access: ClientAccess,
}

/// Parses a `sharenfs` value: None for `off`.
pub fn parse(value: &str) -> Result<Option<NfsRules>, String> {
    match value.trim() {
        "off" => Ok(None),
        "on" | "" => Ok(Some(NfsRules {
            access: ClientAccess { read_only: false, squash: Squash::Root, anonuid: 65534, anongid: 65534 },
        })),
        other => Err(format!("unsupported sharenfs value '{other}'")),
    }
}

impl NfsRules {
    /// What `client` may do; None when it is refused.
    pub fn access(&self, _client: IpAddr) -> Option<ClientAccess> {
        Some(self.access)
    }
}
