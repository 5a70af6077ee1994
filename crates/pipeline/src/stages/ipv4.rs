//! IPv4 input: header validation, martian filtering and local delivery.
//!
//! Reads: the IPv4 header (version, IHL, total length, checksum, TTL,
//! addresses) of the packet at the frame's L3 offset.
//! Writes: nothing in the packet (the TTL is decremented in the forward
//! stage, after the MTU check, so ICMP errors quote the packet as received).
//! Next, in this order:
//! 1. RFC 1812 §5.2.2 checks: length at least 20, version 4, IHL >= 5,
//!    total length >= IHL*4 and within the frame, header checksum. Failures
//!    are dropped under their own reason. Bytes past the total length
//!    (Ethernet padding) are not forwarded.
//! 2. RFC 1812 §5.3.7 martian source: 0/8, 127/8, 224/4 and 240/4 (which
//!    holds 255.255.255.255) are dropped as `ipv4_martian_source`, except
//!    0.0.0.0 to 255.255.255.255 (a DHCP client), punted.
//! 3. Local delivery (RFC 1812 §5.2.1, §5.3.5): multicast in 224.0.0.0/24
//!    (routing protocols), the limited broadcast, a connected subnet's
//!    broadcast and the router's own addresses go to the punt output; other
//!    multicast is dropped (`multicast_not_routed`).
//! 4. Martian destination 0/8, 127/8, 240/4: dropped.
//! 5. Frames that arrived as link-layer broadcast/multicast are not
//!    forwarded (RFC 1812 §5.3.4).
//! 6. Options (RFC 791 §3.1, RFC 1812 §5.2.5) of transit packets: an
//!    option whose length octet is missing, below 2 or runs past the
//!    header gets ICMP parameter problem pointing at it (RFC 792, RFC 1812
//!    §4.3.2.1) and is dropped as `ipv4_bad_options`; well-formed options
//!    are forwarded untouched.
//! 7. Otherwise on to the route lookup with the destination. The TTL is
//!    looked at once the route is known, as the kernel does: a packet
//!    with TTL <= 1 routed to a next hop gets ICMP time exceeded in
//!    transit (RFC 1812 §5.3.1, RFC 792) and is dropped as `ttl_expired`
//!    by the next-hop stage; one whose route discards it gets that
//!    route's answer.

use super::ethernet::LinkCast;
use super::icmp;
use crate::counters::{DropReason, PuntReason};
use crate::tables::{LocalKind, Tables};
use crate::worker::{Meta, Step, Verdict, Worker};

pub(crate) const LIMITED_BROADCAST: u32 = 0xffff_ffff;

#[inline(always)]
pub(crate) fn be16(d: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([d[at], d[at + 1]])
}

#[inline(always)]
pub(crate) fn be32(d: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]])
}

/// The RFC 1812 §5.2.2 checks; returns (header length, total length).
#[inline(always)]
pub(crate) fn validate(h: &[u8]) -> Result<(usize, usize), DropReason> {
    if h.len() < 20 {
        return Err(DropReason::Ipv4Truncated);
    }
    if h[0] >> 4 != 4 {
        return Err(DropReason::Ipv4BadVersion);
    }
    let ihl = usize::from(h[0] & 0x0f) * 4;
    if ihl < 20 {
        return Err(DropReason::Ipv4BadHeaderLength);
    }
    if h.len() < ihl {
        return Err(DropReason::Ipv4Truncated);
    }
    let total = usize::from(be16(h, 2));
    if total < ihl {
        return Err(DropReason::Ipv4BadTotalLength);
    }
    if total > h.len() {
        return Err(DropReason::Ipv4Truncated);
    }
    if !wire::checksum::verifies(wire::checksum::sum_ipv4_header(&h[..ihl])) {
        return Err(DropReason::Ipv4BadChecksum);
    }
    Ok((ihl, total))
}

/// Walks the options area (RFC 791 §3.1): end-of-list (0) ends it, no-op
/// (1) is one octet, every other option has a length octet of at least 2
/// that must not run past the header. Returns the offset (within the
/// options) of the octet in error.
#[inline]
pub(crate) fn check_options(opts: &[u8]) -> Result<(), usize> {
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => return Ok(()),
            1 => i += 1,
            _ => {
                let Some(&len) = opts.get(i + 1) else {
                    return Err(i);
                };
                let len = usize::from(len);
                if len < 2 || i + len > opts.len() {
                    return Err(i + 1);
                }
                i += len;
            }
        }
    }
    Ok(())
}

/// Whether an IPv4 source must never be seen (RFC 1812 §5.3.7).
#[inline(always)]
pub(crate) fn is_martian_source(src: u32) -> bool {
    let a = src >> 24;
    a == 0 || a == 127 || a >= 224
}

/// Whether an IPv4 destination must never be forwarded (RFC 1812 §5.3.7).
#[inline(always)]
pub(crate) fn is_martian_destination(dst: u32) -> bool {
    let a = dst >> 24;
    a == 0 || a == 127 || a >= 240
}

