#!/bin/bash
# Memory traces of real programs from Debian, for `rocsctl sim eval --suite real`.
#
#     tests/real/make-traces.sh OUT_DIR [--quick] [--skip-missing]
#
# Each program runs under `valgrind --tool=lackey --trace-mem=yes` on an input this script
# generates (deterministically: the same inputs on every machine); lackey's text goes
# through a pipe into `rocsctl sim trace convert`, so only the compact binary trace is
# written. OUT_DIR/manifest.toml lists the programs (name, trace, what) and the pairs that
# run as two tenants sharing the LLC, and says what made the traces (`made`: the Debian
# packages' versions, the kernel, the CPU). Two runs on one machine give traces with the
# same references, equal but for a few bytes (at start the dynamic loader scans a few
# bytes at the top of the stack that differ from run to run), redis-kv aside; real.md
# lists each trace's references, so that traces made elsewhere can be told apart from the
# page's. A program whose package is missing stops the script (a suite without it would
# say nothing of it, and its pages would be compared with pages that had it); with
# --skip-missing it is skipped with a message, and the manifest lists what was made.
#
# Lackey runs a program ~100-300x slower than natively, so the inputs are small: each
# trace holds tens of millions of references (a few with --quick), and the simulator
# replays it in a loop to reach a steady state.
#
# Needs: valgrind sqlite3 xz-utils bzip2 coreutils python3 redis-server (redis-tools),
# util-linux (setarch).
# ROCSCTL=path selects the rocsctl binary (default: a release build of this tree).
set -euo pipefail

usage() { echo "usage: $0 OUT_DIR [--quick] [--skip-missing]" >&2; exit 2; }
[ $# -ge 1 ] || usage
out=$1
shift
quick=0 skip_missing=0
for arg in "$@"; do
    case $arg in
        --quick) quick=1 ;;
        --skip-missing) skip_missing=1 ;;
        *) usage ;;
    esac
done

root=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${ROCSCTL:-}" ]; then
    (cd "$root" && cargo build --release -q -p rocs-cli)
    ROCSCTL=$root/target/release/rocsctl
fi
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }

mkdir -p "$out"
out=$(cd "$out" && pwd)
# A name as long on every machine (whatever TMPDIR is): sqlite3 is given a path in it.
work=$(mktemp -d /tmp/rocs-traces.XXXXXXXXXX)
trap 'rm -rf "$work"' EXIT

# Sizes: (quick, normal). Chosen so that each program's data outgrows a 512 KB L2 and
# reaches into a few MB, while its trace stays within tens of millions of references.
if [ $quick = 1 ]; then
    rows=3000 lines=20000 text_kib=64 json_items=2000 redis_requests=2000
else
    rows=40000 lines=200000 text_kib=768 json_items=30000 redis_requests=30000
fi

# Deterministic pseudo-random input: python's Mersenne Twister with a fixed seed.
python3 - "$work" "$rows" "$lines" "$text_kib" "$json_items" <<'EOF'
import json, random, sys
work, rows, lines, text_kib, items = sys.argv[1], *map(int, sys.argv[2:])
r = random.Random(2008)
words = ["".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(2, 9)))
         for _ in range(5000)]
with open(f"{work}/lines.txt", "w") as f:
    for _ in range(lines):
        f.write(" ".join(r.choice(words) for _ in range(r.randint(1, 6))) + "\n")
with open(f"{work}/text.txt", "w") as f:
    size = 0
    while size < text_kib * 1024:
        line = " ".join(r.choice(words) for _ in range(12)) + "\n"
        f.write(line)
        size += len(line)
with open(f"{work}/data.json", "w") as f:
    json.dump([{"id": i, "name": r.choice(words), "tags": r.sample(words, 3),
                "score": r.random()} for i in range(items)], f)
