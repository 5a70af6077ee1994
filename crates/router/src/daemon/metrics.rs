//! `show_metrics`: every counter as OpenMetrics text.

use super::*;

impl Daemon {
    /// Every counter as OpenMetrics text (see [`crate::metrics`]).
    pub(super) fn metrics_text(&self) -> String {
        let mut m = crate::metrics::Scrape::new();
        let reps = self.reports();
        self.traffic_metrics(&mut m, &reps);
        Self::worker_metrics(&mut m, &reps);
        self.firewall_metrics(&mut m);
        self.control_metrics(&mut m);
        m.encode()
    }

    /// What the interfaces, the XDP program and the pipeline did with
    /// the traffic: packets and bytes, drops, punts, ICMP errors.
    fn traffic_metrics(&self, m: &mut crate::metrics::Scrape, reps: &[WorkerReport]) {
        let total = Counters::sum(reps.iter().map(|r| &r.counters));
        let tables = self.shared.snapshot.load();
        for (i, iface) in tables.interfaces().iter().enumerate() {
            let c = total.interfaces.get(i).copied().unwrap_or_default();
            let l = [("interface", iface.name.as_str())];
            m.counter(
                "interface_rx_packets",
                "Frames received on the interface.",
                &l,
                c.rx_packets,
            );
            m.counter(
                "interface_rx_bytes",
                "Bytes received on the interface.",
                &l,
                c.rx_bytes,
            );
            m.counter(
                "interface_rx_dropped",
                "Frames received and dropped (any reason).",
                &l,
                c.rx_dropped,
            );
            m.counter(
                "interface_tx_packets",
                "Frames sent out of the interface.",
                &l,
                c.tx_packets,
            );
            m.counter(
                "interface_tx_bytes",
                "Bytes sent out of the interface.",
                &l,
                c.tx_bytes,
            );
        }
        for name in self.router.ports() {
            if crate::ports::bond_members(name).is_some() {
                m.counter(
                    "port_bond_tx_dropped",
                    "Frames the kernel dropped on their way out of a bond port or its members since the start.",
                    &[("port", name.as_str())],
                    self.bond_tx_dropped(name),
                );
            }
        }
        if let Some(x) = &self.xdp {
            let faults = x.tx_faults();
            for (p, name) in self.router.ports().iter().enumerate() {
                let l = [("port", name.as_str())];
                if let Some(f) = faults.as_ref().and_then(|f| f.ports.get(p)) {
                    m.counter(
                        "xdp_port_redirects_dropped",
                        "Frames the kernel dropped after the XDP program redirected them into the port (refused, or its ring full).",
                        &l,
                        f.dropped,
                    );
                }
                let punted = u16::try_from(p).is_ok_and(|p| x.egress.reason(p).is_some());
                m.gauge(
                    "xdp_port_pipeline_egress",
                    "1 while the port takes no frames redirected from XDP and the pipeline transmits its traffic.",
                    &l,
                    u64::from(punted),
                );
            }
        }
        for r in pipeline::DropReason::ALL {
            m.counter(
                "drops",
                "Frames dropped, by reason (show drops).",
                &[("reason", r.name())],
                total.drop_count(*r),
            );
        }
        for r in PuntReason::ALL {
            m.counter(
                "punts",
                "Frames handed to the host, by reason.",
                &[("reason", r.name())],
                total.punt_count(*r),
            );
        }
        for c in pipeline::IcmpSuppressed::ALL {
            m.counter(
                "icmp_suppressed",
                "ICMP errors not sent, by cause.",
                &[("cause", c.name())],
                total.icmp_suppressed_by[c.index()],
            );
        }
        m.counter(
            "icmp_sent",
            "ICMP and ICMPv6 errors sent.",
            &[],
            total.icmp_sent,
        );
        m.counter(
            "icmp_rate_limited",
            "ICMP errors over the rate limit.",
            &[],
            total.icmp_rate_limited,
        );
        m.counter(
            "forwarded",
            "Packets forwarded, by family.",
            &[("family", "ipv4")],
            total.forwarded_ipv4,
        );
        m.counter(
            "forwarded",
            "Packets forwarded, by family.",
            &[("family", "ipv6")],
            total.forwarded_ipv6,
        );
    }

    /// Each worker's (and the XDP program's) own counters and rings.
    fn worker_metrics(m: &mut crate::metrics::Scrape, reps: &[WorkerReport]) {
        for r in reps {
            let w = r.view.id.to_string();
            let engine = if r.view.backend == "xdp-program" {
                "xdp-program"
            } else {
                "pipeline"
            };
            let l = [("worker", w.as_str()), ("engine", engine)];
            m.counter(
                "worker_rx_frames",
                "Frames a worker (or the XDP program) processed.",
                &l,
                r.counters.rx_frames,
            );
            m.counter(
                "worker_busy_rounds",
                "Worker loop rounds that found frames.",
                &l,
                r.view.busy_rounds,
            );
            m.counter(
                "worker_sleeps",
                "Times a worker slept in poll(2).",
                &l,
                r.view.sleeps,
            );
            m.counter(
                "worker_held_expired",
                "Frames dropped after waiting 1 s for their neighbour.",
                &l,
                r.view.held_expired,
            );
            m.counter(
                "worker_handed_off",
                "Frames passed to the worker that owns their flow.",
                &l,
                r.view.handed_off,
            );
            m.counter(
                "worker_handoff_dropped",
                "Frames dropped: the ring to the worker that owns their flow was full.",
                &l,
                r.view.handoff_dropped,
            );
            for p in &r.view.ports {
                let l = [("worker", w.as_str()), ("port", p.port.as_str())];
                m.counter(
                    "port_rx_ring_full",
                    "Frames the kernel dropped before fastfwd saw them.",
                    &l,
                    p.counters.rx_dropped,
                );
                m.counter(
                    "port_tx_ring_full",
                    "Frames that found the TX ring full.",
                    &l,
                    p.counters.tx_dropped,
                );
                m.counter(
                    "port_rx_oversize",
                    "Frames larger than a frame buffer, dropped on receive.",
                    &l,
                    p.counters.rx_oversize,
                );
            }
            if let Some(x) = &r.view.xdp {
                for (cause, n) in &x.exceptions {
                    m.counter(
                        "xdp_exceptions",
                        "Packets the XDP program handed to the pipeline, by cause.",
                        &[("cause", cause.as_str())],
                        *n,
                    );
                }
                m.counter(
                    "xdp_exceptions_ring_full",
                    "Exceptions the kernel dropped: the AF_XDP socket's ring was full.",
                    &[],
                    x.exceptions_ring_full,
                );
            }
        }
    }

