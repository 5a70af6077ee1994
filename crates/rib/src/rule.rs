//! The kernel's policy rules (`ip rule`) as the RIB keeps them, and which
//! of them fastfwd evaluates as the kernel does.
//!
//! Which rules can act on a transit packet follows the kernel's rule match
//! (`net/core/fib_rules.c`, `fib_rule_match`): a forwarded packet has
//! no output interface yet (an `oif` rule never matches it), arrives on a
//! real interface (`iif lo` matches only the host's own packets, such as
//! its ICMP errors), carries mark 0 (fastfwd runs no netfilter that could
//! set one), has uid 0 and no tunnel key; a lookup of a table with no
//! routes gives no result, and the next rule is tried; an `l3mdev` rule
//! matches the packets that arrive on a member of a VRF device and looks
//! up that VRF's table (no route there: the next rule).

use crate::event::{RT_TABLE_DEFAULT, RT_TABLE_LOCAL, RT_TABLE_MAIN};
use pipeline::Discard;
use std::collections::BTreeSet;
use std::fmt;
use wire::Cidr;

/// What a rule does when it matches (FR_ACT_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RuleVerb {
    /// `lookup TABLE`: the table's route, or the next rule if it has none.
    Lookup(u32),
    /// `goto PRIORITY`: continue at that rule.
    Goto(u32),
    /// `nop`: nothing, the next rule.
    Nop,
    /// `blackhole`, `unreachable`, `prohibit`: the packet is discarded.
    Discard(Discard),
    /// An action this kernel knows and fastfwd does not.
    Other(u8),
}

/// One policy rule as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelRule {
    /// Rule priority: rules are tried from the lowest. First, so rules
    /// sort in the order the kernel tries them.
    pub priority: u32,
    /// An IPv6 rule (else IPv4).
    pub v6: bool,
    /// What it does.
    pub verb: RuleVerb,
    /// `from PREFIX`.
    pub src: Option<Cidr>,
    /// `to PREFIX`.
    pub dst: Option<Cidr>,
    /// `iif NAME`.
    pub iif: Option<String>,
    /// `oif NAME`.
    pub oif: Option<String>,
    /// `fwmark MARK/MASK`.
    pub fwmark: Option<(u32, u32)>,
    /// `tos TOS` (0: any).
    pub tos: u8,
    /// `not`: the rule applies where its selectors do not match.
    pub invert: bool,
    /// `suppress_prefixlength N`: a result this short or shorter is ignored.
    pub suppress_prefixlen: Option<u32>,
    /// `suppress_ifgroup G`.
    pub suppress_ifgroup: Option<u32>,
    /// `l3mdev`: look up the table of the packet's VRF.
    pub l3mdev: bool,
    /// `uidrange START-END`.
    pub uid_range: Option<(u32, u32)>,
    /// Other selectors (ipproto, sport, dport, tun_id, realms), as `ip rule`
    /// prints them: each makes the rule depend on the packet.
    pub other: Vec<String>,
}

fn table_name(t: u32) -> String {
    match t {
        RT_TABLE_LOCAL => "local".into(),
        RT_TABLE_MAIN => "main".into(),
        RT_TABLE_DEFAULT => "default".into(),
        t => t.to_string(),
    }
}

impl fmt::Display for KernelRule {
    /// As `ip rule` lists it: `100: from 198.18.10.0/24 lookup 100`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.priority)?;
        if self.invert {
            write!(f, " not")?;
        }
        match &self.src {
            Some(p) => write!(f, " from {p}")?,
            None => write!(f, " from all")?,
        }
        if let Some(p) = &self.dst {
            write!(f, " to {p}")?;
        }
        if self.tos != 0 {
            write!(f, " tos {:#x}", self.tos)?;
        }
        match self.fwmark {
            Some((m, u32::MAX)) => write!(f, " fwmark {m:#x}")?,
            Some((m, mask)) => write!(f, " fwmark {m:#x}/{mask:#x}")?,
            None => {}
        }
        if let Some(n) = &self.iif {
            write!(f, " iif {n}")?;
        }
        if let Some(n) = &self.oif {
            write!(f, " oif {n}")?;
        }
        if let Some((a, b)) = self.uid_range {
            write!(f, " uidrange {a}-{b}")?;
        }
        for o in &self.other {
            write!(f, " {o}")?;
        }
        if self.l3mdev {
            write!(f, " lookup [l3mdev-table]")?;
        } else {
            match self.verb {
                RuleVerb::Lookup(t) => write!(f, " lookup {}", table_name(t))?,
                RuleVerb::Goto(p) => write!(f, " goto {p}")?,
                RuleVerb::Nop => write!(f, " nop")?,
                RuleVerb::Discard(Discard::Blackhole) => write!(f, " blackhole")?,
                RuleVerb::Discard(Discard::Unreachable) => write!(f, " unreachable")?,
                RuleVerb::Discard(Discard::Prohibit) => write!(f, " prohibit")?,
                RuleVerb::Discard(Discard::Throw) => write!(f, " throw")?,
                RuleVerb::Other(a) => write!(f, " action {a}")?,
            }
        }
        if let Some(n) = self.suppress_prefixlen {
            write!(f, " suppress_prefixlength {n}")?;
        }
        if let Some(g) = self.suppress_ifgroup {
            write!(f, " suppress_ifgroup {g}")?;
        }
        Ok(())
    }
}

