//! Connection tracking: a bounded, per-worker flow table (no locks).
//!
//! Both directions of a flow map to one entry (endpoints are stored in a
//! canonical order), so both directions of a flow must reach the same
//! worker (the router hands frames to their flow's owner,
//! `pipeline::owner`). Time comes from the caller.
//!
//! The table is set-associative: a flow hashes to one bucket of [`WAYS`]
//! slots. An insert takes an empty or expired slot; if the bucket is full
//! of live entries it evicts the not-yet-established entry that expires
//! first; if every entry is established the insert fails (counted), so a
//! flood of new flows cannot push out established connections.
//!
//! In front of the XDP engine the table shares its flows with the
//! program's own table (`ct_flows`, a BPF hash): a flow this table finds
//! established on a packet the program did not know is handed over
//! ([`FastFlow`]); from then on the program tracks it (refreshes it, sees
//! its FIN or RST) and tells this table, in each packet it still hands
//! over, what it knows ([`CtHint`]). Both tables keep the same state
//! machine and timeouts, so the verdicts are the same.

use crate::key::PacketKey;
use crate::rules::{ConntrackConfig, CtState};
use serde::{Deserialize, Serialize};

/// Slots per bucket.
pub const WAYS: usize = 8;

const NS: u64 = 1_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Phase {
    #[default]
    Empty,
    /// Only the originator has sent.
    New,
    /// Both directions seen.
    Established,
    /// TCP FIN or RST seen.
    Closing,
}

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    a: u128,
    b: u128,
    pa: u16,
    pb: u16,
    proto: u8,
    v6: bool,
    /// Whether the originator is endpoint `a`.
    orig_a: bool,
    phase: Phase,
    expires: u64,
}

/// What the in-kernel fast path knew of a packet's flow when it handed the
/// packet to this table (carried with the frame; `None` without one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CtHint {
    /// No fast path in front: this table decides.
    #[default]
    None,
    /// The fast path's table has no live entry for the flow: this table
    /// decides, and a flow it finds established is handed to the fast path.
    Absent,
    /// The fast path's table holds the flow as established and has already
    /// advanced and refreshed it with this packet: the packet is
    /// established, and this table is not consulted.
    Established,
}

impl CtHint {
    /// The hint's wire value (the XDP engine's `FF_CT_HINT_*`).
    pub fn code(self) -> u8 {
        match self {
            CtHint::None => 0,
            CtHint::Absent => 1,
            CtHint::Established => 2,
        }
    }

    /// The hint of a wire value (unknown values: none).
    pub fn from_code(c: u32) -> CtHint {
        match c {
            1 => CtHint::Absent,
            2 => CtHint::Established,
            _ => CtHint::None,
        }
    }
}

/// An established flow handed to the fast path: its canonical identity
/// (endpoints in order, IPv4 in the low 32 bits), its state and timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FastFlow {
    pub a: u128,
    pub b: u128,
    pub pa: u16,
    pub pb: u16,
    pub proto: u8,
    pub v6: bool,
    /// Whether the originator is endpoint `a`.
    pub orig_a: bool,
    /// TCP FIN or RST seen.
    pub closing: bool,
    /// When the entry expires (the table's clock, ns).
    pub expires: u64,
    /// Timeout after a packet while open, and once closing (ns).
    pub timeout_open: u64,
    pub timeout_closing: u64,
}

/// Canonical flow identity of a packet, and whether the packet goes a → b.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Flow {
    a: u128,
    b: u128,
    pa: u16,
    pb: u16,
    proto: u8,
    v6: bool,
    from_a: bool,
}

fn is_icmp(key: &PacketKey) -> bool {
    (key.proto == 1 && !key.is_v6) || (key.proto == 58 && key.is_v6)
}

fn flow_of(key: &PacketKey) -> Flow {
    let mask = if key.is_v6 { u128::MAX } else { 0xffff_ffff };
    let (src, dst) = (key.src & mask, key.dst & mask);
    // ICMP queries and replies carry the same identifier in both directions.
    let (sp, dp) = if is_icmp(key) {
        (key.sport, key.sport)
    } else {
        (key.sport, key.dport)
    };
    let from_a = (src, sp) <= (dst, dp);
    let ((a, pa), (b, pb)) = if from_a {
        ((src, sp), (dst, dp))
    } else {
        ((dst, dp), (src, sp))
    };
    Flow {
        a,
        b,
        pa,
        pb,
        proto: key.proto,
        v6: key.is_v6,
        from_a,
    }
}

