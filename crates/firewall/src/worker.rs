//! The fast-path side: one [`FirewallWorker`] per worker thread.

use crate::classifier::CHUNK;
use crate::conntrack::{Conntrack, ConntrackStats, CtHint, FastFlow};
use crate::firewall::{Firewall, RuleCounters};
use crate::key::{Action, ClassifyKey, PacketKey, Verdict};
use crate::rules::{Chain, CtState};
use serde::Serialize;
use std::sync::Arc;

/// Where the control side publishes compiled rule sets; workers read it
/// without locks (`load` is wait-free for readers).
pub type SharedFirewall = arc_swap::ArcSwap<Firewall>;

/// Per-worker firewall counters beyond the per-rule ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WorkerStats {
    /// Rejects turned into silent drops by the rate limit.
    pub rejects_rate_limited: u64,
    /// Rule-set swaps this worker has picked up.
    pub rule_set_swaps: u64,
    /// Established flows handed to the XDP engine's fast path.
    pub fast_path_handoffs: u64,
    /// Packets the fast path had already found established (handed over
    /// for another reason: a neighbour miss, the MTU, a reject).
    pub fast_path_established: u64,
    /// Flows the fast path's table had no room for (they stay here).
    pub fast_path_refused: u64,
}

/// Token bucket in nanosecond units: one reject costs `NS` tokens.
#[derive(Debug, Clone, Copy)]
struct TokenBucket {
    per_second: u64,
    cap: u128,
    tokens: u128,
    last: u64,
}

const NS: u128 = 1_000_000_000;

impl TokenBucket {
    fn new(per_second: u64, burst: u64) -> Self {
        let cap = burst.max(1) as u128 * NS;
        TokenBucket {
            per_second,
            cap,
            tokens: cap,
            last: 0,
        }
    }

    fn take(&mut self, now: u64) -> bool {
        if now > self.last {
            let add = (now - self.last) as u128 * self.per_second as u128;
            self.tokens = (self.tokens + add).min(self.cap);
            self.last = now;
        }
        if self.tokens >= NS {
            self.tokens -= NS;
            true
        } else {
            false
        }
    }
}

/// Flows handed to the fast path per batch at most (the rest are handed
/// over on a later packet).
pub const HANDOFF_CAP: usize = 256;

/// How long this table keeps its copy of a flow the fast path took over:
/// the flow's packets the fast path handed over before it held the flow
/// (in the AF_XDP ring, microseconds to milliseconds) still find it.
pub const HANDOVER_GRACE_NS: u64 = 1_000_000_000;

/// Whether two handed-over flows are the same flow.
fn same_flow(x: &FastFlow, y: &FastFlow) -> bool {
    (x.a, x.b, x.pa, x.pb, x.proto, x.v6) == (y.a, y.b, y.pa, y.pb, y.proto, y.v6)
}

/// A reject beyond the rule set's reject rate becomes a plain drop
/// (counted): the ICMP errors and resets a flood provokes stay bounded.
#[inline]
fn limit_reject(limiter: &mut TokenBucket, stats: &mut WorkerStats, now: u64, v: &mut Verdict) {
    if !limiter.take(now) {
        v.action = Action::Drop;
        stats.rejects_rate_limited += 1;
    }
}

/// A worker's firewall state: the rule-set snapshot it uses, its rule
/// counters, its connection table and its reject rate limiter.
#[derive(Debug)]
pub struct FirewallWorker {
    fw: Arc<Firewall>,
    counters: RuleCounters,
    ct: Option<Conntrack>,
    /// The connection table's epoch: a rule set of another epoch starts a
    /// new table (and the fast path forgets the old one's flows).
    epoch: u32,
    /// Flows to hand to the fast path (drained by the worker loop).
    handoffs: Vec<FastFlow>,
    limiter: TokenBucket,
    stats: WorkerStats,
    seed: u64,
}

impl FirewallWorker {
    /// A worker state for a rule set. `seed` keys the connection table's
    /// hash (use a different random value per worker).
    pub fn new(fw: Arc<Firewall>, seed: u64) -> Self {
        Self::with_epoch(fw, seed, 0)
    }

