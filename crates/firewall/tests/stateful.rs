//! Connection tracking through the worker: established flows pass while
//! new ones are blocked as configured, the table stays within its bound
//! under a flood of new flows, entries expire; reject rate limiting; rule
//! set swaps.

use firewall::{
    Action, Chain, Firewall, FirewallWorker, InterfaceMap, PacketKey, SharedFirewall, Verdict,
    parse_rules,
};
use std::sync::Arc;

const LAN: u16 = 0;
const WAN: u16 = 1;
const SEC: u64 = 1_000_000_000;
const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

const RULES: &str = r#"
ct size 1024
ct timeout udp-new 10
ct timeout udp-established 20
chain forward {
    policy drop
    ct state established,related accept
    iif lan0 ct state new tcp flags syn / syn,ack accept
    iif lan0 ct state new udp dport 53 accept
}
"#;

fn worker(text: &str) -> FirewallWorker {
    let set = parse_rules(text, "stateful.rules").unwrap();
    let ifaces: InterfaceMap = [("lan0", LAN), ("wan0", WAN)].into_iter().collect();
    FirewallWorker::new(Arc::new(Firewall::compile(&set, &ifaces).unwrap()), 42)
}

fn tcp(iif: u16, src: u32, sport: u16, dst: u32, dport: u16, flags: u8) -> PacketKey {
    PacketKey {
        src: src as u128,
        dst: dst as u128,
        sport,
        dport,
        iif,
        oif: if iif == LAN { WAN } else { LAN },
        len: 60,
        proto: 6,
        tcp_flags: flags,
        ..PacketKey::default()
    }
}

fn udp(iif: u16, src: u32, sport: u16, dst: u32, dport: u16) -> PacketKey {
    PacketKey {
        proto: 17,
        tcp_flags: 0,
        ..tcp(iif, src, sport, dst, dport, 0)
    }
}

fn one(w: &mut FirewallWorker, k: PacketKey, now: u64) -> Action {
    let mut keys = [k];
    let mut out = [Verdict::default()];
    w.process_batch(Chain::Forward, &mut keys, &mut out, now);
    out[0].action
}

const INSIDE: u32 = 0x0a00_0001;
const OUTSIDE: u32 = 0xc633_6401;

#[test]
fn established_flows_pass_new_ones_from_outside_do_not() {
    let mut w = worker(RULES);
    // Outbound handshake.
    assert_eq!(
        one(&mut w, tcp(LAN, INSIDE, 40000, OUTSIDE, 443, SYN), 0),
        Action::Accept
    );
    assert_eq!(
        one(&mut w, tcp(WAN, OUTSIDE, 443, INSIDE, 40000, SYN | ACK), 1),
        Action::Accept
    );
    assert_eq!(
        one(&mut w, tcp(LAN, INSIDE, 40000, OUTSIDE, 443, ACK), 2),
        Action::Accept
    );
    assert_eq!(
        one(&mut w, tcp(WAN, OUTSIDE, 443, INSIDE, 40000, ACK), 3),
        Action::Accept
    );
    // Inbound new connection: dropped by the policy.
    assert_eq!(
        one(&mut w, tcp(WAN, OUTSIDE, 5555, INSIDE, 22, SYN), 4),
        Action::Drop
    );
    // A mid-stream segment with no entry is invalid: dropped.
    assert_eq!(
        one(&mut w, tcp(WAN, OUTSIDE, 5556, INSIDE, 22, ACK), 5),
        Action::Drop
    );
    // A new connection from inside without SYN is not allowed either.
    assert_eq!(
        one(&mut w, tcp(LAN, INSIDE, 40001, OUTSIDE, 443, ACK), 6),
        Action::Drop
    );
    // The dropped inbound SYN created no entry: its "reply" is not established.
    assert_eq!(
        one(&mut w, tcp(LAN, INSIDE, 22, OUTSIDE, 5555, SYN | ACK), 7),
        Action::Drop
    );
    let s = w.conntrack_stats().unwrap();
    assert_eq!(s.occupancy, 1);
    assert_eq!(s.inserts, 1);
    // Counters: the established rule saw 3 packets, the syn rule 1, the policy 4.
    let fw = Arc::clone(w.firewall());
    let sum = fw.summary([w.counters()]);
    let fwd = &sum.chains[0];
    assert_eq!(fwd.rules[0].packets, 3);
    assert_eq!(fwd.rules[1].packets, 1);
    assert_eq!(fwd.rules[1].bytes, 60);
    assert_eq!(fwd.policy_packets, 4);
    let json = serde_json::to_string(&sum).unwrap();
    assert!(json.contains("\"policy_packets\":4"), "{json}");
}