/// Whether a rule matches transit packets: never, always, or depending on
/// the packet (its addresses, TOS, protocol, ports, input interface).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Matches {
    Never,
    Always,
    Some,
}

impl KernelRule {
    /// A selector that decides the kernel's rule match for every
    /// forwarded packet to false (`fib_rule_match`): an output interface,
    /// a mark (forwarded packets carry 0), a uid range without 0, `iif lo`.
    /// (An `l3mdev` rule matches by the input interface: see
    /// [`KernelRule::l3mdev`].)
    pub fn never_for_transit(&self) -> bool {
        self.oif.is_some()
            || self.fwmark.is_some_and(|(mark, mask)| mark & mask != 0)
            || self.uid_range.is_some_and(|(start, _)| start > 0)
    }

    /// The kernel's rule match for a forwarded packet, as far as it is
    /// decided without the packet; `vrfs`: whether some VRF device has
    /// members (else an `l3mdev` rule matches nothing).
    fn matches_transit(&self, vrfs: bool) -> Matches {
        let never = self.never_for_transit()
            || self.iif.as_deref() == Some("lo")
            || (self.l3mdev && !vrfs)
            || !self.unmodelled_selectors().is_empty();
        let depends = self.src.is_some_and(|p| p.prefix_len() > 0)
            || self.dst.is_some_and(|p| p.prefix_len() > 0)
            || self.iif.is_some()
            || self.l3mdev;
        let selected = if never {
            Matches::Never
        } else if depends {
            Matches::Some
        } else {
            Matches::Always
        };
        match (self.invert, selected) {
            (false, m) => m,
            (true, Matches::Never) => Matches::Always,
            (true, Matches::Always) => Matches::Never,
            (true, Matches::Some) => Matches::Some,
        }
    }

    /// Selectors fastfwd does not evaluate (TOS, protocol, ports, tunnel
    /// id, realms).
    pub fn unmodelled_selectors(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self.other.iter().map(String::as_str).collect();
        if self.tos != 0 {
            out.push("tos");
        }
        out
    }
}

/// The tables the rules of both families can send a transit packet to
/// (besides main and local); `vrf_tables`: the tables of the VRF devices
/// with members (an `l3mdev` rule looks them up).
pub fn looked_up_tables(rules: &BTreeSet<KernelRule>, vrf_tables: &BTreeSet<u32>) -> BTreeSet<u32> {
    let vrfs = !vrf_tables.is_empty();
    let mut out = BTreeSet::new();
    for r in rules
        .iter()
        .filter(|r| r.matches_transit(vrfs) != Matches::Never)
    {
        match r.verb {
            _ if r.l3mdev => out.extend(vrf_tables.iter().copied()),
            RuleVerb::Lookup(t) if t != RT_TABLE_MAIN && t != RT_TABLE_LOCAL => {
                out.insert(t);
            }
            _ => {}
        }
    }
    out
}

