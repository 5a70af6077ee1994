//! Loading the program, keeping its maps equal to the router's tables,
//! attaching it, reading its counters, and running it over single frames
//! (`BPF_PROG_TEST_RUN`) for replay and tests.
//!
//! Update protocol (see `bpf/fastfwd_xdp.h`): [`Engine::publish`] writes
//! the new [`Image`] into the half of the maps the program is not reading
//! (only the elements that differ from what that half held), then flips
//! `config.active` with one store. Before it writes into a half again it
//! waits for an RCU grace period, so no program run that began while that
//! half was active is still reading it. Every packet sees one complete
//! generation of the tables; a route change never stops forwarding.

use crate::compile::Image;
use crate::layout::{self, CounterBlock, FibCapacity};
use aya::maps::{Array, DevMap, HashMap, IterableMap, MapData, PerCpuArray, XskMap};
use aya::programs::{TracePoint, Xdp};
use aya::{Ebpf, EbpfLoader};
use pipeline::{Counters, DropReason, InterfaceCounters, PuntReason};
use std::os::fd::{AsFd, AsRawFd};

/// The compiled program, committed beside its source.
static FASTFWD_XDP_OBJ: &[u8] = aya::include_bytes_aligned!("../bpf/fastfwd_xdp.o");

/// What went wrong, naming the program or map.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Loading, verifying or attaching failed.
    #[error("XDP engine: {what}: {detail}")]
    Bpf {
        /// What was being done.
        what: String,
        /// The kernel's or aya's answer.
        detail: String,
    },
    /// The tables do not fit the maps.
    #[error("XDP engine: {0}")]
    Compile(#[from] crate::compile::CompileError),
}

pub(crate) fn bpf_err(
    what: impl Into<String>,
    e: &(dyn std::error::Error + 'static),
) -> EngineError {
    EngineError::Bpf {
        what: what.into(),
        detail: netio::xdp::chain(e),
    }
}

/// How the program treats host traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// On interfaces (`fastfwd run`): the kernel's traffic goes to it
    /// first, exceptions to AF_XDP sockets, forwarded frames redirected.
    Attached,
    /// Under `BPF_PROG_TEST_RUN` (replay, tests): exactly the pipeline's
    /// stages, each outcome recorded.
    Test,
}

/// What the program did with one frame under [`Mode::Test`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Rewritten (the bytes given) for this egress port.
    Forward {
        /// Egress port.
        port: u16,
        /// The frame as transmitted.
        frame: Vec<u8>,
    },
    /// Dropped under this reason.
    Drop(DropReason),
    /// For the host under this reason.
    Punt(PuntReason),
    /// Handed, unchanged, to the user-space pipeline (cause: index into
    /// [`layout::EXCEPTIONS`]), with what connection tracking found (the
    /// firewall's `CtHint` code).
    Exception {
        /// Why.
        cause: u32,
        /// The hint left in the frame's metadata.
        ct_hint: u8,
    },
}

/// Counters summed over CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineCounters {
    /// The pipeline's counters for what the program finished.
    pub counters: Counters,
    /// Host traffic passed to the kernel before any check.
    pub to_host: u64,
    /// Exceptions by cause ([`layout::EXCEPTIONS`] order).
    pub exceptions: [u64; layout::EXC_SLOTS],
    /// Exceptions dropped for want of an AF_XDP socket on their queue.
    pub exceptions_lost: u64,
    /// Redirects the devmap refused.
    pub tx_redirect_failed: u64,
    /// Packets of flows connection tracking's fast path held established.
    pub ct_established: u64,
    /// Frames handed over without their connection-tracking hint (no
    /// headroom in front of them).
    pub meta_failed: u64,
}

/// Redirected frames the kernel dropped after the program returned, for
/// one port (or the exception path's sockets), summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxFault {
    /// Frames lost.
    pub dropped: u64,
    /// Of them, refused because the device takes no XDP frames (rather
    /// than a full ring): the port has to be served another way.
    pub refused: u64,
}

/// What the tracepoint programs count, summed over CPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxFaults {
    /// By port id.
    pub ports: Vec<TxFault>,
    /// Exceptions the kernel could not put in an AF_XDP socket's ring.
    pub exceptions: TxFault,
}

impl EngineCounters {
    fn from_block(b: &CounterBlock, interfaces: usize) -> EngineCounters {
        let mut c = Counters::new(interfaces);
        c.rx_frames = b[layout::CTR_RX_FRAMES];
        c.forwarded_ipv4 = b[layout::CTR_FORWARDED_IPV4];
        c.forwarded_ipv6 = b[layout::CTR_FORWARDED_IPV6];
        for (_, r) in layout::DROPS {
            c.drops[r.index()] = b[layout::CTR_DROPS + r.index()];
        }
        for (_, r) in layout::PUNTS {
            c.punts[r.index()] = b[layout::CTR_PUNTS + r.index()];
        }
        for (i, ic) in c
            .interfaces
            .iter_mut()
            .enumerate()
            .take(layout::MAX_IFACES as usize)
        {
            let w = &b[layout::CTR_IFACES + 5 * i..layout::CTR_IFACES + 5 * i + 5];
            *ic = InterfaceCounters {
                rx_packets: w[0],
                rx_bytes: w[1],
                rx_dropped: w[2],
                tx_packets: w[3],
                tx_bytes: w[4],
            };
        }
        let mut exceptions = [0; layout::EXC_SLOTS];
        exceptions.copy_from_slice(
            &b[layout::CTR_EXCEPTIONS..layout::CTR_EXCEPTIONS + layout::EXC_SLOTS],
        );
        EngineCounters {
            counters: c,
            to_host: b[layout::CTR_TO_HOST],
            exceptions,
            exceptions_lost: b[layout::CTR_EXCEPTIONS_LOST],
            tx_redirect_failed: b[layout::CTR_TX_REDIRECT_FAILED],
            ct_established: b[layout::CTR_CT_ESTABLISHED],
            meta_failed: b[layout::CTR_META_FAILED],
        }
    }

    /// Every frame the program handed to the user-space pipeline.
    pub fn total_exceptions(&self) -> u64 {
        self.exceptions.iter().sum()
    }
}

/// What one half of the maps holds, as far as the engine knows: each
/// element holds its value in `image` (zeros when None: never written) or
/// in one of the images whose writes into the half failed part way since.
#[derive(Default)]
struct Half {
    image: Option<Image>,
    partial: Vec<Image>,
}

/// Failed writes into one half (each leaves it holding a mix) before the
/// engine stops writing it: every publish is then refused, and the daemon
/// hands every transit packet to the pipeline. Bounds the images kept.
const MAX_PARTIAL_WRITES: usize = 4;

impl Half {
    /// The image the half holds, if it was written whole since its last
    /// failed write.
    fn whole(&self) -> Option<&Image> {
        self.image.as_ref().filter(|_| self.partial.is_empty())
    }
}

/// The loaded program and its maps.
pub struct Engine {
    ebpf: Ebpf,
    mode: Mode,
    cap: FibCapacity,
    active: u32,
    generation: u64,
    /// What each half holds now.
    shadow: [Half; 2],
    /// A flip happened since the last grace period.
    needs_grace: bool,
    /// Forward everything to the pipeline (set when tables do not fit).
    forced_except_all: bool,
    /// No daemon serves the exception sockets any more: what the program
    /// hands over goes to the kernel.
    exceptions_to_kernel: bool,
    xsks: XskMap<MapData>,
    /// The interfaces the program is attached to.
    links: Vec<AttachedPort>,
    /// The members of each aggregated port in `ifindex_port`.
    receivers: std::collections::BTreeMap<u16, Vec<u32>>,
    /// The map ids the tracepoint programs count for, once attached.
    traced: layout::TracedMaps,
    /// The kernel's id of the map `xsks`.
    xsks_id: u32,
    /// The earlier programs whose flows were carried over already.
    carried_from: Vec<u32>,
    /// Maps whose next write a unit test makes fail, once per entry.
    #[cfg(test)]
    fail_writes: Vec<&'static str>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("mode", &self.mode)
            .field("cap", &self.cap)
            .field("active", &self.active)
            .field("generation", &self.generation)
            .field("attached", &self.links.len())
            .finish()
    }
}

