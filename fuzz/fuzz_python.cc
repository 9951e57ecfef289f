// SPDX-License-Identifier: Apache-2.0
// Fuzzes what the daemon reads out of a CPython process (core/symbols/python_frames.h):
// the input is that process's memory, one region at kBase, in which a code
// object, its strings and its location table may point anywhere. Decoding
// must stay in bounds and bounded (strings at most kPyMaxStringChars, tables
// at most kPyMaxLinetableBytes), lines are never negative, and the merge of
// Python frames into a native stack keeps every frame exactly once.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/symbols/python_frames.h"
#include "core/symbols/python_runtime.h"

namespace {

constexpr uint64_t kBase = 0x7f0000000000ull;

class RegionMemory : public lw::TargetMemory {
 public:
  RegionMemory(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool read(uint64_t addr, void* out, size_t len) override {
    if (addr < kBase || addr - kBase > size_ || len > size_ - (addr - kBase)) return false;
    memcpy(out, data_ + (addr - kBase), len);
    return true;
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint32_t versions[] = {0x030b, 0x030c, 0x030d};
  const lw::PythonLayout& l = *lw::python_layout(versions[data[0] % 3]);
  const uint64_t at = kBase + (data[1] % 64) * 8;
  RegionMemory mem(data, size);
  std::optional<lw::PythonCode> code = lw::read_py_code(mem, l, at, 0, std::nullopt);
  if (code) {
    if (code->qualname.size() > 4 * lw::kPyMaxStringChars || code->filename.size() > 4 * lw::kPyMaxStringChars ||
        code->linetable_bytes > lw::kPyMaxLinetableBytes)
      abort();
    for (int lasti : {-2, 0, 2, 64, 1000, static_cast<int>(code->code_units) * 2}) {
      uint64_t read = 0;
      // The table is read only as far as the instruction's entry can be.
      if (lw::read_py_line(mem, *code, lasti, &read) < 0 && code->firstlineno >= 0 && lasti >= 0) abort();
      if (read > (static_cast<uint64_t>(std::max(lasti, 0)) / 2 + 1) * lw::kPyMaxLocationEntryBytes) abort();
    }
  }
  // The input as a location table, too.
  const std::string table(reinterpret_cast<const char*>(data), size);
  for (int lasti = 0; lasti < 64; lasti += 6)
    if (lw::py_line_for_offset(table, 1, lasti) < 0) abort();
  // The merge: bits of the input say which native frames are evaluation
  // frames and which Python frames are entries.
  std::vector<lw::Frame> native(std::min<size_t>(size, 24)), python(std::min<size_t>(size / 2, 24));
  std::vector<bool> is_eval(native.size()), entry(python.size());
  for (size_t i = 0; i < native.size(); ++i) {
    native[i].function = "n" + std::to_string(i);
    is_eval[i] = data[i] & 1;
  }
  for (size_t i = 0; i < python.size(); ++i) {
    python[i].function = "p" + std::to_string(i);
    python[i].language = "python";
    entry[i] = data[i] & 2;
  }
  const std::vector<lw::Frame> merged = lw::merge_python_frames(native, is_eval, python, entry);
  size_t py = 0, nat = 0;
  for (const lw::Frame& f : merged) {
    if (f.language == "python") {
      if (f.function != "p" + std::to_string(py++)) abort();  // in order, each once
    } else {
      while (nat < native.size() && native[nat].function != f.function) ++nat;
      if (nat++ >= native.size()) abort();
    }
  }
  if (py != python.size()) abort();
  return 0;
}
