//! Decoder drivers shared by the fuzz targets (`fuzz/`) and the
//! never-panics property tests: each takes arbitrary bytes, runs
//! `new_checked`, every accessor, and the repr parse / emit / re-parse round
//! trip, asserting the invariants the views promise. Built only for tests
//! and with the `fuzzing` feature.

use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::*;

const SRC4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 108);
const DST4: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 108);
const SRC6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0x108);
const DST6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0x8000, 0, 0, 0, 0x108);

/// Ethernet header, VLAN walk, and whatever the EtherType says follows.
pub fn ethernet(data: &[u8]) {
    let Ok(f) = EthernetFrame::new_checked(data) else {
        assert!(data.len() < ethernet::HEADER_LEN);
        return;
    };
    black_box((f.dst_addr(), f.src_addr(), f.ethertype(), f.payload().len()));
    black_box((f.dst_addr().is_multicast(), f.src_addr().to_string()));
    if let Ok(tag) = VlanTag::new_checked(f.payload()) {
        black_box((tag.tci(), tag.pcp(), tag.dei(), tag.vid(), tag.ethertype()));
        black_box(tag.payload().len());
    }
    let Ok(h) = f.l2_header() else { return };
    assert!(h.header_len <= data.len());
    assert_eq!(
        h.header_len,
        ethernet::HEADER_LEN + h.tag_count() * ethernet::VLAN_TAG_LEN
    );
    black_box(h.vid());
    if let Ok(r) = EthernetRepr::parse(&f) {
        let n = r.buffer_len();
        assert_eq!(n, h.header_len);
        let mut out = [0u8; 22];
        r.emit(&mut EthernetFrame::new_unchecked(&mut out[..n]))
            .unwrap();
        assert_eq!(&out[..n], &data[..n]);
        let back = EthernetRepr::parse(&EthernetFrame::new_checked(&out[..n]).unwrap()).unwrap();
        assert_eq!(back, r);
    }
    let rest = &data[h.header_len..];
    match h.ethertype {
        ethertype::IPV4 => ipv4(rest),
        ethertype::IPV6 => ipv6(rest),
        ethertype::ARP => arp(rest),
        _ => {}
    }
    // Setters on a copy keep the frame readable.
    let mut copy = data.to_vec();
    let mut m = EthernetFrame::new_checked(&mut copy[..]).unwrap();
    m.set_dst_addr(MacAddr::BROADCAST);
    m.set_src_addr(MacAddr::ZERO);
    assert!(m.dst_addr().is_broadcast());
    assert_eq!(m.l2_header(), f.l2_header());
}

