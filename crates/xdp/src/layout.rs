//! The map layout of `bpf/fastfwd_xdp.h`, mirrored: sizes, constants and
//! the byte encoding of every key and value. Values are plain byte arrays
//! in the host's byte order (the program runs on the same machine), except
//! addresses, which stay in network order as packets carry them.
//!
//! The header is the definition; `tests::header_matches` parses it and
//! checks every constant and struct size below against it, and
//! `tests::encoders_write_each_field_where_the_header_has_it` checks that
//! each encoder puts each field at the header's offset for it.

use pipeline::{DropReason, PuntReason};

pub const MAX_PORTS: u32 = 64;
pub const MAX_QUEUES: u32 = 64;
/// Entries of `ifindex_port`: the ports' interfaces and their bonds'
/// members.
pub const MAX_RECEIVERS: u32 = 256;

/// An `ifindex_port` value: the port the interface receives for, and the
/// first of its exception sockets within the port's (an aggregated port's
/// members are numbered one after the other: member k's queue q has
/// socket `first + q`, key `port * MAX_QUEUES + first + q` in `xsks`).
pub fn receiver(port: u16, first_socket: u16) -> u32 {
    u32::from(port) | u32::from(first_socket) << 16
}
pub const MAX_IFACES: u32 = 256;
pub const MAX_ADJ: u32 = 65536;
pub const MAX_HOPS: u32 = 65536;
pub const MAX_NEIGHBOURS: u32 = 65536;
pub const MAX_LOCAL: u32 = 4096;
pub const MAX_VLANS: u32 = 4096;

pub const DIRECT4: u32 = 18;
pub const DIRECT6: u32 = 18;
pub const TOP4_PAIRS: u32 = 1 << (DIRECT4 - 1);
pub const TOP6_PAIRS: u32 = 1 << (DIRECT6 - 1);
pub const LEVELS4: u32 = 3;
pub const LEVELS6: u32 = 19;
pub const NODE_FLAG: u32 = 0x8000_0000;
pub const LEAF_CHUNK_FLAG: u32 = 0x4000_0000;
pub const LEAF_CHUNK_HEADER: u32 = 4;
pub const NO_ROUTE: u32 = 0x7fff_ffff;
pub const STRIDE: u32 = 6;

pub const CFG_HOST_FIRST: u32 = 1;
pub const CFG_EXCEPT_ALL: u32 = 2;
pub const CFG_TEST: u32 = 4;
pub const CFG_FIREWALL: u32 = 8;
pub const CFG_CONNTRACK: u32 = 16;
pub const CFG_EXCEPTIONS_TO_KERNEL: u32 = 32;

pub const NO_IFACE: u16 = 0xffff;
pub const IFACE_PUNT_TX: u8 = 1;
/// A policy rule before main's selects packets received on the interface
/// (`FF_IFACE_RULES4` / `FF_IFACE_RULES6`).
pub const IFACE_RULES4: u8 = 2;
pub const IFACE_RULES6: u8 = 4;
/// `tx_faults` entries: one per port, then the exception path's sockets.
pub const TX_FAULT_SLOTS: u32 = MAX_PORTS + 1;
pub const HOP_GATEWAY: u8 = 1;
pub const HOP_MAC: u8 = 2;
pub const LOCAL_UNICAST: u32 = 1;
pub const LOCAL_BROADCAST: u32 = 2;

pub const DROP_SLOTS: usize = 48;
pub const PUNT_SLOTS: usize = 8;
pub const EXC_SLOTS: usize = 16;

/// Why the program handed a packet to the user-space pipeline (the
/// `FF_EXC_*` values), with the names `show runtime` and replay's summary
/// print.
pub const EXCEPTIONS: [(u32, &str); 11] = [
    (0, "ttl_expiring"),
    (1, "ipv4_options"),
    (2, "no_route_or_unreachable"),
    (3, "neighbour_unknown"),
    (4, "larger_than_mtu"),
    (5, "firewall_rules"),
    (6, "outside_the_maps"),
    (7, "firewall_reject"),
    (8, "conntrack_unknown_flow"),
    (9, "egress_refuses_xdp"),
    (10, "policy_rules"),
];

/// Policy rules' filters (`struct ff_rule_filter`, `struct ff_rule_key`):
/// the prefix lengths a filter holds at most, its signature bitmap's
/// words, the prefixes of both families per half.
pub const RULE_LENS: usize = 16;
pub const RULE_SIG_WORDS: usize = 1024;
pub const MAX_RULE_PREFIXES: u32 = 4096;

/// Connection tracking's fast path (`FF_CT_*`, `FF_META_*`).
pub const CT_MAX: u32 = 65536;
pub const CT_ESTABLISHED: u8 = 2;
pub const CT_CLOSING: u8 = 3;
pub const CT_STATE_ESTABLISHED: u32 = 2;
pub const META_MAGIC: u32 = 0xfa57_c7e1;
pub const CT_HINT_NONE: u32 = 0;
pub const CT_HINT_ABSENT: u32 = 1;
pub const CT_HINT_ESTABLISHED: u32 = 2;

/// The firewall's tables (`FF_FW_*`).
pub const FW_FIELDS: usize = 9;
pub const FW_MAX_STEPS: usize = 7;
pub const FW_MAX_COUNTED: usize = 8;
pub const FW_OUTCOME_WORDS: usize = 2 + FW_MAX_COUNTED;
pub const FW_MAX_SLOTS: u32 = 16384;
pub const FW_NO_RULE: u32 = 0xffff_ffff;
pub const FW_CONST: u32 = 0;
pub const FW_DIRECT: u32 = 1;
pub const FW_TRIE: u32 = 2;
pub const FW_ACCEPT: u32 = 0;
pub const FW_DROP: u32 = 1;
pub const FW_REJECT: u32 = 2;
pub const FW_COUNT: u32 = 3;
pub const FW_FIELD_SIZE: usize = 24;
pub const FW_STEP_SIZE: usize = 16;
pub const FW_META_SIZE: usize = 48 + FW_FIELDS * FW_FIELD_SIZE + 2 * FW_MAX_STEPS * FW_STEP_SIZE;
pub const FW_COUNTER_SIZE: usize = 16;
pub type FwMeta = [u8; FW_META_SIZE];

/// `FF_OUT_*`: what the program did with a frame under `FF_CFG_TEST`.
pub const OUT_FORWARD: u32 = 1;
pub const OUT_DROP: u32 = 2;
pub const OUT_PUNT: u32 = 3;
pub const OUT_EXCEPTION: u32 = 4;
pub const OUT_HOST: u32 = 5;

