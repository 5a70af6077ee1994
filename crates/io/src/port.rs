//! The device interface every backend implements.

use crate::frame::FrameBatch;

/// Which kernel interface a port uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// AF_XDP sockets fed by the XDP steering program.
    Xdp,
    /// AF_PACKET sockets with TPACKET_V3 rings.
    Packet,
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Xdp => "xdp",
            Backend::Packet => "packet",
        })
    }
}

/// Counters a port keeps itself (the pipeline counts the rest).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
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
    /// Counters so far.
    fn stats(&self) -> PortStats;
    /// Which backend this is.
    fn backend(&self) -> Backend;
}
