//! The lab topology: three network namespaces joined by veth pairs,
//!
//! ```text
//! gen  g0 198.18.0.108/24 ── d0 198.18.0.10/24  dut  d1 198.19.0.10/24 ── s0 198.19.0.108/24  sink
//!          2001:2::108/64        2001:2::10/64        2001:2:0:8000::10/64    2001:2:0:8000::108/64
//! ```
//!
//! built with `ip`, `ethtool`, `sysctl` and `nft`. The dut routes
//! 198.18.0.0/16 and 192.18.0.0/16 toward gen and 198.19.0.0/16 and
//! 192.19.0.0/16 toward sink, 2001:2::/49 toward gen and
//! 2001:2:0:8000::/49 toward sink (RFC 2544 and RFC 5180 benchmark ranges),
//! with static neighbour entries unless asked for dynamic ones.
//!
//! Namespaces are named `fflab-<tag>-{gen,dut,sink}` and each carries a
//! marker (its veth's alias `fastfwd-lab:<tag>`): `down` refuses to delete
//! a namespace without it.
//!
//! With [`Egress::Lag`] the dut's side toward the sink is a link
//! aggregation of two veth pairs: bond d1 (members d1a, d1b) in dut and
//! bond s0 (members s0a, s0b) in sink, both balance-xor with the layer3+4
//! transmit hash, under the same names, addresses and MACs, so everything
//! else stays as drawn above.

use serde::Serialize;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;

/// MAC of gen's g0.
pub const GEN_MAC: [u8; 6] = [0x02, 0x66, 0x66, 0x00, 0x00, 0x01];
/// MAC of dut's d0 (the generator's destination MAC).
pub const DUT_IN_MAC: [u8; 6] = [0x02, 0x66, 0x66, 0x00, 0x00, 0x02];
/// MAC of dut's d1.
pub const DUT_OUT_MAC: [u8; 6] = [0x02, 0x66, 0x66, 0x00, 0x00, 0x03];
/// MAC of sink's s0.
pub const SINK_MAC: [u8; 6] = [0x02, 0x66, 0x66, 0x00, 0x00, 0x04];
/// Number of next hops toward sink used for the full table.
pub const FULL_TABLE_NEXT_HOPS: u32 = 16;

/// The full table's first IPv6 next hop (2001:2:0:8000::100, on d1's link);
/// the others follow it. The IPv4 ones are 198.19.0.100 and up.
const FULL_TABLE_V6_NEXT_HOP_BASE: u128 = 0x2001_0002_0000_8000_0000_0000_0000_0100;

/// Topology errors.
#[derive(Debug, thiserror::Error)]
pub enum TopoError {
    /// A command failed.
    #[error("`{cmd}` failed: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A namespace exists that this lab did not create.
    #[error("namespace {0} exists but carries no fastfwd-lab marker: not touching it")]
    NotOurs(String),
    /// A file could not be read.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The system error.
        source: std::io::Error,
    },
    /// Bad option value.
    #[error("{0}")]
    Invalid(String),
}

/// nftables rule sets loaded into the dut's forward hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "n")]
pub enum FirewallPreset {
    /// No rules.
    None,
    /// N rules, one per address, none matching the lab's traffic.
    Linear(u32),
    /// One rule matching against a set of N addresses (none the lab's).
    Set(u32),
}

impl FirewallPreset {
    /// Parses `none`, `linear N` / `linear:N`, `set N` / `set:N`.
    pub fn parse(text: &str) -> Result<Self, TopoError> {
        let t = text.trim().replace(':', " ");
        let mut it = t.split_whitespace();
        let kind = it.next().unwrap_or("none");
        let n = it.next().map(|n| {
            n.parse::<u32>().map_err(|_| {
                TopoError::Invalid(format!("firewall preset `{text}`: N must be a number"))
            })
        });
        match (kind, n) {
            ("none", None) => Ok(Self::None),
            ("linear", Some(n)) => Ok(Self::Linear(n?)),
            ("set", Some(n)) => Ok(Self::Set(n?)),
            _ => Err(TopoError::Invalid(format!(
                "firewall preset `{text}`: expected none, linear N or set N"
            ))),
        }
    }

    /// Short label (`none`, `linear-1000`, `set-1000`).
    pub fn label(&self) -> String {
        match self {
            Self::None => "none".into(),
            Self::Linear(n) => format!("linear-{n}"),
            Self::Set(n) => format!("set-{n}"),
        }
    }

