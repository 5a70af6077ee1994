//! The UDP socket receive benchmark of the Linux netdev "udp: receive path
//! optimizations" thread: receive `count` datagrams on one port with
//! `recvmmsg` (batched), `recvmsg`, `read` or `recvfrom`, optionally
//! `connect`ed to the sender after the first datagram, and print one row
//! per run: method, run, count, ns per packet, packets per second, cycles
//! per packet (ns x the CPU clock from /proc/cpuinfo).

use crate::sys;
use serde::Serialize;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// A receive call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Method {
    /// `recvmmsg` with this batch size.
    RecvMmsg(usize),
    /// `recvmsg`.
    RecvMsg,
    /// `read`.
    Read,
    /// `recvfrom`.
    RecvFrom,
}

impl Method {
    /// The row label (`recvMmsg/32`, `recvmsg`, `read`, `recvfrom`).
    pub fn label(&self) -> String {
        match self {
            Self::RecvMmsg(b) => format!("recvMmsg/{b}"),
            Self::RecvMsg => "recvmsg".into(),
            Self::Read => "read".into(),
            Self::RecvFrom => "recvfrom".into(),
        }
    }

    /// Parses `recvmmsg`, `recvmsg`, `read`, `recvfrom` (`recvmmsg` takes `batch`).
    pub fn parse(text: &str, batch: usize) -> Option<Self> {
        match text.to_ascii_lowercase().as_str() {
            "recvmmsg" => Some(Self::RecvMmsg(batch)),
            "recvmsg" => Some(Self::RecvMsg),
            "read" => Some(Self::Read),
            "recvfrom" => Some(Self::RecvFrom),
            _ => None,
        }
    }

    /// Every method, in the seed's order.
    pub fn all(batch: usize) -> Vec<Self> {
        vec![
            Self::RecvMmsg(batch),
            Self::RecvMsg,
            Self::Read,
            Self::RecvFrom,
        ]
    }
}

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct SinkRow {
    /// Method label.
    pub method: String,
    /// Run number (from 0).
    pub run: u32,
    /// Datagrams received.
    pub count: u64,
    /// Nanoseconds per datagram.
    pub ns_per_pkt: f64,
    /// Datagrams per second.
    pub pps: f64,
    /// CPU cycles per datagram.
    pub cycles_per_pkt: f64,
}

impl SinkRow {
    /// The row as the seed prints it:
    /// `recvMmsg/32  \trun: 0 10000000\t537.70\t1859756.90\t2155`.
    pub fn line(&self) -> String {
        let label = if self.method.len() < 10 {
            format!("{:<10}", self.method)
        } else {
            format!("{}  ", self.method)
        };
        format!(
            "{label}\trun: {} {}\t{:.2}\t{:.2}\t{:.0}",
            self.run, self.count, self.ns_per_pkt, self.pps, self.cycles_per_pkt
        )
    }
}

/// The column header the seed prints above the rows.
pub fn header() -> String {
    format!("{:>32}\t{:<8}{:<16}{}", "ns/pkt", "", "pps", "cycles/pkt")
}

/// What to receive.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// Address and port to bind.
    pub bind: SocketAddr,
    /// Methods, each run `repeat` times in turn.
    pub methods: Vec<Method>,
    /// Datagrams per run.
    pub count: u64,
    /// Runs per method.
    pub repeat: u32,
    /// `connect` to the first datagram's sender.
    pub connect: bool,
    /// Give up when nothing arrives for this long.
    pub idle_timeout: Duration,
}

/// UDP sink errors.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// A socket call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The system error.
        source: std::io::Error,
    },
    /// Nothing arrived for the idle timeout.
    #[error("{method}: timed out after {got} of {want} datagrams")]
    Timeout {
        /// Method label.
        method: String,
        /// Received so far.
        got: u64,
        /// Wanted.
        want: u64,
    },
}

/// The CPU clock in MHz (the first `cpu MHz` line of /proc/cpuinfo).
pub fn cpu_mhz() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines()
        .find(|l| l.starts_with("cpu MHz"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.trim().parse().ok())
}

/// Binds the socket (large receive buffer), so a sender can start.
pub fn bind(cfg: &SinkConfig) -> Result<UdpSocket, SinkError> {
    let sock = UdpSocket::bind(cfg.bind).map_err(|e| SinkError::Io {
        what: format!("bind {}", cfg.bind),
        source: e,
    })?;
    let _ = sys::set_rcvbuf(&sock, 32 << 20);
    Ok(sock)
}

