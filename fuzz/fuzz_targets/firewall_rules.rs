//! Fuzz target: the firewall's rule language (`firewall::parse_rules`) on
//! arbitrary text, and the classifier compiled from whatever parses.
//!
//! Must never panic. A rule set that parses is compiled
//! (`Firewall::compile_with`, with the default table budget or a tiny one
//! that forces the bit-vector stage; an address trie over its budget is
//! the only accepted refusal) against four interface names, and classifies
//! packet keys built from the rules' own interval ends (each end, and one
//! past it on both sides) and from a generator seeded by the input, in
//! both chains and both families. Asserted against the linear first-match
//! reference (`LinearFirewall`): the same rule or policy slot for every key,
//! the same per-rule packet and byte counters (counting rules included),
//! and an action that follows the matched rule (accept accepts, drop drops,
//! reject never accepts, answers an IPv4 packet with ICMP and an IPv6 one
//! with ICMPv6, resets only TCP, and never answers an ICMP error or a RST;
//! the chain policy when nothing matched). The same keys then go through a
//! `FirewallWorker` (connection tracking on when a rule uses `ct state`),
//! twice, later the second time: its verdicts must match the reference on
//! the keys as tracking left them (their `ct` state), rejects aside that the
//! rate limit turned into drops. The summary and its text form are built.
#![no_main]

use std::collections::BTreeSet;
use std::sync::Arc;

use firewall::rulegen::SplitMix;
use firewall::rules::{FIELD_COUNT, Field};
use firewall::{
    Action, Chain, CompileError, CompileOptions, CtState, Family, Firewall, FirewallWorker,
    IFACE_NONE, InterfaceMap, LinearFirewall, PacketKey, Policy, RuleAction, RuleCounters, RuleSet,
    Verdict, flatten,
};

const IFACES: [(&str, u16); 4] = [("eth0", 0), ("eth1", 1), ("lan0", 2), ("wan0", 3)];
const CT: [CtState; 5] = [
    CtState::Invalid,
    CtState::New,
    CtState::Established,
    CtState::Related,
    CtState::Untracked,
];
const KEYS: usize = 96;

