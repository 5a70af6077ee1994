//! The kernel's routing state, mirrored: links, addresses, the routes of
//! every table but local (in the kernel's order per prefix and metric),
//! policy rules, nexthop objects and neighbours, kept current from
//! [`Event`]s, and named where fastfwd does not forward as the kernel
//! would ([`KernelState::unmodelled`]).

use crate::event::{
    Event, KernelHop, KernelNexthop, Placement, RT_TABLE_LOCAL, RT_TABLE_MAIN, RouteDetail, nud,
};
use crate::rule::{self, KernelRule};
use pipeline::Discard;
use serde::Serialize;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use wire::Cidr;

/// A kernel link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Link {
    /// Interface index.
    pub ifindex: u32,
    /// Name.
    pub name: String,
    /// MAC address.
    pub mac: Option<[u8; 6]>,
    /// MTU.
    pub mtu: Option<u32>,
    /// Administratively up.
    pub up: bool,
    /// A VRF device: the table it routes its members' packets by.
    pub vrf: Option<u32>,
    /// The device it is enslaved to, if any.
    pub master: Option<u32>,
    /// Its type as the kernel names it (`ip -d link`: "veth", "bond",
    /// "team", "bridge", "vlan", "vrf"...); `None` for a device without
    /// one (a physical NIC, loopback).
    pub kind: Option<String>,
    /// A VLAN device: where its tag goes.
    pub vlan: Option<crate::event::KernelVlan>,
}

/// What a kernel route does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelRoute {
    /// Forwards through these next hops (several: multipath).
    Via(Vec<KernelHop>),
    /// Discards (`ip route add blackhole|unreachable|prohibit|throw ...`).
    Discard(Discard),
    /// Uses a nexthop object (`ip route add ... nhid N`).
    Object(u32),
}

/// A kernel route with its nexthop object looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolvedRoute<'a> {
    /// Forward through these (several: ECMP; a weighted group repeats a
    /// member by its weight).
    Via(Cow<'a, [KernelHop]>),
    /// Discard.
    Discard(Discard),
}

/// What one kernel event changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing fastfwd uses.
    None,
    /// The routes of one prefix.
    Route(Cidr),
    /// A neighbour.
    Neighbour,
    /// A link or one of its addresses (interfaces and connected routes),
    /// by interface index.
    Link(u32),
    /// Anything else that can touch every route (nexthop objects).
    Other,
    /// Policy rules, or routes fastfwd does not forward with (other
    /// tables, source-specific, TOS or encapsulated routes): what
    /// [`KernelState::unmodelled`] names may have changed.
    Policy,
}

/// A route fastfwd does not forward with, by what identifies it in the
/// kernel: table, prefix, metric, TOS and source prefix.
pub type UnmodelledRouteKey = (u32, Cidr, u32, u8, Option<Cidr>);

/// The kernel's view of this network namespace, kept current from netlink.
#[derive(Debug, Clone, Default)]
pub struct KernelState {
    /// Links by index.
    pub links: BTreeMap<u32, Link>,
    /// Addresses: (ifindex, address) -> prefix length.
    pub addrs: BTreeMap<(u32, IpAddr), u8>,
    /// Routes of the main table: (prefix, metric) -> what they do. For a
    /// prefix and metric with several routes (IPv4 `ip route append`,
    /// IPv6 routes straight onto different devices, as every interface's
    /// `fe80::/64`), the one the kernel uses: the first whose next hops
    /// are not all dead.
    pub routes: BTreeMap<(Cidr, u32), KernelRoute>,
    /// Every route, in the kernel's order, of a prefix and metric that has
    /// more than one.
    pub aliases: BTreeMap<(Cidr, u32), Vec<KernelRoute>>,
    /// Policy rules (`ip rule`), both families.
    pub rules: BTreeSet<KernelRule>,
    /// The routes of the tables other than main and local (policy rules
    /// look them up): table -> (prefix, metric) -> its routes in the
    /// kernel's order, the one used first (as `aliases`).
    pub tables: BTreeMap<u32, BTreeMap<(Cidr, u32), Vec<KernelRoute>>>,
    /// Routes fastfwd does not forward with, and why, by table.
    pub unmodelled_routes: BTreeMap<UnmodelledRouteKey, String>,
    /// Resolved neighbours: (ifindex, ip) -> MAC.
    pub neighbours: BTreeMap<(u32, IpAddr), [u8; 6]>,
    /// Nexthop objects by id.
    pub nexthops: BTreeMap<u32, KernelNexthop>,
}

