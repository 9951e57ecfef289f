#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Writes the man page leakwatch(1), gzipped as Debian installs man pages,
# from the binary's own help text with help2man: `leakwatch --help`, then
# `leakwatch COMMAND --help` for each command that --help lists and that
# answers it, plus the sections of deploy/debian/leakwatch.h2m (FILES, SEE
# ALSO, ...). Run by the build (CMakeLists.txt, target leakwatch_man), so
# the page follows the help text. Honours SOURCE_DATE_EPOCH (the date in the
# page's footer).
# Usage: gen-man.sh LEAKWATCH_BIN H2M_INCLUDE OUT.1.gz
set -euo pipefail
bin=$(realpath "${1:?usage: gen-man.sh LEAKWATCH_BIN H2M_INCLUDE OUT.1.gz}")
include=${2:?usage: gen-man.sh LEAKWATCH_BIN H2M_INCLUDE OUT.1.gz}
out=${3:?usage: gen-man.sh LEAKWATCH_BIN H2M_INCLUDE OUT.1.gz}
command -v help2man >/dev/null || { echo "gen-man.sh: help2man missing: run scripts/install-deps.sh" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# help2man runs PROGRAM --help and PROGRAM --version: this stand-in gives
# it the main help, its first "usage:" as help2man's "Usage:" (SYNOPSIS).
cat > "$work/leakwatch" <<WRAPPER
#!/bin/sh
if [ "\$1" = "--version" ]; then exec '$bin' --version; fi
'$bin' --help | sed '1s/^usage:/Usage:/'
WRAPPER
chmod +x "$work/leakwatch"
# Each command's own --help (the commands are the words indented by two
# spaces in the main help; those whose --help fails are left out), verbatim
# in a COMMAND OPTIONS section after the generated ones.
roff_verbatim() { sed -e 's/\\/\\e/g' -e 's/-/\\-/g' -e "s/^\([.']\)/\\\\\&\1/"; }
{
  cat "$include"
  echo
  echo "[COMMAND OPTIONS]"
  for cmd in $("$bin" --help | sed -n 's/^  \([a-z][a-z-]*\)\( .*\)\{0,1\}$/\1/p'); do
    text=$("$bin" "$cmd" --help 2>/dev/null) || continue
    printf '.SS "leakwatch %s"\n.nf\n' "$cmd"
    printf '%s\n' "$text" | roff_verbatim
    printf '.fi\n'
  done
} > "$work/include.h2m"
help2man --no-info --section=1 \
  --name="find memory leaks in running Linux processes with eBPF" \
  --include="$work/include.h2m" --output="$work/leakwatch.1" "$work/leakwatch"
grep -q '^\.SH SYNOPSIS' "$work/leakwatch.1" || { echo "gen-man.sh: no SYNOPSIS: does --help still begin with usage:?" >&2; exit 1; }
gzip -9n < "$work/leakwatch.1" > "$out.tmp"
mv "$out.tmp" "$out"
