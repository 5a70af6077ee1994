//! Runtime tables read by the workers: interfaces, ports, local addresses,
//! adjacencies (next-hop sets), neighbours, the two FIBs and the ACL.
//!
//! The control side describes the router with a [`TablesBuilder`] and calls
//! [`TablesBuilder::build`]; the result is immutable and shared with the
//! workers behind an `Arc` that the control side swaps as a whole (an
//! RCU-style snapshot). Building does all the work the per-packet path
//! would otherwise repeat: L2 header templates per interface, sorted local
//! address lists, gateway MACs resolved into the adjacencies.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use fib::NextHopId;
pub use wire::MacAddr;
use wire::{Ipv4Cidr, Ipv6Cidr};

use crate::acl::{AcceptAll, Acl};
use crate::policy::{InputSelector, Policy, RuleAction, RuleKey};
use std::sync::Arc;

/// Index of a physical port as the I/O backend numbers them (`0..n`).
pub type PortId = u16;
/// Index of a logical interface in [`Tables::interfaces`].
pub type InterfaceId = u16;

/// The VLAN tags that select a logical interface on its port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Vlan {
    /// Untagged frames.
    #[default]
    Untagged,
    /// One 802.1Q tag (TPID 0x8100) with this VLAN id.
    Single(u16),
    /// Two tags (QinQ, 802.1ad): outer TPID 0x88a8, inner 0x8100.
    Double {
        /// Service VLAN id (outer tag).
        outer: u16,
        /// Customer VLAN id (inner tag).
        inner: u16,
    },
}

impl Vlan {
    /// Number of tags.
    pub const fn tags(self) -> usize {
        match self {
            Vlan::Untagged => 0,
            Vlan::Single(_) => 1,
            Vlan::Double { .. } => 2,
        }
    }
}

/// An IPv4 address of an interface with its subnet prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4IfAddr {
    /// The interface's own address.
    pub addr: Ipv4Addr,
    /// Length of the connected subnet's prefix.
    pub prefix_len: u8,
}

/// An IPv6 address of an interface with its subnet prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6IfAddr {
    /// The interface's own address.
    pub addr: Ipv6Addr,
    /// Length of the connected subnet's prefix.
    pub prefix_len: u8,
}

/// A logical interface: a port plus VLAN tags, with its own MAC, addresses
/// and MTU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Name for people (`eth0`, `eth0.100`).
    pub name: String,
    /// The physical port it lives on.
    pub port: PortId,
    /// Which tagged (or untagged) frames of the port belong to it.
    pub vlan: Vlan,
    /// Source MAC of frames it sends; unicast frames to it must carry it.
    pub mac: MacAddr,
    /// IPv4 addresses (the first is the source of ICMP errors it sends).
    pub ipv4: Vec<Ipv4IfAddr>,
    /// IPv6 addresses (the first global one is the source of ICMPv6 errors).
    pub ipv6: Vec<Ipv6IfAddr>,
    /// IP MTU: the largest IP packet (header included) it sends.
    pub mtu: u16,
}

/// One way to reach a route's destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NextHop {
    /// The egress interface.
    pub interface: InterfaceId,
    /// The neighbour to send to; `None` when the destination is directly
    /// connected (the packet's own destination is then the neighbour).
    pub gateway: Option<IpAddr>,
}

/// A route that discards what it matches instead of forwarding it, as the
/// kernel's `blackhole`, `unreachable`, `prohibit` and `throw` routes do.
///
/// Decided at the next-hop choice, before the ACL (a discarded packet never
/// reaches the forward chain, as in the kernel).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Discard {
    /// Drop silently, counted as `route_blackhole`.
    Blackhole,
    /// Drop, counted as `route_unreachable`, answer ICMP host unreachable
    /// (type 3 code 1) / ICMPv6 no route to destination (type 1 code 0)
    /// (RFC 1812 §5.2.7.1, RFC 4443 §3.1).
    Unreachable,
    /// Drop, counted as `route_prohibited`, answer ICMP communication
    /// administratively prohibited (type 3 code 13, RFC 1812 §5.2.7.1) /
    /// ICMPv6 administratively prohibited (type 1 code 1, RFC 4443 §3.1).
    Prohibit,
    /// The lookup ends here with no route (with a single table, `throw`
    /// means "not in this table"): exactly the `no_route` case.
    Throw,
}

impl Discard {
    /// Code stored in the adjacency (never 0, which marks no discard).
    pub(crate) fn code(self) -> u32 {
        match self {
            Discard::Blackhole => 1,
            Discard::Unreachable => 2,
            Discard::Prohibit => 3,
            Discard::Throw => 4,
        }
    }

    pub(crate) fn from_code(c: u32) -> Option<Discard> {
        Some(match c {
            1 => Discard::Blackhole,
            2 => Discard::Unreachable,
            3 => Discard::Prohibit,
            4 => Discard::Throw,
            _ => return None,
        })
    }

    /// The word `ip route` uses for it.
    pub fn name(self) -> &'static str {
        match self {
            Discard::Blackhole => "blackhole",
            Discard::Unreachable => "unreachable",
            Discard::Prohibit => "prohibit",
            Discard::Throw => "throw",
        }
    }
}

/// What a FIB entry's next-hop id stands for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RouteTarget {
    /// Forward through one of these equal-cost next hops.
    Forward(Vec<NextHop>),
    /// Discard (see [`Discard`]).
    Discard(Discard),
}

