//! The pipeline alone, in memory: ns per packet and packets per second on
//! one core for minimum-size IPv4 and IPv6 frames, 1,000 flows, batches of
//! 32 and 64, with
//! - the reference FIB holding the test router's handful of routes,
//! - the reference FIB holding a full Internet table (901,899 IPv4 /
//!   160,147 IPv6 prefixes from data/full-table-prefixes.txt.gz),
//! - the fast FIB (`fib::poptrie::Poptrie`) holding the same full table,
//!   also with `show runtime`'s stage clock on (`_runtime`);
//! - the reference FIB with the small table and the firewall
//!   (`firewall::PipelineFirewall`) as the ACL stage, with 1,000 and 10,000
//!   generated rules for each family (`firewall::rulegen`, ClassBench-like,
//!   the IPv6 copy over `2001:db8::/32`, policy drop, plus a last rule
//!   accepting the benchmark's sources);
//! - the fast FIB with the full table and the 10,000 rules a family
//!   (`pipeline_poptrie_full_fw10k`): the whole forwarding decision;
//! - the fast FIB with the full table behind 100 policy rules a family
//!   (`pipeline_poptrie_full_rules100`): 99 source rules that match none
//!   of the benchmark's packets, each looking up a table of its own kind,
//!   then main, as `ip rule` source routing sets it up; against
//!   `pipeline_poptrie_full` (the kernel's default rules);
//!
//! and, in the same run, two peers over the same frames:
//! - `copy`: only the per-batch refill of the frames from their templates
//!   (every other variant pays it too: forwarding rewrites the frames, so
//!   each batch starts from fresh copies, as a NIC writes fresh frames);
//! - `etherparse_verify`: the refill plus parsing each frame with
//!   etherparse (Ethernet, IP, UDP) and verifying the IPv4 header checksum.
//!
//! With `PIPELINE_BENCH_STAGES=1`, a separate pass with the stage clock on
//! after each pipeline variant prints `show runtime`'s ns per packet of
//! every stage: where the time goes.
//!
//! Times are the benchmark thread's own on-CPU time (the scheduler's
//! `sum_exec_runtime` from `/proc/thread-self/schedstat`), not wall time,
//! so that time spent descheduled on this shared 2-vCPU machine is not
//! charged to the code under test; `PIPELINE_BENCH_WALL=1` measures wall
//! time instead.
//!
//! Run: `cargo bench -p fastfwd-pipeline --bench pipeline`.

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_main};
use fib::poptrie::Poptrie;
use fib::{Lookup, NextHopId, RouteTable};
use pipeline::*;
use support::*;

const FLOWS: usize = 1000;
/// Frame buffers as the router's batches lay them out
/// (`io::FrameBatch`): slots a cache line more than 2048 bytes apart.
const BUF: usize = BATCH_SLOT_STRIDE;

/// 1,000 IPv4 flows: 20 sources x 50 destinations (pkt-gen style ranges),
/// 60-byte frames (64 on the wire with the FCS).
fn v4_frames(dsts: &[std::net::Ipv4Addr]) -> Vec<Vec<u8>> {
    (0..FLOWS)
        .map(|i| {
            let mut s = Ipv4Spec::udp("198.18.10.1", "198.19.10.1", 2000, 3000, 26);
            s.src = std::net::Ipv4Addr::new(198, 18, 10, 1 + (i % 20) as u8);
            s.dst = dsts[(i / 20) % dsts.len()];
            s.ttl = 64;
            let f = eth4(MAC0, &s.bytes());
            assert_eq!(f.len(), 60);
            f
        })
        .collect()
}

/// 1,000 IPv6 flows, 64-byte frames (14 + 40 + 8 UDP + 2 payload).
fn v6_frames(dsts: &[std::net::Ipv6Addr]) -> Vec<Vec<u8>> {
    (0..FLOWS)
        .map(|i| {
            let src = format!("2001:2::{:x}", 0x100 + i % 20);
            let dst = dsts[(i / 20) % dsts.len()].to_string();
            let f = eth6(
                MAC0,
                &ipv6(&src, &dst, 64, 17, &udp_payload(2000, 3000, 10)),
            );
            assert_eq!(f.len(), 64);
            f
        })
        .collect()
}

fn small_v4_dsts() -> Vec<std::net::Ipv4Addr> {
    (0..50)
        .map(|i| std::net::Ipv4Addr::new(198, 19, 10, 1 + i))
        .collect()
}

