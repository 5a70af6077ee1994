//! The ACL stage: the hook where the firewall's classifier plugs in.
//!
//! Reads: the flow key of every packet that passed validation and is not
//! for the router (in-interface, addresses, protocol, ports).
//! Writes: nothing in the packet.
//! Next: accepted packets go to the route lookup; denied ones are dropped
//! and counted as `acl_denied`.
//!
//! The stage works on whole batches so a classifier can overlap its memory
//! accesses. [`AcceptAll`] is the default; the pipeline skips building
//! keys when [`Acl::accepts_all`] says so.

use crate::tables::InterfaceId;

/// The 5-tuple and ingress interface of a packet, as the ACL sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowKey {
    /// Ingress logical interface.
    pub interface: InterfaceId,
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
}

/// What the ACL decided for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AclAction {
    /// Continue to the route lookup.
    #[default]
    Accept,
    /// Drop, counted as `acl_denied`.
    Deny,
}

/// A packet classifier run on every batch before the route lookup.
///
/// Implementations must not allocate, lock or block.
pub trait Acl: Send + Sync {
    /// True when the classifier accepts everything; the pipeline then does
    /// not call [`Acl::classify_batch`].
    fn accepts_all(&self) -> bool {
        false
    }

    /// Classifies a batch: `out[i]` answers `keys[i]`; both slices have the
    /// same length.
    fn classify_batch(&self, keys: &[FlowKey], out: &mut [AclAction]);
}

/// The default ACL: everything passes.
#[derive(Debug, Clone, Copy, Default)]
pub struct AcceptAll;

impl Acl for AcceptAll {
    fn accepts_all(&self) -> bool {
        true
    }

    fn classify_batch(&self, _keys: &[FlowKey], out: &mut [AclAction]) {
        out.fill(AclAction::Accept);
    }
}

impl<T: Acl + ?Sized> Acl for std::sync::Arc<T> {
    fn accepts_all(&self) -> bool {
        (**self).accepts_all()
    }
    fn classify_batch(&self, keys: &[FlowKey], out: &mut [AclAction]) {
        (**self).classify_batch(keys, out)
    }
}
