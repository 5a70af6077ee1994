//! Every system call and raw-memory access of fastfwd lives in this crate,
//! each `unsafe` block with the reason it is sound: AF_XDP sockets, rings
//! and UMEM ([`xsk`]), TPACKET_V3 rings ([`packet`], and the lab's in
//! [`lab`]), BPF test runs ([`bpf`]), netlink sockets ([`netlink`]),
//! namespaces, CPU pinning, signals and privileges ([`os`]). Every other
//! crate forbids `unsafe` and sees only the safe API exported here (as
//! `netio::sys`).

pub mod bpf;
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

/// An owned file descriptor closed on drop.
#[derive(Debug)]
pub struct Fd(libc::c_int);

impl Fd {
    /// Wraps the result of a call that returns a new descriptor.
    fn new(ret: libc::c_int) -> io::Result<Fd> {
        cvt(ret).map(Fd)
    }

    /// The raw descriptor number (for poll and BPF maps).
    pub fn raw(&self) -> libc::c_int {
        self.0
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: this value owns the descriptor; nothing else closes it.
        unsafe {
            libc::close(self.0);
        }
    }
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
        fd: Option<libc::c_int>,
        offset: libc::off_t,
        populate: bool,
    ) -> io::Result<Mmap> {
        let mut flags = match fd {
            Some(_) => libc::MAP_SHARED,
            None => libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        };
        if populate {
            flags |= libc::MAP_POPULATE;
        }
        // SAFETY: a fresh mapping chosen by the kernel (no fixed address), so
        // it aliases no Rust object; failure is checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd.unwrap_or(-1),
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap {
            ptr: ptr.cast(),
            len,
        })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping this value created and owns.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}
