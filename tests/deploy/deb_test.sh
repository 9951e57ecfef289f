#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Debian package as a user gets it: CPack builds leakwatch_*.deb from
# the build tree; a fresh Debian 12 root (debootstrap --variant=minbase from
# the Debian mirror, cached as a tarball under the build dir so reruns
# take seconds) installs it with `apt-get install ./leakwatch_*.deb`, which
# pulls its shared-library dependencies from the mirror. Then:
#  1. in a chroot: `leakwatch --version`, `leakwatch check-config
#     /etc/leakwatch/leakwatch.yaml`, the files where the README says, the
#     config a conffile, the DEP-5 copyright file, the man page
#     (`man -w leakwatch`, rendered without groff warnings), the unit
#     verified by `systemd-analyze verify` with the root as it is installed
#     there (and its `security --offline` score printed);
#  2. the same root booted with its own systemd (systemd-nspawn --boot,
#     private network): the service started runs with OOMScoreAdjust and
#     its cache and state directories; `dpkg -i` of the same package
#     repacked as a newer version restarts it, so that the daemon's
#     executable is the new /usr/bin/leakwatch (same inode, not
#     "(deleted)"); a stopped service stays stopped across an upgrade;
#     enabled (`systemctl enable --now`), remove stops it and keeps the
#     edited config; purge removes the config, the daemon's directories
#     and the enable link.
#  Before both, from the .deb itself: the unit in /lib/systemd/system and a
#  changelog.Debian.gz for this version, signed by the Maintainer.
# Usage: deb_test.sh SOURCE_DIR BUILD_DIR   (root; network to the mirror)
set -Eeuo pipefail
trap 'echo "deb_test: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
src=${1:?usage: deb_test.sh SOURCE_DIR BUILD_DIR}
build=$(cd "${2:?usage: deb_test.sh SOURCE_DIR BUILD_DIR}" && pwd)
mirror=${LW_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [ "$(id -u)" -ne 0 ]; then
  echo "deb_test: not root (debootstrap, chroot and systemd-nspawn need it)" >&2
  exit 1
fi
for tool in debootstrap cpack dpkg-deb systemd-analyze unshare systemd-nspawn nsenter; do
  command -v "$tool" >/dev/null || { echo "deb_test: $tool missing: run scripts/install-deps.sh --with-test-tools" >&2; exit 1; }
done
started_all=$SECONDS
cache="$build/deb-test-cache"
mkdir -p "$cache/archives/partial"
work=$(mktemp -d /tmp/leakwatch-deb-test.XXXXXX)
nspawn_pid=""
cleanup() {
  # The booted root, if a failure left it running: nspawn powers it off on
  # SIGTERM; SIGKILL if it has not within 20 s.
  if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
    kill -TERM "$nspawn_pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$nspawn_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# 1. The package, and the same package repacked as a newer version (the
#    upgrade: another version of the package, its files unpacked anew).
(cd "$build" && rm -f leakwatch_*.deb && cpack -G DEB >/dev/null)
deb=$(ls "$build"/leakwatch_*.deb)
echo "deb_test: built $(basename "$deb") ($(du -h "$deb" | cut -f1))"
dpkg-deb --info "$deb" | sed -n 's/^ \(Package\|Version\|Depends\):/deb_test:   \1:/p'
version=$(dpkg-deb -f "$deb" Version)
next="$version+upgradetest1"
# The unit where Debian 12 puts units (/lib, as the docs say; not /usr/lib,
# DEP 17); changelog.Debian.gz opening with this version and signed by the
# Maintainer.
contents=$(dpkg-deb -c "$deb")
grep -q ' \./lib/systemd/system/leakwatch\.service$' <<< "$contents" ||
  { echo "deb_test: the unit is not /lib/systemd/system/leakwatch.service" >&2; exit 1; }
! grep -q ' \./usr/lib/systemd/' <<< "$contents" || { echo "deb_test: files under /usr/lib/systemd" >&2; exit 1; }
changelog=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/doc/leakwatch/changelog.Debian.gz | gzip -dc) ||
  { echo "deb_test: no /usr/share/doc/leakwatch/changelog.Debian.gz" >&2; exit 1; }
[ "$(head -1 <<< "$changelog" | sed -n 's/^leakwatch (\([^)]*\)) .*/\1/p')" = "$version" ] ||
  { echo "deb_test: changelog.Debian opens with '$(head -1 <<< "$changelog")', the package is $version" >&2; exit 1; }
[ "$(sed -n 's/^ -- \(.*>\)  .*/\1/p' <<< "$changelog" | head -1)" = "$(dpkg-deb -f "$deb" Maintainer)" ] ||
  { echo "deb_test: changelog.Debian is not signed by the Maintainer, $(dpkg-deb -f "$deb" Maintainer)" >&2; exit 1; }
echo "deb_test:   unit in /lib/systemd/system; changelog.Debian.gz $version, signed by the Maintainer"
dpkg-deb -R "$deb" "$work/repack"
sed -i "s/^Version: .*/Version: $next/" "$work/repack/DEBIAN/control"
dpkg-deb --root-owner-group -b "$work/repack" "$work/leakwatch_next.deb" >/dev/null
rm -rf "$work/repack"

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
# For the booted root (nspawn mounts a tmpfs over /tmp).
cp "$deb" "$work/leakwatch_next.deb" "$root/root/"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true

# 3. Installed in a chroot, in a private mount namespace (the mounts vanish
#    with it).
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
         /usr/share/leakwatch/prometheus/set-runbook-url.sh \
         /usr/share/doc/leakwatch/README.md /usr/share/doc/leakwatch/runbooks.md \
         /usr/share/doc/leakwatch/examples/leakwatch.yaml /usr/share/doc/leakwatch/copyright \
         /usr/share/man/man1/leakwatch.1.gz /usr/share/leakwatch/bpf/leakwatch.bpf.c \
         /usr/share/leakwatch/bpf/leakwatch_abi.h /usr/share/leakwatch/bpf/vmlinux.h.gz; do
  [ -e "$root$f" ] || { echo "deb_test: $f not installed" >&2; exit 1; }
done
inroot dpkg-query -W -f='${Conffiles}\n' leakwatch | grep -q '^ /etc/leakwatch/leakwatch.yaml ' ||
  { echo "deb_test: /etc/leakwatch/leakwatch.yaml is not a conffile" >&2; exit 1; }
echo "deb_test: files in place; /etc/leakwatch/leakwatch.yaml is a conffile"
# The copyright file is machine-readable (DEP-5) and names the licenses.
copyright="$root/usr/share/doc/leakwatch/copyright"
head -1 "$copyright" | grep -q '^Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' ||
  { echo "deb_test: /usr/share/doc/leakwatch/copyright is not DEP-5 (Format: line)" >&2; exit 1; }
for l in Apache-2.0 GPL-2 BSD-2-clause; do
  grep -q "^License: $l\$" "$copyright" || { echo "deb_test: copyright has no License: $l paragraph" >&2; exit 1; }
done
echo "deb_test: /usr/share/doc/leakwatch/copyright: DEP-5, Apache-2.0, GPL-2, BSD-2-clause"
# The unit as installed, checked by systemd-analyze against that root with
# systemd in it (the targets the unit orders against come from there); man-db
# for `man`.
inroot apt-get install -y -qq --no-install-recommends systemd man-db > "$root/tmp/apt-systemd.log" 2>&1 ||
  { tail -30 "$root/tmp/apt-systemd.log" >&2; exit 1; }
systemd-analyze verify --root="$root" /lib/systemd/system/leakwatch.service
echo "deb_test: systemd-analyze verify: ok"
systemd-analyze security --offline=true --root="$root" leakwatch.service 2>/dev/null | grep -i "overall exposure" |
  sed 's/^/deb_test: /' || true
# The man page: found by man, and groff renders it without a warning.
page=$(inroot man -w leakwatch)
[ "$page" = /usr/share/man/man1/leakwatch.1.gz ] || { echo "deb_test: man -w leakwatch: '$page'" >&2; exit 1; }
inroot /bin/sh -c 'MANWIDTH=80 man --warnings leakwatch 2>/tmp/man.err >/tmp/man.txt'
[ ! -s "$root/tmp/man.err" ] || { cat "$root/tmp/man.err" >&2; echo "deb_test: man leakwatch warns" >&2; exit 1; }
for s in NAME SYNOPSIS DESCRIPTION FILES; do
  grep -q "^$s" "$root/tmp/man.txt" || { echo "deb_test: leakwatch(1) has no $s section" >&2; exit 1; }
done
grep -q -- '--interval' "$root/tmp/man.txt" || { echo "deb_test: leakwatch(1) lacks the commands' options" >&2; exit 1; }
echo "deb_test: man -w leakwatch: $page ($(wc -l < "$root/tmp/man.txt") lines rendered, no warnings)"
# The shipped example config is valid too.
inroot leakwatch check-config /usr/share/doc/leakwatch/examples/leakwatch.yaml
INSIDE

# 4. The same root booted: its own systemd as PID 1 in a container, with
#    the capabilities and system calls the unit grants to leakwatch (and
#    CAP_SYS_RESOURCE, which systemd needs for OOMScoreAdjust=-900 and
#    LimitNOFILE=), and only a loopback network (the daemon's port is the
#    container's own).
#    Everything below runs in the container through nsenter.
started_boot=$SECONDS
systemd-nspawn --quiet --register=no --keep-unit --private-network --console=passive \
  --machine="lw-deb-test-$$" -D "$root" \
  --capability=CAP_BPF,CAP_PERFMON,CAP_CHECKPOINT_RESTORE,CAP_SYS_RESOURCE --system-call-filter='bpf perf_event_open' \
  --boot < /dev/null > "$work/nspawn.log" 2>&1 &
nspawn_pid=$!
container_init=""
for _ in $(seq 1 100); do
  container_init=$(ps -o pid= --ppid "$nspawn_pid" 2>/dev/null | head -1 | tr -d ' ' || true)
  [ -n "$container_init" ] && [ "$(cat "/proc/$container_init/comm" 2>/dev/null)" = systemd ] && break
  container_init=""
  kill -0 "$nspawn_pid" 2>/dev/null || break
  sleep 0.2
done
[ -n "$container_init" ] || { cat "$work/nspawn.log" >&2; echo "deb_test: systemd-nspawn did not boot" >&2; exit 1; }
inbooted() {
  nsenter --target "$container_init" --mount --uts --ipc --net --pid --root --wd \
    /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"
}
# Until its systemd answers (its socket appears a moment after it starts),
# then until it has booted.
state=""
for _ in $(seq 1 120); do
  state=$(timeout 60 nsenter --target "$container_init" --mount --uts --ipc --net --pid --root --wd \
            /usr/bin/systemctl is-system-running --wait 2>/dev/null || true)
  case "$state" in running|degraded) break ;; esac
  kill -0 "$nspawn_pid" 2>/dev/null || break
  sleep 0.5
