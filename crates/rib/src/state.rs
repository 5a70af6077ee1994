//! What the router knows and where it came from: the kernel's links,
//! addresses, routes and neighbours (mirrored over netlink), the config
//! file's interfaces, static routes and neighbours, and the routes and
//! neighbours added through the control socket. [`RouterState::build`]
//! merges them into one immutable pipeline snapshot.
//!
//! Precedence for a prefix present in several sources: control socket,
//! then config, then kernel. Kernel routes are used only when every next
//! hop leaves through an interface fastfwd forwards on.

use crate::Origin;
use crate::event::RT_TABLE_MAIN;
use crate::kernel::KernelState;
use crate::policy;
use crate::{Decision, Statics};
use config::Config;
use fib::RouteTable;
use fib::poptrie::{Poptrie4, Poptrie6};
use pipeline::{
    Discard, InterfaceId, NextHop, NextHopId, PortId, RouteTarget, Tables, TablesBuilder, Vlan,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use wire::Cidr;

/// Tables built from scratch, with plain tries.
pub type BuiltTables = Tables<Poptrie4, Poptrie6>;

/// A route as `show route` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteView {
    /// Destination.
    pub prefix: String,
    /// Where it came from.
    pub origin: Origin,
    /// Next hops as `via GW dev IFACE` / `dev IFACE`.
    pub next_hops: Vec<String>,
}

/// One installed route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteEntry {
    /// Destination.
    pub prefix: Cidr,
    /// Where it came from.
    pub origin: Origin,
    /// Index into [`Built::hop_sets`].
    pub hops: u32,
}

impl<F4, F6> Built<F4, F6> {
    fn view(&self, e: &RouteEntry) -> RouteView {
        RouteView {
            prefix: e.prefix.to_string(),
            origin: e.origin,
            next_hops: self
                .hop_sets
                .get(e.hops as usize)
                .cloned()
                .unwrap_or_default(),
        }
    }

    /// Every route, for `show route`.
    pub fn route_views(&self) -> Vec<RouteView> {
        self.routes.iter().map(|e| self.view(e)).collect()
    }

    /// The route a lookup of `query`'s network address selects among the
    /// routes no longer than `query` (longest match), for `show route X`.
    pub fn longest_match(&self, query: Cidr) -> Option<RouteView> {
        let addr: IpAddr = match query {
            Cidr::V4(p) => IpAddr::V4(p.network()),
            Cidr::V6(p) => IpAddr::V6(p.network()),
        };
        self.routes
            .iter()
            .filter(|e| e.prefix.contains(addr) && e.prefix.prefix_len() <= query.prefix_len())
            .max_by_key(|e| e.prefix.prefix_len())
            .map(|e| self.view(e))
    }
}

/// A neighbour as `show neighbors` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighbourView {
    /// Interface name.
    pub interface: String,
    /// IP address.
    pub ip: IpAddr,
    /// MAC address.
    pub mac: String,
    /// Where it came from.
    pub origin: Origin,
}

/// Everything one build produced, over the FIBs it was given (the
/// daemon's tries by default).
#[derive(Debug)]
pub struct Built<F4 = Poptrie4, F6 = Poptrie6> {
    /// The pipeline snapshot.
    pub tables: Tables<F4, F6>,
    /// Port names (kernel interfaces) by port id.
    pub ports: Vec<String>,
    /// Every route installed, by prefix.
    pub routes: Vec<RouteEntry>,
    /// Next-hop sets as text, indexed by [`RouteEntry::hops`] (shared by
    /// every route with the same set, so a full table stays small).
    pub hop_sets: Vec<Vec<String>>,
    /// Every neighbour known.
    pub neighbours: Vec<NeighbourView>,
    /// The router's own addresses per port (for the XDP steering map).
    pub local_addrs: Vec<(PortId, IpAddr)>,
    /// Problems that did not stop the build.
    pub warnings: Vec<String>,
    /// The main table's kernel routes left out because they leave through
    /// links fastfwd does not forward on: prefix -> the link (named by
    /// [`foreign_routes`]).
    pub foreign: BTreeMap<Cidr, u32>,
}

/// The subnets of an interface's addresses.
pub(crate) fn connected_subnets(i: &pipeline::Interface) -> impl Iterator<Item = Cidr> + '_ {
    let v4 = i
        .ipv4
        .iter()
        .filter_map(|a| wire::Ipv4Cidr::new(u32::from(a.addr), a.prefix_len).map(Cidr::V4));
    let v6 = i
        .ipv6
        .iter()
        .filter_map(|a| wire::Ipv6Cidr::new(u128::from(a.addr), a.prefix_len).map(Cidr::V6));
    v4.chain(v6)
}

/// The interfaces (untagged, on a kernel link) whose link is a member of a
/// VRF device: the kernel routes their packets, and keeps their connected
/// subnets, in the VRF's table.
pub(crate) fn vrf_members(
    kernel: &KernelState,
    by_ifindex: &HashMap<u32, InterfaceId>,
) -> std::collections::HashSet<InterfaceId> {
    by_ifindex
        .iter()
        .filter(|(ifindex, _)| kernel.vrf_of(**ifindex).is_some())
        .map(|(_, id)| *id)
        .collect()
}

/// The interfaces a build forwards on, as the RIB asks for them.
pub(crate) struct IfMap<'a> {
    pub(crate) ifaces: &'a [pipeline::Interface],
    pub(crate) by_ifindex: &'a HashMap<u32, InterfaceId>,
}

impl crate::Interfaces for IfMap<'_> {
    fn by_name(&self, name: &str) -> Option<InterfaceId> {
        self.ifaces
            .iter()
            .position(|i| i.name == name)
            .map(|i| i as InterfaceId)
    }

    fn by_ifindex(&self, ifindex: u32) -> Option<InterfaceId> {
        self.by_ifindex.get(&ifindex).copied()
    }
}

/// Names the kernel routes fastfwd leaves out because they leave through
/// a link it does not forward on (`foreign`: prefix -> link index), one
/// line per link. The kernel forwards such a destination through that
/// link; fastfwd has no route for it, so its traffic takes a shorter route
/// or none.
pub fn foreign_routes(foreign: &BTreeMap<Cidr, u32>, kernel: &KernelState) -> Vec<String> {
    let mut by_link: BTreeMap<u32, (usize, Cidr)> = BTreeMap::new();
    for (p, &ifindex) in foreign {
        by_link.entry(ifindex).or_insert((0, *p)).0 += 1;
    }
    by_link
        .into_iter()
        .map(|(ifindex, (n, first))| {
            let link = kernel
                .links
                .get(&ifindex)
                .map_or_else(|| format!("link {ifindex}"), |l| l.name.clone());
            let routes = if n == 1 { "route" } else { "routes" };
            format!(
                "{n} kernel {routes} ({first}{more}) leave through {link}, which fastfwd does not forward on: not installed, their traffic takes a shorter route or none",
                more = if n > 1 { ", ..." } else { "" }
            )
        })
        .collect()
}

/// A route added through the control socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiRoute {
    /// Next hops (interface name, gateway).
    pub next_hops: Vec<config::NextHop>,
}

/// Config, kernel mirror and control-socket additions.
#[derive(Debug, Clone)]
pub struct RouterState {
    /// The applied configuration.
    pub config: Config,
    /// The kernel mirror.
    pub kernel: KernelState,
    /// Routes from the control socket.
    pub api_routes: BTreeMap<Cidr, ApiRoute>,
    /// Neighbours from the control socket: (interface, ip) -> MAC.
    pub api_neighbours: BTreeMap<(String, IpAddr), [u8; 6]>,
}