/// The drop reasons the program decides, as (header name, pipeline reason).
pub const DROPS: [(&str, DropReason); 23] = [
    ("FF_DROP_FRAME_TOO_SHORT", DropReason::FrameTooShort),
    ("FF_DROP_UNKNOWN_INTERFACE", DropReason::UnknownInterface),
    ("FF_DROP_NOT_OUR_MAC", DropReason::NotOurMac),
    ("FF_DROP_UNKNOWN_ETHERTYPE", DropReason::UnknownEthertype),
    ("FF_DROP_ARP_MALFORMED", DropReason::ArpMalformed),
    ("FF_DROP_ARP_NOT_FOR_US", DropReason::ArpNotForUs),
    ("FF_DROP_IPV4_TRUNCATED", DropReason::Ipv4Truncated),
    ("FF_DROP_IPV4_BAD_VERSION", DropReason::Ipv4BadVersion),
    (
        "FF_DROP_IPV4_BAD_HEADER_LENGTH",
        DropReason::Ipv4BadHeaderLength,
    ),
    (
        "FF_DROP_IPV4_BAD_TOTAL_LENGTH",
        DropReason::Ipv4BadTotalLength,
    ),
    ("FF_DROP_IPV4_BAD_CHECKSUM", DropReason::Ipv4BadChecksum),
    ("FF_DROP_IPV4_MARTIAN_SOURCE", DropReason::Ipv4MartianSource),
    (
        "FF_DROP_IPV4_MARTIAN_DESTINATION",
        DropReason::Ipv4MartianDestination,
    ),
    ("FF_DROP_IPV6_TRUNCATED", DropReason::Ipv6Truncated),
    ("FF_DROP_IPV6_BAD_VERSION", DropReason::Ipv6BadVersion),
    ("FF_DROP_IPV6_MARTIAN_SOURCE", DropReason::Ipv6MartianSource),
    (
        "FF_DROP_IPV6_MARTIAN_DESTINATION",
        DropReason::Ipv6MartianDestination,
    ),
    ("FF_DROP_IPV6_LINK_LOCAL", DropReason::Ipv6LinkLocal),
    (
        "FF_DROP_MULTICAST_NOT_ROUTED",
        DropReason::MulticastNotRouted,
    ),
    (
        "FF_DROP_L2_BROADCAST_NOT_FORWARDED",
        DropReason::L2BroadcastNotForwarded,
    ),
    ("FF_DROP_ACL_DENIED", DropReason::AclDenied),
    ("FF_DROP_ROUTE_BLACKHOLE", DropReason::RouteBlackhole),
    ("FF_DROP_BAD_NEXT_HOP", DropReason::BadNextHop),
];

/// The punt reasons the program decides.
pub const PUNTS: [(&str, PuntReason); 4] = [
    ("FF_PUNT_LOCAL_ADDRESS", PuntReason::LocalAddress),
    ("FF_PUNT_BROADCAST", PuntReason::Broadcast),
    ("FF_PUNT_MULTICAST", PuntReason::Multicast),
    ("FF_PUNT_ARP", PuntReason::Arp),
];

// Every reason has a counter slot; the node walks reach every address bit.
const _: () = assert!(DropReason::COUNT <= DROP_SLOTS && PuntReason::COUNT <= PUNT_SLOTS);
const _: () = assert!(DIRECT4 + LEVELS4 * STRIDE >= 32 && DIRECT6 + LEVELS6 * STRIDE >= 128);
// The program's IPv6 stride reads `lo >> (64 - off)` for offsets below 64.
const _: () = assert!(DIRECT6 > 0 && DIRECT6 < 64);

/// Struct sizes, as `sizeof` gives them in C.
pub const CONFIG_SIZE: usize = 48;
pub const NODE_SIZE: usize = 24;
pub const PORT_SIZE: usize = 8;
pub const VLAN_KEY_SIZE: usize = 8;
pub const IFACE_SIZE: usize = 28;
pub const ADJ_SIZE: usize = 8;
pub const HOP_SIZE: usize = 12;
pub const NEIGH_KEY_SIZE: usize = 20;
pub const MAC_SIZE: usize = 8;
pub const LOCAL4_KEY_SIZE: usize = 8;
pub const LOCAL6_KEY_SIZE: usize = 20;
pub const TEST_OUT_SIZE: usize = 16;
pub const CT_KEY_SIZE: usize = 40;
pub const CT_VALUE_SIZE: usize = 32;
pub const META_SIZE: usize = 8;
pub const TX_FAULT_SIZE: usize = 16;
pub const TP_REDIRECT_ERR_SIZE: usize = 36;
pub const TP_DEVMAP_XMIT_SIZE: usize = 32;
pub const RULE_FILTER_SIZE: usize = 8 + RULE_LENS + 8 * RULE_SIG_WORDS;
pub const RULE_KEY_SIZE: usize = 20;
/// `struct ff_counters` in 64-bit words.
pub const COUNTER_WORDS: usize = 8 + EXC_SLOTS + DROP_SLOTS + PUNT_SLOTS + 5 * MAX_IFACES as usize;
/// Word offsets inside `struct ff_counters`.
pub const CTR_RX_FRAMES: usize = 0;
pub const CTR_FORWARDED_IPV4: usize = 1;
pub const CTR_FORWARDED_IPV6: usize = 2;
pub const CTR_TO_HOST: usize = 3;
pub const CTR_EXCEPTIONS_LOST: usize = 4;
pub const CTR_TX_REDIRECT_FAILED: usize = 5;
pub const CTR_CT_ESTABLISHED: usize = 6;
pub const CTR_META_FAILED: usize = 7;
pub const CTR_EXCEPTIONS: usize = 8;
pub const CTR_DROPS: usize = CTR_EXCEPTIONS + EXC_SLOTS;
pub const CTR_PUNTS: usize = CTR_DROPS + DROP_SLOTS;
pub const CTR_IFACES: usize = CTR_PUNTS + PUNT_SLOTS;

pub type Config = [u8; CONFIG_SIZE];
pub type NodeValue = [u8; NODE_SIZE];
pub type PortValue = [u8; PORT_SIZE];
pub type VlanKey = [u8; VLAN_KEY_SIZE];
pub type IfaceValue = [u8; IFACE_SIZE];
pub type AdjValue = [u8; ADJ_SIZE];
pub type HopValue = [u8; HOP_SIZE];
pub type NeighKey = [u8; NEIGH_KEY_SIZE];
pub type MacValue = [u8; MAC_SIZE];
pub type Local4Key = [u8; LOCAL4_KEY_SIZE];
pub type Local6Key = [u8; LOCAL6_KEY_SIZE];
pub type TestOut = [u8; TEST_OUT_SIZE];
pub type CtKey = [u8; CT_KEY_SIZE];
pub type CtValue = [u8; CT_VALUE_SIZE];
pub type RuleFilterValue = [u8; RULE_FILTER_SIZE];
pub type RuleKey = [u8; RULE_KEY_SIZE];
pub type CounterBlock = [u64; COUNTER_WORDS];

