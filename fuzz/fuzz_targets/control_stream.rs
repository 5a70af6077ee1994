//! Fuzz target: the control socket as a byte stream. The bytes are what
//! one client writes, in the pieces the first byte chooses, to a real
//! `ControlServer` on a Unix socket, which is served after each piece as
//! the daemon serves it (`serve_pending`); then the client closes its side
//! and the server finishes. The server must never panic; every line it
//! sends back is a JSON value; it answers at most one response (or one
//! stream, ended by `{"end":N}`) per request line sent, plus one for an
//! unterminated last request; and it closes the connection once done.
//! The handler answers `show_route` with a stream of three values and
//! everything else at once.
#![no_main]

use control::server::{ControlServer, Handler, Reply, StreamCursor, StreamStep};
use control::{Request, Response};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Mutex, OnceLock};

struct Echo;

impl Handler for Echo {
    fn handle(&mut self, req: Request) -> Reply {
        match req {
            Request::ShowRoute { .. } => Reply::Stream(StreamCursor::Audit { sent: 0 }),
            other => Reply::Now(Response::ok(format!("{other:?}"))),
        }
    }

    fn more(&mut self, cursor: &mut StreamCursor, out: &mut Vec<u8>) -> StreamStep {
        let StreamCursor::Audit { sent } = cursor else {
            return StreamStep::Done;
        };
        if *sent == 3 {
            return StreamStep::Done;
        }
        *sent += 1;
        out.extend_from_slice(b"{\"value\":1}\n");
        StreamStep::More
    }
}

fn server() -> &'static Mutex<(ControlServer, std::path::PathBuf)> {
    static S: OnceLock<Mutex<(ControlServer, std::path::PathBuf)>> = OnceLock::new();
    S.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("ff-fuzz-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        Mutex::new((ControlServer::bind(&path).expect("bind"), path))
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&piece, bytes)) = data.split_first() else {
        return;
    };
    let mut guard = server().lock().unwrap();
    let (srv, path) = &mut *guard;
    let mut client = UnixStream::connect(&*path).expect("connect");
    client.set_nonblocking(true).unwrap();
    let mut replies = Vec::new();
    let mut buf = [0u8; 65536];
    let mut drain = |client: &mut UnixStream, replies: &mut Vec<u8>| loop {
        match client.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => replies.extend_from_slice(&buf[..n]),
            Err(_) => return false,
        }
    };
    for chunk in bytes.chunks(usize::from(piece).max(1)) {
        let mut at = 0;
        while at < chunk.len() {
            match client.write(&chunk[at..]) {
                Ok(n) => at += n,
                Err(_) => {
                    srv.serve_pending(&mut Echo);
                    drain(&mut client, &mut replies);
                }
            }
        }
        srv.serve_pending(&mut Echo);
        drain(&mut client, &mut replies);
    }
    client.shutdown(std::net::Shutdown::Write).unwrap();
    let mut closed = false;
    for _ in 0..10_000 {
        srv.serve_pending(&mut Echo);
        if drain(&mut client, &mut replies) {
            closed = true;
            break;
        }
    }
    assert!(closed, "the server never closed a finished connection");
    assert_eq!(srv.connections(), 0, "the connection is released");
    let requests = bytes.iter().filter(|&&b| b == b'\n').count() + 1;
    let mut answers = 0;
    let mut in_stream = false;
    for line in replies.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v: serde_json::Value = serde_json::from_slice(line).expect("a JSON line");
        if in_stream {
            in_stream = v.get("end").is_none();
            continue;
        }
        answers += 1;
        in_stream = v.get("stream").and_then(serde_json::Value::as_bool) == Some(true);
    }
    assert!(!in_stream, "a stream left unended");
    assert!(
        answers <= requests,
        "{answers} answers to {requests} requests"
    );
});
