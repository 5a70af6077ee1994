//! The lab's system calls: clocks, AF_PACKET transmit (sendmmsg with
//! qdisc bypass) and receive (TPACKET_V3 ring) for its generator and
//! receiver, the UDP socket receive calls the UDP sink compares, and its
//! interrupt flag; namespaces, CPU affinity and interface indexes are the
//! daemon's ([`super::os`]), re-exported here. Kept in this crate so that
//! all of fastfwd's `unsafe` is in one place. Everything here is safe to
//! call.

pub use super::os::{enter_netns, if_index, pin_thread as pin_to_cpu, set_realtime};

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{Ordering, fence};

use libc::{
    PACKET_QDISC_BYPASS, PACKET_RX_RING, PACKET_VERSION, SOL_PACKET, TP_STATUS_KERNEL,
    TP_STATUS_USER,
};
use rustix::time::{ClockId, clock_gettime};
const TPACKET_V3: libc::c_int = libc::tpacket_versions::TPACKET_V3 as libc::c_int;

use super::{bind_packet, setsockopt};

fn clock_ns(clock: ClockId) -> u64 {
    let ts = clock_gettime(clock);
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// CLOCK_REALTIME in nanoseconds: the clock both the generator's payload
/// stamps and the kernel's packet-socket receive stamps use, shared by all
/// namespaces of one host.
pub fn realtime_ns() -> u64 {
    clock_ns(ClockId::Realtime)
}

/// CLOCK_MONOTONIC in nanoseconds (pacing and trial timing).
pub fn monotonic_ns() -> u64 {
    clock_ns(ClockId::Monotonic)
}

fn packet_socket(ifname: &str) -> io::Result<(OwnedFd, u32)> {
    let ifindex = if_index(ifname)?;
    let fd = rustix::net::socket_with(
        rustix::net::AddressFamily::PACKET,
        rustix::net::SocketType::RAW,
        rustix::net::SocketFlags::CLOEXEC,
        Some(rustix::net::eth::ALL),
    )?;
    Ok((fd, ifindex))
}

/// Result of one transmit call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxOutcome {
    /// The kernel took this many frames (at least one).
    Sent(usize),
    /// The first frame was refused for lack of room (ENOBUFS/EAGAIN): the
    /// veth peer's ring was full. The frame is gone.
    Backpressure,
}

