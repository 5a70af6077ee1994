//! The program loads and verifies (needs root: CAP_BPF).

#[test]
fn the_program_verifies() {
    if !netio::root_or_skip("the XDP engine program verifies") {
        return;
    }
    let e = xdp_engine::Engine::load(xdp_engine::Mode::Test, xdp_engine::FibCapacity::SMALL);
    assert!(
        e.is_ok(),
        "{}",
        e.err().map(|e| e.to_string()).unwrap_or_default()
    );
}

/// A new engine whose maps are laid out differently (other sizes) takes
/// over the program an earlier engine left attached, in one step: the
/// interface runs the earlier program until the swap and the new one
/// after it, and the new engine reports what it replaced. The traffic
/// side of the same takeover is `router_restart.rs`.
#[test]
fn a_new_engine_takes_over_across_a_layout_change() {
    if !netio::root_or_skip("an engine takes over across a layout change") {
        return;
    }
    let ns = format!("ffxl{}", std::process::id());
    let ip = |args: &[&str]| {
        let o = std::process::Command::new("ip")
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "ip {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    ip(&["netns", "add", &ns]);
    struct Gone(String);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", &self.0])
                .status();
        }
    }
    let _gone = Gone(ns.clone());
    ip(&[
        "-n", &ns, "link", "add", "xa", "type", "veth", "peer", "name", "xb",
    ]);
    ip(&["-n", &ns, "link", "set", "xa", "up"]);
    ip(&["-n", &ns, "link", "set", "xb", "up"]);
    let ns2 = ns.clone();
    std::thread::spawn(move || {
        netio::sys::os::enter_netns(&ns2).unwrap();
        let ifindex = netio::if_index("xa").unwrap();
        let attached = || xdp_engine::attach::attached(ifindex).unwrap();
        let mut old =
            xdp_engine::Engine::load(xdp_engine::Mode::Attached, xdp_engine::FibCapacity::SMALL)
                .unwrap();
        assert!(old.attach("xa", ifindex, 0, Some(false)).is_ok());
        let first = attached().expect("attached").prog_id;
        old.release();
        drop(old);
        assert_eq!(
            attached().map(|a| a.prog_id),
            Some(first),
            "kept after its engine is gone"
        );
        let mut new = xdp_engine::Engine::load(
            xdp_engine::Mode::Attached,
            xdp_engine::FibCapacity::FULL_TABLE,
        )
        .unwrap();
        let native = new
            .attach("xa", ifindex, 0, None)
            .map_err(|e| e.to_string());
        assert_eq!(native, Ok(false), "in the mode it ran in");
        let port = new.attached_ports()[0].clone();
        assert_eq!(port.adopted, Some(first));
        let now = attached().expect("still attached").prog_id;
        assert_ne!(now, first, "replaced");
        // Stopping with `detach` removes only its own program.
        new.detach_all();
        assert_eq!(attached(), None);
    })
    .join()
    .unwrap();
}
