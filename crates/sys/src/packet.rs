//! AF_PACKET sockets with a TPACKET_V3 receive ring, joined to a fanout
//! group per interface, sending with `sendmmsg` past the qdisc layer.

use super::{Mmap, bind_packet, setsockopt};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use libc::{
    PACKET_FANOUT, PACKET_FANOUT_HASH, PACKET_IGNORE_OUTGOING, PACKET_OUTGOING,
    PACKET_QDISC_BYPASS, PACKET_RX_RING, PACKET_VERSION, SOL_PACKET, TP_STATUS_KERNEL,
    TP_STATUS_USER, TP_STATUS_VLAN_VALID,
};
const TPACKET_V3: libc::c_int = libc::tpacket_versions::TPACKET_V3 as libc::c_int;

/// Offsets inside a TPACKET_V3 block descriptor and packet header
/// (`linux/if_packet.h`, through libc's structs).
mod off {
    use libc::{
        sockaddr_ll, tpacket_block_desc, tpacket_hdr_v1, tpacket_hdr_variant1, tpacket3_hdr,
    };
    use std::mem::{offset_of, size_of};
    const HDR: usize = offset_of!(tpacket_block_desc, hdr);
    pub const BLOCK_STATUS: usize = HDR + offset_of!(tpacket_hdr_v1, block_status);
    pub const NUM_PKTS: usize = HDR + offset_of!(tpacket_hdr_v1, num_pkts);
    pub const FIRST_PKT: usize = HDR + offset_of!(tpacket_hdr_v1, offset_to_first_pkt);
    pub const NEXT: usize = offset_of!(tpacket3_hdr, tp_next_offset);
    pub const SNAPLEN: usize = offset_of!(tpacket3_hdr, tp_snaplen);
    pub const STATUS: usize = offset_of!(tpacket3_hdr, tp_status);
    pub const MAC: usize = offset_of!(tpacket3_hdr, tp_mac);
    const HV1: usize = offset_of!(tpacket3_hdr, hv1);
    pub const VLAN_TCI: usize = HV1 + offset_of!(tpacket_hdr_variant1, tp_vlan_tci);
    pub const VLAN_TPID: usize = HV1 + offset_of!(tpacket_hdr_variant1, tp_vlan_tpid);
    /// TPACKET_ALIGN(sizeof(struct tpacket3_hdr)), where sockaddr_ll starts.
    pub const SLL: usize = size_of::<tpacket3_hdr>().next_multiple_of(libc::TPACKET_ALIGNMENT);
    pub const SLL_PKTTYPE: usize = offset_of!(sockaddr_ll, sll_pkttype);
}

/// Ring geometry of one socket.
#[derive(Debug, Clone, Copy)]
pub struct PacketConfig {
    /// Bytes per block (a power of two, multiple of the page size).
    pub block_size: u32,
    /// Blocks in the ring.
    pub block_nr: u32,
    /// How long the kernel may hold a partly filled block, in ms.
    pub block_timeout_ms: u32,
    /// Fanout group id shared by the sockets of one interface.
    pub fanout_group: u16,
}

impl Default for PacketConfig {
    fn default() -> Self {
        PacketConfig {
            block_size: 1 << 16,
            block_nr: 64,
            block_timeout_ms: 1,
            fanout_group: 0,
        }
    }
}

/// A received frame as the ring holds it.
#[derive(Debug)]
pub struct RxFrame<'a> {
    /// Frame bytes from the Ethernet header on.
    pub bytes: &'a [u8],
    /// The 802.1Q tag (TPID, TCI) the device stripped, to be put back.
    pub vlan: Option<(u16, u16)>,
}

/// One AF_PACKET socket bound to one interface.
pub struct PacketSocket {
    fd: OwnedFd,
    ring: Mmap,
    block_size: usize,
    block_nr: usize,
    /// Block being read, packet index inside it and its byte offset.
    block: usize,
    pkt: u32,
    pkt_off: usize,
}

// SAFETY: the socket owns its ring mapping; moving it moves all access.
unsafe impl Send for PacketSocket {}

impl std::fmt::Debug for PacketSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketSocket")
            .field("fd", &self.fd.as_raw_fd())
            .finish()
    }
}

