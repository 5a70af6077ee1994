//! The XDP program's own cost per packet, in the kernel, with the full
//! table, beside the user-space pipeline's over the same frames in the
//! same run.
//!
//! Tables: two interfaces, the full table of data/full-table-prefixes.txt.gz
//! (901,899 IPv4 and 160,147 IPv6 prefixes) spread over 256 next hops via
//! d1, all neighbours known. Frames: minimum-size UDP, destinations drawn
//! at random inside the table's prefixes (65,536 IPv4, 16,384 IPv6).
//!
//! - `xdp, spread`: 2,048 of the frames once each through
//!   `BPF_PROG_TEST_RUN` (repeat 1), the kernel's time for the run (it
//!   includes the test harness's own per-run work: setting up the frame,
//!   two clock reads);
//! - `xdp, repeat 64`: 512 others 64 times each in a row (the lookups'
//!   cache lines warm): the program's cost with its tables cached;
//! - `pipeline`: the same frames through `pipeline::Worker::process` in
//!   batches of 32 over the same poptries (wall time of the benchmark
//!   thread), including the per-batch refill of the frames;
//! - `rules100`: the program again (a second instance, rounds
//!   alternated) with 100 policy rules a family: 99 source rules that no
//!   frame matches (10.200.N.0/24, 2001:db8:c8:N::/64), then main; the
//!   program filters them (`ff_rules_select`) and routes by main.
//!
//! Needs root (CAP_BPF). Run on a quiet machine:
//! `cargo bench -p fastfwd-xdp --bench program`.

#[path = "../tests/support/mod.rs"]
mod support;

use fib::RouteTable;
use fib::poptrie::Poptrie;
use pipeline::{
    FamilyPolicy, Frame, InputSelector, Interface, Ipv4IfAddr, Ipv6IfAddr, MacAddr, NextHop,
    PolicyRule, RouteTarget, RuleAction, TablesBuilder, Vlan, Worker, WorkerConfig,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;
use support::Rng;
use wire::checksum::checksum as csum;
use xdp_engine::{Engine, FibCapacity, Image, Mode};

const MAC0: [u8; 6] = [2, 0, 0, 0, 0, 1];
/// Frames run through the program per round.
const SAMPLE: usize = 2048;

fn frame4(dst: u32) -> Vec<u8> {
    let mut f = MAC0.to_vec();
    f.extend_from_slice(&[2, 0, 0, 0, 0, 0x99, 0x08, 0x00]);
    let mut h = vec![0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 0, 1];
    h.extend_from_slice(&dst.to_be_bytes());
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&h);
    f.extend_from_slice(&[0x07, 0xd0, 0x0b, 0xb8, 0, 26, 0, 0]);
    f.resize(60, 0);
    f
}

fn frame6(dst: u128) -> Vec<u8> {
    let mut f = MAC0.to_vec();
    f.extend_from_slice(&[2, 0, 0, 0, 0, 0x99, 0x86, 0xdd]);
    let mut h = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
    h.extend_from_slice(&0x2001_0002_0000_0000_0000_0000_0000_0108u128.to_be_bytes());
    h.extend_from_slice(&dst.to_be_bytes());
    f.extend_from_slice(&h);
    f.extend_from_slice(&[0x07, 0xd0, 0x0b, 0xb8, 0, 8, 0, 0]);
    f
}

