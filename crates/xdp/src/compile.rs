//! Compiles one snapshot of the router's tables (the same [`Tables`](pipeline::Tables) the
//! user-space pipeline reads, and its poptries) into the content of one
//! half of the XDP engine's maps: an [`Image`].
//!
//! [`Image::lookup4`] / [`Image::lookup6`] walk the encoded maps exactly as
//! the BPF program does, so the encoding is tested against the tries
//! without a kernel.

use crate::layout::{self, FibCapacity};
use fib::poptrie::{Poptrie, TrieLayout, leaf_value};
use pipeline::{Datapath, FastPath, Vlan};
use std::collections::BTreeMap;

/// Why tables cannot be compiled into the maps.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// More of something than the maps hold.
    #[error("{what}: {have} do not fit the XDP engine's maps (room for {room})")]
    TooLarge {
        /// Which table.
        what: &'static str,
        /// How many there are.
        have: usize,
        /// How many fit.
        room: usize,
    },
}

/// The content of one half of the maps.
#[derive(Debug, Clone)]
pub struct Image {
    /// Per port id (`MAX_PORTS`); the port's ifindex is not part of it
    /// (the engine keeps it in `tx_ports` and `ifindex_port`).
    pub ports: Vec<(Option<u16>, bool)>,
    /// Per interface id.
    pub ifaces: Vec<layout::IfaceValue>,
    /// Per next-hop id.
    pub adjacencies: Vec<layout::AdjValue>,
    /// Per hop index.
    pub hops: Vec<layout::HopValue>,
    /// (port, outer, inner) -> interface id.
    pub vlans: BTreeMap<(u16, u16, u16), u32>,
    /// (interface, address) -> MAC.
    pub neighbours: BTreeMap<(u16, u128), layout::MacValue>,
    /// IPv4 address -> `LOCAL_UNICAST` / `LOCAL_BROADCAST`.
    pub local4: BTreeMap<u32, u32>,
    /// IPv6 addresses.
    pub local6: BTreeMap<u128, u32>,
    /// The IPv4 poptrie: top pairs, nodes, leaf pairs.
    pub fib4: FibImage,
    /// The IPv6 poptrie.
    pub fib6: FibImage,
    /// Why the program does not route or filter transit packets itself,
    /// when it does not (policy rules beyond the main table; firewall rules
    /// or tables it cannot hold): then every transit packet goes to the
    /// user-space pipeline.
    pub except_reason: Option<&'static str>,
    /// The firewall's forward chain, when the program evaluates it.
    pub firewall: Option<FwImage>,
    /// The policy rules' filters (`rule_filters`, `rule_prefixes`).
    pub rules: RuleImage,
    /// The rules use connection tracking: its fast path is on, for the
    /// connection tables of this epoch.
    pub conntrack_epoch: Option<u32>,
}

/// The policy rules' filters as map content (`struct ff_rule_filter`):
/// which packets a rule before main's may select, per family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleImage {
    /// `rule_filters` of one half: IPv4 source, IPv4 destination, IPv6
    /// source, IPv6 destination.
    pub filters: Vec<layout::RuleFilterValue>,
    /// `rule_prefixes` of one half: (kind, length, address with IPv4 in
    /// the top 32 bits) -> 1.
    pub prefixes: BTreeMap<(u8, u8, u128), u8>,
    /// The interfaces a rule before main's selects, per family (IPv4,
    /// IPv6).
    pub ifaces: [Vec<u16>; 2],
}

