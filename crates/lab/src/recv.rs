//! The receiver: an AF_PACKET TPACKET_V3 ring on the sink's interface that
//! counts every frame, reads the generator's stamps (see [`crate::generator`]) to
//! count unique, reordered and duplicate packets and to measure latency
//! (kernel receive time minus send time, both CLOCK_REALTIME on one host),
//! and prints per-second lines like `netstat -iw 1`: input from the ring,
//! output from an interface's kernel counters (the dut's egress, say).

use crate::generator::parse_stamp;
use crate::sys;
use serde::Serialize;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Receiver errors.
#[derive(Debug, thiserror::Error)]
pub enum RecvError {
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The system error.
        source: std::io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RecvError {
    let what = what.into();
    move |source| RecvError::Io { what, source }
}

/// One interface's kernel counters (from `/proc/net/dev`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct IfCounters {
    /// Received packets.
    pub rx_packets: u64,
    /// Received bytes.
    pub rx_bytes: u64,
    /// Receive errors.
    pub rx_errs: u64,
    /// Receive drops.
    pub rx_drop: u64,
    /// Transmitted packets.
    pub tx_packets: u64,
    /// Transmitted bytes.
    pub tx_bytes: u64,
    /// Transmit errors.
    pub tx_errs: u64,
    /// Transmit drops.
    pub tx_drop: u64,
}

impl IfCounters {
    /// Field-wise `self - earlier` (saturating).
    pub fn since(&self, earlier: &IfCounters) -> IfCounters {
        IfCounters {
            rx_packets: self.rx_packets.saturating_sub(earlier.rx_packets),
            rx_bytes: self.rx_bytes.saturating_sub(earlier.rx_bytes),
            rx_errs: self.rx_errs.saturating_sub(earlier.rx_errs),
            rx_drop: self.rx_drop.saturating_sub(earlier.rx_drop),
            tx_packets: self.tx_packets.saturating_sub(earlier.tx_packets),
            tx_bytes: self.tx_bytes.saturating_sub(earlier.tx_bytes),
            tx_errs: self.tx_errs.saturating_sub(earlier.tx_errs),
            tx_drop: self.tx_drop.saturating_sub(earlier.tx_drop),
        }
    }
}

/// Finds `ifname`'s counters in the text of `/proc/net/dev`.
pub fn parse_net_dev(text: &str, ifname: &str) -> Option<IfCounters> {
    for line in text.lines() {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        if name.trim() != ifname {
            continue;
        }
        let v: Vec<u64> = rest
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        if v.len() < 12 {
            return None;
        }
        return Some(IfCounters {
            rx_bytes: v[0],
            rx_packets: v[1],
            rx_errs: v[2],
            rx_drop: v[3],
            tx_bytes: v[8],
            tx_packets: v[9],
            tx_errs: v[10],
            tx_drop: v[11],
        });
    }
    None
}

/// Reads one interface's counters in a given namespace, from any thread:
/// the `/proc/thread-self/net/dev` file stays bound to the namespace of the
/// thread that opened it.
#[derive(Debug)]
pub struct NetDevReader {
    file: File,
    ifname: String,
    text: String,
}

impl NetDevReader {
    /// Opens the counters of `ifname` in namespace `netns` (`None`: the
    /// caller's own).
    pub fn open(netns: Option<&str>, ifname: &str) -> Result<Self, RecvError> {
        let ns = netns.map(str::to_string);
        let file = std::thread::scope(|s| {
            s.spawn(|| -> std::io::Result<File> {
                if let Some(ns) = &ns {
                    sys::enter_netns(ns)?;
                }
                File::open("/proc/thread-self/net/dev")
            })
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("namespace thread panicked")))
        })
        .map_err(io_err(format!(
            "/proc/net/dev of namespace {}",
            netns.unwrap_or("(own)")
        )))?;
        let mut r = Self {
            file,
            ifname: ifname.to_string(),
            text: String::new(),
        };
        r.read()?;
        Ok(r)
    }

    /// The interface's counters now.
    pub fn read(&mut self) -> Result<IfCounters, RecvError> {
        self.text.clear();
        self.file
            .seek(SeekFrom::Start(0))
            .map_err(io_err("seek /proc/net/dev"))?;
        self.file
            .read_to_string(&mut self.text)
            .map_err(io_err("read /proc/net/dev"))?;
        parse_net_dev(&self.text, &self.ifname).ok_or_else(|| RecvError::Io {
            what: format!("interface {}", self.ifname),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "not in /proc/net/dev"),
        })
    }
}

