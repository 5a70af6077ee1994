//! The worker: one per core, run to completion over a batch.
//!
//! [`Worker::process`] takes a batch of frames received on one port, the
//! tables snapshot and the time, and runs the stages below over the batch in
//! chunks of [`CHUNK`] frames, each stage over the whole chunk before the
//! next (so the route lookup sees every destination of the chunk at once):
//!
//! 1. input: `stages::ethernet` dispatch, then IPv4
//!    (`stages::ipv4`) or IPv6 (`stages::ipv6`)
//!    validation, martian filtering, local delivery and TTL / hop-limit
//!    expiry; ARP goes to `stages::arp`;
//! 2. route lookup: one `lookup_batch` per family over the chunk;
//! 3. next-hop choice: adjacency and ECMP, which fixes the egress
//!    interface (`stages::choose_hop`);
//! 4. the ACL stage ([`crate::Acl`], `Worker::acl_stage`) over the flow
//!    keys of the packets in flight (ingress and egress interface known);
//! 5. forward: neighbour, MTU (ICMP error or fragmentation), TTL /
//!    hop-limit decrement, L2 rewrite, enqueue (`stages::forward`).
//!
//! Results land in the worker's [`BatchOutput`]: a [`Verdict`] per frame,
//! per-port transmit lists, the punt list, neighbour misses and generated
//! packets (ICMP errors, fragments) in the worker's preallocated pool.

use std::any::Any;
use std::net::IpAddr;

use fib::{Lookup, NextHopId};

use crate::acl::{Acl, AclAction, FlowKey};
use crate::counters::{Counters, DropReason, PuntReason};
use crate::frame::Frame;
use crate::runtime::{ChunkTimer, RuntimeStats, Stage, StageClock};
use crate::stages::{self, NoHop, icmp::TokenBucket};
use crate::tables::{Discard, InterfaceId, PortId, Tables};
use crate::trace::{TraceRecord, Tracer};

/// No trace record (untraced frame).
const UNTRACED: u16 = u16::MAX;

/// Frames handled per stage pass (size of the stack arrays the stages
/// share, and of each `lookup_batch` call).
pub const CHUNK: usize = 64;

/// What happened to one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Rewritten in place; transmit `frame.data()` on `port`.
    Forward {
        /// Egress logical interface.
        interface: InterfaceId,
        /// Egress port.
        port: PortId,
    },
    /// For the host (unchanged frame).
    Punt(PuntReason),
    /// Dropped; the buffer can be recycled.
    Drop(DropReason),
    /// Replaced by generated packets (IPv4 fragments); the buffer can be
    /// recycled.
    Consumed,
}

/// [`Worker::icmp_buckets`] index of the path MTU messages' bucket.
pub(crate) const ICMP_PATH_MTU: usize = 0;
/// [`Worker::icmp_buckets`] index of every other ICMP error's bucket.
pub(crate) const ICMP_OTHER: usize = 1;

/// Sizes and policies of a worker, fixed at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerConfig {
    /// Most frames one [`Worker::process`] call handles; later frames are
    /// dropped as `batch_overflow`.
    pub max_batch: usize,
    /// Buffers for generated packets (ICMP errors, fragments) per batch.
    pub pool_slots: usize,
    /// Size of each of those buffers (egress L2 header included); fragments
    /// are cut to fit it.
    pub pool_slot_size: usize,
    /// ICMP errors per second the token bucket allows (0: never send).
    pub icmp_rate_per_sec: u32,
    /// Bucket depth: errors that may be sent back to back.
    pub icmp_burst: u32,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            max_batch: 256,
            pool_slots: 256,
            pool_slot_size: 2048,
            icmp_rate_per_sec: 1000,
            icmp_burst: 100,
        }
    }
}

/// A generated packet waiting in the worker's pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Generated {
    pub(crate) port: PortId,
    pub(crate) interface: InterfaceId,
    pub(crate) slot: u32,
    pub(crate) len: u32,
}

