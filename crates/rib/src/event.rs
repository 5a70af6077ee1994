//! What the kernel says about its routing state, as the RIB takes it:
//! links, addresses, routes, policy rules, nexthop objects and neighbours
//! (decoded from rtnetlink elsewhere; nothing here reads a socket).

use crate::rule::KernelRule;
use pipeline::Discard;
use std::net::IpAddr;
use wire::Cidr;

/// The main routing table.
pub const RT_TABLE_MAIN: u32 = libc::RT_TABLE_MAIN as u32;
/// The local table: the host's own and broadcast addresses.
pub const RT_TABLE_LOCAL: u32 = libc::RT_TABLE_LOCAL as u32;
/// The table the kernel's last default rule (IPv4) looks up.
pub const RT_TABLE_DEFAULT: u32 = libc::RT_TABLE_DEFAULT as u32;

/// Neighbour states (NUD_*).
pub mod nud {
    pub const INCOMPLETE: u16 = libc::NUD_INCOMPLETE;
    pub const REACHABLE: u16 = libc::NUD_REACHABLE;
    pub const STALE: u16 = libc::NUD_STALE;
    pub const DELAY: u16 = libc::NUD_DELAY;
    pub const PROBE: u16 = libc::NUD_PROBE;
    pub const FAILED: u16 = libc::NUD_FAILED;
    pub const NOARP: u16 = libc::NUD_NOARP;
    pub const PERMANENT: u16 = libc::NUD_PERMANENT;
    /// States in which the link-layer address is usable.
    pub const VALID: u16 = REACHABLE | STALE | DELAY | PROBE | PERMANENT | NOARP;
}

/// One way out for a kernel route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelHop {
    /// Output interface index.
    pub ifindex: u32,
    /// Gateway, if any.
    pub gateway: Option<IpAddr>,
}

/// A nexthop object's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelNexthop {
    /// One way out (NHA_OIF, NHA_GATEWAY).
    Via(KernelHop),
    /// NHA_BLACKHOLE: routes using it drop.
    Blackhole,
    /// NHA_GROUP: member ids with their weights (1-based, as `ip` prints).
    Group(Vec<(u32, u16)>),
}

/// Where a new IPv4 route goes among the routes of the same prefix and
/// metric (the kernel's aliases, tried in order): `ip route append` puts
/// it last, `ip route replace` in place of the first, `ip route add` and
/// `prepend` first. Dumps list them in order, so a dumped route is
/// appended. IPv6 sends the whole multipath route instead: it replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// After the others (NLM_F_APPEND, and every route of a dump).
    #[default]
    Append,
    /// In place of the first (NLM_F_REPLACE).
    Replace,
    /// Before the others.
    Prepend,
}

impl Placement {
    /// From a message's netlink flags (`NLM_F_MULTI`: part of a dump).
    pub fn of_flags(flags: u16) -> Placement {
        if flags & libc::NLM_F_REPLACE as u16 != 0 {
            Placement::Replace
        } else if flags & (libc::NLM_F_APPEND | libc::NLM_F_MULTI) as u16 != 0 {
            Placement::Append
        } else {
            Placement::Prepend
        }
    }
}

/// The parts of a kernel route that fastfwd's forwarding model has no
/// place for (a route with any of them set is named, not forwarded with),
/// and its placement among its prefix's routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RouteDetail {
    /// RTA_SRC: the route applies to these sources only (IPv6 subtrees).
    pub src: Option<Cidr>,
    /// rtm_tos: the route applies to this TOS only.
    pub tos: u8,
    /// RTA_ENCAP_TYPE: a lightweight-tunnel encapsulation (MPLS, seg6, ...).
    pub encap: Option<u16>,
    /// rtm_protocol: who made it (RTPROT_KERNEL: the kernel itself, for
    /// an interface address).
    pub protocol: u8,
    /// From the message's flags.
    pub placement: Placement,
}

/// A kernel VLAN device: the device it is on and its tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct KernelVlan {
    /// IFLA_LINK: the device the tag is pushed onto (a port, or the outer
    /// VLAN device of a QinQ pair).
    pub parent: u32,
    /// The VLAN id.
    pub id: u16,
    /// An 802.1ad (S-tag, 0x88a8) device rather than 802.1Q (0x8100).
    pub ad: bool,
}

