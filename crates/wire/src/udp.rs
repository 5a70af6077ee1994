//! UDP (RFC 768).
//!
//! `new_checked` checks: 8 bytes present, length field >= 8 and within the
//! buffer. The buffer is the IP payload; bytes after the UDP length are
//! ignored.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::{Error, Result, be16, checksum, ip_proto, put16};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4::tests::ETH_IPV4_UDP;
    use crate::ipv6::tests::ETH_IPV6_UDP;
    use crate::{Ipv4Packet, Ipv6Packet};
    use proptest::prelude::*;

    #[test]
    fn v4_fixture() {
        let ip = Ipv4Packet::new_checked(&ETH_IPV4_UDP[14..]).unwrap();
        let u = UdpPacket::new_checked(ip.payload()).unwrap();
        assert_eq!((u.src_port(), u.dst_port(), u.len()), (2000, 2000, 26));
        assert_eq!(u.checksum(), 0x497d);
        assert_eq!(u.payload(), b"fastfwd-seq-000001");
        assert!(u.verify_checksum_v4(ip.src_addr(), ip.dst_addr()));
        assert!(!u.verify_checksum_v4(ip.dst_addr(), Ipv4Addr::new(1, 2, 3, 4)));
        let r = UdpRepr::parse(&u).unwrap();
        assert_eq!(r.payload_len, 18);
        let mut out = ip.payload().to_vec();
        let mut m = UdpPacket::new_unchecked(&mut out[..]);
        r.emit(&mut m).unwrap();
        m.fill_checksum_v4(ip.src_addr(), ip.dst_addr());
        assert_eq!(&out[..], ip.payload());
    }

    #[test]
    fn v6_fixture() {
        let ip = Ipv6Packet::new_checked(&ETH_IPV6_UDP[14..]).unwrap();
        let mut b = ip.payload().to_vec();
        let u = UdpPacket::new_checked(&b[..]).unwrap();
        assert!(u.verify_checksum_v6(&ip.src_addr(), &ip.dst_addr()));
        let mut m = UdpPacket::new_checked(&mut b[..]).unwrap();
        m.set_checksum(0);
        // A zero checksum is not allowed over IPv6.
        assert!(!m.verify_checksum_v6(&ip.src_addr(), &ip.dst_addr()));
        m.fill_checksum_v6(&ip.src_addr(), &ip.dst_addr());
        assert_eq!(&b[..], ip.payload());
    }

    #[test]
    fn refuses_bad_lengths() {
        let ip = Ipv4Packet::new_checked(&ETH_IPV4_UDP[14..]).unwrap();
        let u = ip.payload();
        for n in 0..8 {
            assert_eq!(
                UdpPacket::new_checked(&u[..n]).unwrap_err(),
                Error::Truncated
            );
        }
        assert_eq!(
            UdpPacket::new_checked(&u[..25]).unwrap_err(),
            Error::Truncated
        );
        let mut b = u.to_vec();
        b[4..6].copy_from_slice(&7u16.to_be_bytes());
        assert_eq!(
            UdpPacket::new_checked(&b[..]).unwrap_err(),
            Error::BadLength
        );
        // A zero checksum over IPv4 means "not computed".
        b[4..6].copy_from_slice(&26u16.to_be_bytes());
        b[6..8].copy_from_slice(&[0, 0]);
        assert!(
            UdpPacket::new_checked(&b[..])
                .unwrap()
                .verify_checksum_v4(0.into(), 0.into())
        );
    }

    proptest! {
        /// Checksums agree with etherparse's for random datagrams.
        #[test]
        fn checksum_matches_etherparse(
            s in any::<u32>(), d in any::<u32>(), sp in any::<u16>(), dp in any::<u16>(),
            data in proptest::collection::vec(any::<u8>(), 0..600),
        ) {
            let r = UdpRepr { src_port: sp, dst_port: dp, payload_len: data.len() };
            let mut b = vec![0u8; 8 + data.len()];
            let mut m = UdpPacket::new_unchecked(&mut b[..]);
            r.emit(&mut m).unwrap();
            m.payload_mut().copy_from_slice(&data);
            m.fill_checksum_v4(s.into(), d.into());
            let u = UdpPacket::new_checked(&b[..]).unwrap();
            prop_assert!(u.verify_checksum_v4(s.into(), d.into()));
            prop_assert_eq!(UdpRepr::parse(&u).unwrap(), r);
            let e = etherparse::UdpHeader::without_ipv4_checksum(sp, dp, data.len()).unwrap();
            let want = e.calc_checksum_ipv4_raw(s.to_be_bytes(), d.to_be_bytes(), &data).unwrap();
            prop_assert_eq!(u.checksum(), want);
        }
    }
}
