//! A whole compiled rule set: both chains, both families, rule metadata,
//! counters and their summary.

use crate::classifier::{
    CHUNK, Classifier, ClassifierStats, CompileError, CompileOptions, FlatRule, NO_RULE,
};
use crate::key::{Action, ClassifyKey, IfaceId, KeyFacts, PacketKey, Verdict};
use crate::rules::{
    Chain, ConntrackConfig, FIELD_COUNT, Family, IfaceMatch, Intervals, Policy, RejectLimit,
    RejectWith, RuleAction, RuleSet, complement, normalize,
};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Interface names known to the router and their ids.
#[derive(Debug, Clone, Default)]
pub struct InterfaceMap {
    ids: HashMap<String, IfaceId>,
}

impl InterfaceMap {
    /// An empty map (rules naming interfaces then match nothing).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces a name.
    pub fn insert(&mut self, name: impl Into<String>, id: IfaceId) {
        self.ids.insert(name.into(), id);
    }

    /// The id of a name.
    pub fn get(&self, name: &str) -> Option<IfaceId> {
        self.ids.get(name).copied()
    }
}

impl<S: Into<String>> FromIterator<(S, IfaceId)> for InterfaceMap {
    fn from_iter<T: IntoIterator<Item = (S, IfaceId)>>(iter: T) -> Self {
        InterfaceMap {
            ids: iter.into_iter().map(|(n, i)| (n.into(), i)).collect(),
        }
    }
}

/// What `show firewall` prints about one rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleInfo {
    pub chain: Chain,
    pub line: usize,
    pub text: String,
    pub action: RuleAction,
}

/// Per-worker rule counters: plain arrays indexed by [`Verdict::rule`],
/// one slot per rule then one per chain policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleCounters {
    pub packets: Vec<u64>,
    pub bytes: Vec<u64>,
}

impl RuleCounters {
    /// Zeroed counters for `slots` rules and policies.
    pub fn new(slots: usize) -> Self {
        RuleCounters {
            packets: vec![0; slots],
            bytes: vec![0; slots],
        }
    }

    #[inline]
    fn add(&mut self, slot: u32, len: u16) {
        self.add_many(slot, 1, u64::from(len));
    }

    /// Counts `packets` packets of `bytes` bytes in all in `slot`.
    #[inline]
    fn add_many(&mut self, slot: u32, packets: u64, bytes: u64) {
        if let (Some(p), Some(b)) = (
            self.packets.get_mut(slot as usize),
            self.bytes.get_mut(slot as usize),
        ) {
            *p += packets;
            *b += bytes;
        }
    }

    /// Adds another worker's counters (same rule set) into these.
    pub fn accumulate(&mut self, other: &RuleCounters) {
        for (a, b) in self.packets.iter_mut().zip(&other.packets) {
            *a += b;
        }
        for (a, b) in self.bytes.iter_mut().zip(&other.bytes) {
            *a += b;
        }
    }
}

/// Build figures of a compiled rule set.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BuildStats {
    /// `[chain][family]`: forward v4, forward v6, input v4, input v6.
    pub classifiers: Vec<ClassifierStats>,
    pub bytes: usize,
}

/// A compiled, immutable rule set. Build it off the fast path with
/// [`Firewall::compile`], publish it with `arc_swap::ArcSwap`, and let
/// each worker classify with its own [`RuleCounters`].
#[derive(Debug)]
pub struct Firewall {
    source: String,
    /// `[chain][family]`.
    classifiers: [[Classifier; 2]; 2],
    rules: Vec<RuleInfo>,
    /// What each counter slot does to a packet: the rules' actions, then
    /// each chain's policy. Read once per packet in place of a branch on
    /// "no rule matched" and one on the action, which a mix of accepted,
    /// dropped and unmatched packets would mispredict.
    slot_actions: Box<[SlotAction]>,
    policies: [Policy; 2],
    stateful: bool,
    conntrack: ConntrackConfig,
    reject_limit: RejectLimit,
    stats: BuildStats,
}

/// A counter slot's action, as [`Firewall::verdict`] applies it.
#[derive(Debug, Clone, Copy)]
enum SlotAction {
    /// The same for every packet.
    Fixed(Action),
    /// A reject, whose answer depends on the packet.
    Reject(RejectWith),
}