    /// The `nft -f` script (flushes the lab's table first).
    pub fn script(&self) -> String {
        let addr = |i: u32| {
            let i = i + 1;
            format!("10.{}.{}.{}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff)
        };
        let mut s = String::from("table inet fastfwd_lab\ndelete table inet fastfwd_lab\n");
        match self {
            Self::None => {}
            Self::Linear(n) => {
                s.push_str("table inet fastfwd_lab {\n chain forward {\n  type filter hook forward priority filter; policy accept;\n");
                for i in 0..*n {
                    s.push_str(&format!("  ip saddr {} udp dport 53 drop\n", addr(i)));
                }
                s.push_str(" }\n}\n");
            }
            Self::Set(n) => {
                s.push_str("table inet fastfwd_lab {\n set blocked {\n  type ipv4_addr\n");
                if *n > 0 {
                    let elems: Vec<String> = (0..*n).map(addr).collect();
                    s.push_str(&format!("  elements = {{ {} }}\n", elems.join(", ")));
                }
                s.push_str(" }\n chain forward {\n  type filter hook forward priority filter; policy accept;\n  ip saddr @blocked drop\n }\n}\n");
            }
        }
        s
    }
}

impl FirewallPreset {
    /// The same rules in fastfwd's rule language (docs/firewall.md), for a
    /// fastfwd contender that must do the same work as the kernel's.
    pub fn fastfwd_rules(&self) -> String {
        let addr = |i: u32| {
            let i = i + 1;
            format!("10.{}.{}.{}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff)
        };
        let mut s = String::from("chain forward {\n    policy accept\n");
        match self {
            Self::None => {}
            Self::Linear(n) => {
                for i in 0..*n {
                    s.push_str(&format!("    ip saddr {} udp dport 53 drop\n", addr(i)));
                }
            }
            Self::Set(n) => {
                let elems: Vec<String> = (0..*n).map(addr).collect();
                s = format!("set blocked {{ {} }}\n{s}", elems.join(", "));
                if *n > 0 {
                    s.push_str("    ip saddr @blocked drop\n");
                }
            }
        }
        s.push_str("}\n");
        s
    }
}

/// Where things run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// Core for the generator thread.
    pub gen_cpu: Option<usize>,
    /// Core for the forwarding work (d0's NAPI thread).
    pub fwd_cpu: Option<usize>,
    /// Core for the receiver thread.
    pub sink_cpu: Option<usize>,
    /// Give d0 a threaded NAPI (TSO off on g0, GRO on d0) so forwarding
    /// runs in its own kernel thread rather than in the generator's context.
    pub napi_threaded: bool,
}

impl Placement {
    /// The fair placement on two cores (docs/lab.md): generator and
    /// receiver on core 0, d0's NAPI thread (the forwarding) on core 1.
    pub fn two_core_default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpus >= 2 {
            Self {
                gen_cpu: Some(0),
                fwd_cpu: Some(1),
                sink_cpu: Some(0),
                napi_threaded: true,
            }
        } else {
            Self {
                napi_threaded: true,
                ..Self::default()
            }
        }
    }
}

/// The dut's link toward the sink.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Egress {
    /// One veth pair, d1 ── s0.
    #[default]
    Port,
    /// Two veth pairs, d1a ── s0a and d1b ── s0b, bonded on each side as
    /// d1 and s0 (balance-xor, layer3+4, miimon 100 ms): a two-member LAG
    /// whose members carry the flows the bond's hash gives them. Needs the
    /// kernel's bonding driver.
    Lag,
}

impl Egress {
    /// Scenario name in reports.
    pub fn label(self) -> &'static str {
        match self {
            Egress::Port => "two-port",
            Egress::Lag => "lag",
        }
    }

    /// The dut's egress members (none for a single port).
    pub fn dut_members(self) -> &'static [&'static str] {
        match self {
            Egress::Port => &[],
            Egress::Lag => &["d1a", "d1b"],
        }
    }

    /// The sink's links that carry frames (s0 itself, or its members).
    pub fn sink_links(self) -> &'static [&'static str] {
        match self {
            Egress::Port => &["s0"],
            Egress::Lag => &["s0a", "s0b"],
        }
    }
}

/// The bond options of [`Egress::Lag`] (`ip link add ... type bond ...`).
pub const LAG_BOND_OPTIONS: [&str; 6] = [
    "mode",
    "balance-xor",
    "xmit_hash_policy",
    "layer3+4",
    "miimon",
    "100",
];

/// How the topology is built.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopoConfig {
    /// Name tag: namespaces are `fflab-<tag>-gen|dut|sink`.
    pub tag: String,
    /// Static neighbour entries (true) or ARP/ND (false).
    pub static_neighbours: bool,
    /// Kernel IPv4/IPv6 forwarding in dut.
    pub forwarding: bool,
    /// nftables preset in dut.
    pub firewall: FirewallPreset,
    /// CPU placement.
    pub placement: Placement,
    /// The dut's link toward the sink.
    pub egress: Egress,
}

impl TopoConfig {
    /// Defaults for a tag: static neighbours, forwarding on, no firewall,
    /// the two-core placement.
    pub fn new(tag: &str) -> Self {
        Self {
            tag: tag.to_string(),
            static_neighbours: true,
            forwarding: true,
            firewall: FirewallPreset::None,
            placement: Placement::two_core_default(),
            egress: Egress::Port,
        }
    }
}

