//! Fuzz target: the control socket's protocol (`control::protocol`) on
//! arbitrary bytes cut into request lines, each read the way the server
//! reads one (lossy UTF-8, trimmed, `serde_json::from_str::<Request>`).
//!
//! Asserted for every line that parses: the request serializes to a single
//! line (the protocol is line based) that parses back to an equal request,
//! and its `serde_json::Value` form round-trips too.
//!
//! The parsed requests are then answered, in order, by a handler over an
//! in-memory `rib::Router` (a two-port config with a VLAN, IPv6, static
//! routes and neighbours, a firewall, and both ports known to the kernel
//! mirror). The daemon's own handler lives in the private `router::daemon`
//! module and needs a netlink socket, so this handler repeats its steps for
//! the requests that need no workers or files (of the others, only a
//! trace's or capture's filter is compiled): `show_route` (one prefix,
//! or streamed in parts through `control::server::Handler::more` with a
//! `StreamCursor`), `show_neighbors`, `show_firewall`, `show_drops`,
//! `route_add` / `route_del` (the daemon's own `Router::api_route_add` /
//! `api_route_del`, then `Router::update_routes`) and `neighbor_add` /
//! `neighbor_del` (`Router::api_neighbour_add` / `api_neighbour_del`, then
//! `Router::refresh_neighbours`).
//! Asserted: every request gets an answer, ok or error, without a panic;
//! every response round-trips through its one-line JSON form; a stream
//! yields exactly `route_views()`, in order, and counts what it sent; an
//! accepted `route_add` is what `show_route` then finds for its prefix (a
//! connected subnet excepted: it changes only with a full rebuild); an
//! accepted `neighbor_add` is listed by `show_neighbors`; every installed
//! route resolves, in the published snapshot, to a route target; and the
//! incrementally updated routes equal those of a full rebuild of the same
//! state (`RouterState::build`), prefix, origin and next hops
//! (`fuzz/regressions/control_request/` holds the two inputs that once
//! made them differ).
#![no_main]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::OnceLock;

use control::netlink::Event;
use control::protocol::{HopSpec, Request, Response};
use control::server::{Handler, Reply, StreamCursor, StreamStep};
use rib::snapshot::Snapshot;
use rib::Origin;
use rib::state::RouteView;
use rib::{Router, RouterState};
use fib::Lookup;
use wire::Cidr;

const CONFIG: &str = r#"
[[interfaces]]
name = "d0"
mac = "02:00:00:00:00:10"
addresses = ["198.18.0.10/24", "2001:db8::10/64", "fe80::10/64"]

[[interfaces.vlans]]
id = 100
addresses = ["10.100.0.1/24", "2001:db8:100::1/64"]

[[interfaces]]
name = "d1"
mac = "02:00:00:00:01:10"
mtu = 1400
addresses = ["198.19.0.10/24", "2001:db8:1::10/64"]

[[routes]]
prefix = "203.0.113.0/24"
via = "198.19.0.108"

[[routes]]
prefix = "198.51.100.0/24"
via = ["198.18.0.1", "198.19.0.1"]

[[routes]]
prefix = "2001:db8:f::/48"
via = "2001:db8:1::108"

[[neighbours]]
interface = "d1"
ip = "198.19.0.108"
mac = "02:00:00:00:01:08"

[firewall]
rules = """
chain forward {
    policy accept
    ip saddr 198.18.0.0/24 udp dport 9 drop
    oif d1 tcp dport 23 reject with icmpx type admin-prohibited
    tcp dport 25 reject with tcp reset
    ip6 daddr 2001:db8:f::/48 counter accept
}
"""
"#;

// No route shorter than the poptrie's direct level (/18) in the config:
// each one rewrites a large part of the IPv4 trie's top level, and every
// input builds the tables at least twice.

/// Routes per part of a streamed `show_route` (small, so streams take
/// several parts).
const PART: usize = 3;

fn base_state() -> &'static RouterState {
    static S: OnceLock<RouterState> = OnceLock::new();
    S.get_or_init(|| {
        let cfg = config::Config::parse("control-fuzz.toml", CONFIG).expect("fuzz config");
        let mut s = RouterState::new(cfg);
        for (i, name) in [(5u32, "d0"), (6, "d1")] {
            s.kernel.apply(&Event::Link {
                add: true,
                ifindex: i,
                name: name.into(),
                mac: None,
                mtu: None,
                up: true,
                vrf: None,
                master: None,
                kind: None,
                vlan: None,
            });
        }
        s
    })
}

struct Fuzzed {
    router: Router,
    snap: Snapshot,
}

impl Fuzzed {
    fn new() -> Fuzzed {
        let (router, tables) = Router::new(base_state().clone()).expect("fuzz router builds");
        Fuzzed {
            router,
            snap: Snapshot::new(tables),
        }
    }

