//! `fastfwd run`: the router daemon.
//!
//! Threads:
//! - one worker per configured core, pinned, owning its ports (one AF_XDP
//!   socket per queue it serves, or one AF_PACKET socket per interface in a
//!   fanout group) and their TX buffers. It polls while traffic flows and
//!   sleeps in `poll(2)` on its sockets when idle;
//! - the control thread (this one): follows the kernel over netlink,
//!   rebuilds and publishes the tables, asks the kernel to resolve missed
//!   neighbours, serves the control socket and sums the workers' counters.
//!
//! See docs/router.md.

use anyhow::{bail, Context, Result};
use control::kernel::Delta;
use control::kernel::KernelLink;
use control::protocol::{HopSpec, Request, Response, DEFAULT_SOCKET};
use control::server::ControlServer;
use control::snapshot::Snapshot;
use control::state::{ApiRoute, RouterState};
use control::Router;
use netio::packet::{PacketConfig, PacketPort};
use netio::sys::os;
use netio::xdp::{SocketConfig, XdpMode, XdpPort, XdpProgram};
use netio::{FrameBatch, Port, QueueSet};
use pipeline::{Counters, PuntReason, Verdict, Worker, WorkerConfig};
use serde::Serialize;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// I/O backend choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    /// AF_XDP sockets fed by fastfwd's XDP program (transit traffic only);
    /// `xdp`, its old name, still works.
    #[value(name = "afxdp", alias = "xdp")]
    Xdp,
    /// AF_PACKET TPACKET_V3 rings (every frame; kernel forwarding must be off).
    Packet,
}

/// Forwarding engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineArg {
    /// The user-space pipeline behind the chosen backend.
    User,
    /// The in-kernel XDP program built from the same tables, handing its
    /// exceptions to the user-space pipeline over AF_XDP.
    Xdp,
}

/// Where the XDP program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum XdpModeArg {
    /// Native, falling back to generic.
    Auto,
    /// In the driver only.
    Native,
    /// Generic (skb) mode only.
    Generic,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The router's configuration file.
    #[arg(long, short)]
    pub config: PathBuf,
    /// Forwarding engine.
    #[arg(long, value_enum, default_value = "user")]
    pub engine: EngineArg,
    /// I/O backend of the user-space pipeline (with `--engine xdp`, its
    /// exception path: AF_XDP only).
    #[arg(long, value_enum, default_value = "afxdp")]
    pub backend: BackendArg,
    /// CPUs to run workers on, one worker each: `1`, `0,1`, `2-3`
    /// (default: the first CPU this process may use).
    #[arg(long)]
    pub cores: Option<String>,
    /// Control socket path.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Keep polling when idle instead of sleeping (burns the cores).
    #[arg(long)]
    pub busy_poll: bool,
    /// XDP attach mode.
    #[arg(long, value_enum, default_value = "auto")]
    pub xdp_mode: XdpModeArg,
}

/// Parses `1`, `0,2`, `1-3`, `0,2-3`.
pub fn parse_cores(s: &str) -> Result<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse()?, b.parse()?);
                if a > b {
                    bail!("--cores: empty range {part}");
                }
                out.extend(a..=b);
            }
            None => out.push(
                part.parse()
                    .with_context(|| format!("--cores: {part} is not a CPU number"))?,
            ),
        }
    }
    out.sort_unstable();
    out.dedup();
    if out.is_empty() {
        bail!("--cores: no CPU given");
    }
    Ok(out)
}

/// Port counters as the control socket reports them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PortCounters {
    /// Port (kernel interface) name.
    pub port: String,
    /// Frames received from the kernel.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames handed to the kernel for sending.
    pub tx_packets: u64,
    /// Bytes handed to the kernel.
    pub tx_bytes: u64,
    /// Frames that found the TX ring full.
    pub tx_dropped: u64,
    /// Frames the kernel dropped before fastfwd saw them.
    pub rx_dropped: u64,
}

/// What a worker publishes about itself (about every 100 ms).
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkerReport {
    /// Worker number.
    pub id: usize,
    /// CPU it is pinned to.
    pub core: usize,
    /// Backend.
    pub backend: String,
    /// Its ports (socket per port, or per queue of a port).
    pub ports: Vec<PortCounters>,
    /// Pipeline counters.
    #[serde(skip)]
    pub counters: Counters,
    /// Loop rounds that found frames.
    pub busy_rounds: u64,
    /// Times it went to sleep in poll(2).
    pub sleeps: u64,
    /// Frames held while their neighbour was being resolved.
    pub held: u64,
    /// Held frames dropped after waiting too long.
    pub held_expired: u64,
    /// Frames for the host that reached fastfwd instead (dropped; the
    /// kernel has or gets its own copy).
    pub punts_discarded: u64,
    /// Neighbour misses not reported because the queue to the control thread was full.
    pub misses_lost: u64,
    /// The firewall's per-worker state, when the config has rules.
    #[serde(skip)]
    pub firewall: Option<FirewallReport>,
    /// For the XDP program's report: what it finished and handed on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xdp: Option<serde_json::Value>,
}