/// The three namespaces of one lab.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Topology {
    /// Tag.
    pub tag: String,
    /// Generator namespace.
    pub gen_ns: String,
    /// Device-under-test namespace.
    pub dut_ns: String,
    /// Sink namespace.
    pub sink_ns: String,
    /// PID of d0's NAPI thread, when threaded.
    pub napi_pid: Option<i32>,
    /// Placement in force.
    pub placement: Placement,
    /// The dut's link toward the sink.
    pub egress: Egress,
}

/// What loading the full table did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FibLoad {
    /// IPv4 routes installed.
    pub routes_v4: u64,
    /// IPv6 routes installed.
    pub routes_v6: u64,
    /// Prefixes skipped because they overlap the lab's own ranges.
    pub skipped: u64,
    /// Distinct next hops (all toward sink).
    pub next_hops: u32,
    /// Seconds the routes took to install.
    pub seconds: f64,
}

fn run_cmd(cmd: &mut Command) -> Result<String, TopoError> {
    let line = format!("{cmd:?}").replace('"', "");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| TopoError::Io {
            what: line.clone(),
            source: e,
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(TopoError::Command {
            cmd: line,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

fn ip(args: &[&str]) -> Result<String, TopoError> {
    run_cmd(Command::new("ip").args(args))
}

fn ipn(ns: &str, args: &[&str]) -> Result<String, TopoError> {
    run_cmd(Command::new("ip").arg("-n").arg(ns).args(args))
}

fn exec_in(ns: &str, args: &[&str]) -> Result<String, TopoError> {
    run_cmd(Command::new("ip").args(["netns", "exec", ns]).args(args))
}

fn exec_in_with_stdin(ns: &str, args: &[&str], input: &str) -> Result<String, TopoError> {
    let line = format!("ip netns exec {ns} {}", args.join(" "));
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| TopoError::Io {
            what: line.clone(),
            source: e,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| TopoError::Io {
                what: line.clone(),
                source: e,
            })?;
    }
    let out = child.wait_with_output().map_err(|e| TopoError::Io {
        what: line.clone(),
        source: e,
    })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stderr: String = stderr.lines().take(5).collect::<Vec<_>>().join("; ");
        Err(TopoError::Command { cmd: line, stderr })
    }
}

fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Namespaces that exist now.
pub fn list_netns() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn napi_threads(ifname: &str) -> Vec<i32> {
    let prefix = format!("napi/{ifname}-");
    let mut out = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                && comm.trim_end().starts_with(&prefix)
            {
                out.push(pid);
            }
        }
    }
    out
}

impl Topology {
    /// The names for `tag` (nothing is created).
    pub fn named(tag: &str) -> Self {
        Self {
            tag: tag.to_string(),
            gen_ns: format!("fflab-{tag}-gen"),
            dut_ns: format!("fflab-{tag}-dut"),
            sink_ns: format!("fflab-{tag}-sink"),
            napi_pid: None,
            placement: Placement::default(),
            egress: Egress::Port,
        }
    }

    fn marker(&self) -> String {
        format!("fastfwd-lab:{}", self.tag)
    }

    fn namespaces(&self) -> [(&str, &str); 3] {
        [
            (self.gen_ns.as_str(), "g0"),
            (self.dut_ns.as_str(), "d0"),
            (self.sink_ns.as_str(), "s0"),
        ]
    }

    /// Is `ns` marked as this lab's (its veth carries the marker alias)?
    fn is_ours(&self, ns: &str, ifname: &str) -> bool {
        ipn(ns, &["-o", "link", "show", "dev", ifname])
            .is_ok_and(|o| o.contains(&format!("alias {}", self.marker())))
    }

