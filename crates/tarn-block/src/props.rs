//! Per-block choices recorded in every block pointer.

/// Compression algorithm, as the `compression` property names it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Compression {
    Off,
    Lz4,
    /// zstd at level 1..=19.
    Zstd(u8),
}

/// Checksum algorithm, as the `checksum` property names it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ChecksumKind {
    Fletcher4,
    Sha256,
    Blake3,
}

impl Compression {
    /// Parse a `compression` property value (`on` means lz4).
    pub fn parse(s: &str) -> Option<Compression> {
        match s {
            "off" => Some(Compression::Off),
            "on" | "lz4" => Some(Compression::Lz4),
            "zstd" => Some(Compression::Zstd(3)),
            _ => {
                let level: u8 = s.strip_prefix("zstd-")?.parse().ok()?;
                (1..=19).contains(&level).then_some(Compression::Zstd(level))
            }
        }
    }
    pub fn name(&self) -> String {
        match self {
            Compression::Off => "off".into(),
            Compression::Lz4 => "lz4".into(),
            Compression::Zstd(3) => "zstd".into(),
            Compression::Zstd(l) => format!("zstd-{l}"),
        }
    }
}

impl ChecksumKind {
    /// Parse a `checksum` property value (`on` means fletcher4).
    pub fn parse(s: &str) -> Option<ChecksumKind> {
        match s {
            "on" | "fletcher4" => Some(ChecksumKind::Fletcher4),
            "sha256" => Some(ChecksumKind::Sha256),
            "blake3" => Some(ChecksumKind::Blake3),
            _ => None,
        }
    }
    pub fn name(&self) -> &'static str {
        match self {
            ChecksumKind::Fletcher4 => "fletcher4",
            ChecksumKind::Sha256 => "sha256",
            ChecksumKind::Blake3 => "blake3",
        }
    }
}