/// Errors found while building tables.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// Two interfaces claim the same port and VLAN tags.
    #[error("interface {name}: port {port} with {vlan:?} already belongs to {other}")]
    DuplicateInterface {
        /// The interface being added.
        name: String,
        /// Its port.
        port: PortId,
        /// Its tags.
        vlan: Vlan,
        /// The interface that has them already.
        other: String,
    },
    /// Two interfaces with the same name.
    #[error("interface name {0} used twice")]
    DuplicateName(String),
    /// MTU below the minimum of the families it carries (68 for IPv4, 1280
    /// for IPv6) or above the 65535 an IP length field allows.
    #[error("interface {name}: MTU {mtu} below the minimum {min}")]
    MtuTooSmall {
        /// The interface.
        name: String,
        /// Its MTU.
        mtu: u16,
        /// The minimum for its address families.
        min: u16,
    },
    /// A VLAN id outside 1..=4094.
    #[error("interface {name}: VLAN id {id} outside 1..=4094")]
    BadVlanId {
        /// The interface.
        name: String,
        /// The id.
        id: u16,
    },
    /// A prefix length longer than the address.
    #[error("interface {name}: prefix length {len} too long")]
    BadPrefixLen {
        /// The interface.
        name: String,
        /// The length.
        len: u8,
    },
    /// A next hop or neighbour names an interface that does not exist.
    #[error("unknown interface id {0}")]
    UnknownInterface(InterfaceId),
    /// A next-hop set with no next hop.
    #[error("empty next-hop set")]
    EmptyNextHopSet,
    /// More interfaces than an [`InterfaceId`] can number.
    #[error("too many interfaces")]
    TooManyInterfaces,
    /// More next hops in one set than the pipeline's ECMP width.
    #[error("next-hop set of {0} exceeds the ECMP width {MAX_ECMP}")]
    TooManyNextHops(usize),
    /// More distinct route targets (next-hop sets and discards) than the
    /// FIB's next-hop ids can name.
    #[error("more than {MAX_TARGETS} distinct next-hop sets")]
    TooManyTargets,
    /// A policy rule names a next-hop id that was not added.
    #[error("unknown next-hop id {0}")]
    UnknownNextHop(NextHopId),
}

/// The most route targets one set of tables holds: the FIB stores next-hop
/// ids `0..=fib::poptrie::MAX_NEXT_HOP`.
pub const MAX_TARGETS: usize = fib::poptrie::MAX_NEXT_HOP as usize + 1;

/// The widest ECMP set (next hops per route).
pub const MAX_ECMP: usize = 64;

/// What a local address is, which decides the punt reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LocalKind {
    /// A unicast address of the router (or IPv6 subnet-router anycast).
    Unicast,
    /// A connected subnet's broadcast address.
    Broadcast,
}

/// A next hop with everything the rewrite needs precomputed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ResolvedHop {
    pub(crate) interface: InterfaceId,
    pub(crate) gateway: Option<IpAddr>,
    /// The gateway's MAC, when known at build time.
    pub(crate) mac: Option<MacAddr>,
    /// The egress L2 header, when the gateway's MAC is known: the forward
    /// stage's common case, one read of the hop.
    pub(crate) rewrite: Option<Rewrite>,
}

/// A MAC as the low 48 bits of a little-endian word.
pub(crate) fn mac_bits(mac: &[u8; 6]) -> u64 {
    let mut w = [0u8; 8];
    w[..6].copy_from_slice(mac);
    u64::from_le_bytes(w)
}

/// A gateway's egress L2 header built once (destination and source MAC,
/// the egress interface's VLAN tags; the EtherType follows the family),
/// with the egress port and MTU beside it, so forwarding to a resolved
/// gateway reads one record rather than the hop, its interface and its
/// neighbour.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rewrite {
    pub(crate) macs: [u8; 12],
    /// The tags (`tags_len` bytes: 0, 4 or 8).
    pub(crate) tags: [u8; 8],
    pub(crate) tags_len: u8,
    pub(crate) port: PortId,
    pub(crate) mtu: u16,
}

impl Rewrite {
    fn new(ifr: &IfRuntime, dst: MacAddr) -> Self {
        let mut macs = [0u8; 12];
        macs[..6].copy_from_slice(&dst.0);
        macs[6..].copy_from_slice(&ifr.l2_src_and_tags[..6]);
        let n = usize::from(ifr.l2_src_and_tags_len).clamp(6, 14) - 6;
        let mut tags = [0u8; 8];
        tags[..n].copy_from_slice(&ifr.l2_src_and_tags[6..6 + n]);
        Self {
            macs,
            tags,
            tags_len: n as u8,
            port: ifr.port,
            mtu: ifr.mtu,
        }
    }

    /// The header's length, EtherType included.
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        14 + usize::from(self.tags_len)
    }
}

/// Per-interface data the per-packet path reads, kept compact.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IfRuntime {
    pub(crate) port: PortId,
    pub(crate) mtu: u16,
    pub(crate) mac: MacAddr,
    /// `mac` as the low 48 bits of a little-endian word, for the input
    /// stage's one comparison per frame ([`mac_bits`]).
    pub(crate) mac_bits: u64,
    /// `src MAC (6) | tags (0, 4 or 8)`; the destination MAC and EtherType
    /// are written per packet.
    pub(crate) l2_src_and_tags: [u8; 14],
    /// Bytes of `l2_src_and_tags` in use.
    pub(crate) l2_src_and_tags_len: u8,
    pub(crate) ipv4_source: Option<u32>,
    pub(crate) ipv6_source: Option<u128>,
}

