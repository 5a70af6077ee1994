//! Publishing a FIB to forwarding workers without locks on the read path.
//!
//! The writer keeps two copies of the [`Poptrie`] (double buffering, as in
//! the "left-right" scheme). Readers only ever see the *published* copy,
//! through an [`ArcSwap`]: taking a snapshot is a few atomic instructions on
//! the reader's own cache lines and never waits. The writer changes only the
//! *standby* copy, which no reader can reach, so a reader never sees a
//! half-applied change; [`FibWriter::publish`] swaps the two in one atomic
//! store. Before it touches the old published copy again, the writer waits
//! until the last reader that took a snapshot of it has dropped that
//! snapshot (its `Arc` becomes unique), then replays the changes it missed.
//! Only the writer ever waits; readers never do.
//!
//! Readers should take one snapshot per batch ([`FibReader::snapshot`]) and
//! drop it before the next batch, so a writer is never kept waiting for
//! long. Memory: two copies of the lookup structure and route copy, plus a
//! third copy only while a [`FibWriter::replace_all`] is in flight.
//!
//! Plugging into the pipeline: a [`FibReader<u32>`] / [`FibReader<u128>`]
//! implements [`Lookup`], so it can be handed to anything that takes a
//! `Lookup`; the control side keeps the [`FibWriter`] and calls `insert` /
//! `remove` for each change and `publish` once per batch of changes.

use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};

use crate::poptrie::{Poptrie, TrieKey};
use crate::{Lookup, NextHopId, RouteTable};

/// One published version of the table.
#[derive(Debug, Clone)]
pub struct Snapshot<A: TrieKey> {
    trie: Poptrie<A>,
    generation: u64,
}

impl<A: TrieKey> Snapshot<A> {
    /// Publication counter: 0 for the first table, +1 per publication.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The trie of this version.
    pub fn trie(&self) -> &Poptrie<A> {
        &self.trie
    }
}

impl<A: TrieKey> Lookup<A> for Snapshot<A> {
    #[inline]
    fn lookup(&self, addr: A) -> Option<NextHopId> {
        self.trie.lookup(addr)
    }
    fn lookup_len(&self, addr: A) -> Option<(NextHopId, u8)> {
        self.trie.lookup_len(addr)
    }
    #[inline]
    fn lookup_batch(&self, addrs: &[A], out: &mut [Option<NextHopId>]) {
        self.trie.lookup_batch(addrs, out)
    }
}

/// A change the writer has made to one copy and must make to the other.
#[derive(Debug, Clone)]
enum Change<A: TrieKey> {
    Insert(A::Prefix, NextHopId),
    Remove(A::Prefix),
}

impl<A: TrieKey> Change<A> {
    fn apply(&self, t: &mut Poptrie<A>) {
        match self {
            Change::Insert(p, nh) => {
                t.insert(*p, *nh);
            }
            Change::Remove(p) => {
                t.remove(p);
            }
        }
    }
}

/// Read handle: cheap to clone, one per worker.
#[derive(Debug)]
pub struct FibReader<A: TrieKey> {
    shared: Arc<ArcSwap<Snapshot<A>>>,
}

impl<A: TrieKey> Clone for FibReader<A> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<A: TrieKey> FibReader<A> {
    /// The current version; hold it for one batch, then drop it.
    #[inline]
    pub fn snapshot(&self) -> Guard<Arc<Snapshot<A>>> {
        self.shared.load()
    }
}

impl<A: TrieKey> Lookup<A> for FibReader<A> {
    #[inline]
    fn lookup(&self, addr: A) -> Option<NextHopId> {
        self.shared.load().lookup(addr)
    }
    fn lookup_len(&self, addr: A) -> Option<(NextHopId, u8)> {
        self.shared.load().lookup_len(addr)
    }
    #[inline]
    fn lookup_batch(&self, addrs: &[A], out: &mut [Option<NextHopId>]) {
        self.shared.load().lookup_batch(addrs, out)
    }
}

/// Write handle: the single writer of a shared FIB.
#[derive(Debug)]
pub struct FibWriter<A: TrieKey> {
    shared: Arc<ArcSwap<Snapshot<A>>>,
    /// The copy readers cannot reach, when it is ready for changes.
    standby: Option<Box<Snapshot<A>>>,
    /// The previously published copy, which readers may still hold.
    draining: Option<Arc<Snapshot<A>>>,
    /// Changes in the published copy that the standby copy has not had yet.
    lag: Vec<Change<A>>,
    /// Changes made to the standby copy since the last publication.
    unpublished: Vec<Change<A>>,
    generation: u64,
}

impl<A: TrieKey> FibWriter<A> {
    /// An empty shared FIB, and a reader for it.
    pub fn new() -> (Self, FibReader<A>) {
        Self::from_trie(Poptrie::new())
    }

    /// A shared FIB holding `routes` (built in bulk), and a reader for it.
    pub fn from_routes<I: IntoIterator<Item = (A::Prefix, NextHopId)>>(
        routes: I,
    ) -> (Self, FibReader<A>) {
        Self::from_trie(Poptrie::from_routes(routes))
    }

    /// A shared FIB starting from an existing trie (for example one a
    /// config loader filled through [`RouteTable`]), and a reader for it.
    pub fn from_trie(trie: Poptrie<A>) -> (Self, FibReader<A>) {
        let standby = Box::new(Snapshot {
            trie: trie.clone(),
            generation: 0,
        });
        let shared = Arc::new(ArcSwap::from_pointee(Snapshot {
            trie,
            generation: 0,
        }));
        let reader = FibReader {
            shared: Arc::clone(&shared),
        };
        let writer = Self {
            shared,
            standby: Some(standby),
            draining: None,
            lag: Vec::new(),
            unpublished: Vec::new(),
            generation: 0,
        };
        (writer, reader)
    }

