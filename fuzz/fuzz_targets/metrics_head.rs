//! Fuzz target: the metrics listener's HTTP request head. The bytes are
//! what a client sent, arriving in the pieces the first byte chooses;
//! after each piece `router::metrics::parse_head` reads what has arrived,
//! as the listener does. It must never panic; a head is complete only
//! once an empty line has arrived within the size limit, and then stays
//! complete with the same request line; past the limit with no end it is
//! too long; a request line holds no line break; and `route` answers any
//! request line.
#![no_main]

use router::metrics::{Head, MAX_REQUEST_HEAD, parse_head, route};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&piece, bytes)) = data.split_first() else {
        return;
    };
    let piece = usize::from(piece).max(1);
    let mut received = Vec::new();
    let mut done: Option<String> = None;
    for chunk in bytes.chunks(piece) {
        received.extend_from_slice(chunk);
        let head = parse_head(&received);
        if let Some(line) = &done {
            assert_eq!(
                &head,
                &Head::Complete(line.clone()),
                "a complete head stays so"
            );
            continue;
        }
        match head {
            Head::Complete(line) => {
                assert!(!line.contains(['\r', '\n']), "{line:?}");
                let seen = &received[..received.len().min(MAX_REQUEST_HEAD + 4)];
                assert!(
                    seen.windows(2).any(|w| w == b"\n\n")
                        || seen.windows(4).any(|w| w == b"\r\n\r\n"),
                    "complete without an empty line"
                );
                let (status, _, _) = route(&line, || Ok(String::from("# EOF\n")));
                assert!(status == "200 OK" || status == "404 Not Found");
                done = Some(line);
            }
            Head::TooLong => {
                assert!(received.len() > MAX_REQUEST_HEAD);
                return;
            }
            Head::Incomplete => assert!(received.len() <= MAX_REQUEST_HEAD),
        }
    }
});