/// The results of the last [`Worker::process`] call. Valid until the next
/// call; the backend copies generated packets out before then.
#[derive(Debug)]
pub struct BatchOutput {
    pub(crate) verdicts: Vec<Verdict>,
    pub(crate) tx: Vec<Vec<u16>>,
    pub(crate) tx_ports: Vec<PortId>,
    pub(crate) punt: Vec<u16>,
    pub(crate) misses: Vec<(InterfaceId, IpAddr)>,
    pub(crate) generated: Vec<Generated>,
    pub(crate) pool: Vec<u8>,
    pub(crate) slot_size: usize,
    pub(crate) slots: usize,
}

impl BatchOutput {
    fn new(cfg: &WorkerConfig) -> Self {
        Self {
            verdicts: Vec::with_capacity(cfg.max_batch),
            tx: Vec::new(),
            tx_ports: Vec::new(),
            punt: Vec::with_capacity(cfg.max_batch),
            misses: Vec::with_capacity(cfg.max_batch),
            generated: Vec::with_capacity(cfg.pool_slots),
            pool: vec![0; cfg.pool_slots * cfg.pool_slot_size],
            slot_size: cfg.pool_slot_size,
            slots: cfg.pool_slots,
        }
    }

    fn reset(&mut self, ports: usize, max_batch: usize) {
        self.verdicts.clear();
        for p in &self.tx_ports {
            if let Some(q) = self.tx.get_mut(usize::from(*p)) {
                q.clear();
            }
        }
        self.tx_ports.clear();
        // Grows only when a new snapshot has more ports than any before.
        while self.tx.len() < ports {
            self.tx.push(Vec::with_capacity(max_batch));
        }
        self.punt.clear();
        self.misses.clear();
        self.generated.clear();
    }

    /// One verdict per processed frame, in input order.
    pub fn verdicts(&self) -> &[Verdict] {
        &self.verdicts
    }

    /// Per egress port, the indices (into the input batch) of the frames to
    /// transmit there, in input order.
    pub fn tx_batches(&self) -> impl Iterator<Item = (PortId, &[u16])> + '_ {
        self.tx_ports
            .iter()
            .map(|&p| (p, self.tx[usize::from(p)].as_slice()))
    }

    /// Indices of the frames for the host.
    pub fn punted(&self) -> &[u16] {
        &self.punt
    }

    /// Neighbours that were needed but unknown, one entry per missed
    /// packet (the control side asks the kernel to resolve them).
    pub fn neighbour_misses(&self) -> &[(InterfaceId, IpAddr)] {
        &self.misses
    }

    /// Generated packets (ICMP errors, IPv4 fragments) with their egress
    /// port and interface, complete with L2 header.
    pub fn generated(&self) -> impl Iterator<Item = (PortId, InterfaceId, &[u8])> + '_ {
        self.generated.iter().map(|g| {
            let at = g.slot as usize * self.slot_size;
            (g.port, g.interface, &self.pool[at..at + g.len as usize])
        })
    }

    /// Number of generated packets.
    pub fn generated_len(&self) -> usize {
        self.generated.len()
    }

    /// A free pool slot, if any, as (slot, writable buffer).
    #[inline]
    pub(crate) fn alloc_slot(&mut self) -> Option<(u32, &mut [u8])> {
        let used = self.generated.len();
        if used >= self.slots {
            return None;
        }
        let at = used * self.slot_size;
        Some((used as u32, &mut self.pool[at..at + self.slot_size]))
    }

    /// Free slots left.
    #[inline]
    pub(crate) fn free_slots(&self) -> usize {
        self.slots - self.generated.len()
    }

    #[inline(always)]
    pub(crate) fn enqueue_tx(&mut self, port: PortId, index: u16) {
        if let Some(q) = self.tx.get_mut(usize::from(port)) {
            if q.is_empty() {
                self.tx_ports.push(port);
            }
            q.push(index);
        }
    }
}

/// Per-packet state carried from the input stage to the forward stage.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Meta {
    /// Ingress interface.
    pub(crate) in_if: InterfaceId,
    /// Offset of the IP header from the frame start.
    pub(crate) l3: u16,
    /// IP packet length (header included; Ethernet padding excluded).
    pub(crate) l3_len: u32,
}

/// Where the input stage sent a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Finished: the verdict is final.
    Done(Verdict),
    /// To the IPv4 route lookup; `true`: its TTL has run out (time
    /// exceeded if the route has a next hop).
    Route4(u32, bool),
    /// To the IPv6 route lookup; `true`: its hop limit has run out.
    Route6(u128, bool),
}

