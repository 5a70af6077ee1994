//! `lab churn`: does forwarding survive a BGP session reset with a full
//! table?
//!
//! A BIRD in sink announces the prefix list over eBGP (IPv4 and IPv6
//! sessions on the d1 - s0 link) to a BIRD in dut, whose kernel protocol
//! installs every route in dut's kernel. The contender forwards: the kernel
//! itself, or fastfwd mirroring dut's kernel with the kernel's forwarding
//! off. While a fixed load flows to destinations outside the announced
//! prefixes (the lab's own 198.19.0.0/16, a static route), dut's sessions
//! are disabled and enabled again, `cycles` times: the whole table is
//! withdrawn and reinstalled each time. Measured per contender:
//!
//! - packets lost, by sequence number at the sink, with reordering and
//!   duplicates, split where the loss happened: refused by the generator's
//!   own transmit path (its socket's ENOBUFS and g0's transmit drops, a full
//!   receive queue at d0: the lab's share, reported) and lost beyond it,
//!   in dut or on the way to the sink (the goal: none);
//! - the sink's per-second rate through the churn (minimum and median);
//! - after each withdraw and each reinstall, the seconds until dut's kernel
//!   holds the new state (BIRD's kernel protocol: its exported-route count,
//!   which BIRD 2 reaches only once the kernel acknowledged each route) and
//!   until fastfwd's FIB holds it (its route counts), then `fastfwd fib
//!   audit` comparing fastfwd's tables with a fresh dump of the kernel;
//! - fastfwd's re-reads of the kernel after lost netlink broadcasts, and
//!   the daemon's resident memory at the end.

use crate::bench::{
    Contender, FastfwdForwarding, InputMode, KernelForwarding, LabError, LabRunner, Traffic,
    interrupted, io_err,
};
use crate::recv::NetDevReader;
use crate::topo::{self, FirewallPreset, TopoConfig, TopoGuard, Topology};
use serde::Serialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// dut's and sink's autonomous systems (private AS numbers).
const DUT_AS: u32 = 65001;
const SINK_AS: u32 = 65002;
/// How often the route counts are read while a change settles.
const POLL: Duration = Duration::from_millis(100);

/// What `lab churn` runs.
#[derive(Debug, Clone)]
pub struct ChurnConfig {
    /// The prefix list sink announces (as `lab bench --full-table` reads it).
    pub table: PathBuf,
    /// At most this many prefixes of each family (None: all).
    pub limit: Option<usize>,
    /// Withdraw-and-reinstall cycles per contender.
    pub cycles: u32,
    /// Offered load through the churn, packets per second.
    pub rate_pps: f64,
    /// Frame length without FCS.
    pub frame_len: u16,
    /// Longest wait for one state to settle.
    pub settle_timeout: Duration,
    /// The `fastfwd` binary (for the fastfwd contenders and their control socket).
    pub binary: PathBuf,
    /// Folder for the BIRD configs, sockets and logs, and the daemons' files.
    pub dir: PathBuf,
    /// Namespace tag.
    pub tag: String,
    /// `kernel`, `xdp-engine` (`--engine xdp`), `xdp` (AF_XDP) or `packet`.
    pub contenders: Vec<String>,
    /// After the cycles, flap a set of extra prefixes for this long (zero:
    /// no flap): announced and withdrawn again every [`FLAP_PERIOD`] while
    /// the table stays, the daemon's memory sampled.
    pub flap: Duration,
    /// IPv4 prefixes in the flapping set (a fifth as many IPv6 ones).
    pub flap_prefixes: usize,
    /// IPv4 source rules flapped with the set, each with a route of its
    /// own in [`FLAP_TABLE`]: added to dut's kernel with `ip -batch` when
    /// the set is announced, deleted when it is withdrawn (at most the
    /// set's size).
    pub flap_rules: usize,
    /// IPv6 source rules flapped the same way (at most the set's IPv6
    /// size). Few by default: each IPv6 rule added or deleted costs the
    /// kernel a walk of its whole IPv6 FIB (`fib6_flush_trees`), about
    /// 18 ms with 160,000 routes in an idle namespace and 95 ms in the lab.
    pub flap_rules6: usize,
    /// Print progress.
    pub verbose: bool,
}

impl ChurnConfig {
    /// Three cycles of the whole table at 50 kpps, every contender.
    pub fn new(binary: PathBuf, dir: PathBuf, table: PathBuf) -> Self {
        Self {
            table,
            limit: None,
            cycles: 3,
            rate_pps: 50_000.0,
            frame_len: 60,
            settle_timeout: Duration::from_secs(120),
            binary,
            dir,
            tag: "churn".into(),
            contenders: ["kernel", "xdp-engine", "xdp", "packet"]
                .map(String::from)
                .to_vec(),
            verbose: false,
            flap: Duration::ZERO,
            flap_prefixes: 10_000,
            flap_rules: 1_000,
            flap_rules6: 5,
        }
    }
}

/// How often the flapping set changes (announced, then withdrawn).
pub const FLAP_PERIOD: Duration = Duration::from_secs(1);
/// The table the flapping rules look up.
pub const FLAP_TABLE: u32 = 100;
/// The flapping rules' first priority (one each, counting up): after the
/// kernel's local rule, before main's.
const FLAP_RULE_PRIORITY: u32 = 10_000;
/// How often the daemon's memory is sampled while the set flaps.
const RSS_SAMPLE: Duration = Duration::from_secs(10);

/// A set of prefixes announced and withdrawn every [`FLAP_PERIOD`] with the
/// table in place.
#[derive(Debug, Clone, Serialize)]
pub struct Flap {
    /// Seconds it flapped.
    pub seconds: f64,
    /// Prefixes in the set (IPv4, IPv6).
    pub prefixes: (u64, u64),
    /// Rules flapped with it (IPv4, IPv6), each with a route in
    /// [`FLAP_TABLE`].
    #[serde(default)]
    pub rules: (u64, u64),
    /// Announcements and withdrawals of the set.
    pub changes: u64,
    /// Route and rule changes a second while it flapped: each flip's
    /// prefixes, rules and the rules' routes, over [`Flap::seconds`].
    #[serde(default)]
    pub changes_per_s: f64,
    /// The daemon's resident memory every 10 s while the set flapped:
    /// (seconds into the flap, KiB).
    pub rss_kib: Vec<(f64, u64)>,
    /// The set announced and its rules added one last time: settled (the
    /// rules and the table's routes counted in fastfwd) and audited.
    #[serde(default)]
    pub in_place: Settle,
    /// Once the set was withdrawn for good: the table settled and audited.
    pub after: Settle,
    /// How long each kind of step of a flip took: the `birdc` commands
    /// to sink and each family's `ip -batch` of rules in dut.
    #[serde(default)]
    pub steps: Vec<StepTime>,
}

