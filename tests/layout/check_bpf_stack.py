#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The BPF programs' combined stack, checked on the object as built.

A kernel without private BPF stacks for uprobe programs (6.18.44 here,
unlike the 6.18 this project started on) adds up the stack frames of a
whole call chain: a program, the global functions it calls, the callbacks
it hands to bpf_loop and bpf_find_vma (followed as calls), and theirs,
each frame rounded up to 16 bytes (the JIT's rounding; these kernels have
the JIT always on). Over 512 bytes, the load
fails ("combined stack size of 3 calls is 544. Too large") and the daemon
does not start. This check reads every function's deepest stack slot and
its calls from `llvm-objdump -dr` and fails, naming the chain, when any
program's worst chain is over 512, whatever the kernel running the tests
does (decision bpf-stack-budget).

Usage: check_bpf_stack.py OBJECT.bpf.o
"""
import re
import shutil
import subprocess
import sys

MAX_STACK = 512
FUNC = re.compile(r'^([0-9a-f]+) <([^>]+)>:$')
SECTION = re.compile(r'^Disassembly of section (\S+):$')
INSN = re.compile(r'^\s*(\d+):\s+(.*)$')
RELOC = re.compile(r'^\s+[0-9a-f]+:\s+(R_BPF_64_\d+)\s+(\S+)$')
SLOT = re.compile(r'r10 - (\d+)\)|r10 \+ -(\d+)')


def objdump(path):
    tool = shutil.which('llvm-objdump') or shutil.which('llvm-objdump-14')
    if not tool:
        sys.exit('check_bpf_stack: llvm-objdump not found (Debian package llvm: scripts/install-deps.sh)')
    return subprocess.run([tool, '-dr', '--no-show-raw-insn', path], check=True, capture_output=True,
                          text=True).stdout.splitlines()


def parse(lines):
    """Functions: name -> {section, depth, calls (names or .text offsets)}."""
    funcs, text_at = {}, {}
    section, cur, last_insn = None, None, None
    for line in lines:
        m = SECTION.match(line)
        if m:
            section = m.group(1)
            continue
        m = FUNC.match(line)
        if m:
            if m.group(2).startswith('LBB'):
                continue
            cur = m.group(2)
            funcs[cur] = {'section': section, 'depth': 0, 'calls': set()}
            if section == '.text':
                text_at[int(m.group(1), 16)] = cur
            continue
        if cur is None:
            continue
        m = RELOC.match(line)
        if m and last_insn is not None:
            target = m.group(2)
            if target == '.text':
                # A call's immediate counts instructions after the next; an
                # ld_imm64 (a callback's address) holds the byte offset.
                imm = re.search(r'(-?\d+)(?: ll)?$', last_insn)
                if imm:
                    v = int(imm.group(1))
                    target = ('@', (v + 1) * 8 if last_insn.startswith('call') else v)
            funcs[cur]['calls'].add(target)
            continue
        m = INSN.match(line)
        if m:
            last_insn = m.group(2).strip()
            for a, b in SLOT.findall(last_insn):
                funcs[cur]['depth'] = max(funcs[cur]['depth'], int(a or b))
    for f in funcs.values():
        f['calls'] = {text_at.get(c[1], '?') if isinstance(c, tuple) else c for c in f['calls']}
        f['calls'] = {c for c in f['calls'] if c in funcs}
    return funcs


def frame(depth):
    return (depth + 15) // 16 * 16


def worst_chain(funcs, name, seen=()):
    if name in seen:
        sys.exit('check_bpf_stack: recursion through %s' % ' -> '.join(seen + (name,)))
    best = (0, [])
    for callee in sorted(funcs[name]['calls']):
        got = worst_chain(funcs, callee, seen + (name,))
        if got[0] > best[0]:
            best = got
    own = frame(funcs[name]['depth'])
    return own + best[0], ['%s (%d)' % (name, own)] + best[1]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    funcs = parse(objdump(sys.argv[1]))
    programs = [n for n, f in funcs.items() if f['section'] not in ('.text', None)]
    if not programs:
        sys.exit('check_bpf_stack: no BPF program found in %s' % sys.argv[1])
    failed = False
    for name in sorted(programs):
        total, chain = worst_chain(funcs, name)
        verdict = 'ok' if total <= MAX_STACK else 'OVER'
        failed |= total > MAX_STACK
        print('%-24s %4d of %d bytes (%s): %s' % (name, total, MAX_STACK, verdict, ' -> '.join(chain)))
    if failed:
        sys.exit('check_bpf_stack: a chain is over %d bytes: a kernel without private stacks refuses '
                 'the program; move locals to a per-CPU scratch map (bpf/lw_unwind.bpf.h)' % MAX_STACK)


if __name__ == '__main__':
    main()
