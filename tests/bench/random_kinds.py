#!/usr/bin/env python3
"""Sort a random page's runs that lose the oracle's gain by what their searches did.

Of the runs where the page's oracle gains at least --where-oracle-gains (5%) and rocs
confined nothing although it searched, this replays each in rocs mode with --timeline
(the page's workload, machine and seed) and counts the runs where:
- a probe made some tenant at least 5% faster than at k = 0 (in the LLC group score's
  per-process changes), and in how many of those another tenant ran more than 5% slower in
  the same window (a placement the tenant bound refuses);
- the search found the windows too noisy to tell the promise from noise;
- the cost rule ended the search early, having found no gain.
A run may be in more than one count.

    tests/bench/random_kinds.py --page docs/evaluation/random.json --rocsctl target/release/rocsctl
"""

import argparse
import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

SCORE = re.compile(r"LLC group score [0-9.]+ \((.*?)\)")
CHANGE = re.compile(r"pid \d+ ([+-][0-9.]+)%")


def timeline(rocsctl, page_dir, row):
    command = [rocsctl, "sim", "run", "--workload",
               os.path.join(page_dir, "random", row["workload"] + ".toml"),
               "--machine", row["machine"], "--seed", str(row["seed"]),
               "--mode", "rocs", "--timeline"]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{run.stderr}")
    return run.stdout


def kinds(out):
    gained = refused = False
    for line in out.splitlines():
        score = SCORE.search(line)
        if not score or " k = 0:" in line:
            continue
        changes = [float(c) for c in CHANGE.findall(score.group(1))]
        if changes and max(changes) >= 5.0:
            gained = True
            refused = refused or min(changes) < -5.0
    return {
        "a probe made a tenant >= 5% faster": gained,
        "  and another > 5% slower in that window": refused,
        "too noisy to search": "too noisy to search" in out,
        "ended early by the cost rule, no gain found": "ended early, having found no gain" in out,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--page", required=True, help="a random page's JSON")
    parser.add_argument("--rocsctl", required=True, help="the rocsctl to replay with")
    parser.add_argument("--where-oracle-gains", type=float, default=0.05)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    page = json.load(open(args.page))
    page_dir = os.path.dirname(os.path.abspath(args.page))
    rows = [r for r in page["rows"]
            if r["oracle_speedup"] >= 1.0 + args.where_oracle_gains
            and r["pages_confined"] == 0 and r["search_windows"] > 0]
    with ThreadPoolExecutor(args.jobs) as pool:
        found = list(pool.map(lambda r: kinds(timeline(args.rocsctl, page_dir, r)), rows))
    print(f"{len(rows)} runs where the oracle gains {args.where_oracle_gains:.0%} "
          f"and rocs searched but confined nothing "
          f"({sum(1 for r in rows if r['tenants'] == 1)} of them alone)")
    for kind in found[0] if found else []:
        print(f"{sum(1 for f in found if f[kind]):4d}  {kind}")


if __name__ == "__main__":
    main()
