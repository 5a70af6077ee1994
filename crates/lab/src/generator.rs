//! The packet generator: UDP frames over a [`FlowSet`], paced in batches,
//! sent on an AF_PACKET socket with `sendmmsg` and qdisc bypass.
//!
//! Each frame carries, right after its UDP header, an 18-byte stamp: the
//! magic `0xFA57`, a 64-bit sequence number and the 64-bit CLOCK_REALTIME
//! send time in nanoseconds (big-endian), so the receiver can count loss,
//! reordering and duplicates and measure latency. IPv4 frames of 60 bytes
//! have exactly room for it; IPv6 frames need 80 bytes (shorter ones are
//! sent unstamped). Headers are precomputed per flow (IPv4 checksum
//! complete, UDP checksum as a partial sum over the pseudo-header, RFC 768,
//! and RFC 8200 section 8.1); per packet only the stamp's words are added.

use crate::flows::FlowSet;
use crate::sys;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// First two bytes of every stamp.
pub const STAMP_MAGIC: u16 = 0xFA57;
/// Length of the stamp in the UDP payload.
pub const STAMP_LEN: usize = 18;
/// Smallest frame (without FCS) the generator builds, IPv4.
pub const MIN_FRAME_V4: usize = 60;
/// Smallest IPv6 frame (no room for a stamp).
pub const MIN_FRAME_V6: usize = 62;
/// Largest frame (without FCS).
pub const MAX_FRAME: usize = 1514;
/// Flows whose headers are precomputed; beyond this they are built per packet.
const CACHED_FLOWS: u64 = 65_536;

/// Generator errors.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    /// Frame length out of range for the family.
    #[error("frame length {len} out of range {min}..={max}")]
    FrameLen {
        /// Requested length.
        len: usize,
        /// Smallest allowed.
        min: usize,
        /// Largest allowed.
        max: usize,
    },
    /// The live-frames generator could not load or run.
    #[error("live frames: {what}: {why}")]
    Live {
        /// What was being done.
        what: String,
        /// Why it failed.
        why: String,
    },
    /// A socket call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The system error.
        source: std::io::Error,
    },
}

fn sum_words(bytes: &[u8]) -> u32 {
    let mut s = 0u32;
    let mut chunks = bytes.chunks_exact(2);
    for c in &mut chunks {
        s += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        s += u32::from(*last) << 8;
    }
    s
}

fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// Builds frames for one flow set and frame length.
#[derive(Debug, Clone)]
pub struct FrameBuilder {
    flows: FlowSet,
    frame_len: usize,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    hdr_len: usize,
    stamped: bool,
    /// Every `n`-th flow (index `n - 1`, `2n - 1`, ...) is sent with TTL /
    /// hop limit 1, so a router must answer it with ICMP time exceeded.
    expiring_every: Option<u64>,
    /// Precomputed headers and UDP partial sums, one per cached flow.
    cache: Vec<([u8; 62], u32)>,
}

impl FrameBuilder {
    /// A builder for `frame_len`-byte frames (without FCS) from `src_mac` to `dst_mac`.
    pub fn new(
        flows: FlowSet,
        frame_len: usize,
        src_mac: [u8; 6],
        dst_mac: [u8; 6],
    ) -> Result<Self, GenError> {
        let min = if flows.is_v6() {
            MIN_FRAME_V6
        } else {
            MIN_FRAME_V4
        };
        if !(min..=MAX_FRAME).contains(&frame_len) {
            return Err(GenError::FrameLen {
                len: frame_len,
                min,
                max: MAX_FRAME,
            });
        }
        let hdr_len = if flows.is_v6() { 62 } else { 42 };
        let cached = flows.len().min(CACHED_FLOWS);
        let mut b = Self {
            flows,
            frame_len,
            src_mac,
            dst_mac,
            hdr_len,
            stamped: frame_len - hdr_len >= STAMP_LEN,
            expiring_every: None,
            cache: Vec::new(),
        };
        b.cache = (0..cached).map(|i| b.header(i)).collect();
        Ok(b)
    }

