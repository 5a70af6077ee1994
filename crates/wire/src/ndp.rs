//! Neighbor Discovery (RFC 4861): Neighbor Solicitation / Advertisement and
//! Router Solicitation bodies, and the option TLVs after them (§4.6).
//!
//! The views are [`Icmpv6Packet`] accessors
//! (`target_addr`, `ndp_options`); this module holds the option iterator
//! and the owned [`NdpRepr`]. Checks that belong to the IP layer (hop limit
//! 255, §7.1.1) are the caller's.

use std::net::Ipv6Addr;

use crate::ethernet::MacAddr;
use crate::icmpv6::{Icmpv6Message, Icmpv6Packet};
use crate::{Error, Result, be32};

/// Option types (RFC 4861 §4.6).
pub mod option_type {
    pub const SOURCE_LL_ADDR: u8 = 1;
    pub const TARGET_LL_ADDR: u8 = 2;
    pub const PREFIX_INFO: u8 = 3;
    pub const REDIRECTED_HEADER: u8 = 4;
    pub const MTU: u8 = 5;
}

/// Neighbor Advertisement flags (top byte of the reserved word).
pub mod na_flags {
    pub const ROUTER: u8 = 0x80;
    pub const SOLICITED: u8 = 0x40;
    pub const OVERRIDE: u8 = 0x20;
}

/// One NDP option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NdpOption<'a> {
    /// Source link-layer address (Ethernet: 6 bytes).
    SourceLinkAddr(MacAddr),
    /// Target link-layer address.
    TargetLinkAddr(MacAddr),
    /// MTU option.
    Mtu(u32),
    /// Any other option: its type and the bytes after type and length.
    Other { kind: u8, data: &'a [u8] },
}

/// Iterates options; yields an error and stops at a zero length (§4.6:
/// "nodes MUST silently discard an ND packet that contains an option with
/// length zero") or an option running past the buffer.
#[derive(Debug, Clone)]
pub struct NdpOptionIter<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> NdpOptionIter<'a> {
    #[inline]
    pub fn new(bytes: &'a [u8]) -> Self {
        NdpOptionIter {
            rest: bytes,
            failed: false,
        }
    }
}

impl<'a> Iterator for NdpOptionIter<'a> {
    type Item = Result<NdpOption<'a>>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let fail = |s: &mut Self, e| {
            s.failed = true;
            Some(Err(e))
        };
        if self.rest.len() < 2 {
            return fail(self, Error::Truncated);
        }
        let kind = self.rest[0];
        let len = usize::from(self.rest[1]) * 8;
        if len == 0 {
            return fail(self, Error::BadHeaderLen);
        }
        if self.rest.len() < len {
            return fail(self, Error::Truncated);
        }
        let data = &self.rest[2..len];
        self.rest = &self.rest[len..];
        Some(Ok(match kind {
            option_type::SOURCE_LL_ADDR | option_type::TARGET_LL_ADDR => {
                match MacAddr::from_bytes(data) {
                    Some(m) if kind == option_type::SOURCE_LL_ADDR => NdpOption::SourceLinkAddr(m),
                    Some(m) => NdpOption::TargetLinkAddr(m),
                    None => NdpOption::Other { kind, data },
                }
            }
            option_type::MTU if data.len() >= 6 => NdpOption::Mtu(be32(data, 2)),
            _ => NdpOption::Other { kind, data },
        }))
    }
}

/// An NDP message fastfwd answers or sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NdpRepr {
    RouterSolicit {
        source_ll: Option<MacAddr>,
    },
    NeighborSolicit {
        target: Ipv6Addr,
        source_ll: Option<MacAddr>,
    },
    NeighborAdvert {
        /// `na_flags` bits.
        flags: u8,
        target: Ipv6Addr,
        target_ll: Option<MacAddr>,
    },
}

/// One link-layer address option on Ethernet: type, length 1, 6 bytes.
const LL_OPTION_LEN: usize = 8;

impl NdpRepr {
    /// Reads an NS, NA or RS message (checksum already verified by the
    /// caller or [`Icmpv6Repr::parse`](crate::Icmpv6Repr::parse)). Refuses
    /// a non-zero code, a short body, a multicast target and bad options
    /// (RFC 4861 §7.1).
    pub fn parse<T: AsRef<[u8]>>(p: &Icmpv6Packet<T>) -> Result<NdpRepr> {
        if p.msg_code() != 0 {
            return Err(Error::Malformed);
        }
        let mut source_ll = None;
        let mut target_ll = None;
        for opt in p.ndp_options() {
            match opt? {
                NdpOption::SourceLinkAddr(m) => source_ll = Some(m),
                NdpOption::TargetLinkAddr(m) => target_ll = Some(m),
                _ => {}
            }
        }
        match p.msg_type() {
            Icmpv6Message::RouterSolicit => Ok(NdpRepr::RouterSolicit { source_ll }),
            Icmpv6Message::NeighborSolicit | Icmpv6Message::NeighborAdvert => {
                let target = p.target_addr().ok_or(Error::Truncated)?;
                if target.is_multicast() {
                    return Err(Error::Malformed);
                }
                if p.msg_type() == Icmpv6Message::NeighborSolicit {
                    Ok(NdpRepr::NeighborSolicit { target, source_ll })
                } else {
                    Ok(NdpRepr::NeighborAdvert {
                        flags: (p.rest_of_header() >> 24) as u8,
                        target,
                        target_ll,
                    })
                }
            }
            _ => Err(Error::Unsupported),
        }
    }

