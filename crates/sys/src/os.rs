//! Small operating-system calls: interface indexes, CPU pinning, polling,
//! privileges and stop signals.

use super::cvt;
use rustix::fd::AsFd;
use rustix::fs::Mode;
use rustix::process::Pid;
use rustix::thread::{
    CpuSet, LinkNameSpaceType, move_into_link_name_space, sched_getaffinity, sched_setaffinity,
};
use std::ffi::CString;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// The index of the interface called `name` in this network namespace.
pub fn if_index(name: &str) -> io::Result<u32> {
    let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `cname` is NUL-terminated and outlives the call.
    let idx = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if idx == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(idx)
    }
}

/// CLOCK_MONOTONIC in nanoseconds (read through the vDSO: no system call).
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

/// Whether the process runs with an effective user id of 0.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Raises the process's locked-memory limit (`RLIMIT_MEMLOCK`) to
/// unlimited, or where it may not (no CAP_SYS_RESOURCE) its soft limit to
/// its hard one; returns the soft limit in force (`None`: unlimited).
/// AF_XDP UMEM registered by a thread without CAP_IPC_LOCK (an interface
/// re-created after the privilege drop), and BPF maps on kernels before
/// 5.11, count against it.
pub fn raise_memlock_limit() -> io::Result<Option<u64>> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let unlimited = Rlimit {
        current: None,
        maximum: None,
    };
    if setrlimit(Resource::Memlock, unlimited).is_err() {
        let now = getrlimit(Resource::Memlock);
        setrlimit(
            Resource::Memlock,
            Rlimit {
                current: now.maximum,
                maximum: now.maximum,
            },
        )?;
    }
    Ok(getrlimit(Resource::Memlock).current)
}

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    pin_thread(0, cpu)
}

/// Pins thread `tid` (0: the calling thread) to one CPU.
pub fn pin_thread(tid: i32, cpu: usize) -> io::Result<()> {
    set_affinity(tid, &[cpu])
}

/// Lets thread `tid` (0: the calling thread) run on `cpus` only.
pub fn set_affinity(tid: i32, cpus: &[usize]) -> io::Result<()> {
    let mut set = CpuSet::new();
    for &cpu in cpus {
        if cpu >= CpuSet::MAX_CPU {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cpu number too large",
            ));
        }
        set.set(cpu);
    }
    Ok(sched_setaffinity(Pid::from_raw(tid), &set)?)
}

/// Runs thread `tid` (0: the calling thread) under SCHED_FIFO at
/// `priority` (1-99): it preempts every ordinary thread of its CPU when it
/// becomes runnable, as softirq work does.
pub fn set_realtime(tid: i32, priority: i32) -> io::Result<()> {
    set_scheduler(tid, libc::SCHED_FIFO, priority)
}

/// Returns thread `tid` (0: the calling thread) to ordinary scheduling
/// (SCHED_OTHER), which needs no privilege.
pub fn set_ordinary(tid: i32) -> io::Result<()> {
    set_scheduler(tid, libc::SCHED_OTHER, 0)
}

