//! The BPF-related calls aya does not offer: running an XDP program over
//! one frame (`BPF_PROG_TEST_RUN`), or over live frames that it may
//! redirect out of an interface (`BPF_F_TEST_XDP_LIVE_FRAMES`), writing
//! many elements of an array map in one call (`BPF_MAP_UPDATE_BATCH`), and
//! waiting for an RCU grace period (`membarrier`), after which no program
//! run that began before the call is still going.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `BPF_PROG_TEST_RUN` from `linux/bpf.h`.
const BPF_PROG_TEST_RUN: libc::c_long = 10;
/// `BPF_MAP_UPDATE_BATCH` from `linux/bpf.h` (kernel 5.6+).
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
/// `BPF_OBJ_GET_INFO_BY_FD` from `linux/bpf.h`.
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
/// `MEMBARRIER_CMD_GLOBAL` from `linux/membarrier.h`: returns after an RCU
/// grace period (`synchronize_rcu()` in the kernel).
const MEMBARRIER_CMD_GLOBAL: libc::c_int = 1;
/// `BPF_F_TEST_XDP_LIVE_FRAMES` from `linux/bpf.h` (kernel 5.18+).
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
/// The kernel's largest live-frames batch.
pub const LIVE_FRAMES_MAX_BATCH: u32 = 256;

/// The `test` member of `union bpf_attr` (kernel 5.10+ layout).
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    pad: u32,
}

/// The `batch` member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// The head of `struct bpf_map_info`.
#[repr(C)]
#[derive(Default)]
struct MapInfoHead {
    map_type: u32,
    id: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
}

/// The `info` member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// A map's key and value sizes, from the kernel.
fn map_kv_sizes(map: BorrowedFd<'_>) -> io::Result<(usize, usize)> {
    let mut head = MapInfoHead::default();
    let mut attr = InfoAttr {
        bpf_fd: map.as_raw_fd() as u32,
        info_len: std::mem::size_of::<MapInfoHead>() as u32,
        info: &mut head as *mut MapInfoHead as u64,
    };
    // SAFETY: the kernel writes at most info_len bytes (the size of
    // `head`, live for the call) into `head` and updates `attr`.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)? };
    Ok((head.key_size as usize, head.value_size as usize))
}

