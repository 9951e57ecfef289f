// SPDX-License-Identifier: Apache-2.0
// Fuzzes the RSS breakdown's parsers (/proc/PID/smaps, smaps_rollup,
// task/TID/syscall) and its arithmetic: mappings kept are ascending and
// disjoint with Anonymous <= Rss <= size, and the parts always add up to
// the anonymous total.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "core/analysis/rss_breakdown.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  lw::ParsedSmaps smaps = lw::parse_smaps(text);
  uint64_t prev_end = 0;
  for (const lw::SmapsMapping& m : smaps.mappings) {
    if (m.map.start >= m.map.end || m.map.start < prev_end) abort();
    if (m.anonymous > m.rss || m.rss > m.map.end - m.map.start) abort();
    prev_end = m.map.end;
  }
  lw::SmapsRollup rollup;
  if (auto r = lw::parse_smaps_rollup(text)) rollup = *r;
  std::vector<uint64_t> sps;
  if (auto sp = lw::parse_syscall_sp(text)) sps.push_back(*sp);
  lw::RssRegions regions = lw::classify_smaps(rollup, smaps, sps);
  lw::TrackedBytes t;
  t.glibc = size % 2;
  uint32_t seed = 0;
  if (size >= sizeof(seed)) memcpy(&seed, data, sizeof(seed));
  t.live_heap_requested = seed * 4096ull;
  t.live_heap_allocations = size;
  t.live_mmap = regions.heap_regions / 3;
  lw::RssBreakdown b = lw::compute_rss_breakdown(regions, t);
  if (b.live_heap + b.held_or_retained + b.tracked_mmap + b.stacks + b.untracked != b.anon_total) abort();
  return 0;
}