/// A worker's firewall counters, for the rule set they belong to.
#[derive(Debug, Clone)]
pub struct FirewallReport {
    /// The rule set the counters count (they restart with a new one).
    pub rules: Arc<firewall::Firewall>,
    /// Per-rule packets and bytes.
    pub counters: firewall::RuleCounters,
    /// Rejects rate-limited into drops, rule-set swaps seen.
    pub stats: firewall::WorkerStats,
    /// The connection table, when a rule uses `ct state`.
    pub conntrack: Option<firewall::ConntrackStats>,
}

struct Shared {
    snapshot: Snapshot,
    stop: AtomicBool,
    /// Set by a worker that panicked: the daemon stops with an error
    /// rather than run on with a queue nobody serves.
    worker_failed: AtomicBool,
    reports: Vec<Mutex<WorkerReport>>,
}

/// How long a frame may wait for its neighbour to be resolved.
const HOLD_NS: u64 = 1_000_000_000;
/// Empty rounds before a worker sleeps.
const SPIN_ROUNDS: u32 = 64;
/// Longest sleep in poll(2), so stop requests are seen promptly.
const SLEEP_MS: i32 = 100;
/// How often a worker publishes its counters.
const REPORT_NS: u64 = 100_000_000;

struct WorkerCtx {
    id: usize,
    core: usize,
    busy_poll: bool,
    /// Ports by PortId (None: this worker has no socket there).
    ports: Vec<Option<Box<dyn Port>>>,
    port_names: Vec<String>,
    misses: SyncSender<(u16, IpAddr)>,
    punt_to_kernel_copy: bool,
}

/// Marks the daemon failed if the worker thread unwinds.
struct PanicFlag(Arc<Shared>);

impl Drop for PanicFlag {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.worker_failed.store(true, Ordering::SeqCst);
        }
    }
}

fn worker_main(ctx: WorkerCtx, shared: Arc<Shared>) {
    let _flag = PanicFlag(Arc::clone(&shared));
    // Test hook: `FASTFWD_TEST_WORKER_PANIC=1` makes a worker panic on its
    // first frames (read once here, never per packet).
    let panic_hook = std::env::var_os("FASTFWD_TEST_WORKER_PANIC").is_some();
    let WorkerCtx {
        id,
        core,
        busy_poll,
        mut ports,
        port_names,
        misses,
        punt_to_kernel_copy,
    } = ctx;
    if let Err(e) = os::pin_current_thread(core) {
        eprintln!("fastfwd: worker {id}: cannot pin to CPU {core}: {e}");
    }
    let mut worker = Worker::new(WorkerConfig {
        max_batch: netio::BATCH,
        ..WorkerConfig::default()
    });
    let mut batch = FrameBatch::new();
    let mut held: Vec<FrameBatch> = ports.iter().map(|_| FrameBatch::new()).collect();
    let mut held_since = vec![0u64; ports.len()];
    let mut report = WorkerReport {
        id,
        core,
        backend: ports
            .iter()
            .flatten()
            .next()
            .map(|p| p.backend().to_string())
            .unwrap_or_default(),
        ..WorkerReport::default()
    };
    // Recently reported misses, so a burst toward one address asks once.
    let mut recent: [(u16, IpAddr, u64); 16] = [(u16::MAX, IpAddr::from([0u8; 4]), 0); 16];
    let mut recent_at = 0usize;
    let fds: Vec<i32> = ports.iter().flatten().flat_map(|p| p.poll_fds()).collect();
    let start = Instant::now();
    let mut last_report = 0u64;
    let mut idle_rounds = 0u32;
    let mut seen_gen = shared.snapshot.generation();

    while !shared.stop.load(Ordering::Relaxed) {
        let now = start.elapsed().as_nanos() as u64;
        let tables = shared.snapshot.load();
        let gen = shared.snapshot.generation();
        let mut got = 0usize;
        for rx in 0..ports.len() {
            // Frames waiting for a neighbour go again after a table change.
            let retry_held = gen != seen_gen && !held[rx].is_empty();
            if retry_held {
                std::mem::swap(&mut batch, &mut held[rx]);
                held[rx].clear();
            } else {
                let Some(port) = ports[rx].as_mut() else {
                    continue;
                };
                batch.clear();
                if port.rx_batch(&mut batch) == 0 {
                    continue;
                }
            }
            got += batch.len();
            if panic_hook {
                panic!("worker {id}: FASTFWD_TEST_WORKER_PANIC is set");
            }
            batch.with_frames(|frames| {
                worker.process(&tables, now, rx as u16, frames);
            });
            let out = worker.output();
            for (p, idx) in out.tx_batches() {
                if let Some(Some(port)) = ports.get_mut(usize::from(p)) {
                    for &i in idx {
                        port.tx(batch.frame(usize::from(i)));
                    }
                }
            }
            for (p, _iface, bytes) in out.generated() {
                if let Some(Some(port)) = ports.get_mut(usize::from(p)) {
                    port.tx(bytes);
                }
            }
            for (i, v) in out.verdicts().iter().enumerate() {
                match v {
                    Verdict::Punt(PuntReason::NeighbourMiss) => {
                        if held[rx].is_empty() {
                            held_since[rx] = now;
                        }
                        if held[rx].push(batch.frame(i)) {
                            report.held += 1;
                        } else {
                            report.held_expired += 1;
                        }
                    }
                    Verdict::Punt(_) if !punt_to_kernel_copy => report.punts_discarded += 1,
                    _ => {}
                }
            }
            for &(iface, ip) in out.neighbour_misses() {
                let fresh = !recent
                    .iter()
                    .any(|&(i, a, t)| i == iface && a == ip && now.saturating_sub(t) < 100_000_000);
                if fresh {
                    recent[recent_at] = (iface, ip, now);
                    recent_at = (recent_at + 1) % recent.len();
                    if let Err(TrySendError::Full(_)) = misses.try_send((iface, ip)) {
                        report.misses_lost += 1;
                    }
                }
            }
        }
        seen_gen = gen;
        for (rx, h) in held.iter_mut().enumerate() {
            if !h.is_empty() && now.saturating_sub(held_since[rx]) > HOLD_NS {
                report.held_expired += h.len() as u64;
                h.clear();
            }
        }
        // TX buffers are flushed at the end of every round: the "timer" is
        // one pass over the ports, a few microseconds when busy.
        for p in ports.iter_mut().flatten() {
            p.flush();
        }
        drop(tables);
        if got > 0 {
            report.busy_rounds += 1;
            idle_rounds = 0;
        } else {
            idle_rounds = idle_rounds.saturating_add(1);
        }
        if now.saturating_sub(last_report) > REPORT_NS {
            last_report = now;
            publish(&shared, &mut report, &worker, &ports, &port_names);
        }
        if !busy_poll && idle_rounds > SPIN_ROUNDS && held.iter().all(FrameBatch::is_empty) {
            report.sleeps += 1;
            // Counters are current whenever the worker sleeps.
            if now.saturating_sub(last_report) > 10_000_000 {
                last_report = now;
                publish(&shared, &mut report, &worker, &ports, &port_names);
            }
            let _ = os::poll_readable(&fds, SLEEP_MS);
        }
    }
    publish(&shared, &mut report, &worker, &ports, &port_names);
}

