//! Policy routing: which routing table decides a packet, as the kernel's
//! rules (`ip rule`) choose it.
//!
//! A [`FamilyPolicy`] is an ordered list of [`PolicyRule`]s, tried from the
//! first, and the routing tables they look up besides the main one (the
//! pipeline's FIB). A rule whose selectors (source and destination prefix,
//! input interface, possibly inverted) match the packet acts:
//!
//! - a lookup takes the table's longest match, unless the table has none,
//!   the match is a `throw` route, or it is a forwarding route no longer
//!   than the rule's `suppress_prefixlength`: then the next rule is tried;
//! - `goto` continues at a later rule;
//! - `unreachable` ends with no route, `blackhole` and `prohibit` with
//!   their discard.
//!
//! When every rule has been tried the packet has no route. This is the
//! kernel's `fib_rules_lookup` for a forwarded packet, whose mark is 0 and
//! which has no output interface (the compiler in the control plane has
//! already decided the selectors that depend on neither).
//!
//! The kernel's default rules (local, main, default) with an empty default
//! table compile to one unconditional lookup of main: [`Policy::main_only`],
//! which the worker checks once per chunk to keep its single batched
//! lookup. Host-bound traffic never reaches the rules: the local table's
//! part is the input stage's local-address check.

use crate::tables::{InterfaceId, NextHopId};
use fib::Lookup;
use fib::poptrie::{Poptrie, TrieKey};

/// Most rules per family.
pub const MAX_RULES: usize = 1024;
/// Most tables per family besides main.
pub const MAX_TABLES: usize = 64;

/// The input interface a rule selects (`iif`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputSelector {
    /// Any.
    Any,
    /// Packets received on this interface.
    Interface(InterfaceId),
    /// The host's own packets (`iif lo`): the route back of an ICMP error.
    Loopback,
    /// Packets in the VRF of this interface (the kernel's `l3mdev` rule,
    /// one per member): received on it, or the router's answers (ICMP
    /// errors, TCP resets) to packets received on it.
    Vrf(InterfaceId),
    /// A device fastfwd does not receive on: matches no packet it routes.
    Elsewhere,
}

/// What a matching rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleAction {
    /// Look up the main table.
    Main,
    /// Look up this policy table (index into the family's tables).
    Table(u16),
    /// Continue at this rule (index, after the current one).
    Goto(u16),
    /// The decision ends here: no route (`unreachable`), or the next-hop id
    /// of a discard (`blackhole`, `prohibit`).
    End(Option<NextHopId>),
}

/// One rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyRule<A> {
    /// `from`: network address and length (`None`: any).
    pub src: Option<(A, u8)>,
    /// `to`: network address and length (`None`: any).
    pub dst: Option<(A, u8)>,
    /// `iif`.
    pub iif: InputSelector,
    /// `not`: the rule acts where its selectors do not all match.
    pub invert: bool,
    /// What it does.
    pub action: RuleAction,
    /// `suppress_prefixlength N`: a forwarding result of length N or less
    /// is passed over.
    pub suppress_prefixlen: Option<u8>,
}

/// The packet fields rules select on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleKey<A> {
    /// Source address; `None` for the host's own ICMP errors, which the
    /// kernel routes before it chooses their source (an IPv4 `from` rule
    /// then sees 0.0.0.0, an IPv6 one matches nothing).
    pub src: Option<A>,
    /// Destination address.
    pub dst: A,
    /// Input interface; `None`: the host's own packet.
    pub iif: Option<InterfaceId>,
    /// The interface whose VRF the packet is in: its input interface, or
    /// for the router's answer to a packet, that packet's.
    pub vrf: Option<InterfaceId>,
}

/// Why a policy was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// More rules than [`MAX_RULES`].
    #[error("{0} rules: at most {MAX_RULES} per family")]
    TooManyRules(usize),
    /// More tables than [`MAX_TABLES`].
    #[error("{0} tables besides main: at most {MAX_TABLES} per family")]
    TooManyTables(usize),
    /// A rule names a table or a rule that is not there.
    #[error("rule {0}: its table or goto target is out of range or not after it")]
    BadReference(usize),
}

/// One family's rules and the tables they look up besides main.
#[derive(Debug, Clone)]
pub struct FamilyPolicy<A: TrieKey> {
    rules: Vec<PolicyRule<A>>,
    tables: Vec<Poptrie<A>>,
    main_only: bool,
    prefilter: Option<Prefilter<A>>,
}

