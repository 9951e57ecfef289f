// SPDX-License-Identifier: Apache-2.0
#include "exporter/site_label.h"

namespace lw {

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
