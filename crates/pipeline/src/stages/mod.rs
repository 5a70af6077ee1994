//! The stages a packet goes through, in order: [`ethernet`] dispatch,
//! [`arp`] / [`ipv4`] / [`ipv6`] input, the batched route lookup (in
//! [`crate::worker`]), [`choose_hop`] (adjacency and ECMP), the ACL
//! ([`crate::acl`]), then [`forward`]: neighbour, MTU ([`icmp`] errors,
//! [`fragment`]ation), TTL / hop-limit decrement with the RFC 1624 checksum
//! update, L2 rewrite.

pub(crate) mod arp;
pub(crate) mod ethernet;
pub(crate) mod fragment;
pub(crate) mod icmp;
pub(crate) mod ipv4;
pub(crate) mod ipv6;
pub(crate) mod tcp_reset;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use fib::NextHopId;

use self::ethernet::LinkCast;
use crate::acl::FlowKey;
use crate::counters::{DropReason, IcmpSuppressed, PuntReason};
use crate::frame::Frame;
use crate::tables::{
    Discard, IfRuntime, InterfaceId, MacAddr, NeighbourKey, PortId, ResolvedHop, Rewrite, Tables,
    Vlan, v4_key,
};
use crate::worker::{CHUNK, Meta, Step, Verdict, Worker};

/// Input stage: Ethernet / VLAN dispatch, then the per-protocol input.
///
/// Reads the L2 header (IEEE 802.3, 802.1Q / 802.1ad tags); finds the
/// logical interface; counts rx on it. Writes `m.in_if`. Next: IPv4 and
/// IPv6 to their input stages ([`ipv4`], [`ipv6`]: RFC 1812 §5.2.2, RFC
/// 8200), ARP punted to the host ([`arp`]); unicast frames not for the
/// interface's MAC are dropped (`not_our_mac`, RFC 1812 §5.3.4), unknown
/// interfaces and ethertypes likewise.
#[inline(always)]
pub(crate) fn input<F4, F6, A>(
    w: &mut Worker,
    tables: &Tables<F4, F6, A>,
    port: PortId,
    untagged: Option<(InterfaceId, u64)>,
    f: &mut Frame<'_>,
    m: &mut Meta,
) -> Step
where
    F4: fib::Lookup<u32>,
    F6: fib::Lookup<u128>,
{
    w.counters.rx_frames += 1;
    let d = f.data();
    let l2 = match ethernet::parse(d) {
        Ok(l2) => l2,
        Err(r) => {
            w.counters.drop(r);
            return Step::Done(Verdict::Drop(r));
        }
    };
    let (in_if, mac_bits) = match (l2.vlan, untagged) {
        (Vlan::Untagged, Some(u)) => u,
        (vlan, _) => {
            let Some(in_if) = tables.interface_for(port, vlan) else {
                w.counters.drop(DropReason::UnknownInterface);
                return Step::Done(Verdict::Drop(DropReason::UnknownInterface));
            };
            let Some(ifr) = tables.if_rt.get(usize::from(in_if)) else {
                if let Some(c) = w.counters.interfaces.get_mut(usize::from(in_if)) {
                    c.rx_packets += 1;
                    c.rx_bytes += d.len() as u64;
                }
                return Step::Done(w.drop_in(in_if, DropReason::UnknownInterface));
            };
            (in_if, ifr.mac_bits)
        }
    };
    m.in_if = in_if;
    if let Some(c) = w.counters.interfaces.get_mut(usize::from(in_if)) {
        c.rx_packets += 1;
        c.rx_bytes += d.len() as u64;
    }
    // The destination MAC as one word: eight bytes read, the two past it
    // shifted out of the comparison (a shift, where a 48-bit mask would
    // take a register of its own).
    let dst_mac = d
        .first_chunk::<8>()
        .map_or(u64::MAX, |b| u64::from_le_bytes(*b));
    let cast = if (dst_mac ^ mac_bits) << 16 == 0 {
        LinkCast::Unicast
    } else if dst_mac & 1 != 0 {
        LinkCast::Group
    } else {
        return Step::Done(w.drop_in(in_if, DropReason::NotOurMac));
    };
    match l2.ethertype {
        wire::ethertype::IPV4 => ipv4::input(w, tables, d, l2.l3, cast, m),
        wire::ethertype::IPV6 => ipv6::input(w, tables, d, l2.l3, cast, m),
        wire::ethertype::ARP => match arp::input(tables, d, l2.l3) {
            Ok(r) => {
                w.counters.punt(r);
                Step::Done(Verdict::Punt(r))
            }
            Err(r) => Step::Done(w.drop_in(in_if, r)),
        },
        _ => Step::Done(w.drop_in(in_if, DropReason::UnknownEthertype)),
    }
}

