//! Property tests against simple reference computations: forwarded packets
//! change only where RFC 1812 / RFC 8200 say, the incremental checksum
//! equals a full recompute, fragments reassemble and fit the MTU, a flow
//! keeps its ECMP path, and nothing panics on arbitrary bytes.

mod support;

use fib::RouteTable;
use fib::reference::{ReferenceFib4, ReferenceFib6};
use pipeline::*;
use proptest::prelude::*;
use support::*;

/// (destination, egress interface, its MAC, neighbour MAC, VLAN tag)
fn v4_destinations() -> impl Strategy<
    Value = (
        std::net::Ipv4Addr,
        InterfaceId,
        [u8; 6],
        [u8; 6],
        Option<u16>,
    ),
> {
    prop_oneof![
        (1u8..=255, any::<u8>()).prop_map(|(c, d)| (
            std::net::Ipv4Addr::new(198, 19, c, d),
            1,
            MAC1,
            PEER_SINK,
            None
        )),
        (16u8..32, any::<u8>(), any::<u8>()).prop_map(|(b, c, d)| (
            std::net::Ipv4Addr::new(172, b, c, d),
            2,
            MAC1V,
            PEER_V100,
            Some(100)
        )),
    ]
}

prop_compose! {
    /// Valid IPv4 options: NOPs and record-route style options, copy flag
    /// random, padded with EOL to a multiple of 4.
    fn options()(opts in prop::collection::vec((any::<bool>(), 0usize..6), 0..4)) -> Vec<u8> {
        let mut o = Vec::new();
        for (copy, len) in opts {
            if len == 0 {
                o.push(1);
            } else if o.len() + len + 2 <= 36 {
                o.push(if copy { 0x83 } else { 0x07 });
                o.push((len + 2) as u8);
                o.extend(std::iter::repeat_n(0xab, len));
            }
        }
        while o.len() % 4 != 0 {
            o.push(0);
        }
        o
    }
}

prop_compose! {
    fn ipv4_packet()(
        src_c in 0u8..=255, src_d in 1u8..=254,
        dst in v4_destinations(),
        ttl in 2u8..=255, tos in any::<u8>(), id in any::<u16>(), df in any::<bool>(),
        protocol in prop_oneof![Just(6u8), Just(17), Just(1), Just(47), any::<u8>()],
        opts in options(),
        payload in prop::collection::vec(any::<u8>(), 0..1200),
    ) -> (Ipv4Spec, InterfaceId, [u8; 6], [u8; 6], Option<u16>) {
        let (d, iface, mac, peer, vlan) = dst;
        let s = Ipv4Spec {
            src: std::net::Ipv4Addr::new(198, 18, src_c, src_d),
            dst: d, ttl, protocol, df, mf: false, frag_offset: 0, id, tos, options: opts, payload,
        };
        (s, iface, mac, peer, vlan)
    }
}