/// The device of an IPv6 route straight onto one link (no gateway): the
/// kernel keeps one such route per device for a prefix and metric (every
/// interface's `fe80::/64`), where a route through gateways is one
/// multipath route, sent whole on every change.
fn ipv6_device_route(r: &KernelRoute) -> Option<u32> {
    match r {
        KernelRoute::Via(h) if h.len() == 1 && h[0].gateway.is_none() => Some(h[0].ifindex),
        _ => None,
    }
}

/// An IPv6 route added among those of its prefix and metric: a device
/// route beside the other devices' (after them, as the kernel inserts it;
/// in place of its own device's), any other route in place of them all.
fn add_ipv6_route(list: &mut Vec<KernelRoute>, route: KernelRoute) {
    let dev = ipv6_device_route(&route);
    if dev.is_some() && list.iter().all(|r| ipv6_device_route(r).is_some()) {
        match list.iter().position(|r| ipv6_device_route(r) == dev) {
            Some(i) => list[i] = route,
            None => list.push(route),
        }
    } else {
        *list = vec![route];
    }
}

/// An IPv6 route removed: a device route takes only its own device's
/// route away; any other, every route of its prefix and metric.
fn remove_ipv6_route(list: &mut Vec<KernelRoute>, route: &KernelRoute) {
    match ipv6_device_route(route) {
        Some(dev) if list.iter().any(|r| ipv6_device_route(r) == Some(dev)) => {
            list.retain(|r| ipv6_device_route(r) != Some(dev));
        }
        _ => list.clear(),
    }
}

impl KernelState {
    /// Applies one netlink event and says what kind of thing changed.
    pub fn change(&mut self, ev: &Event) -> Change {
        let changed = self.apply(ev);
        match ev {
            _ if !changed => Change::None,
            Event::Rule { .. } => Change::Policy,
            Event::Route { table, detail, .. }
                if *table != RT_TABLE_MAIN || Self::unmodelled_route(ev, detail).is_some() =>
            {
                Change::Policy
            }
            Event::Route { prefix, .. } => Change::Route(*prefix),
            Event::Neigh { .. } => Change::Neighbour,
            Event::Link { ifindex, .. } | Event::Addr { ifindex, .. } => Change::Link(*ifindex),
            _ => Change::Other,
        }
    }

