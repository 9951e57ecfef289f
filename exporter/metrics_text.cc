// SPDX-License-Identifier: Apache-2.0
// serialize_text (exporter/metrics.h): built families in the text exposition
// format (version 0.0.4), byte for byte as prometheus-cpp's TextSerializer
// writes them, without its iostreams.
#include "exporter/metrics.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace lw {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

namespace {

void append_escaped(std::string& out, const std::string& s, bool quote) {
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const char* esc = c == '\\' ? "\\\\" : c == '\n' ? "\\n" : (quote && c == '"') ? "\\\"" : nullptr;
    if (!esc) continue;
    out.append(s, start, i - start);
    out += esc;
    start = i + 1;
  }
  out.append(s, start, std::string::npos);
}

void append_value(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
  } else {
    char buf[64];
    // Integers (every count and byte total) print without exponent or
    // fraction; anything else as the shortest exact representation.
    std::to_chars_result r =
        (v == std::trunc(v) && std::fabs(v) < 9.007199254740992e15)
            ? std::to_chars(buf, buf + sizeof(buf), static_cast<int64_t>(v))
            : std::to_chars(buf, buf + sizeof(buf), v);
    out.append(buf, r.ptr);
  }
}

const char* type_name(MetricType t) {
  switch (t) {
    case MetricType::Counter: return "counter";
    case MetricType::Gauge: return "gauge";
    case MetricType::Summary: return "summary";
    case MetricType::Histogram: return "histogram";
    default: return "untyped";
  }
}

// `{labels}` of a series, with `le` added for a histogram bucket.
void append_labels(std::string& out, const ClientMetric& m, const char* le) {
  if (m.label.empty() && !le) return;
  out += '{';
  bool first = true;
  for (const ClientMetric::Label& l : m.label) {
    if (!first) out += ',';
    first = false;
    out += l.name;
    out += "=\"";
    append_escaped(out, l.value, true);
    out += '"';
  }
  if (le) {
    if (!first) out += ',';
    out += "le=\"";
    out += le;
    out += '"';
  }
  out += '}';
}

// One histogram series: _count, _sum, then a _bucket per bound, in the
// order prometheus-cpp's TextSerializer writes them.
void append_histogram(std::string& out, const std::string& name, const ClientMetric& m) {
  auto line = [&](const char* suffix, const char* le, double v) {
    out += name;
    out += suffix;
    append_labels(out, m, le);
    out += ' ';
    append_value(out, v);
    out += '\n';
  };
  line("_count", nullptr, static_cast<double>(m.histogram.sample_count));
  line("_sum", nullptr, m.histogram.sample_sum);
  for (const ClientMetric::Bucket& b : m.histogram.bucket) {
    // As prometheus-cpp writes `le` (16 significant digits, no exponent for
    // these bounds): the shortest form would be "5e-04".
    char le[32];
    if (std::isinf(b.upper_bound)) {
      snprintf(le, sizeof le, "%s", b.upper_bound > 0 ? "+Inf" : "-Inf");
    } else {
      snprintf(le, sizeof le, "%.16g", b.upper_bound);
    }
    line("_bucket", le, static_cast<double>(b.cumulative_count));
  }
}

}  // namespace

void serialize_text(const std::vector<MetricFamily>& families, std::string& out) {
  for (const MetricFamily& f : families) {
    out += "# HELP ";
    out += f.name;
    out += ' ';
    append_escaped(out, f.help, false);
    out += "\n# TYPE ";
    out += f.name;
    out += ' ';
    out += type_name(f.type);
    out += '\n';
    for (const ClientMetric& m : f.metric) {
      if (f.type == MetricType::Histogram) {
        append_histogram(out, f.name, m);
        continue;
      }
      out += f.name;
      append_labels(out, m, nullptr);
      out += ' ';
      switch (f.type) {
        case MetricType::Counter: append_value(out, m.counter.value); break;
        case MetricType::Gauge: append_value(out, m.gauge.value); break;
        default: append_value(out, m.untyped.value); break;
      }
      out += '\n';
    }
  }
}

}  // namespace lw
