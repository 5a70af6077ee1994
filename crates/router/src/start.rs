//! Starting and stopping the daemon: the interfaces attached, the sockets
//! opened and spread over the workers, privileges dropped, the threads
//! started and joined.

use crate::daemon::{Daemon, XdpEngine, set_local_addrs};
use crate::ports::{Attach, PerWorker};
use crate::worker::{Shared, WorkerLoop, WorkerSetup};
use anyhow::{Context, Result, bail};
use control::kernel::KernelLink;
use control::server::{Access, ControlServer};
use netio::sys::os;
use netio::xdp::{XdpMode, XdpProgram};
use rib::Router;
use rib::snapshot::Snapshot;
use rib::state::RouterState;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, sync_channel};
use std::time::Instant;
use tracing::{error, info, warn};

/// Which engine forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// The user-space pipeline behind the chosen backend.
    User,
    /// The in-kernel XDP program built from the same tables, handing its
    /// exceptions to the user-space pipeline over AF_XDP.
    Xdp,
}

/// How the user-space pipeline gets its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoBackend {
    /// AF_XDP sockets fed by an XDP program (transit traffic only).
    AfXdp,
    /// AF_PACKET TPACKET_V3 rings (every frame; kernel forwarding must be off).
    Packet,
}

impl IoBackend {
    /// The name `show interfaces` and the CLI use.
    pub fn name(self) -> &'static str {
        match self {
            IoBackend::AfXdp => "afxdp",
            IoBackend::Packet => "packet",
        }
    }
}

/// Where an XDP program is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpAttach {
    /// Native, falling back to generic.
    Auto,
    /// In the driver only.
    Native,
    /// Generic (skb) mode only.
    Generic,
}

/// What happens to the XDP engine's forwarding when the daemon exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnExit {
    /// The program stays attached and forwards with the last published
    /// tables until the next daemon replaces it without a gap; what
    /// needs the pipeline meanwhile is dropped and counted
    /// (`exceptions_lost`). Also what a crash or SIGKILL leaves.
    #[default]
    Keep,
    /// As `Keep`, but what needs the pipeline goes to the kernel, which
    /// forwards it if its own forwarding is on.
    Kernel,
    /// The program is detached: the interfaces go back to the kernel.
    Detach,
}

impl OnExit {
    /// The name `--on-exit` and `show interfaces` use.
    pub fn label(self) -> &'static str {
        match self {
            OnExit::Keep => "keep",
            OnExit::Kernel => "kernel",
            OnExit::Detach => "detach",
        }
    }
}

/// What `fastfwd run` was asked for.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The router's configuration file.
    pub config: PathBuf,
    /// Forwarding engine.
    pub engine: Engine,
    /// I/O backend of the user-space pipeline (the XDP engine's exception
    /// path: AF_XDP only).
    pub backend: IoBackend,
    /// CPUs to run workers on, one worker each (empty: the first CPU this
    /// process may use).
    pub cores: Vec<usize>,
    /// Control socket path.
    pub socket: PathBuf,
    /// Keep polling when idle instead of sleeping.
    pub busy_poll: bool,
    /// SCHED_FIFO priority of the workers (0: ordinary scheduling); None:
    /// `DEFAULT_WORKER_RT_PRIORITY`, or 0 with `busy_poll`.
    pub worker_rt_priority: Option<u8>,
    /// Entries in each AF_XDP socket's RX and fill rings (a power of two;
    /// as many UMEM chunks are reserved for receiving).
    pub xsk_rx_ring: u32,
    /// XDP attach mode.
    pub xdp_mode: XdpAttach,
    /// The XDP engine's program on exit.
    pub on_exit: OnExit,
    /// Run as this user (name or number) once set up, keeping only the
    /// daemon's capabilities; None: stay root.
    pub user: Option<String>,
    /// A group (name or number) whose members may use the control socket
    /// besides root and the daemon's user.
    pub control_group: Option<String>,
    /// Serve OpenMetrics text at `http://ADDR:PORT/metrics`.
    pub metrics: Option<std::net::SocketAddr>,
    /// Allow `metrics` on an address other than loopback.
    pub metrics_public: bool,
    /// Start even when the kernel's routing state holds what fastfwd does
    /// not mirror ([`rib::kernel::KernelState::unmodelled`]).
    pub allow_unmodelled: bool,
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

