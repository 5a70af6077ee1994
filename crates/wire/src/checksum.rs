//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! Sums are kept as folded, *uncomplemented* 16-bit one's-complement sums
//! (`u16`) so that partial sums (pseudo-header, header, payload) combine with
//! [`combine`]; [`finish`] complements a sum into the value stored in a
//! header. A header whose stored checksum is correct sums to `0xffff`.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Folds a wide accumulator into a 16-bit one's-complement sum.
#[inline]
pub fn fold(mut acc: u64) -> u16 {
    // 2^16 = 1 (mod 0xffff): adding the high part to the low part keeps the
    // value modulo 0xffff; four rounds bring any u64 below 0x1_0000.
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    acc = (acc & 0xffff) + (acc >> 16);
    acc = (acc & 0xffff) + (acc >> 16);
    acc as u16
}

/// The one's-complement sum of `data` read as big-endian 16-bit words, an
/// odd trailing byte padded with zero (RFC 1071 §4.1). Not complemented.
#[inline]
pub fn sum(data: &[u8]) -> u16 {
    // Native-order 32-bit words with two accumulators: the one's-complement
    // sum is byte-order independent up to one final swap (RFC 1071 §2(B)),
    // and 32-bit words fold to the same 16-bit sum since 2^16 = 1 (mod
    // 0xffff). Each u64 accumulator takes 2^32 words without overflow.
    let mut a0: u64 = 0;
    let mut a1: u64 = 0;
    let mut blocks = data.chunks_exact(16);
    for c in &mut blocks {
        a0 += u64::from(u32::from_ne_bytes([c[0], c[1], c[2], c[3]]));
        a1 += u64::from(u32::from_ne_bytes([c[4], c[5], c[6], c[7]]));
        a0 += u64::from(u32::from_ne_bytes([c[8], c[9], c[10], c[11]]));
        a1 += u64::from(u32::from_ne_bytes([c[12], c[13], c[14], c[15]]));
    }
    let mut acc = a0 + a1;
    let mut words = blocks.remainder().chunks_exact(4);
    for w in &mut words {
        acc += u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
    }
    // The last 0-3 bytes, zero-padded: in memory order they are the start
    // of a word, exactly as if the data went on with zeros. (Spelled out:
    // a copy of a variable length is a call to memcpy.)
    let tail = match *words.remainder() {
        [a] => [a, 0, 0, 0],
        [a, b] => [a, b, 0, 0],
        [a, b, c] => [a, b, c, 0],
        _ => [0; 4],
    };
    acc += u64::from(u32::from_ne_bytes(tail));
    native_to_be(fold(acc))
}

/// A sum of native-order words as the big-endian sum.
#[inline(always)]
fn native_to_be(s: u16) -> u16 {
    if cfg!(target_endian = "little") {
        s.swap_bytes()
    } else {
        s
    }
}

/// [`sum`] of an IPv4 header: a 20-byte one (no options, nearly every
/// packet) as five words in line, longer ones through [`sum`].
#[inline(always)]
pub fn sum_ipv4_header(h: &[u8]) -> u16 {
    let Ok(h) = <&[u8; 20]>::try_from(h) else {
        return sum(h);
    };
    let word = |i: usize| u64::from(u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]));
    native_to_be(fold(word(0) + word(4) + word(8) + word(12) + word(16)))
}

/// Adds one's-complement sums together.
#[inline]
pub fn combine(sums: &[u16]) -> u16 {
    fold(sums.iter().map(|&s| u64::from(s)).sum())
}

/// The value to store in a checksum field for a region summing to `sum`.
#[inline]
pub fn finish(sum: u16) -> u16 {
    !sum
}

/// The checksum of `data` as stored in a header (sum complemented).
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    finish(sum(data))
}

/// Whether a region that includes its own checksum field verifies.
#[inline]
pub fn verifies(sum: u16) -> bool {
    sum == 0xffff
}

