//! Scenario tests: one frame (or a few) through the whole pipeline, the
//! output decoded with etherparse and checked field by field.

mod support;

use etherparse::{Ethernet2Header, Ipv4Header, Ipv6Header, SlicedPacket, VlanSlice};
use fib::{Lookup, RouteTable};
use pipeline::*;
use support::*;

fn ipv4_of(frame: &[u8], l2: usize) -> (Ipv4Header, Vec<u8>) {
    let (h, rest) = Ipv4Header::from_slice(&frame[l2..]).expect("valid IPv4 header");
    (h, rest.to_vec())
}

#[test]
fn forwards_ipv4_with_ttl_checksum_and_macs() {
    let t = router();
    let pkt = Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1000, 2000, 30).bytes();
    let o = run(&t, 0, &eth4(MAC0, &pkt));
    assert_eq!(
        o.verdict,
        Verdict::Forward {
            interface: 1,
            port: 1
        }
    );
    let (eth, _) = Ethernet2Header::from_slice(&o.frame).unwrap();
    assert_eq!(eth.destination, PEER_SINK);
    assert_eq!(eth.source, MAC1);
    assert_eq!(eth.ether_type.0, 0x0800);
    let (h, payload) = ipv4_of(&o.frame, 14);
    assert_eq!(h.time_to_live, 63);
    assert_eq!(h.header_checksum, h.calc_header_checksum());
    assert_eq!(payload, pkt[20..]);
    assert_eq!(o.frame.len(), 14 + pkt.len());
    assert_eq!(o.counters.forwarded_ipv4, 1);
    assert_eq!(o.counters.interfaces[0].rx_packets, 1);
    assert_eq!(o.counters.interfaces[1].tx_packets, 1);
    assert_eq!(o.counters.interfaces[1].tx_bytes, o.frame.len() as u64);
}

#[test]
fn forwards_ipv6_with_hop_limit_and_macs() {
    let t = router();
    let pkt = ipv6(
        "2001:2::108",
        "2001:2:0:9000::99",
        64,
        17,
        &udp_payload(1, 2, 20),
    );
    let o = run(&t, 0, &eth6(MAC0, &pkt));
    assert_eq!(
        o.verdict,
        Verdict::Forward {
            interface: 1,
            port: 1
        }
    );
    let (eth, rest) = Ethernet2Header::from_slice(&o.frame).unwrap();
    assert_eq!(
        (eth.destination, eth.source, eth.ether_type.0),
        (PEER_SINK, MAC1, 0x86dd)
    );
    let (h, _) = Ipv6Header::from_slice(rest).unwrap();
    assert_eq!(h.hop_limit, 63);
    let mut expect = pkt.clone();
    expect[7] = 63;
    assert_eq!(rest, &expect[..]);
    assert_eq!(o.counters.forwarded_ipv6, 1);
}

/// IPv6 to a gateway behind a tagged interface: the precomputed header
/// carries the tag and takes the IPv6 EtherType after it, with headroom
/// for the longer header and without (the general path moves the packet).
#[test]
fn ipv6_to_a_tagged_gateway_gets_the_tag_and_its_ethertype() {
    let t = router();
    let pkt = ipv6(
        "2001:2::108",
        "2001:db8:f00::77",
        64,
        17,
        &udp_payload(1, 2, 20),
    );
    for headroom in [HEADROOM, 0] {
        let o = run_at(&t, &eth6(MAC0, &pkt), headroom);
        assert_eq!(
            o.verdict,
            Verdict::Forward {
                interface: 2,
                port: 1
            },
            "headroom {headroom}"
        );
        assert_eq!(&o.frame[..6], &PEER_V100);
        assert_eq!(&o.frame[6..12], &MAC1V);
        assert_eq!(o.frame[12..14], [0x81, 0x00]);
        assert_eq!(u16::from_be_bytes([o.frame[14], o.frame[15]]) & 0x0fff, 100);
        assert_eq!(o.frame[16..18], [0x86, 0xdd]);
        let mut expect = pkt.clone();
        expect[7] = 63;
        assert_eq!(&o.frame[18..], &expect[..]);
        assert_eq!(o.counters.interfaces[2].tx_bytes, o.frame.len() as u64);
    }
}

/// Both families to a gateway behind a double-tagged (802.1ad) interface:
/// two tags, then the family's EtherType, through the precomputed header
/// (headroom for the 8 extra bytes) and the general path (none).
#[test]
fn both_families_to_a_qinq_gateway_get_both_tags() {
    const MAC_QINQ: [u8; 6] = [0x02, 0, 0, 0, 2, 0x07];
    const PEER_QINQ: [u8; 6] = [0x0a, 0, 0, 2, 7, 0x02];
    let (mut b, mut f4, mut f6) = builder();
    let qinq = b
        .add_interface(Interface {
            name: "eth2.300.7".into(),
            port: 2,
            vlan: Vlan::Double {
                outer: 300,
                inner: 7,
            },
            mac: MacAddr(MAC_QINQ),
            ipv4: vec![Ipv4IfAddr {
                addr: "10.37.0.1".parse().unwrap(),
                prefix_len: 24,
            }],
            ipv6: vec![Ipv6IfAddr {
                addr: "2001:db8:37::1".parse().unwrap(),
                prefix_len: 64,
            }],
            mtu: 1500,
        })
        .unwrap();
    let gw = |b: &mut TablesBuilder, g: &str| {
        b.add_next_hops(&[NextHop {
            interface: qinq,
            gateway: Some(g.parse().unwrap()),
        }])
        .unwrap()
    };
    let v4 = gw(&mut b, "10.37.0.2");
    f4.insert("198.51.100.0/24".parse().unwrap(), v4);
    let v6 = gw(&mut b, "2001:db8:37::2");
    f6.insert("2001:db8:3700::/40".parse().unwrap(), v6);
    for g in ["10.37.0.2", "2001:db8:37::2"] {
        b.add_neighbour(qinq, g.parse().unwrap(), MacAddr(PEER_QINQ))
            .unwrap();
    }
    let t = b.build(f4, f6);
    let pkt4 = Ipv4Spec::udp("198.18.0.108", "198.51.100.9", 1, 2, 20).bytes();
    let pkt6 = ipv6(
        "2001:2::108",
        "2001:db8:3700::9",
        64,
        17,
        &udp_payload(1, 2, 20),
    );
    for (frame, pkt, ethertype) in [
        (eth4(MAC0, &pkt4), &pkt4, [0x08, 0x00]),
        (eth6(MAC0, &pkt6), &pkt6, [0x86, 0xdd]),
    ] {
        for headroom in [HEADROOM, 0] {
            let o = run_at(&t, &frame, headroom);
            assert_eq!(
                o.verdict,
                Verdict::Forward {
                    interface: qinq,
                    port: 2
                },
                "headroom {headroom}"
            );
            let f = &o.frame;
            assert_eq!(&f[..6], &PEER_QINQ);
            assert_eq!(&f[6..12], &MAC_QINQ);
            assert_eq!(f[12..14], [0x88, 0xa8]);
            assert_eq!(u16::from_be_bytes([f[14], f[15]]) & 0x0fff, 300);
            assert_eq!(f[16..18], [0x81, 0x00]);
            assert_eq!(u16::from_be_bytes([f[18], f[19]]) & 0x0fff, 7);
            assert_eq!(f[20..22], ethertype);
            assert_eq!(f.len(), 22 + pkt.len());
            if ethertype == [0x08, 0x00] {
                let (h, _) = ipv4_of(f, 22);
                assert_eq!(h.time_to_live, 63);
                assert_eq!(h.header_checksum, h.calc_header_checksum());
            } else {
                let mut expect = pkt.clone();
                expect[7] = 63;
                assert_eq!(&f[22..], &expect[..]);
            }
        }
    }
}

#[test]
fn ethernet_padding_is_not_forwarded() {
    let t = router();
    let pkt = Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1, 2, 8).bytes();
    let mut f = eth4(MAC0, &pkt);
    f.resize(60, 0xee);
    let o = run(&t, 0, &f);
    assert!(matches!(o.verdict, Verdict::Forward { .. }));
    assert_eq!(o.frame.len(), 14 + 28);
}

