//! What the classifier reads from a packet, and what it answers.

use crate::conntrack::CtHint;
use crate::rules::{CtState, Family, Field};
use serde::Serialize;

/// Index of an interface in the runtime interface table.
pub type IfaceId = u16;

/// `oif` of packets that have no output interface (the input chain).
pub const IFACE_NONE: IfaceId = u16::MAX;

/// The fields of one packet the firewall matches on: a compact 5-tuple
/// plus interfaces, TCP flags, ICMP type and the connection-tracking state.
///
/// Built by the pipeline after header validation. Addresses are host-order
/// integers; an IPv4 address sits in the low 32 bits (plain or IPv4-mapped
/// `::ffff:a.b.c.d`, the upper bits are ignored for IPv4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PacketKey {
    pub src: u128,
    pub dst: u128,
    /// TCP / UDP / SCTP / UDP-Lite ports; for ICMP echo the identifier in
    /// `sport`; 0 otherwise and in non-first fragments.
    pub sport: u16,
    pub dport: u16,
    pub iif: IfaceId,
    /// Output interface after the route lookup; [`IFACE_NONE`] in `input`.
    pub oif: IfaceId,
    /// Bytes counted for the matched rule (IP total length is usual).
    pub len: u16,
    /// IP protocol / final IPv6 next header.
    pub proto: u8,
    /// TCP flags byte (FIN 0x01 … CWR 0x80); 0 for other protocols.
    pub tcp_flags: u8,
    /// ICMP / ICMPv6 type and code; 0 for other protocols.
    pub icmp_type: u8,
    pub icmp_code: u8,
    /// Set by connection tracking before classification.
    pub ct: CtState,
    pub is_v6: bool,
    /// What the XDP engine's fast path knew of the flow, when the packet
    /// came from it.
    pub ct_hint: CtHint,
}

impl PacketKey {
    /// The packet's address family.
    #[inline]
    pub fn family(&self) -> Family {
        if self.is_v6 { Family::V6 } else { Family::V4 }
    }

    /// The classifier's `aux` field: TCP flags for TCP, the type for ICMP.
    #[inline]
    pub fn aux(&self) -> u8 {
        aux_value(self.proto, self.tcp_flags, self.icmp_type)
    }

    /// The value of a field as an integer in the field's value space.
    #[inline]
    pub fn value(&self, f: Field) -> u128 {
        match f {
            Field::Src => addr_value(self.is_v6, self.src),
            Field::Dst => addr_value(self.is_v6, self.dst),
            Field::Sport => self.sport as u128,
            Field::Dport => self.dport as u128,
            Field::Proto => self.proto as u128,
            Field::Aux => self.aux() as u128,
            Field::Ct => self.ct as u8 as u128,
            Field::Iif => self.iif as u128,
            Field::Oif => self.oif as u128,
        }
    }
}

/// The `aux` field's value: TCP flags for TCP, the type for ICMP and
/// ICMPv6, 0 otherwise.
#[inline(always)]
pub(crate) fn aux_value(proto: u8, tcp_flags: u8, icmp_type: u8) -> u8 {
    match proto {
        6 => tcp_flags,
        1 | 58 => icmp_type,
        _ => 0,
    }
}

/// An address field's value: IPv4 addresses are their low 32 bits (the
/// upper bits of an IPv4-mapped form are ignored).
#[inline(always)]
pub(crate) fn addr_value(is_v6: bool, a: u128) -> u128 {
    if is_v6 { a } else { a & 0xffff_ffff }
}

/// The scalar fields of a packet that its verdict and the rule counters
/// read (beyond the match fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyFacts {
    pub is_v6: bool,
    /// IP protocol / final IPv6 next header.
    pub proto: u8,
    /// TCP flags byte; 0 for other protocols.
    pub tcp_flags: u8,
    /// ICMP / ICMPv6 type; 0 for other protocols.
    pub icmp_type: u8,
    /// Bytes counted for the matched rules (the IP length).
    pub len: u16,
}

/// What the classifier reads of a packet. [`PacketKey`] implements it, and
/// so does the pipeline's flow key, which a rule set without connection
/// tracking classifies in place (no conversion, no second key array).
pub trait ClassifyKey {
    /// The value of a match field, as [`PacketKey::value`] gives it.
    fn value(&self, f: Field) -> u128;
    /// The fields the verdict and the counters read.
    fn facts(&self) -> KeyFacts;
    /// The packet's address family.
    #[inline(always)]
    fn family(&self) -> Family {
        if self.facts().is_v6 {
            Family::V6
        } else {
            Family::V4
        }
    }
}

impl ClassifyKey for PacketKey {
    #[inline(always)]
    fn value(&self, f: Field) -> u128 {
        PacketKey::value(self, f)
    }
    #[inline(always)]
    fn facts(&self) -> KeyFacts {
        KeyFacts {
            is_v6: self.is_v6,
            proto: self.proto,
            tcp_flags: self.tcp_flags,
            icmp_type: self.icmp_type,
            len: self.len,
        }
    }
}

/// What to do with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    #[default]
    Accept,
    Drop,
    /// Drop and answer with a TCP RST (RFC 9293 §3.10.7.1).
    RejectTcpReset,
    /// Drop and answer with ICMP destination unreachable of this code (RFC 792).
    RejectIcmp(u8),
    /// Drop and answer with ICMPv6 destination unreachable of this code (RFC 4443 §3.1).
    RejectIcmp6(u8),
}

impl Action {
    /// Whether the packet continues (to the route lookup or the host).
    #[inline]
    pub fn accepts(self) -> bool {
        self == Action::Accept
    }
}

/// The firewall's answer for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
pub struct Verdict {
    pub action: Action,
    /// Index of the matched rule in the rule set's counter space
    /// (see [`crate::Firewall::rule_info`]); the chain's policy slot when no
    /// rule matched.
    pub rule: u32,
}
