//! I/O backends that move frames between Linux interfaces and fastfwd's
//! workers.
//!
//! - [`xdp`]: an XDP program that steers transit IPv4/IPv6 to AF_XDP
//!   sockets (everything for the host goes on to the kernel), and the
//!   AF_XDP [`Port`] over those sockets.
//! - [`packet`]: the AF_PACKET fallback (TPACKET_V3 ring, fanout,
//!   `sendmmsg` with qdisc bypass).
//! - [`frame`]: the fixed-size frame batches the workers and pipeline use.
//! - [`c_header`]: reads a BPF program's C header, for the tests that
//!   check the Rust side's copy of its layout.
//! - [`sys`]: the `fastfwd-sys` crate, the only one with `unsafe`:
//!   sockets, rings, BPF test runs, netlink, namespaces.
//!
//! Every backend implements [`Port`], so workers and tests drive them alike.

#![forbid(unsafe_code)]

pub mod c_header;
pub mod frame;
pub mod packet;
pub mod pcap;
pub mod port;
/// System calls and raw memory: the `fastfwd-sys` crate, the only one
/// with `unsafe`.
pub use fastfwd_sys as sys;
pub mod xdp;

pub use frame::{BATCH, FRAME_CAP, FrameBatch, MAX_FRAME};
pub use port::{Backend, Port, PortStats, QueueSet, SplitPort};
pub use sys::netlink::NetlinkSocket;

/// For tests that need root: true when running as root. Otherwise prints
/// that `what` is skipped and returns false, unless `CI` is set (to
/// anything but `false` or `0`): CI runs as root, so there a test that
/// would skip fails instead of passing without running.
pub fn root_or_skip(what: &str) -> bool {
    if sys::os::is_root() {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(
        !ci,
        "{what} needs root, and CI is set: it must run, not skip"
    );
    eprintln!("skipping {what}: needs root to create network namespaces");
    false
}

/// Errors of the I/O layer, naming what failed and where.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// The interface does not exist in this network namespace.
    #[error("interface {name}: not found in this network namespace")]
    NoSuchInterface {
        /// Interface name.
        name: String,
    },
    /// The operation needs CAP_NET_ADMIN / CAP_NET_RAW / CAP_BPF.
    #[error(
        "{what}: permission denied (fastfwd needs root or CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF)"
    )]
    Permission {
        /// What was attempted.
        what: String,
    },
    /// The XDP program could not be loaded or attached.
    #[error(
        "interface {iface}: XDP attach failed: {source} (the AF_PACKET backend, --backend packet, works without XDP)"
    )]
    XdpAttach {
        /// Interface name.
        iface: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// Any other system call failure.
    #[error("{what}: {source}")]
    Sys {
        /// What was attempted.
        what: String,
        /// Underlying error.
        source: std::io::Error,
    },
}

impl IoError {
    /// Wraps an OS error, turning EPERM/EACCES into [`IoError::Permission`].
    pub fn sys(what: impl Into<String>, source: std::io::Error) -> IoError {
        let what = what.into();
        match source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => IoError::Permission { what },
            _ => IoError::Sys { what, source },
        }
    }
}

/// The index of interface `name`, or [`IoError::NoSuchInterface`].
pub fn if_index(name: &str) -> Result<u32, IoError> {
    sys::os::if_index(name).map_err(|_| IoError::NoSuchInterface {
        name: name.to_string(),
    })
}