/// Which packets can match a rule before the first one that matches
/// every packet (`start`), when each of those selects without `not`: a
/// packet whose source is in none of their `from` prefixes, whose
/// destination is in none of the `to` prefixes of those without `from`,
/// and that came in on none of the interfaces of those with neither, is
/// decided from `start` on. With source routing (many `from` rules, then
/// main) that is nearly every packet, for two trie lookups instead of a
/// pass over every rule.
#[derive(Debug, Clone)]
struct Prefilter<A: TrieKey> {
    start: usize,
    src: Option<Poptrie<A>>,
    dst: Option<Poptrie<A>>,
    /// Interfaces an `iif`-only rule selects, a bit each.
    iifs: [u64; 4],
    /// A rule selects `iif lo` alone (the host's own packets).
    loopback: bool,
    /// Interfaces whose VRF a rule selects alone, a bit each.
    vrfs: [u64; 4],
}

/// The selectors of the rules before the first one that matches every
/// packet, when each of those selects without `not`: what a packet must
/// avoid to be decided from that rule on ([`Prefilter`]).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Selective<A> {
    /// The first rule that matches every packet.
    start: usize,
    /// The `from` prefixes of the rules before it.
    src: Vec<(A, u8)>,
    /// The `to` prefixes of those without `from`.
    dst: Vec<(A, u8)>,
    /// The `iif` interfaces of those with neither.
    iifs: [u64; 4],
    /// One of those selects `iif lo`.
    loopback: bool,
    /// The interfaces whose VRF one of those selects.
    vrfs: [u64; 4],
}

impl<A: TrieKey> Selective<A> {
    fn of(rules: &[PolicyRule<A>]) -> Option<Self> {
        let start = rules
            .iter()
            .position(|r| {
                r.src.is_none() && r.dst.is_none() && r.iif == InputSelector::Any && !r.invert
            })
            .unwrap_or(rules.len());
        let before = &rules[..start];
        if start == 0 || before.iter().any(|r| r.invert) {
            return None;
        }
        let mut sel = Self {
            start,
            src: Vec::new(),
            dst: Vec::new(),
            iifs: [0; 4],
            loopback: false,
            vrfs: [0; 4],
        };
        for r in before {
            match (r.src, r.dst, r.iif) {
                (Some(p), _, _) => sel.src.push(p),
                (None, Some(p), _) => sel.dst.push(p),
                (None, None, InputSelector::Interface(i)) => {
                    sel.iifs[usize::from(i / 64) % 4] |= 1 << (i % 64);
                }
                (None, None, InputSelector::Loopback) => sel.loopback = true,
                (None, None, InputSelector::Vrf(i)) => {
                    sel.vrfs[usize::from(i / 64) % 4] |= 1 << (i % 64);
                }
                (None, None, InputSelector::Elsewhere) => {}
                (None, None, InputSelector::Any) => return None,
            }
        }
        Some(sel)
    }
}

impl<A: TrieKey> Prefilter<A> {
    fn new(rules: &[PolicyRule<A>]) -> Option<Self> {
        let sel = Selective::of(rules)?;
        let trie = |v: &[(A, u8)]| {
            (!v.is_empty()).then(|| {
                Poptrie::from_routes(v.iter().map(|&(a, l)| (A::prefix(a, l), 0)).collect::<Vec<(
                    A::Prefix,
                    NextHopId,
                )>>(
                ))
            })
        };
        Some(Self {
            start: sel.start,
            src: trie(&sel.src),
            dst: trie(&sel.dst),
            iifs: sel.iifs,
            loopback: sel.loopback,
            vrfs: sel.vrfs,
        })
    }

    /// Whether `key` can match a rule before `start`.
    #[inline]
    fn candidate(&self, key: &RuleKey<A>) -> bool {
        let src = key.src.unwrap_or(key.dst.masked(0));
        self.src.as_ref().is_some_and(|t| t.lookup(src).is_some())
            || self
                .dst
                .as_ref()
                .is_some_and(|t| t.lookup(key.dst).is_some())
            || match key.iif {
                Some(i) => self.iifs[usize::from(i / 64) % 4] & (1 << (i % 64)) != 0,
                None => self.loopback || key.src.is_none(),
            }
            || key
                .vrf
                .is_some_and(|i| self.vrfs[usize::from(i / 64) % 4] & (1 << (i % 64)) != 0)
    }
}

impl<A: TrieKey> Default for FamilyPolicy<A> {
    /// The kernel's defaults: main decides every packet.
    fn default() -> Self {
        Self {
            rules: vec![PolicyRule {
                src: None,
                dst: None,
                iif: InputSelector::Any,
                invert: false,
                action: RuleAction::Main,
                suppress_prefixlen: None,
            }],
            tables: Vec::new(),
            main_only: true,
            prefilter: None,
        }
    }
}

