#!/usr/bin/env python3
"""Compare builds of rocsctl on the random campaign's workloads under other run seeds.

A multi-tenant run's outcome turns on the timing of its tenants' phases, so one campaign
cannot tell a controller change from noise: the same build, with every run's seed moved by
one, went from 105 to 98 runs below 0.99 and from a worst run of 0.879 to one of 0.527.
This replays every workload of a random page (its JSON: the TOMLs beside it, the machine,
the run's seed) in rocs mode with each given rocsctl, the seed moved by each --offset, and
prints per build and offset: runs below 0.99 of off, the worst run, the median and the
geometric mean. --where-oracle-gains 0.05 keeps only the runs where the page's oracle gains
5%, to see what a change costs in gains. --promises compares, over the runs below 0.99, the
largest promise of their searches for a target's own gain (from `--timeline`) with the
page's oracle gain. --endings counts, over the runs below 0.95 of the page's oracle where
it gains 5%, how their profiles and searches ended. --losses also says where the runs
below 0.99 lose:
summed over each such run's slowest tenant, its cycles over its baseline's less one, split
into what page migrations and sampling cost it and the rest (probes at worse placements,
the prefetcher off while profiling, other tenants' placements). --runs FILE also writes
every run's speedup (offset, build, workload, machine, speedup, and in a shared run its
slowest tenant's; tab-separated), to see which runs two builds part on
(tests/bench/compare_runs.py compares two such files run by run). Shared runs also
count those whose slowest tenant ran below 0.95 of its baseline (issue 12's tenant bound).
Each line also gives, where the page's oracle gains 5%, the median and the
90th-percentile-worst of each run's speedup over the page's oracle speedup (issue 12's
fraction of the oracle, judged against the page's oracle runs, not made again).

--cost-scale F runs every workload with `rocsctl sim run --cost-scale F`: its machine's
fixed costs of rocs, a page migration and a sample, F times their own, and below 1 rocs
sampling as rocsd does a window 1/F times as long. A campaign's run lasts 200 controller
windows of a few hundred thousand cycles, where rocsd's window on Linux is 100 ms
(hundreds of millions of cycles): a run stands for a program of about 20 seconds whose
every fixed cost is paid hundreds of times over in proportion. F = 0.1 or 0.01 asks what
the campaign's losses would be if those costs were in the proportion they have to a real
window. --cost-scale
window replays the page's runs at the window's costs (its `rows_at_window_costs`, each at
its own "cost scale", as random.md judges its targets) and judges them against the
oracle of those runs.

--length F runs every program F times as long (`sim run --scale F`): its 200 windows are
each F times as long, so they hold F times as many passes over its data, as a window of
rocsd's holds hundreds of times more; at the window's costs each run's cost scale is F
times the page's. --oracle runs the oracle again with each run (`--mode all`, the page's
--oracle-grid) and judges the fraction of the oracle against it, not the page's (needed
with --length: a longer run's oracle differs). --tenants N keeps only the runs with N
tenants.

    tests/bench/random_seeds.py --page docs/evaluation/random.json --offset 1 --offset 2 \\
        OLD_ROCSCTL NEW_ROCSCTL
"""

import argparse
import json
import math
import os
import re
import statistics
import subprocess
from concurrent.futures import ThreadPoolExecutor

def rocs_run(binary, page_dir, row, offset, output, oracle_grid=None):
    """The standard output of the run in rocs mode at its costs ("_scale") and length
    ("_length"), with `output` (`--json` or `--timeline`); with `oracle_grid`, the oracle's
    runs too."""
    mode = ["--mode", "rocs"] if oracle_grid is None else [
        "--mode", "all", "--oracle-grid", str(oracle_grid)]
    command = [binary, "sim", "run", "--workload",
               os.path.join(page_dir, "random", row["workload"] + ".toml"),
               "--machine", row["machine"], "--seed", str((row["seed"] + offset) % 2**64),
               "--cost-scale", repr(row["_scale"]), "--scale", repr(row["_length"]),
               *mode, output]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{run.stderr}")
    return run.stdout


def run_rocs(binary, page_dir, row, offset, oracle_grid=None):
    """The run's `sim run --json` output."""
    return json.loads(rocs_run(binary, page_dir, row, offset, "--json", oracle_grid))


# How an attempt ended, from `--timeline`'s transitions out of Profile or Search: the
# first phrase of the reason that names it, most specific first.
ENDINGS = (
    ("started or stopped", "a sharer started or stopped"),
    ("too noisy to search", "too noisy to search"),
    ("having found no gain", "the cost rule, no gain found"),
    ("nothing to win", "the profile promised nothing"),
    ("nothing to confine", "the profile promised nothing"),
    ("the target exited", "the target exited"),
    ("missed too little", "k = 0 missed too little"),
    ("no longer run", "the targets it was for ended"),
    ("the confined pages are back", "its pages went back, observed afresh"),
    ("search chose k = 0 ", "measured, chose k = 0"),
    ("search chose k = ", "measured, chose k > 0"),
)


