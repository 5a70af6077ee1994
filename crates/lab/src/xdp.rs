//! The lab's two XDP programs (`bpf/lab_gen.c`, `bpf/lab_recv.c`; maps in
//! `bpf/lab_xdp.h`): the live-frames generator and the XDP receiver.
//!
//! The generator runs in the kernel through `BPF_PROG_RUN` with live
//! frames: the kernel builds each frame from one template, the program
//! writes its flow's headers, sequence number and send time and redirects
//! it out of the generator's interface, so the next hop receives XDP
//! frames, as from a native-XDP NIC, at several times the rate of
//! `sendmmsg` from one core. The receiver counts, checks and drops in
//! XDP on the sink's interface, the cheapest end a frame can have.

use crate::flows::FlowSet;
use crate::generator::{FrameBuilder, GenConfig, GenError, GenReport};
use crate::recv::{
    IfCounters, LatencyHist, NetDevReader, RecvConfig, RecvError, RecvReport, SecondRow,
};
use crate::sys;
use aya::Ebpf;
use aya::maps::{Array, MapData, PerCpuArray, PerCpuValues};
use aya::programs::{Xdp, XdpFlags};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const GEN_OBJECT: &[u8] = aya::include_bytes_aligned!("../bpf/lab_gen.o");
const RECV_OBJECT: &[u8] = aya::include_bytes_aligned!("../bpf/lab_recv.o");

/// Flows the live generator holds (`LAB_GEN_MAX_FLOWS`).
pub const MAX_FLOWS: u64 = 1 << 20;
/// Seconds of per-second counts it keeps (`LAB_GEN_SECONDS`).
pub const GEN_SECONDS: u32 = 4096;
/// Sequence numbers the XDP receiver checks exactly (`LAB_RECV_SEQ_BITS`).
pub const SEQ_BITS: u64 = 1 << 27;
/// The XDP receiver samples the latency of one packet in this many
/// (`LAB_LAT_EVERY`).
pub const LAT_EVERY: u64 = 8;
/// Latency buckets (`LAB_LAT_BUCKETS`).
pub const LAT_BUCKETS: u32 = 64 + 58 * 32;
/// Header bytes before the stamp (`LAB_HDR_V4`, `LAB_HDR_V6`).
pub const HDR_V4: usize = 42;
/// See [`HDR_V4`].
pub const HDR_V6: usize = 62;
/// `sizeof(struct lab_gen_config)`.
pub const GEN_CONFIG_SIZE: usize = 64;
/// `sizeof(struct lab_gen_state)`.
pub const GEN_STATE_SIZE: usize = 48;
/// `sizeof(struct lab_gen_flow)`.
pub const GEN_FLOW_SIZE: usize = 72;
/// `sizeof(struct lab_recv_config)`.
pub const RECV_CONFIG_SIZE: usize = 16;
/// `sizeof(struct lab_recv_counters)`.
pub const RECV_COUNTERS_SIZE: usize = 80;

/// Program runs per `BPF_PROG_RUN` call: long enough that the call's fixed
/// cost (about a millisecond) is small, short enough to notice Ctrl-C.
const RUNS_PER_CALL: u32 = 1 << 20;
/// Frames per live-frames batch (the kernel flushes redirects per batch).
const LIVE_BATCH: u32 = 64;

fn words(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

fn word(b: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[i * 8..i * 8 + 8]);
    u64::from_ne_bytes(w)
}

/// CLOCK_REALTIME - CLOCK_MONOTONIC now: added to `bpf_ktime_get_ns()` it
/// gives the realtime stamps the AF_PACKET generator and receiver use.
fn clock_offset() -> u64 {
    let m0 = sys::monotonic_ns();
    let r = sys::realtime_ns();
    let m1 = sys::monotonic_ns();
    r.wrapping_sub(m0 / 2 + m1 / 2)
}

