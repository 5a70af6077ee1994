//! The firewall as the forwarding pipeline's ACL stage.
//!
//! Reads: the pipeline's flow key of every forwarded packet (after the
//! route lookup, so the egress interface is known): the forward chain.
//! Writes: the per-worker [`FirewallWorker`] (rule counters, connection
//! table, reject limiter).
//! Next: accepted packets continue to neighbour resolution; dropped ones
//! are counted as `acl_denied`; rejected ones also get an ICMP / ICMPv6
//! destination unreachable (RFC 792, RFC 4443 §3.1) or a TCP RST (RFC 9293
//! §3.10.7.1) from the pipeline.

use crate::classifier::CHUNK;
use crate::key::{Action, ClassifyKey, KeyFacts, PacketKey, Verdict, addr_value, aux_value};
use crate::rules::{Chain, CtState, Field};
use crate::{CtHint, Firewall, FirewallWorker};
use pipeline::{Acl, AclAction, FlowKey};
use std::sync::Arc;

/// A compiled rule set plugged into the pipeline's tables
/// (`TablesBuilder::build_with_acl(.., PipelineFirewall::new(fw))`).
#[derive(Debug, Clone)]
pub struct PipelineFirewall {
    fw: Arc<Firewall>,
    seed: u64,
    epoch: u32,
}

impl PipelineFirewall {
    /// Wraps a compiled rule set; `seed` keys the connection tables' hash.
    pub fn new(fw: Arc<Firewall>, seed: u64) -> Self {
        Self::with_epoch(fw, seed, 0)
    }

    /// [`PipelineFirewall::new`] whose connection tables are of `epoch`:
    /// workers keep their tables across rule sets of one epoch and start
    /// new ones when it changes (the control side changes it whenever the
    /// tables cannot carry over, so the XDP engine's table follows).
    pub fn with_epoch(fw: Arc<Firewall>, seed: u64, epoch: u32) -> Self {
        PipelineFirewall { fw, seed, epoch }
    }

    /// The connection tables' epoch.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// The rule set (for `Firewall::summary`).
    pub fn firewall(&self) -> &Arc<Firewall> {
        &self.fw
    }
}

/// The firewall state a pipeline worker keeps for its ACL, whether the
/// tables' ACL is a [`PipelineFirewall`] or an optional one (the config's).
pub fn worker_state(w: &mut pipeline::Worker) -> Option<&mut FirewallWorker> {
    if w.acl_state_mut::<FirewallWorker>().is_some() {
        return w.acl_state_mut::<FirewallWorker>();
    }
    w.acl_state_mut::<Option<FirewallWorker>>()?.as_mut()
}

/// The firewall's source and destination ports of a pipeline flow key:
/// for ICMP the echo identifier, which the pipeline carries in `dst_port`,
/// is the source port and the destination port is 0.
#[inline(always)]
fn ports(k: &FlowKey) -> (u16, u16) {
    // ICMP (1) for IPv4, ICMPv6 (58 = 1 ^ 59) for IPv6, without a branch
    // on the family.
    let icmp = k.protocol ^ (59 * u8::from(k.is_ipv6)) == 1;
    if icmp {
        (k.dst_port, 0)
    } else {
        (k.src_port, k.dst_port)
    }
}

/// The firewall's key for a pipeline flow key.
pub fn packet_key(k: &FlowKey) -> PacketKey {
    let (sport, dport) = ports(k);
    PacketKey {
        src: k.src,
        dst: k.dst,
        sport,
        dport,
        iif: k.interface,
        oif: k.out_interface,
        len: k.length,
        proto: k.protocol,
        tcp_flags: k.tcp_flags,
        icmp_type: k.icmp_type,
        icmp_code: k.icmp_code,
        ct: CtState::Untracked,
        is_v6: k.is_ipv6,
        ct_hint: CtHint::None,
    }
}

