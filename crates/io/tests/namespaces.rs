//! Both backends on a veth pair between two namespaces this test creates:
//! frames cross in both directions, the XDP program attaches and detaches
//! cleanly, and host traffic (ARP, ping to the interface's address) still
//! reaches the kernel while the program is attached. Needs root; skips
//! with a message otherwise.

use netio::packet::{PacketConfig, PacketPort};
use netio::xdp::{SocketConfig, XdpMode, XdpPort, XdpProgram};
use netio::{FrameBatch, Port};
use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::time::{Duration, Instant};

fn sh(args: &[&str]) -> std::process::Output {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run command")
}

fn ok(args: &[&str]) {
    let o = sh(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Two namespaces `a` and `b` joined by veth `va` (in a, 10.77.0.1/24) and
/// `vb` (in b, 10.77.0.2/24); deleted on drop.
struct Pair {
    a: String,
    b: String,
}

impl Pair {
    fn new(tag: &str) -> Option<Pair> {
        if !netio::root_or_skip("the I/O namespace tests") {
            return None;
        }
        let id = std::process::id();
        let p = Pair {
            a: format!("rtio{id}{tag}a"),
            b: format!("rtio{id}{tag}b"),
        };
        ok(&["ip", "netns", "add", &p.a]);
        ok(&["ip", "netns", "add", &p.b]);
        ok(&[
            "ip", "-n", &p.a, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns",
            &p.b,
        ]);
        ok(&["ip", "-n", &p.a, "addr", "add", "10.77.0.1/24", "dev", "va"]);
        ok(&["ip", "-n", &p.b, "addr", "add", "10.77.0.2/24", "dev", "vb"]);
        for (ns, dev) in [(&p.a, "va"), (&p.b, "vb")] {
            ok(&["ip", "-n", ns, "link", "set", dev, "up"]);
            ok(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        Some(p)
    }

    fn mac(&self, ns: &str, dev: &str) -> [u8; 6] {
        let o = sh(&["ip", "-n", ns, "-j", "link", "show", dev]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("ip -j output");
        let s = v[0]["address"].as_str().expect("address");
        let mut mac = [0u8; 6];
        for (m, part) in mac.iter_mut().zip(s.split(':')) {
            *m = u8::from_str_radix(part, 16).expect("hex");
        }
        mac
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", &self.a]);
        let _ = sh(&["ip", "netns", "del", &self.b]);
    }
}

/// An Ethernet/IPv4/UDP frame to `dst` carrying `seq` in its payload.
fn udp_frame(dst_mac: [u8; 6], src_mac: [u8; 6], dst: Ipv4Addr, seq: u32) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    let payload = seq.to_be_bytes();
    let total = 20 + 8 + payload.len();
    let mut ip = vec![
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        0,
        0x40,
        0,
        64,
        17,
        0,
        0,
        10,
        77,
        0,
        1,
    ];
    ip.extend_from_slice(&dst.octets());
    let mut sum = 0u32;
    for c in ip.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let csum = !(sum as u16);
    ip[10..12].copy_from_slice(&csum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x30, 0x39, 0x30, 0x39, 0, 12, 0, 0]);
    f.extend_from_slice(&payload);
    f
}

/// Receives on `port` until `want` frames whose payload carries a sequence
/// number below `want` arrive or two seconds pass; returns the sequence numbers seen.
fn collect(port: &mut dyn Port, want: usize) -> Vec<u32> {
    let mut seen = Vec::new();
    let mut batch = FrameBatch::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while seen.len() < want && Instant::now() < deadline {
        batch.clear();
        if port.rx_batch(&mut batch) == 0 {
            let _ = netio::sys::os::poll_readable(&[port.poll_fd()], 20);
            continue;
        }
        for i in 0..batch.len() {
            let f = batch.frame(i);
            if f.len() == 46 && f[12..14] == [0x08, 0x00] && f[23] == 17 {
                seen.push(u32::from_be_bytes([f[42], f[43], f[44], f[45]]));
            }
        }
    }
    seen
}

/// Sends `count` frames through `port` in batches.
fn send(port: &mut dyn Port, dst_mac: [u8; 6], src_mac: [u8; 6], dst: Ipv4Addr, count: u32) {
    let mut batch = FrameBatch::new();
    for seq in 0..count {
        assert!(batch.push(&udp_frame(dst_mac, src_mac, dst, seq)));
        if batch.is_full() || seq + 1 == count {
            assert_eq!(port.tx_batch(&batch), batch.len(), "all frames queued");
            port.flush();
            batch.clear();
        }
    }
    // Give the kernel a moment to complete copy-mode sends.
    for _ in 0..10 {
        port.flush();
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `f` on a thread that lives in namespace `ns`.
fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        netio::sys::os::enter_netns(&ns).expect("setns");
        f()
    })
}

fn ping(ns: &str, addr: &str) -> bool {
    sh(&[
        "ip", "netns", "exec", ns, "ping", "-c", "2", "-i", "0.2", "-W", "1", addr,
    ])
    .status
    .success()
}

#[test]
fn packet_ports_carry_frames_both_ways() {
    let Some(p) = Pair::new("p") else { return };
    let (ma, mb) = (p.mac(&p.a, "va"), p.mac(&p.b, "vb"));
    let (ra, rb) = (p.a.clone(), p.b.clone());
    // Receiver in b opens first, then the sender in a.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let rx = in_ns(&rb, move || {
        let mut port = PacketPort::open(
            "vb",
            PacketConfig {
                fanout_group: 7,
                ..Default::default()
            },
        )
        .expect("open vb");
        ready_tx.send(()).unwrap();
        let seen = collect(&mut port, 100);
        (seen, port.stats())
    });
    ready_rx.recv().unwrap();
    let tx = in_ns(&ra, move || {
        let mut port = PacketPort::open("va", PacketConfig::default()).expect("open va");
        send(&mut port, mb, ma, Ipv4Addr::new(10, 99, 0, 1), 100);
        port.stats()
    });
    let tx_stats = tx.join().unwrap();
    let (mut seen, rx_stats) = rx.join().unwrap();
    assert_eq!(tx_stats.tx_packets, 100);
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(
        seen,
        (0..100).collect::<Vec<_>>(),
        "every frame arrives once"
    );
    assert!(rx_stats.rx_packets >= 100);
}

