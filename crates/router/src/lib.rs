//! fastfwd's router runtime: what `fastfwd run` and `fastfwd replay` drive.
//!
//! - [`worker`]: the forwarding worker loop, over any [`netio::Port`]
//!   (AF_XDP, AF_PACKET, or [`memport::MemoryPort`] in tests);
//! - [`daemon`] (private): the control loop following the kernel and the
//!   typed request handler behind the control socket;
//! - [`run`]: starting, privileges, stopping;
//! - [`replay`]: the same pipeline and XDP engine over pcap files, with the
//!   tables built by the same builder (`control::RouterState::build_over`).
//!
//! The tables come from `control` (kernel mirror + config + control socket,
//! one source of truth); the per-packet work is `pipeline`'s and
//! `xdp_engine`'s. See docs/router.md.

mod daemon;
pub mod memport;
pub mod metrics;
pub mod ports;
pub mod replay;
mod start;
pub mod worker;

pub use start::{run, Engine, IoBackend, RunOptions, XdpAttach};
