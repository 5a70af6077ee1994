//! TCP reset generation for the ACL's `RejectTcpReset` (RFC 9293 §3.10.7.1,
//! "reset generation", as for a segment that arrives for a connection that
//! does not exist).
//!
//! Reads: the offending TCP segment as received (its IP header, TCP ports,
//! sequence and acknowledgement numbers, flags, data length), the FIB (to
//! route the reset back to the segment's source), the adjacency and
//! neighbour tables.
//! Writes: a new packet in a buffer of the worker's pool: Ethernet header
//! of the egress interface, an IP header from the segment's destination to
//! its source (the reset speaks for the host the segment was sent to), a
//! 20-byte TCP header with RST: if the segment had ACK, `SEQ = SEG.ACK`;
//! otherwise `SEQ = 0`, `ACK = SEG.SEQ + SEG.LEN` (SYN and FIN count one
//! each) with the ACK flag.
//! Next: the generated packet is listed in [`crate::BatchOutput::generated`]
//! with its egress port, counted in `tcp_resets_sent`. Nothing is sent (and
//! `tcp_resets_suppressed` counts it) in answer to a RST, a non-first
//! fragment or a truncated header, to a broadcast source, or when there is
//! no route or known neighbour back. Rate limiting is the ACL's business
//! (the firewall's `limit reject`).

use super::{ipv4::be32, ipv6, route_back_v4, route_back_v6, write_l2};
use crate::tables::{InterfaceId, LocalKind, Tables};
use crate::worker::{Generated, Worker};
use std::net::{Ipv4Addr, Ipv6Addr};

const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_ACK: u8 = 0x10;

/// The 20-byte TCP header of the reset for `seg` (the offending segment's
/// TCP header and data), without its checksum; `None` when no reset may be
/// sent (the segment is a RST or is cut short).
fn reset_header(seg: &[u8]) -> Option<[u8; 20]> {
    if seg.len() < 20 {
        return None;
    }
    let doff = usize::from(seg[12] >> 4) * 4;
    let flags = seg[13];
    if flags & TCP_RST != 0 || doff < 20 || seg.len() < doff {
        return None;
    }
    let mut h = [0u8; 20];
    h[0..2].copy_from_slice(&seg[2..4]);
    h[2..4].copy_from_slice(&seg[0..2]);
    if flags & TCP_ACK != 0 {
        h[4..8].copy_from_slice(&seg[8..12]);
        h[13] = TCP_RST;
    } else {
        let seq = be32(seg, 4);
        let len = (seg.len() - doff) as u32
            + u32::from(flags & TCP_SYN != 0)
            + u32::from(flags & TCP_FIN != 0);
        h[8..12].copy_from_slice(&seq.wrapping_add(len).to_be_bytes());
        h[13] = TCP_RST | TCP_ACK;
    }
    h[12] = 5 << 4;
    Some(h)
}

