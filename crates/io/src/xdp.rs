//! The XDP steering program (`bpf/xdp_steer.c`, compiled into
//! `bpf/xdp_steer.o` by `scripts/bpf-build`) and the AF_XDP port that
//! receives what it steers. The program is loaded with aya (pure Rust: no
//! libbpf, no clang at build time).
//!
//! One program object is loaded per interface, so each interface has its own
//! XSKMAP (keyed by RX queue) and its own table of local addresses. The
//! program is attached through a BPF link: it is detached when the
//! [`XdpProgram`] is dropped, and by the kernel if the process dies.

use crate::IoError;
use crate::frame::FrameBatch;
use crate::port::{Backend, Port, PortStats};
use crate::sys::xsk::{XskConfig, XskSocket};
use aya::Ebpf;
use aya::maps::{HashMap, MapData, PerCpuArray, XskMap};
use aya::programs::{ProgramError, Xdp, XdpFlags};
use std::net::IpAddr;
use std::os::fd::AsRawFd;

pub use crate::sys::xsk::{BindMode, XskConfig as SocketConfig, XskStats};

/// The compiled steering program, committed beside its source (the CI
/// checks that rebuilding the source gives these bytes).
/// (ELF parsing needs the bytes aligned, which `include_bytes!` does not promise.)
static XDP_STEER_OBJ: &[u8] = aya::include_bytes_aligned!("../bpf/xdp_steer.o");

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
pub struct XdpProgram {
    iface: String,
    ifindex: u32,
    native: bool,
    xsks: XskMap<MapData>,
    local_v4: HashMap<MapData, u32, u8>,
    local_v6: HashMap<MapData, [u8; 16], u8>,
    verdicts: PerCpuArray<MapData, u64>,
    /// Holds the program and its link (dropping it detaches).
    ebpf: Option<Ebpf>,
}

impl std::fmt::Debug for XdpProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpProgram")
            .field("iface", &self.iface)
            .field("ifindex", &self.ifindex)
            .field("native", &self.native)
            .field("attached", &self.ebpf.is_some())
            .finish()
    }
}

/// The OS error inside an aya error, when there is one.
fn os_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        cur = err.source();
    }
    None
}

impl XdpProgram {
    /// Loads the program and attaches it to `iface` through a BPF link.
    /// Fails if the interface already has an XDP program (it is never
    /// replaced).
    pub fn attach(iface: &str, mode: XdpMode) -> Result<XdpProgram, IoError> {
        let ifindex = crate::if_index(iface)?;
        let fail = |what: &str, e: &(dyn std::error::Error + 'static)| {
            let errno = os_error(e).and_then(std::io::Error::raw_os_error);
            match errno {
                Some(libc::EPERM) | Some(libc::EACCES) => IoError::Permission {
                    what: format!("{what} for {iface}"),
                },
                Some(libc::EBUSY) | Some(libc::EEXIST) => IoError::XdpAttach {
                    iface: iface.to_string(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::AlreadyExists,
                        "another XDP program is already attached (remove it with `ip link set dev IFACE xdp off`)",
                    ),
                },
                _ => IoError::XdpAttach {
                    iface: iface.to_string(),
                    source: std::io::Error::other(format!("{what}: {}", chain(e))),
                },
            }
        };
        let mut ebpf = Ebpf::load(XDP_STEER_OBJ).map_err(|e| fail("loading xdp_steer.o", &e))?;
        let prog: &mut Xdp = ebpf
            .program_mut("xdp_steer")
            .ok_or_else(|| {
                fail(
                    "finding program xdp_steer",
                    &std::io::Error::other("missing"),
                )
            })?
            .try_into()
            .map_err(|e: ProgramError| fail("program xdp_steer", &e))?;
        prog.load()
            .map_err(|e| fail("verifying program xdp_steer", &e))?;
        let modes: &[(XdpFlags, bool)] = match mode {
            XdpMode::Native => &[(XdpFlags::DRV_MODE, true)],
            XdpMode::Generic => &[(XdpFlags::SKB_MODE, false)],
            XdpMode::Auto => &[(XdpFlags::DRV_MODE, true), (XdpFlags::SKB_MODE, false)],
        };
        let mut native = None;
        let mut last = None;
        for &(flags, is_native) in modes {
            match prog.attach_to_if_index(ifindex, flags) {
                Ok(_) => {
                    native = Some(is_native);
                    break;
                }
                Err(e) => {
                    let busy = matches!(
                        os_error(&e).and_then(std::io::Error::raw_os_error),
                        Some(libc::EBUSY) | Some(libc::EEXIST)
                    );
                    let err = fail("attaching", &e);
                    if busy {
                        return Err(err);
                    }
                    last = Some(err);
                }
            }
        }
        let Some(native) = native else {
            return Err(
                last.unwrap_or_else(|| fail("attaching", &std::io::Error::other("no mode")))
            );
        };
        let mut take = |name: &str| {
            ebpf.take_map(name).ok_or_else(|| {
                fail(
                    &format!("finding map {name}"),
                    &std::io::Error::other("missing"),
                )
            })
        };
        let (xsks, v4, v6, verdicts) = (
            take("xsks")?,
            take("local_v4")?,
            take("local_v6")?,
            take("verdicts")?,
        );
        let typed = |name: &str, e: aya::maps::MapError| fail(&format!("map {name}"), &e);
        Ok(XdpProgram {
            iface: iface.to_string(),
            ifindex,
            native,
            xsks: XskMap::try_from(xsks).map_err(|e| typed("xsks", e))?,
            local_v4: HashMap::try_from(v4).map_err(|e| typed("local_v4", e))?,
            local_v6: HashMap::try_from(v6).map_err(|e| typed("local_v6", e))?,
            verdicts: PerCpuArray::try_from(verdicts).map_err(|e| typed("verdicts", e))?,
            ebpf: Some(ebpf),
        })
    }

