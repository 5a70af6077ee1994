//! ICMP and ICMPv6 error generation (RFC 792, RFC 1812 §4.3.2, RFC 4443).
//!
//! Reads: the offending packet as received (its IP header and as much of
//! the payload as may be quoted), the ingress interface, the FIB (to route
//! the error back to the packet's source), the adjacency and neighbour
//! tables, the worker's token bucket.
//! Writes: a new packet in a buffer of the worker's pool: Ethernet header
//! of the egress interface, IP header sourced from the router's address on
//! the ingress interface, the ICMP header and the quote.
//! Next: the generated packet is listed in [`crate::BatchOutput::generated`]
//! with its egress port. Not sent (counted as `icmp_suppressed`) in answer
//! to an ICMP error, an IPv4 fragment other than the first, or a packet
//! from a broadcast address (RFC 1812 §4.3.2.7); for IPv6, in answer to an
//! ICMPv6 error, including a non-first fragment of an ICMPv6 message whose
//! type cannot be seen (RFC 4443 §2.4 (e)); the caller
//! never asks for multicast or broadcast destinations, which stop at local
//! delivery. Sent at most at the token bucket's rate per worker (RFC 1812
//! §4.3.2.8, RFC 4443 §2.4 (f)), a bucket for the path MTU messages
//! (fragmentation needed, packet too big: RFC 1191, RFC 8201) and one for
//! the rest, so a flood earning one kind does not starve the other; excess
//! is counted as `icmp_rate_limited`.

use super::{ipv4::be32, ipv6, route_back_v4, route_back_v6, write_l2};
use crate::counters::IcmpSuppressed;
use crate::tables::{InterfaceId, LocalKind, Tables};
use crate::worker::{Generated, Worker};

/// ICMP type 3: destination unreachable.
pub(crate) const V4_UNREACHABLE: u8 = 3;
/// Code 0 of type 3: net unreachable (no route).
pub(crate) const V4_NET_UNREACHABLE: u8 = 0;
/// Code 1 of type 3: host unreachable (an `unreachable` route).
pub(crate) const V4_HOST_UNREACHABLE: u8 = 1;
/// Code 13 of type 3: communication administratively prohibited (RFC 1812 §5.2.7.1).
pub(crate) const V4_ADMIN_PROHIBITED: u8 = 13;
/// Code 4 of type 3: fragmentation needed and DF set (RFC 1191).
pub(crate) const V4_FRAG_NEEDED: u8 = 4;
/// ICMP type 12: parameter problem (RFC 792).
pub(crate) const V4_PARAMETER_PROBLEM: u8 = 12;
/// ICMP type 11: time exceeded.
pub(crate) const V4_TIME_EXCEEDED: u8 = 11;
/// ICMPv6 type 1: destination unreachable (code 0: no route).
pub(crate) const V6_UNREACHABLE: u8 = 1;
/// ICMPv6 type 2: packet too big.
pub(crate) const V6_PACKET_TOO_BIG: u8 = 2;
/// ICMPv6 type 3: time exceeded.
pub(crate) const V6_TIME_EXCEEDED: u8 = 3;

/// Largest IPv4 ICMP error (RFC 1812 §4.3.2.3).
const V4_MAX_ERROR: usize = 576;
/// Largest ICMPv6 error: the IPv6 minimum MTU (RFC 4443 §2.4 (c)).
const V6_MAX_ERROR: usize = 1280;

/// A token bucket counting in nanotokens so that integer arithmetic on the
/// caller's nanosecond clock keeps full precision.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TokenBucket {
    rate_per_sec: u64,
    capacity: u64,
    level: u64,
    last_ns: Option<u64>,
}

const NANO: u64 = 1_000_000_000;

impl TokenBucket {
    pub(crate) fn new(rate_per_sec: u32, burst: u32) -> Self {
        let capacity = u64::from(burst.max(1)) * NANO;
        Self {
            rate_per_sec: u64::from(rate_per_sec),
            capacity,
            level: if rate_per_sec == 0 { 0 } else { capacity },
            last_ns: None,
        }
    }

    /// Adds the tokens earned since the last call.
    pub(crate) fn refill(&mut self, now_ns: u64) {
        if let Some(last) = self.last_ns {
            let earned = now_ns
                .saturating_sub(last)
                .saturating_mul(self.rate_per_sec);
            self.level = self.level.saturating_add(earned).min(self.capacity);
        }
        // A clock that steps back does not earn tokens twice.
        self.last_ns = Some(self.last_ns.map_or(now_ns, |l| l.max(now_ns)));
    }

