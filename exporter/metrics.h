// Renders the daemon's published snapshot as Prometheus metrics, at scrape
// time (prometheus-cpp's MetricFamily + TextSerializer): every family is
// built fresh from the snapshot, no metric object outlives a scrape, and no
// BPF map or symbolizer is touched. docs/metrics.md lists every metric.
// Label values are sanitized (valid UTF-8, no control characters, bounded).
// The number of series is capped; what is cut is counted.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <prometheus/metric_family.h>

#include "daemon/kernel/daemon.h"

namespace lw {

struct MetricsOptions {
  size_t max_series = 50000;
};

struct RenderStats {
  size_t series = 0;
  size_t series_dropped = 0;  // cut by max_series in this scrape
};

std::vector<prometheus::MetricFamily> build_metric_families(const DaemonSnapshot& snap,
                                                            const MetricsOptions& options,
                                                            RenderStats* stats);

// The text exposition format (version 0.0.4).
std::string render_metrics(const DaemonSnapshot& snap, const MetricsOptions& options,
                           RenderStats* stats = nullptr);

}  // namespace lw