impl RuleImage {
    /// The filters of both families' [`FastPath`]s; the reason the program
    /// cannot route by them when it cannot.
    pub fn compile(v4: &FastPath<u32>, v6: &FastPath<u128>) -> Result<RuleImage, &'static str> {
        let top4 = |f: &FastPath<u32>| match f {
            FastPath::MainOnly => FastPath::MainOnly,
            FastPath::Rules => FastPath::Rules,
            FastPath::Filtered { src, dst, ifaces } => {
                let up =
                    |v: &[(u32, u8)]| v.iter().map(|&(a, l)| (u128::from(a) << 96, l)).collect();
                FastPath::Filtered {
                    src: up(src),
                    dst: up(dst),
                    ifaces: ifaces.clone(),
                }
            }
        };
        let mut img = RuleImage {
            filters: Vec::with_capacity(4),
            prefixes: BTreeMap::new(),
            ifaces: [Vec::new(), Vec::new()],
        };
        for (v6, fast) in [(false, top4(v4)), (true, v6.clone())] {
            let (src, dst, ifaces) = match fast {
                FastPath::MainOnly => {
                    for _ in 0..2 {
                        img.filters.push(layout::rule_filter(false, &[], &[]));
                    }
                    continue;
                }
                FastPath::Rules => {
                    return Err(
                        "policy rules the program cannot filter (a rule with `not`, or the first rule matching every packet is not a plain lookup of main)",
                    );
                }
                FastPath::Filtered { src, dst, ifaces } => (src, dst, ifaces),
            };
            for (dir, prefixes) in [src, dst].into_iter().enumerate() {
                let kind = u8::from(v6) * 2 + dir as u8;
                let mut lens: Vec<u8> = prefixes.iter().map(|&(_, l)| l).collect();
                lens.sort_unstable();
                lens.dedup();
                if lens.len() > layout::RULE_LENS {
                    return Err("policy rules with prefixes of more than 16 lengths in one field");
                }
                let mut sig = vec![0u64; layout::RULE_SIG_WORDS];
                for &(a, l) in &prefixes {
                    for s in signatures(v6, a, l) {
                        sig[usize::from(s >> 6)] |= 1 << (s & 63);
                    }
                    img.prefixes.insert((kind, l, a), 1);
                }
                img.filters.push(layout::rule_filter(true, &lens, &sig));
            }
            img.ifaces[usize::from(v6)] = ifaces;
        }
        if img.prefixes.len() > layout::MAX_RULE_PREFIXES as usize {
            return Err("policy rules with more prefixes than the program's filters hold");
        }
        Ok(img)
    }

    /// The kernel's default rules: main decides every packet.
    pub fn main_only() -> RuleImage {
        RuleImage {
            filters: vec![layout::rule_filter(false, &[], &[]); 4],
            prefixes: BTreeMap::new(),
            ifaces: [Vec::new(), Vec::new()],
        }
    }

    /// Whether the program hands a packet to the pipeline for the rules:
    /// as `ff_rules_select` decides (a test's model of it).
    pub fn selects(&self, v6: bool, in_if: u16, src: u128, dst: u128) -> bool {
        let f = &self.filters[usize::from(v6) * 2];
        if f[0..4] == [0; 4] {
            return false;
        }
        if self.ifaces[usize::from(v6)].contains(&in_if) {
            return true;
        }
        [(0u8, src), (1, dst)].into_iter().any(|(dir, a)| {
            let kind = u8::from(v6) * 2 + dir;
            self.prefixes
                .keys()
                .any(|&(k, l, p)| k == kind && mask(a, l) == p)
        })
    }
}

/// `a` (IPv4 in the top 32 bits) with all but its first `len` bits
/// cleared.
fn mask(a: u128, len: u8) -> u128 {
    match len {
        0 => 0,
        l if l >= 128 => a,
        l => a & !(u128::MAX >> l),
    }
}

/// The signatures ([`layout::rule_signature`]) of every address in the
/// prefix `a`/`len` (IPv4 in the top 32 bits).
fn signatures(v6: bool, a: u128, len: u8) -> Vec<u16> {
    // The signature's bits are the address's first 16, or (IPv6) those
    // XOR the next 16: a prefix fixes the first `len` of them.
    let fixed = if v6 { 32 } else { 16 };
    if len >= fixed {
        return vec![layout::rule_signature(v6, a)];
    }
    if v6 && len < 16 {
        return (0..=u16::MAX).collect();
    }
    // The free low bits of the (second, for IPv6) 16-bit group.
    let free = u32::from(fixed - len);
    let base = mask(a, len);
    (0..1u128 << free)
        .map(|i| layout::rule_signature(v6, base | (i << (128 - u32::from(fixed)))))
        .collect()
}

