//! The live router tables: built whole at start (and after interface,
//! address or config changes), then kept current incrementally.
//!
//! Route changes touch only the changed prefixes: each one's winning route
//! (control socket, then config, then connected, then the kernel's lowest
//! metric) is written into the double-buffered FIBs ([`fib::shared`]),
//! published with one swap; readers never wait. Neighbour changes rebuild
//! only the small part of the tables (interfaces, next-hop sets,
//! neighbours) around the same FIB readers. Next-hop sets are interned:
//! ids are stable for the life of a FIB, so an incremental change that
//! needs a new set publishes the tables holding it before the FIB entry
//! that points at it.

use crate::BuildError;
use crate::Origin;
use crate::event::RT_TABLE_MAIN;
use crate::snapshot::Snapshot;
use crate::state::{RouteEntry, RouteView, RouterState};
use crate::{Decision, Statics};
use fib::shared::{FibReader, FibWriter};
use pipeline::{Interface, InterfaceId, NextHopId, Policy, RouteTarget, Tables, TablesBuilder};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use wire::Cidr;

/// The snapshot type the workers read: the live FIBs and the config's
/// firewall as the ACL stage (its forward chain).
pub type RouterTables = Tables<FibReader<u32>, FibReader<u128>, config::ConfigAcl>;

/// The router's tables and what is needed to change them.
#[derive(Debug)]
pub struct Router {
    /// Config, kernel mirror and control-socket additions.
    pub state: RouterState,
    fib4: FibWriter<u32>,
    fib6: FibWriter<u128>,
    ifaces: Vec<Interface>,
    ports: Vec<String>,
    by_ifindex: HashMap<u32, InterfaceId>,
    /// Route targets (next-hop sets, discards) by id, their ids, and
    /// their text for `show route`.
    sets: Vec<RouteTarget>,
    set_ids: HashMap<RouteTarget, NextHopId>,
    set_text: Vec<Vec<String>>,
    /// Installed routes: prefix -> (origin, index into `set_text`).
    routes: BTreeMap<Cidr, (Origin, u32)>,
    /// Kernel routes not installed because they leave through a link
    /// fastfwd does not forward on: prefix -> that link.
    foreign: BTreeMap<Cidr, u32>,
    /// Policy rules and the tables they look up, compiled.
    policy: Arc<Policy>,
    neighbours: Vec<crate::state::NeighbourView>,
    local_addrs: Vec<(u16, IpAddr)>,
    warnings: Vec<String>,
    /// Keys the firewall's connection-table hash (random per daemon, so
    /// nobody outside can aim flows at one bucket).
    conntrack_seed: u64,
    /// The connection tables' epoch, and the rule set it was last given
    /// to: it changes whenever the tables cannot carry over.
    conntrack_epoch: (u32, Option<std::sync::Arc<firewall::Firewall>>),
}

impl Router {
    /// Builds everything from `state` and publishes nothing (the caller
    /// creates its [`Snapshot`] from the returned tables).
    pub fn new(state: RouterState) -> Result<(Router, RouterTables), BuildError> {
        let (fib4, _) = FibWriter::new();
        let (fib6, _) = FibWriter::new();
        let mut r = Router {
            state,
            fib4,
            fib6,
            ifaces: Vec::new(),
            ports: Vec::new(),
            by_ifindex: HashMap::new(),
            sets: Vec::new(),
            set_ids: HashMap::new(),
            set_text: Vec::new(),
            routes: BTreeMap::new(),
            foreign: BTreeMap::new(),
            policy: Arc::default(),
            neighbours: Vec::new(),
            local_addrs: Vec::new(),
            warnings: Vec::new(),
            conntrack_seed: random_seed(),
            conntrack_epoch: (0, None),
        };
        let tables = r.build_all()?;
        Ok((r, tables))
    }

    /// Rebuilds everything (new FIBs, new next-hop ids) and publishes it as
    /// one snapshot. On error the running tables stay.
    pub fn rebuild_all(&mut self, snap: &Snapshot) -> Result<(), BuildError> {
        let tables = self.build_all()?;
        snap.publish(tables);
        Ok(())
    }

    fn build_all(&mut self) -> Result<RouterTables, BuildError> {
        let built = self.state.build()?;
        let mut tables = built.tables;
        let mut sets = Vec::new();
        while let Some(t) = tables.target(sets.len() as NextHopId) {
            sets.push(t.clone());
        }
        let ifaces = tables.interfaces().to_vec();
        let routes = built
            .routes
            .iter()
            .map(|e: &RouteEntry| (e.prefix, (e.origin, e.hops)))
            .collect();
        let (fib4, reader4) = FibWriter::from_trie(std::mem::take(&mut tables.fib4));
        let (fib6, reader6) = FibWriter::from_trie(std::mem::take(&mut tables.fib6));
        let by_ifindex = crate::state::link_interfaces(&self.state.kernel, &ifaces, &built.ports);
        let mut set_ids = HashMap::new();
        for (id, s) in sets.iter().enumerate() {
            set_ids.entry(s.clone()).or_insert(id as NextHopId);
        }
        self.fib4 = fib4;
        self.fib6 = fib6;
        self.ifaces = ifaces;
        self.ports = built.ports;
        self.by_ifindex = by_ifindex;
        self.sets = sets;
        self.set_ids = set_ids;
        self.set_text = built.hop_sets;
        self.routes = routes;
        self.foreign = built.foreign;
        self.policy = Arc::clone(tables.policy());
        self.local_addrs = built.local_addrs;
        self.warnings = built.warnings;
        let tables = self.small_tables(reader4, reader6);
        Ok(tables)
    }