fn mac_string(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// Kernel link index -> the interface fastfwd forwards for on it: the
/// untagged interface of a port's link; for a kernel VLAN device on a
/// port (802.1Q, `ip link add link PORT type vlan id N`), the config's
/// VLAN N on that port; for an 802.1Q device on an 802.1ad device on a
/// port (QinQ), the config's VLAN with that outer and inner id. The
/// kernel's routes, neighbours and rules through such a device are then
/// fastfwd's through its interface.
pub(crate) fn link_interfaces(
    kernel: &KernelState,
    ifaces: &[pipeline::Interface],
    ports: &[String],
) -> HashMap<u32, InterfaceId> {
    let port_of = |ifindex: u32| {
        let name = &kernel.links.get(&ifindex)?.name;
        ports.iter().position(|p| p == name)
    };
    let on = |port: usize, vlan: Vlan| {
        ifaces
            .iter()
            .position(|i| usize::from(i.port) == port && i.vlan == vlan)
            .map(|i| i as InterfaceId)
    };
    kernel
        .links
        .values()
        .filter_map(|l| {
            let id = match l.vlan {
                None => on(ports.iter().position(|p| *p == l.name)?, Vlan::Untagged)?,
                Some(v) if v.ad => return None,
                Some(v) => match port_of(v.parent) {
                    Some(port) => on(port, Vlan::Single(v.id))?,
                    None => {
                        let outer = kernel.links.get(&v.parent)?.vlan.filter(|o| o.ad)?;
                        let vlan = Vlan::Double {
                            outer: outer.id,
                            inner: v.id,
                        };
                        on(port_of(outer.parent)?, vlan)?
                    }
                },
            };
            Some((l.ifindex, id))
        })
        .collect()
}

/// The interfaces whose packets the kernel's rules of one family see as
/// received on its link called `name` (`iif NAME` of a rule): a port's
/// untagged interface, or the VLAN interface of a kernel VLAN device
/// (`link_interfaces`). VRF members differ by family. IPv6 hands what a
/// member receives to the VRF device before routing (`ip6_rcv_finish`
/// after `l3mdev_ip6_rcv`), so its rules see the VRF device as the input:
/// `iif MEMBER` selects nothing, `iif VRF` every member. IPv4 routes with
/// the device the packet came in on (`ip_rcv_finish` keeps it), so its
/// rules see the member, and `iif VRF` selects nothing.
pub(crate) fn interfaces_on_link(
    kernel: &KernelState,
    by_ifindex: &HashMap<u32, InterfaceId>,
    name: &str,
    v6: bool,
) -> Vec<InterfaceId> {
    let Some(link) = kernel.links.values().find(|l| l.name == name) else {
        return Vec::new();
    };
    if !v6 {
        return by_ifindex.get(&link.ifindex).copied().into_iter().collect();
    }
    if link.vrf.is_some() {
        let mut members: Vec<InterfaceId> = by_ifindex
            .iter()
            .filter(|&(&i, _)| kernel.links.get(&i).and_then(|l| l.master) == Some(link.ifindex))
            .map(|(_, &id)| id)
            .collect();
        members.sort_unstable();
        return members;
    }
    if kernel.vrf_of(link.ifindex).is_some() {
        return Vec::new();
    }
    by_ifindex.get(&link.ifindex).copied().into_iter().collect()
}

/// A route target as `show route` prints it: one string per next hop, or
/// the discard's name.
pub fn target_strings(t: &pipeline::RouteTarget, ifaces: &[pipeline::Interface]) -> Vec<String> {
    match t {
        pipeline::RouteTarget::Forward(hops) => {
            hops.iter().map(|h| hop_string(h, ifaces)).collect()
        }
        pipeline::RouteTarget::Discard(d) => vec![d.name().to_string()],
    }
}

pub(crate) fn hop_string(h: &NextHop, ifaces: &[pipeline::Interface]) -> String {
    let dev = ifaces
        .get(usize::from(h.interface))
        .map_or("?", |i| i.name.as_str());
    match h.gateway {
        Some(g) => format!("via {g} dev {dev}"),
        None => format!("dev {dev}"),
    }
}

impl RouterState {
    /// A state with no kernel knowledge yet.
    pub fn new(config: Config) -> RouterState {
        RouterState {
            config,
            kernel: KernelState::default(),
            api_routes: BTreeMap::new(),
            api_neighbours: BTreeMap::new(),
        }
    }

    /// Builds the pipeline snapshot from everything known now. Refuses a
    /// configuration the running router could not enforce (fail closed).
    pub fn build(&self) -> Result<Built, crate::BuildError> {
        self.build_over(Poptrie4::new(), Poptrie6::new())
    }

    /// [`build`](Self::build) over the given empty route tables: the one
    /// table builder, used by the daemon (over its tries) and by replay
    /// (over the tries, or over the reference FIB they are tested against).
    pub fn build_over<F4, F6>(
        &self,
        mut fib4: F4,
        mut fib6: F6,
    ) -> Result<Built<F4, F6>, crate::BuildError>
    where
        F4: RouteTable<u32>,
        F6: RouteTable<u128>,
    {
        let cfg = &self.config;
        if let Some(fw) = &cfg.firewall {
            input_chain_unenforced(fw).map_or(Ok(()), |e| Err(crate::BuildError(e)))?;
        }
        let ports: Vec<String> = cfg.ports().into_iter().map(str::to_owned).collect();
        let mut warnings = Vec::new();
        let mut b = TablesBuilder::new();
        let mut local_addrs = Vec::new();
        // Interfaces: the config's, with the kernel's MAC, MTU and addresses
        // of the port merged in (an untagged interface shares its port's).
        for ci in &cfg.interfaces {
            let port = ports.iter().position(|p| *p == ci.port).unwrap_or(0) as PortId;
            let link = self
                .kernel
                .ifindex_of(&ci.port)
                .and_then(|i| self.kernel.links.get(&i));
            let mut mac = ci.mac.0;
            let mut mtu = ci.mtu;
            let mut ipv4: Vec<pipeline::Ipv4IfAddr> = ci
                .ipv4
                .iter()
                .map(|a| pipeline::Ipv4IfAddr {
                    addr: a.addr,
                    prefix_len: a.prefix_len,
                })
                .collect();
            let mut ipv6: Vec<pipeline::Ipv6IfAddr> = ci
                .ipv6
                .iter()
                .map(|a| pipeline::Ipv6IfAddr {
                    addr: a.addr,
                    prefix_len: a.prefix_len,
                })
                .collect();
            if let Some(link) = link {
                if let Some(m) = link.mac {
                    if m != mac && mac != [0; 6] {
                        warnings.push(format!(
                            "interface {}: config MAC {} differs from the kernel's {}; using the kernel's",
                            ci.name,
                            mac_string(&mac),
                            mac_string(&m)
                        ));
                    }
                    mac = m;
                }
                if let Some(m) = link.mtu {
                    mtu = mtu.min(u16::try_from(m).unwrap_or(u16::MAX));
                }
                if ci.vlan.is_none() {
                    for (&(ifindex, addr), &len) in &self.kernel.addrs {
                        if ifindex != link.ifindex {
                            continue;
                        }
                        match addr {
                            IpAddr::V4(a) if !ipv4.iter().any(|x| x.addr == a) => {
                                ipv4.push(pipeline::Ipv4IfAddr {
                                    addr: a,
                                    prefix_len: len,
                                })
                            }
                            IpAddr::V6(a) if !ipv6.iter().any(|x| x.addr == a) => {
                                ipv6.push(pipeline::Ipv6IfAddr {
                                    addr: a,
                                    prefix_len: len,
                                })
                            }
                            _ => {}
                        }
                    }
                }
            }
            for a in &ipv4 {
                local_addrs.push((port, IpAddr::V4(a.addr)));
            }
            for a in &ipv6 {
                local_addrs.push((port, IpAddr::V6(a.addr)));
            }
            b.add_interface(pipeline::Interface {
                name: ci.name.clone(),
                port,
                vlan: ci.vlan.map_or(Vlan::Untagged, Vlan::Single),
                mac: wire::MacAddr(mac),
                ipv4,
                ipv6,
                mtu,
            })
            .map_err(|e| crate::BuildError(format!("interface {}: {e}", ci.name)))?;
        }
        let ifaces: Vec<pipeline::Interface> = b.interfaces().to_vec();
        let by_ifindex = link_interfaces(&self.kernel, &ifaces, &ports);

        // What the sources other than the kernel hold, per prefix.
        let mut statics: BTreeMap<Cidr, Statics<'_>> = BTreeMap::new();
        // The connected subnets of the interfaces that route by main (not
        // members of a VRF device: the kernel keeps theirs in the VRF's
        // table). A subnet on several interfaces (IPv6 link-local
        // fe80::/64 is on every one) goes to the first, as its `show route`
        // text says.
        let vrf_members = vrf_members(&self.kernel, &by_ifindex);
        // Subnet -> (its next-hop id, its interface).
        let mut connected_nh: HashMap<Cidr, (NextHopId, InterfaceId)> = HashMap::new();
        for (id, iface) in ifaces.iter().enumerate() {
            let id = id as InterfaceId;
            if vrf_members.contains(&id) {
                continue;
            }
            let mut direct_id = None;
            for p in connected_subnets(iface) {
                if connected_nh.contains_key(&p) {
                    continue;
                }
                let direct = [NextHop {
                    interface: id,
                    gateway: None,
                }];
                let made = *direct_id.get_or_insert_with(|| b.add_next_hops(&direct).ok());
                let Some(nh) = made else {
                    continue;
                };
                connected_nh.insert(p, (nh, id));
                statics.entry(p).or_default().connected = true;
            }
        }
        for r in &cfg.routes {
            statics.entry(r.prefix).or_default().config = Some(&r.next_hops);
        }
        for (prefix, r) in &self.api_routes {
            statics.entry(*prefix).or_default().api = Some(&r.next_hops);
        }
        let interfaces = IfMap {
            ifaces: &ifaces,
            by_ifindex: &by_ifindex,
        };

        // Identical next-hop sets share one id (a full table has a handful);
        // looked up by slice, so known sets cost no allocation.
        let mut set_ids: HashMap<Vec<NextHop>, (NextHopId, u32)> = HashMap::new();
        let mut hop_sets: Vec<Vec<String>> = Vec::new();
        let mut intern = |b: &mut TablesBuilder,
                          hop_sets: &mut Vec<Vec<String>>,
                          hops: &[NextHop]|
         -> Result<(NextHopId, u32), pipeline::TableError> {
            if let Some(&v) = set_ids.get(hops) {
                return Ok(v);
            }
            let nh = b.add_next_hops(hops)?;
            hop_sets.push(hops.iter().map(|h| hop_string(h, &ifaces)).collect());
            let v = (nh, hop_sets.len() as u32 - 1);
            set_ids.insert(hops.to_vec(), v);
            Ok(v)
        };
        let mut discard_ids: HashMap<Discard, (NextHopId, u32)> = HashMap::new();
        let mut intern_discard =
            |b: &mut TablesBuilder, hop_sets: &mut Vec<Vec<String>>, d: Discard| {
                if let Some(&v) = discard_ids.get(&d) {
                    return Ok(v);
                }
                let nh = b.add_discard(d)?;
                hop_sets.push(vec![d.name().to_string()]);
                let v = (nh, hop_sets.len() as u32 - 1);
                discard_ids.insert(d, v);
                Ok(v)
            };
        // More targets than next-hop ids: the routes cannot all be
        // installed, so no table is built (a route left out would send its
        // traffic to a shorter one).
        let too_many = |prefix: &Cidr, e: pipeline::TableError| {
            crate::BuildError(format!("route {prefix}: {e}"))
        };
        let mut install = |prefix: &Cidr, nh: NextHopId| match prefix {
            Cidr::V4(p) => {
                fib4.insert(*p, nh);
            }
            Cidr::V6(p) => {
                fib6.insert(*p, nh);
            }
        };

        let mut entries = Vec::with_capacity(self.kernel.routes.len() + statics.len());
        let mut foreign = BTreeMap::new();
        let mut connected_text: HashMap<String, u32> = HashMap::new();
        // The one decision for every prefix a source holds: the kernel's
        // (ordered by prefix and metric, each prefix once), then those of
        // the other sources.
        let mut last: Option<Cidr> = None;
        let kernel_prefixes = self.kernel.routes.iter().filter_map(|((p, _), route)| {
            let first = last != Some(*p);
            last = Some(*p);
            (first && !statics.contains_key(p)).then_some((*p, Statics::default(), Some(route)))
        });
        let static_prefixes = statics
            .iter()
            .map(|(p, s)| (*p, *s, self.kernel.route_of(RT_TABLE_MAIN, *p)));
        for (prefix, source, route) in kernel_prefixes.chain(static_prefixes) {
            let (decision, passed_over) =
                crate::decide::choose(source, route, &self.kernel, &interfaces);
            if passed_over.is_some() {
                warnings.push(format!("route {prefix}: unknown interface"));
            }
            let (origin, idx) = match decision {
                Decision::None => continue,
                Decision::Foreign(ifindex) => {
                    foreign.insert(prefix, ifindex);
                    continue;
                }
                Decision::Connected => {
                    let Some(&(nh, iface)) = connected_nh.get(&prefix) else {
                        continue;
                    };
                    let dev = ifaces
                        .get(usize::from(iface))
                        .map_or("?", |i| i.name.as_str());
                    let text = format!("dev {dev}");
                    let idx = match connected_text.get(&text) {
                        Some(&i) => i,
                        None => {
                            hop_sets.push(vec![text.clone()]);
                            let i = hop_sets.len() as u32 - 1;
                            connected_text.insert(text, i);
                            i
                        }
                    };
                    install(&prefix, nh);
                    (Origin::Connected, idx)
                }
                Decision::Route(origin, RouteTarget::Discard(d)) => {
                    let (nh, idx) = intern_discard(&mut b, &mut hop_sets, d)
                        .map_err(|e| too_many(&prefix, e))?;
                    install(&prefix, nh);
                    (origin, idx)
                }
                Decision::Route(origin, RouteTarget::Forward(hops)) => {
                    match intern(&mut b, &mut hop_sets, &hops) {
                        Ok((nh, idx)) => {
                            install(&prefix, nh);
                            (origin, idx)
                        }
                        Err(e @ pipeline::TableError::TooManyTargets) => {
                            return Err(too_many(&prefix, e));
                        }
                        Err(e) => {
                            warnings.push(format!("route {prefix}: {e}"));
                            continue;
                        }
                    }
                }
            };
            entries.push(RouteEntry {
                prefix,
                origin,
                hops: idx,
            });
        }
        entries.sort_unstable_by_key(|e| e.prefix);

        let iif_of = |name: &str, v6| interfaces_on_link(&self.kernel, &by_ifindex, name, v6);
        let mut intern_target = |t: &RouteTarget| match t {
            RouteTarget::Forward(h) => intern(&mut b, &mut hop_sets, h).map(|v| v.0),
            RouteTarget::Discard(d) => intern_discard(&mut b, &mut hop_sets, *d).map(|v| v.0),
        };
        let (policy, policy_warnings) =
            policy::compile(&self.kernel, &iif_of, &by_ifindex, &mut intern_target)
                .map_err(crate::BuildError)?;
        warnings.extend(policy_warnings);
        b.set_policy(std::sync::Arc::new(policy))
            .map_err(|e| crate::BuildError(format!("policy rules: {e}")))?;

        let neighbours = self.neighbour_views(&ifaces, &by_ifindex);
        for n in &neighbours {
            if let (Some(id), Ok(mac)) = (
                ifaces.iter().position(|i| i.name == n.interface),
                n.mac.parse::<config::MacAddr>(),
            ) {
                let _ = b.add_neighbour(id as InterfaceId, n.ip, wire::MacAddr(mac.0));
            }
        }
        Ok(Built {
            tables: b.build(fib4, fib6),
            ports,
            routes: entries,
            hop_sets,
            neighbours,
            local_addrs,
            warnings,
            foreign,
        })
    }

    /// Neighbours from the kernel, then the config, then the control
    /// socket (later wins), on the given interfaces.
    pub(crate) fn neighbour_views(
        &self,
        ifaces: &[pipeline::Interface],
        by_ifindex: &HashMap<u32, InterfaceId>,
    ) -> Vec<NeighbourView> {
        let id_by_name = |name: &str| {
            ifaces
                .iter()
                .position(|i| i.name == name)
                .map(|i| i as InterfaceId)
        };
        let mut neigh: BTreeMap<(InterfaceId, IpAddr), ([u8; 6], Origin)> = BTreeMap::new();
        for (&(ifindex, ip), mac) in &self.kernel.neighbours {
            if let Some(&id) = by_ifindex.get(&ifindex) {
                neigh.insert((id, ip), (*mac, Origin::Kernel));
            }
        }
        for n in &self.config.neighbours {
            if let Some(id) = id_by_name(&n.interface) {
                neigh.insert((id, n.ip), (n.mac.0, Origin::Config));
            }
        }
        for ((name, ip), mac) in &self.api_neighbours {
            if let Some(id) = id_by_name(name) {
                neigh.insert((id, *ip), (*mac, Origin::Api));
            }
        }
        neigh
            .into_iter()
            .filter_map(|((id, ip), (mac, origin))| {
                Some(NeighbourView {
                    interface: ifaces.get(usize::from(id))?.name.clone(),
                    ip,
                    mac: mac_string(&mac),
                    origin,
                })
            })
            .collect()
    }

    /// Kernel interface index of each port, in port order (`None` when the
    /// kernel has no such link).
    pub fn port_ifindexes(&self) -> Vec<(String, Option<u32>)> {
        self.config
            .ports()
            .into_iter()
            .map(|p| (p.to_string(), self.kernel.ifindex_of(p)))
            .collect()
    }
}

/// Why the firewall's input chain cannot be enforced by the running
/// router, if it asks for anything: traffic for the router's own addresses
/// reaches the kernel's stack without passing through fastfwd (the XDP
/// program passes it up; an AF_PACKET socket sees a copy), so a rule or a
/// drop policy there would be silently ignored. The forward chain is
/// enforced in every engine.
pub fn input_chain_unenforced(fw: &config::FirewallConfig) -> Option<String> {
    let input = fw.rules.chain(firewall::Chain::Input);
    if let Some(r) = input.rules.first() {
        return Some(format!(
            "{}: line {} of the rules: chain input: `{}`: rules for the router's own traffic are not enforced by `fastfwd run` (that traffic goes to the kernel's stack); filter it with the host's nftables and keep fastfwd's rules in chain forward",
            fw.source, r.line, r.text
        ));
    }
    (input.policy == firewall::Policy::Drop).then(|| {
        format!(
            "{}: chain input: policy drop is not enforced by `fastfwd run` (traffic for the router goes to the kernel's stack); set it with the host's nftables",
            fw.source
        )
    })
}

/// The config's ports that no kernel link has the name of (for error
/// messages about missing ports).
pub fn missing_ports(state: &RouterState) -> Vec<String> {
    let names: HashMap<&str, u32> = state
        .kernel
        .links
        .values()
        .map(|l| (l.name.as_str(), l.ifindex))
        .collect();
    state
        .config
        .ports()
        .into_iter()
        .filter(|p| !names.contains_key(p))
        .map(str::to_owned)
        .collect()
}

/// Why a port's frames are not the port's own to route: the kernel
/// aggregates or bridges them, and fastfwd does not model that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SharedPort {
    /// The port is a team device: the kernel spreads what it sends over
    /// the members by the team's transmit hash and takes in what any
    /// member receives, which fastfwd does not model (a bond it forwards
    /// through).
    Aggregate {
        /// The port.
        port: String,
        /// Its kind ("team").
        kind: String,
    },
    /// The port is enslaved to another device (a bond, a team, a bridge;
    /// a VRF is modelled and not listed): the kernel hands what it
    /// receives to that device (bridged, or received by the aggregate)
    /// and sends through the device, not the port.
    Member {
        /// The port.
        port: String,
        /// The device it is enslaved to.
        master: String,
        /// That device's kind ("bond", "team", "bridge", "openvswitch").
        kind: String,
    },
}

