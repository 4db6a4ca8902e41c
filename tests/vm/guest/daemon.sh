#!/bin/sh
# The daemon half of the VM suite: the real rocsd (--platform linux, samples and counters
# from the replay PMU, the kernel shim loaded) finds our own target programs by policy,
# profiles, searches and moves their pages, and every placement is checked independently
# with pagemap (rocstarget colours). Run by the guest's init after shimtest; one line per
# scenario, "ok - daemon-NAME" or "not ok - daemon-NAME: why", lines starting with "# " are
# information. Needs /rocs_shim.ko, /rocsd, /rocsctl, /rocstarget, /rocsheap (the same
# program under another name) and /vm/ (rocsd.toml, policy.d/, target.replay).

COLOURS=16
MASK=3 # pollute colours 0 and 1, as rocsd.toml's [knobs] say
SOCK=/run/rocs/rocsd.sock
CTL=/rocsctl # its default socket is rocsd.toml's
LOG=/tmp/rocsd.log
HOT_FIRST=$((0x100000000 / 4096)) # the first of the 32 pages mapped from /dev/zero
REUSE=0x100100000                  # the region the replay script says is reused

echo "ROCS-DAEMON-PLAN 16"
started=$(date +%s)
FAILED=0
ok() { echo "ok - daemon-$1"; }
not_ok() {
    echo "not ok - daemon-$1: $2"
    FAILED=1
}

# until_ok SECONDS CMD...: run CMD until it succeeds (0.1 s apart); false once SECONDS have
# passed (by the clock: one CMD may itself take seconds).
until_ok() {
    deadline=$(($(date +%s) + $1))
    shift
    while ! "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        usleep 100000
    done
}

# rocsd_start [CONFIG]: rocsd on /vm/rocsd.toml, or CONFIG.
rocsd_start() {
    rm -f "$SOCK"
    conf=${1:-/vm/rocsd.toml}
    (cd /vm && exec /rocsd --platform linux --config "$conf" >>"$LOG" 2>&1) &
    ROCSD=$!
    until_ok 20 test -S "$SOCK"
}

# rocsd_stop: SIGTERM, and its exit status.
rocsd_stop() {
    kill -TERM "$ROCSD" 2>/dev/null
    wait "$ROCSD"
}

# A target program started in the background: TARGET (its pid) and its output in $1.
target_start() {
    out=$1
    shift
    "$@" >"$out" 2>&1 &
    TARGET=$!
    until_ok 20 grep -q ready "$out"
}

state_of() { $CTL targets | awk -v p="$1" '$1 == p { print $4 }'; }
confined_of() { $CTL targets | awk -v p="$1" '$1 == p { print $8 }'; }
is_state() { [ "$(state_of "$1")" = "$2" ]; }
no_confined() { [ "$(confined_of "$1")" = 0 ]; }
listed() { $CTL targets | awk -v p="$1" '$1 == p { f = 1 } END { exit !f }'; }
history_has() { $CTL history "$1" | grep -q "$2"; }
# logged SECONDS PATTERN: wait for rocsd's log to say it (the waits watch the log: a rocsctl
# call costs seconds in a TCG guest; the checks then ask rocsctl once).
logged() { until_ok "$1" grep -q "$2" "$LOG"; }