/// A packet's state between the stages of a chunk: decided, or in flight
/// in one family (its destination went to that family's lookup array, so
/// the state is a few bytes rather than a `u128` step's thirty-two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// Finished: the verdict is final.
    Done(Verdict),
    /// In flight, IPv4.
    Ipv4,
    /// In flight, IPv6.
    Ipv6,
}

const _: () = assert!(std::mem::size_of::<Status>() <= 8);

/// A forwarding worker: its counters, its output buffers and its ICMP
/// token bucket. One per core; `Send`, not shared.
#[derive(Debug)]
pub struct Worker {
    cfg: WorkerConfig,
    pub(crate) out: BatchOutput,
    pub(crate) counters: Counters,
    /// ICMP error token buckets: [`ICMP_PATH_MTU`] for the path MTU
    /// messages (IPv4 fragmentation needed, ICMPv6 packet too big), [`ICMP_OTHER`]
    /// for every other error, so a flood that earns one kind cannot
    /// starve the other (a TTL-1 flood does not stop path MTU discovery).
    pub(crate) icmp_buckets: [TokenBucket; 2],
    /// IPv4 identification for generated ICMP errors.
    pub(crate) ip_id: u16,
    /// The ACL's per-worker state ([`Acl::State`]), created on first use.
    acl_state: Option<Box<dyn Any + Send>>,
    /// The clock the stage timer reads; `None`: no run-time statistics.
    stage_clock: Option<StageClock>,
    /// Per-stage calls, packets and time (`show runtime`).
    runtime: RuntimeStats,
    /// Chunks processed (which of them are timed).
    chunks: u64,
    /// The packet trace in progress (`None`: not tracing).
    trace: Option<Box<Tracer>>,
    /// The next-hop stage's packets whose routes discard them, by place in
    /// the chunk, finished in chunk order after it (kept here, not in a
    /// register the stage's loop would have to keep free).
    discards: u64,
    /// Of `discards`, the packets routed to a next hop whose TTL or hop
    /// limit has run out (time exceeded rather than the route's discard).
    expired: u64,
    /// The input stage's packets whose TTL or hop limit has run out, by
    /// place in the chunk: expired once routed to a next hop. Gathered
    /// where the input stage already compares the TTL, so a packet with
    /// TTL left costs the next-hop stage nothing.
    expiring: u64,
}

impl Worker {
    /// A worker with its buffers allocated.
    pub fn new(cfg: WorkerConfig) -> Self {
        Self {
            out: BatchOutput::new(&cfg),
            counters: Counters::new(0),
            icmp_buckets: [
                TokenBucket::new(cfg.icmp_rate_per_sec, cfg.icmp_burst),
                TokenBucket::new(cfg.icmp_rate_per_sec, cfg.icmp_burst),
            ],
            ip_id: 0,
            acl_state: None,
            stage_clock: None,
            runtime: RuntimeStats::default(),
            chunks: 0,
            trace: None,
            discards: 0,
            expired: 0,
            expiring: 0,
            cfg,
        }
    }

    /// Traces the packets `tracer` picks (see [`crate::trace`]), or stops
    /// tracing (`None`).
    pub fn set_tracer(&mut self, tracer: Option<Tracer>) {
        self.trace = tracer.map(Box::new);
    }

    /// The trace in progress.
    pub fn tracer(&self) -> Option<&Tracer> {
        self.trace.as_deref()
    }

    /// The trace records so far, taken out (the tracer goes on).
    pub fn take_trace(&mut self) -> Vec<TraceRecord> {
        self.trace.as_mut().map(|t| t.take()).unwrap_or_default()
    }

    fn trace_at(&mut self, at: u16) -> Option<&mut TraceRecord> {
        if at == UNTRACED {
            return None;
        }
        self.trace.as_mut()?.record(at)
    }

    /// Times every stage with `clock` (one read per stage of one chunk in
    /// [`crate::runtime::TIMED_EVERY`]), or stops timing (`None`).
    pub fn set_stage_clock(&mut self, clock: Option<StageClock>) {
        self.stage_clock = clock;
    }

    /// Per-stage statistics since creation (calls and packets always;
    /// time only with a clock).
    pub fn runtime(&self) -> &RuntimeStats {
        &self.runtime
    }

