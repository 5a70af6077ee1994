//! `fastfwd fib audit`: the running router's routes checked, layer by
//! layer, against what they are made from.
//!
//! - **unmodelled**: what in the kernel's routing state, dumped now,
//!   would make the kernel forward a transit packet other than fastfwd
//!   does (rules it cannot evaluate, VRFs, source-specific, TOS or
//!   encapsulated routes; [`KernelState::unmodelled`]): each is a
//!   difference;
//! - **kernel**: the mirror of the kernel's routes, rules and other
//!   tables against a dump taken now (a lost or misread broadcast shows
//!   here);
//! - **routes**: the routes the daemon installed, kept current change by
//!   change, against a full build from the same state (kernel mirror,
//!   config, control socket): the incremental path checked by the batch one;
//! - **fib**: the forwarding table the workers read, looked up at the
//!   first and last address of every installed prefix, against a reference
//!   FIB built from the installed routes;
//! - **policy** (when rules send packets beyond main): the route the
//!   workers' rules and tables pick, for sampled destinations, sources and
//!   input interfaces, against a full build from the fresh dump;
//! - **xdp** (with the XDP engine): the maps the program reads, element by
//!   element against a fresh compile of the same tables, and looked up as
//!   the fib layer is.
//!
//! Each layer is compared whole; the result lists every difference.

use fib::reference::{ReferenceFib4, ReferenceFib6};
use fib::{Lookup, RouteTable};
use rib::kernel::KernelState;
use rib::router::RouterTables;
use rib::state::{RouterState, target_strings};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
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
            have: "not modelled by fastfwd".into(),
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
    // Rules by what `ip rule` prints (with the family: the same text can
    // be a rule of each); other tables' routes by table, prefix, metric.
    let rules = |s: &KernelState| -> BTreeMap<String, ()> {
        s.rules
            .iter()
            .map(|r| {
                let family = if r.v6 { "-6" } else { "-4" };
                (format!("ip {family} rule {r}"), ())
            })
            .collect()
    };
    compare("kernel", &rules(fresh), &rules(mirror), out);
    let tables = |s: &KernelState| -> BTreeMap<String, _> {
        s.tables
            .iter()
            .flat_map(|(t, routes)| {
                routes
                    .iter()
                    .map(move |((p, m), r)| (format!("{p} table {t} metric {m}"), r.clone()))
            })
            .collect()
    };
    compare("kernel", &tables(fresh), &tables(mirror), out);
}

