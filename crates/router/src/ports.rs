//! Opening an interface's ports for the workers: at start, and again when
//! the interface is deleted and re-created while the daemon runs.
//!
//! With AF_XDP every RX queue gets a socket: queue q goes to worker q mod
//! workers (a worker with several queues of one interface serves them as
//! one [`QueueSet`]), so no queue's transit traffic is left to the kernel.
//! With AF_PACKET each worker opens one socket on the interface, all in one
//! fanout group.

use anyhow::{Result, bail};
use netio::packet::{PacketConfig, PacketPort, PacketSendPort};
use netio::xdp::{SocketConfig, XdpPort, XdpProgram};
use netio::{Port, QueueSet, SplitPort};

/// One interface's port in each worker (None: that worker has no socket
/// there).
pub type PerWorker = Vec<Option<Box<dyn Port>>>;

/// A port handed to a running worker: (port id, its socket(s) there, or
/// None to close them).
pub type PortChange = (usize, Option<Box<dyn Port>>);

/// Number of RX queues of a kernel interface.
pub(crate) fn rx_queues(iface: &str) -> u32 {
    std::fs::read_dir(format!("/sys/class/net/{iface}/queues"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count() as u32
        })
        .unwrap_or(1)
        .max(1)
}

/// A worker's sockets on one interface as one port: none, the socket, or
/// a [`QueueSet`] over several queues.
fn one_port(mut socks: Vec<Box<dyn Port>>) -> Option<Box<dyn Port>> {
    match socks.len() {
        0 => None,
        1 => socks.pop(),
        _ => QueueSet::new(socks).map(|s| Box::new(s) as Box<dyn Port>),
    }
}

/// Spreads `queues` sockets, opened by `open(q)`, over `workers`.
fn spread(
    queues: u32,
    workers: usize,
    mut open: impl FnMut(u32) -> Result<Box<dyn Port>>,
) -> Result<PerWorker> {
    let mut per_worker: Vec<Vec<Box<dyn Port>>> = (0..workers).map(|_| Vec::new()).collect();
    for q in 0..queues {
        per_worker[q as usize % workers].push(open(q)?);
    }
    Ok(per_worker.into_iter().map(one_port).collect())
}

/// AF_XDP sockets on every RX queue of the steering program's interface.
pub(crate) fn steered(
    prog: &mut XdpProgram,
    workers: usize,
    xsk: SocketConfig,
) -> Result<PerWorker> {
    let queues = rx_queues(prog.iface());
    if queues as usize > workers {
        tracing::info!(
            port = prog.iface(),
            queues,
            workers,
            "more RX queues than workers: each worker serves several"
        );
    }
    spread(queues, workers, |q| {
        Ok(Box::new(XdpPort::open(prog, q, xsk)?))
    })
}

/// The XDP engine's exception sockets on every RX queue of port `port`
/// (interface `name`, `ifindex`), registered in the engine's XSKMAP.
pub(crate) fn engine_exceptions(
    engine: &mut xdp_engine::Engine,
    port: usize,
    name: &str,
    ifindex: u32,
    workers: usize,
    xsk: SocketConfig,
) -> Result<PerWorker> {
    let queues = rx_queues(name);
    if queues > xdp_engine::layout::MAX_QUEUES {
        bail!(
            "{name}: {queues} RX queues; the XDP engine serves at most {}",
            xdp_engine::layout::MAX_QUEUES
        );
    }
    spread(queues, workers, |q| {
        let key = port as u32 * xdp_engine::layout::MAX_QUEUES + q;
        Ok(Box::new(XdpPort::open_into(
            name,
            ifindex,
            q,
            engine.xsks(),
            key,
            xsk,
            Some(xdp_engine::layout::split_hint),
        )?))
    })
}

/// The frames the kernel dropped on their way out of each device of bond
/// port `name`, the bond first and then its members (their `tx_dropped`:
/// the bond with no member to send on, a member whose link or peer is
/// down); None if `name` is no bond. What fastfwd sends through a bond
/// is lost there without fastfwd seeing it.
pub(crate) fn bond_tx_dropped(name: &str) -> Option<Vec<(String, u64)>> {
    let mut devices = bond_members(name)?;
    devices.insert(0, name.to_owned());
    Some(
        devices
            .into_iter()
            .map(|d| {
                let n =
                    std::fs::read_to_string(format!("/sys/class/net/{d}/statistics/tx_dropped"))
                        .ok()
                        .and_then(|t| t.trim().parse().ok())
                        .unwrap_or(0);
                (d, n)
            })
            .collect(),
    )
}

/// The members of bond `name` in the kernel's order (`bonding/slaves`);
/// None if `name` is no bond.
pub(crate) fn bond_members(name: &str) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{name}/bonding/slaves")).ok()?;
    Some(text.split_whitespace().map(str::to_owned).collect())
}