    /// Message length: fixed part plus a link-layer option when present.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        let (fixed, opt) = match self {
            NdpRepr::RouterSolicit { source_ll } => (8, source_ll.is_some()),
            NdpRepr::NeighborSolicit { source_ll, .. } => (24, source_ll.is_some()),
            NdpRepr::NeighborAdvert { target_ll, .. } => (24, target_ll.is_some()),
        };
        fixed + if opt { LL_OPTION_LEN } else { 0 }
    }

    /// Writes the message with a zero checksum (fill it with
    /// `Icmpv6Packet::fill_checksum`, or emit through `Icmpv6Repr`).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Icmpv6Packet<T>) -> Result<()> {
        let len = self.buffer_len();
        if p.buffer.as_ref().len() < len {
            return Err(Error::Truncated);
        }
        let (t, rest, target, opt) = match *self {
            NdpRepr::RouterSolicit { source_ll } => (
                Icmpv6Message::RouterSolicit,
                0,
                None,
                source_ll.map(|m| (option_type::SOURCE_LL_ADDR, m)),
            ),
            NdpRepr::NeighborSolicit { target, source_ll } => (
                Icmpv6Message::NeighborSolicit,
                0,
                Some(target),
                source_ll.map(|m| (option_type::SOURCE_LL_ADDR, m)),
            ),
            NdpRepr::NeighborAdvert {
                flags,
                target,
                target_ll,
            } => (
                Icmpv6Message::NeighborAdvert,
                u32::from(flags) << 24,
                Some(target),
                target_ll.map(|m| (option_type::TARGET_LL_ADDR, m)),
            ),
        };
        p.set_msg_type(t);
        p.set_msg_code(0);
        p.set_checksum(0);
        p.set_rest_of_header(rest);
        let b = p.buffer.as_mut();
        let mut at = 8;
        if let Some(a) = target {
            b[8..24].copy_from_slice(&a.octets());
            at = 24;
        }
        if let Some((kind, mac)) = opt {
            b[at] = kind;
            b[at + 1] = 1;
            b[at + 2..at + 8].copy_from_slice(&mac.0);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Icmpv6Repr, Ipv6Packet, ip_proto};
    use proptest::prelude::*;

    /// IPv6 (hop limit 255) + Neighbor Solicitation from 2001:2::108 to the
    /// solicited-node group ff02::1:ff00:10 for 2001:2::10, with a source
    /// link-layer address option 52:54:00:12:34:56.
    pub(crate) const IPV6_NS: [u8; 72] = [
        0x60, 0x01, 0x23, 0x45, 0x00, 0x20, 0x3a, 0xff, 0x20, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0x00, 0x00, 0x10, 0x87, 0x00, 0xb1, 0xb4, 0x00,
        0x00, 0x00, 0x00, 0x20, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x10, 0x01, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56,
    ];
    /// IPv6 + Neighbor Advertisement (solicited, override) for 2001:2::10
    /// with a target link-layer address option 52:54:00:ab:cd:ef.
    pub(crate) const IPV6_NA: [u8; 72] = [
        0x60, 0x01, 0x23, 0x45, 0x00, 0x20, 0x3a, 0xff, 0x20, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x20, 0x01, 0x00, 0x02, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x88, 0x00, 0x93, 0x83, 0x60,
        0x00, 0x00, 0x00, 0x20, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x10, 0x02, 0x01, 0x52, 0x54, 0x00, 0xab, 0xcd, 0xef,
    ];

    fn mac(s: &str) -> MacAddr {
        s.parse().unwrap()
    }

    #[test]
    fn solicitation_fixture() {
        let ip = Ipv6Packet::new_checked(&IPV6_NS[..]).unwrap();
        assert_eq!((ip.next_header(), ip.hop_limit()), (ip_proto::ICMPV6, 255));
        let p = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        assert_eq!(p.msg_type(), Icmpv6Message::NeighborSolicit);
        let target: Ipv6Addr = "2001:2::10".parse().unwrap();
        assert_eq!(p.target_addr(), Some(target));
        let opts: Vec<_> = p.ndp_options().collect();
        assert_eq!(
            opts,
            vec![Ok(NdpOption::SourceLinkAddr(mac("52:54:00:12:34:56")))]
        );
        let want = NdpRepr::NeighborSolicit {
            target,
            source_ll: Some(mac("52:54:00:12:34:56")),
        };
        assert_eq!(NdpRepr::parse(&p), Ok(want));
        let r = Icmpv6Repr::parse(&ip.src_addr(), &ip.dst_addr(), &p).unwrap();
        assert_eq!(r, Icmpv6Repr::Ndp(want));
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(
            &ip.src_addr(),
            &ip.dst_addr(),
            &mut Icmpv6Packet::new_unchecked(&mut out[..]),
        )
        .unwrap();
        assert_eq!(&out[..], ip.payload());
    }

    #[test]
    fn advertisement_fixture() {
        let ip = Ipv6Packet::new_checked(&IPV6_NA[..]).unwrap();
        let p = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        assert!(p.verify_checksum(&ip.src_addr(), &ip.dst_addr()));
        let want = NdpRepr::NeighborAdvert {
            flags: na_flags::SOLICITED | na_flags::OVERRIDE,
            target: "2001:2::10".parse().unwrap(),
            target_ll: Some(mac("52:54:00:ab:cd:ef")),
        };
        assert_eq!(NdpRepr::parse(&p), Ok(want));
        let mut out = vec![0u8; want.buffer_len()];
        Icmpv6Repr::Ndp(want)
            .emit(
                &ip.src_addr(),
                &ip.dst_addr(),
                &mut Icmpv6Packet::new_unchecked(&mut out[..]),
            )
            .unwrap();
        assert_eq!(&out[..], ip.payload());
        let (e, _) = etherparse::Icmpv6Header::from_slice(&out).unwrap();
        assert_eq!(e.checksum, p.checksum());
    }

    #[test]
    fn bad_options_and_bodies() {
        let ip = Ipv6Packet::new_checked(&IPV6_NS[..]).unwrap();
        // Zero-length option.
        let mut b = ip.payload().to_vec();
        b[25] = 0;
        let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            p.ndp_options().collect::<Vec<_>>(),
            vec![Err(Error::BadHeaderLen)]
        );
        assert_eq!(NdpRepr::parse(&p), Err(Error::BadHeaderLen));
        // Option running past the end.
        b[25] = 2;
        let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(NdpRepr::parse(&p), Err(Error::Truncated));
        // One byte of an option.
        let p = Icmpv6Packet::new_checked(&b[..25]).unwrap();
        assert_eq!(p.ndp_options().next(), Some(Err(Error::Truncated)));
        // Body shorter than the target address.
        let p = Icmpv6Packet::new_checked(&b[..20]).unwrap();
        assert_eq!(p.target_addr(), None);
        assert_eq!(NdpRepr::parse(&p), Err(Error::Truncated));
        // Multicast target and non-zero code.
        let mut b = ip.payload().to_vec();
        b[8] = 0xff;
        assert_eq!(
            NdpRepr::parse(&Icmpv6Packet::new_checked(&b[..]).unwrap()),
            Err(Error::Malformed)
        );
        let mut b = ip.payload().to_vec();
        b[1] = 1;
        assert_eq!(
            NdpRepr::parse(&Icmpv6Packet::new_checked(&b[..]).unwrap()),
            Err(Error::Malformed)
        );
        // Unknown options are skipped; the MTU option is read.
        let opts = [5u8, 1, 0, 0, 0, 0, 0x05, 0xdc, 99, 1, 1, 2, 3, 4, 5, 6];
        let got: Vec<_> = NdpOptionIter::new(&opts).collect();
        assert_eq!(
            got,
            vec![
                Ok(NdpOption::Mtu(1500)),
                Ok(NdpOption::Other {
                    kind: 99,
                    data: &[1, 2, 3, 4, 5, 6]
                })
            ]
        );
    }

    proptest! {
        #[test]
        fn repr_round_trip(
            kind in 0u8..3, t in any::<u128>(), m in any::<[u8; 6]>(), has in any::<bool>(),
            flags in any::<u8>(),
        ) {
            let target = Ipv6Addr::from(t & !(0xff << 120)); // not multicast
            let ll = has.then_some(MacAddr(m));
            let r = match kind {
                0 => NdpRepr::RouterSolicit { source_ll: ll },
                1 => NdpRepr::NeighborSolicit { target, source_ll: ll },
                _ => NdpRepr::NeighborAdvert { flags, target, target_ll: ll },
            };
            let mut out = vec![0u8; r.buffer_len()];
            let mut p = Icmpv6Packet::new_unchecked(&mut out[..]);
            r.emit(&mut p).unwrap();
            prop_assert_eq!(NdpRepr::parse(&p), Ok(r));
        }
    }
}
