//! rtnetlink messages: building the requests fastfwd sends (dumps, a
//! neighbour resolution, route changes) and parsing what the kernel sends
//! back and broadcasts (links, addresses, routes, neighbours).
//!
//! Pure byte handling: the socket is [`netio::NetlinkSocket`]. Layouts
//! follow `linux/netlink.h`, `linux/rtnetlink.h`, `linux/if_link.h`,
//! `linux/if_addr.h` and `linux/neighbour.h`. Malformed input yields no
//! event rather than a panic.

use pipeline::Discard;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use wire::{Cidr, Ipv4Cidr, Ipv6Cidr};

/// Message types.
pub mod msg {
    pub const NLMSG_ERROR: u16 = 2;
    pub const NLMSG_DONE: u16 = 3;
    pub const RTM_NEWLINK: u16 = 16;
    pub const RTM_DELLINK: u16 = 17;
    pub const RTM_GETLINK: u16 = 18;
    pub const RTM_NEWADDR: u16 = 20;
    pub const RTM_DELADDR: u16 = 21;
    pub const RTM_GETADDR: u16 = 22;
    pub const RTM_NEWROUTE: u16 = 24;
    pub const RTM_DELROUTE: u16 = 25;
    pub const RTM_GETROUTE: u16 = 26;
    pub const RTM_NEWNEIGH: u16 = 28;
    pub const RTM_DELNEIGH: u16 = 29;
    pub const RTM_GETNEIGH: u16 = 30;
    pub const RTM_NEWNEXTHOP: u16 = 104;
    pub const RTM_DELNEXTHOP: u16 = 105;
    pub const RTM_GETNEXTHOP: u16 = 106;
}

/// Multicast groups fastfwd follows (RTNLGRP_*): LINK, NEIGH,
/// IPV4_IFADDR, IPV4_ROUTE, IPV6_IFADDR, IPV6_ROUTE, NEXTHOP.
pub const GROUPS: [u32; 7] = [1, 3, 5, 7, 9, 11, 32];

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_CREATE: u16 = 0x400;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const RTN_UNICAST: u8 = 1;
const RTN_BLACKHOLE: u8 = 6;
const RTN_UNREACHABLE: u8 = 7;
const RTN_PROHIBIT: u8 = 8;
const RTN_THROW: u8 = 9;
/// The main routing table.
pub const RT_TABLE_MAIN: u32 = 254;
const RTPROT_STATIC: u8 = 4;
const NTF_USE: u8 = 0x01;

/// Neighbour states (NUD_*).
pub mod nud {
    pub const INCOMPLETE: u16 = 0x01;
    pub const REACHABLE: u16 = 0x02;
    pub const STALE: u16 = 0x04;
    pub const DELAY: u16 = 0x08;
    pub const PROBE: u16 = 0x10;
    pub const FAILED: u16 = 0x20;
    pub const NOARP: u16 = 0x40;
    pub const PERMANENT: u16 = 0x80;
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
    /// the main table that forwards (unicast) or discards (blackhole,
    /// unreachable, prohibit, throw). Local, broadcast, multicast and NAT
    /// routes are the host's business.
    pub fn is_forwarding_route(&self) -> bool {
        matches!(self, Event::Route { table, kind, .. } if *table == RT_TABLE_MAIN
            && (*kind == RTN_UNICAST || discard_of(*kind).is_some()))
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
        RTN_BLACKHOLE => Some(Discard::Blackhole),
        RTN_UNREACHABLE => Some(Discard::Unreachable),
        RTN_PROHIBIT => Some(Discard::Prohibit),
        RTN_THROW => Some(Discard::Throw),
        _ => None,
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Splits a datagram into (type, flags, seq, body) messages.
pub fn messages(buf: &[u8]) -> impl Iterator<Item = (u16, u16, u32, &[u8])> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let len = u32_at(buf, at)? as usize;
        if len < 16 || at + len > buf.len() {
            return None;
        }
        let ty = u16_at(buf, at + 4)?;
        let flags = u16_at(buf, at + 6)?;
        let seq = u32_at(buf, at + 8)?;
        let body = &buf[at + 16..at + len];
        at += align4(len);
        Some((ty, flags, seq, body))
    })
}

