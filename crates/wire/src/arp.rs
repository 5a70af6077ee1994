//! ARP (RFC 826) for IPv4 over Ethernet.
//!
//! The view reads any hardware / protocol address sizes; `new_checked`
//! checks the 8-byte fixed part and that the four addresses fit. The repr
//! covers Ethernet + IPv4 only (hardware type 1, 6-byte MACs, 4-byte
//! addresses).

use std::net::Ipv4Addr;

use crate::ethernet::MacAddr;
use crate::{Error, Result, be16, ethertype, put16};

/// Hardware type Ethernet.
pub const HTYPE_ETHERNET: u16 = 1;
/// Length of an Ethernet / IPv4 ARP packet.
pub const ETH_IPV4_LEN: usize = 28;

/// ARP operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArpOperation {
    Request,
    Reply,
    Unknown(u16),
}

impl From<u16> for ArpOperation {
    #[inline]
    fn from(v: u16) -> Self {
        match v {
            1 => ArpOperation::Request,
            2 => ArpOperation::Reply,
            v => ArpOperation::Unknown(v),
        }
    }
}

impl From<ArpOperation> for u16 {
    #[inline]
    fn from(o: ArpOperation) -> u16 {
        match o {
            ArpOperation::Request => 1,
            ArpOperation::Reply => 2,
            ArpOperation::Unknown(v) => v,
        }
    }
}

/// A zero-copy view of an ARP packet.
#[derive(Debug, Clone)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        ArpPacket { buffer }
    }

    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < 8 {
            return Err(Error::Truncated);
        }
        let need = 8 + 2 * (usize::from(b[4]) + usize::from(b[5]));
        if b.len() < need {
            return Err(Error::Truncated);
        }
        Ok(ArpPacket { buffer })
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn hardware_type(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }

    #[inline]
    pub fn protocol_type(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    #[inline]
    pub fn hardware_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[4])
    }

    #[inline]
    pub fn protocol_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[5])
    }

    #[inline]
    pub fn operation(&self) -> ArpOperation {
        ArpOperation::from(be16(self.buffer.as_ref(), 6))
    }

    #[inline]
    fn slice(&self, at: usize, len: usize) -> &[u8] {
        &self.buffer.as_ref()[at..at + len]
    }

    #[inline]
    pub fn sender_hardware_addr(&self) -> &[u8] {
        self.slice(8, self.hardware_len())
    }

    #[inline]
    pub fn sender_protocol_addr(&self) -> &[u8] {
        self.slice(8 + self.hardware_len(), self.protocol_len())
    }

    #[inline]
    pub fn target_hardware_addr(&self) -> &[u8] {
        self.slice(
            8 + self.hardware_len() + self.protocol_len(),
            self.hardware_len(),
        )
    }

    #[inline]
    pub fn target_protocol_addr(&self) -> &[u8] {
        self.slice(
            8 + 2 * self.hardware_len() + self.protocol_len(),
            self.protocol_len(),
        )
    }

    /// Whether this is Ethernet / IPv4 ARP with the usual sizes.
    #[inline]
    pub fn is_ethernet_ipv4(&self) -> bool {
        self.hardware_type() == HTYPE_ETHERNET
            && self.protocol_type() == ethertype::IPV4
            && self.hardware_len() == 6
            && self.protocol_len() == 4
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    #[inline]
    pub fn set_hardware_type(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 0, v);
    }

    #[inline]
    pub fn set_protocol_type(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 2, v);
    }

    #[inline]
    pub fn set_lengths(&mut self, hardware_len: u8, protocol_len: u8) {
        self.buffer.as_mut()[4] = hardware_len;
        self.buffer.as_mut()[5] = protocol_len;
    }

    #[inline]
    pub fn set_operation(&mut self, op: ArpOperation) {
        put16(self.buffer.as_mut(), 6, op.into());
    }

    fn put(&mut self, at: usize, v: &[u8]) {
        self.buffer.as_mut()[at..at + v.len()].copy_from_slice(v);
    }

    /// Writes the four addresses; their lengths must match the length
    /// fields already set.
    pub fn set_addresses(&mut self, sha: &[u8], spa: &[u8], tha: &[u8], tpa: &[u8]) {
        let (h, p) = (self.hardware_len(), self.protocol_len());
        self.put(8, &sha[..h]);
        self.put(8 + h, &spa[..p]);
        self.put(8 + h + p, &tha[..h]);
        self.put(8 + 2 * h + p, &tpa[..p]);
    }
}

/// An Ethernet / IPv4 ARP message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRepr {
    pub operation: ArpOperation,
    pub source_mac: MacAddr,
    pub source_ip: Ipv4Addr,
    pub target_mac: MacAddr,
    pub target_ip: Ipv4Addr,
}