    /// Applies one netlink event; returns whether anything fastfwd uses changed.
    pub fn apply(&mut self, ev: &Event) -> bool {
        match ev {
            Event::Link {
                add: true,
                ifindex,
                name,
                mac,
                mtu,
                up,
                vrf,
                master,
                kind,
                vlan,
            } => {
                let link = Link {
                    ifindex: *ifindex,
                    name: name.clone(),
                    mac: *mac,
                    mtu: *mtu,
                    up: *up,
                    vrf: *vrf,
                    master: *master,
                    kind: kind.clone(),
                    vlan: *vlan,
                };
                if !*up {
                    self.withdraw_ipv4_routes_via(*ifindex);
                }
                self.links.insert(*ifindex, link.clone()) != Some(link)
            }
            Event::Link {
                add: false,
                ifindex,
                ..
            } => {
                self.addrs.retain(|(i, _), _| i != ifindex);
                self.neighbours.retain(|(i, _), _| i != ifindex);
                self.withdraw_ipv4_routes_via(*ifindex);
                self.links.remove(ifindex).is_some()
            }
            Event::Addr {
                add: true,
                ifindex,
                addr,
                prefix_len,
            } => self.addrs.insert((*ifindex, *addr), *prefix_len) != Some(*prefix_len),
            Event::Addr {
                add: false,
                ifindex,
                addr,
                ..
            } => self.addrs.remove(&(*ifindex, *addr)).is_some(),
            Event::Rule { add: true, rule } => self.rules.insert(rule.clone()),
            Event::Rule { add: false, rule } => self.rules.remove(rule),
            Event::Route { table, .. } if *table == RT_TABLE_LOCAL => false,
            // The kernel's own local, broadcast, anycast and multicast
            // routes for the addresses of a VRF's members, which it keeps
            // in the VRF's table instead of local: the host's, as local's.
            Event::Route {
                table,
                kind,
                detail,
                ..
            } if *table != RT_TABLE_MAIN
                && detail.protocol == libc::RTPROT_KERNEL
                && matches!(
                    *kind,
                    libc::RTN_LOCAL | libc::RTN_BROADCAST | libc::RTN_ANYCAST | libc::RTN_MULTICAST
                ) =>
            {
                false
            }
            Event::Route {
                add,
                prefix,
                table,
                metric,
                detail,
                ..
            } if Self::unmodelled_route(ev, detail).is_some() => {
                let key = (*table, *prefix, *metric, detail.tos, detail.src);
                if *add {
                    let why = Self::unmodelled_route(ev, detail).unwrap_or_default();
                    self.unmodelled_routes.insert(key, why.clone()) != Some(why)
                } else {
                    self.unmodelled_routes.remove(&key).is_some()
                }
            }
            Event::Route {
                add,
                prefix,
                table,
                metric,
                hops,
                nh_id,
                detail,
                ..
            } if ev.is_forwarding_route() => {
                let route = match (ev.route_discard(), nh_id) {
                    (Some(d), _) => KernelRoute::Discard(d),
                    (None, Some(id)) => KernelRoute::Object(*id),
                    (None, None) => KernelRoute::Via(hops.clone()),
                };
                let key = (*prefix, *metric);
                if *table != RT_TABLE_MAIN {
                    return self.change_other_table(*table, *add, key, route, detail.placement);
                }
                match (add, prefix) {
                    (true, Cidr::V4(_)) => self.add_ipv4_route(key, route, detail.placement),
                    (true, Cidr::V6(_)) => {
                        let mut list = self.alias_list(key);
                        add_ipv6_route(&mut list, route);
                        self.set_aliases(key, list)
                    }
                    (false, Cidr::V4(_)) => self.remove_ipv4_route(key, &route),
                    (false, Cidr::V6(_)) => {
                        let mut list = self.alias_list(key);
                        remove_ipv6_route(&mut list, &route);
                        self.set_aliases(key, list)
                    }
                }
            }
            Event::Nexthop {
                add: true,
                id,
                target,
            } => self.nexthops.insert(*id, target.clone()).as_ref() != Some(target),
            Event::Nexthop { add: false, id, .. } => {
                // The kernel deletes the routes that used it without a
                // notification per route.
                self.routes.retain(|_, r| *r != KernelRoute::Object(*id));
                for list in self.aliases.values_mut() {
                    list.retain(|r| *r != KernelRoute::Object(*id));
                }
                for table in self.tables.values_mut() {
                    for list in table.values_mut() {
                        list.retain(|r| *r != KernelRoute::Object(*id));
                    }
                    table.retain(|_, list| !list.is_empty());
                }
                self.tables.retain(|_, t| !t.is_empty());
                self.nexthops.remove(id).is_some()
            }
            // Multicast "neighbours" are the kernel's fixed mappings, not next hops.
            Event::Neigh { ip, .. } if ip.is_multicast() => false,
            Event::Neigh {
                add,
                ifindex,
                ip,
                mac,
                state,
            } => {
                let key = (*ifindex, *ip);
                match mac {
                    Some(m) if *add && state & nud::VALID != 0 => {
                        self.neighbours.insert(key, *m) != Some(*m)
                    }
                    // Incomplete or failed entries carry no usable MAC;
                    // a STALE entry stays usable (the kernel re-probes it).
                    _ if *add && state & (nud::INCOMPLETE | nud::FAILED) == 0 => false,
                    _ => self.neighbours.remove(&key).is_some(),
                }
            }
            _ => false,
        }
    }

    /// Why a route (of a table other than local) is one fastfwd does not
    /// forward with, if it is: a source prefix, a TOS, an encapsulation,
    /// or a type that is neither forwarding nor discarding (local, anycast,
    /// multicast, nat outside the local table).
    fn unmodelled_route(ev: &Event, detail: &RouteDetail) -> Option<String> {
        let Event::Route {
            prefix,
            table,
            metric,
            kind,
            ..
        } = ev
        else {
            return None;
        };
        let why = if let Some(src) = detail.src {
            format!("from {src}: a source-specific route")
        } else if detail.tos != 0 {
            format!("tos {:#x}: a route for one TOS", detail.tos)
        } else if let Some(t) = detail.encap.filter(|&t| t != 0) {
            format!("an encapsulation (lwtunnel type {t})")
        } else if !ev.is_forwarding_route() {
            format!("a route of type {kind}")
        } else {
            return None;
        };
        let table = match *table {
            RT_TABLE_MAIN => String::new(),
            t => format!(" table {t}"),
        };
        Some(format!("ip route {prefix}{table} metric {metric}, {why}"))
    }

