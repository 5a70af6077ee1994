//! The control socket's JSON protocol (documented in
//! `docs/control-protocol.md`): one request object per line, answered by
//! one response object per line (a streamed answer: a head line, one value
//! a line, then `{"end": N}`).

use serde::{Deserialize, Serialize};

/// Default path of the control socket.
pub const DEFAULT_SOCKET: &str = "/run/fastfwd.sock";

/// The protocol's version, carried by every reply. A client refuses a
/// reply of another version rather than guess at its fields; it changes
/// whenever a reply type below changes incompatibly.
pub const PROTOCOL_VERSION: u32 = 1;

/// A request to the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Per-interface counters.
    ShowInterfaces,
    /// Per-worker counters and placement.
    ShowWorkers,
    /// Drops and punts by reason.
    ShowDrops,
    /// The firewall: per-rule counters, connection table.
    ShowFirewall,
    /// Routes, all or the one matching `prefix` (longest match for an address).
    ShowRoute {
        /// A prefix (`10.0.0.0/8`) or an address.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prefix: Option<String>,
    },
    /// Neighbours.
    ShowNeighbors,
    /// Adds or replaces a route held by the daemon.
    RouteAdd {
        /// Destination prefix.
        prefix: String,
        /// Next hops: each `{"via": "gw", "dev": "iface"}` (either may be absent, not both).
        next_hops: Vec<HopSpec>,
    },
    /// Deletes a route added through the control socket.
    RouteDel {
        /// Destination prefix.
        prefix: String,
    },
    /// Adds or replaces a static neighbour.
    NeighborAdd {
        /// Interface name.
        dev: String,
        /// IP address.
        ip: String,
        /// MAC address.
        mac: String,
    },
    /// Deletes a static neighbour added through the control socket.
    NeighborDel {
        /// Interface name.
        dev: String,
        /// IP address.
        ip: String,
    },
    /// Validates a config file without applying it.
    ConfigCheck {
        /// Path; the running config's file when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
    },
    /// Every counter in the OpenMetrics text format (the result is one
    /// string).
    ShowMetrics,
    /// Per worker and pipeline stage: calls, packets, vector size, time
    /// per packet, since the start or the last `clear_runtime`; the XDP
    /// program's counters and exception rate.
    ShowRuntime,
    /// Starts `show_runtime`'s figures again from zero.
    ClearRuntime,
    /// Records the path through the stages of the next `count` packets
    /// that match `filter` (all without one), on every worker or on
    /// `worker`; replaces a trace in progress and its records.
    TraceAdd {
        /// Packets to record, per worker (at most 10,000).
        count: usize,
        /// A filter (`docs/operations.md`, "Filters").
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filter: Option<String>,
        /// Only this worker.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<usize>,
    },
    /// The packets traced so far.
    TraceShow,
    /// Stops tracing and forgets the records.
    TraceClear,
    /// Copies the next `count` frames (per worker) seen at `point` (`rx`,
    /// `tx`, `drop` or `punt`) on `interface` (a port; all without one)
    /// that match `filter`, into bounded per-worker buffers that
    /// `capture_read` empties; replaces a capture in progress.
    CaptureStart {
        /// `rx`, `tx`, `drop` or `punt`.
        point: String,
        /// Frames to copy, per worker (at most 100,000).
        count: usize,
        /// Only this port.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        interface: Option<String>,
        /// A filter (`docs/operations.md`, "Filters").
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filter: Option<String>,
    },
    /// The frames captured since the last read (taken out).
    CaptureRead,
    /// Stops capturing.
    CaptureStop,
    /// Compares the running tables with the kernel and a fresh build
    /// (`fastfwd fib audit`); streamed: one difference per line, then a
    /// summary.
    FibAudit,
    /// Validates and applies a config file as a whole.
    ConfigReload {
        /// Path; the running config's file when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
    },
}

/// One next hop of [`Request::RouteAdd`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HopSpec {
    /// Gateway address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// Interface name (found from the gateway's subnet when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
}