impl IfRuntime {
    /// Full L2 header length on egress: dst + src + tags + EtherType.
    #[inline(always)]
    pub(crate) fn l2_len(&self) -> usize {
        6 + self.l2_src_and_tags_len as usize + 2
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct PortEntry {
    pub(crate) untagged: Option<InterfaceId>,
    pub(crate) tagged: Vec<(Vlan, InterfaceId)>,
}

/// Key of a neighbour entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct NeighbourKey {
    pub(crate) interface: InterfaceId,
    /// IPv4 addresses as IPv4-mapped IPv6 (`::ffff:a.b.c.d`).
    pub(crate) addr: u128,
}

impl NeighbourKey {
    pub(crate) fn new(interface: InterfaceId, ip: IpAddr) -> Self {
        let addr = match ip {
            IpAddr::V4(a) => v4_key(u32::from(a)),
            IpAddr::V6(a) => u128::from(a),
        };
        Self { interface, addr }
    }
}

#[inline(always)]
pub(crate) fn v4_key(a: u32) -> u128 {
    0xffff_0000_0000u128 | u128::from(a)
}

/// A multiply-xorshift hasher: the neighbour key is two integers, and
/// SipHash's DoS resistance buys nothing for a table the control side fills.
#[derive(Default, Clone, Copy)]
pub(crate) struct MixHasher(u64);

impl Hasher for MixHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    #[inline]
    fn write_u16(&mut self, v: u16) {
        self.write_u64(u64::from(v));
    }
    #[inline]
    fn write_u128(&mut self, v: u128) {
        self.write_u64(v as u64);
        self.write_u64((v >> 64) as u64);
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

pub(crate) type NeighbourMap = HashMap<NeighbourKey, MacAddr, BuildHasherDefault<MixHasher>>;

/// Connected subnets with their next-hop ids: (IPv4, IPv6).
pub type ConnectedRoutes = (Vec<(Ipv4Cidr, NextHopId)>, Vec<(Ipv6Cidr, NextHopId)>);

/// Describes a router; [`TablesBuilder::build`] turns it into [`Tables`].
///
/// ```
/// use pipeline::{TablesBuilder, Interface, Ipv4IfAddr, NextHop, Vlan, MacAddr};
/// use fib::{reference::ReferenceFib4, reference::ReferenceFib6, RouteTable};
///
/// let mut b = TablesBuilder::new();
/// let eth0 = b.add_interface(Interface {
///     name: "eth0".into(), port: 0, vlan: Vlan::Untagged,
///     mac: MacAddr([2, 0, 0, 0, 0, 1]),
///     ipv4: vec![Ipv4IfAddr { addr: "192.0.2.1".parse().unwrap(), prefix_len: 24 }],
///     ipv6: vec![], mtu: 1500,
/// }).unwrap();
/// let mut fib4 = ReferenceFib4::new();
/// let mut fib6 = ReferenceFib6::new();
/// b.install_connected_routes(&mut fib4, &mut fib6);
/// let gw = b.add_next_hops(&[NextHop { interface: eth0, gateway: Some("192.0.2.254".parse().unwrap()) }]).unwrap();
/// fib4.insert("0.0.0.0/0".parse().unwrap(), gw);
/// b.add_neighbour(eth0, "192.0.2.254".parse().unwrap(), MacAddr([2, 0, 0, 0, 0, 0xfe])).unwrap();
/// let tables = b.build(fib4, fib6);
/// assert_eq!(tables.interfaces().len(), 1);
/// ```
#[derive(Debug, Clone, Default)]
pub struct TablesBuilder {
    interfaces: Vec<Interface>,
    targets: Vec<RouteTarget>,
    neighbours: NeighbourMap,
    policy: Arc<Policy>,
}

impl TablesBuilder {
    /// An empty router.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a logical interface; its id is its position (0, 1, ...).
    pub fn add_interface(&mut self, iface: Interface) -> Result<InterfaceId, TableError> {
        let id = InterfaceId::try_from(self.interfaces.len())
            .map_err(|_| TableError::TooManyInterfaces)?;
        if let Some(o) = self.interfaces.iter().find(|o| o.name == iface.name) {
            return Err(TableError::DuplicateName(o.name.clone()));
        }
        if let Some(o) = self
            .interfaces
            .iter()
            .find(|o| o.port == iface.port && o.vlan == iface.vlan)
        {
            return Err(TableError::DuplicateInterface {
                name: iface.name,
                port: o.port,
                vlan: o.vlan,
                other: o.name.clone(),
            });
        }
        let ids: &[u16] = match &iface.vlan {
            Vlan::Untagged => &[],
            Vlan::Single(v) => core::slice::from_ref(v),
            Vlan::Double { outer, inner } => &[*outer, *inner],
        };
        if let Some(&id) = ids.iter().find(|&&v| v == 0 || v > 4094) {
            return Err(TableError::BadVlanId {
                name: iface.name,
                id,
            });
        }
        let min = if iface.ipv6.is_empty() { 68 } else { 1280 };
        if iface.mtu < min {
            return Err(TableError::MtuTooSmall {
                name: iface.name,
                mtu: iface.mtu,
                min,
            });
        }
        if let Some(a) = iface.ipv4.iter().find(|a| a.prefix_len > 32) {
            return Err(TableError::BadPrefixLen {
                name: iface.name,
                len: a.prefix_len,
            });
        }
        if let Some(a) = iface.ipv6.iter().find(|a| a.prefix_len > 128) {
            return Err(TableError::BadPrefixLen {
                name: iface.name,
                len: a.prefix_len,
            });
        }
        self.interfaces.push(iface);
        Ok(id)
    }

    /// The interfaces added so far.
    pub fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    /// Adds a set of equal-cost next hops and returns the id a FIB route
    /// stores to use it.
    pub fn add_next_hops(&mut self, hops: &[NextHop]) -> Result<NextHopId, TableError> {
        if hops.is_empty() {
            return Err(TableError::EmptyNextHopSet);
        }
        if hops.len() > MAX_ECMP {
            return Err(TableError::TooManyNextHops(hops.len()));
        }
        if let Some(h) = hops
            .iter()
            .find(|h| usize::from(h.interface) >= self.interfaces.len())
        {
            return Err(TableError::UnknownInterface(h.interface));
        }
        self.push_target(RouteTarget::Forward(hops.to_vec()))
    }

    /// Appends a target; its id is its index.
    fn push_target(&mut self, t: RouteTarget) -> Result<NextHopId, TableError> {
        if self.targets.len() >= MAX_TARGETS {
            return Err(TableError::TooManyTargets);
        }
        let id = self.targets.len() as NextHopId;
        self.targets.push(t);
        Ok(id)
    }

    /// Adds a discarding route target and returns the id a FIB route
    /// stores to use it.
    pub fn add_discard(&mut self, d: Discard) -> Result<NextHopId, TableError> {
        self.push_target(RouteTarget::Discard(d))
    }

    /// Adds either kind of target ([`Self::add_next_hops`] or
    /// [`Self::add_discard`]).
    pub fn add_target(&mut self, t: &RouteTarget) -> Result<NextHopId, TableError> {
        match t {
            RouteTarget::Forward(hops) => self.add_next_hops(hops),
            RouteTarget::Discard(d) => self.add_discard(*d),
        }
    }

    /// Routes by these policy rules (else by the main FIBs alone). Call it
    /// after adding the interfaces and targets its rules name; a rule
    /// naming an unknown one is refused.
    pub fn set_policy(&mut self, policy: Arc<Policy>) -> Result<(), TableError> {
        let v4 = policy.v4.rules().iter().map(|r| (r.iif, r.action));
        let v6 = policy.v6.rules().iter().map(|r| (r.iif, r.action));
        for (iif, action) in v4.chain(v6) {
            if let InputSelector::Interface(i) = iif
                && usize::from(i) >= self.interfaces.len()
            {
                return Err(TableError::UnknownInterface(i));
            }
            if let RuleAction::End(Some(id)) = action
                && id as usize >= self.targets.len()
            {
                return Err(TableError::UnknownNextHop(id));
            }
        }
        self.policy = policy;
        Ok(())
    }

    /// Adds or replaces a neighbour: `ip` on `interface` has MAC `mac`.
    pub fn add_neighbour(
        &mut self,
        interface: InterfaceId,
        ip: IpAddr,
        mac: MacAddr,
    ) -> Result<(), TableError> {
        if usize::from(interface) >= self.interfaces.len() {
            return Err(TableError::UnknownInterface(interface));
        }
        self.neighbours
            .insert(NeighbourKey::new(interface, ip), mac);
        Ok(())
    }

    /// For every interface address, adds a directly connected next-hop set
    /// and returns `(subnet, next-hop id)` pairs for the caller's FIBs.
    pub fn connected_routes(&mut self) -> ConnectedRoutes {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for id in 0..self.interfaces.len() {
            let hop = [NextHop {
                interface: id as InterfaceId,
                gateway: None,
            }];
            let (a4, a6) = (
                self.interfaces[id].ipv4.clone(),
                self.interfaces[id].ipv6.clone(),
            );
            for a in a4 {
                if let (Some(p), Ok(nh)) = (
                    Ipv4Cidr::new(u32::from(a.addr), a.prefix_len),
                    self.add_next_hops(&hop),
                ) {
                    v4.push((p, nh));
                }
            }
            for a in a6 {
                if let (Some(p), Ok(nh)) = (
                    Ipv6Cidr::new(u128::from(a.addr), a.prefix_len),
                    self.add_next_hops(&hop),
                ) {
                    v6.push((p, nh));
                }
            }
        }
        (v4, v6)
    }

    /// [`Self::connected_routes`] inserted straight into two route tables.
    pub fn install_connected_routes<F4, F6>(&mut self, fib4: &mut F4, fib6: &mut F6)
    where
        F4: fib::RouteTable<u32>,
        F6: fib::RouteTable<u128>,
    {
        let (v4, v6) = self.connected_routes();
        for (p, nh) in v4 {
            fib4.insert(p, nh);
        }
        for (p, nh) in v6 {
            fib6.insert(p, nh);
        }
    }

    /// Builds the tables with an accept-all ACL.
    pub fn build<F4, F6>(self, fib4: F4, fib6: F6) -> Tables<F4, F6, AcceptAll> {
        self.build_with_acl(fib4, fib6, AcceptAll)
    }

    /// Builds the tables with an ACL stage.
    pub fn build_with_acl<F4, F6, A: Acl>(self, fib4: F4, fib6: F6, acl: A) -> Tables<F4, F6, A> {
        let mut ports: Vec<PortEntry> = Vec::new();
        let mut if_rt = Vec::with_capacity(self.interfaces.len());
        let mut local4: Vec<(u32, LocalKind)> = Vec::new();
        let mut local6: Vec<(u128, LocalKind)> = Vec::new();
        for (id, i) in self.interfaces.iter().enumerate() {
            let id = id as InterfaceId;
            let p = usize::from(i.port);
            if ports.len() <= p {
                ports.resize(p + 1, PortEntry::default());
            }
            match i.vlan {
                Vlan::Untagged => ports[p].untagged = Some(id),
                v => ports[p].tagged.push((v, id)),
            }
            let mut tmpl = [0u8; 14];
            tmpl[..6].copy_from_slice(&i.mac.0);
            let tag_len = match i.vlan {
                Vlan::Untagged => 0,
                Vlan::Single(v) => {
                    tmpl[6..8].copy_from_slice(&wire::ethertype::VLAN.to_be_bytes());
                    tmpl[8..10].copy_from_slice(&(v & 0x0fff).to_be_bytes());
                    4
                }
                Vlan::Double { outer, inner } => {
                    tmpl[6..8].copy_from_slice(&wire::ethertype::QINQ.to_be_bytes());
                    tmpl[8..10].copy_from_slice(&(outer & 0x0fff).to_be_bytes());
                    tmpl[10..12].copy_from_slice(&wire::ethertype::VLAN.to_be_bytes());
                    tmpl[12..14].copy_from_slice(&(inner & 0x0fff).to_be_bytes());
                    8
                }
            };
            let ipv6_source = i
                .ipv6
                .iter()
                .find(|a| !is_v6_link_local(u128::from(a.addr)))
                .or_else(|| i.ipv6.first())
                .map(|a| u128::from(a.addr));
            if_rt.push(IfRuntime {
                port: i.port,
                mtu: i.mtu,
                mac: i.mac,
                mac_bits: mac_bits(&i.mac.0),
                l2_src_and_tags: tmpl,
                l2_src_and_tags_len: 6 + tag_len,
                ipv4_source: i.ipv4.first().map(|a| u32::from(a.addr)),
                ipv6_source,
            });
            for a in &i.ipv4 {
                let addr = u32::from(a.addr);
                local4.push((addr, LocalKind::Unicast));
                if a.prefix_len <= 30 {
                    local4.push((addr | !Ipv4Cidr::mask(a.prefix_len), LocalKind::Broadcast));
                }
            }
            for a in &i.ipv6 {
                let addr = u128::from(a.addr);
                local6.push((addr, LocalKind::Unicast));
                if a.prefix_len < 127 {
                    // Subnet-router anycast (RFC 4291 2.6.1).
                    local6.push((addr & Ipv6Cidr::mask(a.prefix_len), LocalKind::Unicast));
                }
            }
        }
        local4.sort();
        local4.dedup_by_key(|e| e.0);
        local6.sort();
        local6.dedup_by_key(|e| e.0);

        let mut hops = Vec::new();
        let mut adjacencies = Vec::with_capacity(self.targets.len());
        for t in &self.targets {
            let set = match t {
                RouteTarget::Forward(set) => set,
                RouteTarget::Discard(d) => {
                    // No hops: the first field carries the discard's code.
                    adjacencies.push((d.code(), 0));
                    continue;
                }
            };
            let start = hops.len() as u32;
            for h in set {
                let mac = h.gateway.and_then(|g| {
                    self.neighbours
                        .get(&NeighbourKey::new(h.interface, g))
                        .copied()
                });
                let rewrite = mac.and_then(|m| {
                    if_rt
                        .get(usize::from(h.interface))
                        .map(|ifr| Rewrite::new(ifr, m))
                });
                hops.push(ResolvedHop {
                    interface: h.interface,
                    gateway: h.gateway,
                    mac,
                    rewrite,
                });
            }
            adjacencies.push((start, set.len() as u32));
        }
        let mut local4_filter = [0u64; 4];
        for &(a, _) in &local4 {
            let b = fold4(a);
            local4_filter[usize::from(b >> 6)] |= 1 << (b & 63);
        }
        let mut local6_filter = [0u64; 4];
        for &(a, _) in &local6 {
            let b = fold6(a);
            local6_filter[usize::from(b >> 6)] |= 1 << (b & 63);
        }
        Tables {
            interfaces: self.interfaces,
            if_rt,
            ports,
            local4,
            local6,
            local4_filter,
            local6_filter,
            hops,
            adjacencies,
            targets: self.targets,
            neighbours: self.neighbours,
            fib4,
            fib6,
            acl,
            policy: self.policy,
        }
    }
}

/// An IPv4 address to the bit index of the local filter: the top byte
/// of a multiplicative hash (every address bit reaches it; a multiply and
/// a shift).
#[inline(always)]
fn fold4(a: u32) -> u8 {
    (a.wrapping_mul(0x9e37_79b1) >> 24) as u8
}

/// [`fold4`] for IPv6: the halves XORed, then the top byte of a
/// multiplicative hash.
#[inline(always)]
fn fold6(a: u128) -> u8 {
    let x = (a as u64) ^ ((a >> 64) as u64);
    (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8
}

pub(crate) fn is_v6_link_local(a: u128) -> bool {
    a >> 118 == 0x3fa
}

/// The per-packet tables in plain form ([`Tables::datapath`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datapath {
    /// By [`InterfaceId`].
    pub interfaces: Vec<DatapathInterface>,
    /// By [`PortId`]: which logical interface a frame belongs to.
    pub ports: Vec<DatapathPort>,
    /// The router's IPv4 addresses (true: a connected subnet's broadcast).
    pub local4: Vec<(u32, bool)>,
    /// The router's IPv6 addresses and subnet-router anycast addresses.
    pub local6: Vec<u128>,
    /// By next-hop id: (first index in `hops`, count); count 0 is a
    /// discard whose code (1 blackhole, 2 unreachable, 3 prohibit,
    /// 4 throw) is the first field.
    pub adjacencies: Vec<(u32, u32)>,
    /// Next hops of all sets.
    pub hops: Vec<DatapathHop>,
    /// Neighbours of on-link destinations: (interface, address as u128 with
    /// IPv4 as `::ffff:a.b.c.d`, MAC).
    pub neighbours: Vec<(InterfaceId, u128, MacAddr)>,
    /// Which IPv4 packets the main table alone decides under the policy
    /// rules.
    pub fast_path4: crate::FastPath<u32>,
    /// The same for IPv6.
    pub fast_path6: crate::FastPath<u128>,
}

/// One logical interface as the per-packet path sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatapathInterface {
    /// Its port.
    pub port: PortId,
    /// Its tags on that port.
    pub vlan: Vlan,
    /// Its MAC.
    pub mac: MacAddr,
    /// IP MTU.
    pub mtu: u16,
    /// Egress L2 header after the destination MAC: source MAC and tags.
    pub l2_template: [u8; 14],
    /// Bytes of `l2_template` in use (6, 10 or 14).
    pub l2_template_len: u8,
}

/// Logical interfaces of one port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatapathPort {
    /// Untagged frames' interface.
    pub untagged: Option<InterfaceId>,
    /// Tagged interfaces.
    pub tagged: Vec<(Vlan, InterfaceId)>,
}