fn fnv(data: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in data {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Per family, per field: the values where some rule's match changes.
fn boundaries(set: &RuleSet, ifaces: &InterfaceMap) -> [[Vec<u128>; FIELD_COUNT]; 2] {
    let mut out: [[BTreeSet<u128>; FIELD_COUNT]; 2] = Default::default();
    for (fi, fam) in [Family::V4, Family::V6].into_iter().enumerate() {
        for chain in Chain::ALL {
            for r in flatten(set, chain, fam, ifaces) {
                for f in Field::ALL {
                    let Some(iv) = &r.fields[f as usize] else {
                        continue;
                    };
                    let max = f.max_value(fam);
                    let vals = &mut out[fi][f as usize];
                    for &(lo, hi) in iv.iter().take(64) {
                        vals.extend([lo, hi, lo.saturating_sub(1), hi.saturating_add(1).min(max)]);
                    }
                }
            }
        }
    }
    out.map(|fam| fam.map(|s| s.into_iter().collect()))
}

fn pick(rng: &mut SplitMix, vals: &[u128], max: u128) -> u128 {
    if !vals.is_empty() && rng.percent(80) {
        vals[rng.below(vals.len() as u64) as usize]
    } else {
        (u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64())) & max
    }
}

fn keys(rng: &mut SplitMix, b: &[[Vec<u128>; FIELD_COUNT]; 2]) -> Vec<PacketKey> {
    (0..KEYS)
        .map(|_| {
            let is_v6 = rng.percent(50);
            let fam = if is_v6 { Family::V6 } else { Family::V4 };
            let b = &b[usize::from(is_v6)];
            let mut v = |f: Field| pick(rng, &b[f as usize], f.max_value(fam));
            let aux = v(Field::Aux) as u8;
            let iif = v(Field::Iif) as u16;
            let oif = v(Field::Oif) as u16;
            let mut k = PacketKey {
                src: v(Field::Src),
                dst: v(Field::Dst),
                sport: v(Field::Sport) as u16,
                dport: v(Field::Dport) as u16,
                iif,
                oif,
                len: 40 + (v(Field::Sport) as u16 % 1500),
                proto: v(Field::Proto) as u8,
                tcp_flags: aux,
                icmp_type: aux,
                icmp_code: v(Field::Dport) as u8,
                ct: CT[v(Field::Ct) as usize % CT.len()],
                is_v6,
                ct_hint: Default::default(),
            };
            if !is_v6 && rng.percent(30) {
                // The IPv4-mapped form: its upper bits must be ignored.
                k.src |= 0xffff << 32;
                k.dst |= 0xffff << 32;
            }
            if rng.percent(10) {
                k.oif = IFACE_NONE;
            }
            k
        })
        .collect()
}

/// The action the matched slot calls for.
fn check_action(fw: &Firewall, set: &RuleSet, chain: Chain, k: &PacketKey, v: &Verdict) {
    let icmp_error = match (k.is_v6, k.proto) {
        (false, 1) => matches!(k.icmp_type, 3 | 4 | 5 | 11 | 12),
        (true, 58) => k.icmp_type < 128,
        _ => false,
    };
    let rst = k.proto == 6 && k.tcp_flags & 0x04 != 0;
    match fw.rule_info(v.rule).map(|i| i.action) {
        Some(RuleAction::Accept) => assert_eq!(v.action, Action::Accept, "{k:?}"),
        Some(RuleAction::Drop) => assert_eq!(v.action, Action::Drop, "{k:?}"),
        Some(RuleAction::Reject(_)) => match v.action {
            Action::Accept => panic!("a reject rule accepted {k:?}"),
            Action::Drop => {}
            _ if icmp_error || rst => {
                panic!("a reject answered an ICMP error or a RST: {k:?} {v:?}")
            }
            Action::RejectTcpReset => assert_eq!(k.proto, 6, "a RST for a non-TCP packet {k:?}"),
            Action::RejectIcmp(_) => assert!(!k.is_v6, "ICMPv4 for an IPv6 packet {k:?}"),
            Action::RejectIcmp6(_) => assert!(k.is_v6, "ICMPv6 for an IPv4 packet {k:?}"),
        },
        Some(RuleAction::Count) => panic!("a counting rule cannot decide: {k:?}"),
        None => {
            assert_eq!(v.rule, fw.policy_slot(chain), "{k:?}");
            let want = match set.chain(chain).policy {
                Policy::Accept => Action::Accept,
                Policy::Drop => Action::Drop,
            };
            assert_eq!(v.action, want, "{k:?}");
        }
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let set = match firewall::parse_rules(&text, "fuzz.rules") {
        Ok(set) => set,
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("fuzz.rules:"), "{msg}");
            return;
        }
    };
    let ifaces: InterfaceMap = IFACES.into_iter().collect();
    let seed = fnv(data);
    let opts = CompileOptions {
        table_budget: if seed & 1 == 0 {
            CompileOptions::default().table_budget
        } else {
            256
        },
    };
    let fw = match Firewall::compile_with(&set, &ifaces, &opts) {
        Ok(fw) => fw,
        Err(CompileError::TrieTooLarge(_)) => return,
    };
    assert_eq!(fw.counter_slots(), set.rule_count() + 2);
    assert_eq!(fw.stateful(), set.uses_conntrack());
    let lin = LinearFirewall::new(&set, &ifaces);
    let mut rng = SplitMix::new(seed);
    let b = boundaries(&set, &ifaces);
    let keys = keys(&mut rng, &b);

    let mut all_counters = Vec::new();
    for chain in Chain::ALL {
        let mut out = vec![Verdict::default(); keys.len()];
        let mut counters = RuleCounters::new(fw.counter_slots());
        fw.classify_batch(chain, &keys, &mut out, &mut counters);
        let mut expect = RuleCounters::new(fw.counter_slots());
        for (k, v) in keys.iter().zip(&out) {
            let (rule, counted) = lin.classify(chain, k);
            assert_eq!(v.rule, rule, "chain {chain} key {k:?}\nrules:\n{text}");
            assert_eq!(lin.first_match(chain, k), rule);
            for c in counted.into_iter().chain([rule]) {
                expect.packets[c as usize] += 1;
                expect.bytes[c as usize] += u64::from(k.len);
            }
            check_action(&fw, &set, chain, k, v);
        }
        assert_eq!(
            counters, expect,
            "chain {chain}: counters differ\nrules:\n{text}"
        );
        all_counters.push(counters);
    }

    // Through a worker: tracking sets each key's ct state, then the rules.
    let fw = Arc::new(fw);
    let mut worker = FirewallWorker::new(Arc::clone(&fw), seed);
    for (round, now) in [(0u32, 1_000_000_000u64), (1, 1_000_000_000 + (seed >> 40))] {
        for chain in Chain::ALL {
            let mut ks = keys.clone();
            let mut out = vec![Verdict::default(); ks.len()];
            let limited_before = worker.stats().rejects_rate_limited;
            worker.process_batch(chain, &mut ks, &mut out, now);
            let limited = worker.stats().rejects_rate_limited - limited_before;
            let mut rejects_dropped = 0u64;
            for (k, v) in ks.iter().zip(&out) {
                if !fw.stateful() {
                    assert_eq!(k.ct, CtState::Untracked, "round {round}");
                }
                let (rule, _) = lin.classify(chain, k);
                assert_eq!(
                    v.rule, rule,
                    "worker, round {round}, chain {chain}, key {k:?}\nrules:\n{text}"
                );
                let is_reject = matches!(
                    fw.rule_info(v.rule).map(|i| i.action),
                    Some(RuleAction::Reject(_))
                );
                if is_reject && v.action == Action::Drop {
                    rejects_dropped += 1;
                }
                check_action(&fw, &set, chain, k, v);
            }
            assert!(limited <= rejects_dropped, "rate-limited rejects are drops");
        }
    }
    let _ = worker.conntrack_stats();
    let summary = fw.summary(all_counters.iter().chain([worker.counters()]));
    let _ = summary.to_string();
});
