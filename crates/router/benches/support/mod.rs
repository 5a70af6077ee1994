//! What the router benches share: the route file they read and the
//! two-port router state they build it into.

use control::netlink::Event;
use rib::RouterState;
use std::path::PathBuf;

/// Two ports, d0 and d1, each with an IPv4 and an IPv6 subnet.
pub const CONFIG: &str = r#"
[[interfaces]]
name = "d0"
mac = "02:00:00:00:00:10"
addresses = ["198.18.0.10/24", "2001:2::10/64"]

[[interfaces]]
name = "d1"
mac = "02:00:00:00:01:10"
addresses = ["198.19.0.10/24", "2001:2:0:8000::10/64"]
"#;

/// The route file named on the command line (the first argument that is
/// not an option), else data/full-table-prefixes.txt.gz.
pub fn route_file_arg() -> PathBuf {
    std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../data/full-table-prefixes.txt.gz"
            ))
        })
}

/// A router state over [`CONFIG`] whose kernel mirror has the two links
/// (d0 index 2, d1 index 3), up, and their addresses; routes go through
/// d1.
pub fn two_port_state() -> RouterState {
    let cfg = config::Config::parse("bench.toml", CONFIG).expect("config");
    let mut state = RouterState::new(cfg);
    for (ifindex, name, mac) in [(2, "d0", 0x10u8), (3, "d1", 0x11)] {
        state.kernel.apply(&Event::Link {
            add: true,
            ifindex,
            name: name.into(),
            mac: Some([2, 0, 0, 0, 0, mac]),
            mtu: Some(1500),
            up: true,
            vrf: None,
            master: None,
            kind: None,
            vlan: None,
        });
    }
    for (ifindex, addr, len) in [
        (2, "198.18.0.10", 24),
        (2, "2001:2::10", 64),
        (3, "198.19.0.10", 24),
        (3, "2001:2:0:8000::10", 64),
    ] {
        state.kernel.apply(&Event::Addr {
            add: true,
            ifindex,
            addr: addr.parse().unwrap(),
            prefix_len: len,
        });
    }
    state
}