    /// Builds the topology. Stale namespaces of the same tag that carry the
    /// marker are removed first; unmarked ones make this fail. On any
    /// failure what was created is removed again.
    pub fn up(cfg: &TopoConfig) -> Result<Self, TopoError> {
        if cfg.tag.is_empty()
            || !cfg
                .tag
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(TopoError::Invalid(format!(
                "tag `{}`: use letters, digits, - and _",
                cfg.tag
            )));
        }
        let mut topo = Self::named(&cfg.tag);
        topo.egress = cfg.egress;
        let existing = list_netns();
        if topo
            .namespaces()
            .iter()
            .any(|(ns, _)| existing.iter().any(|e| e == ns))
        {
            topo.down()?;
        }
        match topo.build(cfg) {
            Ok(()) => Ok(topo),
            Err(e) => {
                // None of these names existed before this call (a marked
                // stale lab was removed above, an unmarked one refused), so
                // whatever exists now was made here, marked or not yet.
                let now = list_netns();
                for (ns, _) in topo.namespaces() {
                    if now.iter().any(|n| n == ns) {
                        let _ = ip(&["netns", "del", ns]);
                    }
                }
                Err(e)
            }
        }
    }

    fn build(&mut self, cfg: &TopoConfig) -> Result<(), TopoError> {
        let (g, d, s) = (
            self.gen_ns.clone(),
            self.dut_ns.clone(),
            self.sink_ns.clone(),
        );
        for ns in [&g, &d, &s] {
            ip(&["netns", "add", ns])?;
        }
        ip(&[
            "link", "add", "g0", "netns", &g, "type", "veth", "peer", "name", "d0", "netns", &d,
        ])?;
        match cfg.egress {
            Egress::Port => {
                ip(&[
                    "link", "add", "d1", "netns", &d, "type", "veth", "peer", "name", "s0",
                    "netns", &s,
                ])?;
            }
            Egress::Lag => {
                if !std::path::Path::new("/sys/module/bonding").exists() {
                    // Loads the module where the kernel has it.
                    let _ = run_cmd(Command::new("modprobe").arg("bonding"));
                }
                for (ns, bond) in [(&d, "d1"), (&s, "s0")] {
                    let mut args = vec!["link", "add", bond, "type", "bond"];
                    args.extend_from_slice(&LAG_BOND_OPTIONS);
                    ipn(ns, &args).map_err(|e| match e {
                        TopoError::Command { cmd, stderr } => TopoError::Command {
                            cmd,
                            stderr: format!(
                                "{stderr} (the lag scenario needs the kernel's bonding driver; \
                                 where this kernel has none, run the lab under a kernel that has \
                                 it, e.g. scripts/lab-kernel)"
                            ),
                        },
                        e => e,
                    })?;
                }
                for (dm, sm) in [("d1a", "s0a"), ("d1b", "s0b")] {
                    ip(&[
                        "link", "add", dm, "netns", &d, "type", "veth", "peer", "name", sm,
                        "netns", &s,
                    ])?;
                    ipn(&d, &["link", "set", "dev", dm, "master", "d1"])?;
                    ipn(&s, &["link", "set", "dev", sm, "master", "s0"])?;
                }
            }
        }
        let marker = self.marker();
        for (ns, ifname, mac) in [
            (&g, "g0", GEN_MAC),
            (&d, "d0", DUT_IN_MAC),
            (&d, "d1", DUT_OUT_MAC),
            (&s, "s0", SINK_MAC),
        ] {
            ipn(
                ns,
                &[
                    "link",
                    "set",
                    "dev",
                    ifname,
                    "address",
                    &mac_str(mac),
                    "alias",
                    &marker,
                ],
            )?;
        }
        let addrs = [
            (&g, "g0", "198.18.0.108/24", "2001:2::108/64"),
            (&d, "d0", "198.18.0.10/24", "2001:2::10/64"),
            (&d, "d1", "198.19.0.10/24", "2001:2:0:8000::10/64"),
            (&s, "s0", "198.19.0.108/24", "2001:2:0:8000::108/64"),
        ];
        for (ns, ifname, v4, v6) in addrs {
            ipn(ns, &["addr", "add", v4, "dev", ifname])?;
            ipn(ns, &["-6", "addr", "add", v6, "dev", ifname, "nodad"])?;
        }
        for ns in [&g, &d, &s] {
            ipn(ns, &["link", "set", "dev", "lo", "up"])?;
        }
        for (ns, ifname) in [(&g, "g0"), (&d, "d0"), (&d, "d1"), (&s, "s0")] {
            ipn(ns, &["link", "set", "dev", ifname, "up"])?;
        }
        for (ns, member) in cfg
            .egress
            .dut_members()
            .iter()
            .map(|m| (&d, m))
            .chain(cfg.egress.sink_links().iter().map(|m| (&s, m)))
        {
            if *member != "s0" {
                ipn(ns, &["link", "set", "dev", member, "up"])?;
            }
        }
        // The dut's routes, as the seed's rc.conf.
        for (dst, via) in [
            ("198.18.0.0/16", "198.18.0.108"),
            ("192.18.0.0/16", "198.18.0.108"),
            ("198.19.0.0/16", "198.19.0.108"),
            ("192.19.0.0/16", "198.19.0.108"),
            ("2001:2::/49", "2001:2::108"),
            ("2001:2:0:8000::/49", "2001:2:0:8000::108"),
        ] {
            ipn(&d, &["route", "replace", dst, "via", via])?;
        }
        ipn(&g, &["route", "replace", "default", "via", "198.18.0.10"])?;
        ipn(
            &g,
            &["-6", "route", "replace", "default", "via", "2001:2::10"],
        )?;
        ipn(&s, &["route", "replace", "default", "via", "198.19.0.10"])?;
        ipn(
            &s,
            &[
                "-6",
                "route",
                "replace",
                "default",
                "via",
                "2001:2:0:8000::10",
            ],
        )?;
        if cfg.static_neighbours {
            let neigh = [
                (&d, "d0", "198.18.0.108", GEN_MAC),
                (&d, "d0", "2001:2::108", GEN_MAC),
                (&d, "d1", "198.19.0.108", SINK_MAC),
                (&d, "d1", "2001:2:0:8000::108", SINK_MAC),
                (&g, "g0", "198.18.0.10", DUT_IN_MAC),
                (&g, "g0", "2001:2::10", DUT_IN_MAC),
                (&s, "s0", "198.19.0.10", DUT_OUT_MAC),
                (&s, "s0", "2001:2:0:8000::10", DUT_OUT_MAC),
            ];
            for (ns, ifname, addr, mac) in neigh {
                ipn(
                    ns,
                    &[
                        "neigh",
                        "replace",
                        addr,
                        "lladdr",
                        &mac_str(mac),
                        "dev",
                        ifname,
                        "nud",
                        "permanent",
                    ],
                )?;
            }
        }
        for key in [
            "net.ipv4.conf.all.rp_filter=0",
            "net.ipv4.conf.default.rp_filter=0",
            "net.ipv4.conf.d0.rp_filter=0",
            "net.ipv4.conf.d1.rp_filter=0",
        ] {
            exec_in(&d, &["sysctl", "-qw", key])?;
        }
        self.set_forwarding(cfg.forwarding)?;
        self.set_firewall(cfg.firewall)?;
        self.apply_placement(cfg.placement)?;
        Ok(())
    }

    /// Turns the kernel's IPv4 and IPv6 forwarding in dut on or off.
    pub fn set_forwarding(&self, on: bool) -> Result<(), TopoError> {
        let v = if on { "1" } else { "0" };
        exec_in(
            &self.dut_ns,
            &["sysctl", "-qw", &format!("net.ipv4.ip_forward={v}")],
        )?;
        exec_in(
            &self.dut_ns,
            &[
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.all.forwarding={v}"),
            ],
        )?;
        Ok(())
    }

    /// Loads an nftables preset into dut (replacing the previous one).
    pub fn set_firewall(&self, preset: FirewallPreset) -> Result<(), TopoError> {
        exec_in_with_stdin(&self.dut_ns, &["nft", "-f", "-"], &preset.script())?;
        Ok(())
    }

    /// Applies a CPU placement: threaded NAPI on d0 pinned to the
    /// forwarding core (TSO off on g0, GRO on d0).
    pub fn apply_placement(&mut self, p: Placement) -> Result<(), TopoError> {
        self.placement = p;
        if !p.napi_threaded {
            return Ok(());
        }
        exec_in(&self.gen_ns, &["ethtool", "-K", "g0", "tso", "off"])?;
        exec_in(&self.dut_ns, &["ethtool", "-K", "d0", "gro", "on"])?;
        let before = napi_threads("d0");
        exec_in(
            &self.dut_ns,
            &["sh", "-c", "echo 1 > /sys/class/net/d0/threaded"],
        )?;
        let mut pid = None;
        for _ in 0..50 {
            if let Some(p) = napi_threads("d0").into_iter().find(|p| !before.contains(p)) {
                pid = Some(p);
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        self.napi_pid = pid;
        if let (Some(pid), Some(cpu)) = (pid, p.fwd_cpu) {
            crate::sys::pin_to_cpu(pid, cpu).map_err(|e| TopoError::Io {
                what: format!("pin NAPI thread {pid} to cpu {cpu}"),
                source: e,
            })?;
        }
        Ok(())
    }

    /// Loads a prefix list (one prefix a line, optionally gzip-compressed)
    /// into dut's kernel FIB over netlink, spreading the prefixes over
    /// [`FULL_TABLE_NEXT_HOPS`] next hops toward sink (each with a static
    /// neighbour entry). Prefixes overlapping the lab's own ranges are skipped.
    pub fn load_full_table(&self, path: &std::path::Path) -> Result<FibLoad, TopoError> {
        let text = read_table_text(path)?;
        let mut load = FibLoad {
            next_hops: FULL_TABLE_NEXT_HOPS,
            ..Default::default()
        };
        for i in 0..FULL_TABLE_NEXT_HOPS {
            for (nh, ifname) in [
                (format!("198.19.0.{}", 100 + i), "d1"),
                (
                    std::net::Ipv6Addr::from(FULL_TABLE_V6_NEXT_HOP_BASE + u128::from(i))
                        .to_string(),
                    "d1",
                ),
            ] {
                ipn(
                    &self.dut_ns,
                    &[
                        "neigh",
                        "replace",
                        &nh,
                        "lladdr",
                        &mac_str(SINK_MAC),
                        "dev",
                        ifname,
                        "nud",
                        "permanent",
                    ],
                )?;
            }
        }
        let mut routes = Vec::new();
        let mut bad = None;
        load.skipped = for_each_table_prefix(&text, path, |p, _net, _len, v6| {
            let nh_index = fnv(p.as_bytes()) % FULL_TABLE_NEXT_HOPS;
            let gateway: std::net::IpAddr = if v6 {
                load.routes_v6 += 1;
                std::net::Ipv6Addr::from(FULL_TABLE_V6_NEXT_HOP_BASE + u128::from(nh_index)).into()
            } else {
                load.routes_v4 += 1;
                std::net::Ipv4Addr::new(198, 19, 0, 100 + nh_index as u8).into()
            };
            match p.parse::<wire::Cidr>() {
                Ok(prefix) => routes.push((prefix, gateway)),
                Err(e) => {
                    bad.get_or_insert_with(|| format!("{}: `{p}`: {e}", path.display()));
                }
            }
        })?;
        if let Some(why) = bad {
            return Err(TopoError::Invalid(why));
        }
        // Over netlink from a thread in dut, many routes a datagram: a
        // fraction of what one `ip route replace` round trip per route costs.
        let t = Instant::now();
        let dut = self.dut_ns.clone();
        let installed = std::thread::spawn(move || -> Result<usize, String> {
            crate::sys::enter_netns(&dut).map_err(|e| format!("enter {dut}: {e}"))?;
            let ifindex = netio::if_index("d1").map_err(|e| e.to_string())?;
            control::kernel::replace_routes(routes.into_iter().map(|(prefix, gateway)| {
                let hop = control::netlink::KernelHop {
                    ifindex,
                    gateway: Some(gateway),
                };
                (prefix, hop)
            }))
            .map_err(|e| e.to_string())
        })
        .join()
        .map_err(|_| TopoError::Invalid("full table: the loading thread panicked".into()))?
        .map_err(|e| TopoError::Command {
            cmd: format!("full table into {}", self.dut_ns),
            stderr: e,
        })?;
        debug_assert_eq!(installed as u64, load.routes_v4 + load.routes_v6);
        load.seconds = t.elapsed().as_secs_f64();
        Ok(load)
    }

    /// Deletes this lab's namespaces (those that exist); refuses, touching
    /// nothing, if any of them lacks the marker.
    pub fn down(&self) -> Result<(), TopoError> {
        let existing = list_netns();
        let present: Vec<(&str, &str)> = self
            .namespaces()
            .into_iter()
            .filter(|(ns, _)| existing.iter().any(|e| e == ns))
            .collect();
        for (ns, ifname) in &present {
            // The dut is also recognised by d1 when d0 is gone.
            let ours = self.is_ours(ns, ifname) || (*ns == self.dut_ns && self.is_ours(ns, "d1"));
            if !ours {
                return Err(TopoError::NotOurs(ns.to_string()));
            }
        }
        for (ns, _) in present {
            ip(&["netns", "del", ns])?;
        }
        Ok(())
    }

    /// What exists of this lab now.
    pub fn status(&self) -> TopoStatus {
        let existing = list_netns();
        let mut st = TopoStatus {
            tag: self.tag.clone(),
            ..Default::default()
        };
        for (ns, ifname) in self.namespaces() {
            let exists = existing.iter().any(|e| e == ns);
            st.namespaces.push(NsStatus {
                name: ns.to_string(),
                exists,
                ours: exists && self.is_ours(ns, ifname),
            });
        }
        if st.namespaces.iter().all(|n| n.ours) {
            st.up = true;
            st.forwarding = exec_in(&self.dut_ns, &["sysctl", "-n", "net.ipv4.ip_forward"])
                .ok()
                .map(|v| v.trim() == "1");
            st.nft_rules = exec_in(&self.dut_ns, &["nft", "list", "ruleset"])
                .ok()
                .map(|r| r.lines().filter(|l| l.contains(" drop")).count() as u64);
            st.routes_v4 = ipn(&self.dut_ns, &["-4", "route", "show"])
                .ok()
                .map(|r| r.lines().count() as u64);
            st.routes_v6 = ipn(&self.dut_ns, &["-6", "route", "show"])
                .ok()
                .map(|r| r.lines().count() as u64);
            st.d0_threaded = exec_in(&self.dut_ns, &["cat", "/sys/class/net/d0/threaded"])
                .ok()
                .map(|v| v.trim() != "0");
            st.napi_threads = napi_threads("d0");
        }
        st
    }
}

/// Whether a prefix overlaps the lab's IPv4 ranges (198.18.0.0/15, 192.18.0.0/15).
fn lab_overlap_v4(addr: u32, len: u32) -> bool {
    let overlap = |net: u32, nlen: u32| {
        let l = len.min(nlen);
        let mask = if l == 0 { 0 } else { u32::MAX << (32 - l) };
        addr & mask == net & mask
    };
    overlap(0xC612_0000, 15) || overlap(0xC012_0000, 15)
}

/// The text of a prefix list (gzip or plain).
pub(crate) fn read_table_text(path: &std::path::Path) -> Result<String, TopoError> {
    let raw = std::fs::read(path).map_err(|e| TopoError::Io {
        what: format!("read {}", path.display()),
        source: e,
    })?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut flate2::read::MultiGzDecoder::new(&raw[..]), &mut s)
            .map_err(|e| TopoError::Io {
                what: format!("gunzip {}", path.display()),
                source: e,
            })?;
        Ok(s)
    } else {
        Ok(String::from_utf8_lossy(&raw).into_owned())
    }
}