with open(f"{work}/tables.sql", "w") as f:
    f.write("BEGIN;\nCREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, region INT);\n")
    f.write("CREATE TABLE orders(id INTEGER PRIMARY KEY, customer INT, amount REAL, note TEXT);\n")
    for i in range(rows // 8):
        f.write(f"INSERT INTO customers VALUES({i},'{r.choice(words)}',{r.randint(0, 20)});\n")
    for i in range(rows):
        f.write(f"INSERT INTO orders VALUES({i},{r.randrange(rows // 8)},{r.random() * 100:.2f},"
                f"'{r.choice(words)} {r.choice(words)}');\n")
    f.write("CREATE INDEX orders_customer ON orders(customer);\nCOMMIT;\n")
EOF

manifest=$work/manifest.toml
# What made the traces: the same packages, kernel and CPU make the same traces. Packages
# that are not installed are left out (dpkg-query names the others and fails).
if command -v dpkg-query >/dev/null; then
    python_package=$(dpkg -S "$(readlink -f /usr/bin/python3)" 2>/dev/null | cut -d: -f1) || true
    packages=$({ dpkg-query -W -f='${Package} ${Version}, ' valgrind libc6 sqlite3 \
        libsqlite3-0 xz-utils liblzma5 bzip2 libbz2-1.0 coreutils redis-server \
        $python_package 2>/dev/null || true; } | sed 's/, $//')
else
    packages="no dpkg: package versions unknown"
fi
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
printf 'made = "%s; Linux %s %s; %s"\n\n' "$packages" "$(uname -r)" "$(uname -m)" "$cpu" > "$manifest"
made=()

# fixed COMMAND...: run COMMAND from / with address-space randomisation off and a fixed
# environment. Lackey records addresses, and the stack, the heap and the libraries move with
# randomisation, the size of the environment and the working directory; so fixed, a program
# and its input give the same trace on one machine (redis-kv aside: what it does when
# depends on its client's timing). Inputs come on standard input where the program allows
# it: a path in the arguments carries $work's random name, and bzip2 touched memory a few
# references differently for each name. Nothing may depend on the number of CPUs (sort
# --parallel=1, xz -T1), nor on the signals the caller ignores (env --default-signal):
# under nohup, which ignores SIGHUP, xz's trace had 186 references fewer.
fixed() {
    (cd / && exec setarch "$(uname -m)" -R env -i --default-signal PATH=/usr/bin:/bin \
        LANG=C.UTF-8 PYTHONHASHSEED=0 "$@")
}

# trace NAME WHAT -- COMMAND...: run COMMAND under lackey, its trace into OUT/NAME.rtrace.
trace() {
    local name=$1 what=$2
    shift 3
    echo "tracing $name: $*" >&2
    # fd 3 carries lackey's log (the trace); the program's own output is discarded.
    fixed valgrind --tool=lackey --trace-mem=yes --log-fd=3 "$@" 3>&1 >/dev/null \
        2>"$work/$name.err" | "$ROCSCTL" sim trace convert - "$out/$name.rtrace"
    printf '[[program]]\nname = "%s"\ntrace = "%s.rtrace"\nwhat = "%s"\n\n' \
        "$name" "$name" "$what" >> "$manifest"
    made+=("$name")
}

# have COMMAND PROGRAM: whether COMMAND is installed; if not, stop, or with --skip-missing
# say that PROGRAM is skipped.
have() {
    command -v "$1" >/dev/null && return 0
    if [ $skip_missing = 0 ]; then
        echo "$1 is not installed, so $2 cannot be traced: install it (the packages are listed at the top of $0), or pass --skip-missing to make the others" >&2
        exit 1
    fi
    echo "skipping $2: $1 is not installed" >&2
    return 1
}

if have sqlite3 sqlite3-join; then
    sqlite3 "$work/shop.db" < "$work/tables.sql"
    trace sqlite3-join "sqlite3 $(sqlite3 --version | cut -d' ' -f1): join and group $rows orders by customer region" -- \
        sqlite3 "$work/shop.db" "SELECT c.region, count(*), sum(o.amount) FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.region ORDER BY 3 DESC;"
fi
if have xz xz-compress; then
    trace xz-compress "xz $(xz --version | head -1 | cut -d' ' -f4) -3 compressing ${text_kib} KiB of text" -- \
        xz -3 -T1 -c < "$work/text.txt"
fi
if have bzip2 bzip2-compress; then
    trace bzip2-compress "bzip2 -9 (900 KB blocks) compressing ${text_kib} KiB of text" -- \
        bzip2 -9 -c < "$work/text.txt"
fi
if have sort sort-lines; then
    trace sort-lines "GNU sort $(sort --version | head -1 | awk '{print $NF}') of $lines lines of words" -- \
        sort -S 64M --parallel=1 < "$work/lines.txt"
fi
if have /usr/bin/python3 python-json; then
    trace python-json "python3 $(/usr/bin/python3 -c 'import platform; print(platform.python_version())') parsing and re-serialising $json_items JSON records" -- \
        /usr/bin/python3 -S -c 'import json, sys; d = json.load(sys.stdin); json.dumps(d, sort_keys=True)' < "$work/data.json"
fi
if have redis-server redis-kv && have redis-benchmark redis-kv; then
    sock=$work/redis.sock
    echo "tracing redis-kv: redis-server under redis-benchmark" >&2
    fixed valgrind --tool=lackey --trace-mem=yes --log-fd=3 \
        redis-server --port 0 --unixsocket "$sock" --save "" --appendonly no --io-threads 1 \
        3>&1 >/dev/null 2>"$work/redis.err" | "$ROCSCTL" sim trace convert - "$out/redis-kv.rtrace" &
    pipeline=$!
    for _ in $(seq 600); do [ -S "$sock" ] && break; sleep 0.5; done
    [ -S "$sock" ] || { echo "redis-server did not start: $(cat "$work/redis.err")" >&2; exit 1; }
    redis-benchmark -s "$sock" -n "$redis_requests" -r $((redis_requests / 2)) -d 256 -t set,get -q >/dev/null
    redis-cli -s "$sock" shutdown nosave >/dev/null 2>&1 || true
    wait $pipeline
    printf '[[program]]\nname = "redis-kv"\ntrace = "redis-kv.rtrace"\nwhat = "%s"\n\n' \
        "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'): $redis_requests SET and GET of 256-byte values" >> "$manifest"
    made+=(redis-kv)
fi

# Pairs: a tenant that reuses beside one that streams or sorts, as on a shared node.
pair() {
    local a=$1 b=$2
    [[ " ${made[*]} " == *" $a "* && " ${made[*]} " == *" $b "* ]] || return 0
    printf '[[pair]]\nname = "%s+%s"\ntenants = ["%s", "%s"]\n\n' "$a" "$b" "$a" "$b" >> "$manifest"
}
pair sqlite3-join bzip2-compress
pair redis-kv sort-lines
pair python-json xz-compress
pair sqlite3-join redis-kv

mv "$manifest" "$out/manifest.toml"
echo "wrote ${#made[@]} traces and $out/manifest.toml" >&2