impl HopSpec {
    /// The hop as the RIB checks it ([`rib::Router::api_route_add`]).
    pub fn request(&self) -> rib::router::HopRequest<'_> {
        rib::router::HopRequest {
            via: self.via.as_deref(),
            dev: self.dev.as_deref(),
        }
    }
}

/// The answer to a request.
///
/// A large answer (`show route` without a prefix) is streamed instead: this
/// line with `stream` set and no `result`, then one JSON value per line,
/// then `{"end":N}` with the number of values sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// [`PROTOCOL_VERSION`] of the daemon that answered (0: a daemon from
    /// before versions).
    #[serde(default)]
    pub version: u32,
    /// Whether the request succeeded.
    pub ok: bool,
    /// The values follow, one per line, until `{"end":N}`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// The result (request-specific), when `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// Why it failed, when not `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Response {
    /// A success carrying `result`.
    pub fn ok(result: impl Serialize) -> Response {
        match serde_json::to_value(result) {
            Ok(v) => Response {
                version: PROTOCOL_VERSION,
                ok: true,
                stream: false,
                result: Some(v),
                error: None,
            },
            Err(e) => Response::err(format!("encoding the result: {e}")),
        }
    }

    /// A failure.
    pub fn err(msg: impl Into<String>) -> Response {
        Response {
            version: PROTOCOL_VERSION,
            ok: false,
            stream: false,
            result: None,
            error: Some(msg.into()),
        }
    }
}

/// The reply types: what `result` holds for each request. The daemon
/// builds these and the client reads these; nothing on either side looks
/// fields up by name.
pub mod reply {
    use serde::{Deserialize, Serialize};
    use std::collections::BTreeMap;

    pub use firewall::{ConntrackStats, FirewallSummary};
    pub use rib::Origin;
    pub use rib::state::{NeighbourView, RouteView};

