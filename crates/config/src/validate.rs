//! From the file as written ([`crate::raw`]) to a validated [`Config`]:
//! every check runs before anything is built, every problem is reported
//! with its line and field.

use crate::Config;
use crate::error::{Diagnostic, ErrorKind, LineIndex};
use crate::hop::{HopError, HopInterface, unusable};
use crate::model::{
    FirewallConfig, Interface, Ipv4IfAddr, Ipv6IfAddr, MacAddr, Neighbour, NextHop, Route,
    is_v6_link_local,
};
use crate::raw::{OneOrMany, RawConfig, RawFirewall, RawInterface, RawRoute, S};
use std::collections::HashMap;
use std::net::IpAddr;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use wire::Cidr;

/// Smallest MTU an IPv4 interface may have (RFC 791: every host must take 68).
pub const MIN_MTU: u32 = 68;
/// Smallest MTU an IPv6 interface may have (RFC 8200 §5).
pub const MIN_MTU_V6: u32 = 1280;
/// Largest MTU accepted: the engines' frame buffers hold frames of 1,984
/// bytes (`netio::MAX_FRAME`), which is this MTU with an Ethernet header
/// and two VLAN tags. Jumbo frames are not carried, so not configurable.
pub const MAX_MTU: u32 = 1962;
/// MTU when none is given.
pub const DEFAULT_MTU: u16 = 1500;
/// Most equal-cost next hops one route may have.
pub const MAX_NEXT_HOPS: usize = 16;

struct Ctx<'a> {
    file: &'a str,
    lines: LineIndex<'a>,
    diags: Vec<Diagnostic>,
}

impl Ctx<'_> {
    fn err(&mut self, span: Range<usize>, field: impl Into<String>, kind: ErrorKind) {
        let (line, column) = self.lines.line_col(span.start);
        self.diags.push(Diagnostic {
            file: self.file.to_owned(),
            line,
            column,
            field: field.into(),
            kind,
        });
    }
    fn line(&self, span: Range<usize>) -> usize {
        self.lines.line(span.start)
    }
}

/// An interface address as checked, with where it was written.
struct AddrSite {
    interface: String,
    addr: IpAddr,
    prefix_len: u8,
    span: Range<usize>,
    field: String,
}

impl AddrSite {
    fn subnet(&self) -> Cidr {
        match self.addr {
            IpAddr::V4(a) => Cidr::V4(
                Ipv4IfAddr {
                    addr: a,
                    prefix_len: self.prefix_len,
                }
                .subnet(),
            ),
            IpAddr::V6(a) => Cidr::V6(
                Ipv6IfAddr {
                    addr: a,
                    prefix_len: self.prefix_len,
                }
                .subnet(),
            ),
        }
    }
}

