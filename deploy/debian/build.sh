#!/usr/bin/env bash
# Builds rocs's Debian packages into target/debian/:
#   rocs_VERSION-1_ARCH.deb            rocsd, rocsctl, the systemd unit, /etc/rocs/rocsd.toml
#                                      (cargo deb; its metadata is in daemon/Cargo.toml)
#   rocs-shim-dkms_VERSION-1_all.deb   kmod-shim's source for DKMS (dpkg-deb: it has no Rust)
# Prints the two paths, one a line, on stdout. Needs cargo-deb (installed when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."

CARGO_DEB_VERSION=3.8.0
if ! cargo deb --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"; then
    echo "installing cargo-deb $CARGO_DEB_VERSION (a few minutes)" >&2
    cargo install --quiet --locked cargo-deb --version "$CARGO_DEB_VERSION" >&2
fi

# The workspace version; the Debian revision is cargo-deb's default.
version=$(cargo pkgid -p rocsd | sed 's/.*[#@]//')
deb_version="$version-1"

# rocsctl is another crate's binary: build both, then let cargo deb package without building.
cargo build --release --locked -p rocsd -p rocs-cli >&2
cargo deb -p rocsd --no-build --strip --deb-version "$deb_version" \
    --output "target/debian/rocs_${deb_version}_$(dpkg --print-architecture).deb" >&2
echo "$PWD/target/debian/rocs_${deb_version}_$(dpkg --print-architecture).deb"

# rocs-shim-dkms: the module's source in /usr/src/rocs-shim-VERSION, as dkms.conf names it
# (its PACKAGE_VERSION becomes the package's, so that an upgrade is a new DKMS version).
staging=target/debian/rocs-shim-dkms
rm -rf "$staging"
src="$staging/usr/src/rocs-shim-$version"
doc="$staging/usr/share/doc/rocs-shim-dkms"
mkdir -p "$src" "$doc" "$staging/DEBIAN"
cp -r kmod-shim/Kbuild kmod-shim/Makefile kmod-shim/*.c kmod-shim/*.h kmod-shim/include "$src/"
sed "s/^PACKAGE_VERSION=.*/PACKAGE_VERSION=\"$version\"/" kmod-shim/dkms.conf >"$src/dkms.conf"
cp kmod-shim/README.md "$doc/README.md"
cat >"$doc/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: rocs

Files: *
Copyright: the rocs authors
License: GPL-2.0
 On Debian systems the full text of the GNU General Public License version 2 is in
 /usr/share/common-licenses/GPL-2.
COPYRIGHT
for script in postinst prerm; do
    sed "s/@VERSION@/$version/" "deploy/debian/rocs-shim-dkms/$script" >"$staging/DEBIAN/$script"
    chmod 755 "$staging/DEBIAN/$script"
done
maintainer=$(sed -n 's/^maintainer = "\(.*\)"$/\1/p' daemon/Cargo.toml)
cat >"$staging/DEBIAN/control" <<CONTROL
Package: rocs-shim-dkms
Version: $deb_version
Architecture: all
Maintainer: $maintainer
Installed-Size: $(du -sk --exclude=DEBIAN "$staging" | cut -f1)
Depends: dkms (>= 3)
Recommends: linux-headers-$(dpkg --print-architecture) | linux-headers
Enhances: rocs
Section: kernel
Priority: optional
Description: rocs kernel shim: moves pages onto reserved cache colours (DKMS source)
 rocs_shim.ko moves the pages rocsd picks onto physical frames of a few reserved
 cache colours, so that cache-polluting data shares one small slice of the
 last-level cache. DKMS builds it for every installed kernel with headers.
CONTROL
(cd "$staging" && find usr -type f -exec md5sum {} + | sort -k2 >DEBIAN/md5sums)
out="target/debian/rocs-shim-dkms_${deb_version}_all.deb"
dpkg-deb --root-owner-group --build "$staging" "$out" >&2
echo "$PWD/$out"