    /// The tables around the current FIB readers: interfaces, next-hop
    /// sets (same ids) and neighbours as the state has them now.
    fn small_tables(&mut self, r4: FibReader<u32>, r6: FibReader<u128>) -> RouterTables {
        let mut b = TablesBuilder::new();
        for i in &self.ifaces {
            // These interfaces were accepted by the full build.
            let _ = b.add_interface(i.clone());
        }
        for s in &self.sets {
            // Accepted when first added: ids stay as they were.
            let _ = b.add_target(s);
        }
        // Compiled over these interfaces and sets: accepted.
        let _ = b.set_policy(Arc::clone(&self.policy));
        self.neighbours = self.state.neighbour_views(&self.ifaces, &self.by_ifindex);
        for n in &self.neighbours {
            if let (Some(id), Ok(mac)) = (
                self.ifaces.iter().position(|i| i.name == n.interface),
                n.mac.parse::<config::MacAddr>(),
            ) {
                let _ = b.add_neighbour(id as InterfaceId, n.ip, wire::MacAddr(mac.0));
            }
        }
        // The same compiled rule set (one `Arc`) in every snapshot until the
        // config changes, so workers keep their counters and connections.
        let fw = self
            .state
            .config
            .firewall
            .as_ref()
            .map(|f| std::sync::Arc::clone(&f.compiled));
        let epoch = self.conntrack_epoch_for(fw.as_ref());
        let acl = fw.map(|f| firewall::PipelineFirewall::with_epoch(f, self.conntrack_seed, epoch));
        b.build_with_acl(r4, r6, acl)
    }

    /// The connection tables' epoch for rule set `fw`: the last one's when
    /// the tables carry over (both rule sets track connections with the
    /// same settings), a new one otherwise. Workers start new tables on a
    /// new epoch, and the XDP engine's fast path forgets the old flows.
    fn conntrack_epoch_for(&mut self, fw: Option<&std::sync::Arc<firewall::Firewall>>) -> u32 {
        let (epoch, last) = &self.conntrack_epoch;
        let same = match (last, fw) {
            (Some(a), Some(b)) => {
                std::sync::Arc::ptr_eq(a, b)
                    || (a.stateful()
                        && b.stateful()
                        && a.conntrack_config() == b.conntrack_config())
            }
            (None, None) => true,
            _ => false,
        };
        let epoch = if same { *epoch } else { epoch.wrapping_add(1) };
        self.conntrack_epoch = (epoch, fw.cloned());
        epoch
    }

    /// Policy rules, or the tables they look up, changed: recompile them
    /// over the same FIBs and next-hop ids (a new target gets a new id) and
    /// republish. Out of ids: a full rebuild.
    pub fn refresh_policy(&mut self, snap: &Snapshot) {
        let Router {
            state,
            ifaces,
            by_ifindex,
            sets,
            set_ids,
            set_text,
            ..
        } = self;
        let iif_of =
            |name: &str, v6| crate::state::interfaces_on_link(&state.kernel, by_ifindex, name, v6);
        let mut intern = |t: &RouteTarget| -> Result<NextHopId, pipeline::TableError> {
            if let Some(&id) = set_ids.get(t) {
                return Ok(id);
            }
            if sets.len() >= pipeline::MAX_TARGETS {
                return Err(pipeline::TableError::TooManyTargets);
            }
            let id = sets.len() as NextHopId;
            set_text.push(crate::state::target_strings(t, ifaces));
            sets.push(t.clone());
            set_ids.insert(t.clone(), id);
            Ok(id)
        };
        match crate::policy::compile(&state.kernel, &iif_of, by_ifindex, &mut intern) {
            Ok((policy, warnings)) => {
                self.policy = Arc::new(policy);
                self.warnings.retain(|w| !w.starts_with("policy: "));
                self.warnings.extend(warnings);
                let t = self.small_tables(self.fib4.reader(), self.fib6.reader());
                snap.publish(t);
            }
            Err(e) => {
                self.warnings.push(format!("policy rules: {e}"));
                if let Err(e) = self.rebuild_all(snap) {
                    self.warnings.push(format!("rebuild: {e}"));
                }
            }
        }
    }

    /// Neighbours changed: republish the tables around the same FIBs.
    pub fn refresh_neighbours(&mut self, snap: &Snapshot) {
        let t = self.small_tables(self.fib4.reader(), self.fib6.reader());
        snap.publish(t);
    }

    /// The RIB's decision for `p` now, over these tables' interfaces.
    fn decide(&self, p: Cidr) -> Decision {
        let config = self
            .state
            .config
            .routes
            .iter()
            .rev()
            .find(|r| r.prefix == p)
            .map(|r| r.next_hops.as_slice());
        let statics = Statics {
            api: self
                .state
                .api_routes
                .get(&p)
                .map(|r| r.next_hops.as_slice()),
            config,
            connected: self.is_connected_subnet(p),
        };
        let interfaces = crate::state::IfMap {
            ifaces: &self.ifaces,
            by_ifindex: &self.by_ifindex,
        };
        crate::best(RT_TABLE_MAIN, p, statics, &self.state.kernel, &interfaces).0
    }

