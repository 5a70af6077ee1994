//! The one route decision: for a prefix of a table, which source's route
//! fastfwd installs, and what it does.
//!
//! Precedence, highest first: the control socket's static route, the
//! config file's, the connected subnet of an interface address, then the
//! kernel's route of the lowest metric (for IPv4 with several of that
//! metric, the one the kernel uses: see [`KernelState`]). A static route
//! that names an interface fastfwd does not have is passed over (and
//! reported); a kernel route is used as it is or not at all: a discarding
//! route discards, a forwarding one is installed only when every next hop
//! leaves through an interface fastfwd forwards on. One that leaves through
//! another link is [`Decision::Foreign`]: fastfwd installs nothing for the
//! prefix, and its consumers name it.
//!
//! The full build asks this for every prefix it installs, the incremental
//! update for each changed prefix, and the compiler of the tables policy
//! rules look up for each of their prefixes (tables other than main have
//! kernel routes only).

use crate::event::RT_TABLE_MAIN;
use crate::kernel::{KernelRoute, KernelState, ResolvedRoute};
use config::hop::NamedHop;
use pipeline::{InterfaceId, NextHop, RouteTarget};
use serde::{Deserialize, Serialize};
use wire::Cidr;

/// Where a route or neighbour came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// The connected subnet of an interface address.
    Connected,
    /// The kernel (`ip route`, `ip neigh`, ARP/ND, a routing daemon).
    Kernel,
    /// The config file.
    Config,
    /// The control socket (`fastfwd route add`).
    Api,
}

impl Origin {
    /// The name the protocol and `show` use (`proto NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Origin::Connected => "connected",
            Origin::Kernel => "kernel",
            Origin::Config => "config",
            Origin::Api => "api",
        }
    }
}

/// The interfaces fastfwd forwards on, as sources name them.
pub trait Interfaces {
    /// The interface called `name` (static routes name theirs).
    fn by_name(&self, name: &str) -> Option<InterfaceId>;
    /// The untagged interface on kernel link `ifindex` (kernel routes
    /// name links).
    fn by_ifindex(&self, ifindex: u32) -> Option<InterfaceId>;
}

/// What the sources other than the kernel hold for one prefix.
#[derive(Debug, Clone, Copy, Default)]
pub struct Statics<'a> {
    /// The control socket's route.
    pub api: Option<&'a [NamedHop]>,
    /// The config file's route.
    pub config: Option<&'a [NamedHop]>,
    /// The prefix is the connected subnet of an interface address.
    pub connected: bool,
}

/// What fastfwd installs for a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// This target, from this source.
    Route(Origin, RouteTarget),
    /// The connected subnet's own target (the tables builder makes it).
    Connected,
    /// The kernel's route leaves through this link, which fastfwd does not
    /// forward on: nothing is installed, and the route is named.
    Foreign(u32),
    /// No route.
    None,
}

/// The route of `prefix` in `table` from `statics` and the kernel, over
/// the interfaces `ifs`; and the source of a static route passed over
/// because it names an interface `ifs` lacks (the highest such). Tables
/// other than main hold kernel routes only.
pub fn best(
    table: u32,
    prefix: Cidr,
    statics: Statics<'_>,
    kernel: &KernelState,
    ifs: &impl Interfaces,
) -> (Decision, Option<Origin>) {
    let statics = if table == RT_TABLE_MAIN {
        statics
    } else {
        Statics::default()
    };
    choose(statics, kernel.route_of(table, prefix), kernel, ifs)
}

