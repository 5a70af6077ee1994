//! A port in memory: frames queued by a test come in, frames the worker
//! sends are collected. For driving [`WorkerLoop`](crate::worker::WorkerLoop)
//! without sockets.

use netio::{Backend, FrameBatch, Port, PortStats};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// The test's side of a [`MemoryPort`]: what to receive, what was sent.
#[derive(Debug, Default)]
pub struct MemoryWire {
    /// Frames the port will receive, in order.
    pub incoming: VecDeque<Vec<u8>>,
    /// Frames the port sent (flushed), in order.
    pub sent: Vec<Vec<u8>>,
}

/// A [`Port`] over a [`MemoryWire`] shared with the test.
#[derive(Debug)]
pub struct MemoryPort {
    wire: Arc<Mutex<MemoryWire>>,
    pending: Vec<Vec<u8>>,
    /// Most frames the TX buffer holds before sending.
    tx_capacity: usize,
    stats: PortStats,
}

impl MemoryPort {
    /// A port and the test's handle on its wire.
    pub fn new() -> (MemoryPort, Arc<Mutex<MemoryWire>>) {
        let wire = Arc::new(Mutex::new(MemoryWire::default()));
        let port = MemoryPort {
            wire: Arc::clone(&wire),
            pending: Vec::new(),
            tx_capacity: netio::BATCH,
            stats: PortStats::default(),
        };
        (port, wire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryWire> {
        // A test that panicked while holding the lock has failed already.
        self.wire.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Port for MemoryPort {
    fn rx_batch(&mut self, batch: &mut FrameBatch) -> usize {
        let mut wire = self.wire.lock().unwrap_or_else(|e| e.into_inner());
        let mut n = 0;
        while !batch.is_full() {
            let Some(f) = wire.incoming.pop_front() else {
                break;
            };
            if batch.push(&f) {
                n += 1;
                self.stats.rx_packets += 1;
                self.stats.rx_bytes += f.len() as u64;
            } else {
                self.stats.rx_oversize += 1;
            }
        }
        n
    }

    fn tx(&mut self, frame: &[u8]) -> bool {
        if self.pending.len() == self.tx_capacity {
            self.flush();
        }
        self.pending.push(frame.to_vec());
        true
    }

    fn flush(&mut self) {
        let frames = std::mem::take(&mut self.pending);
        for f in &frames {
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += f.len() as u64;
        }
        self.lock().sent.extend(frames);
    }

    fn tx_pending(&self) -> usize {
        self.pending.len()
    }

    fn poll_fd(&self) -> i32 {
        // poll(2) ignores negative descriptors.
        -1
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn backend(&self) -> Backend {
        Backend::Memory
    }
}
