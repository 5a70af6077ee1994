//! The two engines are one router: random route tables (overlapping
//! prefixes, /0, host routes, IPv4 and IPv6, ECMP sets, discards, known and
//! unknown neighbours, VLAN interfaces) and random packets, valid and
//! malformed, through the user-space pipeline and through the XDP program
//! (BPF_PROG_TEST_RUN, exceptions through the pipeline): the same verdict
//! and the same output bytes for every packet, the same generated packets
//! and the same counters. Needs root (CAP_BPF).

mod support;

use fib::RouteTable;
use fib::poptrie::Poptrie;
use pipeline::{
    Discard, FamilyPolicy, InputSelector, Interface, Ipv4IfAddr, Ipv6IfAddr, MacAddr, NextHop,
    Policy, PolicyRule, RouteTarget, RuleAction, Tables, TablesBuilder, Vlan, Worker, WorkerConfig,
};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use support::Rng;
use wire::checksum::checksum as csum;
use wire::{Ipv4Cidr, Ipv6Cidr};
use xdp_engine::replay::{run_user, run_xdp, xdp_counters};
use xdp_engine::{Engine, FibCapacity, Image, Mode};

const MAC0: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC1: [u8; 6] = [2, 0, 0, 0, 1, 1];
const PEER_A: [u8; 6] = [2, 0, 0, 0, 1, 0xa];
const PEER_B: [u8; 6] = [2, 0, 0, 0, 1, 0xb];
const PEER_V: [u8; 6] = [2, 0, 0, 0, 0x64, 0xc];

type T = Tables<Poptrie<u32>, Poptrie<u128>, config::ConfigAcl>;

/// A random forward chain over the tables' interfaces and the addresses
/// the packets use: stateless matches of every kind, every verdict,
/// counting rules, both policies.
/// A set of forty /24s in 10.0/14, each moved by `jitter()` (below 7):
/// more than 64 interval starts, so a trie over them gets a 16-bit root.
fn forty_slash24s(mut jitter: impl FnMut() -> u64) -> String {
    let nets: Vec<String> = (0..40u64)
        .map(|k| format!("10.{}.{}.0/24", k % 4, (7 * k + jitter()) % 256))
        .collect();
    format!("{{ {} }}", nets.join(", "))
}

fn rules_text(r: &mut Rng) -> String {
    let n = r.below(24);
    let mut t = String::from("chain forward {\n");
    t.push_str(if r.chance(50) {
        "policy accept\n"
    } else {
        "policy drop\n"
    });
    for _ in 0..n {
        let mut m = String::new();
        let pick = |r: &mut Rng, xs: &[&str]| xs[r.below(xs.len() as u64) as usize].to_string();
        // At most one match per field, one family per rule, one L4 match.
        let v6 = r.chance(30);
        if r.chance(40) {
            m.push_str(&if v6 {
                pick(
                    r,
                    &["ip6 saddr 2001:db8:aa::/48", "ip6 saddr != 2001:db8::/32"],
                )
            } else {
                match r.below(3) {
                    0 => format!(
                        "ip saddr 10.{}.0.0/{}",
                        r.below(256),
                        [16, 24][r.below(2) as usize]
                    ),
                    1 => "ip saddr { 10.1.0.0/16, 10.2.0.0/16 }".to_string(),
                    _ => "ip saddr != 10.0.0.0/8".to_string(),
                }
            });
            m.push(' ');
        }
        if r.chance(50) {
            m.push_str(&if v6 {
                match r.below(2) {
                    0 => format!("ip6 daddr 2001:db8:1{:02x}::/48", r.below(256)),
                    _ => "ip6 daddr 2001:db8:1::/64".to_string(),
                }
            } else {
                match r.below(4) {
                    0 => format!("ip daddr 10.{}.{}.0/24", r.below(4), r.below(256)),
                    1 => "ip daddr 198.51.100.0/24".to_string(),
                    // Forty /24s: more than 64 interval starts, so the
                    // destination trie gets its 16-bit root.
                    2 => format!("ip daddr {}", forty_slash24s(|| r.below(7))),
                    _ => format!("ip daddr 10.{}.0.0/14", 4 * r.below(64)),
                }
            });
            m.push(' ');
        }
        if r.chance(30) {
            m.push_str(&pick(
                r,
                &["iif d0 ", "iif d1 ", "iifname { d0, d2 } ", "iif != d1 "],
            ));
        }
        if r.chance(30) {
            m.push_str(&pick(r, &["oif d1 ", "oif d1.100 ", "oif != d0 "]));
        }
        if r.chance(60) {
            m.push_str(&match r.below(9) {
                0 => format!("tcp dport {}", [22, 80, 443][r.below(3) as usize]),
                1 => format!("udp dport {}-{}", r.below(1000), 1000 + r.below(60000)),
                2 => format!("tcp sport != {}", r.below(65536)),
                3 => "udp sport 53".to_string(),
                4 => pick(
                    r,
                    &[
                        "tcp flags syn / syn,ack",
                        "tcp flags == ack",
                        "tcp flags != fin",
                    ],
                ),
                5 => {
                    if v6 {
                        "icmpv6 type echo-request".into()
                    } else {
                        pick(r, &["icmp type echo-request", "icmp type != echo-reply"])
                    }
                }
                6 => {
                    if v6 {
                        "ip6 nexthdr udp".into()
                    } else {
                        pick(r, &["ip protocol icmp", "ip protocol udp"])
                    }
                }
                7 => "meta l4proto tcp".to_string(),
                _ => "th dport 7".to_string(),
            });
            m.push(' ');
        }
        let mut verdict = pick(
            r,
            &[
                "accept",
                "drop",
                "counter drop",
                "counter",
                "counter accept",
                "reject",
                "reject with tcp reset",
                "drop",
            ],
        );
        if verdict.contains("tcp reset") && !m.contains("tcp ") {
            verdict = "reject".into();
        }
        t.push_str(&format!("{m}{verdict}\n"));
    }
    t.push_str("}\n");
    t
}

/// The firewall of `text` over the tables' interfaces.
fn acl(text: &str) -> config::ConfigAcl {
    let set = firewall::parse_rules(text, "random.rules").unwrap_or_else(|e| panic!("{e}\n{text}"));
    let ifaces: firewall::InterfaceMap = [("d0", 0u16), ("d1", 1), ("d1.100", 2), ("d2", 3)]
        .into_iter()
        .collect();
    let fw = firewall::Firewall::compile(&set, &ifaces).unwrap_or_else(|e| panic!("{e}\n{text}"));
    Some(firewall::PipelineFirewall::new(std::sync::Arc::new(fw), 7))
}

/// Three ports, four logical interfaces (one VLAN), next-hop targets of
/// every kind, and `routes` (prefix, length, target) installed.
fn tables(
    v4: &[(u32, u8, usize)],
    v6: &[(u128, u8, usize)],
    mtu1: u16,
    acl: config::ConfigAcl,
) -> T {
    tables_with_rules(v4, v6, mtu1, acl, None)
}