/// Sends a TCP RST in answer to `orig` (the offending IPv4 packet as
/// received, validated, protocol TCP).
pub(crate) fn reset_v4<F4, F6, A>(
    w: &mut Worker,
    tables: &Tables<F4, F6, A>,
    in_if: InterfaceId,
    orig: &[u8],
) where
    F4: fib::Lookup<u32>,
    F6: fib::Lookup<u128>,
{
    let ihl = usize::from(orig[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([orig[2], orig[3]])).min(orig.len());
    let frag_offset = u16::from_be_bytes([orig[6], orig[7]]) & 0x1fff;
    let (src, dst) = (be32(orig, 12), be32(orig, 16));
    let header = match orig.get(ihl..total) {
        Some(seg) if frag_offset == 0 && orig[9] == wire::ip_proto::TCP => reset_header(seg),
        _ => None,
    };
    let Some(mut tcp) = header else {
        w.counters.tcp_resets_suppressed += 1;
        return;
    };
    if tables.local4(src) == Some(LocalKind::Broadcast) {
        w.counters.tcp_resets_suppressed += 1;
        return;
    }
    let Ok((out_if, mac)) = route_back_v4(w, tables, src, in_if) else {
        w.counters.tcp_resets_suppressed += 1;
        return;
    };
    let pseudo = wire::checksum::pseudo_header_v4(
        Ipv4Addr::from(dst),
        Ipv4Addr::from(src),
        wire::ip_proto::TCP,
        20,
    );
    let c = wire::checksum::finish(wire::checksum::combine(&[
        pseudo,
        wire::checksum::sum(&tcp),
    ]));
    tcp[16..18].copy_from_slice(&c.to_be_bytes());
    w.ip_id = w.ip_id.wrapping_add(1);
    let ip_id = w.ip_id;
    let mut ip = [
        0x45,
        0,
        0,
        40,
        0,
        0,
        0,
        0,
        64,
        wire::ip_proto::TCP,
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
    ];
    ip[4..6].copy_from_slice(&ip_id.to_be_bytes());
    ip[12..16].copy_from_slice(&dst.to_be_bytes());
    ip[16..20].copy_from_slice(&src.to_be_bytes());
    let c = wire::checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    emit(w, tables, out_if, mac, wire::ethertype::IPV4, &ip, &tcp);
}

/// Sends a TCP RST in answer to `orig` (the offending IPv6 packet as
/// received, validated, upper layer TCP).
pub(crate) fn reset_v6<F4, F6, A>(
    w: &mut Worker,
    tables: &Tables<F4, F6, A>,
    in_if: InterfaceId,
    orig: &[u8],
) where
    F4: fib::Lookup<u32>,
    F6: fib::Lookup<u128>,
{
    let upper = ipv6::upper_layer(orig);
    let total = (40 + usize::from(u16::from_be_bytes([orig[4], orig[5]]))).min(orig.len());
    let header = match orig.get(upper.offset..total) {
        Some(seg) if !upper.non_first_fragment && upper.protocol == wire::ip_proto::TCP => {
            reset_header(seg)
        }
        _ => None,
    };
    let Some(mut tcp) = header else {
        w.counters.tcp_resets_suppressed += 1;
        return;
    };
    let (src, dst) = (ipv6::be128(orig, 8), ipv6::be128(orig, 24));
    let Ok((out_if, mac)) = route_back_v6(w, tables, src, in_if) else {
        w.counters.tcp_resets_suppressed += 1;
        return;
    };
    let pseudo = wire::checksum::pseudo_header_v6(
        &Ipv6Addr::from(dst),
        &Ipv6Addr::from(src),
        wire::ip_proto::TCP,
        20,
    );
    let c = wire::checksum::finish(wire::checksum::combine(&[
        pseudo,
        wire::checksum::sum(&tcp),
    ]));
    tcp[16..18].copy_from_slice(&c.to_be_bytes());
    let mut ip = [0u8; 40];
    ip[..8].copy_from_slice(&[0x60, 0, 0, 0, 0, 20, wire::ip_proto::TCP, 64]);
    ip[8..24].copy_from_slice(&dst.to_be_bytes());
    ip[24..40].copy_from_slice(&src.to_be_bytes());
    emit(w, tables, out_if, mac, wire::ethertype::IPV6, &ip, &tcp);
}

/// Queues `ip` + `tcp` behind the egress interface's Ethernet header.
fn emit<F4, F6, A>(
    w: &mut Worker,
    tables: &Tables<F4, F6, A>,
    out_if: InterfaceId,
    mac: wire::MacAddr,
    ethertype: u16,
    ip: &[u8],
    tcp: &[u8; 20],
) {
    let ifr = tables.if_rt[usize::from(out_if)];
    let Some((slot, buf)) = w.out.alloc_slot() else {
        w.counters.tcp_resets_suppressed += 1;
        return;
    };
    let l2 = write_l2(buf, &ifr, mac, ethertype);
    let len = l2 + ip.len() + tcp.len();
    if buf.len() < len {
        w.counters.tcp_resets_suppressed += 1;
        return;
    }
    buf[l2..l2 + ip.len()].copy_from_slice(ip);
    buf[l2 + ip.len()..len].copy_from_slice(tcp);
    w.out.generated.push(Generated {
        port: ifr.port,
        interface: out_if,
        slot,
        len: len as u32,
    });
    w.count_tx(out_if, len);
    w.counters.tcp_resets_sent += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(seq: u32, ack: u32, flags: u8, data: usize) -> Vec<u8> {
        let mut s = vec![0u8; 20 + data];
        s[0..2].copy_from_slice(&1234u16.to_be_bytes());
        s[2..4].copy_from_slice(&80u16.to_be_bytes());
        s[4..8].copy_from_slice(&seq.to_be_bytes());
        s[8..12].copy_from_slice(&ack.to_be_bytes());
        s[12] = 5 << 4;
        s[13] = flags;
        s
    }

    #[test]
    fn reset_follows_rfc_9293_3_10_7_1() {
        // No ACK: SEQ 0, ACK = SEG.SEQ + SEG.LEN (SYN counts one).
        let h = reset_header(&seg(0xffff_fff0, 0, TCP_SYN, 0)).unwrap();
        assert_eq!(&h[0..4], &[0, 80, 0x04, 0xd2]);
        assert_eq!(be32(&h, 4), 0);
        assert_eq!(be32(&h, 8), 0xffff_fff1);
        assert_eq!(h[13], TCP_RST | TCP_ACK);
        assert_eq!(h[12], 0x50);
        // Data and FIN, no ACK: the length counts both, wrapping.
        let h = reset_header(&seg(0xffff_fffe, 0, TCP_FIN, 5)).unwrap();
        assert_eq!(be32(&h, 8), 4);
        // ACK set: SEQ = SEG.ACK, RST alone.
        let h = reset_header(&seg(7, 0x1234_5678, TCP_ACK | 0x08, 10)).unwrap();
        assert_eq!(be32(&h, 4), 0x1234_5678);
        assert_eq!(be32(&h, 8), 0);
        assert_eq!(h[13], TCP_RST);
        // Never answer a RST; never read past a short header.
        assert!(reset_header(&seg(1, 2, TCP_RST | TCP_ACK, 0)).is_none());
        assert!(reset_header(&seg(1, 2, TCP_SYN, 0)[..19]).is_none());
        let mut long = seg(1, 0, TCP_SYN, 0);
        long[12] = 6 << 4; // claims 24 bytes of header in 20
        assert!(reset_header(&long).is_none());
    }
}
