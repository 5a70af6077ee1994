//! The BPF-related calls aya does not offer: running an XDP program over
//! one frame (`BPF_PROG_TEST_RUN`), or over live frames that it may
//! redirect out of an interface (`BPF_F_TEST_XDP_LIVE_FRAMES`), and waiting
//! for an RCU grace period (`membarrier`), after which no program run that
//! began before the call is still going.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `BPF_PROG_TEST_RUN` from `linux/bpf.h`.
const BPF_PROG_TEST_RUN: libc::c_long = 10;
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
    // SAFETY: `attr` is a valid `union bpf_attr` prefix of the size passed;
    // the caller vouches for the buffers it points to.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            attr as *mut TestRunAttr,
            std::mem::size_of::<TestRunAttr>() as libc::c_uint,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits for an RCU grace period: every XDP program run that started
/// before this call has finished when it returns.
pub fn synchronize_rcu() -> io::Result<()> {
    // SAFETY: membarrier takes two integer arguments and touches no memory
    // of this process.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