/// Policy rules drawn from `seed` over the targets `ids`, per family: up
/// to four rules before main selecting by a source or destination prefix
/// the packets use, an input interface or an interface's VRF, each
/// looking up one of two tables or ending the decision; main; then a
/// lookup of the first table for main's misses and throws. About one
/// IPv4 policy in eight also gets a rule with `not`, which the program
/// cannot filter.
fn policy(seed: u64, ids: &[u32]) -> Policy {
    let mut r = Rng(seed);
    fn rule<A>(
        r: &mut Rng,
        ids: &[u32],
        src: Option<(A, u8)>,
        dst: Option<(A, u8)>,
        iif: InputSelector,
    ) -> PolicyRule<A> {
        let action = match r.below(4) {
            0 | 1 => RuleAction::Table(r.below(2) as u16),
            // A blackhole, unreachable or prohibit route's id.
            2 => RuleAction::End(Some(ids[9 + r.below(3) as usize])),
            _ => RuleAction::End(None),
        };
        PolicyRule {
            src,
            dst,
            iif,
            invert: false,
            action,
            suppress_prefixlen: None,
        }
    }
    let iif = |r: &mut Rng| match r.below(2) {
        0 => InputSelector::Interface(r.below(4) as u16),
        _ => InputSelector::Vrf(r.below(4) as u16),
    };
    // Main, then the first table for what main leaves.
    fn main_then_table<A>() -> [PolicyRule<A>; 2] {
        [RuleAction::Main, RuleAction::Table(0)].map(|action| PolicyRule {
            src: None,
            dst: None,
            iif: InputSelector::Any,
            invert: false,
            action,
            suppress_prefixlen: None,
        })
    }
    // IPv4: sources are 10.x.y.z, destinations mostly in 10/8.
    let mut v4 = Vec::new();
    for _ in 0..r.below(5) {
        let len = [9u8, 12, 16, 24][r.below(4) as usize];
        let a = 0x0a00_0000 | (r.next() as u32 & 0x00ff_ffff);
        let p = Some((a & Ipv4Cidr::mask(len), len));
        v4.push(match r.below(3) {
            0 => rule(&mut r, ids, p, None, InputSelector::Any),
            1 => rule(&mut r, ids, None, p, InputSelector::Any),
            _ => {
                let sel = iif(&mut r);
                rule(&mut r, ids, None, None, sel)
            }
        });
    }
    if r.chance(12) {
        let mut not = rule(
            &mut r,
            ids,
            Some((0x0a80_0000, 9)),
            None,
            InputSelector::Any,
        );
        not.invert = true;
        v4.push(not);
    }
    v4.extend(main_then_table());
    // IPv6: sources are 2001:db8:aa::/48 and more.
    let mut v6 = Vec::new();
    for _ in 0..r.below(5) {
        let len = [44u8, 48, 56, 64][r.below(4) as usize];
        let a = 0x2001_0db8_00aa_0000_0000_0000_0000_0000u128 | (u128::from(r.next() as u16) << 64);
        let p = Some((a & Ipv6Cidr::mask(len), len));
        v6.push(match r.below(3) {
            0 => rule(&mut r, ids, p, None, InputSelector::Any),
            1 => {
                let d = 0x2001_0db8_0100_0000_0000_0000_0000_0000u128
                    | (u128::from(r.below(20) as u16) << 80);
                rule(
                    &mut r,
                    ids,
                    None,
                    Some((d & Ipv6Cidr::mask(40), 40)),
                    InputSelector::Any,
                )
            }
            _ => {
                let sel = iif(&mut r);
                rule(&mut r, ids, None, None, sel)
            }
        });
    }
    v6.extend(main_then_table());
    // Two tables a family: a few routes to forwarding targets and
    // discards, and a default route in the first.
    let mut t4 = Vec::new();
    let mut t6 = Vec::new();
    for t in 0..2 {
        let mut f4 = Poptrie::<u32>::new();
        let mut f6 = Poptrie::<u128>::new();
        for _ in 0..r.below(6) {
            let len = [8u8, 12, 16, 24][r.below(4) as usize];
            let a = 0x0a00_0000 | (r.next() as u32 & 0x00ff_ffff);
            f4.insert(
                Ipv4Cidr::new(a & Ipv4Cidr::mask(len), len).unwrap(),
                ids[r.below(ids.len() as u64) as usize],
            );
            let a6 = 0x2001_0db8_0100_0000_0000_0000_0000_0000u128
                | (u128::from(r.below(20) as u16) << 80);
            f6.insert(
                Ipv6Cidr::new(a6 & Ipv6Cidr::mask(48), 48).unwrap(),
                ids[5 + r.below(2) as usize],
            );
        }
        if t == 0 {
            f4.insert(Ipv4Cidr::new(0, 0).unwrap(), ids[4]);
            f6.insert(Ipv6Cidr::new(0, 0).unwrap(), ids[10]);
        }
        t4.push(f4);
        t6.push(f6);
    }
    Policy {
        v4: FamilyPolicy::new(v4, t4).unwrap(),
        v6: FamilyPolicy::new(v6, t6).unwrap(),
    }
}