/// Capacity of the FIB maps, per half.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FibCapacity {
    /// IPv4 trie nodes.
    pub nodes4: u32,
    /// IPv4 leaves (stored two per element).
    pub leaves4: u32,
    /// IPv6 trie nodes.
    pub nodes6: u32,
    /// IPv6 leaves.
    pub leaves6: u32,
    /// Firewall table entries (32-bit, stored two per element).
    pub firewall: u32,
}

impl FibCapacity {
    /// Room for a full Internet table with headroom: 901,899 IPv4 routes
    /// take 66,127 nodes and 993,936 leaves, 160,147 IPv6 routes 93,961
    /// nodes and 260,747 leaves (the full table in data/, 2026).
    pub const FULL_TABLE: FibCapacity = FibCapacity {
        nodes4: 1 << 18,
        leaves4: 1 << 21,
        nodes6: 1 << 18,
        leaves6: 1 << 20,
        firewall: 1 << 20,
    };

    /// Small maps, for tests and replays of small tables.
    pub const SMALL: FibCapacity = FibCapacity {
        nodes4: 1 << 12,
        leaves4: 1 << 14,
        nodes6: 1 << 12,
        leaves6: 1 << 14,
        firewall: 1 << 20,
    };

    /// Room for `n4`/`l4` IPv4 and `n6`/`l6` IPv6 nodes and leaves, with
    /// the growth that route churn needs, at least [`FibCapacity::SMALL`].
    pub fn for_sizes(n4: usize, l4: usize, n6: usize, l6: usize) -> FibCapacity {
        let room = |n: usize, min: u32| ((n * 2).max(min as usize).next_power_of_two()) as u32;
        FibCapacity {
            nodes4: room(n4, Self::SMALL.nodes4),
            leaves4: room(l4, Self::SMALL.leaves4),
            nodes6: room(n6, Self::SMALL.nodes6),
            leaves6: room(l6, Self::SMALL.leaves6),
            firewall: Self::SMALL.firewall,
        }
    }

    /// Leaf pairs (8-byte elements) per half.
    pub fn leaf4_pairs(&self) -> u32 {
        self.leaves4.div_ceil(2)
    }

    /// Leaf pairs per half, IPv6.
    pub fn leaf6_pairs(&self) -> u32 {
        self.leaves6.div_ceil(2)
    }

    /// Firewall data pairs per half.
    pub fn fw_pairs(&self) -> u32 {
        self.firewall.div_ceil(2)
    }

    /// Bytes of locked memory the FIB maps take (both halves).
    pub fn bytes(&self) -> u64 {
        let half = u64::from(TOP4_PAIRS + TOP6_PAIRS) * 8
            + u64::from(self.nodes4 + self.nodes6) * NODE_SIZE as u64
            + u64::from(self.leaf4_pairs() + self.leaf6_pairs()) * 8;
        2 * half
    }
}

/// The kernel's ids of the maps the tracepoint programs recognise
/// (`tx_ports`, `xsks`; 0: none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TracedMaps {
    pub tx_ports: u32,
    pub xsks: u32,
}

pub fn config(
    active: u32,
    flags: u32,
    cap: &FibCapacity,
    ct_epoch: u32,
    generation: u64,
    traced: TracedMaps,
) -> Config {
    let mut c = [0u8; CONFIG_SIZE];
    c[0..4].copy_from_slice(&active.to_ne_bytes());
    c[4..8].copy_from_slice(&flags.to_ne_bytes());
    c[8..12].copy_from_slice(&cap.nodes4.to_ne_bytes());
    c[12..16].copy_from_slice(&cap.leaf4_pairs().to_ne_bytes());
    c[16..20].copy_from_slice(&cap.nodes6.to_ne_bytes());
    c[20..24].copy_from_slice(&cap.leaf6_pairs().to_ne_bytes());
    c[24..28].copy_from_slice(&cap.fw_pairs().to_ne_bytes());
    c[28..32].copy_from_slice(&ct_epoch.to_ne_bytes());
    c[32..40].copy_from_slice(&generation.to_ne_bytes());
    c[40..44].copy_from_slice(&traced.tx_ports.to_ne_bytes());
    c[44..48].copy_from_slice(&traced.xsks.to_ne_bytes());
    c
}

pub fn node(children: u64, leafvec: u64, child_base: u32, leaf_base: u32) -> NodeValue {
    let mut v = [0u8; NODE_SIZE];
    v[0..8].copy_from_slice(&children.to_ne_bytes());
    v[8..16].copy_from_slice(&leafvec.to_ne_bytes());
    v[16..20].copy_from_slice(&child_base.to_ne_bytes());
    v[20..24].copy_from_slice(&leaf_base.to_ne_bytes());
    v
}

/// (children, leafvec, child_base, leaf_base) of an encoded node.
pub fn node_fields(v: &NodeValue) -> (u64, u64, u32, u32) {
    let u64_at = |i: usize| u64::from_ne_bytes(v[i..i + 8].try_into().unwrap_or([0; 8]));
    let u32_at = |i: usize| u32::from_ne_bytes(v[i..i + 4].try_into().unwrap_or([0; 4]));
    (u64_at(0), u64_at(8), u32_at(16), u32_at(20))
}

