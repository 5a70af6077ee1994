//! Traffic through real namespaces: generator in gen, the kernel
//! forwarding in dut, receiver and UDP sink in sink. Needs root (CI runs as
//! root); without it each test says so and returns. Every test uses its own
//! namespace tag so tests can run in parallel.

use lab::bench::{LabRunner, Traffic};
use lab::equilibrium::{self, EquilibriumConfig, StopReason};
use lab::flows::FlowSet;
use lab::gen::{self, FrameBuilder, GenConfig};
use lab::topo::{self, Placement, TopoConfig, TopoGuard, Topology, DUT_IN_MAC, GEN_MAC};
use lab::udp_sink::{self, Method, SinkConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn lab(name: &str) -> Option<TopoGuard> {
    if !netio::root_or_skip(name) {
        return None;
    }
    let tag = format!("t{}-{name}", std::process::id());
    let mut cfg = TopoConfig::new(&tag);
    // No pinning: tests share the machine with each other and the build.
    cfg.placement = Placement {
        napi_threaded: true,
        ..Placement::default()
    };
    Some(TopoGuard(Topology::up(&cfg).expect("topology up")))
}

#[test]
fn gen_through_kernel_dut_delivers_the_counted_packets() {
    let Some(guard) = lab("fwd") else { return };
    let topo = &guard.0;
    let mut traffic = Traffic::default_v4();
    traffic.warmup_s = 0;
    let mut runner = LabRunner::new(topo, traffic).unwrap();
    let d = runner
        .trial(Some(10_000.0), 60, Duration::from_secs(1))
        .unwrap();
    assert!(d.gen.attempted >= 9_000, "attempted {}", d.gen.attempted);
    assert_eq!(d.gen.sent + d.gen.backpressure, d.gen.attempted);
    assert!(d.gen.sent > 0);
    assert_eq!(
        d.recv.received,
        d.gen.sent,
        "every packet the kernel took reached the sink: {}",
        d.summary_line()
    );
    assert_eq!(d.recv.duplicates, 0);
    assert_eq!(d.lost, d.gen.attempted - d.recv.received);
    let lat = d.recv.latency.expect("latency samples");
    assert!(lat.min_ns > 0 && lat.min_ns <= lat.median_ns && lat.median_ns <= lat.max_ns);

    // With forwarding off nothing reaches the sink: the packets did go through dut.
    topo.set_forwarding(false).unwrap();
    let d = runner
        .trial(Some(10_000.0), 60, Duration::from_secs(1))
        .unwrap();
    assert!(d.gen.sent > 0);
    assert_eq!(d.recv.received, 0);

    // IPv6 flows go through as well.
    topo.set_forwarding(true).unwrap();
    let mut traffic = Traffic::default_v4();
    traffic.flows = FlowSet::parse(
        "[2001:2:0:1::1]-[2001:2:0:1::4]",
        "[2001:2:0:8001::1]:9-[2001:2:0:8001::5]",
    )
    .unwrap();
    traffic.warmup_s = 0;
    let mut runner = LabRunner::new(topo, traffic).unwrap();
    let d = runner
        .trial(Some(5_000.0), 80, Duration::from_secs(1))
        .unwrap();
    assert!(d.gen.sent > 0);
    assert_eq!(d.recv.received, d.gen.sent, "{}", d.summary_line());
}

#[test]
fn equilibrium_on_the_kernel_converges() {
    let Some(guard) = lab("eq") else { return };
    let mut traffic = Traffic::default_v4();
    traffic.warmup_s = 0;
    let mut runner = LabRunner::new(&guard.0, traffic).unwrap();
    // A link rate well above what the kernel forwards on veth, so the
    // search comes down to the kernel's rate rather than the generator's.
    let cfg = EquilibriumConfig {
        link_kpps: 4_000,
        trial_s: 1.0,
        frame_len: 60,
        max_iterations: 16,
        ..EquilibriumConfig::default()
    };
    let res = equilibrium::search(&cfg, &mut runner, |l| eprintln!("{l}")).unwrap();
    assert_ne!(
        res.stop,
        StopReason::IterationLimit,
        "did not converge: {}",
        res.render()
    );
    assert!(
        res.estimated_kpps > 0 && res.estimated_kpps <= res.max_seen_kpps.max(res.estimated_kpps)
    );
    assert!(res.estimated_kpps < 4_000);
    assert!(res.iterations.len() >= 2);
}

#[test]
fn udp_sink_receives_with_each_method() {
    let Some(guard) = lab("udp") else { return };
    let topo = guard.0.clone();
    let stop = AtomicBool::new(false);
    let per_run = 300;
    let rows = std::thread::scope(|s| {
        let sink_ns = topo.sink_ns.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let sink = s.spawn(move || {
            topo::enter_netns(&sink_ns).unwrap();
            let cfg = SinkConfig {
                bind: "198.19.0.108:9".parse().unwrap(),
                methods: Method::all(8),
                count: per_run,
                repeat: 1,
                connect: false,
                idle_timeout: Duration::from_secs(5),
            };
            let sock = udp_sink::bind(&cfg).unwrap();
            ready_tx.send(()).unwrap();
            udp_sink::run(&sock, &cfg, |r| eprintln!("{}", r.line()))
        });
        ready_rx.recv().unwrap();
        let gen_ns = topo.gen_ns.clone();
        let stop = &stop;
        let generator = s.spawn(move || {
            topo::enter_netns(&gen_ns).unwrap();
            let flows = FlowSet::parse("198.18.10.1:2000-198.18.10.4", "198.19.0.108:9").unwrap();
            let cfg = GenConfig {
                ifname: "g0".into(),
                frames: FrameBuilder::new(flows, 60, GEN_MAC, DUT_IN_MAC).unwrap(),
                rate_pps: Some(20_000.0),
                count: None,
                duration: Some(Duration::from_secs(20)),
                batch: 16,
            };
            gen::run(&cfg, stop).unwrap()
        });
        let rows = sink.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        generator.join().unwrap();
        rows
    });
    let rows = rows.expect("the sink received with every method");
    let methods: Vec<&str> = rows.iter().map(|r| r.method.as_str()).collect();
    assert_eq!(methods, ["recvMmsg/8", "recvmsg", "read", "recvfrom"]);
    for r in &rows {
        assert!(r.count >= per_run && r.pps > 0.0, "{}", r.line());
    }
}

#[test]
fn down_refuses_namespaces_it_did_not_create() {
    if !netio::root_or_skip("down_refuses_namespaces_it_did_not_create") {
        return;
    }
    let tag = format!("t{}-foreign", std::process::id());
    let t = Topology::named(&tag);
    std::process::Command::new("ip")
        .args(["netns", "add", &t.gen_ns])
        .status()
        .unwrap();
    std::process::Command::new("ip")
        .args([
            "-n", &t.gen_ns, "link", "add", "g0", "type", "veth", "peer", "name", "g1",
        ])
        .status()
        .unwrap();
    let refused = t.down();
    let still_there = topo::list_netns().contains(&t.gen_ns);
    std::process::Command::new("ip")
        .args(["netns", "del", &t.gen_ns])
        .status()
        .unwrap();
    assert!(
        matches!(refused, Err(topo::TopoError::NotOurs(_))),
        "{refused:?}"
    );
    assert!(still_there);
}