/// The time one kind of step of the flap took over all flips.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StepTime {
    /// What ran: `birdc`, `ip -4 -batch` or `ip -6 -batch`.
    pub step: String,
    /// How many times it ran.
    pub runs: u64,
    /// Seconds in all.
    pub total_s: f64,
    /// The slowest run, seconds.
    pub max_s: f64,
}

impl StepTime {
    fn add(&mut self, d: Duration) {
        self.runs += 1;
        self.total_s += d.as_secs_f64();
        self.max_s = self.max_s.max(d.as_secs_f64());
    }
}

impl Flap {
    /// The largest sample of the first and of the last minute, KiB.
    pub fn rss_first_last(&self) -> Option<(u64, u64)> {
        let end = self.rss_kib.last()?.0;
        let max = |f: &dyn Fn(f64) -> bool| {
            self.rss_kib
                .iter()
                .filter(|(t, _)| f(*t))
                .map(|&(_, k)| k)
                .max()
        };
        Some((max(&|t| t <= 60.0)?, max(&|t| t >= end - 60.0)?))
    }
}

/// How long one change took to land.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Settle {
    /// Seconds until dut's kernel held the new state (None: not within the timeout).
    pub kernel_s: Option<f64>,
    /// Seconds until fastfwd's FIB held it (fastfwd contenders).
    pub fastfwd_s: Option<f64>,
    /// Differences `fastfwd fib audit` found once both had settled.
    pub audit_differences: Option<u64>,
    /// Reads of fastfwd's route counts that got no answer within the
    /// control client's 10 s (the daemon was busy following the kernel).
    #[serde(default)]
    pub unanswered_reads: u32,
}

/// One withdraw and reinstall of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Cycle {
    /// After dut's sessions were disabled.
    pub withdraw: Settle,
    /// After they were enabled again.
    pub reinstall: Settle,
}

/// One contender's run.
#[derive(Debug, Clone, Serialize)]
pub struct ChurnResult {
    /// Contender name, as in `lab bench`.
    pub contender: String,
    /// One line on what forwarded.
    pub description: String,
    /// fastfwd forwarded (rather than the kernel).
    pub fastfwd: bool,
    /// Routes the table put in dut's kernel (IPv4, IPv6).
    pub routes: (u64, u64),
    /// The first load of the table, from dut's BIRD starting.
    pub initial: Settle,
    /// Each withdraw and reinstall.
    pub cycles: Vec<Cycle>,
    /// Offered load, packets per second.
    pub offered_pps: u64,
    /// Frames the generator sent through the churn.
    pub sent: u64,
    /// Frames the sink received.
    pub received: u64,
    /// Sent and never received (by sequence number).
    pub lost: u64,
    /// Of `lost`, the frames the generator's own transmit path refused:
    /// its socket's refusals (attempted, not sent) and g0's transmit drops
    /// (veth found d0's receive queue full). They never reached the router
    /// under test, so they are the lab's figure, reported beside the loss.
    pub generator_refused: u64,
    /// `lost` less `generator_refused`: frames that g0 handed over and the
    /// sink never saw, lost in dut or on the way to the sink. What a
    /// contender is judged on.
    pub lost_beyond_generator: u64,
    /// Received out of order.
    pub reordered: u64,
    /// Received twice.
    pub duplicates: u64,
    /// Where frames were dropped while the traffic ran: the interfaces'
    /// drop counters (g0 transmit: veth's full receive ring at d0; d0
    /// receive, d1 transmit, s0 receive).
    pub interface_drops: Vec<(String, u64)>,
    /// fastfwd's counters of dropped, lost or failed frames that are not
    /// zero at the end (`fastfwd show metrics`).
    pub fastfwd_drops: Vec<(String, u64)>,
    /// The sink's rate, every whole second of the traffic.
    pub rate_per_second: Vec<u64>,
    /// When each withdraw and reinstall began, seconds after the traffic
    /// started (to read against `rate_per_second`).
    pub events: Vec<(f64, String)>,
    /// The sink's lowest whole-second rate through the churn.
    pub rate_min_pps: u64,
    /// Its median.
    pub rate_median_pps: u64,
    /// fastfwd's full re-reads of the kernel after lost broadcasts.
    pub kernel_resyncs: Option<u64>,
    /// The fastfwd daemon's resident memory at the end, KiB.
    pub rss_kib: Option<u64>,
    /// The flap after the cycles, when there was one.
    pub flap: Option<Flap>,
}

impl ChurnResult {
    /// Every state settled, fastfwd's audits found nothing, nothing lost
    /// beyond the generator's interface.
    pub fn clean(&self) -> bool {
        let ok = |s: &Settle| {
            s.kernel_s.is_some()
                && (!self.fastfwd || (s.fastfwd_s.is_some() && s.audit_differences == Some(0)))
        };
        self.lost_beyond_generator == 0
            && ok(&self.initial)
            && self
                .cycles
                .iter()
                .all(|c| ok(&c.withdraw) && ok(&c.reinstall))
            && self
                .flap
                .as_ref()
                .is_none_or(|f| ok(&f.in_place) && ok(&f.after))
    }

    /// The longest settle of each kind over the cycles: (withdraw kernel,
    /// withdraw fastfwd, reinstall kernel, reinstall fastfwd).
    pub fn worst(&self) -> [Option<f64>; 4] {
        let max = |f: &dyn Fn(&Cycle) -> Option<f64>| {
            if self.cycles.is_empty() {
                return None;
            }
            self.cycles
                .iter()
                .map(f)
                .try_fold(0.0f64, |m, v| v.map(|v| m.max(v)))
        };
        [
            max(&|c| c.withdraw.kernel_s),
            max(&|c| c.withdraw.fastfwd_s),
            max(&|c| c.reinstall.kernel_s),
            max(&|c| c.reinstall.fastfwd_s),
        ]
    }
}

/// Everything `lab churn` measured.
#[derive(Debug, Clone, Serialize)]
pub struct ChurnReport {
    /// The prefix list.
    pub table: String,
    /// Prefixes announced (IPv4, IPv6).
    pub announced: (u64, u64),
    /// Cycles per contender.
    pub cycles: u32,
    /// One per contender, in order.
    pub results: Vec<ChurnResult>,
}

/// The number of IPv4 and IPv6 routes of a pair of counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts(u64, u64);

