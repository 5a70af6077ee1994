//! The daemon's counters in the OpenMetrics text format (Prometheus):
//! `fastfwd show metrics`, and `fastfwd run --metrics ADDR:PORT` serving
//! `GET /metrics` over HTTP.
//!
//! Each scrape is a snapshot: the control loop sums the workers' reports
//! and the XDP program's per-CPU counters into a fresh registry and encodes
//! it (`prometheus-client`). The HTTP thread asks over the control socket,
//! like any client, so it never touches the daemon's state. It serves
//! `GET /metrics` only, on one thread with bounded connections, request
//! heads and deadlines ([`serve`]), started after the daemon dropped its
//! privileges.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Label sets: (name, value) pairs.
type Labels = Vec<(String, String)>;
type Counters = Family<Labels, Counter>;
type Gauges = Family<Labels, Gauge<u64, AtomicU64>>;

/// A registry being filled for one scrape.
pub struct Scrape {
    registry: Registry,
    families: Vec<(&'static str, Counters)>,
    gauges: Vec<(&'static str, Gauges)>,
}

impl std::fmt::Debug for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrape").finish_non_exhaustive()
    }
}

impl Default for Scrape {
    fn default() -> Self {
        Self::new()
    }
}

impl Scrape {
    /// An empty scrape; every metric is prefixed `fastfwd_`.
    pub fn new() -> Scrape {
        Scrape {
            registry: Registry::with_prefix("fastfwd"),
            families: Vec::new(),
            gauges: Vec::new(),
        }
    }

    fn counters(&mut self, name: &'static str, help: &str) -> Counters {
        if let Some((_, f)) = self.families.iter().find(|(n, _)| *n == name) {
            return f.clone();
        }
        let f = Counters::default();
        self.registry
            .register(name, help.trim_end_matches('.'), f.clone());
        self.families.push((name, f.clone()));
        f
    }

    fn gauges(&mut self, name: &'static str, help: &str) -> Gauges {
        if let Some((_, f)) = self.gauges.iter().find(|(n, _)| *n == name) {
            return f.clone();
        }
        let f = Gauges::default();
        self.registry
            .register(name, help.trim_end_matches('.'), f.clone());
        self.gauges.push((name, f.clone()));
        f
    }

    /// Adds `value` to counter `name` (exposed as `fastfwd_NAME_total`)
    /// with `labels`.
    pub fn counter(&mut self, name: &'static str, help: &str, labels: &[(&str, &str)], value: u64) {
        let f = self.counters(name, help);
        f.get_or_create(&owned(labels)).inc_by(value);
    }

    /// Sets gauge `name` (`fastfwd_NAME`) with `labels` to `value`.
    pub fn gauge(&mut self, name: &'static str, help: &str, labels: &[(&str, &str)], value: u64) {
        let f = self.gauges(name, help);
        f.get_or_create(&owned(labels)).set(value);
    }

    /// The OpenMetrics text, ending with `# EOF`.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out = "# EOF\n".into();
        }
        out
    }
}

fn owned(labels: &[(&str, &str)]) -> Labels {
    labels
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

/// Whether `addr` may serve metrics without `--metrics-public`.
pub fn is_local(addr: &std::net::SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// The longest request head (request line and headers) read.
pub const MAX_REQUEST_HEAD: usize = 8 << 10;
/// Connections open at once; the oldest is closed for a new one.
pub const MAX_HTTP_CONNECTIONS: usize = 16;
/// How long a connection may take to send its request head.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// How long writing one response may take (a client that does not read
/// holds the metrics thread, and nothing else, this long).
pub const RESPONSE_DEADLINE: Duration = Duration::from_secs(2);

/// The metrics listener, bound before the daemon drops its privileges
/// (a port below 1024 needs them); served after, by [`serve`].
pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let l = TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// A connection reading its request head.
struct Conn {
    stream: TcpStream,
    head: Vec<u8>,
    opened: Instant,
}

/// Serves `GET /metrics` on `listener` until `stop` is set, answering with
/// the daemon's `show metrics` over its control socket at `socket`. One
/// thread, no thread per connection: connections are read without
/// blocking, a request head is at most [`MAX_REQUEST_HEAD`] bytes and must
/// arrive within [`REQUEST_DEADLINE`], at most [`MAX_HTTP_CONNECTIONS`] are
/// open, each gets one response (`Connection: close`) written within
/// [`RESPONSE_DEADLINE`]. An accept error (descriptors exhausted) is waited
/// out, never the end of the listener.
pub fn serve(listener: &TcpListener, socket: &Path, stop: &AtomicBool) {
    let mut conns: Vec<Conn> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let mut fds = vec![listener.as_raw_fd()];
        fds.extend(conns.iter().map(|c| c.stream.as_raw_fd()));
        if netio::sys::os::poll_readable(&fds, 100).is_err() {
            std::thread::sleep(Duration::from_millis(100));
        }
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    if conns.len() >= MAX_HTTP_CONNECTIONS {
                        conns.remove(0);
                    }
                    conns.push(Conn {
                        stream,
                        head: Vec::new(),
                        opened: Instant::now(),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    // Out of descriptors, or a connection reset before it
                    // was accepted: try again at the next round.
                    break;
                }
            }
        }
        let now = Instant::now();
        conns.retain_mut(|c| {
            if now.duration_since(c.opened) > REQUEST_DEADLINE {
                return false;
            }
            match read_head(c) {
                HeadState::Waiting => true,
                HeadState::Closed => false,
                HeadState::Complete(request_line) => {
                    respond(&mut c.stream, &request_line, socket);
                    false
                }
                HeadState::TooLong => {
                    let _ = write_response(
                        &mut c.stream,
                        "431 Request Header Fields Too Large",
                        "text/plain",
                        "request head too large\n",
                    );
                    false
                }
            }
        });
    }
}

