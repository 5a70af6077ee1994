//! The XDP engine kept in step with the published tables.

use super::*;

/// The XDP engine and the tables generation it holds.
pub(crate) struct XdpEngine {
    pub(crate) engine: xdp_engine::Engine,
    /// (snapshot, IPv4 FIB, IPv6 FIB) generations last compiled.
    pub(crate) synced: Option<(u64, u64, u64)>,
    /// After a failed publish: when to try again.
    pub(crate) retry_at: Option<Instant>,
    /// The fast path's flow table, swept of dead flows every
    /// [`FLOW_SWEEP`], and when that last happened.
    pub(crate) sweeper: Option<(xdp_engine::FlowTable, Instant)>,
    /// Why the program last handed every transit packet to the pipeline
    /// instead of evaluating the firewall (logged when it changes).
    pub(crate) except_reason: Option<&'static str>,
    /// The ports that take no frames redirected from XDP (the pipeline
    /// transmits for them).
    pub(crate) egress: crate::egress::EgressWatch,
    /// The kernel's netdev family, where it has one (xdp-features).
    pub(crate) netdev: Option<control::netdev::NetdevLink>,
    /// Whether the tracepoints count the redirected frames the kernel
    /// drops (`Err`: why not).
    pub(crate) faults_counted: std::result::Result<(), String>,
    /// What happens to the program when the daemon exits.
    pub(crate) on_exit: crate::OnExit,
}

/// How often the XDP engine's flow table is swept of expired flows (the
/// program ignores them; sweeping frees their room).
const FLOW_SWEEP: Duration = Duration::from_secs(10);

/// How long after a failed publish (a map write refused) the tables are
/// compiled and written again; meanwhile the pipeline takes every packet.
const PUBLISH_RETRY: Duration = Duration::from_secs(1);

impl XdpEngine {
    /// Compiles the current tables into the program's maps if they changed
    /// since the last time. Tables that do not fit (or a failed map write)
    /// leave the program handing every transit packet to the pipeline,
    /// which has them: slower, never wrong.
    pub(crate) fn sync(&mut self, snapshot: &Snapshot) {
        let tables = snapshot.load();
        let (s4, s6) = (tables.fib4.snapshot(), tables.fib6.snapshot());
        let key = (snapshot.generation(), s4.generation(), s6.generation());
        if self.synced == Some(key) || self.retry_at.is_some_and(|t| Instant::now() < t) {
            return;
        }
        self.synced = Some(key);
        let punted = self.egress.punted();
        let r = compile_image(&tables, s4.trie(), s6.trie(), &self.engine.capacity())
            .map_err(xdp_engine::EngineError::from)
            .and_then(|mut image| {
                image.punt_tx(&punted);
                let reason = image.except_reason;
                self.engine.publish(image).map(|()| reason)
            });
        if let Ok(reason) = r
            && reason != self.except_reason
        {
            // Still correct (the pipeline routes and filters them), but
            // every transit packet takes the slow path: say so once, why.
            match reason {
                Some(why) => {
                    warn!(
                        reason = why,
                        "the XDP program hands every transit packet to the pipeline, which routes and filters it"
                    )
                }
                None if self.except_reason.is_some() => {
                    info!("the XDP program routes and filters transit packets again")
                }
                None => {}
            }
            self.except_reason = reason;
        }
        self.retry_at = None;
        if let Err(e) = r {
            warn!(error = %e, "the XDP program hands every transit packet to the pipeline until its tables are written");
            // A map write may fail once (memory) and not again: tried anew
            // (tables that do not fit wait for the next change).
            if matches!(e, xdp_engine::EngineError::Bpf { .. }) {
                self.synced = None;
                self.retry_at = Some(Instant::now() + PUBLISH_RETRY);
            }
            if let Err(e) = self.engine.force_except_all() {
                error!(error = %e, "cannot make the XDP program hand on every packet");
            }
        }
    }
}

impl XdpEngine {
    /// Follows which ports take frames redirected from XDP (see `egress`):
    /// `ports` are each port's name and current ifindex. When the set of
    /// ports the pipeline transmits for changes, the tables are compiled
    /// again at the next `sync`.
    pub(crate) fn watch_egress(&mut self, ports: &[(String, Option<u32>)]) {
        let engine = &self.engine;
        let counted = self.faults_counted.is_ok();
        let netdev = &mut self.netdev;
        let changed = self.egress.check(
            Instant::now(),
            || {
                if !counted {
                    return None;
                }
                match engine.tx_faults() {
                    Ok(f) => Some(f.ports.iter().map(|p| p.refused).collect()),
                    Err(e) => {
                        warn!(error = %e, "reading the XDP program's dropped redirects");
                        None
                    }
                }
            },
            ports,
            |ifindex| {
                let n = netdev.as_mut()?;
                match n.xdp_features(ifindex) {
                    Ok(f) => f.map(control::netdev::XdpFeatures::takes_redirects),
                    Err(e) => {
                        warn!(error = %e, ifindex, "asking the kernel for a port's xdp-features");
                        None
                    }
                }
            },
        );
        if changed {
            self.synced = None;
        }
    }