/// `batch` slots of `len` bytes in one buffer, an iovec per slot and an
/// mmsghdr per iovec, for sendmmsg / recvmmsg. The pointers stay valid
/// when the three vectors move (their heap memory does not).
struct MmsgBuffers {
    buf: Vec<u8>,
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl MmsgBuffers {
    fn new(batch: usize, len: usize) -> MmsgBuffers {
        let batch = batch.max(1);
        let mut buf = vec![0u8; batch * len];
        let mut iov: Vec<libc::iovec> = buf
            .chunks_mut(len)
            .map(|c| libc::iovec {
                iov_base: c.as_mut_ptr().cast(),
                iov_len: len,
            })
            .collect();
        let msgs = iov
            .iter_mut()
            .map(|v| {
                // SAFETY: mmsghdr is plain data; all-zero is valid (no name,
                // no control data).
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        MmsgBuffers { buf, iov, msgs }
    }
}

/// An AF_PACKET socket that sends whole Ethernet frames with `sendmmsg`,
/// bypassing the qdisc layer, from a buffer of `batch` frame slots.
pub struct PacketTx {
    fd: OwnedFd,
    slot_len: usize,
    buf: Vec<u8>,
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl PacketTx {
    /// Opens the socket on `ifname` with room for `batch` frames of up to
    /// `slot_len` bytes each.
    pub fn open(ifname: &str, batch: usize, slot_len: usize) -> io::Result<Self> {
        let (fd, ifindex) = packet_socket(ifname)?;
        bind_packet(fd.as_fd(), ifindex)?;
        setsockopt(fd.as_raw_fd(), SOL_PACKET, PACKET_QDISC_BYPASS, &1i32)?;
        setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            &(4i32 << 20),
        )?;
        let MmsgBuffers { buf, iov, msgs } = MmsgBuffers::new(batch, slot_len);
        Ok(Self {
            fd,
            slot_len,
            buf,
            iov,
            msgs,
        })
    }

    /// Number of frame slots.
    pub fn batch(&self) -> usize {
        self.msgs.len()
    }

    /// The frame slot `i`, to be filled before [`PacketTx::send`].
    pub fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        let l = self.slot_len;
        &mut self.buf[i * l..(i + 1) * l]
    }

    /// Sends slots `first..first+n`, each `frame_len` bytes long.
    pub fn send(&mut self, first: usize, n: usize, frame_len: usize) -> io::Result<TxOutcome> {
        let n = n.min(self.msgs.len().saturating_sub(first));
        if n == 0 {
            return Ok(TxOutcome::Sent(0));
        }
        let frame_len = frame_len.min(self.slot_len);
        for v in &mut self.iov[first..first + n] {
            v.iov_len = frame_len;
        }
        // SAFETY: msgs[first..first+n] are initialised headers whose iovecs
        // point into `self.buf`, which lives as long as `self` and is not
        // reallocated; the kernel only reads them.
        let r = unsafe {
            libc::sendmmsg(
                self.fd.as_raw_fd(),
                self.msgs.as_mut_ptr().add(first),
                n as u32,
                0,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ENOBUFS) | Some(libc::EAGAIN) => Ok(TxOutcome::Backpressure),
                _ => Err(e),
            }
        } else {
            Ok(TxOutcome::Sent(r as usize))
        }
    }
}

/// An AF_PACKET TPACKET_V3 receive ring on one interface.
pub struct PacketRxRing {
    fd: OwnedFd,
    map: *mut u8,
    map_len: usize,
    block_size: usize,
    block_nr: usize,
    cur: usize,
}

// SAFETY: the ring memory is owned by this value alone (mapped in `open`,
// unmapped in `drop`); moving it to another thread moves that ownership.
unsafe impl Send for PacketRxRing {}

impl PacketRxRing {
    /// Opens a ring of `block_nr` blocks of `block_size` bytes (a power of
    /// two, multiple of the page size) on `ifname`; a block is handed to
    /// user space when full or after `retire_ms` milliseconds.
    pub fn open(
        ifname: &str,
        block_size: usize,
        block_nr: usize,
        retire_ms: u32,
    ) -> io::Result<Self> {
        let (fd, ifindex) = packet_socket(ifname)?;
        let raw = fd.as_raw_fd();
        setsockopt(raw, SOL_PACKET, PACKET_VERSION, &TPACKET_V3)?;
        let frame_size = 2048u32;
        let req = libc::tpacket_req3 {
            tp_block_size: block_size as u32,
            tp_block_nr: block_nr as u32,
            tp_frame_size: frame_size,
            tp_frame_nr: (block_size * block_nr) as u32 / frame_size,
            tp_retire_blk_tov: retire_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt(raw, SOL_PACKET, PACKET_RX_RING, &req)?;
        let map_len = block_size * block_nr;
        // SAFETY: maps the ring the kernel just allocated for this socket;
        // the result is checked against MAP_FAILED.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED | libc::MAP_POPULATE,
                raw,
                0,
            )
        };
        let map = if map == libc::MAP_FAILED {
            // MAP_LOCKED may exceed RLIMIT_MEMLOCK: retry without it.
            // SAFETY: as above.
            let m = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    raw,
                    0,
                )
            };
            if m == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            m
        } else {
            map
        };
        let ring = Self {
            fd,
            map: map.cast(),
            map_len,
            block_size,
            block_nr,
            cur: 0,
        };
        bind_packet(ring.fd.as_fd(), ifindex)?;
        Ok(ring)
    }

    fn block_status(&self, block: *const u8) -> u32 {
        // SAFETY: `block` points at the start of a block inside the mapping;
        // offset 8 is tpacket_hdr_v1.block_status, a u32 the kernel updates
        // concurrently, hence the volatile read.
        unsafe { std::ptr::read_volatile(block.add(8).cast::<u32>()) }
    }

    /// Waits up to `timeout_ms` for the next block and hands each frame in
    /// it to `f` with its kernel receive time (CLOCK_REALTIME ns). Returns
    /// the number of frames seen (0 on timeout).
    pub fn poll_block(
        &mut self,
        timeout_ms: i32,
        mut f: impl FnMut(&[u8], u64),
    ) -> io::Result<usize> {
        // SAFETY: cur < block_nr, so the block lies inside the mapping.
        let block = unsafe { self.map.add(self.cur * self.block_size) };
        if self.block_status(block) & TP_STATUS_USER == 0 {
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN | libc::POLLERR,
                revents: 0,
            };
            // SAFETY: one valid pollfd, alive for the call.
            let r = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    return Ok(0);
                }
                return Err(e);
            }
            if self.block_status(block) & TP_STATUS_USER == 0 {
                return Ok(0);
            }
        }
        fence(Ordering::Acquire);
        // SAFETY: the block belongs to user space (TP_STATUS_USER) until we
        // hand it back; offsets 12 and 16 are num_pkts and
        // offset_to_first_pkt of tpacket_hdr_v1.
        let (num, first) = unsafe {
            (
                std::ptr::read(block.add(12).cast::<u32>()),
                std::ptr::read(block.add(16).cast::<u32>()),
            )
        };
        let mut off = first as usize;
        let mut seen = 0;
        for _ in 0..num {
            if off + 32 > self.block_size {
                break;
            }
            // SAFETY: `off` was checked to leave room for the tpacket3_hdr
            // fields read here (next_offset@0, sec@4, nsec@8, snaplen@12,
            // mac@24), all inside this user-owned block.
            let (next, sec, nsec, snap, mac) = unsafe {
                let h = block.add(off);
                (
                    std::ptr::read_unaligned(h.cast::<u32>()),
                    std::ptr::read_unaligned(h.add(4).cast::<u32>()),
                    std::ptr::read_unaligned(h.add(8).cast::<u32>()),
                    std::ptr::read_unaligned(h.add(12).cast::<u32>()),
                    std::ptr::read_unaligned(h.add(24).cast::<u16>()),
                )
            };
            let start = off + mac as usize;
            let end = start + snap as usize;
            if end <= self.block_size {
                // SAFETY: start..end was checked to lie inside this block,
                // which the kernel does not write while it is user-owned.
                let frame = unsafe { std::slice::from_raw_parts(block.add(start), snap as usize) };
                f(frame, u64::from(sec) * 1_000_000_000 + u64::from(nsec));
                seen += 1;
            }
            if next == 0 {
                break;
            }
            off += next as usize;
        }
        fence(Ordering::Release);
        // SAFETY: hands the block back to the kernel (block_status = KERNEL);
        // the volatile write pairs with the kernel's read of that field.
        unsafe { std::ptr::write_volatile(block.add(8).cast::<u32>(), TP_STATUS_KERNEL) };
        self.cur = (self.cur + 1) % self.block_nr;
        Ok(seen)
    }

    /// Packets seen and dropped by the socket since the last call (the
    /// kernel resets these counters on every read).
    pub fn take_stats(&self) -> io::Result<(u64, u64)> {
        super::take_packet_stats(self.fd.as_raw_fd())
    }
}