/// Two 32-bit entries in one 8-byte element: `lo` is entry 2k.
pub fn pair(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

/// Entry `i` of a paired array.
pub fn pair_get(pairs: &[u64], i: u32) -> Option<u32> {
    let p = *pairs.get((i >> 1) as usize)?;
    Some(if i & 1 == 1 {
        (p >> 32) as u32
    } else {
        p as u32
    })
}

pub fn port(untagged: Option<u16>, has_vlans: bool, ifindex: u32) -> PortValue {
    let mut v = [0u8; PORT_SIZE];
    v[0..2].copy_from_slice(&untagged.unwrap_or(NO_IFACE).to_ne_bytes());
    v[2..4].copy_from_slice(&u16::from(has_vlans).to_ne_bytes());
    v[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    v
}

pub fn vlan_key(port: u16, outer: u16, inner: u16, set: u16) -> VlanKey {
    let mut v = [0u8; VLAN_KEY_SIZE];
    v[0..2].copy_from_slice(&port.to_ne_bytes());
    v[2..4].copy_from_slice(&outer.to_ne_bytes());
    v[4..6].copy_from_slice(&inner.to_ne_bytes());
    v[6..8].copy_from_slice(&set.to_ne_bytes());
    v
}

pub fn iface(mac: [u8; 6], mtu: u16, port: u16, tmpl: &[u8; 14], tmpl_len: u8) -> IfaceValue {
    let mut v = [0u8; IFACE_SIZE];
    v[0..6].copy_from_slice(&mac);
    v[6..8].copy_from_slice(&mtu.to_ne_bytes());
    v[8..10].copy_from_slice(&port.to_ne_bytes());
    v[10] = tmpl_len;
    // v[11]: flags, set by `set_iface_flags`.
    v[12..26].copy_from_slice(tmpl);
    v
}

/// The port of an encoded interface.
pub fn iface_port(v: &IfaceValue) -> u16 {
    u16::from_ne_bytes([v[8], v[9]])
}

/// The `FF_IFACE_*` flags of an encoded interface.
pub fn iface_flags(v: &IfaceValue) -> u8 {
    v[11]
}

/// Sets the `FF_IFACE_*` flags of an encoded interface.
pub fn set_iface_flags(v: &mut IfaceValue, flags: u8) {
    v[11] = flags;
}

/// (dropped, refused) of an encoded `struct ff_tx_fault`.
pub fn tx_fault_fields(v: &[u8; TX_FAULT_SIZE]) -> (u64, u64) {
    let at = |i: usize| u64::from_ne_bytes(v[i..i + 8].try_into().unwrap_or([0; 8]));
    (at(0), at(8))
}

/// The fields the tracepoint programs read, with their offsets in the
/// records (`struct ff_tp_redirect_err`, `struct ff_tp_devmap_xmit`): the
/// loader checks them against the kernel's format files.
pub const TP_REDIRECT_ERR_FIELDS: [(&str, usize); 3] =
    [("err", 20), ("map_id", 28), ("map_index", 32)];
pub const TP_DEVMAP_XMIT_FIELDS: [(&str, usize); 4] = [
    ("from_ifindex", 8),
    ("to_ifindex", 16),
    ("drops", 20),
    ("err", 28),
];

/// Whether a tracepoint's format file (`events/CATEGORY/NAME/format` in
/// tracefs) places each of `fields` at its offset, as 4-byte fields:
/// `Err` names the first that is missing or elsewhere.
pub fn check_tracepoint_format(format: &str, fields: &[(&str, usize)]) -> Result<(), String> {
    for &(name, offset) in fields {
        let found = format.lines().find_map(|l| {
            // "\tfield:int err;\toffset:20;\tsize:4;\tsigned:1;"
            let mut decl = None;
            let (mut off, mut size) = (None, None);
            // Plain decimal numbers only, as the kernel writes them.
            let number = |t: &str| {
                t.bytes()
                    .all(|b| b.is_ascii_digit())
                    .then(|| t.parse::<usize>().ok())
                    .flatten()
            };
            for part in l.trim().split(';') {
                let part = part.trim();
                if let Some(d) = part.strip_prefix("field:") {
                    decl = d.rsplit([' ', '*']).next();
                } else if let Some(o) = part.strip_prefix("offset:") {
                    off = number(o);
                } else if let Some(z) = part.strip_prefix("size:") {
                    size = number(z);
                }
            }
            (decl == Some(name)).then_some((off, size))
        });
        match found {
            Some((Some(o), Some(4))) if o == offset => {}
            Some((o, z)) => {
                return Err(format!(
                    "field {name} at offset {o:?} size {z:?}, not offset {offset} size 4"
                ));
            }
            None => return Err(format!("no field {name}")),
        }
    }
    Ok(())
}

pub fn adj(start: u32, count: u32) -> AdjValue {
    let mut v = [0u8; ADJ_SIZE];
    v[0..4].copy_from_slice(&start.to_ne_bytes());
    v[4..8].copy_from_slice(&count.to_ne_bytes());
    v
}

pub fn hop(iface: u16, flags: u8, mac: [u8; 6]) -> HopValue {
    let mut v = [0u8; HOP_SIZE];
    v[0..2].copy_from_slice(&iface.to_ne_bytes());
    v[2] = flags;
    v[4..10].copy_from_slice(&mac);
    v
}

pub fn neigh_key(iface: u16, set: u16, addr: u128) -> NeighKey {
    let mut v = [0u8; NEIGH_KEY_SIZE];
    v[0..2].copy_from_slice(&iface.to_ne_bytes());
    v[2..4].copy_from_slice(&set.to_ne_bytes());
    v[4..20].copy_from_slice(&addr.to_be_bytes());
    v
}

pub fn mac(mac: [u8; 6]) -> MacValue {
    let mut v = [0u8; MAC_SIZE];
    v[0..6].copy_from_slice(&mac);
    v
}

pub fn local4_key(addr: u32, set: u32) -> Local4Key {
    let mut v = [0u8; LOCAL4_KEY_SIZE];
    v[0..4].copy_from_slice(&addr.to_be_bytes());
    v[4..8].copy_from_slice(&set.to_ne_bytes());
    v
}

pub fn local6_key(addr: u128, set: u32) -> Local6Key {
    let mut v = [0u8; LOCAL6_KEY_SIZE];
    v[0..16].copy_from_slice(&addr.to_be_bytes());
    v[16..20].copy_from_slice(&set.to_ne_bytes());
    v
}

/// A rule filter: `enabled` (the family's rules select by prefixes,
/// interfaces or both), its prefixes' `lengths` (at most [`RULE_LENS`]) and
/// its signature bitmap.
pub fn rule_filter(enabled: bool, lengths: &[u8], sig: &[u64]) -> RuleFilterValue {
    let mut v = [0u8; RULE_FILTER_SIZE];
    v[0..4].copy_from_slice(&u32::from(enabled).to_ne_bytes());
    let n = lengths.len().min(RULE_LENS);
    v[4..8].copy_from_slice(&(n as u32).to_ne_bytes());
    v[8..8 + n].copy_from_slice(&lengths[..n]);
    for (i, w) in sig.iter().take(RULE_SIG_WORDS).enumerate() {
        let at = 8 + RULE_LENS + 8 * i;
        v[at..at + 8].copy_from_slice(&w.to_ne_bytes());
    }
    v
}

/// The key of a rule filter's prefix: `addr` masked to `len` bits, with
/// IPv4 in the top 32 bits (as the program holds addresses), filter
/// `kind` (v6 * 2 + dst) of half `set`.
pub fn rule_key(addr: u128, len: u8, set: u16, kind: u8) -> RuleKey {
    let mut v = [0u8; RULE_KEY_SIZE];
    v[0..16].copy_from_slice(&addr.to_be_bytes());
    v[16..18].copy_from_slice(&set.to_ne_bytes());
    v[18] = kind;
    v[19] = len;
    v
}

/// The 16-bit signature the program takes of an address (IPv4 in the top
/// 32 bits of `addr`): IPv4 its first 16 bits, IPv6 its first 16 bits XOR
/// the next 16.
pub fn rule_signature(v6: bool, addr: u128) -> u16 {
    let hi = (addr >> 64) as u64;
    if v6 {
        (((hi >> 48) ^ (hi >> 32)) & 0xffff) as u16
    } else {
        (hi >> 48) as u16
    }
}

pub fn test_out(kind: u32, detail: u32) -> TestOut {
    let mut v = [0u8; TEST_OUT_SIZE];
    v[0..4].copy_from_slice(&kind.to_ne_bytes());
    v[4..8].copy_from_slice(&detail.to_ne_bytes());
    v
}

/// (kind, detail, connection-tracking hint) of a `test_out` value.
pub fn test_out_fields(v: &TestOut) -> (u32, u32, u32) {
    let at = |i: usize| u32::from_ne_bytes([v[i], v[i + 1], v[i + 2], v[i + 3]]);
    (at(0), at(4), at(8))
}

/// The `ct_flows` key of a flow handed to the fast path.
pub fn ct_key(f: &firewall::FastFlow) -> CtKey {
    let mut v = [0u8; CT_KEY_SIZE];
    v[0..8].copy_from_slice(&((f.a >> 64) as u64).to_ne_bytes());
    v[8..16].copy_from_slice(&(f.a as u64).to_ne_bytes());
    v[16..24].copy_from_slice(&((f.b >> 64) as u64).to_ne_bytes());
    v[24..32].copy_from_slice(&(f.b as u64).to_ne_bytes());
    v[32..34].copy_from_slice(&f.pa.to_ne_bytes());
    v[34..36].copy_from_slice(&f.pb.to_ne_bytes());
    v[36] = f.proto;
    v[37] = u8::from(f.v6);
    v
}

/// The `ct_flows` value of a flow handed to the fast path in `epoch`.
pub fn ct_value(f: &firewall::FastFlow, epoch: u32) -> CtValue {
    let mut v = [0u8; CT_VALUE_SIZE];
    v[0..8].copy_from_slice(&f.expires.to_ne_bytes());
    v[8..16].copy_from_slice(&f.timeout_open.to_ne_bytes());
    v[16..24].copy_from_slice(&f.timeout_closing.to_ne_bytes());
    v[24..28].copy_from_slice(&epoch.to_ne_bytes());
    v[28] = if f.closing {
        CT_CLOSING
    } else {
        CT_ESTABLISHED
    };
    v[29] = u8::from(f.orig_a);
    v
}

/// Makes a `ct_flows` value one of connection-table `epoch`.
pub fn set_ct_value_epoch(v: &mut CtValue, epoch: u32) {
    v[24..28].copy_from_slice(&epoch.to_ne_bytes());
}

/// (expires, epoch, closing) of a `ct_flows` value.
pub fn ct_value_fields(v: &CtValue) -> (u64, u32, bool) {
    (
        u64::from_ne_bytes(v[0..8].try_into().unwrap_or([0; 8])),
        u32::from_ne_bytes([v[24], v[25], v[26], v[27]]),
        v[28] == CT_CLOSING,
    )
}

/// The connection-tracking hint the program put in front of a frame it
/// handed over (`struct ff_meta`), and the frame without it; a frame that
/// does not start with the magic (the program found no headroom for it,
/// counted as `meta_failed`) is the frame itself, with no hint (0).
pub fn split_hint(frame: &[u8]) -> (u8, &[u8]) {
    let Some((meta, rest)) = frame.split_first_chunk::<META_SIZE>() else {
        return (0, frame);
    };
    let magic = u32::from_ne_bytes([meta[0], meta[1], meta[2], meta[3]]);
    if magic != META_MAGIC {
        return (0, frame);
    }
    let hint = u32::from_ne_bytes([meta[4], meta[5], meta[6], meta[7]]);
    let hint = if hint <= CT_HINT_ESTABLISHED {
        hint as u8
    } else {
        0
    };
    (hint, rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use netio::c_header::CHeader;
    use std::collections::HashMap;

    const HEADER: &str = include_str!("../bpf/fastfwd_xdp.h");

    fn defines() -> HashMap<String, u64> {
        CHeader::new(HEADER).numeric_defines()
    }

    /// Size of `struct NAME` as the C compiler lays it out.
    fn struct_size(name: &str) -> usize {
        CHeader::new(HEADER).struct_size(
            name,
            &[
                ("ff_if_counters", 40, 8),
                ("ff_fw_field", FW_FIELD_SIZE, 4),
                ("ff_fw_step", FW_STEP_SIZE, 4),
            ],
        )
    }

    #[test]
    fn header_matches() {
        let d = defines();
        let want: &[(&str, u64)] = &[
            ("FF_MAX_PORTS", MAX_PORTS.into()),
            ("FF_MAX_QUEUES", MAX_QUEUES.into()),
            ("FF_MAX_RECEIVERS", MAX_RECEIVERS.into()),
            ("FF_MAX_IFACES", MAX_IFACES.into()),
            ("FF_MAX_ADJ", MAX_ADJ.into()),
            ("FF_MAX_HOPS", MAX_HOPS.into()),
            ("FF_MAX_NEIGHBOURS", MAX_NEIGHBOURS.into()),
            ("FF_MAX_LOCAL", MAX_LOCAL.into()),
            ("FF_MAX_VLANS", MAX_VLANS.into()),
            ("FF_NODE_FLAG", NODE_FLAG.into()),
            ("FF_LEAF_CHUNK_FLAG", LEAF_CHUNK_FLAG.into()),
            ("FF_LEAF_CHUNK_HEADER", LEAF_CHUNK_HEADER.into()),
            ("FF_NO_ROUTE", NO_ROUTE.into()),
            ("FF_STRIDE", STRIDE.into()),
            ("FF_DIRECT4", DIRECT4.into()),
            ("FF_DIRECT6", DIRECT6.into()),
            ("FF_LEVELS4", LEVELS4.into()),
            ("FF_LEVELS6", LEVELS6.into()),
            ("FF_CFG_HOST_FIRST", CFG_HOST_FIRST.into()),
            ("FF_CFG_EXCEPT_ALL", CFG_EXCEPT_ALL.into()),
            ("FF_CFG_TEST", CFG_TEST.into()),
            ("FF_CFG_FIREWALL", CFG_FIREWALL.into()),
            ("FF_CFG_CONNTRACK", CFG_CONNTRACK.into()),
            (
                "FF_CFG_EXCEPTIONS_TO_KERNEL",
                CFG_EXCEPTIONS_TO_KERNEL.into(),
            ),
            ("FF_CT_MAX", CT_MAX.into()),
            ("FF_CT_ESTABLISHED", CT_ESTABLISHED.into()),
            ("FF_CT_CLOSING", CT_CLOSING.into()),
            ("FF_CT_STATE_ESTABLISHED", CT_STATE_ESTABLISHED.into()),
            ("FF_META_MAGIC", META_MAGIC.into()),
            ("FF_CT_HINT_NONE", CT_HINT_NONE.into()),
            ("FF_CT_HINT_ABSENT", CT_HINT_ABSENT.into()),
            ("FF_CT_HINT_ESTABLISHED", CT_HINT_ESTABLISHED.into()),
            ("FF_FW_FIELDS", FW_FIELDS as u64),
            ("FF_FW_MAX_STEPS", FW_MAX_STEPS as u64),
            ("FF_FW_MAX_COUNTED", FW_MAX_COUNTED as u64),
            ("FF_FW_MAX_SLOTS", FW_MAX_SLOTS.into()),
            ("FF_FW_NO_RULE", FW_NO_RULE.into()),
            ("FF_FW_CONST", FW_CONST.into()),
            ("FF_FW_DIRECT", FW_DIRECT.into()),
            ("FF_FW_TRIE", FW_TRIE.into()),
            ("FF_FW_ACCEPT", FW_ACCEPT.into()),
            ("FF_FW_DROP", FW_DROP.into()),
            ("FF_FW_REJECT", FW_REJECT.into()),
            ("FF_FW_COUNT", FW_COUNT.into()),
            ("FF_NO_IFACE", NO_IFACE.into()),
            ("FF_IFACE_PUNT_TX", IFACE_PUNT_TX.into()),
            ("FF_IFACE_RULES4", IFACE_RULES4.into()),
            ("FF_IFACE_RULES6", IFACE_RULES6.into()),
            ("FF_RULE_LENS", RULE_LENS as u64),
            ("FF_RULE_SIG_WORDS", RULE_SIG_WORDS as u64),
            ("FF_MAX_RULE_PREFIXES", MAX_RULE_PREFIXES.into()),
            ("FF_HOP_GATEWAY", HOP_GATEWAY.into()),
            ("FF_HOP_MAC", HOP_MAC.into()),
            ("FF_LOCAL_UNICAST", LOCAL_UNICAST.into()),
            ("FF_LOCAL_BROADCAST", LOCAL_BROADCAST.into()),
            ("FF_DROP_SLOTS", DROP_SLOTS as u64),
            ("FF_PUNT_SLOTS", PUNT_SLOTS as u64),
            ("FF_EXC_SLOTS", EXC_SLOTS as u64),
            ("FF_OUT_FORWARD", OUT_FORWARD.into()),
            ("FF_OUT_DROP", OUT_DROP.into()),
            ("FF_OUT_PUNT", OUT_PUNT.into()),
            ("FF_OUT_EXCEPTION", OUT_EXCEPTION.into()),
            ("FF_OUT_HOST", OUT_HOST.into()),
        ];
        for (name, v) in want {
            assert_eq!(d.get(*name), Some(v), "{name}");
        }
        assert_eq!(
            CHeader::new(HEADER).define("FF_TX_FAULT_SLOTS").as_deref(),
            Some("(FF_MAX_PORTS + 1)")
        );
        assert_eq!(TX_FAULT_SLOTS, MAX_PORTS + 1);
        for (name, r) in DROPS {
            assert_eq!(d.get(name), Some(&(r.index() as u64)), "{name} = {r}");
        }
        for (name, r) in PUNTS {
            assert_eq!(d.get(name), Some(&(r.index() as u64)), "{name} = {r}");
        }
        let exc = [
            "FF_EXC_TTL",
            "FF_EXC_OPTIONS",
            "FF_EXC_NO_ROUTE",
            "FF_EXC_NEIGHBOUR",
            "FF_EXC_MTU",
            "FF_EXC_ALL",
            "FF_EXC_TABLE",
            "FF_EXC_REJECT",
            "FF_EXC_CONNTRACK",
            "FF_EXC_EGRESS",
            "FF_EXC_RULES",
        ];
        assert_eq!(exc.len(), EXCEPTIONS.len());
        for (name, (v, _)) in exc.iter().zip(EXCEPTIONS) {
            assert_eq!(d.get(*name), Some(&u64::from(v)), "{name}");
        }
        // The discard codes are the pipeline's adjacency encoding.
        for (name, code) in [
            ("FF_DISCARD_BLACKHOLE", 1),
            ("FF_DISCARD_UNREACHABLE", 2),
            ("FF_DISCARD_PROHIBIT", 3),
            ("FF_DISCARD_THROW", 4),
        ] {
            assert_eq!(d.get(name), Some(&code), "{name}");
        }
        for (name, size) in [
            ("ff_config", CONFIG_SIZE),
            ("ff_node", NODE_SIZE),
            ("ff_port", PORT_SIZE),
            ("ff_vlan_key", VLAN_KEY_SIZE),
            ("ff_iface", IFACE_SIZE),
            ("ff_adj", ADJ_SIZE),
            ("ff_hop", HOP_SIZE),
            ("ff_neigh_key", NEIGH_KEY_SIZE),
            ("ff_mac", MAC_SIZE),
            ("ff_local4_key", LOCAL4_KEY_SIZE),
            ("ff_local6_key", LOCAL6_KEY_SIZE),
            ("ff_test_out", TEST_OUT_SIZE),
            ("ff_counters", COUNTER_WORDS * 8),
            ("ff_fw_field", FW_FIELD_SIZE),
            ("ff_fw_step", FW_STEP_SIZE),
            ("ff_fw_meta", FW_META_SIZE),
            ("ff_fw_counter", FW_COUNTER_SIZE),
            ("ff_ct_key", CT_KEY_SIZE),
            ("ff_ct_value", CT_VALUE_SIZE),
            ("ff_meta", META_SIZE),
            ("ff_tx_fault", TX_FAULT_SIZE),
            ("ff_tp_redirect_err", TP_REDIRECT_ERR_SIZE),
            ("ff_tp_devmap_xmit", TP_DEVMAP_XMIT_SIZE),
            ("ff_rule_filter", RULE_FILTER_SIZE),
            ("ff_rule_key", RULE_KEY_SIZE),
        ] {
            assert_eq!(struct_size(name), size, "sizeof(struct {name})");
        }
        // The rule encoders write each field where the header has it.
        let h = CHeader::new(HEADER);
        for (st, field, at) in [
            ("ff_rule_filter", "enabled", 0),
            ("ff_rule_filter", "n_lens", 4),
            ("ff_rule_filter", "lens", 8),
            ("ff_rule_filter", "sig", 8 + RULE_LENS),
            ("ff_rule_key", "addr", 0),
            ("ff_rule_key", "set", 16),
            ("ff_rule_key", "kind", 18),
            ("ff_rule_key", "len", 19),
        ] {
            assert_eq!(h.field_offset(st, field, &[]), Some(at), "{st}.{field}");
        }
        let f = rule_filter(true, &[24, 16], &[1u64 << 63; RULE_SIG_WORDS]);
        assert_eq!(f[0..4], 1u32.to_ne_bytes());
        assert_eq!(f[4..8], 2u32.to_ne_bytes());
        assert_eq!(f[8..10], [24, 16]);
        assert_eq!(f[8 + RULE_LENS + 7], 0x80, "the first word's top bit");
        let k = rule_key(0x0a01_0200u128 << 96, 24, 1, 2);
        assert_eq!(k[0..4], [10, 1, 2, 0]);
        assert_eq!(k[16..18], 1u16.to_ne_bytes());
        assert_eq!((k[18], k[19]), (2, 24));
        assert_eq!(rule_signature(false, 0x0a01_0200u128 << 96), 0x0a01);
        assert_eq!(
            rule_signature(true, 0x2001_0db8_0001u128 << 80),
            0x2001 ^ 0x0db8
        );
    }

    #[test]
    fn the_trie_constants_are_the_fib_crate_s() {
        assert_eq!(NODE_FLAG, fib::poptrie::NODE_ENTRY_FLAG);
        assert_eq!(LEAF_CHUNK_FLAG, fib::poptrie::LEAF_CHUNK_ENTRY_FLAG);
        assert_eq!(LEAF_CHUNK_HEADER, fib::poptrie::LEAF_CHUNK_HEADER_LEAVES);
        assert_eq!(NO_ROUTE, fib::poptrie::NO_ROUTE_ENTRY);
        assert_eq!(STRIDE, u32::from(fib::poptrie::STRIDE_BITS));
        use fib::poptrie::TrieKey;
        assert_eq!(DIRECT4, u32::from(<u32 as TrieKey>::DIRECT_BITS));
        assert_eq!(DIRECT6, u32::from(<u128 as TrieKey>::DIRECT_BITS));
        assert_eq!(
            std::mem::size_of::<fib::poptrie::Node>(),
            NODE_SIZE,
            "the trie's nodes are copied as they are"
        );
    }

    #[test]
    fn conntrack_codes_are_the_firewall_s() {
        use firewall::{CtHint, CtState};
        assert_eq!(CT_STATE_ESTABLISHED, CtState::Established as u32);
        let eth = [0x02u8, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0];
        for h in [CtHint::None, CtHint::Absent, CtHint::Established] {
            let mut frame = META_MAGIC.to_ne_bytes().to_vec();
            frame.extend_from_slice(&u32::from(h.code()).to_ne_bytes());
            frame.extend_from_slice(&eth);
            let (hint, rest) = split_hint(&frame);
            assert_eq!(CtHint::from_code(u32::from(hint)), h);
            assert_eq!(rest, eth, "the prefix is stripped");
        }
        // Without the magic (no prefix): the frame as it is, no hint.
        assert_eq!(split_hint(&eth), (0, &eth[..]));
        assert_eq!(split_hint(&eth[..4]), (0, &eth[..4]));
        // The magic with a hint the pipeline does not know: stripped, no hint.
        let mut odd = META_MAGIC.to_ne_bytes().to_vec();
        odd.extend_from_slice(&7u32.to_ne_bytes());
        odd.extend_from_slice(&eth);
        assert_eq!(split_hint(&odd), (0, &eth[..]));
        let f = firewall::FastFlow {
            a: 0x0a00_0001,
            b: 0x0a00_0002,
            pa: 1000,
            pb: 80,
            proto: 6,
            expires: 77,
            closing: true,
            ..Default::default()
        };
        assert_eq!(ct_value_fields(&ct_value(&f, 9)), (77, 9, true));
        let k = ct_key(&f);
        assert_eq!(
            u64::from_ne_bytes(k[8..16].try_into().unwrap()),
            0x0a00_0001
        );
        assert_eq!(k[36], 6);
    }

    /// The offsets the programs read are the structs' (as the header lays
    /// them out), and the format check accepts the kernel's format files
    /// as they are and refuses a moved or missing field.
    #[test]
    fn tracepoint_records_match_their_formats() {
        let redirect_err = "name: xdp_redirect_err\nID: 581\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:int prog_id;\toffset:8;\tsize:4;\tsigned:1;\n\
\tfield:u32 act;\toffset:12;\tsize:4;\tsigned:0;\n\
\tfield:int ifindex;\toffset:16;\tsize:4;\tsigned:1;\n\
\tfield:int err;\toffset:20;\tsize:4;\tsigned:1;\n\
\tfield:int to_ifindex;\toffset:24;\tsize:4;\tsigned:1;\n\
\tfield:u32 map_id;\toffset:28;\tsize:4;\tsigned:0;\n\
\tfield:int map_index;\toffset:32;\tsize:4;\tsigned:1;\n\n\
print fmt: \"prog_id=%d\", REC->prog_id\n";
        let devmap_xmit = "name: xdp_devmap_xmit\nformat:\n\
\tfield:int from_ifindex;\toffset:8;\tsize:4;\tsigned:1;\n\
\tfield:u32 act;\toffset:12;\tsize:4;\tsigned:0;\n\
\tfield:int to_ifindex;\toffset:16;\tsize:4;\tsigned:1;\n\
\tfield:int drops;\toffset:20;\tsize:4;\tsigned:1;\n\
\tfield:int sent;\toffset:24;\tsize:4;\tsigned:1;\n\
\tfield:int err;\toffset:28;\tsize:4;\tsigned:1;\n";
        assert_eq!(
            check_tracepoint_format(redirect_err, &TP_REDIRECT_ERR_FIELDS),
            Ok(())
        );
        assert_eq!(
            check_tracepoint_format(devmap_xmit, &TP_DEVMAP_XMIT_FIELDS),
            Ok(())
        );
        let moved = devmap_xmit.replace("offset:20;", "offset:24;");
        let signed = devmap_xmit.replace("offset:20;", "offset:+20;");
        assert!(check_tracepoint_format(&signed, &TP_DEVMAP_XMIT_FIELDS).is_err());
        assert!(check_tracepoint_format(&moved, &TP_DEVMAP_XMIT_FIELDS).is_err());
        let missing = devmap_xmit.replace("int drops;", "int dropped;");
        assert_eq!(
            check_tracepoint_format(&missing, &TP_DEVMAP_XMIT_FIELDS),
            Err("no field drops".into())
        );
        assert!(check_tracepoint_format("", &TP_REDIRECT_ERR_FIELDS).is_err());
        // The programs' structs put the fields where the formats have them.
        let h = CHeader::new(HEADER);
        for (st, fields) in [
            ("ff_tp_redirect_err", &TP_REDIRECT_ERR_FIELDS[..]),
            ("ff_tp_devmap_xmit", &TP_DEVMAP_XMIT_FIELDS[..]),
        ] {
            for &(name, off) in fields {
                assert_eq!(h.field_offset(st, name, &[]), Some(off), "{st}.{name}");
            }
        }
    }

    /// Every encoder writes each field at the offset the header gives it:
    /// each field gets a distinct value, and the bytes at the header's
    /// offset for that field must be that value.
    #[test]
    fn encoders_write_each_field_where_the_header_has_it() {
        let h = CHeader::new(HEADER);
        let check = |st: &str, v: &[u8], fields: &[(&str, Vec<u8>)]| {
            for (field, want) in fields {
                let off = h
                    .field_offset(st, field, &[])
                    .unwrap_or_else(|| panic!("no {st}.{field} in the header"));
                assert_eq!(
                    &v[off..off + want.len()],
                    &want[..],
                    "{st}.{field} at {off}"
                );
            }
        };
        let ne16 = |x: u16| x.to_ne_bytes().to_vec();
        let ne32 = |x: u32| x.to_ne_bytes().to_vec();
        let ne64 = |x: u64| x.to_ne_bytes().to_vec();
        let cap = FibCapacity::SMALL;
        let traced = TracedMaps {
            tx_ports: 0x0a0b_0c0d,
            xsks: 0x0e0f_1011,
        };
        let c = config(1, 0x22, &cap, 0x33, 0x4455_6677_8899, traced);
        check(
            "ff_config",
            &c,
            &[
                ("active", ne32(1)),
                ("flags", ne32(0x22)),
                ("nodes4_half", ne32(cap.nodes4)),
                ("leaves4_half", ne32(cap.leaf4_pairs())),
                ("nodes6_half", ne32(cap.nodes6)),
                ("leaves6_half", ne32(cap.leaf6_pairs())),
                ("fw_data_half", ne32(cap.fw_pairs())),
                ("ct_epoch", ne32(0x33)),
                ("generation", ne64(0x4455_6677_8899)),
                ("tx_ports_id", ne32(traced.tx_ports)),
                ("xsks_id", ne32(traced.xsks)),
            ],
        );
        check(
            "ff_node",
            &node(0x0102, 0x0304, 0x05, 0x06),
            &[
                ("children", ne64(0x0102)),
                ("leafvec", ne64(0x0304)),
                ("child_base", ne32(0x05)),
                ("leaf_base", ne32(0x06)),
            ],
        );
        check(
            "ff_port",
            &port(Some(7), true, 0x0809),
            &[
                ("untagged", ne16(7)),
                ("has_vlans", ne16(1)),
                ("ifindex", ne32(0x0809)),
            ],
        );
        check(
            "ff_vlan_key",
            &vlan_key(1, 2, 3, 4),
            &[
                ("port", ne16(1)),
                ("outer", ne16(2)),
                ("inner", ne16(3)),
                ("set", ne16(4)),
            ],
        );
        let tmpl: [u8; 14] = std::array::from_fn(|i| 0x40 + i as u8);
        let mut i = iface([1, 2, 3, 4, 5, 6], 0x0708, 0x090a, &tmpl, 0x0b);
        set_iface_flags(&mut i, 0x0c);
        check(
            "ff_iface",
            &i,
            &[
                ("mac", vec![1, 2, 3, 4, 5, 6]),
                ("mtu", ne16(0x0708)),
                ("port", ne16(0x090a)),
                ("tmpl_len", vec![0x0b]),
                ("flags", vec![0x0c]),
                ("tmpl", tmpl.to_vec()),
            ],
        );
        check(
            "ff_adj",
            &adj(0x11, 0x12),
            &[("start", ne32(0x11)), ("count", ne32(0x12))],
        );
        check(
            "ff_hop",
            &hop(0x1314, 0x15, [0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b]),
            &[
                ("iface", ne16(0x1314)),
                ("flags", vec![0x15]),
                ("mac", vec![0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b]),
            ],
        );
        let addr = 0x2001_0db8_0000_0000_0000_0000_0000_0001u128;
        check(
            "ff_neigh_key",
            &neigh_key(0x21, 0x22, addr),
            &[
                ("iface", ne16(0x21)),
                ("set", ne16(0x22)),
                ("addr", addr.to_be_bytes().to_vec()),
            ],
        );
        check(
            "ff_mac",
            &mac([9, 8, 7, 6, 5, 4]),
            &[("mac", vec![9, 8, 7, 6, 5, 4])],
        );
        check(
            "ff_local4_key",
            &local4_key(0xc000_0201, 0x23),
            &[
                ("addr", 0xc000_0201u32.to_be_bytes().to_vec()),
                ("set", ne32(0x23)),
            ],
        );
        check(
            "ff_local6_key",
            &local6_key(addr, 0x24),
            &[("addr", addr.to_be_bytes().to_vec()), ("set", ne32(0x24))],
        );
        check(
            "ff_test_out",
            &test_out(0x25, 0x26),
            &[("kind", ne32(0x25)), ("detail", ne32(0x26))],
        );
        let flow = firewall::FastFlow {
            a: (0x31u128 << 64) | 0x32,
            b: (0x33u128 << 64) | 0x34,
            pa: 0x35,
            pb: 0x36,
            proto: 0x37,
            v6: true,
            orig_a: true,
            closing: true,
            expires: 0x38,
            timeout_open: 0x39,
            timeout_closing: 0x3a,
        };
        check(
            "ff_ct_key",
            &ct_key(&flow),
            &[
                ("a_hi", ne64(0x31)),
                ("a_lo", ne64(0x32)),
                ("b_hi", ne64(0x33)),
                ("b_lo", ne64(0x34)),
                ("pa", ne16(0x35)),
                ("pb", ne16(0x36)),
                ("proto", vec![0x37]),
                ("v6", vec![1]),
            ],
        );
        check(
            "ff_ct_value",
            &ct_value(&flow, 0x3b),
            &[
                ("expires", ne64(0x38)),
                ("timeout_open", ne64(0x39)),
                ("timeout_closing", ne64(0x3a)),
                ("epoch", ne32(0x3b)),
                ("phase", vec![CT_CLOSING]),
                ("orig_a", vec![1]),
            ],
        );
    }

    #[test]
    fn pairs_round_trip() {
        let p = [pair(1, 2), pair(3, NO_ROUTE)];
        assert_eq!(pair_get(&p, 0), Some(1));
        assert_eq!(pair_get(&p, 1), Some(2));
        assert_eq!(pair_get(&p, 2), Some(3));
        assert_eq!(pair_get(&p, 3), Some(NO_ROUTE));
        assert_eq!(pair_get(&p, 4), None);
        let n = node(u64::MAX - 5, 7, 9, 11);
        assert_eq!(node_fields(&n), (u64::MAX - 5, 7, 9, 11));
    }
}
