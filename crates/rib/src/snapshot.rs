//! The published tables: the control thread swaps in a new snapshot as a
//! whole, workers load the current one once per round without locking
//! (RCU-style: an old snapshot lives until its last reader drops it).

use crate::router::RouterTables;
use arc_swap::ArcSwap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The current tables and a generation number bumped on every swap.
#[derive(Debug)]
pub struct Snapshot {
    tables: ArcSwap<RouterTables>,
    generation: AtomicU64,
}

impl Snapshot {
    /// Starts with `tables` as generation 1.
    pub fn new(tables: RouterTables) -> Snapshot {
        Snapshot {
            tables: ArcSwap::from_pointee(tables),
            generation: AtomicU64::new(1),
        }
    }

    /// Publishes new tables; readers see them from their next load.
    pub fn publish(&self, tables: RouterTables) {
        self.tables.store(Arc::new(tables));
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The current tables (a cheap, lock-free guard).
    pub fn load(&self) -> arc_swap::Guard<Arc<RouterTables>> {
        self.tables.load()
    }

    /// Bumped by every [`publish`](Self::publish).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fib::shared::FibWriter;

    #[test]
    fn readers_keep_their_snapshot_until_they_reload() {
        let (_w4, r4) = FibWriter::<u32>::new();
        let (_w6, r6) = FibWriter::<u128>::new();
        let empty = || pipeline::TablesBuilder::new().build_with_acl(r4.clone(), r6.clone(), None);
        let s = Snapshot::new(empty());
        let g = s.load();
        let generation = s.generation();
        let mut b = pipeline::TablesBuilder::new();
        b.add_interface(pipeline::Interface {
            name: "d0".into(),
            port: 0,
            vlan: pipeline::Vlan::Untagged,
            mac: wire::MacAddr([2, 0, 0, 0, 0, 1]),
            ipv4: vec![],
            ipv6: vec![],
            mtu: 1500,
        })
        .unwrap();
        s.publish(b.build_with_acl(r4.clone(), r6.clone(), None));
        assert_eq!(
            g.interfaces().len(),
            0,
            "old reader still sees its snapshot"
        );
        assert_eq!(s.load().interfaces().len(), 1);
        assert_eq!(s.generation(), generation + 1);
    }
}
