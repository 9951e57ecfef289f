// SPDX-License-Identifier: Apache-2.0
#include "core/symbols/python_runtime.h"

#include <cstdio>

namespace lw {

namespace {

// Offsets from each version's headers (see the header comment). Only what
// the BPF side and the code-object reader use.
constexpr PythonLayout make_311() {
  PythonLayout l;
  l.version = 0x030b;
  l.tested = true;  // tests/integration/python_test.cc, Debian's /usr/bin/python3.11
  l.runtime_autotss = 592;  // _PyRuntime.gilstate.autoTSSkey
  l.ts_frame = 56;          // PyThreadState.cframe
  l.cframe_frame = 8;       // _PyCFrame.current_frame
  l.frame_code = 32;        // f_code
  l.frame_previous = 48;
  l.frame_instr = 56;       // prev_instr
  l.frame_is_entry = 68;
  l.frame_owner = 69;
  l.code_firstlineno = 72;
  l.code_filename = 112;
  l.code_name = 120;
  l.code_qualname = 128;
  l.code_linetable = 136;
  l.code_bytecode = 184;    // co_code_adaptive
  l.unicode_ascii_data = 48;    // sizeof(PyASCIIObject) (with wstr)
  l.unicode_compact_data = 72;  // sizeof(PyCompactUnicodeObject)
  return l;
}

constexpr PythonLayout make_312() {
  PythonLayout l;
  l.version = 0x030c;
  l.runtime_autotss = 1544;  // _PyRuntime.autoTSSkey
  l.ts_frame = 56;           // PyThreadState.cframe
  l.cframe_frame = 0;        // _PyCFrame.current_frame
  l.frame_code = 0;          // f_code
  l.frame_previous = 8;
  l.frame_instr = 56;        // prev_instr
  l.frame_owner = 70;
  l.owner_cstack = 3;        // FRAME_OWNED_BY_CSTACK: the entry shim
  l.code_firstlineno = 68;
  l.code_filename = 112;
  l.code_name = 120;
  l.code_qualname = 128;
  l.code_linetable = 136;
  l.code_bytecode = 192;
  l.unicode_ascii_data = 40;
  l.unicode_compact_data = 56;
  return l;
}

constexpr PythonLayout make_313() {
  PythonLayout l;
  l.version = 0x030d;
  l.runtime_autotss = 2160;  // _PyRuntime.autoTSSkey
  l.ts_frame = 72;           // PyThreadState.current_frame (no _PyCFrame)
  l.frame_code = 0;          // f_executable
  l.frame_previous = 8;
  l.frame_instr = 56;        // instr_ptr
  l.frame_owner = 70;
  l.owner_cstack = 3;
  l.code_firstlineno = 68;
  l.code_filename = 112;
  l.code_name = 120;
  l.code_qualname = 128;
  l.code_linetable = 136;
  l.code_bytecode = 200;
  l.unicode_ascii_data = 40;
  l.unicode_compact_data = 56;
  return l;
}

constexpr PythonLayout kLayouts[] = {make_311(), make_312(), make_313()};

}  // namespace

const PythonLayout* python_layout(uint32_t version) {
  for (const PythonLayout& l : kLayouts)
    if (l.version == version) return &l;
  return nullptr;
}

std::string python_version_name(uint32_t version) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%u.%u", version >> 8, version & 0xff);
  return buf;
}

const char* python_support_name(uint32_t version) {
  const PythonLayout* l = python_layout(version);
  if (!l) return "unsupported";
  return l->tested ? "tested" : "untested";
}

PythonBinary detect_python(const ElfFile& elf) {
  PythonBinary b;
  auto runtime = elf.find_data_object("_PyRuntime");
  if (!runtime || runtime->vaddr == 0) return b;
  b.is_python = true;
  b.runtime_vaddr = runtime->vaddr;
  if (auto code_type = elf.find_data_object("PyCode_Type")) b.code_type_vaddr = code_type->vaddr;
  if (auto eval = elf.find_function("_PyEval_EvalFrameDefault")) {
    b.eval_vaddr = eval->vaddr;
    b.eval_size = eval->size;
  }
  // Py_Version (3.11+): `const unsigned long Py_Version = PY_VERSION_HEX`.
  if (auto v = elf.find_data_object("Py_Version")) {
    std::vector<uint8_t> bytes = elf.read_at_vaddr(v->vaddr, 4);
    if (bytes.size() == 4) {
      b.version_hex = static_cast<uint32_t>(bytes[0]) | static_cast<uint32_t>(bytes[1]) << 8 |
                      static_cast<uint32_t>(bytes[2]) << 16 | static_cast<uint32_t>(bytes[3]) << 24;
      b.version = b.version_hex >> 16;
    }
  }
  return b;
}

std::optional<uint32_t> glibc_tsd_offset(std::span<const uint8_t> code) {
  // cmp $0x1f,%edi; ja ...; mov %edi,%eax; then add $K,%rax (48 83 c0 K)
  // and shl $4,%rax (48 c1 e0 04) within the first 32 bytes.
  for (size_t i = 0; i + 8 <= code.size() && i < 32; ++i) {
    if (code[i] == 0x48 && code[i + 1] == 0x83 && code[i + 2] == 0xc0 && code[i + 4] == 0x48 &&
        code[i + 5] == 0xc1 && code[i + 6] == 0xe0 && code[i + 7] == 0x04) {
      const uint32_t k = code[i + 3];
      if (k == 0 || k >= 0x80) return std::nullopt;  // sign-extended imm8: not a struct offset
      return k * 16 + 8;
    }
  }
  return std::nullopt;
}

lw_py_proc make_py_proc(const PythonLayout& l, uint32_t tsd_key0, uint64_t runtime_addr) {
  lw_py_proc p{};
  p.version = l.version;
  p.tsd_key0 = tsd_key0;
  p.tss_addr = runtime_addr + l.runtime_autotss;
  p.ts_frame = l.ts_frame;
  p.cframe_frame = l.cframe_frame;
  p.frame_code = l.frame_code;
  p.frame_previous = l.frame_previous;
  p.frame_instr = l.frame_instr;
  p.frame_owner = l.frame_owner;
  p.frame_is_entry = l.frame_is_entry;
  p.code_firstlineno = l.code_firstlineno;
  p.code_bytecode = l.code_bytecode;
  p.owner_cstack = l.owner_cstack;
  return p;
}

}  // namespace lw
