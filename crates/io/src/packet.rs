//! The AF_PACKET port: a TPACKET_V3 receive ring in a per-interface fanout
//! group, and `sendmmsg` with qdisc bypass for sending.
//!
//! AF_PACKET sees a copy of every frame while the kernel also processes the
//! original, so a router using it must have kernel forwarding disabled
//! (`net.ipv4.ip_forward=0`, `net.ipv6.conf.all.forwarding=0`) and must
//! not hand punted frames back to the kernel (it already has them).

use crate::IoError;
use crate::frame::FrameBatch;
use crate::port::{Backend, Port, PortStats};
use crate::sys::packet::{PacketSender, PacketSocket};

pub use crate::sys::packet::PacketConfig;

/// An AF_PACKET socket on one interface.
#[derive(Debug)]
pub struct PacketPort {
    sock: PacketSocket,
    stats: PortStats,
    txbuf: FrameBatch,
    /// Frames the kernel dropped at the full receive ring, summed from
    /// its counters (which it resets on each read) when stats are read.
    ring_drops: std::cell::Cell<u64>,
}

impl PacketPort {
    /// Opens a socket on `iface`. Sockets opened with the same
    /// `cfg.fanout_group` on one interface share its traffic by flow hash.
    pub fn open(iface: &str, cfg: PacketConfig) -> Result<PacketPort, IoError> {
        let ifindex = crate::if_index(iface)?;
        let sock = PacketSocket::new(ifindex, cfg)
            .map_err(|e| IoError::sys(format!("AF_PACKET socket on {iface}"), e))?;
        Ok(PacketPort {
            sock,
            stats: PortStats::default(),
            txbuf: FrameBatch::new(),
            ring_drops: std::cell::Cell::new(0),
        })
    }
}

impl Port for PacketPort {
    fn rx_batch(&mut self, batch: &mut FrameBatch) -> usize {
        let room = crate::frame::BATCH - batch.len();
        let mut bytes = 0u64;
        let mut oversize = 0u64;
        let n = self.sock.recv(room, |f| {
            bytes += f.bytes.len() as u64;
            let fits = match f.vlan {
                Some((tpid, tci)) => batch.push_tagged(f.bytes, tpid, tci),
                None => batch.push(f.bytes),
            };
            oversize += u64::from(!fits);
        });
        self.stats.rx_packets += n as u64;
        self.stats.rx_bytes += bytes;
        self.stats.rx_oversize += oversize;
        n - oversize as usize
    }

    fn tx(&mut self, frame: &[u8]) -> bool {
        if self.txbuf.is_full() {
            self.flush();
        }
        buffer(&mut self.txbuf, &mut self.stats, frame)
    }

    fn flush(&mut self) {
        send_buffered(&mut self.txbuf, &mut self.stats, |f| {
            self.sock.send_batch(f)
        });
    }

    fn tx_pending(&self) -> usize {
        self.txbuf.len()
    }

    fn poll_fd(&self) -> i32 {
        self.sock.fd()
    }

    fn stats(&self) -> PortStats {
        // A syscall, on the worker's publishing of its counters, not per
        // frame.
        let drops = self.ring_drops.get() + self.sock.take_ring_drops().unwrap_or(0);
        self.ring_drops.set(drops);
        PortStats {
            rx_dropped: drops,
            ..self.stats
        }
    }

    fn backend(&self) -> Backend {
        Backend::Packet
    }
}

/// A port that only sends, through an interface's own transmit path (see
/// [`PacketSender`]): the sending half of a [`crate::SplitPort`].
#[derive(Debug)]
pub struct PacketSendPort {
    sock: PacketSender,
    stats: PortStats,
    txbuf: FrameBatch,
}

impl PacketSendPort {
    /// Opens a sender on `iface`.
    pub fn open(iface: &str) -> Result<PacketSendPort, IoError> {
        let ifindex = crate::if_index(iface)?;
        let sock = PacketSender::new(ifindex)
            .map_err(|e| IoError::sys(format!("AF_PACKET sender on {iface}"), e))?;
        Ok(PacketSendPort {
            sock,
            stats: PortStats::default(),
            txbuf: FrameBatch::new(),
        })
    }
}

impl Port for PacketSendPort {
    fn rx_batch(&mut self, _batch: &mut FrameBatch) -> usize {
        0
    }

    fn tx(&mut self, frame: &[u8]) -> bool {
        if self.txbuf.is_full() {
            self.flush();
        }
        buffer(&mut self.txbuf, &mut self.stats, frame)
    }

    fn flush(&mut self) {
        send_buffered(&mut self.txbuf, &mut self.stats, |f| {
            self.sock.send_batch(f)
        });
    }

    fn tx_pending(&self) -> usize {
        self.txbuf.len()
    }

    fn poll_fd(&self) -> i32 {
        self.sock.fd()
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn backend(&self) -> Backend {
        Backend::Packet
    }
}

/// Sends the frames buffered in `txbuf` with `send`, counting what went
/// and what did not in `stats`, and empties the buffer.
fn send_buffered(
    txbuf: &mut FrameBatch,
    stats: &mut PortStats,
    send: impl FnOnce(&[&[u8]]) -> std::io::Result<usize>,
) {
    let n = txbuf.len();
    if n == 0 {
        return;
    }
    let mut frames: [&[u8]; crate::frame::BATCH] = [&[]; crate::frame::BATCH];
    for (i, f) in frames.iter_mut().enumerate().take(n) {
        *f = txbuf.frame(i);
    }
    let sent = send(&frames[..n]).unwrap_or(0);
    stats.tx_packets += sent as u64;
    stats.tx_bytes += frames[..sent].iter().map(|f| f.len() as u64).sum::<u64>();
    stats.tx_dropped += (n - sent) as u64;
    txbuf.clear();
}

/// Queues `frame` in `txbuf` (flushed by the caller when full), counting
/// it in `stats` as dropped when it does not fit.
fn buffer(txbuf: &mut FrameBatch, stats: &mut PortStats, frame: &[u8]) -> bool {
    let ok = txbuf.push(frame);
    if !ok {
        stats.tx_dropped += 1;
    }
    ok
}