/// Sequence bookkeeping over a sliding window of the last 2^20 numbers.
#[derive(Debug, Clone)]
pub struct SeqTracker {
    bits: Vec<u64>,
    max: Option<u64>,
    /// Unique packets seen.
    pub unique: u64,
    /// Packets that arrived after a higher sequence number.
    pub reordered: u64,
    /// Packets seen more than once.
    pub duplicates: u64,
}

const WINDOW: u64 = 1 << 20;

impl Default for SeqTracker {
    fn default() -> Self {
        Self {
            bits: vec![0; (WINDOW / 64) as usize],
            max: None,
            unique: 0,
            reordered: 0,
            duplicates: 0,
        }
    }
}

impl SeqTracker {
    fn slot(s: u64) -> (usize, u64) {
        let i = s % WINDOW;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    fn clear(&mut self, s: u64) {
        let (w, b) = Self::slot(s);
        self.bits[w] &= !b;
    }

    /// Records sequence number `s`.
    pub fn see(&mut self, s: u64) {
        match self.max {
            None => {
                self.max = Some(s);
            }
            Some(m) if s > m => {
                if s - m >= WINDOW {
                    self.bits.iter_mut().for_each(|w| *w = 0);
                } else {
                    for x in m + 1..s {
                        self.clear(x);
                    }
                }
                self.max = Some(s);
            }
            Some(m) => {
                if m - s >= WINDOW {
                    // Too old to tell a duplicate from a late packet.
                    self.reordered += 1;
                    self.unique += 1;
                    return;
                }
                let (w, b) = Self::slot(s);
                if self.bits[w] & b != 0 {
                    self.duplicates += 1;
                } else {
                    self.bits[w] |= b;
                    self.reordered += 1;
                    self.unique += 1;
                }
                return;
            }
        }
        let (w, b) = Self::slot(s);
        self.bits[w] |= b;
        self.unique += 1;
    }
}

/// A log-linear latency histogram (32 sub-buckets per power of two: about
/// 3% resolution) with exact minimum and maximum.
#[derive(Debug, Clone)]
pub struct LatencyHist {
    counts: Vec<u64>,
    /// Samples recorded.
    pub samples: u64,
    /// Smallest sample (ns).
    pub min: u64,
    /// Largest sample (ns).
    pub max: u64,
}

const SUB: u32 = 32;

impl Default for LatencyHist {
    fn default() -> Self {
        Self {
            counts: vec![0; (64 + 64 * SUB) as usize],
            samples: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

impl LatencyHist {
    fn index(v: u64) -> usize {
        if v < 64 {
            return v as usize;
        }
        let exp = 63 - v.leading_zeros(); // >= 6
        let sub = (v >> (exp - 5)) & u64::from(SUB - 1);
        (64 + (exp - 6) * SUB) as usize + sub as usize
    }

    fn lower_bound(i: usize) -> u64 {
        if i < 64 {
            return i as u64;
        }
        let k = (i - 64) as u32;
        let exp = k / SUB + 6;
        let sub = u64::from(k % SUB);
        (1u64 << exp) | (sub << (exp - 5))
    }

    /// A histogram from bucket counts in this type's indexing (as the XDP
    /// receiver keeps them) and the exact extremes.
    pub(crate) fn from_counts(buckets: &[u64], min: u64, max: u64) -> Self {
        let mut h = Self::default();
        for (c, b) in h.counts.iter_mut().zip(buckets) {
            *c = *b;
        }
        h.samples = h.counts.iter().sum();
        if h.samples > 0 {
            h.min = min;
            h.max = max;
        }
        h
    }

    /// Records one latency in nanoseconds.
    pub fn record(&mut self, ns: u64) {
        self.counts[Self::index(ns)] += 1;
        self.samples += 1;
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
    }

    /// The `q`-quantile (0..=1), as the lower bound of its bucket clamped
    /// to the exact minimum and maximum; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.samples == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.samples as f64).ceil() as u64).max(1);
        let mut acc = 0;
        for (i, c) in self.counts.iter().enumerate() {
            acc += c;
            if acc >= rank {
                return Some(Self::lower_bound(i).clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }

    /// Non-empty buckets as (upper bound ns, count), ascending.
    pub fn buckets(&self) -> Vec<(u64, u64)> {
        let n = self.counts.len();
        (0..n)
            .filter(|&i| self.counts[i] > 0)
            .map(|i| {
                let upper = if i + 1 < n {
                    Self::lower_bound(i + 1)
                } else {
                    u64::MAX
                };
                (upper.min(self.max.max(1)), self.counts[i])
            })
            .collect()
    }

    /// min, median, p99, p99.9, max.
    pub fn summary(&self) -> Option<LatencyStats> {
        Some(LatencyStats {
            samples: self.samples,
            min_ns: (self.samples > 0).then_some(self.min)?,
            median_ns: self.quantile(0.5)?,
            p99_ns: self.quantile(0.99)?,
            p999_ns: self.quantile(0.999)?,
            max_ns: self.max,
        })
    }
}

/// Latency figures of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LatencyStats {
    /// Samples.
    pub samples: u64,
    /// Minimum (ns).
    pub min_ns: u64,
    /// Median (ns).
    pub median_ns: u64,
    /// 99th percentile (ns).
    pub p99_ns: u64,
    /// 99.9th percentile (ns).
    pub p999_ns: u64,
    /// Maximum (ns).
    pub max_ns: u64,
}

/// One second of counters, as `netstat -iw 1` prints them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SecondRow {
    /// Input packets (frames on the ring).
    pub in_packets: u64,
    /// Input errors (interface receive errors).
    pub in_errs: u64,
    /// Input drops (ring drops plus interface receive drops).
    pub in_idrops: u64,
    /// Input bytes.
    pub in_bytes: u64,
    /// Output packets (the output counters' interface).
    pub out_packets: u64,
    /// Output errors.
    pub out_errs: u64,
    /// Output bytes.
    pub out_bytes: u64,
}

/// The header lines above [`SecondRow::line`], like netstat's.
pub fn second_header() -> String {
    format!(
        "{:>25}{:>46}\n{:>10} {:>5} {:>6} {:>10} {:>10} {:>5} {:>10}",
        "input", "output", "packets", "errs", "idrops", "bytes", "packets", "errs", "bytes"
    )
}

impl SecondRow {
    /// Fills the output columns from `reader`'s counters since `prev`,
    /// which becomes the current reading.
    pub(crate) fn set_output(
        &mut self,
        reader: &mut NetDevReader,
        prev: &mut IfCounters,
    ) -> Result<(), RecvError> {
        let now = reader.read()?;
        let d = now.since(prev);
        *prev = now;
        self.out_packets = d.tx_packets;
        self.out_errs = d.tx_errs;
        self.out_bytes = d.tx_bytes;
        Ok(())
    }

    /// The row in `netstat -iw 1`'s layout.
    pub fn line(&self) -> String {
        format!(
            "{:>10} {:>5} {:>6} {:>10} {:>10} {:>5} {:>10}",
            self.in_packets,
            self.in_errs,
            self.in_idrops,
            self.in_bytes,
            self.out_packets,
            self.out_errs,
            self.out_bytes
        )
    }
}

/// What to receive.
#[derive(Debug, Clone)]
pub struct RecvConfig {
    /// Interface to capture on (in the calling thread's namespace).
    pub ifname: String,
    /// Stop after this long (else when `stop` is set).
    pub duration: Option<Duration>,
    /// Seconds at the start whose packets give no latency samples and whose
    /// rows are left out of rates.
    pub warmup_s: u32,
    /// Seconds at the end likewise (only with a duration).
    pub cooldown_s: u32,
    /// Output counters: (namespace, interface), e.g. the dut's egress.
    pub output: Option<(String, String)>,
    /// Print each second's row to stdout as it completes.
    pub print_rows: bool,
}

/// What the receiver saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecvReport {
    /// Every frame on the ring.
    pub frames: u64,
    /// Frames without the generator's stamp.
    pub other_frames: u64,
    /// Unique stamped packets.
    pub received: u64,
    /// Stamped packets that arrived after a later one.
    pub reordered: u64,
    /// Stamped packets seen twice.
    pub duplicates: u64,
    /// Frames the ring dropped (it was full).
    pub ring_drops: u64,
    /// Latency over the measured window.
    pub latency: Option<LatencyStats>,
    /// The latency histogram: (bucket upper bound ns, count).
    pub latency_histogram: Vec<(u64, u64)>,
    /// Per-second counters.
    pub per_second: Vec<SecondRow>,
    /// Seconds left out at the start.
    pub warmup_s: u32,
    /// Seconds left out at the end.
    pub cooldown_s: u32,
    /// Seconds the receiver ran.
    pub elapsed_s: f64,
    /// The XDP receiver's own time per frame in its program, from the
    /// kernel's BPF run statistics, when they were on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_ns_per_frame: Option<f64>,
}

impl RecvReport {
    /// Packets the generator attempted that did not arrive.
    pub fn lost(&self, attempted: u64) -> u64 {
        attempted.saturating_sub(self.received)
    }

    /// The per-second input packet counts inside the measured window.
    pub fn measured_rates(&self) -> Vec<u64> {
        let n = self.per_second.len();
        let lo = (self.warmup_s as usize).min(n);
        let hi = n.saturating_sub(self.cooldown_s as usize).max(lo);
        self.per_second[lo..hi]
            .iter()
            .map(|r| r.in_packets)
            .collect()
    }
}

/// A receiver that has its ring open, ready to [`Receiver::run`].
pub struct Receiver {
    ring: sys::PacketRxRing,
    own: NetDevReader,
    output: Option<NetDevReader>,
    cfg: RecvConfig,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver").field("cfg", &self.cfg).finish()
    }
}

impl Receiver {
    /// Opens the ring on `cfg.ifname` in the calling thread's namespace.
    pub fn open(cfg: RecvConfig) -> Result<Self, RecvError> {
        // 64 blocks of 1 MiB: about 500k small frames of slack.
        let ring = sys::PacketRxRing::open(&cfg.ifname, 1 << 20, 64, 2)
            .map_err(io_err(format!("TPACKET_V3 ring on {}", cfg.ifname)))?;
        let own = NetDevReader::open(None, &cfg.ifname)?;
        let output = match &cfg.output {
            Some((ns, ifname)) => Some(NetDevReader::open(Some(ns), ifname)?),
            None => None,
        };
        Ok(Self {
            ring,
            own,
            output,
            cfg,
        })
    }

