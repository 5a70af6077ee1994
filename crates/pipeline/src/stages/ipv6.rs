//! IPv6 input: header validation, address checks and local delivery
//! (RFC 8200, RFC 4291).
//!
//! Reads: version, payload length, hop limit and addresses of the IPv6
//! header at the frame's L3 offset.
//! Writes: nothing (the hop limit is decremented in the forward stage).
//! Next, in this order:
//! 1. RFC 8200 §3: at least 40 bytes, version 6, payload length within the
//!    frame (bytes past it, Ethernet padding, are not forwarded).
//! 2. Multicast source (RFC 4291 §2.7): dropped as `ipv6_martian_source`.
//! 3. Local delivery: link-local scope multicast (ff02::/16 and flagged
//!    variants: all-nodes, all-routers, solicited-node for ND, MLD, routing
//!    protocols) and the router's own and subnet-router anycast addresses
//!    go to the punt output; other multicast is dropped (no multicast
//!    routing).
//! 4. Never forwarded: unspecified (::), loopback (::1) or IPv4-mapped
//!    source or destination (RFC 4291 §2.5.2, §2.5.3, §2.5.5.2); link-local
//!    source or destination (RFC 4291 §2.5.6).
//! 5. Frames that arrived as link-layer multicast are not forwarded.
//! 6. Otherwise on to the route lookup with the destination. The hop
//!    limit is looked at once the route is known, as the kernel does: a
//!    packet with hop limit <= 1 routed to a next hop gets ICMPv6 time
//!    exceeded, code 0 (RFC 4443 §3.3), and is dropped as
//!    `hop_limit_expired` by the next-hop stage; one whose route discards
//!    it gets that route's answer.

use super::ethernet::LinkCast;
use crate::counters::{DropReason, PuntReason};
use crate::tables::{Tables, is_v6_link_local};
use crate::worker::{Meta, Step, Verdict, Worker};

#[inline(always)]
pub(crate) fn be128(d: &[u8], at: usize) -> u128 {
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[at..at + 16]);
    u128::from_be_bytes(b)
}

/// RFC 8200 §3 checks; returns the packet length (40 + payload length).
#[inline(always)]
pub(crate) fn validate(h: &[u8]) -> Result<usize, DropReason> {
    if h.len() < 40 {
        return Err(DropReason::Ipv6Truncated);
    }
    if h[0] >> 4 != 6 {
        return Err(DropReason::Ipv6BadVersion);
    }
    let total = 40 + usize::from(u16::from_be_bytes([h[4], h[5]]));
    if total > h.len() {
        return Err(DropReason::Ipv6Truncated);
    }
    Ok(total)
}

/// Unspecified, loopback or IPv4-mapped: never on the wire as a forwarded
/// packet's address.
#[inline(always)]
pub(crate) fn is_never_forwarded(a: u128) -> bool {
    a <= 1 || a >> 32 == 0xffff
}

/// Whether both addresses of the header `h` (at least 40 bytes) are in
/// 2000::/3. Read from their first bytes: both below 0x20 once 0x20 is
/// flipped out, i.e. 001 in their top three bits (a test of the addresses
/// as `u128`s compiles to a dozen vector instructions).
#[inline(always)]
fn both_global_unicast(h: &[u8]) -> bool {
    (h[8] ^ 0x20) | (h[24] ^ 0x20) < 0x20
}

/// The input stage for the IPv6 packet at `d[l3..]`.
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
    let total = match validate(h) {
        Ok(v) => v,
        Err(r) => return Step::Done(w.drop_in(m.in_if, r)),
    };
    m.l3 = l3 as u16;
    m.l3_len = total as u32;
    let src = be128(h, 8);
    let dst = be128(h, 24);
    // Global unicast (2000::/3) at both ends, nearly all transit traffic,
    // is never multicast, unspecified, loopback, IPv4-mapped or
    // link-local: of the checks below only the local address applies.
    let global = both_global_unicast(h);
    if !global {
        if src >> 120 == 0xff {
            return Step::Done(w.drop_in(m.in_if, DropReason::Ipv6MartianSource));
        }
        if dst >> 120 == 0xff {
            // Scope nibble 2: link-local (RFC 4291 §2.7).
            if (dst >> 112) & 0xf == 2 {
                return punt(w, PuntReason::Multicast);
            }
            return Step::Done(w.drop_in(m.in_if, DropReason::MulticastNotRouted));
        }
    }
    if tables.local6(dst).is_some() {
        return punt(w, PuntReason::LocalAddress);
    }
    if !global {
        if is_never_forwarded(src) {
            return Step::Done(w.drop_in(m.in_if, DropReason::Ipv6MartianSource));
        }
        if is_never_forwarded(dst) {
            return Step::Done(w.drop_in(m.in_if, DropReason::Ipv6MartianDestination));
        }
        if is_v6_link_local(src) || is_v6_link_local(dst) {
            return Step::Done(w.drop_in(m.in_if, DropReason::Ipv6LinkLocal));
        }
    }
    if cast != LinkCast::Unicast {
        return Step::Done(w.drop_in(m.in_if, DropReason::L2BroadcastNotForwarded));
    }
    Step::Route6(dst, h[7] <= 1)
}

