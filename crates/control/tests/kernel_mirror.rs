//! The kernel mirror in a namespace pair this test creates: the start-up
//! dump sees links, addresses and connected routes; an `ip route add` and
//! `ip route del` arrive as broadcasts within a second; a resolution
//! request makes the kernel find a neighbour's MAC (ARP and ND) with no
//! static entry. Needs root; skips with a message otherwise.

use control::kernel::KernelLink;
use pipeline::Discard;
use rib::kernel::KernelRoute;
use rib::kernel::KernelState;
use std::net::IpAddr;
use std::process::Command;
use std::time::{Duration, Instant};

fn ok(args: &[&str]) {
    let o = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run");
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

struct Pair {
    a: String,
    b: String,
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.a]).output();
        let _ = Command::new("ip").args(["netns", "del", &self.b]).output();
    }
}

fn pair(tag: &str) -> Option<Pair> {
    if !netio::root_or_skip("the kernel mirror test") {
        return None;
    }
    let id = std::process::id();
    let p = Pair {
        a: format!("rtkm{id}{tag}a"),
        b: format!("rtkm{id}{tag}b"),
    };
    ok(&["ip", "netns", "add", &p.a]);
    ok(&["ip", "netns", "add", &p.b]);
    for ns in [&p.a, &p.b] {
        // Link-local addresses usable at once (no duplicate address detection delay).
        ok(&[
            "ip",
            "netns",
            "exec",
            ns,
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.accept_dad=0",
            "net.ipv6.conf.default.accept_dad=0",
        ]);
    }
    ok(&[
        "ip", "-n", &p.a, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", &p.b,
    ]);
    ok(&["ip", "-n", &p.a, "addr", "add", "10.78.0.1/24", "dev", "va"]);
    ok(&[
        "ip",
        "-n",
        &p.a,
        "addr",
        "add",
        "2001:db8:78::1/64",
        "dev",
        "va",
        "nodad",
    ]);
    ok(&["ip", "-n", &p.b, "addr", "add", "10.78.0.2/24", "dev", "vb"]);
    ok(&[
        "ip",
        "-n",
        &p.b,
        "addr",
        "add",
        "2001:db8:78::2/64",
        "dev",
        "vb",
        "nodad",
    ]);
    ok(&["ip", "-n", &p.a, "link", "set", "va", "up"]);
    ok(&["ip", "-n", &p.b, "link", "set", "vb", "up"]);
    Some(p)
}

/// Polls the event socket until `cond` holds or `limit` passes.
fn wait_for(
    link: &mut KernelLink,
    st: &mut KernelState,
    limit: Duration,
    cond: impl Fn(&KernelState) -> bool,
) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond(st) {
            return true;
        }
        let _ = netio::sys::os::poll_readable(&[link.events_fd()], 20);
        let mut delta = control::kernel::Delta::default();
        link.poll_events(st, &mut delta).expect("events");
    }
    cond(st)
}

