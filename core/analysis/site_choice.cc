// SPDX-License-Identifier: Apache-2.0
#include "core/analysis/site_choice.h"

#include <algorithm>
#include <numeric>

namespace lw {

std::vector<size_t> choose_sites(std::span<const SiteRank> sites, SiteLimits limits) {
  std::vector<size_t> order(sites.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sites[a].live_bytes > sites[b].live_bytes; });
  const size_t by_live = std::min(limits.by_live, order.size());
  std::vector<size_t> chosen(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(by_live));
  if (limits.by_rate == 0 || by_live == order.size()) return chosen;
  std::vector<size_t> rest(order.begin() + static_cast<std::ptrdiff_t>(by_live), order.end());
  std::stable_sort(rest.begin(), rest.end(), [&](size_t a, size_t b) {
    return sites[a].rate_bytes_per_s > sites[b].rate_bytes_per_s;
  });
  for (size_t i = 0; i < rest.size() && i < limits.by_rate && sites[rest[i]].rate_bytes_per_s > 0; ++i)
    chosen.push_back(rest[i]);
  return chosen;
}

}  // namespace lw