/// What a parsed message says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A link appeared or changed (`add`) or went away.
    Link {
        /// true for RTM_NEWLINK.
        add: bool,
        /// Interface index.
        ifindex: u32,
        /// Name.
        name: String,
        /// Hardware address, when it has a 6-byte one.
        mac: Option<[u8; 6]>,
        /// MTU.
        mtu: Option<u32>,
        /// IFF_UP.
        up: bool,
        /// A VRF device (`ip link add ... type vrf table T`): the table T
        /// its members' packets are routed by.
        vrf: Option<u32>,
        /// IFLA_MASTER: the device this one is enslaved to (a VRF, a bond,
        /// a bridge).
        master: Option<u32>,
        /// IFLA_INFO_KIND: the device's type as the kernel names it
        /// ("veth", "bond", "team", "bridge", "vlan", "vrf"...); `None`
        /// for a device without one (a physical NIC, loopback).
        kind: Option<String>,
        /// A VLAN device (`ip link add link P name N type vlan id I`).
        vlan: Option<KernelVlan>,
    },
    /// An address appeared or went away.
    Addr {
        /// true for RTM_NEWADDR.
        add: bool,
        /// Interface index.
        ifindex: u32,
        /// The address.
        addr: IpAddr,
        /// Its subnet length.
        prefix_len: u8,
    },
    /// A route appeared or went away.
    Route {
        /// true for RTM_NEWROUTE.
        add: bool,
        /// Destination.
        prefix: Cidr,
        /// Routing table id.
        table: u32,
        /// RTN_* type: unicast routes forward; blackhole, unreachable,
        /// prohibit and throw routes discard (see [`Event::route_discard`]).
        kind: u8,
        /// Metric (RTA_PRIORITY).
        metric: u32,
        /// Next hops (several for a multipath route).
        hops: Vec<KernelHop>,
        /// RTA_NH_ID: the route uses this nexthop object instead of `hops`.
        nh_id: Option<u32>,
        /// What fastfwd's model of a route leaves out: a source prefix, a
        /// TOS, an encapsulation, and where the route goes among those of
        /// its prefix and metric.
        detail: RouteDetail,
    },
    /// A policy rule (`ip rule`) appeared or went away.
    Rule {
        /// true for RTM_NEWRULE.
        add: bool,
        /// The rule.
        rule: KernelRule,
    },
    /// A nexthop object (`ip nexthop`) appeared, changed or went away.
    Nexthop {
        /// true for RTM_NEWNEXTHOP.
        add: bool,
        /// NHA_ID.
        id: u32,
        /// What it is (meaningless for a delete).
        target: KernelNexthop,
    },
    /// A neighbour appeared, changed or went away.
    Neigh {
        /// true for RTM_NEWNEIGH.
        add: bool,
        /// Interface index.
        ifindex: u32,
        /// Its IP address.
        ip: IpAddr,
        /// Its MAC, when known.
        mac: Option<[u8; 6]>,
        /// NUD_* state.
        state: u16,
    },
    /// End of a dump.
    Done,
    /// An error (negative errno) or, when 0, an acknowledgement.
    Ack(i32),
}

impl Event {
    /// Whether this route event is one fastfwd forwards with: a route of
    /// any table but local that forwards (unicast) or discards (blackhole,
    /// unreachable, prohibit, throw). Local, broadcast, multicast and NAT
    /// routes are the host's business.
    pub fn is_forwarding_route(&self) -> bool {
        matches!(self, Event::Route { table, kind, .. } if *table != RT_TABLE_LOCAL
            && (*kind == libc::RTN_UNICAST || discard_of(*kind).is_some()))
    }

    /// For a discarding route, what it does.
    pub fn route_discard(&self) -> Option<Discard> {
        match self {
            Event::Route { kind, .. } => discard_of(*kind),
            _ => None,
        }
    }
}

fn discard_of(kind: u8) -> Option<Discard> {
    match kind {
        libc::RTN_BLACKHOLE => Some(Discard::Blackhole),
        libc::RTN_UNREACHABLE => Some(Discard::Unreachable),
        libc::RTN_PROHIBIT => Some(Discard::Prohibit),
        libc::RTN_THROW => Some(Discard::Throw),
        _ => None,
    }
}