fn publish(
    shared: &Shared,
    report: &mut WorkerReport,
    worker: &Worker,
    ports: &[Option<Box<dyn Port>>],
    names: &[String],
) {
    report.counters = worker.counters().clone();
    report.firewall = worker
        .acl_state::<<config::ConfigAcl as pipeline::Acl>::State>()
        .and_then(Option::as_ref)
        .map(|fw| FirewallReport {
            rules: Arc::clone(fw.firewall()),
            counters: fw.counters().clone(),
            stats: fw.stats(),
            conntrack: fw.conntrack_stats(),
        });
    report.ports = ports
        .iter()
        .zip(names)
        .filter_map(|(p, name)| {
            let s = p.as_ref()?.stats();
            Some(PortCounters {
                port: name.clone(),
                rx_packets: s.rx_packets,
                rx_bytes: s.rx_bytes,
                tx_packets: s.tx_packets,
                tx_bytes: s.tx_bytes,
                tx_dropped: s.tx_dropped,
                rx_dropped: s.rx_dropped,
            })
        })
        .collect();
    if let Some(slot) = shared.reports.get(report.id) {
        if let Ok(mut g) = slot.lock() {
            *g = report.clone();
        }
    }
}

/// With AF_PACKET the kernel's stack receives every frame as well: if it
/// forwards too, each transit packet would leave twice.
fn refuse_kernel_forwarding() -> Result<()> {
    for (key, path) in [
        ("net.ipv4.ip_forward", "/proc/sys/net/ipv4/ip_forward"),
        (
            "net.ipv6.conf.all.forwarding",
            "/proc/sys/net/ipv6/conf/all/forwarding",
        ),
    ] {
        if std::fs::read_to_string(path).is_ok_and(|v| v.trim() != "0") {
            bail!(
                "--backend packet: kernel forwarding is on in this network namespace ({key}=1), so the kernel would forward every packet fastfwd forwards a second time; turn it off (sysctl -w net.ipv4.ip_forward=0 net.ipv6.conf.all.forwarding=0) or use --backend afxdp"
            );
        }
    }
    Ok(())
}

/// Number of RX queues of a kernel interface.
fn rx_queues(iface: &str) -> u32 {
    std::fs::read_dir(format!("/sys/class/net/{iface}/queues"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count() as u32
        })
        .unwrap_or(1)
        .max(1)
}

/// Everything the daemon owns while it runs.
struct Daemon {
    config_path: PathBuf,
    router: Router,
    kernel: KernelLink,
    shared: Arc<Shared>,
    programs: Vec<XdpProgram>,
    /// The XDP engine, with `--engine xdp`.
    xdp: Option<XdpEngine>,
    backend: BackendArg,
    started: Instant,
    resolver: control::resolve::ResolveLimiter,
}

/// The XDP engine and the tables generation it holds.
struct XdpEngine {
    engine: xdp_engine::Engine,
    /// (snapshot, IPv4 FIB, IPv6 FIB) generations last compiled.
    synced: Option<(u64, u64, u64)>,
}