    /// Receives until the duration passes or `stop` is set (then drains
    /// what is already queued).
    pub fn run(mut self, stop: &AtomicBool) -> Result<RecvReport, RecvError> {
        let cfg = &self.cfg;
        let mut rep = RecvReport {
            warmup_s: cfg.warmup_s,
            cooldown_s: cfg.cooldown_s,
            ..Default::default()
        };
        let mut seq = SeqTracker::default();
        let mut hist = LatencyHist::default();
        let t0 = sys::monotonic_ns();
        let dur_ns = cfg
            .duration
            .map_or(u64::MAX, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64);
        let win_lo = u64::from(cfg.warmup_s) * 1_000_000_000;
        let win_hi = dur_ns.saturating_sub(u64::from(cfg.cooldown_s) * 1_000_000_000);
        let _ = self.ring.take_stats();
        let mut own_prev = self.own.read()?;
        let mut out_prev = match &mut self.output {
            Some(r) => r.read()?,
            None => IfCounters::default(),
        };
        let mut row = SecondRow::default();
        let mut next_tick = t0 + 1_000_000_000;
        if cfg.print_rows {
            println!("{}", second_header());
        }
        let mut draining = 0u32;
        loop {
            let now = sys::monotonic_ns();
            let in_window = (win_lo..win_hi).contains(&(now - t0));
            let frames = self
                .ring
                .poll_block(50, |frame, rx_ns| {
                    row.in_packets += 1;
                    row.in_bytes += frame.len() as u64;
                    match parse_stamp(frame) {
                        Some(st) => {
                            seq.see(st.seq);
                            if in_window && rx_ns >= st.ts_ns {
                                hist.record(rx_ns - st.ts_ns);
                            }
                        }
                        None => rep.other_frames += 1,
                    }
                })
                .map_err(io_err("ring poll"))?;
            rep.frames += frames as u64;
            let now = sys::monotonic_ns();
            if now >= next_tick {
                let (_, drops) = self.ring.take_stats().map_err(io_err("ring statistics"))?;
                rep.ring_drops += drops;
                let own = self.own.read()?;
                let d = own.since(&own_prev);
                own_prev = own;
                row.in_errs = d.rx_errs;
                row.in_idrops = drops + d.rx_drop;
                if let Some(r) = &mut self.output {
                    row.set_output(r, &mut out_prev)?;
                }
                if cfg.print_rows {
                    println!("{}", row.line());
                }
                rep.per_second.push(row);
                row = SecondRow::default();
                next_tick += 1_000_000_000;
            }
            if now - t0 >= dur_ns || stop.load(Ordering::Relaxed) {
                // Drain: stop after two empty polls.
                if frames == 0 {
                    draining += 1;
                    if draining >= 2 {
                        break;
                    }
                }
            }
        }
        let (_, drops) = self.ring.take_stats().map_err(io_err("ring statistics"))?;
        rep.ring_drops += drops;
        rep.received = seq.unique;
        rep.reordered = seq.reordered;
        rep.duplicates = seq.duplicates;
        rep.latency = hist.summary();
        rep.latency_histogram = hist.buckets();
        rep.elapsed_s = (sys::monotonic_ns() - t0) as f64 / 1e9;
        Ok(rep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq_tracker_counts_reorder_and_duplicates() {
        let mut t = SeqTracker::default();
        for s in [0, 1, 2, 5, 3, 3, 4, 6, 6, 7] {
            t.see(s);
        }
        assert_eq!((t.unique, t.reordered, t.duplicates), (8, 2, 2));
        // A jump beyond the window forgets the old bits without panicking.
        t.see(7 + 3 * WINDOW);
        t.see(7 + 3 * WINDOW - 1);
        t.see(7 + 3 * WINDOW - 1);
        assert_eq!((t.unique, t.reordered, t.duplicates), (10, 3, 3));
    }

    #[test]
    fn seq_tracker_forgets_bits_of_reused_slots() {
        let mut t = SeqTracker::default();
        t.see(5);
        t.see(5 + WINDOW / 2);
        // 5 + WINDOW reuses 5's slot: it is new, not a duplicate.
        t.see(5 + WINDOW);
        assert_eq!((t.unique, t.duplicates), (3, 0));
    }

    #[test]
    fn histogram_quantiles_within_resolution() {
        let mut h = LatencyHist::default();
        for v in 1..=10_000u64 {
            h.record(v * 1000);
        }
        let s = h.summary().unwrap();
        assert_eq!((s.min_ns, s.max_ns, s.samples), (1000, 10_000_000, 10_000));
        let close = |got: u64, want: f64| ((got as f64 - want) / want).abs() < 0.035;
        assert!(close(s.median_ns, 5_000_000.0), "{}", s.median_ns);
        assert!(close(s.p99_ns, 9_900_000.0), "{}", s.p99_ns);
        assert!(close(s.p999_ns, 9_990_000.0), "{}", s.p999_ns);
        for v in [0u64, 1, 63, 64, 65, 1 << 40, u64::MAX] {
            let i = LatencyHist::index(v);
            assert!(LatencyHist::lower_bound(i) <= v);
        }
        assert_eq!(LatencyHist::default().summary(), None);
    }

    #[test]
    fn net_dev_parses() {
        let text = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n    s0: 6000 100 1 2 0 0 0 0 1200 20 3 4 0 0 0 0\n";
        let c = parse_net_dev(text, "s0").unwrap();
        assert_eq!(
            c,
            IfCounters {
                rx_bytes: 6000,
                rx_packets: 100,
                rx_errs: 1,
                rx_drop: 2,
                tx_bytes: 1200,
                tx_packets: 20,
                tx_errs: 3,
                tx_drop: 4
            }
        );
        assert_eq!(parse_net_dev(text, "s1"), None);
        assert_eq!(
            c.since(&IfCounters {
                rx_packets: 40,
                ..Default::default()
            })
            .rx_packets,
            60
        );
    }
}
