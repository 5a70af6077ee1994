//! Where a full table's memory goes: the daemon's structures built from a
//! route file the way `fastfwd run` builds them from the kernel (each
//! route a netlink event into the kernel mirror, then the router's full
//! build, its published snapshot, and the XDP engine's image of it), with
//! the heap bytes each one holds counted by an instrumented allocator.
//!
//!     cargo bench -p fastfwd-router --bench memory [-- ROUTE_FILE]
//!
//! (default: data/full-table-prefixes.txt.gz). The daemon's resident size
//! adds what is not on this heap: the I/O rings and UMEM, thread stacks,
//! the allocator's free lists and fragmentation.

mod support;

use control::netlink::{Event, KernelHop};
use rib::Router;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use std::alloc::System;
use std::net::IpAddr;
use wire::Cidr;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Heap bytes held now, relative to the region's start.
fn held(r: &Region<'_, System>) -> i64 {
    let s = r.change();
    s.bytes_allocated as i64 - s.bytes_deallocated as i64 + s.bytes_reallocated as i64
}

fn mib(b: i64) -> f64 {
    b as f64 / 1048576.0
}

fn main() {
    let path = support::route_file_arg();
    let file = fib::table::read_routes(&path).expect("route file");
    let (n4, n6) = (file.v4.len(), file.v6.len());
    // The events a routing daemon's kernel protocol makes: one route each,
    // through a gateway on d1.
    let gw4: IpAddr = "198.19.0.108".parse().unwrap();
    let gw6: IpAddr = "2001:2:0:8000::108".parse().unwrap();
    let route = |prefix: Cidr, gateway: IpAddr| Event::Route {
        add: true,
        prefix,
        table: 254,
        kind: 1,
        metric: 32,
        hops: vec![KernelHop {
            ifindex: 3,
            gateway: Some(gateway),
        }],
        nh_id: None,
        detail: Default::default(),
    };
    let mut events: Vec<Event> = Vec::with_capacity(n4 + n6);
    events.extend(file.v4.iter().map(|&(p, _)| route(Cidr::V4(p), gw4)));
    events.extend(file.v6.iter().map(|&(p, _)| route(Cidr::V6(p), gw6)));
    drop(file);

    let region = Region::new(GLOBAL);
    let mut state = support::two_port_state();
    for e in &events {
        state.kernel.apply(e);
    }
    let mirror = held(&region);
    assert_eq!(state.kernel.routes.len(), n4 + n6, "every route mirrored");
    drop(events);

    let before = held(&region);
    let (router, tables) = Router::new(state).expect("router");
    let after_router = held(&region);
    let (m4, m6) = (
        tables.fib4.snapshot().trie().memory(),
        tables.fib6.snapshot().trie().memory(),
    );
    let (installed, texts) = router.installed();
    let installed_copy = held(&region) - after_router;
    drop((installed, texts));

    let before_xdp = held(&region);
    let cap = xdp_engine::FibCapacity::FULL_TABLE;
    let (s4, s6) = (tables.fib4.snapshot(), tables.fib6.snapshot());
    let image = xdp_engine::Image::compile(
        &tables.datapath(),
        s4.trie(),
        s6.trie(),
        tables.acl.as_ref(),
        &cap,
    )
    .expect("the full table fits the XDP maps");
    let xdp = held(&region) - before_xdp;
    drop(image);

    let before_audit = held(&region);
    let copy = router.state.clone();
    let audit_copy = held(&region) - before_audit;
    drop(copy);

    let total = mirror + (after_router - before);
    println!(
        "sizes: mirror key {} B, route {} B; installed key {} B",
        std::mem::size_of::<(Cidr, u32)>(),
        std::mem::size_of::<rib::kernel::KernelRoute>(),
        std::mem::size_of::<Cidr>()
    );
    println!(
        "{}: {n4} IPv4 + {n6} IPv6 routes; heap held by each structure (MiB):",
        path.display()
    );
    let rows = [
        (
            "kernel mirror (routes, links, addresses)",
            mirror,
            format!("{:.0} B per route", mirror as f64 / (n4 + n6) as f64),
        ),
        (
            "router: installed routes, next-hop sets, FIBs",
            after_router - before,
            format!(
                "tries {:.1} + {:.1} MiB lookup, route copies ~{:.1} + {:.1} MiB",
                m4.lookup_bytes as f64 / 1048576.0,
                m6.lookup_bytes as f64 / 1048576.0,
                m4.control_bytes as f64 / 1048576.0,
                m6.control_bytes as f64 / 1048576.0
            ),
        ),
        (
            "XDP engine: one image (the engine keeps two)",
            xdp,
            String::new(),
        ),
        (
            "fib audit: copy of the installed routes (transient)",
            installed_copy,
            String::new(),
        ),
        (
            "fib audit: copy of the state (transient)",
            audit_copy,
            String::new(),
        ),
        (
            "held while running (mirror + router + two images)",
            total + 2 * xdp,
            String::new(),
        ),
    ];
    for (what, bytes, note) in rows {
        println!("  {what:<54} {:>8.1}  {note}", mib(bytes));
    }
}
