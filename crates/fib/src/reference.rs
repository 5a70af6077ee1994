//! The reference FIB: one hash map per prefix length, searched from the
//! longest length down. Slow (up to 33 or 129 probes) and obviously correct;
//! every faster structure is property-tested against it.

use std::collections::HashMap;

// A seeded fast hash: the property tests and fuzz targets spend most of
// their time in this table's probes.
use foldhash::fast::RandomState;

use crate::{Address, Lookup, NextHopId, RouteTable};

/// Reference longest-prefix-match table for one address family.
#[derive(Debug, Clone)]
pub struct ReferenceFib<A: Address> {
    /// `by_len[l]` maps a network address of length `l` to its next hop.
    by_len: Vec<HashMap<A, NextHopId, RandomState>>,
    /// Lengths that hold at least one route, longest first.
    used_lens: Vec<u8>,
    count: usize,
}

/// Reference IPv4 table.
pub type ReferenceFib4 = ReferenceFib<u32>;
/// Reference IPv6 table.
pub type ReferenceFib6 = ReferenceFib<u128>;

impl<A: Address> Default for ReferenceFib<A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A: Address> ReferenceFib<A> {
    /// An empty table.
    pub fn new() -> Self {
        Self {
            by_len: (0..=A::BITS).map(|_| HashMap::default()).collect(),
            used_lens: Vec::new(),
            count: 0,
        }
    }

    /// The longest matching prefix and its next hop.
    pub fn lookup_prefix(&self, addr: A) -> Option<(A::Prefix, NextHopId)> {
        self.used_lens.iter().find_map(|&len| {
            let net = addr.masked(len);
            self.by_len[len as usize]
                .get(&net)
                .map(|&nh| (A::prefix(net, len), nh))
        })
    }

    /// Every route, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (A::Prefix, NextHopId)> + '_ {
        self.by_len
            .iter()
            .enumerate()
            .flat_map(|(len, m)| m.iter().map(move |(&a, &nh)| (A::prefix(a, len as u8), nh)))
    }

    fn refresh_lens(&mut self) {
        self.used_lens = (0..=A::BITS)
            .rev()
            .filter(|&l| !self.by_len[l as usize].is_empty())
            .collect();
    }
}

impl<A: Address> Lookup<A> for ReferenceFib<A> {
    fn lookup(&self, addr: A) -> Option<NextHopId> {
        self.lookup_prefix(addr).map(|(_, nh)| nh)
    }
    fn lookup_len(&self, addr: A) -> Option<(NextHopId, u8)> {
        self.lookup_prefix(addr).map(|(p, nh)| (nh, A::split(&p).1))
    }
}

impl<A: Address> RouteTable<A> for ReferenceFib<A> {
    fn insert(&mut self, prefix: A::Prefix, next_hop: NextHopId) -> Option<NextHopId> {
        let (net, len) = A::split(&prefix);
        let old = self.by_len[len as usize].insert(net, next_hop);
        if old.is_none() {
            self.count += 1;
            if self.by_len[len as usize].len() == 1 {
                self.refresh_lens();
            }
        }
        old
    }

    fn remove(&mut self, prefix: &A::Prefix) -> Option<NextHopId> {
        let (net, len) = A::split(prefix);
        let old = self.by_len[len as usize].remove(&net);
        if old.is_some() {
            self.count -= 1;
            if self.by_len[len as usize].is_empty() {
                self.refresh_lens();
            }
        }
        old
    }

    fn get(&self, prefix: &A::Prefix) -> Option<NextHopId> {
        let (net, len) = A::split(prefix);
        self.by_len[len as usize].get(&net).copied()
    }

    fn len(&self) -> usize {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::{Ipv4Cidr, Ipv6Cidr};

    fn p4(s: &str) -> Ipv4Cidr {
        s.parse().unwrap()
    }

    #[test]
    fn longest_prefix_wins_and_deletes_fall_back() {
        let mut f = ReferenceFib4::new();
        assert_eq!(f.lookup(0x0a00_0001), None);
        f.insert(p4("0.0.0.0/0"), 1);
        f.insert(p4("10.0.0.0/8"), 2);
        f.insert(p4("10.1.0.0/16"), 3);
        f.insert(p4("10.1.2.3/32"), 4);
        assert_eq!(f.lookup(0x0a01_0203), Some(4));
        assert_eq!(f.lookup(0x0a01_0204), Some(3));
        assert_eq!(f.lookup(0x0a02_0000), Some(2));
        assert_eq!(f.lookup(0x0b00_0000), Some(1));
        assert_eq!(f.remove(&p4("10.1.0.0/16")), Some(3));
        assert_eq!(f.remove(&p4("10.1.0.0/16")), None);
        assert_eq!(f.lookup(0x0a01_0204), Some(2));
        assert_eq!(f.insert(p4("10.0.0.0/8"), 9), Some(2));
        assert_eq!(f.lookup(0x0a01_0204), Some(9));
        assert_eq!(f.len(), 3);
        let (pfx, nh) = f.lookup_prefix(0x0a01_0203).unwrap();
        assert_eq!((pfx.to_string(), nh), ("10.1.2.3/32".to_string(), 4));
    }

    #[test]
    fn ipv6_host_and_default() {
        let mut f = ReferenceFib6::new();
        let d: Ipv6Cidr = "::/0".parse().unwrap();
        let h: Ipv6Cidr = "2001:2::1/128".parse().unwrap();
        f.insert(d, 7);
        f.insert(h, 8);
        assert_eq!(f.lookup(h.addr()), Some(8));
        assert_eq!(f.lookup(h.addr() + 1), Some(7));
        let mut out = [None; 2];
        f.lookup_batch(&[h.addr(), 0], &mut out);
        assert_eq!(out, [Some(8), Some(7)]);
    }
}