/// Writes the flow key of a validated packet (for the ACL and ECMP) into
/// `k`, each field stored as soon as it is read: in the chunk loop the key
/// built as a value first was spilled and reloaded field by field before
/// its copy into place (the loop has no spare registers). Always in line.
#[inline(always)]
pub(crate) fn write_flow_key(d: &[u8], m: &Meta, is_ipv6: bool, k: &mut FlowKey) {
    let l3 = usize::from(m.l3);
    let h = d.get(l3..l3 + m.l3_len as usize).unwrap_or(&[]);
    if h.len() < if is_ipv6 { 40 } else { 20 } {
        *k = FlowKey::default();
        return;
    }
    *k = FlowKey {
        interface: m.in_if,
        is_ipv6,
        length: h.len().min(usize::from(u16::MAX)) as u16,
        ..FlowKey::default()
    };
    let (protocol, l4, ports_valid) = if is_ipv6 {
        k.src = ipv6::be128(h, 8);
        k.dst = ipv6::be128(h, 24);
        let next = h[6];
        if ipv6::is_extension(next) {
            let u = ipv6::upper_layer(h);
            k.fragment = u.fragment;
            (u.protocol, u.offset, !u.non_first_fragment)
        } else {
            // The usual packet: the upper layer right after the header.
            (next, 40, true)
        }
    } else {
        k.src = v4_key(ipv4::be32(h, 12));
        k.dst = v4_key(ipv4::be32(h, 16));
        let frag = u16::from_be_bytes([h[6], h[7]]);
        k.fragment = frag & 0x3fff != 0;
        (h[9], usize::from(h[0] & 0x0f) * 4, frag & 0x1fff == 0)
    };
    k.protocol = protocol;
    if ports_valid {
        let p = h.get(l4..).unwrap_or(&[]);
        let be = |at: usize| {
            p.get(at..at + 2)
                .map_or(0, |q| u16::from_be_bytes([q[0], q[1]]))
        };
        match protocol {
            6 | 17 | 132 | 136 if p.len() >= 4 => {
                k.src_port = be(0);
                k.dst_port = be(2);
                if protocol == 6 {
                    k.tcp_flags = p.get(13).copied().unwrap_or(0);
                }
            }
            1 | 58 if p.len() >= 2 => {
                k.icmp_type = p[0];
                k.icmp_code = p[1];
                k.src_port = be(0);
                k.dst_port = be(4);
            }
            _ => {}
        }
    }
}

/// A 32-bit hash of the 5-tuple for ECMP (ingress interface excluded, so a
/// flow keeps its path whichever link it arrives on). Ports are left out
/// for every fragment, first included, so that all fragments of a datagram
/// take the same path (only the first carries the ports).
#[inline]
pub(crate) fn flow_hash(k: &FlowKey) -> u32 {
    let ports = if k.fragment {
        0
    } else {
        u32::from(k.src_port) << 16 | u32::from(k.dst_port)
    };
    mix_flow(k.src, k.dst, k.protocol, ports)
}

/// A 32-bit hash of two addresses, a protocol and 32 bits of ports, in
/// that order (ECMP's [`flow_hash`], and the flow owner hash with its
/// endpoints sorted).
#[inline(always)]
pub(crate) fn mix_flow(a: u128, b: u128, protocol: u8, ports: u32) -> u32 {
    let mut h = (a as u64) ^ ((a >> 64) as u64).rotate_left(23);
    h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= (b as u64).rotate_left(17) ^ ((b >> 64) as u64).rotate_left(41);
    h = h.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    h ^= u64::from(protocol) << 32 | u64::from(ports);
    // MurmurHash3 finaliser.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h as u32
}

/// Outcome of resolving a next-hop id to an egress interface and MAC.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Resolved {
    Hop { out_if: InterfaceId, mac: MacAddr },
    Miss { out_if: InterfaceId, ip: IpAddr },
    Bad,
}

/// Lemire's multiply-shift: maps a 32-bit hash onto `0..count` without a
/// division.
#[inline(always)]
fn pick(hash: u32, count: u32) -> u32 {
    if count <= 1 {
        0
    } else {
        ((u64::from(hash) * u64::from(count)) >> 32) as u32
    }
}

/// Adjacency and ECMP choice: the index in `tables.hops` of the next hop.
#[inline]
fn hop_index<F4, F6, A>(tables: &Tables<F4, F6, A>, nh: NextHopId, hash: u32) -> Option<u32> {
    let &(start, count) = tables.adjacencies.get(nh as usize)?;
    (count > 0).then(|| start + pick(hash, count))
}

/// The neighbour: a gateway's MAC comes precomputed in the adjacency; a
/// directly connected destination is looked up in the neighbour table
/// (`dst_key`: IPv4 as IPv4-mapped).
#[inline]
fn neighbour<F4, F6, A>(tables: &Tables<F4, F6, A>, hop: &ResolvedHop, dst_key: u128) -> Resolved {
    let out_if = hop.interface;
    match hop.gateway {
        Some(g) => match hop.mac {
            Some(mac) => Resolved::Hop { out_if, mac },
            None => Resolved::Miss { out_if, ip: g },
        },
        None => match tables.neighbours.get(&NeighbourKey {
            interface: out_if,
            addr: dst_key,
        }) {
            Some(&mac) => Resolved::Hop { out_if, mac },
            None => Resolved::Miss {
                out_if,
                ip: key_to_ip(dst_key),
            },
        },
    }
}

/// Adjacency, ECMP choice and neighbour in one step (for generated packets).
#[inline(always)]
pub(crate) fn resolve<F4, F6, A>(
    tables: &Tables<F4, F6, A>,
    nh: NextHopId,
    hash: u32,
    dst_key: u128,
) -> Resolved {
    match hop_index(tables, nh, hash).and_then(|i| tables.hops.get(i as usize)) {
        Some(hop) => neighbour(tables, hop, dst_key),
        None => Resolved::Bad,
    }
}

