//! Fixed-capacity batches of frames: one allocation when a worker starts,
//! none per packet.

/// Bytes reserved for each frame (room for a 1518-byte frame plus headers
/// the pipeline may add, such as an ICMP error quoting the original).
pub const FRAME_CAP: usize = 2048;
/// Frames per batch.
pub const BATCH: usize = 64;

/// Up to [`BATCH`] frames, each in its own [`FRAME_CAP`]-byte slot.
pub struct FrameBatch {
    buf: Box<[u8]>,
    lens: [u16; BATCH],
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
            buf: vec![0u8; FRAME_CAP * BATCH].into_boxed_slice(),
            lens: [0; BATCH],
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
        if self.count == BATCH || bytes.len() > FRAME_CAP {
            return false;
        }
        let at = self.count * FRAME_CAP;
        self.buf[at..at + bytes.len()].copy_from_slice(bytes);
        self.lens[self.count] = bytes.len() as u16;
        self.count += 1;
        true
    }

    /// Appends `bytes` with an 802.1Q tag (`tpid`, `tci`) inserted after the
    /// MAC addresses (AF_PACKET hands over tags the device stripped).
    pub fn push_tagged(&mut self, bytes: &[u8], tpid: u16, tci: u16) -> bool {
        if self.count == BATCH || bytes.len() < 12 || bytes.len() + 4 > FRAME_CAP {
            return false;
        }
        let at = self.count * FRAME_CAP;
        let slot = &mut self.buf[at..at + bytes.len() + 4];
        slot[..12].copy_from_slice(&bytes[..12]);
        slot[12..14].copy_from_slice(&tpid.to_be_bytes());
        slot[14..16].copy_from_slice(&tci.to_be_bytes());
        slot[16..].copy_from_slice(&bytes[12..]);
        self.lens[self.count] = (bytes.len() + 4) as u16;
        self.count += 1;
        true
    }

    /// The bytes of frame `i` (empty if out of range).
    pub fn frame(&self, i: usize) -> &[u8] {
        if i >= self.count {
            return &[];
        }
        &self.buf[i * FRAME_CAP..i * FRAME_CAP + self.lens[i] as usize]
    }

    /// The whole slot of frame `i` and its length, for rewriting in place
    /// (a frame may grow up to [`FRAME_CAP`]). `None` if out of range.
    pub fn slot_mut(&mut self, i: usize) -> Option<(&mut [u8], &mut u16)> {
        if i >= self.count {
            return None;
        }
        Some((
            &mut self.buf[i * FRAME_CAP..(i + 1) * FRAME_CAP],
            &mut self.lens[i],
        ))
    }

    /// The backing buffer, slot stride and lengths (for vectored sends).
    pub fn raw(&self) -> (&[u8], usize, &[u16]) {
        (&self.buf, FRAME_CAP, &self.lens[..self.count])
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
    fn slot_can_grow_a_frame() {
        let mut b = FrameBatch::new();
        b.push(&[9; 10]);
        let (slot, len) = b.slot_mut(0).unwrap();
        slot[10..20].fill(7);
        *len = 20;
        assert_eq!(b.frame(0).len(), 20);
        assert!(b.slot_mut(1).is_none());
    }
}