/// Iterates over the (type, payload) attributes in `b`.
pub fn attrs(b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let len = u16_at(b, at)? as usize;
        if len < 4 || at + len > b.len() {
            return None;
        }
        let ty = u16_at(b, at + 2)? & 0x3fff;
        let payload = &b[at + 4..at + len];
        at += align4(len);
        Some((ty, payload))
    })
}

fn ip_from(family: u8, b: &[u8]) -> Option<IpAddr> {
    match (family, b.len()) {
        (AF_INET, 4) => Some(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))),
        (AF_INET6, 16) => {
            let a: [u8; 16] = b.try_into().ok()?;
            Some(IpAddr::V6(Ipv6Addr::from(a)))
        }
        _ => None,
    }
}

fn mac_from(b: &[u8]) -> Option<[u8; 6]> {
    b.try_into().ok()
}

/// RTA_VIA: a 2-byte family followed by the address.
fn via_from(b: &[u8]) -> Option<IpAddr> {
    let family = u16_at(b, 0)?;
    ip_from(u8::try_from(family).ok()?, b.get(2..)?)
}

/// Parses one message into an event (`None` for types fastfwd ignores or
/// malformed bodies).
pub fn parse(ty: u16, body: &[u8]) -> Option<Event> {
    use msg::*;
    match ty {
        NLMSG_DONE => Some(Event::Done),
        NLMSG_ERROR => Some(Event::Ack(u32_at(body, 0)? as i32)),
        RTM_NEWLINK | RTM_DELLINK => {
            let ifindex = u32_at(body, 4)?;
            let flags = u32_at(body, 8)?;
            let (mut name, mut mac, mut mtu) = (String::new(), None, None);
            for (t, p) in attrs(body.get(16..)?) {
                match t {
                    1 => mac = mac_from(p),
                    3 => {
                        name = String::from_utf8_lossy(p.split(|&c| c == 0).next().unwrap_or(&[]))
                            .into_owned()
                    }
                    4 => mtu = u32_at(p, 0),
                    _ => {}
                }
            }
            Some(Event::Link {
                add: ty == RTM_NEWLINK,
                ifindex,
                name,
                mac,
                mtu,
                up: flags & 1 != 0,
            })
        }
        RTM_NEWADDR | RTM_DELADDR => {
            let family = *body.first()?;
            let prefix_len = *body.get(1)?;
            let ifindex = u32_at(body, 4)?;
            let (mut local, mut address) = (None, None);
            for (t, p) in attrs(body.get(8..)?) {
                match t {
                    1 => address = ip_from(family, p),
                    2 => local = ip_from(family, p),
                    _ => {}
                }
            }
            // IFA_LOCAL is the interface's own address on point-to-point
            // links; otherwise it equals IFA_ADDRESS (IPv6 sends only the latter).
            let addr = local.or(address)?;
            Some(Event::Addr {
                add: ty == RTM_NEWADDR,
                ifindex,
                addr,
                prefix_len,
            })
        }
        RTM_NEWROUTE | RTM_DELROUTE => {
            let family = *body.first()?;
            let dst_len = *body.get(1)?;
            let mut table = u32::from(*body.get(4)?);
            let kind = *body.get(7)?;
            let (mut dst, mut oif, mut gateway, mut metric, mut nh_id) =
                (None, None, None, 0, None);
            let mut hops = Vec::new();
            for (t, p) in attrs(body.get(12..)?) {
                match t {
                    1 => dst = ip_from(family, p),
                    4 => oif = u32_at(p, 0),
                    5 => gateway = ip_from(family, p),
                    6 => metric = u32_at(p, 0).unwrap_or(0),
                    9 => hops = multipath(family, p),
                    15 => table = u32_at(p, 0).unwrap_or(table),
                    18 => gateway = via_from(p),
                    30 => nh_id = u32_at(p, 0),
                    _ => {}
                }
            }
            let prefix = match (family, dst) {
                (AF_INET, None) => Cidr::V4(Ipv4Cidr::new(0, 0)?),
                (AF_INET6, None) => Cidr::V6(Ipv6Cidr::new(0, 0)?),
                (_, Some(IpAddr::V4(a))) => Cidr::V4(Ipv4Cidr::new(u32::from(a), dst_len)?),
                (_, Some(IpAddr::V6(a))) => Cidr::V6(Ipv6Cidr::new(u128::from(a), dst_len)?),
                _ => return None,
            };
            if hops.is_empty() {
                if let Some(ifindex) = oif {
                    hops.push(KernelHop { ifindex, gateway });
                }
            }
            Some(Event::Route {
                add: ty == RTM_NEWROUTE,
                prefix,
                table,
                kind,
                metric,
                hops,
                nh_id,
            })
        }
        RTM_NEWNEXTHOP | RTM_DELNEXTHOP => {
            // struct nhmsg: family, scope, protocol, resvd, flags (u32).
            let family = *body.first()?;
            let (mut id, mut oif, mut gateway, mut blackhole) = (None, None, None, false);
            let mut group = Vec::new();
            for (t, p) in attrs(body.get(8..)?) {
                match t {
                    1 => id = u32_at(p, 0),
                    // struct nexthop_grp: id (u32), weight - 1 (u8), ...
                    2 => {
                        group = p
                            .chunks_exact(8)
                            .filter_map(|g| Some((u32_at(g, 0)?, u16::from(g[4]) + 1)))
                            .collect()
                    }
                    4 => blackhole = true,
                    5 => oif = u32_at(p, 0),
                    6 => gateway = ip_from(family, p),
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
                add: ty == RTM_NEWNEXTHOP,
                id: id?,
                target,
            })
        }
        RTM_NEWNEIGH | RTM_DELNEIGH => {
            let family = *body.first()?;
            let ifindex = u32_at(body, 4)?;
            let state = u16_at(body, 8)?;
            let (mut ip, mut mac) = (None, None);
            for (t, p) in attrs(body.get(12..)?) {
                match t {
                    1 => ip = ip_from(family, p),
                    2 => mac = mac_from(p),
                    _ => {}
                }
            }
            Some(Event::Neigh {
                add: ty == RTM_NEWNEIGH,
                ifindex,
                ip: ip?,
                mac,
                state,
            })
        }
        _ => None,
    }
}