fn valid_ifname(s: &str) -> bool {
    (1..=15).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

fn parse_mac(ctx: &mut Ctx<'_>, v: &S<String>, field: String) -> Option<MacAddr> {
    let reason = match v.get_ref().parse::<MacAddr>() {
        Ok(m) if m.is_multicast() => "a group (multicast) address cannot be an interface's",
        Ok(m) if m.is_zero() => "the all-zero address cannot be used",
        Ok(m) => return Some(m),
        Err(_) => "expected six hex octets like 02:00:00:00:00:01",
    };
    ctx.err(
        v.span(),
        field,
        ErrorKind::BadMac {
            value: v.get_ref().clone(),
            reason,
        },
    );
    None
}

/// Parses `ADDR/LEN` as an interface address (host bits set, as on Linux).
fn parse_if_addr(ctx: &mut Ctx<'_>, v: &S<String>, field: &str) -> Option<(IpAddr, u8)> {
    let text = v.get_ref().trim();
    let bad = |reason: &str| ErrorKind::BadPrefix {
        value: v.get_ref().clone(),
        reason: reason.to_owned(),
    };
    let Some((a, l)) = text.split_once('/') else {
        ctx.err(
            v.span(),
            field,
            bad("an interface address needs a prefix length (ADDRESS/LENGTH)"),
        );
        return None;
    };
    let Ok(addr) = a.parse::<IpAddr>() else {
        ctx.err(v.span(), field, bad("the address does not parse"));
        return None;
    };
    let width = if addr.is_ipv4() { 32 } else { 128 };
    let len = match l.parse::<u8>() {
        Ok(n) if (1..=width).contains(&n) => n,
        _ => {
            ctx.err(
                v.span(),
                field,
                bad(&format!("prefix length must be 1..={width}")),
            );
            return None;
        }
    };
    let reason = match addr {
        IpAddr::V4(a) => unusable(IpAddr::V4(a)).or_else(|| {
            let host = !wire::Ipv4Cidr::mask(len) & u32::from(a);
            if len <= 30 && host == 0 {
                Some("the subnet's network address")
            } else if len <= 30 && host == !wire::Ipv4Cidr::mask(len) {
                Some("the subnet's broadcast address")
            } else {
                None
            }
        }),
        IpAddr::V6(a) => unusable(IpAddr::V6(a)),
    };
    if let Some(reason) = reason {
        ctx.err(
            v.span(),
            field,
            ErrorKind::BadAddress {
                value: v.get_ref().clone(),
                reason,
            },
        );
        return None;
    }
    Some((addr, len))
}

fn check_mtu(
    ctx: &mut Ctx<'_>,
    mtu: Option<&S<i64>>,
    default: u16,
    max: u32,
    field: String,
) -> u16 {
    match mtu {
        None => default,
        Some(m) => {
            let v = *m.get_ref();
            if v < i64::from(MIN_MTU) || v > i64::from(max) {
                ctx.err(
                    m.span(),
                    field,
                    ErrorKind::MtuOutOfRange {
                        mtu: v,
                        min: MIN_MTU,
                        max,
                    },
                );
                default.min(max as u16)
            } else {
                v as u16
            }
        }
    }
}

pub(crate) fn validate(
    file: &str,
    text: &str,
    raw: RawConfig,
    dir: &Path,
    root: Option<&Path>,
) -> Result<Config, Vec<Diagnostic>> {
    let mut ctx = Ctx {
        file,
        lines: LineIndex::new(text),
        diags: Vec::new(),
    };
    let interfaces = interfaces(&mut ctx, &raw.interfaces);
    let routes = routes(&mut ctx, &raw.routes, &interfaces);
    let neighbours = neighbours(&mut ctx, &raw, &interfaces);
    let firewall = raw
        .firewall
        .as_ref()
        .and_then(|f| firewall_section(&mut ctx, text, f, &interfaces, dir, root));
    if !ctx.diags.is_empty() {
        ctx.diags.sort_by_key(|d| (d.line, d.column));
        return Err(ctx.diags);
    }
    Ok(Config {
        file: file.to_owned(),
        interfaces,
        routes,
        neighbours,
        firewall,
        workers: raw.workers,
        io: raw.io,
    })
}

fn interfaces(ctx: &mut Ctx<'_>, raw: &[S<RawInterface>]) -> Vec<Interface> {
    let mut out: Vec<Interface> = Vec::new();
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut ports: HashMap<String, String> = HashMap::new();
    let mut sites: Vec<AddrSite> = Vec::new();

    let mut check_name = |ctx: &mut Ctx<'_>, name: &str, span: Range<usize>, field: String| {
        if !valid_ifname(name) {
            ctx.err(span, field, ErrorKind::BadName(name.to_owned()));
        } else if let Some(&first_line) = names.get(name) {
            ctx.err(
                span,
                field,
                ErrorKind::DuplicateName {
                    name: name.to_owned(),
                    first_line,
                },
            );
        } else {
            names.insert(name.to_owned(), ctx.line(span));
        }
    };

    for (i, ri) in raw.iter().enumerate() {
        let ri = ri.get_ref();
        let base = format!("interfaces[{i}]");
        let name = ri.name.get_ref().clone();
        check_name(ctx, &name, ri.name.span(), format!("{base}.name"));
        let (port, port_span, port_field) = match &ri.port {
            Some(p) => (p.get_ref().clone(), p.span(), format!("{base}.port")),
            None => (name.clone(), ri.name.span(), format!("{base}.name")),
        };
        if ri.port.is_some() && !valid_ifname(&port) {
            ctx.err(
                port_span.clone(),
                port_field.clone(),
                ErrorKind::BadName(port.clone()),
            );
        }
        if let Some(other) = ports.get(&port) {
            ctx.err(
                port_span,
                port_field,
                ErrorKind::DuplicatePort {
                    port: port.clone(),
                    other: other.clone(),
                },
            );
        } else {
            ports.insert(port.clone(), name.clone());
        }
        let mac = parse_mac(ctx, &ri.mac, format!("{base}.mac")).unwrap_or(MacAddr([0; 6]));
        let (ipv4, ipv6) = addresses(ctx, &ri.addresses, &name, &base, &mut sites);
        let max = MAX_MTU;
        let mtu = check_mtu(
            ctx,
            ri.mtu.as_ref(),
            DEFAULT_MTU,
            max,
            format!("{base}.mtu"),
        );
        check_v6_mtu(ctx, &ri.mtu, mtu, !ipv6.is_empty(), format!("{base}.mtu"));
        out.push(Interface {
            name: name.clone(),
            port: port.clone(),
            mac,
            mtu,
            vlan: None,
            parent: None,
            ipv4,
            ipv6,
        });

        let mut vlan_ids: HashMap<u16, String> = HashMap::new();
        for (k, rv) in ri.vlans.iter().enumerate() {
            let rv = rv.get_ref();
            let vbase = format!("{base}.vlans[{k}]");
            let idv = *rv.id.get_ref();
            let id = if (1..=4094).contains(&idv) {
                idv as u16
            } else {
                ctx.err(
                    rv.id.span(),
                    format!("{vbase}.id"),
                    ErrorKind::BadVlanId(idv),
                );
                0
            };
            let vname = match &rv.name {
                Some(n) => {
                    check_name(ctx, n.get_ref(), n.span(), format!("{vbase}.name"));
                    n.get_ref().clone()
                }
                None => {
                    let n = format!("{name}.{id}");
                    check_name(ctx, &n, rv.id.span(), format!("{vbase}.id"));
                    n
                }
            };
            if id != 0 {
                if let Some(other) = vlan_ids.get(&id) {
                    ctx.err(
                        rv.id.span(),
                        format!("{vbase}.id"),
                        ErrorKind::DuplicateVlan {
                            id,
                            other: other.clone(),
                        },
                    );
                } else {
                    vlan_ids.insert(id, vname.clone());
                }
            }
            let (ipv4, ipv6) = addresses(ctx, &rv.addresses, &vname, &vbase, &mut sites);
            // A sub-interface's packets cross the parent port: its MTU cannot exceed the parent's.
            let vmtu = check_mtu(
                ctx,
                rv.mtu.as_ref(),
                mtu,
                u32::from(mtu),
                format!("{vbase}.mtu"),
            );
            check_v6_mtu(ctx, &rv.mtu, vmtu, !ipv6.is_empty(), format!("{vbase}.mtu"));
            out.push(Interface {
                name: vname,
                port: port.clone(),
                mac,
                mtu: vmtu,
                vlan: Some(id),
                parent: Some(name.clone()),
                ipv4,
                ipv6,
            });
        }
    }
    check_address_conflicts(ctx, &sites);
    out
}

