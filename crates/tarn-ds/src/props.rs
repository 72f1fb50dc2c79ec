//! Dataset properties: names, validation, defaults, inheritance and the
//! `SOURCE` column, exactly as `zfs get` shows them.
//!
//! Stored form: each dataset keeps its *own* values, as maps from property
//! name to a normalized string (sizes in exact bytes, everything else as
//! the user spelled a valid value): the locally set ones, and the ones a
//! receive brought (`received`, see `received.rs`), some of which `tarn
//! inherit` may have masked. A dataset's own value of a property is its
//! local one, else its received one unless masked. The effective value is
//! found by walking from the dataset up to the pool's root dataset; the
//! first own value wins (`local` or `received` on the dataset itself,
//! `inherited from X` on an ancestor), else the default (`default`).
//! Read-only properties have source `-`.

use tarn_block::{ChecksumKind, Compression};

use crate::size::{format_bytes, parse_size};

/// One property's definition.
#[derive(Clone, Copy, Debug)]
pub struct PropDef {
    pub name: &'static str,
    /// Settable by `tarn set` / `tarn create -o`.
    pub settable: bool,
    /// Descendants inherit a local setting.
    pub inheritable: bool,
    /// Stored form of the default (settable properties only).
    pub default: &'static str,
}

const fn settable(name: &'static str, inheritable: bool, default: &'static str) -> PropDef {
    PropDef { name, settable: true, inheritable, default }
}
const fn readonly(name: &'static str) -> PropDef {
    PropDef { name, settable: false, inheritable: false, default: "-" }
}

/// Every dataset property, in the order `tarn get all` prints them.
pub const PROPERTIES: &[PropDef] = &[
    readonly("type"),
    readonly("creation"),
    readonly("used"),
    readonly("available"),
    readonly("referenced"),
    readonly("compressratio"),
    readonly("mounted"),
    settable("quota", false, "none"),
    settable("refreservation", false, "none"),
    settable("recordsize", true, "131072"),
    settable("mountpoint", true, "-"),
    settable("checksum", true, "on"),
    settable("compression", true, "lz4"),
    settable("atime", true, "on"),
    settable("copies", true, "1"),
    settable("readonly", true, "off"),
    settable("snapdir", true, "hidden"),
    settable("sync", true, "standard"),
    settable("primarycache", true, "all"),
    settable("logbias", true, "latency"),
    settable("secondarycache", true, "all"),
    settable("sharenfs", true, "off"),
    settable("sharesmb", true, "off"),
    readonly("logicalused"),
    readonly("usedbysnapshots"),
    readonly("usedbydataset"),
    readonly("usedbychildren"),
    readonly("usedbyrefreservation"),
    readonly("written"),
    readonly("createtxg"),
    readonly("userrefs"),
    readonly("receive_resume_token"),
    readonly("origin"),
    readonly("clones"),
    readonly("guid"),
    readonly("encryption"),
    readonly("keylocation"),
    readonly("keyformat"),
    readonly("pbkdf2iters"),
    readonly("encryptionroot"),
    readonly("keystatus"),
];

/// `name` is a property too (for `-o name,...`) but not part of `all`.
const NAME: PropDef = readonly("name");
/// Volumes' own (volumes.rs): in `all` for volumes only. `volsize` is set
/// through its own path (`Pool::set_volsize`), `volblocksize` only at
/// creation.
const VOLUME_DEFS: &[PropDef] = &[readonly("volsize"), readonly("volblocksize")];

/// Default column set of `tarn list`.
pub const LIST_DEFAULT_COLUMNS: &[&str] = &["name", "used", "available", "referenced", "mountpoint"];