    fn answer(&mut self, req: Request) -> Response {
        match req {
            Request::ShowInterfaces => Response::ok(
                self.snap
                    .load()
                    .interfaces()
                    .iter()
                    .map(|i| serde_json::json!({"name": i.name, "port": i.port, "mtu": i.mtu}))
                    .collect::<Vec<_>>(),
            ),
            Request::ShowDrops => {
                let total = pipeline::Counters::default();
                let drops: Vec<_> = pipeline::DropReason::ALL
                    .iter()
                    .map(|r| serde_json::json!({"reason": r.name(), "count": total.drop_count(*r), "description": r.description()}))
                    .collect();
                let punts: Vec<_> = pipeline::PuntReason::ALL
                    .iter()
                    .map(|r| serde_json::json!({"reason": r.name(), "count": total.punt_count(*r), "description": r.description()}))
                    .collect();
                Response::ok(serde_json::json!({"drops": drops, "punts": punts}))
            }
            Request::ShowFirewall => match &self.router.state.config.firewall {
                None => Response::ok(serde_json::json!({ "firewall": null })),
                Some(fw) => Response::ok(serde_json::json!({
                    "firewall": fw.compiled.summary(std::iter::empty()),
                    "conntrack": null,
                })),
            },
            Request::ShowWorkers
            | Request::ShowMetrics
            | Request::ShowRuntime
            | Request::ClearRuntime
            | Request::TraceShow
            | Request::TraceClear
            | Request::CaptureRead
            | Request::CaptureStop => Response::err("no workers in the fuzz target"),
            // The daemon compiles a trace's or capture's filter before it
            // looks for workers; so does this handler.
            Request::TraceAdd { filter, .. } | Request::CaptureStart { filter, .. } => {
                match filter.as_deref().map(wire::filter::Filter::parse) {
                    Some(Err(e)) => Response::err(e.to_string()),
                    _ => Response::err("no workers in the fuzz target"),
                }
            }
            Request::FibAudit => Response::err("a FIB audit is answered as a stream"),
            Request::ConfigCheck { .. } | Request::ConfigReload { .. } => {
                Response::err("no config files in the fuzz target")
            }
            Request::ShowRoute { prefix } => match prefix {
                None => Response::ok(self.router.route_views()),
                Some(p) => match p.parse::<Cidr>() {
                    Ok(want) => Response::ok(
                        self.router
                            .longest_match(want)
                            .into_iter()
                            .collect::<Vec<_>>(),
                    ),
                    Err(e) => Response::err(format!("{p}: {e}")),
                },
            },
            Request::ShowNeighbors => Response::ok(self.router.neighbours()),
            Request::RouteAdd { prefix, next_hops } => {
                let hops: Vec<_> = next_hops.iter().map(HopSpec::request).collect();
                let r = self.router.api_route_add(&prefix, &hops, &self.snap);
                self.after_change(r.map(drop), prefix.parse().ok())
            }
            Request::RouteDel { prefix } => {
                let r = self.router.api_route_del(&prefix);
                self.after_change(r.map(drop), prefix.parse().ok())
            }
            Request::NeighborAdd { dev, ip, mac } => {
                let r = self.router.api_neighbour_add(&dev, &ip, &mac);
                self.after_change(r, None)
            }
            Request::NeighborDel { dev, ip } => {
                let r = self.router.api_neighbour_del(&dev, &ip);
                self.after_change(r, None)
            }
        }
    }

    fn after_change(&mut self, r: Result<(), String>, route: Option<Cidr>) -> Response {
        match r {
            Ok(()) => {
                match route {
                    Some(p) => self.router.update_routes(&[p], &self.snap),
                    None => self.router.refresh_neighbours(&self.snap),
                }
                Response::ok(serde_json::json!({"applied": true}))
            }
            Err(e) => Response::err(e),
        }
    }
}

impl Handler for Fuzzed {
    fn handle(&mut self, req: Request) -> Reply {
        match req {
            Request::ShowRoute { prefix: None } => Reply::Stream(StreamCursor::Routes {
                after: None,
                sent: 0,
            }),
            req => Reply::Now(self.answer(req)),
        }
    }

    fn more(&mut self, cursor: &mut StreamCursor, out: &mut Vec<u8>) -> StreamStep {
        match cursor {
            StreamCursor::Routes { after, sent } => {
                let part = self.router.route_views_after(*after, PART);
                for r in &part {
                    serde_json::to_writer(&mut *out, r).expect("a route view encodes");
                    out.push(b'\n');
                    *sent += 1;
                }
                if let Some(last) = part.last().and_then(|r| r.prefix.parse().ok()) {
                    *after = Some(last);
                }
                if part.len() == PART {
                    StreamStep::More
                } else {
                    StreamStep::Done
                }
            }
            StreamCursor::Audit { .. } => StreamStep::Done,
        }
    }
}

