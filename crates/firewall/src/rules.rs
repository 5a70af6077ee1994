//! The rule model: what a parsed rule file says, before compilation.
//!
//! Every match is kept in a normalised form (sorted inclusive intervals over
//! the field's value space) so the compiler and the linear reference matcher
//! read the very same thing.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A firewall hook. `Forward` sees transit packets (after the route lookup,
/// so `oif` is known); `Input` sees packets addressed to the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Chain {
    Forward,
    Input,
}

impl Chain {
    /// Both chains, in counter order.
    pub const ALL: [Chain; 2] = [Chain::Forward, Chain::Input];

    /// Position in per-chain arrays.
    pub const fn index(self) -> usize {
        match self {
            Chain::Forward => 0,
            Chain::Input => 1,
        }
    }

    /// The word used in rule files.
    pub const fn name(self) -> &'static str {
        match self {
            Chain::Forward => "forward",
            Chain::Input => "input",
        }
    }
}

impl fmt::Display for Chain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Address family of a packet or of a family-specific rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    /// Width of an address in bits.
    pub const fn bits(self) -> u32 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }

    /// Largest address as an integer.
    pub const fn max_addr(self) -> u128 {
        match self {
            Family::V4 => u32::MAX as u128,
            Family::V6 => u128::MAX,
        }
    }
}

/// Connection-tracking state of a packet, as the `ct state` match sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum CtState {
    /// Tracking is on but the packet fits no valid flow (e.g. a TCP segment
    /// without SYN and without an entry).
    Invalid = 0,
    /// First packet(s) of a flow, before any reply was seen.
    New = 1,
    /// A flow that has seen packets in both directions.
    Established = 2,
    /// An ICMP error about a tracked flow.
    Related = 3,
    /// Tracking is off for this packet (no rule uses `ct`).
    #[default]
    Untracked = 4,
}

impl CtState {
    /// Number of distinct values (the `ct` field's value space).
    pub const COUNT: u128 = 5;

    /// Parses a word of `ct state`.
    pub fn from_word(w: &str) -> Option<Self> {
        Some(match w {
            "invalid" => CtState::Invalid,
            "new" => CtState::New,
            "established" => CtState::Established,
            "related" => CtState::Related,
            "untracked" => CtState::Untracked,
            _ => return None,
        })
    }
}

/// The fields a rule can match, in the order the classifier keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum Field {
    Src = 0,
    Dst = 1,
    Sport = 2,
    Dport = 3,
    Proto = 4,
    /// TCP flags for TCP, ICMP type for ICMP / ICMPv6, 0 otherwise.
    Aux = 5,
    Ct = 6,
    Iif = 7,
    Oif = 8,
}

/// Number of classifier fields.
pub const FIELD_COUNT: usize = 9;

impl Field {
    /// All fields, in order.
    pub const ALL: [Field; FIELD_COUNT] = [
        Field::Src,
        Field::Dst,
        Field::Sport,
        Field::Dport,
        Field::Proto,
        Field::Aux,
        Field::Ct,
        Field::Iif,
        Field::Oif,
    ];

    /// Largest value of the field for a family.
    pub const fn max_value(self, family: Family) -> u128 {
        match self {
            Field::Src | Field::Dst => family.max_addr(),
            Field::Sport | Field::Dport | Field::Iif | Field::Oif => u16::MAX as u128,
            Field::Proto | Field::Aux => u8::MAX as u128,
            Field::Ct => CtState::COUNT - 1,
        }
    }
}

/// A set of field values as sorted, disjoint, non-adjacent inclusive intervals.
/// `None` in a rule means "any value" (the field is not matched).
pub type Intervals = Vec<(u128, u128)>;

/// Sorts and merges intervals (overlapping or adjacent ones become one).
pub fn normalize(mut iv: Intervals) -> Intervals {
    iv.sort_unstable();
    let mut out: Intervals = Vec::with_capacity(iv.len());
    for (lo, hi) in iv {
        if let Some(last) = out.last_mut()
            && lo <= last.1.saturating_add(1)
        {
            if hi > last.1 {
                last.1 = hi;
            }
            continue;
        }
        out.push((lo, hi));
    }
    out
}

/// The complement of normalised intervals within `[0, max]`.
pub fn complement(iv: &Intervals, max: u128) -> Intervals {
    let mut out = Vec::with_capacity(iv.len() + 1);
    let mut next = 0u128;
    let mut done = false;
    for &(lo, hi) in iv {
        if lo > next {
            out.push((next, lo - 1));
        }
        if hi >= max {
            done = true;
            break;
        }
        next = hi + 1;
    }
    if !done && next <= max {
        out.push((next, max));
    }
    out
}

