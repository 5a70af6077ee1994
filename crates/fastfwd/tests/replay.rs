//! End to end: `fastfwd replay` over a pcap holding every case the
//! forwarding pipeline must get right, with every output decoded by an
//! independent parser (etherparse) and checked against what RFC 1812,
//! RFC 792, RFC 8200 and RFC 4443 require.
//!
//! Input frames are built byte by byte here (with this file's own checksum
//! code); the pcap container is written and read by this file too, so
//! nothing of fastfwd's own parsing judges fastfwd's output.
//!
//! Attribution of outputs to cases: every IPv4 test packet carries a unique
//! identification field, every IPv6 test packet a unique marker in its
//! payload; ICMP errors are attributed through the packet they quote.
//! Punted and dropped frames are compared in input order.

use etherparse::{
    Ethernet2Header, Icmpv4Slice, Icmpv6Slice, Ipv4Header, Ipv6Header, SingleVlanHeader,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

// ---------------------------------------------------------------- topology
// Matches tests/fixtures/replay-router.toml.

const R_D0: [u8; 6] = [2, 0, 0, 0, 0, 0x10];
const R_D1: [u8; 6] = [2, 0, 0, 0, 1, 0x10];
const R_D2: [u8; 6] = [2, 0, 0, 0, 2, 0x10];
const GEN: [u8; 6] = [2, 0, 0, 0, 0, 8];
const SINK_A: [u8; 6] = [2, 0, 0, 0, 1, 8];
const SINK_B: [u8; 6] = [2, 0, 0, 0, 1, 9];
const NARROW: [u8; 6] = [2, 0, 0, 0, 2, 2];
const VLAN_HOST: [u8; 6] = [2, 0, 0, 0, 0x64, 2];
const OTHER_MAC: [u8; 6] = [2, 0, 0, 0, 0x99, 0x99];

const R4_D0: [u8; 4] = [198, 18, 0, 10];
const R4_D1: [u8; 4] = [198, 19, 0, 10];
const R4_VLAN: [u8; 4] = [10, 100, 0, 1];
const GEN4: [u8; 4] = [198, 18, 0, 108];
const VLAN4: [u8; 4] = [10, 100, 0, 2];

fn v6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

const NARROW_MTU: usize = 1280;

// ------------------------------------------------------ building packets

/// RFC 1071 one's-complement sum folded to 16 bits (not complemented).
fn ones_sum(mut acc: u32, data: &[u8]) -> u32 {
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from(c[0]) << 8
        };
        acc += u32::from(w);
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc
}

fn checksum(data: &[u8]) -> u16 {
    !(ones_sum(0, data) as u16)
}

fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn eth_vlan(dst: [u8; 6], src: [u8; 6], vid: u16, ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&0x8100u16.to_be_bytes());
    f.extend_from_slice(&vid.to_be_bytes());
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[derive(Clone)]
struct V4 {
    src: [u8; 4],
    dst: [u8; 4],
    ttl: u8,
    proto: u8,
    id: u16,
    /// Flags and fragment offset word (DF 0x4000, MF 0x2000, offset in 8-byte units).
    frag: u16,
    options: Vec<u8>,
    payload: Vec<u8>,
}

impl V4 {
    fn udp(src: [u8; 4], dst: [u8; 4], id: u16, sport: u16, data_len: usize) -> V4 {
        V4 {
            src,
            dst,
            ttl: 64,
            proto: 17,
            id,
            frag: 0,
            options: vec![],
            payload: udp4(src, dst, sport, 5001, data_len, id),
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let ihl = (20 + self.options.len()) / 4;
        let total = (ihl * 4 + self.payload.len()) as u16;
        let mut h = vec![0x40 | ihl as u8, 0];
        h.extend_from_slice(&total.to_be_bytes());
        h.extend_from_slice(&self.id.to_be_bytes());
        h.extend_from_slice(&self.frag.to_be_bytes());
        h.extend_from_slice(&[self.ttl, self.proto, 0, 0]);
        h.extend_from_slice(&self.src);
        h.extend_from_slice(&self.dst);
        h.extend_from_slice(&self.options);
        let c = checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h.extend_from_slice(&self.payload);
        h
    }
}

/// A UDP datagram whose payload is a recognisable pattern seeded by `seed`.
fn udp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, data_len: usize, seed: u16) -> Vec<u8> {
    let data: Vec<u8> = (0..data_len)
        .map(|i| (i as u16).wrapping_mul(31).wrapping_add(seed) as u8)
        .collect();
    let len = (8 + data.len()) as u16;
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&len.to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(&data);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src);
    pseudo.extend_from_slice(&dst);
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&len.to_be_bytes());
    let c = !(ones_sum(ones_sum(0, &pseudo), &u) as u16);
    u[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    u
}

/// An IPv6 packet carrying UDP with `marker` in its first payload bytes.
fn v6_udp(
    src: [u8; 16],
    dst: [u8; 16],
    hop: u8,
    sport: u16,
    marker: u16,
    data_len: usize,
) -> Vec<u8> {
    let mut data = b"CASE".to_vec();
    data.extend_from_slice(&marker.to_be_bytes());
    data.extend((data.len()..data_len.max(6)).map(|i| (i * 7 + usize::from(marker)) as u8));
    let len = (8 + data.len()) as u16;
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&5001u16.to_be_bytes());
    u.extend_from_slice(&len.to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(&data);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src);
    pseudo.extend_from_slice(&dst);
    pseudo.extend_from_slice(&u32::from(len).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 17]);
    let c = !(ones_sum(ones_sum(0, &pseudo), &u) as u16);
    u[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    v6_packet(src, dst, hop, 17, &u)
}

fn v6_packet(src: [u8; 16], dst: [u8; 16], hop: u8, next: u8, payload: &[u8]) -> Vec<u8> {
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    ip.extend_from_slice(&[next, hop]);
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    ip.extend_from_slice(payload);
    ip
}

fn arp(op: u16, sender_mac: [u8; 6], sender: [u8; 4], target: [u8; 4]) -> Vec<u8> {
    let mut a = vec![0, 1, 8, 0, 6, 4];
    a.extend_from_slice(&op.to_be_bytes());
    a.extend_from_slice(&sender_mac);
    a.extend_from_slice(&sender);
    a.extend_from_slice(&[0; 6]);
    a.extend_from_slice(&target);
    let mut f = eth([0xff; 6], sender_mac, 0x0806, &a);
    f.resize(60, 0);
    f
}

