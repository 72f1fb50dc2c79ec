use super::*;

#[test]
fn off_on_and_default_name() {
    assert_eq!(parse("off"), Ok(None));
    assert_eq!(parse("on"), Ok(Some(SmbRules::default())));
    assert_eq!(default_share_name("tank/media"), "tank_media");
    assert_eq!(default_share_name("tank/a/b c"), "tank_a_b c");
}

#[test]
fn options_of_the_issue() {
    let rules = parse("name=photos,hosts allow=192.168.1.0/24 127.,readonly=on").unwrap().unwrap();
    assert_eq!(rules.name.as_deref(), Some("photos"));
    assert_eq!(rules.hosts_allow, vec!["192.168.1.0/24", "127."]);
    assert!(rules.read_only);
    assert!(!rules.guest_ok);
    let rules = parse("hosts deny=ALL EXCEPT 10.0.0.1, guest ok=yes, readonly=off").unwrap().unwrap();
    assert_eq!(rules.hosts_deny, vec!["ALL", "EXCEPT", "10.0.0.1"]);
    assert!(rules.guest_ok && !rules.read_only);
}

#[test]
fn bad_values_are_refused_with_one_line() {
    for bad in [
        "",
        "yes",
        "name=",
        "name=global",
        "name=a/b",
        "name=x]\n[evil",
        "hosts allow=",
        "hosts allow=1.2.3.4;evil=1",
        "hosts allow=EXCEPT 1.2.3.4",
        "readonly=maybe",
        "guest ok=sure",
        "browseable=no",
        "name=a,,readonly=on",
    ] {
        let err = parse(bad).expect_err(bad);
        assert!(!err.is_empty() && !err.contains('\n'), "{bad:?}: {err:?}");
    }
}

fn global() -> SmbGlobal {
    SmbGlobal {
        port: 4455,
        interfaces: vec!["127.0.0.1".into()],
        hosts_allow: vec!["127.".into()],
        hosts_deny: vec![],
        server_min_protocol: "SMB2".into(),
        workgroup: "WORKGROUP".into(),
        state_dir: PathBuf::from("/var/lib/tarn/smb"),
    }
}

#[test]
fn config_keeps_samba_state_under_ours() {
    let text = write_config(&global(), &[]);
    assert!(text.contains("\tsmb ports = 4455\n"));
    assert!(text.contains("\tinterfaces = 127.0.0.1\n\tbind interfaces only = yes\n"));
    assert!(text.contains("\thosts allow = 127.\n"));
    assert!(!text.contains("hosts deny"));
    assert!(text.contains("\tserver min protocol = SMB2\n"));
    for key in ["private dir", "lock directory", "state directory", "cache directory", "pid directory", "ncalrpc dir"]
    {
        let line = text.lines().find(|l| l.trim_start().starts_with(key)).expect(key);
        assert!(line.contains("= /var/lib/tarn/smb/"), "{line}");
    }
}

#[test]
fn config_share_sections() {
    let rules = parse("name=photos,hosts deny=127.0.0.1,readonly=on").unwrap().unwrap();
    let share = SmbShare {
        name: "photos".into(),
        path: PathBuf::from("/tank/photos"),
        dataset: "tank/photos".into(),
        read_only: rules.read_only,
        rules,
    };
    let text = write_config(&global(), &[share]);
    let section = text.split("\n[photos]\n").nth(1).expect("share section");
    assert!(section.contains("\tpath = /tank/photos\n"));
    assert!(section.contains("\tread only = yes\n"));
    assert!(section.contains("\thosts deny = 127.0.0.1\n"));
    assert!(section.contains("\tvfs objects = shadow_copy2 streams_xattr\n"));
    assert!(section.contains("\tshadow:snapdir = .zfs/snapshot\n"));
    assert!(section.contains("\tstore dos attributes = yes\n"));
    assert!(section.contains("\tea support = yes\n"));
}