/// Writes `values[i]` at index `keys[i]` of the array map `map`, every
/// element in one `bpf()` call (the kernel still updates them one by one,
/// with the same semantics as single updates). `values` holds
/// `keys.len()` elements of `value_size` bytes each, as the map stores
/// them; a map whose keys are not 4 bytes or whose values are not
/// `value_size` bytes is refused (EINVAL) before anything is written. On an
/// error from the kernel, the elements before the failing one are written.
pub fn array_update_batch(
    map: BorrowedFd<'_>,
    keys: &[u32],
    values: &[u8],
    value_size: usize,
) -> io::Result<()> {
    if value_size == 0 || values.len() != keys.len() * value_size {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    if keys.is_empty() {
        return Ok(());
    }
    if map_kv_sizes(map)? != (4, value_size) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut done = 0;
    // The kernel takes a u32 count; larger slices go in parts.
    for part in keys.chunks(1 << 20) {
        let vals = &values[done * value_size..(done + part.len()) * value_size];
        let mut attr = BatchAttr {
            keys: part.as_ptr() as u64,
            values: vals.as_ptr() as u64,
            count: part.len() as u32,
            map_fd: map.as_raw_fd() as u32,
            ..BatchAttr::default()
        };
        // SAFETY: the kernel reads `count` keys of the map's key size (4,
        // checked above) from `part` and `count` values of the map's value
        // size (`value_size`, checked above against the map and against
        // the slice's length) from `vals`, both live for the call; it
        // writes nothing but `attr.count`.
        unsafe { bpf(BPF_MAP_UPDATE_BATCH, &mut attr)? };
        done += part.len();
    }
    Ok(())
}

/// Runs the XDP program `prog` once over `frame`. Returns the program's
/// return value (the XDP action) and the frame as it left the program,
/// written into `out` (its length is the second value).
pub fn xdp_test_run(
    prog: BorrowedFd<'_>,
    frame: &[u8],
    out: &mut [u8],
) -> io::Result<(u32, usize)> {
    let (retval, len, _) = xdp_test_run_repeat(prog, frame, out, 1)?;
    Ok((retval, len))
}

/// [`xdp_test_run`] `repeat` times over the same frame in the kernel;
/// also returns the kernel's mean time per run in nanoseconds.
pub fn xdp_test_run_repeat(
    prog: BorrowedFd<'_>,
    frame: &[u8],
    out: &mut [u8],
    repeat: u32,
) -> io::Result<(u32, usize, u32)> {
    let mut attr = TestRunAttr {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: u32::try_from(frame.len())
            .map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?,
        data_size_out: u32::try_from(out.len()).unwrap_or(u32::MAX),
        data_in: frame.as_ptr() as u64,
        data_out: out.as_mut_ptr() as u64,
        repeat: repeat.max(1),
        ..TestRunAttr::default()
    };
    // SAFETY: the kernel reads `frame` (data_size_in bytes) and writes at
    // most data_size_out bytes into `out`, both live for the call.
    unsafe { prog_test_run(&mut attr)? };
    Ok((
        attr.retval,
        (attr.data_size_out as usize).min(out.len()),
        attr.duration,
    ))
}

/// Runs the XDP program `prog` `repeat` times in live-frames mode, in
/// batches of `batch` (at most [`LIVE_FRAMES_MAX_BATCH`]): each run gets a
/// frame initialised from `frame` (a recycled page keeps what the last
/// run left in it), and the frames it redirects are transmitted as XDP
/// frames, through interfaces of the calling thread's network namespace.
pub fn xdp_run_live_frames(
    prog: BorrowedFd<'_>,
    frame: &[u8],
    repeat: u32,
    batch: u32,
) -> io::Result<()> {
    let mut attr = TestRunAttr {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: u32::try_from(frame.len())
            .map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?,
        data_in: frame.as_ptr() as u64,
        repeat: repeat.max(1),
        flags: BPF_F_TEST_XDP_LIVE_FRAMES,
        batch_size: batch.clamp(1, LIVE_FRAMES_MAX_BATCH),
        ..TestRunAttr::default()
    };
    // SAFETY: the kernel only reads `frame` (data_size_in bytes, live for
    // the call) and writes nothing back but `attr` (no data_out in live mode).
    unsafe { prog_test_run(&mut attr) }
}

/// `BPF_PROG_TEST_RUN` with `attr`.
///
/// # Safety
/// The buffers `attr` points to (`data_in`, `data_out`, `ctx_in`,
/// `ctx_out`) must be valid for the sizes it gives, for the whole call.
unsafe fn prog_test_run(attr: &mut TestRunAttr) -> io::Result<()> {
    // SAFETY: the caller vouches for the buffers `attr` points to.
    unsafe { bpf(BPF_PROG_TEST_RUN, attr) }
}

/// The `bpf()` system call, command `cmd` with `attr`.
///
/// # Safety
/// `T` must be the `union bpf_attr` member (a prefix of it) that `cmd`
/// reads, and every buffer it points to must be valid for the sizes it
/// gives, as `cmd` reads or writes it, for the whole call.
unsafe fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<()> {
    // SAFETY: `attr` is valid for its size, which is passed; the caller
    // vouches for what it points to.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits for an RCU grace period: every XDP program run that started
/// before this call has finished when it returns. `membarrier(GLOBAL)`
/// where the kernel offers it; where it refuses (EINVAL: it does whenever
/// CPUs run `nohz_full`), an update of a map-of-maps element, which the
/// kernel answers only after `synchronize_rcu()` so that no program still
/// runs with the old inner map ([`synchronize_rcu_by_map`]).
pub fn synchronize_rcu() -> io::Result<()> {
    // SAFETY: membarrier takes two integer arguments and touches no memory
    // of this process.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINVAL) {
            return synchronize_rcu_by_map();
        }
        return Err(e);
    }
    Ok(())
}

