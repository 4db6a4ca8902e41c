#!/usr/bin/env bash
# rocs_shim.ko inside a real Linux kernel.
#
# Builds the module against the headers of an installed Debian kernel and a static guest
# test program, packs them with busybox into an initramfs, boots that kernel under
# qemu (TCG: KVM here cannot boot it) with two NUMA nodes, runs the suite in the guest and
# reads the results from the serial console. Then, in the same boot, the real rocsd and
# rocsctl of this tree (tests/vm/guest/daemon.sh: samples and counters from the replay PMU,
# pages moved by the shim) run against the guest's own target programs. Prints "N passed,
# M failed" and the throughput lines, and exits non-zero when a test fails, the guest does
# not finish, or the guest's kernel log holds a WARNING, BUG, oops or sanitizer report.
#
#   tests/vm/run.sh                 # everything, installs what is missing (apt-get)
#   ROCS_VM_KVER=6.12.107+deb12-amd64 tests/vm/run.sh   # another installed kernel
#                                   # (default: linux-image-amd64's, else the newest)
#   ROCS_VM_KEEP=1 tests/vm/run.sh  # keep the work directory (console log, initramfs)
#   ROCS_VM_TESTS="pollute restore" tests/vm/run.sh   # run only these guest tests
#                                   # ("daemon": the rocsd scenarios; left out otherwise)
#   ROCS_VM_BOOT_TIMEOUT=120        # seconds the kernel has to start our init (else: once more)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TIMEOUT=${ROCS_VM_TIMEOUT:-480}
say() { printf '[vm] %s\n' "$*"; }

# --- what is needed on the host ---------------------------------------------------------
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
have_kernel() { # a kernel image with its headers
    local v
    for v in $(ls /boot/vmlinuz-* 2>/dev/null | sed 's|.*/vmlinuz-||'); do
        [ -e "/lib/modules/$v/build/Makefile" ] && return 0
    done
    return 1
}
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
installed busybox-static || need+=(busybox-static)
have_kernel || need+=(linux-image-amd64 linux-headers-amd64)
command -v cpio >/dev/null || need+=(cpio)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v make >/dev/null || need+=(make)
if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# --- which kernel: the distribution's default (what linux-image-amd64 depends on) when its
# headers are there, else the newest installed image that has its headers ---------------
KVER=${ROCS_VM_KVER:-}
if [ -z "$KVER" ]; then
    v=$(dpkg-query -W -f='${Depends}' linux-image-amd64 2>/dev/null |
        sed -n 's/.*linux-image-\([^ ,]*\).*/\1/p' | head -n 1)
    if [ -n "$v" ] && [ -r "/boot/vmlinuz-$v" ] && [ -e "/lib/modules/$v/build/Makefile" ]; then
        KVER=$v
    fi
fi
if [ -z "$KVER" ]; then
    for v in $(ls /boot/vmlinuz-* | sed 's|.*/vmlinuz-||' | sort -V); do
        [ -e "/lib/modules/$v/build/Makefile" ] && KVER=$v
    done
fi
if [ -z "$KVER" ] || [ ! -r "/boot/vmlinuz-$KVER" ]; then
    echo "tests/vm: no kernel image with headers in /boot and /lib/modules; install linux-image-amd64 and linux-headers-amd64" >&2
    exit 2
fi
KDIR=/lib/modules/$KVER/build
say "kernel $KVER (headers $KDIR)"

WORK=$(mktemp -d /tmp/rocs-vm.XXXXXX)
if [ -z "${ROCS_VM_KEEP:-}" ]; then trap 'rm -rf "$WORK"' EXIT; else say "work directory $WORK"; fi

