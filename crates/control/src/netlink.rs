//! rtnetlink messages: building the requests fastfwd sends (dumps, a
//! neighbour resolution, route changes) and turning what the kernel sends
//! back and broadcasts (links, addresses, routes, neighbours, nexthop
//! objects) into [`Event`]s.
//!
//! Links, addresses, routes (multipath and RTA_NH_ID included), policy
//! rules and neighbours are decoded and encoded with `netlink-packet-route`'s types,
//! the netlink framing and error messages with `netlink-packet-core`'s.
//! Nexthop objects (`RTM_*NEXTHOP`, `linux/nexthop.h`) have no type in that
//! crate; their few fields are read here through `netlink-packet-core`'s
//! attribute iterator (`NlasIterator`).
//! Pure byte handling: the socket is [`netio::NetlinkSocket`]. Malformed
//! input yields no event rather than a panic.

use netlink_packet_core::{
    Emitable, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_REPLACE, NLM_F_REQUEST, NetlinkBuffer,
    NetlinkDeserializable, NetlinkHeader, NetlinkMessage, NetlinkPayload, NlasIterator,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVlan, InfoVrf, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
    VlanProtocol,
};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteMessage, RouteNextHop, RouteNextHopFlags,
    RouteProtocol, RouteScope, RouteType, RouteVia,
};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleFlags, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use pipeline::Discard;
pub use rib::event::{
    Event, KernelHop, KernelNexthop, KernelVlan, Placement, RT_TABLE_DEFAULT, RT_TABLE_LOCAL,
    RT_TABLE_MAIN, RouteDetail, nud,
};
use rib::rule::{KernelRule, RuleVerb};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use wire::{Cidr, Ipv4Cidr, Ipv6Cidr};

/// Message types.
pub mod msg {
    pub const NLMSG_ERROR: u16 = netlink_packet_core::NLMSG_ERROR;
    pub const NLMSG_DONE: u16 = netlink_packet_core::NLMSG_DONE;
    pub const RTM_NEWLINK: u16 = libc::RTM_NEWLINK;
    pub const RTM_DELLINK: u16 = libc::RTM_DELLINK;
    pub const RTM_GETLINK: u16 = libc::RTM_GETLINK;
    pub const RTM_NEWADDR: u16 = libc::RTM_NEWADDR;
    pub const RTM_DELADDR: u16 = libc::RTM_DELADDR;
    pub const RTM_GETADDR: u16 = libc::RTM_GETADDR;
    pub const RTM_NEWROUTE: u16 = libc::RTM_NEWROUTE;
    pub const RTM_DELROUTE: u16 = libc::RTM_DELROUTE;
    pub const RTM_GETROUTE: u16 = libc::RTM_GETROUTE;
    pub const RTM_NEWNEIGH: u16 = libc::RTM_NEWNEIGH;
    pub const RTM_DELNEIGH: u16 = libc::RTM_DELNEIGH;
    pub const RTM_GETNEIGH: u16 = libc::RTM_GETNEIGH;
    pub const RTM_NEWRULE: u16 = libc::RTM_NEWRULE;
    pub const RTM_DELRULE: u16 = libc::RTM_DELRULE;
    pub const RTM_GETRULE: u16 = libc::RTM_GETRULE;
    // Nexthop objects (linux/rtnetlink.h, since 5.3): in neither libc nor
    // netlink-packet-route.
    pub const RTM_NEWNEXTHOP: u16 = 104;
    pub const RTM_DELNEXTHOP: u16 = 105;
    pub const RTM_GETNEXTHOP: u16 = 106;
}

/// Multicast groups fastfwd follows.
pub const GROUPS: [u32; 9] = [
    libc::RTNLGRP_LINK,
    libc::RTNLGRP_NEIGH,
    libc::RTNLGRP_IPV4_IFADDR,
    libc::RTNLGRP_IPV4_ROUTE,
    libc::RTNLGRP_IPV4_RULE,
    libc::RTNLGRP_IPV6_IFADDR,
    libc::RTNLGRP_IPV6_ROUTE,
    libc::RTNLGRP_IPV6_RULE,
    libc::RTNLGRP_NEXTHOP,
];

/// Splits a datagram into (type, flags, seq, body) messages; stops at the
/// first message whose length does not fit.
pub fn messages(buf: &[u8]) -> impl Iterator<Item = (u16, u16, u32, &[u8])> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let m = NetlinkBuffer::new_checked(buf.get(at..)?).ok()?;
        let len = m.length() as usize;
        let item = (
            m.message_type(),
            m.flags(),
            m.sequence_number(),
            m.payload(),
        );
        at += len.next_multiple_of(4);
        Some(item)
    })
}