/// Column header for a property (`tarn list`), as zfs prints it.
pub fn column_header(prop: &str) -> String {
    match prop {
        "available" => "AVAIL".into(),
        "referenced" => "REFER".into(),
        "compressratio" => "RATIO".into(),
        "recordsize" => "RECSIZE".into(),
        "compression" => "COMPRESS".into(),
        "readonly" => "RDONLY".into(),
        "logicalused" => "LUSED".into(),
        "usedbysnapshots" => "USEDSNAP".into(),
        "usedbydataset" => "USEDDS".into(),
        "usedbychildren" => "USEDCHILD".into(),
        other => other.to_ascii_uppercase(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PropError {
    #[error("bad property '{0}'")]
    Unknown(String),
    /// A property ZFS has that tarn does not implement yet.
    #[error("property '{0}' is not yet supported")]
    NotYetSupported(String),
    #[error("bad value '{value}' for property '{prop}': {why}")]
    BadValue { prop: String, value: String, why: String },
    #[error("cannot set property '{0}': read-only property")]
    ReadOnly(String),
    #[error("bad property assignment '{0}': expected PROPERTY=VALUE")]
    Syntax(String),
    /// A name with a colon that is not a valid user property name.
    #[error("invalid user property name '{0}': lowercase letters, digits and ': + - . _', with a colon, not starting with ':', at most 256 characters")]
    BadUserName(String),
}

/// ZFS dataset properties tarn does not implement yet: asked for, they are
/// "not yet supported" rather than unknown, so a ZFS user's script fails
/// with the right reason.
pub const NOT_YET_SUPPORTED: &[&str] = &[
    "volmode",
    "refquota",
    "reservation",
    "dedup",
    "canmount",
    "exec",
    "setuid",
    "devices",
    "xattr",
    "acltype",
    "aclinherit",
    "aclmode",
    "casesensitivity",
    "normalization",
    "utf8only",
    "dnodesize",
    "redundant_metadata",
    "special_small_blocks",
    "relatime",
    "overlay",
    "nbmand",
    "vscan",
    "zoned",
    "snapdev",
    "filesystem_limit",
    "snapshot_limit",
    "filesystem_count",
    "snapshot_count",
    "mlslabel",
    "context",
    "fscontext",
    "defcontext",
    "rootcontext",
    "logicalreferenced",
    "refcompressratio",
    "objsetid",
    "version",
    "prefetch",
    "direct",
    "longname",
];

/// Longest user property name and value, as in ZFS.
pub const USER_PROP_NAME_MAX: usize = 256;
pub const USER_PROP_VALUE_MAX: usize = 8192;

/// A user property (`module:property`, e.g. `com.example:backup`): a name
/// with a colon, of lowercase letters, digits and `: + - . _`, not
/// starting with `:`. Kept as the user wrote it, always inherited.
pub fn is_user_property(name: &str) -> bool {
    name.contains(':')
        && !name.starts_with(':')
        && name.len() <= USER_PROP_NAME_MAX
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ":+-._".contains(c))
}

/// A property name a command may name: a native one (or its abbreviation)
/// or a user property. Errors say whether the name is unknown, a ZFS
/// property not yet supported, or a malformed user property.
pub fn check_name(name: &str) -> Result<(), PropError> {
    if name.contains(':') {
        if is_user_property(name) {
            return Ok(());
        }
        return Err(PropError::BadUserName(name.into()));
    }
    lookup(name).map(|_| ())
}

/// The canonical spelling of a property name (`avail` → `available`; a
/// user property as it is).
pub fn canonical_name(name: &str) -> String {
    lookup(name).map(|d| d.name.to_string()).unwrap_or_else(|_| name.to_string())
}

/// Resolve a property name or its zfs abbreviation to the definition.
pub fn lookup(name: &str) -> Result<&'static PropDef, PropError> {
    let canonical = match name {
        "avail" => "available",
        "refer" => "referenced",
        "ratio" => "compressratio",
        "recsize" => "recordsize",
        "compress" => "compression",
        "rdonly" => "readonly",
        "lused" => "logicalused",
        other => other,
    };
    if canonical == "name" {
        return Ok(&NAME);
    }
    if let Some(def) = PROPERTIES.iter().chain(VOLUME_DEFS).find(|p| p.name == canonical) {
        return Ok(def);
    }
    if NOT_YET_SUPPORTED.contains(&canonical) {
        return Err(PropError::NotYetSupported(canonical.to_string()));
    }
    Err(PropError::Unknown(name.to_string()))
}

/// Split `prop=value` (for `-o` and `set`).
pub fn split_assignment(text: &str) -> Result<(&str, &str), PropError> {
    match text.split_once('=') {
        Some((prop, value)) if !prop.is_empty() => Ok((prop, value)),
        _ => Err(PropError::Syntax(text.to_string())),
    }
}

fn bad(prop: &str, value: &str, why: &str) -> PropError {
    PropError::BadValue { prop: prop.into(), value: value.into(), why: why.into() }
}

/// Validate a value for a settable property (native or user); returns the
/// canonical property name and the normalized stored value.
pub fn validate(prop: &str, value: &str) -> Result<(String, String), PropError> {
    if prop.contains(':') {
        check_name(prop)?;
        if value.len() > USER_PROP_VALUE_MAX || value.contains('\0') {
            return Err(bad(prop, value, "a user property value is at most 8192 bytes, without NUL"));
        }
        return Ok((prop.to_string(), value.to_string()));
    }
    let (name, stored) = validate_native(prop, value)?;
    Ok((name.to_string(), stored))
}

fn validate_native(prop: &str, value: &str) -> Result<(&'static str, String), PropError> {
    let def = lookup(prop)?;
    if !def.settable {
        return Err(PropError::ReadOnly(def.name.to_string()));
    }
    let name = def.name;
    let stored = match name {
        "recordsize" => {
            let why = "must be a power of 2 from 512 to 1M";
            let bytes = parse_size(value).ok_or_else(|| bad(name, value, why))?;
            if !(512..=1 << 20).contains(&bytes) || !bytes.is_power_of_two() {
                return Err(bad(name, value, why));
            }
            bytes.to_string()
        }
        "compression" => {
            Compression::parse(value)
                .ok_or_else(|| bad(name, value, "must be off, on, lz4, zstd or zstd-1 .. zstd-19"))?;
            value.to_string()
        }
        "checksum" => {
            ChecksumKind::parse(value)
                .ok_or_else(|| bad(name, value, "must be on, fletcher4, sha256 or blake3"))?;
            value.to_string()
        }
        "copies" => match value {
            "1" | "2" | "3" => value.to_string(),
            _ => return Err(bad(name, value, "must be 1, 2 or 3")),
        },
        "atime" | "readonly" => match value {
            "on" | "off" => value.to_string(),
            _ => return Err(bad(name, value, "must be on or off")),
        },
        "snapdir" => match value {
            "hidden" | "visible" => value.to_string(),
            _ => return Err(bad(name, value, "must be hidden or visible")),
        },
        "sync" => match value {
            "standard" | "always" | "disabled" => value.to_string(),
            _ => return Err(bad(name, value, "must be standard, always or disabled")),
        },
        "primarycache" | "secondarycache" => match value {
            "all" | "metadata" | "none" => value.to_string(),
            _ => return Err(bad(name, value, "must be all, metadata or none")),
        },
        "logbias" => match value {
            "latency" | "throughput" => value.to_string(),
            _ => return Err(bad(name, value, "must be latency or throughput")),
        },
        "quota" | "refreservation" => {
            if value == "none" {
                "none".to_string()
            } else {
                let bytes = parse_size(value)
                    .ok_or_else(|| bad(name, value, "must be 'none' or a size such as 10G"))?;
                if bytes == 0 {
                    "none".to_string()
                } else {
                    bytes.to_string()
                }
            }
        }
        // The share rules' own parsers decide (crates/tarn-share); the
        // value is stored as written.
        "sharenfs" => {
            tarn_share::nfs::parse(value).map_err(|why| bad(name, value, &why))?;
            value.to_string()
        }
        "sharesmb" => {
            tarn_share::smb::parse(value).map_err(|why| bad(name, value, &why))?;
            value.to_string()
        }
        "mountpoint" => match value {
            "none" | "legacy" => value.to_string(),
            path if path.starts_with('/') && !path.contains('\0') => {
                if path.split('/').any(|c| c == "." || c == "..") {
                    return Err(bad(name, value, "must not contain '.' or '..' components"));
                }
                let trimmed = path.trim_end_matches('/');
                if trimmed.is_empty() {
                    "/".to_string()
                } else {
                    trimmed.to_string()
                }
            }
            _ => return Err(bad(name, value, "must be an absolute path, 'none' or 'legacy'")),
        },
        _ => unreachable!("settable property {name} without a validator"),
    };
    Ok((name, stored))
}

/// Which of a dataset's own values a property has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Own {
    /// Set on it (`tarn set`, `create -o`, `recv -o`).
    Local,
    /// Brought by a receive (`send -p`/`-R`), neither overridden by a local
    /// value nor masked.
    Received,
}

