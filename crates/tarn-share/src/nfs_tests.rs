use super::*;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn rules(value: &str) -> NfsRules {
    parse(value).unwrap_or_else(|e| panic!("{value}: {e}")).expect("not off")
}

#[test]
fn off_and_on() {
    assert_eq!(parse("off"), Ok(None));
    let on = rules("on");
    let access = on.access(ip("203.0.113.9")).expect("on is for everyone by default");
    assert!(!access.read_only);
    assert_eq!(access.squash, Squash::Root);
    assert_eq!((access.anonuid, access.anongid), (ANON_ID_DEFAULT, ANON_ID_DEFAULT));
    assert!(on.access(ip("fd00::7")).is_some());
}

#[test]
fn on_uses_the_configured_hosts() {
    let hosts = HostList::from_items(&["192.168.1.0/24", "10.0.0.5"]).unwrap();
    let on = parse_with_default("on", &hosts).unwrap().unwrap();
    assert_eq!(on, NfsRules::on(&hosts));
    assert!(on.access(ip("192.168.1.77")).is_some());
    assert!(on.access(ip("10.0.0.5")).is_some());
    assert!(on.access(ip("10.0.0.6")).is_none());
    assert!(on.access(ip("192.168.2.1")).is_none());
}

#[test]
fn issue_example_rw_and_ro_networks() {
    let r = rules("rw=@192.168.1.0/24,ro=@10.0.0.0/8,no_root_squash");
    let lan = r.access(ip("192.168.1.20")).unwrap();
    assert!(!lan.read_only);
    assert_eq!(lan.squash, Squash::None);
    assert!(r.access(ip("10.200.3.4")).unwrap().read_only);
    assert!(r.access(ip("172.16.0.1")).is_none());
    assert!(r.access(ip("127.0.0.1")).is_none());
}

#[test]
fn v4_mapped_clients_match_v4_rules() {
    let r = rules("rw=@127.0.0.1/32");
    assert!(r.access(ip("::ffff:127.0.0.1")).is_some());
    assert!(r.access(ip("::ffff:127.0.0.2")).is_none());
    let single = rules("ro=127.0.0.1");
    assert!(single.access(ip("::ffff:127.0.0.1")).unwrap().read_only);
    // And a v4-mapped rule matches a plain v4 client.
    let mapped = rules("rw=[::ffff:10.1.2.3]");
    assert!(mapped.access(ip("10.1.2.3")).is_some());
}

#[test]
fn ipv6_hosts_and_networks() {
    let r = rules("rw=[fd00::1]:[fd01::]/64,ro=[::1]");
    assert!(!r.access(ip("fd00::1")).unwrap().read_only);
    assert!(r.access(ip("fd00::2")).is_none());
    assert!(r.access(ip("fd01::abcd")).is_some());
    assert!(r.access(ip("fd01:0:0:1::1")).is_none());
    assert!(r.access(ip("::1")).unwrap().read_only);
    // IPv4 networks never match IPv6 clients and the other way round.
    let v4 = rules("rw=@0.0.0.0/0");
    assert!(v4.access(ip("10.0.0.1")).is_some());
    assert!(v4.access(ip("fd00::1")).is_none());
}

#[test]
fn netmask_form_and_bare_network() {
    let r = rules("rw=192.168.4.0/255.255.254.0");
    assert!(r.access(ip("192.168.5.200")).is_some());
    assert!(r.access(ip("192.168.6.1")).is_none());
    let bare = rules("ro=172.16.0.0/12");
    assert!(bare.access(ip("172.31.255.255")).unwrap().read_only);
}

#[test]
fn a_single_host_beats_a_network_whatever_the_order() {
    // exportfs: single hosts before networks before `*`.
    let r = rules("ro=@192.168.1.0/24,rw=192.168.1.5");
    assert!(!r.access(ip("192.168.1.5")).unwrap().read_only);
    assert!(r.access(ip("192.168.1.6")).unwrap().read_only);
    let r = rules("rw,ro=@10.0.0.0/8");
    assert!(r.access(ip("10.1.1.1")).unwrap().read_only);
    assert!(!r.access(ip("8.8.8.8")).unwrap().read_only);
}

#[test]
fn among_the_same_kind_the_first_written_wins() {
    let r = rules("ro=@10.0.0.0/8,rw=@10.1.0.0/16");
    assert!(r.access(ip("10.1.2.3")).unwrap().read_only);
    let r = rules("rw=@10.1.0.0/16,ro=@10.0.0.0/8");
    assert!(!r.access(ip("10.1.2.3")).unwrap().read_only);
    let r = rules("ro,rw");
    assert!(r.access(ip("1.2.3.4")).unwrap().read_only);
}

#[test]
fn squash_options() {
    assert_eq!(rules("rw").squash(), Squash::Root);
    assert_eq!(rules("rw,root_squash").squash(), Squash::Root);
    assert_eq!(rules("rw,no_root_squash").squash(), Squash::None);
    let all = rules("rw,all_squash,anonuid=1000,anongid=100").access(ip("10.0.0.1")).unwrap();
    assert_eq!(all.squash, Squash::All);
    assert_eq!((all.anonuid, all.anongid), (1000, 100));
    assert_eq!(rules("rw,all_squash,no_all_squash").squash(), Squash::Root);
    assert_eq!(rules("rw,all_squash,no_root_squash").squash(), Squash::All);
}

#[test]
fn harmless_options_are_accepted() {
    let r = rules("rw,sync,async,no_subtree_check,insecure,crossmnt,sec=sys,fsid=7,nohide");
    assert_eq!(r, rules("rw"));
}

#[test]
fn no_rw_or_ro_exports_to_nobody() {
    // As OpenZFS: options without a host list write no exports line.
    let r = rules("no_root_squash");
    assert!(r.access(ip("127.0.0.1")).is_none());
}

#[test]
fn host_names_match_after_resolution() {
    let mut r = rules("ro=localhost");
    assert!(r.access(ip("127.0.0.1")).is_none(), "unresolved names match nobody");
    assert!(r.resolve_names().is_empty());
    assert!(r.access(ip("127.0.0.1")).unwrap().read_only);
    let mut missing = rules("rw=no-such-host.invalid");
    assert_eq!(missing.resolve_names(), vec!["no-such-host.invalid".to_string()]);
    assert!(missing.access(ip("127.0.0.1")).is_none());
}

#[test]
fn bad_values_are_refused_with_one_line() {
    for bad in [
        "",
        "rw=",
        "rw=@10.0.0.0/33",
        "rw=10.0.0.0/255.0.255.0",
        "rw=@staff",
        "rw=*.example.org",
        "rw=bad_host!",
        "rw=[fd00::1",
        "frobnicate",
        "rw,,ro",
        "anonuid=nobody",
        "anonuid",
        "sec=krb5",
        "sec=sys:krb5p",
        "no_root_squash=1",
        "rw=[fd00::]/129",
    ] {
        let err = parse(bad).expect_err(bad);
        assert!(!err.is_empty() && !err.contains('\n'), "{bad}: {err:?}");
    }
}

#[test]
fn describe_names_access_and_squash() {
    assert_eq!(
        rules("rw=@192.168.1.0/24,ro=@10.0.0.0/8,no_root_squash").describe(),
        "rw=192.168.1.0/24,ro=10.0.0.0/8,no_root_squash"
    );
    assert_eq!(rules("on").describe(), "rw=*,root_squash");
}
