//! IPv6 headers (RFC 8200) and the extension-header walk to the transport
//! header.
//!
//! `new_checked` checks: 40 bytes present, version 6, and the payload length
//! fits in the buffer (bytes beyond it, Ethernet padding, are ignored).

use std::net::Ipv6Addr;

use crate::{Error, Result, be16, be32, checksum, ip_proto, put16, put32};

/// Fixed header length.
pub const HEADER_LEN: usize = 40;
/// Extension headers [`Ipv6Packet::walk_ext_headers`] follows before giving up.
pub const MAX_EXT_HEADERS: usize = 8;

mod field {
    pub const VER_TC_FLOW: usize = 0;
    pub const LENGTH: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: usize = 8;
    pub const DST: usize = 24;
}

/// A zero-copy view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

/// What a Fragment header (RFC 8200 §4.5) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6FragmentInfo {
    /// Fragment offset in bytes.
    pub offset: usize,
    pub more: bool,
    pub ident: u32,
}

/// The result of walking the extension-header chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6ExtWalk {
    /// The upper-layer protocol (TCP, UDP, ICMPv6, ...), or where the walk
    /// had to stop: `ESP` (encrypted), `IPV6_NO_NEXT`, or the next header of
    /// a non-first fragment (its header is in another fragment).
    pub protocol: u8,
    /// Offset of the upper-layer header from the start of the IPv6 header.
    pub offset: usize,
    /// Set when a Fragment header was crossed.
    pub fragment: Option<Ipv6FragmentInfo>,
    /// Whether a Hop-by-Hop Options header is present (routers must look
    /// at it, RFC 8200 §4.3).
    pub hop_by_hop: bool,
}

impl Ipv6ExtWalk {
    /// Whether the upper-layer header is in this packet: false for a
    /// non-first fragment, ESP and No Next Header.
    #[inline]
    pub fn has_transport(&self) -> bool {
        !matches!(self.fragment, Some(f) if f.offset != 0)
            && self.protocol != ip_proto::ESP
            && self.protocol != ip_proto::IPV6_NO_NEXT
    }
}

