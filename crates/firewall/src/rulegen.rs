//! Synthetic rule sets and traces shaped like real firewalls, in the spirit
//! of ClassBench's acl / fw seeds: a mix of prefix lengths (many /24–/32,
//! some short, some wildcards), exact well-known ports, port ranges
//! (ephemeral 1024-65535, small ranges) and wildcards, a protocol mix
//! dominated by TCP and UDP. Deterministic from a seed.

use crate::key::PacketKey;
use std::fmt::Write;

/// A small deterministic generator (splitmix64).
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// True with probability `p` percent.
    pub fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
}

/// One generated IPv4 rule (ClassBench fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenRule {
    pub src: u32,
    pub src_len: u8,
    pub dst: u32,
    pub dst_len: u8,
    pub sport: (u16, u16),
    pub dport: (u16, u16),
    /// `None` = any protocol.
    pub proto: Option<u8>,
    pub accept: bool,
}

fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len as u32)
    }
}

const WELL_KNOWN: [u16; 16] = [
    22, 25, 53, 80, 110, 123, 143, 161, 389, 443, 445, 993, 1433, 3306, 5432, 8080,
];

fn prefix_len(rng: &mut SplitMix) -> u8 {
    // fw-like mix: wildcards, a few short prefixes, mostly /16–/32.
    match rng.below(100) {
        0..=14 => 0,
        15..=19 => 8 + rng.below(8) as u8,
        20..=34 => 16 + rng.below(8) as u8,
        35..=69 => 24,
        70..=79 => 25 + rng.below(7) as u8,
        _ => 32,
    }
}

fn port_spec(rng: &mut SplitMix, src: bool) -> (u16, u16) {
    let r = rng.below(100);
    if src {
        match r {
            0..=79 => (0, 65535),
            80..=89 => (1024, 65535),
            _ => {
                let p = WELL_KNOWN[rng.below(16) as usize];
                (p, p)
            }
        }
    } else {
        match r {
            0..=24 => (0, 65535),
            25..=69 => {
                let p = WELL_KNOWN[rng.below(16) as usize];
                (p, p)
            }
            70..=79 => {
                let p = rng.below(65536) as u16;
                (p, p)
            }
            80..=89 => (1024, 65535),
            _ => {
                let lo = rng.below(60000) as u16;
                (lo, lo + rng.below(2000) as u16)
            }
        }
    }
}

/// `n` rules; address pools are shared so rules overlap as in real sets.
pub fn rules(n: usize, seed: u64) -> Vec<GenRule> {
    let mut rng = SplitMix::new(seed);
    // Pools of "sites": rule addresses are drawn around them.
    let pool: Vec<u32> = (0..(n / 4).max(8)).map(|_| rng.next_u64() as u32).collect();
    (0..n)
        .map(|_| {
            let src_len = prefix_len(&mut rng);
            let dst_len = prefix_len(&mut rng);
            let src = pool[rng.below(pool.len() as u64) as usize] & mask(src_len);
            let dst = pool[rng.below(pool.len() as u64) as usize] & mask(dst_len);
            let proto = match rng.below(100) {
                0..=59 => Some(6),
                60..=84 => Some(17),
                85..=89 => Some(1),
                _ => None,
            };
            let (sport, dport) = if matches!(proto, Some(6) | Some(17)) {
                (port_spec(&mut rng, true), port_spec(&mut rng, false))
            } else {
                ((0, 65535), (0, 65535))
            };
            GenRule {
                src,
                src_len,
                dst,
                dst_len,
                sport,
                dport,
                proto,
                accept: rng.percent(50),
            }
        })
        .collect()
}

fn v4(a: u32) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::from(a)
}

/// The rules in fastfwd's language (one `forward` chain, policy drop).
/// A rule that names no address applies to both families.
pub fn to_rule_text(rules: &[GenRule]) -> String {
    let mut s = String::from("chain forward {\n    policy drop\n");
    for r in rules {
        write_rule(&mut s, r, RuleFamily::Any);
    }
    s.push_str("}\n");
    s
}

/// The rules for both families: one `forward` chain (policy drop) with
/// every rule as an IPv4 rule, then every rule again as an IPv6 rule
/// (each address `a/len` as [`v6_of`]`(a)/(len + 32)`). A rule that names
/// no address is bound to its family (`ip saddr 0.0.0.0/0`, `ip6 saddr
/// ::/0`), so the packets of each family meet exactly `rules.len()`
/// rules, in the same order.
pub fn to_rule_text_dual(rules: &[GenRule]) -> String {
    let mut s = String::from("chain forward {\n    policy drop\n");
    for family in [RuleFamily::V4, RuleFamily::V6] {
        for r in rules {
            write_rule(&mut s, r, family);
        }
    }
    s.push_str("}\n");
    s
}

