//! The ACL stage: the hook where the firewall's classifier plugs in.
//!
//! Reads: the flow key of every packet that passed validation, is not for
//! the router and has a route (ingress and egress interface, addresses,
//! protocol, ports, TCP flags, ICMP type and code, length). It runs after
//! the route lookup and next-hop choice, like a forward chain, and before
//! neighbour resolution, ICMP errors and fragmentation, so a denied packet
//! causes nothing (not even a punt on a neighbour miss).
//! Writes: nothing in the packet.
//! Next: accepted packets go on to the forward stage; denied ones are
//! dropped and counted as `acl_denied`; rejected ones are dropped too and
//! answered with an ICMP unreachable or a TCP RST.
//!
//! The stage works on whole batches so a classifier can overlap its memory
//! accesses. [`AcceptAll`] is the default; the pipeline skips building
//! keys when [`Acl::accepts_all`] says so.

use crate::tables::InterfaceId;

/// `FlowKey::out_interface` before the egress interface is known.
pub const NO_INTERFACE: InterfaceId = InterfaceId::MAX;

/// The 5-tuple and interfaces of a packet, as the ACL sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Ingress logical interface.
    pub interface: InterfaceId,
    /// Egress logical interface chosen by the route lookup and ECMP.
    pub out_interface: InterfaceId,
    /// True for IPv6; IPv4 addresses are then IPv4-mapped below.
    pub is_ipv6: bool,
    /// True for any fragment (first or later; IPv6 atomic fragments
    /// excluded). Later fragments carry no ports: they are 0 here.
    pub fragment: bool,
    /// Source address; IPv4 as `::ffff:a.b.c.d` (host byte order integer).
    pub src: u128,
    /// Destination address, same encoding.
    pub dst: u128,
    /// IP protocol / final IPv6 next header.
    pub protocol: u8,
    /// TCP/UDP/SCTP source port (ICMP: type << 8 | code); 0 when absent
    /// or in a non-first fragment.
    pub src_port: u16,
    /// TCP/UDP/SCTP destination port (ICMP: identifier for echo); 0 when
    /// absent or in a non-first fragment.
    pub dst_port: u16,
    /// TCP flags byte (FIN 0x01 .. CWR 0x80); 0 for other protocols.
    pub tcp_flags: u8,
    /// ICMP / ICMPv6 type; 0 for other protocols.
    pub icmp_type: u8,
    /// ICMP / ICMPv6 code; 0 for other protocols.
    pub icmp_code: u8,
    /// IP packet length (header included), saturated at 65535.
    pub length: u16,
}

// The ACL stage copies keys by the chunk: a byte more costs a quarter
// more (48 -> 64 with the u128 alignment), measurably.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<FlowKey>() == 48);

impl Default for FlowKey {
    fn default() -> Self {
        Self {
            interface: NO_INTERFACE,
            out_interface: NO_INTERFACE,
            is_ipv6: false,
            fragment: false,
            src: 0,
            dst: 0,
            protocol: 0,
            src_port: 0,
            dst_port: 0,
            tcp_flags: 0,
            icmp_type: 0,
            icmp_code: 0,
            length: 0,
        }
    }
}

/// What the ACL decided for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AclAction {
    /// Continue to the forward stage.
    #[default]
    Accept,
    /// Drop silently, counted as `acl_denied`.
    Deny,
    /// Drop, counted as `acl_denied`, and answer with an ICMP (type 3) or
    /// ICMPv6 (type 1) destination unreachable of this code (RFC 792,
    /// RFC 4443 §3.1; e.g. 13 / 1: administratively prohibited), under the
    /// same rules and rate limit as every ICMP error the pipeline sends.
    RejectUnreachable(u8),
    /// Drop, counted as `acl_denied`, and answer a TCP segment with a RST
    /// from its destination (RFC 9293 §3.10.7.1); counted as
    /// `tcp_resets_sent`. Not rate limited by the pipeline.
    RejectTcpReset,
}

/// A packet classifier run on every chunk of a batch after the next-hop
/// choice.
///
/// The classifier itself is shared by all workers (it lives in the
/// [`crate::Tables`] snapshot); anything it updates per packet (rule
/// counters, connection tracking) lives in its per-worker [`Acl::State`],
/// which each [`crate::Worker`] creates with [`Acl::new_state`] on first
/// use (and again after a snapshot whose ACL has another state type) and
/// passes back on every call. The control side reads it with
/// [`crate::Worker::acl_state`].
///
/// Implementations must not allocate, lock or block in
/// [`Acl::classify_batch`].
pub trait Acl: Send + Sync {
    /// Per-worker mutable state; `()` for a stateless classifier.
    type State: Send + 'static;

    /// A fresh per-worker state.
    fn new_state(&self) -> Self::State;

    /// True when the classifier accepts everything; the pipeline then does
    /// not build flow keys for it nor call [`Acl::classify_batch`].
    fn accepts_all(&self) -> bool {
        false
    }

    /// True when [`Acl::State`] holds flows (connection tracking): both
    /// directions of a flow must then reach the same worker, which a
    /// backend with several workers ensures by handing frames to their
    /// owner ([`crate::owner`]).
    fn keeps_flows(&self) -> bool {
        false
    }

    /// Classifies a batch: `out[i]` answers `keys[i]`; both slices have the
    /// same length. `now_ns` is the batch's time as given to
    /// [`crate::Worker::process`] (for connection tracking, rate limits).
    fn classify_batch(
        &self,
        state: &mut Self::State,
        now_ns: u64,
        keys: &[FlowKey],
        out: &mut [AclAction],
    );

