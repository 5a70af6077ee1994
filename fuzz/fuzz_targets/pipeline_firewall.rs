//! Fuzz target: the forwarding pipeline with its firewall on. The router of
//! the `pipeline` target (untagged and VLAN interfaces, IPv4/IPv6 routes,
//! ECMP, a small MTU, an unresolved next hop) is built with an ACL stage,
//! `config::ConfigAcl` (a `firewall::PipelineFirewall` over the forward
//! chain), from one of two rule sets: a stateless one whose rules accept,
//! drop, reject with ICMP / ICMPv6 errors and reset TCP, and count; and a
//! stateful one (`ct state`, connection tracking, policy drop) that also
//! rejects and resets.
//!
//! Input: the first byte picks the port (bits 0-1), the rule set (bit 2),
//! whether the frames are split into two batches (bit 3) and the second
//! batch's port (bits 4-5), so a flow and its reply can meet the connection
//! table; the second byte the headroom and how the rest is cut into frames,
//! as in `pipeline`. Must never panic. After each batch: every frame has
//! exactly one verdict, only forwarded frames are queued for transmission,
//! and every frame received so far is counted exactly once (dropped,
//! punted or forwarded). The firewall's own counters must agree with the
//! pipeline's: each packet it classified is counted on exactly one
//! deciding slot (a rule or a policy), and the packets those slots deny
//! (drop and reject rules, a drop policy) are exactly the pipeline's
//! `acl_denied` drops; at most as many TCP resets are sent as packets hit
//! reject rules.
#![no_main]

use std::sync::{Arc, OnceLock};

use fib::RouteTable;
use fib::reference::{ReferenceFib4, ReferenceFib6};
use firewall::{Chain, FirewallWorker, InterfaceMap, Policy, RuleAction};
use pipeline::*;

#[path = "shared/lab_router.rs"]
mod lab_router;

type AclTables = Tables<ReferenceFib4, ReferenceFib6, config::ConfigAcl>;

const STATELESS: &str = r#"
limit reject 1000/second burst 8
chain forward {
    policy accept
    ip saddr 198.18.0.0/24 udp dport 9 drop
    oif eth1 tcp dport 23 reject with icmpx type admin-prohibited
    tcp dport 25 reject with tcp reset
    iif eth0 tcp flags syn / syn,ack tcp dport 8000-8080 reject
    ip6 daddr 2001:db8:100::/48 udp dport 53 reject with icmpv6 type admin-prohibited
    ip daddr 100.64.0.0/10 icmp type echo-request drop
    udp dport { 1000-2000, 3000 } counter reject
    ip protocol 47 reject with icmp type host-unreachable
    oif eth2 udp sport 7 drop
    counter
}
"#;

const STATEFUL: &str = r#"
ct size 1024
ct timeout udp-new 5
limit reject 50/second burst 4
chain forward {
    policy drop
    ct state established,related accept
    ct state invalid counter drop
    tcp dport 23 reject with tcp reset
    udp dport 9 reject
    iif eth0 ct state new accept
    iif eth1 tcp dport 22 ct state new accept
    ip6 nexthdr icmpv6 accept
    iif eth1.100 udp dport 53 accept
}
"#;

fn router(stateful: bool) -> &'static AclTables {
    static T: [OnceLock<AclTables>; 2] = [OnceLock::new(), OnceLock::new()];
    T[usize::from(stateful)].get_or_init(|| build(if stateful { STATEFUL } else { STATELESS }))
}

fn build(rules: &str) -> AclTables {
    let (mut b, mut f4, f6) = lab_router::lab_router();
    let nh = b.add_discard(Discard::Prohibit).unwrap();
    f4.insert("192.0.2.0/24".parse().unwrap(), nh);
    let ifaces: InterfaceMap = b
        .interfaces()
        .iter()
        .enumerate()
        .map(|(id, i)| (i.name.clone(), id as u16))
        .collect();
    let set = firewall::parse_rules(rules, "pipeline-fuzz.rules").expect("fuzz rules parse");
    let fw = firewall::Firewall::compile(&set, &ifaces).expect("fuzz rules compile");
    let acl: config::ConfigAcl = Some(firewall::PipelineFirewall::new(
        Arc::new(fw),
        config::FIREWALL_SEED,
    ));
    b.build_with_acl(f4, f6, acl)
}