    /// [`FirewallWorker::new`] with the connection table of `epoch`.
    pub fn with_epoch(fw: Arc<Firewall>, seed: u64, epoch: u32) -> Self {
        let ct = fw
            .stateful()
            .then(|| Conntrack::new(fw.conntrack_config(), seed));
        let rl = fw.reject_limit();
        FirewallWorker {
            counters: RuleCounters::new(fw.counter_slots()),
            limiter: TokenBucket::new(rl.per_second, rl.burst),
            ct,
            epoch,
            handoffs: Vec::with_capacity(if fw.stateful() { HANDOFF_CAP } else { 0 }),
            fw,
            stats: WorkerStats::default(),
            seed,
        }
    }

    /// Picks up the published rule set if it changed (call once per batch;
    /// allocates only when a new rule set arrives). Counters restart with a
    /// new rule set; the connection table is kept when its settings match.
    pub fn sync(&mut self, shared: &SharedFirewall) {
        let cur = shared.load();
        if Arc::ptr_eq(&cur, &self.fw) {
            return;
        }
        self.adopt(Arc::clone(&cur));
    }

    /// Switches to `fw` (see [`FirewallWorker::sync`]), keeping the
    /// connection table's epoch.
    pub fn adopt(&mut self, fw: Arc<Firewall>) {
        self.adopt_epoch(fw, self.epoch);
    }

    /// Switches to `fw` whose connection table is of `epoch`: the table is
    /// kept when the epoch and its settings are the same.
    pub fn adopt_epoch(&mut self, fw: Arc<Firewall>, epoch: u32) {
        self.counters = RuleCounters::new(fw.counter_slots());
        let cfg = fw.conntrack_config();
        if !fw.stateful() {
            self.ct = None;
        } else if epoch != self.epoch || self.ct.as_ref().is_none_or(|c| c.config() != cfg) {
            self.ct = Some(Conntrack::new(cfg, self.seed));
        }
        self.epoch = epoch;
        self.handoffs.clear();
        if fw.stateful() && self.handoffs.capacity() == 0 {
            self.handoffs.reserve_exact(HANDOFF_CAP);
        }
        let rl = fw.reject_limit();
        self.limiter = TokenBucket::new(rl.per_second, rl.burst);
        self.fw = fw;
        self.stats.rule_set_swaps += 1;
    }

    /// The rule set in use.
    pub fn firewall(&self) -> &Arc<Firewall> {
        &self.fw
    }

    /// The connection table's epoch.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Hands the flows found established since the last call, on packets
    /// the fast path did not know ([`CtHint::Absent`]), to the fast path:
    /// `give` is called once per flow, in its latest state, and says
    /// whether the fast path holds the flow now (added, or already there);
    /// those are delegated ([`Conntrack::delegate`]), the rest stay here.
    pub fn hand_over(&mut self, now: u64, mut give: impl FnMut(&FastFlow) -> bool) {
        let n = self.dedup_handoffs();
        for i in 0..n {
            let f = self.handoffs[i];
            if give(&f) {
                self.stats.fast_path_handoffs += 1;
                if let Some(ct) = self.ct.as_mut() {
                    // Shorter than the flow's timeouts, so the copy is gone
                    // before the fast path's entry could expire.
                    let grace = HANDOVER_GRACE_NS.min(f.timeout_open.min(f.timeout_closing) / 2);
                    ct.delegate(&f, now, grace);
                }
            } else {
                self.stats.fast_path_refused += 1;
            }
        }
        self.handoffs.clear();
    }

    /// Leaves one entry per flow among the flows waiting to be handed
    /// over, its latest; returns how many.
    fn dedup_handoffs(&mut self) -> usize {
        let n = self.handoffs.len();
        let mut kept = 0;
        for i in 0..n {
            let later = self.handoffs[i + 1..n]
                .iter()
                .any(|f| same_flow(f, &self.handoffs[i]));
            if !later {
                self.handoffs[kept] = self.handoffs[i];
                kept += 1;
            }
        }
        self.handoffs.truncate(kept);
        kept
    }

    /// Rule counters of this worker (sum them with [`Firewall::summary`]).
    pub fn counters(&self) -> &RuleCounters {
        &self.counters
    }