/// A BIRD daemon in one of the lab's namespaces, killed on drop.
struct Bird {
    socket: PathBuf,
    pidfile: PathBuf,
}

impl Bird {
    fn start(ns: &str, dir: &Path, name: &str, config: &str) -> Result<Bird, LabError> {
        let conf = dir.join(format!("bird-{name}.conf"));
        std::fs::write(&conf, config).map_err(io_err(format!("write {}", conf.display())))?;
        let bird = Bird {
            socket: dir.join(format!("bird-{name}.ctl")),
            pidfile: dir.join(format!("bird-{name}.pid")),
        };
        let _ = std::fs::remove_file(&bird.socket);
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "bird", "-c"])
            .arg(&conf)
            .arg("-s")
            .arg(&bird.socket)
            .arg("-P")
            .arg(&bird.pidfile)
            .stdin(Stdio::null())
            .output()
            .map_err(io_err(
                "start bird (lab churn needs BIRD 2, Debian's bird2: scripts/install-deps)",
            ))?;
        if !out.status.success() {
            return Err(LabError::Other(format!(
                "bird in {ns} ({}): {}",
                conf.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let end = Instant::now() + Duration::from_secs(60);
        while Instant::now() < end {
            if bird
                .cmd(&["show", "status"])
                .is_ok_and(|s| s.contains("up"))
            {
                return Ok(bird);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(LabError::Other(format!(
            "bird in {ns} did not answer within 60 s"
        )))
    }

    /// One `birdc` command's output.
    fn cmd(&self, args: &[&str]) -> Result<String, LabError> {
        let out = Command::new("birdc")
            .arg("-s")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(io_err("run birdc"))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() || text.contains("Unable to connect") {
            return Err(LabError::Other(format!(
                "birdc {}: {}",
                args.join(" "),
                text.trim()
            )));
        }
        Ok(text)
    }

    /// A protocol's (imported, exported) route counts.
    fn routes(&self, proto: &str) -> Result<(u64, u64), LabError> {
        let text = self.cmd(&["show", "protocols", "all", proto])?;
        Ok(parse_route_counts(&text).unwrap_or((0, 0)))
    }

    /// Whether a BGP protocol's session is up.
    fn established(&self, proto: &str) -> bool {
        self.cmd(&["show", "protocols", proto])
            .is_ok_and(|t| t.contains("Established"))
    }
}

impl Drop for Bird {
    fn drop(&mut self) {
        // Shut down, so that its kernel routes are gone before the
        // namespace is (a namespace deleted with a table in it is cleaned up
        // by the kernel afterwards, in the background); killed if it does
        // not end within 60 s.
        let pid = std::fs::read_to_string(&self.pidfile)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok());
        let _ = self.cmd(&["down"]);
        if let Some(pid) = pid {
            let end = Instant::now() + Duration::from_secs(60);
            while Instant::now() < end && Path::new(&format!("/proc/{pid}")).exists() {
                std::thread::sleep(Duration::from_millis(50));
            }
            if Path::new(&format!("/proc/{pid}")).exists() {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .stderr(Stdio::null())
                    .status();
            }
        }
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.pidfile);
    }
}

/// "Routes:  12 imported, 34 exported, ..." in `birdc show protocols all`.
fn parse_route_counts(text: &str) -> Option<(u64, u64)> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("Routes:"))?;
    let mut imported = None;
    let mut exported = None;
    for part in line.trim_start().trim_start_matches("Routes:").split(',') {
        let mut w = part.split_whitespace();
        let n = w.next()?.parse::<u64>().ok()?;
        match w.next() {
            Some("imported") => imported = Some(n),
            Some("exported") => exported = Some(n),
            _ => {}
        }
    }
    Some((imported?, exported?))
}

/// The BIRD configs: sink announces `prefixes` (as blackhole statics
/// exported over eBGP, so the next hop is sink's address), dut learns them
/// and installs them in its kernel.
/// The flapping set: `n` /24s of 100.64.0.0/10 and `n / 5` /48s of
/// 2001:db8::/32 (neither in a public table nor in the lab's ranges).
fn flap_prefixes(n: usize) -> (Vec<String>, Vec<String>) {
    let n = n.min(1 << 14);
    (
        (0..n)
            .map(|i| {
                let a = 0x6440_0000u32 + ((i as u32) << 8);
                format!("{}/24", std::net::Ipv4Addr::from(a))
            })
            .collect(),
        (0..n / 5).map(|i| format!("2001:db8:{i:x}::/48")).collect(),
    )
}

/// The `ip -batch` lines that add and delete the flapping rules, IPv4
/// then IPv6: `n4` and `n6` rules, each selecting the source
/// prefix of one of the set's prefixes and looking up [`FLAP_TABLE`], and
/// a route for that prefix in the table via sink. Packets from those
/// sources are not in the lab's traffic: the rules change the state the
/// daemon mirrors, not the load's path.
fn flap_rule_batches(f4: &[String], f6: &[String], n4: usize, n6: usize) -> [[String; 2]; 2] {
    let batch = |prefixes: &[String], n: usize, via: &str| {
        let mut add = String::new();
        let mut del = String::new();
        for (i, p) in prefixes.iter().take(n).enumerate() {
            let pref = FLAP_RULE_PRIORITY + i as u32;
            add.push_str(&format!(
                "rule add from {p} lookup {FLAP_TABLE} pref {pref}\n"
            ));
            add.push_str(&format!("route add {p} via {via} table {FLAP_TABLE}\n"));
            del.push_str(&format!("rule del pref {pref}\n"));
            del.push_str(&format!("route del {p} table {FLAP_TABLE}\n"));
        }
        [add, del]
    };
    [
        batch(f4, n4, "198.19.0.108"),
        batch(f6, n6, "2001:2:0:8000::108"),
    ]
}

