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
