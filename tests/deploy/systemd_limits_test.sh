#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# deploy/systemd/leakwatch.service's resource and network limits (the
# security issue): a MemoryMax that leaves room for the daemon's own budget
# and the BPF maps the kernel charges to its cgroup, and an IP allow-list
# of loopback (scrapers are added per host). Kept apart from
# systemd_unit_test.sh. Usage: systemd_limits_test.sh SOURCE_DIR LEAKWATCH_BIN
set -euo pipefail
src=${1:?usage}; leakwatch_bin=${2:?usage}
unit="$src/deploy/systemd/leakwatch.service"
command -v systemd-analyze >/dev/null || { echo "systemd_limits_test: systemd-analyze missing" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed "s#/usr/bin/leakwatch#$leakwatch_bin#g" "$unit" > "$work/leakwatch.service"
systemd-analyze verify "$work/leakwatch.service"
failures=0
fail() { echo "systemd_limits_test: FAIL: $1" >&2; failures=$((failures + 1)); }
grep -Eq '^IPAddressDeny=any$' "$unit" || fail "IPAddressDeny=any"
grep -Eq '^IPAddressAllow=localhost$' "$unit" || fail "IPAddressAllow=localhost"
# The allow-list also blocks the daemon's own fetches: with
# symbols.debuginfod_urls set they all fail. The unit and docs/config.md
# must say so and give the drop-in that clears it. (Not exercised: that
# needs systemd as PID 1, which a test machine need not run, and a
# non-loopback address, which deb_test.sh's booted root lacks; an empty
# IPAddressDeny= resetting the list is systemd.resource-control(5)'s rule.)
grep -q 'debuginfod_urls' "$unit" && grep -Eq '^#[[:space:]]+IPAddressDeny=$' "$unit" ||
  fail "the unit must say that IPAddressDeny=any breaks symbols.debuginfod_urls, with the IPAddressDeny= drop-in"
/usr/bin/python3 - "$src/docs/config.md" <<'PY' || fail "docs/config.md, \"Symbols\", must give the debuginfod drop-ins"
import re, sys
text = open(sys.argv[1]).read()
blocks = re.findall(r"```ini\n(.*?)```", text, re.S)
ok = any(b.splitlines() == ["[Service]", "IPAddressDeny="] for b in blocks) and \
     any(b.startswith("[Service]\nIPAddressAllow=") for b in blocks)
sys.exit(0 if ok and "IPAddressDeny=any" in text else 1)
PY
max=$(sed -n 's/^MemoryMax=\([0-9]*\)M$/\1/p' "$unit")
# The default budget (512 MiB, docs/config.md) plus the BPF maps at the
# default sizes (48 MiB) and kernel objects (32 MiB) at least.
budget_mib=$(( $(sed -n 's/.*max_daemon_memory_bytes = \([0-9]*\);.*/\1/p' "$src/core/config/config.h") / 1048576 ))
# The unwind tables live in BPF maps, charged to the same cgroup.
tables_mib=$(( $(sed -n 's/.*max_table_bytes = \([0-9]*\)ull << 20;.*/\1/p' "$src/core/config/config.h") ))
[ "$budget_mib" -gt 0 ] || fail "the budget default not found in core/config/config.h"
[ "$tables_mib" -gt 0 ] || fail "unwind.max_table_bytes's default not found in core/config/config.h"
if [ -z "$max" ]; then
  fail "MemoryMax=<N>M"
elif [ "$max" -lt $((budget_mib + 48 + 32 + tables_mib)) ]; then
  fail "MemoryMax=${max}M leaves no room for the ${budget_mib} MiB budget, the BPF maps and ${tables_mib} MiB of unwind tables"
else
  # The automatic live map (decision live-map-sizing) gets what is left after
  # the budget, the 8 MiB ring buffer, the tables and 90 MiB of other kernel
  # memory: it must hold a million live allocations (96 bytes each, 16 per
  # bucket of 2^20).
  live_mib=$((max - budget_mib - 8 - tables_mib - 90))
  [ "$live_mib" -ge $(((1000000 * 96 + 1048576 * 16) / 1048576 + 1)) ] ||
    fail "MemoryMax=${max}M leaves ${live_mib} MiB for the live map: fewer than a million allocations"
fi
# The daemon drops its capabilities with capset, which ~@privileged denies,
# and installs its own filter with seccomp, which @system-service lacks.
for call in capset seccomp; do
  grep -Eq "^SystemCallFilter=.*\\b$call\\b" "$unit" || fail "SystemCallFilter must allow $call"
done
echo "systemd_limits_test: MemoryMax=${max:-?}M for a ${budget_mib} MiB budget and ${tables_mib} MiB of unwind tables; IPAddressDeny=any, IPAddressAllow=localhost"
exit $((failures > 0))