    /// Attaches the loaded program to the interface of the same name,
    /// re-created as `ifindex` (the old link died with the old device), in
    /// the mode it had. Its maps (local addresses) are kept; the XSKMAP
    /// entries of closed sockets are gone with them. Needs CAP_NET_ADMIN
    /// only: nothing is loaded.
    pub fn reattach(&mut self, ifindex: u32) -> Result<(), IoError> {
        let iface = self.iface.clone();
        let fail = |what: &str, detail: String| IoError::XdpAttach {
            iface: iface.clone(),
            source: std::io::Error::other(format!("{what}: {detail}")),
        };
        let flags = if self.native {
            XdpFlags::DRV_MODE
        } else {
            XdpFlags::SKB_MODE
        };
        let prog: &mut Xdp = self
            .ebpf
            .as_mut()
            .and_then(|e| e.program_mut("xdp_steer"))
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| fail("re-attaching", "the program was detached".into()))?;
        prog.attach_to_if_index(ifindex, flags)
            .map_err(|e| fail("re-attaching", chain(&e)))?;
        self.ifindex = ifindex;
        Ok(())
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
        self.native
    }

    /// Sends packets for `addr` to the host instead of to fastfwd.
    pub fn add_local(&mut self, addr: IpAddr) -> Result<(), IoError> {
        let r = match addr {
            IpAddr::V4(a) => self.local_v4.insert(u32::from_ne_bytes(a.octets()), 1u8, 0),
            IpAddr::V6(a) => self.local_v6.insert(a.octets(), 1u8, 0),
        };
        r.map_err(|e| map_err(format!("adding local address {addr} on {}", self.iface), e))
    }

    /// Stops treating `addr` as local (missing entries are not an error).
    pub fn remove_local(&mut self, addr: IpAddr) -> Result<(), IoError> {
        let r = match addr {
            IpAddr::V4(a) => self.local_v4.remove(&u32::from_ne_bytes(a.octets())),
            IpAddr::V6(a) => self.local_v6.remove(&a.octets()),
        };
        match r {
            Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(e) if os_error(&e).and_then(std::io::Error::raw_os_error) == Some(libc::ENOENT) => {
                Ok(())
            }
            Err(e) => Err(map_err(
                format!("removing local address {addr} on {}", self.iface),
                e,
            )),
            Ok(()) => Ok(()),
        }
    }

    /// Frames the program redirected to fastfwd and passed to the host,
    /// summed over CPUs.
    pub fn verdict_counts(&self) -> Result<(u64, u64), IoError> {
        let read = |k: u32| {
            self.verdicts
                .get(&k, 0)
                .map(|v| v.iter().sum::<u64>())
                .map_err(|e| map_err("reading XDP verdict counters".into(), e))
        };
        Ok((read(0)?, read(1)?))
    }

    /// Detaches the program now (also done on drop).
    pub fn detach(&mut self) -> Result<(), IoError> {
        // Dropping the object closes the link, which detaches the program.
        self.ebpf = None;
        Ok(())
    }

    fn register(&mut self, queue: u32, sock: &XskSocket) -> Result<(), IoError> {
        self.xsks.set(queue, sock.as_raw_fd(), 0).map_err(|e| {
            map_err(
                format!("registering AF_XDP socket for {} queue {queue}", self.iface),
                e,
            )
        })
    }
}