# stack_json PID: the whole stack as JSON in /tmp/stack.json.
stack_json() { $CTL stack "$1" --limit 0 --json >/tmp/stack.json; }
# The pages (decimal page numbers) of /tmp/stack.json: the confined top k, the entries, the
# pages confined by name.
stack_k() { sed -n 's/^  "k": \([0-9]*\),*$/\1/p' /tmp/stack.json; }
stack_entries() { sed -n 's/^ *"page": \([0-9]*\),*$/\1/p' /tmp/stack.json; }
stack_top() { stack_entries | head -n "$(stack_k)"; }
stack_named() {
    awk '/"explicit": \[\]/ { next } /"explicit": \[/ { on = 1; next }
         on && /\]/ { on = 0 } on { gsub(/[ ,]/, ""); print }' /tmp/stack.json
}
# colours PID < pages: "pages N pollute P other O absent A" from pagemap.
colours() { /rocstarget colours "$1" $COLOURS $MASK; }
field() { echo "$1" | awk -v k="$2" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }'; }
# all_pollute "$(colours ...)": every page present and on a pollute colour.
all_pollute() { [ "$(field "$1" pages)" -gt 0 ] && [ "$(field "$1" pollute)" = "$(field "$1" pages)" ]; }
none_pollute() { [ "$(field "$1" pages)" -gt 0 ] && [ "$(field "$1" pollute)" = 0 ]; }
# Free frames in kB, the per-cpu free lists too: MemFree leaves those out, and they hold a few
# MB that come and go with whoever freed last (CI saw 4.8 MB of drift in MemFree alone).
free_kb() {
    awk '/^ *pages free/ { n += $3 } /^ *count:/ { n += $2 } END { print n * 4 }' /proc/zoneinfo
}
stash_frames() { /rocstarget stats | awk '{ print $2 }'; }
# The guest's files live in RAM (initramfs): rocsd's log grows as it runs and takes memory
# that is not held by anyone; count it with the free memory.
files_kb() { du -sk /tmp | cut -f1; }
# rocsd's own heap grows as it searches (1-4 MB seen under load): memory it holds, not lost.
rocsd_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$ROCSD/status"; }
stash_settled() { # the background fill is done: the same size twice, 0.5 s apart
    a=$(stash_frames)
    usleep 500000
    [ "$a" -gt 0 ] && [ "$a" = "$(stash_frames)" ]
}

mkdir -p /run/rocs /etc
echo "root:x:0:0:root:/:/bin/sh" >/etc/passwd
echo "member:x:1000:1000:rocs reader:/:/bin/sh" >>/etc/passwd
printf 'root:x:0:\nrocs:x:1000:member\n' >/etc/group
insmod /rocs_shim.ko
# The guest has two NUMA nodes, and automatic NUMA balancing would move the target's pages
# to the node of the thread touching them, onto frames of any colour (kmod-shim/README.md,
# Limits): off, as on any machine where rocs confines pages.
echo 0 >/proc/sys/kernel/numa_balancing

# --- 1. found by policy, profiled, searched, confined; restored; no write lost -----------
rocsd_start || not_ok start "rocsd did not serve $SOCK; its log: $(tail -n 5 $LOG)"
target_start /tmp/t1.out /rocstarget run
T1=$TARGET
logged 20 "attached under policy 10-target pid=$T1 "
if $CTL targets | grep -q "^ *$T1  rocstarget *10-target"; then
    ok found
else
    not_ok found "pid $T1 not attached under policy 10-target: $($CTL targets)"
fi
logged 30 "profile: .* samples over .* pid=$T1 "
if history_has "$T1" "samples over" && stack_json "$T1" && [ "$(stack_entries | wc -l)" = 512 ]; then
    ok profiled
else
    not_ok profiled "no profile of the 512 sampled pages: $($CTL history "$T1" | tail -n 3)"
fi
logged 60 "search -> steady: .* pid=$T1 "
if is_state "$T1" steady && history_has "$T1" "chose k = 64 "; then
    ok searched
else
    not_ok searched "state $(state_of "$T1"): $($CTL history "$T1" | tail -n 4)"
fi
stack_json "$T1"
stack_top >/tmp/t1.pages
placed=$(colours "$T1" </tmp/t1.pages)
echo "# search: k = $(stack_k), $placed"
if [ "$(stack_k)" = 64 ] && all_pollute "$placed"; then
    ok confined
else
    not_ok confined "k = $(stack_k), pagemap of the confined pages: $placed"
fi
$CTL restore "$T1" >/dev/null
logged 20 "every confined page is back pid=$T1 "
placed=$(colours "$T1" </tmp/t1.pages)
if no_confined "$T1" && none_pollute "$placed"; then
    ok restore
else
    not_ok restore "confined $(confined_of "$T1"), pagemap of the pages confined before: $placed"
fi
kill -TERM "$T1"
wait "$T1"
rc=$?
if [ "$rc" = 0 ] && grep -q " 0 lost" /tmp/t1.out; then
    ok writes-kept
