//! `fastfwd fib audit`: the running router's routes checked, layer by
//! layer, against what they are made from.
//!
//! - **unmodelled**: what in the kernel's routing state, dumped now,
//!   would make the kernel forward a transit packet other than fastfwd
//!   does (policy rules, VRFs, source-specific, TOS or encapsulated
//!   routes; [`KernelState::unmodelled`]): each is a difference, since
//!   fastfwd forwards with the main table alone;
//! - **kernel**: the mirror of the kernel's routes against a dump taken
//!   now (a lost or misread broadcast shows here);
//! - **routes**: the routes the daemon installed, kept current change by
//!   change, against a full build from the same state (kernel mirror,
//!   config, control socket): the incremental path checked by the batch one;
//! - **fib**: the forwarding table the workers read, looked up at the
//!   first and last address of every installed prefix, against a reference
//!   FIB built from the installed routes;
//! - **xdp** (with the XDP engine): the maps the program reads, element by
//!   element against a fresh compile of the same tables, and looked up as
//!   the fib layer is.
//!
//! Each layer is compared whole; the result lists every difference.

use crate::router::RouterTables;
use crate::state::{KernelState, RouterState, target_strings};
use fib::reference::{ReferenceFib4, ReferenceFib6};
use fib::{Lookup, RouteTable};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use wire::Cidr;

/// One difference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Difference {
    /// `unmodelled`, `kernel`, `routes`, `fib` or an engine's name (`xdp`).
    pub layer: String,
    /// The prefix (kernel: with its metric), or the address looked up.
    pub item: String,
    /// `missing` (wanted, not there), `extra` (there, not wanted) or
    /// `different`.
    pub kind: String,
    /// What it should be.
    pub want: String,
    /// What it is.
    pub have: String,
}

/// How much was compared.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checked {
    /// Kernel routes in the fresh dump.
    pub kernel_routes: usize,
    /// Routes the daemon installed.
    pub routes: usize,
    /// FIB lookups made.
    pub lookups: usize,
    /// The engine's own copy, when it has one (the XDP engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineChecked>,
}

/// What an audit compares, taken from the daemon (cheap clones) and a
/// fresh kernel dump.
pub struct AuditInput {
    /// The kernel's routes now.
    pub fresh: KernelState,
    /// The daemon's state: its kernel mirror, config and control-socket routes.
    pub state: RouterState,
    /// Installed routes: prefix -> next hops as `show route` prints them.
    pub installed: BTreeMap<Cidr, Vec<String>>,
    /// The tables the workers read.
    pub tables: Arc<RouterTables>,
    /// The engine's own copy of the FIB, when it has one.
    pub engine: Option<EngineAudit>,
}

/// Compares two maps: keys missing from `have`, extra in it, and values
/// that differ.
fn compare<K: Ord + ToString, V: PartialEq + std::fmt::Debug>(
    layer: &'static str,
    want: &BTreeMap<K, V>,
    have: &BTreeMap<K, V>,
    out: &mut Vec<Difference>,
) {
    let show = |v: &V| format!("{v:?}");
    for (k, w) in want {
        match have.get(k) {
            None => out.push(Difference {
                layer: layer.into(),
                item: k.to_string(),
                kind: "missing".into(),
                want: show(w),
                have: String::new(),
            }),
            Some(h) if h != w => out.push(Difference {
                layer: layer.into(),
                item: k.to_string(),
                kind: "different".into(),
                want: show(w),
                have: show(h),
            }),
            Some(_) => {}
        }
    }
    for (k, h) in have {
        if !want.contains_key(k) {
            out.push(Difference {
                layer: layer.into(),
                item: k.to_string(),
                kind: "extra".into(),
                want: String::new(),
                have: show(h),
            });
        }
    }
}

/// A (prefix, metric) key printed as `ip route` would.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct RouteKey(Cidr, u32);

impl std::fmt::Display for RouteKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} metric {}", self.0, self.1)
    }
}

/// The unmodelled layer: each thing in the fresh dump that makes the
/// kernel's decision differ from forwarding with the main table.
pub fn compare_unmodelled(fresh: &KernelState, out: &mut Vec<Difference>) {
    for item in fresh.unmodelled() {
        out.push(Difference {
            layer: "unmodelled".into(),
            item,
            kind: "different".into(),
            want: "forwarded as the kernel decides".into(),
            have: "forwarded with the main table alone".into(),
        });
    }
}