fn small_v6_dsts() -> Vec<std::net::Ipv6Addr> {
    (0..50)
        .map(|i| format!("2001:2:0:9000::{:x}", i + 1).parse().unwrap())
        .collect()
}

/// The test router's interfaces and neighbours with a full table on top:
/// each prefix points to one of four single-hop next-hop sets (eth0, eth1,
/// eth1.100, eth2), chosen by the table's derived next hop.
struct FullTable {
    v4: Vec<(fib::Ipv4Cidr, NextHopId)>,
    v6: Vec<(fib::Ipv6Cidr, NextHopId)>,
}

fn full_table(b: &mut TablesBuilder) -> Option<FullTable> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/full-table-prefixes.txt.gz");
    let rf = fib::table::read_routes(&path).ok()?;
    let gw = |b: &mut TablesBuilder, i, g: &str| {
        b.add_next_hops(&[NextHop {
            interface: i,
            gateway: Some(g.parse().unwrap()),
        }])
        .unwrap()
    };
    let sets4 = [
        gw(b, 0, "198.18.0.108"),
        gw(b, 1, "198.19.0.108"),
        gw(b, 2, "10.100.0.2"),
        gw(b, 3, "10.2.0.2"),
    ];
    let sets6 = [
        gw(b, 0, "2001:2::108"),
        gw(b, 1, "2001:2:0:8000::108"),
        gw(b, 2, "2001:db8:100::2"),
        gw(b, 3, "2001:db8:2::2"),
    ];
    Some(FullTable {
        v4: rf
            .v4
            .iter()
            .map(|&(p, nh)| (p, sets4[nh as usize % 4]))
            .collect(),
        v6: rf
            .v6
            .iter()
            .map(|&(p, nh)| (p, sets6[nh as usize % 4]))
            .collect(),
    })
}

/// 50 destinations inside table prefixes (spread over the table).
fn table_v4_dsts(t: &FullTable) -> Vec<std::net::Ipv4Addr> {
    let step = t.v4.len() / 50;
    (0..50)
        .map(|i| std::net::Ipv4Addr::from(t.v4[i * step].0.addr() | 1))
        .collect()
}

fn table_v6_dsts(t: &FullTable) -> Vec<std::net::Ipv6Addr> {
    let step = t.v6.len() / 50;
    (0..50)
        .map(|i| std::net::Ipv6Addr::from(t.v6[i * step].0.addr() | 1))
        .collect()
}

/// Refills `N` buffers from the templates (rotating through the flows).
#[inline(always)]
fn refill<const N: usize>(bufs: &mut [[u8; BUF]; N], templates: &[Vec<u8>], next: &mut usize) {
    for b in bufs.iter_mut() {
        let t = &templates[*next];
        b[HEADROOM..HEADROOM + t.len()].copy_from_slice(t);
        *next += 1;
        if *next == templates.len() {
            *next = 0;
        }
    }
}

/// On-CPU time of the calling thread in ns (scheduler accounting, updated
/// at every tick, 4 ms here, and context switch; samples here last about
/// 200 ms, so the rounding stays within a few percent and averages out).
fn on_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// Criterion measurement: the thread's on-CPU time.
struct OnCpu {
    wall: WallTime,
}

impl Measurement for OnCpu {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        on_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        on_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        // Values are nanoseconds, as WallTime's.
        self.wall.formatter()
    }
}

/// The stage clock of the `_runtime` variants: CLOCK_MONOTONIC through
/// the vDSO, as the router's workers read it.
fn stage_clock() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

fn run_pipeline<const N: usize, M: Measurement, F4: Lookup<u32>, F6: Lookup<u128>>(
    c: &mut criterion::BenchmarkGroup<'_, M>,
    name: &str,
    tables: &Tables<F4, F6>,
    templates: &[Vec<u8>],
) {
    run_pipeline_timed::<N, M, F4, F6>(c, name, tables, templates, None)
}