/// Where an effective value came from (the `SOURCE` column).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Local,
    /// The dataset's received value.
    Received,
    Default,
    Inherited(String),
    /// Read-only properties.
    None,
}

impl Source {
    /// As `zfs get` prints it.
    pub fn display(&self) -> String {
        match self {
            Source::Local => "local".into(),
            Source::Received => "received".into(),
            Source::Default => "default".into(),
            Source::Inherited(from) => format!("inherited from {from}"),
            Source::None => "-".into(),
        }
    }
    /// OpenZFS 2.3 JSON `source.type`.
    pub fn json_type(&self) -> &'static str {
        match self {
            Source::Local => "LOCAL",
            Source::Received => "RECEIVED",
            Source::Default => "DEFAULT",
            Source::Inherited(_) => "INHERITED",
            Source::None => "NONE",
        }
    }
    /// OpenZFS 2.3 JSON `source.data`.
    pub fn json_data(&self) -> String {
        match self {
            Source::Inherited(from) => from.clone(),
            _ => "-".into(),
        }
    }
}

/// The parent of a dataset name (`tank/a/b` → `tank/a`), `None` for a root.
pub fn parent_name(name: &str) -> Option<&str> {
    name.rsplit_once('/').map(|(parent, _)| parent)
}

fn join_mountpoint(base: &str, relative: &str) -> String {
    if relative.is_empty() {
        base.to_string()
    } else if base == "/" {
        format!("/{relative}")
    } else {
        format!("{base}/{relative}")
    }
}