    /// Whether `p` is the connected subnet of an interface that routes by
    /// main (one not a member of a VRF device).
    fn is_connected_subnet(&self, p: Cidr) -> bool {
        let members = crate::state::vrf_members(&self.state.kernel, &self.by_ifindex);
        self.ifaces.iter().enumerate().any(|(id, i)| {
            !members.contains(&(id as InterfaceId))
                && crate::state::connected_subnets(i).any(|q| q == p)
        })
    }

    /// Re-decides the routes of `prefixes` and publishes the changes.
    pub fn update_routes(&mut self, prefixes: &[Cidr], snap: &Snapshot) {
        // A connected subnet is decided with the interfaces' addresses (a
        // full build); a kernel route to one changes nothing, a control or
        // config route to one overrides it or, gone, gives it back.
        let overridden = |r: &Router, p: &Cidr| {
            r.state.api_routes.contains_key(p)
                || r.state.config.routes.iter().any(|c| c.prefix == *p)
        };
        if prefixes.iter().any(|p| {
            self.is_connected_subnet(*p)
                && (overridden(self, p)
                    || !matches!(self.routes.get(p), Some((Origin::Connected, _))))
        }) {
            if let Err(e) = self.rebuild_all(snap) {
                self.warnings.push(format!("rebuild: {e}"));
            }
            return;
        }
        let mut new_sets = false;
        for &p in prefixes {
            if matches!(self.routes.get(&p), Some((Origin::Connected, _))) {
                continue;
            }
            match self.decide(p) {
                Decision::Route(origin, target) => {
                    self.foreign.remove(&p);
                    let id = match self.set_ids.get(&target) {
                        Some(&id) => id,
                        None => {
                            if matches!(&target, RouteTarget::Forward(h) if h.len() > pipeline::MAX_ECMP)
                            {
                                // As the full build: the prefix has no
                                // route (not the one it had).
                                self.warnings.push(format!("route {p}: too many next hops"));
                                self.routes.remove(&p);
                                match p {
                                    Cidr::V4(q) => {
                                        self.fib4.remove(&q);
                                    }
                                    Cidr::V6(q) => {
                                        self.fib6.remove(&q);
                                    }
                                }
                                continue;
                            }
                            if self.sets.len() >= pipeline::MAX_TARGETS {
                                // Out of next-hop ids: a full build numbers
                                // only the sets in use, or refuses (the
                                // running tables stay, with the warning).
                                if let Err(e) = self.rebuild_all(snap) {
                                    self.warnings.push(format!("rebuild: {e}"));
                                }
                                return;
                            }
                            let id = self.sets.len() as NextHopId;
                            self.set_text
                                .push(crate::state::target_strings(&target, &self.ifaces));
                            self.sets.push(target.clone());
                            self.set_ids.insert(target, id);
                            new_sets = true;
                            id
                        }
                    };
                    let text = self.text_of(id);
                    self.routes.insert(p, (origin, text));
                    match p {
                        Cidr::V4(q) => {
                            self.fib4.insert(q, id);
                        }
                        Cidr::V6(q) => {
                            self.fib6.insert(q, id);
                        }
                    }
                }
                // Decided by a full build (above).
                Decision::Connected => {}
                decision => {
                    match decision {
                        Decision::Foreign(ifindex) => self.foreign.insert(p, ifindex),
                        _ => self.foreign.remove(&p),
                    };
                    self.routes.remove(&p);
                    match p {
                        Cidr::V4(q) => {
                            self.fib4.remove(&q);
                        }
                        Cidr::V6(q) => {
                            self.fib6.remove(&q);
                        }
                    }
                }
            }
        }
        if new_sets {
            // The sets first, then the FIB entries that use them.
            let t = self.small_tables(self.fib4.reader(), self.fib6.reader());
            snap.publish(t);
        }
        if self.fib4.unpublished() > 0 {
            self.fib4.publish();
        }
        if self.fib6.unpublished() > 0 {
            self.fib6.publish();
        }
        if !new_sets {
            // Bump the generation so held frames are retried.
            let t = self.small_tables(self.fib4.reader(), self.fib6.reader());
            snap.publish(t);
        }
    }

    /// Index into the text table of next-hop set `id`.
    fn text_of(&self, id: NextHopId) -> u32 {
        // Sets from the full build and later ones are numbered alike.
        let text = crate::state::target_strings(&self.sets[id as usize], &self.ifaces);
        self.set_text
            .iter()
            .position(|t| *t == text)
            .map_or(0, |i| i as u32)
    }

    /// Whether a change to kernel link `ifindex` concerns these tables: it
    /// is one of the interfaces they forward on, or a link (perhaps new)
    /// whose name the config uses, or a VLAN device on such a link.
    pub fn concerns_link(&self, ifindex: u32) -> bool {
        self.by_ifindex.contains_key(&ifindex)
            || self.state.kernel.links.get(&ifindex).is_some_and(|l| {
                self.ports.contains(&l.name)
                    || l.vlan
                        .is_some_and(|v| v.parent != ifindex && self.concerns_link(v.parent))
            })
    }