#[test]
fn dump_follow_and_resolve() {
    let Some(p) = pair("f") else { return };
    let nsb = p.b.clone();
    let nsb2 = p.b.clone();
    let t = std::thread::spawn(move || {
        netio::sys::os::enter_netns(&nsb).unwrap();
        let mut link = KernelLink::open().unwrap();
        let mut st = KernelState::default();
        link.dump(&mut st).unwrap();
        let vb = st.ifindex_of("vb").expect("vb in the dump");
        assert!(st.links[&vb].mac.is_some());
        assert_eq!(
            st.links[&vb].kind.as_deref(),
            Some("veth"),
            "IFLA_INFO_KIND"
        );
        assert_eq!(st.addrs.get(&(vb, "10.78.0.2".parse().unwrap())), Some(&24));
        assert_eq!(
            st.addrs.get(&(vb, "2001:db8:78::2".parse().unwrap())),
            Some(&64)
        );
        let has_route =
            |st: &KernelState, p: &str| st.routes.keys().any(|(c, _)| c.to_string() == p);
        assert!(
            has_route(&st, "10.78.0.0/24"),
            "connected route dumped: {:?}",
            st.routes.keys()
        );
        assert!(has_route(&st, "2001:db8:78::/64"));

        // A route added with `ip route` arrives within a second.
        let t0 = Instant::now();
        ok(&[
            "ip",
            "-n",
            &nsb2,
            "route",
            "add",
            "10.200.0.0/16",
            "via",
            "10.78.0.1",
        ]);
        ok(&[
            "ip",
            "-n",
            &nsb2,
            "-6",
            "route",
            "add",
            "2001:db8:200::/48",
            "via",
            "2001:db8:78::1",
        ]);
        assert!(wait_for(
            &mut link,
            &mut st,
            Duration::from_secs(1),
            |s| has_route(s, "10.200.0.0/16") && has_route(s, "2001:db8:200::/48")
        ));
        assert!(t0.elapsed() < Duration::from_secs(1));
        let hops = st
            .routes
            .iter()
            .find(|((c, _), _)| c.to_string() == "10.200.0.0/16")
            .unwrap()
            .1
            .clone();
        let KernelRoute::Via(hops) = hops else {
            panic!("{hops:?}")
        };
        assert_eq!(hops[0].ifindex, vb);
        assert_eq!(hops[0].gateway, Some("10.78.0.1".parse().unwrap()));
        // Discarding routes are mirrored with their type.
        for (kind, d) in [
            ("blackhole", Discard::Blackhole),
            ("unreachable", Discard::Unreachable),
            ("prohibit", Discard::Prohibit),
            ("throw", Discard::Throw),
        ] {
            ok(&["ip", "-n", &nsb2, "route", "add", kind, "10.200.7.0/24"]);
            ok(&[
                "ip",
                "-n",
                &nsb2,
                "-6",
                "route",
                "add",
                kind,
                "2001:db8:207::/48",
            ]);
            assert!(
                wait_for(&mut link, &mut st, Duration::from_secs(1), |s| {
                    let has = |p: &str| {
                        s.routes
                            .iter()
                            .any(|((c, _), r)| c.to_string() == p && *r == KernelRoute::Discard(d))
                    };
                    has("10.200.7.0/24") && has("2001:db8:207::/48")
                }),
                "{kind} route mirrored"
            );
            ok(&["ip", "-n", &nsb2, "route", "del", kind, "10.200.7.0/24"]);
            ok(&[
                "ip",
                "-n",
                &nsb2,
                "-6",
                "route",
                "del",
                kind,
                "2001:db8:207::/48",
            ]);
            assert!(wait_for(&mut link, &mut st, Duration::from_secs(1), |s| {
                !has_route(s, "10.200.7.0/24") && !has_route(s, "2001:db8:207::/48")
            }));
        }
        ok(&["ip", "-n", &nsb2, "route", "del", "10.200.0.0/16"]);
        assert!(wait_for(&mut link, &mut st, Duration::from_secs(1), |s| {
            !has_route(s, "10.200.0.0/16")
        }));
        // Nexthop objects: the route names one, the mirror keeps both.
        ok(&[
            "ip",
            "-n",
            &nsb2,
            "nexthop",
            "add",
            "id",
            "77",
            "via",
            "10.78.0.1",
            "dev",
            "vb",
        ]);
        ok(&[
            "ip",
            "-n",
            &nsb2,
            "route",
            "add",
            "10.202.0.0/16",
            "nhid",
            "77",
        ]);
        assert!(
            wait_for(&mut link, &mut st, Duration::from_secs(1), |s| {
                s.nexthops.contains_key(&77)
                    && s.routes.iter().any(|((c, _), r)| {
                        c.to_string() == "10.202.0.0/16" && *r == KernelRoute::Object(77)
                    })
            }),
            "nexthop object and its route mirrored"
        );
        ok(&["ip", "-n", &nsb2, "nexthop", "del", "id", "77"]);
        assert!(
            wait_for(&mut link, &mut st, Duration::from_secs(1), |s| {
                !s.nexthops.contains_key(&77) && !has_route(s, "10.202.0.0/16")
            }),
            "deleting the object removes its routes"
        );
        // ECMP: a multipath route keeps both next hops.
        ok(&[
            "ip",
            "-n",
            &nsb2,
            "route",
            "add",
            "10.201.0.0/16",
            "nexthop",
            "via",
            "10.78.0.1",
            "nexthop",
            "via",
            "10.78.0.3",
        ]);
        assert!(wait_for(&mut link, &mut st, Duration::from_secs(1), |s| s
            .routes
            .iter()
            .any(|((c, _), h)| c.to_string() == "10.201.0.0/16"
                && matches!(h, KernelRoute::Via(h) if h.len() == 2))));

        // Neighbour resolution through the kernel, IPv4 and IPv6.
        for ip in ["10.78.0.1", "2001:db8:78::1"] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(!st.neighbours.contains_key(&(vb, ip)));
            // As the daemon does while packets keep missing: ask again every 300 ms.
            let mut resolved = false;
            for _ in 0..10 {
                link.resolve(vb, ip).unwrap();
                if wait_for(&mut link, &mut st, Duration::from_millis(300), |s| {
                    s.neighbours.contains_key(&(vb, ip))
                }) {
                    resolved = true;
                    break;
                }
            }
            assert!(resolved, "kernel resolved {ip}");
        }
        // A link going down takes its IPv4 routes along without telling
        // (IPv6 sends deletes): the mirror withdraws them too; they stay
        // gone when it comes back up, as in the kernel.
        ok(&[
            "ip",
            "-n",
            &nsb2,
            "route",
            "add",
            "10.203.0.0/16",
            "via",
            "10.78.0.1",
        ]);
        assert!(wait_for(&mut link, &mut st, Duration::from_secs(1), |s| {
            has_route(s, "10.203.0.0/16")
        }));
        ok(&["ip", "-n", &nsb2, "link", "set", "vb", "down"]);
        assert!(
            wait_for(&mut link, &mut st, Duration::from_secs(1), |s| {
                !has_route(s, "10.203.0.0/16") && !has_route(s, "2001:db8:200::/48")
            }),
            "routes via a down link withdrawn"
        );
        ok(&["ip", "-n", &nsb2, "link", "set", "vb", "up"]);
        std::thread::sleep(Duration::from_millis(300));
        let _ = wait_for(&mut link, &mut st, Duration::from_millis(300), |_| false);
        let out = Command::new("ip")
            .args(["-n", &nsb2, "route", "show", "10.203.0.0/16"])
            .output()
            .unwrap();
        assert!(
            out.stdout.is_empty(),
            "the kernel did not restore it either"
        );
        assert!(!has_route(&st, "10.203.0.0/16"));
        st
    });
    let st = t.join().unwrap();
    let va_mac = {
        let o = Command::new("ip")
            .args(["-n", &p.a, "-j", "link", "show", "va"])
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&o.stdout).to_string();
        let at = s.find("\"address\":\"").unwrap() + 11;
        s[at..at + 17].to_string()
    };
    for (_, mac) in st.neighbours.iter() {
        let m = format!(
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]
        );
        assert_eq!(m, va_mac);
    }
}