/// The policy layer: the rules and tables the workers route by, against
/// a full build from the fresh dump (with the daemon's config and
/// control-socket routes), compared by the route each picks, as
/// `ip route get DST from SRC iif DEV` would ask: at the first and last
/// address of every rule's `to` prefix and every route of the tables the
/// rules look up (in the dump or the mirror), from the first and last
/// address of each rule's `from` prefix and from 0, received on each
/// interface and as the host's own packet. Returns the number of lookups (0 while both
/// route by main alone: the fib layer covers that).
pub fn compare_policy(
    fresh: &KernelState,
    state: &RouterState,
    tables: &RouterTables,
    out: &mut Vec<Difference>,
) -> usize {
    let mut with_fresh = state.clone();
    with_fresh.kernel = fresh.clone();
    let built = match with_fresh.build() {
        Ok(b) => b,
        Err(e) => {
            out.push(Difference {
                layer: "policy".into(),
                item: "build".into(),
                kind: "different".into(),
                want: format!("a full build from the kernel's state: {e}"),
                have: "the running tables".into(),
            });
            return 0;
        }
    };
    let (want, have) = (&built.tables, tables);
    if want.policy().main_only() && have.policy().main_only() {
        return 0;
    }
    // Destinations and sources of each family, from the fresh state.
    let mut dst: (BTreeSet<u32>, BTreeSet<u128>) = Default::default();
    let mut src: (BTreeSet<u32>, BTreeSet<u128>) = Default::default();
    src.0.insert(0);
    src.1.insert(0);
    let add = |c: &Cidr, to: &mut (BTreeSet<u32>, BTreeSet<u128>)| match c {
        Cidr::V4(p) => {
            to.0.extend([p.addr(), p.last()]);
        }
        Cidr::V6(p) => {
            to.1.extend([p.addr(), p.last()]);
        }
    };
    // From both the dump and the mirror: where they differ is where the
    // answers may.
    for k in [fresh, &state.kernel] {
        for r in &k.rules {
            if let Some(c) = &r.dst {
                add(c, &mut dst);
            }
            if let Some(c) = &r.src {
                add(c, &mut src);
            }
        }
        for routes in k.tables.values() {
            for (p, _) in routes.keys() {
                add(p, &mut dst);
            }
        }
    }
    // Bounded: at most 2,048 destinations and 16 sources per family,
    // evenly spread (a full table in a looked-up table is sampled).
    let (dst4, dst6) = (spread(&dst.0, 2048), spread(&dst.1, 2048));
    let (src4, src6) = (spread(&src.0, 16), spread(&src.1, 16));
    let iifs: Vec<Option<u16>> = (0..have.interfaces().len() as u16)
        .map(Some)
        .chain([None])
        .collect();
    let iif_name = |i: Option<u16>| match i {
        Some(i) => have.interfaces()[usize::from(i)].name.clone(),
        None => "lo".into(),
    };
    let v4 = dst4.iter().flat_map(|&d| {
        let d = IpAddr::V4(d.into());
        src4.iter().map(move |&s| (d, IpAddr::V4(s.into())))
    });
    let v6 = dst6.iter().flat_map(|&d| {
        let d = IpAddr::V6(d.into());
        src6.iter().map(move |&s| (d, IpAddr::V6(s.into())))
    });
    let mut lookups = 0;
    for (d, s) in v4.chain(v6) {
        for &i in &iifs {
            // The host's own packets have no source yet.
            let s_opt = i.map(|_| s);
            let (w, h) = (route_text(want, s_opt, d, i), route_text(have, s_opt, d, i));
            lookups += 1;
            if w != h {
                out.push(Difference {
                    layer: "policy".into(),
                    item: format!("{d} from {s} iif {}", iif_name(i)),
                    kind: "different".into(),
                    want: w,
                    have: h,
                });
            }
        }
    }
    lookups
}

/// The route `t`'s rules pick for a packet from `src` to `dst` received on
/// `iif`, as `show route` prints next hops ("no route" for none).
fn route_text<F4: Lookup<u32>, F6: Lookup<u128>, A>(
    t: &pipeline::Tables<F4, F6, A>,
    src: Option<IpAddr>,
    dst: IpAddr,
    iif: Option<u16>,
) -> String {
    let id = match dst {
        IpAddr::V4(d) => {
            let s = src.and_then(|s| match s {
                IpAddr::V4(a) => Some(u32::from(a)),
                IpAddr::V6(_) => None,
            });
            t.route4(s, d.into(), iif, None)
        }
        IpAddr::V6(d) => {
            let s = src.and_then(|s| match s {
                IpAddr::V6(a) => Some(u128::from(a)),
                IpAddr::V4(_) => None,
            });
            t.route6(s, d.into(), iif, None)
        }
    };
    id.and_then(|id| t.target(id))
        .map(|x| target_strings(x, t.interfaces()).join(", "))
        .unwrap_or_else(|| "no route".into())
}