/// A dataset's own value of a property: `own(dataset, prop)` gives the
/// value and which of the dataset's values it is (see [`Own`]).
pub type OwnLookup<'a> = &'a dyn Fn(&str, &str) -> Option<(String, Own)>;

/// Effective stored value and source of a settable property of dataset
/// `name`: its own value (local, else received), else the nearest
/// ancestor's own value for an inheritable property, else the default.
pub fn effective(prop: &PropDef, name: &str, own: OwnLookup) -> (String, Source) {
    debug_assert!(prop.settable);
    let mut current = Some(name);
    while let Some(dataset) = current {
        if let Some((value, kind)) = own(dataset, prop.name) {
            let source = if dataset != name {
                Source::Inherited(dataset.to_string())
            } else if kind == Own::Local {
                Source::Local
            } else {
                Source::Received
            };
            let value = if prop.name == "mountpoint" && value.starts_with('/') {
                join_mountpoint(&value, name.get(dataset.len() + 1..).unwrap_or(""))
            } else {
                value
            };
            return (value, source);
        }
        if !prop.inheritable {
            break;
        }
        current = parent_name(dataset);
    }
    if prop.name == "mountpoint" {
        return (format!("/{name}"), Source::Default);
    }
    (prop.default.to_string(), Source::Default)
}

/// Human or exact (`-p`) form of a settable property's stored value.
pub fn display_value(prop: &str, stored: &str, parsable: bool) -> String {
    match prop {
        "recordsize" => match stored.parse::<u64>() {
            Ok(bytes) if !parsable => format_bytes(bytes),
            _ => stored.to_string(),
        },
        "quota" | "refreservation" => match stored.parse::<u64>() {
            Ok(bytes) if !parsable => format_bytes(bytes),
            Ok(_) => stored.to_string(),
            Err(_) if parsable => "0".to_string(),
            Err(_) => stored.to_string(),
        },
        _ => stored.to_string(),
    }
}

/// Where a dataset mounts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mountpoint {
    Path(String),
    None,
    Legacy,
}

/// The effective settings that drive the object set and the file system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub recordsize: u32,
    pub compression: Compression,
    pub checksum: ChecksumKind,
    pub copies: u8,
    pub atime: bool,
    pub readonly: bool,
    pub quota: Option<u64>,
    pub mountpoint: Mountpoint,
    /// `snapdir=visible`: `.zfs` is listed in the root directory.
    pub snapdir_visible: bool,
    /// `sync`.
    pub sync: SyncProp,
    /// `primarycache`.
    pub primarycache: tarn_obj::CachePolicy,
    /// `logbias`.
    pub logbias: tarn_obj::LogBias,
    /// `secondarycache`.
    pub secondarycache: tarn_obj::CachePolicy,
}

/// The `sync` property's values (what each means: tarn-fs `SyncMode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncProp {
    #[default]
    Standard,
    Always,
    Disabled,
}

