//! Per-worker counters: every drop and punt under a named reason, plus
//! per-interface receive/transmit packets and bytes.
//!
//! Counters are plain `u64` arrays owned by one worker (no atomics on the
//! per-packet path). The control side takes copies with
//! [`crate::Worker::counters`] and sums workers with [`Counters::add`].

use serde::ser::{Serialize, SerializeMap, SerializeStruct, Serializer};

macro_rules! reasons {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => ($snake:literal, $desc:literal), )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
        }

        impl $name {
            /// Every reason, in counter-array order.
            pub const ALL: &'static [$name] = &[ $( $name::$variant, )* ];
            /// Number of reasons (length of the counter array).
            pub const COUNT: usize = Self::ALL.len();

            /// Stable snake_case name, used as the JSON / metrics key.
            pub const fn name(self) -> &'static str {
                match self { $( $name::$variant => $snake, )* }
            }

            /// One-line description for people reading counters.
            pub const fn description(self) -> &'static str {
                match self { $( $name::$variant => $desc, )* }
            }

            /// The reason with this stable name.
            pub fn from_name(name: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|r| r.name() == name)
            }

            /// Index into the counter array.
            #[inline(always)]
            pub const fn index(self) -> usize {
                self as usize
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }
    };
}

reasons! {
    /// Why a frame was dropped. Each reason has its own counter.
    pub enum DropReason {
        /// Shorter than an Ethernet header (or its VLAN tags).
        FrameTooShort => ("frame_too_short", "frame shorter than its Ethernet header and VLAN tags"),
        /// The input port has no interface for this frame's VLAN tag(s).
        UnknownInterface => ("unknown_interface", "no logical interface on this port for the frame's VLAN tags"),
        /// Unicast frame for another station's MAC address.
        NotOurMac => ("not_our_mac", "unicast frame addressed to another MAC"),
        /// EtherType other than IPv4, IPv6 or ARP.
        UnknownEthertype => ("unknown_ethertype", "EtherType other than IPv4, IPv6 or ARP"),
        /// ARP packet that is not Ethernet/IPv4 or is truncated.
        ArpMalformed => ("arp_malformed", "ARP packet not Ethernet/IPv4 or truncated"),
        /// ARP for an address this router does not own.
        ArpNotForUs => ("arp_not_for_us", "ARP whose target address is not the router's"),
        /// IPv4 header or datagram longer than the frame.
        Ipv4Truncated => ("ipv4_truncated", "IPv4 header or total length beyond the frame (RFC 1812 5.2.2)"),
        /// IPv4 version field not 4.
        Ipv4BadVersion => ("ipv4_bad_version", "IPv4 version field not 4 (RFC 1812 5.2.2)"),
        /// IPv4 IHL below 5.
        Ipv4BadHeaderLength => ("ipv4_bad_header_length", "IPv4 IHL below 5 (RFC 1812 5.2.2)"),
        /// IPv4 total length below the header length.
        Ipv4BadTotalLength => ("ipv4_bad_total_length", "IPv4 total length below the header length (RFC 1812 5.2.2)"),
        /// IPv4 header checksum does not verify.
        Ipv4BadChecksum => ("ipv4_bad_checksum", "IPv4 header checksum does not verify (RFC 1812 5.2.2)"),
        /// IPv4 martian source address.
        Ipv4MartianSource => ("ipv4_martian_source", "IPv4 source 0/8, 127/8, multicast, class E or broadcast (RFC 1812 5.3.7)"),
        /// IPv4 martian destination address.
        Ipv4MartianDestination => ("ipv4_martian_destination", "IPv4 destination 0/8, 127/8 or class E (RFC 1812 5.3.7)"),
        /// IPv6 header or payload longer than the frame.
        Ipv6Truncated => ("ipv6_truncated", "IPv6 header or payload length beyond the frame (RFC 8200 3)"),
        /// IPv6 version field not 6.
        Ipv6BadVersion => ("ipv6_bad_version", "IPv6 version field not 6 (RFC 8200 3)"),
        /// IPv6 source that must never be forwarded.
        Ipv6MartianSource => ("ipv6_martian_source", "IPv6 source multicast, unspecified, loopback or v4-mapped (RFC 4291 2.5)"),
        /// IPv6 destination that must never be forwarded.
        Ipv6MartianDestination => ("ipv6_martian_destination", "IPv6 destination unspecified, loopback or v4-mapped (RFC 4291 2.5)"),
        /// IPv6 link-local source or destination on a packet to forward.
        Ipv6LinkLocal => ("ipv6_link_local", "IPv6 link-local source or destination not forwarded (RFC 4291 2.5.6)"),
        /// Multicast destination the router does not listen to; no multicast routing.
        MulticastNotRouted => ("multicast_not_routed", "multicast destination outside the link-local groups; not routed"),
        /// Received as link-layer broadcast/multicast but not addressed to the router.
        L2BroadcastNotForwarded => ("l2_broadcast_not_forwarded", "IP packet in a link-layer broadcast frame is not forwarded (RFC 1812 5.3.4)"),
        /// IPv4 TTL expired in transit.
        TtlExpired => ("ttl_expired", "IPv4 TTL expired in transit (RFC 1812 5.3.1)"),
        /// IPv6 hop limit expired in transit.
        HopLimitExpired => ("hop_limit_expired", "IPv6 hop limit expired in transit (RFC 8200 3)"),
        /// Denied by the ACL stage.
        AclDenied => ("acl_denied", "denied by the firewall classifier"),
        /// No route to the destination.
        NoRoute => ("no_route", "no route to the destination"),
        /// The route is a blackhole.
        RouteBlackhole => ("route_blackhole", "the destination's route is a blackhole: dropped silently"),
        /// The route is unreachable.
        RouteUnreachable => ("route_unreachable", "the destination's route is unreachable: dropped, ICMP unreachable sent"),
        /// The route is prohibit.
        RouteProhibited => ("route_prohibited", "the destination's route is prohibit: dropped, ICMP administratively prohibited sent"),
        /// The route's next-hop id is not in the adjacency table.
        BadNextHop => ("bad_next_hop", "route points to a missing or empty next-hop set"),
        /// IPv4 with DF set larger than the egress MTU.
        FragmentationNeeded => ("fragmentation_needed", "IPv4 with DF larger than the egress MTU (RFC 1191)"),
        /// IPv6 packet larger than the egress MTU.
        PacketTooBig => ("packet_too_big", "IPv6 packet larger than the egress MTU (RFC 8200 5)"),
        /// Malformed IPv4 options on a packet to forward (found by the
        /// input stage, or while fragmenting).
        Ipv4BadOptions => ("ipv4_bad_options", "IPv4 option length missing, below 2 or past the header (RFC 791 3.1); ICMP parameter problem sent"),
        /// No room in the worker's pool for generated fragments.
        PoolExhausted => ("pool_exhausted", "no free buffer for generated packets in this batch"),
        /// Not enough headroom or tailroom to write the egress L2 header.
        NoHeadroom => ("no_headroom", "frame buffer too small for the egress L2 header"),
        /// More frames in the call than the worker's batch capacity.
        BatchOverflow => ("batch_overflow", "frame beyond the worker's batch capacity"),
    }
}