/// Calls `f(text, network, length, is_v6)` for every prefix of a prefix
/// list that does not overlap the lab's own ranges; returns how many were
/// skipped for overlapping. A line that is not a prefix is an error naming
/// the file and line.
pub(crate) fn for_each_table_prefix(
    text: &str,
    path: &std::path::Path,
    mut f: impl FnMut(&str, u128, u32, bool),
) -> Result<u64, TopoError> {
    let mut skipped = 0;
    for (lineno, line) in text.lines().enumerate() {
        let p = line.trim();
        if p.is_empty() || p.starts_with('#') {
            continue;
        }
        let bad = |why: &str| {
            TopoError::Invalid(format!("{}:{}: {why} in `{p}`", path.display(), lineno + 1))
        };
        let (net, len) = p.split_once('/').ok_or_else(|| bad("not a prefix"))?;
        let len: u32 = len.parse().map_err(|_| bad("bad prefix length"))?;
        if let Ok(a) = net.parse::<std::net::Ipv4Addr>() {
            if len > 32 {
                return Err(bad("bad prefix length"));
            }
            if lab_overlap_v4(u32::from(a), len) {
                skipped += 1;
                continue;
            }
            f(p, u128::from(u32::from(a)), len, false);
        } else if let Ok(a) = net.parse::<std::net::Ipv6Addr>() {
            if len > 128 {
                return Err(bad("bad prefix length"));
            }
            if lab_overlap_v6(u128::from(a), len) {
                skipped += 1;
                continue;
            }
            f(p, u128::from(a), len, true);
        } else {
            return Err(bad("not a prefix"));
        }
    }
    Ok(skipped)
}