impl Drop for PacketRxRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the region mapped in `open`; no slice into
        // it outlives `poll_block`.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

/// Raises a socket's receive buffer past `rmem_max` (root only; falls back
/// to the ordinary limit).
pub fn set_rcvbuf(sock: &UdpSocket, bytes: usize) -> io::Result<()> {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    setsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &v)
        .or_else(|_| setsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, &v))
}

/// The UDP receive calls the UDP sink compares, over one socket and one
/// set of preallocated buffers.
pub struct UdpRecv {
    fd: RawFd,
    bufs: Vec<u8>,
    buf_len: usize,
    /// Kept alive (never read): `msgs` point into it.
    _iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl UdpRecv {
    /// Buffers for `batch` datagrams of up to `buf_len` bytes on `sock`
    /// (which must outlive this value).
    pub fn new(sock: &UdpSocket, batch: usize, buf_len: usize) -> Self {
        let MmsgBuffers {
            buf: bufs,
            iov,
            msgs,
        } = MmsgBuffers::new(batch, buf_len);
        Self {
            fd: sock.as_raw_fd(),
            bufs,
            buf_len,
            _iov: iov,
            msgs,
        }
    }

    fn ret(r: isize) -> io::Result<usize> {
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }

    /// `recvmmsg` of up to the batch size; returns datagrams received.
    pub fn recv_mmsg(&mut self) -> io::Result<usize> {
        // SAFETY: the headers point at iovecs into `self.bufs`, all owned by
        // `self` and sized as described; no timeout pointer is passed.
        let r = unsafe {
            libc::recvmmsg(
                self.fd,
                self.msgs.as_mut_ptr(),
                self.msgs.len() as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        Self::ret(r as isize)
    }

    /// One `recvmsg`; returns the datagram's length.
    pub fn recv_msg(&mut self) -> io::Result<usize> {
        // SAFETY: msgs[0] points at iov[0] into `self.bufs`, owned by `self`.
        let r = unsafe { libc::recvmsg(self.fd, &mut self.msgs[0].msg_hdr, 0) };
        Self::ret(r)
    }

    /// One `read`; returns the datagram's length.
    pub fn read(&mut self) -> io::Result<usize> {
        // SAFETY: the pointer and length describe the first buffer.
        let r = unsafe { libc::read(self.fd, self.bufs.as_mut_ptr().cast(), self.buf_len) };
        Self::ret(r)
    }

    /// One `recvfrom` (with the sender's address); returns the length.
    pub fn recv_from(&mut self) -> io::Result<usize> {
        // SAFETY: sockaddr_storage is plain data; zero is valid.
        let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut alen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: buffer, address and length pointers describe live locals
        // and `self.bufs`.
        let r = unsafe {
            libc::recvfrom(
                self.fd,
                self.bufs.as_mut_ptr().cast(),
                self.buf_len,
                0,
                (&mut addr as *mut libc::sockaddr_storage).cast(),
                &mut alen,
            )
        };
        Self::ret(r)
    }
}

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes SIGINT and SIGTERM set a flag (see [`interrupted`]) instead of
/// killing the process, so the lab can remove its namespaces; a second
/// signal, with the flag already set, ends the process (exit status 130).
pub fn install_interrupt_handler() -> std::io::Result<()> {
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Registered first, so it sees the flag as it was before this signal.
        signal_hook::flag::register_conditional_shutdown(sig, 130, &INTERRUPTED)?;
        signal_hook::flag::register(sig, &INTERRUPTED)?;
    }
    Ok(())
}

/// The flag SIGINT/SIGTERM set once [`install_interrupt_handler`] ran.
pub fn interrupted() -> &'static std::sync::atomic::AtomicBool {
    &INTERRUPTED
}
