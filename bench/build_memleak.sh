#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds bcc's libbpf-tools `memleak` (the anchor row of bench/torch_run.sh
# --memleak) from a bcc source tree the user provides, into OUT_DIR, outside
# this repository. Nothing of bcc is vendored here: the sources are read from
# BCC_SOURCE_DIR and copied into OUT_DIR only.
#
#   bench/build_memleak.sh BCC_SOURCE_DIR OUT_DIR
#
# Needs clang (14 on Debian 12), bpftool (gen skeleton), libbpf-dev (1.1 on
# Debian 12), libelf-dev, zlib, and /sys/kernel/btf/vmlinux. Debian's libbpf
# 1.1 has no BPF_UPROBE/BPF_URETPROBE macros, so the BPF side is built with
# -DBPF_UPROBE=BPF_KPROBE -DBPF_URETPROBE=BPF_KRETPROBE (same ctx layout).
# Built without blazesym (not packaged): memleak then symbolizes with
# bcc's own trace_helpers.
set -euo pipefail
(($# == 2)) || { echo "usage: $0 BCC_SOURCE_DIR OUT_DIR" >&2; exit 2; }
src=$1/libbpf-tools out=$2
[[ -f $src/memleak.bpf.c ]] || { echo "$src/memleak.bpf.c not found: is $1 a bcc source tree?" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
here_repo=$(cd "$(dirname "$0")/.." && pwd)
case $out/ in "$here_repo"/*) echo "OUT_DIR must be outside the repository" >&2; exit 1 ;; esac

CLANG=${CLANG:-clang}
BPFTOOL=${BPFTOOL:-bpftool}
CC=${CC:-cc}
helpers=(trace_helpers uprobe_helpers btf_helpers compat errno_helpers map_helpers)
cp "$src"/memleak.{bpf.c,c,h} "$src"/*.bpf.h "$out"/
for h in "${helpers[@]}"; do cp "$src/$h.c" "$src/$h.h" "$out"/; done
cd "$out"
"$BPFTOOL" btf dump file /sys/kernel/btf/vmlinux format c >vmlinux.h
"$CLANG" -g -O2 -target bpf -D__TARGET_ARCH_x86 \
  -DBPF_UPROBE=BPF_KPROBE -DBPF_URETPROBE=BPF_KRETPROBE \
  -I. -c memleak.bpf.c -o memleak.bpf.o
"$BPFTOOL" gen skeleton memleak.bpf.o >memleak.skel.h
objs=()
for f in memleak "${helpers[@]}"; do
  "$CC" -g -O2 -I. -c "$f.c" -o "$f.o"
  objs+=("$f.o")
done
"$CC" -o memleak "${objs[@]}" -lbpf -lelf -lz
echo "built $out/memleak"