/// Effective typed settings of dataset `name`.
pub fn settings(name: &str, own: OwnLookup) -> Settings {
    let value = |prop: &str| {
        let def = lookup(prop).expect("known property");
        effective(def, name, own).0
    };
    let mountpoint = match value("mountpoint").as_str() {
        "none" => Mountpoint::None,
        "legacy" => Mountpoint::Legacy,
        path => Mountpoint::Path(path.to_string()),
    };
    Settings {
        recordsize: value("recordsize").parse().unwrap_or(128 * 1024),
        compression: Compression::parse(&value("compression")).unwrap_or(Compression::Lz4),
        checksum: ChecksumKind::parse(&value("checksum")).unwrap_or(ChecksumKind::Fletcher4),
        copies: value("copies").parse().unwrap_or(1),
        atime: value("atime") == "on",
        readonly: value("readonly") == "on",
        snapdir_visible: value("snapdir") == "visible",
        sync: match value("sync").as_str() {
            "always" => SyncProp::Always,
            "disabled" => SyncProp::Disabled,
            _ => SyncProp::Standard,
        },
        primarycache: cache_policy(&value("primarycache")),
        secondarycache: cache_policy(&value("secondarycache")),
        logbias: match value("logbias").as_str() {
            "throughput" => tarn_obj::LogBias::Throughput,
            _ => tarn_obj::LogBias::Latency,
        },
        quota: value("quota").parse().ok(),
        mountpoint,
    }
}

fn cache_policy(value: &str) -> tarn_obj::CachePolicy {
    match value {
        "metadata" => tarn_obj::CachePolicy::Metadata,
        "none" => tarn_obj::CachePolicy::None,
        _ => tarn_obj::CachePolicy::All,
    }
}

/// Pool properties (`tarn pool get/set`), in `all` order. `feature@…`:
/// `active` when the pool uses the feature (its labels list it), else
/// `enabled` (this tarn would start using it when needed).
pub const POOL_PROPERTIES: &[&str] = &[
    "name",
    "size",
    "allocated",
    "free",
    "checkpoint",
    "capacity",
    "health",
    "guid",
    "ashift",
    "altroot",
    "comment",
    "failmode",
    "autoreplace",
    "autotrim",
    "feature@encryption",
];

/// Validate a settable pool property; returns the canonical name.
pub fn validate_pool_prop(prop: &str, value: &str) -> Result<&'static str, PropError> {
    match lookup_pool_prop(prop)? {
        "comment" => {
            if value.len() > 32 || value.chars().any(|c| c.is_control()) {
                return Err(bad(prop, value, "must be at most 32 printable characters"));
            }
            Ok("comment")
        }
        "failmode" => match value {
            "wait" | "continue" => Ok("failmode"),
            _ => Err(bad(prop, value, "must be wait or continue")),
        },
        "autoreplace" => match value {
            "on" | "off" => Ok("autoreplace"),
            _ => Err(bad(prop, value, "must be on or off")),
        },
        "autotrim" => match value {
            "on" | "off" => Ok("autotrim"),
            _ => Err(bad(prop, value, "must be on or off")),
        },
        "altroot" => Err(PropError::ReadOnly("altroot (set it with -R at create or import)".into())),
        other => Err(PropError::ReadOnly(other.to_string())),
    }
}

/// Canonical pool property name (accepts `alloc` and `cap`).
pub fn lookup_pool_prop(prop: &str) -> Result<&'static str, PropError> {
    let canonical = match prop {
        "alloc" => "allocated",
        "cap" => "capacity",
        other => other,
    };
    POOL_PROPERTIES
        .iter()
        .copied()
        .find(|p| *p == canonical)
        .ok_or_else(|| PropError::Unknown(prop.to_string()))
}

