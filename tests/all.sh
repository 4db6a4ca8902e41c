#!/usr/bin/env bash
# Every test rocs has, from a clean checkout: formatting, lints, the workspace's unit and
# integration tests (closed loop in simulation, CLI and daemon end to end, real perf
# plumbing), and the kernel module inside a real Linux kernel under qemu (tests/vm/).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# System packages some tests drive for real (valgrind/cachegrind for the simulator's
# fidelity test, perf for the perf.data import test, chromium to look at an SVG).
# Installed only when missing.
need=()
command -v valgrind >/dev/null || need+=(valgrind)
command -v perf >/dev/null || need+=(linux-perf)
command -v xz >/dev/null || need+=(xz-utils)
command -v systemd-analyze >/dev/null || need+=(systemd)  # rocsd.service verify (daemon/tests/daemon/service.rs)
command -v chromium >/dev/null || need+=(chromium)  # the profile SVG in a real browser (rocs-cli/tests/cli/client_daemon.rs)
# The kernel's Intel model numbers, which rocs-linux/tests/linux/prefetch_models.rs checks ours by.
ls /usr/src/linux-headers-*/arch/x86/include/asm/intel-family.h >/dev/null 2>&1 ||
    need+=(linux-headers-amd64)
if [ ${#need[@]} -gt 0 ]; then
    step "installing ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# A real Prometheus scrapes rocsd and promtool checks a scrape (daemon/tests/daemon/prometheus.rs;
# it skips, saying why, when it is missing and this user is not root). Without recommends:
# they would bring node-exporter and its collectors.
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        step "installing prometheus"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends prometheus >/dev/null
    else
        echo "not root: prometheus cannot be installed; daemon/tests/daemon/prometheus.rs will skip"
    fi
fi

step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
step "cargo test"
cargo test --workspace --locked
step "deployment manifests (tests/manifests.sh)" && tests/manifests.sh

if [ -x tests/vm/run.sh ]; then
    step "kernel module in a real kernel (tests/vm/run.sh)"
    tests/vm/run.sh
fi
step "all tests passed"
