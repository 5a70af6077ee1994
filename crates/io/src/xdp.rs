//! The XDP steering program (`bpf/xdp_steer.c`, compiled by `build.rs`) and
//! the AF_XDP port that receives what it steers.
//!
//! One program object is loaded per interface, so each interface has its own
//! XSKMAP (keyed by RX queue) and its own table of local addresses. The
//! program is detached when the [`XdpProgram`] is dropped.

use crate::frame::FrameBatch;
use crate::port::{Backend, Port, PortStats};
use crate::sys::bpf;
use crate::sys::xsk::{XskConfig, XskSocket};
use crate::IoError;
use std::net::IpAddr;

pub use crate::sys::xsk::{BindMode, XskConfig as SocketConfig, XskStats};

/// The compiled steering program.
static XDP_STEER_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/xdp_steer.o"));

/// Where the program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver (veth supports it).
    Native,
    /// In the generic skb path (every device, slower).
    Generic,
    /// Native, falling back to generic.
    Auto,
}

/// The steering program attached to one interface.
#[derive(Debug)]
pub struct XdpProgram {
    iface: String,
    ifindex: u32,
    mode_flags: u32,
    xsks: i32,
    local_v4: i32,
    local_v6: i32,
    verdicts: i32,
    /// The BPF link holding the attachment: closing it detaches, so the
    /// program also goes away if the process dies.
    link: Option<crate::sys::Fd>,
    // Declared last: dropped after the detach in `Drop`.
    obj: bpf::Object,
}

impl XdpProgram {
    /// Loads the program and attaches it to `iface` through a BPF link.
    /// Fails if the interface already has an XDP program (it is never
    /// replaced).
    pub fn attach(iface: &str, mode: XdpMode) -> Result<XdpProgram, IoError> {
        let ifindex = crate::if_index(iface)?;
        let attach_err = |source: std::io::Error| match source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => IoError::Permission {
                what: format!("loading the XDP program for {iface}"),
            },
            _ => IoError::XdpAttach {
                iface: iface.to_string(),
                source,
            },
        };
        let obj = bpf::Object::load(XDP_STEER_OBJ).map_err(attach_err)?;
        let prog = obj.program_fd("xdp_steer").map_err(attach_err)?;
        let map = |name: &str| obj.map_fd(name).map_err(attach_err);
        let (xsks, local_v4, local_v6, verdicts) = (
            map("xsks")?,
            map("local_v4")?,
            map("local_v6")?,
            map("verdicts")?,
        );
        let modes: &[u32] = match mode {
            XdpMode::Native => &[bpf::XDP_FLAGS_DRV_MODE],
            XdpMode::Generic => &[bpf::XDP_FLAGS_SKB_MODE],
            XdpMode::Auto => &[bpf::XDP_FLAGS_DRV_MODE, bpf::XDP_FLAGS_SKB_MODE],
        };
        let mut last = std::io::Error::from(std::io::ErrorKind::Unsupported);
        for &m in modes {
            match bpf::xdp_link(ifindex, prog, m) {
                Ok(link) => {
                    return Ok(XdpProgram {
                        iface: iface.to_string(),
                        ifindex,
                        mode_flags: m,
                        xsks,
                        local_v4,
                        local_v6,
                        verdicts,
                        link: Some(link),
                        obj,
                    })
                }
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) || e.raw_os_error() == Some(libc::EEXIST) => {
                    return Err(IoError::XdpAttach {
                        iface: iface.to_string(),
                        source: std::io::Error::new(
                            e.kind(),
                            "another XDP program is already attached (remove it with `ip link set dev IFACE xdp off`)",
                        ),
                    })
                }
                Err(e) => last = e,
            }
        }
        Err(attach_err(last))
    }

    /// The interface name.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Whether the program runs in the driver (else in generic mode).
    pub fn is_native(&self) -> bool {
        self.mode_flags == bpf::XDP_FLAGS_DRV_MODE
    }

    /// Sends packets for `addr` to the host instead of to fastfwd.
    pub fn add_local(&self, addr: IpAddr) -> Result<(), IoError> {
        let r = match addr {
            IpAddr::V4(a) => bpf::map_update(self.local_v4, &u32::from_ne_bytes(a.octets()), &1u8),
            IpAddr::V6(a) => bpf::map_update(self.local_v6, &a.octets(), &1u8),
        };
        r.map_err(|e| IoError::sys(format!("adding local address {addr} on {}", self.iface), e))
    }

    /// Stops treating `addr` as local (missing entries are not an error).
    pub fn remove_local(&self, addr: IpAddr) -> Result<(), IoError> {
        let r = match addr {
            IpAddr::V4(a) => bpf::map_delete(self.local_v4, &u32::from_ne_bytes(a.octets())),
            IpAddr::V6(a) => bpf::map_delete(self.local_v6, &a.octets()),
        };
        match r {
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => Err(IoError::sys(
                format!("removing local address {addr} on {}", self.iface),
                e,
            )),
            _ => Ok(()),
        }
    }

    /// Frames the program redirected to fastfwd and passed to the host,
    /// summed over CPUs.
    pub fn verdict_counts(&self) -> Result<(u64, u64), IoError> {
        let n = crate::sys::os::possible_cpus();
        let read = |k| {
            bpf::percpu_u64(self.verdicts, k, n)
                .map(|v| v.iter().sum::<u64>())
                .map_err(|e| IoError::sys("reading XDP verdict counters", e))
        };
        Ok((read(0)?, read(1)?))
    }

    /// Detaches the program now (also done on drop).
    pub fn detach(&mut self) -> Result<(), IoError> {
        // Closing the link detaches the program.
        self.link = None;
        Ok(())
    }

    fn register(&self, queue: u32, sock_fd: i32) -> Result<(), IoError> {
        bpf::map_update(self.xsks, &queue, &(sock_fd as u32)).map_err(|e| {
            IoError::sys(
                format!("registering AF_XDP socket for {} queue {queue}", self.iface),
                e,
            )
        })
    }
}