/// The IPv6 address that stands for IPv4 address `a` in
/// [`to_rule_text_dual`]: `2001:db8::/32` (the documentation prefix, RFC
/// 3849) followed by the 32 bits of `a`, so `a` lies in `p/len` exactly
/// when `v6_of(a)` lies in `v6_of(p)/(len + 32)`, whatever the last 64 bits.
pub fn v6_of(a: u32) -> u128 {
    (0x2001_0db8_u128 << 96) | (u128::from(a) << 64)
}

/// Which family a written rule is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RuleFamily {
    /// IPv4 addresses, and a rule without one applies to both families.
    Any,
    V4,
    V6,
}

fn write_rule(s: &mut String, r: &GenRule, family: RuleFamily) {
    s.push_str("   ");
    let (kw, proto_kw) = match family {
        RuleFamily::V6 => ("ip6", "ip6 nexthdr"),
        _ => ("ip", "ip protocol"),
    };
    let addr = |s: &mut String, what: &str, a: u32, len: u8| {
        let _ = if family == RuleFamily::V6 {
            write!(
                s,
                " {kw} {what} {}/{}",
                std::net::Ipv6Addr::from(v6_of(a)),
                u32::from(len) + 32
            )
        } else {
            write!(s, " {kw} {what} {}/{len}", v4(a))
        };
    };
    if r.src_len > 0 {
        addr(s, "saddr", r.src, r.src_len);
    }
    if r.dst_len > 0 {
        addr(s, "daddr", r.dst, r.dst_len);
    }
    if r.src_len == 0 && r.dst_len == 0 {
        match family {
            RuleFamily::Any => {}
            RuleFamily::V4 => s.push_str(" ip saddr 0.0.0.0/0"),
            RuleFamily::V6 => s.push_str(" ip6 saddr ::/0"),
        }
    }
    match r.proto {
        Some(p @ (6 | 17)) => {
            let name = if p == 6 { "tcp" } else { "udp" };
            let mut any = false;
            if r.sport != (0, 65535) {
                let _ = write!(s, " {name} sport {}-{}", r.sport.0, r.sport.1);
                any = true;
            }
            if r.dport != (0, 65535) {
                let _ = write!(s, " {name} dport {}-{}", r.dport.0, r.dport.1);
                any = true;
            }
            if !any {
                let _ = write!(s, " {proto_kw} {name}");
            }
        }
        Some(p) => {
            let _ = write!(s, " {proto_kw} {p}");
        }
        None => {}
    }
    s.push_str(if r.accept { " accept\n" } else { " drop\n" });
}

/// The rules in the ClassBench format `dpdk-test-acl --rulesf` reads.
pub fn to_classbench(rules: &[GenRule]) -> String {
    let mut s = String::new();
    for r in rules {
        let (p, m) = r.proto.map_or((0, 0), |p| (p, 0xff));
        let _ = writeln!(
            s,
            "@{}/{}\t{}/{}\t{} : {}\t{} : {}\t0x{:02x}/0x{:02x}",
            v4(r.src),
            r.src_len,
            v4(r.dst),
            r.dst_len,
            r.sport.0,
            r.sport.1,
            r.dport.0,
            r.dport.1,
            p,
            m
        );
    }
    s
}

/// A trace of `n` packets: most are drawn to hit a rule (addresses inside
/// its prefixes, ports inside its ranges), the rest uniformly random.
pub fn trace(rules: &[GenRule], n: usize, seed: u64) -> Vec<PacketKey> {
    let mut rng = SplitMix::new(seed);
    (0..n)
        .map(|_| {
            let rand_in =
                |rng: &mut SplitMix, a: u32, len: u8| a | (rng.next_u64() as u32 & !mask(len));
            let range = |rng: &mut SplitMix, (lo, hi): (u16, u16)| {
                lo + rng.below(hi as u64 - lo as u64 + 1) as u16
            };
            if !rules.is_empty() && rng.percent(90) {
                let r = rules[rng.below(rules.len() as u64) as usize];
                let proto = r.proto.unwrap_or(if rng.percent(50) { 6 } else { 17 });
                PacketKey {
                    src: rand_in(&mut rng, r.src, r.src_len) as u128,
                    dst: rand_in(&mut rng, r.dst, r.dst_len) as u128,
                    sport: range(&mut rng, r.sport),
                    dport: range(&mut rng, r.dport),
                    proto,
                    len: 64,
                    ..PacketKey::default()
                }
            } else {
                PacketKey {
                    src: rng.next_u64() as u32 as u128,
                    dst: rng.next_u64() as u32 as u128,
                    sport: rng.next_u64() as u16,
                    dport: rng.next_u64() as u16,
                    proto: [6, 17, 1][rng.below(3) as usize],
                    len: 64,
                    ..PacketKey::default()
                }
            }
        })
        .collect()
}

/// The trace in the format `dpdk-test-acl --tracef` reads.
pub fn to_classbench_trace(keys: &[PacketKey]) -> String {
    let mut s = String::new();
    for k in keys {
        let _ = writeln!(
            s,
            "0x{:08x}\t0x{:08x}\t{}\t{}\t{}",
            k.src as u32, k.dst as u32, k.sport, k.dport, k.proto
        );
    }
    s
}