/// [`tables`] with the policy rules [`policy`] draws from `rules_seed`.
fn tables_with_rules(
    v4: &[(u32, u8, usize)],
    v6: &[(u128, u8, usize)],
    mtu1: u16,
    acl: config::ConfigAcl,
    rules_seed: Option<u64>,
) -> T {
    let mut b = TablesBuilder::new();
    let v4a = |a: [u8; 4], l| Ipv4IfAddr {
        addr: Ipv4Addr::from(a),
        prefix_len: l,
    };
    let v6a = |a: &str, l| Ipv6IfAddr {
        addr: a.parse().unwrap(),
        prefix_len: l,
    };
    let d0 = b
        .add_interface(Interface {
            name: "d0".into(),
            port: 0,
            vlan: Vlan::Untagged,
            mac: MacAddr(MAC0),
            ipv4: vec![v4a([192, 0, 2, 1], 24)],
            ipv6: vec![v6a("2001:db8::1", 64), v6a("fe80::1", 64)],
            mtu: 1500,
        })
        .unwrap();
    let d1 = b
        .add_interface(Interface {
            name: "d1".into(),
            port: 1,
            vlan: Vlan::Untagged,
            mac: MacAddr(MAC1),
            ipv4: vec![v4a([198, 51, 100, 1], 24)],
            ipv6: vec![v6a("2001:db8:1::1", 64)],
            mtu: mtu1,
        })
        .unwrap();
    let v100 = b
        .add_interface(Interface {
            name: "d1.100".into(),
            port: 1,
            vlan: Vlan::Single(100),
            mac: MacAddr(MAC1),
            ipv4: vec![v4a([203, 0, 113, 1], 24)],
            ipv6: vec![],
            mtu: 1500,
        })
        .unwrap();
    b.add_interface(Interface {
        name: "d2".into(),
        port: 2,
        vlan: Vlan::Double {
            outer: 10,
            inner: 20,
        },
        mac: MacAddr([2, 0, 0, 0, 2, 1]),
        ipv4: vec![v4a([100, 64, 0, 1], 30)],
        ipv6: vec![],
        mtu: 1400,
    })
    .unwrap();
    let ip4 = |a: [u8; 4]| Some(IpAddr::V4(Ipv4Addr::from(a)));
    let ip6 = |s: &str| Some(IpAddr::V6(s.parse::<Ipv6Addr>().unwrap()));
    b.add_neighbour(d1, ip4([198, 51, 100, 2]).unwrap(), MacAddr(PEER_A))
        .unwrap();
    b.add_neighbour(d1, ip4([198, 51, 100, 3]).unwrap(), MacAddr(PEER_B))
        .unwrap();
    b.add_neighbour(d1, ip6("2001:db8:1::2").unwrap(), MacAddr(PEER_A))
        .unwrap();
    b.add_neighbour(v100, ip4([203, 0, 113, 2]).unwrap(), MacAddr(PEER_V))
        .unwrap();
    b.add_neighbour(
        d0,
        ip4([192, 0, 2, 2]).unwrap(),
        MacAddr([2, 0, 0, 0, 0, 2]),
    )
    .unwrap();
    let hop = |interface, gateway| NextHop { interface, gateway };
    let targets = [
        RouteTarget::Forward(vec![hop(d1, ip4([198, 51, 100, 2]))]),
        RouteTarget::Forward(vec![hop(d1, ip4([198, 51, 100, 9]))]), // MAC unknown
        RouteTarget::Forward(vec![
            hop(d1, ip4([198, 51, 100, 2])),
            hop(d1, ip4([198, 51, 100, 3])),
            hop(v100, ip4([203, 0, 113, 2])),
        ]),
        RouteTarget::Forward(vec![hop(d1, None)]), // on-link
        RouteTarget::Forward(vec![hop(v100, ip4([203, 0, 113, 2]))]),
        RouteTarget::Forward(vec![hop(d1, ip6("2001:db8:1::2"))]),
        RouteTarget::Forward(vec![
            hop(d1, ip6("2001:db8:1::2")),
            hop(d1, ip6("2001:db8:1::3")),
        ]),
        RouteTarget::Forward(vec![hop(d0, ip4([192, 0, 2, 2]))]), // hairpin
        RouteTarget::Forward(vec![hop(3, ip4([100, 64, 0, 2]))]),
        RouteTarget::Discard(Discard::Blackhole),
        RouteTarget::Discard(Discard::Unreachable),
        RouteTarget::Discard(Discard::Prohibit),
        RouteTarget::Discard(Discard::Throw),
    ];
    let ids: Vec<u32> = targets.iter().map(|t| b.add_target(t).unwrap()).collect();
    let mut f4 = Poptrie::<u32>::new();
    let mut f6 = Poptrie::<u128>::new();
    b.install_connected_routes(&mut f4, &mut f6);
    for &(a, l, t) in v4 {
        f4.insert(
            Ipv4Cidr::new(a & Ipv4Cidr::mask(l), l).unwrap(),
            ids[t % ids.len()],
        );
    }
    for &(a, l, t) in v6 {
        f6.insert(
            Ipv6Cidr::new(a & Ipv6Cidr::mask(l), l).unwrap(),
            ids[t % ids.len()],
        );
    }
    if let Some(seed) = rules_seed {
        b.set_policy(std::sync::Arc::new(policy(seed, &ids)))
            .unwrap();
    }
    b.build_with_acl(f4, f6, acl)
}

/// A destination: inside one of the routes, a local or special address,
/// or anywhere.
fn dst4(r: &mut Rng, routes: &[(u32, u8, usize)]) -> u32 {
    let special = [
        0xc000_0201u32, // router on d0
        0xc633_6401,    // router on d1
        0xc000_02ff,    // d0 broadcast
        0xffff_ffff,
        0xe000_0005,
        0xef01_0203,
        0x7f00_0001,
        0x0000_0001,
        0xf000_0001,
        0xc633_6402, // on-link neighbour
        0xc633_6477, // on-link, unknown
        0xcb00_7102,
    ];
    match r.below(10) {
        0..=5 if !routes.is_empty() => {
            let (a, l, _) = routes[r.below(routes.len() as u64) as usize];
            let host = if l == 32 { 0 } else { (r.next() as u32) >> l };
            (a & Ipv4Cidr::mask(l)) | host
        }
        6 | 7 => special[r.below(special.len() as u64) as usize],
        _ => r.next() as u32,
    }
}

fn dst6(r: &mut Rng, routes: &[(u128, u8, usize)]) -> u128 {
    let special: [u128; 7] = [
        0x2001_0db8_0000_0000_0000_0000_0000_0001,
        0x2001_0db8_0000_0000_0000_0000_0000_0000, // subnet-router anycast
        0xfe80_0000_0000_0000_0000_0000_0000_0001,
        0xff02_0000_0000_0000_0000_0000_0000_0001,
        0xff0e_0000_0000_0000_0000_0000_0000_0001,
        1,
        0x0000_0000_0000_0000_0000_ffff_0a00_0001,
    ];
    match r.below(10) {
        0..=5 if !routes.is_empty() => {
            let (a, l, _) = routes[r.below(routes.len() as u64) as usize];
            let host = if l == 128 {
                0
            } else {
                (u128::from(r.next()) << 64 | u128::from(r.next())) >> l
            };
            (a & Ipv6Cidr::mask(l)) | host
        }
        6 | 7 => special[r.below(special.len() as u64) as usize],
        _ => u128::from(r.next()) << 64 | u128::from(r.next()),
    }
}

fn l4(r: &mut Rng, proto: u8, len: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
    if proto == 6 && p.len() > 13 {
        p[13] = [0x02, 0x10, 0x12, 0x04][r.below(4) as usize];
    }
    p
}