/// `struct lab_gen_config`'s bytes.
#[allow(clippy::too_many_arguments)]
fn gen_config(
    ifindex: u32,
    nflows: u32,
    v6: bool,
    stamped: bool,
    rate_pps: Option<f64>,
    count: u64,
    duration_ns: u64,
) -> [u8; GEN_CONFIG_SIZE] {
    let mut b = [0u8; GEN_CONFIG_SIZE];
    for (i, v) in [ifindex, nflows, u32::from(v6), u32::from(stamped)]
        .iter()
        .enumerate()
    {
        b[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
    }
    let interval_ps = rate_pps.map_or(0, |r| (1e12 / r.max(1e-3)).round().max(1.0) as u64);
    let max_lag_ps = interval_ps.saturating_mul(crate::generator::MAX_CATCH_UP_FRAMES);
    let tail = words(&[
        clock_offset(),
        interval_ps,
        max_lag_ps,
        count,
        duration_ns,
        0,
    ]);
    b[16..].copy_from_slice(&tail);
    b
}

/// `struct lab_gen_flow` for one flow of `flows`.
fn gen_flow(header: &[u8; 62], udp_partial: u32) -> [u8; GEN_FLOW_SIZE] {
    let mut b = [0u8; GEN_FLOW_SIZE];
    b[..62].copy_from_slice(header);
    b[64..68].copy_from_slice(&udp_partial.to_ne_bytes());
    b
}

fn live_err(what: &str) -> impl FnOnce(String) -> GenError + '_ {
    move |why| GenError::Live {
        what: what.to_string(),
        why,
    }
}

fn gen_map<V: aya::Pod>(ebpf: &mut Ebpf, name: &str) -> Result<Array<MapData, V>, GenError> {
    let m = ebpf
        .take_map(name)
        .ok_or_else(|| live_err("maps")(format!("{name} missing from lab_gen.o")))?;
    Array::try_from(m).map_err(|e| live_err(name)(e.to_string()))
}

/// Does this flow set fit the live generator?
pub fn live_flows_fit(flows: &FlowSet) -> bool {
    flows.len() <= MAX_FLOWS
}

/// Sends as [`crate::generator::run`] does (same frames, stamps, rate, count,
/// duration and report), from an XDP program in live-frames mode. The
/// calling thread's namespace and CPU are used; `cfg.batch` is ignored.
/// Fails with [`GenError::Live`] where the kernel cannot run it (before 5.18,
/// or without BPF privileges): the caller may fall back to
/// [`crate::generator::run`].
pub fn run_live(cfg: &GenConfig, stop: &AtomicBool) -> Result<GenReport, GenError> {
    LiveGenerator::new(&cfg.ifname, &cfg.frames)?.run(cfg, stop)
}

/// The live-frames generator, loaded, attached and holding one frame
/// set's headers, ready for any number of runs (filling a million flows
/// takes a second or two, so a lab loads it once, not per trial).
pub struct LiveGenerator {
    ebpf: Ebpf,
    ifname: String,
    ifindex: u32,
    /// What the flow map holds: flows, frame length, MACs.
    frames: FrameBuilder,
    flows: Array<MapData, [u8; GEN_FLOW_SIZE]>,
    config: Array<MapData, [u8; GEN_CONFIG_SIZE]>,
    state: Array<MapData, [u8; GEN_STATE_SIZE]>,
    seconds: Array<MapData, u64>,
    /// Entries of `seconds` the last run wrote.
    seconds_used: u32,
}

impl std::fmt::Debug for LiveGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveGenerator")
            .field("ifname", &self.ifname)
            .finish()
    }
}

