//! ICMPv6 (RFC 4443) and the Neighbor Discovery messages carried in it
//! (RFC 4861, see [`crate::ndp`]).
//!
//! `new_checked` checks only that the 8-byte header is present. Accessors
//! of the NDP body (`target_addr`, `ndp_options`) check their own length.
//! The checksum covers the IPv6 pseudo-header (RFC 4443 §2.3).

use std::net::Ipv6Addr;

use crate::ndp::{NdpOptionIter, NdpRepr};
use crate::{Error, Result, be16, be32, checksum, ip_proto, put16, put32};

pub const HEADER_LEN: usize = 8;

/// Largest ICMPv6 error packet, IPv6 header included: the error quotes as
/// much of the original as fits in the minimum IPv6 MTU (RFC 4443 §2.4 c).
pub const MAX_ERROR_PACKET_LEN: usize = 1280;

/// Message types fastfwd reads or sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv6Message {
    DestUnreachable,
    PacketTooBig,
    TimeExceeded,
    ParamProblem,
    EchoRequest,
    EchoReply,
    RouterSolicit,
    RouterAdvert,
    NeighborSolicit,
    NeighborAdvert,
    Redirect,
    Unknown(u8),
}

impl From<u8> for Icmpv6Message {
    #[inline]
    fn from(t: u8) -> Self {
        match t {
            1 => Icmpv6Message::DestUnreachable,
            2 => Icmpv6Message::PacketTooBig,
            3 => Icmpv6Message::TimeExceeded,
            4 => Icmpv6Message::ParamProblem,
            128 => Icmpv6Message::EchoRequest,
            129 => Icmpv6Message::EchoReply,
            133 => Icmpv6Message::RouterSolicit,
            134 => Icmpv6Message::RouterAdvert,
            135 => Icmpv6Message::NeighborSolicit,
            136 => Icmpv6Message::NeighborAdvert,
            137 => Icmpv6Message::Redirect,
            t => Icmpv6Message::Unknown(t),
        }
    }
}

impl From<Icmpv6Message> for u8 {
    #[inline]
    fn from(m: Icmpv6Message) -> u8 {
        match m {
            Icmpv6Message::DestUnreachable => 1,
            Icmpv6Message::PacketTooBig => 2,
            Icmpv6Message::TimeExceeded => 3,
            Icmpv6Message::ParamProblem => 4,
            Icmpv6Message::EchoRequest => 128,
            Icmpv6Message::EchoReply => 129,
            Icmpv6Message::RouterSolicit => 133,
            Icmpv6Message::RouterAdvert => 134,
            Icmpv6Message::NeighborSolicit => 135,
            Icmpv6Message::NeighborAdvert => 136,
            Icmpv6Message::Redirect => 137,
            Icmpv6Message::Unknown(t) => t,
        }
    }
}

impl Icmpv6Message {
    /// Error messages (types 0-127, RFC 4443 §2.1), to which no ICMPv6 error
    /// may be sent (§2.4 e.1).
    #[inline]
    pub fn is_error(self) -> bool {
        u8::from(self) < 128
    }
}

/// Destination Unreachable codes (RFC 4443 §3.1).
pub mod unreachable {
    pub const NO_ROUTE: u8 = 0;
    pub const ADMIN_PROHIBITED: u8 = 1;
    pub const BEYOND_SCOPE: u8 = 2;
    pub const ADDRESS: u8 = 3;
    pub const PORT: u8 = 4;
    pub const SOURCE_POLICY: u8 = 5;
    pub const REJECT_ROUTE: u8 = 6;
}

/// Time Exceeded codes (RFC 4443 §3.3).
pub mod time_exceeded {
    pub const HOP_LIMIT: u8 = 0;
    pub const REASSEMBLY: u8 = 1;
}

/// Parameter Problem codes (RFC 4443 §3.4).
pub mod param_problem {
    pub const HEADER_FIELD: u8 = 0;
    pub const NEXT_HEADER: u8 = 1;
    pub const OPTION: u8 = 2;
}

