//! The compiled classifier against the linear first-match reference, on
//! random rule sets (overlapping prefixes, ranges, sets, negations, every
//! action, both chains and families) and random packets near the rules'
//! boundaries.

use firewall::rulegen::SplitMix;
use firewall::rules::{
    ChainRules, CtState, Family, IcmpxReason, IfaceMatch, Intervals, Policy, RejectWith, Rule,
    RuleAction, RuleSet, complement, normalize,
};
use firewall::{
    Chain, CompileOptions, Firewall, IFACE_NONE, InterfaceMap, LinearFirewall, PacketKey,
    RuleCounters, Verdict,
};
use proptest::prelude::*;

const IFACES: [&str; 4] = ["eth0", "eth1", "eth2", "ghost"];

struct Pools {
    v4: Vec<u128>,
    v6: Vec<u128>,
}

fn pools(rng: &mut SplitMix) -> Pools {
    let v4 = (0..6)
        .map(|_| (rng.next_u64() as u32) as u128)
        .chain([0, u32::MAX as u128])
        .collect();
    let v6 = (0..6)
        .map(|_| {
            (0x2001_0db8u128 << 96) | ((rng.next_u64() as u128) << 32) | rng.below(1 << 20) as u128
        })
        .chain([0, u128::MAX])
        .collect();
    Pools { v4, v6 }
}

fn prefix_iv(base: u128, len: u32, bits: u32) -> (u128, u128) {
    if len == 0 {
        return (
            0,
            if bits == 128 {
                u128::MAX
            } else {
                (1u128 << bits) - 1
            },
        );
    }
    let host = bits - len;
    let mask_host = if host == 0 { 0 } else { (1u128 << host) - 1 };
    let lo = base & !mask_host;
    (lo, lo | mask_host)
}

fn addr_set(rng: &mut SplitMix, p: &Pools, fam: Family) -> Intervals {
    let (pool, bits) = match fam {
        Family::V4 => (&p.v4, 32),
        Family::V6 => (&p.v6, 128),
    };
    let n = 1 + rng.below(3);
    let mut iv = Vec::new();
    for _ in 0..n {
        let base = pool[rng.below(pool.len() as u64) as usize];
        let len = match rng.below(6) {
            0 => bits,
            1 => bits - rng.below(4) as u32,
            2 => rng.below(bits as u64 + 1) as u32,
            _ => bits / 2 + rng.below(bits as u64 / 2) as u32,
        };
        iv.push(prefix_iv(base, len, bits));
    }
    let iv = normalize(iv);
    if rng.percent(15) {
        complement(&iv, fam.max_addr())
    } else {
        iv
    }
}

const PORTS: [u128; 8] = [0, 1, 22, 53, 80, 443, 1024, 65535];

fn port_set(rng: &mut SplitMix) -> Intervals {
    let n = 1 + rng.below(3);
    let mut iv = Vec::new();
    for _ in 0..n {
        let a = PORTS[rng.below(8) as usize];
        let b = if rng.percent(50) {
            a
        } else {
            PORTS[rng.below(8) as usize]
        };
        iv.push((a.min(b), a.max(b)));
    }
    let iv = normalize(iv);
    if rng.percent(15) {
        complement(&iv, 65535)
    } else {
        iv
    }
}

fn small_set(rng: &mut SplitMix, values: &[u128], max: u128) -> Intervals {
    let mut iv = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let v = if rng.percent(80) {
            values[rng.below(values.len() as u64) as usize]
        } else {
            rng.below(max as u64 + 1) as u128
        };
        let hi = if rng.percent(20) {
            (v + rng.below(8) as u128).min(max)
        } else {
            v
        };
        iv.push((v, hi));
    }
    normalize(iv)
}