/// Whether a value falls inside normalised intervals.
pub fn contains(iv: &Intervals, v: u128) -> bool {
    let i = iv.partition_point(|&(lo, _)| lo <= v);
    i > 0 && iv[i - 1].1 >= v
}

/// How a `reject` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RejectWith {
    /// TCP packets get a RST, everything else an ICMP / ICMPv6 port unreachable.
    Default,
    /// `with tcp reset` (the rule must be limited to TCP).
    TcpReset,
    /// `with icmp type …`: an ICMPv4 destination unreachable code (RFC 792).
    Icmp(u8),
    /// `with icmpv6 type …`: an ICMPv6 destination unreachable code (RFC 4443 §3.1).
    Icmp6(u8),
    /// `with icmpx type …`: family-independent reason.
    Icmpx(IcmpxReason),
}

/// Family-independent reject reasons (nftables `icmpx`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IcmpxReason {
    PortUnreachable,
    HostUnreachable,
    NoRoute,
    AdminProhibited,
}

impl IcmpxReason {
    /// The reason's name in the rule language.
    pub const fn name(self) -> &'static str {
        match self {
            IcmpxReason::PortUnreachable => "port-unreachable",
            IcmpxReason::HostUnreachable => "host-unreachable",
            IcmpxReason::NoRoute => "no-route",
            IcmpxReason::AdminProhibited => "admin-prohibited",
        }
    }

    /// ICMPv4 destination unreachable code (RFC 792, RFC 1812 §5.2.7.1).
    pub const fn v4_code(self) -> u8 {
        match self {
            IcmpxReason::PortUnreachable => 3,
            IcmpxReason::HostUnreachable => 1,
            IcmpxReason::NoRoute => 0,
            IcmpxReason::AdminProhibited => 13,
        }
    }

    /// ICMPv6 destination unreachable code (RFC 4443 §3.1).
    pub const fn v6_code(self) -> u8 {
        match self {
            IcmpxReason::PortUnreachable => 4,
            IcmpxReason::HostUnreachable => 3,
            IcmpxReason::NoRoute => 0,
            IcmpxReason::AdminProhibited => 1,
        }
    }
}

/// What a rule does with a packet it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleAction {
    Accept,
    Drop,
    Reject(RejectWith),
    /// `counter` alone: count the packet and go on to the next rule.
    Count,
}

impl RuleAction {
    /// Whether the rule ends classification when it matches.
    pub const fn is_terminal(self) -> bool {
        !matches!(self, RuleAction::Count)
    }
}

/// The verdict in the rule language's words: `accept`, `drop`, `count`
/// (a `counter` rule without a verdict), `reject`, `reject with tcp reset`,
/// `reject with icmpx admin-prohibited`; an ICMP reason given as a code
/// prints as `reject with icmp code 13` (`icmpv6` for ICMPv6).
impl fmt::Display for RuleAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleAction::Accept => f.write_str("accept"),
            RuleAction::Drop => f.write_str("drop"),
            RuleAction::Count => f.write_str("count"),
            RuleAction::Reject(RejectWith::Default) => f.write_str("reject"),
            RuleAction::Reject(RejectWith::TcpReset) => f.write_str("reject with tcp reset"),
            RuleAction::Reject(RejectWith::Icmp(code)) => write!(f, "reject with icmp code {code}"),
            RuleAction::Reject(RejectWith::Icmp6(code)) => {
                write!(f, "reject with icmpv6 code {code}")
            }
            RuleAction::Reject(RejectWith::Icmpx(reason)) => {
                write!(f, "reject with icmpx {}", reason.name())
            }
        }
    }
}

/// A chain's verdict for packets no terminal rule matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    Accept,
    Drop,
}

/// An interface match: names, possibly negated. Names are resolved to ids
/// at compile time; a name with no id never matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfaceMatch {
    pub names: Vec<String>,
    pub negate: bool,
}

/// One rule after parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Line of the rule in its file (1-based).
    pub line: usize,
    /// The rule as written (whitespace collapsed), for `show` output.
    pub text: String,
    /// `Some` when the rule matches only one address family.
    pub family: Option<Family>,
    /// Source / destination addresses as intervals of the rule's family.
    pub src: Option<Intervals>,
    pub dst: Option<Intervals>,
    pub sport: Option<Intervals>,
    pub dport: Option<Intervals>,
    pub proto: Option<Intervals>,
    pub aux: Option<Intervals>,
    pub ct: Option<Intervals>,
    pub iif: Option<IfaceMatch>,
    pub oif: Option<IfaceMatch>,
    pub action: RuleAction,
}

impl Rule {
    /// A rule that matches everything and does `action`.
    pub fn any(action: RuleAction) -> Self {
        Rule {
            line: 0,
            text: String::new(),
            family: None,
            src: None,
            dst: None,
            sport: None,
            dport: None,
            proto: None,
            aux: None,
            ct: None,
            iif: None,
            oif: None,
            action,
        }
    }