/// The rules (of both families) fastfwd cannot evaluate as the kernel
/// does, each as `ip rule` prints it with the reason: selectors it does not
/// evaluate, actions it does not know, an inverted `l3mdev` rule,
/// suppression by interface group, and any rule that acts before the local
/// table is looked up (fastfwd hands the host's addresses to the kernel
/// first). `tables_with_routes` holds the tables other than main and local
/// that have at least one route; `vrf_tables` the tables of the VRF devices
/// with members.
/// With no rules at all (a kernel that sent none, as in tests) the
/// kernel's defaults are assumed.
pub fn unmodelled(
    rules: &BTreeSet<KernelRule>,
    tables_with_routes: &BTreeSet<u32>,
    vrf_tables: &BTreeSet<u32>,
) -> Vec<String> {
    let vrfs = !vrf_tables.is_empty();
    let mut out = Vec::new();
    for v6 in [false, true] {
        let family: Vec<&KernelRule> = rules.iter().filter(|r| r.v6 == v6).collect();
        if family.is_empty() {
            continue;
        }
        let mut local_seen = false;
        for r in family {
            if r.l3mdev && r.invert && vrfs {
                out.push(format!(
                    "ip rule {r} (looks up a VRF's table for packets from outside it)"
                ));
                continue;
            }
            let selectors = r.unmodelled_selectors();
            if !selectors.is_empty() && !r.never_for_transit() {
                let what = selectors.join(", ");
                out.push(format!("ip rule {r} (selects by {what})"));
                continue;
            }
            let m = r.matches_transit(vrfs);
            if m == Matches::Never {
                continue;
            }
            let acts = match r.verb {
                _ if r.l3mdev => vrf_tables.iter().any(|t| tables_with_routes.contains(t)),
                RuleVerb::Nop => false,
                RuleVerb::Lookup(RT_TABLE_LOCAL) => {
                    local_seen |= m == Matches::Always;
                    false
                }
                RuleVerb::Lookup(RT_TABLE_MAIN) => true,
                RuleVerb::Lookup(t) => tables_with_routes.contains(&t),
                RuleVerb::Other(_) => {
                    out.push(format!("ip rule {r} (has an action fastfwd does not know)"));
                    continue;
                }
                RuleVerb::Goto(_) | RuleVerb::Discard(_) => true,
            };
            if r.suppress_ifgroup.is_some() && acts {
                out.push(format!("ip rule {r} (suppresses by interface group)"));
            } else if acts && !local_seen {
                out.push(format!(
                    "ip rule {r} (acts before the local table is looked up for every packet)"
                ));
            }
        }
    }
    out
}

/// Rules for tests and tools: one that matches everything, and a new
/// namespace's defaults.
pub mod testing {
    use super::*;

    /// A rule that matches everything.
    pub fn rule(priority: u32, verb: RuleVerb) -> KernelRule {
        KernelRule {
            priority,
            v6: false,
            verb,
            src: None,
            dst: None,
            iif: None,
            oif: None,
            fwmark: None,
            tos: 0,
            invert: false,
            suppress_prefixlen: None,
            suppress_ifgroup: None,
            l3mdev: false,
            uid_range: None,
            other: Vec::new(),
        }
    }