    /// The configuration.
    pub fn config(&self) -> &WorkerConfig {
        &self.cfg
    }

    /// This worker's counters since creation.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The ACL's per-worker state (e.g. the firewall's rule counters), if
    /// the ACL of the last snapshot used has state of type `S`.
    pub fn acl_state<S: 'static>(&self) -> Option<&S> {
        self.acl_state.as_ref()?.downcast_ref::<S>()
    }

    /// [`Worker::acl_state`], writable (the worker loop takes what the ACL
    /// left for it, e.g. flows for the XDP engine's fast path).
    pub fn acl_state_mut<S: 'static>(&mut self) -> Option<&mut S> {
        self.acl_state.as_mut()?.downcast_mut::<S>()
    }

    /// The last batch's results.
    pub fn output(&self) -> &BatchOutput {
        &self.out
    }

    /// Runs the pipeline over `frames`, received on `port` at time `now_ns`
    /// (any monotonic nanosecond clock; it only paces ICMP errors).
    ///
    /// Frames are rewritten in place; read the results from the returned
    /// [`BatchOutput`] (also [`Worker::output`]). At most
    /// [`WorkerConfig::max_batch`] frames are processed; the rest are
    /// dropped as `batch_overflow` and get no verdict.
    pub fn process<F4, F6, A>(
        &mut self,
        tables: &Tables<F4, F6, A>,
        now_ns: u64,
        port: PortId,
        frames: &mut [Frame<'_>],
    ) -> &BatchOutput
    where
        F4: Lookup<u32>,
        F6: Lookup<u128>,
        A: Acl,
    {
        self.out.reset(tables.port_count(), self.cfg.max_batch);
        if self.counters.interfaces.len() < tables.interfaces().len() {
            // Only after a snapshot with more interfaces than any before.
            self.counters.interfaces.resize(
                tables.interfaces().len(),
                crate::counters::InterfaceCounters::default(),
            );
        }
        for b in &mut self.icmp_buckets {
            b.refill(now_ns);
        }
        let n = frames.len().min(self.cfg.max_batch);
        if frames.len() > n {
            let extra = (frames.len() - n) as u64;
            self.counters.rx_frames += extra;
            self.counters.drops[DropReason::BatchOverflow.index()] += extra;
        }
        let mut base = 0;
        while base < n {
            let end = (base + CHUNK).min(n);
            self.process_chunk(tables, now_ns, port, base, &mut frames[base..end]);
            base = end;
        }
        &self.out
    }

    // The chunk loop and every per-packet stage function it calls
    // (`stages::input`, the IPv4 / IPv6 input and checks, `choose_hop`,
    // `forward`, `enqueue_tx`, the local-address filters) are always in
    // line: where the inliner chose, the loop ran 3.5% more instructions
    // and 6-7% more time (docs/notebook/2026-12-02-to-12-06-pipeline-benchmark.md).
    #[inline(always)]
    fn process_chunk<F4, F6, A>(
        &mut self,
        tables: &Tables<F4, F6, A>,
        now_ns: u64,
        port: PortId,
        base: usize,
        frames: &mut [Frame<'_>],
    ) where
        F4: Lookup<u32>,
        F6: Lookup<u128>,
        A: Acl,
    {
        let n = frames.len();
        let mut meta = [Meta::default(); CHUNK];
        let mut steps = [Status::Done(Verdict::Consumed); CHUNK];
        let mut timer = ChunkTimer::start(self.stage_clock, self.chunks);
        self.chunks = self.chunks.wrapping_add(1);

        // Packet traces: a branch per stage of the chunk, the recording
        // out of line (cold), so the stages compile as without traces.
        let tracing = self.trace.as_ref().is_some_and(|t| t.remaining() > 0);
        let mut traced = [UNTRACED; CHUNK];
        if tracing {
            self.trace_pick(port, frames, &mut traced);
        }

        // Stage 1: input (L2 dispatch, L3 validation, local delivery).
        // The destinations of the packets in flight are gathered per
        // family, in chunk order, for the lookup, with each one's place in
        // the chunk.
        let mut dst4 = [0u32; CHUNK];
        let mut at4 = [0u8; CHUNK];
        let mut n4 = 0;
        let mut dst6 = [0u128; CHUNK];
        let mut at6 = [0u8; CHUNK];
        let mut n6 = 0;
        // The port's untagged interface, for nearly every frame, looked up
        // once.
        let untagged = tables.untagged_interface(port);
        for i in 0..n {
            steps[i] =
                match stages::input(self, tables, port, untagged, &mut frames[i], &mut meta[i]) {
                    Step::Done(v) => Status::Done(v),
                    Step::Route4(d, expiring) => {
                        dst4[n4 % CHUNK] = d;
                        at4[n4 % CHUNK] = i as u8;
                        n4 += 1;
                        self.expiring |= u64::from(expiring) << i;
                        Status::Ipv4
                    }
                    Step::Route6(d, expiring) => {
                        dst6[n6 % CHUNK] = d;
                        at6[n6 % CHUNK] = i as u8;
                        n6 += 1;
                        self.expiring |= u64::from(expiring) << i;
                        Status::Ipv6
                    }
                };
        }
        // At most one packet per frame of the chunk.
        let (n4, n6) = (n4.min(CHUNK), n6.min(CHUNK));
        if tracing {
            self.trace_input(
                &traced[..n],
                &steps[..n],
                &meta[..n],
                (&dst4[..n4], &dst6[..n6]),
            );
        }
        timer.lap(&mut self.runtime, Stage::Input, n);

        // Stage 2: batched route lookup, one call per family; with policy
        // rules beyond the main table, packet by packet through them.
        let mut nh4 = [None::<NextHopId>; CHUNK];
        let mut nh6 = [None::<NextHopId>; CHUNK];
        if n4 > 0 {
            if tables.policy.v4.main_only() {
                tables.fib4.lookup_batch(&dst4[..n4], &mut nh4[..n4]);
            } else {
                let (policy, adj) = (&tables.policy.v4, &tables.adjacencies[..]);
                let batch = (&at4[..n4], &dst4[..n4]);
                stages::route_by_rules::<_, _, 4>(
                    policy,
                    &tables.fib4,
                    adj,
                    frames,
                    &meta,
                    batch,
                    &mut nh4[..n4],
                );
            }
        }
        if n6 > 0 {
            if tables.policy.v6.main_only() {
                tables.fib6.lookup_batch(&dst6[..n6], &mut nh6[..n6]);
            } else {
                let (policy, adj) = (&tables.policy.v6, &tables.adjacencies[..]);
                let batch = (&at6[..n6], &dst6[..n6]);
                stages::route_by_rules::<_, _, 16>(
                    policy,
                    &tables.fib6,
                    adj,
                    frames,
                    &meta,
                    batch,
                    &mut nh6[..n6],
                );
            }
        }
        timer.lap(&mut self.runtime, Stage::Lookup, n4 + n6);

        // Stage 3: next-hop choice (adjacency, ECMP), which fixes the
        // egress interface, then the TTL / hop limit of a packet with a
        // next hop (RFC 1812 §5.3.1, RFC 8200 §3): as the kernel does, a
        // route that discards answers before the TTL is looked at (a
        // packet with TTL 1 and no route gets "unreachable", not "time
        // exceeded"). It walks each family's lookup results with
        // their places in the chunk (IPv4 first), not the whole chunk;
        // packets whose route discards them or whose TTL ran out are
        // finished after it in chunk order (their ICMP errors take tokens
        // and pool slots in arrival order).
        let mut hops = [0u32; CHUNK];
        // Where each packet stood before this stage (for a trace only).
        let routed = tracing.then_some(steps);
        for (is_ipv6, at, nh) in [
            (false, &at4[..n4], &nh4[..n4]),
            (true, &at6[..n6], &nh6[..n6]),
        ] {
            for (&i, &nh) in at.iter().zip(nh) {
                let i = usize::from(i) % CHUNK;
                let Some(f) = frames.get(i) else { continue };
                match stages::choose_hop(self, tables, f, &meta[i], is_ipv6, nh) {
                    Ok(h) => hops[i] = h,
                    Err(NoHop::Dropped(v)) => steps[i] = Status::Done(v),
                    Err(NoHop::Discard(d)) => {
                        // Finished after the loop; the hop slot holds the
                        // discard's code meanwhile.
                        self.discards |= 1 << i;
                        hops[i] = d.code();
                    }
                }
            }
        }
        if self.expiring != 0 {
            // Those of the expiring packets that kept a next hop.
            let mut expiring = std::mem::take(&mut self.expiring);
            while expiring != 0 {
                let i = expiring.trailing_zeros() as usize % CHUNK;
                expiring &= expiring - 1;
                if matches!(steps[i], Status::Ipv4 | Status::Ipv6) && self.discards & (1 << i) == 0
                {
                    self.discards |= 1 << i;
                    self.expired |= 1 << i;
                }
            }
        }
        if self.discards != 0 {
            let discards = std::mem::take(&mut self.discards);
            self.discard_in_order(tables, frames, &meta, &mut steps, &hops, discards);
        }
        if let Some(routed) = &routed {
            self.trace_next_hop(
                tables,
                &traced[..n],
                &routed[..n],
                &steps[..n],
                &hops[..n],
                (&nh4[..n4], &nh6[..n6]),
            );
        }
        timer.lap(&mut self.runtime, Stage::NextHop, n4 + n6);

        // Stage 4: ACL over the packets still in flight, before anything
        // (neighbour resolution, ICMP, fragmentation) acts on them.
        if !tables.acl.accepts_all() {
            let k = self.acl_stage(
                tables, now_ns, frames, &meta, &mut steps, &hops, tracing, &traced,
            );
            timer.lap(&mut self.runtime, Stage::Acl, k);
        }

        // Stage 5: neighbour, MTU, TTL / hop limit, rewrite, enqueue.
        let mut in_flight = 0;
        for i in 0..n {
            let verdict = match steps[i] {
                Status::Done(v) => v,
                Status::Ipv4 | Status::Ipv6 => {
                    in_flight += 1;
                    stages::forward(
                        self,
                        tables,
                        &mut frames[i],
                        &meta[i],
                        steps[i] == Status::Ipv6,
                        hops[i],
                        (base + i) as u16,
                    )
                }
            };
            if let Verdict::Punt(_) = verdict {
                self.out.punt.push((base + i) as u16);
            }
            self.out.verdicts.push(verdict);
        }
        if tracing {
            self.trace_forward(&traced[..n], &steps[..n], base);
        }
        timer.lap(&mut self.runtime, Stage::Forward, in_flight);
    }

    /// The ACL stage over the chunk's packets still in flight (`steps`):
    /// builds their flow keys (with the egress interface of their hop in
    /// `hops`), classifies them in one call and finishes the ones it
    /// denies, sending the reject's ICMP error or TCP reset first. Returns
    /// how many it classified. Out of line: its keys and loops would
    /// otherwise take registers from the stages around it in the chunk
    /// loop, which with the ACL spilled more in every stage.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn acl_stage<F4, F6, A>(
        &mut self,
        tables: &Tables<F4, F6, A>,
        now_ns: u64,
        frames: &[Frame<'_>],
        meta: &[Meta; CHUNK],
        steps: &mut [Status; CHUNK],
        hops: &[u32; CHUNK],
        tracing: bool,
        traced: &[u16; CHUNK],
    ) -> usize
    where
        F4: Lookup<u32>,
        F6: Lookup<u128>,
        A: Acl,
    {
        // The keys of the packets in flight, in chunk order, built where
        // the classifier reads them, with each one's place in the chunk.
        let mut keys = [FlowKey::default(); CHUNK];
        let mut hints = [0u8; CHUNK];
        let mut idx = [0u8; CHUNK];
        let mut k = 0;
        for i in 0..frames.len().min(CHUNK) {
            let is_ipv6 = match steps[i] {
                Status::Done(_) => continue,
                Status::Ipv4 => false,
                Status::Ipv6 => true,
            };
            let f = &frames[i];
            let Some(hop) = tables.hops.get(hops[i] as usize) else {
                steps[i] = Status::Done(self.drop_in(meta[i].in_if, DropReason::BadNextHop));
                continue;
            };
            let key = &mut keys[k % CHUNK];
            stages::write_flow_key(f.data(), &meta[i], is_ipv6, key);
            key.out_interface = hop.interface;
            hints[k % CHUNK] = f.ct_hint();
            idx[k % CHUNK] = i as u8;
            k += 1;
        }
        let k = k.min(CHUNK);
        let mut actions = [AclAction::Accept; CHUNK];
        // Allocates only on first use or when the ACL's state type
        // changes with a new snapshot.
        let mut state = match self.acl_state.take() {
            Some(b) if b.is::<A::State>() => b,
            _ => Box::new(tables.acl.new_state()),
        };
        let mut rules = [None::<u32>; CHUNK];
        if let Some(st) = state.downcast_mut::<A::State>() {
            tables.acl.classify_batch_with(
                st,
                now_ns,
                &keys[..k],
                &hints[..k],
                &mut actions[..k],
                tracing.then_some(&mut rules[..k]),
            );
        }
        self.acl_state = Some(state);
        if tracing {
            self.trace_acl(traced, &idx[..k], &actions[..k], &rules[..k]);
        }
        for j in 0..k {
            let i = usize::from(idx[j]) % CHUNK;
            match actions[j] {
                AclAction::Accept => continue,
                AclAction::Deny => {}
                AclAction::RejectTcpReset => {
                    let m = &meta[i];
                    let l3 = usize::from(m.l3);
                    let orig = &frames[i].data()[l3..l3 + m.l3_len as usize];
                    if keys[j].is_ipv6 {
                        stages::tcp_reset::reset_v6(self, tables, m.in_if, orig);
                    } else {
                        stages::tcp_reset::reset_v4(self, tables, m.in_if, orig);
                    }
                }
                AclAction::RejectUnreachable(code) => {
                    let m = &meta[i];
                    let l3 = usize::from(m.l3);
                    let orig = &frames[i].data()[l3..l3 + m.l3_len as usize];
                    if keys[j].is_ipv6 {
                        stages::icmp::error_v6(
                            self,
                            tables,
                            m.in_if,
                            orig,
                            stages::icmp::V6_UNREACHABLE,
                            code,
                            0,
                        );
                    } else {
                        stages::icmp::error_v4(
                            self,
                            tables,
                            m.in_if,
                            orig,
                            stages::icmp::V4_UNREACHABLE,
                            code,
                            0,
                        );
                    }
                }
            }
            steps[i] = Status::Done(self.drop_in(meta[i].in_if, DropReason::AclDenied));
        }
        k
    }

    /// Finishes the packets of `discards` (bits by place in the chunk),
    /// whose routes discard them or, those also in `self.expired`, whose TTL or
    /// hop limit ran out, in chunk order: the ICMP errors take tokens and
    /// pool slots in the order the packets arrived. The hop slots of the
    /// discarded hold the discards' codes.
    #[cold]
    #[inline(never)]
    fn discard_in_order<F4, F6, A>(
        &mut self,
        tables: &Tables<F4, F6, A>,
        frames: &[Frame<'_>],
        meta: &[Meta; CHUNK],
        steps: &mut [Status; CHUNK],
        hops: &[u32; CHUNK],
        mut discards: u64,
    ) where
        F4: Lookup<u32>,
        F6: Lookup<u128>,
    {
        let expired = std::mem::take(&mut self.expired);
        while discards != 0 {
            let i = discards.trailing_zeros() as usize % CHUNK;
            discards &= discards - 1;
            let Some(f) = frames.get(i) else { continue };
            let is_ipv6 = steps[i] == Status::Ipv6;
            if expired & (1 << i) != 0 {
                steps[i] = Status::Done(stages::expire_packet(self, tables, f, &meta[i], is_ipv6));
            } else if let Some(d) = Discard::from_code(hops[i]) {
                steps[i] = Status::Done(stages::discard_packet(
                    self, tables, f, &meta[i], is_ipv6, d,
                ));
            }
        }
    }

    /// Picks the chunk's frames the tracer traces (before any stage
    /// rewrites them).
    #[cold]
    #[inline(never)]
    fn trace_pick(&mut self, port: PortId, frames: &[Frame<'_>], traced: &mut [u16; CHUNK]) {
        if let Some(t) = self.trace.as_mut() {
            for (slot, f) in traced.iter_mut().zip(frames) {
                *slot = t.pick(port, f.data()).unwrap_or(UNTRACED);
            }
        }
    }

    /// Records where the input stage sent each traced packet.
    #[cold]
    #[inline(never)]
    fn trace_input(
        &mut self,
        traced: &[u16],
        steps: &[Status],
        meta: &[Meta],
        (dst4, dst6): (&[u32], &[u128]),
    ) {
        let (mut j4, mut j6) = (0, 0);
        for ((&at, &step), m) in traced.iter().zip(steps).zip(meta) {
            let destination = match step {
                Status::Done(_) => None,
                Status::Ipv4 => {
                    j4 += 1;
                    dst4.get(j4 - 1).map(|d| IpAddr::from(d.to_be_bytes()))
                }
                Status::Ipv6 => {
                    j6 += 1;
                    dst6.get(j6 - 1).map(|d| IpAddr::from(d.to_be_bytes()))
                }
            };
            if let Some(r) = self.trace_at(at) {
                match step {
                    Status::Done(_) => r.decided_by = Stage::Input,
                    _ => {
                        r.in_if = Some(m.in_if);
                        r.destination = destination;
                    }
                }
            }
        }
    }

    /// Records the lookups (`nh4`, `nh6`: the per-family results, in the
    /// order of the packets `routed` sent to them) and the hops chosen.
    #[cold]
    #[inline(never)]
    fn trace_next_hop<F4, F6, A>(
        &mut self,
        tables: &Tables<F4, F6, A>,
        traced: &[u16],
        routed: &[Status],
        steps: &[Status],
        hops: &[u32],
        (nh4, nh6): (&[Option<NextHopId>], &[Option<NextHopId>]),
    ) {
        let (mut j4, mut j6) = (0, 0);
        for (i, &at) in traced.iter().enumerate() {
            let nh = match routed[i] {
                Status::Done(_) => continue,
                Status::Ipv4 => {
                    j4 += 1;
                    nh4.get(j4 - 1).copied().flatten()
                }
                Status::Ipv6 => {
                    j6 += 1;
                    nh6.get(j6 - 1).copied().flatten()
                }
            };
            let hop = tables
                .hops
                .get(hops[i] as usize)
                .map(|x| (x.interface, x.gateway));
            if let Some(r) = self.trace_at(at) {
                r.next_hop_set = Some(nh);
                match steps[i] {
                    Status::Done(_) => r.decided_by = Stage::NextHop,
                    _ => r.hop = hop,
                }
            }
        }
    }

    /// Records the ACL's decisions (`idx[j]`: the packet of decision j).
    #[cold]
    #[inline(never)]
    fn trace_acl(
        &mut self,
        traced: &[u16; CHUNK],
        idx: &[u8],
        actions: &[AclAction],
        rules: &[Option<u32>],
    ) {
        for ((&i, &action), &rule) in idx.iter().zip(actions).zip(rules) {
            if let Some(r) = self.trace_at(traced[usize::from(i)]) {
                r.acl = Some((action, rule));
                if action != AclAction::Accept {
                    r.decided_by = Stage::Acl;
                }
            }
        }
    }

    /// Records each traced packet's verdict (the chunk's, from `base` in
    /// the output), and the forward stage for those it finished.
    #[cold]
    #[inline(never)]
    fn trace_forward(&mut self, traced: &[u16], steps: &[Status], base: usize) {
        for (i, (&at, &step)) in traced.iter().zip(steps).enumerate() {
            let verdict = self.out.verdicts.get(base + i).copied();
            if let (Some(r), Some(v)) = (self.trace_at(at), verdict) {
                if matches!(step, Status::Ipv4 | Status::Ipv6) {
                    r.decided_by = Stage::Forward;
                }
                r.verdict = v;
            }
        }
    }

    /// Counts a drop on an identified ingress interface.
    #[inline]
    pub(crate) fn drop_in(&mut self, in_if: InterfaceId, r: DropReason) -> Verdict {
        self.counters.drop(r);
        if let Some(c) = self.counters.interfaces.get_mut(usize::from(in_if)) {
            c.rx_dropped += 1;
        }
        Verdict::Drop(r)
    }

    /// Counts a transmission on an egress interface.
    #[inline]
    pub(crate) fn count_tx(&mut self, out_if: InterfaceId, bytes: usize) {
        if let Some(c) = self.counters.interfaces.get_mut(usize::from(out_if)) {
            c.tx_packets += 1;
            c.tx_bytes += bytes as u64;
        }
    }
}
