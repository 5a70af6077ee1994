//! Following the kernel: a dump of links, addresses, routes and neighbours
//! at start, then the RTNLGRP_* broadcasts, applied to a [`KernelState`].
//! Also asks the kernel to resolve neighbours fastfwd misses.

use crate::netlink::{self, Event, msg};
use rib::kernel::{Change, KernelState};
use std::collections::BTreeSet;
use wire::Cidr;

/// What a burst of kernel events changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Delta {
    /// Prefixes whose kernel routes changed.
    pub routes: BTreeSet<Cidr>,
    /// Some neighbour changed.
    pub neighbours: bool,
    /// Links whose state or addresses changed, by index.
    pub links: BTreeSet<u32>,
    /// Something that can touch every route changed (a nexthop object, a
    /// resync after lost broadcasts).
    pub other: bool,
    /// Policy rules or routes fastfwd does not forward with changed: what
    /// it must name as unmodelled may have.
    pub policy: bool,
}

impl Delta {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
            && !self.neighbours
            && self.links.is_empty()
            && !self.other
            && !self.policy
    }
}
use crate::ControlError;
use netio::NetlinkSocket;
use std::net::IpAddr;
use std::sync::mpsc::{Receiver, TryRecvError};

/// Applies one broadcast to `state`, noting in `delta` what it changed.
fn record(state: &mut KernelState, delta: &mut Delta, ev: &Event) {
    match state.change(ev) {
        Change::None => {}
        Change::Route(p) => {
            delta.routes.insert(p);
        }
        Change::Neighbour => delta.neighbours = true,
        Change::Link(i) => {
            delta.links.insert(i);
        }
        Change::Other => delta.other = true,
        Change::Policy => delta.policy = true,
    }
}

/// The two netlink sockets of the control thread.
#[derive(Debug)]
pub struct KernelLink {
    events: NetlinkSocket,
    requests: NetlinkSocket,
    seq: u32,
    buf: Vec<u8>,
    /// A full re-read after lost broadcasts, running on its own thread.
    resync: Option<Resync>,
    /// The event socket's drop counter when it was last read.
    drops_seen: u32,
    /// Re-reads started so far.
    resyncs: u64,
    /// A re-read is owed (one could not start, or failed): tried again at
    /// the next poll.
    resync_owed: bool,
    /// Socket and re-read errors survived so far, and the last one.
    errors: u64,
    last_error: Option<String>,
    /// Broadcasts of a kind fastfwd follows that it could not decode.
    rejected: u64,
    /// CPUs for background work (re-reads, audits): none of the workers'.
    background_cpus: Vec<usize>,
    /// Failures a unit test injects at the socket boundary.
    #[cfg(test)]
    faults: Faults,
}

/// How many of the next operations of each kind fail (unit tests only):
/// the error paths run exactly as they would after a real failure.
#[cfg(test)]
#[derive(Debug, Default)]
struct Faults {
    events_read: u32,
    drop_counter: u32,
    resync_start: u32,
    resync_dump: u32,
}

/// Takes one injected failure from `n`, if any is left.
#[cfg(test)]
fn injected(n: &mut u32) -> bool {
    let hit = *n > 0;
    *n = n.saturating_sub(1);
    hit
}

/// Keeps the calling thread, a background job's, on `cpus` (if any): its
/// system calls (a full table's dump, hundreds of MiB given back) can hold
/// a CPU for tens of milliseconds where the kernel is not preemptible, and
/// a worker's CPU also runs the kernel's receive work.
pub fn keep_off_worker_cpus(cpus: &[usize]) {
    if !cpus.is_empty() {
        // A subset of the CPUs the process may use: only a concurrent
        // change of its affinity refuses it, and then the thread stays
        // where it may run, which is still correct.
        let _ = netio::sys::os::set_affinity(0, cpus);
    }
}