#[test]
fn vlan_in_untagged_out_and_untagged_in_tagged_out() {
    let t = router();
    // Tagged on port 1 VLAN 100 -> gen side (untagged eth0).
    let pkt = Ipv4Spec::udp("10.100.0.2", "198.18.5.5", 1, 2, 20).bytes();
    let o = run(&t, 1, &eth(MAC1V, PEER_V100, Some(100), 0x0800, &pkt));
    assert_eq!(
        o.verdict,
        Verdict::Forward {
            interface: 0,
            port: 0
        }
    );
    let s = SlicedPacket::from_ethernet(&o.frame).unwrap();
    assert!(s.vlan().is_none());
    assert_eq!(o.frame.len(), 14 + pkt.len());

    // Untagged on eth0 -> 172.16/12 via eth1.100: a tag is pushed, with
    // headroom and without (the packet moves into the tailroom).
    for headroom in [HEADROOM, 0] {
        let pkt = Ipv4Spec::udp("198.18.0.108", "172.16.0.9", 1, 2, 20).bytes();
        let o = run_at(&t, &eth4(MAC0, &pkt), headroom);
        assert_eq!(
            o.verdict,
            Verdict::Forward {
                interface: 2,
                port: 1
            }
        );
        let s = SlicedPacket::from_ethernet(&o.frame).unwrap();
        match s.vlan() {
            Some(VlanSlice::SingleVlan(v)) => assert_eq!(v.vlan_identifier().value(), 100),
            other => panic!("expected one tag, got {other:?}"),
        }
        assert_eq!(&o.frame[..6], &PEER_V100);
        assert_eq!(&o.frame[6..12], &MAC1V);
        assert_eq!(o.frame.len(), 18 + pkt.len());
        let (h, _) = ipv4_of(&o.frame, 18);
        assert_eq!(h.time_to_live, 63);
        assert_eq!(h.header_checksum, h.calc_header_checksum());
    }
}

#[test]
fn unknown_vlan_unknown_port_other_mac_unknown_ethertype() {
    let t = router();
    let pkt = Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1, 2, 20).bytes();
    let drop = |port, f: &[u8]| run(&t, port, f).verdict;
    assert_eq!(
        drop(0, &eth(MAC0, PEER_GEN, Some(7), 0x0800, &pkt)),
        Verdict::Drop(DropReason::UnknownInterface)
    );
    assert_eq!(
        drop(9, &eth4(MAC0, &pkt)),
        Verdict::Drop(DropReason::UnknownInterface)
    );
    assert_eq!(
        drop(0, &eth4([0x02, 9, 9, 9, 9, 9], &pkt)),
        Verdict::Drop(DropReason::NotOurMac)
    );
    assert_eq!(
        drop(0, &eth(MAC0, PEER_GEN, None, 0x88cc, &pkt)),
        Verdict::Drop(DropReason::UnknownEthertype)
    );
    // Right MAC but of another interface.
    assert_eq!(
        drop(0, &eth4(MAC1, &pkt)),
        Verdict::Drop(DropReason::NotOurMac)
    );
    let o = run(&t, 0, &eth4([0x02, 9, 9, 9, 9, 9], &pkt));
    assert_eq!(o.counters.drop_count(DropReason::NotOurMac), 1);
    assert_eq!(o.counters.interfaces[0].rx_dropped, 1);
}

#[test]
fn truncated_at_every_header_boundary() {
    let t = router();
    let pkt = Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1, 2, 20).bytes();
    let f = eth4(MAC0, &pkt);
    for len in 0..f.len() {
        let want = if len < 14 {
            DropReason::FrameTooShort
        } else {
            DropReason::Ipv4Truncated
        };
        assert_eq!(
            run(&t, 0, &f[..len]).verdict,
            Verdict::Drop(want),
            "len {len}"
        );
    }
    let pkt6 = ipv6(
        "2001:2::108",
        "2001:2:0:9000::99",
        64,
        17,
        &udp_payload(1, 2, 20),
    );
    let f = eth6(MAC0, &pkt6);
    for len in 14..f.len() {
        assert_eq!(
            run(&t, 0, &f[..len]).verdict,
            Verdict::Drop(DropReason::Ipv6Truncated),
            "len {len}"
        );
    }
    let f = eth(MAC0, PEER_GEN, Some(100), 0x0800, &pkt);
    for len in 14..18 {
        assert_eq!(
            run(&t, 1, &f[..len]).verdict,
            Verdict::Drop(DropReason::FrameTooShort),
            "len {len}"
        );
    }
}

#[test]
fn bad_ipv4_headers_are_dropped_by_reason() {
    let t = router();
    let good = Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1, 2, 20).bytes();
    type Mutation = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(Mutation, DropReason)> = vec![
        (Box::new(|p| p[11] ^= 0xff), DropReason::Ipv4BadChecksum),
        (Box::new(|p| p[0] = 0x44), DropReason::Ipv4BadHeaderLength),
        (Box::new(|p| p[0] = 0x55), DropReason::Ipv4BadVersion),
        (
            Box::new(|p| p[2..4].copy_from_slice(&10u16.to_be_bytes())),
            DropReason::Ipv4BadTotalLength,
        ),
        (
            Box::new(|p| p[2..4].copy_from_slice(&500u16.to_be_bytes())),
            DropReason::Ipv4Truncated,
        ),
    ];
    for (mutate, reason) in cases {
        let mut p = good.clone();
        mutate(&mut p);
        let o = run(&t, 0, &eth4(MAC0, &p));
        assert_eq!(o.verdict, Verdict::Drop(reason));
        assert_eq!(o.counters.drop_count(reason), 1);
    }
}

#[test]
fn ipv4_options_are_forwarded_untouched() {
    let t = router();
    let mut s = Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1, 2, 20);
    s.options = vec![7, 7, 4, 0, 0, 0, 0, 1]; // record route + NOP
    let pkt = s.bytes();
    let o = run(&t, 0, &eth4(MAC0, &pkt));
    assert!(matches!(o.verdict, Verdict::Forward { .. }));
    let (h, _) = ipv4_of(&o.frame, 14);
    assert_eq!(h.options.as_slice(), &s.options[..]);
    assert_eq!(h.header_checksum, h.calc_header_checksum());
}

#[test]
fn malformed_ipv4_options_get_parameter_problem_with_the_pointer() {
    let t = router();
    // (options, pointer into the header): length past the header, length
    // below 2, no length octet.
    for (opts, ptr) in [
        (vec![1, 7, 9, 0], 22u8),
        (vec![68, 1, 0, 0], 21),
        (vec![1, 1, 1, 7], 23),
    ] {
        let mut s = Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1, 2, 20);
        s.options = opts.clone();
        let pkt = s.bytes();
        let o = run(&t, 0, &eth4(MAC0, &pkt));
        assert_eq!(
            o.verdict,
            Verdict::Drop(DropReason::Ipv4BadOptions),
            "{opts:?}"
        );
        let rest = check_icmp4(
            &o.generated[0].2,
            "198.18.0.10",
            "198.18.0.108",
            12,
            0,
            &pkt,
        );
        assert_eq!(rest, [ptr, 0, 0, 0], "pointer for {opts:?}");
    }
}

