//! A raw NETLINK_ROUTE socket: bytes in, bytes out. Messages are built and
//! parsed in safe code by the control plane.

use super::{cvt, setsockopt, Fd};
use std::io;

const SOL_NETLINK: libc::c_int = 270;
const NETLINK_ADD_MEMBERSHIP: libc::c_int = 1;
const NETLINK_EXT_ACK: libc::c_int = 11;

/// A bound NETLINK_ROUTE socket.
#[derive(Debug)]
pub struct NetlinkSocket {
    fd: Fd,
}

impl NetlinkSocket {
    /// Opens a socket subscribed to the given multicast groups (RTNLGRP_*
    /// numbers; none for a request-only socket).
    pub fn new(groups: &[u32]) -> io::Result<NetlinkSocket> {
        // SAFETY: plain socket(2) call; checked by `Fd::new`.
        let fd = Fd::new(unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        })?;
        // SAFETY: sockaddr_nl is plain data; zeroed means "kernel picks the port id".
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: `addr` is a live sockaddr_nl of the length passed.
        cvt(unsafe {
            libc::bind(
                fd.raw(),
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        })?;
        for &g in groups {
            setsockopt(fd.raw(), SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &g)?;
        }
        // Extended acks name the failing attribute; optional.
        let _ = setsockopt(fd.raw(), SOL_NETLINK, NETLINK_EXT_ACK, &1i32);
        // Large receive buffer: a full-table dump arrives faster than it is parsed.
        let _ = setsockopt(
            fd.raw(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            &(32i32 << 20),
        );
        Ok(NetlinkSocket { fd })
    }

    /// Sets the receive buffer to `bytes` (SO_RCVBUFFORCE, above the
    /// sysctl limit with CAP_NET_ADMIN): how many broadcasts the kernel
    /// queues before it drops them and reports ENOBUFS.
    pub fn set_receive_buffer(&self, bytes: i32) -> io::Result<()> {
        setsockopt(
            self.fd.raw(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            &bytes,
        )
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
                self.fd.raw(),
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
        self.fd.raw()
    }

    /// Sends one buffer of messages to the kernel.
    pub fn send(&self, msg: &[u8]) -> io::Result<()> {
        // SAFETY: sockaddr_nl is plain data; zeroed addresses the kernel (pid 0).
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: `msg` and `addr` are live for the call; the kernel only reads them.
        let ret = unsafe {
            libc::sendto(
                self.fd.raw(),
                msg.as_ptr().cast(),
                msg.len(),
                0,
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives one datagram of messages into `buf`; `Ok(None)` when
    /// `nonblocking` and nothing is queued.
    pub fn recv(&self, buf: &mut [u8], nonblocking: bool) -> io::Result<Option<usize>> {
        let flags = if nonblocking { libc::MSG_DONTWAIT } else { 0 };
        loop {
            // SAFETY: `buf` is a live, writable buffer of the length passed.
            let ret =
                unsafe { libc::recv(self.fd.raw(), buf.as_mut_ptr().cast(), buf.len(), flags) };
            if ret >= 0 {
                return Ok(Some(ret as usize));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Ok(None),
                _ => return Err(e),
            }
        }
    }
}
