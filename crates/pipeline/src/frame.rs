//! The frame descriptor the I/O backends hand to the pipeline.
//!
//! A frame is a window `[start, start + len)` inside a buffer the backend
//! owns (an AF_XDP UMEM chunk, an AF_PACKET ring slot, a `Vec` in replay).
//! The pipeline rewrites the frame in place and may move the window: the
//! egress L2 header can be longer or shorter than the ingress one (VLAN
//! tags added or removed), so the window start moves back into the headroom
//! or forward. After [`crate::Worker::process`] the backend transmits
//! `buffer()[start()..start() + len()]`. Keep at least [`HEADROOM`] bytes
//! before the frame so that adding tags never needs a copy.

/// Headroom that lets the pipeline add two VLAN tags without moving data.
pub const HEADROOM: usize = 8;

/// Bytes from one frame buffer to the next where a backend keeps a
/// batch's frames in one allocation (`netio::FrameBatch`, the benchmarks): a
/// 2048-byte slot and one cache line. With a power-of-two stride every
/// frame's first bytes fall in the same two of the L1 data cache's 64 sets
/// (address bits 6-11), so a batch of 64 frames evicts itself between the
/// copy in and each stage; one extra line puts each slot's start in a set
/// of its own (the stride is an odd number of lines).
pub const BATCH_SLOT_STRIDE: usize = 2048 + 64;

/// A received frame inside its buffer.
#[derive(Debug)]
pub struct Frame<'a> {
    buf: &'a mut [u8],
    // u32 offsets keep a frame in 32 bytes with its hint (buffers are
    // far below 4 GiB).
    start: u32,
    len: u32,
    ct_hint: u8,
}

// Every stage walks the chunk's frames: keep them at four words.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Frame<'static>>() == 32);

impl<'a> Frame<'a> {
    /// A frame of `len` bytes at offset `start` of `buf`; both are clamped
    /// to the buffer.
    pub fn new(buf: &'a mut [u8], start: usize, len: usize) -> Self {
        let start = start.min(buf.len());
        let len = len.min(buf.len() - start);
        Self {
            buf,
            start: start as u32,
            len: len as u32,
            ct_hint: 0,
        }
    }

    /// A frame filling the whole buffer (no headroom).
    pub fn whole(buf: &'a mut [u8]) -> Self {
        let len = buf.len() as u32;
        Self {
            buf,
            start: 0,
            len,
            ct_hint: 0,
        }
    }

    /// The frame with the XDP engine's connection-tracking hint (handed to
    /// the ACL as `ct_hints` in [`crate::Acl::classify_batch_with`]).
    pub fn with_ct_hint(mut self, hint: u8) -> Self {
        self.ct_hint = hint;
        self
    }

    /// The XDP engine's connection-tracking hint (0: none).
    #[inline]
    pub fn ct_hint(&self) -> u8 {
        self.ct_hint
    }

    /// Offset of the frame in its buffer.
    #[inline]
    pub fn start(&self) -> usize {
        self.start as usize
    }

    /// Length of the frame.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True for an empty frame.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The frame's bytes.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buf[self.start()..self.start() + self.len()]
    }

    /// The frame's bytes, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let (s, l) = (self.start(), self.len());
        &mut self.buf[s..s + l]
    }

    /// The whole buffer (headroom and tailroom included).
    #[inline]
    pub fn buffer(&self) -> &[u8] {
        self.buf
    }

    #[inline]
    pub(crate) fn buffer_mut(&mut self) -> &mut [u8] {
        self.buf
    }

    /// Moves the window; callers keep it inside the buffer.
    #[inline]
    pub(crate) fn set_window(&mut self, start: usize, len: usize) {
        debug_assert!(start + len <= self.buf.len());
        let start = start.min(self.buf.len());
        self.start = start as u32;
        self.len = len.min(self.buf.len() - start) as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_clamps_to_the_buffer() {
        let mut b = [0u8; 10];
        let f = Frame::new(&mut b, 12, 5);
        assert_eq!((f.start(), f.len()), (10, 0));
        let f = Frame::new(&mut b, 4, 50);
        assert_eq!((f.start(), f.len()), (4, 6));
    }
}