/// The pipeline's flow key read as [`packet_key`] would convert it, field
/// by field, so that a rule set without connection tracking classifies the
/// pipeline's keys in place.
impl ClassifyKey for FlowKey {
    #[inline(always)]
    fn value(&self, f: Field) -> u128 {
        match f {
            Field::Src => addr_value(self.is_ipv6, self.src),
            Field::Dst => addr_value(self.is_ipv6, self.dst),
            Field::Sport => u128::from(ports(self).0),
            Field::Dport => u128::from(ports(self).1),
            Field::Proto => u128::from(self.protocol),
            Field::Aux => u128::from(aux_value(self.protocol, self.tcp_flags, self.icmp_type)),
            Field::Ct => u128::from(CtState::Untracked as u8),
            Field::Iif => u128::from(self.interface),
            Field::Oif => u128::from(self.out_interface),
        }
    }
    #[inline(always)]
    fn facts(&self) -> KeyFacts {
        KeyFacts {
            is_v6: self.is_ipv6,
            proto: self.protocol,
            tcp_flags: self.tcp_flags,
            icmp_type: self.icmp_type,
            len: self.length,
        }
    }
}

/// The pipeline's action for a firewall verdict.
pub fn acl_action(a: Action) -> AclAction {
    match a {
        Action::Accept => AclAction::Accept,
        Action::Drop => AclAction::Deny,
        Action::RejectTcpReset => AclAction::RejectTcpReset,
        Action::RejectIcmp(code) | Action::RejectIcmp6(code) => AclAction::RejectUnreachable(code),
    }
}

impl Acl for PipelineFirewall {
    type State = FirewallWorker;

    fn new_state(&self) -> FirewallWorker {
        FirewallWorker::with_epoch(Arc::clone(&self.fw), self.seed, self.epoch)
    }

    /// A rule set with `ct state` keeps a connection table per worker.
    fn keeps_flows(&self) -> bool {
        self.fw.stateful()
    }

    fn classify_batch(
        &self,
        state: &mut FirewallWorker,
        now_ns: u64,
        keys: &[FlowKey],
        out: &mut [AclAction],
    ) {
        self.classify(state, now_ns, keys, &[], out, None);
    }

    fn classify_batch_with(
        &self,
        state: &mut FirewallWorker,
        now_ns: u64,
        keys: &[FlowKey],
        ct_hints: &[u8],
        out: &mut [AclAction],
        rules: Option<&mut [Option<u32>]>,
    ) {
        self.classify(state, now_ns, keys, ct_hints, out, rules);
    }
}

impl PipelineFirewall {
    /// Classifies through `state` with each packet's connection-tracking
    /// hint (missing ones: none), writing each decision's rule slot to
    /// `rules` when given.
    fn classify(
        &self,
        state: &mut FirewallWorker,
        now_ns: u64,
        keys: &[FlowKey],
        ct_hints: &[u8],
        out: &mut [AclAction],
        rules: Option<&mut [Option<u32>]>,
    ) {
        if !Arc::ptr_eq(state.firewall(), &self.fw) || state.epoch() != self.epoch {
            // A new snapshot: counters restart (allocates once per swap).
            state.adopt_epoch(Arc::clone(&self.fw), self.epoch);
        }
        let n = keys.len().min(out.len());
        let (keys, acts) = (&keys[..n], &mut out[..n]);
        // The pipeline's action of key `j`, and its rule slot when traced:
        // a closure of its own, so the usual untraced batch tests nothing
        // more per packet.
        match rules {
            None => decide(state, now_ns, keys, ct_hints, |j, v| {
                acts[j] = acl_action(v.action);
            }),
            Some(traced) => decide(state, now_ns, keys, ct_hints, |j, v| {
                acts[j] = acl_action(v.action);
                if let Some(r) = traced.get_mut(j) {
                    *r = Some(v.rule);
                }
            }),
        }
    }
}

