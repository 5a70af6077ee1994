//! The XDP engine's part of `fastfwd fib audit`: the FIB the program
//! reads, taken back out of its maps, against what the router's tables
//! compile to now.
//!
//! The engine writes only the elements that changed since a half last
//! held an image (see [`crate::engine`]); a lost or misplaced write would
//! leave the maps different from a fresh compile of the same tables. The
//! audit finds that: [`Engine::map_reader`] opens the maps again (new
//! descriptors, so the audit thread reads while the engine goes on),
//! [`MapReader::read`] reads the half the program reads and checks that no
//! publish happened meanwhile, and [`compare`] lists, map by map, the
//! elements that differ from [`Image::compile`] of the same snapshot. The
//! caller also looks routes up in what was read ([`ReadBack::fib4`]'s
//! [`FibImage::lookup4`] walks exactly as the program does).
//!
//! [`Engine::map_reader`]: crate::Engine::map_reader

use crate::compile::{FibImage, Image};
use crate::engine::{EngineError, bpf_err};
use crate::layout::{self, AdjValue, HopValue, NodeValue};
use aya::maps::{Array, MapData};

/// One family's three FIB maps and the elements per half of each.
pub(crate) struct FamilyMaps {
    pub(crate) top: (Array<MapData, u64>, u32),
    pub(crate) nodes: (Array<MapData, NodeValue>, u32),
    pub(crate) leaves: (Array<MapData, u64>, u32),
}

/// The program's FIB maps opened for reading, with what the engine last
/// published into them.
pub struct MapReader {
    pub(crate) config: Array<MapData, layout::Config>,
    pub(crate) fib4: FamilyMaps,
    pub(crate) fib6: FamilyMaps,
    pub(crate) adjacencies: Array<MapData, AdjValue>,
    pub(crate) hops: Array<MapData, HopValue>,
    /// The generation and active half published last.
    pub(crate) generation: u64,
    pub(crate) half: u32,
    /// Elements of the published image: (top, nodes, leaves) per family,
    /// adjacencies, hops.
    pub(crate) sizes: ([(usize, usize, usize); 2], usize, usize),
}

/// The active half of the maps as read back.
#[derive(Debug, Clone)]
pub struct ReadBack {
    /// The generation the program was reading.
    pub generation: u64,
    /// The IPv4 trie.
    pub fib4: FibImage,
    /// The IPv6 trie.
    pub fib6: FibImage,
    /// Next-hop sets.
    pub adjacencies: Vec<AdjValue>,
    /// Next hops.
    pub hops: Vec<HopValue>,
}

impl std::fmt::Debug for MapReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapReader")
            .field("generation", &self.generation)
            .field("half", &self.half)
            .finish()
    }
}

fn read_array<V: aya::Pod>(
    a: &Array<MapData, V>,
    name: &str,
    base: u32,
    n: usize,
) -> Result<Vec<V>, EngineError> {
    (0..n as u32)
        .map(|i| {
            a.get(&(base + i), 0)
                .map_err(|e| bpf_err(format!("reading map {name}[{}]", base + i), &e))
        })
        .collect()
}

fn read_family(
    m: &FamilyMaps,
    fam: &str,
    half: u32,
    (top, nodes, leaves): (usize, usize, usize),
) -> Result<FibImage, EngineError> {
    Ok(FibImage {
        top: read_array(&m.top.0, &format!("{fam}_top"), half * m.top.1, top)?,
        nodes: read_array(&m.nodes.0, &format!("{fam}_nodes"), half * m.nodes.1, nodes)?,
        leaves: read_array(
            &m.leaves.0,
            &format!("{fam}_leaves"),
            half * m.leaves.1,
            leaves,
        )?,
    })
}

impl MapReader {
    /// The generation published last.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// (active half, generation) in the program's config now.
    fn config_now(&self) -> Result<(u32, u64), EngineError> {
        let c = self
            .config
            .get(&0, 0)
            .map_err(|e| bpf_err("reading map config", &e))?;
        let active = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
        let mut g = [0u8; 8];
        g.copy_from_slice(&c[32..40]);
        Ok((active, u64::from_ne_bytes(g)))
    }

