// SPDX-License-Identifier: Apache-2.0
#include "core/probes/probe_placement.h"

#include <capstone/capstone.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lw {

namespace {

bool is_endbr64(const uint8_t* c, size_t len) {
  return len >= 4 && c[0] == 0xf3 && c[1] == 0x0f && c[2] == 0x1e && c[3] == 0xfa;
}

// `test %rdi,%rdi` (48 85 ff) followed by je rel8 (74 xx) or je rel32
// (0f 84 xx xx xx xx). Returns the length of the pair, or 0.
size_t null_check_len(const uint8_t* c, size_t len) {
  if (len < 5 || c[0] != 0x48 || c[1] != 0x85 || c[2] != 0xff) return 0;
  if (c[3] == 0x74) return 5;
  if (len >= 9 && c[3] == 0x0f && c[4] == 0x84) return 9;
  return 0;
}

constexpr int kSysBrk = 12;

bool writes_result_or_arg(unsigned reg) {
  switch (reg) {
    case X86_REG_RAX: case X86_REG_EAX: case X86_REG_AX: case X86_REG_AL: case X86_REG_AH:
    case X86_REG_RDI: case X86_REG_EDI: case X86_REG_DI: case X86_REG_DIL:
      return true;
    default:
      return false;
  }
}

// An instruction the brk site may move past: a compare, or a move that
// leaves %rax (the result) and %rdi (the argument) alone.
bool skippable_before_check(const cs_insn& in) {
  if (in.id == X86_INS_CMP || in.id == X86_INS_TEST) return true;
  if (in.id != X86_INS_MOV) return false;
  const cs_x86& x = in.detail->x86;
  if (x.op_count != 2) return false;
  return x.operands[0].type == X86_OP_MEM ||
         (x.operands[0].type == X86_OP_REG && !writes_result_or_arg(x.operands[0].reg));
}

}  // namespace

bool kernel_emulates(const uint8_t* c, size_t len) {
  if (len >= 1 && c[0] >= 0x50 && c[0] <= 0x57) return true;               // push r64
  if (len >= 2 && c[0] == 0x41 && c[1] >= 0x50 && c[1] <= 0x57) return true;  // push r8-r15
  if (len >= 2 && c[0] >= 0x70 && c[0] <= 0x7f) return true;                 // jcc rel8
  if (len >= 6 && c[0] == 0x0f && c[1] >= 0x80 && c[1] <= 0x8f) return true;  // jcc rel32
  if (len >= 2 && c[0] == 0xeb) return true;                                 // jmp rel8
  if (len >= 5 && c[0] == 0xe9) return true;                                 // jmp rel32
  return false;
}