done
case "$state" in
  running|degraded) ;;
  *) tail -20 "$work/nspawn.log" >&2; echo "deb_test: booted root is '$state'" >&2; exit 1 ;;
esac
echo "deb_test: booted the root with systemd-nspawn ($state, $((SECONDS - started_boot)) s)"
fail() {
  inbooted journalctl -u leakwatch --no-pager 2>/dev/null | tail -20 >&2 || true
  echo "deb_test: $*" >&2
  exit 1
}
main_pid() { inbooted systemctl show -P MainPID leakwatch.service; }
# The daemon's executable as the kernel sees it: "/usr/bin/leakwatch",
# or ".../leakwatch (deleted)" once the file it runs was replaced.
exe_of() { inbooted readlink "/proc/$1/exe"; }
same_file() { [ "$(inbooted stat -L -c %d:%i "/proc/$1/exe")" = "$(inbooted stat -c %d:%i /usr/bin/leakwatch)" ]; }
wait_active() {
  for _ in $(seq 1 100); do
    [ "$(inbooted systemctl is-active leakwatch.service || true)" = active ] && return 0
    sleep 0.1
  done
  return 1
}

inbooted systemctl start leakwatch.service || fail "systemctl start leakwatch failed"
wait_active || fail "leakwatch.service is not active after start"
pid1=$(main_pid)
[ "$(exe_of "$pid1")" = /usr/bin/leakwatch ] || fail "daemon runs '$(exe_of "$pid1")'"
oom=$(inbooted cat "/proc/$pid1/oom_score_adj" || true)
[ "$(inbooted systemctl show -P OOMScoreAdjust leakwatch.service)" = -900 ] || fail "the unit's OOMScoreAdjust is not -900"
# Lowering it takes CAP_SYS_RESOURCE, which systemd silently does without
# (a container): some sandboxes withhold it from root itself.
if (( (0x$(sed -n 's/^CapBnd:\s*//p' /proc/self/status) >> 24) & 1 )); then
  [ "$oom" = -900 ] || fail "daemon's oom_score_adj is $oom, the unit says -900"
