//! IPv4 headers (RFC 791), options included.
//!
//! `new_checked` validates what RFC 1812 §5.2.2 asks a router to check
//! before forwarding, except the checksum (a separate, explicit call):
//! the buffer holds 20 bytes, version is 4, IHL >= 5, the header fits,
//! total length >= header length and total length fits in the buffer.
//! Bytes after the total length (Ethernet padding) are ignored.

use std::net::Ipv4Addr;

use crate::{Error, Result, be16, checksum, put16};

/// Minimum header length (IHL 5).
pub const MIN_HEADER_LEN: usize = 20;
/// Maximum header length (IHL 15).
pub const MAX_HEADER_LEN: usize = 60;

mod field {
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLAGS_FRAG: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
}

/// Don't Fragment flag in the flags/fragment-offset word.
pub const FLAG_DF: u16 = 0x4000;
/// More Fragments flag.
pub const FLAG_MF: u16 = 0x2000;
const FRAG_OFFSET_MASK: u16 = 0x1fff;

/// A zero-copy view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps a buffer without checking; accessors may panic unless the
    /// buffer holds the header and the total length it announces.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wraps a buffer after the length and version checks listed in the
    /// module documentation.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[field::VER_IHL] >> 4 != 4 {
            return Err(Error::BadVersion);
        }
        let hl = usize::from(b[field::VER_IHL] & 0x0f) * 4;
        if hl < MIN_HEADER_LEN {
            return Err(Error::BadHeaderLen);
        }
        let total = usize::from(be16(b, field::LENGTH));
        if total < hl {
            return Err(Error::BadLength);
        }
        if b.len() < total {
            return Err(Error::Truncated);
        }
        Ok(Ipv4Packet { buffer })
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole buffer, padding included.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL x 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    #[inline]
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    #[inline]
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 3
    }

    /// Total length field (header + payload).
    #[inline]
    pub fn total_len(&self) -> usize {
        usize::from(be16(self.buffer.as_ref(), field::LENGTH))
    }

    #[inline]
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT)
    }

    /// The raw flags / fragment-offset word.
    #[inline]
    pub fn flags_frag(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FLAGS_FRAG)
    }

    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.flags_frag() & FLAG_DF != 0
    }

    #[inline]
    pub fn more_frags(&self) -> bool {
        self.flags_frag() & FLAG_MF != 0
    }

    /// Fragment offset in bytes.
    #[inline]
    pub fn frag_offset(&self) -> usize {
        usize::from(self.flags_frag() & FRAG_OFFSET_MASK) * 8
    }

    /// True for any fragment (MF set or offset non-zero).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.flags_frag() & (FLAG_MF | FRAG_OFFSET_MASK) != 0
    }

    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[12], b[13], b[14], b[15])
    }

    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[16], b[17], b[18], b[19])
    }

    /// The header bytes (options included).
    #[inline]
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }

    /// The option bytes (empty for IHL 5).
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[MIN_HEADER_LEN..self.header_len()]
    }

    /// The options, one by one.
    #[inline]
    pub fn option_iter(&self) -> Ipv4OptionIter<'_> {
        Ipv4OptionIter::new(self.options())
    }

    /// Whether the header checksum verifies (RFC 1812 §5.2.2).
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::verifies(checksum::sum_ipv4_header(self.header()))
    }

    /// The payload: from the header's end to the total length.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len()]
    }

    /// Header and payload up to the total length (padding cut off).
    #[inline]
    pub fn packet(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.total_len()]
    }

    /// The pseudo-header sum for this packet's transport payload.
    #[inline]
    pub fn pseudo_header_sum(&self) -> u16 {
        checksum::pseudo_header_v4(
            self.src_addr(),
            self.dst_addr(),
            self.protocol(),
            (self.total_len() - self.header_len()) as u16,
        )
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    #[inline]
    pub fn set_version_and_header_len(&mut self, header_len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) as u8 & 0x0f);
    }

    #[inline]
    pub fn set_dscp_ecn(&mut self, dscp: u8, ecn: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = (dscp << 2) | (ecn & 3);
    }

    #[inline]
    pub fn set_total_len(&mut self, len: u16) {
        put16(self.buffer.as_mut(), field::LENGTH, len);
    }

    #[inline]
    pub fn set_ident(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::IDENT, v);
    }

    /// Sets the raw flags / fragment-offset word.
    #[inline]
    pub fn set_flags_frag(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::FLAGS_FRAG, v);
    }

    /// Sets DF, MF and the fragment offset (in bytes, a multiple of 8).
    #[inline]
    pub fn set_fragment(&mut self, dont_frag: bool, more_frags: bool, offset_bytes: usize) {
        let mut v = ((offset_bytes / 8) as u16) & FRAG_OFFSET_MASK;
        if dont_frag {
            v |= FLAG_DF;
        }
        if more_frags {
            v |= FLAG_MF;
        }
        self.set_flags_frag(v);
    }

    #[inline]
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    #[inline]
    pub fn set_protocol(&mut self, p: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = p;
    }

    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM, c);
    }

    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC..field::SRC + 4].copy_from_slice(&a.octets());
    }

    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST..field::DST + 4].copy_from_slice(&a.octets());
    }

    /// Recomputes the header checksum from scratch.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.header());
        self.set_checksum(c);
    }

    /// Decrements the TTL by one and updates the checksum incrementally
    /// (RFC 1812 §5.3.1, RFC 1624). Returns the new TTL; a TTL of 0 is left
    /// unchanged and returns `None` (the caller must not forward it).
    #[inline]
    pub fn decrement_ttl(&mut self) -> Option<u8> {
        let ttl = self.ttl();
        if ttl == 0 {
            return None;
        }
        let c = checksum::update_ttl_decrement(self.checksum());
        self.set_ttl(ttl - 1);
        self.set_checksum(c);
        Some(ttl - 1)
    }

    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[MIN_HEADER_LEN..hl]
    }

    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, tl) = (self.header_len(), self.total_len());
        &mut self.buffer.as_mut()[hl..tl]
    }
}