/// One next hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatapathHop {
    /// Egress interface.
    pub interface: InterfaceId,
    /// Via a gateway (else the destination is on-link: its neighbour).
    pub gateway: bool,
    /// The gateway's MAC, when known.
    pub mac: Option<MacAddr>,
}

/// The immutable tables one forwarding snapshot reads. Generic over the
/// FIBs (any [`fib::Lookup`]) and the ACL stage ([`Acl`]).
#[derive(Debug)]
pub struct Tables<F4, F6, A = AcceptAll> {
    interfaces: Vec<Interface>,
    pub(crate) if_rt: Vec<IfRuntime>,
    pub(crate) ports: Vec<PortEntry>,
    pub(crate) local4: Vec<(u32, LocalKind)>,
    pub(crate) local6: Vec<(u128, LocalKind)>,
    /// 256-bit filters over the local addresses: a clear bit proves an
    /// address is not local without searching (the common, transit case).
    local4_filter: [u64; 4],
    local6_filter: [u64; 4],
    pub(crate) hops: Vec<ResolvedHop>,
    /// Next-hop id -> (first index in `hops`, count); a count of 0 marks a
    /// [`Discard`], whose code is then the first field.
    pub(crate) adjacencies: Vec<(u32, u32)>,
    targets: Vec<RouteTarget>,
    pub(crate) neighbours: NeighbourMap,
    /// IPv4 FIB: destination -> next-hop id.
    pub fib4: F4,
    /// IPv6 FIB: destination -> next-hop id.
    pub fib6: F6,
    /// The ACL stage.
    pub acl: A,
    /// Policy rules and the tables they look up besides the FIBs.
    pub(crate) policy: Arc<Policy>,
}