fn run_pipeline_timed<const N: usize, M: Measurement, F4: Lookup<u32>, F6: Lookup<u128>>(
    c: &mut criterion::BenchmarkGroup<'_, M>,
    name: &str,
    tables: &Tables<F4, F6>,
    templates: &[Vec<u8>],
    clock: Option<StageClock>,
) {
    let len = templates[0].len();
    let mut bufs = Box::new([[0u8; BUF]; N]);
    let mut w = Worker::new(WorkerConfig::default());
    w.set_stage_clock(clock);
    let mut next = 0;
    // Every frame must forward, or the figure would measure drops.
    refill(&mut bufs, templates, &mut next);
    {
        let mut frames = bufs.each_mut().map(|b| Frame::new(b, HEADROOM, len));
        let out = w.process(tables, 0, 0, &mut frames);
        assert!(
            out.verdicts()
                .iter()
                .all(|v| matches!(v, Verdict::Forward { .. })),
            "{:?}",
            out.verdicts()
        );
    }
    c.bench_function(BenchmarkId::new(name, N), |b| {
        b.iter(|| {
            refill(&mut bufs, templates, &mut next);
            let mut frames = bufs.each_mut().map(|b| Frame::new(b, HEADROOM, len));
            let out = w.process(tables, 0, 0, &mut frames);
            black_box(out.verdicts().len());
        })
    });
    print_breakdown::<N, _, _, _>(name, tables, templates);
}

/// Prints where the time goes, stage by stage: `show runtime`'s ns per
/// packet each stage saw, from a separate pass of `BREAKDOWN_BATCHES`
/// batches with the stage clock on (outside criterion's measurement), when
/// `PIPELINE_BENCH_STAGES` is set.
fn print_breakdown<const N: usize, F4: Lookup<u32>, F6: Lookup<u128>, A: Acl>(
    name: &str,
    tables: &Tables<F4, F6, A>,
    templates: &[Vec<u8>],
) {
    const BREAKDOWN_BATCHES: usize = 20_000;
    if std::env::var_os("PIPELINE_BENCH_STAGES").is_none() {
        return;
    }
    let len = templates[0].len();
    let mut bufs = Box::new([[0u8; BUF]; N]);
    let mut w = Worker::new(WorkerConfig::default());
    w.set_stage_clock(Some(stage_clock));
    let mut next = 0;
    for _ in 0..BREAKDOWN_BATCHES {
        refill(&mut bufs, templates, &mut next);
        let mut frames = bufs.each_mut().map(|b| Frame::new(b, HEADROOM, len));
        black_box(w.process(tables, 0, 0, &mut frames).verdicts().len());
    }
    let stages: Vec<String> = Stage::ALL
        .iter()
        .map(|&s| {
            let c = &w.runtime().stages[s.index()];
            format!("{} {:.1}", s.name(), c.ns_per_packet())
        })
        .collect();
    eprintln!("{name}/{N}: ns per packet by stage: {}", stages.join(", "));
}

/// `n` policy rules a family: `n - 1` source rules (10.200.i.0/24,
/// 2001:db8:c8:i::/64) that match none of the benchmark's packets, each
/// looking up a one-route table, then main. `nh`: the tables' next hop.
fn source_rules(n: usize, nh: NextHopId) -> std::sync::Arc<Policy> {
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
    let t4 = Poptrie::from_routes([(fib::Ipv4Cidr::new(0x0a00_0000, 8).unwrap(), nh)]);
    let t6 = Poptrie::from_routes([(fib::Ipv6Cidr::new(0x2001_0db8 << 96, 32).unwrap(), nh)]);
    let mut r4: Vec<PolicyRule<u32>> = (0..n as u32 - 1)
        .map(|i| rule(Some((0x0ac8_0000 | (i << 8), 24)), RuleAction::Table(0)))
        .collect();
    r4.push(rule(None, RuleAction::Main));
    let mut r6: Vec<PolicyRule<u128>> = (0..n as u128 - 1)
        .map(|i| {
            let net = (0x2001_0db8_00c8u128 << 80) | (i << 64);
            rule(Some((net, 64)), RuleAction::Table(0))
        })
        .collect();
    r6.push(rule(None, RuleAction::Main));
    std::sync::Arc::new(Policy {
        v4: FamilyPolicy::new(r4, vec![t4]).expect("valid rules"),
        v6: FamilyPolicy::new(r6, vec![t6]).expect("valid rules"),
    })
}

/// The small router with `acl` as its ACL.
fn firewall_tables(
    acl: firewall::PipelineFirewall,
) -> Tables<fib::reference::ReferenceFib4, fib::reference::ReferenceFib6, firewall::PipelineFirewall>
{
    let (b, f4, f6) = builder();
    b.build_with_acl(f4, f6, acl)
}