    /// The kernel link of interface `id`: its port's link, or the kernel
    /// VLAN device mapped to it (`state::link_interfaces`); None for a
    /// VLAN interface the kernel has no device for.
    pub fn link_of_interface(&self, id: InterfaceId) -> Option<u32> {
        self.by_ifindex
            .iter()
            .find(|&(_, &i)| i == id)
            .map(|(&ifindex, _)| ifindex)
    }

    /// Port names by port id.
    pub fn ports(&self) -> &[String] {
        &self.ports
    }

    /// The router's own addresses.
    pub fn local_addrs(&self) -> &[(u16, IpAddr)] {
        &self.local_addrs
    }

    /// The links kernel routes leave through that fastfwd does not forward
    /// on (those routes are not installed).
    pub fn foreign_links(&self) -> std::collections::BTreeSet<u32> {
        self.foreign.values().copied().collect()
    }

    /// The kernel routes left out that leave through `links`, named per
    /// link.
    pub fn foreign_routes_via<'a>(&self, links: impl Iterator<Item = &'a u32>) -> Vec<String> {
        let links: std::collections::BTreeSet<u32> = links.copied().collect();
        let some: BTreeMap<Cidr, u32> = self
            .foreign
            .iter()
            .filter(|(_, l)| links.contains(l))
            .map(|(p, l)| (*p, *l))
            .collect();
        crate::state::foreign_routes(&some, &self.state.kernel)
    }

    /// Build warnings, and the kernel routes fastfwd leaves out because
    /// they leave through links it does not forward on, named per link.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = self.warnings.clone();
        out.extend(crate::state::foreign_routes(
            &self.foreign,
            &self.state.kernel,
        ));
        out
    }

    /// Every installed route.
    pub fn route_views(&self) -> Vec<RouteView> {
        self.routes
            .iter()
            .map(|(p, (o, t))| self.view(p, *o, *t))
            .collect()
    }

    /// Installed routes: (IPv4, IPv6).
    pub fn route_counts(&self) -> (usize, usize) {
        let v4 = self
            .routes
            .keys()
            .filter(|p| matches!(p, Cidr::V4(_)))
            .count();
        (v4, self.routes.len() - v4)
    }

    /// What is installed, cheaply copied for an audit on another thread:
    /// prefix -> index into the next-hop texts, and the texts.
    pub fn installed(&self) -> (BTreeMap<Cidr, u32>, Vec<Vec<String>>) {
        (
            self.routes.iter().map(|(p, (_, t))| (*p, *t)).collect(),
            self.set_text.clone(),
        )
    }

    /// At most `max` installed routes after `after` (from the first when
    /// None), in prefix order: a large table shown a part at a time.
    pub fn route_views_after(&self, after: Option<Cidr>, max: usize) -> Vec<RouteView> {
        use std::ops::Bound;
        let from = match after {
            Some(p) => Bound::Excluded(p),
            None => Bound::Unbounded,
        };
        self.routes
            .range((from, Bound::Unbounded))
            .take(max)
            .map(|(p, (o, t))| self.view(p, *o, *t))
            .collect()
    }

    fn view(&self, p: &Cidr, origin: Origin, text: u32) -> RouteView {
        RouteView {
            prefix: p.to_string(),
            origin,
            next_hops: self
                .set_text
                .get(text as usize)
                .cloned()
                .unwrap_or_default(),
        }
    }

    /// The route a lookup of `query`'s address selects among routes no
    /// longer than `query`.
    pub fn longest_match(&self, query: Cidr) -> Option<RouteView> {
        let addr: IpAddr = match query {
            Cidr::V4(p) => IpAddr::V4(p.network()),
            Cidr::V6(p) => IpAddr::V6(p.network()),
        };
        (0..=query.prefix_len()).rev().find_map(|len| {
            let p = match addr {
                IpAddr::V4(a) => Cidr::V4(wire::Ipv4Cidr::new(u32::from(a), len)?),
                IpAddr::V6(a) => Cidr::V6(wire::Ipv6Cidr::new(u128::from(a), len)?),
            };
            self.routes.get(&p).map(|(o, t)| self.view(&p, *o, *t))
        })
    }

    /// Neighbours in use.
    pub fn neighbours(&self) -> &[crate::state::NeighbourView] {
        &self.neighbours
    }
}

/// A next hop of a control-socket route as the request names it, before
/// it is checked: a gateway, an interface, or both.
#[derive(Debug, Clone, Copy, Default)]
pub struct HopRequest<'a> {
    /// The gateway, as written.
    pub via: Option<&'a str>,
    /// The interface's name.
    pub dev: Option<&'a str>,
}

