//! The control socket: a Unix stream socket, mode 0600 (root only; 0660
//! with a control group), no network listener, every peer's credentials
//! checked ([`Access`]). Each connection sends request lines and reads one
//! response line per request, or, for a streamed answer (`show route`,
//! `fib_audit`), a head line, one value a line and an `{"end": N}` line.
//!
//! The daemon's control thread serves every connection without blocking:
//! connections are non-blocking, read and written a bounded amount per
//! round, a request line is capped at [`MAX_REQUEST`] bytes, at most
//! [`REQUESTS_PER_ROUND`] requests of a connection are answered per round,
//! a connection's unsent replies are capped at [`MAX_PENDING_OUTPUT`]
//! bytes (past that nothing more is read from it or answered until the
//! client reads), a connection that makes no progress (no complete request,
//! no reply written) for [`CONNECTION_DEADLINE`] is closed, and at most
//! [`MAX_CONNECTIONS`] are open at once. So a client that holds its
//! connection open, trickles bytes, pipelines requests without reading the
//! replies or sends a huge request costs the others nothing measurable, is
//! held to a bounded amount of memory, and never stalls netlink
//! processing, neighbour resolution or SIGTERM. A connection closed with
//! a stream in progress is reported to the handler ([`Handler::abandoned`]),
//! which releases what the stream held.

use crate::ControlError;
use crate::protocol::{Request, Response};
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The longest request line accepted; longer ones get an error and the
/// connection is closed.
pub const MAX_REQUEST: usize = 1 << 20;
/// How long a connection may stay open without completing a request (a
/// reply being written resets it as it progresses).
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(5);
/// Connections open at once; the oldest is closed to admit a new one.
pub const MAX_CONNECTIONS: usize = 64;
/// Requests of one connection answered per round; the rest wait, unread.
pub const REQUESTS_PER_ROUND: usize = 16;
/// Bytes of replies waiting for a client to read them, past which nothing
/// more is read from it or answered (a stream's part may end above it).
pub const MAX_PENDING_OUTPUT: usize = 1 << 20;
/// Bytes read from one connection per round (fairness between clients).
const READ_PER_ROUND: usize = 64 << 10;

/// Where a streamed answer stands, between rounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamCursor {
    /// Installed routes, in prefix order, after this one (None: from the
    /// first); `sent` so far.
    Routes {
        /// The last prefix sent.
        after: Option<wire::Cidr>,
        /// Values sent so far.
        sent: u64,
    },
    /// The differences a FIB audit found (computed on another thread).
    Audit {
        /// Values sent so far.
        sent: u64,
    },
}

impl StreamCursor {
    fn sent(&self) -> u64 {
        match self {
            StreamCursor::Routes { sent, .. } | StreamCursor::Audit { sent } => *sent,
        }
    }
}

/// What [`Handler::more`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamStep {
    /// Wrote values; there may be more.
    More,
    /// Nothing to write yet (the values are being computed).
    Pending,
    /// Nothing is left.
    Done,
}

/// What a request gets: an answer now, or a stream the server pulls from
/// [`Handler::more`] a part per round, so a large answer is never built
/// whole and other clients are served in between.
#[derive(Debug)]
pub enum Reply {
    /// The whole answer.
    Now(Response),
    /// Values to stream, from this cursor.
    Stream(StreamCursor),
}

/// The daemon's side of the control socket.
pub trait Handler {
    /// Answers one request.
    fn handle(&mut self, req: Request) -> Reply;
    /// Appends the next values of a stream to `out`, one JSON value and a
    /// newline each, moving `cursor` on.
    fn more(&mut self, cursor: &mut StreamCursor, out: &mut Vec<u8>) -> StreamStep;
    /// The connection of a stream in progress was closed (the client went,
    /// or it expired or was evicted): release what the stream holds.
    fn abandoned(&mut self, _cursor: &StreamCursor) {}
}

/// A plain function answers every request at once.
impl<F: FnMut(Request) -> Response> Handler for F {
    fn handle(&mut self, req: Request) -> Reply {
        Reply::Now(self(req))
    }

