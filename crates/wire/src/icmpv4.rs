//! ICMP for IPv4 (RFC 792; router behaviour RFC 1812 §4.3; fragmentation
//! needed with the next-hop MTU, RFC 1191 §4).
//!
//! `new_checked` checks only that the 8-byte header is present; every
//! accessor reads inside it or returns the rest as `data()`.

use crate::{Error, Result, be16, checksum, put16};

pub const HEADER_LEN: usize = 8;

/// Largest ICMPv4 error datagram a router sends, IP header included: the
/// error quotes as much of the original as fits in 576 bytes (RFC 1812
/// §4.3.2.3).
pub const MAX_ERROR_DATAGRAM_LEN: usize = 576;

/// Message types fastfwd reads or sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv4Message {
    EchoReply,
    DestUnreachable,
    SourceQuench,
    Redirect,
    EchoRequest,
    TimeExceeded,
    ParamProblem,
    Timestamp,
    TimestampReply,
    Unknown(u8),
}

impl From<u8> for Icmpv4Message {
    #[inline]
    fn from(t: u8) -> Self {
        match t {
            0 => Icmpv4Message::EchoReply,
            3 => Icmpv4Message::DestUnreachable,
            4 => Icmpv4Message::SourceQuench,
            5 => Icmpv4Message::Redirect,
            8 => Icmpv4Message::EchoRequest,
            11 => Icmpv4Message::TimeExceeded,
            12 => Icmpv4Message::ParamProblem,
            13 => Icmpv4Message::Timestamp,
            14 => Icmpv4Message::TimestampReply,
            t => Icmpv4Message::Unknown(t),
        }
    }
}

impl From<Icmpv4Message> for u8 {
    #[inline]
    fn from(m: Icmpv4Message) -> u8 {
        match m {
            Icmpv4Message::EchoReply => 0,
            Icmpv4Message::DestUnreachable => 3,
            Icmpv4Message::SourceQuench => 4,
            Icmpv4Message::Redirect => 5,
            Icmpv4Message::EchoRequest => 8,
            Icmpv4Message::TimeExceeded => 11,
            Icmpv4Message::ParamProblem => 12,
            Icmpv4Message::Timestamp => 13,
            Icmpv4Message::TimestampReply => 14,
            Icmpv4Message::Unknown(t) => t,
        }
    }
}

impl Icmpv4Message {
    /// Error messages, to which no ICMP error may be sent (RFC 1812
    /// §4.3.2.7). Unknown types are treated as errors to stay silent.
    #[inline]
    pub fn is_error(self) -> bool {
        !matches!(
            self,
            Icmpv4Message::EchoReply
                | Icmpv4Message::EchoRequest
                | Icmpv4Message::Timestamp
                | Icmpv4Message::TimestampReply
        )
    }
}

/// Destination Unreachable codes (RFC 792, RFC 1812 §5.2.7.1).
pub mod unreachable {
    pub const NET: u8 = 0;
    pub const HOST: u8 = 1;
    pub const PROTOCOL: u8 = 2;
    pub const PORT: u8 = 3;
    /// Fragmentation needed and DF set; carries the next-hop MTU.
    pub const FRAG_NEEDED: u8 = 4;
    pub const SOURCE_ROUTE_FAILED: u8 = 5;
    pub const NET_UNKNOWN: u8 = 6;
    pub const HOST_UNKNOWN: u8 = 7;
    pub const NET_PROHIBITED: u8 = 9;
    pub const HOST_PROHIBITED: u8 = 10;
    pub const ADMIN_PROHIBITED: u8 = 13;
}

/// Time Exceeded codes.
pub mod time_exceeded {
    pub const TTL: u8 = 0;
    pub const REASSEMBLY: u8 = 1;
}