const PROGRAM: &str = "fastfwd_xdp";

/// An interface the program is attached to (through rtnetlink:
/// [`crate::attach`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachedPort {
    /// Its interface index.
    pub ifindex: u32,
    /// Attached in native (driver) mode; otherwise generic.
    pub native: bool,
    /// The id of the program of an earlier fastfwd that this one replaced
    /// there (adopted without a gap); `None` where nothing was attached.
    pub adopted: Option<u32>,
    /// The established flows of that program's connection-tracking fast
    /// path copied into this one's before the swap (on the first port
    /// taken from that program), or why none could be.
    pub carried_flows: Option<Result<u64, String>>,
}

/// A record field a tracepoint program reads: (name, offset).
type RecordFields = &'static [(&'static str, usize)];

/// The tracepoint programs counting failed redirects: (program, category,
/// tracepoint, the record fields it reads).
const FAULT_COUNTERS: [(&str, &str, &str, RecordFields); 2] = [
    (
        "ff_redirect_err",
        "xdp",
        "xdp_redirect_err",
        &layout::TP_REDIRECT_ERR_FIELDS,
    ),
    (
        "ff_devmap_xmit",
        "xdp",
        "xdp_devmap_xmit",
        &layout::TP_DEVMAP_XMIT_FIELDS,
    ),
];

/// The object's program `name` as its type (`Xdp`, `TracePoint`).
fn program_as<'a, P>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut P, EngineError>
where
    &'a mut P: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or_else(|| EngineError::Bpf {
            what: format!("program {name}"),
            detail: "not in fastfwd_xdp.o".into(),
        })?
        .try_into()
        .map_err(|e| bpf_err(format!("program {name}"), &e))
}

/// The shortest frame `BPF_PROG_TEST_RUN` takes (an Ethernet header).
pub const MIN_TEST_FRAME: usize = 14;

impl Engine {
    /// Loads and verifies the program with FIB maps of capacity `cap`.
    pub fn load(mode: Mode, cap: FibCapacity) -> Result<Engine, EngineError> {
        let mut loader = EbpfLoader::new();
        loader
            .set_max_entries("fib4_nodes", 2 * cap.nodes4)
            .set_max_entries("fib4_leaves", 2 * cap.leaf4_pairs())
            .set_max_entries("fib6_nodes", 2 * cap.nodes6)
            .set_max_entries("fib6_leaves", 2 * cap.leaf6_pairs())
            .set_max_entries("fw_data", 2 * cap.fw_pairs());
        let mut ebpf = loader
            .load(FASTFWD_XDP_OBJ)
            .map_err(|e| bpf_err("loading fastfwd_xdp.o (maps)", &e))?;
        let prog: &mut Xdp = program_as(&mut ebpf, PROGRAM)?;
        prog.load()
            .map_err(|e| bpf_err(format!("verifying program {PROGRAM}"), &e))?;
        let xsks_id = match ebpf.map("xsks") {
            Some(aya::maps::Map::XskMap(m)) => m
                .info()
                .map(|i| i.id())
                .map_err(|e| bpf_err("map xsks", &e))?,
            _ => 0,
        };
        let xsks = ebpf.take_map("xsks").ok_or_else(|| EngineError::Bpf {
            what: "map xsks".into(),
            detail: "not in fastfwd_xdp.o".into(),
        })?;
        let xsks = XskMap::try_from(xsks).map_err(|e| bpf_err("map xsks", &e))?;
        let mut engine = Engine {
            ebpf,
            mode,
            cap,
            active: 0,
            generation: 0,
            shadow: [Half::default(), Half::default()],
            needs_grace: false,
            forced_except_all: false,
            exceptions_to_kernel: false,
            xsks,
            links: Vec::new(),
            receivers: std::collections::BTreeMap::new(),
            traced: layout::TracedMaps::default(),
            xsks_id,
            carried_from: Vec::new(),
            #[cfg(test)]
            fail_writes: Vec::new(),
        };
        engine.write_config(false)?;
        Ok(engine)
    }

    /// Starts counting the redirected frames the kernel drops after the
    /// program returned (per port, and the exception path's): loads and
    /// attaches the tracepoint programs, after checking that the kernel's
    /// records hold the fields where they read them. Needs tracefs
    /// (mounted here when it is not) and CAP_PERFMON or CAP_SYS_ADMIN.
    /// Without it such drops go uncounted: the caller says so.
    pub fn count_tx_faults(&mut self) -> Result<(), EngineError> {
        let tracefs = netio::sys::bpf::tracefs().map_err(|e| bpf_err("finding tracefs", &e))?;
        for (prog, category, name, fields) in FAULT_COUNTERS {
            let path = tracefs.join(format!("events/{category}/{name}/format"));
            let format = std::fs::read_to_string(&path)
                .map_err(|e| bpf_err(format!("reading {}", path.display()), &e))?;
            layout::check_tracepoint_format(&format, fields).map_err(|e| EngineError::Bpf {
                what: format!("tracepoint {category}:{name}"),
                detail: format!("its record is not laid out as the program reads it: {e}"),
            })?;
            let tp: &mut TracePoint = program_as(&mut self.ebpf, prog)?;
            tp.load()
                .map_err(|e| bpf_err(format!("verifying program {prog}"), &e))?;
            tp.attach(category, name)
                .map_err(|e| bpf_err(format!("attaching {prog} to {category}:{name}"), &e))?;
        }
        let id_of = |name: &str| -> Result<u32, EngineError> {
            let data = match self.ebpf.map(name) {
                Some(aya::maps::Map::DevMap(m)) => m.info(),
                _ => {
                    return Err(EngineError::Bpf {
                        what: format!("map {name}"),
                        detail: "not a devmap in fastfwd_xdp.o".into(),
                    });
                }
            };
            data.map(|i| i.id())
                .map_err(|e| bpf_err(format!("map {name}"), &e))
        };
        let tx_ports = id_of("tx_ports")?;
        self.traced = layout::TracedMaps {
            tx_ports,
            xsks: self.xsks_id,
        };
        let ea = self.except_all();
        self.write_config(ea)
    }

    /// Whether [`Engine::count_tx_faults`] succeeded.
    pub fn counts_tx_faults(&self) -> bool {
        self.traced != layout::TracedMaps::default()
    }

    /// The dropped redirects counted so far (zero before
    /// [`Engine::count_tx_faults`]).
    pub fn tx_faults(&self) -> Result<TxFaults, EngineError> {
        let m = self.ebpf.map("tx_faults").ok_or_else(|| EngineError::Bpf {
            what: "map tx_faults".into(),
            detail: "missing".into(),
        })?;
        let a: PerCpuArray<_, [u8; layout::TX_FAULT_SIZE]> =
            PerCpuArray::try_from(m).map_err(|e| bpf_err("map tx_faults", &e))?;
        let mut out = TxFaults::default();
        for slot in 0..layout::TX_FAULT_SLOTS {
            let mut sum = TxFault::default();
            for v in a
                .get(&slot, 0)
                .map_err(|e| bpf_err("reading map tx_faults", &e))?
                .iter()
            {
                let (d, r) = layout::tx_fault_fields(v);
                sum.dropped += d;
                sum.refused += r;
            }
            if slot < layout::MAX_PORTS {
                out.ports.push(sum);
            } else {
                out.exceptions = sum;
            }
        }
        Ok(out)
    }

