//! The kernel's policy routing (`ip rule`), mirrored, and the question
//! fastfwd must answer before it forwards a packet: would the kernel send
//! transit traffic anywhere but the main table?
//!
//! fastfwd forwards with the main table (after handing the host's own
//! addresses to the kernel, which is what the local table does). That is
//! exactly the kernel's decision while every rule that can act on a
//! transit packet looks up the main or the local table. [`unmodelled`]
//! names every rule for which that does not hold, so the daemon can refuse
//! to start, and say so when one appears, instead of forwarding
//! differently in silence.
//!
//! Which rules can act on a transit packet follows the kernel's rule match
//! (`net/core/fib_rules.c`, `fib_rule_match`): a forwarded packet has
//! no output interface yet (an `oif` rule never matches it), arrives on a
//! real interface (`iif lo` never matches), carries mark 0 (fastfwd runs
//! no netfilter that could set one), has uid 0 and no tunnel key; a lookup
//! of a table with no routes gives no result, and the next rule is tried;
//! an `l3mdev` rule matches only while a VRF device exists.

use crate::netlink::{RT_TABLE_DEFAULT, RT_TABLE_LOCAL, RT_TABLE_MAIN};
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
    /// The kernel's rule match for a forwarded packet, as far as it is
    /// decided without the packet (`fib_rule_match`).
    fn matches_transit(&self, vrf_exists: bool) -> Matches {
        let decided_false = self.oif.is_some()
            || self.iif.as_deref() == Some("lo")
            || self.fwmark.is_some_and(|(mark, mask)| mark & mask != 0)
            || self.uid_range.is_some_and(|(start, _)| start > 0)
            || (self.l3mdev && !vrf_exists);
        let depends = self.src.is_some_and(|p| p.prefix_len() > 0)
            || self.dst.is_some_and(|p| p.prefix_len() > 0)
            || self.tos != 0
            || self.iif.is_some()
            || self.l3mdev
            || !self.other.is_empty();
        let selected = if decided_false {
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
}

/// The rules (of both families) that can send a transit packet somewhere
/// other than the main table, each as `ip rule` prints it with the reason;
/// and, per family, a missing rule that looks up the main (or local)
/// table for every packet. Empty: forwarding with the main table is exactly
/// the kernel's decision. `tables_with_routes` holds the tables other than
/// main and local that have at least one route; `vrf_exists` whether any
/// VRF device does. With no rules at all (a kernel that sent none, as in
/// tests) nothing is named: the kernel's defaults are assumed.
pub fn unmodelled(
    rules: &BTreeSet<KernelRule>,
    tables_with_routes: &BTreeSet<u32>,
    vrf_exists: bool,
) -> Vec<String> {
    let mut out = Vec::new();
    for v6 in [false, true] {
        let family: Vec<&KernelRule> = rules.iter().filter(|r| r.v6 == v6).collect();
        if family.is_empty() {
            continue;
        }
        let (mut local_for_all, mut main_for_all) = (false, false);
        for r in family {
            let m = r.matches_transit(vrf_exists);
            if m == Matches::Never {
                continue;
            }
            let why = match r.verb {
                RuleVerb::Nop => continue,
                _ if r.l3mdev => "looks up a VRF's table",
                RuleVerb::Lookup(RT_TABLE_LOCAL) => {
                    local_for_all |= m == Matches::Always;
                    continue;
                }
                // A suppressing lookup of main consults main only: what
                // it passes over reaches the next rule, which is main
                // again or a rule named here.
                RuleVerb::Lookup(RT_TABLE_MAIN) => {
                    main_for_all |= m == Matches::Always
                        && r.suppress_prefixlen.is_none()
                        && r.suppress_ifgroup.is_none()
                        && local_for_all;
                    continue;
                }
                RuleVerb::Lookup(t) if !tables_with_routes.contains(&t) => continue,
                RuleVerb::Lookup(_) => "looks up a table other than main",
                RuleVerb::Goto(_) => "jumps to another rule",
                RuleVerb::Discard(_) => "discards",
                RuleVerb::Other(_) => "has an action fastfwd does not know",
            };
            out.push(format!("ip rule {r} ({why})"));
        }
        if !main_for_all {
            let family = if v6 { "IPv6" } else { "IPv4" };
            out.push(format!(
                "no {family} rule looks up the local table and then the main table for every packet"
            ));
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A rule that matches everything.
    pub(crate) fn rule(priority: u32, verb: RuleVerb) -> KernelRule {
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
    pub(crate) fn defaults() -> BTreeSet<KernelRule> {
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

    fn cidr(s: &str) -> Option<Cidr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn the_kernels_default_rules_are_the_main_table() {
        assert!(unmodelled(&defaults(), &BTreeSet::new(), false).is_empty());
        assert!(unmodelled(&BTreeSet::new(), &BTreeSet::new(), false).is_empty());
        // The default table with a route in it answers main's misses.
        let named = unmodelled(&defaults(), &BTreeSet::from([RT_TABLE_DEFAULT]), false);
        assert_eq!(
            named,
            ["ip rule 32767: from all lookup default (looks up a table other than main)"]
        );
    }

    #[test]
    fn a_source_rule_to_a_table_with_routes_is_named() {
        let mut rules = defaults();
        rules.insert(KernelRule {
            src: cidr("198.18.10.0/24"),
            ..rule(100, RuleVerb::Lookup(100))
        });
        // Table 100 empty: the rule can give no result.
        assert!(unmodelled(&rules, &BTreeSet::new(), false).is_empty());
        assert_eq!(
            unmodelled(&rules, &BTreeSet::from([100]), false),
            ["ip rule 100: from 198.18.10.0/24 lookup 100 (looks up a table other than main)"]
        );
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
        rules.insert(rule(14, RuleVerb::Nop));
        assert!(unmodelled(&rules, &tables, false).is_empty());
        // With a VRF device, the l3mdev rule matches its members' packets.
        assert_eq!(
            unmodelled(&rules, &tables, true),
            ["ip rule 1000: from all lookup [l3mdev-table] (looks up a VRF's table)"]
        );
    }

    #[test]
    fn an_inverted_mark_rule_matches_every_transit_packet() {
        // wg-quick: `not fwmark 51820 lookup 51820` and
        // `lookup main suppress_prefixlength 0`.
        let mut rules = defaults();
        rules.insert(KernelRule {
            fwmark: Some((51820, u32::MAX)),
            invert: true,
            ..rule(32764, RuleVerb::Lookup(51820))
        });
        rules.insert(KernelRule {
            suppress_prefixlen: Some(0),
            ..rule(32765, RuleVerb::Lookup(RT_TABLE_MAIN))
        });
        assert_eq!(
            unmodelled(&rules, &BTreeSet::from([51820]), false),
            [
                "ip rule 32764: not from all fwmark 0xca6c lookup 51820 (looks up a table other than main)"
            ]
        );
        // Alone, the suppressing lookup of main changes nothing.
        rules.retain(|r| r.priority != 32764);
        assert!(unmodelled(&rules, &BTreeSet::from([51820]), false).is_empty());
    }

    #[test]
    fn discarding_and_jumping_rules_are_named() {
        let mut rules = defaults();
        rules.insert(KernelRule {
            dst: cidr("203.0.113.0/24"),
            ..rule(50, RuleVerb::Discard(Discard::Blackhole))
        });
        rules.insert(rule(60, RuleVerb::Goto(32766)));
        let named = unmodelled(&rules, &BTreeSet::new(), false);
        assert_eq!(
            named,
            [
                "ip rule 50: from all to 203.0.113.0/24 blackhole (discards)",
                "ip rule 60: from all goto 32766 (jumps to another rule)",
            ]
        );
    }

    #[test]
    fn a_missing_main_or_local_rule_is_named() {
        let mut rules = defaults();
        rules.retain(|r| !(r.v6 && r.verb == RuleVerb::Lookup(RT_TABLE_MAIN)));
        assert_eq!(
            unmodelled(&rules, &BTreeSet::new(), false),
            ["no IPv6 rule looks up the local table and then the main table for every packet"]
        );
        // The local rule moved after main (the kernel would route the
        // host's own addresses by main first).
        let mut rules = defaults();
        rules.retain(|r| r.v6 || r.verb != RuleVerb::Lookup(RT_TABLE_LOCAL));
        rules.insert(rule(40000, RuleVerb::Lookup(RT_TABLE_LOCAL)));
        assert_eq!(unmodelled(&rules, &BTreeSet::new(), false).len(), 1);
        // Moved, but still before main (as VRF setups do): fine.
        let mut rules = defaults();
        rules.retain(|r| r.v6 || r.verb != RuleVerb::Lookup(RT_TABLE_LOCAL));
        rules.insert(rule(1001, RuleVerb::Lookup(RT_TABLE_LOCAL)));
        assert!(unmodelled(&rules, &BTreeSet::new(), false).is_empty());
    }
}