fn ipv4(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

impl ArpRepr {
    /// Reads Ethernet / IPv4 ARP; other kinds are `Unsupported`, operations
    /// other than request and reply `Malformed`.
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> Result<ArpRepr> {
        if !p.is_ethernet_ipv4() {
            return Err(Error::Unsupported);
        }
        let operation = p.operation();
        if let ArpOperation::Unknown(_) = operation {
            return Err(Error::Malformed);
        }
        Ok(ArpRepr {
            operation,
            source_mac: MacAddr::from_bytes(p.sender_hardware_addr()).ok_or(Error::Truncated)?,
            source_ip: ipv4(p.sender_protocol_addr()),
            target_mac: MacAddr::from_bytes(p.target_hardware_addr()).ok_or(Error::Truncated)?,
            target_ip: ipv4(p.target_protocol_addr()),
        })
    }

    #[inline]
    pub fn buffer_len(&self) -> usize {
        ETH_IPV4_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut ArpPacket<T>) -> Result<()> {
        if p.buffer.as_ref().len() < ETH_IPV4_LEN {
            return Err(Error::Truncated);
        }
        p.set_hardware_type(HTYPE_ETHERNET);
        p.set_protocol_type(ethertype::IPV4);
        p.set_lengths(6, 4);
        p.set_operation(self.operation);
        p.set_addresses(
            &self.source_mac.0,
            &self.source_ip.octets(),
            &self.target_mac.0,
            &self.target_ip.octets(),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EthernetFrame;
    use proptest::prelude::*;

    /// Broadcast ARP request "who-has 198.18.0.10 tell 198.18.0.108",
    /// padded to 60 bytes; tcpdump: "ARP, Ethernet (len 6), IPv4 (len 4),
    /// Request".
    pub(crate) const ETH_ARP_REQUEST: [u8; 60] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x08, 0x06, 0x00,
        0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0xc6, 0x12,
        0x00, 0x6c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc6, 0x12, 0x00, 0x0a, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];
    /// ARP reply "198.18.0.10 is-at 52:54:00:ab:cd:ef" to 198.18.0.108.
    pub(crate) const ARP_REPLY: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02, 0x52, 0x54, 0x00, 0xab, 0xcd, 0xef, 0xc6,
        0x12, 0x00, 0x0a, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0xc6, 0x12, 0x00, 0x6c,
    ];

    #[test]
    fn request_fixture() {
        let f = EthernetFrame::new_checked(&ETH_ARP_REQUEST[..]).unwrap();
        assert_eq!(f.l2_header().unwrap().ethertype, ethertype::ARP);
        let p = ArpPacket::new_checked(f.payload()).unwrap();
        assert!(p.is_ethernet_ipv4());
        assert_eq!(p.operation(), ArpOperation::Request);
        assert_eq!(p.sender_protocol_addr(), &[198, 18, 0, 108]);
        assert_eq!(p.target_protocol_addr(), &[198, 18, 0, 10]);
        assert_eq!(p.target_hardware_addr(), &[0; 6]);
        let r = ArpRepr::parse(&p).unwrap();
        assert_eq!(r.source_mac, "52:54:00:12:34:56".parse().unwrap());
        assert_eq!(r.source_ip, Ipv4Addr::new(198, 18, 0, 108));
        assert_eq!(r.target_ip, Ipv4Addr::new(198, 18, 0, 10));
        // The reply this router would send.
        let reply = ArpRepr {
            operation: ArpOperation::Reply,
            source_mac: "52:54:00:ab:cd:ef".parse().unwrap(),
            source_ip: r.target_ip,
            target_mac: r.source_mac,
            target_ip: r.source_ip,
        };
        let mut out = [0u8; 28];
        reply
            .emit(&mut ArpPacket::new_unchecked(&mut out[..]))
            .unwrap();
        assert_eq!(out, ARP_REPLY);
    }

    #[test]
    fn refusals() {
        for n in 0..28 {
            assert_eq!(
                ArpPacket::new_checked(&ARP_REPLY[..n]).unwrap_err(),
                Error::Truncated
            );
        }
        let mut b = ARP_REPLY;
        b[7] = 9;
        let p = ArpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.operation(), ArpOperation::Unknown(9));
        assert_eq!(ArpRepr::parse(&p), Err(Error::Malformed));
        let mut b = ARP_REPLY;
        b[1] = 6; // IEEE 802 hardware type
        assert_eq!(
            ArpRepr::parse(&ArpPacket::new_checked(&b[..]).unwrap()),
            Err(Error::Unsupported)
        );
        // Odd address sizes are read by the view and refused by the repr.
        let mut b = vec![0u8, 1, 8, 0, 8, 16, 0, 1];
        b.resize(8 + 2 * 24, 7);
        let p = ArpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.target_protocol_addr().len(), 16);
        assert_eq!(ArpRepr::parse(&p), Err(Error::Unsupported));
    }

    proptest! {
        #[test]
        fn repr_round_trip(op in 1u16..3, sm in any::<[u8; 6]>(), si in any::<u32>(),
                           tm in any::<[u8; 6]>(), ti in any::<u32>()) {
            let r = ArpRepr {
                operation: op.into(),
                source_mac: MacAddr(sm), source_ip: si.into(),
                target_mac: MacAddr(tm), target_ip: ti.into(),
            };
            let mut out = [0u8; 28];
            r.emit(&mut ArpPacket::new_unchecked(&mut out[..])).unwrap();
            prop_assert_eq!(ArpRepr::parse(&ArpPacket::new_checked(&out[..]).unwrap()), Ok(r));
        }
    }
}
