//! The kernel's policy routing (`ip rule`), compiled: `compile` turns
//! the rules and the tables they look up into the pipeline's
//! [`Policy`], which both engines route by (the XDP engine by handing
//! such packets to the pipeline). Which rules fastfwd evaluates as the
//! kernel does, and the naming of those it cannot ([`crate::rule::unmodelled`]), are
//! the RIB's ([`crate::rule`]).

use crate::Decision;
use crate::event::{RT_TABLE_LOCAL, RT_TABLE_MAIN};
use crate::kernel::KernelState;
use crate::rule::{KernelRule, RuleVerb};
use fib::poptrie::{Poptrie, TrieKey};
use pipeline::{
    Discard, FamilyPolicy, InputSelector, InterfaceId, NextHopId, Policy, PolicyRule, RouteTarget,
    RuleAction, TableError,
};
use std::collections::HashMap;
use wire::Cidr;

/// Compiles the kernel's rules, and the tables they look up, into the
/// pipeline's [`Policy`], as the kernel evaluates them for a forwarded
/// packet (`fib_rules_lookup`):
///
/// - a selector that decides the match for every forwarded packet (see
///   `never_for_transit`) is applied here; a rule that can
///   never match, a `nop`, a lookup of local (the host's addresses are
///   handed over before routing) or of a table with no route of the family,
///   and a `goto` to a priority no rule has, always pass to the next rule
///   and are left out;
/// - `iif NAME` selects the interfaces the kernel's rules of the family
///   see as its link NAME (a port's untagged one, a kernel VLAN device's
///   VLAN; for IPv6 every member of a VRF device and none for a member:
///   `iif_of`), else no packet fastfwd receives; for several, one rule
///   each (`not` over several is refused, naming the rule);
/// - `goto P` jumps to the first rule of priority P;
/// - `unreachable` ends with no route, `blackhole` and `prohibit` with
///   their discard (the ICMP errors the kernel sends for each);
/// - each looked-up table is built as main is: per prefix, the route of the
///   lowest metric, used only if all its next hops leave through fastfwd's
///   interfaces (`by_ifindex`).
///
/// Rules of one priority are taken in the order the mirror sorts them
/// (the kernel keeps insertion order). `intern` numbers route targets.
pub(crate) fn compile(
    kernel: &KernelState,
    iif_of: &dyn Fn(&str, bool) -> Vec<InterfaceId>,
    by_ifindex: &HashMap<u32, InterfaceId>,
    intern: &mut dyn FnMut(&RouteTarget) -> Result<NextHopId, TableError>,
) -> Result<(Policy, Vec<String>), String> {
    let mut warnings = Vec::new();
    let mut c = Compiler {
        kernel,
        iif_of,
        by_ifindex,
        intern,
        warnings: &mut warnings,
    };
    let v4 = c.family(false, |p| match p {
        Cidr::V4(p) => Some((*p, p.addr(), p.prefix_len())),
        Cidr::V6(_) => None,
    })?;
    let v6 = c.family(true, |p| match p {
        Cidr::V6(p) => Some((*p, p.addr(), p.prefix_len())),
        Cidr::V4(_) => None,
    })?;
    Ok((Policy { v4, v6 }, warnings))
}

/// A prefix of one family: as the FIB keys it, and as (address, length).
type Split<A> = fn(&Cidr) -> Option<(<A as fib::Address>::Prefix, A, u8)>;

struct Compiler<'a> {
    kernel: &'a KernelState,
    iif_of: &'a dyn Fn(&str, bool) -> Vec<InterfaceId>,
    by_ifindex: &'a HashMap<u32, InterfaceId>,
    intern: &'a mut dyn FnMut(&RouteTarget) -> Result<NextHopId, TableError>,
    warnings: &'a mut Vec<String>,
}