    fn more(&mut self, _: &mut StreamCursor, _: &mut Vec<u8>) -> StreamStep {
        StreamStep::Done
    }
}

/// Bytes of a stream's output buffered per connection before the server
/// asks the handler for more.
const STREAM_BUFFER: usize = 256 << 10;

/// One client connection.
#[derive(Debug)]
struct Conn {
    stream: UnixStream,
    /// Accepted, or last served (see [`CONNECTION_DEADLINE`]).
    opened: Instant,
    input: Vec<u8>,
    output: Vec<u8>,
    /// Peer closed its side, or we decided to close after the output.
    closing: bool,
    /// An answer being streamed (requests after it wait for its end).
    streaming: Option<StreamCursor>,
}

/// Who may use the control socket: root, the daemon's own user, and the
/// members of `group` when one is configured. The socket file's mode gates
/// connecting (0600, or 0660 with the group); the peer's credentials
/// (SO_PEERCRED) are checked again on every connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Access {
    /// The socket's owner (the user the daemon runs as; None: root).
    pub owner: Option<u32>,
    /// A group whose members may connect too.
    pub group: Option<u32>,
}

impl Access {
    /// Whether a peer with `uid`, primary `gid` and supplementary `groups`
    /// may talk to the daemon.
    pub fn allows(&self, uid: u32, gid: u32, groups: &[u32]) -> bool {
        uid == 0
            || Some(uid) == self.owner
            || self.group.is_some_and(|g| gid == g || groups.contains(&g))
    }
}

/// A process's supplementary groups (`Groups:` of /proc/PID/status).
fn supplementary_groups(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Groups:")).map(|g| {
                g.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// The listening control socket; removes its path on drop.
#[derive(Debug)]
pub struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
    conns: Vec<Conn>,
    access: Access,
    /// Connections refused for their credentials.
    refused: u64,
}

impl ControlServer {
    /// Binds `path` with mode 0600 from the start (replacing a stale socket
    /// left by a crashed daemon, refusing if another daemon answers there
    /// or if the path is not a socket).
    pub fn bind(path: &Path) -> Result<ControlServer, ControlError> {
        Self::bind_with(path, Access::default())
    }