/// Hands each key's verdict in the forward chain to `each(j, verdict)`.
/// Without connection tracking the flow keys are classified in place and
/// each verdict is handed on as it is decided; with it they become packet
/// keys (with their hints) for the tracked path.
#[inline(always)]
fn decide(
    state: &mut FirewallWorker,
    now_ns: u64,
    keys: &[FlowKey],
    ct_hints: &[u8],
    mut each: impl FnMut(usize, Verdict),
) {
    if state.classify_stateless(Chain::Forward, keys, now_ns, &mut each) {
        return;
    }
    for (c, chunk) in keys.chunks(CHUNK).enumerate() {
        let base = c * CHUNK;
        let mut pk = [PacketKey::default(); CHUNK];
        for (j, (p, k)) in pk.iter_mut().zip(chunk).enumerate() {
            *p = packet_key(k);
            if let Some(&h) = ct_hints.get(base + j) {
                p.ct_hint = CtHint::from_code(u32::from(h));
            }
        }
        let m = chunk.len();
        let mut verdicts = [Verdict::default(); CHUNK];
        state.process_batch(Chain::Forward, &mut pk[..m], &mut verdicts[..m], now_ns);
        for (j, &v) in verdicts[..m].iter().enumerate() {
            each(base + j, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{InterfaceMap, parse_rules};

    #[test]
    fn classifies_pipeline_keys() {
        let set = parse_rules(
            "chain forward {\n policy accept\n iif eth1 tcp dport 23 reject\n icmp type echo-request drop\n ip daddr 192.0.2.0/24 reject with icmpx type admin-prohibited\n}",
            "acl",
        )
        .unwrap();
        let ifaces: InterfaceMap = [("eth0", 0u16), ("eth1", 1)].into_iter().collect();
        let acl = PipelineFirewall::new(Arc::new(Firewall::compile(&set, &ifaces).unwrap()), 3);
        let mut st = acl.new_state();
        let mapped = |a: u32| 0xffff_0000_0000u128 | a as u128;
        let base = FlowKey {
            interface: 1,
            out_interface: 0,
            src: mapped(0xc633_6401),
            dst: mapped(0x0a00_0001),
            protocol: 6,
            src_port: 4000,
            dst_port: 23,
            length: 60,
            ..FlowKey::default()
        };
        let keys = [
            base,
            FlowKey {
                dst_port: 22,
                ..base
            },
            FlowKey {
                protocol: 17,
                ..base
            },
            FlowKey {
                protocol: 1,
                src_port: 8 << 8,
                icmp_type: 8,
                dst_port: 7,
                ..base
            },
            FlowKey {
                protocol: 17,
                dst: mapped(0xc000_0205),
                ..base
            },
        ];
        let mut out = [AclAction::Accept; 5];
        acl.classify_batch(&mut st, 0, &keys, &mut out);
        assert_eq!(
            out,
            [
                AclAction::RejectTcpReset, // plain reject of TCP: a RST
                AclAction::Accept,
                AclAction::Accept,
                AclAction::Deny,
                AclAction::RejectUnreachable(13),
            ]
        );
        assert_eq!(st.counters().packets[0], 1);
        assert_eq!(st.counters().packets[1], 1);
        assert_eq!(st.counters().packets[2], 1);
    }

    /// `keys` through `acl`'s pipeline path (a fresh worker state) and,
    /// converted with `packet_key`, through `process_batch` of another
    /// fresh worker: the first's state, actions and rule slots, the
    /// second's worker and verdicts.
    #[allow(clippy::type_complexity)]
    fn both_paths(
        acl: &PipelineFirewall,
        keys: &[FlowKey],
    ) -> (
        FirewallWorker,
        Vec<AclAction>,
        Vec<Option<u32>>,
        FirewallWorker,
        Vec<Verdict>,
    ) {
        let mut st = acl.new_state();
        let mut out = vec![AclAction::Accept; keys.len()];
        let mut slots = vec![None; keys.len()];
        acl.classify_batch_with(&mut st, 0, keys, &[], &mut out, Some(&mut slots));
        let mut reference = acl.new_state();
        let mut pk: Vec<PacketKey> = keys.iter().map(packet_key).collect();
        let mut verdicts = vec![Verdict::default(); keys.len()];
        reference.process_batch(Chain::Forward, &mut pk, &mut verdicts, 0);
        (st, out, slots, reference, verdicts)
    }

    /// The stateless path (verdicts written as they are decided) against
    /// `FirewallWorker::process_batch` over the same keys: actions, rule
    /// slots and counters, for a batch longer than a chunk whose families
    /// alternate (the classifier answers IPv4 first within a chunk).
    #[test]
    fn stateless_path_agrees_with_process_batch() {
        let set = parse_rules(
            "chain forward {\n policy drop\n tcp dport 22 counter\n ip saddr 10.0.0.0/8 tcp dport 23 reject\n ip6 saddr 2001:db8::/32 udp dport 53 reject with icmpv6 type admin-prohibited\n udp dport 9 drop\n ip daddr 192.0.2.0/24 accept\n ip6 daddr 2001:db8:1::/48 accept\n tcp dport 22 accept\n}",
            "acl",
        )
        .unwrap();
        let fw = Arc::new(Firewall::compile(&set, &InterfaceMap::new()).unwrap());
        assert!(!fw.stateful());
        let acl = PipelineFirewall::new(Arc::clone(&fw), 3);
        let mapped = |a: u32| 0xffff_0000_0000u128 | a as u128;
        let keys: Vec<FlowKey> = (0..150u32)
            .map(|i| {
                let is_ipv6 = i % 3 == 1;
                let (src, dst) = if is_ipv6 {
                    (
                        0x2001_0db8_0000_0000_0000_0000_0000_0001u128
                            + u128::from(i % 2) * (1 << 100),
                        0x2001_0db8_0001_0000_0000_0000_0000_0001u128
                            + u128::from(i % 5 / 4) * (1 << 80),
                    )
                } else {
                    (
                        mapped(0x0a00_0001 + (i % 2) * 0x1000_0000),
                        mapped(0xc000_0201 + (i % 5 / 4) * 0x100),
                    )
                };
                let (protocol, dst_port) =
                    [(6, 22), (6, 23), (17, 53), (17, 9), (17, 80)][(i % 5) as usize];
                FlowKey {
                    is_ipv6,
                    src,
                    dst,
                    protocol,
                    src_port: 40_000,
                    dst_port,
                    length: 60 + i as u16,
                    ..FlowKey::default()
                }
            })
            .collect();
        let (st, out, slots, reference, verdicts) = both_paths(&acl, &keys);
        let want: Vec<AclAction> = verdicts.iter().map(|v| acl_action(v.action)).collect();
        let want_slots: Vec<Option<u32>> = verdicts.iter().map(|v| Some(v.rule)).collect();
        assert_eq!(out, want);
        assert_eq!(slots, want_slots);
        assert_eq!(st.counters(), reference.counters());
        // Every kind of outcome occurred, rejects below the limiter's burst.
        for a in [
            AclAction::Accept,
            AclAction::Deny,
            AclAction::RejectTcpReset,
            AclAction::RejectUnreachable(1),
        ] {
            assert!(out.contains(&a), "{a:?} missing");
        }
        assert!(
            st.counters().packets[0] > 0,
            "the counter-only rule counted"
        );
        assert_eq!(st.stats().rejects_rate_limited, 0);
    }

    /// Only ICMP of the packet's own family carries the echo identifier:
    /// protocol 1 in IPv6 and 58 in IPv4 are ports like any other.
    #[test]
    fn ports_swap_only_for_the_familys_icmp() {
        let key = |is_ipv6, protocol| FlowKey {
            is_ipv6,
            protocol,
            src_port: 1000,
            dst_port: 7,
            ..FlowKey::default()
        };
        assert_eq!(ports(&key(false, 1)), (7, 0));
        assert_eq!(ports(&key(true, 58)), (7, 0));
        for (v6, proto) in [
            (false, 58),
            (true, 1),
            (false, 6),
            (true, 17),
            (false, 59),
            (true, 0),
        ] {
            assert_eq!(ports(&key(v6, proto)), (1000, 7), "{v6} {proto}");
        }
    }

    /// The flow key classified in place reads every field as
    /// `packet_key` converts it: random keys of every protocol (ICMP's
    /// identifier in the destination port, TCP flags, ICMP types), both
    /// interfaces and IPv4-mapped addresses, against rules on each field.
    #[test]
    fn flow_keys_in_place_read_as_their_packet_keys() {
        let mut set = parse_rules(
            "limit reject 1000000/second burst 1000000\n\
             chain forward {\n policy accept\n\
             icmp type echo-request counter\n\
             icmp type echo-reply drop\n\
             icmpv6 type 129 reject\n\
             tcp flags syn / syn,ack drop\n\
             tcp sport 1000-2000 reject with tcp reset\n\
             udp dport 53 drop\n\
             th dport 0 reject\n\
             iif eth1 oif eth2 drop\n\
             ip saddr 10.0.0.0/9 ip daddr 192.0.2.0/25 drop\n\
             ip6 saddr 2001:db8::/33 reject\n\
             meta l4proto 47 drop\n}",
            "acl",
        )
        .unwrap();
        // Port matches of any protocol (the language ties ports to TCP,
        // UDP, SCTP or UDP-Lite; the classifier does not): ICMP's
        // identifier reads as the source port, its destination port as 0.
        let mut sport = crate::rules::Rule::any(crate::rules::RuleAction::Drop);
        sport.sport = Some(vec![(1500, 1500)]);
        let mut dport = crate::rules::Rule::any(crate::rules::RuleAction::Count);
        dport.dport = Some(vec![(0, 0)]);
        set.chains[Chain::Forward.index()]
            .rules
            .extend([sport, dport]);
        let ifaces: InterfaceMap = [("eth0", 0u16), ("eth1", 1), ("eth2", 2)]
            .into_iter()
            .collect();
        let fw = Arc::new(Firewall::compile(&set, &ifaces).unwrap());
        assert!(!fw.stateful());
        let acl = PipelineFirewall::new(Arc::clone(&fw), 5);
        let mut rng = crate::rulegen::SplitMix::new(11);
        let keys: Vec<FlowKey> = (0..400)
            .map(|_| {
                let is_ipv6 = rng.percent(50);
                let mut addr = |v6_base: u128, v4_base: u32| {
                    if is_ipv6 {
                        v6_base ^ (u128::from(rng.next_u64()) << 64 >> rng.below(40))
                    } else {
                        let a = v4_base ^ (rng.next_u64() as u32 >> rng.below(32));
                        // Mapped (as the pipeline builds it) or not: only
                        // the low 32 bits count.
                        u128::from(a) | if rng.percent(50) { 0xffff << 32 } else { 0 }
                    }
                };
                let src = addr(0x2001_0db8 << 96, 0x0a00_0001);
                let dst = addr(0x2001_0db8_0001 << 80, 0xc000_0201);
                let small = |rng: &mut crate::rulegen::SplitMix, v: &[u16]| {
                    v[rng.below(v.len() as u64) as usize]
                };
                FlowKey {
                    interface: small(&mut rng, &[0, 1, 2, 3]),
                    out_interface: small(&mut rng, &[0, 1, 2, 3]),
                    is_ipv6,
                    src,
                    dst,
                    protocol: small(&mut rng, &[1, 6, 17, 58, 47]) as u8,
                    src_port: small(&mut rng, &[0, 999, 1000, 1500, 2001, 4000]),
                    dst_port: small(&mut rng, &[0, 53, 80, 1500]),
                    tcp_flags: small(&mut rng, &[0x02, 0x12, 0x10, 0x04]) as u8,
                    icmp_type: small(&mut rng, &[0, 3, 8, 128, 129]) as u8,
                    length: 40 + rng.below(1000) as u16,
                    ..FlowKey::default()
                }
            })
            .collect();
        let (st, out, slots, reference, verdicts) = both_paths(&acl, &keys);
        let want_slots: Vec<Option<u32>> = verdicts.iter().map(|v| Some(v.rule)).collect();
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(slots[i], want_slots[i], "key {k:?}");
            assert_eq!(out[i], acl_action(verdicts[i].action), "key {k:?}");
        }
        assert_eq!(st.counters(), reference.counters());
        // Every rule decided or counted some key.
        for (slot, n) in st.counters().packets.iter().enumerate().take(13) {
            assert!(*n > 0, "rule {slot} never matched");
        }
    }
}