impl SharedPort {
    /// The port concerned.
    pub fn port(&self) -> &str {
        match self {
            SharedPort::Aggregate { port, .. } | SharedPort::Member { port, .. } => port,
        }
    }
}

impl std::fmt::Display for SharedPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SharedPort::Aggregate { port, kind } => write!(
                f,
                "{port} is a {kind} device (link aggregation), which fastfwd does not forward over as the kernel does (spread by the aggregate's transmit hash, received on every member); use a bond instead, or leave it to the kernel"
            ),
            SharedPort::Member { port, master, kind } => write!(
                f,
                "{port} is enslaved to {master} ({kind}): the kernel receives and sends its frames through {master}, and fastfwd would route them past it; release it (ip link set {port} nomaster) or leave it out of the config"
            ),
        }
    }
}

/// The ports whose frames the kernel aggregates or bridges
/// ([`SharedPort`]): forwarding on them directly would differ from the
/// kernel, so the daemon refuses to start on them and names any that
/// become one while it runs. A bond port is not listed (its members
/// are): every engine sends and receives through the bond device itself,
/// so the kernel's bond spreads and gathers its frames.
pub fn shared_ports(state: &RouterState) -> Vec<SharedPort> {
    let kernel = &state.kernel;
    let by_name = |p: &str| kernel.links.values().find(|l| l.name == p);
    state
        .config
        .ports()
        .into_iter()
        .filter_map(|p| {
            let link = by_name(p)?;
            if let Some(kind) = link.kind.as_deref().filter(|&k| k == "team") {
                return Some(SharedPort::Aggregate {
                    port: p.to_owned(),
                    kind: kind.to_owned(),
                });
            }
            let master = kernel.links.get(&link.master?);
            if master.is_some_and(|m| m.vrf.is_some()) {
                return None;
            }
            let kind = master.and_then(|m| m.kind.clone()).unwrap_or_default();
            Some(SharedPort::Member {
                port: p.to_owned(),
                master: master.map_or_else(
                    || format!("ifindex {}", link.master.unwrap_or(0)),
                    |m| m.name.clone(),
                ),
                kind: if kind.is_empty() {
                    "unknown".into()
                } else {
                    kind
                },
            })
        })
        .collect()
}