/// The kernel layer: the mirror's routes against the fresh dump's.
pub fn compare_kernel(fresh: &KernelState, mirror: &KernelState, out: &mut Vec<Difference>) {
    let keyed = |s: &KernelState| -> BTreeMap<RouteKey, _> {
        s.routes
            .iter()
            .map(|(&(p, m), r)| (RouteKey(p, m), r.clone()))
            .collect()
    };
    compare("kernel", &keyed(fresh), &keyed(mirror), out);
    compare("kernel", &fresh.nexthops, &mirror.nexthops, out);
}

/// The routes layer: a full build of `state` against `installed`.
pub fn compare_routes(
    state: &RouterState,
    installed: &BTreeMap<Cidr, Vec<String>>,
    out: &mut Vec<Difference>,
) {
    let built = match state.build() {
        Ok(b) => b,
        Err(e) => {
            out.push(Difference {
                layer: "routes".into(),
                item: "build".into(),
                kind: "different".into(),
                want: format!("a full build: {e}"),
                have: format!("{} routes installed", installed.len()),
            });
            return;
        }
    };
    // Texts by reference: a full table has a handful of distinct sets.
    let none = Vec::new();
    let want: BTreeMap<Cidr, &Vec<String>> = built
        .routes
        .iter()
        .map(|e| {
            (
                e.prefix,
                built.hop_sets.get(e.hops as usize).unwrap_or(&none),
            )
        })
        .collect();
    let have: BTreeMap<Cidr, &Vec<String>> = installed.iter().map(|(p, t)| (*p, t)).collect();
    compare("routes", &want, &have, out);
}

/// The fib layer: the live FIB at the first and last address of every
/// installed prefix against the longest installed prefix there. Returns
/// the number of lookups.
pub fn compare_fib(
    installed: &BTreeMap<Cidr, Vec<String>>,
    tables: &RouterTables,
    out: &mut Vec<Difference>,
) -> usize {
    compare_lookups(
        "fib",
        installed,
        tables,
        |a| tables.fib4.lookup(a),
        |a| tables.fib6.lookup(a),
        out,
    )
}

/// A FIB (`have4`, `have6`: address -> next-hop id of `tables`) looked up
/// at the first and last address of every installed prefix, against the
/// longest installed prefix there; differences under `layer`. Returns the
/// number of lookups.
pub fn compare_lookups(
    layer: &'static str,
    installed: &BTreeMap<Cidr, Vec<String>>,
    tables: &RouterTables,
    have4: impl Fn(u32) -> Option<u32>,
    have6: impl Fn(u128) -> Option<u32>,
    out: &mut Vec<Difference>,
) -> usize {
    // Installed routes as a reference FIB whose next hop is an index into
    // `texts`.
    let mut texts: Vec<&Vec<String>> = Vec::new();
    let mut ids: BTreeMap<&Vec<String>, u32> = BTreeMap::new();
    let (mut ref4, mut ref6) = (ReferenceFib4::new(), ReferenceFib6::new());
    for (p, t) in installed {
        let id = *ids.entry(t).or_insert_with(|| {
            texts.push(t);
            texts.len() as u32 - 1
        });
        match p {
            Cidr::V4(p) => {
                ref4.insert(*p, id);
            }
            Cidr::V6(p) => {
                ref6.insert(*p, id);
            }
        }
    }
    let live = |nh: Option<u32>| -> Vec<String> {
        nh.and_then(|id| tables.target(id))
            .map(|t| target_strings(t, tables.interfaces()))
            .unwrap_or_default()
    };
    let want = |nh: Option<u32>| -> Vec<String> {
        nh.and_then(|i| texts.get(i as usize))
            .map(|t| (*t).clone())
            .unwrap_or_default()
    };
    let mut lookups = 0;
    let mut check = |addr: String, want: Vec<String>, have: Vec<String>| {
        lookups += 1;
        if want != have {
            out.push(Difference {
                layer: layer.into(),
                item: addr,
                kind: if have.is_empty() {
                    "missing"
                } else if want.is_empty() {
                    "extra"
                } else {
                    "different"
                }
                .into(),
                want: want.join(", "),
                have: have.join(", "),
            });
        }
    };
    for p in installed.keys() {
        match p {
            Cidr::V4(p) => {
                for a in [p.addr(), p.last()] {
                    check(
                        std::net::Ipv4Addr::from(a).to_string(),
                        want(ref4.lookup(a)),
                        live(have4(a)),
                    );
                }
            }
            Cidr::V6(p) => {
                for a in [p.addr(), p.last()] {
                    check(
                        std::net::Ipv6Addr::from(a).to_string(),
                        want(ref6.lookup(a)),
                        live(have6(a)),
                    );
                }
            }
        }
    }
    lookups
}