/// One random frame: mostly well-formed, a fifth with one field broken.
fn frame(r: &mut Rng, port: u16, v4: &[(u32, u8, usize)], v6: &[(u128, u8, usize)]) -> Vec<u8> {
    let mut f = Vec::new();
    let dst_mac = match r.below(20) {
        0 => [0xff; 6],
        1 => [0x33, 0x33, 0, 0, 0, 1],
        2 => [2, 9, 9, 9, 9, 9],
        3 => MAC1,
        4 => MAC0,
        _ => [MAC0, MAC1, [2, 0, 0, 0, 2, 1]][usize::from(port)],
    };
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&[2, 0, 0, 0, 0, 0x99]);
    match if port == 2 && r.chance(80) {
        2
    } else {
        r.below(12)
    } {
        0 => f.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]),
        1 => f.extend_from_slice(&[0x81, 0x00, 0x00, 0x00]),
        2 => f.extend_from_slice(&[0x88, 0xa8, 0x00, 0x0a, 0x81, 0x00, 0x00, 0x14]),
        3 => f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]),
        _ => {}
    }
    let broken = r.chance(20);
    let kind = r.below(20);
    if kind < 10 {
        f.extend_from_slice(&[0x08, 0x00]);
        let opts = if r.chance(5) {
            4 * (1 + r.below(3) as usize)
        } else {
            0
        };
        let proto = [6u8, 17, 1, 47][r.below(4) as usize];
        let plen = r.below(1600) as usize;
        let payload = l4(r, proto, plen);
        let total = 20 + opts + payload.len();
        let ttl = [64u8, 64, 64, 1, 2, 0, 255][r.below(7) as usize];
        let frag: u16 = match r.below(8) {
            0 => 0x2000,     // MF
            1 => 0x00b9,     // offset
            2 | 3 => 0x4000, // DF
            _ => 0,
        };
        let src = match r.below(10) {
            0 => 0x7f00_0001,
            1 => 0,
            _ => 0x0a00_0000 | (r.next() as u32 & 0xffffff),
        };
        let dst = dst4(r, v4);
        let mut h = vec![0u8; 20 + opts];
        h[0] = 0x40 | (5 + (opts / 4) as u8);
        h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        h[4..6].copy_from_slice(&(r.next() as u16).to_be_bytes());
        h[6..8].copy_from_slice(&frag.to_be_bytes());
        h[8] = ttl;
        h[9] = proto;
        h[12..16].copy_from_slice(&src.to_be_bytes());
        h[16..20].copy_from_slice(&dst.to_be_bytes());
        for (i, o) in h[20..].iter_mut().enumerate() {
            *o = if i == 0 && r.chance(50) { 7 } else { 1 };
        }
        let c = csum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        if broken {
            match r.below(6) {
                0 => h[0] = 0x65,
                1 => h[0] = 0x44,
                2 => h[11] ^= 1,
                3 => h[2..4].copy_from_slice(&((total + 9) as u16).to_be_bytes()),
                4 => h[2..4].copy_from_slice(&19u16.to_be_bytes()),
                _ => h.truncate(r.below(20) as usize),
            }
        }
        f.extend_from_slice(&h);
        if h.len() >= 20 {
            f.extend_from_slice(&payload);
        }
    } else if kind < 18 {
        f.extend_from_slice(&[0x86, 0xdd]);
        let proto = [6u8, 17, 58, 0, 44, 60][r.below(6) as usize];
        let plen = r.below(1600) as usize;
        let mut payload = l4(r, 17, plen);
        let mut next = proto;
        if proto == 0 || proto == 60 {
            // A header of 8 bytes, then UDP.
            if payload.len() >= 8 {
                payload[0] = 17;
                payload[1] = 0;
            }
        } else if proto == 44 && payload.len() >= 8 {
            payload[0] = 17;
            payload[1] = 0;
            let off_m: u16 = [0x0001, 0x0008, 0x0000][r.below(3) as usize];
            payload[2..4].copy_from_slice(&off_m.to_be_bytes());
        } else if proto == 58 {
            next = 58;
        }
        let hl = [64u8, 64, 64, 1, 0, 2][r.below(6) as usize];
        let src: u128 = match r.below(10) {
            0 => 0xfe80_0000_0000_0000_0000_0000_0000_0005,
            1 => 0xff02_0000_0000_0000_0000_0000_0000_0001,
            2 => 0,
            _ => 0x2001_0db8_00aa_0000_0000_0000_0000_0000 | u128::from(r.next()),
        };
        let dst = dst6(r, v6);
        let mut h = vec![0u8; 40];
        h[0] = 0x60;
        h[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
        h[6] = next;
        h[7] = hl;
        h[8..24].copy_from_slice(&src.to_be_bytes());
        h[24..40].copy_from_slice(&dst.to_be_bytes());
        if broken {
            match r.below(3) {
                0 => h[0] = 0x40,
                1 => h[4..6].copy_from_slice(&((payload.len() + 3) as u16).to_be_bytes()),
                _ => h.truncate(r.below(40) as usize),
            }
        }
        f.extend_from_slice(&h);
        if h.len() == 40 {
            f.extend_from_slice(&payload);
        }
    } else if kind == 18 {
        f.extend_from_slice(&[0x08, 0x06]);
        let mut a = vec![0, 1, 8, 0, 6, 4, 0, 1];
        a.extend_from_slice(&[2, 0, 0, 0, 0, 0x99, 192, 0, 2, 7]);
        a.extend_from_slice(&[0; 6]);
        let tpa: [u8; 4] = [[192, 0, 2, 1], [192, 0, 2, 9], [192, 0, 2, 7]][r.below(3) as usize];
        a.extend_from_slice(&tpa);
        if broken {
            a.truncate(r.below(28) as usize);
        }
        f.extend_from_slice(&a);
    } else {
        f.extend_from_slice(&[0x88, 0xcc, 1, 2, 3]);
    }
    // Ethernet padding to the minimum frame, sometimes more.
    while f.len() < 60 || (r.chance(10) && f.len() < 70) {
        f.push(0);
    }
    if r.chance(2) {
        f.truncate(r.below(14) as usize);
    }
    f
}

fn v4_routes() -> impl Strategy<Value = Vec<(u32, u8, usize)>> {
    prop::collection::vec(
        (
            prop_oneof![
                any::<u32>(),
                (0u32..256).prop_map(|x| 0x0a00_0000 | (x << 16))
            ],
            prop::sample::select(vec![0u8, 1, 8, 12, 16, 18, 19, 23, 24, 25, 28, 31, 32]),
            0usize..64,
        ),
        0..60,
    )
}

fn v6_routes() -> impl Strategy<Value = Vec<(u128, u8, usize)>> {
    prop::collection::vec(
        (
            prop_oneof![
                any::<u128>(),
                (0u128..256).prop_map(|x| 0x2001_0db8_0100_0000_0000_0000_0000_0000 | (x << 80))
            ],
            prop::sample::select(vec![0u8, 3, 16, 19, 32, 48, 56, 64, 65, 100, 127, 128]),
            0usize..64,
        ),
        0..60,
    )
}

/// Runs `batches` random batches through both engines and checks they
/// agree on everything; returns the XDP program's own counters.
fn compare(
    v4: &[(u32, u8, usize)],
    v6: &[(u128, u8, usize)],
    seed: u64,
    mtu1: u16,
    batches: u64,
    rules: Option<&str>,
) -> Result<xdp_engine::EngineCounters, TestCaseError> {
    compare_with(v4, v6, seed, mtu1, batches, rules, &Setup::default())
}

