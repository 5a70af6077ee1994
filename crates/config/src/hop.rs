//! The next-hop resolver the config file and the control socket share: a
//! static route's next hop is checked, and its interface found, the same
//! way wherever it is written.
//!
//! A gateway must be of the prefix's family, an address a router can send
//! to, not one of the router's own, and on a connected subnet: of the
//! named interface, or (no interface named) of the interface whose subnet
//! holding it is the longest. An IPv6 link-local gateway is on-link on
//! every IPv6 interface and so needs the interface named. This is the
//! kernel's check for `ip route add ... via GW [dev IF]` without `onlink`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use wire::Cidr;

/// One way out for a static route.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NamedHop {
    /// The interface packets leave by (resolved from the gateway's subnet
    /// when only a gateway was given).
    pub interface: String,
    /// The gateway; `None` for a route directly on the interface (the
    /// destination itself is the neighbour).
    pub via: Option<IpAddr>,
}

impl fmt::Display for NamedHop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.via {
            Some(v) => write!(f, "via {v} dev {}", self.interface),
            None => write!(f, "dev {}", self.interface),
        }
    }
}

/// An interface as the resolver sees it: a name and addresses.
pub trait HopInterface {
    /// Its name.
    fn name(&self) -> &str;
    /// Its addresses with their subnet lengths.
    fn addresses(&self) -> impl Iterator<Item = (IpAddr, u8)> + '_;
}

impl HopInterface for pipeline::Interface {
    fn name(&self) -> &str {
        &self.name
    }

    fn addresses(&self) -> impl Iterator<Item = (IpAddr, u8)> + '_ {
        let v4 = self.ipv4.iter().map(|a| (IpAddr::V4(a.addr), a.prefix_len));
        let v6 = self.ipv6.iter().map(|a| (IpAddr::V6(a.addr), a.prefix_len));
        v4.chain(v6)
    }
}

/// Why a next hop was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HopError {
    /// Neither a gateway nor an interface.
    NoWayOut,
    /// The named interface does not exist.
    UnknownInterface(String),
    /// An IPv4 gateway for an IPv6 prefix or the reverse.
    FamilyMismatch {
        /// The gateway.
        via: IpAddr,
        /// The route's prefix.
        prefix: Cidr,
    },
    /// An address no router sends to (unspecified, loopback, multicast,
    /// class E or broadcast).
    Unusable {
        /// The gateway.
        via: IpAddr,
        /// Why.
        reason: &'static str,
    },
    /// One of the router's own addresses.
    GatewayIsLocal {
        /// The gateway.
        addr: IpAddr,
        /// The interface that has it.
        interface: String,
    },
    /// Not on a subnet of the named interface.
    NotOnInterface {
        /// The gateway.
        addr: IpAddr,
        /// The interface named.
        interface: String,
    },
    /// An IPv6 link-local gateway with no interface named.
    LinkLocalNeedsInterface(IpAddr),
    /// Not on any connected subnet.
    GatewayNotConnected(IpAddr),
}

impl fmt::Display for HopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HopError::NoWayOut => write!(f, "a next hop needs a gateway (via) or an interface"),
            HopError::UnknownInterface(i) => write!(f, "unknown interface {i:?}"),
            HopError::FamilyMismatch { via, prefix } => {
                write!(f, "{via} is not the same address family as {prefix}")
            }
            HopError::Unusable { via, reason } => write!(f, "bad address {via:?}: {reason}"),
            HopError::GatewayIsLocal { addr, interface } => {
                write!(f, "{addr} is the router's own address on {interface:?}")
            }
            HopError::NotOnInterface { addr, interface } => {
                write!(f, "{addr} is not on a subnet of interface {interface:?}")
            }
            HopError::LinkLocalNeedsInterface(a) => {
                write!(f, "link-local gateway {a} needs an interface")
            }
            HopError::GatewayNotConnected(a) => write!(f, "{a} is not on any connected subnet"),
        }
    }
}

impl std::error::Error for HopError {}

/// Why `a` cannot be a gateway or an interface address, if it cannot.
pub fn unusable(a: IpAddr) -> Option<&'static str> {
    match a {
        IpAddr::V4(a) => v4_unusable(a),
        IpAddr::V6(a) => v6_unusable(a),
    }
}