/// Parses one message into an event (`None` for types fastfwd ignores or
/// malformed bodies). `flags` are the message's netlink flags.
pub fn parse(ty: u16, flags: u16, body: &[u8]) -> Option<Event> {
    use msg::*;
    match ty {
        NLMSG_DONE => Some(Event::Done),
        // struct nlmsgerr starts with the (negative) errno, 0 for an ack.
        NLMSG_ERROR => Some(Event::Ack(i32::from_ne_bytes(
            body.get(..4)?.try_into().ok()?,
        ))),
        RTM_NEWNEXTHOP | RTM_DELNEXTHOP => nexthop(ty == RTM_NEWNEXTHOP, body),
        _ => {
            let mut header = NetlinkHeader::default();
            header.message_type = ty;
            match RouteNetlinkMessage::deserialize(&header, body).ok()? {
                RouteNetlinkMessage::NewLink(m) => Some(link(true, m)),
                RouteNetlinkMessage::DelLink(m) => Some(link(false, m)),
                RouteNetlinkMessage::NewAddress(m) => address(true, m),
                RouteNetlinkMessage::DelAddress(m) => address(false, m),
                RouteNetlinkMessage::NewRoute(m) => route(true, flags, m),
                RouteNetlinkMessage::DelRoute(m) => route(false, flags, m),
                RouteNetlinkMessage::NewRule(m) => rule(true, m),
                RouteNetlinkMessage::DelRule(m) => rule(false, m),
                RouteNetlinkMessage::NewNeighbour(m) => neighbour(true, m),
                RouteNetlinkMessage::DelNeighbour(m) => neighbour(false, m),
                _ => None,
            }
        }
    }
}

/// Whether a message of a kind fastfwd follows (links, addresses, routes,
/// rules, neighbours, nexthop objects) is one it cannot decode at all, as
/// opposed to one it decodes and does not use (another family, a cached
/// route). Asked only of messages [`parse`] gave no event for.
pub fn undecodable(ty: u16, body: &[u8]) -> bool {
    use msg::*;
    match ty {
        RTM_NEWNEXTHOP | RTM_DELNEXTHOP => {
            body.len() < 8 || NlasIterator::new(&body[8..]).any(|nla| nla.is_err())
        }
        RTM_NEWLINK | RTM_DELLINK | RTM_NEWADDR | RTM_DELADDR | RTM_NEWROUTE | RTM_DELROUTE
        | RTM_NEWRULE | RTM_DELRULE | RTM_NEWNEIGH | RTM_DELNEIGH => {
            let mut header = NetlinkHeader::default();
            header.message_type = ty;
            RouteNetlinkMessage::deserialize(&header, body).is_err()
        }
        _ => false,
    }
}