    /// Whether the rule can match packets of `family`.
    pub fn applies_to(&self, family: Family) -> bool {
        self.family.is_none_or(|f| f == family)
    }
}

/// Ordered rules of one chain and its default policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainRules {
    pub policy: Policy,
    pub rules: Vec<Rule>,
}

impl Default for ChainRules {
    fn default() -> Self {
        ChainRules {
            policy: Policy::Accept,
            rules: Vec::new(),
        }
    }
}

/// Connection-tracking settings (`ct size`, `ct timeout …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ConntrackConfig {
    /// Entries per worker table.
    pub size: usize,
    /// Timeouts in seconds.
    pub tcp_syn: u64,
    pub tcp_established: u64,
    pub tcp_closing: u64,
    pub udp_new: u64,
    pub udp_established: u64,
    pub icmp: u64,
    pub other: u64,
}

impl Default for ConntrackConfig {
    fn default() -> Self {
        ConntrackConfig {
            size: 65536,
            tcp_syn: 60,
            tcp_established: 3600,
            tcp_closing: 30,
            udp_new: 30,
            udp_established: 120,
            icmp: 30,
            other: 60,
        }
    }
}

/// Rate limit on generated rejects (ICMP errors and RSTs), per worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RejectLimit {
    pub per_second: u64,
    pub burst: u64,
}

impl Default for RejectLimit {
    fn default() -> Self {
        RejectLimit {
            per_second: 100,
            burst: 50,
        }
    }
}

/// A parsed rule file: the chains and the global settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuleSet {
    /// Name of the file (or config section) the rules came from.
    pub source: String,
    /// Indexed by [`Chain::index`].
    pub chains: [ChainRules; 2],
    pub conntrack: ConntrackConfig,
    pub reject_limit: RejectLimit,
}

impl RuleSet {
    /// The rules and policy of a chain.
    pub fn chain(&self, chain: Chain) -> &ChainRules {
        &self.chains[chain.index()]
    }

    /// Whether any rule matches on `ct state` (tracking is on only then).
    pub fn uses_conntrack(&self) -> bool {
        self.chains
            .iter()
            .any(|c| c.rules.iter().any(|r| r.ct.is_some()))
    }

    /// Total number of rules over all chains.
    pub fn rule_count(&self) -> usize {
        self.chains.iter().map(|c| c.rules.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_print_in_the_rule_languages_words() {
        let cases = [
            (RuleAction::Accept, "accept"),
            (RuleAction::Drop, "drop"),
            (RuleAction::Count, "count"),
            (RuleAction::Reject(RejectWith::Default), "reject"),
            (
                RuleAction::Reject(RejectWith::TcpReset),
                "reject with tcp reset",
            ),
            (
                RuleAction::Reject(RejectWith::Icmp(13)),
                "reject with icmp code 13",
            ),
            (
                RuleAction::Reject(RejectWith::Icmp6(1)),
                "reject with icmpv6 code 1",
            ),
            (
                RuleAction::Reject(RejectWith::Icmpx(IcmpxReason::AdminProhibited)),
                "reject with icmpx admin-prohibited",
            ),
        ];
        for (action, words) in cases {
            assert_eq!(action.to_string(), words);
        }
        // The names are the ones the serialised form uses.
        for r in [
            IcmpxReason::PortUnreachable,
            IcmpxReason::HostUnreachable,
            IcmpxReason::NoRoute,
            IcmpxReason::AdminProhibited,
        ] {
            assert_eq!(serde_json::to_value(r).ok(), Some(r.name().into()));
        }
    }

    #[test]
    fn normalize_merges_overlap_and_adjacency() {
        let n = normalize(vec![(10, 20), (0, 3), (4, 5), (15, 30), (40, 40)]);
        assert_eq!(n, vec![(0, 5), (10, 30), (40, 40)]);
    }

    #[test]
    fn complement_covers_the_gaps() {
        assert_eq!(
            complement(&vec![(0, 5), (10, 30)], 40),
            vec![(6, 9), (31, 40)]
        );
        assert_eq!(complement(&vec![(3, 40)], 40), vec![(0, 2)]);
        assert_eq!(complement(&vec![], 7), vec![(0, 7)]);
        assert_eq!(
            complement(&vec![(0, u128::MAX)], u128::MAX),
            Vec::<(u128, u128)>::new()
        );
    }

    #[test]
    fn contains_checks_bounds() {
        let iv = vec![(1, 3), (10, 10)];
        assert!(!contains(&iv, 0));
        assert!(contains(&iv, 1));
        assert!(contains(&iv, 3));
        assert!(!contains(&iv, 4));
        assert!(contains(&iv, 10));
        assert!(!contains(&iv, 11));
    }
}
