#!/usr/bin/env bash
# rocs's Debian packages and container image, built and tried here (needs root: chroot, mounts).
#   1. deploy/debian/build.sh builds rocs and rocs-shim-dkms.
#   2. Both install into a fresh Debian bookworm root (chroot; systemd does not run there): the
#      files, the conffile, the enabled unit, the group rocs, the empty policy directory,
#      `rocsd --check` on the installed configuration, and DKMS's build of rocs_shim.ko for the
#      root's kernel headers. Then remove (the conffile stays), purge, and nothing may be left
#      but what Debian allows: the system group and dpkg's own records.
#   3. deploy/image/build.sh builds the OCI image from the package; its tag and labels must be
#      the package's version, and `podman run` of it must answer `rocsd --version` and
#      `rocsctl doctor --json` (skipped, with the reason, where podman cannot run containers).
# The Debian root is made once with debootstrap (about 3 minutes) and cached in
# target/package-test/base; each run installs into an overlay on it, so the overlay's upper
# directory holds exactly what the packages changed. A run with the cache takes about 2 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

step() { printf '\n==> %s\n' "$*"; }
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

if [ "$(id -u)" != 0 ]; then
    echo "SKIP: tests/package.sh needs root (debootstrap, chroot and mounts)"
    exit 0
fi
need=()
for tool in debootstrap mmdebstrap umoci skopeo podman; do
    command -v "$tool" >/dev/null || need+=("$tool")
done
if [ ${#need[@]} -gt 0 ]; then
    step "installing ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

step "building the packages (deploy/debian/build.sh)"
debs=$(deploy/debian/build.sh)
rocs_deb=$(grep '/rocs_' <<<"$debs")
dkms_deb=$(grep '/rocs-shim-dkms_' <<<"$debs")
deb_version=$(dpkg-deb --field "$rocs_deb" Version)
version=${deb_version%-*}
[ "$version" = "$(cargo pkgid -p rocsd | sed 's/.*[#@]//')" ] ||
    fail "package version $deb_version is not the workspace's"

work=$repo/target/package-test
base=$work/base
# What the base root holds besides minbase: our packages' dependencies (dpkg -i installs no
# dependencies) and the headers DKMS builds the module against. A new list makes a new base.
base_packages=adduser,init-system-helpers,dkms,linux-headers-amd64
if [ "$(cat "$base/.rocs-base" 2>/dev/null)" != "$base_packages" ]; then
    step "making the Debian root (debootstrap bookworm, once; cached in $base)"
    rm -rf "$base"
    mirror=$(apt-get indextargets --format '$(REPO_URI)' 'Release: bookworm' | head -n1)
    debootstrap --variant=minbase --include="$base_packages" bookworm "$base" \
        "${mirror:-http://deb.debian.org/debian/}" >"$work.debootstrap.log" 2>&1 ||
        fail "debootstrap failed: see $work.debootstrap.log"
    chroot "$base" apt-get clean
    echo "$base_packages" >"$base/.rocs-base"
fi

step "installing into a fresh root (an overlay on the cached one)"
upper=$work/upper
root=$work/root
mounts=()
cleanup() {
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount "${mounts[i]}" 2>/dev/null || true; done
    rm -rf "$upper" "$work/overlay-work" "$root" "$work/bundle"
}
trap cleanup EXIT
cleanup
mkdir -p "$upper" "$work/overlay-work" "$root"
mount -t overlay overlay -o "lowerdir=$base,upperdir=$upper,workdir=$work/overlay-work" "$root"
mounts+=("$root")
# rocsd --check reads /proc and /sys (the PMU, the LLC); DKMS's build writes to /dev/null.
mount -t proc proc "$root/proc" && mounts+=("$root/proc")
mount --bind -o ro /sys "$root/sys" && mounts+=("$root/sys")
mount --bind /dev "$root/dev" && mounts+=("$root/dev")
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"; }

mkdir "$root/tmp/debs"
cp "$rocs_deb" "$dkms_deb" "$root/tmp/debs/"
in_root dpkg -i /tmp/debs/"$(basename "$rocs_deb")" /tmp/debs/"$(basename "$dkms_deb")" \
    >"$work.dpkg-install.log" 2>&1 || fail "dpkg -i failed: $(cat "$work.dpkg-install.log")"
rm -r "$root/tmp/debs"

step "checking the installed files"
for bin in rocsd rocsctl; do
    [ -x "$root/usr/bin/$bin" ] || fail "/usr/bin/$bin is not installed"
done
in_root rocsd --version | grep -qx "rocsd $version" || fail "rocsd --version is not $version"
unit=$(in_root dpkg-query -L rocs | grep '/systemd/system/rocsd.service$') ||
    fail "the package has no rocsd.service"
cmp -s "$root$unit" config/rocsd.service || fail "$unit differs from config/rocsd.service"
[ -L "$root/etc/systemd/system/multi-user.target.wants/rocsd.service" ] ||
    fail "rocsd.service is not enabled (multi-user.target.wants)"
cmp -s "$root/etc/rocs/rocsd.toml" config/rocsd.toml || fail "/etc/rocs/rocsd.toml differs"
in_root dpkg-query --showformat='${Conffiles}\n' --show rocs | grep -q '^ /etc/rocs/rocsd.toml ' ||
    fail "/etc/rocs/rocsd.toml is not a conffile"
[ -d "$root/etc/rocs/policy.d" ] && [ -z "$(ls -A "$root/etc/rocs/policy.d")" ] ||
    fail "/etc/rocs/policy.d is not an empty directory"
gid=$(in_root getent group rocs | cut -d: -f3) || fail "the group rocs does not exist"
[ "$gid" -lt 1000 ] || fail "the group rocs (gid $gid) is not a system group"
echo "rocsd, rocsctl, $unit (enabled), /etc/rocs/rocsd.toml (conffile), empty policy.d, group rocs ($gid)"

step "rocsd --check on the installed configuration"
if out=$(in_root rocsd --check --config /etc/rocs/rocsd.toml 2>&1); then
    echo "$out"
elif grep -q 'set allow_observe_only = true' <<<"$out"; then
    # This machine has no hardware PMU and the shipped configuration rightly refuses to run
    # on one; the rest of the configuration is checked below with observe-only allowed.
    echo "refused as it should be without a hardware PMU: ${out##*rocsd cannot profile here. }"
else
    fail "rocsd --check --config /etc/rocs/rocsd.toml: $out"
fi
# The shipped configuration with observe-only allowed, and the shipped example policies
# installed as an operator would: both must pass. The policies stay for the purge below.
sed 's/^allow_observe_only = false$/allow_observe_only = true/' "$root/etc/rocs/rocsd.toml" \
    >"$root/tmp/observe-only.toml"
cp "$root"/usr/share/doc/rocs/examples/policy.d/*.toml "$root/etc/rocs/policy.d/"
out=$(in_root rocsd --check --config /tmp/observe-only.toml 2>&1) || fail "rocsd --check: $out"
rm "$root/tmp/observe-only.toml"
echo "$out"
grep -q 'policies: batch, observe-db$' <<<"$out" || fail "the example policies were not loaded"

step "rocs-shim-dkms: DKMS built the module for the root's kernel headers"
kernel=$(basename "$(dirname "$(echo "$root"/lib/modules/*/build)")")
in_root dkms status rocs-shim | grep -q "^rocs-shim/$version, $kernel, .*: installed" ||
    fail "dkms status: $(in_root dkms status 2>&1)"