/// sink's and dut's BIRD configs: sink announces `v4` and `v6` (and, with
/// `flap` > 0, the flapping set, disabled at start) over an IPv4 and an
/// IPv6 session; dut's kernel protocols install what it learns.
fn bird_configs(v4: &[String], v6: &[String], flap: usize) -> (String, String) {
    let mut sink = String::with_capacity((v4.len() + v6.len()) * 32 + 1024);
    sink.push_str("router id 198.19.0.108;\nprotocol device {}\n");
    let (f4, f6) = flap_prefixes(flap);
    for (name, family, list) in [
        ("table4", "ipv4", v4),
        ("table6", "ipv6", v6),
        ("flap4", "ipv4", &f4[..]),
        ("flap6", "ipv6", &f6[..]),
    ] {
        if list.is_empty() && name.starts_with("flap") {
            continue;
        }
        sink.push_str(&format!("protocol static {name} {{\n  {family};\n"));
        if name.starts_with("flap") {
            sink.push_str("  disabled yes;\n");
        }
        for p in list {
            sink.push_str("  route ");
            sink.push_str(p);
            sink.push_str(" blackhole;\n");
        }
        sink.push_str("}\n");
    }
    let session = |name: &str,
                   local: &str,
                   local_as: u32,
                   peer: &str,
                   peer_as: u32,
                   family: &str,
                   passive: bool,
                   import: &str,
                   export: &str| {
        format!(
            "protocol bgp {name} {{\n  local {local} as {local_as};\n  neighbor {peer} as {peer_as};\n{}  connect delay time 1;\n  connect retry time 2;\n  {family} {{ import {import}; export {export}; }};\n}}\n",
            if passive { "  passive on;\n" } else { "" }
        )
    };
    sink.push_str(&session(
        "dut4",
        "198.19.0.108",
        SINK_AS,
        "198.19.0.10",
        DUT_AS,
        "ipv4",
        true,
        "none",
        "all",
    ));
    sink.push_str(&session(
        "dut6",
        "2001:2:0:8000::108",
        SINK_AS,
        "2001:2:0:8000::10",
        DUT_AS,
        "ipv6",
        true,
        "none",
        "all",
    ));
    let mut dut = String::from(
        "router id 198.19.0.10;\nprotocol device {}\n\
         protocol kernel kernel4 {\n  ipv4 { import none; export all; };\n}\n\
         protocol kernel kernel6 {\n  ipv6 { import none; export all; };\n}\n",
    );
    dut.push_str(&session(
        "sink4",
        "198.19.0.10",
        DUT_AS,
        "198.19.0.108",
        SINK_AS,
        "ipv4",
        false,
        "all",
        "none",
    ));
    dut.push_str(&session(
        "sink6",
        "2001:2:0:8000::10",
        DUT_AS,
        "2001:2:0:8000::108",
        SINK_AS,
        "ipv6",
        false,
        "all",
        "none",
    ));
    (sink, dut)
}

/// The prefixes sink announces: the list's, without the lab's own ranges,
/// each once, at most `limit` of each family.
fn announced_prefixes(
    path: &Path,
    limit: Option<usize>,
) -> Result<(Vec<String>, Vec<String>), LabError> {
    let text = topo::read_table_text(path)?;
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    let mut seen = HashSet::new();
    let cap = limit.unwrap_or(usize::MAX);
    topo::for_each_table_prefix(&text, path, |p, net, len, is_v6| {
        let list = if is_v6 { &mut v6 } else { &mut v4 };
        if list.len() < cap && seen.insert((net, len, is_v6)) {
            list.push(p.to_string());
        }
    })?;
    Ok((v4, v6))
}

/// A contender of the churn run.
enum Forwarder {
    Kernel(KernelForwarding),
    Fastfwd(FastfwdForwarding),
}

impl Forwarder {
    fn contender(&mut self) -> &mut dyn Contender {
        match self {
            Forwarder::Kernel(k) => k,
            Forwarder::Fastfwd(f) => f,
        }
    }
    fn fastfwd(&self) -> Option<&FastfwdForwarding> {
        match self {
            Forwarder::Kernel(_) => None,
            Forwarder::Fastfwd(f) => Some(f),
        }
    }
}

/// One `fastfwd` control command's output.
/// `fastfwd ARGS --socket S` against the contender's daemon: (stdout,
/// stderr).
fn fastfwd_cmd(f: &FastfwdForwarding, args: &[&str]) -> Result<(String, String), LabError> {
    let out = Command::new(&f.binary)
        .args(args)
        .arg("--socket")
        .arg(f.control_socket())
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(format!(
            "run {} {}",
            f.binary.display(),
            args.join(" ")
        )))?;
    Ok((
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// A metric's value in `fastfwd show metrics`' text.
fn metric(text: &str, name_and_labels: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels))
        .and_then(|rest| rest.trim().parse().ok())
}

/// The metric lines counting dropped, lost or failed frames (ring
/// overflows and oversized frames included) whose value is not zero.
fn nonzero_losses(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            ["drop", "lost", "failed", "ring_full", "oversize"]
                .iter()
                .any(|w| l.contains(w))
        })
        .filter_map(|l| {
            let (name, v) = l.rsplit_once(' ')?;
            let v: u64 = v.parse().ok()?;
            (v > 0).then(|| (name.to_string(), v))
        })
        .collect()
}

fn fastfwd_counts(f: &FastfwdForwarding) -> Result<Counts, LabError> {
    let (text, _) = fastfwd_cmd(f, &["show", "metrics"])?;
    match (
        metric(&text, "fastfwd_fib_routes{family=\"ipv4\"}"),
        metric(&text, "fastfwd_fib_routes{family=\"ipv6\"}"),
    ) {
        (Some(a), Some(b)) => Ok(Counts(a, b)),
        _ => Err(LabError::Other(format!(
            "fastfwd show metrics: no fastfwd_fib_routes in {} bytes",
            text.len()
        ))),
    }
}

/// The policy rules fastfwd mirrors and the routes of its tables besides
/// main and local, by family: (rules, routes).
fn fastfwd_policy_counts(f: &FastfwdForwarding) -> Result<(Counts, Counts), LabError> {
    let (text, _) = fastfwd_cmd(f, &["show", "metrics"])?;
    let get = |name: &str, family: &str| {
        metric(&text, &format!("fastfwd_{name}{{family=\"{family}\"}}")).ok_or_else(|| {
            LabError::Other(format!(
                "fastfwd show metrics: no fastfwd_{name} in {} bytes",
                text.len()
            ))
        })
    };
    Ok((
        Counts(get("kernel_rules", "ipv4")?, get("kernel_rules", "ipv6")?),
        Counts(
            get("kernel_table_routes", "ipv4")?,
            get("kernel_table_routes", "ipv6")?,
        ),
    ))
}

fn kernel_counts(dut: &Bird) -> Result<Counts, LabError> {
    Ok(Counts(dut.routes("kernel4")?.1, dut.routes("kernel6")?.1))
}

/// How often an audit is asked, when the daemon's tables changed while
/// its XDP maps were read or it gave no answer, before it counts as
/// failed.
const AUDIT_ATTEMPTS: u32 = 5;