/// `n` destination addresses spread over the prefixes of a prefix list
/// (those [`Topology::load_full_table`] loads), of one family: each a
/// prefix drawn at random (seeded, so runs repeat) and a random host part
/// inside it.
pub fn table_destinations(
    path: &std::path::Path,
    n: usize,
    v6: bool,
    seed: u64,
) -> Result<Vec<std::net::IpAddr>, TopoError> {
    let text = read_table_text(path)?;
    let mut prefixes = Vec::new();
    for_each_table_prefix(&text, path, |_, net, len, is_v6| {
        if is_v6 == v6 {
            prefixes.push((net, len));
        }
    })?;
    if prefixes.is_empty() {
        return Err(TopoError::Invalid(format!(
            "{}: no IPv{} prefixes to draw destinations from",
            path.display(),
            if v6 { 6 } else { 4 }
        )));
    }
    let mut state = seed;
    let mut next = || {
        // splitmix64
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let bits = if v6 { 128 } else { 32 };
    Ok((0..n)
        .map(|_| {
            let (net, len) = prefixes[(next() % prefixes.len() as u64) as usize];
            let host_bits = bits - len;
            let random = (u128::from(next()) << 64) | u128::from(next());
            let host = if host_bits == 0 {
                0
            } else {
                random & (u128::MAX >> (128 - host_bits))
            };
            let a = net | host;
            if v6 {
                std::net::IpAddr::V6(std::net::Ipv6Addr::from(a))
            } else {
                std::net::IpAddr::V4(std::net::Ipv4Addr::from(a as u32))
            }
        })
        .collect())
}

/// Whether a prefix overlaps 2001:2::/48.
fn lab_overlap_v6(addr: u128, len: u32) -> bool {
    let l = len.min(48);
    let mask = if l == 0 { 0 } else { u128::MAX << (128 - l) };
    addr & mask == (0x2001_0002u128 << 96) & mask
}

fn fnv(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// One namespace's state.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NsStatus {
    /// Name.
    pub name: String,
    /// Does it exist?
    pub exists: bool,
    /// Does it carry this lab's marker?
    pub ours: bool,
}

/// `lab topo status`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TopoStatus {
    /// Tag.
    pub tag: String,
    /// All three namespaces exist and are ours.
    pub up: bool,
    /// Each namespace.
    pub namespaces: Vec<NsStatus>,
    /// dut's IPv4 forwarding.
    pub forwarding: Option<bool>,
    /// nftables drop rules in dut.
    pub nft_rules: Option<u64>,
    /// IPv4 routes in dut's main table.
    pub routes_v4: Option<u64>,
    /// IPv6 routes in dut's main table.
    pub routes_v6: Option<u64>,
    /// Is d0's NAPI threaded?
    pub d0_threaded: Option<bool>,
    /// PIDs of `napi/d0-*` threads (of every lab on the host).
    pub napi_threads: Vec<i32>,
}

