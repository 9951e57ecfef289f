/* SPDX-License-Identifier: Apache-2.0 */
// Which of a process's live sites a snapshot shows: the top `by_live` by
// live bytes, then up to `by_rate` more, the fastest-growing of the rest
// (leak rate above 0), so a leak still small shows before it is large
// (docs/cli.md, --top and --top-by-rate; docs/config.md,
// top_sites_per_process). Only those are symbolized.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace lw {

struct SiteLimits {
  size_t by_live = 20;
  size_t by_rate = 20;
  SiteLimits() = default;
  // One figure for both, as the daemon's top_sites_per_process gives it.
  SiteLimits(size_t both) : by_live(both), by_rate(both) {}  // NOLINT(google-explicit-constructor)
  SiteLimits(size_t live, size_t rate) : by_live(live), by_rate(rate) {}
};

// A site as ranked: its live bytes and its leak rate (bytes/s; 0 when the
// analysis has none).
struct SiteRank {
  uint64_t live_bytes = 0;
  double rate_bytes_per_s = 0;
};

// Indices into `sites` of those shown: the by-live ones first, by live
// bytes descending (ties by index), then the by-rate ones, by rate
// descending. At most limits.by_live + limits.by_rate.
std::vector<size_t> choose_sites(std::span<const SiteRank> sites, SiteLimits limits);

}  // namespace lw