/// A re-dump in progress: its result, and the broadcasts received since it
/// started (applied again on top of it, in order, so none is lost).
#[derive(Debug)]
struct Resync {
    result: Receiver<Result<KernelState, ControlError>>,
    since: Vec<Event>,
}

fn nl_err(what: &str, e: std::io::Error) -> ControlError {
    ControlError::Netlink(format!("{what}: {e}"))
}

/// A dump is retried this many times when the kernel says it was
/// interrupted by a change (NLM_F_DUMP_INTR) before giving up.
const DUMP_ATTEMPTS: usize = 16;
/// NLM_F_DUMP_INTR: the dump's view changed while it ran; dump again.
const NLM_F_DUMP_INTR: u16 = 0x10;

/// Reads the kernel's whole current state over `sock`, again from the start
/// whenever a part of it was interrupted by a change.
fn dump_all(
    sock: &NetlinkSocket,
    seq: &mut u32,
    buf: &mut [u8],
) -> Result<KernelState, ControlError> {
    for _ in 0..DUMP_ATTEMPTS {
        if let Some(state) = dump_once(sock, seq, buf)? {
            return Ok(state);
        }
    }
    Err(ControlError::Netlink(format!(
        "netlink dump: interrupted by changes {DUMP_ATTEMPTS} times in a row"
    )))
}

/// Reads the kernel's whole current state over a request socket of its
/// own (for a thread other than the control loop's).
pub fn dump_now() -> Result<KernelState, ControlError> {
    let sock = NetlinkSocket::new(&[]).map_err(|e| nl_err("netlink dump socket", e))?;
    let mut seq = 1;
    let mut buf = vec![0u8; 1 << 16];
    dump_all(&sock, &mut seq, &mut buf)
}

/// Requests per datagram in [`replace_routes`]: each datagram's
/// acknowledgements must fit the socket's receive buffer whatever fails.
const ROUTES_PER_DATAGRAM: usize = 512;

/// Adds or replaces static routes in the calling thread's namespace, over a
/// request socket of its own: many requests a datagram, only the last of
/// each acknowledged (the kernel handles a datagram's messages in order and
/// answers any refusal), so a full table costs the kernel's work and a few
/// thousand system calls instead of two per route. Stops at the first
/// datagram with a refusal and names its first refused prefix; the routes
/// before it are installed.
pub fn replace_routes(
    routes: impl IntoIterator<Item = (Cidr, netlink::KernelHop)>,
) -> Result<usize, ControlError> {
    let sock = NetlinkSocket::new(&[]).map_err(|e| nl_err("netlink route socket", e))?;
    let mut buf = vec![0u8; 1 << 16];
    let mut out = Vec::with_capacity(ROUTES_PER_DATAGRAM * 80);
    let mut batch: Vec<Cidr> = Vec::with_capacity(ROUTES_PER_DATAGRAM);
    let mut seq = 0u32;
    let mut installed = 0;
    let mut routes = routes.into_iter().peekable();
    while routes.peek().is_some() {
        out.clear();
        batch.clear();
        let first_seq = seq.wrapping_add(1);
        while batch.len() < ROUTES_PER_DATAGRAM {
            let Some((prefix, hop)) = routes.next() else {
                break;
            };
            seq = seq.wrapping_add(1);
            let last = batch.len() + 1 == ROUTES_PER_DATAGRAM || routes.peek().is_none();
            netlink::push_route_replace(&mut out, prefix, &[hop], seq, last);
            batch.push(prefix);
        }
        sock.send(&out)
            .map_err(|e| nl_err("netlink route request", e))?;
        let mut refused: Option<(u32, i32)> = None;
        'acks: loop {
            let n = match sock.recv(&mut buf, false) {
                Ok(Some(n)) => n,
                Ok(None) => continue,
                Err(e) => return Err(nl_err("netlink route acknowledgement", e)),
            };
            for (t, _, s, body) in netlink::messages(&buf[..n]) {
                let Some(Event::Ack(e)) = netlink::parse(t, 0, body) else {
                    continue;
                };
                if e < 0 && refused.is_none() {
                    refused = Some((s, e));
                }
                if s == seq {
                    break 'acks;
                }
            }
        }
        if let Some((s, e)) = refused {
            let at = s.wrapping_sub(first_seq) as usize;
            let prefix = batch.get(at).map_or("?".into(), |p| p.to_string());
            return Err(nl_err(
                &format!("route {prefix}"),
                std::io::Error::from_raw_os_error(-e),
            ));
        }
        installed += batch.len();
    }
    Ok(installed)
}