impl Compiler<'_> {
    fn family<A: TrieKey>(&mut self, v6: bool, split: Split<A>) -> Result<FamilyPolicy<A>, String> {
        let rules: Vec<&KernelRule> = self.kernel.rules.iter().filter(|r| r.v6 == v6).collect();
        if rules.is_empty() {
            return Ok(FamilyPolicy::default());
        }
        let mut tables: Vec<Poptrie<A>> = Vec::new();
        let mut table_index: HashMap<u32, Option<u16>> = HashMap::new();
        // Table `t` as an index into `tables`, None when it has no route
        // of the family (a lookup of it always passes to the next rule).
        let mut index_of_table = |c: &mut Self, t: u32| -> Result<Option<u16>, String> {
            if let Some(&i) = table_index.get(&t) {
                return Ok(i);
            }
            let i = c.table::<A>(t, split)?.map(|trie| {
                tables.push(trie);
                tables.len() as u16 - 1
            });
            table_index.insert(t, i);
            Ok(i)
        };
        // Each rule compiled into none (it always passes to the next), one,
        // or for an `l3mdev` rule one per VRF member fastfwd receives on.
        let mut out: Vec<Vec<(PolicyRule<A>, Option<usize>)>> = Vec::new();
        for r in &rules {
            // Several interfaces (the members of a VRF device): the rule
            // once for each, below.
            let mut more_iifs = Vec::new();
            let iif = match r.iif.as_deref() {
                None => InputSelector::Any,
                Some("lo") => InputSelector::Loopback,
                Some(name) => match (self.iif_of)(name, v6).as_slice() {
                    [] => InputSelector::Elsewhere,
                    [one] => InputSelector::Interface(*one),
                    [first, rest @ ..] if !r.invert => {
                        more_iifs = rest.to_vec();
                        InputSelector::Interface(*first)
                    }
                    _ => {
                        return Err(format!(
                            "ip rule {}: not iif {name}, a VRF of several members (fastfwd cannot evaluate it)",
                            r.priority
                        ));
                    }
                },
            };
            let selector = |p: &Option<Cidr>| p.as_ref().and_then(split).map(|(_, a, l)| (a, l));
            let mut rule = PolicyRule {
                src: selector(&r.src),
                dst: selector(&r.dst),
                iif,
                invert: r.invert,
                action: RuleAction::Main,
                suppress_prefixlen: r.suppress_prefixlen.map(|n| n.min(255) as u8),
            };
            if r.l3mdev && !r.invert {
                // The kernel's l3mdev match: the packet came in on a member
                // of a VRF; the lookup is that VRF's table. (Inverted, it is
                // named as unmodelled.)
                let mut expanded = Vec::new();
                if !r.never_for_transit() && r.unmodelled_selectors().is_empty() {
                    for (&ifindex, &interface) in self.by_ifindex {
                        let Some(t) = self.kernel.vrf_of(ifindex) else {
                            continue;
                        };
                        if let Some(i) = index_of_table(self, t)? {
                            expanded.push((
                                PolicyRule {
                                    iif: InputSelector::Vrf(interface),
                                    action: RuleAction::Table(i),
                                    ..rule
                                },
                                None,
                            ));
                        }
                    }
                }
                expanded.sort_by_key(|(r, _)| match r.iif {
                    InputSelector::Vrf(i) => i,
                    _ => InterfaceId::MAX,
                });
                out.push(expanded);
                continue;
            }
            let never = r.never_for_transit() || !r.unmodelled_selectors().is_empty();
            if never {
                if !r.invert {
                    out.push(Vec::new());
                    continue;
                }
                // Not matching: the inverted rule matches every packet.
                rule.src = None;
                rule.dst = None;
                rule.iif = InputSelector::Any;
                rule.invert = false;
            }
            let mut goto = None;
            rule.action = match r.verb {
                RuleVerb::Lookup(RT_TABLE_MAIN) => RuleAction::Main,
                RuleVerb::Lookup(RT_TABLE_LOCAL) | RuleVerb::Nop | RuleVerb::Other(_) => {
                    out.push(Vec::new());
                    continue;
                }
                RuleVerb::Lookup(t) => match index_of_table(self, t)? {
                    Some(i) => RuleAction::Table(i),
                    None => {
                        out.push(Vec::new());
                        continue;
                    }
                },
                RuleVerb::Goto(p) => match rules.iter().position(|x| x.priority == p) {
                    Some(j) if j > out.len() => {
                        goto = Some(j);
                        RuleAction::Goto(0)
                    }
                    _ => {
                        out.push(Vec::new());
                        continue;
                    }
                },
                RuleVerb::Discard(Discard::Unreachable) => RuleAction::End(None),
                RuleVerb::Discard(d @ (Discard::Blackhole | Discard::Prohibit)) => {
                    let id = (self.intern)(&RouteTarget::Discard(d)).map_err(|e| e.to_string())?;
                    RuleAction::End(Some(id))
                }
                RuleVerb::Discard(Discard::Throw) => {
                    out.push(Vec::new());
                    continue;
                }
            };
            let mut each = vec![(rule, goto)];
            each.extend(more_iifs.iter().map(|&i| {
                (
                    PolicyRule {
                        iif: InputSelector::Interface(i),
                        ..rule
                    },
                    goto,
                )
            }));
            out.push(each);
        }
        // Rule positions to compiled indices: a rule left out passes to the
        // next, so a jump to it lands on the next compiled one.
        let mut index_of = Vec::with_capacity(out.len() + 1);
        let mut n = 0u16;
        for r in &out {
            index_of.push(n);
            n += r.len() as u16;
        }
        index_of.push(n);
        let compiled: Vec<PolicyRule<A>> = out
            .into_iter()
            .flatten()
            .map(|(mut rule, goto)| {
                if let Some(j) = goto {
                    rule.action = RuleAction::Goto(index_of[j]);
                }
                rule
            })
            .collect();
        let family = if v6 { "IPv6" } else { "IPv4" };
        FamilyPolicy::new(compiled, tables).map_err(|e| format!("{family} policy rules: {e}"))
    }

    /// Table `t`'s routes of one family as a trie, `None` when it has none
    /// fastfwd can use.
    fn table<A: TrieKey>(&mut self, t: u32, split: Split<A>) -> Result<Option<Poptrie<A>>, String> {
        let Some(routes) = self.kernel.tables.get(&t) else {
            return Ok(None);
        };
        let mut entries = Vec::new();
        let mut foreign = std::collections::BTreeMap::new();
        let mut last = None;
        // Ordered by (prefix, metric): the first of a prefix has the
        // lowest metric and is the one the kernel uses.
        for ((prefix, _), list) in routes {
            let Some((p, _, _)) = split(prefix) else {
                continue;
            };
            if last == Some(*prefix) {
                continue;
            }
            last = Some(*prefix);
            let Some(route) = KernelState::used_route(list) else {
                continue;
            };
            let target = match crate::decide::kernel_decision(
                route,
                self.kernel,
                &crate::state::IfMap {
                    ifaces: &[],
                    by_ifindex: self.by_ifindex,
                },
            ) {
                Decision::Route(_, RouteTarget::Forward(hops))
                    if hops.len() > pipeline::MAX_ECMP =>
                {
                    self.warnings.push(format!(
                        "policy: route {prefix} table {t}: {} next hops, more than {}",
                        hops.len(),
                        pipeline::MAX_ECMP
                    ));
                    continue;
                }
                Decision::Route(_, target) => target,
                Decision::Foreign(ifindex) => {
                    foreign.insert(*prefix, ifindex);
                    continue;
                }
                Decision::Connected | Decision::None => continue,
            };
            let id =
                (self.intern)(&target).map_err(|e| format!("route {prefix} table {t}: {e}"))?;
            entries.push((p, id));
        }
        for line in crate::state::foreign_routes(&foreign, self.kernel) {
            self.warnings.push(format!("policy: table {t}: {line}"));
        }
        Ok((!entries.is_empty()).then(|| Poptrie::from_routes(entries)))
    }
}