reasons! {
    /// Why a frame was handed to the host instead of being forwarded.
    pub enum PuntReason {
        /// Addressed to one of the router's own unicast addresses.
        LocalAddress => ("local_address", "addressed to one of the router's addresses"),
        /// IPv4 limited or directed broadcast of a connected subnet.
        Broadcast => ("broadcast", "IPv4 limited broadcast or a connected subnet's broadcast"),
        /// Link-local scope multicast (224.0.0.0/24, ff02::/16): routing protocols, ND.
        Multicast => ("multicast", "link-local multicast (224.0.0.0/24, ff02::/16): routing protocols, ND, MLD"),
        /// ARP addressed to the router (or gratuitous).
        Arp => ("arp", "ARP for one of the router's addresses, or gratuitous ARP"),
        /// Next hop has no known MAC; the host resolves it (ARP / ND).
        NeighbourMiss => ("neighbour_miss", "next hop's MAC unknown; handed to the host to resolve"),
    }
}

reasons! {
    /// Why an ICMP or ICMPv6 error the pipeline owed was not sent (not
    /// counting the rate limit, `icmp_rate_limited`).
    pub enum IcmpSuppressed {
        /// The packet was an ICMP error itself.
        AboutIcmpError => ("about_icmp_error", "never about an ICMP error (RFC 1812 4.3.2.7, RFC 4443 2.4 (e))"),
        /// A non-first IPv4 fragment.
        NonFirstFragment => ("non_first_fragment", "never about a non-first IPv4 fragment (RFC 1812 4.3.2.7)"),
        /// Its source was a broadcast address.
        ToBroadcast => ("to_broadcast", "never to a broadcast source (RFC 1812 4.3.2.7)"),
        /// No interface has an address of the family to send from.
        NoSourceAddress => ("no_source_address", "no interface address of the family to send it from"),
        /// No route back to the packet's source.
        NoRouteBack => ("no_route_back", "no route back to the packet's source"),
        /// The next hop back has no known MAC yet (its resolution is asked for).
        NeighbourUnresolved => ("neighbour_unresolved", "the next hop back is unresolved; the host is asked to resolve it"),
        /// No buffer for the error in this batch.
        NoBuffer => ("no_buffer", "no free buffer for generated packets in this batch"),
    }
}