    /// The rules a new network namespace starts with.
    pub fn defaults() -> BTreeSet<KernelRule> {
        let mut rules = BTreeSet::new();
        for v6 in [false, true] {
            for (p, t) in [(0, RT_TABLE_LOCAL), (32766, RT_TABLE_MAIN)] {
                rules.insert(KernelRule {
                    v6,
                    ..rule(p, RuleVerb::Lookup(t))
                });
            }
        }
        rules.insert(rule(32767, RuleVerb::Lookup(RT_TABLE_DEFAULT)));
        rules
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{defaults, rule};
    use super::*;
    use std::collections::BTreeSet;

    fn cidr(s: &str) -> Option<Cidr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn rules_fastfwd_evaluates_are_not_named() {
        assert!(unmodelled(&defaults(), &BTreeSet::new(), &BTreeSet::new()).is_empty());
        assert!(unmodelled(&BTreeSet::new(), &BTreeSet::new(), &BTreeSet::new()).is_empty());
        let mut rules = defaults();
        rules.insert(KernelRule {
            src: cidr("198.18.10.0/24"),
            ..rule(100, RuleVerb::Lookup(100))
        });
        rules.insert(KernelRule {
            dst: cidr("203.0.113.0/24"),
            ..rule(50, RuleVerb::Discard(Discard::Blackhole))
        });
        rules.insert(rule(60, RuleVerb::Goto(32766)));
        // wg-quick's pair.
        rules.insert(KernelRule {
            fwmark: Some((51820, u32::MAX)),
            invert: true,
            ..rule(32764, RuleVerb::Lookup(51820))
        });
        rules.insert(KernelRule {
            suppress_prefixlen: Some(0),
            ..rule(32765, RuleVerb::Lookup(RT_TABLE_MAIN))
        });
        let tables = BTreeSet::from([100, 51820, RT_TABLE_DEFAULT]);
        assert!(unmodelled(&rules, &tables, &BTreeSet::new()).is_empty());
        assert_eq!(
            looked_up_tables(&rules, &BTreeSet::new()),
            BTreeSet::from([100, 51820, RT_TABLE_DEFAULT])
        );
    }

    #[test]
    fn selectors_and_actions_fastfwd_does_not_evaluate_are_named() {
        let mut rules = defaults();
        let tables = BTreeSet::from([200]);
        rules.insert(KernelRule {
            tos: 0x10,
            ..rule(10, RuleVerb::Lookup(200))
        });
        rules.insert(KernelRule {
            other: vec!["ipproto 17".into()],
            src: cidr("198.18.10.0/24"),
            ..rule(11, RuleVerb::Lookup(200))
        });
        rules.insert(KernelRule {
            suppress_ifgroup: Some(3),
            ..rule(12, RuleVerb::Lookup(RT_TABLE_MAIN))
        });
        rules.insert(rule(13, RuleVerb::Other(9)));
        assert_eq!(
            unmodelled(&rules, &tables, &BTreeSet::new()),
            [
                "ip rule 10: from all tos 0x10 lookup 200 (selects by tos)",
                "ip rule 11: from 198.18.10.0/24 ipproto 17 lookup 200 (selects by ipproto 17)",
                "ip rule 12: from all lookup main suppress_ifgroup 3 (suppresses by interface group)",
                "ip rule 13: from all action 9 (has an action fastfwd does not know)",
            ]
        );
        // A selector fastfwd does not evaluate on a rule that never
        // matches a forwarded packet changes nothing.
        let mut rules = defaults();
        rules.insert(KernelRule {
            tos: 0x10,
            oif: Some("d1".into()),
            ..rule(10, RuleVerb::Lookup(200))
        });
        assert!(unmodelled(&rules, &tables, &BTreeSet::new()).is_empty());
    }

    #[test]
    fn rules_that_cannot_match_transit_are_not_named() {
        let mut rules = defaults();
        let tables = BTreeSet::from([200]);
        rules.insert(KernelRule {
            iif: Some("lo".into()),
            ..rule(10, RuleVerb::Lookup(200))
        });
        rules.insert(KernelRule {
            oif: Some("d1".into()),
            ..rule(11, RuleVerb::Lookup(200))
        });
        rules.insert(KernelRule {
            fwmark: Some((0xca6c, u32::MAX)),
            ..rule(12, RuleVerb::Lookup(200))
        });
        rules.insert(KernelRule {
            uid_range: Some((1000, 1000)),
            ..rule(13, RuleVerb::Discard(Discard::Prohibit))
        });
        rules.insert(KernelRule {
            l3mdev: true,
            ..rule(1000, RuleVerb::Lookup(0))
        });
        assert!(unmodelled(&rules, &tables, &BTreeSet::new()).is_empty());
        // With a VRF device, the l3mdev rule looks up its table for its
        // members' packets, as fastfwd does; inverted, for everyone
        // else's, which fastfwd does not evaluate.
        let vrf = BTreeSet::from([10]);
        assert!(unmodelled(&rules, &tables, &vrf).is_empty());
        assert!(looked_up_tables(&rules, &vrf).contains(&10));
        assert!(!looked_up_tables(&rules, &BTreeSet::new()).contains(&10));
        rules.insert(KernelRule {
            l3mdev: true,
            invert: true,
            ..rule(1001, RuleVerb::Lookup(0))
        });
        assert_eq!(
            unmodelled(&rules, &tables, &vrf),
            [
                "ip rule 1001: not from all lookup [l3mdev-table] (looks up a VRF's table for packets from outside it)"
            ]
        );
    }

    #[test]
    fn a_rule_acting_before_the_local_table_is_named() {
        // The local rule moved after main: the kernel would route the
        // host's own addresses by main first.
        let mut rules = defaults();
        rules.retain(|r| r.v6 || r.verb != RuleVerb::Lookup(RT_TABLE_LOCAL));
        rules.insert(rule(40000, RuleVerb::Lookup(RT_TABLE_LOCAL)));
        assert_eq!(
            unmodelled(&rules, &BTreeSet::new(), &BTreeSet::new()),
            [
                "ip rule 32766: from all lookup main (acts before the local table is looked up for every packet)"
            ]
        );
        // Moved, but still before main (as VRF setups do): fine.
        let mut rules = defaults();
        rules.retain(|r| r.v6 || r.verb != RuleVerb::Lookup(RT_TABLE_LOCAL));
        rules.insert(rule(1001, RuleVerb::Lookup(RT_TABLE_LOCAL)));
        assert!(unmodelled(&rules, &BTreeSet::new(), &BTreeSet::new()).is_empty());
        // No main rule at all is evaluated as the kernel does (no route).
        let mut rules = defaults();
        rules.retain(|r| !(r.v6 && r.verb == RuleVerb::Lookup(RT_TABLE_MAIN)));
        assert!(unmodelled(&rules, &BTreeSet::new(), &BTreeSet::new()).is_empty());
    }
}
