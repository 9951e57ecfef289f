/* SPDX-License-Identifier: Apache-2.0 */
// Where to put an entry-only uprobe (free, cfree, operator delete...).
//
// A uprobe's cost is dominated by what the kernel does with the probed
// instruction: it emulates push/nop/jmp/call/jcc, but single-steps anything
// else, and a single-step trap costs about 12 us in these VMs against about
// 1.2 us for an emulated one (bench/README.md, "Facts measured on these
// machines"). glibc's free begins with `test %rdi,%rdi; je <return>`, so
// probing its first instruction single-steps.
//
// Safety rule for moving an entry-only probe forward from the symbol:
//  - only these instructions may be skipped: endbr64 (no effect), and
//    `test %rdi,%rdi` immediately followed by `je`/`jz` (taken only when the
//    pointer argument is NULL, which frees nothing);
//  - neither touches an argument register, so the probe still sees the same
//    rdi/rsi/rdx;
//  - the landing instruction must be one the kernel emulates (push r64);
//    otherwise the probe stays at the symbol (the safe fallback).
//
// A function with a return probe (place_return_probe): the kernel hijacks
// whatever is at [sp] when the probe hits, so both probes may move to any
// instruction reached on every call before %rsp or [sp] changes
// (decision return-probe-placement). The rule, checked with a full decode of
// the function (capstone):
//  - at most ten instructions may be skipped, each endbr64, or a cmp,
//    test, mov, movzx, movsx(d), lea or integer ALU instruction (add, sub,
//    and, or, xor, shifts, not, neg) with no %rsp in its operands that
//    writes no memory and none of %rsp, %rdi, %rsi, %rdx (in any width;
//    %rdi alone for free, whose program reads nothing else):
//    %rsp, [sp] and the argument registers the programs read are then as
//    at entry (glibc's `cmpb $0,global(%rip)`; tcmalloc's
//    `mov global(%rip),%rax; mov %rdi,%r8; test %rax,%rax`; jemalloc's
//    free: nine loads and ALU steps on %rax/%rcx/%rdx... up to a jne,
//    measured single-stepped at 51% of redis-server's CPU under full);
//  - the landing instruction is one the kernel emulates (push r64, jcc, jmp);
//  - the whole function decodes, has no indirect jump (a jump table could
//    land anywhere), and no direct branch or call inside it targets the
//    range from the symbol to the landing address (that would run the probe
//    twice for one call, or skip it);
//  - otherwise the probes stay at the symbol.
// An entry-only probe with no NULL check to skip uses the same rule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/symbols/elf_file.h"

namespace lw {

struct ProbePlacement {
  uint64_t vaddr = 0;       // where to probe
  uint64_t skipped = 0;     // bytes skipped from the symbol (0 = at entry)
  bool emulated = false;    // the probed instruction is one the kernel emulates
  std::string reason;       // human-readable: "after NULL check", "entry: unknown prologue"
};

// Decides the probe address for an entry-only probe on `sym` in `elf`.
// `args`: how many argument registers its program reads (%rdi, %rsi, %rdx
// in that order): those, and %rsp, must be as at entry where it lands
// (free reads only %rdi: 1).
ProbePlacement place_entry_only_probe(const ElfFile& elf, const ElfSymbol& sym, int args = 3);

// Same decision from raw code bytes at `vaddr` (exposed for unit tests).
ProbePlacement place_entry_only_probe_bytes(const uint8_t* code, size_t len, uint64_t vaddr);

// Decides where a function with a return probe is probed (both its entry
// and its return probe go there).
ProbePlacement place_return_probe(const ElfFile& elf, const ElfSymbol& sym, int args = 3);

// Same decision from the whole function's code at `vaddr` (unit tests).
ProbePlacement place_return_probe_bytes(const uint8_t* code, size_t len, uint64_t vaddr, int args = 3);

// Probes on a system-call wrapper (mmap, munmap, mremap, brk;
// decision libc-syscall-wrappers): one probe just after the `syscall`
// instruction sees the arguments, still in their registers (the kernel
// preserves all but rax, rcx and r11), and the result in %rax. The rule,
// checked on a full decode of the function:
//  - the `syscall` must directly follow `mov $nr, %eax` with the expected
//    number (a wrapper making some other call is never mistaken for it);
//  - the site is the instruction after `syscall`; if that is a cmp/test
//    (flags only) followed by a jcc the kernel emulates, the site moves to
//    the jcc (rax and the argument registers are unchanged by the compare);
//  - brk only (decision brk-emulated-probe): if the instruction after `syscall` is not
//    emulated, the site may move further, over at most 4 moves that write
//    neither %rax nor %rdi and compares, to the first emulated jcc. glibc
//    stores the new break in __curbrk before it, so at such a site
//    (`after_store`) the break before the call is not in __curbrk: the BPF
//    side keeps the last break it saw (lw_target.brk_last);
//  - no direct branch in the function may target the site or the skipped
//    compare (the probe would fire without a call), and a function with an
//    indirect jump gets no site at all.
// A function whose `syscall` instructions fail the rule yields no site; the
// caller then falls back to the raw syscall tracepoints for the process.
struct SyscallSite {
  uint64_t vaddr = 0;     // where to probe
  bool emulated = false;  // the probed instruction is one the kernel emulates
  std::string reason;     // "after syscall, on the error branch (emulated)"
  bool after_store = false;  // brk: past instructions that may store the result
};
std::vector<SyscallSite> find_syscall_sites(const ElfFile& elf, const ElfSymbol& sym, int nr,
                                           std::string* why = nullptr);
// Same from the whole function's code at `vaddr` (unit tests). `why` gets
// the reason when no site is found.
std::vector<SyscallSite> find_syscall_sites_bytes(const uint8_t* code, size_t len, uint64_t vaddr,
                                                  int nr, std::string* why = nullptr);

// True if the kernel emulates (does not single-step) the instruction at `code`.
bool kernel_emulates(const uint8_t* code, size_t len);

}  // namespace lw
