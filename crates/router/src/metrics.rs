//! The daemon's counters in the OpenMetrics text format (Prometheus):
//! `fastfwd show metrics`, and `fastfwd run --metrics ADDR:PORT` serving
//! `GET /metrics` over HTTP.
//!
//! Each scrape is a snapshot: the control loop sums the workers' reports
//! and the XDP program's per-CPU counters into a fresh registry and encodes
//! it (`prometheus-client`). The HTTP thread asks over the control socket,
//! like any client, so it never touches the daemon's state.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

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

/// Serves `GET /metrics` on `server` until it is unblocked, answering with
/// the daemon's `show metrics` over its control socket at `socket`.
pub fn serve(server: &tiny_http::Server, socket: &std::path::Path) {
    let content_type = tiny_http::Header::from_bytes(
        &b"Content-Type"[..],
        &b"application/openmetrics-text; version=1.0.0; charset=utf-8"[..],
    )
    .ok();
    for req in server.incoming_requests() {
        let path = req.url().split('?').next().unwrap_or("");
        let resp = if *req.method() != tiny_http::Method::Get || path != "/metrics" {
            tiny_http::Response::from_string("not found: try GET /metrics\n").with_status_code(404)
        } else {
            match control::server::request(socket, &control::Request::ShowMetrics) {
                Ok(r) if r.ok => {
                    let text = r
                        .result
                        .as_ref()
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or("# EOF\n")
                        .to_string();
                    let mut resp = tiny_http::Response::from_string(text);
                    if let Some(h) = content_type.clone() {
                        resp = resp.with_header(h);
                    }
                    resp
                }
                Ok(r) => tiny_http::Response::from_string(r.error.unwrap_or_default())
                    .with_status_code(500),
                Err(e) => tiny_http::Response::from_string(e.to_string()).with_status_code(503),
            }
        };
        // A client that went away is not the daemon's problem.
        let _ = req.respond(resp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
