//! A probe of the machine's own speed, taken on the forwarding core before
//! each fixed-load repeat. On a shared VM the host's other tenants change
//! how fast a core runs and how much of the caches it keeps from one minute
//! to the next; when the probe moves as much as a contender's repeats do,
//! the spread is the machine's, not the contender's. The report shows both.

use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::time::Instant;

/// One reading.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct SpeedProbe {
    /// Nanoseconds per step of a chain of dependent multiply-adds: the
    /// core's clock and its share of the physical core.
    pub alu_ns: f64,
    /// Nanoseconds per load of a random pointer chase through 4 MiB: what
    /// the caches and memory give this core now.
    pub mem_ns: f64,
}

/// Steps of the multiply-add chain per reading (a few milliseconds).
const ALU_STEPS: u32 = 2_000_000;
/// Loads of the pointer chase per reading.
const MEM_STEPS: usize = 20_000;
/// Elements of the chase: 4 MiB of `u32`.
const MEM_ELEMENTS: usize = 1 << 20;

/// Holds the chase's array so that readings cost no allocation.
pub struct Prober {
    next: Vec<u32>,
}

impl Default for Prober {
    fn default() -> Self {
        Self::new()
    }
}

impl Prober {
    /// Builds one random cycle through all elements (Sattolo's shuffle), so
    /// the chase visits the whole array in an order no prefetcher follows.
    pub fn new() -> Self {
        let n = MEM_ELEMENTS;
        let mut order: Vec<u32> = (0..n as u32).collect();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for i in (1..n).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % i as u64) as usize);
        }
        let mut next = vec![0u32; n];
        for i in 0..n {
            next[order[i] as usize] = order[(i + 1) % n];
        }
        Prober { next }
    }

    /// Takes a reading on the calling thread.
    pub fn measure(&self) -> SpeedProbe {
        let t = Instant::now();
        let mut v: u64 = black_box(1);
        for _ in 0..ALU_STEPS {
            v = v
                .wrapping_mul(0x5851_F42D_4C95_7F2D)
                .wrapping_add(0x1405_7B7E_F767_814F);
        }
        black_box(v);
        let alu_ns = t.elapsed().as_nanos() as f64 / f64::from(ALU_STEPS);
        let mut j = black_box(0usize);
        let t = Instant::now();
        for _ in 0..MEM_STEPS {
            j = self.next[j] as usize;
        }
        black_box(j);
        let mem_ns = t.elapsed().as_nanos() as f64 / MEM_STEPS as f64;
        SpeedProbe { alu_ns, mem_ns }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chase_is_one_cycle_through_every_element() {
        let p = Prober::new();
        let mut seen = vec![false; MEM_ELEMENTS];
        let mut j = 0usize;
        for _ in 0..MEM_ELEMENTS {
            assert!(!seen[j], "element {j} visited twice");
            seen[j] = true;
            j = p.next[j] as usize;
        }
        assert_eq!(j, 0);
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn a_reading_is_positive_and_finite() {
        let r = Prober::new().measure();
        assert!(r.alu_ns.is_finite() && r.alu_ns > 0.0);
        assert!(r.mem_ns.is_finite() && r.mem_ns > 0.0);
    }
}