/// What a comparison runs with besides the routes and the firewall.
#[derive(Debug, Default)]
struct Setup {
    /// Ports marked as taking no XDP frames.
    punt: std::collections::BTreeSet<u16>,
    /// Policy rules, drawn from this seed ([`policy`]).
    rules_seed: Option<u64>,
}

/// [`compare`] with `setup`.
fn compare_with(
    v4: &[(u32, u8, usize)],
    v6: &[(u128, u8, usize)],
    seed: u64,
    mtu1: u16,
    batches: u64,
    rules: Option<&str>,
    setup: &Setup,
) -> Result<xdp_engine::EngineCounters, TestCaseError> {
    let t = tables_with_rules(v4, v6, mtu1, rules.and_then(acl), setup.rules_seed);
    let mut engine = Engine::load(Mode::Test, FibCapacity::SMALL).unwrap();
    let fw = t.acl.as_ref();
    let mut image =
        Image::compile(&t.datapath(), &t.fib4, &t.fib6, fw, &engine.capacity()).unwrap();
    image.punt_tx(&setup.punt);
    if rules.is_some() {
        prop_assert!(
            image.firewall.is_some(),
            "the program evaluates stateless rules: {:?}",
            rules
        );
    }
    engine.publish(image).unwrap();
    let cfg = WorkerConfig {
        max_batch: 32,
        ..WorkerConfig::default()
    };
    let mut user = Worker::new(cfg);
    let mut xdp = Worker::new(cfg);
    let mut rng = Rng(seed);
    for batch in 0..batches {
        let port = rng.below(3) as u16;
        let frames: Vec<Vec<u8>> = (0..1 + rng.below(32))
            .map(|_| frame(&mut rng, port, v4, v6))
            .collect();
        let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
        let now = batch * 1_000_000;
        let a = run_user(&mut user, &t, now, port, &refs);
        let b = run_xdp(&mut engine, &mut xdp, &t, now, port, &refs).unwrap();
        for (i, (x, y)) in a.frames.iter().zip(&b.frames).enumerate() {
            prop_assert_eq!(
                x,
                y,
                "seed {} batch {} frame {}: {:02x?}",
                seed,
                batch,
                i,
                frames[i]
            );
        }
        prop_assert_eq!(&a.generated, &b.generated, "seed {} batch {}", seed, batch);
    }
    let n = t.interfaces().len();
    let mut want = user.counters().clone();
    want.interfaces.resize(n, Default::default());
    let mut got = xdp_counters(&engine, &xdp, n).unwrap();
    got.interfaces.resize(n, Default::default());
    prop_assert_eq!(want, got, "seed {}", seed);
    if let Some(fw) = t.acl.as_ref() {
        // Per-rule counters: the workers' plus the program's.
        let rules = fw.firewall();
        let of = |w: &Worker| {
            w.acl_state::<<config::ConfigAcl as pipeline::Acl>::State>()
                .and_then(Option::as_ref)
                .map(|s| s.counters().clone())
        };
        let mut parts: Vec<firewall::RuleCounters> = of(&xdp).into_iter().collect();
        parts.extend(engine.firewall_counters(rules).unwrap());
        let want = rules.summary(of(&user).iter());
        let got = rules.summary(parts.iter());
        prop_assert_eq!(
            serde_json::to_value(&want).unwrap(),
            serde_json::to_value(&got).unwrap(),
            "rule counters, seed {}",
            seed
        );
    }
    Ok(engine.counters(n).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn both_engines_give_the_same_results(
        v4 in v4_routes(),
        v6 in v6_routes(),
        seed in 1u64..u64::MAX,
        mtu1 in prop::sample::select(vec![1500u16, 1280, 1400]),
    ) {
        if !netio::root_or_skip("the XDP engine differential test") {
            return Ok(());
        }
        compare(&v4, &v6, seed, mtu1, 6, None)?;
    }

    /// The same with random policy rules before and after main: the
    /// program routes by main what no rule before main can select and
    /// hands the rest to the pipeline, which has every table.
    #[test]
    fn both_engines_route_by_the_same_policy_rules(
        v4 in v4_routes(),
        v6 in v6_routes(),
        seed in 1u64..u64::MAX,
    ) {
        if !netio::root_or_skip("the XDP engine policy-rules differential test") {
            return Ok(());
        }
        let setup = Setup {
            rules_seed: Some(seed ^ 0x5851_f42d),
            ..Setup::default()
        };
        compare_with(&v4, &v6, seed, 1500, 6, None, &setup)?;
    }

    /// The same with a random stateless forward chain, which the program
    /// evaluates itself (rejects go to the pipeline).
    #[test]
    fn both_engines_apply_the_same_rules(
        v4 in v4_routes(),
        v6 in v6_routes(),
        seed in 1u64..u64::MAX,
    ) {
        if !netio::root_or_skip("the XDP engine firewall differential test") {
            return Ok(());
        }
        let text = rules_text(&mut Rng(seed ^ 0x9e37_79b9));
        compare(&v4, &v6, seed, 1500, 6, Some(&text))?;
    }
}

/// A forward chain whose tables do not fit the program's map is left to
/// the pipeline for every transit packet (never skipped), and the image
/// says why, for the daemon's log. Needs no root: only the compilation.
#[test]
fn a_firewall_too_large_for_the_map_goes_to_the_pipeline_with_its_reason() {
    let text = format!(
        "chain forward {{\n    policy drop\n    ip daddr {} accept\n}}\n",
        forty_slash24s(|| 0)
    );
    let t = tables(&[(0x0a00_0000, 8, 0)], &[], 1500, acl(&text));
    let fw = t.acl.as_ref();
    let fits = Image::compile(&t.datapath(), &t.fib4, &t.fib6, fw, &FibCapacity::SMALL).unwrap();
    assert!(fits.firewall.is_some() && !fits.except_all() && fits.except_reason.is_none());
    let cap = FibCapacity {
        firewall: 1 << 12,
        ..FibCapacity::SMALL
    };
    let full = Image::compile(&t.datapath(), &t.fib4, &t.fib6, fw, &cap).unwrap();
    assert!(full.firewall.is_none() && full.except_all());
    assert_eq!(
        full.except_reason,
        Some("the classifier's tables are larger than the program's map")
    );
}

/// A fixed table where most destinations have a route: the program
/// forwards, drops and punts most packets itself (the comparison is not
/// carried by the exception path alone), and the results still agree.
#[test]
fn the_program_finishes_most_packets_itself() {
    if !netio::root_or_skip("the XDP engine differential test") {
        return;
    }
    let v4: Vec<(u32, u8, usize)> = (0..40u32)
        .map(|i| {
            (
                0x0a00_0000 | (i << 18),
                [8u8, 14, 16, 24, 32][i as usize % 5],
                [0, 2, 3, 4, 7, 8][i as usize % 6],
            )
        })
        .chain([(0, 0, 0)])
        .collect();
    let v6: Vec<(u128, u8, usize)> = (0..20u128)
        .map(|i| {
            (
                0x2001_0db8_0100_0000_0000_0000_0000_0000 | (i << 80),
                [32u8, 48, 64, 128][i as usize % 4],
                [5, 6][i as usize % 2],
            )
        })
        .collect();
    let c = compare(&v4, &v6, 0x5eed, 1500, 80, None).unwrap();
    let all = c.counters.rx_frames + c.total_exceptions();
    let forwarded = c.counters.forwarded_ipv4 + c.counters.forwarded_ipv6;
    assert!(all > 1000, "{all} frames");
    // The generator is adversarial (a fifth of the frames broken, foreign
    // tags and MACs): most outcomes are drops, all decided in the program.
    assert!(
        c.counters.rx_frames * 10 > all * 6,
        "the program finished {} of {all}: {c:?}",
        c.counters.rx_frames
    );
    assert!(
        forwarded >= 100,
        "forwarded {forwarded} of {all} in the program: {c:?}"
    );
    assert!(
        c.total_exceptions() * 20 > all,
        "{} exceptions of {all}",
        c.total_exceptions()
    );
    assert!(c.counters.forwarded_ipv6 > 0 && c.counters.total_punts() > 0);
}

/// Policy rules before main that select some of the packets by source:
/// the program still routes the others itself, hands the selected ones to
/// the pipeline (`policy_rules`), and the results agree.
#[test]
fn the_program_routes_by_main_what_no_rule_selects() {
    if !netio::root_or_skip("the XDP engine policy-rules differential test") {
        return;
    }
    let v4: Vec<(u32, u8, usize)> = (0..40u32)
        .map(|i| (0x0a00_0000 | (i << 18), 14, [0, 2, 3][i as usize % 3]))
        .chain([(0, 0, 0)])
        .collect();
    let v6 = [(0x2001_0db8_0100_0000_0000_0000_0000_0000u128, 40, 5)];
    // The first seed whose IPv4 rules before main select by source and
    // can be filtered.
    let ids: Vec<u32> = (0..13).collect();
    let seed = (1u64..)
        .find(|&s| {
            matches!(
                policy(s, &ids).v4.fast_path(),
                pipeline::FastPath::Filtered { ref src, .. } if !src.is_empty()
            )
        })
        .unwrap();
    let setup = Setup {
        rules_seed: Some(seed),
        ..Setup::default()
    };
    let c = compare_with(&v4, &v6, 0x5eed, 1500, 80, None, &setup).unwrap();
    let exc = |name: &str| {
        let i = xdp_engine::layout::EXCEPTIONS
            .iter()
            .position(|&(_, n)| n == name)
            .unwrap();
        c.exceptions[i]
    };
    assert_eq!(exc("firewall_rules"), 0, "the rules were filtered: {c:?}");
    assert!(exc("policy_rules") > 0, "some packets were selected: {c:?}");
    assert!(
        c.counters.forwarded_ipv4 >= 50,
        "the program routed the others: {c:?}"
    );
}

/// A port marked as taking no XDP frames: every packet the program would
/// forward there goes to the pipeline (`egress_refuses_xdp`), which
/// forwards it as it would have, and the other ports stay with the
/// program.
#[test]
fn a_port_that_takes_no_xdp_frames_is_left_to_the_pipeline() {
    if !netio::root_or_skip("the XDP engine differential test") {
        return;
    }
    let v4: Vec<(u32, u8, usize)> = (0..40u32)
        .map(|i| {
            (
                0x0a00_0000 | (i << 18),
                16,
                [0, 2, 3, 4, 7, 8][i as usize % 6],
            )
        })
        .collect();
    let v6 = [(0x2001_0db8_0100_0000_0000_0000_0000_0000u128, 48, 5)];
    let egress = xdp_engine::layout::EXCEPTIONS
        .iter()
        .find(|(_, n)| *n == "egress_refuses_xdp")
        .unwrap()
        .0 as usize;
    let open = compare(&v4, &v6, 0x5eed, 1500, 80, None).unwrap();
    assert_eq!(open.exceptions[egress], 0);
    let punt = Setup {
        punt: [1u16].into(),
        ..Setup::default()
    };
    let c = compare_with(&v4, &v6, 0x5eed, 1500, 80, None, &punt).unwrap();
    let forwarded =
        |c: &xdp_engine::EngineCounters| c.counters.forwarded_ipv4 + c.counters.forwarded_ipv6;
    assert!(c.exceptions[egress] > 0, "{c:?}");
    assert!(
        forwarded(&c) > 0,
        "the other ports stay with the program: {c:?}"
    );
    assert_eq!(
        forwarded(&c) + c.exceptions[egress],
        forwarded(&open),
        "what the program forwarded to port 1 went to the pipeline instead"
    );
}

/// The stateful forward chain of the connection-tracking tests: new flows
/// only from d0 to a few services, replies and the rest of a flow as
/// established, invalid segments dropped, SMTP rejected with a reset.
const STATEFUL_RULES: &str = "ct timeout udp-established 3
ct timeout udp-new 2
ct timeout tcp-closing 2
ct timeout icmp 2
chain forward {
 policy drop
 ct state established counter accept
 ct state invalid counter drop
 tcp dport 25 reject with tcp reset
 iif d0 tcp dport { 22, 80 } ct state new accept
 iif d0 udp dport 53 accept
 iif d0 icmp type echo-request accept
 iif d0 ip6 nexthdr udp accept
 iif d0 icmpv6 type echo-request accept
}
";

/// One packet of a conversation: which side sends it, protocol details.
#[derive(Debug, Clone, Copy)]
struct Step {
    /// From the client (on d0) or the server (behind d1).
    from_client: bool,
    /// TCP flags (TCP only).
    flags: u8,
    /// IP packet length beyond the headers (an MTU of 1280 on d1 makes
    /// some server-bound packets exceptions).
    payload: usize,
}

/// A conversation between a client behind d0 and a server behind d1.
#[derive(Debug, Clone)]
struct Conversation {
    v6: bool,
    proto: u8,
    client: u128,
    server: u128,
    cport: u16,
    sport: u16,
    steps: Vec<Step>,
    next: usize,
}

fn conversation(r: &mut Rng) -> Conversation {
    let v6 = r.chance(25);
    let proto = if v6 {
        [6u8, 17, 58][r.below(3) as usize]
    } else {
        [6u8, 6, 17, 1][r.below(4) as usize]
    };
    let sport = match proto {
        6 => [22u16, 80, 80, 25, 443][r.below(5) as usize],
        17 => [53u16, 53, 123][r.below(3) as usize],
        _ => 0,
    };
    // Servers: 10.1.0.0/16 (a known neighbour), 10.3.0.0/16 (a gateway
    // whose MAC is unknown: neighbour misses), 2001:db8:100::/48.
    let server = if v6 {
        0x2001_0db8_0100_0000_0000_0000_0000_0000 | u128::from(r.below(1 << 16) as u32)
    } else if r.chance(15) {
        0xffff_0a03_0000 | u128::from(r.below(1 << 16) as u32)
    } else {
        0xffff_0a01_0000 | u128::from(r.below(1 << 16) as u32)
    };
    let client = if v6 {
        0x2001_0db8_00aa_0000_0000_0000_0000_0000 | u128::from(r.below(1 << 16) as u32)
    } else {
        0xffff_0a09_0000 | u128::from(r.below(1 << 16) as u32)
    };
    let c = |flags, payload| Step {
        from_client: true,
        flags,
        payload,
    };
    let s = |flags, payload| Step {
        from_client: false,
        flags,
        payload,
    };
    let data = |r: &mut Rng| [0usize, 40, 600, 1400][r.below(4) as usize];
    let mut steps = Vec::new();
    match proto {
        6 => {
            if r.chance(15) {
                // A stray segment of a connection nobody saw start.
                steps.push(c(0x10, 20));
            }
            steps.extend([c(0x02, 0), s(0x12, 0), c(0x10, 0)]);
            for _ in 0..r.below(8) {
                let d = data(r);
                steps.push(if r.chance(50) { c(0x18, d) } else { s(0x18, d) });
            }
            if r.chance(70) {
                steps.extend([c(0x11, 0), s(0x11, 0), c(0x10, 0)]);
                // Late segments after the close.
                for _ in 0..r.below(3) {
                    steps.push(c(0x10, 10));
                }
            } else if r.chance(50) {
                steps.push(s(0x04, 0));
            }
        }
        _ => {
            for _ in 0..1 + r.below(10) {
                let d = data(r);
                steps.push(c(0, d));
                if r.chance(80) {
                    steps.push(s(0, d));
                }
            }
        }
    }
    Conversation {
        v6,
        proto,
        client,
        server,
        cport: 1024 + r.below(60000) as u16,
        sport,
        steps,
        next: 0,
    }
}

/// The frame of step `i` of `cv`, as it arrives (client frames on d0,
/// server frames on d1, each to its interface's MAC).
fn conversation_frame(cv: &Conversation, st: Step, id: u16) -> (u16, Vec<u8>) {
    let (port, mac, src, dst, sp, dp) = if st.from_client {
        (0u16, MAC0, cv.client, cv.server, cv.cport, cv.sport)
    } else {
        (1u16, MAC1, cv.server, cv.client, cv.sport, cv.cport)
    };
    let mut l4 = Vec::new();
    match cv.proto {
        6 => {
            l4.extend_from_slice(&sp.to_be_bytes());
            l4.extend_from_slice(&dp.to_be_bytes());
            l4.extend_from_slice(&[0; 8]);
            l4.push(0x50);
            l4.push(st.flags);
            l4.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        }
        17 => {
            l4.extend_from_slice(&sp.to_be_bytes());
            l4.extend_from_slice(&dp.to_be_bytes());
            l4.extend_from_slice(&[0; 4]);
        }
        _ => {
            // Echo request from the client, reply from the server; the
            // identifier is the client's port.
            let ty = match (cv.v6, st.from_client) {
                (false, true) => 8,
                (false, false) => 0,
                (true, true) => 128,
                (true, false) => 129,
            };
            l4.extend_from_slice(&[ty, 0, 0, 0]);
            l4.extend_from_slice(&cv.cport.to_be_bytes());
            l4.extend_from_slice(&id.to_be_bytes());
        }
    }
    l4.resize(l4.len() + st.payload, 0xab);
    let mut f = Vec::new();
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[2, 0, 0, 0, 0, 0x99]);
    if cv.v6 {
        f.extend_from_slice(&[0x86, 0xdd]);
        let mut h = vec![0u8; 40];
        h[0] = 0x60;
        h[4..6].copy_from_slice(&(l4.len() as u16).to_be_bytes());
        h[6] = cv.proto;
        h[7] = 64;
        h[8..24].copy_from_slice(&src.to_be_bytes());
        h[24..40].copy_from_slice(&dst.to_be_bytes());
        f.extend_from_slice(&h);
    } else {
        f.extend_from_slice(&[0x08, 0x00]);
        let mut h = vec![0u8; 20];
        h[0] = 0x45;
        h[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
        h[4..6].copy_from_slice(&id.to_be_bytes());
        h[8] = 64;
        h[9] = cv.proto;
        h[12..16].copy_from_slice(&(src as u32).to_be_bytes());
        h[16..20].copy_from_slice(&(dst as u32).to_be_bytes());
        let c = csum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&h);
    }
    f.extend_from_slice(&l4);
    while f.len() < 60 {
        f.push(0);
    }
    (port, f)
}