/// Per-interface traffic counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct InterfaceCounters {
    /// Frames received on the interface.
    pub rx_packets: u64,
    /// Bytes of those frames.
    pub rx_bytes: u64,
    /// Frames received and dropped (any reason).
    pub rx_dropped: u64,
    /// Frames sent out of the interface (forwarded and generated).
    pub tx_packets: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
}

impl InterfaceCounters {
    /// Adds another set of counters.
    pub fn add(&mut self, o: &InterfaceCounters) {
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.rx_dropped += o.rx_dropped;
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
    }
}

/// One worker's counters (or the sum of several workers').
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counters {
    /// Frames processed.
    pub rx_frames: u64,
    /// IPv4 packets forwarded (fragmented originals count once).
    pub forwarded_ipv4: u64,
    /// IPv6 packets forwarded.
    pub forwarded_ipv6: u64,
    /// ICMP / ICMPv6 errors generated and queued.
    pub icmp_sent: u64,
    /// ICMP errors not sent because the token bucket was empty.
    pub icmp_rate_limited: u64,
    /// ICMP errors not sent by rule (answer to an ICMP error, non-first
    /// fragment, broadcast source, no source address, no route back, next
    /// hop back unresolved, no buffer): the sum of `icmp_suppressed_by`.
    pub icmp_suppressed: u64,
    /// The same by cause, indexed by [`IcmpSuppressed::index`].
    pub icmp_suppressed_by: [u64; IcmpSuppressed::COUNT],
    /// IPv4 fragments generated.
    pub fragments_sent: u64,
    /// TCP resets generated for the ACL (RFC 9293 §3.10.7.1).
    pub tcp_resets_sent: u64,
    /// TCP resets not sent (answer to a RST, non-first fragment, truncated
    /// header, broadcast source, no route or neighbour back).
    pub tcp_resets_suppressed: u64,
    /// Drops by reason, indexed by [`DropReason::index`].
    pub drops: [u64; DropReason::COUNT],
    /// Punts by reason, indexed by [`PuntReason::index`].
    pub punts: [u64; PuntReason::COUNT],
    /// Per-interface counters, indexed by [`crate::InterfaceId`].
    pub interfaces: Vec<InterfaceCounters>,
}

impl Default for Counters {
    fn default() -> Self {
        Self::new(0)
    }
}

impl Counters {
    /// Zeroed counters for `interfaces` interfaces.
    pub fn new(interfaces: usize) -> Self {
        Self {
            rx_frames: 0,
            forwarded_ipv4: 0,
            forwarded_ipv6: 0,
            icmp_sent: 0,
            icmp_rate_limited: 0,
            icmp_suppressed: 0,
            icmp_suppressed_by: [0; IcmpSuppressed::COUNT],
            fragments_sent: 0,
            tcp_resets_sent: 0,
            tcp_resets_suppressed: 0,
            drops: [0; DropReason::COUNT],
            punts: [0; PuntReason::COUNT],
            interfaces: vec![InterfaceCounters::default(); interfaces],
        }
    }

    /// Count of one drop reason.
    pub fn drop_count(&self, r: DropReason) -> u64 {
        self.drops[r.index()]
    }

    /// Count of one punt reason.
    pub fn punt_count(&self, r: PuntReason) -> u64 {
        self.punts[r.index()]
    }

    /// Total drops over all reasons.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Total punts over all reasons.
    pub fn total_punts(&self) -> u64 {
        self.punts.iter().sum()
    }

    /// Adds another worker's counters into these (interface vectors of
    /// different lengths are summed index by index).
    pub fn add(&mut self, o: &Counters) {
        self.rx_frames += o.rx_frames;
        self.forwarded_ipv4 += o.forwarded_ipv4;
        self.forwarded_ipv6 += o.forwarded_ipv6;
        self.icmp_sent += o.icmp_sent;
        self.icmp_rate_limited += o.icmp_rate_limited;
        self.icmp_suppressed += o.icmp_suppressed;
        for (a, b) in self
            .icmp_suppressed_by
            .iter_mut()
            .zip(&o.icmp_suppressed_by)
        {
            *a += b;
        }
        self.fragments_sent += o.fragments_sent;
        self.tcp_resets_sent += o.tcp_resets_sent;
        self.tcp_resets_suppressed += o.tcp_resets_suppressed;
        for (a, b) in self.drops.iter_mut().zip(o.drops.iter()) {
            *a += b;
        }
        for (a, b) in self.punts.iter_mut().zip(o.punts.iter()) {
            *a += b;
        }
        if self.interfaces.len() < o.interfaces.len() {
            self.interfaces
                .resize(o.interfaces.len(), InterfaceCounters::default());
        }
        for (a, b) in self.interfaces.iter_mut().zip(o.interfaces.iter()) {
            a.add(b);
        }
    }