/// A zero-copy view of an ICMPv6 message.
#[derive(Debug, Clone)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    pub(crate) buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv6Packet { buffer }
    }

    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Icmpv6Packet { buffer })
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    #[inline]
    pub fn msg_type(&self) -> Icmpv6Message {
        Icmpv6Message::from(self.buffer.as_ref()[0])
    }

    #[inline]
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    /// The 32 bits after the checksum: MTU of Packet Too Big, pointer of
    /// Parameter Problem, NA flags in the top byte.
    #[inline]
    pub fn rest_of_header(&self) -> u32 {
        be32(self.buffer.as_ref(), 4)
    }

    #[inline]
    pub fn mtu(&self) -> u32 {
        self.rest_of_header()
    }

    #[inline]
    pub fn pointer(&self) -> u32 {
        self.rest_of_header()
    }

    #[inline]
    pub fn echo_ident(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }

    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    /// Everything after the 8-byte header.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// Target address of a Neighbor Solicitation / Advertisement (bytes
    /// 8-23), or `None` when the message is shorter.
    #[inline]
    pub fn target_addr(&self) -> Option<Ipv6Addr> {
        let b = self.buffer.as_ref().get(8..24)?;
        let mut a = [0u8; 16];
        a.copy_from_slice(b);
        Some(Ipv6Addr::from(a))
    }

    /// NDP options after the fixed part of an NS / NA / RS / RA / Redirect
    /// message; empty for other types or when the fixed part is missing.
    #[inline]
    pub fn ndp_options(&self) -> NdpOptionIter<'_> {
        let start = match self.msg_type() {
            Icmpv6Message::RouterSolicit => 8,
            Icmpv6Message::RouterAdvert => 16,
            Icmpv6Message::NeighborSolicit | Icmpv6Message::NeighborAdvert => 24,
            Icmpv6Message::Redirect => 40,
            _ => usize::MAX,
        };
        NdpOptionIter::new(self.buffer.as_ref().get(start..).unwrap_or(&[]))
    }

    /// Whether the checksum verifies for a message from `src` to `dst`.
    #[inline]
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        let ph = checksum::pseudo_header_v6(src, dst, ip_proto::ICMPV6, b.len() as u32);
        checksum::verifies(checksum::combine(&[ph, checksum::sum(b)]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    #[inline]
    pub fn set_msg_type(&mut self, t: Icmpv6Message) {
        self.buffer.as_mut()[0] = t.into();
    }

    #[inline]
    pub fn set_msg_code(&mut self, c: u8) {
        self.buffer.as_mut()[1] = c;
    }

    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.buffer.as_mut(), 2, c);
    }

    #[inline]
    pub fn set_rest_of_header(&mut self, v: u32) {
        put32(self.buffer.as_mut(), 4, v);
    }

    #[inline]
    pub fn set_echo_ident(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 4, v);
    }

    #[inline]
    pub fn set_echo_seq_no(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 6, v);
    }

    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }

    /// Computes the checksum over the pseudo-header and the whole buffer.
    #[inline]
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let ph = checksum::pseudo_header_v6(src, dst, ip_proto::ICMPV6, b.len() as u32);
        let c = checksum::finish(checksum::combine(&[ph, checksum::sum(b)]));
        self.set_checksum(c);
    }
}

/// An ICMPv6 message, borrowing its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icmpv6Repr<'a> {
    DestUnreachable {
        code: u8,
        invoking: &'a [u8],
    },
    PacketTooBig {
        mtu: u32,
        invoking: &'a [u8],
    },
    TimeExceeded {
        code: u8,
        invoking: &'a [u8],
    },
    ParamProblem {
        code: u8,
        pointer: u32,
        invoking: &'a [u8],
    },
    EchoRequest {
        ident: u16,
        seq_no: u16,
        data: &'a [u8],
    },
    EchoReply {
        ident: u16,
        seq_no: u16,
        data: &'a [u8],
    },
    /// Neighbor Discovery (RFC 4861).
    Ndp(NdpRepr),
}