/// Conversations through both engines under the stateful chain, in
/// interleaved batches while the clock moves (flows expire mid-way):
/// the same verdicts, bytes, generated packets and counters (rule
/// counters included). Returns the program's counters.
fn compare_stateful(seed: u64, rounds: u64) -> Result<xdp_engine::EngineCounters, TestCaseError> {
    // 10.1/16 via a known neighbour on d1, 10.3/16 via one whose MAC is
    // unknown, 10.9/16 (the clients) back via d0, the IPv6 server and
    // client prefixes; d1's MTU is 1280.
    let v4 = [
        (0x0a01_0000, 16, 0),
        (0x0a03_0000, 16, 1),
        (0x0a09_0000, 16, 7),
    ];
    let v6 = [
        (0x2001_0db8_0100_0000_0000_0000_0000_0000, 48, 5),
        (0x2001_0db8_00aa_0000_0000_0000_0000_0000, 48, 7),
    ];
    let acl = acl(STATEFUL_RULES);
    let t = tables(&v4, &v6, 1280, acl);
    let mut engine = Engine::load(Mode::Test, FibCapacity::SMALL).unwrap();
    let image = Image::compile(
        &t.datapath(),
        &t.fib4,
        &t.fib6,
        t.acl.as_ref(),
        &engine.capacity(),
    )
    .unwrap();
    prop_assert!(image.firewall.is_some() && image.conntrack_epoch.is_some());
    engine.publish(image).unwrap();
    let cfg = WorkerConfig {
        max_batch: 32,
        ..WorkerConfig::default()
    };
    let (mut user, mut xdp) = (Worker::new(cfg), Worker::new(cfg));
    let mut rng = Rng(seed);
    let mut live: Vec<Conversation> = Vec::new();
    let mut now = 1_000_000_000u64;
    let mut id = 0u16;
    for round in 0..rounds {
        while live.len() < 12 {
            live.push(conversation(&mut rng));
        }
        // Half a second to two seconds between rounds: UDP and ICMP flows
        // (2-3 s) expire between some of their packets.
        now += 500_000_000 * (1 + rng.below(4));
        let mut by_port: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..1 + rng.below(24) {
            let k = rng.below(live.len() as u64) as usize;
            let cv = &mut live[k];
            let st = cv.steps[cv.next];
            cv.next += 1;
            id = id.wrapping_add(1);
            let (port, f) = conversation_frame(cv, st, id);
            by_port[usize::from(port)].push(f);
            if cv.next == cv.steps.len() {
                live.swap_remove(k);
            }
        }
        for (port, frames) in by_port.iter().enumerate() {
            if frames.is_empty() {
                continue;
            }
            let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
            let port = port as u16;
            let a = run_user(&mut user, &t, now, port, &refs);
            let b = run_xdp(&mut engine, &mut xdp, &t, now, port, &refs).unwrap();
            for (i, (x, y)) in a.frames.iter().zip(&b.frames).enumerate() {
                prop_assert_eq!(
                    x,
                    y,
                    "seed {} round {} port {} frame {}: {:02x?}",
                    seed,
                    round,
                    port,
                    i,
                    frames[i]
                );
            }
            prop_assert_eq!(&a.generated, &b.generated, "seed {} round {}", seed, round);
        }
    }
    let n = t.interfaces().len();
    let mut want = user.counters().clone();
    want.interfaces.resize(n, Default::default());
    let mut got = xdp_counters(&engine, &xdp, n).unwrap();
    got.interfaces.resize(n, Default::default());
    prop_assert_eq!(want, got, "seed {}", seed);
    let fw = t.acl.as_ref().unwrap();
    let rules = fw.firewall();
    let of = |w: &Worker| {
        w.acl_state::<<config::ConfigAcl as pipeline::Acl>::State>()
            .and_then(Option::as_ref)
            .map(|s| s.counters().clone())
    };
    let mut parts: Vec<firewall::RuleCounters> = of(&xdp).into_iter().collect();
    parts.extend(engine.firewall_counters(rules).unwrap());
    prop_assert_eq!(
        serde_json::to_value(rules.summary(of(&user).iter())).unwrap(),
        serde_json::to_value(rules.summary(parts.iter())).unwrap(),
        "rule counters, seed {}",
        seed
    );
    Ok(engine.counters(n).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Connection tracking split between the program's flow table and
    /// the pipeline's gives the verdicts of the pipeline's alone.
    #[test]
    fn both_engines_track_connections_alike(seed in 1u64..u64::MAX) {
        if !netio::root_or_skip("the XDP engine conntrack differential test") {
            return Ok(());
        }
        compare_stateful(seed, 40)?;
    }
}

/// Under stateful rules the program finishes the established packets
/// itself (the pipeline only sees flows start, neighbour misses, MTU
/// excess and rejects), and the results still agree.
#[test]
fn established_flows_stay_in_the_program() {
    if !netio::root_or_skip("the XDP engine conntrack test") {
        return;
    }
    let c = compare_stateful(0xc0ffee, 200).unwrap();
    let forwarded = c.counters.forwarded_ipv4 + c.counters.forwarded_ipv6;
    let unknown_flow = c.exceptions[8];
    // The conversations are short and often idle past their timeouts, so
    // many packets start or restart a flow; a third or more still find
    // their flow in the program.
    assert!(
        c.ct_established > 500 && forwarded > 400,
        "{} packets of established flows, {forwarded} forwarded in the program: {c:?}",
        c.ct_established
    );
    assert!(
        unknown_flow > 50 && c.ct_established * 3 > unknown_flow,
        "{unknown_flow} packets of flows the program did not hold: {c:?}"
    );
    // Neighbour misses and MTU excess of established flows were handed
    // over with their state.
    assert!(c.exceptions[3] > 0 && c.exceptions[4] > 0, "{c:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Publishing one table after another (each written into the half the
    /// program is not reading, as the diff against what that half held)
    /// gives, after every step, the results of those tables.
    #[test]
    fn a_sequence_of_publishes_answers_like_each_table(
        steps in prop::collection::vec((v4_routes(), v6_routes()), 2..6),
        seed in 1u64..u64::MAX,
    ) {
        if !netio::root_or_skip("the XDP engine update test") {
            return Ok(());
        }
        let mut engine = Engine::load(Mode::Test, FibCapacity::SMALL).unwrap();
        prop_assert!(engine.map_reader().unwrap().is_none());
        let mut rng = Rng(seed);
        let mut reader: Option<xdp_engine::audit::MapReader> = None;
        for (k, (v4, v6)) in steps.iter().enumerate() {
            let text = rules_text(&mut Rng(seed.wrapping_add(k as u64)));
            let t = tables(v4, v6, 1500, if k % 2 == 1 { acl(&text) } else { None });
            let fw = t.acl.as_ref();
            let image = Image::compile(&t.datapath(), &t.fib4, &t.fib6, fw, &engine.capacity()).unwrap();
            engine.publish(image).unwrap();
            // The audit's view: the maps read back equal a fresh compile,
            // a changed element is found, a reader from before this
            // publish refuses to mix generations.
            if let Some(old) = reader.take() {
                prop_assert!(old.read().unwrap().is_none(), "step {}: a stale reader read", k);
            }
            let r = engine.map_reader().unwrap().unwrap();
            let back = r.read().unwrap().unwrap();
            prop_assert_eq!(back.generation, engine.generation());
            let mut fresh = Image::compile(&t.datapath(), &t.fib4, &t.fib6, fw, &engine.capacity()).unwrap();
            let (d, n) = xdp_engine::audit::compare(&back, &fresh);
            prop_assert!(d.is_empty() && n > 0, "step {}: {:?}", k, d);
            for &(a, _, _) in v4 {
                prop_assert_eq!(back.fib4.lookup4(a), fresh.lookup4(a));
            }
            let i = (seed as usize) % fresh.fib4.top.len();
            fresh.fib4.top[i] ^= 1;
            let (d, _) = xdp_engine::audit::compare(&back, &fresh);
            prop_assert_eq!(d.len(), 1);
            prop_assert_eq!((d[0].map, d[0].differing, d[0].first), ("fib4_top", 1, i));
            reader = Some(r);
            let cfg = WorkerConfig { max_batch: 32, ..WorkerConfig::default() };
            let (mut user, mut xdp) = (Worker::new(cfg), Worker::new(cfg));
            for _ in 0..4 {
                let port = rng.below(2) as u16;
                let frames: Vec<Vec<u8>> = (0..32).map(|_| frame(&mut rng, port, v4, v6)).collect();
                let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
                let a = run_user(&mut user, &t, 0, port, &refs);
                let b = run_xdp(&mut engine, &mut xdp, &t, 0, port, &refs).unwrap();
                for (i, (x, y)) in a.frames.iter().zip(&b.frames).enumerate() {
                    prop_assert_eq!(x, y, "step {} frame {}: {:02x?}", k, i, frames[i]);
                }
            }
        }
    }
}