/// ARP view and Ethernet / IPv4 repr round trip.
pub fn arp(data: &[u8]) {
    let Ok(p) = ArpPacket::new_checked(data) else {
        return;
    };
    black_box((
        p.hardware_type(),
        p.protocol_type(),
        p.operation(),
        p.is_ethernet_ipv4(),
    ));
    black_box((p.sender_hardware_addr(), p.sender_protocol_addr()));
    black_box((p.target_hardware_addr(), p.target_protocol_addr()));
    if let Ok(r) = ArpRepr::parse(&p) {
        let mut out = [0u8; arp::ETH_IPV4_LEN];
        r.emit(&mut ArpPacket::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(&out[..], &data[..arp::ETH_IPV4_LEN]);
        assert_eq!(
            ArpRepr::parse(&ArpPacket::new_checked(&out[..]).unwrap()),
            Ok(r)
        );
    }
}

/// IPv4 header, options, checksum, TTL decrement, repr round trip, and the
/// transport header when this is a first fragment.
pub fn ipv4(data: &[u8]) {
    let Ok(p) = Ipv4Packet::new_checked(data) else {
        return;
    };
    black_box((
        p.version(),
        p.header_len(),
        p.dscp(),
        p.ecn(),
        p.total_len(),
        p.ident(),
    ));
    black_box((
        p.dont_frag(),
        p.more_frags(),
        p.frag_offset(),
        p.is_fragment(),
    ));
    black_box((
        p.ttl(),
        p.protocol(),
        p.checksum(),
        p.src_addr(),
        p.dst_addr(),
    ));
    black_box((p.options(), p.payload(), p.packet(), p.pseudo_header_sum()));
    assert_eq!(p.header_len() + p.payload().len(), p.total_len());
    for opt in p.option_iter() {
        match opt {
            Ok(o) => assert!(o.data.len() <= p.options().len()),
            Err(at) => assert!(at < p.options().len()),
        }
    }
    let mut copied = [0u8; 40];
    let n = ipv4::copy_options_for_fragment(p.options(), &mut copied);
    assert!(n <= p.options().len() && n.is_multiple_of(4));
    let valid = p.verify_checksum();
    let mut copy = p.packet().to_vec();
    let mut m = Ipv4Packet::new_checked(&mut copy[..]).unwrap();
    if let Some(ttl) = m.decrement_ttl() {
        assert_eq!(ttl, p.ttl() - 1);
        assert_eq!(m.verify_checksum(), valid);
    }
    match Ipv4Repr::parse(&p) {
        Ok(r) => {
            assert!(valid);
            ipv4_repr_round_trip(&r);
        }
        Err(e) => assert!(!valid && e == Error::BadChecksum),
    }
    // The repr path again with the checksum made valid, so that fuzzed
    // headers reach it too.
    let mut m = Ipv4Packet::new_checked(&mut copy[..]).unwrap();
    m.fill_checksum();
    ipv4_repr_round_trip(&Ipv4Repr::parse(&m).unwrap());
    if p.frag_offset() == 0 {
        transport(p.protocol(), p.payload(), true);
    }
}

fn ipv4_repr_round_trip(r: &Ipv4Repr) {
    let mut out = vec![0u8; r.total_len()];
    r.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]))
        .unwrap();
    let back = Ipv4Packet::new_checked(&out[..]).unwrap();
    assert!(back.verify_checksum());
    assert_eq!(Ipv4Repr::parse(&back).as_ref(), Ok(r));
}

/// IPv6 header, extension-header walk, repr round trip, transport header.
pub fn ipv6(data: &[u8]) {
    let Ok(p) = Ipv6Packet::new_checked(data) else {
        return;
    };
    black_box((
        p.version(),
        p.traffic_class(),
        p.flow_label(),
        p.payload_len(),
    ));
    black_box((p.next_header(), p.hop_limit(), p.src_addr(), p.dst_addr()));
    black_box((p.payload(), p.packet()));
    let r = Ipv6Repr::parse(&p).unwrap();
    let mut out = [0u8; ipv6::HEADER_LEN];
    r.emit(&mut Ipv6Packet::new_unchecked(&mut out[..]))
        .unwrap();
    assert_eq!(&out[..], &data[..ipv6::HEADER_LEN]);
    let mut copy = p.packet().to_vec();
    let mut m = Ipv6Packet::new_checked(&mut copy[..]).unwrap();
    assert_eq!(m.decrement_hop_limit(), p.hop_limit().checked_sub(1));
    if let Ok(w) = p.walk_ext_headers() {
        assert!(w.offset >= ipv6::HEADER_LEN && w.offset <= p.total_len());
        if w.has_transport() {
            let l4 = &p.packet()[w.offset..];
            black_box(p.pseudo_header_sum(w.protocol, l4.len()));
            transport(w.protocol, l4, false);
        }
    }
}

fn transport(protocol: u8, l4: &[u8], v4: bool) {
    match protocol {
        ip_proto::UDP => udp(l4),
        ip_proto::TCP => tcp(l4),
        ip_proto::ICMP if v4 => icmpv4(l4),
        ip_proto::ICMPV6 if !v4 => icmpv6(l4),
        _ => {}
    }
}