fn set_scheduler(tid: i32, policy: libc::c_int, priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` is a live sched_param the kernel only reads.
    cvt(unsafe { libc::sched_setscheduler(tid, policy, &param) }).map(|_| ())
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    let set = sched_getaffinity(None)?;
    Ok((0..CpuSet::MAX_CPU).filter(|&i| set.is_set(i)).collect())
}

/// The number of possible CPUs (the length of per-CPU BPF map values).
pub fn possible_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| {
            s.trim()
                .split(',')
                .filter_map(|r| r.rsplit('-').next().and_then(|n| n.parse::<usize>().ok()))
                .max()
        })
        .map(|m| m + 1)
        .unwrap_or(1)
}

/// A wake-up one thread signals and another waits for in
/// [`poll_readable`] among its sockets (an eventfd).
#[derive(Debug)]
pub struct Wakeup(rustix::fd::OwnedFd);

impl Wakeup {
    /// A new, unsignalled wake-up.
    pub fn new() -> io::Result<Wakeup> {
        use rustix::event::{EventfdFlags, eventfd};
        Ok(Wakeup(eventfd(
            0,
            EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC,
        )?))
    }

    /// Makes the descriptor readable (a full counter is already readable,
    /// so the error is of no consequence).
    pub fn signal(&self) {
        let _ = rustix::io::write(&self.0, &1u64.to_ne_bytes());
    }

    /// Makes it unreadable again.
    pub fn clear(&self) {
        let mut b = [0u8; 8];
        let _ = rustix::io::read(&self.0, &mut b);
    }

    /// The descriptor to poll.
    pub fn fd(&self) -> libc::c_int {
        use rustix::fd::AsRawFd;
        self.0.as_raw_fd()
    }
}

/// Waits until one of `fds` is readable or `timeout_ms` passes; returns
/// how many are ready. Interrupted waits return 0.
pub fn poll_readable(fds: &[libc::c_int], timeout_ms: i32) -> io::Result<usize> {
    // libc's poll, not rustix's: a negative descriptor (a port with no
    // socket, as in the in-memory tests) is skipped by the kernel, which a
    // BorrowedFd cannot express; and a fixed array keeps this off the heap.
    const MAX: usize = 64;
    let mut pfds = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; MAX];
    let n = fds.len().min(MAX);
    for (p, &fd) in pfds.iter_mut().zip(fds) {
        p.fd = fd;
        p.events = libc::POLLIN;
    }
    // SAFETY: `pfds` holds `n` initialised entries the kernel may update.
    let ret = unsafe { libc::poll(pfds.as_mut_ptr(), n as libc::nfds_t, timeout_ms) };
    if ret < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    // A socket error the kernel reported (a packet socket's ENETDOWN when
    // its interface went down) stays pending until read: poll would return
    // at once from then on, and the next send would fail with it after the
    // interface is back. Read it here; the rings report what is lost.
    for p in pfds.iter().take(n) {
        if p.fd >= 0 && p.revents & libc::POLLERR != 0 {
            let _ = take_socket_error(p.fd);
        }
    }
    Ok(ret as usize)
}

/// Reads (and so clears) socket `fd`'s pending error (`SO_ERROR`).
pub fn take_socket_error(fd: libc::c_int) -> io::Result<Option<io::Error>> {
    let mut err: libc::c_int = 0;
    super::getsockopt(fd, libc::SOL_SOCKET, libc::SO_ERROR, &mut err)?;
    Ok((err != 0).then(|| io::Error::from_raw_os_error(err)))
}

/// The credentials of the peer of Unix socket `fd` (`SO_PEERCRED`), as
/// seen from this process's namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCredentials {
    /// Its process id, None when the process is outside this PID
    /// namespace (the kernel reports 0).
    pub pid: Option<u32>,
    /// Its user and group ids.
    pub uid: u32,
    pub gid: u32,
}

/// Reads the peer's credentials of connected Unix socket `fd`.
pub fn peer_credentials(fd: libc::c_int) -> io::Result<PeerCredentials> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    super::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PEERCRED, &mut cred)?;
    Ok(PeerCredentials {
        pid: u32::try_from(cred.pid).ok().filter(|&p| p > 0),
        uid: cred.uid,
        gid: cred.gid,
    })
}

static STOP: AtomicBool = AtomicBool::new(false);

/// Makes SIGINT and SIGTERM set the flag read by [`stop_requested`] instead
/// of killing the process, so it can detach its XDP programs first.
pub fn catch_stop_signals() -> io::Result<()> {
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, &STOP)?;
    }
    Ok(())
}

/// Whether SIGINT or SIGTERM arrived since [`catch_stop_signals`].
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Asks the process to stop as if a signal had arrived (tests, control socket).
pub fn request_stop() {
    STOP.store(true, Ordering::SeqCst);
}

/// Runs `f` with the process's file-creation mask set to `mask`, then
/// restores it (so a socket is created with its final mode, no window).
pub fn with_umask<T>(mask: u32, f: impl FnOnce() -> T) -> T {
    let old = rustix::process::umask(Mode::from_raw_mode(mask as _));
    let r = f();
    rustix::process::umask(old);
    r
}

/// The capabilities the running daemon keeps once its sockets are open
/// and its programs attached: CAP_NET_ADMIN, to ask the kernel to resolve
/// neighbours (RTM_NEWNEIGH) and to attach its loaded XDP programs to an
/// interface re-created while it runs; CAP_NET_RAW, to open that
/// interface's AF_XDP or AF_PACKET sockets. Netlink broadcasts, BPF map
/// updates on the maps it holds and its open sockets need none; nothing is
/// loaded after start, so CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN go.
pub const DAEMON_CAPABILITIES: &[caps::Capability] = &[
    caps::Capability::CAP_NET_ADMIN,
    caps::Capability::CAP_NET_RAW,
];

/// Returns the allocator's free memory to the system (glibc's
/// `malloc_trim`, every arena): after a large temporary structure, so
/// the daemon's resident size goes back down.
pub fn release_free_memory() {
    // SAFETY: malloc_trim only releases free heap pages; it has no
    // preconditions and cannot invalidate live allocations.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A local user to run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct User {
    /// User id.
    pub uid: u32,
    /// Its primary group.
    pub gid: u32,
}

/// Finds a user by name or number (through NSS, as `id` does).
pub fn lookup_user(name: &str) -> io::Result<User> {
    let cname =
        std::ffi::CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: passwd is plain data (pointers into `buf`, filled by the call).
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let by_number = name.parse::<u32>().ok();
    // SAFETY: every pointer is live for the call and `buf.len()` is its
    // size; the result points into `pw` or is null.
    let rc = unsafe {
        match by_number {
            Some(uid) => libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found),
            None => libc::getpwnam_r(
                cname.as_ptr(),
                &mut pw,
                buf.as_mut_ptr(),
                buf.len(),
                &mut found,
            ),
        }
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    if found.is_null() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no user {name}"),
        ));
    }
    Ok(User {
        uid: pw.pw_uid,
        gid: pw.pw_gid,
    })
}

/// Finds a group's number by name or number (through NSS).
pub fn lookup_group(name: &str) -> io::Result<u32> {
    if let Ok(gid) = name.parse::<u32>() {
        return Ok(gid);
    }
    let cname =
        std::ffi::CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: group is plain data (pointers into `buf`, filled by the call).
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::group = std::ptr::null_mut();
    let mut buf = vec![0 as libc::c_char; 64 * 1024];
    // SAFETY: every pointer is live for the call and `buf.len()` is its size.
    let rc = unsafe {
        libc::getgrnam_r(
            cname.as_ptr(),
            &mut gr,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    if found.is_null() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no group {name}"),
        ));
    }
    Ok(gr.gr_gid)
}

/// Drops every capability but `keep` from the calling thread's bounding,
/// inheritable, ambient, permitted and effective sets, and sets
/// NO_NEW_PRIVS, so nothing it runs later regains them; with `user`, runs
/// as that user (and its group, no supplementary groups) from then on,
/// keeping `keep`. Threads started afterwards inherit the reduced sets;
/// call it before starting them.
pub fn drop_privileges(keep: &[caps::Capability], user: Option<User>) -> io::Result<()> {
    use caps::{CapSet, CapsHashSet};
    let keep: CapsHashSet = keep.iter().copied().collect();
    let err = |e: caps::errors::CapsError| io::Error::other(e.to_string());
    for c in caps::all() {
        if !keep.contains(&c) && caps::has_cap(None, CapSet::Bounding, c).unwrap_or(false) {
            caps::drop(None, CapSet::Bounding, c).map_err(err)?;
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(err)?;
    caps::clear(None, CapSet::Inheritable).map_err(err)?;
    if let Some(u) = user {
        // Keep the permitted set across the change of user (the effective
        // set is cleared by it and raised again below).
        rustix::thread::set_keep_capabilities(true)?;
        // SAFETY: an empty list (null pointer, length 0) clears the
        // supplementary groups; glibc applies it to every thread.
        cvt(unsafe { libc::setgroups(0, std::ptr::null()) })?;
        // SAFETY: plain integer arguments; glibc applies the change to every
        // thread of the process.
        cvt(unsafe { libc::setgid(u.gid) })?;
        // SAFETY: as above.
        cvt(unsafe { libc::setuid(u.uid) })?;
    }
    caps::set(None, CapSet::Effective, &keep).map_err(err)?;
    caps::set(None, CapSet::Permitted, &keep).map_err(err)?;
    rustix::thread::set_no_new_privs(true)?;
    Ok(())
}

/// Restores the default action of SIGPIPE (Rust's runtime ignores it), so
/// a command whose output pipe closes (`fastfwd show drops | head`) ends
/// quietly, as `ip` does, instead of failing on the write.
pub fn default_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL installs no handler
    // code; it cannot violate memory safety.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Sets the permission bits of a path (the control socket).
pub fn chmod(path: &std::path::Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Moves the calling thread into the network namespace `name` (as created
/// by `ip netns add`). Sockets opened afterwards by this thread live there.
pub fn enter_netns(name: &str) -> io::Result<()> {
    let path = std::path::Path::new("/run/netns").join(name);
    let file = std::fs::File::open(&path)?;
    Ok(move_into_link_name_space(
        file.as_fd(),
        Some(LinkNameSpaceType::Network),
    )?)
}

/// Takes an exclusive advisory lock on `file` without waiting (`flock`):
/// false when another open file description holds it. Released when every
/// descriptor of this one is closed, so when the process ends, however.
pub fn try_lock_exclusive(file: &std::fs::File) -> io::Result<bool> {
    match rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The identity of this process's network namespace (the inode of
/// /proc/self/ns/net): equal for two processes exactly when they share it.
pub fn netns_id() -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata("/proc/self/ns/net")?.ino())
}

/// The 1-minute load average below which the machine counts as quiet enough
/// to take a benchmark figure for the record.
pub const QUIET_LOAD: f64 = 0.5;

/// The 1-, 5- and 15-minute load averages (`/proc/loadavg`).
pub fn load_average() -> io::Result<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg")?;
    parse_load_average(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "/proc/loadavg: unexpected format",
        )
    })
}

fn parse_load_average(text: &str) -> Option<[f64; 3]> {
    let mut it = text.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// What a benchmark says about the machine's load: read when it starts and
/// again when it ends. Only the load at the start tells whether something
/// else was running (the benchmark's own threads raise it while it runs), so
/// that reading decides whether the run's ratios are flagged.
#[derive(Debug, Clone, Copy)]
pub struct LoadNote {
    start: Option<[f64; 3]>,
}

/// Set by a launching script to the load average it read before its own
/// installs and builds ("0.12 0.10 0.05"), which raise the load themselves.
pub const LOAD_AT_START_ENV: &str = "FASTFWD_BENCH_LOAD_AT_START";

impl LoadNote {
    /// The load average at the benchmark's start: as its launching script
    /// read it before building ([`LOAD_AT_START_ENV`]), else now.
    pub fn start() -> Self {
        let launched = std::env::var(LOAD_AT_START_ENV)
            .ok()
            .and_then(|v| parse_load_average(&v));
        LoadNote {
            start: launched.or_else(|| load_average().ok()),
        }
    }

    /// A note for a given start reading (`None`: unreadable).
    pub fn with_start(start: Option<[f64; 3]>) -> Self {
        LoadNote { start }
    }

    /// The 1-minute load average at the start, if it could be read.
    pub fn start_load(&self) -> Option<f64> {
        self.start.map(|l| l[0])
    }

    /// Whether the run started on a quiet machine (an unreadable load is not
    /// quiet: nothing shows that it was).
    pub fn quiet(&self) -> bool {
        self.start_load().is_some_and(|l| l < QUIET_LOAD)
    }

    /// The flag to put beside every ratio of a run that did not start quiet.
    pub fn ratio_flag(&self) -> &'static str {
        if self.quiet() {
            ""
        } else {
            " [load ≥ 0.5 at start: not a quiet figure]"
        }
    }

    /// The line a benchmark prints first.
    pub fn header(&self) -> String {
        match self.start {
            Some(l) if self.quiet() => format!(
                "load average at start: {:.2} {:.2} {:.2} (quiet: below {QUIET_LOAD})",
                l[0], l[1], l[2]
            ),
            Some(l) => format!(
                "load average at start: {:.2} {:.2} {:.2}: NOT QUIET (at or above {QUIET_LOAD}); every ratio of this run is flagged",
                l[0], l[1], l[2]
            ),
            None => "load average at start: unreadable; every ratio of this run is flagged".into(),
        }
    }

    /// The line a benchmark prints last: the load now, and the verdict again.
    pub fn footer(&self) -> String {
        let end = match load_average() {
            Ok(l) => format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2]),
            Err(_) => "unreadable".into(),
        };
        let start = self
            .start
            .map(|l| format!("{:.2}", l[0]))
            .unwrap_or_else(|| "unreadable".into());
        if self.quiet() {
            format!("load average at end: {end} (at start {start}: quiet)")
        } else {
            format!("load average at end: {end} (at start {start}: NOT QUIET, ratios flagged)")
        }
    }
}

#[cfg(test)]
mod load_tests {
    use super::*;

    /// The locked-memory limit ends unlimited with CAP_SYS_RESOURCE, else
    /// at its hard limit.
    #[test]
    fn the_memlock_limit_is_raised_as_far_as_allowed() {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        // A soft limit below the hard one, as a login may set it.
        let before = getrlimit(Resource::Memlock);
        if before.maximum.is_none_or(|m| m > 1 << 20) {
            setrlimit(
                Resource::Memlock,
                Rlimit {
                    current: Some(1 << 20),
                    maximum: before.maximum,
                },
            )
            .expect("lowering the soft limit");
        }
        let soft = raise_memlock_limit().expect("raising RLIMIT_MEMLOCK");
        let now = getrlimit(Resource::Memlock);
        assert_eq!(soft, now.current);
        assert_eq!(now.current, now.maximum, "soft raised to hard");
        let may = caps::has_cap(
            None,
            caps::CapSet::Effective,
            caps::Capability::CAP_SYS_RESOURCE,
        )
        .unwrap_or(false);
        if may {
            assert_eq!(now.current, None, "unlimited with CAP_SYS_RESOURCE");
        }
    }

    #[test]
    fn parses_proc_loadavg() {
        assert_eq!(
            parse_load_average("0.07 0.02 0.08 1/234 5678\n"),
            Some([0.07, 0.02, 0.08])
        );
        assert_eq!(parse_load_average("0.07 x 0.08 1/2 3"), None);
        assert_eq!(parse_load_average("0.07 0.02"), None);
    }

    #[test]
    fn flags_a_run_that_did_not_start_quiet() {
        let quiet = LoadNote::with_start(Some([0.49, 1.0, 1.0]));
        assert!(quiet.quiet());
        assert_eq!(quiet.ratio_flag(), "");
        assert!(quiet.header().contains("quiet: below 0.5"));
        assert_eq!(
            parse_load_average("0.31 0.22 0.10"),
            Some([0.31, 0.22, 0.10])
        );
        let busy = LoadNote::with_start(Some([0.5, 0.1, 0.1]));
        assert!(!busy.quiet());
        assert!(busy.ratio_flag().contains("not a quiet figure"));
        assert!(busy.header().contains("NOT QUIET"));
        assert!(busy.footer().contains("NOT QUIET"));
        let unknown = LoadNote::with_start(None);
        assert!(!unknown.quiet());
        assert!(unknown.header().contains("unreadable"));
    }

    #[test]
    fn reads_this_machines_load() {
        let l = load_average().expect("/proc/loadavg");
        assert!(l.iter().all(|v| v.is_finite() && *v >= 0.0));
    }
}
