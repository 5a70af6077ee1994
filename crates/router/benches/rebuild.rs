//! How long a full rebuild takes (what a config reload, a resync or a
//! link change costs): the router's whole build from its kernel mirror,
//! with the full table in main alone, and with the same table in main and
//! in three more tables that source rules look up (`ip rule add from
//! 10.20N.0.0/16 lookup N`), as a router with per-customer tables has. Each
//! build is timed `ROUNDS` times, alternating the two states; the medians
//! and their ratio are printed.
//!
//!     cargo bench -p fastfwd-router --bench rebuild [-- ROUTE_FILE]
//!
//! (default: data/full-table-prefixes.txt.gz).

mod support;

use control::netlink::{Event, KernelHop, RT_TABLE_LOCAL, RT_TABLE_MAIN};
use rib::rule::{KernelRule, RuleVerb};
use rib::{Router, RouterState};
use std::net::IpAddr;
use std::time::Instant;
use wire::Cidr;

const ROUNDS: usize = 5;
/// The tables besides main that rules look up.
const TABLES: [u32; 3] = [100, 200, 300];

fn rule(priority: u32, v6: bool, verb: RuleVerb, src: Option<Cidr>) -> KernelRule {
    KernelRule {
        priority,
        v6,
        verb,
        src,
        dst: None,
        iif: None,
        oif: None,
        fwmark: None,
        tos: 0,
        invert: false,
        suppress_prefixlen: None,
        suppress_ifgroup: None,
        l3mdev: false,
        uid_range: None,
        other: Vec::new(),
    }
}

/// A mirror holding the route file in main and, with `tables`, in each of
/// [`TABLES`] too, behind one source rule each.
fn state(file: &fib::table::RouteFile, tables: bool) -> RouterState {
    let mut state = support::two_port_state();
    for v6 in [false, true] {
        for (p, t) in [(0, RT_TABLE_LOCAL), (32766, RT_TABLE_MAIN)] {
            state.kernel.apply(&Event::Rule {
                add: true,
                rule: rule(p, v6, RuleVerb::Lookup(t), None),
            });
        }
    }
    let gw4: IpAddr = "198.19.0.108".parse().unwrap();
    let gw6: IpAddr = "2001:2:0:8000::108".parse().unwrap();
    let mut ids = vec![RT_TABLE_MAIN];
    if tables {
        ids.extend(TABLES);
    }
    for (i, &table) in ids.iter().enumerate() {
        let route = |prefix: Cidr, gateway: IpAddr| Event::Route {
            add: true,
            prefix,
            table,
            kind: 1,
            metric: 32,
            hops: vec![KernelHop {
                ifindex: 3,
                gateway: Some(gateway),
            }],
            nh_id: None,
            detail: Default::default(),
        };
        for &(p, _) in &file.v4 {
            state.kernel.apply(&route(Cidr::V4(p), gw4));
        }
        for &(p, _) in &file.v6 {
            state.kernel.apply(&route(Cidr::V6(p), gw6));
        }
        if table != RT_TABLE_MAIN {
            let from4: Cidr = format!("10.{}.0.0/16", 200 + i).parse().unwrap();
            let from6: Cidr = format!("2001:db8:{i}::/48").parse().unwrap();
            for (v6, src) in [(false, from4), (true, from6)] {
                state.kernel.apply(&Event::Rule {
                    add: true,
                    rule: rule(100 + i as u32, v6, RuleVerb::Lookup(table), Some(src)),
                });
            }
        }
    }
    state
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let path = support::route_file_arg();
    let file = fib::table::read_routes(&path).expect("route file");
    let load = netio::sys::os::LoadNote::start();
    eprintln!("{}", load.header());
    let one = state(&file, false);
    let four = state(&file, true);
    let (mut t1, mut t4) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        for (s, times, rules) in [(&one, &mut t1, false), (&four, &mut t4, true)] {
            let s = s.clone();
            let start = Instant::now();
            let (router, tables) = Router::new(s).expect("router");
            times.push(start.elapsed().as_secs_f64());
            assert_eq!(tables.policy().main_only(), !rules, "the rules compiled");
            drop((router, tables));
        }
    }
    let (m1, m4) = (median(t1.clone()), median(t4.clone()));
    println!(
        "{}: {} IPv4 + {} IPv6 routes a table",
        path.display(),
        file.v4.len(),
        file.v6.len()
    );
    println!("full build, main only:        median {m1:.3} s  (rounds {t1:.3?})");
    println!("full build, main + 3 tables:  median {m4:.3} s  (rounds {t4:.3?})");
    println!("ratio {:.2}x; goal: under 2 s with 4 tables", m4 / m1);
    eprintln!("{}", load.footer());
}
