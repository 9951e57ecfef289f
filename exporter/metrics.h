/* SPDX-License-Identifier: Apache-2.0 */
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
#include <string_view>
#include <vector>

#include <prometheus/metric_family.h>

#include "exporter/http/http_stats.h"
#include "view/daemon_view.h"

namespace lw {

struct MetricsOptions {
  size_t max_series = 50000;
  // The HTTP front's counters (leakwatch_http_*); null: not exported.
  const HttpFrontStats* http = nullptr;
};

struct RenderStats {
  size_t series = 0;
  size_t series_dropped = 0;  // cut by max_series in this scrape
};

std::vector<prometheus::MetricFamily> build_metric_families(const DaemonSnapshot& snap,
                                                            const MetricsOptions& options,
                                                            RenderStats* stats);

// The help text of a family a kernel counter is exported in (the families
// named in bpf/lw_counters.h), nullptr for a family the exporter does not
// know: a counter added to the list with a new family must be given one.
const char* counter_family_help(std::string_view family);

// The `site` label of a site's series: exporter/site_label.h.

// The text exposition format (version 0.0.4).
std::string render_metrics(const DaemonSnapshot& snap, const MetricsOptions& options,
                           RenderStats* stats = nullptr);

// Writes families in the text exposition format (metrics_text.cc), as
// prometheus-cpp's TextSerializer does, without iostreams. Measured on 10,000 series:
// TextSerializer ~200 M instructions (~70 ms, over the 50 ms budget), this
// one a fraction of that (bench/metrics_bench.cc); the unit test checks
// that both give the same samples.
void serialize_text(const std::vector<prometheus::MetricFamily>& families, std::string& out);

}  // namespace lw