/// The firewall's forward chain as map content.
#[derive(Debug, Clone)]
pub struct FwImage {
    /// `fw_meta` for IPv4 and IPv6.
    pub meta: [layout::FwMeta; 2],
    /// `fw_data`, 32-bit entries two per element.
    pub data: Vec<u64>,
    /// `fw_actions` per counter slot.
    pub actions: Vec<u32>,
    /// The rule set (its counters restart when it changes).
    pub rules: std::sync::Arc<firewall::Firewall>,
}

impl FwImage {
    /// Compiles the forward chain of `fw`, or says why the program cannot
    /// evaluate it (then the pipeline does, for every transit packet).
    pub fn compile(
        fw: &std::sync::Arc<firewall::Firewall>,
        room: u32,
    ) -> Result<FwImage, &'static str> {
        use firewall::classifier::FieldExport;
        let slots = fw.counter_slots();
        if slots > layout::FW_MAX_SLOTS as usize {
            return Err("more rules than the program counts");
        }
        let mut data: Vec<u32> = Vec::new();
        let push = |d: &mut Vec<u32>, v: &[u32]| {
            let at = d.len() as u32;
            d.extend_from_slice(v);
            at
        };
        let mut meta = [[0u8; layout::FW_META_SIZE]; 2];
        for (fam, m) in meta.iter_mut().enumerate() {
            let c = fw
                .forward_classifier(fam == 1)
                .ok_or("the classifier uses its bit-vector stage")?;
            let w = |m: &mut layout::FwMeta, at: usize, v: u32| {
                m[at..at + 4].copy_from_slice(&v.to_ne_bytes())
            };
            if c.rest.len() > layout::FW_MAX_STEPS || c.addr.len() > layout::FW_MAX_STEPS {
                return Err("more cross-product steps than the program walks");
            }
            for (f, fe) in c.fields.iter().enumerate() {
                let at = 48 + f * layout::FW_FIELD_SIZE;
                let (kind, off, len, rs) = match fe {
                    FieldExport::Const => (layout::FW_CONST, 0, 0, 0),
                    FieldExport::Direct(t) => {
                        let v: Vec<u32> = t.iter().map(|&x| u32::from(x)).collect();
                        (layout::FW_DIRECT, push(&mut data, &v), t.len() as u32, 0)
                    }
                    FieldExport::Trie {
                        root_stride, nodes, ..
                    } => (
                        layout::FW_TRIE,
                        push(&mut data, nodes),
                        nodes.len() as u32,
                        *root_stride,
                    ),
                };
                w(m, at, kind);
                w(m, at + 4, off);
                w(m, at + 8, len);
                w(m, at + 12, rs);
                w(m, at + 16, push(&mut data, c.remap[f]));
                w(m, at + 20, c.remap[f].len() as u32);
            }
            for (chain, base) in [(&c.rest, 48 + 9 * 24), (&c.addr, 48 + 9 * 24 + 7 * 16)] {
                for (i, st) in chain.iter().enumerate() {
                    let at = base + i * layout::FW_STEP_SIZE;
                    w(m, at, st.field as u32);
                    w(m, at + 4, st.n);
                    w(m, at + 8, push(&mut data, st.table));
                    w(m, at + 12, st.table.len() as u32);
                }
            }
            let mut outcomes = Vec::with_capacity(c.outcomes.len() * layout::FW_OUTCOME_WORDS);
            for o in c.outcomes {
                if o.counted.len() > layout::FW_MAX_COUNTED {
                    return Err("a packet matches more counting rules than the program counts");
                }
                let mut words = [0u32; layout::FW_OUTCOME_WORDS];
                words[0] = o.rule;
                words[1] = o.counted.len() as u32;
                words[2..2 + o.counted.len()].copy_from_slice(&o.counted);
                outcomes.extend_from_slice(&words);
            }
            w(m, 0, 1);
            w(m, 4, c.rest.len() as u32);
            w(m, 8, c.addr.len() as u32);
            w(m, 12, c.n_rest);
            w(m, 16, push(&mut data, &c.last));
            w(m, 20, c.last.len() as u32);
            w(m, 24, push(&mut data, &outcomes));
            w(m, 28, c.outcomes.len() as u32);
            w(m, 32, c.empty_outcome);
            w(
                m,
                36,
                u32::from(fw.forward_policy() == firewall::Policy::Drop),
            );
            w(m, 40, fw.policy_slot(firewall::Chain::Forward));
            w(m, 44, firewall::CtState::Untracked as u32);
        }
        if data.len() > room as usize {
            return Err("the classifier's tables are larger than the program's map");
        }
        let actions = (0..slots as u32)
            .map(|slot| match fw.rule_action(slot) {
                Some(firewall::RuleAction::Accept) => layout::FW_ACCEPT,
                Some(firewall::RuleAction::Drop) => layout::FW_DROP,
                Some(firewall::RuleAction::Reject(_)) => layout::FW_REJECT,
                Some(firewall::RuleAction::Count) => layout::FW_COUNT,
                None => layout::FW_ACCEPT,
            })
            .collect();
        Ok(FwImage {
            meta,
            data: data
                .chunks(2)
                .map(|c| layout::pair(c[0], c.get(1).copied().unwrap_or(0)))
                .collect(),
            actions,
            rules: std::sync::Arc::clone(fw),
        })
    }
}