impl XdpEngine {
    /// Compiles the current tables into the program's maps if they changed
    /// since the last time. Tables that do not fit (or a failed map write)
    /// leave the program handing every transit packet to the pipeline,
    /// which has them: slower, never wrong.
    fn sync(&mut self, snapshot: &Snapshot) {
        let tables = snapshot.load();
        let (s4, s6) = (tables.fib4.snapshot(), tables.fib6.snapshot());
        let key = (snapshot.generation(), s4.generation(), s6.generation());
        if self.synced == Some(key) {
            return;
        }
        self.synced = Some(key);
        let fw = tables
            .acl
            .as_ref()
            .map(firewall::PipelineFirewall::firewall);
        let cap = self.engine.capacity();
        let r = xdp_engine::Image::compile(&tables.datapath(), s4.trie(), s6.trie(), fw, &cap)
            .map_err(xdp_engine::EngineError::from)
            .and_then(|image| self.engine.publish(image));
        if let Err(e) = r {
            eprintln!("fastfwd: {e}; the XDP program hands every transit packet to the pipeline until the tables fit");
            if let Err(e) = self.engine.force_except_all() {
                eprintln!("fastfwd: {e}");
            }
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    if !os::is_root() {
        bail!("fastfwd run needs root (CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF) to attach to interfaces");
    }
    let config = config::Config::load(&args.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.engine == EngineArg::Xdp && args.backend == BackendArg::Packet {
        bail!("--engine xdp hands its exceptions to the pipeline over AF_XDP sockets: use it with --backend afxdp (the default)");
    }
    if args.backend == BackendArg::Packet {
        refuse_kernel_forwarding()?;
    }
    let cores = match &args.cores {
        Some(s) => parse_cores(s)?,
        None => vec![*os::allowed_cpus()?.first().context("no CPU allowed")?],
    };
    let mut kernel = KernelLink::open().context("opening netlink")?;
    let mut state = RouterState::new(config);
    kernel
        .dump(&mut state.kernel)
        .context("reading the kernel's interfaces and routes")?;
    let missing = control::state::missing_ports(&state);
    if !missing.is_empty() {
        bail!(
            "{}: interface(s) {} do not exist in this network namespace",
            args.config.display(),
            missing.join(", ")
        );
    }
    let (router, first_tables) = Router::new(state)?;
    for w in router.warnings() {
        eprintln!("fastfwd: {w}");
    }
    let port_names = router.ports().to_vec();
    let n_ports = port_names.len();

    os::catch_stop_signals().context("installing signal handlers")?;
    let mut server = ControlServer::bind(&args.socket)?;

    // I/O: sockets are opened here and moved into the workers.
    let mut programs = Vec::new();
    let mut worker_ports: Vec<Vec<Option<Box<dyn Port>>>> = cores
        .iter()
        .map(|_| (0..n_ports).map(|_| None).collect())
        .collect();
    let mut xdp = None;
    match args.backend {
        BackendArg::Xdp if args.engine == EngineArg::Xdp => {
            let native = match args.xdp_mode {
                XdpModeArg::Auto => None,
                XdpModeArg::Native => Some(true),
                XdpModeArg::Generic => Some(false),
            };
            let engine = xdp_engine::Engine::load(
                xdp_engine::Mode::Attached,
                xdp_engine::FibCapacity::FULL_TABLE,
            )?;
            let mut x = XdpEngine {
                engine,
                synced: None,
            };
            // The tables first, so the program forwards from its first packet.
            let fw = first_tables
                .acl
                .as_ref()
                .map(firewall::PipelineFirewall::firewall);
            let (s4, s6) = (first_tables.fib4.snapshot(), first_tables.fib6.snapshot());
            let cap = x.engine.capacity();
            x.engine.publish(xdp_engine::Image::compile(
                &first_tables.datapath(),
                s4.trie(),
                s6.trie(),
                fw,
                &cap,
            )?)?;
            drop((s4, s6));
            for (p, name) in port_names.iter().enumerate() {
                let ifindex = netio::if_index(name)?;
                x.engine.attach(name, ifindex, p as u16, native)?;
                let queues = rx_queues(name);
                if queues > xdp_engine::layout::MAX_QUEUES {
                    bail!(
                        "{name}: {queues} RX queues; the XDP engine serves at most {}",
                        xdp_engine::layout::MAX_QUEUES
                    );
                }
                let mut per_worker: Vec<Vec<Box<dyn Port>>> =
                    (0..cores.len()).map(|_| Vec::new()).collect();
                for q in 0..queues {
                    let key = p as u32 * xdp_engine::layout::MAX_QUEUES + q;
                    let port = XdpPort::open_into(
                        name,
                        ifindex,
                        q,
                        x.engine.xsks(),
                        key,
                        SocketConfig::default(),
                    )?;
                    per_worker[q as usize % cores.len()].push(Box::new(port));
                }
                for (w, socks) in per_worker.into_iter().enumerate() {
                    worker_ports[w][p] = one_port(socks);
                }
            }
            xdp = Some(x);
        }
        BackendArg::Xdp => {
            let mode = match args.xdp_mode {
                XdpModeArg::Auto => XdpMode::Auto,
                XdpModeArg::Native => XdpMode::Native,
                XdpModeArg::Generic => XdpMode::Generic,
            };
            for name in &port_names {
                let prog = XdpProgram::attach(name, mode)?;
                programs.push(prog);
            }
            set_local_addrs(&mut programs, router.local_addrs(), &[]);
            // Every RX queue gets a socket: queue q goes to worker q mod
            // workers (a worker with several queues of one interface serves
            // them as one QueueSet), so no queue's transit traffic is left
            // to the kernel.
            for (p, prog) in programs.iter_mut().enumerate() {
                let queues = rx_queues(&port_names[p]);
                let mut per_worker: Vec<Vec<Box<dyn Port>>> =
                    (0..cores.len()).map(|_| Vec::new()).collect();
                for q in 0..queues {
                    let port = XdpPort::open(prog, q, SocketConfig::default())?;
                    per_worker[q as usize % cores.len()].push(Box::new(port));
                }
                for (w, socks) in per_worker.into_iter().enumerate() {
                    worker_ports[w][p] = one_port(socks);
                }
                if queues as usize > cores.len() {
                    eprintln!(
                        "fastfwd: {}: {queues} RX queues on {} worker(s): each worker serves several",
                        port_names[p],
                        cores.len()
                    );
                }
            }
        }
        BackendArg::Packet => {
            for (p, name) in port_names.iter().enumerate() {
                let ifindex = netio::if_index(name)?;
                let group = ((std::process::id() as u16) ^ (ifindex as u16).rotate_left(8)) | 1;
                for ports in worker_ports.iter_mut() {
                    let port = PacketPort::open(
                        name,
                        PacketConfig {
                            fanout_group: group,
                            ..PacketConfig::default()
                        },
                    )?;
                    ports[p] = Some(Box::new(port));
                }
            }
        }
    }

    let shared = Arc::new(Shared {
        snapshot: Snapshot::new(first_tables),
        stop: AtomicBool::new(false),
        worker_failed: AtomicBool::new(false),
        reports: cores
            .iter()
            .map(|_| Mutex::new(WorkerReport::default()))
            .collect(),
    });
    // Everything that needs privileges is open or attached: keep only
    // what the running daemon uses (docs/router.md, "Privileges").
    os::drop_privileges(os::DAEMON_CAPABILITIES).context("dropping capabilities")?;
    let (miss_tx, miss_rx) = sync_channel::<(u16, IpAddr)>(1024);
    let mut handles = Vec::new();
    for (w, (&core, ports)) in cores.iter().zip(worker_ports).enumerate() {
        if ports.iter().all(Option::is_none) {
            eprintln!("fastfwd: worker {w} on CPU {core} has no queue to serve (the interfaces have fewer RX queues than workers); not started");
            continue;
        }
        let ctx = WorkerCtx {
            id: w,
            core,
            busy_poll: args.busy_poll,
            ports,
            port_names: port_names.clone(),
            misses: miss_tx.clone(),
            punt_to_kernel_copy: args.backend == BackendArg::Packet,
        };
        let sh = shared.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("fastfwd-w{w}"))
                .spawn(move || worker_main(ctx, sh))
                .context("starting a worker thread")?,
        );
    }
    drop(miss_tx);
    eprintln!(
        "fastfwd: forwarding on {} with {} worker(s) on CPU(s) {:?}, backend {:?}; control socket {}",
        port_names.join(", "),
        handles.len(),
        cores,
        args.backend,
        args.socket.display()
    );

    let mut daemon = Daemon {
        config_path: args.config.clone(),
        router,
        kernel,
        shared: shared.clone(),
        programs,
        xdp,
        backend: args.backend,
        started: Instant::now(),
        resolver: Default::default(),
    };
    let result = daemon.control_loop(&mut server, &miss_rx);
    shared.stop.store(true, Ordering::SeqCst);
    for h in handles {
        let _ = h.join();
    }
    // Sockets closed with the workers; now detach every XDP program.
    if let Some(mut x) = daemon.xdp.take() {
        x.engine.detach_all();
    }
    for mut p in daemon.programs.drain(..) {
        if let Err(e) = p.detach() {
            eprintln!("fastfwd: {e}");
        }
    }
    drop(server);
    eprintln!("fastfwd: stopped");
    result
}

/// A worker's sockets on one interface as one port: none, the socket, or
/// a [`QueueSet`] over several queues.
fn one_port(mut socks: Vec<Box<dyn Port>>) -> Option<Box<dyn Port>> {
    match socks.len() {
        0 => None,
        1 => socks.pop(),
        _ => QueueSet::new(socks).map(|s| Box::new(s) as Box<dyn Port>),
    }
}

/// Keeps every program's local-address map equal to all of the router's
/// addresses: a packet to d1's address arriving on d0 is for the host too.
fn set_local_addrs(programs: &mut [XdpProgram], new: &[(u16, IpAddr)], old: &[(u16, IpAddr)]) {
    for &(_, addr) in old {
        if !new.iter().any(|&(_, a)| a == addr) {
            for p in programs.iter_mut() {
                let _ = p.remove_local(addr);
            }
        }
    }
    for &(_, addr) in new {
        for p in programs.iter_mut() {
            if let Err(e) = p.add_local(addr) {
                eprintln!("fastfwd: {e}");
            }
        }
    }
}

impl Daemon {
    fn control_loop(
        &mut self,
        server: &mut ControlServer,
        misses: &Receiver<(u16, IpAddr)>,
    ) -> Result<()> {
        // A burst of kernel changes (a routing daemon loading a table) is
        // applied with one rebuild when it pauses, or every 100 ms while it lasts.
        let mut dirty_since: Option<Instant> = None;
        let mut delta = Delta::default();
        while !os::stop_requested() {
            if self.shared.worker_failed.load(Ordering::SeqCst) {
                bail!("a worker thread panicked; stopping (XDP programs detached)");
            }
            let mut fds = server.poll_fds();
            fds.push(self.kernel.events_fd());
            os::poll_readable(&fds, 25)?;
            self.kernel
                .poll_events(&mut self.router.state.kernel, &mut delta)?;
            if !delta.is_empty() {
                dirty_since.get_or_insert_with(Instant::now);
            }
            if let Some(since) = dirty_since {
                let quiet = os::poll_readable(&[self.kernel.events_fd()], 0)? == 0;
                if quiet || since.elapsed() >= Duration::from_millis(100) {
                    self.apply(std::mem::take(&mut delta));
                    dirty_since = None;
                }
            }
            // Neighbour misses: ask the kernel, within the limiter's caps
            // (per address and overall).
            let now = Instant::now();
            while let Ok((iface, ip)) = misses.try_recv() {
                let Some(ifindex) = self.iface_ifindex(iface) else {
                    continue;
                };
                if self.resolver.should_ask(ifindex, ip, now) {
                    if let Err(e) = self.kernel.resolve(ifindex, ip) {
                        eprintln!("fastfwd: {e}");
                    }
                }
            }
            self.resolver.expire(now);
            // Whatever changed the tables above, the program has them too
            // before any request is answered.
            self.sync_xdp();
            server.serve_pending(|req| self.handle(req));
        }
        Ok(())
    }

