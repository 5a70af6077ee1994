//! A small router and packet builders shared by the pipeline's tests and
//! benchmark. Packets are built byte by byte here (not with the wire crate)
//! so the tests check the pipeline against an independent encoding.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use fib::RouteTable;
use fib::reference::{ReferenceFib4, ReferenceFib6};
use pipeline::*;

pub type RefTables = Tables<ReferenceFib4, ReferenceFib6>;

pub const MAC0: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub const MAC1: [u8; 6] = [0x02, 0, 0, 0, 1, 0x01];
pub const MAC1V: [u8; 6] = [0x02, 0, 0, 0, 1, 0x02];
pub const MAC2: [u8; 6] = [0x02, 0, 0, 0, 2, 0x01];
pub const PEER_GEN: [u8; 6] = [0x0a, 0, 0, 0, 0, 0x08];
pub const PEER_SINK: [u8; 6] = [0x0a, 0, 0, 0, 1, 0x08];
pub const PEER_V100: [u8; 6] = [0x0a, 0, 0, 1, 0, 0x02];
pub const PEER_ETH2: [u8; 6] = [0x0a, 0, 0, 2, 0, 0x02];
pub const HOST_50: [u8; 6] = [0x0a, 0, 0, 0, 1, 0x50];

pub fn v4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}
pub fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// Interfaces: 0 eth0 (port 0), 1 eth1 (port 1), 2 eth1.100 (port 1, VLAN
/// 100, MTU 1400), 3 eth2 (port 2, MTU 1280).
pub fn builder() -> (TablesBuilder, ReferenceFib4, ReferenceFib6) {
    let mut b = TablesBuilder::new();
    let i = |name: &str, port, vlan, mac, a4: &str, l4, a6: &str, l6, mtu| Interface {
        name: name.into(),
        port,
        vlan,
        mac: MacAddr(mac),
        ipv4: vec![Ipv4IfAddr {
            addr: v4(a4),
            prefix_len: l4,
        }],
        ipv6: vec![Ipv6IfAddr {
            addr: v6(a6),
            prefix_len: l6,
        }],
        mtu,
    };
    let eth0 = b
        .add_interface(i(
            "eth0",
            0,
            Vlan::Untagged,
            MAC0,
            "198.18.0.10",
            24,
            "2001:2::10",
            64,
            1500,
        ))
        .unwrap();
    let eth1 = b
        .add_interface(i(
            "eth1",
            1,
            Vlan::Untagged,
            MAC1,
            "198.19.0.10",
            24,
            "2001:2:0:8000::10",
            64,
            1500,
        ))
        .unwrap();
    let v100 = b
        .add_interface(i(
            "eth1.100",
            1,
            Vlan::Single(100),
            MAC1V,
            "10.100.0.1",
            24,
            "2001:db8:100::1",
            64,
            1400,
        ))
        .unwrap();
    let eth2 = b
        .add_interface(i(
            "eth2",
            2,
            Vlan::Untagged,
            MAC2,
            "10.2.0.1",
            24,
            "2001:db8:2::1",
            64,
            1280,
        ))
        .unwrap();
    let mut f4 = ReferenceFib4::new();
    let mut f6 = ReferenceFib6::new();
    b.install_connected_routes(&mut f4, &mut f6);
    let gw = |b: &mut TablesBuilder, hops: &[(InterfaceId, &str)]| {
        let hops: Vec<NextHop> = hops
            .iter()
            .map(|&(interface, g)| NextHop {
                interface,
                gateway: Some(g.parse().unwrap()),
            })
            .collect();
        b.add_next_hops(&hops).unwrap()
    };
    let to_gen = gw(&mut b, &[(eth0, "198.18.0.108")]);
    f4.insert("198.18.0.0/15".parse().unwrap(), to_gen);
    let to_sink = gw(&mut b, &[(eth1, "198.19.0.108")]);
    f4.insert("198.19.0.0/16".parse().unwrap(), to_sink);
    let ecmp = gw(
        &mut b,
        &[
            (eth1, "198.19.0.108"),
            (v100, "10.100.0.2"),
            (eth2, "10.2.0.2"),
        ],
    );
    f4.insert("203.0.113.0/24".parse().unwrap(), ecmp);
    let small_mtu = gw(&mut b, &[(eth2, "10.2.0.2")]);
    f4.insert("192.0.2.0/24".parse().unwrap(), small_mtu);
    let vlan = gw(&mut b, &[(v100, "10.100.0.2")]);
    f4.insert("172.16.0.0/12".parse().unwrap(), vlan);
    let unresolved = gw(&mut b, &[(eth1, "198.19.0.99")]);
    f4.insert("100.64.0.0/10".parse().unwrap(), unresolved);

    let to_gen6 = gw(&mut b, &[(eth0, "2001:2::108")]);
    f6.insert("2001:2::/49".parse().unwrap(), to_gen6);
    let to_sink6 = gw(&mut b, &[(eth1, "2001:2:0:8000::108")]);
    f6.insert("2001:2:0:8000::/49".parse().unwrap(), to_sink6);
    let ecmp6 = gw(
        &mut b,
        &[(eth1, "2001:2:0:8000::108"), (v100, "2001:db8:100::2")],
    );
    f6.insert("2001:db8:ecc::/48".parse().unwrap(), ecmp6);
    let small6 = gw(&mut b, &[(eth2, "2001:db8:2::2")]);
    f6.insert("2001:db8:1280::/48".parse().unwrap(), small6);
    let vlan6 = gw(&mut b, &[(v100, "2001:db8:100::2")]);
    f6.insert("2001:db8:f00::/48".parse().unwrap(), vlan6);

    let n = |b: &mut TablesBuilder, i, ip: &str, mac| {
        b.add_neighbour(i, ip.parse().unwrap(), MacAddr(mac))
            .unwrap()
    };
    n(&mut b, eth0, "198.18.0.108", PEER_GEN);
    n(&mut b, eth0, "2001:2::108", PEER_GEN);
    n(&mut b, eth1, "198.19.0.108", PEER_SINK);
    n(&mut b, eth1, "2001:2:0:8000::108", PEER_SINK);
    n(&mut b, eth1, "198.19.0.50", HOST_50);
    n(&mut b, v100, "10.100.0.2", PEER_V100);
    n(&mut b, v100, "2001:db8:100::2", PEER_V100);
    n(&mut b, eth2, "10.2.0.2", PEER_ETH2);
    n(&mut b, eth2, "2001:db8:2::2", PEER_ETH2);
    (b, f4, f6)
}