/// The input stage for the IPv4 packet at `d[l3..]`.
#[inline(always)]
pub(crate) fn input<F4, F6, A>(
    w: &mut Worker,
    tables: &Tables<F4, F6, A>,
    d: &[u8],
    l3: usize,
    cast: LinkCast,
    m: &mut Meta,
) -> Step
where
    F4: fib::Lookup<u32>,
    F6: fib::Lookup<u128>,
{
    let h = d.get(l3..).unwrap_or(&[]);
    let (ihl, total) = match validate(h) {
        Ok(v) => v,
        Err(r) => return Step::Done(w.drop_in(m.in_if, r)),
    };
    m.l3 = l3 as u16;
    m.l3_len = total as u32;
    let src = be32(h, 12);
    let dst = be32(h, 16);
    if is_martian_source(src) {
        if src == 0 && dst == LIMITED_BROADCAST {
            return punt(w, PuntReason::Broadcast);
        }
        return Step::Done(w.drop_in(m.in_if, DropReason::Ipv4MartianSource));
    }
    if dst >> 28 == 0xe {
        if dst >> 8 == 0x00e0_0000 {
            return punt(w, PuntReason::Multicast);
        }
        return Step::Done(w.drop_in(m.in_if, DropReason::MulticastNotRouted));
    }
    if dst == LIMITED_BROADCAST {
        return punt(w, PuntReason::Broadcast);
    }
    match tables.local4(dst) {
        Some(LocalKind::Unicast) => return punt(w, PuntReason::LocalAddress),
        Some(LocalKind::Broadcast) => return punt(w, PuntReason::Broadcast),
        None => {}
    }
    if is_martian_destination(dst) {
        return Step::Done(w.drop_in(m.in_if, DropReason::Ipv4MartianDestination));
    }
    if cast != LinkCast::Unicast {
        return Step::Done(w.drop_in(m.in_if, DropReason::L2BroadcastNotForwarded));
    }
    if ihl > 20
        && let Err(at) = check_options(&h[20..ihl])
    {
        // RFC 792: type 12 (parameter problem), code 0, the pointer to
        // the octet in error in the first byte after the checksum.
        icmp::error_v4(
            w,
            tables,
            m.in_if,
            &h[..total],
            icmp::V4_PARAMETER_PROBLEM,
            0,
            ((20 + at) as u32) << 24,
        );
        return Step::Done(w.drop_in(m.in_if, DropReason::Ipv4BadOptions));
    }
    Step::Route4(dst, h[8] <= 1)
}

#[inline]
fn punt(w: &mut Worker, r: PuntReason) -> Step {
    w.counters.punt(r);
    Step::Done(Verdict::Punt(r))
}

#[cfg(test)]
mod tests {
    #[test]
    fn options_walk_finds_the_octet_in_error() {
        use super::check_options;
        assert_eq!(check_options(&[1, 1, 1, 0]), Ok(()));
        assert_eq!(
            check_options(&[7, 4, 0, 0]),
            Ok(()),
            "record route, 4 octets"
        );
        assert_eq!(
            check_options(&[0, 0xff, 0xff, 0xff]),
            Ok(()),
            "after end of list"
        );
        assert_eq!(
            check_options(&[1, 7, 9, 0]),
            Err(2),
            "length past the header"
        );
        assert_eq!(check_options(&[1, 1, 1, 7]), Err(3), "no length octet");
        assert_eq!(check_options(&[68, 1, 0, 0]), Err(1), "length below 2");
        assert_eq!(check_options(&[68, 0, 0, 0]), Err(1), "length 0");
    }

    use super::*;

    fn header() -> [u8; 20] {
        let mut h = [
            0x45, 0, 0, 20, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 19, 0, 1,
        ];
        let c = wire::checksum::checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h
    }

    #[test]
    fn validates_a_good_header() {
        assert_eq!(validate(&header()), Ok((20, 20)));
    }

    #[test]
    fn rejects_each_bad_field() {
        let good = header();
        for len in 0..20 {
            assert_eq!(validate(&good[..len]), Err(DropReason::Ipv4Truncated));
        }
        let mut h = good;
        h[0] = 0x65;
        assert_eq!(validate(&h), Err(DropReason::Ipv4BadVersion));
        let mut h = good;
        h[0] = 0x44;
        assert_eq!(validate(&h), Err(DropReason::Ipv4BadHeaderLength));
        let mut h = good;
        h[0] = 0x46;
        assert_eq!(validate(&h), Err(DropReason::Ipv4Truncated));
        let mut h = good;
        h[3] = 19;
        assert_eq!(validate(&h), Err(DropReason::Ipv4BadTotalLength));
        let mut h = good;
        h[3] = 21;
        assert_eq!(validate(&h), Err(DropReason::Ipv4Truncated));
        let mut h = good;
        h[11] ^= 1;
        assert_eq!(validate(&h), Err(DropReason::Ipv4BadChecksum));
    }

    #[test]
    fn martians() {
        for s in [
            "0.1.2.3",
            "127.0.0.1",
            "224.0.0.5",
            "240.0.0.1",
            "255.255.255.255",
        ] {
            let a: std::net::Ipv4Addr = s.parse().unwrap();
            assert!(is_martian_source(a.into()), "{s}");
        }
        assert!(!is_martian_source(u32::from(std::net::Ipv4Addr::new(
            198, 18, 0, 1
        ))));
        for s in ["0.0.0.0", "127.1.1.1", "250.0.0.1"] {
            let a: std::net::Ipv4Addr = s.parse().unwrap();
            assert!(is_martian_destination(a.into()), "{s}");
        }
        assert!(!is_martian_destination(u32::from(std::net::Ipv4Addr::new(
            8, 8, 8, 8
        ))));
    }
}