/// Route lookup under policy rules, when rules send some packets to
/// tables other than main ([`Policy::main_only`](crate::Policy::main_only)
/// false): each packet's rules from the first it can match
/// ([`FamilyPolicy::first_candidate`](crate::FamilyPolicy::first_candidate));
/// those that can match none before a plain lookup of main share one
/// batched lookup, and its misses and `throw`s go on to the rules after it.
///
/// Reads: the source address in the IP header,
/// `meta.in_if`, the rules and the tables they look up.
/// Writes: `out[k]`, the next-hop id for `dst[k]` (packet `at[k]`).
/// Next: the next-hop choice, as after the batched lookup.
#[inline(never)]
pub(crate) fn route_by_rules<A, F, const W: usize>(
    policy: &crate::policy::FamilyPolicy<A>,
    main: &F,
    adjacencies: &[(u32, u32)],
    frames: &[Frame<'_>],
    meta: &[Meta],
    (at, dst): (&[u8], &[A]),
    out: &mut [Option<NextHopId>],
) where
    A: fib::poptrie::TrieKey + SourceAddress<W>,
    F: fib::Lookup<A>,
{
    let key_of = |k: usize| -> Option<crate::policy::RuleKey<A>> {
        let i = usize::from(*at.get(k)?);
        let (f, m) = (frames.get(i)?, meta.get(i)?);
        let l3 = usize::from(m.l3);
        let src = f
            .data()
            .get(l3 + A::AT..l3 + A::AT + W)
            .and_then(|b| b.try_into().ok())
            .map(A::from_bytes);
        Some(crate::policy::RuleKey {
            src,
            dst: *dst.get(k)?,
            iif: Some(m.in_if),
            vrf: Some(m.in_if),
        })
    };
    let main_at = policy.main_at();
    let next = main_at.map_or(0, |m| m + 1);
    // Rules after the lookup of main that its misses and throws go on to
    // (none: they are no route either way, as `choose_hop` takes a throw).
    let later = next < policy.rules().len();
    let go_on = |k: usize, id: Option<NextHopId>| match id {
        Some(id) if !later || !crate::policy::FamilyPolicy::<A>::is_throw(adjacencies, id) => {
            Some(id)
        }
        _ if !later => None,
        _ => key_of(k).and_then(|key| policy.route_from(main, adjacencies, &key, next)),
    };
    let n = dst.len().min(out.len()).min(CHUNK);
    let mut starts = [0usize; CHUNK];
    let mut all_main = main_at.is_some();
    for (k, start) in starts.iter_mut().enumerate().take(n) {
        *start = key_of(k).map_or(0, |key| policy.first_candidate(&key));
        all_main &= Some(*start) == main_at;
    }
    if all_main {
        // The common case: no packet can match a rule before main.
        main.lookup_batch(&dst[..n], &mut out[..n]);
        if later {
            for (k, o) in out.iter_mut().enumerate().take(n) {
                *o = go_on(k, *o);
            }
        }
        return;
    }
    let Some(&any) = dst.first() else { return };
    let mut batch_dst = [any; CHUNK];
    let mut batch_at = [0u8; CHUNK];
    let mut b = 0;
    for (k, o) in out.iter_mut().enumerate().take(n) {
        if Some(starts[k]) == main_at {
            batch_dst[b] = dst[k];
            batch_at[b] = k as u8;
            b += 1;
        } else if let Some(key) = key_of(k) {
            *o = policy.route_from(main, adjacencies, &key, starts[k]);
        }
    }
    let mut found = [None::<NextHopId>; CHUNK];
    main.lookup_batch(&batch_dst[..b], &mut found[..b]);
    for (&k, &id) in batch_at[..b].iter().zip(&found[..b]) {
        let k = usize::from(k);
        if let Some(o) = out.get_mut(k) {
            *o = go_on(k, id);
        }
    }
}

/// An IP header's source address: where it is, and its value from its
/// bytes in network order.
pub(crate) trait SourceAddress<const W: usize> {
    /// Offset in the header.
    const AT: usize;
    fn from_bytes(b: [u8; W]) -> Self;
}

impl SourceAddress<4> for u32 {
    const AT: usize = 12;
    fn from_bytes(b: [u8; 4]) -> u32 {
        u32::from_be_bytes(b)
    }
}

impl SourceAddress<16> for u128 {
    const AT: usize = 8;
    fn from_bytes(b: [u8; 16]) -> u128 {
        u128::from_be_bytes(b)
    }
}

/// The way back to `src` for a packet the router generates about one it
/// received on `in_if` (ICMP error, TCP reset; routed in `in_if`'s VRF, as
/// the kernel routes its answers): egress interface and next-hop MAC, or
/// why not (no route back, neighbour unresolved). An unknown
/// neighbour is reported as a miss, so the host resolves it and the next
/// error toward it can be sent.
pub(crate) fn route_back_v4<F4, F6, A>(
    w: &mut Worker,
    tables: &Tables<F4, F6, A>,
    src: u32,
    in_if: InterfaceId,
) -> Result<(InterfaceId, MacAddr), IcmpSuppressed>
where
    F4: fib::Lookup<u32>,
{
    // Routed as the host's own packet (policy rules see no input
    // interface and no source yet).
    let Some(nh) = tables.route4(None, src, None, Some(in_if)) else {
        return Err(IcmpSuppressed::NoRouteBack);
    };
    let r = resolve(tables, nh, src, v4_key(src));
    hop_or_miss(w, r)
}

/// [`route_back_v4`] for IPv6.
pub(crate) fn route_back_v6<F4, F6, A>(
    w: &mut Worker,
    tables: &Tables<F4, F6, A>,
    src: u128,
    in_if: InterfaceId,
) -> Result<(InterfaceId, MacAddr), IcmpSuppressed>
where
    F6: fib::Lookup<u128>,
{
    let hash = src as u32 ^ (src >> 96) as u32;
    let Some(nh) = tables.route6(None, src, None, Some(in_if)) else {
        return Err(IcmpSuppressed::NoRouteBack);
    };
    let r = resolve(tables, nh, hash, src);
    hop_or_miss(w, r)
}

fn hop_or_miss(w: &mut Worker, r: Resolved) -> Result<(InterfaceId, MacAddr), IcmpSuppressed> {
    match r {
        Resolved::Hop { out_if, mac } => Ok((out_if, mac)),
        Resolved::Miss { out_if, ip } => {
            if w.out.misses.len() < w.out.misses.capacity() {
                w.out.misses.push((out_if, ip));
            }
            Err(IcmpSuppressed::NeighbourUnresolved)
        }
        Resolved::Bad => Err(IcmpSuppressed::NoRouteBack),
    }
}

/// Why [`choose_hop`] found no next hop.
#[derive(Debug, Clone, Copy)]
pub(crate) enum NoHop {
    /// Dropped (and counted) here.
    Dropped(Verdict),
    /// A discarding route, or none: the caller finishes the packet with
    /// [`discard_packet`], in chunk order, since its ICMP error takes a
    /// token and a pool slot.
    Discard(Discard),
}

/// Next-hop choice stage, after the route lookup.
///
/// Reads: the lookup result, the adjacency (next-hop set) and, when the
/// set has several next hops, the packet's flow key.
/// Writes: nothing; returns the hop's index.
/// Next: the ACL, then [`forward`]. No route (or a `throw` route), or a
/// discarding route ([`Discard`]): [`NoHop::Discard`], for
/// [`discard_packet`]; a missing or empty next-hop set: drop
/// `bad_next_hop`. ECMP picks one of
/// the equal-cost next hops by a hash of the flow's 5-tuple (RFC 2992), so
/// a flow stays on one path.
#[inline(always)]
pub(crate) fn choose_hop<F4, F6, A>(
    w: &mut Worker,
    tables: &Tables<F4, F6, A>,
    f: &Frame<'_>,
    m: &Meta,
    is_ipv6: bool,
    nh: Option<NextHopId>,
) -> Result<u32, NoHop>
where
    F4: fib::Lookup<u32>,
    F6: fib::Lookup<u128>,
{
    // One load of the adjacency decides discard, multipath and the hop.
    let Some(nh) = nh else {
        return Err(NoHop::Discard(Discard::Throw));
    };
    let Some(&(start, count)) = tables.adjacencies.get(nh as usize) else {
        return Err(NoHop::Dropped(w.drop_in(m.in_if, DropReason::BadNextHop)));
    };
    if count == 0 {
        // No hops: `start` is a discard's code.
        return Err(match Discard::from_code(start) {
            Some(d) => NoHop::Discard(d),
            None => NoHop::Dropped(w.drop_in(m.in_if, DropReason::BadNextHop)),
        });
    }
    if count > 1 {
        let mut key = FlowKey::default();
        write_flow_key(f.data(), m, is_ipv6, &mut key);
        return Ok(start + pick(flow_hash(&key), count));
    }
    Ok(start)
}

/// A packet whose route discards it (or that has no route): the ICMP
/// error the route calls for (RFC 1812 §5.2.7.1 destination unreachable,
/// RFC 4443 §3.1; none for a blackhole), then the drop under the route's
/// reason (`no_route`, `route_blackhole`, `route_unreachable`,
/// `route_prohibited`).
#[cold]
pub(crate) fn discard_packet<F4, F6, A>(
    w: &mut Worker,
    tables: &Tables<F4, F6, A>,
    f: &Frame<'_>,
    m: &Meta,
    is_ipv6: bool,
    d: Discard,
) -> Verdict
where
    F4: fib::Lookup<u32>,
    F6: fib::Lookup<u128>,
{
    // ICMP codes: RFC 1812 §5.2.7.1 (net 0, host 1, prohibited 13),
    // RFC 4443 §3.1 (no route 0, prohibited 1).
    let (reason, v4_code, v6_code) = match d {
        Discard::Blackhole => return w.drop_in(m.in_if, DropReason::RouteBlackhole),
        Discard::Throw => (DropReason::NoRoute, icmp::V4_NET_UNREACHABLE, 0),
        Discard::Unreachable => (DropReason::RouteUnreachable, icmp::V4_HOST_UNREACHABLE, 0),
        Discard::Prohibit => (DropReason::RouteProhibited, icmp::V4_ADMIN_PROHIBITED, 1),
    };
    let l3 = usize::from(m.l3);
    let orig = &f.data()[l3..l3 + m.l3_len as usize];
    if is_ipv6 {
        icmp::error_v6(w, tables, m.in_if, orig, icmp::V6_UNREACHABLE, v6_code, 0);
    } else {
        icmp::error_v4(w, tables, m.in_if, orig, icmp::V4_UNREACHABLE, v4_code, 0);
    }
    w.drop_in(m.in_if, reason)
}

/// A packet whose TTL or hop limit ran out: ICMP time exceeded in transit
/// (RFC 792 type 11 code 0, RFC 1812 §5.3.1; RFC 4443 §3.3 type 3 code 0)
/// quoting it as received, then dropped as `ttl_expired` /
/// `hop_limit_expired`.
#[cold]
pub(crate) fn expire_packet<F4, F6, A>(
    w: &mut Worker,
    tables: &Tables<F4, F6, A>,
    f: &Frame<'_>,
    m: &Meta,
    is_ipv6: bool,
) -> Verdict
where
    F4: fib::Lookup<u32>,
    F6: fib::Lookup<u128>,
{
    let l3 = usize::from(m.l3);
    let Some(orig) = f.data().get(l3..l3 + m.l3_len as usize) else {
        return w.drop_in(m.in_if, DropReason::TtlExpired);
    };
    if is_ipv6 {
        icmp::error_v6(w, tables, m.in_if, orig, icmp::V6_TIME_EXCEEDED, 0, 0);
        w.drop_in(m.in_if, DropReason::HopLimitExpired)
    } else {
        icmp::error_v4(w, tables, m.in_if, orig, icmp::V4_TIME_EXCEEDED, 0, 0);
        w.drop_in(m.in_if, DropReason::TtlExpired)
    }
}

fn key_to_ip(k: u128) -> IpAddr {
    if k >> 32 == 0xffff {
        IpAddr::V4(Ipv4Addr::from(k as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from(k))
    }
}

/// Writes the egress L2 header (RFC 894 Ethernet, 802.1Q tags of the
/// egress interface) at the start of `buf`; returns its length.
#[inline(always)]
pub(crate) fn write_l2(buf: &mut [u8], ifr: &IfRuntime, dst: MacAddr, ethertype: u16) -> usize {
    let n = usize::from(ifr.l2_src_and_tags_len);
    let len = ifr.l2_len();
    if buf.len() < len {
        return 0;
    }
    buf[..6].copy_from_slice(&dst.0);
    // The source MAC, then the VLAN tags if any: copies of fixed length
    // stay in line, one of variable length is a call to memcpy.
    buf[6..12].copy_from_slice(&ifr.l2_src_and_tags[..6]);
    if n > 6 {
        buf[12..6 + n].copy_from_slice(&ifr.l2_src_and_tags[6..n]);
    }
    buf[6 + n..len].copy_from_slice(&ethertype.to_be_bytes());
    len
}

/// Forward stage, after the next-hop choice and the ACL.
///
/// Reads: the chosen next hop, the neighbour table, the egress MTU, the
/// TTL / hop limit.
/// Writes: the TTL (RFC 1812 §5.3.1) with the header checksum updated
/// incrementally (RFC 1624 eqn. 3), or the hop limit (RFC 8200 §3); the L2
/// header: destination MAC of the neighbour, source MAC and VLAN tags of
/// the egress interface; the frame window (start, length).
/// Next:
/// - next hop without a known MAC: punt `neighbour_miss` (the host
///   resolves it and forwards the packet) and record the miss;
/// - larger than the egress MTU: IPv4 with DF gets ICMP fragmentation
///   needed with the next-hop MTU (RFC 1191 §4) and is dropped; IPv4
///   without DF is fragmented ([`fragment`]); IPv6 gets ICMPv6 packet too
///   big (RFC 4443 §3.2, RFC 8200 §5) and is dropped;
/// - otherwise rewritten in place and queued on the egress port: a gateway
///   whose MAC is known by its precomputed header ([`Rewrite`]), when the
///   packet fits its MTU and the headroom the header; anything else by
///   [`forward_general`].
#[inline(always)]
pub(crate) fn forward<F4, F6, A>(
    w: &mut Worker,
    tables: &Tables<F4, F6, A>,
    f: &mut Frame<'_>,
    m: &Meta,
    is_ipv6: bool,
    hop: u32,
    index: u16,
) -> Verdict
where
    F4: fib::Lookup<u32>,
    F6: fib::Lookup<u128>,
{
    let Some(hop) = tables.hops.get(hop as usize) else {
        return w.drop_in(m.in_if, DropReason::BadNextHop);
    };
    if let Some(rw) = &hop.rewrite
        && let Some(v) = forward_resolved(w, f, m, is_ipv6, hop.interface, rw, index)
    {
        return v;
    }
    forward_general(w, tables, f, m, is_ipv6, hop, index)
}

/// The TTL (with the RFC 1624 checksum update) or hop limit of a header
/// whose first 12 bytes are `h`, decremented; the input stage let only
/// values of at least 2 through.
#[inline(always)]
fn decrement_ttl(h: &mut [u8; 12], is_ipv6: bool) {
    if is_ipv6 {
        h[7] = h[7].wrapping_sub(1);
    } else {
        h[8] = h[8].wrapping_sub(1);
        let c = wire::checksum::update_ttl_decrement(u16::from_be_bytes([h[10], h[11]]));
        h[10..12].copy_from_slice(&c.to_be_bytes());
    }
}

/// Counts a forwarded packet of `bytes` (L2 included) and queues it on
/// `port`.
#[inline(always)]
fn transmit(
    w: &mut Worker,
    out_if: InterfaceId,
    port: PortId,
    is_ipv6: bool,
    bytes: usize,
    index: u16,
) -> Verdict {
    if is_ipv6 {
        w.counters.forwarded_ipv6 += 1;
    } else {
        w.counters.forwarded_ipv4 += 1;
    }
    w.count_tx(out_if, bytes);
    w.out.enqueue_tx(port, index);
    Verdict::Forward {
        interface: out_if,
        port,
    }
}

/// The forward stage's common case: a gateway with a known MAC, a packet
/// within the MTU and headroom for the header. `None`: the general path
/// decides (nothing was written).
#[inline(always)]
fn forward_resolved(
    w: &mut Worker,
    f: &mut Frame<'_>,
    m: &Meta,
    is_ipv6: bool,
    out_if: InterfaceId,
    rw: &Rewrite,
    index: u16,
) -> Option<Verdict> {
    let l3_len = m.l3_len as usize;
    if l3_len > usize::from(rw.mtu) {
        return None;
    }
    let len = rw.len();
    let at = f.start() + usize::from(m.l3);
    let new_start = at.checked_sub(len)?;
    let (l2, ip) = f
        .buffer_mut()
        .get_mut(new_start..)?
        .split_at_mut_checked(len)?;
    let ip = ip.first_chunk_mut::<12>()?;
    let (macs, rest) = l2.split_first_chunk_mut::<12>()?;
    // After the MACs: the tags (none, one or two) and the EtherType.
    if !matches!(rest.len(), 2 | 6 | 10) {
        return None;
    }
    decrement_ttl(ip, is_ipv6);
    *macs = rw.macs;
    let ethertype = if is_ipv6 {
        wire::ethertype::IPV6
    } else {
        wire::ethertype::IPV4
    }
    .to_be_bytes();
    // Stores of fixed size for each tag count: a copy of variable length
    // would be a call to memcpy.
    if let Ok(r) = <&mut [u8; 2]>::try_from(&mut *rest) {
        *r = ethertype;
    } else if let Ok(r) = <&mut [u8; 6]>::try_from(&mut *rest) {
        r[..4].copy_from_slice(&rw.tags[..4]);
        r[4..].copy_from_slice(&ethertype);
    } else if let Ok(r) = <&mut [u8; 10]>::try_from(&mut *rest) {
        r[..8].copy_from_slice(&rw.tags);
        r[8..].copy_from_slice(&ethertype);
    }
    f.set_window(new_start, len + l3_len);
    Some(transmit(w, out_if, rw.port, is_ipv6, len + l3_len, index))
}

/// The forward stage for everything [`forward_resolved`] leaves: directly
/// connected destinations (the neighbour table), unresolved gateways
/// (punted), packets over the MTU (ICMP errors, fragmentation) and frames
/// without headroom for the egress header.
#[inline(never)]
fn forward_general<F4, F6, A>(
    w: &mut Worker,
    tables: &Tables<F4, F6, A>,
    f: &mut Frame<'_>,
    m: &Meta,
    is_ipv6: bool,
    hop: &ResolvedHop,
    index: u16,
) -> Verdict
where
    F4: fib::Lookup<u32>,
    F6: fib::Lookup<u128>,
{
    let l3 = usize::from(m.l3);
    let l3_len = m.l3_len as usize;
    let d = f.data();
    let dst_key = if hop.gateway.is_some() {
        0
    } else if is_ipv6 {
        ipv6::be128(d, l3 + 24)
    } else {
        v4_key(ipv4::be32(d, l3 + 16))
    };
    let (out_if, mac) = match neighbour(tables, hop, dst_key) {
        Resolved::Hop { out_if, mac } => (out_if, mac),
        Resolved::Miss { out_if, ip } => {
            if w.out.misses.len() < w.out.misses.capacity() {
                w.out.misses.push((out_if, ip));
            }
            w.counters.punt(PuntReason::NeighbourMiss);
            return Verdict::Punt(PuntReason::NeighbourMiss);
        }
        Resolved::Bad => return w.drop_in(m.in_if, DropReason::BadNextHop),
    };
    let Some(ifr) = tables.if_rt.get(usize::from(out_if)) else {
        return w.drop_in(m.in_if, DropReason::BadNextHop);
    };
    if l3_len > usize::from(ifr.mtu) {
        let orig = &d[l3..l3 + l3_len];
        let mtu = u32::from(ifr.mtu);
        if is_ipv6 {
            icmp::error_v6(w, tables, m.in_if, orig, icmp::V6_PACKET_TOO_BIG, 0, mtu);
            return w.drop_in(m.in_if, DropReason::PacketTooBig);
        }
        if orig[6] & 0x40 != 0 {
            icmp::error_v4(
                w,
                tables,
                m.in_if,
                orig,
                icmp::V4_UNREACHABLE,
                icmp::V4_FRAG_NEEDED,
                mtu,
            );
            return w.drop_in(m.in_if, DropReason::FragmentationNeeded);
        }
        return match fragment::fragment_v4(w, orig, out_if, ifr, mac) {
            Ok(_) => {
                w.counters.forwarded_ipv4 += 1;
                Verdict::Consumed
            }
            Err(r) => w.drop_in(m.in_if, r),
        };
    }

    // TTL / hop limit, then the L2 header.
    let start = f.start();
    let abs_l3 = start + l3;
    let buf = f.buffer_mut();
    // The header's first 12 bytes, checked once: the input stage saw at
    // least 20 / 40, so the drop below does not happen (it keeps the stage
    // free of panics). The TTL / hop limit is at least 2 here.
    let Some(h) = buf
        .get_mut(abs_l3..)
        .and_then(|h| h.first_chunk_mut::<12>())
    else {
        let r = if is_ipv6 {
            DropReason::Ipv6Truncated
        } else {
            DropReason::Ipv4Truncated
        };
        return w.drop_in(m.in_if, r);
    };
    decrement_ttl(h, is_ipv6);
    let l2_len = ifr.l2_len();
    let mut at = abs_l3;
    if at < l2_len {
        // Not enough headroom: move the packet back into the tailroom.
        let shift = l2_len - at;
        if at + shift + l3_len > buf.len() {
            return w.drop_in(m.in_if, DropReason::NoHeadroom);
        }
        buf.copy_within(at..at + l3_len, at + shift);
        at += shift;
    }
    let new_start = at - l2_len;
    let ethertype = if is_ipv6 {
        wire::ethertype::IPV6
    } else {
        wire::ethertype::IPV4
    };
    write_l2(&mut buf[new_start..at], ifr, mac, ethertype);
    f.set_window(new_start, l2_len + l3_len);
    transmit(w, out_if, ifr.port, is_ipv6, l2_len + l3_len, index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{IpSlice, Ipv6ExtensionSlice};
    use proptest::prelude::*;

    /// An IPv6 extension header of `kind` (0 hop-by-hop, 43 routing, 60
    /// destination options, 51 authentication, 44 fragment) followed by
    /// `next`; `frag` is the fragment header's offset-and-M word.
    fn ext_header(kind: u8, next: u8, long: bool, frag: u16) -> Vec<u8> {
        match kind {
            44 => {
                let [a, b] = frag.to_be_bytes();
                vec![next, 0, a, b, 0, 0, 0x12, 0x34]
            }
            51 => {
                // Length in 4-octet units minus 2: 12 or 16 octets.
                let len = if long { 2 } else { 1 };
                let mut h = vec![0u8; (usize::from(len) + 2) * 4];
                h[0] = next;
                h[1] = len;
                h
            }
            _ => {
                // Length in 8-octet units minus 1: 8 or 16 octets.
                let len = u8::from(long);
                let mut h = vec![0u8; (usize::from(len) + 1) * 8];
                h[0] = next;
                h[1] = len;
                if kind == 43 {
                    h[2] = 4; // a segment routing header's type, unparsed
                }
                h
            }
        }
    }

    /// An IPv4 or IPv6 packet after 14 bytes of Ethernet header: `exts`
    /// (IPv6: extension headers, a hop-by-hop only first and a fragment
    /// header only last; IPv4: as many 4-octet option words), `frag` the
    /// fragment field (IPv4: flags and offset; IPv6: the fragment header's
    /// offset and M bit, when it has one), then `protocol`'s `payload`.
    fn packet(
        is_ipv6: bool,
        exts: &[(u8, bool)],
        frag: u16,
        protocol: u8,
        payload: &[u8],
    ) -> Vec<u8> {
        let mut d = vec![0u8; 14];
        if is_ipv6 {
            let mut chain = Vec::new();
            let kinds: Vec<u8> = exts.iter().map(|e| e.0).collect();
            for (i, &(kind, long)) in exts.iter().enumerate() {
                let next = kinds.get(i + 1).copied().unwrap_or(protocol);
                chain.extend(ext_header(kind, next, long, frag));
            }
            let len = (chain.len() + payload.len()) as u16;
            let mut h = [0u8; 40];
            h[0] = 0x60;
            h[4..6].copy_from_slice(&len.to_be_bytes());
            h[6] = kinds.first().copied().unwrap_or(protocol);
            h[7] = 64;
            h[8..24].copy_from_slice(&0x2001_0db8_0000_0000_0000_0000_0000_0001u128.to_be_bytes());
            h[24..40].copy_from_slice(&0x2001_0db8_00ff_0000_0000_0000_0000_0002u128.to_be_bytes());
            d.extend(h);
            d.extend(chain);
        } else {
            let words = exts.len().min(10);
            let ihl = 20 + 4 * words;
            let total = (ihl + payload.len()) as u16;
            let mut h = vec![0u8; ihl];
            h[0] = 0x40 | (ihl / 4) as u8;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h[6..8].copy_from_slice(&frag.to_be_bytes());
            h[8] = 64;
            h[9] = protocol;
            h[12..16].copy_from_slice(&[198, 18, 0, 7]);
            h[16..20].copy_from_slice(&[203, 0, 113, 9]);
            // No-operation options.
            h[20..].fill(1);
            d.extend(h);
        }
        d.extend_from_slice(payload);
        d
    }

    /// The flow key of an IP packet as etherparse parses it: addresses,
    /// the upper layer's protocol and bytes, whether it is a fragment, and
    /// the ports and the rest only in a first fragment, by the rules
    /// [`FlowKey`]'s fields document.
    fn reference_key(ip: &[u8], in_if: InterfaceId) -> FlowKey {
        let s = IpSlice::from_slice(ip).expect("well-formed test packet");
        let p = s.payload();
        let (is_ipv6, src, dst, first) = match &s {
            IpSlice::Ipv4(v4) => {
                let h = v4.header();
                (
                    false,
                    v4_key(u32::from(h.source_addr())),
                    v4_key(u32::from(h.destination_addr())),
                    h.fragments_offset().value() == 0,
                )
            }
            IpSlice::Ipv6(v6) => {
                let h = v6.header();
                let first = v6.extensions().clone().into_iter().all(|e| match e {
                    Ipv6ExtensionSlice::Fragment(f) => f.fragment_offset().value() == 0,
                    _ => true,
                });
                (
                    true,
                    u128::from(h.source_addr()),
                    u128::from(h.destination_addr()),
                    first,
                )
            }
        };
        let protocol = p.ip_number.0;
        let b = p.payload;
        let be = |at: usize| {
            b.get(at..at + 2)
                .map_or(0, |q| u16::from_be_bytes([q[0], q[1]]))
        };
        let mut k = FlowKey {
            interface: in_if,
            out_interface: crate::acl::NO_INTERFACE,
            is_ipv6,
            fragment: p.fragmented,
            src,
            dst,
            protocol,
            length: ip.len() as u16,
            ..FlowKey::default()
        };
        if first {
            match protocol {
                6 | 17 | 132 | 136 if b.len() >= 4 => {
                    (k.src_port, k.dst_port) = (be(0), be(2));
                    if protocol == 6 {
                        k.tcp_flags = b.get(13).copied().unwrap_or(0);
                    }
                }
                1 | 58 if b.len() >= 2 => {
                    (k.icmp_type, k.icmp_code) = (b[0], b[1]);
                    (k.src_port, k.dst_port) = (be(0), be(4));
                }
                _ => {}
            }
        }
        k
    }

    fn ipv6_chain() -> impl Strategy<Value = Vec<(u8, bool)>> {
        (
            any::<bool>(),
            proptest::collection::vec(
                (prop_oneof![Just(43u8), Just(60), Just(51)], any::<bool>()),
                0..3,
            ),
            any::<bool>(),
        )
            .prop_map(|(hop_by_hop, middle, fragment)| {
                let mut c = Vec::new();
                if hop_by_hop {
                    c.push((0, false));
                }
                c.extend(middle);
                if fragment {
                    c.push((44, false));
                }
                c
            })
    }

    proptest! {
        /// The pipeline's flow key of any well-formed IPv4 or IPv6 packet
        /// (options, extension headers, fragments first and later, every
        /// protocol the key reads and others, headers cut short) is
        /// etherparse's reading of it.
        #[test]
        fn flow_keys_match_etherparse(
            is_ipv6 in any::<bool>(),
            exts in ipv6_chain(),
            frag in prop_oneof![
                Just(0u16), Just(0x4000), Just(0x2000), Just(0x0001), Just(0x2010), any::<u16>()
            ],
            protocol in prop_oneof![
                Just(1u8), Just(6), Just(17), Just(58), Just(132), Just(136), Just(47)
            ],
            payload in proptest::collection::vec(any::<u8>(), 0..32),
            in_if in 0u16..8,
        ) {
            // The IPv6 fragment word: offset and M bit (the reserved bits
            // clear); IPv4 keeps its reserved flag clear too.
            let frag = if is_ipv6 { frag & 0xfff9 } else { frag & 0x7fff };
            let d = packet(is_ipv6, &exts, frag, protocol, &payload);
            let ip = &d[14..];
            let m = Meta { in_if, l3: 14, l3_len: ip.len() as u32 };
            prop_assert_eq!(flow_key(&d, &m, is_ipv6), reference_key(ip, in_if));
        }
    }

    fn flow_key(d: &[u8], m: &Meta, is_ipv6: bool) -> FlowKey {
        let mut k = FlowKey::default();
        write_flow_key(d, m, is_ipv6, &mut k);
        k
    }

    /// The flow key of `d`, an IP packet after 14 bytes of Ethernet.
    fn key_of(d: &[u8], is_ipv6: bool) -> FlowKey {
        let m = Meta {
            in_if: 0,
            l3: 14,
            l3_len: (d.len() - 14) as u32,
        };
        flow_key(d, &m, is_ipv6)
    }

    #[test]
    fn flow_keys_of_common_packets() {
        // A TCP SYN-ACK from 198.18.0.7:8080 to 203.0.113.9:80.
        let mut tcp = [0u8; 20];
        tcp[..4].copy_from_slice(&[0x1f, 0x90, 0x00, 0x50]);
        tcp[13] = 0x12;
        let d = packet(false, &[], 0x4000, 6, &tcp);
        let k = key_of(&d, false);
        assert_eq!((k.src_port, k.dst_port, k.tcp_flags), (8080, 80, 0x12));
        assert_eq!(k.src, 0xffff_c612_0007);
        assert!(!k.fragment, "DF alone is not a fragment");
        // An echo request: type and code as the source port, then its
        // identifier.
        let echo = [8u8, 0, 0xab, 0xcd, 0x12, 0x34, 0, 1];
        let d = packet(false, &[], 0, 1, &echo);
        let k = key_of(&d, false);
        assert_eq!((k.icmp_type, k.src_port, k.dst_port), (8, 8 << 8, 0x1234));
        // A later IPv6 fragment of UDP: a fragment, without ports.
        let d = packet(
            true,
            &[(44, false)],
            0x0010,
            17,
            &[0, 53, 0, 53, 0, 8, 0, 0],
        );
        let k = key_of(&d, true);
        assert_eq!(
            (k.protocol, k.fragment, k.src_port, k.dst_port),
            (17, true, 0, 0)
        );
    }
}
