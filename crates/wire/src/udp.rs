//! UDP (RFC 768).
//!
//! `new_checked` checks: 8 bytes present, length field >= 8 and within the
//! buffer. The buffer is the IP payload; bytes after the UDP length are
//! ignored.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::{be16, checksum, ip_proto, put16, Error, Result};

pub const HEADER_LEN: usize = 8;

/// A zero-copy view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = usize::from(be16(b, 4));
        if len < HEADER_LEN {
            return Err(Error::BadLength);
        }
        if b.len() < len {
            return Err(Error::Truncated);
        }
        Ok(UdpPacket { buffer })
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }

    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    /// Length field (header + data).
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(be16(self.buffer.as_ref(), 4))
    }

    /// Whether the datagram carries no data.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == HEADER_LEN
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.len()]
    }

    /// Header and data up to the length field.
    #[inline]
    pub fn datagram(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.len()]
    }

    /// Checksum check over IPv4; a zero checksum means "none" (RFC 768).
    #[inline]
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let ph = checksum::pseudo_header_v4(src, dst, ip_proto::UDP, self.len() as u16);
        checksum::verifies(checksum::combine(&[ph, checksum::sum(self.datagram())]))
    }

    /// Checksum check over IPv6, where it is mandatory (RFC 8200 §8.1).
    #[inline]
    pub fn verify_checksum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        if self.checksum() == 0 {
            return false;
        }
        let ph = checksum::pseudo_header_v6(src, dst, ip_proto::UDP, self.len() as u32);
        checksum::verifies(checksum::combine(&[ph, checksum::sum(self.datagram())]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    #[inline]
    pub fn set_src_port(&mut self, p: u16) {
        put16(self.buffer.as_mut(), 0, p);
    }

    #[inline]
    pub fn set_dst_port(&mut self, p: u16) {
        put16(self.buffer.as_mut(), 2, p);
    }

    #[inline]
    pub fn set_len(&mut self, l: u16) {
        put16(self.buffer.as_mut(), 4, l);
    }

    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.buffer.as_mut(), 6, c);
    }

    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let l = self.len();
        &mut self.buffer.as_mut()[HEADER_LEN..l]
    }

    fn fill_with(&mut self, pseudo: u16) {
        self.set_checksum(0);
        let c = checksum::finish(checksum::combine(&[pseudo, checksum::sum(self.datagram())]));
        // A computed zero is sent as all ones (RFC 768).
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// Computes the checksum over the IPv4 pseudo-header and the datagram.
    #[inline]
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        let ph = checksum::pseudo_header_v4(src, dst, ip_proto::UDP, self.len() as u16);
        self.fill_with(ph);
    }

    /// Computes the checksum over the IPv6 pseudo-header and the datagram.
    #[inline]
    pub fn fill_checksum_v6(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        let ph = checksum::pseudo_header_v6(src, dst, ip_proto::UDP, self.len() as u32);
        self.fill_with(ph);
    }
}

/// An owned UDP header (the data is the caller's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    pub src_port: u16,
    pub dst_port: u16,
    /// Data length (without the 8-byte header).
    pub payload_len: usize,
}

impl UdpRepr {
    /// Reads ports and length; checksum verification is the caller's (it
    /// needs the IP addresses), see `verify_checksum_v4/v6`.
    pub fn parse<T: AsRef<[u8]>>(p: &UdpPacket<T>) -> Result<UdpRepr> {
        Ok(UdpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload_len: p.len() - HEADER_LEN,
        })
    }

    #[inline]
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes ports and length with a zero checksum; fill the checksum with
    /// `fill_checksum_v4/v6` once the data is in place.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut UdpPacket<T>) -> Result<()> {
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = u16::try_from(HEADER_LEN + self.payload_len).map_err(|_| Error::BadLength)?;
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len(len);
        p.set_checksum(0);
        Ok(())
    }
}