    /// The FIB capacity the maps were created with.
    pub fn capacity(&self) -> FibCapacity {
        self.cap
    }

    /// The generation the program reads (bumped by every publish).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether every transit packet goes to the user-space pipeline now
    /// (firewall rules, or tables that did not fit).
    pub fn except_all(&self) -> bool {
        self.forced_except_all
            || self.shadow[self.active as usize]
                .whole()
                .is_some_and(|i| i.except_all())
    }

    fn write_config(&mut self, except_all: bool) -> Result<(), EngineError> {
        let mut flags = match self.mode {
            Mode::Attached => layout::CFG_HOST_FIRST,
            Mode::Test => layout::CFG_TEST,
        };
        if except_all || self.forced_except_all {
            flags |= layout::CFG_EXCEPT_ALL;
        }
        if self.exceptions_to_kernel {
            flags |= layout::CFG_EXCEPTIONS_TO_KERNEL;
        }
        let img = self.shadow[self.active as usize].whole();
        if img.is_some_and(|i| i.firewall.is_some()) {
            flags |= layout::CFG_FIREWALL;
        }
        let ct_epoch = img.and_then(|i| i.conntrack_epoch);
        if ct_epoch.is_some() {
            flags |= layout::CFG_CONNTRACK;
        }
        let v = layout::config(
            self.active,
            flags,
            &self.cap,
            ct_epoch.unwrap_or(0),
            self.generation,
            self.traced,
        );
        let mut a: Array<_, layout::Config> = self.array("config")?;
        a.set(0, v, 0)
            .map_err(|e| bpf_err("writing map config", &e))
    }

    /// Fails, once, a write to a map a unit test named.
    #[cfg(test)]
    fn injected_failure(&mut self, name: &str) -> Result<(), EngineError> {
        match self.fail_writes.iter().position(|&m| m == name) {
            Some(i) => {
                self.fail_writes.remove(i);
                Err(EngineError::Bpf {
                    what: format!("writing map {name}"),
                    detail: "injected failure".into(),
                })
            }
            None => Ok(()),
        }
    }

    fn array<V: aya::Pod>(&mut self, name: &str) -> Result<Array<&mut MapData, V>, EngineError> {
        #[cfg(test)]
        self.injected_failure(name)?;
        let m = self.ebpf.map_mut(name).ok_or_else(|| EngineError::Bpf {
            what: format!("map {name}"),
            detail: "not in fastfwd_xdp.o".into(),
        })?;
        Array::try_from(m).map_err(|e| bpf_err(format!("map {name}"), &e))
    }

    fn hash<K: aya::Pod, V: aya::Pod>(
        &mut self,
        name: &str,
    ) -> Result<HashMap<&mut MapData, K, V>, EngineError> {
        #[cfg(test)]
        self.injected_failure(name)?;
        let m = self.ebpf.map_mut(name).ok_or_else(|| EngineError::Bpf {
            what: format!("map {name}"),
            detail: "not in fastfwd_xdp.o".into(),
        })?;
        HashMap::try_from(m).map_err(|e| bpf_err(format!("map {name}"), &e))
    }

    /// Makes `image` the tables the program reads. On error the program
    /// keeps reading the previous tables.
    pub fn publish(&mut self, image: Image) -> Result<(), EngineError> {
        let target = 1 - self.active;
        if self.needs_grace {
            netio::sys::bpf::synchronize_rcu()
                .map_err(|e| bpf_err("waiting for an RCU grace period", &e))?;
            self.needs_grace = false;
        }
        let t = target as usize;
        if self.shadow[t].partial.len() >= MAX_PARTIAL_WRITES {
            return Err(EngineError::Bpf {
                what: format!("writing half {target} of the maps"),
                detail: format!(
                    "{MAX_PARTIAL_WRITES} writes into it failed part way; it is no longer written"
                ),
            });
        }
        // The diff against every content the half may hold element by
        // element: once against the image last written whole, once against
        // each written in part since (an element skipped as unchanged in
        // one pass is written in another if it may hold something else).
        let half = std::mem::take(&mut self.shadow[t]);
        let mut written = Ok(());
        for old in std::iter::once(half.image.as_ref()).chain(half.partial.iter().map(Some)) {
            written = self.write_half(target, &image, old);
            if written.is_err() {
                break;
            }
        }
        if let Err(e) = written {
            let mut half = half;
            half.partial.push(image);
            self.shadow[t] = half;
            return Err(e);
        }
        let before = (self.active, self.generation, self.forced_except_all);
        self.active = target;
        self.generation += 1;
        self.forced_except_all = false;
        let except_all = image.except_all();
        self.shadow[t] = Half {
            image: Some(image),
            partial: Vec::new(),
        };
        if let Err(e) = self.write_config(except_all) {
            // The program still reads the other half: it stays the active
            // one (the next publish must not write over it), and the half
            // just written is known whole.
            (self.active, self.generation, self.forced_except_all) = before;
            return Err(e);
        }
        self.needs_grace = true;
        Ok(())
    }

    /// From now on, what the program would hand to the pipeline and finds
    /// no socket for goes to the kernel (XDP_PASS) instead of being
    /// dropped: for after the daemon exits with `--on-exit kernel`, when
    /// the exception sockets close. The kernel forwards such packets (TTL
    /// expiring, neighbour misses, new flows under `ct state` rules) if its
    /// own forwarding is on, by its own tables and rules.
    pub fn send_exceptions_to_kernel(&mut self) -> Result<(), EngineError> {
        self.exceptions_to_kernel = true;
        let ea = self.except_all();
        self.write_config(ea)
    }

    /// Sends every transit packet to the user-space pipeline from now on
    /// (the tables no longer fit the maps; the pipeline still has them).
    pub fn force_except_all(&mut self) -> Result<(), EngineError> {
        self.forced_except_all = true;
        let ea = self.except_all();
        self.write_config(ea)
    }

    fn write_half(
        &mut self,
        set: u32,
        new: &Image,
        old: Option<&Image>,
    ) -> Result<(), EngineError> {
        // The FIBs first (nothing of this half is read yet, any order is
        // safe), then the small tables.
        let o = old;
        let cap = self.cap;
        self.write_fib(
            "fib4",
            set,
            layout::TOP4_PAIRS,
            cap.nodes4,
            cap.leaf4_pairs(),
            &new.fib4,
            o.map(|i| &i.fib4),
        )?;
        self.write_fib(
            "fib6",
            set,
            layout::TOP6_PAIRS,
            cap.nodes6,
            cap.leaf6_pairs(),
            &new.fib6,
            o.map(|i| &i.fib6),
        )?;
        diff_array(
            self,
            "adjacencies",
            set * layout::MAX_ADJ,
            &new.adjacencies,
            o.map(|i| &i.adjacencies[..]),
            true,
        )?;
        diff_array(
            self,
            "hops",
            set * layout::MAX_HOPS,
            &new.hops,
            o.map(|i| &i.hops[..]),
            true,
        )?;
        diff_array(
            self,
            "ifaces",
            set * layout::MAX_IFACES,
            &new.ifaces,
            o.map(|i| &i.ifaces[..]),
            true,
        )?;
        let ports = port_values(new);
        let old_ports = o.map(port_values);
        diff_array(
            self,
            "ports",
            set * layout::MAX_PORTS,
            &ports,
            old_ports.as_deref(),
            false,
        )?;

        self.write_firewall(set, new, o)?;
        let s16 = set as u16;
        {
            let mut filters: Array<_, layout::RuleFilterValue> = self.array("rule_filters")?;
            for (i, v) in new.rules.filters.iter().enumerate() {
                if o.and_then(|o| o.rules.filters.get(i)) != Some(v) {
                    filters
                        .set(set * 4 + i as u32, v, 0)
                        .map_err(|e| bpf_err("writing map rule_filters", &e))?;
                }
            }
        }
        diff_hash(
            self,
            "rule_prefixes",
            &new.rules.prefixes,
            o.map(|i| &i.rules.prefixes),
            |&(kind, len, a)| layout::rule_key(a, len, s16, kind),
            |&v| v,
        )?;
        diff_hash(
            self,
            "vlans",
            &new.vlans,
            o.map(|i| &i.vlans),
            |&(p, a, b)| layout::vlan_key(p, a, b, s16),
            |&v| v,
        )?;
        diff_hash(
            self,
            "neighbours",
            &new.neighbours,
            o.map(|i| &i.neighbours),
            |&(i, a)| layout::neigh_key(i, s16, a),
            |&m| m,
        )?;
        diff_hash(
            self,
            "local4",
            &new.local4,
            o.map(|i| &i.local4),
            |&a| layout::local4_key(a, set),
            |&k| k,
        )?;
        diff_hash(
            self,
            "local6",
            &new.local6,
            o.map(|i| &i.local6),
            |&a| layout::local6_key(a, set),
            |&k| k,
        )?;
        Ok(())
    }