/// An engine's own copy of the FIB (the XDP engine's maps), checked on
/// the audit thread: given the installed routes and the tables, it adds
/// its differences and says what it compared.
pub type EngineAudit = Box<
    dyn FnOnce(&BTreeMap<Cidr, Vec<String>>, &RouterTables, &mut Vec<Difference>) -> EngineChecked
        + Send,
>;

/// What an engine's check compared.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineChecked {
    /// The engine (`xdp`), also the layer of its differences.
    pub engine: String,
    /// The generation of its tables that was read.
    pub generation: u64,
    /// Map elements compared with a fresh compile.
    pub elements: usize,
    /// Lookups made in what was read.
    pub lookups: usize,
    /// Why nothing was compared, when nothing was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// The result of an audit: every difference and how much was compared.
pub type AuditResult = Result<(Vec<Difference>, Checked), crate::ControlError>;

/// Runs an audit on a thread of its own: dumps the kernel, expands the
/// installed routes, compares every layer. The control loop goes on; the
/// result arrives on the returned channel. The thread runs on `cpus` (empty:
/// any; see [`crate::kernel::keep_off_worker_cpus`]).
pub fn start(
    state: RouterState,
    installed: (BTreeMap<Cidr, u32>, Vec<Vec<String>>),
    tables: Arc<RouterTables>,
    engine: Option<EngineAudit>,
    cpus: &[usize],
) -> std::sync::mpsc::Receiver<AuditResult> {
    let (tx, rx) = std::sync::mpsc::channel();
    let cpus = cpus.to_vec();
    let spawned = std::thread::Builder::new()
        .name("fastfwd-audit".into())
        .spawn(move || {
            crate::kernel::keep_off_worker_cpus(&cpus);
            let r = crate::kernel::dump_now().map(|fresh| {
                let (routes, texts) = installed;
                let installed = routes
                    .into_iter()
                    .map(|(p, t)| (p, texts.get(t as usize).cloned().unwrap_or_default()))
                    .collect();
                audit(AuditInput {
                    fresh,
                    state,
                    installed,
                    tables,
                    engine,
                })
            });
            let _ = tx.send(r);
            // The copies and the reference FIB were large (a full table:
            // hundreds of MiB): give the memory back to the system.
            netio::sys::os::release_free_memory();
        });
    if let Err(e) = spawned {
        let (tx, rx2) = std::sync::mpsc::channel();
        let _ = tx.send(Err(crate::ControlError::Netlink(format!(
            "starting the audit thread: {e}"
        ))));
        return rx2;
    }
    rx
}