    /// Worker counters.
    pub fn stats(&self) -> WorkerStats {
        self.stats
    }

    /// Connection-table counters (`None` when no rule uses `ct`).
    pub fn conntrack_stats(&self) -> Option<ConntrackStats> {
        self.ct.as_ref().map(Conntrack::stats)
    }

    /// [`Self::process_batch`] for a rule set that tracks no connections
    /// (no rule matches `ct`), handing `keys[i]`'s verdict to `each(i,
    /// verdict)` instead of storing it: rules, counters and the reject
    /// rate limit in one pass per chunk, so the pipeline's ACL stage writes
    /// its action in the same pass. The keys are [`PacketKey`]s or any
    /// other [`ClassifyKey`] (the pipeline's flow keys, read in place).
    /// Returns false, having done nothing, when the rule set tracks
    /// connections (use `process_batch`).
    #[inline]
    pub fn classify_stateless<K: ClassifyKey + Copy>(
        &mut self,
        chain: Chain,
        keys: &[K],
        now: u64,
        mut each: impl FnMut(usize, Verdict),
    ) -> bool {
        if self.ct.is_some() {
            return false;
        }
        let (limiter, stats) = (&mut self.limiter, &mut self.stats);
        self.fw
            .classify_each(chain, keys, &mut self.counters, |i, mut v| {
                if !matches!(v.action, Action::Accept | Action::Drop) {
                    limit_reject(limiter, stats, now, &mut v);
                }
                each(i, v);
            });
        true
    }

    /// Classifies a batch in `chain` at time `now` (monotonic ns):
    /// tracks connections (writing `key.ct`), applies the rules, records
    /// accepted new flows, rate-limits rejects and counts. `out[i]`
    /// answers `keys[i]`.
    pub fn process_batch(
        &mut self,
        chain: Chain,
        keys: &mut [PacketKey],
        out: &mut [Verdict],
        now: u64,
    ) {
        let n = keys.len().min(out.len());
        let mut base = 0;
        while base < n {
            let end = (base + CHUNK).min(n);
            let keys = &mut keys[base..end];
            let out = &mut out[base..end];
            let mut tracked = [false; CHUNK];
            match self.ct.as_mut() {
                Some(ct) => {
                    for (k, t) in keys.iter_mut().zip(tracked.iter_mut()) {
                        match k.ct_hint {
                            CtHint::None => {
                                let l = ct.lookup(k, now);
                                k.ct = l.state;
                                *t = l.tracked;
                            }
                            CtHint::Established => {
                                // The fast path tracks this flow.
                                k.ct = CtState::Established;
                                *t = true;
                                self.stats.fast_path_established += 1;
                            }
                            CtHint::Absent => {
                                let (l, fast) = ct.lookup_for_fast_path(k, now);
                                k.ct = l.state;
                                *t = l.tracked;
                                // (A burst of one flow takes one slot; the
                                // rest are deduplicated at hand-over.)
                                if let Some(f) = fast
                                    && self.handoffs.len() < HANDOFF_CAP
                                {
                                    match self.handoffs.last_mut() {
                                        Some(last) if same_flow(last, &f) => *last = f,
                                        _ => self.handoffs.push(f),
                                    }
                                }
                            }
                        }
                    }
                }
                None => keys.iter_mut().for_each(|k| k.ct = CtState::Untracked),
            }
            self.fw.classify_batch(chain, keys, out, &mut self.counters);
            for (i, (k, v)) in keys.iter().zip(out.iter_mut()).enumerate() {
                match v.action {
                    Action::Accept => {
                        if let Some(ct) = self.ct.as_mut()
                            && !tracked[i]
                            && k.ct == CtState::New
                        {
                            ct.insert(k, now);
                        }
                    }
                    Action::Drop => {}
                    _ => limit_reject(&mut self.limiter, &mut self.stats, now, v),
                }
            }
            base = end;
        }
        if let Some(ct) = self.ct.as_mut() {
            // Bounded housekeeping: reclaim a few expired entries per batch.
            ct.sweep(now, 2 * n);
        }
    }
}
