//! AF_XDP sockets: a UMEM, its fill and completion rings, and the RX and TX
//! rings of one socket bound to one queue of one interface.
//!
//! Frame ownership: the first `rx_frames` UMEM chunks circulate between the
//! fill ring, the kernel and the RX ring (a received chunk goes straight
//! back to the fill ring once its bytes are copied out); the remaining
//! chunks circulate between a free list, the TX ring and the completion
//! ring. No chunk is ever in two places, so the rings never overflow.

use super::Mmap;
use rustix::fd::{AsFd, AsRawFd, OwnedFd};
use rustix::io::Errno;
use rustix::net::xdp::{
    SocketAddrXdp, SocketAddrXdpFlags, XDP_PGOFF_RX_RING, XDP_PGOFF_TX_RING,
    XDP_UMEM_PGOFF_COMPLETION_RING, XDP_UMEM_PGOFF_FILL_RING, XdpDesc, XdpDescOptions,
    XdpRingFlags, XdpRingOffset, XdpUmemReg, XdpUmemRegFlags,
};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, sockopt};
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

/// Kernel-side counters of one socket (`XDP_STATISTICS`; the last three
/// read 0 on kernels before 5.9).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XskStats {
    /// Frames dropped for reasons other than an empty fill ring.
    pub rx_dropped: u64,
    /// RX descriptors the kernel found invalid.
    pub rx_invalid_descs: u64,
    /// TX descriptors the kernel found invalid.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was empty when a frame arrived.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the TX ring was empty when the kernel looked.
    pub tx_ring_empty_descs: u64,
}

/// How to bind: zero-copy if the driver supports it, else copy mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindMode {
    /// Try zero-copy, fall back to copy mode.
    Auto,
    /// Zero-copy only.
    ZeroCopy,
    /// Copy mode only.
    Copy,
}

/// Sizes of one socket's rings and UMEM.
#[derive(Debug, Clone, Copy)]
pub struct XskConfig {
    /// Bytes per UMEM chunk (2048 or 4096).
    pub frame_size: u32,
    /// Entries in the RX and fill rings, and chunks reserved for receiving (power of two).
    pub rx_size: u32,
    /// Entries in the TX and completion rings, and chunks reserved for sending (power of two).
    pub tx_size: u32,
    /// Bind mode.
    pub mode: BindMode,
}

impl Default for XskConfig {
    fn default() -> Self {
        XskConfig {
            frame_size: 2048,
            rx_size: 2048,
            tx_size: 2048,
            mode: BindMode::Auto,
        }
    }
}

/// One mapped ring: producer/consumer indexes shared with the kernel.
struct Ring {
    _map: Mmap,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut u8,
    mask: u32,
    size: u32,
    cached_prod: u32,
    cached_cons: u32,
}

