//! fastfwd's control plane.
//!
//! - [`netlink`]: rtnetlink message building and parsing.
//! - [`netdev`]: which XDP actions a device supports (generic netlink).
//! - [`kernel`]: dumping and following the kernel's links, addresses,
//!   routes and neighbours; asking the kernel to resolve neighbours.
//! - [`state`]: the kernel mirror, config and control-socket additions, and
//!   the build of one pipeline snapshot from all of them.
//! - [`protocol`] and [`server`]: the control socket and its JSON protocol.
#![forbid(unsafe_code)]

pub mod audit;
pub mod kernel;
pub mod netdev;
pub mod netlink;
pub mod policy;
pub mod protocol;
pub mod resolve;
pub mod router;
pub mod server;
pub mod snapshot;
pub mod state;

pub use protocol::{Request, Response};
pub use router::{Router, RouterTables};
pub use state::{Built, KernelState, RouterState};

/// Errors of the control plane.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Talking to the kernel over netlink failed.
    #[error("netlink: {0}")]
    Netlink(String),
    /// The control socket failed.
    #[error("control socket {0}")]
    Socket(String),
    /// The pipeline refused the merged tables.
    #[error("building tables: {0}")]
    Build(String),
}
