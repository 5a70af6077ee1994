//! Ethernet / VLAN dispatch (IEEE 802.3 clause 3, IEEE 802.1Q / 802.1ad).
//!
//! Reads: destination MAC, up to two VLAN tags, EtherType.
//! Writes: nothing.
//! Next: the logical interface is found from (ingress port, VLAN ids);
//! unicast frames must carry that interface's MAC (else `not_our_mac`);
//! broadcast and multicast frames go on for local delivery only. IPv4 goes
//! to [`super::ipv4`], IPv6 to [`super::ipv6`], ARP to [`super::arp`];
//! anything else is dropped as `unknown_ethertype`.

use wire::ethertype;

use crate::counters::DropReason;
use crate::tables::Vlan;

/// How the frame was addressed at the link layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkCast {
    /// To the interface's own MAC.
    Unicast,
    /// To ff:ff:ff:ff:ff:ff or a multicast MAC.
    Group,
}

/// The parsed L2 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct L2 {
    pub(crate) vlan: Vlan,
    pub(crate) ethertype: u16,
    /// Offset of the L3 header.
    pub(crate) l3: usize,
}

#[inline(always)]
fn be16(d: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([d[at], d[at + 1]])
}

#[inline(always)]
fn is_tpid(t: u16) -> bool {
    t == ethertype::VLAN || t == ethertype::QINQ
}

/// Parses the Ethernet header and up to two VLAN tags.
#[inline(always)]
pub(crate) fn parse(d: &[u8]) -> Result<L2, DropReason> {
    if d.len() < 14 {
        return Err(DropReason::FrameTooShort);
    }
    let et = be16(d, 12);
    if !is_tpid(et) {
        return Ok(L2 {
            vlan: Vlan::Untagged,
            ethertype: et,
            l3: 14,
        });
    }
    if d.len() < 18 {
        return Err(DropReason::FrameTooShort);
    }
    let outer = be16(d, 14) & 0x0fff;
    let et2 = be16(d, 16);
    if !is_tpid(et2) {
        return Ok(L2 {
            vlan: vlan_of(&[outer]),
            ethertype: et2,
            l3: 18,
        });
    }
    if d.len() < 22 {
        return Err(DropReason::FrameTooShort);
    }
    Ok(L2 {
        vlan: vlan_of(&[outer, be16(d, 18) & 0x0fff]),
        // A third tag is left as the EtherType: unknown, dropped.
        ethertype: be16(d, 20),
        l3: 22,
    })
}

/// The interface selector for these VLAN ids, outer first. VLAN id 0 is
/// the null id of a priority tag (IEEE 802.1Q-2018 §9.6): the tag carries
/// only priority, so it does not select a VLAN.
#[inline]
fn vlan_of(ids: &[u16]) -> Vlan {
    let mut real = ids.iter().copied().filter(|&v| v != 0);
    match (real.next(), real.next()) {
        (None, _) => Vlan::Untagged,
        (Some(v), None) => Vlan::Single(v),
        (Some(outer), Some(inner)) => Vlan::Double { outer, inner },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untagged_single_double() {
        let mut f = [0u8; 30];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(
            parse(&f).unwrap(),
            L2 {
                vlan: Vlan::Untagged,
                ethertype: 0x0800,
                l3: 14
            }
        );
        f[12..18].copy_from_slice(&[0x81, 0x00, 0x20, 0x64, 0x86, 0xdd]);
        assert_eq!(
            parse(&f).unwrap(),
            L2 {
                vlan: Vlan::Single(100),
                ethertype: 0x86dd,
                l3: 18
            }
        );
        f[12..22].copy_from_slice(&[0x88, 0xa8, 0x00, 0x0a, 0x81, 0x00, 0x00, 0x14, 0x08, 0x06]);
        assert_eq!(
            parse(&f).unwrap(),
            L2 {
                vlan: Vlan::Double {
                    outer: 10,
                    inner: 20
                },
                ethertype: 0x0806,
                l3: 22
            }
        );
    }

    #[test]
    fn priority_tags_do_not_select_a_vlan() {
        let mut f = [0u8; 30];
        f[12..18].copy_from_slice(&[0x81, 0x00, 0x60, 0x00, 0x08, 0x00]);
        assert_eq!(
            parse(&f).unwrap(),
            L2 {
                vlan: Vlan::Untagged,
                ethertype: 0x0800,
                l3: 18
            }
        );
        f[12..22].copy_from_slice(&[0x88, 0xa8, 0x00, 0x0a, 0x81, 0x00, 0xa0, 0x00, 0x08, 0x00]);
        assert_eq!(
            parse(&f).unwrap(),
            L2 {
                vlan: Vlan::Single(10),
                ethertype: 0x0800,
                l3: 22
            }
        );
    }

    #[test]
    fn truncated_at_every_boundary() {
        let mut f = [0u8; 22];
        f[12..22].copy_from_slice(&[0x88, 0xa8, 0x00, 0x0a, 0x81, 0x00, 0x00, 0x14, 0x08, 0x06]);
        for len in 0..22 {
            assert_eq!(
                parse(&f[..len]),
                Err(DropReason::FrameTooShort),
                "len {len}"
            );
        }
    }
}
