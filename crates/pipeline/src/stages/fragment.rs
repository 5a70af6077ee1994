//! IPv4 fragmentation (RFC 791 §2.3 and §3.2, RFC 1812 §5.2.6).
//!
//! Reads: the IPv4 packet as received (header, options, payload), the
//! egress interface's MTU and L2 header.
//! Writes: one new packet per fragment in the worker's pool: egress L2
//! header; the first fragment carries every option, later ones only the
//! options whose copy flag is set (RFC 791 §3.1), padded to a 4-byte
//! boundary; each fragment has its total length, MF flag (set on all but
//! the last, and on the last too when the original was itself a non-final
//! fragment), offset (the original's plus this fragment's, in 8-byte
//! units), the TTL decremented once and a freshly computed header checksum.
//! Every fragment's data except the last's is a multiple of 8 bytes, and
//! each fragment fits the MTU.
//! Next: the fragments are listed in [`crate::BatchOutput::generated`]; the
//! original frame's verdict is `Consumed`. When the pool lacks room for
//! all the fragments none is sent and the packet is dropped as
//! `pool_exhausted`; malformed options drop it as `ipv4_bad_options`.

use super::write_l2;
use crate::counters::DropReason;
use crate::tables::{IfRuntime, InterfaceId, MacAddr};
use crate::worker::{Generated, Worker};

/// The options of `opts` whose copy flag is set, concatenated, and their
/// length; `Err` when an option's length runs past the header.
pub(crate) fn copied_options(opts: &[u8], out: &mut [u8; 40]) -> Result<usize, DropReason> {
    let mut i = 0;
    let mut n = 0;
    while i < opts.len() {
        let t = opts[i];
        match t {
            0 => break,
            1 => i += 1,
            _ => {
                let len = usize::from(*opts.get(i + 1).ok_or(DropReason::Ipv4BadOptions)?);
                if len < 2 || i + len > opts.len() {
                    return Err(DropReason::Ipv4BadOptions);
                }
                if t & 0x80 != 0 {
                    out[n..n + len].copy_from_slice(&opts[i..i + len]);
                    n += len;
                }
                i += len;
            }
        }
    }
    Ok(n)
}

/// Fragments `orig` (a validated IPv4 packet with TTL > 1) for egress on
/// `out_if`; `Ok(fragments)` when they were all queued.
pub(crate) fn fragment_v4(
    w: &mut Worker,
    orig: &[u8],
    out_if: InterfaceId,
    ifr: &IfRuntime,
    mac: MacAddr,
) -> Result<usize, DropReason> {
    let ihl = usize::from(orig[0] & 0x0f) * 4;
    let mut copied = [0u8; 40];
    let copied_len = copied_options(&orig[20..ihl], &mut copied)?;
    let later_ihl = 20 + copied_len.div_ceil(4) * 4;
    let l2_len = ifr.l2_len();
    let mtu = usize::from(ifr.mtu).min(w.out.slot_size.saturating_sub(l2_len));
    let first_data = mtu.saturating_sub(ihl) & !7;
    let later_data = mtu.saturating_sub(later_ihl) & !7;
    let payload = &orig[ihl..];
    if first_data == 0 || later_data == 0 {
        return Err(DropReason::PoolExhausted);
    }
    let count = if payload.len() <= first_data {
        1
    } else {
        1 + (payload.len() - first_data).div_ceil(later_data)
    };
    if count > w.out.free_slots() {
        return Err(DropReason::PoolExhausted);
    }
    let flags = u16::from_be_bytes([orig[6], orig[7]]);
    let orig_offset = flags & 0x1fff;
    let orig_mf = flags & 0x2000 != 0;
    let ttl = orig[8].saturating_sub(1);
    let mut off = 0;
    let mut first = true;
    while off < payload.len() || first {
        let (hl, room) = if first {
            (ihl, first_data)
        } else {
            (later_ihl, later_data)
        };
        let take = room.min(payload.len() - off);
        let last = off + take == payload.len();
        let Some((slot, buf)) = w.out.alloc_slot() else {
            return Err(DropReason::PoolExhausted);
        };
        let l2 = write_l2(buf, ifr, mac, wire::ethertype::IPV4);
        let total = hl + take;
        let ip = &mut buf[l2..l2 + total];
        if first {
            ip[..ihl].copy_from_slice(&orig[..ihl]);
        } else {
            ip[..20].copy_from_slice(&orig[..20]);
            ip[0] = 0x40 | (hl / 4) as u8;
            ip[20..20 + copied_len].copy_from_slice(&copied[..copied_len]);
            // End-of-option-list padding (RFC 791 §3.1).
            ip[20 + copied_len..hl].fill(0);
        }
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        let mf = if !last || orig_mf { 0x2000 } else { 0 };
        let field = mf | (orig_offset + (off / 8) as u16) & 0x1fff;
        ip[6..8].copy_from_slice(&field.to_be_bytes());
        ip[8] = ttl;
        ip[10..12].fill(0);
        let c = wire::checksum::checksum(&ip[..hl]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        ip[hl..].copy_from_slice(&payload[off..off + take]);
        let len = l2 + total;
        w.out.generated.push(Generated {
            port: ifr.port,
            interface: out_if,
            slot,
            len: len as u32,
        });
        w.count_tx(out_if, len);
        w.counters.fragments_sent += 1;
        off += take;
        first = false;
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_only_flagged_options() {
        // NOP, record route (0x07, not copied), LSRR (0x83, copied), EOL.
        let opts = [1, 7, 7, 4, 0, 0, 0, 0, 0x83, 3, 4, 0];
        let mut out = [0u8; 40];
        assert_eq!(copied_options(&opts, &mut out), Ok(3));
        assert_eq!(&out[..3], &[0x83, 3, 4]);
        assert_eq!(
            copied_options(&[0x83, 9, 0, 0], &mut out),
            Err(DropReason::Ipv4BadOptions)
        );
        assert_eq!(
            copied_options(&[0x83], &mut out),
            Err(DropReason::Ipv4BadOptions)
        );
        assert_eq!(
            copied_options(&[0x83, 1], &mut out),
            Err(DropReason::Ipv4BadOptions)
        );
    }
}