/// [`best`] with the kernel's route of the prefix already looked up
/// (`KernelState::route_of`): a full build walking the kernel's routes
/// in order passes each as it comes.
pub fn choose(
    statics: Statics<'_>,
    kernel_route: Option<&KernelRoute>,
    kernel: &KernelState,
    ifs: &impl Interfaces,
) -> (Decision, Option<Origin>) {
    let mut passed_over = None;
    for (origin, hops) in [(Origin::Api, statics.api), (Origin::Config, statics.config)] {
        let Some(hops) = hops else {
            continue;
        };
        let mapped: Option<Vec<NextHop>> = hops
            .iter()
            .map(|h| {
                ifs.by_name(&h.interface).map(|interface| NextHop {
                    interface,
                    gateway: h.via,
                })
            })
            .collect();
        match mapped {
            Some(h) if !h.is_empty() => {
                return (
                    Decision::Route(origin, RouteTarget::Forward(h)),
                    passed_over,
                );
            }
            _ => passed_over = passed_over.or(Some(origin)),
        }
    }
    if statics.connected {
        return (Decision::Connected, passed_over);
    }
    let decision = match kernel_route {
        Some(route) => kernel_decision(route, kernel, ifs),
        None => Decision::None,
    };
    (decision, passed_over)
}

/// What kernel route `route` does through fastfwd's interfaces: a
/// discard, a forward through all its next hops, nothing (its nexthop
/// object is unknown, its next hops all dead, or it leaves through the
/// loopback device), or [`Decision::Foreign`].
pub fn kernel_decision(
    route: &KernelRoute,
    kernel: &KernelState,
    ifs: &impl Interfaces,
) -> Decision {
    match kernel.resolve(route) {
        None => Decision::None,
        Some(ResolvedRoute::Discard(d)) => Decision::Route(Origin::Kernel, RouteTarget::Discard(d)),
        Some(ResolvedRoute::Via(h)) if h.is_empty() => Decision::None,
        Some(ResolvedRoute::Via(h)) => {
            let mut out = Vec::with_capacity(h.len());
            for x in h.iter() {
                match ifs.by_ifindex(x.ifindex) {
                    Some(interface) => out.push(NextHop {
                        interface,
                        gateway: x.gateway,
                    }),
                    None if kernel.is_loopback(x.ifindex) => return Decision::None,
                    None => return Decision::Foreign(x.ifindex),
                }
            }
            Decision::Route(Origin::Kernel, RouteTarget::Forward(out))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, KernelHop};
    use pipeline::Discard;
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::net::IpAddr;

    /// Ports 5 ("d0", interface 0) and 6 ("d1", interface 1); link 7 is
    /// another device, link 1 the loopback.
    struct Ports;

    impl Interfaces for Ports {
        fn by_name(&self, name: &str) -> Option<InterfaceId> {
            ["d0", "d1"]
                .iter()
                .position(|n| *n == name)
                .map(|i| i as InterfaceId)
        }
        fn by_ifindex(&self, ifindex: u32) -> Option<InterfaceId> {
            match ifindex {
                5 => Some(0),
                6 => Some(1),
                _ => None,
            }
        }
    }

    fn links() -> KernelState {
        let mut k = KernelState::default();
        for (i, name) in [(1u32, "lo"), (5, "d0"), (6, "d1"), (7, "eth9")] {
            k.apply(&Event::Link {
                add: true,
                ifindex: i,
                name: name.into(),
                mac: None,
                mtu: None,
                up: true,
                vrf: None,
                master: None,
                kind: None,
                vlan: None,
            });
        }
        k
    }

    fn gw(link: u32) -> Option<IpAddr> {
        Some(IpAddr::from([192, 0, 2, link as u8]))
    }

    /// The reference: every candidate in one list, ranked (control
    /// socket, config, connected, then kernel routes by metric), and the
    /// first that can be used decides; a kernel route is used whole or
    /// not at all.
    fn reference(
        api: &Option<Vec<&'static str>>,
        config: &Option<Vec<&'static str>>,
        connected: bool,
        kernel: &HashMap<u32, Vec<u32>>,
    ) -> Decision {
        let mut ranked: Vec<(u64, Decision)> = Vec::new();
        for (rank, origin, hops) in [(0, Origin::Api, api), (1, Origin::Config, config)] {
            let Some(hops) = hops else { continue };
            let ids: Option<Vec<NextHop>> = hops
                .iter()
                .map(|n| {
                    Ports.by_name(n).map(|interface| NextHop {
                        interface,
                        gateway: None,
                    })
                })
                .collect();
            if let Some(ids) = ids.filter(|h| !h.is_empty()) {
                ranked.push((rank, Decision::Route(origin, RouteTarget::Forward(ids))));
            }
        }
        if connected {
            ranked.push((2, Decision::Connected));
        }
        if let Some((&metric, links)) = kernel.iter().min_by_key(|(m, _)| **m) {
            let d = if links.is_empty() {
                Decision::Route(Origin::Kernel, RouteTarget::Discard(Discard::Blackhole))
            } else if let Some(&l) = links.iter().find(|&&l| Ports.by_ifindex(l).is_none()) {
                if l == 1 {
                    Decision::None
                } else {
                    Decision::Foreign(l)
                }
            } else {
                let hops = links
                    .iter()
                    .map(|&l| NextHop {
                        interface: Ports.by_ifindex(l).unwrap(),
                        gateway: gw(l),
                    })
                    .collect();
                Decision::Route(Origin::Kernel, RouteTarget::Forward(hops))
            };
            ranked.push((3 + u64::from(metric), d));
        }
        ranked.sort_by_key(|(r, _)| *r);
        ranked.into_iter().next().map_or(Decision::None, |(_, d)| d)
    }

    fn statics() -> impl Strategy<Value = Option<Vec<&'static str>>> {
        prop::option::of(prop::collection::vec(
            prop::sample::select(vec!["d0", "d1", "gone"]),
            1..3,
        ))
    }

    proptest! {
        #[test]
        fn best_agrees_with_a_ranked_list_of_every_candidate(
            api in statics(),
            config in statics(),
            connected in any::<bool>(),
            kernel in prop::collection::vec(
                (0..4u32, prop::collection::vec(prop::sample::select(vec![5u32, 6, 7, 1]), 0..3)),
                0..4,
            ),
        ) {
            let prefix: Cidr = "10.0.0.0/8".parse().unwrap();
            let mut k = links();
            let mut model: HashMap<u32, Vec<u32>> = HashMap::new();
            for (metric, hops) in kernel {
                let (kind, hops_ev) = if hops.is_empty() {
                    (libc::RTN_BLACKHOLE, Vec::new())
                } else {
                    let h = hops.iter().map(|&l| KernelHop { ifindex: l, gateway: gw(l) }).collect();
                    (libc::RTN_UNICAST, h)
                };
                // `ip route replace`: one route per metric.
                k.apply(&Event::Route {
                    add: true,
                    prefix,
                    table: RT_TABLE_MAIN,
                    kind,
                    metric,
                    hops: hops_ev,
                    nh_id: None,
                    detail: crate::event::RouteDetail {
                        placement: crate::event::Placement::Replace,
                        ..Default::default()
                    },
                });
                model.insert(metric, hops);
            }
            let named = |s: &Option<Vec<&'static str>>| -> Option<Vec<NamedHop>> {
                s.as_ref().map(|v| {
                    v.iter()
                        .map(|n| NamedHop { interface: (*n).into(), via: None })
                        .collect()
                })
            };
            let (a, c) = (named(&api), named(&config));
            let s = Statics { api: a.as_deref(), config: c.as_deref(), connected };
            let (got, passed_over) = best(RT_TABLE_MAIN, prefix, s, &k, &Ports);
            prop_assert_eq!(got, reference(&api, &config, connected, &model));
            let gone = |s: &Option<Vec<&str>>| s.as_ref().is_some_and(|v| v.contains(&"gone"));
            let expect_passed = if gone(&api) {
                Some(Origin::Api)
            } else if gone(&config) && api.is_none() {
                Some(Origin::Config)
            } else {
                None
            };
            prop_assert_eq!(passed_over, expect_passed);
            // Another table holds no static or connected route.
            let (other, _) = best(100, prefix, s, &k, &Ports);
            prop_assert_eq!(other, Decision::None);
        }
    }
}