impl Ring {
    fn map(
        fd: &OwnedFd,
        off: &XdpRingOffset,
        entries: u32,
        entry_size: usize,
        pgoff: u64,
    ) -> io::Result<Ring> {
        // The flags word (kernel 5.4+) is where the kernel asks for a wakeup.
        let flags = off
            .flags
            .ok_or_else(|| io::Error::other("AF_XDP rings without a flags word (kernel < 5.4)"))?;
        let len = off.desc as usize + entries as usize * entry_size;
        let map = Mmap::new(len, Some(fd.as_fd()), pgoff, true)?;
        // SAFETY: the kernel reported these offsets for a mapping of `len`
        // bytes; each lies inside it and is 4-byte aligned.
        let (producer, consumer, flags, desc) = unsafe {
            (
                map.ptr.add(off.producer as usize) as *const AtomicU32,
                map.ptr.add(off.consumer as usize) as *const AtomicU32,
                map.ptr.add(flags as usize) as *const AtomicU32,
                map.ptr.add(off.desc as usize),
            )
        };
        Ok(Ring {
            _map: map,
            producer,
            consumer,
            flags,
            desc,
            mask: entries - 1,
            size: entries,
            cached_prod: 0,
            cached_cons: 0,
        })
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: points into the live mapping owned by `self`; the kernel
        // accesses it atomically too.
        unsafe { &*self.producer }
    }
    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.consumer }
    }
    fn needs_wakeup(&self) -> bool {
        // SAFETY: as for `producer`.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & XdpRingFlags::XDP_RING_NEED_WAKEUP.bits()
            != 0
    }

    /// Producer side: free slots (refreshing the consumer index if needed).
    fn free(&mut self, want: u32) -> u32 {
        let free = self.size - self.cached_prod.wrapping_sub(self.cached_cons);
        if free >= want {
            return free;
        }
        self.cached_cons = self.consumer().load(Ordering::Acquire);
        self.size - self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// Consumer side: filled slots (refreshing the producer index).
    fn available(&mut self) -> u32 {
        let avail = self.cached_prod.wrapping_sub(self.cached_cons);
        if avail > 0 {
            return avail;
        }
        self.cached_prod = self.producer().load(Ordering::Acquire);
        self.cached_prod.wrapping_sub(self.cached_cons)
    }

    fn read<T: Copy>(&self, idx: u32) -> T {
        // SAFETY: `idx & mask` is below the ring size the mapping holds, and
        // the slot was published by the kernel (consumer side) before the
        // Acquire load of the producer index.
        unsafe { std::ptr::read_volatile((self.desc as *const T).add((idx & self.mask) as usize)) }
    }

    fn write<T: Copy>(&mut self, idx: u32, value: T) {
        // SAFETY: `idx & mask` is below the ring size; the slot is free
        // (producer side, checked with `free`) so the kernel does not read it
        // until the Release store of the producer index.
        unsafe {
            std::ptr::write_volatile((self.desc as *mut T).add((idx & self.mask) as usize), value)
        }
    }
}

/// An AF_XDP socket with its own UMEM.
pub struct XskSocket {
    fd: OwnedFd,
    umem: Mmap,
    frame_size: u32,
    rx: Ring,
    tx: Ring,
    fill: Ring,
    comp: Ring,
    tx_free: Vec<u64>,
    tx_pending: u32,
    zero_copy: bool,
}

// SAFETY: the socket owns its mappings exclusively; moving it to another
// thread moves all access with it.
unsafe impl Send for XskSocket {}

/// The socket's descriptor, for the XSKMAP that steers frames to it.
impl std::os::fd::AsRawFd for XskSocket {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

impl std::fmt::Debug for XskSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XskSocket")
            .field("fd", &self.fd.as_raw_fd())
            .field("zero_copy", &self.zero_copy)
            .finish()
    }
}