impl<F4, F6, A> Tables<F4, F6, A> {
    /// The interfaces, indexed by [`InterfaceId`].
    pub fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    /// An interface by name.
    pub fn interface_by_name(&self, name: &str) -> Option<(InterfaceId, &Interface)> {
        self.interfaces
            .iter()
            .enumerate()
            .find(|(_, i)| i.name == name)
            .map(|(id, i)| (id as InterfaceId, i))
    }

    /// Number of ports (highest port id in use + 1).
    pub fn port_count(&self) -> usize {
        self.ports.len()
    }

    /// The next-hop set behind a FIB next-hop id (empty for a discard).
    pub fn next_hops(&self, id: NextHopId) -> Option<&[NextHop]> {
        match self.targets.get(id as usize)? {
            RouteTarget::Forward(h) => Some(h),
            RouteTarget::Discard(_) => Some(&[]),
        }
    }

    /// What a FIB next-hop id stands for.
    pub fn target(&self, id: NextHopId) -> Option<&RouteTarget> {
        self.targets.get(id as usize)
    }

    /// The policy rules.
    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// The IPv4 route of a packet from `src` (`None`: the host's own)
    /// received on `iif` (`None`: the host's own) to `dst`, as the rules
    /// decide it: its next-hop id, `None` for no route. A packet received
    /// is in the VRF of its input interface; the router's own answer to
    /// one (`iif` `None`) in that of the interface `vrf` names.
    #[inline]
    pub fn route4(
        &self,
        src: Option<u32>,
        dst: u32,
        iif: Option<InterfaceId>,
        vrf: Option<InterfaceId>,
    ) -> Option<NextHopId>
    where
        F4: fib::Lookup<u32>,
    {
        if self.policy.v4.main_only() {
            return self.fib4.lookup(dst);
        }
        let key = RuleKey {
            src,
            dst,
            iif,
            vrf: iif.or(vrf),
        };
        self.policy.v4.route(&self.fib4, &self.adjacencies, &key)
    }

