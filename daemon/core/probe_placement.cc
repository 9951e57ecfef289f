#include "daemon/core/probe_placement.h"

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

}  // namespace

bool kernel_emulates(const uint8_t* c, size_t len) {
  if (len >= 1 && c[0] >= 0x50 && c[0] <= 0x57) return true;               // push r64
  if (len >= 2 && c[0] == 0x41 && c[1] >= 0x50 && c[1] <= 0x57) return true;  // push r8-r15
  return false;
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

ProbePlacement place_entry_only_probe(const ElfFile& elf, const ElfSymbol& sym) {
  std::vector<uint8_t> code = elf.read_at_vaddr(sym.vaddr, 16);
  if (sym.size != 0 && code.size() > sym.size) code.resize(sym.size);
  if (code.empty()) return ProbePlacement{sym.vaddr, 0, false, "entry: code not readable"};
  return place_entry_only_probe_bytes(code.data(), code.size(), sym.vaddr);
}

}  // namespace lw