    /// Takes one token if there is one.
    pub(crate) fn take(&mut self) -> bool {
        if self.level >= NANO {
            self.level -= NANO;
            true
        } else {
            false
        }
    }
}

/// Sends an ICMPv4 error about `orig` (the offending IPv4 packet as
/// received, validated) that arrived on `in_if`. `rest` fills the second
/// header word (next-hop MTU for fragmentation needed).
pub(crate) fn error_v4<F4, F6, A>(
    w: &mut Worker,
    tables: &Tables<F4, F6, A>,
    in_if: InterfaceId,
    orig: &[u8],
    icmp_type: u8,
    code: u8,
    rest: u32,
) where
    F4: fib::Lookup<u32>,
    F6: fib::Lookup<u128>,
{
    let ihl = usize::from(orig[0] & 0x0f) * 4;
    let frag_offset = u16::from_be_bytes([orig[6], orig[7]]) & 0x1fff;
    let src = be32(orig, 12);
    let is_icmp_error = orig[9] == wire::ip_proto::ICMP
        && orig
            .get(ihl)
            .is_none_or(|t| matches!(t, 3 | 4 | 5 | 11 | 12));
    let rule = if is_icmp_error {
        Some(IcmpSuppressed::AboutIcmpError)
    } else if frag_offset != 0 {
        Some(IcmpSuppressed::NonFirstFragment)
    } else if tables.local4(src) == Some(LocalKind::Broadcast) {
        Some(IcmpSuppressed::ToBroadcast)
    } else {
        None
    };
    if let Some(c) = rule {
        w.counters.icmp_suppress(c);
        return;
    }
    let Some(our) = tables
        .if_rt
        .get(usize::from(in_if))
        .and_then(|i| i.ipv4_source)
        .or_else(|| tables.if_rt.iter().find_map(|i| i.ipv4_source))
    else {
        w.counters.icmp_suppress(IcmpSuppressed::NoSourceAddress);
        return;
    };
    let (out_if, mac) = match route_back_v4(w, tables, src, in_if) {
        Ok(back) => back,
        Err(c) => {
            w.counters.icmp_suppress(c);
            return;
        }
    };
    let bucket = if (icmp_type, code) == (V4_UNREACHABLE, V4_FRAG_NEEDED) {
        crate::worker::ICMP_PATH_MTU
    } else {
        crate::worker::ICMP_OTHER
    };
    if !w.icmp_buckets[bucket].take() {
        w.counters.icmp_rate_limited += 1;
        return;
    }
    let ifr = tables.if_rt[usize::from(out_if)];
    let max_ip = V4_MAX_ERROR.min(usize::from(ifr.mtu));
    let quote = orig.len().min(max_ip - 28);
    let ip_len = 28 + quote;
    w.ip_id = w.ip_id.wrapping_add(1);
    let ip_id = w.ip_id;
    let Some((slot, buf)) = w.out.alloc_slot() else {
        w.counters.icmp_suppress(IcmpSuppressed::NoBuffer);
        return;
    };
    let l2 = write_l2(buf, &ifr, mac, wire::ethertype::IPV4);
    if buf.len() < l2 + ip_len {
        w.counters.icmp_suppress(IcmpSuppressed::NoBuffer);
        return;
    }
    let ip = &mut buf[l2..l2 + ip_len];
    // RFC 1812 §4.3.2.5: precedence 6 (internetwork control) for errors.
    ip[..20].copy_from_slice(&[
        0x45,
        0xc0,
        0,
        0,
        0,
        0,
        0,
        0,
        64,
        wire::ip_proto::ICMP,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ]);
    ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
    ip[4..6].copy_from_slice(&ip_id.to_be_bytes());
    ip[12..16].copy_from_slice(&our.to_be_bytes());
    ip[16..20].copy_from_slice(&src.to_be_bytes());
    let c = wire::checksum::checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip[20] = icmp_type;
    ip[21] = code;
    ip[22..24].fill(0);
    ip[24..28].copy_from_slice(&rest.to_be_bytes());
    ip[28..].copy_from_slice(&orig[..quote]);
    let c = wire::checksum::checksum(&ip[20..]);
    ip[22..24].copy_from_slice(&c.to_be_bytes());
    let len = l2 + ip_len;
    w.out.generated.push(Generated {
        port: ifr.port,
        interface: out_if,
        slot,
        len: len as u32,
    });
    w.count_tx(out_if, len);
    w.counters.icmp_sent += 1;
}