pub fn router() -> RefTables {
    let (b, f4, f6) = builder();
    b.build(f4, f6)
}

/// RFC 1071 checksum written independently of the crates under test.
pub fn csum(data: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from(c[0]) << 8
        };
        s += u32::from(w);
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
    }
    !(s as u16)
}

#[derive(Debug, Clone)]
pub struct Ipv4Spec {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub ttl: u8,
    pub protocol: u8,
    pub df: bool,
    pub mf: bool,
    pub frag_offset: u16,
    pub id: u16,
    pub tos: u8,
    pub options: Vec<u8>,
    pub payload: Vec<u8>,
}

impl Ipv4Spec {
    pub fn udp(src: &str, dst: &str, sport: u16, dport: u16, len: usize) -> Self {
        let mut payload = vec![0u8; len.max(8)];
        payload[0..2].copy_from_slice(&sport.to_be_bytes());
        payload[2..4].copy_from_slice(&dport.to_be_bytes());
        let l = payload.len() as u16;
        payload[4..6].copy_from_slice(&l.to_be_bytes());
        for (i, b) in payload.iter_mut().enumerate().skip(8) {
            *b = i as u8;
        }
        Self {
            src: v4(src),
            dst: v4(dst),
            ttl: 64,
            protocol: 17,
            df: false,
            mf: false,
            frag_offset: 0,
            id: 0x1234,
            tos: 0,
            options: vec![],
            payload,
        }
    }

