//! Fuzz target: the flow owner hash (pipeline::owner) over any frame, and
//! the frames handed between workers (router::handoff) read back whole.
//!
//! For an untagged IPv4 frame with a 20-byte header, the frame with its
//! addresses and its first four L4 bytes swapped (the other direction of a
//! TCP or UDP flow) must hash alike.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let h = pipeline::flow_owner_hash(data);
    if data.len() >= 38
        && data[12..14] == [0x08, 0x00]
        && data[14] == 0x45
        && matches!(data[23], 6 | 17)
        && u16::from_be_bytes([data[20], data[21]]) & 0x1fff == 0
    {
        let mut back = data.to_vec();
        back[26..30].copy_from_slice(&data[30..34]);
        back[30..34].copy_from_slice(&data[26..30]);
        back[34..36].copy_from_slice(&data[36..38]);
        back[36..38].copy_from_slice(&data[34..36]);
        assert_eq!(h, pipeline::flow_owner_hash(&back));
    }
    // The same bytes cut into frames, through a ring and back.
    let mut ends = router::handoff::mesh(2).unwrap().unwrap();
    let mut batch = netio::FrameBatch::new();
    for (i, frame) in data.chunks(1 + data.first().copied().unwrap_or(0) as usize).enumerate() {
        assert!(ends[0].send(1, i as u16, frame[0], frame));
        assert_eq!(ends[1].receive(&mut batch), Some(i as u16));
        assert_eq!((batch.len(), batch.frame(0), batch.ct_hint(0)), (1, frame, frame[0]));
    }
    assert_eq!(ends[1].receive(&mut batch), None);
});
