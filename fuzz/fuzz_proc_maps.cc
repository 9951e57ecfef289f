// SPDX-License-Identifier: Apache-2.0
// Fuzzes the /proc/PID/maps parser: hostile paths, numbers and line shapes
// are skipped and counted; every entry kept is well formed and lookups in
// the parsed maps agree with a linear scan.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/proc/proc_maps.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  lw::ParsedMaps maps = lw::parse_proc_maps(text);
  uint64_t prev_end = 0;
  for (const lw::MapEntry& m : maps.entries) {
    if (m.start >= m.end || m.start < prev_end) abort();  // sorted, disjoint
    prev_end = m.end;
    // Probe a few addresses: the lookup must find exactly this entry.
    for (uint64_t a : {m.start, m.end - 1, m.start + (m.end - m.start) / 2}) {
      const lw::MapEntry* hit = lw::find_mapping(maps, a);
      if (hit != &m) abort();
    }
  }
  if (!maps.entries.empty() && maps.entries.front().start > 0 &&
      lw::find_mapping(maps, maps.entries.front().start - 1) != nullptr) {
    abort();
  }
  return 0;
}