/// Sends an ICMPv6 error about `orig` (the offending IPv6 packet as
/// received) that arrived on `in_if`. `rest` fills the second header word
/// (the MTU for packet too big).
pub(crate) fn error_v6<F4, F6, A>(
    w: &mut Worker,
    tables: &Tables<F4, F6, A>,
    in_if: InterfaceId,
    orig: &[u8],
    icmp_type: u8,
    code: u8,
    rest: u32,
) where
    F4: fib::Lookup<u32>,
    F6: fib::Lookup<u128>,
{
    // RFC 4443 §2.4 (e): never about an ICMPv6 error. A non-first fragment
    // of an ICMPv6 message cannot show its type, so it counts as one; other
    // non-first fragments are answered (RFC 4443 lists no exemption for
    // them, and path MTU discovery, RFC 8201, needs packet too big for
    // every fragment).
    let upper = ipv6::upper_layer(orig);
    let is_icmp_error = upper.protocol == wire::ip_proto::ICMPV6
        && (upper.non_first_fragment || orig.get(upper.offset).is_none_or(|&t| t < 128));
    if is_icmp_error {
        w.counters.icmp_suppress(IcmpSuppressed::AboutIcmpError);
        return;
    }
    let src = ipv6::be128(orig, 8);
    let Some(our) = tables
        .if_rt
        .get(usize::from(in_if))
        .and_then(|i| i.ipv6_source)
        .or_else(|| tables.if_rt.iter().find_map(|i| i.ipv6_source))
    else {
        w.counters.icmp_suppress(IcmpSuppressed::NoSourceAddress);
        return;
    };
    let (out_if, mac) = match route_back_v6(w, tables, src, in_if) {
        Ok(back) => back,
        Err(c) => {
            w.counters.icmp_suppress(c);
            return;
        }
    };
    let bucket = if icmp_type == V6_PACKET_TOO_BIG {
        crate::worker::ICMP_PATH_MTU
    } else {
        crate::worker::ICMP_OTHER
    };
    if !w.icmp_buckets[bucket].take() {
        w.counters.icmp_rate_limited += 1;
        return;
    }
    let ifr = tables.if_rt[usize::from(out_if)];
    let max_ip = V6_MAX_ERROR.min(usize::from(ifr.mtu));
    let quote = orig.len().min(max_ip - 48);
    let ip_len = 48 + quote;
    let Some((slot, buf)) = w.out.alloc_slot() else {
        w.counters.icmp_suppress(IcmpSuppressed::NoBuffer);
        return;
    };
    let l2 = write_l2(buf, &ifr, mac, wire::ethertype::IPV6);
    if buf.len() < l2 + ip_len {
        w.counters.icmp_suppress(IcmpSuppressed::NoBuffer);
        return;
    }
    let ip = &mut buf[l2..l2 + ip_len];
    ip[..8].copy_from_slice(&[0x60, 0, 0, 0, 0, 0, wire::ip_proto::ICMPV6, 64]);
    ip[4..6].copy_from_slice(&((ip_len - 40) as u16).to_be_bytes());
    ip[8..24].copy_from_slice(&our.to_be_bytes());
    ip[24..40].copy_from_slice(&src.to_be_bytes());
    ip[40] = icmp_type;
    ip[41] = code;
    ip[42..44].fill(0);
    ip[44..48].copy_from_slice(&rest.to_be_bytes());
    ip[48..].copy_from_slice(&orig[..quote]);
    // RFC 4443 §2.3: the checksum covers the pseudo-header (RFC 8200 §8.1).
    let pseudo = wire::checksum::pseudo_header_v6(
        &our.into(),
        &src.into(),
        wire::ip_proto::ICMPV6,
        (ip_len - 40) as u32,
    );
    let c = wire::checksum::finish(wire::checksum::combine(&[
        pseudo,
        wire::checksum::sum(&ip[40..]),
    ]));
    ip[42..44].copy_from_slice(&c.to_be_bytes());
    let len = l2 + ip_len;
    w.out.generated.push(Generated {
        port: ifr.port,
        interface: out_if,
        slot,
        len: len as u32,
    });
    w.count_tx(out_if, len);
    w.counters.icmp_sent += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_burst_then_rate() {
        let mut b = TokenBucket::new(10, 3);
        b.refill(1_000);
        assert!(b.take() && b.take() && b.take());
        assert!(!b.take());
        b.refill(1_000 + 50_000_000); // 50 ms: half a token
        assert!(!b.take());
        b.refill(1_000 + 100_000_000); // 100 ms: one token
        assert!(b.take());
        assert!(!b.take());
        b.refill(u64::MAX); // never more than the burst
        assert!(b.take() && b.take() && b.take());
        assert!(!b.take());
    }

    #[test]
    fn zero_rate_never_sends() {
        let mut b = TokenBucket::new(0, 5);
        b.refill(0);
        b.refill(10 * NANO);
        assert!(!b.take());
    }
}