impl LiveGenerator {
    /// Loads the program, attaches it to `ifname` (in the calling thread's
    /// namespace, which later runs must also be in) and fills its flows.
    pub fn new(ifname: &str, frames: &FrameBuilder) -> Result<Self, GenError> {
        let flows = frames.flows();
        if !live_flows_fit(flows) {
            return Err(live_err("flows")(format!(
                "{} flows, at most {MAX_FLOWS} in live mode",
                flows.len()
            )));
        }
        let ifindex = sys::if_index(ifname).map_err(|source| GenError::Io {
            what: format!("interface {ifname}"),
            source,
        })?;
        let mut ebpf =
            Ebpf::load(GEN_OBJECT).map_err(|e| live_err("load lab_gen.o")(e.to_string()))?;
        let mut g = Self {
            flows: gen_map(&mut ebpf, "gen_flows")?,
            config: gen_map(&mut ebpf, "gen_config")?,
            state: gen_map(&mut ebpf, "gen_state")?,
            seconds: gen_map(&mut ebpf, "gen_seconds")?,
            ebpf,
            ifname: ifname.to_string(),
            ifindex,
            frames: frames.clone(),
            seconds_used: 0,
        };
        let prog = g.program()?;
        prog.load()
            .map_err(|e| live_err("load the program")(e.to_string()))?;
        // Attached, it stays in the XDP dispatcher between calls (see
        // lab_gen.c); where the interface has no native XDP, every call
        // pays two RCU grace periods instead, and the pacing's catch-up
        // limit keeps the gaps from turning into bursts.
        let _ = prog.attach(ifname, XdpFlags::DRV_MODE);
        for i in 0..flows.len() {
            let (h, partial) = frames.header(i);
            g.flows
                .set(i as u32, gen_flow(&h, partial), 0)
                .map_err(|e| live_err("gen_flows")(e.to_string()))?;
        }
        Ok(g)
    }

    fn program(&mut self) -> Result<&mut Xdp, GenError> {
        self.ebpf
            .program_mut("lab_gen")
            .ok_or_else(|| live_err("program")("lab_gen missing".into()))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| live_err("program")(e.to_string()))
    }

    /// Does it hold these frames (so `run` may send them)?
    pub fn holds(&self, ifname: &str, frames: &FrameBuilder) -> bool {
        self.ifname == ifname && self.frames.same_frames(frames)
    }

    fn read_state(&self) -> Result<[u64; 5], GenError> {
        let b = self
            .state
            .get(&0, 0)
            .map_err(|e| live_err("gen_state")(e.to_string()))?;
        // next_seq, idle, done, last_ns, start_ns (due_ps is the program's).
        Ok([
            word(&b, 0),
            word(&b, 1),
            word(&b, 2),
            word(&b, 3),
            word(&b, 5),
        ])
    }

    /// One run with `cfg`'s rate, count and duration (its frames must be
    /// the ones this generator holds: see [`LiveGenerator::holds`]).
    pub fn run(&mut self, cfg: &GenConfig, stop: &AtomicBool) -> Result<GenReport, GenError> {
        if !self.holds(&cfg.ifname, &cfg.frames) {
            return Err(live_err("run")(
                "the generator holds other frames or another interface".into(),
            ));
        }
        for s in 0..self.seconds_used {
            self.seconds
                .set(s, 0, 0)
                .map_err(|e| live_err("gen_seconds")(e.to_string()))?;
        }
        self.state
            .set(0, [0u8; GEN_STATE_SIZE], 0)
            .map_err(|e| live_err("gen_state")(e.to_string()))?;
        let frames = &self.frames;
        let duration_ns = cfg
            .duration
            .map_or(u64::MAX, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64);
        let conf = gen_config(
            self.ifindex,
            frames.flows().len() as u32,
            frames.flows().is_v6(),
            frames.stamped(),
            cfg.rate_pps,
            cfg.count.unwrap_or(u64::MAX),
            duration_ns,
        );
        self.config
            .set(0, conf, 0)
            .map_err(|e| live_err("gen_config")(e.to_string()))?;
        let template = vec![0u8; frames.frame_len()];
        let mut tx = NetDevReader::open(None, &cfg.ifname).map_err(|e| GenError::Live {
            what: "interface counters".into(),
            why: e.to_string(),
        })?;
        let tx0 = tx.read().unwrap_or_default();
        let mut st = self.read_state()?;
        {
            let fd = self
                .program()?
                .fd()
                .map_err(|e| live_err("program fd")(e.to_string()))?
                .as_fd()
                .try_clone_to_owned()
                .map_err(|e| live_err("program fd")(e.to_string()))?;
            while st[2] == 0 && !stop.load(Ordering::Relaxed) {
                netio::sys::bpf::xdp_run_live_frames(
                    fd.as_fd(),
                    &template,
                    RUNS_PER_CALL,
                    LIVE_BATCH,
                )
                .map_err(|e| live_err("BPF_PROG_RUN with live frames")(e.to_string()))?;
                st = self.read_state()?;
            }
        }
        let [sent_seq, _idle, done, last_ns, start] = st;
        let tx1 = tx.read().unwrap_or_default();
        let dropped = tx1.since(&tx0).tx_drop.min(sent_seq);
        let elapsed_ns = match cfg.duration {
            // Ended by the clock: the whole duration was offered.
            Some(d) if done == 1 && sent_seq < cfg.count.unwrap_or(u64::MAX) => d.as_nanos() as u64,
            // Ended by the count (or a stop): the first to the last frame
            // is n - 1 gaps; n of them is the time the n frames took.
            _ => {
                let span = last_ns.saturating_sub(start) as f64;
                (span * sent_seq as f64 / (sent_seq.max(2) - 1) as f64).max(1.0) as u64
            }
        };
        let mut rep = GenReport {
            attempted: sent_seq,
            sent: sent_seq - dropped,
            backpressure: dropped,
            elapsed_s: elapsed_ns as f64 / 1e9,
            target_pps: cfg.rate_pps,
            ..Default::default()
        };
        rep.attempted_pps = rep.attempted as f64 / rep.elapsed_s;
        rep.sent_pps = rep.sent as f64 / rep.elapsed_s;
        // Whole seconds, and a last part-second of at least half a second.
        let whole = elapsed_ns / 1_000_000_000;
        let part = elapsed_ns % 1_000_000_000 >= 500_000_000;
        let secs = (whole + u64::from(part)).min(u64::from(GEN_SECONDS)) as u32;
        for s in 0..secs {
            rep.per_second_sent
                .push(self.seconds.get(&s, 0).unwrap_or(0));
        }
        self.seconds_used = (whole + 1).min(u64::from(GEN_SECONDS)) as u32;
        Ok(rep)
    }
}

