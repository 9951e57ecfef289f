#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# symbol_variants.sh BINARY OUTDIR
# Makes the copies of BINARY that the symbolization tests trace and read
# (tests/integration/symbols_test.cc, tests/unit/test_debug_file.cc):
#   OUTDIR/debug/NAME.debug   its debug information alone (objcopy --only-keep-debug)
#   OUTDIR/stripped/NAME      strip --strip-all, with a .gnu_debuglink to NAME.debug
#                             (the debug file is deliberately not next to it)
#   OUTDIR/mini/NAME          strip --strip-all, with MiniDebugInfo: the
#                             function symbols that .dynsym lacks, in an
#                             xz-compressed ELF file in .gnu_debugdata (the
#                             layout gdb's manual describes, as Fedora ships)
set -eu
bin=$1
out=$2
name=$(basename "$bin")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out/debug" "$out/stripped" "$out/mini"

objcopy --only-keep-debug "$bin" "$out/debug/$name.debug"
strip --strip-all -o "$out/stripped/$name" "$bin"
objcopy --add-gnu-debuglink="$out/debug/$name.debug" "$out/stripped/$name"

# Function symbols (text, local or global) that are not dynamic symbols.
nm -D --format=posix --defined-only "$bin" | awk '{ print $1 }' | sort > "$work/dynamic"
nm --format=posix --defined-only "$bin" | awk '$2 == "T" || $2 == "t" { print $1 }' | sort > "$work/functions"
comm -13 "$work/dynamic" "$work/functions" > "$work/keep"
objcopy --strip-all --remove-section .gdb_index --remove-section .comment \
  --keep-symbols="$work/keep" "$out/debug/$name.debug" "$work/mini.elf"
xz --force --keep "$work/mini.elf"
strip --strip-all --remove-section .comment -o "$out/mini/$name" "$bin"
objcopy --add-section .gnu_debugdata="$work/mini.elf.xz" "$out/mini/$name"
