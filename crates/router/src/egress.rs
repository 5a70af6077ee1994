//! Ports the XDP engine cannot transmit on, found and followed.
//!
//! A frame the XDP program redirects into a port is lost when the port's
//! device takes no XDP frames: a driver without `ndo_xdp_xmit`, a driver
//! whose XDP transmit queues are not set up, a veth whose peer runs no
//! NAPI (neither GRO nor an XDP program on the peer). The kernel drops it
//! after the program returned, so the program cannot count it itself.
//!
//! Two signs, both read on the control thread:
//! - the device's `xdp-features` (the kernel's netdev family, Linux 6.3+):
//!   without `ndo-xmit` the device refuses; checked at start, every
//!   [`FEATURES_EVERY`] and on the port's link changes, before any frame
//!   is lost;
//! - the tracepoint programs' counts ([`xdp_engine::TxFaults`]): frames
//!   refused outright (EOPNOTSUPP, ENXIO) mark the port at the next check
//!   ([`FAULTS_EVERY`]); on kernels without xdp-features this is the only
//!   sign, and the frames lost before it are counted as drops.
//!
//! Only a frame received in native (driver) mode needs the egress device's
//! `ndo_xdp_xmit`: in generic (SKB) mode the kernel transmits a redirected
//! frame as a packet, which every device takes. So xdp-features count only
//! while some port receives natively (or, before the ports are attached,
//! may: any mode but `--xdp-mode generic`).
//!
//! A port found refusing has its interfaces flagged in the program's maps
//! (`FF_IFACE_PUNT_TX`): what the program would forward there goes to the
//! user-space pipeline, which transmits it through its AF_XDP socket on the
//! port (a copy into the kernel's ordinary transmit path, which every
//! device takes). It returns to the program when its xdp-features gain
//! `ndo-xmit` after having lacked it, or, when only refusals marked it,
//! when its link changes (a new device, or the same one set up again).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use tracing::{error, info};

/// How often the dropped-redirect counters are read.
pub(crate) const FAULTS_EVERY: Duration = Duration::from_millis(100);
/// How often each port's xdp-features are asked for.
pub(crate) const FEATURES_EVERY: Duration = Duration::from_secs(1);

/// Why a port is served by the pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// Its xdp-features lacked `ndo-xmit` at the last ask.
    features_off: bool,
    /// Its xdp-features lacked `ndo-xmit` at some ask since it was marked.
    features_seen_off: bool,
    /// Frames it refused before it was marked (0: marked by its features).
    refused: u64,
}

/// The ports the program hands to the pipeline, and what is known of them.
#[derive(Debug, Default)]
pub(crate) struct EgressWatch {
    refusing: BTreeMap<u16, Refusal>,
    /// Refused frames per port at the last check.
    seen_refused: Vec<u64>,
    last_faults: Option<Instant>,
    last_features: Option<Instant>,
    /// Ports whose link changed since the last check.
    changed: BTreeSet<u16>,
    /// Per attached port, whether the program runs there in native mode.
    native: BTreeMap<u16, bool>,
    /// Before any port is attached: whether one may be native.
    may_be_native: bool,
}

impl EgressWatch {
    /// A watch for ports to be attached natively if `may_be_native`.
    pub(crate) fn new(may_be_native: bool) -> EgressWatch {
        EgressWatch {
            may_be_native,
            ..Default::default()
        }
    }

    /// Notes how the program is attached to port `p`.
    pub(crate) fn attached(&mut self, p: u16, native: bool) {
        self.native.insert(p, native);
    }

    /// Whether some port receives (or may receive) in native mode.
    /// Whether the program runs on port `p` in native mode.
    pub(crate) fn is_native(&self, p: u16) -> bool {
        self.native.get(&p).copied().unwrap_or(false)
    }

    fn native(&self) -> bool {
        if self.native.is_empty() {
            self.may_be_native
        } else {
            self.native.values().any(|&n| n)
        }
    }

    /// The ports whose interfaces the program hands to the pipeline.
    pub(crate) fn punted(&self) -> BTreeSet<u16> {
        self.refusing.keys().copied().collect()
    }

    /// Why port `p` is served by the pipeline, for `show interfaces`.
    pub(crate) fn reason(&self, p: u16) -> Option<String> {
        let r = self.refusing.get(&p)?;
        Some(if r.features_off {
            "the port takes no frames redirected from XDP (its xdp-features lack ndo-xmit; for a veth: its peer has neither GRO nor an XDP program): the pipeline transmits its traffic".into()
        } else {
            format!(
                "the kernel refused {} frames the XDP program redirected into the port (no XDP transmit queue: for a veth, its peer has neither GRO nor an XDP program): the pipeline transmits its traffic until the link changes",
                r.refused
            )
        })
    }