fn check_v6_mtu(ctx: &mut Ctx<'_>, raw: &Option<S<i64>>, mtu: u16, has_v6: bool, field: String) {
    if let Some(m) = raw
        && has_v6
        && u32::from(mtu) < MIN_MTU_V6
    {
        ctx.err(
            m.span(),
            field,
            ErrorKind::MtuOutOfRange {
                mtu: i64::from(mtu),
                min: MIN_MTU_V6,
                max: MAX_MTU,
            },
        );
    }
}

fn addresses(
    ctx: &mut Ctx<'_>,
    raw: &[S<String>],
    ifname: &str,
    base: &str,
    sites: &mut Vec<AddrSite>,
) -> (Vec<Ipv4IfAddr>, Vec<Ipv6IfAddr>) {
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for (j, a) in raw.iter().enumerate() {
        let field = format!("{base}.addresses[{j}]");
        if let Some((addr, prefix_len)) = parse_if_addr(ctx, a, &field) {
            match addr {
                IpAddr::V4(addr) => v4.push(Ipv4IfAddr { addr, prefix_len }),
                IpAddr::V6(addr) => v6.push(Ipv6IfAddr { addr, prefix_len }),
            }
            sites.push(AddrSite {
                interface: ifname.to_owned(),
                addr,
                prefix_len,
                span: a.span(),
                field,
            });
        }
    }
    (v4, v6)
}