fn link(add: bool, m: LinkMessage) -> Event {
    let (mut name, mut mac, mut mtu) = (String::new(), None, None);
    let (mut vrf, mut master, mut parent) = (None, None, None);
    let mut tag: Option<(u16, bool)> = None;
    let mut kind: Option<String> = None;
    for a in m.attributes {
        if let LinkAttribute::LinkInfo(infos) = &a
            && let Some(k) = infos.iter().find_map(|i| match i {
                LinkInfo::Kind(k) => Some(k.to_string()),
                _ => None,
            })
        {
            kind = Some(k);
        }
        match a {
            LinkAttribute::IfName(n) => name = n,
            LinkAttribute::Address(a) => mac = a.try_into().ok(),
            LinkAttribute::Mtu(v) => mtu = Some(v),
            LinkAttribute::Controller(i) => master = Some(i),
            LinkAttribute::Link(i) => parent = Some(i),
            LinkAttribute::LinkInfo(infos) if infos.contains(&LinkInfo::Kind(InfoKind::Vlan)) => {
                let (mut id, mut ad) = (None, false);
                for i in &infos {
                    if let LinkInfo::Data(InfoData::Vlan(data)) = i {
                        for d in data {
                            match d {
                                InfoVlan::Id(v) => id = Some(*v),
                                InfoVlan::Protocol(p) => ad = *p == VlanProtocol::Ieee8021Ad,
                                _ => {}
                            }
                        }
                    }
                }
                tag = id.map(|id| (id, ad));
            }
            LinkAttribute::LinkInfo(infos) if infos.contains(&LinkInfo::Kind(InfoKind::Vrf)) => {
                // A VRF device always reports its table; 0 (none) if not.
                vrf = Some(0);
                for i in &infos {
                    if let LinkInfo::Data(InfoData::Vrf(data)) = i {
                        for d in data {
                            if let InfoVrf::TableId(t) = d {
                                vrf = Some(*t);
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    Event::Link {
        add,
        ifindex: m.header.index,
        name,
        mac,
        mtu,
        up: m.header.flags.contains(LinkFlags::Up),
        vrf,
        master,
        kind,
        vlan: tag.and_then(|(id, ad)| {
            Some(KernelVlan {
                parent: parent?,
                id,
                ad,
            })
        }),
    }
}

fn address(add: bool, m: AddressMessage) -> Option<Event> {
    let (mut local, mut address) = (None, None);
    for a in m.attributes {
        match a {
            AddressAttribute::Address(ip) => address = Some(ip),
            AddressAttribute::Local(ip) => local = Some(ip),
            _ => {}
        }
    }
    // IFA_LOCAL is the interface's own address on point-to-point links;
    // otherwise it equals IFA_ADDRESS (IPv6 sends only the latter).
    Some(Event::Addr {
        add,
        ifindex: m.header.index,
        addr: local.or(address)?,
        prefix_len: m.header.prefix_len,
    })
}

fn route_ip(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(a) => Some(IpAddr::V4(*a)),
        RouteAddress::Inet6(a) => Some(IpAddr::V6(*a)),
        _ => None,
    }
}

fn via_ip(v: &RouteVia) -> Option<IpAddr> {
    match v {
        RouteVia::Inet(a) => Some(IpAddr::V4(*a)),
        RouteVia::Inet6(a) => Some(IpAddr::V6(*a)),
        _ => None,
    }
}

/// The gateway among a route's (or a multipath member's) attributes:
/// RTA_GATEWAY, or RTA_VIA for an IPv4 route through an IPv6 neighbour.
fn gateway_of(attrs: &[RouteAttribute]) -> Option<IpAddr> {
    attrs.iter().rev().find_map(|a| match a {
        RouteAttribute::Gateway(g) => route_ip(g),
        RouteAttribute::Via(v) => via_ip(v),
        _ => None,
    })
}

/// A prefix of `family` from an address attribute (none: the whole family).
fn cidr_of(family: AddressFamily, addr: Option<IpAddr>, len: u8) -> Option<Cidr> {
    Some(match (family, addr) {
        (AddressFamily::Inet, None) => Cidr::V4(Ipv4Cidr::new(0, 0)?),
        (AddressFamily::Inet6, None) => Cidr::V6(Ipv6Cidr::new(0, 0)?),
        (AddressFamily::Inet, Some(IpAddr::V4(a))) => Cidr::V4(Ipv4Cidr::new(u32::from(a), len)?),
        (AddressFamily::Inet6, Some(IpAddr::V6(a))) => Cidr::V6(Ipv6Cidr::new(u128::from(a), len)?),
        _ => return None,
    })
}

/// A multipath route's members as fastfwd forwards over them: a dead
/// member (RTNH_F_DEAD: its device is down; the kernel skips it) left out,
/// a weight (`ip route ... nexthop ... weight W`) as W repeats while the
/// weights sum to at most the ECMP width, else one each. A member the kernel
/// marks linkdown stays: the kernel uses it unless the device's
/// `ignore_routes_with_linkdown` is set.
fn multipath_hops(members: &[RouteNextHop]) -> Vec<KernelHop> {
    let live: Vec<&RouteNextHop> = members
        .iter()
        .filter(|n| !n.flags.contains(RouteNextHopFlags::Dead))
        .collect();
    let total: usize = live.iter().map(|n| usize::from(n.hops) + 1).sum();
    let weighted = total <= pipeline::MAX_ECMP;
    let mut hops = Vec::new();
    for n in live {
        let hop = KernelHop {
            ifindex: n.interface_index,
            gateway: gateway_of(&n.attributes),
        };
        let repeats = if weighted { usize::from(n.hops) + 1 } else { 1 };
        hops.extend(std::iter::repeat_n(hop, repeats));
    }
    hops
}

fn route(add: bool, flags: u16, m: RouteMessage) -> Option<Event> {
    let h = &m.header;
    let (mut dst, mut src, mut oif, mut metric, mut nh_id) = (None, None, None, 0, None);
    let mut table = u32::from(h.table);
    let mut encap = None;
    let mut hops = None;
    for a in &m.attributes {
        match a {
            RouteAttribute::Destination(d) => dst = Some(route_ip(d)?),
            RouteAttribute::Source(d) => src = Some(route_ip(d)?),
            RouteAttribute::Oif(i) => oif = Some(*i),
            RouteAttribute::Priority(p) => metric = *p,
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::NhId(id) => nh_id = Some(*id),
            RouteAttribute::EncapType(t) => encap = Some(u16::from(*t)),
            RouteAttribute::MultiPath(members) => hops = Some(multipath_hops(members)),
            _ => {}
        }
    }
    let prefix = cidr_of(h.address_family, dst, h.destination_prefix_length)?;
    let src = match (src, h.source_prefix_length) {
        (None, 0) => None,
        (s, len) => Some(cidr_of(h.address_family, s, len)?),
    };
    // A single-path route's next hop; RTNH_F_DEAD in the route's own flags
    // says its device is down (the kernel skips the route).
    let hops = hops.unwrap_or_else(|| match oif {
        Some(ifindex) if !h.flags.contains(RouteFlags::Dead) => {
            vec![KernelHop {
                ifindex,
                gateway: gateway_of(&m.attributes),
            }]
        }
        _ => Vec::new(),
    });
    // Routes the kernel caches (IPv6 exceptions: a learned MTU, a redirect)
    // are not routes of a table.
    if h.flags.contains(RouteFlags::Cloned) {
        return None;
    }
    Some(Event::Route {
        add,
        prefix,
        table,
        kind: u8::from(h.kind),
        metric,
        hops,
        nh_id,
        detail: RouteDetail {
            src,
            tos: h.tos,
            encap,
            protocol: u8::from(h.protocol),
            placement: Placement::of_flags(flags),
        },
    })
}

fn rule(add: bool, m: RuleMessage) -> Option<Event> {
    let h = &m.header;
    let v6 = match h.family {
        AddressFamily::Inet => false,
        AddressFamily::Inet6 => true,
        _ => return None,
    };
    let mut r = KernelRule {
        v6,
        priority: 0,
        verb: RuleVerb::Lookup(u32::from(h.table)),
        src: None,
        dst: None,
        iif: None,
        oif: None,
        fwmark: None,
        tos: h.tos,
        invert: h.flags.contains(RuleFlags::Invert),
        suppress_prefixlen: None,
        suppress_ifgroup: None,
        l3mdev: false,
        uid_range: None,
        other: Vec::new(),
    };
    let (mut src, mut dst, mut table, mut goto) = (None, None, u32::from(h.table), 0);
    let (mut mark, mut mask) = (None, None);
    for a in &m.attributes {
        match a {
            RuleAttribute::Priority(p) => r.priority = *p,
            RuleAttribute::Source(a) => src = Some(*a),
            RuleAttribute::Destination(a) => dst = Some(*a),
            RuleAttribute::Iifname(n) => r.iif = Some(n.clone()),
            RuleAttribute::Oifname(n) => r.oif = Some(n.clone()),
            RuleAttribute::FwMark(v) => mark = Some(*v),
            RuleAttribute::FwMask(v) => mask = Some(*v),
            RuleAttribute::Table(t) => table = *t,
            RuleAttribute::Goto(p) => goto = *p,
            RuleAttribute::SuppressPrefixLen(n) if *n != u32::MAX => {
                r.suppress_prefixlen = Some(*n)
            }
            RuleAttribute::SuppressIfGroup(n) if *n != u32::MAX => r.suppress_ifgroup = Some(*n),
            RuleAttribute::L3MDev(on) => r.l3mdev = *on,
            RuleAttribute::UidRange(u) => r.uid_range = Some((u.start, u.end)),
            RuleAttribute::IpProtocol(p) => r.other.push(format!("ipproto {}", i32::from(*p))),
            RuleAttribute::SourcePortRange(p) => {
                r.other.push(format!("sport {}-{}", p.start, p.end))
            }
            RuleAttribute::DestinationPortRange(p) => {
                r.other.push(format!("dport {}-{}", p.start, p.end))
            }
            RuleAttribute::TunId(id) => r.other.push(format!("tun_id {id}")),
            RuleAttribute::Realm(_) => r.other.push("realms".into()),
            _ => {}
        }
    }
    let family = h.family;
    if src.is_some() || h.src_len > 0 {
        r.src = Some(cidr_of(family, src, h.src_len)?);
    }
    if dst.is_some() || h.dst_len > 0 {
        r.dst = Some(cidr_of(family, dst, h.dst_len)?);
    }
    // The kernel reports a mark given without a mask with a mask of all ones.
    if let Some(mark) = mark {
        r.fwmark = Some((mark, mask.unwrap_or(u32::MAX)));
    }
    r.verb = match h.action {
        RuleAction::ToTable => RuleVerb::Lookup(table),
        RuleAction::Goto => RuleVerb::Goto(goto),
        RuleAction::Nop => RuleVerb::Nop,
        RuleAction::Blackhole => RuleVerb::Discard(Discard::Blackhole),
        RuleAction::Unreachable => RuleVerb::Discard(Discard::Unreachable),
        RuleAction::Prohibit => RuleVerb::Discard(Discard::Prohibit),
        other => RuleVerb::Other(u8::from(other)),
    };
    Some(Event::Rule { add, rule: r })
}

fn neighbour(add: bool, m: NeighbourMessage) -> Option<Event> {
    let (mut ip, mut mac) = (None, None);
    for a in m.attributes {
        match a {
            NeighbourAttribute::Destination(NeighbourAddress::Inet(a)) => ip = Some(IpAddr::V4(a)),
            NeighbourAttribute::Destination(NeighbourAddress::Inet6(a)) => ip = Some(IpAddr::V6(a)),
            NeighbourAttribute::LinkLayerAddress(l) => mac = l.try_into().ok(),
            _ => {}
        }
    }
    Some(Event::Neigh {
        add,
        ifindex: m.header.ifindex,
        ip: ip?,
        mac,
        state: u16::from(m.header.state),
    })
}

/// RTM_NEWNEXTHOP / RTM_DELNEXTHOP: `struct nhmsg` (family, scope,
/// protocol, reserved, flags: 8 bytes), then NHA_* attributes.
fn nexthop(add: bool, body: &[u8]) -> Option<Event> {
    const NHA_ID: u16 = 1;
    const NHA_GROUP: u16 = 2;
    const NHA_BLACKHOLE: u16 = 4;
    const NHA_OIF: u16 = 5;
    const NHA_GATEWAY: u16 = 6;
    let family = *body.first()?;
    let (mut id, mut oif, mut gateway, mut blackhole) = (None, None, None, false);
    let mut group = Vec::new();
    for nla in NlasIterator::new(body.get(8..)?) {
        let nla = nla.ok()?;
        let v = nla.value();
        let u32_of = |b: &[u8]| Some(u32::from_ne_bytes(b.get(..4)?.try_into().ok()?));
        match nla.kind() {
            NHA_ID => id = u32_of(v),
            // struct nexthop_grp: id (u32), weight - 1 (u8), 3 reserved.
            NHA_GROUP => {
                group = v
                    .chunks_exact(8)
                    .filter_map(|g| Some((u32_of(g)?, u16::from(g[4]) + 1)))
                    .collect()
            }
            NHA_BLACKHOLE => blackhole = true,
            NHA_OIF => oif = u32_of(v),
            NHA_GATEWAY => {
                gateway = match (i32::from(family), v.len()) {
                    (libc::AF_INET, 4) => Some(IpAddr::V4(Ipv4Addr::new(v[0], v[1], v[2], v[3]))),
                    (libc::AF_INET6, 16) => {
                        Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(v).ok()?)))
                    }
                    _ => None,
                }
            }
            _ => {}
        }
    }
    let target = if blackhole {
        KernelNexthop::Blackhole
    } else if !group.is_empty() {
        KernelNexthop::Group(group)
    } else {
        KernelNexthop::Via(KernelHop {
            ifindex: oif.unwrap_or(0),
            gateway,
        })
    };
    Some(Event::Nexthop {
        add,
        id: id?,
        target,
    })
}

/// One request: `inner` framed with `flags` (NLM_F_REQUEST added) and `seq`.
fn request(inner: RouteNetlinkMessage, flags: u16, seq: u32) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = flags | NLM_F_REQUEST;
    header.sequence_number = seq;
    let mut m = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(inner));
    m.finalize();
    let mut buf = vec![0; m.buffer_len()];
    m.serialize(&mut buf);
    buf
}

fn family_of(ip: IpAddr) -> AddressFamily {
    if ip.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    }
}