    /// [`route4`](Self::route4) for IPv6.
    #[inline]
    pub fn route6(
        &self,
        src: Option<u128>,
        dst: u128,
        iif: Option<InterfaceId>,
        vrf: Option<InterfaceId>,
    ) -> Option<NextHopId>
    where
        F6: fib::Lookup<u128>,
    {
        if self.policy.v6.main_only() {
            return self.fib6.lookup(dst);
        }
        let key = RuleKey {
            src,
            dst,
            iif,
            vrf: iif.or(vrf),
        };
        self.policy.v6.route(&self.fib6, &self.adjacencies, &key)
    }

    /// The MAC of a neighbour, if known.
    pub fn neighbour(&self, interface: InterfaceId, ip: IpAddr) -> Option<MacAddr> {
        self.neighbours
            .get(&NeighbourKey::new(interface, ip))
            .copied()
    }

    /// A builder holding the same interfaces, next-hop sets (same ids) and
    /// neighbours, to derive the next snapshot (e.g. after a neighbour
    /// change) without touching the FIBs' next-hop ids.
    pub fn to_builder(&self) -> TablesBuilder {
        TablesBuilder {
            interfaces: self.interfaces.clone(),
            targets: self.targets.clone(),
            neighbours: self.neighbours.clone(),
            policy: Arc::clone(&self.policy),
        }
    }