/// The control socket's changes (`route_add`, `route_del`,
/// `neighbor_add`, `neighbor_del`): each checks its request, changes
/// `state` and nothing else; the caller then applies it
/// ([`Router::update_routes`] for the route, [`Router::refresh_neighbours`]
/// for a neighbour) and answers. A refused request changes nothing.
impl Router {
    /// Adds or replaces a control-socket route; returns its prefix. Its
    /// next hops are checked as the config's are ([`config::hop::resolve`]):
    /// one without `dev` goes out of the interface whose connected subnet
    /// holding its gateway is the longest.
    pub fn api_route_add(
        &mut self,
        prefix: &str,
        hops: &[HopRequest<'_>],
        snap: &Snapshot,
    ) -> Result<Cidr, String> {
        let p: Cidr = prefix.parse().map_err(|e| format!("{prefix}: {e}"))?;
        if hops.is_empty() {
            return Err("a route needs at least one next hop (via GW and/or dev IFACE)".into());
        }
        if hops.len() > pipeline::MAX_ECMP {
            return Err(format!(
                "{} next hops: at most {} (the ECMP width)",
                hops.len(),
                pipeline::MAX_ECMP
            ));
        }
        // The config's resolver, over the interfaces as published (the
        // config's, with the kernel's addresses of their ports merged in).
        let tables = snap.load();
        let mut next_hops: Vec<config::NextHop> = Vec::new();
        for h in hops {
            let via: Option<IpAddr> = match h.via {
                Some(v) => Some(v.parse().map_err(|e| format!("{v}: {e}"))?),
                None => None,
            };
            let hop = config::hop::resolve(p, h.dev, via, tables.interfaces())
                .map_err(|e| e.to_string())?;
            if next_hops.contains(&hop) {
                return Err(format!("next hop {hop} is listed twice"));
            }
            next_hops.push(hop);
        }
        self.state
            .api_routes
            .insert(p, crate::state::ApiRoute { next_hops });
        Ok(p)
    }

    /// Deletes a route added through the control socket; returns its
    /// prefix.
    pub fn api_route_del(&mut self, prefix: &str) -> Result<Cidr, String> {
        match prefix.parse::<Cidr>() {
            Ok(p) if self.state.api_routes.remove(&p).is_some() => Ok(p),
            Ok(p) => Err(format!("no route {p} was added through the control socket")),
            Err(e) => Err(format!("{prefix}: {e}")),
        }
    }

    /// Adds or replaces a static neighbour on a configured interface.
    pub fn api_neighbour_add(&mut self, dev: &str, ip: &str, mac: &str) -> Result<(), String> {
        let ip: IpAddr = ip.parse().map_err(|e| format!("{ip}: {e}"))?;
        let mac: config::MacAddr = mac.parse().map_err(|e| format!("{mac}: {e}"))?;
        if self.state.config.interface(dev).is_none() {
            return Err(format!("no interface {dev}"));
        }
        self.state
            .api_neighbours
            .insert((dev.to_string(), ip), mac.0);
        Ok(())
    }

    /// Deletes a static neighbour added through the control socket.
    pub fn api_neighbour_del(&mut self, dev: &str, ip: &str) -> Result<(), String> {
        match ip.parse::<IpAddr>() {
            Ok(a)
                if self
                    .state
                    .api_neighbours
                    .remove(&(dev.to_string(), a))
                    .is_some() =>
            {
                Ok(())
            }
            Ok(a) => Err(format!(
                "no neighbour {a} on {dev} was added through the control socket"
            )),
            Err(e) => Err(format!("{ip}: {e}")),
        }
    }
}

/// 64 random bits from the standard library's per-process hash keys.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x6661_7374_6677_6400);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, KernelHop, RT_TABLE_MAIN};
    use fib::Lookup;
    use pipeline::NextHop;

    const CONFIG: &str = r#"[[interfaces]]
name = "d0"
mac = "02:00:00:00:00:10"
addresses = ["198.18.0.10/24"]

[[interfaces]]
name = "d1"
mac = "02:00:00:00:01:10"
addresses = ["198.19.0.10/24"]
"#;

    fn router() -> (Router, Snapshot) {
        let mut s = RouterState::new(config::Config::parse("router.toml", CONFIG).unwrap());
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
        let (r, t) = Router::new(s).unwrap();
        (r, Snapshot::new(t))
    }

    fn route(add: bool, p: &str, ifindex: u32, gw: &str) -> Event {
        Event::Route {
            add,
            prefix: p.parse().unwrap(),
            table: RT_TABLE_MAIN,
            kind: 1,
            metric: 0,
            hops: vec![KernelHop {
                ifindex,
                gateway: Some(gw.parse().unwrap()),
            }],
            nh_id: None,
            detail: Default::default(),
        }
    }

    fn hops_of(snap: &Snapshot, addr: u32) -> Option<Vec<NextHop>> {
        let t = snap.load();
        let id = t.fib4.lookup(addr)?;
        t.next_hops(id).map(<[NextHop]>::to_vec)
    }

    /// The installed routes as `show route` lists them.
    fn views(r: &Router) -> Vec<(String, String, Vec<String>)> {
        r.route_views()
            .into_iter()
            .map(|v| (v.prefix, format!("{:?}", v.origin), v.next_hops))
            .collect()
    }

    /// What a full build of the same state installs.
    fn rebuilt(r: &Router) -> Vec<(String, String, Vec<String>)> {
        let (fresh, _) = Router::new(r.state.clone()).unwrap();
        views(&fresh)
    }

    fn api(hops: &[(&str, &str)]) -> crate::state::ApiRoute {
        crate::state::ApiRoute {
            next_hops: hops
                .iter()
                .map(|&(dev, via)| config::NextHop {
                    interface: dev.into(),
                    via: Some(via.parse().unwrap()),
                })
                .collect(),
        }
    }