#[inline]
fn punt(w: &mut Worker, r: PuntReason) -> Step {
    w.counters.punt(r);
    Step::Done(Verdict::Punt(r))
}

/// What the extension-header walk found: the upper-layer protocol, its
/// offset, and whether the packet is a fragment other than the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UpperLayer {
    pub(crate) protocol: u8,
    pub(crate) offset: usize,
    pub(crate) non_first_fragment: bool,
    /// A fragment header with a non-zero offset or the M flag (not an
    /// atomic fragment, RFC 8200 §4.5).
    pub(crate) fragment: bool,
}

/// Whether next header `nh` is an extension header [`upper_layer`] walks
/// (hop-by-hop 0, routing 43, fragment 44, authentication 51, destination
/// options 60).
#[inline(always)]
pub(crate) fn is_extension(nh: u8) -> bool {
    matches!(nh, 0 | 43 | 44 | 51 | 60)
}

/// Walks the extension headers (RFC 8200 §4) of the packet `h` (header
/// included) up to eight of them; stops at the first header it does not
/// know as an extension, or where the packet ends.
#[inline]
pub(crate) fn upper_layer(h: &[u8]) -> UpperLayer {
    let mut nh = h.get(6).copied().unwrap_or(59);
    let mut off = 40;
    let mut non_first_fragment = false;
    let mut fragment = false;
    for _ in 0..8 {
        match nh {
            // Hop-by-hop, routing, destination options: (len + 1) * 8.
            0 | 43 | 60 => {
                let Some(&[next, len]) = h
                    .get(off..off + 2)
                    .and_then(|s| <&[u8; 2]>::try_from(s).ok())
                else {
                    break;
                };
                nh = next;
                off += (usize::from(len) + 1) * 8;
            }
            // Fragment header: 8 bytes, offset in the top 13 bits of 2..4.
            44 => {
                let Some(f) = h.get(off..off + 8) else { break };
                nh = f[0];
                let off_m = u16::from_be_bytes([f[2], f[3]]);
                fragment |= off_m & 0xfff9 != 0;
                off += 8;
                if off_m & 0xfff8 != 0 {
                    // What follows is the middle of the datagram, not headers.
                    non_first_fragment = true;
                    break;
                }
            }
            // Authentication header: (len + 2) * 4.
            51 => {
                let Some(&[next, len]) = h
                    .get(off..off + 2)
                    .and_then(|s| <&[u8; 2]>::try_from(s).ok())
                else {
                    break;
                };
                nh = next;
                off += (usize::from(len) + 2) * 4;
            }
            _ => break,
        }
    }
    UpperLayer {
        protocol: nh,
        offset: off,
        non_first_fragment,
        fragment,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_unicast_is_2000_slash_3_at_both_ends() {
        let mut h = [0u8; 40];
        for src in 0..=255u8 {
            for dst in 0..=255u8 {
                h[8] = src;
                h[24] = dst;
                let top3 = |a: u128| (a >> 125) == 1;
                let expected = top3(be128(&h, 8)) && top3(be128(&h, 24));
                assert_eq!(both_global_unicast(&h), expected, "{src:#x} {dst:#x}");
            }
        }
    }

    #[test]
    fn validate_checks_version_and_lengths() {
        let mut h = [0u8; 48];
        h[0] = 0x60;
        h[5] = 8;
        assert_eq!(validate(&h), Ok(48));
        assert_eq!(validate(&h[..47]), Err(DropReason::Ipv6Truncated));
        assert_eq!(validate(&h[..39]), Err(DropReason::Ipv6Truncated));
        h[0] = 0x40;
        assert_eq!(validate(&h), Err(DropReason::Ipv6BadVersion));
    }

    #[test]
    fn walks_extension_headers() {
        let mut h = vec![0u8; 40 + 8 + 8 + 8];
        h[0] = 0x60;
        h[6] = 0; // hop-by-hop
        h[40] = 44; // -> fragment
        h[41] = 0;
        h[48] = 17; // fragment -> UDP
        h[50] = 0x00;
        h[51] = 0x08; // offset 1 (x8 bytes)
        let u = upper_layer(&h);
        assert_eq!(
            u,
            UpperLayer {
                protocol: 17,
                offset: 56,
                non_first_fragment: true,
                fragment: true
            }
        );
        h[51] = 0x01; // offset 0, M flag
        assert!(!upper_layer(&h).non_first_fragment);
        assert!(upper_layer(&h).fragment);
        h[51] = 0x00; // atomic fragment
        assert!(!upper_layer(&h).fragment);
    }
}