/// Every interface address is unique, and connected subnets do not overlap
/// (IPv6 link-local subnets are per-link and may repeat across interfaces).
fn check_address_conflicts(ctx: &mut Ctx<'_>, sites: &[AddrSite]) {
    for (n, s) in sites.iter().enumerate() {
        for earlier in &sites[..n] {
            if earlier.addr == s.addr {
                ctx.err(
                    s.span.clone(),
                    s.field.clone(),
                    ErrorKind::DuplicateAddress {
                        addr: s.addr.to_string(),
                        other: earlier.interface.clone(),
                    },
                );
                break;
            }
            let link_local = |a: IpAddr| matches!(a, IpAddr::V6(v) if is_v6_link_local(v));
            if link_local(s.addr) && link_local(earlier.addr) && s.interface != earlier.interface {
                continue;
            }
            let (a, b) = (s.subnet(), earlier.subnet());
            let overlap = match (a, b) {
                (Cidr::V4(a), Cidr::V4(b)) => a.covers(&b) || b.covers(&a),
                (Cidr::V6(a), Cidr::V6(b)) => a.covers(&b) || b.covers(&a),
                _ => false,
            };
            if overlap {
                ctx.err(
                    s.span.clone(),
                    s.field.clone(),
                    ErrorKind::OverlappingSubnet {
                        subnet: a.to_string(),
                        other_subnet: b.to_string(),
                        other: earlier.interface.clone(),
                    },
                );
                break;
            }
        }
    }
}