/// Defaults of the stored pool properties.
pub fn pool_prop_default(prop: &str) -> &'static str {
    match prop {
        "failmode" => "wait",
        "autoreplace" => "off",
        "autotrim" => "off",
        _ => "-",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn locals(entries: &[(&str, &str, &str)]) -> BTreeMap<(String, String), String> {
        entries.iter().map(|(d, p, v)| ((d.to_string(), p.to_string()), v.to_string())).collect()
    }

    #[test]
    fn validates_recordsize() {
        assert_eq!(validate("recordsize", "128K").unwrap(), ("recordsize".into(), "131072".into()));
        assert_eq!(validate("recordsize", "1M").unwrap().1, "1048576");
        assert_eq!(validate("recordsize", "131072").unwrap().1, "131072");
        assert_eq!(validate("recsize", "512").unwrap(), ("recordsize".into(), "512".into()));
        for bad_value in ["256", "2M", "100K", "abc", "", "0"] {
            let err = validate("recordsize", bad_value).unwrap_err();
            assert!(matches!(err, PropError::BadValue { .. }), "{bad_value}: {err}");
            assert!(err.to_string().contains("recordsize"));
        }
    }

    #[test]
    fn validates_enumerations() {
        for ok in ["off", "on", "lz4", "zstd", "zstd-1", "zstd-19"] {
            assert_eq!(validate("compression", ok).unwrap().1, ok);
        }
        for no in ["zstd-0", "zstd-20", "gzip", "LZ4"] {
            assert!(validate("compression", no).is_err(), "{no}");
        }
        for ok in ["on", "fletcher4", "sha256", "blake3"] {
            assert!(validate("checksum", ok).is_ok());
        }
        assert!(validate("checksum", "md5").is_err());
        assert!(validate("copies", "0").is_err());
        assert!(validate("copies", "4").is_err());
        assert_eq!(validate("copies", "3").unwrap().1, "3");
        assert!(validate("atime", "yes").is_err());
        assert_eq!(validate("readonly", "on").unwrap().1, "on");
    }

    #[test]
    fn validates_quota_and_mountpoint() {
        assert_eq!(validate("quota", "none").unwrap().1, "none");
        assert_eq!(validate("quota", "10G").unwrap().1, (10u64 << 30).to_string());
        assert_eq!(validate("quota", "0").unwrap().1, "none");
        assert!(validate("quota", "lots").is_err());
        assert_eq!(validate("mountpoint", "/mnt/x/").unwrap().1, "/mnt/x");
        assert_eq!(validate("mountpoint", "/").unwrap().1, "/");
        assert_eq!(validate("mountpoint", "none").unwrap().1, "none");
        assert_eq!(validate("mountpoint", "legacy").unwrap().1, "legacy");
        assert!(validate("mountpoint", "relative").is_err());
        assert!(validate("mountpoint", "/a/../b").is_err());
    }

    #[test]
    fn unknown_and_readonly_properties() {
        assert_eq!(validate("foo", "1").unwrap_err().to_string(), "bad property 'foo'");
        assert_eq!(validate("used", "1").unwrap_err(), PropError::ReadOnly("used".into()));
        assert!(lookup("avail").is_ok());
        assert_eq!(lookup("refer").unwrap().name, "referenced");
        assert!(split_assignment("novalue").is_err());
        assert!(split_assignment("=x").is_err());
        assert_eq!(split_assignment("a=b=c").unwrap(), ("a", "b=c"));
    }

    #[test]
    fn user_properties_and_not_yet_supported_ones() {
        assert!(is_user_property("com.example:note"));
        assert!(is_user_property("a:b"));
        for bad_name in ["nocolon", ":leading", "Upper:case", "sp ace:x", &format!("a:{}", "x".repeat(300))] {
            assert!(!is_user_property(bad_name), "{bad_name}");
        }
        assert_eq!(validate("com.example:note", "any value").unwrap(), ("com.example:note".into(), "any value".into()));
        assert!(validate("com.example:note", &"x".repeat(USER_PROP_VALUE_MAX + 1)).is_err());
        assert!(matches!(check_name("Bad:Name"), Err(PropError::BadUserName(_))));
        assert!(check_name("com.example:note").is_ok());
        assert_eq!(lookup("refquota").unwrap_err(), PropError::NotYetSupported("refquota".into()));
        assert!(!lookup("volsize").unwrap().settable, "volsize is set through Pool::set_volsize");
        assert_eq!(validate("sharenfs", "rw=@10.0.0.0/8").unwrap(), ("sharenfs".into(), "rw=@10.0.0.0/8".into()));
        assert_eq!(
            validate("sharenfs", "rw=@10.0.0.0/33").unwrap_err().to_string(),
            "bad value 'rw=@10.0.0.0/33' for property 'sharenfs': rw=: host '@10.0.0.0/33': bad network length '33'"
        );
        assert_eq!(validate("sharesmb", "name=photos").unwrap(), ("sharesmb".into(), "name=photos".into()));
        assert!(validate("sharesmb", "name=global").is_err());
        assert!(lookup("sharenfs").unwrap().inheritable && lookup("sharesmb").unwrap().inheritable);
        assert_eq!(lookup("bogus").unwrap_err(), PropError::Unknown("bogus".into()));
        assert_eq!(canonical_name("avail"), "available");
        assert_eq!(canonical_name("com.example:x"), "com.example:x");
    }

    #[test]
    fn inheritance_and_source() {
        let map = locals(&[
            ("tank", "compression", "zstd"),
            ("tank/a", "recordsize", "16384"),
            ("tank", "quota", "1073741824"),
        ]);
        let local = |d: &str, p: &str| map.get(&(d.to_string(), p.to_string())).map(|v| (v.clone(), Own::Local));
        let compression = lookup("compression").unwrap();
        assert_eq!(effective(compression, "tank", &local), ("zstd".into(), Source::Local));
        assert_eq!(effective(compression, "tank/a/b", &local), ("zstd".into(), Source::Inherited("tank".into())));
        let recordsize = lookup("recordsize").unwrap();
        assert_eq!(effective(recordsize, "tank", &local), ("131072".into(), Source::Default));
        assert_eq!(effective(recordsize, "tank/a/b", &local).1, Source::Inherited("tank/a".into()));
        // quota is not inherited
        let quota = lookup("quota").unwrap();
        assert_eq!(effective(quota, "tank/a", &local), ("none".into(), Source::Default));
        assert_eq!(effective(quota, "tank", &local).1, Source::Local);
        assert_eq!(Source::Inherited("tank".into()).display(), "inherited from tank");
        assert_eq!(Source::None.display(), "-");
    }

    #[test]
    fn mountpoint_inherits_as_parent_path_plus_name() {
        let map = locals(&[("tank", "mountpoint", "/mnt/tank"), ("tank/x", "mountpoint", "none"), ("pool", "mountpoint", "/")]);
        let local = |d: &str, p: &str| map.get(&(d.to_string(), p.to_string())).map(|v| (v.clone(), Own::Local));
        let mountpoint = lookup("mountpoint").unwrap();
        assert_eq!(effective(mountpoint, "tank", &local), ("/mnt/tank".into(), Source::Local));
        assert_eq!(
            effective(mountpoint, "tank/media/photos", &local),
            ("/mnt/tank/media/photos".into(), Source::Inherited("tank".into()))
        );
        assert_eq!(effective(mountpoint, "tank/x/y", &local).0, "none");
        assert_eq!(effective(mountpoint, "pool/a", &local).0, "/a");
        assert_eq!(effective(mountpoint, "other/a", &local), ("/other/a".into(), Source::Default));
        let s = settings("tank/x/y", &local);
        assert_eq!(s.mountpoint, Mountpoint::None);
        assert_eq!(s.recordsize, 131072);
        assert_eq!(s.compression, Compression::Lz4);
    }

    #[test]
    fn display_forms() {
        assert_eq!(display_value("recordsize", "131072", false), "128K");
        assert_eq!(display_value("recordsize", "131072", true), "131072");
        assert_eq!(display_value("quota", "none", false), "none");
        assert_eq!(display_value("quota", "none", true), "0");
        assert_eq!(display_value("quota", "1073741824", false), "1G");
        assert_eq!(column_header("available"), "AVAIL");
    }

    #[test]
    fn pool_props() {
        assert_eq!(validate_pool_prop("failmode", "continue").unwrap(), "failmode");
        assert!(validate_pool_prop("failmode", "panic").is_err());
        assert!(matches!(validate_pool_prop("size", "1"), Err(PropError::ReadOnly(_))));
        assert!(matches!(validate_pool_prop("bogus", "1"), Err(PropError::Unknown(_))));
        assert_eq!(lookup_pool_prop("cap").unwrap(), "capacity");
        assert_eq!(validate_pool_prop("autotrim", "on").unwrap(), "autotrim");
        assert!(validate_pool_prop("autotrim", "yes").is_err());
        assert!(matches!(validate_pool_prop("checkpoint", "1"), Err(PropError::ReadOnly(_))));
        assert_eq!(pool_prop_default("autotrim"), "off");
    }
}
