//! Loading the XDP program and updating its maps through libbpf.
//!
//! Hand-written bindings for the handful of libbpf 1.x functions fastfwd
//! needs (Debian's libbpf-dev); libbpf 1.x returns `-errno` from integer
//! functions and sets `errno` when a pointer function returns NULL.

use std::ffi::{c_char, c_int, c_void, CString};
use std::io;

#[repr(C)]
struct BpfObject {
    _private: [u8; 0],
}
#[repr(C)]
struct BpfProgram {
    _private: [u8; 0],
}

#[link(name = "bpf")]
extern "C" {
    fn bpf_object__open_mem(
        obj_buf: *const c_void,
        obj_buf_sz: usize,
        opts: *const c_void,
    ) -> *mut BpfObject;
    fn bpf_object__load(obj: *mut BpfObject) -> c_int;
    fn bpf_object__close(obj: *mut BpfObject);
    fn bpf_object__find_program_by_name(
        obj: *const BpfObject,
        name: *const c_char,
    ) -> *mut BpfProgram;
    fn bpf_program__fd(prog: *const BpfProgram) -> c_int;
    fn bpf_object__find_map_fd_by_name(obj: *const BpfObject, name: *const c_char) -> c_int;
    fn bpf_map_update_elem(
        fd: c_int,
        key: *const c_void,
        value: *const c_void,
        flags: u64,
    ) -> c_int;
    fn bpf_map_delete_elem(fd: c_int, key: *const c_void) -> c_int;
    fn bpf_map_lookup_elem(fd: c_int, key: *const c_void, value: *mut c_void) -> c_int;
    fn bpf_xdp_attach(ifindex: c_int, prog_fd: c_int, flags: u32, opts: *const c_void) -> c_int;
    fn bpf_xdp_detach(ifindex: c_int, flags: u32, opts: *const c_void) -> c_int;
    fn bpf_xdp_query_id(ifindex: c_int, flags: c_int, prog_id: *mut u32) -> c_int;
    fn bpf_link_create(
        prog_fd: c_int,
        target_fd: c_int,
        attach_type: u32,
        opts: *const LinkCreateOpts,
    ) -> c_int;
}

/// The leading fields of libbpf's `struct bpf_link_create_opts`; `sz`
/// tells libbpf how much of the struct is given (the rest defaults).
#[repr(C)]
struct LinkCreateOpts {
    sz: usize,
    flags: u32,
    /// Explicit zero padding: libbpf checks that bytes past `flags` are zero.
    _pad: u32,
}

/// `BPF_XDP` in `enum bpf_attach_type`.
const BPF_XDP: u32 = 37;

/// Fail if a program is already attached (never replace someone else's).
pub const XDP_FLAGS_UPDATE_IF_NOEXIST: u32 = 1;
/// Generic (skb) mode: works on every device, slower.
pub const XDP_FLAGS_SKB_MODE: u32 = 2;
/// Native (driver) mode.
pub const XDP_FLAGS_DRV_MODE: u32 = 4;

fn neg_errno(ret: c_int) -> io::Result<c_int> {
    if ret < 0 {
        Err(io::Error::from_raw_os_error(-ret))
    } else {
        Ok(ret)
    }
}

/// A loaded BPF object (programs and maps live while it does).
#[derive(Debug)]
pub struct Object {
    obj: *mut BpfObject,
}

// SAFETY: a libbpf object is not tied to the thread that opened it; fastfwd
// only moves it whole and uses it from one thread at a time (`&mut`/owned).
unsafe impl Send for Object {}
// SAFETY: the `&self` methods only read descriptor numbers out of the object.
unsafe impl Sync for Object {}

impl Object {
    /// Opens and loads an ELF object held in memory.
    pub fn load(elf: &[u8]) -> io::Result<Object> {
        // SAFETY: `elf` is valid for `elf.len()` bytes for the call; libbpf
        // copies what it keeps. NULL opts selects the defaults.
        let obj = unsafe { bpf_object__open_mem(elf.as_ptr().cast(), elf.len(), std::ptr::null()) };
        if obj.is_null() {
            return Err(io::Error::last_os_error());
        }
        let object = Object { obj };
        // SAFETY: `obj` is a live object just opened and owned by `object`.
        neg_errno(unsafe { bpf_object__load(object.obj) })?;
        Ok(object)
    }