    /// Notes that port `p`'s kernel link changed (or is a new device): its
    /// features are asked again at the next check, and a mark that only
    /// refusals made is dropped.
    pub(crate) fn link_changed(&mut self, p: u16) {
        self.changed.insert(p);
    }

    /// One check, when due: `refused` is the refused-frame count per port
    /// (from the tracepoints; `None` when not counted or not due), `ports`
    /// each port's name and ifindex (None: gone), `features` asks a device
    /// whether it takes redirected frames (`None`: not known). Returns
    /// whether the set of punted ports changed.
    pub(crate) fn check(
        &mut self,
        now: Instant,
        refused: impl FnOnce() -> Option<Vec<u64>>,
        ports: &[(String, Option<u32>)],
        mut features: impl FnMut(u32) -> Option<bool>,
    ) -> bool {
        let before = self.punted();
        for p in std::mem::take(&mut self.changed) {
            if self
                .refusing
                .get(&p)
                .is_some_and(|r| r.refused > 0 && !r.features_off)
            {
                self.refusing.remove(&p);
                info!(port = %name_of(ports, p), "link changed: the XDP program transmits on the port again (its refusals are checked anew)");
            }
            // Asked below, now.
            self.last_features = None;
        }
        let due =
            |last: Option<Instant>, every| last.is_none_or(|t| now.duration_since(t) >= every);
        if due(self.last_faults, FAULTS_EVERY) {
            self.last_faults = Some(now);
            if let Some(counts) = refused() {
                self.seen_refused.resize(counts.len(), 0);
                for (p, (&n, seen)) in counts.iter().zip(self.seen_refused.iter_mut()).enumerate() {
                    let new = n.saturating_sub(*seen);
                    *seen = n;
                    let Ok(p) = u16::try_from(p) else { break };
                    if new == 0 || p as usize >= ports.len() {
                        continue;
                    }
                    let r = self.refusing.entry(p).or_insert(Refusal {
                        features_off: false,
                        features_seen_off: false,
                        refused: 0,
                    });
                    if r.refused == 0 && !r.features_off {
                        error!(port = %name_of(ports, p), refused = new, "the kernel refused frames the XDP program redirected into the port (lost, counted as its drops); its traffic goes through the pipeline from now on. Remedy: for a veth, GRO or an XDP program on its peer");
                    }
                    r.refused += new;
                }
            }
        }
        if due(self.last_features, FEATURES_EVERY) {
            self.last_features = Some(now);
            let native = self.native();
            for (p, (name, ifindex)) in ports.iter().enumerate() {
                let (Ok(p), Some(ifindex)) = (u16::try_from(p), *ifindex) else {
                    continue;
                };
                // Every port in generic mode: any device takes them.
                let takes = if native {
                    features(ifindex)
                } else {
                    Some(true)
                };
                match takes {
                    Some(false) => {
                        let r = self.refusing.entry(p).or_insert_with(|| {
                            error!(port = %name, "the port takes no frames redirected from XDP (xdp-features without ndo-xmit): its traffic goes through the pipeline. Remedy: for a veth, GRO or an XDP program on its peer");
                            Refusal {
                                features_off: true,
                                features_seen_off: true,
                                refused: 0,
                            }
                        });
                        r.features_off = true;
                        r.features_seen_off = true;
                    }
                    Some(true) => {
                        if let Some(r) = self.refusing.get_mut(&p) {
                            r.features_off = false;
                            if r.features_seen_off {
                                self.refusing.remove(&p);
                                info!(port = %name, "the port takes frames redirected from XDP again (xdp-features with ndo-xmit): the XDP program transmits on it");
                            }
                        }
                    }
                    None => {}
                }
            }
        }
        self.punted() != before
    }
}

