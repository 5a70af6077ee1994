//! Per-stage run-time statistics, as VPP's `show runtime` keeps them: for
//! each stage of [`crate::Worker::process`], how often it ran over a chunk
//! with packets in it (calls), how many packets it handled, and the time it
//! took. Calls and packets are counted on every chunk. Time comes from one
//! clock read at each stage boundary of one chunk in [`TIMED_EVERY`] (six
//! reads per timed chunk of up to [`crate::CHUNK`] frames), never per
//! packet, and only when the worker was given a clock
//! ([`crate::Worker::set_stage_clock`]); the time per packet is the timed
//! chunks' time over their packets. Without a clock the cost is a branch
//! per stage per chunk.

/// One chunk in this many is timed: a clock read through the vDSO costs
/// about as much as forwarding a packet, and six per chunk (of 32 frames,
/// when this was measured) cost 7% in the pipeline bench; one chunk in eight keeps it near 1%.
pub const TIMED_EVERY: u64 = 8;

/// A monotonic nanosecond clock the worker reads at stage boundaries.
pub type StageClock = fn() -> u64;

/// The pipeline's stages, in the order they run over a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// L2 dispatch, L3 validation, local delivery, TTL / hop-limit expiry.
    Input,
    /// The batched FIB lookups, one call per family.
    Lookup,
    /// Next-hop choice (adjacency, ECMP), flow keys.
    NextHop,
    /// The ACL (firewall forward chain) over the packets still in flight.
    Acl,
    /// Neighbour, MTU, TTL / hop-limit update, rewrite, enqueue.
    Forward,
}

impl Stage {
    /// Number of stages.
    pub const COUNT: usize = 5;
    /// Every stage, in pipeline order.
    pub const ALL: [Stage; Stage::COUNT] = [
        Stage::Input,
        Stage::Lookup,
        Stage::NextHop,
        Stage::Acl,
        Stage::Forward,
    ];

    /// Stable name (`show runtime`, metrics).
    pub const fn name(self) -> &'static str {
        match self {
            Stage::Input => "input",
            Stage::Lookup => "lookup",
            Stage::NextHop => "next_hop",
            Stage::Acl => "acl",
            Stage::Forward => "forward",
        }
    }

    /// Index into [`RuntimeStats::stages`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// One stage's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageCounters {
    /// Chunks the stage ran over with at least one packet.
    pub calls: u64,
    /// Packets it handled.
    pub packets: u64,
    /// Packets in the timed chunks.
    pub timed_packets: u64,
    /// Nanoseconds the timed chunks took.
    pub ns: u64,
}

impl StageCounters {
    /// Nanoseconds per packet, from the timed chunks (0 without any).
    pub fn ns_per_packet(&self) -> f64 {
        if self.timed_packets == 0 {
            0.0
        } else {
            self.ns as f64 / self.timed_packets as f64
        }
    }
}

/// A worker's per-stage totals since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// By [`Stage::index`].
    pub stages: [StageCounters; Stage::COUNT],
}

impl RuntimeStats {
    /// Counts one call of `stage` over `packets` packets, timed at `ns`
    /// when the chunk was timed.
    #[inline]
    pub(crate) fn record(&mut self, stage: Stage, packets: usize, ns: Option<u64>) {
        if packets > 0 {
            let s = &mut self.stages[stage.index()];
            s.calls += 1;
            s.packets += packets as u64;
            if let Some(ns) = ns {
                s.timed_packets += packets as u64;
                s.ns += ns;
            }
        }
    }

    /// Adds another worker's totals into these.
    pub fn add(&mut self, o: &RuntimeStats) {
        for (a, b) in self.stages.iter_mut().zip(&o.stages) {
            a.calls += b.calls;
            a.packets += b.packets;
            a.timed_packets += b.timed_packets;
            a.ns += b.ns;
        }
    }

    /// These totals less an earlier reading of the same worker (`clear
    /// runtime` keeps one); saturates if the worker restarted.
    pub fn since(&self, base: &RuntimeStats) -> RuntimeStats {
        let mut out = *self;
        for (a, b) in out.stages.iter_mut().zip(&base.stages) {
            a.calls = a.calls.saturating_sub(b.calls);
            a.packets = a.packets.saturating_sub(b.packets);
            a.timed_packets = a.timed_packets.saturating_sub(b.timed_packets);
            a.ns = a.ns.saturating_sub(b.ns);
        }
        out
    }
}

/// The stage timer of one chunk: reads the clock at each boundary when the
/// chunk is timed, and counts calls and packets either way.
pub(crate) struct ChunkTimer {
    clock: Option<StageClock>,
    last: u64,
}

impl ChunkTimer {
    /// Starts chunk number `chunk` of the worker.
    #[inline]
    pub(crate) fn start(clock: Option<StageClock>, chunk: u64) -> Self {
        let clock = clock.filter(|_| chunk.is_multiple_of(TIMED_EVERY));
        let last = clock.map_or(0, |c| c());
        Self { clock, last }
    }

    /// Ends `stage`, which handled `packets` packets.
    #[inline]
    pub(crate) fn lap(&mut self, stats: &mut RuntimeStats, stage: Stage, packets: usize) {
        let ns = self.clock.map(|c| {
            let now = c();
            let ns = now.saturating_sub(self.last);
            self.last = now;
            ns
        });
        stats.record(stage, packets, ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_stages_are_not_calls_and_clears_subtract() {
        let mut s = RuntimeStats::default();
        s.record(Stage::Lookup, 0, Some(50));
        assert_eq!(s.stages[Stage::Lookup.index()], StageCounters::default());
        s.record(Stage::Input, 64, Some(1000));
        s.record(Stage::Input, 10, None);
        assert_eq!(
            s.stages[0],
            StageCounters {
                calls: 2,
                packets: 74,
                timed_packets: 64,
                ns: 1000
            }
        );
        assert_eq!(s.stages[0].ns_per_packet(), 1000.0 / 64.0);
        let base = s;
        s.record(Stage::Input, 6, Some(60));
        assert_eq!(
            s.since(&base).stages[0],
            StageCounters {
                calls: 1,
                packets: 6,
                timed_packets: 6,
                ns: 60
            }
        );
        let mut t = RuntimeStats::default();
        t.add(&s);
        t.add(&s);
        assert_eq!(t.stages[0].packets, 160);
        assert_eq!(
            Stage::ALL.map(Stage::name),
            ["input", "lookup", "next_hop", "acl", "forward"]
        );
    }
}
