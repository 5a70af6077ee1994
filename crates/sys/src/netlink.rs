//! A raw NETLINK_ROUTE (or NETLINK_GENERIC) socket: bytes in, bytes out.
//! Messages are built and parsed in safe code by the control plane.

use super::{getsockopt, setsockopt};
use rustix::fd::{AsRawFd, OwnedFd};
use rustix::io::Errno;
use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, sockopt};
use std::io;

const SOL_NETLINK: libc::c_int = 270;
const NETLINK_EXT_ACK: libc::c_int = 11;

/// The kernel's address: port id 0, no groups.
const KERNEL: SocketAddrNetlink = SocketAddrNetlink::new(0, 0);

/// A bound NETLINK_ROUTE or NETLINK_GENERIC socket, connected to the
/// kernel: the kernel refuses (ECONNREFUSED) a unicast to it from any
/// other socket, so no local process can forge routing messages to
/// fastfwd. Multicasts from user space (CAP_NET_ADMIN only) still arrive;
/// `recv` discards every datagram not sent by the kernel and counts it.
#[derive(Debug)]
pub struct NetlinkSocket {
    fd: OwnedFd,
    /// Datagrams received from a sender other than the kernel, discarded.
    foreign: std::sync::atomic::AtomicU64,
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
        // Connected to the kernel: unicasts from other sockets are refused.
        rustix::net::connect(&fd, &KERNEL)?;
        // Extended acks name the failing attribute; optional.
        let _ = setsockopt(fd.as_raw_fd(), SOL_NETLINK, NETLINK_EXT_ACK, &1i32);
        // Large receive buffer: a full-table dump arrives faster than it is parsed.
        let _ = sockopt::set_socket_recv_buffer_size_force(&fd, 32 << 20);
        Ok(NetlinkSocket {
            fd,
            foreign: std::sync::atomic::AtomicU64::new(0),
        })
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
        let len = getsockopt(
            self.fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            &mut info,
        )?;
        let i = libc::SK_MEMINFO_DROPS as usize;
        if len < (i + 1) * 4 {
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

    /// The port id the kernel gave this socket.
    pub fn port_id(&self) -> io::Result<u32> {
        let addr = rustix::net::getsockname(&self.fd)?;
        Ok(SocketAddrNetlink::try_from(addr)?.pid())
    }

    /// Datagrams received so far from a sender other than the kernel (a
    /// user-space multicast), discarded unread.
    pub fn foreign(&self) -> u64 {
        self.foreign.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Receives one datagram of messages from the kernel into `buf`;
    /// `Ok(None)` when `nonblocking` and nothing is queued. A datagram from
    /// any other sender is discarded and counted ([`Self::foreign`]).
    pub fn recv(&self, buf: &mut [u8], nonblocking: bool) -> io::Result<Option<usize>> {
        let flags = if nonblocking {
            RecvFlags::DONTWAIT
        } else {
            RecvFlags::empty()
        };
        loop {
            match rustix::net::recvfrom(&self.fd, &mut *buf, flags) {
                Ok((n, _, from)) => {
                    let from_kernel = from
                        .and_then(|a| SocketAddrNetlink::try_from(a).ok())
                        .is_some_and(|a| a.pid() == 0);
                    if from_kernel {
                        return Ok(Some(n));
                    }
                    self.foreign
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Err(Errno::INTR) => continue,
                Err(Errno::AGAIN) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An RTM_GETLINK dump request (a netlink header and an ifinfomsg).
    fn getlink_dump(seq: u32) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&32u32.to_ne_bytes());
        m.extend_from_slice(&18u16.to_ne_bytes()); // RTM_GETLINK
        m.extend_from_slice(&0x301u16.to_ne_bytes()); // REQUEST | DUMP
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&[0u8; 16]);
        m
    }

    #[test]
    fn only_the_kernel_can_send_to_a_socket() {
        let sock = NetlinkSocket::new(&[]).unwrap();
        let port = sock.port_id().unwrap();
        assert_ne!(port, 0);
        // Another process's socket, not connected: its unicast to ours is
        // refused by the kernel, so nothing forged is ever queued.
        let other = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let forged = getlink_dump(7);
        let sent = rustix::net::sendto(
            &other,
            &forged,
            SendFlags::empty(),
            &SocketAddrNetlink::new(port, 0),
        );
        assert_eq!(sent.err(), Some(Errno::CONNREFUSED));
        let mut buf = vec![0u8; 1 << 16];
        assert_eq!(sock.recv(&mut buf, true).unwrap(), None);
        // The kernel's answers still arrive.
        sock.send(&getlink_dump(8)).unwrap();
        let n = sock.recv(&mut buf, false).unwrap().unwrap();
        assert!(n >= 16);
        assert_eq!(u32::from_ne_bytes(buf[8..12].try_into().unwrap()), 8);
        assert_eq!(sock.foreign(), 0);
    }
}
