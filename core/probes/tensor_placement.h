/* SPDX-License-Identifier: Apache-2.0 */
// One probe instead of three traps for c10::alloc_cpu (decision tensor-tier,
// "One trap per tensor"): the instruction right after its call of
// posix_memalign(&ptr, alignment, nbytes) sees the result in %eax, the
// block in the stack slot whose address was passed (`lea N(%rsp), %rdi`)
// and the size in the callee-saved register copied to %rdx. A 0-byte call
// returns before it and costs nothing. Found by decoding the function;
// anything unexpected gives no site, and the caller keeps the entry and
// return probes. Pure. Thread-safety: stateless.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/symbols/elf_file.h"

namespace lw {

// The callee-saved registers the size may live in, as the BPF side reads
// them (bits 16..19 of the cookie argument; bpf/lw_tensor.bpf.h).
enum class SavedReg : uint8_t { kRbx = 0, kRbp = 1, kR12 = 2, kR13 = 3, kR14 = 4, kR15 = 5 };

struct PostCallSite {
  uint64_t vaddr = 0;        // the instruction after the call
  uint32_t slot_offset = 0;  // N of `lea N(%rsp), %rdi`, as %rsp stands at the site
  SavedReg size_reg = SavedReg::kRbx;
  // The attach cookie's argument (UprobeSpec::cookie_arg): slot offset in
  // bits 0..15, register in 16..19.
  int64_t cookie_arg() const { return static_cast<int64_t>(slot_offset) | (static_cast<int64_t>(size_reg) << 16); }
};

std::optional<PostCallSite> find_memalign_post_call(const uint8_t* code, size_t len, uint64_t vaddr,
                                                    std::string* why = nullptr);
std::optional<PostCallSite> find_memalign_post_call(const ElfFile& elf, const ElfSymbol& sym,
                                                    std::string* why = nullptr);

}  // namespace lw
