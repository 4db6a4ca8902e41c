#!/bin/sh
# Trace replay speed: rocs's binary replay against pycachesim and cachegrind, and the lackey
# conversion rate, from one interleaved run (see traces.py). Needs valgrind, gzip and
# pycachesim (apt-get install valgrind gzip; pip install pycachesim).
#
#     tests/bench/traces.sh [--kib N] [--rounds R] [--keep DIR]
set -eu
cd "$(dirname "$0")/../.."
cargo build --release -q -p rocs-cli
cargo build --release -q -p rocs-sim --example trace_floor
exec python3 tests/bench/traces.py --rocsctl "$PWD/target/release/rocsctl" \
    --trace-floor "$PWD/target/release/examples/trace_floor" "$@"