/// RTA_MULTIPATH: a list of `struct rtnexthop` each followed by attributes.
fn multipath(family: u8, b: &[u8]) -> Vec<KernelHop> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some(len) = u16_at(b, at) {
        let len = len as usize;
        if len < 8 || at + len > b.len() {
            break;
        }
        let ifindex = u32_at(b, at + 4).unwrap_or(0);
        let mut gateway = None;
        for (t, p) in attrs(&b[at + 8..at + len]) {
            match t {
                5 => gateway = ip_from(family, p),
                18 => gateway = via_from(p),
                _ => {}
            }
        }
        out.push(KernelHop { ifindex, gateway });
        at += align4(len);
    }
    out
}

/// Builds one request message.
struct Builder {
    buf: Vec<u8>,
}

impl Builder {
    fn new(ty: u16, flags: u16, seq: u32) -> Builder {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(&0u32.to_ne_bytes());
        buf.extend_from_slice(&ty.to_ne_bytes());
        buf.extend_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
        buf.extend_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes());
        Builder { buf }
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self
    }
    fn attr(&mut self, ty: u16, payload: &[u8]) -> &mut Self {
        let len = 4 + payload.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(payload);
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
        self
    }
    fn finish(&mut self) -> Vec<u8> {
        let len = self.buf.len() as u32;
        self.buf[..4].copy_from_slice(&len.to_ne_bytes());
        std::mem::take(&mut self.buf)
    }
}

fn family_of(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        AF_INET
    } else {
        AF_INET6
    }
}

fn ip_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// A dump request for links, addresses, routes or neighbours (`ty` is the
/// RTM_GET* type), all families.
pub fn dump_request(ty: u16, seq: u32) -> Vec<u8> {
    let mut b = Builder::new(ty, NLM_F_DUMP, seq);
    match ty {
        msg::RTM_GETLINK => b.bytes(&[0u8; 16]),
        msg::RTM_GETADDR => b.bytes(&[0u8; 8]),
        msg::RTM_GETROUTE => b.bytes(&[0u8; 12]),
        msg::RTM_GETNEXTHOP => b.bytes(&[0u8; 8]),
        _ => b.bytes(&[0u8; 12]),
    };
    b.finish()
}