    /// Frame length in bytes.
    pub fn frame_len(&self) -> usize {
        self.frame_len
    }

    /// Do frames carry a stamp?
    pub fn stamped(&self) -> bool {
        self.stamped
    }

    /// Sends one flow in `n` (`n` >= 1; so `100` is 1% of the packets)
    /// with TTL / hop limit 1: the exception-path load of a router.
    pub fn with_expiring_every(mut self, n: u64) -> Self {
        self.expiring_every = Some(n.max(1));
        let cached = self.cache.len() as u64;
        self.cache = (0..cached).map(|i| self.header(i)).collect();
        self
    }

    /// Flow `i`'s TTL / hop limit.
    fn ttl(&self, i: u64) -> u8 {
        match self.expiring_every {
            Some(n) if i % n == n - 1 => 1,
            _ => 64,
        }
    }

    /// Do both build the same frames (flows, length, addresses, TTLs)?
    pub fn same_frames(&self, other: &FrameBuilder) -> bool {
        self.expiring_every == other.expiring_every
            && self.frame_len == other.frame_len
            && self.src_mac == other.src_mac
            && self.dst_mac == other.dst_mac
            && self.flows == other.flows
    }

    /// The flows.
    pub fn flows(&self) -> &FlowSet {
        &self.flows
    }

    /// Bytes of headers before the stamp: 42 (IPv4) or 62 (IPv6).
    pub fn header_len(&self) -> usize {
        self.hdr_len
    }