/// The differences `fastfwd fib audit --json` reports; an error when the
/// audit left a layer unchecked (the XDP engine's maps, when the tables
/// changed while they were read) [`AUDIT_ATTEMPTS`] times.
fn audit(f: &FastfwdForwarding) -> Result<u64, LabError> {
    let mut attempt = 1;
    loop {
        let (text, err) = fastfwd_cmd(f, &["fib", "audit", "--json"])?;
        let summary = text
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .and_then(|v| v.get("summary").cloned());
        let Some(summary) = summary else {
            // An audit the daemon did not answer (busy following the
            // kernel past the client's deadline) is asked again, said.
            let why = format!(
                "fastfwd fib audit: no summary in `{}` ({})",
                text.trim(),
                err.trim()
            );
            if attempt < AUDIT_ATTEMPTS {
                eprintln!("lab churn: {why}; asking again");
                attempt += 1;
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
            return Err(LabError::Other(why));
        };
        if let Some(why) = summary["checked"]["engine"]["skipped"].as_str() {
            if attempt < AUDIT_ATTEMPTS {
                attempt += 1;
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
            return Err(LabError::Other(format!(
                "fastfwd fib audit: the engine's maps were not checked in {AUDIT_ATTEMPTS} attempts: {why}"
            )));
        }
        return summary["differences"].as_u64().ok_or_else(|| {
            LabError::Other(format!(
                "fastfwd fib audit: no difference count in {summary}"
            ))
        });
    }
}

/// Waits until the kernel holds `kernel` routes and fastfwd (if it runs)
/// `fastfwd`, timing each from `start`; then audits fastfwd.
fn settle(
    cfg: &ChurnConfig,
    dut: &Bird,
    ff: Option<&FastfwdForwarding>,
    kernel: Counts,
    fastfwd: Counts,
    start: Instant,
) -> Result<Settle, LabError> {
    settle_with_policy(cfg, dut, ff, kernel, fastfwd, None, start)
}

/// [`settle`], with fastfwd also holding `policy` (its rules and other
/// tables' routes, [`fastfwd_policy_counts`]) when given.
fn settle_with_policy(
    cfg: &ChurnConfig,
    dut: &Bird,
    ff: Option<&FastfwdForwarding>,
    kernel: Counts,
    fastfwd: Counts,
    policy: Option<(Counts, Counts)>,
    start: Instant,
) -> Result<Settle, LabError> {
    let mut s = Settle::default();
    let end = start + cfg.settle_timeout;
    while Instant::now() < end {
        if interrupted() {
            return Err(LabError::Interrupted);
        }
        if s.kernel_s.is_none() && kernel_counts(dut)? == kernel {
            s.kernel_s = Some(start.elapsed().as_secs_f64());
        }
        if let Some(f) = ff.filter(|_| s.fastfwd_s.is_none()) {
            let there = fastfwd_counts(f).and_then(|c| {
                Ok(c == fastfwd
                    && match policy {
                        Some(p) => fastfwd_policy_counts(f)? == p,
                        None => true,
                    })
            });
            match there {
                Ok(true) => s.fastfwd_s = Some(start.elapsed().as_secs_f64()),
                Ok(_) => {}
                // Not there yet, as far as anyone asking can tell.
                Err(_) => s.unanswered_reads += 1,
            }
        }
        if s.kernel_s.is_some() && (ff.is_none() || s.fastfwd_s.is_some()) {
            break;
        }
        std::thread::sleep(POLL);
    }
    if let Some(f) = ff {
        match audit(f) {
            Ok(n) => s.audit_differences = Some(n),
            // Recorded as not audited (the run is then not clean).
            Err(e) => eprintln!("lab churn: {e}"),
        }
    }
    Ok(s)
}

/// dut's two sessions, down or up.
fn sessions(dut: &Bird, up: bool) -> Result<(), LabError> {
    for p in ["sink4", "sink6"] {
        dut.cmd(&[if up { "enable" } else { "disable" }, p])?;
    }
    Ok(())
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn run_one(
    cfg: &ChurnConfig,
    fwd: &mut Forwarder,
    configs: &(String, String),
    announced: Counts,
) -> Result<ChurnResult, LabError> {
    let say = |m: String| {
        if cfg.verbose {
            eprintln!("lab churn: {m}");
        }
    };
    let topo = Topology::up(&TopoConfig::new(&cfg.tag))?;
    let _guard = TopoGuard(topo.clone());
    // d0's NAPI thread preempts whatever else runs on the forwarding core,
    // as a NIC's receive softirq does.
    if let Some(pid) = topo.napi_pid {
        crate::sys::set_realtime(pid, 50)
            .map_err(io_err(format!("SCHED_FIFO for d0's NAPI thread {pid}")))?;
    }

    let name = fwd.contender().name();
    let description = fwd.contender().description();
    // fastfwd first, free to use every core (its workers pin themselves);
    // then this thread and its children (both BIRDs, the generator and the
    // receiver) on the generator's core, off the forwarding core, as a
    // router keeps its routing daemon off its forwarding cores. (A thread
    // of its own per contender: the pinning ends with it.)
    fwd.contender().activate(&topo)?;
    if let Some(c) = topo.placement.gen_cpu {
        crate::sys::pin_to_cpu(0, c).map_err(io_err(format!("pin the lab to cpu {c}")))?;
    }
    say(format!(
        "{name}: sink's BIRD loads {} + {} prefixes",
        announced.0, announced.1
    ));
    let sink = Bird::start(&topo.sink_ns, &cfg.dir, "sink", &configs.0)?;
    if sink.routes("table4")?.0 != announced.0 || sink.routes("table6")?.0 != announced.1 {
        return Err(LabError::Other(format!(
            "sink's BIRD holds {:?} / {:?} routes, {announced:?} announced",
            sink.routes("table4")?,
            sink.routes("table6")?
        )));
    }
    let result = churn_with(cfg, fwd, &topo, &sink, configs, announced, &say);
    let deactivated = fwd.contender().deactivate(&topo);
    drop(sink);
    let mut r = result?;
    deactivated?;
    r.contender = name;
    r.description = description;
    Ok(r)
}

fn churn_with(
    cfg: &ChurnConfig,
    fwd: &mut Forwarder,
    topo: &Topology,
    sink: &Bird,
    configs: &(String, String),
    announced: Counts,
    say: &dyn Fn(String),
) -> Result<ChurnResult, LabError> {
    let ff = fwd.fastfwd();
    let base = match ff {
        Some(f) => fastfwd_counts(f)?,
        None => Counts(0, 0),
    };
    let full = Counts(base.0 + announced.0, base.1 + announced.1);
    let start = Instant::now();
    let dut = Bird::start(&topo.dut_ns, &cfg.dir, "dut", &configs.1)?;
    let initial = settle(cfg, &dut, ff, announced, full, start)?;
    say(format!("table loaded: {initial:?}"));
    if initial.kernel_s.is_none() || !(dut.established("sink4") || announced.0 == 0) {
        return Err(LabError::Other(format!(
            "the table did not reach dut's kernel within {:?} (kernel holds {:?})",
            cfg.settle_timeout,
            kernel_counts(&dut)?
        )));
    }
    // Socket-buffer input: the AF_PACKET generator sleeps between batches
    // at this load, where the live-frames generator spins its core, which
    // the control plane (both BIRDs, fastfwd's control thread) shares.
    let mut traffic = Traffic::default_v4();
    traffic.input = InputMode::Packet;
    let mut runner = LabRunner::new(topo, traffic)?;
    let stop = AtomicBool::new(false);
    let mut events = Vec::new();
    let mut readers = [
        NetDevReader::open(Some(&topo.gen_ns), "g0")?,
        NetDevReader::open(Some(&topo.dut_ns), "d0")?,
        NetDevReader::open(Some(&topo.dut_ns), "d1")?,
        NetDevReader::open(Some(&topo.sink_ns), "s0")?,
    ];
    let mut counters =
        || -> Result<Vec<_>, LabError> { readers.iter_mut().map(|r| Ok(r.read()?)).collect() };
    let before = counters()?;
    let traffic_start = Instant::now();
    let longest = cfg.settle_timeout * (2 * cfg.cycles + 1) + cfg.flap + Duration::from_secs(10);
    let (trial, cycles) = std::thread::scope(|s| {
        let trial =
            s.spawn(|| runner.trial_until(Some(cfg.rate_pps), cfg.frame_len, longest, &stop));
        let cycles = (|| -> Result<(Vec<Cycle>, Option<Flap>), LabError> {
            // Traffic flowing before the first withdraw.
            std::thread::sleep(Duration::from_secs(2));
            let mut cycles = Vec::new();
            for i in 0..cfg.cycles {
                let t = Instant::now();
                events.push((
                    traffic_start.elapsed().as_secs_f64(),
                    format!("withdraw {}", i + 1),
                ));
                sessions(&dut, false)?;
                let withdraw = settle(cfg, &dut, ff, Counts(0, 0), base, t)?;
                say(format!("cycle {}: withdrawn {withdraw:?}", i + 1));
                let t = Instant::now();
                events.push((
                    traffic_start.elapsed().as_secs_f64(),
                    format!("reinstall {}", i + 1),
                ));
                sessions(&dut, true)?;
                let reinstall = settle(cfg, &dut, ff, announced, full, t)?;
                say(format!("cycle {}: reinstalled {reinstall:?}", i + 1));
                cycles.push(Cycle {
                    withdraw,
                    reinstall,
                });
            }
            let flap = if cfg.flap.is_zero() {
                None
            } else {
                events.push((traffic_start.elapsed().as_secs_f64(), "flap".into()));
                let f = flap(cfg, sink, &dut, &topo.dut_ns, ff, announced, full)?;
                events.push((traffic_start.elapsed().as_secs_f64(), "flap end".into()));
                Some(f)
            };
            std::thread::sleep(Duration::from_secs(1));
            Ok((cycles, flap))
        })();
        stop.store(true, Ordering::Relaxed);
        let trial = trial
            .join()
            .map_err(|_| LabError::Other("traffic thread panicked".into()));
        (trial, cycles)
    });
    let (cycles, flap) = cycles?;
    let trial = trial??;
    let after = counters()?;
    let interface_drops = vec![
        ("g0 tx".to_string(), after[0].since(&before[0]).tx_drop),
        ("d0 rx".to_string(), after[1].since(&before[1]).rx_drop),
        ("d1 tx".to_string(), after[2].since(&before[2]).tx_drop),
        ("s0 rx".to_string(), after[3].since(&before[3]).rx_drop),
    ];
    let (kernel_resyncs, rss, fastfwd_drops) = match ff {
        Some(f) => {
            let (text, _) = fastfwd_cmd(f, &["show", "metrics"])?;
            (
                metric(&text, "fastfwd_kernel_resyncs_total{}"),
                f.pid().and_then(rss_kib),
                nonzero_losses(&text),
            )
        }
        None => (None, None, Vec::new()),
    };
    let mut rates = trial.measured_rates(1);
    let rate_min_pps = rates.iter().copied().min().unwrap_or(0);
    let generator_refused = trial
        .generator
        .attempted
        .saturating_sub(trial.generator.sent)
        + interface_drops[0].1;
    Ok(ChurnResult {
        contender: String::new(),
        description: String::new(),
        fastfwd: ff.is_some(),
        routes: (announced.0, announced.1),
        initial,
        cycles,
        offered_pps: cfg.rate_pps as u64,
        sent: trial.generator.attempted,
        received: trial.recv.received,
        lost: trial.lost,
        generator_refused,
        lost_beyond_generator: trial.lost.saturating_sub(generator_refused),
        reordered: trial.recv.reordered,
        duplicates: trial.recv.duplicates,
        interface_drops,
        fastfwd_drops,
        rate_per_second: trial.sink_rx_per_second.clone(),
        events,
        rate_min_pps,
        rate_median_pps: median(&mut rates),
        kernel_resyncs: kernel_resyncs.or(ff.map(|_| 0)),
        rss_kib: rss,
        flap,
    })
}

/// Announces and withdraws sink's flapping set every [`FLAP_PERIOD`] for
/// `cfg.flap`, sampling fastfwd's memory; then withdraws it for good and
/// waits for the table (`announced` in the kernel, `full` in fastfwd).
fn flap(
    cfg: &ChurnConfig,
    sink: &Bird,
    dut: &Bird,
    dut_ns: &str,
    ff: Option<&FastfwdForwarding>,
    announced: Counts,
    full: Counts,
) -> Result<Flap, LabError> {
    let say = |m: String| {
        if cfg.verbose {
            eprintln!("lab churn: {m}");
        }
    };
    let (f4, f6) = flap_prefixes(cfg.flap_prefixes);
    let rules = flap_rule_batches(&f4, &f6, cfg.flap_rules, cfg.flap_rules6);
    let batches = [("-4", "rules4"), ("-6", "rules6")].map(|(fam, name)| {
        (
            fam,
            [true, false].map(|up| {
                cfg.dir
                    .join(format!("{name}-{}.batch", if up { "add" } else { "del" }))
            }),
        )
    });
    for (i, (_, paths)) in batches.iter().enumerate() {
        for (j, path) in paths.iter().enumerate() {
            std::fs::write(path, &rules[i][j])
                .map_err(io_err(format!("write {}", path.display())))?;
        }
    }
    let steps =
        std::cell::RefCell::new(
            ["birdc", "ip -4 -batch", "ip -6 -batch"].map(|step| StepTime {
                step: step.into(),
                ..StepTime::default()
            }),
        );
    let set = |up: bool| -> Result<(), LabError> {
        for (p, n) in [("flap4", f4.len()), ("flap6", f6.len())] {
            if n > 0 {
                let t = Instant::now();
                sink.cmd(&[if up { "enable" } else { "disable" }, p])?;
                steps.borrow_mut()[0].add(t.elapsed());
            }
        }
        for (i, (fam, paths)) in batches.iter().enumerate() {
            if rules[i][0].is_empty() {
                continue;
            }
            let path = &paths[usize::from(!up)];
            let t = Instant::now();
            let out = Command::new("ip")
                .args(["-n", dut_ns, fam, "-batch"])
                .arg(path)
                .output()
                .map_err(io_err("run ip -batch"))?;
            if !out.status.success() {
                return Err(LabError::Other(format!(
                    "ip -n {dut_ns} {fam} -batch {}: {}",
                    path.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
            steps.borrow_mut()[1 + i].add(t.elapsed());
        }
        Ok(())
    };
    let rule_counts = (
        rules[0][0].lines().count() as u64 / 2,
        rules[1][0].lines().count() as u64 / 2,
    );
    say(format!(
        "flapping {} + {} prefixes and {} + {} rules (each with a route in table {FLAP_TABLE}) every {FLAP_PERIOD:?} for {:?}",
        f4.len(),
        f6.len(),
        rule_counts.0,
        rule_counts.1,
        cfg.flap
    ));
    let base_policy = ff.map(fastfwd_policy_counts).transpose()?;
    let start = Instant::now();
    let mut changes = 0u64;
    let mut rss = Vec::new();
    let mut next_sample = start;
    let mut up = false;
    while start.elapsed() < cfg.flap {
        if interrupted() {
            return Err(LabError::Interrupted);
        }
        let tick = start + FLAP_PERIOD * (changes as u32);
        if let Some(wait) = tick.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        up = !up;
        let t = Instant::now();
        set(up)?;
        changes += 1;
        say(format!(
            "flap {changes}: set {} in {:.2} s",
            if up { "announced" } else { "withdrawn" },
            t.elapsed().as_secs_f64()
        ));
        if Instant::now() >= next_sample {
            if let Some(k) = ff.and_then(FastfwdForwarding::pid).and_then(rss_kib) {
                rss.push((start.elapsed().as_secs_f64(), k));
                say(format!(
                    "flap {:.0} s: RSS {:.1} MiB",
                    start.elapsed().as_secs_f64(),
                    k as f64 / 1024.0
                ));
            }
            next_sample += RSS_SAMPLE;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let per_flip = (f4.len() + f6.len()) as u64 + 2 * (rule_counts.0 + rule_counts.1);
    let changes_per_s = (changes * per_flip) as f64 / seconds;
    // The last change in place: the set announced and the rules added,
    // mirrored and audited, before it goes for good.
    if !up {
        set(true)?;
        changes += 1;
    }
    let t = Instant::now();
    let set_size = Counts(f4.len() as u64, f6.len() as u64);
    let rules_added = Counts(rule_counts.0, rule_counts.1);
    let plus = |a: Counts, b: Counts| Counts(a.0 + b.0, a.1 + b.1);
    let in_place = settle_with_policy(
        cfg,
        dut,
        ff,
        plus(announced, set_size),
        plus(full, set_size),
        base_policy.map(|(r, t)| (plus(r, rules_added), plus(t, rules_added))),
        t,
    )?;
    say(format!("flap in place: {in_place:?}"));
    set(false)?;
    let t = Instant::now();
    // (No sample after this: the audit's copies of the tables are held
    // for its length, and the contender's RSS at the end is recorded.)
    let after = settle(cfg, dut, ff, announced, full, t)?;
    say(format!("flap over: {after:?}"));
    let steps = steps.into_inner().to_vec();
    for s in &steps {
        say(format!(
            "flap step {}: {} runs, {:.2} s in all, slowest {:.2} s",
            s.step, s.runs, s.total_s, s.max_s
        ));
    }
    Ok(Flap {
        seconds,
        prefixes: (f4.len() as u64, f6.len() as u64),
        rules: rule_counts,
        changes,
        changes_per_s,
        rss_kib: rss,
        in_place,
        after,
        steps,
    })
}

/// Runs every contender of `cfg` through the churn.
pub fn run_churn(cfg: &ChurnConfig) -> Result<ChurnReport, LabError> {
    std::fs::create_dir_all(&cfg.dir).map_err(io_err(format!("create {}", cfg.dir.display())))?;
    let (v4, v6) = announced_prefixes(&cfg.table, cfg.limit)?;
    let announced = Counts(v4.len() as u64, v6.len() as u64);
    let configs = bird_configs(
        &v4,
        &v6,
        if cfg.flap.is_zero() {
            0
        } else {
            cfg.flap_prefixes
        },
    );
    drop((v4, v6));
    let cores = if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
        "1"
    } else {
        "0"
    };
    let mut results = Vec::new();
    for c in &cfg.contenders {
        let mut fwd = match c.as_str() {
            "kernel" => Forwarder::Kernel(KernelForwarding {
                firewall: FirewallPreset::None,
            }),
            "xdp-engine" | "xdp" | "packet" => Forwarder::Fastfwd(FastfwdForwarding::new(
                cfg.binary.clone(),
                c,
                cores,
                cfg.dir.clone(),
            )),
            other => {
                return Err(LabError::Other(format!(
                    "contender `{other}`: one of kernel, xdp-engine, xdp, packet"
                )));
            }
        };
        let r = std::thread::scope(|s| {
            s.spawn(|| run_one(cfg, &mut fwd, &configs, announced))
                .join()
                .map_err(|_| LabError::Other("churn thread panicked".into()))
        })??;
        results.push(r);
    }
    Ok(ChurnReport {
        table: cfg.table.display().to_string(),
        announced: (announced.0, announced.1),
        cycles: cfg.cycles,
        results,
    })
}

/// The report as a text table.
pub fn churn_table(r: &ChurnReport) -> String {
    let secs = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    let mut out = format!(
        "lab churn: {} + {} prefixes announced over BGP, {} withdraw/reinstall cycle(s) per contender\n\n\
         | contender | sent | lost beyond the generator | refused by the generator | reordered | rate min / median kpps | withdraw s: kernel / fastfwd (worst) | reinstall s: kernel / fastfwd (worst) | audit differences | resyncs | RSS MiB |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        r.announced.0, r.announced.1, r.cycles
    );
    for x in &r.results {
        let w = x.worst();
        let audits: u64 = std::iter::once(&x.initial)
            .chain(x.cycles.iter().flat_map(|c| [&c.withdraw, &c.reinstall]))
            .filter_map(|s| s.audit_differences)
            .sum();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.1} / {:.1} | {} / {} | {} / {} | {} | {} | {} |\n",
            x.contender,
            x.sent,
            x.lost_beyond_generator,
            x.generator_refused,
            x.reordered,
            x.rate_min_pps as f64 / 1e3,
            x.rate_median_pps as f64 / 1e3,
            secs(w[0]),
            secs(w[1]),
            secs(w[2]),
            secs(w[3]),
            if x.fastfwd {
                audits.to_string()
            } else {
                "-".into()
            },
            x.kernel_resyncs.map_or("-".into(), |n| n.to_string()),
            x.rss_kib
                .map_or("-".into(), |k| format!("{:.0}", k as f64 / 1024.0)),
        ));
    }
    for x in &r.results {
        let Some(f) = &x.flap else { continue };
        let mib = |k: u64| k as f64 / 1024.0;
        let rss = f.rss_first_last().map_or("-".into(), |(a, b)| {
            format!(
                "largest in the first minute {:.1} MiB, in the last {:.1} MiB ({:+.1}%)",
                mib(a),
                mib(b),
                (b as f64 / a as f64 - 1.0) * 100.0
            )
        });
        out.push_str(&format!(
            "\nflap, {}: {} + {} prefixes and {} + {} rules with their table routes added or removed {} times in {:.0} s ({:.0} changes/s); RSS {rss}; \
             in place at the end: kernel {} s, fastfwd {} s, audit differences {}; \
             withdrawn after: kernel {} s, fastfwd {} s, audit differences {}\n",
            x.contender,
            f.prefixes.0,
            f.prefixes.1,
            f.rules.0,
            f.rules.1,
            f.changes,
            f.seconds,
            f.changes_per_s,
            secs(f.in_place.kernel_s),
            secs(f.in_place.fastfwd_s),
            f.in_place
                .audit_differences
                .map_or("-".into(), |n| n.to_string()),
            secs(f.after.kernel_s),
            secs(f.after.fastfwd_s),
            f.after
                .audit_differences
                .map_or("-".into(), |n| n.to_string()),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bird_route_counts_parse() {
        let text = "Name       Proto      Table      State  Since         Info\n\
                    kernel4    Kernel     master4    up     22:00:35.201\n\
                    \x20 Channel ipv4\n    State:          UP\n\
                    \x20   Routes:         0 imported, 901811 exported, 0 preferred\n";
        assert_eq!(parse_route_counts(text), Some((0, 901_811)));
        assert_eq!(parse_route_counts("no routes line"), None);
    }

    #[test]
    fn configs_announce_every_prefix_once_with_both_sessions() {
        let (sink, dut) = bird_configs(
            &["1.0.0.0/24".into(), "1.0.4.0/22".into()],
            &["2001:db8::/32".into()],
            0,
        );
        assert_eq!(sink.matches(" blackhole;").count(), 3);
        assert!(sink.contains("protocol bgp dut4") && sink.contains("protocol bgp dut6"));
        assert!(sink.contains("passive on;"));
        assert!(dut.contains("protocol kernel kernel4") && dut.contains("protocol kernel kernel6"));
        assert!(dut.contains("neighbor 198.19.0.108 as 65002;"));
        assert!(!dut.contains("passive"));
    }

    #[test]
    fn flapping_rules_are_added_and_deleted_with_their_routes() {
        let (f4, f6) = flap_prefixes(20);
        let [[add4, del4], [add6, del6]] = flap_rule_batches(&f4, &f6, 10, 2);
        assert_eq!(add4.lines().count(), 20);
        assert_eq!(del4.lines().count(), 20);
        assert_eq!(add6.lines().count(), 4);
        assert!(add4.starts_with(
            "rule add from 100.64.0.0/24 lookup 100 pref 10000\n\
             route add 100.64.0.0/24 via 198.19.0.108 table 100\n"
        ));
        assert!(add4.ends_with("rule add from 100.64.9.0/24 lookup 100 pref 10009\nroute add 100.64.9.0/24 via 198.19.0.108 table 100\n"));
        assert!(del4.starts_with("rule del pref 10000\nroute del 100.64.0.0/24 table 100\n"));
        assert!(add6.contains("rule add from 2001:db8:1::/48 lookup 100 pref 10001\n"));
        assert!(del6.ends_with("route del 2001:db8:1::/48 table 100\n"));
        // Never more rules than the set has prefixes.
        let [[add4, _], [add6, _]] = flap_rule_batches(&f4, &f6, 1_000, 1_000);
        assert_eq!(add4.lines().count(), 40);
        assert_eq!(add6.lines().count(), 8);
    }

    #[test]
    fn the_flapping_set_starts_disabled_outside_the_table() {
        let (sink, _) = bird_configs(&["1.0.0.0/24".into()], &[], 10);
        assert!(sink.contains("protocol static flap4 {\n  ipv4;\n  disabled yes;\n"));
        assert!(sink.contains("protocol static flap6 {\n  ipv6;\n  disabled yes;\n"));
        assert!(sink.contains("route 100.64.9.0/24 blackhole;"));
        assert!(sink.contains("route 2001:db8:1::/48 blackhole;"));
        assert_eq!(sink.matches(" blackhole;").count(), 1 + 10 + 2);
        let (f4, f6) = flap_prefixes(1 << 20);
        assert_eq!((f4.len(), f6.len()), (1 << 14, (1 << 14) / 5));
        assert_eq!(f4.last().map(String::as_str), Some("100.127.255.0/24"));
    }

    #[test]
    fn metric_lines_are_found_by_name_and_labels() {
        let text = "# HELP fastfwd_fib_routes Routes installed, by family.\n\
                    fastfwd_fib_routes{family=\"ipv4\"} 901817\n\
                    fastfwd_fib_routes{family=\"ipv6\"} 160152\n";
        assert_eq!(
            metric(text, "fastfwd_fib_routes{family=\"ipv4\"}"),
            Some(901_817)
        );
        assert_eq!(
            metric(text, "fastfwd_fib_routes{family=\"ipv6\"}"),
            Some(160_152)
        );
        assert_eq!(metric(text, "fastfwd_kernel_resyncs_total{}"), None);
    }
}
