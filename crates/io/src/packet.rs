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
use crate::sys::packet::PacketSocket;

pub use crate::sys::packet::PacketConfig;

/// An AF_PACKET socket on one interface.
#[derive(Debug)]
pub struct PacketPort {
    sock: PacketSocket,
    stats: PortStats,
    txbuf: FrameBatch,
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
        let ok = self.txbuf.push(frame);
        if !ok {
            self.stats.tx_dropped += 1;
        }
        ok
    }

    fn flush(&mut self) {
        let n = self.txbuf.len();
        if n == 0 {
            return;
        }
        let mut frames: [&[u8]; crate::frame::BATCH] = [&[]; crate::frame::BATCH];
        for (i, f) in frames.iter_mut().enumerate().take(n) {
            *f = self.txbuf.frame(i);
        }
        let sent = self.sock.send_batch(&frames[..n]).unwrap_or(0);
        self.stats.tx_packets += sent as u64;
        self.stats.tx_bytes += frames[..sent].iter().map(|f| f.len() as u64).sum::<u64>();
        self.stats.tx_dropped += (n - sent) as u64;
        self.txbuf.clear();
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