    /// The headers of flow `i` and the UDP checksum's partial sum over the
    /// pseudo-header and UDP header (checksum field zero, payload zero).
    pub fn header(&self, i: u64) -> ([u8; 62], u32) {
        let t = self.flows.get(i);
        let mut h = [0u8; 62];
        h[0..6].copy_from_slice(&self.dst_mac);
        h[6..12].copy_from_slice(&self.src_mac);
        let udp_len = (self.frame_len - self.hdr_len + 8) as u16;
        let (udp_off, pseudo) = match (t.src, t.dst) {
            (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => {
                h[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
                let ip = &mut h[14..34];
                ip[0] = 0x45;
                ip[2..4].copy_from_slice(&(udp_len + 20).to_be_bytes());
                ip[6] = 0x40; // DF
                ip[8] = self.ttl(i);
                ip[9] = 17;
                ip[12..16].copy_from_slice(&s.octets());
                ip[16..20].copy_from_slice(&d.octets());
                let c = !fold(sum_words(ip));
                ip[10..12].copy_from_slice(&c.to_be_bytes());
                let pseudo =
                    sum_words(&s.octets()) + sum_words(&d.octets()) + 17 + u32::from(udp_len);
                (34, pseudo)
            }
            (s, d) => {
                let (s, d) = match (s, d) {
                    (std::net::IpAddr::V6(s), std::net::IpAddr::V6(d)) => (s, d),
                    // FlowSet guarantees one family; map IPv4 into IPv6 otherwise.
                    (s, d) => (to_v6(s), to_v6(d)),
                };
                h[12..14].copy_from_slice(&0x86DDu16.to_be_bytes());
                let ip = &mut h[14..54];
                ip[0] = 0x60;
                ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
                ip[6] = 17;
                ip[7] = self.ttl(i);
                ip[8..24].copy_from_slice(&s.octets());
                ip[24..40].copy_from_slice(&d.octets());
                let pseudo =
                    sum_words(&s.octets()) + sum_words(&d.octets()) + 17 + u32::from(udp_len);
                (54, pseudo)
            }
        };
        h[udp_off..udp_off + 2].copy_from_slice(&t.sport.to_be_bytes());
        h[udp_off + 2..udp_off + 4].copy_from_slice(&t.dport.to_be_bytes());
        h[udp_off + 4..udp_off + 6].copy_from_slice(&udp_len.to_be_bytes());
        let partial = pseudo + sum_words(&h[udp_off..udp_off + 8]);
        (h, partial)
    }

    /// Writes packet `seq` (flow `seq mod flows`) with send time `ts_ns`
    /// into `buf`, whose bytes past the headers and stamp must be zero.
    pub fn write(&self, buf: &mut [u8], seq: u64, ts_ns: u64) {
        let flow = seq % self.flows.len();
        let built;
        let (h, partial) = match self.cache.get(flow as usize) {
            Some((h, p)) => (h, *p),
            None => {
                built = self.header(flow);
                (&built.0, built.1)
            }
        };
        let hl = self.hdr_len;
        buf[..hl].copy_from_slice(&h[..hl]);
        let mut sum = partial;
        if self.stamped {
            let st = &mut buf[hl..hl + STAMP_LEN];
            st[0..2].copy_from_slice(&STAMP_MAGIC.to_be_bytes());
            st[2..10].copy_from_slice(&seq.to_be_bytes());
            st[10..18].copy_from_slice(&ts_ns.to_be_bytes());
            sum += sum_words(st);
        }
        let mut c = !fold(sum);
        if c == 0 {
            c = 0xffff; // RFC 768: a computed zero is sent as all ones
        }
        buf[hl - 2..hl].copy_from_slice(&c.to_be_bytes());
    }
}

fn to_v6(a: std::net::IpAddr) -> std::net::Ipv6Addr {
    match a {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        std::net::IpAddr::V6(v6) => v6,
    }
}

/// A generator packet as the receiver sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Sequence number.
    pub seq: u64,
    /// Send time, CLOCK_REALTIME ns.
    pub ts_ns: u64,
}

/// Finds the generator's stamp in an Ethernet frame (IPv4 or IPv6, UDP,
/// no extension headers); `None` for any other frame.
pub fn parse_stamp(frame: &[u8]) -> Option<Stamp> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let payload = match ethertype {
        0x0800 => {
            let ihl = usize::from(frame.get(14)? & 0x0f) * 4;
            if *frame.get(23)? != 17 || ihl < 20 {
                return None;
            }
            14 + ihl + 8
        }
        0x86DD => {
            if *frame.get(20)? != 17 {
                return None;
            }
            62
        }
        _ => return None,
    };
    let st = frame.get(payload..payload + STAMP_LEN)?;
    if u16::from_be_bytes([st[0], st[1]]) != STAMP_MAGIC {
        return None;
    }
    let seq = u64::from_be_bytes(st[2..10].try_into().ok()?);
    let ts_ns = u64::from_be_bytes(st[10..18].try_into().ok()?);
    Some(Stamp { seq, ts_ns })
}

/// What to send and how fast.
#[derive(Debug, Clone)]
pub struct GenConfig {
    /// Interface to send on (in the calling thread's namespace).
    pub ifname: String,
    /// Frame builder (flows, length, MACs).
    pub frames: FrameBuilder,
    /// Offered load in packets per second; `None` sends as fast as possible.
    pub rate_pps: Option<f64>,
    /// Stop after this many packets.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Frames per `sendmmsg`.
    pub batch: usize,
}

/// What the generator did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GenReport {
    /// Packets the generator tried to send (sequence numbers used).
    pub attempted: u64,
    /// Packets the kernel accepted.
    pub sent: u64,
    /// Packets refused with ENOBUFS/EAGAIN (a full veth ring).
    pub backpressure: u64,
    /// Seconds from the first to the last send.
    pub elapsed_s: f64,
    /// Offered load asked for (pps), if any.
    pub target_pps: Option<f64>,
    /// attempted / elapsed.
    pub attempted_pps: f64,
    /// sent / elapsed.
    pub sent_pps: f64,
    /// Packets sent in each whole second.
    pub per_second_sent: Vec<u64>,
}

impl GenReport {
    /// Did the generator fall short of the offered load by more than `tol`?
    pub fn limited(&self, tol: f64) -> bool {
        self.target_pps
            .is_some_and(|t| self.attempted_pps < t * (1.0 - tol))
    }
}

