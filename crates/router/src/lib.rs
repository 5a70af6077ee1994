//! fastfwd's router runtime: what `fastfwd run` and `fastfwd replay` drive.
//!
//! - [`worker`]: the forwarding worker loop, over any [`netio::Port`]
//!   (AF_XDP, AF_PACKET, or [`memport::MemoryPort`] in tests);
//! - `daemon` (private): the control loop following the kernel and the
//!   typed request handler behind the control socket;
//! - [`run`]: starting, privileges, stopping;
//! - [`replay`]: the same pipeline and XDP engine over pcap files, with the
//!   tables built by the same builder (`rib::RouterState::build_over`);
//! - [`trace`]: packet traces in words (`trace show`, `replay --trace`);
//! - [`capture`]: copies of the frames at one point of the fast path
//!   (`fastfwd capture`).
//!
//! The tables come from `control` (kernel mirror + config + control socket,
//! one source of truth); the per-packet work is `pipeline`'s and
//! `xdp_engine`'s. See docs/router.md.

mod batching;
pub mod capture;
mod daemon;
mod egress;
pub mod handoff;
pub mod memport;
pub mod metrics;
pub mod ports;
pub mod replay;
mod start;
pub mod trace;
pub mod worker;

pub use start::{Engine, IoBackend, OnExit, RunOptions, XdpAttach, run};

/// The config the unit tests of the worker loop and the request handler
/// run on: the lab's dut, one static route through the sink and its
/// neighbour.
#[cfg(test)]
const TEST_CONFIG: &str = r#"
[[interfaces]]
name = "d0"
mac = "02:00:00:00:00:10"
addresses = ["198.18.0.10/24"]

[[interfaces]]
name = "d1"
mac = "02:00:00:00:01:10"
addresses = ["198.19.0.10/24"]

[[routes]]
prefix = "203.0.113.0/24"
via = "198.19.0.108"

[[neighbours]]
interface = "d1"
ip = "198.19.0.108"
mac = "02:00:00:00:01:08"
"#;
