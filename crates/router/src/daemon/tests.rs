use super::requests::ROUTES_PER_PART;
use super::*;
use crate::worker::Shared;

use crate::TEST_CONFIG as CFG;

/// A daemon over the config alone: no workers, no ports, a netlink
/// socket that is never read.
fn daemon(dir: &std::path::Path) -> Daemon {
    let path = dir.join("router.toml");
    std::fs::write(&path, CFG).unwrap();
    let cfg = config::Config::load(&path).unwrap();
    let (router, tables) = Router::new(RouterState::new(cfg)).unwrap();
    Daemon {
        config_path: path,
        router,
        kernel: KernelLink::open().unwrap(),
        shared: Arc::new(Shared::new(Snapshot::new(tables), 0)),
        programs: Vec::new(),
        xdp: None,
        backend: IoBackend::AfXdp,
        started: Instant::now(),
        resolver: Default::default(),
        attach: Attach {
            engine: crate::Engine::User,
            backend: IoBackend::AfXdp,
            native: None,
            workers: 0,
            xsk: Default::default(),
        },
        attached: vec![None, None],
        to_workers: Vec::new(),
        audit: None,
        route_updates: 0,
        rebuilds: 0,
        kernel_batches: 0,
        runtime_base: RuntimeBase::default(),
        unmodelled: Vec::new(),
        foreign_links: Default::default(),
        oversized: Vec::new(),
        shared_ports: Vec::new(),
        bond_tx_base: Default::default(),
    }
}