/// IPv4 option types used by fastfwd (RFC 791 §3.1, RFC 2113).
pub mod option {
    /// End of option list.
    pub const EOL: u8 = 0;
    /// No operation (padding between options).
    pub const NOP: u8 = 1;
    pub const RECORD_ROUTE: u8 = 7;
    pub const TIMESTAMP: u8 = 68;
    pub const LOOSE_SOURCE_ROUTE: u8 = 131;
    pub const STRICT_SOURCE_ROUTE: u8 = 137;
    pub const ROUTER_ALERT: u8 = 148;

    /// The "copied" flag: the option is repeated in every fragment.
    #[inline]
    pub const fn is_copied(kind: u8) -> bool {
        kind & 0x80 != 0
    }
}

/// One IPv4 option: its type byte and the bytes after type and length
/// (empty for NOP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Option<'a> {
    pub kind: u8,
    pub data: &'a [u8],
}

/// Walks the option bytes of a header. Stops at EOL; yields
/// `Err(Malformed)` with the offset (within the options) of a bad length
/// and then stops, so a router can answer with a parameter problem
/// pointing at it (RFC 1812 §5.2.5).
#[derive(Debug, Clone)]
pub struct Ipv4OptionIter<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Ipv4OptionIter<'a> {
    #[inline]
    pub fn new(options: &'a [u8]) -> Self {
        Ipv4OptionIter {
            bytes: options,
            at: 0,
        }
    }
}

impl<'a> Iterator for Ipv4OptionIter<'a> {
    /// The option, or the offset of the malformed one.
    type Item = core::result::Result<Ipv4Option<'a>, usize>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let at = self.at;
        let kind = *self.bytes.get(at)?;
        match kind {
            option::EOL => {
                self.at = self.bytes.len();
                None
            }
            option::NOP => {
                self.at += 1;
                Some(Ok(Ipv4Option { kind, data: &[] }))
            }
            _ => {
                let len = self.bytes.get(at + 1).map_or(0, |&l| usize::from(l));
                if len < 2 || at + len > self.bytes.len() {
                    self.at = self.bytes.len();
                    return Some(Err(at));
                }
                self.at += len;
                Some(Ok(Ipv4Option {
                    kind,
                    data: &self.bytes[at + 2..at + len],
                }))
            }
        }
    }
}

