#!/usr/bin/env python3
"""Compare builds of rocsctl on one stored trace: interleaved rounds, CPU time.

Each round replays the trace once with every given rocsctl (in the order given), each run
`--repeat N` times so that start-up costs little; prints per binary the median (and every
round) of the trace's references per CPU second (user + system of the child). Keep a trace
and its machine with `tests/bench/traces.sh --keep DIR` (DIR/t.rtrace, DIR/cg.toml).

    tests/bench/replay_ab.py --trace DIR/t.rtrace --machine DIR/cg.toml OLD_ROCSCTL NEW_ROCSCTL

A binary given as ROCSCTL@TRACE replays TRACE instead (the same references in another
format version, say).
"""

import argparse
import json
import resource
import statistics
import subprocess


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--machine", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("rocsctl", nargs="+")
    args = ap.parse_args()
    rates = [[] for _ in args.rocsctl]
    for _ in range(args.rounds):
        for i, arg in enumerate(args.rocsctl):
            binary, _, trace = arg.partition("@")
            before = children_cpu()
            out = subprocess.run(
                [binary, "sim", "trace", trace or args.trace, "--machine", args.machine,
                 "--identity-map", "--json", "--repeat", str(args.repeat)],
                check=True, stdout=subprocess.PIPE,
            ).stdout
            cpu = children_cpu() - before
            rates[i].append(json.loads(out)["modes"]["baseline"]["sim_accesses"] / cpu)
    for binary, r in zip(args.rocsctl, rates):
        rounds = " ".join(f"{x / 1e6:.0f}" for x in r)
        print(f"{binary}: median {statistics.median(r) / 1e6:.1f} M references per CPU second "
              f"(rounds: {rounds})")


if __name__ == "__main__":
    main()
