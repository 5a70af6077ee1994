//! TCP headers (RFC 9293 §3.1).
//!
//! `new_checked` checks: 20 bytes present, data offset >= 5, and the header
//! (options included) fits in the buffer. The segment is the rest of the
//! buffer (its length comes from the IP header).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::{Error, Result, be16, be32, checksum, ip_proto, put16, put32};

pub const MIN_HEADER_LEN: usize = 20;

/// Flag bits in the low 9 bits of the offset/flags word.
pub mod flags {
    pub const FIN: u16 = 0x001;
    pub const SYN: u16 = 0x002;
    pub const RST: u16 = 0x004;
    pub const PSH: u16 = 0x008;
    pub const ACK: u16 = 0x010;
    pub const URG: u16 = 0x020;
    pub const ECE: u16 = 0x040;
    pub const CWR: u16 = 0x080;
    pub const NS: u16 = 0x100;
}

/// A zero-copy view of a TCP segment.
#[derive(Debug, Clone)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }

    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = usize::from(b[12] >> 4) * 4;
        if hl < MIN_HEADER_LEN {
            return Err(Error::BadHeaderLen);
        }
        if b.len() < hl {
            return Err(Error::Truncated);
        }
        Ok(TcpPacket { buffer })
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

    #[inline]
    pub fn seq_number(&self) -> u32 {
        be32(self.buffer.as_ref(), 4)
    }

    #[inline]
    pub fn ack_number(&self) -> u32 {
        be32(self.buffer.as_ref(), 8)
    }

    /// Header length in bytes (data offset x 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[12] >> 4) * 4
    }

    /// The nine flag bits (see [`flags`]).
    #[inline]
    pub fn flags(&self) -> u16 {
        be16(self.buffer.as_ref(), 12) & 0x01ff
    }

    #[inline]
    pub fn syn(&self) -> bool {
        self.flags() & flags::SYN != 0
    }

    #[inline]
    pub fn ack(&self) -> bool {
        self.flags() & flags::ACK != 0
    }

    #[inline]
    pub fn fin(&self) -> bool {
        self.flags() & flags::FIN != 0
    }

    #[inline]
    pub fn rst(&self) -> bool {
        self.flags() & flags::RST != 0
    }

    #[inline]
    pub fn window(&self) -> u16 {
        be16(self.buffer.as_ref(), 14)
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 16)
    }

    #[inline]
    pub fn urgent(&self) -> u16 {
        be16(self.buffer.as_ref(), 18)
    }

    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[MIN_HEADER_LEN..self.header_len()]
    }

    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    #[inline]
    pub fn segment(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Checksum check over the IPv4 pseudo-header and the whole segment.
    #[inline]
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let b = self.buffer.as_ref();
        let Ok(len) = u16::try_from(b.len()) else {
            return false;
        };
        let ph = checksum::pseudo_header_v4(src, dst, ip_proto::TCP, len);
        checksum::verifies(checksum::combine(&[ph, checksum::sum(b)]))
    }

    /// Checksum check over the IPv6 pseudo-header and the whole segment.
    #[inline]
    pub fn verify_checksum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        let ph = checksum::pseudo_header_v6(src, dst, ip_proto::TCP, b.len() as u32);
        checksum::verifies(checksum::combine(&[ph, checksum::sum(b)]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    #[inline]
    pub fn set_src_port(&mut self, p: u16) {
        put16(self.buffer.as_mut(), 0, p);
    }

    #[inline]
    pub fn set_dst_port(&mut self, p: u16) {
        put16(self.buffer.as_mut(), 2, p);
    }

    #[inline]
    pub fn set_seq_number(&mut self, v: u32) {
        put32(self.buffer.as_mut(), 4, v);
    }

    #[inline]
    pub fn set_ack_number(&mut self, v: u32) {
        put32(self.buffer.as_mut(), 8, v);
    }

    /// Sets data offset (from a header length in bytes) and the flags.
    #[inline]
    pub fn set_header_len_and_flags(&mut self, header_len: usize, flags: u16) {
        let v = ((((header_len / 4) as u16) & 0x0f) << 12) | (flags & 0x01ff);
        put16(self.buffer.as_mut(), 12, v);
    }

    #[inline]
    pub fn set_window(&mut self, w: u16) {
        put16(self.buffer.as_mut(), 14, w);
    }

    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.buffer.as_mut(), 16, c);
    }

    #[inline]
    pub fn set_urgent(&mut self, u: u16) {
        put16(self.buffer.as_mut(), 18, u);
    }

    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[hl..]
    }

    /// Computes the checksum over the IPv4 pseudo-header and the segment
    /// (the buffer must end where the segment ends).
    #[inline]
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let ph = checksum::pseudo_header_v4(src, dst, ip_proto::TCP, b.len() as u16);
        let c = checksum::finish(checksum::combine(&[ph, checksum::sum(b)]));
        self.set_checksum(c);
    }

    /// Computes the checksum over the IPv6 pseudo-header and the segment.
    #[inline]
    pub fn fill_checksum_v6(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let ph = checksum::pseudo_header_v6(src, dst, ip_proto::TCP, b.len() as u32);
        let c = checksum::finish(checksum::combine(&[ph, checksum::sum(b)]));
        self.set_checksum(c);
    }
}