#[test]
fn martians() {
    let t = router();
    for (src, dst, reason) in [
        ("127.0.0.1", "198.19.1.1", DropReason::Ipv4MartianSource),
        ("0.1.2.3", "198.19.1.1", DropReason::Ipv4MartianSource),
        ("224.0.0.1", "198.19.1.1", DropReason::Ipv4MartianSource),
        ("240.0.0.1", "198.19.1.1", DropReason::Ipv4MartianSource),
        (
            "255.255.255.255",
            "198.19.1.1",
            DropReason::Ipv4MartianSource,
        ),
        (
            "198.18.0.108",
            "127.0.0.1",
            DropReason::Ipv4MartianDestination,
        ),
        (
            "198.18.0.108",
            "0.0.0.9",
            DropReason::Ipv4MartianDestination,
        ),
        (
            "198.18.0.108",
            "250.1.1.1",
            DropReason::Ipv4MartianDestination,
        ),
        ("198.18.0.108", "239.1.1.1", DropReason::MulticastNotRouted),
    ] {
        let pkt = Ipv4Spec::udp(src, dst, 1, 2, 20).bytes();
        assert_eq!(
            run(&t, 0, &eth4(MAC0, &pkt)).verdict,
            Verdict::Drop(reason),
            "{src} -> {dst}"
        );
    }
    for (src, dst, reason) in [
        ("ff02::1", "2001:2:0:8000::1", DropReason::Ipv6MartianSource),
        ("::1", "2001:2:0:8000::1", DropReason::Ipv6MartianSource),
        ("::", "2001:2:0:8000::1", DropReason::Ipv6MartianSource),
        (
            "::ffff:1.2.3.4",
            "2001:2:0:8000::1",
            DropReason::Ipv6MartianSource,
        ),
        ("2001:2::108", "::1", DropReason::Ipv6MartianDestination),
        ("fe80::1", "2001:2:0:8000::1", DropReason::Ipv6LinkLocal),
        ("2001:2::108", "fe80::1", DropReason::Ipv6LinkLocal),
        ("2001:2::108", "ff0e::1", DropReason::MulticastNotRouted),
    ] {
        let pkt = ipv6(src, dst, 64, 17, &udp_payload(1, 2, 8));
        assert_eq!(
            run(&t, 0, &eth6(MAC0, &pkt)).verdict,
            Verdict::Drop(reason),
            "{src} -> {dst}"
        );
    }
}

#[test]
fn local_delivery_goes_to_punt() {
    let t = router();
    let mut echo = Ipv4Spec::udp("198.18.0.108", "198.18.0.10", 0, 0, 16);
    echo.protocol = 1;
    echo.payload[0] = 8; // echo request
    echo.ttl = 1; // TTL does not matter for the router itself
    let f = eth4(MAC0, &echo.bytes());
    let o = run(&t, 0, &f);
    assert_eq!(o.verdict, Verdict::Punt(PuntReason::LocalAddress));
    assert_eq!(o.frame, f, "punted frames are unchanged");
    // Address of another interface (weak host model).
    let p = Ipv4Spec::udp("198.18.0.108", "10.2.0.1", 1, 2, 8).bytes();
    assert_eq!(
        run(&t, 0, &eth4(MAC0, &p)).verdict,
        Verdict::Punt(PuntReason::LocalAddress)
    );
    for dst in ["255.255.255.255", "198.18.0.255"] {
        let p = Ipv4Spec::udp("198.18.0.108", dst, 1, 2, 8).bytes();
        assert_eq!(
            run(&t, 0, &eth4([0xff; 6], &p)).verdict,
            Verdict::Punt(PuntReason::Broadcast),
            "{dst}"
        );
    }
    let p = Ipv4Spec::udp("198.18.0.108", "224.0.0.5", 1, 2, 8).bytes();
    assert_eq!(
        run(&t, 0, &eth4([1, 0, 0x5e, 0, 0, 5], &p)).verdict,
        Verdict::Punt(PuntReason::Multicast)
    );
    let p = Ipv4Spec::udp("0.0.0.0", "255.255.255.255", 68, 67, 8).bytes();
    assert_eq!(
        run(&t, 0, &eth4([0xff; 6], &p)).verdict,
        Verdict::Punt(PuntReason::Broadcast)
    );
    // IPv6: own address, ND to solicited-node multicast, subnet-router anycast.
    let p = ipv6(
        "2001:2::108",
        "2001:2::10",
        64,
        58,
        &[128, 0, 0, 0, 0, 1, 0, 1],
    );
    assert_eq!(
        run(&t, 0, &eth6(MAC0, &p)).verdict,
        Verdict::Punt(PuntReason::LocalAddress)
    );
    let p = ipv6(
        "2001:2::108",
        "ff02::1:ff00:10",
        255,
        58,
        &[135, 0, 0, 0, 0, 0, 0, 0],
    );
    assert_eq!(
        run(&t, 0, &eth6([0x33, 0x33, 0xff, 0, 0, 0x10], &p)).verdict,
        Verdict::Punt(PuntReason::Multicast)
    );
    let p = ipv6("2001:2::108", "2001:2::", 64, 17, &udp_payload(1, 2, 8));
    assert_eq!(
        run(&t, 0, &eth6(MAC0, &p)).verdict,
        Verdict::Punt(PuntReason::LocalAddress)
    );
}

#[test]
fn l2_broadcast_is_not_forwarded() {
    let t = router();
    let p = Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1, 2, 8).bytes();
    assert_eq!(
        run(&t, 0, &eth4([0xff; 6], &p)).verdict,
        Verdict::Drop(DropReason::L2BroadcastNotForwarded)
    );
}

fn arp(op: u16, spa: &str, tpa: &str) -> Vec<u8> {
    let mut a = vec![0, 1, 8, 0, 6, 4];
    a.extend_from_slice(&op.to_be_bytes());
    a.extend_from_slice(&PEER_GEN);
    a.extend_from_slice(&v4(spa).octets());
    a.extend_from_slice(&[0; 6]);
    a.extend_from_slice(&v4(tpa).octets());
    eth([0xff; 6], PEER_GEN, None, 0x0806, &a)
}

#[test]
fn arp_for_the_router_is_punted_others_dropped() {
    let t = router();
    assert_eq!(
        run(&t, 0, &arp(1, "198.18.0.108", "198.18.0.10")).verdict,
        Verdict::Punt(PuntReason::Arp)
    );
    assert_eq!(
        run(&t, 0, &arp(1, "198.18.0.108", "198.18.0.108")).verdict,
        Verdict::Punt(PuntReason::Arp)
    );
    assert_eq!(
        run(&t, 0, &arp(1, "198.18.0.108", "198.18.0.77")).verdict,
        Verdict::Drop(DropReason::ArpNotForUs)
    );
    let f = arp(1, "198.18.0.108", "198.18.0.10");
    assert_eq!(
        run(&t, 0, &f[..14 + 27]).verdict,
        Verdict::Drop(DropReason::ArpMalformed)
    );
}

/// Checks an ICMPv4 error: addresses, type/code, checksum, quote.
fn check_icmp4(generated: &[u8], from: &str, to: &str, ty: u8, code: u8, quoted: &[u8]) -> [u8; 4] {
    let (h, rest) = Ipv4Header::from_slice(&generated[14..]).unwrap();
    assert_eq!(h.header_checksum, h.calc_header_checksum());
    assert_eq!(h.source, v4(from).octets());
    assert_eq!(h.destination, v4(to).octets());
    assert_eq!(h.protocol.0, 1);
    assert!(usize::from(h.total_len) <= 576);
    assert_eq!((rest[0], rest[1]), (ty, code));
    assert_eq!(csum(rest), 0, "ICMP checksum verifies");
    let q = quoted.len().min(576 - 28);
    assert_eq!(&rest[8..], &quoted[..q]);
    [rest[4], rest[5], rest[6], rest[7]]
}

#[test]
fn ttl_expiry_sends_time_exceeded_from_the_ingress_address() {
    let t = router();
    for ttl in [0, 1] {
        let mut s = Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1, 2, 40);
        s.ttl = ttl;
        let pkt = s.bytes();
        let o = run(&t, 0, &eth4(MAC0, &pkt));
        assert_eq!(o.verdict, Verdict::Drop(DropReason::TtlExpired));
        assert_eq!(o.generated.len(), 1);
        let (port, iface, g) = &o.generated[0];
        assert_eq!((*port, *iface), (0, 0));
        assert_eq!(&g[..6], &PEER_GEN);
        assert_eq!(&g[6..12], &MAC0);
        check_icmp4(g, "198.18.0.10", "198.18.0.108", 11, 0, &pkt);
        assert_eq!(o.counters.icmp_sent, 1);
    }
}

