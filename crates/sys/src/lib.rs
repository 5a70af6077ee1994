//! Every system call and raw-memory access of fastfwd lives in this crate,
//! each `unsafe` block with the reason it is sound: AF_XDP sockets, rings
//! and UMEM ([`xsk`]), TPACKET_V3 rings ([`packet`], and the lab's in
//! [`lab`]), BPF test runs ([`bpf`]), netlink sockets ([`netlink`]),
//! namespaces, CPU pinning, signals and privileges ([`os`]), and the
//! cache prefetch hint of batched lookups ([`cpu`]). Every other
//! crate forbids `unsafe` and sees only the safe API exported here (as
//! `netio::sys`).

pub mod bpf;
pub mod cpu;
pub mod lab;
pub mod netlink;
pub mod os;
pub mod packet;
pub mod xsk;

use std::io;

/// Turns a `-1`-on-error libc return into an `io::Result`.
fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Reads a socket option into `value`, a plain-data type (integers, or a
/// C struct or array of them: every byte pattern is a valid value);
/// returns the number of bytes the kernel wrote.
fn getsockopt<T: Copy>(
    fd: libc::c_int,
    level: libc::c_int,
    name: libc::c_int,
    value: &mut T,
) -> io::Result<usize> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a live, exclusive reference to a `T` of exactly
    // `len` bytes; the kernel writes at most `len` bytes of plain data into
    // it (any bytes are a valid `T`, as documented) and stores the length
    // it wrote.
    let ret = unsafe { libc::getsockopt(fd, level, name, (value as *mut T).cast(), &mut len) };
    cvt(ret).map(|_| len as usize)
}

/// Frames packet socket `fd` took and dropped (its ring full) since the
/// last call: PACKET_STATISTICS, which the kernel resets on every read.
fn take_packet_stats(fd: libc::c_int) -> io::Result<(u64, u64)> {
    let mut st = libc::tpacket_stats_v3 {
        tp_packets: 0,
        tp_drops: 0,
        tp_freeze_q_cnt: 0,
    };
    getsockopt(fd, libc::SOL_PACKET, libc::PACKET_STATISTICS, &mut st)?;
    Ok((u64::from(st.tp_packets), u64::from(st.tp_drops)))
}

/// Sets a socket option from a plain value.
fn setsockopt<T>(
    fd: libc::c_int,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` is a live reference to a `T` of exactly the size passed;
    // the kernel only reads it.
    let ret = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    cvt(ret).map(|_| ())
}

/// Binds a packet socket to `ifindex` for every protocol (ETH_P_ALL).
fn bind_packet(fd: std::os::fd::BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    bind_packet_protocol(fd, ifindex, libc::ETH_P_ALL as u16)
}

/// Binds a packet socket to `ifindex` for `protocol` (0: none, so it only
/// sends).
fn bind_packet_protocol(
    fd: std::os::fd::BorrowedFd<'_>,
    ifindex: u32,
    protocol: u16,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid starting value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: the pointer and length describe `sll`, alive for the call.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// A shared memory mapping unmapped on drop.
#[derive(Debug)]
struct Mmap {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory; the types that hold it decide who
// touches which bytes, and are themselves moved between threads only whole.
unsafe impl Send for Mmap {}

impl Mmap {
    /// Maps `len` bytes of `fd` at `offset` (a socket ring), or anonymous
    /// memory when `fd` is `None`.
    fn new(
        len: usize,
        fd: Option<std::os::fd::BorrowedFd<'_>>,
        offset: u64,
        populate: bool,
    ) -> io::Result<Mmap> {
        use rustix::mm::{MapFlags, ProtFlags};
        let prot = ProtFlags::READ | ProtFlags::WRITE;
        let extra = if populate {
            MapFlags::POPULATE
        } else {
            MapFlags::empty()
        };
        let ptr = match fd {
            // SAFETY: a fresh mapping chosen by the kernel (no fixed
            // address), so it aliases no Rust object.
            Some(fd) => unsafe {
                rustix::mm::mmap(
                    std::ptr::null_mut(),
                    len,
                    prot,
                    MapFlags::SHARED | extra,
                    fd,
                    offset,
                )
            },
            // SAFETY: as above, anonymous memory.
            None => unsafe {
                rustix::mm::mmap_anonymous(
                    std::ptr::null_mut(),
                    len,
                    prot,
                    MapFlags::PRIVATE | extra,
                )
            },
        }?;
        Ok(Mmap {
            ptr: ptr.cast(),
            len,
        })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping this value created and owns.
        let _ = unsafe { rustix::mm::munmap(self.ptr.cast(), self.len) };
    }
}