impl<A: TrieKey> FamilyPolicy<A> {
    /// Checks and holds `rules` over `tables`.
    pub fn new(
        mut rules: Vec<PolicyRule<A>>,
        tables: Vec<Poptrie<A>>,
    ) -> Result<Self, PolicyError> {
        if rules.len() > MAX_RULES {
            return Err(PolicyError::TooManyRules(rules.len()));
        }
        if tables.len() > MAX_TABLES {
            return Err(PolicyError::TooManyTables(tables.len()));
        }
        let count = rules.len();
        for (i, r) in rules.iter_mut().enumerate() {
            // Host bits cleared, and a zero length is no selector.
            let norm =
                |p: Option<(A, u8)>| p.filter(|&(_, l)| l > 0).map(|(a, l)| (a.masked(l), l));
            r.src = norm(r.src);
            r.dst = norm(r.dst);
            let ok = match r.action {
                RuleAction::Table(t) => usize::from(t) < tables.len(),
                RuleAction::Goto(g) => usize::from(g) > i && usize::from(g) <= count,
                RuleAction::Main | RuleAction::End(_) => true,
            };
            if !ok {
                return Err(PolicyError::BadReference(i));
            }
        }
        let main_only = matches!(
            rules.as_slice(),
            [PolicyRule {
                src: None,
                dst: None,
                iif: InputSelector::Any,
                invert: false,
                action: RuleAction::Main,
                suppress_prefixlen: None,
            }]
        );
        let prefilter = if main_only {
            None
        } else {
            Prefilter::new(&rules)
        };
        Ok(Self {
            rules,
            tables,
            main_only,
            prefilter,
        })
    }

    /// The first rule `key` can match: past every rule before the first
    /// that matches every packet when it can match none of them (see
    /// `Prefilter`), else 0.
    #[inline]
    pub fn first_candidate(&self, key: &RuleKey<A>) -> usize {
        match &self.prefilter {
            Some(p) if !p.candidate(key) => p.start,
            _ => 0,
        }
    }

    /// The index of the first rule that matches every packet, when it is
    /// a plain lookup of main: packets that start there
    /// ([`first_candidate`](Self::first_candidate)) can share one batched
    /// lookup, and only its misses and `throw`s go on to the next rule.
    pub fn main_at(&self) -> Option<usize> {
        let p = self.prefilter.as_ref()?;
        let r = self.rules.get(p.start)?;
        (r.action == RuleAction::Main && r.suppress_prefixlen.is_none()).then_some(p.start)
    }

    /// Which transit packets main alone decides, for a forwarding path
    /// that holds main and no other table (the XDP program): see
    /// [`FastPath`].
    pub fn fast_path(&self) -> FastPath<A> {
        if self.main_only {
            return FastPath::MainOnly;
        }
        let Some(sel) = Selective::of(&self.rules) else {
            return FastPath::Rules;
        };
        if self.main_at() != Some(sel.start) {
            return FastPath::Rules;
        }
        let mut ifaces = Vec::new();
        for i in 0u16..256 {
            let bit = |m: &[u64; 4]| m[usize::from(i / 64)] & (1 << (i % 64)) != 0;
            if bit(&sel.iifs) || bit(&sel.vrfs) {
                ifaces.push(i);
            }
        }
        FastPath::Filtered {
            src: sel.src,
            dst: sel.dst,
            ifaces,
        }
    }

    /// Whether next-hop id `id` is a `throw` route (the next rule decides).
    #[inline]
    pub fn is_throw(adjacencies: &[(u32, u32)], id: NextHopId) -> bool {
        adjacencies.get(id as usize) == Some(&(crate::Discard::Throw.code(), 0))
    }

    /// Whether every packet is decided by the main table alone.
    #[inline(always)]
    pub fn main_only(&self) -> bool {
        self.main_only
    }

    /// The rules, in the order they are tried.
    pub fn rules(&self) -> &[PolicyRule<A>] {
        &self.rules
    }

    /// The tables besides main, by [`RuleAction::Table`] index.
    pub fn tables(&self) -> &[Poptrie<A>] {
        &self.tables
    }

    /// The route of `key` (its next-hop id), `None` for no route.
    /// `adjacencies` tells a `throw` route and the discards apart (the
    /// tables' [`Tables`](crate::Tables) field of that name).
    ///
    /// At most one pass over the rules (`goto` only jumps forward), one
    /// lookup per matching lookup rule; no allocation.
    pub fn route<F: Lookup<A>>(
        &self,
        main: &F,
        adjacencies: &[(u32, u32)],
        key: &RuleKey<A>,
    ) -> Option<NextHopId> {
        self.route_from(main, adjacencies, key, self.first_candidate(key))
    }