#[test]
fn flood_of_new_flows_stays_within_bound_and_spares_established() {
    let mut w = worker(RULES);
    // A few established UDP flows first.
    for i in 0..20u16 {
        assert_eq!(
            one(&mut w, udp(LAN, INSIDE, 1000 + i, OUTSIDE, 53), 0),
            Action::Accept
        );
        assert_eq!(
            one(&mut w, udp(WAN, OUTSIDE, 53, INSIDE, 1000 + i), 0),
            Action::Accept
        );
    }
    let cap = w.conntrack_stats().unwrap().capacity;
    assert!((1024..4096).contains(&cap), "capacity {cap}");
    // Flood: 50,000 new flows in batches of 64.
    let mut keys = Vec::with_capacity(64);
    let mut out = [Verdict::default(); 64];
    for b in 0..(50_000 / 64) {
        keys.clear();
        for i in 0..64u32 {
            let n = b * 64 + i;
            keys.push(udp(LAN, INSIDE + 1 + n, (n % 60000) as u16, OUTSIDE, 53));
        }
        w.process_batch(Chain::Forward, &mut keys, &mut out, SEC);
        assert!(w.conntrack_stats().unwrap().occupancy <= cap);
    }
    let s = w.conntrack_stats().unwrap();
    assert!(s.occupancy <= s.capacity);
    assert!(s.evictions > 0, "{s:?}");
    // Established flows survived the flood.
    for i in 0..20u16 {
        assert_eq!(
            one(&mut w, udp(WAN, OUTSIDE, 53, INSIDE, 1000 + i), 2 * SEC),
            Action::Accept,
            "flow {i}"
        );
    }
}

#[test]
fn inserts_fail_when_buckets_hold_only_established_flows() {
    let mut w = worker(&RULES.replace("ct size 1024", "ct size 16"));
    let mut failures_seen = false;
    for i in 0..200u32 {
        let _ = one(&mut w, udp(LAN, INSIDE + i, 1000, OUTSIDE, 53), 0);
        let _ = one(&mut w, udp(WAN, OUTSIDE, 53, INSIDE + i, 1000), 0);
        let s = w.conntrack_stats().unwrap();
        assert!(s.occupancy <= s.capacity);
        failures_seen |= s.insert_failures > 0;
    }
    assert!(failures_seen);
}

#[test]
fn entries_expire() {
    let mut w = worker(RULES);
    assert_eq!(
        one(&mut w, udp(LAN, INSIDE, 999, OUTSIDE, 53), 0),
        Action::Accept
    );
    assert_eq!(
        one(&mut w, udp(WAN, OUTSIDE, 53, INSIDE, 999), SEC),
        Action::Accept
    );
    // Established timeout is 20 s from the last packet (1 s).
    assert_eq!(
        one(&mut w, udp(WAN, OUTSIDE, 53, INSIDE, 999), 20 * SEC),
        Action::Accept
    );
    // 20 s after that: gone, so the reply is new and dropped.
    assert_eq!(
        one(&mut w, udp(WAN, OUTSIDE, 53, INSIDE, 999), 41 * SEC),
        Action::Drop
    );
    // An unanswered flow expires after udp-new (10 s).
    assert_eq!(
        one(&mut w, udp(LAN, INSIDE, 998, OUTSIDE, 53), 50 * SEC),
        Action::Accept
    );
    assert_eq!(
        one(&mut w, udp(WAN, OUTSIDE, 53, INSIDE, 998), 61 * SEC),
        Action::Drop
    );
}

#[test]
fn rejects_are_rate_limited() {
    let text = "limit reject 10/second burst 5\nchain forward {\n tcp dport 23 reject\n udp dport 69 reject\n}";
    let mut w = worker(text);
    let mut keys: Vec<PacketKey> = (0..20)
        .map(|i| tcp(WAN, OUTSIDE, 1000 + i, INSIDE, 23, SYN))
        .collect();
    let mut out = vec![Verdict::default(); keys.len()];
    w.process_batch(Chain::Forward, &mut keys, &mut out, SEC);
    let rst = out
        .iter()
        .filter(|v| v.action == Action::RejectTcpReset)
        .count();
    assert_eq!(rst, 5);
    assert_eq!(w.stats().rejects_rate_limited, 15);
    assert!(
        out.iter()
            .all(|v| matches!(v.action, Action::RejectTcpReset | Action::Drop))
    );
    // Half a second later: 5 more tokens.
    let mut keys = vec![udp(WAN, OUTSIDE, 1, INSIDE, 69); 10];
    let mut out = vec![Verdict::default(); 10];
    w.process_batch(Chain::Forward, &mut keys, &mut out, SEC + SEC / 2);
    assert_eq!(
        out.iter()
            .filter(|v| v.action == Action::RejectIcmp(3))
            .count(),
        5
    );
}