ko=$(in_root modinfo -k "$kernel" -F filename rocs_shim) || fail "modinfo finds no rocs_shim for $kernel"
in_root modinfo -k "$kernel" -F vermagic rocs_shim | grep -q "^$kernel " ||
    fail "$ko was not built for $kernel"
echo "$ko (built for $kernel)"

step "remove: the programs go, the conffile stays"
in_root dpkg -r rocs rocs-shim-dkms >"$work.dpkg-remove.log" 2>&1 ||
    fail "dpkg -r failed: $(cat "$work.dpkg-remove.log")"
for f in /usr/bin/rocsd /usr/bin/rocsctl "$unit" "$ko" "/usr/src/rocs-shim-$version"; do
    [ ! -e "$root$f" ] || fail "$f is still there after dpkg -r"
done
[ -z "$(in_root dkms status rocs-shim)" ] || fail "DKMS still knows rocs-shim after dpkg -r"
[ -f "$root/etc/rocs/rocsd.toml" ] || fail "dpkg -r removed the conffile /etc/rocs/rocsd.toml"

step "purge: nothing left but the group, dpkg's records and the operator's policies"
in_root dpkg -P rocs rocs-shim-dkms >"$work.dpkg-purge.log" 2>&1 ||
    fail "dpkg -P failed: $(cat "$work.dpkg-purge.log")"
[ -f "$root/etc/rocs/policy.d/10-batch.toml" ] || fail "purge deleted an operator's policy"
rm -r "$root/etc/rocs"
[ -z "$(in_root dpkg-query --show --showformat='${Status}' rocs 2>/dev/null)" ] ||
    fail "dpkg still lists rocs after dpkg -P"