    /// `show_interfaces`.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Interfaces {
        /// `user` or `xdp`.
        pub engine: String,
        /// The XDP program's own counters, with the XDP engine.
        pub xdp: Option<XdpProgram>,
        /// `afxdp` or `packet`: the user-space backend.
        pub backend: String,
        /// With the XDP engine, what its program does when the daemon
        /// exits: `keep` (forwarding on until the next daemon takes over)
        /// or `detach`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub on_exit: Option<String>,
        /// Seconds since the daemon started.
        pub uptime_s: f64,
        /// Every logical interface (VLANs included).
        pub interfaces: Vec<Interface>,
    }

    /// One logical interface's counters (`show_interfaces`).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Interface {
        /// Name in the config.
        pub name: String,
        /// The kernel interface it is on.
        pub port: String,
        /// Its MAC address.
        pub mac: String,
        /// Its MTU.
        pub mtu: u16,
        /// Frames received.
        pub rx_packets: u64,
        /// Bytes received.
        pub rx_bytes: u64,
        /// Frames received and dropped (every drop reason).
        pub rx_errors: u64,
        /// Frames forwarded out of it.
        pub tx_packets: u64,
        /// Bytes forwarded out of it.
        pub tx_bytes: u64,
        /// Frames that found its port's TX ring full, or that the kernel
        /// dropped after the XDP program redirected them into the port
        /// (untagged interface only).
        pub tx_drops: u64,
        /// Frames the kernel dropped after fastfwd sent them through a
        /// bond port: the bond's and its members' `tx_dropped` since the
        /// start (the host's own frames through the bond included; 0 for
        /// a port that is no bond, untagged interface only).
        #[serde(default)]
        pub kernel_tx_dropped: u64,
        /// Frames its port's RX ring had no room for, or too large for a
        /// buffer: lost before the pipeline (untagged interface only).
        pub rx_ring_drops: u64,
        /// Why the XDP engine hands what it forwards out of this interface
        /// to the pipeline, which transmits it (its port takes no frames
        /// redirected from XDP); absent when the program transmits itself.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub pipeline_egress: Option<String>,
    }

    /// What the XDP program finished itself and handed on.
    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
    pub struct XdpProgram {
        /// Frames it decided (forwarded or dropped).
        pub finished: u64,
        /// Frames it forwarded.
        pub forwarded: u64,
        /// Frames it passed to the host's stack.
        pub to_host: u64,
        /// Frames handed to the pipeline, by exception.
        pub exceptions: BTreeMap<String, u64>,
        /// Exceptions lost (no AF_XDP socket, or its ring full).
        pub exceptions_lost: u64,
        /// Redirects the kernel refused.
        pub tx_redirect_failed: u64,
        /// Packets of flows its connection table held (stateful rules).
        pub ct_established: u64,
        /// Frames handed over without their connection-tracking hint (no
        /// headroom in front of them).
        pub meta_failed: u64,
        /// Frames the kernel dropped after the program redirected them into
        /// a port: refused (the port takes no XDP frames) or its ring full.
        /// Not counted as output.
        #[serde(default)]
        pub redirects_dropped: u64,
        /// Exceptions the kernel dropped after the program redirected them:
        /// the AF_XDP socket's ring was full.
        #[serde(default)]
        pub exceptions_ring_full: u64,
        /// Why the two counters above are not kept (the tracepoints could
        /// not be attached); absent when they are.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub redirect_drops_uncounted: Option<String>,
    }

    /// `show_workers`: one per worker, and one for the XDP program.
    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Worker {
        /// Worker number.
        pub id: usize,
        /// CPU it is pinned to.
        pub core: usize,
        /// Backend (`afxdp`, `packet`, `xdp-program`, ...).
        pub backend: String,
        /// Its ports.
        pub ports: Vec<Port>,
        /// Loop rounds that found frames.
        pub busy_rounds: u64,
        /// Times it slept in poll(2).
        pub sleeps: u64,
        /// Frames held while their neighbour was being resolved.
        pub held: u64,
        /// Held frames dropped after waiting too long.
        pub held_expired: u64,
        /// Frames for the host that reached fastfwd instead.
        pub punts_discarded: u64,
        /// Neighbour misses not reported (queue to the control thread full).
        pub misses_lost: u64,
        /// Frames it received for flows another worker owns and passed to
        /// it (a stateful rule set with several workers).
        #[serde(default)]
        pub handed_off: u64,
        /// Frames it could not pass to their flow's worker (its ring
        /// full), dropped.
        #[serde(default)]
        pub handoff_dropped: u64,
        /// The XDP program's counters (its entry only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub xdp: Option<XdpProgram>,
    }

    /// One port of a worker (a socket per port, or per queue of a port):
    /// its name and the counters it keeps itself (`rx_packets`,
    /// `rx_bytes`, `tx_packets`, `tx_bytes`, `tx_dropped`, `rx_dropped`,
    /// `rx_oversize`, flattened beside the name).
    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Port {
        /// Kernel interface name.
        pub port: String,
        /// Its counters.
        #[serde(flatten)]
        pub counters: netio::PortStats,
    }

    /// A counter under a named reason (`show_drops`).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct ReasonCount {
        /// The reason's stable name.
        pub reason: String,
        /// Packets.
        pub count: u64,
        /// What it means.
        pub description: String,
    }

    /// An ICMP error not sent, under its cause (`show_drops`).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct CauseCount {
        /// The cause's stable name.
        pub cause: String,
        /// Errors not sent.
        pub count: u64,
        /// What it means.
        pub description: String,
    }

    /// `show_drops`: every drop and punt reason, and the counters of the
    /// paths around the pipeline.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Drops {
        /// Drops by reason (every reason, zeros included).
        pub drops: Vec<ReasonCount>,
        /// Punts to the host by reason.
        pub punts: Vec<ReasonCount>,
        /// ICMP errors not sent, by cause.
        pub icmp_suppressed: Vec<CauseCount>,
        /// ICMP errors over the rate limit.
        pub icmp_rate_limited: u64,
        /// Frames whose neighbour stayed unresolved too long.
        pub held_expired: u64,
        /// Frames for the host that reached fastfwd instead.
        pub punts_discarded: u64,
        /// Neighbour resolutions asked of the kernel.
        pub neighbour_requests: u64,
        /// Neighbour resolutions not asked, over the cap.
        pub neighbour_requests_capped: u64,
        /// Frames that found a TX ring full.
        pub tx_ring_full: u64,
        /// Frames the kernel dropped before fastfwd saw them.
        pub rx_ring_full: u64,
        /// Frames larger than a frame buffer, dropped on receive.
        pub rx_oversize: u64,
        /// Frames the kernel dropped after the XDP program redirected them
        /// into a port (refused, or its ring full).
        #[serde(default)]
        pub xdp_redirects_dropped: u64,
        /// Exceptions the kernel dropped after the XDP program redirected
        /// them (the AF_XDP socket's ring full).
        #[serde(default)]
        pub xdp_exceptions_ring_full: u64,
        /// Frames dropped because the ring to the worker that owns their
        /// flow was full.
        #[serde(default)]
        pub handoff_dropped: u64,
        /// Frames the kernel dropped on their way out of bond ports (the
        /// bonds' and their members' `tx_dropped` since the start).
        #[serde(default)]
        pub bond_tx_dropped: u64,
    }

    /// `show_firewall`.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Firewall {
        /// The rules with their counters; `None` without rules.
        pub firewall: Option<FirewallSummary>,
        /// The connection table, when a rule is stateful.
        pub conntrack: Option<ConntrackStats>,
        /// Rejects rate-limited into drops.
        pub rejects_rate_limited: u64,
        /// The XDP engine's share of connection tracking (stateful rules
        /// with `--engine xdp`), else `None`.
        pub fast_path: Option<ConntrackFastPath>,
    }

    /// Connection tracking split between the XDP program and the workers.
    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
    pub struct ConntrackFastPath {
        /// Established flows the workers handed to the program.
        pub handoffs: u64,
        /// Flows the program's table had no room for.
        pub refused: u64,
        /// Packets of flows the program held, finished by it.
        pub program_packets: u64,
        /// Packets of flows the program held, handed to the workers for
        /// another reason (neighbour miss, MTU, reject).
        pub worker_packets: u64,
    }

    /// `config_check` and `config_reload`.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct ConfigFile {
        /// The file checked or applied.
        pub file: String,
        /// `config_check`: it is valid (an invalid one is an error reply).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub valid: Option<bool>,
        /// `config_reload`: it was applied.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub applied: Option<bool>,
    }

    pub use crate::audit::{Checked, Difference, EngineChecked};

    /// One line of the `fib_audit` stream: differences, then the summary
    /// (or an error).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(untagged)]
    pub enum AuditLine {
        /// The last line.
        Summary {
            /// What was found and compared.
            summary: AuditSummary,
        },
        /// The audit could not run.
        Error {
            /// Why.
            error: String,
        },
        /// One difference.
        Difference(Difference),
    }

    /// The audit's last line.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct AuditSummary {
        /// Differences found (the lines before).
        pub differences: usize,
        /// How much was compared.
        pub checked: Checked,
    }

    /// `show_runtime`.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Runtime {
        /// Seconds the figures cover (since the start or `clear_runtime`).
        pub seconds: f64,
        /// Every worker's stages.
        pub workers: Vec<WorkerRuntime>,
        /// The XDP program, with the XDP engine.
        pub xdp: Option<XdpRuntime>,
    }

    /// One worker's stages (`show_runtime`).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct WorkerRuntime {
        /// Worker number.
        pub id: usize,
        /// CPU it is pinned to.
        pub core: usize,
        /// Backend.
        pub backend: String,
        /// The pipeline's stages, in the order they run.
        pub stages: Vec<StageRuntime>,
    }

    /// One stage of one worker (`show_runtime`).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct StageRuntime {
        /// `input`, `lookup`, `next_hop`, `acl`, `forward`.
        pub stage: String,
        /// Chunks it ran over (each at most 64 packets).
        pub calls: u64,
        /// Packets it handled.
        pub packets: u64,
        /// Packets in the chunks that were timed (one in
        /// `pipeline::runtime::TIMED_EVERY`).
        pub timed_packets: u64,
        /// Nanoseconds the timed chunks took.
        pub ns: u64,
        /// Packets per call.
        pub vectors_per_call: f64,
        /// Nanoseconds per packet (`ns` over `timed_packets`).
        pub ns_per_packet: f64,
    }

    /// The XDP program over the same interval (`show_runtime`).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct XdpRuntime {
        /// Its counters.
        pub program: XdpProgram,
        /// Frames it handed to the pipeline (every exception).
        pub exceptions: u64,
        /// Exceptions over every frame it saw.
        pub exception_ratio: f64,
        /// The same per CPU (the program runs on the CPU of each receive
        /// queue's interrupt or NAPI thread).
        pub per_cpu: Vec<XdpCpu>,
    }

    /// The XDP program on one CPU (`show_runtime`).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct XdpCpu {
        /// CPU number.
        pub cpu: usize,
        /// Frames it decided there.
        pub finished: u64,
        /// Frames it forwarded there.
        pub forwarded: u64,
        /// Frames it handed to the pipeline there.
        pub exceptions: u64,
        /// Exceptions over every frame it saw there.
        pub exception_ratio: f64,
    }

    /// `clear_runtime`.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Cleared {
        /// The figures start again from zero.
        pub cleared: bool,
    }

    /// `trace_add`.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct TraceArmed {
        /// Workers that trace.
        pub workers: Vec<usize>,
        /// Packets each records at most.
        pub count: usize,
        /// The filter, as given.
        pub filter: Option<String>,
    }

    /// `trace_show`.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Trace {
        /// Packets still to record (summed over the tracing workers).
        pub remaining: usize,
        /// The packets recorded, per worker in order.
        pub packets: Vec<TracePacket>,
    }

    /// One traced packet: what each stage decided, up to the one that
    /// finished it.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct TracePacket {
        /// The worker that handled it.
        pub worker: usize,
        /// Its order among the worker's traced packets.
        pub seq: u64,
        /// Receiving port.
        pub port: String,
        /// Frame length as received.
        pub length: u16,
        /// Its headers, decoded (`IPv4 a > b UDP 1 > 2`).
        pub summary: String,
        /// The stages it went through, in order.
        pub stages: Vec<TraceStep>,
        /// The route it matched, with its next hops (when looked up).
        pub route: Option<String>,
        /// The hop chosen: `d1 via 198.19.0.108`, `d1 on-link`.
        pub next_hop: Option<String>,
        /// The firewall rule that decided it (when the ACL ran).
        pub rule: Option<TraceRule>,
        /// What became of it: `forward`, `drop`, `punt` or `consumed`.
        pub verdict: String,
        /// Egress interface (forward) or reason (drop, punt).
        pub detail: Option<String>,
    }

    /// One stage's decision about a traced packet.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct TraceStep {
        /// `input`, `lookup`, `next_hop`, `acl` or `forward`.
        pub stage: String,
        /// What it decided, in words.
        pub decision: String,
    }

    /// The rule behind an ACL decision.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct TraceRule {
        /// Counter slot (rules in order, then the chains' policies).
        pub slot: u32,
        /// Config line of the rule (none for a policy).
        pub line: Option<usize>,
        /// The rule's text, or `policy accept` / `policy drop`.
        pub text: String,
        /// The verdict in the rule language's words: `accept`, `drop`,
        /// `count`, `reject`, `reject with tcp reset`, `reject with icmpx
        /// admin-prohibited`, ...
        pub action: String,
    }

    /// `capture_start`.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct CaptureStarted {
        /// Workers that capture.
        pub workers: Vec<usize>,
        /// The ports by number, as `CapturedFrame::port` names them.
        pub ports: Vec<String>,
    }

    /// `capture_read`: what the workers copied since the last read.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Captured {
        /// The frames, per worker in order.
        pub frames: Vec<CapturedFrame>,
        /// Frames that matched but found the buffers full (not copied).
        pub lost: u64,
        /// Frames the workers will still copy.
        pub remaining: usize,
    }

    /// One captured frame.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct CapturedFrame {
        /// The port it was received on (`rx`, `drop`, `punt`) or sent
        /// from (`tx`), an index into `CaptureStarted::ports`.
        pub port: u16,
        /// The port's name.
        pub interface: String,
        /// When (ns since the Unix epoch, from the worker's round clock).
        pub time_ns: u64,
        /// The frame, as hex.
        pub data: String,
        /// `drop`: the drop reason; `punt`: the punt reason.
        pub reason: Option<String>,
    }

    /// `route_add`, `route_del`, `neighbor_add`, `neighbor_del`.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Applied {
        /// The change is in the tables.
        pub applied: bool,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_in_the_documented_form() {
        let r: Request =
            serde_json::from_str(r#"{"op":"show_route","prefix":"10.0.0.0/8"}"#).unwrap();
        assert_eq!(
            r,
            Request::ShowRoute {
                prefix: Some("10.0.0.0/8".into())
            }
        );
        let r: Request = serde_json::from_str(r#"{"op":"show_interfaces"}"#).unwrap();
        assert_eq!(r, Request::ShowInterfaces);
        let r: Request = serde_json::from_str(
            r#"{"op":"route_add","prefix":"10.9.0.0/16","next_hops":[{"via":"198.19.0.108"},{"dev":"d1"}]}"#,
        )
        .unwrap();
        assert_eq!(
            r,
            Request::RouteAdd {
                prefix: "10.9.0.0/16".into(),
                next_hops: vec![
                    HopSpec {
                        via: Some("198.19.0.108".into()),
                        dev: None
                    },
                    HopSpec {
                        via: None,
                        dev: Some("d1".into())
                    }
                ]
            }
        );
        assert_eq!(
            serde_json::to_string(&Request::ShowDrops).unwrap(),
            r#"{"op":"show_drops"}"#
        );
        assert!(serde_json::from_str::<Request>(r#"{"op":"reboot"}"#).is_err());
    }

    #[test]
    fn responses_carry_result_or_error() {
        assert_eq!(
            serde_json::to_string(&Response::ok(3)).unwrap(),
            r#"{"version":1,"ok":true,"result":3}"#
        );
        assert_eq!(
            serde_json::to_string(&Response::err("no")).unwrap(),
            r#"{"version":1,"ok":false,"error":"no"}"#
        );
    }

    #[test]
    fn audit_lines_read_back_as_the_variant_sent() {
        use reply::{AuditLine, AuditSummary, Checked, Difference, EngineChecked};
        let lines = [
            AuditLine::Difference(Difference {
                layer: "fib".into(),
                item: "10.0.0.1".into(),
                kind: "missing".into(),
                want: "via 198.19.0.108 dev d1".into(),
                have: String::new(),
            }),
            AuditLine::Error {
                error: "dumping the kernel's routes: EPERM".into(),
            },
            AuditLine::Summary {
                summary: AuditSummary {
                    differences: 1,
                    checked: Checked {
                        kernel_routes: 3,
                        routes: 9,
                        lookups: 18,
                        engine: Some(EngineChecked {
                            engine: "xdp".into(),
                            generation: 4,
                            elements: 100,
                            lookups: 18,
                            skipped: None,
                        }),
                    },
                },
            },
        ];
        for l in lines {
            let text = serde_json::to_string(&l).unwrap();
            assert_eq!(
                serde_json::from_str::<AuditLine>(&text).unwrap(),
                l,
                "{text}"
            );
        }
        assert!(matches!(
            serde_json::from_str::<AuditLine>(
                r#"{"summary":{"differences":0,"checked":{"kernel_routes":1,"routes":2,"lookups":3}}}"#
            ),
            Ok(AuditLine::Summary { .. })
        ));
    }
}