def attempt_endings(binary, page_dir, row, offset):
    """How each of the run's attempts ended: (state left, ending) per transition out of
    Profile (but into Search) or Search, read from `--timeline`."""
    out = rocs_run(binary, page_dir, row, offset, "--timeline")
    endings = []
    for state, to, reason in re.findall(r"state +(profile|search) -> (\w+): ([^\n]*)", out):
        if to == "search":
            continue  # a profile that led to a search did not end the attempt
        ending = next((name for phrase, name in ENDINGS if phrase in reason), "other")
        endings.append((state, ending))
    return endings


def largest_own_promise(binary, page_dir, row, offset):
    """The largest promise (% of sampled LLC loads) of the run's searches for a target's
    own gain (those at least min_promise, 2% by default), read from `--timeline`'s
    "profile -> search" reasons; None if it made no such search."""
    out = rocs_run(binary, page_dir, row, offset, "--timeline")
    promises = [float(p) for p in re.findall(
        r"profile -> search: [^\n]*?; ([0-9.]+)% of the sampled LLC loads", out)]
    own = [p for p in promises if p >= 2.0]
    return max(own) if own else None


def worst_tenant(result):
    """The speedup of a run's slowest tenant against its baseline (None if it runs alone)."""
    base, rocs = result["modes"]["baseline"], result["modes"]["rocs"]
    if len(base["processes"]) < 2:
        return None
    return min(b["cycles"] / max(r["cycles"], 1)
               for b, r in zip(base["processes"], rocs["processes"]))