/// `BPF_MAP_CREATE` and `BPF_MAP_UPDATE_ELEM` from `linux/bpf.h`.
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
/// `BPF_MAP_TYPE_ARRAY`, `BPF_MAP_TYPE_ARRAY_OF_MAPS`.
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_ARRAY_OF_MAPS: u32 = 12;

/// The `BPF_MAP_CREATE` member of `union bpf_attr`, up to `inner_map_fd`
/// (the kernel takes the rest as zero).
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
}

/// The `BPF_MAP_*_ELEM` member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// A one-element array of maps and the array it holds, made once per
/// process for [`synchronize_rcu_by_map`].
static RCU_MAPS: std::sync::OnceLock<io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)>> =
    std::sync::OnceLock::new();

fn map_create(attr: &MapCreateAttr) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: `attr` is a valid prefix of `union bpf_attr` for
    // BPF_MAP_CREATE, passed with its size; it points to nothing.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_CREATE,
            attr as *const MapCreateAttr,
            std::mem::size_of::<MapCreateAttr>() as libc::c_uint,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor this process now owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(r as libc::c_int) })
}

/// Waits for an RCU grace period by putting a map into a map of maps: the
/// kernel returns from that update only after `synchronize_rcu()`, so that
/// no BPF program still runs with the element it replaced. Needs CAP_BPF
/// (or CAP_SYS_ADMIN) the first time, to make the two maps.
pub fn synchronize_rcu_by_map() -> io::Result<()> {
    let maps = RCU_MAPS.get_or_init(|| {
        let inner = map_create(&MapCreateAttr {
            map_type: BPF_MAP_TYPE_ARRAY,
            key_size: 4,
            value_size: 4,
            max_entries: 1,
            ..MapCreateAttr::default()
        })?;
        let outer = map_create(&MapCreateAttr {
            map_type: BPF_MAP_TYPE_ARRAY_OF_MAPS,
            key_size: 4,
            value_size: 4,
            max_entries: 1,
            inner_map_fd: inner.as_raw_fd() as u32,
            ..MapCreateAttr::default()
        })?;
        Ok((outer, inner))
    });
    let (outer, inner) = match maps {
        Ok(m) => m,
        Err(e) => return Err(io::Error::new(e.kind(), e.to_string())),
    };
    let key = 0u32;
    let value = inner.as_raw_fd() as u32;
    let mut attr = MapElemAttr {
        map_fd: outer.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        ..MapElemAttr::default()
    };
    // SAFETY: `attr` is the BPF_MAP_UPDATE_ELEM member; `key` and `value`
    // are 4-byte values (the map's sizes) alive for the call, only read.
    unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }
}

/// Where tracefs is (the tracepoints' ids and formats, under `events/`),
/// mounted at `/sys/kernel/tracing` first when it is not mounted yet: a
/// process under `ip netns exec` sees a fresh sysfs without it. Needs
/// CAP_SYS_ADMIN to mount.
pub fn tracefs() -> io::Result<std::path::PathBuf> {
    let mounted = |p: &str| std::path::Path::new(p).join("events").is_dir();
    for p in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if mounted(p) {
            return Ok(p.into());
        }
    }
    let target = "/sys/kernel/tracing";
    rustix::mount::mount(
        "tracefs",
        target,
        "tracefs",
        rustix::mount::MountFlags::NOSUID
            | rustix::mount::MountFlags::NODEV
            | rustix::mount::MountFlags::NOEXEC,
        None::<&std::ffi::CStr>,
    )
    .map_err(|e| io::Error::other(format!("mounting tracefs on {target}: {e}")))?;
    if mounted(target) {
        Ok(target.into())
    } else {
        Err(io::Error::other(format!(
            "tracefs mounted on {target} has no events/"
        )))
    }
}