# --- build: the module (out of the source tree) and the guest program -------------------
mkdir -p "$WORK/kmod"
cp -r "$ROOT"/kmod-shim/Kbuild "$ROOT"/kmod-shim/Makefile "$ROOT"/kmod-shim/*.c \
    "$ROOT"/kmod-shim/*.h "$ROOT"/kmod-shim/include "$WORK/kmod/"
make -s -C "$WORK/kmod" KDIR="$KDIR" >"$WORK/kmod-build.log" 2>&1 || {
    cat "$WORK/kmod-build.log" >&2; echo "tests/vm: the module does not build against $KVER" >&2; exit 1; }
if grep -q "warning:" "$WORK/kmod-build.log"; then
    cat "$WORK/kmod-build.log" >&2; echo "tests/vm: the module builds with warnings" >&2; exit 1
fi

INITRD_ROOT=$WORK/initramfs
mkdir -p "$INITRD_ROOT"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,root}
for prog in shimtest rocstarget; do
    gcc -static -O2 -Wall -Wextra -Werror -pthread -I"$ROOT/kmod-shim/include/uapi" \
        -o "$INITRD_ROOT/$prog" "$ROOT/tests/vm/guest/$prog.c"
done
# The second target of daemon.sh: the same program under another command name.
cp "$INITRD_ROOT/rocstarget" "$INITRD_ROOT/rocsheap"
cp "$WORK/kmod/rocs_shim.ko" "$INITRD_ROOT/rocs_shim.ko"
# The kernel's msr driver, for rocsd's prefetcher switch (daemon.sh, scenario 5).
msr_ko=$(find "/lib/modules/$KVER/kernel/arch/x86/kernel" -name 'msr.ko*' | head -n 1)
case "$msr_ko" in
*.xz) xz -dc "$msr_ko" >"$INITRD_ROOT/msr.ko" ;;
*.zst) zstd -qdc "$msr_ko" >"$INITRD_ROOT/msr.ko" ;;
"") echo "tests/vm: no msr.ko in /lib/modules/$KVER" >&2; exit 1 ;;
*) cp "$msr_ko" "$INITRD_ROOT/msr.ko" ;;
esac

# glibc binaries run in the guest with the shared libraries they need copied alongside
# (the toolchain here has no musl target to add, and these are what users run), debug
# information stripped to keep the initramfs small.
copy_binary() { # copy_binary BINARY NAME
    strip --strip-debug -o "$INITRD_ROOT/$2" "$1"
    for lib in $(ldd "$1" | grep -o '/[^ ]*'); do
        mkdir -p "$INITRD_ROOT$(dirname "$lib")"
        cp -L "$lib" "$INITRD_ROOT$lib"
    done
}
# The daemon scenarios run unless ROCS_VM_TESTS names tests and not "daemon".
DAEMON=1
if [ -n "${ROCS_VM_TESTS:-}" ] && ! echo " $ROCS_VM_TESTS " | grep -q " daemon "; then DAEMON=0; fi

# The Rust client too: the ignored live test of crates/rocs-linux/tests/shim_abi.rs; and
# rocsd and rocsctl of this tree. All three come from the build the workspace's tests use
# (`cargo test --workspace --no-run`, which tests/all.sh has just made, so nothing is built
# again): a build of some packages alone or in another profile would build their
# dependencies once more, with other features.
RUST_CLIENT=0
if [ "${ROCS_VM_RUST:-1}" = 0 ]; then
    say "ROCS_VM_RUST=0: the Rust client is not exercised in the guest"
elif ! command -v cargo >/dev/null; then
    echo "tests/vm: cargo not found; install Rust, or set ROCS_VM_RUST=0 to test the module alone" >&2
    exit 2
else
    say "building the workspace's tests, rocsd and rocsctl (cargo test --workspace --no-run)"
    executables=$(cd "$ROOT" && cargo test -q --workspace --locked --no-run \
        --message-format=json 2>"$WORK/cargo.log" |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p') || true
    # executable NAME PATTERN: the one built executable whose path matches PATTERN.
    executable() {
        local path
        path=$(echo "$executables" | grep -- "$2" | tail -n 1)
        if [ -z "$path" ] || [ ! -x "$path" ]; then
            cat "$WORK/cargo.log" >&2; echo "tests/vm: building $1 failed" >&2; exit 1
        fi
        echo "$path"
    }
    client_test=$(executable "the Rust client's test" '/deps/shim_abi-[0-9a-f]*$')
    copy_binary "$client_test" shim_client_test
    RUST_CLIENT=1
    if [ "$DAEMON" = 1 ]; then
        for bin in rocsd rocsctl; do
            path=$(executable "$bin" "/$bin\$")
            copy_binary "$path" "$bin"
        done
        cp "$ROOT/tests/vm/guest/daemon.sh" "$INITRD_ROOT/daemon.sh"
        cp -r "$ROOT/tests/vm/guest/rocsd" "$INITRD_ROOT/vm"
    fi
fi
cp /bin/busybox "$INITRD_ROOT/bin/busybox"
cat >"$INITRD_ROOT/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
echo ROCS-GUEST-START
/shimtest /rocs_shim.ko ${ROCS_VM_TESTS:-}
echo "ROCS-SUITE-EXIT \$?"
if [ -x /shim_client_test ]; then
    insmod /rocs_shim.ko
    if /shim_client_test --ignored --test-threads=1 >/tmp/client.log 2>&1; then
        echo "ok - rust-client (ShimClient against the module)"
    else
        sed 's/^/# /' /tmp/client.log
        echo "not ok - rust-client: see the lines above"
    fi
    rmmod rocs_shim
fi
[ -x /rocsd ] && sh /daemon.sh
echo ROCS-DMESG-BEGIN
dmesg
echo ROCS-DMESG-END
poweroff -f
EOF
chmod +x "$INITRD_ROOT/init"
(cd "$INITRD_ROOT" && find . | cpio -o -H newc --quiet | gzip -1 >"$WORK/initramfs.gz")

# The stock kernel's run-time checkers: freed pages are poisoned and checked when handed
# out again (a write to a frame after it was freed is reported), slab objects get red
# zones and poison.
DEBUG_ARGS="page_poison=1 slub_debug=FZPU"

# --- boot: two NUMA nodes (the move_pages comparison), serial console to a file ---------
# An Intel CPU model that TCG emulates whole (no warnings), so that rocsd's prefetcher
# switch takes it for a core with MSR 0x1A4 (Westmere, model 0x2c); TCG itself keeps no
# such register (a write is dropped, a read gives 0).
LOG=$WORK/console.log
MONITOR=$WORK/monitor.sock
# What the stalled vCPUs were doing, from qemu's monitor (QMP), for whoever looks into a hang.
monitor_dump() { # monitor_dump FILE
    python3 - "$MONITOR" "$1" <<'PY' 2>/dev/null || echo "(no registers: qemu's monitor did not answer, or no python3)" >"$1"
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1])
replies = s.makefile("r")
def ask(command, **arguments):
    s.sendall(json.dumps({"execute": command, "arguments": arguments}).encode() + b"\n")
    while True:  # events may come before the reply
        reply = json.loads(replies.readline())
        if "return" in reply or "error" in reply:
            return reply.get("return", reply.get("error"))
replies.readline()  # the greeting
ask("qmp_capabilities")
with open(sys.argv[2], "w") as out:
    for command in ("info cpus", "info registers -a"):
        out.write(f"(qemu) {command}\n{ask('human-monitor-command', **{'command-line': command})}\n")
PY
}
# boot: the guest once; sets qemu_rc (124: the whole run timed out; 125: the kernel never
# started our init within BOOT_TIMEOUT, qemu stopped).
boot() {
    : >"$LOG"
    rm -f "$MONITOR"
    timeout "$TIMEOUT" qemu-system-x86_64 -accel tcg -cpu Westmere-v1 -m 1G -smp 2,sockets=2,cores=1,threads=1 \
        -object memory-backend-ram,id=m0,size=512M -object memory-backend-ram,id=m1,size=512M \
        -numa node,nodeid=0,cpus=0,memdev=m0 -numa node,nodeid=1,cpus=1,memdev=m1 \
        -kernel "/boot/vmlinuz-$KVER" -initrd "$WORK/initramfs.gz" \
        -append "console=ttyS0,115200 loglevel=5 panic=-1 mitigations=off transparent_hugepage=madvise $DEBUG_ARGS" \
        -display none -monitor none -qmp "unix:$MONITOR,server=on,wait=off" -serial "file:$LOG" -no-reboot &
    local qemu_pid=$! booted=0 waited=0
    while kill -0 "$qemu_pid" 2>/dev/null; do
        if grep -q ROCS-GUEST-START "$LOG"; then booted=1; break; fi
        if [ "$waited" -ge "$BOOT_TIMEOUT" ]; then break; fi
        sleep 1
        waited=$((waited + 1))
    done
    if [ "$booted" = 0 ] && kill -0 "$qemu_pid" 2>/dev/null; then
        monitor_dump "$WORK/hang-$attempt.txt"
        kill "$qemu_pid"
        wait "$qemu_pid" || true
        qemu_rc=125
        return
    fi
    set +e
    wait "$qemu_pid"
    qemu_rc=$?
    set -e
}
# The kernel itself has been seen, rarely and only on a loaded host, to stop for good
# while enumerating PCI under TCG (no output for 480 s, long before our init runs). Such
# a boot is stopped at BOOT_TIMEOUT (a boot takes 5-30 s here) and made once more, said
# loudly; a guest that stops after our init has started fails the run as before.
BOOT_TIMEOUT=${ROCS_VM_BOOT_TIMEOUT:-120}
attempt=1
say "booting (qemu -accel tcg, timeout ${TIMEOUT}s)"
start=$(date +%s)
boot
if [ "$qemu_rc" = 125 ]; then
    cp "$LOG" /tmp/rocs-vm-hang-console.log
    cp "$WORK/hang-1.txt" /tmp/rocs-vm-hang-registers.txt
    say "the kernel did not reach our init within ${BOOT_TIMEOUT}s; its last console lines:"
    tr -d '\r' <"$LOG" | tail -n 3 | sed 's/^/[vm]   /'
    say "its console and its CPUs' registers (qemu's monitor): /tmp/rocs-vm-hang-console.log,"
    say "/tmp/rocs-vm-hang-registers.txt; where the CPUs stood:"
    grep -o 'RIP=[0-9a-f]*' /tmp/rocs-vm-hang-registers.txt | sed 's/^/[vm]   /' || true
    say "booting once more"
    attempt=2
    start=$(date +%s)
    boot
fi
if [ "$qemu_rc" = 125 ]; then
    echo "tests/vm: the kernel did not reach our init within ${BOOT_TIMEOUT}s, twice" >&2
fi
say "guest ran $(( $(date +%s) - start ))s (qemu exit $qemu_rc)"

# --- verdict -----------------------------------------------------------------------------
grep -E '^(ok|not ok|#) ' "$LOG" | tr -d '\r' || true
passed=$(grep -c '^ok ' "$LOG" || true)
failed=$(grep -c '^not ok ' "$LOG" || true)
bad=0
if [ "$qemu_rc" -eq 124 ]; then echo "tests/vm: the guest did not finish within ${TIMEOUT}s" >&2; bad=1; fi
if [ "$qemu_rc" -eq 125 ]; then bad=1; fi
# The kernel writes to the same console: a line of ours may run into one of its messages
# ("1..20[    4.81] rocs_shim: loading ..."), so nothing is anchored at the line's end.
planned=$(tr -d '\r' <"$LOG" | sed -n 's/^1\.\.\([0-9][0-9]*\).*$/\1/p' | head -n 1)
suite_rc=$(tr -d '\r' <"$LOG" | sed -n 's/^ROCS-SUITE-EXIT \([0-9][0-9]*\).*$/\1/p' | head -n 1)
if [ -z "$suite_rc" ]; then
    echo "tests/vm: the suite did not run to its end; last console lines:" >&2
    tail -n 40 "$LOG" >&2
    bad=1
elif [ "$suite_rc" -gt 1 ]; then
    # 0: all passed, 1: some failed (counted below); anything else: it crashed.
    echo "tests/vm: the guest test program died (exit status $suite_rc)" >&2
    bad=1
fi
daemon_planned=$(tr -d '\r' <"$LOG" | sed -n 's/^ROCS-DAEMON-PLAN \([0-9][0-9]*\).*$/\1/p' | head -n 1)
if [ "$RUST_CLIENT" = 1 ] && [ "$DAEMON" = 1 ] && [ -z "$daemon_planned" ]; then
    echo "tests/vm: the daemon scenarios did not start" >&2
    bad=1
fi
[ -z "$planned" ] || planned=$((planned + RUST_CLIENT + ${daemon_planned:-0}))
if [ -z "$planned" ] || [ $((passed + failed)) -ne "$planned" ]; then
    echo "tests/vm: ${planned:-?} results planned, $((passed + failed)) reported" >&2
    bad=1
fi
# The kernel's own reports of trouble, anywhere in the guest's log.
if grep -nE 'WARNING:|BUG[: ]|Oops|general protection fault|Kernel panic|KASAN|UBSAN|KFENCE|Call Trace|list_(add|del) corruption|Bad page (state|map)|memory corruption|Poison overwritten|Redzone|soft lockup|hung_task|stall' "$LOG" >"$WORK/kernel-trouble.txt"; then
    echo "tests/vm: the guest kernel reported trouble:" >&2
    head -n 60 "$WORK/kernel-trouble.txt" >&2
    bad=1
fi
echo "$passed passed, $failed failed"
if [ "$failed" -ne 0 ] || [ "$passed" -eq 0 ] || [ "$bad" -ne 0 ]; then
    if [ -z "${ROCS_VM_KEEP:-}" ]; then
        cp "$LOG" /tmp/rocs-vm-console.log
        echo "console log: /tmp/rocs-vm-console.log" >&2
    fi
    exit 1
fi