    /// [`route`](Self::route) from rule `start` on (the rules before it
    /// cannot match `key`).
    pub fn route_from<F: Lookup<A>>(
        &self,
        main: &F,
        adjacencies: &[(u32, u32)],
        key: &RuleKey<A>,
        start: usize,
    ) -> Option<NextHopId> {
        let mut i = start;
        while let Some(r) = self.rules.get(i) {
            i += 1;
            if r.matches(key) == r.invert {
                continue;
            }
            let found = match (r.action, r.suppress_prefixlen) {
                (RuleAction::Goto(g), _) => {
                    i = usize::from(g);
                    continue;
                }
                (RuleAction::End(v), _) => return v,
                (RuleAction::Main, None) => main.lookup(key.dst).map(|id| (id, u8::MAX)),
                (RuleAction::Main, Some(_)) => main.lookup_len(key.dst),
                (RuleAction::Table(t), None) => self
                    .tables
                    .get(usize::from(t))
                    .and_then(|t| t.lookup(key.dst))
                    .map(|id| (id, u8::MAX)),
                (RuleAction::Table(t), Some(_)) => self
                    .tables
                    .get(usize::from(t))
                    .and_then(|t| t.lookup_len(key.dst)),
            };
            let Some((id, len)) = found else { continue };
            // count 0: a discard, whose code is the first field.
            let discard = match adjacencies.get(id as usize) {
                Some(&(code, 0)) => Some(code),
                _ => None,
            };
            if discard == Some(crate::Discard::Throw.code()) {
                continue;
            }
            if discard.is_none() && r.suppress_prefixlen.is_some_and(|n| len <= n) {
                continue;
            }
            return Some(id);
        }
        None
    }
}

impl<A: TrieKey> PolicyRule<A> {
    /// Whether every selector matches (before `not`).
    #[inline]
    fn matches(&self, key: &RuleKey<A>) -> bool {
        // `masked(0)` is the family's zero address.
        self.src.is_none_or(|(s, l)| match key.src {
            Some(a) => a.masked(l) == s,
            None => A::BITS == 32 && s == key.dst.masked(0),
        }) && self.dst.is_none_or(|(d, l)| key.dst.masked(l) == d)
            && match self.iif {
                InputSelector::Any => true,
                InputSelector::Interface(i) => key.iif == Some(i),
                InputSelector::Loopback => key.iif.is_none(),
                InputSelector::Vrf(i) => key.vrf == Some(i),
                InputSelector::Elsewhere => false,
            }
    }
}

/// Which transit packets the main table alone decides
/// ([`FamilyPolicy::fast_path`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FastPath<A> {
    /// Every packet (the kernel's default rules).
    MainOnly,
    /// A packet whose source is in none of `src`, whose destination is in
    /// none of `dst`, and that came in on none of `ifaces` (an `iif` rule
    /// or the VRF of an `l3mdev` one) is routed by the main table; where
    /// main has no route or a `throw` route, the rules after main's
    /// decide. Every other packet is decided by the rules from the first.
    Filtered {
        /// Source prefixes (address, length).
        src: Vec<(A, u8)>,
        /// Destination prefixes.
        dst: Vec<(A, u8)>,
        /// Input interfaces.
        ifaces: Vec<InterfaceId>,
    },
    /// No such set: every packet is decided by the rules (a rule with
    /// `not`, or a first rule matching every packet that is not a plain
    /// lookup of main).
    Rules,
}

/// Both families' rules.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// IPv4.
    pub v4: FamilyPolicy<u32>,
    /// IPv6.
    pub v6: FamilyPolicy<u128>,
}