/// A paced generator that fell behind (its core was taken from it) sends
/// at most this many frames back to back to catch up: half of what a veth
/// ring holds (256), so a late generator never overflows the next hop's
/// ring with a burst the offered rate does not have. The time it lost is
/// lost (its attempted rate shows it).
pub const MAX_CATCH_UP_FRAMES: u64 = 128;

/// How many frames a generator pacing `rate` frames per second from
/// `*origin` may have attempted by `now` (ns); moves `*origin` forward when
/// that would be more than [`MAX_CATCH_UP_FRAMES`] ahead of `attempted`.
pub fn paced_allowance(now: u64, origin: &mut u64, attempted: u64, rate: f64) -> u64 {
    let allowed = ((now.saturating_sub(*origin)) as f64 * rate / 1e9) as u64 + 1;
    if allowed > attempted + MAX_CATCH_UP_FRAMES {
        let back = ((attempted + MAX_CATCH_UP_FRAMES - 1) as f64 * 1e9 / rate) as u64;
        *origin = now.saturating_sub(back);
        return attempted + MAX_CATCH_UP_FRAMES;
    }
    allowed
}

/// Sends until the count or duration is reached or `stop` is set, in the
/// calling thread (whose namespace and CPU the caller chose).
pub fn run(cfg: &GenConfig, stop: &AtomicBool) -> Result<GenReport, GenError> {
    let io = |what: &str| {
        let what = what.to_string();
        move |source| GenError::Io { what, source }
    };
    let len = cfg.frames.frame_len();
    let mut tx = sys::PacketTx::open(&cfg.ifname, cfg.batch, len)
        .map_err(io(&format!("AF_PACKET socket on {}", cfg.ifname)))?;
    let batch = tx.batch() as u64;
    let count = cfg.count.unwrap_or(u64::MAX);
    let dur_ns = cfg
        .duration
        .map_or(u64::MAX, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64);
    let mut rep = GenReport {
        target_pps: cfg.rate_pps,
        ..Default::default()
    };
    let t0 = sys::monotonic_ns();
    let mut origin = t0;
    let mut now = t0;
    let mut sec_sent = 0u64;
    let mut sec_end = t0 + 1_000_000_000;
    while rep.attempted < count && now - t0 < dur_ns && !stop.load(Ordering::Relaxed) {
        now = sys::monotonic_ns();
        if now >= sec_end {
            rep.per_second_sent.push(sec_sent);
            sec_sent = 0;
            sec_end += 1_000_000_000;
        }
        let allowed = match cfg.rate_pps {
            Some(r) => paced_allowance(now, &mut origin, rep.attempted, r),
            None => u64::MAX,
        }
        .min(count);
        if rep.attempted >= allowed {
            // Ahead of schedule: sleep when the next packet is far off.
            if let Some(r) = cfg.rate_pps {
                let wait_ns = ((rep.attempted + 1) as f64 * 1e9 / r) as u64 + origin;
                if wait_ns > now + 200_000 {
                    std::thread::sleep(Duration::from_nanos(wait_ns - now - 100_000));
                }
            }
            std::hint::spin_loop();
            continue;
        }
        let n = (allowed - rep.attempted).min(batch) as usize;
        let ts = sys::realtime_ns();
        for j in 0..n {
            cfg.frames
                .write(tx.slot_mut(j), rep.attempted + j as u64, ts);
        }
        let mut first = 0;
        while first < n {
            match tx.send(first, n - first, len).map_err(io("sendmmsg"))? {
                sys::TxOutcome::Sent(k) => {
                    rep.sent += k as u64;
                    sec_sent += k as u64;
                    first += k;
                    if first < n {
                        // sendmmsg stopped early: the next frame was refused.
                        rep.backpressure += 1;
                        first += 1;
                    }
                }
                sys::TxOutcome::Backpressure => {
                    rep.backpressure += 1;
                    first += 1;
                }
            }
        }
        rep.attempted += n as u64;
    }
    let end = sys::monotonic_ns();
    if sec_sent > 0 && end > sec_end - 1_000_000_000 + 500_000_000 {
        rep.per_second_sent.push(sec_sent);
    }
    rep.elapsed_s = (end - t0) as f64 / 1e9;
    if rep.elapsed_s > 0.0 {
        rep.attempted_pps = rep.attempted as f64 / rep.elapsed_s;
        rep.sent_pps = rep.sent as f64 / rep.elapsed_s;
    }
    Ok(rep)
}