    /// One family's trie into half `set` (`top`, `nodes`, `leaves`: the
    /// elements per half of its three maps).
    #[allow(clippy::too_many_arguments)]
    fn write_fib(
        &mut self,
        fam: &str,
        set: u32,
        top: u32,
        nodes: u32,
        leaves: u32,
        new: &crate::compile::FibImage,
        old: Option<&crate::compile::FibImage>,
    ) -> Result<(), EngineError> {
        diff_array(
            self,
            &format!("{fam}_top"),
            set * top,
            &new.top,
            old.map(|i| &i.top[..]),
            false,
        )?;
        diff_array(
            self,
            &format!("{fam}_nodes"),
            set * nodes,
            &new.nodes,
            old.map(|i| &i.nodes[..]),
            false,
        )?;
        diff_array(
            self,
            &format!("{fam}_leaves"),
            set * leaves,
            &new.leaves,
            old.map(|i| &i.leaves[..]),
            false,
        )
    }

    /// The firewall's half: its tables, and its counters zeroed when the
    /// rule set changes (nothing reads or counts in this half now).
    fn write_firewall(
        &mut self,
        set: u32,
        new: &Image,
        old: Option<&Image>,
    ) -> Result<(), EngineError> {
        let (nf, of) = (new.firewall.as_ref(), old.and_then(|o| o.firewall.as_ref()));
        {
            let mut meta: Array<_, layout::FwMeta> = self.array("fw_meta")?;
            for fam in 0..2u32 {
                let v = nf.map_or([0u8; layout::FW_META_SIZE], |f| f.meta[fam as usize]);
                if of.map(|f| f.meta[fam as usize]) != Some(v) {
                    meta.set(set * 2 + fam, v, 0)
                        .map_err(|e| bpf_err("writing map fw_meta", &e))?;
                }
            }
        }
        let empty: &[u64] = &[];
        let (nd, od) = (nf.map_or(empty, |f| &f.data[..]), of.map(|f| &f.data[..]));
        diff_array(self, "fw_data", set * self.cap.fw_pairs(), nd, od, false)?;
        let none: &[u32] = &[];
        let (na, oa) = (
            nf.map_or(none, |f| &f.actions[..]),
            of.map(|f| &f.actions[..]),
        );
        diff_array(self, "fw_actions", set * layout::FW_MAX_SLOTS, na, oa, true)?;
        let same = match (nf, of) {
            (Some(a), Some(b)) => std::sync::Arc::ptr_eq(&a.rules, &b.rules),
            _ => false,
        };
        if !same {
            let used = |f: Option<&crate::compile::FwImage>| f.map_or(0, |f| f.actions.len());
            let n = used(nf).max(used(of)) as u32;
            let cpus = aya::util::nr_cpus().map_err(|(_, e)| bpf_err("counting CPUs", &e))?;
            let m = self
                .ebpf
                .map_mut("fw_counters")
                .ok_or_else(|| EngineError::Bpf {
                    what: "map fw_counters".into(),
                    detail: "missing".into(),
                })?;
            let mut c: PerCpuArray<_, [u64; 2]> =
                PerCpuArray::try_from(m).map_err(|e| bpf_err("map fw_counters", &e))?;
            for slot in 0..n {
                let zero = aya::maps::PerCpuValues::try_from(vec![[0u64; 2]; cpus])
                    .map_err(|e| bpf_err("per-CPU values", &e))?;
                c.set(set * layout::FW_MAX_SLOTS + slot, zero, 0)
                    .map_err(|e| bpf_err("clearing map fw_counters", &e))?;
            }
        }
        Ok(())
    }

    /// The program's per-rule counters of rule set `rules`, summed over
    /// CPUs and over the halves that hold it; `None` when it does not
    /// evaluate that rule set.
    pub fn firewall_counters(
        &self,
        rules: &std::sync::Arc<firewall::Firewall>,
    ) -> Result<Option<firewall::RuleCounters>, EngineError> {
        let halves: Vec<u32> = (0..2u32)
            .filter(|&h| {
                self.shadow[h as usize]
                    .whole()
                    .and_then(|i| i.firewall.as_ref())
                    .is_some_and(|f| std::sync::Arc::ptr_eq(&f.rules, rules))
            })
            .collect();
        if halves.is_empty() {
            return Ok(None);
        }
        let m = self
            .ebpf
            .map("fw_counters")
            .ok_or_else(|| EngineError::Bpf {
                what: "map fw_counters".into(),
                detail: "missing".into(),
            })?;
        let c: PerCpuArray<_, [u64; 2]> =
            PerCpuArray::try_from(m).map_err(|e| bpf_err("map fw_counters", &e))?;
        let slots = rules.counter_slots();
        let mut out = firewall::RuleCounters::new(slots);
        for h in halves {
            for slot in 0..slots {
                let v = c
                    .get(&(h * layout::FW_MAX_SLOTS + slot as u32), 0)
                    .map_err(|e| bpf_err("reading map fw_counters", &e))?;
                for pc in v.iter() {
                    out.packets[slot] += pc[0];
                    out.bytes[slot] += pc[1];
                }
            }
        }
        Ok(Some(out))
    }

    /// Attaches the program to interface `ifindex` (`name` for messages)
    /// as port `port`, transmitting there through the devmap; returns
    /// whether it runs in native mode. On a bond device the kernel runs
    /// it on every member (Linux 5.15+), and the bond picks the member
    /// each redirected frame leaves on by its own transmit hash; the
    /// members must be made receivers too ([`Engine::set_receivers`]).
    /// Attaching again where the program is attached only refreshes the
    /// maps.
    pub fn attach(
        &mut self,
        name: &str,
        ifindex: u32,
        port: u16,
        native: Option<bool>,
    ) -> Result<bool, EngineError> {
        self.add_port(name, ifindex, port)?;
        self.attach_only(name, ifindex, native)
    }

