//! The control-side copy of the routes longer than the direct bits, kept
//! for recompiling parts of the trie.
//!
//! Routes sit in buckets of [`TrieKey::BUCKET_BITS`]: a short sorted vector
//! per bucket, found through a hash map. An update touches one bucket (one
//! hash probe and a few cache lines) where one ordered map over the whole
//! table (900,000 IPv4 routes) took several cache-missing descents per
//! change, and recompiling a chunk reads its routes from one contiguous
//! slice. Buckets are ordered through a separate set, used only for the
//! rare ranges wider than a bucket.

use std::collections::{BTreeSet, HashMap};

// Keys are addresses; a seeded fast hash (std's SipHash was a tenth of an
// update's time).
use foldhash::fast::RandomState;

use super::TrieKey;
use crate::NextHopId;

/// A route: network address, length, next hop.
pub(super) type DeepRoute<A> = (A, u8, NextHopId);

/// Routes longer than the direct bits, by bucket; see the module docs.
#[derive(Debug, Clone)]
pub(super) struct DeepRoutes<A: TrieKey> {
    /// Non-empty buckets by first address, each sorted by (address, length).
    buckets: HashMap<A, Vec<DeepRoute<A>>, RandomState>,
    /// The keys of `buckets`, in address order.
    order: BTreeSet<A>,
    len: usize,
    /// Number of routes per length, to skip absent lengths.
    lens: Vec<u32>,
}

impl<A: TrieKey> Default for DeepRoutes<A> {
    fn default() -> Self {
        Self {
            buckets: HashMap::default(),
            order: BTreeSet::new(),
            len: 0,
            lens: vec![0; A::BITS as usize + 1],
        }
    }
}

#[inline]
fn bucket_of<A: TrieKey>(addr: A) -> A {
    addr.masked(A::BUCKET_BITS)
}

/// Where `addr/len` is, or would go, in a bucket.
#[inline]
fn position<A: TrieKey>(v: &[DeepRoute<A>], addr: A, len: u8) -> Result<usize, usize> {
    v.binary_search_by(|r| (r.0, r.1).cmp(&(addr, len)))
}

/// The routes of a bucket with an address in `first..=last` and, at
/// `first`, a length of at least `min_len`.
#[inline]
fn span<A: TrieKey>(v: &[DeepRoute<A>], first: A, last: A, min_len: u8) -> &[DeepRoute<A>] {
    let lo = v.partition_point(|r| (r.0, r.1) < (first, min_len));
    let hi = v.partition_point(|r| r.0 <= last).max(lo);
    &v[lo..hi]
}

