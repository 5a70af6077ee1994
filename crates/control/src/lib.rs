//! fastfwd's control plane.
//!
//! - [`netlink`]: rtnetlink message building and parsing.
//! - [`netdev`]: which XDP actions a device supports (generic netlink).
//! - [`kernel`]: dumping and following the kernel's links, addresses,
//!   routes and neighbours; asking the kernel to resolve neighbours.
//! - [`audit`]: the running daemon's mirror, tables and engines against a
//!   fresh dump of the kernel.
//! - [`protocol`] and [`server`]: the control socket and its JSON protocol.
#![forbid(unsafe_code)]

pub mod audit;
pub mod kernel;
pub mod netdev;
pub mod netlink;
pub mod protocol;
pub mod resolve;
pub mod server;

pub use protocol::{Request, Response};

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
    #[error(transparent)]
    Build(#[from] rib::BuildError),
}
