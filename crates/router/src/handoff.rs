//! Frames handed between workers, so that both directions of a flow meet
//! one worker's connection table.
//!
//! The firewall keeps its connection table per worker (no locks), and the
//! queue a frame arrives on does not follow the flow: a NIC's RSS hash is
//! keyed per direction, a veth delivers on the queue its sender sent from,
//! an AF_PACKET fanout hashes what the NIC hashed. When the rule set tracks
//! connections (`pipeline::Acl::keeps_flows`) and more than one worker
//! runs, every worker reads each received frame's owner
//! (`pipeline::flow_owner_hash`, the same for both directions), keeps its
//! own frames and writes the others into a ring to their owner, which runs
//! them through its pipeline as if it had received them on the same port.
//! Frames of no flow (ARP, malformed) stay where they arrived.
//!
//! Each ordered pair of workers has its own wait-free single-producer
//! ring of [`ring_bytes`] bytes, allocated at start; a record is a 6-byte
//! header (port, length, the XDP engine's connection-tracking hint) and
//! the frame. A frame that finds its ring full is dropped and counted
//! (`handoff_dropped` in `show workers`, `show drops` and the metrics).
//! A worker about to sleep in poll(2) says so; one that hands it frames
//! then signals its [`Wakeup`] (a system call per round at most, and only
//! toward a sleeping worker).

use netio::FrameBatch;
use netio::sys::os::Wakeup;
use rtrb::{Consumer, Producer, RingBuffer};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Record header: port (2 bytes), frame length (2), hint (1), padding (1).
const HEADER: usize = 6;
/// Bytes of all the rings together, at most (each ring at most
/// [`MAX_RING_BYTES`], at least [`MIN_RING_BYTES`]).
const ALL_RINGS_BYTES: usize = 64 << 20;
const MAX_RING_BYTES: usize = 1 << 20;
const MIN_RING_BYTES: usize = 64 << 10;

/// The bytes of each ring among `workers` workers.
pub fn ring_bytes(workers: usize) -> usize {
    let pairs = workers.saturating_mul(workers.saturating_sub(1)).max(1);
    (ALL_RINGS_BYTES / pairs).clamp(MIN_RING_BYTES, MAX_RING_BYTES)
}

/// What a worker's peers see of it: whether it sleeps, and how to wake it.
#[derive(Debug)]
struct Doorbell {
    asleep: AtomicBool,
    wakeup: Wakeup,
}

/// One worker's end of the hand-off mesh.
pub struct Handoff {
    me: usize,
    workers: usize,
    /// Rings to each peer, by worker (`None` at `me`).
    outboxes: Vec<Option<Producer<u8>>>,
    /// Rings from each peer.
    inboxes: Vec<Consumer<u8>>,
    /// The inbox read first next time (so no peer waits behind another).
    next_inbox: usize,
    doorbells: Arc<[Doorbell]>,
    /// Peers handed frames since the last [`Handoff::ring`] (a bit each).
    to_ring: u64,
}

impl std::fmt::Debug for Handoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handoff")
            .field("me", &self.me)
            .field("workers", &self.workers)
            .finish()
    }
}

/// The ends of a mesh among `workers` workers (index: worker), or `None`
/// with one worker or with more than 64.
pub fn mesh(workers: usize) -> std::io::Result<Option<Vec<Handoff>>> {
    if !(2..=64).contains(&workers) {
        return Ok(None);
    }
    let bytes = ring_bytes(workers);
    let doorbells: Arc<[Doorbell]> = (0..workers)
        .map(|_| {
            Ok(Doorbell {
                asleep: AtomicBool::new(false),
                wakeup: Wakeup::new()?,
            })
        })
        .collect::<std::io::Result<Vec<_>>>()?
        .into();
    let mut ends: Vec<Handoff> = (0..workers)
        .map(|me| Handoff {
            me,
            workers,
            outboxes: (0..workers).map(|_| None).collect(),
            inboxes: Vec::with_capacity(workers - 1),
            next_inbox: 0,
            doorbells: Arc::clone(&doorbells),
            to_ring: 0,
        })
        .collect();
    for from in 0..workers {
        for to in 0..workers {
            if from != to {
                let (p, c) = RingBuffer::new(bytes);
                ends[from].outboxes[to] = Some(p);
                ends[to].inboxes.push(c);
            }
        }
    }
    Ok(Some(ends))
}

impl Handoff {
    /// The worker that owns `frame`'s flow when it is another one.
    #[inline]
    pub fn owner_elsewhere(&self, frame: &[u8]) -> Option<usize> {
        let owner = pipeline::owner_of(pipeline::flow_owner_hash(frame)?, self.workers);
        (owner != self.me).then_some(owner)
    }

