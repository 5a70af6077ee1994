//! The kernel-differential oracle: fastfwd must forward as the kernel it
//! mirrors would. Two identical duts side by side, each between its own
//! generator port and sink: `dk` forwards with the kernel, `df` with
//! fastfwd (one engine at a time) mirroring its own kernel. Each scenario,
//! drawn from a seed, builds a random but valid routing state in both
//! (unicast, multipath with weights, blackhole, unreachable, prohibit and
//! throw routes, several metrics for a prefix, `ip route append`, nexthop
//! objects and groups, default routes; routes in tables 100 and 200 and
//! up to four rules per family selecting by source, destination and input
//! interface, possibly inverted, that look up a table (possibly with
//! `suppress_prefixlength`), discard, jump or do nothing; IPv4 and
//! IPv6), waits until
//! `fastfwd fib audit` finds df's tables equal to its kernel, then sends
//! the same generated packets into both duts (destinations inside the
//! scenario's prefixes and around them, hop limits 64 and 1) and compares
//! every packet's fate:
//!
//! - forwarded: the IP packet as it left (TTL, checksum, every byte) and
//!   the next hop's MAC; for a multipath route the kernel and fastfwd
//!   hash flows differently, so the two MACs must both belong to the
//!   kernel's matched route (`ip route get fibmatch`);
//! - an ICMP error back to the generator: its type and code;
//! - dropped: nothing seen.
//!
//! Seeds are printed with every difference (`FASTFWD_ORACLE_SEED=N` runs
//! one; `FASTFWD_ORACLE_SCENARIOS` sets how many per engine). Needs root;
//! skips with a message otherwise, fails under CI=true.

use netio::sys::lab::{PacketRxRing, PacketTx};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DUT_D0_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x10];
const DUT_D1_MAC: [u8; 6] = [2, 0, 0, 0, 1, 0x10];
const GEN_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x08];
const SINK_MAC: [u8; 6] = [2, 0, 0, 0, 1, 0x08];
/// The generator's sources: 198.18.0.S and 2001:2::S for S in 100..=250,
/// one after the other, each with a permanent neighbour entry in both
/// duts. The kernel rate-limits the ICMP errors of unroutable packets per
/// source (net.ipv4.route.error_cost, a host-wide setting): one source
/// sees a burst of 5 and then one a second, so the probes spread theirs.
const SOURCES: std::ops::RangeInclusive<u16> = 100..=250;

fn source4(s: u16) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, s as u8)
}

fn source6(s: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, s)
}

/// Source `s` in the family of `dst`, for a report.
fn source_text(dst: IpAddr, s: u16) -> String {
    match dst {
        IpAddr::V4(_) => source4(s).to_string(),
        IpAddr::V6(_) => source6(s).to_string(),
    }
}
/// Gateways on d1's subnets, each with a permanent neighbour entry.
const GATEWAYS: usize = 6;
/// Marks the generated packets' UDP payload.
const MAGIC: [u8; 4] = *b"ffdk";

fn gateway4(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 19, 0, 101 + i as u8)
}

fn gateway6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 2, 0, 0x8000, 0, 0, 0, 0x101 + i as u16)
}

fn gateway_mac(i: usize) -> [u8; 6] {
    [2, 0, 0, 0, 1, 0x65 + i as u8]
}

