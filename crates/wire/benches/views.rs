//! Per-packet costs of the wire views, beside etherparse doing the same work
//! in the same run: Ethernet + IPv4 header checks and checksum, TTL
//! decrement with the incremental checksum, IPv6 extension-header walk, and
//! the RFC 1071 sum over 20 and 1500 bytes.
//!
//!     cargo bench -p fastfwd-wire --bench views

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use wire::{EthernetFrame, Ipv4Packet, Ipv6Packet, checksum};

/// Ethernet + IPv4 + UDP, 64-byte frame (without FCS 60).
fn ipv4_frame() -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..];
    ip[..20].copy_from_slice(&[
        0x45, 0, 0, 46, 0x1c, 0x46, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 108, 198, 19, 0, 108,
    ]);
    let c = checksum::checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip[20..28].copy_from_slice(&[0x07, 0xd0, 0x07, 0xd0, 0, 26, 0, 0]);
    f
}

/// IPv6 with Hop-by-Hop, Destination Options and Fragment headers, then UDP.
fn ipv6_chain() -> Vec<u8> {
    let mut p = vec![0u8; 40 + 24 + 8];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&32u16.to_be_bytes());
    p[6] = 0;
    p[40] = 60;
    p[48] = 44;
    p[56] = 17;
    p
}

fn ours_ipv4(frame: &mut [u8]) -> Option<u8> {
    let f = EthernetFrame::new_checked(&*frame).ok()?;
    let l2 = f.l2_header().ok()?;
    let mut ip = Ipv4Packet::new_checked(&mut frame[l2.header_len..]).ok()?;
    if !ip.verify_checksum() {
        return None;
    }
    ip.decrement_ttl()
}

fn etherparse_ipv4(frame: &mut [u8]) -> Option<u8> {
    let (eth, _) = etherparse::Ethernet2Header::from_slice(frame).ok()?;
    if eth.ether_type != etherparse::EtherType::IPV4 {
        return None;
    }
    let (mut h, _) = etherparse::Ipv4Header::from_slice(&frame[14..]).ok()?;
    if h.calc_header_checksum() != h.header_checksum {
        return None;
    }
    h.time_to_live = h.time_to_live.checked_sub(1)?;
    h.header_checksum = h.calc_header_checksum();
    h.write(&mut &mut frame[14..34]).ok()?;
    Some(h.time_to_live)
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("ipv4_validate_decrement_ttl");
    let frame = ipv4_frame();
    g.bench_function("wire", |b| {
        let mut f = frame.clone();
        b.iter(|| {
            f[22] = 64;
            f[24..26].copy_from_slice(&frame[24..26]);
            black_box(ours_ipv4(black_box(&mut f)))
        })
    });
    g.bench_function("etherparse", |b| {
        let mut f = frame.clone();
        b.iter(|| {
            f[22] = 64;
            f[24..26].copy_from_slice(&frame[24..26]);
            black_box(etherparse_ipv4(black_box(&mut f)))
        })
    });
    g.finish();

    let mut g = c.benchmark_group("ipv6_ext_walk");
    let p = ipv6_chain();
    g.bench_function("wire", |b| {
        b.iter(|| {
            let v = Ipv6Packet::new_checked(black_box(&p[..])).unwrap();
            black_box(v.walk_ext_headers().map(|w| w.offset))
        })
    });
    g.bench_function("etherparse", |b| {
        b.iter(|| {
            let s = etherparse::Ipv6Slice::from_slice(black_box(&p[..])).unwrap();
            black_box(s.payload().payload.len())
        })
    });
    g.finish();

    let mut g = c.benchmark_group("checksum_sum");
    let data: Vec<u8> = (0..1500u32).map(|i| (i * 7) as u8).collect();
    g.bench_function("20_bytes", |b| {
        b.iter(|| checksum::sum(black_box(&data[..20])))
    });
    g.bench_function("1500_bytes", |b| {
        b.iter(|| checksum::sum(black_box(&data[..])))
    });
    g.finish();
}

criterion_group!(wire_views, benches);
criterion_main!(wire_views);