/// UDP header, checksums, repr round trip.
pub fn udp(data: &[u8]) {
    let Ok(p) = UdpPacket::new_checked(data) else {
        return;
    };
    black_box((
        p.src_port(),
        p.dst_port(),
        p.len(),
        p.is_empty(),
        p.checksum(),
    ));
    black_box((p.payload(), p.verify_checksum_v4(SRC4, DST4)));
    black_box(p.verify_checksum_v6(&SRC6, &DST6));
    let r = UdpRepr::parse(&p).unwrap();
    let mut out = p.datagram().to_vec();
    let mut m = UdpPacket::new_unchecked(&mut out[..]);
    r.emit(&mut m).unwrap();
    m.fill_checksum_v4(SRC4, DST4);
    assert!(m.verify_checksum_v4(SRC4, DST4));
    m.fill_checksum_v6(&SRC6, &DST6);
    assert!(m.verify_checksum_v6(&SRC6, &DST6));
    assert_eq!(
        UdpRepr::parse(&UdpPacket::new_checked(&out[..]).unwrap()),
        Ok(r)
    );
}

/// TCP header, options, checksums, repr round trip.
pub fn tcp(data: &[u8]) {
    let Ok(p) = TcpPacket::new_checked(data) else {
        return;
    };
    black_box((p.src_port(), p.dst_port(), p.seq_number(), p.ack_number()));
    black_box((
        p.header_len(),
        p.flags(),
        p.syn(),
        p.ack(),
        p.fin(),
        p.rst(),
    ));
    black_box((
        p.window(),
        p.checksum(),
        p.urgent(),
        p.options(),
        p.payload(),
    ));
    black_box(p.verify_checksum_v4(SRC4, DST4));
    black_box(p.verify_checksum_v6(&SRC6, &DST6));
    assert_eq!(p.header_len() + p.payload().len(), data.len());
    let r = TcpRepr::parse(&p).unwrap();
    let mut out = vec![0u8; r.buffer_len() + r.payload_len];
    let mut m = TcpPacket::new_unchecked(&mut out[..]);
    r.emit(&mut m).unwrap();
    m.payload_mut().copy_from_slice(p.payload());
    if out.len() <= usize::from(u16::MAX) {
        let mut m = TcpPacket::new_unchecked(&mut out[..]);
        m.fill_checksum_v4(SRC4, DST4);
        assert!(m.verify_checksum_v4(SRC4, DST4));
    }
    assert_eq!(
        TcpRepr::parse(&TcpPacket::new_checked(&out[..]).unwrap()),
        Ok(r)
    );
}

/// ICMPv4 view and repr round trip.
pub fn icmpv4(data: &[u8]) {
    let Ok(p) = Icmpv4Packet::new_checked(data) else {
        return;
    };
    black_box((
        p.msg_type(),
        p.msg_type().is_error(),
        p.msg_code(),
        p.checksum(),
    ));
    black_box((
        p.echo_ident(),
        p.echo_seq_no(),
        p.next_hop_mtu(),
        p.pointer(),
    ));
    black_box((p.gateway(), p.data(), p.verify_checksum()));
    let valid = p.verify_checksum();
    if let Ok(r) = Icmpv4Repr::parse(&p) {
        assert!(valid);
        icmpv4_repr_round_trip(&r, data.len());
    }
    let mut copy = data.to_vec();
    let mut m = Icmpv4Packet::new_checked(&mut copy[..]).unwrap();
    m.fill_checksum();
    let m = Icmpv4Packet::new_checked(&copy[..]).unwrap();
    assert!(m.verify_checksum());
    if let Ok(r) = Icmpv4Repr::parse(&m) {
        icmpv4_repr_round_trip(&r, data.len());
    }
}