    /// Gives the XDP program the tables the workers read, if they changed
    /// (before a control-socket change is acknowledged).
    fn sync_xdp(&mut self) {
        if let Some(x) = self.xdp.as_mut() {
            x.sync(&self.shared.snapshot);
        }
    }

    fn iface_ifindex(&self, iface: u16) -> Option<u32> {
        let tables = self.shared.snapshot.load();
        let port = tables.interfaces().get(usize::from(iface))?.port;
        let name = self.router.ports().get(usize::from(port))?;
        self.router.state.kernel.ifindex_of(name)
    }

    /// Applies a burst of kernel changes: links and addresses rebuild
    /// everything, routes change only their prefixes, neighbours only the
    /// small tables around the same FIBs.
    fn apply(&mut self, delta: Delta) {
        // A link or address change elsewhere in the namespace (another
        // veth, a VPN) leaves the tables alone.
        if delta.other || delta.links.iter().any(|&i| self.router.concerns_link(i)) {
            self.rebuild();
            return;
        }
        if !delta.routes.is_empty() {
            let prefixes: Vec<wire::Cidr> = delta.routes.into_iter().collect();
            self.router.update_routes(&prefixes, &self.shared.snapshot);
        } else if delta.neighbours {
            self.router.refresh_neighbours(&self.shared.snapshot);
        }
    }

