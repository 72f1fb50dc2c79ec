//! zpool's vdev specification grammar:
//!
//! ```text
//! spec   := plain* group* logs? cache? spares?
//! plain  := DEVICE                       (each a top-level vdev: a stripe)
//! group  := (mirror | raidz | raidz1 | raidz2 | raidz3) DEVICE+
//! logs   := log (plain | mirror DEVICE+)+  (log vdevs: disks or mirrors)
//! cache  := cache DEVICE+                (L2ARC devices, single disks)
//! spares := spare DEVICE+                (hot spares, not top-level vdevs)
//! ```
//!
//! `mirror a b mirror c d` is two mirrors striped (RAID10);
//! `mirror a b spare c` is one mirror with one hot spare;
//! `mirror a b log mirror c d` is one mirror with a mirrored log. As in
//! zpool, the spare section may come anywhere and ends at the next group
//! keyword, and every vdev after `log` is a log vdev (until `spare`); a
//! raidz log is refused, as zpool refuses it. The cache section, like the
//! spare section, may come anywhere and holds single devices: a mirror or
//! raidz after `cache` is refused (zpool cannot mirror cache devices
//! either). `special`, `dedup` and `draid` are recognized and refused as
//! not yet supported.

use tarn_daemon::proto::{VdevGroup, VdevKind};

/// What a vdev specification asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolSpec {
    pub vdevs: Vec<VdevGroup>,
    pub spares: Vec<String>,
    /// Cache devices (L2ARC).
    pub cache: Vec<String>,
}

enum Keyword {
    Group(VdevKind),
    Spare,
    Log,
    Cache,
}

fn keyword(token: &str) -> Result<Option<Keyword>, String> {
    match token {
        "mirror" => Ok(Some(Keyword::Group(VdevKind::Mirror))),
        "raidz" | "raidz1" => Ok(Some(Keyword::Group(VdevKind::Raidz { parity: 1 }))),
        "raidz2" => Ok(Some(Keyword::Group(VdevKind::Raidz { parity: 2 }))),
        "raidz3" => Ok(Some(Keyword::Group(VdevKind::Raidz { parity: 3 }))),
        "spare" => Ok(Some(Keyword::Spare)),
        "log" => Ok(Some(Keyword::Log)),
        "cache" => Ok(Some(Keyword::Cache)),
        "special" | "dedup" => Err(format!("'{token}' vdevs are not yet supported")),
        t if t.starts_with("draid") => Err("dRAID vdevs are not yet supported".into()),
        t if t.starts_with("raidz") => Err(format!("invalid vdev type '{t}' (raidz parity is 1, 2 or 3)")),
        _ => Ok(None),
    }
}

fn minimum(kind: &VdevKind) -> usize {
    match kind {
        VdevKind::Disk => 1,
        VdevKind::Mirror => 2,
        VdevKind::Raidz { parity } => *parity as usize + 1,
    }
}

fn kind_name(kind: &VdevKind) -> String {
    match kind {
        VdevKind::Disk => "disk".into(),
        VdevKind::Mirror => "mirror".into(),
        VdevKind::Raidz { parity } => format!("raidz{parity}"),
    }
}

/// Where plain devices go while parsing.
enum Section {
    /// Each plain device is a top-level vdev of its own.
    Stripe,
    Group(VdevGroup),
    Spares,
    Cache,
}