namespace {

// Larger functions are not decoded (the fallback is the symbol): every
// function this is for is a few hundred bytes.
constexpr size_t kMaxReturnProbedFunction = 64 * 1024;
constexpr int kMaxSkipped = 10;

struct Disassembly {
  csh handle = 0;
  cs_insn* insns = nullptr;
  size_t count = 0;
  ~Disassembly() {
    if (insns) cs_free(insns, count);
    if (handle) cs_close(&handle);
  }
};

bool is_stack_reg(unsigned reg) {
  return reg == X86_REG_RSP || reg == X86_REG_ESP || reg == X86_REG_SP || reg == X86_REG_SPL;
}

// The registers a skipped instruction must leave as at entry: the stack
// pointer (a uretprobe hijacks [sp]) and the argument registers the entry
// programs read (rdi, rsi, rdx: bpf/leakwatch.bpf.c, lw_entry), in every
// width.
// `args`: how many argument registers the probe's program reads (1: free
// reads only %rdi; 3: every other function).
bool protected_reg(unsigned r, int args) {
  switch (r) {
    case X86_REG_RSP: case X86_REG_ESP: case X86_REG_SP: case X86_REG_SPL:
    case X86_REG_RDI: case X86_REG_EDI: case X86_REG_DI: case X86_REG_DIL:
      return true;
    case X86_REG_RSI: case X86_REG_ESI: case X86_REG_SI: case X86_REG_SIL:
      return args >= 2;
    case X86_REG_RDX: case X86_REG_EDX: case X86_REG_DX: case X86_REG_DL: case X86_REG_DH:
      return args >= 3;
    default:
      return false;
  }
}

// endbr64; or a cmp, test, mov, movzx, movsx(d), lea or integer ALU
// instruction (add, sub, and, or, xor, shifts, not, neg) that has no %rsp
// in its operands, writes no memory and no protected register (flags and
// other registers only): glibc's `cmpb $0,global(%rip)`, tcmalloc's
// `mov global(%rip),%rax; mov %rdi,%r8; test %rax,%rax`, jemalloc's free
// (nine such instructions computing its thread cache's slot, then jne).
bool skippable(csh handle, const cs_insn& in, int args) {
  if (in.id == X86_INS_ENDBR64) return true;
  switch (in.id) {
    case X86_INS_CMP: case X86_INS_TEST: case X86_INS_MOV: case X86_INS_MOVZX:
    case X86_INS_MOVSX: case X86_INS_MOVSXD: case X86_INS_LEA: case X86_INS_MOVABS:
    case X86_INS_ADD: case X86_INS_SUB: case X86_INS_AND: case X86_INS_OR: case X86_INS_XOR:
    case X86_INS_SHR: case X86_INS_SHL: case X86_INS_SAR: case X86_INS_NOT: case X86_INS_NEG:
      break;
    default:
      return false;
  }
  const cs_x86& x = in.detail->x86;
  for (uint8_t i = 0; i < x.op_count; ++i) {
    const cs_x86_op& op = x.operands[i];
    if (op.type == X86_OP_REG && is_stack_reg(op.reg)) return false;
    if (op.type == X86_OP_MEM && (is_stack_reg(op.mem.base) || is_stack_reg(op.mem.index) ||
                                  (op.access & CS_AC_WRITE)))
      return false;
  }
  cs_regs read, written;
  uint8_t n_read = 0, n_written = 0;
  if (cs_regs_access(handle, &in, read, &n_read, written, &n_written) != CS_ERR_OK) return false;
  for (uint8_t i = 0; i < n_written; ++i)
    if (protected_reg(written[i], args)) return false;
  return true;
}

bool in_group(const cs_insn& in, uint8_t group) {
  for (uint8_t i = 0; i < in.detail->groups_count; ++i)
    if (in.detail->groups[i] == group) return true;
  return false;
}

// Decodes the whole function into `d`: "" on success, else why not.
std::string decode_whole(const uint8_t* code, size_t len, uint64_t vaddr, Disassembly& d) {
  if (cs_open(CS_ARCH_X86, CS_MODE_64, &d.handle) != CS_ERR_OK ||
      cs_option(d.handle, CS_OPT_DETAIL, CS_OPT_ON) != CS_ERR_OK)
    return "no instruction decoder";
  d.count = cs_disasm(d.handle, code, len, vaddr, 0, &d.insns);
  size_t decoded = 0;
  for (size_t i = 0; i < d.count; ++i) decoded += d.insns[i].size;
  if (d.count == 0 || decoded != len) return "function does not decode whole";
  return "";
}

// The targets of the function's direct jumps and calls, or nullopt when it
// has an indirect jump (a jump table could land anywhere). An indirect call
// returns to the next instruction, so it is no target.
std::optional<std::vector<uint64_t>> direct_branch_targets(const Disassembly& d) {
  std::vector<uint64_t> targets;
  for (size_t i = 0; i < d.count; ++i) {
    const cs_insn& in = d.insns[i];
    const bool jump = in_group(in, CS_GRP_JUMP), call = in_group(in, CS_GRP_CALL);
    if (!jump && !call) continue;
    const cs_x86& x = in.detail->x86;
    if (x.op_count != 1 || x.operands[0].type != X86_OP_IMM) {
      if (jump) return std::nullopt;
      continue;
    }
    targets.push_back(static_cast<uint64_t>(x.operands[0].imm));
  }
  return targets;
}

}  // namespace

