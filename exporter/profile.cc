// SPDX-License-Identifier: Apache-2.0
#include "exporter/profile.h"

#include <array>

namespace lw {

PprofInput profile_input(const ProcessSnapshot& snap, double started_unix_s) {
  PprofInput in;
  in.time_nanos = static_cast<int64_t>(snap.timestamp * 1e9);
  in.duration_nanos =
      started_unix_s > 0 ? static_cast<int64_t>((snap.timestamp - started_unix_s) * 1e9) : 0;
  in.comment = "leakwatch pid " + std::to_string(snap.pid) + " (" + snap.comm + ")";
  if (snap.sample_mean_bytes > 0) {
    // Heap values are estimates from byte sampling; the period says at what
    // mean (as Go's MemProfileRate).
    in.sampled = true;
    in.sample_rate_bytes = static_cast<double>(snap.sample_mean_bytes);
    in.comment += "; heap values estimated from allocations sampled every " +
                  std::to_string(snap.sample_mean_bytes) + " bytes on average";
  }
  if (snap.heap_stale_since > 0) in.comment += "; heap figures frozen (probes detached)";
  std::array<KindTotals, LW_KIND_MAX> shown{};
  for (const SiteSnapshot& s : snap.sites) {
    PprofSite p;
    p.frames = s.frames;
    p.kind = kind_name(s.kind);
    p.inuse_bytes = s.live_bytes;
    p.inuse_objects = s.live_allocations;
    p.alloc_bytes = s.allocated_bytes;
    p.alloc_objects = s.allocations;
    KindTotals& k = shown[s.kind];
    k.live_bytes += s.live_bytes;
    k.live_allocations += s.live_allocations;
    k.allocated_bytes += s.allocated_bytes;
    k.allocations += s.allocations;
    in.sites.push_back(std::move(p));
  }
  for (uint32_t kind = 0; kind < LW_KIND_MAX; ++kind) {
    const KindTotals& all = snap.kinds[kind];
    const KindTotals& k = shown[kind];
    if (all.live_bytes == k.live_bytes && all.allocated_bytes == k.allocated_bytes) continue;
    PprofSite other;
    Frame f;
    f.function = "[other sites]";
    other.frames.push_back(f);
    other.kind = kind_name(kind);
    other.inuse_bytes = all.live_bytes - k.live_bytes;
    other.inuse_objects = all.live_allocations - k.live_allocations;
    other.alloc_bytes = all.allocated_bytes - k.allocated_bytes;
    other.alloc_objects = all.allocations - k.allocations;
    in.sites.push_back(std::move(other));
  }
  in.mappings = snap.mappings;
  return in;
}

}  // namespace lw