/// Whether `next_header` names an extension header the walk steps over.
#[inline]
pub const fn is_extension_header(next_header: u8) -> bool {
    matches!(
        next_header,
        ip_proto::HOP_BY_HOP
            | ip_proto::IPV6_ROUTING
            | ip_proto::IPV6_FRAGMENT
            | ip_proto::IPV6_DEST_OPTS
            | ip_proto::AH
            | ip_proto::MOBILITY
            | ip_proto::HIP
            | ip_proto::SHIM6
    )
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps a buffer without checking; accessors may panic unless it holds
    /// the header and the payload length it announces.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wraps a buffer after the checks listed in the module documentation.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(Error::BadVersion);
        }
        if b.len() < HEADER_LEN + usize::from(be16(b, field::LENGTH)) {
            return Err(Error::Truncated);
        }
        Ok(Ipv6Packet { buffer })
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
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (be16(self.buffer.as_ref(), 0) >> 4) as u8
    }

    #[inline]
    pub fn flow_label(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VER_TC_FLOW) & 0x000f_ffff
    }

    #[inline]
    pub fn payload_len(&self) -> usize {
        usize::from(be16(self.buffer.as_ref(), field::LENGTH))
    }

    /// Header length plus payload length.
    #[inline]
    pub fn total_len(&self) -> usize {
        HEADER_LEN + self.payload_len()
    }

    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }

    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.src_octets())
    }

    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.dst_octets())
    }

    #[inline]
    pub fn src_octets(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC..field::SRC + 16]);
        a
    }

    #[inline]
    pub fn dst_octets(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST..field::DST + 16]);
        a
    }

    /// The payload (extension headers included), padding cut off.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.total_len()]
    }

    /// Header and payload, padding cut off.
    #[inline]
    pub fn packet(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.total_len()]
    }

    /// Walks the extension headers (RFC 8200 §4) to the upper-layer header.
    ///
    /// Steps over Hop-by-Hop (only as the first header, §4.1), Routing,
    /// Fragment, Destination Options, AH (RFC 4302: length in 4-byte units),
    /// Mobility, HIP and Shim6. Stops at ESP, No Next Header, and after a
    /// Fragment header with a non-zero offset. Errors: `Truncated` when a
    /// header runs past the payload length, `Malformed` for a Hop-by-Hop
    /// header that is not first, `TooManyExtHeaders` beyond
    /// [`MAX_EXT_HEADERS`] (each step advances, so the walk always ends).
    #[inline]
    pub fn walk_ext_headers(&self) -> Result<Ipv6ExtWalk> {
        let b = self.packet();
        let mut walk = Ipv6ExtWalk {
            protocol: self.next_header(),
            offset: HEADER_LEN,
            fragment: None,
            hop_by_hop: false,
        };
        let mut count = 0;
        while is_extension_header(walk.protocol) {
            if count == MAX_EXT_HEADERS {
                return Err(Error::TooManyExtHeaders);
            }
            let at = walk.offset;
            if b.len() < at + 8 {
                return Err(Error::Truncated);
            }
            let next = b[at];
            let len = match walk.protocol {
                ip_proto::HOP_BY_HOP => {
                    if count != 0 {
                        return Err(Error::Malformed);
                    }
                    walk.hop_by_hop = true;
                    (usize::from(b[at + 1]) + 1) * 8
                }
                ip_proto::IPV6_FRAGMENT => {
                    let off_flags = be16(b, at + 2);
                    let frag = Ipv6FragmentInfo {
                        offset: usize::from(off_flags & 0xfff8),
                        more: off_flags & 1 != 0,
                        ident: be32(b, at + 4),
                    };
                    walk.fragment = Some(frag);
                    8
                }
                ip_proto::AH => (usize::from(b[at + 1]) + 2) * 4,
                _ => (usize::from(b[at + 1]) + 1) * 8,
            };
            if b.len() < at + len {
                return Err(Error::Truncated);
            }
            walk.protocol = next;
            walk.offset = at + len;
            count += 1;
            if matches!(walk.fragment, Some(f) if f.offset != 0) {
                break;
            }
        }
        Ok(walk)
    }

    /// The pseudo-header sum for an upper-layer payload of `len` bytes
    /// (RFC 8200 §8.1; `protocol` is the upper-layer protocol).
    #[inline]
    pub fn pseudo_header_sum(&self, protocol: u8, len: usize) -> u16 {
        checksum::pseudo_header_v6(&self.src_addr(), &self.dst_addr(), protocol, len as u32)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Writes version 6, traffic class and flow label.
    #[inline]
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let v = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        put32(self.buffer.as_mut(), field::VER_TC_FLOW, v);
    }

    #[inline]
    pub fn set_payload_len(&mut self, len: u16) {
        put16(self.buffer.as_mut(), field::LENGTH, len);
    }

    #[inline]
    pub fn set_next_header(&mut self, nh: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = nh;
    }

    #[inline]
    pub fn set_hop_limit(&mut self, h: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = h;
    }

    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC..field::SRC + 16].copy_from_slice(&a.octets());
    }

    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST..field::DST + 16].copy_from_slice(&a.octets());
    }

    /// Decrements the hop limit (RFC 8200 §3); `None` when it is already 0.
    /// IPv6 has no header checksum to update.
    #[inline]
    pub fn decrement_hop_limit(&mut self) -> Option<u8> {
        let h = self.hop_limit().checked_sub(1)?;
        self.set_hop_limit(h);
        Some(h)
    }

    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let tl = self.total_len();
        &mut self.buffer.as_mut()[HEADER_LEN..tl]
    }
}

/// An owned IPv6 fixed header (extension headers are part of the payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub next_header: u8,
    pub payload_len: usize,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
}