/// The ports whose kernel MTU lets a frame larger than `max_frame` bytes
/// arrive (the MTU, an Ethernet header and one VLAN tag, which Linux takes
/// beyond the MTU), with that MTU.
pub fn oversized_ports(state: &RouterState, max_frame: usize) -> Vec<(String, u32)> {
    state
        .config
        .ports()
        .into_iter()
        .filter_map(|p| {
            let link = state.kernel.links.values().find(|l| l.name == p)?;
            let mtu = link.mtu?;
            (mtu as usize + 18 > max_frame).then(|| (p.to_owned(), mtu))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, KernelHop, Placement, RouteDetail, nud};
    use crate::kernel::{Change, KernelRoute};
    use crate::rule::KernelRule;

    const CONFIG: &str = r#"[[interfaces]]
name = "d0"
mac = "02:00:00:00:00:10"
addresses = ["198.18.0.10/24", "2001:2::10/64"]

[[interfaces]]
name = "d1"
mac = "02:00:00:00:01:10"
addresses = ["198.19.0.10/24"]

[[routes]]
prefix = "10.1.0.0/16"
via = "198.19.0.108"
"#;

    fn state() -> RouterState {
        let mut s = RouterState::new(Config::parse("router.toml", CONFIG).unwrap());
        for (i, name, mac) in [
            (5u32, "d0", [2, 0, 0, 0, 0, 0x55]),
            (6, "d1", [2, 0, 0, 0, 0, 0x66]),
            (7, "eth9", [2, 0, 0, 0, 0, 0x77]),
        ] {
            s.kernel.apply(&Event::Link {
                add: true,
                ifindex: i,
                name: name.into(),
                mac: Some(mac),
                mtu: Some(1500),
                up: true,
                vrf: None,
                master: None,
                kind: None,
                vlan: None,
            });
        }
        s.kernel.apply(&Event::Addr {
            add: true,
            ifindex: 6,
            addr: "198.19.0.10".parse().unwrap(),
            prefix_len: 24,
        });
        s.kernel.apply(&Event::Addr {
            add: true,
            ifindex: 6,
            addr: "2001:2:0:8000::10".parse().unwrap(),
            prefix_len: 64,
        });
        s
    }

    fn route(s: &Built, p: &str) -> Option<RouteView> {
        s.route_views().into_iter().find(|r| r.prefix == p)
    }

    #[test]
    fn kernel_addresses_and_macs_are_merged_into_the_interfaces() {
        let b = state().build().unwrap();
        let d1 = &b.tables.interfaces()[1];
        assert_eq!(d1.mac.0, [2, 0, 0, 0, 0, 0x66], "the kernel's MAC wins");
        assert_eq!(d1.ipv6.len(), 1, "kernel IPv6 address merged");
        assert!(
            b.local_addrs
                .contains(&(1, "2001:2:0:8000::10".parse().unwrap()))
        );
        assert!(
            b.warnings
                .iter()
                .any(|w| w.contains("differs from the kernel's"))
        );
        assert_eq!(
            route(&b, "2001:2:0:8000::/64").unwrap().origin,
            Origin::Connected
        );
    }

    /// A kernel VLAN device on a port is the config's VLAN of that id
    /// there: routes and neighbours through it are the VLAN interface's.
    /// One of another id, of 802.1ad, or on a link fastfwd does not own
    /// stays foreign; QinQ maps an 802.1Q device on an 802.1ad one.
    #[test]
    fn kernel_vlan_devices_are_the_configs_vlan_interfaces() {
        let text =
            format!("{CONFIG}\n[[interfaces.vlans]]\nid = 100\naddresses = [\"203.0.113.1/24\"]\n");
        let mut s = RouterState::new(Config::parse("router.toml", &text).unwrap());
        let link = |ifindex, name: &str, vlan| Event::Link {
            add: true,
            ifindex,
            name: name.into(),
            mac: Some([2, 0, 0, 0, 1, ifindex as u8]),
            mtu: Some(1500),
            up: true,
            vrf: None,
            master: None,
            kind: None,
            vlan,
        };
        let tag = |parent, id, ad| Some(crate::event::KernelVlan { parent, id, ad });
        for ev in [
            link(5, "d0", None),
            link(6, "d1", None),
            link(7, "eth9", None),
            link(10, "d1.100", tag(6, 100, false)),
            link(11, "d1.200", tag(6, 200, false)),
            link(12, "d1.ad100", tag(6, 100, true)),
            link(13, "eth9.100", tag(7, 100, false)),
        ] {
            s.kernel.apply(&ev);
        }
        let via = |p: &str, ifindex, gw: &str| Event::Route {
            add: true,
            prefix: p.parse().unwrap(),
            table: crate::event::RT_TABLE_MAIN,
            kind: 1,
            metric: 0,
            hops: vec![KernelHop {
                ifindex,
                gateway: Some(gw.parse().unwrap()),
            }],
            nh_id: None,
            detail: Default::default(),
        };
        for (p, i) in [
            ("172.16.0.0/16", 10),
            ("172.17.0.0/16", 11),
            ("172.18.0.0/16", 12),
            ("172.19.0.0/16", 13),
        ] {
            s.kernel.apply(&via(p, i, "203.0.113.2"));
        }
        s.kernel.apply(&Event::Neigh {
            add: true,
            ifindex: 10,
            ip: "203.0.113.2".parse().unwrap(),
            mac: Some([2, 0, 0, 0, 0xaa, 2]),
            state: nud::REACHABLE,
        });
        let b = s.build().unwrap();
        let r = route(&b, "172.16.0.0/16").unwrap();
        assert_eq!(
            r.next_hops,
            vec!["via 203.0.113.2 dev d1.100".to_string()],
            "{r:?}"
        );
        for p in ["172.17.0.0/16", "172.18.0.0/16", "172.19.0.0/16"] {
            assert!(route(&b, p).is_none(), "{p}: {:?}", route(&b, p));
        }
        assert!(
            b.neighbours.iter().any(
                |n| n.interface == "d1.100" && n.ip == "203.0.113.2".parse::<IpAddr>().unwrap()
            ),
            "{:?}",
            b.neighbours
        );
        // `iif d1.100` is the VLAN interface's input: its packets are
        // blackholed, d1's untagged ones not.
        let vlan_id = b
            .tables
            .interfaces()
            .iter()
            .position(|i| i.name == "d1.100")
            .unwrap() as InterfaceId;
        s.kernel.apply(&Event::Rule {
            add: true,
            rule: KernelRule {
                iif: Some("d1.100".into()),
                ..crate::rule::testing::rule(
                    100,
                    crate::rule::RuleVerb::Discard(Discard::Blackhole),
                )
            },
        });
        let b = s.build().unwrap();
        assert_eq!(
            route_in(&b, vlan_id, "203.0.113.2", "198.18.0.1"),
            Some(vec!["blackhole".to_string()])
        );
        assert_ne!(
            route_in(&b, 1, "198.19.0.108", "198.18.0.1"),
            Some(vec!["blackhole".to_string()])
        );
        // QinQ: an 802.1Q device on an 802.1ad one on a port.
        let ifaces: Vec<pipeline::Interface> = [
            Vlan::Untagged,
            Vlan::Double {
                outer: 100,
                inner: 20,
            },
        ]
        .into_iter()
        .map(|vlan| pipeline::Interface {
            name: String::new(),
            port: 1,
            vlan,
            mac: pipeline::MacAddr([2, 0, 0, 0, 0, 1]),
            ipv4: vec![],
            ipv6: vec![],
            mtu: 1500,
        })
        .collect();
        s.kernel.apply(&link(14, "d1.ad100.20", tag(12, 20, false)));
        let ports = ["d0".to_string(), "d1".to_string()];
        let m = link_interfaces(&s.kernel, &ifaces, &ports);
        assert_eq!((m.get(&6), m.get(&14)), (Some(&0), Some(&1)), "{m:?}");
        assert_eq!(m.len(), 2, "{m:?}");
    }

    #[test]
    fn kernel_routes_follow_adds_and_deletes_and_skip_foreign_interfaces() {
        let mut s = state();
        let hop = |i| {
            vec![KernelHop {
                ifindex: i,
                gateway: Some("198.19.0.108".parse().unwrap()),
            }]
        };
        let add = |p: &str, i, add| Event::Route {
            add,
            prefix: p.parse().unwrap(),
            table: crate::event::RT_TABLE_MAIN,
            kind: 1,
            metric: 0,
            hops: hop(i),
            nh_id: None,
            detail: Default::default(),
        };
        assert!(s.kernel.apply(&add("172.16.0.0/12", 6, true)));
        assert!(s.kernel.apply(&add("172.32.0.0/12", 7, true)));
        let b = s.build().unwrap();
        let r = route(&b, "172.16.0.0/12").unwrap();
        assert_eq!(
            (r.origin, r.next_hops),
            (Origin::Kernel, vec!["via 198.19.0.108 dev d1".to_string()])
        );
        assert!(
            route(&b, "172.32.0.0/12").is_none(),
            "eth9 is not a fastfwd interface"
        );
        assert!(s.kernel.apply(&add("172.16.0.0/12", 6, false)));
        assert!(route(&s.build().unwrap(), "172.16.0.0/12").is_none());
        // Routes of other tables are not main's; each change to one is a
        // policy change (a rule may look that table up).
        let in_table_100 = |p: &str| Event::Route {
            add: true,
            prefix: p.parse().unwrap(),
            table: 100,
            kind: 1,
            metric: 0,
            hops: hop(6),
            nh_id: None,
            detail: Default::default(),
        };
        let other = in_table_100("9.0.0.0/8");
        assert_eq!(s.kernel.change(&other), Change::Policy);
        assert!(route(&s.build().unwrap(), "9.0.0.0/8").is_none());
        let again = in_table_100("9.1.0.0/16");
        assert_eq!(s.kernel.change(&again), Change::Policy);
        assert_eq!(s.kernel.change(&again), Change::None, "no change");
        assert_eq!(s.kernel.tables[&100].len(), 2);
    }

    fn main_route(prefix: &str, gateway: &str, placement: Placement) -> Event {
        Event::Route {
            add: true,
            prefix: prefix.parse().unwrap(),
            table: RT_TABLE_MAIN,
            kind: libc::RTN_UNICAST,
            metric: 0,
            hops: vec![KernelHop {
                ifindex: 6,
                gateway: Some(gateway.parse().unwrap()),
            }],
            nh_id: None,
            detail: RouteDetail {
                placement,
                ..Default::default()
            },
        }
    }

    /// `ev` (a route) with its fields changed by `f`.
    fn set(
        mut ev: Event,
        f: impl FnOnce(&mut bool, &mut u32, &mut u8, &mut Vec<KernelHop>, &mut RouteDetail),
    ) -> Event {
        if let Event::Route {
            add,
            metric,
            kind,
            hops,
            detail,
            ..
        } = &mut ev
        {
            f(add, metric, kind, hops, detail);
        }
        ev
    }

    fn next_hops(s: &RouterState, p: &str) -> Vec<String> {
        route(&s.build().unwrap(), p).map_or(Vec::new(), |r| r.next_hops)
    }

    #[test]
    fn appended_ipv4_routes_wait_behind_the_first() {
        let mut s = state();
        let p = "172.20.0.0/16";
        s.kernel
            .apply(&main_route(p, "198.19.0.1", Placement::Prepend));
        // `ip route append`: the kernel keeps using the first.
        assert!(
            !s.kernel
                .apply(&main_route(p, "198.19.0.2", Placement::Append))
        );
        assert_eq!(next_hops(&s, p), ["via 198.19.0.1 dev d1"]);
        // `ip route prepend`: the new one goes first.
        assert!(
            s.kernel
                .apply(&main_route(p, "198.19.0.3", Placement::Prepend))
        );
        assert_eq!(next_hops(&s, p), ["via 198.19.0.3 dev d1"]);
        // `ip route replace` replaces the first.
        assert!(
            s.kernel
                .apply(&main_route(p, "198.19.0.4", Placement::Replace))
        );
        assert_eq!(next_hops(&s, p), ["via 198.19.0.4 dev d1"]);
        // Deleting the one in use brings the next back.
        let del = |g| {
            set(main_route(p, g, Placement::Append), |a, _, _, _, _| {
                *a = false
            })
        };
        assert!(s.kernel.apply(&del("198.19.0.4")));
        assert_eq!(next_hops(&s, p), ["via 198.19.0.1 dev d1"]);
        assert!(!s.kernel.apply(&del("198.19.0.2")));
        assert!(s.kernel.apply(&del("198.19.0.1")));
        assert!(next_hops(&s, p).is_empty());
        assert!(s.kernel.aliases.is_empty());
        // A dump lists them in order: appended, the first stays in use.
        let mut d = state();
        d.kernel
            .apply(&main_route(p, "198.19.0.1", Placement::Append));
        d.kernel
            .apply(&main_route(p, "198.19.0.2", Placement::Append));
        assert_eq!(next_hops(&d, p), ["via 198.19.0.1 dev d1"]);
        // IPv6 sends the whole route: a new one replaces.
        let q = "2001:db8:7::/48";
        d.kernel
            .apply(&main_route(q, "2001:2:0:8000::1", Placement::Prepend));
        d.kernel
            .apply(&main_route(q, "2001:2:0:8000::2", Placement::Append));
        assert_eq!(next_hops(&d, q), ["via 2001:2:0:8000::2 dev d1"]);
    }

    #[test]
    fn a_route_with_its_next_hops_dead_gives_way() {
        let mut s = state();
        let p = "172.21.0.0/16";
        s.kernel
            .apply(&main_route(p, "198.19.0.1", Placement::Append));
        // A second route at a higher metric, and a dead one (its next
        // hops left out by the parser) before the first.
        s.kernel.apply(&set(
            main_route(p, "198.19.0.9", Placement::Append),
            |_, m, _, _, _| *m = 10,
        ));
        let dead = set(
            main_route(p, "198.19.0.5", Placement::Prepend),
            |_, _, _, h, _| h.clear(),
        );
        s.kernel.apply(&dead);
        assert_eq!(next_hops(&s, p), ["via 198.19.0.1 dev d1"]);
        // The link of the first going down leaves the higher metric.
        s.kernel.apply(&Event::Link {
            add: true,
            ifindex: 6,
            name: "d1".into(),
            mac: Some([2, 0, 0, 0, 0, 0x66]),
            mtu: Some(1500),
            up: false,
            vrf: None,
            master: None,
            kind: None,
            vlan: None,
        });
        assert!(
            s.kernel
                .routes
                .range((p.parse().unwrap(), 0)..)
                .next()
                .is_none()
        );
    }

    #[test]
    fn routes_fastfwd_does_not_forward_with_are_named() {
        let mut s = state();
        assert!(s.kernel.unmodelled().is_empty());
        let src = set(
            main_route("2001:db8:9::/48", "2001:2:0:8000::1", Placement::Append),
            |_, _, _, _, d| d.src = Some("2001:db8:1::/48".parse().unwrap()),
        );
        assert_eq!(s.kernel.change(&src), Change::Policy);
        let tos = set(
            main_route("172.22.0.0/16", "198.19.0.1", Placement::Append),
            |_, _, _, _, d| d.tos = 0x10,
        );
        let encap = set(
            main_route("172.23.0.0/16", "198.19.0.1", Placement::Append),
            |_, _, _, _, d| d.encap = Some(1),
        );
        let local = set(
            main_route("172.24.0.0/16", "198.19.0.1", Placement::Append),
            |_, _, k, _, _| *k = libc::RTN_LOCAL,
        );
        for ev in [&tos, &encap, &local] {
            assert_eq!(s.kernel.change(ev), Change::Policy, "{ev:?}");
        }
        assert_eq!(
            s.kernel.unmodelled(),
            [
                "ip route 172.22.0.0/16 metric 0, tos 0x10: a route for one TOS",
                "ip route 172.23.0.0/16 metric 0, an encapsulation (lwtunnel type 1)",
                "ip route 172.24.0.0/16 metric 0, a route of type 2",
                "ip route 2001:db8:9::/48 metric 0, from 2001:db8:1::/48: a source-specific route",
            ]
        );
        // None of them is forwarded with.
        for p in [
            "2001:db8:9::/48",
            "172.22.0.0/16",
            "172.23.0.0/16",
            "172.24.0.0/16",
        ] {
            assert!(next_hops(&s, p).is_empty(), "{p}");
        }
        for ev in [&src, &tos, &encap, &local] {
            let del = set(ev.clone(), |a, _, _, _, _| *a = false);
            assert_eq!(s.kernel.change(&del), Change::Policy);
        }
        assert!(s.kernel.unmodelled().is_empty());
    }

    /// The next-hop text of the route `tables` pick for a packet from
    /// `src` to `dst` received on interface 0 (`None`: no route).
    fn route_of(b: &Built, src: &str, dst: &str) -> Option<Vec<String>> {
        let ifaces = b.tables.interfaces();
        let id = match (src.parse().unwrap(), dst.parse().unwrap()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                b.tables.route4(Some(s.into()), d.into(), Some(0), None)
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                b.tables.route6(Some(s.into()), d.into(), Some(0), None)
            }
            _ => panic!("mixed families"),
        }?;
        Some(target_strings(b.tables.target(id)?, ifaces))
    }

    #[test]
    fn a_source_rule_routes_its_source_by_its_table() {
        use crate::rule::RuleVerb;
        let mut s = state();
        for r in crate::rule::testing::defaults() {
            s.kernel.apply(&Event::Rule { add: true, rule: r });
        }
        s.kernel.apply(&main_route(
            "198.19.10.0/24",
            "198.19.0.108",
            Placement::Append,
        ));
        let (from_lab, other) = ("198.18.10.5", "198.18.0.108");
        let b = s.build().unwrap();
        assert!(b.tables.policy().main_only(), "the default rules");
        assert_eq!(
            route_of(&b, from_lab, "198.19.10.1"),
            Some(vec!["via 198.19.0.108 dev d1".to_string()])
        );
        // The field's case: `ip rule add from 198.18.10.0/24 lookup 100`
        // and a blackhole in table 100.
        let rule = KernelRule {
            src: Some("198.18.10.0/24".parse().unwrap()),
            ..crate::rule::testing::rule(100, RuleVerb::Lookup(100))
        };
        let add_rule = Event::Rule {
            add: true,
            rule: rule.clone(),
        };
        assert_eq!(s.kernel.change(&add_rule), Change::Policy);
        let b = s.build().unwrap();
        assert!(b.tables.policy().main_only(), "table 100 is empty");
        let blackhole = Event::Route {
            add: true,
            prefix: "198.19.10.0/24".parse().unwrap(),
            table: 100,
            kind: libc::RTN_BLACKHOLE,
            metric: 0,
            hops: Vec::new(),
            nh_id: None,
            detail: Default::default(),
        };
        assert_eq!(s.kernel.change(&blackhole), Change::Policy);
        assert!(
            s.kernel.unmodelled().is_empty(),
            "{:?}",
            s.kernel.unmodelled()
        );
        let b = s.build().unwrap();
        assert!(!b.tables.policy().main_only());
        assert_eq!(
            route_of(&b, from_lab, "198.19.10.1"),
            Some(vec!["blackhole".to_string()])
        );
        assert_eq!(
            route_of(&b, other, "198.19.10.1"),
            Some(vec!["via 198.19.0.108 dev d1".to_string()])
        );
        // What table 100 does not hold falls through to main.
        assert_eq!(
            route_of(&b, from_lab, "198.19.0.108"),
            Some(vec!["dev d1".to_string()])
        );
        assert!(route_of(&b, from_lab, "203.0.113.1").is_none());
        // IPv6 is untouched by an IPv4 rule.
        assert!(b.tables.policy().v6.main_only());

        assert_eq!(
            s.kernel.change(&Event::Rule { add: false, rule }),
            Change::Policy
        );
        assert!(s.build().unwrap().tables.policy().main_only());
    }

    /// The route a packet from `src` to `dst` arriving on interface `iif`
    /// takes.
    fn route_in(b: &Built, iif: InterfaceId, src: &str, dst: &str) -> Option<Vec<String>> {
        let id = match (src.parse().unwrap(), dst.parse().unwrap()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                b.tables.route4(Some(s.into()), d.into(), Some(iif), None)
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                b.tables.route6(Some(s.into()), d.into(), Some(iif), None)
            }
            _ => panic!("mixed families"),
        }?;
        Some(target_strings(b.tables.target(id)?, b.tables.interfaces()))
    }

    /// IPv6 keeps one route straight onto each device for a prefix and
    /// metric (every interface's fe80::/64): one going away leaves the
    /// others, as the kernel does.
    #[test]
    fn ipv6_routes_onto_different_devices_are_kept_apart() {
        let mut s = state();
        let route = |add, ifindex, gateway: Option<&str>| Event::Route {
            add,
            prefix: "fe80::/64".parse().unwrap(),
            table: RT_TABLE_MAIN,
            kind: libc::RTN_UNICAST,
            metric: 256,
            hops: vec![KernelHop {
                ifindex,
                gateway: gateway.map(|g| g.parse().unwrap()),
            }],
            nh_id: None,
            detail: Default::default(),
        };
        let dev = |add, ifindex| route(add, ifindex, None);
        let key = ("fe80::/64".parse().unwrap(), 256);
        let used = |s: &RouterState| s.kernel.routes.get(&key).cloned();
        let on = |ifindex| {
            Some(KernelRoute::Via(vec![KernelHop {
                ifindex,
                gateway: None,
            }]))
        };
        s.kernel.apply(&dev(true, 5));
        s.kernel.apply(&dev(true, 6));
        assert_eq!(used(&s), on(5), "the first added is used");
        s.kernel.apply(&dev(false, 5));
        assert_eq!(used(&s), on(6), "d1's stays when d0's goes");
        s.kernel.apply(&dev(true, 5));
        assert_eq!(used(&s), on(6));
        s.kernel.apply(&dev(false, 6));
        s.kernel.apply(&dev(false, 5));
        assert_eq!(used(&s), None);
        // A route through a gateway is one (multipath) route: it replaces.
        s.kernel.apply(&dev(true, 5));
        s.kernel.apply(&route(true, 6, Some("fe80::1")));
        s.kernel.apply(&dev(false, 5));
        assert_eq!(used(&s), None, "the gateway route replaced d0's");
    }

    /// The kernel's IPv6 rules see what a VRF member receives as received
    /// on the VRF device (`iif MEMBER` matches none of it, `iif VRF` all
    /// of it); its IPv4 rules see the member. The oracle under Debian's
    /// kernel found both: fastfwd matched `iif d0` for IPv6, then (with
    /// the IPv6 reading for both) missed it for IPv4.
    #[test]
    fn iif_rules_see_a_vrf_member_s_packets_as_the_kernel_does() {
        use crate::rule::RuleVerb;
        use pipeline::Discard;
        let mut s = state();
        let mut rules = crate::rule::testing::defaults();
        for v6 in [false, true] {
            rules.insert(KernelRule {
                l3mdev: true,
                v6,
                ..crate::rule::testing::rule(1000, RuleVerb::Lookup(0))
            });
            rules.insert(KernelRule {
                iif: Some("d0".into()),
                v6,
                ..crate::rule::testing::rule(100, RuleVerb::Discard(Discard::Blackhole))
            });
            rules.insert(KernelRule {
                iif: Some("blue".into()),
                v6,
                ..crate::rule::testing::rule(200, RuleVerb::Discard(Discard::Prohibit))
            });
        }
        for r in rules {
            s.kernel.apply(&Event::Rule { add: true, rule: r });
        }
        let link = |ifindex, name: &str, vrf, master| Event::Link {
            add: true,
            ifindex,
            name: name.into(),
            mac: Some([2, 0, 0, 0, 0, ifindex as u8]),
            mtu: Some(1500),
            up: true,
            vrf,
            master,
            kind: vrf.map(|_| "vrf".into()),
            vlan: None,
        };
        s.kernel.apply(&link(9, "blue", Some(10), None));
        s.kernel.apply(&link(5, "d0", None, Some(9)));
        for (prefix, gateway) in [
            ("203.0.113.0/24", "198.19.0.108"),
            ("2001:db8:113::/48", "2001:2:0:8000::108"),
        ] {
            s.kernel.apply(&Event::Route {
                add: true,
                prefix: prefix.parse().unwrap(),
                table: RT_TABLE_MAIN,
                kind: libc::RTN_UNICAST,
                metric: 0,
                hops: vec![KernelHop {
                    ifindex: 6,
                    gateway: Some(gateway.parse().unwrap()),
                }],
                nh_id: None,
                detail: Default::default(),
            });
        }
        let (on_d0, on_d1) = (0, 1);
        let prohibit = Some(vec!["prohibit".to_string()]);
        let blackhole = Some(vec!["blackhole".to_string()]);
        let b = s.build().unwrap();
        assert_eq!(
            route_in(&b, on_d0, "2001:2::5", "2001:db8:113::1"),
            prohibit,
            "IPv6: iif blue, not iif d0"
        );
        assert_eq!(
            route_in(&b, on_d0, "198.18.0.5", "203.0.113.1"),
            blackhole,
            "IPv4: iif d0"
        );
        assert_eq!(
            route_in(&b, on_d1, "198.19.0.5", "203.0.113.1"),
            Some(vec!["via 198.19.0.108 dev d1".to_string()])
        );
        // Out of the VRF, d0's IPv6 packets are d0's again.
        s.kernel.apply(&link(5, "d0", None, None));
        let b = s.build().unwrap();
        assert_eq!(
            route_in(&b, on_d0, "2001:2::5", "2001:db8:113::1"),
            blackhole
        );
    }

    #[test]
    fn a_vrf_routes_its_members_packets_by_its_table() {
        use crate::rule::RuleVerb;
        let mut s = state();
        let mut rules = crate::rule::testing::defaults();
        for v6 in [false, true] {
            rules.insert(KernelRule {
                l3mdev: true,
                v6,
                ..crate::rule::testing::rule(1000, RuleVerb::Lookup(0))
            });
        }
        for r in rules {
            s.kernel.apply(&Event::Rule { add: true, rule: r });
        }
        let link = |ifindex, name: &str, vrf, master| Event::Link {
            add: true,
            ifindex,
            name: name.into(),
            mac: Some([2, 0, 0, 0, 0, ifindex as u8]),
            mtu: Some(1500),
            up: true,
            vrf,
            master,
            kind: vrf.map(|_| "vrf".into()),
            vlan: None,
        };
        // blue (table 10) with d0 as its member.
        s.kernel.apply(&link(9, "blue", Some(10), None));
        s.kernel.apply(&link(5, "d0", None, Some(9)));
        let route = |prefix: &str, table, kind, protocol, hops: Vec<KernelHop>| Event::Route {
            add: true,
            prefix: prefix.parse().unwrap(),
            table,
            kind,
            metric: 0,
            hops,
            nh_id: None,
            detail: RouteDetail {
                protocol,
                ..Default::default()
            },
        };
        let d0 = KernelHop {
            ifindex: 5,
            gateway: None,
        };
        let via_d1 = KernelHop {
            ifindex: 6,
            gateway: Some("198.19.0.108".parse().unwrap()),
        };
        // What the kernel puts in the VRF's table for d0's address, and a
        // route leaking to d1.
        let kernel = libc::RTPROT_KERNEL;
        for ev in [
            route("198.18.0.0/24", 10, libc::RTN_UNICAST, kernel, vec![d0]),
            route("198.18.0.10/32", 10, libc::RTN_LOCAL, kernel, vec![d0]),
            route("198.18.0.255/32", 10, libc::RTN_BROADCAST, kernel, vec![d0]),
            route("ff00::/8", 10, libc::RTN_MULTICAST, kernel, vec![d0]),
            route(
                "203.0.113.0/24",
                10,
                libc::RTN_UNICAST,
                libc::RTPROT_STATIC,
                vec![via_d1],
            ),
            route(
                "203.0.113.0/24",
                RT_TABLE_MAIN,
                libc::RTN_BLACKHOLE,
                libc::RTPROT_STATIC,
                vec![],
            ),
        ] {
            s.kernel.apply(&ev);
        }
        assert!(
            s.kernel.unmodelled().is_empty(),
            "{:?}",
            s.kernel.unmodelled()
        );
        let b = s.build().unwrap();
        let (on_d0, on_d1) = (0, 1);
        let via = Some(vec!["via 198.19.0.108 dev d1".to_string()]);
        let blackhole = Some(vec!["blackhole".to_string()]);
        assert_eq!(route_in(&b, on_d0, "198.18.0.5", "203.0.113.1"), via);
        assert_eq!(route_in(&b, on_d1, "198.19.0.5", "203.0.113.1"), blackhole);
        // d0's subnet is in blue's table, not main.
        assert_eq!(
            route_in(&b, on_d0, "198.18.0.5", "198.18.0.7"),
            Some(vec!["dev d0".to_string()])
        );
        assert_eq!(route_in(&b, on_d1, "198.19.0.5", "198.18.0.7"), None);
        assert!(
            !b.routes
                .iter()
                .any(|e| e.prefix == "198.18.0.0/24".parse().unwrap()),
            "no connected route for a VRF member's subnet in main"
        );
        // d1's own subnet stays connected in main, and is looked up from
        // blue when blue has no route for it.
        assert_eq!(
            route_in(&b, on_d0, "198.18.0.5", "198.19.0.7"),
            Some(vec!["dev d1".to_string()])
        );
        // A subnet on both ports (link-local): main's route is d1's, in
        // the table and in its text.
        for (ifindex, addr) in [(5, "fe80::5"), (6, "fe80::6")] {
            s.kernel.apply(&Event::Addr {
                add: true,
                ifindex,
                addr: addr.parse().unwrap(),
                prefix_len: 64,
            });
        }
        let b = s.build().unwrap();
        let link_local = b
            .routes
            .iter()
            .find(|e| e.prefix == "fe80::/64".parse().unwrap())
            .expect("fe80::/64 connected in main");
        assert_eq!(b.hop_sets[link_local.hops as usize], ["dev d1"]);
        assert_eq!(
            route_in(&b, on_d1, "2001:2:0:8000::5", "fe80::9"),
            Some(vec!["dev d1".to_string()])
        );
        // Without the VRF, d0 routes by main again.
        s.kernel.apply(&link(5, "d0", None, None));
        let b = s.build().unwrap();
        assert_eq!(route_in(&b, on_d0, "198.18.0.5", "203.0.113.1"), blackhole);
        assert_eq!(
            route_in(&b, on_d1, "198.19.0.5", "198.18.0.7"),
            Some(vec!["dev d0".to_string()])
        );
    }

    #[test]
    fn rules_compile_as_the_kernel_evaluates_them() {
        use crate::rule::RuleVerb;
        use crate::rule::testing::rule;
        let mut s = state();
        for r in crate::rule::testing::defaults() {
            s.kernel.apply(&Event::Rule { add: true, rule: r });
        }
        let v6 = |r: KernelRule| KernelRule { v6: true, ..r };
        let cidr = |p: &str| Some(p.parse::<Cidr>().unwrap());
        let table_route =
            |t: u32, p: &str, kind: u8, via: Option<(u32, Option<&str>)>| Event::Route {
                add: true,
                prefix: p.parse().unwrap(),
                table: t,
                kind,
                metric: 0,
                hops: via
                    .map(|(ifindex, g)| KernelHop {
                        ifindex,
                        gateway: g.map(|g| g.parse().unwrap()),
                    })
                    .into_iter()
                    .collect(),
                nh_id: None,
                detail: Default::default(),
            };
        for ev in [
            table_route(
                200,
                "2001:db8:7::/48",
                libc::RTN_UNICAST,
                Some((6, Some("2001:2:0:8000::7"))),
            ),
            table_route(200, "2001:db8:7:1::/64", libc::RTN_THROW, None),
            table_route(300, "2001:db8::/32", libc::RTN_PROHIBIT, None),
            // Through a link fastfwd does not own: not used.
            table_route(200, "2001:db8:8::/48", libc::RTN_UNICAST, Some((7, None))),
        ] {
            assert_eq!(s.kernel.change(&ev), Change::Policy);
        }
        for r in [
            // An output-interface rule never matches a forwarded packet;
            // inverted, it matches every one.
            v6(KernelRule {
                oif: Some("d1".into()),
                ..rule(10, RuleVerb::Discard(Discard::Blackhole))
            }),
            v6(KernelRule {
                oif: Some("d1".into()),
                invert: true,
                ..rule(20, RuleVerb::Goto(40))
            }),
            v6(rule(30, RuleVerb::Discard(Discard::Blackhole))),
            // The goto lands here.
            v6(KernelRule {
                dst: cidr("2001:db8::/32"),
                ..rule(40, RuleVerb::Lookup(200))
            }),
            v6(KernelRule {
                iif: Some("d0".into()),
                ..rule(50, RuleVerb::Lookup(300))
            }),
            v6(KernelRule {
                dst: cidr("2001:db8:9::/48"),
                ..rule(60, RuleVerb::Discard(Discard::Unreachable))
            }),
        ] {
            assert_eq!(
                s.kernel.change(&Event::Rule { add: true, rule: r }),
                Change::Policy
            );
        }
        assert!(
            s.kernel.unmodelled().is_empty(),
            "{:?}",
            s.kernel.unmodelled()
        );
        let b = s.build().unwrap();
        let from = "2001:2::108";
        let text = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        // Table 200.
        assert_eq!(
            route_of(&b, from, "2001:db8:7::1"),
            text(&["via 2001:2:0:8000::7 dev d1"])
        );
        // A throw in 200 continues: rule 50 (received on d0, interface 0)
        // prohibits.
        assert_eq!(route_of(&b, from, "2001:db8:7:1::1"), text(&["prohibit"]));
        // 200's route through eth9 is not used: 300 again.
        assert_eq!(route_of(&b, from, "2001:db8:8::1"), text(&["prohibit"]));
        // Outside 2001:db8::/32: rule 50 misses, main answers.
        assert_eq!(route_of(&b, from, "2001:2:0:8000::5"), text(&["dev d1"]));
        assert_eq!(route_of(&b, from, "2001:db9::1"), None);
        // Received elsewhere (the host's own ICMP errors: iif lo), rule 60
        // gives no route where main's default would not exist anyway.
        let own = b.tables.route6(
            None,
            "2001:db8:7:1::1"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .into(),
            None,
            None,
        );
        assert_eq!(own, None, "throw, then no iif d0, then main has none");
    }

    #[test]
    fn sources_take_precedence_api_over_config_over_kernel() {
        let mut s = state();
        s.kernel.apply(&Event::Route {
            add: true,
            prefix: "10.1.0.0/16".parse().unwrap(),
            table: crate::event::RT_TABLE_MAIN,
            kind: 1,
            metric: 0,
            hops: vec![KernelHop {
                ifindex: 5,
                gateway: None,
            }],
            nh_id: None,
            detail: Default::default(),
        });
        assert_eq!(
            route(&s.build().unwrap(), "10.1.0.0/16").unwrap().origin,
            Origin::Config
        );
        s.api_routes.insert(
            "10.1.0.0/16".parse().unwrap(),
            ApiRoute {
                next_hops: vec![config::NextHop {
                    interface: "d0".into(),
                    via: None,
                }],
            },
        );
        let r = route(&s.build().unwrap(), "10.1.0.0/16").unwrap();
        assert_eq!(
            (r.origin, r.next_hops),
            (Origin::Api, vec!["dev d0".to_string()])
        );
    }

    #[test]
    fn neighbours_need_a_usable_state() {
        let mut s = state();
        let n = |state, mac| Event::Neigh {
            add: true,
            ifindex: 6,
            ip: "198.19.0.108".parse().unwrap(),
            mac,
            state,
        };
        assert!(!s.kernel.apply(&n(nud::INCOMPLETE, None)));
        assert!(s.kernel.apply(&n(nud::REACHABLE, Some([2, 0, 0, 0, 0, 8]))));
        assert!(
            !s.kernel.apply(&n(nud::STALE, Some([2, 0, 0, 0, 0, 8]))),
            "same MAC: no change"
        );
        let b = s.build().unwrap();
        assert_eq!(
            b.tables.neighbour(1, "198.19.0.108".parse().unwrap()),
            Some(wire::MacAddr([2, 0, 0, 0, 0, 8]))
        );
        assert!(s.kernel.apply(&n(nud::FAILED, None)));
        assert!(s.kernel.neighbours.is_empty());
        let mcast = Event::Neigh {
            add: true,
            ifindex: 6,
            ip: "ff02::2".parse().unwrap(),
            mac: Some([0x33, 0x33, 0, 0, 0, 2]),
            state: nud::NOARP,
        };
        assert!(
            !s.kernel.apply(&mcast),
            "multicast mappings are not neighbours"
        );
    }

    #[test]
    fn a_large_kernel_table_shares_next_hop_sets() {
        let mut s = state();
        for i in 0..20_000u32 {
            let gw = if i % 2 == 0 {
                "198.19.0.108"
            } else {
                "198.19.0.109"
            };
            s.kernel.apply(&Event::Route {
                add: true,
                prefix: Cidr::V4(wire::Ipv4Cidr::new(0x0a00_0000 + (i << 8), 24).unwrap()),
                table: crate::event::RT_TABLE_MAIN,
                kind: 1,
                metric: 0,
                hops: vec![KernelHop {
                    ifindex: 6,
                    gateway: Some(gw.parse().unwrap()),
                }],
                nh_id: None,
                detail: Default::default(),
            });
        }
        let b = s.build().unwrap();
        assert_eq!(
            b.routes
                .iter()
                .filter(|r| r.origin == Origin::Kernel)
                .count(),
            20_000
        );
        // Two gateway sets plus one connected text per interface.
        assert!(b.hop_sets.len() <= 2 + 4, "{}", b.hop_sets.len());
        let hit = b.longest_match("10.0.7.9/32".parse().unwrap()).unwrap();
        assert_eq!(
            (hit.prefix.as_str(), hit.next_hops[0].as_str()),
            ("10.0.7.0/24", "via 198.19.0.109 dev d1")
        );
        assert!(b.longest_match("11.0.0.1/32".parse().unwrap()).is_none());
        let looked = fib::Lookup::lookup(&b.tables.fib4, 0x0a00_0709);
        assert!(looked.is_some());
    }

    #[test]
    fn ports_the_kernel_aggregates_or_bridges_are_named() {
        let mut s = state();
        assert_eq!(shared_ports(&s), vec![], "plain ports");
        let link = |ifindex, name: &str, master, kind: Option<&str>| Event::Link {
            add: true,
            ifindex,
            name: name.into(),
            mac: Some([2, 0, 0, 0, 0, ifindex as u8]),
            mtu: Some(1500),
            up: true,
            vrf: (kind == Some("vrf")).then_some(10),
            master,
            kind: kind.map(Into::into),
            vlan: None,
        };
        // A VRF master is modelled: not listed.
        s.kernel.apply(&link(9, "blue", None, Some("vrf")));
        s.kernel.apply(&link(5, "d0", Some(9), Some("veth")));
        assert_eq!(shared_ports(&s), vec![]);
        // d0 in a bond, d1 in a bridge, eth9 (not a port) in the bond too.
        s.kernel.apply(&link(20, "bond0", None, Some("bond")));
        s.kernel.apply(&link(21, "br0", None, Some("bridge")));
        s.kernel.apply(&link(5, "d0", Some(20), Some("veth")));
        s.kernel.apply(&link(6, "d1", Some(21), None));
        s.kernel.apply(&link(7, "eth9", Some(20), None));
        let shared = shared_ports(&s);
        assert_eq!(
            shared,
            vec![
                SharedPort::Member {
                    port: "d0".into(),
                    master: "bond0".into(),
                    kind: "bond".into()
                },
                SharedPort::Member {
                    port: "d1".into(),
                    master: "br0".into(),
                    kind: "bridge".into()
                },
            ]
        );
        assert!(
            shared[0].to_string().contains("enslaved to bond0 (bond)"),
            "{}",
            shared[0]
        );
        // A port that is itself an aggregate.
        s.kernel.apply(&link(5, "d0", None, Some("team")));
        s.kernel.apply(&link(6, "d1", None, None));
        assert_eq!(
            shared_ports(&s),
            vec![SharedPort::Aggregate {
                port: "d0".into(),
                kind: "team".into()
            }]
        );
        // A bond port is not listed: every engine forwards through it.
        s.kernel.apply(&link(5, "d0", None, Some("bond")));
        assert_eq!(shared_ports(&s), vec![]);
        // A bond in a bridge is bridged (one reason a port is named: the
        // first found).
        s.kernel.apply(&link(5, "d0", Some(21), Some("bond")));
        assert_eq!(
            shared_ports(&s),
            vec![SharedPort::Member {
                port: "d0".into(),
                master: "br0".into(),
                kind: "bridge".into()
            }]
        );
    }
}
