//! Neighbor Discovery (RFC 4861): Neighbor Solicitation / Advertisement and
//! Router Solicitation bodies, and the option TLVs after them (§4.6).
//!
//! The views are [`Icmpv6Packet`](crate::Icmpv6Packet) accessors
//! (`target_addr`, `ndp_options`); this module holds the option iterator
//! and the owned [`NdpRepr`]. Checks that belong to the IP layer (hop limit
//! 255, §7.1.1) are the caller's.

use std::net::Ipv6Addr;

use crate::ethernet::MacAddr;
use crate::icmpv6::{Icmpv6Message, Icmpv6Packet};
use crate::{be32, Error, Result};

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