/// Removes the lab when dropped (end of scope, error return, or unwinding).
#[derive(Debug)]
pub struct TopoGuard(pub Topology);

impl Drop for TopoGuard {
    fn drop(&mut self) {
        if let Err(e) = self.0.down() {
            eprintln!("lab: could not remove namespaces of {}: {e}", self.0.tag);
        }
    }
}

/// Moves the calling thread into network namespace `name`.
pub fn enter_netns(name: &str) -> std::io::Result<()> {
    crate::sys::enter_netns(name)
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    crate::sys::pin_to_cpu(0, cpu)
}

/// Is the process root (namespaces need CAP_SYS_ADMIN)?
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_drawn_from_the_table_fall_inside_its_prefixes() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../data/full-table-prefixes.txt.gz");
        let text = read_table_text(&path).unwrap();
        for v6 in [false, true] {
            let mut prefixes = Vec::new();
            for_each_table_prefix(&text, &path, |_, net, len, is_v6| {
                if is_v6 == v6 {
                    prefixes.push((net, len));
                }
            })
            .unwrap();
            let n = 4096;
            let dsts = table_destinations(&path, n, v6, 7).unwrap();
            assert_eq!(dsts.len(), n);
            assert_eq!(dsts, table_destinations(&path, n, v6, 7).unwrap(), "seeded");
            assert_ne!(dsts, table_destinations(&path, n, v6, 8).unwrap());
            let bits = if v6 { 128 } else { 32 };
            let mut distinct = std::collections::BTreeSet::new();
            for d in &dsts {
                assert_eq!(d.is_ipv6(), v6);
                let a = match d {
                    std::net::IpAddr::V4(a) => u128::from(u32::from(*a)),
                    std::net::IpAddr::V6(a) => u128::from(*a),
                };
                let inside = prefixes
                    .iter()
                    .any(|&(net, len)| len == 0 || (a ^ net) >> (bits - len) == 0);
                assert!(inside, "{d} in none of the table's prefixes");
                if v6 {
                    assert!(!lab_overlap_v6(a, 128), "{d} in the lab's range");
                } else {
                    assert!(!lab_overlap_v4(a as u32, 32), "{d} in the lab's range");
                }
                distinct.insert(a);
            }
            // Spread over the table, not a few prefixes.
            assert!(distinct.len() > n * 9 / 10, "{} distinct", distinct.len());
        }
        let bad = std::env::temp_dir().join(format!("fastfwd-bad-table-{}", std::process::id()));
        std::fs::write(&bad, "10.0.0.0/8\nnot-a-prefix\n").unwrap();
        let e = table_destinations(&bad, 1, false, 1)
            .unwrap_err()
            .to_string();
        std::fs::remove_file(&bad).unwrap();
        assert!(e.contains(":2:") && e.contains("not-a-prefix"), "{e}");
    }

    #[test]
    fn presets_parse_and_render() {
        assert_eq!(FirewallPreset::parse("none").unwrap(), FirewallPreset::None);
        assert_eq!(
            FirewallPreset::parse("linear 1000").unwrap(),
            FirewallPreset::Linear(1000)
        );
        assert_eq!(
            FirewallPreset::parse("set:5").unwrap(),
            FirewallPreset::Set(5)
        );
        assert!(FirewallPreset::parse("linear").is_err());
        assert!(FirewallPreset::parse("tree 4").is_err());
        let lin = FirewallPreset::Linear(300).script();
        assert_eq!(lin.matches(" drop\n").count(), 300);
        assert!(
            lin.contains("ip saddr 10.0.1.44 udp dport 53 drop"),
            "the 300th rule"
        );
        let fw = FirewallPreset::Linear(2).fastfwd_rules();
        assert_eq!(
            fw,
            "chain forward {\n    policy accept\n    ip saddr 10.0.0.1 udp dport 53 drop\n    ip saddr 10.0.0.2 udp dport 53 drop\n}\n"
        );
        let set = FirewallPreset::Set(3).script();
        assert!(set.contains("elements = { 10.0.0.1, 10.0.0.2, 10.0.0.3 }"));
    }

    #[test]
    fn lab_ranges_are_recognised() {
        let v4 = |s: &str| u32::from(s.parse::<std::net::Ipv4Addr>().unwrap());
        assert!(lab_overlap_v4(v4("198.18.0.0"), 15));
        assert!(lab_overlap_v4(v4("198.19.10.0"), 24));
        assert!(
            lab_overlap_v4(v4("198.0.0.0"), 8),
            "a covering prefix overlaps"
        );
        assert!(!lab_overlap_v4(v4("198.20.0.0"), 16));
        assert!(!lab_overlap_v4(v4("1.0.0.0"), 24));
        let v6 = |s: &str| u128::from(s.parse::<std::net::Ipv6Addr>().unwrap());
        assert!(lab_overlap_v6(v6("2001:2::"), 48));
        assert!(lab_overlap_v6(v6("2001::"), 16));
        assert!(!lab_overlap_v6(v6("2001:3::"), 32));
    }
}