fn random_rule(rng: &mut SplitMix, p: &Pools) -> Rule {
    let family = match rng.below(3) {
        0 => None,
        1 => Some(Family::V4),
        _ => Some(Family::V6),
    };
    let mut r = Rule::any(RuleAction::Accept);
    r.family = family;
    if let Some(f) = family {
        if rng.percent(60) {
            r.src = Some(addr_set(rng, p, f));
        }
        if rng.percent(60) {
            r.dst = Some(addr_set(rng, p, f));
        }
    }
    if rng.percent(50) {
        r.proto = Some(small_set(rng, &[1, 6, 17, 58], 255));
    }
    if rng.percent(40) {
        r.sport = Some(port_set(rng));
    }
    if rng.percent(50) {
        r.dport = Some(port_set(rng));
    }
    if rng.percent(20) {
        r.aux = Some(small_set(rng, &[0, 2, 8, 16, 18, 128], 255));
    }
    if rng.percent(20) {
        r.ct = Some(small_set(rng, &[0, 1, 2, 3, 4], 4));
    }
    let iface = |rng: &mut SplitMix| IfaceMatch {
        names: (0..1 + rng.below(2))
            .map(|_| IFACES[rng.below(4) as usize].to_string())
            .collect(),
        negate: rng.percent(25),
    };
    if rng.percent(20) {
        r.iif = Some(iface(rng));
    }
    if rng.percent(15) {
        r.oif = Some(iface(rng));
    }
    r.action = match rng.below(9) {
        0 | 1 => RuleAction::Accept,
        2 | 3 => RuleAction::Drop,
        4 => RuleAction::Reject(RejectWith::Default),
        5 => RuleAction::Reject(RejectWith::Icmpx(IcmpxReason::AdminProhibited)),
        6 => RuleAction::Reject(RejectWith::TcpReset),
        _ => RuleAction::Count,
    };
    r
}

fn random_set(rng: &mut SplitMix, p: &Pools, n: usize) -> RuleSet {
    let chain = |rng: &mut SplitMix| ChainRules {
        policy: if rng.percent(50) {
            Policy::Accept
        } else {
            Policy::Drop
        },
        rules: (0..n).map(|_| random_rule(rng, p)).collect(),
    };
    RuleSet {
        chains: [chain(rng), chain(rng)],
        ..RuleSet::default()
    }
}

fn near(rng: &mut SplitMix, pool: &[u128], bits: u32) -> u128 {
    let max = if bits == 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    };
    let base = pool[rng.below(pool.len() as u64) as usize];
    match rng.below(4) {
        0 => base,
        1 => base.wrapping_add(1 + rng.below(3) as u128) & max,
        2 => base.wrapping_sub(1 + rng.below(3) as u128) & max,
        _ => {
            let k = rng.below(bits as u64) as u32;
            (base ^ (1u128 << k)) & max
        }
    }
}

fn random_key(rng: &mut SplitMix, p: &Pools) -> PacketKey {
    let is_v6 = rng.percent(50);
    let (pool, bits) = if is_v6 { (&p.v6, 128) } else { (&p.v4, 32) };
    let port = |rng: &mut SplitMix| {
        let v = PORTS[rng.below(8) as usize] as u16;
        match rng.below(3) {
            0 => v,
            1 => v.wrapping_add(1),
            _ => v.wrapping_sub(1),
        }
    };
    let iface = |rng: &mut SplitMix| {
        if rng.percent(15) {
            IFACE_NONE
        } else {
            rng.below(5) as u16
        }
    };
    let mut k = PacketKey {
        src: near(rng, pool, bits),
        dst: near(rng, pool, bits),
        sport: port(rng),
        dport: port(rng),
        iif: iface(rng),
        oif: iface(rng),
        len: 40 + rng.below(1400) as u16,
        proto: [1, 6, 17, 58, 47][rng.below(5) as usize],
        tcp_flags: [0, 2, 16, 18, 4, 1][rng.below(6) as usize],
        icmp_type: [0, 3, 8, 128, 129, 1][rng.below(6) as usize],
        icmp_code: 0,
        ct: [
            CtState::Invalid,
            CtState::New,
            CtState::Established,
            CtState::Related,
            CtState::Untracked,
        ][rng.below(5) as usize],
        is_v6,
        ct_hint: Default::default(),
    };
    if !is_v6 && rng.percent(30) {
        // IPv4-mapped form: the upper bits must be ignored.
        k.src |= 0xffff << 32;
    }
    k
}