    /// Found by the control_request fuzz target: a control-socket route to
    /// a connected subnet, and one with more next hops than the ECMP width,
    /// each left the incremental routes different from a full build.
    #[test]
    fn control_routes_to_connected_subnets_and_too_wide_sets_update_as_a_build() {
        let (mut r, snap) = router();
        let connected: Cidr = "198.18.0.0/24".parse().unwrap();
        r.state
            .api_routes
            .insert(connected, api(&[("d1", "198.19.0.20")]));
        r.update_routes(&[connected], &snap);
        assert_eq!(views(&r), rebuilt(&r));
        assert!(
            views(&r)
                .iter()
                .any(|(p, o, _)| p == "198.18.0.0/24" && o == "Api")
        );
        r.state.api_routes.remove(&connected);
        r.update_routes(&[connected], &snap);
        assert_eq!(views(&r), rebuilt(&r));
        assert!(
            views(&r)
                .iter()
                .any(|(p, o, _)| p == "198.18.0.0/24" && o == "Connected")
        );

        let p: Cidr = "203.0.113.0/24".parse().unwrap();
        r.state.api_routes.insert(p, api(&[("d1", "198.19.0.20")]));
        r.update_routes(&[p], &snap);
        let wide: Vec<(String, String)> = (0..=pipeline::MAX_ECMP)
            .map(|i| ("d1".to_string(), format!("198.19.0.{}", 20 + i)))
            .collect();
        let wide: Vec<(&str, &str)> = wide.iter().map(|(d, v)| (d.as_str(), v.as_str())).collect();
        r.state.api_routes.insert(p, api(&wide));
        r.update_routes(&[p], &snap);
        assert_eq!(views(&r), rebuilt(&r));
        assert!(!views(&r).iter().any(|(q, _, _)| q == "203.0.113.0/24"));
        assert_eq!(hops_of(&snap, 0xcb00_7105), None, "203.0.113.5 unrouted");
    }

    #[test]
    fn route_changes_are_applied_incrementally() {
        let (mut r, snap) = router();
        let g0 = snap.generation();
        let a = 0x0a01_0203; // 10.1.2.3
        assert_eq!(hops_of(&snap, a), None);
        r.state
            .kernel
            .apply(&route(true, "10.1.0.0/16", 6, "198.19.0.108"));
        r.update_routes(&["10.1.0.0/16".parse().unwrap()], &snap);
        let h = hops_of(&snap, a).expect("route installed");
        assert_eq!(
            h,
            vec![NextHop {
                interface: 1,
                gateway: Some("198.19.0.108".parse().unwrap())
            }]
        );
        assert!(snap.generation() > g0);
        assert_eq!(
            r.longest_match("10.1.2.3/32".parse().unwrap())
                .unwrap()
                .origin,
            Origin::Kernel
        );

        // A second route through the same gateway reuses the set.
        let sets = r.sets.len();
        r.state
            .kernel
            .apply(&route(true, "10.2.0.0/16", 6, "198.19.0.108"));
        r.update_routes(&["10.2.0.0/16".parse().unwrap()], &snap);
        assert_eq!(r.sets.len(), sets);

        // The control socket overrides the kernel for the same prefix.
        r.state.api_routes.insert(
            "10.1.0.0/16".parse().unwrap(),
            crate::state::ApiRoute {
                next_hops: vec![config::NextHop {
                    interface: "d0".into(),
                    via: None,
                }],
            },
        );
        r.update_routes(&["10.1.0.0/16".parse().unwrap()], &snap);
        assert_eq!(
            hops_of(&snap, a).unwrap()[0],
            NextHop {
                interface: 0,
                gateway: None
            }
        );
        r.state.api_routes.clear();
        r.update_routes(&["10.1.0.0/16".parse().unwrap()], &snap);
        assert_eq!(hops_of(&snap, a).unwrap()[0].interface, 1);

        // Deleted in the kernel: gone.
        r.state
            .kernel
            .apply(&route(false, "10.1.0.0/16", 6, "198.19.0.108"));
        r.update_routes(&["10.1.0.0/16".parse().unwrap()], &snap);
        assert_eq!(hops_of(&snap, a), None);
        assert!(r.longest_match("10.1.2.3/32".parse().unwrap()).is_none());
        // Connected routes stay whatever the kernel says about them.
        r.update_routes(&["198.19.0.0/24".parse().unwrap()], &snap);
        assert!(hops_of(&snap, 0xc613_006c).is_some());
    }

    fn discard(add: bool, p: &str, kind: u8, metric: u32) -> Event {
        Event::Route {
            add,
            prefix: p.parse().unwrap(),
            table: RT_TABLE_MAIN,
            kind,
            metric,
            hops: vec![],
            nh_id: None,
            detail: Default::default(),
        }
    }

