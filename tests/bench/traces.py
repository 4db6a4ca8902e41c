#!/usr/bin/env python3
"""Trace replay speed against pycachesim and cachegrind, from one interleaved run.

A real program (Debian's gzip on a generated text) is traced once with valgrind's lackey
and converted to rocs's binary format. Then, in interleaved rounds so that a busy machine
slows every contender alike:
  - rocs:       `rocsctl sim trace T.rtrace --identity-map` on cachegrind's geometry
                (I1 and D1 32 KiB 8-way, LL 256 KiB 8-way, 64 B lines, LRU);
  - pycachesim: its fastest path, one `iterload` call over every reference of the same
                trace (instruction fetches and data, in order, held in a Python list; the
                list is built before timing) through D1 -> LL of the same geometry;
  - cachegrind: `valgrind --tool=cachegrind --cache-sim=yes` running gzip itself with the
                same geometry; its references are Ir + Dr + Dw.
Rates are references per second of CPU time (user + system) of the work itself, so that
other builds sharing the cores do not count. The medians of the rounds give the ratios.

How rocs replays it: the binary trace (version 5) holds blocks of references, each stream's
(fetches, data) in columns of its own, grouped by line; on this geometry the replay sends
each stream's group heads through its L1 apart from the other stream and only the L1 misses
through the LL in the trace's order (docs/traces.md). Each round also replays a trace of the
references that do not repeat their stream's last line alone; the full trace's references
per CPU second of that replay give the ratio rocs would reach if those repeats cost nothing.
With --trace-floor (the example `trace_floor`, which traces.sh builds), each round also
decodes the binary trace from memory: every reference (what a replay one by one decodes) and
the group heads alone (what the replay of whole blocks decodes).

    tests/bench/traces.sh [--kib N] [--rounds R] [--keep DIR]
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

GEOMETRY = {"I1": (32768, 8, 64), "D1": (32768, 8, 64), "LL": (262144, 8, 64)}


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd, **kw):
    """Run cmd; returns (its CPU seconds, its stdout)."""
    before = children_cpu()
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, **kw).stdout
    return children_cpu() - before, out


def write_input(path, kib):
    # Words from a fixed generator (no randomness): compressible, like text.
    words = [format((i * 2654435761) % (1 << 32), "x")[: 3 + i % 6] for i in range(4000)]
    out, i = [], 0
    while sum(len(l) for l in out) < kib * 1024:
        out.append(" ".join(words[(i * 7919 + j * 104729) % 4000] for j in range(9)) + "\n")
        i += 1
    with open(path, "w") as f:
        f.write("".join(out))


def machine_toml(path):
    level = lambda g: f"size = {g[0]}\nline = {g[2]}\nways = {g[1]}\npolicy = \"lru\"\n"
    with open(path, "w") as f:
        f.write(
            'name = "cachegrind-geometry"\nclock_ghz = 1.0\nbase_cpi = 1.0\n'
            'page_size = "4KiB"\nmemory = "64MiB"\nmemory_latency = 100\n'
            f"[l1i]\n{level(GEOMETRY['I1'])}[l1d]\n{level(GEOMETRY['D1'])}[llc]\n{level(GEOMETRY['LL'])}"
        )


def lackey_addresses(path):
    addrs = []
    with open(path, "rb") as f:
        for line in f:
            if line[:1] in (b"I", b" ") and b"," in line:
                addrs.append(int(line[2:].split(b",")[0], 16))
    return addrs


def write_non_repeats(lackey, out, line):
    """Write to `out` the references of `lackey` that do not repeat the line (of `line` bytes)
    their stream touched last, as the replay tells them (sizes clamped to the line); returns
    how many."""
    last = {b"I": None, b" ": None}
    kept = 0
    with open(lackey, "rb") as f, open(out, "wb") as o:
        for text in f:
            stream = text[:1]
            if stream not in last or b"," not in text:
                continue
            addr, size = text[2:].split(b",")
            addr, size = int(addr, 16), min(int(size), line)
            first, end = addr // line, (addr + size - 1) // line
            if first == last[stream] and end == first:
                continue
            last[stream] = end
            o.write(text)
            kept += 1
    return kept


def pycachesim_rate(addrs):
    from cachesim import Cache, CacheSimulator, MainMemory

    mem = MainMemory()
    size, ways, line = GEOMETRY["LL"]
    ll = Cache("LL", size // (ways * line), ways, line, "LRU")
    mem.load_to(ll)
    mem.store_from(ll)
    size, ways, line = GEOMETRY["D1"]
    d1 = Cache("D1", size // (ways * line), ways, line, "LRU", store_to=ll, load_from=ll)
    CacheSimulator(d1, mem)
    start = time.process_time()
    d1.backend.iterload(addrs, length=1)
    return len(addrs) / (time.process_time() - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rocsctl", required=True)
    ap.add_argument("--kib", type=int, default=100, help="size of gzip's input")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", metavar="DIR",
                    help="copy the binary trace and its machine to DIR (t.rtrace, cg.toml) "
                         "for tests/bench/replay_ab.py and sim_digest")
    ap.add_argument("--trace-floor", metavar="BIN",
                    help="the trace_floor example: also measure decoding alone each round")
    args = ap.parse_args()
    for tool in ("valgrind", "gzip"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is not installed (apt-get install {tool})")
    try:
        import cachesim  # noqa: F401
    except ImportError:
        sys.exit("pycachesim is not installed (pip install pycachesim)")

    work = tempfile.mkdtemp(prefix="rocs-trace-bench-")
    try:
        inp, lackey, rtrace, machine = (
            os.path.join(work, n) for n in ("input.txt", "t.lackey", "t.rtrace", "cg.toml")
        )
        write_input(inp, args.kib)
        machine_toml(machine)
        gzip = ["gzip", "-c", "-6", inp]
        print(f"tracing {' '.join(gzip)} with lackey ...", file=sys.stderr)
        subprocess.run(
            ["valgrind", "--tool=lackey", "--trace-mem=yes", f"--log-file={lackey}", *gzip],
            check=True, stdout=subprocess.DEVNULL,
        )
        lines = sum(1 for _ in open(lackey, "rb"))
        convert_cpu, _ = timed([args.rocsctl, "sim", "trace", "convert", lackey, rtrace])
        text_bytes, bin_bytes = os.path.getsize(lackey), os.path.getsize(rtrace)
        addrs = lackey_addresses(lackey)
        non_repeats_lackey = os.path.join(work, "non-repeats.lackey")
        non_repeats_rtrace = os.path.join(work, "non-repeats.rtrace")
        non_repeats = write_non_repeats(lackey, non_repeats_lackey, GEOMETRY["D1"][2])
        subprocess.run([args.rocsctl, "sim", "trace", "convert", non_repeats_lackey,
                        non_repeats_rtrace], check=True, stdout=subprocess.DEVNULL)
        os.remove(lackey)
        os.remove(non_repeats_lackey)
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            shutil.copy(rtrace, args.keep)
            shutil.copy(machine, args.keep)

        rocs, py, cg, free_repeats, decode, decode_check = [], [], [], [], [], []
        for r in range(args.rounds):
            cpu, out = timed(
                [args.rocsctl, "sim", "trace", rtrace, "--machine", machine,
                 "--identity-map", "--json"]
            )
            refs = json.loads(out)["modes"]["baseline"]["sim_accesses"]
            rocs.append(refs / cpu)
            cpu, _ = timed(
                [args.rocsctl, "sim", "trace", non_repeats_rtrace, "--machine", machine,
                 "--identity-map", "--json"]
            )
            free_repeats.append(refs / cpu)
            py.append(pycachesim_rate(addrs))
            if args.trace_floor:
                out = subprocess.run([args.trace_floor, rtrace, str(GEOMETRY["D1"][2]), "1"],
                                     check=True, stdout=subprocess.PIPE, text=True).stdout
                rates = [float(l.split(": ")[1].split()[0]) * 1e6 for l in out.splitlines()[1:3]]
                decode.append(rates[0])
                decode_check.append(rates[1])
            cg_out = os.path.join(work, "cachegrind.out")
            spec = lambda g: ",".join(map(str, g))
            cpu, _ = timed(
                ["valgrind", "--tool=cachegrind", "--cache-sim=yes",
                 *(f"--{k}={spec(v)}" for k, v in GEOMETRY.items()),
                 f"--cachegrind-out-file={cg_out}", *gzip],
                stderr=subprocess.DEVNULL,
            )
            text = open(cg_out).read().splitlines()
            events = next(l for l in text if l.startswith("events:")).split()[1:]
            summary = next(l for l in text if l.startswith("summary:")).split()[1:]
            counts = dict(zip(events, map(int, summary)))
            cg.append((counts["Ir"] + counts["Dr"] + counts["Dw"]) / cpu)
            print(
                f"round {r + 1}: rocs {rocs[-1] / 1e6:.1f}, pycachesim {py[-1] / 1e6:.1f}, "
                f"cachegrind {cg[-1] / 1e6:.1f} M references per CPU second",
                file=sys.stderr,
            )
        m = statistics.median
        print(f"trace: gzip on {args.kib} KiB, {len(addrs)} references, {lines} lackey lines")
        print(f"binary trace: {bin_bytes / len(addrs):.2f} bytes per reference "
              f"(lackey text {text_bytes / lines:.1f} bytes per line)")
        print(f"lackey -> binary conversion (reader and writer): {lines / convert_cpu / 1e6:.1f} M lines/s")
        print(f"rocs binary replay {m(rocs) / 1e6:.1f} M/s, pycachesim iterload {m(py) / 1e6:.1f} M/s, "
              f"cachegrind {m(cg) / 1e6:.1f} M/s (medians of {args.rounds} rounds, CPU time)")
        print(f"rocs / pycachesim = {m(rocs) / m(py):.2f} (target >= 5)")
        print(f"rocs / cachegrind = {m(rocs) / m(cg):.2f} (target >= 1)")
        print(f"bound: the {non_repeats} references that are not repeats replay alone at "
              f"{m(free_repeats) / 1e6:.1f} M of the trace's references per CPU second: "
              f"{m(free_repeats) / m(py):.2f} x pycachesim if repeats cost nothing")
        print("rocs / pycachesim by round: "
              + ", ".join(f"{a / b:.2f}" for a, b in zip(rocs, py)))
        if decode:
            print(f"floor: decoding every reference of the binary trace {m(decode) / 1e6:.1f} M/s "
                  f"({m(decode) / m(py):.2f} x pycachesim), its group heads alone "
                  f"{m(decode_check) / 1e6:.1f} M/s ({m(decode_check) / m(py):.2f} x)")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