/// One poptrie as map elements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FibImage {
    /// Top-level entries, two per element.
    pub top: Vec<u64>,
    /// Nodes.
    pub nodes: Vec<layout::NodeValue>,
    /// Leaves, two per element.
    pub leaves: Vec<u64>,
}

impl FibImage {
    fn from_layout(
        t: TrieLayout<'_>,
        nodes_room: u32,
        leaves_room: u32,
    ) -> Result<Self, CompileError> {
        if t.nodes.len() > nodes_room as usize {
            return Err(CompileError::TooLarge {
                what: "trie nodes",
                have: t.nodes.len(),
                room: nodes_room as usize,
            });
        }
        if t.leaves.len() > leaves_room as usize {
            return Err(CompileError::TooLarge {
                what: "trie leaves",
                have: t.leaves.len(),
                room: leaves_room as usize,
            });
        }
        // Whole pairs first (a loop without a branch per element: the top
        // level alone is hundreds of thousands of them), then an odd last
        // element paired with "no route".
        fn pairs<T: Copy>(v: &[T], widen: impl Fn(T) -> u32) -> Vec<u64> {
            let whole = v.chunks_exact(2);
            let odd = whole.remainder().first().copied();
            whole
                .map(|c| layout::pair(widen(c[0]), widen(c[1])))
                .chain(odd.map(|lo| layout::pair(widen(lo), layout::NO_ROUTE)))
                .collect()
        }
        Ok(FibImage {
            top: pairs(t.top, |e| e),
            nodes: t
                .nodes
                .iter()
                .map(|n| layout::node(n.children(), n.leafvec(), n.child_base(), n.leaf_base()))
                .collect(),
            // The program's leaves are 32 bits wide, "no route" as in `top`.
            leaves: pairs(t.leaves, leaf_value),
        })
    }

    /// The next-hop id the program finds for IPv4 destination `a` in
    /// these elements (an IPv4 trie).
    pub fn lookup4(&self, a: u32) -> Option<u32> {
        self.walk(
            a >> (32 - layout::DIRECT4),
            layout::LEVELS4,
            layout::DIRECT4,
            |off| ((u64::from(a) << (32 + off)) >> 58) as u32,
        )
    }

    /// The next-hop id the program finds for IPv6 destination `a` (an
    /// IPv6 trie).
    pub fn lookup6(&self, a: u128) -> Option<u32> {
        let (hi, lo) = ((a >> 64) as u64, a as u64);
        self.walk(
            (hi >> (64 - layout::DIRECT6)) as u32,
            layout::LEVELS6,
            layout::DIRECT6,
            |off| {
                if off < 64 {
                    // `off` starts at DIRECT6 (> 0); the stride at 60
                    // straddles the halves.
                    (((hi << off) | (lo >> (64 - off))) >> 58) as u32
                } else {
                    ((lo << (off - 64)) >> 58) as u32
                }
            },
        )
    }