    /// Makes interface `ifindex` port `port` in the maps (its transmit
    /// entry and its receiver entry) without attaching: every port is
    /// added before the program is attached anywhere, so that a program
    /// replacing an earlier one forwards to every port from its first
    /// frame.
    pub fn add_port(&mut self, name: &str, ifindex: u32, port: u16) -> Result<(), EngineError> {
        {
            let m = self
                .ebpf
                .map_mut("tx_ports")
                .ok_or_else(|| EngineError::Bpf {
                    what: "map tx_ports".into(),
                    detail: "missing".into(),
                })?;
            let mut dev = DevMap::try_from(m).map_err(|e| bpf_err("map tx_ports", &e))?;
            dev.set(u32::from(port), ifindex, None, 0)
                .map_err(|e| bpf_err(format!("adding {name} to map tx_ports"), &e))?;
        }
        let mut ports: HashMap<_, u32, u32> = self.hash("ifindex_port")?;
        ports
            .insert(ifindex, layout::receiver(port, 0), 0)
            .map_err(|e| bpf_err(format!("adding {name} to map ifindex_port"), &e))?;
        Ok(())
    }

    fn attach_only(
        &mut self,
        name: &str,
        ifindex: u32,
        native: Option<bool>,
    ) -> Result<bool, EngineError> {
        if let Some(l) = self.links.iter().find(|l| l.ifindex == ifindex) {
            return Ok(l.native);
        }
        let attaching = |detail: String| EngineError::Bpf {
            what: format!("attaching to {name}"),
            detail,
        };
        let prog: &mut Xdp = self
            .ebpf
            .program_mut(PROGRAM)
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| EngineError::Bpf {
                what: format!("program {PROGRAM}"),
                detail: "missing".into(),
            })?;
        let ours = prog
            .info()
            .map_err(|e| bpf_err(format!("program {PROGRAM}"), &e))?
            .id();
        let fd = prog
            .fd()
            .map_err(|e| bpf_err(format!("program {PROGRAM}"), &e))?
            .as_fd()
            .as_raw_fd();
        let now = crate::attach::attached(ifindex)
            .map_err(|e| attaching(format!("reading its XDP program: {e}")))?;
        if let Some(old) = now {
            if old.prog_id == ours {
                self.links.push(AttachedPort {
                    ifindex,
                    native: old.native,
                    adopted: None,
                    carried_flows: None,
                });
                return Ok(old.native);
            }
            // An earlier fastfwd's program (exited, killed or crashed):
            // replaced in one step, in the mode it runs in, so forwarding
            // never stops. Anyone else's is left alone.
            let left = left_behind(ifindex)
                .map_err(|e| attaching(format!("reading its XDP program: {e}")))?;
            let Some((old, old_fd)) = left.filter(|(o, _)| o.prog_id == old.prog_id) else {
                return Err(attaching(format!(
                    "another XDP program is already attached (id {}; remove it with `ip link set dev {name} xdp off`)",
                    old.prog_id
                )));
            };
            let carried_flows = (!self.carried_from.contains(&old.prog_id)).then(|| {
                self.carried_from.push(old.prog_id);
                self.carry_flows(old.prog_id)
            });
            crate::attach::replace(
                ifindex,
                fd,
                old_fd.as_fd().as_raw_fd(),
                crate::attach::mode_flags(old.native),
            )
            .map_err(|e| {
                attaching(format!(
                    "replacing the earlier fastfwd program (id {}): {e}",
                    old.prog_id
                ))
            })?;
            self.links.push(AttachedPort {
                ifindex,
                native: old.native,
                adopted: Some(old.prog_id),
                carried_flows,
            });
            return Ok(old.native);
        }
        let modes: &[bool] = match native {
            Some(true) => &[true],
            Some(false) => &[false],
            None => &[true, false],
        };
        let mut last = None;
        for &is_native in modes {
            match crate::attach::attach_new(ifindex, fd, crate::attach::mode_flags(is_native)) {
                Ok(()) => {
                    self.links.push(AttachedPort {
                        ifindex,
                        native: is_native,
                        adopted: None,
                        carried_flows: None,
                    });
                    return Ok(is_native);
                }
                Err(e) => last = Some(attaching(e.to_string())),
            }
        }
        Err(last.unwrap_or_else(|| attaching("no mode".into())))
    }

    /// Copies the live established flows of program `old_prog`'s
    /// `ct_flows` into this engine's, in the epoch of the tables this
    /// engine published (which must come first), so that connections a
    /// restart finds open stay established: the workers' own tables start
    /// empty, and a TCP segment that is not a SYN without an entry is
    /// `invalid`. Nothing is copied without `ct state` rules now, nor from
    /// a table of another layout (key or value size). Returns how many.
    fn carry_flows(&mut self, old_prog: u32) -> Result<u64, String> {
        let active = self.shadow[self.active as usize].whole();
        let Some(epoch) = active.and_then(|i| i.conntrack_epoch) else {
            return Ok(0);
        };
        let info = aya::programs::loaded_programs()
            .filter_map(Result::ok)
            .find(|p| p.id() == old_prog)
            .ok_or_else(|| format!("program {old_prog} is gone"))?;
        let ids = info
            .map_ids()
            .map_err(|e| e.to_string())?
            .unwrap_or_default();
        let Some(id) = ids.into_iter().find(|&id| {
            aya::maps::MapInfo::from_id(id).is_ok_and(|m| m.name_as_str() == Some("ct_flows"))
        }) else {
            return Err(format!("program {old_prog} has no map ct_flows"));
        };
        let m = aya::maps::MapInfo::from_id(id).map_err(|e| e.to_string())?;
        if (m.key_size() as usize, m.value_size() as usize)
            != (layout::CT_KEY_SIZE, layout::CT_VALUE_SIZE)
        {
            return Err(format!(
                "its ct_flows has {}-byte keys and {}-byte values, this version {} and {}: the flows are decided again from their next packets",
                m.key_size(),
                m.value_size(),
                layout::CT_KEY_SIZE,
                layout::CT_VALUE_SIZE
            ));
        }
        let data = MapData::from_id(id).map_err(|e| e.to_string())?;
        let old: HashMap<_, layout::CtKey, layout::CtValue> =
            HashMap::try_from(aya::maps::Map::HashMap(data)).map_err(|e| e.to_string())?;
        let mut new = self.flow_table().map_err(|e| e.to_string())?;
        let now = netio::sys::os::monotonic_ns();
        let mut copied = 0;
        for (k, mut v) in old.iter().filter_map(Result::ok) {
            let (expires, _, _) = layout::ct_value_fields(&v);
            if expires <= now {
                continue;
            }
            layout::set_ct_value_epoch(&mut v, epoch);
            if new.map.insert(k, v, 1).is_ok() {
                copied += 1;
            }
        }
        Ok(copied)
    }

    /// The interfaces the program is attached to, and what it replaced
    /// there.
    pub fn attached_ports(&self) -> &[AttachedPort] {
        &self.links
    }

    /// Makes `members` (ifindex, first exception socket: see
    /// [`layout::receiver`]) the interfaces that receive for aggregated
    /// port `port` besides its own, in place of the previous ones: the
    /// program runs on a bond's members and sees their ifindex.
    pub fn set_receivers(&mut self, port: u16, members: &[(u32, u16)]) -> Result<(), EngineError> {
        let old = self.receivers.remove(&port).unwrap_or_default();
        let mut map: HashMap<_, u32, u32> = self.hash("ifindex_port")?;
        for ifindex in old.iter().filter(|i| !members.iter().any(|m| m.0 == **i)) {
            let _ = map.remove(ifindex);
        }
        for &(ifindex, first) in members {
            map.insert(ifindex, layout::receiver(port, first), 0)
                .map_err(|e| {
                    bpf_err(format!("adding ifindex {ifindex} to map ifindex_port"), &e)
                })?;
        }
        self.receivers
            .insert(port, members.iter().map(|m| m.0).collect());
        Ok(())
    }

    /// The interfaces set to receive for aggregated port `port`.
    pub fn receivers(&self, port: u16) -> &[u32] {
        self.receivers.get(&port).map_or(&[], Vec::as_slice)
    }

    /// Detaches the program from every interface it is attached to (where
    /// it still is).
    pub fn detach_all(&mut self) {
        self.detach_where(|_| true);
    }

    /// Leaves the program attached where it is, forwarding with the tables
    /// it has after this engine is gone (the daemon's exit with
    /// `--on-exit keep`); the next daemon replaces it.
    pub fn release(&mut self) {
        self.links.clear();
    }

    fn detach_where(&mut self, which: impl Fn(&AttachedPort) -> bool) {
        let links = std::mem::take(&mut self.links);
        let Some(fd) = self
            .ebpf
            .program_mut(PROGRAM)
            .and_then(|p| <&mut Xdp>::try_from(p).ok())
            .and_then(|p| p.fd().ok())
            .map(|f| f.as_fd().as_raw_fd())
        else {
            return;
        };
        for l in links.into_iter().filter(|l| which(l)) {
            let _ = crate::attach::detach(l.ifindex, fd, crate::attach::mode_flags(l.native));
        }
    }

    /// Sets the clock the program reads in [`Mode::Test`] (replay's time).
    pub fn set_test_clock(&mut self, now: u64) -> Result<(), EngineError> {
        let mut a: Array<_, u64> = self.array("test_clock")?;
        a.set(0, now, 0)
            .map_err(|e| bpf_err("writing map test_clock", &e))
    }

    /// A handle on the fast path's flow table, for a worker to hand it
    /// the flows it finds established (a descriptor of its own).
    pub fn flow_table(&self) -> Result<FlowTable, EngineError> {
        let Some(aya::maps::Map::HashMap(m)) = self.ebpf.map("ct_flows") else {
            return Err(EngineError::Bpf {
                what: "map ct_flows".into(),
                detail: "not a hash in fastfwd_xdp.o".into(),
            });
        };
        let fd = m
            .fd()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| bpf_err("duplicating map ct_flows", &e))?;
        let m = MapData::from_fd(fd).map_err(|e| bpf_err("map ct_flows", &e))?;
        let map = HashMap::try_from(aya::maps::Map::HashMap(m))
            .map_err(|e| bpf_err("map ct_flows", &e))?;
        Ok(FlowTable { map })
    }

    /// The map `name` opened again (a new descriptor), for a reader on
    /// another thread.
    fn reopen<V: aya::Pod>(&self, name: &str) -> Result<Array<MapData, V>, EngineError> {
        let Some(aya::maps::Map::Array(m)) = self.ebpf.map(name) else {
            return Err(EngineError::Bpf {
                what: format!("map {name}"),
                detail: "not an array in fastfwd_xdp.o".into(),
            });
        };
        let fd = m
            .fd()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| bpf_err(format!("duplicating map {name}"), &e))?;
        let m = MapData::from_fd(fd).map_err(|e| bpf_err(format!("map {name}"), &e))?;
        Array::try_from(aya::maps::Map::Array(m)).map_err(|e| bpf_err(format!("map {name}"), &e))
    }

    /// A reader of the FIB the program reads, for `fib audit` on a thread
    /// of its own; `None` before the first publish.
    pub fn map_reader(&self) -> Result<Option<crate::audit::MapReader>, EngineError> {
        let Some(img) = self.shadow[self.active as usize].whole() else {
            return Ok(None);
        };
        let cap = self.cap;
        let family = |fam: &str, top: u32, nodes: u32, leaves: u32| {
            Ok::<_, EngineError>(crate::audit::FamilyMaps {
                top: (self.reopen(&format!("{fam}_top"))?, top),
                nodes: (self.reopen(&format!("{fam}_nodes"))?, nodes),
                leaves: (self.reopen(&format!("{fam}_leaves"))?, leaves),
            })
        };
        let sizes = |f: &crate::compile::FibImage| (f.top.len(), f.nodes.len(), f.leaves.len());
        Ok(Some(crate::audit::MapReader {
            config: self.reopen("config")?,
            fib4: family("fib4", layout::TOP4_PAIRS, cap.nodes4, cap.leaf4_pairs())?,
            fib6: family("fib6", layout::TOP6_PAIRS, cap.nodes6, cap.leaf6_pairs())?,
            adjacencies: self.reopen("adjacencies")?,
            hops: self.reopen("hops")?,
            generation: self.generation,
            half: self.active,
            sizes: (
                [sizes(&img.fib4), sizes(&img.fib6)],
                img.adjacencies.len(),
                img.hops.len(),
            ),
        }))
    }

    /// The exception path's XSKMAP (key: port * MAX_QUEUES + queue).
    pub fn xsks(&mut self) -> &mut XskMap<MapData> {
        &mut self.xsks
    }

    /// Counters per CPU (index: CPU number), with `interfaces` interface
    /// entries each.
    pub fn counters_per_cpu(&self, interfaces: usize) -> Result<Vec<EngineCounters>, EngineError> {
        Ok(self
            .counter_blocks()?
            .iter()
            .map(|block| EngineCounters::from_block(block, interfaces))
            .collect())
    }

    /// Counters summed over CPUs, with `interfaces` interface entries.
    pub fn counters(&self, interfaces: usize) -> Result<EngineCounters, EngineError> {
        let mut sum = [0u64; layout::COUNTER_WORDS];
        for block in self.counter_blocks()?.iter() {
            for (s, v) in sum.iter_mut().zip(block.iter()) {
                *s += v;
            }
        }
        Ok(EngineCounters::from_block(&sum, interfaces))
    }

    /// The counter map's block of every CPU.
    fn counter_blocks(&self) -> Result<aya::maps::PerCpuValues<CounterBlock>, EngineError> {
        let m = self.ebpf.map("counters").ok_or_else(|| EngineError::Bpf {
            what: "map counters".into(),
            detail: "missing".into(),
        })?;
        let a: PerCpuArray<_, CounterBlock> =
            PerCpuArray::try_from(m).map_err(|e| bpf_err("map counters", &e))?;
        a.get(&0, 0)
            .map_err(|e| bpf_err("reading map counters", &e))
    }

    fn program_fd(&self) -> Result<&aya::programs::ProgramFd, EngineError> {
        let prog: &Xdp = self
            .ebpf
            .program(PROGRAM)
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| EngineError::Bpf {
                what: format!("program {PROGRAM}"),
                detail: "missing".into(),
            })?;
        prog.fd()
            .map_err(|e| bpf_err(format!("program {PROGRAM}"), &e))
    }

    /// Runs the program `repeat` times over `frame` arriving on `port`
    /// ([`Mode::Test`]) and returns the kernel's mean nanoseconds per run
    /// (for benchmarks).
    pub fn time_run(&mut self, port: u16, frame: &[u8], repeat: u32) -> Result<u32, EngineError> {
        if self.mode != Mode::Test || frame.len() < MIN_TEST_FRAME {
            return Err(EngineError::Bpf {
                what: "timed test run".into(),
                detail: "needs the test mode and an Ethernet frame".into(),
            });
        }
        let mut out: Array<_, layout::TestOut> = self.array("test_out")?;
        out.set(0, layout::test_out(0, u32::from(port)), 0)
            .map_err(|e| bpf_err("writing map test_out", &e))?;
        let fd = self.program_fd()?;
        let mut buf = vec![0u8; frame.len() + 64];
        let (_, _, ns) = netio::sys::bpf::xdp_test_run_repeat(fd.as_fd(), frame, &mut buf, repeat)
            .map_err(|e| bpf_err("BPF_PROG_TEST_RUN", &e))?;
        Ok(ns)
    }

    /// Runs the program once over `frame` arriving on `port` (only in
    /// [`Mode::Test`], and only frames of at least [`MIN_TEST_FRAME`]
    /// bytes: the kernel runs no program over less).
    pub fn test_run(&mut self, port: u16, frame: &[u8]) -> Result<Outcome, EngineError> {
        if self.mode != Mode::Test || frame.len() < MIN_TEST_FRAME {
            return Err(EngineError::Bpf {
                what: "test run".into(),
                detail: if self.mode != Mode::Test {
                    "the engine was loaded for interfaces".into()
                } else {
                    format!(
                        "a frame of {} bytes is shorter than an Ethernet header",
                        frame.len()
                    )
                },
            });
        }
        let mut out: Array<_, layout::TestOut> = self.array("test_out")?;
        out.set(0, layout::test_out(0, u32::from(port)), 0)
            .map_err(|e| bpf_err("writing map test_out", &e))?;
        let fd = self.program_fd()?;
        let mut buf = vec![0u8; frame.len() + 64];
        let (action, len) = netio::sys::bpf::xdp_test_run(fd.as_fd(), frame, &mut buf)
            .map_err(|e| bpf_err("BPF_PROG_TEST_RUN", &e))?;
        let out: Array<_, layout::TestOut> = self.array("test_out")?;
        let (kind, detail, ct_hint) = layout::test_out_fields(
            &out.get(&0, 0)
                .map_err(|e| bpf_err("reading map test_out", &e))?,
        );
        let reason = |all: &[(&str, DropReason)]| {
            all.iter()
                .find(|(_, r)| r.index() as u32 == detail)
                .map(|&(_, r)| r)
        };
        let bad = |what: &str| EngineError::Bpf {
            what: "test run".into(),
            detail: format!("{what} (action {action}, kind {kind}, detail {detail})"),
        };
        Ok(match kind {
            layout::OUT_FORWARD => {
                buf.truncate(len);
                Outcome::Forward {
                    port: detail as u16,
                    frame: buf,
                }
            }
            layout::OUT_DROP => {
                Outcome::Drop(reason(&layout::DROPS).ok_or_else(|| bad("unknown drop reason"))?)
            }
            layout::OUT_PUNT => Outcome::Punt(
                layout::PUNTS
                    .iter()
                    .find(|(_, r)| r.index() as u32 == detail)
                    .map(|&(_, r)| r)
                    .ok_or_else(|| bad("unknown punt reason"))?,
            ),
            layout::OUT_EXCEPTION => Outcome::Exception {
                cause: detail,
                ct_hint: u8::try_from(ct_hint).map_err(|_| bad("unknown hint"))?,
            },
            _ => return Err(bad("no outcome recorded")),
        })
    }
}