#[test]
fn an_icmp_error_toward_an_unknown_neighbour_asks_for_it() {
    let t = router();
    // 198.18.0.77 is on eth0's subnet, its MAC unknown.
    let mut s = Ipv4Spec::udp("198.18.0.77", "198.19.1.1", 1, 2, 40);
    s.ttl = 1;
    let o = run(&t, 0, &eth4(MAC0, &s.bytes()));
    assert_eq!(o.verdict, Verdict::Drop(DropReason::TtlExpired));
    assert!(o.generated.is_empty(), "no way to send it yet");
    assert_eq!(o.counters.icmp_suppressed, 1);
    assert_eq!(
        suppressed(&o.counters, IcmpSuppressed::NeighbourUnresolved),
        1
    );
    assert_eq!(o.misses, vec![(0, "198.18.0.77".parse().unwrap())]);
    let p6 = ipv6(
        "2001:2::77",
        "2001:2:0:9000::99",
        1,
        17,
        &udp_payload(1, 2, 8),
    );
    let o = run(&t, 0, &eth6(MAC0, &p6));
    assert_eq!(o.verdict, Verdict::Drop(DropReason::HopLimitExpired));
    assert_eq!(o.misses, vec![(0, "2001:2::77".parse().unwrap())]);
}

#[test]
fn hop_limit_expiry_sends_icmpv6_time_exceeded() {
    let t = router();
    let pkt = ipv6(
        "2001:2::108",
        "2001:2:0:9000::99",
        1,
        17,
        &udp_payload(1, 2, 1400),
    );
    let o = run(&t, 0, &eth6(MAC0, &pkt));
    assert_eq!(o.verdict, Verdict::Drop(DropReason::HopLimitExpired));
    let (_, _, g) = &o.generated[0];
    let (h, rest) = Ipv6Header::from_slice(&g[14..]).unwrap();
    assert_eq!(h.source, v6("2001:2::10").octets());
    assert_eq!(h.destination, v6("2001:2::108").octets());
    assert_eq!(h.next_header.0, 58);
    assert_eq!(
        40 + rest.len(),
        1280,
        "quotes as much as fits in 1280 bytes"
    );
    assert_eq!((rest[0], rest[1]), (3, 0));
    // Checksum over the pseudo-header, computed independently.
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&h.source);
    pseudo.extend_from_slice(&h.destination);
    pseudo.extend_from_slice(&(rest.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    pseudo.extend_from_slice(rest);
    assert_eq!(csum(&pseudo), 0);
    assert_eq!(&rest[8..], &pkt[..1280 - 48]);
}

#[test]
fn no_route_sends_unreachable() {
    let t = router();
    let pkt = Ipv4Spec::udp("198.18.0.108", "8.8.8.8", 1, 2, 20).bytes();
    let o = run(&t, 0, &eth4(MAC0, &pkt));
    assert_eq!(o.verdict, Verdict::Drop(DropReason::NoRoute));
    check_icmp4(&o.generated[0].2, "198.18.0.10", "198.18.0.108", 3, 0, &pkt);
    let p6 = ipv6(
        "2001:2::108",
        "2001:db8:dead::1",
        64,
        17,
        &udp_payload(1, 2, 8),
    );
    let o = run(&t, 0, &eth6(MAC0, &p6));
    assert_eq!(o.verdict, Verdict::Drop(DropReason::NoRoute));
    assert_eq!(o.generated[0].2[14 + 40], 1);
}

#[test]
fn discard_routes_drop_by_reason_and_answer_as_the_kernel_does() {
    let (mut b, mut f4, mut f6) = builder();
    // More specific than 198.19.0.0/16 toward eth1: the discard must win.
    for (i, d) in [
        Discard::Blackhole,
        Discard::Unreachable,
        Discard::Prohibit,
        Discard::Throw,
    ]
    .into_iter()
    .enumerate()
    {
        let id = b.add_discard(d).unwrap();
        f4.insert(format!("198.19.{}.0/24", 10 + i).parse().unwrap(), id);
        f6.insert(
            format!("2001:2:0:8{:03x}::/64", 0x10 + i).parse().unwrap(),
            id,
        );
    }
    let t = b.build(f4, f6);
    // (reason, ICMP code or none, ICMPv6 code or none)
    let want = [
        (DropReason::RouteBlackhole, None, None),
        (DropReason::RouteUnreachable, Some(1), Some(0)),
        (DropReason::RouteProhibited, Some(13), Some(1)),
        (DropReason::NoRoute, Some(0), Some(0)),
    ];
    for (i, (reason, code4, code6)) in want.into_iter().enumerate() {
        let pkt = Ipv4Spec::udp("198.18.0.108", &format!("198.19.{}.7", 10 + i), 1, 2, 20).bytes();
        let o = run(&t, 0, &eth4(MAC0, &pkt));
        assert_eq!(o.verdict, Verdict::Drop(reason), "v4 {i}");
        assert_eq!(o.counters.drop_count(reason), 1);
        match code4 {
            None => assert!(o.generated.is_empty(), "a blackhole answers nothing"),
            Some(c) => {
                check_icmp4(&o.generated[0].2, "198.18.0.10", "198.18.0.108", 3, c, &pkt);
            }
        }
        let p6 = ipv6(
            "2001:2::108",
            &format!("2001:2:0:8{:03x}::7", 0x10 + i),
            64,
            17,
            &udp_payload(1, 2, 8),
        );
        let o = run(&t, 0, &eth6(MAC0, &p6));
        assert_eq!(o.verdict, Verdict::Drop(reason), "v6 {i}");
        match code6 {
            None => assert!(o.generated.is_empty()),
            Some(c) => {
                let g = &o.generated[0].2;
                assert_eq!((g[14 + 40], g[14 + 41]), (1, c), "ICMPv6 type/code");
            }
        }
    }
    // The covering route still forwards outside the discarded /24.
    let pkt = Ipv4Spec::udp("198.18.0.108", "198.19.9.7", 1, 2, 20).bytes();
    assert!(matches!(
        run(&t, 0, &eth4(MAC0, &pkt)).verdict,
        Verdict::Forward { .. }
    ));
    // The targets read back as they were added.
    let id = t.fib4.lookup(u32::from(v4("198.19.12.1"))).unwrap();
    assert_eq!(t.target(id), Some(&RouteTarget::Discard(Discard::Prohibit)));
    assert_eq!(t.next_hops(id), Some(&[][..]));
}

#[test]
fn df_above_mtu_sends_fragmentation_needed_with_mtu() {
    let t = router();
    let mut s = Ipv4Spec::udp("198.18.0.108", "192.0.2.7", 1, 2, 1400);
    s.df = true;
    let pkt = s.bytes();
    let o = run(&t, 0, &eth4(MAC0, &pkt));
    assert_eq!(o.verdict, Verdict::Drop(DropReason::FragmentationNeeded));
    let rest = check_icmp4(&o.generated[0].2, "198.18.0.10", "198.18.0.108", 3, 4, &pkt);
    assert_eq!(
        u16::from_be_bytes([rest[2], rest[3]]),
        1280,
        "next-hop MTU (RFC 1191)"
    );
    // At exactly the MTU it passes.
    let mut s = Ipv4Spec::udp("198.18.0.108", "192.0.2.7", 1, 2, 1280 - 20);
    s.df = true;
    assert!(matches!(
        run(&t, 0, &eth4(MAC0, &s.bytes())).verdict,
        Verdict::Forward { .. }
    ));
}

#[test]
fn ipv6_above_mtu_sends_packet_too_big() {
    let t = router();
    let pkt = ipv6(
        "2001:2::108",
        "2001:db8:1280::1",
        64,
        17,
        &udp_payload(1, 2, 1300),
    );
    let o = run(&t, 0, &eth6(MAC0, &pkt));
    assert_eq!(o.verdict, Verdict::Drop(DropReason::PacketTooBig));
    let g = &o.generated[0].2;
    assert_eq!((g[14 + 40], g[14 + 41]), (2, 0));
    assert_eq!(u32::from_be_bytes([g[58], g[59], g[60], g[61]]), 1280);
}

/// Reassembles IPv4 fragments (RFC 791 §3.2, simplified: one datagram).
fn reassemble(frags: &[Vec<u8>]) -> (Vec<u8>, Vec<Ipv4Header>) {
    let mut data = vec![];
    let mut headers = vec![];
    let mut parts: Vec<(usize, Vec<u8>, bool)> = frags
        .iter()
        .map(|f| {
            let (h, rest) = Ipv4Header::from_slice(&f[14..]).unwrap();
            assert_eq!(h.header_checksum, h.calc_header_checksum());
            let p = (
                usize::from(h.fragment_offset.value()) * 8,
                rest.to_vec(),
                h.more_fragments,
            );
            headers.push(h);
            p
        })
        .collect();
    parts.sort_by_key(|p| p.0);
    for (off, bytes, _) in &parts {
        assert_eq!(*off, data.len(), "fragments are contiguous");
        data.extend_from_slice(bytes);
    }
    assert!(!parts.last().unwrap().2, "last fragment has MF clear");
    (data, headers)
}

#[test]
fn non_df_above_mtu_is_fragmented_and_reassembles() {
    let t = router();
    let mut s = Ipv4Spec::udp("198.18.0.108", "192.0.2.7", 1, 2, 3000);
    // Options: LSRR-like copied option (0x83) and record route (not copied).
    s.options = vec![0x83, 3, 4, 7, 3, 4, 1, 0];
    let pkt = s.bytes();
    let o = run(&t, 0, &eth4(MAC0, &pkt));
    assert_eq!(o.verdict, Verdict::Consumed);
    assert!(o.generated.len() >= 3);
    for (port, iface, f) in &o.generated {
        assert_eq!((*port, *iface), (2, 3));
        assert!(f.len() - 14 <= 1280, "fragment fits the MTU");
        assert_eq!(&f[..6], &PEER_ETH2);
    }
    let frags: Vec<Vec<u8>> = o.generated.iter().map(|g| g.2.clone()).collect();
    let (data, headers) = reassemble(&frags);
    assert_eq!(data, s.payload);
    assert_eq!(headers[0].options.as_slice(), &s.options[..]);
    for h in &headers[1..] {
        assert_eq!(
            h.options.as_slice(),
            &[0x83, 3, 4, 0],
            "only the copied option, padded"
        );
    }
    for h in &headers {
        assert_eq!(h.time_to_live, 63);
        assert_eq!(h.identification, 0x1234);
        assert!(!h.dont_fragment);
    }
    assert_eq!(o.counters.fragments_sent as usize, frags.len());
    assert_eq!(o.counters.forwarded_ipv4, 1);
}

#[test]
fn fragmenting_a_fragment_keeps_offset_and_mf() {
    let t = router();
    let mut s = Ipv4Spec::udp("198.18.0.108", "192.0.2.7", 1, 2, 2000);
    s.frag_offset = 100; // 800 bytes in
    s.mf = true;
    let o = run(&t, 0, &eth4(MAC0, &s.bytes()));
    assert_eq!(o.verdict, Verdict::Consumed);
    let hs: Vec<Ipv4Header> = o
        .generated
        .iter()
        .map(|g| Ipv4Header::from_slice(&g.2[14..]).unwrap().0)
        .collect();
    assert_eq!(hs[0].fragment_offset.value(), 100);
    assert!(
        hs.iter().all(|h| h.more_fragments),
        "the original's MF stays on the last piece"
    );
}

#[test]
fn icmp_errors_are_not_sent_about_icmp_errors_or_non_first_fragments() {
    let t = router();
    let mut s = Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 0, 0, 36);
    s.protocol = 1;
    s.payload[0] = 3; // destination unreachable
    s.ttl = 1;
    let o = run(&t, 0, &eth4(MAC0, &s.bytes()));
    assert_eq!(o.verdict, Verdict::Drop(DropReason::TtlExpired));
    assert!(o.generated.is_empty());
    assert_eq!(o.counters.icmp_suppressed, 1);
    assert_eq!(suppressed(&o.counters, IcmpSuppressed::AboutIcmpError), 1);
    s.payload[0] = 8; // echo request: answered
    assert_eq!(run(&t, 0, &eth4(MAC0, &s.bytes())).generated.len(), 1);
    let mut s = Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1, 2, 36);
    s.frag_offset = 10;
    s.ttl = 1;
    let o = run(&t, 0, &eth4(MAC0, &s.bytes()));
    assert!(o.generated.is_empty());
    assert_eq!(suppressed(&o.counters, IcmpSuppressed::NonFirstFragment), 1);
    // ICMPv6 error in answer to an ICMPv6 error: no.
    let p = ipv6(
        "2001:2::108",
        "2001:2:0:9000::99",
        1,
        58,
        &[1, 0, 0, 0, 0, 0, 0, 0],
    );
    let o = run(&t, 0, &eth6(MAC0, &p));
    assert!(o.generated.is_empty());
    assert_eq!(o.counters.icmp_suppressed, 1);
    assert_eq!(suppressed(&o.counters, IcmpSuppressed::AboutIcmpError), 1);
}