fn family_index(f: Family) -> usize {
    match f {
        Family::V4 => 0,
        Family::V6 => 1,
    }
}

fn iface_intervals(m: &IfaceMatch, ifaces: &InterfaceMap) -> Intervals {
    let ids: Intervals = m
        .names
        .iter()
        .filter_map(|n| ifaces.get(n))
        .map(|i| (i as u128, i as u128))
        .collect();
    let ids = normalize(ids);
    if m.negate {
        complement(&ids, u16::MAX as u128)
    } else {
        ids
    }
}

/// The rules of one chain that apply to one family, in order, reduced to
/// interval sets. Rule ids count over the whole rule set (forward first).
pub fn flatten(
    set: &RuleSet,
    chain: Chain,
    family: Family,
    ifaces: &InterfaceMap,
) -> Vec<FlatRule> {
    let base: usize = Chain::ALL
        .iter()
        .take_while(|&&c| c != chain)
        .map(|&c| set.chain(c).rules.len())
        .sum();
    set.chain(chain)
        .rules
        .iter()
        .enumerate()
        .filter(|(_, r)| r.applies_to(family))
        .map(|(i, r)| {
            let fields: [Option<Intervals>; FIELD_COUNT] = [
                r.src.clone(),
                r.dst.clone(),
                r.sport.clone(),
                r.dport.clone(),
                r.proto.clone(),
                r.aux.clone(),
                r.ct.clone(),
                r.iif.as_ref().map(|m| iface_intervals(m, ifaces)),
                r.oif.as_ref().map(|m| iface_intervals(m, ifaces)),
            ];
            FlatRule {
                fields,
                terminal: r.action.is_terminal(),
                id: (base + i) as u32,
            }
        })
        .collect()
}

impl Firewall {
    /// Compiles a rule set. Takes time proportional to the rule set (run it
    /// off the fast path); the result is immutable.
    pub fn compile(set: &RuleSet, ifaces: &InterfaceMap) -> Result<Self, CompileError> {
        Self::compile_with(set, ifaces, &CompileOptions::default())
    }

    /// [`Firewall::compile`] with explicit compiler settings.
    pub fn compile_with(
        set: &RuleSet,
        ifaces: &InterfaceMap,
        opts: &CompileOptions,
    ) -> Result<Self, CompileError> {
        let build = |chain: Chain, family: Family| -> Result<Classifier, CompileError> {
            Classifier::build(&flatten(set, chain, family, ifaces), family, opts)
        };
        let classifiers = [
            [
                build(Chain::Forward, Family::V4)?,
                build(Chain::Forward, Family::V6)?,
            ],
            [
                build(Chain::Input, Family::V4)?,
                build(Chain::Input, Family::V6)?,
            ],
        ];
        let rules: Vec<RuleInfo> = Chain::ALL
            .iter()
            .flat_map(|&c| {
                set.chain(c).rules.iter().map(move |r| RuleInfo {
                    chain: c,
                    line: r.line,
                    text: r.text.clone(),
                    action: r.action,
                })
            })
            .collect();
        let policies = [
            set.chain(Chain::Forward).policy,
            set.chain(Chain::Input).policy,
        ];
        let slot_actions = rules
            .iter()
            .map(|r| match r.action {
                RuleAction::Accept => SlotAction::Fixed(Action::Accept),
                RuleAction::Reject(with) => SlotAction::Reject(with),
                // A counting rule never ends classification; it is never
                // a packet's verdict.
                RuleAction::Drop | RuleAction::Count => SlotAction::Fixed(Action::Drop),
            })
            .chain(policies.iter().map(|p| {
                SlotAction::Fixed(match p {
                    Policy::Accept => Action::Accept,
                    Policy::Drop => Action::Drop,
                })
            }))
            .collect();
        let cstats: Vec<ClassifierStats> =
            classifiers.iter().flatten().map(|c| c.stats()).collect();
        let bytes = cstats.iter().map(|s| s.bytes).sum();
        Ok(Firewall {
            source: set.source.clone(),
            classifiers,
            rules,
            slot_actions,
            policies,
            stateful: set.uses_conntrack(),
            conntrack: set.conntrack,
            reject_limit: set.reject_limit,
            stats: BuildStats {
                classifiers: cstats,
                bytes,
            },
        })
    }