/// Runs every layer.
pub fn audit(input: AuditInput) -> (Vec<Difference>, Checked) {
    let mut out = Vec::new();
    compare_unmodelled(&input.fresh, &mut out);
    compare_kernel(&input.fresh, &input.state.kernel, &mut out);
    compare_routes(&input.state, &input.installed, &mut out);
    let lookups = compare_fib(&input.installed, &input.tables, &mut out);
    let engine = input
        .engine
        .map(|check| check(&input.installed, &input.tables, &mut out));
    (
        out,
        Checked {
            kernel_routes: input.fresh.routes.len(),
            routes: input.installed.len(),
            lookups,
            engine,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Router;

    const CFG: &str = r#"
[[interfaces]]
name = "d0"
mac = "02:00:00:00:00:10"
addresses = ["198.18.0.10/24"]

[[interfaces]]
name = "d1"
mac = "02:00:00:00:01:10"
addresses = ["198.19.0.10/24", "2001:3::10/64"]

[[routes]]
prefix = "203.0.113.0/24"
via = "198.19.0.108"

[[routes]]
prefix = "203.0.113.128/25"
via = "198.18.0.108"
"#;

    fn router() -> (Router, Arc<RouterTables>) {
        let cfg = config::Config::parse("t.toml", CFG).unwrap();
        let (r, t) = Router::new(RouterState::new(cfg)).unwrap();
        (r, Arc::new(t))
    }

    fn installed(r: &Router) -> BTreeMap<Cidr, Vec<String>> {
        r.route_views()
            .into_iter()
            .map(|v| (v.prefix.parse().unwrap(), v.next_hops))
            .collect()
    }

    #[test]
    fn a_consistent_router_has_no_difference() {
        let (r, t) = router();
        let input = AuditInput {
            fresh: KernelState::default(),
            state: r.state.clone(),
            installed: installed(&r),
            tables: Arc::clone(&t),
            // An engine whose copy answers as the live FIB does.
            engine: Some(Box::new(|inst, tables, out| EngineChecked {
                engine: "xdp".into(),
                lookups: compare_lookups(
                    "xdp",
                    inst,
                    tables,
                    |a| tables.fib4.lookup(a),
                    |a| tables.fib6.lookup(a),
                    out,
                ),
                ..EngineChecked::default()
            })),
        };
        let (d, c) = audit(input);
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(c.routes, 5, "3 connected + 2 config routes");
        assert_eq!(c.lookups, 10);
        assert_eq!(c.engine.map(|e| e.lookups), Some(10));
        // An engine whose copy lost every route: each lookup is missing,
        // under the engine's layer.
        let input = AuditInput {
            fresh: KernelState::default(),
            state: r.state.clone(),
            installed: installed(&r),
            tables: t,
            engine: Some(Box::new(|inst, tables, out| EngineChecked {
                engine: "xdp".into(),
                lookups: compare_lookups("xdp", inst, tables, |_| None, |_| None, out),
                ..EngineChecked::default()
            })),
        };
        let (d, _) = audit(input);
        assert_eq!(d.len(), 10, "{d:?}");
        assert!(d.iter().all(|d| d.layer == "xdp" && d.kind == "missing"));
    }

    #[test]
    fn a_subnet_on_two_interfaces_is_routed_as_shown() {
        // Link-local fe80::/64 is on every interface: the FIB and `show
        // route` must name the same one.
        use crate::netlink::Event;
        let cfg = config::Config::parse("t.toml", CFG).unwrap();
        let mut state = RouterState::new(cfg);
        for (i, name, ll) in [(5u32, "d0", "fe80::5"), (6, "d1", "fe80::6")] {
            state.kernel.apply(&Event::Link {
                add: true,
                ifindex: i,
                name: name.into(),
                mac: Some([2, 0, 0, 0, 0, i as u8]),
                mtu: Some(1500),
                up: true,
                vrf: false,
                master: None,
            });
            state.kernel.apply(&Event::Addr {
                add: true,
                ifindex: i,
                addr: ll.parse().unwrap(),
                prefix_len: 64,
            });
        }
        let (r, t) = Router::new(state).unwrap();
        let mut out = Vec::new();
        compare_fib(&installed(&r), &t, &mut out);
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn every_layer_reports_what_differs() {
        let (r, t) = router();
        let mut inst = installed(&r);
        // The installed view lost a route and changed another: the routes
        // layer sees both, the fib layer sees the FIB disagree with it.
        let p25: Cidr = "203.0.113.128/25".parse().unwrap();
        let p24: Cidr = "203.0.113.0/24".parse().unwrap();
        inst.remove(&p25);
        inst.insert(p24, vec!["via 198.18.0.1 dev d0".into()]);
        let mut out = Vec::new();
        compare_routes(&r.state, &inst, &mut out);
        let kinds: Vec<_> = out
            .iter()
            .map(|d| (d.item.as_str(), d.kind.as_str()))
            .collect();
        assert!(kinds.contains(&("203.0.113.128/25", "missing")), "{out:?}");
        assert!(kinds.contains(&("203.0.113.0/24", "different")), "{out:?}");
        let mut out = Vec::new();
        compare_fib(&inst, &t, &mut out);
        let items: Vec<_> = out.iter().map(|d| d.item.as_str()).collect();
        // 203.0.113.0's and .255's lookups: the FIB forwards .0 via the /24
        // (now "wrong" text) and .255 via the /25 the view no longer has.
        assert!(
            items.contains(&"203.0.113.0") && items.contains(&"203.0.113.255"),
            "{out:?}"
        );
        // The kernel layer: a route the dump has and the mirror does not.
        let mut fresh = KernelState::default();
        fresh.routes.insert(
            ("192.0.2.0/24".parse().unwrap(), 100),
            crate::state::KernelRoute::Discard(pipeline::Discard::Blackhole),
        );
        let mut out = Vec::new();
        compare_kernel(&fresh, &r.state.kernel, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].item.as_str(), out[0].kind.as_str()),
            ("192.0.2.0/24 metric 100", "missing")
        );
    }
}