/// A response as the server writes it: one line that reads back the same.
fn check_response(resp: &Response) {
    let line = serde_json::to_string(resp).expect("a response encodes");
    assert!(!line.contains('\n'), "response on several lines: {line}");
    let back: Response = serde_json::from_str(&line).expect("a response decodes");
    assert_eq!(&back, resp);
    assert_eq!(resp.ok, resp.error.is_none());
}

fn view_json(v: &RouteView) -> serde_json::Value {
    serde_json::to_value(v).expect("a route view encodes")
}

/// (origin, next hops) by prefix.
fn route_map(views: &[RouteView]) -> BTreeMap<String, (Origin, Vec<String>)> {
    views
        .iter()
        .map(|v| (v.prefix.clone(), (v.origin, v.next_hops.clone())))
        .collect()
}

fn check_request_round_trip(req: &Request) {
    let line = serde_json::to_string(req).expect("a request encodes");
    assert!(!line.contains('\n'), "request on several lines: {line}");
    let back: Request = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("re-encoded request {line} does not parse: {e}"));
    assert_eq!(&back, req, "{line}");
    let value = serde_json::to_value(req).expect("a request encodes as a value");
    let back: Request = serde_json::from_value(value).expect("a request value decodes");
    assert_eq!(&back, req);
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut requests = Vec::new();
    for line in data.split(|&b| b == b'\n').take(32) {
        let text = String::from_utf8_lossy(line);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        if let Ok(req) = serde_json::from_str::<Request>(text) {
            check_request_round_trip(&req);
            requests.push(req);
        }
    }
    if requests.is_empty() {
        return;
    }
    let mut f = Fuzzed::new();
    for req in requests {
        let added_route = match &req {
            Request::RouteAdd { prefix, next_hops } => {
                prefix.parse::<Cidr>().ok().map(|p| (p, next_hops.len()))
            }
            _ => None,
        };
        let added_neighbour = match &req {
            Request::NeighborAdd { dev, ip, .. } => {
                ip.parse::<IpAddr>().ok().map(|a| (dev.clone(), a))
            }
            _ => None,
        };
        match f.handle(req) {
            Reply::Now(resp) => {
                check_response(&resp);
                if resp.ok {
                    if let Some((p, n)) = added_route.filter(|&(_, n)| n <= pipeline::MAX_ECMP) {
                        let got = f
                            .router
                            .longest_match(p)
                            .filter(|v| v.prefix == p.to_string());
                        let got = got.unwrap_or_else(|| panic!("added route {p} not installed"));
                        if got.origin != Origin::Connected {
                            assert_eq!(got.origin, Origin::Api, "route {p}");
                            assert_eq!(got.next_hops.len(), n, "route {p}");
                        }
                    }
                    if let Some((dev, ip)) = added_neighbour {
                        assert!(
                            f.router.neighbours().iter().any(|v| v.interface == dev
                                && v.ip == ip
                                && v.origin == Origin::Api),
                            "neighbour {ip} on {dev} listed"
                        );
                    }
                }
            }
            Reply::Stream(mut cursor) => {
                let mut out = Vec::new();
                let mut rounds = 0;
                while f.more(&mut cursor, &mut out) == StreamStep::More {
                    rounds += 1;
                    assert!(rounds < 1 << 16, "a stream that does not end");
                }
                let StreamCursor::Routes { sent, .. } = cursor else {
                    panic!("a route stream became {cursor:?}")
                };
                let lines: Vec<serde_json::Value> = out
                    .split(|&b| b == b'\n')
                    .filter(|l| !l.is_empty())
                    .map(|l| serde_json::from_slice(l).expect("a streamed line is JSON"))
                    .collect();
                let want: Vec<serde_json::Value> =
                    f.router.route_views().iter().map(view_json).collect();
                assert_eq!(lines, want, "the stream is the route table");
                assert_eq!(sent as usize, want.len());
            }
        }
    }
    // Every installed route leads somewhere in the published tables.
    let t = f.snap.load();
    for v in f.router.route_views() {
        let p: Cidr = v.prefix.parse().expect("an installed prefix parses");
        let id = match p {
            Cidr::V4(q) => t.fib4.lookup(q.addr()),
            Cidr::V6(q) => t.fib6.lookup(q.addr()),
        };
        let id = id.unwrap_or_else(|| panic!("route {p} is not in the published FIB"));
        assert!(
            t.target(id).is_some(),
            "route {p}: next-hop id {id} unknown"
        );
    }
    // Incremental updates and a full rebuild agree.
    let full = f.router.state.build().expect("the state still builds");
    let incremental = route_map(&f.router.route_views());
    let rebuilt = route_map(&full.route_views());
    assert_eq!(
        incremental, rebuilt,
        "incremental routes differ from a full rebuild"
    );
});