/// A next hop as written: gateway and/or interface, with their spans.
struct HopSite<'a> {
    via: Option<(&'a str, Range<usize>, String)>,
    interface: Option<(&'a str, Range<usize>, String)>,
}

fn routes(ctx: &mut Ctx<'_>, raw: &[S<RawRoute>], ifs: &[Interface]) -> Vec<Route> {
    let mut out = Vec::new();
    let mut seen: HashMap<Cidr, usize> = HashMap::new();
    for (i, rr) in raw.iter().enumerate() {
        let route_span = rr.span();
        let rr = rr.get_ref();
        let base = format!("routes[{i}]");
        let pfield = format!("{base}.prefix");
        let prefix = match rr.prefix.get_ref().parse::<Cidr>() {
            Ok(p) => p,
            Err(e) => {
                ctx.err(
                    rr.prefix.span(),
                    pfield,
                    ErrorKind::BadPrefix {
                        value: rr.prefix.get_ref().clone(),
                        reason: e.to_string(),
                    },
                );
                continue;
            }
        };
        if let Some(&first_line) = seen.get(&prefix) {
            ctx.err(
                rr.prefix.span(),
                pfield,
                ErrorKind::DuplicateRoute {
                    prefix: prefix.to_string(),
                    first_line,
                },
            );
        } else {
            seen.insert(prefix, ctx.line(rr.prefix.span()));
        }

        let mut hops: Vec<HopSite<'_>> = Vec::new();
        let has_top = rr.via.is_some() || rr.interface.is_some();
        if let Some(nh) = &rr.next_hops {
            if has_top {
                ctx.err(
                    nh.span(),
                    format!("{base}.next_hops"),
                    ErrorKind::MixedNextHops,
                );
                continue;
            }
            for (k, h) in nh.get_ref().iter().enumerate() {
                let h = h.get_ref();
                let hb = format!("{base}.next_hops[{k}]");
                hops.push(HopSite {
                    via: h
                        .via
                        .as_ref()
                        .map(|v| (v.get_ref().as_str(), v.span(), format!("{hb}.via"))),
                    interface: h
                        .interface
                        .as_ref()
                        .map(|v| (v.get_ref().as_str(), v.span(), format!("{hb}.interface"))),
                });
                if h.via.is_none() && h.interface.is_none() {
                    ctx.err(nh.span(), hb, ErrorKind::NoNextHop);
                }
            }
        } else {
            let iface = rr
                .interface
                .as_ref()
                .map(|v| (v.get_ref().as_str(), v.span(), format!("{base}.interface")));
            match &rr.via {
                None => {
                    if iface.is_some() {
                        hops.push(HopSite {
                            via: None,
                            interface: iface,
                        });
                    }
                }
                Some(v) => match v.get_ref() {
                    OneOrMany::One(s) => hops.push(HopSite {
                        via: Some((s.as_str(), v.span(), format!("{base}.via"))),
                        interface: iface,
                    }),
                    OneOrMany::Many(list) => {
                        for (k, s) in list.iter().enumerate() {
                            hops.push(HopSite {
                                via: Some((
                                    s.get_ref().as_str(),
                                    s.span(),
                                    format!("{base}.via[{k}]"),
                                )),
                                interface: iface.clone(),
                            });
                        }
                    }
                },
            }
        }
        if hops.is_empty() {
            ctx.err(route_span, base, ErrorKind::NoNextHop);
            continue;
        }
        if hops.len() > MAX_NEXT_HOPS {
            ctx.err(
                route_span,
                base,
                ErrorKind::TooManyNextHops {
                    count: hops.len(),
                    max: MAX_NEXT_HOPS,
                },
            );
            continue;
        }
        let mut next_hops: Vec<NextHop> = Vec::new();
        let mut ok = true;
        for h in hops {
            let span = h
                .via
                .as_ref()
                .map(|v| (v.1.clone(), v.2.clone()))
                .or_else(|| h.interface.as_ref().map(|v| (v.1.clone(), v.2.clone())));
            match resolve_hop(ctx, &prefix, h, ifs) {
                Some(nh) => {
                    if next_hops.contains(&nh) {
                        if let Some((span, field)) = span {
                            ctx.err(span, field, ErrorKind::DuplicateNextHop(nh.to_string()));
                        }
                        ok = false;
                    } else {
                        next_hops.push(nh);
                    }
                }
                None => ok = false,
            }
        }
        if ok {
            out.push(Route { prefix, next_hops });
        }
    }
    out
}

fn resolve_hop(
    ctx: &mut Ctx<'_>,
    prefix: &Cidr,
    h: HopSite<'_>,
    ifs: &[Interface],
) -> Option<NextHop> {
    let via = match &h.via {
        Some((text, span, field)) => match text.trim().parse::<IpAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                ctx.err(
                    span.clone(),
                    field.clone(),
                    ErrorKind::BadAddress {
                        value: (*text).to_owned(),
                        reason: "not an IP address",
                    },
                );
                return None;
            }
        },
        None => None,
    };
    let dev = h.interface.as_ref().map(|(name, ..)| *name);
    let err = match crate::hop::resolve(*prefix, dev, via, ifs) {
        Ok(hop) => return Some(hop),
        Err(e) => e,
    };
    let at = |site: &Option<(&str, Range<usize>, String)>| {
        site.as_ref()
            .map(|(_, span, field)| (span.clone(), field.clone()))
    };
    let (kind, site) = match err {
        HopError::UnknownInterface(name) => (ErrorKind::UnknownInterface(name), at(&h.interface)),
        // Every hop site has a gateway or an interface.
        HopError::NoWayOut => (ErrorKind::NoNextHop, at(&h.interface)),
        HopError::FamilyMismatch { via, prefix } => (
            ErrorKind::FamilyMismatch {
                via: via.to_string(),
                prefix: prefix.to_string(),
            },
            at(&h.via),
        ),
        HopError::Unusable { via: _, reason } => (
            ErrorKind::BadAddress {
                value: h.via.as_ref().map_or("", |v| v.0).to_owned(),
                reason,
            },
            at(&h.via),
        ),
        HopError::GatewayIsLocal { addr, interface } => (
            ErrorKind::GatewayIsLocal {
                addr: addr.to_string(),
                interface,
            },
            at(&h.via),
        ),
        HopError::NotOnInterface { addr, interface } => (
            ErrorKind::NotOnInterface {
                addr: addr.to_string(),
                interface,
            },
            at(&h.via),
        ),
        HopError::LinkLocalNeedsInterface(a) => (
            ErrorKind::LinkLocalNeedsInterface(a.to_string()),
            at(&h.via),
        ),
        HopError::GatewayNotConnected(a) => {
            (ErrorKind::GatewayNotConnected(a.to_string()), at(&h.via))
        }
    };
    if let Some((span, field)) = site.or_else(|| at(&h.via)).or_else(|| at(&h.interface)) {
        ctx.err(span, field, kind);
    }
    None
}

impl HopInterface for Interface {
    fn name(&self) -> &str {
        &self.name
    }

