// SPDX-License-Identifier: Apache-2.0
// `leakwatch top`'s output: the table and the JSON lines, from the view only.
#include "cli/top_printer.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
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

std::string human_duration(double seconds) {
  // Up, but not for a float's dust: 24.0008 is "24s".
  const long s = std::max(0L, std::lround(std::ceil(seconds - 0.01)));
  char buf[32];
  if (s < 60) {
    snprintf(buf, sizeof(buf), "%lds", s);
  } else if (s < 3600) {
    if (s % 60 == 0)
      snprintf(buf, sizeof(buf), "%ldm", s / 60);
    else
      snprintf(buf, sizeof(buf), "%ldm%02lds", s / 60, s % 60);
  } else if ((s % 3600) / 60 == 0) {
    snprintf(buf, sizeof(buf), "%ldh", s / 3600);
  } else {
    snprintf(buf, sizeof(buf), "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  }
  return buf;
}

std::string clip(const std::string& s, size_t width) {
  if (s.size() <= width) return s;
  if (width < 4) return s.substr(0, width);
  return s.substr(0, width - 3) + "...";
}

namespace {

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "...tail" of at most width columns: for paths, whose end says the most.
std::string clip_left(const std::string& s, size_t width) {
  if (s.size() <= width) return s;
  if (width < 4) return s.substr(s.size() - width);
  return "..." + s.substr(s.size() - (width - 3));
}

// Segments joined by `sep` into lines of at most `width`; continuation
// lines start with `indent` spaces. A segment too long for a line of its
// own is cut: from the left when it is a path (keeps the file name).
std::vector<std::string> pack(const std::vector<std::string>& segments, size_t width, const char* sep,
                              size_t indent) {
  std::vector<std::string> lines;
  std::string line;
  const std::string sep_s = sep;
  const std::string pad(std::min(indent, width / 2), ' ');
  for (std::string seg : segments) {
    if (seg.empty()) continue;
    const size_t lead = lines.empty() && line.empty() ? 0 : pad.size();
    if (!line.empty() && line.size() + sep_s.size() + seg.size() <= width) {
      line += sep_s + seg;
      continue;
    }
    if (!line.empty()) lines.push_back(line);
    const size_t room = width > lead ? width - lead : 0;
    if (seg.size() > room) seg = seg.find('/') != std::string::npos ? clip_left(seg, room) : clip(seg, room);
    line = (lines.empty() ? std::string() : pad) + seg;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t j = text.find(' ', i);
    const size_t end = j == std::string::npos ? text.size() : j;
    if (end > i) out.push_back(text.substr(i, end - i));
    i = end + 1;
  }
  return out;
}

void add_lines(std::vector<std::string>& out, const std::vector<std::string>& lines) {
  out.insert(out.end(), lines.begin(), lines.end());
}

// One frame in at most `avail` columns (docs/cli.md, "The text view"):
// first the module goes, then the file's directory, then the function
// name is cut, keeping its start and the file:line.
std::string frame_text(const Frame& f, size_t avail) {
  // The name, or module+offset while (or when) there is none: never "??".
  const std::string fn = frame_display_name(f) + (f.inlined ? " (inlined)" : "");
  const std::string line = std::to_string(f.line);
  const std::string module = f.module.empty() ? "" : " [" + base_name(f.module) + "]";
  const std::string loc = f.file.empty() ? "" : " (" + f.file + ":" + line + ")";
  const std::string loc_short = f.file.empty() ? "" : " (" + base_name(f.file) + ":" + line + ")";
  // How the unwinder found it, when that is worth knowing (frame pointers
  // where there is no CFI: the caller may be skipped).
  const std::string how = f.unwound == "fp" ? " (frame pointer)" : "";
  if (f.language == "python") {  // decision python-frames
    for (const std::string& candidate : {fn + loc + " [python]", fn + loc, fn + loc_short})
      if (candidate.size() <= avail) return candidate;
    return clip(fn + loc_short, avail);
  }
  for (const std::string& candidate : {fn + loc + module + how, fn + loc + module, fn + loc, fn + loc_short})
    if (candidate.size() <= avail) return candidate;
  constexpr size_t kMinName = 8;
  if (loc_short.size() + 3 + kMinName <= avail)
    return fn.substr(0, avail - loc_short.size() - 3) + "..." + loc_short;
  return clip(fn + loc_short, avail);
}

// A site's frames: the first 8; in a stack with Python frames, the first 4,
// then every Python frame (at most 8), with the native frames between them
// folded into one line (`alloc_cpu ... 12 native frames ... keep_outputs`).
void add_frame_lines(std::vector<std::string>& out, const std::vector<Frame>& frames, size_t avail,
                     size_t indent_columns) {
  const std::string indent(indent_columns, ' ');
  size_t python = 0;
  for (const Frame& f : frames) python += f.language == "python";
  if (python == 0) {
    for (size_t i = 0; i < frames.size(); ++i) {
      if (i == 8) {
        out.push_back(indent + "... " + std::to_string(frames.size() - 8) + " more frames");
        break;
      }
      out.push_back(indent + frame_text(frames[i], avail));
    }
    return;
  }
  size_t folded = 0, python_shown = 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    const bool is_python = frames[i].language == "python";
    if (i < 4 || (is_python && python_shown < 8)) {
      if (folded) out.push_back(indent + "... " + std::to_string(folded) + " native frames");
      folded = 0;
      out.push_back(indent + frame_text(frames[i], avail));
      python_shown += is_python;
      continue;
    }
    ++folded;
  }
  if (folded) out.push_back(indent + "... " + std::to_string(folded) + " more frames");
}

// A verdict made on incomplete data (its kind lost allocations or stacks,
// decision unrecorded-per-kind) ends in '*', which the WARNING lines explain.
const char* trend_cell(const SiteSnapshot& site, bool incomplete, char* buf, size_t len) {
  if (site.suspected_leak || site.trend != Trend::kUnknown) {
    snprintf(buf, len, "%s%s", site.suspected_leak ? "LEAK" : trend_name(site.trend), incomplete ? "*" : "");
    return buf;
  }
  if (site.verdict_in_s > 0) {
    snprintf(buf, len, "wait %s", human_duration(site.verdict_in_s).c_str());
    return buf;
  }
  return "unknown";
}

bool write_out(const std::string& text) {
  if (!text.empty() && fwrite(text.data(), 1, text.size(), stdout) != text.size()) return false;
  if (fflush(stdout) != 0) return false;
  return !ferror(stdout);
}

bool write_lines(const std::vector<std::string>& lines, size_t width) {
  std::string text;
  for (const std::string& l : lines) text += clip(l, width) + "\n";
  return write_out(text);
}

// The tensor tier (decision tensor-tier), when a framework library is mapped,
// and GPU memory explained, one line per device (docs/cli.md, "tensors:").
void tensor_lines(const ProcessSnapshot& s, size_t width, std::vector<std::string>& out) {
  const TensorTierInfo& t = s.tensor;
  if (t.state != "none") {
    std::string sources;
    for (const std::string& source : t.sources) sources += (sources.empty() ? "" : ",") + source;
    std::vector<std::string> items = {"[" + t.state + "]"};
    if (!sources.empty()) items.push_back(sources);
    if (!t.gpu_allocator.empty()) items.push_back("GPU allocator " + t.gpu_allocator);
    if (t.state == "on" || t.state == "suspended") {
      char hits[48];
      snprintf(hits, sizeof(hits), "%.0f hits/s", t.hits_per_second);
      items.push_back(hits);
    }
    for (size_t i = 1; i + 1 < items.size(); ++i) items[i] += ",";
    if (!t.reason.empty()) items.back() += ":";
    std::vector<std::string> seg = {"tensors:"};
    seg.insert(seg.end(), items.begin(), items.end());
    for (std::string& w : words(t.reason)) seg.push_back(std::move(w));
    add_lines(out, pack(seg, width, " ", 2));
  }
  for (const GpuExplained& g : s.gpu_explained) {
    const std::string gpu = g.device < 0 ? "GPU (device unknown):" : "GPU " + std::to_string(g.device) + ":";
    if (g.pool_totals)
      add_lines(out, pack({gpu, "tensors " + human_bytes(g.tensors_live_bytes) + ",",
                           "pool cache " + human_bytes(g.cached_bytes) + ",",
                           "outside pool " + human_bytes(g.outside_pool_bytes)},
                          width, " ", 2));
    else if (g.tensors_live_bytes > 0 || t.state != "none")  // a CUDA-only process: its kinds say it all
      add_lines(out, pack({gpu, "tensors " + human_bytes(g.tensors_live_bytes) + ",",
                           "CUDA " + human_bytes(g.cuda_bytes) + ";", "the pool reports no totals"},
                          width, " ", 2));
  }
}

// Who, how much, the allocator, RSS explained, the tensor tier, CPython and
// the filter.
void summary_lines(const ProcessSnapshot& s, size_t width, std::vector<std::string>& out) {
  const std::string who = "leakwatch top: pid " + std::to_string(s.pid) + " (" + s.comm + ")" +
                          (s.final ? " [exited]" : "");
  std::vector<std::string> head = {who, "live " + human_bytes(s.live_bytes) + " in " +
                                              std::to_string(s.live_allocations) + " allocations"};
  // Address space reserved, not live (decision reserved-address-space).
  if (s.reserved_bytes > 0) head.push_back("reserved " + human_bytes(s.reserved_bytes));
  head.push_back("events " + std::to_string(s.kernel_counters[LW_CNT_EVENTS_SEEN]) + " seen, " +
                 std::to_string(s.kernel_counters[LW_CNT_EVENTS_DROPPED_RINGBUF]) + " dropped");
  add_lines(out, pack(head, width, "  ", 2));
  const AllocatorInfo& a = s.allocator;
  std::vector<std::string> alloc = {"allocator:", a.family.empty() ? "-" : a.family,
                                    a.object.empty() ? "(none)" : a.object, "[" + a.support + "]" +
                                                                                (a.reason.empty() ? "" : ":")};
  for (std::string& w : words(a.reason)) alloc.push_back(std::move(w));
  add_lines(out, pack(alloc, width, " ", 2));
  if (s.rss.valid) {  // RSS explained (docs/cli.md, "rss:")
    const RssBreakdown& r = s.rss;
    add_lines(out, pack({"rss: anon " + human_bytes(r.anon_total) + " =",
                         "live heap " + human_bytes(r.live_heap) + ",",
                         "held before attach or retained " + human_bytes(r.held_or_retained) + ",",
                         "tracked mmap " + human_bytes(r.tracked_mmap) + ",",
                         "stacks " + human_bytes(r.stacks) + ",",
                         "untracked " + human_bytes(r.untracked) + ";",
                         "file " + human_bytes(r.file_rss)},
                        width, " ", 2));
  }
  tensor_lines(s, width, out);
  if (s.python.present) {  // the process's CPython (docs/cli.md, `python`)
    std::vector<std::string> py = {"python:", s.python.version, "[" + s.python.support + "]",
                                   s.python.frames ? "frames read" : ""};
    if (!s.python.frames) py.back() = s.python.reason.empty() ? "frames not read yet" : "";
    for (std::string& w : words(s.python.reason)) py.push_back(std::move(w));
    add_lines(out, pack(py, width, " ", 2));
  }
  if (s.live_filter.active()) {
    const LiveFilter& f = s.live_filter;
    std::vector<std::string> filter = {"filter: only allocations"};
    if (f.min_age_ns > 0) filter.push_back("older than " + human_duration(static_cast<double>(f.min_age_ns) / 1e9));
    if (f.min_size > 0) filter.push_back("of at least " + std::to_string(f.min_size) + " B");
    if (f.max_size != UINT64_MAX) filter.push_back("of at most " + std::to_string(f.max_size) + " B");
    add_lines(out, pack(filter, width, " ", 2));
  }
}

// Fair shares (decision fair-shares): what this process lost for holding
// more than its share of the live map or the stack map.
void over_share_lines(const ProcessSnapshot& s, uint32_t k, size_t width, std::vector<std::string>& out) {
  const UnrecordedCounts& u = s.unrecorded.kinds[k];
  const std::string kind = kind_name(k);
  if (u.over_share > 0)
    add_lines(out, pack(words("WARNING: " + std::to_string(u.over_share) + " " + kind + " allocations (" +
                              human_bytes(u.over_share_bytes) +
                              ") of this process not recorded: it or its user held more than its share "
                              "of the live map (limits.fair_share_percent); * = verdict incomplete"),
                        width, " ", 2));
  if (u.stack_over_share > 0)
    add_lines(out, pack(words("WARNING: " + std::to_string(u.stack_over_share) + " " + kind +
                              " allocations of this process recorded without a stack: it or its user "
                              "held more than its share of the stack map (limits.fair_share_percent)"),
                        width, " ", 2));
}

// What was not recorded: the kernel's losses, then this process's own.
void loss_warning_lines(const ProcessSnapshot& s, size_t width, std::vector<std::string>& out) {
  // What the kernel could not record (docs/cli.md, "Warnings"): the
  // figures are a lower bound, and the text view says so.
  if (const uint64_t lost = s.kernel_counters[LW_CNT_LIVE_INSERT_FAILED]; lost > 0)
    add_lines(out, pack(words("warning: " + std::to_string(lost) +
                              " allocations not recorded (kernel live map full: --live-max, "
                              "limits.live_map_entries): live figures are a lower bound"),
                        width, " ", 2));
  if (const uint64_t lost = s.kernel_counters[LW_CNT_STACK_MAP_FULL]; lost > 0)
    add_lines(out, pack(words("warning: " + std::to_string(lost) +
                              " stacks not stored (kernel stack map full: --stack-max, "
                              "limits.stack_map_entries): their bytes show under an unknown stack"),
                        width, " ", 2));
  // This process's own losses (decision unrecorded-per-kind): lost, apart from
  // sampled (estimates) and suspended (frozen). One line per kind and reason; a
  // '*' after a trend marks a site verdict of a kind that lost something.
  for (uint32_t k = 0; k < LW_KIND_MAX; ++k) {
    const UnrecordedCounts& u = s.unrecorded.kinds[k];
    const std::string kind = kind_name(k);
    if (u.map_full > 0) {
      char cov[32];
      snprintf(cov, sizeof(cov), "%.1f%%", 100.0 * unrecorded_coverage(s.kinds[k].allocations, u));
      add_lines(out, pack(words("WARNING: " + std::to_string(u.map_full) + " " + kind + " allocations (" +
                                human_bytes(u.map_full_bytes) +
                                ") of this process not recorded: live map full (--live-max, "
                                "limits.live_map_entries); " + kind + " coverage " + cov +
                                ", live bytes a lower bound; * = verdict incomplete"),
                          width, " ", 2));
    }
    if (u.stack_map_full > 0)
      add_lines(out, pack(words("WARNING: " + std::to_string(u.stack_map_full) + " " + kind +
                                " allocations of this process recorded without a stack: stack map "
                                "full (--stack-max, limits.stack_map_entries); * = verdict incomplete"),
                          width, " ", 2));
    over_share_lines(s, k, width, out);
  }
}

// How to read the figures: sampled, frozen, late probes, a demo window.
void figure_note_lines(const ProcessSnapshot& s, size_t width, std::vector<std::string>& out) {
  if (s.sample_mean_bytes > 0) {
    std::string why;
    if (s.sampling_automatic)
      why = s.sampling_reason == "memory_budget"
                ? " (automatic: its records outgrew its share of the daemon's memory budget)"
            : s.sampling_reason == "live_map_full"
                ? " (automatic: the live map was nearly full)"
                : " (automatic: its records outgrew its share of the live map, --live-max)";
    add_lines(out, pack(words("heap figures are estimates: allocations sampled every " +
                              human_bytes(s.sample_mean_bytes) + " on average" + why),
                        width, " ", 2));
  }
  if (s.time_sampled) {
    char share[96];
    if (s.burst_fraction < 1)
      snprintf(share, sizeof(share), "%.1f%% of the time (each record counts %.0f times)", 100 * s.burst_fraction,
               1 / s.burst_fraction);
    else
      snprintf(share, sizeof(share), "part of the time; exact again now");
    add_lines(out, pack(words(std::string("heap figures are estimates: traced in bursts covering ") + share +
                              ", the frees of what they recorded followed"),
                        width, " ", 2));
  }
  if (const HeapWalkView& w = s.heap_walk; w.walks > 0 || w.undecided > 0) {
    char line[256];
    snprintf(line, sizeof(line),
             "heap settled between bursts by %llu walks of glibc's heap (the last read %s%s); %llu records "
             "undecided (%s) dropped, never shown live",
             static_cast<unsigned long long>(w.walks), human_bytes(w.last_bytes_read).c_str(),
             w.last_complete || w.walks == 0 ? "" : (", stopped: " + w.last_stopped).c_str(),
             static_cast<unsigned long long>(w.undecided), human_bytes(w.undecided_bytes).c_str());
    add_lines(out, pack(words(line), width, " ", 2));
  }
  if (s.heap_stale_since > 0) {
    char when[64];
    snprintf(when, sizeof(when), "%.0f", s.heap_stale_since);
    add_lines(out, pack(words(std::string("heap figures frozen since ") + when + " (unix time): probes detached"),
                        width, " ", 2));
  }
  // Shed for what the daemon held for it (decision process-cost).
  if (!s.shed_reason.empty())
    add_lines(out, pack(words("WARNING: tracing stopped (" + s.shed_reason + "): the daemon held " +
                              human_bytes(s.cost.capped()) + " for this process beside its records" +
                              (s.cost_cap > 0 ? " (cap " + human_bytes(s.cost_cap) + ")" : std::string()) +
                              "; its figures dropped"),
                        width, " ", 2));
  if (s.lifecycle.rescans_deferred > 0)
    add_lines(out, pack(words(std::to_string(s.lifecycle.rescans_deferred) +
                              " rescans of its libraries waited for the lifecycle budget (" +
                              std::to_string(s.lifecycle.events) +
                              " code-mapping changes): probes on a new library may come late"),
                        width, " ", 2));
  const double default_window = AnalysisParams{}.window_s;
  if (s.analysis_window_s > 0 && s.analysis_window_s != default_window)
    add_lines(out, pack(words("analysis window " + human_duration(s.analysis_window_s) +
                              " (demo setting; default " + human_duration(default_window) +
                              "): quicker, less certain verdicts"),
                        width, " ", 2));
}

// One row per site with its stack, or why there are none.
void site_table_lines(const ProcessSnapshot& s, size_t width, std::vector<std::string>& out) {
  if (s.sites.empty()) {
    uint64_t made = 0;
    for (const KindTotals& k : s.kinds) made += k.allocations;
    if (s.live_filter.active() && s.sites_total == 0 && made > 0)
      out.push_back("no live allocations pass the filter");
    else if (made == 0)
      out.push_back("no allocations seen yet");
    else
      out.push_back("no live allocations: " + std::to_string(made) + " made, all freed");
    return;
  }
  int kind_w = 4;
  for (const SiteSnapshot& site : s.sites)
    kind_w = std::max(kind_w, static_cast<int>(std::string(kind_name(site.kind)).size()));
  char row[512];
  // LIVE ALLOCS KIND RATE/s TREND, then the stack id where it fits.
  const size_t row_w = static_cast<size_t>(10 + 1 + 8 + 1 + kind_w + 1 + 10 + 1 + 11);
  const bool stack_col = row_w + 2 + 16 <= width;
  snprintf(row, sizeof(row), "%10s %8s %*s %10s %11s%s", "LIVE", "ALLOCS", kind_w, "KIND", "RATE/s", "TREND",
           stack_col ? "  STACK" : "");
  out.push_back(row);
  constexpr size_t kIndent = 4;
  const size_t avail = width > kIndent ? width - kIndent : 0;
  for (const SiteSnapshot& site : s.sites) {
    char trend[32];
    char stack[24] = "";
    if (stack_col) snprintf(stack, sizeof(stack), "  %016llx", static_cast<unsigned long long>(site.stack_id));
    const std::string rate =
        site.trend == Trend::kUnknown
            ? "-"
            : human_bytes(static_cast<uint64_t>(std::max(0.0, site.leak_rate_bytes_per_second)));
    snprintf(row, sizeof(row), "%10s %8llu %*s %10s %11s%s", human_bytes(site.live_bytes).c_str(),
             static_cast<unsigned long long>(site.live_allocations), kind_w, kind_name(site.kind),
             rate.c_str(), trend_cell(site, s.unrecorded.site_incomplete(site.kind), trend, sizeof(trend)), stack);
    out.push_back(row);
    add_frame_lines(out, site.frames, avail, kIndent);
    if (!site.truncated.empty())
      out.push_back(std::string(kIndent, ' ') + "(stack ends here: " + site.truncated + ")");
    if (!site.symbols_missing.empty())
      out.push_back(std::string(kIndent, ' ') + "(no names: " + site.symbols_missing + ")");
  }
  if (s.sites_total > s.sites.size())
    out.push_back("  ... " + std::to_string(s.sites_total - s.sites.size()) + " more sites");
}

// The text view of one snapshot, one entry per line.
void table_lines(const ProcessSnapshot& s, size_t width, std::vector<std::string>& out) {
  summary_lines(s, width, out);
  loss_warning_lines(s, width, out);
  figure_note_lines(s, width, out);
  site_table_lines(s, width, out);
}

}  // namespace

bool print_snapshot(const ProcessSnapshot& s, bool json, const TextOptions& text) {
  if (json) {
    std::string line = to_json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    line += '\n';
    return write_out(line);
  }
  std::vector<std::string> lines = {""};
  table_lines(s, text.width, lines);
  return write_lines(lines, text.width);
}

bool print_attached(const ProcessSnapshot& s, double interval_s, const TextOptions& text) {
  char interval[32];
  snprintf(interval, sizeof(interval), "%gs", interval_s);
  std::vector<std::string> segments = {
      "leakwatch top: attached to pid " + std::to_string(s.pid) + " (" + s.comm + ");",
      std::string("first table in ") + interval};
  if (s.analysis_min_span_s > 0) {
    segments.back() += ",";
    segments.push_back("trends after " + human_duration(s.analysis_min_span_s) + " of data");
  }
  return write_lines(pack(segments, text.width, " ", 2), text.width);
}

}  // namespace lw
