#!/usr/bin/env python3
"""A real program's runs with rocs over layouts of its data in their pages.

A traced program's stack starts with its environment, so the addresses it touches, and
which of its data share a page, move with every byte the environment gains: one layout
is one draw. This traces PROGRAM (gzip, sort or bzip2, on the input the real-program test
makes) under valgrind's lackey with its environment padded by each of --pads bytes (a
variable PAD), as the test runs it otherwise (only PATH and LC_ALL, in a directory of the
test's name length), and replays each trace three times on --machine with rocs, at the
machine's costs and at the costs its window stands for (`--cost-scale`, as real.md and
random.md judge), with each rocsctl given. It prints one line per layout and build, then
per build and costs the runs below 0.99 of off and the worst.

    tests/bench/real_layouts.py --program bzip2 target/release/rocsctl

Traces are kept in --dir (made with the first rocsctl; about 47 MB each for bzip2) and
reused when the script runs again.
"""

import argparse
import math
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

ARGS = {"gzip": ["-c", "-6", "input.txt"], "sort": ["input.txt"],
        "bzip2": ["-c", "-9", "input.txt"]}
ROCSD_WINDOW_SECONDS = 0.1
WINDOWS = 200
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def text(nbytes):
    """crates/rocs-sim/tests/sim/real_programs.rs's text(): lines of words from a small
    vocabulary in a fixed pseudo-random order."""
    mask = (1 << 64) - 1
    state = 0x2545_f491_4f6c_dd1d

    def nxt():
        nonlocal state
        state ^= (state << 13) & mask
        state ^= state >> 7
        state ^= (state << 17) & mask
        return state

    words = ["".join(chr(ord("a") + nxt() % 16) for _ in range(2 + nxt() % 8))
             for _ in range(2000)]
    lines, size = [], 0
    while size < nbytes:
        line = "".join(words[nxt() % len(words)] + " " for _ in range(12)) + "\n"
        lines.append(line)
        size += len(line)
    return "".join(lines)


def clock_ghz(machine):
    with open(os.path.join(REPO, "crates", "rocs-sim", "machines", machine + ".toml")) as f:
        return float(re.search(r"^clock_ghz\s*=\s*([0-9.]+)", f.read(), re.M).group(1))


def window_cost_scale(machine, baseline_cycles):
    """closed_loop::window_cost_scale: the window's cycles over rocsd's 100 ms, to two
    significant digits, at most 1."""
    ratio = min((baseline_cycles // WINDOWS) / (clock_ghz(machine) * 1e9 * ROCSD_WINDOW_SECONDS), 1.0)
    digits = 10 ** (1 - math.floor(math.log10(ratio)))
    return round(ratio * digits) / digits


def record(binary, directory, program, pad):
    trace = os.path.join(directory, f"{program}-{pad}.rtrace")
    if not os.path.exists(trace):
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "PAD": "x" * pad}
        subprocess.run([binary, "sim", "trace", "--record", "--save", trace, "--mode",
                        "baseline", "--", program, *ARGS[program]],
                       cwd=directory, env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return trace


def replay(binary, trace, machine, scale=None):
    """rocs's speedup and the baseline's cycles."""
    command = [binary, "sim", "trace", trace, "--machine", machine, "--mode", "rocs",
               "--repeat", "3"]
    if scale is not None:
        command += ["--cost-scale", repr(scale)]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    cycles = int(re.search(r"baseline: \d+ instructions, (\d+) cycles", out).group(1))
    return float(re.search(r"^speedup (\S+)", out, re.M).group(1)), cycles


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rocsctl", nargs="+")
    parser.add_argument("--program", choices=sorted(ARGS), default="bzip2")
    parser.add_argument("--pads", type=int, nargs="+", default=list(range(0, 6001, 500)))
    parser.add_argument("--machine", default="ppc970fx")
    parser.add_argument("--dir", default="/tmp/rocs-real-programs-layouts")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    # The programs are traced in --dir: a build named by a relative path is found from here.
    args.rocsctl = [os.path.abspath(b) if os.sep in b else b for b in args.rocsctl]
    os.makedirs(args.dir, exist_ok=True)
    with open(os.path.join(args.dir, "input.txt"), "w") as f:
        f.write(text(40_000))
    traces = {pad: record(args.rocsctl[0], args.dir, args.program, pad) for pad in args.pads}

    def both(item):
        binary, pad = item
        at_machine, cycles = replay(binary, traces[pad], args.machine)
        scale = window_cost_scale(args.machine, cycles)
        at_window, _ = replay(binary, traces[pad], args.machine, scale)
        return binary, pad, at_machine, at_window, scale

    items = [(b, pad) for b in args.rocsctl for pad in args.pads]
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(both, items))
    print("rocsctl\tpad\tmachine's costs\twindow's costs\tcost scale")
    for binary, pad, at_machine, at_window, scale in rows:
        print(f"{binary}\t{pad}\t{at_machine:.4f}\t{at_window:.4f}\t{scale}")
    for binary in args.rocsctl:
        mine = [r for r in rows if r[0] == binary]
        for name, i in (("machine's", 2), ("window's", 3)):
            below = [r for r in mine if r[i] < 0.99]
            worst = min(mine, key=lambda r: r[i])
            print(f"{binary} {args.program} on {args.machine} at the {name} costs: "
                  f"{len(below)} of {len(mine)} layouts below 0.99, worst {worst[i]:.4f} "
                  f"(pad {worst[1]})")


if __name__ == "__main__":
    main()