/// Checks one batch's output and the counters so far (`seen` frames).
fn check(w: &Worker, n: usize, seen: u64) {
    let out = w.output();
    assert_eq!(out.verdicts().len(), n);
    for (_, idx) in out.tx_batches() {
        for &i in idx {
            assert!(matches!(
                out.verdicts()[usize::from(i)],
                Verdict::Forward { .. }
            ));
        }
    }
    let _ = out.generated().count();
    let c = w.counters();
    assert_eq!(c.rx_frames, seen);
    let forwarded = c.forwarded_ipv4 + c.forwarded_ipv6;
    assert_eq!(c.total_drops() + c.total_punts() + forwarded, seen);
    let fragmented = out
        .verdicts()
        .iter()
        .filter(|v| **v == Verdict::Consumed)
        .count() as u64;
    assert!(fragmented <= c.forwarded_ipv4);

    // The firewall's counters against the pipeline's.
    let Some(Some(fw)) = w.acl_state::<<config::ConfigAcl as Acl>::State>() else {
        // Nothing reached the ACL stage yet.
        assert_eq!(c.drop_count(DropReason::AclDenied), 0);
        return;
    };
    let fw: &FirewallWorker = fw;
    let rules = fw.firewall();
    let packets = &fw.counters().packets;
    let (mut decided, mut denied, mut rejected) = (0u64, 0u64, 0u64);
    for slot in 0..rules.counter_slots() as u32 {
        let p = packets[slot as usize];
        match rules.rule_action(slot) {
            Some(RuleAction::Count) => {}
            Some(RuleAction::Accept) => decided += p,
            Some(RuleAction::Drop) => {
                decided += p;
                denied += p;
            }
            Some(RuleAction::Reject(_)) => {
                decided += p;
                denied += p;
                rejected += p;
            }
            None => {
                decided += p;
                // Only the forward chain runs in the pipeline.
                if slot == rules.policy_slot(Chain::Input) {
                    assert_eq!(p, 0, "the input chain ran");
                } else if rules.forward_policy() == Policy::Drop {
                    denied += p;
                }
            }
        }
    }
    assert!(decided <= seen, "{decided} classified of {seen} frames");
    assert_eq!(
        denied,
        c.drop_count(DropReason::AclDenied),
        "the firewall's denials against the pipeline's acl_denied"
    );
    assert!(c.tcp_resets_sent <= rejected);
    if !rules.stateful() {
        assert!(fw.conntrack_stats().is_none());
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let port = PortId::from(data[0] & 3);
    let stateful = data[0] & 4 != 0;
    let two_batches = data[0] & 8 != 0;
    let port2 = PortId::from((data[0] >> 4) & 3);
    let headroom = usize::from(data[1] & 0x0f);
    let pieces = usize::from(data[1] >> 4) + 1;
    let body = &data[2..];
    let (mut bufs, lens) = lab_router::cut_frames(body, pieces, headroom);
    let split = if two_batches {
        bufs.len() / 2
    } else {
        bufs.len()
    };
    let (first, second) = bufs.split_at_mut(split);
    let cfg = WorkerConfig {
        pool_slots: 64,
        ..WorkerConfig::default()
    };
    let mut w = Worker::new(cfg);
    let tables = router(stateful);
    let mut seen = 0u64;
    let mut lens = lens.iter();
    for (batch, port, now) in [
        (first, port, 1_000_000_000u64),
        (second, port2, 3_000_000_000u64),
    ] {
        if batch.is_empty() {
            continue;
        }
        let mut frames: Vec<Frame> = batch
            .iter_mut()
            .zip(lens.by_ref())
            .map(|(b, &l)| Frame::new(b, headroom, l))
            .collect();
        let n = frames.len();
        seen += n as u64;
        w.process(tables, now, port, &mut frames);
        check(&w, n, seen);
    }
});