ProbePlacement place_return_probe_bytes(const uint8_t* code, size_t len, uint64_t vaddr, int args) {
  ProbePlacement at_entry{vaddr, 0, kernel_emulates(code, len), "entry"};
  if (at_entry.emulated || len == 0) return at_entry;
  if (len > kMaxReturnProbedFunction) {
    at_entry.reason = "entry: function too large to decode";
    return at_entry;
  }
  Disassembly d;
  if (std::string why = decode_whole(code, len, vaddr, d); !why.empty()) {
    at_entry.reason = "entry: " + why;
    return at_entry;
  }
  size_t land = 0;
  while (land < d.count && land < static_cast<size_t>(kMaxSkipped) &&
         skippable(d.handle, d.insns[land], args))
    ++land;
  if (land == 0 || land == d.count) {
    at_entry.reason = "entry: prologue not recognized";
    return at_entry;
  }
  const cs_insn& landing = d.insns[land];
  if (!kernel_emulates(code + (landing.address - vaddr), len - (landing.address - vaddr))) {
    at_entry.reason = "entry: instruction after the skipped ones is not emulated";
    return at_entry;
  }
  std::optional<std::vector<uint64_t>> targets = direct_branch_targets(d);
  if (!targets) {
    at_entry.reason = "entry: indirect jump in the function";
    return at_entry;
  }
  for (uint64_t target : *targets)
    if (target >= vaddr && target <= landing.address) {
      at_entry.reason = "entry: a branch in the function targets the skipped range";
      return at_entry;
    }
  return ProbePlacement{landing.address, landing.address - vaddr, true,
                        "after " + std::string(d.insns[land - 1].mnemonic) +
                            " (%rsp, [sp] and the argument registers unchanged)"};
}

ProbePlacement place_return_probe(const ElfFile& elf, const ElfSymbol& sym, int args) {
  if (sym.size == 0) return ProbePlacement{sym.vaddr, 0, false, "entry: function size unknown"};
  if (sym.size > kMaxReturnProbedFunction)
    return ProbePlacement{sym.vaddr, 0, false, "entry: function too large to decode"};
  std::vector<uint8_t> code = elf.read_at_vaddr(sym.vaddr, sym.size);
  if (code.size() != sym.size) return ProbePlacement{sym.vaddr, 0, false, "entry: code not readable"};
  return place_return_probe_bytes(code.data(), code.size(), sym.vaddr, args);
}