/// Bounds of `--xsk-rx-ring`: below 64 a NAPI poll's budget overflows the
/// ring; above 64 Ki entries one socket's UMEM passes 128 MiB.
pub const MIN_XSK_RING: u32 = 64;
/// See [`MIN_XSK_RING`].
pub const MAX_XSK_RING: u32 = 65_536;

/// The workers' SCHED_FIFO priority unless told otherwise: the lowest real-
/// time one. A worker that preempts its CPU's ordinary threads, the receive
/// (NAPI) thread of an interface included, drains its rings before more is
/// received into them, so overload is refused at the ring's producer, where
/// it is cheap, and not after the kernel has paid for each frame (receive
/// livelock; docs/router.md, "Worker scheduling").
pub const DEFAULT_WORKER_RT_PRIORITY: u8 = 1;

/// The mode the AF_XDP backend's steering program is attached to port
/// `name` in: the one asked for, but generic on a bond. Every engine
/// forwards over a bond as the kernel does: what it sends leaves on the
/// member the bond's transmit hash picks, and what any member receives is
/// the bond's (AF_PACKET sockets on the bond; the XDP engine attached to
/// the bond, its program running on every member and redirecting into the
/// bond, whose XDP transmit hashes). A program attached
/// to a bond in native mode runs on each member, which hands it the
/// member's frames on the member's queues; AF_XDP sockets there would
/// send past the bond. In generic mode it runs on what the bond receives,
/// into sockets bound to the bond's queues; what the workers send goes
/// through an AF_PACKET socket on the bond (`ports::Attach::open`), whose
/// transmit picks the member by its hash, as for the kernel's.
pub(crate) fn steering_mode(name: &str, asked: XdpMode) -> Result<XdpMode> {
    if crate::ports::bond_members(name).is_none() {
        return Ok(asked);
    }
    match asked {
        XdpMode::Native => bail!(
            "{name} is a bond: the AF_XDP backend serves a bond in generic XDP mode only (its sockets must send through the bond); leave out --xdp-mode native, or use --engine xdp"
        ),
        _ => {
            info!(
                port = name,
                "a bond: AF_XDP steers its frames in generic XDP mode"
            );
            Ok(XdpMode::Generic)
        }
    }
}

/// The workers' SCHED_FIFO priority `args` asks for, or why it is refused.
fn worker_rt_priority(args: &RunOptions) -> Result<u8> {
    match args.worker_rt_priority {
        None if args.busy_poll => Ok(0),
        None => Ok(DEFAULT_WORKER_RT_PRIORITY),
        Some(p) if p > 99 => bail!(
            "--worker-rt-priority {p}: 0 (ordinary scheduling) or a SCHED_FIFO priority from 1 to 99"
        ),
        Some(p) if p > 0 && args.busy_poll => bail!(
            "--busy-poll with --worker-rt-priority {p}: a worker that never sleeps at a real-time priority keeps its CPU from every ordinary thread, the kernel's receive work it waits for included; use --worker-rt-priority 0"
        ),
        Some(p) => Ok(p),
    }
}