/// Full RFC 1071 recompute of an IPv4 header checksum (field zeroed).
fn recompute(h: &[u8]) -> u16 {
    let mut c = h.to_vec();
    c[10] = 0;
    c[11] = 0;
    csum(&c)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn forwarded_ipv4_changes_only_ttl_checksum_and_l2(
        (spec, iface, mac, peer, vlan) in ipv4_packet(),
        in_vlan in any::<bool>(),
        headroom in 0usize..16,
    ) {
        let t = router();
        let pkt = spec.bytes();
        let frame = if in_vlan {
            eth(MAC1V, PEER_V100, Some(100), 0x0800, &pkt)
        } else {
            eth4(MAC0, &pkt)
        };
        let port = if in_vlan { 1 } else { 0 };
        let o = run_with(&mut Worker::new(WorkerConfig::default()), &t, 0, port, &frame, headroom);
        prop_assert_eq!(o.verdict, Verdict::Forward { interface: iface, port: t.interfaces()[usize::from(iface)].port });
        let f = &o.frame;
        prop_assert_eq!(&f[..6], &peer);
        prop_assert_eq!(&f[6..12], &mac);
        let l2 = match vlan {
            Some(v) => {
                prop_assert_eq!(&f[12..14], &[0x81, 0x00]);
                prop_assert_eq!(u16::from_be_bytes([f[14], f[15]]) & 0xfff, v);
                18
            }
            None => 14,
        };
        prop_assert_eq!(&f[l2 - 2..l2], &[0x08, 0x00]);
        let out = &f[l2..];
        prop_assert_eq!(out.len(), pkt.len());
        let ihl = usize::from(out[0] & 0xf) * 4;
        // The checksum verifies, and equals a full recompute.
        prop_assert_eq!(csum(&out[..ihl]), 0);
        prop_assert_eq!(u16::from_be_bytes([out[10], out[11]]), recompute(&out[..ihl]));
        // etherparse agrees.
        let (h, _) = etherparse::Ipv4Header::from_slice(out).unwrap();
        prop_assert_eq!(h.header_checksum, h.calc_header_checksum());
        // Only TTL and checksum changed.
        prop_assert_eq!(out[8], pkt[8] - 1);
        for i in (0..pkt.len()).filter(|&i| i != 8 && i != 10 && i != 11) {
            prop_assert_eq!(out[i], pkt[i], "byte {} changed", i);
        }
    }

    #[test]
    fn forwarded_ipv6_changes_only_hop_limit_and_l2(
        dst_low in any::<u64>(), sub in 0x9000u16..0xffff,
        hop in 2u8..=255, next in any::<u8>(),
        payload in prop::collection::vec(any::<u8>(), 0..1200),
        vlan_out in any::<bool>(),
    ) {
        let t = router();
        let dst = if vlan_out {
            format!("2001:db8:f00:{:x}:{:x}:{:x}:{:x}:{:x}", sub, dst_low >> 48, (dst_low >> 32) & 0xffff, (dst_low >> 16) & 0xffff, dst_low & 0xffff)
        } else {
            format!("2001:2:0:{:x}:{:x}:{:x}:{:x}:{:x}", sub, dst_low >> 48, (dst_low >> 32) & 0xffff, (dst_low >> 16) & 0xffff, dst_low & 0xffff)
        };
        let pkt = ipv6("2001:2::108", &dst, hop, next, &payload);
        let o = run(&t, 0, &eth6(MAC0, &pkt));
        let (iface, mac, peer, l2) = if vlan_out { (2, MAC1V, PEER_V100, 18) } else { (1, MAC1, PEER_SINK, 14) };
        prop_assert_eq!(o.verdict, Verdict::Forward { interface: iface, port: 1 });
        prop_assert_eq!(&o.frame[..6], &peer);
        prop_assert_eq!(&o.frame[6..12], &mac);
        let out = &o.frame[l2..];
        let mut want = pkt.clone();
        want[7] = hop - 1;
        prop_assert_eq!(out, &want[..]);
        let (h, _) = etherparse::Ipv6Header::from_slice(out).unwrap();
        prop_assert_eq!(h.hop_limit, hop - 1);
    }

    #[test]
    fn fragments_fit_the_mtu_and_reassemble(
        mtu in 68u16..1500,
        payload in prop::collection::vec(any::<u8>(), 1..4000),
        opts in options(),
        orig_offset in 0u16..100, orig_mf in any::<bool>(),
    ) {
        let t = two_port_router(mtu);
        let s = Ipv4Spec {
            src: v4("198.18.0.108"), dst: v4("192.0.2.1"), ttl: 9, protocol: 17,
            df: false, mf: orig_mf, frag_offset: orig_offset, id: 77, tos: 0,
            options: opts.clone(), payload: payload.clone(),
        };
        let pkt = s.bytes();
        let cfg = WorkerConfig { pool_slots: 1024, ..WorkerConfig::default() };
        let o = run_with(&mut Worker::new(cfg), &t, 0, 0, &eth4(MAC0, &pkt), HEADROOM);
        if pkt.len() <= usize::from(mtu) {
            prop_assert!(matches!(o.verdict, Verdict::Forward { .. }), "{:?}", o.verdict);
            return Ok(());
        }
        prop_assert_eq!(o.verdict, Verdict::Consumed);
        let mut data = vec![None; payload.len()];
        let mut copied = Vec::new();
        let mut i = 0;
        while i < opts.len() {
            match opts[i] {
                0 => break,
                1 => i += 1,
                t => {
                    let l = usize::from(opts[i + 1]);
                    if t & 0x80 != 0 { copied.extend_from_slice(&opts[i..i + l]); }
                    i += l;
                }
            }
        }
        while copied.len() % 4 != 0 { copied.push(0); }
        let n = o.generated.len();
        for (k, (_, _, f)) in o.generated.iter().enumerate() {
            let ip = &f[14..];
            prop_assert!(ip.len() <= usize::from(mtu), "fragment of {} > MTU {}", ip.len(), mtu);
            let ihl = usize::from(ip[0] & 0xf) * 4;
            prop_assert_eq!(csum(&ip[..ihl]), 0);
            prop_assert_eq!(usize::from(u16::from_be_bytes([ip[2], ip[3]])), ip.len());
            prop_assert_eq!(&ip[4..6], &77u16.to_be_bytes());
            prop_assert_eq!(ip[8], 8);
            prop_assert_eq!(&ip[12..20], &pkt[12..20]);
            let flags = u16::from_be_bytes([ip[6], ip[7]]);
            prop_assert_eq!(flags & 0x4000, 0);
            let mf = flags & 0x2000 != 0;
            prop_assert_eq!(mf, k + 1 < n || orig_mf);
            let off = usize::from((flags & 0x1fff) - orig_offset) * 8;
            let body = &ip[ihl..];
            if k + 1 < n { prop_assert_eq!(body.len() % 8, 0); }
            if k == 0 {
                prop_assert_eq!(&ip[20..ihl], &opts[..]);
            } else {
                prop_assert_eq!(&ip[20..ihl], &copied[..]);
            }
            for (j, b) in body.iter().enumerate() {
                prop_assert!(data[off + j].is_none(), "overlap at {}", off + j);
                data[off + j] = Some(*b);
            }
        }
        let whole: Vec<u8> = data.into_iter().map(|b| b.expect("hole in reassembly")).collect();
        prop_assert_eq!(whole, payload);
    }

    #[test]
    fn a_flow_keeps_its_ecmp_path(sport in any::<u16>(), dport in any::<u16>(), d in any::<u8>(), pos in 0usize..40) {
        let t = router();
        let target = eth4(MAC0, &Ipv4Spec::udp("198.18.0.108", &format!("203.0.113.{d}"), sport, dport, 20).bytes());
        let alone = run(&t, 0, &target).verdict;
        prop_assert!(matches!(alone, Verdict::Forward { .. }), "{:?}", alone);
        // Same flow at another position of a batch full of other flows.
        let mut bufs: Vec<Vec<u8>> = (0..40u16)
            .map(|i| eth4(MAC0, &Ipv4Spec::udp("198.18.0.108", "203.0.113.1", i, 9, 20).bytes()))
            .collect();
        bufs[pos] = target.clone();
        let lens: Vec<usize> = bufs.iter().map(Vec::len).collect();
        for b in &mut bufs {
            b.splice(0..0, [0u8; HEADROOM]);
        }
        let mut frames: Vec<Frame> = bufs.iter_mut().zip(lens).map(|(b, l)| Frame::new(b, HEADROOM, l)).collect();
        let mut w = Worker::new(WorkerConfig::default());
        let out = w.process(&t, 0, 0, &mut frames);
        prop_assert_eq!(out.verdicts()[pos], alone);
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..300),
        port in 0u16..5, headroom in 0usize..24, tail in 0usize..24,
    ) {
        let t = router();
        check_accounting(&t, port, &bytes, headroom, tail)?;
    }

    #[test]
    fn mutated_valid_frames_never_panic(
        which in 0usize..4,
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
        headroom in 0usize..24,
    ) {
        let t = router();
        let mut f = match which {
            0 => eth4(MAC0, &Ipv4Spec::udp("198.18.0.108", "198.19.1.1", 1, 2, 60).bytes()),
            1 => eth6(MAC0, &ipv6("2001:2::108", "2001:2:0:9000::1", 2, 44, &[17, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0])),
            2 => eth(MAC1V, PEER_V100, Some(100), 0x0800, &Ipv4Spec::udp("10.100.0.2", "192.0.2.9", 1, 2, 1500).bytes()),
            _ => eth6(MAC0, &ipv6("2001:2::108", "2001:db8:1280::1", 64, 0, &[58, 0, 1, 4, 0, 0, 0, 0, 3, 0, 0, 0])),
        };
        for (i, v) in flips {
            let i = i.index(f.len());
            f[i] = v;
        }
        let len = cut.index(f.len() + 1);
        check_accounting(&t, 0, &f[..len], headroom, 0)?;
        check_accounting(&t, 1, &f[..len], headroom, 0)?;
    }
}