/// An error and those of its causes its message does not already show.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

/// An aya map error as an [`IoError`] saying what was being done.
pub fn map_err(what: String, e: aya::maps::MapError) -> IoError {
    match os_error(&e) {
        Some(io) => IoError::sys(
            what,
            std::io::Error::from_raw_os_error(io.raw_os_error().unwrap_or(libc::EIO)),
        ),
        None => IoError::Sys {
            what,
            source: std::io::Error::other(chain(&e)),
        },
    }
}

/// Splits the connection-tracking hint (`FrameBatch::ct_hint`) the
/// program put in front of a frame from the frame itself.
pub type HintReader = fn(&[u8]) -> (u8, &[u8]);

/// An AF_XDP socket on one queue of an interface with the steering program.
#[derive(Debug)]
pub struct XdpPort {
    sock: XskSocket,
    stats: PortStats,
    /// Set when the program puts a hint in front of each frame.
    hints: Option<HintReader>,
}

impl XdpPort {
    /// Opens a socket on `queue` of the program's interface and registers
    /// it in the program's XSKMAP.
    pub fn open(prog: &mut XdpProgram, queue: u32, cfg: XskConfig) -> Result<XdpPort, IoError> {
        let sock = XskSocket::new(prog.ifindex, queue, cfg).map_err(|e| {
            IoError::sys(format!("AF_XDP socket on {} queue {queue}", prog.iface), e)
        })?;
        prog.register(queue, &sock)?;
        Ok(XdpPort {
            sock,
            stats: PortStats::default(),
            hints: None,
        })
    }

    /// Opens a socket on `queue` of interface `iface` (`ifindex`) and
    /// stores it at `key` of `xsks`, another program's XSKMAP (the XDP
    /// engine's exception path). `hints` splits each frame's hint from it.
    #[allow(clippy::too_many_arguments)]
    pub fn open_into(
        iface: &str,
        ifindex: u32,
        queue: u32,
        xsks: &mut XskMap<MapData>,
        key: u32,
        cfg: XskConfig,
        hints: Option<HintReader>,
    ) -> Result<XdpPort, IoError> {
        let sock = XskSocket::new(ifindex, queue, cfg)
            .map_err(|e| IoError::sys(format!("AF_XDP socket on {iface} queue {queue}"), e))?;
        xsks.set(key, sock.as_raw_fd(), 0).map_err(|e| {
            map_err(
                format!("registering AF_XDP socket for {iface} queue {queue}"),
                e,
            )
        })?;
        Ok(XdpPort {
            sock,
            stats: PortStats::default(),
            hints,
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
        let mut oversize = 0u64;
        let n = match self.hints {
            None => self.sock.recv(room, |f| {
                bytes += f.len() as u64;
                oversize += u64::from(!batch.push(f));
            }),
            Some(split) => self.sock.recv(room, |f| {
                let (hint, f) = split(f);
                bytes += f.len() as u64;
                oversize += u64::from(!batch.push_hinted(f, hint));
            }),
        };
        self.stats.rx_packets += n as u64;
        self.stats.rx_bytes += bytes;
        self.stats.rx_oversize += oversize;
        n - oversize as usize
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