/// `n` rules a family: `n - 1` source rules looking up a table, for
/// sources no frame of the benchmark has, then main.
fn source_rules(n: u32) -> (FamilyPolicy<u32>, FamilyPolicy<u128>) {
    fn rule<A>(src: Option<(A, u8)>, action: RuleAction) -> PolicyRule<A> {
        PolicyRule {
            src,
            dst: None,
            iif: InputSelector::Any,
            invert: false,
            action,
            suppress_prefixlen: None,
        }
    }
    let mut r4: Vec<PolicyRule<u32>> = (0..n - 1)
        .map(|i| rule(Some((0x0ac8_0000 | (i << 8), 24)), RuleAction::Table(0)))
        .collect();
    r4.push(rule(None, RuleAction::Main));
    let mut r6: Vec<PolicyRule<u128>> = (0..u128::from(n) - 1)
        .map(|i| {
            rule(
                Some(((0x2001_0db8_00c8u128 << 80) | (i << 64), 64)),
                RuleAction::Table(0),
            )
        })
        .collect();
    r6.push(rule(None, RuleAction::Main));
    (
        FamilyPolicy::new(r4, vec![Poptrie::new()]).expect("valid rules"),
        FamilyPolicy::new(r6, vec![Poptrie::new()]).expect("valid rules"),
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    if !netio::sys::os::is_root() {
        eprintln!("program bench: needs root (CAP_BPF); skipped");
        return;
    }
    let table = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/full-table-prefixes.txt.gz");
    let routes = fib::table::read_routes(&table).expect("the full table");
    let mut b = TablesBuilder::new();
    let d0 = b
        .add_interface(Interface {
            name: "d0".into(),
            port: 0,
            vlan: Vlan::Untagged,
            mac: MacAddr(MAC0),
            ipv4: vec![Ipv4IfAddr {
                addr: Ipv4Addr::new(198, 18, 0, 10),
                prefix_len: 24,
            }],
            ipv6: vec![Ipv6IfAddr {
                addr: "2001:2::10".parse().unwrap(),
                prefix_len: 64,
            }],
            mtu: 1500,
        })
        .unwrap();
    let _ = d0;
    let d1 = b
        .add_interface(Interface {
            name: "d1".into(),
            port: 1,
            vlan: Vlan::Untagged,
            mac: MacAddr([2, 0, 0, 0, 1, 1]),
            ipv4: vec![Ipv4IfAddr {
                addr: Ipv4Addr::new(198, 19, 0, 10),
                prefix_len: 16,
            }],
            ipv6: vec![Ipv6IfAddr {
                addr: "2001:2:0:8000::10".parse().unwrap(),
                prefix_len: 64,
            }],
            mtu: 1500,
        })
        .unwrap();
    let mut ids4 = Vec::new();
    let mut ids6 = Vec::new();
    for i in 0..256u32 {
        let g4 = IpAddr::V4(Ipv4Addr::new(198, 19, 1, i as u8));
        let g6 = IpAddr::V6(Ipv6Addr::from(
            0x2001_0002_0000_8000_0000_0000_0001_0000u128 | u128::from(i),
        ));
        b.add_neighbour(d1, g4, MacAddr([2, 0, 0, 1, 0, i as u8]))
            .unwrap();
        b.add_neighbour(d1, g6, MacAddr([2, 0, 0, 2, 0, i as u8]))
            .unwrap();
        ids4.push(
            b.add_target(&RouteTarget::Forward(vec![NextHop {
                interface: d1,
                gateway: Some(g4),
            }]))
            .unwrap(),
        );
        ids6.push(
            b.add_target(&RouteTarget::Forward(vec![NextHop {
                interface: d1,
                gateway: Some(g6),
            }]))
            .unwrap(),
        );
    }
    let mut f4 = Poptrie::<u32>::new();
    let mut f6 = Poptrie::<u128>::new();
    b.install_connected_routes(&mut f4, &mut f6);
    for &(p, nh) in &routes.v4 {
        f4.insert(p, ids4[nh as usize % 256]);
    }
    for &(p, nh) in &routes.v6 {
        f6.insert(p, ids6[nh as usize % 256]);
    }
    let t = b.build(f4, f6);
    let mut rng = Rng(0x5eed);
    let spread4: Vec<Vec<u8>> = (0..65536)
        .map(|_| {
            let (p, _) = routes.v4[(rng.next() % routes.v4.len() as u64) as usize];
            let host = if p.prefix_len() == 32 {
                0
            } else {
                (rng.next() as u32) >> p.prefix_len()
            };
            frame4(p.addr() | host)
        })
        .collect();
    let spread6: Vec<Vec<u8>> = (0..16384)
        .map(|_| {
            let (p, _) = routes.v6[(rng.next() % routes.v6.len() as u64) as usize];
            let r = u128::from(rng.next()) << 64 | u128::from(rng.next());
            let host = if p.prefix_len() == 128 {
                0
            } else {
                r >> p.prefix_len()
            };
            frame6(p.addr() | host)
        })
        .collect();

    let l = (t.fib4.layout(), t.fib6.layout());
    let cap = FibCapacity::for_sizes(
        l.0.nodes.len(),
        l.0.leaves.len(),
        l.1.nodes.len(),
        l.1.leaves.len(),
    );
    let mut engine = Engine::load(Mode::Test, cap).expect("load the program");
    engine
        .publish(Image::compile(&t.datapath(), &t.fib4, &t.fib6, None, &cap).unwrap())
        .unwrap();
    // The same tables under 100 rules a family, in a second instance.
    let (p4, p6) = source_rules(100);
    let mut dp = t.datapath();
    dp.fast_path4 = p4.fast_path();
    dp.fast_path6 = p6.fast_path();
    let with_rules = Image::compile(&dp, &t.fib4, &t.fib6, None, &cap).unwrap();
    assert!(!with_rules.except_all(), "the program filters the rules");
    let mut ruled = Engine::load(Mode::Test, cap).expect("load the program");
    ruled.publish(with_rules).unwrap();
    // Both forward these frames themselves (no exception).
    for e in [&mut engine, &mut ruled] {
        for f in spread4.iter().take(64).chain(spread6.iter().take(64)) {
            match e.test_run(0, f).unwrap() {
                xdp_engine::Outcome::Forward { .. } => {}
                o => panic!("expected the program to forward, got {o:?}"),
            }
        }
    }

    println!(
        "machine: {} CPUs; full table {} IPv4 / {} IPv6 routes",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        routes.v4.len(),
        routes.v6.len()
    );
    for (name, frames) in [("ipv4", &spread4), ("ipv6", &spread6)] {
        let mut spread = Vec::new();
        let mut warm = Vec::new();
        let mut spread_rules = Vec::new();
        let mut warm_rules = Vec::new();
        let mut user = Vec::new();
        for round in 0..3 {
            let t0 = Instant::now();
            // Each BPF_PROG_TEST_RUN call costs about a millisecond outside
            // the timed loop (the kernel swaps its XDP dispatcher), so the
            // program runs over a sample of the frames.
            for (e, spread, warm) in [
                (&mut engine, &mut spread, &mut warm),
                (&mut ruled, &mut spread_rules, &mut warm_rules),
            ] {
                let ns: u64 = frames
                    .iter()
                    .take(SAMPLE)
                    .map(|f| u64::from(e.time_run(0, f, 1).unwrap()))
                    .sum();
                spread.push(ns as f64 / SAMPLE as f64);
                let ns: u64 = frames
                    .iter()
                    .skip(SAMPLE)
                    .take(SAMPLE / 4)
                    .map(|f| u64::from(e.time_run(0, f, 64).unwrap()))
                    .sum();
                warm.push(ns as f64 / (SAMPLE / 4) as f64);
            }
            let mut w = Worker::new(WorkerConfig {
                max_batch: 32,
                ..WorkerConfig::default()
            });
            let mut bufs: Vec<Vec<u8>> = vec![vec![0u8; 2048]; 32];
            let start = Instant::now();
            for chunk in frames.chunks(32) {
                let mut fr: Vec<Frame<'_>> = bufs
                    .iter_mut()
                    .zip(chunk)
                    .map(|(b, f)| {
                        b[8..8 + f.len()].copy_from_slice(f);
                        Frame::new(b, 8, f.len())
                    })
                    .collect();
                w.process(&t, 0, 0, &mut fr);
            }
            user.push(start.elapsed().as_nanos() as f64 / frames.len() as f64);
            assert_eq!(
                w.counters().forwarded_ipv4 + w.counters().forwarded_ipv6,
                frames.len() as u64
            );
            eprintln!("{name}: round {round} took {:.1?}", t0.elapsed());
        }
        let (s, wm, u) = (median(spread), median(warm), median(user));
        println!(
            "{name}: xdp program, spread destinations {s:.1} ns/packet (harness included); repeat 64 {wm:.1} ns ({:.2} Mpps/core); pipeline (user space, batch 32) {u:.1} ns; program (repeat 64) / pipeline {:.2}x",
            1000.0 / wm,
            wm / u
        );
        let (sr, wr) = (median(spread_rules), median(warm_rules));
        println!(
            "{name}: xdp program with 100 rules (99 not matching, then main): spread {sr:.1} ns ({:.2}x the default rules), repeat 64 {wr:.1} ns ({:.2}x)",
            sr / s,
            wr / wm
        );
    }
}