/// One frame through a worker: no panic, one verdict, and the counters
/// account for it exactly once.
fn check_accounting(
    t: &RefTables,
    port: PortId,
    bytes: &[u8],
    headroom: usize,
    tail: usize,
) -> Result<(), TestCaseError> {
    let mut buf = vec![0u8; headroom + bytes.len() + tail];
    buf[headroom..headroom + bytes.len()].copy_from_slice(bytes);
    let mut frames = [Frame::new(&mut buf, headroom, bytes.len())];
    let mut w = Worker::new(WorkerConfig::default());
    let out = w.process(t, 0, port, &mut frames);
    prop_assert_eq!(out.verdicts().len(), 1);
    let v = out.verdicts()[0];
    let c = w.counters();
    prop_assert_eq!(c.rx_frames, 1);
    let outcomes = c.total_drops() + c.total_punts() + c.forwarded_ipv4 + c.forwarded_ipv6;
    prop_assert_eq!(outcomes, 1, "{:?}", v);
    if let Verdict::Forward { .. } = v {
        prop_assert!(frames[0].start() + frames[0].len() <= frames[0].buffer().len());
    }
    Ok(())
}

/// eth0 (port 0) and eth2 (port 2, IPv4 only, MTU `mtu`), 192.0.2.0/24
/// via 10.2.0.2 on eth2.
fn two_port_router(mtu: u16) -> RefTables {
    let mut b = TablesBuilder::new();
    let eth0 = b
        .add_interface(Interface {
            name: "eth0".into(),
            port: 0,
            vlan: Vlan::Untagged,
            mac: MacAddr(MAC0),
            ipv4: vec![Ipv4IfAddr {
                addr: v4("198.18.0.10"),
                prefix_len: 24,
            }],
            ipv6: vec![],
            mtu: 1500,
        })
        .unwrap();
    let eth2 = b
        .add_interface(Interface {
            name: "eth2".into(),
            port: 2,
            vlan: Vlan::Untagged,
            mac: MacAddr(MAC2),
            ipv4: vec![Ipv4IfAddr {
                addr: v4("10.2.0.1"),
                prefix_len: 24,
            }],
            ipv6: vec![],
            mtu,
        })
        .unwrap();
    let mut f4 = ReferenceFib4::new();
    let f6 = ReferenceFib6::new();
    let nh = b
        .add_next_hops(&[NextHop {
            interface: eth2,
            gateway: Some("10.2.0.2".parse().unwrap()),
        }])
        .unwrap();
    f4.insert("192.0.2.0/24".parse().unwrap(), nh);
    b.add_neighbour(eth2, "10.2.0.2".parse().unwrap(), MacAddr(PEER_ETH2))
        .unwrap();
    let _ = eth0;
    b.build(f4, f6)
}
