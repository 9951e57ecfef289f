// SPDX-License-Identifier: Apache-2.0
#include "core/analysis/rss_breakdown.h"

#include <dirent.h>

#include <algorithm>
#include <charconv>
#include <unordered_set>
#include <utility>

#include "core/platform/fd.h"

namespace lw {

namespace {

constexpr size_t kMaxRollupBytes = 16u << 10;
constexpr size_t kMaxSmapsBytes = 128u << 20;
constexpr size_t kMaxSmapsLineBytes = 4096 + 256;  // a header: PATH_MAX and its fields
constexpr size_t kMaxSyscallBytes = 512;
constexpr uint32_t kMaxThreads = 65536;
constexpr uint64_t kArenaBytes = 64ull << 20;  // glibc HEAP_MAX_SIZE, 64-bit

std::string_view next_line(std::string_view* text) {
  size_t nl = text->find('\n');
  std::string_view line = text->substr(0, nl);
  text->remove_prefix(nl == std::string_view::npos ? text->size() : nl + 1);
  return line;
}

// "Key:   1234 kB" -> key, bytes. False for anything else or an overflow.
bool parse_kb_field(std::string_view line, std::string_view* key, uint64_t* bytes) {
  size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon > 64) return false;
  *key = line.substr(0, colon);
  std::string_view v = line.substr(colon + 1);
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  uint64_t kb = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), kb);
  if (ec != std::errc() || p == v.data()) return false;
  std::string_view unit(p, static_cast<size_t>(v.data() + v.size() - p));
  if (unit != " kB") return false;
  if (kb > (UINT64_MAX >> 10)) return false;
  *bytes = kb << 10;
  return true;
}

uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

}  // namespace

std::optional<SmapsRollup> parse_smaps_rollup(std::string_view text) {
  SmapsRollup r;
  size_t lines = 0;
  while (!text.empty() && ++lines < 256) {
    std::string_view line = next_line(&text);
    std::string_view key;
    uint64_t bytes = 0;
    if (!parse_kb_field(line, &key, &bytes)) continue;  // the header line, or junk
    if (key == "Rss" && !r.has_rss) {
      r.rss = bytes;
      r.has_rss = true;
    } else if (key == "Anonymous" && !r.has_anonymous) {
      r.anonymous = bytes;
      r.has_anonymous = true;
    } else if (key == "Swap") {
      r.swap = bytes;
    }
  }
  if (!r.has_rss || !r.has_anonymous) return std::nullopt;
  return r;
}

void SmapsParser::feed(std::string_view line) {
  if (line.empty()) return;
  std::string_view key;
  uint64_t bytes = 0;
  if (parse_kb_field(line, &key, &bytes)) {
    if (!have_) return;
    SmapsMapping& m = out_.mappings.back();
    if (key == "Rss") m.rss = bytes;
    else if (key == "Anonymous") m.anonymous = bytes;
    return;
  }
  // Other fields without " kB" (VmFlags, THPeligible, ProtectionKey).
  size_t colon = line.find(':');
  size_t dash = line.find('-');
  if (colon != std::string_view::npos && (dash == std::string_view::npos || colon < dash)) return;
  MapEntry one;
  if (!headers_.parse_one(line, &one) || out_.mappings.size() >= kMaxSmapsMappings ||
      (!out_.mappings.empty() && one.start < out_.mappings.back().map.end)) {
    ++out_.malformed_lines;
    have_ = false;  // its fields are not attributed to the previous mapping
    return;
  }
  SmapsMapping m;
  m.map = std::move(one);
  out_.mappings.push_back(std::move(m));
  have_ = true;
}

ParsedSmaps SmapsParser::take() {
  for (SmapsMapping& m : out_.mappings) {
    // A racy or hostile file may claim more than the mapping's size.
    const uint64_t size = m.map.end - m.map.start;
    m.rss = std::min(m.rss, size);
    m.anonymous = std::min(m.anonymous, m.rss);
  }
  have_ = false;
  return std::exchange(out_, ParsedSmaps{});
}

ParsedSmaps parse_smaps(std::string_view text) {
  SmapsParser parser;
  while (!text.empty()) parser.feed(next_line(&text));
  return parser.take();
}

// Parsed as read (read_lines()): the text of a process with many mappings
// under long paths is never held whole (decision process-cost).
std::optional<ParsedSmaps> read_smaps(pid_t pid) {
  SmapsParser parser;
  Result<size_t> cut = read_lines("/proc/" + std::to_string(pid) + "/smaps", kMaxSmapsBytes, kMaxSmapsLineBytes,
                                  [&](std::string_view line) { parser.feed(line); });
  if (!cut) return std::nullopt;
  ParsedSmaps out = parser.take();
  out.malformed_lines += *cut;
  return out;
}

std::optional<uint64_t> parse_syscall_sp(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.size() > kMaxSyscallBytes) return std::nullopt;
  std::vector<std::string_view> fields;
  while (!text.empty() && fields.size() < 9) {
    size_t sp = text.find(' ');
    fields.push_back(text.substr(0, sp));
    text.remove_prefix(sp == std::string_view::npos ? text.size() : sp + 1);
  }
  if (!text.empty()) return std::nullopt;
  // "nr a1 a2 a3 a4 a5 a6 sp pc" (9) or "-1 sp pc" (3, blocked outside a syscall).
  if (fields.size() != 9 && fields.size() != 3) return std::nullopt;
  std::string_view sp = fields[fields.size() - 2];
  if (sp.size() < 3 || sp[0] != '0' || sp[1] != 'x') return std::nullopt;
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(sp.data() + 2, sp.data() + sp.size(), v, 16);
  if (ec != std::errc() || p != sp.data() + sp.size() || v == 0) return std::nullopt;
  return v;
}