else
    not_ok writes-kept "the target exited $rc: $(cat /tmp/t1.out)"
fi

# --- 2. confinement by name: a policy's mappings, a range, the top of the stack; SIGTERM --
target_start /tmp/t2.out /rocsheap run --heap 64
T2=$TARGET
heap=$(sed -n 's/^rocstarget: heap 0x\([0-9a-f]*\)-.*/\1/p' /tmp/t2.out)
named_has_heap() {
    stack_json "$T2"
    first=$(printf '%d' "0x$heap")
    [ "$(stack_named | awk -v a=$((first / 4096)) '$1 >= a && $1 < a + 64' | wc -l)" = 64 ] &&
        [ "$(stack_named | awk -v a=$HOT_FIRST '$1 >= a && $1 < a + 32' | wc -l)" = 32 ]
}
logged 20 "policy mappings .* pid=$T2"
until_ok 10 named_has_heap
placed=$(stack_named | colours "$T2")
if named_has_heap && all_pollute "$placed"; then
    ok confine-policy
else
    not_ok confine-policy "heap at 0x$heap; pages confined by name: $(stack_named | wc -l), $placed"
fi
logged 60 "search -> steady: .* pid=$T2 "
stack_json "$T2"
hot_ranked=$(stack_entries | awk -v a=$HOT_FIRST '$1 >= a && $1 < a + 32' | wc -l)
placed=$( (stack_top; stack_named) | colours "$T2")
if is_state "$T2" steady && [ "$hot_ranked" = 0 ] && [ "$(stack_entries | wc -l)" = 480 ] &&
    all_pollute "$placed"; then
    ok confine-outside-search
else
    not_ok confine-outside-search "state $(state_of "$T2"), $(stack_entries | wc -l) pages ranked ($hot_ranked named ones), $placed"
fi
reply=$($CTL confine "$T2" --range $REUSE-0x100110000)
stack_json "$T2"
placed=$(seq $((REUSE / 4096)) $((REUSE / 4096 + 15)) | colours "$T2")
if echo "$reply" | grep -q "16 of 16 named pages confined" && all_pollute "$placed" &&
    [ "$(stack_named | awk -v a=$((REUSE / 4096)) '$1 >= a && $1 < a + 16' | wc -l)" = 16 ]; then
    ok confine-range
else
    not_ok confine-range "$reply; $placed"
fi
stack_entries | head -n 8 >/tmp/t2.top
reply=$($CTL confine "$T2" --top 8)
placed=$(colours "$T2" </tmp/t2.top)
if echo "$reply" | grep -q "8 of 8 named pages confined" && all_pollute "$placed"; then
    ok confine-top
else
    not_ok confine-top "$reply; $placed"
fi
# Group rocs may read, not change.
as_member() { /rocstarget as 1000 1000 "$@"; }
if as_member $CTL targets | grep -q rocsheap &&
    ! as_member $CTL confine "$T2" --top 1 >/tmp/member.out 2>&1 &&
    grep -qi "permission\|root" /tmp/member.out; then
    ok confine-root-only
else
    not_ok confine-root-only "a member of group rocs: $(cat /tmp/member.out)"
fi
stack_json "$T2"
(stack_top; stack_named) >/tmp/t2.pages
rocsd_stop
rc=$?
placed=$(colours "$T2" </tmp/t2.pages)
echo "# SIGTERM: rocsd exited $rc; the $(wc -l </tmp/t2.pages) pages it had confined: $placed"
if [ "$rc" = 0 ] && none_pollute "$placed"; then
    ok sigterm-restore
else
    not_ok sigterm-restore "rocsd exited $rc; pagemap of the confined pages: $placed"
fi
kill -TERM "$T2"
wait "$T2"
rc=$?
if [ "$rc" = 0 ] && grep -q " 0 lost" /tmp/t2.out; then
    ok writes-kept-named
else
    not_ok writes-kept-named "the target exited $rc: $(cat /tmp/t2.out)"
fi

