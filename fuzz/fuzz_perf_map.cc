// SPDX-License-Identifier: Apache-2.0
// Fuzzes the perf-map parser (core/symbols/perf_map.h): /tmp/perf-PID.map is
// written by the traced process. The input is fed in two pieces (a read
// boundary anywhere), under small caps; the entries kept stay disjoint,
// within the caps, and every lookup agrees with the entry it returns.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/symbols/perf_map.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  lw::PerfMapLimits limits;
  limits.max_memory_bytes = 64 * (lw::kPerfMapEntryOverhead + 16);
  limits.max_line_bytes = 256;
  limits.max_name_bytes = 32;
  lw::PerfMap map(limits);
  const size_t cut = size == 0 ? 0 : data[0] % (size + 1);
  map.feed(text.substr(0, cut));
  map.feed(text.substr(cut));
  if (map.memory_bytes() > limits.max_memory_bytes) abort();
  if (map.stats().bytes_read != size) abort();
  // Probe around every byte value's worth of addresses the input names.
  for (size_t i = 0; i + 8 <= size; i += 8) {
    uint64_t addr = 0;
    for (size_t b = 0; b < 8; ++b) addr = (addr << 8) | data[i + b];
    for (uint64_t a : {addr, addr & 0xffff, addr >> 16}) {
      auto s = map.lookup(a);
      if (!s) continue;
      if (a < s->start || a - s->start >= s->size) abort();
      if (s->name.empty() || s->name.size() > limits.max_name_bytes) abort();
      if (s->name.find('\n') != std::string_view::npos) abort();
      // Disjoint: the entry's first and last bytes find the same entry.
      auto first = map.lookup(s->start);
      auto last = map.lookup(s->start + s->size - 1);
      if (!first || !last || first->start != s->start || last->start != s->start) abort();
    }
  }
  map.clear();
  if (map.entries() != 0 || map.memory_bytes() != 0) abort();
  return 0;
}