fn icmpv4_repr_round_trip(r: &Icmpv4Repr<'_>, len: usize) {
    assert_eq!(r.buffer_len(), len);
    let mut out = vec![0u8; r.buffer_len()];
    r.emit(&mut Icmpv4Packet::new_unchecked(&mut out[..]))
        .unwrap();
    let back = Icmpv4Packet::new_checked(&out[..]).unwrap();
    assert!(back.verify_checksum());
    assert_eq!(Icmpv4Repr::parse(&back).as_ref(), Ok(r));
    // The invoking packet of an error is a (truncated) IPv4 packet.
    if let Icmpv4Repr::DestUnreachable { invoking, .. }
    | Icmpv4Repr::TimeExceeded { invoking, .. }
    | Icmpv4Repr::ParamProblem { invoking, .. } = *r
    {
        black_box(Ipv4Packet::new_checked(invoking).is_ok());
    }
}

/// ICMPv6 view, NDP body and options, repr round trip.
pub fn icmpv6(data: &[u8]) {
    let Ok(p) = Icmpv6Packet::new_checked(data) else {
        return;
    };
    black_box((
        p.msg_type(),
        p.msg_type().is_error(),
        p.msg_code(),
        p.checksum(),
    ));
    black_box((
        p.rest_of_header(),
        p.mtu(),
        p.pointer(),
        p.echo_ident(),
        p.echo_seq_no(),
    ));
    black_box((p.data(), p.target_addr(), p.verify_checksum(&SRC6, &DST6)));
    for opt in p.ndp_options() {
        black_box(opt.ok());
    }
    if let Ok(n) = NdpRepr::parse(&p) {
        let mut out = vec![0u8; n.buffer_len()];
        let mut m = Icmpv6Packet::new_unchecked(&mut out[..]);
        n.emit(&mut m).unwrap();
        m.fill_checksum(&SRC6, &DST6);
        let back = Icmpv6Packet::new_checked(&out[..]).unwrap();
        assert!(back.verify_checksum(&SRC6, &DST6));
        assert_eq!(NdpRepr::parse(&back), Ok(n));
    }
    if let Ok(r) = Icmpv6Repr::parse(&SRC6, &DST6, &p) {
        icmpv6_repr_round_trip(&r);
    }
    // Again with a valid checksum so that fuzzed messages reach the repr.
    let mut copy = data.to_vec();
    Icmpv6Packet::new_checked(&mut copy[..])
        .unwrap()
        .fill_checksum(&SRC6, &DST6);
    let m = Icmpv6Packet::new_checked(&copy[..]).unwrap();
    assert!(m.verify_checksum(&SRC6, &DST6));
    if let Ok(r) = Icmpv6Repr::parse(&SRC6, &DST6, &m) {
        icmpv6_repr_round_trip(&r);
    }
}

/// A filter text (`filter::Filter`, the bytes up to the first newline)
/// evaluated over a frame (the bytes after it). Asserted: a refused text
/// names a place inside it; an accepted one keeps its text, and its
/// negation, conjunction and disjunction with itself answer as boolean
/// logic says over the same frame.
pub fn filter(data: &[u8]) {
    let (text, frame) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &data[data.len()..]),
    };
    let text = String::from_utf8_lossy(text);
    let f = match filter::Filter::parse(&text) {
        Ok(f) => f,
        Err(e) => {
            assert!(e.at <= text.chars().count(), "{e}");
            assert!(text.starts_with(&e.text), "{e}");
            return;
        }
    };
    assert_eq!(f.text(), text);
    let m = f.matches(frame);
    // A derived form may only be refused for a limit (it is longer and
    // one level deeper).
    let derived = |form: &str| match filter::Filter::parse(&form.replace("F", &format!("({text})")))
    {
        Ok(d) => Some(d.matches(frame)),
        Err(e) if e.what.contains("at most") || e.what.contains("nested more than") => None,
        Err(e) => panic!("{form} over an accepted filter: {e}"),
    };
    if let Some(d) = derived("not F") {
        assert_eq!(d, !m, "{text}");
    }
    if let Some(d) = derived("F and F") {
        assert_eq!(d, m, "{text}");
    }
    assert!(derived("F or not F").unwrap_or(true), "{text}");
}