/// An owned TCP header without options (enough for the generator and
/// tests; options stay in the view).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpRepr {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u16,
    pub window: u16,
    pub urgent: u16,
    /// Data length after the header.
    pub payload_len: usize,
}

impl TcpRepr {
    /// Reads the fixed fields; options are skipped.
    pub fn parse<T: AsRef<[u8]>>(p: &TcpPacket<T>) -> Result<TcpRepr> {
        Ok(TcpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq: p.seq_number(),
            ack: p.ack_number(),
            flags: p.flags(),
            window: p.window(),
            urgent: p.urgent(),
            payload_len: p.payload().len(),
        })
    }

    #[inline]
    pub fn buffer_len(&self) -> usize {
        MIN_HEADER_LEN
    }

    /// Writes a 20-byte header with a zero checksum; fill it with
    /// `fill_checksum_v4/v6` once the data is in place.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut TcpPacket<T>) -> Result<()> {
        if p.buffer.as_ref().len() < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_seq_number(self.seq);
        p.set_ack_number(self.ack);
        p.set_header_len_and_flags(MIN_HEADER_LEN, self.flags);
        p.set_window(self.window);
        p.set_checksum(0);
        p.set_urgent(self.urgent);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Ipv4Packet;
    use crate::ipv4::tests::ETH_IPV4_TCP_SYN;
    use proptest::prelude::*;

    #[test]
    fn syn_fixture() {
        let ip = Ipv4Packet::new_checked(&ETH_IPV4_TCP_SYN[14..]).unwrap();
        let t = TcpPacket::new_checked(ip.payload()).unwrap();
        assert_eq!((t.src_port(), t.dst_port()), (40000, 80));
        assert_eq!((t.seq_number(), t.ack_number()), (0x0102_0304, 0));
        assert_eq!(t.header_len(), 24);
        assert_eq!(t.flags(), flags::SYN);
        assert!(t.syn() && !t.ack() && !t.fin() && !t.rst());
        assert_eq!(t.window(), 64240);
        assert_eq!(t.urgent(), 0);
        assert_eq!(t.options(), &[0x02, 0x04, 0x05, 0xb4]);
        assert!(t.payload().is_empty());
        assert!(t.verify_checksum_v4(ip.src_addr(), ip.dst_addr()));
        let mut b = ip.payload().to_vec();
        let mut m = TcpPacket::new_checked(&mut b[..]).unwrap();
        m.set_checksum(0);
        m.fill_checksum_v4(ip.src_addr(), ip.dst_addr());
        assert_eq!(&b[..], ip.payload());
        let e = etherparse::TcpHeaderSlice::from_slice(ip.payload()).unwrap();
        assert_eq!(e.sequence_number(), t.seq_number());
        assert_eq!(e.data_offset() as usize * 4, t.header_len());
    }

    #[test]
    fn refuses_bad_headers() {
        let ip = Ipv4Packet::new_checked(&ETH_IPV4_TCP_SYN[14..]).unwrap();
        let seg = ip.payload();
        for n in 0..24 {
            assert_eq!(
                TcpPacket::new_checked(&seg[..n]).unwrap_err(),
                Error::Truncated
            );
        }
        let mut b = seg.to_vec();
        b[12] = 0x40;
        assert_eq!(
            TcpPacket::new_checked(&b[..]).unwrap_err(),
            Error::BadHeaderLen
        );
    }

    proptest! {
        #[test]
        fn repr_round_trip_and_checksum(
            sp in any::<u16>(), dp in any::<u16>(), seq in any::<u32>(), ack in any::<u32>(),
            fl in 0u16..0x200, win in any::<u16>(), urg in any::<u16>(),
            data in proptest::collection::vec(any::<u8>(), 0..300),
            s in any::<u128>(), d in any::<u128>(),
        ) {
            let r = TcpRepr {
                src_port: sp, dst_port: dp, seq, ack, flags: fl, window: win, urgent: urg,
                payload_len: data.len(),
            };
            let mut b = vec![0u8; r.buffer_len() + data.len()];
            let mut m = TcpPacket::new_unchecked(&mut b[..]);
            r.emit(&mut m).unwrap();
            m.payload_mut().copy_from_slice(&data);
            m.fill_checksum_v6(&s.into(), &d.into());
            let t = TcpPacket::new_checked(&b[..]).unwrap();
            prop_assert!(t.verify_checksum_v6(&s.into(), &d.into()));
            prop_assert_eq!(TcpRepr::parse(&t).unwrap(), r);
            let e = etherparse::TcpHeaderSlice::from_slice(&b).unwrap().to_header();
            let want = e.calc_checksum_ipv6_raw(s.to_be_bytes(), d.to_be_bytes(), &data).unwrap();
            prop_assert_eq!(t.checksum(), want);
        }
    }
}
