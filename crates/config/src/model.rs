//! The validated configuration: every reference resolved, every address
//! checked. Only [`crate::Config::load`] / [`crate::Config::parse`] build one.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::sync::Arc;
use wire::{Cidr, Ipv4Cidr, Ipv6Cidr};

/// An Ethernet MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// True for group (multicast and broadcast) addresses.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }
    /// True for 00:00:00:00:00:00.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 6]
    }
}

/// Why a MAC address string was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseMacError;

impl fmt::Display for ParseMacError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("expected six hex octets separated by ':' or '-'")
    }
}

impl std::error::Error for ParseMacError {}

impl FromStr for MacAddr {
    type Err = ParseMacError;
    /// Parses `02:00:00:00:00:01` (or with `-`).
    fn from_str(s: &str) -> Result<Self, ParseMacError> {
        let mut out = [0u8; 6];
        let mut n = 0;
        for part in s.split([':', '-']) {
            if n == 6 || part.is_empty() || part.len() > 2 {
                return Err(ParseMacError);
            }
            out[n] = u8::from_str_radix(part, 16).map_err(|_| ParseMacError)?;
            n += 1;
        }
        if n != 6 {
            return Err(ParseMacError);
        }
        Ok(MacAddr(out))
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// An IPv4 interface address: the router's address and its subnet length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4IfAddr {
    /// The router's address.
    pub addr: Ipv4Addr,
    /// Length of the connected subnet.
    pub prefix_len: u8,
}

impl Ipv4IfAddr {
    /// The connected subnet.
    pub fn subnet(&self) -> Ipv4Cidr {
        Ipv4Cidr::new(u32::from(self.addr), self.prefix_len).unwrap_or_else(|| {
            Ipv4Cidr::new(u32::from(self.addr), 32).expect("32 is a valid length")
        })
    }
}

impl fmt::Display for Ipv4IfAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

/// An IPv6 interface address: the router's address and its subnet length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6IfAddr {
    /// The router's address.
    pub addr: Ipv6Addr,
    /// Length of the connected subnet.
    pub prefix_len: u8,
}

impl Ipv6IfAddr {
    /// The connected subnet.
    pub fn subnet(&self) -> Ipv6Cidr {
        Ipv6Cidr::new(u128::from(self.addr), self.prefix_len).unwrap_or_else(|| {
            Ipv6Cidr::new(u128::from(self.addr), 128).expect("128 is a valid length")
        })
    }
}

impl fmt::Display for Ipv6IfAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

/// A logical interface: a port, or a VLAN sub-interface of a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Unique name (`d0`, `d0.100`).
    pub name: String,
    /// Kernel interface the frames come from and go to (the parent's for a
    /// VLAN sub-interface).
    pub port: String,
    /// The router's MAC on this interface (the parent's for a VLAN).
    pub mac: MacAddr,
    /// Largest IP packet sent out of this interface, in bytes.
    pub mtu: u16,
    /// 802.1Q VLAN id, for a sub-interface.
    pub vlan: Option<u16>,
    /// The parent interface's name, for a sub-interface.
    pub parent: Option<String>,
    /// IPv4 addresses, in file order.
    pub ipv4: Vec<Ipv4IfAddr>,
    /// IPv6 addresses, in file order.
    pub ipv6: Vec<Ipv6IfAddr>,
}

impl Interface {
    /// Whether `addr` lies in one of this interface's connected subnets
    /// (IPv6 link-local addresses are on-link on every IPv6 interface).
    pub fn is_on_link(&self, addr: IpAddr) -> bool {
        match addr {
            IpAddr::V4(a) => self.ipv4.iter().any(|i| i.subnet().contains(a.into())),
            IpAddr::V6(a) => {
                (is_v6_link_local(a) && !self.ipv6.is_empty())
                    || self.ipv6.iter().any(|i| i.subnet().contains(a.into()))
            }
        }
    }

    /// Whether `addr` is one of the router's own addresses here.
    pub fn has_address(&self, addr: IpAddr) -> bool {
        match addr {
            IpAddr::V4(a) => self.ipv4.iter().any(|i| i.addr == a),
            IpAddr::V6(a) => self.ipv6.iter().any(|i| i.addr == a),
        }
    }
}

/// One way out for a route, as the next-hop resolver ([`crate::hop`]) placed it.
pub use crate::hop::NamedHop as NextHop;

/// A static route; several next hops share the traffic (ECMP).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Destination prefix.
    pub prefix: Cidr,
    /// Equal-cost next hops, at least one, all of the prefix's family.
    pub next_hops: Vec<NextHop>,
}

/// A static neighbour (ARP / NDP) entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    /// The interface it is reached on.
    pub interface: String,
    /// Its IP address.
    pub ip: IpAddr,
    /// Its MAC.
    pub mac: MacAddr,
}

/// The `[firewall]` section: the parsed rule set and its compiled form
/// (interface names resolved to the ids of [`crate::Config::interfaces`],
/// in file order).
#[derive(Debug, Clone)]
pub struct FirewallConfig {
    /// Where the rules came from: `router.toml [firewall]` or the rules file.
    pub source: String,
    /// The rules as parsed.
    pub rules: firewall::RuleSet,
    /// The rules compiled against the config's interfaces.
    pub compiled: Arc<firewall::Firewall>,
}

impl PartialEq for FirewallConfig {
    /// Same source and same rules (the compiled form follows from them).
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source && self.rules == other.rules
    }
}

pub(crate) fn is_v6_link_local(a: Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_parse_and_display() {
        let m: MacAddr = "02:00:0A:0b:0c:0d".parse().unwrap();
        assert_eq!(m.0, [2, 0, 0x0a, 0x0b, 0x0c, 0x0d]);
        assert_eq!(m.to_string(), "02:00:0a:0b:0c:0d");
        assert_eq!("02-00-00-00-00-01".parse::<MacAddr>().unwrap().0[5], 1);
        for bad in [
            "",
            "02:00:00:00:00",
            "02:00:00:00:00:00:00",
            "02:00:00:00:00:0g",
            "020:00:00:00:00:00",
            "02::00:00:00:00",
        ] {
            assert_eq!(bad.parse::<MacAddr>(), Err(ParseMacError), "{bad}");
        }
        assert!(
            "01:00:5e:00:00:01"
                .parse::<MacAddr>()
                .unwrap()
                .is_multicast()
        );
    }

    #[test]
    fn on_link_checks_subnets() {
        let i = Interface {
            name: "d0".into(),
            port: "d0".into(),
            mac: MacAddr([2, 0, 0, 0, 0, 1]),
            mtu: 1500,
            vlan: None,
            parent: None,
            ipv4: vec![Ipv4IfAddr {
                addr: "10.0.0.1".parse().unwrap(),
                prefix_len: 24,
            }],
            ipv6: vec![Ipv6IfAddr {
                addr: "2001:db8::1".parse().unwrap(),
                prefix_len: 64,
            }],
        };
        assert!(i.is_on_link("10.0.0.200".parse().unwrap()));
        assert!(!i.is_on_link("10.0.1.1".parse().unwrap()));
        assert!(i.is_on_link("2001:db8::99".parse().unwrap()));
        assert!(i.is_on_link("fe80::1".parse().unwrap()));
        assert!(!i.is_on_link("2001:db9::1".parse().unwrap()));
        assert!(i.has_address("10.0.0.1".parse().unwrap()));
    }
}