/// Sends exactly the packets `seqs` (in that order, a frame each, one at
/// a time) on `ifname`: a known pattern of loss, reordering and
/// duplicates for checking receivers. Returns how many the kernel took.
pub fn send_sequence(ifname: &str, frames: &FrameBuilder, seqs: &[u64]) -> Result<u64, GenError> {
    let len = frames.frame_len();
    let mut tx = sys::PacketTx::open(ifname, 1, len).map_err(|source| GenError::Io {
        what: format!("AF_PACKET socket on {ifname}"),
        source,
    })?;
    let mut sent = 0;
    for &seq in seqs {
        let slot = tx.slot_mut(0);
        slot.fill(0);
        frames.write(slot, seq, sys::realtime_ns());
        let out = tx.send(0, 1, len).map_err(|source| GenError::Io {
            what: "sendmmsg".into(),
            source,
        })?;
        if let sys::TxOutcome::Sent(k) = out {
            sent += k as u64;
        }
    }
    Ok(sent)
}

/// The theoretical packet rate of a link of `bits_per_s` for `frame_len`
/// frames (without FCS): each adds FCS (4), preamble and gap (20 bytes).
pub fn line_rate_pps(bits_per_s: f64, frame_len: usize) -> f64 {
    bits_per_s / (((frame_len + 24) * 8) as f64)
}

