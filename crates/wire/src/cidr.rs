//! IPv4 and IPv6 prefixes (`198.18.0.0/15`, `2001:2::/48`).
//!
//! Addresses are handed out as host-order integers (`u32`, `u128`) because
//! every consumer (FIB, firewall, config) works on them as numbers. An IPv6
//! prefix stores its address as two `u64` halves: a `u128` field would
//! align the type to 16 bytes, and a route table keyed by prefix (a
//! million entries for a full table) would carry that padding in every
//! key: 48 bytes for a [`Cidr`] instead of 32.

use core::fmt;
use core::str::FromStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a prefix string was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseCidrError {
    /// No `/len` part, or the address part did not parse.
    BadAddress,
    /// The length was not a number or exceeds the address width.
    BadLength,
    /// Bits are set beyond the prefix length (`10.0.0.1/8`).
    HostBitsSet,
}

impl fmt::Display for ParseCidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ParseCidrError::BadAddress => "expected ADDRESS/LENGTH with a valid address",
            ParseCidrError::BadLength => "prefix length is not a number within the address width",
            ParseCidrError::HostBitsSet => "address has bits set beyond the prefix length",
        })
    }
}

impl std::error::Error for ParseCidrError {}

// How an address is stored: the integer itself, or (IPv6) its high and
// low halves, which order and compare as the integer does.
#[inline]
const fn u32_store(a: u32) -> u32 {
    a
}

#[inline]
const fn u32_load(a: u32) -> u32 {
    a
}

#[inline]
const fn u128_store(a: u128) -> [u64; 2] {
    [(a >> 64) as u64, a as u64]
}

#[inline]
const fn u128_load(a: [u64; 2]) -> u128 {
    ((a[0] as u128) << 64) | a[1] as u128
}

macro_rules! cidr_type {
    ($name:ident, $int:ty, $store:ty, $to:ident, $from:ident, $addr:ty, $bits:expr_2021) => {
        /// A prefix: network address (host bits zero) and length.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name {
            addr: $store,
            len: u8,
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("addr", &self.addr())
                    .field("len", &self.len)
                    .finish()
            }
        }

        impl $name {
            /// Address width in bits.
            pub const BITS: u8 = $bits;

            /// The mask of a prefix of `len` bits (`len` is clamped to the width).
            #[inline]
            pub const fn mask(len: u8) -> $int {
                if len == 0 {
                    0
                } else if len >= $bits {
                    <$int>::MAX
                } else {
                    <$int>::MAX << ($bits - len as u32)
                }
            }

            /// A prefix from an address and length; host bits are cleared.
            /// Returns `None` when `len` exceeds the address width.
            pub const fn new(addr: $int, len: u8) -> Option<Self> {
                if len as u32 > $bits {
                    return None;
                }
                Some(Self {
                    addr: $to(addr & Self::mask(len)),
                    len,
                })
            }

            /// A prefix from an address and length, refusing set host bits.
            pub fn new_exact(addr: $int, len: u8) -> Result<Self, ParseCidrError> {
                if len as u32 > $bits {
                    return Err(ParseCidrError::BadLength);
                }
                if addr & !Self::mask(len) != 0 {
                    return Err(ParseCidrError::HostBitsSet);
                }
                Ok(Self {
                    addr: $to(addr),
                    len,
                })
            }

            /// The network address as an integer (host bits zero).
            #[inline]
            pub const fn addr(&self) -> $int {
                $from(self.addr)
            }

            /// The network address.
            pub fn network(&self) -> $addr {
                <$addr>::from(self.addr())
            }

            /// The prefix length in bits.
            #[inline]
            pub const fn prefix_len(&self) -> u8 {
                self.len
            }

            /// True for the default route (`/0`).
            #[inline]
            pub const fn is_default(&self) -> bool {
                self.len == 0
            }

            /// Whether `addr` falls inside this prefix.
            #[inline]
            pub const fn contains(&self, addr: $int) -> bool {
                addr & Self::mask(self.len) == self.addr()
            }

            /// Whether `other` is equal to or more specific than `self`.
            #[inline]
            pub const fn covers(&self, other: &Self) -> bool {
                other.len >= self.len && self.contains(other.addr())
            }

            /// The last address inside the prefix.
            #[inline]
            pub const fn last(&self) -> $int {
                self.addr() | !Self::mask(self.len)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}/{}", <$addr>::from(self.addr()), self.len)
            }
        }

        impl FromStr for $name {
            type Err = ParseCidrError;

            /// Parses `ADDR/LEN`; a bare address is a host prefix.
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let s = s.trim();
                let (a, l) = match s.split_once('/') {
                    Some((a, l)) => (a, Some(l)),
                    None => (s, None),
                };
                let addr: $addr = a.parse().map_err(|_| ParseCidrError::BadAddress)?;
                let len = match l {
                    Some(l) => l.parse::<u8>().map_err(|_| ParseCidrError::BadLength)?,
                    None => $bits,
                };
                Self::new_exact(<$int>::from(addr), len)
            }
        }
    };
}

