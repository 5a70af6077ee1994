//! Packet formats on the wire.
//!
//! Two layers, as in every format module here:
//! - *views* (`Ipv4Packet<&[u8]>` style) are zero-copy wrappers over a byte
//!   slice, checked once by `new_checked`; after that their accessors cannot
//!   panic. Setters exist when the buffer is `AsMut<[u8]>`.
//! - *reprs* (`Ipv4Repr` style) are owned, validated descriptions used to
//!   parse and emit packets in the generator, the control plane and tests.
//!
//! Views are the per-packet path of the forwarder: accessors are `#[inline]`,
//! read fixed offsets and never allocate. Errors are a small `Copy` enum.

#![forbid(unsafe_code)]

pub mod arp;
pub mod checksum;
pub mod cidr;
pub mod ethernet;
#[cfg(any(test, feature = "fuzzing"))]
pub mod exercise;
pub mod filter;
pub mod icmpv4;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod ndp;
pub mod tcp;
pub mod udp;

pub use arp::{ArpOperation, ArpPacket, ArpRepr};
pub use cidr::{Cidr, Ipv4Cidr, Ipv6Cidr, ParseCidrError};
pub use ethernet::{EthernetFrame, EthernetRepr, L2Header, MacAddr, VlanTag, VlanTci};
pub use icmpv4::{Icmpv4Message, Icmpv4Packet, Icmpv4Repr};
pub use icmpv6::{Icmpv6Message, Icmpv6Packet, Icmpv6Repr};
pub use ipv4::{Ipv4Option, Ipv4OptionIter, Ipv4Options, Ipv4Packet, Ipv4Repr};
pub use ipv6::{Ipv6ExtWalk, Ipv6FragmentInfo, Ipv6Packet, Ipv6Repr};
pub use ndp::{NdpOption, NdpOptionIter, NdpRepr};
pub use tcp::{TcpPacket, TcpRepr};
pub use udp::{UdpPacket, UdpRepr};

/// Why a buffer was refused as a packet. `Copy` and allocation-free so that
/// the forwarding path can map it straight onto a drop counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Error {
    /// The buffer ends before the header, or before the length a header
    /// field announces.
    #[error("buffer shorter than the header or its length field")]
    Truncated,
    /// The IP version nibble is not the one this view reads.
    #[error("wrong IP version")]
    BadVersion,
    /// A header-length field is below the minimum (IPv4 IHL < 5, TCP data
    /// offset < 5, a zero-length NDP option).
    #[error("header length field below the minimum")]
    BadHeaderLen,
    /// A total-length field is inconsistent (IPv4 total length below the
    /// header length, UDP length below 8).
    #[error("length field inconsistent with the header")]
    BadLength,
    /// A checksum did not verify.
    #[error("checksum mismatch")]
    BadChecksum,
    /// Some other field holds a value this format does not allow.
    #[error("malformed field")]
    Malformed,
    /// Well-formed, but a kind this crate does not describe (an ARP hardware
    /// type other than Ethernet, an unknown ICMP type in a repr).
    #[error("unsupported packet kind")]
    Unsupported,
    /// An IPv6 extension-header chain longer than the walk allows.
    #[error("too many IPv6 extension headers")]
    TooManyExtHeaders,
}

/// Result with the wire [`Error`].
pub type Result<T> = core::result::Result<T, Error>;

/// EtherType values (IEEE registry) used by fastfwd.
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    /// IEEE 802.1Q customer VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// IEEE 802.1ad service VLAN tag (outer tag of QinQ).
    pub const QINQ: u16 = 0x88a8;
    pub const IPV6: u16 = 0x86dd;
}

/// IP protocol / IPv6 next-header numbers (IANA registry).
pub mod ip_proto {
    pub const HOP_BY_HOP: u8 = 0;
    pub const ICMP: u8 = 1;
    pub const IGMP: u8 = 2;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const IPV6_ROUTING: u8 = 43;
    pub const IPV6_FRAGMENT: u8 = 44;
    pub const ESP: u8 = 50;
    pub const AH: u8 = 51;
    pub const ICMPV6: u8 = 58;
    pub const IPV6_NO_NEXT: u8 = 59;
    pub const IPV6_DEST_OPTS: u8 = 60;
    pub const MOBILITY: u8 = 135;
    pub const HIP: u8 = 139;
    pub const SHIM6: u8 = 140;
}

#[inline(always)]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline(always)]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline(always)]
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline(always)]
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