    /// Everything the per-packet path reads besides the FIBs and the ACL,
    /// in plain form: for engines that run the same stages elsewhere (the
    /// XDP engine compiles it into BPF maps).
    pub fn datapath(&self) -> Datapath {
        Datapath {
            interfaces: self
                .if_rt
                .iter()
                .zip(&self.interfaces)
                .map(|(r, i)| DatapathInterface {
                    port: r.port,
                    vlan: i.vlan,
                    mac: r.mac,
                    mtu: r.mtu,
                    l2_template: r.l2_src_and_tags,
                    l2_template_len: r.l2_src_and_tags_len,
                })
                .collect(),
            ports: self
                .ports
                .iter()
                .map(|p| DatapathPort {
                    untagged: p.untagged,
                    tagged: p.tagged.clone(),
                })
                .collect(),
            local4: self
                .local4
                .iter()
                .map(|&(a, k)| (a, k == LocalKind::Broadcast))
                .collect(),
            local6: self.local6.iter().map(|&(a, _)| a).collect(),
            adjacencies: self.adjacencies.clone(),
            hops: self
                .hops
                .iter()
                .map(|h| DatapathHop {
                    interface: h.interface,
                    gateway: h.gateway.is_some(),
                    mac: h.mac,
                })
                .collect(),
            neighbours: self
                .neighbours
                .iter()
                .map(|(k, &m)| (k.interface, k.addr, m))
                .collect(),
            fast_path4: self.policy.v4.fast_path(),
            fast_path6: self.policy.v6.fast_path(),
        }
    }

    #[inline(always)]
    pub(crate) fn local4(&self, a: u32) -> Option<LocalKind> {
        let b = fold4(a);
        if self.local4_filter[usize::from(b >> 6)] & (1 << (b & 63)) == 0 {
            return None;
        }
        self.local4
            .binary_search_by_key(&a, |e| e.0)
            .ok()
            .map(|i| self.local4[i].1)
    }

    #[inline(always)]
    pub(crate) fn local6(&self, a: u128) -> Option<LocalKind> {
        let b = fold6(a);
        if self.local6_filter[usize::from(b >> 6)] & (1 << (b & 63)) == 0 {
            return None;
        }
        self.local6
            .binary_search_by_key(&a, |e| e.0)
            .ok()
            .map(|i| self.local6[i].1)
    }

    /// The untagged interface on `port` and its MAC (as
    /// `IfRuntime::mac_bits`), if it has one.
    #[inline(always)]
    pub(crate) fn untagged_interface(&self, port: PortId) -> Option<(InterfaceId, u64)> {
        let i = self.interface_for(port, Vlan::Untagged)?;
        Some((i, self.if_rt.get(usize::from(i))?.mac_bits))
    }