impl<'a> Icmpv6Repr<'a> {
    /// Reads a message after verifying its checksum against `src`/`dst`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
        p: &Icmpv6Packet<&'a T>,
    ) -> Result<Icmpv6Repr<'a>> {
        if !p.verify_checksum(src, dst) {
            return Err(Error::BadChecksum);
        }
        let data = &p.buffer.as_ref()[HEADER_LEN..];
        Ok(match (p.msg_type(), p.msg_code()) {
            (Icmpv6Message::DestUnreachable, code) => Icmpv6Repr::DestUnreachable {
                code,
                invoking: data,
            },
            (Icmpv6Message::PacketTooBig, 0) => Icmpv6Repr::PacketTooBig {
                mtu: p.mtu(),
                invoking: data,
            },
            (Icmpv6Message::TimeExceeded, code) => Icmpv6Repr::TimeExceeded {
                code,
                invoking: data,
            },
            (Icmpv6Message::ParamProblem, code) => Icmpv6Repr::ParamProblem {
                code,
                pointer: p.pointer(),
                invoking: data,
            },
            (Icmpv6Message::EchoRequest, 0) => Icmpv6Repr::EchoRequest {
                ident: p.echo_ident(),
                seq_no: p.echo_seq_no(),
                data,
            },
            (Icmpv6Message::EchoReply, 0) => Icmpv6Repr::EchoReply {
                ident: p.echo_ident(),
                seq_no: p.echo_seq_no(),
                data,
            },
            (
                Icmpv6Message::NeighborSolicit
                | Icmpv6Message::NeighborAdvert
                | Icmpv6Message::RouterSolicit,
                _,
            ) => Icmpv6Repr::Ndp(NdpRepr::parse(p)?),
            (
                Icmpv6Message::PacketTooBig | Icmpv6Message::EchoRequest | Icmpv6Message::EchoReply,
                _,
            ) => return Err(Error::Malformed),
            _ => return Err(Error::Unsupported),
        })
    }

    /// Header plus data (for NDP, the fixed part plus options).
    #[inline]
    pub fn buffer_len(&self) -> usize {
        match self {
            Icmpv6Repr::DestUnreachable { invoking, .. }
            | Icmpv6Repr::PacketTooBig { invoking, .. }
            | Icmpv6Repr::TimeExceeded { invoking, .. }
            | Icmpv6Repr::ParamProblem { invoking, .. } => HEADER_LEN + invoking.len(),
            Icmpv6Repr::EchoRequest { data, .. } | Icmpv6Repr::EchoReply { data, .. } => {
                HEADER_LEN + data.len()
            }
            Icmpv6Repr::Ndp(n) => n.buffer_len(),
        }
    }

    /// Writes the message and its checksum for `src` -> `dst`. The view's
    /// buffer must be exactly [`buffer_len`](Self::buffer_len) long.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
        p: &mut Icmpv6Packet<T>,
    ) -> Result<()> {
        let len = self.buffer_len();
        match p.buffer.as_ref().len() {
            l if l < len => return Err(Error::Truncated),
            l if l > len => return Err(Error::BadLength),
            _ => {}
        }
        let (t, code, rest, body): (Icmpv6Message, u8, u32, &[u8]) = match *self {
            Icmpv6Repr::DestUnreachable { code, invoking } => {
                (Icmpv6Message::DestUnreachable, code, 0, invoking)
            }
            Icmpv6Repr::PacketTooBig { mtu, invoking } => {
                (Icmpv6Message::PacketTooBig, 0, mtu, invoking)
            }
            Icmpv6Repr::TimeExceeded { code, invoking } => {
                (Icmpv6Message::TimeExceeded, code, 0, invoking)
            }
            Icmpv6Repr::ParamProblem {
                code,
                pointer,
                invoking,
            } => (Icmpv6Message::ParamProblem, code, pointer, invoking),
            Icmpv6Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => (
                Icmpv6Message::EchoRequest,
                0,
                (u32::from(ident) << 16) | u32::from(seq_no),
                data,
            ),
            Icmpv6Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => (
                Icmpv6Message::EchoReply,
                0,
                (u32::from(ident) << 16) | u32::from(seq_no),
                data,
            ),
            Icmpv6Repr::Ndp(n) => {
                n.emit(p)?;
                p.fill_checksum(src, dst);
                return Ok(());
            }
        };
        p.set_msg_type(t);
        p.set_msg_code(code);
        p.set_rest_of_header(rest);
        p.data_mut().copy_from_slice(body);
        p.fill_checksum(src, dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Ipv6Packet;
    use crate::ipv6::tests::ETH_IPV6_UDP;
    use proptest::prelude::*;

    /// IPv6 + ICMPv6 echo request 2001:2::108 -> 2001:2::10, id 0x4242,
    /// seq 1, 9 data bytes; tcpdump: "[icmp6 sum ok]".
    pub(crate) const IPV6_ICMP_ECHO: [u8; 57] = [
        0x60, 0x01, 0x23, 0x45, 0x00, 0x11, 0x3a, 0x40, 0x20, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x20, 0x01, 0x00, 0x02, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x80, 0x00, 0x24, 0xa9, 0x42,
        0x42, 0x00, 0x01, 0x70, 0x69, 0x6e, 0x67, 0x36, 0x64, 0x61, 0x74, 0x61,
    ];
    /// ICMPv6 packet too big (MTU 1280) from 2001:2::10 to 2001:2::108,
    /// quoting the whole IPv6/UDP packet of ETH_IPV6_UDP.
    pub(crate) const ICMPV6_PACKET_TOO_BIG: [u8; 74] = [
        0x02, 0x00, 0x22, 0xe8, 0x00, 0x00, 0x05, 0x00, 0x60, 0x01, 0x23, 0x45, 0x00, 0x1a, 0x11,
        0x40, 0x20, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, 0x08, 0x20, 0x01, 0x00, 0x02, 0x00, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x01, 0x08, 0x07, 0xd0, 0x07, 0xd0, 0x00, 0x1a, 0x14, 0x65, 0x66, 0x61, 0x73, 0x74,
        0x66, 0x77, 0x64, 0x2d, 0x73, 0x65, 0x71, 0x2d, 0x30, 0x30, 0x30, 0x30, 0x30, 0x31,
    ];

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn echo_fixture() {
        let ip = Ipv6Packet::new_checked(&IPV6_ICMP_ECHO[..]).unwrap();
        let p = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        assert_eq!(p.msg_type(), Icmpv6Message::EchoRequest);
        assert!(!p.msg_type().is_error());
        assert_eq!((p.echo_ident(), p.echo_seq_no()), (0x4242, 1));
        assert!(p.verify_checksum(&ip.src_addr(), &ip.dst_addr()));
        // Addresses are summed, so only a different address fails.
        assert!(!p.verify_checksum(&ip.src_addr(), &a("2001:2::11")));
        assert_eq!(p.target_addr(), None);
        assert_eq!(p.ndp_options().count(), 0);
        let r = Icmpv6Repr::parse(&ip.src_addr(), &ip.dst_addr(), &p).unwrap();
        assert_eq!(
            r,
            Icmpv6Repr::EchoRequest {
                ident: 0x4242,
                seq_no: 1,
                data: b"ping6data"
            }
        );
        let reply = Icmpv6Repr::EchoReply {
            ident: 0x4242,
            seq_no: 1,
            data: b"ping6data",
        };
        let mut out = vec![0u8; reply.buffer_len()];
        reply
            .emit(
                &ip.dst_addr(),
                &ip.src_addr(),
                &mut Icmpv6Packet::new_unchecked(&mut out[..]),
            )
            .unwrap();
        let q = Icmpv6Packet::new_checked(&out[..]).unwrap();
        assert!(q.verify_checksum(&ip.dst_addr(), &ip.src_addr()));
        assert_eq!(q.msg_type(), Icmpv6Message::EchoReply);
    }

    #[test]
    fn packet_too_big_fixture() {
        let (src, dst) = (a("2001:2::10"), a("2001:2::108"));
        let p = Icmpv6Packet::new_checked(&ICMPV6_PACKET_TOO_BIG[..]).unwrap();
        assert_eq!(p.msg_type(), Icmpv6Message::PacketTooBig);
        assert!(p.msg_type().is_error());
        assert_eq!(p.mtu(), 1280);
        let r = Icmpv6Repr::parse(&src, &dst, &p).unwrap();
        assert_eq!(
            r,
            Icmpv6Repr::PacketTooBig {
                mtu: 1280,
                invoking: &ETH_IPV6_UDP[14..]
            }
        );
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&src, &dst, &mut Icmpv6Packet::new_unchecked(&mut out[..]))
            .unwrap();
        assert_eq!(&out[..], &ICMPV6_PACKET_TOO_BIG[..]);
        let (e, _) = etherparse::Icmpv6Header::from_slice(&out).unwrap();
        assert_eq!(
            e.icmp_type,
            etherparse::Icmpv6Type::PacketTooBig { mtu: 1280 }
        );
    }

    #[test]
    fn refusals() {
        let (src, dst) = (a("2001:2::10"), a("2001:2::108"));
        assert_eq!(
            Icmpv6Packet::new_checked(&[1u8; 7][..]).unwrap_err(),
            Error::Truncated
        );
        let p = Icmpv6Packet::new_checked(&ICMPV6_PACKET_TOO_BIG[..]).unwrap();
        assert_eq!(
            Icmpv6Repr::parse(&src, &a("::1"), &p).unwrap_err(),
            Error::BadChecksum
        );
        let mut b = [200u8, 0, 0, 0, 0, 0, 0, 0];
        Icmpv6Packet::new_checked(&mut b[..])
            .unwrap()
            .fill_checksum(&src, &dst);
        let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            Icmpv6Repr::parse(&src, &dst, &p).unwrap_err(),
            Error::Unsupported
        );
    }

    #[test]
    fn message_type_codes_round_trip() {
        for t in 0..=255u8 {
            let m = Icmpv6Message::from(t);
            assert_eq!(u8::from(m), t);
            assert_eq!(m.is_error(), t < 128);
        }
    }

    proptest! {
        #[test]
        fn repr_round_trip(
            kind in 0u8..6, x in any::<u32>(), code in any::<u8>(),
            s in any::<u128>(), d in any::<u128>(),
            data in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let (src, dst) = (Ipv6Addr::from(s), Ipv6Addr::from(d));
            let r = match kind {
                0 => Icmpv6Repr::DestUnreachable { code, invoking: &data },
                1 => Icmpv6Repr::PacketTooBig { mtu: x, invoking: &data },
                2 => Icmpv6Repr::TimeExceeded { code, invoking: &data },
                3 => Icmpv6Repr::ParamProblem { code, pointer: x, invoking: &data },
                4 => Icmpv6Repr::EchoRequest { ident: x as u16, seq_no: (x >> 16) as u16, data: &data },
                _ => Icmpv6Repr::EchoReply { ident: x as u16, seq_no: (x >> 16) as u16, data: &data },
            };
            let mut out = vec![0u8; r.buffer_len()];
            r.emit(&src, &dst, &mut Icmpv6Packet::new_unchecked(&mut out[..])).unwrap();
            let p = Icmpv6Packet::new_checked(&out[..]).unwrap();
            prop_assert_eq!(Icmpv6Repr::parse(&src, &dst, &p).unwrap(), r);
            let (e, _) = etherparse::Icmpv6Header::from_slice(&out).unwrap();
            let want = e.icmp_type.calc_checksum(src.octets(), dst.octets(), &data).unwrap();
            prop_assert_eq!(p.checksum(), want);
        }
    }
}