    /// A rule set that accepts everything.
    pub fn accept_all() -> Self {
        let set = RuleSet::default();
        Self::compile(&set, &InterfaceMap::new())
            .unwrap_or_else(|_| unreachable!("empty rule set compiles"))
    }

    /// Number of counter slots (rules, then one policy per chain).
    pub fn counter_slots(&self) -> usize {
        self.rules.len() + Chain::ALL.len()
    }

    /// The counter slot of a chain's policy.
    pub fn policy_slot(&self, chain: Chain) -> u32 {
        (self.rules.len() + chain.index()) as u32
    }

    /// Rule metadata by slot (`None` for policy slots).
    pub fn rule_info(&self, slot: u32) -> Option<&RuleInfo> {
        self.rules.get(slot as usize)
    }

    /// Whether any rule matches on `ct state` (tracking is needed).
    pub fn stateful(&self) -> bool {
        self.stateful
    }

    /// The forward chain's classifier for IPv4 (`v6` false) or IPv6,
    /// exported ([`Classifier::export`]).
    pub fn forward_classifier(&self, v6: bool) -> Option<crate::classifier::ClassifierExport<'_>> {
        self.classifiers[Chain::Forward.index()][usize::from(v6)].export()
    }

    /// The forward chain's policy.
    pub fn forward_policy(&self) -> Policy {
        self.policies[Chain::Forward.index()]
    }

    /// The action of the rule in counter slot `slot`, if it is a rule.
    pub fn rule_action(&self, slot: u32) -> Option<RuleAction> {
        self.rules.get(slot as usize).map(|r| r.action)
    }

    /// Connection-tracking settings of the rule set.
    pub fn conntrack_config(&self) -> ConntrackConfig {
        self.conntrack
    }

    /// Reject rate limit of the rule set.
    pub fn reject_limit(&self) -> RejectLimit {
        self.reject_limit
    }

    /// Compiled-structure figures (memory, groups, classes).
    pub fn build_stats(&self) -> &BuildStats {
        &self.stats
    }

    /// The verdict of a rule or policy for one packet.
    #[inline]
    fn verdict<K: ClassifyKey>(&self, chain: Chain, rule: u32, key: &K) -> Verdict {
        let slot = if rule == NO_RULE {
            self.policy_slot(chain)
        } else {
            rule
        };
        let action = match self.slot_actions.get(slot as usize) {
            Some(&SlotAction::Fixed(a)) => a,
            Some(&SlotAction::Reject(with)) => reject_action(with, key),
            None => Action::Drop,
        };
        Verdict { action, rule: slot }
    }

    /// Classifies a batch in one chain: `out[i]` answers `keys[i]` (up to the
    /// shorter of the two). Counts every matched rule (terminal and
    /// `counter`-only) in `counters`, which are resized if they belong to
    /// another rule set. No allocation (once counters fit), locking or
    /// syscalls.
    pub fn classify_batch(
        &self,
        chain: Chain,
        keys: &[PacketKey],
        out: &mut [Verdict],
        counters: &mut RuleCounters,
    ) {
        let n = keys.len().min(out.len());
        self.classify_each(chain, &keys[..n], counters, |i, v| out[i] = v);
    }

    /// [`Self::classify_batch`] handing `keys[i]`'s verdict to `each(i,
    /// verdict)` instead of storing it, so that a caller acts on it in the
    /// same pass. Within each chunk of [`CHUNK`] keys holding both families
    /// the IPv4 ones come first, then the IPv6 ones.
    #[inline]
    pub(crate) fn classify_each<K: ClassifyKey + Copy>(
        &self,
        chain: Chain,
        keys: &[K],
        counters: &mut RuleCounters,
        mut each: impl FnMut(usize, Verdict),
    ) {
        if counters.packets.len() != self.counter_slots()
            || counters.bytes.len() != self.counter_slots()
        {
            *counters = RuleCounters::new(self.counter_slots());
        }
        let chain_cls = &self.classifiers[chain.index()];
        for (c, chunk) in keys.chunks(CHUNK).enumerate() {
            let base = c * CHUNK;
            let first = family_index(chunk[0].family());
            if chunk.iter().all(|k| family_index(k.family()) == first) {
                // The usual chunk, of one family: classified where it is.
                self.classify_run(chain, &chain_cls[first], chunk, counters, |j, v| {
                    each(base + j, v)
                });
                continue;
            }
            // A mixed chunk: each family's keys copied into a run of their
            // own, so the classifier reads them contiguously.
            for (f, cls) in chain_cls.iter().enumerate() {
                let mut run = [chunk[0]; CHUNK];
                let mut at = [0u16; CHUNK];
                let mut m = 0;
                for (i, k) in chunk.iter().enumerate() {
                    if family_index(k.family()) == f {
                        run[m] = *k;
                        at[m] = i as u16;
                        m += 1;
                    }
                }
                self.classify_run(chain, cls, &run[..m], counters, |j, v| {
                    each(base + usize::from(at[j]), v)
                });
            }
        }
    }

    /// Classifies `run` (at most [`CHUNK`] keys of one family) with `cls`,
    /// counting the matched rules, and hands `run[j]`'s verdict to
    /// `each(j, verdict)`.
    #[inline(always)]
    fn classify_run<K: ClassifyKey>(
        &self,
        chain: Chain,
        cls: &Classifier,
        run: &[K],
        counters: &mut RuleCounters,
        mut each: impl FnMut(usize, Verdict),
    ) {
        if let (Some(c), Some(k0)) = (cls.constant(), run.first()) {
            // Every packet of the run gets the same rule (a chain with no
            // rule for this family, say): its counters, and those of the
            // counting rules before it, take the run's sums at once rather
            // than a dependent increment per packet.
            let packets = run.len() as u64;
            let bytes = run.iter().map(|k| u64::from(k.facts().len)).sum();
            for &id in &c.counted {
                counters.add_many(id, packets, bytes);
            }
            let first = self.verdict(chain, c.rule, k0);
            counters.add_many(first.rule, packets, bytes);
            if matches!(
                self.slot_actions.get(first.rule as usize),
                Some(SlotAction::Fixed(_))
            ) {
                for j in 0..run.len() {
                    each(j, first);
                }
            } else {
                // A reject's kind depends on each packet's protocol.
                for (j, key) in run.iter().enumerate() {
                    each(j, self.verdict(chain, c.rule, key));
                }
            }
            return;
        }
        let mut rules = [NO_RULE; CHUNK];
        cls.classify_chunk(run, &mut rules, |id, key| counters.add(id, key.facts().len));
        for (j, (key, &rule)) in run.iter().zip(&rules).enumerate() {
            let v = self.verdict(chain, rule, key);
            counters.add(v.rule, key.facts().len);
            each(j, v);
        }
    }

    /// Sums per-worker counters into a serialisable summary.
    pub fn summary<'a>(
        &self,
        workers: impl IntoIterator<Item = &'a RuleCounters>,
    ) -> FirewallSummary {
        let mut total = RuleCounters::new(self.counter_slots());
        for w in workers {
            total.accumulate(w);
        }
        let chains = Chain::ALL
            .iter()
            .map(|&c| {
                let slot = self.policy_slot(c) as usize;
                ChainSummary {
                    chain: c,
                    policy: self.policies[c.index()],
                    policy_packets: total.packets[slot],
                    policy_bytes: total.bytes[slot],
                    rules: self
                        .rules
                        .iter()
                        .enumerate()
                        .filter(|(_, r)| r.chain == c)
                        .map(|(i, r)| RuleSummary {
                            slot: i as u32,
                            line: r.line,
                            rule: r.text.clone(),
                            packets: total.packets[i],
                            bytes: total.bytes[i],
                        })
                        .collect(),
                }
            })
            .collect();
        FirewallSummary {
            source: self.source.clone(),
            stateful: self.stateful,
            chains,
            memory_bytes: self.stats.bytes,
        }
    }
}