def slowest_tenant_loss(result):
    """The slowest tenant's loss, split: (total, migrations, sampling), each as a share of
    its baseline cycles."""
    base, rocs = result["modes"]["baseline"], result["modes"]["rocs"]
    losses = []
    for b, r in zip(base["processes"], rocs["processes"]):
        cycles = b["cycles"] or 1
        losses.append((r["cycles"] / cycles - 1, r["migration_overhead_cycles"] / cycles,
                       r["sampling_overhead_cycles"] / cycles))
    return max(losses)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--page", default="docs/evaluation/random.json")
    ap.add_argument("--offset", type=int, action="append", help="added to each run's seed")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--where-oracle-gains", type=float, metavar="G",
                    help="only the runs whose oracle speedup on the page is at least 1 + G "
                         "(0.05: the runs the page judges by fraction of the oracle)")
    ap.add_argument("--losses", action="store_true",
                    help="also split the losses of the runs below 0.99 by cause")
    ap.add_argument("--promises", action="store_true",
                    help="also compare, over the runs below 0.99, the largest promise of "
                         "their searches for a target's own gain with the page's oracle gain")
    ap.add_argument("--endings", action="store_true",
                    help="also count, over the runs below 0.95 of the page's oracle where it "
                         "gains 5%%, how their attempts ended (profiles and searches, from "
                         "--timeline)")
    ap.add_argument("--runs", metavar="FILE", help="also write every run's speedup here")
    ap.add_argument("--cost-scale", default="1", metavar="F",
                    help="run with `sim run --cost-scale F`, or 'window': the page's runs "
                         "at the window's costs (see above)")
    ap.add_argument("--length", type=float, default=1.0, metavar="F",
                    help="run every program F times as long, its windows F times as long "
                         "(see above)")
    ap.add_argument("--oracle", action="store_true",
                    help="run the oracle again with each run and judge against it")
    ap.add_argument("--tenants", type=int, metavar="N", help="only the runs with N tenants")
    ap.add_argument("rocsctl", nargs="+")
    args = ap.parse_args()
    if not (args.length > 0 and math.isfinite(args.length)):
        raise SystemExit(f"--length {args.length}: give a factor above 0")
    page = json.load(open(args.page))
    if args.cost_scale == "window":
        if "rows_at_window_costs" not in page:
            raise SystemExit(f"{args.page} has no runs at the window's costs: make it again "
                             f"with a build of rocsctl that writes them")
        rows = page["rows_at_window_costs"]
        for r in rows:
            r["_scale"] = r["cost_scale"] * args.length
    else:
        try:
            scale = float(args.cost_scale)
        except ValueError:
            raise SystemExit(f"--cost-scale {args.cost_scale}: give a factor or 'window'")
        if not (scale > 0 and math.isfinite(scale)):
            raise SystemExit(f"--cost-scale {args.cost_scale}: give a factor above 0")
        rows = page["rows"]
        for r in rows:
            r["_scale"] = scale
    for r in rows:
        r["_length"] = args.length
    if args.tenants is not None:
        rows = [r for r in rows if r["tenants"] == args.tenants]
        if not rows:
            raise SystemExit(f"{args.page}: no run with {args.tenants} tenants")
    if args.where_oracle_gains is not None:
        rows = [r for r in rows if r["oracle_speedup"] >= 1 + args.where_oracle_gains]
        if not rows:
            raise SystemExit(f"{args.page}: no run where the oracle gains "
                             f"{args.where_oracle_gains:.0%}; give a smaller --where-oracle-gains")
    page_dir = os.path.dirname(os.path.abspath(args.page))
    runs = open(args.runs, "w") if args.runs else None
    with ThreadPoolExecutor(args.jobs) as pool:
        for offset in args.offset or [0]:
            for binary in args.rocsctl:
                grid = page["oracle_grid"] if args.oracle else None
                results = list(pool.map(
                    lambda r: run_rocs(binary, page_dir, r, offset, grid), rows))
                got = [r["speedup"] for r in results]
                if runs:
                    for row, speedup, result in zip(rows, got, results):
                        tenant = worst_tenant(result)
                        tenant = "" if tenant is None else f"{tenant:.6f}"
                        runs.write(f"{offset}\t{binary}\t{row['workload']}\t"
                                   f"{row['machine']}\t{speedup:.6f}\t{tenant}\n")
                    runs.flush()
                geomean = math.exp(sum(map(math.log, got)) / len(got))
                tenants = [t for t in map(worst_tenant, results) if t is not None]
                bound = (f", {sum(t < 0.95 for t in tenants)} of {len(tenants)} shared runs "
                         f"with a tenant below 0.95 (worst {min(tenants):.3f})") if tenants else ""
                oracles = ([r["oracle_speedup"] for r in results] if args.oracle
                           else [row["oracle_speedup"] for row in rows])
                of_oracle = sorted(s / o for row, s, o in zip(rows, got, oracles)
                                   if row["oracle_speedup"] >= 1.05)
                whose = "these runs'" if args.oracle else "the page's"
                oracle = (f"; where the page's oracle gains 5% ({len(of_oracle)} runs), "
                          f"median of {whose} oracle {statistics.median(of_oracle):.3f}, "
                          f"90th-percentile-worst {of_oracle[len(of_oracle) // 10]:.3f}"
                          ) if of_oracle else ""
                scale = f" (costs x{args.cost_scale})" if args.cost_scale != "1" else ""
                if args.length != 1:
                    scale += f" (length x{args.length:g})"
                print(f"seed +{offset} {binary}{scale}: {len(got)} runs, "
                      f"{sum(s < 0.99 for s in got)} below 0.99, worst {min(got):.3f}, "
                      f"median {statistics.median(got):.4f}, geomean {geomean:.4f}{bound}"
                      f"{oracle}", flush=True)
                if args.losses:
                    split = [slowest_tenant_loss(r) for r in results if r["speedup"] < 0.99]
                    total, moves, sampling = (sum(x[i] for x in split) for i in range(3))
                    print(f"  losses below 0.99, summed over their slowest tenants: "
                          f"{total:.3f} = migrations {moves:.3f} + sampling {sampling:.3f} "
                          f"+ the rest {total - moves - sampling:.3f}", flush=True)
                if args.endings:
                    short = [row for row, s in zip(rows, got)
                             if row["oracle_speedup"] >= 1.05
                             and s / row["oracle_speedup"] < 0.95]
                    counts = {}
                    for endings in pool.map(lambda row: attempt_endings(
                            binary, page_dir, row, offset), short):
                        for e in endings:
                            counts[e] = counts.get(e, 0) + 1
                    print(f"  attempts of the {len(short)} runs below 0.95 of the page's oracle "
                          f"where it gains 5%, by how they ended:", flush=True)
                    for (state, ending), n in sorted(counts.items(), key=lambda c: -c[1]):
                        print(f"    {n:4} {state}: {ending}", flush=True)
                if args.promises:
                    below = [row for row, r in zip(rows, results) if r["speedup"] < 0.99]
                    found = pool.map(lambda row: (row, largest_own_promise(
                        binary, page_dir, row, offset)), below)
                    pairs = [(p, row["oracle_speedup"] - 1) for row, p in found if p is not None]
                    if pairs:
                        over = sum(gain < p / 200 for p, gain in pairs)
                        print(f"  runs below 0.99 that searched for a target's own gain: "
                              f"{len(pairs)} of {len(below)}; largest promise, median "
                              f"{statistics.median(p for p, _ in pairs):.1f}%; the page's "
                              f"oracle gain, median {100 * statistics.median(g for _, g in pairs):.1f}%; "
                              f"{over} where the oracle gains less than half the promise",
                              flush=True)


if __name__ == "__main__":
    main()