fn ifaces() -> InterfaceMap {
    [("eth0", 0u16), ("eth1", 1), ("eth2", 2)]
        .into_iter()
        .collect()
}

fn check(seed: u64, rules_per_chain: usize, budget: usize) {
    let mut rng = SplitMix::new(seed);
    let p = pools(&mut rng);
    let set = random_set(&mut rng, &p, rules_per_chain);
    let ifs = ifaces();
    let fw = Firewall::compile_with(
        &set,
        &ifs,
        &CompileOptions {
            table_budget: budget,
        },
    )
    .unwrap();
    let lin = LinearFirewall::new(&set, &ifs);
    let mixed: Vec<PacketKey> = (0..300).map(|_| random_key(&mut rng, &p)).collect();
    // As drawn (chunks of both families, copied into a run per family)
    // and grouped by family (chunks of one family, classified in place).
    let mut grouped = mixed.clone();
    grouped.sort_by_key(|k| k.is_v6);
    for (keys, chain) in [&mixed, &grouped]
        .into_iter()
        .flat_map(|k| Chain::ALL.into_iter().map(move |c| (k, c)))
    {
        let mut out = vec![Verdict::default(); keys.len()];
        let mut counters = RuleCounters::new(fw.counter_slots());
        fw.classify_batch(chain, keys, &mut out, &mut counters);
        let mut expect = RuleCounters::new(fw.counter_slots());
        for (k, v) in keys.iter().zip(&out) {
            let (rule, counted) = lin.classify(chain, k);
            assert_eq!(v.rule, rule, "seed {seed} chain {chain} key {k:?}");
            for c in counted.into_iter().chain([rule]) {
                expect.packets[c as usize] += 1;
                expect.bytes[c as usize] += k.len as u64;
            }
            let info = fw.rule_info(rule);
            match info.map(|i| i.action) {
                Some(RuleAction::Accept) => assert!(v.action.accepts()),
                Some(RuleAction::Drop) => assert_eq!(v.action, firewall::Action::Drop),
                Some(RuleAction::Reject(_)) => assert!(!v.action.accepts()),
                Some(RuleAction::Count) => panic!("a counting rule cannot be terminal"),
                None => {
                    let accept = set.chain(chain).policy == Policy::Accept;
                    assert_eq!(v.action.accepts(), accept);
                }
            }
        }
        assert_eq!(
            counters, expect,
            "seed {seed} chain {chain}: counters differ"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn compiled_equals_linear_small(seed in any::<u64>(), n in 0usize..24) {
        check(seed, n, CompileOptions::default().table_budget);
    }

    #[test]
    fn compiled_equals_linear_split_groups(seed in any::<u64>(), n in 40usize..200) {
        // A tiny budget forces the bit-vector stage.
        check(seed, n, 256);
    }

    #[test]
    fn compiled_equals_linear_larger(seed in any::<u64>(), n in 100usize..200) {
        check(seed, n, CompileOptions::default().table_budget);
    }
}

#[test]
fn generated_firewall_sets_agree_with_linear() {
    for n in [1usize, 100, 1000] {
        let rules = firewall::rulegen::rules(n, n as u64);
        let set = firewall::parse_rules(&firewall::rulegen::to_rule_text(&rules), "gen").unwrap();
        let fw = Firewall::compile(&set, &InterfaceMap::new()).unwrap();
        let lin = LinearFirewall::new(&set, &InterfaceMap::new());
        let keys = firewall::rulegen::trace(&rules, 5000, 99);
        let mut out = vec![Verdict::default(); keys.len()];
        let mut c = RuleCounters::default();
        fw.classify_batch(Chain::Forward, &keys, &mut out, &mut c);
        let mut hits = 0;
        for (k, v) in keys.iter().zip(&out) {
            let want = lin.first_match(Chain::Forward, k);
            assert_eq!(v.rule, want, "{n} rules, key {k:?}");
            hits += usize::from((want as usize) < n);
        }
        assert!(hits > keys.len() / 2, "the trace should mostly hit rules");
    }
}

/// The dual generated set gives each family the same rules: an IPv4 key
/// and the same key over IPv6 (`rulegen::v6_of` addresses, any last 64
/// bits) meet the same rule, its IPv6 copy `n` places later, as the linear
/// reference has them.
#[test]
fn dual_generated_sets_give_both_families_the_same_rules() {
    let n = 1000;
    let rules = firewall::rulegen::rules(n, 3);
    let text = firewall::rulegen::to_rule_text_dual(&rules);
    let set = firewall::parse_rules(&text, "dual").unwrap();
    let fw = Firewall::compile(&set, &InterfaceMap::new()).unwrap();
    let lin = LinearFirewall::new(&set, &InterfaceMap::new());
    let v4 = firewall::rulegen::trace(&rules, 5000, 17);
    let mut rng = SplitMix::new(5);
    let v6: Vec<PacketKey> = v4
        .iter()
        .map(|k| PacketKey {
            src: firewall::rulegen::v6_of(k.src as u32) | u128::from(rng.next_u64()),
            dst: firewall::rulegen::v6_of(k.dst as u32) | u128::from(rng.next_u64()),
            is_v6: true,
            ..*k
        })
        .collect();
    let classify = |keys: &[PacketKey]| {
        let mut out = vec![Verdict::default(); keys.len()];
        fw.classify_batch(Chain::Forward, keys, &mut out, &mut RuleCounters::default());
        out
    };
    let (out4, out6) = (classify(&v4), classify(&v6));
    let mut hits = 0;
    for (i, (a, b)) in out4.iter().zip(&out6).enumerate() {
        assert_eq!(
            a.rule,
            lin.first_match(Chain::Forward, &v4[i]),
            "{:?}",
            v4[i]
        );
        assert_eq!(
            b.rule,
            lin.first_match(Chain::Forward, &v6[i]),
            "{:?}",
            v6[i]
        );
        assert_eq!(a.action, b.action, "{:?}", v4[i]);
        if (a.rule as usize) < n {
            hits += 1;
            assert_eq!(b.rule as usize, a.rule as usize + n, "{:?}", v4[i]);
        } else {
            // No rule: both meet the chain's policy.
            assert_eq!(b.rule, a.rule, "{:?}", v4[i]);
        }
    }
    assert!(hits > v4.len() / 2, "the trace should mostly hit rules");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Arbitrary text built from the language's own words never panics the
    /// parser or the compiler.
    #[test]
    fn parser_never_panics(words in proptest::collection::vec(0usize..40, 0..60)) {
        const VOCAB: [&str; 40] = [
            "chain", "forward", "input", "{", "}", "\n", ";", ",", "policy", "accept", "drop",
            "reject", "with", "tcp", "reset", "icmpx", "type", "ip", "ip6", "saddr", "daddr",
            "10.0.0.0/8", "::/0", "dport", "80-90", "$x", "@x", "define", "x", "=", "ct",
            "state", "new", "!=", "flags", "syn", "/", "counter", "iif", "\"c\"",
        ];
        let text: Vec<&str> = words.iter().map(|&w| VOCAB[w]).collect();
        let text = text.join(" ");
        if let Ok(set) = firewall::parse_rules(&text, "fuzz") {
            let fw = Firewall::compile(&set, &InterfaceMap::new()).unwrap();
            let mut out = [Verdict::default()];
            fw.classify_batch(Chain::Forward, &[PacketKey::default()], &mut out, &mut RuleCounters::default());
        }
    }
}

/// A family no rule of which tells two packets apart (only IPv4 rules,
/// a bare counter, a bare reject) is answered by the classifier's constant
/// outcome, whose counters take each run's sums at once: rules, actions
/// and counters still as the linear reference gives them, packet by packet.
#[test]
fn a_family_the_rules_do_not_look_into_is_counted_and_rejected_per_packet() {
    let texts = [
        "chain forward {\n policy accept\n counter\n ip daddr 192.0.2.0/24 drop\n}",
        "chain forward {\n policy drop\n ip daddr 192.0.2.0/24 accept\n counter\n reject\n}",
        "chain forward {\n policy drop\n ip daddr 192.0.2.0/24 accept\n}",
    ];
    let v6 = |proto: u8, tcp_flags: u8, icmp_type: u8, len: u16| PacketKey {
        src: 0x2001_0db8 << 96 | 1,
        dst: 0x2001_0db8 << 96 | 2,
        sport: 1000,
        dport: 80,
        iif: 0,
        oif: 1,
        len,
        proto,
        tcp_flags,
        icmp_type,
        icmp_code: 0,
        ct: CtState::Untracked,
        is_v6: true,
        ct_hint: Default::default(),
    };
    let v4 = PacketKey {
        src: 0xffff_c000_0201,
        dst: 0xffff_c000_0205,
        is_v6: false,
        ..v6(17, 0, 0, 99)
    };
    // TCP, TCP RST (no reset for a reset), UDP, an ICMPv6 error (no error
    // for an error), an echo request; an IPv4 key between them.
    let keys = [
        v6(6, 0x02, 0, 60),
        v6(6, 0x04, 0, 61),
        v6(17, 0, 0, 62),
        v4,
        v6(58, 0, 1, 63),
        v6(58, 0, 128, 64),
    ];
    for text in texts {
        let set = firewall::parse_rules(text, "acl").unwrap();
        let fw = Firewall::compile(&set, &ifaces()).unwrap();
        let lin = LinearFirewall::new(&set, &ifaces());
        // Mixed (a run per family) and one family alone.
        for keys in [&keys[..], &keys[..3]] {
            let mut out = vec![Verdict::default(); keys.len()];
            let mut counters = RuleCounters::new(fw.counter_slots());
            fw.classify_batch(Chain::Forward, keys, &mut out, &mut counters);
            let mut expect = RuleCounters::new(fw.counter_slots());
            for (k, v) in keys.iter().zip(&out) {
                let (rule, counted) = lin.classify(Chain::Forward, k);
                assert_eq!(v.rule, rule, "{text}: {k:?}");
                for c in counted.into_iter().chain([rule]) {
                    expect.packets[c as usize] += 1;
                    expect.bytes[c as usize] += u64::from(k.len);
                }
                let want = match fw.rule_info(rule).map(|i| i.action) {
                    Some(RuleAction::Reject(_)) if k.proto == 6 && k.tcp_flags & 0x04 == 0 => {
                        firewall::Action::RejectTcpReset
                    }
                    Some(RuleAction::Reject(_)) if k.proto == 6 => firewall::Action::Drop,
                    Some(RuleAction::Reject(_)) if k.proto == 58 && k.icmp_type < 128 => {
                        firewall::Action::Drop
                    }
                    Some(RuleAction::Reject(_)) => firewall::Action::RejectIcmp6(4),
                    Some(RuleAction::Drop) => firewall::Action::Drop,
                    _ if fw.rule_info(rule).is_some() => firewall::Action::Accept,
                    _ if set.chain(Chain::Forward).policy == Policy::Accept => {
                        firewall::Action::Accept
                    }
                    _ => firewall::Action::Drop,
                };
                assert_eq!(v.action, want, "{text}: {k:?}");
            }
            assert_eq!(counters, expect, "{text}");
        }
    }
}