/// The fast path's connection table (`ct_flows`), as a worker or the
/// daemon's sweeper holds it.
pub struct FlowTable {
    map: HashMap<MapData, layout::CtKey, layout::CtValue>,
}

impl std::fmt::Debug for FlowTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowTable").finish()
    }
}

impl FlowTable {
    /// Adds an established flow of connection-table `epoch` (a flow the
    /// table already holds is left as the program keeps it). True when
    /// the table holds the flow now; false when it had no room (the flow
    /// stays with the pipeline).
    pub fn give(&mut self, f: &firewall::FastFlow, epoch: u32) -> bool {
        // BPF_NOEXIST.
        match self
            .map
            .insert(layout::ct_key(f), layout::ct_value(f, epoch), 1)
        {
            Ok(()) => true,
            Err(aya::maps::MapError::SyscallError(e)) => {
                e.io_error.raw_os_error() == Some(libc::EEXIST)
            }
            Err(_) => false,
        }
    }

    /// Deletes the entries expired at `now` or of another epoch than
    /// `epoch` (the program ignores them; this frees their room). Returns
    /// (entries left, entries deleted).
    pub fn sweep(&mut self, now: u64, epoch: u32) -> (u64, u64) {
        let keys: Vec<layout::CtKey> = self.map.keys().filter_map(Result::ok).collect();
        let (mut left, mut gone) = (0, 0);
        for k in keys {
            let stale = match self.map.get(&k, 0) {
                Ok(v) => {
                    let (expires, e, _) = layout::ct_value_fields(&v);
                    expires <= now || e != epoch
                }
                Err(_) => continue,
            };
            if stale && self.map.remove(&k).is_ok() {
                gone += 1;
            } else if !stale {
                left += 1;
            }
        }
        (left, gone)
    }

