// SPDX-License-Identifier: Apache-2.0
// site_label (exporter/metrics.h): the `site` label of the per-site series.
#include "exporter/metrics.h"

#include <string>

#include "core/symbols/symbolizer.h"

namespace lw {

// "leaf_function (file:line)", short, for the `site` label: the innermost
// Python frame where the stack has one (the function that keeps the
// memory, not the interpreter's allocator), else the leaf. Full stacks go
// to the API and pprof, never into labels.
std::string site_label(const SiteSnapshot& s) {
  for (const Frame& f : s.frames) {
    if (f.language != "python") continue;
    std::string out = f.function;
    size_t slash = f.file.rfind('/');
    out += " (" + (slash == std::string::npos ? f.file : f.file.substr(slash + 1)) + ":" +
           std::to_string(f.line) + ")";
    return out;
  }
  for (const Frame& f : s.frames) {
    if (f.function.empty() && f.file.empty()) continue;
    std::string out = frame_display_name(f);
    if (!f.file.empty()) {
      size_t slash = f.file.rfind('/');
      out += " (" + (slash == std::string::npos ? f.file : f.file.substr(slash + 1)) + ":" +
             std::to_string(f.line) + ")";
    }
    return out;
  }
  // Nothing symbolized (yet): the leaf as module+offset.
  return s.frames.empty() ? "unknown" : frame_display_name(s.frames.front());
}

}  // namespace lw