# --- 3. a target that exits mid-search: released, nothing held ---------------------------
rocsd_start
until_ok 60 stash_settled
before=$(($(free_kb) + $(stash_frames) * 4 + $(files_kb) + $(rocsd_kb)))
target_start /tmp/t3.out /rocstarget run
T3=$TARGET
# Its log says when the search starts (quicker to watch than asking rocsctl).
until_ok 30 grep -q "profile -> search: .* pid=$T3 " "$LOG"
kill -TERM "$T3"
wait "$T3"
logged 10 "the target exited pid=$T3 "
grep -q "search -> exited: the target exited pid=$T3 " "$LOG" && was=search || was=other
until_ok 60 stash_settled
after=$(($(free_kb) + $(stash_frames) * 4 + $(files_kb) + $(rocsd_kb)))
stats=$(/rocstarget stats)
echo "# exit mid-search: free + stash + files + rocsd $before -> $after kB; shim $stats"
if [ "$was" = search ] && ! listed "$T3" && kill -0 "$ROCSD" &&
    [ "$(field "$stats" pool)" = "$(field "$stats" held)" ] &&
    [ "$after" -ge $((before - 4096)) ]; then
    ok exit-mid-search
else
    not_ok exit-mid-search "it exited in the search: $was; free + stash + files + rocsd $before -> $after kB; $stats; its log: $(grep "pid=$T3 " "$LOG" | tail -n 4)"
fi
rocsd_stop

# --- 4. without the shim: said once, profiling goes on ------------------------------------
rmmod rocs_shim
: >"$LOG.noshim"
LOG=$LOG.noshim
rocsd_start
target_start /tmp/t4.out /rocstarget run
T4=$TARGET
logged 60 "dry run: stack of .* pid=$T4 "
said=$(grep -c "kernel shim cannot be used" "$LOG")
if history_has "$T4" "dry run" && history_has "$T4" "samples over" && [ "$said" = 1 ] &&
    [ "$(confined_of "$T4")" = 0 ]; then
    ok no-shim
else
    not_ok no-shim "said $said times; $($CTL history "$T4" | tail -n 3)"
fi
kill -TERM "$T4"
wait "$T4"
rocsd_stop

# --- 5. the L2 prefetchers off while profiling, through the kernel's msr driver ------------
# The guest's CPU is a Westmere (run.sh): rocsd writes MSR 0x1A4 through /dev/cpu/N/msr
# while the target profiles. TCG keeps no such register, so what is checked is the path:
# rocsd starts with the setting and says so, the kernel's driver takes its writes (and logs
# the first), the profile ends, and no ledger is left once it has.
insmod /msr.ko
sed 's/^restore_on_exit = true$/&\nprefetchers_off_while_profiling = true/' /vm/rocsd.toml \
    >/vm/rocsd-prefetch.toml
: >"$LOG.prefetch"
LOG=$LOG.prefetch
rocsd_start /vm/rocsd-prefetch.toml
target_start /tmp/t5.out /rocstarget run
T5=$TARGET
logged 60 "profile: .* samples over .* pid=$T5 "
said=$(grep -c "L2 PREFETCHERS OFF WHILE PROFILING" "$LOG")
written=$(dmesg | grep -c "Write to unrecognized MSR 0x1a4 by ")
ledger=$(ls /run/rocs/prefetchers 2>/dev/null | wc -l)
errors=$(grep -c "ERROR" "$LOG")
if [ "$said" = 1 ] && [ "$written" -ge 1 ] && [ "$ledger" = 0 ] && [ "$errors" = 0 ] &&
    history_has "$T5" "samples over"; then
    ok prefetchers-off
else
    not_ok prefetchers-off "said $said times, $written MSR writes logged, $ledger ledger files, $errors errors; $($CTL history "$T5" | tail -n 2)"
fi
kill -TERM "$T5"
wait "$T5"
rocsd_stop
echo "# the daemon scenarios took $(($(date +%s) - started)) s"
if [ "$FAILED" = 1 ]; then
    for f in /tmp/rocsd.log "$LOG"; do
        echo "# the end of rocsd's log $f:"
        tail -n 25 "$f" | sed 's/^/#   /'
    done
fi