/// The concrete reject for a packet. Never answers an ICMP error with an
/// ICMP error (RFC 1812 §4.3.2.7) nor a RST with a RST (RFC 9293 §3.10.7.1):
/// those are dropped.
fn reject_action<K: ClassifyKey>(with: RejectWith, key: &K) -> Action {
    let KeyFacts {
        is_v6,
        proto,
        tcp_flags,
        icmp_type,
        ..
    } = key.facts();
    let is_tcp = proto == 6;
    let icmp_error = match (is_v6, proto) {
        (false, 1) => matches!(icmp_type, 3 | 4 | 5 | 11 | 12),
        (true, 58) => icmp_type < 128,
        _ => false,
    };
    if icmp_error || (is_tcp && tcp_flags & 0x04 != 0) {
        return Action::Drop;
    }
    let unreach = |v4: u8, v6: u8| {
        if is_v6 {
            Action::RejectIcmp6(v6)
        } else {
            Action::RejectIcmp(v4)
        }
    };
    match with {
        RejectWith::Default if is_tcp => Action::RejectTcpReset,
        RejectWith::Default => unreach(3, 4),
        RejectWith::TcpReset if is_tcp => Action::RejectTcpReset,
        RejectWith::TcpReset => Action::Drop,
        RejectWith::Icmp(code) => unreach(code, 4),
        RejectWith::Icmp6(code) => unreach(3, code),
        RejectWith::Icmpx(r) => unreach(r.v4_code(), r.v6_code()),
    }
}