/// Parses a rate: `500000`, `500k`, `1.2M`, or `50%` of `line_pps`.
pub fn parse_rate(text: &str, line_pps: f64) -> Option<f64> {
    let t = text.trim();
    let (num, mult) = if let Some(p) = t.strip_suffix('%') {
        (p, line_pps / 100.0)
    } else if let Some(p) = t.strip_suffix(['k', 'K']) {
        (p, 1e3)
    } else if let Some(p) = t.strip_suffix(['m', 'M']) {
        (p, 1e6)
    } else {
        (t, 1.0)
    };
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v > 0.0).then_some(v * mult)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};

    #[test]
    fn a_late_generator_catches_up_by_at_most_half_a_ring() {
        let rate = 50_000.0;
        let mut origin = 0u64;
        // On time: one frame every 20 us.
        assert_eq!(paced_allowance(1_000_000, &mut origin, 50, rate), 51);
        assert_eq!(origin, 0);
        // 10 ms late (500 frames due): 128 now, and the schedule restarts
        // from there, so the next 20 us allow one more, not a second burst.
        let now = 11_000_000;
        assert_eq!(
            paced_allowance(now, &mut origin, 51, rate),
            51 + MAX_CATCH_UP_FRAMES
        );
        assert!(origin > 0);
        let next = paced_allowance(now + 20_000, &mut origin, 51 + MAX_CATCH_UP_FRAMES, rate);
        assert_eq!(next, 51 + MAX_CATCH_UP_FRAMES + 1);
    }

    fn flows(v6: bool) -> FlowSet {
        if v6 {
            FlowSet::parse("[2001:2::1]:1000-[2001:2::3]:1001", "[2001:2:0:8000::1]:9").unwrap()
        } else {
            FlowSet::parse(
                "198.18.10.1:1000-198.18.10.3:1001",
                "198.19.10.1:9-198.19.10.2",
            )
            .unwrap()
        }
    }

    fn check(v6: bool, len: usize) {
        let fl = flows(v6);
        let b = FrameBuilder::new(fl.clone(), len, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).unwrap();
        for seq in [0u64, 1, 5, 11, 12, 1 << 40, u64::MAX] {
            let mut buf = vec![0u8; len];
            let ts = 0x1234_5678_9abc_def0 ^ seq;
            b.write(&mut buf, seq, ts);
            let p = SlicedPacket::from_ethernet(&buf).expect("parses");
            let t = fl.get(seq);
            let (src, dst): (std::net::IpAddr, std::net::IpAddr) = match p.net.unwrap() {
                NetSlice::Ipv4(ip) => {
                    let h = ip.header();
                    assert_eq!(h.to_header().calc_header_checksum(), h.header_checksum());
                    (h.source_addr().into(), h.destination_addr().into())
                }
                NetSlice::Ipv6(ip) => (
                    ip.header().source_addr().into(),
                    ip.header().destination_addr().into(),
                ),
                other => panic!("not an IP packet: {other:?}"),
            };
            assert_eq!((src, dst), (t.src, t.dst));
            let TransportSlice::Udp(u) = p.transport.unwrap() else {
                panic!("not UDP")
            };
            assert_eq!((u.source_port(), u.destination_port()), (t.sport, t.dport));
            let want = match (t.src, t.dst) {
                (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => u
                    .to_header()
                    .calc_checksum_ipv4_raw(s.octets(), d.octets(), u.payload())
                    .unwrap(),
                (std::net::IpAddr::V6(s), std::net::IpAddr::V6(d)) => u
                    .to_header()
                    .calc_checksum_ipv6_raw(s.octets(), d.octets(), u.payload())
                    .unwrap(),
                _ => unreachable!(),
            };
            assert_eq!(
                u.checksum(),
                want,
                "UDP checksum v6={v6} len={len} seq={seq}"
            );
            if b.stamped() {
                assert_eq!(parse_stamp(&buf), Some(Stamp { seq, ts_ns: ts }));
            } else {
                assert_eq!(parse_stamp(&buf), None);
            }
        }
    }

    #[test]
    fn frames_have_right_headers_checksums_and_stamps() {
        for len in [60, 61, 64, 128, 1514] {
            check(false, len);
        }
        for len in [62, 79, 80, 81, 1514] {
            check(true, len);
        }
    }

    #[test]
    fn one_flow_in_n_expires() {
        let b = FrameBuilder::new(flows(false), 60, [0; 6], [0; 6])
            .unwrap()
            .with_expiring_every(4);
        let mut ttls = Vec::new();
        for seq in 0..8u64 {
            let mut buf = vec![0u8; 60];
            b.write(&mut buf, seq, 0);
            let ip = etherparse::Ipv4HeaderSlice::from_slice(&buf[14..]).unwrap();
            assert_eq!(ip.to_header().calc_header_checksum(), ip.header_checksum());
            ttls.push(ip.ttl());
        }
        assert_eq!(ttls, [64, 64, 64, 1, 64, 64, 64, 1]);
        let b6 = FrameBuilder::new(flows(true), 80, [0; 6], [0; 6])
            .unwrap()
            .with_expiring_every(2);
        let mut buf = vec![0u8; 80];
        b6.write(&mut buf, 1, 0);
        assert_eq!(buf[14 + 7], 1, "hop limit");
    }

    #[test]
    fn frame_length_limits() {
        let b = |v6, len| FrameBuilder::new(flows(v6), len, [0; 6], [0; 6]).is_ok();
        assert!(!b(false, 59) && b(false, 60) && b(false, 1514) && !b(false, 1515));
        assert!(!b(true, 61) && b(true, 62));
    }

    #[test]
    fn rates_parse() {
        assert_eq!(parse_rate("500k", 0.0), Some(500_000.0));
        assert_eq!(parse_rate("1.5M", 0.0), Some(1_500_000.0));
        assert_eq!(parse_rate("50%", 1000.0), Some(500.0));
        assert_eq!(parse_rate("-3", 1.0), None);
        assert!((line_rate_pps(10e9, 60) - 14_880_952.38).abs() < 1.0);
    }
}