    /// Rebuilds all tables from the current state and publishes them.
    fn rebuild(&mut self) -> Option<String> {
        let old = self.router.local_addrs().to_vec();
        match self.router.rebuild_all(&self.shared.snapshot) {
            Ok(()) => {
                set_local_addrs(&mut self.programs, self.router.local_addrs(), &old);
                self.sync_xdp();
                None
            }
            Err(e) => {
                eprintln!("fastfwd: keeping the previous tables: {e}");
                Some(e.to_string())
            }
        }
    }

    fn reports(&self) -> Vec<WorkerReport> {
        let mut reps: Vec<WorkerReport> = self
            .shared
            .reports
            .iter()
            .filter_map(|m| m.lock().ok().map(|r| r.clone()))
            .filter(|r| !r.backend.is_empty())
            .collect();
        // The XDP program counts what it finishes itself, on every CPU.
        if let Some(x) = &self.xdp {
            let n = self.shared.snapshot.load().interfaces().len();
            match x.engine.counters(n) {
                Ok(c) => reps.push(WorkerReport {
                    id: reps.len(),
                    backend: "xdp-program".into(),
                    xdp: Some(super::replay::xdp_json(&c)),
                    counters: c.counters,
                    ..WorkerReport::default()
                }),
                Err(e) => eprintln!("fastfwd: {e}"),
            }
        }
        reps
    }