/// Every reply type, as the daemon sends it, against its golden file
/// in `crates/router/tests/golden/` (`FASTFWD_BLESS=1` rewrites them):
/// a change to a reply's shape shows up as a diff there, and the
/// client's types must read each file back.
#[test]
fn every_reply_matches_its_golden_file() {
    let dir = tmp("golden");
    let mut d = daemon(&dir);
    let path = dir.join("router.toml");
    std::fs::write(
        &path,
        format!("{CFG}\n[firewall]\nrules = \"\"\"\nchain forward {{\n    udp dport 9 counter drop\n    accept\n}}\n\"\"\"\n"),
    )
    .unwrap();
    let cfg = config::Config::load(&path).unwrap();
    let (router, tables) = Router::new(RouterState::new(cfg)).unwrap();
    d.router = router;
    d.shared = Arc::new(Shared::new(Snapshot::new(tables), 1));
    // One worker's report with counts in it.
    {
        let mut r = d.shared.reports[0].lock().unwrap();
        r.view.id = 0;
        r.view.core = 1;
        r.view.backend = "afxdp".into();
        r.view.busy_rounds = 7;
        r.view.ports = vec![crate::worker::PortCounters {
            port: "d0".into(),
            counters: netio::PortStats {
                rx_packets: 5,
                rx_bytes: 320,
                tx_packets: 4,
                tx_bytes: 256,
                ..Default::default()
            },
        }];
        r.counters = Counters::new(2);
        r.counters.interfaces[0].rx_packets = 5;
        r.counters.interfaces[0].rx_bytes = 320;
        r.counters.interfaces[1].tx_packets = 4;
        r.counters.interfaces[1].tx_bytes = 256;
        r.counters.drops[pipeline::DropReason::TtlExpired.index()] = 3;
        r.runtime.stages[pipeline::Stage::Input.index()] = pipeline::StageCounters {
            calls: 2,
            packets: 70,
            timed_packets: 64,
            ns: 1280,
        };
        // A packet the worker traced for the trace `trace_add` arms
        // below (generation 1): forwarded to 203.0.113.9 by rule 0.
        let mut head = [0u8; pipeline::trace::TRACE_HEAD];
        let frame = [
            &[2, 0, 0, 0, 0, 0x10, 2, 0, 0, 0, 0, 8, 8, 0][..],
            &[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 0, 108],
            &[203, 0, 113, 9, 0x9c, 0x40, 0x23, 0x28, 0, 8, 0, 0],
        ]
        .concat();
        head[..frame.len()].copy_from_slice(&frame);
        r.trace = vec![pipeline::TraceRecord {
            seq: 0,
            port: 0,
            len: 60,
            head,
            head_len: frame.len() as u16,
            in_if: Some(0),
            destination: Some("203.0.113.9".parse().unwrap()),
            next_hop_set: Some(Some(1)),
            hop: Some((1, Some("198.19.0.108".parse().unwrap()))),
            acl: Some((pipeline::AclAction::Accept, Some(1))),
            decided_by: pipeline::Stage::Forward,
            verdict: pipeline::Verdict::Forward {
                interface: 1,
                port: 1,
            },
        }];
        r.trace_generation = 1;
        r.trace_remaining = 4;
    }
    // A frame a capture at `drop` copied (read before any capture
    // starts, which would empty the slot).
    {
        let mut c = d.shared.captures[0].lock().unwrap();
        *c = crate::capture::CaptureBuffer::with_room(4);
        c.push(
            0,
            0,
            &[2, 0, 0, 0, 0, 0x10, 2, 0, 0, 0, 0, 8, 0x88, 0xcc],
            crate::capture::Reason::Drop(pipeline::DropReason::UnknownEthertype),
        );
    }
    let hop = |via: &str| HopSpec {
        via: Some(via.into()),
        dev: None,
    };
    let cases = [
        ("show_interfaces", Request::ShowInterfaces),
        ("show_workers", Request::ShowWorkers),
        ("show_drops", Request::ShowDrops),
        ("show_firewall", Request::ShowFirewall),
        ("show_route", Request::ShowRoute { prefix: None }),
        (
            "show_route_match",
            Request::ShowRoute {
                prefix: Some("203.0.113.9".into()),
            },
        ),
        ("show_neighbors", Request::ShowNeighbors),
        (
            "route_add",
            Request::RouteAdd {
                prefix: "198.51.100.0/24".into(),
                next_hops: vec![hop("198.19.0.108")],
            },
        ),
        (
            "route_del",
            Request::RouteDel {
                prefix: "198.51.100.0/24".into(),
            },
        ),
        (
            "route_del_error",
            Request::RouteDel {
                prefix: "198.51.100.0/24".into(),
            },
        ),
        (
            "neighbor_add",
            Request::NeighborAdd {
                dev: "d0".into(),
                ip: "198.18.0.99".into(),
                mac: "02:00:00:00:00:99".into(),
            },
        ),
        (
            "neighbor_del",
            Request::NeighborDel {
                dev: "d0".into(),
                ip: "198.18.0.99".into(),
            },
        ),
        ("config_check", Request::ConfigCheck { path: None }),
        ("config_reload", Request::ConfigReload { path: None }),
        ("show_metrics", Request::ShowMetrics),
        ("show_runtime", Request::ShowRuntime),
        ("clear_runtime", Request::ClearRuntime),
        (
            "trace_add",
            Request::TraceAdd {
                count: 5,
                filter: Some("udp and dst port 9000".into()),
                worker: None,
            },
        ),
        ("trace_show", Request::TraceShow),
        ("trace_clear", Request::TraceClear),
        ("capture_read", Request::CaptureRead),
        (
            "capture_start",
            Request::CaptureStart {
                point: "drop".into(),
                count: 10,
                interface: Some("d0".into()),
                filter: Some("not ip".into()),
            },
        ),
        ("capture_stop", Request::CaptureStop),
        (
            "capture_start_error",
            Request::CaptureStart {
                point: "rx".into(),
                count: 10,
                interface: Some("d9".into()),
                filter: None,
            },
        ),
        (
            "trace_add_error",
            Request::TraceAdd {
                count: 5,
                filter: Some("udp and".into()),
                worker: None,
            },
        ),
    ];
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let bless = std::env::var_os("FASTFWD_BLESS").is_some();
    let mut wrong = Vec::new();
    // Every request has a golden case: this match has no catch-all, so
    // a new request does not compile until it is given a name here,
    // and the assertion below fails until a case of that name exists.
    fn golden_name(r: &Request) -> &'static str {
        match r {
            Request::ShowInterfaces => "show_interfaces",
            Request::ShowWorkers => "show_workers",
            Request::ShowDrops => "show_drops",
            Request::ShowFirewall => "show_firewall",
            Request::ShowRoute { .. } => "show_route",
            Request::ShowNeighbors => "show_neighbors",
            Request::RouteAdd { .. } => "route_add",
            Request::RouteDel { .. } => "route_del",
            Request::NeighborAdd { .. } => "neighbor_add",
            Request::NeighborDel { .. } => "neighbor_del",
            Request::ConfigCheck { .. } => "config_check",
            Request::ConfigReload { .. } => "config_reload",
            Request::ShowMetrics => "show_metrics",
            Request::ShowRuntime => "show_runtime",
            Request::ClearRuntime => "clear_runtime",
            Request::TraceAdd { .. } => "trace_add",
            Request::TraceShow => "trace_show",
            Request::TraceClear => "trace_clear",
            Request::CaptureStart { .. } => "capture_start",
            Request::CaptureRead => "capture_read",
            Request::CaptureStop => "capture_stop",
            // A stream (its lines are `reply::AuditLine`s), checked
            // below from a given audit result: a real audit's lines
            // depend on the machine's kernel.
            Request::FibAudit => "fib_audit",
        }
    }
    for (name, req) in &cases {
        let want = golden_name(req);
        assert!(name.starts_with(want), "case {name} for a {want} request");
    }
    const ALL: [&str; 22] = [
        "show_interfaces",
        "show_workers",
        "show_drops",
        "show_firewall",
        "show_route",
        "show_neighbors",
        "route_add",
        "route_del",
        "neighbor_add",
        "neighbor_del",
        "config_check",
        "config_reload",
        "show_metrics",
        "show_runtime",
        "clear_runtime",
        "trace_add",
        "trace_show",
        "trace_clear",
        "capture_start",
        "capture_read",
        "capture_stop",
        "fib_audit",
    ];
    for want in ALL.iter().filter(|w| **w != "fib_audit") {
        assert!(
            cases.iter().any(|(n, _)| n == want),
            "no golden case for {want}"
        );
    }
    for (name, req) in cases {
        let resp = d.handle(req.clone());
        assert_eq!(resp.version, control::protocol::PROTOCOL_VERSION);
        let mut v = serde_json::to_value(&resp).unwrap();
        // The metrics text's samples come in no fixed order within a
        // family: sorted here so the file compares.
        if let Some(serde_json::Value::String(text)) = v.pointer_mut("/result")
            && name == "show_metrics"
        {
            let mut lines: Vec<&str> = text.lines().collect();
            lines.sort_unstable();
            *text = lines.join("\n");
        }
        // What varies from run to run: the uptime and the temporary
        // directory.
        for t in ["/result/uptime_s", "/result/seconds"] {
            if let Some(u) = v.pointer_mut(t) {
                *u = serde_json::json!(0.0);
            }
        }
        if let Some(u) = v.pointer_mut("/result/frames/0/time_ns") {
            *u = serde_json::json!(0);
        }
        let text = serde_json::to_string_pretty(&v)
            .unwrap()
            .replace(&dir.display().to_string(), "DIR")
            + "\n";
        let file = golden.join(format!("{name}.json"));
        if bless {
            std::fs::create_dir_all(&golden).unwrap();
            std::fs::write(&file, &text).unwrap();
        } else if std::fs::read_to_string(&file).ok().as_deref() != Some(text.as_str()) {
            wrong.push(format!("{name}:\n{text}"));
        }
        // The client's types read the reply back.
        let result = resp.result.clone().unwrap_or_default();
        let read = match &req {
            Request::ShowInterfaces => {
                serde_json::from_value::<reply::Interfaces>(result).map(drop)
            }
            Request::ShowWorkers => serde_json::from_value::<Vec<reply::Worker>>(result).map(drop),
            Request::ShowDrops => serde_json::from_value::<reply::Drops>(result).map(drop),
            Request::ShowFirewall => serde_json::from_value::<reply::Firewall>(result).map(drop),
            Request::ShowRoute { .. } => {
                serde_json::from_value::<Vec<reply::RouteView>>(result).map(drop)
            }
            Request::ShowNeighbors => {
                serde_json::from_value::<Vec<reply::NeighbourView>>(result).map(drop)
            }
            Request::ConfigCheck { .. } | Request::ConfigReload { .. } => {
                serde_json::from_value::<reply::ConfigFile>(result).map(drop)
            }
            Request::ShowMetrics => serde_json::from_value::<String>(result).map(drop),
            Request::ShowRuntime => serde_json::from_value::<reply::Runtime>(result).map(drop),
            Request::ClearRuntime | Request::TraceClear => {
                serde_json::from_value::<reply::Cleared>(result).map(drop)
            }
            Request::TraceAdd { .. } if resp.ok => {
                serde_json::from_value::<reply::TraceArmed>(result).map(drop)
            }
            Request::TraceShow => serde_json::from_value::<reply::Trace>(result).map(drop),
            Request::CaptureStart { .. } if resp.ok => {
                serde_json::from_value::<reply::CaptureStarted>(result).map(drop)
            }
            Request::CaptureRead => serde_json::from_value::<reply::Captured>(result).map(drop),
            Request::CaptureStop => serde_json::from_value::<reply::Cleared>(result).map(drop),
            _ if !resp.ok => Ok(()),
            _ => serde_json::from_value::<reply::Applied>(result).map(drop),
        };
        assert!(read.is_ok(), "{name}: {read:?}");
    }
    // The audit's stream as `audit_more` writes it, one array element
    // per line: a result with a difference in two layers (a real
    // audit's lines depend on the machine's kernel).
    {
        use control::audit::{Checked, Difference, EngineChecked};
        let diff = |layer: &str, item: &str, kind: &str, want: &str, have: &str| Difference {
            layer: layer.into(),
            item: item.into(),
            kind: kind.into(),
            want: want.into(),
            have: have.into(),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        tx.send(Ok((
            vec![
                diff(
                    "kernel",
                    "198.51.100.0/24 metric 0",
                    "missing",
                    "via 198.19.0.108 dev d1",
                    "",
                ),
                diff(
                    "xdp",
                    "198.51.100.7",
                    "different",
                    "via 198.19.0.108 dev d1",
                    "via 198.18.0.1 dev d0",
                ),
            ],
            Checked {
                kernel_routes: 3,
                routes: 9,
                lookups: 18,
                engine: Some(EngineChecked {
                    engine: "xdp".into(),
                    generation: 4,
                    elements: 100,
                    lookups: 18,
                    skipped: None,
                }),
            },
        )))
        .unwrap();
        d.audit = Some(AuditJob {
            result: rx,
            lines: None,
        });
        let (mut sent, mut out) = (0u64, Vec::new());
        let mut parts = 0;
        loop {
            parts += 1;
            match d.audit_more(&mut sent, &mut out) {
                StreamStep::More => assert!(parts < 100),
                StreamStep::Done => break,
                StreamStep::Pending => panic!("a sent result is pending"),
            }
        }
        let lines: Vec<serde_json::Value> = out
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(sent as usize, lines.len());
        assert_eq!(lines.len(), 3, "two differences and the summary");
        for l in &lines {
            let back = serde_json::from_value::<reply::AuditLine>(l.clone());
            assert!(back.is_ok(), "{l}: {back:?}");
        }
        assert!(matches!(
            serde_json::from_value::<reply::AuditLine>(lines[2].clone()),
            Ok(reply::AuditLine::Summary { .. })
        ));
        let text = serde_json::to_string_pretty(&lines).unwrap() + "\n";
        let file = golden.join("fib_audit.json");
        if bless {
            std::fs::write(&file, &text).unwrap();
        } else if std::fs::read_to_string(&file).ok().as_deref() != Some(text.as_str()) {
            wrong.push(format!("fib_audit:\n{text}"));
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    // docs/control-protocol.md names every field of every reply.
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/control-protocol.md"),
    )
    .unwrap();
    fn keys(v: &serde_json::Value, out: &mut std::collections::BTreeSet<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    out.insert(k.clone());
                    keys(v, out);
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| keys(v, out)),
            _ => {}
        }
    }
    let mut all = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(&golden).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        keys(&serde_json::from_str(&text).unwrap(), &mut all);
    }
    let undocumented: Vec<&String> = all
        .iter()
        .filter(|k| !doc.contains(&format!("\"{k}\"")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "fields of the replies that docs/control-protocol.md does not name: {undocumented:?}"
    );
    assert!(
        wrong.is_empty(),
        "replies differ from crates/router/tests/golden (FASTFWD_BLESS=1 rewrites them after a deliberate change):\n{}",
        wrong.join("\n")
    );
}