impl Ipv6Repr {
    /// A plain header with hop limit 64.
    pub fn new(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, payload_len: usize) -> Ipv6Repr {
        Ipv6Repr {
            src,
            dst,
            next_header,
            payload_len,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
    }

    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<Ipv6Repr> {
        Ok(Ipv6Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: p.payload_len(),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        })
    }

    #[inline]
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the fixed header; the buffer must hold at least 40 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv6Packet<T>) -> Result<()> {
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = u16::try_from(self.payload_len).map_err(|_| Error::BadLength)?;
        if self.flow_label > 0x000f_ffff {
            return Err(Error::Malformed);
        }
        p.set_version_tc_flow(self.traffic_class, self.flow_label);
        p.set_payload_len(len);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(self.src);
        p.set_dst_addr(self.dst);
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Ethernet + IPv6 (flow label 0x12345) + UDP 2001:2::108:2000 ->
    /// 2001:2:0:8000::108:2000, 18 data bytes; tcpdump: "[udp sum ok]".
    pub(crate) const ETH_IPV6_UDP: [u8; 80] = [
        0x52, 0x54, 0x00, 0xab, 0xcd, 0xef, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x86, 0xdd, 0x60,
        0x01, 0x23, 0x45, 0x00, 0x1a, 0x11, 0x40, 0x20, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x20, 0x01, 0x00, 0x02, 0x00, 0x00, 0x80,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x07, 0xd0, 0x07, 0xd0, 0x00, 0x1a,
        0x14, 0x65, 0x66, 0x61, 0x73, 0x74, 0x66, 0x77, 0x64, 0x2d, 0x73, 0x65, 0x71, 0x2d, 0x30,
        0x30, 0x30, 0x30, 0x30, 0x31,
    ];
    /// IPv6: Hop-by-Hop (router alert, PadN) -> Destination Options ->
    /// Fragment (offset 0, M=1, id 0xdeadbeef) -> UDP.
    pub(crate) const IPV6_EXT_CHAIN_UDP: [u8; 90] = [
        0x60, 0x01, 0x23, 0x45, 0x00, 0x32, 0x00, 0x40, 0x20, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x20, 0x01, 0x00, 0x02, 0x00, 0x00,
        0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x3c, 0x00, 0x05, 0x02, 0x00,
        0x00, 0x01, 0x00, 0x2c, 0x00, 0x01, 0x04, 0x00, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x01,
        0xde, 0xad, 0xbe, 0xef, 0x07, 0xd0, 0x07, 0xd0, 0x00, 0x1a, 0x14, 0x65, 0x66, 0x61, 0x73,
        0x74, 0x66, 0x77, 0x64, 0x2d, 0x73, 0x65, 0x71, 0x2d, 0x30, 0x30, 0x30, 0x30, 0x30, 0x31,
    ];
    /// IPv6 non-first fragment (offset 1232): the UDP header is elsewhere.
    pub(crate) const IPV6_FRAG_NONFIRST: [u8; 64] = [
        0x60, 0x01, 0x23, 0x45, 0x00, 0x18, 0x2c, 0x40, 0x20, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x20, 0x01, 0x00, 0x02, 0x00, 0x00,
        0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x11, 0x00, 0x04, 0xd0, 0xde,
        0xad, 0xbe, 0xef, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00,
    ];
    /// IPv6: Routing (type 4, one segment) -> AH (24 bytes) -> TCP SYN
    /// 40000 -> 443; tcpdump: "cksum 0x4fd0 (correct)".
    pub(crate) const IPV6_RT_AH_TCP: [u8; 108] = [
        0x60, 0x01, 0x23, 0x45, 0x00, 0x44, 0x2b, 0x40, 0x20, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x20, 0x01, 0x00, 0x02, 0x00, 0x00,
        0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x33, 0x02, 0x04, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x20, 0x01, 0x00, 0x02, 0x00, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x01, 0x08, 0x06, 0x04, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x9c, 0x40,
        0x01, 0xbb, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x50, 0x02, 0xff, 0xff, 0x4f,
        0xd0, 0x00, 0x00,
    ];

    #[test]
    fn udp_fixture() {
        let p = Ipv6Packet::new_checked(&ETH_IPV6_UDP[14..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 26);
        assert_eq!(p.next_header(), ip_proto::UDP);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), "2001:2::108".parse::<Ipv6Addr>().unwrap());
        assert_eq!(
            p.dst_addr(),
            "2001:2:0:8000::108".parse::<Ipv6Addr>().unwrap()
        );
        let w = p.walk_ext_headers().unwrap();
        assert_eq!(
            (w.protocol, w.offset, w.fragment, w.hop_by_hop),
            (ip_proto::UDP, 40, None, false)
        );
        assert!(w.has_transport());
        let r = Ipv6Repr::parse(&p).unwrap();
        let mut out = [0u8; 40];
        r.emit(&mut Ipv6Packet::new_unchecked(&mut out[..]))
            .unwrap();
        assert_eq!(out[..], ETH_IPV6_UDP[14..54]);
    }

    #[test]
    fn ext_chain_fixture() {
        let p = Ipv6Packet::new_checked(&IPV6_EXT_CHAIN_UDP[..]).unwrap();
        let w = p.walk_ext_headers().unwrap();
        assert_eq!(w.protocol, ip_proto::UDP);
        assert_eq!(w.offset, 40 + 8 + 8 + 8);
        assert!(w.hop_by_hop);
        assert_eq!(
            w.fragment,
            Some(Ipv6FragmentInfo {
                offset: 0,
                more: true,
                ident: 0xdeadbeef
            })
        );
        assert!(w.has_transport());
        assert_eq!(
            &p.packet()[w.offset..w.offset + 4],
            &[0x07, 0xd0, 0x07, 0xd0]
        );
    }

    #[test]
    fn non_first_fragment_stops() {
        let p = Ipv6Packet::new_checked(&IPV6_FRAG_NONFIRST[..]).unwrap();
        let w = p.walk_ext_headers().unwrap();
        assert_eq!(w.protocol, ip_proto::UDP);
        assert_eq!(w.offset, 48);
        assert_eq!(w.fragment.unwrap().offset, 1232);
        assert!(!w.fragment.unwrap().more);
        assert!(!w.has_transport());
    }

    #[test]
    fn routing_and_ah_fixture() {
        let p = Ipv6Packet::new_checked(&IPV6_RT_AH_TCP[..]).unwrap();
        let w = p.walk_ext_headers().unwrap();
        assert_eq!((w.protocol, w.offset), (ip_proto::TCP, 40 + 24 + 24));
        let tcp = crate::TcpPacket::new_checked(&p.packet()[w.offset..]).unwrap();
        assert_eq!(tcp.dst_port(), 443);
        assert!(tcp.verify_checksum_v6(&p.src_addr(), &p.dst_addr()));
    }

    #[test]
    fn walk_stops_safely() {
        // Every truncation of the chain inside the extension headers is
        // reported as Truncated (payload length patched to match).
        for cut in 40..64 {
            let mut b = IPV6_EXT_CHAIN_UDP[..cut].to_vec();
            let pl = (cut - 40) as u16;
            b[4..6].copy_from_slice(&pl.to_be_bytes());
            let p = Ipv6Packet::new_checked(&b[..]).unwrap();
            assert_eq!(
                p.walk_ext_headers().unwrap_err(),
                Error::Truncated,
                "cut {cut}"
            );
        }
        // Hop-by-Hop after the first position is refused.
        let mut b = IPV6_EXT_CHAIN_UDP;
        b[48] = ip_proto::HOP_BY_HOP; // DestOpts' next header
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.walk_ext_headers().unwrap_err(), Error::Malformed);
        // A long chain of Destination Options headers hits the limit.
        let mut b = [0u8; 40 + 8 * (MAX_EXT_HEADERS + 1) + 8];
        b[0] = 0x60;
        let pl = (b.len() - 40) as u16;
        b[4..6].copy_from_slice(&pl.to_be_bytes());
        b[6] = ip_proto::IPV6_DEST_OPTS;
        for i in 0..=MAX_EXT_HEADERS {
            b[40 + 8 * i] = ip_proto::IPV6_DEST_OPTS;
        }
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.walk_ext_headers().unwrap_err(), Error::TooManyExtHeaders);
        // ESP and No Next Header end the walk without a transport header.
        b[6] = ip_proto::ESP;
        let w = Ipv6Packet::new_checked(&b[..])
            .unwrap()
            .walk_ext_headers()
            .unwrap();
        assert!(!w.has_transport());
    }

    #[test]
    fn refuses_bad_headers() {
        let good = &ETH_IPV6_UDP[14..];
        for n in 0..66 {
            assert_eq!(
                Ipv6Packet::new_checked(&good[..n]).unwrap_err(),
                Error::Truncated
            );
        }
        let mut b = good.to_vec();
        b[0] = 0x45;
        assert_eq!(
            Ipv6Packet::new_checked(&b[..]).unwrap_err(),
            Error::BadVersion
        );
    }

    #[test]
    fn setters() {
        let mut b = ETH_IPV6_UDP;
        let mut p = Ipv6Packet::new_checked(&mut b[14..]).unwrap();
        assert_eq!(p.decrement_hop_limit(), Some(63));
        p.set_hop_limit(0);
        assert_eq!(p.decrement_hop_limit(), None);
        p.set_version_tc_flow(0xb8, 0xfffff);
        assert_eq!(
            (p.version(), p.traffic_class(), p.flow_label()),
            (6, 0xb8, 0xfffff)
        );
        p.set_src_addr(Ipv6Addr::LOCALHOST);
        assert_eq!(p.src_addr(), Ipv6Addr::LOCALHOST);
    }

    #[test]
    fn cross_check_etherparse() {
        for b in [
            &ETH_IPV6_UDP[14..],
            &IPV6_EXT_CHAIN_UDP[..],
            &IPV6_RT_AH_TCP[..],
        ] {
            let ours = Ipv6Packet::new_checked(b).unwrap();
            let w = ours.walk_ext_headers().unwrap();
            let theirs = etherparse::SlicedPacket::from_ip(b).unwrap();
            let net = theirs.net.unwrap();
            let etherparse::InternetSlice::Ipv6(v6) = net else {
                panic!("not v6")
            };
            assert_eq!(v6.header().source_addr(), ours.src_addr());
            assert_eq!(v6.header().hop_limit(), ours.hop_limit());
            assert_eq!(v6.payload().ip_number.0, w.protocol);
            assert_eq!(v6.payload().payload.len(), ours.total_len() - w.offset);
        }
    }

    proptest! {
        #[test]
        fn repr_round_trip(
            s in any::<u128>(), d in any::<u128>(), nh in any::<u8>(), len in 0usize..2000,
            hl in any::<u8>(), tc in any::<u8>(), fl in 0u32..0x10_0000,
        ) {
            let r = Ipv6Repr {
                src: s.into(), dst: d.into(), next_header: nh, payload_len: len,
                hop_limit: hl, traffic_class: tc, flow_label: fl,
            };
            let mut b = vec![0u8; 40 + len];
            r.emit(&mut Ipv6Packet::new_unchecked(&mut b[..])).unwrap();
            let p = Ipv6Packet::new_checked(&b[..]).unwrap();
            prop_assert_eq!(Ipv6Repr::parse(&p).unwrap(), r);
            let (e, _) = etherparse::Ipv6Header::from_slice(&b).unwrap();
            prop_assert_eq!(e.flow_label.value(), fl);
            prop_assert_eq!(e.traffic_class, tc);
        }
    }
}