/// Enters `ns` (the calling thread) and follows its kernel with an event
/// buffer that holds a few broadcasts only, from a first dump.
fn follow_with_a_small_buffer(ns: &str) -> (KernelLink, KernelState) {
    netio::sys::os::enter_netns(ns).unwrap();
    let mut link = KernelLink::open().unwrap();
    link.set_event_buffer(16 * 1024).unwrap();
    let mut st = KernelState::default();
    link.dump(&mut st).unwrap();
    (link, st)
}

/// Broadcasts lost to a full receive buffer (ENOBUFS) start a re-read on
/// another thread; the mirror ends equal to the kernel with every route,
/// and the control thread kept polling meanwhile.
#[test]
fn lost_broadcasts_resync_without_blocking() {
    let Some(p) = pair("r") else { return };
    let nsb = p.b.clone();
    let batch = std::env::temp_dir().join(format!("fastfwd-km-{}.batch", std::process::id()));
    let n = 5_000u32;
    let text: String = (0..n)
        .map(|i| format!("route add 10.{}.{}.0/24 dev vb\n", 100 + i / 256, i % 256))
        .collect();
    std::fs::write(&batch, text).unwrap();
    let batch2 = batch.clone();
    let t = std::thread::spawn(move || {
        let (mut link, mut st) = follow_with_a_small_buffer(&nsb);
        let before = st.routes.len();
        ok(&["ip", "-n", &nsb, "-batch", batch2.to_str().unwrap()]);
        let mut resynced = false;
        let mut polls_while_resyncing = 0u32;
        let end = Instant::now() + Duration::from_secs(20);
        let want = before + n as usize;
        while Instant::now() < end && (st.routes.len() < want || link.resyncing()) {
            let _ = netio::sys::os::poll_readable(&[link.events_fd()], 5);
            let mut delta = control::kernel::Delta::default();
            link.poll_events(&mut st, &mut delta).expect("events");
            if link.resyncing() {
                resynced = true;
                polls_while_resyncing += 1;
            }
        }
        assert!(
            resynced,
            "5,000 routes into a 16 KiB buffer lost no broadcast?"
        );
        assert!(polls_while_resyncing >= 1);
        assert!(
            st.routes.len() >= want,
            "the mirror has every route after the resync"
        );
        // And it is the kernel's state: a fresh dump agrees.
        let mut fresh = KernelState::default();
        link.dump(&mut fresh).unwrap();
        assert_eq!(fresh.routes.len(), st.routes.len());
        assert!(fresh.routes.keys().all(|k| st.routes.contains_key(k)));
    });
    let r = t.join();
    std::fs::remove_file(&batch).ok();
    r.unwrap();
}

