//! Packet traces as `fastfwd trace show` and `fastfwd replay --trace` give
//! them: a worker's [`pipeline::TraceRecord`] put in words with the names
//! the tables give (interfaces, ports, rules), and the text form.

use control::protocol::reply::{TracePacket, TraceRule, TraceStep};
use pipeline::{AclAction, Stage, Tables, TraceRecord, Verdict};
use std::fmt::Write;
use std::net::IpAddr;

/// `record`, traced by `worker`, in words. `route_of` names the route an
/// address matched (the daemon's or replay's router), `firewall` the rule
/// set whose slots the ACL decisions name.
pub fn describe<F4, F6, A>(
    worker: usize,
    record: &TraceRecord,
    tables: &Tables<F4, F6, A>,
    ports: &[String],
    route_of: &dyn Fn(IpAddr) -> Option<String>,
    firewall: Option<&firewall::Firewall>,
) -> TracePacket {
    let iface = |i: u16| {
        tables
            .interfaces()
            .get(usize::from(i))
            .map_or_else(|| format!("interface {i}"), |x| x.name.clone())
    };
    let r = record;
    let mut stages = Vec::new();
    let step = |stages: &mut Vec<TraceStep>, s: Stage, d: String| {
        stages.push(TraceStep {
            stage: s.name().into(),
            decision: d,
        })
    };
    let finish = verdict_words(&r.verdict, &iface);
    // Input.
    match (r.destination, r.in_if) {
        (Some(d), Some(i)) => step(
            &mut stages,
            Stage::Input,
            format!("{} valid, to the route lookup for {d}", iface(i)),
        ),
        _ => step(&mut stages, Stage::Input, finish.clone()),
    }
    // Lookup and next hop.
    let mut route = None;
    let mut next_hop = None;
    if let Some(set) = r.next_hop_set {
        route = r.destination.and_then(route_of);
        let found = match (set, &route) {
            (None, _) => "no route".to_string(),
            (Some(id), Some(rt)) => format!("{rt} (next-hop set {id})"),
            (Some(id), None) => format!("next-hop set {id}"),
        };
        step(&mut stages, Stage::Lookup, found);
        match r.hop {
            Some((out, gw)) => {
                let h = match gw {
                    Some(g) => format!("{} via {g}", iface(out)),
                    None => format!("{} on-link", iface(out)),
                };
                step(&mut stages, Stage::NextHop, h.clone());
                next_hop = Some(h);
            }
            None => step(&mut stages, Stage::NextHop, finish.clone()),
        }
    }
    // ACL.
    let mut rule = None;
    if let Some((action, slot)) = r.acl {
        let info = slot.map(|slot| rule_of(slot, firewall));
        let what = match action {
            AclAction::Accept => "accept".to_string(),
            AclAction::Deny => "drop".to_string(),
            AclAction::RejectUnreachable(c) => format!("reject (unreachable, code {c})"),
            AclAction::RejectTcpReset => "reject (TCP reset)".to_string(),
        };
        let by = match &info {
            Some(TraceRule {
                line: Some(l),
                text,
                ..
            }) => format!(" by line {l}: {text}"),
            Some(TraceRule { text, .. }) => format!(" by the chain's {text}"),
            None => String::new(),
        };
        step(&mut stages, Stage::Acl, format!("{what}{by}"));
        rule = info;
    }
    if r.decided_by == Stage::Forward {
        step(&mut stages, Stage::Forward, finish);
    }
    let (verdict, detail) = match r.verdict {
        Verdict::Forward { interface, .. } => ("forward", Some(iface(interface))),
        Verdict::Drop(d) => ("drop", Some(d.name().to_string())),
        Verdict::Punt(p) => ("punt", Some(p.name().to_string())),
        Verdict::Consumed => ("consumed", None),
    };
    TracePacket {
        worker,
        seq: r.seq,
        port: ports
            .get(usize::from(r.port))
            .cloned()
            .unwrap_or_else(|| format!("port {}", r.port)),
        length: r.len,
        summary: summary(r.head()),
        stages,
        route,
        next_hop,
        rule,
        verdict: verdict.into(),
        detail,
    }
}

fn verdict_words(v: &Verdict, iface: &dyn Fn(u16) -> String) -> String {
    match *v {
        Verdict::Forward { interface, .. } => format!("transmitted on {}", iface(interface)),
        Verdict::Drop(d) => format!("dropped: {}", d.name()),
        Verdict::Punt(p) => format!("to the host: {}", p.name()),
        Verdict::Consumed => "replaced by the packets it caused (fragments)".into(),
    }
}