fn icmp4_echo(id: u16) -> Vec<u8> {
    let mut m = vec![8, 0, 0, 0];
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    m.extend_from_slice(b"ping payload");
    let c = checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

// ----------------------------------------------------- cases and outcomes

/// What must come out for one input frame.
#[derive(Clone, Debug)]
enum Expect {
    /// Forwarded out of `port`: the same IP packet with TTL / hop limit one
    /// less, L2 rewritten to one of `macs`, tagged `vlan`.
    Forward {
        port: &'static str,
        src_mac: [u8; 6],
        macs: Vec<[u8; 6]>,
        vlan: Option<u16>,
    },
    /// Fragmented out of `port` into pieces of at most `mtu` bytes.
    Fragments {
        port: &'static str,
        mtu: usize,
        mac: [u8; 6],
    },
    /// Dropped under `reason`, and an ICMP error of this type, code and
    /// bytes 5-8 sent back out of d0 to the generator.
    IcmpError {
        /// Toward the generator on d0, or the host on VLAN 100.
        via_vlan: bool,
        reason: &'static str,
        icmp_type: u8,
        code: u8,
        rest: [u8; 4],
    },
    /// Handed to the host under `reason`, unchanged.
    Punt(&'static str),
    /// Dropped under `reason`, nothing sent.
    Drop(&'static str),
    /// Dropped under `reason`; the ICMP error it would earn is suppressed
    /// (RFC 1812 4.3.2.7: never about an ICMP error or a non-first
    /// fragment; or no route back to the source).
    DropSuppressed(&'static str),
}

struct Case {
    name: String,
    frame: Vec<u8>,
    /// Key for attributing outputs: IPv4 identification or IPv6 marker.
    key: Option<Key>,
    expect: Expect,
    /// ECMP flow this packet belongs to, if any.
    flow: Option<(bool, u16)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    V4(u16),
    V6(u16),
}

struct Cases {
    list: Vec<Case>,
    next_id: u16,
}

impl Cases {
    fn id(&mut self) -> u16 {
        self.next_id += 1;
        self.next_id
    }
    fn push(&mut self, name: impl Into<String>, frame: Vec<u8>, key: Option<Key>, expect: Expect) {
        self.list.push(Case {
            name: name.into(),
            frame,
            key,
            expect,
            flow: None,
        });
    }
}

fn fwd(port: &'static str, src_mac: [u8; 6], macs: &[[u8; 6]], vlan: Option<u16>) -> Expect {
    Expect::Forward {
        port,
        src_mac,
        macs: macs.to_vec(),
        vlan,
    }
}

fn build_cases() -> Vec<Case> {
    let mut c = Cases {
        list: Vec::new(),
        next_id: 0x5000,
    };
    let sinks = [SINK_A, SINK_B];

    // Valid IPv4 over ECMP: 12 flows, each sent three times, interleaved.
    for round in 0..3 {
        for flow in 0..12u16 {
            let id = c.id();
            let p = V4::udp(
                [198, 18, 1, 1 + flow as u8],
                [198, 19, 7, 1],
                id,
                20000 + flow,
                40,
            );
            c.push(
                format!("ipv4 ecmp flow {flow} round {round}"),
                eth(R_D0, GEN, 0x0800, &p.bytes()),
                Some(Key::V4(id)),
                fwd("d1", R_D1, &sinks, None),
            );
            c.list.last_mut().unwrap().flow = Some((false, flow));
        }
    }
    // Valid IPv6 over ECMP: 8 flows, twice each.
    for round in 0..2 {
        for flow in 0..8u16 {
            let id = c.id();
            let p = v6_udp(
                v6("2001:2::108"),
                v6("2001:2:0:8001::1"),
                64,
                30000 + flow,
                id,
                40,
            );
            c.push(
                format!("ipv6 ecmp flow {flow} round {round}"),
                eth(R_D0, GEN, 0x86dd, &p),
                Some(Key::V6(id)),
                fwd("d1", R_D1, &sinks, None),
            );
            c.list.last_mut().unwrap().flow = Some((true, flow));
        }
    }
    // Other routes: the narrow link d2, and out of the VLAN sub-interface (tag added).
    let id = c.id();
    c.push(
        "ipv4 to 100.64/16 via d2",
        eth(
            R_D0,
            GEN,
            0x0800,
            &V4::udp(GEN4, [100, 64, 3, 3], id, 1000, 100).bytes(),
        ),
        Some(Key::V4(id)),
        fwd("d2", R_D2, &[NARROW], None),
    );
    let id = c.id();
    c.push(
        "ipv6 to 2001:db8:64::/48 via d2",
        eth(
            R_D0,
            GEN,
            0x86dd,
            &v6_udp(v6("2001:2::108"), v6("2001:db8:64::9"), 9, 1000, id, 100),
        ),
        Some(Key::V6(id)),
        fwd("d2", R_D2, &[NARROW], None),
    );
    let id = c.id();
    c.push(
        "ipv4 to 10.200/16 out of VLAN 100 (tag added)",
        eth(
            R_D0,
            GEN,
            0x0800,
            &V4::udp(GEN4, [10, 200, 0, 5], id, 1000, 64).bytes(),
        ),
        Some(Key::V4(id)),
        fwd("d0", R_D0, &[VLAN_HOST], Some(100)),
    );
    // VLAN-tagged in on d0.100, out of d1 untagged.
    let id = c.id();
    c.push(
        "ipv4 VLAN 100 tagged in, untagged out of d1",
        eth_vlan(
            R_D0,
            VLAN_HOST,
            100,
            0x0800,
            &V4::udp(VLAN4, [198, 19, 7, 1], id, 20000, 40).bytes(),
        ),
        Some(Key::V4(id)),
        fwd("d1", R_D1, &sinks, None),
    );
    let id = c.id();
    c.push(
        "ipv4 tagged with a VLAN the port does not have",
        eth_vlan(
            R_D0,
            VLAN_HOST,
            200,
            0x0800,
            &V4::udp(VLAN4, [198, 19, 7, 1], id, 20000, 40).bytes(),
        ),
        None,
        Expect::Drop("unknown_interface"),
    );

    // IPv4 with options: forwarded with the options intact.
    let id = c.id();
    let mut p = V4::udp(GEN4, [100, 64, 3, 4], id, 1001, 32);
    // Record route with no free slot (pointer past the length, RFC 791
    // 3.1): forwarded as it is. Then NOP.
    p.options = vec![7, 7, 8, 198, 18, 0, 1, 1];
    c.push(
        "ipv4 with options",
        eth(R_D0, GEN, 0x0800, &p.bytes()),
        Some(Key::V4(id)),
        fwd("d2", R_D2, &[NARROW], None),
    );
    let id = c.id();
    let mut p = V4::udp(GEN4, [100, 64, 3, 5], id, 1001, 32);
    p.options = vec![1, 1, 1, 0];
    c.push(
        "ipv4 with NOP/EOL options",
        eth(R_D0, GEN, 0x0800, &p.bytes()),
        Some(Key::V4(id)),
        fwd("d2", R_D2, &[NARROW], None),
    );

    // Fragments in transit are forwarded as they are (first, middle, last).
    for (name, frag, len) in [
        ("first", 0x2000u16, 64usize),
        ("middle", 0x2000 | 8, 64),
        ("last", 16, 20),
    ] {
        let id = c.id();
        let p = V4 {
            src: GEN4,
            dst: [100, 64, 9, 9],
            ttl: 30,
            proto: 17,
            id,
            frag,
            options: vec![],
            payload: (0..len).map(|i| i as u8).collect(),
        };
        c.push(
            format!("ipv4 {name} fragment in transit"),
            eth(R_D0, GEN, 0x0800, &p.bytes()),
            Some(Key::V4(id)),
            fwd("d2", R_D2, &[NARROW], None),
        );
    }

    // Larger than the narrow link: DF set gets frag-needed, DF clear is fragmented.
    let id = c.id();
    let mut p = V4::udp(GEN4, [100, 64, 5, 5], id, 1002, 1400);
    p.frag = 0x4000;
    c.push(
        "ipv4 DF above egress MTU",
        eth(R_D0, GEN, 0x0800, &p.bytes()),
        Some(Key::V4(id)),
        Expect::IcmpError {
            via_vlan: false,
            reason: "fragmentation_needed",
            icmp_type: 3,
            code: 4,
            rest: [0, 0, (NARROW_MTU >> 8) as u8, NARROW_MTU as u8],
        },
    );
    let id = c.id();
    let p = V4::udp(GEN4, [100, 64, 5, 6], id, 1003, 1472);
    c.push(
        "ipv4 without DF above egress MTU",
        eth(R_D0, GEN, 0x0800, &p.bytes()),
        Some(Key::V4(id)),
        Expect::Fragments {
            port: "d2",
            mtu: NARROW_MTU,
            mac: NARROW,
        },
    );
    let id = c.id();
    let mut p = V4::udp(GEN4, [100, 64, 5, 7], id, 1004, 1400);
    p.options = vec![1, 1, 1, 0];
    c.push(
        "ipv4 with options, without DF, above egress MTU",
        eth(R_D0, GEN, 0x0800, &p.bytes()),
        Some(Key::V4(id)),
        Expect::Fragments {
            port: "d2",
            mtu: NARROW_MTU,
            mac: NARROW,
        },
    );
    let id = c.id();
    c.push(
        "ipv6 above egress MTU",
        eth(
            R_D0,
            GEN,
            0x86dd,
            &v6_udp(v6("2001:2::108"), v6("2001:db8:64::9"), 64, 1005, id, 1400),
        ),
        Some(Key::V6(id)),
        Expect::IcmpError {
            via_vlan: false,
            reason: "packet_too_big",
            icmp_type: 2,
            code: 0,
            rest: (NARROW_MTU as u32).to_be_bytes(),
        },
    );

    // TTL 1 and hop limit 1: time exceeded back to the source.
    let id = c.id();
    let mut p = V4::udp(GEN4, [198, 19, 7, 1], id, 1006, 40);
    p.ttl = 1;
    c.push(
        "ipv4 TTL 1",
        eth(R_D0, GEN, 0x0800, &p.bytes()),
        Some(Key::V4(id)),
        Expect::IcmpError {
            via_vlan: false,
            reason: "ttl_expired",
            icmp_type: 11,
            code: 0,
            rest: [0; 4],
        },
    );
    let id = c.id();
    let mut p = V4::udp(GEN4, [198, 19, 7, 1], id, 1007, 1000);
    p.ttl = 1;
    c.push(
        "ipv4 TTL 1, long (quote cut at 576 bytes)",
        eth(R_D0, GEN, 0x0800, &p.bytes()),
        Some(Key::V4(id)),
        Expect::IcmpError {
            via_vlan: false,
            reason: "ttl_expired",
            icmp_type: 11,
            code: 0,
            rest: [0; 4],
        },
    );
    let id = c.id();
    c.push(
        "ipv6 hop limit 1",
        eth(
            R_D0,
            GEN,
            0x86dd,
            &v6_udp(v6("2001:2::108"), v6("2001:2:0:8001::1"), 1, 1008, id, 40),
        ),
        Some(Key::V6(id)),
        Expect::IcmpError {
            via_vlan: false,
            reason: "hop_limit_expired",
            icmp_type: 3,
            code: 0,
            rest: [0; 4],
        },
    );
    // Never an ICMP error about an ICMP error, or about a non-first fragment.
    let id = c.id();
    let mut inner = V4::udp([198, 19, 7, 1], GEN4, 7, 1, 8).bytes();
    inner.truncate(28);
    let mut err = vec![3, 1, 0, 0, 0, 0, 0, 0];
    err.extend_from_slice(&inner);
    let ck = checksum(&err);
    err[2..4].copy_from_slice(&ck.to_be_bytes());
    let p = V4 {
        src: GEN4,
        dst: [198, 19, 7, 1],
        ttl: 1,
        proto: 1,
        id,
        frag: 0,
        options: vec![],
        payload: err,
    };
    c.push(
        "ipv4 TTL 1 carrying an ICMP error (no error about an error)",
        eth(R_D0, GEN, 0x0800, &p.bytes()),
        None,
        Expect::DropSuppressed("ttl_expired"),
    );
    let id = c.id();
    let p = V4 {
        src: GEN4,
        dst: [198, 19, 7, 1],
        ttl: 1,
        proto: 17,
        id,
        frag: 0x2000 | 8,
        options: vec![],
        payload: vec![0; 32],
    };
    c.push(
        "ipv4 TTL 1 non-first fragment (no error)",
        eth(R_D0, GEN, 0x0800, &p.bytes()),
        None,
        Expect::DropSuppressed("ttl_expired"),
    );

    // No route.
    let id = c.id();
    c.push(
        "ipv4 no route",
        eth(
            R_D0,
            GEN,
            0x0800,
            &V4::udp(GEN4, [203, 0, 113, 1], id, 1009, 40).bytes(),
        ),
        Some(Key::V4(id)),
        Expect::IcmpError {
            via_vlan: false,
            reason: "no_route",
            icmp_type: 3,
            code: 0,
            rest: [0; 4],
        },
    );
    let id = c.id();
    c.push(
        "ipv6 no route",
        eth(
            R_D0,
            GEN,
            0x86dd,
            &v6_udp(v6("2001:2::108"), v6("2001:db8:dead::1"), 64, 1010, id, 40),
        ),
        Some(Key::V6(id)),
        Expect::IcmpError {
            via_vlan: false,
            reason: "no_route",
            icmp_type: 1,
            code: 0,
            rest: [0; 4],
        },
    );

    // Header validation.
    let id = c.id();
    let mut b = V4::udp(GEN4, [198, 19, 7, 1], id, 1011, 40).bytes();
    b[10] ^= 0x5a;
    c.push(
        "ipv4 bad header checksum",
        eth(R_D0, GEN, 0x0800, &b),
        None,
        Expect::Drop("ipv4_bad_checksum"),
    );
    let id = c.id();
    let mut b = V4::udp(GEN4, [198, 19, 7, 1], id, 1012, 40).bytes();
    b[0] = 0x44;
    b[10..12].copy_from_slice(&[0, 0]);
    let ck = checksum(&b[..20]);
    b[10..12].copy_from_slice(&ck.to_be_bytes());
    c.push(
        "ipv4 IHL 4",
        eth(R_D0, GEN, 0x0800, &b),
        None,
        Expect::Drop("ipv4_bad_header_length"),
    );
    let id = c.id();
    let mut b = V4::udp(GEN4, [198, 19, 7, 1], id, 1012, 40).bytes();
    b[0] = 0x40;
    b[10..12].copy_from_slice(&[0, 0]);
    let ck = checksum(&b[..20]);
    b[10..12].copy_from_slice(&ck.to_be_bytes());
    c.push(
        "ipv4 IHL 0",
        eth(R_D0, GEN, 0x0800, &b),
        None,
        Expect::Drop("ipv4_bad_header_length"),
    );
    let id = c.id();
    let mut b = V4::udp(GEN4, [198, 19, 7, 1], id, 1013, 40).bytes();
    b[2..4].copy_from_slice(&19u16.to_be_bytes());
    b[10..12].copy_from_slice(&[0, 0]);
    let ck = checksum(&b[..20]);
    b[10..12].copy_from_slice(&ck.to_be_bytes());
    c.push(
        "ipv4 total length 19",
        eth(R_D0, GEN, 0x0800, &b),
        None,
        Expect::Drop("ipv4_bad_total_length"),
    );
    let id = c.id();
    let mut b = V4::udp(GEN4, [198, 19, 7, 1], id, 1014, 40).bytes();
    b[0] = 0x55;
    b[10..12].copy_from_slice(&[0, 0]);
    let ck = checksum(&b[..20]);
    b[10..12].copy_from_slice(&ck.to_be_bytes());
    c.push(
        "ipv4 version 5",
        eth(R_D0, GEN, 0x0800, &b),
        None,
        Expect::Drop("ipv4_bad_version"),
    );
    let mut b = v6_udp(v6("2001:2::108"), v6("2001:2:0:8001::1"), 64, 1015, 0, 40);
    b[0] = 0x70;
    c.push(
        "ipv6 version 7",
        eth(R_D0, GEN, 0x86dd, &b),
        None,
        Expect::Drop("ipv6_bad_version"),
    );

    // Martians (RFC 1812 5.3.7, RFC 4291): no ICMP for them.
    for (name, src) in [
        ("0/8", [0, 1, 2, 3]),
        ("127/8", [127, 0, 0, 1]),
        ("multicast", [224, 1, 1, 1]),
        ("class E", [240, 0, 0, 1]),
        ("limited broadcast", [255, 255, 255, 255]),
    ] {
        let id = c.id();
        c.push(
            format!("ipv4 martian source {name}"),
            eth(
                R_D0,
                GEN,
                0x0800,
                &V4::udp(src, [198, 19, 7, 1], id, 1016, 40).bytes(),
            ),
            None,
            Expect::Drop("ipv4_martian_source"),
        );
    }
    let id = c.id();
    c.push(
        "ipv4 martian destination 127/8",
        eth(
            R_D0,
            GEN,
            0x0800,
            &V4::udp(GEN4, [127, 0, 0, 9], id, 1017, 40).bytes(),
        ),
        None,
        Expect::Drop("ipv4_martian_destination"),
    );
    c.push(
        "ipv6 martian source ::1",
        eth(
            R_D0,
            GEN,
            0x86dd,
            &v6_udp(v6("::1"), v6("2001:2:0:8001::1"), 64, 1018, 0, 40),
        ),
        None,
        Expect::Drop("ipv6_martian_source"),
    );
    c.push(
        "ipv6 martian source multicast",
        eth(
            R_D0,
            GEN,
            0x86dd,
            &v6_udp(v6("ff0e::1"), v6("2001:2:0:8001::1"), 64, 1018, 0, 40),
        ),
        None,
        Expect::Drop("ipv6_martian_source"),
    );
    c.push(
        "ipv6 link-local destination",
        eth(
            R_D0,
            GEN,
            0x86dd,
            &v6_udp(v6("2001:2::108"), v6("fe80::99"), 64, 1019, 0, 40),
        ),
        None,
        Expect::Drop("ipv6_link_local"),
    );

    // Link layer.
    c.push(
        "unknown ethertype",
        eth(R_D0, GEN, 0x88b5, &[0u8; 46]),
        None,
        Expect::Drop("unknown_ethertype"),
    );
    let id = c.id();
    c.push(
        "unicast frame for another MAC",
        eth(
            OTHER_MAC,
            GEN,
            0x0800,
            &V4::udp(GEN4, [198, 19, 7, 1], id, 1020, 40).bytes(),
        ),
        None,
        Expect::Drop("not_our_mac"),
    );

    // For the router itself.
    c.push(
        "ARP request for the router",
        arp(1, GEN, GEN4, R4_D0),
        None,
        Expect::Punt("arp"),
    );
    let mut reply = arp(2, GEN, GEN4, R4_D0);
    reply[..6].copy_from_slice(&R_D0);
    c.push("ARP reply to the router", reply, None, Expect::Punt("arp"));
    let mut vlan_arp = arp(1, VLAN_HOST, VLAN4, R4_VLAN);
    vlan_arp.splice(12..12, [0x81, 0x00, 0x00, 100]);
    c.push(
        "ARP request for the router on VLAN 100",
        vlan_arp,
        None,
        Expect::Punt("arp"),
    );
    c.push(
        "ARP request for another host",
        arp(1, GEN, GEN4, [198, 18, 0, 99]),
        None,
        Expect::Drop("arp_not_for_us"),
    );
    let mut a = arp(1, GEN, GEN4, R4_D0);
    a.truncate(14 + 20);
    c.push("ARP truncated", a, None, Expect::Drop("arp_malformed"));
    let id = c.id();
    let echo = V4 {
        src: GEN4,
        dst: R4_D0,
        ttl: 64,
        proto: 1,
        id,
        frag: 0,
        options: vec![],
        payload: icmp4_echo(1),
    };
    c.push(
        "ICMP echo to the router",
        eth(R_D0, GEN, 0x0800, &echo.bytes()),
        None,
        Expect::Punt("local_address"),
    );
    let id = c.id();
    let echo = V4 {
        dst: R4_D1,
        id,
        ..echo.clone()
    };
    c.push(
        "ICMP echo to the router's address on another interface",
        eth(R_D0, GEN, 0x0800, &echo.bytes()),
        None,
        Expect::Punt("local_address"),
    );
    let id = c.id();
    let echo = V4 {
        src: VLAN4,
        dst: R4_VLAN,
        id,
        ..echo.clone()
    };
    c.push(
        "ICMP echo to the router on VLAN 100",
        eth_vlan(R_D0, VLAN_HOST, 100, 0x0800, &echo.bytes()),
        None,
        Expect::Punt("local_address"),
    );
    let mut ping6 = vec![128, 0, 0, 0, 0, 1, 0, 1];
    ping6.extend_from_slice(b"ping6");
    c.push(
        "ICMPv6 echo to the router",
        eth(
            R_D0,
            GEN,
            0x86dd,
            &v6_packet(v6("2001:2::108"), v6("2001:2::10"), 64, 58, &ping6),
        ),
        None,
        Expect::Punt("local_address"),
    );
    let id = c.id();
    c.push(
        "ipv4 to a connected host with no neighbour entry",
        eth(
            R_D0,
            GEN,
            0x0800,
            &V4::udp(GEN4, [198, 19, 0, 77], id, 1021, 40).bytes(),
        ),
        None,
        Expect::Punt("neighbour_miss"),
    );

    // Transport header cut short inside a complete IP packet: a router does
    // not need it (ECMP falls back to addresses); forwarded as it is.
    let id = c.id();
    let mut p = V4::udp(GEN4, [198, 19, 7, 2], id, 1025, 0);
    p.payload.truncate(4);
    c.push(
        "ipv4 carrying half a UDP header",
        eth(R_D0, GEN, 0x0800, &p.bytes()),
        Some(Key::V4(id)),
        fwd("d1", R_D1, &sinks, None),
    );
    // Ethernet padding after a short IP packet is not part of it.
    let id = c.id();
    let mut f = eth(
        R_D0,
        GEN,
        0x0800,
        &V4::udp(GEN4, [100, 64, 3, 6], id, 1026, 0).bytes(),
    );
    f.resize(60, 0xee);
    c.push(
        "ipv4 in a padded minimum frame",
        f,
        Some(Key::V4(id)),
        fwd("d2", R_D2, &[NARROW], None),
    );
    // IPv6 with a fragment header (a first fragment) in transit: forwarded.
    let id = c.id();
    let inner = v6_udp(v6("2001:2::108"), v6("2001:2:0:8001::7"), 64, 1027, id, 48);
    let mut ext = vec![17, 0, 0, 1, 0, 0, 0x12, 0x34]; // next UDP, offset 0, M=1, id 0x1234
    ext.extend_from_slice(&inner[40..]);
    c.push(
        "ipv6 first fragment (fragment header) in transit",
        eth(
            R_D0,
            GEN,
            0x86dd,
            &v6_packet(v6("2001:2::108"), v6("2001:2:0:8001::7"), 64, 44, &ext),
        ),
        Some(Key::V6(id)),
        fwd("d1", R_D1, &sinks, None),
    );

    // Broadcast and multicast.
    let id = c.id();
    c.push(
        "ipv4 limited broadcast",
        eth(
            [0xff; 6],
            GEN,
            0x0800,
            &V4::udp(GEN4, [255, 255, 255, 255], id, 1028, 20).bytes(),
        ),
        None,
        Expect::Punt("broadcast"),
    );
    let id = c.id();
    c.push(
        "ipv4 directed broadcast of a connected subnet",
        eth(
            [0xff; 6],
            GEN,
            0x0800,
            &V4::udp(GEN4, [198, 18, 0, 255], id, 1029, 20).bytes(),
        ),
        None,
        Expect::Punt("broadcast"),
    );
    let id = c.id();
    c.push(
        "ipv4 unicast to forward inside an L2 broadcast frame",
        eth(
            [0xff; 6],
            GEN,
            0x0800,
            &V4::udp(GEN4, [198, 19, 7, 1], id, 1030, 20).bytes(),
        ),
        None,
        Expect::Drop("l2_broadcast_not_forwarded"),
    );
    let id = c.id();
    let mut p = V4::udp(GEN4, [224, 0, 0, 5], id, 1031, 20);
    p.ttl = 1;
    c.push(
        "ipv4 link-local multicast (OSPF group)",
        eth([1, 0, 0x5e, 0, 0, 5], GEN, 0x0800, &p.bytes()),
        None,
        Expect::Punt("multicast"),
    );
    let id = c.id();
    c.push(
        "ipv4 multicast beyond the link",
        eth(
            [1, 0, 0x5e, 1, 1, 1],
            GEN,
            0x0800,
            &V4::udp(GEN4, [239, 1, 1, 1], id, 1032, 20).bytes(),
        ),
        None,
        Expect::Drop("multicast_not_routed"),
    );
    c.push(
        "ipv6 all-nodes multicast",
        eth(
            [0x33, 0x33, 0, 0, 0, 1],
            GEN,
            0x86dd,
            &v6_udp(v6("fe80::8"), v6("ff02::1"), 1, 1033, 0, 20),
        ),
        None,
        Expect::Punt("multicast"),
    );

    // Fragmenting with options: only copied options (type bit 7) repeat.
    let id = c.id();
    let mut p = V4::udp(GEN4, [100, 64, 5, 8], id, 1040, 1400);
    p.options = vec![0x88, 4, 0x12, 0x34, 1, 1, 1, 0]; // stream id (copied), NOPs, EOL
    c.push(
        "ipv4 with a copied option, without DF, above egress MTU",
        eth(R_D0, GEN, 0x0800, &p.bytes()),
        Some(Key::V4(id)),
        Expect::Fragments {
            port: "d2",
            mtu: NARROW_MTU,
            mac: NARROW,
        },
    );
    // Fragmenting a fragment: offsets continue from it, MF stays on the
    // last piece of a middle fragment and off on that of a last one.
    for (name, frag) in [("middle", 0x2000u16 | 100), ("last", 200)] {
        let id = c.id();
        let p = V4 {
            src: GEN4,
            dst: [100, 64, 5, 9],
            ttl: 20,
            proto: 17,
            id,
            frag,
            options: vec![],
            payload: (0..1400u32).map(|i| (i * 13 + 7) as u8).collect(),
        };
        c.push(
            format!("ipv4 {name} fragment above egress MTU, refragmented"),
            eth(R_D0, GEN, 0x0800, &p.bytes()),
            Some(Key::V4(id)),
            Expect::Fragments {
                port: "d2",
                mtu: NARROW_MTU,
                mac: NARROW,
            },
        );
    }
    // Exactly the egress MTU passes; one byte more does not.
    let id = c.id();
    let mut p = V4::udp(GEN4, [100, 64, 6, 1], id, 1041, NARROW_MTU - 28);
    p.frag = 0x4000;
    c.push(
        "ipv4 DF exactly at egress MTU",
        eth(R_D0, GEN, 0x0800, &p.bytes()),
        Some(Key::V4(id)),
        fwd("d2", R_D2, &[NARROW], None),
    );
    let id = c.id();
    let mut p = V4::udp(GEN4, [100, 64, 6, 2], id, 1042, NARROW_MTU - 27);
    p.frag = 0x4000;
    c.push(
        "ipv4 DF one byte above egress MTU",
        eth(R_D0, GEN, 0x0800, &p.bytes()),
        Some(Key::V4(id)),
        Expect::IcmpError {
            via_vlan: false,
            reason: "fragmentation_needed",
            icmp_type: 3,
            code: 4,
            rest: [0, 0, (NARROW_MTU >> 8) as u8, NARROW_MTU as u8],
        },
    );
    let id = c.id();
    c.push(
        "ipv6 exactly at egress MTU",
        eth(
            R_D0,
            GEN,
            0x86dd,
            &v6_udp(
                v6("2001:2::108"),
                v6("2001:db8:64::10"),
                64,
                1043,
                id,
                NARROW_MTU - 48,
            ),
        ),
        Some(Key::V6(id)),
        fwd("d2", R_D2, &[NARROW], None),
    );
    let id = c.id();
    c.push(
        "ipv6 one byte above egress MTU",
        eth(
            R_D0,
            GEN,
            0x86dd,
            &v6_udp(
                v6("2001:2::108"),
                v6("2001:db8:64::11"),
                64,
                1044,
                id,
                NARROW_MTU - 47,
            ),
        ),
        Some(Key::V6(id)),
        Expect::IcmpError {
            via_vlan: false,
            reason: "packet_too_big",
            icmp_type: 2,
            code: 0,
            rest: (NARROW_MTU as u32).to_be_bytes(),
        },
    );
    // An error about a packet that came in on the VLAN goes back out of it.
    let id = c.id();
    let mut p = V4::udp(VLAN4, [198, 19, 7, 1], id, 1045, 40);
    p.ttl = 1;
    c.push(
        "ipv4 TTL 1 from VLAN 100",
        eth_vlan(R_D0, VLAN_HOST, 100, 0x0800, &p.bytes()),
        Some(Key::V4(id)),
        Expect::IcmpError {
            via_vlan: true,
            reason: "ttl_expired",
            icmp_type: 11,
            code: 0,
            rest: [0; 4],
        },
    );
    // TTL 1 for the router itself is delivered, not expired.
    let id = c.id();
    let echo = V4 {
        src: GEN4,
        dst: R4_D0,
        ttl: 1,
        proto: 1,
        id,
        frag: 0,
        options: vec![],
        payload: icmp4_echo(2),
    };
    c.push(
        "ICMP echo with TTL 1 to the router",
        eth(R_D0, GEN, 0x0800, &echo.bytes()),
        None,
        Expect::Punt("local_address"),
    );
    // A header whose checksum after the TTL decrement is 0x0000: the
    // incremental update (RFC 1624 eqn. 3) must not give 0xffff.
    let (id, dst) = (3..=250u8)
        .find_map(|last| {
            let mut p = V4::udp(GEN4, [198, 19, 8, last], 0, 1046, 20);
            p.ttl = 63;
            let mut h = p.bytes()[..20].to_vec();
            h[10..12].copy_from_slice(&[0, 0]);
            let id = !(ones_sum(0, &h) as u16);
            (!(0x5000..=0x5fff).contains(&id) && id != 0).then_some((id, [198, 19, 8, last]))
        })
        .unwrap();
    let p = V4::udp(GEN4, dst, id, 1046, 20);
    let mut fwd_hdr = p.bytes()[..20].to_vec();
    fwd_hdr[8] -= 1;
    fwd_hdr[10..12].copy_from_slice(&[0, 0]);
    assert_eq!(
        checksum(&fwd_hdr),
        0,
        "test packet must hit checksum 0x0000 after the decrement"
    );
    c.push(
        "ipv4 whose forwarded header checksum is 0x0000",
        eth(R_D0, GEN, 0x0800, &p.bytes()),
        Some(Key::V4(id)),
        fwd("d1", R_D1, &sinks, None),
    );

    // No route back to the source: the error is suppressed.
    let id = c.id();
    let mut p = V4::udp([203, 0, 113, 50], [198, 19, 7, 1], id, 1047, 20);
    p.ttl = 1;
    c.push(
        "ipv4 TTL 1 from a source with no route back",
        eth(R_D0, GEN, 0x0800, &p.bytes()),
        None,
        Expect::DropSuppressed("ttl_expired"),
    );
    // The quote is of the IP packet, not of the Ethernet padding after it.
    let id = c.id();
    let mut p = V4::udp(GEN4, [198, 19, 7, 1], id, 1048, 0);
    p.ttl = 1;
    let mut f = eth(R_D0, GEN, 0x0800, &p.bytes());
    f.resize(60, 0xee);
    c.push(
        "ipv4 TTL 1 in a padded minimum frame",
        f,
        Some(Key::V4(id)),
        Expect::IcmpError {
            via_vlan: false,
            reason: "ttl_expired",
            icmp_type: 11,
            code: 0,
            rest: [0; 4],
        },
    );

    // ICMPv6 (RFC 4443 2.4 (e)): never an error about an error; informational
    // messages and non-first fragments do get one (3.3: MUST send).
    let mut err6 = vec![1, 0, 0, 0, 0, 0, 0, 0];
    err6.extend_from_slice(&v6_udp(v6("2001:2:0:8001::1"), v6("2001:2::108"), 3, 1, 0, 8)[..48]);
    c.push(
        "ipv6 hop limit 1 carrying an ICMPv6 error (no error about an error)",
        eth(
            R_D0,
            GEN,
            0x86dd,
            &v6_packet(v6("2001:2::108"), v6("2001:2:0:8001::1"), 1, 58, &err6),
        ),
        None,
        Expect::DropSuppressed("hop_limit_expired"),
    );
    let id = c.id();
    let mut echo6 = vec![128, 0, 0, 0, 0, 7, 0, 1];
    echo6.extend_from_slice(b"CASE");
    echo6.extend_from_slice(&id.to_be_bytes());
    echo6.extend_from_slice(&[0x55; 20]);
    c.push(
        "ipv6 hop limit 1 carrying an echo request",
        eth(
            R_D0,
            GEN,
            0x86dd,
            &v6_packet(v6("2001:2::108"), v6("2001:2:0:8001::1"), 1, 58, &echo6),
        ),
        Some(Key::V6(id)),
        Expect::IcmpError {
            via_vlan: false,
            reason: "hop_limit_expired",
            icmp_type: 3,
            code: 0,
            rest: [0; 4],
        },
    );
    let id = c.id();
    let mut frag6 = vec![17, 0, 0x00, 0x18, 0, 0, 0x43, 0x21]; // offset 3 (24 bytes), M=0
    frag6.extend_from_slice(b"CASE");
    frag6.extend_from_slice(&id.to_be_bytes());
    frag6.extend_from_slice(&[0x66; 26]);
    c.push(
        "ipv6 hop limit 1, non-first fragment",
        eth(
            R_D0,
            GEN,
            0x86dd,
            &v6_packet(v6("2001:2::108"), v6("2001:2:0:8001::1"), 1, 44, &frag6),
        ),
        Some(Key::V6(id)),
        Expect::IcmpError {
            via_vlan: false,
            reason: "hop_limit_expired",
            icmp_type: 3,
            code: 0,
            rest: [0; 4],
        },
    );
    let id = c.id();
    let inner = v6_udp(v6("2001:2::108"), v6("2001:2:0:8001::9"), 64, 1049, id, 30);
    let mut hbh = vec![17, 0, 1, 4, 0, 0, 0, 0]; // next UDP, PadN of 4
    hbh.extend_from_slice(&inner[40..]);
    c.push(
        "ipv6 with a hop-by-hop header (PadN) in transit",
        eth(
            R_D0,
            GEN,
            0x86dd,
            &v6_packet(v6("2001:2::108"), v6("2001:2:0:8001::9"), 64, 0, &hbh),
        ),
        Some(Key::V6(id)),
        fwd("d1", R_D1, &sinks, None),
    );

    // Malformed options (RFC 791 3.1) are refused on input with ICMP
    // parameter problem pointing at the octet in error (RFC 1812 4.3.2.1),
    // fragmented or not.
    for (name, opts, ptr, len) in [
        ("length past the header", [0x88u8, 9, 0, 0], 21u8, 1400),
        ("length 0", [0x88, 0, 0, 0], 21, 1400),
        ("no length octet", [1, 1, 1, 0x44], 23, 40),
    ] {
        let id = c.id();
        let mut p = V4::udp(GEN4, [100, 64, 7, 3], id, 1054, len);
        p.options = opts.to_vec();
        c.push(
            format!("ipv4 with a malformed option ({name})"),
            eth(R_D0, GEN, 0x0800, &p.bytes()),
            Some(Key::V4(id)),
            Expect::IcmpError {
                via_vlan: false,
                reason: "ipv4_bad_options",
                icmp_type: 12,
                code: 0,
                rest: [ptr, 0, 0, 0],
            },
        );
    }
    // 802.1Q: the priority and DEI bits do not change the VLAN; VID 0 is a
    // priority tag only (IEEE 802.1Q 9.6), the frame is the port's untagged.
    let id = c.id();
    c.push(
        "ipv4 VLAN 100 with priority 5 and DEI set",
        eth_vlan(
            R_D0,
            VLAN_HOST,
            0xb000 | 100,
            0x0800,
            &V4::udp(VLAN4, [100, 64, 7, 1], id, 1050, 40).bytes(),
        ),
        Some(Key::V4(id)),
        fwd("d2", R_D2, &[NARROW], None),
    );
    let id = c.id();
    c.push(
        "ipv4 priority-tagged (VID 0) on d0",
        eth_vlan(
            R_D0,
            GEN,
            0x6000,
            0x0800,
            &V4::udp(GEN4, [100, 64, 7, 2], id, 1051, 40).bytes(),
        ),
        Some(Key::V4(id)),
        fwd("d2", R_D2, &[NARROW], None),
    );
    // IPv6 scopes.
    c.push(
        "ipv6 link-local source to forward",
        eth(
            R_D0,
            GEN,
            0x86dd,
            &v6_udp(v6("fe80::8"), v6("2001:2:0:8001::1"), 64, 1052, 0, 20),
        ),
        None,
        Expect::Drop("ipv6_link_local"),
    );
    c.push(
        "ipv6 global multicast destination",
        eth(
            [0x33, 0x33, 0, 0, 0, 1],
            GEN,
            0x86dd,
            &v6_udp(v6("2001:2::108"), v6("ff0e::1"), 64, 1053, 0, 20),
        ),
        None,
        Expect::Drop("multicast_not_routed"),
    );
    let mut ping6 = vec![128, 0, 0, 0, 0, 2, 0, 1];
    ping6.extend_from_slice(b"anycast");
    c.push(
        "ICMPv6 echo to the subnet-router anycast address",
        eth(
            R_D0,
            GEN,
            0x86dd,
            &v6_packet(v6("2001:2::108"), v6("2001:2::"), 64, 58, &ping6),
        ),
        None,
        Expect::Punt("local_address"),
    );
    c.push(
        "802.3 frame with a length field (LLC)",
        eth(R_D0, GEN, 46, &[0x42; 46]),
        None,
        Expect::Drop("unknown_ethertype"),
    );

    // Truncated at every header boundary (and inside each header).
    let id = c.id();
    let full4 = eth(
        R_D0,
        GEN,
        0x0800,
        &V4::udp(GEN4, [198, 19, 7, 1], id, 1022, 32).bytes(),
    );
    for cut in [0, 1, 6, 12, 13] {
        c.push(
            format!("ipv4 frame cut to {cut} bytes"),
            full4[..cut].to_vec(),
            None,
            Expect::Drop("frame_too_short"),
        );
    }
    for cut in [14, 15, 33, 34, 41, 42, full4.len() - 1] {
        c.push(
            format!("ipv4 frame cut to {cut} bytes"),
            full4[..cut].to_vec(),
            None,
            Expect::Drop("ipv4_truncated"),
        );
    }
    let id = c.id();
    let tagged = eth_vlan(
        R_D0,
        VLAN_HOST,
        100,
        0x0800,
        &V4::udp(VLAN4, [198, 19, 7, 1], id, 1023, 32).bytes(),
    );
    for cut in [14, 15, 17] {
        c.push(
            format!("VLAN frame cut to {cut} bytes"),
            tagged[..cut].to_vec(),
            None,
            Expect::Drop("frame_too_short"),
        );
    }
    for cut in [18, 37, 38, 45] {
        c.push(
            format!("VLAN frame cut to {cut} bytes"),
            tagged[..cut].to_vec(),
            None,
            Expect::Drop("ipv4_truncated"),
        );
    }
    let full6 = eth(
        R_D0,
        GEN,
        0x86dd,
        &v6_udp(v6("2001:2::108"), v6("2001:2:0:8001::1"), 64, 1024, 0, 32),
    );
    for cut in [14, 15, 53, 54, 61, full6.len() - 1] {
        c.push(
            format!("ipv6 frame cut to {cut} bytes"),
            full6[..cut].to_vec(),
            None,
            Expect::Drop("ipv6_truncated"),
        );
    }
    c.list
}

// -------------------------------------------------------------- pcap I/O
// A minimal classic-pcap writer and reader, independent of fastfwd's.

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut b = Vec::new();
    for w in [0xa1b2c3d4u32, 0x0004_0002, 0, 0, 262144, 1] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    for (i, f) in frames.iter().enumerate() {
        // One frame per millisecond from t = 1000 s.
        let (sec, usec) = (1000 + i as u32 / 1000, (i as u32 % 1000) * 1000);
        for w in [sec, usec, f.len() as u32, f.len() as u32] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(f);
    }
    std::fs::write(path, b).unwrap();
}

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let b = match std::fs::read(path) {
        Ok(b) => b,
        Err(_) => return Vec::new(),
    };
    let magic = u32::from_le_bytes(b[0..4].try_into().unwrap());
    let le = match magic {
        0xa1b2c3d4 | 0xa1b23c4d => true,
        _ => {
            let be = u32::from_be_bytes(b[0..4].try_into().unwrap());
            assert!(
                be == 0xa1b2c3d4 || be == 0xa1b23c4d,
                "{}: not pcap",
                path.display()
            );
            false
        }
    };
    let rd = |at: usize| {
        let x: [u8; 4] = b[at..at + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(x)
        } else {
            u32::from_be_bytes(x)
        }
    };
    assert_eq!(rd(20), 1, "link type Ethernet");
    let mut out = Vec::new();
    let mut at = 24;
    while at < b.len() {
        let caplen = rd(at + 8) as usize;
        assert_eq!(rd(at + 12) as usize, caplen);
        out.push(b[at + 16..at + 16 + caplen].to_vec());
        at += 16 + caplen;
    }
    assert_eq!(at, b.len(), "{}: trailing bytes", path.display());
    out
}

// ------------------------------------------------------- decoding outputs

/// One output frame decoded by etherparse.
#[derive(Debug)]
struct Decoded {
    dst: [u8; 6],
    src: [u8; 6],
    vlan: Option<u16>,
    /// The IP packet (header and payload, Ethernet padding removed).
    ip: Vec<u8>,
    is_v6: bool,
}

fn decode(frame: &[u8]) -> Decoded {
    let (eh, rest) = Ethernet2Header::from_slice(frame).expect("ethernet header");
    let (vlan, ethertype, rest) = if eh.ether_type.0 == 0x8100 {
        let (vh, rest) = SingleVlanHeader::from_slice(rest).expect("vlan tag");
        (Some(vh.vlan_id.value()), vh.ether_type.0, rest)
    } else {
        (None, eh.ether_type.0, rest)
    };
    let (ip, is_v6) = match ethertype {
        0x0800 => {
            let (h, _) = Ipv4Header::from_slice(rest).expect("ipv4 header");
            assert_eq!(
                h.header_checksum,
                h.calc_header_checksum(),
                "IPv4 header checksum"
            );
            (rest[..usize::from(h.total_len)].to_vec(), false)
        }
        0x86dd => {
            let (h, _) = Ipv6Header::from_slice(rest).expect("ipv6 header");
            (rest[..40 + usize::from(h.payload_length)].to_vec(), true)
        }
        t => panic!("output frame with ethertype {t:#06x}"),
    };
    Decoded {
        dst: eh.destination,
        src: eh.source,
        vlan,
        ip,
        is_v6,
    }
}

/// The key of an IP packet: its IPv4 id or its IPv6 payload marker.
fn key_of(ip: &[u8]) -> Option<Key> {
    match ip.first()? >> 4 {
        4 if ip.len() >= 6 => Some(Key::V4(u16::from_be_bytes([ip[4], ip[5]]))),
        6 => {
            let at = ip.windows(4).position(|w| w == b"CASE")?;
            let m = ip.get(at + 4..at + 6)?;
            Some(Key::V6(u16::from_be_bytes([m[0], m[1]])))
        }
        _ => None,
    }
}

/// An ICMP / ICMPv6 error generated by the router: (type, code, bytes
/// 5-8, quoted packet).
type IcmpError = (u8, u8, [u8; 4], Vec<u8>);

/// An output frame: its port, decoded form and ICMP error contents.
type Attributed<'a> = (&'a str, Decoded, Option<IcmpError>);

fn router_icmp_error(d: &Decoded) -> Option<IcmpError> {
    if d.is_v6 {
        let (h, rest) = Ipv6Header::from_slice(&d.ip).ok()?;
        if h.next_header.0 != 58 {
            return None;
        }
        let s = Icmpv6Slice::from_slice(rest).expect("icmpv6");
        if s.type_u8() >= 128 {
            return None;
        }
        assert!(
            s.is_checksum_valid(h.source, h.destination),
            "ICMPv6 checksum"
        );
        Some((
            s.type_u8(),
            s.code_u8(),
            s.bytes5to8(),
            s.payload().to_vec(),
        ))
    } else {
        let (h, rest) = Ipv4Header::from_slice(&d.ip).ok()?;
        if h.protocol.0 != 1 {
            return None;
        }
        let msg = &rest[..usize::from(h.total_len) - h.header_len()];
        let s = Icmpv4Slice::from_slice(msg).expect("icmpv4");
        if !matches!(s.type_u8(), 3 | 11 | 12) || ![R4_D0, R4_VLAN].contains(&h.source) {
            return None;
        }
        assert_eq!(ones_sum(0, msg), 0xffff, "ICMP checksum");
        Some((
            s.type_u8(),
            s.code_u8(),
            s.bytes5to8(),
            s.payload().to_vec(),
        ))
    }
}

/// The IP packet of an input frame.
fn input_ip(frame: &[u8]) -> Vec<u8> {
    let d = decode(frame);
    d.ip
}

// ------------------------------------------------------------ running

struct Run {
    outputs: BTreeMap<String, Vec<Vec<u8>>>,
    json: serde_json::Value,
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fastfwd-replay-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/replay-router.toml")
}

fn run_replay(dir: &Path, input: &Path, batch: u16) -> Run {
    run_replay_fib(dir, input, batch, "fast")
}

fn run_replay_fib(dir: &Path, input: &Path, batch: u16, fib: &str) -> Run {
    let user = run_replay_engine(dir, input, batch, fib, "user");
    // The XDP engine (BPF_PROG_TEST_RUN, needs root) is the same router:
    // the same bytes in every output file and the same counters.
    if fib == "fast" && netio::root_or_skip("replay with --engine xdp") {
        let xdp = run_replay_engine(dir, input, batch, fib, "xdp");
        assert_same_run(&user, &xdp);
    }
    user
}

/// Two engines' runs agree on every output and every counter.
fn assert_same_run(user: &Run, xdp: &Run) {
    for (name, frames) in &user.outputs {
        let other = &xdp.outputs[name];
        assert_eq!(
            frames.len(),
            other.len(),
            "{name}.pcap: frame count, user vs xdp engine"
        );
        for (i, (a, b)) in frames.iter().zip(other).enumerate() {
            assert_eq!(a, b, "{name}.pcap frame {i}: user vs xdp engine");
        }
    }
    for key in ["counters", "outputs", "firewall"] {
        assert_eq!(
            user.json.get(key),
            xdp.json.get(key),
            "{key}: user vs xdp engine"
        );
    }
    let x = &xdp.json["xdp"];
    assert!(x["finished"].as_u64().is_some(), "xdp section: {x}");
}

fn run_replay_engine(dir: &Path, input: &Path, batch: u16, fib: &str, engine: &str) -> Run {
    let out = dir.join(format!("out-{batch}-{fib}-{engine}"));
    let res = Command::new(env!("CARGO_BIN_EXE_fastfwd"))
        .args(["replay", "--config"])
        .arg(fixture())
        .arg("--in")
        .arg(format!("d0={}", input.display()))
        .arg("--out")
        .arg(&out)
        .args(["--json", "--batch", &batch.to_string(), "--fib", fib])
        .args(["--engine", engine])
        .output()
        .unwrap();
    assert!(
        res.status.success(),
        "fastfwd replay --engine {engine} failed: {}",
        String::from_utf8_lossy(&res.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&res.stdout).expect("JSON on stdout");
    let mut outputs = BTreeMap::new();
    for name in ["d0", "d1", "d2", "punt", "drop"] {
        outputs.insert(
            name.to_owned(),
            read_pcap(&out.join(format!("{name}.pcap"))),
        );
    }
    Run { outputs, json }
}

/// The IPv4 options a later fragment keeps: those with the copied flag
/// (bit 7 of the type), zero-padded to a multiple of four bytes.
fn copied_options(opts: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => break,
            1 => i += 1,
            t => {
                let len = usize::from(opts[i + 1]);
                if t & 0x80 != 0 {
                    out.extend_from_slice(&opts[i..i + len]);
                }
                i += len;
            }
        }
    }
    while out.len() % 4 != 0 {
        out.push(0);
    }
    out
}

