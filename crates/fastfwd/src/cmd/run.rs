//! `fastfwd run`: the router daemon's arguments; the daemon is
//! [`router::run`] (workers, control loop, request handler).
//!
//! Threads:
//! - one worker per configured core, pinned, owning its ports (one AF_XDP
//!   socket per queue it serves, or one AF_PACKET socket per interface in a
//!   fanout group) and their TX buffers. It polls while traffic flows and
//!   sleeps in `poll(2)` on its sockets when idle;
//! - the control thread: follows the kernel over netlink, rebuilds and
//!   publishes the tables, asks the kernel to resolve missed neighbours,
//!   serves the control socket and sums the workers' counters.
//!
//! See docs/router.md.

use anyhow::{Context, Result, bail};
use control::protocol::DEFAULT_SOCKET;
use std::path::PathBuf;

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

/// What the XDP engine's program does when the daemon exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnExitArg {
    /// Stays attached, forwarding with the last tables, until the next
    /// `fastfwd run` replaces it without a gap (as after a crash).
    Keep,
    /// As keep, and what needs the pipeline meanwhile (TTL expiring,
    /// neighbour misses, new flows under `ct state` rules) goes to the
    /// kernel, which forwards it if its own forwarding is on.
    Kernel,
    /// Detached: the interfaces go back to the kernel.
    Detach,
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
    /// SCHED_FIFO priority of the workers, 1-99, or 0 for ordinary
    /// scheduling (default 1; 0 with --busy-poll). At 1 a worker preempts
    /// its CPU's ordinary threads, the kernel's receive thread included, so
    /// under overload it drains its rings instead of losing its CPU to
    /// receive work that its full rings then drop.
    #[arg(long, value_name = "PRIORITY")]
    pub worker_rt_priority: Option<u8>,
    /// Entries in each AF_XDP socket's RX and fill rings (a power of two,
    /// 64 to 65536): enough to hold what the kernel delivers while the
    /// worker waits for its core.
    #[arg(long, default_value_t = 2048, value_name = "ENTRIES")]
    pub xsk_rx_ring: u32,
    /// XDP attach mode.
    #[arg(long, value_enum, default_value = "auto")]
    pub xdp_mode: XdpModeArg,
    /// With `--engine xdp`, what its program does when the daemon exits:
    /// `keep` forwarding (restarts and upgrades lose nothing; the next
    /// daemon takes over where it runs), `kernel` (keep, exceptions to the
    /// kernel meanwhile) or `detach`.
    #[arg(long, value_enum, default_value = "keep")]
    pub on_exit: OnExitArg,
    /// Once set up, run as this user (name or number), keeping only
    /// CAP_NET_ADMIN and CAP_NET_RAW (default: stay root, with the same
    /// two capabilities).
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// Members of this group (name or number) may use the control socket
    /// too (mode 0660); default: root and fastfwd's user only (0600).
    #[arg(long, value_name = "GROUP")]
    pub control_group: Option<String>,
    /// Log level (`error`, `warn`, `info`, `debug`, `trace`) or a `tracing`
    /// filter such as `info,router=debug`; `RUST_LOG` overrides it. One
    /// line per event on stderr, never per packet.
    #[arg(long, default_value = "info", value_name = "FILTER")]
    pub log_level: String,
    /// Serve every counter as OpenMetrics text (Prometheus) at
    /// `http://ADDR:PORT/metrics`, e.g. `127.0.0.1:9469`.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Allow `--metrics` on an address other than loopback.
    #[arg(long)]
    pub metrics_public: bool,
    /// Start even when the kernel's routing state holds what fastfwd does
    /// not mirror (rules selecting by TOS, protocol or ports, VRFs,
    /// source-specific, TOS or encapsulated routes): it then forwards
    /// without them, other than the kernel would, and says so in its log,
    /// its metrics and `fib audit`. Without it, the daemon refuses to start
    /// and names each.
    #[arg(long)]
    pub allow_unmodelled: bool,
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

pub fn run(args: Args) -> Result<()> {
    let filter = match tracing_subscriber::EnvFilter::try_from_default_env() {
        Ok(f) => f,
        Err(_) => tracing_subscriber::EnvFilter::try_new(&args.log_level)
            .with_context(|| format!("--log-level {}", args.log_level))?,
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let cores = match &args.cores {
        Some(s) => parse_cores(s)?,
        None => Vec::new(),
    };
    router::run(router::RunOptions {
        config: args.config,
        engine: match args.engine {
            EngineArg::User => router::Engine::User,
            EngineArg::Xdp => router::Engine::Xdp,
        },
        backend: match args.backend {
            BackendArg::Xdp => router::IoBackend::AfXdp,
            BackendArg::Packet => router::IoBackend::Packet,
        },
        cores,
        socket: args.socket,
        busy_poll: args.busy_poll,
        worker_rt_priority: args.worker_rt_priority,
        xsk_rx_ring: args.xsk_rx_ring,
        xdp_mode: match args.xdp_mode {
            XdpModeArg::Auto => router::XdpAttach::Auto,
            XdpModeArg::Native => router::XdpAttach::Native,
            XdpModeArg::Generic => router::XdpAttach::Generic,
        },
        on_exit: match args.on_exit {
            OnExitArg::Keep => router::OnExit::Keep,
            OnExitArg::Kernel => router::OnExit::Kernel,
            OnExitArg::Detach => router::OnExit::Detach,
        },
        user: args.user,
        control_group: args.control_group,
        metrics: args.metrics,
        metrics_public: args.metrics_public,
        allow_unmodelled: args.allow_unmodelled,
    })
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
