//! From a validated [`Config`] to the pipeline's runtime tables.
//!
//! Only a [`Config`] (which exists only once validation passed) can be
//! turned into tables, so a configuration is applied whole or not at all.
//! Ports are numbered in the order the file first names them.

use crate::Config;
use fib::RouteTable;
use pipeline::{InterfaceId, PortId, Tables, TablesBuilder, Vlan};
use std::net::IpAddr;
use wire::Cidr;

/// The ACL stage a configuration builds: its `[firewall]` rules (forward
/// chain), or accept-all without that section.
pub type ConfigAcl = Option<firewall::PipelineFirewall>;

/// Key of the firewall's connection-table hash in the tables built here
/// (fixed, so that a replay is reproducible).
pub const FIREWALL_SEED: u64 = 0x6661_7374_6677_6400;

/// The pipeline's tables for a configuration, with the port numbering used.
#[derive(Debug)]
pub struct Runtime<F4, F6> {
    /// The tables the workers read; the ACL is the config's firewall.
    pub tables: Tables<F4, F6, ConfigAcl>,
    /// Port names (kernel interfaces), indexed by [`PortId`].
    pub ports: Vec<String>,
}

impl<F4, F6> Runtime<F4, F6> {
    /// The id of a port, by its kernel name.
    pub fn port_id(&self, port: &str) -> Option<PortId> {
        self.ports
            .iter()
            .position(|p| p == port)
            .map(|i| i as PortId)
    }

    /// The port name of a port id.
    pub fn port_name(&self, id: PortId) -> Option<&str> {
        self.ports.get(usize::from(id)).map(String::as_str)
    }
}

/// The pipeline refused something the config validation let through (a
/// limit of the pipeline, e.g. its ECMP width). Names the config item.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {item}: {source}")]
pub struct BuildError {
    /// The config file.
    pub file: String,
    /// Which item (`interfaces[d0]`, `routes[10.0.0.0/8]`, ...).
    pub item: String,
    /// What the pipeline said.
    #[source]
    pub source: pipeline::TableError,
}

impl Config {
    /// Builds the pipeline's tables over the given (empty) route tables:
    /// interfaces and their connected subnets, static routes (each a
    /// next-hop set), static neighbours, and the `[firewall]` rules as the
    /// ACL stage. Interface ids follow [`Config::interfaces`], the order the
    /// firewall was compiled with.
    pub fn build_tables<F4, F6>(
        &self,
        mut fib4: F4,
        mut fib6: F6,
    ) -> Result<Runtime<F4, F6>, BuildError>
    where
        F4: RouteTable<u32>,
        F6: RouteTable<u128>,
    {
        let err = |item: String, source| BuildError {
            file: self.file.clone(),
            item,
            source,
        };
        let ports: Vec<String> = self.ports().into_iter().map(str::to_owned).collect();
        let mut b = TablesBuilder::new();
        let mut ids: Vec<(String, InterfaceId)> = Vec::new();
        for i in &self.interfaces {
            let port = ports.iter().position(|p| *p == i.port).unwrap_or(0) as PortId;
            let id = b
                .add_interface(pipeline::Interface {
                    name: i.name.clone(),
                    port,
                    vlan: match i.vlan {
                        None => Vlan::Untagged,
                        Some(v) => Vlan::Single(v),
                    },
                    mac: wire::MacAddr(i.mac.0),
                    ipv4: i
                        .ipv4
                        .iter()
                        .map(|a| pipeline::Ipv4IfAddr {
                            addr: a.addr,
                            prefix_len: a.prefix_len,
                        })
                        .collect(),
                    ipv6: i
                        .ipv6
                        .iter()
                        .map(|a| pipeline::Ipv6IfAddr {
                            addr: a.addr,
                            prefix_len: a.prefix_len,
                        })
                        .collect(),
                    mtu: i.mtu,
                })
                .map_err(|e| err(format!("interfaces[{}]", i.name), e))?;
            ids.push((i.name.clone(), id));
        }
        let id_of = |name: &str| -> InterfaceId {
            // Validation resolved every interface name.
            ids.iter()
                .find(|(n, _)| n == name)
                .map(|(_, id)| *id)
                .unwrap_or_default()
        };
        b.install_connected_routes(&mut fib4, &mut fib6);
        for r in &self.routes {
            let hops: Vec<pipeline::NextHop> = r
                .next_hops
                .iter()
                .map(|h| pipeline::NextHop {
                    interface: id_of(&h.interface),
                    gateway: h.via,
                })
                .collect();
            let nh = b
                .add_next_hops(&hops)
                .map_err(|e| err(format!("routes[{}]", r.prefix), e))?;
            match r.prefix {
                Cidr::V4(p) => {
                    fib4.insert(p, nh);
                }
                Cidr::V6(p) => {
                    fib6.insert(p, nh);
                }
            }
        }
        for n in &self.neighbours {
            b.add_neighbour(id_of(&n.interface), n.ip, wire::MacAddr(n.mac.0))
                .map_err(|e| err(format!("neighbours[{} {}]", n.interface, n.ip), e))?;
        }
        let acl = self.firewall.as_ref().map(|f| {
            firewall::PipelineFirewall::new(std::sync::Arc::clone(&f.compiled), FIREWALL_SEED)
        });
        Ok(Runtime {
            tables: b.build_with_acl(fib4, fib6, acl),
            ports,
        })
    }
}

