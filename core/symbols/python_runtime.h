/* SPDX-License-Identifier: Apache-2.0 */
// CPython interpreters: which version an object is (from the binary, never
// its name), the per-version layout of what leads from a thread to its
// frames and from a code object to its name, file and line, and the
// per-process record the BPF side reads (struct lw_py_proc).
// decision python-frames.
//
// The offsets were taken from each version's own headers (offsetof in a
// program built against Include/internal with Py_BUILD_CORE: Debian's
// 3.11.2, and 3.12.1 and 3.13.0 built from source); the unit tests pin the
// table. 3.11 runs end to end in the integration tests; a version marked
// untested here is read the same way but no test has run it.
// Thread-safety: pure functions and constant tables.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "core/symbols/elf_file.h"
#include "leakwatch_abi.h"

namespace lw {

struct PythonLayout {
  uint32_t version = 0;  // PY_VERSION_HEX >> 16: 0x030b
  bool tested = false;   // an integration test runs this version end to end
  // _PyRuntime: the Py_tss_t autoTSSkey ({int initialized; pthread_key_t key}).
  uint32_t runtime_autotss = 0;
  // PyThreadState -> (_PyCFrame ->) current _PyInterpreterFrame.
  uint16_t ts_frame = 0;
  uint16_t cframe_frame = LW_PY_OFF_NONE;
  // _PyInterpreterFrame (every field below LW_PY_FRAME_HEADER).
  uint16_t frame_code = 0, frame_previous = 0, frame_instr = 0, frame_owner = 0;
  uint16_t frame_is_entry = LW_PY_OFF_NONE;
  uint8_t owner_cstack = 0xff;
  // PyCodeObject.
  uint16_t code_size = 16;  // ob_size: code units of bytecode
  uint16_t code_firstlineno = 0, code_filename = 0, code_name = 0, code_qualname = 0;
  uint16_t code_linetable = 0, code_bytecode = 0;
  // PyUnicodeObject: the compact forms' data follows the struct.
  uint16_t unicode_length = 16, unicode_state = 32;
  uint16_t unicode_ascii_data = 0, unicode_compact_data = 0;
  // PyBytesObject.
  uint16_t bytes_size = 16, bytes_data = 32;
};

// The layout of CPython major.minor (version = PY_VERSION_HEX >> 16), or
// nullptr when the version is not supported (3.8-3.10 have another frame
// layout; later ones are not known yet).
const PythonLayout* python_layout(uint32_t version);

// "3.11" from 0x030b.
std::string python_version_name(uint32_t version);

// What an object mapped into a process tells about CPython.
struct PythonBinary {
  bool is_python = false;      // it holds the interpreter (_PyRuntime)
  uint32_t version = 0;        // PY_VERSION_HEX >> 16; 0 when older than 3.11
  uint32_t version_hex = 0;    // the full Py_Version
  uint64_t runtime_vaddr = 0;  // _PyRuntime
  uint64_t code_type_vaddr = 0;  // PyCode_Type: what a live code object's ob_type is
  uint64_t eval_vaddr = 0, eval_size = 0;  // _PyEval_EvalFrameDefault
};

// Looks for the interpreter in `elf` (an executable or a libpython): its
// dynamic symbols and the Py_Version constant (3.11+) read from the file.
PythonBinary detect_python(const ElfFile& elf);

// "tested", "untested", "unsupported": how well a version is read.
const char* python_support_name(uint32_t version);

// glibc's pthread_getspecific() reads a key below 32 at
//   thread pointer + (key + K) * 16 + 8
// (struct pthread's specific_1stblock). Finds K * 16 + 8, the offset of key
// 0's value, in the function's first bytes (x86-64: `add $K,%rax; shl
// $4,%rax`, as glibc 2.28-2.40 compile it), or nullopt.
std::optional<uint32_t> glibc_tsd_offset(std::span<const uint8_t> code);
// What glibc 2.36 (Debian 12) uses, for when the code does not match.
inline constexpr uint32_t kGlibcTsdOffset = 0x318;

// The BPF side's record for a process: `runtime_addr` is _PyRuntime's
// address in it, `tsd_key0` glibc_tsd_offset(). The BPF side reads the
// interpreter's autoTSSkey at each allocation (it may not exist yet).
lw_py_proc make_py_proc(const PythonLayout& layout, uint32_t tsd_key0, uint64_t runtime_addr);

}  // namespace lw