    /// [`Acl::classify_batch`] with what the pipeline knows beyond the
    /// keys: `ct_hints[i]`, the XDP engine's connection-tracking hint of
    /// packet `i` (its frame's, 0 without one), and, for packet traces,
    /// `rules` to name the rule (counter slot) behind each decision (`None`
    /// where none is known). The pipeline calls this one; the default
    /// ignores the hints and names no rule.
    fn classify_batch_with(
        &self,
        state: &mut Self::State,
        now_ns: u64,
        keys: &[FlowKey],
        ct_hints: &[u8],
        out: &mut [AclAction],
        rules: Option<&mut [Option<u32>]>,
    ) {
        let _ = ct_hints;
        self.classify_batch(state, now_ns, keys, out);
        if let Some(r) = rules {
            r.fill(None);
        }
    }
}

/// The default ACL: everything passes.
#[derive(Debug, Clone, Copy, Default)]
pub struct AcceptAll;

impl Acl for AcceptAll {
    type State = ();

    fn new_state(&self) {}

    fn accepts_all(&self) -> bool {
        true
    }

    fn classify_batch(
        &self,
        _state: &mut (),
        _now_ns: u64,
        _keys: &[FlowKey],
        out: &mut [AclAction],
    ) {
        out.fill(AclAction::Accept);
    }
}

impl<T: Acl + ?Sized> Acl for std::sync::Arc<T> {
    type State = T::State;
    fn new_state(&self) -> T::State {
        (**self).new_state()
    }
    fn accepts_all(&self) -> bool {
        (**self).accepts_all()
    }
    fn keeps_flows(&self) -> bool {
        (**self).keeps_flows()
    }
    fn classify_batch(
        &self,
        state: &mut T::State,
        now_ns: u64,
        keys: &[FlowKey],
        out: &mut [AclAction],
    ) {
        (**self).classify_batch(state, now_ns, keys, out)
    }

    fn classify_batch_with(
        &self,
        state: &mut T::State,
        now_ns: u64,
        keys: &[FlowKey],
        ct_hints: &[u8],
        out: &mut [AclAction],
        rules: Option<&mut [Option<u32>]>,
    ) {
        (**self).classify_batch_with(state, now_ns, keys, ct_hints, out, rules)
    }
}

/// An optional ACL: `None` accepts everything (and, like [`AcceptAll`],
/// lets the pipeline skip building keys), `Some` classifies.
impl<T: Acl> Acl for Option<T> {
    type State = Option<T::State>;
    fn new_state(&self) -> Option<T::State> {
        self.as_ref().map(Acl::new_state)
    }
    fn accepts_all(&self) -> bool {
        self.as_ref().is_none_or(Acl::accepts_all)
    }
    fn keeps_flows(&self) -> bool {
        self.as_ref().is_some_and(Acl::keeps_flows)
    }
    fn classify_batch(
        &self,
        state: &mut Option<T::State>,
        now_ns: u64,
        keys: &[FlowKey],
        out: &mut [AclAction],
    ) {
        match (self, state) {
            (Some(acl), Some(st)) => acl.classify_batch(st, now_ns, keys, out),
            (Some(acl), st @ None) => {
                let st = st.insert(acl.new_state());
                acl.classify_batch(st, now_ns, keys, out)
            }
            (None, _) => out.fill(AclAction::Accept),
        }
    }

    fn classify_batch_with(
        &self,
        state: &mut Option<T::State>,
        now_ns: u64,
        keys: &[FlowKey],
        ct_hints: &[u8],
        out: &mut [AclAction],
        rules: Option<&mut [Option<u32>]>,
    ) {
        match (self, state) {
            (Some(acl), st) => {
                let st = st.get_or_insert_with(|| acl.new_state());
                acl.classify_batch_with(st, now_ns, keys, ct_hints, out, rules)
            }
            (None, _) => {
                out.fill(AclAction::Accept);
                if let Some(r) = rules {
                    r.fill(None);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Denies everything, counting the packets it saw.
    struct DenyAll;
    impl Acl for DenyAll {
        type State = u32;
        fn new_state(&self) -> u32 {
            0
        }
        fn classify_batch(&self, seen: &mut u32, _: u64, keys: &[FlowKey], out: &mut [AclAction]) {
            *seen += keys.len() as u32;
            out.fill(AclAction::Deny);
        }
    }

    #[test]
    fn optional_acl_is_accept_all_when_absent() {
        let keys = [FlowKey::default(); 3];
        let mut out = [AclAction::Deny; 3];
        let none: Option<DenyAll> = None;
        assert!(none.accepts_all());
        let mut st = none.new_state();
        none.classify_batch(&mut st, 0, &keys, &mut out);
        assert_eq!(out, [AclAction::Accept; 3]);
        assert!(st.is_none());

        let some = Some(DenyAll);
        assert!(!some.accepts_all());
        // A state made while the ACL was absent is replaced on first use.
        some.classify_batch(&mut st, 0, &keys, &mut out);
        assert_eq!(out, [AclAction::Deny; 3]);
        let mut st2 = some.new_state();
        some.classify_batch(&mut st2, 0, &keys[..2], &mut out[..2]);
        assert_eq!((st, st2), (Some(3), Some(2)));
    }
}
