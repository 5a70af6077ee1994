//! The device interface every backend implements.

use crate::frame::FrameBatch;

/// Which kernel interface a port uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// AF_XDP sockets fed by the XDP steering program.
    Xdp,
    /// AF_PACKET sockets with TPACKET_V3 rings.
    Packet,
    /// Frames in memory, for tests of the code above the ports.
    Memory,
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Xdp => "xdp",
            Backend::Packet => "packet",
            Backend::Memory => "memory",
        })
    }
}

/// Counters a port keeps itself (the pipeline counts the rest).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PortStats {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames handed to the kernel for sending.
    pub tx_packets: u64,
    /// Bytes handed to the kernel for sending.
    pub tx_bytes: u64,
    /// Frames that could not be queued for sending (ring full).
    pub tx_dropped: u64,
    /// Frames the kernel dropped before fastfwd saw them (ring full), when known.
    pub rx_dropped: u64,
    /// Frames received but larger than a batch slot (`frame::MAX_FRAME` bytes
    /// with their tag), dropped (GRO super-packets, jumbo frames).
    pub rx_oversize: u64,
}

/// One receive/transmit endpoint on one interface (one queue, one socket),
/// owned by one worker.
pub trait Port: Send {
    /// Appends received frames to `batch` until it is full or nothing is
    /// waiting; returns how many were added. Never blocks.
    fn rx_batch(&mut self, batch: &mut FrameBatch) -> usize;
    /// Queues one frame for sending in the port's TX buffer (sending the
    /// buffer when it fills); false when it could not be queued (counted
    /// as `tx_dropped`). Frames reach the kernel at the latest at the next
    /// [`flush`](Port::flush).
    fn tx(&mut self, frame: &[u8]) -> bool;
    /// Queues every frame of `batch`; returns how many were queued.
    fn tx_batch(&mut self, batch: &FrameBatch) -> usize {
        (0..batch.len())
            .filter(|&i| self.tx(batch.frame(i)))
            .count()
    }
    /// Pushes queued frames to the kernel and reclaims finished ones.
    fn flush(&mut self);
    /// Frames queued in the TX buffer and not yet handed to the kernel.
    fn tx_pending(&self) -> usize;
    /// The descriptor to poll for readability when idle.
    fn poll_fd(&self) -> i32;
    /// Every descriptor to poll (several for a [`QueueSet`]).
    fn poll_fds(&self) -> Vec<i32> {
        vec![self.poll_fd()]
    }
    /// Counters so far.
    fn stats(&self) -> PortStats;
    /// Which backend this is.
    fn backend(&self) -> Backend;
}

/// Several queues of one interface served by one worker, seen as one port:
/// receive takes from each queue in turn (so none starves), transmit goes
/// out through the first. Used when an interface has more RX queues than
/// there are workers, so every queue is served.
pub struct QueueSet {
    queues: Vec<Box<dyn Port>>,
    next: usize,
}

impl std::fmt::Debug for QueueSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueSet")
            .field("queues", &self.queues.len())
            .finish()
    }
}

impl QueueSet {
    /// A set of at least one queue.
    pub fn new(queues: Vec<Box<dyn Port>>) -> Option<QueueSet> {
        (!queues.is_empty()).then_some(QueueSet { queues, next: 0 })
    }

    /// Number of queues.
    pub fn len(&self) -> usize {
        self.queues.len()
    }

    /// Always false: a set has at least one queue.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }
}

impl Port for QueueSet {
    fn rx_batch(&mut self, batch: &mut FrameBatch) -> usize {
        let n = self.queues.len();
        let mut got = 0;
        for k in 0..n {
            let q = (self.next + k) % n;
            got += self.queues[q].rx_batch(batch);
            if batch.len() >= crate::frame::BATCH {
                self.next = (q + 1) % n;
                return got;
            }
        }
        self.next = (self.next + 1) % n;
        got
    }

    fn tx(&mut self, frame: &[u8]) -> bool {
        self.queues[0].tx(frame)
    }

    fn flush(&mut self) {
        for q in &mut self.queues {
            q.flush();
        }
    }

    fn tx_pending(&self) -> usize {
        self.queues.iter().map(|q| q.tx_pending()).sum()
    }

    fn poll_fd(&self) -> i32 {
        self.queues[0].poll_fd()
    }

    fn poll_fds(&self) -> Vec<i32> {
        self.queues.iter().flat_map(|q| q.poll_fds()).collect()
    }

    fn stats(&self) -> PortStats {
        let mut s = PortStats::default();
        for q in &self.queues {
            let t = q.stats();
            s.rx_packets += t.rx_packets;
            s.rx_bytes += t.rx_bytes;
            s.tx_packets += t.tx_packets;
            s.tx_bytes += t.tx_bytes;
            s.tx_dropped += t.tx_dropped;
            s.rx_dropped += t.rx_dropped;
            s.rx_oversize += t.rx_oversize;
        }
        s
    }

    fn backend(&self) -> Backend {
        self.queues[0].backend()
    }
}

/// A port that receives through one endpoint and sends through another:
/// an aggregated port under the XDP engine receives its exceptions on
/// AF_XDP sockets on the bond's members and sends through the bond
/// itself, so the bond's transmit hash picks the member as it does for
/// the kernel's own packets.
pub struct SplitPort {
    rx: Box<dyn Port>,
    tx: Box<dyn Port>,
}

impl std::fmt::Debug for SplitPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SplitPort")
            .field("rx", &self.rx.backend())
            .field("tx", &self.tx.backend())
            .finish()
    }
}

impl SplitPort {
    /// Receives through `rx` (whose own transmit is unused) and sends
    /// through `tx` (whose receive is never asked).
    pub fn new(rx: Box<dyn Port>, tx: Box<dyn Port>) -> SplitPort {
        SplitPort { rx, tx }
    }
}

impl Port for SplitPort {
    fn rx_batch(&mut self, batch: &mut FrameBatch) -> usize {
        self.rx.rx_batch(batch)
    }

    fn tx(&mut self, frame: &[u8]) -> bool {
        self.tx.tx(frame)
    }

    fn flush(&mut self) {
        // The receive side's flush gives its consumed frames back.
        self.rx.flush();
        self.tx.flush();
    }

    fn tx_pending(&self) -> usize {
        self.tx.tx_pending()
    }

    fn poll_fd(&self) -> i32 {
        self.rx.poll_fd()
    }

    fn poll_fds(&self) -> Vec<i32> {
        self.rx.poll_fds()
    }

    fn stats(&self) -> PortStats {
        let (r, t) = (self.rx.stats(), self.tx.stats());
        PortStats {
            rx_packets: r.rx_packets,
            rx_bytes: r.rx_bytes,
            rx_dropped: r.rx_dropped,
            rx_oversize: r.rx_oversize,
            tx_packets: t.tx_packets,
            tx_bytes: t.tx_bytes,
            tx_dropped: t.tx_dropped,
        }
    }

    fn backend(&self) -> Backend {
        self.rx.backend()
    }
}