/// The IPv4 pseudo-header sum for UDP/TCP (RFC 768, RFC 9293 §3.1):
/// source, destination, zero, protocol, upper-layer length.
#[inline]
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, length: u16) -> u16 {
    let acc = u64::from(u32::from(src))
        + u64::from(u32::from(dst))
        + u64::from(protocol)
        + u64::from(length);
    fold(acc)
}

/// The IPv6 pseudo-header sum (RFC 8200 §8.1): source, destination, 32-bit
/// upper-layer length, zero, next header.
#[inline]
pub fn pseudo_header_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, length: u32) -> u16 {
    let mut acc = u64::from(length) + u64::from(next_header);
    for a in [src.octets(), dst.octets()] {
        for w in a.chunks_exact(4) {
            acc += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
        }
    }
    fold(acc)
}

/// RFC 1624 eqn. 3: the new checksum after one 16-bit word of the covered
/// data changed from `old_word` to `new_word`: `HC' = ~(~HC + ~m + m')`.
#[inline]
pub fn update_u16(old_csum: u16, old_word: u16, new_word: u16) -> u16 {
    !fold(u64::from(!old_csum) + u64::from(!old_word) + u64::from(new_word))
}

/// [`update_u16`] for the IPv4 TTL decremented by one (RFC 1812 §5.3.1),
/// for a TTL of at least 1. The TTL is the high byte of its word, so
/// `m' = m - 0x0100` and `~m + m'` is the constant `0xFEFF`: one add and
/// one fold (the sum stays below `0x1FEFF`), the same result as
/// [`update_u16`] bit for bit.
#[inline(always)]
pub fn update_ttl_decrement(old_csum: u16) -> u16 {
    let acc = u32::from(!old_csum) + 0xFEFF;
    !((acc & 0xffff) + (acc >> 16)) as u16
}

/// [`update_u16`] for an aligned 32-bit field (an IPv4 address).
#[inline]
pub fn update_u32(old_csum: u16, old: u32, new: u32) -> u16 {
    let acc = u64::from(!old_csum)
        + u64::from(!(old >> 16) as u16)
        + u64::from(!(old as u16))
        + u64::from((new >> 16) as u16)
        + u64::from(new as u16);
    !fold(acc)
}