    #[test]
    fn discarding_kernel_routes_win_by_metric_and_go_away() {
        let (mut r, snap) = router();
        let a = 0x0a01_0203; // 10.1.2.3
        let target = |snap: &Snapshot| {
            let t = snap.load();
            t.fib4.lookup(a).and_then(|id| t.target(id).cloned())
        };
        r.state
            .kernel
            .apply(&route(true, "10.1.0.0/16", 6, "198.19.0.108"));
        let p24: Cidr = "10.1.2.0/24".parse().unwrap();
        for (kind, d) in [
            (6, pipeline::Discard::Blackhole),
            (7, pipeline::Discard::Unreachable),
            (8, pipeline::Discard::Prohibit),
        ] {
            r.state.kernel.apply(&discard(true, "10.1.2.0/24", kind, 0));
            r.update_routes(&["10.1.0.0/16".parse().unwrap(), p24], &snap);
            assert_eq!(target(&snap), Some(RouteTarget::Discard(d)));
            let v = r.longest_match("10.1.2.3/32".parse().unwrap()).unwrap();
            assert_eq!(v.next_hops, vec![d.name().to_string()]);
            r.state
                .kernel
                .apply(&discard(false, "10.1.2.0/24", kind, 0));
        }
        // A unicast /24 at metric 0 and a blackhole at 20: the unicast
        // wins; when it goes, the blackhole takes over; then the /16.
        r.state
            .kernel
            .apply(&route(true, "10.1.2.0/24", 5, "198.18.0.108"));
        r.update_routes(&[p24], &snap);
        assert!(matches!(target(&snap), Some(RouteTarget::Forward(h)) if h[0].interface == 0));
        r.state.kernel.apply(&discard(true, "10.1.2.0/24", 6, 20));
        r.update_routes(&[p24], &snap);
        assert!(
            matches!(target(&snap), Some(RouteTarget::Forward(_))),
            "metric 0 beats 20"
        );
        r.state
            .kernel
            .apply(&route(false, "10.1.2.0/24", 5, "198.18.0.108"));
        r.update_routes(&[p24], &snap);
        assert_eq!(
            target(&snap),
            Some(RouteTarget::Discard(pipeline::Discard::Blackhole))
        );
        r.state.kernel.apply(&discard(false, "10.1.2.0/24", 6, 20));
        r.update_routes(&[p24], &snap);
        assert!(matches!(target(&snap), Some(RouteTarget::Forward(h)) if h[0].interface == 1));
        // A full rebuild keeps discards too.
        r.state.kernel.apply(&discard(true, "10.1.2.0/24", 8, 0));
        r.rebuild_all(&snap).unwrap();
        assert_eq!(
            target(&snap),
            Some(RouteTarget::Discard(pipeline::Discard::Prohibit))
        );
    }

    #[test]
    fn nexthop_objects_groups_and_their_deletion() {
        use crate::event::KernelNexthop;
        let (mut r, snap) = router();
        let nh = |id, target| Event::Nexthop {
            add: true,
            id,
            target,
        };
        let via = |ifindex, gw: &str| {
            KernelNexthop::Via(KernelHop {
                ifindex,
                gateway: Some(gw.parse().unwrap()),
            })
        };
        r.state.kernel.apply(&nh(1, via(6, "198.19.0.108")));
        r.state.kernel.apply(&nh(2, via(5, "198.18.0.108")));
        r.state
            .kernel
            .apply(&nh(3, KernelNexthop::Group(vec![(1, 1), (2, 3)])));
        r.state.kernel.apply(&nh(4, KernelNexthop::Blackhole));
        let uses = |p: &str, id| Event::Route {
            add: true,
            prefix: p.parse().unwrap(),
            table: RT_TABLE_MAIN,
            kind: 1,
            metric: 0,
            hops: vec![],
            nh_id: Some(id),
            detail: Default::default(),
        };
        for (p, id) in [
            ("10.1.0.0/16", 1),
            ("10.2.0.0/16", 3),
            ("10.3.0.0/16", 4),
            ("10.4.0.0/16", 9),
        ] {
            r.state.kernel.apply(&uses(p, id));
        }
        r.rebuild_all(&snap).unwrap();
        let target = |a: u32| {
            let t = snap.load();
            t.fib4.lookup(a).and_then(|id| t.target(id).cloned())
        };
        let hop = |interface, gw: &str| NextHop {
            interface,
            gateway: Some(gw.parse().unwrap()),
        };
        assert_eq!(
            target(0x0a01_0001),
            Some(RouteTarget::Forward(vec![hop(1, "198.19.0.108")]))
        );
        // Weights 1 and 3: the second member three times.
        assert_eq!(
            target(0x0a02_0001),
            Some(RouteTarget::Forward(vec![
                hop(1, "198.19.0.108"),
                hop(0, "198.18.0.108"),
                hop(0, "198.18.0.108"),
                hop(0, "198.18.0.108"),
            ]))
        );
        assert_eq!(
            target(0x0a03_0001),
            Some(RouteTarget::Discard(pipeline::Discard::Blackhole))
        );
        assert_eq!(target(0x0a04_0001), None, "unknown object: not installed");
        // Deleting an object takes its routes with it.
        r.state.kernel.apply(&Event::Nexthop {
            add: false,
            id: 1,
            target: KernelNexthop::Blackhole,
        });
        r.rebuild_all(&snap).unwrap();
        assert_eq!(target(0x0a01_0001), None);
        assert_eq!(target(0x0a02_0001), None, "a group with a missing member");
    }

    #[test]
    fn only_its_own_links_concern_the_router() {
        let (mut r, _snap) = router();
        assert!(r.concerns_link(5) && r.concerns_link(6));
        let link = |ifindex, name: &str| Event::Link {
            add: true,
            ifindex,
            name: name.into(),
            mac: None,
            mtu: None,
            up: true,
            vrf: None,
            master: None,
            kind: None,
            vlan: None,
        };
        r.state.kernel.apply(&link(9, "veth9"));
        assert!(!r.concerns_link(9), "an unrelated interface");
        assert!(!r.concerns_link(77), "an unknown index");
        // d1 deleted and re-created under a new index: its name is ours.
        r.state.kernel.apply(&Event::Link {
            add: false,
            ifindex: 6,
            name: "d1".into(),
            mac: None,
            mtu: None,
            up: false,
            vrf: None,
            master: None,
            kind: None,
            vlan: None,
        });
        r.state.kernel.apply(&link(12, "d1"));
        assert!(r.concerns_link(6), "the old index is still in the tables");
        assert!(r.concerns_link(12));
    }

