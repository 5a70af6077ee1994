//! Every error kind, asserting file, line and field; and a good config.

use super::*;
use std::net::IpAddr;

/// The lab's router (docs/lab.md). Lines are numbered in comments so
/// tests that append to it can name lines.
#[path = "../testdata/edits.rs"]
mod edits;
use edits::LAB;

/// The lab config plus `extra` appended; returns the single diagnostic.
fn one_error(extra: &str) -> Diagnostic {
    let text = format!("{LAB}{extra}");
    match Config::parse("router.toml", &text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => {
            let d = e.diagnostics();
            assert_eq!(d.len(), 1, "{e}");
            d[0].clone()
        }
    }
}

const LAB_LINES: usize = 28;

fn assert_at(d: &Diagnostic, line: usize, field: &str) {
    assert_eq!(d.file, "router.toml", "{d}");
    assert_eq!(d.line, line, "{d}");
    assert_eq!(d.field, field, "{d}");
}

#[test]
fn lab_config_is_valid_and_resolved() {
    assert_eq!(LAB.lines().count(), LAB_LINES);
    let c = Config::parse("router.toml", LAB).unwrap();
    assert_eq!(c.interfaces.len(), 3);
    let v = c.interface("d1.100").unwrap();
    assert_eq!(v.vlan, Some(100));
    assert_eq!(v.port, "d1");
    assert_eq!(v.parent.as_deref(), Some("d1"));
    assert_eq!(v.mac, c.interface("d1").unwrap().mac);
    assert_eq!(v.mtu, 1500);
    assert_eq!(c.ports(), vec!["d0", "d1"]);
    assert_eq!(c.routes.len(), 3);
    assert_eq!(
        c.routes[0].next_hops,
        vec![NextHop {
            interface: "d0".into(),
            via: Some("198.18.0.108".parse().unwrap())
        }]
    );
    assert_eq!(c.routes[2].next_hops.len(), 2);
    assert!(c.routes[2].next_hops.iter().all(|h| h.interface == "d0"));
    assert_eq!(c.neighbours[0].mac.0, [2, 0, 0, 0, 0, 8]);
    assert_eq!(
        c.neighbours[0].ip,
        "198.18.0.108".parse::<IpAddr>().unwrap()
    );
}

#[test]
fn next_hops_table_and_direct_routes() {
    let c = Config::parse(
        "r.toml",
        &format!(
            "{LAB}\n[[routes]]\nprefix = \"203.0.113.0/24\"\nnext_hops = [{{ via = \"198.18.0.1\" }}, {{ via = \"198.19.0.1\", interface = \"d1\" }}]\n\n[[routes]]\nprefix = \"192.0.2.0/24\"\ninterface = \"d1\"\n"
        ),
    )
    .unwrap();
    let r = &c.routes[3];
    assert_eq!(r.next_hops[0].interface, "d0");
    assert_eq!(r.next_hops[1].interface, "d1");
    assert_eq!(c.routes[4].next_hops[0].via, None);
}

#[test]
fn reserved_sections_are_carried() {
    let c = Config::parse(
        "r.toml",
        &format!("{LAB}\n[workers]\ncores = [1]\n[io]\nbackend = \"af_xdp\"\n"),
    )
    .unwrap();
    assert!(c.firewall.is_none() && c.workers.is_some() && c.io.is_some());
}