    fn addresses(&self) -> impl Iterator<Item = (IpAddr, u8)> + '_ {
        let v4 = self.ipv4.iter().map(|a| (IpAddr::V4(a.addr), a.prefix_len));
        let v6 = self.ipv6.iter().map(|a| (IpAddr::V6(a.addr), a.prefix_len));
        v4.chain(v6)
    }
}

fn neighbours(ctx: &mut Ctx<'_>, raw: &RawConfig, ifs: &[Interface]) -> Vec<Neighbour> {
    let mut out = Vec::new();
    let mut seen: HashMap<(String, IpAddr), usize> = HashMap::new();
    for (i, rn) in raw.neighbours.iter().enumerate() {
        let rn = rn.get_ref();
        let base = format!("neighbours[{i}]");
        let name = rn.interface.get_ref();
        let iface = ifs.iter().find(|x| &x.name == name);
        if iface.is_none() {
            ctx.err(
                rn.interface.span(),
                format!("{base}.interface"),
                ErrorKind::UnknownInterface(name.clone()),
            );
        }
        let ip = match rn.ip.get_ref().trim().parse::<IpAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                ctx.err(
                    rn.ip.span(),
                    format!("{base}.ip"),
                    ErrorKind::BadAddress {
                        value: rn.ip.get_ref().clone(),
                        reason: "not an IP address",
                    },
                );
                None
            }
        };
        let mac = match rn.mac.get_ref().parse::<MacAddr>() {
            Ok(m) if !m.is_multicast() && !m.is_zero() => Some(m),
            Ok(_) => {
                ctx.err(
                    rn.mac.span(),
                    format!("{base}.mac"),
                    ErrorKind::BadMac {
                        value: rn.mac.get_ref().clone(),
                        reason: "a neighbour's MAC must be a non-zero unicast address",
                    },
                );
                None
            }
            Err(_) => {
                ctx.err(
                    rn.mac.span(),
                    format!("{base}.mac"),
                    ErrorKind::BadMac {
                        value: rn.mac.get_ref().clone(),
                        reason: "expected six hex octets like 02:00:00:00:00:01",
                    },
                );
                None
            }
        };
        let (Some(iface), Some(ip), Some(mac)) = (iface, ip, mac) else {
            continue;
        };
        if !iface.is_on_link(ip) {
            ctx.err(
                rn.ip.span(),
                format!("{base}.ip"),
                ErrorKind::NotOnInterface {
                    addr: ip.to_string(),
                    interface: iface.name.clone(),
                },
            );
            continue;
        }
        if iface.has_address(ip) {
            ctx.err(
                rn.ip.span(),
                format!("{base}.ip"),
                ErrorKind::GatewayIsLocal {
                    addr: ip.to_string(),
                    interface: iface.name.clone(),
                },
            );
            continue;
        }
        let key = (iface.name.clone(), ip);
        if let Some(&first_line) = seen.get(&key) {
            ctx.err(
                rn.ip.span(),
                format!("{base}.ip"),
                ErrorKind::DuplicateNeighbour {
                    addr: ip.to_string(),
                    interface: iface.name.clone(),
                    first_line,
                },
            );
            continue;
        }
        seen.insert(key, ctx.line(rn.ip.span()));
        out.push(Neighbour {
            interface: iface.name.clone(),
            ip,
            mac,
        });
    }
    out
}

/// Where the lines of a rule text are: in the config (a TOML string whose
/// lines map one to one onto the file's), or in a rules file.
enum RuleSite<'a> {
    /// Inline: rule line n is config line `first + n - 1`; `None` when the
    /// string's escapes break the correspondence (errors then point at
    /// the `rules` key and give the rule's own line number).
    Inline {
        first: Option<usize>,
        span: Range<usize>,
    },
    /// A rules file, named as in errors.
    File(&'a str),
}

/// The config line of the first line of a TOML string's value, when every
/// value line is one source line (no escaped newlines or line-ending
/// backslashes).
fn string_first_line(
    text: &str,
    span: &Range<usize>,
    value: &str,
    lines: &LineIndex<'_>,
) -> Option<usize> {
    let raw = text.get(span.clone())?;
    let start = lines.line(span.start);
    let (body, multiline) = if raw.starts_with("\"\"\"") || raw.starts_with("'''") {
        (raw.get(3..)?, true)
    } else {
        (raw.get(1..)?, false)
    };
    // TOML drops a newline right after the opening delimiter.
    let trimmed = multiline && (body.starts_with('\n') || body.starts_with("\r\n"));
    let raw_newlines = body.matches('\n').count();
    let value_newlines = value.matches('\n').count();
    (raw_newlines == value_newlines + usize::from(trimmed)).then_some(start + usize::from(trimmed))
}

