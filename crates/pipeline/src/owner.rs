//! Which worker owns a flow: a hash both directions of a flow share.
//!
//! Connection tracking keeps its flows per worker (no locks), so a flow's
//! two directions must be processed by one worker. The queue a frame
//! arrives on does not ensure it: a NIC's RSS hash is keyed per direction,
//! and a veth delivers on the queue its sender transmitted from. A backend
//! that runs several workers over a stateful rule set therefore computes
//! [`flow_owner_hash`] of every received frame and hands the frame to the
//! worker the hash names (`router::handoff`).
//!
//! Reads: the Ethernet header and up to two VLAN tags, the IPv4 or IPv6
//! header, the IPv6 extension headers the pipeline walks, and the first
//! bytes of TCP, UDP, SCTP, UDP-Lite and ICMP.
//! Writes: nothing.
//!
//! The hash is over the unordered pair of addresses, the protocol and the
//! unordered pair of the firewall's ports (the ICMP echo identifier and 0
//! for ICMP, RFC 792 / RFC 4443; 0 and 0 in a non-first fragment), read by
//! the same code that builds the firewall's key: two packets the
//! connection table holds as one flow always hash alike, whichever way
//! they travel.

use crate::acl::FlowKey;
use crate::stages::{ethernet, mix_flow, write_flow_key};
use crate::worker::Meta;

/// The owner hash of `frame`, or `None` when it is not IPv4 or IPv6 (such
/// frames belong to no flow; any worker may take them).
#[inline]
pub fn flow_owner_hash(frame: &[u8]) -> Option<u32> {
    let l2 = ethernet::parse(frame).ok()?;
    let is_ipv6 = match l2.ethertype {
        wire::ethertype::IPV4 => false,
        wire::ethertype::IPV6 => true,
        _ => return None,
    };
    let l3_len = frame.len().checked_sub(l2.l3)?;
    let meta = Meta {
        l3: u16::try_from(l2.l3).ok()?,
        l3_len: u32::try_from(l3_len).ok()?,
        ..Meta::default()
    };
    let mut k = FlowKey::default();
    write_flow_key(frame, &meta, is_ipv6, &mut k);
    if k.src == 0 && k.dst == 0 && k.protocol == 0 {
        // Too short for its header: the pipeline drops it wherever it goes.
        return None;
    }
    // The firewall's ports: for ICMP and ICMPv6 the echo identifier the key
    // carries in `dst_port`, and 0.
    let icmp = matches!((k.protocol, is_ipv6), (1, false) | (58, true));
    let (p, q) = if icmp {
        (k.dst_port, 0)
    } else {
        (k.src_port, k.dst_port)
    };
    let (lo, hi) = if k.src <= k.dst {
        (k.src, k.dst)
    } else {
        (k.dst, k.src)
    };
    let ports = u32::from(p.min(q)) << 16 | u32::from(p.max(q));
    Some(mix_flow(lo, hi, k.protocol, ports))
}