/// Runs the router until SIGINT or SIGTERM (or a worker failure): opens
/// and attaches everything, drops privileges, starts the workers and runs
/// the control loop on this thread; detaches everything on the way out.
pub fn run(args: RunOptions) -> Result<()> {
    if !os::is_root() {
        bail!(
            "fastfwd run needs root (CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF) to attach to interfaces"
        );
    }
    let config = config::Config::load(&args.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.engine == Engine::Xdp && args.backend == IoBackend::Packet {
        bail!(
            "--engine xdp hands its exceptions to the pipeline over AF_XDP sockets: use it with --backend afxdp (the default)"
        );
    }
    if args.backend == IoBackend::Packet {
        refuse_kernel_forwarding()?;
    }
    if !(MIN_XSK_RING..=MAX_XSK_RING).contains(&args.xsk_rx_ring)
        || !args.xsk_rx_ring.is_power_of_two()
    {
        bail!(
            "--xsk-rx-ring {}: a power of two from {MIN_XSK_RING} to {MAX_XSK_RING}",
            args.xsk_rx_ring
        );
    }
    let rt_priority = worker_rt_priority(&args)?;
    let cores = if args.cores.is_empty() {
        vec![*os::allowed_cpus()?.first().context("no CPU allowed")?]
    } else {
        args.cores.clone()
    };
    let user = match &args.user {
        Some(u) => Some(os::lookup_user(u).with_context(|| format!("--user {u}"))?),
        None => None,
    };
    let group = match &args.control_group {
        Some(g) => Some(os::lookup_group(g).with_context(|| format!("--control-group {g}"))?),
        None => None,
    };
    if let Some(a) = args.metrics
        && !crate::metrics::is_local(&a)
        && !args.metrics_public
    {
        bail!(
            "--metrics {a}: not a loopback address; the metrics would be readable from the network (add --metrics-public if that is meant)"
        );
    }
    // Before anything is registered: UMEM opened after the privilege drop
    // (an interface re-created) counts against it.
    match os::raise_memlock_limit() {
        Ok(Some(limit)) => warn!(
            limit,
            "RLIMIT_MEMLOCK could not be raised to unlimited: an interface re-created while running may fail to get its AF_XDP memory"
        ),
        Ok(None) => {}
        Err(e) => warn!(error = %e, "RLIMIT_MEMLOCK could not be raised"),
    }
    let mut kernel = KernelLink::open().context("opening netlink")?;
    // Re-reads and audits run on the CPUs no worker uses, where there are.
    kernel.set_background_cpus(
        os::allowed_cpus()?
            .into_iter()
            .filter(|c| !cores.contains(c))
            .collect(),
    );
    let mut state = RouterState::new(config);
    kernel
        .dump(&mut state.kernel)
        .context("reading the kernel's interfaces and routes")?;
    let unmodelled = state.kernel.unmodelled();
    if !unmodelled.is_empty() {
        let list = unmodelled.join("\n  ");
        if !args.allow_unmodelled {
            bail!(
                "the kernel would forward other than fastfwd: its routing state holds what fastfwd does not mirror:\n  {list}\nremove it, or start with --allow-unmodelled to forward without it"
            );
        }
        for item in &unmodelled {
            error!(item = %item, "kernel routing state fastfwd does not mirror (--allow-unmodelled): forwarding without it");
        }
    }
    let missing = rib::state::missing_ports(&state);
    if !missing.is_empty() {
        bail!(
            "{}: interface(s) {} do not exist in this network namespace",
            args.config.display(),
            missing.join(", ")
        );
    }
    let shared = rib::state::shared_ports(&state);
    if !shared.is_empty() {
        let list: Vec<String> = shared.iter().map(ToString::to_string).collect();
        bail!(
            "the kernel would forward these ports' frames other than fastfwd:\n  {}",
            list.join("\n  ")
        );
    }
    let _claims = claim_ports(&state.config.ports())?;
    let oversized = rib::state::oversized_ports(&state, netio::MAX_FRAME);
    if !oversized.is_empty() {
        let list: Vec<String> = oversized
            .iter()
            .map(|(p, mtu)| format!("{p} (MTU {mtu})"))
            .collect();
        bail!(
            "interface(s) {}: the kernel takes frames of up to the MTU + 18 bytes there, and fastfwd's engines carry frames of at most {} bytes (an MTU of at most {}): it would drop the larger ones; lower the MTU (ip link set DEV mtu 1500)",
            list.join(", "),
            netio::MAX_FRAME,
            netio::MAX_FRAME - 18
        );
    }
    let (router, first_tables) = Router::new(state)?;
    let foreign_links = router.foreign_links();
    for w in router.warnings() {
        warn!("{w}");
    }
    let port_names = router.ports().to_vec();
    let n_ports = port_names.len();

    os::catch_stop_signals().context("installing signal handlers")?;
    let mut server = ControlServer::bind_with(
        &args.socket,
        Access {
            owner: user.map(|u| u.uid),
            group,
        },
    )?;

    // I/O: sockets are opened here and moved into the workers.
    let attach = Attach {
        engine: args.engine,
        backend: args.backend,
        native: match args.xdp_mode {
            XdpAttach::Auto => None,
            XdpAttach::Native => Some(true),
            XdpAttach::Generic => Some(false),
        },
        workers: cores.len(),
        xsk: netio::xdp::SocketConfig {
            rx_size: args.xsk_rx_ring,
            ..Default::default()
        },
    };
    let mut programs = Vec::new();
    let mut xdp = None;
    if args.engine != Engine::Xdp {
        // An earlier fastfwd's XDP engine may still forward here (it
        // stays after its daemon by default): the user-space engine takes
        // the ports over, with the gap that detaching leaves.
        for name in &port_names {
            let ifindex = netio::if_index(name)?;
            match xdp_engine::engine::detach_left_behind(ifindex) {
                Ok(Some(id)) => warn!(
                    port = %name,
                    program = id,
                    "detached the XDP engine's program an earlier fastfwd left forwarding here: the user-space engine takes over"
                ),
                Ok(None) => {}
                Err(e) => warn!(port = %name, error = %e, "could not read the port's XDP program"),
            }
        }
    }
    if args.engine == Engine::Xdp {
        let mut engine = xdp_engine::Engine::load(
            xdp_engine::Mode::Attached,
            xdp_engine::FibCapacity::FULL_TABLE,
        )?;
        // Redirected frames the kernel drops are counted by tracepoints;
        // without them such a loss would look like output.
        let faults_counted = engine.count_tx_faults().map_err(|e| e.to_string());
        if let Err(why) = &faults_counted {
            error!(
                error = %why,
                "frames the kernel drops after the XDP program redirected them cannot be counted: a port that refuses XDP frames is found only by its xdp-features"
            );
        }
        let netdev = match control::netdev::NetdevLink::open() {
            Ok(Some(n)) => Some(n),
            Ok(None) => {
                info!(
                    "this kernel has no xdp-features (Linux 6.3+): a port that refuses XDP frames is found by its first refusals"
                );
                None
            }
            Err(e) => {
                warn!(error = %e, "the kernel's netdev family: xdp-features not read");
                None
            }
        };
        let mut x = XdpEngine {
            engine,
            synced: None,
            retry_at: None,
            except_reason: None,
            sweeper: None,
            egress: crate::egress::EgressWatch::new(args.xdp_mode != XdpAttach::Generic),
            netdev,
            faults_counted,
            on_exit: args.on_exit,
        };
        // Which ports take no XDP frames, before the first packet.
        let ports: Vec<(String, Option<u32>)> = port_names
            .iter()
            .map(|n| (n.clone(), netio::if_index(n).ok()))
            .collect();
        x.watch_egress(&ports);
        // The tables first, so the program forwards from its first packet.
        let (s4, s6) = (first_tables.fib4.snapshot(), first_tables.fib6.snapshot());
        let cap = x.engine.capacity();
        let mut image = xdp_engine::Image::compile(
            &first_tables.datapath(),
            s4.trie(),
            s6.trie(),
            first_tables.acl.as_ref(),
            &cap,
        )?;
        image.punt_tx(&x.egress.punted());
        x.engine.publish(image)?;
        drop((s4, s6));
        xdp = Some(x);
    } else if args.backend == IoBackend::AfXdp {
        let mode = match args.xdp_mode {
            XdpAttach::Auto => XdpMode::Auto,
            XdpAttach::Native => XdpMode::Native,
            XdpAttach::Generic => XdpMode::Generic,
        };
        for name in &port_names {
            programs.push(XdpProgram::attach(name, steering_mode(name, mode)?)?);
        }
        set_local_addrs(&mut programs, router.local_addrs(), &[]);
    }
    // worker_ports[w][p]: worker w's socket(s) on port p.
    let mut worker_ports: Vec<PerWorker> = cores
        .iter()
        .map(|_| (0..n_ports).map(|_| None).collect())
        .collect();
    if let Some(x) = xdp.as_mut() {
        // Every port in the maps before the program runs anywhere: where
        // it replaces an earlier daemon's, traffic is flowing already.
        for (p, name) in port_names.iter().enumerate() {
            x.engine.add_port(name, netio::if_index(name)?, p as u16)?;
        }
    }
    let mut attached = Vec::with_capacity(n_ports);
    for (p, name) in port_names.iter().enumerate() {
        let ifindex = netio::if_index(name)?;
        let per_worker = attach.open(p, name, ifindex, &mut programs, xdp.as_mut())?;
        for (w, port) in per_worker.into_iter().enumerate() {
            worker_ports[w][p] = port;
        }
        attached.push(Some(ifindex));
    }

    let shared = Arc::new(Shared::new(Snapshot::new(first_tables), cores.len()));
    // Bound before privileges go (a port below 1024 needs them).
    let metrics_server = match args.metrics {
        Some(a) => Some(Arc::new(
            crate::metrics::bind(a).map_err(|e| anyhow::anyhow!("--metrics {a}: {e}"))?,
        )),
        None => None,
    };
    // Everything that needs privileges is open or attached: keep only
    // what the running daemon uses (docs/router.md, "Privileges").
    if rt_priority > 0 {
        // Only a privileged thread may choose SCHED_FIFO, and a thread
        // starts under its creator's policy: this thread takes it while it
        // still may, passes it to the workers it starts below, and then
        // returns to ordinary scheduling.
        os::set_realtime(0, rt_priority.into()).with_context(|| {
            format!(
                "--worker-rt-priority {rt_priority}: this process may not run threads under SCHED_FIFO (it needs CAP_SYS_NICE); --worker-rt-priority 0 keeps ordinary scheduling"
            )
        })?;
    }
    os::drop_privileges(os::DAEMON_CAPABILITIES, user).context("dropping privileges")?;
    let (miss_tx, miss_rx) = sync_channel::<(u16, IpAddr)>(1024);
    let mut handles = Vec::new();
    let mut to_workers = Vec::new();
    // The rings between the workers that will run, in their order.
    let running = worker_ports
        .iter()
        .filter(|ports| ports.iter().any(Option::is_some))
        .count();
    let mut handoffs = crate::handoff::mesh(running)
        .context("the rings between workers")?
        .map(Vec::into_iter);
    for (w, (&core, ports)) in cores.iter().zip(worker_ports).enumerate() {
        if ports.iter().all(Option::is_none) {
            warn!(
                worker = w,
                cpu = core,
                "no queue to serve (the interfaces have fewer RX queues than workers); not started"
            );
            continue;
        }
        let (changes_tx, changes_rx) = channel();
        to_workers.push(changes_tx);
        let flow_table = match xdp.as_ref() {
            Some(x) => Some(x.engine.flow_table()?),
            None => None,
        };
        let setup = WorkerSetup {
            id: w,
            core: Some(core),
            busy_poll: args.busy_poll,
            ports,
            port_names: port_names.clone(),
            misses: miss_tx.clone(),
            punt_to_kernel_copy: args.backend == IoBackend::Packet,
            port_changes: Some(changes_rx),
            flow_table,
            handoff: handoffs.as_mut().and_then(Iterator::next),
        };
        let worker = WorkerLoop::new(setup, &shared);
        let sh = shared.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("fastfwd-w{w}"))
                .spawn(move || worker.run(sh))
                .context("starting a worker thread")?,
        );
    }
    drop(miss_tx);
    if rt_priority > 0 {
        os::set_ordinary(0).context("returning the control thread to SCHED_OTHER")?;
    }
    info!(
        ports = %port_names.join(","),
        workers = handles.len(),
        cpus = ?cores,
        engine = ?args.engine,
        backend = args.backend.name(),
        socket = %args.socket.display(),
        "forwarding"
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
        attach,
        attached,
        to_workers,
        audit: None,
        route_updates: 0,
        kernel_batches: 0,
        rebuilds: 0,
        runtime_base: Default::default(),
        unmodelled,
        foreign_links,
        oversized: Vec::new(),
        shared_ports: Vec::new(),
        bond_tx_base: port_names
            .iter()
            .filter_map(|n| crate::ports::bond_tx_dropped(n))
            .flatten()
            .collect(),
    };
    // Started after the privilege drop, like every thread but this one.
    let metrics_stop = Arc::new(AtomicBool::new(false));
    let metrics_thread = match &metrics_server {
        Some(srv) => {
            let (srv, socket, stop) = (
                Arc::clone(srv),
                args.socket.clone(),
                Arc::clone(&metrics_stop),
            );
            Some(
                std::thread::Builder::new()
                    .name("fastfwd-metrics".into())
                    .spawn(move || crate::metrics::serve(&srv, &socket, &stop))
                    .context("starting the metrics thread")?,
            )
        }
        None => None,
    };
    if let Some(a) = args.metrics {
        info!(address = %a, "serving metrics at /metrics");
    }
    let result = daemon.control_loop(&mut server, &miss_rx);
    metrics_stop.store(true, Ordering::SeqCst);
    if let Some(t) = metrics_thread {
        let _ = t.join();
    }
    shared.stop.store(true, Ordering::SeqCst);
    for h in handles {
        let _ = h.join();
    }
    // Sockets closed with the workers. The XDP engine's program stays
    // (forwarding on) or goes as asked; the steering programs go.
    if let Some(mut x) = daemon.xdp.take() {
        match args.on_exit {
            OnExit::Keep => {
                x.engine.release();
                info!(
                    "the XDP engine's program stays attached, forwarding with the last tables (--on-exit keep)"
                );
            }
            OnExit::Kernel => {
                if let Err(e) = x.engine.send_exceptions_to_kernel() {
                    warn!(error = %e, "the program's exceptions could not be sent to the kernel: they are dropped and counted until the next daemon");
                }
                x.engine.release();
                info!(
                    "the XDP engine's program stays attached, forwarding with the last tables; what needs the pipeline goes to the kernel (--on-exit kernel)"
                );
            }
            OnExit::Detach => x.engine.detach_all(),
        }
    }
    for mut p in daemon.programs.drain(..) {
        if let Err(e) = p.detach() {
            warn!(error = %e, "detaching");
        }
    }
    drop(server);
    info!("stopped");
    result
}