#[test]
fn icmp_errors_are_rate_limited_by_the_token_bucket() {
    let t = router();
    let cfg = WorkerConfig {
        icmp_rate_per_sec: 10,
        icmp_burst: 2,
        ..WorkerConfig::default()
    };
    let mut w = Worker::new(cfg);
    let mut s = Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1, 2, 20);
    s.ttl = 1;
    let f = eth4(MAC0, &s.bytes());
    let sent = |w: &mut Worker, now| run_with(w, &t, now, 0, &f, HEADROOM).generated.len();
    assert_eq!(sent(&mut w, 0), 1);
    assert_eq!(sent(&mut w, 0), 1);
    assert_eq!(sent(&mut w, 1_000_000), 0, "burst used up");
    assert_eq!(sent(&mut w, 100_000_000), 1, "one token per 100 ms at 10/s");
    assert_eq!(sent(&mut w, 100_000_001), 0);
    assert_eq!(w.counters().icmp_rate_limited, 2);
    assert_eq!(w.counters().drop_count(DropReason::TtlExpired), 5);
}

/// Path MTU messages have a bucket of their own: a TTL-1 flood that uses
/// up the other one does not stop fragmentation needed / packet too big
/// (path MTU discovery would black-hole the flows that need it).
#[test]
fn a_flood_of_one_icmp_error_does_not_starve_path_mtu_messages() {
    let t = router();
    let mut w = Worker::new(WorkerConfig {
        icmp_rate_per_sec: 10,
        icmp_burst: 2,
        ..WorkerConfig::default()
    });
    let mut ttl1 = Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1, 2, 20);
    ttl1.ttl = 1;
    let ttl1 = eth4(MAC0, &ttl1.bytes());
    let mut big = Ipv4Spec::udp("198.18.0.108", "192.0.2.7", 1, 2, 1400);
    big.df = true;
    let big = eth4(MAC0, &big.bytes());
    let big6 = eth6(
        MAC0,
        &ipv6(
            "2001:2::108",
            "2001:db8:1280::1",
            64,
            17,
            &udp_payload(1, 2, 1300),
        ),
    );
    let sent = |w: &mut Worker, f: &[u8]| run_with(w, &t, 0, 0, f, HEADROOM).generated.len();
    for _ in 0..10 {
        sent(&mut w, &ttl1);
    }
    assert_eq!(sent(&mut w, &ttl1), 0, "time exceeded: its bucket is empty");
    assert_eq!(sent(&mut w, &big), 1, "fragmentation needed still goes");
    assert_eq!(sent(&mut w, &big6), 1, "packet too big still goes");
    assert_eq!(sent(&mut w, &big), 0, "and has its own limit");
    assert_eq!(w.counters().icmp_rate_limited, 10);
}