/// A dump request for links, addresses, routes, neighbours or nexthop
/// objects (`ty` is the RTM_GET* type), all families.
pub fn dump_request(ty: u16, seq: u32) -> Vec<u8> {
    let inner = match ty {
        msg::RTM_GETLINK => RouteNetlinkMessage::GetLink(LinkMessage::default()),
        msg::RTM_GETADDR => RouteNetlinkMessage::GetAddress(AddressMessage::default()),
        msg::RTM_GETROUTE => RouteNetlinkMessage::GetRoute(RouteMessage::default()),
        msg::RTM_GETNEIGH => RouteNetlinkMessage::GetNeighbour(NeighbourMessage::default()),
        msg::RTM_GETRULE => RouteNetlinkMessage::GetRule(RuleMessage::default()),
        _ => {
            // RTM_GETNEXTHOP: a zeroed struct nhmsg (all families).
            let mut header = NetlinkHeader::default();
            header.length = (header.buffer_len() + 8) as u32;
            header.message_type = ty;
            header.flags = NLM_F_REQUEST | NLM_F_DUMP;
            header.sequence_number = seq;
            let mut buf = vec![0; header.length as usize];
            header.emit(&mut buf);
            return buf;
        }
    };
    request(inner, NLM_F_DUMP, seq)
}

