// SPDX-License-Identifier: Apache-2.0
// `leakwatch top`'s output: the table and the JSON lines, from the view only.
#include "cli/top_printer.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "view/json.h"

namespace lw {

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

namespace {

void print_frame(const Frame& f) {
  std::string where = f.file.empty() ? "" : " (" + f.file + ":" + std::to_string(f.line) + ")";
  if (f.language == "python") {
    printf("%32s %s%s [python]\n", "", f.function.c_str(), where.c_str());
    return;
  }
  printf("%32s %s%s [%s]%s\n", "", f.function.empty() ? "??" : f.function.c_str(), where.c_str(),
         f.module.c_str(), f.unwound == "fp" ? " (frame pointer)" : "");
}

// The first 8 frames; in a stack with Python frames (docs/architecture.md,
// "Python frames"), the first 4, then every Python frame (at most 8) with
// the native frames between them folded into one line.
void print_frames(const std::vector<Frame>& frames) {
  size_t python = 0;
  for (const Frame& f : frames) python += f.language == "python";
  if (python == 0) {
    for (size_t i = 0; i < frames.size(); ++i) {
      if (i == 8) {
        printf("%32s ... %zu more frames\n", "", frames.size() - 8);
        break;
      }
      print_frame(frames[i]);
    }
    return;
  }
  size_t folded = 0, python_shown = 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    const bool is_python = frames[i].language == "python";
    if (i < 4 || (is_python && python_shown < 8)) {
      if (folded) printf("%32s ... %zu native frames\n", "", folded);
      folded = 0;
      print_frame(frames[i]);
      python_shown += is_python;
      continue;
    }
    ++folded;
  }
  if (folded) printf("%32s ... %zu more frames\n", "", folded);
}

void print_table(const ProcessSnapshot& s) {
  printf("\nleakwatch top: pid %d (%s)%s  live %s in %llu allocations  events %llu seen, %llu "
         "dropped\n",
         s.pid, s.comm.c_str(), s.final ? " [exited]" : "", human_bytes(s.live_bytes).c_str(),
         static_cast<unsigned long long>(s.live_allocations),
         static_cast<unsigned long long>(s.kernel_counters[LW_CNT_EVENTS_SEEN]),
         static_cast<unsigned long long>(s.kernel_counters[LW_CNT_EVENTS_DROPPED_RINGBUF]));
  const AllocatorInfo& a = s.allocator;
  printf("allocator: %s %s [%s]%s%s\n", a.family.empty() ? "-" : a.family.c_str(),
         a.object.empty() ? "(none)" : a.object.c_str(), a.support.c_str(),
         a.reason.empty() ? "" : ": ", a.reason.c_str());
  if (s.python.present)
    printf("python: %s [%s]%s%s\n", s.python.version.c_str(), s.python.support.c_str(),
           s.python.frames ? " frames read" : ": ", s.python.reason.c_str());
  if (s.sample_mean_bytes > 0)
    printf("heap figures are estimates: allocations sampled every %s on average\n",
           human_bytes(s.sample_mean_bytes).c_str());
  if (s.heap_stale_since > 0)
    printf("heap figures frozen since %.0f (unix time): probes detached\n", s.heap_stale_since);
  printf("%12s %10s %6s %12s %8s  %s\n", "LIVE", "ALLOCS", "KIND", "RATE/s", "TREND", "STACK");
  for (const SiteSnapshot& site : s.sites) {
    printf("%12s %10llu %6s %12s %8s  %016llx\n", human_bytes(site.live_bytes).c_str(),
           static_cast<unsigned long long>(site.live_allocations), kind_name(site.kind),
           site.trend == Trend::kUnknown
               ? "-"
               : human_bytes(static_cast<uint64_t>(std::max(0.0, site.leak_rate_bytes_per_second)))
                     .c_str(),
           site.suspected_leak ? "LEAK" : trend_name(site.trend),
           static_cast<unsigned long long>(site.stack_id));
    print_frames(site.frames);
    if (!site.truncated.empty())
      printf("%32s (stack ends here: %s)\n", "", site.truncated.c_str());
  }
  if (s.sites_total > s.sites.size())
    printf("  ... %zu more sites\n", s.sites_total - s.sites.size());
  fflush(stdout);
}

}  // namespace

void print_snapshot(const ProcessSnapshot& s, bool json) {
  if (json) {
    std::string line =
        to_json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    fputs(line.c_str(), stdout);
    fputc('\n', stdout);
    fflush(stdout);
  } else {
    print_table(s);
  }
}

}  // namespace lw