impl PacketSocket {
    /// Opens a socket on `ifindex` with a receive ring, in fanout group
    /// `cfg.fanout_group`, sending past the qdisc layer.
    pub fn new(ifindex: u32, cfg: PacketConfig) -> io::Result<PacketSocket> {
        let fd = raw_packet_socket()?;
        setsockopt(fd.as_raw_fd(), SOL_PACKET, PACKET_VERSION, &TPACKET_V3)?;
        let req = libc::tpacket_req3 {
            tp_block_size: cfg.block_size,
            tp_block_nr: cfg.block_nr,
            tp_frame_size: 2048,
            tp_frame_nr: cfg.block_size / 2048 * cfg.block_nr,
            tp_retire_blk_tov: cfg.block_timeout_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt(fd.as_raw_fd(), SOL_PACKET, PACKET_RX_RING, &req)?;
        let len = cfg.block_size as usize * cfg.block_nr as usize;
        let ring = Mmap::new(len, Some(fd.as_fd()), 0, true)?;
        setsockopt(fd.as_raw_fd(), SOL_PACKET, PACKET_QDISC_BYPASS, &1i32)?;
        // Frames this host sends (our own TX included) are not ours to forward.
        setsockopt(fd.as_raw_fd(), SOL_PACKET, PACKET_IGNORE_OUTGOING, &1i32)?;
        bind_packet(fd.as_fd(), ifindex)?;
        let fanout = u32::from(cfg.fanout_group) | (PACKET_FANOUT_HASH << 16);
        setsockopt(fd.as_raw_fd(), SOL_PACKET, PACKET_FANOUT, &fanout)?;
        Ok(PacketSocket {
            fd,
            ring,
            block_size: cfg.block_size as usize,
            block_nr: cfg.block_nr as usize,
            block: 0,
            pkt: 0,
            pkt_off: 0,
        })
    }

    /// The socket descriptor (for poll).
    pub fn fd(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }

    /// Frames the kernel dropped since the last call because the receive
    /// ring was full (the worker did not keep up).
    pub fn take_ring_drops(&self) -> io::Result<u64> {
        super::take_packet_stats(self.fd.as_raw_fd()).map(|(_, drops)| drops)
    }

    fn block_ptr(&self, block: usize) -> *mut u8 {
        // SAFETY: `block < block_nr`, so the offset is inside the ring mapping.
        unsafe { self.ring.ptr.add(block * self.block_size) }
    }

    fn block_status(&self, block: usize) -> &AtomicU32 {
        // SAFETY: the status word lies inside the block, 4-byte aligned, and
        // the kernel updates it with its own barriers.
        unsafe { &*(self.block_ptr(block).add(off::BLOCK_STATUS) as *const AtomicU32) }
    }

    fn read_u32(&self, block: usize, at: usize) -> u32 {
        if at + 4 > self.block_size {
            return 0;
        }
        // SAFETY: `at + 4 <= block_size` (checked) keeps the read inside the block.
        unsafe { std::ptr::read_unaligned(self.block_ptr(block).add(at) as *const u32) }
    }

    fn read_u16(&self, block: usize, at: usize) -> u16 {
        if at + 2 > self.block_size {
            return 0;
        }
        // SAFETY: `at + 2 <= block_size` (checked) keeps the read inside the block.
        unsafe { std::ptr::read_unaligned(self.block_ptr(block).add(at) as *const u16) }
    }

    fn read_u8(&self, block: usize, at: usize) -> u8 {
        if at >= self.block_size {
            return 0;
        }
        // SAFETY: `at < block_size` (checked) keeps the read inside the block.
        unsafe { *self.block_ptr(block).add(at) }
    }

    /// Receives up to `max` frames, calling `each` for every one. Blocks
    /// are given back to the kernel once all their frames were read.
    pub fn recv(&mut self, max: usize, mut each: impl FnMut(RxFrame<'_>)) -> usize {
        let mut done = 0;
        while done < max {
            let b = self.block;
            if self.block_status(b).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
                break;
            }
            let num = self.read_u32(b, off::NUM_PKTS);
            if self.pkt == 0 {
                self.pkt_off = self.read_u32(b, off::FIRST_PKT) as usize;
            }
            while self.pkt < num && done < max {
                let h = self.pkt_off;
                let snap = self.read_u32(b, h + off::SNAPLEN) as usize;
                let mac = self.read_u16(b, h + off::MAC) as usize;
                let status = self.read_u32(b, h + off::STATUS);
                let pkttype = self.read_u8(b, h + off::SLL + off::SLL_PKTTYPE);
                let start = h + mac;
                if pkttype != PACKET_OUTGOING
                    && start
                        .checked_add(snap)
                        .is_some_and(|e| e <= self.block_size)
                {
                    // SAFETY: `start..start+snap` lies inside the block
                    // (checked), which user space owns while its status is
                    // TP_STATUS_USER.
                    let bytes =
                        unsafe { std::slice::from_raw_parts(self.block_ptr(b).add(start), snap) };
                    let vlan = (status & TP_STATUS_VLAN_VALID != 0).then(|| {
                        let tpid = self.read_u16(b, h + off::VLAN_TPID);
                        let tpid = if tpid == 0 { 0x8100 } else { tpid };
                        (tpid, self.read_u32(b, h + off::VLAN_TCI) as u16)
                    });
                    each(RxFrame { bytes, vlan });
                    done += 1;
                }
                let next = self.read_u32(b, h + off::NEXT) as usize;
                self.pkt += 1;
                self.pkt_off = h + next;
            }
            if self.pkt >= num {
                self.block_status(b)
                    .store(TP_STATUS_KERNEL, Ordering::Release);
                self.block = (b + 1) % self.block_nr;
                self.pkt = 0;
            }
        }
        done
    }

    /// Sends up to 64 frames with as few `sendmmsg` calls as the kernel
    /// allows. Returns how many were sent.
    pub fn send_batch(&self, frames: &[&[u8]]) -> io::Result<usize> {
        send_frames(self.fd.as_fd(), frames)
    }
}

/// An AF_PACKET socket that only sends, through one interface's own
/// transmit path (a bond's: its transmit hash picks the member), past the
/// qdisc layer. Bound with protocol 0, it receives nothing.
#[derive(Debug)]
pub struct PacketSender {
    fd: OwnedFd,
}

impl PacketSender {
    /// Opens a sender on `ifindex`.
    pub fn new(ifindex: u32) -> io::Result<PacketSender> {
        let fd = raw_packet_socket()?;
        setsockopt(fd.as_raw_fd(), SOL_PACKET, PACKET_QDISC_BYPASS, &1i32)?;
        super::bind_packet_protocol(fd.as_fd(), ifindex, 0)?;
        Ok(PacketSender { fd })
    }