bool is_heap_region(const MapEntry& m) {
  if (m.path == "[heap]") return true;
  return m.path.empty() && m.inode == 0 && m.is_private && m.readable && m.writable &&
         !m.executable && m.start % kArenaBytes == 0 && m.end - m.start <= kArenaBytes;
}

RssRegions classify_smaps(const SmapsRollup& rollup, const ParsedSmaps& smaps,
                          const std::vector<uint64_t>& stack_pointers) {
  RssRegions r;
  r.anon_total = rollup.anonymous;
  r.file_rss = rollup.rss > rollup.anonymous ? rollup.rss - rollup.anonymous : 0;
  std::vector<uint64_t> sps = stack_pointers;
  std::sort(sps.begin(), sps.end());
  for (const SmapsMapping& m : smaps.mappings) {
    const bool stack =
        m.map.path == "[stack]" ||
        (m.map.path.empty() &&
         std::lower_bound(sps.begin(), sps.end(), m.map.start) !=
             std::upper_bound(sps.begin(), sps.end(), m.map.end - 1));
    if (stack) {
      r.stacks = sat_add(r.stacks, m.anonymous);
      ++r.stacks_located;
    } else if (is_heap_region(m.map)) {
      r.heap_regions = sat_add(r.heap_regions, m.anonymous);
    }
  }
  return r;
}

uint64_t heap_chunk_bytes(const TrackedBytes& t) {
  if (!t.glibc) return t.live_heap_requested;
  const uint64_t overhead = t.live_heap_allocations > (UINT64_MAX >> 4)
                                ? UINT64_MAX : t.live_heap_allocations * 16;
  return sat_add(t.live_heap_requested, overhead);
}

RssBreakdown compute_rss_breakdown(const RssRegions& r, const TrackedBytes& t) {
  RssBreakdown b;
  b.valid = true;
  b.anon_total = r.anon_total;
  b.file_rss = r.file_rss;
  b.reserved = t.reserved_mmap;  // never resident: beside anon_total, not in it
  b.threads = r.threads;
  b.stacks_located = r.stacks_located;
  b.stacks = std::min(r.stacks, r.anon_total);
  uint64_t rest = r.anon_total - b.stacks;
  const uint64_t chunks = heap_chunk_bytes(t);
  b.live_heap = std::min(chunks, rest);
  rest -= b.live_heap;
  b.tracked_mmap = std::min(t.live_mmap, rest);
  rest -= b.tracked_mmap;
  b.unattributed_tracked = sat_add(chunks - b.live_heap, t.live_mmap - b.tracked_mmap);
  // Heap regions hold the live heap (large blocks glibc serves by mmap
  // aside: then retention is a lower bound); what they hold beyond it was
  // allocated before attach (and is still held, unseen) or is retained by
  // the allocator: the two cannot be told apart from smaps.
  const uint64_t in_heap = std::min(chunks, r.heap_regions);
  b.held_or_retained = std::min(r.heap_regions - in_heap, rest);
  rest -= b.held_or_retained;
  b.untracked = rest;
  return b;
}

std::optional<RssRegions> read_rss_regions(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid);
  Result<std::string> rollup_text = read_regular_file(dir + "/smaps_rollup", kMaxRollupBytes);
  if (!rollup_text) return std::nullopt;
  std::optional<SmapsRollup> rollup = parse_smaps_rollup(*rollup_text);
  if (!rollup) return std::nullopt;
  std::optional<ParsedSmaps> read = read_smaps(pid);
  if (!read) return std::nullopt;
  ParsedSmaps smaps = std::move(*read);
  std::vector<uint64_t> sps;
  uint32_t threads = 0;
  if (DIR* d = opendir((dir + "/task").c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      if (++threads > kMaxThreads) break;
      Result<std::string> sc =
          read_regular_file(dir + "/task/" + e->d_name + "/syscall", kMaxSyscallBytes);
      if (!sc) continue;
      if (std::optional<uint64_t> sp = parse_syscall_sp(*sc)) sps.push_back(*sp);
    }
    closedir(d);
  }
  RssRegions r = classify_smaps(*rollup, smaps, sps);
  r.threads = std::min(threads, kMaxThreads);
  return r;
}

RssBreakdown RssSampler::sample(pid_t pid, double now, const TrackedBytes& t) {
  Entry& e = cache_[pid];
  if (!e.ok || now - e.read_at >= min_interval_s_ || now < e.read_at) {
    if (std::optional<RssRegions> r = read_rss_regions(pid)) {
      e.regions = *r;
      e.read_at = now;
      e.ok = true;
      ++reads_;
    } else if (!e.ok) {
      cache_.erase(pid);
      return RssBreakdown{};
    }
  }
  RssBreakdown b = compute_rss_breakdown(e.regions, t);
  b.read_at = e.read_at;
  return b;
}

void RssSampler::retain(const std::vector<pid_t>& keep) {
  std::unordered_set<pid_t> k(keep.begin(), keep.end());
  for (auto it = cache_.begin(); it != cache_.end();) {
    it = k.count(it->first) ? std::next(it) : cache_.erase(it);
  }
}

}  // namespace lw