/// A zero-copy view of an ICMPv4 message.
#[derive(Debug, Clone)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv4Packet { buffer }
    }

    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Icmpv4Packet { buffer })
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn msg_type(&self) -> Icmpv4Message {
        Icmpv4Message::from(self.buffer.as_ref()[0])
    }

    #[inline]
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    /// Echo identifier (bytes 4-5).
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }

    /// Echo sequence number (bytes 6-7).
    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    /// Next-hop MTU of a fragmentation-needed message (bytes 6-7).
    #[inline]
    pub fn next_hop_mtu(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    /// Parameter-problem pointer (byte 4).
    #[inline]
    pub fn pointer(&self) -> u8 {
        self.buffer.as_ref()[4]
    }

    /// Redirect gateway (bytes 4-7).
    #[inline]
    pub fn gateway(&self) -> std::net::Ipv4Addr {
        let b = self.buffer.as_ref();
        std::net::Ipv4Addr::new(b[4], b[5], b[6], b[7])
    }

    /// Everything after the 8-byte header (echo data, or the invoking
    /// packet's header and first bytes for errors).
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// Whether the checksum over the whole message verifies.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::verifies(checksum::sum(self.buffer.as_ref()))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    #[inline]
    pub fn set_msg_type(&mut self, t: Icmpv4Message) {
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
    pub fn set_echo_ident(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 4, v);
    }

    #[inline]
    pub fn set_echo_seq_no(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 6, v);
    }

    #[inline]
    pub fn set_next_hop_mtu(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 6, v);
    }

    /// Sets the 4 bytes after the checksum at once.
    #[inline]
    pub fn set_rest_of_header(&mut self, v: [u8; 4]) {
        self.buffer.as_mut()[4..8].copy_from_slice(&v);
    }

    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }

    /// Computes the checksum over the whole buffer.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }
}

/// An ICMPv4 message, borrowing its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icmpv4Repr<'a> {
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
    /// `next_hop_mtu` is meaningful for code `FRAG_NEEDED` and zero
    /// otherwise; `invoking` is the quoted original packet.
    DestUnreachable {
        code: u8,
        next_hop_mtu: u16,
        invoking: &'a [u8],
    },
    TimeExceeded {
        code: u8,
        invoking: &'a [u8],
    },
    ParamProblem {
        pointer: u8,
        invoking: &'a [u8],
    },
}

impl<'a> Icmpv4Repr<'a> {
    /// Reads a message after verifying its checksum. Types other than the
    /// five above are `Unsupported`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Icmpv4Packet<&'a T>) -> Result<Icmpv4Repr<'a>> {
        if !p.verify_checksum() {
            return Err(Error::BadChecksum);
        }
        let data = &p.buffer.as_ref()[HEADER_LEN..];
        Ok(match p.msg_type() {
            Icmpv4Message::EchoRequest if p.msg_code() == 0 => Icmpv4Repr::EchoRequest {
                ident: p.echo_ident(),
                seq_no: p.echo_seq_no(),
                data,
            },
            Icmpv4Message::EchoReply if p.msg_code() == 0 => Icmpv4Repr::EchoReply {
                ident: p.echo_ident(),
                seq_no: p.echo_seq_no(),
                data,
            },
            Icmpv4Message::DestUnreachable => Icmpv4Repr::DestUnreachable {
                code: p.msg_code(),
                next_hop_mtu: if p.msg_code() == unreachable::FRAG_NEEDED {
                    p.next_hop_mtu()
                } else {
                    0
                },
                invoking: data,
            },
            Icmpv4Message::TimeExceeded => Icmpv4Repr::TimeExceeded {
                code: p.msg_code(),
                invoking: data,
            },
            Icmpv4Message::ParamProblem => Icmpv4Repr::ParamProblem {
                pointer: p.pointer(),
                invoking: data,
            },
            Icmpv4Message::EchoRequest | Icmpv4Message::EchoReply => return Err(Error::Malformed),
            _ => return Err(Error::Unsupported),
        })
    }

    fn body(&self) -> &'a [u8] {
        match *self {
            Icmpv4Repr::EchoRequest { data, .. } | Icmpv4Repr::EchoReply { data, .. } => data,
            Icmpv4Repr::DestUnreachable { invoking, .. }
            | Icmpv4Repr::TimeExceeded { invoking, .. }
            | Icmpv4Repr::ParamProblem { invoking, .. } => invoking,
        }
    }

    /// Header plus data.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.body().len()
    }

    /// Writes the whole message with its checksum. The view's buffer must
    /// be exactly [`buffer_len`](Self::buffer_len) long (the checksum covers
    /// all of it), or `Truncated` / `BadLength` is returned.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Icmpv4Packet<T>) -> Result<()> {
        let len = self.buffer_len();
        match p.buffer.as_ref().len() {
            l if l < len => return Err(Error::Truncated),
            l if l > len => return Err(Error::BadLength),
            _ => {}
        }
        let (t, code, rest) = match *self {
            Icmpv4Repr::EchoRequest { ident, seq_no, .. } => {
                (Icmpv4Message::EchoRequest, 0, rest_u16(ident, seq_no))
            }
            Icmpv4Repr::EchoReply { ident, seq_no, .. } => {
                (Icmpv4Message::EchoReply, 0, rest_u16(ident, seq_no))
            }
            Icmpv4Repr::DestUnreachable {
                code, next_hop_mtu, ..
            } => (
                Icmpv4Message::DestUnreachable,
                code,
                rest_u16(0, next_hop_mtu),
            ),
            Icmpv4Repr::TimeExceeded { code, .. } => (Icmpv4Message::TimeExceeded, code, [0; 4]),
            Icmpv4Repr::ParamProblem { pointer, .. } => {
                (Icmpv4Message::ParamProblem, 0, [pointer, 0, 0, 0])
            }
        };
        p.set_msg_type(t);
        p.set_msg_code(code);
        p.set_rest_of_header(rest);
        p.data_mut().copy_from_slice(self.body());
        p.fill_checksum();
        Ok(())
    }
}

