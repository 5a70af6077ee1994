#!/usr/bin/env bash
# The FIB benchmark: fastfwd's poptrie against prefix-trie, ip_network_table
# and DPDK's rte_fib / rte_fib6 / rte_lpm / rte_lpm6 (dpdk-test-fib), in one
# run, on the full table and the same key files. Prints a markdown report.
#
#   scripts/fib-bench.sh            # everything
#   FIB_BENCH_REPEAT=3 scripts/fib-bench.sh
#
# Installs DPDK's test tools if missing (scripts/install-deps). When run as
# root it reserves 2 MiB hugepages for DPDK for the duration of the run (and
# gives them back); otherwise DPDK runs with --no-huge.
set -euo pipefail
cd "$(dirname "$0")/.."
# The load average before this script installs or builds anything: the
# benchmark flags its ratios when the machine was not quiet at this point.
export FASTFWD_BENCH_LOAD_AT_START="${FASTFWD_BENCH_LOAD_AT_START:-$(cut -d' ' -f1-3 /proc/loadavg)}"

if ! command -v dpdk-test-fib >/dev/null; then
  scripts/install-deps
fi

# x86-64-v2 (SSE4.2, POPCNT): the same baseline Debian's DPDK build needs,
# and what .cargo/config.toml sets for every x86-64 build; a RUSTFLAGS
# given for the run replaces both.
export RUSTFLAGS="${RUSTFLAGS:--C target-cpu=x86-64-v2}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target-fib-bench}"

hp=/proc/sys/vm/nr_hugepages
old_hp=""
mounted=""
restore() {
  if [ -n "$mounted" ]; then umount /dev/hugepages-fib-bench 2>/dev/null || true; rmdir /dev/hugepages-fib-bench 2>/dev/null || true; fi
  if [ -n "$old_hp" ]; then echo "$old_hp" > "$hp" 2>/dev/null || true; fi
}
trap restore EXIT
if [ -z "${FIB_BENCH_DPDK_EAL:-}" ] && [ "$(id -u)" -eq 0 ] && [ -w "$hp" ]; then
  old_hp=$(cat "$hp")
  echo 1024 > "$hp" || true
  free_hp=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
  if [ "${free_hp:-0}" -ge 900 ]; then
    mkdir -p /dev/hugepages-fib-bench
    if mount -t hugetlbfs nodev /dev/hugepages-fib-bench; then
      mounted=1
      export FIB_BENCH_DPDK_EAL="-l 0 --no-pci -m 1800 --huge-dir /dev/hugepages-fib-bench"
    fi
  fi
fi

# Build at normal priority; measure at a raised one when allowed, so the
# scheduler preempts the measured code (ours and DPDK's alike) less often on
# a shared machine. Rust-side rates are per on-CPU second in any case.
cargo bench -p fastfwd-fib --bench fib --no-run
if [ "$(id -u)" -eq 0 ] && command -v chrt >/dev/null; then
  # DPDK charges preemptions to its lookups (TSC over 64-key bursts): run it
  # at SCHED_FIFO priority 1 (seconds per run; RT throttling leaves others 5%).
  export FIB_BENCH_DPDK_CHRT=1
fi
if [ "$(id -u)" -eq 0 ]; then
  nice -n -10 cargo bench -p fastfwd-fib --bench fib
else
  cargo bench -p fastfwd-fib --bench fib
fi
