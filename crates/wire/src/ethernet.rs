//! Ethernet II frames (IEEE 802.3 clause 3.2.6) and 802.1Q / 802.1ad VLAN
//! tags.
//!
//! Layout: destination MAC (6), source MAC (6), EtherType (2), payload. A
//! VLAN tag inserts TPID (0x8100 or 0x88a8) + TCI (2) before the EtherType;
//! [`EthernetFrame::l2_header`] walks up to two tags (QinQ).

use core::fmt;

use crate::{Error, Result, be16, ethertype, put16};

/// A 48-bit MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// Reads a MAC address from the first six bytes of `b`.
    #[inline]
    pub fn from_bytes(b: &[u8]) -> Option<MacAddr> {
        b.get(..6)
            .map(|s| MacAddr([s[0], s[1], s[2], s[3], s[4], s[5]]))
    }

    #[inline]
    pub const fn octets(&self) -> [u8; 6] {
        self.0
    }

    /// Group bit set (multicast or broadcast).
    #[inline]
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }

    #[inline]
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    #[inline]
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    /// The IPv6 multicast MAC 33:33:xx:xx:xx:xx for a group (RFC 2464 §7).
    #[inline]
    pub fn ipv6_multicast(group: &std::net::Ipv6Addr) -> MacAddr {
        let o = group.octets();
        MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl core::str::FromStr for MacAddr {
    type Err = Error;

    /// Parses `aa:bb:cc:dd:ee:ff` (or with `-` separators).
    fn from_str(s: &str) -> Result<Self> {
        let mut out = [0u8; 6];
        let mut n = 0;
        for part in s.split([':', '-']) {
            if n == 6 || part.is_empty() || part.len() > 2 {
                return Err(Error::Malformed);
            }
            out[n] = u8::from_str_radix(part, 16).map_err(|_| Error::Malformed)?;
            n += 1;
        }
        if n != 6 {
            return Err(Error::Malformed);
        }
        Ok(MacAddr(out))
    }
}

/// Ethernet header length without tags.
pub const HEADER_LEN: usize = 14;
/// Length of one VLAN tag (TPID + TCI).
pub const VLAN_TAG_LEN: usize = 4;
/// Maximum VLAN tags [`EthernetFrame::l2_header`] walks.
pub const MAX_VLAN_TAGS: usize = 2;

mod field {
    pub const DST: core::ops::Range<usize> = 0..6;
    pub const SRC: core::ops::Range<usize> = 6..12;
    pub const ETHERTYPE: usize = 12;
}

/// Whether an EtherType value is a VLAN TPID (802.1Q or 802.1ad).
#[inline]
pub const fn is_vlan_tpid(t: u16) -> bool {
    t == ethertype::VLAN || t == ethertype::QINQ
}

/// A zero-copy view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps a buffer without checking it; accessors may panic unless the
    /// buffer holds at least [`HEADER_LEN`] bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wraps a buffer of at least [`HEADER_LEN`] bytes.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(EthernetFrame { buffer })
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
    pub fn dst_addr(&self) -> MacAddr {
        let b = &self.buffer.as_ref()[field::DST];
        MacAddr([b[0], b[1], b[2], b[3], b[4], b[5]])
    }

    #[inline]
    pub fn src_addr(&self) -> MacAddr {
        let b = &self.buffer.as_ref()[field::SRC];
        MacAddr([b[0], b[1], b[2], b[3], b[4], b[5]])
    }

    /// The EtherType field right after the MACs (a TPID when tagged).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE)
    }

    /// Everything after the untagged header (starts with the TCI when
    /// tagged; use [`l2_header`](Self::l2_header) to skip tags).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// Walks zero, one or two VLAN tags and returns where the network-layer
    /// payload starts. A third tag is left in place: its TPID is returned as
    /// the EtherType and the caller drops it as unknown.
    #[inline]
    pub fn l2_header(&self) -> Result<L2Header> {
        let b = self.buffer.as_ref();
        let mut hdr = L2Header {
            ethertype: be16(b, field::ETHERTYPE),
            outer: None,
            inner: None,
            header_len: HEADER_LEN,
        };
        for _ in 0..MAX_VLAN_TAGS {
            if !is_vlan_tpid(hdr.ethertype) {
                break;
            }
            let at = hdr.header_len;
            if b.len() < at + VLAN_TAG_LEN {
                return Err(Error::Truncated);
            }
            let tag = VlanTci {
                tpid: hdr.ethertype,
                tci: be16(b, at),
            };
            if hdr.outer.is_none() {
                hdr.outer = Some(tag);
            } else {
                hdr.inner = Some(tag);
            }
            hdr.ethertype = be16(b, at + 2);
            hdr.header_len += VLAN_TAG_LEN;
        }
        Ok(hdr)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    #[inline]
    pub fn set_dst_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.0);
    }

    #[inline]
    pub fn set_src_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.0);
    }

    #[inline]
    pub fn set_ethertype(&mut self, t: u16) {
        put16(self.buffer.as_mut(), field::ETHERTYPE, t);
    }

    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }

    #[inline]
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
}