/// `rules` generated firewall rules a family, then an accept for the
/// benchmark's sources, as an ACL stage.
fn firewall_acl(rules: usize) -> firewall::PipelineFirewall {
    // The same rules for IPv4 and IPv6, so that both families' packets
    // meet `rules` of them.
    let mut text = firewall::rulegen::to_rule_text_dual(&firewall::rulegen::rules(rules, 7));
    let end = text.rfind('}').unwrap_or(text.len());
    text.insert_str(
        end,
        "    ip saddr 198.18.0.0/15 accept\n    ip6 saddr 2001:2::/48 accept\n",
    );
    let set = firewall::parse_rules(&text, "bench-rules").expect("generated rules parse");
    let fw =
        firewall::Firewall::compile(&set, &firewall::InterfaceMap::new()).expect("rules compile");
    firewall::PipelineFirewall::new(std::sync::Arc::new(fw), 1)
}

/// Like [`run_pipeline`] for a firewall ACL: generated rules may drop some
/// flows, so it reports the forwarded share instead of requiring all.
fn run_with_firewall<const N: usize, M: Measurement, F4: Lookup<u32>, F6: Lookup<u128>>(
    c: &mut criterion::BenchmarkGroup<'_, M>,
    name: &str,
    tables: &Tables<F4, F6, firewall::PipelineFirewall>,
    templates: &[Vec<u8>],
) {
    let len = templates[0].len();
    let mut bufs = Box::new([[0u8; BUF]; N]);
    let mut w = Worker::new(WorkerConfig::default());
    let mut next = 0;
    let mut forwarded = 0;
    for _ in 0..templates.len().div_ceil(N) {
        refill(&mut bufs, templates, &mut next);
        let mut frames = bufs.each_mut().map(|b| Frame::new(b, HEADROOM, len));
        let out = w.process(tables, 0, 0, &mut frames);
        forwarded += out
            .verdicts()
            .iter()
            .filter(|v| matches!(v, Verdict::Forward { .. }))
            .count();
    }
    eprintln!(
        "{name}/{N}: {forwarded} of {} frames forwarded, the rest denied",
        templates.len().div_ceil(N) * N
    );
    c.bench_function(BenchmarkId::new(name, N), |b| {
        b.iter(|| {
            refill(&mut bufs, templates, &mut next);
            let mut frames = bufs.each_mut().map(|b| Frame::new(b, HEADROOM, len));
            let out = w.process(tables, 0, 0, &mut frames);
            black_box(out.verdicts().len());
        })
    });
    print_breakdown::<N, _, _, _>(name, tables, templates);
}

fn run_peers<const N: usize, M: Measurement>(
    c: &mut criterion::BenchmarkGroup<'_, M>,
    templates: &[Vec<u8>],
) {
    let len = templates[0].len();
    let mut bufs = Box::new([[0u8; BUF]; N]);
    let mut next = 0;
    c.bench_function(BenchmarkId::new("copy", N), |b| {
        b.iter(|| {
            refill(&mut bufs, templates, &mut next);
            black_box(&mut bufs);
        })
    });
    c.bench_function(BenchmarkId::new("etherparse_verify", N), |b| {
        b.iter(|| {
            refill(&mut bufs, templates, &mut next);
            let mut ok = 0usize;
            for buf in bufs.iter() {
                let f = &buf[HEADROOM..HEADROOM + len];
                if let Ok(p) = etherparse::SlicedPacket::from_ethernet(f) {
                    match p.net {
                        Some(etherparse::NetSlice::Ipv4(ip)) => {
                            let h = ip.header();
                            if h.header_checksum() == h.to_header().calc_header_checksum() {
                                ok += 1;
                            }
                        }
                        Some(etherparse::NetSlice::Ipv6(_)) => ok += 1,
                        _ => {}
                    }
                }
            }
            black_box(ok);
        })
    });
}