/// Routes changing while broadcasts are being lost: after its first
/// overrun the kernel reports ENOBUFS once and drops every later broadcast
/// silently until the queue is read empty, so a re-read started at the
/// error would miss what changed behind it. The mirror must end equal to
/// the kernel (every route added, none of those deleted), with the changes
/// made while it follows, as a routing daemon loading a table makes them.
#[test]
fn routes_changing_while_broadcasts_are_lost_end_in_the_kernels_state() {
    let Some(p) = pair("c") else { return };
    let nsb = p.b.clone();
    let dir = std::env::temp_dir();
    let id = std::process::id();
    let adds = dir.join(format!("fastfwd-km-{id}-adds.batch"));
    let churn = dir.join(format!("fastfwd-km-{id}-churn.batch"));
    let n = 6_000u32;
    let net = |i: u32| format!("10.{}.{}.0/24", 100 + i / 256, i % 256);
    let text: String = (0..n)
        .map(|i| format!("route add {} dev vb\n", net(i)))
        .collect();
    std::fs::write(&adds, text).unwrap();
    // Half of them deleted, others added: a lost delete would leave an
    // extra route, a lost add a missing one.
    let text: String = (0..n)
        .map(|i| {
            if i % 2 == 0 {
                format!("route del {} dev vb\n", net(i))
            } else {
                format!("route add {} dev vb\n", net(n + i))
            }
        })
        .collect();
    std::fs::write(&churn, text).unwrap();
    let (adds2, churn2) = (adds.clone(), churn.clone());
    let t = std::thread::spawn(move || {
        let (mut link, mut st) = follow_with_a_small_buffer(&nsb);
        let ns = nsb.clone();
        let (first_done, first) = std::sync::mpsc::channel();
        let writer = std::thread::spawn(move || {
            for round in 0..3 {
                ok(&["ip", "-n", &ns, "-batch", adds2.to_str().unwrap()]);
                if round == 0 {
                    let _ = first_done.send(());
                }
                ok(&["ip", "-n", &ns, "-batch", churn2.to_str().unwrap()]);
                // Back to the start for the next round: the odd routes of
                // the first batch and the second batch's additions go.
                let undo: String = (0..n)
                    .map(|i| {
                        if i % 2 == 0 {
                            String::new()
                        } else {
                            format!(
                                "route del {} dev vb\nroute del {} dev vb\n",
                                net(i),
                                net(n + i)
                            )
                        }
                    })
                    .collect();
                let f = std::env::temp_dir()
                    .join(format!("fastfwd-km-{}-undo.batch", std::process::id()));
                std::fs::write(&f, undo).unwrap();
                ok(&["ip", "-n", &ns, "-batch", f.to_str().unwrap()]);
                std::fs::remove_file(&f).ok();
            }
            ok(&["ip", "-n", &ns, "-batch", adds2.to_str().unwrap()]);
            ok(&["ip", "-n", &ns, "-batch", churn2.to_str().unwrap()]);
        });
        // Nothing read until the first 6,000 additions are made: their
        // broadcasts overflow the 16 KiB buffer whatever the scheduling,
        // and the rest change while the mirror re-reads.
        first.recv_timeout(Duration::from_secs(30)).unwrap();
        let end = Instant::now() + Duration::from_secs(60);
        while Instant::now() < end && (!writer.is_finished() || link.resyncing()) {
            let _ = netio::sys::os::poll_readable(&[link.events_fd()], 5);
            let mut delta = control::kernel::Delta::default();
            link.poll_events(&mut st, &mut delta).expect("events");
        }
        writer.join().unwrap();
        // What is still queued.
        let mut delta = control::kernel::Delta::default();
        link.poll_events(&mut st, &mut delta).expect("events");
        while link.resyncing() && Instant::now() < end {
            let _ = netio::sys::os::poll_readable(&[link.events_fd()], 5);
            link.poll_events(&mut st, &mut delta).expect("events");
        }
        assert!(link.resyncs() >= 1, "a 16 KiB buffer lost no broadcast?");
        let mut fresh = KernelState::default();
        link.dump(&mut fresh).unwrap();
        let missing = fresh
            .routes
            .keys()
            .filter(|k| !st.routes.contains_key(k))
            .count();
        let extra = st
            .routes
            .keys()
            .filter(|k| !fresh.routes.contains_key(k))
            .count();
        assert_eq!(
            (missing, extra),
            (0, 0),
            "the mirror differs from the kernel after {} re-reads",
            link.resyncs()
        );
        assert_eq!(fresh.routes.len(), st.routes.len());
    });
    let r = t.join();
    std::fs::remove_file(&adds).ok();
    std::fs::remove_file(&churn).ok();
    r.unwrap();
}