else
  echo "deb_test: this machine withholds CAP_SYS_RESOURCE even from root: oom_score_adj $oom, not -900 (the unit's OOMScoreAdjust=-900 is loaded; not applicable here)"
fi
for d in /var/cache/leakwatch /var/lib/leakwatch; do
  inbooted test -d "$d" || fail "$d not created for the daemon"
  owner=$(inbooted stat -L -c %u "$d" || true)
  [ "$owner" = "$(inbooted stat -c %u "/proc/$pid1")" ] || fail "$d is owned by uid $owner, not the daemon's user"
done
echo "deb_test: started: pid $pid1, /usr/bin/leakwatch, oom_score_adj $oom, /var/cache/leakwatch and /var/lib/leakwatch the daemon's"

# The upgrade while it runs: postinst restarts it on the new binary.
inbooted dpkg -i /root/leakwatch_next.deb > "$work/upgrade.log" 2>&1 || { cat "$work/upgrade.log" >&2; fail "dpkg -i of $next failed"; }
[ "$(inbooted dpkg-query -W -f='${Version}' leakwatch)" = "$next" ] || fail "not upgraded to $next"
wait_active || fail "leakwatch.service is not active after the upgrade"
pid2=$(main_pid)
exe2=$(exe_of "$pid2" || true)
[ "$pid2" != "$pid1" ] || fail "upgrade $version -> $next left the daemon running as pid $pid1, on '$exe2'"
[ "$exe2" = /usr/bin/leakwatch ] && same_file "$pid2" || fail "after the upgrade the daemon runs '$exe2', not the new /usr/bin/leakwatch"
! inbooted test -e "/proc/$pid1" || fail "the old daemon (pid $pid1) still runs"
echo "deb_test: upgrade $version -> $next restarted the daemon: pid $pid1 -> $pid2, running the new /usr/bin/leakwatch"