#[test]
fn firewall_inline_rules_compile_against_the_interfaces() {
    let c = Config::parse(
        "r.toml",
        &format!(
            "{LAB}\n[firewall]\nrules = \"\"\"\nchain forward {{\n  policy accept\n  iif d1.100 oif d0 udp dport 53 counter drop\n}}\n\"\"\"\n"
        ),
    )
    .unwrap();
    let fw = c.firewall.as_ref().unwrap();
    assert_eq!(fw.source, "r.toml [firewall]");
    let rule = &fw.rules.chain(firewall::Chain::Forward).rules[0];
    assert_eq!(rule.line, 3);
    // d1.100 is the third interface (id 2), d0 the first (id 0).
    let mut key = firewall::PacketKey {
        src: 0x0a64_0002,
        dst: 0xc612_0001,
        proto: 17,
        sport: 999,
        dport: 53,
        iif: 2,
        oif: 0,
        len: 40,
        ..Default::default()
    };
    let mut w = firewall::FirewallWorker::new(std::sync::Arc::clone(&fw.compiled), 1);
    let mut v = [firewall::Verdict::default()];
    w.process_batch(
        firewall::Chain::Forward,
        std::slice::from_mut(&mut key),
        &mut v,
        0,
    );
    assert_eq!(v[0].action, firewall::Action::Drop);
    assert_eq!(v[0].rule, 0);
    key.iif = 1;
    w.process_batch(
        firewall::Chain::Forward,
        std::slice::from_mut(&mut key),
        &mut v,
        0,
    );
    assert_eq!(v[0].action, firewall::Action::Accept);
}

#[test]
fn firewall_rule_error_points_at_the_toml_line() {
    // Multi-line basic string: rule line 3 is two lines below `rules`.
    let d = one_error(
        "\n[firewall]\nrules = \"\"\"\nchain forward {\n  policy accept\n  ip saddr 10.0.0.1/8 drop\n}\n\"\"\"\n",
    );
    assert_eq!(d.file, "router.toml");
    assert_eq!(d.line, LAB_LINES + 6, "{d}");
    assert_eq!(d.field, "firewall.rules");
    assert!(d.to_string().contains("ip saddr"), "{d}");
    // Literal string, no newline after the delimiter.
    let d = one_error("\n[firewall]\nrules = '''chain forward {\n  ip daddr 1.2.3.4 bogus\n}'''\n");
    assert_eq!(d.line, LAB_LINES + 4, "{d}");
    // An escaped newline breaks the line correspondence: the error points
    // at the key and names the rule's own line.
    let d = one_error("\n[firewall]\nrules = \"chain forward {\\n ip daddr 1.2.3.4 bogus\\n}\"\n");
    assert_eq!(d.line, LAB_LINES + 3, "{d}");
    assert!(d.to_string().contains("line 2 of the rules"), "{d}");
}

#[test]
fn firewall_unknown_interface_is_an_error() {
    let d = one_error(
        "\n[firewall]\nrules = \"\"\"\nchain forward {\n  oifname eth9 drop\n}\n\"\"\"\n",
    );
    assert_eq!(d.line, LAB_LINES + 5, "{d}");
    assert_eq!(
        d.kind,
        ErrorKind::Firewall("unknown interface \"eth9\"".into())
    );
}