/// Occupancy and event counters of one table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConntrackStats {
    pub capacity: u64,
    /// Slots holding an entry (expired ones count until reclaimed).
    pub occupancy: u64,
    pub inserts: u64,
    pub insert_failures: u64,
    pub evictions: u64,
    pub expirations: u64,
}

impl ConntrackStats {
    /// Adds another table's counters (workers' tables summed).
    pub fn accumulate(&mut self, o: &ConntrackStats) {
        self.capacity += o.capacity;
        self.occupancy += o.occupancy;
        self.inserts += o.inserts;
        self.insert_failures += o.insert_failures;
        self.evictions += o.evictions;
        self.expirations += o.expirations;
    }
}

/// A per-worker connection table.
#[derive(Debug, Clone)]
pub struct Conntrack {
    cfg: ConntrackConfig,
    slots: Vec<Entry>,
    bucket_mask: usize,
    /// The hash's keys, from the seed.
    keys: [u64; 6],
    sweep_pos: usize,
    stats: ConntrackStats,
}

/// Result of looking a packet up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtLookup {
    pub state: CtState,
    /// Whether an entry exists (no insert needed).
    pub tracked: bool,
}

/// The 128-bit product of `a` and `b`, its halves folded together.
#[inline]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

impl Conntrack {
    /// A table of at least `cfg.size` entries (rounded up to a power of two
    /// number of buckets). `seed` keys the hash (pick it at random so flows
    /// cannot be aimed at one bucket).
    pub fn new(cfg: ConntrackConfig, seed: u64) -> Self {
        let buckets = cfg.size.div_ceil(WAYS).max(1).next_power_of_two();
        Conntrack {
            cfg,
            slots: vec![Entry::default(); buckets * WAYS],
            bucket_mask: buckets - 1,
            keys: std::array::from_fn(|i| mix(seed ^ mix(i as u64 + 1))),
            sweep_pos: 0,
            stats: ConntrackStats {
                capacity: (buckets * WAYS) as u64,
                ..ConntrackStats::default()
            },
        }
    }

    /// The table's counters.
    pub fn stats(&self) -> ConntrackStats {
        self.stats
    }

    /// The settings the table was made with.
    pub fn config(&self) -> ConntrackConfig {
        self.cfg
    }

    /// The flow's bucket: the flow's words, each keyed, multiplied in
    /// pairs (folded 128-bit products), so which flows share a bucket
    /// depends on the seed: flows built to collide under one seed (as XOR
    /// of the words would let anyone build them, whatever the seed) spread
    /// under another. Three multiplies and a final mix.
    #[inline]
    fn bucket(&self, f: &Flow) -> usize {
        let k = &self.keys;
        let ports = (f.pa as u64) << 16 | (f.pb as u64) << 32 | f.proto as u64;
        let h = fold(f.a as u64 ^ k[0], (f.a >> 64) as u64 ^ k[1]);
        let h = fold(h ^ f.b as u64 ^ k[2], (f.b >> 64) as u64 ^ k[3]);
        let h = mix(fold(h ^ ports ^ k[4], k[5]));
        (h as usize & self.bucket_mask) * WAYS
    }

    fn same(e: &Entry, f: &Flow) -> bool {
        e.phase != Phase::Empty
            && e.a == f.a
            && e.b == f.b
            && e.pa == f.pa
            && e.pb == f.pb
            && e.proto == f.proto
            && e.v6 == f.v6
    }

    fn find(&self, f: &Flow, now: u64) -> Option<usize> {
        let b = self.bucket(f);
        (b..b + WAYS).find(|&i| Self::same(&self.slots[i], f) && self.slots[i].expires > now)
    }

    fn timeout(&self, proto: u8, phase: Phase) -> u64 {
        let c = &self.cfg;
        let s = match (proto, phase) {
            (6, Phase::New) => c.tcp_syn,
            (6, Phase::Established) => c.tcp_established,
            (6, _) => c.tcp_closing,
            (17, Phase::New) => c.udp_new,
            (17, _) => c.udp_established,
            (1 | 58, _) => c.icmp,
            _ => c.other,
        };
        s.saturating_mul(NS)
    }

    /// Finds the packet's flow, advances its state and refreshes its
    /// timeout. Returns the `ct state` the rules see.
    pub fn lookup(&mut self, key: &PacketKey, now: u64) -> CtLookup {
        self.lookup_at(key, now).0
    }