fn firewall_error(
    ctx: &mut Ctx<'_>,
    site: &RuleSite<'_>,
    line: usize,
    field: &str,
    message: String,
) {
    match site {
        RuleSite::Inline {
            first: Some(first),
            span,
        } => {
            let column = ctx.lines.line_col(span.start).1;
            ctx.diags.push(Diagnostic {
                file: ctx.file.to_owned(),
                line: first + line.max(1) - 1,
                column,
                field: field.to_owned(),
                kind: ErrorKind::Firewall(message),
            });
        }
        RuleSite::Inline { first: None, span } => ctx.err(
            span.clone(),
            field,
            ErrorKind::Firewall(format!("line {line} of the rules: {message}")),
        ),
        RuleSite::File(name) => ctx.diags.push(Diagnostic {
            file: (*name).to_owned(),
            line,
            column: 1,
            field: field.to_owned(),
            kind: ErrorKind::Firewall(message),
        }),
    }
}

/// `[firewall]`: reads the rules (inline or from a file next to the
/// config), parses them, checks that every interface they name exists and
/// compiles them against the config's interface ids (file order).
fn firewall_section(
    ctx: &mut Ctx<'_>,
    text: &str,
    raw: &S<RawFirewall>,
    interfaces: &[Interface],
    dir: &Path,
    root: Option<&Path>,
) -> Option<FirewallConfig> {
    let f = raw.get_ref();
    let (rules_text, source, site, field) = match (&f.rules, &f.file) {
        (Some(r), None) => {
            let first = string_first_line(text, &r.span(), r.get_ref(), &ctx.lines);
            (
                r.get_ref().clone(),
                format!("{} [firewall]", ctx.file),
                RuleSite::Inline {
                    first,
                    span: r.span(),
                },
                "firewall.rules",
            )
        }
        (None, Some(p)) => {
            let path = dir.join(p.get_ref());
            let read = match root {
                Some(root) => crate::file::confined(&path, root)
                    .and_then(|_| crate::file::read_text_file(&path)),
                None => crate::file::read_text_file(&path),
            };
            match read {
                Ok(t) => (
                    t,
                    p.get_ref().clone(),
                    RuleSite::File(p.get_ref()),
                    "firewall.file",
                ),
                Err(e) => {
                    ctx.err(
                        p.span(),
                        "firewall.file",
                        ErrorKind::FirewallFile {
                            path: path.display().to_string(),
                            reason: e.to_string(),
                        },
                    );
                    return None;
                }
            }
        }
        _ => {
            ctx.err(raw.span(), "firewall", ErrorKind::FirewallSource);
            return None;
        }
    };
    let set = match firewall::parse_rules(&rules_text, &source) {
        Ok(s) => s,
        Err(e) => {
            firewall_error(ctx, &site, e.line, field, e.message);
            return None;
        }
    };
    let before = ctx.diags.len();
    for chain in firewall::Chain::ALL {
        for rule in &set.chain(chain).rules {
            for m in [&rule.iif, &rule.oif].into_iter().flatten() {
                for name in &m.names {
                    if !interfaces.iter().any(|i| i.name == *name) {
                        firewall_error(
                            ctx,
                            &site,
                            rule.line,
                            field,
                            ErrorKind::UnknownInterface(name.clone()).to_string(),
                        );
                    }
                }
            }
        }
    }
    if ctx.diags.len() > before {
        return None;
    }
    let ids: firewall::InterfaceMap = interfaces
        .iter()
        .enumerate()
        .map(|(i, iface)| (iface.name.clone(), i as firewall::IfaceId))
        .collect();
    match firewall::Firewall::compile(&set, &ids) {
        Ok(fw) => Some(FirewallConfig {
            source,
            rules: set,
            compiled: Arc::new(fw),
        }),
        Err(e) => {
            ctx.err(raw.span(), "firewall", ErrorKind::Firewall(e.to_string()));
            None
        }
    }
}