fn hop(via: Option<&str>, dev: Option<&str>) -> HopSpec {
    HopSpec {
        via: via.map(str::to_owned),
        dev: dev.map(str::to_owned),
    }
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("fastfwd-daemon-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn route_add_refuses_more_next_hops_than_the_ecmp_width() {
    let dir = tmp("wide");
    let mut d = daemon(&dir);
    let gws: Vec<String> = (0..=pipeline::MAX_ECMP)
        .map(|i| format!("198.19.0.{}", 20 + i))
        .collect();
    let r = d.handle(Request::RouteAdd {
        prefix: "198.51.100.0/24".into(),
        next_hops: gws.iter().map(|g| hop(Some(g), None)).collect(),
    });
    assert!(!r.ok);
    assert!(
        r.error.as_deref().is_some_and(|e| e.contains("ECMP width")),
        "{:?}",
        r.error
    );
    assert!(d.router.state.api_routes.is_empty());
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn route_add_is_published_before_the_answer_and_del_removes_it() {
    let dir = tmp("route");
    let mut d = daemon(&dir);
    let r = d.handle(Request::RouteAdd {
        prefix: "198.51.100.0/24".into(),
        next_hops: vec![hop(Some("198.19.0.108"), None)],
    });
    assert!(r.ok, "{:?}", r.error);
    // The workers' snapshot routes it already, out of d1 (found from
    // the gateway's subnet).
    let t = d.shared.snapshot.load();
    let nh = fib::Lookup::lookup(&t.fib4, u32::from_be_bytes([198, 51, 100, 7])).unwrap();
    let hops = t.next_hops(nh).unwrap();
    assert_eq!(hops[0].interface, 1);
    drop(t);
    let shown = d.handle(Request::ShowRoute {
        prefix: Some("198.51.100.7".into()),
    });
    let text = shown.result.unwrap().to_string();
    assert!(
        text.contains("198.51.100.0/24") && text.contains("198.19.0.108"),
        "{text}"
    );
    let r = d.handle(Request::RouteDel {
        prefix: "198.51.100.0/24".into(),
    });
    assert!(r.ok);
    let t = d.shared.snapshot.load();
    assert!(fib::Lookup::lookup(&t.fib4, u32::from_be_bytes([198, 51, 100, 7])).is_none());
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_whole_table_is_streamed_in_parts_in_prefix_order() {
    let dir = tmp("stream");
    let mut d = daemon(&dir);
    for i in 0..5_000u32 {
        let p = format!("10.{}.{}.0/24", i / 256, i % 256);
        let r = d.handle(Request::RouteAdd {
            prefix: p,
            next_hops: vec![hop(Some("198.19.0.108"), None)],
        });
        assert!(r.ok, "{:?}", r.error);
    }
    let all = d.router.route_views();
    let mut h = Handling(&mut d);
    let Reply::Stream(mut cursor) = h.handle(Request::ShowRoute { prefix: None }) else {
        panic!("show route of the whole table is not streamed");
    };
    let (mut out, mut parts) = (Vec::new(), 0);
    while h.more(&mut cursor, &mut out) == StreamStep::More {
        parts += 1;
        assert!(out.len() < 256 * 1024 * parts, "a part is bounded");
    }
    assert!(parts >= 5_000 / ROUTES_PER_PART);
    let lines: Vec<serde_json::Value> = out
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(lines.len(), all.len());
    assert_eq!(
        cursor,
        StreamCursor::Routes {
            after: all.last().map(|r| r.prefix.parse().unwrap()),
            sent: all.len() as u64
        }
    );
    for (l, r) in lines.iter().zip(&all) {
        assert_eq!(l["prefix"], r.prefix.as_str());
    }
    // A prefix asked for is answered at once.
    let Reply::Now(r) = h.handle(Request::ShowRoute {
        prefix: Some("10.1.2.3".into()),
    }) else {
        panic!("one route is not streamed");
    };
    assert!(r.result.unwrap().to_string().contains("10.1.2.0/24"));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    let dir = tmp("bad");
    let mut d = daemon(&dir);
    let generation = d.shared.snapshot.generation();
    for (req, says) in [
        (
            Request::RouteAdd {
                prefix: "203.0.113.0/24".into(),
                next_hops: vec![],
            },
            "at least one next hop",
        ),
        (
            Request::RouteAdd {
                prefix: "203.0.113.0/24".into(),
                next_hops: vec![hop(Some("2001:3::1"), None)],
            },
            "family",
        ),
        (
            Request::RouteAdd {
                prefix: "203.0.113.0/24".into(),
                next_hops: vec![hop(Some("192.0.2.1"), None)],
            },
            "not on any connected subnet",
        ),
        (
            Request::RouteAdd {
                prefix: "203.0.113.0/24".into(),
                next_hops: vec![hop(None, Some("eth9"))],
            },
            "unknown interface \"eth9\"",
        ),
        // The config's checks, by the one resolver.
        (
            Request::RouteAdd {
                prefix: "203.0.113.0/24".into(),
                next_hops: vec![hop(Some("224.0.0.5"), Some("d1"))],
            },
            "multicast addresses cannot be used",
        ),
        (
            Request::RouteAdd {
                prefix: "203.0.113.0/24".into(),
                next_hops: vec![hop(Some("198.19.0.10"), None)],
            },
            "the router's own address",
        ),
        (
            Request::RouteAdd {
                prefix: "203.0.113.0/24".into(),
                next_hops: vec![hop(Some("198.18.0.1"), Some("d1"))],
            },
            "not on a subnet of interface \"d1\"",
        ),
        (
            Request::RouteDel {
                prefix: "198.51.100.0/24".into(),
            },
            "no route",
        ),
        (
            Request::NeighborAdd {
                dev: "d1".into(),
                ip: "198.19.0.1".into(),
                mac: "not-a-mac".into(),
            },
            "not-a-mac",
        ),
    ] {
        let r = d.handle(req);
        assert!(!r.ok);
        let e = r.error.unwrap_or_default();
        assert!(e.contains(says), "{e:?} should say {says:?}");
    }
    assert_eq!(
        d.shared.snapshot.generation(),
        generation,
        "a refused request published tables"
    );
    assert!(d.router.state.api_routes.is_empty() && d.router.state.api_neighbours.is_empty());
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_reload_that_fails_names_the_line_and_keeps_the_running_config() {
    let dir = tmp("reload");
    let mut d = daemon(&dir);
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, CFG.replace("198.19.0.10/24", "198.19.0.300/24")).unwrap();
    let r = d.handle(Request::ConfigReload {
        path: Some(bad.display().to_string()),
    });
    assert!(!r.ok);
    let e = r.error.unwrap_or_default();
    assert!(
        e.contains("bad.toml:10:") && e.contains("interfaces[1].addresses[0]"),
        "{e}"
    );
    assert_eq!(d.config_path, dir.join("router.toml"));
    // A good one with another address is applied whole.
    let good = dir.join("good.toml");
    std::fs::write(&good, CFG.replace("198.19.0.10/24", "198.19.0.20/24")).unwrap();
    let r = d.handle(Request::ConfigReload {
        path: Some(good.display().to_string()),
    });
    assert!(r.ok, "{:?}", r.error);
    let t = d.shared.snapshot.load();
    assert_eq!(
        t.interfaces()[1].ipv4[0].addr,
        std::net::Ipv4Addr::new(198, 19, 0, 20)
    );
    std::fs::remove_dir_all(dir).ok();
}