/// Routes installed in batches (several datagrams of requests, a final
/// short one, both families) all arrive in the kernel with their gateways,
/// a second pass replaces rather than fails, and a refused route (a gateway
/// on no link) is reported by its prefix.
#[test]
fn batched_route_replaces_reach_the_kernel_and_a_refusal_names_its_prefix() {
    use control::netlink::KernelHop;
    use wire::Cidr;
    let Some(p) = pair("b") else { return };
    let ns = p.a.clone();
    std::thread::spawn(move || {
        netio::sys::os::enter_netns(&ns).unwrap();
        let ifindex = netio::if_index("va").unwrap();
        let gw4: IpAddr = "10.78.0.2".parse().unwrap();
        let gw6: IpAddr = "2001:db8:78::2".parse().unwrap();
        // 1,300 IPv4 /24s and 300 IPv6 /48s: three full datagrams and a
        // partial one.
        let routes: Vec<(Cidr, KernelHop)> = (0..1_300u32)
            .map(|i| {
                let c: Cidr = format!("100.{}.{}.0/24", 64 + i / 256, i % 256)
                    .parse()
                    .unwrap();
                (c, gw4)
            })
            .chain((0..300u32).map(|i| {
                let c: Cidr = format!("2001:db8:{:x}::/48", 0x1000 + i).parse().unwrap();
                (c, gw6)
            }))
            .map(|(c, gw)| {
                let hop = KernelHop {
                    ifindex,
                    gateway: Some(gw),
                };
                (c, hop)
            })
            .collect();
        for _ in 0..2 {
            let n = control::kernel::replace_routes(routes.iter().copied()).unwrap();
            assert_eq!(n, routes.len());
        }
        let st = control::kernel::dump_now().unwrap();
        for (c, hop) in &routes {
            let found = st
                .routes
                .iter()
                .find(|((p, _), _)| p == c)
                .unwrap_or_else(|| panic!("{c} not in the kernel"));
            assert_eq!(found.1, &KernelRoute::Via(vec![*hop]), "{c}");
        }
        // A gateway on no link of this namespace: the kernel refuses.
        let far = KernelHop {
            ifindex,
            gateway: Some("192.0.2.1".parse().unwrap()),
        };
        let bad: Cidr = "100.99.1.0/24".parse().unwrap();
        let err = control::kernel::replace_routes(
            routes[..10]
                .iter()
                .copied()
                .chain([(bad, far)])
                .chain(routes[10..20].iter().copied()),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("100.99.1.0/24"), "{err}");
    })
    .join()
    .unwrap();
}