/// The worker of `workers` that owns a flow of owner hash `hash`.
#[inline]
pub fn owner_of(hash: u32, workers: usize) -> usize {
    ((u64::from(hash) * workers as u64) >> 32) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn eth(ethertype: u16, tags: &[u16]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        for &t in tags {
            f.extend_from_slice(&0x8100u16.to_be_bytes());
            f.extend_from_slice(&t.to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f
    }

    fn v4(src: [u8; 4], dst: [u8; 4], proto: u8, frag: u16, l4: &[u8], tags: &[u16]) -> Vec<u8> {
        let mut f = eth(0x0800, tags);
        let total = (20 + l4.len()) as u16;
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[0, 1]);
        f.extend_from_slice(&frag.to_be_bytes());
        f.extend_from_slice(&[64, proto, 0, 0]);
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        f.extend_from_slice(l4);
        f
    }

    fn v6(src: u128, dst: u128, next: u8, rest: &[u8]) -> Vec<u8> {
        let mut f = eth(0x86dd, &[]);
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&(rest.len() as u16).to_be_bytes());
        f.extend_from_slice(&[next, 64]);
        f.extend_from_slice(&src.to_be_bytes());
        f.extend_from_slice(&dst.to_be_bytes());
        f.extend_from_slice(rest);
        f
    }

    fn ports(sp: u16, dp: u16) -> Vec<u8> {
        let mut p = sp.to_be_bytes().to_vec();
        p.extend_from_slice(&dp.to_be_bytes());
        p.extend_from_slice(&[0; 16]);
        p
    }

    fn echo(ty: u8, id: u16) -> Vec<u8> {
        let mut p = vec![ty, 0, 0, 0];
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&[0, 1]);
        p
    }

    #[test]
    fn non_ip_frames_belong_to_no_flow() {
        let mut arp = eth(0x0806, &[]);
        arp.extend_from_slice(&[0; 28]);
        assert_eq!(flow_owner_hash(&arp), None);
        assert_eq!(flow_owner_hash(&[0; 10]), None);
        // An IPv4 EtherType with too short a header.
        assert_eq!(flow_owner_hash(&eth(0x0800, &[])), None);
    }

    #[test]
    fn icmp_echo_and_its_reply_share_an_owner() {
        let req = v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 0, &echo(8, 77), &[]);
        let rep = v4([10, 0, 0, 2], [10, 0, 0, 1], 1, 0, &echo(0, 77), &[]);
        assert_eq!(flow_owner_hash(&req), flow_owner_hash(&rep));
        let req6 = v6(1 << 64 | 1, 1 << 64 | 2, 58, &echo(128, 9));
        let rep6 = v6(1 << 64 | 2, 1 << 64 | 1, 58, &echo(129, 9));
        assert_eq!(flow_owner_hash(&req6), flow_owner_hash(&rep6));
    }

    #[test]
    fn tags_do_not_change_the_owner() {
        let a = v4([10, 0, 0, 1], [10, 0, 0, 2], 17, 0, &ports(1, 2), &[]);
        let b = v4([10, 0, 0, 2], [10, 0, 0, 1], 17, 0, &ports(2, 1), &[100, 7]);
        assert_eq!(flow_owner_hash(&a), flow_owner_hash(&b));
    }

    #[test]
    fn ports_spread_the_flows_of_one_address_pair() {
        let owners: std::collections::HashSet<usize> = (0..64)
            .map(|sp| {
                let f = v4(
                    [10, 0, 0, 1],
                    [10, 0, 0, 2],
                    17,
                    0,
                    &ports(40000 + sp, 9),
                    &[],
                );
                owner_of(flow_owner_hash(&f).unwrap(), 4)
            })
            .collect();
        assert_eq!(owners.len(), 4);
    }

    #[test]
    fn an_ipv6_reply_without_the_requests_extension_header_shares_its_owner() {
        // Destination options (60) before UDP in one direction only.
        let mut opts = vec![17, 0, 1, 4, 0, 0, 0, 0];
        opts.extend_from_slice(&ports(5000, 53));
        let req = v6(1 << 64 | 1, 1 << 64 | 2, 60, &opts);
        let rep = v6(1 << 64 | 2, 1 << 64 | 1, 17, &ports(53, 5000));
        assert_eq!(flow_owner_hash(&req), flow_owner_hash(&rep));
    }

    proptest! {
        /// Both directions of any TCP or UDP flow, and of any later
        /// fragment pair, map to one owner for every worker count.
        #[test]
        fn both_directions_share_an_owner(
            a in any::<[u8; 4]>(), b in any::<[u8; 4]>(),
            sp in any::<u16>(), dp in any::<u16>(),
            tcp in any::<bool>(), frag_off in 0u16..0x2000, workers in 1usize..64,
        ) {
            let proto = if tcp { 6 } else { 17 };
            let there = v4(a, b, proto, frag_off, &ports(sp, dp), &[]);
            let back = v4(b, a, proto, frag_off, &ports(dp, sp), &[]);
            let (h1, h2) = (flow_owner_hash(&there).unwrap(), flow_owner_hash(&back).unwrap());
            prop_assert_eq!(h1, h2);
            prop_assert!(owner_of(h1, workers) < workers);
        }
    }
}