# A stopped daemon stays stopped across an upgrade (try-restart).
inbooted systemctl stop leakwatch.service
inbooted dpkg -i "/root/$(basename "$deb")" > "$work/downgrade.log" 2>&1 || { cat "$work/downgrade.log" >&2; fail "dpkg -i of $version failed"; }
[ "$(inbooted systemctl is-active leakwatch.service || true)" = inactive ] || fail "a stopped daemon was started by the package change"
echo "deb_test: a stopped daemon stays stopped across a package change"

# Enabled as the README says (`systemctl enable --now`), then removed:
# remove stops the daemon and keeps the edited conffile (and, as for any
# Debian service, the enable link); purge removes the config, the daemon's
# directories, the enable link and deb-systemd-helper's record of it.
wants=/etc/systemd/system/multi-user.target.wants/leakwatch.service
dsh_state=/var/lib/systemd/deb-systemd-helper-enabled/leakwatch.service.dsh-also
inbooted systemctl enable --now leakwatch.service > /dev/null 2>&1 && wait_active || fail "enable --now before remove failed"
inbooted test -L "$wants" || fail "systemctl enable made no $wants"
inbooted grep -qx "$wants" "$dsh_state" || fail "postinst did not record $wants in $dsh_state (deb-systemd-helper update-state)"
pid3=$(main_pid)
inbooted /bin/sh -c 'echo "# edited" >> /etc/leakwatch/leakwatch.yaml'
inbooted dpkg --remove leakwatch > /dev/null
! inbooted test -e "/proc/$pid3" || fail "remove left the daemon (pid $pid3) running"
! inbooted test -e /usr/bin/leakwatch && inbooted test -e /etc/leakwatch/leakwatch.yaml ||
  fail "remove must drop the binary and keep the config"
inbooted dpkg --purge leakwatch > /dev/null
for d in /etc/leakwatch /var/lib/leakwatch /var/lib/private/leakwatch /var/cache/leakwatch /var/cache/private/leakwatch \
         "$dsh_state"; do
  ! inbooted test -e "$d" || fail "purge left $d"
done
! inbooted test -L "$wants" || fail "purge left the enable link $wants"
echo "deb_test: remove stops the daemon and keeps the config; purge removes it, /var/{lib,cache}/leakwatch and the enable link"

inbooted systemctl --no-block poweroff > /dev/null 2>&1 || true
for _ in $(seq 1 60); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.5; done
wait "$nspawn_pid" 2>/dev/null || true
nspawn_pid=""
echo "deb_test: passed ($((SECONDS - started_all)) s; booted part $((SECONDS - started_boot)) s)"