/// Frames the kernel drops at a full receive ring are the port's
/// `rx_dropped`: a receiver with a ring of two 4 KiB blocks reads nothing
/// while 2,000 frames arrive, then drains it; every frame it did not get
/// is counted.
#[test]
fn a_packet_port_counts_what_its_full_ring_dropped() {
    let Some(p) = Pair::new("r") else { return };
    let (ma, mb) = (p.mac(&p.a, "va"), p.mac(&p.b, "vb"));
    let (ra, rb) = (p.a.clone(), p.b.clone());
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (sent_tx, sent_rx) = std::sync::mpsc::channel::<()>();
    let rx = in_ns(&rb, move || {
        let mut port = PacketPort::open(
            "vb",
            PacketConfig {
                block_size: 4096,
                block_nr: 2,
                block_timeout_ms: 1,
                fanout_group: 9,
            },
        )
        .expect("open vb");
        ready_tx.send(()).unwrap();
        sent_rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let seen = collect(&mut port, 2000);
        (seen, port.stats())
    });
    ready_rx.recv().unwrap();
    let tx = in_ns(&ra, move || {
        let mut port = PacketPort::open("va", PacketConfig::default()).expect("open va");
        send(&mut port, mb, ma, Ipv4Addr::new(10, 99, 0, 1), 2000);
        port.stats()
    });
    let tx_stats = tx.join().unwrap();
    sent_tx.send(()).unwrap();
    let (mut seen, rx_stats) = rx.join().unwrap();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(tx_stats.tx_packets, 2000);
    assert!(
        seen.len() < 2000 && rx_stats.rx_dropped > 0,
        "the ring overflowed: {} read, {rx_stats:?}",
        seen.len()
    );
    // Every frame not read was counted (the kernel's own frames on the
    // link, IPv6 neighbour discovery, may add a few drops).
    let missing = 2000 - seen.len() as u64;
    assert!(
        (missing..=missing + 20).contains(&rx_stats.rx_dropped),
        "{missing} frames not read, {} counted dropped",
        rx_stats.rx_dropped
    );
}