/// One dump of everything, or None if the kernel marked a part of it
/// interrupted (NLM_F_DUMP_INTR).
fn dump_once(
    sock: &NetlinkSocket,
    seq_counter: &mut u32,
    buf: &mut [u8],
) -> Result<Option<KernelState>, ControlError> {
    let mut fresh = KernelState::default();
    let mut interrupted = false;
    // Nexthop objects before the routes that name them.
    for ty in [
        msg::RTM_GETLINK,
        msg::RTM_GETADDR,
        msg::RTM_GETNEXTHOP,
        msg::RTM_GETROUTE,
        msg::RTM_GETRULE,
        msg::RTM_GETNEIGH,
    ] {
        *seq_counter = seq_counter.wrapping_add(1);
        let seq = *seq_counter;
        sock.send(&netlink::dump_request(ty, seq))
            .map_err(|e| nl_err("netlink dump request", e))?;
        'dump: loop {
            let n = match sock.recv(buf, false) {
                Ok(Some(n)) => n,
                Ok(None) => continue,
                Err(e) => return Err(nl_err("netlink dump", e)),
            };
            for (t, flags, s, body) in netlink::messages(&buf[..n]) {
                if s != seq {
                    continue;
                }
                interrupted |= flags & NLM_F_DUMP_INTR != 0;
                match netlink::parse(t, flags, body) {
                    Some(Event::Done) => break 'dump,
                    // A kernel without nexthop objects (before 5.3) has none to dump.
                    Some(Event::Ack(e)) if e < 0 && ty == msg::RTM_GETNEXTHOP => break 'dump,
                    Some(Event::Ack(e)) if e < 0 => {
                        return Err(nl_err(
                            "netlink dump",
                            std::io::Error::from_raw_os_error(-e),
                        ));
                    }
                    Some(ev) => {
                        fresh.apply(&ev);
                    }
                    None => {}
                }
            }
        }
    }
    Ok((!interrupted).then_some(fresh))
}

impl KernelLink {
    /// Opens the event socket (subscribed to links, neighbours, IPv4/IPv6
    /// addresses and routes) and the request socket.
    pub fn open() -> Result<KernelLink, ControlError> {
        let events =
            NetlinkSocket::new(&netlink::GROUPS).map_err(|e| nl_err("netlink event socket", e))?;
        let requests = NetlinkSocket::new(&[]).map_err(|e| nl_err("netlink request socket", e))?;
        let drops_seen = events
            .drops()
            .map_err(|e| nl_err("netlink event socket drop counter", e))?;
        Ok(KernelLink {
            events,
            requests,
            seq: 1,
            buf: vec![0u8; 1 << 16],
            resync: None,
            drops_seen,
            resyncs: 0,
            resync_owed: false,
            errors: 0,
            last_error: None,
            rejected: 0,
            background_cpus: Vec::new(),
            #[cfg(test)]
            faults: Faults::default(),
        })
    }

    /// Runs background work (re-reads, audits) on `cpus` only (empty: any).
    pub fn set_background_cpus(&mut self, cpus: Vec<usize>) {
        self.background_cpus = cpus;
    }

    /// The CPUs background work runs on (empty: any).
    pub fn background_cpus(&self) -> &[usize] {
        &self.background_cpus
    }

    /// The descriptor that becomes readable when the kernel broadcasts a change.
    pub fn events_fd(&self) -> i32 {
        self.events.fd()
    }