    pub fn bytes(&self) -> Vec<u8> {
        let ihl = 20 + self.options.len();
        assert!(ihl.is_multiple_of(4) && ihl <= 60);
        let total = ihl + self.payload.len();
        let mut h = vec![0u8; total];
        h[0] = 0x40 | (ihl / 4) as u8;
        h[1] = self.tos;
        h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        h[4..6].copy_from_slice(&self.id.to_be_bytes());
        let flags = (u16::from(self.df) << 14) | (u16::from(self.mf) << 13) | self.frag_offset;
        h[6..8].copy_from_slice(&flags.to_be_bytes());
        h[8] = self.ttl;
        h[9] = self.protocol;
        h[12..16].copy_from_slice(&self.src.octets());
        h[16..20].copy_from_slice(&self.dst.octets());
        h[20..ihl].copy_from_slice(&self.options);
        let c = csum(&h[..ihl]);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h[ihl..].copy_from_slice(&self.payload);
        h
    }
}

pub fn ipv6(src: &str, dst: &str, hop: u8, next: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0u8; 40 + payload.len()];
    h[0] = 0x60;
    h[1] = 0x0a; // some traffic class / flow label bits to carry through
    h[3] = 0x42;
    h[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
    h[6] = next;
    h[7] = hop;
    h[8..24].copy_from_slice(&v6(src).octets());
    h[24..40].copy_from_slice(&v6(dst).octets());
    h[40..].copy_from_slice(payload);
    h
}

pub fn udp_payload(sport: u16, dport: u16, len: usize) -> Vec<u8> {
    let mut p = vec![0x5a; len.max(8)];
    p[0..2].copy_from_slice(&sport.to_be_bytes());
    p[2..4].copy_from_slice(&dport.to_be_bytes());
    let l = p.len() as u16;
    p[4..6].copy_from_slice(&l.to_be_bytes());
    p[6..8].fill(0);
    p
}

pub fn eth(dst: [u8; 6], src: [u8; 6], vlan: Option<u16>, ethertype: u16, l3: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(18 + l3.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    if let Some(v) = vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(l3);
    f
}

pub fn eth4(dst: [u8; 6], l3: &[u8]) -> Vec<u8> {
    eth(dst, PEER_GEN, None, 0x0800, l3)
}

pub fn eth6(dst: [u8; 6], l3: &[u8]) -> Vec<u8> {
    eth(dst, PEER_GEN, None, 0x86dd, l3)
}

/// The outcome of one frame through a fresh worker.
#[derive(Debug)]
pub struct Outcome {
    pub verdict: Verdict,
    pub frame: Vec<u8>,
    pub generated: Vec<(PortId, InterfaceId, Vec<u8>)>,
    pub misses: Vec<(InterfaceId, IpAddr)>,
    pub counters: Counters,
}

pub fn run_with<A: Acl>(
    worker: &mut Worker,
    tables: &Tables<ReferenceFib4, ReferenceFib6, A>,
    now: u64,
    port: PortId,
    frame: &[u8],
    headroom: usize,
) -> Outcome {
    let mut buf = vec![0u8; headroom + frame.len() + 64];
    buf[headroom..headroom + frame.len()].copy_from_slice(frame);
    let mut frames = [Frame::new(&mut buf, headroom, frame.len())];
    let out = worker.process(tables, now, port, &mut frames);
    let verdict = out.verdicts()[0];
    let generated = out
        .generated()
        .map(|(p, i, b)| (p, i, b.to_vec()))
        .collect();
    let misses = out.neighbour_misses().to_vec();
    Outcome {
        verdict,
        frame: frames[0].data().to_vec(),
        generated,
        misses,
        counters: worker.counters().clone(),
    }
}

/// [`run`] on port 0 with `headroom` bytes before the frame.
pub fn run_at<A: Acl>(
    tables: &Tables<ReferenceFib4, ReferenceFib6, A>,
    frame: &[u8],
    headroom: usize,
) -> Outcome {
    run_with(
        &mut Worker::new(WorkerConfig::default()),
        tables,
        0,
        0,
        frame,
        headroom,
    )
}

pub fn run(tables: &RefTables, port: PortId, frame: &[u8]) -> Outcome {
    run_with(
        &mut Worker::new(WorkerConfig::default()),
        tables,
        0,
        port,
        frame,
        HEADROOM,
    )
}