/// A receiver that counts and checks in XDP on the sink's interface.
pub struct XdpReceiver {
    ebpf: Ebpf,
    own: NetDevReader,
    output: Option<NetDevReader>,
    cfg: RecvConfig,
}

impl std::fmt::Debug for XdpReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpReceiver")
            .field("cfg", &self.cfg)
            .finish()
    }
}

fn recv_err(what: &str) -> impl FnOnce(String) -> RecvError + '_ {
    move |why| RecvError::Io {
        what: what.to_string(),
        source: std::io::Error::other(why),
    }
}

fn counters(ebpf: &Ebpf) -> Result<[u64; 10], RecvError> {
    let m = ebpf
        .map("recv_counters")
        .ok_or_else(|| recv_err("recv_counters")("missing".into()))?;
    let a: PerCpuArray<&MapData, [u8; RECV_COUNTERS_SIZE]> =
        PerCpuArray::try_from(m).map_err(|e| recv_err("recv_counters")(e.to_string()))?;
    let per_cpu: PerCpuValues<[u8; RECV_COUNTERS_SIZE]> = a
        .get(&0, 0)
        .map_err(|e| recv_err("recv_counters")(e.to_string()))?;
    let mut sum = [0u64; 10];
    let mut min_plus1 = 0u64;
    for c in per_cpu.iter() {
        for (i, s) in sum.iter_mut().enumerate() {
            let v = word(c, i);
            match i {
                8 => {
                    if v != 0 && (min_plus1 == 0 || v < min_plus1) {
                        min_plus1 = v;
                    }
                }
                9 => *s = (*s).max(v),
                _ => *s += v,
            }
        }
    }
    sum[8] = min_plus1;
    Ok(sum)
}

