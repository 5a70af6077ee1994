//! ARP input (RFC 826).
//!
//! Reads: the ARP header (hardware/protocol types and lengths) and the
//! sender and target protocol addresses.
//! Writes: nothing.
//! Next: requests and replies whose target is one of the router's
//! addresses, and gratuitous ARP (sender = target, RFC 5227 §3), go to the
//! punt output so the host's ARP code answers and learns; other ARP is
//! dropped as `arp_not_for_us`, malformed ARP as `arp_malformed`.

use crate::counters::{DropReason, PuntReason};
use crate::tables::{LocalKind, Tables};

/// The ARP decision for the packet at `d[l3..]`.
#[inline]
pub(crate) fn input<F4, F6, A>(
    tables: &Tables<F4, F6, A>,
    d: &[u8],
    l3: usize,
) -> Result<PuntReason, DropReason> {
    let a = d.get(l3..).unwrap_or(&[]);
    if a.len() < 28 || a[0..6] != [0x00, 0x01, 0x08, 0x00, 6, 4] {
        return Err(DropReason::ArpMalformed);
    }
    let spa = u32::from_be_bytes([a[14], a[15], a[16], a[17]]);
    let tpa = u32::from_be_bytes([a[24], a[25], a[26], a[27]]);
    if tables.local4(tpa) == Some(LocalKind::Unicast) || spa == tpa {
        Ok(PuntReason::Arp)
    } else {
        Err(DropReason::ArpNotForUs)
    }
}
