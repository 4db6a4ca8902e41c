#!/usr/bin/env bash
# Builds the rocs container image from Debian packages alone, without an image registry or a
# container engine:
#   1. mmdebstrap makes a minimal Debian bookworm root (the Essential packages, from the Debian
#      mirror apt uses here) with the rocs package installed into it, as one tar;
#   2. umoci writes that tar as the single layer of an OCI image layout, and sets the entrypoint
#      (umoci works on the layout directory alone; buildah or podman would need a container
#      storage and, to commit, a runtime that can start containers, which not every CI has).
# Output: target/image/rocs, an OCI image layout tagged with the package's upstream version.
# Push it with: skopeo copy oci:target/image/rocs:VERSION docker://REGISTRY/rocs:VERSION
# Usage: deploy/image/build.sh [ROCS_DEB]   (default: built by deploy/debian/build.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."

need=()
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v umoci >/dev/null || need+=(umoci)
if [ ${#need[@]} -gt 0 ]; then
    echo "installing ${need[*]}" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

deb=${1:-$(deploy/debian/build.sh | grep '/rocs_')}
deb=$(realpath "$deb")
# The image tag is the upstream part of the package's version (0.1.0 of 0.1.0-1).
deb_version=$(dpkg-deb --field "$deb" Version)
version=${deb_version%-*}
arch=$(dpkg-deb --field "$deb" Architecture)
mirror=$(apt-get indextargets --format '$(REPO_URI)' 'Release: bookworm' | head -n1)
mirror=${mirror:-http://deb.debian.org/debian/}

out=target/image
layout=$out/rocs
mkdir -p "$out"
rm -rf "$layout" "$out/rootfs.tar"

# A fixed timestamp (the last commit's) makes the root's files, and so the layer, the same
# from one build of the same tree to the next.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
# Essential packages plus rocs and its dependencies; no documentation but copyright files, no
# apt lists, no /dev nodes (the container runtime makes /dev).
mmdebstrap --quiet --mode=root --variant=essential --architectures="$arch" \
    --include="$deb" --hook-dir=/usr/share/mmdebstrap/hooks/file-mirror-automount \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --skip=output/dev \
    bookworm "$out/rootfs.tar" "$mirror"

umoci init --layout "$layout"
umoci new --image "$layout:$version"
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
umoci raw add-layer --image "$layout:$version" \
    --history.created "$created" --history.created_by "mmdebstrap bookworm + $(basename "$deb")" \
    "$out/rootfs.tar"
umoci config --image "$layout:$version" \
    --architecture "$arch" --os linux --created "$created" \
    --config.entrypoint /usr/bin/rocsd \
    --config.cmd=--config --config.cmd=/etc/rocs/rocsd.toml \
    --config.label "org.opencontainers.image.title=rocs" \
    --config.label "org.opencontainers.image.version=$version" \
    --config.label "org.opencontainers.image.description=rocsd and rocsctl from the Debian package $(basename "$deb")" \
    --config.label "org.opencontainers.image.licenses=Apache-2.0 OR MIT" \
    --history.created "$created" --history.created_by "umoci config"
umoci gc --layout "$layout"
rm "$out/rootfs.tar"
echo "$PWD/$layout:$version"
