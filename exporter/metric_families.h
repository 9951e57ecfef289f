// SPDX-License-Identifier: Apache-2.0
// The families of one /metrics scrape, built under the series cap
// (docs/metrics.md, "Series cap"): exporter/metrics.cc's builder.
// Thread-safety: one per scrape, not shared.
#pragma once

#include <cstddef>
#include <deque>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/platform/latency_histogram.h"
#include "exporter/metrics.h"

namespace lw {

// Builds families with a shared series budget: once max_series is reached,
// further series are counted, not emitted. Families are kept in a fixed
// order so the self-monitoring families (added first) always fit.
class MetricFamilies {
 public:
  MetricFamilies(size_t max_series, RenderStats* stats) : max_(max_series), stats_(stats) {}

  prometheus::MetricFamily& family(const std::string& name, const std::string& help, prometheus::MetricType type) {
    auto it = index_.find(name);
    if (it != index_.end()) return out_[it->second];
    index_[name] = out_.size();
    out_.push_back(prometheus::MetricFamily{name, help, type, {}});
    return out_.back();
  }

  // `labels` values must already be sanitized (see clean()): callers
  // sanitize each distinct value once, not once per series.
  void add(prometheus::MetricFamily& f, std::vector<prometheus::ClientMetric::Label> labels, double value) {
    if (stats_->series >= max_) {
      ++stats_->series_dropped;
      return;
    }
    ++stats_->series;
    prometheus::ClientMetric m;
    m.label = std::move(labels);
    switch (f.type) {
      case prometheus::MetricType::Counter: m.counter.value = value; break;
      case prometheus::MetricType::Gauge: m.gauge.value = value; break;
      default: m.untyped.value = value; break;
    }
    f.metric.push_back(std::move(m));
  }

  // One histogram series (counts as one series toward max_series).
  void add_histogram(prometheus::MetricFamily& f, std::vector<prometheus::ClientMetric::Label> labels,
                     const LatencyHistogram& h) {
    if (stats_->series >= max_) {
      ++stats_->series_dropped;
      return;
    }
    ++stats_->series;
    prometheus::ClientMetric m;
    m.label = std::move(labels);
    m.histogram.sample_count = h.count();
    m.histogram.sample_sum = h.sum();
    for (size_t i = 0; i < LatencyHistogram::kBounds.size(); ++i)
      m.histogram.bucket.push_back({h.cumulative(i), LatencyHistogram::kBounds[i]});
    m.histogram.bucket.push_back({h.count(), std::numeric_limits<double>::infinity()});
    f.metric.push_back(std::move(m));
  }

  std::vector<prometheus::MetricFamily> take() {
    std::vector<prometheus::MetricFamily> out;
    for (prometheus::MetricFamily& f : out_)
      if (!f.metric.empty()) out.push_back(std::move(f));
    return out;
  }

 private:
  size_t max_;
  RenderStats* stats_;
  std::deque<prometheus::MetricFamily> out_;  // deque: family() references stay valid
  std::map<std::string, size_t> index_;
};

}  // namespace lw