/// An interface going down reports ENETDOWN to its packet sockets, and
/// the kernel keeps that error until it is read: the first send after the
/// interface is back would fail with it (frames counted as dropped though
/// nothing was wrong), and poll would keep returning at once. The sender
/// retries a call the stale error failed, and the waiter reads the error.
#[test]
fn a_packet_port_sends_again_after_its_interface_flaps() {
    let Some(p) = Pair::new("f") else { return };
    let (ma, mb) = (p.mac(&p.a, "va"), p.mac(&p.b, "vb"));
    let (ra, rb) = (p.a.clone(), p.b.clone());
    let (step_tx, step_rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let tx = in_ns(&ra, move || {
        let mut port = PacketPort::open("va", PacketConfig::default()).expect("open va");
        let fd = port.poll_fd();
        let take = || {
            netio::sys::os::take_socket_error(fd)
                .unwrap()
                .map(|e| e.raw_os_error())
        };
        done_tx.send(()).unwrap();
        // First flap: the error is there to read.
        step_rx.recv().unwrap();
        let raised = take();
        done_tx.send(()).unwrap();
        // Second flap: a waiter's poll reads it.
        step_rx.recv().unwrap();
        let _ = netio::sys::os::poll_readable(&[fd], 0);
        let after_poll = take();
        done_tx.send(()).unwrap();
        // Third flap: sent without a poll first.
        step_rx.recv().unwrap();
        send(&mut port, mb, ma, Ipv4Addr::new(10, 99, 0, 1), 50);
        (port.stats(), raised, after_poll)
    });
    let flap = || {
        done_rx.recv().unwrap();
        for state in ["down", "up"] {
            ok(&["ip", "-n", &p.a, "link", "set", "va", state]);
        }
        // The pair carries again once both ends are up.
        let up = Instant::now();
        while !sh(&["ip", "-n", &p.b, "link", "show", "vb"])
            .stdout
            .windows(8)
            .any(|w| w == b"LOWER_UP")
            && up.elapsed() < Duration::from_secs(5)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        step_tx.send(()).unwrap();
    };
    flap();
    flap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let rx = in_ns(&rb, move || {
        let mut port = PacketPort::open("vb", PacketConfig::default()).expect("open vb");
        ready_tx.send(()).unwrap();
        collect(&mut port, 50)
    });
    ready_rx.recv().unwrap();
    flap();
    let mut seen = rx.join().unwrap();
    let (stats, raised, after_poll) = tx.join().unwrap();
    assert_eq!(
        raised,
        Some(Some(libc::ENETDOWN)),
        "the flap raised ENETDOWN"
    );
    assert_eq!(after_poll, None, "poll read the pending error");
    assert_eq!(
        (stats.tx_packets, stats.tx_dropped),
        (50, 0),
        "every frame after the flap sent"
    );
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen, (0..50).collect::<Vec<_>>());
}

/// The XDP program attached to `ifindex` in this namespace, as `ip` sees it.
fn attached_program(ifindex: u32) -> Result<Option<u64>, String> {
    let o = sh(&["ip", "-j", "link", "show"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).map_err(|e| e.to_string())?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .find(|l| l["ifindex"].as_u64() == Some(u64::from(ifindex)))
        .and_then(|l| l["xdp"]["prog"]["id"].as_u64()))
}