fn rest_u16(a: u16, b: u16) -> [u8; 4] {
    let (a, b) = (a.to_be_bytes(), b.to_be_bytes());
    [a[0], a[1], b[0], b[1]]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4::tests::{ETH_IPV4_UDP, IPV4_RA_ICMP_ECHO};
    use crate::{Ipv4Packet, Ipv4Repr, ip_proto};
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    /// IPv4 + ICMP destination unreachable, fragmentation needed, next-hop
    /// MTU 1400, quoting the IPv4 header and 8 bytes of ETH_IPV4_UDP;
    /// tcpdump: "unreachable - need to frag (mtu 1400)".
    pub(crate) const IPV4_FRAG_NEEDED: [u8; 56] = [
        0x45, 0x00, 0x00, 0x38, 0x00, 0x00, 0x00, 0x00, 0x40, 0x01, 0xee, 0x2a, 0xc6, 0x12, 0x00,
        0x0a, 0xc6, 0x12, 0x00, 0x6c, 0x03, 0x04, 0x9e, 0x4c, 0x00, 0x00, 0x05, 0x78, 0x45, 0x00,
        0x00, 0x2e, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x11, 0x91, 0x7b, 0xc6, 0x12, 0x00, 0x6c, 0xc6,
        0x13, 0x00, 0x6c, 0x07, 0xd0, 0x07, 0xd0, 0x00, 0x1a, 0x49, 0x7d,
    ];
    /// ICMP time exceeded in transit quoting the same 28 bytes.
    pub(crate) const ICMPV4_TIME_EXCEEDED: [u8; 36] = [
        0x0b, 0x00, 0x9b, 0xc8, 0x00, 0x00, 0x00, 0x00, 0x45, 0x00, 0x00, 0x2e, 0x1c, 0x46, 0x40,
        0x00, 0x40, 0x11, 0x91, 0x7b, 0xc6, 0x12, 0x00, 0x6c, 0xc6, 0x13, 0x00, 0x6c, 0x07, 0xd0,
        0x07, 0xd0, 0x00, 0x1a, 0x49, 0x7d,
    ];

    #[test]
    fn echo_fixture() {
        let ip = Ipv4Packet::new_checked(&IPV4_RA_ICMP_ECHO[..]).unwrap();
        let p = Icmpv4Packet::new_checked(ip.payload()).unwrap();
        assert_eq!(p.msg_type(), Icmpv4Message::EchoRequest);
        assert!(!p.msg_type().is_error());
        assert_eq!((p.echo_ident(), p.echo_seq_no()), (0x1234, 7));
        assert!(p.verify_checksum());
        let r = Icmpv4Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Icmpv4Repr::EchoRequest {
                ident: 0x1234,
                seq_no: 7,
                data: b"abcdefgh"
            }
        );
        let mut out = [0u8; 16];
        r.emit(&mut Icmpv4Packet::new_unchecked(&mut out[..]))
            .unwrap();
        assert_eq!(&out[..], ip.payload());
    }

    #[test]
    fn frag_needed_fixture() {
        let ip = Ipv4Packet::new_checked(&IPV4_FRAG_NEEDED[..]).unwrap();
        assert_eq!(ip.protocol(), ip_proto::ICMP);
        let p = Icmpv4Packet::new_checked(ip.payload()).unwrap();
        assert_eq!(p.msg_type(), Icmpv4Message::DestUnreachable);
        assert!(p.msg_type().is_error());
        assert_eq!(p.msg_code(), unreachable::FRAG_NEEDED);
        assert_eq!(p.next_hop_mtu(), 1400);
        let r = Icmpv4Repr::parse(&p).unwrap();
        let Icmpv4Repr::DestUnreachable {
            code,
            next_hop_mtu,
            invoking,
        } = r
        else {
            panic!("{r:?}")
        };
        assert_eq!((code, next_hop_mtu), (unreachable::FRAG_NEEDED, 1400));
        assert_eq!(invoking, &ETH_IPV4_UDP[14..42]);
        // Build the same message from the original packet and compare.
        let quoted = &ETH_IPV4_UDP[14..42];
        let icmp = Icmpv4Repr::DestUnreachable {
            code: unreachable::FRAG_NEEDED,
            next_hop_mtu: 1400,
            invoking: quoted,
        };
        let mut ipr = Ipv4Repr::new(
            Ipv4Addr::new(198, 18, 0, 10),
            Ipv4Addr::new(198, 18, 0, 108),
            ip_proto::ICMP,
            icmp.buffer_len(),
        );
        ipr.ident = 0;
        let mut out = vec![0u8; ipr.total_len()];
        ipr.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]))
            .unwrap();
        icmp.emit(&mut Icmpv4Packet::new_unchecked(&mut out[20..]))
            .unwrap();
        assert_eq!(&out[..], &IPV4_FRAG_NEEDED[..]);
    }

    #[test]
    fn time_exceeded_fixture() {
        let p = Icmpv4Packet::new_checked(&ICMPV4_TIME_EXCEEDED[..]).unwrap();
        let r = Icmpv4Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Icmpv4Repr::TimeExceeded {
                code: time_exceeded::TTL,
                invoking: &ETH_IPV4_UDP[14..42]
            }
        );
        let inner = Ipv4Packet::new_checked(&ETH_IPV4_UDP[14..]).unwrap();
        assert_eq!(
            Ipv4Packet::new_checked(p.data()).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(&p.data()[..20], inner.header());
    }

    #[test]
    fn refusals() {
        assert_eq!(
            Icmpv4Packet::new_checked(&[8u8, 0, 0][..]).unwrap_err(),
            Error::Truncated
        );
        let mut b = ICMPV4_TIME_EXCEEDED;
        b[2] ^= 0x80;
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p).unwrap_err(), Error::BadChecksum);
        let mut b = [13u8, 0, 0, 0, 0, 0, 0, 0];
        Icmpv4Packet::new_checked(&mut b[..])
            .unwrap()
            .fill_checksum();
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.msg_type(), Icmpv4Message::Timestamp);
        assert_eq!(Icmpv4Repr::parse(&p).unwrap_err(), Error::Unsupported);
        // emit needs the exact length: the checksum covers the whole buffer.
        let r = Icmpv4Repr::EchoReply {
            ident: 1,
            seq_no: 2,
            data: b"xy",
        };
        let mut small = [0u8; 9];
        let mut big = [0u8; 11];
        assert_eq!(
            r.emit(&mut Icmpv4Packet::new_unchecked(&mut small[..])),
            Err(Error::Truncated)
        );
        assert_eq!(
            r.emit(&mut Icmpv4Packet::new_unchecked(&mut big[..])),
            Err(Error::BadLength)
        );
    }

    #[test]
    fn message_type_codes_round_trip() {
        for t in 0..=255u8 {
            assert_eq!(u8::from(Icmpv4Message::from(t)), t);
        }
    }

    proptest! {
        #[test]
        fn repr_round_trip(
            kind in 0u8..5, a in any::<u16>(), b in any::<u16>(), code in any::<u8>(),
            data in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let r = match kind {
                0 => Icmpv4Repr::EchoRequest { ident: a, seq_no: b, data: &data },
                1 => Icmpv4Repr::EchoReply { ident: a, seq_no: b, data: &data },
                2 => Icmpv4Repr::DestUnreachable {
                    code: unreachable::FRAG_NEEDED, next_hop_mtu: a, invoking: &data,
                },
                3 => Icmpv4Repr::TimeExceeded { code, invoking: &data },
                _ => Icmpv4Repr::ParamProblem { pointer: code, invoking: &data },
            };
            let mut out = vec![0u8; r.buffer_len()];
            r.emit(&mut Icmpv4Packet::new_unchecked(&mut out[..])).unwrap();
            let p = Icmpv4Packet::new_checked(&out[..]).unwrap();
            prop_assert!(p.verify_checksum());
            prop_assert_eq!(Icmpv4Repr::parse(&p).unwrap(), r);
            let (e, _) = etherparse::Icmpv4Header::from_slice(&out).unwrap();
            prop_assert_eq!(e.checksum, p.checksum());
        }
    }
}