    /// Reads the kernel's whole current state into `state` (replacing it),
    /// dumping again if the kernel reports the dump interrupted by a change.
    pub fn dump(&mut self, state: &mut KernelState) -> Result<(), ControlError> {
        *state = dump_all(&self.requests, &mut self.seq, &mut self.buf)?;
        Ok(())
    }

    /// Sets the event socket's receive buffer (32 MiB by default): how many
    /// broadcasts can wait before the kernel drops them and a resync runs.
    pub fn set_event_buffer(&mut self, bytes: i32) -> Result<(), ControlError> {
        self.events
            .set_receive_buffer(bytes)
            .map_err(|e| nl_err("netlink event socket buffer", e))
    }

    /// Whether a re-read after lost broadcasts is still running.
    pub fn resyncing(&self) -> bool {
        self.resync.is_some()
    }

    /// How many re-reads lost broadcasts have started so far.
    pub fn resyncs(&self) -> u64 {
        self.resyncs
    }

    /// Applies every broadcast waiting on the event socket to `state` and
    /// adds what changed to `delta`. If the kernel had to drop broadcasts
    /// (the receive buffer overran), everything is read again on another
    /// thread while this one goes on; the result replaces `state` at a
    /// later call, with the broadcasts received since applied on top.
    ///
    /// Loss is known from the socket's drop counter, read once the queue is
    /// empty: the kernel reports ENOBUFS for the first overrun only, and
    /// drops every broadcast after it until the queue has been read empty.
    /// The re-read starts only then, so it covers every broadcast dropped
    /// before it; one dropped after it shows in the counter and starts it
    /// again.
    pub fn poll_events(
        &mut self,
        state: &mut KernelState,
        delta: &mut Delta,
    ) -> Result<(), ControlError> {
        // Every error here is survived: counted, named (`last_error`), and
        // answered with a full re-read (owed until one succeeds), since
        // broadcasts may have been lost with it. Forwarding goes on with
        // the tables as they are.
        let mut lost = false;
        loop {
            match self.read_events() {
                Ok(None) => break,
                Ok(Some(n)) => {
                    for (t, flags, _, body) in netlink::messages(&self.buf[..n]) {
                        match netlink::parse(t, flags, body) {
                            Some(ev) => {
                                record(state, delta, &ev);
                                if let Some(r) = self.resync.as_mut() {
                                    r.since.push(ev);
                                }
                            }
                            None if netlink::undecodable(t, body) => self.rejected += 1,
                            None => {}
                        }
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => lost = true,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.error(nl_err("netlink events", e));
                    lost = true;
                    break;
                }
            }
        }
        match self.event_drops() {
            Ok(drops) if drops != self.drops_seen => {
                self.drops_seen = drops;
                lost = true;
            }
            Ok(_) => {}
            Err(e) => {
                self.error(nl_err("netlink event socket drop counter", e));
                lost = true;
            }
        }
        if lost || (self.resync_owed && self.resync.is_none()) {
            match self.start_resync() {
                Ok(()) => self.resync_owed = false,
                Err(e) => {
                    self.error(e);
                    self.resync_owed = true;
                }
            }
        }
        if let Err(e) = self.finish_resync(state, delta) {
            self.error(e);
            self.resync_owed = true;
        }
        self.drain_acks();
        Ok(())
    }

    /// One datagram of broadcasts into `buf`, None when none is queued.
    fn read_events(&mut self) -> std::io::Result<Option<usize>> {
        #[cfg(test)]
        if injected(&mut self.faults.events_read) {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        self.events.recv(&mut self.buf, true)
    }

    /// The event socket's drop counter.
    fn event_drops(&mut self) -> std::io::Result<u32> {
        #[cfg(test)]
        if injected(&mut self.faults.drop_counter) {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        self.events.drops()
    }

    fn error(&mut self, e: ControlError) {
        self.errors += 1;
        self.last_error = Some(e.to_string());
    }

    /// Netlink errors survived so far (socket reads, the drop counter,
    /// re-reads that could not start or failed), and the last one.
    pub fn errors(&self) -> (u64, Option<&str>) {
        (self.errors, self.last_error.as_deref())
    }

    /// Netlink messages dropped: broadcasts of a kind fastfwd follows that
    /// it could not decode, and datagrams a sender other than the kernel
    /// multicast to the event socket (unicasts are refused by the kernel).
    pub fn rejected(&self) -> u64 {
        self.rejected + self.events.foreign()
    }

    /// Starts a full re-read on a thread of its own (or restarts the one
    /// running: broadcasts were lost again while it ran). Called with the
    /// event queue read empty, so the re-read is newer than every broadcast
    /// lost so far.
    fn start_resync(&mut self) -> Result<(), ControlError> {
        self.resyncs += 1;
        #[cfg(test)]
        if injected(&mut self.faults.resync_start) {
            return Err(nl_err(
                "netlink resync socket",
                std::io::Error::from_raw_os_error(libc::EMFILE),
            ));
        }
        #[cfg(test)]
        let dump_fails = injected(&mut self.faults.resync_dump);
        #[cfg(not(test))]
        let dump_fails = false;
        let sock = NetlinkSocket::new(&[]).map_err(|e| nl_err("netlink resync socket", e))?;
        let (tx, rx) = std::sync::mpsc::channel();
        let cpus = self.background_cpus.clone();
        std::thread::Builder::new()
            .name("fastfwd-resync".into())
            .spawn(move || {
                keep_off_worker_cpus(&cpus);
                let mut seq = 1;
                let mut buf = vec![0u8; 1 << 16];
                // A table still loading interrupts dumps; keep trying (the
                // events go on meanwhile) rather than fail the daemon.
                let mut attempts = 0usize;
                let result = loop {
                    if dump_fails {
                        break Err(nl_err(
                            "netlink dump",
                            std::io::Error::from_raw_os_error(libc::EIO),
                        ));
                    }
                    match dump_once(&sock, &mut seq, &mut buf) {
                        Ok(Some(state)) => break Ok(state),
                        Ok(None) => {
                            attempts += 1;
                            if attempts.is_multiple_of(DUMP_ATTEMPTS) {
                                std::thread::sleep(std::time::Duration::from_millis(100));
                            }
                        }
                        Err(e) => break Err(e),
                    }
                };
                let _ = tx.send(result);
            })
            .map_err(|e| nl_err("starting the netlink resync thread", e))?;
        self.resync = Some(Resync {
            result: rx,
            since: Vec::new(),
        });
        Ok(())
    }

    /// Puts in a finished re-read, if there is one.
    fn finish_resync(
        &mut self,
        state: &mut KernelState,
        delta: &mut Delta,
    ) -> Result<(), ControlError> {
        let Some(r) = self.resync.as_ref() else {
            return Ok(());
        };
        let fresh = match r.result.try_recv() {
            Err(TryRecvError::Empty) => return Ok(()),
            Ok(Ok(fresh)) => fresh,
            Ok(Err(e)) => {
                self.resync = None;
                return Err(e);
            }
            Err(TryRecvError::Disconnected) => {
                self.resync = None;
                return Err(ControlError::Netlink(
                    "netlink resync thread ended without a result".into(),
                ));
            }
        };
        let since = self.resync.take().map(|r| r.since).unwrap_or_default();
        *state = fresh;
        // Each broadcast sets or removes one object, so replaying those
        // received since the dump began, in order, gives the current state
        // whether or not the dump already saw them.
        for ev in &since {
            state.apply(ev);
        }
        delta.other = true;
        delta.policy = true;
        Ok(())
    }

    /// Asks the kernel to resolve `ip` on `ifindex` (ARP / ND); the answer
    /// arrives later as a neighbour broadcast. Does not wait.
    pub fn resolve(&mut self, ifindex: u32, ip: IpAddr) -> Result<(), ControlError> {
        self.seq = self.seq.wrapping_add(1);
        self.requests
            .send(&netlink::resolve_request(ifindex, ip, self.seq))
            .map_err(|e| nl_err("neighbour resolution request", e))
    }

    /// Discards acknowledgements of earlier resolution requests.
    fn drain_acks(&mut self) {
        while let Ok(Some(_)) = self.requests.recv(&mut self.buf, true) {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU a thread may run on, from /proc (its own view of itself).
    fn own_cpus_allowed() -> String {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_string()
    }

    #[test]
    fn a_background_thread_keeps_to_the_cpus_it_is_given() {
        let all = netio::sys::os::allowed_cpus().unwrap();
        let last = *all.last().unwrap();
        let moved = std::thread::spawn(move || {
            keep_off_worker_cpus(&[last]);
            own_cpus_allowed()
        })
        .join()
        .unwrap();
        assert_eq!(moved, last.to_string());
        // No CPUs given: the thread stays where it may run.
        let before = std::thread::spawn(own_cpus_allowed).join().unwrap();
        let stayed = std::thread::spawn(|| {
            keep_off_worker_cpus(&[]);
            own_cpus_allowed()
        })
        .join()
        .unwrap();
        assert_eq!(stayed, before);
    }

    /// Polls until no re-read is running (at most 10 s), returning what
    /// the polls changed.
    fn settle(link: &mut KernelLink, state: &mut KernelState) -> Delta {
        let mut delta = Delta::default();
        let t = std::time::Instant::now();
        loop {
            link.poll_events(state, &mut delta).unwrap();
            if !link.resyncing() && !link.resync_owed {
                return delta;
            }
            assert!(t.elapsed().as_secs() < 10, "a re-read never ended");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Every netlink failure the control thread can meet (a read of the
    /// event socket, its drop counter, a re-read that cannot start, one
    /// that fails) is survived: counted and named, and answered with a
    /// full re-read, owed until one succeeds, that puts the kernel's
    /// state back.
    #[test]
    fn netlink_failures_are_counted_and_answered_with_a_re_read() {
        let mut link = KernelLink::open().unwrap();
        let mut truth = KernelState::default();
        link.dump(&mut truth).unwrap();
        assert!(!truth.links.is_empty());
        let mut state = KernelState::default();
        type Inject = fn(&mut Faults);
        let faults: [(Inject, &str, u64); 4] = [
            (|f| f.events_read = 1, "netlink events", 1),
            (|f| f.drop_counter = 1, "drop counter", 1),
            // One re-read that cannot start, then one started at the next poll.
            (|f| f.resync_start = 1, "resync socket", 2),
            // One that fails, then one that succeeds.
            (|f| f.resync_dump = 1, "netlink dump", 2),
        ];
        for (k, (inject, named, reads)) in faults.into_iter().enumerate() {
            // Lose the state: only a re-read brings it back.
            state.links.clear();
            let (errors0, resyncs0) = (link.errors().0, link.resyncs());
            if k >= 2 {
                // These fail a re-read: make one happen.
                link.faults.events_read = 1;
            }
            inject(&mut link.faults);
            let delta = settle(&mut link, &mut state);
            let extra = u64::from(k >= 2);
            assert_eq!(link.errors().0, errors0 + 1 + extra, "case {k}");
            assert!(
                link.errors().1.unwrap().contains(named),
                "case {k}: {:?}",
                link.errors().1
            );
            assert_eq!(link.resyncs(), resyncs0 + reads, "case {k}");
            assert!(delta.other && delta.policy, "case {k}");
            assert_eq!(
                state.links.keys().collect::<Vec<_>>(),
                truth.links.keys().collect::<Vec<_>>(),
                "case {k}"
            );
        }
        // Nothing injected: nothing counted, nothing re-read.
        let (errors0, resyncs0) = (link.errors().0, link.resyncs());
        settle(&mut link, &mut state);
        assert_eq!((link.errors().0, link.resyncs()), (errors0, resyncs0));
    }
}