    #[test]
    fn neighbours_refresh_keeps_the_fib() {
        let (mut r, snap) = router();
        r.state
            .kernel
            .apply(&route(true, "10.1.0.0/16", 6, "198.19.0.108"));
        r.update_routes(&["10.1.0.0/16".parse().unwrap()], &snap);
        r.state.kernel.apply(&Event::Neigh {
            add: true,
            ifindex: 6,
            ip: "198.19.0.108".parse().unwrap(),
            mac: Some([2, 0, 0, 0, 0, 8]),
            state: crate::event::nud::REACHABLE,
        });
        r.refresh_neighbours(&snap);
        let t = snap.load();
        assert_eq!(
            t.neighbour(1, "198.19.0.108".parse().unwrap()),
            Some(wire::MacAddr([2, 0, 0, 0, 0, 8]))
        );
        assert!(t.fib4.lookup(0x0a01_0203).is_some());
        assert_eq!(r.neighbours().len(), 1);
    }

    /// One change to the sources, as the daemon applies it.
    #[derive(Debug, Clone)]
    enum Change {
        /// A kernel route of prefix `p` and metric `m` through link
        /// `link` (5, 6: the ports; 7: a link fastfwd does not forward on;
        /// 1: lo), or a blackhole.
        Kernel {
            add: bool,
            p: usize,
            metric: u32,
            link: u32,
            blackhole: bool,
        },
        /// A control-socket route through `dev` ("gone": an interface the
        /// tables do not have, as after a config reload), or its removal.
        Api { p: usize, dev: Option<&'static str> },
    }

    const PREFIXES: [&str; 6] = [
        "0.0.0.0/0",
        "10.1.0.0/16",
        "10.1.0.0/24",
        "198.19.0.0/24",
        "2001:db8::/32",
        "2001:db8:1::/48",
    ];

    fn change() -> impl proptest::strategy::Strategy<Value = Change> {
        use proptest::prelude::*;
        prop_oneof![
            3 => (any::<bool>(), 0..PREFIXES.len(), 0..3u32, prop::sample::select(vec![5u32, 6, 7, 1]), prop::bool::weighted(0.2))
                .prop_map(|(add, p, metric, link, blackhole)| Change::Kernel { add, p, metric, link, blackhole }),
            1 => (0..PREFIXES.len(), prop::sample::select(vec![None, Some("d0"), Some("d1"), Some("gone")]))
                .prop_map(|(p, dev)| Change::Api { p, dev }),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// The incremental update and a full build make the one RIB
        /// decision: after any sequence of kernel and control-socket
        /// changes they install the same routes and name the same routes
        /// left to links fastfwd does not forward on.
        #[test]
        fn incremental_updates_decide_as_a_full_build(changes in proptest::collection::vec(change(), 1..24)) {
            let (mut r, snap) = router();
            for (i, name) in [(7u32, "eth9"), (1, "lo")] {
                r.state.kernel.apply(&Event::Link {
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
            for c in changes {
                let prefix: Cidr = match &c {
                    Change::Kernel { p, .. } | Change::Api { p, .. } => PREFIXES[*p].parse().unwrap(),
                };
                let v6 = matches!(prefix, Cidr::V6(_));
                match c {
                    Change::Kernel { add, metric, link, blackhole, .. } => {
                        let gateway: IpAddr = match (link, v6) {
                            (5, false) => "198.18.0.1".parse().unwrap(),
                            (6, false) => "198.19.0.1".parse().unwrap(),
                            (_, false) => "192.0.2.1".parse().unwrap(),
                            (_, true) => "fe80::1".parse().unwrap(),
                        };
                        let ev = Event::Route {
                            add,
                            prefix,
                            table: RT_TABLE_MAIN,
                            kind: if blackhole { libc::RTN_BLACKHOLE } else { libc::RTN_UNICAST },
                            metric,
                            hops: if blackhole { Vec::new() } else { vec![KernelHop { ifindex: link, gateway: Some(gateway) }] },
                            nh_id: None,
                            detail: Default::default(),
                        };
                        if r.state.kernel.change(&ev) == crate::kernel::Change::Route(prefix) {
                            r.update_routes(&[prefix], &snap);
                        }
                    }
                    Change::Api { dev, .. } => {
                        match dev {
                            Some(dev) => {
                                let via = if v6 { "fe80::9" } else { "198.19.0.9" };
                                r.state.api_routes.insert(prefix, api(&[(dev, via)]));
                            }
                            None => {
                                r.state.api_routes.remove(&prefix);
                            }
                        }
                        r.update_routes(&[prefix], &snap);
                    }
                }
                let (fresh, _) = Router::new(r.state.clone()).unwrap();
                proptest::prop_assert_eq!(views(&r), views(&fresh));
                proptest::prop_assert_eq!(&r.foreign, &fresh.foreign);
            }
        }
    }
}
