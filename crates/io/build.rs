//! Compiles the XDP steering program (`bpf/xdp_steer.c`) with Debian's clang
//! into `$OUT_DIR/xdp_steer.o`, which `src/xdp.rs` embeds with
//! `include_bytes!`, and links libbpf, which loads it.
//!
//! Debug paths are mapped to a fixed prefix so the object does not depend on
//! where the tree is checked out.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let src = manifest.join("bpf/xdp_steer.c");
    let obj = out.join("xdp_steer.o");
    let clang = std::env::var("FASTFWD_BPF_CLANG").unwrap_or_else(|_| "clang".into());
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .arg("-I/usr/include/x86_64-linux-gnu")
        .arg(format!("-fdebug-prefix-map={}=fastfwd-io", manifest.display()))
        .arg("-c")
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .status()
        .unwrap_or_else(|e| panic!("running {clang} to build the XDP program (scripts/install-deps installs clang): {e}"));
    assert!(
        status.success(),
        "{clang} failed to compile {}",
        src.display()
    );
    println!("cargo:rerun-if-changed=bpf/xdp_steer.c");
    println!("cargo:rerun-if-env-changed=FASTFWD_BPF_CLANG");
    println!("cargo:rustc-link-lib=bpf");
}