/// Runs every method `repeat` times on a bound socket, calling `on_row`
/// after each run.
pub fn run(
    sock: &UdpSocket,
    cfg: &SinkConfig,
    mut on_row: impl FnMut(&SinkRow),
) -> Result<Vec<SinkRow>, SinkError> {
    sock.set_read_timeout(Some(cfg.idle_timeout))
        .map_err(|e| SinkError::Io {
            what: "SO_RCVTIMEO".into(),
            source: e,
        })?;
    let mhz = cpu_mhz().unwrap_or(0.0);
    let mut rows = Vec::new();
    let mut connected = false;
    for &method in &cfg.methods {
        let batch = match method {
            Method::RecvMmsg(b) => b.max(1),
            _ => 1,
        };
        let mut rx = sys::UdpRecv::new(sock, batch, 2048);
        for run in 0..cfg.repeat {
            let label = method.label();
            let timeout = |got| {
                move |e: std::io::Error| match e.kind() {
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                        SinkError::Timeout {
                            method: method.label(),
                            got,
                            want: cfg.count,
                        }
                    }
                    _ => SinkError::Io {
                        what: method.label(),
                        source: e,
                    },
                }
            };
            // The clock starts at the first datagram, as the seed's tool does.
            let mut first = [0u8; 2048];
            let (_, from): (usize, SocketAddr) = sock.recv_from(&mut first).map_err(timeout(0))?;
            if cfg.connect && !connected {
                sock.connect(from).map_err(|e| SinkError::Io {
                    what: format!("connect {from}"),
                    source: e,
                })?;
                connected = true;
            }
            let start = Instant::now();
            let mut got = 1u64;
            while got < cfg.count {
                let n = match method {
                    Method::RecvMmsg(_) => rx.recv_mmsg(),
                    Method::RecvMsg => rx.recv_msg().map(|_| 1),
                    Method::Read => rx.read().map(|_| 1),
                    Method::RecvFrom => rx.recv_from().map(|_| 1),
                }
                .map_err(timeout(got))?;
                got += n as u64;
            }
            let ns = start.elapsed().as_nanos() as f64;
            let per = ns / (got.max(2) - 1) as f64;
            let row = SinkRow {
                method: label,
                run,
                count: got,
                ns_per_pkt: per,
                pps: 1e9 / per,
                cycles_per_pkt: per * mhz / 1000.0,
            };
            on_row(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_match_the_seed_layout() {
        let r = SinkRow {
            method: "recvMmsg/32".into(),
            run: 0,
            count: 10_000_000,
            ns_per_pkt: 537.70,
            pps: 1_859_756.90,
            cycles_per_pkt: 2155.0,
        };
        assert_eq!(
            r.line(),
            "recvMmsg/32  \trun: 0 10000000\t537.70\t1859756.90\t2155"
        );
        let r = SinkRow {
            method: "recvmsg".into(),
            run: 0,
            count: 10_000_000,
            ns_per_pkt: 510.84,
            pps: 1_957_541.83,
            cycles_per_pkt: 2047.0,
        };
        assert_eq!(
            r.line(),
            "recvmsg   \trun: 0 10000000\t510.84\t1957541.83\t2047"
        );
        assert_eq!(Method::parse("RECVMMSG", 8), Some(Method::RecvMmsg(8)));
        assert_eq!(Method::all(32).len(), 4);
    }

    #[test]
    fn loopback_receives_with_each_method() {
        let cfg = SinkConfig {
            bind: "127.0.0.1:0".parse().unwrap(),
            methods: Method::all(4),
            count: 50,
            repeat: 1,
            connect: true,
            idle_timeout: Duration::from_secs(5),
        };
        let sock = bind(&cfg).unwrap();
        let to = sock.local_addr().unwrap();
        let sender = std::thread::spawn(move || {
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            // Enough for 4 runs; the socket buffer holds them all.
            for i in 0..4 * 50 + 4 {
                tx.send_to(&[i as u8; 18], to).unwrap();
            }
        });
        sender.join().unwrap();
        let rows = run(&sock, &cfg, |_| {}).unwrap();
        assert_eq!(rows.len(), 4);
        for r in &rows {
            assert!(r.count >= 50, "{}", r.line());
            assert!(r.pps > 0.0);
        }
    }
}