/// The XDP engine's exception sockets on a bond port `port` (`name`):
/// the program runs on the members, so each member's RX queues get
/// sockets (numbered one member after the other within the port's, the
/// member registered in `ifindex_port` with its first), and every worker
/// sends through the bond itself, so the bond's transmit hash picks the
/// member of what the pipeline sends, as it does for the kernel's.
pub(crate) fn engine_bond_exceptions(
    engine: &mut xdp_engine::Engine,
    port: usize,
    name: &str,
    members: &[String],
    workers: usize,
    xsk: SocketConfig,
) -> Result<PerWorker> {
    use xdp_engine::layout::MAX_QUEUES;
    let mut receivers = Vec::with_capacity(members.len());
    let mut first = 0u32;
    for m in members {
        let ifindex = netio::if_index(m)?;
        receivers.push((m.as_str(), ifindex, first, rx_queues(m)));
        first += rx_queues(m);
    }
    if first > MAX_QUEUES {
        bail!(
            "{name}: its members have {first} RX queues in all; the XDP engine serves at most {MAX_QUEUES} a port"
        );
    }
    engine.set_receivers(
        port as u16,
        &receivers
            .iter()
            .map(|&(_, ifindex, first, _)| (ifindex, first as u16))
            .collect::<Vec<_>>(),
    )?;
    let mut per_worker: Vec<Vec<Box<dyn Port>>> = (0..workers).map(|_| Vec::new()).collect();
    let mut k = 0usize;
    for &(member, ifindex, first, queues) in &receivers {
        for q in 0..queues {
            let key = port as u32 * MAX_QUEUES + first + q;
            per_worker[k % workers].push(Box::new(XdpPort::open_into(
                member,
                ifindex,
                q,
                engine.xsks(),
                key,
                xsk,
                Some(xdp_engine::layout::split_hint),
            )?));
            k += 1;
        }
    }
    per_worker
        .into_iter()
        .map(|socks| match one_port(socks) {
            Some(rx) => Ok(Some(
                Box::new(SplitPort::new(rx, Box::new(PacketSendPort::open(name)?)))
                    as Box<dyn Port>,
            )),
            None => Ok(None),
        })
        .collect()
}

/// One AF_PACKET socket per worker on `name`, in one fanout group.
pub(crate) fn packet(name: &str, ifindex: u32, workers: usize) -> Result<PerWorker> {
    let group = ((std::process::id() as u16) ^ (ifindex as u16).rotate_left(8)) | 1;
    (0..workers)
        .map(|_| {
            let port = PacketPort::open(
                name,
                PacketConfig {
                    fanout_group: group,
                    ..PacketConfig::default()
                },
            )?;
            Ok(Some(Box::new(port) as Box<dyn Port>))
        })
        .collect()
}

/// How the daemon attaches to an interface: the same at start and when the
/// interface comes back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attach {
    pub engine: crate::Engine,
    pub backend: crate::IoBackend,
    /// XDP engine attach mode: native only, generic only, or native then
    /// generic (None).
    pub native: Option<bool>,
    pub workers: usize,
    /// Ring and UMEM sizes of every AF_XDP socket.
    pub xsk: SocketConfig,
}

impl Attach {
    /// Attaches to port `p` (`name`, now `ifindex`) and opens its sockets
    /// for the workers. With the AF_XDP backend, `programs[p]` is the
    /// port's steering program, re-attached if the interface is new.
    pub(crate) fn open(
        &self,
        p: usize,
        name: &str,
        ifindex: u32,
        programs: &mut [XdpProgram],
        xdp: Option<&mut crate::daemon::XdpEngine>,
    ) -> Result<PerWorker> {
        use crate::{Engine, IoBackend};
        match (self.engine, self.backend) {
            (Engine::Xdp, _) => {
                let Some(x) = xdp else {
                    bail!("{name}: the XDP engine is not loaded");
                };
                let native = x.engine.attach(name, ifindex, p as u16, self.native)?;
                if let Some(a) = x
                    .engine
                    .attached_ports()
                    .iter()
                    .find(|a| a.ifindex == ifindex && a.adopted.is_some())
                {
                    tracing::info!(
                        port = name,
                        replaced_program = a.adopted.unwrap_or(0),
                        native,
                        "took over from the XDP program an earlier fastfwd left running, without a gap"
                    );
                    match &a.carried_flows {
                        Some(Ok(n)) => tracing::info!(
                            flows = n,
                            "carried the established flows of its connection-tracking fast path over"
                        ),
                        Some(Err(why)) => tracing::warn!(
                            error = %why,
                            "its established flows were not carried over: a TCP connection's next segment is invalid to the new workers"
                        ),
                        None => {}
                    }
                }
                x.egress.attached(p as u16, native);
                // In native mode the program runs on a bond's members; in
                // generic mode on the bond's own packets.
                match bond_members(name).filter(|_| native) {
                    Some(members) => engine_bond_exceptions(
                        &mut x.engine,
                        p,
                        name,
                        &members,
                        self.workers,
                        self.xsk,
                    ),
                    None => {
                        engine_exceptions(&mut x.engine, p, name, ifindex, self.workers, self.xsk)
                    }
                }
            }
            (Engine::User, IoBackend::AfXdp) => {
                let Some(prog) = programs.get_mut(p) else {
                    bail!("{name}: no steering program");
                };
                if prog.ifindex() != ifindex {
                    prog.reattach(ifindex)?;
                }
                let sockets = steered(prog, self.workers, self.xsk)?;
                if bond_members(name).is_none() {
                    return Ok(sockets);
                }
                // A bond: receive on its queues, send through an AF_PACKET
                // socket on it. An AF_XDP socket's frames reach the bond
                // without their protocol, and its transmit hash, which
                // dissects by protocol, would put every flow on one member.
                sockets
                    .into_iter()
                    .map(|rx| match rx {
                        Some(rx) => Ok(Some(Box::new(SplitPort::new(
                            rx,
                            Box::new(PacketSendPort::open(name)?),
                        )) as Box<dyn Port>)),
                        None => Ok(None),
                    })
                    .collect()
            }
            (Engine::User, IoBackend::Packet) => packet(name, ifindex, self.workers),
        }
    }
}