/// Asks the kernel to resolve `ip` on `ifindex` (ARP or ND) as if a packet
/// were waiting for it: RTM_NEWNEIGH with NTF_USE creates the entry if
/// needed and starts resolution without setting any address.
pub fn resolve_request(ifindex: u32, ip: IpAddr, seq: u32) -> Vec<u8> {
    let mut m = NeighbourMessage::default();
    m.header.family = family_of(ip);
    m.header.ifindex = ifindex;
    m.header.state = NeighbourState::Incomplete;
    m.header.flags = NeighbourFlags::Use;
    m.attributes
        .push(NeighbourAttribute::Destination(NeighbourAddress::from(ip)));
    request(
        RouteNetlinkMessage::NewNeighbour(m),
        NLM_F_CREATE | NLM_F_ACK,
        seq,
    )
}

/// Adds (or replaces, `add`) or deletes a static unicast route in the main
/// table.
pub fn route_request(add: bool, prefix: Cidr, hops: &[KernelHop], seq: u32) -> Vec<u8> {
    if add {
        let mut out = Vec::new();
        push_route_replace(&mut out, prefix, hops, seq, true);
        out
    } else {
        request(
            RouteNetlinkMessage::DelRoute(static_route(prefix, hops)),
            NLM_F_ACK,
            seq,
        )
    }
}

/// As [`route_request`] adding or replacing, appended to `out`, with an
/// acknowledgement only if `ack`: without one the kernel answers only a
/// refusal, so a batch of these needs one acknowledged request at its end.
pub fn push_route_replace(
    out: &mut Vec<u8>,
    prefix: Cidr,
    hops: &[KernelHop],
    seq: u32,
    ack: bool,
) {
    let flags = NLM_F_CREATE | NLM_F_REPLACE | if ack { NLM_F_ACK } else { 0 };
    out.extend_from_slice(&request(
        RouteNetlinkMessage::NewRoute(static_route(prefix, hops)),
        flags,
        seq,
    ));
}