fn icmpv6_repr_round_trip(r: &Icmpv6Repr<'_>) {
    let mut out = vec![0u8; r.buffer_len()];
    r.emit(&SRC6, &DST6, &mut Icmpv6Packet::new_unchecked(&mut out[..]))
        .unwrap();
    let back = Icmpv6Packet::new_checked(&out[..]).unwrap();
    assert!(back.verify_checksum(&SRC6, &DST6));
    assert_eq!(Icmpv6Repr::parse(&SRC6, &DST6, &back).as_ref(), Ok(r));
}

#[cfg(test)]
mod tests {
    use crate::*;
    use proptest::prelude::*;

    /// The fuzz seeds are valid packets of their target's format, and the
    /// drivers accept them.
    #[test]
    fn fuzz_seeds_are_valid() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds");
        type Driver = fn(&[u8]);
        type Check = fn(&[u8]) -> bool;
        let targets: [(&str, Driver, Check); 9] = [
            ("ethernet", super::ethernet, |b| {
                EthernetFrame::new_checked(b)
                    .and_then(|f| EthernetRepr::parse(&f))
                    .is_ok()
            }),
            ("arp", super::arp, |b| {
                ArpPacket::new_checked(b)
                    .and_then(|p| ArpRepr::parse(&p))
                    .is_ok()
            }),
            ("ipv4", super::ipv4, |b| {
                Ipv4Packet::new_checked(b)
                    .and_then(|p| Ipv4Repr::parse(&p))
                    .is_ok()
            }),
            ("ipv6", super::ipv6, |b| {
                Ipv6Packet::new_checked(b)
                    .and_then(|p| p.walk_ext_headers())
                    .is_ok()
            }),
            ("udp", super::udp, |b| UdpPacket::new_checked(b).is_ok()),
            ("tcp", super::tcp, |b| TcpPacket::new_checked(b).is_ok()),
            ("icmpv4", super::icmpv4, |b| {
                Icmpv4Packet::new_checked(b).map(|p| p.verify_checksum()) == Ok(true)
            }),
            ("icmpv6", super::icmpv6, |b| {
                Icmpv6Packet::new_checked(b).is_ok()
            }),
            ("filter", super::filter, |b| {
                let text = b.split(|&c| c == b'\n').next().unwrap_or_default();
                std::str::from_utf8(text).is_ok_and(|t| filter::Filter::parse(t).is_ok())
            }),
        ];
        let mut seen = 0;
        for (name, drive, valid) in targets {
            let Ok(entries) = std::fs::read_dir(dir.join(name)) else {
                panic!("no seeds for {name} in {}", dir.display())
            };
            for e in entries {
                let path = e.unwrap().path();
                let bytes = std::fs::read(&path).unwrap();
                assert!(
                    valid(&bytes),
                    "{} is not a valid {name} packet",
                    path.display()
                );
                drive(&bytes);
                seen += 1;
            }
        }
        assert!(seen >= 30, "only {seen} seeds");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// No view panics on arbitrary bytes of arbitrary length, and every
        /// repr that parses re-emits to an equal repr.
        #[test]
        fn decoders_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            super::ethernet(&data);
            super::arp(&data);
            super::ipv4(&data);
            super::ipv6(&data);
            super::udp(&data);
            super::tcp(&data);
            super::icmpv4(&data);
            super::icmpv6(&data);
        }

        /// The same with plausible headers, so the checks past the first
        /// byte are reached: version nibbles and lengths patched in.
        #[test]
        fn decoders_never_panic_near_valid(
            mut data in proptest::collection::vec(any::<u8>(), 40..300),
            ihl in 5u8..16,
        ) {
            let n = data.len() as u16;
            data[0] = 0x40 | ihl;
            data[2..4].copy_from_slice(&n.to_be_bytes());
            super::ipv4(&data);
            data[0] = 0x60;
            data[4..6].copy_from_slice(&(n - 40).to_be_bytes());
            super::ipv6(&data);
            data[4..6].copy_from_slice(&n.to_be_bytes());
            super::udp(&data);
            super::arp(&data);
        }
    }
}