# Every entry of the overlay's upper directory is something the install left: a whiteout
# (a base file deleted), a new file, or a changed one. Directories of the base that were only
# touched (their times) and the debootstrap root's own /dev are not changes.
leftovers=$(cd "$upper" && find . -mindepth 1 \( -path ./proc -o -path ./sys -o -path ./dev \) -prune -o -print |
    sed 's|^\.||' | while read -r path; do
        if [ -d "$upper$path" ] && [ ! -L "$upper$path" ] && [ -d "$base$path" ]; then continue; fi
        case $path in
        # The group rocs (Debian leaves system groups on purge: files may still be theirs).
        /etc/group | /etc/gshadow | /etc/group- | /etc/gshadow-) ;;
        # Lock files of adduser and of the shadow tools it ran.
        /etc/.pwd.lock | /run/adduser) ;;
        # dpkg's database and log.
        /var/lib/dpkg/* | /var/log/dpkg.log) ;;
        # depmod's indexes of the kernel's modules, remade when DKMS removed ours (on a
        # machine that runs the kernel they exist already, from its linux-image package).
        /usr/lib/modules/*/modules.*) ;;
        *) echo "$path" ;;
        esac
    done)
[ -z "$leftovers" ] || fail "left after purge: $(echo $leftovers)"
# The group files changed by one line each: the group rocs.
for f in group gshadow; do
    changed=$(diff "$base/etc/$f" "$root/etc/$f" | grep '^[<>]' || true)
    [ "$(grep -c . <<<"$changed")" = 1 ] && grep -q '^> rocs:' <<<"$changed" ||
        fail "/etc/$f changed by more than the group rocs: $changed"
done
echo "left: the group rocs and dpkg's records"
cleanup
mounts=()

step "the container image (deploy/image/build.sh)"
image=$(deploy/image/build.sh "$rocs_deb" | tail -n1)
layout=${image%:*}
[ "$(umoci ls --layout "$layout")" = "$version" ] ||
    fail "$layout's tags are not exactly $version: $(umoci ls --layout "$layout")"
config=$(skopeo inspect --config "oci:$image")
python3 - "$version" "$config" <<'EOF' || fail "the image's configuration is wrong"
import json, sys
version, config = sys.argv[1], json.loads(sys.argv[2])
labels = config["config"]["Labels"]
assert labels["org.opencontainers.image.version"] == version, labels
assert config["config"]["Entrypoint"] == ["/usr/bin/rocsd"], config["config"]
assert config["architecture"] and config["os"] == "linux", config
EOF
echo "$image: $(du -sh "$layout" | cut -f1), entrypoint rocsd, version label $version"

step "running the image: rocsd --version, rocsctl doctor --json"
podman_image=localhost/rocs:$version
bundle=$work/bundle
# in_image ENTRYPOINT ARGS...: run a command of the image, in a container where podman can run
# one, or else chrooted into the image's own root filesystem (the same files, no isolation).
if id=$(podman pull --quiet "oci:$image" 2>&1) && podman tag "$id" "$podman_image" &&
    out=$(podman run --rm --network=none "$podman_image" --version 2>&1); then
    in_image() {
        local entrypoint=$1
        shift
        podman run --rm --network=none --entrypoint "$entrypoint" "$podman_image" "$@"
    }
else
    echo "SKIP podman run: podman cannot run containers on this machine (${out:-$id});" \
        "running the image's root filesystem with chroot instead"
    rm -rf "$bundle"
    umoci unpack --image "$image" "$bundle" >/dev/null
    mount -t proc proc "$bundle/rootfs/proc" && mounts+=("$bundle/rootfs/proc")
    mount --bind -o ro /sys "$bundle/rootfs/sys" && mounts+=("$bundle/rootfs/sys")
    in_image() { chroot "$bundle/rootfs" "$@"; }
fi
out=$(in_image rocsd --version) || fail "rocsd --version failed in the image"
[ "$out" = "rocsd $version" ] || fail "rocsd --version in the image printed: $out"
echo "rocsd --version: $out"
doctor=$(in_image rocsctl doctor --json) || fail "rocsctl doctor --json failed in the image"
python3 -c 'import json, sys; c = json.load(sys.stdin)["checks"]; assert c, "no checks"' \
    <<<"$doctor" || fail "rocsctl doctor --json is not a list of checks: $doctor"
echo "rocsctl doctor --json: $(grep -c '"name"' <<<"$doctor") checks"
# What the DaemonSet runs besides rocsd: nsenter (into the host's cgroup namespace) and the
# policy-reload container's shell loop.
in_image sh -c 'command -v nsenter readlink sleep rocsctl' >/dev/null ||
    fail "the image lacks a program the DaemonSet runs (nsenter, readlink, sleep, rocsctl)"
cleanup
podman rmi --force "$podman_image" >/dev/null 2>&1 || true

step "package test passed"