/// One VLAN tag as read from a frame: its TPID and TCI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanTci {
    /// 0x8100 (802.1Q) or 0x88a8 (802.1ad).
    pub tpid: u16,
    /// Priority (3 bits), drop eligible (1 bit), VLAN id (12 bits).
    pub tci: u16,
}

impl VlanTci {
    /// An 802.1Q tag with priority 0.
    #[inline]
    pub const fn dot1q(vid: u16) -> VlanTci {
        VlanTci {
            tpid: ethertype::VLAN,
            tci: vid & 0x0fff,
        }
    }

    /// An 802.1ad (service) tag with priority 0.
    #[inline]
    pub const fn dot1ad(vid: u16) -> VlanTci {
        VlanTci {
            tpid: ethertype::QINQ,
            tci: vid & 0x0fff,
        }
    }

    #[inline]
    pub const fn vid(&self) -> u16 {
        self.tci & 0x0fff
    }

    #[inline]
    pub const fn pcp(&self) -> u8 {
        (self.tci >> 13) as u8
    }

    #[inline]
    pub const fn dei(&self) -> bool {
        self.tci & 0x1000 != 0
    }
}

/// The link-layer header of a frame after walking its VLAN tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L2Header {
    /// EtherType of the payload (after all walked tags).
    pub ethertype: u16,
    /// First (outer) tag, if any.
    pub outer: Option<VlanTci>,
    /// Second (inner) tag, if any.
    pub inner: Option<VlanTci>,
    /// Bytes from the frame start to the network-layer payload (14, 18, 22).
    pub header_len: usize,
}

impl L2Header {
    /// The VLAN id a frame belongs to on a single-tagged sub-interface: the
    /// innermost tag's id, or `None` when untagged.
    #[inline]
    pub fn vid(&self) -> Option<u16> {
        self.inner.or(self.outer).map(|t| t.vid())
    }

    #[inline]
    pub fn tag_count(&self) -> usize {
        usize::from(self.outer.is_some()) + usize::from(self.inner.is_some())
    }
}

/// A zero-copy view of one VLAN tag's TCI and the EtherType after it: the
/// four bytes that follow a TPID (the payload of an 0x8100 / 0x88a8 frame).
#[derive(Debug, Clone)]
pub struct VlanTag<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        VlanTag { buffer }
    }

    /// Wraps a buffer of at least [`VLAN_TAG_LEN`] bytes.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < VLAN_TAG_LEN {
            return Err(Error::Truncated);
        }
        Ok(VlanTag { buffer })
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn tci(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }

    #[inline]
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    #[inline]
    pub fn dei(&self) -> bool {
        self.tci() & 0x1000 != 0
    }

    #[inline]
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// EtherType of what follows the tag (another TPID for QinQ).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[VLAN_TAG_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanTag<T> {
    #[inline]
    pub fn set_tci(&mut self, tci: u16) {
        put16(self.buffer.as_mut(), 0, tci);
    }

    #[inline]
    pub fn set_vid(&mut self, vid: u16) {
        let tci = (self.tci() & 0xf000) | (vid & 0x0fff);
        self.set_tci(tci);
    }

    #[inline]
    pub fn set_ethertype(&mut self, t: u16) {
        put16(self.buffer.as_mut(), 2, t);
    }
}

