//! Forwarding information base: longest-prefix match from a destination
//! address to a next-hop id.
//!
//! The pipeline sees a FIB only through [`Lookup`]; the structures behind it
//! can change without touching the pipeline. [`reference`](mod@reference) holds the simple,
//! obviously correct tables every faster structure is tested against.
//!
//! A next-hop id is an index into the pipeline's adjacency table (the set of
//! equal-cost next hops for a route); the FIB itself knows nothing of
//! interfaces or MAC addresses.

#![forbid(unsafe_code)]

pub mod poptrie;
pub mod reference;
pub mod shared;
pub mod table;

pub use wire::{Ipv4Cidr, Ipv6Cidr};

/// Index of a next-hop set in the adjacency table.
pub type NextHopId = u32;

/// Address types a FIB can be keyed on: `u32` for IPv4, `u128` for IPv6
/// (host byte order).
pub trait Address: Copy + Eq + core::hash::Hash + Send + Sync + 'static {
    /// The prefix type of this family.
    type Prefix: Copy + Eq + core::hash::Hash + Ord + core::fmt::Debug + core::fmt::Display;
    /// Width in bits.
    const BITS: u8;
    /// Splits a prefix into (network address, length).
    fn split(prefix: &Self::Prefix) -> (Self, u8);
    /// Builds a prefix, clearing host bits.
    fn prefix(addr: Self, len: u8) -> Self::Prefix;
    /// The address with all bits past `len` cleared.
    fn masked(self, len: u8) -> Self;
}

impl Address for u32 {
    type Prefix = Ipv4Cidr;
    const BITS: u8 = 32;
    fn split(p: &Ipv4Cidr) -> (u32, u8) {
        (p.addr(), p.prefix_len())
    }
    fn prefix(addr: u32, len: u8) -> Ipv4Cidr {
        Ipv4Cidr::new(addr, len.min(32)).expect("length clamped")
    }
    #[inline]
    fn masked(self, len: u8) -> u32 {
        self & Ipv4Cidr::mask(len)
    }
}

impl Address for u128 {
    type Prefix = Ipv6Cidr;
    const BITS: u8 = 128;
    fn split(p: &Ipv6Cidr) -> (u128, u8) {
        (p.addr(), p.prefix_len())
    }
    fn prefix(addr: u128, len: u8) -> Ipv6Cidr {
        Ipv6Cidr::new(addr, len.min(128)).expect("length clamped")
    }
    #[inline]
    fn masked(self, len: u8) -> u128 {
        self & Ipv6Cidr::mask(len)
    }
}

/// The read side of a FIB, used by the pipeline on every packet.
///
/// Implementations must not allocate, lock or block.
pub trait Lookup<A: Address>: Send + Sync {
    /// The next-hop id of the longest prefix containing `addr`.
    fn lookup(&self, addr: A) -> Option<NextHopId>;

    /// The next-hop id and the prefix length of the longest prefix
    /// containing `addr`: for policy rules that ignore short matches
    /// (`suppress_prefixlength`), off the common path.
    fn lookup_len(&self, addr: A) -> Option<(NextHopId, u8)>;

    /// Looks up a whole batch; `out[i]` answers `addrs[i]`. Implementations
    /// override this to overlap the memory accesses of the batch.
    /// Only `min(addrs.len(), out.len())` entries are answered.
    fn lookup_batch(&self, addrs: &[A], out: &mut [Option<NextHopId>]) {
        for (a, o) in addrs.iter().zip(out.iter_mut()) {
            *o = self.lookup(*a);
        }
    }
}

/// The write side of a FIB: single-route changes.
pub trait RouteTable<A: Address>: Lookup<A> {
    /// Inserts or replaces a route; returns the next hop it replaced.
    fn insert(&mut self, prefix: A::Prefix, next_hop: NextHopId) -> Option<NextHopId>;
    /// Removes a route; returns its next hop, `None` if it was absent
    /// (deletes are idempotent).
    fn remove(&mut self, prefix: &A::Prefix) -> Option<NextHopId>;
    /// The next hop of exactly this prefix, if present.
    fn get(&self, prefix: &A::Prefix) -> Option<NextHopId>;
    /// Number of routes.
    fn len(&self) -> usize;
    /// True when the table holds no route.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