    /// [`bind`](Self::bind) for `access`: mode 0660 and the group's
    /// ownership when a group may connect, owned by `access.owner`.
    pub fn bind_with(path: &Path, access: Access) -> Result<ControlServer, ControlError> {
        let err = |e: std::io::Error| ControlError::Socket(format!("{}: {e}", path.display()));
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if !meta.file_type().is_socket() {
                return Err(ControlError::Socket(format!(
                    "{}: exists and is not a socket; not removing it",
                    path.display()
                )));
            }
            if UnixStream::connect(path).is_ok() {
                return Err(ControlError::Socket(format!(
                    "{}: another fastfwd is already running (its control socket answers)",
                    path.display()
                )));
            }
            std::fs::remove_file(path).map_err(err)?;
        }
        let mask = if access.group.is_some() { 0o117 } else { 0o177 };
        let listener =
            netio::sys::os::with_umask(mask, || UnixListener::bind(path)).map_err(err)?;
        if access.owner.is_some() || access.group.is_some() {
            // Until this, the socket is root's with root's group: nobody
            // else can connect, and every peer's credentials are checked.
            std::os::unix::fs::chown(path, access.owner, access.group).map_err(err)?;
        }
        listener.set_nonblocking(true).map_err(err)?;
        Ok(ControlServer {
            listener,
            path: path.to_path_buf(),
            conns: Vec::new(),
            access,
            refused: 0,
        })
    }

    /// The descriptor that becomes readable when a client connects.
    pub fn fd(&self) -> i32 {
        self.listener.as_raw_fd()
    }

    /// The listening descriptor and every open connection's, to poll.
    pub fn poll_fds(&self) -> Vec<i32> {
        std::iter::once(self.fd())
            .chain(self.conns.iter().map(|c| c.stream.as_raw_fd()))
            .collect()
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Connections refused so far because of the peer's credentials.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Whether the peer on `stream` may use the socket. A peer in another
    /// PID namespace (the kernel gives no pid: the daemon runs in a
    /// container, its client outside) is judged by its user and group
    /// alone, since its supplementary groups cannot be read.
    fn admits(&self, stream: &UnixStream) -> bool {
        match netio::sys::os::peer_credentials(stream.as_raw_fd()) {
            Ok(c) => {
                let groups = c.pid.map(supplementary_groups).unwrap_or_default();
                self.access.allows(c.uid, c.gid, &groups)
            }
            Err(_) => false,
        }
    }

    /// One round without blocking: accepts new connections, reads what each
    /// has sent (a bounded amount), answers every complete request line
    /// with `handle`, writes what it can and closes finished, oversized or
    /// expired connections.
    pub fn serve_pending(&mut self, handler: &mut impl Handler) {
        while let Ok((mut stream, _)) = self.listener.accept() {
            if !self.admits(&stream) {
                self.refused += 1;
                let mut out = Vec::new();
                push_response(
                    &mut out,
                    &Response::err(
                        "permission denied: the control socket is for root, fastfwd's user and its control group",
                    ),
                );
                // Best effort, without waiting: the client may be gone.
                let _ = stream.set_nonblocking(true);
                let _ = stream.write(&out);
                continue;
            }
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            if self.conns.len() >= MAX_CONNECTIONS {
                let old = self.conns.remove(0);
                if let Some(cursor) = &old.streaming {
                    handler.abandoned(cursor);
                }
            }
            self.conns.push(Conn {
                stream,
                opened: Instant::now(),
                input: Vec::new(),
                output: Vec::new(),
                closing: false,
                streaming: None,
            });
        }
        let now = Instant::now();
        self.conns.retain_mut(|c| {
            let keep = serve_one(c, handler, now);
            if !keep && let Some(cursor) = &c.streaming {
                handler.abandoned(cursor);
            }
            keep
        });
    }
}

/// One round of one connection; false: close it.
fn serve_one(c: &mut Conn, handler: &mut impl Handler, now: Instant) -> bool {
    if now.duration_since(c.opened) > CONNECTION_DEADLINE {
        return false;
    }
    // Back pressure: a client that does not read its replies is
    // not read from (its requests wait in the socket).
    let backed_up = c.output.len() > MAX_PENDING_OUTPUT || c.input.contains(&b'\n');
    if !c.closing && !backed_up && !read_some(c) {
        return false;
    }
    stream_some(c, handler);
    // Complete lines, answered in order, removed once at the end.
    let mut consumed = 0;
    let mut answered = 0;
    while c.streaming.is_none()
        && answered < REQUESTS_PER_ROUND
        && c.output.len() <= MAX_PENDING_OUTPUT
    {
        let Some(nl) = c.input[consumed..].iter().position(|&b| b == b'\n') else {
            break;
        };
        let line = c.input[consumed..consumed + nl + 1].to_vec();
        consumed += nl + 1;
        answered += 1;
        answer(c, &line, handler);
        stream_some(c, handler);
    }
    c.input.drain(..consumed);
    if answered > 0 {
        // A complete request is progress.
        c.opened = now;
    }
    if c.input.len() > MAX_REQUEST && !c.input.contains(&b'\n') {
        let resp = Response::err(format!("request longer than {MAX_REQUEST} bytes"));
        push_response(&mut c.output, &resp);
        c.input = Vec::new();
        c.closing = true;
    } else if c.closing && c.streaming.is_none() && !c.input.is_empty() && !c.input.contains(&b'\n')
    {
        // A last request without a newline.
        let line = std::mem::take(&mut c.input);
        answer(c, &line, handler);
        stream_some(c, handler);
    }
    if c.streaming.is_some() && c.output.len() < STREAM_BUFFER {
        // A stream still being computed is a client being served.
        c.opened = now;
    }
    let before = c.output.len();
    if !write_some(c) {
        return false;
    }
    if c.output.len() < before {
        // A reply written: the client reads.
        c.opened = now;
    }
    // Closed by the client: done once every request is answered and sent.
    let waiting = c.input.contains(&b'\n');
    !(c.closing && c.output.is_empty() && c.streaming.is_none() && !waiting)
}