/// Writes the options that must be repeated in every fragment after the
/// first (RFC 791 §3.2: those with the copied flag) into `out`, padded with
/// EOL to a multiple of 4, and returns the length written. Malformed option
/// bytes end the copy. `out` of 40 bytes always suffices.
pub fn copy_options_for_fragment(options: &[u8], out: &mut [u8]) -> usize {
    let mut n = 0;
    for opt in Ipv4OptionIter::new(options) {
        let Ok(opt) = opt else { break };
        if !option::is_copied(opt.kind) {
            continue;
        }
        let len = 2 + opt.data.len();
        if n + len > out.len() {
            break;
        }
        out[n] = opt.kind;
        out[n + 1] = len as u8;
        out[n + 2..n + len].copy_from_slice(opt.data);
        n += len;
    }
    while !n.is_multiple_of(4) && n < out.len() {
        out[n] = option::EOL;
        n += 1;
    }
    n
}

/// An owned IPv4 header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv4Repr {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub protocol: u8,
    /// Payload length in bytes (total length minus header length).
    pub payload_len: usize,
    pub ttl: u8,
    pub dscp: u8,
    pub ecn: u8,
    pub ident: u16,
    pub dont_frag: bool,
    pub more_frags: bool,
    /// Fragment offset in bytes (a multiple of 8).
    pub frag_offset: usize,
    /// Option bytes, a multiple of 4, at most 40 (fixed array to stay
    /// allocation-free).
    pub options: Ipv4Options,
}

/// Up to 40 bytes of IPv4 options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Options {
    len: u8,
    bytes: [u8; 40],
}

impl Default for Ipv4Options {
    fn default() -> Self {
        Ipv4Options::NONE
    }
}

impl Ipv4Options {
    pub const NONE: Ipv4Options = Ipv4Options {
        len: 0,
        bytes: [0; 40],
    };