    /// The socket descriptor (never readable).
    pub fn fd(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }

    /// As [`PacketSocket::send_batch`].
    pub fn send_batch(&self, frames: &[&[u8]]) -> io::Result<usize> {
        send_frames(self.fd.as_fd(), frames)
    }
}

/// A raw packet socket, protocol 0 until bound, so nothing from other
/// interfaces queues up.
fn raw_packet_socket() -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        rustix::net::AddressFamily::PACKET,
        rustix::net::SocketType::RAW,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?)
}

/// Sends up to 64 of `frames` on packet socket `fd` (bound to its
/// interface) with as few `sendmmsg` calls as the kernel allows. Returns
/// how many were sent.
fn send_frames(fd: std::os::fd::BorrowedFd<'_>, frames: &[&[u8]]) -> io::Result<usize> {
    const MAX: usize = 64;
    let n = frames.len().min(MAX);
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; MAX];
    // SAFETY: mmsghdr is plain data; zeroed is a valid empty header.
    let mut msgs: [libc::mmsghdr; MAX] = unsafe { std::mem::zeroed() };
    for (v, f) in iov.iter_mut().zip(frames.iter().take(n)) {
        *v = libc::iovec {
            iov_base: f.as_ptr() as *mut libc::c_void,
            iov_len: f.len(),
        };
    }
    for (m, v) in msgs.iter_mut().zip(iov.iter_mut()).take(n) {
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
    }
    let mut sent = 0;
    // One retry of a call that sent nothing: its error may be one the
    // kernel reported earlier (ENETDOWN while the interface was down),
    // which the failed call consumed.
    let mut retried = false;
    while sent < n {
        // SAFETY: `msgs[sent..n]` point at `iov` entries that point into
        // `buf`, all alive for the call; the kernel only reads them.
        let ret = unsafe {
            libc::sendmmsg(
                fd.as_raw_fd(),
                msgs[sent..].as_mut_ptr(),
                (n - sent) as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if ret < 0 {
            let e = io::Error::last_os_error();
            if sent > 0 || matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS)) {
                break;
            }
            if !retried {
                retried = true;
                continue;
            }
            return Err(e);
        }
        if ret == 0 {
            break;
        }
        sent += ret as usize;
    }
    Ok(sent)
}
