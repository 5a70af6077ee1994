//! AF_PACKET sockets with a TPACKET_V3 receive ring, joined to a fanout
//! group per interface, sending with `sendmmsg` past the qdisc layer.

use super::{cvt, setsockopt, Fd, Mmap};
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

const SOL_PACKET: libc::c_int = 263;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_FANOUT: libc::c_int = 18;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const TPACKET_V3: libc::c_int = 2;
const PACKET_FANOUT_HASH: u32 = 0;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const PACKET_OUTGOING: u8 = 4;
const ETH_P_ALL: u16 = 0x0003;

#[repr(C)]
struct TpacketReq3 {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
    retire_blk_tov: u32,
    sizeof_priv: u32,
    feature_req_word: u32,
}

/// Offsets inside a TPACKET_V3 block descriptor and packet header.
mod off {
    pub const BLOCK_STATUS: usize = 8;
    pub const NUM_PKTS: usize = 12;
    pub const FIRST_PKT: usize = 16;
    pub const NEXT: usize = 0;
    pub const SNAPLEN: usize = 12;
    pub const STATUS: usize = 20;
    pub const MAC: usize = 24;
    pub const VLAN_TCI: usize = 32;
    pub const VLAN_TPID: usize = 36;
    /// TPACKET_ALIGN(sizeof(struct tpacket3_hdr)), where sockaddr_ll starts.
    pub const SLL: usize = 48;
    pub const SLL_PKTTYPE: usize = 10;
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
    fd: Fd,
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
            .field("fd", &self.fd.raw())
            .finish()
    }
}

impl PacketSocket {
    /// Opens a socket on `ifindex` with a receive ring, in fanout group
    /// `cfg.fanout_group`, sending past the qdisc layer.
    pub fn new(ifindex: u32, cfg: PacketConfig) -> io::Result<PacketSocket> {
        // Protocol 0 until bound, so nothing from other interfaces queues up.
        // SAFETY: plain socket(2) call; checked by `Fd::new`.
        let fd = Fd::new(unsafe {
            libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0)
        })?;
        setsockopt(fd.raw(), SOL_PACKET, PACKET_VERSION, &TPACKET_V3)?;
        let req = TpacketReq3 {
            block_size: cfg.block_size,
            block_nr: cfg.block_nr,
            frame_size: 2048,
            frame_nr: cfg.block_size / 2048 * cfg.block_nr,
            retire_blk_tov: cfg.block_timeout_ms,
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        setsockopt(fd.raw(), SOL_PACKET, PACKET_RX_RING, &req)?;
        let len = cfg.block_size as usize * cfg.block_nr as usize;
        let ring = Mmap::new(len, Some(fd.raw()), 0, true)?;
        setsockopt(fd.raw(), SOL_PACKET, PACKET_QDISC_BYPASS, &1i32)?;
        // Frames this host sends (our own TX included) are not ours to forward.
        setsockopt(fd.raw(), SOL_PACKET, PACKET_IGNORE_OUTGOING, &1i32)?;
        // SAFETY: sockaddr_ll is plain data; zeroed then filled below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL.to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a live sockaddr_ll of the length passed.
        cvt(unsafe {
            libc::bind(
                fd.raw(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        let fanout = u32::from(cfg.fanout_group) | (PACKET_FANOUT_HASH << 16);
        setsockopt(fd.raw(), SOL_PACKET, PACKET_FANOUT, &fanout)?;
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
        self.fd.raw()
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
        while sent < n {
            // SAFETY: `msgs[sent..n]` point at `iov` entries that point into
            // `buf`, all alive for the call; the kernel only reads them.
            let ret = unsafe {
                libc::sendmmsg(
                    self.fd.raw(),
                    msgs[sent..].as_mut_ptr(),
                    (n - sent) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if ret < 0 {
                let e = io::Error::last_os_error();
                if sent > 0 || matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS))
                {
                    break;
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
}
