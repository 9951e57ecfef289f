#!/usr/bin/env bash
# The Debian package as a user gets it: CPack builds leakwatch_*.deb from
# the build tree; a fresh Debian 12 root (debootstrap --variant=minbase from
# the Debian mirror, cached as a tarball under the build dir so reruns
# take seconds) installs it with `apt-get install ./leakwatch_*.deb`, which
# pulls its shared-library dependencies from the mirror; then, inside it
# (chroot): `leakwatch --version`, `leakwatch check-config
# /etc/leakwatch/leakwatch.yaml`, the files where the README says, the
# config a conffile, the unit verified by `systemd-analyze verify` with the
# root as it is installed there (and its `security --offline` score
# printed), and remove/purge.
# Usage: deb_test.sh SOURCE_DIR BUILD_DIR   (root; network to the mirror)
set -euo pipefail
src=${1:?usage: deb_test.sh SOURCE_DIR BUILD_DIR}
build=$(cd "${2:?usage: deb_test.sh SOURCE_DIR BUILD_DIR}" && pwd)
mirror=${LW_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [ "$(id -u)" -ne 0 ]; then
  echo "deb_test: not root (debootstrap and chroot need it)" >&2
  exit 1
fi
for tool in debootstrap cpack dpkg-deb systemd-analyze unshare; do
  command -v "$tool" >/dev/null || { echo "deb_test: $tool missing: run scripts/install-deps.sh --with-test-tools" >&2; exit 1; }
done
cache="$build/deb-test-cache"
mkdir -p "$cache/archives/partial"
work=$(mktemp -d /tmp/leakwatch-deb-test.XXXXXX)
trap 'rm -rf "$work"' EXIT

# 1. The package.
(cd "$build" && rm -f leakwatch_*.deb && cpack -G DEB >/dev/null)
deb=$(ls "$build"/leakwatch_*.deb)
echo "deb_test: built $(basename "$deb") ($(du -h "$deb" | cut -f1))"
dpkg-deb --info "$deb" | sed -n 's/^ \(Package\|Version\|Depends\):/deb_test:   \1:/p'

# 2. A fresh Debian 12 root (cached tarball of a minbase debootstrap).
base="$cache/bookworm-minbase.tar.gz"
if [ ! -s "$base" ]; then
  echo "deb_test: debootstrap bookworm from $mirror (first run; cached in $base)"
  started=$SECONDS
  debootstrap --variant=minbase bookworm "$work/boot" "$mirror" > "$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  tar -C "$work/boot" -czf "$base.tmp" . && mv "$base.tmp" "$base"
  rm -rf "$work/boot"
  echo "deb_test: debootstrap took $((SECONDS - started)) s"
fi
root="$work/root"
mkdir "$root"
tar -C "$root" -xzf "$base"
cp "$deb" "$root/tmp/"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true

# 3. Inside, in a private mount namespace (the mounts vanish with it).
unshare --mount --propagation private /bin/bash -euo pipefail -s "$root" "$(basename "$deb")" "$cache/archives" <<'INSIDE'
root=$1 deb=$2 archives=$3
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mount --bind "$archives" "$root/var/cache/apt/archives"
inroot() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }
inroot apt-get update -qq
inroot /bin/sh -c "cd /tmp && apt-get install -y -qq --no-install-recommends ./$deb" > "$root/tmp/apt.log" 2>&1 ||
  { tail -30 "$root/tmp/apt.log" >&2; exit 1; }
echo "deb_test: apt-get install ./$deb: ok"
version=$(inroot leakwatch --version)
echo "deb_test: leakwatch --version: $version"
case "$version" in *leakwatch*[0-9].[0-9]*) ;; *) echo "deb_test: unexpected --version output" >&2; exit 1 ;; esac
inroot leakwatch check-config /etc/leakwatch/leakwatch.yaml
for f in /usr/bin/leakwatch /lib/systemd/system/leakwatch.service /etc/leakwatch/leakwatch.yaml \
         /usr/share/leakwatch/grafana/leakwatch.json /usr/share/leakwatch/prometheus/leakwatch-rules.yml \
         /usr/share/doc/leakwatch/README.md /usr/share/doc/leakwatch/runbooks.md \
         /usr/share/doc/leakwatch/examples/leakwatch.yaml; do
  [ -e "$root$f" ] || { echo "deb_test: $f not installed" >&2; exit 1; }
done
inroot dpkg-query -W -f='${Conffiles}\n' leakwatch | grep -q '^ /etc/leakwatch/leakwatch.yaml ' ||
  { echo "deb_test: /etc/leakwatch/leakwatch.yaml is not a conffile" >&2; exit 1; }
echo "deb_test: files in place; /etc/leakwatch/leakwatch.yaml is a conffile"
# The unit as installed, checked by systemd-analyze against that root with
# systemd in it (the targets the unit orders against come from there).
inroot apt-get install -y -qq --no-install-recommends systemd > "$root/tmp/apt-systemd.log" 2>&1 ||
  { tail -30 "$root/tmp/apt-systemd.log" >&2; exit 1; }
systemd-analyze verify --root="$root" /lib/systemd/system/leakwatch.service
echo "deb_test: systemd-analyze verify: ok"
systemd-analyze security --offline=true --root="$root" leakwatch.service 2>/dev/null | grep -i "overall exposure" |
  sed 's/^/deb_test: /' || true
# The shipped example config is valid too, and rules load.
inroot leakwatch check-config /usr/share/doc/leakwatch/examples/leakwatch.yaml
# Remove keeps the edited conffile; purge removes it.
echo "# edited" >> "$root/etc/leakwatch/leakwatch.yaml"
inroot apt-get remove -y -qq leakwatch > /dev/null 2>&1
[ ! -e "$root/usr/bin/leakwatch" ] && [ -e "$root/etc/leakwatch/leakwatch.yaml" ] ||
  { echo "deb_test: remove must drop the binary and keep the config" >&2; exit 1; }
inroot dpkg --purge leakwatch > /dev/null
[ ! -e "$root/etc/leakwatch" ] || { echo "deb_test: purge left /etc/leakwatch" >&2; exit 1; }
echo "deb_test: remove keeps the config, purge removes it"
INSIDE
echo "deb_test: passed"
