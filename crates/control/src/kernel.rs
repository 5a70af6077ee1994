//! Following the kernel: a dump of links, addresses, routes and neighbours
//! at start, then the RTNLGRP_* broadcasts, applied to a [`KernelState`].
//! Also asks the kernel to resolve neighbours fastfwd misses.

use crate::netlink::{self, msg, Event};
use crate::state::{Change, KernelState};
use std::collections::BTreeSet;
use wire::Cidr;

/// What a burst of kernel events changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Delta {
    /// Prefixes whose kernel routes changed.
    pub routes: BTreeSet<Cidr>,
    /// Some neighbour changed.
    pub neighbours: bool,
    /// Links whose state or addresses changed, by index.
    pub links: BTreeSet<u32>,
    /// Something that can touch every route changed (a nexthop object, a
    /// resync after lost broadcasts).
    pub other: bool,
}

impl Delta {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty() && !self.neighbours && self.links.is_empty() && !self.other
    }
}
use crate::ControlError;
use netio::NetlinkSocket;
use std::net::IpAddr;

/// The two netlink sockets of the control thread.
#[derive(Debug)]
pub struct KernelLink {
    events: NetlinkSocket,
    requests: NetlinkSocket,
    seq: u32,
    buf: Vec<u8>,
}

fn nl_err(what: &str, e: std::io::Error) -> ControlError {
    ControlError::Netlink(format!("{what}: {e}"))
}

impl KernelLink {
    /// Opens the event socket (subscribed to links, neighbours, IPv4/IPv6
    /// addresses and routes) and the request socket.
    pub fn open() -> Result<KernelLink, ControlError> {
        let events =
            NetlinkSocket::new(&netlink::GROUPS).map_err(|e| nl_err("netlink event socket", e))?;
        let requests = NetlinkSocket::new(&[]).map_err(|e| nl_err("netlink request socket", e))?;
        Ok(KernelLink {
            events,
            requests,
            seq: 1,
            buf: vec![0u8; 1 << 16],
        })
    }

    /// The descriptor that becomes readable when the kernel broadcasts a change.
    pub fn events_fd(&self) -> i32 {
        self.events.fd()
    }

    /// Reads the kernel's whole current state into `state` (replacing it).
    pub fn dump(&mut self, state: &mut KernelState) -> Result<(), ControlError> {
        let mut fresh = KernelState::default();
        // Nexthop objects before the routes that name them.
        for ty in [
            msg::RTM_GETLINK,
            msg::RTM_GETADDR,
            msg::RTM_GETNEXTHOP,
            msg::RTM_GETROUTE,
            msg::RTM_GETNEIGH,
        ] {
            self.seq = self.seq.wrapping_add(1);
            let seq = self.seq;
            self.requests
                .send(&netlink::dump_request(ty, seq))
                .map_err(|e| nl_err("netlink dump request", e))?;
            'dump: loop {
                let n = match self.requests.recv(&mut self.buf, false) {
                    Ok(Some(n)) => n,
                    Ok(None) => continue,
                    Err(e) => return Err(nl_err("netlink dump", e)),
                };
                for (t, _, s, body) in netlink::messages(&self.buf[..n]) {
                    if s != seq {
                        continue;
                    }
                    match netlink::parse(t, body) {
                        Some(Event::Done) => break 'dump,
                        // A kernel without nexthop objects (before 5.3) has none to dump.
                        Some(Event::Ack(e)) if e < 0 && ty == msg::RTM_GETNEXTHOP => break 'dump,
                        Some(Event::Ack(e)) if e < 0 => {
                            return Err(nl_err(
                                "netlink dump",
                                std::io::Error::from_raw_os_error(-e),
                            ))
                        }
                        Some(ev) => {
                            fresh.apply(&ev);
                        }
                        None => {}
                    }
                }
            }
        }
        *state = fresh;
        Ok(())
    }

    /// Applies every broadcast waiting on the event socket to `state` and
    /// adds what changed to `delta`. Re-dumps everything if the kernel had
    /// to drop broadcasts (receive buffer overrun).
    pub fn poll_events(
        &mut self,
        state: &mut KernelState,
        delta: &mut Delta,
    ) -> Result<(), ControlError> {
        loop {
            match self.events.recv(&mut self.buf, true) {
                Ok(None) => break,
                Ok(Some(n)) => {
                    for (t, _, _, body) in netlink::messages(&self.buf[..n]) {
                        if let Some(ev) = netlink::parse(t, body) {
                            match state.change(&ev) {
                                Change::None => {}
                                Change::Route(p) => {
                                    delta.routes.insert(p);
                                }
                                Change::Neighbour => delta.neighbours = true,
                                Change::Link(i) => {
                                    delta.links.insert(i);
                                }
                                Change::Other => delta.other = true,
                            }
                        }
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc_enobufs()) => {
                    self.dump(state)?;
                    delta.other = true;
                }
                Err(e) => return Err(nl_err("netlink events", e)),
            }
        }
        self.drain_acks();
        Ok(())
    }

    /// Asks the kernel to resolve `ip` on `ifindex` (ARP / ND); the answer
    /// arrives later as a neighbour broadcast. Does not wait.
    pub fn resolve(&mut self, ifindex: u32, ip: IpAddr) -> Result<(), ControlError> {
        self.seq = self.seq.wrapping_add(1);
        self.requests
            .send(&netlink::resolve_request(ifindex, ip, self.seq))
            .map_err(|e| nl_err("neighbour resolution request", e))
    }

    /// Discards acknowledgements of earlier resolution requests.
    fn drain_acks(&mut self) {
        while let Ok(Some(_)) = self.requests.recv(&mut self.buf, true) {}
    }
}

const fn libc_enobufs() -> i32 {
    105
}