/// Runs `f` in the second namespace of a fresh pair (`tag`), with `ip`
/// commands for that namespace, and a kernel link whose state holds a
/// dump taken there.
fn in_mirrored_namespace(
    tag: &str,
    f: impl FnOnce(&dyn Fn(&[&str]), KernelLink, KernelState) + Send + 'static,
) {
    let Some(p) = pair(tag) else { return };
    let nsb = p.b.clone();
    let t = std::thread::spawn(move || {
        netio::sys::os::enter_netns(&nsb).unwrap();
        let ip = |args: &[&str]| {
            let mut all = vec!["ip", "-n", nsb.as_str()];
            all.extend_from_slice(args);
            ok(&all);
        };
        let mut link = KernelLink::open().unwrap();
        let mut st = KernelState::default();
        link.dump(&mut st).unwrap();
        f(&ip, link, st);
    });
    t.join().unwrap();
}

/// The routing state beyond main's plain routes, followed from the
/// kernel's own broadcasts and dumps: policy rules and the tables they
/// look up (a rule fastfwd does not evaluate named), routes appended
/// behind another, weighted multipath routes, and IPv6 source-specific
/// routes.
#[test]
fn policy_rules_appended_and_weighted_routes_are_followed() {
    in_mirrored_namespace("p", |ip, mut link, mut st| {
        assert!(
            st.rules.len() >= 5,
            "the kernel's default rules dumped: {:?}",
            st.rules
        );
        assert!(st.unmodelled().is_empty(), "{:?}", st.unmodelled());
        let second = Duration::from_secs(1);

        // The field's case: a source rule to a table that blackholes.
        ip(&[
            "rule",
            "add",
            "from",
            "198.18.10.0/24",
            "lookup",
            "100",
            "pref",
            "100",
        ]);
        assert!(wait_for(&mut link, &mut st, second, |s| s.rules.len() >= 6));
        ip(&[
            "route",
            "add",
            "blackhole",
            "198.19.10.0/24",
            "table",
            "100",
        ]);
        // Followed: the rule and table 100's route (fastfwd routes by
        // them), nothing named.
        assert!(wait_for(&mut link, &mut st, second, |s| s
            .tables
            .get(&100)
            .is_some_and(|t| t.len() == 1)));
        assert!(st.unmodelled().is_empty(), "{:?}", st.unmodelled());
        assert_eq!(control::kernel::dump_now().unwrap().tables, st.tables);
        // A rule that also selects by protocol is not evaluated: named.
        ip(&[
            "rule",
            "add",
            "from",
            "198.18.11.0/24",
            "ipproto",
            "udp",
            "lookup",
            "100",
            "pref",
            "101",
        ]);
        let named =
            ["ip rule 101: from 198.18.11.0/24 ipproto 17 lookup 100 (selects by ipproto 17)"];
        assert!(
            wait_for(&mut link, &mut st, second, |s| s.unmodelled() == named),
            "{:?}",
            st.unmodelled()
        );
        assert_eq!(control::kernel::dump_now().unwrap().unmodelled(), named);
        ip(&["rule", "del", "pref", "101"]);
        ip(&[
            "route",
            "del",
            "blackhole",
            "198.19.10.0/24",
            "table",
            "100",
        ]);
        assert!(wait_for(&mut link, &mut st, second, |s| s
            .unmodelled()
            .is_empty()
            && !s.tables.contains_key(&100)));
        ip(&["rule", "del", "pref", "100"]);

        // `ip route append`: the first route stays in use until deleted.
        let gateway = |s: &KernelState, p: &str| {
            s.routes.iter().find_map(|((c, _), r)| match r {
                KernelRoute::Via(h) if c.to_string() == p => Some(h.clone()),
                _ => None,
            })
        };
        let via = |a: &str| Some(a.parse::<IpAddr>().unwrap());
        ip(&["route", "add", "10.210.0.0/16", "via", "10.78.0.1"]);
        ip(&["route", "append", "10.210.0.0/16", "via", "10.78.0.3"]);
        assert!(wait_for(&mut link, &mut st, second, |s| s
            .aliases
            .values()
            .any(|l| l.len() == 2)));
        assert_eq!(
            gateway(&st, "10.210.0.0/16").unwrap()[0].gateway,
            via("10.78.0.1")
        );
        let fresh = control::kernel::dump_now().unwrap();
        assert_eq!(fresh.routes, st.routes, "a dump agrees with the broadcasts");
        ip(&["route", "del", "10.210.0.0/16", "via", "10.78.0.1"]);
        assert!(wait_for(&mut link, &mut st, second, |s| {
            gateway(s, "10.210.0.0/16").is_some_and(|h| h[0].gateway == via("10.78.0.3"))
        }));

        // Weights: a member repeated by its weight.
        ip(&[
            "route",
            "add",
            "10.211.0.0/16",
            "nexthop",
            "via",
            "10.78.0.1",
            "weight",
            "3",
            "nexthop",
            "via",
            "10.78.0.4",
            "weight",
            "1",
        ]);
        assert!(wait_for(&mut link, &mut st, second, |s| gateway(
            s,
            "10.211.0.0/16"
        )
        .is_some()));
        let hops = gateway(&st, "10.211.0.0/16").unwrap();
        let gws: Vec<_> = hops.iter().map(|h| h.gateway).collect();
        assert_eq!(
            gws,
            [
                via("10.78.0.1"),
                via("10.78.0.1"),
                via("10.78.0.1"),
                via("10.78.0.4")
            ]
        );

        // A source-specific IPv6 route, where the kernel has them
        // (CONFIG_IPV6_SUBTREES): named, not forwarded with.
        let subtree = Command::new("ip")
            // In this thread's namespace, which the child inherits.
            .args(["-6", "route", "add", "2001:db8:300::/48"])
            .args(["from", "2001:db8:1::/48", "via", "2001:db8:78::1"])
            .output()
            .unwrap();
        if subtree.status.success() {
            assert!(wait_for(&mut link, &mut st, second, |s| s
                .unmodelled()
                .iter()
                .any(
                    |i| i.contains("from 2001:db8:1::/48: a source-specific route")
                )));
        } else {
            eprintln!(
                "this kernel refuses source-specific IPv6 routes ({}): none can be mirrored",
                String::from_utf8_lossy(&subtree.stderr).trim()
            );
        }
    });
}