cidr_type!(Ipv4Cidr, u32, u32, u32_store, u32_load, Ipv4Addr, 32);
cidr_type!(
    Ipv6Cidr, u128, [u64; 2], u128_store, u128_load, Ipv6Addr, 128
);

const _: () = assert!(core::mem::size_of::<Ipv6Cidr>() == 24);
const _: () = assert!(core::mem::size_of::<Cidr>() == 32);

/// A prefix of either family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cidr {
    V4(Ipv4Cidr),
    V6(Ipv6Cidr),
}

impl Cidr {
    /// The prefix length in bits.
    pub fn prefix_len(&self) -> u8 {
        match self {
            Cidr::V4(p) => p.prefix_len(),
            Cidr::V6(p) => p.prefix_len(),
        }
    }

    /// Whether `addr` falls inside this prefix (false across families).
    pub fn contains(&self, addr: IpAddr) -> bool {
        match (self, addr) {
            (Cidr::V4(p), IpAddr::V4(a)) => p.contains(u32::from(a)),
            (Cidr::V6(p), IpAddr::V6(a)) => p.contains(u128::from(a)),
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cidr::V4(p) => p.fmt(f),
            Cidr::V6(p) => p.fmt(f),
        }
    }
}

impl FromStr for Cidr {
    type Err = ParseCidrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.contains(':') {
            s.parse().map(Cidr::V6)
        } else {
            s.parse().map(Cidr::V4)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        let p: Ipv4Cidr = "198.18.0.0/15".parse().unwrap();
        assert_eq!(p.addr(), 0xC612_0000);
        assert_eq!(p.prefix_len(), 15);
        assert_eq!(p.to_string(), "198.18.0.0/15");
        let q: Ipv6Cidr = "2001:2::/48".parse().unwrap();
        assert_eq!(q.to_string(), "2001:2::/48");
        assert_eq!("10.1.2.3".parse::<Ipv4Cidr>().unwrap().prefix_len(), 32);
    }

    #[test]
    fn refuses_bad_prefixes() {
        assert_eq!(
            "10.0.0.1/8".parse::<Ipv4Cidr>(),
            Err(ParseCidrError::HostBitsSet)
        );
        assert_eq!(
            "10.0.0.0/33".parse::<Ipv4Cidr>(),
            Err(ParseCidrError::BadLength)
        );
        assert_eq!(
            "10.0.0/8".parse::<Ipv4Cidr>(),
            Err(ParseCidrError::BadAddress)
        );
        assert_eq!("::/129".parse::<Ipv6Cidr>(), Err(ParseCidrError::BadLength));
    }

    #[test]
    fn containment_at_edges() {
        let p: Ipv4Cidr = "198.18.0.0/15".parse().unwrap();
        assert!(p.contains(0xC612_0000));
        assert!(p.contains(0xC613_FFFF));
        assert!(!p.contains(0xC614_0000));
        assert!(!p.contains(0xC611_FFFF));
        assert_eq!(p.last(), 0xC613_FFFF);
        let d = Ipv4Cidr::new(0, 0).unwrap();
        assert!(d.contains(u32::MAX) && d.covers(&p) && !p.covers(&d));
        let h = Ipv6Cidr::new(u128::MAX, 128).unwrap();
        assert!(h.contains(u128::MAX) && !h.contains(u128::MAX - 1));
    }
}