    /// The redirected frames the kernel dropped, when they are counted.
    pub(crate) fn tx_faults(&self) -> Option<xdp_engine::TxFaults> {
        self.faults_counted.as_ref().ok()?;
        self.engine.tx_faults().ok()
    }
}

impl XdpEngine {
    /// Deletes expired flows and flows of an older epoch from the fast
    /// path's table, at most every [`FLOW_SWEEP`] (off the workers: the
    /// control thread walks the table with map syscalls).
    pub(super) fn sweep_flows(&mut self, snapshot: &Snapshot) {
        let Some(epoch) = snapshot
            .load()
            .acl
            .as_ref()
            .filter(|a| a.firewall().stateful())
            .map(firewall::PipelineFirewall::epoch)
        else {
            return;
        };
        if self.sweeper.is_none() {
            match self.engine.flow_table() {
                Ok(t) => self.sweeper = Some((t, Instant::now())),
                Err(e) => {
                    warn!(error = %e, "the XDP engine's flow table cannot be swept");
                    return;
                }
            }
        }
        if let Some((table, last)) = self.sweeper.as_mut()
            && last.elapsed() >= FLOW_SWEEP
        {
            *last = Instant::now();
            let (left, gone) = table.sweep(os::monotonic_ns(), epoch);
            tracing::debug!(left, gone, "XDP engine flow table swept");
        }
    }
}

impl XdpEngine {
    /// The XDP layer of a FIB audit of the current tables: the program's
    /// maps, read back on the audit thread, against a fresh compile of the
    /// snapshot they were published from, and looked up at every installed
    /// prefix as the fib layer is.
    pub(crate) fn audit(&mut self, snapshot: &Snapshot) -> control::audit::EngineAudit {
        use control::audit::EngineChecked;
        self.sync(snapshot);
        let skipped = |why: String| -> control::audit::EngineAudit {
            Box::new(move |_, _, _| EngineChecked {
                engine: "xdp".into(),
                skipped: Some(why),
                ..EngineChecked::default()
            })
        };
        if self.engine.except_all() {
            return skipped(
                "the program hands every transit packet to the pipeline (firewall rules it cannot evaluate, or tables that do not fit its maps)".into(),
            );
        }
        let reader = match self.engine.map_reader() {
            Ok(Some(r)) => r,
            Ok(None) => return skipped("nothing published yet".into()),
            Err(e) => return skipped(format!("opening the maps: {e}")),
        };
        let tables = snapshot.load();
        let (s4, s6) = (
            Arc::clone(&*tables.fib4.snapshot()),
            Arc::clone(&*tables.fib6.snapshot()),
        );
        let cap = self.engine.capacity();
        Box::new(move |installed, tables, out| {
            let mut checked = EngineChecked {
                engine: "xdp".into(),
                generation: reader.generation(),
                ..EngineChecked::default()
            };
            let back = match reader.read() {
                Ok(Some(b)) => b,
                Ok(None) => {
                    checked.skipped = Some("the tables changed while the maps were read".into());
                    return checked;
                }
                Err(e) => {
                    checked.skipped = Some(format!("reading the maps: {e}"));
                    return checked;
                }
            };
            match compile_image(tables, s4.trie(), s6.trie(), &cap) {
                Ok(fresh) => {
                    let (diffs, n) = xdp_engine::audit::compare(&back, &fresh);
                    checked.elements = n;
                    out.extend(diffs.into_iter().map(|d| control::audit::Difference {
                        layer: "xdp".into(),
                        item: format!("map {}", d.map),
                        kind: "different".into(),
                        want: format!("{} elements as the tables compile", d.want),
                        have: format!("{} differ, the first at {}", d.differing, d.first),
                    }));
                }
                Err(e) => checked.skipped = Some(format!("compiling the tables: {e}")),
            }
            checked.lookups = control::audit::compare_lookups(
                "xdp",
                installed,
                tables,
                |a| back.fib4.lookup4(a),
                |a| back.fib6.lookup6(a),
                out,
            );
            checked
        })
    }
}

/// One snapshot of the tables (`fib4`/`fib6`: its tries) as the XDP
/// program's map content.
fn compile_image(
    tables: &rib::RouterTables,
    fib4: &fib::poptrie::Poptrie<u32>,
    fib6: &fib::poptrie::Poptrie<u128>,
    cap: &xdp_engine::FibCapacity,
) -> Result<xdp_engine::Image, xdp_engine::CompileError> {
    xdp_engine::Image::compile(&tables.datapath(), fib4, fib6, tables.acl.as_ref(), cap)
}

/// Keeps every program's local-address map equal to all of the router's
/// addresses: a packet to d1's address arriving on d0 is for the host too.
pub(crate) fn set_local_addrs(
    programs: &mut [XdpProgram],
    new: &[(u16, IpAddr)],
    old: &[(u16, IpAddr)],
) {
    for &(_, addr) in old {
        if !new.iter().any(|&(_, a)| a == addr) {
            for p in programs.iter_mut() {
                let _ = p.remove_local(addr);
            }
        }
    }
    for &(_, addr) in new {
        for p in programs.iter_mut() {
            if let Err(e) = p.add_local(addr) {
                warn!(error = %e, "local address map");
            }
        }
    }
}