    /// The BPF program's walk (`ff_fib4` / `ff_fib6`) over these
    /// elements: `stride(off)` gives the 6 bits at `off`.
    fn walk(
        &self,
        top_index: u32,
        levels: u32,
        direct: u32,
        stride: impl Fn(u32) -> u32,
    ) -> Option<u32> {
        let e = layout::pair_get(&self.top, top_index)?;
        if e & layout::NODE_FLAG == 0 {
            return (e != layout::NO_ROUTE).then_some(e);
        }
        if e & layout::LEAF_CHUNK_FLAG != 0 {
            // A leaf chunk: its leafvec in the low 16 bits of four leaves.
            let b = e & !(layout::NODE_FLAG | layout::LEAF_CHUNK_FLAG);
            let mut leafvec = 0u64;
            for i in 0..layout::LEAF_CHUNK_HEADER {
                let w = layout::pair_get(&self.leaves, b + i)?;
                leafvec |= u64::from(w & 0xffff) << (16 * i);
            }
            if leafvec == 0 {
                return None;
            }
            let s = stride(direct);
            let l = b + layout::LEAF_CHUNK_HEADER + (leafvec << (63 - s)).count_ones() - 1;
            let nh = layout::pair_get(&self.leaves, l)?;
            return (nh != layout::NO_ROUTE).then_some(nh);
        }
        let mut idx = e & !layout::NODE_FLAG;
        let mut off = direct;
        for _ in 0..levels {
            let (children, leafvec, child_base, leaf_base) =
                layout::node_fields(self.nodes.get(idx as usize)?);
            let s = stride(off);
            if (children >> s) & 1 == 1 {
                idx = child_base + (children << (63 - s)).count_ones() - 1;
                off += layout::STRIDE;
                continue;
            }
            let l = leaf_base + (leafvec << (63 - s)).count_ones() - 1;
            let nh = layout::pair_get(&self.leaves, l)?;
            return (nh != layout::NO_ROUTE).then_some(nh);
        }
        None
    }
}