impl Config {
    /// Builds the pipeline's tables over the fast FIB (`fib::poptrie`), the
    /// one `replay` and the daemon forward with.
    pub fn build_fast_tables(
        &self,
    ) -> Result<Runtime<fib::poptrie::Poptrie4, fib::poptrie::Poptrie6>, BuildError> {
        self.build_tables(fib::poptrie::Poptrie4::new(), fib::poptrie::Poptrie6::new())
    }

    /// Builds the pipeline's tables over the reference FIB, the simple one
    /// every faster structure is tested against.
    pub fn build_reference_tables(
        &self,
    ) -> Result<Runtime<fib::reference::ReferenceFib4, fib::reference::ReferenceFib6>, BuildError>
    {
        self.build_tables(
            fib::reference::ReferenceFib4::new(),
            fib::reference::ReferenceFib6::new(),
        )
    }
}

/// Whether `ip` is an address of the configured router (any interface).
pub fn is_router_address(cfg: &Config, ip: IpAddr) -> bool {
    cfg.interfaces.iter().any(|i| i.has_address(ip))
}

#[cfg(test)]
mod tests {
    use crate::Config;
    use fib::reference::{ReferenceFib4, ReferenceFib6};
    use fib::Lookup;
    use std::net::IpAddr;

    const CFG: &str = r#"
[[interfaces]]
name = "d0"
mac = "02:00:00:00:00:10"
addresses = ["198.18.0.10/24", "2001:2::10/64"]

[[interfaces]]
name = "d1"
mac = "02:00:00:00:01:10"
addresses = ["198.19.0.10/24"]
vlans = [{ id = 100, addresses = ["10.100.0.1/24"] }]

[[routes]]
prefix = "203.0.113.0/24"
via = ["198.18.0.108", "198.19.0.108"]

[[neighbours]]
interface = "d0"
ip = "198.18.0.108"
mac = "02:00:00:00:00:08"
"#;

    #[test]
    fn builds_interfaces_routes_and_neighbours() {
        let c = Config::parse("t.toml", CFG).unwrap();
        let rt = c
            .build_tables(ReferenceFib4::new(), ReferenceFib6::new())
            .unwrap();
        assert_eq!(rt.ports, vec!["d0", "d1"]);
        assert_eq!(rt.port_id("d1"), Some(1));
        let t = &rt.tables;
        assert_eq!(t.interfaces().len(), 3);
        let (vid, v) = t.interface_by_name("d1.100").unwrap();
        assert_eq!(vid, 2);
        assert_eq!(v.port, 1);
        assert_eq!(v.vlan, pipeline::Vlan::Single(100));
        // The static route is one next-hop set of two hops.
        let nh = t.fib4.lookup(u32::from_be_bytes([203, 0, 113, 9])).unwrap();
        let hops = t.next_hops(nh).unwrap();
        assert_eq!(hops.len(), 2);
        assert_eq!(hops[0].interface, 0);
        assert_eq!(hops[1].interface, 1);
        // Connected subnets are routed directly on their interface.
        let nh = t.fib4.lookup(u32::from_be_bytes([10, 100, 0, 77])).unwrap();
        let hops = t.next_hops(nh).unwrap();
        assert_eq!((hops[0].interface, hops[0].gateway), (2, None));
        assert!(t
            .fib6
            .lookup(u128::from(
                "2001:2::99".parse::<std::net::Ipv6Addr>().unwrap()
            ))
            .is_some());
        assert!(t.fib4.lookup(u32::from_be_bytes([8, 8, 8, 8])).is_none());
        let ip: IpAddr = "198.18.0.108".parse().unwrap();
        assert_eq!(t.neighbour(0, ip), Some(wire::MacAddr([2, 0, 0, 0, 0, 8])));
        assert!(super::is_router_address(&c, "10.100.0.1".parse().unwrap()));
    }

    #[test]
    fn fast_and_reference_tables_route_alike() {
        let c = Config::parse("t.toml", CFG).unwrap();
        let fast = c.build_fast_tables().unwrap();
        let reference = c.build_reference_tables().unwrap();
        let mut x: u32 = 0x2545_f491;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            // Half the probes inside the configured space, half anywhere.
            let a = if x & 1 == 0 {
                x
            } else {
                (x & 0x0000_ffff) | 0xc612_0000
            };
            assert_eq!(
                fast.tables.fib4.lookup(a),
                reference.tables.fib4.lookup(a),
                "{a:#x}"
            );
            let a6 = (u128::from(x) << 64) | 0x2001_0002_0000_0000_0000_0000_0000_0000;
            assert_eq!(
                fast.tables.fib6.lookup(a6),
                reference.tables.fib6.lookup(a6)
            );
        }
    }
}
