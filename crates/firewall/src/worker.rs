//! The fast-path side: one [`FirewallWorker`] per worker thread.

use crate::classifier::CHUNK;
use crate::conntrack::{Conntrack, ConntrackStats};
use crate::firewall::{Firewall, RuleCounters};
use crate::key::{Action, PacketKey, Verdict};
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

/// A worker's firewall state: the rule-set snapshot it uses, its rule
/// counters, its connection table and its reject rate limiter.
#[derive(Debug)]
pub struct FirewallWorker {
    fw: Arc<Firewall>,
    counters: RuleCounters,
    ct: Option<Conntrack>,
    limiter: TokenBucket,
    stats: WorkerStats,
    seed: u64,
}

impl FirewallWorker {
    /// A worker state for a rule set. `seed` keys the connection table's
    /// hash (use a different random value per worker).
    pub fn new(fw: Arc<Firewall>, seed: u64) -> Self {
        let ct = fw
            .stateful()
            .then(|| Conntrack::new(fw.conntrack_config(), seed));
        let rl = fw.reject_limit();
        FirewallWorker {
            counters: RuleCounters::new(fw.counter_slots()),
            limiter: TokenBucket::new(rl.per_second, rl.burst),
            ct,
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

    /// Switches to `fw` (see [`FirewallWorker::sync`]).
    pub fn adopt(&mut self, fw: Arc<Firewall>) {
        self.counters = RuleCounters::new(fw.counter_slots());
        let cfg = fw.conntrack_config();
        if !fw.stateful() {
            self.ct = None;
        } else if self.ct.as_ref().is_none_or(|c| c.config() != cfg) {
            self.ct = Some(Conntrack::new(cfg, self.seed));
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
                        let l = ct.lookup(k, now);
                        k.ct = l.state;
                        *t = l.tracked;
                    }
                }
                None => keys.iter_mut().for_each(|k| k.ct = CtState::Untracked),
            }
            self.fw.classify_batch(chain, keys, out, &mut self.counters);
            for (i, (k, v)) in keys.iter().zip(out.iter_mut()).enumerate() {
                match v.action {
                    Action::Accept => {
                        if let Some(ct) = self.ct.as_mut() {
                            if !tracked[i] && k.ct == CtState::New {
                                ct.insert(k, now);
                            }
                        }
                    }
                    Action::Drop => {}
                    _ => {
                        if !self.limiter.take(now) {
                            v.action = Action::Drop;
                            self.stats.rejects_rate_limited += 1;
                        }
                    }
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