#[test]
fn workers_pick_up_a_swapped_rule_set() {
    let ifaces = InterfaceMap::new();
    let compile =
        |t: &str| Arc::new(Firewall::compile(&parse_rules(t, "swap").unwrap(), &ifaces).unwrap());
    let shared = SharedFirewall::from(compile("chain forward {\n policy accept\n}"));
    let mut w = FirewallWorker::new(shared.load_full(), 1);
    let k = udp(WAN, OUTSIDE, 1, INSIDE, 69);
    w.sync(&shared);
    assert_eq!(one(&mut w, k, 0), Action::Accept);
    shared.store(compile("chain forward {\n udp dport 69 drop\n}"));
    w.sync(&shared);
    assert_eq!(one(&mut w, k, 0), Action::Drop);
    assert_eq!(w.stats().rule_set_swaps, 1);
    assert_eq!(w.counters().packets[0], 1);
}

/// In front of the XDP engine: a flow found established on a packet the
/// fast path did not know is handed over once; while the fast path holds
/// it, its packets come with the fast path's state and the table is not
/// consulted; the table's own copy lapses after the grace period, and a
/// flow the fast path refused stays here.
#[test]
fn flows_go_to_the_fast_path_once_established() {
    use firewall::CtHint;
    let mut w = worker(RULES);
    let hinted = |k: PacketKey, h: CtHint| PacketKey { ct_hint: h, ..k };
    let out = udp(LAN, INSIDE, 5000, OUTSIDE, 53);
    let back = udp(WAN, OUTSIDE, 53, INSIDE, 5000);
    assert_eq!(one(&mut w, hinted(out, CtHint::Absent), 0), Action::Accept);
    let mut given = Vec::new();
    w.hand_over(0, |f| {
        given.push(*f);
        true
    });
    assert!(given.is_empty(), "a new flow stays in the table");
    // The reply establishes it (twice in one batch: handed over once, in
    // its latest state).
    let mut keys = [hinted(back, CtHint::Absent), hinted(out, CtHint::Absent)];
    let mut v = [Verdict::default(); 2];
    w.process_batch(Chain::Forward, &mut keys, &mut v, SEC);
    assert!(v.iter().all(|v| v.action == Action::Accept));
    w.hand_over(SEC, |f| {
        given.push(*f);
        true
    });
    assert_eq!(given.len(), 1, "{given:?}");
    let f = given[0];
    assert_eq!((f.proto, f.closing), (17, false));
    assert_eq!(f.expires, 21 * SEC, "refreshed by the second packet");
    assert_eq!(
        (f.timeout_open, f.timeout_closing),
        (20 * SEC, 20 * SEC),
        "udp-established"
    );
    assert_eq!(w.stats().fast_path_handoffs, 1);
    // Much later the fast path still holds it: its word is taken.
    assert_eq!(
        one(&mut w, hinted(back, CtHint::Established), 100 * SEC),
        Action::Accept
    );
    assert_eq!(w.stats().fast_path_established, 1);
    // A packet the fast path does not hold any more (it expired there):
    // the table's copy lapsed after the grace period, so it is new.
    assert_eq!(
        one(&mut w, hinted(back, CtHint::Absent), 3 * SEC),
        Action::Drop,
        "new from outside"
    );
    // Within the grace period the copy still answers (a packet the fast
    // path handed over before it held the flow).
    let mut w = worker(RULES);
    one(&mut w, hinted(out, CtHint::Absent), 0);
    one(&mut w, hinted(back, CtHint::Absent), 0);
    w.hand_over(0, |_| true);
    assert_eq!(
        one(&mut w, hinted(back, CtHint::Absent), SEC / 2),
        Action::Accept
    );
    // A flow the fast path refused stays here, alive.
    let mut w = worker(RULES);
    one(&mut w, hinted(out, CtHint::Absent), 0);
    one(&mut w, hinted(back, CtHint::Absent), 0);
    w.hand_over(0, |_| false);
    assert_eq!(w.stats().fast_path_refused, 1);
    assert_eq!(
        one(&mut w, hinted(back, CtHint::Absent), 15 * SEC),
        Action::Accept
    );
}