impl XdpReceiver {
    /// Loads the receiver and attaches it to `cfg.ifname` in the calling
    /// thread's namespace (native XDP; veth supports it). It detaches when
    /// the receiver is dropped.
    pub fn open(cfg: RecvConfig) -> Result<Self, RecvError> {
        let mut ebpf =
            Ebpf::load(RECV_OBJECT).map_err(|e| recv_err("load lab_recv.o")(e.to_string()))?;
        {
            let m = ebpf
                .map_mut("recv_config")
                .ok_or_else(|| recv_err("recv_config")("missing".into()))?;
            let mut a: Array<&mut MapData, [u8; RECV_CONFIG_SIZE]> =
                Array::try_from(m).map_err(|e| recv_err("recv_config")(e.to_string()))?;
            let lat_from = sys::realtime_ns() + u64::from(cfg.warmup_s) * 1_000_000_000;
            let mut b = [0u8; RECV_CONFIG_SIZE];
            b.copy_from_slice(&words(&[clock_offset(), lat_from]));
            a.set(0, b, 0)
                .map_err(|e| recv_err("recv_config")(e.to_string()))?;
        }
        let prog: &mut Xdp = ebpf
            .program_mut("lab_recv")
            .ok_or_else(|| recv_err("program")("lab_recv missing".into()))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| recv_err("program")(e.to_string()))?;
        prog.load()
            .map_err(|e| recv_err("load lab_recv")(e.to_string()))?;
        prog.attach(&cfg.ifname, XdpFlags::DRV_MODE)
            .map_err(|e| recv_err(&format!("attach lab_recv to {}", cfg.ifname))(e.to_string()))?;
        let own = NetDevReader::open(None, &cfg.ifname)?;
        let output = match &cfg.output {
            Some((ns, ifname)) => Some(NetDevReader::open(Some(ns), ifname)?),
            None => None,
        };
        Ok(Self {
            ebpf,
            own,
            output,
            cfg,
        })
    }

    /// The program's own cost per frame so far, from the kernel's BPF run
    /// statistics (`None` unless `kernel.bpf_stats_enabled` is on).
    pub fn program_ns_per_frame(&self) -> Option<f64> {
        let p = self.ebpf.program("lab_recv")?;
        let info = p.info().ok()?;
        let n = info.run_count();
        (n > 0).then(|| info.run_time().as_nanos() as f64 / n as f64)
    }

    /// Counts until the duration passes or `stop` is set, then detaches
    /// and reports as the AF_PACKET receiver does (`ring_drops` is always 0:
    /// there is no ring).
    pub fn run(mut self, stop: &AtomicBool) -> Result<RecvReport, RecvError> {
        let cfg = self.cfg.clone();
        let mut rep = RecvReport {
            warmup_s: cfg.warmup_s,
            cooldown_s: cfg.cooldown_s,
            ..Default::default()
        };
        let t0 = sys::monotonic_ns();
        let dur_ns = cfg
            .duration
            .map_or(u64::MAX, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64);
        let mut prev = counters(&self.ebpf)?;
        let mut own_prev = self.own.read()?;
        let mut out_prev = match &mut self.output {
            Some(r) => r.read()?,
            None => IfCounters::default(),
        };
        if cfg.print_rows {
            println!("{}", crate::recv::second_header());
        }
        let mut next_tick = t0 + 1_000_000_000;
        loop {
            let now = sys::monotonic_ns();
            if now - t0 >= dur_ns || stop.load(Ordering::Relaxed) {
                break;
            }
            if now < next_tick {
                let wait = (next_tick - now).min(20_000_000);
                std::thread::sleep(Duration::from_nanos(wait));
                continue;
            }
            let c = counters(&self.ebpf)?;
            let own = self.own.read()?;
            let d = own.since(&own_prev);
            own_prev = own;
            let mut row = SecondRow {
                in_packets: c[0] - prev[0],
                in_bytes: c[1] - prev[1],
                in_errs: d.rx_errs,
                in_idrops: d.rx_drop,
                ..Default::default()
            };
            prev = c;
            if let Some(r) = &mut self.output {
                row.set_output(r, &mut out_prev)?;
            }
            if cfg.print_rows {
                println!("{}", row.line());
            }
            rep.per_second.push(row);
            next_tick += 1_000_000_000;
        }
        let c = counters(&self.ebpf)?;
        rep.frames = c[0];
        rep.other_frames = c[2];
        rep.received = c[3];
        rep.reordered = c[4];
        rep.duplicates = c[5];
        let buckets = {
            let m = self
                .ebpf
                .map("recv_latency")
                .ok_or_else(|| recv_err("recv_latency")("missing".into()))?;
            let a: PerCpuArray<&MapData, u64> =
                PerCpuArray::try_from(m).map_err(|e| recv_err("recv_latency")(e.to_string()))?;
            let mut v = vec![0u64; LAT_BUCKETS as usize];
            for (i, b) in v.iter_mut().enumerate() {
                if let Ok(per_cpu) = a.get(&(i as u32), 0) {
                    *b = per_cpu.iter().sum();
                }
            }
            v
        };
        let hist = LatencyHist::from_counts(&buckets, c[8].saturating_sub(1), c[9]);
        rep.latency = hist.summary();
        rep.latency_histogram = hist.buckets();
        rep.elapsed_s = (sys::monotonic_ns() - t0) as f64 / 1e9;
        rep.program_ns_per_frame = self.program_ns_per_frame();
        Ok(rep)
    }
}

