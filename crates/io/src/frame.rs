//! Fixed-capacity batches of frames: one allocation when a worker starts,
//! none per packet.

use pipeline::Frame;

/// Bytes reserved for each frame slot (headroom, a 1518-byte frame plus
/// tags the pipeline may add).
pub const FRAME_CAP: usize = 2048;
/// Bytes kept free before each received frame so the pipeline can push
/// VLAN tags in place (at least `pipeline::HEADROOM`).
pub const HEADROOM: usize = 64;
/// The largest frame a slot takes.
pub const MAX_FRAME: usize = FRAME_CAP - HEADROOM;
/// Frames per batch.
pub const BATCH: usize = 64;
/// Bytes from one slot's start to the next: [`FRAME_CAP`] and one cache
/// line, so the frames of a batch start in different L1 cache sets
/// (`pipeline::BATCH_SLOT_STRIDE`).
const SLOT_STRIDE: usize = pipeline::BATCH_SLOT_STRIDE;
const _: () = assert!(SLOT_STRIDE >= FRAME_CAP);

/// Up to [`BATCH`] frames, each in its own [`FRAME_CAP`]-byte slot,
/// starting [`HEADROOM`] bytes in (the pipeline may move the start); the
/// slots lie a cache line apart beyond their size (`SLOT_STRIDE`).
pub struct FrameBatch {
    buf: Box<[u8]>,
    starts: [u16; BATCH],
    lens: [u16; BATCH],
    /// The XDP engine's connection-tracking hint of each frame.
    ct_hints: [u8; BATCH],
    count: usize,
}

impl std::fmt::Debug for FrameBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameBatch")
            .field("count", &self.count)
            .finish()
    }
}

impl Default for FrameBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameBatch {
    /// An empty batch.
    pub fn new() -> FrameBatch {
        FrameBatch {
            buf: vec![0u8; SLOT_STRIDE * BATCH].into_boxed_slice(),
            starts: [HEADROOM as u16; BATCH],
            lens: [0; BATCH],
            ct_hints: [0; BATCH],
            count: 0,
        }
    }

    /// Frames held.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether no frame is held.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether no more frames fit.
    pub fn is_full(&self) -> bool {
        self.count == BATCH
    }

    /// Forgets every frame (the memory stays).
    pub fn clear(&mut self) {
        self.count = 0;
    }

    /// Appends a copy of `bytes`; false if the batch is full or the frame
    /// is larger than a slot.
    pub fn push(&mut self, bytes: &[u8]) -> bool {
        self.push_hinted(bytes, 0)
    }

    /// [`FrameBatch::push`] with the XDP engine's connection-tracking hint
    /// for the frame (`pipeline::Frame::ct_hint`).
    pub fn push_hinted(&mut self, bytes: &[u8], ct_hint: u8) -> bool {
        if self.count == BATCH || bytes.len() > MAX_FRAME {
            return false;
        }
        let at = self.count * SLOT_STRIDE + HEADROOM;
        self.buf[at..at + bytes.len()].copy_from_slice(bytes);
        self.starts[self.count] = HEADROOM as u16;
        self.lens[self.count] = bytes.len() as u16;
        self.ct_hints[self.count] = ct_hint;
        self.count += 1;
        true
    }

    /// [`FrameBatch::push_hinted`] of a frame given in two parts (read
    /// from a ring where it wraps).
    pub fn push_parts(&mut self, head: &[u8], tail: &[u8], ct_hint: u8) -> bool {
        let len = head.len() + tail.len();
        if self.count == BATCH || len > MAX_FRAME {
            return false;
        }
        let at = self.count * SLOT_STRIDE + HEADROOM;
        self.buf[at..at + head.len()].copy_from_slice(head);
        self.buf[at + head.len()..at + len].copy_from_slice(tail);
        self.starts[self.count] = HEADROOM as u16;
        self.lens[self.count] = len as u16;
        self.ct_hints[self.count] = ct_hint;
        self.count += 1;
        true
    }