    /// [`Conntrack::lookup`], and the flow as the fast path would take it
    /// when the packet left it established.
    pub fn lookup_for_fast_path(
        &mut self,
        key: &PacketKey,
        now: u64,
    ) -> (CtLookup, Option<FastFlow>) {
        let (l, at) = self.lookup_at(key, now);
        let fast = match at {
            Some(i) if l.state == CtState::Established => {
                let e = &self.slots[i];
                Some(FastFlow {
                    a: e.a,
                    b: e.b,
                    pa: e.pa,
                    pb: e.pb,
                    proto: e.proto,
                    v6: e.v6,
                    orig_a: e.orig_a,
                    closing: e.phase == Phase::Closing,
                    expires: e.expires,
                    timeout_open: self.timeout(e.proto, Phase::Established),
                    timeout_closing: self.timeout(e.proto, Phase::Closing),
                })
            }
            _ => None,
        };
        (l, fast)
    }

    fn lookup_at(&mut self, key: &PacketKey, now: u64) -> (CtLookup, Option<usize>) {
        let f = flow_of(key);
        let Some(i) = self.find(&f, now) else {
            let state = if key.proto == 6 && (key.tcp_flags & 0x12) != 0x02 {
                // A TCP segment that is not an initial SYN and has no entry.
                CtState::Invalid
            } else {
                CtState::New
            };
            return (
                CtLookup {
                    state,
                    tracked: false,
                },
                None,
            );
        };
        let e = &mut self.slots[i];
        let original = f.from_a == e.orig_a;
        if !original && e.phase == Phase::New {
            e.phase = Phase::Established;
        }
        if key.proto == 6 && key.tcp_flags & 0x05 != 0 {
            // FIN or RST: the connection is going away.
            e.phase = Phase::Closing;
        }
        let state = match e.phase {
            Phase::New => CtState::New,
            _ => CtState::Established,
        };
        let phase = e.phase;
        let t = self.timeout(key.proto, phase);
        self.slots[i].expires = now.saturating_add(t);
        (
            CtLookup {
                state,
                tracked: true,
            },
            Some(i),
        )
    }

    /// The fast path now holds flow `f` (handed over at `now`): from here
    /// its state is the fast path's, which tells this table what it knows
    /// with every packet it still hands over. This table's copy is kept
    /// only `grace` ns more, for the flow's packets the fast path handed
    /// over before it held the flow, then expires: a copy the fast path
    /// no longer refreshes must not outlive the fast path's own entry.
    pub fn delegate(&mut self, f: &FastFlow, now: u64, grace: u64) {
        let flow = Flow {
            a: f.a,
            b: f.b,
            pa: f.pa,
            pb: f.pb,
            proto: f.proto,
            v6: f.v6,
            from_a: true,
        };
        if let Some(i) = self.find(&flow, now) {
            let e = &mut self.slots[i];
            e.expires = e.expires.min(now.saturating_add(grace));
        }
    }

    /// Records a new flow after the rules accepted its first packet.
    /// Returns false when the bucket had no room (counted).
    pub fn insert(&mut self, key: &PacketKey, now: u64) -> bool {
        let f = flow_of(key);
        if self.find(&f, now).is_some() {
            return true;
        }
        let b = self.bucket(&f);
        let mut slot = None;
        let mut victim: Option<usize> = None;
        for i in b..b + WAYS {
            let e = &self.slots[i];
            if e.phase == Phase::Empty {
                slot = Some(i);
                break;
            }
            if e.expires <= now {
                self.stats.expirations += 1;
                self.stats.occupancy -= 1;
                self.slots[i].phase = Phase::Empty;
                slot = Some(i);
                break;
            }
            if e.phase == Phase::New && victim.is_none_or(|v| self.slots[v].expires > e.expires) {
                victim = Some(i);
            }
        }
        let i = match (slot, victim) {
            (Some(i), _) => i,
            (None, Some(v)) => {
                self.stats.evictions += 1;
                self.stats.occupancy -= 1;
                v
            }
            (None, None) => {
                self.stats.insert_failures += 1;
                return false;
            }
        };
        self.slots[i] = Entry {
            a: f.a,
            b: f.b,
            pa: f.pa,
            pb: f.pb,
            proto: f.proto,
            v6: f.v6,
            orig_a: f.from_a,
            phase: Phase::New,
            expires: now.saturating_add(self.timeout(f.proto, Phase::New)),
        };
        self.stats.inserts += 1;
        self.stats.occupancy += 1;
        true
    }