/// At most `n` of `set`'s values, evenly spread, the first included.
fn spread<T: Copy>(set: &BTreeSet<T>, n: usize) -> Vec<T> {
    let step = set.len().div_ceil(n).max(1);
    set.iter().step_by(step).copied().collect()
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
    let mut lookups = compare_fib(&input.installed, &input.tables, &mut out);
    lookups += compare_policy(&input.fresh, &input.state, &input.tables, &mut out);
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
    use rib::Router;

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
                vrf: None,
                master: None,
                kind: None,
                vlan: None,
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
    fn a_rule_changed_behind_the_mirrors_back_is_found() {
        use crate::netlink::Event;
        use rib::rule::{KernelRule, RuleVerb};
        let cfg = config::Config::parse("t.toml", CFG).unwrap();
        let mut state = RouterState::new(cfg);
        for (i, name) in [(5u32, "d0"), (6, "d1")] {
            state.kernel.apply(&Event::Link {
                add: true,
                ifindex: i,
                name: name.into(),
                mac: Some([2, 0, 0, 0, 0, i as u8]),
                mtu: Some(1500),
                up: true,
                vrf: None,
                master: None,
                kind: None,
                vlan: None,
            });
        }
        let rule = |priority, verb, src: &str| KernelRule {
            src: Some(src.parse().unwrap()),
            ..rib::rule::testing::rule(priority, verb)
        };
        let blackhole = Event::Route {
            add: true,
            prefix: "203.0.113.0/24".parse().unwrap(),
            table: 100,
            kind: libc::RTN_BLACKHOLE,
            metric: 0,
            hops: Vec::new(),
            nh_id: None,
            detail: Default::default(),
        };
        state.kernel.apply(&blackhole);
        let mut rules = rib::rule::testing::defaults();
        rules.insert(rule(100, RuleVerb::Lookup(100), "198.18.10.0/24"));
        for r in rules {
            state.kernel.apply(&Event::Rule { add: true, rule: r });
        }
        let (r, t) = Router::new(state).unwrap();
        let t = Arc::new(t);
        let input = |fresh: KernelState| AuditInput {
            fresh,
            state: r.state.clone(),
            installed: installed(&r),
            tables: Arc::clone(&t),
            engine: None,
        };
        // The kernel as the mirror has it: clean, and the policy layer
        // looked.
        let (d, c) = audit(input(r.state.kernel.clone()));
        assert!(d.is_empty(), "{d:?}");
        assert!(c.lookups > 10, "{c:?}");
        // The rule's source changed in the kernel, the broadcast lost.
        let mut fresh = r.state.kernel.clone();
        fresh.rules.retain(|r| r.priority != 100);
        fresh
            .rules
            .insert(rule(100, RuleVerb::Lookup(100), "198.18.11.0/24"));
        let (d, _) = audit(input(fresh));
        let items: Vec<(&str, &str, &str)> = d
            .iter()
            .map(|d| (d.layer.as_str(), d.kind.as_str(), d.item.as_str()))
            .collect();
        assert!(
            items.contains(&(
                "kernel",
                "missing",
                "ip -4 rule 100: from 198.18.11.0/24 lookup 100"
            )),
            "{items:?}"
        );
        assert!(
            items.contains(&(
                "kernel",
                "extra",
                "ip -4 rule 100: from 198.18.10.0/24 lookup 100"
            )),
            "{items:?}"
        );
        // And the routes the rules pick differ where the sources do.
        let policy: Vec<&Difference> = d.iter().filter(|d| d.layer == "policy").collect();
        assert!(
            policy
                .iter()
                .any(|d| d.item == "203.0.113.0 from 198.18.11.0 iif d0"
                    && d.want == "blackhole"
                    && d.have == "via 198.19.0.108 dev d1"),
            "{policy:?}"
        );
        assert!(
            policy
                .iter()
                .any(|d| d.item == "203.0.113.0 from 198.18.10.0 iif d0"
                    && d.want == "via 198.19.0.108 dev d1"
                    && d.have == "blackhole"),
            "{policy:?}"
        );
        // A route of table 100 lost the same way.
        let mut fresh = r.state.kernel.clone();
        fresh.tables.clear();
        let (d, _) = audit(input(fresh));
        assert!(
            d.iter().any(|d| d.layer == "kernel"
                && d.kind == "extra"
                && d.item == "203.0.113.0/24 table 100 metric 0"),
            "{d:?}"
        );
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
            rib::kernel::KernelRoute::Discard(pipeline::Discard::Blackhole),
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