/// Counters of one rule in a summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleSummary {
    pub slot: u32,
    pub line: usize,
    pub rule: String,
    pub packets: u64,
    pub bytes: u64,
}

/// One chain in a summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainSummary {
    pub chain: Chain,
    pub policy: Policy,
    pub policy_packets: u64,
    pub policy_bytes: u64,
    pub rules: Vec<RuleSummary>,
}

/// What `fastfwd show firewall` prints (also as JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirewallSummary {
    pub source: String,
    pub stateful: bool,
    pub chains: Vec<ChainSummary>,
    pub memory_bytes: usize,
}

impl std::fmt::Display for FirewallSummary {
    /// The per-rule counters as `replay` and `show firewall` print them.
    fn fmt(&self, s: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(s, "firewall ({})", self.source)?;
        for chain in &self.chains {
            if chain.rules.is_empty() && chain.policy_packets == 0 {
                continue;
            }
            writeln!(
                s,
                "  chain {:<8} {:>6} {:>10} {:>12}  rule",
                chain.chain.name(),
                "line",
                "packets",
                "bytes"
            )?;
            for r in &chain.rules {
                writeln!(
                    s,
                    "  {:<14} {:>6} {:>10} {:>12}  {}",
                    "", r.line, r.packets, r.bytes, r.rule
                )?;
            }
            writeln!(
                s,
                "  {:<14} {:>6} {:>10} {:>12}  policy {}",
                "",
                "",
                chain.policy_packets,
                chain.policy_bytes,
                match chain.policy {
                    Policy::Accept => "accept",
                    Policy::Drop => "drop",
                }
            )?;
        }
        Ok(())
    }
}

/// The reference classifier: a linear first-match scan over the same rules.
/// Used by the property tests and as the benchmark's baseline.
#[derive(Debug, Clone)]
pub struct LinearFirewall {
    /// `[chain][family]`.
    rules: [[Vec<FlatRule>; 2]; 2],
    policies: [u32; 2],
}

impl LinearFirewall {
    /// The same rule set as [`Firewall::compile`] sees it.
    pub fn new(set: &RuleSet, ifaces: &InterfaceMap) -> Self {
        let f = |c: Chain| {
            [
                flatten(set, c, Family::V4, ifaces),
                flatten(set, c, Family::V6, ifaces),
            ]
        };
        let n = set.rule_count() as u32;
        LinearFirewall {
            rules: [f(Chain::Forward), f(Chain::Input)],
            policies: [n, n + 1],
        }
    }

    /// First terminal rule matching, or the policy slot; with the counting
    /// rules matched before it.
    pub fn classify(&self, chain: Chain, key: &PacketKey) -> (u32, Vec<u32>) {
        let mut counted = Vec::new();
        for r in &self.rules[chain.index()][family_index(key.family())] {
            if r.matches(key) {
                if r.terminal {
                    return (r.id, counted);
                }
                counted.push(r.id);
            }
        }
        (self.policies[chain.index()], counted)
    }

    /// First terminal rule only (the benchmark's loop).
    #[inline]
    pub fn first_match(&self, chain: Chain, key: &PacketKey) -> u32 {
        self.rules[chain.index()][family_index(key.family())]
            .iter()
            .find(|r| r.terminal && r.matches(key))
            .map_or(self.policies[chain.index()], |r| r.id)
    }
}
