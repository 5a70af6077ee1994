//! The control socket's JSON protocol (documented in
//! `docs/control-protocol.md`): one request object per line, answered by
//! one response object per line.

use serde::{Deserialize, Serialize};

/// Default path of the control socket.
pub const DEFAULT_SOCKET: &str = "/run/fastfwd.sock";

/// A request to the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Per-interface counters.
    ShowInterfaces,
    /// Per-worker counters and placement.
    ShowWorkers,
    /// Drops and punts by reason.
    ShowDrops,
    /// The firewall: per-rule counters, connection table.
    ShowFirewall,
    /// Routes, all or the one matching `prefix` (longest match for an address).
    ShowRoute {
        /// A prefix (`10.0.0.0/8`) or an address.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prefix: Option<String>,
    },
    /// Neighbours.
    ShowNeighbors,
    /// Adds or replaces a route held by the daemon.
    RouteAdd {
        /// Destination prefix.
        prefix: String,
        /// Next hops: each `{"via": "gw", "dev": "iface"}` (either may be absent, not both).
        next_hops: Vec<HopSpec>,
    },
    /// Deletes a route added through the control socket.
    RouteDel {
        /// Destination prefix.
        prefix: String,
    },
    /// Adds or replaces a static neighbour.
    NeighborAdd {
        /// Interface name.
        dev: String,
        /// IP address.
        ip: String,
        /// MAC address.
        mac: String,
    },
    /// Deletes a static neighbour added through the control socket.
    NeighborDel {
        /// Interface name.
        dev: String,
        /// IP address.
        ip: String,
    },
    /// Validates a config file without applying it.
    ConfigCheck {
        /// Path; the running config's file when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
    },
    /// Every counter in the OpenMetrics text format (the result is one
    /// string).
    ShowMetrics,
    /// Compares the running tables with the kernel and a fresh build
    /// (`fastfwd fib audit`); streamed: one difference per line, then a
    /// summary.
    FibAudit,
    /// Validates and applies a config file as a whole.
    ConfigReload {
        /// Path; the running config's file when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
    },
}

/// One next hop of [`Request::RouteAdd`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HopSpec {
    /// Gateway address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// Interface name (found from the gateway's subnet when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
}

/// The answer to a request.
///
/// A large answer (`show route` without a prefix) is streamed instead: this
/// line with `stream` set and no `result`, then one JSON value per line,
/// then `{"end":N}` with the number of values sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// Whether the request succeeded.
    pub ok: bool,
    /// The values follow, one per line, until `{"end":N}`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// The result (request-specific), when `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// Why it failed, when not `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Response {
    /// A success carrying `result`.
    pub fn ok(result: impl Serialize) -> Response {
        match serde_json::to_value(result) {
            Ok(v) => Response {
                ok: true,
                stream: false,
                result: Some(v),
                error: None,
            },
            Err(e) => Response::err(format!("encoding the result: {e}")),
        }
    }

    /// A failure.
    pub fn err(msg: impl Into<String>) -> Response {
        Response {
            ok: false,
            stream: false,
            result: None,
            error: Some(msg.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_in_the_documented_form() {
        let r: Request =
            serde_json::from_str(r#"{"op":"show_route","prefix":"10.0.0.0/8"}"#).unwrap();
        assert_eq!(
            r,
            Request::ShowRoute {
                prefix: Some("10.0.0.0/8".into())
            }
        );
        let r: Request = serde_json::from_str(r#"{"op":"show_interfaces"}"#).unwrap();
        assert_eq!(r, Request::ShowInterfaces);
        let r: Request = serde_json::from_str(
            r#"{"op":"route_add","prefix":"10.9.0.0/16","next_hops":[{"via":"198.19.0.108"},{"dev":"d1"}]}"#,
        )
        .unwrap();
        assert_eq!(
            r,
            Request::RouteAdd {
                prefix: "10.9.0.0/16".into(),
                next_hops: vec![
                    HopSpec {
                        via: Some("198.19.0.108".into()),
                        dev: None
                    },
                    HopSpec {
                        via: None,
                        dev: Some("d1".into())
                    }
                ]
            }
        );
        assert_eq!(
            serde_json::to_string(&Request::ShowDrops).unwrap(),
            r#"{"op":"show_drops"}"#
        );
        assert!(serde_json::from_str::<Request>(r#"{"op":"reboot"}"#).is_err());
    }

    #[test]
    fn responses_carry_result_or_error() {
        assert_eq!(
            serde_json::to_string(&Response::ok(3)).unwrap(),
            r#"{"ok":true,"result":3}"#
        );
        assert_eq!(
            serde_json::to_string(&Response::err("no")).unwrap(),
            r#"{"ok":false,"error":"no"}"#
        );
    }
}