/// Parses a specification for `pool create` or `pool add`. It may hold
/// only spares (`pool add tank spare /d8`); `pool create` checks that it
/// has top-level vdevs.
pub fn parse_pool_spec(tokens: &[String]) -> Result<PoolSpec, String> {
    if tokens.is_empty() {
        return Err("missing vdev specification".into());
    }
    let mut spec = PoolSpec::default();
    let mut section = Section::Stripe;
    let mut spare_seen = false;
    let mut log = false;
    let mut log_seen = false;
    let mut cache_seen = false;
    let close = |section: Section, spec: &mut PoolSpec| {
        if let Section::Group(group) = section {
            spec.vdevs.push(group);
        }
    };
    for token in tokens {
        match keyword(token)? {
            Some(Keyword::Group(kind)) => {
                if matches!(section, Section::Cache) {
                    return Err(format!("{} is not supported for cache devices (a cache device is a single disk)", kind_name(&kind)));
                }
                if log && matches!(kind, VdevKind::Raidz { .. }) {
                    return Err(format!("{} is not supported for log devices (a log vdev is a disk or a mirror)", kind_name(&kind)));
                }
                close(std::mem::replace(&mut section, Section::Group(VdevGroup { kind, devices: Vec::new(), log })), &mut spec);
            }
            Some(Keyword::Spare) => {
                if spare_seen {
                    return Err("'spare' may be given only once".into());
                }
                spare_seen = true;
                log = false;
                close(std::mem::replace(&mut section, Section::Spares), &mut spec);
            }
            Some(Keyword::Cache) => {
                if cache_seen {
                    return Err("'cache' may be given only once".into());
                }
                cache_seen = true;
                log = false;
                close(std::mem::replace(&mut section, Section::Cache), &mut spec);
            }
            Some(Keyword::Log) => {
                log = true;
                log_seen = true;
                close(std::mem::replace(&mut section, Section::Stripe), &mut spec);
            }
            None => match &mut section {
                Section::Stripe => spec.vdevs.push(VdevGroup { kind: VdevKind::Disk, devices: vec![token.clone()], log }),
                Section::Group(group) => group.devices.push(token.clone()),
                Section::Spares => spec.spares.push(token.clone()),
                Section::Cache => spec.cache.push(token.clone()),
            },
        }
    }
    close(section, &mut spec);
    for group in &spec.vdevs {
        let needed = minimum(&group.kind);
        if group.devices.len() < needed {
            return Err(format!(
                "{} requires at least {needed} devices, got {}",
                kind_name(&group.kind),
                group.devices.len()
            ));
        }
    }
    if log_seen && !spec.vdevs.iter().any(|g| g.log) {
        return Err("log requires at least 1 device, got 0".into());
    }
    if spare_seen && spec.spares.is_empty() {
        return Err("spare requires at least 1 device, got 0".into());
    }
    if cache_seen && spec.cache.is_empty() {
        return Err("cache requires at least 1 device, got 0".into());
    }
    let mut seen = std::collections::HashSet::new();
    for device in spec.vdevs.iter().flat_map(|g| &g.devices).chain(&spec.spares).chain(&spec.cache) {
        if !seen.insert(device) {
            return Err(format!("device '{device}' is given more than once"));
        }
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(spec: &str) -> Result<Vec<VdevGroup>, String> {
        parse_spares(spec).map(|s| s.vdevs)
    }

    fn parse_spares(spec: &str) -> Result<PoolSpec, String> {
        let tokens: Vec<String> = spec.split_whitespace().map(String::from).collect();
        parse_pool_spec(&tokens)
    }

    fn group(kind: VdevKind, devices: &[&str]) -> VdevGroup {
        VdevGroup { kind, devices: devices.iter().map(|d| d.to_string()).collect(), log: false }
    }

    fn log_group(kind: VdevKind, devices: &[&str]) -> VdevGroup {
        VdevGroup { log: true, ..group(kind, devices) }
    }

    #[test]
    fn log_vdevs_are_disks_or_mirrors() {
        assert_eq!(
            parse("mirror a b log mirror c d").unwrap(),
            vec![group(VdevKind::Mirror, &["a", "b"]), log_group(VdevKind::Mirror, &["c", "d"])]
        );
        assert_eq!(parse("log e").unwrap(), vec![log_group(VdevKind::Disk, &["e"])]);
        assert_eq!(
            parse("a log e f").unwrap(),
            vec![group(VdevKind::Disk, &["a"]), log_group(VdevKind::Disk, &["e"]), log_group(VdevKind::Disk, &["f"])]
        );
        // The spare section ends the log section.
        let spec = parse_spares("mirror a b log c spare d").unwrap();
        assert_eq!(spec.vdevs, vec![group(VdevKind::Mirror, &["a", "b"]), log_group(VdevKind::Disk, &["c"])]);
        assert_eq!(spec.spares, vec!["d"]);
        assert!(parse("mirror a b log raidz c d e").unwrap_err().contains("not supported for log devices"));
        assert!(parse("mirror a b log").unwrap_err().contains("log requires at least 1 device"));
        assert!(parse("mirror a b log mirror c").unwrap_err().contains("at least 2 devices"));
        assert!(parse("mirror a b log a").unwrap_err().contains("more than once"));
    }

    #[test]
    fn plain_devices_stripe() {
        assert_eq!(
            parse("/a /b").unwrap(),
            vec![group(VdevKind::Disk, &["/a"]), group(VdevKind::Disk, &["/b"])]
        );
    }

    #[test]
    fn raid10_is_two_mirrors() {
        assert_eq!(
            parse("mirror a b mirror c d").unwrap(),
            vec![group(VdevKind::Mirror, &["a", "b"]), group(VdevKind::Mirror, &["c", "d"])]
        );
    }

    #[test]
    fn raidz_levels() {
        assert_eq!(parse("raidz a b").unwrap(), vec![group(VdevKind::Raidz { parity: 1 }, &["a", "b"])]);
        assert_eq!(
            parse("raidz1 a b c d").unwrap(),
            vec![group(VdevKind::Raidz { parity: 1 }, &["a", "b", "c", "d"])]
        );
        assert_eq!(parse("raidz2 a b c").unwrap()[0].kind, VdevKind::Raidz { parity: 2 });
        assert_eq!(parse("raidz3 a b c d").unwrap()[0].kind, VdevKind::Raidz { parity: 3 });
        assert_eq!(parse("x raidz2 a b c").unwrap().len(), 2);
    }

    #[test]
    fn too_few_devices() {
        assert_eq!(parse("mirror a").unwrap_err(), "mirror requires at least 2 devices, got 1");
        assert_eq!(parse("raidz2 a b").unwrap_err(), "raidz2 requires at least 3 devices, got 2");
        assert!(parse("raidz3 a b c").unwrap_err().contains("at least 4"));
        assert!(parse("mirror a b mirror").unwrap_err().contains("got 0"));
        assert!(parse("").is_err());
    }

    #[test]
    fn unsupported_and_invalid() {
        for kind in ["special", "dedup"] {
            let err = parse(&format!("mirror a b {kind} c")).unwrap_err();
            assert!(err.contains("not yet supported"), "{err}");
        }
        assert!(parse("raidz4 a b c d e").unwrap_err().contains("invalid vdev type"));
        assert!(parse("draid a b c").unwrap_err().contains("not yet supported"));
        assert!(parse("mirror a a").unwrap_err().contains("more than once"));
    }

    #[test]
    fn spares_are_not_top_level_vdevs() {
        let spec = parse_spares("mirror a b spare c d").unwrap();
        assert_eq!(spec.vdevs, vec![group(VdevKind::Mirror, &["a", "b"])]);
        assert_eq!(spec.spares, vec!["c", "d"]);
        let spec = parse_spares("spare c").unwrap();
        assert!(spec.vdevs.is_empty());
        assert_eq!(spec.spares, vec!["c"]);
        // The spare section ends at the next group keyword, as in zpool.
        let spec = parse_spares("spare c mirror a b").unwrap();
        assert_eq!((spec.vdevs.len(), spec.spares.len()), (1, 1));
        assert!(parse_spares("mirror a b spare").unwrap_err().contains("at least 1 device"));
        assert!(parse_spares("spare a spare b").unwrap_err().contains("only once"));
        assert!(parse_spares("mirror a b spare a").unwrap_err().contains("more than once"));
    }

    #[test]
    fn cache_devices_are_single_disks() {
        let spec = parse_spares("raidz2 a b c d log e cache f g spare h").unwrap();
        assert_eq!(spec.vdevs, vec![group(VdevKind::Raidz { parity: 2 }, &["a", "b", "c", "d"]), log_group(VdevKind::Disk, &["e"])]);
        assert_eq!((spec.cache, spec.spares), (vec!["f".to_string(), "g".to_string()], vec!["h".to_string()]));
        let spec = parse_spares("cache x").unwrap();
        assert!(spec.vdevs.is_empty());
        assert_eq!(spec.cache, vec!["x"]);
        assert!(parse_spares("mirror a b cache mirror c d").unwrap_err().contains("not supported for cache devices"));
        assert!(parse_spares("mirror a b cache c raidz d e f").unwrap_err().contains("not supported for cache devices"));
        assert!(parse_spares("mirror a b cache").unwrap_err().contains("cache requires at least 1 device"));
        assert!(parse_spares("mirror a b cache c cache d").unwrap_err().contains("only once"));
        assert!(parse_spares("mirror a b cache a").unwrap_err().contains("more than once"));
    }
}