/// [`update_u16`] for an aligned field of any even length (an IPv6
/// address); `old` and `new` must have the same length. An odd length is
/// treated as padded with one zero byte, which matches a field that ends
/// the covered region.
#[inline]
pub fn update_bytes(old_csum: u16, old: &[u8], new: &[u8]) -> u16 {
    let acc = u64::from(!old_csum) + u64::from(!sum(old)) + u64::from(sum(new));
    !fold(acc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// RFC 1071 reference: 16-bit words, end-around carry after each add.
    fn reference_sum(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for c in data.chunks(2) {
            let w = if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from(c[0]) << 8
            };
            s += u32::from(w);
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3 example: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        let b = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(sum(&b), 0xddf2);
        assert_eq!(checksum(&b), !0xddf2);
    }

    #[test]
    fn ipv4_header_fixture() {
        // A captured IPv4 header (UDP, 10.0.0.1 -> 10.0.0.2), checksum b861.
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert!(verifies(sum(&h)));
        let mut z = h;
        z[10] = 0;
        z[11] = 0;
        assert_eq!(checksum(&z), 0xb861);
    }

    #[test]
    fn ttl_decrement_matches_recompute() {
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        let old_word = u16::from_be_bytes([h[8], h[9]]);
        h[8] -= 1;
        let new_word = u16::from_be_bytes([h[8], h[9]]);
        let c = update_u16(0xb861, old_word, new_word);
        h[10] = 0;
        h[11] = 0;
        assert_eq!(c, checksum(&h));
    }

    /// Every checksum, every TTL from 1 and the extreme protocols (the
    /// protocol byte cancels out of the update): the constant form equals
    /// the general update.
    #[test]
    fn ttl_decrement_update_equals_the_general_one() {
        for proto in [0u8, 0xff] {
            for ttl in 1..=255u8 {
                let old = u16::from_be_bytes([ttl, proto]);
                let new = u16::from_be_bytes([ttl - 1, proto]);
                for c in 0..=u16::MAX {
                    assert_eq!(
                        update_ttl_decrement(c),
                        update_u16(c, old, new),
                        "csum {c:#06x} ttl {ttl} proto {proto}"
                    );
                }
            }
        }
    }

    #[test]
    fn pseudo_header_v6_matches_bytes() {
        let s: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let d: Ipv6Addr = "fe80::1234:5678:9abc:def0".parse().unwrap();
        let mut b = Vec::new();
        b.extend_from_slice(&s.octets());
        b.extend_from_slice(&d.octets());
        b.extend_from_slice(&70_000u32.to_be_bytes());
        b.extend_from_slice(&[0, 0, 0, 58]);
        assert_eq!(pseudo_header_v6(&s, &d, 58, 70_000), reference_sum(&b));
    }

    proptest! {
        #[test]
        fn sum_matches_reference(data in proptest::collection::vec(any::<u8>(), 0..2000)) {
            prop_assert_eq!(sum(&data), reference_sum(&data));
        }

        /// Headers of 20 bytes (the in-line path) and the option lengths.
        #[test]
        fn ipv4_header_sum_matches_reference(
            data in proptest::collection::vec(any::<u8>(), 20..=60),
            twenty in any::<bool>(),
        ) {
            let h = if twenty { &data[..20] } else { &data[..] };
            prop_assert_eq!(sum_ipv4_header(h), reference_sum(h));
        }

        #[test]
        fn pseudo_header_v4_matches_bytes(s in any::<u32>(), d in any::<u32>(), p in any::<u8>(), l in any::<u16>()) {
            let mut b = Vec::new();
            b.extend_from_slice(&s.to_be_bytes());
            b.extend_from_slice(&d.to_be_bytes());
            b.extend_from_slice(&[0, p]);
            b.extend_from_slice(&l.to_be_bytes());
            prop_assert_eq!(pseudo_header_v4(s.into(), d.into(), p, l), reference_sum(&b));
        }

        /// Incremental updates equal a full recompute, whatever word or
        /// field changes (RFC 1624 fixes the -0/+0 ambiguity of RFC 1141).
        #[test]
        fn incremental_equals_recompute(
            mut data in proptest::collection::vec(any::<u8>(), 12..200),
            at in any::<prop::sample::Index>(),
            new16 in any::<u16>(),
            new32 in any::<u32>(),
        ) {
            // Checksum field lives at bytes 0..2 of `data`.
            data[0] = 0; data[1] = 0;
            let c = checksum(&data);
            data[0..2].copy_from_slice(&c.to_be_bytes());
            let words = (data.len() - 2) / 2;
            let w = 2 + 2 * at.index(words - 1);
            let old = u16::from_be_bytes([data[w], data[w + 1]]);
            data[w..w + 2].copy_from_slice(&new16.to_be_bytes());
            let inc = update_u16(c, old, new16);
            let mut z = data.clone(); z[0] = 0; z[1] = 0;
            let full = checksum(&z);
            // Both forms are valid encodings of the same sum; RFC 1624
            // yields the recomputed one except when the data sums to zero.
            prop_assert!(inc == full || (inc == 0xffff && full == 0) || (inc == 0 && full == 0xffff));
            data[0..2].copy_from_slice(&inc.to_be_bytes());
            prop_assert!(verifies(sum(&data)));

            // 32-bit field at an even offset.
            let w = 2 + 2 * at.index(words - 2);
            let old32 = u32::from_be_bytes([data[w], data[w+1], data[w+2], data[w+3]]);
            data[w..w + 4].copy_from_slice(&new32.to_be_bytes());
            let inc32 = update_u32(inc, old32, new32);
            let inc_bytes = update_bytes(inc, &old32.to_be_bytes(), &new32.to_be_bytes());
            prop_assert_eq!(inc32, inc_bytes);
            data[0..2].copy_from_slice(&inc32.to_be_bytes());
            prop_assert!(verifies(sum(&data)));
        }
    }
}