    /// The logical interface a frame on `port` with these tags belongs to.
    #[inline]
    pub(crate) fn interface_for(&self, port: PortId, vlan: Vlan) -> Option<InterfaceId> {
        let p = self.ports.get(usize::from(port))?;
        match vlan {
            Vlan::Untagged => p.untagged,
            v => p.tagged.iter().find(|e| e.0 == v).map(|e| e.1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fib::reference::{ReferenceFib4, ReferenceFib6};

    fn iface(name: &str, port: PortId, vlan: Vlan) -> Interface {
        Interface {
            name: name.into(),
            port,
            vlan,
            mac: MacAddr([2, 0, 0, 0, 0, port as u8]),
            ipv4: vec![Ipv4IfAddr {
                addr: Ipv4Addr::new(192, 0, 2, 1 + port as u8),
                prefix_len: 24,
            }],
            ipv6: vec![],
            mtu: 1500,
        }
    }

    #[test]
    fn builder_refuses_bad_interfaces_and_next_hops() {
        let mut b = TablesBuilder::new();
        assert_eq!(b.add_interface(iface("a", 0, Vlan::Untagged)), Ok(0));
        assert!(matches!(
            b.add_interface(iface("b", 0, Vlan::Untagged)),
            Err(TableError::DuplicateInterface { .. })
        ));
        assert_eq!(
            b.add_interface(iface("a", 1, Vlan::Untagged)),
            Err(TableError::DuplicateName("a".into()))
        );
        assert!(matches!(
            b.add_interface(iface("v", 0, Vlan::Single(4095))),
            Err(TableError::BadVlanId { id: 4095, .. })
        ));
        let mut small = iface("s", 2, Vlan::Untagged);
        small.mtu = 67;
        assert!(matches!(
            b.add_interface(small),
            Err(TableError::MtuTooSmall { min: 68, .. })
        ));
        let mut v6 = iface("six", 3, Vlan::Untagged);
        v6.ipv6 = vec![Ipv6IfAddr {
            addr: "2001:db8::1".parse().unwrap(),
            prefix_len: 64,
        }];
        v6.mtu = 1279;
        assert!(matches!(
            b.add_interface(v6),
            Err(TableError::MtuTooSmall { min: 1280, .. })
        ));
        assert_eq!(b.add_next_hops(&[]), Err(TableError::EmptyNextHopSet));
        let hop = NextHop {
            interface: 7,
            gateway: None,
        };
        assert_eq!(
            b.add_next_hops(&[hop]),
            Err(TableError::UnknownInterface(7))
        );
        assert_eq!(
            b.add_neighbour(7, "192.0.2.9".parse().unwrap(), MacAddr::ZERO),
            Err(TableError::UnknownInterface(7))
        );
        let many = vec![
            NextHop {
                interface: 0,
                gateway: None
            };
            MAX_ECMP + 1
        ];
        assert_eq!(
            b.add_next_hops(&many),
            Err(TableError::TooManyNextHops(MAX_ECMP + 1))
        );
    }

    #[test]
    fn targets_stop_at_the_fib_next_hop_ids() {
        let mut b = TablesBuilder::new();
        b.add_interface(iface("a", 0, Vlan::Untagged)).unwrap();
        let hop = |g: u32| NextHop {
            interface: 0,
            gateway: Some(IpAddr::V4(g.into())),
        };
        for i in 0..MAX_TARGETS - 1 {
            assert_eq!(b.add_next_hops(&[hop(i as u32)]), Ok(i as NextHopId));
        }
        assert_eq!(
            b.add_discard(Discard::Blackhole),
            Ok(fib::poptrie::MAX_NEXT_HOP)
        );
        assert_eq!(
            b.add_discard(Discard::Prohibit),
            Err(TableError::TooManyTargets)
        );
        assert_eq!(b.add_next_hops(&[hop(0)]), Err(TableError::TooManyTargets));
    }

    #[test]
    fn build_resolves_gateways_and_local_addresses() {
        let mut b = TablesBuilder::new();
        let a = b.add_interface(iface("a", 0, Vlan::Untagged)).unwrap();
        let v = b.add_interface(iface("a.5", 0, Vlan::Single(5))).unwrap();
        let gw: IpAddr = "192.0.2.254".parse().unwrap();
        let known = b
            .add_next_hops(&[NextHop {
                interface: a,
                gateway: Some(gw),
            }])
            .unwrap();
        let unknown = b
            .add_next_hops(&[NextHop {
                interface: v,
                gateway: Some("192.0.2.253".parse().unwrap()),
            }])
            .unwrap();
        b.add_neighbour(a, gw, MacAddr([0xa; 6])).unwrap();
        let t = b.build(ReferenceFib4::new(), ReferenceFib6::new());
        let (s, n) = t.adjacencies[known as usize];
        assert_eq!((n, t.hops[s as usize].mac), (1, Some(MacAddr([0xa; 6]))));
        let (s, _) = t.adjacencies[unknown as usize];
        assert_eq!(t.hops[s as usize].mac, None);
        assert_eq!(
            t.local4(u32::from(Ipv4Addr::new(192, 0, 2, 1))),
            Some(LocalKind::Unicast)
        );
        assert_eq!(
            t.local4(u32::from(Ipv4Addr::new(192, 0, 2, 255))),
            Some(LocalKind::Broadcast)
        );
        assert_eq!(t.local4(u32::from(Ipv4Addr::new(192, 0, 2, 77))), None);
        assert_eq!(t.interface_for(0, Vlan::Single(5)), Some(v));
        assert_eq!(t.interface_for(0, Vlan::Single(6)), None);
        assert_eq!(t.interface_for(1, Vlan::Untagged), None);
        assert_eq!(t.if_rt[usize::from(v)].l2_len(), 18);
        // The next snapshot keeps ids and neighbours.
        let t2 = t
            .to_builder()
            .build(ReferenceFib4::new(), ReferenceFib6::new());
        assert_eq!(t2.next_hops(known), t.next_hops(known));
        assert_eq!(t2.neighbour(a, gw), Some(MacAddr([0xa; 6])));
        assert_eq!(t2.interface_by_name("a.5").map(|x| x.0), Some(v));
    }
}
