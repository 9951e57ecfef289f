// SPDX-License-Identifier: Apache-2.0
#include "core/probes/tensor_placement.h"

#include <capstone/capstone.h>

#include <vector>

namespace lw {

namespace {

// alloc_cpu is ~1.2 KiB in PyTorch 1.13; anything far larger is not it.
constexpr size_t kMaxFunction = 16 << 10;
// How far before the call its three argument set-ups may lie.
constexpr size_t kWindow = 6;

// SavedReg's value for a callee-saved register, else -1.
int saved_reg(x86_reg r) {
  switch (r) {
    case X86_REG_RBX: return static_cast<int>(SavedReg::kRbx);
    case X86_REG_RBP: return static_cast<int>(SavedReg::kRbp);
    case X86_REG_R12: return static_cast<int>(SavedReg::kR12);
    case X86_REG_R13: return static_cast<int>(SavedReg::kR13);
    case X86_REG_R14: return static_cast<int>(SavedReg::kR14);
    case X86_REG_R15: return static_cast<int>(SavedReg::kR15);
    default: return -1;
  }
}

bool writes(csh h, const cs_insn& in, x86_reg reg) {
  cs_regs read, written;
  uint8_t nr = 0, nw = 0;
  if (cs_regs_access(h, &in, read, &nr, written, &nw) != CS_ERR_OK) return true;
  for (uint8_t i = 0; i < nw; ++i)
    if (written[i] == reg) return true;
  return false;
}

// At call index `c`: the `lea N(%rsp), %rdi` and `mov %REG, %rdx` set up in
// the instructions before it, neither register written again before the call.
std::optional<PostCallSite> match_call(csh h, const cs_insn* in, size_t c) {
  int64_t slot = -1;
  int size = -1;
  x86_reg size_x86 = X86_REG_INVALID;
  bool rdi_done = false, rdx_done = false;
  for (size_t k = 1; k <= kWindow && k <= c; ++k) {
    const cs_insn& p = in[c - k];
    const cs_x86& x = p.detail->x86;
    if (in[c - k].id == X86_INS_CALL || in[c - k].id == X86_INS_JMP) break;  // another block
    if (!rdi_done && writes(h, p, X86_REG_RDI)) {
      rdi_done = true;
      if (p.id == X86_INS_LEA && x.op_count == 2 && x.operands[1].type == X86_OP_MEM &&
          x.operands[1].mem.base == X86_REG_RSP && x.operands[1].mem.index == X86_REG_INVALID &&
          x.operands[1].mem.disp >= 0 && x.operands[1].mem.disp < 0x10000) {
        slot = x.operands[1].mem.disp;
        // %rsp moved between the lea and the call: the slot is elsewhere.
        for (size_t j = c - k + 1; j < c && slot >= 0; ++j)
          if (writes(h, in[j], X86_REG_RSP)) slot = -1;
      }
    }
    if (!rdx_done && writes(h, p, X86_REG_RDX)) {
      rdx_done = true;
      if (p.id == X86_INS_MOV && x.op_count == 2 && x.operands[1].type == X86_OP_REG) {
        size_x86 = x.operands[1].reg;
        size = saved_reg(size_x86);
        // Written between the copy and the call: not the size any more.
        for (size_t j = c - k + 1; j < c && size >= 0; ++j)
          if (writes(h, in[j], size_x86)) size = -1;
      }
    }
  }
  if (slot < 0 || size < 0) return std::nullopt;
  return PostCallSite{in[c].address + in[c].size, static_cast<uint32_t>(slot), static_cast<SavedReg>(size)};
}

}  // namespace

std::optional<PostCallSite> find_memalign_post_call(const uint8_t* code, size_t len, uint64_t vaddr,
                                                    std::string* why) {
  std::string ignored;
  std::string& reason = why ? *why : ignored;
  if (len == 0 || len > kMaxFunction) {
    reason = len == 0 ? "function size unknown" : "function too large to decode";
    return std::nullopt;
  }
  csh h;
  if (cs_open(CS_ARCH_X86, CS_MODE_64, &h) != CS_ERR_OK) {
    reason = "no instruction decoder";
    return std::nullopt;
  }
  cs_option(h, CS_OPT_DETAIL, CS_OPT_ON);
  cs_insn* in = nullptr;
  const size_t n = cs_disasm(h, code, len, vaddr, 0, &in);
  std::optional<PostCallSite> site;
  reason = "no posix_memalign(&slot, alignment, size) call found";
  // The first direct call set up as posix_memalign(lea N(%rsp), _, saved reg).
  for (size_t i = 0; i < n && !site; ++i)
    if (in[i].id == X86_INS_CALL && in[i].detail->x86.op_count == 1 &&
        in[i].detail->x86.operands[0].type == X86_OP_IMM && i + 1 < n)
      site = match_call(h, in, i);
  if (site) reason = "after its posix_memalign call";
  cs_free(in, n);
  cs_close(&h);
  return site;
}

std::optional<PostCallSite> find_memalign_post_call(const ElfFile& elf, const ElfSymbol& sym, std::string* why) {
  if (sym.size == 0 || sym.size > kMaxFunction) {
    if (why) *why = sym.size == 0 ? "function size unknown" : "function too large to decode";
    return std::nullopt;
  }
  std::vector<uint8_t> code = elf.read_at_vaddr(sym.vaddr, sym.size);
  if (code.size() != sym.size) {
    if (why) *why = "function not in the file";
    return std::nullopt;
  }
  return find_memalign_post_call(code.data(), code.size(), sym.vaddr, why);
}

}  // namespace lw