    /// Options from raw bytes; the length must be a multiple of 4, <= 40.
    pub fn new(b: &[u8]) -> Result<Ipv4Options> {
        if b.len() > 40 || !b.len().is_multiple_of(4) {
            return Err(Error::BadHeaderLen);
        }
        let mut o = Ipv4Options {
            len: b.len() as u8,
            bytes: [0; 40],
        };
        o.bytes[..b.len()].copy_from_slice(b);
        Ok(o)
    }

    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len).min(40)]
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Ipv4Repr {
    /// A plain header (TTL 64, no options, not fragmented).
    pub fn new(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, payload_len: usize) -> Ipv4Repr {
        Ipv4Repr {
            src,
            dst,
            protocol,
            payload_len,
            ttl: 64,
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: false,
            more_frags: false,
            frag_offset: 0,
            options: Ipv4Options::NONE,
        }
    }

    /// Reads a checked packet; refuses a bad header checksum.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Ipv4Repr> {
        if !p.verify_checksum() {
            return Err(Error::BadChecksum);
        }
        Ok(Ipv4Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            protocol: p.protocol(),
            payload_len: p.total_len() - p.header_len(),
            ttl: p.ttl(),
            dscp: p.dscp(),
            ecn: p.ecn(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            more_frags: p.more_frags(),
            frag_offset: p.frag_offset(),
            options: Ipv4Options::new(p.options())?,
        })
    }

    /// Header length (20 + options).
    #[inline]
    pub fn buffer_len(&self) -> usize {
        MIN_HEADER_LEN + self.options.len()
    }

    /// Header plus payload.
    #[inline]
    pub fn total_len(&self) -> usize {
        self.buffer_len() + self.payload_len
    }

    /// Writes the header with a correct checksum. The buffer must hold at
    /// least the header; the total length must fit in 16 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv4Packet<T>) -> Result<()> {
        let hl = self.buffer_len();
        if p.buffer.as_ref().len() < hl {
            return Err(Error::Truncated);
        }
        let total = u16::try_from(self.total_len()).map_err(|_| Error::BadLength)?;
        if !self.frag_offset.is_multiple_of(8)
            || self.frag_offset > usize::from(FRAG_OFFSET_MASK) * 8
        {
            return Err(Error::Malformed);
        }
        p.set_version_and_header_len(hl);
        p.set_dscp_ecn(self.dscp, self.ecn);
        p.set_total_len(total);
        p.set_ident(self.ident);
        p.set_fragment(self.dont_frag, self.more_frags, self.frag_offset);
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src_addr(self.src);
        p.set_dst_addr(self.dst);
        p.buffer.as_mut()[MIN_HEADER_LEN..hl].copy_from_slice(self.options.as_bytes());
        p.set_checksum(0);
        let c = checksum::checksum(&p.buffer.as_ref()[..hl]);
        p.set_checksum(c);
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ip_proto;
    use proptest::prelude::*;

    /// Ethernet + IPv4 (DF, TTL 64) + UDP 198.18.0.108:2000 -> 198.19.0.108:2000,
    /// 18 data bytes; tcpdump: "[udp sum ok] UDP, length 18".
    pub(crate) const ETH_IPV4_UDP: [u8; 60] = [
        0x52, 0x54, 0x00, 0xab, 0xcd, 0xef, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x2e, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x11, 0x91, 0x7b, 0xc6, 0x12, 0x00, 0x6c,
        0xc6, 0x13, 0x00, 0x6c, 0x07, 0xd0, 0x07, 0xd0, 0x00, 0x1a, 0x49, 0x7d, 0x66, 0x61, 0x73,
        0x74, 0x66, 0x77, 0x64, 0x2d, 0x73, 0x65, 0x71, 0x2d, 0x30, 0x30, 0x30, 0x30, 0x30, 0x31,
    ];
    /// Ethernet + IPv4 + TCP SYN 40000 -> 80 with an MSS 1460 option.
    pub(crate) const ETH_IPV4_TCP_SYN: [u8; 58] = [
        0x52, 0x54, 0x00, 0xab, 0xcd, 0xef, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x2c, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x06, 0x91, 0x88, 0xc6, 0x12, 0x00, 0x6c,
        0xc6, 0x13, 0x00, 0x6c, 0x9c, 0x40, 0x00, 0x50, 0x01, 0x02, 0x03, 0x04, 0x00, 0x00, 0x00,
        0x00, 0x60, 0x02, 0xfa, 0xf0, 0x6f, 0xa1, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4,
    ];
    /// IPv4 with a Router Alert option (IHL 6), TTL 1, ICMP echo request
    /// to 198.18.0.10; tcpdump: "options (RA)".
    pub(crate) const IPV4_RA_ICMP_ECHO: [u8; 40] = [
        0x46, 0x00, 0x00, 0x28, 0x1c, 0x46, 0x00, 0x00, 0x01, 0x01, 0x7b, 0xf0, 0xc6, 0x12, 0x00,
        0x6c, 0xc6, 0x12, 0x00, 0x0a, 0x94, 0x04, 0x00, 0x00, 0x08, 0x00, 0x54, 0x2f, 0x12, 0x34,
        0x00, 0x07, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68,
    ];

    #[test]
    fn udp_fixture() {
        let p = Ipv4Packet::new_checked(&ETH_IPV4_UDP[14..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 46);
        assert_eq!(p.ident(), 0x1c46);
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), ip_proto::UDP);
        assert_eq!(p.checksum(), 0x917b);
        assert!(p.verify_checksum());
        assert_eq!(p.src_addr(), Ipv4Addr::new(198, 18, 0, 108));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(198, 19, 0, 108));
        assert!(p.options().is_empty());
        assert_eq!(p.payload().len(), 26);
        let r = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(r.payload_len, 26);
        let mut out = [0u8; 20];
        r.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]))
            .unwrap();
        assert_eq!(out[..], ETH_IPV4_UDP[14..34]);
    }

    #[test]
    fn options_fixture() {
        let p = Ipv4Packet::new_checked(&IPV4_RA_ICMP_ECHO[..]).unwrap();
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.options(), &[0x94, 0x04, 0x00, 0x00]);
        assert!(p.verify_checksum());
        assert_eq!(p.ttl(), 1);
        assert_eq!(p.protocol(), ip_proto::ICMP);
        assert_eq!(p.payload().len(), 16);
        let r = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(r.options.as_bytes(), &[0x94, 0x04, 0x00, 0x00]);
        assert_eq!(r.buffer_len(), 24);
        let mut out = [0u8; 24];
        r.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]))
            .unwrap();
        assert_eq!(out[..], IPV4_RA_ICMP_ECHO[..24]);
    }

    #[test]
    fn padding_is_ignored() {
        // A 46-byte packet inside a 60-byte buffer with trailing zeros.
        let mut b = [0u8; 60];
        b[..46].copy_from_slice(&ETH_IPV4_UDP[14..]);
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.packet().len(), 46);
        assert_eq!(p.payload().len(), 26);
    }

    #[test]
    fn refuses_bad_headers() {
        let good = &ETH_IPV4_UDP[14..];
        for n in 0..20 {
            assert_eq!(
                Ipv4Packet::new_checked(&good[..n]).unwrap_err(),
                Error::Truncated
            );
        }
        // Total length 46 does not fit in 45 bytes.
        assert_eq!(
            Ipv4Packet::new_checked(&good[..45]).unwrap_err(),
            Error::Truncated
        );
        let mut b = good.to_vec();
        b[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Error::BadVersion
        );
        b[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Error::BadHeaderLen
        );
        b[0] = 0x4f; // 60-byte header in a 46-byte packet
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Error::BadLength
        );
        b[0] = 0x45;
        b[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Error::BadLength
        );
        let mut c = good.to_vec();
        c[10] ^= 1;
        let p = Ipv4Packet::new_checked(&c[..]).unwrap();
        assert!(!p.verify_checksum());
        assert_eq!(Ipv4Repr::parse(&p).unwrap_err(), Error::BadChecksum);
    }

    #[test]
    fn decrement_ttl_and_setters() {
        let mut b = IPV4_RA_ICMP_ECHO;
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(p.decrement_ttl(), Some(0));
        assert!(p.verify_checksum());
        assert_eq!(p.decrement_ttl(), None);
        assert_eq!(p.ttl(), 0);
        p.set_src_addr(Ipv4Addr::new(10, 0, 0, 1));
        p.set_dst_addr(Ipv4Addr::new(10, 0, 0, 2));
        p.set_fragment(false, true, 1480);
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert!(p.more_frags() && p.is_fragment());
        assert_eq!(p.frag_offset(), 1480);
        let e = etherparse::Ipv4HeaderSlice::from_slice(&b).unwrap();
        assert_eq!(e.source(), [10, 0, 0, 1]);
        assert_eq!(e.fragments_offset().value() as usize * 8, 1480);
        assert_eq!(
            e.header_checksum(),
            Ipv4Packet::new_checked(&b[..]).unwrap().checksum()
        );
    }

    #[test]
    fn cross_check_etherparse() {
        for frame in [&ETH_IPV4_UDP[..], &ETH_IPV4_TCP_SYN[..]] {
            let ours = Ipv4Packet::new_checked(&frame[14..]).unwrap();
            let (theirs, _) = etherparse::Ipv4Header::from_slice(&frame[14..]).unwrap();
            assert_eq!(ours.src_addr().octets(), theirs.source);
            assert_eq!(ours.dst_addr().octets(), theirs.destination);
            assert_eq!(ours.total_len(), usize::from(theirs.total_len));
            assert_eq!(ours.ttl(), theirs.time_to_live);
            assert_eq!(ours.protocol(), theirs.protocol.0);
            assert_eq!(ours.checksum(), theirs.calc_header_checksum());
        }
    }

    #[test]
    fn option_walk_and_fragment_copy() {
        let p = Ipv4Packet::new_checked(&IPV4_RA_ICMP_ECHO[..]).unwrap();
        let opts: Vec<_> = p.option_iter().collect();
        assert_eq!(
            opts,
            vec![Ok(Ipv4Option {
                kind: option::ROUTER_ALERT,
                data: &[0, 0]
            })]
        );
        // NOP, record route (not copied), loose source route (copied), EOL.
        let raw = [
            1, 7, 7, 4, 0, 0, 0, 0, 131, 7, 4, 10, 0, 0, 1, 0, 0, 0, 0, 0,
        ];
        let kinds: Vec<_> = Ipv4OptionIter::new(&raw).map(|o| o.unwrap().kind).collect();
        assert_eq!(
            kinds,
            vec![
                option::NOP,
                option::RECORD_ROUTE,
                option::LOOSE_SOURCE_ROUTE
            ]
        );
        let mut out = [0xaa; 40];
        let n = copy_options_for_fragment(&raw, &mut out);
        assert_eq!(n, 8);
        assert_eq!(&out[..8], &[131, 7, 4, 10, 0, 0, 1, 0]);
        // Bad lengths report where they are.
        assert_eq!(Ipv4OptionIter::new(&[1, 7, 1, 0]).nth(1), Some(Err(1)));
        assert_eq!(
            Ipv4OptionIter::new(&[1, 1, 68, 12, 0, 0]).nth(2),
            Some(Err(2))
        );
        assert_eq!(Ipv4OptionIter::new(&[148]).next(), Some(Err(0)));
    }

    fn arb_repr() -> impl Strategy<Value = Ipv4Repr> {
        (
            (
                any::<u32>(),
                any::<u32>(),
                any::<u8>(),
                0usize..1400,
                any::<u8>(),
            ),
            (
                0u8..64,
                0u8..4,
                any::<u16>(),
                any::<bool>(),
                any::<bool>(),
                0usize..8192,
            ),
            proptest::collection::vec(any::<u8>(), 0..=10),
        )
            .prop_map(
                |((s, d, proto, len, ttl), (dscp, ecn, id, df, mf, off), opt)| {
                    let opt_len = opt.len() / 4 * 4;
                    Ipv4Repr {
                        src: s.into(),
                        dst: d.into(),
                        protocol: proto,
                        payload_len: len,
                        ttl,
                        dscp,
                        ecn,
                        ident: id,
                        dont_frag: df,
                        more_frags: mf,
                        frag_offset: off * 8,
                        options: Ipv4Options::new(&opt[..opt_len]).unwrap(),
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn repr_round_trip(r in arb_repr()) {
            let mut b = vec![0u8; r.total_len()];
            r.emit(&mut Ipv4Packet::new_unchecked(&mut b[..])).unwrap();
            let p = Ipv4Packet::new_checked(&b[..]).unwrap();
            prop_assert!(p.verify_checksum());
            prop_assert_eq!(Ipv4Repr::parse(&p).unwrap(), r.clone());
            let e = etherparse::Ipv4HeaderSlice::from_slice(&b).unwrap();
            prop_assert_eq!(e.header_checksum(), e.to_header().calc_header_checksum());
            prop_assert_eq!(e.ttl(), r.ttl);
        }

        /// Decrementing the TTL incrementally leaves exactly the checksum a
        /// full recompute gives, and changes nothing but TTL and checksum.
        #[test]
        fn decrement_ttl_equals_recompute(r in arb_repr()) {
            let mut b = vec![0u8; r.total_len()];
            r.emit(&mut Ipv4Packet::new_unchecked(&mut b[..])).unwrap();
            let before = b.clone();
            let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
            let dec = p.decrement_ttl();
            prop_assert_eq!(dec, r.ttl.checked_sub(1));
            let inc = p.checksum();
            p.fill_checksum();
            prop_assert_eq!(inc, p.checksum());
            for (i, (x, y)) in before.iter().zip(&b).enumerate() {
                if i != 8 && i != 10 && i != 11 {
                    prop_assert_eq!(x, y);
                }
            }
        }
    }
}