enum HeadState {
    Waiting,
    Closed,
    TooLong,
    /// The request line.
    Complete(String),
}

fn read_head(c: &mut Conn) -> HeadState {
    let mut buf = [0u8; 2048];
    loop {
        match c.stream.read(&mut buf) {
            Ok(0) => return HeadState::Closed,
            Ok(n) => {
                c.head.extend_from_slice(&buf[..n]);
                match parse_head(&c.head) {
                    Head::Incomplete => {}
                    Head::TooLong => return HeadState::TooLong,
                    Head::Complete(line) => return HeadState::Complete(line),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return HeadState::Waiting,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return HeadState::Closed,
        }
    }
}

/// What the bytes of a request received so far hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// No end of head yet, and within [`MAX_REQUEST_HEAD`].
    Incomplete,
    /// Past [`MAX_REQUEST_HEAD`] with no end of head.
    TooLong,
    /// A head ended by an empty line: its request line, trimmed (a line
    /// without line breaks).
    Complete(String),
}

/// Reads the head of an HTTP request from the bytes received so far: a
/// head ends at the first empty line (CRLF CRLF, or LF LF); only its first
/// line is used. Bytes past [`MAX_REQUEST_HEAD`] are never looked at.
pub fn parse_head(received: &[u8]) -> Head {
    let seen = &received[..received.len().min(MAX_REQUEST_HEAD + 4)];
    let end = find(seen, b"\r\n\r\n").or_else(|| find(seen, b"\n\n"));
    match end {
        Some(end) if end <= MAX_REQUEST_HEAD => {
            let line = seen[..end].split(|&b| b == b'\n').next().unwrap_or(&[]);
            let text = String::from_utf8_lossy(line);
            Head::Complete(text.trim().replace(['\r', '\n'], ""))
        }
        _ if received.len() > MAX_REQUEST_HEAD => Head::TooLong,
        _ => Head::Incomplete,
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// What a request line is answered with: (status, content type, body).
pub fn route(
    request_line: &str,
    metrics: impl FnOnce() -> Result<String, String>,
) -> (&'static str, &'static str, String) {
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" || path != "/metrics" {
        return (
            "404 Not Found",
            "text/plain",
            "not found: try GET /metrics\n".into(),
        );
    }
    match metrics() {
        Ok(text) => ("200 OK", OPENMETRICS, text),
        Err(e) => ("503 Service Unavailable", "text/plain", format!("{e}\n")),
    }
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn respond(stream: &mut TcpStream, request_line: &str, socket: &Path) {
    let (status, kind, body) = route(request_line, || {
        match control::server::request(socket, &control::Request::ShowMetrics) {
            Ok(r) if r.ok => Ok(r
                .result
                .as_ref()
                .and_then(serde_json::Value::as_str)
                .unwrap_or("# EOF\n")
                .to_string()),
            Ok(r) => Err(r.error.unwrap_or_default()),
            Err(e) => Err(e.to_string()),
        }
    });
    // A client that went away, or does not read, is not the daemon's
    // problem.
    let _ = write_response(stream, status, kind, &body);
}

fn write_response(
    stream: &mut TcpStream,
    status: &str,
    kind: &str,
    body: &str,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(RESPONSE_DEADLINE))?;
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// One HTTP exchange: the status line of the reply.
    fn get(addr: std::net::SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(request).unwrap();
        let mut reply = String::new();
        let _ = s.read_to_string(&mut reply);
        reply.lines().next().unwrap_or("").to_string()
    }

    /// A head ends at its first empty line; only the request line is kept;
    /// nothing past the size limit is looked at.
    #[test]
    fn request_heads_are_read_to_their_first_empty_line() {
        let line = |s: &str| Head::Complete(s.into());
        assert_eq!(parse_head(b"GET /metrics HTTP/1.1\r\n"), Head::Incomplete);
        assert_eq!(
            parse_head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nrest"),
            line("GET /metrics HTTP/1.1")
        );
        assert_eq!(parse_head(b"GET / HTTP/1.0\n\n"), line("GET / HTTP/1.0"));
        assert_eq!(parse_head(b"\r\n\r\n"), line(""));
        let mut long = vec![b'a'; MAX_REQUEST_HEAD];
        assert_eq!(parse_head(&long), Head::Incomplete);
        long.push(b'a');
        assert_eq!(parse_head(&long), Head::TooLong);
        // An end of head past the limit does not count.
        long.extend_from_slice(b"\r\n\r\n");
        assert_eq!(parse_head(&long), Head::TooLong);
    }

    /// Requests are routed by method and path only.
    #[test]
    fn routes_get_metrics_only() {
        let ok = || Ok("x 1\n# EOF\n".to_string());
        assert_eq!(route("GET /metrics HTTP/1.1", ok).0, "200 OK");
        assert_eq!(route("GET /metrics?x=1 HTTP/1.0", ok).0, "200 OK");
        assert_eq!(route("POST /metrics HTTP/1.1", ok).0, "404 Not Found");
        assert_eq!(route("GET / HTTP/1.1", ok).0, "404 Not Found");
        assert_eq!(route("", ok).0, "404 Not Found");
        let down = || Err("control socket: gone".to_string());
        assert_eq!(
            route("GET /metrics HTTP/1.1", down).0,
            "503 Service Unavailable"
        );
    }

    /// Clients that hold connections open without a request, one that
    /// sends an endless head, and one that never reads: a plain request
    /// is still answered at once, and every connection is gone after the
    /// deadline.
    #[test]
    fn hostile_http_clients_are_bounded() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let socket = std::path::PathBuf::from("/nonexistent/fastfwd.sock");
        let server = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || serve(&listener, &socket, &stop))
        };
        // 40 idle connections (more than the cap), a slow head.
        let idle: Vec<TcpStream> = (0..40).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let mut slow = TcpStream::connect(addr).unwrap();
        slow.write_all(b"GET /metr").unwrap();
        // An endless head: refused with 431.
        let mut long = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        long.extend(std::iter::repeat_n(b'a', 64 << 10));
        let t = Instant::now();
        assert_eq!(
            get(addr, &long),
            "HTTP/1.1 431 Request Header Fields Too Large"
        );
        // A plain request: answered (the control socket is absent: 503)
        // at once, and a wrong path gets 404.
        assert_eq!(
            get(addr, b"GET /metrics HTTP/1.1\r\n\r\n"),
            "HTTP/1.1 503 Service Unavailable"
        );
        assert_eq!(
            get(addr, b"GET /x HTTP/1.1\r\n\r\n"),
            "HTTP/1.1 404 Not Found"
        );
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        // After the deadline every idle connection was closed.
        std::thread::sleep(REQUEST_DEADLINE + Duration::from_millis(500));
        for mut c in idle.into_iter().chain([slow]) {
            c.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            let mut b = [0u8; 16];
            match c.read(&mut b) {
                Ok(0) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
                other => panic!("still open after the deadline: {other:?}"),
            }
        }
        stop.store(true, Ordering::SeqCst);
        server.join().unwrap();
    }

    #[test]
    fn encodes_counters_and_gauges_with_labels() {
        let mut s = Scrape::new();
        s.counter(
            "drops",
            "Frames dropped, by reason.",
            &[("reason", "no_route")],
            7,
        );
        s.counter(
            "drops",
            "Frames dropped, by reason.",
            &[("reason", "ttl_expired")],
            2,
        );
        s.counter(
            "drops",
            "Frames dropped, by reason.",
            &[("reason", "no_route")],
            1,
        );
        s.gauge(
            "fib_routes",
            "Routes in the FIB.",
            &[("family", "ipv4")],
            901_811,
        );
        let text = s.encode();
        assert!(text.contains("# TYPE fastfwd_drops counter"), "{text}");
        assert!(
            text.contains("fastfwd_drops_total{reason=\"no_route\"} 8"),
            "{text}"
        );
        assert!(
            text.contains("fastfwd_drops_total{reason=\"ttl_expired\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("fastfwd_fib_routes{family=\"ipv4\"} 901811"),
            "{text}"
        );
        assert!(
            text.contains("# HELP fastfwd_drops Frames dropped, by reason.\n"),
            "one full stop after the help text: {text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(is_local(&"127.0.0.1:9100".parse().unwrap()));
        assert!(is_local(&"[::1]:9100".parse().unwrap()));
        assert!(!is_local(&"0.0.0.0:9100".parse().unwrap()));
    }
}