#[test]
fn firewall_rules_file_is_relative_to_the_config() {
    let dir = std::env::temp_dir().join(format!("fastfwd-config-fw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("rules.nft"),
        "chain forward {\n  policy drop\n  tcp dport 22 accept\n}\n",
    )
    .unwrap();
    let cfg = dir.join("router.toml");
    std::fs::write(&cfg, format!("{LAB}\n[firewall]\nfile = \"rules.nft\"\n")).unwrap();
    let c = Config::load(&cfg).unwrap();
    let fw = c.firewall.unwrap();
    assert_eq!(fw.source, "rules.nft");
    assert_eq!(fw.rules.chain(firewall::Chain::Forward).rules.len(), 1);
    // An error in the file names the file and its line.
    std::fs::write(
        dir.join("rules.nft"),
        "chain forward {\n  policy drop\n  tcp dport 99999 accept\n}\n",
    )
    .unwrap();
    let e = Config::load(&cfg).unwrap_err();
    let d = &e.diagnostics()[0];
    assert_eq!((d.file.as_str(), d.line), ("rules.nft", 3), "{e}");
    // A missing file: the error is on the `file` key's line.
    std::fs::write(&cfg, format!("{LAB}\n[firewall]\nfile = \"nope.nft\"\n")).unwrap();
    let e = Config::load(&cfg).unwrap_err();
    let d = &e.diagnostics()[0];
    assert_eq!(
        (d.line, d.field.as_str()),
        (LAB_LINES + 3, "firewall.file"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn firewall_needs_rules_or_file() {
    let d = one_error("\n[firewall]\n");
    assert_eq!(d.kind, ErrorKind::FirewallSource);
    let d = one_error("\n[firewall]\nrules = \"\"\nfile = \"x\"\n");
    assert_eq!(d.kind, ErrorKind::FirewallSource);
    let d = one_error("\n[firewall]\nrule = \"\"\n");
    assert_eq!(d.field, "firewall.rule", "{d}");
}

#[test]
fn syntax_error_names_line() {
    let d = one_error("\n[[routes]\n");
    assert_eq!(d.line, LAB_LINES + 2);
    assert_eq!(d.field, "");
    assert!(matches!(d.kind, ErrorKind::Syntax(_)), "{d}");
    assert!(
        d.to_string()
            .starts_with(&format!("router.toml:{}: syntax error", LAB_LINES + 2))
    );
    assert_eq!(d.to_string().lines().count(), 1, "{d}");
}

#[test]
fn unknown_field_names_field() {
    let d = one_error("\n[[routes]]\nprefix = \"10.0.0.0/8\"\nvai = \"198.18.0.1\"\n");
    assert_at(&d, LAB_LINES + 4, "routes[3].vai");
    assert!(
        matches!(&d.kind, ErrorKind::Schema(m) if m.contains("unknown field")),
        "{d}"
    );
}

#[test]
fn wrong_type_names_field() {
    let d =
        one_error("\n[[interfaces]]\nname = \"d2\"\nmac = \"02:00:00:00:02:10\"\nmtu = \"big\"\n");
    assert_at(&d, LAB_LINES + 5, "interfaces[2].mtu");
    assert!(matches!(d.kind, ErrorKind::Schema(_)), "{d}");
}

#[test]
fn missing_field_names_table() {
    let d = one_error("\n[[neighbours]]\ninterface = \"d0\"\nip = \"198.18.0.5\"\n");
    assert_at(&d, LAB_LINES + 2, "neighbours[1]");
    assert!(
        matches!(&d.kind, ErrorKind::Schema(m) if m.contains("mac")),
        "{d}"
    );
}

#[test]
fn duplicate_interface_name() {
    let d = one_error(
        "\n[[interfaces]]\nname = \"d0\"\nport = \"eth9\"\nmac = \"02:00:00:00:02:10\"\n",
    );
    assert_at(&d, LAB_LINES + 3, "interfaces[2].name");
    assert!(
        matches!(d.kind, ErrorKind::DuplicateName { first_line: 2, .. }),
        "{d}"
    );
}

#[test]
fn duplicate_vlan_name_against_interface() {
    let d = one_error("\n[[interfaces]]\nname = \"d1.100\"\nmac = \"02:00:00:00:02:10\"\n");
    assert_at(&d, LAB_LINES + 3, "interfaces[2].name");
    assert!(
        matches!(d.kind, ErrorKind::DuplicateName { first_line: 11, .. }),
        "{d}"
    );
}

#[test]
fn bad_interface_name() {
    let d = one_error(
        "\n[[interfaces]]\nname = \"this-name-is-far-too-long\"\nmac = \"02:00:00:00:02:10\"\n",
    );
    assert_at(&d, LAB_LINES + 3, "interfaces[2].name");
    assert!(matches!(d.kind, ErrorKind::BadName(_)), "{d}");
}

#[test]
fn duplicate_port() {
    let d =
        one_error("\n[[interfaces]]\nname = \"d2\"\nport = \"d1\"\nmac = \"02:00:00:00:02:10\"\n");
    assert_at(&d, LAB_LINES + 4, "interfaces[2].port");
    assert!(
        matches!(&d.kind, ErrorKind::DuplicatePort { other, .. } if other == "d1"),
        "{d}"
    );
}

#[test]
fn bad_mac() {
    let d = one_error("\n[[interfaces]]\nname = \"d2\"\nmac = \"02:00:00:00:02\"\n");
    assert_at(&d, LAB_LINES + 4, "interfaces[2].mac");
    assert!(matches!(d.kind, ErrorKind::BadMac { .. }), "{d}");
    let d = one_error("\n[[interfaces]]\nname = \"d2\"\nmac = \"01:00:5e:00:00:01\"\n");
    assert_at(&d, LAB_LINES + 4, "interfaces[2].mac");
    assert!(matches!(d.kind, ErrorKind::BadMac { .. }), "{d}");
    let d = one_error(
        "\n[[neighbours]]\ninterface = \"d0\"\nip = \"198.18.0.5\"\nmac = \"zz:00:00:00:00:01\"\n",
    );
    assert_at(&d, LAB_LINES + 5, "neighbours[1].mac");
    assert!(matches!(d.kind, ErrorKind::BadMac { .. }), "{d}");
}

#[test]
fn mtu_out_of_range() {
    let d = one_error("\n[[interfaces]]\nname = \"d2\"\nmac = \"02:00:00:00:02:10\"\nmtu = 67\n");
    assert_at(&d, LAB_LINES + 5, "interfaces[2].mtu");
    assert!(
        matches!(
            d.kind,
            ErrorKind::MtuOutOfRange {
                mtu: 67,
                min: 68,
                ..
            }
        ),
        "{d}"
    );
    let d =
        one_error("\n[[interfaces]]\nname = \"d2\"\nmac = \"02:00:00:00:02:10\"\nmtu = 100000\n");
    assert!(
        matches!(d.kind, ErrorKind::MtuOutOfRange { mtu: 100000, .. }),
        "{d}"
    );
    // IPv6 needs 1280.
    let d = one_error(
        "\n[[interfaces]]\nname = \"d2\"\nmac = \"02:00:00:00:02:10\"\nmtu = 1000\naddresses = [\"2001:db8::1/64\"]\n",
    );
    assert_at(&d, LAB_LINES + 5, "interfaces[2].mtu");
    assert!(
        matches!(d.kind, ErrorKind::MtuOutOfRange { min: 1280, .. }),
        "{d}"
    );
    // A VLAN cannot exceed its parent's MTU.
    let d = one_error(
        "\n[[interfaces]]\nname = \"d2\"\nmac = \"02:00:00:00:02:10\"\nmtu = 1400\n[[interfaces.vlans]]\nid = 7\nmtu = 1500\n",
    );
    assert_at(&d, LAB_LINES + 8, "interfaces[2].vlans[0].mtu");
    assert!(
        matches!(d.kind, ErrorKind::MtuOutOfRange { max: 1400, .. }),
        "{d}"
    );
}

#[test]
fn vlan_id_errors() {
    let d = one_error(
        "\n[[interfaces]]\nname = \"d2\"\nmac = \"02:00:00:00:02:10\"\nvlans = [{ id = 4095 }]\n",
    );
    assert_at(&d, LAB_LINES + 5, "interfaces[2].vlans[0].id");
    assert!(matches!(d.kind, ErrorKind::BadVlanId(4095)), "{d}");
    let d = one_error(
        "\n[[interfaces]]\nname = \"d2\"\nmac = \"02:00:00:00:02:10\"\nvlans = [{ id = 5 }, { id = 5, name = \"other\" }]\n",
    );
    assert_at(&d, LAB_LINES + 5, "interfaces[2].vlans[1].id");
    assert!(
        matches!(d.kind, ErrorKind::DuplicateVlan { id: 5, .. }),
        "{d}"
    );
}

#[test]
fn bad_interface_addresses() {
    for (addr, is_prefix_err) in [
        ("198.20.0.1", true),
        ("198.20.0.1/33", true),
        ("198.20.0.x/24", true),
        ("198.20.0.0/24", false),
        ("198.20.0.255/24", false),
        ("127.0.0.2/8", false),
        ("224.0.0.1/24", false),
        ("ff02::1/64", false),
    ] {
        let d = one_error(&format!(
            "\n[[interfaces]]\nname = \"d2\"\nmac = \"02:00:00:00:02:10\"\naddresses = [\"2001:db8::1/64\", \"{addr}\"]\n"
        ));
        assert_at(&d, LAB_LINES + 5, "interfaces[2].addresses[1]");
        if is_prefix_err {
            assert!(matches!(d.kind, ErrorKind::BadPrefix { .. }), "{addr}: {d}");
        } else {
            assert!(
                matches!(d.kind, ErrorKind::BadAddress { .. }),
                "{addr}: {d}"
            );
        }
    }
}

#[test]
fn duplicate_and_overlapping_addresses() {
    let d = one_error(
        "\n[[interfaces]]\nname = \"d2\"\nmac = \"02:00:00:00:02:10\"\naddresses = [\"198.18.0.10/24\"]\n",
    );
    assert_at(&d, LAB_LINES + 5, "interfaces[2].addresses[0]");
    assert!(
        matches!(&d.kind, ErrorKind::DuplicateAddress { other, .. } if other == "d0"),
        "{d}"
    );
    let d = one_error(
        "\n[[interfaces]]\nname = \"d2\"\nmac = \"02:00:00:00:02:10\"\naddresses = [\"198.18.1.1/16\"]\n",
    );
    assert_at(&d, LAB_LINES + 5, "interfaces[2].addresses[0]");
    assert!(
        matches!(&d.kind, ErrorKind::OverlappingSubnet { other, .. } if other == "d0"),
        "{d}"
    );
    let d = one_error(
        "\n[[interfaces]]\nname = \"d2\"\nmac = \"02:00:00:00:02:10\"\nvlans = [{ id = 3, addresses = [\"10.100.0.77/25\"] }]\n",
    );
    assert_at(&d, LAB_LINES + 5, "interfaces[2].vlans[0].addresses[0]");
    assert!(
        matches!(&d.kind, ErrorKind::OverlappingSubnet { other, .. } if other == "d1.100"),
        "{d}"
    );
    // Link-local subnets repeat across interfaces without conflict.
    let text = format!(
        "{LAB}\n[[interfaces]]\nname = \"d2\"\nmac = \"02:00:00:00:02:10\"\naddresses = [\"fe80::1/64\"]\n[[interfaces]]\nname = \"d3\"\nmac = \"02:00:00:00:03:10\"\naddresses = [\"fe80::2/64\"]\n"
    );
    Config::parse("router.toml", &text).unwrap();
}

#[test]
fn bad_route_prefix() {
    let d = one_error("\n[[routes]]\nprefix = \"10.0.0.1/8\"\nvia = \"198.18.0.1\"\n");
    assert_at(&d, LAB_LINES + 3, "routes[3].prefix");
    assert!(matches!(d.kind, ErrorKind::BadPrefix { .. }), "{d}");
    let d = one_error("\n[[routes]]\nprefix = \"10.0.0.0/40\"\nvia = \"198.18.0.1\"\n");
    assert!(matches!(d.kind, ErrorKind::BadPrefix { .. }), "{d}");
}

#[test]
fn duplicate_route() {
    let d = one_error("\n[[routes]]\nprefix = \"198.19.0.0/16\"\nvia = \"198.19.0.1\"\n");
    assert_at(&d, LAB_LINES + 3, "routes[3].prefix");
    assert!(
        matches!(d.kind, ErrorKind::DuplicateRoute { first_line: 18, .. }),
        "{d}"
    );
}

#[test]
fn gateway_not_connected() {
    let d = one_error("\n[[routes]]\nprefix = \"10.0.0.0/8\"\nvia = \"10.9.9.9\"\n");
    assert_at(&d, LAB_LINES + 4, "routes[3].via");
    assert_eq!(
        d.to_string(),
        format!(
            "router.toml:{}: routes[3].via: 10.9.9.9 is not on any connected subnet",
            LAB_LINES + 4
        )
    );
    let d =
        one_error("\n[[routes]]\nprefix = \"10.0.0.0/8\"\nvia = [\"198.18.0.1\", \"10.9.9.9\"]\n");
    assert_at(&d, LAB_LINES + 4, "routes[3].via[1]");
    assert!(matches!(d.kind, ErrorKind::GatewayNotConnected(_)), "{d}");
    let d = one_error(
        "\n[[routes]]\nprefix = \"10.0.0.0/8\"\nnext_hops = [\n  { via = \"198.18.0.1\" },\n  { via = \"10.9.9.9\" },\n]\n",
    );
    assert_at(&d, LAB_LINES + 6, "routes[3].next_hops[1].via");
    assert!(matches!(d.kind, ErrorKind::GatewayNotConnected(_)), "{d}");
}

#[test]
fn gateway_on_wrong_interface_or_local_or_family() {
    let d = one_error(
        "\n[[routes]]\nprefix = \"10.0.0.0/8\"\nvia = \"198.18.0.1\"\ninterface = \"d1\"\n",
    );
    assert_at(&d, LAB_LINES + 4, "routes[3].via");
    assert!(matches!(d.kind, ErrorKind::NotOnInterface { .. }), "{d}");
    let d = one_error("\n[[routes]]\nprefix = \"10.0.0.0/8\"\nvia = \"198.18.0.10\"\n");
    assert_at(&d, LAB_LINES + 4, "routes[3].via");
    assert!(matches!(d.kind, ErrorKind::GatewayIsLocal { .. }), "{d}");
    let d = one_error("\n[[routes]]\nprefix = \"10.0.0.0/8\"\nvia = \"2001:2::1\"\n");
    assert_at(&d, LAB_LINES + 4, "routes[3].via");
    assert!(matches!(d.kind, ErrorKind::FamilyMismatch { .. }), "{d}");
    let d = one_error("\n[[routes]]\nprefix = \"2001:db8::/32\"\nvia = \"fe80::1\"\n");
    assert_at(&d, LAB_LINES + 4, "routes[3].via");
    assert!(
        matches!(d.kind, ErrorKind::LinkLocalNeedsInterface(_)),
        "{d}"
    );
    let d = one_error("\n[[routes]]\nprefix = \"10.0.0.0/8\"\nvia = \"not-an-ip\"\n");
    assert_at(&d, LAB_LINES + 4, "routes[3].via");
    assert!(matches!(d.kind, ErrorKind::BadAddress { .. }), "{d}");
}

#[test]
fn route_unknown_interface() {
    let d = one_error("\n[[routes]]\nprefix = \"10.0.0.0/8\"\ninterface = \"eth7\"\n");
    assert_at(&d, LAB_LINES + 4, "routes[3].interface");
    assert!(
        matches!(&d.kind, ErrorKind::UnknownInterface(n) if n == "eth7"),
        "{d}"
    );
}

#[test]
fn route_next_hop_shape_errors() {
    let d = one_error("\n[[routes]]\nprefix = \"10.0.0.0/8\"\n");
    assert_at(&d, LAB_LINES + 2, "routes[3]");
    assert!(matches!(d.kind, ErrorKind::NoNextHop), "{d}");
    let d = one_error(
        "\n[[routes]]\nprefix = \"10.0.0.0/8\"\nvia = \"198.18.0.1\"\nnext_hops = [{ via = \"198.18.0.2\" }]\n",
    );
    assert_at(&d, LAB_LINES + 5, "routes[3].next_hops");
    assert!(matches!(d.kind, ErrorKind::MixedNextHops), "{d}");
    let d = one_error(
        "\n[[routes]]\nprefix = \"10.0.0.0/8\"\nvia = [\"198.18.0.1\", \"198.18.0.1\"]\n",
    );
    assert_at(&d, LAB_LINES + 4, "routes[3].via[1]");
    assert!(matches!(d.kind, ErrorKind::DuplicateNextHop(_)), "{d}");
    let many: Vec<String> = (1..=17).map(|i| format!("\"198.18.0.{i}\"")).collect();
    let d = one_error(&format!(
        "\n[[routes]]\nprefix = \"10.0.0.0/8\"\nvia = [{}]\n",
        many.join(", ")
    ));
    assert_at(&d, LAB_LINES + 2, "routes[3]");
    assert!(
        matches!(d.kind, ErrorKind::TooManyNextHops { count: 17, max: 16 }),
        "{d}"
    );
}

#[test]
fn neighbour_errors() {
    let d = one_error(
        "\n[[neighbours]]\ninterface = \"d9\"\nip = \"198.18.0.5\"\nmac = \"02:00:00:00:00:05\"\n",
    );
    assert_at(&d, LAB_LINES + 3, "neighbours[1].interface");
    assert!(matches!(d.kind, ErrorKind::UnknownInterface(_)), "{d}");
    let d = one_error(
        "\n[[neighbours]]\ninterface = \"d1\"\nip = \"198.18.0.5\"\nmac = \"02:00:00:00:00:05\"\n",
    );
    assert_at(&d, LAB_LINES + 4, "neighbours[1].ip");
    assert!(matches!(d.kind, ErrorKind::NotOnInterface { .. }), "{d}");
    let d = one_error(
        "\n[[neighbours]]\ninterface = \"d0\"\nip = \"198.18.0.108\"\nmac = \"02:00:00:00:00:05\"\n",
    );
    assert_at(&d, LAB_LINES + 4, "neighbours[1].ip");
    assert!(
        matches!(d.kind, ErrorKind::DuplicateNeighbour { first_line: 27, .. }),
        "{d}"
    );
    let d = one_error(
        "\n[[neighbours]]\ninterface = \"d0\"\nip = \"198.18.0.10\"\nmac = \"02:00:00:00:00:05\"\n",
    );
    assert!(matches!(d.kind, ErrorKind::GatewayIsLocal { .. }), "{d}");
    let d = one_error(
        "\n[[neighbours]]\ninterface = \"d0\"\nip = \"198.18.0\"\nmac = \"02:00:00:00:00:05\"\n",
    );
    assert_at(&d, LAB_LINES + 4, "neighbours[1].ip");
    assert!(matches!(d.kind, ErrorKind::BadAddress { .. }), "{d}");
}

#[test]
fn every_problem_is_reported_in_file_order() {
    let text = format!(
        "{LAB}\n[[routes]]\nprefix = \"10.0.0.0/8\"\nvia = \"10.9.9.9\"\n\n[[neighbours]]\ninterface = \"d9\"\nip = \"198.18.0.5\"\nmac = \"02:00:00:00:00:05\"\n"
    );
    let e = Config::parse("router.toml", &text).unwrap_err();
    let d = e.diagnostics();
    assert_eq!(d.len(), 2, "{e}");
    assert_eq!(d[0].field, "routes[3].via");
    assert_eq!(d[1].field, "neighbours[1].interface");
    assert!(d[0].line < d[1].line);
    assert_eq!(e.to_string().lines().count(), 2);
}

#[test]
fn load_names_the_file_and_reports_io_errors() {
    let dir = std::env::temp_dir().join(format!("fastfwd-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("lab.toml");
    std::fs::write(
        &path,
        format!("{LAB}\n[[routes]]\nprefix = \"10.0.0.0/8\"\nvia = \"10.9.9.9\"\n"),
    )
    .unwrap();
    let e = Config::load(&path).unwrap_err();
    assert!(e.to_string().starts_with("lab.toml:"), "{e}");
    assert_eq!(e.diagnostics()[0].file, "lab.toml");
    let e = Config::load(dir.join("missing.toml")).unwrap_err();
    assert!(matches!(e, ConfigError::Io { .. }));
    std::fs::remove_dir_all(&dir).unwrap();
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    use super::edits::edited_lab as mutated;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any edit of a valid file either loads or names problems on
        /// lines that exist; never a panic.
        #[test]
        fn edits_load_or_point_inside_the_file(text in mutated()) {
            let lines = text.lines().count().max(1);
            match Config::parse("router.toml", &text) {
                Ok(c) => {
                    // What loads once loads again to the same thing.
                    prop_assert_eq!(Config::parse("router.toml", &text).unwrap(), c);
                }
                Err(e) => {
                    prop_assert!(!e.diagnostics().is_empty());
                    for d in e.diagnostics() {
                        prop_assert!(d.line >= 1 && d.line <= lines + 1, "{} of {}", d, lines);
                        prop_assert!(d.to_string().starts_with("router.toml:"));
                    }
                }
            }
        }

        /// Arbitrary text never panics the loader.
        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
            let _ = Config::parse("x.toml", &text);
        }
    }
}

#[test]
fn every_example_config_loads() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            Config::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            n += 1;
        }
    }
    assert!(n >= 2, "examples/*.toml: found {n}");
}