/// Where each running daemon locks the ports it forwards on (systemd's
/// `RuntimeDirectory=fastfwd` under the shipped unit).
const PORT_LOCKS: &str = "/run/fastfwd/ports";

/// Locks each of `ports` in this network namespace for this process
/// (`flock` on `PORT_LOCKS/<netns>-<port>.lock`, a root-only directory,
/// released however the process ends), so a second fastfwd on the same
/// ports is refused, naming the one running, instead of forwarding every
/// frame a second time (AF_PACKET) or failing half attached. The files
/// must stay open while forwarding. Where the directory cannot be made,
/// says so and goes on unguarded.
fn claim_ports(ports: &[&str]) -> Result<Vec<std::fs::File>> {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = std::path::Path::new(PORT_LOCKS);
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        warn!(dir = %dir.display(), error = %e, "no port locks: a second fastfwd on the same ports would not be refused");
        return Ok(Vec::new());
    }
    let netns = os::netns_id().context("reading this network namespace's identity")?;
    let mut held = Vec::new();
    for port in ports {
        let path = dir.join(format!("{netns}-{port}.lock"));
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        if !os::try_lock_exclusive(&f).with_context(|| format!("locking {}", path.display()))? {
            let mut holder = String::new();
            let _ = f.read_to_string(&mut holder);
            bail!(
                "port {port} is already forwarded by another fastfwd in this network namespace (pid {}, {}): stop it first",
                holder.trim(),
                path.display()
            );
        }
        f.set_len(0)?;
        f.rewind()?;
        writeln!(f, "{}", std::process::id())?;
        held.push(f);
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped systemd unit (`dist/fastfwd.service`) lets the daemon
    /// start on its defaults: every capability it uses before dropping
    /// them (and CAP_SETPCAP, to drop them from the bounding set) is in
    /// the bounding set, and the workers' default real-time priority is
    /// neither restricted nor missing CAP_SYS_NICE. The daemon is started
    /// under the unit by a real systemd in
    /// `crates/fastfwd/tests/router_systemd.rs`.
    /// The largest MTU a config may give is what a frame buffer holds,
    /// with an Ethernet header and two VLAN tags.
    #[test]
    fn the_largest_mtu_fills_a_frame_buffer() {
        assert_eq!(config::MAX_MTU as usize + 14 + 8, netio::MAX_FRAME);
    }

    #[test]
    fn the_shipped_unit_allows_what_the_defaults_need() {
        let unit = include_str!("../../../dist/fastfwd.service");
        let value = |key: &str| {
            unit.lines()
                .filter(|l| !l.starts_with('#'))
                .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        };
        let bounding: Vec<&str> = value("CapabilityBoundingSet")
            .expect("a bounding set")
            .split_whitespace()
            .collect();
        let mut needed = vec![
            "CAP_NET_ADMIN",
            "CAP_NET_RAW",
            "CAP_BPF",
            "CAP_PERFMON",
            "CAP_IPC_LOCK",
            "CAP_SETPCAP",
        ];
        if DEFAULT_WORKER_RT_PRIORITY > 0 {
            needed.push("CAP_SYS_NICE");
            assert_ne!(
                value("RestrictRealtime"),
                Some("yes"),
                "SCHED_FIFO workers under RestrictRealtime=yes: the daemon refuses to start"
            );
        }
        for cap in needed {
            assert!(
                bounding.contains(&cap),
                "{cap} is not in the unit's bounding set"
            );
        }
        let exec = value("ExecStart").expect("ExecStart");
        assert!(
            exec.contains("fastfwd run") && !exec.contains("--worker-rt-priority"),
            "{exec}"
        );
    }
}