/// An owned Ethernet header with up to two VLAN tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    pub dst: MacAddr,
    pub src: MacAddr,
    /// Outer tag (or the only one).
    pub outer: Option<VlanTci>,
    /// Inner tag; only emitted when `outer` is set.
    pub inner: Option<VlanTci>,
    /// EtherType of the payload.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Reads the header and up to two tags.
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Result<EthernetRepr> {
        let h = frame.l2_header()?;
        if is_vlan_tpid(h.ethertype) {
            // More tags than we describe.
            return Err(Error::Unsupported);
        }
        Ok(EthernetRepr {
            dst: frame.dst_addr(),
            src: frame.src_addr(),
            outer: h.outer,
            inner: h.inner,
            ethertype: h.ethertype,
        })
    }

    /// Header length including tags.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        let tags = match (self.outer, self.inner) {
            (None, _) => 0,
            (Some(_), None) => 1,
            (Some(_), Some(_)) => 2,
        };
        HEADER_LEN + tags * VLAN_TAG_LEN
    }

    /// Writes the header (with tags) at the start of the frame.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut EthernetFrame<T>) -> Result<()> {
        let len = self.buffer_len();
        let b = frame.buffer.as_mut();
        if b.len() < len {
            return Err(Error::Truncated);
        }
        b[field::DST].copy_from_slice(&self.dst.0);
        b[field::SRC].copy_from_slice(&self.src.0);
        let mut at = field::ETHERTYPE;
        for tag in [self.outer, self.outer.and(self.inner)]
            .into_iter()
            .flatten()
        {
            put16(b, at, tag.tpid);
            put16(b, at + 2, tag.tci);
            at += VLAN_TAG_LEN;
        }
        put16(b, at, self.ethertype);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ARP request broadcast on VLAN 10 (802.1Q), padded to 64 bytes.
    const TAGGED_ARP: [u8; 46] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // dst
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56, // src
        0x81, 0x00, 0x20, 0x0a, // 802.1Q, pcp 1, vid 10
        0x08, 0x06, // ARP
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0xc6,
        0x12, 0x00, 0x6c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc6, 0x12, 0x00, 0x0a,
    ];

    /// QinQ: outer 802.1ad vid 100, inner 802.1Q vid 200, IPv4 follows.
    const QINQ_HDR: [u8; 22] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x88, 0xa8, 0x00,
        0x64, 0x81, 0x00, 0x00, 0xc8, 0x08, 0x00,
    ];

    #[test]
    fn untagged() {
        let mut b = [0u8; 60];
        b[12] = 0x86;
        b[13] = 0xdd;
        let f = EthernetFrame::new_checked(&b[..]).unwrap();
        let h = f.l2_header().unwrap();
        assert_eq!(h.ethertype, ethertype::IPV6);
        assert_eq!(h.header_len, 14);
        assert_eq!(h.vid(), None);
        assert_eq!(f.payload().len(), 46);
    }

    #[test]
    fn single_tag_fixture() {
        let f = EthernetFrame::new_checked(&TAGGED_ARP[..]).unwrap();
        assert!(f.dst_addr().is_broadcast());
        assert_eq!(f.src_addr().to_string(), "52:54:00:12:34:56");
        assert_eq!(f.ethertype(), ethertype::VLAN);
        let h = f.l2_header().unwrap();
        assert_eq!(h.ethertype, ethertype::ARP);
        assert_eq!(h.header_len, 18);
        assert_eq!(h.vid(), Some(10));
        assert_eq!(h.outer.unwrap().pcp(), 1);
        let tag = VlanTag::new_checked(f.payload()).unwrap();
        assert_eq!(
            (tag.vid(), tag.pcp(), tag.ethertype()),
            (10, 1, ethertype::ARP)
        );
        let r = EthernetRepr::parse(&f).unwrap();
        assert_eq!(r.buffer_len(), 18);
        let mut out = [0u8; 18];
        r.emit(&mut EthernetFrame::new_unchecked(&mut out[..]))
            .unwrap();
        assert_eq!(out[..], TAGGED_ARP[..18]);
    }

    #[test]
    fn double_tag_fixture() {
        let f = EthernetFrame::new_checked(&QINQ_HDR[..]).unwrap();
        let h = f.l2_header().unwrap();
        assert_eq!(h.tag_count(), 2);
        assert_eq!(h.outer, Some(VlanTci::dot1ad(100)));
        assert_eq!(h.inner, Some(VlanTci::dot1q(200)));
        assert_eq!(h.vid(), Some(200));
        assert_eq!(h.ethertype, ethertype::IPV4);
        assert_eq!(h.header_len, 22);
        let r = EthernetRepr::parse(&f).unwrap();
        let mut out = [0u8; 22];
        r.emit(&mut EthernetFrame::new_unchecked(&mut out[..]))
            .unwrap();
        assert_eq!(out, QINQ_HDR);
    }

    #[test]
    fn truncated_tags_and_frames() {
        assert_eq!(
            EthernetFrame::new_checked(&[0u8; 13][..]).unwrap_err(),
            Error::Truncated
        );
        for n in 14..22 {
            let f = EthernetFrame::new_checked(&QINQ_HDR[..n]).unwrap();
            assert_eq!(f.l2_header().unwrap_err(), Error::Truncated, "len {n}");
        }
        // Three tags: the third TPID is reported as the EtherType.
        let mut b = QINQ_HDR.to_vec();
        b[20] = 0x81;
        b[21] = 0x00;
        b.extend_from_slice(&[0, 1, 8, 0]);
        let f = EthernetFrame::new_checked(&b[..]).unwrap();
        assert_eq!(f.l2_header().unwrap().ethertype, ethertype::VLAN);
        assert_eq!(EthernetRepr::parse(&f).unwrap_err(), Error::Unsupported);
    }

    #[test]
    fn setters() {
        let mut b = TAGGED_ARP;
        let mut f = EthernetFrame::new_checked(&mut b[..]).unwrap();
        let m: MacAddr = "02:00:00:00:00:09".parse().unwrap();
        f.set_dst_addr(m);
        f.set_src_addr(MacAddr::ZERO);
        assert_eq!(f.dst_addr(), m);
        assert_eq!(f.src_addr(), MacAddr::ZERO);
        let mut tag = VlanTag::new_checked(f.payload_mut()).unwrap();
        tag.set_vid(4095);
        assert_eq!(tag.pcp(), 1);
        assert_eq!(tag.vid(), 4095);
        assert!("02:00:00:00:00".parse::<MacAddr>().is_err());
        assert!("02:00:00:00:00:00:01".parse::<MacAddr>().is_err());
    }

    #[test]
    fn cross_check_etherparse() {
        let link = etherparse::Ethernet2Header::from_slice(&TAGGED_ARP)
            .unwrap()
            .0;
        assert_eq!(link.source, [0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
        let (vlan, _) = etherparse::SingleVlanHeader::from_slice(&TAGGED_ARP[14..]).unwrap();
        let f = EthernetFrame::new_checked(&TAGGED_ARP[..]).unwrap();
        assert_eq!(f.l2_header().unwrap().vid(), Some(vlan.vlan_id.value()));
    }
}
