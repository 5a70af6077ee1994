//! Fuzz target: arbitrary bytes as frames on an arbitrary port through a
//! router with untagged and VLAN interfaces, IPv4/IPv6 routes, ECMP, a small
//! MTU (fragmentation, ICMP errors) and an unresolved next hop. The first
//! input byte picks the port, the second the headroom and how the rest is
//! cut into a batch of frames. Must never panic; every frame gets exactly
//! one verdict and is counted exactly once.
#![no_main]

use std::sync::OnceLock;

use fib::reference::{ReferenceFib4, ReferenceFib6};
use fib::RouteTable;
use pipeline::*;

type RefTables = Tables<ReferenceFib4, ReferenceFib6>;

fn router() -> &'static RefTables {
    static T: OnceLock<RefTables> = OnceLock::new();
    T.get_or_init(|| {
        let mut b = TablesBuilder::new();
        let mut add = |name: &str, port, vlan, last: u8, a4: &str, a6: Option<&str>, mtu| {
            b.add_interface(Interface {
                name: name.into(),
                port,
                vlan,
                mac: MacAddr([2, 0, 0, 0, port as u8, last]),
                ipv4: vec![Ipv4IfAddr {
                    addr: a4.parse().unwrap(),
                    prefix_len: 24,
                }],
                ipv6: a6
                    .map(|a| {
                        vec![Ipv6IfAddr {
                            addr: a.parse().unwrap(),
                            prefix_len: 64,
                        }]
                    })
                    .unwrap_or_default(),
                mtu,
            })
            .unwrap()
        };
        let e0 = add(
            "eth0",
            0,
            Vlan::Untagged,
            1,
            "198.18.0.10",
            Some("2001:2::10"),
            1500,
        );
        let e1 = add(
            "eth1",
            1,
            Vlan::Untagged,
            1,
            "198.19.0.10",
            Some("2001:2:0:8000::10"),
            1500,
        );
        let v100 = add(
            "eth1.100",
            1,
            Vlan::Single(100),
            2,
            "10.100.0.1",
            Some("2001:db8:100::1"),
            1400,
        );
        let qq = add(
            "eth1.10.20",
            1,
            Vlan::Double {
                outer: 10,
                inner: 20,
            },
            3,
            "10.120.0.1",
            None,
            576,
        );
        let e2 = add("eth2", 2, Vlan::Untagged, 1, "10.2.0.1", None, 68);
        let mut f4 = ReferenceFib4::new();
        let mut f6 = ReferenceFib6::new();
        b.install_connected_routes(&mut f4, &mut f6);
        let hop = |i, g: &str| NextHop {
            interface: i,
            gateway: Some(g.parse().unwrap()),
        };
        let nh = b.add_next_hops(&[hop(e0, "198.18.0.108")]).unwrap();
        f4.insert("0.0.0.0/1".parse().unwrap(), nh);
        let nh = b
            .add_next_hops(&[
                hop(e1, "198.19.0.108"),
                hop(v100, "10.100.0.2"),
                hop(qq, "10.120.0.2"),
                hop(e2, "10.2.0.2"),
            ])
            .unwrap();
        f4.insert("128.0.0.0/1".parse().unwrap(), nh);
        let nh = b.add_next_hops(&[hop(e1, "198.19.0.99")]).unwrap();
        f4.insert("100.64.0.0/10".parse().unwrap(), nh);
        let nh = b
            .add_next_hops(&[hop(e0, "2001:2::108"), hop(v100, "2001:db8:100::2")])
            .unwrap();
        f6.insert("2000::/3".parse().unwrap(), nh);
        for (i, ip) in [
            (e0, "198.18.0.108"),
            (e0, "2001:2::108"),
            (e1, "198.19.0.108"),
            (v100, "10.100.0.2"),
            (v100, "2001:db8:100::2"),
            (qq, "10.120.0.2"),
            (e2, "10.2.0.2"),
        ] {
            b.add_neighbour(i, ip.parse().unwrap(), MacAddr([0x0a, 0, 0, 0, 0, i as u8]))
                .unwrap();
        }
        b.build(f4, f6)
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let port = PortId::from(data[0] % 4);
    let headroom = usize::from(data[1] & 0x0f);
    let pieces = usize::from(data[1] >> 4) + 1;
    let body = &data[2..];
    // Cut the body into `pieces` frames of equal size.
    let size = body.len().div_ceil(pieces).max(1);
    let mut bufs: Vec<Vec<u8>> = body
        .chunks(size)
        .map(|c| {
            let mut v = vec![0u8; headroom + c.len() + 8];
            v[headroom..headroom + c.len()].copy_from_slice(c);
            v
        })
        .collect();
    let lens: Vec<usize> = body.chunks(size).map(<[u8]>::len).collect();
    let mut frames: Vec<Frame> = bufs
        .iter_mut()
        .zip(&lens)
        .map(|(b, &l)| Frame::new(b, headroom, l))
        .collect();
    let n = frames.len();
    let cfg = WorkerConfig {
        pool_slots: 64,
        ..WorkerConfig::default()
    };
    let mut w = Worker::new(cfg);
    w.process(router(), 0, port, &mut frames);
    let out = w.output();
    assert_eq!(out.verdicts().len(), n);
    for (_, idx) in out.tx_batches() {
        for &i in idx {
            assert!(matches!(
                out.verdicts()[usize::from(i)],
                Verdict::Forward { .. }
            ));
        }
    }
    let _ = out.generated().count();
    let c = w.counters();
    assert_eq!(c.rx_frames as usize, n);
    let fragmented = out
        .verdicts()
        .iter()
        .filter(|v| **v == Verdict::Consumed)
        .count() as u64;
    let forwarded = c.forwarded_ipv4 + c.forwarded_ipv6;
    assert_eq!(c.total_drops() + c.total_punts() + forwarded, n as u64);
    assert!(fragmented <= c.forwarded_ipv4);
});