/// A chunk of both families whose routes are missing: the ICMP errors go
/// out in arrival order, so with one token the first packet, here IPv6,
/// gets it (the next-hop stage walks each family's results on its own).
#[test]
fn icmp_errors_of_a_mixed_chunk_take_tokens_in_arrival_order() {
    let t = router();
    let p6 = ipv6(
        "2001:2::108",
        "2001:db8:dead::1",
        64,
        17,
        &udp_payload(1, 2, 8),
    );
    let p4 = Ipv4Spec::udp("198.18.0.108", "8.8.8.8", 1, 2, 20).bytes();
    let mut bufs: Vec<Vec<u8>> = [eth6(MAC0, &p6), eth4(MAC0, &p4), eth6(MAC0, &p6)]
        .iter()
        .map(|f| {
            let mut b = vec![0u8; HEADROOM];
            b.extend_from_slice(f);
            b
        })
        .collect();
    for (burst, expect) in [(1, vec![0x86dd]), (2, vec![0x86dd, 0x0800])] {
        let mut w = Worker::new(WorkerConfig {
            icmp_rate_per_sec: 1,
            icmp_burst: burst,
            ..WorkerConfig::default()
        });
        let mut frames = frames_in(&mut bufs);
        let out = w.process(&t, 0, 0, &mut frames);
        assert!(
            out.verdicts()
                .iter()
                .all(|v| *v == Verdict::Drop(DropReason::NoRoute))
        );
        let sent: Vec<u16> = out
            .generated()
            .map(|(_, _, b)| u16::from_be_bytes([b[12], b[13]]))
            .collect();
        assert_eq!(sent, expect, "burst {burst}");
    }
}

#[test]
fn neighbour_miss_is_punted_and_reported() {
    let t = router();
    let p = Ipv4Spec::udp("198.18.0.108", "100.64.0.1", 1, 2, 20).bytes();
    let f = eth4(MAC0, &p);
    let o = run(&t, 0, &f);
    assert_eq!(o.verdict, Verdict::Punt(PuntReason::NeighbourMiss));
    assert_eq!(o.frame, f);
    assert_eq!(o.misses, vec![(1, "198.19.0.99".parse().unwrap())]);
    // Directly connected: the destination itself is the neighbour.
    let p = Ipv4Spec::udp("198.18.0.108", "198.19.0.51", 1, 2, 20).bytes();
    let o = run(&t, 0, &eth4(MAC0, &p));
    assert_eq!(o.misses, vec![(1, "198.19.0.51".parse().unwrap())]);
    let p = Ipv4Spec::udp("198.18.0.108", "198.19.0.50", 1, 2, 20).bytes();
    let o = run(&t, 0, &eth4(MAC0, &p));
    assert_eq!(
        o.verdict,
        Verdict::Forward {
            interface: 1,
            port: 1
        }
    );
    assert_eq!(&o.frame[..6], &HOST_50);
}

#[test]
fn ecmp_spreads_flows_and_keeps_each_flow_on_one_path() {
    let t = router();
    let mut w = Worker::new(WorkerConfig::default());
    let mut per_if = [0usize; 4];
    for flow in 0..300u16 {
        let p = Ipv4Spec::udp("198.18.0.108", "203.0.113.9", 1000 + flow, 80, 20).bytes();
        let f = eth4(MAC0, &p);
        let first = run_with(&mut w, &t, 0, 0, &f, HEADROOM).verdict;
        for _ in 0..3 {
            assert_eq!(
                run_with(&mut w, &t, 0, 0, &f, HEADROOM).verdict,
                first,
                "flow {flow} changed path"
            );
        }
        match first {
            Verdict::Forward { interface, .. } => per_if[usize::from(interface)] += 1,
            v => panic!("{v:?}"),
        }
    }
    // Three paths (eth1, eth1.100, eth2): each gets a fair share.
    for i in 1..4 {
        assert!(
            per_if[i] > 60,
            "path {i} got {} of 300 flows: {per_if:?}",
            per_if[i]
        );
    }
    // IPv6 too.
    let mut seen = std::collections::HashSet::new();
    for flow in 0..64u16 {
        let p = ipv6(
            "2001:2::108",
            "2001:db8:ecc::1",
            64,
            17,
            &udp_payload(flow, 53, 8),
        );
        if let Verdict::Forward { interface, .. } = run(&t, 0, &eth6(MAC0, &p)).verdict {
            seen.insert(interface);
        }
    }
    assert_eq!(seen.len(), 2);
}

struct DenyUdpPort(u16);
impl Acl for DenyUdpPort {
    type State = ();
    fn new_state(&self) {}
    fn classify_batch(&self, _: &mut (), _now: u64, keys: &[FlowKey], out: &mut [AclAction]) {
        for (k, o) in keys.iter().zip(out.iter_mut()) {
            *o = if k.protocol == 17 && k.dst_port == self.0 {
                AclAction::Deny
            } else {
                AclAction::Accept
            };
        }
    }
}

#[test]
fn acl_stage_denies_before_lookup() {
    let (b, f4, f6) = builder();
    let t = b.build_with_acl(f4, f6, DenyUdpPort(53));
    let mut w = Worker::new(WorkerConfig::default());
    let mut bufs = udp4_buffers(&[("198.19.1.1", 53), ("198.19.1.1", 54)]);
    let mut frames = frames_in(&mut bufs);
    let out = w.process(&t, 0, 0, &mut frames);
    assert_eq!(out.verdicts()[0], Verdict::Drop(DropReason::AclDenied));
    assert!(matches!(out.verdicts()[1], Verdict::Forward { .. }));
}

/// One buffer per (destination, UDP port) from 198.18.0.108, each frame
/// after `HEADROOM` bytes.
fn udp4_buffers(sent: &[(&str, u16)]) -> Vec<Vec<u8>> {
    sent.iter()
        .map(|&(dst, port)| {
            let mut v = vec![0u8; HEADROOM];
            v.extend(eth4(
                MAC0,
                &Ipv4Spec::udp("198.18.0.108", dst, 9, port, 20).bytes(),
            ));
            v
        })
        .collect()
}

/// The frames of buffers laid out as [`udp4_buffers`] makes them.
fn frames_in(bufs: &mut [Vec<u8>]) -> Vec<Frame<'_>> {
    bufs.iter_mut()
        .map(|b| {
            let len = b.len() - HEADROOM;
            Frame::new(b, HEADROOM, len)
        })
        .collect()
}

#[test]
fn the_acl_sees_the_keys_of_the_packets_still_in_flight() {
    // Packets without a route leave before the ACL: the ACL's answers must
    // still land on the packets they are about.
    let (b, f4, f6) = builder();
    let t = b.build_with_acl(f4, f6, DenyUdpPort(53));
    let mut w = Worker::new(WorkerConfig::default());
    let mut bufs = udp4_buffers(&[
        ("8.8.8.8", 53),
        ("198.19.1.1", 53),
        ("198.19.1.1", 54),
        ("8.8.8.8", 54),
        ("198.19.1.1", 53),
        ("198.19.1.1", 54),
    ]);
    let mut frames = frames_in(&mut bufs);
    let out = w.process(&t, 0, 0, &mut frames);
    let v = out.verdicts();
    assert_eq!(v[0], Verdict::Drop(DropReason::NoRoute));
    assert_eq!(v[1], Verdict::Drop(DropReason::AclDenied));
    assert!(matches!(v[2], Verdict::Forward { .. }), "{:?}", v[2]);
    assert_eq!(v[3], Verdict::Drop(DropReason::NoRoute));
    assert_eq!(v[4], Verdict::Drop(DropReason::AclDenied));
    assert!(matches!(v[5], Verdict::Forward { .. }), "{:?}", v[5]);
}

