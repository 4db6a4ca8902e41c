#!/usr/bin/env python3
"""Put rows of the paper or modern suite, each run by its own command, into a page's JSON.

The modern suite at full length runs for many hours on two cores. Run a row at a time
(`rocsctl sim eval --suite modern --machines M --workloads W ... --out DIR`: every case
runs at the suite's seed, so a row reads what the whole suite's command gives it), then
put the rows into the page's JSON and render the page from it without running anything:

    tests/bench/merge_rows.py docs/evaluation/modern.json merged.json DIR1/modern.json ...
    rocsctl sim eval --suite modern --from merged.json --out docs/evaluation

BASE gives the command, the seed, the scale, the windows and the order of the rows; each
ROW file's rows replace BASE's rows of the same machine and workload. A ROW file must have
been run with BASE's options but for --machines, --workloads, --jobs and --out, or it is
refused. The targets are left to `--from`, which checks them again.
"""

import argparse
import json
import shlex
import sys

# Options that choose which rows run, or where and how fast: not what a row reads.
ROW_CHOOSERS = {"--machines", "--machine", "--workloads", "--jobs", "--out"}


def options(command):
    """The options of `command` that decide a row's figures, as (name, value) pairs."""
    words = shlex.split(command)
    kept, i = [], 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            name, _, value = word.partition("=")
            if not value and i + 1 < len(words) and not words[i + 1].startswith("--"):
                value = words[i + 1]
                i += 1
            if name not in ROW_CHOOSERS:
                kept.append((name, value))
        i += 1
    return sorted(kept)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("base", help="the page's JSON (modern.json or evaluation.json)")
    parser.add_argument("out", help="where to write the merged JSON")
    parser.add_argument("rows", nargs="+", help="JSON files of rows run on their own")
    args = parser.parse_args()

    with open(args.base) as f:
        base = json.load(f)
    index = {(r["machine"], r["workload"]): i for i, r in enumerate(base["rows"])}
    replaced = set()
    for path in args.rows:
        with open(path) as f:
            part = json.load(f)
        for key in ("seed", "scale", "windows_per_run"):
            if part[key] != base[key]:
                sys.exit(f"{path}: {key} is {part[key]}, the page's {base[key]}")
        if options(part["command"]) != options(base["command"]):
            sys.exit(
                f"{path}: run by `{part['command']}`, whose options differ from the "
                f"page's `{base['command']}` in more than the rows chosen"
            )
        for row in part["rows"]:
            key = (row["machine"], row["workload"])
            if key not in index:
                sys.exit(f"{path}: the page has no row for {key[1]} on {key[0]}")
            if key in replaced:
                sys.exit(f"{path}: {key[1]} on {key[0]} is given twice")
            base["rows"][index[key]] = row
            replaced.add(key)
            print(f"{key[0]} {key[1]}: from {path}")
    kept = [k for k in index if k not in replaced]
    for machine, workload in kept:
        print(f"{machine} {workload}: kept from {args.base}")
    with open(args.out, "w") as f:
        json.dump(base, f, indent=2, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