impl Policy {
    /// Whether the main table alone decides every packet of both
    /// families.
    pub fn main_only(&self) -> bool {
        self.v4.main_only() && self.v6.main_only()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Discard;
    use fib::reference::ReferenceFib4;
    use fib::{Address, RouteTable};
    use proptest::prelude::*;

    // Next-hop ids of the adjacency table the tests use.
    const THROW: NextHopId = 0;
    const BLACKHOLE: NextHopId = 1;
    const PROHIBIT: NextHopId = 2;
    const ADJ: [(u32, u32); 8] = [
        (4, 0), // throw
        (1, 0), // blackhole
        (3, 0), // prohibit
        (0, 1),
        (1, 1),
        (2, 1),
        (3, 1),
        (4, 1),
    ];

    /// The kernel's `fib_rules_lookup` as written there: rules by
    /// priority, `goto` to the first rule of the target priority, table
    /// lookups over plain route lists.
    #[derive(Debug)]
    struct Model {
        /// (priority, selectors, verb, suppress).
        rules: Vec<(u32, Sel, Verb, Option<u8>)>,
        main: Vec<(u32, u8, NextHopId)>,
        tables: Vec<Vec<(u32, u8, NextHopId)>>,
    }

    #[derive(Debug, Clone, Copy)]
    struct Sel {
        src: Option<(u32, u8)>,
        dst: Option<(u32, u8)>,
        iif: Option<InterfaceId>,
        /// The packet is in this interface's VRF (an `l3mdev` rule's
        /// expansion).
        vrf: Option<InterfaceId>,
        invert: bool,
    }

    #[derive(Debug, Clone, Copy)]
    enum Verb {
        Main,
        Table(u16),
        GotoPriority(u32),
        Unreachable,
        Blackhole,
        Prohibit,
    }

    fn longest(routes: &[(u32, u8, NextHopId)], a: u32) -> Option<(NextHopId, u8)> {
        routes
            .iter()
            .filter(|&&(n, l, _)| a.masked(l) == n.masked(l))
            .max_by_key(|r| r.1)
            .map(|&(_, l, id)| (id, l))
    }

    impl Model {
        /// The route of a packet received on `iif` (`None`: the router's
        /// answer to one received on `vrf`, which has no source yet).
        fn route(
            &self,
            src: Option<u32>,
            dst: u32,
            iif: Option<InterfaceId>,
            vrf: InterfaceId,
        ) -> Option<NextHopId> {
            // An IPv4 `from` rule sees 0.0.0.0 for an answer.
            let src = src.unwrap_or(0);
            let mut i = 0;
            while i < self.rules.len() {
                let (_, sel, verb, suppress) = self.rules[i];
                i += 1;
                let within = |p: Option<(u32, u8)>, a: u32| {
                    p.is_none_or(|(n, l)| a.masked(l) == n.masked(l))
                };
                let m = within(sel.src, src)
                    && within(sel.dst, dst)
                    && sel.iif.is_none_or(|x| Some(x) == iif)
                    && sel.vrf.is_none_or(|x| x == vrf);
                if m == sel.invert {
                    continue;
                }
                let table = match verb {
                    Verb::GotoPriority(p) => {
                        // Unresolved (no rule of that priority): passed over.
                        if let Some(j) = self.rules.iter().position(|r| r.0 == p) {
                            i = j;
                        }
                        continue;
                    }
                    Verb::Unreachable => return None,
                    Verb::Blackhole => return Some(BLACKHOLE),
                    Verb::Prohibit => return Some(PROHIBIT),
                    Verb::Main => &self.main,
                    Verb::Table(t) => &self.tables[usize::from(t)],
                };
                match longest(table, dst) {
                    None => continue,
                    Some((THROW, _)) => continue,
                    Some((id, l)) if id > PROHIBIT && suppress.is_some_and(|n| l <= n) => continue,
                    Some((id, _)) => return Some(id),
                }
            }
            None
        }

        /// Compiles it as the control plane does: priorities to indices.
        fn compile(&self) -> (FamilyPolicy<u32>, ReferenceFib4) {
            let mut rules = Vec::new();
            for &(_, sel, verb, suppress) in &self.rules {
                let action = match verb {
                    Verb::Main => RuleAction::Main,
                    Verb::Table(t) => RuleAction::Table(t),
                    Verb::GotoPriority(p) => match self.rules.iter().position(|r| r.0 == p) {
                        Some(j) => RuleAction::Goto(j as u16),
                        None => RuleAction::Goto(rules.len() as u16 + 1),
                    },
                    Verb::Unreachable => RuleAction::End(None),
                    Verb::Blackhole => RuleAction::End(Some(BLACKHOLE)),
                    Verb::Prohibit => RuleAction::End(Some(PROHIBIT)),
                };
                rules.push(PolicyRule {
                    src: sel.src,
                    dst: sel.dst,
                    iif: match (sel.iif, sel.vrf) {
                        (_, Some(v)) => InputSelector::Vrf(v),
                        (Some(i), None) => InputSelector::Interface(i),
                        (None, None) => InputSelector::Any,
                    },
                    invert: sel.invert,
                    action,
                    suppress_prefixlen: suppress,
                });
            }
            let trie = |routes: &[(u32, u8, NextHopId)]| {
                Poptrie::from_routes(routes.iter().map(|&(n, l, id)| (u32::prefix(n, l), id)))
            };
            let mut main = ReferenceFib4::new();
            for &(n, l, id) in &self.main {
                main.insert(u32::prefix(n, l), id);
            }
            let tables = self.tables.iter().map(|t| trie(t)).collect();
            (FamilyPolicy::new(rules, tables).unwrap(), main)
        }
    }

    // Addresses from a small space, so prefixes, rules and packets meet.
    fn addr() -> impl Strategy<Value = u32> {
        (0u32..16).prop_map(|x| 0xc612_0000 | (x << 12))
    }

    fn prefix() -> impl Strategy<Value = (u32, u8)> {
        (
            addr(),
            prop::sample::select(vec![0u8, 8, 16, 17, 18, 20, 24, 32]),
        )
            .prop_map(|(a, l)| (a.masked(l), l))
    }

    fn routes() -> impl Strategy<Value = Vec<(u32, u8, NextHopId)>> {
        prop::collection::vec((prefix(), 0u32..8), 0..8).prop_map(|v| {
            // One route per prefix, as a table holds.
            let mut out: Vec<(u32, u8, NextHopId)> = Vec::new();
            for ((n, l), id) in v {
                if !out.iter().any(|r| r.0 == n && r.1 == l) {
                    out.push((n, l, id));
                }
            }
            out
        })
    }

    /// An input selector: none, an interface, or an interface's VRF.
    fn input() -> impl Strategy<Value = (Option<InterfaceId>, Option<InterfaceId>)> {
        prop_oneof![
            6 => Just((None, None)),
            1 => (0u16..3).prop_map(|i| (Some(i), None)),
            1 => (0u16..3).prop_map(|i| (None, Some(i))),
        ]
    }

    fn sel() -> impl Strategy<Value = Sel> {
        (
            prop::option::weighted(0.4, prefix()),
            prop::option::weighted(0.4, prefix()),
            input(),
            prop::bool::weighted(0.1),
        )
            .prop_map(|(src, dst, (iif, vrf), invert)| Sel {
                src,
                dst,
                iif,
                vrf,
                invert,
            })
    }

    fn model() -> impl Strategy<Value = Model> {
        let verb = prop_oneof![
            3 => Just(Verb::Main),
            4 => (0u16..3).prop_map(Verb::Table),
            1 => (0u32..12).prop_map(Verb::GotoPriority),
            1 => Just(Verb::Unreachable),
            1 => Just(Verb::Blackhole),
            1 => Just(Verb::Prohibit),
        ];
        let rule = (sel(), verb, prop::option::weighted(0.2, 0u8..25));
        (
            prop::collection::vec(rule, 0..10),
            routes(),
            prop::collection::vec(routes(), 3),
        )
            .prop_map(|(rules, main, tables)| {
                // Priorities rise with the index; a goto only jumps forward
                // (the kernel refuses others).
                let rules = rules
                    .into_iter()
                    .enumerate()
                    .map(|(i, (sel, verb, sup))| {
                        let p = i as u32;
                        let verb = match verb {
                            Verb::GotoPriority(t) if t <= p => Verb::Main,
                            v => v,
                        };
                        (p, sel, verb, sup)
                    })
                    .collect();
                Model {
                    rules,
                    main,
                    tables,
                }
            })
    }

    /// Selective rules (each with a selector, none inverted), then an
    /// unconditional lookup of main, then more rules: the shape whose
    /// packets the prefilter sends past the selective rules.
    fn source_routing_model() -> impl Strategy<Value = Model> {
        // Narrow selectors: each matches some packets, not all.
        let narrow = || {
            (addr(), prop::sample::select(vec![20u8, 24, 32])).prop_map(|(a, l)| (a.masked(l), l))
        };
        let selective = (
            prop::option::weighted(0.4, narrow()),
            prop::option::weighted(0.4, narrow()),
            input(),
        )
            .prop_filter("a selector", |s| {
                s.0.is_some() || s.1.is_some() || s.2 != (None, None)
            })
            .prop_map(|(src, dst, (iif, vrf))| Sel {
                src,
                dst,
                iif,
                vrf,
                invert: false,
            });
        // Mostly verbs that decide, so a rule wrongly passed over shows.
        let verb = prop_oneof![
            2 => (0u16..3).prop_map(Verb::Table),
            2 => Just(Verb::Prohibit),
            1 => Just(Verb::Blackhole),
            1 => Just(Verb::Main),
        ];
        let any = Sel {
            src: None,
            dst: None,
            iif: None,
            vrf: None,
            invert: false,
        };
        (
            prop::collection::vec(
                (selective, verb, prop::option::weighted(0.2, 0u8..25)),
                1..8,
            ),
            (0u16..3, prop::option::weighted(0.3, 0u8..25)),
            routes(),
            prop::collection::vec(routes(), 3),
        )
            .prop_map(move |(sel_rules, (after, sup), main, tables)| {
                let mut rules: Vec<(u32, Sel, Verb, Option<u8>)> = sel_rules
                    .into_iter()
                    .enumerate()
                    .map(|(i, (s, v, sup))| (i as u32, s, v, sup))
                    .collect();
                let n = rules.len() as u32;
                rules.push((n, any, Verb::Main, None));
                rules.push((n + 1, any, Verb::Table(after), sup));
                Model {
                    rules,
                    main,
                    tables,
                }
            })
    }

    /// A packet received on `iif` from `src`, or (`answer`) the router's
    /// answer to one, which has no source or input interface yet and
    /// is in `iif`'s VRF: its key, source and input interface.
    fn packet(
        src: u32,
        dst: u32,
        iif: InterfaceId,
        answer: bool,
    ) -> (RuleKey<u32>, Option<u32>, Option<InterfaceId>) {
        let (src, on) = if answer {
            (None, None)
        } else {
            (Some(src), Some(iif))
        };
        let key = RuleKey {
            src,
            dst,
            iif: on,
            vrf: Some(iif),
        };
        (key, src, on)
    }

    proptest! {
        #[test]
        fn packets_past_the_selective_rules_route_as_the_kernels_loop(
            m in source_routing_model(),
            packets in prop::collection::vec((addr(), addr(), 0u16..3, prop::bool::weighted(0.2)), 1..32),
        ) {
            let (policy, main) = m.compile();
            prop_assert!(policy.main_at().is_some());
            for (src, dst, iif, answer) in packets {
                let (key, src, on) = packet(src, dst, iif, answer);
                let start = policy.first_candidate(&key);
                prop_assert_eq!(
                    policy.route_from(&main, &ADJ, &key, start),
                    m.route(src, dst, on, iif),
                    "from {:?} to {:#x} iif {:?} in the VRF of {}", src, dst, on, iif
                );
            }
        }

        /// What a forwarding path holding main alone (the XDP program)
        /// does with [`FamilyPolicy::fast_path`]: a received packet the
        /// filter does not select, whose main route is not `throw`, is
        /// routed by that route; the kernel must agree.
        #[test]
        fn packets_the_fast_path_leaves_to_main_route_as_the_kernel_does(
            m in prop_oneof![source_routing_model(), model()],
            packets in prop::collection::vec((addr(), addr(), 0u16..3), 1..32),
        ) {
            let (policy, main) = m.compile();
            let fast = policy.fast_path();
            if policy.main_at().is_some() {
                let filtered = !matches!(fast, FastPath::Rules);
                prop_assert!(filtered, "main is reached unconditionally: {:?}", fast);
            }
            for (src, dst, iif) in packets {
                let selected = match &fast {
                    FastPath::Rules => true,
                    FastPath::MainOnly => false,
                    FastPath::Filtered { src: s, dst: d, ifaces } => {
                        s.iter().any(|&(a, l)| src.masked(l) == a)
                            || d.iter().any(|&(a, l)| dst.masked(l) == a)
                            || ifaces.contains(&iif)
                    }
                };
                let Some(id) = main.lookup(dst) else { continue };
                if selected || FamilyPolicy::<u32>::is_throw(&ADJ, id) {
                    continue;
                }
                prop_assert_eq!(
                    Some(id),
                    m.route(Some(src), dst, Some(iif), iif),
                    "from {:#x} to {:#x} iif {}: {:?}", src, dst, iif, fast
                );
            }
        }

        #[test]
        fn rules_route_as_the_kernels_rule_lookup(
            m in model(),
            packets in prop::collection::vec((addr(), addr(), 0u16..3, prop::bool::weighted(0.2)), 1..32),
        ) {
            let (policy, main) = m.compile();
            for (src, dst, iif, answer) in packets {
                let (key, src, on) = packet(src, dst, iif, answer);
                prop_assert_eq!(
                    policy.route(&main, &ADJ, &key),
                    m.route(src, dst, on, iif),
                    "from {:?} to {:#x} iif {:?} in the VRF of {}", src, dst, on, iif
                );
            }
        }
    }

    #[test]
    fn the_fast_path_names_what_rules_before_main_select() {
        let rule = |src: Option<(u32, u8)>, dst, iif, invert, action| PolicyRule {
            src,
            dst,
            iif,
            invert,
            action,
            suppress_prefixlen: None,
        };
        let main = rule(None, None, InputSelector::Any, false, RuleAction::Main);
        let from = |a, l| {
            rule(
                Some((a, l)),
                None,
                InputSelector::Any,
                false,
                RuleAction::Table(0),
            )
        };
        let t = || vec![Poptrie::from_routes([(u32::prefix(0x0a00_0000, 8), 3)])];
        assert_eq!(Policy::default().v4.fast_path(), FastPath::MainOnly);
        // Source rules, a destination rule, an iif rule and a VRF, then main.
        let p = FamilyPolicy::new(
            vec![
                from(0xc612_0a00, 24),
                rule(
                    None,
                    Some((0x0a00_0000, 8)),
                    InputSelector::Vrf(2),
                    false,
                    RuleAction::End(None),
                ),
                rule(
                    None,
                    None,
                    InputSelector::Interface(1),
                    false,
                    RuleAction::Table(0),
                ),
                rule(
                    None,
                    None,
                    InputSelector::Vrf(3),
                    false,
                    RuleAction::Table(0),
                ),
                rule(
                    Some((0x0b00_0000, 8)),
                    Some((0x0c00_0000, 8)),
                    InputSelector::Any,
                    false,
                    RuleAction::Table(0),
                ),
                main,
                from(0x0d00_0000, 8),
            ],
            t(),
        )
        .unwrap();
        assert_eq!(
            p.fast_path(),
            FastPath::Filtered {
                src: vec![(0xc612_0a00, 24), (0x0b00_0000, 8)],
                dst: vec![(0x0a00_0000, 8)],
                ifaces: vec![1, 3],
            },
            "a rule with a source is filtered by its source alone; rules after main are not"
        );
        // A rule with `not` before main: no filter.
        let p = FamilyPolicy::new(
            vec![
                rule(
                    Some((0xc612_0a00, 24)),
                    None,
                    InputSelector::Any,
                    true,
                    RuleAction::Table(0),
                ),
                main,
            ],
            t(),
        )
        .unwrap();
        assert_eq!(p.fast_path(), FastPath::Rules);
        // The first rule matching every packet looks up another table.
        let any_table = rule(None, None, InputSelector::Any, false, RuleAction::Table(0));
        let p = FamilyPolicy::new(vec![from(0xc612_0a00, 24), any_table, main], t()).unwrap();
        assert_eq!(p.fast_path(), FastPath::Rules);
        // Main with suppress_prefixlength: no filter.
        let mut suppressed = main;
        suppressed.suppress_prefixlen = Some(0);
        let p = FamilyPolicy::new(vec![from(0xc612_0a00, 24), suppressed], t()).unwrap();
        assert_eq!(p.fast_path(), FastPath::Rules);
    }

    #[test]
    fn the_default_policy_is_main_alone() {
        let p = Policy::default();
        assert!(p.main_only());
        let mut main = ReferenceFib4::new();
        main.insert(u32::prefix(0x0a00_0000, 8), 5);
        let key = RuleKey {
            src: Some(1),
            dst: 0x0a01_0203,
            iif: Some(0),
            vrf: Some(0),
        };
        assert_eq!(p.v4.route(&main, &ADJ, &key), Some(5));
    }

    #[test]
    fn a_source_rule_to_a_blackhole_table_discards_only_its_source() {
        // ip rule add from 198.18.10.0/24 lookup 100 pref 100
        // ip route add blackhole 198.19.10.0/24 table 100
        let t100 = Poptrie::from_routes([(u32::prefix(0xc613_0a00, 24), BLACKHOLE)]);
        let rules = vec![
            PolicyRule {
                src: Some((0xc612_0a00, 24)),
                dst: None,
                iif: InputSelector::Any,
                invert: false,
                action: RuleAction::Table(0),
                suppress_prefixlen: None,
            },
            PolicyRule {
                src: None,
                dst: None,
                iif: InputSelector::Any,
                invert: false,
                action: RuleAction::Main,
                suppress_prefixlen: None,
            },
        ];
        let p = FamilyPolicy::new(rules, vec![t100]).unwrap();
        assert!(!p.main_only());
        let mut main = ReferenceFib4::new();
        main.insert(u32::prefix(0xc613_0000, 16), 5);
        let from = |src: u32| RuleKey {
            src: Some(src),
            dst: 0xc613_0a01,
            iif: Some(0),
            vrf: Some(0),
        };
        assert_eq!(p.route(&main, &ADJ, &from(0xc612_0a05)), Some(BLACKHOLE));
        assert_eq!(p.route(&main, &ADJ, &from(0xc612_0b05)), Some(5));
        // The host's own ICMP errors have no source yet: main.
        let own = RuleKey {
            src: None,
            dst: 0xc613_0a01,
            iif: None,
            vrf: None,
        };
        assert_eq!(p.route(&main, &ADJ, &own), Some(5));
        assert_eq!(
            Discard::from_code(ADJ[BLACKHOLE as usize].0),
            Some(Discard::Blackhole)
        );
    }

    #[test]
    fn bad_references_are_refused() {
        let rule = |action| PolicyRule::<u32> {
            src: None,
            dst: None,
            iif: InputSelector::Any,
            invert: false,
            action,
            suppress_prefixlen: None,
        };
        assert_eq!(
            FamilyPolicy::new(vec![rule(RuleAction::Table(0))], vec![]).unwrap_err(),
            PolicyError::BadReference(0)
        );
        assert_eq!(
            FamilyPolicy::new(
                vec![rule(RuleAction::Main), rule(RuleAction::Goto(1))],
                vec![]
            )
            .unwrap_err(),
            PolicyError::BadReference(1)
        );
        let many = vec![rule(RuleAction::Main); MAX_RULES + 1];
        assert!(matches!(
            FamilyPolicy::new(many, vec![]),
            Err(PolicyError::TooManyRules(_))
        ));
    }
}