    fn handle(&mut self, req: Request) -> Response {
        match req {
            Request::ShowInterfaces => Response::ok(self.show_interfaces()),
            Request::ShowWorkers => Response::ok(self.reports()),
            Request::ShowDrops => {
                let total = Counters::sum(self.reports().iter().map(|r| &r.counters));
                let drops: Vec<_> = pipeline::DropReason::ALL
                    .iter()
                    .map(|r| serde_json::json!({"reason": r.name(), "count": total.drop_count(*r), "description": r.description()}))
                    .collect();
                let punts: Vec<_> = PuntReason::ALL
                    .iter()
                    .map(|r| serde_json::json!({"reason": r.name(), "count": total.punt_count(*r), "description": r.description()}))
                    .collect();
                let reps = self.reports();
                Response::ok(serde_json::json!({
                    "drops": drops,
                    "punts": punts,
                    "held_expired": reps.iter().map(|r| r.held_expired).sum::<u64>(),
                    "punts_discarded": reps.iter().map(|r| r.punts_discarded).sum::<u64>(),
                    "neighbour_requests_capped": self.resolver.capped,
                    "tx_ring_full": reps.iter().flat_map(|r| r.ports.iter()).map(|p| p.tx_dropped).sum::<u64>(),
                    "rx_ring_full": reps.iter().flat_map(|r| r.ports.iter()).map(|p| p.rx_dropped).sum::<u64>(),
                }))
            }
            Request::ShowFirewall => Response::ok(self.show_firewall()),
            Request::ShowRoute { prefix } => match prefix {
                None => Response::ok(self.router.route_views()),
                Some(p) => match self.match_route(&p) {
                    Ok(r) => Response::ok(r),
                    Err(e) => Response::err(e),
                },
            },
            Request::ShowNeighbors => Response::ok(self.router.neighbours()),
            Request::RouteAdd { prefix, next_hops } => {
                let r = self.route_add(&prefix, &next_hops);
                self.reply_after_change(r, prefix.parse().ok())
            }
            Request::RouteDel { prefix } => {
                let r = match prefix.parse::<wire::Cidr>() {
                    Ok(p) if self.router.state.api_routes.remove(&p).is_some() => Ok(()),
                    Ok(p) => Err(format!("no route {p} was added through the control socket")),
                    Err(e) => Err(format!("{prefix}: {e}")),
                };
                self.reply_after_change(r, prefix.parse().ok())
            }
            Request::NeighborAdd { dev, ip, mac } => {
                let r = (|| {
                    let ip: IpAddr = ip.parse().map_err(|e| format!("{ip}: {e}"))?;
                    let mac: config::MacAddr = mac.parse().map_err(|e| format!("{mac}: {e}"))?;
                    if self.router.state.config.interface(&dev).is_none() {
                        return Err(format!("no interface {dev}"));
                    }
                    self.router
                        .state
                        .api_neighbours
                        .insert((dev.clone(), ip), mac.0);
                    Ok(())
                })();
                self.reply_after_change(r, None)
            }
            Request::NeighborDel { dev, ip } => {
                let r = match ip.parse::<IpAddr>() {
                    Ok(a)
                        if self
                            .router
                            .state
                            .api_neighbours
                            .remove(&(dev.clone(), a))
                            .is_some() =>
                    {
                        Ok(())
                    }
                    Ok(a) => Err(format!(
                        "no neighbour {a} on {dev} was added through the control socket"
                    )),
                    Err(e) => Err(format!("{ip}: {e}")),
                };
                self.reply_after_change(r, None)
            }
            Request::ConfigCheck { path } => {
                let path = path
                    .map(PathBuf::from)
                    .unwrap_or_else(|| self.config_path.clone());
                match self.candidate(&path) {
                    Ok(_) => Response::ok(
                        serde_json::json!({"file": path.display().to_string(), "valid": true}),
                    ),
                    Err(e) => Response::err(e),
                }
            }
            Request::ConfigReload { path } => {
                let path = path
                    .map(PathBuf::from)
                    .unwrap_or_else(|| self.config_path.clone());
                match self.candidate(&path) {
                    Ok(next) => {
                        self.router.state = next;
                        self.config_path = path.clone();
                        match self.rebuild() {
                            None => Response::ok(
                                serde_json::json!({"file": path.display().to_string(), "applied": true}),
                            ),
                            Some(e) => Response::err(e),
                        }
                    }
                    Err(e) => Response::err(e),
                }
            }
        }
    }

    /// A state with the config at `path`, validated and built but not applied.
    fn candidate(&self, path: &std::path::Path) -> Result<RouterState, String> {
        let cfg = config::Config::load(path).map_err(|e| e.to_string())?;
        if cfg.ports() != self.router.state.config.ports() {
            return Err(format!(
                "{}: the set of interfaces changed ({} -> {}); restart fastfwd to attach to different interfaces",
                path.display(),
                self.router.state.config.ports().join(","),
                cfg.ports().join(",")
            ));
        }
        let mut next = self.router.state.clone();
        next.config = cfg;
        next.build().map_err(|e| e.to_string())?;
        Ok(next)
    }

    /// Publishes a control-socket change: the routes of `route`'s prefix,
    /// or (None) the neighbours.
    fn reply_after_change(&mut self, r: Result<(), String>, route: Option<wire::Cidr>) -> Response {
        match r {
            Ok(()) => {
                match route {
                    Some(p) => self.router.update_routes(&[p], &self.shared.snapshot),
                    None => self.router.refresh_neighbours(&self.shared.snapshot),
                }
                self.sync_xdp();
                Response::ok(serde_json::json!({"applied": true}))
            }
            Err(e) => Response::err(e),
        }
    }