    /// Reclaims expired entries among the next `budget` slots (call it
    /// from the worker loop: bounded work, no allocation).
    pub fn sweep(&mut self, now: u64, budget: usize) {
        for _ in 0..budget.min(self.slots.len()) {
            let i = self.sweep_pos;
            self.sweep_pos = (self.sweep_pos + 1) % self.slots.len();
            let e = &mut self.slots[i];
            if e.phase != Phase::Empty && e.expires <= now {
                e.phase = Phase::Empty;
                self.stats.expirations += 1;
                self.stats.occupancy -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(src: u32, sport: u16, dst: u32, dport: u16, flags: u8) -> PacketKey {
        PacketKey {
            src: src as u128,
            dst: dst as u128,
            sport,
            dport,
            proto: 6,
            tcp_flags: flags,
            ..PacketKey::default()
        }
    }

    const SYN: u8 = 0x02;
    const ACK: u8 = 0x10;

    /// Flows whose words XOR to the same value (address bit k against port
    /// bit k): one bucket for every seed, were the words combined by XOR.
    /// Keyed, the seed decides which share a bucket.
    #[test]
    fn which_flows_share_a_bucket_depends_on_the_seed() {
        let crafted: Vec<Flow> = (0..16)
            .map(|k| Flow {
                a: 1u128 << (16 + k),
                b: 99,
                pa: !(1u16 << k),
                pb: 0,
                proto: 6,
                v6: false,
                from_a: true,
            })
            .collect();
        let xor = |f: &Flow| {
            (f.a as u64)
                ^ ((f.a >> 64) as u64)
                ^ (f.b as u64)
                ^ ((f.b >> 64) as u64)
                ^ ((f.pa as u64) << 16 | (f.pb as u64) << 32 | f.proto as u64)
        };
        assert!(
            crafted.iter().all(|f| xor(f) == xor(&crafted[0])),
            "the flows collide under XOR"
        );
        for seed in [1u64, 7, 0x5eed, u64::MAX] {
            let ct = Conntrack::new(ConntrackConfig::default(), seed);
            let buckets: std::collections::BTreeSet<usize> =
                crafted.iter().map(|f| ct.bucket(f)).collect();
            assert!(
                buckets.len() >= 12,
                "seed {seed:#x}: 16 crafted flows in {} buckets",
                buckets.len()
            );
        }
    }

    #[test]
    fn tcp_handshake_becomes_established() {
        let mut ct = Conntrack::new(ConntrackConfig::default(), 7);
        let syn = tcp(1, 1000, 2, 80, SYN);
        assert_eq!(ct.lookup(&syn, 0).state, CtState::New);
        assert!(ct.insert(&syn, 0));
        let l = ct.lookup(&syn, 1);
        assert_eq!(
            l,
            CtLookup {
                state: CtState::New,
                tracked: true
            }
        );
        let synack = tcp(2, 80, 1, 1000, SYN | ACK);
        assert_eq!(ct.lookup(&synack, 2).state, CtState::Established);
        assert_eq!(
            ct.lookup(&tcp(1, 1000, 2, 80, ACK), 3).state,
            CtState::Established
        );
        // Another port pair is not the same flow; without SYN it is invalid.
        assert_eq!(
            ct.lookup(&tcp(1, 1001, 2, 80, ACK), 3).state,
            CtState::Invalid
        );
        assert_eq!(ct.stats().occupancy, 1);
    }

    #[test]
    fn entries_expire() {
        let cfg = ConntrackConfig {
            udp_new: 5,
            ..ConntrackConfig::default()
        };
        let mut ct = Conntrack::new(cfg, 1);
        let k = PacketKey {
            src: 1,
            dst: 2,
            sport: 5,
            dport: 53,
            proto: 17,
            ..PacketKey::default()
        };
        assert!(ct.insert(&k, 0));
        assert!(ct.lookup(&k, 4 * NS).tracked);
        // Refreshed at 4 s: alive until 9 s.
        assert!(ct.lookup(&k, 8 * NS).tracked);
        assert!(!ct.lookup(&k, 14 * NS).tracked);
        ct.sweep(14 * NS, usize::MAX);
        assert_eq!(ct.stats().occupancy, 0);
        assert_eq!(ct.stats().expirations, 1);
    }
}