    /// Everything in the kernel's routing state that could make it forward
    /// a transit packet other than fastfwd does, each named: policy rules
    /// fastfwd cannot evaluate (see [`rule::unmodelled`]) and routes
    /// fastfwd does not forward with in main or in a table a rule (or a
    /// VRF's `l3mdev` rule) looks up. Empty: fastfwd's decision is the
    /// kernel's.
    pub fn unmodelled(&self) -> Vec<String> {
        let tables: BTreeSet<u32> = self.tables.keys().copied().collect();
        let vrf_tables = self.vrf_tables();
        let mut out = rule::unmodelled(&self.rules, &tables, &vrf_tables);
        let looked_up = rule::looked_up_tables(&self.rules, &vrf_tables);
        out.extend(
            self.unmodelled_routes
                .iter()
                .filter(|((t, ..), _)| *t == RT_TABLE_MAIN || looked_up.contains(t))
                .map(|(_, why)| why.clone()),
        );
        out
    }

    /// Adds an IPv4 route where `placement` says among those of its prefix
    /// and metric; whether the route the kernel uses changed.
    fn add_ipv4_route(&mut self, key: (Cidr, u32), route: KernelRoute, at: Placement) -> bool {
        let mut list = self.alias_list(key);
        match at {
            Placement::Replace if !list.is_empty() => list[0] = route,
            Placement::Prepend if !list.contains(&route) => list.insert(0, route),
            _ if !list.contains(&route) => list.push(route),
            _ => {}
        }
        self.set_aliases(key, list)
    }

    /// Removes an IPv4 route (the one equal to `route`, else the first of
    /// its prefix and metric, as the kernel deletes); whether the route
    /// the kernel uses changed.
    fn remove_ipv4_route(&mut self, key: (Cidr, u32), route: &KernelRoute) -> bool {
        let mut list = self.alias_list(key);
        if let Some(i) = list.iter().position(|r| r == route) {
            list.remove(i);
        } else if !list.is_empty() {
            list.remove(0);
        }
        self.set_aliases(key, list)
    }

    /// A route added to or removed from a table other than main, as in
    /// main (IPv4 routes of one prefix and metric kept in order, IPv6 ones
    /// replaced); whether the table changed.
    fn change_other_table(
        &mut self,
        table: u32,
        add: bool,
        key: (Cidr, u32),
        route: KernelRoute,
        at: Placement,
    ) -> bool {
        let routes = self.tables.entry(table).or_default();
        let list = routes.entry(key).or_default();
        let before = list.clone();
        match (add, key.0) {
            (true, Cidr::V6(_)) => add_ipv6_route(list, route),
            (true, Cidr::V4(_)) => match at {
                Placement::Replace if !list.is_empty() => list[0] = route,
                Placement::Prepend if !list.contains(&route) => list.insert(0, route),
                _ if !list.contains(&route) => list.push(route),
                _ => {}
            },
            (false, Cidr::V6(_)) => remove_ipv6_route(list, &route),
            (false, Cidr::V4(_)) => {
                if let Some(i) = list.iter().position(|r| *r == route) {
                    list.remove(i);
                } else if !list.is_empty() {
                    list.remove(0);
                }
            }
        }
        let changed = *list != before;
        if list.is_empty() {
            routes.remove(&key);
        }
        if routes.is_empty() {
            self.tables.remove(&table);
        }
        changed
    }

    /// The route the kernel uses among those of one prefix and metric of
    /// a table: the first whose next hops are not all dead.
    pub fn used_route(list: &[KernelRoute]) -> Option<&KernelRoute> {
        list.iter()
            .find(|r| !matches!(r, KernelRoute::Via(h) if h.is_empty()))
            .or(list.first())
    }

    fn alias_list(&mut self, key: (Cidr, u32)) -> Vec<KernelRoute> {
        match self.aliases.remove(&key) {
            Some(list) => list,
            None => self.routes.get(&key).cloned().into_iter().collect(),
        }
    }

    /// Stores a prefix and metric's routes; whether the used one changed.
    fn set_aliases(&mut self, key: (Cidr, u32), list: Vec<KernelRoute>) -> bool {
        // The kernel skips a route whose next hops are all dead.
        let used = list
            .iter()
            .find(|r| !matches!(r, KernelRoute::Via(h) if h.is_empty()))
            .or(list.first())
            .cloned();
        if list.len() > 1 {
            self.aliases.insert(key, list);
        }
        match used {
            Some(r) => self.routes.insert(key, r.clone()) != Some(r),
            None => self.routes.remove(&key).is_some(),
        }
    }