    /// Every entry: (key, value), for tests and audits.
    pub fn entries(&self) -> Vec<(layout::CtKey, layout::CtValue)> {
        self.map.iter().filter_map(Result::ok).collect()
    }
}

/// The id of the XDP engine's program attached to `ifindex` now, with
/// an open descriptor of it, if the program attached there is one (left
/// by an earlier fastfwd: exited with `--on-exit keep`, killed or
/// crashed); `None` when nothing or another program is attached.
fn left_behind(
    ifindex: u32,
) -> std::io::Result<Option<(crate::attach::AttachedProgram, aya::programs::ProgramFd)>> {
    let Some(now) = crate::attach::attached(ifindex)? else {
        return Ok(None);
    };
    let Some(info) = aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .find(|p| p.id() == now.prog_id)
        .filter(|p| p.name_as_str() == Some(PROGRAM))
    else {
        return Ok(None);
    };
    let fd = info.fd().map_err(std::io::Error::other)?;
    Ok(Some((now, fd)))
}

/// Detaches the XDP engine's program an earlier fastfwd left forwarding
/// on `ifindex`, for a daemon that forwards there otherwise (the
/// user-space engine); returns its id, or `None` if there was none.
pub fn detach_left_behind(ifindex: u32) -> std::io::Result<Option<u32>> {
    let Some((now, fd)) = left_behind(ifindex)? else {
        return Ok(None);
    };
    crate::attach::detach(
        ifindex,
        fd.as_fd().as_raw_fd(),
        crate::attach::mode_flags(now.native),
    )?;
    Ok(Some(now.prog_id))
}

impl Drop for Engine {
    /// Detaches the program where this engine attached it afresh; where it
    /// replaced an earlier fastfwd's it stays, forwarding with this
    /// engine's tables (a start that fails after adopting a port must not
    /// end the forwarding the earlier daemon left running).
    fn drop(&mut self) {
        self.detach_where(|l| l.adopted.is_none());
    }
}

/// The `ports` elements of an image (every port id).
fn port_values(i: &Image) -> Vec<layout::PortValue> {
    (0..layout::MAX_PORTS as usize)
        .map(|p| {
            let (untagged, vlans) = i.ports.get(p).copied().unwrap_or((None, false));
            layout::port(untagged, vlans, 0)
        })
        .collect()
}

/// A map value as the program reads it: its bytes, native-endian.
trait MapValue {
    fn put(&self, out: &mut Vec<u8>);
}

impl MapValue for u32 {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_ne_bytes());
    }
}

impl MapValue for u64 {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_ne_bytes());
    }
}

impl<const N: usize> MapValue for [u8; N] {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
}