/// Checks that `out` is `inp` forwarded: same IP packet except TTL / hop
/// limit one less (and the IPv4 checksum, verified by `decode`).
fn assert_forwarded(name: &str, inp: &[u8], out: &[u8]) {
    assert_eq!(inp.len(), out.len(), "{name}: length changed");
    let ttl_at = if inp[0] >> 4 == 4 { 8 } else { 7 };
    for i in 0..inp.len() {
        if i == ttl_at {
            assert_eq!(
                out[i],
                inp[i] - 1,
                "{name}: TTL/hop limit not decremented by one"
            );
        } else if inp[0] >> 4 == 4 && (i == 10 || i == 11) {
            continue;
        } else {
            assert_eq!(out[i], inp[i], "{name}: byte {i} of the IP packet changed");
        }
    }
}

fn check(cases: &[Case], run: &Run) {
    // Attribute every frame sent on a port to a case.
    let mut by_key: BTreeMap<Key, Vec<Attributed<'_>>> = BTreeMap::new();
    for port in ["d0", "d1", "d2"] {
        for f in &run.outputs[port] {
            let d = decode(f);
            let err = router_icmp_error(&d);
            let key = match &err {
                Some((_, _, _, quoted)) => key_of(quoted),
                None => key_of(&d.ip),
            }
            .unwrap_or_else(|| panic!("output on {port} from no case: {f:02x?}"));
            by_key.entry(key).or_default().push((port, d, err));
        }
    }

    let mut expected_punts = Vec::new();
    let mut expected_drops = Vec::new();
    let mut drop_reasons: BTreeMap<&str, u64> = BTreeMap::new();
    let mut punt_reasons: BTreeMap<&str, u64> = BTreeMap::new();
    let mut flows: BTreeMap<(bool, u16), BTreeSet<[u8; 6]>> = BTreeMap::new();
    let (mut fwd4, mut fwd6, mut icmp, mut frags, mut suppressed) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut used_keys = BTreeSet::new();

    for case in cases {
        let name = &case.name;
        let outs = case.key.and_then(|k| {
            used_keys.insert(k);
            by_key.get(&k)
        });
        let outs: &[_] = outs.map(Vec::as_slice).unwrap_or(&[]);
        match &case.expect {
            Expect::Forward {
                port,
                src_mac,
                macs,
                vlan,
            } => {
                assert_eq!(
                    outs.len(),
                    1,
                    "{name}: expected one forwarded frame, got {}",
                    outs.len()
                );
                let (p, d, err) = &outs[0];
                assert!(err.is_none(), "{name}: got an ICMP error");
                assert_eq!(p, port, "{name}: egress port");
                assert_eq!(&d.src, src_mac, "{name}: source MAC");
                assert!(
                    macs.contains(&d.dst),
                    "{name}: destination MAC {:02x?}",
                    d.dst
                );
                assert_eq!(&d.vlan, vlan, "{name}: VLAN tag");
                let inp = input_ip(&case.frame);
                assert_forwarded(name, &inp, &d.ip);
                if inp[0] >> 4 == 4 {
                    fwd4 += 1;
                } else {
                    fwd6 += 1;
                }
                if let Some(flow) = case.flow {
                    flows.entry(flow).or_default().insert(d.dst);
                }
            }
            Expect::Fragments { port, mtu, mac } => {
                let inp = input_ip(&case.frame);
                let ihl = usize::from(inp[0] & 0x0f) * 4;
                assert!(
                    outs.len() >= 2,
                    "{name}: expected fragments, got {}",
                    outs.len()
                );
                let mut data = vec![None::<u8>; inp.len() - ihl];
                let mut saw_last = false;
                // The input may itself be a fragment: pieces start at its
                // offset and the last keeps its MF flag (RFC 791 3.2).
                let in_word = u16::from_be_bytes([inp[6], inp[7]]);
                let in_off = usize::from(in_word & 0x1fff) * 8;
                let in_mf = in_word & 0x2000 != 0;
                for (p, d, err) in outs {
                    assert!(err.is_none(), "{name}: got an ICMP error");
                    assert_eq!(p, port, "{name}: egress port");
                    assert_eq!(d.dst, *mac, "{name}: destination MAC");
                    let f = &d.ip;
                    assert!(
                        f.len() <= *mtu,
                        "{name}: fragment of {} bytes above MTU {mtu}",
                        f.len()
                    );
                    let (h, _) = Ipv4Header::from_slice(f).unwrap();
                    let fh = h.header_len();
                    assert_eq!(&h.source, &inp[12..16], "{name}: source");
                    assert_eq!(&h.destination, &inp[16..20], "{name}: destination");
                    assert_eq!(h.time_to_live, inp[8] - 1, "{name}: TTL");
                    assert_eq!(h.protocol.0, inp[9], "{name}: protocol");
                    assert_eq!(f[1], inp[1], "{name}: DSCP/ECN");
                    assert_eq!(
                        h.identification,
                        u16::from_be_bytes([inp[4], inp[5]]),
                        "{name}: id"
                    );
                    assert!(!h.dont_fragment, "{name}: DF set on a fragment");
                    let abs = usize::from(h.fragment_offset.value()) * 8;
                    assert!(abs >= in_off, "{name}: fragment before the input's offset");
                    let off = abs - in_off;
                    let body = &f[fh..];
                    if off + body.len() == data.len() {
                        assert!(!saw_last, "{name}: two last fragments");
                        saw_last = true;
                        assert_eq!(h.more_fragments, in_mf, "{name}: MF of the last piece");
                    } else {
                        assert!(h.more_fragments, "{name}: MF clear on a middle piece");
                        assert_eq!(
                            body.len() % 8,
                            0,
                            "{name}: non-last fragment not a multiple of 8"
                        );
                    }
                    if off == 0 {
                        // RFC 791: the first fragment carries all options.
                        assert_eq!(
                            &f[20..fh],
                            &inp[20..ihl],
                            "{name}: options of the first fragment"
                        );
                    } else {
                        // Later fragments carry only the options with the
                        // copied flag (RFC 791 3.1), padded to 32 bits.
                        assert_eq!(
                            &f[20..fh],
                            &copied_options(&inp[20..ihl])[..],
                            "{name}: options of a later fragment"
                        );
                    }
                    for (i, &b) in body.iter().enumerate() {
                        let slot = data
                            .get_mut(off + i)
                            .unwrap_or_else(|| panic!("{name}: fragment past the end"));
                        assert!(slot.is_none(), "{name}: fragments overlap at {}", off + i);
                        *slot = Some(b);
                    }
                    frags += 1;
                }
                assert!(saw_last, "{name}: no last fragment");
                let joined: Vec<u8> = data
                    .iter()
                    .enumerate()
                    .map(|(i, b)| b.unwrap_or_else(|| panic!("{name}: hole at byte {i}")))
                    .collect();
                assert_eq!(
                    joined,
                    &inp[ihl..],
                    "{name}: reassembly differs from the original payload"
                );
                fwd4 += 1;
            }
            Expect::IcmpError {
                via_vlan,
                reason,
                icmp_type,
                code,
                rest,
            } => {
                assert_eq!(
                    outs.len(),
                    1,
                    "{name}: expected one ICMP error, got {}",
                    outs.len()
                );
                let (p, d, err) = &outs[0];
                let (t, cd, r, quoted) = err
                    .as_ref()
                    .unwrap_or_else(|| panic!("{name}: not an ICMP error"));
                assert_eq!(
                    *p, "d0",
                    "{name}: ICMP error not sent back toward the source"
                );
                let (back_mac, back_vlan, back4) = if *via_vlan {
                    (VLAN_HOST, Some(100), R4_VLAN)
                } else {
                    (GEN, None, R4_D0)
                };
                assert_eq!(
                    (d.src, d.dst, d.vlan),
                    (R_D0, back_mac, back_vlan),
                    "{name}: ICMP error L2 header"
                );
                assert_eq!(
                    (*t, *cd, *r),
                    (*icmp_type, *code, *rest),
                    "{name}: ICMP type/code/field"
                );
                let inp = input_ip(&case.frame);
                if d.is_v6 {
                    let (h, _) = Ipv6Header::from_slice(&d.ip).unwrap();
                    assert_eq!(h.source, v6("2001:2::10"), "{name}: ICMPv6 source");
                    assert_eq!(&h.destination, &inp[8..24], "{name}: ICMPv6 destination");
                    // RFC 4443 2.4(c): as much as fits in the minimum MTU.
                    let want = inp.len().min(1280 - 48);
                    assert_eq!(d.ip.len(), 48 + want, "{name}: ICMPv6 error length");
                    assert_eq!(quoted, &inp[..want], "{name}: quoted packet");
                } else {
                    let (h, _) = Ipv4Header::from_slice(&d.ip).unwrap();
                    assert_eq!(h.source, back4, "{name}: ICMP source");
                    assert_eq!(&h.destination, &inp[12..16], "{name}: ICMP destination");
                    assert!(h.time_to_live > 1, "{name}: ICMP TTL");
                    // RFC 1812 4.3.2.3: as much as fits in 576 bytes.
                    let want = inp.len().min(576 - 28);
                    assert!(want >= 28);
                    assert_eq!(quoted, &inp[..want], "{name}: quoted packet");
                }
                icmp += 1;
                *drop_reasons.entry(reason).or_default() += 1;
                expected_drops.push(case.frame.clone());
            }
            Expect::Punt(reason) => {
                assert!(outs.is_empty(), "{name}: punted packet also sent on a port");
                *punt_reasons.entry(reason).or_default() += 1;
                expected_punts.push(case.frame.clone());
            }
            Expect::Drop(reason) => {
                assert!(outs.is_empty(), "{name}: dropped packet produced output");
                *drop_reasons.entry(reason).or_default() += 1;
                expected_drops.push(case.frame.clone());
            }
            Expect::DropSuppressed(reason) => {
                assert!(outs.is_empty(), "{name}: dropped packet produced output");
                *drop_reasons.entry(reason).or_default() += 1;
                expected_drops.push(case.frame.clone());
                suppressed += 1;
            }
        }
    }
    for k in by_key.keys() {
        assert!(
            used_keys.contains(k),
            "output for {k:?}, which expects none"
        );
    }

    // ECMP: each flow stays on one next hop; the flows use both.
    let mut hops_used = BTreeSet::new();
    for (flow, macs) in &flows {
        assert_eq!(
            macs.len(),
            1,
            "flow {flow:?} spread over {} next hops",
            macs.len()
        );
        hops_used.extend(macs.iter().copied());
    }
    for v6 in [false, true] {
        let used: BTreeSet<_> = flows
            .iter()
            .filter(|(f, _)| f.0 == v6)
            .flat_map(|(_, m)| m.iter().copied())
            .collect();
        assert_eq!(
            used.len(),
            2,
            "ECMP ({}) used {} of 2 next hops",
            if v6 { "IPv6" } else { "IPv4" },
            used.len()
        );
    }

    // Punted and dropped frames come out unchanged, in input order.
    assert_eq!(run.outputs["punt"], expected_punts, "punt.pcap");
    assert_eq!(
        run.outputs["drop"].len(),
        expected_drops.len(),
        "drop.pcap frame count"
    );
    assert_eq!(run.outputs["drop"], expected_drops, "drop.pcap");

    // Counters: every reason, zero or not.
    let c = &run.json["counters"];
    for (reason, v) in c["drops"].as_object().unwrap() {
        let want = drop_reasons.get(reason.as_str()).copied().unwrap_or(0);
        assert_eq!(v.as_u64(), Some(want), "drop counter {reason}");
    }
    for (reason, v) in c["punts"].as_object().unwrap() {
        let want = punt_reasons.get(reason.as_str()).copied().unwrap_or(0);
        assert_eq!(v.as_u64(), Some(want), "punt counter {reason}");
    }
    for r in drop_reasons.keys() {
        assert!(c["drops"].get(*r).is_some(), "no drop counter named {r}");
    }
    assert_eq!(
        c["rx_frames"].as_u64(),
        Some(cases.len() as u64),
        "rx_frames"
    );
    assert_eq!(c["forwarded_ipv4"].as_u64(), Some(fwd4), "forwarded_ipv4");
    assert_eq!(c["forwarded_ipv6"].as_u64(), Some(fwd6), "forwarded_ipv6");
    assert_eq!(c["icmp_sent"].as_u64(), Some(icmp), "icmp_sent");
    assert_eq!(
        c["icmp_rate_limited"].as_u64(),
        Some(0),
        "icmp_rate_limited"
    );
    assert_eq!(
        c["icmp_suppressed"].as_u64(),
        Some(suppressed),
        "icmp_suppressed"
    );
    assert_eq!(c["fragments_sent"].as_u64(), Some(frags), "fragments_sent");
    // Per interface: what each sent equals what its port's pcap holds.
    let ifs = c["interfaces"].as_array().unwrap();
    let tx = |name: &str| {
        ifs.iter()
            .find(|i| i["name"] == name)
            .unwrap_or_else(|| panic!("no counters for {name}"))["tx_packets"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(
        tx("d0") + tx("d0.100"),
        run.outputs["d0"].len() as u64,
        "tx on port d0"
    );
    assert_eq!(tx("d1"), run.outputs["d1"].len() as u64, "tx d1");
    assert_eq!(tx("d2"), run.outputs["d2"].len() as u64, "tx d2");
    let json_outputs = run.json["outputs"].as_object().unwrap();
    for (name, frames) in &run.outputs {
        let n = json_outputs
            .get(&format!("{name}.pcap"))
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        assert_eq!(n, frames.len() as u64, "reported count of {name}.pcap");
    }
}

#[test]
fn replay_checks_every_case() {
    let cases = build_cases();
    let dir = tmpdir("cases");
    let input = dir.join("input.pcap");
    write_pcap(
        &input,
        &cases.iter().map(|c| c.frame.clone()).collect::<Vec<_>>(),
    );
    // One frame per pipeline call, then the default batching: the same
    // outputs; the fast FIB by default, then the reference one.
    let one = run_replay(&dir, &input, 1);
    check(&cases, &one);
    let batched = run_replay(&dir, &input, 32);
    check(&cases, &batched);
    // The reference FIB gives the same outputs as the fast one.
    let reference = run_replay_fib(&dir, &input, 32, "reference");
    check(&cases, &reference);
    assert_eq!(reference.outputs, batched.outputs);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn replay_merges_inputs_from_two_ports() {
    // A flow from the sink side (d1) back to the generator, beside one from d0.
    let dir = tmpdir("two-ports");
    let a = dir.join("a.pcap");
    let b = dir.join("b.pcap");
    let fa = eth(
        R_D0,
        GEN,
        0x0800,
        &V4::udp(GEN4, [198, 19, 7, 1], 1, 1, 20).bytes(),
    );
    let fb = eth(
        R_D1,
        SINK_A,
        0x0800,
        &V4::udp([198, 19, 7, 1], [198, 18, 3, 3], 2, 2, 20).bytes(),
    );
    write_pcap(&a, &[fa.clone(), fa.clone()]);
    write_pcap(&b, std::slice::from_ref(&fb));
    let out = dir.join("out");
    let run = |engine: &str, out: &Path| {
        Command::new(env!("CARGO_BIN_EXE_fastfwd"))
            .args(["replay", "--config"])
            .arg(fixture())
            .arg("--in")
            .arg(format!("d0={}", a.display()))
            .arg("--in")
            .arg(format!("d1={}", b.display()))
            .arg("--out")
            .arg(out)
            .args(["--engine", engine])
            .output()
            .unwrap()
    };
    let res = run("user", &out);
    if netio::root_or_skip("replay of two inputs with --engine xdp") {
        let xout = dir.join("out-xdp");
        let x = run("xdp", &xout);
        assert!(x.status.success(), "{}", String::from_utf8_lossy(&x.stderr));
        for name in ["d0.pcap", "d1.pcap"] {
            assert_eq!(
                std::fs::read(out.join(name)).ok(),
                std::fs::read(xout.join(name)).ok(),
                "{name}: user vs xdp engine"
            );
        }
    }
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    let text = String::from_utf8(res.stdout).unwrap();
    assert!(text.contains("interface"), "table printed: {text}");
    let d1 = read_pcap(&out.join("d1.pcap"));
    let d0 = read_pcap(&out.join("d0.pcap"));
    assert_eq!(d1.len(), 2);
    assert_eq!(d0.len(), 1);
    let back = decode(&d0[0]);
    assert_eq!((back.src, back.dst), (R_D0, GEN));
    assert_forwarded("d1 -> d0", &input_ip(&fb), &back.ip);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn replay_reports_config_errors_with_file_line_and_field() {
    let dir = tmpdir("bad-config");
    let cfg = dir.join("router.toml");
    std::fs::write(
        &cfg,
        "[[interfaces]]\nname = \"d0\"\nmac = \"02:00:00:00:00:10\"\naddresses = [\"10.0.0.1/24\"]\n\n[[routes]]\nprefix = \"10.9.0.0/16\"\nvia = \"10.9.9.9\"\n",
    )
    .unwrap();
    let input = dir.join("in.pcap");
    write_pcap(&input, &[]);
    let res = Command::new(env!("CARGO_BIN_EXE_fastfwd"))
        .args(["replay", "--config"])
        .arg(&cfg)
        .args(["--port", "d0", "--in"])
        .arg(&input)
        .arg("--out")
        .arg(dir.join("out"))
        .output()
        .unwrap();
    assert!(!res.status.success());
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(
        err.contains("router.toml:8: routes[0].via: 10.9.9.9 is not on any connected subnet"),
        "{err}"
    );
    // Nothing was written: the config applies whole or not at all.
    assert!(!dir.join("out").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn replay_refuses_a_garbled_pcap() {
    let dir = tmpdir("garbled");
    let input = dir.join("in.pcap");
    let good = eth(
        R_D0,
        GEN,
        0x0800,
        &V4::udp(GEN4, [198, 19, 7, 1], 1, 1, 20).bytes(),
    );
    write_pcap(&input, &[good]);
    let mut bytes = std::fs::read(&input).unwrap();
    bytes.truncate(bytes.len() - 5);
    std::fs::write(&input, bytes).unwrap();
    let res = Command::new(env!("CARGO_BIN_EXE_fastfwd"))
        .args(["replay", "--config"])
        .arg(fixture())
        .args(["--port", "d0", "--in"])
        .arg(&input)
        .arg("--out")
        .arg(dir.join("out"))
        .output()
        .unwrap();
    assert!(!res.status.success());
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(err.contains("truncated packet data"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn demo_runs_in_one_command() {
    let dir = tmpdir("demo");
    let res = Command::new(env!("CARGO_BIN_EXE_fastfwd"))
        .args(["replay", "--json", "--demo"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&res.stdout).unwrap();
    let c = &json["counters"];
    assert_eq!(c["forwarded_ipv4"].as_u64(), Some(8));
    assert_eq!(c["forwarded_ipv6"].as_u64(), Some(1));
    assert_eq!(c["drops"]["ttl_expired"].as_u64(), Some(1));
    assert_eq!(c["drops"]["ipv4_bad_checksum"].as_u64(), Some(1));
    assert_eq!(c["drops"]["no_route"].as_u64(), Some(1));
    assert_eq!(c["punts"]["arp"].as_u64(), Some(1));
    assert_eq!(c["punts"]["local_address"].as_u64(), Some(1));
    let d1 = read_pcap(&dir.join("out/d1.pcap"));
    assert_eq!(d1.len(), 9);
    for f in &d1 {
        let d = decode(f);
        assert_eq!((d.src, d.dst), (R_D1, SINK_A));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn icmp_errors_are_rate_limited_by_pcap_time() {
    // 150 packets with TTL 1 within one millisecond: the worker's bucket
    // (burst 100, 1000 per second) lets the first 100 errors through.
    let dir = tmpdir("rate");
    let input = dir.join("ttl1.pcap");
    let frames: Vec<Vec<u8>> = (0..150u16)
        .map(|i| {
            let mut p = V4::udp(GEN4, [198, 19, 7, 1], 0x7000 + i, 1, 20);
            p.ttl = 1;
            eth(R_D0, GEN, 0x0800, &p.bytes())
        })
        .collect();
    let mut b = Vec::new();
    for w in [0xa1b2c3d4u32, 0x0004_0002, 0, 0, 262144, 1] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    for (i, f) in frames.iter().enumerate() {
        // 5000 s + i microseconds: all inside one millisecond.
        for w in [5000u32, i as u32, f.len() as u32, f.len() as u32] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(f);
    }
    std::fs::write(&input, b).unwrap();
    let run = run_replay(&dir, &input, 32);
    let c = &run.json["counters"];
    assert_eq!(c["drops"]["ttl_expired"].as_u64(), Some(150));
    assert_eq!(c["icmp_sent"].as_u64(), Some(100));
    assert_eq!(c["icmp_rate_limited"].as_u64(), Some(50));
    assert_eq!(run.outputs["d0"].len(), 100);
    // The errors answer the first 100 packets, in order.
    for (i, f) in run.outputs["d0"].iter().enumerate() {
        let d = decode(f);
        let (t, _, _, quoted) = router_icmp_error(&d).expect("ICMP error");
        assert_eq!(t, 11);
        assert_eq!(key_of(&quoted), Some(Key::V4(0x7000 + i as u16)));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn replay_reads_pcapng_input() {
    // Little-endian pcapng: section header, one Ethernet interface with
    // nanosecond timestamps, two enhanced packet blocks.
    fn block(t: u32, body: &[u8]) -> Vec<u8> {
        let total = (12 + body.len().div_ceil(4) * 4) as u32;
        let mut b = Vec::new();
        b.extend_from_slice(&t.to_le_bytes());
        b.extend_from_slice(&total.to_le_bytes());
        b.extend_from_slice(body);
        b.resize(total as usize - 4, 0);
        b.extend_from_slice(&total.to_le_bytes());
        b
    }
    let frames = [
        eth(
            R_D0,
            GEN,
            0x0800,
            &V4::udp(GEN4, [198, 19, 7, 1], 1, 1, 20).bytes(),
        ),
        eth(
            R_D0,
            GEN,
            0x0800,
            &V4::udp(GEN4, [100, 64, 0, 1], 2, 1, 20).bytes(),
        ),
    ];
    let mut file = block(
        0x0a0d0d0a,
        &[
            0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ],
    );
    file.extend(block(
        1,
        &[1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 1, 0, 9, 0, 0, 0, 0, 0, 0, 0],
    ));
    for (i, f) in frames.iter().enumerate() {
        let ts: u64 = 1_000_000_000_000 + i as u64;
        let mut epb = Vec::new();
        for w in [
            0,
            (ts >> 32) as u32,
            ts as u32,
            f.len() as u32,
            f.len() as u32,
        ] {
            epb.extend_from_slice(&w.to_le_bytes());
        }
        epb.extend_from_slice(f);
        file.extend(block(6, &epb));
    }
    let dir = tmpdir("pcapng");
    let input = dir.join("in.pcapng");
    std::fs::write(&input, file).unwrap();
    let run = run_replay(&dir, &input, 32);
    assert_eq!(run.json["counters"]["rx_frames"].as_u64(), Some(2));
    assert_eq!(run.outputs["d1"].len(), 1);
    assert_eq!(run.outputs["d2"].len(), 1);
    assert_forwarded(
        "pcapng d1",
        &input_ip(&frames[0]),
        &decode(&run.outputs["d1"][0]).ip,
    );
    assert_forwarded(
        "pcapng d2",
        &input_ip(&frames[1]),
        &decode(&run.outputs["d2"][0]).ip,
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `replay --trace` over the whole corpus: one record per frame, in
/// order, whose verdict and reason are the case's, each naming the stages
/// it went through, the last being the one that decided: forwarded and
/// fragmented frames every stage up to forward, drops with their reason
/// at the stage that found it.
#[test]
fn a_trace_of_the_corpus_names_the_stages_and_reasons() {
    let cases = build_cases();
    let dir = tmpdir("trace");
    let input = dir.join("input.pcap");
    write_pcap(
        &input,
        &cases.iter().map(|c| c.frame.clone()).collect::<Vec<_>>(),
    );
    let res = Command::new(env!("CARGO_BIN_EXE_fastfwd"))
        .args(["replay", "--config"])
        .arg(fixture())
        .arg("--in")
        .arg(format!("d0={}", input.display()))
        .arg("--out")
        .arg(dir.join("out"))
        .args(["--json", "--trace"])
        .output()
        .unwrap();
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&res.stdout).unwrap();
    let trace = json["trace"].as_array().expect("a trace in the report");
    assert_eq!(trace.len(), cases.len());
    let stage_names = |p: &serde_json::Value| -> Vec<String> {
        p["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["stage"].as_str().unwrap().to_string())
            .collect()
    };
    for (i, (c, p)) in cases.iter().zip(trace).enumerate() {
        assert_eq!(p["seq"], i as u64, "{}", c.name);
        assert_eq!(p["length"], c.frame.len() as u64, "{}", c.name);
        let stages = stage_names(p);
        let (verdict, detail) = (p["verdict"].as_str().unwrap(), p["detail"].as_str());
        match &c.expect {
            Expect::Forward { .. } => {
                assert_eq!(verdict, "forward", "{}: {p}", c.name);
                assert_eq!(
                    stages.first().map(String::as_str),
                    Some("input"),
                    "{}",
                    c.name
                );
                assert!(
                    stages.ends_with(&["lookup".into(), "next_hop".into(), "forward".into()]),
                    "{}: {stages:?}",
                    c.name
                );
                assert!(
                    p["route"].is_string() && p["next_hop"].is_string(),
                    "{}: {p}",
                    c.name
                );
            }
            Expect::Fragments { .. } => {
                assert_eq!(verdict, "consumed", "{}: {p}", c.name);
                assert_eq!(
                    stages.last().map(String::as_str),
                    Some("forward"),
                    "{}",
                    c.name
                );
            }
            Expect::IcmpError { reason, .. }
            | Expect::Drop(reason)
            | Expect::DropSuppressed(reason) => {
                assert_eq!(
                    (verdict, detail),
                    ("drop", Some(*reason)),
                    "{}: {p}",
                    c.name
                );
                let last = p["stages"].as_array().unwrap().last().unwrap();
                assert!(
                    last["decision"].as_str().unwrap().contains(reason),
                    "{}: the deciding stage names {reason}: {p}",
                    c.name
                );
            }
            Expect::Punt(reason) => {
                assert_eq!(
                    (verdict, detail),
                    ("punt", Some(*reason)),
                    "{}: {p}",
                    c.name
                );
                // For the host at input; a neighbour miss once forwarding.
                let want: &[&str] = if *reason == "neighbour_miss" {
                    &["input", "lookup", "next_hop", "forward"]
                } else {
                    &["input"]
                };
                assert_eq!(stages, want, "{}", c.name);
            }
        }
    }
    // The text form, and a filter.
    let res = Command::new(env!("CARGO_BIN_EXE_fastfwd"))
        .args(["replay", "--config"])
        .arg(fixture())
        .arg("--in")
        .arg(format!("d0={}", input.display()))
        .arg("--out")
        .arg(dir.join("out2"))
        .args([
            "--trace",
            "2",
            "--trace-filter",
            "udp and dst net 198.19.0.0/16",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&res.stdout).into_owned();
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    let traced = text.lines().filter(|l| l.starts_with("packet ")).count();
    assert_eq!(traced, 2, "{text}");
    assert!(text.contains("  input ") && text.contains("UDP"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}
