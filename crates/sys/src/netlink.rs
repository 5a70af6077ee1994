//! A raw NETLINK_ROUTE (or NETLINK_GENERIC) socket: bytes in, bytes out.
//! Messages are built and parsed in safe code by the control plane.

use super::{cvt, setsockopt};
use rustix::fd::{AsRawFd, OwnedFd};
use rustix::io::Errno;
use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, sockopt};
use std::io;

const SOL_NETLINK: libc::c_int = 270;
const NETLINK_EXT_ACK: libc::c_int = 11;

/// The kernel's address: port id 0, no groups.
const KERNEL: SocketAddrNetlink = SocketAddrNetlink::new(0, 0);

/// A bound NETLINK_ROUTE or NETLINK_GENERIC socket.
#[derive(Debug)]
pub struct NetlinkSocket {
    fd: OwnedFd,
}

impl NetlinkSocket {
    /// Opens a socket subscribed to the given multicast groups (RTNLGRP_*
    /// numbers, 1 to 32; none for a request-only socket).
    pub fn new(groups: &[u32]) -> io::Result<NetlinkSocket> {
        // NETLINK_ROUTE is protocol 0, the default.
        Self::open(None, groups)
    }

    /// A request-only NETLINK_GENERIC socket (generic netlink families:
    /// their ids are resolved through the `nlctrl` family).
    pub fn generic() -> io::Result<NetlinkSocket> {
        Self::open(Some(rustix::net::netlink::GENERIC), &[])
    }

    fn open(protocol: Option<rustix::net::Protocol>, groups: &[u32]) -> io::Result<NetlinkSocket> {
        let fd = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            protocol,
        )?;
        // Groups 1-32 are bits of the bound address's mask (group n is bit
        // n - 1), which is how a socket joins them at bind time.
        let mut mask = 0u32;
        for &g in groups {
            if !(1..=32).contains(&g) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("netlink group {g} is outside 1-32"),
                ));
            }
            mask |= 1 << (g - 1);
        }
        // Port id 0: the kernel picks one.
        rustix::net::bind(&fd, &SocketAddrNetlink::new(0, mask))?;
        // Extended acks name the failing attribute; optional.
        let _ = setsockopt(fd.as_raw_fd(), SOL_NETLINK, NETLINK_EXT_ACK, &1i32);
        // Large receive buffer: a full-table dump arrives faster than it is parsed.
        let _ = sockopt::set_socket_recv_buffer_size_force(&fd, 32 << 20);
        Ok(NetlinkSocket { fd })
    }

    /// Sets the receive buffer to `bytes` (SO_RCVBUFFORCE, above the
    /// sysctl limit with CAP_NET_ADMIN): how many broadcasts the kernel
    /// queues before it drops them and reports ENOBUFS.
    pub fn set_receive_buffer(&self, bytes: i32) -> io::Result<()> {
        let bytes = usize::try_from(bytes)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "negative buffer size"))?;
        Ok(sockopt::set_socket_recv_buffer_size_force(&self.fd, bytes)?)
    }

    /// Broadcasts the kernel dropped for this socket so far (its
    /// `sk_drops`, from SO_MEMINFO). After one overrun the kernel reports
    /// ENOBUFS once and then drops every broadcast silently until the queue
    /// has been read empty, so only this counter tells whether any was lost.
    pub fn drops(&self) -> io::Result<u32> {
        let mut info = [0u32; 9];
        let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
        // SAFETY: `info` is a live, writable buffer of `len` bytes; the kernel
        // writes at most `len` bytes and stores the length it wrote.
        cvt(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_MEMINFO,
                info.as_mut_ptr().cast(),
                &mut len,
            )
        })?;
        let i = libc::SK_MEMINFO_DROPS as usize;
        if (len as usize) < (i + 1) * 4 {
            return Err(io::Error::other("SO_MEMINFO: no drop counter"));
        }
        Ok(info[i])
    }

    /// The socket descriptor (for poll).
    pub fn fd(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }

    /// Sends one buffer of messages to the kernel.
    pub fn send(&self, msg: &[u8]) -> io::Result<()> {
        rustix::net::sendto(&self.fd, msg, SendFlags::empty(), &KERNEL)?;
        Ok(())
    }

    /// Receives one datagram of messages into `buf`; `Ok(None)` when
    /// `nonblocking` and nothing is queued.
    pub fn recv(&self, buf: &mut [u8], nonblocking: bool) -> io::Result<Option<usize>> {
        let flags = if nonblocking {
            RecvFlags::DONTWAIT
        } else {
            RecvFlags::empty()
        };
        loop {
            match rustix::net::recv(&self.fd, &mut *buf, flags) {
                Ok((n, _)) => return Ok(Some(n)),
                Err(Errno::INTR) => continue,
                Err(Errno::AGAIN) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
    }
}