impl XskSocket {
    /// Creates a socket, registers its UMEM, maps its rings and binds it to
    /// `queue` of `ifindex`.
    pub fn new(ifindex: u32, queue: u32, cfg: XskConfig) -> io::Result<XskSocket> {
        if !cfg.rx_size.is_power_of_two()
            || !cfg.tx_size.is_power_of_two()
            || !cfg.frame_size.is_power_of_two()
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "AF_XDP ring and frame sizes must be powers of two",
            ));
        }
        let fd = rustix::net::socket_with(
            AddressFamily::XDP,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            None,
        )?;
        let nframes = cfg.rx_size + cfg.tx_size;
        let umem_len = nframes as usize * cfg.frame_size as usize;
        let umem = Mmap::new(umem_len, None, 0, true)?;
        let reg = XdpUmemReg {
            addr: umem.ptr as u64,
            len: umem_len as u64,
            chunk_size: cfg.frame_size,
            headroom: 0,
            flags: XdpUmemRegFlags::empty(),
            tx_metadata_len: 0,
        };
        sockopt::set_xdp_umem_reg(&fd, reg)?;
        sockopt::set_xdp_umem_fill_ring_size(&fd, cfg.rx_size)?;
        sockopt::set_xdp_umem_completion_ring_size(&fd, cfg.tx_size)?;
        sockopt::set_xdp_rx_ring_size(&fd, cfg.rx_size)?;
        sockopt::set_xdp_tx_ring_size(&fd, cfg.tx_size)?;

        let off = sockopt::xdp_mmap_offsets(&fd)?;
        let desc = std::mem::size_of::<XdpDesc>();
        let rx = Ring::map(&fd, &off.rx, cfg.rx_size, desc, XDP_PGOFF_RX_RING)?;
        let tx = Ring::map(&fd, &off.tx, cfg.tx_size, desc, XDP_PGOFF_TX_RING)?;
        let fill = Ring::map(&fd, &off.fr, cfg.rx_size, 8, XDP_UMEM_PGOFF_FILL_RING)?;
        let comp = Ring::map(&fd, &off.cr, cfg.tx_size, 8, XDP_UMEM_PGOFF_COMPLETION_RING)?;

        let mut sock = XskSocket {
            fd,
            umem,
            frame_size: cfg.frame_size,
            rx,
            tx,
            fill,
            comp,
            tx_free: (cfg.rx_size..nframes)
                .map(|i| i as u64 * cfg.frame_size as u64)
                .collect(),
            tx_pending: 0,
            zero_copy: false,
        };
        // Hand every receive chunk to the kernel before binding.
        let n = sock.fill.free(cfg.rx_size);
        for i in 0..n.min(cfg.rx_size) {
            let idx = sock.fill.cached_prod.wrapping_add(i);
            sock.fill
                .write::<u64>(idx, i as u64 * cfg.frame_size as u64);
        }
        sock.fill.cached_prod = sock.fill.cached_prod.wrapping_add(n.min(cfg.rx_size));
        sock.fill
            .producer()
            .store(sock.fill.cached_prod, Ordering::Release);

        let attempts: &[SocketAddrXdpFlags] = match cfg.mode {
            BindMode::Auto => &[
                SocketAddrXdpFlags::XDP_ZEROCOPY,
                SocketAddrXdpFlags::XDP_COPY,
            ],
            BindMode::ZeroCopy => &[SocketAddrXdpFlags::XDP_ZEROCOPY],
            BindMode::Copy => &[SocketAddrXdpFlags::XDP_COPY],
        };
        let mut last = io::Error::from(io::ErrorKind::Unsupported);
        for &mode in attempts {
            let flags = mode | SocketAddrXdpFlags::XDP_USE_NEED_WAKEUP;
            match rustix::net::bind(&sock.fd, &SocketAddrXdp::new(flags, ifindex, queue)) {
                Ok(()) => {
                    sock.zero_copy = mode == SocketAddrXdpFlags::XDP_ZEROCOPY;
                    return Ok(sock);
                }
                Err(e) => last = e.into(),
            }
        }
        Err(last)
    }

    /// The socket descriptor (for the XSKMAP and for poll).
    pub fn fd(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }

    /// Whether the socket was bound in zero-copy mode.
    pub fn is_zero_copy(&self) -> bool {
        self.zero_copy
    }

    fn chunk(&self, addr: u64, len: u32) -> Option<&[u8]> {
        let start = addr as usize;
        let end = start.checked_add(len as usize)?;
        if end > self.umem.len {
            return None;
        }
        // SAFETY: `start..end` lies inside the UMEM (checked); the chunk was
        // handed to user space by the RX ring, so the kernel no longer writes it.
        Some(unsafe { std::slice::from_raw_parts(self.umem.ptr.add(start), len as usize) })
    }

    /// Receives up to `max` frames, calling `each` with the bytes of every
    /// one, and returns their chunks to the fill ring. Returns the count.
    pub fn recv(&mut self, max: usize, mut each: impl FnMut(&[u8])) -> usize {
        let n = self.rx.available().min(max as u32);
        if n == 0 {
            if self.fill.needs_wakeup() {
                self.kick_rx();
            }
            return 0;
        }
        // Every receive chunk fits the fill ring, so this never shrinks `n`.
        let n = n.min(self.fill.free(n));
        for i in 0..n {
            let d: XdpDesc = self.rx.read(self.rx.cached_cons.wrapping_add(i));
            let base = d.addr - d.addr % self.frame_size as u64;
            if let Some(bytes) = self.chunk(d.addr, d.len) {
                each(bytes);
            }
            let slot = self.fill.cached_prod.wrapping_add(i);
            self.fill.write::<u64>(slot, base);
        }
        self.rx.cached_cons = self.rx.cached_cons.wrapping_add(n);
        self.rx
            .consumer()
            .store(self.rx.cached_cons, Ordering::Release);
        self.fill.cached_prod = self.fill.cached_prod.wrapping_add(n);
        self.fill
            .producer()
            .store(self.fill.cached_prod, Ordering::Release);
        n as usize
    }

    fn kick_rx(&self) {
        // A zero-length non-blocking receive: the kernel only runs the
        // socket's receive path (refilling from the fill ring).
        let _ = rustix::net::recv(&self.fd, &mut [0u8; 0][..], RecvFlags::DONTWAIT);
    }

    /// Returns completed TX chunks to the free list.
    fn reclaim(&mut self) {
        let n = self.comp.available();
        for i in 0..n {
            let addr: u64 = self.comp.read(self.comp.cached_cons.wrapping_add(i));
            self.tx_free.push(addr - addr % self.frame_size as u64);
        }
        if n > 0 {
            self.comp.cached_cons = self.comp.cached_cons.wrapping_add(n);
            self.comp
                .consumer()
                .store(self.comp.cached_cons, Ordering::Release);
        }
    }

    /// Queues one frame for sending (visible to the kernel at the next
    /// [`flush`](Self::flush)). Returns false when no TX chunk or slot is
    /// free or the frame does not fit a chunk.
    pub fn send(&mut self, frame: &[u8]) -> bool {
        if frame.len() > self.frame_size as usize {
            return false;
        }
        if self.tx_free.is_empty() {
            self.reclaim();
        }
        if self.tx.free(1) == 0 {
            return false;
        }
        let Some(addr) = self.tx_free.pop() else {
            return false;
        };
        // SAFETY: `addr` is the start of a free TX chunk of `frame_size`
        // bytes inside the UMEM (free list invariant) and `frame` fits; the
        // kernel does not touch free chunks.
        unsafe {
            std::ptr::copy_nonoverlapping(
                frame.as_ptr(),
                self.umem.ptr.add(addr as usize),
                frame.len(),
            );
        }
        let idx = self.tx.cached_prod;
        self.tx.write(
            idx,
            XdpDesc {
                addr,
                len: frame.len() as u32,
                options: XdpDescOptions::empty(),
            },
        );
        self.tx.cached_prod = idx.wrapping_add(1);
        self.tx_pending += 1;
        true
    }

    /// Publishes queued frames and wakes the kernel's transmit path if it
    /// asked to be woken.
    pub fn flush(&mut self) {
        if self.tx_pending > 0 {
            self.tx
                .producer()
                .store(self.tx.cached_prod, Ordering::Release);
            self.tx_pending = 0;
        }
        let in_flight = self
            .tx
            .cached_prod
            .wrapping_sub(self.tx.consumer().load(Ordering::Acquire));
        if in_flight > 0 && (self.tx.needs_wakeup() || !self.zero_copy) {
            // Copy mode sends at most a small batch per call and answers
            // EAGAIN while descriptors remain: call again a bounded number of times.
            for _ in 0..(in_flight / 32 + 1).min(16) {
                // A zero-length non-blocking send: the kernel only runs the
                // socket's transmit path over the TX ring.
                match rustix::net::send(&self.fd, &[], SendFlags::DONTWAIT) {
                    Err(Errno::AGAIN) => continue,
                    _ => break,
                }
            }
        }
        self.reclaim();
    }

    /// Frames queued with [`send`](Self::send) and not yet published.
    pub fn tx_unpublished(&self) -> usize {
        self.tx_pending as usize
    }

    /// Frames queued or in flight that the kernel has not completed.
    pub fn tx_outstanding(&self) -> usize {
        self.tx.size as usize - self.tx_free.len()
    }

    /// Kernel counters of this socket.
    pub fn stats(&self) -> io::Result<XskStats> {
        let st = sockopt::xdp_statistics(&self.fd)?;
        Ok(XskStats {
            rx_dropped: st.rx_dropped,
            rx_invalid_descs: st.rx_invalid_descs,
            tx_invalid_descs: st.tx_invalid_descs,
            rx_ring_full: st.rx_ring_full.unwrap_or(0),
            rx_fill_ring_empty_descs: st.rx_fill_ring_empty_descs.unwrap_or(0),
            tx_ring_empty_descs: st.tx_ring_empty_descs.unwrap_or(0),
        })
    }
}
