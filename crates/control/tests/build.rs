//! The one table builder ([`RouterState::build_over`]) from a config
//! alone, as replay uses it: what each config item becomes in the tables,
//! the fast FIB routing as the reference one, and every valid config
//! building.

use config::Config;
use fib::Lookup;
use fib::poptrie::{Poptrie4, Poptrie6};
use fib::reference::{ReferenceFib4, ReferenceFib6};
use proptest::prelude::*;
use rib::RouterState;
use std::net::IpAddr;

const CFG: &str = r#"
[[interfaces]]
name = "d0"
mac = "02:00:00:00:00:10"
addresses = ["198.18.0.10/24", "2001:2::10/64"]

[[interfaces]]
name = "d1"
mac = "02:00:00:00:01:10"
addresses = ["198.19.0.10/24"]
vlans = [{ id = 100, addresses = ["10.100.0.1/24"] }]

[[routes]]
prefix = "203.0.113.0/24"
via = ["198.18.0.108", "198.19.0.108"]

[[neighbours]]
interface = "d0"
ip = "198.18.0.108"
mac = "02:00:00:00:00:08"
"#;

#[test]
fn builds_interfaces_routes_and_neighbours() {
    let c = Config::parse("t.toml", CFG).unwrap();
    let built = RouterState::new(c.clone())
        .build_over(ReferenceFib4::new(), ReferenceFib6::new())
        .unwrap();
    assert_eq!(built.ports, vec!["d0", "d1"]);
    let t = &built.tables;
    assert_eq!(t.interfaces().len(), 3);
    let (vid, v) = t.interface_by_name("d1.100").unwrap();
    assert_eq!(vid, 2);
    assert_eq!(v.port, 1);
    assert_eq!(v.vlan, pipeline::Vlan::Single(100));
    // The static route is one next-hop set of two hops.
    let nh = t.fib4.lookup(u32::from_be_bytes([203, 0, 113, 9])).unwrap();
    let hops = t.next_hops(nh).unwrap();
    assert_eq!(hops.len(), 2);
    assert_eq!(hops[0].interface, 0);
    assert_eq!(hops[1].interface, 1);
    // Connected subnets are routed directly on their interface.
    let nh = t.fib4.lookup(u32::from_be_bytes([10, 100, 0, 77])).unwrap();
    let hops = t.next_hops(nh).unwrap();
    assert_eq!((hops[0].interface, hops[0].gateway), (2, None));
    assert!(
        t.fib6
            .lookup(u128::from(
                "2001:2::99".parse::<std::net::Ipv6Addr>().unwrap()
            ))
            .is_some()
    );
    assert!(t.fib4.lookup(u32::from_be_bytes([8, 8, 8, 8])).is_none());
    let ip: IpAddr = "198.18.0.108".parse().unwrap();
    assert_eq!(t.neighbour(0, ip), Some(wire::MacAddr([2, 0, 0, 0, 0, 8])));
    assert!(config::is_router_address(&c, "10.100.0.1".parse().unwrap()));
}

#[test]
fn fast_and_reference_tables_route_alike() {
    let state = RouterState::new(Config::parse("t.toml", CFG).unwrap());
    let fast = state.build().unwrap();
    let reference = state
        .build_over(ReferenceFib4::new(), ReferenceFib6::new())
        .unwrap();
    let mut x: u32 = 0x2545_f491;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        // Half the probes inside the configured space, half anywhere.
        let a = if x & 1 == 0 {
            x
        } else {
            (x & 0x0000_ffff) | 0xc612_0000
        };
        assert_eq!(
            fast.tables.fib4.lookup(a),
            reference.tables.fib4.lookup(a),
            "{a:#x}"
        );
        let a6 = (u128::from(x) << 64) | 0x2001_0002_0000_0000_0000_0000_0000_0000;
        assert_eq!(
            fast.tables.fib6.lookup(a6),
            reference.tables.fib6.lookup(a6)
        );
    }
}

#[test]
fn every_example_config_loads_and_builds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let c = Config::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            RouterState::new(c)
                .build_over(Poptrie4::new(), Poptrie6::new())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            n += 1;
        }
    }
    assert!(n >= 2, "examples/*.toml: found {n}");
}

#[path = "../../config/testdata/edits.rs"]
mod edits;
use edits::edited_lab as mutated;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A config that validates builds tables (validation is the only
    /// gate): one interface per configured interface, and every route's
    /// next hops on interfaces that exist.
    #[test]
    fn valid_edits_build_tables(text in mutated()) {
        if let Ok(c) = Config::parse("router.toml", &text) {
            let built = RouterState::new(c.clone())
                .build_over(ReferenceFib4::new(), ReferenceFib6::new())
                .unwrap();
            prop_assert_eq!(built.tables.interfaces().len(), c.interfaces.len());
            for r in &c.routes {
                for h in &r.next_hops {
                    prop_assert!(c.interface(&h.interface).is_some());
                }
            }
        }
    }
}
