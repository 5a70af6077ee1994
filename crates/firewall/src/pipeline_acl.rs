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
use crate::key::{Action, PacketKey, Verdict};
use crate::rules::{Chain, CtState};
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

/// The firewall's key for a pipeline flow key.
pub fn packet_key(k: &FlowKey) -> PacketKey {
    let icmp = matches!((k.is_ipv6, k.protocol), (false, 1) | (true, 58));
    PacketKey {
        src: k.src,
        dst: k.dst,
        // ICMP: the pipeline carries the echo identifier in dst_port.
        sport: if icmp { k.dst_port } else { k.src_port },
        dport: if icmp { 0 } else { k.dst_port },
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
        mut rules: Option<&mut [Option<u32>]>,
    ) {
        if !Arc::ptr_eq(state.firewall(), &self.fw) || state.epoch() != self.epoch {
            // A new snapshot: counters restart (allocates once per swap).
            state.adopt_epoch(Arc::clone(&self.fw), self.epoch);
        }
        let n = keys.len().min(out.len());
        let mut base = 0;
        while base < n {
            let end = (base + CHUNK).min(n);
            let mut pk = [PacketKey::default(); CHUNK];
            let mut verdicts = [Verdict::default(); CHUNK];
            let m = end - base;
            for (j, (p, k)) in pk.iter_mut().zip(&keys[base..end]).enumerate() {
                *p = packet_key(k);
                if let Some(&h) = ct_hints.get(base + j) {
                    p.ct_hint = CtHint::from_code(u32::from(h));
                }
            }
            state.process_batch(Chain::Forward, &mut pk[..m], &mut verdicts[..m], now_ns);
            for (o, v) in out[base..end].iter_mut().zip(&verdicts[..m]) {
                *o = acl_action(v.action);
            }
            if let Some(r) = rules.as_deref_mut() {
                for (o, v) in r.iter_mut().skip(base).zip(&verdicts[..m]) {
                    *o = Some(v.rule);
                }
            }
            base = end;
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
}