/// Turns on the kernel's BPF run statistics (run time and count per
/// program) while the returned guard lives.
pub fn bpf_run_statistics() -> Result<std::os::fd::OwnedFd, String> {
    aya::sys::enable_stats(aya::sys::Stats::RunTime).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::{STAMP_LEN, STAMP_MAGIC};

    fn header() -> String {
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/bpf/lab_xdp.h")).unwrap()
    }

    fn define(h: &str, name: &str) -> String {
        netio::c_header::CHeader::new(h)
            .define(name)
            .unwrap_or_else(|| panic!("#define {name} missing"))
    }

    fn struct_size(h: &str, name: &str) -> usize {
        netio::c_header::CHeader::new(h).struct_size(name, &[])
    }

    #[test]
    fn header_matches() {
        let h = header();
        assert_eq!(
            define(&h, "LAB_STAMP_MAGIC"),
            format!("0x{STAMP_MAGIC:04X}")
        );
        assert_eq!(define(&h, "LAB_STAMP_LEN"), STAMP_LEN.to_string());
        assert_eq!(define(&h, "LAB_HDR_V4"), HDR_V4.to_string());
        assert_eq!(define(&h, "LAB_HDR_V6"), HDR_V6.to_string());
        assert_eq!(define(&h, "LAB_GEN_MAX_FLOWS"), "(1 << 20)");
        assert_eq!(MAX_FLOWS, 1 << 20);
        assert_eq!(define(&h, "LAB_GEN_SECONDS"), GEN_SECONDS.to_string());
        assert_eq!(define(&h, "LAB_RECV_SEQ_BITS"), "(1 << 27)");
        assert_eq!(SEQ_BITS, 1 << 27);
        assert_eq!(define(&h, "LAB_LAT_SUB"), "32");
        assert_eq!(define(&h, "LAB_LAT_EVERY"), LAT_EVERY.to_string());
        assert_eq!(define(&h, "LAB_LAT_BUCKETS"), "(64 + 58 * LAB_LAT_SUB)");
        assert_eq!(LAT_BUCKETS, 64 + 58 * 32);
        assert_eq!(struct_size(&h, "lab_gen_config"), GEN_CONFIG_SIZE);
        assert_eq!(struct_size(&h, "lab_gen_state"), GEN_STATE_SIZE);
        assert_eq!(struct_size(&h, "lab_gen_flow"), GEN_FLOW_SIZE);
        assert_eq!(struct_size(&h, "lab_recv_config"), RECV_CONFIG_SIZE);
        assert_eq!(struct_size(&h, "lab_recv_counters"), RECV_COUNTERS_SIZE);
        // The generator's header buffer and the stamp fit the flow entry.
        const { assert!(HDR_V6 <= 64 && crate::generator::MIN_FRAME_V4 == HDR_V4 + STAMP_LEN) };
    }

    #[test]
    fn the_histogram_covers_every_latency() {
        // The largest index LatencyHist gives (u64::MAX) fits the map.
        let top = 64 + (63 - 6) * 32 + 31;
        assert_eq!(top + 1, LAT_BUCKETS);
    }
}
