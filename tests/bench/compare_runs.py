#!/usr/bin/env python3
"""Compare two builds' runs of the random campaign, as tests/bench/random_seeds.py --runs
wrote them (one file a build), run by run.

A controller change moves some runs up and others down, and a multi-tenant run moves with
the timing of its tenants' phases: the summary lines of random_seeds.py say how far the
distribution moved, this says which runs moved, by how much, and how the moves split by
the number of tenants. Per seed offset, for the old file and then the new: the geometric
mean, the runs below 0.99 of off and the worst, the shared runs whose slowest tenant ran
below 0.95 of its baseline (issue 12's tenant bound), and where the page's oracle gains 5%
the median and the 90th-percentile-worst of each run's speedup over it (as random_seeds.py
computes them). Then the runs that moved by more than --beyond, up and down, by tenants,
and the --show largest moves each way.

--cost-scale window judges against the page's oracle at the window's costs (its
`rows_at_window_costs`), as random_seeds.py --cost-scale window ran them; otherwise
against the page's oracle at the machine's costs (`rows`).

    tests/bench/random_seeds.py --cost-scale window --offset 0 --runs old.tsv OLD_ROCSCTL
    tests/bench/random_seeds.py --cost-scale window --offset 0 --runs new.tsv NEW_ROCSCTL
    tests/bench/compare_runs.py --cost-scale window old.tsv new.tsv
"""

import argparse
import json
import math
import signal
import statistics

# Read through `head`: a closed pipe ends the listing quietly.
signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def read_runs(path):
    """{(offset, workload): (speedup, slowest tenant or None)} of one build's runs file."""
    runs = {}
    builds = set()
    try:
        lines = open(path).readlines()
    except OSError as e:
        raise SystemExit(f"{path}: {e.strerror}")
    for n, line in enumerate(lines, 1):
        fields = line.rstrip("\n").split("\t")
        if len(fields) != 6:
            raise SystemExit(f"{path}:{n}: expected 6 tab-separated fields (offset, "
                             f"build, workload, machine, speedup, slowest tenant), "
                             f"found {len(fields)}: is it a random_seeds.py --runs file?")
        offset, build, workload, _, speedup, tenant = fields
        builds.add(build)
        try:
            runs[(int(offset), workload)] = (float(speedup),
                                             float(tenant) if tenant else None)
        except ValueError as e:
            raise SystemExit(f"{path}:{n}: {e}")
    if len(builds) > 1:
        raise SystemExit(f"{path}: runs of {len(builds)} builds ({', '.join(sorted(builds))}); "
                         f"give one file a build (random_seeds.py --runs with one rocsctl)")
    return runs


def summary(runs, oracle):
    """One build's figures over `runs` ({workload: (speedup, tenant)})."""
    got = [s for s, _ in runs.values()]
    tenants = [t for _, t in runs.values() if t is not None]
    of_oracle = sorted(s / oracle[w] for w, (s, _) in runs.items() if oracle[w] >= 1.05)
    return {
        "geomean": f"{math.exp(sum(map(math.log, got)) / len(got)):.4f}",
        "below 0.99": str(sum(s < 0.99 for s in got)),
        "worst": f"{min(got):.3f}",
        "tenant bound": str(sum(t < 0.95 for t in tenants)),
        "median of oracle": f"{statistics.median(of_oracle):.4f}" if of_oracle else "-",
        "90th-pct-worst": f"{of_oracle[len(of_oracle) // 10]:.4f}" if of_oracle else "-",
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--page", default="docs/evaluation/random.json")
    ap.add_argument("--cost-scale", choices=["machine", "window"], default="machine",
                    help="whose oracle the fractions are of (see above)")
    ap.add_argument("--beyond", type=float, default=0.001, metavar="F",
                    help="a run moved if its speedup changed by more than this fraction")
    ap.add_argument("--show", type=int, default=10, metavar="N",
                    help="the N largest moves each way")
    ap.add_argument("old")
    ap.add_argument("new")
    args = ap.parse_args()
    try:
        page = json.load(open(args.page))
    except (OSError, ValueError) as e:
        raise SystemExit(f"{args.page}: {e}")
    rows = page["rows_at_window_costs" if args.cost_scale == "window" else "rows"]
    oracle = {r["workload"]: r["oracle_speedup"] for r in rows}
    tenants = {r["workload"]: r["tenants"] for r in rows}
    old, new = read_runs(args.old), read_runs(args.new)
    common = sorted(set(old) & set(new))
    if not common:
        raise SystemExit(f"{args.old} and {args.new} share no run (offset and workload)")
    unknown = sorted({w for _, w in common if w not in oracle})
    if unknown:
        raise SystemExit(f"{args.page} has no run of {unknown[0]} (and {len(unknown) - 1} "
                         f"more): give the page the runs were made from (--page)")
    for offset in sorted({o for o, _ in common}):
        keys = [k for k in common if k[0] == offset]
        a = summary({w: old[(o, w)] for o, w in keys}, oracle)
        b = summary({w: new[(o, w)] for o, w in keys}, oracle)
        moves = ", ".join(f"{name} {a[name]} -> {b[name]}" for name in a)
        print(f"seed +{offset}, {len(keys)} runs: {moves}")
    ratio = {k: new[k][0] / old[k][0] for k in common}
    up = [k for k in common if ratio[k] > 1 + args.beyond]
    down = [k for k in common if ratio[k] < 1 - args.beyond]
    print(f"{len(common)} runs in both: {len(up)} up, {len(down)} down "
          f"(by more than {args.beyond:.1%})")
    for n in sorted({tenants[w] for _, w in common}):
        these = [k for k in common if tenants[k[1]] == n]
        geomean = math.exp(sum(math.log(ratio[k]) for k in these) / len(these))
        print(f"  {n} tenant{'s' if n > 1 else ''}: {len(these)} runs, "
              f"{sum(k in up for k in these)} up, {sum(k in down for k in these)} down, "
              f"geomean of new / old {geomean:.4f}")
    for name, moved in (("down", sorted(down, key=ratio.get)),
                        ("up", sorted(up, key=ratio.get, reverse=True))):
        for offset, w in moved[:args.show]:
            print(f"  {name:4} {ratio[(offset, w)]:.3f}  seed +{offset} {w} "
                  f"({tenants[w]} tenants): {old[(offset, w)][0]:.3f} -> "
                  f"{new[(offset, w)][0]:.3f}")


if __name__ == "__main__":
    main()