#[test]
fn xdp_port_receives_transit_and_leaves_host_traffic_to_the_kernel() {
    let Some(p) = Pair::new("x") else { return };
    let (ma, mb) = (p.mac(&p.a, "va"), p.mac(&p.b, "vb"));
    let (ra, rb) = (p.a.clone(), p.b.clone());
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let dut = in_ns(&rb, move || {
        let mut prog = XdpProgram::attach("vb", XdpMode::Native).expect("attach XDP to veth");
        assert!(prog.is_native());
        let ifindex = prog.ifindex();
        assert!(attached_program(ifindex).unwrap().is_some());
        prog.add_local(IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2)))
            .unwrap();
        let mut port = XdpPort::open(&mut prog, 0, SocketConfig::default()).expect("AF_XDP socket");
        assert!(!port.is_zero_copy(), "veth has no zero-copy");
        ready_tx.send(()).unwrap();
        let seen = collect(&mut port, 100);
        // Send 50 frames back toward a.
        send(&mut port, ma, mb, Ipv4Addr::new(10, 77, 0, 1), 50);
        let tx = port.stats();
        // Keep the program attached while the host-traffic check runs.
        done_rx.recv().unwrap();
        let verdicts = prog.verdict_counts().unwrap();
        drop(port);
        prog.detach().unwrap();
        let after = attached_program(ifindex).unwrap();
        (seen, tx, verdicts, after)
    });
    ready_rx.recv().unwrap();
    // a's receiver must be ready before b sends back: open it first.
    let (a_ready_tx, a_ready_rx) = std::sync::mpsc::channel();
    let sender = in_ns(&ra, move || {
        let mut port = PacketPort::open("va", PacketConfig::default()).expect("open va");
        a_ready_tx.send(()).unwrap();
        send(&mut port, mb, ma, Ipv4Addr::new(10, 99, 0, 1), 100);
        collect(&mut port, 50)
    });
    a_ready_rx.recv().unwrap();
    let mut back = sender.join().unwrap();
    // Host traffic: ARP and ICMP to the local address go to the kernel.
    let _ = sh(&["ip", "-n", &p.a, "neigh", "flush", "dev", "va"]);
    let pinged = ping(&p.a, "10.77.0.2");
    done_tx.send(()).unwrap();
    let (mut seen, tx, (redirected, passed), after) = dut.join().unwrap();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(
        seen,
        (0..100).collect::<Vec<_>>(),
        "transit frames reach the AF_XDP socket"
    );
    assert_eq!(tx.tx_packets, 50);
    back.sort_unstable();
    back.dedup();
    assert_eq!(
        back,
        (0..50).collect::<Vec<_>>(),
        "frames sent on the AF_XDP socket arrive"
    );
    assert!(
        pinged,
        "ping to the dut's own address is answered by the kernel"
    );
    assert!(redirected >= 100, "redirected {redirected}");
    assert!(
        passed >= 2,
        "ARP and echo requests passed to the host: {passed}"
    );
    assert_eq!(after, None, "no XDP program left attached");
}

#[test]
fn xdp_program_is_detached_on_drop_and_refuses_to_replace_another() {
    let Some(p) = Pair::new("d") else { return };
    let rb = p.b.clone();
    let r = in_ns(&rb, move || {
        let ifindex = netio::if_index("vb").unwrap();
        let prog = XdpProgram::attach("vb", XdpMode::Auto).expect("attach");
        let second = XdpProgram::attach("vb", XdpMode::Auto);
        let second_err = second.err().map(|e| e.to_string());
        let during = attached_program(ifindex).unwrap();
        drop(prog);
        let after = attached_program(ifindex).unwrap();
        let missing = XdpProgram::attach("nosuchdev0", XdpMode::Auto)
            .err()
            .map(|e| e.to_string());
        (second_err, during, after, missing)
    });
    let (second_err, during, after, missing) = r.join().unwrap();
    let msg = second_err.expect("second attach must fail");
    assert!(
        msg.contains("already attached") && msg.contains("--backend packet"),
        "{msg}"
    );
    assert!(during.is_some());
    assert_eq!(after, None);
    assert!(missing.unwrap().contains("nosuchdev0: not found"));
}

/// The XDP engine waits for an RCU grace period before it writes a half of
/// its tables the program may have read. `membarrier(GLOBAL)` is refused
/// on kernels with `nohz_full` CPUs; the fallback, an update of a map of
/// maps the kernel answers after `synchronize_rcu()`, works here, again
/// and again (its maps are made once).
#[test]
fn an_rcu_grace_period_is_waited_for_without_membarrier_too() {
    if !netio::root_or_skip("the RCU grace-period fallback (BPF maps)") {
        return;
    }
    netio::sys::bpf::synchronize_rcu().expect("membarrier or its fallback");
    for _ in 0..3 {
        netio::sys::bpf::synchronize_rcu_by_map().expect("the map-of-maps update");
    }
}