    /// What the program reads now, or `None` when the engine published
    /// again since this reader was made or while it read (the elements
    /// would not be the generation the caller compares them with).
    pub fn read(&self) -> Result<Option<ReadBack>, EngineError> {
        let want = (self.half, self.generation);
        if self.config_now()? != want {
            return Ok(None);
        }
        let ([s4, s6], adj, hops) = self.sizes;
        let h = self.half;
        let back = ReadBack {
            generation: self.generation,
            fib4: read_family(&self.fib4, "fib4", h, s4)?,
            fib6: read_family(&self.fib6, "fib6", h, s6)?,
            adjacencies: read_array(&self.adjacencies, "adjacencies", h * layout::MAX_ADJ, adj)?,
            hops: read_array(&self.hops, "hops", h * layout::MAX_HOPS, hops)?,
        };
        if self.config_now()? != want {
            return Ok(None);
        }
        Ok(Some(back))
    }
}

/// One map whose elements differ from what the tables compile to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapDifference {
    /// The map (`fib4_nodes`, `hops`, ...).
    pub map: &'static str,
    /// Elements the compiled image has.
    pub want: usize,
    /// Elements that differ (or that one side lacks).
    pub differing: usize,
    /// The first of them (index within the half).
    pub first: usize,
}

fn compare_one<V: PartialEq>(
    map: &'static str,
    have: &[V],
    want: &[V],
    out: &mut Vec<MapDifference>,
) -> usize {
    let n = have.len().max(want.len());
    let mut differing = 0;
    let mut first = None;
    for i in 0..n {
        if have.get(i) != want.get(i) {
            differing += 1;
            first.get_or_insert(i);
        }
    }
    if let Some(first) = first {
        out.push(MapDifference {
            map,
            want: want.len(),
            differing,
            first,
        });
    }
    n
}

/// Every map of `back` whose elements differ from `want`'s, and how many
/// elements were compared.
pub fn compare(back: &ReadBack, want: &Image) -> (Vec<MapDifference>, usize) {
    let mut out = Vec::new();
    let mut n = 0;
    for (names, have, want) in [
        (
            ["fib4_top", "fib4_nodes", "fib4_leaves"],
            &back.fib4,
            &want.fib4,
        ),
        (
            ["fib6_top", "fib6_nodes", "fib6_leaves"],
            &back.fib6,
            &want.fib6,
        ),
    ] {
        n += compare_one(names[0], &have.top, &want.top, &mut out);
        n += compare_one(names[1], &have.nodes, &want.nodes, &mut out);
        n += compare_one(names[2], &have.leaves, &want.leaves, &mut out);
    }
    n += compare_one(
        "adjacencies",
        &back.adjacencies,
        &want.adjacencies,
        &mut out,
    );
    n += compare_one("hops", &back.hops, &want.hops, &mut out);
    (out, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fib(top: Vec<u64>, leaves: Vec<u64>) -> FibImage {
        FibImage {
            top,
            nodes: Vec::new(),
            leaves,
        }
    }

    #[test]
    fn compare_names_each_map_that_differs() {
        let back = ReadBack {
            generation: 1,
            fib4: fib(vec![1, 2, 3], vec![7]),
            fib6: fib(vec![4], vec![]),
            adjacencies: vec![layout::adj(0, 1)],
            hops: vec![layout::hop(0, 0, [0; 6])],
        };
        let mut img = crate::compile::tests::empty_image();
        img.fib4 = fib(vec![1, 9, 3, 9], vec![7]);
        img.fib6 = fib(vec![4], vec![]);
        img.adjacencies = back.adjacencies.clone();
        img.hops = vec![layout::hop(1, 0, [0; 6])];
        let (d, n) = compare(&back, &img);
        assert_eq!(n, 4 + 1 + 1 + 1 + 1);
        assert_eq!(
            d,
            vec![
                MapDifference {
                    map: "fib4_top",
                    want: 4,
                    differing: 2,
                    first: 1
                },
                MapDifference {
                    map: "hops",
                    want: 1,
                    differing: 1,
                    first: 0
                },
            ]
        );
        img.fib4 = back.fib4.clone();
        img.hops = back.hops.clone();
        assert!(compare(&back, &img).0.is_empty());
    }
}