/// A VRF device and a member, followed: the device with its table, the
/// member's routes the kernel moves into that table (its connected route
/// used, its local and broadcast routes left to the host as local's), a
/// route added to the table, and the `l3mdev` rule the kernel adds with
/// the first VRF, which fastfwd evaluates: nothing is named. This VM's
/// kernel has no VRF devices; `scripts/test-kernel` runs this under
/// Debian's kernel, where it must pass.
#[test]
#[ignore = "needs VRF devices (CONFIG_NET_VRF): scripts/test-kernel runs it under Debian's kernel"]
fn vrf_devices_and_their_members_are_followed() {
    in_mirrored_namespace("v", |ip, mut link, mut st| {
        assert!(st.unmodelled().is_empty(), "{:?}", st.unmodelled());
        let second = Duration::from_secs(2);
        ip(&["link", "add", "blue", "type", "vrf", "table", "10"]);
        ip(&["link", "set", "blue", "up"]);
        assert!(
            wait_for(&mut link, &mut st, second, |s| s.links.values().any(|l| l
                .name
                == "blue"
                && l.vrf == Some(10)
                && l.kind.as_deref() == Some("vrf"))),
            "the VRF device is seen with its table: {:?}",
            st.links
        );
        let blue = st.ifindex_of("blue").unwrap();
        assert!(st.vrf_tables().is_empty(), "no member yet");
        assert!(st.unmodelled().is_empty(), "{:?}", st.unmodelled());
        let vb = st.ifindex_of("vb").unwrap();
        ip(&["link", "set", "vb", "master", "blue"]);
        ip(&[
            "route",
            "add",
            "203.0.113.0/24",
            "via",
            "10.78.0.1",
            "table",
            "10",
        ]);
        let connected: wire::Cidr = "10.78.0.0/24".parse().unwrap();
        let added: wire::Cidr = "203.0.113.0/24".parse().unwrap();
        let in_blue = |s: &KernelState, p: wire::Cidr| {
            s.tables
                .get(&10)
                .is_some_and(|t| t.keys().any(|(q, _)| *q == p))
        };
        assert!(
            wait_for(&mut link, &mut st, second, |s| s.links[&vb].master
                == Some(blue)
                && in_blue(s, connected)
                && in_blue(s, added)),
            "{:?}",
            st.tables.get(&10)
        );
        assert_eq!(st.vrf_of(vb), Some(10));
        assert_eq!(st.vrf_tables(), std::collections::BTreeSet::from([10]));
        assert!(
            st.rules.iter().any(|r| r.l3mdev),
            "the kernel's l3mdev rule: {:?}",
            st.rules
        );
        assert!(st.unmodelled().is_empty(), "{:?}", st.unmodelled());
        let fresh = control::kernel::dump_now().unwrap();
        assert_eq!(fresh.tables, st.tables, "a dump agrees");
        assert!(fresh.unmodelled().is_empty(), "{:?}", fresh.unmodelled());
        ip(&["link", "del", "blue"]);
        assert!(
            wait_for(&mut link, &mut st, second, |s| s.vrf_tables().is_empty()
                && !s.links.contains_key(&blue)),
            "{:?}",
            st.links
        );
        assert!(st.unmodelled().is_empty(), "{:?}", st.unmodelled());
    });
}