impl<A: TrieKey> DeepRoutes<A> {
    /// From routes sorted by (address, length), without duplicates.
    pub(super) fn from_sorted(routes: Vec<DeepRoute<A>>) -> Self {
        let mut s = Self {
            len: routes.len(),
            ..Self::default()
        };
        for r in &routes {
            s.lens[r.1 as usize] += 1;
        }
        let mut i = 0;
        while i < routes.len() {
            let b = bucket_of(routes[i].0);
            let mut j = i + 1;
            while j < routes.len() && bucket_of(routes[j].0) == b {
                j += 1;
            }
            s.buckets.insert(b, routes[i..j].to_vec());
            s.order.insert(b);
            i = j;
        }
        s
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Number of buckets (for the memory estimate).
    pub(super) fn buckets(&self) -> usize {
        self.buckets.len()
    }

    pub(super) fn get(&self, addr: A, len: u8) -> Option<NextHopId> {
        let v = self.buckets.get(&bucket_of(addr))?;
        position(v, addr, len).ok().map(|i| v[i].2)
    }

    /// The longest route of length `min_len..=max_len` covering `addr`:
    /// its length and next hop. The lengths from the bucket's up share one
    /// bucket, fetched once.
    pub(super) fn covering(&self, addr: A, min_len: u8, max_len: u8) -> Option<(u8, NextHopId)> {
        let mut bucket: Option<Option<&Vec<DeepRoute<A>>>> = None;
        for l in (min_len.max(A::DIRECT_BITS + 1)..=max_len.min(A::BITS)).rev() {
            if self.lens[l as usize] == 0 {
                continue;
            }
            let net = addr.masked(l);
            let found = if l >= A::BUCKET_BITS {
                let v = *bucket.get_or_insert_with(|| self.buckets.get(&bucket_of(addr)));
                v.and_then(|v| position(v, net, l).ok().map(|i| v[i].2))
            } else {
                self.get(net, l)
            };
            if let Some(nh) = found {
                return Some((l, nh));
            }
        }
        None
    }

    /// Inserts or replaces `addr/len`; returns the next hop replaced.
    pub(super) fn insert(&mut self, addr: A, len: u8, nh: NextHopId) -> Option<NextHopId> {
        let b = bucket_of(addr);
        let v = self.buckets.entry(b).or_insert_with(|| {
            self.order.insert(b);
            Vec::new()
        });
        match position(v, addr, len) {
            Ok(i) => Some(core::mem::replace(&mut v[i].2, nh)),
            Err(i) => {
                v.insert(i, (addr, len, nh));
                self.len += 1;
                self.lens[len as usize] += 1;
                None
            }
        }
    }

    /// Removes `addr/len`; returns its next hop.
    pub(super) fn remove(&mut self, addr: A, len: u8) -> Option<NextHopId> {
        let b = bucket_of(addr);
        let v = self.buckets.get_mut(&b)?;
        let i = position(v, addr, len).ok()?;
        let (_, _, nh) = v.remove(i);
        self.len -= 1;
        self.lens[len as usize] -= 1;
        if v.is_empty() {
            // Empty buckets go, so memory follows the table, not its history.
            self.buckets.remove(&b);
            self.order.remove(&b);
        }
        Some(nh)
    }

    /// Calls `f` with the routes longer than `len` under `first/len`
    /// (`first` masked to `len`), in (address, length) order, as slices.
    fn for_each_under(&self, first: A, len: u8, mut f: impl FnMut(&[DeepRoute<A>]) -> bool) {
        let last = A::last_of(first, len);
        let longer = len.saturating_add(1);
        if len >= A::BUCKET_BITS {
            if let Some(v) = self.buckets.get(&bucket_of(first)) {
                f(span(v, first, last, longer));
            }
            return;
        }
        for b in self.order.range(first..=last) {
            if let Some(v) = self.buckets.get(b)
                && !f(span(v, first, last, longer))
            {
                return;
            }
        }
    }

    /// The routes of length `len` or more under `first/len` (`first`
    /// masked), in (address, length) order, when they all sit in one
    /// bucket (`len` at least [`TrieKey::BUCKET_BITS`]); `None` otherwise.
    pub(super) fn within(&self, first: A, len: u8) -> Option<&[DeepRoute<A>]> {
        if len < A::BUCKET_BITS {
            return None;
        }
        let Some(v) = self.buckets.get(&bucket_of(first)) else {
            return Some(&[]);
        };
        Some(span(v, first, A::last_of(first, len), len))
    }

    /// Appends to `out` the routes longer than `len` under `first/len`, in
    /// (address, length) order.
    pub(super) fn collect_under(&self, first: A, len: u8, out: &mut Vec<DeepRoute<A>>) {
        self.for_each_under(first, len, |s| {
            out.extend_from_slice(s);
            true
        });
    }

    /// Whether any route longer than `len` lies under `first/len`.
    pub(super) fn any_under(&self, first: A, len: u8) -> bool {
        let mut found = false;
        self.for_each_under(first, len, |s| {
            found = !s.is_empty();
            !found
        });
        found
    }

    /// Every route, bucket by bucket in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &DeepRoute<A>> + '_ {
        self.buckets.values().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_within_and_across_buckets_match_a_filter() {
        // IPv6 buckets are /40: ranges at /16 span buckets, at /44 one.
        let routes: Vec<DeepRoute<u128>> = [
            (0x2001_0db8_0000u128 << 80, 32u8, 1u32),
            (0x2001_0db8_0000u128 << 80, 48, 2),
            (0x2001_0db8_0001u128 << 80, 48, 3),
            (0x2001_0db9_0000u128 << 80, 48, 4),
            (0x2001_0db8_0010u128 << 80, 44, 5),
            (0x2002_0000_0000u128 << 80, 24, 6),
        ]
        .into_iter()
        .collect();
        let mut sorted = routes.clone();
        sorted.sort_by_key(|r| (r.0, r.1));
        let d = DeepRoutes::from_sorted(sorted.clone());
        assert_eq!(d.len(), 6);
        for (first, len) in [
            (0x2001u128 << 112, 16u8),
            (0x2001_0db8u128 << 96, 32),
            (0x2001_0db8_0000u128 << 80, 44),
            (0x2001_0db8_0010u128 << 80, 44),
            (0x2002u128 << 112, 16),
            (0x2003u128 << 112, 16),
        ] {
            let last = u128::last_of(first, len);
            let want: Vec<_> = sorted
                .iter()
                .copied()
                .filter(|r| r.1 > len && r.0 >= first && r.0 <= last)
                .collect();
            let mut got = Vec::new();
            d.collect_under(first, len, &mut got);
            assert_eq!(got, want, "{first:x}/{len}");
            assert_eq!(d.any_under(first, len), !want.is_empty());
        }
    }

    #[test]
    fn insert_replace_remove_and_empty_buckets_go() {
        let mut d = DeepRoutes::<u32>::default();
        assert_eq!(d.insert(0x0a01_0200, 24, 1), None);
        assert_eq!(d.insert(0x0a01_0200, 24, 2), Some(1));
        assert_eq!(d.insert(0x0a01_0200, 25, 3), None);
        assert_eq!(d.get(0x0a01_0200, 24), Some(2));
        assert_eq!(d.len(), 2);
        assert_eq!(d.remove(0x0a01_0200, 24), Some(2));
        assert_eq!(d.remove(0x0a01_0200, 24), None);
        assert_eq!(d.remove(0x0a01_0200, 25), Some(3));
        assert_eq!((d.len(), d.buckets(), d.order.len()), (0, 0, 0));
    }
}
