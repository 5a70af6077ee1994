//! pcap capture of the fast path (`fastfwd capture`): the worker copies
//! the frames it sees at one point (received, transmitted, dropped,
//! punted) that match a filter into a bounded buffer of its own during a
//! round, and moves them at the end of the round into its slot of
//! [`crate::worker::Shared::captures`] if the lock is free (`try_lock`:
//! the worker never waits for the control loop); the control loop empties
//! the slots on `capture_read`. Both buffers are allocated when the
//! capture starts; a frame that finds them full is counted as lost.

use pipeline::{DropReason, PuntReason};
use wire::filter::Filter;

/// Where frames are copied from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapturePoint {
    /// As received, before the pipeline.
    Rx,
    /// As transmitted (forwarded frames rewritten, generated packets).
    Tx,
    /// Dropped frames, with the reason.
    Drop,
    /// Frames for the host, with the reason.
    Punt,
}

impl CapturePoint {
    /// The point named `rx`, `tx`, `drop` or `punt`.
    pub fn parse(s: &str) -> Option<CapturePoint> {
        Some(match s {
            "rx" => CapturePoint::Rx,
            "tx" => CapturePoint::Tx,
            "drop" => CapturePoint::Drop,
            "punt" => CapturePoint::Punt,
            _ => return None,
        })
    }
}

/// Most frames a capture copies per worker.
pub const MAX_CAPTURE: usize = 100_000;
/// Frames a worker's own buffer holds within a round.
pub const ROUND_FRAMES: usize = 256;

/// What to capture (`capture start`).
#[derive(Debug, Clone)]
pub struct CaptureRequest {
    pub point: CapturePoint,
    /// Frames per worker (0: no capture).
    pub count: usize,
    /// Only this port.
    pub port: Option<u16>,
    /// Only frames that match.
    pub filter: Option<Filter>,
}

/// Why a frame was dropped or punted, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    None,
    Drop(DropReason),
    Punt(PuntReason),
}

impl Reason {
    /// The reason's name (`show drops`).
    pub fn name(self) -> Option<&'static str> {
        match self {
            Reason::None => None,
            Reason::Drop(d) => Some(d.name()),
            Reason::Punt(p) => Some(p.name()),
        }
    }
}

/// One copied frame: where it lies in `CaptureBuffer::bytes`.
#[derive(Debug, Clone, Copy)]
pub struct CapturedAt {
    pub port: u16,
    /// The worker's round clock (CLOCK_MONOTONIC ns).
    pub time_ns: u64,
    pub reason: Reason,
    start: usize,
    len: usize,
}

/// Frames back to back with their records, bounded: pushing never grows
/// it past the room it was made with.
#[derive(Debug, Default)]
pub struct CaptureBuffer {
    bytes: Vec<u8>,
    frames: Vec<CapturedAt>,
    /// Frames refused for want of room.
    pub lost: u64,
}

impl CaptureBuffer {
    /// Room for `frames` frames of up to `netio::MAX_FRAME` bytes.
    pub fn with_room(frames: usize) -> CaptureBuffer {
        CaptureBuffer {
            bytes: Vec::with_capacity(frames * netio::MAX_FRAME),
            frames: Vec::with_capacity(frames),
            lost: 0,
        }
    }

    /// Whether no frame is held.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Copies `data` in if there is room (else counts it lost).
    pub fn push(&mut self, port: u16, time_ns: u64, data: &[u8], reason: Reason) -> bool {
        if self.frames.len() == self.frames.capacity()
            || self.bytes.len() + data.len() > self.bytes.capacity()
        {
            self.lost += 1;
            return false;
        }
        let start = self.bytes.len();
        self.bytes.extend_from_slice(data);
        self.frames.push(CapturedAt {
            port,
            time_ns,
            reason,
            start,
            len: data.len(),
        });
        true
    }

    /// Moves every frame that fits into `to` (those that do not are lost),
    /// leaving this buffer empty.
    pub fn move_into(&mut self, to: &mut CaptureBuffer) {
        for f in &self.frames {
            let data = &self.bytes[f.start..f.start + f.len];
            to.push(f.port, f.time_ns, data, f.reason);
        }
        to.lost += std::mem::take(&mut self.lost);
        self.frames.clear();
        self.bytes.clear();
    }

    /// The frames held, with their bytes.
    pub fn frames(&self) -> impl Iterator<Item = (&CapturedAt, &[u8])> + '_ {
        self.frames
            .iter()
            .map(|f| (f, &self.bytes[f.start..f.start + f.len]))
    }

    /// Forgets every frame (the room stays).
    pub fn clear(&mut self) {
        self.frames.clear();
        self.bytes.clear();
        self.lost = 0;
    }
}

/// A worker's capture in progress.
#[derive(Debug)]
pub struct WorkerCapture {
    pub point: CapturePoint,
    port: Option<u16>,
    filter: Option<Filter>,
    remaining: usize,
    pub buffer: CaptureBuffer,
}

impl WorkerCapture {
    /// The worker's side of `req` (its round buffer allocated now).
    pub fn new(req: &CaptureRequest) -> WorkerCapture {
        WorkerCapture {
            point: req.point,
            port: req.port,
            filter: req.filter.clone(),
            remaining: req.count.min(MAX_CAPTURE),
            buffer: CaptureBuffer::with_room(ROUND_FRAMES.min(req.count.max(1))),
        }
    }

    /// Frames still to copy.
    pub fn remaining(&self) -> usize {
        self.remaining
    }

    /// Copies `data` seen on `port` if it is one of the frames asked for.
    pub fn offer(&mut self, port: u16, now: u64, data: &[u8], reason: Reason) {
        if self.remaining == 0
            || self.port.is_some_and(|p| p != port)
            || self.filter.as_ref().is_some_and(|f| !f.matches(data))
        {
            return;
        }
        self.remaining -= 1;
        self.buffer.push(port, now, data, reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_stay_within_their_room_and_count_the_rest() {
        let mut b = CaptureBuffer::with_room(2);
        assert!(b.push(0, 1, &[1, 2, 3], Reason::None));
        assert!(b.push(1, 2, &[4], Reason::Drop(DropReason::NoRoute)));
        assert!(!b.push(1, 3, &[5], Reason::None));
        assert_eq!(b.lost, 1);
        let mut to = CaptureBuffer::with_room(1);
        b.move_into(&mut to);
        assert!(b.is_empty());
        assert_eq!(to.lost, 2, "one lost before, one that did not fit");
        let got: Vec<(u16, Vec<u8>)> = to.frames().map(|(f, d)| (f.port, d.to_vec())).collect();
        assert_eq!(got, vec![(0, vec![1, 2, 3])]);
    }

    #[test]
    fn a_worker_copies_what_was_asked_and_no_more() {
        let mut c = WorkerCapture::new(&CaptureRequest {
            point: CapturePoint::Rx,
            count: 2,
            port: Some(1),
            filter: Some(Filter::parse("arp").unwrap()),
        });
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.resize(42, 0);
        let mut ip = arp.clone();
        ip[12..14].copy_from_slice(&[0x08, 0x00]);
        c.offer(0, 0, &arp, Reason::None); // another port
        c.offer(1, 0, &ip, Reason::None); // not ARP
        for t in 0..5 {
            c.offer(1, t, &arp, Reason::None);
        }
        assert_eq!(c.remaining(), 0);
        assert_eq!(c.buffer.frames().count(), 2);
    }
}