std::vector<SyscallSite> find_syscall_sites_bytes(const uint8_t* code, size_t len, uint64_t vaddr,
                                                  int nr, std::string* why) {
  std::string ignored;
  std::string& reason = why ? *why : ignored;
  if (len == 0 || len > kMaxReturnProbedFunction) {
    reason = len == 0 ? "function size unknown" : "function too large to decode";
    return {};
  }
  Disassembly d;
  if (reason = decode_whole(code, len, vaddr, d); !reason.empty()) return {};
  std::optional<std::vector<uint64_t>> targets = direct_branch_targets(d);
  if (!targets) {
    reason = "indirect jump in the function";
    return {};
  }
  auto targeted = [&](uint64_t from, uint64_t to) {  // a branch lands in [from, to]
    for (uint64_t t : *targets)
      if (t >= from && t <= to) return true;
    return false;
  };
  std::vector<SyscallSite> sites;
  reason = "no `mov $" + std::to_string(nr) + ", %eax; syscall` in the function";
  for (size_t i = 1; i + 1 < d.count; ++i) {
    if (d.insns[i].id != X86_INS_SYSCALL) continue;
    const cs_insn& mov = d.insns[i - 1];
    const cs_x86& mx = mov.detail->x86;
    if (mov.id != X86_INS_MOV || mx.op_count != 2 || mx.operands[0].type != X86_OP_REG ||
        (mx.operands[0].reg != X86_REG_EAX && mx.operands[0].reg != X86_REG_RAX) ||
        mx.operands[1].type != X86_OP_IMM || mx.operands[1].imm != nr)
      continue;
    const cs_insn& after = d.insns[i + 1];
    SyscallSite site{after.address, kernel_emulates(code + (after.address - vaddr),
                                                    len - (after.address - vaddr)),
                     "after syscall"};
    if (!site.emulated && (after.id == X86_INS_CMP || after.id == X86_INS_TEST) &&
        i + 2 < d.count) {
      const cs_insn& jcc = d.insns[i + 2];
      if (in_group(jcc, CS_GRP_JUMP) &&
          kernel_emulates(code + (jcc.address - vaddr), len - (jcc.address - vaddr)) &&
          !targeted(after.address, jcc.address)) {
        site = SyscallSite{jcc.address, true, "after syscall, on the result check (emulated)"};
      }
    }
    if (!site.emulated && nr == kSysBrk) {
      for (size_t j = i + 1; j < d.count && j <= i + 5; ++j) {
        const cs_insn& in = d.insns[j];
        if (in_group(in, CS_GRP_JUMP)) {
          if (j > i + 1 && kernel_emulates(code + (in.address - vaddr), len - (in.address - vaddr)) &&
              !targeted(after.address, in.address)) {
            site = SyscallSite{in.address, true,
                               "after syscall, on the result check past the store of the new break "
                               "(emulated)",
                               true};
          }
          break;
        }
        if (!skippable_before_check(in)) break;
      }
    }
    if (targeted(after.address, site.vaddr)) {
      reason = "a branch in the function targets the instruction after syscall";
      continue;
    }
    if (!site.emulated) site.reason += " (single-stepped)";
    sites.push_back(std::move(site));
  }
  if (!sites.empty()) reason.clear();
  return sites;
}

std::vector<SyscallSite> find_syscall_sites(const ElfFile& elf, const ElfSymbol& sym, int nr,
                                           std::string* why) {
  if (sym.size == 0 || sym.size > kMaxReturnProbedFunction) {
    if (why) *why = sym.size == 0 ? "function size unknown" : "function too large to decode";
    return {};
  }
  std::vector<uint8_t> code = elf.read_at_vaddr(sym.vaddr, sym.size);
  if (code.size() != sym.size) {
    if (why) *why = "code not readable";
    return {};
  }
  return find_syscall_sites_bytes(code.data(), code.size(), sym.vaddr, nr, why);
}

ProbePlacement place_entry_only_probe_bytes(const uint8_t* code, size_t len, uint64_t vaddr) {
  ProbePlacement at_entry{vaddr, 0, kernel_emulates(code, len), "entry"};
  if (at_entry.emulated) return at_entry;
  size_t pos = 0;
  if (is_endbr64(code, len)) pos += 4;
  size_t check = null_check_len(code + pos, len - pos);
  if (check == 0) {
    at_entry.reason = "entry: prologue not recognized";
    return at_entry;
  }
  pos += check;
  if (!kernel_emulates(code + pos, len - pos)) {
    at_entry.reason = "entry: instruction after NULL check is not emulated";
    return at_entry;
  }
  return ProbePlacement{vaddr + pos, pos, true, "after NULL check"};
}

ProbePlacement place_entry_only_probe(const ElfFile& elf, const ElfSymbol& sym, int args) {
  std::vector<uint8_t> code = elf.read_at_vaddr(sym.vaddr, 16);
  if (sym.size != 0 && code.size() > sym.size) code.resize(sym.size);
  if (code.empty()) return ProbePlacement{sym.vaddr, 0, false, "entry: code not readable"};
  ProbePlacement special = place_entry_only_probe_bytes(code.data(), code.size(), sym.vaddr);
  if (special.emulated) return special;
  // No NULL check to skip: the return probes' rule, which keeps the
  // argument registers as well (tcmalloc's free: mov, test, jne).
  ProbePlacement general = place_return_probe(elf, sym, args);
  return general.vaddr != sym.vaddr ? general : special;
}

}  // namespace lw