/// Writes the elements of one half that changed (`old`: the image last
/// written into it, `None` if none was), in one batched `bpf()` call: a
/// full table's first image is some 10^6 elements, which one call each
/// took seconds to write.
fn diff_array<V: aya::Pod + MapValue + PartialEq + Default>(
    e: &mut Engine,
    name: &str,
    base: u32,
    new: &[V],
    old: Option<&[V]>,
    clear_tail: bool,
) -> Result<(), EngineError> {
    let zero = V::default();
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    for (i, v) in new.iter().enumerate() {
        // A half never written holds zeros; past the end of what was last
        // written, a half holds whatever an older, longer image left there
        // (tails are not cleared), so those elements are always written.
        let before = match old {
            None => Some(&zero),
            Some(o) => o.get(i),
        };
        if before != Some(v) {
            keys.push(base + i as u32);
            v.put(&mut values);
        }
    }
    if clear_tail && let Some(o) = old {
        for i in new.len()..o.len() {
            keys.push(base + i as u32);
            zero.put(&mut values);
        }
    }
    if keys.is_empty() {
        return Ok(());
    }
    // The typed map checks that the map's values are `V`s.
    let a: Array<_, V> = e.array(name)?;
    netio::sys::bpf::array_update_batch(
        a.map().fd().as_fd(),
        &keys,
        &values,
        std::mem::size_of::<V>(),
    )
    .map_err(|err| {
        bpf_err(
            format!(
                "writing {} elements of map {name} from [{}]",
                keys.len(),
                keys[0]
            ),
            &err,
        )
    })
}

/// Writes the keys of one half that changed, removes those that went.
fn diff_hash<K: Ord, V: PartialEq, MK: aya::Pod, MV: aya::Pod>(
    e: &mut Engine,
    name: &str,
    new: &std::collections::BTreeMap<K, V>,
    old: Option<&std::collections::BTreeMap<K, V>>,
    key: impl Fn(&K) -> MK,
    value: impl Fn(&V) -> MV,
) -> Result<(), EngineError> {
    let mut h: HashMap<_, MK, MV> = e.hash(name)?;
    for (k, v) in new {
        if old.and_then(|o| o.get(k)) != Some(v) {
            h.insert(key(k), value(v), 0)
                .map_err(|err| bpf_err(format!("writing map {name}"), &err))?;
        }
    }
    if let Some(o) = old {
        for k in o.keys() {
            if !new.contains_key(k) {
                // Already gone is fine.
                let _ = h.remove(&key(k));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fib::RouteTable;
    use fib::poptrie::Poptrie;
    use pipeline::{Discard, Interface, Ipv4IfAddr, MacAddr, NextHop, RouteTarget, TablesBuilder};
    use std::net::{IpAddr, Ipv4Addr};

    const MAC0: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const PEER_A: [u8; 6] = [2, 0, 0, 0, 1, 0xa];
    const PEER_B: [u8; 6] = [2, 0, 0, 0, 1, 0xb];
    const PEER_C: [u8; 6] = [2, 0, 0, 0, 1, 0xc];

    /// Which way 10.0.0.0/8 goes.
    #[derive(Clone, Copy)]
    enum Via {
        A,
        B,
        Blackhole,
    }

    /// Two ports, two neighbours on the second (198.51.100.2 at `mac2`),
    /// and 10.0.0.0/8 sent `via`.
    fn image(engine: &Engine, via: Via, mac2: [u8; 6]) -> Image {
        let mut b = TablesBuilder::new();
        let iface = |name: &str, port, mac, a: [u8; 4]| Interface {
            name: name.into(),
            port,
            vlan: pipeline::Vlan::Untagged,
            mac: MacAddr(mac),
            ipv4: vec![Ipv4IfAddr {
                addr: Ipv4Addr::from(a),
                prefix_len: 24,
            }],
            ipv6: vec![],
            mtu: 1500,
        };
        b.add_interface(iface("d0", 0, MAC0, [192, 0, 2, 1]))
            .unwrap();
        let d1 = b
            .add_interface(iface("d1", 1, [2, 0, 0, 0, 1, 1], [198, 51, 100, 1]))
            .unwrap();
        let peer = |last| IpAddr::V4(Ipv4Addr::new(198, 51, 100, last));
        b.add_neighbour(d1, peer(2), MacAddr(mac2)).unwrap();
        b.add_neighbour(d1, peer(3), MacAddr(PEER_B)).unwrap();
        let hop = |last| {
            RouteTarget::Forward(vec![NextHop {
                interface: d1,
                gateway: Some(peer(last)),
            }])
        };
        let ids = [
            b.add_target(&hop(2)).unwrap(),
            b.add_target(&hop(3)).unwrap(),
            b.add_target(&RouteTarget::Discard(Discard::Blackhole))
                .unwrap(),
        ];
        let mut f4 = Poptrie::<u32>::new();
        let mut f6 = Poptrie::<u128>::new();
        b.install_connected_routes(&mut f4, &mut f6);
        f4.insert(
            wire::Ipv4Cidr::new(0x0a00_0000, 8).unwrap(),
            ids[via as usize],
        );
        let t = b.build(f4, f6);
        Image::compile(&t.datapath(), &t.fib4, &t.fib6, None, &engine.capacity()).unwrap()
    }

    /// Where the program sends a UDP datagram from d0's subnet to
    /// 10.1.2.3: the destination MAC it is forwarded to, or None.
    fn answer(engine: &mut Engine) -> Option<[u8; 6]> {
        let mut f = MAC0.to_vec();
        f.extend_from_slice(&[2, 0, 0, 0, 0, 2, 0x08, 0x00]);
        let mut ip = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0];
        ip.extend_from_slice(&[192, 0, 2, 2, 10, 1, 2, 3]);
        let sum = wire::checksum::checksum(&ip);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&[0x30, 0x39, 0, 9, 0, 8, 0, 0]);
        match engine.test_run(0, &f).unwrap() {
            Outcome::Forward { port: 1, frame } => Some(frame[..6].try_into().unwrap()),
            _ => None,
        }
    }

    /// A publish whose map writes fail part way leaves the program on the
    /// tables it had (nothing flips, the generation stays); the half
    /// written in part is written whole by the next publish, not diffed
    /// against what it held before; a failed flip (the config write) is
    /// no flip either.
    #[test]
    fn a_failed_publish_changes_nothing_the_program_reads() {
        if !netio::root_or_skip("the XDP engine publish test") {
            return;
        }
        let mut e = Engine::load(Mode::Test, FibCapacity::SMALL).unwrap();
        e.publish(image(&e, Via::A, PEER_A)).unwrap();
        let img = image(&e, Via::B, PEER_A);
        e.publish(img).unwrap();
        assert_eq!(answer(&mut e), Some(PEER_B));
        // Into the half that holds A: the FIB is written, the neighbours
        // (.2 moved to another MAC) fail.
        let generation = e.generation();
        e.fail_writes.push("neighbours");
        let img = image(&e, Via::Blackhole, PEER_C);
        assert!(e.publish(img).is_err());
        assert_eq!(e.generation(), generation);
        assert_eq!(answer(&mut e), Some(PEER_B));
        // The same half again: B's FIB is written, then the neighbours
        // fail again.
        e.fail_writes.push("neighbours");
        let img = image(&e, Via::B, PEER_A);
        assert!(e.publish(img).is_err());
        assert_eq!(e.generation(), generation);
        assert_eq!(answer(&mut e), Some(PEER_B));
        // The same half, holding parts of three images: A is written so
        // that it holds A alone (a diff against the A it held before would
        // write nothing, and B's FIB would answer).
        let img = image(&e, Via::A, PEER_A);
        e.publish(img).unwrap();
        assert_eq!(answer(&mut e), Some(PEER_A));
        // The flip itself fails: the program stays on A, and the half
        // written meanwhile is not the active one.
        let generation = e.generation();
        e.fail_writes.push("config");
        let img = image(&e, Via::B, PEER_A);
        assert!(e.publish(img).is_err());
        assert_eq!(e.generation(), generation);
        assert_eq!(answer(&mut e), Some(PEER_A));
        let img = image(&e, Via::Blackhole, PEER_C);
        e.publish(img).unwrap();
        assert_eq!(answer(&mut e), None);
        let img = image(&e, Via::B, PEER_A);
        e.publish(img).unwrap();
        assert_eq!(answer(&mut e), Some(PEER_B));
    }
}