#[test]
fn a_mixed_batch_is_split_per_port_in_order() {
    let t = router();
    let mut w = Worker::new(WorkerConfig::default());
    let pkts: Vec<Vec<u8>> = (0..150)
        .map(|i| match i % 5 {
            0 => eth4(
                MAC0,
                &Ipv4Spec::udp("198.18.0.108", "198.19.1.1", i, 2, 20).bytes(),
            ),
            1 => eth6(
                MAC0,
                &ipv6(
                    "2001:2::108",
                    "2001:2:0:9000::99",
                    64,
                    17,
                    &udp_payload(i, 2, 20),
                ),
            ),
            2 => eth4(
                MAC0,
                &Ipv4Spec::udp("198.18.0.108", "192.0.2.1", i, 2, 20).bytes(),
            ),
            3 => eth4(
                MAC0,
                &Ipv4Spec::udp("198.18.0.108", "8.8.8.8", i, 2, 20).bytes(),
            ),
            _ => eth4(
                MAC0,
                &Ipv4Spec::udp("198.18.0.108", "198.18.0.10", i, 2, 20).bytes(),
            ),
        })
        .collect();
    let mut bufs: Vec<Vec<u8>> = pkts
        .iter()
        .map(|p| {
            let mut v = vec![0u8; HEADROOM];
            v.extend(p);
            v
        })
        .collect();
    let mut frames: Vec<Frame> = bufs
        .iter_mut()
        .map(|b| {
            let l = b.len() - HEADROOM;
            Frame::new(b, HEADROOM, l)
        })
        .collect();
    let out = w.process(&t, 0, 0, &mut frames);
    assert_eq!(out.verdicts().len(), 150);
    let batches: Vec<(PortId, Vec<u16>)> = out.tx_batches().map(|(p, i)| (p, i.to_vec())).collect();
    let port1: Vec<u16> = (0..150).filter(|i| i % 5 < 2).collect();
    let port2: Vec<u16> = (0..150).filter(|i| i % 5 == 2).collect();
    assert_eq!(batches, vec![(1, port1), (2, port2)]);
    let punted: Vec<u16> = (0..150).filter(|i| i % 5 == 4).collect();
    assert_eq!(out.punted(), &punted[..]);
    assert_eq!(
        out.generated_len(),
        30,
        "one unreachable per no-route packet"
    );
    let c = w.counters();
    assert_eq!((c.forwarded_ipv4, c.forwarded_ipv6), (60, 30));
    assert_eq!(c.drop_count(DropReason::NoRoute), 30);
    assert_eq!(c.rx_frames, 150);
}

#[test]
fn batch_overflow_is_counted() {
    let t = router();
    let mut w = Worker::new(WorkerConfig {
        max_batch: 2,
        ..WorkerConfig::default()
    });
    let p = eth4(
        MAC0,
        &Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1, 2, 20).bytes(),
    );
    let mut bufs = [p.clone(), p.clone(), p];
    let mut frames: Vec<Frame> = bufs.iter_mut().map(|b| Frame::whole(b)).collect();
    let out = w.process(&t, 0, 0, &mut frames);
    assert_eq!(out.verdicts().len(), 2);
    assert_eq!(w.counters().drop_count(DropReason::BatchOverflow), 1);
}

#[test]
fn counters_serialize_with_reason_names() {
    let t = router();
    let o = run(&t, 0, &eth4([2, 9, 9, 9, 9, 9], &[0u8; 20]));
    let j = serde_json::to_value(&o.counters).unwrap();
    assert_eq!(j["drops"]["not_our_mac"], 1);
    assert_eq!(j["drops"]["no_route"], 0);
    assert_eq!(j["interfaces"][0]["rx_packets"], 1);
}

#[test]
fn all_fragments_of_a_datagram_take_the_same_ecmp_path() {
    let t = router();
    let mut paths = std::collections::HashSet::new();
    for flow in 0..60u16 {
        let src = format!("198.18.{}.{}", flow / 200, 1 + flow % 200);
        let mut first = Ipv4Spec::udp(&src, "203.0.113.9", 1000 + flow, 80, 64);
        first.mf = true;
        let mut later = Ipv4Spec::udp(&src, "203.0.113.9", 0, 0, 64);
        later.frag_offset = 8;
        let a = run(&t, 0, &eth4(MAC0, &first.bytes())).verdict;
        let b = run(&t, 0, &eth4(MAC0, &later.bytes())).verdict;
        assert_eq!(a, b, "flow {flow}");
        paths.insert(format!("{a:?}"));
    }
    assert!(paths.len() > 1, "fragments still spread by address");
}

#[test]
fn ipv6_non_first_fragments_get_errors_unless_icmpv6() {
    let t = router();
    // Fragment header: next header, reserved, offset 3 (24 bytes), M=0, id.
    let frag = |next: u8| {
        let mut p = vec![next, 0, 0x00, 0x18, 0, 0, 0x43, 0x21];
        p.extend_from_slice(&[0xab; 34]);
        ipv6("2001:2::108", "2001:2:0:9000::1", 1, 44, &p)
    };
    let o = run(&t, 0, &eth6(MAC0, &frag(17)));
    assert_eq!(o.verdict, Verdict::Drop(DropReason::HopLimitExpired));
    assert_eq!(
        o.generated.len(),
        1,
        "RFC 4443 3.3: time exceeded for any fragment"
    );
    assert_eq!(o.generated[0].2[14 + 40], 3);
    let o = run(&t, 0, &eth6(MAC0, &frag(58)));
    assert!(
        o.generated.is_empty(),
        "a non-first fragment of ICMPv6 may be an error"
    );
    assert_eq!(o.counters.icmp_suppressed, 1);
    assert_eq!(suppressed(&o.counters, IcmpSuppressed::AboutIcmpError), 1);
}

#[test]
fn priority_tagged_frames_belong_to_the_untagged_interface() {
    let t = router();
    let pkt = Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1, 2, 20).bytes();
    let mut f = eth(MAC0, PEER_GEN, Some(0x6000), 0x0800, &pkt); // PCP 3, VID 0
    let o = run(&t, 0, &f);
    assert_eq!(
        o.verdict,
        Verdict::Forward {
            interface: 1,
            port: 1
        }
    );
    assert_eq!(o.frame.len(), 14 + pkt.len(), "forwarded untagged");
    // PCP bits with a real VLAN id still select that VLAN.
    f = eth(
        MAC1V,
        PEER_V100,
        Some(0xa064),
        0x0800,
        &Ipv4Spec::udp("10.100.0.2", "198.18.5.5", 1, 2, 20).bytes(),
    );
    assert_eq!(
        run(&t, 1, &f).verdict,
        Verdict::Forward {
            interface: 0,
            port: 0
        }
    );
}

/// Denies by egress interface and records what it was shown in its
/// per-worker state.
struct DenyEgress(InterfaceId);
impl Acl for DenyEgress {
    type State = Vec<FlowKey>;
    fn new_state(&self) -> Vec<FlowKey> {
        Vec::new()
    }
    fn classify_batch(
        &self,
        seen: &mut Vec<FlowKey>,
        _now: u64,
        keys: &[FlowKey],
        out: &mut [AclAction],
    ) {
        seen.extend_from_slice(keys);
        for (k, o) in keys.iter().zip(out.iter_mut()) {
            *o = if k.out_interface == self.0 {
                AclAction::Deny
            } else {
                AclAction::Accept
            };
        }
    }
}

#[test]
fn acl_sees_the_egress_interface_and_runs_before_neighbour_resolution() {
    let (b, f4, f6) = builder();
    let t = b.build_with_acl(f4, f6, DenyEgress(1));
    let mut w = Worker::new(WorkerConfig::default());
    // 100.64.0.0/10 goes out of eth1 via an unresolved gateway: denied
    // packets must not be punted for resolution.
    let mut tcp = Ipv4Spec::udp("198.18.0.108", "100.64.0.1", 1234, 80, 20);
    tcp.protocol = 6;
    tcp.payload[13] = 0x02; // SYN
    let o = run_with(&mut w, &t, 0, 0, &eth4(MAC0, &tcp.bytes()), HEADROOM);
    assert_eq!(o.verdict, Verdict::Drop(DropReason::AclDenied));
    assert!(o.misses.is_empty());
    let via_vlan = Ipv4Spec::udp("198.18.0.108", "172.16.0.1", 1, 2, 20).bytes();
    let o = run_with(&mut w, &t, 0, 0, &eth4(MAC0, &via_vlan), HEADROOM);
    assert_eq!(
        o.verdict,
        Verdict::Forward {
            interface: 2,
            port: 1
        }
    );
    let seen = w
        .acl_state::<Vec<FlowKey>>()
        .expect("state kept by the worker")
        .clone();
    assert_eq!(seen.len(), 2);
    let k = seen[0];
    assert_eq!((k.interface, k.out_interface, k.protocol), (0, 1, 6));
    assert_eq!((k.src_port, k.dst_port, k.tcp_flags), (1234, 80, 0x02));
    assert_eq!(
        k.src,
        0xffff_0000_0000 | u128::from(u32::from(v4("198.18.0.108")))
    );
    assert_eq!(usize::from(k.length), tcp.bytes().len());
    assert_eq!(seen[1].out_interface, 2);
}

