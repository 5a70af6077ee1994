//! Fuzz target: the rtnetlink decoder (`control::netlink`) on arbitrary
//! bytes taken as one netlink datagram, as the control thread reads it from
//! its socket: `messages` splits it, `parse` turns each message into an
//! event. Must never panic. Every event must be usable the way the control
//! plane uses it: Debug-formatted, asked `is_forwarding_route` and
//! `route_discard` (which must agree), applied in order to a kernel mirror
//! (`KernelState::change`) that must then name what it does not mirror
//! (`KernelState::unmodelled`, rules printed as `ip rule` does), and the mirror must then build the router's
//! tables for a config whose ports are links the datagram may name ("d0",
//! "d1") without panicking. Decoded unicast routes and neighbours are
//! re-encoded with the crate's own request builders (`route_request`,
//! `resolve_request`) and must decode back to the same prefix, next hops,
//! interface and address.
#![no_main]

use std::fmt::Write;
use std::sync::OnceLock;

use control::netlink::{self, Event, KernelHop, msg, nud};
use rib::RouterState;
use rib::kernel::KernelState;
use fib::reference::{ReferenceFib4, ReferenceFib6};
use wire::Cidr;

const CONFIG: &str = r#"
[[interfaces]]
name = "d0"
mac = "02:00:00:00:00:10"
addresses = ["198.18.0.10/24", "2001:db8::10/64"]

[[interfaces.vlans]]
id = 100
addresses = ["10.100.0.1/24"]

[[interfaces]]
name = "d1"
mac = "02:00:00:00:01:10"
addresses = ["198.19.0.10/24"]

[[routes]]
prefix = "203.0.113.0/24"
via = "198.19.0.108"

[[neighbours]]
interface = "d1"
ip = "198.19.0.108"
mac = "02:00:00:00:01:08"
"#;

fn config() -> &'static config::Config {
    static C: OnceLock<config::Config> = OnceLock::new();
    C.get_or_init(|| config::Config::parse("netlink-fuzz.toml", CONFIG).expect("fuzz config"))
}

fn same_family(prefix: &Cidr, hops: &[KernelHop]) -> bool {
    hops.iter().all(|h| match h.gateway {
        None => true,
        Some(g) => g.is_ipv4() == matches!(prefix, Cidr::V4(_)),
    })
}

fn check_event(ev: &Event, seq: u32, text: &mut String) {
    text.clear();
    let _ = write!(text, "{ev:?}");
    assert!(!text.is_empty());
    let forwarding = ev.is_forwarding_route();
    let discard = ev.route_discard();
    match ev {
        Event::Route {
            add,
            prefix,
            table,
            kind,
            hops,
            ..
        } => {
            assert!(
                prefix.prefix_len()
                    <= if matches!(prefix, Cidr::V4(_)) {
                        32
                    } else {
                        128
                    }
            );
            if discard.is_some() && *table == netlink::RT_TABLE_MAIN {
                assert!(
                    forwarding,
                    "a discarding main-table route is forwarded with"
                );
            }
            // What the encoder can say: a main-table unicast route whose
            // gateways are of the prefix's family, as fastfwd adds them.
            if *kind == 1 && hops.len() <= 64 && same_family(prefix, hops) {
                let req = netlink::route_request(*add, *prefix, hops, seq);
                let mut it = netlink::messages(&req);
                let (ty, _, s, body) = it.next().expect("one message");
                assert!(it.next().is_none());
                assert_eq!(s, seq);
                match netlink::parse(ty, 0, body) {
                    Some(Event::Route {
                        add: a2,
                        prefix: p2,
                        table: t2,
                        kind: k2,
                        hops: h2,
                        nh_id: None,
                        ..
                    }) => {
                        assert_eq!((a2, p2, t2, k2), (*add, *prefix, netlink::RT_TABLE_MAIN, 1));
                        assert_eq!(&h2, hops, "route {prefix} re-encoded");
                    }
                    other => panic!("route_request for {ev:?} parsed as {other:?}"),
                }
            }
        }
        Event::Neigh { ifindex, ip, .. } => {
            assert_eq!(discard, None);
            assert!(!forwarding);
            let req = netlink::resolve_request(*ifindex, *ip, seq);
            let (ty, _, _, body) = netlink::messages(&req).next().expect("one message");
            assert_eq!(
                netlink::parse(ty, 0, body),
                Some(Event::Neigh {
                    add: true,
                    ifindex: *ifindex,
                    ip: *ip,
                    mac: None,
                    state: nud::INCOMPLETE,
                })
            );
        }
        _ => {
            assert_eq!(discard, None);
            assert!(!forwarding);
        }
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut kernel = KernelState::default();
    let mut text = String::new();
    let mut changed = false;
    let mut consumed = 0usize;
    for (ty, flags, seq, body) in netlink::messages(data) {
        consumed += 16 + body.len();
        assert!(consumed <= data.len(), "messages beyond the buffer");
        let Some(ev) = netlink::parse(ty, flags, body) else {
            continue;
        };
        if matches!(ty, msg::NLMSG_DONE) {
            assert_eq!(ev, Event::Done);
        }
        check_event(&ev, seq, &mut text);
        let _ = kernel.change(&ev);
        changed = true;
        for item in kernel.unmodelled() {
            assert!(!item.is_empty());
        }
        // Resolving every route the mirror holds must not panic either.
        for route in kernel.routes.values() {
            let _ = kernel.resolve(route);
        }
    }
    if changed {
        let mut state = RouterState::new(config().clone());
        state.kernel = kernel;
        if let Ok(built) = state.build_over(ReferenceFib4::new(), ReferenceFib6::new()) {
            let _ = built.route_views();
            for n in &built.neighbours {
                text.clear();
                let _ = write!(text, "{n:?}");
            }
        }
        let _ = state.port_ifindexes();
    }
});