    fn route_add(&mut self, prefix: &str, hops: &[HopSpec]) -> Result<(), String> {
        let p: wire::Cidr = prefix.parse().map_err(|e| format!("{prefix}: {e}"))?;
        if hops.is_empty() {
            return Err("a route needs at least one next hop (via GW and/or dev IFACE)".into());
        }
        let mut next_hops = Vec::new();
        for h in hops {
            let via: Option<IpAddr> = match &h.via {
                Some(v) => Some(v.parse().map_err(|e| format!("{v}: {e}"))?),
                None => None,
            };
            if via.is_some_and(|v| v.is_ipv4() != matches!(p, wire::Cidr::V4(_))) {
                return Err(format!(
                    "next hop {} is not of the prefix's family",
                    h.via.as_deref().unwrap_or("")
                ));
            }
            let dev = match (&h.dev, via) {
                (Some(d), _) => {
                    if self.router.state.config.interface(d).is_none() {
                        return Err(format!("no interface {d}"));
                    }
                    d.clone()
                }
                (None, Some(v)) => self
                    .shared
                    .snapshot
                    .load()
                    .interfaces()
                    .iter()
                    .find(|i| match v {
                        IpAddr::V4(a) => i.ipv4.iter().any(|x| {
                            wire::Ipv4Cidr::new(u32::from(x.addr), x.prefix_len)
                                .is_some_and(|c| c.contains(u32::from(a)))
                        }),
                        IpAddr::V6(a) => i.ipv6.iter().any(|x| {
                            wire::Ipv6Cidr::new(u128::from(x.addr), x.prefix_len)
                                .is_some_and(|c| c.contains(u128::from(a)))
                        }),
                    })
                    .map(|i| i.name.clone())
                    .ok_or_else(|| {
                        format!("{v} is not on any connected subnet; name the interface with dev")
                    })?,
                (None, None) => return Err("a next hop needs via or dev".into()),
            };
            next_hops.push(config::NextHop {
                interface: dev,
                via,
            });
        }
        self.router
            .state
            .api_routes
            .insert(p, ApiRoute { next_hops });
        Ok(())
    }

    /// The route a prefix or address selects (longest match).
    fn match_route(&self, q: &str) -> Result<Vec<control::state::RouteView>, String> {
        let want: wire::Cidr = q.parse().map_err(|e| format!("{q}: {e}"))?;
        Ok(self.router.longest_match(want).into_iter().collect())
    }

    /// The running rule set's counters summed over the workers that use it
    /// (a worker still on an older rule set after a reload is left out
    /// until it picks up the new one).
    fn show_firewall(&self) -> serde_json::Value {
        let Some(fw) = &self.router.state.config.firewall else {
            return serde_json::json!({ "firewall": null });
        };
        let reps = self.reports();
        let current: Vec<&FirewallReport> = reps
            .iter()
            .filter_map(|r| r.firewall.as_ref())
            .filter(|f| Arc::ptr_eq(&f.rules, &fw.compiled))
            .collect();
        // The XDP program counts the rules it evaluates itself.
        let in_program = self
            .xdp
            .as_ref()
            .and_then(|x| x.engine.firewall_counters(&fw.compiled).ok().flatten());
        let summary = fw.compiled.summary(
            current
                .iter()
                .map(|f| &f.counters)
                .chain(in_program.as_ref()),
        );
        let mut ct: Option<firewall::ConntrackStats> = None;
        for c in current.iter().filter_map(|f| f.conntrack.as_ref()) {
            ct.get_or_insert_with(Default::default).accumulate(c);
        }
        serde_json::json!({
            "firewall": summary,
            "conntrack": ct,
            "rejects_rate_limited": current.iter().map(|f| f.stats.rejects_rate_limited).sum::<u64>(),
        })
    }

    fn show_interfaces(&self) -> serde_json::Value {
        let reps = self.reports();
        let total = Counters::sum(reps.iter().map(|r| &r.counters));
        let tables = self.shared.snapshot.load();
        let ifaces: Vec<_> = tables
            .interfaces()
            .iter()
            .enumerate()
            .map(|(i, iface)| {
                let c = total.interfaces.get(i).copied().unwrap_or_default();
                let port = self
                    .router
                    .ports()
                    .get(usize::from(iface.port))
                    .cloned()
                    .unwrap_or_default();
                let tx_dropped: u64 = reps
                    .iter()
                    .flat_map(|r| r.ports.iter())
                    .filter(|p| p.port == port && iface.vlan == pipeline::Vlan::Untagged)
                    .map(|p| p.tx_dropped)
                    .sum();
                serde_json::json!({
                    "name": iface.name,
                    "port": port,
                    "mac": iface.mac.to_string(),
                    "mtu": iface.mtu,
                    "rx_packets": c.rx_packets,
                    "rx_bytes": c.rx_bytes,
                    "rx_errors": c.rx_dropped,
                    "tx_packets": c.tx_packets,
                    "tx_bytes": c.tx_bytes,
                    "tx_drops": tx_dropped,
                })
            })
            .collect();
        serde_json::json!({
            "engine": if self.xdp.is_some() { "xdp" } else { "user" },
            "xdp": reps.iter().find_map(|r| r.xdp.clone()),
            "backend": match self.backend { BackendArg::Xdp => "afxdp", BackendArg::Packet => "packet" },
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "interfaces": ifaces,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_af_xdp_backend_answers_to_its_old_name() {
        use clap::ValueEnum;
        for name in ["afxdp", "xdp"] {
            assert_eq!(BackendArg::from_str(name, false), Ok(BackendArg::Xdp));
        }
        assert_eq!(
            BackendArg::from_str("packet", false),
            Ok(BackendArg::Packet)
        );
        assert!(BackendArg::from_str("dpdk", false).is_err());
    }

    #[test]
    fn cores_parse() {
        assert_eq!(parse_cores("1").unwrap(), vec![1]);
        assert_eq!(parse_cores("0,2-3").unwrap(), vec![0, 2, 3]);
        assert_eq!(parse_cores("3,1,1").unwrap(), vec![1, 3]);
        assert!(parse_cores("").is_err());
        assert!(parse_cores("3-1").is_err());
        assert!(parse_cores("x").is_err());
    }
}