impl Image {
    /// Compiles a snapshot: its per-packet tables, its two tries, and
    /// whether its ACL accepts everything.
    /// `firewall`: the snapshot's ACL (`None`: accept everything).
    pub fn compile(
        dp: &Datapath,
        fib4: &Poptrie<u32>,
        fib6: &Poptrie<u128>,
        firewall: Option<&firewall::PipelineFirewall>,
        cap: &FibCapacity,
    ) -> Result<Image, CompileError> {
        let fit = |what: &'static str, have: usize, room: u32| {
            if have > room as usize {
                Err(CompileError::TooLarge {
                    what,
                    have,
                    room: room as usize,
                })
            } else {
                Ok(())
            }
        };
        fit("ports", dp.ports.len(), layout::MAX_PORTS)?;
        fit("interfaces", dp.interfaces.len(), layout::MAX_IFACES)?;
        fit("next-hop sets", dp.adjacencies.len(), layout::MAX_ADJ)?;
        fit("next hops", dp.hops.len(), layout::MAX_HOPS)?;
        fit("neighbours", dp.neighbours.len(), layout::MAX_NEIGHBOURS)?;
        fit("local IPv4 addresses", dp.local4.len(), layout::MAX_LOCAL)?;
        fit("local IPv6 addresses", dp.local6.len(), layout::MAX_LOCAL)?;
        let mut vlans = BTreeMap::new();
        let ports = dp
            .ports
            .iter()
            .enumerate()
            .map(|(p, e)| {
                for &(v, id) in &e.tagged {
                    let (outer, inner) = match v {
                        Vlan::Untagged => continue,
                        Vlan::Single(o) => (o, 0),
                        Vlan::Double { outer, inner } => (outer, inner),
                    };
                    vlans.insert((p as u16, outer & 0x0fff, inner & 0x0fff), u32::from(id));
                }
                (e.untagged, !e.tagged.is_empty())
            })
            .collect();
        fit("VLAN interfaces", vlans.len(), layout::MAX_VLANS)?;
        let rules = RuleImage::compile(&dp.fast_path4, &dp.fast_path6);
        let selected = |id: usize, v6: usize| {
            rules
                .as_ref()
                .is_ok_and(|r| r.ifaces[v6].contains(&(id as u16)))
        };
        let ifaces = dp
            .interfaces
            .iter()
            .enumerate()
            .map(|(id, i)| {
                let mut v =
                    layout::iface(i.mac.0, i.mtu, i.port, &i.l2_template, i.l2_template_len);
                let mut flags = 0;
                if selected(id, 0) {
                    flags |= layout::IFACE_RULES4;
                }
                if selected(id, 1) {
                    flags |= layout::IFACE_RULES6;
                }
                layout::set_iface_flags(&mut v, flags);
                v
            })
            .collect();
        let adjacencies = dp
            .adjacencies
            .iter()
            .map(|&(s, c)| layout::adj(s, c))
            .collect();
        let hops = dp
            .hops
            .iter()
            .map(|h| {
                let mut flags = 0;
                if h.gateway {
                    flags |= layout::HOP_GATEWAY;
                }
                if h.mac.is_some() {
                    flags |= layout::HOP_MAC;
                }
                layout::hop(h.interface, flags, h.mac.map_or([0; 6], |m| m.0))
            })
            .collect();
        let neighbours = dp
            .neighbours
            .iter()
            .map(|&(i, a, m)| ((i, a), layout::mac(m.0)))
            .collect();
        let local4 = dp
            .local4
            .iter()
            .map(|&(a, bcast)| {
                (
                    a,
                    if bcast {
                        layout::LOCAL_BROADCAST
                    } else {
                        layout::LOCAL_UNICAST
                    },
                )
            })
            .collect();
        let local6 = dp
            .local6
            .iter()
            .map(|&a| (a, layout::LOCAL_UNICAST))
            .collect();
        let fw_image = firewall.map(|f| FwImage::compile(f.firewall(), cap.firewall));
        let conntrack_epoch = firewall
            .filter(|f| f.firewall().stateful())
            .map(firewall::PipelineFirewall::epoch);
        Ok(Image {
            ports,
            ifaces,
            adjacencies,
            hops,
            vlans,
            neighbours,
            local4,
            local6,
            fib4: FibImage::from_layout(fib4.layout(), cap.nodes4, cap.leaves4)?,
            fib6: FibImage::from_layout(fib6.layout(), cap.nodes6, cap.leaves6)?,
            // Packets the rules may send to another table go to the
            // pipeline (`ff_rules_select`); where the rules cannot be
            // filtered so, every transit packet does.
            except_reason: match &rules {
                Err(why) => Some(*why),
                Ok(_) => fw_image.as_ref().and_then(|r| r.as_ref().err().copied()),
            },
            firewall: fw_image.and_then(Result::ok),
            rules: rules.unwrap_or_else(|_| RuleImage::main_only()),
            conntrack_epoch,
        })
    }

    /// Marks every interface on one of `ports` as one whose port takes
    /// no XDP frames: the program hands what it would forward there to the
    /// pipeline, which transmits it through its own socket on the port.
    pub fn punt_tx(&mut self, ports: &std::collections::BTreeSet<u16>) {
        for v in &mut self.ifaces {
            let flags = layout::iface_flags(v) & !layout::IFACE_PUNT_TX;
            let punt = ports.contains(&layout::iface_port(v));
            layout::set_iface_flags(v, flags | if punt { layout::IFACE_PUNT_TX } else { 0 });
        }
    }

    /// Every transit packet goes to the user-space pipeline.
    pub fn except_all(&self) -> bool {
        self.except_reason.is_some()
    }

    /// The next-hop id the program finds for IPv4 destination `a`.
    pub fn lookup4(&self, a: u32) -> Option<u32> {
        self.fib4.lookup4(a)
    }

    /// The next-hop id the program finds for IPv6 destination `a`.
    pub fn lookup6(&self, a: u128) -> Option<u32> {
        self.fib6.lookup6(a)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use fib::{Lookup, RouteTable};
    use proptest::prelude::*;
    use wire::{Ipv4Cidr, Ipv6Cidr};

    /// Whether the signature bit of `a` is set in rule filter `f`.
    fn sig_set(f: &layout::RuleFilterValue, v6: bool, a: u128) -> bool {
        let s = usize::from(layout::rule_signature(v6, a));
        let at = 8 + layout::RULE_LENS + 8 * (s / 64);
        let w = u64::from_ne_bytes(f[at..at + 8].try_into().unwrap());
        (w >> (s % 64)) & 1 == 1
    }

    proptest! {
        /// Every address a rule's prefix holds has its signature bit set
        /// (the program's first test never passes a selected packet by),
        /// and the prefix, masked, is in the hash for its length.
        #[test]
        fn rule_filters_hold_every_address_of_their_prefixes(
            src4 in prop::collection::vec((any::<u32>(), 1u8..=32), 0..6),
            dst6 in prop::collection::vec((any::<u128>(), 1u8..=128), 0..6),
            probes in prop::collection::vec(any::<u128>(), 16),
        ) {
            let src4: Vec<(u32, u8)> = src4.into_iter().map(|(a, l)| (a & Ipv4Cidr::mask(l), l)).collect();
            let dst6: Vec<(u128, u8)> = dst6.into_iter().map(|(a, l)| (a & Ipv6Cidr::mask(l), l)).collect();
            let img = RuleImage::compile(
                &FastPath::Filtered { src: src4.clone(), dst: vec![], ifaces: vec![3] },
                &FastPath::Filtered { src: vec![], dst: dst6.clone(), ifaces: vec![] },
            ).unwrap();
            for (i, &(p, l)) in src4.iter().enumerate() {
                // An address inside: the prefix with probe bits below it.
                let host = probes[i] as u32 & !Ipv4Cidr::mask(l);
                let a = u128::from(p | host) << 96;
                prop_assert!(sig_set(&img.filters[0], false, a), "{:#x}/{}", p, l);
                prop_assert!(img.selects(false, 0, a, 0));
            }
            for (i, &(p, l)) in dst6.iter().enumerate() {
                let a = p | (probes[8 + i] & !Ipv6Cidr::mask(l));
                prop_assert!(sig_set(&img.filters[3], true, a), "{:#x}/{}", p, l);
                prop_assert!(img.selects(true, 0, 0, a));
            }
            // The IPv4 interface flag, and an address in no prefix.
            prop_assert!(img.selects(false, 3, 0, 0));
            prop_assert_eq!(&img.ifaces, &[vec![3], vec![]]);
            for &a in &probes {
                let inside = src4.iter().any(|&(p, l)| (a >> 96) as u32 & Ipv4Cidr::mask(l) == p);
                let a4 = a & (u128::from(u32::MAX) << 96);
                prop_assert_eq!(img.selects(false, 0, a4, a4), inside);
            }
        }
    }

    #[test]
    fn rule_filters_have_limits() {
        let many: Vec<(u32, u8)> = (1..=17u8)
            .map(|l| (0x0a00_0000 & Ipv4Cidr::mask(l), l))
            .collect();
        let f = |src: Vec<(u32, u8)>| FastPath::Filtered {
            src,
            dst: vec![],
            ifaces: vec![],
        };
        assert!(RuleImage::compile(&f(many[..16].to_vec()), &FastPath::MainOnly).is_ok());
        assert!(RuleImage::compile(&f(many), &FastPath::MainOnly).is_err());
        assert!(RuleImage::compile(&FastPath::Rules, &FastPath::MainOnly).is_err());
        let lots: Vec<(u32, u8)> = (0..4097u32).map(|i| (i << 8, 24)).collect();
        assert!(RuleImage::compile(&f(lots), &FastPath::MainOnly).is_err());
        let img = RuleImage::compile(&FastPath::MainOnly, &FastPath::MainOnly).unwrap();
        assert_eq!(img, RuleImage::main_only());
        assert!(!img.selects(false, 0, 1 << 100, 1 << 100));
    }

    /// The image of a router with no interfaces and no routes.
    pub(crate) fn empty_image() -> Image {
        image(&Poptrie::new(), &Poptrie::new())
    }

    fn image(t4: &Poptrie<u32>, t6: &Poptrie<u128>) -> Image {
        let dp = pipeline::TablesBuilder::new()
            .build(
                fib::reference::ReferenceFib4::new(),
                fib::reference::ReferenceFib6::new(),
            )
            .datapath();
        Image::compile(&dp, t4, t6, None, &FibCapacity::SMALL).unwrap()
    }

    /// Lengths that exercise the direct level, every node level and /0.
    fn v4_routes() -> impl Strategy<Value = Vec<(u32, u8, u32)>> {
        prop::collection::vec(
            (
                any::<u32>(),
                prop::sample::select(vec![0u8, 1, 8, 16, 17, 18, 19, 23, 24, 25, 29, 30, 31, 32]),
                0u32..500,
            ),
            0..200,
        )
    }

    fn v6_routes() -> impl Strategy<Value = Vec<(u128, u8, u32)>> {
        prop::collection::vec(
            (
                any::<u128>(),
                prop::sample::select(vec![
                    0u8, 3, 16, 17, 22, 23, 32, 48, 57, 63, 64, 65, 96, 121, 124, 127, 128,
                ]),
                0u32..500,
            ),
            0..200,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// The program's walk over the encoded maps finds what the trie
        /// finds, at the routes' edges and at random addresses.
        #[test]
        fn encoded_tries_answer_like_the_tries(r4 in v4_routes(), r6 in v6_routes(), probes in prop::collection::vec(any::<u128>(), 64)) {
            let mut t4 = Poptrie::<u32>::new();
            for &(a, l, nh) in &r4 {
                t4.insert(Ipv4Cidr::new(a & Ipv4Cidr::mask(l), l).unwrap(), nh);
            }
            let mut t6 = Poptrie::<u128>::new();
            for &(a, l, nh) in &r6 {
                t6.insert(Ipv6Cidr::new(a & Ipv6Cidr::mask(l), l).unwrap(), nh);
            }
            let img = image(&t4, &t6);
            let mut a4: Vec<u32> = probes.iter().map(|&p| p as u32).collect();
            for &(a, l, _) in &r4 {
                let net = a & Ipv4Cidr::mask(l);
                a4.extend([net, net | !Ipv4Cidr::mask(l), net.wrapping_sub(1)]);
            }
            for a in a4 {
                prop_assert_eq!(img.lookup4(a), t4.lookup(a), "IPv4 {:#x}", a);
            }
            let mut a6: Vec<u128> = probes.clone();
            for &(a, l, _) in &r6 {
                let net = a & Ipv6Cidr::mask(l);
                a6.extend([net, net | !Ipv6Cidr::mask(l), net.wrapping_sub(1)]);
            }
            for a in a6 {
                prop_assert_eq!(img.lookup6(a), t6.lookup(a), "IPv6 {:#x}", a);
            }
        }
    }

    #[test]
    fn a_trie_larger_than_the_maps_is_refused() {
        let mut t4 = Poptrie::<u32>::new();
        // /25s: every chunk needs nodes (/24s alone make leaf chunks).
        for i in 0..3000u32 {
            t4.insert(Ipv4Cidr::new((10 << 24) | (i << 8), 25).unwrap(), i);
        }
        let dp = pipeline::TablesBuilder::new()
            .build(
                fib::reference::ReferenceFib4::new(),
                fib::reference::ReferenceFib6::new(),
            )
            .datapath();
        let tiny = FibCapacity {
            nodes4: 16,
            ..FibCapacity::SMALL
        };
        let e = Image::compile(&dp, &t4, &Poptrie::new(), None, &tiny).unwrap_err();
        assert!(
            matches!(
                e,
                CompileError::TooLarge {
                    what: "trie nodes",
                    ..
                }
            ),
            "{e}"
        );
    }
}