fn v4_unusable(a: Ipv4Addr) -> Option<&'static str> {
    if a.is_unspecified() || a.octets()[0] == 0 {
        Some("addresses in 0.0.0.0/8 cannot be used")
    } else if a.is_loopback() {
        Some("loopback addresses cannot be used")
    } else if a.is_multicast() {
        Some("multicast addresses cannot be used")
    } else if a.is_broadcast() || a.octets()[0] >= 240 {
        Some("class E and broadcast addresses cannot be used")
    } else {
        None
    }
}

fn v6_unusable(a: Ipv6Addr) -> Option<&'static str> {
    if a.is_unspecified() {
        Some("the unspecified address cannot be used")
    } else if a.is_loopback() {
        Some("the loopback address cannot be used")
    } else if a.is_multicast() {
        Some("multicast addresses cannot be used")
    } else {
        None
    }
}

/// Whether `a` is an IPv6 link-local address (fe80::/10).
pub fn is_v6_link_local(a: Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

/// The length of the longest subnet of `i` holding `addr` (IPv6
/// link-local addresses are on-link, length 0, on every interface with an
/// IPv6 address).
fn on_link_len(i: &impl HopInterface, addr: IpAddr) -> Option<u8> {
    let mut best = None;
    let mut has_v6 = false;
    for (a, len) in i.addresses() {
        has_v6 |= a.is_ipv6();
        let holds = match (a, addr) {
            (IpAddr::V4(a), IpAddr::V4(x)) => {
                wire::Ipv4Cidr::new(u32::from(a), len).is_some_and(|c| c.contains(u32::from(x)))
            }
            (IpAddr::V6(a), IpAddr::V6(x)) => {
                wire::Ipv6Cidr::new(u128::from(a), len).is_some_and(|c| c.contains(u128::from(x)))
            }
            _ => false,
        };
        if holds && best.is_none_or(|b| len > b) {
            best = Some(len);
        }
    }
    match addr {
        IpAddr::V6(x) if best.is_none() && has_v6 && is_v6_link_local(x) => Some(0),
        _ => best,
    }
}

/// Checks a static route's next hop toward `prefix`, leaving by `dev`
/// and/or through gateway `via`, over the interfaces `ifs`, and says which
/// interface it leaves by.
pub fn resolve<I: HopInterface>(
    prefix: Cidr,
    dev: Option<&str>,
    via: Option<IpAddr>,
    ifs: &[I],
) -> Result<NamedHop, HopError> {
    let iface = match dev {
        Some(name) => Some(
            ifs.iter()
                .find(|i| i.name() == name)
                .ok_or_else(|| HopError::UnknownInterface(name.to_owned()))?,
        ),
        None => None,
    };
    let Some(via) = via else {
        return iface
            .map(|i| NamedHop {
                interface: i.name().to_owned(),
                via: None,
            })
            .ok_or(HopError::NoWayOut);
    };
    if matches!(
        (prefix, via),
        (Cidr::V4(_), IpAddr::V6(_)) | (Cidr::V6(_), IpAddr::V4(_))
    ) {
        return Err(HopError::FamilyMismatch { via, prefix });
    }
    if let Some(reason) = unusable(via) {
        return Err(HopError::Unusable { via, reason });
    }
    if let Some(owner) = ifs.iter().find(|i| i.addresses().any(|(a, _)| a == via)) {
        return Err(HopError::GatewayIsLocal {
            addr: via,
            interface: owner.name().to_owned(),
        });
    }
    let out = match iface {
        Some(i) if on_link_len(i, via).is_some() => i,
        Some(i) => {
            return Err(HopError::NotOnInterface {
                addr: via,
                interface: i.name().to_owned(),
            });
        }
        None if matches!(via, IpAddr::V6(v) if is_v6_link_local(v)) => {
            return Err(HopError::LinkLocalNeedsInterface(via));
        }
        None => {
            let mut best: Option<(u8, &I)> = None;
            for i in ifs {
                if let Some(len) = on_link_len(i, via)
                    && best.is_none_or(|(b, _)| len > b)
                {
                    best = Some((len, i));
                }
            }
            best.ok_or(HopError::GatewayNotConnected(via))?.1
        }
    };
    Ok(NamedHop {
        interface: out.name().to_owned(),
        via: Some(via),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct If(&'static str, Vec<(IpAddr, u8)>);

    impl HopInterface for If {
        fn name(&self) -> &str {
            self.0
        }
        fn addresses(&self) -> impl Iterator<Item = (IpAddr, u8)> + '_ {
            self.1.iter().copied()
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn ifs() -> Vec<If> {
        vec![
            If("d0", vec![(ip("10.0.0.1"), 8), (ip("2001:db8::1"), 64)]),
            If("d1", vec![(ip("10.1.0.1"), 16)]),
            If("d2", vec![(ip("10.1.2.1"), 24)]),
        ]
    }

    fn hop(prefix: &str, dev: Option<&str>, via: Option<&str>) -> Result<NamedHop, HopError> {
        resolve(prefix.parse().unwrap(), dev, via.map(ip), &ifs())
    }

    #[test]
    fn a_gateway_alone_leaves_by_the_longest_subnet_holding_it() {
        // 10.1.2.9 is in d0's /8, d1's /16 and d2's /24.
        assert_eq!(
            hop("192.0.2.0/24", None, Some("10.1.2.9"))
                .unwrap()
                .interface,
            "d2"
        );
        assert_eq!(
            hop("192.0.2.0/24", None, Some("10.1.3.9"))
                .unwrap()
                .interface,
            "d1"
        );
        assert_eq!(
            hop("192.0.2.0/24", None, Some("10.2.0.9"))
                .unwrap()
                .interface,
            "d0"
        );
        assert_eq!(
            hop("192.0.2.0/24", None, Some("192.0.2.1")),
            Err(HopError::GatewayNotConnected(ip("192.0.2.1")))
        );
    }

    #[test]
    fn a_named_interface_must_hold_the_gateway() {
        assert_eq!(
            hop("192.0.2.0/24", Some("d1"), Some("10.1.2.9"))
                .unwrap()
                .interface,
            "d1"
        );
        assert!(matches!(
            hop("192.0.2.0/24", Some("d2"), Some("10.1.3.9")),
            Err(HopError::NotOnInterface { .. })
        ));
        assert_eq!(
            hop("192.0.2.0/24", Some("d9"), Some("10.1.3.9")),
            Err(HopError::UnknownInterface("d9".into()))
        );
        assert_eq!(
            hop("192.0.2.0/24", Some("d2"), None).unwrap(),
            NamedHop {
                interface: "d2".into(),
                via: None
            }
        );
        assert_eq!(hop("192.0.2.0/24", None, None), Err(HopError::NoWayOut));
    }

    #[test]
    fn gateways_no_router_sends_to_are_refused() {
        assert!(matches!(
            hop("2001:db8:1::/48", None, Some("10.0.0.9")),
            Err(HopError::FamilyMismatch { .. })
        ));
        for bad in [
            "0.1.2.3",
            "127.0.0.1",
            "224.0.0.5",
            "255.255.255.255",
            "240.0.0.1",
        ] {
            assert!(
                matches!(
                    hop("192.0.2.0/24", None, Some(bad)),
                    Err(HopError::Unusable { .. })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            hop("192.0.2.0/24", None, Some("10.1.0.1")),
            Err(HopError::GatewayIsLocal { interface, .. }) if interface == "d1"
        ));
    }

    #[test]
    fn an_ipv6_link_local_gateway_needs_its_interface() {
        assert_eq!(
            hop("2001:db8:1::/48", None, Some("fe80::1")),
            Err(HopError::LinkLocalNeedsInterface(ip("fe80::1")))
        );
        assert_eq!(
            hop("2001:db8:1::/48", Some("d0"), Some("fe80::1"))
                .unwrap()
                .interface,
            "d0"
        );
        // d1 has no IPv6 address: not on-link there.
        assert!(matches!(
            hop("2001:db8:1::/48", Some("d1"), Some("fe80::1")),
            Err(HopError::NotOnInterface { .. })
        ));
    }
}