fn mac_text(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn sh(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run")
}

fn ok(args: &[&str]) -> String {
    let o = sh(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// splitmix64: a small seeded generator, the same draws on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// One address family's part of a scenario.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

impl Family {
    /// Where the scenario's prefixes live: 10.0.0.0/8, 2001:db8::/32.
    fn space(self) -> (u128, u8, u8) {
        match self {
            Family::V4 => (0x0a00_0000, 8, 32),
            Family::V6 => (0x2001_0db8u128 << 96, 32, 128),
        }
    }

    fn addr(self, v: u128) -> IpAddr {
        match self {
            Family::V4 => IpAddr::V4(Ipv4Addr::from(v as u32)),
            Family::V6 => IpAddr::V6(Ipv6Addr::from(v)),
        }
    }

    fn gateway(self, i: usize) -> IpAddr {
        match self {
            Family::V4 => IpAddr::V4(gateway4(i)),
            Family::V6 => IpAddr::V6(gateway6(i)),
        }
    }
}

fn mask(bits: u8, len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        (u128::MAX << (128 - u32::from(len))) >> (128 - u32::from(bits))
    }
}

/// A scenario: the `ip -batch` lines that build it (routes of every
/// table, then each family's rules, which `ip` needs told the family), and
/// its prefixes (value, length, family) for drawing destinations.
struct Scenario {
    seed: u64,
    batch: String,
    rules: [String; 2],
    /// The VRF, when drawn: `ip -batch` lines that make d0 a member of a
    /// VRF device with table [`VRF_TABLE`] and fill that table (applied
    /// where the kernel has VRF devices).
    vrf: String,
    prefixes: Vec<(u128, u8, Family)>,
}

impl Scenario {
    /// Everything, as one text for a report.
    fn text(&self) -> String {
        format!(
            "{}-4 rules:\n{}-6 rules:\n{}VRF:\n{}",
            self.batch, self.rules[0], self.rules[1], self.vrf
        )
    }
}

/// The policy tables a scenario fills, and the priority of its first rule.
const POLICY_TABLES: [u32; 2] = [100, 200];
const FIRST_RULE: u32 = 100;
/// The table of the VRF device a scenario may put d0 in.
const VRF_TABLE: u32 = 300;

/// Sources a `from` selector picks among (the generator's are 198.18.0.100
/// to .250 and 2001:2::64 to ::fa).
fn source_prefix(fam: Family, r: &mut Rng) -> &'static str {
    let v4 = [
        "198.18.0.128/25",
        "198.18.0.192/26",
        "198.18.0.0/24",
        "198.18.0.100/30",
    ];
    let v6 = [
        "2001:2::80/121",
        "2001:2::c0/122",
        "2001:2::/64",
        "2001:2::64/126",
    ];
    let set = if fam == Family::V4 { v4 } else { v6 };
    set[r.below(set.len() as u64) as usize]
}

/// A prefix near the scenario's (`own`, of family `fam`): one of them, one
/// inside one, or one anywhere in the family's space.
fn near_prefix(r: &mut Rng, fam: Family, own: &[(u128, u8)]) -> (u128, u8) {
    let (base, base_len, bits) = fam.space();
    let noise = u128::from(r.next()) | (u128::from(r.next()) << 64);
    let (v, len) = match own.get(r.below(own.len() as u64 * 3 / 2 + 1) as usize) {
        Some(&(v, l)) if r.chance(50) => (v, l),
        Some(&(v, l)) if l < bits => (
            v | (noise & !mask(bits, l)),
            l + 1 + r.below(u64::from(bits - l).min(16)) as u8,
        ),
        _ => (
            base | (noise & !mask(bits, base_len)),
            base_len + r.below(u64::from(bits - base_len) + 1) as u8,
        ),
    };
    (v & mask(bits, len), len)
}

fn scenario(seed: u64) -> Scenario {
    let mut r = Rng(seed);
    let mut batch = String::new();
    let mut prefixes = Vec::new();
    let mut nexthop_id = 100u32;
    for fam in [Family::V4, Family::V6] {
        let (base, base_len, bits) = fam.space();
        // Nexthop objects this family's routes may name: singles, a group.
        let mut objects = Vec::new();
        if r.chance(40) {
            let first = nexthop_id;
            for _ in 0..2 {
                let g = r.below(GATEWAYS as u64) as usize;
                let _ = writeln!(
                    batch,
                    "nexthop add id {nexthop_id} via {} dev d1",
                    fam.gateway(g)
                );
                objects.push(nexthop_id);
                nexthop_id += 1;
            }
            let _ = writeln!(
                batch,
                "nexthop add id {nexthop_id} group {first}/{}",
                first + 1
            );
            objects.push(nexthop_id);
            nexthop_id += 1;
        }
        let mut used: BTreeSet<(u128, u8, u32)> = BTreeSet::new();
        // What each (prefix, metric) already has: the kernel refuses to
        // append a route equal to one it holds.
        let mut lines: BTreeSet<String> = BTreeSet::new();
        let routes = 4 + r.below(12);
        for _ in 0..routes {
            // Nest under an earlier prefix half the time.
            let (value, len) = match prefixes
                .iter()
                .filter(|p: &&(u128, u8, Family)| p.2 == fam)
                .nth(r.below(prefixes.len() as u64 + 1) as usize)
            {
                Some(&(v, l, _)) if r.chance(50) && l < bits => {
                    let len = l + 1 + r.below(u64::from(bits - l)) as u8;
                    (v | (u128::from(r.next()) & !mask(bits, l)), len)
                }
                _ => {
                    let len = base_len + r.below(u64::from(bits - base_len) + 1) as u8;
                    (
                        base | (u128::from(r.next()) | (u128::from(r.next()) << 64))
                            & !mask(bits, base_len),
                        len,
                    )
                }
            };
            let value = value & mask(bits, len);
            let metric = [0u32, 0, 0, 10, 20][r.below(5) as usize];
            let prefix = format!("{}/{len}", fam.addr(value));
            let again = used.contains(&(value, len, metric));
            let verb = if again && fam == Family::V4 && r.chance(50) {
                "append"
            } else if again {
                continue;
            } else {
                "add"
            };
            used.insert((value, len, metric));
            let g = |r: &mut Rng| fam.gateway(r.below(GATEWAYS as u64) as usize);
            // Multipath members must come last on the line.
            let opts = format!("metric {metric} proto static");
            let what = match r.below(100) {
                0..60 => format!("{prefix} via {} dev d1 {opts}", g(&mut r)),
                60..72 => {
                    let (a, b) = (g(&mut r), g(&mut r));
                    if a == b {
                        format!("{prefix} via {a} dev d1 {opts}")
                    } else {
                        format!(
                            "{prefix} {opts} nexthop via {a} dev d1 weight {} nexthop via {b} dev d1",
                            1 + r.below(3)
                        )
                    }
                }
                72..77 if verb == "add" => format!("blackhole {prefix} {opts}"),
                77..82 if verb == "add" => format!("unreachable {prefix} {opts}"),
                82..87 if verb == "add" => format!("prohibit {prefix} {opts}"),
                87..92 if verb == "add" => format!("throw {prefix} {opts}"),
                _ if !objects.is_empty() => {
                    format!(
                        "{prefix} nhid {} {opts}",
                        objects[r.below(objects.len() as u64) as usize]
                    )
                }
                _ => format!("{prefix} via {} dev d1 {opts}", g(&mut r)),
            };
            if !lines.insert(what.clone()) {
                continue;
            }
            let _ = writeln!(batch, "route {verb} {what}");
            prefixes.push((value, len, fam));
        }
        if r.chance(30) {
            let _ = writeln!(
                batch,
                "route add {} via {} dev d1 metric 50 proto static",
                if fam == Family::V4 {
                    "0.0.0.0/0"
                } else {
                    "::/0"
                },
                fam.gateway(r.below(GATEWAYS as u64) as usize)
            );
        }
    }
    let mut rules = [String::new(), String::new()];
    for (k, fam) in [Family::V4, Family::V6].into_iter().enumerate() {
        if !r.chance(50) {
            continue;
        }
        let own: Vec<(u128, u8)> = prefixes
            .iter()
            .filter(|p| p.2 == fam)
            .map(|p| (p.0, p.1))
            .collect();
        let near = |r: &mut Rng| near_prefix(r, fam, &own);
        for t in POLICY_TABLES {
            let mut used = BTreeSet::new();
            for _ in 0..r.below(5) {
                let (v, len) = near(&mut r);
                if !used.insert((v, len)) {
                    continue;
                }
                let prefix = format!("{}/{len}", fam.addr(v));
                let gw = fam.gateway(r.below(GATEWAYS as u64) as usize);
                let what = match r.below(100) {
                    0..55 => format!("{prefix} via {gw} dev d1"),
                    55..65 => format!("blackhole {prefix}"),
                    65..75 => format!("unreachable {prefix}"),
                    75..85 => format!("prohibit {prefix}"),
                    _ => format!("throw {prefix}"),
                };
                let _ = writeln!(batch, "route add {what} table {t} proto static");
                prefixes.push((v, len, fam));
            }
        }
        let n = 1 + r.below(4) as u32;
        for i in 0..n {
            let pref = FIRST_RULE + 10 * i;
            let mut line = String::from("rule add ");
            if r.chance(10) {
                line.push_str("not ");
            }
            if r.chance(35) {
                let _ = write!(line, "from {} ", source_prefix(fam, &mut r));
            }
            if r.chance(35) {
                let (v, len) = near(&mut r);
                let _ = write!(line, "to {}/{len} ", fam.addr(v));
                prefixes.push((v, len, fam));
            }
            if r.chance(15) {
                let _ = write!(line, "iif {} ", if r.chance(70) { "d0" } else { "d1" });
            }
            let lookup = |t: &str, r: &mut Rng| {
                if r.chance(20) {
                    let n = [0u32, 8, 16, 24, 32, 48, 64][r.below(7) as usize];
                    format!("lookup {t} suppress_prefixlength {n}")
                } else {
                    format!("lookup {t}")
                }
            };
            let action = match r.below(100) {
                0..35 => lookup("100", &mut r),
                35..55 => lookup("200", &mut r),
                55..62 => lookup("main", &mut r),
                62..70 => "prohibit".to_string(),
                70..78 => "blackhole".to_string(),
                78..86 => "unreachable".to_string(),
                86..94 => format!("goto {}", pref + 10 * (1 + r.below(2) as u32)),
                _ => "nop".to_string(),
            };
            let _ = writeln!(rules[k], "{line}{action} pref {pref}");
        }
    }
    // A VRF holding d0, drawn last so the rest of a scenario is the same
    // on a kernel without VRF devices: its table has routes near the
    // scenario's (leaking to d1's gateways, or discarding), and often the
    // unreachable default that keeps its members' packets out of main.
    let mut vrf = String::new();
    if r.chance(30) {
        let _ = writeln!(vrf, "link add ffblue type vrf table {VRF_TABLE}");
        let _ = writeln!(vrf, "link set ffblue up");
        let _ = writeln!(vrf, "link set d0 master ffblue");
        for fam in [Family::V4, Family::V6] {
            let own: Vec<(u128, u8)> = prefixes
                .iter()
                .filter(|p| p.2 == fam)
                .map(|p| (p.0, p.1))
                .collect();
            let mut used = BTreeSet::new();
            for _ in 0..r.below(6) {
                let (v, len) = near_prefix(&mut r, fam, &own);
                if !used.insert((v, len)) {
                    continue;
                }
                let prefix = format!("{}/{len}", fam.addr(v));
                let gw = fam.gateway(r.below(GATEWAYS as u64) as usize);
                let what = match r.below(100) {
                    0..70 => format!("{prefix} via {gw} dev d1"),
                    70..80 => format!("blackhole {prefix}"),
                    80..90 => format!("unreachable {prefix}"),
                    _ => format!("prohibit {prefix}"),
                };
                let _ = writeln!(vrf, "route add {what} table {VRF_TABLE} proto static");
                prefixes.push((v, len, fam));
            }
            if r.chance(60) {
                let default = if fam == Family::V4 {
                    "0.0.0.0/0"
                } else {
                    "::/0"
                };
                let _ = writeln!(
                    vrf,
                    "route add unreachable {default} table {VRF_TABLE} metric 4278198272"
                );
            }
        }
    }
    Scenario {
        seed,
        batch,
        rules,
        vrf,
        prefixes,
    }
}

/// One generated packet: where it goes and its hop limit.
#[derive(Clone, Copy)]
struct Probe {
    dst: IpAddr,
    ttl: u8,
}

/// The id (UDP source port) of the `n`th probe of a run.
fn probe_id(n: usize) -> u16 {
    1000 + (n % 60_000) as u16
}

/// The source of the `n`th probe of a run.
fn source_of(n: usize) -> u16 {
    let span = usize::from(SOURCES.end() - SOURCES.start()) + 1;
    SOURCES.start() + (n % span) as u16
}

fn probes(s: &Scenario) -> Vec<Probe> {
    let mut r = Rng(s.seed ^ 0x5eed);
    let mut out = Vec::new();
    for fam in [Family::V4, Family::V6] {
        let (base, base_len, bits) = fam.space();
        let own: Vec<_> = s.prefixes.iter().filter(|p| p.2 == fam).collect();
        for _ in 0..24 {
            let noise = u128::from(r.next()) | (u128::from(r.next()) << 64);
            let v = match own.get(r.below(own.len() as u64 * 4 / 3 + 1) as usize) {
                Some(&&(v, l, _)) => v | (noise & !mask(bits, l)),
                None => base | (noise & !mask(bits, base_len)),
            } & mask(bits, bits);
            let ttl = if r.chance(15) { 1 } else { 64 };
            out.push(Probe {
                dst: fam.addr(v),
                ttl,
            });
        }
    }
    out
}

/// The frame for probe number `id` (its UDP source port, and in its
/// payload after [`MAGIC`]).
fn frame(p: &Probe, id: u16, src: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(96);
    f.extend_from_slice(&DUT_D0_MAC);
    f.extend_from_slice(&GEN_MAC);
    let mut payload = MAGIC.to_vec();
    payload.extend_from_slice(&u32::from(id).to_be_bytes());
    let udp_len = 8 + payload.len();
    let mut udp = Vec::new();
    udp.extend_from_slice(&id.to_be_bytes());
    udp.extend_from_slice(&9u16.to_be_bytes());
    udp.extend_from_slice(&(udp_len as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(&payload);
    match p.dst {
        IpAddr::V4(d) => {
            f.extend_from_slice(&[0x08, 0x00]);
            let total = 20 + udp_len;
            let mut h = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, p.ttl, 17, 0, 0];
            h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            h[4..6].copy_from_slice(&id.to_be_bytes());
            h.extend_from_slice(&source4(src).octets());
            h.extend_from_slice(&d.octets());
            let c = wire::checksum::checksum(&h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            let ph = wire::checksum::pseudo_header_v4(source4(src), d, 17, udp_len as u16);
            let c =
                wire::checksum::finish(wire::checksum::combine(&[ph, wire::checksum::sum(&udp)]));
            udp[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
            f.extend_from_slice(&h);
        }
        IpAddr::V6(d) => {
            f.extend_from_slice(&[0x86, 0xdd]);
            let mut h = vec![0x60, 0, 0, 0];
            h.extend_from_slice(&(udp_len as u16).to_be_bytes());
            h.extend_from_slice(&[17, p.ttl]);
            h.extend_from_slice(&source6(src).octets());
            h.extend_from_slice(&d.octets());
            let ph = wire::checksum::pseudo_header_v6(&source6(src), &d, 17, udp_len as u32);
            let c =
                wire::checksum::finish(wire::checksum::combine(&[ph, wire::checksum::sum(&udp)]));
            udp[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
            f.extend_from_slice(&h);
        }
    }
    f.extend_from_slice(&udp);
    f
}

/// What became of one packet.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fate {
    /// Left toward this MAC, as these IP bytes.
    Forwarded([u8; 6], Vec<u8>),
    /// An ICMP error (type, code) came back.
    Icmp(u8, u8),
    /// Nothing was seen.
    Dropped,
}

/// The probe id a forwarded frame carries, and the frame's IP bytes.
fn forwarded(frame: &[u8]) -> Option<(u16, [u8; 6], Vec<u8>)> {
    let dst: [u8; 6] = frame.get(..6)?.try_into().ok()?;
    let ip = frame.get(14..)?;
    let (l4, len) = match u16::from_be_bytes([frame[12], frame[13]]) {
        0x0800 => (
            usize::from(ip[0] & 0x0f) * 4,
            usize::from(u16::from_be_bytes([ip[2], ip[3]])),
        ),
        0x86dd => (40, 40 + usize::from(u16::from_be_bytes([ip[4], ip[5]]))),
        _ => return None,
    };
    let udp = ip.get(l4..len)?;
    if udp.get(8..12)? != MAGIC {
        return None;
    }
    Some((
        u16::from_be_bytes([udp[0], udp[1]]),
        dst,
        ip[..len].to_vec(),
    ))
}

/// The probe id an ICMP error quotes, with the error's type and code.
fn icmp_error(frame: &[u8]) -> Option<(u16, u8, u8)> {
    let ip = frame.get(14..)?;
    // IPv4: 3 unreachable, 11 time exceeded; ICMPv6: 1 unreachable, 3
    // time exceeded. Each quotes the packet it answers.
    let (icmp, quoted_l4) = match u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]) {
        0x0800 if ip.get(9) == Some(&1) => {
            let icmp = ip.get(usize::from(ip[0] & 0x0f) * 4..)?;
            if ![3, 11].contains(icmp.first()?) {
                return None;
            }
            let inner = icmp.get(8..)?;
            (icmp, inner.get(usize::from(inner.first()? & 0x0f) * 4..)?)
        }
        0x86dd if ip.get(6) == Some(&58) => {
            let icmp = ip.get(40..)?;
            if ![1, 3].contains(icmp.first()?) {
                return None;
            }
            (icmp, icmp.get(8 + 40..)?)
        }
        _ => return None,
    };
    Some((
        u16::from_be_bytes([*quoted_l4.first()?, *quoted_l4.get(1)?]),
        icmp[0],
        *icmp.get(1)?,
    ))
}

/// A capture on one interface in one namespace, running until dropped.
struct Capture {
    frames: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Capture {
    /// Frames arriving from `from` (by source MAC) on `ifname` in `ns`.
    fn start(ns: &str, ifname: &str, from: [u8; 6]) -> Capture {
        let frames = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (f, s, ns, ifname) = (
            frames.clone(),
            stop.clone(),
            ns.to_string(),
            ifname.to_string(),
        );
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            netio::sys::os::enter_netns(&ns).unwrap();
            let mut ring = PacketRxRing::open(&ifname, 1 << 16, 16, 2).unwrap();
            let _ = ready_tx.send(());
            while !s.load(Ordering::Relaxed) {
                let _ = ring.poll_block(20, |b, _| {
                    if b.get(6..12) == Some(&from[..]) {
                        f.lock().unwrap().push(b.to_vec());
                    }
                });
            }
        });
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("capture ready");
        Capture {
            frames,
            stop,
            thread: Some(thread),
        }
    }

    fn take(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.frames.lock().unwrap())
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The twin duts and what surrounds them.
struct Twins {
    gen_ns: String,
    dk: String,
    df: String,
    sk: String,
    sf: String,
    dir: PathBuf,
    /// The kernel has VRF devices: scenarios that draw one apply it.
    vrf: bool,
}

impl Drop for Twins {
    fn drop(&mut self) {
        for ns in [&self.gen_ns, &self.dk, &self.df, &self.sk, &self.sf] {
            let _ = sh(&["ip", "netns", "del", ns]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn twins() -> Option<Twins> {
    if !netio::root_or_skip("the kernel-differential oracle") {
        return None;
    }
    let p = format!("kd{}", std::process::id() % 100_000);
    let mut t = Twins {
        gen_ns: format!("{p}gen"),
        dk: format!("{p}dk"),
        df: format!("{p}df"),
        sk: format!("{p}sk"),
        sf: format!("{p}sf"),
        dir: std::env::temp_dir().join(format!("fastfwd-{p}")),
        vrf: false,
    };
    std::fs::create_dir_all(&t.dir).unwrap();
    for ns in [&t.gen_ns, &t.dk, &t.df, &t.sk, &t.sf] {
        ok(&["ip", "netns", "add", ns]);
        ok(&[
            "ip",
            "netns",
            "exec",
            ns,
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.accept_dad=0",
            "net.ipv6.conf.default.accept_dad=0",
        ]);
        ok(&["ip", "-n", ns, "link", "set", "lo", "up"]);
    }
    for (dut, g, s) in [(&t.dk, "g0", &t.sk), (&t.df, "g1", &t.sf)] {
        ok(&[
            "ip", "-n", &t.gen_ns, "link", "add", g, "type", "veth", "peer", "name", "d0", "netns",
            dut,
        ]);
        ok(&[
            "ip", "-n", s, "link", "add", "s0", "type", "veth", "peer", "name", "d1", "netns", dut,
        ]);
        for (ns, dev, mac) in [
            (t.gen_ns.as_str(), g, GEN_MAC),
            (dut, "d0", DUT_D0_MAC),
            (dut, "d1", DUT_D1_MAC),
            (s, "s0", SINK_MAC),
        ] {
            ok(&[
                "ip",
                "-n",
                ns,
                "link",
                "set",
                dev,
                "address",
                &mac_text(mac),
            ]);
            ok(&["ip", "-n", ns, "link", "set", dev, "up"]);
        }
        for (dev, a4, a6) in [
            ("d0", "198.18.0.10/24", "2001:2::10/64"),
            ("d1", "198.19.0.10/24", "2001:2:0:8000::10/64"),
        ] {
            ok(&["ip", "-n", dut, "addr", "add", a4, "dev", dev]);
            ok(&["ip", "-n", dut, "addr", "add", a6, "dev", dev, "nodad"]);
        }
        let mut neigh = Vec::new();
        for s in SOURCES {
            neigh.push((source4(s).to_string(), "d0", GEN_MAC));
            neigh.push((source6(s).to_string(), "d0", GEN_MAC));
        }
        for i in 0..GATEWAYS {
            neigh.push((gateway4(i).to_string(), "d1", gateway_mac(i)));
            neigh.push((gateway6(i).to_string(), "d1", gateway_mac(i)));
        }
        let lines: String = neigh
            .iter()
            .map(|(ip, dev, mac)| {
                format!(
                    "neigh replace {ip} lladdr {} nud permanent dev {dev}\n",
                    mac_text(*mac)
                )
            })
            .collect();
        let file = t.dir.join("neighbours.batch");
        std::fs::write(&file, lines).unwrap();
        ok(&["ip", "-n", dut, "-batch", file.to_str().unwrap()]);
    }
    // A VRF device in a scenario cycles d0 (down and up) as it joins and
    // leaves: its IPv6 addresses are kept; its neighbours are put back
    // (`restore_neighbours`).
    for dut in [&t.dk, &t.df] {
        ok(&[
            "ip",
            "netns",
            "exec",
            dut,
            "sysctl",
            "-qw",
            "net.ipv6.conf.d0.keep_addr_on_down=1",
        ]);
    }
    t.vrf = sh(&[
        "ip",
        "-n",
        &t.dk,
        "link",
        "add",
        "ffvrfprobe",
        "type",
        "vrf",
        "table",
        "1",
    ])
    .status
    .success();
    let _ = sh(&["ip", "-n", &t.dk, "link", "del", "ffvrfprobe"]);
    // dk's kernel forwards, and answers every packet that needs an ICMP
    // error (no rate limit: the comparison is per packet).
    ok(&[
        "ip",
        "netns",
        "exec",
        &t.dk,
        "sysctl",
        "-qw",
        "net.ipv4.ip_forward=1",
        "net.ipv6.conf.all.forwarding=1",
        "net.ipv4.icmp_ratelimit=0",
        "net.ipv4.icmp_msgs_per_sec=100000",
        "net.ipv4.icmp_msgs_burst=100000",
        "net.ipv6.icmp.ratelimit=0",
        "net.ipv4.conf.all.rp_filter=0",
        "net.ipv4.conf.default.rp_filter=0",
        "net.ipv4.conf.d0.rp_filter=0",
    ]);
    // df's does not: whatever crosses df crossed fastfwd.
    ok(&[
        "ip",
        "netns",
        "exec",
        &t.df,
        "sysctl",
        "-qw",
        "net.ipv4.ip_forward=0",
        "net.ipv6.conf.all.forwarding=0",
    ]);
    // The XDP engine redirects into d0 and d1, whose peers then need NAPI.
    for (ns, dev) in [(&t.gen_ns, "g1"), (&t.sf, "s0")] {
        ok(&["ip", "netns", "exec", ns, "ethtool", "-K", dev, "gro", "on"]);
    }
    Some(t)
}

/// fastfwd running in df; stopped with SIGTERM on drop.
struct Daemon {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl Daemon {
    fn start(t: &Twins, engine: &str, backend: &str) -> Daemon {
        let cfg = t.dir.join("router.toml");
        std::fs::write(
            &cfg,
            format!(
                "[[interfaces]]\nname = \"d0\"\nmac = \"{}\"\naddresses = [\"198.18.0.10/24\", \"2001:2::10/64\"]\n\n\
                 [[interfaces]]\nname = \"d1\"\nmac = \"{}\"\naddresses = [\"198.19.0.10/24\", \"2001:2:0:8000::10/64\"]\n",
                mac_text(DUT_D0_MAC),
                mac_text(DUT_D1_MAC)
            ),
        )
        .unwrap();
        let socket = t.dir.join(format!("{engine}-{backend}.sock"));
        let log = t.dir.join(format!("{engine}-{backend}.log"));
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &t.df,
                env!("CARGO_BIN_EXE_fastfwd"),
                "run",
                "--config",
            ])
            .arg(&cfg)
            .args([
                "--engine",
                engine,
                "--backend",
                backend,
                "--cores",
                "1",
                "--on-exit",
                "detach",
                "--socket",
            ])
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start fastfwd");
        let d = Daemon { child, socket, log };
        // Loading the XDP program takes seconds under an emulated CPU
        // (scripts/test-kernel).
        let end = Instant::now() + Duration::from_secs(60);
        // Up once every worker has run its loop (its ports polled), so the
        // first scenario's packets are not sent to a daemon still starting.
        let running = |d: &Daemon| {
            let o = d.cli(&["show", "workers", "--json"]);
            let v: serde_json::Value =
                serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null);
            o.status.success()
                && v.as_array().is_some_and(|all| {
                    // The XDP program's entry is not a worker.
                    let workers: Vec<_> = all.iter().filter(|w| w["xdp"].is_null()).collect();
                    !workers.is_empty()
                        && workers.iter().all(|w| {
                            w["busy_rounds"].as_u64().unwrap_or(0)
                                + w["sleeps"].as_u64().unwrap_or(0)
                                > 0
                        })
                })
        };
        while Instant::now() < end {
            if d.socket.exists() && running(&d) {
                return d;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "fastfwd did not start: {}",
            std::fs::read_to_string(&d.log).unwrap_or_default()
        );
    }

    fn cli(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_fastfwd"))
            .args(args)
            .arg("--socket")
            .arg(&self.socket)
            .output()
            .expect("fastfwd cli")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = sh(&["kill", "-TERM", &self.child.id().to_string()]);
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The MACs of the next hops of the kernel's route for `dst` in `ns`: the
/// longest prefix holding it in a dump of the table, its lowest metric,
/// and of several routes there (IPv4 `append`) the first; nexthop objects
/// and groups followed. (`ip route get fibmatch` would say it directly,
/// but has been seen to answer an IPv6 query with another route.)
fn member_macs(ns: &str, dst: IpAddr) -> BTreeSet<[u8; 6]> {
    let fam = if dst.is_ipv4() { "-4" } else { "-6" };
    let out = sh(&["ip", "-n", ns, fam, "-j", "route", "show", "table", "main"]);
    let all: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    let prefix_of = |r: &serde_json::Value| -> Option<wire::Cidr> {
        let text = r["dst"].as_str()?;
        let text = match text {
            "default" if dst.is_ipv4() => "0.0.0.0/0".to_string(),
            "default" => "::/0".to_string(),
            t if t.contains('/') => t.to_string(),
            t => format!("{t}/{}", if dst.is_ipv4() { 32 } else { 128 }),
        };
        text.parse().ok()
    };
    let best = all
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| Some((prefix_of(r)?, r["metric"].as_u64().unwrap_or(0), r)))
        .filter(|(p, _, _)| p.contains(dst))
        // Longest prefix, then lowest metric; the dump's order breaks ties.
        .min_by_key(|(p, m, _)| (std::cmp::Reverse(p.prefix_len()), *m));
    let routes: Vec<&serde_json::Value> = best.map(|(_, _, r)| r).into_iter().collect();
    let mut gateways = Vec::new();
    let mut objects = Vec::new();
    for r in routes {
        gateways.extend(r["gateway"].as_str().map(String::from));
        for h in r["nexthops"].as_array().into_iter().flatten() {
            gateways.extend(h["gateway"].as_str().map(String::from));
        }
        objects.extend(r["nhid"].as_u64());
    }
    while let Some(id) = objects.pop() {
        let out = sh(&[
            "ip",
            "-n",
            ns,
            "-j",
            "nexthop",
            "show",
            "id",
            &id.to_string(),
        ]);
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        for o in v.as_array().into_iter().flatten() {
            gateways.extend(o["gateway"].as_str().map(String::from));
            for m in o["group"].as_array().into_iter().flatten() {
                objects.extend(m["id"].as_u64());
            }
        }
    }
    gateways
        .iter()
        .filter_map(|g| g.parse::<IpAddr>().ok())
        .filter_map(|g| {
            (0..GATEWAYS).find(|&i| Family::V4.gateway(i) == g || Family::V6.gateway(i) == g)
        })
        .map(gateway_mac)
        .collect()
}

/// Runs `count` scenarios from `first` against one engine; returns every
/// difference, each naming its seed.
fn run_engine(t: &Twins, engine: &str, backend: &str, seeds: &[u64]) -> (Vec<String>, usize) {
    let d = Daemon::start(t, engine, backend);
    let caps = [
        Capture::start(&t.gen_ns, "g0", DUT_D0_MAC),
        Capture::start(&t.gen_ns, "g1", DUT_D0_MAC),
        Capture::start(&t.sk, "s0", DUT_D1_MAC),
        Capture::start(&t.sf, "s0", DUT_D1_MAC),
    ];
    let gen_ns = t.gen_ns.clone();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<Vec<u8>>>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let sender = std::thread::spawn(move || {
        netio::sys::os::enter_netns(&gen_ns).unwrap();
        let mut ports = [
            PacketTx::open("g0", 1, 256).unwrap(),
            PacketTx::open("g1", 1, 256).unwrap(),
        ];
        for frames in rx {
            for f in frames {
                for p in &mut ports {
                    p.slot_mut(0)[..f.len()].copy_from_slice(&f);
                    let _ = p.send(0, 1, f.len());
                }
                // 500 packets a second: under fastfwd's ICMP rate limit.
                std::thread::sleep(Duration::from_millis(2));
            }
            let _ = done_tx.send(());
        }
    });
    let mut differences = Vec::new();
    let mut compared = 0usize;
    let mut sent = 0usize;
    let batch = t.dir.join("scenario.batch");
    let rules_batch = t.dir.join("rules.batch");
    let vrf_batch = t.dir.join("vrf.batch");
    let undo_batch = t.dir.join("undo.batch");
    for &seed in seeds {
        let s = scenario(seed);
        std::fs::write(&batch, &s.batch).unwrap();
        for ns in [&t.dk, &t.df] {
            let o = sh(&["ip", "-n", ns, "-batch", batch.to_str().unwrap()]);
            assert!(
                o.status.success(),
                "seed {seed}: the scenario is not valid for the kernel: {}\n{}",
                String::from_utf8_lossy(&o.stderr),
                s.text()
            );
            if t.vrf && !s.vrf.is_empty() {
                std::fs::write(&vrf_batch, &s.vrf).unwrap();
                let o = sh(&["ip", "-n", ns, "-batch", vrf_batch.to_str().unwrap()]);
                assert!(
                    o.status.success(),
                    "seed {seed}: the VRF is not valid for the kernel: {}\n{}",
                    String::from_utf8_lossy(&o.stderr),
                    s.text()
                );
                restore_neighbours(t, ns);
            }
            for (fam, rules) in ["-4", "-6"].iter().zip(&s.rules) {
                if rules.is_empty() {
                    continue;
                }
                std::fs::write(&rules_batch, rules).unwrap();
                let o = sh(&["ip", "-n", ns, fam, "-batch", rules_batch.to_str().unwrap()]);
                assert!(
                    o.status.success(),
                    "seed {seed}: the rules are not valid for the kernel: {}\n{}",
                    String::from_utf8_lossy(&o.stderr),
                    s.text()
                );
            }
        }
        let synced = {
            let end = Instant::now() + Duration::from_secs(5);
            loop {
                if d.cli(&["fib", "audit"]).status.success() {
                    break true;
                }
                if Instant::now() > end {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        };
        let before = differences.len();
        if !synced {
            let o = d.cli(&["fib", "audit"]);
            differences.push(format!(
                "seed {seed}: fastfwd's tables never matched its kernel: {}\n{}",
                String::from_utf8_lossy(&o.stdout),
                s.text()
            ));
        } else {
            for c in &caps {
                c.take();
            }
            let probes = probes(&s);
            // Ids never repeat within a run: a late answer to an earlier
            // scenario cannot pass for one of this scenario's.
            let first = sent;
            let frames: Vec<Vec<u8>> = probes
                .iter()
                .enumerate()
                .map(|(i, p)| frame(p, probe_id(first + i), source_of(first + i)))
                .collect();
            sent += frames.len();
            tx.send(frames).unwrap();
            done_rx.recv().unwrap();
            // Wait until the captures have been quiet for 500 ms (at most
            // 5 s): a forwarding core the machine's load held up answers
            // late, not never.
            let seen = || {
                caps.iter()
                    .map(|c| c.frames.lock().unwrap().len())
                    .sum::<usize>()
            };
            let (start, mut last, mut count) = (Instant::now(), Instant::now(), seen());
            while last.elapsed() < Duration::from_millis(500)
                && start.elapsed() < Duration::from_secs(5)
            {
                std::thread::sleep(Duration::from_millis(50));
                let now = seen();
                if now != count {
                    (count, last) = (now, Instant::now());
                }
            }
            let fates = |icmp: &Capture, fwd: &Capture| {
                let mut f: BTreeMap<u16, Fate> = BTreeMap::new();
                for fr in fwd.take() {
                    if let Some((id, mac, ip)) = forwarded(&fr) {
                        f.insert(id, Fate::Forwarded(mac, ip));
                    }
                }
                for fr in icmp.take() {
                    if let Some((id, ty, code)) = icmp_error(&fr) {
                        f.insert(id, Fate::Icmp(ty, code));
                    }
                }
                f
            };
            let kernel = fates(&caps[0], &caps[2]);
            let fastfwd = fates(&caps[1], &caps[3]);
            for (i, p) in probes.iter().enumerate() {
                let id = probe_id(first + i);
                let k = kernel.get(&id).cloned().unwrap_or(Fate::Dropped);
                let f = fastfwd.get(&id).cloned().unwrap_or(Fate::Dropped);
                compared += 1;
                let same = match (&k, &f) {
                    (Fate::Forwarded(km, kb), Fate::Forwarded(fm, fb)) if kb == fb && km != fm => {
                        let members = member_macs(&t.dk, p.dst);
                        members.contains(km) && members.contains(fm)
                    }
                    _ => k == f,
                };
                if !same {
                    differences.push(format!(
                        "seed {seed}: {} from {} ttl {}: kernel {k:?}, fastfwd ({engine}/{backend}) {f:?}\n{}",
                        p.dst, source_text(p.dst, source_of(first + i)), p.ttl, s.text()
                    ));
                }
            }
            if differences.len() > before {
                // What fastfwd counted, for the first difference's report.
                let m = String::from_utf8_lossy(&d.cli(&["show", "metrics"]).stdout).into_owned();
                let counted: Vec<&str> = m
                    .lines()
                    .filter(|l| !l.starts_with('#') && !l.ends_with(" 0"))
                    .filter(|l| {
                        ["drops", "icmp", "exceptions", "held", "ring"]
                            .iter()
                            .any(|w| l.contains(w))
                    })
                    .collect();
                differences[before]
                    .push_str(&format!("fastfwd counted:\n{}\n", counted.join("\n")));
            }
        }
        // One `ip -batch` a family and dut: under QEMU's TCG every process
        // started costs tens of milliseconds.
        for (fam, rules) in ["-4", "-6"].iter().zip(&s.rules) {
            let mut undo = String::new();
            // The scenario's rules have priorities from FIRST_RULE up, one
            // each.
            for i in 0..rules.lines().count() as u32 {
                let _ = writeln!(undo, "rule del pref {}", FIRST_RULE + 10 * i);
            }
            undo.push_str("route flush proto static\n");
            for table in POLICY_TABLES {
                let _ = writeln!(undo, "route flush table {table}");
            }
            std::fs::write(&undo_batch, &undo).unwrap();
            for ns in [&t.dk, &t.df] {
                let path = undo_batch.to_str().unwrap();
                let _ = sh(&["ip", "-n", ns, fam, "-force", "-batch", path]);
            }
        }
        for ns in [&t.dk, &t.df] {
            // Not in a family's batch: `-6 nexthop flush` leaves the IPv4
            // nexthops and the groups.
            let _ = sh(&["ip", "-n", ns, "nexthop", "flush"]);
            if t.vrf && !s.vrf.is_empty() {
                let _ = sh(&["ip", "-n", ns, "link", "set", "d0", "nomaster"]);
                let _ = sh(&["ip", "-n", ns, "link", "del", "ffblue"]);
                for fam in ["-4", "-6"] {
                    let table = VRF_TABLE.to_string();
                    let _ = sh(&["ip", "-n", ns, fam, "route", "flush", "table", &table]);
                }
                restore_neighbours(t, ns);
            }
        }
    }
    drop(tx);
    sender.join().unwrap();
    drop(d);
    (differences, compared)
}

/// Puts back dut `ns`'s static neighbours (d0 going down, as when it
/// joins or leaves a VRF, flushes its own).
fn restore_neighbours(t: &Twins, ns: &str) {
    let file = t.dir.join("neighbours.batch");
    ok(&["ip", "-n", ns, "-batch", file.to_str().unwrap()]);
}

fn seeds() -> Vec<u64> {
    if let Some(s) = std::env::var("FASTFWD_ORACLE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![s];
    }
    let n = std::env::var("FASTFWD_ORACLE_SCENARIOS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100u64);
    (1..=n).collect()
}

#[test]
fn every_engine_forwards_generated_scenarios_as_the_kernel_does() {
    let Some(t) = twins() else { return };
    let seeds = seeds();
    let mut all = Vec::new();
    let engines: Vec<(&str, &str)> = match std::env::var("FASTFWD_ORACLE_ENGINE").as_deref() {
        Ok("xdp") => vec![("xdp", "afxdp")],
        Ok("afxdp") => vec![("user", "afxdp")],
        Ok("packet") => vec![("user", "packet")],
        _ => vec![("user", "packet"), ("user", "afxdp"), ("xdp", "afxdp")],
    };
    let with_vrf: Vec<u64> = seeds
        .iter()
        .copied()
        .filter(|&s| !scenario(s).vrf.is_empty())
        .collect();
    eprintln!(
        "{} of {} scenarios put d0 in a VRF (seeds {with_vrf:?}){}",
        with_vrf.len(),
        seeds.len(),
        if t.vrf {
            ""
        } else {
            " (not applied: this kernel has no VRF devices; scripts/test-kernel runs them under Debian's)"
        }
    );
    for (engine, backend) in engines {
        let start = Instant::now();
        let (diffs, compared) = run_engine(&t, engine, backend, &seeds);
        eprintln!(
            "{engine}/{backend}: {} scenarios, {compared} packets compared, {} difference(s), {:.1} s",
            seeds.len(),
            diffs.len(),
            start.elapsed().as_secs_f64()
        );
        all.extend(diffs);
    }
    assert!(
        all.is_empty(),
        "{} packet(s) whose fate differs from the kernel's; the first:\n{}",
        all.len(),
        all.iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
}