fn rule_of(slot: u32, fw: Option<&firewall::Firewall>) -> TraceRule {
    let info = fw.and_then(|f| f.rule_info(slot));
    match info {
        Some(i) => TraceRule {
            slot,
            line: Some(i.line),
            text: i.text.clone(),
            action: i.action.to_string(),
        },
        None => {
            let policy = fw.map(|f| f.forward_policy());
            let word = match policy {
                Some(firewall::Policy::Drop) => "drop",
                _ => "accept",
            };
            TraceRule {
                slot,
                line: None,
                text: format!("policy {word}"),
                action: word.into(),
            }
        }
    }
}

/// The headers of an Ethernet frame in one line: `IPv4 198.18.0.108 >
/// 198.19.0.108 UDP 40000 > 9000`, `ARP`, `802.1Q 100 IPv6 ... TCP ...`.
pub fn summary(frame: &[u8]) -> String {
    let be16 = |b: &[u8], at: usize| -> Option<u16> {
        Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
    };
    let mut out = String::new();
    let Some(mut et) = be16(frame, 12) else {
        return format!("{} bytes, shorter than an Ethernet header", frame.len());
    };
    let mut l3 = 14;
    while et == 0x8100 || et == 0x88a8 {
        let (Some(tci), Some(next)) = (be16(frame, l3), be16(frame, l3 + 2)) else {
            return format!("{out}truncated VLAN tag");
        };
        let _ = write!(out, "802.1Q {} ", tci & 0x0fff);
        et = next;
        l3 += 4;
    }
    let h = frame.get(l3..).unwrap_or(&[]);
    let (src, dst, proto, l4): (IpAddr, IpAddr, u8, usize) = match et {
        0x0800 if h.len() >= 20 => (
            IpAddr::from([h[12], h[13], h[14], h[15]]),
            IpAddr::from([h[16], h[17], h[18], h[19]]),
            h[9],
            usize::from(h[0] & 0x0f) * 4,
        ),
        0x86dd if h.len() >= 40 => {
            let a = |at: usize| {
                let mut b = [0u8; 16];
                b.copy_from_slice(&h[at..at + 16]);
                IpAddr::from(b)
            };
            (a(8), a(24), h[6], 40)
        }
        0x0806 => return format!("{out}ARP"),
        0x0800 => return format!("{out}IPv4, truncated"),
        0x86dd => return format!("{out}IPv6, truncated"),
        other => return format!("{out}EtherType 0x{other:04x}"),
    };
    let fam = if et == 0x0800 { "IPv4" } else { "IPv6" };
    let _ = write!(out, "{fam} {src} > {dst}");
    let p = h.get(l4..).unwrap_or(&[]);
    match (proto, be16(p, 0), be16(p, 2)) {
        (6, Some(s), Some(d)) => {
            let _ = write!(out, " TCP {s} > {d}");
        }
        (17, Some(s), Some(d)) => {
            let _ = write!(out, " UDP {s} > {d}");
        }
        (1 | 58, Some(td), _) => {
            let _ = write!(
                out,
                " {} type {} code {}",
                if proto == 1 { "ICMP" } else { "ICMPv6" },
                td >> 8,
                td & 0xff
            );
        }
        (p, _, _) => {
            let _ = write!(out, " protocol {p}");
        }
    }
    out
}

/// The text form of a trace (`fastfwd trace show`, `replay --trace`).
pub fn text(packets: &[TracePacket]) -> String {
    let mut out = String::new();
    for p in packets {
        let _ = writeln!(
            out,
            "packet {} (worker {}) on {}, {} bytes: {}",
            p.seq, p.worker, p.port, p.length, p.summary
        );
        for s in &p.stages {
            let _ = writeln!(out, "  {:<9} {}", s.stage, s.decision);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_decode_the_headers() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x64, 0x08, 0x00]);
        f.extend_from_slice(&[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&[198, 18, 0, 108, 198, 19, 0, 108]);
        f.extend_from_slice(&[0x9c, 0x40, 0x23, 0x28, 0, 8, 0, 0]);
        assert_eq!(
            summary(&f),
            "802.1Q 100 IPv4 198.18.0.108 > 198.19.0.108 UDP 40000 > 9000"
        );
        assert_eq!(summary(&f[..20]), "802.1Q 100 IPv4, truncated");
        assert_eq!(summary(&[0; 5]), "5 bytes, shorter than an Ethernet header");
    }
}