/// Asks the kernel to resolve `ip` on `ifindex` (ARP or ND) as if a packet
/// were waiting for it: RTM_NEWNEIGH with NTF_USE creates the entry if
/// needed and starts resolution without setting any address.
pub fn resolve_request(ifindex: u32, ip: IpAddr, seq: u32) -> Vec<u8> {
    let mut b = Builder::new(msg::RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_ACK, seq);
    let mut nd = [0u8; 12];
    nd[0] = family_of(ip);
    nd[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    nd[8..10].copy_from_slice(&nud::INCOMPLETE.to_ne_bytes());
    nd[10] = NTF_USE;
    b.bytes(&nd).attr(1, &ip_bytes(ip));
    b.finish()
}

/// Adds (`add`) or deletes a static unicast route in the main table.
pub fn route_request(add: bool, prefix: Cidr, hops: &[KernelHop], seq: u32) -> Vec<u8> {
    let (ty, flags) = if add {
        (msg::RTM_NEWROUTE, NLM_F_CREATE | NLM_F_ACK | 0x100)
    } else {
        (msg::RTM_DELROUTE, NLM_F_ACK)
    };
    let (family, dst): (u8, Vec<u8>) = match prefix {
        Cidr::V4(p) => (AF_INET, p.network().octets().to_vec()),
        Cidr::V6(p) => (AF_INET6, p.network().octets().to_vec()),
    };
    let mut b = Builder::new(ty, flags, seq);
    b.bytes(&[
        family,
        prefix.prefix_len(),
        0,
        0,
        RT_TABLE_MAIN as u8,
        RTPROT_STATIC,
        0,
        RTN_UNICAST,
        0,
        0,
        0,
        0,
    ]);
    b.attr(1, &dst);
    if let [hop] = hops {
        b.attr(4, &hop.ifindex.to_ne_bytes());
        if let Some(g) = hop.gateway {
            b.attr(5, &ip_bytes(g));
        }
    } else if !hops.is_empty() {
        let mut mp = Vec::new();
        for h in hops {
            let gw = h.gateway.map(ip_bytes);
            let len = 8 + gw.as_ref().map_or(0, |g| 4 + g.len());
            mp.extend_from_slice(&(len as u16).to_ne_bytes());
            mp.extend_from_slice(&[0, 0]);
            mp.extend_from_slice(&h.ifindex.to_ne_bytes());
            if let Some(g) = gw {
                mp.extend_from_slice(&((4 + g.len()) as u16).to_ne_bytes());
                mp.extend_from_slice(&5u16.to_ne_bytes());
                mp.extend_from_slice(&g);
            }
        }
        b.attr(9, &mp);
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let ev = parse(ty, b).unwrap();
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
            parse(ty, b).unwrap()
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
        assert!(parse(msg::RTM_NEWNEXTHOP, &[0u8; 8]).is_none());

        let mut body = vec![AF_INET, 16, 0, 0, 254, 4, 0, RTN_UNICAST, 0, 0, 0, 0];
        body.extend(attr(1, &[10, 1, 0, 0]));
        body.extend(attr(30, &10u32.to_ne_bytes()));
        let buf = message(msg::RTM_NEWROUTE, &body);
        let (ty, _, _, b) = messages(&buf).next().unwrap();
        let Some(Event::Route { nh_id, hops, .. }) = parse(ty, b) else {
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
        let ev = parse(ty, b).unwrap();
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
        let ev = parse(msg::RTM_NEWROUTE, &body).unwrap();
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
            parse(msg::RTM_NEWNEIGH, &nb),
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
            parse(msg::RTM_NEWLINK, &link),
            Some(Event::Link {
                add: true,
                ifindex: 9,
                name: "d0".into(),
                mac: Some([2, 0, 0, 0, 0, 1]),
                mtu: Some(1500),
                up: true
            })
        );
        let mut addr = vec![AF_INET6, 64, 0, 0];
        addr.extend_from_slice(&9u32.to_ne_bytes());
        let a: Ipv6Addr = "2001:2::10".parse().unwrap();
        addr.extend(attr(1, &a.octets()));
        assert_eq!(
            parse(msg::RTM_DELADDR, &addr),
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
                let _ = parse(ty, b);
            }
        }
        for cut in 0..body.len() {
            let _ = parse(msg::RTM_NEWROUTE, &body[..cut]);
            let _ = parse(msg::RTM_NEWNEIGH, &body[..cut]);
            let _ = parse(msg::RTM_NEWLINK, &body[..cut]);
            let _ = parse(msg::RTM_NEWADDR, &body[..cut]);
        }
        assert!(parse(msg::RTM_NEWROUTE, &body[..11]).is_none());
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
        }) = parse(ty, body)
        else {
            panic!()
        };
        assert_eq!((p, h), (prefix, hops.to_vec()));
    }
}