    /// Sum of many workers' counters.
    pub fn sum<'a>(all: impl IntoIterator<Item = &'a Counters>) -> Counters {
        let mut total = Counters::new(0);
        for c in all {
            total.add(c);
        }
        total
    }

    #[inline(always)]
    pub(crate) fn drop(&mut self, r: DropReason) {
        self.drops[r.index()] += 1;
    }

    #[inline(always)]
    pub(crate) fn punt(&mut self, r: PuntReason) {
        self.punts[r.index()] += 1;
    }

    /// Counts an ICMP error not sent, under its cause.
    pub(crate) fn icmp_suppress(&mut self, c: IcmpSuppressed) {
        self.icmp_suppressed += 1;
        self.icmp_suppressed_by[c.index()] += 1;
    }
}

struct ReasonMap<'a, R: 'static>(&'a [u64], &'static [R], fn(R) -> &'static str);

impl<R: Copy> Serialize for ReasonMap<'_, R> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (r, v) in self.1.iter().zip(self.0.iter()) {
            m.serialize_entry((self.2)(*r), v)?;
        }
        m.end()
    }
}

/// Serialized as an object: scalar counters, then `drops` and `punts` as
/// objects keyed by each reason's stable name, then `interfaces` as an
/// array indexed by interface id.
impl Serialize for Counters {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Counters", 13)?;
        st.serialize_field("rx_frames", &self.rx_frames)?;
        st.serialize_field("forwarded_ipv4", &self.forwarded_ipv4)?;
        st.serialize_field("forwarded_ipv6", &self.forwarded_ipv6)?;
        st.serialize_field("icmp_sent", &self.icmp_sent)?;
        st.serialize_field("icmp_rate_limited", &self.icmp_rate_limited)?;
        st.serialize_field("icmp_suppressed", &self.icmp_suppressed)?;
        st.serialize_field(
            "icmp_suppressed_by",
            &ReasonMap(
                &self.icmp_suppressed_by,
                IcmpSuppressed::ALL,
                IcmpSuppressed::name,
            ),
        )?;
        st.serialize_field("fragments_sent", &self.fragments_sent)?;
        st.serialize_field("tcp_resets_sent", &self.tcp_resets_sent)?;
        st.serialize_field("tcp_resets_suppressed", &self.tcp_resets_suppressed)?;
        st.serialize_field(
            "drops",
            &ReasonMap(&self.drops, DropReason::ALL, DropReason::name),
        )?;
        st.serialize_field(
            "punts",
            &ReasonMap(&self.punts, PuntReason::ALL, PuntReason::name),
        )?;
        st.serialize_field("interfaces", &self.interfaces)?;
        st.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_snake_case() {
        let mut names: Vec<&str> = DropReason::ALL.iter().map(|r| r.name()).collect();
        names.extend(PuntReason::ALL.iter().map(|r| r.name()));
        for n in &names {
            assert!(
                n.chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()),
                "{n}"
            );
        }
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len());
        for r in DropReason::ALL {
            assert_eq!(DropReason::from_name(r.name()), Some(*r));
            assert!(!r.description().is_empty());
        }
    }

    #[test]
    fn add_sums_everything() {
        let mut a = Counters::new(2);
        a.drop(DropReason::NoRoute);
        a.interfaces[1].rx_packets = 3;
        let mut b = Counters::new(3);
        b.drop(DropReason::NoRoute);
        b.punt(PuntReason::Arp);
        b.interfaces[2].tx_bytes = 7;
        b.forwarded_ipv6 = 5;
        let t = Counters::sum([&a, &b]);
        assert_eq!(t.drop_count(DropReason::NoRoute), 2);
        assert_eq!(t.punt_count(PuntReason::Arp), 1);
        assert_eq!(t.interfaces.len(), 3);
        assert_eq!(t.interfaces[1].rx_packets, 3);
        assert_eq!(t.interfaces[2].tx_bytes, 7);
        assert_eq!(t.forwarded_ipv6, 5);
    }
}
