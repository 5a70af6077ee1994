//! What the tables built from a [`Config`] take from it besides its items.
//!
//! The tables themselves are built in one place, `control`'s
//! `RouterState::build_over` (config + kernel mirror + control socket),
//! for the daemon and for replay alike; only a [`Config`] (which exists
//! only once validation passed) goes in, so a configuration is applied
//! whole or not at all.

use crate::Config;
use std::net::IpAddr;

/// The ACL stage a configuration builds: its `[firewall]` rules (forward
/// chain), or accept-all without that section.
pub type ConfigAcl = Option<firewall::PipelineFirewall>;

/// Key of the firewall's connection-table hash in replay's tables (fixed,
/// so that a replay is reproducible; the daemon picks a random one).
pub const FIREWALL_SEED: u64 = 0x6661_7374_6677_6400;

/// Whether `ip` is an address of the configured router (any interface).
pub fn is_router_address(cfg: &Config, ip: IpAddr) -> bool {
    cfg.interfaces.iter().any(|i| i.has_address(ip))
}