    /// Another read handle.
    pub fn reader(&self) -> FibReader<A> {
        FibReader {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The standby copy, once no reader holds it, with the changes it missed
    /// applied.
    fn ready(&mut self) -> &mut Poptrie<A> {
        if let Some(mut arc) = self.draining.take() {
            let mut snap = loop {
                match Arc::try_unwrap(arc) {
                    Ok(s) => break s,
                    Err(back) => {
                        arc = back;
                        std::thread::yield_now();
                    }
                }
            };
            for c in self.lag.drain(..) {
                c.apply(&mut snap.trie);
            }
            self.standby = Some(Box::new(snap));
        }
        let generation = self.generation;
        // Always `Some` here: `draining` was just turned back into `standby`.
        &mut self
            .standby
            .get_or_insert_with(|| {
                Box::new(Snapshot {
                    trie: Poptrie::new(),
                    generation,
                })
            })
            .trie
    }

    /// Inserts or replaces a route in the standby copy; readers see it after
    /// the next [`publish`](Self::publish). Returns the replaced next hop.
    pub fn insert(&mut self, prefix: A::Prefix, next_hop: NextHopId) -> Option<NextHopId> {
        let old = self.ready().insert(prefix, next_hop);
        self.unpublished.push(Change::Insert(prefix, next_hop));
        old
    }

    /// Removes a route from the standby copy (idempotent); readers see it
    /// after the next [`publish`](Self::publish).
    pub fn remove(&mut self, prefix: &A::Prefix) -> Option<NextHopId> {
        let old = self.ready().remove(prefix);
        if old.is_some() {
            self.unpublished.push(Change::Remove(*prefix));
        }
        old
    }

    /// The next hop of exactly this prefix in the writer's (newest) copy.
    pub fn get(&mut self, prefix: &A::Prefix) -> Option<NextHopId> {
        self.ready().get(prefix)
    }

    /// Number of routes in the writer's (newest) copy.
    pub fn len(&mut self) -> usize {
        self.ready().len()
    }

    /// True when the writer's copy has no route.
    pub fn is_empty(&mut self) -> bool {
        self.len() == 0
    }

    /// Changes made since the last publication.
    pub fn unpublished(&self) -> usize {
        self.unpublished.len()
    }

    /// The generation readers see now.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Makes every change so far visible to readers, atomically; returns the
    /// new generation.
    pub fn publish(&mut self) -> u64 {
        self.ready();
        if let Some(mut snap) = self.standby.take() {
            self.generation += 1;
            snap.generation = self.generation;
            let old = self.shared.swap(Arc::from(snap));
            self.draining = Some(old);
            self.lag = core::mem::take(&mut self.unpublished);
        }
        self.generation
    }

    /// Replaces the whole table (bulk build) and publishes it; unpublished
    /// changes are discarded. Returns the new generation.
    pub fn replace_all<I: IntoIterator<Item = (A::Prefix, NextHopId)>>(
        &mut self,
        routes: I,
    ) -> u64 {
        let trie = Poptrie::from_routes(routes);
        self.generation += 1;
        let standby = Box::new(Snapshot {
            trie: trie.clone(),
            generation: self.generation,
        });
        // The old published copy is freed by whichever reader drops it last.
        drop(self.shared.swap(Arc::new(Snapshot {
            trie,
            generation: self.generation,
        })));
        self.standby = Some(standby);
        self.draining = None;
        self.lag.clear();
        self.unpublished.clear();
        self.generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::Ipv4Cidr;

    fn p4(s: &str) -> Ipv4Cidr {
        s.parse().unwrap()
    }

    #[test]
    fn readers_see_changes_only_after_publish() {
        let (mut w, r) = FibWriter::<u32>::new();
        w.insert(p4("10.0.0.0/8"), 1);
        assert_eq!(r.lookup(0x0a00_0001), None);
        assert_eq!(w.publish(), 1);
        assert_eq!(r.lookup(0x0a00_0001), Some(1));
        // The second copy catches up before its next change.
        w.insert(p4("10.1.0.0/16"), 2);
        assert_eq!(w.get(&p4("10.0.0.0/8")), Some(1));
        w.publish();
        assert_eq!(r.lookup(0x0a01_0001), Some(2));
        assert_eq!(r.lookup(0x0a02_0001), Some(1));
        w.remove(&p4("10.0.0.0/8"));
        w.publish();
        assert_eq!(r.lookup(0x0a02_0001), None);
        assert_eq!(r.lookup(0x0a01_0001), Some(2));
        assert_eq!(w.len(), 1);
        let snap = r.snapshot();
        assert_eq!(snap.generation(), 3);
        drop(snap);
        w.replace_all([(p4("0.0.0.0/0"), 7)]);
        assert_eq!(r.lookup(0x0a01_0001), Some(7));
        w.insert(p4("10.0.0.0/8"), 8);
        w.publish();
        w.insert(p4("11.0.0.0/8"), 9);
        w.publish();
        assert_eq!(r.lookup(0x0a01_0001), Some(8));
        assert_eq!(r.lookup(0x0b01_0001), Some(9));
        assert_eq!(w.len(), 3);
    }
}