/// The kernel's major and minor version (`uname -r`).
fn kernel_version() -> (u32, u32) {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut it = r.trim().split(['.', '-']).map(|p| p.parse().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// A veth takes frames redirected from XDP only while its peer runs NAPI
/// (GRO on, or an XDP program there): the netdev family's xdp-features
/// say so (Linux 6.3+) and follow a change of the peer's GRO; on older
/// kernels the family is absent and `open` says so.
#[test]
fn xdp_features_say_whether_a_veth_takes_redirected_frames() {
    let Some(p) = pair("x") else { return };
    let (nsa, nsb) = (p.a.clone(), p.b.clone());
    std::thread::spawn(move || {
        netio::sys::os::enter_netns(&nsa).unwrap();
        let ifindex = netio::if_index("va").unwrap();
        let link = control::netdev::NetdevLink::open().unwrap();
        if kernel_version() < (6, 3) {
            assert!(link.is_none(), "no netdev family before 6.3");
            return;
        }
        let mut link = link.expect("the netdev family on 6.3+");
        let gro = |on: &str| {
            ok(&[
                "ip", "netns", "exec", &nsb, "ethtool", "-K", "vb", "gro", on,
            ])
        };
        gro("off");
        let f = link.xdp_features(ifindex).unwrap().expect("va exists");
        assert!(!f.takes_redirects(), "peer without NAPI: {f:?}");
        assert!(f.0 & control::netdev::XdpFeatures::REDIRECT != 0, "{f:?}");
        gro("on");
        let f = link.xdp_features(ifindex).unwrap().unwrap();
        assert!(f.takes_redirects(), "peer with GRO: {f:?}");
        assert_eq!(link.xdp_features(999_999).unwrap(), None, "no such device");
    })
    .join()
    .unwrap();
}