/// A static unicast route in the main table.
fn static_route(prefix: Cidr, hops: &[KernelHop]) -> RouteMessage {
    let mut m = RouteMessage::default();
    let dst = match prefix {
        Cidr::V4(p) => {
            m.header.address_family = AddressFamily::Inet;
            RouteAddress::Inet(p.network())
        }
        Cidr::V6(p) => {
            m.header.address_family = AddressFamily::Inet6;
            RouteAddress::Inet6(p.network())
        }
    };
    m.header.destination_prefix_length = prefix.prefix_len();
    m.header.table = libc::RT_TABLE_MAIN;
    m.header.protocol = RouteProtocol::Static;
    m.header.scope = RouteScope::Universe;
    m.header.kind = RouteType::Unicast;
    m.attributes.push(RouteAttribute::Destination(dst));
    if let [hop] = hops {
        m.attributes.push(RouteAttribute::Oif(hop.ifindex));
        if let Some(g) = hop.gateway {
            m.attributes.push(RouteAttribute::Gateway(g.into()));
        }
    } else if !hops.is_empty() {
        let members = hops
            .iter()
            .map(|h| {
                let mut n = RouteNextHop::default();
                n.interface_index = h.ifindex;
                if let Some(g) = h.gateway {
                    n.attributes.push(RouteAttribute::Gateway(g.into()));
                }
                n
            })
            .collect();
        m.attributes.push(RouteAttribute::MultiPath(members));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use libc::{RTN_BLACKHOLE, RTN_PROHIBIT, RTN_THROW, RTN_UNICAST, RTN_UNREACHABLE};
    const AF_INET: u8 = libc::AF_INET as u8;
    const AF_INET6: u8 = libc::AF_INET6 as u8;

    fn attr(ty: u16, p: &[u8]) -> Vec<u8> {
        let mut v = ((4 + p.len()) as u16).to_ne_bytes().to_vec();
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(p);
        while !v.len().is_multiple_of(4) {
            v.push(0);
        }
        v
    }

    fn message(ty: u16, body: &[u8]) -> Vec<u8> {
        let mut v = ((16 + body.len()) as u32).to_ne_bytes().to_vec();
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(&[0; 10]);
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn discarding_route_types_are_kept_local_ones_are_not() {
        for (kind, want) in [
            (RTN_BLACKHOLE, Some(Discard::Blackhole)),
            (RTN_UNREACHABLE, Some(Discard::Unreachable)),
            (RTN_PROHIBIT, Some(Discard::Prohibit)),
            (RTN_THROW, Some(Discard::Throw)),
            (RTN_UNICAST, None),
            (2, None), // RTN_LOCAL
            (3, None), // RTN_BROADCAST
        ] {
            let mut body = vec![AF_INET, 24, 0, 0, 254, 4, 0, kind, 0, 0, 0, 0];
            body.extend(attr(1, &[10, 9, 8, 0]));
            let buf = message(msg::RTM_NEWROUTE, &body);
            let (ty, _, _, b) = messages(&buf).next().unwrap();
            let ev = parse(ty, 0, b).unwrap();
            assert_eq!(ev.route_discard(), want, "kind {kind}");
            assert_eq!(
                ev.is_forwarding_route(),
                kind == RTN_UNICAST || want.is_some(),
                "kind {kind}"
            );
            let Event::Route { prefix, hops, .. } = ev else {
                panic!("{ev:?}")
            };
            assert_eq!(prefix.to_string(), "10.9.8.0/24");
            assert!(hops.is_empty());
        }
    }

    #[test]
    fn parses_nexthop_objects_and_routes_that_use_them() {
        let nh = |attrs_: &[Vec<u8>], family: u8| {
            let mut body = vec![family, 0, 0, 0, 0, 0, 0, 0];
            for a in attrs_ {
                body.extend(a);
            }
            let buf = message(msg::RTM_NEWNEXTHOP, &body);
            let (ty, _, _, b) = messages(&buf).next().unwrap();
            parse(ty, 0, b).unwrap()
        };
        assert_eq!(
            nh(
                &[
                    attr(1, &7u32.to_ne_bytes()),
                    attr(5, &3u32.to_ne_bytes()),
                    attr(6, &[10, 0, 0, 1])
                ],
                AF_INET
            ),
            Event::Nexthop {
                add: true,
                id: 7,
                target: KernelNexthop::Via(KernelHop {
                    ifindex: 3,
                    gateway: Some("10.0.0.1".parse().unwrap())
                })
            }
        );
        assert_eq!(
            nh(&[attr(1, &8u32.to_ne_bytes()), attr(4, &[])], 0),
            Event::Nexthop {
                add: true,
                id: 8,
                target: KernelNexthop::Blackhole
            }
        );
        let mut grp = Vec::new();
        for (id, w) in [(7u32, 0u8), (9, 2)] {
            grp.extend_from_slice(&id.to_ne_bytes());
            grp.extend_from_slice(&[w, 0, 0, 0]);
        }
        assert_eq!(
            nh(&[attr(1, &10u32.to_ne_bytes()), attr(2, &grp)], 0),
            Event::Nexthop {
                add: true,
                id: 10,
                target: KernelNexthop::Group(vec![(7, 1), (9, 3)])
            }
        );
        // No id: malformed, ignored.
        assert!(parse(msg::RTM_NEWNEXTHOP, 0, &[0u8; 8]).is_none());

        let mut body = vec![AF_INET, 16, 0, 0, 254, 4, 0, RTN_UNICAST, 0, 0, 0, 0];
        body.extend(attr(1, &[10, 1, 0, 0]));
        body.extend(attr(30, &10u32.to_ne_bytes()));
        let buf = message(msg::RTM_NEWROUTE, &body);
        let (ty, _, _, b) = messages(&buf).next().unwrap();
        let Some(Event::Route { nh_id, hops, .. }) = parse(ty, 0, b) else {
            panic!()
        };
        assert_eq!((nh_id, hops.len()), (Some(10), 0));
    }

    #[test]
    fn parses_a_multipath_ipv4_route() {
        let mut body = vec![AF_INET, 16, 0, 0, 254, 4, 0, RTN_UNICAST, 0, 0, 0, 0];
        body.extend(attr(1, &[10, 1, 0, 0]));
        let mut mp = Vec::new();
        for (idx, gw) in [(3u32, [198, 19, 0, 1]), (4, [198, 18, 0, 1])] {
            let g = attr(5, &gw);
            mp.extend_from_slice(&((8 + g.len()) as u16).to_ne_bytes());
            mp.extend_from_slice(&[0, 0]);
            mp.extend_from_slice(&idx.to_ne_bytes());
            mp.extend(g);
        }
        body.extend(attr(9, &mp));
        let buf = message(msg::RTM_NEWROUTE, &body);
        let (ty, _, _, b) = messages(&buf).next().unwrap();
        let ev = parse(ty, 0, b).unwrap();
        assert!(ev.is_forwarding_route());
        let Event::Route {
            prefix, hops, add, ..
        } = ev
        else {
            panic!("{ev:?}")
        };
        assert!(add);
        assert_eq!(prefix.to_string(), "10.1.0.0/16");
        assert_eq!(
            hops,
            vec![
                KernelHop {
                    ifindex: 3,
                    gateway: Some("198.19.0.1".parse().unwrap())
                },
                KernelHop {
                    ifindex: 4,
                    gateway: Some("198.18.0.1".parse().unwrap())
                },
            ]
        );
    }

    #[test]
    fn parses_an_ipv6_default_route_with_oif() {
        let mut body = vec![AF_INET6, 0, 0, 0, 254, 3, 0, RTN_UNICAST, 0, 0, 0, 0];
        body.extend(attr(4, &7u32.to_ne_bytes()));
        let gw: Ipv6Addr = "fe80::1".parse().unwrap();
        body.extend(attr(5, &gw.octets()));
        let ev = parse(msg::RTM_NEWROUTE, 0, &body).unwrap();
        let Event::Route { prefix, hops, .. } = ev else {
            panic!()
        };
        assert_eq!(prefix.to_string(), "::/0");
        assert_eq!(
            hops,
            vec![KernelHop {
                ifindex: 7,
                gateway: Some(IpAddr::V6(gw))
            }]
        );
    }

    #[test]
    fn parses_neighbour_and_link_and_address() {
        let mut nb = vec![AF_INET, 0, 0, 0];
        nb.extend_from_slice(&5u32.to_ne_bytes());
        nb.extend_from_slice(&nud::REACHABLE.to_ne_bytes());
        nb.extend_from_slice(&[0, 1]);
        nb.extend(attr(1, &[198, 19, 0, 108]));
        nb.extend(attr(2, &[2, 0, 0, 0, 0, 9]));
        assert_eq!(
            parse(msg::RTM_NEWNEIGH, 0, &nb),
            Some(Event::Neigh {
                add: true,
                ifindex: 5,
                ip: "198.19.0.108".parse().unwrap(),
                mac: Some([2, 0, 0, 0, 0, 9]),
                state: nud::REACHABLE
            })
        );
        let mut link = vec![0u8; 16];
        link[4..8].copy_from_slice(&9u32.to_ne_bytes());
        link[8..12].copy_from_slice(&1u32.to_ne_bytes());
        link.extend(attr(3, b"d0\0"));
        link.extend(attr(1, &[2, 0, 0, 0, 0, 1]));
        link.extend(attr(4, &1500u32.to_ne_bytes()));
        assert_eq!(
            parse(msg::RTM_NEWLINK, 0, &link),
            Some(Event::Link {
                add: true,
                ifindex: 9,
                name: "d0".into(),
                mac: Some([2, 0, 0, 0, 0, 1]),
                mtu: Some(1500),
                up: true,
                vrf: None,
                master: None,
                kind: None,
                vlan: None,
            })
        );
        // IFLA_MASTER and IFLA_LINKINFO { IFLA_INFO_KIND "bond" }.
        link.extend(attr(10, &3u32.to_ne_bytes()));
        link.extend(attr(18, &attr(1, b"bond\0")));
        let Some(Event::Link { master, kind, .. }) = parse(msg::RTM_NEWLINK, 0, &link) else {
            panic!("a link");
        };
        assert_eq!((master, kind.as_deref()), (Some(3), Some("bond")));
        let mut addr = vec![AF_INET6, 64, 0, 0];
        addr.extend_from_slice(&9u32.to_ne_bytes());
        let a: Ipv6Addr = "2001:2::10".parse().unwrap();
        addr.extend(attr(1, &a.octets()));
        assert_eq!(
            parse(msg::RTM_DELADDR, 0, &addr),
            Some(Event::Addr {
                add: false,
                ifindex: 9,
                addr: IpAddr::V6(a),
                prefix_len: 64
            })
        );
    }

    #[test]
    fn truncated_input_gives_no_event_and_no_panic() {
        let mut body = vec![AF_INET, 16, 0, 0, 254, 4, 0, RTN_UNICAST, 0, 0, 0, 0];
        body.extend(attr(1, &[10, 1, 0, 0]));
        let full = message(msg::RTM_NEWROUTE, &body);
        for cut in 0..full.len() {
            for (ty, _, _, b) in messages(&full[..cut]) {
                let _ = parse(ty, 0, b);
            }
        }
        for cut in 0..body.len() {
            let _ = parse(msg::RTM_NEWROUTE, 0, &body[..cut]);
            let _ = parse(msg::RTM_NEWNEIGH, 0, &body[..cut]);
            let _ = parse(msg::RTM_NEWLINK, 0, &body[..cut]);
            let _ = parse(msg::RTM_NEWADDR, 0, &body[..cut]);
        }
        assert!(parse(msg::RTM_NEWROUTE, 0, &body[..11]).is_none());
    }

    /// A broadcast fastfwd cannot decode is told apart (and counted) from
    /// one it decodes and does not use.
    #[test]
    fn undecodable_broadcasts_are_told_from_unused_ones() {
        let mut body = vec![AF_INET, 16, 0, 0, 254, 4, 0, RTN_UNICAST, 0, 0, 0, 0];
        body.extend(attr(1, &[10, 1, 0, 0]));
        assert!(parse(msg::RTM_NEWROUTE, 0, &body).is_some());
        assert!(!undecodable(msg::RTM_NEWROUTE, &body));
        // A header cut short: nothing to decode.
        assert!(parse(msg::RTM_NEWROUTE, 0, &body[..5]).is_none());
        assert!(undecodable(msg::RTM_NEWROUTE, &body[..5]));
        // A cached route (RTM_F_CLONED) decodes and is not used.
        let mut flagged = body.clone();
        flagged[8..12].copy_from_slice(&0x200u32.to_ne_bytes());
        assert!(parse(msg::RTM_NEWROUTE, 0, &flagged).is_none());
        assert!(!undecodable(msg::RTM_NEWROUTE, &flagged));
        // Types fastfwd does not follow are never counted.
        assert!(!undecodable(30, &[0xff; 3]));
        // A nexthop object with a broken attribute.
        let mut nh = vec![AF_INET, 0, 0, 0, 0, 0, 0, 0];
        nh.extend_from_slice(&[8, 0, 1, 0, 7]);
        assert!(undecodable(msg::RTM_NEWNEXTHOP, &nh));
    }

    #[test]
    fn built_route_request_parses_back() {
        let prefix: Cidr = "10.9.0.0/16".parse().unwrap();
        let hops = [
            KernelHop {
                ifindex: 2,
                gateway: Some("1.1.1.1".parse().unwrap()),
            },
            KernelHop {
                ifindex: 3,
                gateway: Some("2.2.2.2".parse().unwrap()),
            },
        ];
        let req = route_request(true, prefix, &hops, 7);
        let (ty, _, seq, body) = messages(&req).next().unwrap();
        assert_eq!(seq, 7);
        let Some(Event::Route {
            prefix: p, hops: h, ..
        }) = parse(ty, 0, body)
        else {
            panic!()
        };
        assert_eq!((p, h), (prefix, hops.to_vec()));
    }

    #[test]
    fn dump_requests_ask_for_every_family() {
        for (ty, body_len) in [
            (msg::RTM_GETLINK, 16),
            (msg::RTM_GETADDR, 8),
            (msg::RTM_GETROUTE, 12),
            (msg::RTM_GETNEIGH, 12),
            (msg::RTM_GETNEXTHOP, 8),
        ] {
            let req = dump_request(ty, 41);
            let all: Vec<_> = messages(&req).collect();
            assert_eq!(all.len(), 1, "type {ty}");
            let (t, flags, seq, body) = all[0];
            assert_eq!((t, seq), (ty, 41));
            assert_eq!(flags, NLM_F_REQUEST | NLM_F_DUMP, "type {ty}");
            assert_eq!(body.len(), body_len, "type {ty}");
            // Family 0 (AF_UNSPEC) and no filter: everything.
            assert!(body.iter().all(|&b| b == 0), "type {ty}: {body:?}");
        }
    }

    #[test]
    fn resolve_request_parses_back() {
        for ip in ["198.19.0.7", "2001:db8::7"] {
            let ip: IpAddr = ip.parse().unwrap();
            let req = resolve_request(5, ip, 9);
            let (ty, flags, seq, body) = messages(&req).next().unwrap();
            assert_eq!(seq, 9);
            assert_eq!(flags, NLM_F_REQUEST | NLM_F_CREATE | NLM_F_ACK);
            // ndm_flags carries NTF_USE: resolve as if a packet waited.
            assert_eq!(body[10], libc::NTF_USE);
            assert_eq!(
                parse(ty, 0, body),
                Some(Event::Neigh {
                    add: true,
                    ifindex: 5,
                    ip,
                    mac: None,
                    state: nud::INCOMPLETE
                })
            );
        }
    }

    #[test]
    fn an_ipv4_route_through_an_ipv6_neighbour_keeps_its_gateway() {
        // RTA_VIA (RFC 5549 style): family AF_INET6, then the address.
        let gw: Ipv6Addr = "fe80::2".parse().unwrap();
        let mut via = (libc::AF_INET6 as u16).to_ne_bytes().to_vec();
        via.extend_from_slice(&gw.octets());
        let mut body = vec![AF_INET, 24, 0, 0, 254, 4, 0, RTN_UNICAST, 0, 0, 0, 0];
        body.extend(attr(1, &[10, 2, 3, 0]));
        body.extend(attr(4, &6u32.to_ne_bytes()));
        body.extend(attr(18, &via));
        let Some(Event::Route { prefix, hops, .. }) = parse(msg::RTM_NEWROUTE, 0, &body) else {
            panic!()
        };
        assert_eq!(prefix.to_string(), "10.2.3.0/24");
        assert_eq!(
            hops,
            vec![KernelHop {
                ifindex: 6,
                gateway: Some(IpAddr::V6(gw))
            }]
        );
    }
}