impl Drop for XdpProgram {
    fn drop(&mut self) {
        let _ = self.detach();
        let _ = &self.obj;
    }
}

/// The id of the XDP program attached to `ifindex`, if any.
pub fn attached_program(ifindex: u32) -> Result<Option<u32>, IoError> {
    bpf::xdp_query_id(ifindex)
        .map(|id| (id != 0).then_some(id))
        .map_err(|e| IoError::sys(format!("querying XDP on ifindex {ifindex}"), e))
}

/// An AF_XDP socket on one queue of an interface with the steering program.
#[derive(Debug)]
pub struct XdpPort {
    sock: XskSocket,
    stats: PortStats,
}

impl XdpPort {
    /// Opens a socket on `queue` of the program's interface and registers
    /// it in the program's XSKMAP.
    pub fn open(prog: &XdpProgram, queue: u32, cfg: XskConfig) -> Result<XdpPort, IoError> {
        let sock = XskSocket::new(prog.ifindex, queue, cfg).map_err(|e| {
            IoError::sys(format!("AF_XDP socket on {} queue {queue}", prog.iface), e)
        })?;
        prog.register(queue, sock.fd())?;
        Ok(XdpPort {
            sock,
            stats: PortStats::default(),
        })
    }

    /// Whether the socket runs in zero-copy mode.
    pub fn is_zero_copy(&self) -> bool {
        self.sock.is_zero_copy()
    }

    /// Kernel counters of the socket.
    pub fn xsk_stats(&self) -> Option<XskStats> {
        self.sock.stats().ok()
    }
}

impl Port for XdpPort {
    fn rx_batch(&mut self, batch: &mut FrameBatch) -> usize {
        let room = crate::frame::BATCH - batch.len();
        let mut bytes = 0u64;
        let n = self.sock.recv(room, |f| {
            bytes += f.len() as u64;
            batch.push(f);
        });
        self.stats.rx_packets += n as u64;
        self.stats.rx_bytes += bytes;
        n
    }

    fn tx(&mut self, frame: &[u8]) -> bool {
        // On a full ring, push what is queued and retry once.
        let ok = self.sock.send(frame) || {
            self.sock.flush();
            self.sock.send(frame)
        };
        if ok {
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += frame.len() as u64;
        } else {
            self.stats.tx_dropped += 1;
        }
        ok
    }

    fn flush(&mut self) {
        self.sock.flush();
    }

    fn tx_pending(&self) -> usize {
        self.sock.tx_unpublished()
    }

    fn poll_fd(&self) -> i32 {
        self.sock.fd()
    }

    fn stats(&self) -> PortStats {
        let mut s = self.stats;
        if let Ok(k) = self.sock.stats() {
            s.rx_dropped = k.rx_dropped + k.rx_ring_full;
        }
        s
    }

    fn backend(&self) -> Backend {
        Backend::Xdp
    }
}