    /// Keeps the frames for which `keep(bytes, ct_hint)` is true, in their
    /// order (a kept frame moves down to the first free slot).
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], u8) -> bool) {
        let mut kept = 0;
        for i in 0..self.count {
            if !keep(self.frame(i), self.ct_hints[i]) {
                continue;
            }
            if kept != i {
                let from = i * SLOT_STRIDE + self.starts[i] as usize;
                let len = self.lens[i] as usize;
                let to = kept * SLOT_STRIDE + HEADROOM;
                self.buf.copy_within(from..from + len, to);
                self.starts[kept] = HEADROOM as u16;
                self.lens[kept] = self.lens[i];
                self.ct_hints[kept] = self.ct_hints[i];
            }
            kept += 1;
        }
        self.count = kept;
    }

    /// The connection-tracking hint of frame `i` (0: none).
    pub fn ct_hint(&self, i: usize) -> u8 {
        if i < self.count { self.ct_hints[i] } else { 0 }
    }

    /// Appends `bytes` with an 802.1Q tag (`tpid`, `tci`) inserted after the
    /// MAC addresses (AF_PACKET hands over tags the device stripped).
    pub fn push_tagged(&mut self, bytes: &[u8], tpid: u16, tci: u16) -> bool {
        if self.count == BATCH || bytes.len() < 12 || bytes.len() + 4 > MAX_FRAME {
            return false;
        }
        let at = self.count * SLOT_STRIDE + HEADROOM;
        let slot = &mut self.buf[at..at + bytes.len() + 4];
        slot[..12].copy_from_slice(&bytes[..12]);
        slot[12..14].copy_from_slice(&tpid.to_be_bytes());
        slot[14..16].copy_from_slice(&tci.to_be_bytes());
        slot[16..].copy_from_slice(&bytes[12..]);
        self.starts[self.count] = HEADROOM as u16;
        self.lens[self.count] = (bytes.len() + 4) as u16;
        self.ct_hints[self.count] = 0;
        self.count += 1;
        true
    }

    /// The bytes of frame `i` (empty if out of range).
    pub fn frame(&self, i: usize) -> &[u8] {
        if i >= self.count {
            return &[];
        }
        let at = i * SLOT_STRIDE + self.starts[i] as usize;
        self.buf.get(at..at + self.lens[i] as usize).unwrap_or(&[])
    }

    /// Runs `f` over the frames as pipeline [`Frame`]s (rewritable in
    /// place, windows movable), then keeps the windows `f` left.
    pub fn with_frames<R>(&mut self, f: impl FnOnce(&mut [Frame<'_>]) -> R) -> R {
        let n = self.count;
        let mut slots = self.buf.chunks_exact_mut(SLOT_STRIDE);
        let mut frames: [Frame<'_>; BATCH] = std::array::from_fn(|i| match slots.next() {
            // The frame may use its slot, not the line that spaces slots.
            Some(slot) => Frame::new(
                &mut slot[..FRAME_CAP],
                self.starts[i] as usize,
                self.lens[i] as usize,
            )
            .with_ct_hint(self.ct_hints[i]),
            None => Frame::new(&mut [], 0, 0),
        });
        let r = f(&mut frames[..n]);
        for (i, fr) in frames[..n].iter().enumerate() {
            self.starts[i] = fr.start() as u16;
            self.lens[i] = fr.len() as u16;
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_and_read_back() {
        let mut b = FrameBatch::new();
        assert!(b.push(&[1, 2, 3]));
        assert!(b.push(&[4; 100]));
        assert_eq!(b.len(), 2);
        assert_eq!(b.frame(0), &[1, 2, 3]);
        assert_eq!(b.frame(1), &[4; 100][..]);
        assert_eq!(b.frame(2), &[] as &[u8]);
        assert!(!b.push(&[0; FRAME_CAP + 1]));
    }

    #[test]
    fn fills_up_and_clears() {
        let mut b = FrameBatch::new();
        for i in 0..BATCH {
            assert!(b.push(&[i as u8]));
        }
        assert!(b.is_full());
        assert!(!b.push(&[0]));
        b.clear();
        assert!(b.is_empty());
    }

    /// Each frame of a full batch starts in an L1 data cache set of its
    /// own (64-byte lines, 64 sets: address bits 6-11), and a frame as
    /// large as a slot allows ends before the next slot.
    #[test]
    fn slots_start_in_distinct_cache_sets() {
        let mut b = FrameBatch::new();
        let base = b.buf.as_ptr() as usize;
        let sets: std::collections::HashSet<usize> = (0..BATCH)
            .map(|i| ((base + i * SLOT_STRIDE + HEADROOM) / 64) % 64)
            .collect();
        assert_eq!(sets.len(), BATCH);
        for i in 0..BATCH {
            assert!(b.push(&[i as u8; MAX_FRAME]));
        }
        for i in 0..BATCH {
            assert_eq!(b.frame(i), &[i as u8; MAX_FRAME][..]);
        }
        b.with_frames(|frames| {
            for f in frames.iter() {
                assert_eq!(f.buffer().len(), FRAME_CAP);
            }
        });
    }

    #[test]
    fn retain_keeps_the_chosen_frames_in_order() {
        let mut b = FrameBatch::new();
        for i in 0..10u8 {
            assert!(b.push_hinted(&[i; 30], i));
        }
        b.retain(|f, hint| {
            assert_eq!(f[0], hint);
            f[0] % 3 == 0
        });
        assert_eq!(b.len(), 4);
        for (k, i) in [0u8, 3, 6, 9].into_iter().enumerate() {
            assert_eq!(b.frame(k), &[i; 30][..]);
            assert_eq!(b.ct_hint(k), i);
        }
        b.retain(|_, _| false);
        assert!(b.is_empty());
    }

    #[test]
    fn a_frame_in_two_parts_is_one_frame() {
        let mut b = FrameBatch::new();
        assert!(b.push_parts(&[1, 2], &[3], 2));
        assert_eq!(b.frame(0), &[1, 2, 3]);
        assert_eq!(b.ct_hint(0), 2);
        assert!(!b.push_parts(&[0; MAX_FRAME], &[0], 0));
    }

    #[test]
    fn tag_goes_after_the_macs() {
        let mut b = FrameBatch::new();
        let mut frame = vec![0xaa; 12];
        frame.extend_from_slice(&[0x08, 0x00, 0x45]);
        assert!(b.push_tagged(&frame, 0x8100, 0x0064));
        assert_eq!(
            &b.frame(0)[12..],
            &[0x81, 0x00, 0x00, 0x64, 0x08, 0x00, 0x45]
        );
        assert!(!b.push_tagged(&[0; 5], 0x8100, 1));
    }

    #[test]
    fn pipeline_windows_are_kept() {
        let mut b = FrameBatch::new();
        b.push(&[9; 10]);
        b.push(&[8; 10]);
        let seen = b.with_frames(|frames| {
            assert_eq!(frames.len(), 2);
            assert_eq!(frames[0].start(), HEADROOM);
            assert_eq!(frames[1].data(), &[8; 10]);
            frames[0] = Frame::new(&mut [], 0, 0);
            frames.len()
        });
        assert_eq!(seen, 2);
        assert_eq!(b.frame(0), &[] as &[u8]);
        assert_eq!(b.frame(1), &[8; 10]);
    }
}