fn name_of(ports: &[(String, Option<u32>)], p: u16) -> &str {
    ports.get(usize::from(p)).map_or("?", |(n, _)| n.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports() -> Vec<(String, Option<u32>)> {
        vec![("d0".into(), Some(2)), ("d1".into(), Some(3))]
    }

    #[test]
    fn features_without_ndo_xmit_punt_the_port_until_they_have_it() {
        let mut w = EgressWatch::new(true);
        let t0 = Instant::now();
        let mut takes = [true, false];
        let ask = |t: [bool; 2]| move |ifindex: u32| Some(t[ifindex as usize - 2]);
        assert!(w.check(t0, || Some(vec![0, 0]), &ports(), ask(takes)));
        assert_eq!(w.punted(), BTreeSet::from([1]));
        assert!(w.reason(1).unwrap().contains("xdp-features"));
        assert_eq!(w.reason(0), None);
        // Not asked again before FEATURES_EVERY.
        takes[1] = true;
        let t1 = t0 + FAULTS_EVERY;
        assert!(!w.check(t1, || Some(vec![0, 0]), &ports(), ask(takes)));
        assert_eq!(w.punted(), BTreeSet::from([1]));
        let t2 = t0 + FEATURES_EVERY;
        assert!(w.check(t2, || Some(vec![0, 0]), &ports(), ask(takes)));
        assert!(w.punted().is_empty());
        // Unknown features (an old kernel) change nothing.
        let t3 = t2 + FEATURES_EVERY;
        assert!(!w.check(t3, || None, &ports(), |_| None));
    }

    #[test]
    fn refusals_punt_the_port_until_its_link_changes() {
        let mut w = EgressWatch::new(true);
        let t0 = Instant::now();
        assert!(!w.check(t0, || Some(vec![0, 0]), &ports(), |_| None));
        // Refusals counted on d1: punted at the next check.
        let t1 = t0 + FAULTS_EVERY;
        assert!(w.check(t1, || Some(vec![0, 7]), &ports(), |_| None));
        assert_eq!(w.punted(), BTreeSet::from([1]));
        assert!(w.reason(1).unwrap().contains("refused 7 frames"));
        // More refusals while the mark takes effect: added, nothing changes.
        let t2 = t1 + FAULTS_EVERY;
        assert!(!w.check(t2, || Some(vec![0, 9]), &ports(), |_| None));
        assert!(w.reason(1).unwrap().contains("refused 9 frames"));
        // Features that always said "takes them" (a driver without XDP
        // queues) do not undo a refusal: it would only be lost again.
        let t3 = t2 + FEATURES_EVERY;
        assert!(!w.check(t3, || Some(vec![0, 9]), &ports(), |_| Some(true)));
        assert_eq!(w.punted(), BTreeSet::from([1]));
        // A link change tries the program again.
        w.link_changed(1);
        let t4 = t3 + FAULTS_EVERY;
        assert!(w.check(t4, || Some(vec![0, 9]), &ports(), |_| None));
        assert!(w.punted().is_empty());
        // Counts that do not grow mark nothing.
        let t5 = t4 + FAULTS_EVERY;
        assert!(!w.check(t5, || Some(vec![0, 9]), &ports(), |_| None));
    }

    #[test]
    fn generic_mode_needs_no_ndo_xmit() {
        let t0 = Instant::now();
        let refuses = |_: u32| Some(false);
        let mut w = EgressWatch::new(false);
        assert!(!w.check(t0, || Some(vec![0, 0]), &ports(), refuses));
        // Attached natively after all: the features count.
        let mut w = EgressWatch::new(false);
        w.attached(0, false);
        w.attached(1, true);
        assert!(w.check(t0, || Some(vec![0, 0]), &ports(), refuses));
        assert_eq!(w.punted(), BTreeSet::from([0, 1]));
        // Every port generic: they return.
        w.attached(1, false);
        assert!(w.check(t0 + FEATURES_EVERY, || None, &ports(), refuses));
        assert!(w.punted().is_empty());
        // Refusals count in any mode.
        assert!(w.check(
            t0 + FEATURES_EVERY + FAULTS_EVERY,
            || Some(vec![2, 0]),
            &ports(),
            refuses
        ));
        assert_eq!(w.punted(), BTreeSet::from([0]));
    }

    #[test]
    fn refusals_then_features_off_then_on_return_the_port() {
        let mut w = EgressWatch::new(true);
        let t0 = Instant::now();
        assert!(w.check(t0, || Some(vec![0, 3]), &ports(), |_| Some(true)));
        let t1 = t0 + FEATURES_EVERY;
        assert!(!w.check(t1, || Some(vec![0, 3]), &ports(), |i| Some(i != 3)));
        assert!(w.reason(1).unwrap().contains("xdp-features"));
        let t2 = t1 + FEATURES_EVERY;
        assert!(w.check(t2, || Some(vec![0, 3]), &ports(), |_| Some(true)));
        assert!(w.punted().is_empty());
        // A port index beyond the ports is ignored.
        let t3 = t2 + FEATURES_EVERY;
        assert!(!w.check(t3, || Some(vec![0, 3, 5]), &ports(), |_| None));
    }
}