    /// Writes `frame`, received on `port`, into the ring to worker `to`;
    /// false if it is full (or `to` is no peer).
    pub fn send(&mut self, to: usize, port: u16, ct_hint: u8, frame: &[u8]) -> bool {
        let Some(Some(out)) = self.outboxes.get_mut(to) else {
            return false;
        };
        let Ok(len) = u16::try_from(frame.len()) else {
            return false;
        };
        let Ok(mut chunk) = out.write_chunk(HEADER + frame.len()) else {
            return false;
        };
        let mut header = [0u8; HEADER];
        header[..2].copy_from_slice(&port.to_ne_bytes());
        header[2..4].copy_from_slice(&len.to_ne_bytes());
        header[4] = ct_hint;
        let (a, b) = chunk.as_mut_slices();
        copy_into(a, b, &[&header, frame]);
        chunk.commit_all();
        self.to_ring |= 1 << to;
        true
    }

    /// Wakes the peers handed frames since the last call that are asleep
    /// (call once a round, after sending).
    pub fn ring(&mut self) {
        if self.to_ring == 0 {
            return;
        }
        // Pairs with the fence in `may_sleep`: either the peer sees the
        // frames before it sleeps, or this sees it asleep.
        std::sync::atomic::fence(Ordering::SeqCst);
        for (w, bell) in self.doorbells.iter().enumerate() {
            if self.to_ring & (1 << w) != 0 && bell.asleep.load(Ordering::SeqCst) {
                bell.wakeup.signal();
            }
        }
        self.to_ring = 0;
    }

    /// Reads frames peers handed over into `batch` (emptied first), all
    /// received on one port, which it returns; `None` when none wait.
    pub fn receive(&mut self, batch: &mut FrameBatch) -> Option<u16> {
        batch.clear();
        let n = self.inboxes.len();
        for k in 0..n {
            let i = (self.next_inbox + k) % n;
            let inbox = &mut self.inboxes[i];
            let Some((port, _, _)) = peek_header(inbox) else {
                continue;
            };
            while !batch.is_full() {
                match peek_header(inbox) {
                    Some((p, len, hint)) if p == port => {
                        let Ok(chunk) = inbox.read_chunk(HEADER + len) else {
                            break;
                        };
                        let (a, b) = chunk.as_slices();
                        let (head, tail) = if a.len() >= HEADER {
                            (&a[HEADER..], b)
                        } else {
                            (&b[HEADER - a.len()..], &[][..])
                        };
                        batch.push_parts(head, tail, hint);
                        chunk.commit_all();
                    }
                    _ => break,
                }
            }
            self.next_inbox = (i + 1) % n;
            return Some(port);
        }
        None
    }