fn bench<M: Measurement>(c: &mut Criterion<M>) {
    let (b0, f4, f6) = builder();
    let small = b0.build(f4, f6);

    // Compiled once: the small and the full table share the 10,000 rules.
    let acl10k = firewall_acl(10_000);
    let (mut b1, mut rf4, mut rf6) = builder();
    let full = full_table(&mut b1);
    let mut full_rules = None;
    let (full_ref, full_pop, full_pop_fw, full_dsts) = match &full {
        Some(t) => {
            let mut p4: Poptrie<u32> = Poptrie::new();
            let mut p6: Poptrie<u128> = Poptrie::new();
            // Keep the router's own routes (connected, test prefixes) too.
            for (p, nh) in rf4.iter() {
                p4.insert(p, nh);
            }
            for (p, nh) in rf6.iter() {
                p6.insert(p, nh);
            }
            for &(p, nh) in &t.v4 {
                rf4.insert(p, nh);
                p4.insert(p, nh);
            }
            for &(p, nh) in &t.v6 {
                rf6.insert(p, nh);
                p6.insert(p, nh);
            }
            eprintln!(
                "full table: {} IPv4 / {} IPv6 routes, 4 next-hop sets per family",
                rf4.len(),
                rf6.len()
            );
            let b2 = b1.clone();
            let b3 = b1.clone();
            let mut b4 = b1.clone();
            b4.set_policy(source_rules(100, 0))
                .expect("rules over known ids");
            full_rules = Some(b4.build(p4.clone(), p6.clone()));
            (
                Some(b1.build(rf4, rf6)),
                Some(b2.build(p4.clone(), p6.clone())),
                // The whole forwarding decision: the full table and the
                // 10,000 rules a family together.
                Some(b3.build_with_acl(p4, p6, acl10k.clone())),
                Some((table_v4_dsts(t), table_v6_dsts(t))),
            )
        }
        None => {
            eprintln!("data/full-table-prefixes.txt.gz not found: full-table variants skipped");
            (None, None, None, None)
        }
    };

    let fw1k = firewall_tables(firewall_acl(1_000));
    let fw10k = firewall_tables(acl10k);
    let v4_small = v4_frames(&small_v4_dsts());
    let v6_small = v6_frames(&small_v6_dsts());

    for (family, small_frames) in [("ipv4", &v4_small), ("ipv6", &v6_small)] {
        let full_frames = full_dsts.as_ref().map(|(d4, d6)| {
            if family == "ipv4" {
                v4_frames(d4)
            } else {
                v6_frames(d6)
            }
        });
        let mut g = c.benchmark_group(family);
        g.warm_up_time(Duration::from_secs(1));
        // Flat sampling: every sample runs ~200 ms, far above the 4 ms
        // scheduler tick at which on-CPU time is accounted.
        g.sampling_mode(SamplingMode::Flat);
        g.measurement_time(Duration::from_secs(6));
        g.sample_size(30);
        macro_rules! sizes {
            ($n:literal) => {
                g.throughput(Throughput::Elements($n));
                run_peers::<$n, _>(&mut g, small_frames);
                run_pipeline::<$n, _, _, _>(&mut g, "pipeline_ref_small", &small, small_frames);
                if let (Some(t), Some(f)) = (&full_ref, &full_frames) {
                    run_pipeline::<$n, _, _, _>(&mut g, "pipeline_ref_full", t, f);
                }
                if let (Some(t), Some(f)) = (&full_pop, &full_frames) {
                    run_pipeline::<$n, _, _, _>(&mut g, "pipeline_poptrie_full", t, f);
                    // The same with `show runtime`'s stage clock on.
                    run_pipeline_timed::<$n, _, _, _>(
                        &mut g,
                        "pipeline_poptrie_full_runtime",
                        t,
                        f,
                        Some(stage_clock),
                    );
                }
                if let (Some(t), Some(f)) = (&full_rules, &full_frames) {
                    run_pipeline::<$n, _, _, _>(&mut g, "pipeline_poptrie_full_rules100", t, f);
                }
                if let (Some(t), Some(f)) = (&full_pop_fw, &full_frames) {
                    run_with_firewall::<$n, _, _, _>(&mut g, "pipeline_poptrie_full_fw10k", t, f);
                }
                run_with_firewall::<$n, _, _, _>(
                    &mut g,
                    "pipeline_ref_small_fw1k",
                    &fw1k,
                    small_frames,
                );
                run_with_firewall::<$n, _, _, _>(
                    &mut g,
                    "pipeline_ref_small_fw10k",
                    &fw10k,
                    small_frames,
                );
            };
        }
        sizes!(32);
        sizes!(64);
        g.finish();
    }
}

fn benches() {
    // Criterion's figures carry no ratio of their own; the load at the start
    // says whether any ratio taken from them is a quiet figure.
    let load = fastfwd_sys::os::LoadNote::start();
    eprintln!("{}", load.header());
    run_benches();
    eprintln!("{}", load.footer());
}

fn run_benches() {
    if std::env::var_os("PIPELINE_BENCH_WALL").is_some() {
        let mut c = Criterion::default().configure_from_args();
        bench(&mut c);
    } else {
        let mut c = Criterion::default()
            .with_measurement(OnCpu { wall: WallTime })
            .configure_from_args();
        bench(&mut c);
    }
}

criterion_main!(benches);
