//! zpool's vdev specification grammar:
//!
//! ```text
//! spec  := plain* group*
//! plain := DEVICE                       (each a top-level vdev: a stripe)
//! group := (mirror | raidz | raidz1 | raidz2 | raidz3) DEVICE+
//! ```
//!
//! `mirror a b mirror c d` is two mirrors striped (RAID10). `log`, `cache`,
//! `spare`, `special`, `dedup` and `draid` are recognized and refused as not
//! yet supported.

use tarn_daemon::proto::{VdevGroup, VdevKind};

fn keyword(token: &str) -> Result<Option<VdevKind>, String> {
    match token {
        "mirror" => Ok(Some(VdevKind::Mirror)),
        "raidz" | "raidz1" => Ok(Some(VdevKind::Raidz { parity: 1 })),
        "raidz2" => Ok(Some(VdevKind::Raidz { parity: 2 })),
        "raidz3" => Ok(Some(VdevKind::Raidz { parity: 3 })),
        "log" | "cache" | "spare" | "special" | "dedup" => {
            Err(format!("'{token}' vdevs are not yet supported"))
        }
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

pub fn parse_vdev_spec(tokens: &[String]) -> Result<Vec<VdevGroup>, String> {
    if tokens.is_empty() {
        return Err("missing vdev specification".into());
    }
    let mut groups: Vec<VdevGroup> = Vec::new();
    let mut current: Option<VdevGroup> = None;
    for token in tokens {
        match keyword(token)? {
            Some(kind) => {
                if let Some(group) = current.take() {
                    groups.push(group);
                }
                current = Some(VdevGroup { kind, devices: Vec::new() });
            }
            None => match current.as_mut() {
                Some(group) => group.devices.push(token.clone()),
                None => groups.push(VdevGroup { kind: VdevKind::Disk, devices: vec![token.clone()] }),
            },
        }
    }
    if let Some(group) = current.take() {
        groups.push(group);
    }
    for group in &groups {
        let needed = minimum(&group.kind);
        if group.devices.len() < needed {
            return Err(format!(
                "{} requires at least {needed} devices, got {}",
                kind_name(&group.kind),
                group.devices.len()
            ));
        }
    }
    let mut seen = std::collections::HashSet::new();
    for device in groups.iter().flat_map(|g| &g.devices) {
        if !seen.insert(device) {
            return Err(format!("device '{device}' is given more than once"));
        }
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(spec: &str) -> Result<Vec<VdevGroup>, String> {
        let tokens: Vec<String> = spec.split_whitespace().map(String::from).collect();
        parse_vdev_spec(&tokens)
    }

    fn group(kind: VdevKind, devices: &[&str]) -> VdevGroup {
        VdevGroup { kind, devices: devices.iter().map(|d| d.to_string()).collect() }
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
        for kind in ["log", "cache", "spare"] {
            let err = parse(&format!("mirror a b {kind} c")).unwrap_err();
            assert!(err.contains("not yet supported"), "{err}");
        }
        assert!(parse("raidz4 a b c d e").unwrap_err().contains("invalid vdev type"));
        assert!(parse("draid a b c").unwrap_err().contains("not yet supported"));
        assert!(parse("mirror a a").unwrap_err().contains("more than once"));
    }
}
