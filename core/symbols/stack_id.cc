// SPDX-License-Identifier: Apache-2.0
#include "core/symbols/stack_id.h"

#include <cstdio>

namespace lw {

namespace {

// FNV-1a, 64-bit: specified, stable across builds and platforms.
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

void fnv(uint64_t& h, const void* data, size_t len) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < len; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
}

}  // namespace

uint64_t stable_stack_id(const std::vector<Frame>& frames) {
  uint64_t h = kFnvOffset;
  for (const Frame& f : frames) {
    // An inlined frame shares its address with the physical frame after
    // it: hashing it too would change the id when DWARF arrives.
    if (f.inlined) continue;
    if (f.language == "python") {
      // (file, qualified name, line): never the code object's address, so
      // the id is the same in every process and after a restart.
      static const unsigned char kPython[] = {'p', 'y', 0};
      fnv(h, kPython, sizeof(kPython));
      fnv(h, f.file.data(), f.file.size());
      unsigned char sep = 0;
      fnv(h, &sep, 1);
      fnv(h, f.function.data(), f.function.size());
      fnv(h, &sep, 1);
      unsigned char line[4];
      for (int i = 0; i < 4; ++i) line[i] = static_cast<unsigned char>(static_cast<uint32_t>(f.line) >> (8 * i));
      fnv(h, line, sizeof(line));
      continue;
    }
    const std::string& module = f.build_id.empty() ? f.module : f.build_id;
    fnv(h, module.data(), module.size());
    unsigned char sep = 0;
    fnv(h, &sep, 1);
    unsigned char off[8];
    for (int i = 0; i < 8; ++i) off[i] = static_cast<unsigned char>(f.offset >> (8 * i));
    fnv(h, off, sizeof(off));
  }
  return h;
}

std::string stack_id_hex(uint64_t id) {
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(id));
  return buf;
}

}  // namespace lw
