//! IPv4 headers (RFC 791), options included.
//!
//! `new_checked` validates what RFC 1812 §5.2.2 asks a router to check
//! before forwarding, except the checksum (a separate, explicit call):
//! the buffer holds 20 bytes, version is 4, IHL >= 5, the header fits,
//! total length >= header length and total length fits in the buffer.
//! Bytes after the total length (Ethernet padding) are ignored.

use std::net::Ipv4Addr;

use crate::{be16, checksum, put16, Error, Result};

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

    /// Whether the header checksum verifies (RFC 1812 §5.2.2).
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::verifies(checksum::sum(self.header()))
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
        let proto = self.protocol();
        let old = u16::from_be_bytes([ttl, proto]);
        let new = u16::from_be_bytes([ttl - 1, proto]);
        let c = checksum::update_u16(self.checksum(), old, new);
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