    /// The firewall's rules and connection tracking.
    fn firewall_metrics(&self, m: &mut crate::metrics::Scrape) {
        let fw = self.show_firewall();
        for chain in fw.firewall.iter().flat_map(|f| &f.chains) {
            let name = chain.chain.name();
            for rule in &chain.rules {
                let line = rule.line.to_string();
                let l = [("chain", name), ("line", line.as_str())];
                m.counter(
                    "firewall_rule_packets",
                    "Packets that matched a firewall rule (by its config line).",
                    &l,
                    rule.packets,
                );
                m.counter(
                    "firewall_rule_bytes",
                    "Bytes that matched a firewall rule.",
                    &l,
                    rule.bytes,
                );
            }
        }
        if let Some(ct) = &fw.conntrack {
            m.gauge(
                "conntrack_entries",
                "Connection-table slots in use.",
                &[],
                ct.occupancy,
            );
            m.gauge(
                "conntrack_capacity",
                "Connection-table slots.",
                &[],
                ct.capacity,
            );
            m.counter("conntrack_inserts", "Connections added.", &[], ct.inserts);
            m.counter(
                "conntrack_evictions",
                "Connections evicted to make room.",
                &[],
                ct.evictions,
            );
        }
    }

    /// The routes, the kernel mirror and the control thread's work.
    fn control_metrics(&self, m: &mut crate::metrics::Scrape) {
        let (v4, v6) = self.router.route_counts();
        m.gauge(
            "fib_routes",
            "Routes installed, by family.",
            &[("family", "ipv4")],
            v4 as u64,
        );
        m.gauge(
            "fib_routes",
            "Routes installed, by family.",
            &[("family", "ipv6")],
            v6 as u64,
        );
        let kernel = &self.router.state.kernel;
        for (family, v6) in [("ipv4", false), ("ipv6", true)] {
            m.gauge(
                "kernel_rules",
                "Policy rules (ip rule) mirrored from the kernel, by family.",
                &[("family", family)],
                kernel.rules.iter().filter(|r| r.v6 == v6).count() as u64,
            );
            m.gauge(
                "kernel_table_routes",
                "Routes mirrored from the kernel's tables other than main and local, by family.",
                &[("family", family)],
                kernel
                    .tables
                    .values()
                    .flat_map(|t| t.keys())
                    .filter(|(p, _)| matches!(p, wire::Cidr::V6(_)) == v6)
                    .count() as u64,
            );
        }
        m.counter(
            "route_updates",
            "Route prefixes re-decided after kernel or control-socket changes.",
            &[],
            self.route_updates,
        );
        m.counter(
            "kernel_change_batches",
            "Batches of kernel changes applied to the tables, each published to the workers once.",
            &[],
            self.kernel_batches,
        );
        m.counter(
            "table_rebuilds",
            "Full rebuilds of the tables (links, addresses, config).",
            &[],
            self.rebuilds,
        );
        m.gauge(
            "kernel_unmodelled",
            "Pieces of the kernel's routing state fastfwd does not mirror (policy rules, VRFs, source-specific, TOS or encapsulated routes): while nonzero the kernel would forward some packets other than fastfwd does. Named in the log and by fib audit.",
            &[],
            self.unmodelled.len() as u64,
        );
        m.counter(
            "kernel_resyncs",
            "Full re-reads of the kernel's tables after lost netlink broadcasts.",
            &[],
            self.kernel.resyncs(),
        );
        m.counter(
            "kernel_netlink_errors",
            "Netlink errors the daemon survived (event socket reads, its drop counter, re-reads that could not start or failed), each answered with a re-read of the kernel's tables.",
            &[],
            self.kernel.errors().0,
        );
        m.counter(
            "kernel_netlink_rejected",
            "Netlink messages dropped: broadcasts of a kind fastfwd follows that it could not decode, and datagrams not sent by the kernel.",
            &[],
            self.kernel.rejected(),
        );
        m.counter(
            "neighbour_requests",
            "Neighbour resolutions asked of the kernel (ARP / ND requests it sends).",
            &[],
            self.resolver.requested,
        );
        m.counter(
            "neighbour_requests_capped",
            "Neighbour resolutions not asked, over the cap.",
            &[],
            self.resolver.capped,
        );
    }
}