    /// A link that goes down (or away) takes its IPv4 routes with it in the
    /// kernel without a notification per route (IPv6 sends them): drop the
    /// next hops through it, and a route left with none.
    fn withdraw_ipv4_routes_via(&mut self, ifindex: u32) {
        let keep = |r: &mut KernelRoute| {
            let KernelRoute::Via(hops) = r else {
                return true;
            };
            hops.retain(|h| h.ifindex != ifindex);
            !hops.is_empty()
        };
        let keys: Vec<(Cidr, u32)> = self
            .aliases
            .keys()
            .filter(|(p, _)| matches!(p, Cidr::V4(_)))
            .copied()
            .collect();
        for key in keys {
            let mut list = self.aliases.remove(&key).unwrap_or_default();
            list.retain_mut(keep);
            self.set_aliases(key, list);
        }
        self.routes
            .retain(|(prefix, _), r| matches!(prefix, Cidr::V6(_)) || keep(r));
        for table in self.tables.values_mut() {
            for ((prefix, _), list) in table.iter_mut() {
                if matches!(prefix, Cidr::V4(_)) {
                    list.retain_mut(keep);
                }
            }
            table.retain(|_, list| !list.is_empty());
        }
        self.tables.retain(|_, t| !t.is_empty());
    }

    /// What a route does, its nexthop object (and a group's members) looked
    /// up; `None` when an object it names is unknown.
    pub fn resolve<'a>(&'a self, route: &'a KernelRoute) -> Option<ResolvedRoute<'a>> {
        let id = match route {
            KernelRoute::Via(h) => return Some(ResolvedRoute::Via(Cow::Borrowed(h))),
            KernelRoute::Discard(d) => return Some(ResolvedRoute::Discard(*d)),
            KernelRoute::Object(id) => *id,
        };
        match self.nexthops.get(&id)? {
            KernelNexthop::Via(h) => Some(ResolvedRoute::Via(Cow::Owned(vec![*h]))),
            KernelNexthop::Blackhole => Some(ResolvedRoute::Discard(Discard::Blackhole)),
            KernelNexthop::Group(members) => {
                // Weights as repeats while they fit the ECMP width; else equal.
                let total: usize = members.iter().map(|&(_, w)| usize::from(w)).sum();
                let weighted = total <= pipeline::MAX_ECMP;
                let mut hops = Vec::new();
                for &(m, w) in members {
                    let KernelNexthop::Via(h) = self.nexthops.get(&m)? else {
                        return None;
                    };
                    let n = if weighted { usize::from(w) } else { 1 };
                    hops.extend(std::iter::repeat_n(*h, n));
                }
                Some(ResolvedRoute::Via(Cow::Owned(hops)))
            }
        }
    }

    /// The route the kernel uses for `prefix` in `table` (main or
    /// another, not local): of its lowest metric, the first whose next hops
    /// are not all dead.
    pub fn route_of(&self, table: u32, prefix: Cidr) -> Option<&KernelRoute> {
        if table == RT_TABLE_MAIN {
            return self
                .routes
                .range((prefix, 0)..=(prefix, u32::MAX))
                .next()
                .map(|(_, r)| r);
        }
        let (_, list) = self
            .tables
            .get(&table)?
            .range((prefix, 0)..=(prefix, u32::MAX))
            .next()?;
        Self::used_route(list)
    }

    /// Whether link `ifindex` is the loopback device (routes through it
    /// deliver to the host, never forward).
    pub fn is_loopback(&self, ifindex: u32) -> bool {
        self.links.get(&ifindex).is_some_and(|l| l.name == "lo")
    }

    /// The tables of the VRF devices that have members.
    pub fn vrf_tables(&self) -> BTreeSet<u32> {
        self.links
            .values()
            .filter_map(|l| self.vrf_of(l.ifindex))
            .collect()
    }

    /// The links enslaved to link `ifindex` (a bond's members), by index.
    pub fn members_of(&self, ifindex: u32) -> Vec<u32> {
        let mut m: Vec<u32> = self
            .links
            .values()
            .filter(|l| l.master == Some(ifindex))
            .map(|l| l.ifindex)
            .collect();
        m.sort_unstable();
        m
    }

    /// The table of the VRF device link `ifindex` is a member of.
    pub fn vrf_of(&self, ifindex: u32) -> Option<u32> {
        let master = self.links.get(&ifindex)?.master?;
        self.links.get(&master)?.vrf
    }

    /// The index of the link called `name`.
    pub fn ifindex_of(&self, name: &str) -> Option<u32> {
        self.links
            .values()
            .find(|l| l.name == name)
            .map(|l| l.ifindex)
    }
}