struct RejectAll;
impl Acl for RejectAll {
    type State = ();
    fn new_state(&self) {}
    fn classify_batch(&self, _: &mut (), _now: u64, _keys: &[FlowKey], out: &mut [AclAction]) {
        out.fill(AclAction::RejectUnreachable(13));
    }
}

#[test]
fn acl_reject_answers_with_unreachable() {
    let (b, f4, f6) = builder();
    let t = b.build_with_acl(f4, f6, RejectAll);
    let pkt = Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1, 2, 20).bytes();
    let o = run_at(&t, &eth4(MAC0, &pkt), HEADROOM);
    assert_eq!(o.verdict, Verdict::Drop(DropReason::AclDenied));
    assert_eq!(o.generated.len(), 1);
    let g = &o.generated[0].2;
    assert_eq!(
        (g[14 + 20], g[14 + 21]),
        (3, 13),
        "administratively prohibited"
    );
}

/// ICMP errors not sent for cause `c`; the causes always sum to the total.
fn suppressed(c: &pipeline::Counters, cause: IcmpSuppressed) -> u64 {
    assert_eq!(c.icmp_suppressed_by.iter().sum::<u64>(), c.icmp_suppressed);
    c.icmp_suppressed_by[cause.index()]
}

/// `show runtime`'s figures: each stage counts one call per chunk with
/// packets in it and the packets it handled; with a clock, the timed
/// chunks' time is the difference of the clock reads around the stage.
#[test]
fn stage_clock_counts_calls_packets_and_time_per_stage() {
    use std::sync::atomic::{AtomicU64, Ordering};
    static TICKS: AtomicU64 = AtomicU64::new(0);
    // Each read moves the clock 7 ns on.
    fn clock() -> u64 {
        TICKS.fetch_add(7, Ordering::Relaxed)
    }
    let t = router();
    let good = eth4(
        MAC0,
        &Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1000, 2000, 30).bytes(),
    );
    let mut bad = good.clone();
    bad[14 + 10] ^= 0xff; // IPv4 header checksum
    // 100 frames: chunks of 64 and 36; every tenth frame is dropped at input.
    let frames: Vec<Vec<u8>> = (0..100)
        .map(|i| {
            if i % 10 == 0 {
                bad.clone()
            } else {
                good.clone()
            }
        })
        .collect();
    // Forwarding rewrites the frames: each run starts from fresh copies.
    let run = |w: &mut Worker| {
        let mut bufs: Vec<Vec<u8>> = frames
            .iter()
            .map(|f| {
                let mut b = vec![0u8; HEADROOM + f.len()];
                b[HEADROOM..].copy_from_slice(f);
                b
            })
            .collect();
        let mut each: Vec<Frame<'_>> = bufs
            .iter_mut()
            .map(|b| {
                let len = b.len() - HEADROOM;
                Frame::new(b, HEADROOM, len)
            })
            .collect();
        let out = w.process(&t, 0, 0, &mut each);
        out.verdicts()
            .iter()
            .filter(|v| matches!(v, Verdict::Forward { .. }))
            .count()
    };
    let mut w = Worker::new(WorkerConfig::default());
    assert_eq!(run(&mut w), 90);
    // Without a clock: calls and packets, no time.
    let r = w.runtime().stages[Stage::Input.index()];
    assert_eq!((r.calls, r.packets, r.timed_packets, r.ns), (2, 100, 0, 0));

    // With one: chunk 0 of every TIMED_EVERY is timed (frames 0-63, of
    // which 0, 10, ... 60 fail the checksum at input), chunk 1 is not.
    assert_eq!(pipeline::runtime::TIMED_EVERY, 8);
    let mut w = Worker::new(WorkerConfig::default());
    w.set_stage_clock(Some(clock));
    assert_eq!(run(&mut w), 90);
    let r = w.runtime().stages;
    let (input, lookup, hop, acl, fwd) = (
        r[Stage::Input.index()],
        r[Stage::Lookup.index()],
        r[Stage::NextHop.index()],
        r[Stage::Acl.index()],
        r[Stage::Forward.index()],
    );
    let all = |c: StageCounters| (c.calls, c.packets, c.timed_packets, c.ns);
    assert_eq!(all(input), (2, 100, 64, 7));
    // Frames 0, 10, ... 90 failed the checksum: 90 go on, 57 of them in
    // the timed chunk.
    assert_eq!(all(lookup), (2, 90, 57, 7));
    assert_eq!(all(hop), (2, 90, 57, 7));
    assert_eq!(
        acl,
        StageCounters::default(),
        "no ACL: the stage did not run"
    );
    assert_eq!(all(fwd), (2, 90, 57, 7));
    assert_eq!(input.ns_per_packet(), 7.0 / 64.0);
}

/// A tracer picks the next packets its filter matches, up to its count,
/// and records what each stage decided, naming the stage that finished
/// each packet; untraced packets and packets after the count are not
/// recorded.
#[test]
fn traces_name_each_stage_and_the_one_that_decided() {
    let t = router();
    let mut ttl1 = Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1, 2, 20);
    ttl1.ttl = 1;
    let mut tcp = Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1, 2, 20);
    tcp.protocol = 6;
    let frames: Vec<Vec<u8>> = [
        tcp.bytes(),
        Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1000, 2000, 20).bytes(),
        ttl1.bytes(),
        Ipv4Spec::udp("198.18.0.108", "8.8.8.8", 1, 2, 20).bytes(),
        Ipv4Spec::udp("198.18.0.108", "198.19.1.2", 1, 2, 20).bytes(),
    ]
    .iter()
    .map(|p| eth4(MAC0, p))
    .collect();
    let mut w = Worker::new(WorkerConfig::default());
    let filter = wire::filter::Filter::parse("udp").unwrap();
    w.set_tracer(Some(Tracer::new(3, Some(filter))));
    let mut bufs: Vec<Vec<u8>> = frames
        .iter()
        .map(|f| {
            let mut b = vec![0u8; HEADROOM];
            b.extend_from_slice(f);
            b.resize(b.len() + 64, 0);
            b
        })
        .collect();
    let mut fr: Vec<Frame<'_>> = bufs
        .iter_mut()
        .zip(&frames)
        .map(|(b, f)| Frame::new(b, HEADROOM, f.len()))
        .collect();
    w.process(&t, 0, 0, &mut fr);
    assert_eq!(w.tracer().map(Tracer::remaining), Some(0));
    let r = w.take_trace();
    assert_eq!(r.len(), 3, "{r:#?}");
    // Forwarded: every stage, decided by the forward stage.
    assert_eq!((r[0].seq, r[0].port), (0, 0));
    assert_eq!(r[0].head(), &frames[1][..]);
    assert_eq!(r[0].in_if, Some(0));
    assert_eq!(r[0].destination, Some("198.19.1.1".parse().unwrap()));
    assert!(matches!(r[0].next_hop_set, Some(Some(_))));
    assert_eq!(r[0].hop, Some((1, Some("198.19.0.108".parse().unwrap()))));
    assert_eq!(r[0].decided_by, Stage::Forward);
    assert_eq!(
        r[0].verdict,
        Verdict::Forward {
            interface: 1,
            port: 1
        }
    );
    // TTL 1: routed first (as the kernel does), then finished at the
    // next-hop stage.
    assert_eq!(r[1].decided_by, Stage::NextHop);
    assert_eq!(r[1].verdict, Verdict::Drop(DropReason::TtlExpired));
    assert!(r[1].destination.is_some(), "{:?}", r[1]);
    assert!(matches!(r[1].next_hop_set, Some(Some(_))), "{:?}", r[1]);
    // No route: looked up, finished at the next-hop stage.
    assert_eq!(r[2].next_hop_set, Some(None));
    assert_eq!(r[2].decided_by, Stage::NextHop);
    assert_eq!(r[2].verdict, Verdict::Drop(DropReason::NoRoute));
    assert_eq!(r[2].hop, None);
    // The count reached, nothing more is traced.
    let mut more = bufs[4].clone();
    let mut fr = vec![Frame::new(&mut more, HEADROOM, frames[4].len())];
    w.process(&t, 0, 0, &mut fr);
    assert!(w.take_trace().is_empty());
}