/// Reads what is available, up to the per-round budget. False: drop the
/// connection (error).
fn read_some(c: &mut Conn) -> bool {
    let mut buf = [0u8; 8192];
    let mut got = 0;
    while got < READ_PER_ROUND && c.input.len() <= MAX_REQUEST {
        match c.stream.read(&mut buf) {
            Ok(0) => {
                c.closing = true;
                break;
            }
            Ok(n) => {
                c.input.extend_from_slice(&buf[..n]);
                got += n;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
    true
}

/// Writes what the socket takes. False: drop the connection (error).
fn write_some(c: &mut Conn) -> bool {
    while !c.output.is_empty() {
        match c.stream.write(&c.output) {
            Ok(0) => return false,
            Ok(n) => {
                c.output.drain(..n);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
    true
}

fn answer(c: &mut Conn, line: &[u8], handler: &mut impl Handler) {
    let text = String::from_utf8_lossy(line);
    if text.trim().is_empty() {
        return;
    }
    let reply = match serde_json::from_str::<Request>(text.trim()) {
        Ok(req) => handler.handle(req),
        Err(e) => Reply::Now(Response::err(format!("bad request: {e}"))),
    };
    match reply {
        Reply::Now(resp) => push_response(&mut c.output, &resp),
        Reply::Stream(cursor) => {
            let mut head = Response::ok(());
            head.result = None;
            head.stream = true;
            push_response(&mut c.output, &head);
            c.streaming = Some(cursor);
        }
    }
}

/// Pulls a stream's next values while the connection's buffer has room;
/// ends it with `{"end":N}`.
fn stream_some(c: &mut Conn, handler: &mut impl Handler) {
    while c.output.len() < STREAM_BUFFER {
        let Some(cursor) = c.streaming.as_mut() else {
            return;
        };
        match handler.more(cursor, &mut c.output) {
            StreamStep::More => {}
            StreamStep::Pending => return,
            StreamStep::Done => {
                let end = serde_json::json!({ "end": cursor.sent() });
                let _ = serde_json::to_writer(&mut c.output, &end);
                c.output.push(b'\n');
                c.streaming = None;
            }
        }
    }
}

fn push_response(out: &mut Vec<u8>, resp: &Response) {
    match serde_json::to_writer(&mut *out, resp) {
        Ok(()) => {}
        Err(_) => out.extend_from_slice(br#"{"ok":false,"error":"encoding"}"#),
    }
    out.push(b'\n');
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Sends one request to the daemon at `path` and returns its response; a
/// streamed answer's values are collected into `result` as an array.
pub fn request(path: &Path, req: &Request) -> Result<Response, ControlError> {
    let mut values = Vec::new();
    let mut resp = request_each(path, req, |v| values.push(v))?;
    if resp.stream {
        resp.stream = false;
        resp.result = Some(serde_json::Value::Array(values));
    }
    Ok(resp)
}

/// Sends one request; a streamed answer's values go to `each` as they
/// arrive (never all in memory). Returns the first line (with `stream`
/// set when values followed).
pub fn request_each(
    path: &Path,
    req: &Request,
    mut each: impl FnMut(serde_json::Value),
) -> Result<Response, ControlError> {
    let err = |e: std::io::Error| {
        ControlError::Socket(format!(
            "{}: {e} (is `fastfwd run` running, and are you root?)",
            path.display()
        ))
    };
    let mut stream = UnixStream::connect(path).map_err(err)?;
    // An audit rebuilds and compares a whole table before its first line.
    let timeout = match req {
        Request::FibAudit => Duration::from_secs(120),
        _ => Duration::from_secs(10),
    };
    stream.set_read_timeout(Some(timeout)).map_err(err)?;
    let mut line = serde_json::to_vec(req).map_err(|e| ControlError::Socket(e.to_string()))?;
    line.push(b'\n');
    stream.write_all(&line).map_err(err)?;
    stream.shutdown(std::net::Shutdown::Write).map_err(err)?;
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    reader.read_line(&mut answer).map_err(err)?;
    let bad =
        |e: serde_json::Error| ControlError::Socket(format!("bad response from the daemon: {e}"));
    let resp: Response = serde_json::from_str(&answer).map_err(bad)?;
    if resp.version != crate::protocol::PROTOCOL_VERSION {
        return Err(ControlError::Socket(format!(
            "the daemon speaks control protocol version {}, this client version {}: use the fastfwd binary the daemon runs",
            resp.version,
            crate::protocol::PROTOCOL_VERSION
        )));
    }
    if !resp.stream {
        return Ok(resp);
    }
    let mut sent = 0u64;
    loop {
        answer.clear();
        if reader.read_line(&mut answer).map_err(err)? == 0 {
            return Err(ControlError::Socket(format!(
                "the daemon closed the stream after {sent} values"
            )));
        }
        let v: serde_json::Value = serde_json::from_str(&answer).map_err(bad)?;
        if let Some(end) = v.get("end").and_then(serde_json::Value::as_u64) {
            if end != sent {
                return Err(ControlError::Socket(format!(
                    "the stream ended at {sent} values, announced {end}"
                )));
            }
            return Ok(resp);
        }
        sent += 1;
        each(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_admits_root_the_owner_and_the_group_only() {
        let root_only = Access::default();
        assert!(root_only.allows(0, 0, &[]));
        assert!(!root_only.allows(1000, 1000, &[]));
        assert!(!root_only.allows(1000, 0, &[0]), "root's group is not root");
        let a = Access {
            owner: Some(998),
            group: Some(997),
        };
        assert!(a.allows(0, 0, &[]));
        assert!(a.allows(998, 998, &[]));
        assert!(a.allows(1000, 997, &[]), "primary group");
        assert!(a.allows(1000, 1000, &[27, 997]), "supplementary group");
        assert!(!a.allows(1000, 1000, &[27]));
        assert!(
            !a.allows(997, 1000, &[]),
            "a uid equal to the group's number is not in it"
        );
    }

    #[test]
    fn supplementary_groups_are_read_for_a_live_process() {
        let mine = supplementary_groups(std::process::id());
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("Groups:")).unwrap();
        assert_eq!(mine.len(), line.split_whitespace().count() - 1);
        assert!(supplementary_groups(i32::MAX as u32).is_empty());
    }
    use std::os::unix::fs::PermissionsExt;

    /// Counts what it answers and which streams were abandoned; `show
    /// route` streams forever, in parts of 64 KiB.
    #[derive(Default)]
    struct Counting {
        answered: usize,
        abandoned: usize,
    }

    impl Handler for Counting {
        fn handle(&mut self, req: Request) -> Reply {
            self.answered += 1;
            match req {
                Request::ShowRoute { prefix: None } => Reply::Stream(StreamCursor::Routes {
                    after: None,
                    sent: 0,
                }),
                _ => Reply::Now(Response::ok("x".repeat(1000))),
            }
        }

        fn more(&mut self, cursor: &mut StreamCursor, out: &mut Vec<u8>) -> StreamStep {
            if let StreamCursor::Routes { sent, .. } = cursor {
                *sent += 1;
            }
            out.extend_from_slice(&[b'1'; 65535]);
            out.push(b'\n');
            StreamStep::More
        }

        fn abandoned(&mut self, _: &StreamCursor) {
            self.abandoned += 1;
        }
    }

    /// A client that pipelines requests and never reads the replies is
    /// answered up to the output cap, then neither read nor answered, and
    /// closed at the deadline; one that abandons a stream has it released;
    /// a well-behaved client is answered meanwhile.
    #[test]
    fn a_client_that_does_not_read_is_bounded_and_released() {
        let dir = std::env::temp_dir().join(format!("fastfwd-ctl-bound-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ctl.sock");
        let mut server = ControlServer::bind(&path).unwrap();
        let mut h = Counting::default();
        let mut greedy = UnixStream::connect(&path).unwrap();
        greedy.set_nonblocking(true).unwrap();
        let line = b"{\"op\":\"show_drops\"}\n".repeat(4096);
        let mut streamer = UnixStream::connect(&path).unwrap();
        streamer.write_all(b"{\"op\":\"show_route\"}\n").unwrap();
        let t0 = Instant::now();
        let mut max_output = 0;
        while t0.elapsed() < CONNECTION_DEADLINE + Duration::from_secs(2) {
            let _ = greedy.write(&line);
            server.serve_pending(&mut h);
            max_output = max_output.max(
                server
                    .conns
                    .iter()
                    .map(|c| c.output.len())
                    .max()
                    .unwrap_or(0),
            );
            if server.connections() == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // Answered until the replies waiting passed the cap (1 KiB each;
        // the kernel's socket buffer holds some too, up to 1 MiB more).
        assert!(h.answered > 100, "{}", h.answered);
        assert!(
            h.answered < 2 * MAX_PENDING_OUTPUT / 1000 + 2 * REQUESTS_PER_ROUND,
            "{}",
            h.answered
        );
        assert!(
            max_output < MAX_PENDING_OUTPUT + STREAM_BUFFER + (1 << 16) + 2000,
            "{max_output}"
        );
        assert_eq!(server.connections(), 0, "both closed at the deadline");
        assert_eq!(h.abandoned, 1, "the stream was released");
        // A new client is answered.
        let p2 = path.clone();
        let client = std::thread::spawn(move || request(&p2, &Request::ShowDrops).unwrap());
        let t = Instant::now();
        while !client.is_finished() && t.elapsed() < Duration::from_secs(3) {
            server.serve_pending(&mut h);
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(client.join().unwrap().ok);
        drop((greedy, streamer, server));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn serves_requests_and_cleans_up() {
        let dir = std::env::temp_dir().join(format!("fastfwd-ctl-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ctl.sock");
        let mut server = ControlServer::bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(
            ControlServer::bind(&path).is_err(),
            "a second daemon is refused"
        );
        let p2 = path.clone();
        let client = std::thread::spawn(move || request(&p2, &Request::ShowDrops).unwrap());
        let mut served = 0;
        for _ in 0..200 {
            server.serve_pending(&mut |r: Request| {
                served += 1;
                assert_eq!(r, Request::ShowDrops);
                Response::ok("drops")
            });
            if served > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let resp = client.join().unwrap();
        assert_eq!(resp, Response::ok("drops"));

        // A client that holds its connection, one that sends an endless
        // line: neither delays a third, which is answered in the same round
        // trip; the long line is refused and its connection closed.
        let idle = UnixStream::connect(&path).unwrap();
        let mut flood = UnixStream::connect(&path).unwrap();
        flood.set_nonblocking(true).unwrap();
        let chunk = vec![b'x'; 1 << 16];
        let p3 = path.clone();
        let third = std::thread::spawn(move || {
            let t = Instant::now();
            (request(&p3, &Request::ShowWorkers).unwrap(), t.elapsed())
        });
        let mut refused = false;
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(3) {
            let _ = flood.write(&chunk);
            server.serve_pending(&mut |_: Request| Response::ok("w"));
            let mut b = [0u8; 256];
            if let Ok(n) = flood.read(&mut b) {
                refused |= String::from_utf8_lossy(&b[..n]).contains("request longer than");
            }
            if third.is_finished() && refused {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let (resp, took) = third.join().unwrap();
        assert_eq!(resp, Response::ok("w"));
        assert!(took < Duration::from_millis(500), "{took:?}");
        assert!(refused, "the oversized request is answered with an error");
        assert!(server.connections() <= 2, "{}", server.connections());
        drop(idle);
        drop(server);
        assert!(!path.exists());
        // A regular file in the way is not removed.
        std::fs::write(&path, "keep").unwrap();
        assert!(ControlServer::bind(&path).is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