    /// Says this worker is about to sleep in poll(2); false (and awake)
    /// when frames wait for it already, so it must not.
    pub fn may_sleep(&self) -> bool {
        let bell = &self.doorbells[self.me];
        bell.asleep.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.inboxes.iter().any(|c| !c.is_empty()) {
            bell.asleep.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Says this worker is awake again (after poll(2) returned).
    pub fn woke(&self) {
        let bell = &self.doorbells[self.me];
        bell.asleep.store(false, Ordering::SeqCst);
        bell.wakeup.clear();
    }

    /// The descriptor its peers make readable to wake it.
    pub fn wakeup_fd(&self) -> i32 {
        self.doorbells[self.me].wakeup.fd()
    }
}

/// The header of the next record in `inbox`: (port, length, hint).
fn peek_header(inbox: &mut Consumer<u8>) -> Option<(u16, usize, u8)> {
    let chunk = inbox.read_chunk(HEADER).ok()?;
    let (a, b) = chunk.as_slices();
    let mut h = [0u8; HEADER];
    h[..a.len()].copy_from_slice(a);
    h[a.len()..].copy_from_slice(b);
    // Not committed: the header stays for the read proper.
    Some((
        u16::from_ne_bytes([h[0], h[1]]),
        usize::from(u16::from_ne_bytes([h[2], h[3]])),
        h[4],
    ))
}

/// Copies `parts`, one after another, into `a` then `b` (a ring's two
/// free regions, whose lengths add up to the parts').
fn copy_into(a: &mut [u8], b: &mut [u8], parts: &[&[u8]]) {
    let mut at = 0;
    for part in parts {
        let mut rest = *part;
        if at < a.len() {
            let n = rest.len().min(a.len() - at);
            a[at..at + n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            at += n;
        }
        if !rest.is_empty() {
            let off = at - a.len();
            b[off..off + rest.len()].copy_from_slice(rest);
            at += rest.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp(src: u8, dst: u8, sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
        f.extend_from_slice(&[0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&[10, 0, 0, src, 10, 0, 0, dst]);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&[0, 8, 0, 0]);
        f
    }

    #[test]
    fn one_worker_needs_no_mesh() {
        assert!(mesh(1).unwrap().is_none());
        assert!(mesh(65).unwrap().is_none());
    }

    #[test]
    fn ring_sizes_are_bounded() {
        assert_eq!(ring_bytes(2), MAX_RING_BYTES);
        assert_eq!(ring_bytes(64), MIN_RING_BYTES);
        assert!(ring_bytes(16) * 16 * 15 <= ALL_RINGS_BYTES);
    }

    /// Each direction of 64 flows, received by either of two workers, ends
    /// at one owner with its port and hint; frames in a full ring are
    /// refused rather than overwritten.
    #[test]
    fn both_directions_reach_one_owner() {
        let mut ends = mesh(2).unwrap().unwrap();
        let mut owners = std::collections::HashMap::new();
        for sp in 0..64u16 {
            let there = udp(1, 2, 40000 + sp, 53);
            let back = udp(2, 1, 53, 40000 + sp);
            // `there` received by worker 0, `back` by worker 1.
            let o0 = ends[0].owner_elsewhere(&there).unwrap_or(0);
            let o1 = ends[1].owner_elsewhere(&back).unwrap_or(1);
            assert_eq!(o0, o1, "flow {sp}");
            owners.insert(sp, o0);
            if o0 == 1 {
                assert!(ends[0].send(1, 3, 2, &there));
            } else {
                assert!(ends[1].send(0, 4, 0, &back));
            }
        }
        assert!(owners.values().any(|&o| o == 0) && owners.values().any(|&o| o == 1));
        let mut batch = FrameBatch::new();
        let mut got = [0usize; 2];
        for w in 0..2 {
            while let Some(port) = ends[w].receive(&mut batch) {
                for i in 0..batch.len() {
                    let f = batch.frame(i);
                    let sp = if w == 1 {
                        assert_eq!((port, batch.ct_hint(i)), (3, 2));
                        u16::from_be_bytes([f[34], f[35]])
                    } else {
                        assert_eq!((port, batch.ct_hint(i)), (4, 0));
                        u16::from_be_bytes([f[36], f[37]])
                    };
                    assert_eq!(owners[&(sp - 40000)], w);
                    got[w] += 1;
                }
            }
        }
        assert_eq!(got[0] + got[1], 64);
        // Full: refused, counted by the caller.
        let big = vec![0u8; 1500];
        let fits = (0..).take_while(|_| ends[0].send(1, 0, 0, &big)).count();
        assert_eq!(fits, ring_bytes(2) / (HEADER + 1500));
        assert!(!ends[0].send(1, 0, 0, &big));
    }

    /// Records that wrap around the ring's end come back whole.
    #[test]
    fn wrapped_records_come_back_whole() {
        let mut ends = mesh(2).unwrap().unwrap();
        let mut batch = FrameBatch::new();
        for round in 0..2000u32 {
            let len = 60 + (round as usize * 7) % 1400;
            let frame: Vec<u8> = (0..len).map(|i| (i as u32 + round) as u8).collect();
            assert!(ends[0].send(1, 9, 1, &frame));
            assert_eq!(ends[1].receive(&mut batch), Some(9));
            assert_eq!(batch.len(), 1);
            assert_eq!(batch.frame(0), &frame[..]);
        }
        assert_eq!(ends[1].receive(&mut batch), None);
    }

    /// A worker that has said it sleeps is woken by the frames handed to
    /// it; one with frames waiting may not sleep.
    #[test]
    fn a_sleeping_owner_is_woken() {
        let mut ends = mesh(2).unwrap().unwrap();
        let fd = ends[1].wakeup_fd();
        assert!(ends[1].may_sleep());
        assert_eq!(netio::sys::os::poll_readable(&[fd], 0).unwrap(), 0);
        assert!(ends[0].send(1, 0, 0, &udp(1, 2, 1, 2)));
        ends[0].ring();
        assert_eq!(netio::sys::os::poll_readable(&[fd], 0).unwrap(), 1);
        ends[1].woke();
        assert_eq!(netio::sys::os::poll_readable(&[fd], 0).unwrap(), 0);
        assert!(!ends[1].may_sleep());
    }
}