    /// The descriptor of the program called `name`.
    pub fn program_fd(&self, name: &str) -> io::Result<c_int> {
        let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `self.obj` is live; `cname` is NUL-terminated and outlives the call.
        let prog = unsafe { bpf_object__find_program_by_name(self.obj, cname.as_ptr()) };
        if prog.is_null() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no BPF program {name}"),
            ));
        }
        // SAFETY: `prog` belongs to the live object.
        neg_errno(unsafe { bpf_program__fd(prog) })
    }

    /// The descriptor of the map called `name`.
    pub fn map_fd(&self, name: &str) -> io::Result<c_int> {
        let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `self.obj` is live; `cname` is NUL-terminated and outlives the call.
        neg_errno(unsafe { bpf_object__find_map_fd_by_name(self.obj, cname.as_ptr()) })
    }
}

impl Drop for Object {
    fn drop(&mut self) {
        // SAFETY: this value owns the object; closing also closes its fds.
        unsafe { bpf_object__close(self.obj) }
    }
}

/// Map key and value types: plain bytes with no padding or pointers.
pub trait Pod: Copy + 'static {}
impl Pod for u8 {}
impl Pod for u32 {}
impl Pod for u64 {}
impl Pod for [u8; 16] {}

/// Sets `map[key] = value`.
pub fn map_update<K: Pod, V: Pod>(map_fd: c_int, key: &K, value: &V) -> io::Result<()> {
    // SAFETY: key and value point to live plain-data values whose sizes match
    // the map definition (the caller names the map whose types these are).
    neg_errno(unsafe {
        bpf_map_update_elem(
            map_fd,
            (key as *const K).cast(),
            (value as *const V).cast(),
            0,
        )
    })
    .map(|_| ())
}

/// Removes `map[key]`.
pub fn map_delete<K: Pod>(map_fd: c_int, key: &K) -> io::Result<()> {
    // SAFETY: key points to a live plain-data value of the map's key size.
    neg_errno(unsafe { bpf_map_delete_elem(map_fd, (key as *const K).cast()) }).map(|_| ())
}

/// Reads a per-CPU array slot as one value per possible CPU.
pub fn percpu_u64(map_fd: c_int, key: u32, ncpus: usize) -> io::Result<Vec<u64>> {
    let mut values = vec![0u64; ncpus.max(1)];
    // SAFETY: the kernel writes one 8-byte value per possible CPU; `values`
    // has room for `ncpus` of them (the caller passes the possible-CPU count).
    neg_errno(unsafe {
        bpf_map_lookup_elem(
            map_fd,
            (&key as *const u32).cast(),
            values.as_mut_ptr().cast(),
        )
    })?;
    Ok(values)
}

/// Attaches `prog_fd` as the XDP program of `ifindex`.
pub fn xdp_attach(ifindex: u32, prog_fd: c_int, flags: u32) -> io::Result<()> {
    // SAFETY: plain integer arguments; NULL opts are allowed.
    neg_errno(unsafe { bpf_xdp_attach(ifindex as c_int, prog_fd, flags, std::ptr::null()) })
        .map(|_| ())
}

/// Attaches `prog_fd` to `ifindex` through a BPF link in the mode given
/// by `flags`: the program stays attached while the returned descriptor is
/// open, so it goes away with the process however the process ends.
pub fn xdp_link(ifindex: u32, prog_fd: c_int, flags: u32) -> io::Result<super::Fd> {
    let opts = LinkCreateOpts {
        sz: std::mem::size_of::<LinkCreateOpts>(),
        flags,
        _pad: 0,
    };
    // SAFETY: `opts` is a live struct whose `sz` covers exactly the fields
    // given; the other arguments are plain integers.
    let fd = neg_errno(unsafe { bpf_link_create(prog_fd, ifindex as c_int, BPF_XDP, &opts) })?;
    Ok(super::Fd(fd))
}

/// Detaches the XDP program of `ifindex` in the mode given by `flags`.
pub fn xdp_detach(ifindex: u32, flags: u32) -> io::Result<()> {
    // SAFETY: plain integer arguments; NULL opts are allowed.
    neg_errno(unsafe { bpf_xdp_detach(ifindex as c_int, flags, std::ptr::null()) }).map(|_| ())
}

/// The id of the XDP program attached to `ifindex` in any mode (0 = none).
pub fn xdp_query_id(ifindex: u32) -> io::Result<u32> {
    let mut id = 0u32;
    // SAFETY: `id` is a live u32 the call writes.
    neg_errno(unsafe { bpf_xdp_query_id(ifindex as c_int, 0, &mut id) })?;
    Ok(id)
}
